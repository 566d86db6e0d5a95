package procfs

import (
	"strings"
	"testing"
)

func TestKallsyms(t *testing.T) {
	k, err := ParseKallsyms(strings.NewReader("ffffffff81000000 T _stext\nffffffff81000100 t do_thing\nffffffff82000000 D data\nffffffffc0000000 t mod_fn\t[mod]\n"))
	if err != nil || k.Hidden {
		t.Fatal(err)
	}
	for addr, want := range map[uint64]string{0xffffffff81000010: "_stext", 0xffffffff81000200: "do_thing", 0xffffffffc0000008: "mod_fn"} {
		if got, _ := k.Lookup(addr); got != want {
			t.Errorf("0x%x: %q, want %q", addr, got, want)
		}
	}
	k, _ = ParseKallsyms(strings.NewReader("0000000000000000 T _stext\n0000000000000000 t x\n"))
	if !k.Hidden {
		t.Error("all-zero addresses not reported hidden")
	}
}
