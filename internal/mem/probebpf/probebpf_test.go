//go:build amd64

package probebpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/testutil"
)

const keeper = `
import time
kept = []
print("READY", flush=True)
while True:
    for _ in range(100):
        kept.append(bytes(100))
    time.sleep(0.01)
`

// A live map smaller than what lives: the allocations that do not fit are
// counted with their bytes, the map holds what it can.
func TestLiveMapBounded(t *testing.T) {
	testutil.RequireRoot(t)
	script := filepath.Join(t.TempDir(), "keeper.py")
	if err := os.WriteFile(script, []byte(keeper), 0o644); err != nil {
		t.Fatal(err)
	}
	in := testutil.Find(t, "pyenv-3.12")
	tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), script), 30*time.Second)
	p, err := pyframes.Open(tg.Pid)
	if err != nil {
		t.Fatal(err)
	}
	kl, err := p.KernelLayout()
	if err != nil {
		t.Fatal(err)
	}
	pr, err := Load(Config{Pid: tg.Pid, Binary: fmt.Sprintf("/proc/%d/root%s", tg.Pid, p.Info.Binary), Layout: kl,
		MaxFrames: 16, SampleBytes: 1, LiveEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	time.Sleep(500 * time.Millisecond)
	c, err := pr.ReadCounters()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	var k uint64
	var v Live
	for it := pr.Lives.Iterate(); it.Next(&k, &v); {
		n++
	}
	if c[CDropLive] == 0 || c[CDropLiveEst] < 100*c[CDropLive] || n > 16 || c[CLiveN] != uint64(n) {
		t.Errorf("live map of 16: %d entries, counters live %d, dropped %d (%d bytes)", n, c[CLiveN], c[CDropLive], c[CDropLiveEst])
	}
}

func TestLoadRefusesAnELFWithoutAllocators(t *testing.T) {
	testutil.RequireRoot(t)
	in := testutil.Find(t, "pyenv-3.12")
	tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), "-c", `print("READY", flush=True); import time; time.sleep(30)`), 30*time.Second)
	p, err := pyframes.Open(tg.Pid)
	if err != nil {
		t.Fatal(err)
	}
	kl, err := p.KernelLayout()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Load(Config{Pid: tg.Pid, Binary: "/bin/true", Layout: kl, MaxFrames: 16})
	if !errors.Is(err, ErrUnavailable) || err == nil {
		t.Fatalf("Load on /bin/true: %v", err)
	}
	t.Log(err)
}

// The record's head as bpfload.DecodeNat reads it is struct natrec's.
func TestNatHeadLayout(t *testing.T) {
	h := bpfload.NatHead{}
	if got, want := unsafe.Sizeof(h), unsafe.Offsetof(allocNatrec{}.Stack); got != want {
		t.Fatalf("NatHead is %d bytes, struct natrec's head %d", got, want)
	}
	if unsafe.Offsetof(h.R11) != unsafe.Offsetof(allocNatrec{}.R11) || unsafe.Offsetof(h.Len) != unsafe.Offsetof(allocNatrec{}.Len) ||
		unsafe.Offsetof(h.Kstack) != unsafe.Offsetof(allocNatrec{}.Kstack) {
		t.Fatal("NatHead's fields are not struct natrec's")
	}
}

// With NativeBytes, each tracked call sends its registers and stack copy
// under the id its live entry keeps.
func TestNativeCopies(t *testing.T) {
	testutil.RequireRoot(t)
	script := filepath.Join(t.TempDir(), "keeper.py")
	if err := os.WriteFile(script, []byte(keeper), 0o644); err != nil {
		t.Fatal(err)
	}
	in := testutil.Find(t, "pyenv-3.12")
	tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), script), 30*time.Second)
	p, err := pyframes.Open(tg.Pid)
	if err != nil {
		t.Fatal(err)
	}
	kl, err := p.KernelLayout()
	if err != nil {
		t.Fatal(err)
	}
	pr, err := Load(Config{Pid: tg.Pid, Binary: fmt.Sprintf("/proc/%d/root%s", tg.Pid, p.Info.Binary), Layout: kl,
		MaxFrames: 16, SampleBytes: 1000, NativeBytes: MaxNativeBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	ids := map[uint64]bool{}
	deadline := time.Now().Add(2 * time.Second)
	for len(ids) < 20 && time.Now().Before(deadline) {
		b, ok, err := pr.NatRing.Next(deadline)
		if err != nil || !ok {
			break
		}
		h, st, err := bpfload.DecodeNat(b)
		if err != nil {
			t.Fatal(err)
		}
		if h.Id == 0 || h.Tid != uint32(tg.Pid) || h.Sp == 0 || h.Ip == 0 || len(st) < 1024 {
			t.Fatalf("record: %+v with %d stack bytes", h, len(st))
		}
		ids[h.Id] = true
	}
	pr.Detach()
	c, err := pr.ReadCounters()
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) < 20 || c[CNatSent] == 0 {
		t.Fatalf("%d native copies read, %d sent, %d lost", len(ids), c[CNatSent], c[CNatLost])
	}
	var k uint64
	var v Live
	found := 0
	for it := pr.Lives.Iterate(); it.Next(&k, &v); {
		if ids[v.Nat] {
			found++
		}
	}
	if found == 0 {
		t.Errorf("no live entry carries the id of a copy read")
	}
	t.Logf("%d copies, %d KiB on average; %d live entries name one", c[CNatSent], c[CNatBytes]/max(c[CNatSent], 1)/1024, found)
}
