package mem

import (
	"math"
	"sort"

	"github.com/pyobs/pyobs/internal/mem/probebpf"
)

// DefaultSampleBytes: the probe engine keeps one allocation per this many
// bytes allocated, on average. Every call pays its traps anyway; what the
// sampling bounds is the stack walk and the map updates (at most one walk
// per 64 KiB allocated) and the live map (4 GiB of growth fit its 2^17
// entries). A site that grew G bytes is estimated within about
// sqrt(64 KiB/G) (±8 % at 10 MiB); blocks of 64 KiB or more are all kept.
const DefaultSampleBytes = 64 << 10

// maxSampleBytes keeps the kernel's draw (rand32 * N < size << 32) in 64 bits.
const maxSampleBytes = 1 << 30

// probeFrames: Python frames walked per allocation.
const probeFrames = 64

// ProbesMove is the probes opened again on another thread: the kernel
// fires a uprobe only while the thread it was opened on lives.
type ProbesMove struct {
	From int     `json:"from_tid"` // the thread that ended
	To   int     `json:"to_tid"`
	AtS  float64 `json:"at_s"` // seconds into the window, the probes open again
	// GapS bounds the time without probes: from the last check that saw
	// From alive to the probes open on To (calls then are not counted).
	GapS float64 `json:"gap_max_s"`
}

// ProbeStats is the probe engine's own account: what it probed, what its
// sampling kept and what it could not keep.
type ProbeStats struct {
	Binary  string   `json:"binary"`
	Probed  []string `json:"probed"`
	Missing []string `json:"missing,omitempty"` // entry points the ELF lacks: their calls are not seen
	// Inlined: the build inlines its allocator into its callers (link-time
	// optimised): calls and small blocks' frees made inside the binary
	// reach no probe; large blocks' frees are seen at libc's free.
	Inlined     bool   `json:"inlined_build,omitempty"`
	SampleBytes uint64 `json:"sample_bytes"`
	Calls       uint64 `json:"calls"`   // allocator calls in the window (each paid two traps)
	Frees       uint64 `json:"frees"`   // free calls with a pointer (one trap each)
	Tracked     uint64 `json:"tracked"` // calls the sampling kept (a stack walk each)
	Freed       uint64 `json:"freed"`   // kept allocations freed in the window
	LiveEnd     uint64 `json:"live_end"`
	NullReturns uint64 `json:"null_returns,omitempty"`
	Replaced    uint64 `json:"replaced,omitempty"`      // a kept block's address handed out again (freed where no probe sees)
	DroppedLive uint64 `json:"dropped_live,omitempty"`  // the live map was full
	DroppedEst  uint64 `json:"dropped_bytes,omitempty"` // their estimated bytes
	DroppedPend uint64 `json:"dropped_pending,omitempty"`
	// Missed: probe hits whose program the kernel skipped (another BPF
	// program was running on that CPU): their calls are not seen.
	Missed uint64 `json:"missed,omitempty"`
	// Native: the native stacks' account (--native only).
	Native *NativeStats `json:"native,omitempty"`
	Stacks struct {
		Walked    uint64 `json:"walked"`
		Truncated uint64 `json:"truncated"`
		Fault     uint64 `json:"fault"`
		Invalid   uint64 `json:"invalid"`
		NoPython  uint64 `json:"no_python"`
		Empty     uint64 `json:"empty"`
		Distinct  uint64 `json:"distinct"`
		Lost      uint64 `json:"lost"`       // the ring was full: their allocations are unnamed
		Unnamed   uint64 `json:"unnamed"`    // stacks user space could not symbolize
		SymErrors uint64 `json:"sym_errors"` // code objects that could not be read
	} `json:"stacks"`
}

// liveSites groups the live kept allocations by stack (Python, and native
// when nat is not nil), scaled back from the sampling (bytes: the estimate
// each stands for; count: estimate / size), most bytes first; stacks never
// received are named as such. A site is named after its innermost Python
// frame (the line that called into C, with --native).
func liveSites(live []probebpf.Live, stacks map[uint64][]Frame, nat *natStacks) ([]Site, int64) {
	type key struct {
		py  uint64
		nat int
	}
	type agg struct{ bytes, count float64 }
	byStack := map[key]*agg{}
	for _, v := range live {
		k := key{py: v.Stack}
		if nat != nil {
			k.nat = nat.lookup(v.Nat)
		}
		a := byStack[k]
		if a == nil {
			a = &agg{}
			byStack[k] = a
		}
		a.bytes += float64(v.Est)
		if v.Size > 0 {
			a.count += float64(v.Est) / float64(v.Size)
		} else {
			a.count++
		}
	}
	var all []Site
	var total int64
	for k, a := range byStack {
		st := stacks[k.py]
		if nat != nil {
			st = nat.merge(st, k.nat)
		}
		if len(st) == 0 {
			name := "[no Python stack]"
			if k.py != 0 {
				name = "[stack not received]"
			}
			st = []Frame{{Function: name}}
		}
		site := st[0]
		for _, f := range st {
			if f.Kind == "" {
				site = f
				break
			}
		}
		b := int64(math.Round(a.bytes))
		total += b
		all = append(all, Site{Function: site.Function, File: site.File, Line: site.Line, Bytes: b,
			Count: int64(math.Round(a.count)), Stack: st})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Bytes != all[j].Bytes {
			return all[i].Bytes > all[j].Bytes
		}
		if all[i].Function != all[j].Function {
			return all[i].Function < all[j].Function
		}
		return len(all[i].Stack) < len(all[j].Stack)
	})
	return all, total
}
