package offcpu

import "strings"

// InterruptPrefix starts the waker label of a wake-up made in interrupt
// context: "[interrupt: KIND] while NAME (TID, …) ran" or "[interrupt:
// KIND] on an idle CPU". The thread named is the one the interrupt
// happened to interrupt: it did not wake anybody.
const InterruptPrefix = "[interrupt: "

// WakerUnknown starts the waker label of a wake-up whose kernel stack was
// not taken: the task that ran, or an interrupt it ran, woke the thread.
const WakerUnknown = "[waker's stack not taken: the task or an interrupt] "

// interruptOf names the interrupt a waker's kernel stack (names, root
// first) shows the wake-up was made in — "timer", "device", "IPI",
// "network softirq", … — or "" when it was made in task context. The
// innermost handler frame decides: code below a hard IRQ's handler
// (__sysvec_*, __common_interrupt, handle_irq_event), a softirq's
// (handle_softirqs) or a timer callback (hrtimer_wakeup, process_timeout,
// which run only from the timer interrupt or its softirq) runs in that
// interrupt. An interrupt's entry frame alone (asm_sysvec_*) proves
// nothing: its return path runs task work — signal delivery, preemption —
// in the interrupted task's context under the same entry frame.
func interruptOf(names []string) string {
	for i := len(names) - 1; i >= 0; i-- {
		if k := handlerKind(names[i]); k != "" {
			return k
		}
	}
	return ""
}

// handlerKind: the interrupt a kernel function runs in, when it runs only
// in one.
func handlerKind(fn string) string {
	switch fn {
	case "hrtimer_wakeup", "__hrtimer_run_queues", "hrtimer_interrupt", "hrtimer_run_softirq",
		"hrtimer_run_queues", "tick_handle_periodic", "process_timeout", "call_timer_fn",
		"run_timer_softirq", "__run_timers", "__sysvec_apic_timer_interrupt":
		return "timer"
	case "net_rx_action", "net_tx_action":
		return "network softirq"
	case "blk_done_softirq", "blk_complete_reqs":
		return "block softirq"
	case "rcu_core", "rcu_core_si":
		return "RCU softirq"
	case "tasklet_action", "tasklet_hi_action", "tasklet_action_common":
		return "tasklet"
	case "handle_softirqs", "__do_softirq", "__irq_exit_rcu", "irq_exit_rcu":
		return "softirq"
	case "__common_interrupt", "handle_irq_event", "handle_edge_irq", "handle_fasteoi_irq", "handle_level_irq":
		return "device"
	case "default_do_nmi", "exc_nmi":
		return "NMI"
	case "__sysvec_call_function", "__sysvec_call_function_single", "__sysvec_reschedule_ipi",
		"generic_smp_call_function_single_interrupt", "__flush_smp_call_function_queue":
		return "IPI"
	}
	if strings.HasPrefix(fn, "__sysvec_") {
		return strings.TrimPrefix(fn, "__sysvec_")
	}
	return ""
}

// interruptLabel is the waker label of a wake-up made in interrupt kind
// while ran (its label, "" for the idle task) was on the CPU.
func interruptLabel(kind, ran string) string {
	if ran == "" {
		return InterruptPrefix + kind + "] on an idle CPU"
	}
	return InterruptPrefix + kind + "] while " + ran + " ran"
}

// InterruptKind is the "[interrupt: KIND]" part of a waker label made by
// interruptLabel, "" for a thread's.
func InterruptKind(waker string) string {
	if !strings.HasPrefix(waker, InterruptPrefix) {
		return ""
	}
	if i := strings.Index(waker, "]"); i > 0 {
		return waker[:i+1]
	}
	return ""
}
