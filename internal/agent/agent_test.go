package agent

import "testing"

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
