package pyframes_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/testutil"
)

// startLayout starts script under in and reads its kernel layout.
func startLayout(t *testing.T, in testutil.Interp, script string) (*testutil.Target, *pyframes.Process, *pyframes.KernelLayout) {
	t.Helper()
	tg := testutil.Start(t, in, script)
	p, err := pyframes.Open(tg.Pid)
	if err != nil {
		t.Fatal(err)
	}
	k, err := p.KernelLayout()
	if err != nil {
		t.Fatal(err)
	}
	return tg, p, k
}

// TestKernelLayoutLive: the in-kernel walker's layout and thread-state
// offsets on every interpreter, against the facts of
// ../shared/KERNEL-WALKER.md (§1: glibc's pthread TSD slots on 3.10–3.14,
// 3.15's static TLS below fsbase; §2: owners and end markers).
func TestKernelLayoutLive(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		t.Run(in.Label, func(t *testing.T) {
			_, p, k := startLayout(t, in, "kwalk_deep.py")
			minor := in.Minor()
			want := map[int]uint32{10: pyframes.KernelEndNull, 11: pyframes.KernelEndEntry, 12: pyframes.KernelEndShim,
				13: pyframes.KernelEndShim, 14: pyframes.KernelEndShim, 15: pyframes.KernelEndBase}[minor]
			if k.End != want {
				t.Errorf("end rule %d, want %d", k.End, want)
			}
			if k.CodeType == 0 || k.Interp == 0 || k.TstateThreadID == 0 {
				t.Errorf("missing addresses: %+v", k)
			}
			// 3.12 finds its counter through the symbol table, which the
			// manifest's 3.12 (pyenv) has.
			if (minor >= 12) != (k.CodeGenerationAddr != 0) || (minor == 12 || minor == 13) != k.CodeGenerationCreated {
				t.Errorf("code generation address 0x%x (created %v, %s) on 3.%d", k.CodeGenerationAddr, k.CodeGenerationCreated, k.CodeGenerationWhy, minor)
			}
			if (minor >= 11) != (k.GenStateRel != 0) {
				t.Errorf("gi_frame_state offset %d on 3.%d", k.GenStateRel, minor)
			}
			if (minor == 15) != (k.TstateBaseFrame != 0) {
				t.Errorf("base_frame offset %d on 3.%d", k.TstateBaseFrame, minor)
			}
			offs, err := p.TLSOffsets()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: TLS offsets %v, gen state %+d, end rule %d", in.Label, offs, k.GenStateRel, k.End)
			if len(offs) == 0 {
				t.Fatalf("no offset from fsbase holds the thread state")
			}
			o := offs[0]
			if minor <= 14 && (o < 0x318 || o >= 0x318+32*16 || (o-0x318)%16 != 0) {
				t.Errorf("3.%d: offset %#x is not glibc's specific_1stblock[key].data (0x318 + 16·key)", minor, o)
			}
			if minor == 15 && (o >= 0 || o < -4096) {
				t.Errorf("3.15: offset %d is not in the static TLS block below fsbase", o)
			}
		})
	}
}

// TestTLSOffsetsThreadChurn: with threads being born and torn down all the
// time (8 alive, each living ~1 ms), every call still finds the offset the
// settled threads agree on. A unanimous vote once failed here, and a
// thread-per-request server's new threads then had no stack in the kernel.
func TestTLSOffsetsThreadChurn(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		t.Run(in.Label, func(t *testing.T) {
			tg := testutil.Start(t, in, "offcpu_churn.py", "8")
			p, err := pyframes.Open(tg.Pid)
			if err != nil {
				t.Fatal(err)
			}
			var first []int64
			empty := 0
			const calls = 100
			for range calls {
				time.Sleep(2 * time.Millisecond) // about two thread lifetimes apart
				offs, err := p.TLSOffsets()
				if err != nil {
					continue // the thread list changed under the read: the caller retries
				}
				if len(offs) == 0 {
					empty++
					continue
				}
				if first == nil {
					first = offs
				}
				if offs[0] != first[0] {
					t.Errorf("offset %v, earlier %v", offs, first)
				}
			}
			t.Logf("%s: offsets %v; %d of %d calls found none", in.Label, first, empty, calls)
			if empty > 0 || first == nil {
				t.Errorf("%d of %d calls found no offset", empty, calls)
			}
		})
	}
}

// TestKernelLayoutMainInterpreter: with two sub-interpreters made before
// the look (the newest heads the runtime's list), the kernel layout's
// interpreter is still the main one: the one the target's main thread
// state points at. The kernel walk takes a thread attached to it as
// whole without a map lookup; the head once stood in for it.
func TestKernelLayoutMainInterpreter(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		if in.Minor() < 12 || in.FreeThreaded() {
			continue // sub-interpreters with their own threads: 3.12+
		}
		t.Run(in.Label, func(t *testing.T) {
			tg, p, k := startLayout(t, in, "subinterps.py")
			refs, err := p.ThreadRefs()
			if err != nil {
				t.Fatal(err)
			}
			var mainTS uint64
			subs := 0
			for _, r := range refs {
				if r.NativeID == tg.Pid {
					mainTS = r.Addr
				}
				if r.Interp != 0 {
					subs++
				}
			}
			if mainTS == 0 || subs < 2 {
				t.Fatalf("main thread state 0x%x, %d sub-interpreter threads: %+v", mainTS, subs, refs)
			}
			var b [8]byte
			if err := p.Mem().Read(mainTS+k.TstateInterp, b[:]); err != nil {
				t.Fatal(err)
			}
			if got := binary.LittleEndian.Uint64(b[:]); k.Interp != got {
				t.Errorf("kernel layout's interpreter 0x%x, the main thread's 0x%x", k.Interp, got)
			}
		})
	}
}
