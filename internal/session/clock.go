package session

import (
	"time"

	"github.com/pyobs/pyobs/internal/clock"
)

// MonoNow forwards to clock.MonoNow (kept for cmd/pyobs until it moves).
func MonoNow() int64 { return clock.MonoNow() }

// ObserverCPU forwards to clock.ObserverCPU (kept for cmd/pyobs until it moves).
func ObserverCPU() time.Duration { return clock.ObserverCPU() }
