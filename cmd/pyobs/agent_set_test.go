//go:build amd64

package main

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/testutil"
)

var pidRoot = regexp.MustCompile(`^\[pid (\d+)\] `)

// TestAgentPyroscopeChildren: agent -p PARENT --children on a Pool(3)
// whose workers burn CPU: the windows that reach the ingest API carry
// each worker's samples with its "[pid N]" process label, in burn, in proportion
// to the CPU the worker itself measured (within a third), and the start
// line names the set.
func TestAgentPyroscopeChildren(t *testing.T) {
	testutil.RequireRoot(t)
	requireKernelWalker(t)
	py := testutil.Find(t, "pyenv-3.12")
	var g ingest
	g.serve(t, "127.0.0.1:0")
	truth := filepath.Join(t.TempDir(), "truth")
	se := attachToPool(t, poolArgv(py, truth, "fork", "2.0", "stdin"),
		"agent", "--children", "--window", "1s", "-F", "99", "--pyroscope", "http://"+g.ln.Addr().String(), "--service", "pool")
	if !strings.Contains(se, "and the rest of its set (children; stacks rooted at their process)") {
		t.Errorf("start line does not name the set:\n%s", se)
	}
	tr := readPoolTruth(t, truth)
	for _, e := range g.errs {
		t.Errorf("receiver: %s", e)
	}
	inBurn := map[int]int64{}
	var total int64
	for _, q := range g.requests() {
		for _, s := range q.prof.Sample {
			// pprof has the set's process root as the sample's "process" label.
			var m []string
			if l := s.Label["process"]; len(l) == 1 {
				m = pidRoot.FindStringSubmatch(l[0])
			}
			if m == nil {
				t.Errorf("a sample without its process (labels %v, %d locations)", s.Label, len(s.Location))
				return
			}
			pid, _ := strconv.Atoi(m[1])
			total += s.Value[0]
			for _, l := range s.Location {
				if len(l.Line) > 0 && l.Line[0].Function.Name == "burn" {
					inBurn[pid] += s.Value[0]
					break
				}
			}
		}
	}
	var cpu float64
	for _, v := range tr.workers {
		cpu += v[0]
	}
	t.Logf("%d samples; in burn by worker %v; the workers' own burn CPU %v", total, inBurn, tr.workers)
	for pid, v := range tr.workers {
		got := float64(inBurn[pid]) / float64(max(total, 1))
		share := v[0] / cpu
		if inBurn[pid] == 0 || got < share*2/3 || got > share*4/3+0.1 {
			t.Errorf("worker %d: %d samples in burn (%.2f of all), its own share of the burn CPU %.2f", pid, inBurn[pid], got, share)
		}
	}
}
