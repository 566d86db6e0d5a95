//go:build !amd64

package offcpu

import (
	"context"

	"github.com/pyobs/pyobs/internal/offcpu/schedbpf"
	"github.com/pyobs/pyobs/internal/session"
)

// RunBPF: the eBPF engine reads x86_64 registers; elsewhere it is absent.
func RunBPF(context.Context, *session.Session, Options) (*Result, error) {
	return nil, schedbpf.ErrUnavailable
}
