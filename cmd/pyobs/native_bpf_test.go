//go:build amd64

package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// TestRecordNativeBPF: --native on the bpf engine takes the native stack
// copy in the same program, at the same instant, as the Python walk. On
// the qsort target (caller → libc qsort → ctypes callback → compare) a
// sample's compare frame is then always under the callback's C frames,
// glued by the runs' C-stack links (3.12+, sid's stripped 3.14 included:
// the link finds its unnamed eval loop) or by counting (3.11); no sample
// is a late read ([Python frames returned before read] is the perf
// engine's), and the interpreter frame whose Python frame is being pushed
// or popped is marked as such. With --kernel too, the samples in a write
// show the Python caller, the C write wrapper and the kernel's frames.
func TestRecordNativeBPF(t *testing.T) {
	testutil.RequireRoot(t)
	unnamedCallback := func(s string) bool {
		return strings.HasPrefix(s, "[unknown] (_ctypes.") || strings.HasPrefix(s, "[unknown] (libffi.")
	}
	for _, c := range []struct {
		label    string
		callback func(string) bool
		how      string // the footer's count of the glue used
	}{
		{"pyenv-3.11", ctypesCallback, "by counting"},
		{"pyenv-3.12", ctypesCallback, "by C-stack address"},
		{"pyenv-3.13", ctypesCallback, "by C-stack address"},
		{"sid-3.14", unnamedCallback, "by C-stack address"},
	} {
		t.Run(c.label, func(t *testing.T) {
			in := testutil.Find(t, c.label)
			tg := testutil.Start(t, in, "native_mixed.py", "qsort")
			out := filepath.Join(t.TempDir(), "n.folded")
			r := testutil.Run(t, 60*time.Second, "record", "--native", "-p", fmt.Sprint(tg.Pid), "-d", "3s", "-F", "499", "-o", out)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			if !strings.Contains(r.Stderr, "bpf engine") {
				t.Fatalf("--native did not stay on the bpf engine: %s", r.Stderr)
			}
			lines, weights := foldedLines(t, out)
			var total, cmp, glued, mism, late, transit int64
			for i, fr := range lines {
				total += weights[i]
				switch {
				case fr[0] == "[merge mismatch]":
					mism += weights[i]
				case index(fr, 0, prefix("[Python frames returned before read]")) >= 0:
					late += weights[i]
				case index(fr, 0, prefix("[Python frame entering or leaving]")) >= 0:
					transit += weights[i]
				}
				ki := index(fr, 0, prefix("compare ("))
				if ki < 0 {
					continue
				}
				cmp += weights[i]
				if gluedCompare(fr, ki, c.callback) {
					glued += weights[i]
				}
			}
			t.Logf("%s: %d samples, %d compare (%d glued), %d mismatches, %d in transit", c.label, total, cmp, glued, mism, transit)
			if cmp < 50 || glued < cmp*97/100 {
				t.Errorf("%d of %d compare samples show caller;…;qsort_r;…;(ctypes callback);…;compare: want ≥ 97 %%", glued, cmp)
			}
			if mism*100 > total || late > 0 {
				t.Errorf("%d merge mismatches, %d late in %d samples: the copy and the walk are of one instant", mism, late, total)
			}
			if !strings.Contains(r.Stderr, c.how) {
				t.Errorf("footer does not account for the glue %q: %s", c.how, r.Stderr)
			}
		})
	}
	t.Run("kernel", func(t *testing.T) {
		in := testutil.Find(t, "pyenv-3.12")
		tg := testutil.Start(t, in, "native_mixed.py", "iomix")
		out := filepath.Join(t.TempDir(), "k.folded")
		r := testutil.Run(t, 60*time.Second, "record", "--native", "--kernel", "-p", fmt.Sprint(tg.Pid), "-d", "2s", "-F", "499", "-o", out)
		if r.Code != 0 || !strings.Contains(r.Stderr, "bpf engine") {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		lines, weights := foldedLines(t, out)
		var kern, whole int64
		for i, fr := range lines {
			ki := index(fr, 0, func(s string) bool { return strings.HasSuffix(s, "_[k]") })
			if ki < 0 {
				continue
			}
			kern += weights[i]
			pi := index(fr, 0, prefix("iomix ("))
			wi := index(fr, pi+1, oneOf("write", "read", "__write", "__read", "__libc_write", "__libc_read"))
			if pi >= 0 && wi > pi && ki > wi {
				whole += weights[i]
			}
		}
		t.Logf("%d samples in the kernel, %d of them iomix;…;write/read;…;_[k]", kern, whole)
		if kern < 100 || whole < kern*9/10 {
			t.Errorf("%d of %d kernel samples show iomix, then the C wrapper, then kernel frames", whole, kern)
		}
	})
}
