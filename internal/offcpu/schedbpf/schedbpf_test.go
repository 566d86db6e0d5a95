//go:build 386 || amd64

package schedbpf

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/testutil"
)

func mono() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// TestSelfSleeps: the program, watching this test process, sums a locked
// thread's nanosleeps into its blocked total and keys them under a kernel
// stack and the nanosleep syscall; truth: the sleeps this thread timed.
func TestSelfSleeps(t *testing.T) {
	testutil.RequireRoot(t)
	for _, v := range []struct {
		prog  string
		regs  bool
		reuse uint64
	}{{"offcpu_btf", true, 0}, {"offcpu_raw", true, 0}, {"offcpu_raw", false, 0}, {"offcpu_btf", true, uint64(time.Second)}} {
		t.Run(fmt.Sprintf("%s/regs=%v/reuse=%v", v.prog, v.regs, time.Duration(v.reuse)), func(t *testing.T) {
			tr, err := load(Config{Tgid: uint32(os.Getpid()), ReuseNS: v.reuse}, v.prog, v.regs, mono)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tid := unix.Gettid()
			var slept int64
			// One timespec: the same call on the same first argument, 20
			// times (what lets the program reuse a kernel stack).
			ts := unix.NsecToTimespec(int64(5 * time.Millisecond))
			for range 20 {
				t0 := mono()
				_ = unix.Nanosleep(&ts, nil)
				slept += mono() - t0
			}
			tr.Detach()
			var th Thr
			if err := tr.Threads.Lookup(uint32(tid), &th); err != nil {
				t.Fatalf("tid %d not in threads: %v", tid, err)
			}
			var sum uint64
			var sawSleep bool
			it := tr.Waits.Iterate()
			var k Wkey
			var val Wval
			for it.Next(&k, &val) {
				if k.Tid != uint32(tid) || k.Flags&FlagRunQueue != 0 {
					continue
				}
				sum += val.Ns
				if k.Kstack >= 0 && (!v.regs || k.Sysnr == unix.SYS_NANOSLEEP || k.Sysnr == unix.SYS_CLOCK_NANOSLEEP) {
					sawSleep = true
				}
			}
			t.Logf("%s: slept %.1f ms, kernel: off %.1f ms (waits %.1f ms), on %.1f ms, outs %d", tr.Attach,
				float64(slept)/1e6, float64(th.OffNs)/1e6, float64(sum)/1e6, float64(th.OnNs)/1e6, th.Outs)
			if float64(th.OffNs) < 0.9*float64(slept) || float64(th.OffNs) > float64(slept)+20e6 {
				t.Errorf("blocked %d ns, the thread slept %d ns", th.OffNs, slept)
			}
			if sum != th.OffNs || !sawSleep {
				t.Errorf("waits sum %d ns (a nanosleep with a kernel stack: %v), thread total %d ns", sum, sawSleep, th.OffNs)
			}
			c, err := tr.ReadCounters()
			if err != nil || c[CSwitches] == 0 || c[COut] < 20 {
				t.Errorf("counters %v, %v", c, err)
			}
			if c[CDropStart]+c[CDropWaits]+c[CDropThreads] != 0 {
				t.Errorf("drops on a quiet run: %v", c)
			}
			// Reuse: 19 of the 20 sleeps may take the first one's stack;
			// without it, or without syscall hints, none may.
			if want := v.reuse > 0 && v.regs; (want && c[CKstackReused] < 15) || (!want && c[CKstackReused] != 0) {
				t.Errorf("kernel stacks reused %d times (reuse %v, hints %v)", c[CKstackReused], time.Duration(v.reuse), v.regs)
			}
		})
	}
}
