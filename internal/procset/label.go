package procset

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Label is a member's root frame in a profile of a set: "[pid N] argv…"
// (argv cut to 60 characters and an ellipsis).
func Label(pid int, argv []string) string {
	l := "[pid " + strconv.Itoa(pid) + "]"
	if a := ShortArgv(argv, 61); a != "" {
		l += " " + a
	}
	return l
}

// ShortArgv is a command line on one line (newlines, tabs and other
// control characters escaped, so it can neither break a line of output nor
// a folded stack) in at most n characters, the rest elided with "…".
func ShortArgv(argv []string, n int) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		for _, r := range a {
			switch {
			case r == '\n':
				b.WriteString(`\n`)
			case r == '\t':
				b.WriteString(`\t`)
			case unicode.IsControl(r):
				fmt.Fprintf(&b, "\\x%02x", r)
			case unicode.Is(unicode.Cf, r): // bidi overrides, zero-width: they reorder or hide text
				fmt.Fprintf(&b, "\\u%04x", r)
			default:
				b.WriteRune(r)
			}
		}
	}
	s := strings.TrimSpace(b.String())
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}
