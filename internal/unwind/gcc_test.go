//go:build amd64

package unwind

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/testutil"
)

// These tests build testdata/unwind/chain.c with gcc, run it under ptrace
// until it stops itself (raise(SIGSTOP) in leaf), copy its registers and
// stack like a perf sample would, and unwind with this package. Ground
// truth: the program's known call structure, and gdb's `bt` of the same
// stopped process (pc for pc, frame for frame).

func buildChain(t testing.TB, dir string, flags ...string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		testutil.Skip(t, "gcc is not installed (apt-get install gcc)")
	}
	src := filepath.Join(testutil.Repo(), "testdata", "unwind", "chain.c")
	bin := filepath.Join(dir, "chain")
	args := append(append([]string{}, flags...), "-o", bin, src)
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, out)
	}
	return bin
}

// stopped is a traced child held in its SIGSTOP signal-delivery-stop.
type stopped struct {
	pid   int
	regs  Regs
	stack StackCopy
}

// startStopped runs bin args under ptrace until it raises SIGSTOP, and
// captures registers and the stack from rsp to the top of [stack] (at most
// 64 KiB). Must run on a locked OS thread.
func startStopped(t testing.TB, bin string, args ...string) *stopped {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		syscall.Kill(pid, syscall.SIGKILL)
		cmd.Wait()
	})
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || !ws.Stopped() {
		t.Fatalf("exec stop: %v %v", ws, err)
	}
	if err := syscall.PtraceCont(pid, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || !ws.Stopped() || ws.StopSignal() != syscall.SIGSTOP {
		t.Fatalf("want the SIGSTOP stop, got %v %v", ws, err)
	}
	var pr syscall.PtraceRegs
	if err := syscall.PtraceGetRegs(pid, &pr); err != nil {
		t.Fatal(err)
	}
	s := &stopped{pid: pid}
	for _, r := range []struct {
		reg int
		v   uint64
	}{{RegRAX, pr.Rax}, {RegRDX, pr.Rdx}, {RegRCX, pr.Rcx}, {RegRBX, pr.Rbx}, {RegRSI, pr.Rsi}, {RegRDI, pr.Rdi},
		{RegRBP, pr.Rbp}, {RegRSP, pr.Rsp}, {RegR8, pr.R8}, {RegR8 + 1, pr.R9}, {RegR8 + 2, pr.R10}, {RegR8 + 3, pr.R11},
		{RegR8 + 4, pr.R12}, {RegR8 + 5, pr.R13}, {RegR8 + 6, pr.R14}, {RegR15, pr.R15}, {RegRA, pr.Rip}} {
		s.regs.Set(r.reg, r.v)
	}
	top := stackTop(t, pid)
	n := top - pr.Rsp
	if n > 65536 {
		n = 65536
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	s.stack = StackCopy{Base: pr.Rsp, Data: make([]byte, n)}
	if _, err := mem.ReadAt(s.stack.Data, int64(pr.Rsp)); err != nil {
		t.Fatalf("stack copy: %v", err)
	}
	return s
}

func stackTop(t testing.TB, pid int) uint64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasSuffix(sc.Text(), "[stack]") {
			_, hi, _ := strings.Cut(strings.Fields(sc.Text())[0], "-")
			v, _ := strconv.ParseUint(hi, 16, 64)
			return v
		}
	}
	t.Fatal("no [stack] mapping")
	return 0
}

// unwindNames unwinds s and names each frame (callers by pc-1).
func unwindNames(p *Process, s *stopped) (pcs []uint64, names []string, st Status, err error) {
	pcs, st, err = p.Unwind(s.regs, s.stack, nil)
	for i, pc := range pcs {
		if i > 0 {
			pc--
		}
		names = append(names, p.Symbolize(pc).Label())
	}
	return pcs, names, st, err
}

var gdbFrame = regexp.MustCompile(`^#(\d+)\s+(?:0x([0-9a-f]+) in )?(\S+)`)

// gdbBT hands the stopped child to gdb (detach leaving SIGSTOP pending, so
// it stays stopped) and returns gdb's frames: pc (0 for frame 0, whose pc
// gdb omits) and function.
func gdbBT(t *testing.T, pid int) (pcs []uint64, names []string) {
	t.Helper()
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		testutil.Skip(t, "gdb is not installed (apt-get install gdb): no ground truth")
	}
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(pid), 0, uintptr(syscall.SIGSTOP), 0, 0); e != 0 {
		t.Fatalf("detach: %v", e)
	}
	for i := 0; i < 100; i++ { // the group stop lands asynchronously
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); bytes.Contains(b, []byte(") T ")) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	out, err := exec.Command(gdb, "-nx", "-batch", "-p", strconv.Itoa(pid), "-ex", "p/x $pc", "-ex", "bt").CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	var pc0 uint64
	for _, l := range strings.Split(string(out), "\n") {
		if m := gdbFrame.FindStringSubmatch(l); m != nil {
			pc, _ := strconv.ParseUint(m[2], 16, 64)
			pcs = append(pcs, pc)
			names = append(names, m[3])
		} else if v, ok := strings.CutPrefix(l, "$1 = 0x"); ok {
			pc0, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	if len(pcs) > 0 {
		pcs[0] = pc0
	}
	return pcs, names
}

// TestUnwindGCC: the chain program at -O0/-O1/-O2 with
// -fomit-frame-pointer (PIE), -O2 non-PIE, and -O2 with frame pointers:
// the unwind reaches _start (Full), names leaf, rec×11, c, b, a, main in
// that order, and matches gdb's bt pc for pc up to main.
func TestUnwindGCC(t *testing.T) {
	testutil.RequireRoot(t)
	for _, flags := range [][]string{
		{"-O0", "-fomit-frame-pointer"},
		{"-O1", "-fomit-frame-pointer"},
		{"-O2", "-fomit-frame-pointer"},
		{"-O2", "-fomit-frame-pointer", "-no-pie", "-fno-pie"},
		{"-O2", "-fno-omit-frame-pointer"},
	} {
		t.Run(strings.Join(flags, " "), func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			bin := buildChain(t, t.TempDir(), flags...)
			s := startStopped(t, bin)
			p := NewProcess(s.pid, NewCache())
			pcs, names, st, err := unwindNames(p, s)
			if st != Full || err != nil {
				t.Errorf("status %v (%v): %v", st, err, names)
			}
			want := []string{"leaf"}
			for i := 0; i <= 10; i++ {
				want = append(want, "rec")
			}
			want = append(want, "c", "b", "a", "main")
			li := indexOf(names, "leaf")
			if li < 0 || li+len(want) > len(names) || strings.Join(names[li:li+len(want)], ";") != strings.Join(want, ";") {
				t.Fatalf("frames %v, want …;%s;… ", names, strings.Join(want, ";"))
			}
			if names[len(names)-1] != "_start" {
				t.Errorf("outermost frame %q, want _start", names[len(names)-1])
			}
			checkFuncStart(t, p, bin, pcs, names)
			gpcs, gnames := gdbBT(t, s.pid)
			gi := indexOf(gnames, "leaf")
			if gi < 0 || gi+len(want) > len(gpcs) || len(gpcs) == 0 || gpcs[0] != pcs[0] {
				t.Fatalf("gdb frames %v (%x), ours %x", gnames, gpcs, pcs)
			}
			// From leaf to main: the same pcs and names, frame for frame.
			for k := 0; k < len(want); k++ {
				if gpcs[gi+k] != pcs[li+k] || gnames[gi+k] != names[li+k] {
					t.Errorf("frame leaf+%d: 0x%x %s, gdb 0x%x %s", k, pcs[li+k], names[li+k], gpcs[gi+k], gnames[gi+k])
				}
			}
			// Inside libc, gdb adds frames for tail calls from its debug
			// info (pthread_kill jumps to __pthread_kill_implementation; no
			// return address of it is on the stack): ours must be the
			// same pcs minus those.
			j := 1
			for i := 1; i < li; i++ {
				for j < gi && gpcs[j] != pcs[i] {
					j++
				}
				if j == gi {
					t.Errorf("libc frame %d (0x%x %s) not in gdb's %x", i, pcs[i], names[i], gpcs[:gi])
				}
			}
		})
	}
}

// checkFuncStart: for each frame in the chain binary, FuncStart is the
// address of the function's symbol (ground truth: the ELF symbol table,
// read here with debug/elf), in the process's terms.
func checkFuncStart(t *testing.T, p *Process, bin string, pcs []uint64, names []string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	addr := map[string]uint64{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			addr[s.Name] = s.Value
		}
	}
	checked := 0
	for i, pc := range pcs {
		if i > 0 {
			pc--
		}
		want, ok := addr[names[i]]
		if !ok || !strings.Contains(p.Symbolize(pc).Path, "chain") {
			continue
		}
		bias := pc - p.Symbolize(pc).Off
		got, ok := p.FuncStart(pc)
		if !ok || got != want+bias {
			t.Errorf("FuncStart(0x%x) in %s = 0x%x %v, want 0x%x", pc, names[i], got, ok, want+bias)
		}
		checked++
	}
	if checked < 6 {
		t.Errorf("FuncStart checked on %d frames of the chain binary, want ≥ 6", checked)
	}
	if _, ok := p.FuncStart(1); ok {
		t.Error("FuncStart(1): want false (no mapping)")
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// TestUnwindDeletedBinary: the binary is deleted after start (maps say
// "(deleted)"): its CFI and symbols still load, through map_files.
func TestUnwindDeletedBinary(t *testing.T) {
	testutil.RequireRoot(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	bin := buildChain(t, t.TempDir(), "-O2", "-fomit-frame-pointer")
	s := startStopped(t, bin)
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	// A different file at the old path must not be used either.
	if err := os.WriteFile(bin, []byte("not an ELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := NewProcess(s.pid, NewCache())
	_, names, st, err := unwindNames(p, s)
	if st != Full || err != nil || indexOf(names, "leaf") < 0 || indexOf(names, "main") < 0 {
		t.Fatalf("status %v (%v): %v", st, err, names)
	}
	deleted := false
	for _, m := range p.maps {
		deleted = deleted || strings.HasSuffix(m.Path, "(deleted)")
	}
	if !deleted {
		t.Error("maps did not show the binary deleted")
	}
}

// TestUnwindJIT: leaf is called from anonymous PROT_EXEC code without CFI:
// the frames down to it are named, the JIT frame is "[unknown] (0x…)", and
// the unwind stops there as Failed with reason no_cfi.
func TestUnwindJIT(t *testing.T) {
	testutil.RequireRoot(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	bin := buildChain(t, t.TempDir(), "-O2", "-fomit-frame-pointer")
	s := startStopped(t, bin, "jit")
	p := NewProcess(s.pid, NewCache())
	_, names, st, err := unwindNames(p, s)
	li := indexOf(names, "leaf")
	if st != Failed || !errors.Is(err, ErrNoCFI) || Reason(err) != "no_cfi" {
		t.Errorf("status %v, reason %s (%v), want Failed no_cfi", st, Reason(err), err)
	}
	if li < 0 || li != len(names)-2 || !strings.HasPrefix(names[len(names)-1], "[unknown] (0x") {
		t.Errorf("frames %v: want …;leaf;[unknown] (0x…) last", names)
	}
}

// BenchmarkUnwindChain: one sample's unwind (23 frames: libc, leaf,
// rec×11, c, b, a, main, libc start, _start) from a real 64 KiB-bounded
// stack copy, with warm object and row caches, as in a recording.
func BenchmarkUnwindChain(b *testing.B) {
	testutil.RequireRoot(b)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s := startStopped(b, buildChain(b, b.TempDir(), "-O2", "-fomit-frame-pointer"))
	p := NewProcess(s.pid, NewCache())
	out := make([]uint64, 0, 64)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var st Status
		out, st, _ = p.Unwind(s.regs, s.stack, out[:0])
		if st != Full {
			b.Fatal(st)
		}
	}
	b.ReportMetric(float64(len(out)), "frames")
}
