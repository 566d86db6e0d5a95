package session

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestFlagError: a value the flag parser cannot read is said in one line
// naming the flag and the form it takes, never strconv's or time's text;
// a -p value keeps its own words.
func TestFlagError(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"--sites --", `invalid value "--" for --sites: want a whole number`},
		{"-F abc", `invalid value "abc" for -F/--freq: want a whole number`},
		{"-d 5x", `invalid value "5x" for -d/--duration: want a duration such as 500ms, 5s or 2m`},
		{"--native=maybe", `invalid value "maybe" for --native: want true or false`},
		{"--ratio x", `invalid value "x" for --ratio: want a number`},
		{"--count -1", `invalid value "-1" for --count: want a whole number, 0 or more`},
		{"-p 12x", `invalid pid "12x": -p takes a process id (a number, 1 or more)`},
	} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		fs.SetOutput(new(strings.Builder))
		var pid int
		fs.VarP(PidFlag(&pid, nil), "pid", "p", "")
		fs.Int("sites", 0, "")
		fs.IntP("freq", "F", 99, "")
		fs.DurationP("duration", "d", time.Second, "")
		fs.Bool("native", false, "")
		fs.Float64("ratio", 1, "")
		fs.Uint("count", 0, "")
		err := fs.Parse(strings.Fields(c.args))
		if err == nil {
			t.Fatalf("%s: parsed", c.args)
		}
		if got := FlagError(err).Error(); got != c.want {
			t.Errorf("%s: %q, want %q", c.args, got, c.want)
		}
	}
}
