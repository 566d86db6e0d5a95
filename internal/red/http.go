package red

import (
	"bytes"
	"strconv"
	"strings"
)

// Protocol guesses from the first bytes a server reads on a connection.
type Protocol int

const (
	ProtoUnknown Protocol = iota // too few bytes to say
	ProtoHTTP1
	ProtoTLS
	ProtoOther
)

// RequestHead is what a request line says.
type RequestHead struct {
	Method, Target, Version string
}

// httpMethods are the methods a request line may start with (RFC 9110 and
// the common WebDAV/PATCH ones): a token that is not one of these is not
// taken for HTTP, so binary protocols are not misparsed.
var httpMethods = []string{"GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH",
	"CONNECT", "TRACE", "PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "PRI"}

// Sniff classifies a connection by the first bytes the server read.
func Sniff(b []byte) (Protocol, string) {
	if len(b) == 0 {
		return ProtoUnknown, ""
	}
	if len(b) >= 3 && b[0] == 0x16 && b[1] == 0x03 && b[2] <= 0x04 {
		return ProtoTLS, "TLS handshake (encrypted: only connection-level numbers)"
	}
	sp := bytes.IndexByte(b, ' ')
	if sp < 0 {
		if len(b) < 8 && isUpperPrefix(b) {
			return ProtoUnknown, ""
		}
		return ProtoOther, "first bytes are not an HTTP/1.x request line"
	}
	m := string(b[:sp])
	for _, x := range httpMethods {
		if m == x {
			if m == "PRI" {
				return ProtoOther, "HTTP/2 connection preface (not parsed)"
			}
			return ProtoHTTP1, ""
		}
	}
	return ProtoOther, "first bytes are not an HTTP/1.x request line"
}

func isUpperPrefix(b []byte) bool {
	for _, c := range b {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// ParseRequestLine reads "METHOD SP TARGET SP HTTP/1.x" from the start of
// b. A line cut short by the 128-byte prefix still gives method and the
// target's start (ok, truncated).
func ParseRequestLine(b []byte) (h RequestHead, ok, truncated bool) {
	end := bytes.IndexByte(b, '\n')
	line := b
	if end >= 0 {
		line = b[:end]
	} else {
		truncated = true
	}
	line = bytes.TrimSuffix(line, []byte("\r"))
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return h, false, truncated
	}
	h.Method = string(line[:sp])
	if p, _ := Sniff(line); p != ProtoHTTP1 {
		return RequestHead{}, false, truncated
	}
	rest := line[sp+1:]
	if sp2 := bytes.LastIndexByte(rest, ' '); sp2 >= 0 && bytes.HasPrefix(rest[sp2+1:], []byte("HTTP/")) {
		h.Target = string(rest[:sp2])
		h.Version = string(rest[sp2+1:])
	} else if truncated {
		h.Target = string(rest)
	} else {
		return RequestHead{}, false, false // HTTP/0.9 or garbage
	}
	if h.Target == "" || !validTarget(h.Target) {
		return RequestHead{}, false, truncated
	}
	return h, true, truncated
}

func validTarget(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return false
		}
	}
	return true
}

// ParseRequests finds every request line visible in one read: the first at
// the start, the next ones after a blank line (pipelining), as far as the
// prefix goes. Bodies are not skipped (Content-Length is not honoured): a
// body that looks like a request line would count; http clients do not
// pipeline requests with bodies in practice.
func ParseRequests(b []byte) []RequestHead {
	var out []RequestHead
	for len(b) > 0 {
		h, ok, _ := ParseRequestLine(b)
		if !ok {
			break
		}
		out = append(out, h)
		i := bytes.Index(b, []byte("\r\n\r\n"))
		if i < 0 {
			break
		}
		b = b[i+4:]
	}
	return out
}

// ParseStatusLine reads "HTTP/1.x SP CODE" from the start of a write.
func ParseStatusLine(b []byte) (code int, ok bool) {
	if len(b) < 12 || !bytes.HasPrefix(b, []byte("HTTP/1.")) || b[8] != ' ' {
		return 0, false
	}
	c := b[9:12]
	for _, d := range c {
		if d < '0' || d > '9' {
			return 0, false
		}
	}
	if len(b) > 12 && b[12] != ' ' && b[12] != '\r' && b[12] != '\n' {
		return 0, false
	}
	n, _ := strconv.Atoi(string(c))
	if n < 100 {
		return 0, false
	}
	return n, true
}

// Route is the key requests are grouped under: method and path, with the
// query dropped and segments that are plainly ids (all digits, a UUID, a
// long hex string) collapsed to :id.
func Route(h RequestHead) string {
	p := h.Target
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if _, rest, ok := strings.Cut(p, "://"); ok && (strings.HasPrefix(p, "http:") || strings.HasPrefix(p, "https:")) {
		// absolute form (proxies): keep the path only
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			p = rest[i:]
		} else {
			p = "/"
		}
	}
	if strings.ContainsAny(p, "0123456789") {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			if isID(s) {
				segs[i] = ":id"
			}
		}
		p = strings.Join(segs, "/")
	}
	return h.Method + " " + p
}

func isID(s string) bool {
	if s == "" {
		return false
	}
	digits, hex := true, true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			digits = false
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == '-') {
			hex = false
		}
	}
	if digits {
		return true
	}
	// UUID (36 with dashes) or a long hex digest; must contain a digit so
	// that words like "deadbeef-cafe" are not taken for ids.
	return hex && len(s) >= 16 && strings.ContainsAny(s, "0123456789")
}
