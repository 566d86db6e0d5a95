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
			// Blocked: about the sleeps asked for (each ends at its waking;
			// a signal from Go's runtime may cut one short); the rest of
			// what the thread timed is the wait for a CPU after each
			// waking, counted as run-queue.
			if asked := int64(20 * 5 * time.Millisecond); float64(th.OffNs) < 0.9*float64(asked) || int64(th.OffNs) > slept {
				t.Errorf("blocked %d ns, the thread asked for %d ns of sleep and timed %d ns", th.OffNs, asked, slept)
			}
			if all := int64(th.OffNs + th.RqNs); float64(all) < 0.9*float64(slept) || float64(all) > float64(slept)+20e6 {
				t.Errorf("blocked %d ns + run-queue %d ns, the thread slept %d ns", th.OffNs, th.RqNs, slept)
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
			// (A preemption between two sleeps breaks the chain: on a busy
			// machine a few do.)
			if want := v.reuse > 0 && v.regs; (want && c[CKstackReused] < 10) || (!want && c[CKstackReused] != 0) {
				t.Errorf("kernel stacks reused %d times (reuse %v, hints %v)", c[CKstackReused], time.Duration(v.reuse), v.regs)
			}
		})
	}
}

// TestSelfWaker: with Config.Waker, a thread of this process blocks in a
// pipe read that another thread ends by writing, 10 times; the waits are
// joined to the writer (its tid, as it named itself, and this tgid), with
// a kernel stack, summing most of what the reader timed.
func TestSelfWaker(t *testing.T) {
	testutil.RequireRoot(t)
	for _, prog := range []string{"offcpu_btf", "offcpu_raw"} {
		t.Run(prog, func(t *testing.T) {
			tr, err := load(Config{Tgid: uint32(os.Getpid()), Waker: true}, prog, true, mono)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			var p [2]int
			if err := unix.Pipe(p[:]); err != nil {
				t.Fatal(err)
			}
			defer unix.Close(p[0])
			defer unix.Close(p[1])
			writer := make(chan int, 1)
			go func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				writer <- unix.Gettid()
				for range 10 {
					time.Sleep(10 * time.Millisecond)
					_, _ = unix.Write(p[1], []byte{1})
				}
			}()
			wtid := <-writer
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tid := unix.Gettid()
			var blocked int64
			b := make([]byte, 1)
			for range 10 {
				t0 := mono()
				_, _ = unix.Read(p[0], b)
				blocked += mono() - t0
			}
			tr.Detach()
			var byWriter uint64
			var kstack bool
			it := tr.Offwake.Iterate()
			var k Okey
			var val Wval
			for it.Next(&k, &val) {
				if k.Tid == uint32(tid) && k.Wtid == uint32(wtid) && k.Wtgid == uint32(os.Getpid()) {
					byWriter += val.Ns
					kstack = kstack || k.Wkstack >= 0
				}
			}
			c, _ := tr.ReadCounters()
			t.Logf("%s: reader %d blocked %.1f ms, woken by writer %d: %.1f ms; wakings %d, joined %d", tr.WakeAt, tid,
				float64(blocked)/1e6, wtid, float64(byWriter)/1e6, c[CWakes], c[CWakeJoined])
			// The reader's own timing includes, after each waking, its wait
			// for a CPU (run-queue, not joined to the waker).
			var th Thr
			_ = tr.Threads.Lookup(uint32(tid), &th)
			if float64(byWriter) < 0.8*float64(blocked-int64(th.RqNs)) || !kstack {
				t.Errorf("waits woken by the writer: %d ns (with its kernel stack: %v), the reader blocked %d ns (%d ns of it runnable)", byWriter, kstack, blocked, th.RqNs)
			}
			if c[CDropWakes]+c[CDropOffwake] != 0 {
				t.Errorf("drops on a quiet run: %v", c)
			}
		})
	}
}
