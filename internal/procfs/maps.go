package procfs

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Mapping is one line of /proc/PID/maps:
//
//	7f0c1000-7f0c2000 r-xp 00002000 fd:01 1234   /usr/lib/libc.so.6
//
// It is the one mapping type of pyobs: the detector (pyframes), the
// unwinder and dump --native all read it. prometheus/procfs parses this
// file too, but turns the device into a number and allocates a struct per
// line; the unwinder keys its object cache on "dev inode path" as the
// kernel writes them.
type Mapping struct {
	Start, End, Offset uint64
	Perms              string // "r-xp": read, write, execute, private/shared
	Dev                string // "fd:01"
	Inode              uint64
	Path               string // "" for anonymous memory, "[vdso]", "[stack]", "/x (deleted)", …
}

// Exec reports whether the mapping is executable.
func (m Mapping) Exec() bool { return len(m.Perms) > 2 && m.Perms[2] == 'x' }

// FileBacked reports whether a file backs the mapping (not anonymous
// memory, nor a kernel-named region such as [heap] or [vdso]).
func (m Mapping) FileBacked() bool { return m.Path != "" && !strings.HasPrefix(m.Path, "[") }

// ParseMaps reads a maps file, every line, sorted by start address. A line
// that does not parse is an error naming it.
func ParseMaps(r io.Reader) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		m, err := parseMapsLine(line)
		if err != nil {
			return nil, fmt.Errorf("maps line %d: %w", n, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out, nil
}

func parseMapsLine(line string) (Mapping, error) {
	// Five fields, then the path, which may hold spaces (the kernel pads
	// the inode with spaces up to a column before it).
	var f [5]string
	rest := line
	for i := range f {
		rest = strings.TrimLeft(rest, " \t")
		j := strings.IndexAny(rest, " \t")
		if j < 0 {
			j = len(rest)
		}
		f[i], rest = rest[:j], rest[j:]
	}
	var m Mapping
	lo, hi, ok := strings.Cut(f[0], "-")
	if !ok || f[4] == "" || len(f[1]) < 3 {
		return m, fmt.Errorf("bad line %q", trunc(line))
	}
	var err1, err2, err3, err4 error
	m.Start, err1 = strconv.ParseUint(lo, 16, 64)
	m.End, err2 = strconv.ParseUint(hi, 16, 64)
	m.Offset, err3 = strconv.ParseUint(f[2], 16, 64)
	m.Inode, err4 = strconv.ParseUint(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || m.End <= m.Start {
		return Mapping{}, fmt.Errorf("bad line %q", trunc(line))
	}
	m.Perms, m.Dev = f[1], f[3]
	m.Path = strings.TrimLeft(rest, " \t")
	return m, nil
}

// Maps reads /proc/PID/maps (through a live thread when the main thread
// has exited: the leader's own is empty).
func (f FS) Maps(pid int) ([]Mapping, error) {
	maps, err := f.maps(pid, pid)
	if err == nil && len(maps) == 0 {
		if tid, ok := f.LiveTask(pid); ok && tid != pid {
			return f.maps(pid, tid)
		}
	}
	return maps, err
}

func (f FS) maps(pid, via int) ([]Mapping, error) {
	path := f.pidPath(via, "maps")
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("can't read %s: %w", path, err)
	}
	defer fh.Close()
	maps, err := ParseMaps(fh)
	if err != nil {
		return nil, fmt.Errorf("pid %d: can't parse %s: %w", pid, path, err)
	}
	return maps, nil
}

// Containing finds the mapping holding addr in maps sorted by Start.
func Containing(maps []Mapping, addr uint64) (Mapping, bool) {
	i := sort.Search(len(maps), func(i int) bool { return maps[i].End > addr })
	if i < len(maps) && maps[i].Start <= addr {
		return maps[i], true
	}
	return Mapping{}, false
}
