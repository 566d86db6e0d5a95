package procfs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// NetTCPSocket is one line of /proc/PID/net/tcp or tcp6 (the sockets of the
// process's network namespace).
type NetTCPSocket struct {
	Inode     uint64
	LocalPort int
	State     uint8 // TCP_* (include/net/tcp_states.h): 1 established, 10 listen
}

// TCP states the callers ask about.
const (
	TCPEstablished = 0x01
	TCPListen      = 0x0A
)

// ParseNetTCP reads a tcp or tcp6 table (after its header line) into
// inode → socket. Lines it cannot read and sockets without an inode (in
// TIME_WAIT) are skipped: the table changes under the reader.
func ParseNetTCP(b []byte, into map[uint64]NetTCPSocket) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	first := true
	for sc.Scan() {
		if first { // header
			first = false
			continue
		}
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
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
		st, err := strconv.ParseUint(f[3], 16, 8)
		if err != nil {
			continue
		}
		ino, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil || ino == 0 {
			continue
		}
		into[ino] = NetTCPSocket{Inode: ino, LocalPort: int(port), State: uint8(st)}
	}
}

// NetTCP reads net/tcp and net/tcp6 as pid sees them. The error is the
// last file that could not be read; the map holds what could.
func (f FS) NetTCP(pid int) (map[uint64]NetTCPSocket, error) {
	out := map[uint64]NetTCPSocket{}
	var last error
	for _, name := range []string{"tcp", "tcp6"} {
		path := f.pidPath(pid, "net", name)
		b, err := os.ReadFile(path)
		if err != nil {
			last = fmt.Errorf("pid %d: can't read %s: %w", pid, path, err)
			continue
		}
		ParseNetTCP(b, out)
	}
	return out, last
}
