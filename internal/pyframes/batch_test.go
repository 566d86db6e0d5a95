package pyframes

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// countMem counts the reads (syscalls: one per Read or ReadV) a walk makes.
type countMem struct {
	m     Memory
	reads int
}

func (c *countMem) Read(addr uint64, p []byte) error { c.reads++; return c.m.Read(addr, p) }

func (c *countMem) ReadV(segs []Seg) int { c.reads++; return readV(c.m, segs) }

// TestStackReadsBatched: a thread 400 frames deep (several data-stack
// chunks) and one parked under 60 generators delegating with `yield from`
// (each frame in its own heap object) are read in a few batched reads each,
// not one per frame, once their code objects are cached.
func TestStackReadsBatched(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		t.Run(in.Label, func(t *testing.T) {
			tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), filepath.Join(testutil.Repo(), "testdata", "targets", "deep_mixed.py")), 30*time.Second)
			time.Sleep(200 * time.Millisecond) // the main thread walks down its generator chain
			p, err := Open(tg.Pid)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Threads(Options{}); err != nil { // code objects into the cache
				t.Fatal(err)
			}
			refs, err := p.ThreadRefs()
			if err != nil {
				t.Fatal(err)
			}
			cm := &countMem{m: p.objs.mem}
			p.objs.mem = cm
			for _, ref := range refs {
				cm.reads = 0
				fr, consistent, _, err := p.Stack(ref.Addr, Options{})
				if err != nil || !consistent {
					t.Fatalf("thread 0x%x: %v (consistent %v)", ref.Addr, err, consistent)
				}
				t.Logf("thread 0x%x: %d frames in %d reads", ref.Addr, len(fr), cm.reads)
				// A few for the thread state, window, re-check and cached
				// code objects' validation, then about one per 2-page
				// region of frames (was one per frame outside the window).
				if len(fr) > 50 && cm.reads > 16+len(fr)/32 {
					t.Errorf("thread 0x%x: %d frames took %d reads", ref.Addr, len(fr), cm.reads)
				}
			}
		})
	}
}

// TestThreadNamesBatched: the names of 50 threads (shared-keys values on
// 3.11+) are read in a few vectored reads, and getAttrs finds for each
// Thread object what getAttr finds alone. Truth: the names the target
// gave its threads (worker-0 … worker-49).
func TestThreadNamesBatched(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.Interpreters(t) {
		t.Run(in.Label, func(t *testing.T) {
			tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), filepath.Join(testutil.Repo(), "testdata", "targets", "many_threads.py"), "50", "3"), 30*time.Second)
			p, err := Open(tg.Pid)
			if err != nil {
				t.Fatal(err)
			}
			var interp uint64
			_ = p.interps(func(_ int64, i uint64) error {
				if interp == 0 {
					interp = i
				}
				return nil
			})
			cm := &countMem{m: p.objs.mem}
			p.objs.mem = cm
			names, err := p.threadNames(interp)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, n := range names {
				seen[n] = true
			}
			for i := 0; i < 50; i++ {
				if n := fmt.Sprintf("worker-%d", i); !seen[n] {
					t.Errorf("%s not read (%d names)", n, len(names))
				}
			}
			t.Logf("%d names in %d reads", len(names), cm.reads)
			if in.Version >= "3.11" && cm.reads > 40 { // one by one: ~180
				t.Errorf("%d names took %d reads", len(names), cm.reads)
			}
			// The batched attribute read agrees with the one-by-one one.
			r := p.objs
			r.memo = newObjMemo()
			mods, _ := r.u64(interp + p.Layout.InterpModules)
			mod, _ := r.dictGetStr(mods, "threading")
			md, _ := r.u64(mod + p.Layout.ModuleDict)
			active, _ := r.dictGetStr(md, "_active")
			items, err := r.dictItems(active)
			if err != nil || len(items) != 51 {
				t.Fatalf("threading._active: %d items, %v", len(items), err)
			}
			objs := make([]uint64, len(items))
			for i, e := range items {
				objs[i] = e.value
			}
			for _, attr := range []string{"_name", "_ident", "_daemonic", "no_such_attribute"} {
				vals, errs := r.getAttrs(objs, attr)
				for i, obj := range objs {
					v, err := r.getAttr(obj, attr)
					if v != vals[i] || (err == nil) != (errs[i] == nil) {
						t.Errorf("%s of 0x%x: batched 0x%x (%v), alone 0x%x (%v)", attr, obj, vals[i], errs[i], v, err)
					}
				}
			}
		})
	}
}
