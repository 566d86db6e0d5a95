package remoteexec

import (
	"strings"
	"testing"
)

func TestPyBytes(t *testing.T) {
	cases := map[string]string{
		"":                 `b""`,
		`print("a\b")`:     `b"print(\"a\\b\")"`,
		"x\n\ty\x00é":      `b"x\x0a\x09y\x00\xc3\xa9"`,
		"'''\"\"\"\\x41\r": `b"'''\"\"\"\\x41\x0d"`,
	}
	for in, want := range cases {
		if got := pyBytes([]byte(in)); got != want {
			t.Errorf("pyBytes(%q) = %s, want %s", in, got, want)
		}
	}
}

// The wrapper carries the paths and source as escaped literals only: a
// quote or newline in them cannot end the literal and inject code.
func TestWrapperSourceLiterals(t *testing.T) {
	src := wrapperSource("/tmp/d/body-1.py", "/tmp/d/lock", "/tmp/d/out-1", "/tmp/d/done-1", "evil\")\nimport os#", []byte("\"\"\"\n'''"), map[string]string{"k\"": "v\n"})
	for _, bad := range []string{"evil\")\nimport", "\"\"\"\n'''"} {
		if strings.Contains(src, bad) {
			t.Errorf("raw %q in the wrapper:\n%s", bad, src)
		}
	}
}
