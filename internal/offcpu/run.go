package offcpu

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"

	"github.com/pyobs/pyobs/internal/capability"
	"github.com/pyobs/pyobs/internal/fallback"
	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/offcpu/schedbpf"
	"github.com/pyobs/pyobs/internal/session"
)

// Run measures the target's waits with the engine opt.Engine asks for:
// auto runs the eBPF engine, else the perf engine, and says why in
// Result.Fallback (and to opt.OnFallback as it happens); --engine bpf and
// --waker have no fallback. A run cut short by an error still returns its
// result with the error. The target must have Python (s.Py).
func Run(ctx context.Context, s *session.Session, opt Options) (*Result, error) {
	want := fallback.Auto
	switch {
	case opt.Engine == EnginePerf || opt.Greenlets: // --greenlets: per-wait intervals in user space
		want = fallback.NoBPF
	case opt.Engine == EngineBPF || opt.Waker: // no waker without eBPF: no fallback
		want = fallback.BPFOnly
	}
	var res *Result
	var err error
	useBPF, why := fallback.Choose(want, func() error {
		res, err = RunBPF(ctx, s, opt)
		if res == nil && errors.Is(err, schedbpf.ErrUnavailable) {
			return err // nothing attached
		}
		return nil
	})
	line := ""
	switch {
	case useBPF:
	case why != nil && want == fallback.BPFOnly:
		return nil, refused(s.Pid, opt.Waker, why)
	default:
		if why != nil {
			line = fmt.Sprintf("eBPF engine unavailable (%s; %s): using the perf engine", fallback.Reason(why), schedbpf.Gate())
			if opt.OnFallback != nil {
				opt.OnFallback(line)
			}
		}
		if s.Held() {
			// The perf engine reads a running interpreter: the held
			// command runs now, observed once its interpreter is up.
			if err := s.Release(); err != nil {
				return nil, err
			}
			if err := s.WaitPython(ctx, 0); err != nil {
				return nil, err
			}
		}
		if s.Set.Many() && opt.SetAsked {
			l := fmt.Sprintf("the perf engine observes pid %d alone: the set's other processes and children are not observed (the bpf engine observes sets)", s.Pid)
			if line != "" {
				line += "; " + l
			} else {
				line = l
			}
			if opt.OnFallback != nil {
				opt.OnFallback(l)
			}
		}
		res, err = runPerf(ctx, s, opt)
	}
	if res == nil {
		return nil, err
	}
	res.Fallback = line
	if len(opt.Exclude) > 0 {
		res.Excluded = exclude(res.Profile, opt.Exclude)
	}
	return res, err
}

// refused is the error of an eBPF-only run that could not load: the gate
// when the kernel said no for lack of privilege.
func refused(pid int, waker bool, err error) error {
	gate := schedbpf.Gate()
	what := "offcpu --engine bpf"
	if waker {
		what = "offcpu --waker (needs the eBPF engine)"
	}
	if fallback.Denied(err) {
		return &capability.GateError{Op: fmt.Sprintf("load the offcpu eBPF program for pid %d", pid), Gate: gate,
			Fix: "run as root, grant CAP_BPF and CAP_PERFMON (setcap cap_bpf,cap_perfmon+ep on pyobs), or use --engine perf",
			Err: errors.Join(capability.ErrPermission, err)}
	}
	return fmt.Errorf("%s: %w (%s)", what, err, gate)
}

// exclude removes the stacks with a frame whose label matches one of res.
func exclude(p *flame.Profile, res []*regexp.Regexp) *Excluded {
	match := make([]int8, p.NumFrames()) // per frame: 0 unknown, 1 yes, -1 no
	us, n := p.Remove(func(s *flame.Stack) bool {
		for _, id := range s.Frames {
			if match[id] == 0 {
				match[id] = -1
				l := p.Frame(id).Label()
				for _, re := range res {
					if re.MatchString(l) {
						match[id] = 1
						break
					}
				}
			}
			if match[id] == 1 {
				return true
			}
		}
		return false
	})
	patterns := make([]string, len(res))
	for i, re := range res {
		patterns[i] = re.String()
	}
	return &Excluded{Patterns: patterns, US: us, Stacks: n}
}

// HoldsCommand says whether a spawned command is held before its exec
// (session.Spec.Hold): the eBPF engine observes it from its first
// instruction (runHeld); the perf engine, and --greenlets which runs it,
// read a running interpreter, so the command just starts.
func (o Options) HoldsCommand() bool { return o.Engine != EnginePerf && !o.Greenlets }

// Validate checks the options as the command line gave them.
func (o Options) Validate() error {
	switch {
	case o.Duration < 0 || o.MinBlock < 0:
		return errors.New("offcpu: --duration and --min-block must not be negative")
	case o.Engine != EngineAuto && o.Engine != EngineBPF && o.Engine != EnginePerf:
		return fmt.Errorf("offcpu: unknown --engine %q (auto, bpf, perf)", o.Engine)
	case o.Waker && o.Engine == EnginePerf:
		return errors.New("offcpu: --waker needs the bpf engine (sched_waking): not with --engine perf")
	case o.Greenlets && (o.Engine == EngineBPF || o.Waker):
		return errors.New("offcpu: --greenlets runs the perf engine (it needs each wait as an interval): not with --engine bpf or --waker")
	}
	return nil
}

// CompileExclude compiles --exclude patterns.
func CompileExclude(patterns []string) ([]*regexp.Regexp, error) {
	var out []*regexp.Regexp
	for _, e := range patterns {
		re, err := regexp.Compile(e)
		if err != nil {
			// The reason in a few words (Go's message repeats the pattern).
			why := err.Error()
			var se *syntax.Error
			if errors.As(err, &se) {
				why = string(se.Code)
			}
			return nil, fmt.Errorf("offcpu: --exclude %q is not a regular expression: %s", e, why)
		}
		out = append(out, re)
	}
	return out, nil
}
