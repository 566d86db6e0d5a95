package session

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/testutil"
)

func startMany(b *testing.B, label string) *Session {
	in := testutil.Find(b, label)
	argv := append(append([]string{}, in.Argv...), filepath.Join(testutil.Repo(), "testdata/targets/many_threads.py"), "50", "20")
	tg := testutil.StartArgv(b, argv, 60*time.Second)
	s, err := Attach(tg.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkStackRead: the cost of reading one thread's full stack (≈25
// frames), with the code-object cache and without it.
func BenchmarkStackRead(b *testing.B) {
	for _, label := range []string{"pyenv-3.10", "pyenv-3.12", "sid-3.14"} {
		for _, cached := range []bool{true, false} {
			name := label + "/cached"
			if !cached {
				name = label + "/uncached"
			}
			b.Run(name, func(b *testing.B) {
				s := startMany(b, label)
				s.Py.NoCache = !cached
				ths, err := s.Py.Threads(pyframes.Options{})
				if err != nil {
					b.Fatal(err)
				}
				frames := 0
				for _, t := range ths {
					frames += len(t.Frames)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := s.Py.Threads(pyframes.Options{}); err != nil {
						b.Fatal(err)
					}
				}
				per := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / float64(len(ths))
				b.ReportMetric(per/1e3, "µs/stack")
				b.ReportMetric(float64(frames)/float64(len(ths)), "frames/stack")
			})
		}
	}
}
