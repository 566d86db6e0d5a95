package red

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// parseCases are first bytes of reads and writes as servers see them.
var parseCases = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /users/12345/orders?limit=10 HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST /api/v1/items HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc",
	"DELETE /o/3fa85f64-5717-4562-b3fc-2c963f66afa6 HTTP/1.1\r\n\r\n",
	"GET /blob/deadbeefcafebabe0123456789 HTTP/1.1\r\n\r\n",
	"GET /static/deadbeef-cafe HTTP/1.1\r\n\r\n",
	"GET http://example.com/x/1 HTTP/1.1\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\nGET /c HTTP/1.1\r\n\r\n",
	"GET /very/long/path/that/is/cut/by/the/prefix/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	"GET",
	"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
	"hello echo\n",
	"SSH-2.0-OpenSSH_9.6\r\n",
	"GET /has space in it HTTP/1.1\r\n\r\n",
	"get / HTTP/1.1\r\n\r\n",
	"GET /\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n",
	"HTTP/1.0 500 Internal Server Error\r\n",
	"HTTP/1.1 404\r\n",
	"HTTP/1.1 20 OK\r\n",
	"HTTP/1.1 2000 OK\r\n",
	"HTTP/2 200\r\n",
}

func describe(in string) string {
	b := []byte(in)
	var out strings.Builder
	p, why := Sniff(b)
	fmt.Fprintf(&out, "input %q\n  sniff %d %q\n", in, p, why)
	for _, h := range ParseRequests(b) {
		fmt.Fprintf(&out, "  request %q %q %q route %q\n", h.Method, h.Target, h.Version, Route(h))
	}
	if c, ok := ParseStatusLine(b); ok {
		fmt.Fprintf(&out, "  status %d\n", c)
	}
	return out.String()
}

// TestParseGolden: every case's sniff, request lines, routes and status
// line against testdata/parse.golden (-update rewrites it).
func TestParseGolden(t *testing.T) {
	var got strings.Builder
	for _, c := range parseCases {
		got.WriteString(describe(c))
	}
	path := filepath.Join("testdata", "parse.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got.String() != string(want) {
		t.Errorf("parse output differs from %s:\n%s", path, got.String())
	}
}

// TestParseFacts: the facts the golden file encodes, stated plainly.
func TestParseFacts(t *testing.T) {
	if h := ParseRequests([]byte(parseCases[1])); len(h) != 1 || Route(h[0]) != "GET /users/:id/orders" {
		t.Errorf("ids: %+v", h)
	}
	if h := ParseRequests([]byte(parseCases[7])); len(h) != 3 || h[2].Target != "/c" {
		t.Errorf("pipelined: %+v", h)
	}
	if p, _ := Sniff([]byte(parseCases[11])); p != ProtoTLS {
		t.Errorf("TLS not recognised")
	}
	if h, ok, trunc := ParseRequestLine([]byte(parseCases[8])); !ok || !trunc || h.Method != "GET" {
		t.Errorf("truncated line: %+v %v %v", h, ok, trunc)
	}
	if c, ok := ParseStatusLine([]byte(parseCases[18])); !ok || c != 500 {
		t.Errorf("status %d %v", c, ok)
	}
	if _, ok := ParseStatusLine([]byte(parseCases[21])); ok {
		t.Errorf("4-digit status accepted")
	}
}

// FuzzParse: no input panics the parsers; a route always starts with its
// method, a status is 3 digits.
func FuzzParse(f *testing.F) {
	for _, c := range parseCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > PrefixLen {
			b = b[:PrefixLen]
		}
		Sniff(b)
		for _, h := range ParseRequests(b) {
			if r := Route(h); !strings.HasPrefix(r, h.Method+" ") {
				t.Fatalf("route %q of %+v", r, h)
			}
		}
		if c, ok := ParseStatusLine(b); ok && (c < 100 || c > 999) {
			t.Fatalf("status %d", c)
		}
	})
}
