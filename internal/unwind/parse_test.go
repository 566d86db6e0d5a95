package unwind

import (
	"strings"
	"testing"
)

func TestParseMaps(t *testing.T) {
	in := `55d0c000-55d0c001 r--p 00000000 fd:01 11 /usr/bin/python3
55d0c001-55d0c100 r-xp 00001000 fd:01 11 /usr/bin/python3
7f00-7f10 r-xp 00000000 00:00 0
7fff1000-7fff3000 r-xp 00000000 00:00 0 [vdso]
7e00-7e10 r-xp 00002000 fd:01 12 /tmp/a b (deleted)
`
	m, err := ParseMaps(strings.NewReader(in))
	if err != nil || len(m) != 4 {
		t.Fatalf("%+v %v", m, err)
	}
	if m[0].Path != "/tmp/a b (deleted)" || m[0].Off != 0x2000 || m[2].Off != 0x1000 || m[2].Inode != 11 || m[3].Path != "[vdso]" {
		t.Errorf("%+v", m)
	}
	if _, err := ParseMaps(strings.NewReader("zz-1 r-xp 0 0 0\n")); err == nil {
		t.Error("bad range accepted")
	}
}

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
