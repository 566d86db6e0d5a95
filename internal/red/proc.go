package red

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/procfs"
)

// procSockets resolves one process's fds from procfs: the fd links and
// the net/tcp{,6} tables of its network namespace.
type procSockets struct {
	pid     int
	fs      procfs.FS
	socks   map[uint64]procfs.NetTCPSocket
	ports   map[int]bool // the observed processes' listening ports
	Reads   int          // table reads
	lastErr error
}

func newProcSockets(pid int) *procSockets {
	return &procSockets{pid: pid, fs: procfs.Default(), ports: map[int]bool{}}
}

// setSockets are the procSockets of every observed process; they share
// the listening ports (a socket inherited across fork is one port).
type setSockets struct {
	by    map[int]*procSockets
	ports map[int]bool
}

func newSetSockets() *setSockets {
	return &setSockets{by: map[int]*procSockets{}, ports: map[int]bool{}}
}

// of is pid's resolver.
func (s *setSockets) of(pid int) *procSockets {
	p := s.by[pid]
	if p == nil {
		p = newProcSockets(pid)
		p.ports = s.ports
		s.by[pid] = p
	}
	return p
}

// forget drops an exited process's resolver.
func (s *setSockets) forget(pid int) { delete(s.by, pid) }

// Resolve is the Tracker's Resolver.
func (s *setSockets) Resolve(fd FD) (FdKind, int) { return s.of(int(fd.Pid)).Resolve(fd.Fd) }

func (p *procSockets) reload() {
	p.Reads++
	socks, err := p.fs.NetTCP(p.pid)
	if err != nil {
		p.lastErr = err
	}
	p.socks = socks
}

func (p *procSockets) inode(fd int32) (uint64, bool) {
	l, err := p.fs.FdLink(p.pid, int(fd))
	if err != nil || !strings.HasPrefix(l, "socket:[") || !strings.HasSuffix(l, "]") {
		return 0, false
	}
	ino, err := strconv.ParseUint(l[len("socket:["):len(l)-1], 10, 64)
	return ino, err == nil
}

// Resolve tells what fd is.
func (p *procSockets) Resolve(fd int32) (FdKind, int) {
	ino, ok := p.inode(fd)
	if !ok {
		return FdOther, 0
	}
	si, ok := p.socks[ino]
	if !ok {
		p.reload()
		if si, ok = p.socks[ino]; !ok {
			// Not in the table: not TCP, gone already, or skipped by a
			// read of the table while it changed (it does under load).
			if si, ok = p.ask(fd, ino); !ok {
				return FdOther, 0
			}
		}
	}
	switch {
	case si.State == procfs.TCPListen:
		p.ports[si.LocalPort] = true
		return FdListen, si.LocalPort
	case si.State == procfs.TCPEstablished && p.ports[si.LocalPort]:
		return FdConn, si.LocalPort
	}
	return FdOther, 0
}

// Scan lists the target's listening sockets and the connections open on
// their ports now.
func (p *procSockets) Scan() (listeners, conns map[int32]int, err error) {
	p.reload()
	fds, err := p.fs.Fds(p.pid)
	if err != nil {
		return nil, nil, fmt.Errorf("red: %w", err)
	}
	listeners, conns = map[int32]int{}, map[int32]int{}
	type fdIno struct {
		fd  int32
		ino uint64
	}
	var socks []fdIno
	for _, n := range fds {
		if ino, ok := p.inode(int32(n)); ok {
			socks = append(socks, fdIno{int32(n), ino})
		}
	}
	if p.socks == nil {
		p.socks = map[uint64]procfs.NetTCPSocket{}
	}
	for _, s := range socks {
		if _, ok := p.socks[s.ino]; !ok {
			if si, ok := p.ask(s.fd, s.ino); ok {
				p.socks[s.ino] = si // the table's read missed it
			}
		}
		if si, ok := p.socks[s.ino]; ok && si.State == procfs.TCPListen {
			listeners[s.fd] = si.LocalPort
			p.ports[si.LocalPort] = true
		}
	}
	for _, s := range socks {
		if si, ok := p.socks[s.ino]; ok && si.State == procfs.TCPEstablished && p.ports[si.LocalPort] {
			conns[s.fd] = si.LocalPort
		}
	}
	return listeners, conns, nil
}

// ask reads what a socket is from the socket itself: a duplicate of the
// process's fd (pidfd_getfd, as root) asked whether it listens
// (SO_ACCEPTCONN), its family and type, and its local port; closed at
// once (the process's socket is not touched). For a socket the net/tcp
// table did not show.
func (p *procSockets) ask(fd int32, ino uint64) (procfs.NetTCPSocket, bool) {
	pfd, err := unix.PidfdOpen(p.pid, 0)
	if err != nil {
		return procfs.NetTCPSocket{}, false
	}
	defer unix.Close(pfd)
	d, err := unix.PidfdGetfd(pfd, int(fd), 0)
	if err != nil {
		return procfs.NetTCPSocket{}, false
	}
	defer unix.Close(d)
	if typ, err := unix.GetsockoptInt(d, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_STREAM {
		return procfs.NetTCPSocket{}, false
	}
	var st unix.Stat_t
	if err := unix.Fstat(d, &st); err != nil || st.Ino != ino {
		return procfs.NetTCPSocket{}, false // the fd is another socket by now
	}
	sa, err := unix.Getsockname(d)
	if err != nil {
		return procfs.NetTCPSocket{}, false
	}
	var port int
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		port = a.Port
	case *unix.SockaddrInet6:
		port = a.Port
	default:
		return procfs.NetTCPSocket{}, false
	}
	si := procfs.NetTCPSocket{Inode: ino, LocalPort: port}
	if acc, err := unix.GetsockoptInt(d, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err == nil && acc == 1 {
		si.State = procfs.TCPListen
	} else if _, err := unix.Getpeername(d); err == nil {
		si.State = procfs.TCPEstablished
	}
	return si, true
}
