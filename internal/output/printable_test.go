package output

import "testing"

// TestPrintable: what a terminal acts on is escaped, printable text of any
// script is kept.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"handler":                     "handler",
		"Клиент.обработать":           "Клиент.обработать",
		"évènement_处理":                "évènement_处理",
		"evil\x1b]0;pwned\x07\x1b[2J": `evil\x1b]0;pwned\x07\x1b[2J`,
		"/x/\x1b[31mred.py":           `/x/\x1b[31mred.py`,
		"a\nb\tc\x7f":                 `a\x0ab\x09c\x7f`,
		"abc\u202edcba.py":            `abc\u202edcba.py`,
		"zero\u200bwidth":             `zero\u200bwidth`,
		"c1\u0085":                    `c1\x85`,
		"bad\xffutf8":                 `bad\xffutf8`,
		// Not printable by Python's repr either: separators, spaces
		// other than ' ', unassigned and private code points.
		"line\u2028sep\u2029":        `line\u2028sep\u2029`,
		"nb\u00a0sp\u3000":           `nb\xa0sp\u3000`,
		"un\u0378assigned\U0010ffff": `un\u0378assigned\U0010ffff`,
		"emoji 🐍 and e\u0301":        "emoji 🐍 and e\u0301",
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzPrintable(f *testing.F) {
	f.Add("evil\x1b]0;x\x07")
	f.Add("ok")
	f.Fuzz(func(t *testing.T, s string) {
		out := Printable(s)
		for _, r := range out {
			if unsafeRune(r) {
				t.Fatalf("Printable(%q) = %q keeps %U", s, out, r)
			}
		}
		if Printable(out) != out {
			t.Fatalf("printable is not idempotent on %q", out)
		}
	})
}
