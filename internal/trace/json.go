package trace

import "time"

// SyscallJSON is one row of `pyobs trace --format json` (DESIGN.md).
type SyscallJSON struct {
	Name string `json:"name"`
	CallStats
	PctWall  float64           `json:"pct_wall"`
	Errnos   map[string]uint64 `json:"errnos"`
	TopSites []SiteCount       `json:"top_sites"`
	// TopPaths: the whole Python call paths of the calls whose stack the
	// kernel walked (tracepoint engine), most calls first.
	TopPaths []PathCount `json:"top_paths,omitempty"`
	// SitesNotListed, PathsNotListed: attributed calls at the sites (on
	// the paths) --sites cut from the lists, so that the listed calls plus
	// these plus Unattributed plus NotSlowOrFailing are the calls.
	SitesNotListed uint64 `json:"sites_not_listed"`
	PathsNotListed uint64 `json:"paths_not_listed,omitempty"`
	// SiteOnly: with paths, attributed calls named by their innermost
	// frame alone (no path: counted in the sites only), so that the listed
	// paths plus PathsNotListed plus these plus Unattributed plus
	// NotSlowOrFailing are the calls.
	SiteOnly uint64 `json:"site_only,omitempty"`
	// Unattributed: slow or failing calls that got no site; NotSlowOrFailing:
	// the others, named by design by nothing (no site is read for them).
	Unattributed uint64 `json:"unattributed"`
	// UnattributedWhy: those calls by why (the reasons the engine knows).
	UnattributedWhy  map[string]uint64 `json:"unattributed_why,omitempty"`
	NotSlowOrFailing uint64            `json:"not_slow_or_failing"`
	LateReads        uint64            `json:"late_reads,omitempty"`
}

// CallStats is a set of calls in numbers: a syscall's row, a process's line.
type CallStats struct {
	Calls  uint64  `json:"calls"`
	Errors uint64  `json:"errors"`
	TotalS float64 `json:"total_s"`
	P50US  float64 `json:"p50_us"`
	P99US  float64 `json:"p99_us"`
	MaxUS  float64 `json:"max_us"`
}

func callStats(calls, errors uint64, total time.Duration, h *Hist) CallStats {
	return CallStats{Calls: calls, Errors: errors, TotalS: total.Seconds(),
		P50US: float64(h.Quantile(0.5)) / 1e3, P99US: float64(h.Quantile(0.99)) / 1e3, MaxUS: float64(h.Max) / 1e3}
}

// Rows renders every syscall's account; wall is the observed window
// (%-of-wall is the call's summed time over it, so it can pass 100 with threads).
func (a *Agg) Rows(wall time.Duration, topSites int) []SyscallJSON {
	var out []SyscallJSON
	for _, s := range a.Stats() {
		r := SyscallJSON{
			Name: s.Name, CallStats: callStats(s.Calls, s.Errors, s.Total, &s.Hist), Errnos: s.Errnos, TopSites: s.TopSites(topSites),
			TopPaths:     s.TopPaths(topSites),
			Unattributed: s.Unattributed(), UnattributedWhy: s.NoSite, NotSlowOrFailing: s.NotWanted(), LateReads: s.Late,
		}
		r.SitesNotListed = s.Attributed()
		for _, x := range r.TopSites {
			r.SitesNotListed -= x.Calls
		}
		if len(s.Paths) > 0 {
			var onPaths uint64
			for _, p := range s.Paths {
				onPaths += p.Calls
			}
			r.PathsNotListed = onPaths
			for _, x := range r.TopPaths {
				r.PathsNotListed -= x.Calls
			}
			if a := s.Attributed(); a > onPaths {
				r.SiteOnly = a - onPaths
			}
		}
		if wall > 0 {
			r.PctWall = 100 * float64(s.Total) / float64(wall)
		}
		if r.TopSites == nil {
			r.TopSites = []SiteCount{}
		}
		out = append(out, r)
	}
	if out == nil {
		out = []SyscallJSON{}
	}
	return out
}
