package pyframes

import (
	"os"
	"strconv"
	"testing"
)

func TestDebugNames(t *testing.T) {
	pid, _ := strconv.Atoi(os.Getenv("DBGPID"))
	if pid == 0 {
		t.Skip()
	}
	p, err := Open(pid)
	if err != nil {
		t.Fatal(err)
	}
	interp, _ := p.objs.u64(p.Info.Runtime + p.Layout.RuntimeInterpretersHead)
	names, err := p.threadNames(interp)
	t.Logf("names=%v err=%v", names, err)
}

func TestDebugAttr(t *testing.T) {
	pid, _ := strconv.Atoi(os.Getenv("DBGPID"))
	if pid == 0 {
		t.Skip()
	}
	p, _ := Open(pid)
	r := &p.objs
	interp, _ := r.u64(p.Info.Runtime + p.Layout.RuntimeInterpretersHead)
	modules, _ := r.u64(interp + p.Layout.InterpModules)
	mod, err := r.dictGetStr(modules, "threading")
	md, _ := r.u64(mod + 16)
	active, err := r.dictGetStr(md, "_active")
	items, err := r.dictItems(active)
	t.Logf("items %v %v", items, err)
	for _, e := range items {
		tp, _ := r.typeOf(e.value)
		fl, _ := r.u64(tp + 168)
		dv, _ := r.u64(e.value - 24)
		ck, _ := r.u64(tp + p.Layout.HeapCachedKeys)
		ents, err := r.dictKeysEntries(ck)
		t.Logf("flags %x dv %x ck %x ents %d %v", fl, dv, ck, len(ents), err)
		nm, err := r.getAttr(e.value, "_name")
		id, err2 := r.ulong(e.key)
		s, err3 := r.str(nm, 100)
		t.Log(err, id, err2, s, err3)
	}
}
