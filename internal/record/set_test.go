package record

import (
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/procset"
)

// TestWithoutRoots: a set that held one process gives the profile that
// process alone gives: the same folded lines and frame table.
func TestWithoutRoots(t *testing.T) {
	a := flame.Frame{Kind: flame.Python, Function: "main", File: "app.py", Line: 3}
	b := flame.Frame{Kind: flame.Python, Function: "work", File: "app.py", Line: 9}
	m := flame.Frame{Kind: flame.State, Function: "[no Python frames]"}
	root := flame.Frame{Kind: flame.Thread, Function: procset.Label(42, []string{"python3", "app.py"})}

	one := flame.New(flame.Meta{Command: "record"})
	one.Add([]flame.Frame{a, b}, 3)
	one.Add([]flame.Frame{m}, 1)
	one.Add([]flame.Frame{a}, 2)

	set := flame.New(flame.Meta{Command: "record"})
	set.Add([]flame.Frame{root, a, b}, 3)
	set.Add([]flame.Frame{root, m}, 1)
	set.Add([]flame.Frame{root, a}, 2)
	got := flame.WithoutRoots(set)

	if got.NumFrames() != one.NumFrames() {
		t.Fatalf("%d frames, want %d", got.NumFrames(), one.NumFrames())
	}
	for i := 0; i < one.NumFrames(); i++ {
		if got.Frame(i) != one.Frame(i) {
			t.Errorf("frame %d: %+v, want %+v", i, got.Frame(i), one.Frame(i))
		}
	}
	fold := func(p *flame.Profile) string {
		var lines []string
		for _, s := range p.Stacks() {
			lines = append(lines, p.FoldedKey(s)+" "+strings.Repeat("x", int(s.Weight)))
		}
		return strings.Join(lines, "\n")
	}
	if fold(got) != fold(one) {
		t.Errorf("folded:\n%s\nwant:\n%s", fold(got), fold(one))
	}
}

func TestProcLabel(t *testing.T) {
	if l := procset.Label(7, []string{"python3", "app.py"}); l != "[pid 7] python3 app.py" {
		t.Errorf("label %q", l)
	}
	long := procset.Label(7, []string{"python3", strings.Repeat("é", 100)})
	if r := []rune(long); len(r) != len("[pid 7] ")+60+1 || !strings.HasSuffix(long, "…") {
		t.Errorf("long argv: %q", long)
	}
	if l := procset.Label(7, nil); l != "[pid 7]" {
		t.Errorf("no argv: %q", l)
	}
}
