package pyframes

import "errors"

// ErrNoLine means the table has no line for the instruction (e.g. an
// artificial instruction); callers fall back to the first line.
var ErrNoLine = errors.New("no line for instruction")

var errTableEnd = errors.New("location table ends before the instruction")

// maxTableEntries bounds a decode of a hostile table; real tables have one
// entry per few code units, and co_code is capped far below this.
const maxTableEntries = 1 << 20

// LineFromLocations decodes a 3.11+ location table (co_linetable, the format
// of CPython's Objects/locations.md) and returns the line of code unit addrq.
func LineFromLocations(table []byte, firstLine int, addrq int) (int, error) {
	if addrq < 0 {
		// 3.11/3.12 point prev_instr one unit before the code of a fresh
		// frame; CPython's PyCode_Addr2Line answers co_firstlineno then.
		return firstLine, nil
	}
	line := firstLine
	addr := 0
	i := 0
	for n := 0; i < len(table) && n < maxTableEntries; n++ {
		first := table[i]
		if first&0x80 == 0 {
			return 0, errors.New("location table: entry does not start with the high bit set")
		}
		i++
		code := (first >> 3) & 15
		length := int(first&7) + 1
		entryLine := line
		noLine := false
		switch {
		case code == 15:
			noLine = true
		case code == 14:
			d, j, ok := svarint(table, i)
			if !ok {
				return 0, errTableEnd
			}
			i = j
			for k := 0; k < 3; k++ { // end line, column, end column
				if _, i, ok = varint(table, i); !ok {
					return 0, errTableEnd
				}
			}
			line += d
			entryLine = line
		case code == 13:
			d, j, ok := svarint(table, i)
			if !ok {
				return 0, errTableEnd
			}
			i = j
			line += d
			entryLine = line
		case code >= 10:
			line += int(code) - 10
			entryLine = line
			i += 2
		default:
			i++
		}
		if i > len(table) {
			return 0, errTableEnd
		}
		if addrq >= addr && addrq < addr+length {
			if noLine {
				return 0, ErrNoLine
			}
			return entryLine, nil
		}
		addr += length
	}
	return 0, errTableEnd
}

func varint(b []byte, i int) (int, int, bool) {
	v, shift := 0, 0
	for {
		if i >= len(b) || shift > 42 {
			return 0, i, false
		}
		c := b[i]
		i++
		v |= int(c&63) << shift
		if c&64 == 0 {
			return v, i, true
		}
		shift += 6
	}
}

func svarint(b []byte, i int) (int, int, bool) {
	v, j, ok := varint(b, i)
	if v&1 != 0 {
		return -(v >> 1), j, ok
	}
	return v >> 1, j, ok
}

// LineFrom310Table decodes 3.10's PEP 626 co_linetable: pairs of (unsigned
// byte delta, signed line delta, -128 = no line) and returns the line of
// bytecode offset byteOff.
func LineFrom310Table(table []byte, firstLine int, byteOff int) (int, error) {
	if byteOff < 0 {
		return firstLine, nil
	}
	line := firstLine
	start := 0
	for i := 0; i+1 < len(table); i += 2 {
		end := start + int(table[i])
		ld := int8(table[i+1])
		if ld != -128 {
			line += int(ld)
		}
		if byteOff >= start && byteOff < end {
			if ld == -128 {
				return 0, ErrNoLine
			}
			return line, nil
		}
		start = end
	}
	return 0, errTableEnd
}
