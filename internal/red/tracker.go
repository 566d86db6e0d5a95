package red

import (
	"bytes"
	"container/heap"
	"sort"
)

// errno values the tracker tells apart (negated syscall returns).
const (
	eAgain      = 11
	ePipe       = 32
	eConnReset  = 104
	eConnAbort  = 103
	eInProgress = 115
)

// FdKind is what an fd of the target turned out to be.
type FdKind int

const (
	FdOther  FdKind = iota // not a socket of a watched port
	FdListen               // a listening TCP socket
	FdConn                 // an established connection on a listening port
)

// FD is one file descriptor of one process: two workers' equal fd numbers
// are different sockets (or the same listening one, inherited).
type FD struct {
	Pid int32
	Fd  int32
}

// Resolver tells, from /proc, what an fd the tracker has not seen opened is.
type Resolver func(fd FD) (kind FdKind, port int)

// MaxRoutes bounds the routes kept per port; the rest go to [other].
const MaxRoutes = 64

// OtherRoute collects requests beyond MaxRoutes distinct routes.
const OtherRoute = "[other]"

type phase int

const (
	phIdle phase = iota
	phReading
	phWriting
)

// request is one HTTP request in flight on a connection.
type request struct {
	head      RequestHead
	named     bool
	start     uint64 // first byte read (CLOCK_MONOTONIC ns)
	lastWrite uint64
	status    int
	tid       uint32
	aborted   string
	stacks    map[string]*stackSeen
	reads     int // stack reads while in flight
	samples   int // kernel samples of its thread while it was served
	// line: the request line so far, when its first read ended inside it
	// (a client that writes it in pieces): named once the line is whole.
	line []byte
}

type stackSeen struct {
	frames []StackFrame
	n      int // observations: stack reads and kernel samples
	kernel int // of which kernel samples
}

// SampledStack is one stack the kernel's sampler saw on a request's
// thread while the request was served, and how many samples saw it; Key
// "" for samples without a Python stack.
type SampledStack struct {
	Key    string
	Frames []StackFrame // innermost first
	N      int
}

// Joiner returns the kernel samples of thread tid (of process pid) taken
// during [start, end] of a request of port (route as the tracker named it;
// named false: no HTTP route).
type Joiner func(port int, route string, named bool, pid int, tid uint32, start, end uint64) []SampledStack

// conn is one accepted connection.
type conn struct {
	port      int
	pid       int    // the process that accepted it (serves its requests)
	opened    uint64 // accept (or first sight) time
	accepted  bool   // its accept was seen
	firstRead uint64
	proto     Protocol
	note      string
	sniffBuf  []byte
	bytesIn   uint64
	bytesOut  uint64
	reset     bool
	phase     phase
	cur       *request
	pending   []RequestHead // pipelined request lines seen in the same read
	shut      bool
	tries     int    // sniff attempts on a connection open before the start
	displaced uint64 // when an accept took its number before its close was read
}

// RouteStats is RED for one route of one port.
type RouteStats struct {
	Requests  uint64
	Errors    uint64
	Client4xx uint64
	Dur       Hist
}

// WorkerStats is RED for one process of one port (a prefork server's
// worker: the process that accepted the connection).
type WorkerStats struct {
	Requests  uint64
	Errors    uint64
	Client4xx uint64
	Dur       Hist
}

// PortStats accumulates one port over a window.
type PortStats struct {
	Port      int
	Requests  uint64
	Errors    uint64 // 5xx + aborted
	Client4xx uint64
	Aborted   map[string]uint64
	Status    map[int]uint64
	Dur       Hist
	Queue     Hist // accept → first byte read
	Routes    map[string]*RouteStats
	Workers   map[int]*WorkerStats // by pid
	Unnamed   uint64               // pipelined requests whose request line was beyond the prefix

	ConnOpened, ConnClosed, ConnResets uint64
	ConnDur                            Hist
	BytesIn, BytesOut                  uint64
	HTTPConns                          uint64
	NotParsed                          map[string]uint64
}

func newPortStats(port int) *PortStats {
	return &PortStats{Port: port, Aborted: map[string]uint64{}, Status: map[int]uint64{},
		Routes: map[string]*RouteStats{}, Workers: map[int]*WorkerStats{}, NotParsed: map[string]uint64{}}
}

// Finished is one completed request, as kept for --slowest.
type Finished struct {
	Port     int
	Pid      int
	Head     RequestHead
	Named    bool
	Status   int
	Start    uint64
	Dur      uint64
	Aborted  string
	Tid      uint32
	Stack    []StackFrame
	StackN   int // reads that saw Stack
	Reads    int // stack reads of this request
	Samples  int // kernel samples of its thread while it was served
	StackK   int // of which saw Stack
	sequence uint64
}

// StackFrame is one Python frame, innermost first.
type StackFrame struct {
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int    `json:"line"`
}

// Tracker turns syscall events into connections and requests. It is pure
// logic over events (no I/O besides the Resolver) so it can be tested with
// recorded sequences.
type Tracker struct {
	resolve Resolver
	listen  map[FD]int
	conns   map[FD]*conn
	other   map[FD]bool
	// stale holds the connection an accept displaced from its number
	// before its close was read. A close in one thread frees the number
	// before an accept in another takes it, but the two exits reach the
	// ring in the order they ended: the close's can come second.
	stale map[FD]*conn
	ports map[int]*PortStats
	slow  slowHeap
	slowN int
	seq   uint64
	// Join, when set, is asked at each request's end for the kernel
	// samples taken on its thread while it was served.
	Join Joiner
	// Parent, when set, names the process pid was forked from (0: none
	// known): an accept on an fd that /proc can no longer resolve (the
	// process exited before its events were read) is on the listening
	// socket the parent had at that number, inherited across fork.
	Parent func(pid int32) int32

	Events, Unknown, Resolves uint64
}

// NewTracker starts with the listening sockets and connections found at
// start; slowest is how many of the slowest requests to keep.
func NewTracker(resolve Resolver, slowest int) *Tracker {
	return &Tracker{resolve: resolve, listen: map[FD]int{}, conns: map[FD]*conn{},
		other: map[FD]bool{}, stale: map[FD]*conn{}, ports: map[int]*PortStats{}, slowN: slowest}
}

// AddListener registers a listening fd.
func (t *Tracker) AddListener(fd FD, port int) {
	t.listen[fd] = port
	t.port(port)
}

// AddConn registers a connection that was open before the start.
func (t *Tracker) AddConn(fd FD, port int, now uint64) {
	t.conns[fd] = &conn{port: port, pid: int(fd.Pid), opened: now}
	t.port(port)
}

func (t *Tracker) port(p int) *PortStats {
	ps := t.ports[p]
	if ps == nil {
		ps = newPortStats(p)
		t.ports[p] = ps
	}
	return ps
}

// lookup finds the connection behind fd, asking the resolver once per fd
// lifetime (until its close is seen).
func (t *Tracker) lookup(fd FD, now uint64) *conn {
	if c := t.conns[fd]; c != nil {
		return c
	}
	if t.other[fd] || t.resolve == nil {
		return nil
	}
	if _, ok := t.listen[fd]; ok {
		return nil
	}
	t.Resolves++
	kind, port := t.resolve(fd)
	switch kind {
	case FdConn:
		t.AddConn(fd, port, now)
		return t.conns[fd]
	case FdListen:
		t.AddListener(fd, port)
	default:
		t.other[fd] = true
	}
	return nil
}

// before reports whether ev's syscall began before the connection now at
// fd was accepted: then it was on the number's previous connection (the
// new one's number was not known to the process yet), returned if kept.
func (t *Tracker) before(fd FD, ev *Event) (*conn, bool) {
	c := t.conns[fd]
	if c == nil || !c.accepted || ev.TEnter == 0 || ev.TEnter >= c.opened {
		return nil, false
	}
	return t.stale[fd], true
}

// owner is the connection a read, write or shutdown on fd was made on.
func (t *Tracker) owner(fd FD, ev *Event) *conn {
	if c, old := t.before(fd, ev); old {
		return c
	}
	if ev.NotSocket() {
		// A file at the call: no connection, and nothing to ask /proc,
		// whose answer, later, may be a connection that took the number
		// since.
		if _, ok := t.listen[fd]; !ok && t.conns[fd] == nil {
			t.other[fd] = true
		}
		return nil
	}
	return t.lookup(fd, ev.TExit)
}

// closeStale ends a connection displaced from its number by an accept.
func (t *Tracker) closeStale(fd FD, c *conn, now uint64) {
	delete(t.stale, fd)
	t.closeConn(fd, c, now)
}

// CloseStale ends the displaced connections whose close was not read
// before cutoff: missed (its event lost, or the fd closed another way), and
// closed when the accept took their number.
func (t *Tracker) CloseStale(cutoff uint64) {
	var fds []FD
	for fd, c := range t.stale {
		if c.displaced < cutoff {
			fds = append(fds, fd)
		}
	}
	sort.Slice(fds, func(i, j int) bool {
		return fds[i].Pid < fds[j].Pid || fds[i].Pid == fds[j].Pid && fds[i].Fd < fds[j].Fd
	})
	for _, fd := range fds {
		c := t.stale[fd]
		t.closeStale(fd, c, c.displaced)
	}
}

// inherited finds the listening socket fd's process inherited at that
// number from its parent (or theirs), known already or resolved now.
func (t *Tracker) inherited(fd FD) (int, bool) {
	if t.Parent == nil {
		return 0, false
	}
	p := fd.Pid
	for i := 0; i < 8; i++ {
		if p = t.Parent(p); p == 0 {
			return 0, false
		}
		k := FD{p, fd.Fd}
		if port, ok := t.listen[k]; ok {
			return port, true
		}
		if t.resolve != nil && !t.other[k] {
			t.Resolves++
			if kind, port := t.resolve(k); kind == FdListen {
				t.AddListener(k, port) // bound after the start: found now
				return port, true
			}
		}
	}
	return 0, false
}

// Handle processes one syscall exit.
func (t *Tracker) Handle(ev *Event) {
	t.Events++
	now := ev.TExit
	fd := FD{int32(ev.Pid), ev.Fd}
	switch ev.Nr {
	case nrAccept, nrAccept4:
		if ev.Ret < 0 {
			return
		}
		port, ok := t.listen[fd]
		if kp := ev.ListenPort(); kp != 0 && (!ok || kp != port) {
			// The kernel's word at the accept: right even for a process
			// gone before its /proc could be read.
			t.AddListener(fd, kp)
			port, ok = kp, true
		}
		if !ok && t.resolve != nil && !t.other[fd] {
			t.Resolves++
			if kind, p := t.resolve(fd); kind == FdListen {
				t.AddListener(fd, p)
				port, ok = p, true
			}
		}
		if !ok {
			if port, ok = t.inherited(fd); !ok {
				return
			}
			t.AddListener(fd, port)
		}
		nfd := FD{fd.Pid, int32(ev.Ret)}
		if old := t.conns[nfd]; old != nil && (old.accepted || old.firstRead != 0) {
			if prev := t.stale[nfd]; prev != nil {
				t.closeStale(nfd, prev, prev.displaced) // its close was missed
			}
			old.displaced = now
			t.stale[nfd] = old
			delete(t.conns, nfd)
		}
		delete(t.other, nfd)
		t.conns[nfd] = &conn{port: port, pid: int(fd.Pid), opened: now, accepted: true}
		t.port(port).ConnOpened++
	case nrRead, nrReadv, nrRecvfrom, nrRecvmsg:
		c := t.owner(fd, ev)
		if c == nil {
			return
		}
		switch {
		case ev.Ret > 0:
			t.onRead(c, ev)
		case ev.Ret == 0: // peer closed its side
		case -ev.Ret == eConnReset || -ev.Ret == eConnAbort:
			c.reset = true
			if c.cur != nil && c.phase == phReading {
				c.cur.aborted = "reset before the response"
			}
			t.finish(c, now)
		}
	case nrWrite, nrWritev, nrSendto, nrSendmsg, nrSendfile:
		c := t.owner(fd, ev)
		if c == nil {
			return
		}
		switch {
		case ev.Ret > 0:
			t.onWrite(c, ev)
		case -ev.Ret == ePipe || -ev.Ret == eConnReset:
			c.reset = true
			if c.cur != nil {
				c.cur.aborted = "reset during the response"
			}
			t.finish(c, now)
		}
	case nrShutdown:
		if c := t.owner(fd, ev); c != nil {
			t.finish(c, now)
			c.shut = true
		}
	case nrClose:
		if c, old := t.before(fd, ev); old {
			if c != nil {
				t.closeStale(fd, c, now)
			}
			return // not the close of the connection now at that number
		}
		if c := t.conns[fd]; c != nil {
			t.closeConn(fd, c, now)
		}
		delete(t.listen, fd)
		delete(t.other, fd)
	default:
		t.Unknown++
	}
}

func (t *Tracker) onRead(c *conn, ev *Event) {
	now := ev.TExit
	ps := t.port(c.port)
	n := uint64(ev.Ret)
	c.bytesIn += n
	ps.BytesIn += n
	data := ev.Data[:ev.Len]
	first := c.firstRead == 0
	if first {
		c.firstRead = now
		if c.accepted {
			ps.Queue.Add(now - c.opened)
		}
	}
	if c.proto == ProtoUnknown && !c.accepted {
		// Open before the start: its next bytes may be the middle of a
		// request. Sniff only reads that follow a write (or the first
		// one), each on its own, and give up after a few.
		if c.phase == phReading {
			return
		}
		c.phase = phReading
		if p, _ := Sniff(data); p != ProtoHTTP1 {
			if c.tries++; c.tries >= 4 {
				c.proto, c.note = ProtoOther, "first bytes are not an HTTP/1.x request line"
				ps.NotParsed[c.note]++
			}
			return
		}
		c.proto = ProtoHTTP1
		c.phase = phIdle
		ps.HTTPConns++
	} else if c.proto == ProtoUnknown {
		c.sniffBuf = append(c.sniffBuf, data...)
		c.proto, c.note = Sniff(c.sniffBuf)
		if c.proto == ProtoUnknown && len(c.sniffBuf) >= 16 {
			c.proto, c.note = ProtoOther, "first bytes are not an HTTP/1.x request line"
		}
		switch c.proto {
		case ProtoHTTP1:
			ps.HTTPConns++
			c.sniffBuf = nil
		case ProtoOther, ProtoTLS:
			ps.NotParsed[c.note]++
			c.sniffBuf = nil
			return
		default:
			return
		}
	} else if c.proto != ProtoHTTP1 {
		return
	}
	if c.phase == phReading && c.cur != nil {
		// More of the same request (headers or body), or the rest of a
		// request line begun in an earlier read.
		if r := c.cur; r.line != nil {
			r.line = append(r.line, data[:min(len(data), PrefixLen-len(r.line))]...)
			if bytes.IndexByte(r.line, '\n') >= 0 || len(r.line) >= PrefixLen || uint64(len(data)) < n {
				t.nameLine(c, r)
			}
		}
		return
	}
	if c.cur != nil {
		t.finish(c, now)
	}
	heads := ParseRequests(data)
	r := &request{start: now, tid: ev.Tid}
	if bytes.IndexByte(data, '\n') < 0 && uint64(len(data)) == n && len(data) < PrefixLen {
		// The whole read, and it ended inside the request line: the next
		// reads complete it.
		r.line = append([]byte(nil), data...)
		c.pending = c.pending[:0]
	} else if len(heads) > 0 {
		r.head, r.named = heads[0], true
		c.pending = append(c.pending[:0], heads[1:]...)
	} else {
		c.pending = c.pending[:0]
	}
	c.cur = r
	c.phase = phReading
}

func (t *Tracker) onWrite(c *conn, ev *Event) {
	now := ev.TExit
	ps := t.port(c.port)
	n := uint64(ev.Ret)
	c.bytesOut += n
	ps.BytesOut += n
	if c.proto == ProtoUnknown {
		c.phase = phWriting
	}
	if c.proto != ProtoHTTP1 || c.cur == nil {
		return
	}
	code, ok := ParseStatusLine(ev.Data[:ev.Len])
	if ok && code < 200 {
		return // interim (100 Continue): the request goes on
	}
	if ok {
		if c.cur.status != 0 {
			// A second response before the next read: pipelining. The next
			// request arrived in the same read as the one just answered.
			start := c.cur.start
			tid := c.cur.tid
			t.finish(c, now)
			r := &request{start: start, tid: tid}
			if len(c.pending) > 0 {
				r.head, r.named = c.pending[0], true
				c.pending = c.pending[1:]
			}
			c.cur = r
		}
		c.cur.status = code
	}
	c.cur.lastWrite = now
	c.phase = phWriting
}

// nameLine names r from its request line, read in pieces (r.line), and
// keeps the requests pipelined after it.
func (t *Tracker) nameLine(c *conn, r *request) {
	if heads := ParseRequests(r.line); len(heads) > 0 {
		r.head, r.named = heads[0], true
		c.pending = append(c.pending[:0], heads[1:]...)
	}
	r.line = nil
}

// finish ends the connection's current request.
func (t *Tracker) finish(c *conn, now uint64) {
	r := c.cur
	c.cur = nil
	c.phase = phIdle
	if r == nil {
		return
	}
	if r.line != nil {
		t.nameLine(c, r) // never whole: named by what came (a truncated line)
	}
	if r.lastWrite == 0 && r.aborted == "" {
		r.aborted = "closed without a response"
	}
	ps := t.port(c.port)
	ps.Requests++
	end := r.lastWrite
	if end == 0 {
		end = now
	}
	dur := end - min(r.start, end)
	route := OtherRoute
	if r.named {
		route = Route(r.head)
	} else {
		ps.Unnamed++
		route = "[unnamed]"
	}
	rs := ps.Routes[route]
	if rs == nil {
		if len(ps.Routes) >= MaxRoutes {
			route = OtherRoute
			rs = ps.Routes[route]
		}
		if rs == nil {
			rs = &RouteStats{}
			ps.Routes[route] = rs
		}
	}
	rs.Requests++
	ws := ps.Workers[c.pid]
	if ws == nil {
		ws = &WorkerStats{}
		ps.Workers[c.pid] = ws
	}
	ws.Requests++
	if t.Join != nil && r.tid != 0 {
		t.addSamples(r, t.Join(c.port, route, r.named, c.pid, r.tid, r.start, end))
	}
	switch {
	case r.aborted != "":
		ps.Errors++
		rs.Errors++
		ws.Errors++
		ps.Aborted[r.aborted]++
	case r.status >= 500:
		ps.Errors++
		rs.Errors++
		ws.Errors++
	case r.status >= 400:
		ps.Client4xx++
		rs.Client4xx++
		ws.Client4xx++
	}
	if r.status != 0 {
		ps.Status[r.status]++
	}
	if r.lastWrite != 0 {
		ps.Dur.Add(dur)
		rs.Dur.Add(dur)
		ws.Dur.Add(dur)
	}
	t.keepSlow(c, r, dur)
}

// preferStack: a stack the kernel saw at its instant (k samples of n
// sightings) over one only read later from user space (kernel samples of
// one request spread over many stacks, one per line: a read may repeat
// one of them more often); then the most kernel samples; then the most
// sightings.
func preferStack(k, n, bestK, bestN int) bool {
	if (k > 0) != (bestK > 0) {
		return k > 0
	}
	if k != bestK {
		return k > bestK
	}
	return n > bestN
}

func (t *Tracker) keepSlow(c *conn, r *request, dur uint64) {
	if t.slowN <= 0 || r.lastWrite == 0 {
		return
	}
	if len(t.slow) >= t.slowN && dur <= t.slow[0].Dur {
		return
	}
	t.seq++
	f := &Finished{Port: c.port, Pid: c.pid, Head: r.head, Named: r.named, Status: r.status, Start: r.start,
		Dur: dur, Aborted: r.aborted, Tid: r.tid, Reads: r.reads, Samples: r.samples, sequence: t.seq}
	for _, s := range r.stacks {
		if f.Stack == nil || preferStack(s.kernel, s.n, f.StackK, f.StackN) {
			f.Stack, f.StackN, f.StackK = s.frames, s.n, s.kernel
		}
	}
	heap.Push(&t.slow, f)
	if len(t.slow) > t.slowN {
		heap.Pop(&t.slow)
	}
}

func (t *Tracker) closeConn(fd FD, c *conn, now uint64) {
	t.finish(c, now)
	ps := t.port(c.port)
	ps.ConnClosed++
	if c.reset {
		ps.ConnResets++
	}
	if c.accepted {
		ps.ConnDur.Add(now - min(c.opened, now))
	}
	if t.conns[fd] == c {
		delete(t.conns, fd)
	}
}

// ProcessExited ends what process pid left open (its exit closed its fds
// without a close call): its connections are closed at now, its listening
// and other fds forgotten (a later process may reuse its number).
func (t *Tracker) ProcessExited(pid int, now uint64) {
	p := int32(pid)
	var fds []FD
	for fd := range t.conns {
		if fd.Pid == p {
			fds = append(fds, fd)
		}
	}
	sort.Slice(fds, func(i, j int) bool { return fds[i].Fd < fds[j].Fd })
	for _, fd := range fds {
		t.closeConn(fd, t.conns[fd], now)
	}
	for fd, c := range t.stale {
		if fd.Pid == p {
			t.closeStale(fd, c, c.displaced)
		}
	}
	for fd := range t.listen {
		if fd.Pid == p {
			delete(t.listen, fd)
		}
	}
	for fd := range t.other {
		if fd.Pid == p {
			delete(t.other, fd)
		}
	}
}

// InFlight is a request being served now.
type InFlight struct {
	Port  int
	Pid   int
	Tid   uint32
	Start uint64
	r     *request
}

// InFlight lists requests that started and are not finished (phase
// reading: no response byte written yet).
func (t *Tracker) InFlight() []InFlight {
	var out []InFlight
	for _, c := range t.conns {
		if c.cur != nil && c.phase == phReading {
			out = append(out, InFlight{Port: c.port, Pid: c.pid, Tid: c.cur.tid, Start: c.cur.start, r: c.cur})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// AddStack records one read of an in-flight request's handling thread.
func (t *Tracker) AddStack(f InFlight, key string, frames []StackFrame) {
	r := f.r
	r.reads++
	if key == "" {
		return
	}
	if s := r.addStack(key, frames); s != nil {
		s.n++
	}
}

// addSamples counts a request's kernel samples by stack.
func (t *Tracker) addSamples(r *request, ss []SampledStack) {
	for _, x := range ss {
		r.samples += x.N
		if x.Key == "" {
			continue
		}
		s := r.addStack(x.Key, x.Frames)
		if s != nil {
			s.n += x.N
			s.kernel += x.N
		}
	}
}

// addStack is the request's entry for a stack (nil past the bound).
func (r *request) addStack(key string, frames []StackFrame) *stackSeen {
	if r.stacks == nil {
		r.stacks = map[string]*stackSeen{}
	}
	s := r.stacks[key]
	if s == nil {
		if len(r.stacks) >= 16 { // bound per request
			return nil
		}
		s = &stackSeen{frames: append([]StackFrame(nil), frames...)}
		r.stacks[key] = s
	}
	return s
}

// FlushResponded ends requests whose response has been written (the next
// read would have ended them): called at the end of a window.
func (t *Tracker) FlushResponded(now uint64) {
	for _, c := range t.conns {
		if c.cur != nil && c.phase == phWriting {
			t.finish(c, now)
		}
	}
}

// TakeWindow returns the window's per-port stats and starts new ones;
// in-flight counts are of now.
func (t *Tracker) TakeWindow() (ports []*PortStats, inflight map[int]int, open map[int]int) {
	inflight, open = map[int]int{}, map[int]int{}
	for _, c := range t.conns {
		open[c.port]++
		if c.cur != nil && c.phase == phReading {
			inflight[c.port]++
		}
	}
	for p := range t.ports {
		ports = append(ports, t.ports[p])
		t.ports[p] = newPortStats(p)
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i].Port < ports[j].Port })
	return ports, inflight, open
}

// Slowest returns the slowest requests kept, slowest first.
func (t *Tracker) Slowest() []*Finished {
	out := append([]*Finished(nil), t.slow...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Dur != out[j].Dur {
			return out[i].Dur > out[j].Dur
		}
		return out[i].sequence < out[j].sequence
	})
	return out
}

// ResetSlowest empties the slowest list (live mode: per interval).
func (t *Tracker) ResetSlowest() { t.slow = t.slow[:0] }

type slowHeap []*Finished

func (h slowHeap) Len() int           { return len(h) }
func (h slowHeap) Less(i, j int) bool { return h[i].Dur < h[j].Dur }
func (h slowHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *slowHeap) Push(x any)        { *h = append(*h, x.(*Finished)) }
func (h *slowHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
