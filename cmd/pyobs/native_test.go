package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

var unwoundRe = regexp.MustCompile(`native stacks: (\d+) unwound fully \(([\d.]+) %\), (\d+) truncated, (\d+) failed, (\d+) merge mismatches`)

// foldedLines reads a folded file as (frames root first, weight).
func foldedLines(t *testing.T, path string) (lines [][]string, weights []int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		w, _ := strconv.ParseInt(l[i+1:], 10, 64)
		lines = append(lines, strings.Split(l[:i], ";"))
		weights = append(weights, w)
	}
	return lines, weights
}

func isPythonLabel(s string) bool { return strings.HasSuffix(s, ")") && strings.Contains(s, ".py:") }

// TestRecordNativeMerge: Python caller → sorted() in C → Python key
// function. With --native the folded stacks show, root to leaf, caller,
// then native frames (list.sort's), then keyfn; most native unwinds reach
// the outermost frame.
func TestRecordNativeMerge(t *testing.T) {
	testutil.RequireRoot(t)
	for _, c := range []struct {
		label  string
		native string // a native frame that must sit between caller and keyfn ("" when unnamed: .dynsym only)
	}{
		{"pyenv-3.12", "list_sort_impl"},
		{"pyenv-3.10", "list_sort_impl"},
		{"pyenv-3.11", "list_sort_impl"},
		{"pyenv-3.13", "list_sort_impl"},
		{"debian-3.11", "PyObject_CallOneArg"}, // static EXEC, .dynsym only: list_sort is [unknown]
	} {
		t.Run(c.label, func(t *testing.T) {
			in := testutil.Find(t, c.label)
			tg := testutil.Start(t, in, "native_sort.py")
			out := filepath.Join(t.TempDir(), "n.folded")
			r := testutil.Run(t, 60*time.Second, "record", "--native", "-p", fmt.Sprint(tg.Pid), "-d", "2s", "-F", "499", "-o", out)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			m := unwoundRe.FindStringSubmatch(r.Stderr)
			if m == nil {
				t.Fatalf("footer lacks the native account: %s", r.Stderr)
			}
			full, _ := strconv.ParseFloat(m[2], 64)
			mism, _ := strconv.Atoi(m[5])
			n, _ := strconv.Atoi(m[1])
			t.Logf("%s: %s", c.label, m[0])
			if full < 90 {
				t.Errorf("only %.1f %% of native stacks unwound fully", full)
			}
			lines, weights := foldedLines(t, out)
			var glued, keyed int64
			var total int64
			for i, fr := range lines {
				total += weights[i]
				ci, ki, ni := -1, -1, -1
				for j, f := range fr {
					switch {
					case strings.HasPrefix(f, "caller ("):
						ci = j
					case strings.HasPrefix(f, "keyfn ("):
						ki = j
					case ci >= 0 && ki < 0 && !isPythonLabel(f) && (c.native == "" || f == c.native):
						ni = j
					}
				}
				if ki < 0 {
					continue
				}
				keyed += weights[i]
				if ci >= 0 && ci < ni && ni < ki && fr[0] != "[merge mismatch]" {
					glued += weights[i]
				}
			}
			if mism > n/5+1 {
				t.Errorf("%d of %d samples had merge mismatches", mism, total)
			}
			if keyed == 0 || glued < keyed/2 {
				t.Errorf("%d of %d keyfn samples show caller;…%s…;keyfn in order", glued, keyed, c.native)
			}
		})
	}
}

// TestRecordKernel: a target in a read/getppid loop: with --kernel the
// leaf frames are the kernel's (suffix _[k]) under the Python frame that
// issued the syscall.
func TestRecordKernel(t *testing.T) {
	testutil.RequireRoot(t)
	for _, label := range []string{"pyenv-3.12", "debian-3.11"} {
		t.Run(label, func(t *testing.T) {
			in := testutil.Find(t, label)
			tg := testutil.Start(t, in, "native_sort.py", "syscall")
			out := filepath.Join(t.TempDir(), "k.folded")
			r := testutil.Run(t, 60*time.Second, "record", "--native", "--kernel", "-p", fmt.Sprint(tg.Pid), "-d", "2s", "-F", "499", "-o", out)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			lines, weights := foldedLines(t, out)
			var kern, total int64
			for i, fr := range lines {
				total += weights[i]
				leaf := fr[len(fr)-1]
				spin := -1
				for j, f := range fr {
					if strings.HasPrefix(f, "spin (") {
						spin = j
					}
				}
				if strings.HasSuffix(leaf, "_[k]") && spin >= 0 && !strings.HasSuffix(fr[spin+1], "_[k]") {
					kern += weights[i]
				}
			}
			if kern < total/4 {
				t.Errorf("only %d of %d samples end in kernel frames under spin → native", kern, total)
			}
		})
	}
}
