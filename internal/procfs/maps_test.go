package procfs

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
	all, err := ParseMaps(strings.NewReader(in))
	if err != nil || len(all) != 5 {
		t.Fatalf("%+v %v", all, err)
	}
	var m []Mapping // the executable ones, as the unwinder keeps them
	for _, x := range all {
		if x.Exec() {
			m = append(m, x)
		}
	}
	if len(m) != 4 {
		t.Fatalf("%+v", m)
	}
	if m[0].Path != "/tmp/a b (deleted)" || m[0].Offset != 0x2000 || m[2].Offset != 0x1000 || m[2].Inode != 11 || m[3].Path != "[vdso]" {
		t.Errorf("%+v", m)
	}
	if all[2].Perms != "r--p" || !all[2].FileBacked() || m[1].FileBacked() || m[3].FileBacked() || m[2].Dev != "fd:01" {
		t.Errorf("perms/dev: %+v", all)
	}
	if _, err := ParseMaps(strings.NewReader("zz-1 r-xp 0 0 0\n")); err == nil {
		t.Error("bad range accepted")
	}
}
