//go:build amd64

package kwalk_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/testutil"
)

// TestKernelWalkLateAddrs: the walker loaded Late with the layout read
// from the command's files (what a held command gets) walks nothing until
// Configure gives it the running interpreter's addresses and TLS offsets,
// then walks its samples whole, finding threads through their TLS; an
// interpreter of another build is refused (ErrOtherBuild).
func TestKernelWalkLateAddrs(t *testing.T) {
	testutil.RequireRoot(t)
	ins := testutil.Interpreters(t)
	refused := 0
	for i, in := range ins {
		t.Run(in.Label, func(t *testing.T) {
			argv := append(append([]string{}, in.Argv...), filepath.Join(testutil.Repo(), "testdata", "targets", target))
			read, path, err := pyframes.CommandLayout(argv, os.Environ())
			if err != nil {
				t.Fatal(err)
			}
			tg := testutil.StartArgv(t, argv, 30*time.Second)
			w, err := kwalk.Open(tg.Pid, read, kwalk.Options{Freq: 997, Late: true})
			if errors.Is(err, kwalk.ErrUnavailable) {
				testutil.Skip(t, fmt.Sprintf("loading a perf_event eBPF program with bpf_loop: %v", err))
			}
			if err != nil {
				t.Fatalf("kwalk.Open with the layout of %s: %v", path, err)
			}
			defer w.Close()
			count := func(d time.Duration) (n, before, complete, byTLS int) {
				w.SetDeadline(time.Now().Add(d))
				for {
					s, err := w.Read()
					if errors.Is(err, os.ErrDeadlineExceeded) {
						return
					}
					if err != nil {
						t.Fatalf("read: %v", err)
					}
					n++
					if s.Flags&kwalk.FlagBeforePython != 0 {
						before++
					}
					if s.Complete() {
						complete++
					}
					if s.Flags&kwalk.FlagByTLS != 0 {
						byTLS++
					}
				}
			}
			n, before, complete, _ := count(300 * time.Millisecond)
			if n == 0 || before != n || complete != 0 {
				t.Fatalf("before Configure: %d samples, %d before the interpreter, %d walked: want all unwalked", n, before, complete)
			}
			p, err := pyframes.Open(tg.Pid)
			if err != nil {
				t.Fatal(err)
			}
			live, err := p.KernelLayout()
			if err != nil {
				t.Fatal(err)
			}
			other := ins[(i+1)%len(ins)]
			if ol, _, err := pyframes.CommandLayout(other.Argv, os.Environ()); err == nil {
				if same, _ := kwalk.SameBuild(read, ol); !same {
					if err := w.Configure(ol, nil); !errors.Is(err, kwalk.ErrOtherBuild) {
						t.Errorf("Configure with %s's layout: %v, want ErrOtherBuild", other.Label, err)
					}
					refused++
				}
			}
			tls, err := p.TLSOffsets()
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Configure(live, tls); err != nil {
				t.Fatalf("Configure: %v", err)
			}
			// No thread map: the thread states come through the TLS
			// offsets Configure wrote. (The ring may still hold a few
			// samples from before.)
			n, before, complete, byTLS := count(500 * time.Millisecond)
			t.Logf("%s: after Configure %d samples, %d complete, %d by TLS, %d from before", in.Label, n, complete, byTLS, before)
			walked := n - before
			if walked < 50 || complete*100 < 95*walked || byTLS != walked {
				t.Errorf("after Configure: %d samples walked, %d complete, %d by TLS: want ≥ 95 %% complete, all by TLS", walked, complete, byTLS)
			}
		})
	}
	if refused == 0 {
		t.Error("no interpreter of another layout to refuse: the check never ran")
	}
}
