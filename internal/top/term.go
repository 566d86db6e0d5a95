package top

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Term is the terminal a live view draws on: the alternate screen with the
// cursor hidden, its input unbuffered and unechoed (Ctrl-C still signals),
// restored by Close.
type Term struct {
	in, out *os.File
	old     *unix.Termios
	Keys    <-chan byte // one per key pressed; closed at end of input
}

// OpenTerm takes over out (a terminal) and, when it is one, in.
func OpenTerm(in, out *os.File) *Term {
	t := &Term{in: in, out: out}
	if old, err := unix.IoctlGetTermios(int(in.Fd()), unix.TCGETS); err == nil {
		raw := *old
		raw.Lflag &^= unix.ICANON | unix.ECHO
		raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
		if unix.IoctlSetTermios(int(in.Fd()), unix.TCSETS, &raw) == nil {
			t.old = old
		}
	}
	keys := make(chan byte, 8)
	t.Keys = keys
	go func() {
		defer close(keys)
		b := make([]byte, 1)
		for n, _ := in.Read(b); n == 1; n, _ = in.Read(b) {
			keys <- b[0]
		}
	}()
	out.WriteString("\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J")
	return t
}

// Size is the terminal's width and height (80x24 when it does not say).
func (t *Term) Size() (int, int) {
	if ws, err := unix.IoctlGetWinsize(int(t.out.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 && ws.Row > 0 {
		return int(ws.Col), int(ws.Row)
	}
	return 80, 24
}

// Draw replaces the screen with lines in one write, from the top left:
// every line is cleared to its end and the screen below the last, so a
// shorter line never shows what a longer one left; no line ends in a
// newline at the bottom (the screen never scrolls).
func (t *Term) Draw(lines []string) {
	t.out.WriteString("\x1b[H" + strings.Join(lines, "\x1b[K\r\n") + "\x1b[K\x1b[J")
}

// Close restores the screen and the input's mode.
func (t *Term) Close() {
	t.out.WriteString("\x1b[?25h\x1b[?1049l")
	if t.old != nil {
		_ = unix.IoctlSetTermios(int(t.in.Fd()), unix.TCSETS, t.old)
	}
}
