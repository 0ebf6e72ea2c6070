/* SPDX-License-Identifier: MIT */
/*
 * The node a key names (http.c's node_key: an array's zarr.json,
 * .zarray, .zattrs or a chunk). Node names come from every exported
 * name (the suffix rule of docs/zarr.md §1), so finding one took a walk
 * over the whole store per request: 4 ms of loop per chunk at 16 000
 * tensors, in proportion to the names. The last walk's names are kept,
 * sorted by node name, while nothing they depend on changed: the
 * store's current versions (td__store.names_gen: a PUBLISH, a DELETE,
 * an eviction, a restore), the policy (a SIGHUP reload) and the rings
 * (a ring's latest version changes with no message, so while a ring is
 * live every request walks, as before). A request then costs a binary
 * search among them.
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

/* Whether K still names the nodes as a walk now would */
static bool still(void)
{
	static struct td__ring *rl[TD__MAX_RINGS];
	struct td_wire_str none = {"", 0};

	return K.kept && K.names_gen == td__d->store->names_gen &&
	       K.reloads == td__d->stats.policy_reloads &&
	       td__ring_list(none, none, rl) == 0;
}

int td__http_node_find(const char *node, size_t len,
		       const struct td__http_ref **out)
{
	size_t lo = 0, hi;

	if (!still()) {
		struct td__http_ref *rs;
		size_t n, *order;
		int rc = td__http_refs(&rs, &n, NULL);

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
		for (size_t i = 0; i < n; i++)
			order[i] = i;
		qsort(order, n, sizeof(*order), by_name);
		K.names_gen = td__d->store->names_gen;
		K.reloads = td__d->stats.policy_reloads;
		/* refs of rings: only for this request (a ring closed
		 * before the next leaves names_gen as it was) */
		K.kept = true;
		for (size_t i = 0; i < n; i++)
			K.kept = K.kept && !rs[i].ring;
	}
	*out = NULL;
	for (hi = K.n; lo < hi;) {
		size_t mid = lo + (hi - lo) / 2;
		const char *m = K.rs[K.order[mid]].name;
		int c = strncmp(m, node, len);

		if (c == 0 && m[len])
			c = 1; /* m is longer: after node */
		if (c == 0) {
			*out = &K.rs[K.order[mid]];
			break;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}
