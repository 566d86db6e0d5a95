package trace

import (
	"fmt"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pyobs/pyobs/internal/procfs"
)

// syscallNumbers maps names to x86_64 numbers.
func syscallNumbers() map[string]int {
	m := map[string]int{}
	for n := 0; n < 512; n++ {
		if s := procfs.SyscallName(n); !strings.HasPrefix(s, "syscall_") {
			m[s] = n
		}
	}
	return m
}

// ParseSyscalls turns -e's comma-separated names into numbers; "" is nil
// (every call). An unknown name is an error naming the closest known ones.
func ParseSyscalls(expr string) (map[int]bool, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, nil
	}
	nums := syscallNumbers()
	out := map[int]bool{}
	for _, name := range strings.Split(expr, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			// "openat,,close" or a trailing comma: a name lost to a typo.
			return nil, fmt.Errorf("trace: -e %q has an empty syscall name (names are comma-separated)", expr)
		}
		n, ok := nums[name]
		if !ok {
			var close []string
			for k := range nums {
				if strings.Contains(k, name) || strings.Contains(name, k) || editDistance(k, name) <= 2 {
					close = append(close, k)
				}
			}
			sort.Strings(close)
			if len(close) > 8 {
				close = close[:8]
			}
			hint := ""
			if len(close) > 0 {
				hint = " (did you mean " + strings.Join(close, ", ") + "?)"
			}
			return nil, fmt.Errorf("trace: unknown syscall %q%s", name, hint)
		}
		out[n] = true
	}
	return out, nil
}

func editDistance(a, b string) int {
	d := make([]int, len(b)+1)
	for j := range d {
		d[j] = j
	}
	for i := 1; i <= len(a); i++ {
		prev := d[0]
		d[0] = i
		for j := 1; j <= len(b); j++ {
			cur := d[j]
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[j] = min(d[j]+1, d[j-1]+1, prev+cost)
			prev = cur
		}
	}
	return d[len(b)]
}

// seccompList is the filter of a spawned trace with -e: only the traced
// calls stop (restart_syscall too: the rest of an interrupted sleep comes
// back as it). nil when every call is traced.
func seccompList(filter map[int]bool) []int {
	if filter == nil {
		return nil
	}
	var out []int
	for nr := range filter {
		out = append(out, nr)
	}
	sort.Ints(out)
	if !filter[unix.SYS_RESTART_SYSCALL] {
		out = append(out, unix.SYS_RESTART_SYSCALL)
	}
	return out
}
