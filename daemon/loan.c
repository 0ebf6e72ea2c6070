/* SPDX-License-Identifier: MIT */
/*
 * ALLOC: planes the daemon creates for a producer to fill and PUBLISH,
 * recycled buffers first (docs/fastpath.md, "Recycled loans"). An alloc
 * is charged to its producer's uid until it is published or its
 * connection goes.
 */
#include "store.h"

#include <errno.h>
#include <string.h>

#include "bytes.h"

void td__loan_free(struct td__store *s, struct td__alloc *a)
{
	for (uint32_t i = 0; i < a->count; i++)
		td__vfd_close(s, &a->fds[i]);
	td__acct_sub(s, a->uid, a->acct);
	TD__SPARE_PUT(&s->spare_allocs, a, struct td__alloc, link);
}

static bool held_in(const struct td_wire_alloc_req *m, uint64_t id)
{
	for (uint32_t i = 0; i < m->held_count; i++)
		if (m->held[i] == id)
			return true;
	return false;
}

bool td__alloc_is_for(const struct td__alloc *a, struct td_wire_str name)
{
	return a->name_len == name.len &&
	       memcmp(a->name, name.ptr, name.len) == 0;
}

void td__loan_shown(struct td__version *v, struct td__peer *p)
{
	bool unbound = false;

	if (!v->recycle || !v->owner || v->owner == p ||
	    td__access_reads_all(p))
		return;
	for (uint32_t i = 0; i < v->nfds; i++) {
		if (!v->fds[i].shown) {
			v->fds[i].shown = true;
			v->fds[i].shown_at = td__d->stats.policy_reloads;
		}
		unbound |= !v->fds[i].exposed;
	}
	/* the rule scan only while there is something left to bind */
	if (unbound && !td__access_reads_writes_of(p, v->owner))
		for (uint32_t i = 0; i < v->nfds; i++)
			v->fds[i].exposed = true;
}

void td__loan_unheld(struct td__version *v)
{
	if (!v->recycle)
		return;
	for (uint32_t i = 0; i < v->nfds; i++)
		v->fds[i].unheld = true;
}

/*
 * May buffer f, bound to `bound` when exposed (a reader that may not
 * read every name its producer may write was sent it under that name),
 * be lent to alloc a? Not once a policy reload came after it was shown
 * to another connection that may not read every name (it may have
 * taken that reader's access away: the reader maps the buffer still),
 * nor once a follower reads it with no hold the daemon keeps (unheld);
 * exposed, only to an alloc of that very name; and a named alloc only
 * takes a buffer that carried its name alone, or none yet (its bytes
 * may hold another name's where a tensor does not cover them), under a
 * policy.
 * docs/fastpath.md, "Across names".
 */
static bool lendable(const struct td__vfd *f, struct td_wire_str bound,
		     const struct td__alloc *a)
{
	if ((f->shown && f->shown_at != td__d->stats.policy_reloads) ||
	    f->unheld)
		return false;
	if (f->exposed && (!a->name_len || !td__alloc_is_for(a, bound)))
		return false;
	/* without a policy every reader may read every name */
	return !a->name_len || !f->carried || !td__d->policy ||
	       (!f->mixed && f->carried == a->name_tag);
}

/*
 * A free buffer of p for a plane of `size` bytes that alloc a may have:
 * `prefer` (the buffer a rewrite took back, 0 none) first, then one the
 * client says it holds mapped (held ids), else any of that size. Oldest
 * first. *bound: the oldest of that size it may not have (NULL none).
 */
static struct td__freebuf *freebuf_pick(struct td__peer *p, uint64_t size,
					const struct td_wire_alloc_req *m,
					const struct td__alloc *a,
					uint64_t prefer, bool *held,
					struct td__freebuf **bound)
{
	struct td__freebuf *any = NULL, *mapped = NULL;

	*bound = NULL;
	for (struct td__list *l = p->freebufs.next; l != &p->freebufs;
	     l = l->next) {
		struct td__freebuf *fb =
			td__container_of(l, struct td__freebuf, link);

		if (fb->f.size != size)
			continue;
		/* its device may still write it: another, or a new one */
		if (!td__fence_let_go(&fb->fence, fb->uid))
			continue;
		if (!lendable(&fb->f,
			      (struct td_wire_str){fb->name, fb->name_len},
			      a)) {
			if (!*bound)
				*bound = fb;
			continue;
		}
		if (prefer && fb->f.buffer_id == prefer) {
			mapped = fb;
			break;
		}
		if (!mapped && held_in(m, fb->f.buffer_id))
			mapped = fb;
		if (!any)
			any = fb;
		if (mapped && !prefer)
			break;
	}
	*held = mapped ? held_in(m, mapped->f.buffer_id) : false;
	return mapped ? mapped : any;
}

/* ---- rewriting the latest version (TD_WIRE_ALLOC_REWRITE) ---- */

/*
 * answer: the name got no version (the rewrite ended without one): the
 * GETs parked only for it get what they would have got without it (a
 * publish of the name answered them itself)
 */
static void rewrite_end(struct td__peer *p, bool answer)
{
	td__list_del(&p->rw_link);
	td__list_init(&p->rw_link);
	p->rw_alloc = 0;
	if (answer)
		td__store_rewrite_over(td__d->store, p->rw_name, p->rw_len);
}

/*
 * p's rewrite is over (its alloc published, dropped or superseded, or
 * its connection gone). When its name still has no version, the one
 * taken back was in effect deleted: watchers are told, as for DELETE
 * (the take-back itself told nobody, its next version being due).
 */
static void rewrite_drop(struct td__peer *p)
{
	struct td__store *s = td__d->store;
	struct td_wire_str n = {p->rw_name, p->rw_len};
	bool gone;

	if (!p->rw_alloc)
		return;
	gone = !td__name_lookup(s, n);
	rewrite_end(p, gone);
	if (gone)
		td__notify_name(s, TD_EVENT_DELETED, n, p->rw_number);
}

void td__rewrite_published(struct td__peer *p, const struct td__version *v)
{
	/* its own publish, or that of another REWRITE alloc of p's */
	rewrite_drop(p);
	p->rw_len = v->name_len;
	memcpy(p->rw_name, v->name, v->name_len);
	p->rw_number = v->number;
}

void td__rewrite_superseded(const struct td__version *v)
{
	struct td__list *head = &td__d->store->rewrites;

	for (struct td__list *l = head->next, *n; l != head; l = n) {
		struct td__peer *p =
			td__container_of(l, struct td__peer, rw_link);

		n = l->next;
		if (p->rw_len == v->name_len &&
		    memcmp(p->rw_name, v->name, v->name_len) == 0)
			rewrite_end(p, false);
	}
}

bool td__rewrite_pending(struct td_wire_str name)
{
	const struct td__list *head = &td__d->store->rewrites;
	uint64_t now = uv_now(td__d->loop);

	for (const struct td__list *l = head->next; l != head; l = l->next) {
		const struct td__peer *p =
			td__container_of(l, struct td__peer, rw_link);

		/* a loan dropped unpublished (td_alloc_free sends nothing)
		 * holds the name up no longer than a ring's rewrite */
		if (now - p->rw_since < TD__REWRITE_WAIT_MS &&
		    p->rw_len == name.len &&
		    memcmp(p->rw_name, name.ptr, name.len) == 0)
			return true;
	}
	return false;
}

/*
 * The version p published last from a REWRITE alloc, taken back when it
 * is still current, recyclable, of exactly m's planes, p's uid may still
 * write its name (a policy reloaded since may have taken that away: the
 * take-back deletes it for a while, or for good), and nobody holds
 * it: no lease, no follower's row, no snapshot (each a reference). It
 * stops being current (no event: its name's next version is on its way)
 * and, once unreferenced, its buffers go to p's free list, where
 * freebuf_pick prefers them: prefer[i] is plane i's buffer id. Not for
 * an alloc named for another name (it may be published as that one
 * only), nor when a buffer of it may not be lent to alloc a (lendable).
 * keep (non-NULL: the client can fire a stage): a copy of the version's
 * descriptor, when its name is followed, for the stage of the loan.
 * Returns the planes taken back, 0 none.
 */
static uint32_t rewrite_take(struct td__store *s, struct td__peer *p,
			     const struct td_wire_alloc_req *m,
			     const struct td__alloc *a, uint64_t *prefer,
			     struct td__version **keep)
{
	struct td_wire_str n = {p->rw_name, p->rw_len};
	struct td__version *v;

	if (!p->rw_len)
		return 0;
	td__store_settle(n.ptr, n.len);
	v = td__name_lookup(s, n);
	/* a named alloc may be published as its name only */
	if (a->name_len && !td__alloc_is_for(a, n))
		return 0;
	if (!v || v->number != p->rw_number || !v->recycle || v->owner != p ||
	    v->lease_count || v->refs != 1 || v->nfds != m->plane_count ||
	    td__version_pinned(v) ||
	    !td__access_may(p, TD__PERM_WRITE, n.ptr, n.len))
		return 0;
	for (uint32_t i = 0; i < v->nfds; i++) {
		if (v->fds[i].fd < 0 || v->fds[i].size != m->sizes[i] ||
		    !lendable(&v->fds[i], n, a))
			return 0;
		prefer[i] = v->fds[i].buffer_id;
	}
	if (keep)
		*keep = td__store_stage_keep(v);
	td__name_withdraw(s, v);
	td__store_changed(n.ptr, n.len);
	td__version_retire(s, v);
	td__version_unref(s, v);
	return m->plane_count;
}

/* The request itself, before anything is taken. 0 or an error reply. */
static int alloc_check(struct td__peer *p, const struct td__req *rq,
		       const struct td_wire_alloc_req *m)
{
	const struct td_wire_hdr *h = rq->h;
	uint64_t sum = 0;

	if (m->plane_count == 0) {
		td__peer_error(p, h->opcode, h->request_id, -EINVAL,
			       "ALLOC of zero planes");
		return -EINVAL;
	}
	for (uint32_t i = 0; i < m->plane_count; i++) {
		/*
		 * Size 0 is a valid plane (an empty tensor, e.g. shape
		 * [0, 4]): an empty memfd that nobody maps.
		 */
		if (td__add_ovf(sum, m->sizes[i], &sum)) {
			td__peer_error(p, h->opcode, h->request_id, -EOVERFLOW,
				       "plane sizes overflow 64 bits");
			return -EOVERFLOW;
		}
	}
	if (p->n_allocs >= TD__MAX_ALLOCS) {
		td__peer_error(p, h->opcode, h->request_id, -ENOBUFS,
			       "too many unpublished allocs on this "
			       "connection (max %d)",
			       TD__MAX_ALLOCS);
		return -ENOBUFS;
	}
	if ((m->flags & TD_WIRE_ALLOC_NAMED) &&
	    !td__access_may(p, rq->op->perm, m->name.ptr, m->name.len)) {
		td__peer_error(p, h->opcode, h->request_id, -EACCES,
			       "uid %u may not write \"%.*s\" (policy %s)",
			       (unsigned)p->uid, (int)m->name.len, m->name.ptr,
			       td__d->opts.policy_path);
		return -EACCES;
	}
	/* an unnamed ALLOC: any name it may write will do */
	if (!td__access_any(p, rq->op->perm)) {
		td__peer_error(p, h->opcode, h->request_id, -EACCES,
			       "uid %u may not write any name (policy %s)",
			       (unsigned)p->uid, td__d->opts.policy_path);
		return -EACCES;
	}
	return 0;
}

/*
 * Recycled buffers first: taken off the free list (their charge moves to
 * the alloc), so eviction cannot drop them. Returns the bytes still to
 * create; held[i]: the client maps plane i's buffer already.
 */
static uint64_t alloc_recycled(struct td__store *s, struct td__peer *p,
			       struct td__alloc *a,
			       const struct td_wire_alloc_req *m,
			       const uint64_t *prefer, bool *held)
{
	uint64_t fresh = 0;

	for (uint32_t i = 0; i < m->plane_count; i++) {
		struct td__freebuf *bound = NULL;
		struct td__freebuf *fb =
			a->recycle ? freebuf_pick(p, m->sizes[i], m, a,
						  prefer ? prefer[i] : 0,
						  &held[i], &bound)
				   : NULL;

		a->sizes[i] = m->sizes[i];
		a->fds[i].fd = a->fds[i].ro = -1;
		/*
		 * An unnamed alloc that finds only buffers bound to a name
		 * will not take them (nor will the next): the oldest goes,
		 * so an unnamed stream read by others holds no more than
		 * one would that never recycled ("Across names").
		 */
		if (!fb && bound && !a->name_len)
			td__freebuf_drop(s, bound);
		if (!fb) {
			fresh += m->sizes[i];
			continue;
		}
		td__vfd_move(&a->fds[i], &fb->f);
		a->acct += fb->f.size;
		td__list_del(&fb->link);
		td__list_del(&fb->slink);
		p->n_freebufs--;
		TD__SPARE_PUT(&s->spare_freebufs, fb, struct td__freebuf,
			      link);
	}
	a->count = m->plane_count;
	return fresh;
}

/*
 * Room for `fresh` new bytes, then the new planes, reserved here unless
 * the client reserves them (unreserved non-NULL: TD_WIRE_ALLOC_RESERVE;
 * bit i set for each new plane of nonzero size). 0 or an error reply.
 */
static int alloc_create(struct td__store *s, struct td__peer *p,
			const struct td_wire_hdr *h, struct td__alloc *a,
			uint64_t fresh, uint32_t *unreserved)
{
	struct td__room room;
	const char *why = NULL;
	char lim[256];
	unsigned nfresh = 0;
	int rc, fd;

	/* a plane is a descriptor whatever its size (zero-byte ones too) */
	for (uint32_t i = 0; i < a->count; i++)
		nfresh += a->fds[i].fd < 0;
	rc = td__tenant_check(p->uid, TD__LIM_FDS, nfresh, lim, sizeof(lim));
	if (rc < 0) {
		td__peer_error(p, h->opcode, h->request_id, rc,
			       "ALLOC of %u planes: %s", nfresh, lim);
		return rc;
	}
	/* evicting first frees the memory the planes are about to take */
	if (td__store_make_room(s, p->uid, fresh, NULL, false, &room) < 0) {
		td__store_room_error(p, h, fresh, &room);
		return room.rc;
	}
	for (uint32_t i = 0; i < a->count; i++) {
		if (a->fds[i].fd >= 0)
			continue;
		rc = td__plane_create(a->sizes[i], !unreserved, &fd, &why);
		if (rc < 0) {
			td__peer_error(p, h->opcode, h->request_id, rc,
				       "plane %u (%llu bytes): %s: %s", i,
				       (unsigned long long)a->sizes[i], why,
				       strerror(-rc));
			return rc;
		}
		td__vfd_set(s, &a->fds[i], fd, true, a->uid);
		a->fds[i].size = a->sizes[i];
		if (unreserved && a->sizes[i])
			*unreserved |= 1u << i;
	}
	if (td__acct_add(s, a->uid, fresh) < 0) {
		td__peer_nomem(p, h);
		return -ENOMEM;
	}
	a->acct += fresh;
	return 0;
}

/* An unpublished alloc's recycled planes back to the free list. */
static void loan_return(struct td__store *s, struct td__peer *p,
			struct td__alloc *a)
{
	td__list_del(&a->link);
	p->n_allocs--;
	td__acct_sub(s, a->uid, a->acct);
	a->acct = 0;
	for (uint32_t i = 0; i < a->count; i++)
		if (a->fds[i].fd >= 0)
			td__freebuf_keep(s, p, a->uid, &a->fds[i],
					 (struct td_wire_str){a->name,
							      a->name_len},
					 -1);
	td__loan_free(s, a);
}

/* The loan p was lent last goes back (TD_WIRE_ALLOC_UNLOAN). */
static void loan_unlend(struct td__store *s, struct td__peer *p)
{
	struct td__alloc *a = p->loan_id ? td__loan_find(p, p->loan_id) : NULL;

	/* its stage goes first (committed if fired: then a is gone) */
	if (a && td__peer_staged(p, a->id) >= 0) {
		td__store_settle(a->name, a->name_len);
		a = td__loan_find(p, p->loan_id);
	}
	p->loan_id = 0;
	if (a)
		loan_return(s, p, a);
}

/* The reply's planes: fd -1 for a held one, else the fd to send. */
static void loan_reply(const struct td__alloc *a, const bool *held,
		       struct td_wire_alloc_rep *r, int *fds, unsigned *nfds)
{
	*nfds = 0;
	for (uint32_t i = 0; i < a->count; i++) {
		/* the client maps a held buffer already: no fd for it */
		r->fds[i].fd = held[i] ? -1 : a->fds[i].fd;
		r->fds[i].buffer_id = a->fds[i].buffer_id;
		if (!held[i])
			fds[(*nfds)++] = a->fds[i].fd;
	}
	r->alloc_id = a->id;
	r->fd_count = a->count;
}

/* a's name (len 0: unnamed) */
static void alloc_name(struct td__alloc *a, struct td_wire_str name)
{
	a->name_len = (uint16_t)name.len;
	a->name_tag = name.len ? td__name_tag(td__d->store, name) : 0;
	if (name.len)
		memcpy(a->name, name.ptr, name.len);
}

void td__loan_lend(struct td__peer *p, uint32_t count, const uint64_t *sizes,
		   bool rewrite, struct td_wire_str name,
		   uint32_t held_count, const uint64_t *held_ids,
		   struct td_wire_alloc_rep *r, int *fds, unsigned *nfds)
{
	struct td__store *s = td__d->store;
	struct td_wire_alloc_req m = {.flags = TD_WIRE_ALLOC_RECYCLE,
				      .plane_count = count,
				      .held_count = held_count};
	bool held[TD_WIRE_MAX_PLANES] = {false};
	struct td__alloc *a;

	r->alloc_id = 0;
	r->fd_count = 0;
	*nfds = 0;
	p->loan_id = 0;
	if (p->n_allocs >= TD__MAX_ALLOCS || !p->n_freebufs)
		return;
	memcpy(m.sizes, sizes, count * sizeof(*sizes));
	memcpy(m.held, held_ids, held_count * sizeof(*held_ids));
	a = TD__SPARE_NEW(&s->spare_allocs, struct td__alloc, link);
	if (!a)
		return;
	a->id = s->next_alloc++;
	a->uid = p->uid;
	a->recycle = true;
	/* lent after a REWRITE alloc's publish: rewritable as that was */
	a->rewrite = rewrite;
	/* and after a named one's, for the same name */
	alloc_name(a, name);
	td__list_add_tail(&p->allocs, &a->link);
	p->n_allocs++;
	/* only what the free list holds: a loan never makes a plane */
	if (alloc_recycled(s, p, a, &m, NULL, held) > 0) {
		loan_return(s, p, a);
		return;
	}
	p->loan_id = a->id;
	loan_reply(a, held, r, fds, nfds);
}

void td__loan_alloc(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	struct td__daemon *d = td__d;
	struct td__store *s = d->store;
	struct td_wire_alloc_req m;
	struct td_wire_alloc_rep r = {0};
	struct td_err e = {0};
	struct td__alloc *a;
	int fds[TD_WIRE_MAX_PLANES];
	bool held[TD_WIRE_MAX_PLANES] = {false};
	uint64_t prefer[TD_WIRE_MAX_PLANES] = {0};
	uint32_t unreserved = 0;
	unsigned nsend = 0;
	struct td__version *keep = NULL;
	int64_t len;
	int rc = td_wire_alloc_req_decode(rq->body, h->body_len, &m, &e);

	if (td__peer_bad_body(p, h, rc, &e))
		return;
	if (m.flags & TD_WIRE_ALLOC_UNLOAN)
		loan_unlend(s, p);
	if (alloc_check(p, rq, &m) < 0)
		return;
	a = TD__SPARE_NEW(&s->spare_allocs, struct td__alloc, link);
	if (!a) {
		td__peer_nomem(p, h);
		return;
	}
	a->id = s->next_alloc++;
	a->uid = p->uid;
	a->recycle = m.flags & TD_WIRE_ALLOC_RECYCLE;
	a->rewrite = a->recycle && (m.flags & (TD_WIRE_ALLOC_REWRITE |
					       TD_WIRE_ALLOC_REWRITABLE));
	alloc_name(a, m.name);
	/* a rewrite alloc dropped unpublished stops holding its name up */
	if (a->recycle && (m.flags & TD_WIRE_ALLOC_REWRITE))
		rewrite_drop(p);
	if (a->recycle && (m.flags & TD_WIRE_ALLOC_REWRITE) &&
	    rewrite_take(s, p, &m, a, prefer,
			 (m.flags & TD_WIRE_ALLOC_STAGE) ? &keep : NULL)) {
		p->rw_alloc = a->id;
		p->rw_since = uv_now(d->loop);
		td__list_add_tail(&s->rewrites, &p->rw_link);
	}
	if (alloc_create(s, p, h, a,
			 alloc_recycled(s, p, a, &m,
					p->rw_alloc == a->id ? prefer : NULL,
					held),
			 (m.flags & TD_WIRE_ALLOC_RESERVE) ? &unreserved
							   : NULL) < 0) {
		if (p->rw_alloc == a->id)
			rewrite_drop(p);
		td__loan_free(s, a);
		if (keep)
			td__version_put(s, keep);
		return;
	}
	loan_reply(a, held, &r, fds, &nsend);
	r.unreserved = unreserved;
	td__list_add_tail(&p->allocs, &a->link);
	p->n_allocs++;
	/* the buffers taken back, staged as the name's next version: its
	 * followers take it when the producer fires, not at its PUBLISH */
	if (keep && !unreserved)
		td__store_stage_takeback(p, keep, a, &r.stage_version,
					 &r.stage_gen, &r.stage_slot);
	else if (keep)
		td__version_put(s, keep);
	len = td_wire_alloc_rep_encode(&r, TD__TX_BODY(d), TD__TX_CAP);
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
		      (size_t)len, fds,
		      (m.flags & TD_WIRE_REQ_SCM) ? nsend : 0);
}

struct td__alloc *td__loan_find(struct td__peer *p, uint64_t id)
{
	for (struct td__list *l = p->allocs.next; l != &p->allocs;
	     l = l->next) {
		struct td__alloc *a = td__container_of(l, struct td__alloc,
						       link);

		if (a->id == id)
			return a;
	}
	return NULL;
}

void td__loan_done(struct td__peer *p, struct td__alloc *a)
{
	if (a->id == p->loan_id)
		p->loan_id = 0;
	/* a rewrite's end is the caller's: td__rewrite_published, or the
	 * connection's end below */
	td__list_del(&a->link);
	p->n_allocs--;
	td__loan_free(td__d->store, a);
}

/*
 * RELEASE with TD_WIRE_REL_ALLOC: the client gave up unpublished alloc
 * id, which goes as at the connection's end (its buffers closed; a
 * rewrite it took back ends first). -ENOENT: no such alloc.
 */
int td__loan_give_back(struct td__peer *p, uint64_t id)
{
	struct td__alloc *a = td__loan_find(p, id);

	/* its stage goes first (committed if fired: then a is gone) */
	if (a && td__peer_staged(p, id) >= 0) {
		td__store_settle(a->name, a->name_len);
		a = td__loan_find(p, id);
	}
	if (!a)
		return -ENOENT;
	if (p->rw_alloc == id)
		rewrite_drop(p);
	td__loan_done(p, a);
	return 0;
}

/* Unpublished allocs die with their producer. */
void td__loan_peer_gone(struct td__peer *p)
{
	rewrite_drop(p);
	while (!td__list_empty(&p->allocs))
		td__loan_done(p, td__container_of(p->allocs.next,
						  struct td__alloc, link));
}
