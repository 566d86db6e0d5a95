package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/testutil"
)

// chaosTarget is a running testdata/targets/chaos.py: it reports its work
// counter every 50 ms and prints anything an observer must never cause
// (EINTR, a signal, a dead thread). It survives its own exec: each
// generation prints READY again under the same pid.
type chaosTarget struct {
	interp testutil.Interp
	cmd    *exec.Cmd
	pid    int
	stdin  io.WriteCloser
	exited chan struct{} // closed once the process has been reaped
	stderr *syncBuffer

	mu      sync.Mutex
	gen     int          // newest generation that printed READY
	readyAt time.Time    // when it did
	reports []workReport // newest generation's reports, bounded
	bad     []string     // EINTR/SIG/DIED lines not yet taken
	sigs    procSignals  // the generation's signal dispositions at READY
	wake    chan struct{}
}

type workReport struct {
	gen            int
	mono           float64 // target's CLOCK_MONOTONIC
	count, threads int64
	forks          int64
	at             time.Time // when the line arrived here
}

// procSignals are the process-wide signal fields of /proc/PID/status.
type procSignals struct{ SigIgn, SigCgt string }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<16 {
		return len(p), nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func chaosScript() string { return filepath.Join(testutil.Repo(), "testdata", "targets", "chaos.py") }

// startChaos starts chaos.py under interp and waits for its first READY.
// The process is killed at the end of the test.
func startChaos(t testing.TB, interp testutil.Interp, env ...string) (*chaosTarget, error) {
	argvJSON, _ := json.Marshal(interp.Argv)
	argv := append(append([]string{}, interp.Argv...), chaosScript())
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), "CHAOS_ARGV="+string(argvJSON), "CHAOS_GEN=1"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	tg := &chaosTarget{interp: interp, cmd: cmd, exited: make(chan struct{}), stderr: &syncBuffer{}, wake: make(chan struct{}, 1)}
	cmd.Stderr = tg.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if tg.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("can't start %v: %w", argv, err)
	}
	tg.pid = cmd.Process.Pid
	t.Cleanup(tg.kill)
	go func() { waitExitedNoReap(tg.pid); _ = cmd.Wait(); close(tg.exited) }()
	go tg.read(out)
	if err := tg.waitReady(1, 30*time.Second); err != nil {
		tg.kill()
		return nil, err
	}
	return tg, nil
}

// waitExitedNoReap waits for pid's exit without taking its other
// notifications: TestRaceInProcess freezes this child from this process,
// and a parent that traces its child sees the ptrace stops in any wait of
// any of its threads (see session.waitExited).
func waitExitedNoReap(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || info.Code == 1 || info.Code == 2 || info.Code == 3 { // CLD_EXITED, KILLED, DUMPED
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func (tg *chaosTarget) kill() {
	_ = tg.cmd.Process.Kill()
	<-tg.exited
}

func (tg *chaosTarget) read(out io.Reader) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		now := time.Now()
		tg.mu.Lock()
		switch f[0] {
		case "W":
			if len(f) >= 6 {
				var w workReport
				w.gen, _ = strconv.Atoi(f[1])
				w.mono, _ = strconv.ParseFloat(f[2], 64)
				w.count, _ = strconv.ParseInt(f[3], 10, 64)
				w.threads, _ = strconv.ParseInt(f[4], 10, 64)
				w.forks, _ = strconv.ParseInt(f[5], 10, 64)
				w.at = now
				if w.gen == tg.gen {
					tg.reports = append(tg.reports, w)
					if len(tg.reports) > 400 {
						tg.reports = append(tg.reports[:0], tg.reports[200:]...)
					}
				}
			}
		case "READY":
			if len(f) >= 2 {
				tg.gen, _ = strconv.Atoi(f[1])
				tg.readyAt = now
				tg.reports = nil
				st := testutil.ProcStatus(tg.pid)
				tg.sigs = procSignals{st["SigIgn"], st["SigCgt"]}
			}
		default:
			tg.bad = append(tg.bad, sc.Text())
		}
		tg.mu.Unlock()
		select {
		case tg.wake <- struct{}{}:
		default:
		}
	}
}

func (tg *chaosTarget) alive() bool {
	select {
	case <-tg.exited:
		return false
	default:
		return true
	}
}

// waitReady waits until generation gen has printed READY.
func (tg *chaosTarget) waitReady(gen int, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		tg.mu.Lock()
		g := tg.gen
		tg.mu.Unlock()
		if g >= gen {
			return nil
		}
		select {
		case <-tg.wake:
		case <-tg.exited:
			return fmt.Errorf("target exited (%v) before READY %d; stderr: %s", tg.cmd.ProcessState, gen, tail(tg.stderr.String(), 600))
		case <-deadline:
			return fmt.Errorf("target did not print READY %d within %v; stderr: %s", gen, timeout, tail(tg.stderr.String(), 600))
		}
	}
}

func (tg *chaosTarget) generation() int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.gen
}

// send writes a control command ("exit", "exec") to the target.
func (tg *chaosTarget) send(cmd string) { _, _ = io.WriteString(tg.stdin, cmd+"\n") }

// made returns the newest report's thread and fork counts (this generation's).
func (tg *chaosTarget) made() (threads, forks int64) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if n := len(tg.reports); n > 0 {
		return tg.reports[n-1].threads, tg.reports[n-1].forks
	}
	return 0, 0
}

// takeBad returns and forgets the EINTR/SIG/DIED lines seen so far.
func (tg *chaosTarget) takeBad() []string {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	b := tg.bad
	tg.bad = nil
	return b
}

// rate is the work counter's rate (per second of the target's clock) over
// the reports that arrived in [from, to], or -1 with fewer than two
// reports spanning at least 100 ms.
func (tg *chaosTarget) rate(from, to time.Time) float64 {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	var first, last *workReport
	for i := range tg.reports {
		w := &tg.reports[i]
		if w.at.Before(from) || w.at.After(to) {
			continue
		}
		if first == nil {
			first = w
		}
		last = w
	}
	if first == nil || last.mono-first.mono < 0.1 {
		return -1
	}
	return float64(last.count-first.count) / (last.mono - first.mono)
}

// maxGap is the longest time between two consecutive reports that arrived
// in [from, to] (the counter reporter is a thread of its own: a long gap
// means the process was stopped).
func (tg *chaosTarget) maxGap(from, to time.Time) time.Duration {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	var gap time.Duration
	var prev time.Time
	for _, w := range tg.reports {
		if w.at.Before(from) || w.at.After(to) {
			continue
		}
		if !prev.IsZero() && w.at.Sub(prev) > gap {
			gap = w.at.Sub(prev)
		}
		prev = w.at
	}
	return gap
}

// measureRate waits for d and returns the work rate over it.
func (tg *chaosTarget) measureRate(d time.Duration) float64 {
	from := time.Now()
	time.Sleep(d)
	return tg.rate(from, time.Now())
}

// steadyRate is the median work rate over three 150 ms windows (-1 when
// the target reports no work).
func (tg *chaosTarget) steadyRate() float64 {
	var rs []float64
	for i := 0; i < 3; i++ {
		if r := tg.measureRate(150 * time.Millisecond); r > 0 {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return -1
	}
	sort.Float64s(rs)
	return rs[len(rs)/2]
}

// taskProblems lists every thread of pid that is traced or stopped, and
// process-wide signal changes against want; empty when all is well.
func taskProblems(pid int, want procSignals) []string {
	var out []string
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(task, "status"))
		if err != nil {
			continue // the thread exited
		}
		st := map[string]string{}
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok {
				st[k] = strings.TrimSpace(v)
			}
		}
		if st["TracerPid"] != "0" {
			out = append(out, fmt.Sprintf("tid %s TracerPid %s", filepath.Base(task), st["TracerPid"]))
		}
		if s := st["State"]; strings.HasPrefix(s, "t") || strings.HasPrefix(s, "T") {
			out = append(out, fmt.Sprintf("tid %s State %s", filepath.Base(task), s))
		}
	}
	st := testutil.ProcStatus(pid)
	if st == nil {
		return out
	}
	if want.SigCgt != "" && (st["SigCgt"] != want.SigCgt || st["SigIgn"] != want.SigIgn) {
		out = append(out, fmt.Sprintf("signal dispositions changed: SigCgt %s→%s SigIgn %s→%s", want.SigCgt, st["SigCgt"], want.SigIgn, st["SigIgn"]))
	}
	if p := st["ShdPnd"]; p != "" && strings.Trim(p, "0") != "" {
		out = append(out, "shared pending signals "+p)
	}
	return out
}

// waitHealthy polls taskProblems for up to grace (a detach by the kernel
// after the tracer died is immediate, a wake-up may take a moment).
func (tg *chaosTarget) waitHealthy(grace time.Duration) []string {
	tg.mu.Lock()
	want := tg.sigs
	tg.mu.Unlock()
	deadline := time.Now().Add(grace)
	for {
		p := taskProblems(tg.pid, want)
		if len(p) == 0 || time.Now().After(deadline) || !tg.alive() {
			return p
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
