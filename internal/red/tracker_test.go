package red

import (
	"testing"
)

// evs builds syscall exits for the tracker: times in ms.
type evs struct {
	tr *Tracker
	t  uint64
}

func (e *evs) at(ms uint64) *evs { e.t = ms * 1e6; return e }

func (e *evs) ev(nr uint32, fd int32, ret int64, data string) *evs {
	return e.evp(0, nr, fd, ret, data)
}

// evp is ev in process pid (its main thread).
func (e *evs) evp(pid uint32, nr uint32, fd int32, ret int64, data string) *evs {
	return e.evt(0, pid, nr, fd, ret, data)
}

// evt is evp whose syscall began at enter ms (0: its entry was not seen).
func (e *evs) evt(enter, pid uint32, nr uint32, fd int32, ret int64, data string) *evs {
	tid := pid
	if tid == 0 {
		tid = 7
	}
	ev := Event{TEnter: uint64(enter) * 1e6, TExit: e.t, Nr: nr, Fd: fd, Ret: ret, Tid: tid, Pid: pid}
	ev.Len = uint16(copy(ev.Data[:], data))
	e.tr.Handle(&ev)
	return e
}

func newEvs(slowest int) *evs {
	tr := NewTracker(func(fd FD) (FdKind, int) {
		if fd.Fd == 9 {
			return FdConn, 80 // a connection open before the start
		}
		return FdOther, 0
	}, slowest)
	tr.AddListener(FD{Fd: 3}, 80)
	return &evs{tr: tr}
}

func port80(t *testing.T, tr *Tracker) *PortStats {
	tr.FlushResponded(1 << 62)
	ps, _, _ := tr.TakeWindow()
	for _, p := range ps {
		if p.Port == 80 {
			return p
		}
	}
	t.Fatal("no port 80")
	return nil
}

// TestTrackerKeepAlive: two requests on one connection, each from its first
// read to its last write; the second read ends the first request.
func TestTrackerKeepAlive(t *testing.T) {
	e := newEvs(2)
	e.at(0).ev(nrAccept4, 3, 5, "")
	e.at(1).ev(nrRecvfrom, 5, 40, "GET /a/1 HTTP/1.1\r\nHost: x\r\n\r\n")
	e.at(3).ev(nrSendto, 5, 100, "HTTP/1.1 200 OK\r\n")
	e.at(4).ev(nrSendto, 5, 3, "ok\n")
	e.at(10).ev(nrRecvfrom, 5, 40, "GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	e.at(30).ev(nrWrite, 5, 100, "HTTP/1.1 503 Busy\r\n")
	e.at(40).ev(nrRecvfrom, 5, 0, "")
	e.at(41).ev(nrClose, 5, 0, "")
	e.at(42).ev(nrWrite, 1, 10, "HTTP/1.1 200 log line") // stdout: not a connection
	p := port80(t, e.tr)
	if p.Requests != 2 || p.Errors != 1 || p.Status[200] != 1 || p.Status[503] != 1 {
		t.Fatalf("%+v", p)
	}
	if p.Dur.Max != 20e6 || p.Dur.Min != 3e6 {
		t.Errorf("durations min %d max %d, want 3ms and 20ms", p.Dur.Min, p.Dur.Max)
	}
	if p.Queue.N != 1 || p.Queue.Max != 1e6 || p.ConnOpened != 1 || p.ConnClosed != 1 || p.ConnDur.Max != 41e6 {
		t.Errorf("queue %+v conns %d/%d dur %d", p.Queue.N, p.ConnOpened, p.ConnClosed, p.ConnDur.Max)
	}
	if p.Routes["GET /a/:id"] == nil || p.Routes["GET /b"].Errors != 1 {
		t.Errorf("routes %v", p.Routes)
	}
	s := e.tr.Slowest()
	if len(s) != 2 || s[0].Head.Target != "/b" || s[0].Dur != 20e6 {
		t.Errorf("slowest %+v", s)
	}
}

// TestTrackerSplitRequestLine: a client that sends its request line in
// pieces (each read ending inside it) is named by the whole line, not by
// its first read's start; a line that never completes is named by what
// came.
func TestTrackerSplitRequestLine(t *testing.T) {
	e := newEvs(0)
	e.at(0).ev(nrAccept4, 3, 5, "")
	e.at(1).ev(nrRecvfrom, 5, 8, "GET /spl")
	e.at(2).ev(nrRecvfrom, 5, 6, "it/1 H")
	e.at(3).ev(nrRecvfrom, 5, 22, "TTP/1.1\r\nHost: x\r\n\r\n")
	e.at(5).ev(nrSendto, 5, 100, "HTTP/1.1 200 OK\r\n")
	e.at(6).ev(nrRecvfrom, 5, 9, "GET /half")
	e.at(7).ev(nrSendto, 5, 100, "HTTP/1.1 200 OK\r\n")
	e.at(8).ev(nrClose, 5, 0, "")
	p := port80(t, e.tr)
	if p.Requests != 2 || p.Routes["GET /split/:id"] == nil || p.Routes["GET /half"] == nil {
		t.Fatalf("requests %d routes %v: want GET /split/:id and GET /half", p.Requests, p.Routes)
	}
	if p.Dur.Max != 4e6 {
		t.Errorf("longest %d ns, want 4 ms (from the line's first piece)", p.Dur.Max)
	}
}

// TestTrackerPipelined: three requests in one read are answered by three
// status lines; each response splits a request.
func TestTrackerPipelined(t *testing.T) {
	e := newEvs(0)
	e.at(0).ev(nrAccept, 3, 6, "")
	e.at(1).ev(nrRead, 6, 90, "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\nGET /c HTTP/1.1\r\n\r\n")
	e.at(2).ev(nrWrite, 6, 40, "HTTP/1.1 200 OK\r\n")
	e.at(3).ev(nrWrite, 6, 40, "HTTP/1.1 404 No\r\n")
	e.at(5).ev(nrWrite, 6, 40, "HTTP/1.1 200 OK\r\n")
	e.at(6).ev(nrClose, 6, 0, "")
	p := port80(t, e.tr)
	if p.Requests != 3 || p.Client4xx != 1 || p.Routes["GET /b"].Client4xx != 1 || p.Routes["GET /c"] == nil {
		t.Fatalf("requests %d 4xx %d routes %v", p.Requests, p.Client4xx, p.Routes)
	}
	if p.Dur.Max != 4e6 {
		t.Errorf("last pipelined request took %d, want 4ms (from the shared read)", p.Dur.Max)
	}
}

// TestTrackerErrors: a reset during the response, a close without a
// response, and a reset while the request is being read are errors; a
// reset after a complete response is not.
func TestTrackerErrors(t *testing.T) {
	e := newEvs(0)
	e.at(0).ev(nrAccept4, 3, 5, "").ev(nrAccept4, 3, 6, "").ev(nrAccept4, 3, 7, "").ev(nrAccept4, 3, 8, "")
	e.at(1).ev(nrRecvfrom, 5, 30, "GET /big HTTP/1.1\r\n\r\n").ev(nrSendto, 5, 65536, "HTTP/1.1 200 OK\r\n")
	e.at(2).ev(nrSendto, 5, -ePipe, "")
	e.at(2).ev(nrRecvfrom, 6, 30, "GET /x HTTP/1.1\r\n\r\n")
	e.at(3).ev(nrClose, 6, 0, "")
	e.at(2).ev(nrRecvfrom, 7, 30, "GET /y HTTP/1.1\r\n\r\n")
	e.at(3).ev(nrRecvfrom, 7, -eConnReset, "")
	e.at(2).ev(nrRecvfrom, 8, 30, "GET /z HTTP/1.1\r\n\r\n").ev(nrSendto, 8, 40, "HTTP/1.1 200 OK\r\n")
	e.at(3).ev(nrRecvfrom, 8, -eConnReset, "").ev(nrRecvfrom, 8, -eAgain, "")
	p := port80(t, e.tr)
	if p.Requests != 4 || p.Errors != 3 {
		t.Fatalf("requests %d errors %d (%v)", p.Requests, p.Errors, p.Aborted)
	}
	for _, why := range []string{"reset during the response", "closed without a response", "reset before the response"} {
		if p.Aborted[why] != 1 {
			t.Errorf("%q: %d (%v)", why, p.Aborted[why], p.Aborted)
		}
	}
}

// TestTrackerOther: non-HTTP connections get bytes and the note; an fd
// unknown at the start is resolved once and followed.
func TestTrackerOther(t *testing.T) {
	e := newEvs(0)
	e.at(0).ev(nrAccept4, 3, 5, "")
	e.at(1).ev(nrRecvfrom, 5, 11, "hello echo\n").ev(nrSendto, 5, 11, "hello echo\n")
	e.at(2).ev(nrClose, 5, 0, "")
	e.at(3).ev(nrRecvfrom, 9, 20, "GET / HTTP/1.1\r\n\r\n").ev(nrSendto, 9, 20, "HTTP/1.1 200 OK\r\n")
	e.at(4).ev(nrRecvfrom, 10, 20, "GET / HTTP/1.1\r\n\r\n").ev(nrRecvfrom, 10, 20, "x")
	p := port80(t, e.tr)
	if p.BytesIn != 31 || p.BytesOut != 31 || p.NotParsed["first bytes are not an HTTP/1.x request line"] != 1 {
		t.Errorf("bytes %d/%d not parsed %v", p.BytesIn, p.BytesOut, p.NotParsed)
	}
	if p.Requests != 1 || p.HTTPConns != 1 || e.tr.Resolves != 2 {
		t.Errorf("requests %d http conns %d resolves %d", p.Requests, p.HTTPConns, e.tr.Resolves)
	}
}

// TestTrackerCloseReadLate: a handler thread's close frees fd 5, the
// accept in the main thread takes it, and the close's exit is written to
// the ring after the accept's and the new connection's first read (seen in
// a ThreadingTCPServer under a CPU hog). The late close ends the first
// connection, not the second, whose bytes all count. A displaced
// connection whose close is not read is closed by CloseStale at the
// accept that took its number.
func TestTrackerCloseReadLate(t *testing.T) {
	e := newEvs(0)
	e.at(10).ev(nrAccept4, 3, 5, "")
	e.at(11).evt(11, 0, nrRecvfrom, 5, 11, "hello echo\n").evt(11, 0, nrSendto, 5, 11, "hello echo\n")
	e.at(12).evt(12, 0, nrRecvfrom, 5, 0, "")
	e.at(20).evt(14, 0, nrAccept4, 3, 5, "")               // the number freed at 13
	e.at(21).evt(20, 0, nrRecvfrom, 5, 11, "hello echo\n") // the new connection's
	e.at(22).evt(13, 0, nrClose, 5, 0, "")                 // the first's close, read late
	e.at(23).evt(23, 0, nrSendto, 5, 11, "hello echo\n")
	e.at(24).evt(24, 0, nrClose, 5, 0, "")
	e.at(30).evt(30, 0, nrAccept4, 3, 5, "")
	e.at(31).evt(31, 0, nrRecvfrom, 5, 5, "hello")
	e.at(40).evt(39, 0, nrAccept4, 3, 5, "") // the close before it was lost
	e.at(41).evt(41, 0, nrClose, 5, 0, "")
	p := port80(t, e.tr)
	if p.ConnOpened != 4 || p.ConnClosed != 3 || p.BytesIn != 27 || p.BytesOut != 22 {
		t.Errorf("opened %d closed %d in %d out %d; want 4, 3, 27, 22", p.ConnOpened, p.ConnClosed, p.BytesIn, p.BytesOut)
	}
	// Durations: 12 (closed at 22), 4, and 1 (the fourth); the third
	// waits for its close until CloseStale, then ends at 40.
	if p.ConnDur.N != 3 || p.ConnDur.Max != 12e6 || p.ConnDur.Min != 1e6 {
		t.Errorf("connection durations n %d min %d max %d; want 3, 1 ms, 12 ms", p.ConnDur.N, p.ConnDur.Min, p.ConnDur.Max)
	}
	e.tr.CloseStale(40e6) // displaced at 40: not before the cutoff
	e.tr.CloseStale(41e6)
	ps, _, open := e.tr.TakeWindow()
	if len(ps) != 1 || ps[0].ConnClosed != 1 || ps[0].ConnDur.Max != 10e6 || open[80] != 0 {
		t.Fatalf("after CloseStale: %d ports, closed %d (want 1, after 10 ms), %d open", len(ps), ps[0].ConnClosed, open[80])
	}
	e.at(50).evt(49, 0, nrAccept4, 3, 5, "")
	e.at(51).evt(40, 0, nrClose, 5, 0, "") // the third's, after CloseStale
	if ps, _, open := e.tr.TakeWindow(); ps[0].ConnClosed != 0 || open[80] != 1 {
		t.Errorf("a close begun before the accept closed %d connections (%d open)", ps[0].ConnClosed, open[80])
	}
}

// TestTrackerRoutesBounded: beyond MaxRoutes distinct routes, [other].
func TestTrackerRoutesBounded(t *testing.T) {
	e := newEvs(0)
	e.at(0).ev(nrAccept4, 3, 5, "")
	for i := 0; i < MaxRoutes+10; i++ {
		e.at(uint64(2*i+1)).ev(nrRecvfrom, 5, 30, "GET /r"+string(rune('a'+i%26))+string(rune('a'+i/26))+" HTTP/1.1\r\n\r\n")
		e.at(uint64(2*i+2)).ev(nrSendto, 5, 30, "HTTP/1.1 200 OK\r\n")
	}
	p := port80(t, e.tr)
	// MaxRoutes named routes plus [other] holding the 10 beyond them.
	if o := p.Routes[OtherRoute]; len(p.Routes) != MaxRoutes+1 || o == nil || o.Requests != 10 || p.Requests != MaxRoutes+10 {
		t.Errorf("%d routes, %d requests", len(p.Routes), p.Requests)
	}
}

// TestTrackerMidStream: a connection open before the start whose first read
// is the middle of a request body starts no request; the next request line
// after a response does. A 100 Continue does not end a request.
func TestTrackerMidStream(t *testing.T) {
	e := newEvs(0)
	e.tr.AddConn(FD{Fd: 4}, 80, 0)
	e.at(1).ev(nrRecvfrom, 4, 50, "xxxxxxxxxxxxxxxxxxxx body bytes")
	e.at(2).ev(nrSendto, 4, 40, "HTTP/1.1 200 OK\r\n")
	e.at(3).ev(nrRecvfrom, 4, 40, "POST /up HTTP/1.1\r\nExpect: 100-continue\r\n\r\n")
	e.at(4).ev(nrSendto, 4, 25, "HTTP/1.1 100 Continue\r\n\r\n")
	e.at(5).ev(nrRecvfrom, 4, 100, "body body body")
	e.at(9).ev(nrSendto, 4, 40, "HTTP/1.1 201 Created\r\n")
	p := port80(t, e.tr)
	if p.Requests != 1 || p.Status[201] != 1 || p.Routes["POST /up"] == nil || p.Dur.Max != 6e6 || p.HTTPConns != 1 {
		t.Errorf("requests %d status %v routes %v dur %d", p.Requests, p.Status, p.Routes, p.Dur.Max)
	}
}

// TestTrackerJoin: at each request's end the joiner is asked for the
// samples of its thread over [first byte read, last byte written], with
// the route; kernel samples and stack reads of one stack add up, and the
// slowest entry keeps the stack seen most, saying the kernel saw it.
func TestTrackerJoin(t *testing.T) {
	e := newEvs(2)
	type call struct {
		port       int
		route      string
		named      bool
		tid        uint32
		start, end uint64
	}
	var calls []call
	slow := []StackFrame{{Function: "compute", File: "a.py", Line: 3}, {Function: "slow_handler", File: "a.py", Line: 9}}
	e.tr.Join = func(port int, route string, named bool, pid int, tid uint32, start, end uint64) []SampledStack {
		calls = append(calls, call{port, route, named, tid, start, end})
		if route == "GET /slow/:id" {
			return []SampledStack{{Key: "slow", Frames: slow, N: 5}, {Key: "other", Frames: slow[1:], N: 2}, {N: 1}}
		}
		return nil
	}
	e.at(0).ev(nrAccept4, 3, 5, "")
	e.at(1).ev(nrRecvfrom, 5, 40, "GET /slow/1 HTTP/1.1\r\nHost: x\r\n\r\n")
	e.at(60).ev(nrSendto, 5, 100, "HTTP/1.1 200 OK\r\n")
	e.at(70).ev(nrRecvfrom, 5, 40, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
	e.at(71).ev(nrSendto, 5, 100, "HTTP/1.1 200 OK\r\n")
	e.at(80).ev(nrClose, 5, 0, "")
	want := []call{{80, "GET /slow/:id", true, 7, 1e6, 60e6}, {80, "GET /ok", true, 7, 70e6, 71e6}}
	if len(calls) != 2 || calls[0] != want[0] || calls[1] != want[1] {
		t.Fatalf("join calls %+v, want %+v", calls, want)
	}
	s := e.tr.Slowest()
	if len(s) != 2 || s[0].Samples != 8 || s[0].StackN != 5 || s[0].StackK != 5 || len(s[0].Stack) != 2 || s[0].Stack[1].Function != "slow_handler" {
		t.Fatalf("slowest %+v", s)
	}
	if s[1].Samples != 0 || s[1].Stack != nil {
		t.Errorf("fast request %+v", s[1])
	}
}

// TestTrackerWorkers: two workers of a prefork server accept on the
// listening socket they inherited (the same fd number, the same port) and
// get the same connection fd numbers, interleaved: their requests never
// mix, each is counted for the worker that accepted it, and a worker's
// exit ends what it left open.
func TestTrackerWorkers(t *testing.T) {
	listen := map[int32]bool{101: true, 102: true}
	tr := NewTracker(func(fd FD) (FdKind, int) {
		if listen[fd.Pid] && fd.Fd == 3 {
			return FdListen, 8000 // inherited across fork: found in /proc
		}
		return FdOther, 0
	}, 0)
	e := &evs{tr: tr}
	e.at(0).evp(101, nrAccept4, 3, 5, "")
	e.at(1).evp(102, nrAccept4, 3, 5, "")
	e.at(2).evp(101, nrRead, 5, 30, "GET /a HTTP/1.1\r\n\r\n")
	e.at(3).evp(102, nrRead, 5, 30, "GET /b HTTP/1.1\r\n\r\n")
	e.at(5).evp(102, nrWrite, 5, 30, "HTTP/1.1 500 Oops\r\n")
	e.at(6).evp(102, nrClose, 5, 0, "")
	e.at(9).evp(101, nrWrite, 5, 30, "HTTP/1.1 200 OK\r\n")
	e.at(10).evp(101, nrClose, 5, 0, "")
	e.at(11).evp(102, nrAccept4, 3, 6, "")
	e.at(12).evp(102, nrRead, 6, 30, "GET /c HTTP/1.1\r\n\r\n")
	e.at(13).evp(102, nrWrite, 6, 30, "HTTP/1.1 404 No\r\n")
	tr.ProcessExited(102, 20e6) // exited without closing fd 6
	ps, _, open := tr.TakeWindow()
	if len(ps) != 1 || ps[0].Port != 8000 {
		t.Fatalf("ports %+v", ps)
	}
	p := ps[0]
	w1, w2 := p.Workers[101], p.Workers[102]
	if p.Requests != 3 || p.Errors != 1 || p.Client4xx != 1 || w1 == nil || w2 == nil || open[8000] != 0 {
		t.Fatalf("requests %d errors %d 4xx %d workers %v open %v", p.Requests, p.Errors, p.Client4xx, p.Workers, open)
	}
	if w1.Requests != 1 || w1.Errors != 0 || w1.Dur.Max != 7e6 || w2.Requests != 2 || w2.Errors != 1 || w2.Client4xx != 1 || w2.Dur.Max != 2e6 {
		t.Errorf("worker 101 %+v, worker 102 %+v", *w1, *w2)
	}
	if p.ConnOpened != 3 || p.ConnClosed != 3 {
		t.Errorf("connections opened %d closed %d", p.ConnOpened, p.ConnClosed)
	}
}

// TestTrackerInherited: a worker that exited before its events were read
// (/proc no longer resolves its fds) accepted on the listening socket its
// parent had at that number.
func TestTrackerInherited(t *testing.T) {
	tr := NewTracker(func(fd FD) (FdKind, int) {
		if fd == (FD{100, 3}) {
			return FdListen, 8000 // the parent is alive: /proc has it
		}
		return FdOther, 0
	}, 0)
	tr.Parent = func(pid int32) int32 {
		return map[int32]int32{101: 100, 102: 101}[pid]
	}
	e := &evs{tr: tr}
	e.at(0).evp(102, nrAccept4, 3, 5, "") // a grandchild
	e.at(1).evp(102, nrRead, 5, 30, "GET /a HTTP/1.1\r\n\r\n")
	e.at(2).evp(102, nrWrite, 5, 30, "HTTP/1.1 200 OK\r\n")
	e.at(3).evp(102, nrClose, 5, 0, "")
	e.at(4).evp(103, nrAccept4, 3, 5, "") // no known parent: not a listener
	ps, _, _ := tr.TakeWindow()
	if len(ps) != 1 || ps[0].Requests != 1 || ps[0].Workers[102] == nil || ps[0].ConnOpened != 1 {
		t.Fatalf("ports %+v", ps)
	}
}

// TestTrackerAcceptPort: an accept on an fd nobody resolved (its process
// gone before /proc was read) is counted under the port the kernel read
// at the accept.
func TestTrackerAcceptPort(t *testing.T) {
	tr := NewTracker(func(FD) (FdKind, int) { return FdOther, 0 }, 0)
	ev := Event{TExit: 1e6, Nr: nrAccept4, Fd: 4, Ret: 6, Tid: 9, Pid: 9, Flags: evPort}
	ev.Data[0], ev.Data[1] = 0x90, 0x1f // 8080
	tr.Handle(&ev)
	e := &evs{tr: tr}
	e.at(2).evp(9, nrRecvfrom, 6, 40, "GET /a/1 HTTP/1.1\r\nHost: x\r\n\r\n")
	e.at(3).evp(9, nrSendto, 6, 100, "HTTP/1.1 200 OK\r\n")
	e.at(4).evp(9, nrClose, 6, 0, "")
	tr.FlushResponded(1 << 62)
	ps, _, _ := tr.TakeWindow()
	if len(ps) != 1 || ps[0].Port != 8080 || ps[0].Requests != 1 {
		t.Fatalf("ports %+v, want one request on 8080", ps)
	}
}

// TestTrackerKernelSaysFile: a file read at fd 9 — whose number /proc,
// asked later, gives as a connection (the resolver's answer here) — and
// closed, then an accept that takes 9: with the kernel's word that 9 was
// a file at the read and the close, nothing is resolved, no connection is
// closed that was not opened, and the file's bytes are not counted.
func TestTrackerKernelSaysFile(t *testing.T) {
	e := newEvs(0)
	file := func(nr uint32, fd int32, ret int64, data string) {
		ev := Event{TExit: e.t, Nr: nr, Fd: fd, Ret: ret, Tid: 7, Flags: evKind}
		ev.Len = uint16(copy(ev.Data[:], data))
		e.tr.Handle(&ev)
	}
	e.at(1)
	file(nrRead, 9, 4, "data")
	file(nrClose, 9, 0, "")
	e.at(2).ev(nrAccept4, 3, 9, "")
	sock := Event{TExit: 3e6, Nr: nrRecvfrom, Fd: 9, Ret: 5, Tid: 7, Flags: evKind | evSock}
	sock.Len = uint16(copy(sock.Data[:], "hello"))
	e.tr.Handle(&sock)
	e.at(4).ev(nrClose, 9, 0, "")
	p := port80(t, e.tr)
	if p.ConnOpened != 1 || p.ConnClosed != 1 || p.BytesIn != 5 || e.tr.Resolves != 0 {
		t.Errorf("opened %d closed %d bytes in %d resolves %d; want 1, 1, 5, 0", p.ConnOpened, p.ConnClosed, p.BytesIn, e.tr.Resolves)
	}
}
