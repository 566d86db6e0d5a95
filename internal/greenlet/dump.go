package greenlet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/pyobs/pyobs/internal/dump"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
)

// Dump is every greenlet of a process (dump --greenlets, JSON as printed).
// Supported is false when greenlet is not imported or its layout is
// unknown: Note says so, and Stacks still holds every thread's stack.
type Dump struct {
	Schema    int             `json:"schema"`
	Kind      string          `json:"kind"` // "greenlets"
	Pid       int             `json:"pid"`
	Python    dump.PythonInfo `json:"python"`
	Supported bool            `json:"supported"`
	Note      string          `json:"note,omitempty"`
	Version   string          `json:"greenlet_version,omitempty"`
	Layout    string          `json:"layout,omitempty"` // the layout's source
	Module    string          `json:"module,omitempty"` // the _greenlet extension read
	Threads   []ThreadDump    `json:"threads"`
	Read      ReadInfo        `json:"read"`
	Stacks    *dump.Dump      `json:"stacks"`
}

// ThreadDump is one thread's greenlets (Tid 0: its thread was not found).
type ThreadDump struct {
	Tid          int            `json:"tid"`
	ThreadID     uint64         `json:"thread_id"`
	MainGreenlet uint64         `json:"main_greenlet"`
	Running      uint64         `json:"running"` // the greenlet its thread runs now, 0: none known
	Greenlets    []GreenletDump `json:"greenlets"`
}

// GreenletDump is one greenlet. ID is id(greenlet) in the target; Parents
// is its parent chain, nearest first.
type GreenletDump struct {
	ID      uint64           `json:"id"`
	Type    string           `json:"type"`
	Main    bool             `json:"main"`
	State   string           `json:"state"`
	Run     string           `json:"run,omitempty"` // the function it runs (its outermost frame), or its run callable's type
	Parents []uint64         `json:"parents"`
	Frames  []dump.FrameDump `json:"frames"` // innermost first
	Error   string           `json:"error,omitempty"`
}

// ReadInfo is the greenlet read's own account.
type ReadInfo struct {
	Method     string  `json:"method"`
	DurationUS float64 `json:"duration_us"`
	StoppedUS  float64 `json:"target_stopped_us"`
	GCObjects  int     `json:"gc_objects"`
	MemReads   int     `json:"memory_reads"` // by the GC walk
	Retries    int     `json:"gc_retries"`
	Incomplete int     `json:"gc_lists_incomplete"` // changed under every walk: greenlets may be missing
	Vanished   int     `json:"vanished"`            // freed while read: left out
}

// Run reads every greenlet, then every thread's stack (the running
// greenlets' frames are their threads' stacks).
func Run(ctx context.Context, s *session.Session, opt dump.Options) (*Dump, error) {
	d := &Dump{Schema: dump.Version, Kind: "greenlets", Pid: s.Pid, Python: dump.PythonInfo{
		Version: s.Py.Version().String(), Binary: s.Py.Info.Binary, Layout: s.Py.Layout.Source,
	}, Threads: []ThreadDump{}, Read: ReadInfo{Method: "unsynchronised"}}
	maps, err := s.FS.Maps(s.Pid) // every mapping: the thread stacks too
	if err != nil {
		return nil, err
	}
	start := time.Now()
	var snap *Snapshot
	if opt.Lock {
		d.Read.Method = "ptrace-stopped"
		f, ferr := s.Freeze()
		if ferr != nil {
			return nil, ferr
		}
		snap, err = Read(s.Py, maps)
		f.Thaw()
		d.Read.StoppedUS = float64(f.Held.Nanoseconds()) / 1e3
	} else {
		snap, err = Read(s.Py, maps)
	}
	d.Read.DurationUS = float64(time.Since(start).Nanoseconds()) / 1e3
	var unknown *UnknownLayoutError
	switch {
	case errors.As(err, &unknown):
		d.Note = unknown.Error() + ": no greenlets; thread stacks below"
	case errors.Is(err, ErrNotImported):
		d.Note = "greenlet not imported: no greenlets; thread stacks below"
	case err != nil:
		return nil, s.Explain("read the greenlets", err)
	default:
		d.Supported, d.Version, d.Layout, d.Module = true, snap.Version, snap.Layout.Source, snap.Module.Path
		d.Read.GCObjects, d.Read.Retries, d.Read.MemReads, d.Read.Incomplete = snap.Objects, snap.Retries, snap.Reads, snap.Incomplete
		d.Read.Vanished = snap.Vanished
	}
	if d.Stacks, err = dump.Run(ctx, s, opt); err != nil {
		return nil, err
	}
	if snap != nil {
		// A thread running a greenlet other than its main one has a frame
		// chain that starts at that greenlet's run function: the walker,
		// which wants a chain down to the thread's first frame (3.15:
		// tstate->base_frame), calls it torn. Read it again as a partial
		// chain.
		refs, _ := s.Py.ThreadRefs()
		tsOf := map[uint64]uint64{}
		for _, r := range refs {
			tsOf[r.ThreadID] = r.Addr
		}
		reread := func(th *dump.ThreadDump) {
			ts, ok := tsOf[th.ThreadID]
			if th.Consistent || !ok {
				return
			}
			frames, consistent, _, err := s.Py.Stack(ts, pyframes.Options{Partial: true, Locals: opt.Locals})
			if err != nil || !consistent {
				return
			}
			th.Frames, th.Consistent, th.Error = th.Frames[:0], true, ""
			for _, f := range frames {
				th.Frames = append(th.Frames, dump.FrameDump{Function: f.Function, File: f.File, Line: f.Line, Entry: f.Entry, Locals: f.Locals})
			}
			d.Stacks.Read.Torn--
		}
		d.Threads = group(snap, d.Stacks, maps, s.Pid, reread)
	}
	return d, nil
}

// group puts the greenlets under their threads (threadOf). The greenlet a
// thread runs has that thread's Python stack.
func group(snap *Snapshot, stacks *dump.Dump, maps []pyframes.Mapping, pid int, reread func(*dump.ThreadDump)) []ThreadDump {
	byAddr := map[uint64]*Greenlet{}
	for i := range snap.Greenlets {
		byAddr[snap.Greenlets[i].Addr] = &snap.Greenlets[i]
	}
	groups := map[uint64][]*Greenlet{}
	var mains []uint64
	for i := range snap.Greenlets {
		g := &snap.Greenlets[i]
		if _, ok := groups[g.MainGreenlet]; !ok {
			mains = append(mains, g.MainGreenlet)
		}
		groups[g.MainGreenlet] = append(groups[g.MainGreenlet], g)
	}
	var out []ThreadDump
	for _, m := range mains {
		td := ThreadDump{MainGreenlet: m, Greenlets: []GreenletDump{}}
		var th *dump.ThreadDump
		keys := make([]threadKey, len(stacks.Threads))
		for i, t := range stacks.Threads {
			keys[i] = threadKey{tid: t.Tid, pthread: t.ThreadID}
		}
		if i := threadOf(groups[m], keys, maps, pid); i >= 0 {
			th = &stacks.Threads[i]
		}
		if th == nil && len(stacks.Threads) == 1 && len(mains) == 1 {
			th = &stacks.Threads[0] // one thread: it is theirs
		}
		if th != nil {
			td.Tid, td.ThreadID = th.Tid, th.ThreadID
		}
		for _, g := range groups[m] {
			gd := GreenletDump{ID: g.Addr, Type: g.Type, Main: g.Main, State: g.State, Parents: []uint64{}, Frames: []dump.FrameDump{}, Error: g.Err}
			seen := map[uint64]bool{g.Addr: true}
			for p := g.Parent; p != 0 && !seen[p]; {
				seen[p] = true
				gd.Parents = append(gd.Parents, p)
				pg, ok := byAddr[p]
				if !ok {
					break
				}
				p = pg.Parent
			}
			for _, f := range g.Frames {
				gd.Frames = append(gd.Frames, dump.FrameDump{Function: f.Function, File: f.File, Line: f.Line})
			}
			if g.State == StateRunning {
				td.Running = g.Addr
				if th != nil && !g.Main {
					reread(th)
				}
				if th != nil {
					gd.Frames = append(gd.Frames, th.Frames...)
				} else {
					gd.Error = "its thread was not found: its frames are in one of the thread stacks below"
				}
			}
			switch {
			case g.RunType != "":
				gd.Run = g.RunType
			case !g.Main && len(gd.Frames) > 0:
				gd.Run = gd.Frames[len(gd.Frames)-1].Function
			}
			td.Greenlets = append(td.Greenlets, gd)
		}
		// The main greenlet first, then by id.
		sort.SliceStable(td.Greenlets, func(i, j int) bool {
			a, b := td.Greenlets[i], td.Greenlets[j]
			if a.Main != b.Main {
				return a.Main
			}
			return a.ID < b.ID
		})
		out = append(out, td)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Tid < out[j].Tid })
	return out
}

// WriteText prints each thread's greenlets: id, type, state, parent chain,
// frames outermost first (like a traceback); then the thread stacks.
func WriteText(w io.Writer, d *Dump) error {
	if !d.Supported {
		fmt.Fprintf(w, "Process %d: Python %s (%s): %s\n", d.Pid, d.Python.Version, d.Python.Binary, d.Note)
	} else {
		how := "read without stopping the target"
		if d.Read.Method == "ptrace-stopped" {
			how = fmt.Sprintf("read with the target stopped for %.0f µs", d.Read.StoppedUS)
		}
		n := 0
		for _, t := range d.Threads {
			n += len(t.Greenlets)
		}
		fmt.Fprintf(w, "Process %d: Python %s (%s), greenlet %s, %d greenlets, %s in %.0f µs (%d GC objects walked in %d reads)\n",
			d.Pid, d.Python.Version, d.Python.Binary, d.Version, n, how, d.Read.DurationUS, d.Read.GCObjects, d.Read.MemReads)
		fmt.Fprintf(w, "  layout: %s (%s)\n", d.Layout, d.Module)
		if d.Read.Retries > 0 {
			fmt.Fprintf(w, "  GC lists changed while read: walked again %d times\n", d.Read.Retries)
		}
		if d.Read.Vanished > 0 {
			fmt.Fprintf(w, "  %d greenlets freed while read: left out\n", d.Read.Vanished)
		}
		if d.Read.Incomplete > 0 {
			fmt.Fprintf(w, "  %d GC lists changed under every walk: greenlets in them may be missing (--lock reads them stopped)\n", d.Read.Incomplete)
		}
		for _, t := range d.Threads {
			fmt.Fprintln(w)
			tid := "(thread not found)"
			if t.Tid > 0 {
				tid = fmt.Sprintf("Thread %d (thread_id 0x%x)", t.Tid, t.ThreadID)
			}
			fmt.Fprintf(w, "%s: %d greenlets, main greenlet 0x%x\n", tid, len(t.Greenlets), t.MainGreenlet)
			for _, g := range t.Greenlets {
				var tags []string
				if g.Main {
					tags = append(tags, "main")
				}
				if g.Run != "" {
					tags = append(tags, "run "+g.Run)
				}
				if len(g.Parents) > 0 {
					ps := make([]string, len(g.Parents))
					for i, p := range g.Parents {
						ps[i] = fmt.Sprintf("0x%x", p)
					}
					tags = append(tags, "parents "+strings.Join(ps, " <- "))
				}
				fmt.Fprintf(w, "  %s 0x%x [%s] %s\n", g.Type, g.ID, g.State, strings.Join(tags, ", "))
				if g.Error != "" {
					fmt.Fprintf(w, "    (%s)\n", g.Error)
				}
				if len(g.Frames) == 0 && (g.State == StateSuspended || g.State == StateRunning) {
					fmt.Fprintln(w, "    (no Python frames)")
				}
				for i := len(g.Frames) - 1; i >= 0; i-- {
					fr := g.Frames[i]
					fmt.Fprintf(w, "    File \"%s\", line %d, in %s\n", fr.File, fr.Line, fr.Function)
				}
			}
		}
	}
	if d.Stacks != nil {
		fmt.Fprintln(w)
		return dump.WriteText(w, d.Stacks)
	}
	return nil
}

// threadKey identifies a Python thread for threadOf.
type threadKey struct {
	tid     int
	pthread uint64
}

// threadOf finds the thread of one main greenlet's greenlets: their C
// stacks lie in its native stack (the [stack] mapping for the main thread;
// for another, the mapping holding its pthread_t, which glibc keeps at the
// top of the thread's stack). -1: none.
func threadOf(gs []*Greenlet, threads []threadKey, maps []pyframes.Mapping, pid int) int {
	for i, t := range threads {
		var lo, hi uint64
		for _, m := range maps {
			if (t.tid == pid && m.Path == "[stack]") || (t.tid != pid && m.Start <= t.pthread && t.pthread < m.End) {
				lo, hi = m.Start, m.End
				break
			}
		}
		for _, g := range gs {
			if g.CStack != 0 && lo <= g.CStack && g.CStack < hi {
				return i
			}
		}
	}
	return -1
}
