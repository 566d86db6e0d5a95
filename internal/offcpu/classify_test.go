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
		{WaitInfo{State: "S", Syscall: "recvfrom"}, ClassNet},
		{WaitInfo{State: "D", Syscall: "read", FdLink: "pipe:[1]"}, ClassDisk},
		{WaitInfo{State: "S", Wchan: "io_schedule"}, ClassDisk},
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
