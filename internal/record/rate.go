package record

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/pyobs/pyobs/internal/capability"
	"github.com/pyobs/pyobs/internal/procfs"
)

// TimerNoteHz is the -F above which wall and gil mode say that their timer
// cannot be honoured whatever the reads cost: each tick reads every
// thread's stack (wall) or the GIL holder's, and a tick that comes while a
// read still runs is dropped.
const TimerNoteHz = 1000

// Honoured is the -F record asks for and, when it differs from what was
// requested or will not be met, one line saying so, for stderr at the
// start. cpu mode: the kernel delivers at most
// kernel.perf_event_max_sample_rate samples per second per CPU (a thread
// runs on one CPU at a time, so that is the most one thread gets; the
// kernel throttles the rest, and lowers the limit itself when sampling
// interrupts take too long), so -F above it is capped there.
func Honoured(fs procfs.FS, mode string, freq int) (int, string) {
	return honoured(fs, mode, freq)
}

// Honour is Honoured on this machine's /proc with the note written to w
// ("pyobs COMMAND: ..."); it returns the -F to record at.
func Honour(w io.Writer, command, mode string, freq int) int {
	hz, note := honoured(procfs.Default(), mode, freq)
	if note != "" {
		fmt.Fprintf(w, "pyobs %s: %s\n", command, note)
	}
	return hz
}

func honoured(fs procfs.FS, mode string, freq int) (int, string) {
	switch mode {
	case "cpu":
		v, err := fs.Sysctl("kernel/perf_event_max_sample_rate")
		limit, err2 := strconv.Atoi(v)
		if err != nil || err2 != nil || limit <= 0 || freq <= limit {
			return freq, ""
		}
		return limit, fmt.Sprintf("-F %d is more than the kernel delivers (kernel.perf_event_max_sample_rate=%d samples/s per CPU): recording at %d Hz", freq, limit, limit)
	case "wall", "gil":
		if freq <= TimerNoteHz {
			return freq, ""
		}
		what := "every thread's stack"
		if mode == "gil" {
			what = "the GIL holder's stack"
		}
		return freq, fmt.Sprintf("-F %d in %s mode: each tick reads %s and a tick that comes while a read runs is dropped, "+
			"so expect less than %d Hz above %d Hz (the achieved rate is reported)", freq, mode, what, freq, TimerNoteHz)
	}
	return freq, ""
}

// WallHint adds to a cpu-mode recording refused by a perf or BPF gate that
// --mode wall needs neither (a timer reads every thread's stack, which
// takes only the ptrace access the target was already opened with); any
// other error is returned as it is.
func WallHint(err error, mode string) error {
	var ge *capability.GateError
	if mode != "cpu" || !errors.As(err, &ge) {
		return err
	}
	if s := strings.ToLower(ge.Op + " " + ge.Gate); !strings.Contains(s, "perf") && !strings.Contains(s, "bpf") {
		return err
	}
	hinted := *ge
	hinted.Fix += "; or record without perf events: --mode wall (a timer reads every thread's stack, on CPU or not)"
	return &hinted
}
