//go:build amd64

package kwalk

import (
	"errors"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/pyframes"
)

// codes is a CodeReader whose objects the test replaces and frees.
type codes struct {
	at    map[uint64]*pyframes.CodeSymbol // nil: freed
	reads int
}

func (c *codes) Code(addr uint64) (*pyframes.CodeSymbol, error) {
	c.reads++
	if s := c.at[addr]; s != nil {
		return s, nil
	}
	return nil, errors.New("object has an unexpected type")
}

// TestSymbolizerGenerations: on 3.14+ a name holds for every generation
// between two reads that found the same object, also once the object is
// freed (an import's stacks named after it ended); a sample of a
// generation outside that range is read again; another object at the
// address replaces the entry.
func TestSymbolizerGenerations(t *testing.T) {
	const addr = 0x1000
	mod := &pyframes.CodeSymbol{Function: "<module>", File: "m.py", ID: 1}
	c := &codes{at: map[uint64]*pyframes.CodeSymbol{addr: mod}}
	s := &Symbolizer{P: c, gen: true, cache: map[uint64]*symEntry{}, now: time.Now}
	name := func(gen uint64) string {
		t.Helper()
		sym, err := s.Code(addr, gen)
		if err != nil {
			return "error"
		}
		return sym.Function
	}
	if got := name(5); got != "<module>" || c.reads != 1 {
		t.Fatalf("first read at generation 5: %q after %d reads", got, c.reads)
	}
	if got := name(7); got != "<module>" || c.reads != 2 {
		t.Fatalf("generation 7: %q after %d reads, want a second read", got, c.reads)
	}
	c.at[addr] = nil // freed: the module's import ended
	for _, g := range []uint64{5, 6, 7} {
		if got := name(g); got != "<module>" {
			t.Errorf("generation %d, between two reads of the object: %q, want its name without a read", g, got)
		}
	}
	if c.reads != 2 {
		t.Errorf("%d reads, want none for generations already held", c.reads)
	}
	if got := name(8); got != "error" {
		t.Errorf("generation 8, after the object was freed: %q, want the failed read's error", got)
	}
	if got := name(6); got != "<module>" {
		t.Errorf("generation 6 after a failed read at 8: %q, want the entry kept", got)
	}
	c.at[addr] = &pyframes.CodeSymbol{Function: "other", File: "o.py", ID: 2}
	if got := name(9); got != "other" {
		t.Errorf("generation 9, another object at the address: %q", got)
	}
	if got := name(6); got != "other" || c.reads != 5 {
		// Outside the new entry's range: read again (the reader now
		// finds the other object; the old one's name is gone with it).
		t.Errorf("generation 6 after the address was reused: %q after %d reads, want a read", got, c.reads)
	}
}

// TestSymbolizerNoGenerations: without a generation (≤3.11) a name is
// read again once older than half Revalidate; a failed read keeps it until
// Revalidate after its last check (a program's last samples, named after it
// exited), then drops it (a freed address may be reused: never named from
// a stale entry).
func TestSymbolizerNoGenerations(t *testing.T) {
	const addr = 0x2000
	c := &codes{at: map[uint64]*pyframes.CodeSymbol{addr: {Function: "f", ID: 1}}}
	now := time.Unix(100, 0)
	s := &Symbolizer{P: c, Revalidate: time.Second, cache: map[uint64]*symEntry{}, now: func() time.Time { return now }}
	if _, err := s.Code(addr, 0); err != nil || c.reads != 1 {
		t.Fatalf("first read: %v after %d reads", err, c.reads)
	}
	now = now.Add(400 * time.Millisecond)
	if _, err := s.Code(addr, 0); err != nil || c.reads != 1 {
		t.Fatalf("within half Revalidate: %v after %d reads, want the cached name", err, c.reads)
	}
	now = now.Add(200 * time.Millisecond) // 0.6 s: checked again, found
	if _, err := s.Code(addr, 0); err != nil || c.reads != 2 {
		t.Fatalf("past half Revalidate: %v after %d reads, want a re-check", err, c.reads)
	}
	c.at[addr] = nil                      // the process exited
	now = now.Add(900 * time.Millisecond) // 1.5 s: 0.9 s after the last check
	if sym, err := s.Code(addr, 0); err != nil || sym.Function != "f" || c.reads != 3 {
		t.Fatalf("a failed re-check 0.9 s after the last one: %v, %v after %d reads, want the name kept", sym, err, c.reads)
	}
	now = now.Add(200 * time.Millisecond) // 1.1 s after the last check
	if _, err := s.Code(addr, 0); err == nil {
		t.Fatalf("past Revalidate, freed: want the failed read's error")
	}
	now = now.Add(100 * time.Millisecond)
	if _, err := s.Code(addr, 0); err == nil || c.reads != 5 {
		t.Errorf("after a failed read: err %v after %d reads, want the entry dropped and read again", err, c.reads)
	}
}

// TestSymbolizerCreated: on 3.12/3.13 the generation counts code-object
// creations and each object carries its own co_version. An object found
// with a co_version below the sample's generation was there at the
// sample; one created at or after it was not (the sampled one was freed
// and its address reused): not named, never misnamed. An entry holds from
// its co_version to the counter read before the object was.
func TestSymbolizerCreated(t *testing.T) {
	const addr = 0x3000
	c := &codes{at: map[uint64]*pyframes.CodeSymbol{addr: {Function: "f_0", ID: 1, Version: 10}}}
	counter := uint64(12)
	s := &Symbolizer{P: c, gen: true, created: true, cache: map[uint64]*symEntry{}, now: time.Now,
		counter: func() (uint64, error) { return counter, nil }}
	name := func(gen uint64) (string, error) {
		sym, err := s.Code(addr, gen)
		if err != nil {
			return "", err
		}
		return sym.Function, nil
	}
	if got, err := name(11); got != "f_0" || c.reads != 1 {
		t.Fatalf("generation 11, object created at 10: %q %v after %d reads", got, err, c.reads)
	}
	if got, err := name(12); got != "f_0" || c.reads != 1 {
		t.Errorf("generation 12 (≤ the counter read with it): %q %v after %d reads, want no read", got, err, c.reads)
	}
	// f_0 freed, f_1 created at its address (co_version 13).
	c.at[addr] = &pyframes.CodeSymbol{Function: "f_1", ID: 2, Version: 13}
	counter = 14
	if got, err := name(13); !errors.Is(err, ErrReplaced) {
		t.Errorf("generation 13, f_1 (created at 13) found: %q %v, want ErrReplaced", got, err)
	}
	if got, err := name(12); got != "f_0" {
		t.Errorf("generation 12 after f_1 was found: %q %v, want f_0's entry kept", got, err)
	}
	if got, err := name(14); got != "f_1" {
		t.Errorf("generation 14: %q %v, want f_1", got, err)
	}
	if got, err := name(13); !errors.Is(err, ErrReplaced) {
		t.Errorf("generation 13 once f_1 is cached: %q %v, want ErrReplaced (f_1 did not exist yet)", got, err)
	}
	if s.Stats.Replaced < 2 {
		t.Errorf("Replaced %d, want ≥ 2", s.Stats.Replaced)
	}
	// A counter that ran out: generation 0, checked by age.
	if got, err := name(0); got != "f_1" || err != nil {
		t.Errorf("generation 0: %q %v, want a read by age", got, err)
	}
}
