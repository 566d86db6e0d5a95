//go:build !amd64

package mem

import (
	"context"
	"fmt"

	"github.com/pyobs/pyobs/internal/mem/probebpf"
	"github.com/pyobs/pyobs/internal/session"
)

// probeRun: the probes and the kernel walker read x86_64 registers and
// layouts.
func probeRun(ctx context.Context, s *session.Session, opt Options) (*Result, error) {
	_, err := probebpf.Load(probebpf.Config{Pid: s.Pid})
	return nil, fmt.Errorf("pid %d: %w", s.Pid, err)
}

func nativeBytes(Options) int { return 0 }
