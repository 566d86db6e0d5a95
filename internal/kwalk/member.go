//go:build amd64

package kwalk

import (
	"errors"
	"fmt"

	"github.com/pyobs/pyobs/internal/pyframes"
)

// Member is one process of a walked set as its engine reads it: its
// interpreter, a symbolizer when the kernel walks it, or why not.
type Member struct {
	Py      *pyframes.Process
	Sym     *Symbolizer // nil: its stacks are not walked (Refused says why), or walk was false
	Python  string      // its CPython version
	Refused string      // why its stacks are not walked ("": walked)
	Addrs   bool        // walked with its own addresses (put in the program's pyaddrs map)
	Gone    bool        // exited before its interpreter could be read
	Retry   bool        // its interpreter could not be read yet (starting after an exec): try again soon
}

// Why is why m's stacks are not named.
func (m *Member) Why() string {
	switch {
	case m.Refused != "":
		return m.Refused
	case m.Gone:
		return "exited"
	}
	return "not read"
}

// OpenMember opens pid's interpreter and checks that the kernel walk,
// set up for the target (version target, layout), fits it: another
// version or layout is refused; the same build at other addresses (an
// exec: ASLR) gets its own addresses through putAddrs. walk false: the
// reader only (no kernel walk to fit). gone says whether pid has exited;
// starting, that its program began a moment ago (procset.Set.Starting):
// not Python yet, or not readable yet, is then worth another try.
func OpenMember(pid int, target pyframes.Version, layout *pyframes.KernelLayout, walk, starting bool,
	putAddrs func(pid int, l *pyframes.KernelLayout) error, gone func(pid int) bool) Member {
	py, err := pyframes.Open(pid)
	if err != nil {
		switch {
		case gone(pid):
			return Member{Gone: true, Refused: "exited before its interpreter was read"}
		case errors.Is(err, pyframes.ErrNotPython) && starting:
			return Member{Refused: "not CPython yet (its program is starting)", Retry: true}
		case errors.Is(err, pyframes.ErrNotPython):
			return Member{Refused: "not CPython"}
		}
		// A program starting may be half-mapped; any other is final.
		return Member{Refused: fmt.Sprintf("can't read its interpreter: %v", err), Retry: starting}
	}
	m := Member{Py: py, Python: py.Version().String()}
	if v := py.Version(); v != target {
		m.Refused = fmt.Sprintf("CPython %s build differs from the target's %s", v, target)
		return m
	}
	if !walk || layout == nil {
		return m
	}
	kl, err := py.KernelLayout()
	if err != nil {
		m.Refused = fmt.Sprintf("can't read its layout: %v", err)
		return m
	}
	sameLayout, sameAddrs := SameBuild(layout, kl)
	switch {
	case !sameLayout:
		m.Refused = fmt.Sprintf("CPython %s build differs from the target's (another layout)", m.Python)
		return m
	case !sameAddrs:
		if err := putAddrs(pid, kl); err != nil {
			m.Refused = err.Error()
			return m
		}
		m.Addrs = true
	}
	m.Sym = NewSymbolizer(py, kl)
	return m
}
