package flame

import (
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// bigProfile is 1M samples in 100k unique stacks of depth 30, shaped like
// a real program: a few roots, prefixes shared near the root, leaves
// diverse, weights skewed (some stacks are hot).
var bigProfile = sync.OnceValue(func() *Profile {
	const (
		nStacks = 100_000
		depth   = 30
		samples = 1_000_000
	)
	rng := rand.New(rand.NewPCG(1, 2))
	pool := make([]Frame, 3000)
	for i := range pool {
		switch {
		case i%10 == 8:
			pool[i] = Frame{Kind: Native, Function: fmt.Sprintf("native_fn_%d", i), File: "/usr/lib/libpython3.12.so.1.0", Addr: uint64(0x7f0000000000 + i)}
		case i%10 == 9:
			pool[i] = Frame{Kind: Kernel, Function: fmt.Sprintf("kernel_fn_%d", i)}
		default:
			pool[i] = Frame{Kind: Python, Function: fmt.Sprintf("module%d.Class.method_%d", i%40, i), File: fmt.Sprintf("/srv/app/module%d.py", i%40), Line: 10 + i%300}
		}
	}
	p := New(Meta{Command: "record", Mode: "cpu", Unit: "samples", Samples: samples, PeriodNS: 1_000_000})
	ids := make([]int, depth)
	seen := map[[depth]int32]bool{}
	weights := make([]int64, 0, nStacks)
	var stacks [][]int
	for len(stacks) < nStacks {
		var key [depth]int32
		h := uint64(0)
		for d := range depth {
			// Fan-out grows with depth: 2 choices near the root, up to 12.
			choice := rng.IntN(2 + d*10/depth)
			h = h*1_000_003 + uint64(choice) + 1
			ids[d] = p.Intern(pool[h%uint64(len(pool))])
			key[d] = int32(ids[d])
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		stacks = append(stacks, append([]int(nil), ids...))
		weights = append(weights, 1+int64(rng.ExpFloat64()*9))
	}
	var sum int64
	for _, w := range weights {
		sum += w
	}
	// Scale the weights to exactly 1M samples (each stack keeps ≥ 1).
	var total int64
	for i, s := range stacks {
		w := max(1, weights[i]*samples/sum)
		if i == len(stacks)-1 {
			w = max(1, samples-total)
		}
		total += w
		p.AddIDs(s, w)
	}
	return p
})

func BenchmarkWriteSVG1M(b *testing.B) {
	p := bigProfile()
	var cw countingWriter
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		cw = countingWriter{}
		if err := WriteSVG(&cw, p, SVGOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cw.n)/1e6, "MB/svg")
	b.ReportMetric(float64(len(layoutSVG(p).levels)), "levels")
	frames := 0
	for _, lv := range layoutSVG(p).levels {
		frames += len(lv)
	}
	b.ReportMetric(float64(frames), "frames/svg")
}

// The other renderers on the same profile, for comparison.
func BenchmarkWrite1M(b *testing.B) {
	p := bigProfile()
	for _, r := range []struct {
		name  string
		write func(io.Writer, *Profile) error
	}{{"folded", WriteFolded}, {"pprof", WritePprof}, {"speedscope", WriteSpeedscope}, {"gecko", WriteGecko}} {
		b.Run(r.name, func(b *testing.B) {
			var cw countingWriter
			b.ReportAllocs()
			for b.Loop() {
				cw = countingWriter{}
				if err := r.write(&cw, p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cw.n)/1e6, "MB/out")
		})
	}
}

// BenchmarkFoldedAdd is the recording hot path: folding one sample's
// stack (depth 30) into a profile that already holds it (as after warm-up),
// through Add (frames) and AddIDs (interned indices).
func BenchmarkFoldedAdd(b *testing.B) {
	const depth, n = 30, 1000
	rng := rand.New(rand.NewPCG(3, 4))
	frames := make([][]Frame, n)
	for i := range frames {
		frames[i] = make([]Frame, depth)
		for d := range frames[i] {
			k := rng.IntN(500)
			frames[i][d] = Frame{Kind: Python, Function: fmt.Sprintf("f%d", k), File: "app.py", Line: k}
		}
	}
	b.Run("Add", func(b *testing.B) {
		p := New(Meta{Unit: "samples"})
		for _, f := range frames {
			p.Add(f, 1)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			p.Add(frames[i%n], 1)
			i++
		}
	})
	b.Run("AddIDs", func(b *testing.B) {
		p := New(Meta{Unit: "samples"})
		ids := make([][]int, n)
		for i, f := range frames {
			ids[i] = make([]int, depth)
			for d, fr := range f {
				ids[i][d] = p.Intern(fr)
			}
			p.AddIDs(ids[i], 1)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			p.AddIDs(ids[i%n], 1)
			i++
		}
	})
}

// BenchmarkProfileGC is what a long recording's profile costs each garbage
// collection: 400,000 distinct stacks (depth 8) held, one collection per
// iteration (record on a target of many paths reaches this in ~10 min).
func BenchmarkProfileGC(b *testing.B) {
	p := New(Meta{Unit: "samples"})
	ids := make([]int, 8)
	rng := rand.New(rand.NewPCG(5, 6))
	for range 400_000 {
		for d := range ids {
			ids[d] = rng.IntN(3000)
		}
		p.AddIDs(ids, 1)
	}
	b.ReportAllocs()
	for b.Loop() {
		runtime.GC()
	}
	runtime.KeepAlive(p)
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(b []byte) (int, error) { c.n += int64(len(b)); return len(b), nil }
