package unwind

import (
	"bufio"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Kallsyms is the kernel's text symbol table from /proc/kallsyms.
type Kallsyms struct {
	addrs []uint64
	names []string
	// Hidden: every address read as zero — kernel.kptr_restrict (or missing
	// privileges) hides them, so kernel frames can't be named.
	Hidden bool
}

// ParseKallsyms reads /proc/kallsyms ("ffffffff81000000 T _stext [mod]"),
// keeping text symbols.
func ParseKallsyms(r io.Reader) (*Kallsyms, error) {
	k := &Kallsyms{}
	type ent struct {
		a uint64
		n string
	}
	var ents []ent
	zero, total := 0, 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<16)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		switch f[1] {
		case "T", "t", "W", "w":
		default:
			continue
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			continue
		}
		total++
		if a == 0 {
			zero++
			continue
		}
		ents = append(ents, ent{a, f[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	k.Hidden = total > 0 && zero == total
	sort.SliceStable(ents, func(i, j int) bool { return ents[i].a < ents[j].a })
	for _, e := range ents {
		k.addrs = append(k.addrs, e.a)
		k.names = append(k.names, e.n)
	}
	return k, nil
}

// Lookup names the kernel function at addr (the nearest symbol below it).
func (k *Kallsyms) Lookup(addr uint64) (string, bool) {
	i := sort.Search(len(k.addrs), func(i int) bool { return k.addrs[i] > addr }) - 1
	if i < 0 {
		return "", false
	}
	return k.names[i], true
}
