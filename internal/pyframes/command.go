package pyframes

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// A command held before its exec (session.Spec.Hold) has no interpreter in
// memory yet, but its files say which one it will run. CommandLayout reads
// them the way the exec and the dynamic loader will: PATH, #! lines (env
// too), env(1) run as the command (its assignments, -i, -u, -C, -S), the
// loader run as a command, DT_NEEDED libpython found through
// DT_RPATH, LD_LIBRARY_PATH (or the loader's --library-path), DT_RUNPATH,
// the ld.so.conf directories and the default ones. The layout is the one
// the in-kernel walker needs, read from the file's own data at its
// link-time addresses (Py_Version, the _Py_DebugOffsets table that
// _PyRuntime's initial value holds); the addresses in it are the file's,
// not the process's (ASLR): the caller takes those from the running
// process, and checks its layout against this one, since a command may
// still run another interpreter than its files name.

// ErrNotPythonFile: the program a command runs is no interpreter by its
// files (it may still start one: a shell script, a wrapper).
var ErrNotPythonFile = errors.New("not a Python interpreter: it defines no _PyRuntime and needs no libpython")

// maxCommandHops bounds the #! scripts and loaders followed.
const maxCommandHops = 4

// CommandLayout is the in-kernel walker's layout of the interpreter argv
// will run (env: the command's environment, for PATH and
// LD_LIBRARY_PATH), and the file it was read from.
func CommandLayout(argv, env []string) (*KernelLayout, string, error) {
	prog, libPath, env, err := commandProgram(argv, env)
	if err != nil {
		return nil, "", err
	}
	path, err := interpreterFile(prog, libPath, env)
	if err != nil {
		return nil, "", err
	}
	f, err := elf.Open(path)
	if err != nil {
		return nil, path, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	info, err := runtimeFromELF(f, path, linkTimeMaps(f, path))
	if err != nil {
		return nil, path, fmt.Errorf("%s: %w", path, err)
	}
	p, err := New(&fileMemory{path: path, f: f}, 0, info)
	if err != nil {
		return nil, path, err
	}
	k, err := p.KernelLayout()
	if err != nil {
		return nil, path, fmt.Errorf("%s: %w", path, err)
	}
	return k, path, nil
}

// commandProgram follows argv to the ELF program the kernel runs, the
// loader's --library-path when the command is the dynamic loader itself,
// and the environment the program gets (env(1) run as the command changes
// it).
func commandProgram(argv, env []string) (string, []string, []string, error) {
	if len(argv) == 0 {
		return "", nil, nil, errors.New("no command")
	}
	path, err := lookPath(argv[0], env)
	if err != nil {
		return "", nil, nil, err
	}
	args := argv[1:]
	var libPath []string
	for hop := 0; hop < maxCommandHops; hop++ {
		head, err := readHead(path, 256)
		if err != nil {
			return "", nil, nil, err
		}
		if bytes.HasPrefix(head, []byte("#!")) {
			if path, err = scriptInterpreter(path, head, env); err != nil {
				return "", nil, nil, err
			}
			args = nil // the loader's own options are never in a #! line here
			continue
		}
		if !bytes.HasPrefix(head, []byte(elf.ELFMAG)) {
			return "", nil, nil, fmt.Errorf("%s: neither an ELF file nor a #! script", path)
		}
		if filepath.Base(path) == "env" {
			rest, newEnv, dir, err := envProgram(args, env)
			if err != nil {
				return "", nil, nil, fmt.Errorf("%s: %w", path, err)
			}
			if path, err = lookPath(rest[0], newEnv); err != nil {
				return "", nil, nil, err
			}
			if dir != "" && !filepath.IsAbs(path) {
				path = filepath.Join(dir, path) // env -C: the command runs from there
			}
			args, env = rest[1:], newEnv
			continue
		}
		if !isLoader(path) {
			return path, libPath, env, nil
		}
		prog, lp, ok := loaderProgram(args)
		if !ok {
			return "", nil, nil, fmt.Errorf("%s: the dynamic loader run without a program", path)
		}
		if lp != nil {
			libPath = lp
		}
		path, args = prog, nil // the loader opens it as given, no PATH search
	}
	return "", nil, nil, fmt.Errorf("%s: more than %d #! scripts, env and loaders", argv[0], maxCommandHops)
}

// envProgram reads env(1)'s arguments as GNU env does: its options, then
// NAME=VALUE assignments, then the command it runs (rest: its argv). It
// returns the environment the command gets (-i, -u, the assignments) and
// -C's directory. A -S string is split at blanks; one with quotes or
// escapes is refused rather than split differently from env.
func envProgram(args, env []string) (rest, newEnv []string, dir string, err error) {
	newEnv = append([]string(nil), env...)
	unset := func(name string) {
		out := newEnv[:0]
		for _, kv := range newEnv {
			if k, _, _ := strings.Cut(kv, "="); k != name {
				out = append(out, kv)
			}
		}
		newEnv = out
	}
	value := func(i *int, a, short, long string) (string, bool) {
		switch {
		case a == short || a == long:
			if *i+1 < len(args) {
				*i++
				return args[*i], true
			}
			return "", false
		case strings.HasPrefix(a, long+"="):
			return a[len(long)+1:], true
		case len(short) == 2 && strings.HasPrefix(a, short) && !strings.HasPrefix(a, "--"):
			return a[2:], true
		}
		return "", false
	}
	opts := true
	for i := 0; i < len(args); i++ {
		a := args[i]
		if opts {
			switch {
			case a == "--":
				opts = false
				continue
			case a == "-" || a == "-i" || a == "--ignore-environment":
				newEnv = newEnv[:0]
				continue
			case a == "-0" || a == "--null" || a == "-v" || a == "--debug" || a == "--list-signal-handling" ||
				strings.HasPrefix(a, "--default-signal") || strings.HasPrefix(a, "--ignore-signal") || strings.HasPrefix(a, "--block-signal"):
				continue
			case strings.HasPrefix(a, "-u") || strings.HasPrefix(a, "--unset"):
				v, ok := value(&i, a, "-u", "--unset")
				if !ok {
					return nil, nil, "", fmt.Errorf("env %s without a name", a)
				}
				unset(v)
				continue
			case strings.HasPrefix(a, "-C") || strings.HasPrefix(a, "--chdir"):
				if dir, _ = value(&i, a, "-C", "--chdir"); dir == "" {
					return nil, nil, "", fmt.Errorf("env %s without a directory", a)
				}
				continue
			case strings.HasPrefix(a, "-S") || strings.HasPrefix(a, "--split-string"):
				v, ok := value(&i, a, "-S", "--split-string")
				if !ok || strings.ContainsAny(v, "'\"\\$#") {
					return nil, nil, "", fmt.Errorf("env -S %q: not split here (quotes, escapes or variables)", v)
				}
				args = append(append(append([]string(nil), args[:i+1]...), strings.Fields(v)...), args[i+1:]...)
				continue
			case strings.HasPrefix(a, "-") && len(a) > 1:
				return nil, nil, "", fmt.Errorf("env option %s not known here", a)
			}
			opts = false
		}
		if k, _, ok := strings.Cut(a, "="); ok && k != "" {
			unset(k)
			newEnv = append(newEnv, a)
			continue
		}
		return args[i:], newEnv, dir, nil
	}
	return nil, nil, "", errors.New("env runs no command here (it would print the environment)")
}

// lookPath is exec.LookPath with the command's PATH.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path, ok := envLookup(env, "PATH")
	if !ok {
		path = "/bin:/usr/bin" // execvp's search path without PATH (glibc's _CS_PATH)
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w in the command's PATH", name, exec.ErrNotFound)
}

func envValue(env []string, key string) string {
	v, _ := envLookup(env, key)
	return v
}

// envLookup is key's value in env and whether env sets it.
func envLookup(env []string, key string) (string, bool) {
	v, found := "", false
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v, found = val, true // os.Environ holds each name once; a hand-made env's last wins
		}
	}
	return v, found
}

func readHead(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	m, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b[:m], nil
}

// scriptInterpreter is the program a #! line runs: its first word, or for
// env the first word after env's options and assignments (looked up in
// PATH, as env does).
func scriptInterpreter(path string, head []byte, env []string) (string, error) {
	line, _, _ := bytes.Cut(head[2:], []byte("\n"))
	words := strings.Fields(string(line))
	if len(words) == 0 {
		return "", fmt.Errorf("%s: an empty #! line", path)
	}
	if filepath.Base(words[0]) != "env" {
		return words[0], nil
	}
	for _, w := range words[1:] {
		if strings.HasPrefix(w, "-") || strings.Contains(w, "=") {
			continue // -S, -i, NAME=value
		}
		return lookPath(w, env)
	}
	return "", fmt.Errorf("%s: #!%s names no program", path, line)
}

// isLoader: path is the dynamic loader (run as a command, it runs the
// program named after its options).
func isLoader(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if f.Section(".interp") != nil {
		return false
	}
	names, err := f.DynString(elf.DT_SONAME)
	return err == nil && len(names) == 1 && (strings.HasPrefix(names[0], "ld-linux") || strings.HasPrefix(names[0], "ld64.so"))
}

// loaderProgram reads the loader's options (ld.so(8)): the program after
// them, and --library-path (nil: none given).
func loaderProgram(args []string) (string, []string, bool) {
	var libPath []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "--library-path":
			if i+1 < len(args) {
				libPath = filepath.SplitList(args[i+1])
				if libPath == nil {
					libPath = []string{}
				}
			}
			i++
		case "--inhibit-rpath", "--audit", "--preload", "--argv0", "--glibc-hwcaps-prepend", "--glibc-hwcaps-mask":
			i++ // an option with a value
		case "--":
			if i+1 < len(args) {
				return args[i+1], libPath, true
			}
			return "", nil, false
		default:
			if strings.HasPrefix(a, "--") {
				continue // --inhibit-cache, --verify, ...
			}
			return a, libPath, true
		}
	}
	return "", nil, false
}

// interpreterFile is the file that defines _PyRuntime for prog: prog
// itself (a static interpreter, an embedding program), or the libpython it
// needs, found where the loader will look.
func interpreterFile(prog string, libPath, env []string) (string, error) {
	f, err := elf.Open(prog)
	if err != nil {
		return "", fmt.Errorf("%s: %w", prog, err)
	}
	defer f.Close()
	if definesRuntime(f) {
		return prog, nil
	}
	libs, _ := f.ImportedLibraries()
	var need string
	for _, l := range libs {
		if strings.HasPrefix(l, "libpython") {
			need = l
			break
		}
	}
	if need == "" {
		return "", fmt.Errorf("%s: %w", prog, ErrNotPythonFile)
	}
	if strings.Contains(need, "/") {
		return need, nil
	}
	origin := filepath.Dir(prog)
	expand := func(list []string) []string {
		var out []string
		for _, l := range list {
			for _, d := range filepath.SplitList(l) {
				d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", origin), "$ORIGIN", origin)
				out = append(out, d)
			}
		}
		return out
	}
	rpath, _ := f.DynString(elf.DT_RPATH)
	runpath, _ := f.DynString(elf.DT_RUNPATH)
	var dirs []string
	if len(runpath) == 0 {
		dirs = append(dirs, expand(rpath)...)
	}
	if libPath != nil {
		dirs = append(dirs, libPath...)
	} else {
		dirs = append(dirs, filepath.SplitList(envValue(env, "LD_LIBRARY_PATH"))...)
	}
	dirs = append(dirs, expand(runpath)...)
	dirs = append(dirs, ldSoConfDirs("/etc/ld.so.conf", 0)...)
	dirs = append(dirs, "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, need)
		lf, err := elf.Open(p)
		if err != nil {
			continue
		}
		ok := lf.Class == f.Class && lf.Machine == f.Machine && definesRuntime(lf)
		lf.Close()
		if ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %s not found where the loader looks", prog, need)
}

// definesRuntime: f holds the interpreter (_PyRuntime), as
// runtimeFromELF finds it.
func definesRuntime(f *elf.File) bool {
	_, ok := exportedSyms(f, map[string]bool{"_PyRuntime": true})["_PyRuntime"]
	return ok
}

// ldSoConfDirs lists the directories of an ld.so.conf (includes followed,
// a few deep): what ldconfig puts in the loader's cache.
func ldSoConfDirs(path string, depth int) []string {
	b, err := os.ReadFile(path)
	if err != nil || depth > 4 {
		return nil
	}
	var dirs []string
	for _, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "include"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			for _, pat := range strings.Fields(rest) {
				if !filepath.IsAbs(pat) {
					pat = filepath.Join(filepath.Dir(path), pat)
				}
				matches, _ := filepath.Glob(pat)
				for _, m := range matches {
					dirs = append(dirs, ldSoConfDirs(m, depth+1)...)
				}
			}
			continue
		}
		if line != "" && filepath.IsAbs(line) {
			dirs = append(dirs, line)
		}
	}
	return dirs
}

// linkTimeMaps is a one-line map of f at its link-time addresses (load
// bias 0), for runtimeFromELF.
func linkTimeMaps(f *elf.File, path string) []Mapping {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			const page = 4096
			return []Mapping{{Start: p.Vaddr &^ (page - 1), End: p.Vaddr + p.Memsz, Offset: p.Off &^ (page - 1), Path: path}}
		}
	}
	return nil
}

// fileMemory reads an ELF file as the loader maps it at its link-time
// addresses: PT_LOAD segments, zeros past a segment's file bytes (.bss).
type fileMemory struct {
	path string
	f    *elf.File
}

func (m *fileMemory) Read(addr uint64, p []byte) error {
	want := len(p)
	for len(p) > 0 {
		var seg *elf.Prog
		for _, s := range m.f.Progs {
			if s.Type == elf.PT_LOAD && addr >= s.Vaddr && addr-s.Vaddr < s.Memsz {
				seg = s
				break
			}
		}
		if seg == nil {
			return &MemError{Addr: addr, Want: want, Got: want - len(p), Err: fmt.Errorf("%s: %w", m.path, ErrUnmapped)}
		}
		rel := addr - seg.Vaddr
		n := min(uint64(len(p)), seg.Memsz-rel)
		inFile := uint64(0)
		if rel < seg.Filesz {
			inFile = min(n, seg.Filesz-rel)
			if _, err := seg.ReadAt(p[:inFile], int64(rel)); err != nil {
				return &MemError{Addr: addr, Want: want, Got: want - len(p), Err: fmt.Errorf("%s at file offset 0x%x: %w", m.path, seg.Off+rel, err)}
			}
		}
		clear(p[inFile:n])
		p, addr = p[n:], addr+n
	}
	return nil
}
