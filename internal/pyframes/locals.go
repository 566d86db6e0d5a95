package pyframes

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/pyobs/pyobs/internal/output"
)

// Local is one local variable of a frame, rendered only for simple types.
type Local struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Value string `json:"value,omitempty"` // repr for None/bool/int/float/str/bytes; "len N" for containers
}

// Kinds of localsplus slots (Include/internal/pycore_code.h).
const (
	coFastCell = 0x40
	coFastFree = 0x80
)

const maxLocals = 512

// On 3.10 co_freevars and co_cellvars follow co_varnames in PyCodeObject
// (Include/cpython/code.h @v3.10): offsets from co_varnames.
const (
	code310Freevars = 8
	code310Cellvars = 16
)

func (p *Process) locals(frame uint64, ci *codeInfo) []Local {
	l, r := p.Layout, &p.objs
	if ci.localNames == nil || ci.localsPartial {
		p.loadLocalNames(ci)
	}
	n := len(ci.localNames)
	if n == 0 {
		return nil
	}
	raw := make([]byte, 8*n)
	if err := r.mem.Read(frame+l.FrameLocalsplus, raw); err != nil {
		return nil
	}
	var out []Local
	for i, name := range ci.localNames {
		v := le64(raw, uint64(8*i))
		if l.CodeTagged { // 3.14+ _PyStackRef (pycore_stackref.h)
			switch {
			case v == 1: // PyStackRef_NULL
				continue
			case v&3 == 3: // tagged int: value in the upper bits
				out = append(out, Local{Name: name, Type: "int", Value: strconv.FormatInt(int64(v)>>2, 10)})
				continue
			}
			v &^= 3
		}
		if v == 0 {
			continue // unbound
		}
		if i < len(ci.localKinds) && ci.localKinds[i]&(coFastCell|coFastFree) != 0 {
			if tp, err := r.typeOf(v); err == nil && tp == p.Info.Syms["PyCell_Type"] && tp != 0 {
				v, _ = r.u64(v + l.CellRef)
				if v == 0 {
					continue
				}
			}
		}
		typ, val := p.render(v)
		out = append(out, Local{Name: output.Printable(name), Type: output.Printable(typ), Value: output.Printable(val)})
	}
	return out
}

func (p *Process) loadLocalNames(ci *codeInfo) {
	l, r := p.Layout, &p.objs
	ci.localNames, ci.localsPartial = []string{}, false
	tuple := le64(ci.hdr, l.CodeLocalsplusNames)
	items, err := p.tupleItems(tuple)
	if err != nil {
		return
	}
	if l.Version.Minor == 10 {
		// f_localsplus is co_nlocals locals, then a cell object per
		// co_cellvars name, then one per co_freevars name: kinds made up
		// here let locals() read them through the cell as on 3.11+. An
		// argument a closure captures has its local slot cleared and its
		// value in its cell: it shows once, as the cell.
		nl := int(int32(le32(ci.hdr, l.CodeNlocals)))
		if nl >= 0 && nl < len(items) {
			items = items[:nl]
		}
		kinds := make([]byte, len(items))
		for _, part := range []struct {
			off  uint64
			kind byte
		}{{l.CodeLocalsplusNames + code310Cellvars, coFastCell}, {l.CodeLocalsplusNames + code310Freevars, coFastFree}} {
			if part.off+8 > uint64(len(ci.hdr)) {
				continue
			}
			more, err := p.tupleItems(le64(ci.hdr, part.off))
			if err != nil || len(items)+len(more) > maxLocals {
				// The slots after these have no names we can trust (the
				// free variables' would land on the cells): stop here,
				// and read them again next time.
				ci.localsPartial = true
				break
			}
			items = append(items, more...)
			for range more {
				kinds = append(kinds, part.kind)
			}
		}
		ci.localKinds = kinds
	} else if kinds := le64(ci.hdr, l.CodeLocalsplusKinds); kinds != 0 {
		ci.localKinds, _, _ = r.bytesObj(kinds, maxLocals)
	}
	for _, it := range items {
		s, err := r.str(it, maxNameChars)
		if err != nil {
			s = "?"
		}
		ci.localNames = append(ci.localNames, s)
	}
}

func (p *Process) tupleItems(t uint64) ([]uint64, error) {
	l, r := p.Layout, &p.objs
	hdr := make([]byte, l.TupleItems)
	if err := r.mem.Read(t, hdr); err != nil {
		return nil, err
	}
	if le64(hdr, l.ObType) != r.types.tuple {
		return nil, fmt.Errorf("tuple at 0x%x: %w", t, errWrongType)
	}
	n := le64(hdr, l.TupleSize)
	if n > maxLocals {
		return nil, fmt.Errorf("tuple at 0x%x: %d items", t, n)
	}
	raw := make([]byte, 8*n)
	if err := r.mem.Read(t+l.TupleItems, raw); err != nil {
		return nil, err
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = le64(raw, uint64(8*i))
	}
	return out, nil
}

// render gives (type name, value) for an object; only simple types get a value.
func (p *Process) render(obj uint64) (string, string) {
	l, r := p.Layout, &p.objs
	t := r.types
	if obj == t.none {
		return "NoneType", "None"
	}
	tp, err := r.typeOf(obj)
	if err != nil {
		return "?", ""
	}
	switch tp {
	case 0:
		return "?", ""
	case t.bool_:
		if obj == t.trueObj {
			return "bool", "True"
		}
		return "bool", "False"
	case t.long:
		if v, ok, err := r.long(obj); err == nil && ok {
			return "int", strconv.FormatInt(v, 10)
		}
		return "int", ""
	case t.float:
		if v, err := r.u64(obj + l.FloatValue); err == nil {
			return "float", pyFloat(math.Float64frombits(v))
		}
	case t.unicode:
		if s, err := r.str(obj, maxLocalChars); err == nil {
			return "str", pyRepr(s)
		}
	case t.bytes:
		if b, n, err := r.bytesObj(obj, maxLocalChars); err == nil {
			s := pyBytesRepr(b)
			if n > len(b) {
				s += "…"
			}
			return "bytes", s
		}
	case t.tuple, t.list:
		off := l.TupleSize
		name := "tuple"
		if tp == t.list {
			off, name = l.ListSize, "list"
		}
		if n, err := r.u64(obj + off); err == nil {
			return name, fmt.Sprintf("len %d", int64(n))
		}
	case t.dict:
		if n, err := r.u64(obj + l.DictUsed); err == nil {
			return "dict", fmt.Sprintf("len %d", int64(n))
		}
	}
	return p.typeName(tp), ""
}

func (p *Process) typeName(tp uint64) string {
	r := &p.objs
	ptr, err := r.u64(tp + p.Layout.TypeName)
	if err != nil {
		return "?"
	}
	b := make([]byte, 64)
	if err := r.mem.Read(ptr, b); err != nil {
		return "?"
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// pyFloat renders like Python's float repr: the shortest round-tripping
// digits, fixed notation for exponents in [-4, 16), else d.ddde±XX.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // e.g. -1.2345e+06
	mant, expS, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expS)
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	digits := strings.Replace(mant, ".", "", 1)
	sign := ""
	if neg {
		sign = "-"
	}
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es, exp = "-", -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
	}
	var out string
	switch {
	case exp < 0:
		out = "0." + strings.Repeat("0", -exp-1) + digits
	case exp+1 >= len(digits):
		out = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	default:
		out = digits[:exp+1] + "." + digits[exp+1:]
	}
	return sign + out
}

func pyRepr(s string) string {
	q := "'"
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		q = `"`
	}
	var b strings.Builder
	b.WriteString(q)
	for _, c := range s {
		switch {
		case c == '\\':
			b.WriteString(`\\`)
		case string(c) == q:
			b.WriteString(`\` + q)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\r':
			b.WriteString(`\r`)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteRune(c)
		}
	}
	b.WriteString(q)
	return b.String()
}

// pyBytesRepr renders like Python's bytes repr, including its choice of quote.
func pyBytesRepr(v []byte) string {
	q := byte('\'')
	if bytes.IndexByte(v, '\'') >= 0 && bytes.IndexByte(v, '"') < 0 {
		q = '"'
	}
	var b strings.Builder
	b.WriteString("b")
	b.WriteByte(q)
	for _, c := range v {
		switch {
		case c == '\\' || c == q:
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\r':
			b.WriteString(`\r`)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte(q)
	return b.String()
}
