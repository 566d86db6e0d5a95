package red

import (
	"bytes"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/testutil"
)

// TestProbeSelf: the kernel side on this test process: an accept returns
// the connection's fd from the listening fd, a read carries the first
// bytes the peer sent, a 300-byte write carries exactly its first 128,
// and close is seen; nothing is dropped.
func TestProbeSelf(t *testing.T) {
	testutil.RequireRoot(t)
	p, err := openProbe(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	req := "GET /probe HTTP/1.1\r\n\r\n"
	resp := strings.Repeat("R", 300)
	done := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- err
			return
		}
		b := make([]byte, 100)
		_, err = c.Read(b)
		if err == nil {
			_, err = c.Write([]byte(resp))
		}
		c.Close()
		done <- err
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c.Close()
	var accepted int32 = -1
	var sawReq, sawResp, sawClose bool
	var ev Event
	for {
		ok, err := p.read(time.Now().Add(300*time.Millisecond), &ev)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		switch {
		case (ev.Nr == nrAccept4 || ev.Nr == nrAccept) && ev.Ret > 0:
			accepted = int32(ev.Ret)
		case ev.Fd == accepted && ev.Nr == nrRead && ev.Ret > 0:
			sawReq = string(ev.Data[:ev.Len]) == req && ev.Ret == int64(len(req))
		case ev.Fd == accepted && ev.Nr == nrWrite && ev.Ret == 300:
			sawResp = ev.Len == PrefixLen && bytes.Equal(ev.Data[:ev.Len], []byte(resp[:PrefixLen])) && ev.TEnter != 0 && ev.TEnter <= ev.TExit
		case ev.Fd == accepted && ev.Nr == nrClose:
			sawClose = true
		}
	}
	c2, _ := p.counters()
	if accepted < 0 || !sawReq || !sawResp || !sawClose {
		t.Errorf("accepted fd %d, request read %v, response prefix %v, close %v", accepted, sawReq, sawResp, sawClose)
	}
	if c2.RingFull != 0 || c2.EnterFull != 0 || c2.Events == 0 {
		t.Errorf("counters %+v", c2)
	}
}
