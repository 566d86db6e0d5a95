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
