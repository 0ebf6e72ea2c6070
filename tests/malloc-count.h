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
};

#endif
