package offcpu

import (
	"encoding/binary"
	"testing"

	"github.com/pyobs/pyobs/internal/perfevent"
)

func TestClassify(t *testing.T) {
	const lo, hi = 0x1000, 0x1100
	for _, c := range []struct {
		w    WaitInfo
		want string
	}{
		{WaitInfo{State: "S", Syscall: "futex", Args: []uint64{0x1080, 0x189}}, ClassGIL},
		{WaitInfo{State: "S", Syscall: "futex", Args: []uint64{0x7fff0000, 0x189}}, ClassLock},
		{WaitInfo{State: "S", Syscall: "futex", Args: []uint64{0x1100}}, ClassLock}, // hi is exclusive
		{WaitInfo{State: "S", Syscall: "clock_nanosleep"}, ClassSleep},
		{WaitInfo{State: "S", Syscall: "nanosleep"}, ClassSleep},
		{WaitInfo{State: "S", Syscall: "read", Args: []uint64{3}, FdLink: "pipe:[1234]"}, ClassPipe},
		{WaitInfo{State: "S", Syscall: "read", Args: []uint64{3}, FdLink: "socket:[1234]"}, ClassNet},
		{WaitInfo{State: "S", Syscall: "read", Args: []uint64{0}, FdLink: "/dev/pts/0"}, ClassDisk},
		{WaitInfo{State: "S", Syscall: "epoll_wait"}, ClassNet},
		{WaitInfo{State: "S", Syscall: "select"}, ClassNet},
		{WaitInfo{State: "S", Syscall: "pselect6", NoFds: true}, ClassSleep},
		{WaitInfo{State: "S", Syscall: "poll", NoFds: true}, ClassSleep},
		{WaitInfo{State: "S", Syscall: "epoll_wait", NoFds: true}, ClassNet}, // never set for it
		{WaitInfo{State: "T", Syscall: "pselect6", NoFds: true}, ClassStopped},
		{WaitInfo{State: "S", Syscall: "recvfrom"}, ClassNet},
		{WaitInfo{State: "D", Syscall: "read", FdLink: "pipe:[1]"}, ClassDisk},
		{WaitInfo{State: "S", Wchan: "io_schedule"}, ClassDisk},
		// vfork waits in D for its child's exec: no device.
		{WaitInfo{State: "D", Syscall: "vfork"}, ClassOther},
		{WaitInfo{State: "D", Syscall: "mprotect", Wchan: "io_schedule"}, ClassDisk},
		{WaitInfo{State: "D"}, ClassDisk}, // a page fault: may be I/O
		{WaitInfo{State: "S", Syscall: "wait4"}, ClassOther},
		{WaitInfo{State: "S"}, ClassOther},
		// A stopped thread shows the call it will restart: the stop wins.
		{WaitInfo{State: "T", Syscall: "futex", Args: []uint64{0x1080}}, ClassStopped},
		{WaitInfo{State: "t", Syscall: "clock_nanosleep"}, ClassStopped},
		{WaitInfo{State: "S", Wchan: "do_signal_stop"}, ClassStopped},
	} {
		if got := Classify(c.w, lo, hi); got != c.want {
			t.Errorf("Classify(%+v) = %q, want %q", c.w, got, c.want)
		}
	}
	// Without a GIL range every futex is a lock.
	if got := Classify(WaitInfo{Syscall: "futex", Args: []uint64{0x1080}}, 0, 0); got != ClassLock {
		t.Errorf("no GIL range: %q", got)
	}
}

// TestNoFds: a select or poll on no descriptor with a timeout only
// sleeps; one on descriptors, or with no timeout, does not.
func TestNoFds(t *testing.T) {
	for _, c := range []struct {
		sc   string
		args []uint64
		want bool
	}{
		{"pselect6", []uint64{0, 0, 0, 0, 0x7ffd1000, 0}, true}, // CPython 3.10's time.sleep
		{"select", []uint64{0, 0, 0, 0, 0x7ffd1000, 0}, true},
		{"pselect6", []uint64{0, 0x7ffd2000, 0x7ffd2080, 0x7ffd2100, 0x7ffd1000, 0}, true}, // select([], [], [], t)
		{"pselect6", []uint64{4, 0x7ffd2000, 0, 0, 0x7ffd1000, 0}, false},                  // a socket
		{"pselect6", []uint64{0, 0, 0, 0, 0, 0}, false},                                    // no timeout: a signal's wait
		{"select", []uint64{0xffffffff00000000, 0, 0, 0, 0x7ffd1000, 0}, true},             // nfds is an int
		{"poll", []uint64{0x7ffd3000, 0, 10, 0, 0, 0}, true},
		{"poll", []uint64{0x7ffd3000, 0, 0xffffffff, 0, 0, 0}, false}, // -1: for ever
		{"poll", []uint64{0x7ffd3000, 1, 10, 0, 0, 0}, false},
		{"ppoll", []uint64{0, 0, 0x7ffd1000, 0, 8, 0}, true},
		{"ppoll", []uint64{0, 0, 0, 0, 8, 0}, false},
		{"epoll_wait", []uint64{3, 0x7ffd3000, 0, 10, 0, 0}, false},
		{"clock_nanosleep", []uint64{1, 1, 0x7ffd1000, 0, 0, 0}, false},
		{"pselect6", []uint64{0}, false}, // arguments not known
	} {
		if got := noFds(c.sc, c.args); got != c.want {
			t.Errorf("noFds(%s, %#x) = %v, want %v", c.sc, c.args, got, c.want)
		}
	}
}

func TestDecodeSwitch(t *testing.T) {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint32(b[0:], 10)
	binary.LittleEndian.PutUint32(b[4:], 11)
	binary.LittleEndian.PutUint64(b[8:], 123456789)
	id, out, pre, err := perfevent.DecodeSwitch(perfevent.RawRecord{Type: perfevent.RecordSwitch, Misc: perfevent.SwitchOut | perfevent.SwitchOutPreempt, Body: b})
	if err != nil || id.Pid != 10 || id.Tid != 11 || id.Time != 123456789 || !out || !pre {
		t.Errorf("got %+v out=%v preempt=%v err=%v", id, out, pre, err)
	}
	if _, out, pre, _ := perfevent.DecodeSwitch(perfevent.RawRecord{Type: perfevent.RecordSwitch, Body: b}); out || pre {
		t.Errorf("switch-in decoded as out=%v preempt=%v", out, pre)
	}
	if _, _, _, err := perfevent.DecodeSwitch(perfevent.RawRecord{Body: b[:8]}); err == nil {
		t.Error("short body accepted")
	}
}
