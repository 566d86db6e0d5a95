package pyframes

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func ucs(kind int, rs ...rune) []byte {
	b := make([]byte, kind*len(rs))
	for i, r := range rs {
		switch kind {
		case 1:
			b[i] = byte(r)
		case 2:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(r))
		case 4:
			binary.LittleEndian.PutUint32(b[4*i:], uint32(r))
		}
	}
	return b
}

func TestDecodeUnicodeData(t *testing.T) {
	for _, tc := range []struct {
		name   string
		data   []byte
		kind   int
		length int
		want   string
	}{
		{"empty", nil, 1, 0, ""},
		{"ascii fast path", []byte("code.py"), 1, 7, "code.py"},
		{"ascii with NUL and DEL", []byte("\x00a\x7f"), 1, 3, "\x00a\x7f"},
		{"length shorter than data", []byte("abcdef"), 1, 3, "abc"},
		{"latin-1", ucs(1, []rune("ünïcode")...), 1, 7, "ünïcode"},
		{"latin-1 0xff", []byte{0xff}, 1, 1, "ÿ"},
		{"ucs2 CJK", ucs(2, []rune("處理")...), 2, 2, "處理"},
		{"ucs2 ascii-range", ucs(2, []rune("ab")...), 2, 2, "ab"},
		{"ucs4 emoji", ucs(4, []rune("🐍")...), 4, 1, "🐍"},
		{"ucs4 mixed", ucs(4, []rune("a ü 處 🐍")...), 4, 7, "a ü 處 🐍"},
		{"ucs4 max", ucs(4, 0x10ffff), 4, 1, "\U0010ffff"},
		// A lone surrogate is written as repr writes it (a real U+FFFD
		// would look the same as U+FFFD).
		{"ucs2 lone low surrogate", ucs(2, 'a', 0xdc80, 'b'), 2, 3, `a\udc80b`},
		{"ucs2 lone high surrogate", ucs(2, 0xd800), 2, 1, `\ud800`},
		{"ucs2 surrogate pair stays two escapes", ucs(2, 0xd83d, 0xdc0d), 2, 2, `\ud83d\udc0d`},
		{"ucs4 lone surrogate", ucs(4, 0x1f40d, 0xd800), 4, 2, `🐍\ud800`},
		{"a real U+FFFD", ucs(2, 0xfffd), 2, 1, "\ufffd"},
		{"ucs4 beyond U+10FFFF", ucs(4, 0x110000), 4, 1, "\ufffd"},
		{"ucs4 negative as int32", []byte{0xff, 0xff, 0xff, 0xff}, 4, 1, "\ufffd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeUnicodeData(tc.data, tc.kind, tc.length)
			if err != nil || got != tc.want {
				t.Errorf("got (%q, %v), want %q", got, err, tc.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("%q is not valid UTF-8", got)
			}
		})
	}
}

func TestDecodeUnicodeDataErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		data   []byte
		kind   int
		length int
	}{
		{"kind 0", []byte("abc"), 0, 3},
		{"kind 3", []byte("abcdef"), 3, 2},
		{"kind 8", make([]byte, 16), 8, 2},
		{"negative length", []byte("abc"), 1, -1},
		{"short kind 1", []byte("ab"), 1, 3},
		{"short kind 2", ucs(2, 'a', 'b')[:3], 2, 2},
		{"short kind 4", ucs(4, 'a', 'b')[:7], 4, 2},
		{"no data", nil, 4, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeUnicodeData(tc.data, tc.kind, tc.length)
			if err == nil || got != "" {
				t.Errorf("got (%q, %v), want (\"\", error)", got, err)
			}
		})
	}
}

// TestDecodeUnicodeDataHugeLength: a length whose length*kind overflows int
// must be refused like any other length the data cannot hold. (length*kind
// wraps to 0 for length 1<<62 and kind 4, which then passes the size check.)
func TestDecodeUnicodeDataHugeLength(t *testing.T) {
	for _, tc := range []struct{ kind, length int }{
		{4, 1 << 62},
		{2, 1 << 63 / 2},
		{4, 1<<62 + 1},
	} {
		t.Run(fmt.Sprintf("kind%d_len%#x", tc.kind, tc.length), func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("panic: %v", r)
				}
			}()
			got, err := DecodeUnicodeData([]byte("abcd"), tc.kind, tc.length)
			if err == nil || got != "" {
				t.Errorf("got (%q, %v), want an error", got, err)
			}
		})
	}
}

func TestDecodeState(t *testing.T) {
	// PyASCIIObject.state on GIL builds: interned:2, kind:3, compact:1,
	// ascii:1, then ready (3.10/3.11) or statically_allocated (3.12+).
	for _, tc := range []struct {
		state   byte
		kind    int
		compact bool
		ascii   bool
	}{
		{0x64, 1, true, true},   // compact ASCII, 3.12+
		{0xe4, 1, true, true},   // + ready (3.10/3.11)
		{0xe7, 1, true, true},   // + interned bits + static
		{0x24, 1, true, false},  // compact Latin-1
		{0x28, 2, true, false},  // compact UCS2
		{0x30, 4, true, false},  // compact UCS4
		{0x08, 2, false, false}, // legacy UCS2
		{0x00, 0, false, false}, // PyUnicode_WCHAR_KIND (3.10/3.11 legacy not ready)
		{0x1c, 7, false, false}, // garbage kind: the caller rejects it
	} {
		k, c, a := decodeState(tc.state)
		if k != tc.kind || c != tc.compact || a != tc.ascii {
			t.Errorf("decodeState(%#02x) = (%d, %v, %v), want (%d, %v, %v)", tc.state, k, c, a, tc.kind, tc.compact, tc.ascii)
		}
	}
}

// TestUnicodeGolden: real str objects from every interpreter (state byte and
// data as they sit in memory) decode to their text; the data starts where
// the version's layout says compact data starts.
func TestUnicodeGolden(t *testing.T) {
	for _, minor := range goldenMinors {
		t.Run(fmt.Sprintf("3.%d", minor), func(t *testing.T) {
			var g unicodeGolden
			readGolden(t, fmt.Sprintf("unicode-3.%d.json", minor), &g)
			l := goldenLayout(t, minor)
			for _, s := range g.Facts {
				var want strings.Builder
				ascii := true
				for _, r := range s.CodePoints {
					if r >= 0x80 {
						ascii = false
					}
					if r >= 0xd800 && r <= 0xdfff {
						fmt.Fprintf(&want, `\u%04x`, r)
						continue
					}
					if !utf8.ValidRune(r) {
						r = utf8.RuneError
					}
					want.WriteRune(r)
				}
				kind, compact, isASCII := decodeState(s.State)
				if kind != s.Kind || !compact || isASCII != ascii {
					t.Errorf("%q: state %#02x decodes to kind %d compact %v ascii %v; want kind %d compact true ascii %v",
						want.String(), s.State, kind, compact, isASCII, s.Kind, ascii)
				}
				wantOff := l.CompactSize
				if ascii {
					wantOff = l.ASCIISize
				}
				if s.DataOffset != wantOff {
					t.Errorf("%q: data at +%d in the real object, layout says +%d", want.String(), s.DataOffset, wantOff)
				}
				data, err := hex.DecodeString(s.Data)
				if err != nil {
					t.Fatal(err)
				}
				got, err := DecodeUnicodeData(data, kind, len(s.CodePoints))
				if err != nil || got != want.String() {
					t.Errorf("decoded (%q, %v), want %q", got, err, want.String())
				}
			}
		})
	}
}

// goldenLayout is the Layout the walker would use for a golden minor: the
// static table up to 3.12, the golden debug-offsets table from 3.13.
func goldenLayout(t testing.TB, minor int) *Layout {
	t.Helper()
	if minor <= 12 {
		l, ok := staticLayout(Version{3, minor, 0})
		if !ok {
			t.Fatalf("no static layout for 3.%d", minor)
		}
		return l
	}
	d, err := ParseDebugOffsets(loadDebugTable(t, minor))
	if err != nil {
		t.Fatalf("3.%d golden debug offsets: %v", minor, err)
	}
	l, err := layoutFromDebugOffsets(d)
	if err != nil {
		t.Fatalf("3.%d layoutFromDebugOffsets: %v", minor, err)
	}
	return l
}
