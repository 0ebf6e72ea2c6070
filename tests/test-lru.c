/* SPDX-License-Identifier: MIT */
/*
 * Eviction's candidate heap (daemon/lru.c), linked alone with
 * -DTD__LRU_STEPS=1: it gives the victims in the order the pass over
 * every name per victim gave them (least recently used, the first name
 * on a tie), and k victims of n cost n + k log n comparisons, not k * n.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "xorshift.h"

extern unsigned long long td__lru_steps;

static uint64_t rng = 0x2545f4914f6cdd1dull;

static unsigned rnd(unsigned n)
{
	return tu_xorshift(&rng, n);
}

/* The scan the heap replaced: the least used of what is left, the first
 * of equal ones. */
static size_t scan_pick(const struct td__lru *a, const bool *gone, size_t n)
{
	size_t best = n;

	for (size_t i = 0; i < n; i++)
		if (!gone[i] && (best == n || a[i].used < a[best].used))
			best = i;
	return best;
}

/* n candidates, ties among them (used in 0..spread), in name order. */
static struct td__lru *fill(size_t n, unsigned spread)
{
	struct td__lru *a = calloc(n, sizeof(*a));

	cr_assert(a);
	for (size_t i = 0; i < n; i++)
		a[i] = (struct td__lru){rnd(spread), i};
	return a;
}

Test(lru, the_heap_gives_the_order_the_scan_gave_ties_too)
{
	for (unsigned round = 0; round < 50; round++) {
		size_t n = 1 + rnd(300), left;
		struct td__lru *a = fill(n, 1 + rnd(40));
		struct td__lru *h = malloc(n * sizeof(*h));
		bool *gone = calloc(n, sizeof(*gone));

		cr_assert(h && gone);
		memcpy(h, a, n * sizeof(*h));
		left = n;
		td__lru_heapify(h, left);
		for (size_t k = 0; k < n; k++) {
			size_t want = scan_pick(a, gone, n);
			struct td__lru *got = td__lru_pop(h, &left);

			cr_assert(got);
			cr_assert_eq(got->at, want, "pick %zu of %zu: %zu, "
				     "want %zu", k, n, got->at, want);
			gone[want] = true;
		}
		cr_assert_null(td__lru_pop(h, &left));
		free(gone);
		free(h);
		free(a);
	}
}

Test(lru, k_victims_of_n_cost_n_plus_k_log_n_not_k_passes)
{
	enum { N = 100000, K = 200 };
	struct td__lru *h = fill(N, N / 2);
	unsigned long long before = td__lru_steps;
	size_t left = N;

	td__lru_heapify(h, left);
	for (unsigned k = 0; k < K; k++)
		cr_assert(td__lru_pop(h, &left));
	before = td__lru_steps - before;
	/* a pass per victim: K * N = 2e7 looks; the heap: < 2N to build,
	 * 2 log2(N) (34) a pop */
	cr_assert_lt(before, 2ull * N + 34ull * K, "%llu comparisons",
		     before);
	free(h);
}
