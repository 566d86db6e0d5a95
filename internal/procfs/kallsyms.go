package procfs

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Kallsyms is the kernel's text symbol table from /proc/kallsyms.
type Kallsyms struct {
	Path  string // the file it was read from
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

// KallsymsError says why the kernel's symbols could not be had: the file
// could not be read (Parse false) or not parsed.
type KallsymsError struct {
	Path  string
	Parse bool
	Err   error
}

func (e *KallsymsError) Error() string {
	if e.Parse {
		return "can't parse " + e.Path + ": " + e.Err.Error()
	}
	return "can't read " + e.Path + ": " + e.Err.Error()
}

func (e *KallsymsError) Unwrap() error { return e.Err }

var kallsymsCache struct {
	sync.Mutex
	by map[string]*kallsymsEntry
}

type kallsymsEntry struct {
	once sync.Once
	k    *Kallsyms
	err  error
}

// Kallsyms loads /proc/kallsyms once per mount and keeps it: parsing it
// costs ~0.1 s of CPU, and every engine that names kernel frames wants
// it. The table is never nil: on error (a *KallsymsError) it is empty and
// names nothing. Hidden says kernel.kptr_restrict hides the addresses.
func (f FS) Kallsyms() (*Kallsyms, error) {
	path := filepath.Join(f.root, "kallsyms")
	kallsymsCache.Lock()
	if kallsymsCache.by == nil {
		kallsymsCache.by = map[string]*kallsymsEntry{}
	}
	e := kallsymsCache.by[path]
	if e == nil {
		e = &kallsymsEntry{}
		kallsymsCache.by[path] = e
	}
	kallsymsCache.Unlock()
	e.once.Do(func() { e.k, e.err = loadKallsyms(path) })
	return e.k, e.err
}

func loadKallsyms(path string) (*Kallsyms, error) {
	fh, err := os.Open(path)
	if err != nil {
		return &Kallsyms{Path: path}, &KallsymsError{Path: path, Err: err}
	}
	defer fh.Close()
	k, err := ParseKallsyms(fh)
	if err != nil {
		return &Kallsyms{Path: path}, &KallsymsError{Path: path, Parse: true, Err: err}
	}
	k.Path = path
	return k, nil
}
