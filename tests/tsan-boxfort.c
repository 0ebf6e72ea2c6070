/* SPDX-License-Identifier: MIT */
/*
 * LD_PRELOAD shim for the criterion suites of a -Db_sanitize=thread
 * build (tests/meson.build sets it there only). Criterion's BoxFort maps
 * its inheritable arena MAP_FIXED at a random 16 MiB-aligned address in
 * [0x200000000000, 0x7f0000000000) after mincore() says the pages there
 * are free; TSan reserves that range for its shadow, so every try fails
 * ("Could not initialize inheritable arena", Snaipe/Criterion#274).
 * Here such a spot reads free, and the mapping asked for at the spot
 * that read free (only that one: libtensord maps MAP_FIXED at aligned
 * addresses of its own) is placed where TSan lets application memory
 * be (its high range, 0x7e8000000000 up); the workers map it at that
 * same address as before.
 */
/* mmap and mmap64 both defined here: off_t is 64 bits either way on
 * the 64-bit hosts TSan runs on */
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <stdbool.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>

#define ARENA_LO 0x200000000000ull
#define ARENA_HI 0x7f0000000000ull
/* where the arenas go instead: TSan's high application range, below
 * BoxFort's upper bound */
#define PLACE_AT 0x7ea000000000ull

/* the spot mincore() last said was free: BoxFort maps there next */
static _Thread_local uintptr_t said_free;

static bool arena_spot(uintptr_t a, size_t within)
{
	return a >= ARENA_LO && a < ARENA_HI && (a & 0xffffff) < within;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	static void *(*real)(void *, size_t, int, int, int, off_t);
	static uintptr_t next = PLACE_AT;

	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "mmap");
	if ((flags & MAP_FIXED) && (flags & MAP_SHARED) && fd >= 0 &&
	    said_free && (uintptr_t)addr == said_free) {
		void *p = real((void *)next, len, prot, flags & ~MAP_FIXED, fd,
			       off);

		said_free = 0;
		next += 1ull << 24;
		return p;
	}
	return real(addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return mmap(addr, len, prot, flags, fd, off);
}

int mincore(void *addr, size_t len, unsigned char *vec)
{
	static int (*real)(void *, size_t, unsigned char *);

	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "mincore");
	/* BoxFort looks page by page at the first MiB of a spot */
	if (len == 4096 && arena_spot((uintptr_t)addr, 1u << 20)) {
		said_free = (uintptr_t)addr & ~(uintptr_t)0xffffff;
		errno = ENOMEM;
		return -1;
	}
	return real(addr, len, vec);
}
