package session

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
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
// (without the flag parser's "invalid argument ... for flag" wrapping), or,
// for a number, duration or switch the flag parser could not read, one
// line naming the flag and the form it takes instead of strconv's or
// time's text.
func FlagError(err error) error {
	var pe *PidError
	if errors.As(err, &pe) {
		return pe
	}
	var ve *pflag.InvalidValueError
	if errors.As(err, &ve) && ve.GetFlag() != nil {
		if want := flagForm(ve.GetFlag().Value.Type()); want != "" {
			f := ve.GetFlag()
			name := "--" + f.Name
			if f.Shorthand != "" {
				name = "-" + f.Shorthand + "/" + name
			}
			return fmt.Errorf("invalid value %s for %s: want %s", strconv.Quote(ve.GetValue()), name, want)
		}
	}
	return err
}

// flagForm says what a flag of the parser's own type takes ("": a value
// of pyobs's own, whose Set already says why in its words).
func flagForm(typ string) string {
	switch typ {
	case "int", "int8", "int16", "int32", "int64":
		return "a whole number"
	case "uint", "uint8", "uint16", "uint32", "uint64":
		return "a whole number, 0 or more"
	case "float32", "float64":
		return "a number"
	case "duration":
		return "a duration such as 500ms, 5s or 2m"
	case "bool":
		return "true or false"
	}
	return ""
}
