package procfs

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// SmapsRollup is /proc/PID/smaps_rollup (Linux 4.14+; the Pss_* split since
// 5.9): the process's memory summed over all its mappings, in bytes.
// prometheus/procfs reads this file too but lacks Pss_Anon/Pss_File/Pss_Shmem,
// which say whose pages the proportional set is made of.
type SmapsRollup struct {
	Rss          uint64
	Pss          uint64
	PssAnon      uint64
	PssFile      uint64
	PssShmem     uint64
	PssDirty     uint64
	SharedClean  uint64
	SharedDirty  uint64
	PrivateClean uint64
	PrivateDirty uint64
	Anonymous    uint64
	Swap         uint64
	SwapPss      uint64
	// HasPssSplit: the kernel wrote Pss_Anon/Pss_File/Pss_Shmem (5.9+).
	HasPssSplit bool
}

// maxKB keeps kB→bytes from overflowing: anything above is garbage.
const maxKB = (1<<64 - 1) / 1024

// ParseSmapsRollup parses smaps_rollup. The first line (the address range
// and "[rollup]") is skipped; every "Key:   N kB" line after it must parse.
// Unknown keys are ignored. On error the result is the zero value.
func ParseSmapsRollup(r io.Reader) (SmapsRollup, error) {
	var s SmapsRollup
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64*1024)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if line == 1 && strings.Contains(text, "[rollup]") {
			continue
		}
		if strings.TrimSpace(text) == "" {
			continue
		}
		key, rest, ok := strings.Cut(text, ":")
		if !ok {
			return SmapsRollup{}, fmt.Errorf("smaps_rollup line %d: no key in %q", line, trunc(text))
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return SmapsRollup{}, fmt.Errorf("smaps_rollup line %d: want \"N kB\", got %q", line, trunc(rest))
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil || kb > maxKB {
			return SmapsRollup{}, fmt.Errorf("smaps_rollup line %d: bad size %q", line, trunc(f[0]))
		}
		v := kb * 1024
		switch key {
		case "Rss":
			s.Rss = v
		case "Pss":
			s.Pss = v
		case "Pss_Anon":
			s.PssAnon, s.HasPssSplit = v, true
		case "Pss_File":
			s.PssFile, s.HasPssSplit = v, true
		case "Pss_Shmem":
			s.PssShmem, s.HasPssSplit = v, true
		case "Pss_Dirty":
			s.PssDirty = v
		case "Shared_Clean":
			s.SharedClean = v
		case "Shared_Dirty":
			s.SharedDirty = v
		case "Private_Clean":
			s.PrivateClean = v
		case "Private_Dirty":
			s.PrivateDirty = v
		case "Anonymous":
			s.Anonymous = v
		case "Swap":
			s.Swap = v
		case "SwapPss":
			s.SwapPss = v
		}
	}
	if err := sc.Err(); err != nil {
		return SmapsRollup{}, fmt.Errorf("smaps_rollup: %w", err)
	}
	if line == 0 {
		return SmapsRollup{}, fmt.Errorf("smaps_rollup: empty")
	}
	return s, nil
}

func trunc(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
