package agent

import (
	"context"
	"sync"
	"time"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/offcpu"
	"github.com/pyobs/pyobs/internal/session"
)

// offLook is how often the off-CPU engine looks at the target's threads
// in the agent (its own default is 20 ms): the kernel walks each wait's
// Python stack at the switch-out, so the looks only name new stacks and
// serve threads the walk can't read — a slower look costs the agent less.
const offLook = 500 * time.Millisecond

// offRec runs offcpu span after span; each finished span's profile is
// handed to the next window that takes it.
type offRec struct {
	mu    sync.Mutex
	ready *flame.Profile
	start time.Time // the ready profile's span start
	err   error
	done  chan struct{}
}

func startOff(ctx context.Context, s *session.Session, span time.Duration) *offRec {
	o := &offRec{done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for ctx.Err() == nil && s.Alive() {
			r, err := offcpu.Run(ctx, s, offcpu.Options{Duration: span, Drain: offLook})
			end := time.Now()
			o.mu.Lock()
			if r != nil && r.Profile != nil {
				if o.ready != nil {
					// Not taken yet (a window late): keep the older span's
					// start, fold the newer into it.
					fold(o.ready, r.Profile)
					o.ready.Meta.DurationS += r.Profile.Meta.DurationS
					o.ready.Meta.Samples += r.Profile.Meta.Samples
				} else {
					// The span the engine measured (after its start).
					o.ready, o.start = r.Profile, end.Add(-time.Duration(r.Profile.Meta.DurationS*float64(time.Second)))
				}
			}
			o.err = err
			o.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return o
}

// take returns the finished span's profile, if one is ready (last: wait
// for the span in the making to end first, as it does when ctx ends).
func (o *offRec) take(last bool) (*flame.Profile, time.Time, error) {
	if last {
		select {
		case <-o.done:
		case <-time.After(3 * time.Second):
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	p, start, err := o.ready, o.start, o.err
	o.ready, o.err = nil, nil
	return p, start, err
}

// fold adds src's stacks to dst.
func fold(dst, src *flame.Profile) {
	var frames []flame.Frame
	src.EachStack(func(s *flame.Stack) {
		frames = frames[:0]
		for _, id := range s.Frames {
			frames = append(frames, src.Frame(id))
		}
		dst.Add(frames, s.Weight)
	})
}
