package pyframes

import (
	"encoding/binary"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// ftTable turns a GIL build's captured table into the shape a free-threaded
// build of the same minor publishes: free_threaded = 1, a 32-byte PyObject
// (ob_type at 24), and on 3.14 tlbc_index / co_tlbc set.
func ftTable(t *testing.T, minor int) []byte {
	b := append([]byte(nil), loadDebugTable(t, minor)...)
	off := fieldOffsets(minor)
	set := func(k string, v uint64) {
		o, ok := off[k]
		if !ok {
			t.Fatalf("3.%d: no field %s", minor, k)
		}
		binary.LittleEndian.PutUint64(b[o:], v)
	}
	set("pyobject.size", 32)
	set("pyobject.ob_type", 24)
	binary.LittleEndian.PutUint64(b[16:], 1)
	if minor >= 14 {
		set("interpreter_frame.tlbc_index", leU64(b, off["interpreter_frame.owner"])) // int32 just before owner
		set("interpreter_frame.owner", leU64(b, off["interpreter_frame.owner"])+4)
		set("code_object.co_tlbc", leU64(b, off["code_object.co_code_adaptive"])-8)
	}
	return b
}

func TestLayoutFreeThreaded(t *testing.T) {
	for _, minor := range debugMinors {
		d, err := ParseDebugOffsets(ftTable(t, minor))
		if err != nil {
			t.Fatalf("3.%d: %v", minor, err)
		}
		gil, err := layoutFromDebugOffsets(d0(t, minor))
		if err != nil {
			t.Fatal(err)
		}
		l, err := layoutFromDebugOffsets(d)
		if err != nil {
			t.Fatalf("3.%d free-threaded: %v", minor, err)
		}
		if !l.FreeThreaded || l.ObType != 24 {
			t.Errorf("3.%d: FreeThreaded %v, ob_type %d", minor, l.FreeThreaded, l.ObType)
		}
		// Offsets the table does not publish move past the bigger header.
		for name, pair := range map[string][2]uint64{
			"tp_basicsize":   {gil.TypeBasicSize, l.TypeBasicSize},
			"tp_dictoffset":  {gil.TypeDictOffset, l.TypeDictOffset},
			"ma_used":        {gil.DictUsed, l.DictUsed},
			"md_dict":        {gil.ModuleDict, l.ModuleDict},
			"ob_ref":         {gil.CellRef, l.CellRef},
			"ht_cached_keys": {gil.HeapCachedKeys, l.HeapCachedKeys},
		} {
			if _, published := map[string]string{"tp_basicsize": "type_object.tp_basicsize", "tp_dictoffset": "type_object.tp_dictoffset", "ht_cached_keys": "heap_type_object.ht_cached_keys"}[name]; published && minor >= 15 {
				continue // 3.15 publishes it: the table's value stands
			}
			if pair[1] != pair[0]+16 {
				t.Errorf("3.%d %s: %d on the GIL build, %d free-threaded; want +16", minor, name, pair[0], pair[1])
			}
		}
		if minor >= 14 {
			if l.FrameTLBCIndex == 0 || l.CodeTLBC == 0 || l.FrameSize < l.FrameTLBCIndex+4 || l.FrameSize < l.FrameOwner+1 {
				t.Errorf("3.%dt: tlbc_index %d, co_tlbc %d, frame size %d (owner %d)", minor, l.FrameTLBCIndex, l.CodeTLBC, l.FrameSize, l.FrameOwner)
			}
		}
		if l.UnicodeByteInterned != (minor >= 14) || l.ManagedDictBack != 8 {
			t.Errorf("3.%dt: byte-wide interned %v, managed dict %d before the object", minor, l.UnicodeByteInterned, l.ManagedDictBack)
		}
		if minor == 13 && (l.FrameTLBCIndex != 0 || l.CodeTLBC != 0) {
			t.Errorf("3.13t has no thread-local bytecode: tlbc_index %d, co_tlbc %d", l.FrameTLBCIndex, l.CodeTLBC)
		}
	}
}

func TestUnicodeStateFreeThreaded(t *testing.T) {
	gil := &Layout{UnicodeState: 32}
	ft := &Layout{UnicodeState: 32, FreeThreaded: true, UnicodeByteInterned: true}
	hdr := make([]byte, 40)
	// GIL: interned 1, kind 2, compact, not ascii; garbage above the low byte.
	hdr[32], hdr[33], hdr[34] = 1|2<<2|1<<5, 0xff, 0x68
	if k, c, a := gil.unicodeState(hdr); k != 2 || !c || a {
		t.Errorf("GIL state: kind %d compact %v ascii %v", k, c, a)
	}
	// Free-threaded: interned a whole byte (2: immortal), then kind 1, compact, ascii.
	hdr[32], hdr[33], hdr[34], hdr[35] = 2, 1|1<<3|1<<4, 0x68, 0x74
	if k, c, a := ft.unicodeState(hdr); k != 1 || !c || !a {
		t.Errorf("free-threaded state: kind %d compact %v ascii %v", k, c, a)
	}
	hdr[33] = 4 | 1<<3
	if k, c, a := ft.unicodeState(hdr); k != 4 || !c || a {
		t.Errorf("free-threaded UCS4 state: kind %d compact %v ascii %v", k, c, a)
	}
}

// TestFreeThreadedLive: a real free-threaded interpreter is read as one —
// no GIL holder, no GIL range, thread names and locals read, and the
// in-kernel walker's layout refused by name.
func TestFreeThreadedLive(t *testing.T) {
	testutil.RequireRoot(t)
	for _, in := range testutil.FreeThreadedInterpreters(t) {
		t.Run(in.Label, func(t *testing.T) {
			truth := filepath.Join(t.TempDir(), "truth.json")
			tg := testutil.Start(t, in, "stacks.py", truth)
			p, err := Open(tg.Pid)
			if err != nil {
				t.Fatal(err)
			}
			if !p.FreeThreaded() || !p.Layout.FreeThreaded {
				t.Fatalf("%s not recognised as free-threaded (layout from %s)", in.Label, p.Layout.Source)
			}
			if h := p.GILHolder(); h != 0 {
				t.Errorf("GIL holder 0x%x in a build without a GIL", h)
			}
			if lo, hi := p.GILRange(); lo != 0 || hi != 0 {
				t.Errorf("GIL range [0x%x, 0x%x) in a build without a GIL", lo, hi)
			}
			// 3.13t has no thread-local bytecode: the kernel walks it
			// (internal/kwalk TestKernelWalk); later builds are refused.
			kl, err := p.KernelLayout()
			switch {
			case p.Layout.FrameTLBCIndex == 0 && err != nil:
				t.Errorf("KernelLayout: %v, want the layout (no thread-local bytecode)", err)
			case p.Layout.FrameTLBCIndex == 0 && kl.ObType != p.Layout.ObType:
				t.Errorf("KernelLayout ob_type at %d, the build's at %d", kl.ObType, p.Layout.ObType)
			case p.Layout.FrameTLBCIndex != 0 && (err == nil || !strings.Contains(err.Error(), "free-threaded")):
				t.Errorf("KernelLayout: %v, want a refusal naming the free-threaded build", err)
			}
			ths, err := p.Threads(Options{Names: true, Locals: true})
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]bool{}
			frames := 0 // threads with a stack (the reporter may be exiting: none)
			for _, th := range ths {
				names[th.Name] = true
				if th.HoldsGIL {
					t.Errorf("thread %q holds a GIL", th.Name)
				}
				if th.Err != nil {
					t.Errorf("thread %q: %d frames, %v", th.Name, len(th.Frames), th.Err)
				}
				if len(th.Frames) > 0 {
					frames++
				}
				for _, f := range th.Frames {
					if f.Function == "" || f.File == "" || f.Line <= 0 {
						t.Errorf("thread %q: frame %+v", th.Name, f)
					}
				}
			}
			if frames < 5 {
				t.Errorf("%d threads with frames, want the 5 parked ones", frames)
			}
			if !names["MainThread"] {
				t.Errorf("thread names not read: %v", names)
			}
		})
	}
}

// TestAsyncioLegacyLayoutFreeThreaded: the 3.13 asyncio offsets moved past
// the free-threaded header agree with what a 3.13t interpreter measures of
// itself (the fields asyncio_layout.py finds by object identity).
func TestAsyncioLegacyLayoutFreeThreaded(t *testing.T) {
	for _, in := range testutil.FreeThreadedInterpreters(t) {
		lt, ok := legacyAsyncLayouts[in.Minor()]
		if !ok {
			t.Logf("%s: reads the AsyncioDebug section, no legacy layout", in.Label)
			continue
		}
		t.Run(in.Label, func(t *testing.T) {
			lt = lt.moved(16)
			argv := append(append([]string{}, in.Argv...), filepath.Join(testutil.Repo(), "testdata", "targets", "asyncio_layout.py"))
			r := testutil.RunCmd(t, 30*time.Second, exec.Command(argv[0], argv[1:]...))
			if r.Code != 0 {
				t.Fatalf("asyncio_layout.py: exit %d: %s", r.Code, r.Stderr)
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(r.Stdout), &m); err != nil {
				t.Fatalf("%v: %s", err, r.Stdout)
			}
			for name, table := range map[string]uint64{"task_size": lt.taskSize, "task_fut_waiter": lt.taskFutWaiter, "task_coro": lt.taskCoro,
				"task_name": lt.taskName, "fut_state": lt.futState, "gen_iframe": lt.genIFrame, "frame_stacktop": lt.frameStackTop, "set_used": lt.setUsed,
				"set_mask": lt.setMask, "set_table": lt.setTable, "type_base": lt.typeBase} {
				if got, _ := m[name].(float64); uint64(got) != table {
					t.Errorf("%s: table %d, the interpreter measures %v", name, table, m[name])
				}
			}
		})
	}
}
