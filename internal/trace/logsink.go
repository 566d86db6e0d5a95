package trace

import (
	"bufio"
	"fmt"
	"io"
	"os"
)

// LogSink holds the --log lines: written to out as they come, or, when
// the summary goes to a file, staged in a temporary file that Write copies
// in before the summary.
type LogSink struct {
	buf *bufio.Writer
	tmp *os.File
}

// NewLogSink returns a sink writing to out, or staging when staged.
func NewLogSink(out io.Writer, staged bool) (*LogSink, error) {
	if !staged {
		return &LogSink{buf: bufio.NewWriter(out)}, nil
	}
	tmp, err := os.CreateTemp("", "pyobs-trace-log-*")
	if err != nil {
		return nil, err
	}
	return &LogSink{buf: bufio.NewWriter(tmp), tmp: tmp}, nil
}

func (l *LogSink) Write(p []byte) (int, error) { return l.buf.Write(p) }

// Flush writes out what is buffered.
func (l *LogSink) Flush() error { return l.buf.Flush() }

// Close removes the staging file.
func (l *LogSink) Close() {
	if l != nil && l.tmp != nil {
		_ = l.tmp.Close()
		_ = os.Remove(l.tmp.Name())
	}
}

// Write renders res as format ("text" or "json") to w, after the lines
// log staged (log may be nil).
func Write(w io.Writer, format string, res *Result, log *LogSink) error {
	if log != nil && log.tmp != nil {
		if _, err := log.tmp.Seek(0, 0); err != nil {
			return err
		}
		if _, err := io.Copy(w, log.tmp); err != nil {
			return err
		}
	}
	switch format {
	case "json":
		return WriteJSON(w, res)
	case "text":
		return WriteText(w, res, log != nil)
	}
	return fmt.Errorf("trace: unknown format %q (text, json)", format)
}
