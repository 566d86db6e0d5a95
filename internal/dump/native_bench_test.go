package dump

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/session"
	"github.com/pyobs/pyobs/internal/testutil"
)

// BenchmarkDumpNative10Threads: one whole dump --lock, and one dump
// --native (registers, 64 KiB stack copies, unwinding with a fresh ELF
// cache as a one-shot command has, merge), of a 10-thread target parked
// 20+ frames deep; with the target's stopped time per dump.
func BenchmarkDumpNative10Threads(b *testing.B) {
	for _, label := range []string{"pyenv-3.12", "sid-3.14"} {
		b.Run(label, func(b *testing.B) {
			in := testutil.Find(b, label)
			argv := append(append([]string{}, in.Argv...), filepath.Join(testutil.Repo(), "testdata/targets/many_threads.py"), "10", "20")
			tg := testutil.StartArgv(b, argv, 60*time.Second)
			s, err := session.Attach(tg.Pid)
			if err != nil {
				b.Fatal(err)
			}
			for _, native := range []bool{false, true} {
				name := "lock"
				if native {
					name = "native"
				}
				b.Run(name, func(b *testing.B) {
					var stopped, unwind float64
					for i := 0; i < b.N; i++ {
						// The previous dump's garbage (a fresh ELF cache each)
						// is not the next one's: a one-shot command has none.
						b.StopTimer()
						runtime.GC()
						b.StartTimer()
						d, err := Run(context.Background(), s, Options{Lock: true, Native: native})
						if err != nil {
							b.Fatal(err)
						}
						stopped += d.Read.StoppedUS
						if native {
							if d.Native.Mismatch != 0 || d.Native.Full != len(d.Threads) {
								b.Fatalf("native account %+v for %d threads", d.Native, len(d.Threads))
							}
							unwind += d.Native.UnwindUS
						}
					}
					b.ReportMetric(stopped/float64(b.N), "µs-stopped/op")
					if native {
						b.ReportMetric(unwind/float64(b.N), "µs-unwind/op")
					}
				})
			}
		})
	}
}

func startMany(b *testing.B, label string) *session.Session {
	in := testutil.Find(b, label)
	argv := append(append([]string{}, in.Argv...), filepath.Join(testutil.Repo(), "testdata/targets/many_threads.py"), "50", "20")
	tg := testutil.StartArgv(b, argv, 60*time.Second)
	s, err := session.Attach(tg.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkDump50Threads: one whole dump (every stack, names, /proc states)
// of a 50-thread target, each thread 20+ frames deep.
func BenchmarkDump50Threads(b *testing.B) {
	for _, label := range []string{"pyenv-3.10", "pyenv-3.12", "sid-3.14"} {
		b.Run(label, func(b *testing.B) {
			s := startMany(b, label)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := Run(context.Background(), s, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
