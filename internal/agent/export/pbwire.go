package export

import "encoding/binary"

// pb is one protobuf message being written, its fields appended in the
// order the calls come. Only what the OTLP profiles request needs: varint
// and fixed64 scalars, strings and bytes, nested messages, packed
// integers. Singular scalars and strings at their zero value are left out
// (proto3); repeated elements never are (a string table's "" at index 0
// is an element).
type pb struct{ b []byte }

// Wire types.
const (
	wireVarint = 0
	wireI64    = 1
	wireLen    = 2
)

func (m *pb) tag(field, wire int) { m.b = binary.AppendUvarint(m.b, uint64(field)<<3|uint64(wire)) }

// uint writes a varint field (int32 and int64 values go through it as
// their two's complement, as protobuf encodes them).
func (m *pb) uint(field int, v uint64) {
	if v == 0 {
		return
	}
	m.tag(field, wireVarint)
	m.b = binary.AppendUvarint(m.b, v)
}

func (m *pb) int(field int, v int64) { m.uint(field, uint64(v)) }

func (m *pb) fixed64(field int, v uint64) {
	if v == 0 {
		return
	}
	m.tag(field, wireI64)
	m.b = binary.LittleEndian.AppendUint64(m.b, v)
}

// bytes writes a length-delimited field, empty or not (a repeated
// element, or a message present with no fields set).
func (m *pb) bytes(field int, b []byte) {
	m.tag(field, wireLen)
	m.b = binary.AppendUvarint(m.b, uint64(len(b)))
	m.b = append(m.b, b...)
}

// str writes a singular string field, left out when empty.
func (m *pb) str(field int, s string) {
	if s != "" {
		m.elem(field, s)
	}
}

// elem writes an element of a repeated string field, empty or not.
func (m *pb) elem(field int, s string) {
	m.tag(field, wireLen)
	m.b = binary.AppendUvarint(m.b, uint64(len(s)))
	m.b = append(m.b, s...)
}

// msg writes a nested message (an element of a repeated field is written
// even when it has no fields).
func (m *pb) msg(field int, sub *pb) { m.bytes(field, sub.b) }

// packed writes a repeated integer field as one packed run.
func (m *pb) packed(field int, vs []int64) {
	if len(vs) == 0 {
		return
	}
	var run []byte
	for _, v := range vs {
		run = binary.AppendUvarint(run, uint64(v))
	}
	m.bytes(field, run)
}
