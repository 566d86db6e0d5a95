package sampler

import "errors"

// ErrUnavailable wraps every reason the sampler could not be loaded (the
// kernel's errno and bpfload's gate or verifier error stay matchable).
var ErrUnavailable = errors.New("red's in-kernel sampler unavailable")

// Hit is one sample of one of the target's threads (sample.bpf.c struct hit).
type Hit struct {
	Time  uint64 // CLOCK_MONOTONIC ns: the tick, or the switch-out
	Dur   uint64 // 0: an on-CPU tick; else ns off CPU from Time
	ID    uint64 // the stack's hash (kwalk.Sample.ID); 0: not walked
	Tid   uint32
	Flags uint32 // kwalk.Flag*
}

// Counter slots (K_ in sample.bpf.c).
const (
	kSamples = iota
	kWalked
	kTruncated
	kFaulted
	kInvalid
	kNoPy
	kEmpty
	kNew
	kStackLost
	kHitLost
	kSwitchOut
	kWaits
	kOutFull
	kMax = 16
)

// Counters are the kernel's counts, summed over CPUs.
type Counters struct {
	Samples    uint64 // samples of the target's threads
	Walked     uint64 // whole stacks walked
	Truncated  uint64 // deeper than the limit, or ended short of the outermost frame
	Faulted    uint64 // a page not present: no stack
	Invalid    uint64 // a check failed (torn chain)
	NoPython   uint64 // no thread state for the thread
	NoFrame    uint64 // a thread state without a frame
	Stacks     uint64 // distinct stacks sent
	StackLost  uint64 // stacks not sent: ring full
	HitLost    uint64 // samples not sent: ring full
	SwitchOuts uint64 // switch-outs of the target's threads (each walked)
	Waits      uint64 // waits of at least half a period sent
	OutFull    uint64 // switch-outs not kept: map full
}
