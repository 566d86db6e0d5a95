package export

import (
	"bufio"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// promText writes Prometheus's text exposition format (version 0.0.4):
// per family a HELP and a TYPE line, then its samples, each with the
// agent's constant labels first. Written here rather than through a client
// library: the agent's few families need no registry, and a library's
// package initialisation cost every pyobs command ~1.5 ms at start
// (GODEBUG=inittrace=1).
type promText struct {
	w     *bufio.Writer
	fixed string // the constant labels, rendered: `k="v",…` (sorted), "" when none
}

// promLabel is one label of a sample.
type promLabel struct{ name, value string }

func newPromText(w io.Writer, cl map[string]string) *promText {
	keys := make([]string, 0, len(cl))
	for k := range cl {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteString(`="`)
		b.WriteString(escapeLabel(cl[k]))
		b.WriteByte('"')
	}
	return &promText{w: bufio.NewWriter(w), fixed: b.String()}
}

// family starts a metric family: typ is counter, gauge or histogram.
func (p *promText) family(name, help, typ string) {
	p.w.WriteString("# HELP " + name + " " + escapeHelp(help) + "\n")
	p.w.WriteString("# TYPE " + name + " " + typ + "\n")
}

// sample writes one sample of the current family.
func (p *promText) sample(name string, v float64, labels ...promLabel) {
	p.w.WriteString(name)
	if p.fixed != "" || len(labels) > 0 {
		p.w.WriteByte('{')
		p.w.WriteString(p.fixed)
		for i, l := range labels {
			if i > 0 || p.fixed != "" {
				p.w.WriteByte(',')
			}
			p.w.WriteString(l.name + `="` + escapeLabel(l.value) + `"`)
		}
		p.w.WriteByte('}')
	}
	p.w.WriteByte(' ')
	p.w.WriteString(promFloat(v))
	p.w.WriteByte('\n')
}

// histogram writes one histogram series: cumulative counts per upper
// bound (the last one, +Inf, is the count), and the sum.
func (p *promText) histogram(name string, bounds []float64, cumulative []uint64, sum float64, labels ...promLabel) {
	with := func(extra promLabel) []promLabel {
		return append(append(make([]promLabel, 0, len(labels)+1), labels...), extra)
	}
	for i, le := range bounds {
		p.sample(name+"_bucket", float64(cumulative[i]), with(promLabel{"le", promFloat(le)})...)
	}
	n := cumulative[len(bounds)]
	p.sample(name+"_bucket", float64(n), with(promLabel{"le", "+Inf"})...)
	p.sample(name+"_sum", sum, labels...)
	p.sample(name+"_count", float64(n), labels...)
}

func (p *promText) flush() error { return p.w.Flush() }

func promFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
