package bpfload

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/pyobs/pyobs/internal/capability"
	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/testutil"
)

// The loader's error mapping, on the errors cilium/ebpf returns: a refusal
// without a verifier log is the capability gate (errno still matchable), a
// log names the program and its last lines, the rest says what failed.
func TestExplain(t *testing.T) {
	if Explain("load x", nil) != nil {
		t.Fatal("nil error explained")
	}
	for _, errno := range []syscall.Errno{syscall.EPERM, syscall.EACCES} {
		err := Explain("load trace's BPF programs", fmt.Errorf("program sys_exit: load program: %w", errno))
		var ge *capability.GateError
		if !errors.As(err, &ge) || !errors.Is(err, capability.ErrPermission) || !errors.Is(err, errno) {
			t.Errorf("%v: not the gate: %v", errno, err)
			continue
		}
		if !strings.Contains(err.Error(), "can't load trace's BPF programs: permission denied by the BPF gate (") ||
			!strings.Contains(err.Error(), "kernel.unprivileged_bpf_disabled=") {
			t.Errorf("gate message: %v", err)
		}
	}
	err := Explain("attach a BPF program to raw_tp/sys_exit", fmt.Errorf("wrapped: %w", syscall.ENOENT))
	if !errors.Is(err, syscall.ENOENT) || err.Error() != "can't attach a BPF program to raw_tp/sys_exit: wrapped: no such file or directory" {
		t.Errorf("other errno: %v", err)
	}
}

func TestProgramOfAndLogTail(t *testing.T) {
	for in, want := range map[string]string{
		"program offcpu_btf: load program: permission denied": "offcpu_btf",
		"map starts: program x: y":                            "x",
		"load program: invalid argument":                      "?",
		"no program here":                                     "?",
	} {
		if got := programOf(errors.New(in)); got != want {
			t.Errorf("programOf(%q) = %q, want %q", in, got, want)
		}
	}
	log := []string{"0: (b7) r0 = 0", "", "1: (95) exit", "R0 !read_ok", "", "processed 2 insns (limit 1000000)"}
	if got := strings.Join(logTail(log, 2), "|"); got != "1: (95) exit|R0 !read_ok" {
		t.Errorf("tail: %q", got)
	}
	if got := logTail(nil, 4); len(got) != 0 {
		t.Errorf("tail of nothing: %q", got)
	}
}

func TestSumCPUs(t *testing.T) {
	if SumCPUs(nil) != 0 || SumCPUs([]uint64{1, 2, 3, 1 << 40}) != 6+1<<40 {
		t.Fatal("per-CPU sum")
	}
}

func TestDecode(t *testing.T) {
	type rec struct {
		A uint64
		B uint32
		C uint16
		D [2]uint8
	}
	b := []byte{1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 3, 0, 4, 5, 0xff}
	// An odd offset: Decode copies, so the record need not be aligned.
	r, err := Decode[rec](append([]byte{0}, b...)[1:])
	if err != nil || r.A != 1 || r.B != 2 || r.C != 3 || r.D != [2]uint8{4, 5} {
		t.Fatalf("%+v %v", r, err)
	}
	if _, err := Decode[rec](b[:15]); err == nil || err.Error() != "BPF record of 15 bytes, want 16" {
		t.Fatalf("short record: %v", err)
	}
}

func TestCheckPidNS(t *testing.T) {
	if checkPidNS(procfs.InitPidNamespace, nil) != nil || checkPidNS("", os.ErrNotExist) != nil {
		t.Fatal("init namespace (or no link) refused")
	}
	if err := checkPidNS("pid:[4026532001]", nil); !errors.Is(err, ErrPidNamespace) || !strings.Contains(err.Error(), "pid:[4026532001]") {
		t.Fatalf("child namespace: %v", err)
	}
}

// A program the verifier refuses (r0 is never set before exit), loaded for
// real: the error names it and carries the verifier's reason.
func TestLoadVerifierErrorNamed(t *testing.T) {
	testutil.RequireRoot(t)
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{
		"no_r0": {Name: "no_r0", Type: ebpf.SocketFilter, License: "GPL", Instructions: asm.Instructions{asm.Return()}},
	}}
	var obj struct {
		P *ebpf.Program `ebpf:"no_r0"`
	}
	err := Load("a test program", spec, &obj)
	var ve *VerifierError
	if !errors.As(err, &ve) {
		t.Fatalf("want a VerifierError, got %v", err)
	}
	if ve.Program != "no_r0" || !strings.Contains(err.Error(), "R0 !read_ok") ||
		!strings.HasPrefix(err.Error(), "can't load a test program: the kernel's verifier refused program no_r0: ") {
		t.Fatalf("%+v: %v", ve, err)
	}
	if !errors.Is(err, syscall.EACCES) {
		t.Errorf("errno lost: %v", err)
	}
}

// Counters sums every slot of a real per-CPU array over the CPUs.
func TestCountersPerCPU(t *testing.T) {
	testutil.RequireRoot(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	per := make([]uint64, cpus)
	for i := range per {
		per[i] = uint64(i + 1)
	}
	if err := m.Put(uint32(1), per); err != nil {
		t.Fatal(err)
	}
	got, err := Counters(m, 3)
	want := uint64(cpus * (cpus + 1) / 2)
	if err != nil || len(got) != 3 || got[0] != 0 || got[1] != want || got[2] != 0 {
		t.Fatalf("counters %v (%v), want [0 %d 0]", got, err, want)
	}
	if _, err := Counters(m, 4); err == nil || !strings.Contains(err.Error(), "slot 3") {
		t.Fatalf("slot past the end: %v", err)
	}
}
