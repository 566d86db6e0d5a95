package tracepoint

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/pyobs/pyobs/internal/testutil"
)

// floorLoop times, on each line it reads, 5 × 200,000 one-byte os.write
// calls to /dev/null and prints the best per-call CPU time in µs (its
// thread's CPU: the BPF programs' kernel time included, other tenants'
// not).
const floorLoop = `import os, sys, time
fd = os.open("/dev/null", os.O_WRONLY)
print(os.getpid(), flush=True)
for line in sys.stdin:
    best = 9.0
    for r in range(5):
        t = time.thread_time()
        for i in range(200000):
            os.write(fd, b"x")
        best = min(best, time.thread_time() - t)
    print("%.4f" % (best / 200000 * 1e6), flush=True)
`

// TestSyscallTracepointFloor (PYOBS_BENCH=1) measures what trace's
// tracepoint engine costs a syscall-bound loop on this machine against
// the floor no program on the raw syscall tracepoints can go under: the
// same loop bare, with two programs that return at once on sys_enter and
// sys_exit (what enabling the tracepoints costs: every syscall of every
// task then takes the kernel's slow path), and with trace's own programs
// counting it. Same process, alternated, three rounds. It reports; the
// bar (≤ 1.5× bare) is checked by the numbers in BENCHMARKS.md.
func TestSyscallTracepointFloor(t *testing.T) {
	if os.Getenv("PYOBS_BENCH") != "1" {
		t.Skip("set PYOBS_BENCH=1 to measure the syscall tracepoints' floor")
	}
	requireBPF(t)
	py := testutil.Interpreters(t)[0]
	cmd := exec.Command(py.Argv[0], append(py.Argv[1:], "-c", floorLoop)...)
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); _ = cmd.Wait() }()
	rd := bufio.NewScanner(outp)
	rd.Scan()
	pid, _ := strconv.Atoi(strings.TrimSpace(rd.Text()))
	measure := func() float64 {
		fmt.Fprintln(in, "go")
		rd.Scan()
		v, _ := strconv.ParseFloat(rd.Text(), 64)
		return v
	}
	empty := func() func() {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.RawTracepoint, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
		if err != nil {
			t.Fatal(err)
		}
		var ls []link.Link
		for _, tp := range []string{"sys_enter", "sys_exit"} {
			l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp, Program: p})
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		return func() {
			for _, l := range ls {
				l.Close()
			}
			p.Close()
		}
	}
	for round := 1; round <= 3; round++ {
		bare := measure()
		stop := empty()
		floor := measure()
		stop()
		tr, err := Open(Config{Pid: pid})
		if err != nil {
			t.Fatal(err)
		}
		traced := measure()
		tr.Close()
		t.Logf("BENCH round %d: one os.write, best of 5×200k, thread CPU: bare %.3f µs, empty sys_enter+sys_exit programs %.3f µs (%.2f×), trace's programs %.3f µs (%.2f×)",
			round, bare, floor, floor/bare, traced, traced/bare)
	}
}
