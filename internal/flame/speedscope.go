package flame

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
)

// SpeedscopeSchema is the $schema of the speedscope file format.
const SpeedscopeSchema = "https://www.speedscope.app/file-format-schema.json"

type ssFile struct {
	Schema             string      `json:"$schema"`
	Shared             ssShared    `json:"shared"`
	Profiles           []ssProfile `json:"profiles"`
	Name               string      `json:"name"`
	ActiveProfileIndex int         `json:"activeProfileIndex"`
	Exporter           string      `json:"exporter"`
}

type ssShared struct {
	Frames []ssFrame `json:"frames"`
}

type ssFrame struct {
	Name string `json:"name"`
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
}

type ssProfile struct {
	Type       string  `json:"type"`
	Name       string  `json:"name"`
	Unit       string  `json:"unit"`
	StartValue int64   `json:"startValue"`
	EndValue   int64   `json:"endValue"`
	Samples    [][]int `json:"samples"`
	Weights    []int64 `json:"weights"`
}

// WriteSpeedscope writes p in the speedscope file format: one "sampled"
// profile per thread when p has Thread frames (the thread frames removed
// from the stacks), else one; each unique stack is one sample, root first,
// with its weight ("none" for sample counts, "microseconds" off-CPU).
// Python frames carry name, file and line; other frames their label.
// The recording's account of itself (lost, torn, …) is in "exporter".
func WriteSpeedscope(w io.Writer, p *Profile) error {
	unit := "none"
	switch p.Meta.Unit {
	case "samples", "":
	case "microseconds", "bytes":
		unit = p.Meta.Unit
	default:
		return fmt.Errorf("can't write speedscope: unknown unit %q (want samples or microseconds)", p.Meta.Unit)
	}
	name := profileName(p.Meta)
	f := ssFile{
		Schema:   SpeedscopeSchema,
		Name:     name,
		Exporter: "pyobs: " + metaSummary(p.Meta),
		Shared:   ssShared{Frames: []ssFrame{}},
	}
	// Frames are shared by label (different addresses of one symbol are
	// one frame), numbered in order of first use.
	byLabel := map[ssFrame]int{}
	ssIndex := make([]int, p.NumFrames())
	for i := range ssIndex {
		ssIndex[i] = -1
	}
	frameIndex := func(id int) int {
		if j := ssIndex[id]; j >= 0 {
			return j
		}
		fr := p.Frame(id)
		sf := ssFrame{Name: fr.Label()}
		if fr.Kind == Python {
			sf = ssFrame{Name: fr.Function, File: fr.File, Line: fr.Line}
		} else if fr.Kind == Native {
			sf.File = fr.File
		}
		j, ok := byLabel[sf]
		if !ok {
			j = len(f.Shared.Frames)
			byLabel[sf] = j
			f.Shared.Frames = append(f.Shared.Frames, sf)
		}
		ssIndex[id] = j
		return j
	}
	for _, g := range splitThreads(p, name) {
		sp := ssProfile{Type: "sampled", Name: g.name, Unit: unit, EndValue: g.weight,
			Samples: make([][]int, 0, len(g.stacks)), Weights: make([]int64, 0, len(g.stacks))}
		for _, s := range g.stacks {
			st := make([]int, len(s.frames))
			for i, id := range s.frames {
				st[i] = frameIndex(id)
			}
			sp.Samples = append(sp.Samples, st)
			sp.Weights = append(sp.Weights, s.weight)
		}
		f.Profiles = append(f.Profiles, sp)
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&f); err != nil {
		return fmt.Errorf("can't write speedscope: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("can't write speedscope: %w", err)
	}
	return nil
}
