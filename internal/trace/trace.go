package trace

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/pyobs/pyobs/internal/trace/bucket"
)

// Site is the innermost Python frame that issued a call.
type Site struct {
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int    `json:"line"`
}

// Call is one finished syscall.
type Call struct {
	Name  string
	Dur   time.Duration
	Errno string // "" when it succeeded, else the errno name (ENOENT, …)
	Site  *Site  // nil when not read or not found
	// SiteTried: a site read was attempted (and failed when Site is nil).
	SiteTried bool
	// Path: the whole Python stack at the call, innermost first (Path[0]
	// is Site), when it was read with the thread stopped (ptrace's exit
	// stop); nil otherwise.
	Path []Site
}

// Hist is a log-linear histogram of nanoseconds: values below 2^bucket.SubBits
// have a bucket each, above that each power of two is split in 2^bucket.SubBits
// linear buckets, so a bucket's width is at most 1/2^bucket.SubBits of its value.
type Hist struct {
	Counts map[int]uint64
	N      uint64
	Max    uint64
	Min    uint64
}

// Add records one value.
func (h *Hist) Add(v uint64) {
	if h.Counts == nil {
		h.Counts = map[int]uint64{}
	}
	h.Counts[bucket.Of(v)]++
	if h.N == 0 || v < h.Min {
		h.Min = v
	}
	h.N++
	if v > h.Max {
		h.Max = v
	}
}

// Quantile returns an estimate of the q-quantile (0..1): the middle of the
// bucket holding the rank, clamped to [Min, Max]. Error ≤ 1/32 of the value.
func (h *Hist) Quantile(q float64) uint64 {
	if h.N == 0 {
		return 0
	}
	if q <= 0 {
		return h.Min
	}
	if q >= 1 {
		return h.Max
	}
	rank := uint64(q*float64(h.N-1)) + 1 // 1-based rank of the nearest-rank quantile
	idx := make([]int, 0, len(h.Counts))
	for i := range h.Counts {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var cum uint64
	for _, i := range idx {
		cum += h.Counts[i]
		if cum >= rank {
			lo, hi := bucket.Bounds(i)
			v := lo + (hi-lo)/2
			return min(max(v, h.Min), h.Max)
		}
	}
	return h.Max
}

// Stat is the account of one syscall.
type Stat struct {
	Name   string
	Calls  uint64
	Errors uint64
	Total  time.Duration
	Hist   Hist
	Errnos map[string]uint64
	Sites  map[Site]uint64
	// Paths: the whole call paths of the calls whose stack the kernel
	// walked (their leaf frames are counted in Sites too), by pathKey.
	Paths map[string]*PathCount
	// SiteTried counts calls whose site was read; SiteFailed those where the
	// read found no Python frame (native thread, exiting thread, torn read).
	SiteTried, SiteFailed uint64
	// Late counts calls whose site could only be read after the call had
	// returned (the thread may have moved on): tried, never attributed.
	Late uint64
	// Wanted counts the calls that were to be named: slow or failing (a
	// site read tried, or not possible: a held command's calls before its
	// walk, a set's calls when nothing walks). The others, fast and
	// successful, get no site by design and are not unattributed.
	Wanted uint64
	// NoSite: unattributed calls by why they got no site (a short
	// reason: NoSiteWhy), where the engine knows it.
	NoSite map[string]uint64
}

// Attributed is the number of calls with a site.
func (s *Stat) Attributed() uint64 { return s.SiteTried - s.SiteFailed - s.Late }

// Unattributed is the number of calls that were to be named (slow or
// failing) and got no site: not read, read late, or read and not found.
func (s *Stat) Unattributed() uint64 { return sub(s.Wanted, s.Attributed()) }

// NotWanted is the number of calls neither slow nor failing: no site is
// read for them, by design (reading a stack would cost more than the call).
func (s *Stat) NotWanted() uint64 { return sub(s.Calls, s.Wanted) }

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// SiteCount is one site and its calls.
type SiteCount struct {
	Site
	Calls uint64 `json:"calls"`
}

// TopSites returns up to n sites, most calls first (ties by file, line).
func (s *Stat) TopSites(n int) []SiteCount {
	out := make([]SiteCount, 0, len(s.Sites))
	for k, v := range s.Sites {
		out = append(out, SiteCount{k, v})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Calls != b.Calls {
			return a.Calls > b.Calls
		}
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Function < b.Function
	})
	if n >= 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// kpath is a Python stack the kernel walked, symbolized.
type kpath struct {
	frames    []Site // innermost first
	truncated bool   // callers missing
	err       bool   // a code object could not be read: no frames
	key       string // pathKey, once
}

// PathCount is one whole call path and its calls.
type PathCount struct {
	Calls uint64 `json:"calls"`
	// Truncated: the outer frames are missing (deeper than the walker
	// goes, or the chain ended short of the thread's outermost frame).
	Truncated bool   `json:"truncated,omitempty"`
	Frames    []Site `json:"frames"` // innermost first: Frames[0] is the call's site
}

func pathKey(frames []Site, truncated bool) string {
	var b strings.Builder
	if truncated {
		b.WriteString("[truncated]")
	}
	for _, f := range frames {
		fmt.Fprintf(&b, "\x00%s\x00%s\x00%d", f.Function, f.File, f.Line)
	}
	return b.String()
}

// TopPaths returns up to n call paths, most calls first (ties: fewer
// frames, then the leaf's file and line, then the key).
func (s *Stat) TopPaths(n int) []PathCount {
	type kp struct {
		k string
		p *PathCount
	}
	all := make([]kp, 0, len(s.Paths))
	for k, p := range s.Paths {
		all = append(all, kp{k, p})
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i].p, all[j].p
		if a.Calls != b.Calls {
			return a.Calls > b.Calls
		}
		if len(a.Frames) != len(b.Frames) {
			return len(a.Frames) < len(b.Frames)
		}
		return all[i].k < all[j].k
	})
	if n >= 0 && len(all) > n {
		all = all[:n]
	}
	out := make([]PathCount, len(all))
	for i, x := range all {
		out[i] = *x.p
	}
	return out
}

// Agg aggregates calls by syscall name.
type Agg struct {
	by map[string]*Stat
}

// New returns an empty aggregate.
func New() *Agg { return &Agg{by: map[string]*Stat{}} }

func (a *Agg) stat(name string) *Stat {
	s := a.by[name]
	if s == nil {
		s = &Stat{Name: name, Errnos: map[string]uint64{}, Sites: map[Site]uint64{}, Paths: map[string]*PathCount{}}
		a.by[name] = s
	}
	return s
}

// Add records one call.
func (a *Agg) Add(c Call) {
	s := a.stat(c.Name)
	s.Calls++
	d := max(c.Dur, 0)
	s.Total += d
	s.Hist.Add(uint64(d))
	if c.Errno != "" {
		s.Errors++
		s.Errnos[c.Errno]++
	}
	if c.SiteTried || c.Site != nil {
		s.Wanted++
		s.SiteTried++
		if c.Site == nil {
			s.SiteFailed++
		} else {
			s.Sites[*c.Site]++
		}
	}
	if len(c.Path) > 0 {
		s.countPath(pathKey(c.Path, false), c.Path, false)
	}
}

// Kernel is one syscall's account aggregated elsewhere (in the kernel):
// Hist holds calls per bucket of Hist's own bucketing.
type Kernel struct {
	Name          string
	Calls, Errors uint64
	Total         time.Duration
	Min, Max      time.Duration
	Hist          map[int]uint64
	Errnos        map[string]uint64
}

// AddKernel merges a pre-aggregated account (no per-call values).
func (a *Agg) AddKernel(k Kernel) {
	s := a.stat(k.Name)
	if k.Calls == 0 {
		return
	}
	if s.Hist.N == 0 || uint64(k.Min) < s.Hist.Min {
		s.Hist.Min = uint64(max(k.Min, 0))
	}
	s.Hist.Max = max(s.Hist.Max, uint64(max(k.Max, 0)))
	s.Calls += k.Calls
	s.Errors += k.Errors
	s.Total += k.Total
	if s.Hist.Counts == nil {
		s.Hist.Counts = map[int]uint64{}
	}
	for b, n := range k.Hist {
		s.Hist.Counts[b] += n
		s.Hist.N += n
	}
	for e, n := range k.Errnos {
		s.Errnos[e] += n
	}
}

// AddSite records the outcome of one site read for a call counted with
// AddKernel: found (site), found none (nil), or late (read after the call
// returned: counted apart, never attributed).
func (a *Agg) AddSite(name string, site *Site, late bool) {
	s := a.stat(name)
	s.Wanted++
	s.SiteTried++
	switch {
	case late:
		s.Late++
	case site == nil:
		s.SiteFailed++
	default:
		s.Sites[*site]++
	}
}

// AddUnnamed records a slow or failing call counted with AddKernel whose
// site could not be read at all (a held command's call before its walk was
// on, a set's call when its stacks are not walked): unattributed.
func (a *Agg) AddUnnamed(name string) { a.stat(name).Wanted++ }

// NoSiteWhy records why a call added as unattributed got no site.
func (a *Agg) NoSiteWhy(name, why string) {
	s := a.stat(name)
	if s.NoSite == nil {
		s.NoSite = map[string]uint64{}
	}
	s.NoSite[why]++
}

// AddPath records a call counted with AddKernel whose whole Python stack
// was walked (frames innermost first, at least one): its leaf is the
// call's site, the stack its path.
func (a *Agg) AddPath(name string, frames []Site, truncated bool) {
	a.addPath(name, pathKey(frames, truncated), frames, truncated)
}

// addPath is AddPath with the path's key already made (k: a kpath's).
func (a *Agg) addPath(name, k string, frames []Site, truncated bool) {
	s := a.stat(name)
	s.Wanted++
	s.SiteTried++
	s.Sites[frames[0]]++
	s.countPath(k, frames, truncated)
}

// countPath counts one call under its whole path (key k).
func (s *Stat) countPath(k string, frames []Site, truncated bool) {
	p := s.Paths[k]
	if p == nil {
		p = &PathCount{Truncated: truncated, Frames: frames}
		s.Paths[k] = p
	}
	p.Calls++
}

// Stats returns every syscall's account, most total time first (then calls, name).
func (a *Agg) Stats() []*Stat {
	out := make([]*Stat, 0, len(a.by))
	for _, s := range a.by {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		x, y := out[i], out[j]
		if x.Total != y.Total {
			return x.Total > y.Total
		}
		if x.Calls != y.Calls {
			return x.Calls > y.Calls
		}
		return x.Name < y.Name
	})
	return out
}

// Get returns the account of one syscall, or nil.
func (a *Agg) Get(name string) *Stat { return a.by[name] }

// Totals sums every syscall.
func (a *Agg) Totals() (calls, errors uint64, total time.Duration) {
	for _, s := range a.by {
		calls += s.Calls
		errors += s.Errors
		total += s.Total
	}
	return
}
