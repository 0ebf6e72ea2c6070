/* SPDX-License-Identifier: MIT */
/* The counters tests/malloc-count.c keeps in $TD_MALLOC_COUNT_FILE. */
#ifndef TD_TESTS_MALLOC_COUNT_H
#define TD_TESTS_MALLOC_COUNT_H

#include <stdint.h>

struct td_malloc_counts {
	uint64_t malloc, calloc, realloc, free, memalign;
	/* bytes the kernel moved for sendfile() (the HTTP store's bodies) */
	uint64_t sendfile_bytes;
	/* the largest size one malloc, calloc, realloc or memalign asked */
	uint64_t largest;
	/* memcmp calls (tests/test-snapshot.c: key comparisons) */
	uint64_t memcmp;
	/*
	 * The work of one turn of an event loop: the most allocations
	 * (malloc, calloc, realloc, memalign) a thread made between
	 * returning from epoll_wait/epoll_pwait and calling it again
	 * (tests/test-snapshot.c; the test zeroes it to start over), and
	 * how many such turns there were.
	 */
	uint64_t turn_max, turns;
};

#endif
