//go:build !amd64

package trace

import (
	"github.com/cilium/ebpf"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/session"
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
