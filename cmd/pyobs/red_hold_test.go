package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/red"
	"github.com/pyobs/pyobs/internal/testutil"
)

// selfClient serves HTTP in a forked child and, at once, makes N requests
// to it from the parent, all within a millisecond or two of its exec —
// before a probe attached after the start could be on — then prints its
// port and count and exits. C, not Python: an interpreter's start alone
// takes longer than the probe's attach.
const selfClient = `
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
	int n = atoi(argv[1]);
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 8) || getsockname(ls, (struct sockaddr *)&a, &al))
		return 2;
	pid_t kid = fork();
	if (kid == 0) { /* the server: one keep-alive connection, one answer per request */
		int c = accept(ls, 0, 0);
		char buf[4096];
		const char *ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
		for (int i = 0; i < n; i++) {
			if (read(c, buf, sizeof buf) <= 0)
				_exit(3);
			write(c, ok, strlen(ok));
		}
		_exit(0);
	}
	int c = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(c, (struct sockaddr *)&a, sizeof a))
		return 4;
	char req[64], buf[256];
	for (int i = 0; i < n; i++) {
		int l = snprintf(req, sizeof req, "GET /x/%d HTTP/1.1\r\nHost: x\r\n\r\n", i);
		write(c, req, l);
		if (read(c, buf, sizeof buf) <= 0)
			return 5;
	}
	waitpid(kid, 0, 0);
	printf("PORT %d DONE %d\n", ntohs(a.sin_port), n);
	return 0;
}
`

// TestRedHeldCommand: red -- CMD holds CMD before its exec until the
// programs are attached: the requests it makes right at its start are all
// counted (the command's own count is the truth).
func TestRedHeldCommand(t *testing.T) {
	testutil.RequireRoot(t)
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		testutil.Skip(t, "gcc is not installed (apt-get install gcc): can't build the test's client")
	}
	dir := t.TempDir()
	src, bin, out := filepath.Join(dir, "self.c"), filepath.Join(dir, "self"), filepath.Join(dir, "red.json")
	if err := os.WriteFile(src, []byte(selfClient), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(gcc, "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	r := testutil.Run(t, 60*time.Second, "red", "--format", "json", "-o", out, "--", bin, "40")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	var port, n int
	for _, l := range strings.Split(r.Stdout+"\n"+r.Stderr, "\n") {
		if strings.HasPrefix(l, "PORT ") {
			if _, err := fmt.Sscanf(l, "PORT %d DONE %d", &port, &n); err != nil {
				t.Fatalf("bad line %q", l)
			}
		}
	}
	if n != 40 {
		t.Fatalf("the command did not report its 40 requests:\n%s\n%s", r.Stdout, r.Stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res red.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, b)
	}
	if p := findPort(t, &res, port); p.Requests != uint64(n) {
		t.Errorf("red counted %d requests on port %d, the command made %d (all within its first moments)", p.Requests, port, n)
	}
}
