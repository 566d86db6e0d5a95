package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/output"
)

func newDiff(g *globals) *cobra.Command {
	var icicle bool
	c := &cobra.Command{
		Use:   "diff BASE NEW [-o diff.svg | --format pprof -o diff.pb.gz]",
		Short: "Differential flame graph of two recordings (pprof or folded, pyobs's or another tool's): NEW's shape, red grew, blue shrank",
		Long: `diff compares two recordings (pprof or folded stacks, told apart by content).
A pprof recording is weighed by its default sample type (else its last, as
go tool pprof does): record's CPU time, offcpu's blocked microseconds (not its
count of waits). Two pprof recordings of different measures (record against
offcpu) are refused; folded stacks do not record their unit, so they compare
with anything and the output names the unit each side was read in.
svg (the default): NEW's flame graph, each frame coloured by the change of its
share of the total from BASE at the same stack (red grew, blue shrank; shares
are normalised by each recording's total, named in the header with its unit);
hovering shows both.
pprof: NEW's samples and BASE's, scaled to NEW's total and negated, labelled
pprof::base=true as go tool pprof -diff_base saves them: go tool pprof -top FILE.`,
		Example: "  pyobs diff before.pb.gz after.pb.gz -o diff.svg\n  pyobs diff before.folded after.folded --format pprof -o diff.pb.gz",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usagef("diff: want two recordings, BASE and NEW; got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runDiff(g, args[0], args[1], icicle) },
	}
	c.Flags().BoolVar(&icicle, "icicle", false, "svg: draw roots at the top")
	return c
}

func runDiff(g *globals, basePath, newPath string, icicle bool) error {
	format := g.format
	if format == "" {
		f, err := flame.FormatFor(g.output)
		if err != nil {
			return usagef("diff: -o: %w: give --format (svg, pprof) or a known extension", err)
		}
		format = f
	}
	if format != "svg" && format != "pprof" {
		return usagef("diff: --format %q is not a diff format (svg, pprof)", format)
	}
	if format == "pprof" && !output.ToFile(g.output) {
		return usagef("diff: pprof output is binary: give -o FILE")
	}
	if g.pid != 0 || g.cgroup != "" || g.all || g.children {
		return usagef("diff: reads two recordings, not a process: drop -p, --cgroup, --all, --children")
	}
	base, bw, err := readRecording(basePath)
	if err != nil {
		return err
	}
	newp, nw, err := readRecording(newPath)
	if err != nil {
		return err
	}
	// Shares of different measures (waits' blocked time against CPU
	// time) would colour a graph with nothing real to say.
	if flame.Comparable(bw, nw) != nil {
		return fmt.Errorf("can't compare %s (weighed in %s) with %s (weighed in %s): they measure different things; diff two recordings of one kind (record with record, offcpu with offcpu)",
			basePath, bw, newPath, nw)
	}
	o := flame.DiffOptions{Base: basePath, New: newPath, BaseWeight: bw, NewWeight: nw, Icicle: icicle}
	return output.Write(g.output, 0o644, func(w io.Writer) error {
		if format == "pprof" {
			return flame.WriteDiffPprof(w, base, newp, o)
		}
		return flame.WriteDiffSVG(w, base, newp, o)
	})
}

func readRecording(path string) (*flame.Profile, flame.Weight, error) {
	f, err := os.Open(path)
	if err != nil {
		// A recording that can't be opened is bad input (exit 2), said
		// once: the path, then the reason alone.
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, flame.Weight{}, usagef("diff: can't open %s: %v", path, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return nil, flame.Weight{}, usagef("diff: %s is a directory, not a recording", path)
	}
	p, w, err := flame.ReadProfile(f)
	if err != nil {
		return nil, w, usagef("diff: %s: %w", path, err) // not a recording: bad input
	}
	if p.Total() == 0 {
		return nil, w, fmt.Errorf("%s: no samples: nothing to compare", path)
	}
	return p, w, nil
}
