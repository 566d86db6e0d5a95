package bpfload

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// AttachPerCPU opens one software sampling event (config: a
// PERF_COUNT_SW_* clock, named by what in errors) per online CPU, counting
// every task — a program that filters by tgid then samples threads born
// later from their first tick — at freq samples per second of CPU time,
// hands each prog and enables them. The caller closes the fds (that
// detaches the program); on an error, those opened so far are returned too.
func AttachPerCPU(prog *ebpf.Program, config uint64, freq int, what string) ([]int, error) {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("can't count CPUs: %w", err)
	}
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: config,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: uint64(freq),
		Bits:   unix.PerfBitFreq | unix.PerfBitDisabled,
	}
	var fds []int
	for cpu := 0; cpu < n; cpu++ {
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if errors.Is(err, unix.ENODEV) {
			continue // offline CPU
		}
		if err != nil {
			return fds, fmt.Errorf("can't open a %s event on cpu %d: %w", what, cpu, err)
		}
		fds = append(fds, fd)
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog.FD()); err != nil {
			return fds, fmt.Errorf("can't attach the program to the %s event on cpu %d: %w", what, cpu, err)
		}
	}
	for _, fd := range fds {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return fds, fmt.Errorf("can't enable a %s event (fd %d): %w", what, fd, err)
		}
	}
	return fds, nil
}
