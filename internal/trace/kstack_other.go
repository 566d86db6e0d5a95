//go:build !amd64

package trace

import (
	"time"

	"github.com/cilium/ebpf"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
	"github.com/pyobs/pyobs/internal/trace/tracepoint"
)

func walkConfig(s *session.Session) (any, *pyframes.KernelLayout, string) {
	return nil, nil, "the kernel's Python stack walker is x86_64 only"
}

type kstacks struct {
	symErrs  uint64
	firstErr string
}

func newKstacks(*session.Session, *pyframes.KernelLayout, *bpfload.Ring) *kstacks { return &kstacks{} }

func (k *kstacks) drain() {}

func (k *kstacks) lookup(uint64) (*kpath, bool) { return nil, false }

func fillThreads(*ebpf.Map, int, []pyframes.ThreadRef) error { return nil }

type members struct {
	late, stale, pending bool
	lateWhy              string
}

func newMembers(*sites, *tracepoint.Tracer, *pyframes.KernelLayout) *members { return &members{} }

func newSetKstacks(int, *members, *bpfload.Ring) *kstacks { return &kstacks{} }

func (ms *members) tick() {}

func (ms *members) notWalked(int) string { return "" }

func (ms *members) unready(int, int64) bool { return false }

func (r *sites) setWalk(*tracepoint.Config) string {
	return "counts only: the kernel's Python stack walker is x86_64 only"
}

func (r *sites) layoutOnceUp(string) {}

const startLook = 20 * time.Millisecond
