package pyframes

import (
	"errors"
	"fmt"
	"testing"
)

// TestLineFromLocationsGolden checks the 3.11+ decoder against every code
// unit of every code object in the golden files, whose lines the real
// interpreters computed with PyCode_Addr2Line (cross-checked there against
// co_positions() and co_lines()). "No line" must be ErrNoLine and 0.
func TestLineFromLocationsGolden(t *testing.T) {
	for _, minor := range goldenMinors {
		if minor < 11 {
			continue
		}
		t.Run(fmt.Sprintf("3.%d", minor), func(t *testing.T) {
			g := loadLineGolden(t, minor)
			units, noLine := 0, 0
			for _, c := range g.Codes {
				tbl := c.table(t)
				if len(c.Lines) != c.CodeUnits {
					t.Fatalf("%s: %d lines for %d code units", c.Name, len(c.Lines), c.CodeUnits)
				}
				bad := 0
				for u, want := range c.Lines {
					units++
					got, err := LineFromLocations(tbl, c.FirstLineno, u)
					switch {
					case want == nil:
						noLine++
						if !errors.Is(err, ErrNoLine) || got != 0 {
							t.Errorf("%s (%s) unit %d: got (%d, %v), want (0, ErrNoLine)", c.Name, g.Python, u, got, err)
							bad++
						}
					case err != nil || got != *want:
						t.Errorf("%s (%s) unit %d: got (%d, %v), want %d", c.Name, g.Python, u, got, err, *want)
						bad++
					}
					if bad > 5 {
						t.Fatalf("%s: giving up after %d mismatches; table %s", c.Name, bad, c.Linetable)
					}
				}
				// Past the last unit: CPython answers -1; we must error with a zero line.
				if got, err := LineFromLocations(tbl, c.FirstLineno, c.CodeUnits); err == nil || got != 0 {
					t.Errorf("%s: unit %d (one past the end): got (%d, %v), want an error", c.Name, c.CodeUnits, got, err)
				}
			}
			if noLine == 0 {
				t.Errorf("3.%d golden has no 'no line' unit: the snippets no longer exercise code 15", minor)
			}
			t.Logf("%s: %d code objects, %d code units, %d without a line", g.Python, len(g.Codes), units, noLine)
		})
	}
}

// TestLineFromLocationsBeforeFirst: 3.11/3.12 frames that have not started
// point one unit before the code; PyCode_Addr2Line(negative) is
// co_firstlineno, as recorded by the interpreters themselves.
func TestLineFromLocationsBeforeFirst(t *testing.T) {
	for _, minor := range goldenMinors {
		if minor < 11 {
			continue
		}
		g := loadLineGolden(t, minor)
		for _, c := range g.Codes {
			if c.LineBeforeFirst != c.FirstLineno {
				t.Errorf("3.%d %s: the interpreter says %d before the first unit, co_firstlineno %d", minor, c.Name, c.LineBeforeFirst, c.FirstLineno)
			}
			for _, addrq := range []int{-1, -2, -1 << 40} {
				if got, err := LineFromLocations(c.table(t), c.FirstLineno, addrq); err != nil || got != c.LineBeforeFirst {
					t.Errorf("3.%d %s addrq %d: got (%d, %v), want %d", minor, c.Name, addrq, got, err, c.LineBeforeFirst)
				}
			}
		}
	}
}

// TestLineFrom310TableGolden: 3.10's PEP 626 table is indexed by byte
// offset; the walker passes 2*f_lasti.
func TestLineFrom310TableGolden(t *testing.T) {
	g := loadLineGolden(t, 10)
	units, noLine := 0, 0
	for _, c := range g.Codes {
		tbl := c.table(t)
		for u, want := range c.Lines {
			units++
			got, err := LineFrom310Table(tbl, c.FirstLineno, 2*u)
			if want == nil {
				noLine++
				if !errors.Is(err, ErrNoLine) || got != 0 {
					t.Errorf("%s byte %d: got (%d, %v), want (0, ErrNoLine)", c.Name, 2*u, got, err)
				}
				continue
			}
			if err != nil || got != *want {
				t.Errorf("%s byte %d: got (%d, %v), want %d", c.Name, 2*u, got, err, *want)
			}
			// The odd byte of a code unit belongs to the same instruction.
			if got1, err1 := LineFrom310Table(tbl, c.FirstLineno, 2*u+1); err1 != nil || got1 != *want {
				t.Errorf("%s byte %d: got (%d, %v), want %d", c.Name, 2*u+1, got1, err1, *want)
			}
		}
		if got, err := LineFrom310Table(tbl, c.FirstLineno, -2); err != nil || got != c.LineBeforeFirst {
			t.Errorf("%s f_lasti -1: got (%d, %v), want %d", c.Name, got, err, c.LineBeforeFirst)
		}
		if got, err := LineFrom310Table(tbl, c.FirstLineno, 2*c.CodeUnits); err == nil || got != 0 {
			t.Errorf("%s: byte %d (past the end): got (%d, %v), want an error", c.Name, 2*c.CodeUnits, got, err)
		}
	}
	if noLine == 0 {
		t.Error("3.10 golden has no -128 'no line' unit")
	}
	t.Logf("%s: %d code objects, %d code units, %d without a line", g.Python, len(g.Codes), units, noLine)
}

// Encoders for hand-made 3.11+ entries, after CPython's
// Python/assemble.c write_location_info_entry and Objects/locations.md.
func locVarint(v uint) []byte {
	var b []byte
	for v >= 64 {
		b = append(b, 64|byte(v&63))
		v >>= 6
	}
	return append(b, byte(v))
}

func locSvarint(v int) []byte {
	if v < 0 {
		return locVarint(uint(-v)<<1 | 1)
	}
	return locVarint(uint(v) << 1)
}

func locHead(code, units int) byte { return 0x80 | byte(code)<<3 | byte(units-1) }

func locShort(units, col int) []byte { return []byte{locHead(col/8, units), byte(col%8) << 4} }
func locOneLine(delta, units int) []byte {
	return []byte{locHead(10+delta, units), 4, 9}
}
func locNoColumn(delta, units int) []byte {
	return append([]byte{locHead(13, units)}, locSvarint(delta)...)
}
func locLong(delta, units int) []byte {
	b := append([]byte{locHead(14, units)}, locSvarint(delta)...)
	b = append(b, locVarint(2)...)   // end line - line
	b = append(b, locVarint(300)...) // column + 1: past the one-line forms
	return append(b, locVarint(4000)...)
}
func locNone(units int) []byte { return []byte{locHead(15, units)} }

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func TestLineFromLocationsHandmade(t *testing.T) {
	noLine := -1
	for _, tc := range []struct {
		name  string
		table []byte
		first int
		want  []int // per code unit; -1: ErrNoLine
	}{
		{"short forms keep the line", cat(locShort(3, 5), locShort(1, 79)), 10, []int{10, 10, 10, 10}},
		{"one-line deltas 0,1,2", cat(locOneLine(0, 1), locOneLine(1, 2), locOneLine(2, 1)), 7, []int{7, 8, 8, 10}},
		{"eight units per entry", cat(locOneLine(1, 8), locShort(8, 0)), 1, []int{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}},
		{"no column, negative", cat(locNoColumn(5, 1), locNoColumn(-3, 1)), 100, []int{105, 102}},
		{"svarint 2 chunks", cat(locNoColumn(64, 1), locNoColumn(-64, 1)), 1, []int{65, 1}},
		{"svarint 3 chunks", cat(locLong(3000, 1), locLong(-2999, 1)), 1, []int{3001, 2}},
		{"svarint 4 chunks", cat(locLong(200000, 2), locLong(-199999, 1)), 1, []int{200001, 200001, 2}},
		{"svarint 5 chunks", cat(locNoColumn(1<<25, 1), locNoColumn(-(1<<25), 1)), 3, []int{3 + 1<<25, 3}},
		{"no location keeps the running line", cat(locOneLine(2, 1), locNone(2), locShort(1, 0)), 5, []int{7, noLine, noLine, 7}},
		{"no location first", cat(locNone(1), locOneLine(0, 1)), 4, []int{noLine, 4}},
		{"line 0 and below", cat(locLong(-1, 1), locLong(-5, 1)), 1, []int{0, -5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for u, want := range tc.want {
				got, err := LineFromLocations(tc.table, tc.first, u)
				if want == noLine {
					if !errors.Is(err, ErrNoLine) || got != 0 {
						t.Errorf("unit %d: got (%d, %v), want (0, ErrNoLine)", u, got, err)
					}
					continue
				}
				if err != nil || got != want {
					t.Errorf("unit %d: got (%d, %v), want %d", u, got, err, want)
				}
			}
			if got, err := LineFromLocations(tc.table, tc.first, len(tc.want)); err == nil || errors.Is(err, ErrNoLine) || got != 0 {
				t.Errorf("past the end: got (%d, %v), want a table-end error", got, err)
			}
		})
	}
}

// TestLineFromLocationsMalformed: every broken table errors with a zero line.
func TestLineFromLocationsMalformed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		table []byte
		addrq int
	}{
		{"empty", nil, 0},
		{"no high bit", []byte{0x00, 0x00}, 0},
		{"no high bit after a good entry", cat(locShort(1, 0), []byte{0x12}), 1},
		{"short form without its byte", []byte{locHead(0, 1)}, 0},
		{"one-line form cut", []byte{locHead(10, 1), 4}, 0},
		{"svarint cut", []byte{locHead(13, 1), 0x40 | 3}, 0},
		{"long form cut in end line", cat([]byte{locHead(14, 1)}, locSvarint(3)), 0},
		{"long form cut in column", cat([]byte{locHead(14, 1)}, locSvarint(3), locVarint(0)), 0},
		{"long form cut in end column", cat([]byte{locHead(14, 1)}, locSvarint(3), locVarint(0), locVarint(1)), 0},
		{"endless varint", cat([]byte{locHead(13, 1)}, []byte{0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x01}), 0},
		{"past the end of a good table", cat(locShort(2, 0)), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LineFromLocations(tc.table, 42, tc.addrq)
			if err == nil || got != 0 {
				t.Errorf("got (%d, %v), want (0, error)", got, err)
			}
		})
	}
}

func TestLineFrom310TableHandmade(t *testing.T) {
	pair := func(bytes int, delta int8) []byte { return []byte{byte(bytes), byte(delta)} }
	noLine := []byte{4, 0x80}
	for _, tc := range []struct {
		name  string
		table []byte
		first int
		off   int
		want  int // -1: ErrNoLine, -2: other error
	}{
		{"first range", cat(pair(6, 1), pair(4, 2)), 10, 0, 11},
		{"end is exclusive", cat(pair(6, 1), pair(4, 2)), 10, 6, 13},
		{"last byte", cat(pair(6, 1), pair(4, 2)), 10, 9, 13},
		{"past the end", cat(pair(6, 1), pair(4, 2)), 10, 10, -2},
		{"negative delta", cat(pair(2, 5), pair(2, -3)), 1, 2, 3},
		{"zero-width pairs carry big deltas", cat(pair(0, 127), pair(0, 127), pair(2, 6)), 1, 0, 261},
		{"-128 is no line", cat(pair(2, 1), noLine, pair(2, 1)), 1, 3, -1},
		{"-128 does not move the line", cat(pair(2, 1), noLine, pair(2, 1)), 1, 6, 3},
		{"byte delta 254 split", cat(pair(254, 1), pair(254, 0), pair(2, 1)), 1, 300, 2},
		{"odd length ignores the tail", cat(pair(2, 1), []byte{9}), 1, 2, -2},
		{"empty", nil, 1, 0, -2},
		{"negative offset is the first line", cat(pair(2, 1)), 17, -2, 17},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LineFrom310Table(tc.table, tc.first, tc.off)
			switch tc.want {
			case -1:
				if !errors.Is(err, ErrNoLine) || got != 0 {
					t.Errorf("got (%d, %v), want (0, ErrNoLine)", got, err)
				}
			case -2:
				if err == nil || errors.Is(err, ErrNoLine) || got != 0 {
					t.Errorf("got (%d, %v), want (0, table-end error)", got, err)
				}
			default:
				if err != nil || got != tc.want {
					t.Errorf("got (%d, %v), want %d", got, err, tc.want)
				}
			}
		})
	}
}

// refLocations is a second, deliberately plain reading of Objects/locations.md
// used only as a fuzz oracle: it decodes the whole table into per-unit lines.
// ok is false where the table is malformed before that unit.
func refLocations(table []byte, first int) (lines []int, noLine []bool, ok bool) {
	line := first
	i := 0
	rd := func() (int, bool) {
		v, s := 0, 0
		for {
			if i >= len(table) || s > 42 {
				return 0, false
			}
			b := table[i]
			i++
			v |= int(b&63) << s
			s += 6
			if b&64 == 0 {
				return v, true
			}
		}
	}
	for i < len(table) && len(lines) < 1<<20 {
		h := table[i]
		i++
		if h&0x80 == 0 {
			return lines, noLine, false
		}
		n := int(h&7) + 1
		code := int(h>>3) & 15
		none := false
		switch {
		case code == 15:
			none = true
		case code == 13 || code == 14:
			v, good := rd()
			if !good {
				return lines, noLine, false
			}
			if v&1 != 0 {
				line -= v >> 1
			} else {
				line += v >> 1
			}
			if code == 14 {
				for k := 0; k < 3; k++ {
					if _, good := rd(); !good {
						return lines, noLine, false
					}
				}
			}
		case code >= 10:
			line += code - 10
			i += 2
		default:
			i++
		}
		if i > len(table) {
			return lines, noLine, false
		}
		for k := 0; k < n; k++ {
			lines = append(lines, line)
			noLine = append(noLine, none)
		}
	}
	return lines, noLine, true
}

func TestRefLocationsAgreesWithGolden(t *testing.T) {
	// The fuzz oracle must itself be right: check it on the real tables.
	for _, minor := range goldenMinors[1:] {
		g := loadLineGolden(t, minor)
		for _, c := range g.Codes {
			lines, none, ok := refLocations(c.table(t), c.FirstLineno)
			if !ok || len(lines) != c.CodeUnits {
				t.Fatalf("3.%d %s: oracle decoded %d units (ok %v), want %d", minor, c.Name, len(lines), ok, c.CodeUnits)
			}
			for u, want := range c.Lines {
				if (want == nil) != none[u] || (want != nil && *want != lines[u]) {
					t.Fatalf("3.%d %s unit %d: oracle %d/%v, interpreter %v", minor, c.Name, u, lines[u], none[u], want)
				}
			}
		}
	}
}
