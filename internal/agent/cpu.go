package agent

import (
	"context"
	"sync"
	"time"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/record"
	"github.com/pyobs/pyobs/internal/session"
)

// segmentWindows is how many windows one recording spans: the engine's
// start (the bpf engine's verifier load, ~0.1 s of CPU) is paid once per
// segment, not per window, and the segment's profile — every distinct
// stack of the segment — is dropped at its end, which bounds memory.
const segmentWindows = 20

// cpuRec is the agent's CPU profile: one recording per segment, cut into
// windows. The recording's Stream callback (every look, on the
// recording's goroutine) folds what grew since its last call into pending;
// cut hands pending over. A window therefore holds the samples folded up
// to its cut: a sample still counted in the kernel at the cut (up to one
// look, ≤ 1 s) belongs to the next window.
type cpuRec struct {
	s   *session.Session
	opt record.Options

	mu      sync.Mutex
	pending *flame.Profile
	since   time.Time // the pending profile's start
	err     error     // the recording ended with this
	ended   bool      // no more segments (the target exited, or ctx ended)

	// Read and written on the recording's goroutine only.
	last     map[*flame.Stack]int64
	lastProg record.Progress
	done     chan struct{}
	// remap: the recording's frame id -> pending's (+1; 0: not yet
	// interned), for the pending profile it was built for.
	remap         []int
	remapOf, from *flame.Profile
	ids           []int
}

func startCPU(ctx context.Context, s *session.Session, opt record.Options, window time.Duration) *cpuRec {
	c := &cpuRec{s: s, opt: opt, since: time.Now(), done: make(chan struct{})}
	c.opt.Duration = segmentWindows * window
	c.opt.Stream = c.fold
	// At the agent's rate a look a second is plenty (each look is a
	// wake-up, a map drain and a thread-map refresh).
	c.opt.Look = min(time.Second, window/4)
	go c.loop(ctx)
	return c
}

func (c *cpuRec) loop(ctx context.Context) {
	defer close(c.done)
	for {
		c.last, c.lastProg = map[*flame.Stack]int64{}, record.Progress{}
		prof, err := record.Run(ctx, c.s, c.opt)
		if prof != nil {
			m := prof.Meta
			c.fold(prof, record.Progress{Samples: m.Samples, Lost: m.Lost, Torn: m.Torn, Late: m.Late, AchievedHz: m.AchievedHz})
		}
		if err != nil || ctx.Err() != nil || !c.s.Alive() {
			c.mu.Lock()
			c.err, c.ended = err, true
			c.mu.Unlock()
			return
		}
	}
}

// fold adds to pending what p grew since the last fold.
func (c *cpuRec) fold(p *flame.Profile, pr record.Progress) {
	dSamples := pr.Samples - min(c.lastProg.Samples, pr.Samples)
	dLost, dTorn, dLate := pr.Lost-min(c.lastProg.Lost, pr.Lost), pr.Torn-min(c.lastProg.Torn, pr.Torn), pr.Late-min(c.lastProg.Late, pr.Late)
	c.lastProg = pr
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		m := p.Meta
		m.Samples, m.Lost, m.Torn, m.Late, m.Failed = 0, 0, 0, 0, 0
		m.Mixed = nil
		c.pending = flame.New(m)
	}
	q := c.pending
	q.Meta.Engine, q.Meta.Fallback, q.Meta.AchievedHz = p.Meta.Engine, p.Meta.Fallback, pr.AchievedHz
	q.Meta.Samples += dSamples
	q.Meta.Lost += dLost
	q.Meta.Torn += dTorn
	q.Meta.Late += dLate
	if c.remapOf != q || c.from != p {
		c.remap, c.remapOf, c.from = c.remap[:0], q, p
	}
	// Frames are interned into pending once each, not per look.
	p.EachStack(func(s *flame.Stack) {
		d := s.Weight - c.last[s]
		if d <= 0 {
			return
		}
		c.last[s] = s.Weight
		c.ids = c.ids[:0]
		for _, id := range s.Frames {
			for id >= len(c.remap) {
				c.remap = append(c.remap, 0)
			}
			if c.remap[id] == 0 {
				c.remap[id] = q.Intern(p.Frame(id)) + 1
			}
			c.ids = append(c.ids, c.remap[id]-1)
		}
		q.AddIDsN(c.ids, d, d)
	})
}

// cut returns the CPU profile since the last cut (nil when nothing was
// recorded) and the recording's error once it has ended for good.
func (c *cpuRec) cut() (*flame.Profile, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pending
	c.pending = nil
	now := time.Now()
	if p != nil {
		p.Meta.DurationS = now.Sub(c.since).Seconds()
	}
	c.since = now
	if c.ended {
		return p, c.err
	}
	return p, nil
}
