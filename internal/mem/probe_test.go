package mem

import (
	"testing"

	"github.com/pyobs/pyobs/internal/mem/probebpf"
)

func TestLiveSitesScalesBack(t *testing.T) {
	leak := []Frame{{Function: "leak", File: "t.py", Line: 8}, {Function: "<module>", File: "t.py", Line: 20}}
	stacks := map[uint64][]Frame{7: leak}
	const n = 64 << 10
	live := []probebpf.Live{
		{Size: 100, Est: n, Stack: 7},           // kept with probability 100/64Ki: stands for 64 KiB, 655 blocks
		{Size: 100, Est: n, Stack: 7},           //
		{Size: 1 << 20, Est: 1 << 20, Stack: 9}, // >= N: kept always, itself; its stack never arrived
		{Size: 16, Est: n, Stack: 0},            // no Python stack walked
	}
	all, total := liveSites(live, stacks, nil)
	if total != 3*n+1<<20 {
		t.Fatalf("total %d", total)
	}
	if len(all) != 3 {
		t.Fatalf("%d sites: %+v", len(all), all)
	}
	if all[0].Function != "[stack not received]" || all[0].Bytes != 1<<20 || all[0].Count != 1 {
		t.Errorf("first: %+v", all[0])
	}
	if all[1].Function != "leak" || all[1].Line != 8 || all[1].Bytes != 2*n || all[1].Count != 1311 || len(all[1].Stack) != 2 {
		t.Errorf("second: %+v", all[1])
	}
	if all[2].Function != "[no Python stack]" || all[2].Bytes != n || all[2].Count != 4096 {
		t.Errorf("third: %+v", all[2])
	}
}

func TestValidateSampleBytes(t *testing.T) {
	o := Options{Duration: 1, Frames: 1, Top: 1, SampleBytes: maxSampleBytes + 1}
	if err := o.Validate(); err == nil {
		t.Fatal("--sample-bytes beyond 1 GiB accepted")
	}
	o.SampleBytes = maxSampleBytes
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
}
