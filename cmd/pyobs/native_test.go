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

// recordNative records target script+args on the interpreter label with
// --native and extra flags, and returns the folded lines and the footer's
// native account.
func recordNative(t *testing.T, label string, extra []string, args ...string) (lines [][]string, weights []int64, account []string) {
	t.Helper()
	in := testutil.Find(t, label)
	tg := testutil.Start(t, in, "native_mixed.py", args...)
	out := filepath.Join(t.TempDir(), "n.folded")
	argv := append([]string{"record", "--native", "-p", fmt.Sprint(tg.Pid), "-d", "2s", "-F", "499", "-o", out}, extra...)
	r := testutil.Run(t, 60*time.Second, argv...)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	account = unwoundRe.FindStringSubmatch(r.Stderr)
	if account == nil {
		t.Fatalf("footer lacks the native account: %s", r.Stderr)
	}
	t.Logf("%s %v: %s", label, args, account[0])
	lines, weights = foldedLines(t, out)
	return lines, weights, account
}

// index returns the first j >= from with match(fr[j]), or -1.
func index(fr []string, from int, match func(string) bool) int {
	for j := from; j >= 0 && j < len(fr); j++ {
		if match(fr[j]) {
			return j
		}
	}
	return -1
}

func prefix(p string) func(string) bool {
	return func(s string) bool { return strings.HasPrefix(s, p) }
}

func oneOf(names ...string) func(string) bool {
	return func(s string) bool {
		for _, n := range names {
			if s == n {
				return true
			}
		}
		return false
	}
}

// ctypes callback frames: libffi's closure trampoline and _ctypes'
// closure_fcn/_CallPythonObject (named from .symtab on pyenv builds).
// gluedCompare: a sample whose compare frame is at ki reads, root to leaf,
// caller, qsort's frames, the ctypes callback's frames, then compare.
func gluedCompare(fr []string, ki int, callback func(string) bool) bool {
	ci := index(fr, 0, prefix("caller ("))
	qi := index(fr, ci+1, oneOf("qsort_r", "qsort"))
	cb := index(fr, qi+1, callback)
	return fr[0] != "[merge mismatch]" && ci >= 0 && qi > ci && cb > qi && ki > cb && index(fr, qi+1, isPythonLabel) == ki
}

var ctypesCallback = oneOf("closure_fcn", "_CallPythonObject", "ffi_closure_unix64_inner", "ffi_closure_unix64")

// TestRecordNativeQsort: Python caller → libc qsort (through ctypes) →
// ctypes callback → Python comparator. Most compare samples read, root to
// leaf: caller, qsort's libc frames (qsort_r, then its msort internals),
// the ctypes callback frames, compare. On sid 3.14 (a static binary
// stripped to .dynsym) the eval loop and the callback frames have no
// names: the merge finds the eval loop as the unnamed frame holding a
// run's C-stack link, and the callback frames are _ctypes'/libffi's
// unnamed ones; its merge mismatches are logged.
func TestRecordNativeQsort(t *testing.T) {
	testutil.RequireRoot(t)
	unnamedCallback := func(s string) bool {
		return strings.HasPrefix(s, "[unknown] (_ctypes.") || strings.HasPrefix(s, "[unknown] (libffi.")
	}
	for _, c := range []struct {
		label    string
		callback func(string) bool
	}{
		{"pyenv-3.11", ctypesCallback},
		{"pyenv-3.12", ctypesCallback},
		{"pyenv-3.13", ctypesCallback},
		{"sid-3.14", unnamedCallback},
	} {
		t.Run(c.label, func(t *testing.T) {
			// Compare samples are a few % of all: record until there are
			// enough of them (at most three 2 s recordings) that the share
			// glued measures the merge, not the luck of a handful.
			var glued, cmp, total int64
			mism := 0
			for rec := 0; rec < 3 && cmp < 60; rec++ {
				lines, weights, account := recordNative(t, c.label, nil, "qsort")
				for i, fr := range lines {
					total += weights[i]
					ki := index(fr, 0, prefix("compare ("))
					if ki < 0 {
						continue
					}
					cmp += weights[i]
					if gluedCompare(fr, ki, c.callback) {
						glued += weights[i]
					}
				}
				m, _ := strconv.Atoi(account[5])
				mism += m
			}
			t.Logf("%s: %d of %d compare samples glued; %d merge mismatches in %d samples", c.label, glued, cmp, mism, total)
			if cmp == 0 || glued < cmp*2/3 {
				t.Errorf("%d of %d compare samples show caller;…;qsort_r;…;(ctypes callback);…;compare", glued, cmp)
			}
		})
	}
}

// TestRecordNativeCLeaf: a target inside stdlib C code on a large buffer:
// the leaf native frames name that code, right under the Python frame
// that called it.
func TestRecordNativeCLeaf(t *testing.T) {
	testutil.RequireRoot(t)
	for _, c := range []struct {
		mode, pyfn string
		under      []string // named native frames, in order, right under pyfn
		leaf       string   // library the leaf frames lie in (for unnamed static functions)
	}{
		{"zlib", "compressor (", []string{"zlib_compress", "deflate"}, "libz.so"},
		{"sha", "hasher (", []string{"_hashlib_openssl_sha256", "py_evp_fromname", "SHA256_Update"}, "libcrypto.so"},
	} {
		for _, label := range []string{"pyenv-3.12", "pyenv-3.13"} {
			t.Run(c.mode+"/"+label, func(t *testing.T) {
				lines, weights, _ := recordNative(t, label, nil, c.mode)
				var good, total int64
				for i, fr := range lines {
					total += weights[i]
					pi := index(fr, 0, prefix(c.pyfn))
					if pi < 0 || len(fr) < pi+1+len(c.under) {
						continue
					}
					ok := true
					for k, name := range c.under {
						ok = ok && fr[pi+1+k] == name
					}
					leaf := fr[len(fr)-1]
					ok = ok && (leaf == c.under[len(c.under)-1] || strings.Contains(leaf, c.leaf) || !strings.HasPrefix(leaf, "[unknown]"))
					if ok {
						good += weights[i]
					}
				}
				if good < total/2 {
					t.Errorf("%d of %d samples show %s…);%s;… in C", good, total, c.pyfn, strings.Join(c.under, ";"))
				}
			})
		}
	}
}

// TestRecordKernelIO: heavy os.write/os.read on a pipe: with --kernel the
// kernel frames (syscall entry, then the vfs layer) sit above the libc
// wrapper under the Python frame rw.
func TestRecordKernelIO(t *testing.T) {
	testutil.RequireRoot(t)
	if b, err := os.ReadFile("/proc/sys/kernel/kptr_restrict"); err == nil && strings.TrimSpace(string(b)) == "2" {
		testutil.Skip(t, "kernel.kptr_restrict=2 hides kernel symbols")
	}
	lines, weights, _ := recordNative(t, "pyenv-3.12", []string{"--kernel"}, "io")
	var good, total int64
	for i, fr := range lines {
		total += weights[i]
		ri := index(fr, 0, prefix("rw ("))
		ei := index(fr, ri+1, prefix("entry_SYSCALL_64"))
		vi := index(fr, ei+1, oneOf("vfs_read_[k]", "vfs_write_[k]"))
		if ri >= 0 && ei > ri && vi > ei && index(fr, ri+1, func(s string) bool { return s == "os_write" || s == "os_read" }) < ei {
			good += weights[i]
		}
	}
	if good < total/2 {
		t.Errorf("%d of %d samples show rw;…os_read/os_write;…;entry_SYSCALL_64…_[k];…;vfs_read/vfs_write_[k]", good, total)
	}
}

// TestRecordKernelBPF: --kernel alone stays on the bpf engine, and each
// sample taken in the kernel carries its kernel call chain under its
// Python frame: iomix (…);entry_SYSCALL_64…_[k];…;vfs_read/vfs_write_[k].
// The target spends part of its time in the kernel, part in Python: the
// share of samples with kernel frames is its own share of system time
// over the recording (/proc/PID/stat), within 15 points.
func TestRecordKernelBPF(t *testing.T) {
	testutil.RequireRoot(t)
	requireKernelWalker(t)
	if b, err := os.ReadFile("/proc/sys/kernel/kptr_restrict"); err == nil && strings.TrimSpace(string(b)) == "2" {
		testutil.Skip(t, "kernel.kptr_restrict=2 hides kernel symbols")
	}
	for _, label := range []string{"pyenv-3.12", "pyenv-3.13"} {
		t.Run(label, func(t *testing.T) {
			in := testutil.Find(t, label)
			tg := testutil.Start(t, in, "native_mixed.py", "iomix")
			out := filepath.Join(t.TempDir(), "k.folded")
			u0, s0 := procUserSys(t, tg.Pid)
			r := testutil.Run(t, 60*time.Second, "record", "--kernel", "-p", fmt.Sprint(tg.Pid), "-d", "3s", "-F", "499", "-o", out)
			u1, s1 := procUserSys(t, tg.Pid)
			if r.Code != 0 {
				t.Fatalf("exit %d: %s", r.Code, r.Stderr)
			}
			if !strings.Contains(r.Stderr, "bpf engine") || !strings.Contains(r.Stderr, "kernel stacks: ") {
				t.Fatalf("want the bpf engine and its kernel-stack account: %s", r.Stderr)
			}
			lines, weights := foldedLines(t, out)
			var good, inKernel, total int64
			for i, fr := range lines {
				total += weights[i]
				if index(fr, 0, func(s string) bool { return strings.HasSuffix(s, "_[k]") }) >= 0 {
					inKernel += weights[i]
				}
				ri := index(fr, 0, prefix("iomix ("))
				ei := index(fr, ri+1, prefix("entry_SYSCALL_64"))
				vi := index(fr, ei+1, oneOf("vfs_read_[k]", "vfs_write_[k]"))
				if ri >= 0 && ei == ri+1 && vi > ei {
					good += weights[i]
				}
			}
			share := (s1 - s0) / max(u1-u0+s1-s0, 0.01)
			got := float64(inKernel) / float64(max(total, 1))
			t.Logf("%d samples, %d with kernel frames (%.2f), %d iomix;entry_SYSCALL_64…;vfs_*; target's system share %.2f (user %.2fs, sys %.2fs)",
				total, inKernel, got, good, share, u1-u0, s1-s0)
			if total < 500 {
				t.Fatalf("%d samples in 3 s at 499 Hz of a busy target", total)
			}
			if share < 0.15 || share > 0.85 {
				t.Fatalf("the target spent %.2f of its CPU time in the kernel: not the mix this test needs", share)
			}
			if good < inKernel*3/4 {
				t.Errorf("%d of %d kernel samples show iomix (…);entry_SYSCALL_64…_[k];…;vfs_read/vfs_write_[k]", good, inKernel)
			}
			if got < share-0.15 || got > share+0.15 {
				t.Errorf("%.2f of the samples have kernel frames; the target spent %.2f of its CPU time in the kernel", got, share)
			}
		})
	}
}

// TestRecordNativeTruncated: --stack-size 512 on a 60-deep Python stack
// with a C call at each level: the copies end long before the root, the
// footer counts them truncated, the folded stacks carry the marker and
// the outer Python frames stay above it.
func TestRecordNativeTruncated(t *testing.T) {
	testutil.RequireRoot(t)
	lines, weights, account := recordNative(t, "pyenv-3.12", []string{"--stack-size", "512"}, "deep", "60")
	n, _ := strconv.Atoi(account[1])
	trunc, _ := strconv.Atoi(account[3])
	if trunc == 0 || trunc < 9*(n+trunc)/10 {
		t.Errorf("%d truncated, %d full: want nearly all truncated", trunc, n)
	}
	var marked, total int64
	for i, fr := range lines {
		total += weights[i]
		ti := index(fr, 0, oneOf("[truncated native stack]"))
		if ti > 0 && index(fr, 0, prefix("deep (")) < ti {
			marked += weights[i]
		}
	}
	if marked < total/2 {
		t.Errorf("%d of %d samples carry deep (…);…;[truncated native stack]", marked, total)
	}
}
