package output

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Printable is s with what a terminal would act on escaped: control
// characters (C0, DEL, C1: ESC sequences, BEL, newlines) and the format
// characters that reorder or hide text (bidi overrides, zero-width ones),
// as \xNN, \uNNNN or \UNNNNNNNN — and, as Python's repr does, every other
// character that is not printable: line and paragraph separators, spaces
// other than ' ' (U+00A0, U+3000), unassigned code points. A target's
// names and values are its to choose: one that names a function
// "\x1b]0;…\x07" must not retitle, clear or spoof the terminal of the
// person reading its stack. Printable text (any script) is kept as it is;
// invalid UTF-8 bytes are escaped too.
func Printable(s string) string {
	clean := true
	for _, r := range s {
		if unsafeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteString(hex2(s[i]))
		case unsafeRune(r) && r < 0x100:
			b.WriteString(`\x`)
			b.WriteString(hex2(byte(r)))
		case unsafeRune(r) && r > 0xffff:
			b.WriteString(`\U`)
			h := strconv.FormatInt(int64(r), 16)
			b.WriteString(strings.Repeat("0", max(0, 8-len(h))) + h)
		case unsafeRune(r):
			b.WriteString(`\u`)
			h := strconv.FormatInt(int64(r), 16)
			b.WriteString(strings.Repeat("0", max(0, 4-len(h))) + h)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	return r == utf8.RuneError || !unicode.IsPrint(r)
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&15]})
}
