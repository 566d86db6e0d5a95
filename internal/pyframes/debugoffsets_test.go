package pyframes

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestDebugTableSize(t *testing.T) {
	for minor, want := range map[int]int{9: 0, 10: 0, 12: 0, 13: 584, 14: 760, 15: 888, 16: 0, 99: 0} {
		if got := DebugTableSize(minor); got != want {
			t.Errorf("DebugTableSize(%d) = %d, want %d", minor, got, want)
		}
	}
}

// fieldOffsets maps "group.field" (and "group.size") to its byte offset in
// the table, following debugLayoutFor.
func fieldOffsets(minor int) map[string]int {
	m := map[string]int{}
	off := 24
	for _, g := range debugLayoutFor(minor) {
		if !g.noSize {
			m[g.name+".size"] = off
			off += 8
		}
		for _, f := range g.fields {
			m[g.name+"."+f] = off
			off += 8
		}
	}
	return m
}

// TestParseDebugOffsetsGolden parses the tables captured from the live
// interpreters and checks their fields against facts the generator found
// without the table (by scanning live objects for known values).
func TestParseDebugOffsetsGolden(t *testing.T) {
	for _, minor := range debugMinors {
		t.Run(fmt.Sprintf("3.%d", minor), func(t *testing.T) {
			raw := loadDebugTable(t, minor)
			if len(raw) != DebugTableSize(minor) {
				t.Fatalf("golden table has %d bytes, DebugTableSize says %d", len(raw), DebugTableSize(minor))
			}
			d, err := ParseDebugOffsets(raw)
			if err != nil {
				t.Fatalf("ParseDebugOffsets(real 3.%d table): %v", minor, err)
			}
			if v := VersionHex(d.Version); v.Major != 3 || v.Minor != minor {
				t.Errorf("version %s (%#x), want 3.%d", v, d.Version, minor)
			}
			if d.FreeThreaded {
				t.Error("free-threaded flag set on a GIL build")
			}
			if want := len(fieldOffsets(minor)); len(d.Fields) != want {
				t.Errorf("%d fields, want %d", len(d.Fields), want)
			}
			// Parsing more bytes than the table (as a reader of _PyRuntime
			// would hand it) changes nothing.
			long := append(append([]byte(nil), raw...), make([]byte, 4096)...)
			if d2, err := ParseDebugOffsets(long); err != nil || len(d2.Fields) != len(d.Fields) {
				t.Errorf("table followed by more runtime bytes: %v", err)
			}

			var facts debugFacts
			readGolden(t, fmt.Sprintf("debug-offsets-3.%d.facts.json", minor), &facts)
			checked := 0
			for _, f := range facts.Facts {
				field, _, _ := strings.Cut(f.Fact, "#")
				switch field {
				case "version":
					if *f.Value != d.Version {
						t.Errorf("version %#x, sys.hexversion %#x", d.Version, *f.Value)
					}
					checked++
					continue
				case "interpreter_state.self_pointers":
					// ceval.gil points at the interpreter's own _gil.
					gil, ptr := d.Fields["interpreter_state.gil_runtime_state"], d.Fields["interpreter_state.ceval_gil"]
					found := false
					for _, p := range f.Pairs {
						found = found || p[0] == ptr && p[1] == gil
					}
					if !found {
						t.Errorf("interpreter+%d does not point to interpreter+%d (gil_runtime_state) in the live process", ptr, gil)
					}
					checked++
					continue
				}
				got, ok := d.Fields[field]
				if !ok {
					continue // not published in this version; the layout tests cover the fallback
				}
				switch {
				case f.Value != nil:
					if got != *f.Value {
						t.Errorf("%s = %d, live interpreter: %d (%s)", field, got, *f.Value, f.How)
					}
					checked++
				case len(f.Candidates) == 0:
					t.Logf("%s: the generator found no candidate (%s); unchecked", f.Fact, f.How)
				default:
					if !contains(f.Candidates, got) {
						t.Errorf("%s = %d, live interpreter has it at one of %v (%s)", f.Fact, got, f.Candidates, f.How)
					}
					checked++
				}
			}
			if checked < 20 {
				t.Errorf("only %d fields checked against the live interpreter", checked)
			}
			t.Logf("%s: %d fields checked against live facts", facts.Python, checked)
		})
	}
}

func contains(xs []uint64, x uint64) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestParseDebugOffsets313Known: values read on the pyenv 3.13.0 build (see
// shared/CPYTHON.md §1a), as a second, human-checked witness.
func TestParseDebugOffsets313Known(t *testing.T) {
	d, err := ParseDebugOffsets(loadDebugTable(t, 13))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]uint64{
		"runtime_state.size": 283320, "runtime_state.finalizing": 608, "runtime_state.interpreters_head": 632,
		"interpreter_state.threads_head": 7344, "interpreter_state.ceval_gil": 16,
		"interpreter_state.gil_runtime_state": 7752, "interpreter_state.gil_runtime_state_locked": 7768,
		"interpreter_state.gil_runtime_state_holder": 7760,
		"thread_state.size":                          304, "thread_state.current_frame": 72, "thread_state.native_thread_id": 160,
		"interpreter_frame.size": 80, "interpreter_frame.owner": 70, "interpreter_frame.instr_ptr": 56,
		"code_object.size": 208, "code_object.co_code_adaptive": 200, "code_object.firstlineno": 68,
		"unicode_object.asciiobject_size": 40, "bytes_object.ob_sval": 32, "type_object.tp_flags": 168,
	} {
		if got := d.Fields[k]; got != want {
			t.Errorf("%s = %d, want %d", k, got, want)
		}
	}
}

func patch(b []byte, off int, v uint64) []byte {
	c := append([]byte(nil), b...)
	binary.LittleEndian.PutUint64(c[off:], v)
	return c
}

// TestParseDebugOffsetsHostile: every untrusted table is an error and no table.
func TestParseDebugOffsetsHostile(t *testing.T) {
	for _, minor := range debugMinors {
		raw := loadDebugTable(t, minor)
		offs := fieldOffsets(minor)
		type tc struct {
			name string
			b    []byte
			is   error
			as   bool // *UnsupportedVersionError
		}
		ver := func(minor uint64) uint64 { return 3<<24 | minor<<16 | 0xf0 }
		cases := []tc{
			{name: "wrong cookie", b: append([]byte("xdebugpY"), raw[8:]...), is: ErrNoCookie},
			{name: "zero cookie", b: append(make([]byte, 8), raw[8:]...), is: ErrNoCookie},
			{name: "empty", b: nil},
			{name: "header only", b: raw[:24]},
			{name: "23 bytes", b: raw[:23]},
			{name: "one byte short", b: raw[:len(raw)-1]},
			{name: "half", b: raw[:len(raw)/2]},
			{name: "version 3.9", b: patch(raw, 8, ver(9)), as: true},
			{name: "version 3.12", b: patch(raw, 8, ver(12)), as: true},
			{name: "version 3.99", b: patch(raw, 8, ver(99)), as: true},
			{name: "version 2.7", b: patch(raw, 8, 2<<24|7<<16)},
			{name: "version high bits", b: patch(raw, 8, 1<<32|ver(uint64(minor)))},
			{name: "free_threaded 7", b: patch(raw, 16, 7)},
			{name: "free_threaded all ones", b: patch(raw, 16, ^uint64(0))},
			{name: "runtime_state size 2 MiB", b: patch(raw, offs["runtime_state.size"], 2<<20)},
			{name: "thread_state size 0", b: patch(raw, offs["thread_state.size"], 0)},
			{name: "native_thread_id outside its struct", b: patch(raw, offs["thread_state.native_thread_id"], 4096)},
			{name: "native_thread_id at size", b: patch(raw, offs["thread_state.native_thread_id"], leU64(raw, offs["thread_state.size"]))},
			{name: "code filename outside", b: patch(raw, offs["code_object.filename"], leU64(raw, offs["code_object.size"])+8)},
			{name: "mixed-base field 2 MiB", b: patch(raw, offs["interpreter_state.gil_runtime_state_holder"], 2<<20)},
			{name: "last field 2 MiB", b: patch(raw, len(raw)-8, 2<<20)},
		}
		// Any field or size set to 2 MiB or to all ones must be refused.
		for name, off := range offs {
			cases = append(cases, tc{name: name + "=2MiB", b: patch(raw, off, 2<<20)})
			cases = append(cases, tc{name: name + "=-1", b: patch(raw, off, ^uint64(0))})
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("3.%d/%s", minor, c.name), func(t *testing.T) {
				d, err := ParseDebugOffsets(c.b)
				if err == nil || d != nil {
					t.Fatalf("got (%v, %v), want (nil, error)", d, err)
				}
				if c.is != nil && !errors.Is(err, c.is) {
					t.Errorf("error %v, want %v", err, c.is)
				}
				var uv *UnsupportedVersionError
				if c.as && !errors.As(err, &uv) {
					t.Errorf("error %v is not an *UnsupportedVersionError", err)
				}
			})
		}
	}
}

func leU64(b []byte, off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }

func TestParseDebugOffsetsFreeThreaded(t *testing.T) {
	for _, minor := range debugMinors {
		d, err := ParseDebugOffsets(patch(loadDebugTable(t, minor), 16, 1))
		if err != nil || !d.FreeThreaded {
			t.Fatalf("3.%d free_threaded=1: got (%v, %v), want a table marked free-threaded", minor, d, err)
		}
		// The flag alone on a GIL build's table: its 16-byte object header
		// is not a free-threaded one, so the table is not trusted.
		l, err := layoutFromDebugOffsets(d)
		var uv *UnsupportedVersionError
		if l != nil || !errors.As(err, &uv) {
			t.Errorf("3.%d free-threaded flag with a 16-byte header: got (%v, %v), want (nil, *UnsupportedVersionError)", minor, l, err)
		}
	}
}

// TestLayoutFromDebugOffsetsGolden: each real table yields a Layout with
// every field the walker needs, consistent read sizes, and the facts the
// table does not publish filled in right (checked against the live facts).
func TestLayoutFromDebugOffsetsGolden(t *testing.T) {
	for _, minor := range debugMinors {
		t.Run(fmt.Sprintf("3.%d", minor), func(t *testing.T) {
			l := goldenLayout(t, minor)
			if l.Version.Major != 3 || l.Version.Minor != minor {
				t.Errorf("version %s", l.Version)
			}
			if !strings.Contains(l.Source, "debug offsets") {
				t.Errorf("source %q does not say debug offsets", l.Source)
			}
			required := map[string]uint64{
				"RuntimeInterpretersHead": l.RuntimeInterpretersHead, "InterpThreadsHead": l.InterpThreadsHead,
				"InterpModules": l.InterpModules, "InterpCevalGIL": l.InterpCevalGIL,
				"GILLastHolder": l.GILLastHolder, "GILLocked": l.GILLocked,
				"TstateNext": l.TstateNext, "TstateInterp": l.TstateInterp, "TstateFrame": l.TstateFrame,
				"TstateThreadID": l.TstateThreadID, "TstateNativeThreadID": l.TstateNativeThreadID,
				"FramePrevious": l.FramePrevious, "FrameInstr": l.FrameInstr, "FrameOwner": l.FrameOwner,
				"FrameLocalsplus": l.FrameLocalsplus, "FrameSize": l.FrameSize,
				"CodeFilename": l.CodeFilename, "CodeName": l.CodeName, "CodeQualname": l.CodeQualname,
				"CodeLinetable": l.CodeLinetable, "CodeFirstLineno": l.CodeFirstLineno, "CodeAdaptive": l.CodeAdaptive,
				"CodeLocalsplusNames": l.CodeLocalsplusNames, "CodeLocalsplusKinds": l.CodeLocalsplusKinds, "CodeSize": l.CodeSize,
				"ObType": l.ObType, "TypeName": l.TypeName, "TypeBasicSize": l.TypeBasicSize, "TypeFlags": l.TypeFlags,
				"TypeDictOffset": l.TypeDictOffset, "HeapCachedKeys": l.HeapCachedKeys,
				"UnicodeLength": l.UnicodeLength, "UnicodeState": l.UnicodeState, "ASCIISize": l.ASCIISize, "CompactSize": l.CompactSize,
				"BytesSize": l.BytesSize, "BytesData": l.BytesData, "TupleSize": l.TupleSize, "TupleItems": l.TupleItems,
				"ListSize": l.ListSize, "ListItems": l.ListItems, "DictKeys": l.DictKeys, "DictValues": l.DictValues,
				"DictUsed": l.DictUsed, "LongTag": l.LongTag, "LongDigits": l.LongDigits, "FloatValue": l.FloatValue,
				"ModuleDict": l.ModuleDict, "CellRef": l.CellRef,
			}
			for name, v := range required {
				if v == 0 {
					t.Errorf("%s is 0", name)
				}
			}
			// Zero is right here: f_executable is the frame's first member.
			// (PyInterpreterState.next is not first: 7264 on 3.13.0.)
			if l.FrameCode != 0 {
				t.Errorf("FrameCode %d: f_executable is at 0 in 3.13-3.15", l.FrameCode)
			}
			if l.FrameObjects || l.CFrameCurrentFrame != -1 || l.FrameIsEntry != -1 || l.RuntimeTstateCurrent != 0 {
				t.Errorf("3.11/3.10-only fields set: FrameObjects %v CFrame %d IsEntry %d TstateCurrent %d",
					l.FrameObjects, l.CFrameCurrentFrame, l.FrameIsEntry, l.RuntimeTstateCurrent)
			}
			if l.FrameSize < l.FrameOwner+1 || l.FrameSize < l.FramePrevious+8 || l.FrameSize < l.FrameInstr+8 || l.FrameSize < l.FrameCode+8 {
				t.Errorf("FrameSize %d does not cover owner %d / previous / instr / code", l.FrameSize, l.FrameOwner)
			}
			if l.CodeSize < l.CodeFirstLineno+4 || l.CodeSize < l.CodeLinetable+8 || l.CodeSize < l.CodeQualname+8 ||
				l.CodeSize < l.CodeLocalsplusKinds+8 {
				t.Errorf("CodeSize %d does not cover the fields read from the code header", l.CodeSize)
			}
			wantCStack := map[int]uint8{13: 3, 14: 4, 15: 0}[minor]
			if l.FrameOwnerSkip != 3 || l.FrameOwnerCStack != wantCStack {
				t.Errorf("owner skip %d / cstack %d, want 3 / %d", l.FrameOwnerSkip, l.FrameOwnerCStack, wantCStack)
			}
			if l.CodeTagged != (minor >= 14) {
				t.Errorf("CodeTagged %v on 3.%d", l.CodeTagged, minor)
			}
			// Facts the table does not publish before 3.15, against the live interpreter.
			var facts debugFacts
			readGolden(t, fmt.Sprintf("debug-offsets-3.%d.facts.json", minor), &facts)
			for _, f := range facts.Facts {
				var got uint64
				switch f.Fact {
				case "unicode_object.compactunicodeobject_size":
					got = l.CompactSize
				case "type_object.tp_basicsize":
					got = l.TypeBasicSize
				case "interpreter_state.gil_runtime_state_holder":
					got = d0(t, minor).Fields["interpreter_state.gil_runtime_state"] + l.GILLastHolder
				default:
					continue
				}
				if (f.Value != nil && got != *f.Value) || (f.Value == nil && !contains(f.Candidates, got)) {
					t.Errorf("layout %s = %d, live interpreter: %v%v (%s)", f.Fact, got, f.Candidates, f.Value, f.How)
				}
			}
		})
	}
}

func d0(t testing.TB, minor int) *DebugOffsets {
	d, err := ParseDebugOffsets(loadDebugTable(t, minor))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDetectLayoutFromSnapshot: New over a snapshot whose _PyRuntime starts
// with a real table picks the debug-offsets layout; a table with an unknown
// minor or a broken table is refused with no Process.
func TestDetectLayoutFromSnapshot(t *testing.T) {
	const rt = 0x7f0000001000
	info := func() *RuntimeInfo {
		return &RuntimeInfo{Binary: "/usr/bin/python3", Runtime: rt, Syms: map[string]uint64{"PyCode_Type": 0x1234}}
	}
	for _, minor := range debugMinors {
		raw := loadDebugTable(t, minor)
		var s Snapshot
		s.Add(rt, append(append([]byte(nil), raw...), make([]byte, 1024)...))
		p, err := New(&s, 42, info())
		if err != nil {
			t.Fatalf("3.%d: %v", minor, err)
		}
		want := goldenLayout(t, minor)
		if *p.Layout != *want {
			t.Errorf("3.%d: layout from the snapshot differs from layoutFromDebugOffsets:\n%+v\n%+v", minor, p.Layout, want)
		}
		for name, b := range map[string][]byte{
			"unknown minor": patch(raw, 8, 3<<24|16<<16),
			"bad field":     patch(raw, 24, 0),
			"truncated":     raw[:len(raw)-8],
		} {
			var s Snapshot
			s.Add(rt, b)
			if p, err := New(&s, 42, info()); err == nil || p != nil {
				t.Errorf("3.%d %s: got (%v, %v), want an error", minor, name, p, err)
			} else if !strings.Contains(err.Error(), "pid 42") {
				t.Errorf("3.%d %s: error %q does not name the pid", minor, name, err)
			}
		}
	}
}
