package pyframes

import "testing"

// Expected strings are CPython's repr() of the same values.
func TestPyFloat(t *testing.T) {
	cases := map[float64]string{
		1.5: "1.5", 0: "0.0", -2: "-2.0", 1e16: "1e+16", 1e15: "1000000000000000.0", 1e-5: "1e-05",
		0.0001: "0.0001", 1234567.5: "1234567.5", 0.1: "0.1", 1.0 / 3: "0.3333333333333333",
		-1.25e-7: "-1.25e-07", 123456789012345678: "1.2345678901234568e+17", 2.5e100: "2.5e+100",
	}
	for in, want := range cases {
		if got := pyFloat(in); got != want {
			t.Errorf("pyFloat(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestPyRepr(t *testing.T) {
	cases := map[string]string{"hi": "'hi'", "it's": `"it's"`, "a\nb": `'a\nb'`, "ünï": "'ünï'", `a'b"c`: `'a\'b"c'`, "\x01": `'\x01'`}
	for in, want := range cases {
		if got := pyRepr(in); got != want {
			t.Errorf("pyRepr(%q) = %s, want %s", in, got, want)
		}
	}
	if got := pyBytesRepr([]byte("ab\x00'\xff")); got != `b"ab\x00'\xff"` {
		t.Errorf("pyBytesRepr = %s", got)
	}
	if got := pyBytesRepr([]byte(`'"`)); got != `b'\'"'` {
		t.Errorf("pyBytesRepr = %s", got)
	}
}
