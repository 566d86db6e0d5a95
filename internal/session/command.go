package session

import (
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// Exit statuses of a command that could not be run, as env(1), timeout(1)
// and shells give them.
const (
	CodeNotFound      = 127 // no such file, or not found in PATH
	CodeNotExecutable = 126 // found, but the kernel would not run it
)

// ExecError: the command after -- could not be run (not found, not
// executable, not a format the kernel runs). Pid is the process that
// tried (a held command's holder), 0 when nothing was started.
type ExecError struct {
	Pid    int
	Argv   string
	Reason string // what the system said, e.g. "no such file or directory"
	Status int    // CodeNotFound or CodeNotExecutable
}

func (e *ExecError) Error() string {
	return fmt.Sprintf("cannot run %s: %s", e.Argv, e.Reason)
}

// Code is the exit status pyobs passes on.
func (e *ExecError) Code() int { return e.Status }

// CheckCommand looks argv0 up as the exec will (PATH when it has no
// slash; the file's execute bits), so that a command that cannot run is
// said before anything is loaded: nil, or an *ExecError.
func CheckCommand(argv0 string) error {
	if _, err := exec.LookPath(argv0); err != nil {
		return CommandError(argv0, err)
	}
	return nil
}

// CommandError turns the error of looking up or executing argv0 into an
// *ExecError: 127 when nothing by that name exists, 126 when it exists but
// cannot be executed. An error that is neither is wrapped, argv0 named.
func CommandError(argv0 string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, exec.ErrNotFound) {
		return &ExecError{Argv: argv0, Reason: "command not found in PATH", Status: CodeNotFound}
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		// exec.LookPath says fs.ErrPermission for a file without execute
		// bits (or a directory) without an errno.
		if errors.Is(err, fs.ErrPermission) {
			return &ExecError{Argv: argv0, Reason: syscall.EACCES.Error(), Status: CodeNotExecutable}
		}
		return fmt.Errorf("can't start %s: %w", argv0, err)
	}
	return errnoError(argv0, errno)
}

func errnoError(argv0 string, errno syscall.Errno) *ExecError {
	st := CodeNotExecutable
	if errno == syscall.ENOENT {
		st = CodeNotFound
	}
	return &ExecError{Argv: argv0, Reason: errno.Error(), Status: st}
}

// The holder reports a failed exec as "ERRNO REASON" (ERRNO 0: not an
// errno, e.g. PATH had no such command).
func holderMessage(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return strconv.Itoa(int(errno)) + " " + errno.Error()
	}
	if errors.Is(err, exec.ErrNotFound) {
		return "0 command not found in PATH"
	}
	if errors.Is(err, fs.ErrPermission) {
		return strconv.Itoa(int(syscall.EACCES)) + " " + syscall.EACCES.Error()
	}
	return "0 " + err.Error()
}

// holderError reads a holderMessage back.
func holderError(pid int, argv0, msg string) *ExecError {
	num, reason, _ := strings.Cut(strings.TrimSpace(msg), " ")
	n, err := strconv.Atoi(num)
	if err != nil {
		return &ExecError{Pid: pid, Argv: argv0, Reason: strings.TrimSpace(msg), Status: CodeNotFound}
	}
	if n > 0 {
		xe := errnoError(argv0, syscall.Errno(n))
		xe.Pid = pid
		return xe
	}
	return &ExecError{Pid: pid, Argv: argv0, Reason: reason, Status: CodeNotFound}
}
