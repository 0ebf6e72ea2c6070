/* SPDX-License-Identifier: MIT */
/*
 * The exported nodes, named (http.h): for a node's keys (http.c's
 * node_key: an array's zarr.json, .zarray, .zattrs or a chunk) and for
 * the group's listings (http-meta.c). Node names come from every
 * exported name (the suffix rule of docs/zarr.md §1), so naming them took
 * a walk over the whole store per request: 4 ms of loop per chunk at
 * 16 000 tensors, in proportion to the names. The last walk's names are
 * kept, sorted by node name, while nothing they depend on changed: the
 * store's current versions of names under --http-prefix
 * (td__store.names_gen: a PUBLISH, a DELETE, an eviction, a restore; a
 * stream outside the prefix changes nothing here), the policy (a SIGHUP
 * reload) and which rings are exported. A request then costs a binary
 * search among them (a listing, a copy of their texts in the order
 * kept).
 *
 * Of a ring, a node name depends only on its being exported: live,
 * under --http-prefix, granted to `http`, holding a version of a type
 * the store serves. Its name, type and shape are set at its creation;
 * its latest version changes with each handoff, with no message to the
 * daemon, but a ring node's keys read it at the request (ring_node()),
 * never from the walk. So the rings exported are looked at per request
 * (at most TD__MAX_RINGS of them, never the store's names) and compared
 * with the walk's: a ring created, given its first version, or closed
 * makes the next request walk; its handoffs do not.
 */
#include "http.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct {
	struct td__http_ref *rs;
	size_t n;
	size_t *order; /* rs's indices, by node name */
	uint64_t names_gen, reloads;
	/* the rings among rs, by id, in rs's (name) order */
	unsigned nrings;
	uint64_t ring_ids[TD__MAX_RINGS];
	bool kept;
} K;

void td__http_nodes_drop(void)
{
	free(K.rs);
	free(K.order);
	memset(&K, 0, sizeof(K));
}

static int by_name(const void *a, const void *b)
{
	return strcmp(K.rs[*(const size_t *)a].name,
		      K.rs[*(const size_t *)b].name);
}

/* Whether the rings exported now are those K holds, in K's order */
static bool rings_same(void)
{
	static struct td__ring *rl[TD__MAX_RINGS];
	const char *pre = td__d->opts.http_prefix;
	struct td_wire_str none = {"", 0},
			   pw = {pre ? pre : "", pre ? (uint16_t)strlen(pre)
						     : 0};
	unsigned nr = pre ? td__ring_list(pw, none, rl) : 0, k = 0;

	for (unsigned j = 0; j < nr; j++) {
		if (!td__http_ring_served(rl[j]))
			continue;
		if (k == K.nrings || K.ring_ids[k] != td__ring_id(rl[j]))
			return false;
		k++;
	}
	return k == K.nrings;
}

/* Whether K still names the nodes as a walk now would */
static bool still(void)
{
	return K.kept && K.names_gen == td__d->store->names_gen &&
	       K.reloads == td__d->stats.policy_reloads && rings_same();
}

int td__http_nodes(size_t *looks, const struct td__http_ref **rs_out,
		   const size_t **order_out, size_t *count)
{
	if (!still()) {
		struct td__http_ref *rs;
		size_t n, *order;
		int rc = td__http_refs(&rs, &n, looks);

		if (rc < 0)
			return rc;
		order = malloc((n + 1) * sizeof(*order));
		if (!order) {
			free(rs);
			return -ENOMEM;
		}
		td__http_nodes_drop();
		td__http_stats.node_walks++;
		K.rs = rs;
		K.n = n;
		K.order = order;
		for (size_t i = 0; i < n; i++) {
			order[i] = i;
			/* cannot overflow: rs holds each live ring once */
			if (rs[i].ring)
				K.ring_ids[K.nrings++] =
					td__ring_id(rs[i].ring);
		}
		qsort(order, n, sizeof(*order), by_name);
		K.names_gen = td__d->store->names_gen;
		K.reloads = td__d->stats.policy_reloads;
		K.kept = true;
	}
	*rs_out = K.rs;
	*order_out = K.order;
	*count = K.n;
	return 0;
}

int td__http_node_find(const char *node, size_t len,
		       const struct td__http_ref **out)
{
	const struct td__http_ref *rs;
	const size_t *order;
	size_t lo = 0, hi;
	int rc = td__http_nodes(NULL, &rs, &order, &hi);

	*out = NULL;
	if (rc < 0)
		return rc;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const char *m = rs[order[mid]].name;
		int c = strncmp(m, node, len);

		if (c == 0 && m[len])
			c = 1; /* m is longer: after node */
		if (c == 0) {
			*out = &rs[order[mid]];
			break;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}
