/* SPDX-License-Identifier: MIT */
/*
 * Who holds a ring, and what it costs them (docs/policy.md §5): while a
 * uid holds another uid's ring at all (subscriptions, GET leases of its
 * slots), the ring counts once as one of its rings and its bytes once in
 * its pinned: it is the same ring, kept in the daemon's table, and the
 * same bytes, kept alive by whichever hold goes last. Counted per uid in
 * the ring (ring_uid), so a subscriber's GET of a slot, or a second
 * connection's subscription, takes no more of its limits.
 */
#include "ring-int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct ring_uid *uid_find(struct ring *r, uid_t uid)
{
	for (uint32_t i = 0; i < r->uid_n; i++)
		if (r->uids[i].uid == uid)
			return &r->uids[i];
	return NULL;
}

/* A new entry for uid (n 0), or NULL out of memory. The array only
 * grows: a uid that comes back finds room with no heap call. */
static struct ring_uid *uid_new(struct ring *r, uid_t uid)
{
	if (!r->uids) {
		r->uids = r->uid_in;
		r->uid_cap = RING_UIDS_IN;
	}
	if (r->uid_n == r->uid_cap) {
		/* cannot overflow: one entry per uid holding r, each
		 * with a connection, far fewer than UINT32_MAX / 2 */
		uint32_t cap = r->uid_cap * 2;
		struct ring_uid *a = malloc(cap * sizeof(*a));

		if (!a)
			return NULL;
		memcpy(a, r->uids, r->uid_n * sizeof(*a));
		if (r->uids != r->uid_in)
			free(r->uids);
		r->uids = a;
		r->uid_cap = cap;
	}
	r->uids[r->uid_n] = (struct ring_uid){.uid = uid};
	return &r->uids[r->uid_n++];
}

static void uid_drop(struct ring *r, struct ring_uid *u)
{
	*u = r->uids[--r->uid_n];
}

int td__ring_hold(struct ring *r, const struct td__peer *p, char *why,
		  size_t cap)
{
	uid_t uid = p->uid;
	struct ring_uid *u;
	int rc;

	if (uid == r->uid) {
		/* its own ring: counted against nothing of its limits */
		rc = td__tenant_ring_hold(uid, false, 0, why, cap);
		r->own += rc == 0;
		if (rc == 0)
			td__shown_add(&r->shown, p);
		return rc;
	}
	u = uid_find(r, uid);
	if (!u && !(u = uid_new(r, uid))) {
		snprintf(why, cap, "out of memory");
		return -ENOMEM;
	}
	/* the first hold of r: one more ring kept, its bytes pinned */
	rc = td__tenant_ring_hold(uid, !u->n, u->n ? 0 : r->acct, why, cap);
	if (rc < 0) {
		if (!u->n)
			uid_drop(r, u);
		return rc;
	}
	u->n++;
	td__shown_add(&r->shown, p);
	return 0;
}

void td__ring_unhold(struct ring *r, uid_t uid)
{
	struct ring_uid *u;

	if (uid == r->uid) {
		r->own--;
		return;
	}
	/* there: the hold that ends made it */
	u = uid_find(r, uid);
	if (!u)
		return;
	td__tenant_ring_unhold(uid, u->n == 1, u->n == 1 ? r->acct : 0);
	if (--u->n == 0)
		uid_drop(r, u);
}

void td__ring_holds_fini(struct ring *r)
{
	if (r->uids != r->uid_in)
		free(r->uids);
	r->uids = NULL;
	r->uid_n = r->uid_cap = 0;
	td__shown_fini(&r->shown);
}
