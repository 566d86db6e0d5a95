//go:build !amd64

package probebpf

import (
	"errors"

	"github.com/cilium/ebpf"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/pyframes"
)

// ErrUnavailable wraps every reason the probes could not be set.
var ErrUnavailable = errors.New("allocator probes unavailable")

// Counter slots (see probebpf.go).
const (
	CCalls = iota
	CTracked
	CLiveAdded
	CFrees
	CFreed
	CNull
	CDropPend
	CDropLive
	CDropLiveEst
	CReplaced
	CUnpaired
	CLiveEst
	CLiveN
	CPyWalked
	CPyTrunc
	CPyFault
	CPyInvalid
	CPyNoPy
	CPyEmpty
	CPyNew
	CPyLost
	CNatSent
	CNatLost
	CNatBytes
	NCounters
)

// Live is one tracked allocation still alive.
type Live struct{ Size, Est, Stack, Ts, Nat uint64 }

// Config of one load.
type Config struct {
	Pid         int
	Binary      string
	Layout      *pyframes.KernelLayout
	TLS         []int64
	MaxFrames   int
	SampleBytes uint64
	LibC        string
	LiveEntries uint32
	NativeBytes int
}

// MaxNativeBytes is the most user stack one tracked call copies.
const MaxNativeBytes = 16384

// NatHead: see probebpf.go.
type NatHead struct {
	Id                                   uint64
	Tid, Len                             uint32
	Ip, Sp, Bp, Bx, R12, R13, R14, R15   uint64
	Ax, Cx, Dx, Si, Di, R8, R9, R10, R11 uint64
}

// DecodeNat: not on this architecture.
func DecodeNat(b []byte) (NatHead, []byte, error) { return NatHead{}, nil, ErrUnavailable }

// Probes: not on this architecture.
type Probes struct {
	Lives           *ebpf.Map
	Ring            *bpfload.Ring
	NatRing         *bpfload.Ring
	Probed, Missing []string
	Inlined         bool
}

// Load refuses: the programs read x86_64 registers.
func Load(cfg Config) (*Probes, error) {
	return nil, errors.Join(ErrUnavailable, bpfload.RequireX86("mem's allocator probes"))
}

func (p *Probes) SetThreads(pid int, refs []pyframes.ThreadRef) error { return ErrUnavailable }
func (p *Probes) Stop(ns uint64) error                                { return ErrUnavailable }
func (p *Probes) Detach()                                             {}
func (p *Probes) Close()                                              {}
func (p *Probes) ReadCounters() ([NCounters]uint64, error) {
	return [NCounters]uint64{}, ErrUnavailable
}

// Missed: nothing runs on this architecture.
func (p *Probes) Missed() uint64 { return 0 }
