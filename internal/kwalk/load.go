//go:build amd64

package kwalk

// Loading goes through internal/bpfload (memlock, the gate and verifier
// errors); what stays here is the walker's own: its config and ring size.

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/procset"
)

// ErrUnavailable wraps every reason the walker could not be loaded (the
// kernel's errno and bpfload's gate or verifier error stay matchable).
var ErrUnavailable = errors.New("in-kernel Python walker unavailable")

type objects struct {
	Prog     *ebpf.Program `ebpf:"kwalk_sample"`
	Tstates  *ebpf.Map     `ebpf:"tstates"`
	Counters *ebpf.Map     `ebpf:"counters"`
	Samples  *ebpf.Map     `ebpf:"samples"`
	Scratch  *ebpf.Map     `ebpf:"scratch"`
	CodesOK  *ebpf.Map     `ebpf:"codes_ok"`
	Win      *ebpf.Map     `ebpf:"win"`
	PyAddrs  *ebpf.Map     `ebpf:"pyaddrs"`
	Counts0  *ebpf.Map     `ebpf:"counts0"`
	Counts1  *ebpf.Map     `ebpf:"counts1"`
	Sel      *ebpf.Map     `ebpf:"sel"`
	CCache   *ebpf.Map     `ebpf:"ccache"`
	Sent     *ebpf.Map     `ebpf:"sent"`
	Urgent   *ebpf.Map     `ebpf:"urgent"`
	KStacks  *ebpf.Map     `ebpf:"kstacks"`
	NatRing  *ebpf.Map     `ebpf:"natstacks"`
	NatBuf   *ebpf.Map     `ebpf:"natbuf"`

	// procset.h's, used with Options.Set.
	Procs           *ebpf.Map     `ebpf:"procs"`
	ProcsetEvents   *ebpf.Map     `ebpf:"procset_events"`
	ProcsetCounters *ebpf.Map     `ebpf:"procset_counters"`
	ProcsetFork     *ebpf.Program `ebpf:"procset_fork"`
	ProcsetExec     *ebpf.Program `ebpf:"procset_exec"`
	ProcsetExit     *ebpf.Program `ebpf:"procset_exit"`
}

func (o *objects) Close() {
	for _, c := range []interface{ Close() error }{o.Prog, o.Tstates, o.Counters, o.Samples, o.Scratch, o.CodesOK, o.Win, o.PyAddrs,
		o.Counts0, o.Counts1, o.Sel, o.CCache, o.Sent, o.Urgent, o.KStacks, o.NatRing, o.NatBuf,
		o.Procs, o.ProcsetEvents, o.ProcsetCounters, o.ProcsetFork, o.ProcsetExec, o.ProcsetExit} {
		if c != nil {
			c.Close()
		}
	}
}

// loadMode says when the walk's configuration is known.
type loadMode int

const (
	atLoad    loadMode = iota // cfg fixed at load (a running target)
	addrsLate                 // the layout fixed at load, the process's addresses after (kwalklate)
	allLate                   // everything after the load (kwalkheld: the verifier explores every version)
)

// load fixes cfg in the object's read-only data (the verifier sees the
// layout as constants) and loads program and maps; set configures
// procset.h (nil: one process, cfg.tgid). For a command held before its
// exec, mode addrsLate loads kwalklate, whose `late` addresses are
// written once its interpreter is up, and allLate kwalkheld, whose whole
// cfg is (the walk waits for its layout: cfg.minor 0); the variable to
// write is returned.
func load(cfg kwalkConfig, ringBytes uint32, set *procset.Options, aggregate, kstacks bool, nativeBytes uint32, mode loadMode) (*objects, *ebpf.Variable, error) {
	if err := bpfload.CheckPidNS(); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var specs kwalkSpecs
	from := loadKwalk
	switch mode {
	case addrsLate:
		from = loadKwalklate // the same program, its addresses writable
	case allLate:
		from = loadKwalkheld // the same program, its cfg writable
	}
	spec, err := bpfload.Spec(from, &specs)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	agg := uint32(0)
	if aggregate {
		agg = 1
	}
	ks := uint32(0)
	if kstacks {
		ks = 1
	} else {
		specs.Kstacks.MaxEntries = 1 // never used: no memory for it
	}
	natWake := uint32(0)
	if nativeBytes > 0 {
		natWake = specs.Natstacks.MaxEntries / 4
	} else {
		specs.Natstacks.MaxEntries = uint32(os.Getpagesize()) // never used
	}
	if err := bpfload.SetVars(bpfload.Var{Spec: specs.Cfg, Value: cfg}, bpfload.Var{Spec: specs.Aggregate, Value: agg},
		bpfload.Var{Spec: specs.KstacksOn, Value: ks}, bpfload.Var{Spec: specs.NativeBytes, Value: nativeBytes},
		bpfload.Var{Spec: specs.NatWake, Value: natWake}); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if set != nil {
		if err := procset.Configure(spec, *set); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	if ringBytes != 0 {
		specs.Samples.MaxEntries = ringBytes
	}
	var o objects
	var to any = &o
	held := struct {
		*objects
		Cfg *ebpf.Variable `ebpf:"cfg"`
	}{objects: &o}
	late := struct {
		*objects
		Late *ebpf.Variable `ebpf:"late"`
	}{objects: &o}
	switch mode {
	case addrsLate:
		to = &late
	case allLate:
		to = &held
	}
	if err := bpfload.Load("the kernel Python walker (perf_event/kwalk_sample)", spec, to); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if mode == addrsLate {
		return &o, late.Late, nil
	}
	return &o, held.Cfg, nil
}
