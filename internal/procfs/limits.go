package procfs

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseNofile finds "Max open files" in /proc/PID/limits and returns its
// soft and hard limits (math.MaxUint64 for "unlimited"). prometheus/procfs
// reads only the soft limits; fd-pressure wants both.
func ParseNofile(s string) (soft, hard uint64, err error) {
	for _, line := range strings.Split(s, "\n") {
		rest, ok := strings.CutPrefix(line, "Max open files")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			return 0, 0, fmt.Errorf("limits: short line %q", trunc(line))
		}
		if soft, err = parseLimit(f[0]); err != nil {
			return 0, 0, err
		}
		if hard, err = parseLimit(f[1]); err != nil {
			return 0, 0, err
		}
		return soft, hard, nil
	}
	return 0, 0, fmt.Errorf("limits: no \"Max open files\" line")
}

func parseLimit(s string) (uint64, error) {
	if s == "unlimited" {
		return math.MaxUint64, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("limits: bad value %q", trunc(s))
	}
	return v, nil
}
