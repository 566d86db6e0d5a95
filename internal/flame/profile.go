// Package flame is the fold-and-render layer: a Profile aggregates stacks
// (root first) with weights, and renderers write it as folded text, an
// interactive SVG flame graph, pprof, speedscope or Firefox Profiler JSON.
//
// It reads no kernel or process: engines hand it stacks. What it cannot
// show is what the engine did not see; the Meta block carries the engine's
// own account of that (lost and torn samples, rates) into every output.
package flame

import (
	"slices"
	"sort"
	"strings"
)

// Kind says where a frame came from; it decides its label and colour.
type Kind uint8

const (
	Python Kind = iota
	Native
	Kernel
	Thread // synthetic root frame: the thread (with --threads)
	State  // synthetic frame: a thread state in wall mode ("sleeping", …)
)

// Frame is one frame of a stack.
type Frame struct {
	Kind     Kind
	Function string // qualname, symbol, thread name…
	File     string // Python: co_filename; Native: the ELF path
	Line     int    // Python: line being executed (for callers, the call's line)
	Addr     uint64 // Native/Kernel: address (for unknown symbols)
}

// Label renders a frame in the folded format of DESIGN.md:
// Python "QUALNAME (FILE:LINE)", native "SYMBOL", kernel "SYMBOL_[k]".
func (f Frame) Label() string {
	switch f.Kind {
	case Python:
		return f.Function + " (" + f.File + ":" + itoa(f.Line) + ")"
	case Kernel:
		return f.Function + "_[k]"
	}
	return f.Function
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	neg := n < 0
	if neg {
		n = -n
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// Meta is the recording's account of itself, carried into every output.
type Meta struct {
	Command      string  `json:"command"` // "record", "offcpu", …
	Mode         string  `json:"mode"`    // cpu, wall, gil, offcpu
	Unit         string  `json:"unit"`    // "samples" or "microseconds"
	Pid          int     `json:"pid"`
	Python       string  `json:"python,omitempty"`
	DurationS    float64 `json:"duration_s"`
	RequestedHz  float64 `json:"requested_hz,omitempty"`
	AchievedHz   float64 `json:"achieved_hz,omitempty"`
	Samples      uint64  `json:"samples"` // events folded in: CPU samples (record), context switches (offcpu)
	Lost         uint64  `json:"lost"`
	Torn         uint64  `json:"torn"`                  // stacks read inconsistently (kept, marked)
	Failed       uint64  `json:"failed"`                // samples whose stack could not be read at all
	Throttled    uint64  `json:"throttled"`             // THROTTLE records from the kernel
	StackReads   uint64  `json:"stack_reads,omitempty"` // Python stack reads from user space; each stands for the events since the thread's previous read
	Moved        uint64  `json:"moved"`                 // stacks read in one piece while the thread moved on (kept: a real stack µs after the sample)
	Late         uint64  `json:"late"`                  // CPU samples read too long after the kernel took them to be attributed
	ReadLagUS    float64 `json:"read_lag_us,omitempty"` // mean time from the kernel's sample to the stack read
	ObserverCPUS float64 `json:"observer_cpu_s"`
	// ObserverSetupCPUS: pyobs's CPU before the recording began (the
	// walker's load and verification, the target's layout read), apart:
	// ObserverCPUS is the recording's alone.
	ObserverSetupCPUS float64 `json:"observer_setup_cpu_s,omitempty"`
	TargetStoppedS    float64 `json:"target_stopped_s"`
	PeriodNS          int64   `json:"period_ns,omitempty"` // nominal time one sample stands for
	// UnobservedS: a spawned command ran this long (its start-up, the
	// sampler's loading) before the recording began; not in the profile.
	UnobservedS float64 `json:"unobserved_start_s,omitempty"`
	// HeldS: a command held before its exec waited this long for the
	// engine's load (its start was delayed, nothing of it missed);
	// HeldLayout says where the walker's layout came from then: the file
	// read before the exec, or the interpreter once up (a program the
	// verifier checks for every version: the longer load).
	HeldS      float64 `json:"held_s,omitempty"`
	HeldLayout string  `json:"held_layout,omitempty"`
	// How record's cpu mode took its stacks (internal/record). Engine:
	// "bpf" — walked in the kernel at the sample (internal/kwalk), "perf" —
	// read from user space after the sample; Fallback: why not bpf.
	// Exact: samples whose whole stack was walked at the sample's instant;
	// the others were truncated (depth limit, or the chain ended short),
	// faulted (a page not present), invalid (a check failed), of a thread
	// with no Python thread state or no frame. BPFNSPerSample: the walker's
	// run time per target sample from the kernel's bpf stats (BPFStats says
	// whether they were on, or why not).
	Engine          string `json:"engine,omitempty"`
	Fallback        string `json:"fallback,omitempty"`
	Exact           uint64 `json:"exact,omitempty"`
	KernelTruncated uint64 `json:"kernel_truncated,omitempty"`
	KernelFaulted   uint64 `json:"kernel_faulted,omitempty"`
	KernelInvalid   uint64 `json:"kernel_invalid,omitempty"`
	NotPython       uint64 `json:"not_python,omitempty"`
	NoFrames        uint64 `json:"no_frames,omitempty"`
	// PartlyNamed: samples named but for frames whose code object was
	// gone when pyobs read it (freed since the sample): each such frame
	// is [code object unreadable], the rest of the stack named.
	PartlyNamed uint64 `json:"partly_named,omitempty"`
	// CountsRaced: samples whose count the kernel wrote in its per-CPU
	// cache as pyobs read that cache (the run stalled past the drain's
	// wait): each may be missing from the profile or in it twice.
	CountsRaced uint64 `json:"counts_raced,omitempty"`
	// Execed (-p PID): the target exec'd a new program and the recording
	// ended there (what it became); LostToExec: samples not named because
	// their code objects were not read before the exec, or taken after
	// it ([lost to the exec]).
	Execed     string `json:"execed,omitempty"`
	LostToExec uint64 `json:"lost_to_exec,omitempty"`
	// TargetExited (-p PID): the target exited before the window's end,
	// which ended the recording there (duration_s).
	TargetExited bool `json:"target_exited,omitempty"`
	// NamesByAge (bpf): why the code objects of this recording could only
	// be re-checked by age (kwalk.Symbolizer: no code-object generation
	// to tell a freed and reused address by); empty when they could.
	NamesByAge string `json:"names_by_age,omitempty"`
	// BeforePython: samples of a held command taken before its
	// interpreter was up (not walked: [before the interpreter]).
	BeforePython   uint64  `json:"before_python,omitempty"`
	BPFNSPerSample float64 `json:"bpf_ns_per_sample,omitempty"`
	BPFStats       string  `json:"bpf_stats,omitempty"`
	// MapOnly: the kernel found thread states through user space's tid map
	// alone (the threads agreed on no TLS offset).
	MapOnly bool `json:"tstate_map_only,omitempty"`
	// Stopped: the target's threads seen stopped by a signal (job control)
	// or a tracer during the recording (record); nil when none was.
	Stopped *Stopped `json:"stopped,omitempty"`
	// Mixed: the native and kernel frames' account (record --native and
	// --kernel; offcpu's kernel symbols), nil when the profile has none. Its
	// fields sit at the top level of the JSON meta.
	*Mixed
}

// Stopped says that threads of the target were stopped — a job-control
// stop (SIGSTOP, SIGTSTP, …: /proc state T) or a tracer's stop (state t) —
// at some of the looks at their states during a recording: a stopped
// thread takes no CPU and is not sampled, so a profile of a stopped
// target is empty or thin for that reason, not because it was idle.
type Stopped struct {
	Threads int `json:"threads"` // the most threads seen stopped at one look
	Of      int `json:"of"`      // the threads the target (a set: its processes) had at that look
	// Seconds: how long at least one thread was seen stopped, to a look's
	// period (LookMS).
	Seconds float64 `json:"seconds"`
	State   string  `json:"state"` // T (job control), t (tracer), or "T and t"
	LookMS  int     `json:"look_ms"`
	// A set: at that look, its processes with a stopped thread and its
	// processes alive; absent for one process.
	Processes int `json:"processes,omitempty"`
	Members   int `json:"members,omitempty"`
}

// Mixed is the account of a profile's native and kernel frames.
type Mixed struct {
	// With --native: how each sample's native unwind ended (reached the
	// outermost frame; ran out of copied stack; stopped at a frame without
	// mapping/CFI/usable rule), why they stopped, and the samples whose
	// native and Python stacks disagreed (kept unmerged, marked).
	NativeFull      uint64            `json:"native_full,omitempty"`
	NativeTruncated uint64            `json:"native_truncated,omitempty"`
	NativeFailed    uint64            `json:"native_failed,omitempty"`
	NativeStops     map[string]uint64 `json:"native_stops,omitempty"`
	MergeMismatch   uint64            `json:"merge_mismatch,omitempty"`
	// MergeLinked: samples glued by C-stack address (3.11+); MergeGone: of
	// those, samples whose innermost interpreter frames had returned before
	// the Python stack was read (shown as [Python frames returned before read]).
	MergeLinked uint64 `json:"merge_linked,omitempty"`
	MergeGone   uint64 `json:"merge_gone,omitempty"`
	// MergeCounted (bpf engine, --native): samples glued by counting the
	// walk's entry frames (no C-stack links: 3.10, 3.11); MergeTransit:
	// samples, glued either way, whose innermost interpreter frames had no
	// Python frame at the sample — a call being entered or left (shown as
	// [Python frame entering or leaving]).
	MergeCounted   uint64 `json:"merge_counted,omitempty"`
	MergeTransit   uint64 `json:"merge_in_transit,omitempty"`
	StackUserBytes int    `json:"stack_user_bytes,omitempty"` // user stack copied per sample
	// KernelSymbols: with --kernel, a note when kernel frames can't be
	// named (kptr_restrict hides /proc/kallsyms addresses).
	KernelSymbols string `json:"kernel_symbols,omitempty"`
	// KernelStacks (bpf engine, --kernel): samples taken in kernel mode
	// whose kernel stack was kept; KernelStacksLost: kernel-mode samples
	// whose stack the kernel's stack map could not keep (marked).
	KernelStacks     uint64 `json:"kernel_stacks,omitempty"`
	KernelStacksLost uint64 `json:"kernel_stacks_lost,omitempty"`
}

// MixedMeta returns m's Mixed account, creating it for an engine to fill.
func (m *Meta) MixedMeta() *Mixed {
	if m.Mixed == nil {
		m.Mixed = &Mixed{}
	}
	return m.Mixed
}

// KernelNote is the note on unnamed kernel frames, "" when there is none.
func (m *Meta) KernelNote() string {
	if m.Mixed == nil {
		return ""
	}
	return m.KernelSymbols
}

// Profile aggregates stacks. Stacks are root first. Weight is in Meta.Unit.
type Profile struct {
	Meta   Meta
	frames []Frame
	index  map[Frame]int
	// The stacks, kept for the collector: a long recording holds hundreds
	// of thousands, and a garbage collection scans what points. They live
	// in fixed chunks (a *Stack stays put: callers key maps by it), their
	// frame ids in shared arenas, their hash chains as handles in a map
	// of plain integers: one pointer per stack, not three objects.
	heads  map[uint64]int32 // hash of the frame ids -> the chain's newest stack + 1
	chunks [][]Stack
	arena  []int // where new stacks' frame ids go; full arenas stay with their stacks
	nrec   int   // stacks stored, removed ones included
	nstack int   // stacks alive
}

// ProcessFrame is the root frame a set's stacks start with: a Thread
// frame naming their process, label "[pid N] argv" (procset.Label).
func ProcessFrame(label string) Frame { return Frame{Kind: Thread, Function: label} }

// IsProcessRoot: f is a ProcessFrame (a thread frame is named by the
// thread, never "[pid …").
func IsProcessRoot(f Frame) bool {
	return f.Kind == Thread && strings.HasPrefix(f.Function, "[pid ")
}

// Stack is one unique stack and its total weight.
type Stack struct {
	Frames []int // indices into the profile's frame table, root first
	Weight int64
	Count  int64 // number of samples folded in
	next   int32 // the next stack of its hash chain + 1 (0: none)
	gone   bool  // removed (Profile.Remove)
}

const (
	stackChunk = 1024    // stacks per chunk
	arenaInts  = 1 << 16 // frame ids per arena
)

// New returns an empty profile.
func New(meta Meta) *Profile {
	return &Profile{Meta: meta, index: map[Frame]int{}, heads: map[uint64]int32{}}
}

func (p *Profile) stack(handle int32) *Stack {
	i := int(handle) - 1
	return &p.chunks[i/stackChunk][i%stackChunk]
}

// keep copies ids into the arena; the slice's capacity ends with it, so
// a caller's append never writes into the next stack's ids.
func (p *Profile) keep(ids []int) []int {
	if cap(p.arena)-len(p.arena) < len(ids) {
		p.arena = make([]int, 0, max(arenaInts, len(ids)))
	}
	n := len(p.arena)
	p.arena = append(p.arena, ids...)
	return p.arena[n : n+len(ids) : n+len(ids)]
}

func hashIDs(ids []int) uint64 {
	h := uint64(14695981039346656037) // FNV-1a over the ids
	for _, id := range ids {
		h ^= uint64(id)
		h *= 1099511628211
	}
	return h
}

// Intern returns the index of f in the frame table.
func (p *Profile) Intern(f Frame) int {
	if i, ok := p.index[f]; ok {
		return i
	}
	p.frames = append(p.frames, f)
	p.index[f] = len(p.frames) - 1
	return len(p.frames) - 1
}

// Frame returns the frame at index i.
func (p *Profile) Frame(i int) Frame { return p.frames[i] }

// AddIDs folds a stack given as interned frame indices (root first). A stack
// seen before costs a hash and a compare: no allocation on the sampling path.
func (p *Profile) AddIDs(ids []int, weight int64) { p.AddIDsN(ids, weight, 1) }

// AddIDsN is AddIDs for count samples at once (counted in the kernel).
func (p *Profile) AddIDsN(ids []int, weight, count int64) {
	h := hashIDs(ids)
	head := p.heads[h]
	for i := head; i != 0; {
		s := p.stack(i)
		if slices.Equal(s.Frames, ids) {
			s.Weight += weight
			s.Count += count
			return
		}
		i = s.next
	}
	if p.nrec%stackChunk == 0 {
		p.chunks = append(p.chunks, make([]Stack, stackChunk))
	}
	p.nrec++
	p.nstack++
	*p.stack(int32(p.nrec)) = Stack{Frames: p.keep(ids), Weight: weight, Count: count, next: head}
	p.heads[h] = int32(p.nrec)
}

// Add folds a stack of frames (root first).
func (p *Profile) Add(frames []Frame, weight int64) {
	ids := make([]int, len(frames))
	for i, f := range frames {
		ids[i] = p.Intern(f)
	}
	p.AddIDs(ids, weight)
}

// Stacks returns the unique stacks sorted by their folded label (stable output).
func (p *Profile) Stacks() []*Stack {
	out := make([]*Stack, 0, p.nstack)
	p.EachStack(func(s *Stack) { out = append(out, s) })
	labels := make(map[*Stack]string, len(out))
	for _, s := range out {
		labels[s] = p.FoldedKey(s)
	}
	sort.Slice(out, func(i, j int) bool { return labels[out[i]] < labels[out[j]] })
	return out
}

// FoldedKey is the stack's folded label: frame labels joined by ';'.
func (p *Profile) FoldedKey(s *Stack) string {
	var b strings.Builder
	for i, id := range s.Frames {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(p.frames[id].Label())
	}
	return b.String()
}

// Remove drops every stack for which drop reports true and returns the
// weight and the number of stacks dropped (for filters that must say how
// much they took out).
func (p *Profile) Remove(drop func(*Stack) bool) (weight int64, stacks int) {
	for i := 1; i <= p.nrec; i++ {
		s := p.stack(int32(i))
		if s.gone || !drop(s) {
			continue
		}
		weight += s.Weight
		stacks++
		s.gone = true
		// Unlink it from its chain: an equal stack added later is new.
		h := hashIDs(s.Frames)
		if p.heads[h] == int32(i) {
			if s.next == 0 {
				delete(p.heads, h)
			} else {
				p.heads[h] = s.next
			}
			continue
		}
		for j := p.heads[h]; j != 0; {
			prev := p.stack(j)
			if prev.next == int32(i) {
				prev.next = s.next
				break
			}
			j = prev.next
		}
	}
	p.nstack -= stacks
	return weight, stacks
}

// Total is the sum of all weights.
func (p *Profile) Total() int64 {
	var t int64
	p.EachStack(func(s *Stack) { t += s.Weight })
	return t
}

// NumFrames is the size of the frame table (valid indices are 0..n-1).
func (p *Profile) NumFrames() int { return len(p.frames) }

// NumStacks is the number of unique stacks.
func (p *Profile) NumStacks() int { return p.nstack }

// EachStack calls fn for every unique stack, in no particular order; it is
// the cheap alternative to Stacks for renderers that impose their own order.
// fn must not modify the profile.
func (p *Profile) EachStack(fn func(*Stack)) {
	for i := 1; i <= p.nrec; i++ {
		if s := p.stack(int32(i)); !s.gone {
			fn(s)
		}
	}
}

// Rename gives frame i new fields in place: every stack that holds it
// shows f (a thread root labelled once its name was learned). It reports
// false, changing nothing, when f is another frame already.
func (p *Profile) Rename(i int, f Frame) bool {
	if j, ok := p.index[f]; ok {
		return j == i
	}
	if p.index[p.frames[i]] == i {
		delete(p.index, p.frames[i])
	}
	p.frames[i] = f
	p.index[f] = i
	return true
}
