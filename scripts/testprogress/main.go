// Command testprogress runs `go test -json ARGS...` and prints its progress
// as it goes: one line per top-level test when it ends (result, package,
// name, time), the whole output of a test that fails (or of every test
// still running when its package fails, e.g. on a timeout), and go test's
// own package lines ("ok  pkg 12.3s", "FAIL pkg", "?  pkg [no test
// files]", build errors) unchanged, so that the end reads as go test's
// summary. Its exit status is go test's. `make test` uses it: a plain
// `go test ./...` is silent for minutes.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

func main() {
	cmd := exec.Command("go", append([]string{"test", "-json"}, os.Args[1:]...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testprogress:", err)
		os.Exit(1)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testprogress: can't run go test:", err)
		os.Exit(1)
	}
	p := &progress{w: bufio.NewWriter(os.Stdout), logs: map[string]*strings.Builder{}}
	p.run(out)
	err = cmd.Wait()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		os.Exit(ee.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "testprogress:", err)
		os.Exit(1)
	}
}

type progress struct {
	w    *bufio.Writer
	logs map[string]*strings.Builder // package + top-level test → its output so far
}

func (p *progress) run(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			fmt.Fprintln(p.w, sc.Text()) // not an event: go test's own line
		} else {
			p.event(e)
		}
		p.w.Flush()
	}
}

func (p *progress) event(e event) {
	if e.Test == "" {
		switch e.Action {
		case "output", "build-output":
			if strings.HasPrefix(e.Output, "FAIL") {
				p.unended(e.Package) // before the package's FAIL line: that stays last
			}
			fmt.Fprint(p.w, e.Output)
		case "fail":
			p.unended(e.Package)
		}
		return
	}
	top, _, _ := strings.Cut(e.Test, "/")
	key := e.Package + " " + top
	if e.Action == "output" {
		b := p.logs[key]
		if b == nil {
			b = &strings.Builder{}
			p.logs[key] = b
		}
		b.WriteString(e.Output)
		return
	}
	if e.Test != top {
		return // a subtest's end: its top-level test's line says it
	}
	switch e.Action {
	case "pass", "skip", "fail":
		fmt.Fprintf(p.w, "%-4s %s %s (%.2fs)\n", strings.ToUpper(e.Action), e.Package, e.Test, e.Elapsed)
		if e.Action == "fail" {
			if b := p.logs[key]; b != nil {
				fmt.Fprint(p.w, b.String())
			}
		}
		delete(p.logs, key)
	}
}

// unended prints the output of a failed package's tests that never ended
// (a timeout, a crash).
func (p *progress) unended(pkg string) {
	for key, b := range p.logs {
		if strings.HasPrefix(key, pkg+" ") {
			fmt.Fprintf(p.w, "FAIL %s %s did not end; its output:\n%s", pkg, strings.TrimPrefix(key, pkg+" "), b.String())
			delete(p.logs, key)
		}
	}
}
