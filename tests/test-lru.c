/* SPDX-License-Identifier: MIT */
/*
 * Eviction's order (daemon/lru.c), linked alone: the current versions
 * on one list, least recently used first, kept in order by moving a
 * version to the tail where its `used` tick is taken (made current, a
 * GET), never sorted. Any sequence of those, and of versions going,
 * leaves the list in `used` order with exactly the current versions.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "xorshift.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static unsigned rnd(unsigned n)
{
	return tu_xorshift(&rng, n);
}

Test(lru, the_list_stays_in_last_use_order)
{
	enum { N = 300, STEPS = 20000 };
	struct td__version *v = calloc(N, sizeof(*v));
	bool current[N] = {false};
	struct td__list order;
	uint64_t tick = 0;

	cr_assert(v);
	td__list_init(&order);
	for (unsigned step = 0; step < STEPS; step++) {
		unsigned i = rnd(N), what = rnd(4);
		size_t n = 0, want = 0;
		uint64_t last = 0;

		if (what == 0 && !current[i]) { /* made current */
			v[i].used = ++tick;
			td__lru_add(&order, &v[i]);
			current[i] = true;
		} else if (what == 1) { /* a GET: current or retired */
			v[i].used = ++tick;
			td__lru_touch(&order, &v[i]);
		} else if (what == 2) { /* current no more, maybe twice */
			td__lru_del(&v[i]);
			current[i] = false;
		}
		for (struct td__list *l = order.next; l != &order;
		     l = l->next, n++) {
			struct td__version *x =
				td__container_of(l, struct td__version, lru);

			cr_assert(current[x - v], "step %u: %td listed, not "
				  "current", step, x - v);
			cr_assert_gt(x->used, last, "step %u: out of order",
				     step);
			last = x->used;
		}
		for (unsigned k = 0; k < N; k++)
			want += current[k];
		cr_assert_eq(n, want, "step %u: %zu listed, %zu current",
			     step, n, want);
	}
	free(v);
}
