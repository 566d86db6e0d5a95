//go:build amd64

package kwalk

// The one place that loads kwalk.bpf.o: memlock, load with the config,
// and the error that says eBPF was refused. (To be switched to the shared
// internal/bpfload package once it lands.)

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
)

// ErrUnavailable wraps every reason the walker could not be loaded.
var ErrUnavailable = errors.New("in-kernel Python walker unavailable")

type objects struct {
	Prog     *ebpf.Program `ebpf:"kwalk_sample"`
	Tstates  *ebpf.Map     `ebpf:"tstates"`
	Counters *ebpf.Map     `ebpf:"counters"`
	Samples  *ebpf.Map     `ebpf:"samples"`
	Scratch  *ebpf.Map     `ebpf:"scratch"`
	CodesOK  *ebpf.Map     `ebpf:"codes_ok"`
	Win      *ebpf.Map     `ebpf:"win"`
}

func (o *objects) Close() {
	for _, c := range []interface{ Close() error }{o.Prog, o.Tstates, o.Counters, o.Samples, o.Scratch, o.CodesOK, o.Win} {
		if c != nil {
			c.Close()
		}
	}
}

// load fixes cfg in the object's read-only data (the verifier sees the
// layout as constants) and loads program and maps.
func load(cfg kwalkConfig, ringBytes uint32) (*objects, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("%w: can't raise RLIMIT_MEMLOCK: %w", ErrUnavailable, err)
	}
	spec, err := loadKwalk()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	v, ok := spec.Variables["cfg"]
	if !ok {
		return nil, fmt.Errorf("%w: kwalk.bpf.o has no variable cfg", ErrUnavailable)
	}
	if err := v.Set(cfg); err != nil {
		return nil, fmt.Errorf("%w: can't set cfg: %w", ErrUnavailable, err)
	}
	if ringBytes != 0 {
		spec.Maps["samples"].MaxEntries = ringBytes
	}
	var o objects
	if err := spec.LoadAndAssign(&o, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("%w: load perf_event/kwalk_sample: %+v", ErrUnavailable, ve)
		}
		return nil, fmt.Errorf("%w: load perf_event/kwalk_sample: %w", ErrUnavailable, err)
	}
	return &o, nil
}
