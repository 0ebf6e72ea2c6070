/* SPDX-License-Identifier: MIT */
/*
 * A test's own seeded xorshift64 generator (tests/test-lru.c,
 * tests/test-policy.c): the same draws on every run, so a failure
 * repeats.
 */
#ifndef TD_TESTS_XORSHIFT_H
#define TD_TESTS_XORSHIFT_H

#include <stdint.h>

/* The next draw of *state (never 0), in 0 .. n - 1. */
static inline unsigned tu_xorshift(uint64_t *state, unsigned n)
{
	*state ^= *state << 13;
	*state ^= *state >> 7;
	*state ^= *state << 17;
	return (unsigned)(*state % n);
}

#endif
