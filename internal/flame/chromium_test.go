package flame

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pyobs/pyobs/internal/testutil"
)

// chromiumScenario drives the SVG's own script the way a user would and
// records what the page shows. The test script runs right after the SVG's
// script (both run while the document is parsed); CONFIG is replaced by
// the scenario's JSON.
const chromiumScenario = `(function () {
var C = CONFIG, svg = document.querySelector('svg.pyobs-flame'), out = { errors: window.__pyobsErrors || [] };
function frame(l) { return [].filter.call(svg.querySelectorAll('g.frame'), function (g) { return g.getAttribute('data-label') == l; })[0]; }
function width(l) { var g = frame(l); return g ? +g.querySelector('rect').getAttribute('width') : -1; }
function hidden(l) { var g = frame(l); return !g || getComputedStyle(g).display == 'none'; }
function fire(el, ev) { el.dispatchEvent(ev); }
try {
  var inp = svg.querySelector('input.search');
  out.search = {};
  C.search.forEach(function (t) {
    inp.value = t; fire(inp, new Event('input', { bubbles: true }));
    out.search[t] = { matched: svg.querySelector('.matched').textContent, n: svg.querySelectorAll('g.frame.match').length };
  });
  inp.value = ''; fire(inp, new Event('input', { bubbles: true }));
  out.cleared = svg.querySelector('.matched').textContent + '|' + svg.querySelectorAll('g.frame.match').length;
  var r = frame(C.click).querySelector('rect');
  out.before = width(C.click); out.ancestorBefore = width(C.ancestor); out.siblingBefore = hidden(C.sibling);
  out.resetBefore = getComputedStyle(svg.querySelector('.reset')).display != 'none';
  fire(r, new MouseEvent('mouseover', { bubbles: true }));
  out.status = svg.querySelector('.status').textContent;
  fire(r, new MouseEvent('click', { bubbles: true }));
  out.after = width(C.click); out.ancestorAfter = width(C.ancestor); out.siblingAfter = hidden(C.sibling);
  out.resetAfter = getComputedStyle(svg.querySelector('.reset')).display != 'none';
  out.text = frame(C.click).querySelector('text').textContent;
  fire(document, new KeyboardEvent('keydown', { key: 'Escape', bubbles: true }));
  out.reset = width(C.click); out.siblingReset = hidden(C.sibling);
  var lv = svg.querySelector('g.level[data-depth="0"]');
  out.transformBefore = lv.getAttribute('transform');
  fire(svg.querySelector('.toggle'), new MouseEvent('click', { bubbles: true }));
  out.transformAfter = lv.getAttribute('transform');
  out.toggleText = svg.querySelector('.toggle').textContent;
} catch (e) { out.errors.push(String(e && e.stack || e)); }
var t = document.createElementNS('http://www.w3.org/2000/svg', 'text');
t.setAttribute('id', 'pyobs-test-result');
t.textContent = encodeURIComponent(JSON.stringify(out));
svg.appendChild(t);
})();`

// Collects script errors, including the SVG's own; inserted first.
const chromiumErrorCatcher = `window.__pyobsErrors = []; window.addEventListener('error', function (e) { window.__pyobsErrors.push(String(e.message)); });`

type chromiumConfig struct {
	Search   []string `json:"search"`
	Click    string   `json:"click"`
	Ancestor string   `json:"ancestor"`
	Sibling  string   `json:"sibling"`
}

type chromiumResult struct {
	Errors []string
	Search map[string]struct {
		Matched string
		N       int
	}
	Cleared                         string
	Before, After, Reset            float64 // the clicked frame's width
	AncestorBefore, AncestorAfter   float64
	SiblingBefore, SiblingAfter     bool // hidden?
	SiblingReset                    bool
	ResetBefore, ResetAfter         bool // reset button shown?
	Status, Text                    string
	TransformBefore, TransformAfter string
	ToggleText                      string
}

func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	return ""
}

// runChromium loads the SVG (standalone, or inlined in an HTML page) with
// the scenario injected, in headless Chromium, and returns what the
// scenario recorded in the DOM.
func runChromium(t *testing.T, bin string, svg []byte, cfg chromiumConfig, html bool) chromiumResult {
	t.Helper()
	cj, _ := json.Marshal(cfg)
	doc := string(svg)
	open := strings.Index(doc, "<svg ")
	openEnd := open + strings.Index(doc[open:], ">") + 1
	closeAt := strings.LastIndex(doc, "</svg>")
	doc = doc[:openEnd] + "\n<script><![CDATA[" + chromiumErrorCatcher + "]]></script>" +
		doc[openEnd:closeAt] +
		"<script><![CDATA[\n" + strings.Replace(chromiumScenario, "CONFIG", string(cj), 1) + "\n]]></script>\n" + doc[closeAt:]
	name := "flame.svg"
	if html {
		name = "flame.html"
		doc = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>pyobs</title></head><body>\n" +
			doc[open:] + "</body></html>\n"
	}
	dir := t.TempDir()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	js := testutil.ChromiumResult(t, bin, path, "pyobs-test-result")
	var r chromiumResult
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatalf("%v: %s", err, js)
	}
	if len(r.Errors) > 0 {
		t.Fatalf("script errors: %v", r.Errors)
	}
	return r
}

// TestSVGInChromium opens the SVG in a real browser (standalone and inlined
// in HTML) and uses it: search highlights and reports matched % with each
// sample counted once under recursion, hover fills the status line, a click
// zooms (the frame fills the width, ancestors stay, siblings hide), Escape
// resets, the toggle flips flame and icicle.
func TestSVGInChromium(t *testing.T) {
	bin := findChromium()
	if bin == "" {
		testutil.Skip(t, "no chromium to load the SVG in a browser (Debian: apt-get install -y chromium)")
	}
	simple := New(Meta{Command: "record", Mode: "cpu", Unit: "samples", Samples: 100})
	f := func(name string) Frame { return Frame{Kind: Python, Function: name, File: "t.py", Line: 1} }
	simple.Add([]Frame{f("main"), f("work"), f("leaf")}, 30)
	simple.Add([]Frame{f("main"), f("work"), f("work"), f("leaf")}, 20)
	simple.Add([]Frame{f("main"), f("other")}, 50)

	cases := []struct {
		name    string
		p       *Profile
		cfg     chromiumConfig
		matched map[string]string // search term → "matched: X%"
		nMatch  map[string]int
		status  string
	}{
		{"simple", simple, chromiumConfig{
			Search: []string{"work", "w.rk \\(", "leaf", "^main ", "(", "nothing"},
			Click:  "other (t.py:1)", Ancestor: "main (t.py:1)", Sibling: "work (t.py:1)"},
			map[string]string{"work": "matched: 50.00%", "w.rk \\(": "matched: 50.00%", "leaf": "matched: 50.00%",
				"^main ": "matched: 100.00%", "(": "matched: 100.00%", "nothing": "matched: 0.00%"},
			map[string]int{"work": 2, "leaf": 2, "^main ": 1, "(": 6, "nothing": 0},
			"other (t.py:1) \u2014 50 samples (50.00%)"},
		{"fixture", fixture("samples"), chromiumConfig{
			Search: []string{"fib", "處理", "ünïcode", "_\\[k\\]$"},
			Click:  "Ünïcode.méthod (ünïcode.py:7)", Ancestor: "<module> (app.py:30)", Sibling: "fib (app.py:3)"},
			map[string]string{"fib": "matched: 42.00%", "處理": "matched: 45.00%", "ünïcode": "matched: 8.00%", "_\\[k\\]$": "matched: 5.00%"},
			map[string]int{"fib": 4, "處理": 2},
			"Ünïcode.méthod (ünïcode.py:7) \u2014 80 samples (8.00%)"},
	}
	for _, tc := range cases {
		// The expectations are what matchedShare computes from the profile
		// (a term that is no regex, like "(", is a substring).
		for term, want := range tc.matched {
			re, err := regexp.Compile(term)
			if err != nil {
				re = regexp.MustCompile(regexp.QuoteMeta(term))
			}
			if got := fmt.Sprintf("matched: %.2f%%", matchedShare(tc.p, re)); got != want {
				t.Fatalf("%s: expectation for %q is %s, the profile says %s", tc.name, term, want, got)
			}
		}
		var b bytes.Buffer
		if err := WriteSVG(&b, tc.p, SVGOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, html := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/html=%v", tc.name, html), func(t *testing.T) {
				r := runChromium(t, bin, b.Bytes(), tc.cfg, html)
				for term, want := range tc.matched {
					if got := r.Search[term].Matched; got != want {
						t.Errorf("search %q: %q, want %q", term, got, want)
					}
				}
				for term, n := range tc.nMatch {
					if got := r.Search[term].N; got != n {
						t.Errorf("search %q highlights %d frames, want %d", term, got, n)
					}
				}
				if r.Cleared != "|0" {
					t.Errorf("clearing the search left %q", r.Cleared)
				}
				if r.Status != tc.status {
					t.Errorf("hover status %q, want %q", r.Status, tc.status)
				}
				if r.Before >= svgFrameW-1 || r.After != svgFrameW || r.Reset != r.Before {
					t.Errorf("clicked frame width %.2f → %.2f → (Escape) %.2f; want it to fill %d px and come back", r.Before, r.After, r.Reset, svgFrameW)
				}
				if r.AncestorAfter != svgFrameW {
					t.Errorf("ancestor width %.2f after zoom, want %d", r.AncestorAfter, svgFrameW)
				}
				if r.SiblingBefore || !r.SiblingAfter || r.SiblingReset {
					t.Errorf("sibling hidden: %v → %v → %v; want false → true → false", r.SiblingBefore, r.SiblingAfter, r.SiblingReset)
				}
				if r.ResetBefore || !r.ResetAfter {
					t.Errorf("reset button shown before/after zoom: %v/%v", r.ResetBefore, r.ResetAfter)
				}
				if r.Text == "" {
					t.Error("zoomed frame shows no text")
				}
				if r.TransformAfter != fmt.Sprintf("translate(0,%d)", svgTop) || r.TransformBefore == r.TransformAfter || r.ToggleText != "Flame" {
					t.Errorf("toggle: root level %q → %q, button %q", r.TransformBefore, r.TransformAfter, r.ToggleText)
				}
			})
		}
	}
}
