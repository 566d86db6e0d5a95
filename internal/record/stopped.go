package record

import (
	"fmt"

	"github.com/pyobs/pyobs/internal/flame"
	"github.com/pyobs/pyobs/internal/procfs"
)

// A recording watches its target's thread states (procfs.StopWatch): a
// thread stopped by a signal or a tracer (T, t) runs nothing, so a cpu
// recording of it is empty — the footer and JSON must say why, not leave
// "0 samples" alone.

// metaStopped is the watch's account as the profile's meta carries it.
func metaStopped(s *procfs.Stops) *flame.Stopped {
	if s == nil {
		return nil
	}
	return &flame.Stopped{Threads: s.Threads, Of: s.Of, Seconds: s.Seconds, State: s.State, LookMS: s.LookMS,
		Processes: s.Processes, Members: s.Members}
}

// stoppedNote is the footer's sentence about a stopped target, "" when no
// thread was seen stopped.
func stoppedNote(m flame.Meta) string {
	s := m.Stopped
	if s == nil {
		return ""
	}
	ps := procfs.Stops{Threads: s.Threads, Of: s.Of, Seconds: s.Seconds, State: s.State, LookMS: s.LookMS,
		Processes: s.Processes, Members: s.Members}
	return fmt.Sprintf("; %s stopped %s for about %.1fs of the recording (seen at looks every %d ms): a stopped thread runs nothing and is not sampled",
		ps.Who(), ps.By(), s.Seconds, s.LookMS)
}
