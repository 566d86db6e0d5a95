package session

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// PidError is a -p value that is not a process id.
type PidError struct{ Value string }

func (e *PidError) Error() string {
	if n, err := strconv.Atoi(e.Value); err == nil && n == 0 {
		return "invalid pid 0: -p takes a process id (1 or more); to spawn a program, give -- CMD ARGS"
	}
	return fmt.Sprintf("invalid pid %s: -p takes a process id (a number, 1 or more)", strconv.Quote(e.Value))
}

// pidValue is -p's flag value (a pflag.Value): positive process ids, the
// flag repeated or a comma-separated list, or one line saying why not (not
// Go's strconv text). The first pid is the target; the others go to more.
type pidValue struct {
	p    *int
	more *[]int
}

// PidFlag is the flag value that stores the first -p pid in *p and any
// further ones in *more (nil: one pid only).
func PidFlag(p *int, more *[]int) pidValue { return pidValue{p, more} }

func (v pidValue) Set(s string) error {
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return &PidError{f}
		}
		switch {
		case *v.p == 0 || v.more == nil:
			*v.p = n
		case n != *v.p && !slices.Contains(*v.more, n):
			*v.more = append(*v.more, n)
		}
	}
	return nil
}

func (v pidValue) String() string {
	s := strconv.Itoa(*v.p)
	if v.more != nil {
		for _, n := range *v.more {
			s += "," + strconv.Itoa(n)
		}
	}
	return s
}
func (v pidValue) Type() string { return "pid" }

// FlagError is err, or the *PidError inside it when a -p value was refused
// (without the flag parser's "invalid argument ... for flag" wrapping).
func FlagError(err error) error {
	var pe *PidError
	if errors.As(err, &pe) {
		return pe
	}
	return err
}
