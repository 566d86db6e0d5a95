package diagnose

import (
	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/report"
)

// Schema is the version of the diagnose JSON document (docs/json.md).
const Schema = 1

// Verdicts.
const (
	VerdictOnCPU     = "on-cpu"
	VerdictOffCPU    = "off-cpu"
	VerdictThrottled = "cpu-throttled"
	VerdictRunqueue  = "runqueue"
	VerdictMixed     = "mixed"
	VerdictIdle      = "idle"
	VerdictStopped   = "stopped"
)

// Phase names, in the order the procedure runs them.
const (
	PhaseCount  = "count"
	PhaseCPU    = "on-cpu"
	PhaseOffCPU = "off-cpu"
	PhaseTrace  = "trace"
	PhasePython = "python"
)

// Report is `pyobs diagnose`'s document.
type Report struct {
	Schema   int    `json:"schema"`
	Pid      int    `json:"pid"`
	Python   string `json:"python,omitempty"`
	Verdict  string `json:"verdict"`
	Decision string `json:"decision"` // the decision after counting, with its evidence
	// Complete is false when the run was cut short (Ctrl-C, the target
	// exited, a phase failed): the report holds the phases done.
	Complete   bool        `json:"complete"`
	Interrupt  string      `json:"interrupted,omitempty"`
	BudgetS    float64     `json:"budget_s"`
	ElapsedS   float64     `json:"elapsed_s"`
	Plan       []PlanItem  `json:"plan"`
	Findings   []Finding   `json:"findings"`
	RuledOut   []RuledOut  `json:"ruled_out"`
	Phases     []Phase     `json:"phases"`
	Skipped    []Skipped   `json:"skipped"`
	Counters   Counters    `json:"counters"`
	Hottest    []Hot       `json:"hottest"`
	Waits      []Wait      `json:"waits"`
	Syscalls   []Syscall   `json:"syscalls"`
	Threads    []PyThread  `json:"python_threads"`
	Tasks      []Task      `json:"asyncio_tasks"`
	Notes      []string    `json:"notes"`
	Total      PhaseTotals `json:"total"`
	CannotSee  []string    `json:"cannot_see"`
	Hypothesis string      `json:"hypothesis,omitempty"` // phase 4's, when it ran

	// The phases' own documents, for the HTML report (not in the JSON).
	Stat       *report.Stat   `json:"-"`
	CPUProfile *flame.Profile `json:"-"`
	OffProfile *flame.Profile `json:"-"`
}

// PlanItem is one phase's share of the -d budget, decided before it runs.
type PlanItem struct {
	Phase   string  `json:"phase"`
	BudgetS float64 `json:"budget_s"`
}

// Finding is one thing found, with its number and the command that
// reproduces it. Weight orders the findings (the share of the target's
// time it accounts for; a verdict weighs 1).
type Finding struct {
	Phase    string         `json:"phase"`
	Kind     string         `json:"kind"`
	Summary  string         `json:"summary"`
	Evidence map[string]any `json:"evidence"`
	Command  string         `json:"command"`
	Weight   float64        `json:"weight"`
}

// RuledOut is a cause the evidence excludes, and that evidence.
type RuledOut struct {
	What     string `json:"what"`
	Evidence string `json:"evidence"`
}

// Phase is one phase that ran and its price.
type Phase struct {
	Name           string  `json:"name"`
	Mechanism      string  `json:"mechanism"`
	Price          string  `json:"price"` // counting, sampling, tracing, introspection
	DurationS      float64 `json:"duration_s"`
	BudgetS        float64 `json:"budget_s"`
	ObserverCPUS   float64 `json:"observer_cpu_s"`
	TargetStoppedS float64 `json:"target_stopped_s"`
	Error          string  `json:"error,omitempty"`
}

// Skipped is a phase the procedure did not run, and why.
type Skipped struct {
	Phase string `json:"phase"`
	Why   string `json:"why"`
}

// PhaseTotals is the price of the whole run: the sum of the phases'.
type PhaseTotals struct {
	DurationS      float64 `json:"duration_s"`
	ObserverCPUS   float64 `json:"observer_cpu_s"`
	TargetStoppedS float64 `json:"target_stopped_s"`
}

// Counters are phase 1's numbers the decision reads.
type Counters struct {
	WindowS            float64  `json:"window_s"`
	Utilization        float64  `json:"utilization"`
	UserS              float64  `json:"user_s"`
	SystemS            float64  `json:"system_s"`
	Voluntary          uint64   `json:"voluntary_ctxt_switches"`
	Nonvoluntary       uint64   `json:"nonvoluntary_ctxt_switches"`
	RunqueueWaitS      float64  `json:"runqueue_wait_s"`
	RunqueueShare      float64  `json:"runqueue_wait_share"`
	Cgroup             string   `json:"cgroup"`
	NrPeriods          uint64   `json:"nr_periods"`
	NrThrottled        uint64   `json:"nr_throttled"`
	ThrottledS         float64  `json:"throttled_s"`
	QuotaCores         *float64 `json:"quota_cores"`
	CPUPressureSomePct *float64 `json:"cpu_pressure_some_pct"`
	RSSBytes           uint64   `json:"rss_bytes"`
	RSSDeltaBytes      int64    `json:"rss_delta_bytes"`
	Threads            int      `json:"threads"`
	StatVerdicts       []string `json:"stat_verdicts"`
}

// Hot is an on-CPU hot spot: the innermost Python frame of the samples,
// per function (the line is the function's hottest).
type Hot struct {
	Function string  `json:"function"`
	File     string  `json:"file"`
	Line     int     `json:"line"`
	Percent  float64 `json:"percent"`
	Samples  int64   `json:"samples"`
}

// Wait is an off-CPU wait: class and innermost Python frame, summed over
// threads, with the thread that woke it most often (by time).
type Wait struct {
	Class    string  `json:"class"`
	Function string  `json:"function"`
	File     string  `json:"file"`
	Line     int     `json:"line"`
	Seconds  float64 `json:"seconds"`
	Threads  int     `json:"threads"`
	Waker    string  `json:"waker,omitempty"`
}

// Syscall is phase 4's row for one traced call.
type Syscall struct {
	Name       string  `json:"name"`
	Calls      uint64  `json:"calls"`
	Errors     uint64  `json:"errors"`
	TotalS     float64 `json:"total_s"`
	P50US      float64 `json:"p50_us"`
	P99US      float64 `json:"p99_us"`
	InProgress int     `json:"in_progress"` // calls still blocked at the end of the trace
	Site       string  `json:"site,omitempty"`
}

// PyThread is one thread of phase 5's dump: its innermost frames.
type PyThread struct {
	Tid      int      `json:"tid"`
	Name     string   `json:"name"`
	State    string   `json:"state"`
	HoldsGIL bool     `json:"holds_gil"`
	Frames   []string `json:"frames"` // innermost first, at most 8
}

// Task is one asyncio task of phase 5.
type Task struct {
	Name      string `json:"name"`
	Coroutine string `json:"coroutine"`
	Awaiting  string `json:"awaiting,omitempty"`
}
