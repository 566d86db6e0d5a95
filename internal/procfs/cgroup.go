package procfs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Cgroups locates a process's cgroup (the one owning its CPU controller)
// and reads its files: cpu.stat (throttling), the quota, and PSI. It reads
// /proc/PID/cgroup and the observer's own /proc/self/mountinfo (the cgroup
// paths in /proc/PID/cgroup are relative to the observer's cgroup
// namespace, so the observer's mounts are the right ones), then the files
// under Root joined with each mount point (Root is "/" outside tests).
type Cgroups struct {
	Proc FS
	Root string
}

// NewCgroups reads the live system.
func NewCgroups() Cgroups { return Cgroups{Proc: Default(), Root: "/"} }

// CgroupPlace is where a process's CPU controller lives.
type CgroupPlace struct {
	Version int    // 1 or 2 for the hierarchy holding the cpu controller; 0 when none is mounted
	Path    string // cgroup path of that controller, e.g. "/pyobs-test"
	CPUDir  string // directory holding cpu.stat (on this filesystem, Root included)
	V2Path  string // the process's path in the v2 hierarchy ("" when none is mounted)
	V2Dir   string // its directory there, for PSI files
}

// Locate finds pid's cgroups.
func (c Cgroups) Locate(pid int) (CgroupPlace, error) {
	p, err := c.Proc.fs.Proc(pid)
	if err != nil {
		return CgroupPlace{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	cgs, err := p.Cgroups()
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return CgroupPlace{}, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
		}
		return CgroupPlace{}, fmt.Errorf("can't read /proc/%d/cgroup: %w", pid, err)
	}
	self, err := c.Proc.fs.Self()
	if err != nil {
		return CgroupPlace{}, fmt.Errorf("can't find /proc/self: %w", err)
	}
	mounts, err := self.MountInfo()
	if err != nil {
		return CgroupPlace{}, fmt.Errorf("can't read /proc/self/mountinfo: %w", err)
	}
	var pl CgroupPlace
	var v1Path, v2Path string
	haveV1, haveV2 := false, false
	for _, cg := range cgs {
		if cg.HierarchyID == 0 && len(cg.Controllers) == 0 {
			v2Path, haveV2 = cg.Path, true
			continue
		}
		for _, ctl := range cg.Controllers {
			if ctl == "cpu" {
				v1Path, haveV1 = cg.Path, true
			}
		}
	}
	for _, m := range mounts {
		switch m.FSType {
		case "cgroup":
			if !haveV1 || !hasOption(m.SuperOptions, "cpu") {
				continue
			}
			if dir, ok := c.under(m.MountPoint, m.Root, v1Path); ok && pl.Version != 1 {
				pl.Version, pl.Path, pl.CPUDir = 1, v1Path, dir
			}
		case "cgroup2":
			if !haveV2 || pl.V2Dir != "" {
				continue
			}
			if dir, ok := c.under(m.MountPoint, m.Root, v2Path); ok {
				pl.V2Path, pl.V2Dir = v2Path, dir
			}
		}
	}
	if pl.Version == 0 && pl.V2Dir != "" {
		// Pure v2 (or hybrid without a v1 cpu controller): cpu.stat always
		// exists there; throttling fields only where the cpu controller is on.
		pl.Version, pl.Path, pl.CPUDir = 2, pl.V2Path, pl.V2Dir
	}
	return pl, nil
}

func hasOption(opts map[string]string, name string) bool {
	_, ok := opts[name]
	return ok
}

// under maps a cgroup path to a directory under a mount whose root is mroot.
func (c Cgroups) under(mountPoint, mroot, path string) (string, bool) {
	rel := path
	if mroot != "/" && mroot != "" {
		if path != mroot && !strings.HasPrefix(path, mroot+"/") {
			return "", false // the cgroup is outside what this mount shows
		}
		rel = strings.TrimPrefix(path, mroot)
	}
	dir := filepath.Join(c.Root, mountPoint, filepath.Clean("/"+rel))
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", false
	}
	return dir, true
}

// CgroupCPU is the CPU controller's counters, normalised: times in
// nanoseconds whatever the version wrote (v1 ns, v2 µs).
type CgroupCPU struct {
	Version     int
	NrPeriods   uint64
	NrThrottled uint64
	ThrottledNs uint64
	UsageNs     uint64 // v2 usage_usec, v1 cpuacct.usage when reachable; 0 unknown
	HasThrottle bool   // the file had throttling fields (v2 without the cpu controller has none)
	QuotaUS     int64  // -1: no quota
	PeriodUS    uint64
}

// QuotaCores is the quota in CPUs, or 0 when unlimited.
func (c CgroupCPU) QuotaCores() float64 {
	if c.QuotaUS <= 0 || c.PeriodUS == 0 {
		return 0
	}
	return float64(c.QuotaUS) / float64(c.PeriodUS)
}

// ReadCPU reads cpu.stat and the quota of a located cgroup.
func (c Cgroups) ReadCPU(pl CgroupPlace) (CgroupCPU, error) {
	out := CgroupCPU{Version: pl.Version, QuotaUS: -1}
	if pl.Version == 0 {
		return out, fmt.Errorf("no cgroup cpu controller is mounted")
	}
	path := filepath.Join(pl.CPUDir, "cpu.stat")
	f, err := os.Open(path)
	if err != nil {
		return out, fmt.Errorf("can't read %s: %w", path, err)
	}
	kv, err := ParseFlatKeyed(f)
	f.Close()
	if err != nil {
		return out, fmt.Errorf("can't parse %s: %w", path, err)
	}
	out.NrPeriods, out.NrThrottled = kv["nr_periods"], kv["nr_throttled"]
	_, hp := kv["nr_throttled"]
	out.HasThrottle = hp
	switch pl.Version {
	case 1:
		out.ThrottledNs = kv["throttled_time"]
		if b, err := os.ReadFile(filepath.Join(pl.CPUDir, "cpu.cfs_quota_us")); err == nil {
			if q, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
				out.QuotaUS = q
			}
		}
		if b, err := os.ReadFile(filepath.Join(pl.CPUDir, "cpu.cfs_period_us")); err == nil {
			if p, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
				out.PeriodUS = p
			}
		}
		if b, err := os.ReadFile(filepath.Join(pl.CPUDir, "cpuacct.usage")); err == nil {
			out.UsageNs, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		}
	case 2:
		out.ThrottledNs = satMul(kv["throttled_usec"], 1000)
		out.UsageNs = satMul(kv["usage_usec"], 1000)
		if b, err := os.ReadFile(filepath.Join(pl.CPUDir, "cpu.max")); err == nil {
			if q, p, err := ParseCPUMax(string(b)); err == nil {
				out.QuotaUS, out.PeriodUS = q, p
			}
		}
	}
	return out, nil
}

func satMul(a, b uint64) uint64 {
	if a != 0 && b > math.MaxUint64/a {
		return math.MaxUint64
	}
	return a * b
}

// ParseFlatKeyed parses a cgroup "flat keyed" file (cpu.stat, memory.stat):
// one "key value" pair per line, value an unsigned integer. On error the
// result is nil.
func ParseFlatKeyed(r io.Reader) (map[string]uint64, error) {
	out := map[string]uint64{}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want \"key value\", got %q", n, trunc(sc.Text()))
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s: bad value %q", n, trunc(f[0]), trunc(f[1]))
		}
		out[f[0]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// ParseCPUMax parses cgroup v2 cpu.max: "$MAX $PERIOD", MAX being "max"
// for no quota (returned as -1).
func ParseCPUMax(s string) (quotaUS int64, periodUS uint64, err error) {
	f := strings.Fields(s)
	if len(f) < 1 || len(f) > 2 {
		return 0, 0, fmt.Errorf("cpu.max: want \"MAX PERIOD\", got %q", trunc(s))
	}
	periodUS = 100000
	if len(f) == 2 {
		periodUS, err = strconv.ParseUint(f[1], 10, 64)
		if err != nil || periodUS == 0 {
			return 0, 0, fmt.Errorf("cpu.max: bad period %q", trunc(f[1]))
		}
	}
	if f[0] == "max" {
		return -1, periodUS, nil
	}
	quotaUS, err = strconv.ParseInt(f[0], 10, 64)
	if err != nil || quotaUS <= 0 {
		return 0, 0, fmt.Errorf("cpu.max: bad quota %q", trunc(f[0]))
	}
	return quotaUS, periodUS, nil
}

// PSILine is one line of a pressure file.
type PSILine struct {
	Avg10, Avg60, Avg300 float64 // % of wall time, kernel's running averages
	TotalUS              uint64  // stall time since boot (or cgroup creation), µs
}

// PSI is one pressure file (cpu, memory or io).
type PSI struct {
	Some    PSILine
	Full    PSILine
	HasFull bool // the cpu file has a full line since 5.13 (system-wide it is all zeros)
}

// ParsePSI parses /proc/pressure/X or a cgroup's X.pressure.
func ParsePSI(r io.Reader) (PSI, error) {
	var p PSI
	sc := bufio.NewScanner(r)
	seenSome := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		var l PSILine
		got := 0
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return PSI{}, fmt.Errorf("pressure: bad field %q", trunc(kv))
			}
			var err error
			switch k {
			case "avg10":
				l.Avg10, err = parsePct(v)
			case "avg60":
				l.Avg60, err = parsePct(v)
			case "avg300":
				l.Avg300, err = parsePct(v)
			case "total":
				l.TotalUS, err = strconv.ParseUint(v, 10, 64)
			default:
				continue
			}
			if err != nil {
				return PSI{}, fmt.Errorf("pressure: bad %s %q", k, trunc(v))
			}
			got++
		}
		if got != 4 {
			return PSI{}, fmt.Errorf("pressure: line %q lacks avg10/avg60/avg300/total", trunc(sc.Text()))
		}
		switch f[0] {
		case "some":
			p.Some, seenSome = l, true
		case "full":
			p.Full, p.HasFull = l, true
		default:
			return PSI{}, fmt.Errorf("pressure: unknown line kind %q", trunc(f[0]))
		}
	}
	if err := sc.Err(); err != nil {
		return PSI{}, err
	}
	if !seenSome {
		return PSI{}, fmt.Errorf("pressure: no \"some\" line")
	}
	return p, nil
}

func parsePct(v string) (float64, error) {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil || x < 0 || x > 100 || math.IsNaN(x) {
		return 0, fmt.Errorf("bad percentage")
	}
	return x, nil
}

// Pressure is PSI for cpu, memory and io, from one source.
type Pressure struct {
	Source string // "cgroup /path" or "system"
	CPU    *PSI
	Memory *PSI
	IO     *PSI
}

// ReadPressure reads the cgroup's PSI files when the process sits in a
// non-root v2 cgroup that has them, else the system's /proc/pressure.
// A missing file (kernel without PSI, or psi=0) leaves its field nil.
func (c Cgroups) ReadPressure(pl CgroupPlace) Pressure {
	if pl.V2Dir != "" && pl.V2Path != "/" && pl.V2Path != "" {
		if _, err := os.Stat(filepath.Join(pl.V2Dir, "cpu.pressure")); err == nil {
			return Pressure{Source: "cgroup " + pl.V2Path,
				CPU:    readPSI(filepath.Join(pl.V2Dir, "cpu.pressure")),
				Memory: readPSI(filepath.Join(pl.V2Dir, "memory.pressure")),
				IO:     readPSI(filepath.Join(pl.V2Dir, "io.pressure"))}
		}
	}
	d := filepath.Join(c.Proc.root, "pressure")
	return Pressure{Source: "system",
		CPU:    readPSI(filepath.Join(d, "cpu")),
		Memory: readPSI(filepath.Join(d, "memory")),
		IO:     readPSI(filepath.Join(d, "io"))}
}

func readPSI(path string) *PSI {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	p, err := ParsePSI(f)
	if err != nil {
		return nil
	}
	return &p
}
