package pyframes

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Type addresses in the target, resolved from the interpreter's ELF symbols;
// used to check that a pointer really is the object the walker expects.
type typeAddrs struct {
	code, frame, unicode, bytes, long, bool_, float, tuple, list, dict, none, trueObj, module uint64
}

var errWrongType = errors.New("object has an unexpected type")

// objReader reads Python objects with a Layout.
type objReader struct {
	reader
	l     *Layout
	types typeAddrs
	memo  *objMemo // nil: every object read anew
}

// objMemo keeps, for one pass over many objects of the same classes
// (threadNames: every Thread's _name), what they share: their type's
// header and shared keys, and the dict keys compared by text. Only for a
// pass that takes a few milliseconds; a long-lived memo would outlive the
// objects it describes.
type objMemo struct {
	keys    map[uint64]string      // str keys, read up to strAhead characters
	types   map[uint64][]byte      // type objects' headers (getAttr's)
	entries map[uint64][]dictEntry // shared keys tables' entries
	cached  map[uint64]uint64      // a type's shared keys table
}

func newObjMemo() *objMemo {
	return &objMemo{keys: map[uint64]string{}, types: map[uint64][]byte{}, entries: map[uint64][]dictEntry{}, cached: map[uint64]uint64{}}
}

// keyTexts reads the str keys at addrs (up to strAhead characters each)
// in one vectored read, through the memo when there is one; a key that
// can't be read maps to a text no key has.
func (o *objReader) keyTexts(addrs []uint64) map[uint64]string {
	out := make(map[uint64]string, len(addrs))
	var todo []uint64
	for _, a := range addrs {
		if o.memo != nil {
			if s, ok := o.memo.keys[a]; ok {
				out[a] = s
				continue
			}
		}
		todo = append(todo, a)
	}
	texts, errs := o.strs(todo, strAhead)
	for i, a := range todo {
		if errs[i] != nil {
			texts[i] = unreadableKey
		}
		out[a] = texts[i]
		if o.memo != nil {
			o.memo.keys[a] = texts[i]
		}
	}
	return out
}

// unreadableKey stands for a key whose text could not be read.
const unreadableKey = "\x00unreadable"

// strs reads several strs, their headers and first characters in one
// vectored read; one that fails there (or needs more) is read alone.
func (o *objReader) strs(addrs []uint64, maxChars int) ([]string, []error) {
	out, errs := make([]string, len(addrs)), make([]error, len(addrs))
	n := int(o.l.ASCIISize) + min(maxChars, strAhead)
	buf := make([]byte, n*len(addrs))
	segs := make([]Seg, 0, len(addrs))
	for i, a := range addrs {
		segs = append(segs, Seg{Addr: a, Buf: buf[i*n : (i+1)*n]})
	}
	got := 0
	if len(segs) > 0 {
		got = readV(o.mem, segs)
	}
	for i, a := range addrs {
		if i < got && a != 0 {
			out[i], errs[i] = o.strFrom(a, segs[i].Buf, maxChars)
		} else {
			out[i], errs[i] = o.str(a, maxChars)
		}
	}
	return out, errs
}

func (o *objReader) typeOf(addr uint64) (uint64, error) {
	return o.u64(addr + o.l.ObType)
}

// strAhead is how many characters str reads with the header.
const strAhead = 64

// str reads a str object, checking its type, capping its length.
func (o *objReader) str(addr uint64, maxChars int) (string, error) {
	if addr == 0 {
		return "", errors.New("NULL str")
	}
	// The header and, in the same read, the first characters of a compact
	// ASCII str (identifiers, file names): one syscall instead of two. A
	// read that runs past the mapping is retried with the header alone.
	hdr := make([]byte, int(o.l.ASCIISize)+min(maxChars, strAhead))
	if err := o.mem.Read(addr, hdr); err != nil {
		hdr = hdr[:o.l.ASCIISize]
		if err := o.mem.Read(addr, hdr); err != nil {
			return "", err
		}
	}
	return o.strFrom(addr, hdr, maxChars)
}

// strFrom decodes the str at addr from hdr, its header and the
// characters read with it (more are read when they are not all there).
func (o *objReader) strFrom(addr uint64, hdr []byte, maxChars int) (string, error) {
	ahead := len(hdr) - int(o.l.ASCIISize)
	if o.types.unicode != 0 && le64(hdr, o.l.ObType) != o.types.unicode {
		return "", fmt.Errorf("str at 0x%x: %w", addr, errWrongType)
	}
	length := le64(hdr, o.l.UnicodeLength)
	kind, compact, ascii := o.l.unicodeState(hdr)
	if kind != 1 && kind != 2 && kind != 4 {
		return "", fmt.Errorf("str at 0x%x: %w", addr, errBadKind)
	}
	truncated := false
	if length > uint64(maxChars) {
		length, truncated = uint64(maxChars), true
	}
	var data uint64
	switch {
	case compact && ascii && length <= uint64(ahead):
		s, err := DecodeUnicodeData(hdr[o.l.ASCIISize:o.l.ASCIISize+length], 1, int(length))
		if err != nil {
			return "", fmt.Errorf("str at 0x%x: %w", addr, err)
		}
		if truncated {
			s += "…"
		}
		return s, nil
	case compact && ascii:
		data = addr + o.l.ASCIISize
	case compact:
		data = addr + o.l.CompactSize
	default:
		p, err := o.u64(addr + o.l.CompactSize) // legacy: data.any
		if err != nil {
			return "", err
		}
		data = p
	}
	buf := make([]byte, int(length)*kind)
	if err := o.mem.Read(data, buf); err != nil {
		return "", err
	}
	s, err := DecodeUnicodeData(buf, kind, int(length))
	if err != nil {
		return "", fmt.Errorf("str at 0x%x: %w", addr, err)
	}
	if truncated {
		s += "…"
	}
	return s, nil
}

// bytesObj reads a bytes object's payload, up to max bytes.
func (o *objReader) bytesObj(addr uint64, max int) ([]byte, int, error) {
	hdr := make([]byte, o.l.BytesData)
	if err := o.mem.Read(addr, hdr); err != nil {
		return nil, 0, err
	}
	if o.types.bytes != 0 && le64(hdr, o.l.ObType) != o.types.bytes {
		return nil, 0, fmt.Errorf("bytes at 0x%x: %w", addr, errWrongType)
	}
	n := int64(le64(hdr, o.l.BytesSize))
	if n < 0 || n > maxTableBytes {
		return nil, 0, fmt.Errorf("bytes at 0x%x: implausible size %d", addr, n)
	}
	take := min(int(n), max)
	b := make([]byte, take)
	if err := o.mem.Read(addr+o.l.BytesData, b); err != nil {
		return nil, 0, err
	}
	return b, int(n), nil
}

// long reads an int that fits in 64 bits (with sign). ok is false when it does not.
func (o *objReader) long(addr uint64) (v int64, ok bool, err error) {
	hdr := make([]byte, o.l.LongDigits+12)
	if err := o.mem.Read(addr, hdr); err != nil {
		return 0, false, err
	}
	tag := le64(hdr, o.l.LongTag)
	var ndigits uint64
	neg := false
	if o.l.Version.atLeast(12) {
		ndigits = tag >> 3 // lv_tag: digits<<3 | sign (0 +, 1 zero, 2 -)
		neg = tag&3 == 2
	} else {
		s := int64(tag)
		if s < 0 {
			neg, s = true, -s
		}
		ndigits = uint64(s)
	}
	if ndigits > 3 {
		return 0, false, nil
	}
	var u uint64
	for i := uint64(0); i < ndigits; i++ {
		d := uint64(le32(hdr, o.l.LongDigits+4*i))
		if i == 2 && d > 0xf {
			return 0, false, nil
		}
		u |= d << (30 * i)
	}
	if neg {
		if u > 1<<63 {
			return 0, false, nil
		}
		return -int64(u), true, nil
	}
	if u > math.MaxInt64 {
		return int64(u), false, nil
	}
	return int64(u), true, nil
}

// ulong reads a non-negative int up to 2^64-1 (thread idents are pthread_t).
func (o *objReader) ulong(addr uint64) (uint64, error) {
	hdr := make([]byte, o.l.LongDigits+12)
	if err := o.mem.Read(addr, hdr); err != nil {
		return 0, err
	}
	return o.ulongFrom(hdr)
}

// ulongFrom decodes an int from its first LongDigits+12 bytes.
func (o *objReader) ulongFrom(hdr []byte) (uint64, error) {
	tag := le64(hdr, o.l.LongTag)
	var n uint64
	if o.l.Version.atLeast(12) {
		if tag&3 == 2 {
			return 0, errors.New("negative int")
		}
		n = tag >> 3
	} else {
		if int64(tag) < 0 {
			return 0, errors.New("negative int")
		}
		n = tag
	}
	if n > 3 {
		return 0, errors.New("int wider than 64 bits")
	}
	var u uint64
	for i := uint64(0); i < n; i++ {
		u |= uint64(le32(hdr, o.l.LongDigits+4*i)) << (30 * i)
	}
	return u, nil
}

// dictEntry is one key/value pair of a dict.
type dictEntry struct{ key, value uint64 }

const maxDictEntries = 1 << 16

// dictKeysEntries reads the entries of a PyDictKeysObject. For split tables
// values are NULL and come from the values array.
func (o *objReader) dictKeysEntries(keys uint64) ([]dictEntry, error) {
	var entriesAt, n, esize uint64
	if o.l.Version.Minor == 10 {
		hdr := make([]byte, 40)
		if err := o.mem.Read(keys, hdr); err != nil {
			return nil, err
		}
		size := le64(hdr, 8)
		n = le64(hdr, 32)
		if size == 0 || size > maxDictEntries*2 || size&(size-1) != 0 || n > size {
			return nil, fmt.Errorf("dict keys at 0x%x: implausible size %d / %d entries", keys, size, n)
		}
		ix := uint64(8)
		switch {
		case size <= 0xff:
			ix = 1
		case size <= 0xffff:
			ix = 2
		case size <= 0xffffffff:
			ix = 4
		}
		entriesAt, esize = keys+40+size*ix, 24
	} else {
		hdr := make([]byte, 32)
		if err := o.mem.Read(keys, hdr); err != nil {
			return nil, err
		}
		log2Size, log2Index, kind := hdr[8], hdr[9], hdr[10]
		n = le64(hdr, 24)
		if log2Size > 17 || log2Index > 20 || n > 1<<log2Size {
			return nil, fmt.Errorf("dict keys at 0x%x: implausible log2 size %d / %d entries", keys, log2Size, n)
		}
		esize = 16 // PyDictUnicodeEntry {key, value}
		if kind == 0 {
			esize = 24 // PyDictKeyEntry {hash, key, value}
		}
		entriesAt = keys + 32 + 1<<log2Index
	}
	if n > maxDictEntries {
		return nil, fmt.Errorf("dict keys at 0x%x: %d entries", keys, n)
	}
	raw := make([]byte, n*esize)
	if err := o.mem.Read(entriesAt, raw); err != nil {
		return nil, err
	}
	out := make([]dictEntry, n)
	for i := uint64(0); i < n; i++ {
		e := raw[i*esize:]
		if esize == 24 {
			out[i] = dictEntry{binary.LittleEndian.Uint64(e[8:]), binary.LittleEndian.Uint64(e[16:])}
		} else {
			out[i] = dictEntry{binary.LittleEndian.Uint64(e[0:]), binary.LittleEndian.Uint64(e[8:])}
		}
	}
	return out, nil
}

// valuesBase is where the PyObject* array starts in a PyDictValues.
func (o *objReader) valuesBase(values uint64) uint64 {
	if o.l.Version.atLeast(13) {
		return values + 8 // {capacity, size, embedded, valid, pad} then values[]
	}
	return values
}

// dictItems reads a dict's live items (NULL values skipped).
func (o *objReader) dictItems(dict uint64) ([]dictEntry, error) {
	hdr := make([]byte, o.l.DictValues+8)
	if err := o.mem.Read(dict, hdr); err != nil {
		return nil, err
	}
	if o.types.dict != 0 && le64(hdr, o.l.ObType) != o.types.dict {
		return nil, fmt.Errorf("dict at 0x%x: %w", dict, errWrongType)
	}
	ents, err := o.dictKeysEntries(le64(hdr, o.l.DictKeys))
	if err != nil {
		return nil, err
	}
	if values := le64(hdr, o.l.DictValues); values != 0 {
		if err := o.fillSplitValues(ents, values); err != nil {
			return nil, err
		}
	}
	out := ents[:0]
	for _, e := range ents {
		if e.key != 0 && e.value != 0 {
			out = append(out, e)
		}
	}
	return out, nil
}

func (o *objReader) fillSplitValues(ents []dictEntry, values uint64) error {
	if len(ents) == 0 {
		return nil
	}
	raw := make([]byte, 8*len(ents))
	if err := o.mem.Read(o.valuesBase(values), raw); err != nil {
		return err
	}
	for i := range ents {
		ents[i].value = binary.LittleEndian.Uint64(raw[8*i:])
	}
	return nil
}

// dictGetStr finds a str key in a dict by comparing key text.
func (o *objReader) dictGetStr(dict uint64, key string) (uint64, error) {
	items, err := o.dictItems(dict)
	if err != nil {
		return 0, err
	}
	return o.findStrKey(items, key)
}

func (o *objReader) findStrKey(items []dictEntry, key string) (uint64, error) {
	addrs := make([]uint64, len(items))
	for i, e := range items {
		addrs[i] = e.key
	}
	texts := o.keyTexts(addrs)
	for _, e := range items {
		if texts[e.key] == key {
			return e.value, nil
		}
	}
	return 0, fmt.Errorf("key %q not found", key)
}

// Type flags (Include/object.h).
const (
	tpflagsInlineValues = 1 << 2 // 3.13+
	tpflagsManagedDict  = 1 << 4 // 3.11+
)

// typeHeader reads what getAttr needs of a type object.
func (o *objReader) typeHeader(tp uint64) ([]byte, error) {
	if o.memo != nil {
		if b, ok := o.memo.types[tp]; ok {
			return b, nil
		}
	}
	thdr := make([]byte, max(o.l.TypeDictOffset, o.l.TypeFlags, o.l.TypeBasicSize)+8)
	if err := o.mem.Read(tp, thdr); err != nil {
		return nil, err
	}
	if o.memo != nil {
		o.memo.types[tp] = thdr
	}
	return thdr, nil
}

// cachedKeys reads a heap type's shared keys table pointer.
func (o *objReader) cachedKeys(tp uint64) (uint64, error) {
	if o.memo != nil {
		if k, ok := o.memo.cached[tp]; ok {
			return k, nil
		}
	}
	k, err := o.u64(tp + o.l.HeapCachedKeys)
	if err == nil && o.memo != nil {
		o.memo.cached[tp] = k
	}
	return k, err
}

// sharedEntries reads a shared keys table's entries.
func (o *objReader) sharedEntries(keys uint64) ([]dictEntry, error) {
	if o.memo != nil {
		if e, ok := o.memo.entries[keys]; ok {
			return e, nil
		}
	}
	e, err := o.dictKeysEntries(keys)
	if err == nil && o.memo != nil {
		o.memo.entries[keys] = e
	}
	return e, err
}

// getAttr reads an instance attribute from the object's __dict__ or, on
// 3.11+, its managed dict / inline values.
func (o *objReader) getAttr(obj uint64, name string) (uint64, error) {
	tp, err := o.typeOf(obj)
	if err != nil {
		return 0, err
	}
	thdr, err := o.typeHeader(tp)
	if err != nil {
		return 0, err
	}
	flags := le64(thdr, o.l.TypeFlags)
	if o.l.Version.Minor == 10 || flags&tpflagsManagedDict == 0 {
		off := int64(le64(thdr, o.l.TypeDictOffset))
		if off <= 0 || off > maxStructSize {
			return 0, fmt.Errorf("object at 0x%x has no instance dict", obj)
		}
		d, err := o.u64(obj + uint64(off))
		if err != nil || d == 0 {
			return 0, fmt.Errorf("object at 0x%x: no __dict__", obj)
		}
		return o.dictGetStr(d, name)
	}
	cached, err := o.cachedKeys(tp)
	if err != nil {
		return 0, err
	}
	fromValues := func(values uint64) (uint64, error) {
		i, err := o.sharedIndex(cached, name)
		if err != nil {
			return 0, err
		}
		return o.u64(o.valuesBase(values) + 8*uint64(i))
	}
	switch o.l.Version.Minor {
	case 11:
		if d, err := o.u64(obj - 24); err == nil && d != 0 {
			return o.dictGetStr(d, name)
		}
		v, err := o.u64(obj - 32)
		if err != nil || v == 0 {
			return 0, fmt.Errorf("object at 0x%x: no values", obj)
		}
		return fromValues(v)
	case 12:
		dv, err := o.u64(obj - 24)
		if err != nil || dv == 0 {
			return 0, fmt.Errorf("object at 0x%x: no dict or values", obj)
		}
		if dv&1 != 0 { // 3.12 stores values as (char*)values - 1 (pycore_object.h)
			return fromValues(dv + 1)
		}
		return o.dictGetStr(dv, name)
	default:
		if d, err := o.u64(obj - o.l.ManagedDictBack); err == nil && d != 0 {
			return o.dictGetStr(d, name)
		}
		if flags&tpflagsInlineValues == 0 {
			return 0, fmt.Errorf("object at 0x%x: no dict", obj)
		}
		values := obj + le64(thdr, o.l.TypeBasicSize)
		var valid [4]byte
		if err := o.mem.Read(values, valid[:]); err != nil {
			return 0, err
		}
		if valid[3] == 0 {
			return 0, fmt.Errorf("object at 0x%x: inline values invalidated", obj)
		}
		return fromValues(values)
	}
}
