package procfs

import (
	"bytes"
	"os"
	"strconv"
)

// MemLayout is what /proc/PID/stat says of a process's memory layout: its
// code, stack, data, heap, argument and environment addresses. An exec
// builds a new mm at new random addresses: another MemLayout.
type MemLayout [10]uint64

// memLayoutFields are those addresses' places among the fields after the
// comm (0 is field 3, state): startcode, endcode, startstack are fields
// 26-28, start_data..env_end 45-51 (proc(5)).
var memLayoutFields = [10]int{23, 24, 25, 42, 43, 44, 45, 46, 47, 48}

// MemLayout reads pid's memory layout; ok false when the process is gone
// or has no memory left (exiting, a zombie: every address 0), which is
// not another program.
func (f FS) MemLayout(pid int) (l MemLayout, ok bool) {
	b, err := os.ReadFile(f.pidPath(pid, "stat"))
	if err != nil {
		return l, false
	}
	return parseMemLayout(b)
}

func parseMemLayout(b []byte) (l MemLayout, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return l, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) <= memLayoutFields[len(memLayoutFields)-1] {
		return l, false
	}
	for k, j := range memLayoutFields {
		l[k], _ = strconv.ParseUint(string(f[j]), 10, 64)
	}
	return l, l != MemLayout{}
}
