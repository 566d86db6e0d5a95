package offcpu

import (
	"strings"
	"testing"
)

// TestInterruptOf: the innermost handler frame of a waker's kernel stack
// (root first, as sched_waking's stack comes) says the wake-up was made in
// an interrupt; an interrupt's entry frame alone does not (its return path
// delivers signals in task context).
func TestInterruptOf(t *testing.T) {
	for _, c := range []struct {
		name, stack, want string
	}{
		{"timer in a running thread", "asm_sysvec_apic_timer_interrupt;sysvec_apic_timer_interrupt;__sysvec_apic_timer_interrupt;hrtimer_interrupt;__hrtimer_run_queues;hrtimer_wakeup;try_to_wake_up;bpf_trace_run1", "timer"},
		{"timer during a syscall", "entry_SYSCALL_64_after_hwframe;do_syscall_64;__x64_sys_clock_gettime;asm_sysvec_apic_timer_interrupt;sysvec_apic_timer_interrupt;__sysvec_apic_timer_interrupt;hrtimer_interrupt;__hrtimer_run_queues;hrtimer_wakeup;try_to_wake_up", "timer"},
		{"a lock release", "entry_SYSCALL_64_after_hwframe;do_syscall_64;__x64_sys_futex;do_futex;futex_wake;wake_up_q;try_to_wake_up;bpf_trace_run1", ""},
		{"signal delivery on an interrupt's return", "asm_sysvec_reschedule_ipi;irqentry_exit_to_user_mode;arch_do_signal_or_restart;get_signal;do_signal_stop;do_notify_parent_cldstop;__wake_up_parent;try_to_wake_up", ""},
		{"a packet in a timer interrupt's softirq", "asm_sysvec_apic_timer_interrupt;sysvec_apic_timer_interrupt;irq_exit_rcu;handle_softirqs;net_rx_action;__napi_poll;sock_def_readable;try_to_wake_up", "network softirq"},
		{"a device interrupt", "asm_common_interrupt;common_interrupt;__common_interrupt;handle_edge_irq;handle_irq_event;vring_interrupt;try_to_wake_up", "device"},
		{"irq work", "asm_sysvec_irq_work;sysvec_irq_work;__sysvec_irq_work;irq_work_run;try_to_wake_up", "irq_work"},
		{"no stack", "", ""},
	} {
		var names []string
		if c.stack != "" {
			names = strings.Split(c.stack, ";")
		}
		if got := interruptOf(names); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	l := interruptLabel("timer", "burner (12, this process)")
	if l != "[interrupt: timer] while burner (12, this process) ran" || InterruptKind(l) != "[interrupt: timer]" {
		t.Errorf("label %q, kind %q", l, InterruptKind(l))
	}
	if InterruptKind("holder (3, this process)") != "" || interruptLabel("timer", "") != "[interrupt: timer] on an idle CPU" {
		t.Error("a thread's label taken for an interrupt, or the idle label wrong")
	}
}
