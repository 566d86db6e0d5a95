package flame

import (
	"strings"
	"testing"
)

// TestFormatForUnknownExtension: a name's extension picks the format; an
// extension no format claims is an error naming it, never a silent SVG.
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
		if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "--format") {
			t.Errorf("FormatFor(%q): %q does not name the file and --format", path, msg)
		}
	}
}
