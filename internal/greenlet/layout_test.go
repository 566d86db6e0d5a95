package greenlet

import (
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/testutil"
)

// pypkgsDir is where scripts/pypkgs.sh installs greenlet for CPython 3.minor.
func pypkgsDir(minor int) string {
	c := os.Getenv("PYOBS_PYTHONS_CACHE")
	if c == "" {
		c = "/var/cache/pyobs-pythons"
	}
	return filepath.Join(c, "pypkgs", fmt.Sprintf("cp3%d", minor))
}

// members reads the data member offsets of the named classes/structs (the
// first complete definition of each name) from an ELF file's DWARF.
func members(t *testing.T, path string, names ...string) map[string]map[string]int64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := f.DWARF()
	if err != nil {
		t.Fatalf("%s: no DWARF: %v", path, err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]map[string]int64{}
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if e == nil {
			break
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		isType := e.Tag == dwarf.TagClassType || e.Tag == dwarf.TagStructType
		decl, _ := e.Val(dwarf.AttrDeclaration).(bool)
		if !isType || !want[name] || decl || out[name] != nil || !e.Children {
			continue
		}
		m := map[string]int64{}
		for {
			c, err := r.Next()
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if c == nil || c.Tag == 0 {
				break
			}
			if c.Tag == dwarf.TagMember {
				if n, ok := c.Val(dwarf.AttrName).(string); ok {
					if off, ok := c.Val(dwarf.AttrDataMemberLoc).(int64); ok {
						m[n] = off
					}
				}
			}
			if c.Children {
				r.SkipChildren()
			}
		}
		out[name] = m
	}
	for _, n := range names {
		if out[n] == nil {
			t.Fatalf("%s: no definition of %s in its DWARF", path, n)
		}
	}
	return out
}

// TestLayoutsMatchDWARF checks every layout of the table against the DWARF
// of the greenlet wheels scripts/pypkgs.sh installed (they ship it), and
// that every installed greenlet has a layout.
func TestLayoutsMatchDWARF(t *testing.T) {
	checked := 0
	for _, l := range layouts {
		dir := pypkgsDir(l.Minor)
		so := filepath.Join(dir, "greenlet", fmt.Sprintf("_greenlet.cpython-3%d-x86_64-linux-gnu.so", l.Minor))
		if _, err := os.Stat(filepath.Join(dir, "greenlet-"+l.Greenlet+".dist-info")); err != nil {
			t.Logf("greenlet %s for 3.%d not installed here: its layout not checked", l.Greenlet, l.Minor)
			continue
		}
		t.Run(fmt.Sprintf("%s/3.%d", l.Greenlet, l.Minor), func(t *testing.T) {
			m := members(t, so, "_greenlet", "Greenlet", "StackState", "PythonState", "UserGreenlet", "MainGreenlet", "ThreadState")
			g := m["Greenlet"]
			ss, ps := uint64(g["stack_state"]), uint64(g["python_state"])
			check := func(what string, got uint64, want int64, ok bool) {
				t.Helper()
				if !ok || got != uint64(want) {
					t.Errorf("%s: table %d, DWARF %d (present %v)", what, got, want, ok)
				}
			}
			get := func(s, f string) (int64, bool) { v, ok := m[s][f]; return v, ok }
			v, ok := get("_greenlet", "pimpl")
			check("PyGreenlet.pimpl", l.Pimpl, v, ok)
			v, ok = get("Greenlet", "_self")
			check("Greenlet._self", l.Self, v, ok)
			v, ok = get("StackState", "_stack_start")
			check("stack_state._stack_start", l.StackStart, int64(ss)+v, ok)
			v, ok = get("StackState", "stack_stop")
			check("stack_state.stack_stop", l.StackStop, int64(ss)+v, ok)
			v, ok = get("PythonState", "_top_frame")
			check("python_state._top_frame", l.TopFrame, int64(ps)+v, ok)
			if v, ok = get("PythonState", "current_frame"); ok || l.CurrentFrame != 0 {
				check("python_state.current_frame", l.CurrentFrame, int64(ps)+v, ok)
			}
			v, ok = get("UserGreenlet", "_main_greenlet")
			check("UserGreenlet._main_greenlet", l.MainGreenlet, v, ok)
			v, ok = get("UserGreenlet", "_run_callable")
			check("UserGreenlet._run_callable", l.RunCallable, v, ok)
			v, ok = get("UserGreenlet", "_parent")
			check("UserGreenlet._parent", l.Parent, v, ok)
			v, ok = get("MainGreenlet", "_thread_state")
			check("MainGreenlet._thread_state", l.ThreadState, v, ok)
			v, ok = get("ThreadState", "current_greenlet")
			check("ThreadState.current_greenlet", l.TSCurrent, v, ok)
		})
		checked++
	}
	// Every installed greenlet must have its layout.
	for minor := 10; minor <= 15; minor++ {
		infos, _ := filepath.Glob(filepath.Join(pypkgsDir(minor), "greenlet-*.dist-info"))
		for _, info := range infos {
			v := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(info), "greenlet-"), ".dist-info")
			if _, err := LayoutFor(v, minor); err != nil {
				t.Errorf("installed %s: %v", info, err)
			}
		}
	}
	if checked == 0 {
		testutil.Skip(t, "no greenlet wheel installed: run scripts/pypkgs.sh")
	}
}

func TestUnknownLayoutError(t *testing.T) {
	_, err := LayoutFor("0.0.0-fake", 12)
	want := "greenlet 0.0.0-fake on CPython 3.12: layout unknown (known: 3.5.6)"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
	if _, err := LayoutFor("3.5.6", 9); err == nil || !strings.Contains(err.Error(), "none for this CPython") {
		t.Errorf("3.9: %v", err)
	}
}
