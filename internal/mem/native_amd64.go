//go:build amd64

package mem

import (
	"strings"
	"time"

	"github.com/pyobs/pyobs/internal/bpfload"
	"github.com/pyobs/pyobs/internal/mem/probebpf"
	"github.com/pyobs/pyobs/internal/unwind"
)

func nativeBytes(opt Options) int {
	if opt.Native {
		return probebpf.MaxNativeBytes
	}
	return 0
}

// readNative unwinds the copies as they come (a copy lives only in its
// record; the target's mappings are the ones it ran with) until done is
// closed and the ring is drained; it owns nat until it returns.
func readNative(ring *bpfload.Ring, nat *natStacks, pid int, done <-chan struct{}) {
	proc := unwind.NewProcess(pid, unwind.NewCache())
	names := map[uint64]natFrame{}
	frame := func(pc uint64, leaf bool) natFrame {
		if !leaf {
			pc-- // a return address: name the call
		}
		if f, ok := names[pc]; ok {
			return f
		}
		sym := proc.Symbolize(pc)
		name := strings.TrimSuffix(sym.Name, ".cold")
		f := natFrame{label: sym.Label(), path: sym.Path,
			eval: sym.Known && (name == "_PyEval_EvalFrameDefault" || name == "PyEval_EvalFrameEx")}
		names[pc] = f
		return f
	}
	var pcs []uint64
	one := func(b []byte) {
		h, stack, err := bpfload.DecodeNat(b)
		if err != nil {
			nat.stats.Undecoded++
			return
		}
		var st unwind.Status
		pcs, st, err = proc.Unwind(h.Regs(), h.Stack(stack), pcs[:0])
		nat.stats.Unwound++
		ns := natStack{complete: st == unwind.Full}
		switch st {
		case unwind.Full:
			nat.stats.Full++
		case unwind.Truncated:
			nat.stats.Truncated++
		default:
			nat.stats.Failed++
		}
		if err != nil && st != unwind.Full {
			ns.stop = unwind.Reason(err)
			if nat.stats.Stops == nil {
				nat.stats.Stops = map[string]uint64{}
			}
			nat.stats.Stops[ns.stop]++
		}
		ns.frames = make([]natFrame, len(pcs))
		for i, pc := range pcs {
			ns.frames[i] = frame(pc, i == 0)
		}
		nat.add(h.Id, ns)
	}
	for {
		select {
		case <-done:
			for {
				b, ok, err := ring.Next(time.Now())
				if err != nil || !ok {
					return
				}
				one(b)
			}
		default:
		}
		b, ok, err := ring.Next(time.Now().Add(100 * time.Millisecond))
		if err != nil {
			return
		}
		if ok {
			one(b)
		}
	}
}
