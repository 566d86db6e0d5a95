// Package unwind turns a sample's copied user stack and registers into
// native frames (kernel callchain addresses are named by procfs.Kallsyms).
// It knows x86_64's registers only: elsewhere it says so (ErrArch).
//
// Truth it reads: the .eh_frame_hdr/.eh_frame call-frame information (CFI)
// of every mapped ELF file (parsed once per file and kept), /proc/PID/maps
// to place addresses in files, the [vdso] image from /proc/PID/mem (all
// three through procfs), .symtab/.dynsym for names.
//
// Price: nothing for the target beyond the kernel copying the stack into
// the sample; for the observer, one FDE lookup and (cached) CFA rule per
// frame.
//
// Cannot see: frames beyond the copied part of the stack (the unwind stops
// and says "truncated"), code without CFI (JIT code, hand-written assembly
// without directives — libffi's closure trampolines on Debian's libffi 8:
// "failed" at that frame; a thread stopped in those few instructions, as
// a ctypes callback enters or leaves, fails ~1 % of `dump --native` on a
// qsort-with-callback loop), names of static functions
// in binaries stripped to .dynsym (they stay "[unknown] (lib+0xoff)",
// though FuncStart still tells one function from another by its CFI), and
// the xz-compressed .gnu_debugdata symbol table (Go's standard library has
// no xz decoder; such functions stay unknown too).
package unwind
