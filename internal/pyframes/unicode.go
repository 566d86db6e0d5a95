package pyframes

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Caps on what one object read may allocate: garbage lengths must not turn
// into huge reads.
const (
	maxNameChars  = 1024
	maxFileChars  = 4096
	maxLocalChars = 256
	maxTableBytes = 1 << 20
)

// decodeState reads the kind/compact/ascii bits of PyASCIIObject.state on GIL
// builds. Only the low byte is meaningful: the padding above it has been seen
// holding garbage.
func decodeState(state byte) (kind int, compact, ascii bool) {
	return int(state>>2) & 7, state&(1<<5) != 0, state&(1<<6) != 0
}

var errBadKind = errors.New("string kind is not 1, 2 or 4")

// DecodeUnicodeData turns the code points of a compact or legacy str into
// UTF-8. kind is 1, 2 or 4 bytes per code point; data holds length*kind bytes.
// Invalid code points (lone surrogates, > U+10FFFF) become U+FFFD.
func DecodeUnicodeData(data []byte, kind int, length int) (string, error) {
	if kind != 1 && kind != 2 && kind != 4 {
		return "", errBadKind
	}
	if length < 0 || length > len(data)/kind {
		return "", fmt.Errorf("string data: %d bytes for %d code points of kind %d", len(data), length, kind)
	}
	if kind == 1 {
		ascii := true
		for _, c := range data[:length] {
			if c >= 0x80 {
				ascii = false
				break
			}
		}
		if ascii {
			return string(data[:length]), nil
		}
	}
	out := make([]byte, 0, length*2)
	for i := 0; i < length; i++ {
		var r rune
		switch kind {
		case 1:
			r = rune(data[i])
		case 2:
			r = rune(binary.LittleEndian.Uint16(data[2*i:]))
		case 4:
			r = rune(binary.LittleEndian.Uint32(data[4*i:]))
		}
		if r >= 0xd800 && r <= 0xdfff {
			// A lone surrogate (a filename's undecodable byte under
			// surrogateescape): written as Python's repr writes it, not
			// as U+FFFD, which a real U+FFFD would be too.
			out = fmt.Appendf(out, `\u%04x`, r)
			continue
		}
		if !utf8.ValidRune(r) {
			r = utf8.RuneError
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out), nil
}
