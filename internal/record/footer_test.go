package record

import (
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/flame"
)

// TestEngineNoteMapOnly: a recording whose threads agreed on no TLS offset
// says that its "not Python" count may hold new threads' samples.
func TestEngineNoteMapOnly(t *testing.T) {
	m := flame.Meta{Engine: EngineBPF, Exact: 90, NotPython: 10, Samples: 100}
	if s := engineNote(m); strings.Contains(s, "tid map alone") {
		t.Errorf("TLS found, yet: %s", s)
	}
	m.MapOnly = true
	if s := engineNote(m); !strings.Contains(s, "not Python 10 (thread states from the tid map alone") {
		t.Errorf("map only, not said: %s", s)
	}
}

// TestFooterUnobservedStart: a spawned command's time before the recording
// began is said; an attached target's footer says nothing of it.
func TestFooterUnobservedStart(t *testing.T) {
	p := flame.New(flame.Meta{Command: "record", Mode: "cpu", Samples: 5, DurationS: 1})
	if s := Footer(p, ""); strings.Contains(s, "before the recording began") {
		t.Errorf("attached, yet: %s", s)
	}
	p.Meta.UnobservedS = 0.314
	if s := Footer(p, ""); !strings.Contains(s, "the command's first 0.31s (its start-up, the sampler's loading) ran before the recording began") {
		t.Errorf("spawned, not said: %s", s)
	}
}

// TestEngineNoteNoSamples: a recording of a stopped or idle target says
// its CPU per sample is not applicable, not 0.0 µs.
func TestEngineNoteNoSamples(t *testing.T) {
	m := flame.Meta{Engine: EngineBPF, ObserverCPUS: 0.01}
	if s := engineNote(m); !strings.Contains(s, "observer CPU n/a (no samples) per sample") {
		t.Errorf("no samples: %s", s)
	}
	m.Samples = 1000
	if s := engineNote(m); !strings.Contains(s, "observer CPU 10.0 µs per sample") {
		t.Errorf("1000 samples: %s", s)
	}
}

// TestFooterTargetExited: a -p target that exited before -d is said to
// have ended the recording.
func TestFooterTargetExited(t *testing.T) {
	p := flame.New(flame.Meta{Command: "record", Mode: "cpu", Samples: 5, DurationS: 1.4})
	if s := Footer(p, ""); strings.Contains(s, "exited") {
		t.Errorf("not exited, yet: %s", s)
	}
	p.Meta.TargetExited = true
	if s := Footer(p, ""); !strings.Contains(s, "the target exited after 1.4s, which ended the recording") {
		t.Errorf("exited, not said: %s", s)
	}
}
