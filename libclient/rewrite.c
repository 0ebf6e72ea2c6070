/* SPDX-License-Identifier: MIT */
/*
 * libtensord: when a TD_ALLOC_REWRITE producer asks the daemon to take
 * its last version back (docs/fastpath.md, "Rewriting the latest
 * version"), and the settings read at connect that decide it.
 */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "wire.h"

/*
 * Below this (all planes), TD_ALLOC_REWRITE is TD_ALLOC_STREAM: the ALLOC
 * round trip it costs per tensor (~15 us on the VM of bench/README.md)
 * buys back more than it costs only once two buffers no longer stay in
 * the caches (docs/fastpath.md, "Rewriting the latest version").
 */
#define REWRITE_MIN_DEFAULT (8ull << 20)
/*
 * Nor before the producer spent this long between the alloc and the
 * publish of its last TD_ALLOC_REWRITE loan: what the warm buffer saves
 * is a share of the time spent writing it, so a producer that hands big
 * tensors over without writing them (or writes a few bytes) would only
 * pay the round trip. 200 us: ten round trips; a 16 MiB fill takes ~1 ms.
 */
#define REWRITE_FILL_US 200

void td__produce_env(struct td_client *c)
{
	const char *env;

	c->rewrite_min = td__env_u64("TENSORD_REWRITE_MIN",
				     REWRITE_MIN_DEFAULT, UINT64_MAX);
	c->rewrite_fill_ns = (int64_t)td__env_u64("TENSORD_REWRITE_FILL_US",
						  REWRITE_FILL_US,
						  INT64_MAX / 1000) *
			     1000;
	env = getenv("TENSORD_ALLOC_RESERVE");
	c->reserve_self = !env || strcmp(env, "daemon") != 0;
	env = getenv("TENSORD_SEAL");
	c->seal_self = !env || strcmp(env, "daemon") != 0;
}

/*
 * Whether a loan of these planes is a rewritable one (its ALLOC carries
 * TD_WIRE_ALLOC_REWRITE, and a loan a PUBLISH of it lends is one too):
 * what the daemon may take back for the next.
 */
bool td__rewrite_marked(const struct td_client *c, uint32_t flags,
			bool recycle, uint32_t plane_count,
			const uint64_t *sizes)
{
	uint64_t sum = 0;

	if (!(flags & TD_ALLOC_REWRITE) || !recycle ||
	    !td__has(c, TD_WIRE_FEAT_REWRITE))
		return false;
	for (uint32_t i = 0; i < plane_count; i++)
		sum += sizes[i];
	return sum >= c->rewrite_min;
}

/*
 * Whether to ask for the take-back now: an ALLOC round trip instead of
 * the loan the last PUBLISH lent, worth it after a long enough fill, and
 * only when it can take something back: the daemon takes back the last
 * rewritable version this connection published, and for a loan named
 * (name_len > 0) only one of that name. A producer of several names in
 * turn asked it for each, was refused each time, and got buffers of the
 * free list, or new ones, where the name's lent loan was waiting
 * (bench/README.md: 8x at 8 MiB over four names).
 */
bool td__rewrite_now(const struct td_client *c, bool marked,
		     const char *name, size_t name_len)
{
	if (!marked || c->rw_fill_ns < c->rewrite_fill_ns || !c->rw_last_len)
		return false;
	return !name_len || (name_len == c->rw_last_len &&
			     memcmp(name, c->rw_last, name_len) == 0);
}
