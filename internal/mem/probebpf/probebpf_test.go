//go:build amd64

package probebpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

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
