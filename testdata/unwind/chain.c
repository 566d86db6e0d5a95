/* Test program for internal/unwind: a call chain of known order that
 * stops itself (raise(SIGSTOP)) at its leaf, so the unwinder and gdb see
 * the same moment. Built by the tests with gcc at several -O levels,
 * -fomit-frame-pointer.
 *   chain       main → a → b → c → rec×(DEPTH+1) → leaf → raise
 *   chain jit   main → jit → [anonymous PROT_EXEC code] → leaf → raise
 */
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

#define DEPTH 10

volatile int sink;

__attribute__((noinline, noipa)) void leaf(void) { raise(SIGSTOP); sink++; }
__attribute__((noinline, noipa)) void rec(int n) { if (n == 0) leaf(); else rec(n - 1); sink++; }
__attribute__((noinline, noipa)) void c(void) { rec(DEPTH); sink++; }
__attribute__((noinline, noipa)) void b(void) { c(); sink++; }
__attribute__((noinline, noipa)) void a(void) { b(); sink++; }

/* JIT-like code without CFI: sub $8,%rsp; call *%rdi; add $8,%rsp; ret */
__attribute__((noinline, noipa)) void jit(void) {
	static const unsigned char code[] = {0x48, 0x83, 0xec, 0x08, 0xff, 0xd7, 0x48, 0x83, 0xc4, 0x08, 0xc3};
	void *p = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) return;
	memcpy(p, code, sizeof code);
	((void (*)(void (*)(void)))p)(leaf);
	sink++;
}

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "jit") == 0) jit();
	else a();
	return sink;
}
