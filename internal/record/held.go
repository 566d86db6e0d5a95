package record

import (
	"context"
	"fmt"
	"time"

	"github.com/pyobs/pyobs/internal/clock"
	"github.com/pyobs/pyobs/internal/session"
)

// HoldsCommand says whether a spawned command is held before its exec for
// this recording (session.Spec.Hold): cpu mode's bpf engine loads its
// walker first and samples the command from its first instruction. The
// engines that read stacks from user space need the interpreter up before
// they start, so they take the command as it runs.
func (o Options) HoldsCommand() bool {
	return (o.Mode == "" || o.Mode == "cpu") && o.Engine != EnginePerf && !o.Native && !o.Async && !o.Greenlets
}

// heldStart is what a held command's start left for the engine: when it
// was released, the observer's and the command's CPU then, and the walker
// already sampling it (nil when it could not be loaded: the engines then
// choose as for a running command, and say why).
type heldStart struct {
	at    time.Time
	cpu0  time.Duration
	tcpu0 float64
	w     *heldWalker
	taken bool // the bpf engine took w: the recording began at the release
	// from: where w's layout came from (flame.Meta.HeldLayout); waited:
	// how long the command was held.
	from   string
	waited time.Duration
}

// startHeld loads the walker for a held command (no layout yet), releases
// the command and waits for its interpreter.
func startHeld(ctx context.Context, s *session.Session, opt Options) (*heldStart, error) {
	h := &heldStart{cpu0: clock.ObserverCPU()}
	h.w, h.from = openHeld(s, opt)
	h.at = time.Now()
	h.tcpu0 = targetCPU(s.Pid)
	if err := s.Release(); err != nil {
		h.close()
		return nil, err
	}
	h.waited = s.HeldFor()
	if err := s.WaitPython(ctx, 0); err != nil {
		h.close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted before pid %d's interpreter was up (the command is ended): %w", s.Pid, err)
		}
		return nil, err
	}
	// At once: the samples until the walk is configured are folded as
	// before the interpreter.
	if h.w != nil && configureHeld(h.w, s) != nil {
		h.close() // the engines choose again (and say why)
	}
	return h, nil
}
