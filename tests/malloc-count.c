/* SPDX-License-Identifier: MIT */
/*
 * LD_PRELOAD shim for tests: counts the heap calls of the process it is
 * loaded into (the daemon, in tests/test-recycle.c) in a file mapping
 * shared with the test, so the test reads live counts without asking the
 * daemon anything. $TD_MALLOC_COUNT_FILE names a file of at least
 * sizeof(struct td_malloc_counts) bytes; without it nothing is counted.
 *
 * It forwards to glibc's __libc_* entry points rather than dlsym(RTLD_NEXT)
 * (dlsym itself allocates, which would recurse). glibc's own internal
 * allocations (stdio, getpwnam, ...) go through these symbols too, so
 * every heap call of the process is seen. Not for sanitizer builds: ASan
 * replaces malloc itself.
 *
 * It also counts the bytes sendfile() moves (tests/test-zarr.c: the HTTP
 * store's chunk bodies go by the kernel, not through a buffer), and keeps
 * the largest size malloc, calloc, realloc or memalign was asked for
 * (tensorctl zarr import reads a chunk into the daemon's buffer, not the
 * heap).
 *
 * It counts memcmp() calls too (its own byte loop), and the work of an
 * event loop's turns (struct td_malloc_counts, turn_max): epoll_wait and
 * epoll_pwait are forwarded to the system call.
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "malloc-count.h"

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t m);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);

static struct td_malloc_counts *counts;

__attribute__((constructor)) static void counts_map(void)
{
	const char *path = getenv("TD_MALLOC_COUNT_FILE");
	void *p;
	int fd;

	if (!path)
		return;
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return;
	p = mmap(NULL, sizeof(*counts), PROT_READ | PROT_WRITE, MAP_SHARED,
		 fd, 0);
	close(fd);
	if (p != MAP_FAILED)
		counts = p;
}

/* this thread's allocations, and their number when it last waited */
static __thread __attribute__((tls_model("initial-exec"))) uint64_t mine,
	at_wait;
static __thread __attribute__((tls_model("initial-exec"))) int waited;

#define COUNT(field)                                                          \
	do {                                                                  \
		if (counts)                                                   \
			__atomic_add_fetch(&counts->field, 1,                 \
					   __ATOMIC_RELAXED);                 \
	} while (0)

/* Keep the largest request in counts->largest. */
static void largest(uint64_t n)
{
	uint64_t cur;

	if (!counts)
		return;
	cur = __atomic_load_n(&counts->largest, __ATOMIC_RELAXED);
	while (n > cur && !__atomic_compare_exchange_n(&counts->largest, &cur,
						      n, 0,
						      __ATOMIC_RELAXED,
						      __ATOMIC_RELAXED))
		;
}

void *malloc(size_t n)
{
	COUNT(malloc);
	mine++;
	largest(n);
	return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
	COUNT(calloc);
	mine++;
	largest((uint64_t)n * m);
	return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
	COUNT(realloc);
	mine++;
	largest(n);
	return __libc_realloc(p, n);
}

void free(void *p)
{
	if (p)
		COUNT(free);
	__libc_free(p);
}

void *memalign(size_t align, size_t n)
{
	COUNT(memalign);
	mine++;
	largest(n);
	return __libc_memalign(align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
	COUNT(memalign);
	mine++;
	return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
	void *p;

	COUNT(memalign);
	mine++;
	if (align < sizeof(void *) || (align & (align - 1)))
		return EINVAL;
	p = __libc_memalign(align, n);
	if (!p && n)
		return ENOMEM;
	*out = p;
	return 0;
}

void *valloc(size_t n)
{
	COUNT(memalign);
	mine++;
	return __libc_memalign((size_t)sysconf(_SC_PAGESIZE), n);
}

/* sendfile() straight to the kernel, counting what it moved (both
 * names: off_t is 64-bit here, as in sendfile64). No <sys/sendfile.h>,
 * which renames sendfile to sendfile64 under _FILE_OFFSET_BITS=64. */
ssize_t sendfile(int out, int in, off_t *off, size_t n);
ssize_t sendfile64(int out, int in, off_t *off, size_t n);

static ssize_t count_sendfile(int out, int in, off_t *off, size_t n)
{
	ssize_t r = syscall(SYS_sendfile, out, in, off, n);

	if (r > 0 && counts)
		__atomic_add_fetch(&counts->sendfile_bytes, (uint64_t)r,
				   __ATOMIC_RELAXED);
	return r;
}

ssize_t sendfile(int out, int in, off_t *off, size_t n)
{
	return count_sendfile(out, in, off, n);
}

ssize_t sendfile64(int out, int in, off_t *off, size_t n)
{
	return count_sendfile(out, in, off, n);
}

/* Byte by byte, counted (not forwarded: glibc exports no __libc_memcmp). */
int memcmp(const void *a, const void *b, size_t n)
{
	const unsigned char *x = a, *y = b;

	COUNT(memcmp);
	for (size_t i = 0; i < n; i++)
		if (x[i] != y[i])
			return x[i] < y[i] ? -1 : 1;
	return 0;
}

/* A loop turn ends where its thread waits again: keep the most work. */
static void turn_end(void)
{
	uint64_t n = mine - at_wait, cur;

	if (!counts || !waited)
		return;
	__atomic_add_fetch(&counts->turns, 1, __ATOMIC_RELAXED);
	cur = __atomic_load_n(&counts->turn_max, __ATOMIC_RELAXED);
	while (n > cur && !__atomic_compare_exchange_n(&counts->turn_max, &cur,
						      n, 0, __ATOMIC_RELAXED,
						      __ATOMIC_RELAXED))
		;
}

int epoll_pwait(int fd, struct epoll_event *ev, int max, int ms,
		const sigset_t *mask)
{
	long rc;

	turn_end();
	/* the kernel's sigset: 64 signals */
	rc = syscall(SYS_epoll_pwait, fd, ev, max, ms, mask, 8);
	at_wait = mine;
	waited = 1;
	return (int)rc;
}

int epoll_wait(int fd, struct epoll_event *ev, int max, int ms)
{
	return epoll_pwait(fd, ev, max, ms, NULL);
}
