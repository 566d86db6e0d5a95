package flame

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// MaxFoldedLine is the longest line ReadFolded accepts (about 8000 frames of
// 128 bytes); longer input is an error, which bounds what a line allocates.
const MaxFoldedLine = 1 << 20

// WriteFolded writes p in the folded format of DESIGN.md: one line per
// unique stack, root first, frame labels joined by ';', a space, the weight;
// lines sorted by their text (as sort(1) would, bytewise) so the output is
// stable.
//
// The format cannot carry everything: a ';' inside a label becomes ':' and
// a line break becomes a space; distinct stacks with the same text (one
// symbol at two addresses) become one line with their weights added; a
// stack with no frames (nothing to attribute its weight to) is left out.
// Meta is not written.
func WriteFolded(w io.Writer, p *Profile) error {
	labels := make([]string, p.NumFrames())
	for i := range labels {
		labels[i] = foldedLabel(p.Frame(i))
	}
	// Every stack's text once, in one buffer; sort and merge by text.
	type line struct {
		start, end int
		weight     int64
	}
	size := 0
	p.EachStack(func(s *Stack) {
		for _, id := range s.Frames {
			size += len(labels[id]) + 1
		}
	})
	buf := make([]byte, 0, size)
	lines := make([]line, 0, p.NumStacks())
	p.EachStack(func(s *Stack) {
		if len(s.Frames) == 0 {
			return
		}
		start := len(buf)
		for i, id := range s.Frames {
			if i > 0 {
				buf = append(buf, ';')
			}
			buf = append(buf, labels[id]...)
		}
		lines = append(lines, line{start, len(buf), s.Weight})
	})
	text := func(l line) []byte { return buf[l.start:l.end] }
	slices.SortFunc(lines, func(a, b line) int { return bytes.Compare(text(a), text(b)) })

	bw := bufio.NewWriterSize(w, 64<<10)
	var out []byte
	for i := 0; i < len(lines); {
		l := lines[i]
		for i++; i < len(lines) && bytes.Equal(text(lines[i]), text(l)); i++ {
			l.weight += lines[i].weight
		}
		out = append(append(out[:0], text(l)...), ' ')
		out = strconv.AppendInt(out, l.weight, 10)
		out = append(out, '\n')
		if _, err := bw.Write(out); err != nil {
			return fmt.Errorf("can't write folded stacks: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("can't write folded stacks: %w", err)
	}
	return nil
}

// foldedLabel is f.Label() made safe for one field of a folded line.
func foldedLabel(f Frame) string {
	l := f.Label()
	if strings.ContainsAny(l, ";\n\r") {
		l = strings.NewReplacer(";", ":", "\n", " ", "\r", " ").Replace(l)
	}
	return l
}

// FoldedError says where ReadFolded gave up.
type FoldedError struct {
	Line int // 1-based
	Msg  string
}

func (e *FoldedError) Error() string {
	return fmt.Sprintf("can't parse folded stacks: line %d: %s", e.Line, e.Msg)
}

// ReadFolded parses folded text (see WriteFolded) into a profile with
// Meta.Unit "samples" (folded text does not say; set Meta if you know
// better). Labels become frames: "QUALNAME (FILE:LINE)" a Python frame,
// "SYMBOL_[k]" a kernel frame, anything else a native frame, so that
// WriteFolded gives the same lines back. Blank lines are skipped; lines
// with the same stack add up. Each line counts as one Stack.Count.
//
// Malformed input gives a *FoldedError naming the line and a nil profile.
func ReadFolded(r io.Reader) (*Profile, error) {
	p := New(Meta{Unit: "samples"})
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4<<10), MaxFoldedLine)
	labelIDs := map[string]int{}
	var ids []int
	var total int64
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		sp := bytes.LastIndexByte(line, ' ')
		if sp < 0 {
			return nil, &FoldedError{n, "no weight (want \"FRAME;FRAME WEIGHT\")"}
		}
		weight, err := strconv.ParseInt(string(line[sp+1:]), 10, 64)
		if err != nil {
			return nil, &FoldedError{n, fmt.Sprintf("weight %q is not an integer", truncateForError(line[sp+1:]))}
		}
		if weight < 0 {
			return nil, &FoldedError{n, fmt.Sprintf("negative weight %d", weight)}
		}
		if weight > math.MaxInt64-total {
			return nil, &FoldedError{n, "total weight overflows int64"}
		}
		total += weight
		stack := line[:sp]
		if len(stack) == 0 {
			return nil, &FoldedError{n, "empty stack"}
		}
		ids = ids[:0]
		for len(stack) > 0 {
			var field []byte
			if i := bytes.IndexByte(stack, ';'); i >= 0 {
				field, stack = stack[:i], stack[i+1:]
				if len(stack) == 0 {
					return nil, &FoldedError{n, "empty frame at end of stack"}
				}
			} else {
				field, stack = stack, nil
			}
			if len(field) == 0 {
				return nil, &FoldedError{n, fmt.Sprintf("empty frame %d", len(ids)+1)}
			}
			id, ok := labelIDs[string(field)]
			if !ok {
				label := string(field)
				id = p.Intern(ParseLabel(label))
				labelIDs[label] = id
			}
			ids = append(ids, id)
		}
		p.AddIDs(ids, weight)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &FoldedError{n + 1, fmt.Sprintf("longer than %d bytes", MaxFoldedLine)}
		}
		return nil, fmt.Errorf("can't read folded stacks after line %d: %w", n, err)
	}
	return p, nil
}

func truncateForError(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

// ParseLabel is the inverse of Frame.Label for labels Label can produce:
// "QUALNAME (FILE:LINE)" is a Python frame (LINE a canonical decimal),
// "SYMBOL_[k]" a kernel frame, anything else a native frame (thread and
// state frames cannot be told from native ones by their label).
func ParseLabel(l string) Frame {
	if fn, ok := strings.CutSuffix(l, "_[k]"); ok {
		return Frame{Kind: Kernel, Function: fn}
	}
	if strings.HasSuffix(l, ")") {
		// A qualname has no " (" in it; a file name may.
		if open := strings.Index(l, " ("); open >= 0 {
			inner := l[open+2 : len(l)-1]
			if colon := strings.LastIndexByte(inner, ':'); colon >= 0 {
				digits := inner[colon+1:]
				if line, err := strconv.Atoi(digits); err == nil && itoa(line) == digits {
					return Frame{Kind: Python, Function: l[:open], File: inner[:colon], Line: line}
				}
			}
		}
	}
	return Frame{Kind: Native, Function: l}
}
