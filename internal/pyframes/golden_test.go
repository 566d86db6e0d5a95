package pyframes

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Golden files written by scripts/gen-pyframes-testdata.py from the real
// interpreters (never from our decoders). They are committed: a missing one
// is a failure, not a skip.
var goldenDir = filepath.Join("..", "..", "testdata", "pyframes")

// goldenMinors has a linetable-3.X.json and unicode-3.X.json each.
var goldenMinors = []int{10, 11, 12, 13, 14, 15}

// debugMinors has a debug-offsets-3.X.bin and .facts.json each.
var debugMinors = []int{13, 14, 15}

type lineGolden struct {
	Python string     `json:"python"`
	Label  string     `json:"label"`
	Codes  []lineCode `json:"codes"`
}

type lineCode struct {
	Name            string `json:"name"`
	FirstLineno     int    `json:"firstlineno"`
	Linetable       string `json:"linetable"`
	CodeUnits       int    `json:"code_units"`
	Lines           []*int `json:"lines"` // nil: the interpreter says "no line"
	LineBeforeFirst int    `json:"line_before_first"`
}

func (c lineCode) table(t testing.TB) []byte {
	t.Helper()
	b, err := hex.DecodeString(c.Linetable)
	if err != nil {
		t.Fatalf("%s: bad hex: %v", c.Name, err)
	}
	return b
}

func readGolden(t testing.TB, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir, name))
	if err != nil {
		t.Fatalf("golden file missing (run scripts/gen-pyframes-testdata.py): %v", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func loadLineGolden(t testing.TB, minor int) *lineGolden {
	t.Helper()
	var g lineGolden
	readGolden(t, fmt.Sprintf("linetable-3.%d.json", minor), &g)
	if len(g.Codes) == 0 {
		t.Fatalf("linetable-3.%d.json lists no code objects", minor)
	}
	return &g
}

type unicodeGolden struct {
	Python string `json:"python"`
	Facts  []struct {
		CodePoints []rune `json:"codepoints"`
		State      byte   `json:"state"`
		Kind       int    `json:"kind"`
		DataOffset uint64 `json:"data_offset"`
		Data       string `json:"data"`
	} `json:"facts"`
}

type debugFacts struct {
	Python     string `json:"python"`
	TableBytes int    `json:"table_bytes"`
	Facts      []struct {
		Fact       string     `json:"fact"`
		How        string     `json:"how"`
		Candidates []uint64   `json:"candidates"`
		Value      *uint64    `json:"value"`
		Pairs      [][]uint64 `json:"pairs"`
	} `json:"facts"`
}

func loadDebugTable(t testing.TB, minor int) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir, fmt.Sprintf("debug-offsets-3.%d.bin", minor)))
	if err != nil {
		t.Fatalf("golden table missing (run scripts/gen-pyframes-testdata.py): %v", err)
	}
	return b
}

// seedFiles returns every golden file's bytes matching a glob, for fuzz seeds.
func seedFiles(f *testing.F, glob string) [][]byte {
	f.Helper()
	names, err := filepath.Glob(filepath.Join(goldenDir, glob))
	if err != nil || len(names) == 0 {
		f.Fatalf("no seed files %s in %s", glob, goldenDir)
	}
	var out [][]byte
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}
