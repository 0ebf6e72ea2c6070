/* SPDX-License-Identifier: MIT */
/*
 * The catalogue: LIST, STAT and DELETE of names (tensors and, through
 * ring.c, rings), and WATCH/UNWATCH (the events themselves are sent by
 * store.c's td__notify, where names change).
 */
#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* kinds: the request's TD_WIRE_CAT_* bits (which entry flags it reads) */
static struct td_wire_entry entry_of(const struct td__version *v,
				     uint32_t kinds)
{
	struct td_wire_entry e = {
		.name = {v->name, v->name_len},
		.version = v->number,
		.dtype = v->dtype,
		.ndim = v->ndim,
		.bytes = v->bytes,
		.lease_count = v->lease_count,
		.flags = v->flags | (v->recycle && (kinds & TD_WIRE_CAT_RECYCLE)
					     ? TD_WIRE_ENT_RECYCLE
					     : 0),
		.meta = {v->meta, v->meta_len},
	};

	memcpy(e.shape, v->shape, sizeof(e.shape));
	return e;
}

/* The store's sorted names, as td__access_skip reads them. */
static const char *name_at(const void *ctx, size_t i, size_t *len)
{
	const struct td__version *v = ((const struct td__store *)ctx)->names[i];

	*len = v->name_len;
	return v->name;
}

static size_t name_find(const void *ctx, const char *key, size_t len)
{
	bool found;

	return td__name_find(ctx, key, len, &found);
}

void td__catalog_list(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	struct td__daemon *d = td__d;
	struct td__store *s = d->store;
	/* single-threaded: one LIST at a time uses it */
	static struct td__ring *rl[TD__MAX_RINGS];
	const struct td__policy_names nm = {name_at, name_find, s, s->count};
	struct td_wire_list_req m;
	struct td_err e = {0};
	struct td_wire_wr wr;
	uint32_t count = 0, more = 0;
	unsigned nr, j = 0;
	size_t i;
	bool found;
	int rc = td_wire_list_req_decode(rq->body, h->body_len, &m, &e);

	if (td__peer_bad_body(p, h, rc, &e))
		return;
	/* start at the first name > after, and >= prefix */
	i = td__name_find(s, m.after.ptr, m.after.len, &found);
	if (found)
		i++;
	if (td__name_cmp(m.prefix.ptr, m.prefix.len, m.after.ptr, m.after.len) >
	    0)
		i = td__name_find(s, m.prefix.ptr, m.prefix.len, &found);
	/* rings, merged in name order (a name is never both); at most
	 * TD__MAX_RINGS of them, each checked as it comes */
	nr = td__ring_list(m.prefix, m.after, rl);
	td_wire_wr_init(&wr, TD__TX_BODY(d), TD__TX_CAP);
	td_wire_list_rep_begin(&wr);
	for (;;) {
		const struct td__version *v;
		struct td_wire_entry ent, rent;

		/*
		 * names this peer may not read are not listed: a run of
		 * them is jumped over by binary search to the next name
		 * under a prefix it may read, not walked (another tenant's
		 * million names cost a few searches a page, not a million
		 * checks)
		 */
		i = td__access_skip(p, rq->op->perm, &nm, i);
		v = i < s->count ? s->names[i] : NULL;
		/* names sharing the prefix are contiguous once sorted */
		if (v && (v->name_len < m.prefix.len ||
			  memcmp(v->name, m.prefix.ptr, m.prefix.len) != 0))
			v = NULL;
		if (j < nr)
			td__ring_entry(rl[j], m.flags & TD_WIRE_CAT_KINDS,
				       &rent);
		if (v && (j == nr || td__name_cmp(v->name, v->name_len,
					      rent.name.ptr,
					      rent.name.len) < 0)) {
			ent = entry_of(v, m.flags);
			i++;
		} else if (j < nr) {
			ent = rent;
			j++;
			if (!td__access_may(p, rq->op->perm, ent.name.ptr,
					    ent.name.len))
				continue;
		} else {
			break;
		}
		if (td_wire_entry_put(&wr, &ent) < 0) {
			more = 1;
			break;
		}
		count++;
	}
	td_wire_list_rep_finish(&wr, count, more);
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0, wr.off,
		      NULL, 0);
}

/* The reply to a name that is neither a tensor nor a live ring. */
static void no_tensor(struct td__peer *p, const struct td_wire_hdr *h,
		      struct td_wire_str name)
{
	td__peer_error(p, h->opcode, h->request_id, -ENOENT,
		       "no tensor named \"%.*s\"", (int)name.len, name.ptr);
}

static void reply_entry(struct td__peer *p, const struct td_wire_hdr *h,
			const struct td_wire_entry *ent)
{
	int64_t len = td_wire_entry_encode(ent, TD__TX_BODY(td__d),
					   TD__TX_CAP);

	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
		      (size_t)len, NULL, 0);
}

void td__catalog_stat(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	struct td_wire_stat_req m;
	struct td_wire_entry ent;
	struct td_err e = {0};
	struct td__ring *r;
	struct td__version *v;
	int rc = td_wire_stat_req_decode(rq->body, h->body_len, &m, &e);

	if (td__peer_bad_body(p, h, rc, &e) ||
	    !td__access_check(p, h, rq->op->perm, m.name))
		return;
	v = td__name_lookup(td__d->store, m.name);
	if (v) {
		ent = entry_of(v, m.flags);
	} else if ((r = td__ring_find(m.name))) {
		td__ring_entry(r, m.flags & TD_WIRE_CAT_KINDS, &ent);
	} else {
		no_tensor(p, h, m.name);
		return;
	}
	reply_entry(p, h, &ent);
}

void td__catalog_delete(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	struct td__daemon *d = td__d;
	struct td__store *s = d->store;
	struct td_wire_delete_req m;
	struct td_wire_delete_rep r;
	struct td_err e = {0};
	struct td__version *v;
	int64_t len;
	int rc = td_wire_delete_req_decode(rq->body, h->body_len, &m, &e);

	if (td__peer_bad_body(p, h, rc, &e))
		return;
	if (!td__access_check(p, h, rq->op->perm, m.name))
		return;
	td__store_settle(m.name.ptr, m.name.len);
	v = td__name_lookup(s, m.name);
	if (!v && td__ring_find(m.name)) {
		td__peer_error(p, h->opcode, h->request_id, -EBUSY,
			       "\"%.*s\" is a ring: it ends when its producer "
			       "closes it",
			       (int)m.name.len, m.name.ptr);
		return;
	}
	if (!v) {
		no_tensor(p, h, m.name);
		return;
	}
	if (m.version && v->number != m.version) {
		td__peer_error(p, h->opcode, h->request_id, -ESTALE,
			       "\"%.*s\" is at version %" PRIu64
			       ", not %" PRIu64 ": kept",
			       (int)m.name.len, m.name.ptr, v->number,
			       m.version);
		return;
	}
	td__name_remove(s, v);
	/* leased versions are not freed yet */
	td__store_changed(m.name.ptr, m.name.len);
	r.version = v->number;
	len = td_wire_delete_rep_encode(&r, TD__TX_BODY(d), TD__TX_CAP);
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
		      (size_t)len, NULL, 0);
	td__notify(s, TD_EVENT_DELETED, v);
	td__lease_deleted(m.name);
	td__version_retire(s, v);
	td__version_unref(s, v); /* leased versions live on, unlisted */
}

/* ---- WATCH ---- */

static void watch_free(struct td__peer *p, struct td__watch *w)
{
	td__list_del(&w->link);
	td__watch_del(td__d->store, w);
	p->n_watches--;
	td__tenant_sub(p->uid, TD__LIM_WATCHES, 1);
	free(w);
	td__d->store->freed++;
}

void td__catalog_watch(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	struct td_wire_watch_req m;
	struct td_err e = {0};
	int rc = td_wire_watch_req_decode(rq->body, h->body_len, &m, &e);
	struct td__store *s = td__d->store;
	struct td_wire_watch_rep r;
	struct td__watch *w;
	char why[256];
	int64_t len;

	if (td__peer_bad_body(p, h, rc, &e))
		return;
	/* a prefix watch is filtered per event instead (notify) */
	if (!(m.flags & TD_WIRE_WATCH_PREFIX) &&
	    !td__access_check(p, h, rq->op->perm, m.name))
		return;
	/*
	 * The daemon sees no message per ring publish, so it has nothing to
	 * notify; a watch that could never fire is refused rather than
	 * accepted in silence. (Prefix watches report tensors only.)
	 */
	if (!(m.flags & TD_WIRE_WATCH_PREFIX) && td__ring_find(m.name)) {
		td__peer_error(p, h->opcode, h->request_id, -EOPNOTSUPP,
			       "\"%.*s\" is a ring: WATCH does not see ring "
			       "publishes; subscribe to it, or GET it with a "
			       "newer-than wait",
			       (int)m.name.len, m.name.ptr);
		return;
	}
	if (p->n_watches >= TD__MAX_WATCHES) {
		td__peer_error(p, h->opcode, h->request_id, -ENOBUFS,
			       "too many watches on this connection (max %d)",
			       TD__MAX_WATCHES);
		return;
	}
	rc = td__tenant_check(p->uid, TD__LIM_WATCHES, 1, why, sizeof(why));
	if (rc < 0) {
		td__peer_error(p, h->opcode, h->request_id, rc, "WATCH: %s",
			       why);
		return;
	}
	w = calloc(1, sizeof(*w));
	if (w && td__tenant_add(p->uid, TD__LIM_WATCHES, 1) < 0) {
		free(w);
		w = NULL;
	}
	if (!w) {
		td__peer_nomem(p, h);
		return;
	}
	w->peer = p;
	w->id = s->next_watch++;
	w->prefix = m.flags & TD_WIRE_WATCH_PREFIX;
	w->len = m.name.len;
	memcpy(w->name, m.name.ptr, m.name.len);
	td__list_add_tail(&p->watches, &w->link);
	td__watch_add(s, w);
	p->n_watches++;
	r.watch_id = w->id;
	len = td_wire_watch_rep_encode(&r, TD__TX_BODY(td__d), TD__TX_CAP);
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
		      (size_t)len, NULL, 0);
}

void td__catalog_unwatch(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	struct td_wire_unwatch_req m;
	struct td_err e = {0};
	int rc = td_wire_unwatch_req_decode(rq->body, h->body_len, &m, &e);

	if (td__peer_bad_body(p, h, rc, &e))
		return;
	for (struct td__list *l = p->watches.next; l != &p->watches;
	     l = l->next) {
		struct td__watch *w =
			td__container_of(l, struct td__watch, link);

		if (w->id != m.watch_id)
			continue;
		watch_free(p, w);
		td__peer_done(p, h);
		return;
	}
	td__peer_error(p, h->opcode, h->request_id, -ENOENT,
		       "no watch %llu on this connection",
		       (unsigned long long)m.watch_id);
}

/* A dying peer's watches end with it. */
void td__catalog_peer_gone(struct td__peer *p)
{
	while (!td__list_empty(&p->watches))
		watch_free(p, td__container_of(p->watches.next,
					       struct td__watch, link));
}
