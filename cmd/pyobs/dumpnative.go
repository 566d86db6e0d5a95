package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/pyobs/pyobs/internal/session"
)

// writeNativeAccount prints dump --native's unwind and merge counts.
func writeNativeAccount(w io.Writer, n *session.NativeInfo) {
	if n == nil {
		return
	}
	fmt.Fprintf(w, "  native stacks (%d bytes copied per thread): %d unwound fully, %d truncated, %d failed; %d merge mismatches",
		n.StackSize, n.Full, n.Truncated, n.Failed, n.Mismatch)
	if n.NoPython > 0 {
		fmt.Fprintf(w, "; %d interpreter frames without Python frames (stopped entering or leaving the eval loop)", n.NoPython)
	}
	fmt.Fprintln(w)
}

// writeNativeThreadNote says why a thread has no native frames, or shows
// its native stack apart when it did not glue.
func writeNativeThreadNote(w io.Writer, n *session.ThreadNative) {
	switch {
	case n == nil:
	case n.Merge == "mismatch":
		fmt.Fprintln(w, "  [merge mismatch: the native and Python stacks, both read while the thread was stopped, do not glue (a pyobs bug); shown apart]")
		fmt.Fprintf(w, "  native stack (%s unwind), outermost first:\n", n.Unwind)
		for i := len(n.NativeFrames) - 1; i >= 0; i-- {
			writeNativeFrame(w, n.NativeFrames[i])
		}
		fmt.Fprintln(w, "  Python stack:")
	case n.Merge == "none":
		fmt.Fprintf(w, "  (no native frames: %s)\n", n.Error)
	case n.Unwind == "failed":
		fmt.Fprintf(w, "  (native unwind failed at the outermost native frame shown: %s)\n", n.Error)
	}
}

// writeNativeFrame prints a native frame or a marker of dump --native.
func writeNativeFrame(w io.Writer, f session.FrameDump) {
	if f.Kind == session.KindMarker {
		fmt.Fprintf(w, "  %s\n", f.Function)
		return
	}
	where := fmt.Sprintf("0x%x", f.Offset)
	if f.File != "" {
		where = fmt.Sprintf("%s+0x%x", filepath.Base(f.File), f.Offset)
	}
	fmt.Fprintf(w, "  (native) %s  %s\n", f.Function, where)
}
