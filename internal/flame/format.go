package flame

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
)

// A format is a name, the file names that imply it, and a writer. Adding an
// output is one entry here; commands never switch on formats themselves.
type format struct {
	name     string
	suffixes []string // longest first where one ends another (.speedscope.json before .json)
	binary   bool     // not for a terminal: needs -o FILE
	write    func(io.Writer, *Profile, WriteOptions) error
}

var formats = []format{
	{name: "svg", suffixes: []string{".svg"}, write: func(w io.Writer, p *Profile, o WriteOptions) error {
		return WriteSVG(w, p, SVGOptions{Title: o.Title, Icicle: o.Icicle})
	}},
	{name: "folded", suffixes: []string{".folded", ".txt", ".collapsed"}, write: func(w io.Writer, p *Profile, _ WriteOptions) error { return WriteFolded(w, p) }},
	{name: "pprof", suffixes: []string{".pb.gz", ".pb", ".pprof"}, binary: true, write: func(w io.Writer, p *Profile, _ WriteOptions) error { return WritePprof(w, p) }},
	{name: "speedscope", suffixes: []string{".speedscope.json"}, write: func(w io.Writer, p *Profile, _ WriteOptions) error { return WriteSpeedscope(w, p) }},
	{name: "gecko", suffixes: []string{".gecko.json"}, write: func(w io.Writer, p *Profile, _ WriteOptions) error { return WriteGecko(w, p) }},
	{name: "json", suffixes: []string{".json"}, write: writeJSONAccount},
}

// WriteOptions carry what a format needs beyond the profile.
type WriteOptions struct {
	Title  string // svg
	Icicle bool   // svg: roots at the top
	// JSON is the engine's own JSON document (its account and heaviest
	// stacks); nil writes the generic one (schema, meta, totals, top).
	JSON any
}

// Formats are the names of the profile formats, in the order help lists them.
func Formats() []string {
	out := make([]string, len(formats))
	for i, f := range formats {
		out[i] = f.name
	}
	return out
}

// FormatFor is the format a file name implies: svg for stdout ("" or "-")
// and for a name without an extension; an error naming the extension and
// the formats when the name has one that no format claims (x.png is not
// silently an SVG).
func FormatFor(path string) (string, error) {
	p := strings.ToLower(path)
	// Compound suffixes first: .speedscope.json is not plain .json.
	best, bestLen := "svg", 0
	for _, f := range formats {
		for _, s := range f.suffixes {
			if strings.HasSuffix(p, s) && len(s) > bestLen {
				best, bestLen = f.name, len(s)
			}
		}
	}
	if ext := filepath.Ext(p); bestLen == 0 && ext != "" && path != "-" {
		return "", fmt.Errorf("can't tell the format of %s from its extension %s (known: %s)",
			path, ext, strings.Join(suffixes(), " "))
	}
	return best, nil
}

func suffixes() []string {
	var l []string
	for _, f := range formats {
		l = append(l, f.suffixes...)
	}
	return l
}

// Known reports whether name is a profile format.
func Known(name string) bool { return lookup(name) != nil }

// Binary reports whether a format must go to a file, not a terminal.
func Binary(name string) bool {
	f := lookup(name)
	return f != nil && f.binary
}

// Write renders p in the named format.
func Write(w io.Writer, name string, p *Profile, o WriteOptions) error {
	f := lookup(name)
	if f == nil {
		return fmt.Errorf("unknown profile format %q (%s)", name, strings.Join(Formats(), ", "))
	}
	return f.write(w, p, o)
}

func lookup(name string) *format {
	for i := range formats {
		if formats[i].name == name {
			return &formats[i]
		}
	}
	return nil
}

// TopStack is one of a profile's heaviest stacks, in folded form.
type TopStack struct {
	Stack   string  `json:"stack"`
	Weight  int64   `json:"weight"`
	Percent float64 `json:"percent"`
}

// Top lists up to n of the heaviest stacks that keep says to keep (nil:
// all), heaviest first; percentages are of the whole profile.
func Top(p *Profile, n int, keep func(*Stack) bool) []TopStack {
	stacks := p.Stacks()
	sort.SliceStable(stacks, func(i, j int) bool { return stacks[i].Weight > stacks[j].Weight })
	total := p.Total()
	var out []TopStack
	for _, s := range stacks {
		if len(out) == n {
			break
		}
		if keep != nil && !keep(s) {
			continue
		}
		out = append(out, TopStack{p.FoldedKey(s), s.Weight, 100 * float64(s.Weight) / float64(max(total, 1))})
	}
	return out
}

// writeJSONAccount writes o.JSON when the engine supplies its document,
// else the generic account: meta, totals and the 50 heaviest stacks.
func writeJSONAccount(w io.Writer, p *Profile, o WriteOptions) error {
	doc := o.JSON
	if doc == nil {
		doc = Account(p)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// AccountJSON is the generic JSON document of a profile; an engine embeds
// it in its own document to add a section.
type AccountJSON struct {
	Schema int        `json:"schema"`
	Meta   Meta       `json:"meta"`
	Total  int64      `json:"total"`
	Stacks int        `json:"unique_stacks"`
	Top    []TopStack `json:"top"`
}

// Account is the generic JSON document of p.
func Account(p *Profile) AccountJSON {
	return AccountJSON{Schema: 1, Meta: p.Meta, Total: p.Total(), Stacks: p.NumStacks(), Top: Top(p, 50, nil)}
}
