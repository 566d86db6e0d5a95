package remoteexec

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/pyobs/pyobs/internal/pyframes"
	"github.com/pyobs/pyobs/internal/testutil"
)

func TestLocateRefusesWithoutTable(t *testing.T) {
	const rt = 0x1000
	for name, head := range map[string][]byte{
		"no cookie": make([]byte, 24),
		"3.13":      table(0x030d00f0),
		"2.7":       table(0x020700f0),
	} {
		var m pyframes.Snapshot
		m.Add(rt, head)
		if _, err := Locate(&m, 1, rt, 0); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
	}
	var empty pyframes.Snapshot
	if _, err := Locate(&empty, 1, rt, 0); err == nil || errors.Is(err, ErrUnsupported) {
		t.Errorf("unreadable runtime: %v", err)
	}
}

func table(version uint64) []byte {
	b := make([]byte, 24)
	copy(b, pyframes.DebugCookie)
	binary.LittleEndian.PutUint64(b[8:], version)
	return b
}

// Locate on a live 3.14 interpreter: the main thread is the process's
// first thread, nothing is pending, the path buffer is PEP 768's 512 bytes.
func TestLocateLive(t *testing.T) {
	testutil.RequireRoot(t)
	for _, label := range []string{"sid-3.14", "sid-3.15"} {
		in := testutil.Find(t, label)
		tg := testutil.StartArgv(t, append(append([]string{}, in.Argv...), "-c",
			"import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\nprint('READY', flush=True)\ntime.sleep(60)\n"), 30*time.Second)
		p, err := pyframes.Open(tg.Pid)
		if err != nil {
			t.Fatal(err)
		}
		mem := pyframes.NewProcessMemory(tg.Pid)
		tr, err := Locate(mem, tg.Pid, p.Info.Runtime, 0)
		if err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		if tr.Tid != tg.Pid || tr.PathSize != 512 || tr.Version.Minor != in.Minor() {
			t.Errorf("%s: %+v", label, tr)
		}
		var b [4]byte
		if err := mem.Read(tr.Pending, b[:]); err != nil || le32(b[:]) != 0 {
			t.Errorf("%s: pending %v %v", label, b, err)
		}
		if _, err := Locate(mem, tg.Pid, p.Info.Runtime, 999999999); err == nil {
			t.Errorf("%s: a thread that does not exist was found", label)
		}
		mem.Close()
	}
}
