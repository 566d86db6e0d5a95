package export

import (
	"context"
	"sort"
	"time"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/report"
)

// Window is one rolling window of observation, exported then dropped.
type Window struct {
	Seq        uint64
	Start, End time.Time
	CPU        *flame.Profile // CPU samples (nil when the recording failed)
	OffCPU     *flame.Profile // off-CPU microseconds (nil unless asked for, or not due in this window)
	// OffStart: the off-CPU profile spans OffStart and its
	// Meta.DurationS, several windows (its engine's start is paid once per
	// span, not per window); it ended in this window.
	OffStart time.Time
	Stat     *report.Stat // stat's counters and verdicts (nil when stat failed)
	Resource *Resource
}

// Resource says whose windows these are: OTLP's resource attributes,
// Pyroscope's name{labels}, Prometheus's constant labels.
type Resource struct {
	ServiceName    string
	HostName       string
	Pid            int
	Command        string // the program the process runs (argv[0])
	RuntimeVersion string // the Python version, e.g. 3.12.4
	Labels         []Label
}

// Label is one --label k=v.
type Label struct{ Key, Value string }

// SortLabels orders labels by key (stable exports: the same series every window).
func SortLabels(l []Label) {
	sort.SliceStable(l, func(i, j int) bool { return l[i].Key < l[j].Key })
}

// Sink takes a window somewhere. Export may be slow or fail: the Queue in
// front of it retries and drops, never the agent.
type Sink interface {
	Name() string // e.g. "otlp http://127.0.0.1:4318/v1development/profiles"
	Export(ctx context.Context, w *Window) error
}
