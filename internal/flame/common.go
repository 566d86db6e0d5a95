package flame

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Helpers shared by the renderers.

// threadGroup is what one thread contributed: its stacks with the Thread
// frames taken out (the thread names the group instead).
type threadGroup struct {
	name   string
	weight int64
	stacks []groupStack
}

type groupStack struct {
	frames []int // frame indices, root first, no Thread frames
	weight int64
	count  int64
}

// noThread names the group of stacks without a Thread frame in a profile
// where other stacks have one.
const noThread = "(no thread)"

// splitThreads groups p's stacks by their Thread frames (several Thread
// frames in one stack, e.g. process and thread, name the group together).
// Without any Thread frame in p there is one group, named single. Groups
// come in the order of sortedStacks, i.e. sorted by thread label.
func splitThreads(p *Profile, single string) []*threadGroup {
	var groups []*threadGroup
	byName := map[string]*threadGroup{}
	var names []string
	for _, s := range sortedStacks(p) {
		names = names[:0]
		frames := make([]int, 0, len(s.Frames))
		for _, id := range s.Frames {
			if f := p.Frame(id); f.Kind == Thread {
				names = append(names, f.Function)
			} else {
				frames = append(frames, id)
			}
		}
		name := strings.Join(names, " / ")
		if len(names) == 0 {
			name = noThread
		}
		g := byName[name]
		if g == nil {
			g = &threadGroup{name: name}
			byName[name] = g
			groups = append(groups, g)
		}
		g.weight += s.Weight
		g.stacks = append(g.stacks, groupStack{frames: frames, weight: s.Weight, count: s.Count})
	}
	if len(groups) == 1 && groups[0].name == noThread {
		groups[0].name = single
	}
	if len(groups) == 0 {
		groups = append(groups, &threadGroup{name: single})
	}
	return groups
}

// profileName is a one-line name for the recording, for renderers that
// show one: what recorded which process, not a command line (the process
// may have been spawned, its mode a default).
func profileName(m Meta) string {
	var b strings.Builder
	b.WriteString("pyobs")
	if m.Command != "" {
		b.WriteString(" " + m.Command)
	}
	if m.Mode != "" && m.Mode != m.Command {
		b.WriteString(" (" + m.Mode + " mode)")
	}
	if m.Pid != 0 {
		fmt.Fprintf(&b, ", pid %d", m.Pid)
	}
	return b.String()
}

// metaSummary is the recording's account of itself in one line: what was
// asked, what was achieved, and what was lost on the way.
func metaSummary(m Meta) string {
	parts := []string{}
	add := func(format string, a ...any) { parts = append(parts, fmt.Sprintf(format, a...)) }
	if m.Mode != "" {
		add("mode %s", m.Mode)
	}
	if m.Unit != "" {
		add("unit %s", m.Unit)
	}
	if m.Python != "" {
		add("python %s", m.Python)
	}
	add("samples %d", m.Samples)
	add("duration %.3fs", m.DurationS)
	if m.UnobservedS > 0 {
		add("the spawned command's first %.3fs before it", m.UnobservedS)
	}
	if m.RequestedHz > 0 || m.AchievedHz > 0 {
		add("requested %.1f Hz, achieved %.1f Hz", m.RequestedHz, m.AchievedHz)
	}
	add("lost %d", m.Lost)
	add("torn %d", m.Torn)
	add("failed %d", m.Failed)
	add("throttled %d", m.Throttled)
	if m.Engine != "" {
		add("stacks by %s (exact %d)", m.Engine, m.Exact)
	}
	add("observer cpu %.3fs", m.ObserverCPUS)
	add("pyobs stopped the target %.3fs", m.TargetStoppedS)
	return strings.Join(parts, ", ")
}

// frameRanks numbers p's frames in a total order: by label, then by the
// frame's fields, so distinct frames with one label (a symbol at two
// addresses) still get distinct ranks.
func frameRanks(p *Profile) []int32 {
	n := p.NumFrames()
	labels := make([]string, n)
	order := make([]int, n)
	for i := range n {
		labels[i] = p.Frame(i).Label()
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		fa, fb := p.Frame(a), p.Frame(b)
		return cmp.Or(
			strings.Compare(labels[a], labels[b]),
			cmp.Compare(fa.Kind, fb.Kind),
			strings.Compare(fa.Function, fb.Function),
			strings.Compare(fa.File, fb.File),
			cmp.Compare(fa.Line, fb.Line),
			cmp.Compare(fa.Addr, fb.Addr))
	})
	rank := make([]int32, n)
	for r, id := range order {
		rank[id] = int32(r)
	}
	return rank
}

// sortedStacks is p's stacks in a stable order: lexicographic by their
// frames' ranks (so by labels, root first; a stack before its extensions).
// Unlike Profile.Stacks it builds no string per stack.
func sortedStacks(p *Profile) []*Stack {
	rank := frameRanks(p)
	out := make([]*Stack, 0, p.NumStacks())
	p.EachStack(func(s *Stack) { out = append(out, s) })
	slices.SortFunc(out, func(a, b *Stack) int {
		for i := 0; i < len(a.Frames) && i < len(b.Frames); i++ {
			if c := cmp.Compare(rank[a.Frames[i]], rank[b.Frames[i]]); c != 0 {
				return c
			}
		}
		return cmp.Compare(len(a.Frames), len(b.Frames))
	})
	return out
}
