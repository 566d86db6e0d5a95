package procfs_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/procfs"
	"github.com/pyobs/pyobs/internal/testutil"
)

// BenchmarkStatSample200Threads: the cost of one stat sample (process files
// and every thread's stat/status/schedstat/wchan/syscall) of a 200-thread
// Python process, with and without smaps_rollup.
func BenchmarkStatSample200Threads(b *testing.B) {
	in := testutil.Find(b, "pyenv-3.12")
	tg := testutil.StartArgv(b, append(append([]string{}, in.Argv...),
		filepath.Join(testutil.Repo(), "testdata/targets/many_threads.py"), "199", "2"), 60*time.Second)
	fs := procfs.Default()
	for _, smaps := range []bool{false, true} {
		name := "threads"
		if smaps {
			name = "threads+smaps"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				s, err := fs.Sample(tg.Pid, procfs.SampleOptions{Threads: true, Smaps: smaps})
				if err != nil {
					b.Fatal(err)
				}
				if i == 0 && len(s.Threads) < 200 {
					b.Fatalf("%d threads sampled, want 200", len(s.Threads))
				}
			}
		})
	}
}
