package procset

import (
	"strconv"
	"strings"
)

// Label is a member's root frame in a profile of a set: "[pid N] argv…"
// (argv cut to about 60 characters).
func Label(pid int, argv []string) string {
	l := "[pid " + strconv.Itoa(pid) + "]"
	if a := ShortArgv(argv, 60); a != "" {
		l += " " + a
	}
	return l
}

// ShortArgv joins argv with spaces, cut to about n characters (an
// ellipsis says it was cut).
func ShortArgv(argv []string, n int) string {
	s := strings.Join(argv, " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n]) + "…"
	}
	return s
}
