package offcpu

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/flame"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// greenFixture: an engine with an empty profile and a greenOff with no
// tracker (settle needs neither a process nor a tracker).
func greenFixture() (*engine, *greenOff) {
	e := &engine{prof: flame.New(flame.Meta{Command: "offcpu", Unit: "microseconds"}), frameIDs: map[[2]uint64]int{}}
	g := &greenOff{labels: map[string]int{}, st: GreenletStats{Supported: true, Reasons: map[string]uint64{}}}
	return e, g
}

func parkedAt(e *engine, g *greenOff, name, where string) gparked {
	ids := []int{g.label(e, "[greenlet] main"), g.label(e, "[greenlet] Hub"), g.label(e, "[greenlet] "+name),
		e.prof.Intern(flame.Frame{Kind: flame.Python, Function: name, File: "app.py", Line: 1}),
		e.prof.Intern(flame.Frame{Kind: flame.Python, Function: where, File: "hub.py", Line: 2})}
	return gparked{key: name + "@" + where, ids: ids}
}

func folded(p *flame.Profile) string {
	var b bytes.Buffer
	if err := flame.Write(&b, "folded", p, flame.WriteOptions{}); err != nil {
		panic(err)
	}
	return b.String()
}

// TestGreenletSettle: the attribution rule, wait by wait (times in ns).
func TestGreenletSettle(t *testing.T) {
	const main, hub = 0x100, 0x200
	cases := []struct {
		name   string
		scans  func(e *engine, g *greenOff) []gscan
		a, b   int64
		final  bool
		wait   bool   // not settled yet
		folded string // the profile after it
		reason string
	}{
		{name: "a scan inside the wait is exact", a: 100, b: 500,
			scans: func(e *engine, g *greenOff) []gscan {
				return []gscan{
					{t0: 10, t1: 20, parked: map[uint64]map[uint64]gparked{main: {1: parkedAt(e, g, "x", "sleep")}}},
					{t0: 200, t1: 300, parked: map[uint64]map[uint64]gparked{main: {1: parkedAt(e, g, "x", "sleep"), 2: parkedAt(e, g, "y", "wait")}}},
				}
			},
			folded: "[greenlet] main;[greenlet] Hub;[greenlet] x;x (app.py:1);sleep (hub.py:2);[greenlet wait] 400\n" +
				"[greenlet] main;[greenlet] Hub;[greenlet] y;y (app.py:1);wait (hub.py:2);[greenlet wait] 400\n"},
		{name: "both scans around agree", a: 100, b: 500,
			scans: func(e *engine, g *greenOff) []gscan {
				return []gscan{
					{t0: 10, t1: 20, parked: map[uint64]map[uint64]gparked{main: {1: parkedAt(e, g, "x", "sleep"), 2: parkedAt(e, g, "y", "wait")}}},
					{t0: 490, t1: 600, parked: map[uint64]map[uint64]gparked{main: {1: parkedAt(e, g, "x", "sleep"), 2: parkedAt(e, g, "y", "elsewhere")}}},
				}
			},
			folded: "[greenlet] main;[greenlet] Hub;[greenlet] x;x (app.py:1);sleep (hub.py:2);[greenlet wait] 400\n"},
		{name: "not yet: no scan after it", a: 100, b: 500,
			scans: func(e *engine, g *greenOff) []gscan {
				return []gscan{{t0: 10, t1: 20, parked: map[uint64]map[uint64]gparked{main: {1: parkedAt(e, g, "x", "sleep")}}}}
			},
			wait: true},
		{name: "the end: no scan after it", a: 100, b: 500, final: true,
			scans: func(e *engine, g *greenOff) []gscan {
				return []gscan{{t0: 10, t1: 20, parked: map[uint64]map[uint64]gparked{main: {1: parkedAt(e, g, "x", "sleep")}}}}
			},
			reason: ReasonNoScanAfter},
		{name: "no scan before it", a: 100, b: 500,
			scans: func(e *engine, g *greenOff) []gscan {
				return []gscan{{t0: 600, t1: 700, parked: map[uint64]map[uint64]gparked{}}}
			},
			reason: ReasonNoScanBefore},
		{name: "changed between scans", a: 100, b: 500,
			scans: func(e *engine, g *greenOff) []gscan {
				return []gscan{
					{t0: 10, t1: 20, parked: map[uint64]map[uint64]gparked{main: {1: parkedAt(e, g, "x", "sleep")}}},
					{t0: 490, t1: 600, parked: map[uint64]map[uint64]gparked{main: {2: parkedAt(e, g, "y", "wait")}}},
				}
			},
			reason: ReasonChanged},
		{name: "a failed scan", a: 100, b: 500,
			scans: func(e *engine, g *greenOff) []gscan {
				return []gscan{
					{t0: 10, t1: 20, failed: true},
					{t0: 490, t1: 600, parked: map[uint64]map[uint64]gparked{main: {2: parkedAt(e, g, "y", "wait")}}},
				}
			},
			reason: ReasonScanFailed},
		{name: "nothing parked", a: 100, b: 500,
			scans: func(e *engine, g *greenOff) []gscan {
				return []gscan{{t0: 10, t1: 20, parked: map[uint64]map[uint64]gparked{}}, {t0: 490, t1: 600, parked: map[uint64]map[uint64]gparked{}}}
			},
			reason: ReasonNoneParked},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, g := greenFixture()
			g.scans = c.scans(e, g)
			hubIDs := []int{g.label(e, "[greenlet] main"), g.label(e, "[greenlet] Hub"), e.prof.Intern(flame.Frame{Kind: flame.Python, Function: "Hub.run", File: "hub.py", Line: 3})}
			// µs weights: the wait is (b-a) ns, folded as (b-a)/1000 µs.
			w := hubWait{tid: 1, main: main, hub: hub, a: c.a * 1000, b: c.b * 1000, ids: hubIDs, class: ClassNet}
			for i := range g.scans {
				g.scans[i].t0 *= 1000
				g.scans[i].t1 *= 1000
			}
			done := g.settle(e, w, c.final)
			if done == c.wait {
				t.Fatalf("settled %v, want %v", done, !c.wait)
			}
			got := folded(e.prof)
			want := c.folded
			if c.reason != "" {
				want = "[greenlet] main;[greenlet] Hub;Hub.run (hub.py:3);[hub wait: greenlets not told: " + c.reason + "];[network/poll] 400\n"
				if g.st.Reasons[c.reason] != 1 || g.st.Unattributed != 1 {
					t.Errorf("reasons %v, unattributed %d", g.st.Reasons, g.st.Unattributed)
				}
			}
			if got != want {
				t.Errorf("profile:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestGreenletPrune: old scans go, but not the one before a pending wait.
func TestGreenletPrune(t *testing.T) {
	_, g := greenFixture()
	sec := int64(1e9)
	for i := int64(0); i < 100; i++ {
		g.scans = append(g.scans, gscan{t0: i * sec, t1: i*sec + sec/100})
	}
	g.pending = []hubWait{{a: 20*sec + sec/2, b: 99 * sec}}
	g.prune(100 * sec)
	if g.scans[0].t0 != 20*sec {
		t.Fatalf("kept scans from %d s, want 20 s (the scan before the pending wait)", g.scans[0].t0/sec)
	}
	g.pending = nil
	g.prune(100 * sec)
	if len(g.scans) != 60 || g.scans[0].t0 != 40*sec {
		t.Fatalf("kept %d scans from %d s, want 60 from 40 s", len(g.scans), g.scans[0].t0/sec)
	}
	g.prune(1000 * sec)
	if len(g.scans) != 1 || g.scans[0].t0 != 99*sec {
		t.Fatalf("kept %d scans, want the last one", len(g.scans))
	}
}

// TestGreenletReportGolden: the text section and the footer line of
// --greenlets (and of an unknown layout).
func TestGreenletReportGolden(t *testing.T) {
	for _, c := range []struct {
		file string
		st   *GreenletStats
	}{
		{"greenlets.golden", &GreenletStats{Supported: true, Version: "3.5.6", Rooted: 41, Unknown: 1, Changed: 2, Unreadable: 3,
			HubWaits: 21, HubWaitS: 2.017, Attributed: 19, AttributedS: 1.9, Exact: 5, GreenletWaitS: 59.1,
			Unattributed: 2, UnattributedS: 0.117, Reasons: map[string]uint64{ReasonChanged: 1, ReasonNoScanBefore: 1},
			Uncertain: 9, UncertainS: 0.45, Scans: 13, ScansFailed: 1, ScanPeriodMS: 315, ScanMS: 12.8, SumExceedsWall: true}},
		{"greenlets-unknown-layout.golden", &GreenletStats{Note: "greenlet 0.0.0-fake on CPython 3.12: layout unknown (known: 3.5.6): waits not rooted at greenlets"}},
	} {
		var b bytes.Buffer
		r := &Result{Greenlets: c.st}
		writeGreenletText(&b, r)
		b.WriteString(GreenletFooter(r) + "\n")
		path := filepath.Join("testdata", c.file)
		if *update {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update)", err)
		}
		if b.String() != string(want) {
			t.Errorf("%s:\n%s\nwant:\n%s", c.file, b.String(), want)
		}
	}
	// Without --greenlets: nothing.
	var b bytes.Buffer
	writeGreenletText(&b, &Result{})
	if b.Len() != 0 || GreenletFooter(&Result{}) != "" {
		t.Errorf("output without --greenlets: %q", b.String())
	}
	if strings.Contains(GreenletFooter(&Result{Greenlets: &GreenletStats{Supported: true}}), "\n") {
		t.Error("the footer is more than one line")
	}
}
