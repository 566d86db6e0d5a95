package procfs

import "testing"

func TestParseSchedstat(t *testing.T) {
	for _, c := range []struct {
		in string
		n  uint64
		ok bool
	}{
		{"899862251 962681311 3212\n", 899862251, true},
		{"0 0 0", 0, true},
		{"", 0, false},
		{"12 34", 0, false},
		{"-5 1 1", 0, false},
		{"x 1 1", 0, false},
	} {
		st, err := ParseSchedstat(c.in)
		if st.RunNs != c.n || (err == nil) != c.ok {
			t.Errorf("%q: %d %v, want %d %v", c.in, st.RunNs, err, c.n, c.ok)
		}
	}
}

func TestTaskSchedstatFixture(t *testing.T) {
	fs := fixtureFS(t, "proc")
	st, err := fs.TaskSchedstat(4242, 4243)
	if err != nil {
		t.Fatal(err)
	}
	if st.RunNs == 0 {
		t.Errorf("%+v", st)
	}
	if _, err := fs.TaskSchedstat(4242, 1); err == nil {
		t.Error("a missing thread has a schedstat")
	}
}

func FuzzParseSchedstat(f *testing.F) {
	f.Add("899862251 962681311 3212\n")
	f.Add("-5 1 1")
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseSchedstat(s)
		if err != nil && st != (Schedstat{}) {
			t.Fatalf("%q: error with a value %+v", s, st)
		}
	})
}
