package pyframes

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// TestDecodeTLSAccessor: the three shapes of _PyThreadState_GetCurrent
// this machine's builds compile to, and one it does not know.
func TestDecodeTLSAccessor(t *testing.T) {
	cases := []struct {
		name string
		code []byte
		kind tlsKind
		at   int32
	}{
		// sid 3.14 (static, non-PIE): endbr64; mov %fs:-0x18,%rax; ret
		{"local-exec", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x64, 0x48, 0x8b, 0x04, 0x25, 0xe8, 0xff, 0xff, 0xff, 0xc3}, tlsLocalExec, -0x18},
		// pyenv 3.12.1 libpython: sub $8,%rsp; data16 lea 0x26dbd4(%rip),%rdi; call __tls_get_addr
		{"general-dynamic", []byte{0x48, 0x83, 0xec, 0x08, 0x66, 0x48, 0x8d, 0x3d, 0xd4, 0xdb, 0x26, 0x00, 0x66, 0x66, 0x48, 0xe8, 0, 0, 0, 0}, tlsGeneralDynamic, 12 + 0x26dbd4},
		// mov 0x100(%rip),%rax; mov %fs:(%rax),%rax
		{"initial-exec", []byte{0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, 0x64, 0x48, 0x8b, 0x00, 0xc3}, tlsInitialExec, 7 + 0x100},
		{"other", []byte{0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3, 0, 0, 0, 0, 0, 0}, tlsUnknown, 0},
	}
	for _, c := range cases {
		code := append(c.code, make([]byte, 32)...)
		if k, at := decodeTLSAccessor(code); k != c.kind || at != c.at {
			t.Errorf("%s: %v %#x, want %v %#x", c.name, k, at, c.kind, c.at)
		}
	}
}

// TestAttachedTLS: on 3.12+ (shared libpython: general-dynamic; sid's
// static builds: local-exec) the offset found holds, for a thread running
// code in a sub-interpreter (its native id printed by the target from
// there), a thread state of that thread in another interpreter than the
// one it was born in; for the sleeping main thread, NULL.
func TestAttachedTLS(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		if in.Minor() < 12 {
			continue
		}
		t.Run(in.Label, func(t *testing.T) {
			tg := testutil.Start(t, in, "subinterp_run.py", "spin", "20")
			var tid int
			for line := range tg.Lines {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "INSUB" {
					tid, _ = strconv.Atoi(f[1])
					break
				}
			}
			p, err := Open(tg.Pid)
			if err != nil {
				t.Fatal(err)
			}
			off, ok, err := p.AttachedTLS()
			if err != nil || !ok {
				t.Fatalf("AttachedTLS: %d %v %v", off, ok, err)
			}
			refs, err := p.ThreadRefs()
			if err != nil {
				t.Fatal(err)
			}
			var fs, mainFS uint64
			interpOf := map[uint64]int64{}
			for _, r := range refs {
				if r.NativeID == tid {
					fs = r.ThreadID
					interpOf[r.Addr] = r.Interp
				}
				if r.NativeID == tg.Pid {
					mainFS = r.ThreadID
				}
			}
			if fs == 0 || mainFS == 0 || len(interpOf) != 2 {
				t.Fatalf("thread %d: fsbase 0x%x, thread states %v; main thread's fsbase 0x%x", tid, fs, interpOf, mainFS)
			}
			sub, reads := 0, 0
			for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); reads++ {
				v, err := p.objs.u64(uint64(int64(fs) + off))
				if err != nil {
					t.Fatal(err)
				}
				if id, ok := interpOf[v]; ok && id != 0 {
					sub++
				}
				time.Sleep(time.Millisecond)
			}
			if m, err := p.objs.u64(uint64(int64(mainFS) + off)); err != nil || m != 0 {
				t.Errorf("main thread (sleeping, detached): 0x%x %v at fsbase%+d, want NULL", m, err, off)
			}
			t.Logf("%s: attached at fsbase%+d: the sub-interpreter's thread state in %d of %d reads", in.Label, off, sub, reads)
			if sub*2 < reads {
				t.Errorf("the sub-interpreter's thread state in only %d of %d reads", sub, reads)
			}
		})
	}
}
