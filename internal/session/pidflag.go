package session

import (
	"errors"
	"fmt"
	"strconv"
)

// PidError is a -p value that is not a process id.
type PidError struct{ Value string }

func (e *PidError) Error() string {
	if n, err := strconv.Atoi(e.Value); err == nil && n == 0 {
		return "invalid pid 0: -p takes a process id (1 or more); to spawn a program, give -- CMD ARGS"
	}
	return fmt.Sprintf("invalid pid %s: -p takes a process id (a number, 1 or more)", strconv.Quote(e.Value))
}

// pidValue is -p's flag value (a pflag.Value): a positive process id, or
// one line saying why not (not Go's strconv text).
type pidValue struct{ p *int }

// PidFlag is the flag value that stores -p in *p.
func PidFlag(p *int) pidValue { return pidValue{p} }

func (v pidValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return &PidError{s}
	}
	*v.p = n
	return nil
}

func (v pidValue) String() string { return strconv.Itoa(*v.p) }
func (v pidValue) Type() string   { return "int" }

// FlagError is err, or the *PidError inside it when a -p value was refused
// (without the flag parser's "invalid argument ... for flag" wrapping).
func FlagError(err error) error {
	var pe *PidError
	if errors.As(err, &pe) {
		return pe
	}
	return err
}
