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
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
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
	largest(n);
	return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
	COUNT(calloc);
	largest((uint64_t)n * m);
	return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
	COUNT(realloc);
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
	largest(n);
	return __libc_memalign(align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
	COUNT(memalign);
	return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
	void *p;

	COUNT(memalign);
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
