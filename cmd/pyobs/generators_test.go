package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// generatorEntries are the outermost frames of generators.py's threads: each
// driver thread is started with _thread.start_new_thread, so its own entry
// function is the bottom of every whole stack; the main thread's is <module>.
var generatorEntries = map[string]bool{
	"drive_for": true, "drive_next": true, "drive_yield_from": true, "drive_coro": true, "drive_sum": true,
	"<module>": true,
}

// generatorFrames are the frames that run in a generator's or coroutine's
// frame (owner GENERATOR): the ones whose callers went missing.
var generatorFrames = map[string]bool{
	"numbers": true, "leaf_gen": true, "middle_gen": true, "outer_gen": true,
	"inner_coro": true, "mid_coro": true, "outer_coro": true, "Awaitable.__await__": true, "__await__": true,
}

// TestDumpGeneratorCallers: threads that drive generators, coroutines and
// `yield from` in tight loops. Every stack pyobs marks good (dump:
// consistent; record: a stack, not a [torn read]/[... read] marker) must be
// whole: it starts at its thread's outermost frame, never at a generator
// frame whose callers were missing when it was read. Hundreds of dumps and
// thousands of samples per interpreter; the rest may be torn, never wrong.
func TestDumpGeneratorCallers(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		t.Run(in.Label, func(t *testing.T) {
			tg := testutil.Start(t, in, "generators.py")
			pid := fmt.Sprint(tg.Pid)
			good, torn, inGen := 0, 0, 0
			dumps := 150
			for i := 0; i < dumps; i++ {
				args := []string{"-p", pid}
				if i%10 == 9 {
					args = append(args, "--lock")
				}
				d := dumpJSON(t, args...)
				for _, th := range d.Threads {
					if len(th.Frames) == 0 {
						continue
					}
					if !th.Consistent {
						torn++
						continue
					}
					good++
					names := make([]string, len(th.Frames))
					gen := false
					for j, f := range th.Frames {
						names[j] = f.Function
						gen = gen || generatorFrames[f.Function]
					}
					if gen {
						inGen++
					}
					if out := names[len(names)-1]; !generatorEntries[out] {
						t.Errorf("dump %d: thread %d marked consistent but rooted at %s, not its entry: %s",
							i, th.Tid, out, strings.Join(names, " ← "))
					}
				}
			}
			t.Logf("dump: %d good stacks (%d inside a generator or coroutine), %d torn", good, inGen, torn)
			if good < dumps || inGen < dumps/2 {
				t.Errorf("only %d good stacks, %d inside generators, in %d dumps: the test saw too little", good, inGen, dumps)
			}

			out := filepath.Join(t.TempDir(), "gen.folded")
			r := testutil.Run(t, 60*time.Second, "record", "-p", pid, "-d", "2s", "-F", "999", "--format", "folded", "-o", out)
			if r.Code != 0 {
				t.Fatalf("pyobs record: exit %d, stderr: %s", r.Code, r.Stderr)
			}
			lines, weights := foldedLines(t, out)
			var samples, marked, genSamples int64
			for i, st := range lines {
				if strings.HasPrefix(st[0], "[") {
					marked += weights[i]
					continue
				}
				samples += weights[i]
				root := st[0]
				if j := strings.Index(root, " ("); j >= 0 {
					root = root[:j]
				}
				for _, f := range st {
					if j := strings.Index(f, " ("); j >= 0 && generatorFrames[f[:j]] {
						genSamples += weights[i]
						break
					}
				}
				if !generatorEntries[root] {
					t.Errorf("record: %d samples rooted at %s, not a thread's entry: %s", weights[i], root, strings.Join(st, ";"))
				}
			}
			t.Logf("record: %d samples with a stack (%d inside generators), %d marked (torn/late/blocked)", samples, genSamples, marked)
			if samples < 200 || genSamples < 50 {
				t.Errorf("record: %d samples with a stack, %d inside generators: too few to tell; stderr: %s", samples, genSamples, r.Stderr)
			}
		})
	}
}
