/* A target that is not Python, for `pyobs trace -p`: once the file argv[2]
 * exists it makes argv[1] getppid calls and argv[1] failing rmdir calls
 * (ENOENT), each a raw syscall, prints "DONE n" and exits 0. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	long n = atol(argv[1]);
	printf("READY\n");
	fflush(stdout);
	while (access(argv[2], F_OK) != 0)
		usleep(10000);
	for (long i = 0; i < n; i++) {
		syscall(SYS_getppid);
		syscall(SYS_rmdir, "/nonexistent/pyobs-nonpy");
	}
	printf("DONE %ld\n", n);
	return 0;
}
