package agent

import (
	"testing"
	"time"
)

func TestServiceName(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"/usr/bin/python3", "app.py"}, "app"},
		{[]string{"python3.12", "-u", "-X", "dev", "/srv/web/server.py", "--port", "80"}, "server"},
		{[]string{"python3", "-m", "http.server", "8000"}, "http.server"},
		{[]string{"python3", "-mgunicorn", "app:wsgi"}, "gunicorn"},
		{[]string{"python3", "-W", "ignore", "-B", "job.py"}, "job"},
		{[]string{"python3", "/srv/pkg/__main__.py"}, "pkg"},
		{[]string{"python3", "-c", "print(1)"}, ""},
		{[]string{"python3"}, ""},
		{[]string{"/usr/local/bin/celery", "worker"}, "celery"},
		{nil, ""},
	} {
		if got := ServiceName(c.argv); got != c.want {
			t.Errorf("ServiceName(%q) = %q, want %q", c.argv, got, c.want)
		}
	}
}

// TestLogOncePerSink: each sink's failure is said once a minute, whatever
// the others' (two Pyroscope sinks' errors shared one key, "export to
// pyroscope http", and only the first was ever said); a window's errors
// are one kind whatever the window.
func TestLogOncePerSink(t *testing.T) {
	var got []string
	a := &Agent{lastLog: map[string]time.Time{}}
	a.opt.Log = func(s string) { got = append(got, s) }
	for i := 0; i < 3; i++ {
		a.logf("export to %s: %v", "pyroscope http://127.0.0.1:1", "connection refused")
		a.logf("export to %s: %v", "pyroscope http://127.0.0.1:2", "500 Internal Server Error")
		a.logf("stat: window %d: %v", i, "gone")
	}
	if len(got) != 3 {
		t.Errorf("said %d lines, want one per sink and one for the windows: %q", len(got), got)
	}
}
