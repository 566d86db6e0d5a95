//go:build amd64

package red

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/clock"
	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/kwalk"
	"github.com/pyobs/pyobs/internal/procset"
	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/red/sampler"
	"github.com/pyobs/pyobs/internal/session"
)

// keepHits is how long a thread's samples wait for the request they fall
// in to end; a request served longer loses its earliest samples.
const keepHits = 30 * time.Second

type kstack struct {
	key    string
	frames []StackFrame // innermost first
	ids    []int        // profile frames, root first (with a profile)
}

type khit struct {
	time   uint64
	dur    uint64 // 0: a tick; else ns off CPU from time
	id     uint64
	flags  uint32
	joined bool
}

// ksampler joins the kernel's samples to requests: per thread, the hits
// not yet claimed, in time order; per stack hash, its frames.
type ksampler struct {
	p         *sampler.Sampler
	s         *session.Session
	tids      *session.TidMap
	sym       *kwalk.Symbolizer
	members   *kwalk.Members // a set's other processes, each read through its own reader; nil: the target alone
	stacks    map[uint64]*kstack
	byTid     map[uint32][]khit
	drainedAt uint64
	lastFill  time.Time
	lastPrune uint64
	period    uint64 // ns
	prof      *flame.Profile
	roots     map[string]int
	frameIDs  map[StackFrame]int
	acct      SamplingReport
	err       error
	stats     io.Closer // the kernel's bpf run-time accounting, while on
	// proc, when set (a set of processes), labels a profile's process
	// frame ("[pid N] argv…") under a request's route.
	proc func(pid int) string
}

// openSampler starts the kernel sampler on the members of pr's set, or
// says why not.
func openSampler(s *session.Session, tids *session.TidMap, opt Options, pr *probe, set procset.Options) (*ksampler, string) {
	if opt.SampleHz <= 0 {
		return nil, "--sample-hz 0"
	}
	if s.Py == nil || tids == nil {
		return nil, "no Python runtime found in the target"
	}
	kl, err := s.Py.KernelLayout()
	if err != nil {
		return nil, err.Error()
	}
	tls, err := s.Py.TLSOffsets()
	if err != nil {
		tls = nil // threads are found through the map filled from user space
	}
	cfg, err := kwalk.ProgramConfig(s.Pid, kl, kwalk.MaxFrames, tls)
	if err != nil {
		return nil, err.Error()
	}
	p, err := sampler.Open(s.Pid, cfg, opt.SampleHz, pr.sharedMaps(), set)
	if err != nil {
		return nil, err.Error()
	}
	k := &ksampler{p: p, s: s, tids: tids, sym: kwalk.NewSymbolizer(s.Py, kl), stacks: map[uint64]*kstack{},
		byTid: map[uint32][]khit{}, period: uint64(time.Second) / uint64(opt.SampleHz), acct: SamplingReport{Engine: "bpf", RequestedHz: opt.SampleHz, CPUs: p.CPUs}}
	if opt.Profile {
		k.prof = flame.New(flame.Meta{Command: "red", Mode: "cpu", Unit: "samples", Pid: s.Pid, Python: s.Py.Version().String(),
			RequestedHz: float64(opt.SampleHz), Engine: "bpf", PeriodNS: int64(time.Second) / int64(opt.SampleHz)})
		k.roots = map[string]int{}
		k.frameIDs = map[StackFrame]int{}
	}
	if pr.set != nil {
		k.members = kwalk.NewMembers(pr.set, p.PyAddrs(), kl)
		k.members.Add(s.Pid, s.Py, k.sym)
	}
	k.stats, k.acct.BPFStats = bpfload.EnableRunStats()
	k.refresh(true)
	return k, ""
}

// refresh hands the kernel the thread states (every 200 ms at most,
// unless now): threads the TLS lookup can't find are found by the map.
func (k *ksampler) refresh(now bool) {
	if !now && time.Since(k.lastFill) < 200*time.Millisecond {
		return
	}
	k.lastFill = time.Now()
	if k.members != nil {
		k.members.Open()
	}
	var refs []pyframes.ThreadRef
	// After the target's exec its session's threads are of the program
	// before: its own come with the members'.
	if k.members == nil || k.members.Seed() == k.s.Pid {
		k.tids.Refresh()
		refs = k.tids.All()
	}
	if k.members != nil {
		refs = append(append([]pyframes.ThreadRef(nil), refs...), k.members.ThreadRefs()...)
	}
	_ = k.p.SetThreads(refs)
}

// drain reads what the kernel sent: after it, every sample taken before
// drainedAt is in byTid.
func (k *ksampler) drain() {
	k.drainedAt = uint64(clock.MonoNow())
	if k.err != nil {
		return
	}
	k.err = k.p.Drain(k.onStack, k.onHit)
	k.refresh(false)
	if k.drainedAt-min(k.lastPrune, k.drainedAt) > uint64(time.Second) {
		k.prune(k.drainedAt - min(uint64(keepHits), k.drainedAt))
		k.lastPrune = k.drainedAt
	}
}

// onStack names a new stack at once, while its code objects are alive.
func (k *ksampler) onStack(smp kwalk.Sample) {
	if smp.ID == 0 || k.stacks[smp.ID] != nil {
		return // sent again after pyseen forgot it
	}
	// A member's stack is named through its own process's memory: the
	// same addresses in the target may hold other code (a worker's own,
	// compiled after its fork).
	sym, why := k.sym, ""
	if k.members != nil && smp.Tgid != 0 && (smp.Tgid != k.s.Pid || k.members.Seed() != k.s.Pid) {
		sym, why = k.members.Symbolizer(smp.Tgid)
	}
	var frames []pyframes.Frame
	var err error
	if sym != nil {
		frames, err = sym.Frames(&smp)
	}
	st := &kstack{}
	var key strings.Builder
	switch {
	case sym == nil:
		k.acct.SymbolErrors++
		st.frames = []StackFrame{{Function: "[python stack not named: " + why + "]"}}
	case err != nil:
		k.acct.SymbolErrors++
		frames = nil
		st.frames = []StackFrame{{Function: "[code object unreadable]"}}
	}
	for _, f := range frames {
		st.frames = append(st.frames, StackFrame{Function: f.Function, File: f.File, Line: f.Line})
	}
	if !smp.Complete() {
		st.frames = append(st.frames, StackFrame{Function: smp.Marker()})
	}
	for _, f := range st.frames {
		key.WriteString(f.Function)
		key.WriteByte(0)
		key.WriteString(f.File)
		key.WriteByte(0)
		key.WriteString(strconv.Itoa(f.Line))
		key.WriteByte(1)
	}
	st.key = key.String()
	if k.prof != nil {
		for i := len(st.frames) - 1; i >= 0; i-- {
			st.ids = append(st.ids, k.frameID(st.frames[i]))
		}
	}
	k.stacks[smp.ID] = st
}

func (k *ksampler) frameID(f StackFrame) int {
	id, ok := k.frameIDs[f]
	if !ok {
		kind := flame.Python
		if f.File == "" && strings.HasPrefix(f.Function, "[") {
			kind = flame.State
		}
		id = k.prof.Intern(flame.Frame{Kind: kind, Function: f.Function, File: f.File, Line: f.Line})
		k.frameIDs[f] = id
	}
	return id
}

func (k *ksampler) onHit(h sampler.Hit) {
	l := k.byTid[h.Tid]
	x := khit{time: h.Time, dur: h.Dur, id: h.ID, flags: h.Flags}
	l = append(l, x)
	// A thread's samples arrive in time order (it runs on one CPU at a
	// time); keep the list sorted all the same.
	for i := len(l) - 1; i > 0 && l[i].time < l[i-1].time; i-- {
		l[i], l[i-1] = l[i-1], l[i]
	}
	k.byTid[h.Tid] = l
}

// join claims the samples of tid in [start, end] for one request and adds
// them to the profile under the request's route (and its process, in a
// set): a tick counts one, a wait that began in the request its time in
// it, in sample periods (rounded).
func (k *ksampler) join(port int, route string, named bool, pid int, tid uint32, start, end uint64) []SampledStack {
	l := k.byTid[tid]
	i := sort.Search(len(l), func(i int) bool { return l[i].time >= start })
	var out []SampledStack
	byKey := map[uint64]int{}
	root := -1
	for ; i < len(l) && l[i].time <= end; i++ {
		h := &l[i]
		n := 1
		if h.dur > 0 {
			n = int((min(h.time+h.dur, end) - h.time + k.period/2) / k.period)
		}
		if !h.joined {
			h.joined = true
			if h.dur > 0 {
				k.acct.JoinedWaits++
			} else {
				k.acct.Joined++
			}
		}
		if n == 0 {
			continue
		}
		st := k.stacks[h.id]
		if k.prof != nil {
			if root < 0 {
				label := "[route] " + route
				if !named {
					label = fmt.Sprintf("[port %d]", port)
				}
				root = k.root(label)
			}
			var ids []int
			if k.proc != nil {
				ids = []int{root, k.frameID(StackFrame{Function: k.proc(pid)})}
			} else {
				ids = []int{root}
			}
			k.addProfile(ids, h, st, n)
		}
		j, ok := byKey[h.id]
		if !ok {
			j = len(out)
			byKey[h.id] = j
			out = append(out, SampledStack{})
			if st != nil {
				out[j].Key, out[j].Frames = st.key, st.frames
			}
		}
		out[j].N += n
	}
	return out
}

func (k *ksampler) root(label string) int {
	id, ok := k.roots[label]
	if !ok {
		id = k.prof.Intern(flame.Frame{Kind: flame.State, Function: label})
		k.roots[label] = id
	}
	return id
}

// addProfile adds n samples of h under the frames root (the route, its
// process); a wait's stack ends in [off cpu].
func (k *ksampler) addProfile(root []int, h *khit, st *kstack, n int) {
	ids := append([]int(nil), root...)
	switch {
	case st != nil:
		ids = append(ids, st.ids...)
	case h.id != 0:
		k.acct.Unnamed++
		ids = append(ids, k.frameID(StackFrame{Function: "[python stack lost]"}))
	default:
		ids = append(ids, k.frameID(StackFrame{Function: "[no python stack]"}))
	}
	if h.dur > 0 {
		ids = append(ids, k.frameID(StackFrame{Function: "[off cpu]"}))
	}
	k.prof.AddIDs(ids, int64(n))
}

// prune drops the samples taken before t; ticks no request claimed go to
// the profile under [no request] (waits outside requests are idle time:
// dropped).
func (k *ksampler) prune(t uint64) {
	for tid, l := range k.byTid {
		n := sort.Search(len(l), func(i int) bool { return l[i].time >= t })
		for i := 0; i < n; i++ {
			if !l[i].joined && l[i].dur == 0 {
				k.acct.Outside++
				if k.prof != nil {
					k.addProfile([]int{k.root("[no request]")}, &l[i], k.stacks[l[i].id], 1)
				}
			}
		}
		if n == len(l) {
			delete(k.byTid, tid)
		} else if n > 0 {
			k.byTid[tid] = append(l[:0], l[n:]...)
		}
	}
}

// stop ends sampling and reads what is left; every sample is then either
// joined or [no request].
func (k *ksampler) stop() {
	k.p.Stop()
	k.drain()
}

// report is the sampler's account now.
func (k *ksampler) report(final bool, windowS float64) *SamplingReport {
	if final {
		k.prune(^uint64(0))
	}
	r := k.acct
	if c, err := k.p.Counters(); err == nil {
		r.Samples, r.Walked, r.Truncated, r.Faulted, r.Invalid = c.Samples, c.Walked, c.Truncated, c.Faulted, c.Invalid
		r.NoPython, r.NoFrame, r.Stacks, r.Lost = c.NoPython, c.NoFrame, c.Stacks, c.HitLost+c.StackLost+c.OutFull
		r.SwitchOuts, r.Waits = c.SwitchOuts, c.Waits
	}
	if rt, runs, sw, sws := k.p.RunTime(); runs > 0 || sws > 0 {
		if runs > 0 {
			r.BPFNSPerSample = float64(rt.Nanoseconds()) / float64(runs)
		}
		if sws > 0 {
			r.BPFNSPerSwitch = float64(sw.Nanoseconds()) / float64(sws)
		}
	}
	if k.err != nil {
		r.Error = k.err.Error()
	}
	if final && k.prof != nil {
		m := &k.prof.Meta
		m.Samples, m.Exact, m.KernelTruncated, m.KernelFaulted, m.KernelInvalid = r.Samples, r.Walked, r.Truncated, r.Faulted, r.Invalid
		m.NotPython, m.NoFrames, m.Lost, m.DurationS = r.NoPython, r.NoFrame, r.Lost, windowS
		if windowS > 0 {
			m.AchievedHz = float64(r.Samples) / windowS
		}
		m.BPFNSPerSample, m.BPFStats = r.BPFNSPerSample, r.BPFStats
	}
	return &r
}

func (k *ksampler) close() {
	k.p.Close()
	if k.stats != nil {
		_ = k.stats.Close()
	}
}
