/* SPDX-License-Identifier: MIT */
/*
 * Eviction's order (store.c, td__store_make_room_many): the candidates
 * of one make_room call in a binary min-heap by (used, name index), so
 * that k victims out of n versions cost n + k log n, not the k passes
 * over every name that picking each victim by a scan took. No I/O, no
 * allocation: the caller owns the array. tests/test-lru.c links it
 * alone with -DTD__LRU_STEPS=1 and counts its comparisons.
 */
#include "store.h"

#ifdef TD__LRU_STEPS
/* tests only: comparisons made by the heap */
unsigned long long td__lru_steps;
#define STEP() (td__lru_steps++)
#else
#define STEP() ((void)0)
#endif

/* a before b: least recently used first, the first name on a tie (as
 * the scan in name order kept the first of equal `used`) */
static bool before(const struct td__lru *a, const struct td__lru *b)
{
	STEP();
	return a->used < b->used || (a->used == b->used && a->at < b->at);
}

static void sift_down(struct td__lru *h, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		struct td__lru t;

		if (l < n && before(&h[l], &h[m]))
			m = l;
		if (l + 1 < n && before(&h[l + 1], &h[m]))
			m = l + 1;
		if (m == i)
			return;
		t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

void td__lru_heapify(struct td__lru *h, size_t n)
{
	for (size_t i = n / 2; i-- > 0;)
		sift_down(h, n, i);
}

struct td__lru *td__lru_pop(struct td__lru *h, size_t *n)
{
	struct td__lru t;

	if (!*n)
		return NULL;
	(*n)--;
	t = h[0];
	h[0] = h[*n];
	h[*n] = t;
	sift_down(h, *n, 0);
	return &h[*n];
}
