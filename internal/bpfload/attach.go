package bpfload

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Links are attached programs, detached together.
type Links []link.Link

// Close detaches every program (the maps stay readable).
func (l *Links) Close() {
	for _, k := range *l {
		_ = k.Close()
	}
	*l = nil
}

// Attach attaches prog to the tracepoint tp the way its type asks: a
// tracing program (SEC "tp_btf/tp", typed by the kernel's BTF) through
// BPF_TRACE_RAW_TP with its own attach target, any other by name as a raw
// tracepoint (SEC "raw_tp/tp"; no tracefs, no kprobes). at says which
// ("tp_btf/sched_switch", "raw_tp/sched_switch"). Callers that fall back
// from tp_btf to raw_tp load the raw_tp program when the first load fails.
func Attach(prog *ebpf.Program, tp string) (l link.Link, at string, err error) {
	if prog == nil {
		return nil, tp, fmt.Errorf("can't attach to %s: no program loaded", tp)
	}
	if prog.Type() == ebpf.Tracing {
		at = "tp_btf/" + tp
		l, err = link.AttachTracing(link.TracingOptions{Program: prog})
	} else {
		at = "raw_tp/" + tp
		l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp, Program: prog})
	}
	if err != nil {
		return nil, at, Explain("attach a BPF program to "+at, err)
	}
	return l, at, nil
}

// AttachSyscalls attaches exit to the raw tracepoint sys_exit, then enter
// to sys_enter: an exit without its enter is what the programs already
// handle (a call in progress at the attach), an enter without its exit
// would stay in their per-thread maps.
func AttachSyscalls(enter, exit *ebpf.Program) (Links, error) {
	var ls Links
	for _, p := range []struct {
		prog *ebpf.Program
		tp   string
	}{{exit, "sys_exit"}, {enter, "sys_enter"}} {
		l, _, err := Attach(p.prog, p.tp)
		if err != nil {
			ls.Close()
			return nil, err
		}
		ls = append(ls, l)
	}
	return ls, nil
}
