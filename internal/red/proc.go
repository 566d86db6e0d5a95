package red

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// sockInfo is one line of /proc/PID/net/tcp{,6}.
type sockInfo struct {
	port   int
	listen bool
	estab  bool
}

// parseNetTCP reads a /proc/net/tcp or tcp6 table: inode → local port and
// state (0A listen, 01 established).
func parseNetTCP(b []byte, into map[uint64]sockInfo) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	first := true
	for sc.Scan() {
		if first { // header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			continue
		}
		_, ps, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		port, err := strconv.ParseUint(ps, 16, 16)
		if err != nil {
			continue
		}
		ino, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil || ino == 0 {
			continue
		}
		into[ino] = sockInfo{port: int(port), listen: f[3] == "0A", estab: f[3] == "01"}
	}
}

// procSockets resolves the target's fds from /proc.
type procSockets struct {
	pid     int
	socks   map[uint64]sockInfo
	ports   map[int]bool // the target's listening ports
	Reads   int          // table reads
	lastErr error
}

func newProcSockets(pid int) *procSockets {
	return &procSockets{pid: pid, ports: map[int]bool{}}
}

func (p *procSockets) reload() {
	p.Reads++
	socks := map[uint64]sockInfo{}
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", p.pid, f))
		if err != nil {
			p.lastErr = err
			continue
		}
		parseNetTCP(b, socks)
	}
	p.socks = socks
}

func (p *procSockets) inode(fd int32) (uint64, bool) {
	l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", p.pid, fd))
	if err != nil || !strings.HasPrefix(l, "socket:[") || !strings.HasSuffix(l, "]") {
		return 0, false
	}
	ino, err := strconv.ParseUint(l[len("socket:["):len(l)-1], 10, 64)
	return ino, err == nil
}

// Resolve is the Tracker's Resolver.
func (p *procSockets) Resolve(fd int32) (FdKind, int) {
	ino, ok := p.inode(fd)
	if !ok {
		return FdOther, 0
	}
	si, ok := p.socks[ino]
	if !ok {
		p.reload()
		if si, ok = p.socks[ino]; !ok {
			return FdOther, 0 // a unix or UDP socket, or gone already
		}
	}
	switch {
	case si.listen:
		p.ports[si.port] = true
		return FdListen, si.port
	case si.estab && p.ports[si.port]:
		return FdConn, si.port
	}
	return FdOther, 0
}

// Scan lists the target's listening sockets and the connections open on
// their ports now.
func (p *procSockets) Scan() (listeners, conns map[int32]int, err error) {
	p.reload()
	dir := fmt.Sprintf("/proc/%d/fd", p.pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("red: list %s: %w", dir, err)
	}
	listeners, conns = map[int32]int{}, map[int32]int{}
	type fdIno struct {
		fd  int32
		ino uint64
	}
	var socks []fdIno
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ino, ok := p.inode(int32(n)); ok {
			socks = append(socks, fdIno{int32(n), ino})
		}
	}
	for _, s := range socks {
		if si, ok := p.socks[s.ino]; ok && si.listen {
			listeners[s.fd] = si.port
			p.ports[si.port] = true
		}
	}
	for _, s := range socks {
		if si, ok := p.socks[s.ino]; ok && si.estab && p.ports[si.port] {
			conns[s.fd] = si.port
		}
	}
	return listeners, conns, nil
}
