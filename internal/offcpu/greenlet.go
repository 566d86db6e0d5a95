package offcpu

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pyobs/pyobs/internal/clock"
	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/greenlet"
	"github.com/pyobs/pyobs/internal/pyframes"
)

// offcpu --greenlets (perf engine only: it needs every wait as an interval
// in user space; the eBPF engine keeps in-kernel sums).
//
// A wait read from user space (look, while the thread is off CPU) is rooted
// at "[greenlet] NAME" frames of the greenlet the thread was running and of
// its parents, as record --greenlets roots samples: the running greenlet
// is read (greenlet.Tracker: one 8-byte read) before and after the stack.
// The thread cannot switch greenlets while it is off CPU, so the greenlet
// read then is the one of the switch-out.
//
// A wait of a gevent hub in its event loop (the running greenlet is a hub,
// class network/poll) is not folded under the hub: it is held until the
// greenlet scans around it are known, then given, whole, to every greenlet
// parked in a wait during it (greenlet.Snapshot.Parked), each under its
// own stack and the class "greenlet wait". Which greenlets were parked: a
// scan read while the hub's thread was off CPU for the whole of the wait
// (the scan lies inside it) is exact — nothing of that thread can run
// then; else a greenlet counts when the last scan that began before the
// wait and the first that ended after it both show it parked at the same
// stack (it may have woken and parked again at the same place in
// between: counted as parked). One that only one of the two scans shows
// parked there is left out and counted uncertain. A hub wait nobody can
// attribute stays under the hub, with a frame saying why.

// ClassGreenletWait is the class of a greenlet's parked time during hub
// waits (the sum over greenlets may exceed wall time).
const ClassGreenletWait = "greenlet wait"

// Greenlet scan period: one full greenlet read (a GC walk) every
// greenScanMin, or 20 times the last scan's duration if that is longer
// (at most greenScanMax): ≤ 5 % of a CPU on the scans.
const (
	greenScanMin = 200 * time.Millisecond
	greenScanMax = 30 * time.Second
	greenScanMul = 20
	greenKeep    = int64(60 * time.Second) // scans older than this are dropped (a longer hub wait has one inside)
)

// Reasons a hub wait stays under the hub.
const (
	ReasonNoScanBefore = "no scan before it"
	ReasonNoScanAfter  = "no scan after it"
	ReasonScanFailed   = "scan failed"
	ReasonChanged      = "greenlets changed between scans"
	ReasonNoneParked   = "no greenlet parked"
)

// GreenletStats is offcpu --greenlets' account of itself.
type GreenletStats struct {
	Supported bool   `json:"supported"`
	Version   string `json:"greenlet_version,omitempty"`
	Note      string `json:"note,omitempty"` // why waits are not rooted (layout unknown, …), or the last scan's failure
	// Stack reads (one per wait read) and what became of their root.
	Rooted     uint64 `json:"rooted"`     // rooted at their greenlet
	Unknown    uint64 `json:"unknown"`    // the thread's greenlet was not known
	Changed    uint64 `json:"changed"`    // the thread switched greenlets during the read
	Unreadable uint64 `json:"unreadable"` // the greenlet's chain could not be read
	// Hub waits in the event loop, and their attribution.
	HubWaits       uint64            `json:"hub_waits"`
	HubWaitS       float64           `json:"hub_wait_s"`
	Attributed     uint64            `json:"attributed"`   // hub waits given to their parked greenlets
	AttributedS    float64           `json:"attributed_s"` // their wall time
	Exact          uint64            `json:"exact"`        // of them, with a scan inside the wait
	GreenletWaitS  float64           `json:"greenlet_wait_s"`
	Unattributed   uint64            `json:"unattributed"`
	UnattributedS  float64           `json:"unattributed_s"`
	Reasons        map[string]uint64 `json:"reasons,omitempty"` // unattributed hub waits per reason
	Uncertain      uint64            `json:"uncertain"`         // (greenlet, hub wait) pairs left out: parked in only one of the scans around it
	UncertainS     float64           `json:"uncertain_s"`       // their greenlet wait, left out
	Scans          int               `json:"scans"`
	ScansFailed    int               `json:"scans_failed"`
	ScanPeriodMS   float64           `json:"scan_period_ms"` // at the end
	ScanMS         float64           `json:"scan_ms"`        // mean duration of one scan
	SumExceedsWall bool              `json:"sum_exceeds_wall"`
}

type gcur struct {
	g, main uint64
	hub     bool
}

type gparked struct {
	key string // the stack's frame ids: the same place in two scans
	ids []int  // [greenlet] roots, then Python frames, root first
}

type gscan struct {
	t0, t1 int64
	failed bool
	parked map[uint64]map[uint64]gparked // main greenlet → greenlet → where
}

type hubWait struct {
	tid       int
	main, hub uint64
	a, b      int64
	ids       []int
	class     string
}

type greenOff struct {
	tr      *greenlet.Tracker
	st      GreenletStats
	cur     map[int]gcur // tid → the greenlet of the wait read last
	chain   []greenlet.Link
	labels  map[string]int
	scans   []gscan
	pending []hubWait
	period  time.Duration
	next    time.Time
	scanNS  int64
}

// greenStart sets up --greenlets; an unknown layout leaves plain offcpu
// output with Result.Greenlets saying so.
func (e *engine) greenStart() {
	t0 := clock.MonoNow()
	tr, err := greenlet.NewTracker(e.s) // scans once
	t1 := clock.MonoNow()
	if err != nil {
		e.res.Greenlets = &GreenletStats{Note: err.Error() + ": waits not rooted at greenlets"}
		return
	}
	e.green = &greenOff{tr: tr, cur: map[int]gcur{}, labels: map[string]int{}, period: greenScanMin,
		st: GreenletStats{Supported: true, Reasons: map[string]uint64{}}}
	e.green.keep(e, t0, t1, tr.Last())
}

// greenTick scans when the period is up — at a moment a hub is blocked in
// its loop if one comes within another period, so that the scan lies
// inside that wait (exact) if the wait outlasts it — and settles the hub
// waits it can.
func (e *engine) greenTick() {
	g := e.green
	if g == nil {
		return
	}
	now := time.Now()
	if now.Before(g.next) || (now.Before(g.next.Add(g.period)) && !e.hubBlocked()) {
		return
	}
	g.scan(e)
	g.settleAll(e, false)
}

// hubBlocked: a thread's hub is blocked in its loop now (read at the last
// look, and it has not run since).
func (e *engine) hubBlocked() bool {
	for tid, c := range e.green.cur {
		if th := e.threads[tid]; th != nil && c.hub && !th.on && th.seen && th.class == ClassNet {
			return true
		}
	}
	return false
}

// greenEnd settles every hub wait left (after the last scan and finish).
func (e *engine) greenEnd() {
	g := e.green
	if g == nil {
		return
	}
	g.settleAll(e, true)
	st := &g.st
	st.Version = g.tr.Version
	if g.tr.Err != nil {
		st.Note = g.tr.Err.Error()
	}
	st.Scans = g.tr.Scans
	if st.Scans > 0 {
		st.ScanMS = float64(g.scanNS) / 1e6 / float64(st.Scans)
	}
	st.ScanPeriodMS = float64(g.period.Microseconds()) / 1e3
	st.SumExceedsWall = st.GreenletWaitS > st.AttributedS
	e.res.Greenlets = st
}

// stack is engine.stack for --greenlets: the running greenlet's roots, then
// its Python frames (a partial chain when it is not the main greenlet).
func (g *greenOff) stack(e *engine, tid int, ids []int) []int {
	delete(g.cur, tid)
	ref, ok := e.tids.Lookup(tid)
	if !ok {
		return append(ids, e.prof.Intern(flame.Frame{Kind: flame.State, Function: "[no Python thread state]"}))
	}
	before := g.tr.Running(ref.Addr)
	partial := before != 0 && before != g.tr.Main(ref.Addr)
	frames, consistent, snapshot, err := e.s.Py.Stack(ref.Addr, pyframes.Options{Retries: 1, Snapshot: true, Reuse: true, Partial: partial})
	switch {
	case err != nil && !errors.Is(err, pyframes.ErrTorn):
		return append(ids, e.prof.Intern(flame.Frame{Kind: flame.State, Function: "[unreadable]"}))
	case !consistent && !snapshot:
		return append(ids, e.prof.Intern(flame.Frame{Kind: flame.State, Function: "[torn read]"}))
	}
	after := g.tr.Running(ref.Addr)
	switch {
	case after == 0:
		g.st.Unknown++
	case after != before:
		g.st.Changed++
	default:
		chain, cerr := g.tr.Chain(after, g.chain)
		g.chain = chain
		if cerr != nil || len(chain) == 0 {
			g.st.Unreadable++
			ids = append(ids, g.label(e, "[greenlet unreadable]"))
			break
		}
		g.st.Rooted++
		for i := len(chain) - 1; i >= 0; i-- {
			name := chain[i].Type
			switch {
			case chain[i].Main:
				name = "main"
			case i == 0 && len(frames) > 0 && !greenlet.IsHub(chain[i].Type):
				// The running greenlet by its outermost function, as record
				// names it; a hub by its type, the node its parked greenlets
				// hang from too.
				name = frames[len(frames)-1].Function
			}
			ids = append(ids, g.label(e, "[greenlet] "+name))
		}
		g.cur[tid] = gcur{g: after, main: g.tr.Main(ref.Addr), hub: greenlet.IsHub(chain[0].Type)}
	}
	if len(frames) == 0 {
		return append(ids, e.prof.Intern(flame.Frame{Kind: flame.State, Function: "[no Python frames]"}))
	}
	return e.pythonIDs(ids, frames)
}

func (g *greenOff) label(e *engine, l string) int {
	if id, ok := g.labels[l]; ok {
		return id
	}
	id := e.prof.Intern(flame.Frame{Kind: flame.State, Function: l})
	if len(g.labels) < 1<<14 {
		g.labels[l] = id
	}
	return id
}

// hubWait holds th's wait (d ns, read and classed) when it is a hub's wait
// in its event loop; false: fold it as any other.
func (g *greenOff) hubWait(th *thr, d int64) bool {
	c, ok := g.cur[th.tid]
	if !ok || !c.hub || th.class != ClassNet {
		return false
	}
	g.st.HubWaits++
	g.st.HubWaitS += float64(d) / 1e9
	g.pending = append(g.pending, hubWait{tid: th.tid, main: c.main, hub: c.g, a: th.since, b: th.since + d,
		ids: append([]int(nil), th.ids...), class: th.class})
	return true
}

// scan reads every greenlet and keeps, per thread, the parked ones.
func (g *greenOff) scan(e *engine) {
	t0 := clock.MonoNow()
	snap := g.tr.Rescan()
	t1 := clock.MonoNow()
	g.keep(e, t0, t1, snap)
}

// keep adds a scan (snap nil: it failed), read from t0 to t1.
func (g *greenOff) keep(e *engine, t0, t1 int64, snap *greenlet.Snapshot) {
	g.scanNS += t1 - t0
	g.period = min(max(greenScanMin, greenScanMul*time.Duration(t1-t0)), greenScanMax)
	g.next = time.Now().Add(g.period)
	sc := gscan{t0: t0, t1: t1}
	if snap == nil {
		sc.failed = true
		g.st.ScansFailed++
	} else {
		sc.parked = map[uint64]map[uint64]gparked{}
		byAddr := snap.ByAddr()
		for main, gs := range snap.Parked() {
			m := make(map[uint64]gparked, len(gs))
			for _, pg := range gs {
				m[pg.Addr] = g.parkedStack(e, pg, byAddr)
			}
			sc.parked[main] = m
		}
	}
	g.scans = append(g.scans, sc)
	g.prune(t1)
}

// prune drops the scans older than greenKeep (keeping the last one), but
// not the one before a pending wait began: its scan before. A wait still
// open is longer than greenKeep if it began before them: it has a kept
// scan inside.
func (g *greenOff) prune(now int64) {
	cut := 0
	for cut < len(g.scans)-1 && g.scans[cut].t1 < now-greenKeep {
		cut++
	}
	for _, w := range g.pending {
		for cut > 0 && g.scans[cut].t0 > w.a {
			cut--
		}
	}
	g.scans = g.scans[cut:]
}

// parkedStack: a parked greenlet's roots (its parents outermost first, as
// stack names them) and saved frames.
func (g *greenOff) parkedStack(e *engine, pg *greenlet.Greenlet, byAddr map[uint64]*greenlet.Greenlet) gparked {
	chain := greenlet.ChainOf(pg, byAddr)
	var ids []int
	for i := len(chain) - 1; i >= 0; i-- {
		name := greenlet.ShortType(chain[i].Type)
		switch {
		case chain[i].Main:
			name = "main"
		case i == 0:
			name = pg.Frames[len(pg.Frames)-1].Function
		}
		ids = append(ids, g.label(e, "[greenlet] "+name))
	}
	ids = e.pythonIDs(ids, pg.Frames)
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(strconv.Itoa(id))
		b.WriteByte(',')
	}
	return gparked{key: b.String(), ids: ids}
}

func (g *greenOff) settleAll(e *engine, final bool) {
	keep := g.pending[:0]
	for _, w := range g.pending {
		if !g.settle(e, w, final) {
			keep = append(keep, w)
		}
	}
	g.pending = keep
}

// settle attributes one hub wait, or keeps it under the hub with a reason;
// false: not yet (no scan after it, and more may come).
func (g *greenOff) settle(e *engine, w hubWait, final bool) bool {
	var inside, prev, next *gscan
	for i := range g.scans {
		s := &g.scans[i]
		if !s.failed && s.t0 >= w.a && s.t1 <= w.b {
			inside = s
			break
		}
		if s.t0 <= w.a {
			prev = s
		}
		if next == nil && s.t1 >= w.b && (prev == nil || s.t0 >= prev.t0) {
			next = s
		}
	}
	var set []gparked
	reason := ""
	switch {
	case inside != nil:
		set = sortedParked(inside.parked[w.main], w.hub)
		if len(set) == 0 {
			reason = ReasonNoneParked
		}
	case prev == nil:
		reason = ReasonNoScanBefore
	case next == nil && !final:
		return false
	case next == nil:
		reason = ReasonNoScanAfter
	case prev.failed || next.failed:
		reason = ReasonScanFailed
	default:
		before, after := prev.parked[w.main], next.parked[w.main]
		var unsure uint64
		for addr, p := range before {
			if q, ok := after[addr]; ok && q.key == p.key {
				continue
			}
			unsure++
		}
		for addr, q := range after {
			if p, ok := before[addr]; !ok || p.key != q.key {
				unsure++
			}
		}
		g.st.Uncertain += unsure
		g.st.UncertainS += float64(unsure) * float64(w.b-w.a) / 1e9
		both := map[uint64]gparked{}
		for addr, p := range before {
			if q, ok := after[addr]; ok && q.key == p.key {
				both[addr] = p
			}
		}
		set = sortedParked(both, w.hub)
		if len(set) == 0 {
			reason = ReasonNoneParked
			if unsure > 0 {
				reason = ReasonChanged
			}
		}
	}
	d := w.b - w.a
	if reason != "" {
		g.st.Unattributed++
		g.st.UnattributedS += float64(d) / 1e9
		g.st.Reasons[reason]++
		ids := append(w.ids, g.label(e, "[hub wait: greenlets not told: "+reason+"]"), e.prof.Intern(flame.Frame{Kind: flame.State, Function: "[" + w.class + "]"}))
		e.prof.AddIDs(ids, d/1000)
		return true
	}
	g.st.Attributed++
	g.st.AttributedS += float64(d) / 1e9
	if inside != nil {
		g.st.Exact++
	}
	wait := g.label(e, "["+ClassGreenletWait+"]")
	for _, p := range set {
		ids := e.scratch[:0]
		if e.opt.Threads {
			ids = append(ids, e.threadFrame(w.tid))
		}
		ids = append(append(ids, p.ids...), wait)
		e.prof.AddIDs(ids, d/1000)
		e.scratch = ids
		g.st.GreenletWaitS += float64(d) / 1e9
	}
	return true
}

// sortedParked: the parked greenlets but the hub, by address (a stable
// order for the profile).
func sortedParked(m map[uint64]gparked, hub uint64) []gparked {
	addrs := make([]uint64, 0, len(m))
	for a := range m {
		if a != hub {
			addrs = append(addrs, a)
		}
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i] < addrs[j] })
	out := make([]gparked, len(addrs))
	for i, a := range addrs {
		out[i] = m[a]
	}
	return out
}

// writeGreenletText is the text report's greenlet section.
func writeGreenletText(w io.Writer, r *Result) {
	s := r.Greenlets
	if s == nil || !s.Supported {
		return // the footer says why: the report stays the plain one
	}
	fmt.Fprintf(w, "\nGreenlets:\n")
	fmt.Fprintf(w, "  %s; waits rooted at the greenlet running at the switch-out: %d, greenlet unknown %d, switched during the read %d, unreadable %d\n",
		versionWords(s), s.Rooted, s.Unknown, s.Changed, s.Unreadable)
	fmt.Fprintf(w, "  hub waits in the event loop: %d, %.3fs; given to the greenlets parked in them: %d, %.3fs (%d with a scan inside the wait) = %.3fs of greenlet wait\n",
		s.HubWaits, s.HubWaitS, s.Attributed, s.AttributedS, s.Exact, s.GreenletWaitS)
	fmt.Fprintf(w, "    (greenlet wait is summed over the parked greenlets: each waited the whole of the hub's wait, so it may exceed wall time)\n")
	if s.Unattributed > 0 {
		fmt.Fprintf(w, "  left under the hub: %d, %.3fs (%s)\n", s.Unattributed, s.UnattributedS, reasonList(s.Reasons))
	}
	if s.Uncertain > 0 {
		fmt.Fprintf(w, "  left out: %.3fs of greenlet wait in %d (greenlet, hub wait) pairs: greenlets parked in only one of the scans around the wait (they changed between scans)\n",
			s.UncertainS, s.Uncertain)
	}
	fmt.Fprintf(w, "  scans: %d (%d failed), %.1f ms each, every %.0f ms\n", s.Scans, s.ScansFailed, s.ScanMS, s.ScanPeriodMS)
	if s.Note != "" {
		fmt.Fprintf(w, "  last scan: %s\n", s.Note)
	}
}

// versionWords: "greenlet VERSION", or that none was read (greenlet not
// imported during the run).
func versionWords(s *GreenletStats) string {
	if s.Version == "" {
		return "no greenlet read"
	}
	return "greenlet " + s.Version
}

func reasonList(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// GreenletFooter is offcpu --greenlets' one line for stderr ("" without
// --greenlets).
func GreenletFooter(r *Result) string {
	s := r.Greenlets
	switch {
	case s == nil:
		return ""
	case !s.Supported:
		return "pyobs offcpu --greenlets: " + s.Note
	}
	line := fmt.Sprintf("pyobs offcpu --greenlets: %s; %d waits rooted at their greenlet, %d greenlet unknown, %d switched during the read, %d unreadable; "+
		"hub waits %d (%.3fs): %d attributed (%.3fs, %d exact) = %.3fs greenlet wait (summed over parked greenlets: may exceed wall time), %d unattributed (%.3fs",
		versionWords(s), s.Rooted, s.Unknown, s.Changed, s.Unreadable, s.HubWaits, s.HubWaitS, s.Attributed, s.AttributedS, s.Exact, s.GreenletWaitS, s.Unattributed, s.UnattributedS)
	if len(s.Reasons) > 0 {
		line += "; " + reasonList(s.Reasons)
	}
	line += fmt.Sprintf("), %d uncertain pairs (%.3fs of greenlet wait left out: changed between scans); %d scans (%d failed, %.1f ms each, every %.0f ms)",
		s.Uncertain, s.UncertainS, s.Scans, s.ScansFailed, s.ScanMS, s.ScanPeriodMS)
	if s.Note != "" {
		line += "; last scan: " + s.Note
	}
	return line
}
