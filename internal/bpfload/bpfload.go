package bpfload

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/capability"
	"github.com/pyobs/pyobs/internal/procfs"
)

var memlock sync.Once

// RemoveMemlock lifts RLIMIT_MEMLOCK for kernels that still charge BPF
// memory to it (before 5.11; later ones charge the memory cgroup). Once;
// a refusal is left for the load to report. Not cilium/ebpf's rlimit
// package: its init probes the kernel with a BPF map in every run of
// pyobs, whatever the command.
func RemoveMemlock() {
	memlock.Do(func() {
		_ = unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY})
	})
}

// Load loads spec into obj, a bpf2go objects struct (or any struct of
// *ebpf.Map, *ebpf.Program and *ebpf.Variable fields tagged `ebpf:"name"`):
// only what obj names is loaded. what names the programs for the error
// ("trace's BPF programs"): see Explain.
func Load(what string, spec *ebpf.CollectionSpec, obj any) error {
	RemoveMemlock()
	if err := spec.LoadAndAssign(obj, nil); err != nil {
		return Explain("load "+what, err)
	}
	return nil
}

// VerifierError is the kernel's verifier refusing a program: its name and
// the last lines of the verifier's log (where it says why).
type VerifierError struct {
	Op      string // "load trace's BPF programs"
	Program string // "sys_exit"
	Tail    []string
	Err     error // the loader's error (an *ebpf.VerifierError, the errno)
}

func (e *VerifierError) Error() string {
	return fmt.Sprintf("can't %s: the kernel's verifier refused program %s: %s", e.Op, e.Program, strings.Join(e.Tail, " | "))
}

func (e *VerifierError) Unwrap() error { return e.Err }

// tailLines is how much of a verifier log an error carries.
const tailLines = 4

// Explain names a failed load or attach: a verifier rejection (a log to
// show) as a *VerifierError, a refusal (EPERM, or EACCES with no log) as
// the capability gate's *capability.GateError, anything else as "can't op:
// err". The errno stays matchable with errors.Is throughout.
func Explain(op string, err error) error {
	if err == nil {
		return nil
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) && len(ve.Log) > 0 {
		return &VerifierError{Op: op, Program: programOf(err), Tail: logTail(ve.Log, tailLines), Err: err}
	}
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return capability.ExplainBPF(op, err)
	}
	return fmt.Errorf("can't %s: %w", op, err)
}

// programOf reads the program's name from the loader's error ("program
// NAME: load program: …"); "?" when it does not say.
func programOf(err error) string {
	s := err.Error()
	if i := strings.Index(s, "program "); i >= 0 {
		rest := s[i+len("program "):]
		if j := strings.IndexByte(rest, ':'); j > 0 && !strings.ContainsRune(rest[:j], ' ') {
			return rest[:j]
		}
	}
	return "?"
}

// logTail is the last n lines of a verifier log that say something: blank
// lines and the closing "processed N insns" summary are left out.
func logTail(log []string, n int) []string {
	var out []string
	for i := len(log) - 1; i >= 0 && len(out) < n; i-- {
		l := strings.TrimSpace(log[i])
		if l == "" || (len(out) == 0 && strings.HasPrefix(l, "processed ")) {
			continue
		}
		out = append(out, l)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// Counters reads slots 0..n-1 of a per-CPU array of u64 counters, each
// summed over the CPUs.
func Counters(m *ebpf.Map, n int) ([]uint64, error) {
	out := make([]uint64, n)
	var per []uint64
	for i := range out {
		if err := m.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("can't read slot %d of per-CPU map %s: %w", i, name(m), err)
		}
		out[i] = SumCPUs(per)
	}
	return out, nil
}

// SumCPUs sums one slot's per-CPU values.
func SumCPUs(per []uint64) uint64 {
	var s uint64
	for _, v := range per {
		s += v
	}
	return s
}

func name(m *ebpf.Map) string {
	if info, err := m.Info(); err == nil && info.Name != "" {
		return info.Name
	}
	return m.String()
}

// Decode reads one record of a ring buffer (or a map value) as the C struct
// T that bpf2go generated for it: the programs and pyobs share the host's
// byte order (the generated files are built for it only). A record shorter
// than T is an error naming both sizes.
func Decode[T any](b []byte) (T, error) {
	var v T
	n := int(unsafe.Sizeof(v))
	if len(b) < n {
		return v, fmt.Errorf("BPF record of %d bytes, want %d", len(b), n)
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&v)), n), b) // a copy: no alignment asked of b
	return v, nil
}

// ErrPidNamespace: pyobs runs in a child pid namespace.
var ErrPidNamespace = errors.New("the kernel's thread ids are not this namespace's")

// CheckPidNS checks that pyobs sees the init pid namespace's ids: the
// programs compare the kernel's own tgid with the target's pid, which in a
// child namespace would silently match nothing. An unreadable link passes.
func CheckPidNS() error {
	l, err := procfs.Default().SelfPidNamespace()
	return checkPidNS(l, err)
}

func checkPidNS(link string, err error) error {
	if err != nil || link == procfs.InitPidNamespace {
		return nil
	}
	return fmt.Errorf("pyobs runs in a child pid namespace (%s): %w", link, ErrPidNamespace)
}

// Var is a value for one of a program's global variables (bpf2go's
// VariableSpecs), set before the load: a `const volatile` one is then fixed
// for the verifier, which prunes what it disables.
type Var struct {
	Spec  *ebpf.VariableSpec
	Value any
}

// SetVars sets each variable in the spec; the error names the variable.
func SetVars(vars ...Var) error {
	for _, v := range vars {
		if v.Spec == nil {
			return errors.New("can't set a BPF variable: not in the object")
		}
		if err := v.Spec.Set(v.Value); err != nil {
			return fmt.Errorf("can't set BPF variable %s: %w", v.Spec.Name, err)
		}
	}
	return nil
}

// SetLive writes a running program's configuration variable: its dormant
// form first (one the program acts on not at all), then whole, so that no
// run of the program reads half of it.
func SetLive(v *ebpf.Variable, dormant, whole any) error {
	if err := v.Set(dormant); err != nil {
		return fmt.Errorf("can't set the running program's configuration: %w", err)
	}
	if err := v.Set(whole); err != nil {
		return fmt.Errorf("can't set the running program's configuration: %w", err)
	}
	return nil
}

// Spec parses an embedded object with bpf2go's loader (loadX) and assigns
// its typed specs (a *XSpecs) to specs, for SetVars and map sizes before
// Load.
func Spec(load func() (*ebpf.CollectionSpec, error), specs any) (*ebpf.CollectionSpec, error) {
	spec, err := load()
	if err != nil {
		return nil, err
	}
	if err := spec.Assign(specs); err != nil {
		return nil, fmt.Errorf("can't read the BPF object's specs: %w", err)
	}
	return spec, nil
}

// ErrArch: a program reads x86_64 registers or syscall numbers.
var ErrArch = errors.New("x86_64 only")

// RequireX86 refuses, with one clear error, to load a program that reads
// the x86_64 syscall ABI (pt_regs offsets, syscall numbers) on another
// architecture, where it would load and silently count nothing.
func RequireX86(what string) error {
	if runtime.GOARCH != "amd64" {
		return fmt.Errorf("%s reads the x86_64 syscall ABI; this is %s: %w", what, runtime.GOARCH, ErrArch)
	}
	return nil
}

// EnableRunStats turns the kernel's BPF run-time accounting on for this
// run (BPF_ENABLE_STATS: off again when the returned closer is closed, or
// when pyobs exits) unless kernel.bpf_stats_enabled already has it on;
// note says which, or why there are none. The price: two clock reads per
// run of every BPF program on the machine while it is on.
func EnableRunStats() (io.Closer, string) {
	if v, err := procfs.Default().Sysctl("kernel/bpf_stats_enabled"); err == nil && v == "1" {
		return nil, "on (kernel.bpf_stats_enabled=1)"
	}
	c, err := EnableStats()
	if err != nil {
		return nil, "n/a (kernel.bpf_stats_enabled=0 and " + err.Error() + ")"
	}
	return c, "enabled for this run only (BPF_ENABLE_STATS)"
}

// EnableStats turns on the kernel's BPF run-time accounting until the
// closer is closed.
func EnableStats() (io.Closer, error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("can't enable bpf stats: %w", err)
	}
	return c, nil
}
