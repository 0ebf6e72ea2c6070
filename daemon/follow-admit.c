/* SPDX-License-Identifier: MIT */
/*
 * The daemon's bells of followed names (follow.c keeps them), and
 * FOLLOW's admission (docs/protocol.md §13, docs/policy.md §5): the
 * limits on follows, rows and bells, a spare follow's half, and the
 * uid's limits a follow charges (fds, a lease, pinned bytes); and the
 * rows that cover a GET lease of what they charge for (lease.c calls
 * them here: follow.c calls lease.c's callers, publish.c).
 */
#include "follow-int.h"

#include <errno.h>
#include <string.h>

struct td__list td__bells = {&td__bells, &td__bells};
unsigned td__bell_count;

struct bell *td__bell_named(const char *name, size_t len)
{
	for (struct td__list *l = td__bells.next; l != &td__bells;
	     l = l->next) {
		struct bell *b = td__container_of(l, struct bell, link);

		if (b->name_len == len && memcmp(b->name, name, len) == 0)
			return b;
	}
	return NULL;
}

unsigned td__peer_follows(const struct td__peer *p)
{
	unsigned n = 0;

	for (struct td__list *l = td__bells.next; l != &td__bells;
	     l = l->next) {
		struct bell *b = td__container_of(l, struct bell, link);
		int i;

		for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;)
			n += b->rows[i].peer == p;
	}
	return n;
}

/*
 * Bells whose descriptors uid pays for (spare: only those a spare follow
 * made; uid (uid_t)-1: every uid's).
 */
static unsigned uid_bells(uid_t uid, bool spare)
{
	unsigned n = 0;

	for (struct td__list *l = td__bells.next; l != &td__bells;
	     l = l->next) {
		const struct bell *b = td__container_of(l, struct bell, link);

		n += (uid == (uid_t)-1 || b->uid == uid) &&
		     (!spare || b->spare);
	}
	return n;
}

/* Rows of b that spare follows hold. */
static unsigned spare_rows(const struct bell *b)
{
	unsigned n = 0;
	int i;

	for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;)
		n += b->rows[i].spare;
	return n;
}

/* Rows of b that uid's follows hold. */
static unsigned uid_rows(const struct bell *b, uid_t uid)
{
	unsigned n = 0;
	int i;

	for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;)
		n += b->rows[i].peer->uid == uid;
	return n;
}

/*
 * A spare follow (TD_WIRE_FOLLOW_SPARE: one td_client_get_newer made by
 * itself, which can do without) takes no more than half of the name's
 * rows and of the bells, the daemon's and its uid's: the other half
 * stays for follows that ask without the flag. Only spare follows count
 * (the rows they hold, the bells they made): explicit follows that hold
 * half a name's rows or half the bells leave the other half to them.
 * -ENOBUFS with a reply.
 */
static int spare_admit(struct td__peer *p, const struct td_wire_hdr *h,
		       const struct bell *b)
{
	const char *what = NULL;

	if (b && spare_rows(b) >= TD_FOLLOW_MAX_ROWS / 2)
		what = "the name's follower rows";
	else if (!b && uid_bells((uid_t)-1, true) >= MAX_BELLS / 2)
		what = "the daemon's followed names";
	else if (!b && !td__uid_is_admin(p->uid) &&
		 uid_bells(p->uid, true) >= MAX_BELLS_PER_UID / 2)
		what = "the followed names its uid pays for";
	if (!what)
		return 0;
	td__peer_error(p, h->opcode, h->request_id, -ENOBUFS,
		       "a spare follow takes at most half of %s", what);
	return -ENOBUFS;
}

/* A lease of o on v counting pin bytes that no row covers, or NULL. */
static struct td__lease *peer_uncovered(const struct td__peer *o,
					const struct td__version *v,
					uint64_t pin)
{
	for (struct td__list *l = o->leases.next; l != &o->leases;
	     l = l->next) {
		struct td__lease *x =
			td__container_of(l, struct td__lease, link);

		if (x->v == v && !x->cover && x->pinned == pin)
			return x;
	}
	return NULL;
}

/*
 * A GET lease of p's uid on v counting pin bytes that no row covers (p's
 * own first, then its uid's other connections'), or NULL. Its callers
 * are a FOLLOW and a covered lease's end (a follower's RELEASE of the
 * version it took by GET while current): the walk of the connections is
 * only for a uid that has more than one, and a version nobody leases
 * costs none.
 */
static struct td__lease *lease_uncovered(const struct td__peer *p,
					 const struct td__version *v,
					 uint64_t pin)
{
	struct td__lease *x;

	if (!v || !pin || v->lease_count == 0)
		return NULL;
	x = peer_uncovered(p, v, pin);
	if (td__tenant_held(p->uid, TD__LIM_CONNS) < 2)
		return x;
	for (const struct td__list *l = td__d->peers.next;
	     !x && l != &td__d->peers; l = l->next) {
		const struct td__peer *o =
			td__container_of(l, const struct td__peer, link);

		if (o != p && o->uid == p->uid)
			x = peer_uncovered(o, v, pin);
	}
	return x;
}

int td__follow_admit(struct td__peer *p, const struct td_wire_hdr *h,
		     struct td_wire_str name, bool spare)
{
	const struct bell *b = td__bell_named(name.ptr, name.len);
	const struct td__version *cur =
		b ? b->cur_v : td__name_lookup(td__d->store, name);
	/* a row, and the bell's descriptors when this follow makes it */
	unsigned fds = b ? 1 : 1 + BELL_FDS;
	uint64_t pin = td__follow_pin(cur, p->uid);
	char lim[256];
	int rc;

	if (td__ring_find(name)) {
		td__peer_error(p, h->opcode, h->request_id, -EINVAL,
			       "\"%.*s\" is a ring: subscribe to it",
			       (int)name.len, name.ptr);
		return -EINVAL;
	}
	if (spare && spare_admit(p, h, b) < 0)
		return -ENOBUFS;
	if (b && !td__uid_is_admin(p->uid) &&
	    uid_rows(b, p->uid) >= MAX_ROWS_PER_UID) {
		td__peer_error(p, h->opcode, h->request_id, -EDQUOT,
			       "uid %u holds %d of \"%.*s\"'s %u follower rows "
			       "already (max): end a follow of it",
			       (unsigned)p->uid, MAX_ROWS_PER_UID,
			       (int)name.len, name.ptr, TD_FOLLOW_MAX_ROWS);
		return -EDQUOT;
	}
	if (td__peer_follows(p) >= MAX_FOLLOWS_PER_PEER) {
		td__peer_error(p, h->opcode, h->request_id, -ENOBUFS,
			       "too many follows on this connection (max %d)",
			       MAX_FOLLOWS_PER_PEER);
		return -ENOBUFS;
	}
	if (fds > 1 && td__bell_count >= MAX_BELLS) {
		td__peer_error(p, h->opcode, h->request_id, -ENOBUFS,
			       "too many followed names in the daemon "
			       "(max %d)", MAX_BELLS);
		return -ENOBUFS;
	}
	if (fds > 1 && !td__uid_is_admin(p->uid) &&
	    uid_bells(p->uid, false) >= MAX_BELLS_PER_UID) {
		td__peer_error(p, h->opcode, h->request_id, -EDQUOT,
			       "uid %u pays for %d followed names already "
			       "(max %d): follow one of those, or end a follow",
			       (unsigned)p->uid, MAX_BELLS_PER_UID,
			       MAX_BELLS_PER_UID);
		return -EDQUOT;
	}
	rc = td__tenant_check(p->uid, TD__LIM_FDS, fds, lim, sizeof(lim));
	/* room for the lease its hold may become (hold_take) */
	if (rc == 0)
		rc = td__tenant_check(p->uid, TD__LIM_LEASES, 1, lim,
				      sizeof(lim));
	/* and for the current version, which it may take with no message
	 * (the bell's commits charge again: follow.c, rows_charge), less
	 * a GET lease of it its uid holds, which the row will cover */
	if (rc == 0)
		rc = td__tenant_check(p->uid, TD__LIM_PINNED,
				      lease_uncovered(p, cur, pin) ? 0 : pin,
				      lim, sizeof(lim));
	if (rc < 0)
		td__peer_error(p, h->opcode, h->request_id, rc, "FOLLOW: %s",
			       lim);
	return rc;
}

struct follower *td__follow_cover_find(const struct td__peer *p,
				       const struct td__version *v,
				       uint64_t pin)
{
	struct bell *b;
	int i;

	if (td__list_empty(&td__bells))
		return NULL;
	b = td__bell_named(v->name, v->name_len);
	if (!b)
		return NULL;
	/* the asking connection's own row first: its library's GET */
	for (int pass = 0; pass < 2; pass++)
		for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;) {
			struct follower *f = &b->rows[i];

			if (f->cover ||
			    (pass == 0 ? f->peer != p
				       : f->peer->uid != p->uid) ||
			    !td__row_charges(b, f, v) ||
			    (b->cur_v == v ? f->cur_pin : f->pinned) != pin)
				continue;
			return f;
		}
	return NULL;
}

void td__follow_cover(struct follower *f, struct td__lease *l)
{
	if (!f)
		return;
	f->cover = l;
	l->cover = f;
}

void td__follow_cover_lease(struct follower *f, const struct td__version *v,
			    uint64_t pin)
{
	struct td__lease *l;

	if (f->cover)
		return;
	l = lease_uncovered(f->peer, v, pin);
	if (!l)
		return;
	td__tenant_sub(f->peer->uid, TD__LIM_PINNED, l->pinned);
	l->pinned = 0;
	td__follow_cover(f, l);
}

void td__follow_lease_gone(struct td__lease *l)
{
	struct follower *f = l->cover;

	td__follow_uncover(l);
	/* its row counts the version still: counted once with another */
	if (f)
		td__follow_cover_lease(f, l->v,
				       td__follow_pin(l->v, f->peer->uid));
}

void td__follow_uncover(struct td__lease *l)
{
	if (!l->cover)
		return;
	l->cover->cover = NULL;
	l->cover = NULL;
}

/*
 * f's charge of its covered lease's version ended (the name moved on and
 * the row does not hold it, the hold went, the follow ends): the lease
 * counts those bytes from now on, as any GET lease does. It cannot be
 * refused (the lease is held already): over the limit, the uid's next
 * request is, as after follow.c's rows_charge.
 */
void td__follow_cover_end(struct follower *f)
{
	struct td__lease *l = f->cover;
	uint64_t pin = td__follow_pin(l->v, f->peer->uid);
	/* another row of the uid that counts the version (f is skipped:
	 * it covers l still) covers it on: counted once */
	struct follower *g = td__follow_cover_find(f->peer, l->v, pin);

	td__follow_uncover(l);
	if (g) {
		td__follow_cover(g, l);
		return;
	}
	l->pinned = pin;
	/* the uid has an entry (its connection): this cannot fail */
	(void)td__tenant_add(f->peer->uid, TD__LIM_PINNED, l->pinned);
}
