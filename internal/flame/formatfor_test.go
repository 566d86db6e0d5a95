package flame

import (
	"bytes"
	"strings"
	"testing"
)

// TestFormatForUnknownExtension: a name's extension picks the format; an
// extension no format claims is an error naming it and the known ones,
// never a silent SVG.
func TestFormatForUnknownExtension(t *testing.T) {
	for path, want := range map[string]string{"": "svg", "-": "svg", "out": "svg", "/tmp/a.b/out": "svg", "p.SVG": "svg",
		"p.pb.gz": "pprof", "p.speedscope.json": "speedscope", "p.json": "json", "p.folded": "folded"} {
		if got, err := FormatFor(path); got != want || err != nil {
			t.Errorf("FormatFor(%q) = %q, %v; want %q", path, got, err, want)
		}
	}
	for _, path := range []string{"x.unknownext", "p.png", "dir/p.svgz"} {
		got, err := FormatFor(path)
		if err == nil || got != "" {
			t.Errorf("FormatFor(%q) = %q, %v; want an error", path, got, err)
			continue
		}
		// The known extensions, not a flag: each caller's flags differ
		// (record's -o takes --format; red's --profile has none).
		if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, ".speedscope.json") || strings.Contains(msg, "--format") {
			t.Errorf("FormatFor(%q): %q does not name the file and the known extensions alone", path, msg)
		}
	}
}

// TestSVGHeaderLate (issue #16 edge 12): the SVG's account line carries
// the late count (and read lag, moved) that record's text footer has.
func TestSVGHeaderLate(t *testing.T) {
	p := fixture("samples")
	p.Meta.Samples, p.Meta.Late, p.Meta.ReadLagUS, p.Meta.Moved = 73934, 66336, 204, 1906
	var b bytes.Buffer
	if err := WriteSVG(&b, p, SVGOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"late 66,336 (89.72%) (mean read lag 204 µs)", "moved 1,906"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("SVG lacks %q", w)
		}
	}
}
