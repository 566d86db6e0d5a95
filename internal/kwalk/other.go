//go:build !amd64

package kwalk

import (
	"errors"

	"github.com/pyobs/pyobs/internal/pyframes"
)

// ErrUnavailable: the program reads x86_64 layouts (fsbase, LP64 offsets).
var ErrUnavailable = errors.New("in-kernel Python walker unavailable: built for x86_64 only")

// Walker is not available on this architecture.
type Walker struct{}

// Options of a walker.
type Options struct{}

// Open always fails here.
func Open(pid int, l *pyframes.KernelLayout, opt Options) (*Walker, error) {
	return nil, ErrUnavailable
}
