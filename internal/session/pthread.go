package session

import (
	"encoding/binary"

	"github.com/pyobs/pyobs/internal/pyframes"
)

// glibcTidOffset is offsetof(struct pthread, tid) in glibc 2.x on x86_64
// (nptl/descr.h: the TCB header, then the list_t, then tid). Used only on
// 3.10, whose thread state has no native_thread_id, and only when the value
// read is one of the target's TIDs.
const glibcTidOffset = 0x2d0

func (s *Session) tidFromPthread(pthread uint64, tids []int) int {
	if pthread == 0 {
		return 0
	}
	var b [4]byte
	if err := pyframes.NewProcessMemory(s.Pid).Read(pthread+glibcTidOffset, b[:]); err != nil {
		return 0
	}
	tid := int(binary.LittleEndian.Uint32(b[:]))
	for _, t := range tids {
		if t == tid {
			return tid
		}
	}
	return 0
}
