package record

import (
	"fmt"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/greenlet"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
)

// record --greenlets: a sample of a thread is rooted at the greenlet it was
// running and that greenlet's parents ("[greenlet] NAME" frames, the
// outermost parent first). The running greenlet is named by the function it
// runs (its outermost Python frame), a parent by its type (main for a
// thread's main greenlet, Hub for gevent's hub). A thread's stack is already
// only its running greenlet's: the hub's frames, or any other greenlet's,
// never mix in. The running greenlet is read before and after the stack; a
// switch in between leaves the sample unrooted, counted.

// GreenletStats is record --greenlets' account of itself (weights in samples).
type GreenletStats struct {
	Version    string `json:"greenlet_version,omitempty"`
	InGreenlet uint64 `json:"in_greenlet"` // rooted at their greenlet
	Unknown    uint64 `json:"unknown"`     // the thread's greenlet was not known
	Changed    uint64 `json:"changed"`     // the thread switched greenlets during the read
	Unreadable uint64 `json:"unreadable"`  // its greenlet's chain could not be read
	Scans      int    `json:"scans"`       // full greenlet reads (GC walks)
	Note       string `json:"note,omitempty"`
}

type greenAttr struct {
	tr     *greenlet.Tracker
	cache  map[uint64][]int // per drain: a greenlet's root frames (addresses are reused)
	frames map[string]int
	chain  []greenlet.Link
	stats  GreenletStats
}

func newGreen(s *session.Session) (*greenAttr, error) {
	tr, err := greenlet.NewTracker(s)
	if err != nil {
		return nil, fmt.Errorf("record --greenlets: %w", err)
	}
	return &greenAttr{tr: tr, cache: map[uint64][]int{}, frames: map[string]int{}}, nil
}

func (g *greenAttr) newDrain() { clear(g.cache) }

func (g *greenAttr) running(ts uint64) uint64 { return g.tr.Running(ts) }

// partial: ts runs a greenlet other than its main one, so its frame chain
// ends at that greenlet's run function, not at the thread's first frame.
func (g *greenAttr) partial(ts, running uint64) bool {
	return running != 0 && running != g.tr.Main(ts)
}

// root appends the greenlet frames of the greenlet ts runs; before is the
// one read before the stack.
func (g *greenAttr) root(prof *flame.Profile, ids []int, ts, before uint64, frames []pyframes.Frame, weight int64) []int {
	w := uint64(weight)
	after := g.tr.Running(ts)
	switch {
	case after == 0:
		g.stats.Unknown += w
		return ids
	case after != before:
		g.stats.Changed += w
		return ids
	}
	e, ok := g.cache[after]
	if !ok {
		chain, err := g.tr.Chain(after, g.chain)
		g.chain = chain
		if err == nil {
			for i := len(chain) - 1; i >= 0; i-- {
				name := chain[i].Type
				switch {
				case chain[i].Main:
					name = "main"
				case i == 0 && len(frames) > 0:
					name = frames[len(frames)-1].Function
				}
				e = append(e, g.frame(prof, "[greenlet] "+name))
			}
		}
		g.cache[after] = e
	}
	if e == nil {
		g.stats.Unreadable += w
		return append(ids, g.frame(prof, "[greenlet unreadable]"))
	}
	g.stats.InGreenlet += w
	return append(ids, e...)
}

func (g *greenAttr) frame(prof *flame.Profile, label string) int {
	if id, ok := g.frames[label]; ok {
		return id
	}
	id := prof.Intern(flame.Frame{Kind: flame.State, Function: label})
	if len(g.frames) < 1<<14 {
		g.frames[label] = id
	}
	return id
}

func (g *greenAttr) finish() GreenletStats {
	g.stats.Version, g.stats.Scans = g.tr.Version, g.tr.Scans
	if g.tr.Err != nil {
		g.stats.Note = g.tr.Err.Error()
	}
	return g.stats
}

// GreenletFooter is record --greenlets' account, one line.
func GreenletFooter(p *flame.Profile, a *GreenletStats) string {
	m := p.Meta
	pct := 0.0
	if m.Samples > 0 {
		pct = 100 * float64(a.InGreenlet) / float64(m.Samples)
	}
	s := fmt.Sprintf("pyobs record --greenlets: %d samples rooted at their greenlet (%.1f %%), %d in a thread with no known greenlet, %d greenlet switched during the read, %d greenlet unreadable; %d greenlet scans",
		a.InGreenlet, pct, a.Unknown, a.Changed, a.Unreadable, a.Scans)
	if a.Note != "" {
		s += "; " + a.Note
	}
	return s
}
