//go:build !amd64

package record

import (
	"context"
	"time"

	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/session"
)

// kernelRec: the in-kernel walker reads x86_64 layouts only.
type kernelRec struct{}

func (r *Recorder) openKernel() (*kernelRec, error) { return nil, kwalk.ErrUnavailable }

func (k *kernelRec) live() func() []int { return nil }

func (r *Recorder) runKernel(context.Context, <-chan time.Time, *kernelRec) error { return nil }

// heldWalker: none here.
type heldWalker struct{}

func openHeld(*session.Session, Options) (*heldWalker, string) { return nil, "" }

func configureHeld(*heldWalker, *session.Session) error { return kwalk.ErrUnavailable }

func (h *heldStart) close() {}
