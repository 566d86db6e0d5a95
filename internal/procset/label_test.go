package procset

import (
	"strings"
	"testing"
)

// TestShortArgv: one line, control characters escaped, at most n
// characters with the ellipsis.
func TestShortArgv(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"python3", "-c", "import time\ntime.sleep(1)"}, `python3 -c import time\ntime.sleep(1)`},
		{[]string{"a\x01b"}, `a\x01b`},
		{[]string{strings.Repeat("x", 70)}, strings.Repeat("x", 59) + "…"},
		{nil, ""},
	} {
		if got := ShortArgv(c.argv, 60); got != c.want {
			t.Errorf("ShortArgv(%q) = %q, want %q", c.argv, got, c.want)
		}
	}
}
