package export

import (
	"encoding/binary"
	"testing"
)

// pbField encodes one length-delimited or varint field.
func pbField(num int, v any) []byte {
	var b []byte
	switch x := v.(type) {
	case uint64:
		b = binary.AppendUvarint(b, uint64(num)<<3)
		b = binary.AppendUvarint(b, x)
	case []byte:
		b = binary.AppendUvarint(b, uint64(num)<<3|2)
		b = binary.AppendUvarint(b, uint64(len(x)))
		b = append(b, x...)
	}
	return b
}

func TestPartialSuccess(t *testing.T) {
	inner := append(pbField(1, uint64(3)), pbField(2, []byte("too old"))...)
	msg := append(pbField(9, uint64(1)), pbField(1, inner)...) // an unknown field first
	rej, why, err := partialSuccess(grpcFrame(msg))
	if err != nil || rej != 3 || why != "too old" {
		t.Fatalf("partialSuccess = %d, %q, %v", rej, why, err)
	}
	if rej, _, err := partialSuccess(grpcFrame(nil)); err != nil || rej != 0 {
		t.Errorf("empty response: %d, %v", rej, err)
	}
	if rej, _, err := partialSuccess(nil); err != nil || rej != 0 {
		t.Errorf("no body: %d, %v", rej, err)
	}
	bad := [][]byte{{1, 0, 0, 0, 0}, {0, 0, 0, 0, 9, 1}, grpcFrame([]byte{0x0a, 0x05, 1}), grpcFrame([]byte{0x0f})}
	for _, b := range bad {
		if _, _, err := partialSuccess(b); err == nil {
			t.Errorf("partialSuccess(%x): no error", b)
		}
	}
}

func FuzzPartialSuccess(f *testing.F) {
	f.Add(grpcFrame(pbField(1, append(pbField(1, uint64(3)), pbField(2, []byte("x"))...))))
	f.Add([]byte{0, 0, 0, 0, 2, 8, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, why, err := partialSuccess(b)
		if err == nil && len(why) > len(b) {
			t.Fatalf("a message of %d bytes from %d", len(why), len(b))
		}
	})
}
