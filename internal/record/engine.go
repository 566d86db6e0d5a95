package record

import (
	"errors"
	"fmt"

	"github.com/pyobs/pyobs/internal/capability"
	"github.com/pyobs/pyobs/internal/fallback"
)

// Engines of cpu mode (Options.Engine).
const (
	EngineAuto = "auto" // bpf, else perf, saying why
	EngineBPF  = "bpf"  // the stack is walked in the kernel at the sample (internal/kwalk)
	EnginePerf = "perf" // the stack is read from user space after the sample
)

// UserSpaceNote is how the footer and --help name the perf engine's way of
// taking stacks.
const UserSpaceNote = "stacks read from user space after the sample"

// engineWant validates opt.Engine against the mode and the options that
// keep the user-space reader (--async, --greenlets, wall, gil).
func engineWant(opt *Options) (fallback.Want, error) {
	switch opt.Engine {
	case "", EngineAuto:
		opt.Engine = EngineAuto
	case EngineBPF, EnginePerf:
	default:
		return 0, fmt.Errorf("unknown engine %q (auto, bpf, perf)", opt.Engine)
	}
	keep := ""
	switch {
	case opt.Mode != "cpu":
		keep = "--mode " + opt.Mode
	case opt.Async:
		keep = "--async"
	case opt.Greenlets:
		keep = "--greenlets"
	}
	if keep != "" {
		if opt.Engine == EngineBPF {
			return 0, fmt.Errorf("--engine bpf is cpu mode's in-kernel stack walk; %s reads stacks from user space", keep)
		}
		return fallback.NoBPF, nil
	}
	switch opt.Engine {
	case EngineBPF:
		return fallback.BPFOnly, nil
	case EnginePerf:
		return fallback.NoBPF, nil
	}
	return fallback.Auto, nil
}

// fallbackLine is the one stderr line of an auto run whose kernel walker
// could not be loaded: why, naming the BPF gate when the kernel refused.
func fallbackLine(why error) string {
	r := fallback.Reason(why)
	if fallback.Denied(why) {
		r += "; " + capability.BPFGate()
	}
	return fmt.Sprintf("in-kernel stack walker unavailable (%s): using the perf engine, %s", r, UserSpaceNote)
}

// refused is the error of --engine bpf when the walker could not load.
func refused(pid int, err error) error {
	if fallback.Denied(err) {
		var ge *capability.GateError
		if errors.As(err, &ge) {
			return err
		}
		return capability.ExplainBPF(fmt.Sprintf("load the in-kernel stack walker for pid %d", pid), err)
	}
	return fmt.Errorf("record --engine bpf: pid %d: %w", pid, err)
}
