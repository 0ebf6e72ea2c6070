/* SPDX-License-Identifier: MIT */
/*
 * GET and RELEASE: leases on versions (and, through ring.c, on ring
 * slots), and GETs parked until a PUBLISH, a ring version or their
 * deadline. A lease keeps its version's bytes alive (store.h).
 */
#include "store.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Released lease records kept for reuse (struct td__store.free_leases). */
#define LEASE_CACHE 1024

/*
 * Whether the reply may leave out entry f: a plane buffer the SCM client
 * says it has mapped (held). The list is believed for this and nothing
 * else: a client that lies only gets a reply it cannot map. Fences are
 * always attached (a fresh one each time, never cached by the client).
 */
static bool held_by_client(const struct td__vfd *f, uint32_t held_count,
			   const uint64_t *held)
{
	if (!f->tracked)
		return false;
	for (uint32_t i = 0; i < held_count; i++)
		if (held[i] == f->buffer_id)
			return true;
	return false;
}

/*
 * A lease record of p, on its list (a released one reused: no allocation
 * in the steady state), pinning pin bytes of another uid's version. 0,
 * -ENOBUFS (p's budget), -EDQUOT (its uid's leases or pinned limit, the
 * reason in why) or -ENOMEM.
 */
static int lease_new(struct td__store *s, struct td__peer *p, uint64_t pin,
		     struct td__lease **out, char *why, size_t cap)
{
	struct td__lease *l;
	int rc;

	if (p->n_leases >= TD__MAX_LEASES)
		return -ENOBUFS;
	rc = td__tenant_check(p->uid, TD__LIM_LEASES, 1, why, cap);
	if (rc == 0)
		rc = td__tenant_check(p->uid, TD__LIM_PINNED, pin, why, cap);
	if (rc < 0)
		return rc;
	/* the uid has an entry (its connection): these cannot fail */
	if (td__tenant_add(p->uid, TD__LIM_LEASES, 1) < 0 ||
	    td__tenant_add(p->uid, TD__LIM_PINNED, pin) < 0) {
		td__tenant_sub(p->uid, TD__LIM_LEASES, 1);
		return -ENOMEM;
	}
	if (!td__list_empty(&s->free_leases)) {
		l = td__container_of(s->free_leases.next, struct td__lease,
				     link);
		td__list_del(&l->link);
		s->n_free_leases--;
	} else {
		l = malloc(sizeof(*l));
		if (!l) {
			td__tenant_sub(p->uid, TD__LIM_LEASES, 1);
			td__tenant_sub(p->uid, TD__LIM_PINNED, pin);
			return -ENOMEM;
		}
	}
	/* a reused record too: no row covers it, it holds nothing */
	*l = (struct td__lease){.id = s->next_lease++, .pinned = pin,
				.tfd = -1};
	td__list_init(&l->fence_link);
	td__list_add_tail(&p->leases, &l->link);
	p->n_leases++;
	*out = l;
	return 0;
}

static void lease_drop(struct td__store *s, struct td__peer *p,
		       struct td__lease *l);

/*
 * A lease of p on v, and the GET reply that describes it in *r (its fds
 * to attach in fds[*nsend], less those held): 0, or -errno with the
 * reason in why (nothing leased).
 */
static int lease_take(struct td__peer *p, struct td__version *v,
		      uint32_t held_count, const uint64_t *held,
		      struct td_wire_get_rep *r, struct td__lease **lp,
		      int *fds, unsigned *nsend, char *why, size_t cap)
{
	struct td__store *s = td__d->store;
	/*
	 * a reader holding another uid's version pins those bytes; so does
	 * one holding a version that is no uid's (restored, or retired
	 * while only other uids leased it), its publisher too: else a
	 * publisher would GET EXACT its own retired version back once a
	 * reader made it leave its quota, and keep it charged to nobody.
	 * What a follow of its uid counts already counts once (the GET a
	 * follower's library makes for a version it has not mapped).
	 */
	uint64_t pin = v->uid != p->uid || v->unowned ? v->acct : 0;
	struct follower *f = pin ? td__follow_cover_find(p, v, pin) : NULL;
	struct td__lease *l;
	char lim[256];
	int rc = lease_new(s, p, f ? 0 : pin, &l, lim, sizeof(lim));

	if (rc == -ENOBUFS)
		snprintf(why, cap, "too many leases on this connection (max "
			 "%d)", TD__MAX_LEASES);
	else if (rc == -EDQUOT)
		snprintf(why, cap, "GET \"%.*s\" (%llu bytes of uid %u): %s; "
			 "release leases first", (int)v->name_len, v->name,
			 (unsigned long long)v->acct, (unsigned)v->uid, lim);
	else if (rc < 0)
		snprintf(why, cap, "out of memory");
	if (rc < 0)
		return rc == -ENOBUFS || rc == -EDQUOT ? rc : -ENOMEM;
	l->v = v;
	td__follow_cover(f, l);
	v->used = ++s->tick;
	td__lru_touch(&s->lru_order, v);
	v->refs++;
	v->lease_count++;
	v->foreign_leases += v->uid != p->uid;
	/* an eventfd fence: the reader gets a timerfd of its own (fence.c) */
	rc = td__fence_lease(p, v, l, lim, sizeof(lim));
	if (rc < 0) {
		lease_drop(s, p, l);
		snprintf(why, cap, "GET \"%.*s\": %s", (int)v->name_len,
			 v->name, lim);
		return rc;
	}
	*r = (struct td_wire_get_rep){
		.version = v->number,
		.lease_id = l->id,
		.meta = {v->meta, v->meta_len},
		.blob = {v->blob, v->blob_len},
		.fd_count = v->nfds,
	};
	td__loan_shown(v, p);
	for (uint32_t i = 0; i < v->nfds; i++) {
		r->fds[i].fd = td__vfd_out(&v->fds[i]);
		r->fds[i].buffer_id = v->fds[i].buffer_id;
		if (rc > 0 && (int)i == v->fence_ix)
			r->fds[i].fd = l->tfd;
		/* held ids come only with TD_WIRE_REQ_SCM (wire decoder) */
		if (held_by_client(&v->fds[i], held_count, held))
			r->fds[i].fd = -1;
		else
			fds[(*nsend)++] = r->fds[i].fd;
	}
	*lp = l;
	return 0;
}

static void reply_get(struct td__peer *p, uint16_t op, uint64_t request_id,
		      uint32_t flags, uint32_t held_count,
		      const uint64_t *held, struct td__version *v, bool crowd)
{
	struct td__daemon *d = td__d;
	struct td_wire_get_rep r;
	int fds[TD__TABLE_MAX];
	unsigned nsend = 0;
	struct td__lease *l;
	char why[512];
	int64_t len;
	int rc = lease_take(p, v, held_count, held, &r, &l, fds, &nsend, why,
			    sizeof(why));

	if (rc < 0) {
		td__peer_error(p, op, request_id, rc, "%s", why);
		return;
	}
	len = td_wire_get_rep_encode(&r, TD__TX_BODY(d), TD__TX_CAP);
	/* cannot fail: blob and meta were bounded when published */
	crowd = crowd && (p->features & TD_WIRE_FEAT_GET_CROWD);
	td__peer_send(p, op, TD_WIRE_F_REPLY | (crowd ? TD_WIRE_F_CROWD : 0),
		      request_id, 0, len < 0 ? 0 : (size_t)len, fds,
		      (flags & TD_WIRE_REQ_SCM) ? nsend : 0);
}

static void lease_drop(struct td__store *s, struct td__peer *p,
		       struct td__lease *l)
{
	td__list_del(&l->link);
	p->n_leases--;
	td__fence_unlease(p, l);
	if (l->ring) {
		td__ring_unlease(l->ring, l->slot, p->uid);
	} else {
		td__follow_lease_gone(l);
		l->v->lease_count--;
		l->v->foreign_leases -= l->v->uid != p->uid;
		td__version_unref(s, l->v);
	}
	td__tenant_sub(p->uid, TD__LIM_LEASES, 1);
	td__tenant_sub(p->uid, TD__LIM_PINNED, l->pinned);
	if (s->n_free_leases < LEASE_CACHE) {
		td__list_add_tail(&s->free_leases, &l->link);
		s->n_free_leases++;
	} else {
		free(l);
		s->freed++;
	}
}

/* ring.c's hook (struct td__ring_hooks): a lease on a ring slot. It
 * pins nothing of its own: ring.c counts the ring once per uid that
 * holds it (td__ring_hold), however many leases and subscriptions. */
static int lease_ring(struct td__peer *p, struct td__ring *r, uint32_t slot,
		      uint64_t *id)
{
	struct td__lease *l;
	int rc = lease_new(td__d->store, p, 0, &l, td__d->reason,
			   sizeof(td__d->reason));

	if (rc < 0)
		return rc;
	l->ring = r;
	l->slot = slot;
	*id = l->id;
	return 0;
}

/* ---- the deadlines of parked GETs: a binary min-heap (store->due) ---- */

static void due_set(struct td__store *s, size_t i, struct td__waiter *w)
{
	s->due[i] = w;
	w->due_at = i + 1;
}

static void due_up(struct td__store *s, size_t i)
{
	struct td__waiter *w = s->due[i];

	while (i > 0 && s->due[(i - 1) / 2]->deadline > w->deadline) {
		due_set(s, i, s->due[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	due_set(s, i, w);
}

static void due_down(struct td__store *s, size_t i)
{
	struct td__waiter *w = s->due[i];

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= s->ndue)
			break;
		if (c + 1 < s->ndue &&
		    s->due[c + 1]->deadline < s->due[c]->deadline)
			c++;
		if (s->due[c]->deadline >= w->deadline)
			break;
		due_set(s, i, s->due[c]);
		i = c;
	}
	due_set(s, i, w);
}

/* Room for one more (before the GET is parked): 0, or -ENOMEM. */
static int due_reserve(struct td__store *s)
{
	struct td__waiter **n =
		td__table_room(s->due, s->ndue, &s->due_cap, sizeof(*n));

	if (!n)
		return -ENOMEM;
	s->due = n;
	return 0;
}

static void due_push(struct td__store *s, struct td__waiter *w)
{
	s->due[s->ndue++] = w;
	due_up(s, s->ndue - 1);
}

static void due_remove(struct td__store *s, struct td__waiter *w)
{
	size_t i = w->due_at - 1;
	struct td__waiter *last = s->due[--s->ndue];

	w->due_at = 0;
	if (last == w)
		return;
	due_set(s, i, last);
	if (i > 0 && s->due[(i - 1) / 2]->deadline > last->deadline)
		due_up(s, i);
	else
		due_down(s, i);
}

static void waiter_free(struct td__waiter *w)
{
	td__list_del(&w->link);
	if (w->due_at)
		due_remove(td__d->store, w);
	td__list_del(&w->blink);
	td__list_del(&w->rlink);
	td__body_put(td__d->store, w->many);
	w->many = NULL;
	w->peer->n_waiters--;
	td__tenant_sub(w->peer->uid, TD__LIM_WAITERS, 1);
	TD__SPARE_PUT(&td__d->store->spare_waiters, w, struct td__waiter, link);
}

/* The bucket of struct td__store.wait_buckets of name (its seeded hash) */
static struct td__list *wait_bucket(struct td__store *s, const char *name,
				    size_t len)
{
	return td__name_bucket(s, s->wait_buckets, name, len);
}

static void on_timer(uv_timer_t *t);

/* The timer fires by `deadline` (ms, uv_now()'s clock); never later than
 * it was set for. */
static void timer_arm(struct td__store *s, uint64_t deadline)
{
	uint64_t now = uv_now(s->d->loop);

	if (deadline >= s->timer_due)
		return;
	s->timer_due = deadline;
	uv_timer_start(&s->timer, on_timer,
		       deadline > now ? deadline - now : 0, 0);
}

/*
 * The timer for the earliest deadline of the parked GETs, the top of the
 * heap; only when the timer fired (a served GET leaves the timer as it
 * is: it may fire for a GET that is gone, and then looks again).
 */
static void rearm(struct td__store *s)
{
	uv_timer_stop(&s->timer);
	s->timer_due = UINT64_MAX;
	if (s->ndue)
		timer_arm(s, s->due[0]->deadline);
}

static void on_timer(uv_timer_t *t)
{
	struct td__store *s = t->data;
	uint64_t now = uv_now(s->d->loop);

	while (s->ndue && s->due[0]->deadline <= now) {
		struct td__waiter *w = s->due[0];

		if (w->sub)
			td__peer_error(w->peer, TD_OP_RING_SUBSCRIBE,
				       w->request_id, -ETIMEDOUT,
				       "no ring named \"%.*s\" was created "
				       "within %u ms",
				       (int)w->len, w->name, w->timeout_ms);
		else if (w->fence)
			td__peer_error(w->peer, TD_OP_GET, w->request_id,
				       -ETIMEDOUT,
				       "ring \"%.*s\": its latest version is "
				       "published but its fence did not "
				       "signal within %u ms",
				       (int)w->len, w->name, w->timeout_ms);
		else if (w->rewrite)
			td__peer_error(w->peer, TD_OP_GET, w->request_id,
				       -ETIMEDOUT,
				       "\"%.*s\": its producer started "
				       "rewriting its latest version and "
				       "published nothing within %d ms",
				       (int)w->len, w->name,
				       TD__REWRITE_WAIT_MS);
		else if (w->many)
			td__peer_error(w->peer, TD_OP_GET_MANY, w->request_id,
				       -ETIMEDOUT,
				       "GET_MANY: no version of \"%.*s\" newer "
				       "than %llu within %u ms: nothing leased",
				       (int)w->len, w->name,
				       (unsigned long long)w->version,
				       w->timeout_ms);
		else if (w->mode == TD_GET_NEWER)
			td__peer_error(w->peer, TD_OP_GET, w->request_id,
				       -ETIMEDOUT,
				       "no version of \"%.*s\" newer than "
				       "%llu within %u ms",
				       (int)w->len, w->name,
				       (unsigned long long)w->version,
				       w->timeout_ms);
		else
			td__peer_error(w->peer, TD_OP_GET, w->request_id,
				       -ETIMEDOUT,
				       "no tensor named \"%.*s\" within %u ms",
				       (int)w->len, w->name, w->timeout_ms);
		waiter_free(w);
	}
	rearm(s);
}

static void many_wake(struct td__store *s, struct td__waiter *w);

/* Whether v answers the GET w parked. */
static bool wake_answers(const struct td__waiter *w,
			 const struct td__version *v)
{
	return !w->peer->dead && !w->sub && w->len == v->name_len &&
	       memcmp(w->name, v->name, w->len) == 0 &&
	       (w->mode != TD_GET_NEWER || v->number > w->version);
}

/*
 * v answers the GETs parked on its name. As many as the host has CPUs,
 * or more, are a crowd (a fan-out's consumers): each reply says so, and
 * those clients sleep at once for their next reply instead of polling
 * the CPUs this daemon and the producer need (docs/fastpath.md,
 * "Waiting").
 */
void td__lease_wake(struct td__store *s, struct td__version *v)
{
	struct td__list *b = wait_bucket(s, v->name, v->name_len), *l, *n;
	uint32_t answered = 0;

	for (l = b->next; l != b; l = l->next)
		answered += wake_answers(
			td__container_of(l, struct td__waiter, blink), v);
	for (l = b->next; l != b; l = n) {
		struct td__waiter *w =
			td__container_of(l, struct td__waiter, blink);

		n = l->next;
		if (!wake_answers(w, v) || w->ready)
			continue;
		if (w->many) {
			many_wake(s, w);
			continue;
		}
		reply_get(w->peer, TD_OP_GET, w->request_id, w->flags,
			  w->held_count, w->held, v,
			  td__d->cpus && answered >= td__d->cpus);
		waiter_free(w);
	}
}

/* store.c's hook (td__store_rewrite_over): a rewrite of name ended
 * without its publish; GETs that wait only because of it get what they
 * would have got without it. */
static void rewrite_over(struct td__store *s, const char *name,
			 uint16_t len)
{
	struct td__list *b = wait_bucket(s, name, len), *l, *n;

	for (l = b->next; l != b; l = n) {
		struct td__waiter *w =
			td__container_of(l, struct td__waiter, blink);

		n = l->next;
		if (!w->rewrite || w->peer->dead || w->len != len ||
		    memcmp(w->name, name, len) != 0)
			continue;
		/* what the GET answers without a rewrite in progress */
		if (w->mode == TD_GET_NEWER)
			td__peer_error(w->peer, TD_OP_GET, w->request_id,
				       -ETIMEDOUT,
				       "no version of \"%.*s\" newer than "
				       "%llu: its producer stopped rewriting "
				       "it without a publish",
				       (int)len, name,
				       (unsigned long long)w->version);
		else
			td__peer_error(w->peer, TD_OP_GET, w->request_id,
				       -ENOENT,
				       "no tensor named \"%.*s\": its "
				       "producer stopped rewriting it without "
				       "a publish",
				       (int)len, name);
		waiter_free(w);
	}
}

/* GET EXACT: the current version or a retired one still leased. */
static void get_exact(struct td__peer *p, const struct td_wire_hdr *h,
		      const struct td_wire_get_req *m, struct td__version *v)
{
	struct td__version *x = td__version_retired(td__d->store, m->name,
						    m->version);

	if (v && v->number == m->version)
		x = v;
	if (x)
		reply_get(p, h->opcode, h->request_id, m->flags, m->held_count,
			  m->held, x, false);
	else if (v)
		td__peer_error(p, h->opcode, h->request_id, -ENOENT,
			       "version %llu of \"%.*s\" is neither "
			       "current (%llu) nor still leased",
			       (unsigned long long)m->version,
			       (int)m->name.len, m->name.ptr,
			       (unsigned long long)v->number);
	else
		td__peer_error(p, h->opcode, h->request_id, -ENOENT,
			       "no tensor named \"%.*s\"", (int)m->name.len,
			       m->name.ptr);
}

/* Nothing to lease and the GET does not wait. */
static void get_refuse(struct td__peer *p, const struct td_wire_hdr *h,
		       const struct td_wire_get_req *m, bool ring)
{
	if (m->mode == TD_GET_LATEST && ring)
		td__peer_error(p, h->opcode, h->request_id, -ENOENT,
			       "ring \"%.*s\" has no version yet",
			       (int)m->name.len, m->name.ptr);
	else if (m->mode == TD_GET_LATEST)
		td__peer_error(p, h->opcode, h->request_id, -ENOENT,
			       "no tensor named \"%.*s\"", (int)m->name.len,
			       m->name.ptr);
	else
		td__peer_error(p, h->opcode, h->request_id, -ETIMEDOUT,
			       "no version of \"%.*s\" newer than %llu",
			       (int)m->name.len, m->name.ptr,
			       (unsigned long long)m->version);
}

/*
 * A parked request of p's, on its name's bucket and, with a deadline,
 * the heap; NULL with the refusal sent (what: "GET", "GET_MANY",
 * "RING_SUBSCRIBE").
 * The caller fills in what its kind answers with.
 */
static struct td__waiter *park(struct td__peer *p, const struct td__req *rq,
			       struct td_wire_str name, uint32_t timeout_ms,
			       uint64_t deadline, const char *what)
{
	const struct td_wire_hdr *h = rq->h;
	struct td__store *s = td__d->store;
	struct td__waiter *w;
	char why[256];
	int rc;

	assert(rq->op->flags & TD__OP_PARKS);
	/* the heap's room first: nothing to undo if there is none */
	if (deadline != UINT64_MAX && due_reserve(s) < 0) {
		td__peer_nomem(p, h);
		return NULL;
	}
	if (p->n_waiters >= TD__MAX_WAITERS) {
		td__peer_error(p, h->opcode, h->request_id, -EAGAIN,
			       "%s cannot wait: too many parked requests "
			       "(GET, GET_MANY, RING_SUBSCRIBE) on this "
			       "connection (max %d)",
			       what, TD__MAX_WAITERS);
		return NULL;
	}
	rc = td__tenant_check(p->uid, TD__LIM_WAITERS, 1, why, sizeof(why));
	if (rc < 0) {
		td__peer_error(p, h->opcode, h->request_id, rc,
			       "%s cannot wait: %s", what, why);
		return NULL;
	}
	w = TD__SPARE_NEW(&s->spare_waiters, struct td__waiter, link);
	if (!w || td__tenant_add(p->uid, TD__LIM_WAITERS, 1) < 0) {
		if (w)
			TD__SPARE_PUT(&s->spare_waiters, w, struct td__waiter,
				      link);
		td__peer_nomem(p, h);
		return NULL;
	}
	memset(w, 0, sizeof(*w));
	w->peer = p;
	w->request_id = h->request_id;
	w->op = rq->op;
	w->timeout_ms = timeout_ms;
	w->deadline = deadline;
	w->len = name.len;
	memcpy(w->name, name.ptr, name.len);
	td__list_add_tail(&p->waiters, &w->link);
	td__list_add_tail(wait_bucket(s, w->name, w->len), &w->blink);
	td__list_init(&w->rlink);
	if (w->deadline != UINT64_MAX)
		due_push(s, w);
	p->n_waiters++;
	timer_arm(s, w->deadline);
	return w;
}

/* uv_now() + ms, UINT64_MAX for TD_WIRE_WAIT_FOREVER */
static uint64_t deadline_in(uint32_t ms)
{
	return ms == TD_WIRE_WAIT_FOREVER ? UINT64_MAX
					  : uv_now(td__d->loop) + ms;
}

/*
 * Park the GET until a PUBLISH (td__lease_wake), the ring poll or its
 * deadline answers it. rw: td__ring_try_get's -EAGAIN (a ring's latest
 * slot is being rewritten) or -EINPROGRESS (its fence is pending), else 0.
 */
static void get_park(struct td__peer *p, const struct td__req *rq,
		     const struct td_wire_get_req *m, bool ring, int rw)
{
	bool rewrite = rw == -EAGAIN && m->timeout_ms < TD__REWRITE_WAIT_MS;
	struct td__waiter *w =
		park(p, rq, m->name, m->timeout_ms,
		     deadline_in(rewrite ? TD__REWRITE_WAIT_MS : m->timeout_ms),
		     "GET");

	if (!w)
		return;
	w->mode = m->mode;
	w->flags = m->flags;
	w->version = m->version;
	w->held_count = m->held_count;
	memcpy(w->held, m->held, m->held_count * sizeof(*m->held));
	w->rewrite = rewrite;
	w->fence = rw == -EINPROGRESS;
	if (ring) {
		td__list_add_tail(&td__d->store->ring_waiters, &w->rlink);
		td__ring_poll_arm();
	}
}

/* ring.c's hook: a RING_SUBSCRIBE waits for its ring (TD_WIRE_RSUB_WAIT) */
static void park_sub(struct td__peer *p, const struct td__req *rq,
		     const struct td_wire_ring_sub_req *m)
{
	struct td__waiter *w = park(p, rq, m->name, m->timeout_ms,
				    deadline_in(m->timeout_ms),
				    "RING_SUBSCRIBE");

	if (!w)
		return;
	w->sub = true;
	w->flags = m->flags & ~TD_WIRE_RSUB_WAIT;
}

void td__lease_get(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	struct td_wire_get_req m;
	struct td_err e = {0};
	struct td__ring *ring = NULL;
	struct td__version *v;
	int rw = 0; /* td__ring_try_get's -EAGAIN or -EINPROGRESS */
	int rc = td_wire_get_req_decode(rq->body, h->body_len, &m, &e);

	if (td__peer_bad_body(p, h, rc, &e))
		return;
	/* before the lookup: a refusal must not tell whether it exists */
	if (!td__access_check(p, h, rq->op->perm, m.name))
		return;
	v = td__name_lookup(td__d->store, m.name);
	/* a ring name: lease its latest slot (EXACT: any slot) */
	if (!v && (ring = td__ring_find(m.name))) {
		rc = td__ring_try_get(p, h->opcode, h->request_id, m.flags,
				      m.mode, m.version, ring);
		if (rc > 0)
			return;
		rw = rc < 0 ? rc : 0;
	}
	/* its producer took the latest version back to rewrite it (loan.c):
	 * its next one is on its way, as with a ring's rewrite */
	if (!v && !ring && td__rewrite_pending(m.name))
		rw = -EAGAIN;
	if (m.mode == TD_GET_EXACT)
		get_exact(p, h, &m, v);
	else if (v && (m.mode == TD_GET_LATEST || v->number > m.version))
		reply_get(p, h->opcode, h->request_id, m.flags, m.held_count,
			  m.held, v, false);
	else if (m.timeout_ms == 0 && rw == -EINPROGRESS)
		td__peer_error(p, h->opcode, h->request_id, -EAGAIN,
			       "ring \"%.*s\": its latest version is "
			       "published but its fence has not signalled yet",
			       (int)m.name.len, m.name.ptr);
	else if (m.timeout_ms == 0 && rw != -EAGAIN)
		get_refuse(p, h, &m, ring != NULL);
	else
		get_park(p, rq, &m, ring != NULL, rw);
}

/*
 * ring.c's hook: retry every parked GET that names a live ring (those
 * on store->ring_waiters, not every GET parked in the daemon); true while
 * any does.
 */
static bool ring_poll(void)
{
	struct td__store *s = td__d->store;
	struct td__list *l, *n;
	bool any = false;

	for (l = s->ring_waiters.next; l != &s->ring_waiters; l = n) {
		struct td__waiter *w =
			td__container_of(l, struct td__waiter, rlink);
		struct td__ring *r;

		n = l->next;
		if (w->peer->dead)
			continue;
		r = td__ring_find((struct td_wire_str){w->name, w->len});
		if (!r) {
			/* the ring is gone: an ordinary parked GET again,
			 * until a ring of its name is made (ring_adopt) */
			td__list_del(&w->rlink);
			continue;
		}
		/* one try per busy ring and pass: a producer that never
		 * finishes a rewrite (or leaves its fence pending) must not
		 * make every parked GET lease, drop and wake it each pass */
		if (td__ring_busy(r)) {
			any = true;
			continue;
		}
		if (td__ring_try_get(w->peer, TD_OP_GET, w->request_id,
				     w->flags, w->mode, w->version, r) > 0) {
			waiter_free(w);
			continue;
		}
		any = true;
	}
	return any;
}

/* A parked RING_SUBSCRIBE, answered as if it came now (its ring exists) */
static void sub_replay(struct td__waiter *w)
{
	uint8_t body[TD_WIRE_MAX_NAME + 16];
	struct td_wire_ring_sub_req q = {{w->name, w->len}, w->flags, 0};
	int64_t n = td_wire_ring_sub_req_encode(&q, body, sizeof(body));
	struct td_wire_hdr h = {.opcode = TD_OP_RING_SUBSCRIBE,
				.request_id = w->request_id,
				.body_len = (uint32_t)n};
	struct td__req rq = {.h = &h, .body = body, .op = w->op};

	assert(n > 0); /* its name and flags were decoded from a request */
	w->op->fn(w->peer, &rq);
}

/*
 * ring.c's hook: the ring `name` was just made. The GETs parked on its
 * name before it existed join the ring poll (true if there are any);
 * the RING_SUBSCRIBEs parked on it are answered now.
 */
static bool ring_adopt(struct td_wire_str name)
{
	struct td__store *s = td__d->store;
	struct td__list *b = wait_bucket(s, name.ptr, name.len), *l, *n;
	bool any = false;

	for (l = b->next; l != b; l = n) {
		struct td__waiter *w =
			td__container_of(l, struct td__waiter, blink);

		n = l->next;
		if (w->peer->dead || w->len != name.len ||
		    memcmp(w->name, name.ptr, w->len))
			continue;
		if (w->sub) {
			sub_replay(w);
			waiter_free(w);
			continue;
		}
		if (w->many) {
			td__peer_error(w->peer, TD_OP_GET_MANY, w->request_id,
				       -EINVAL,
				       "GET_MANY element 0 (\"%.*s\"): a ring "
				       "of that name was made while it waited "
				       "(GET_MANY leases tensors): nothing "
				       "leased",
				       (int)w->len, w->name);
			waiter_free(w);
			continue;
		}
		if (td__list_empty(&w->rlink))
			td__list_add_tail(&s->ring_waiters, &w->rlink);
		any = true;
	}
	return any;
}

/* ---- GET_MANY: several names leased in one step (protocol.md §6.10) ---- */

/* Lease the current version of name (element i) into r: 0 or -errno. */
static int many_one(struct td__peer *p, struct td_wire_str name,
		    struct td_wire_get_rep *r, struct td__lease **l, int *fds,
		    unsigned *nsend, char *why, size_t cap)
{
	struct td__version *v = td__name_lookup(td__d->store, name);

	if (!v && td__ring_find(name)) {
		snprintf(why, cap, "a ring: GET_MANY leases tensors, GET "
			 "leases a ring's slot");
		return -EINVAL;
	}
	if (!v && td__rewrite_pending(name)) {
		snprintf(why, cap, "its producer is rewriting its latest "
			 "version: try again");
		return -EAGAIN;
	}
	if (!v) {
		snprintf(why, cap, "no tensor of that name");
		return -ENOENT;
	}
	return lease_take(p, v, 0, NULL, r, l, fds, nsend, why, cap);
}

/* Every name's lease and reply, or none: 0, or -errno with *bad. */
static int many_lease(struct td__peer *p, const struct td_wire_get_many_req *m,
		      struct td__lease **ls, uint8_t *buf,
		      struct td_wire_get_many_rep *r, int *fds,
		      unsigned *nsend, uint32_t *bad, char *why, size_t cap)
{
	size_t off = 0;
	uint32_t n;
	int rc = 0;

	for (n = 0; n < m->count && rc == 0; n++) {
		struct td_wire_get_rep gr;
		int64_t len;

		*bad = n;
		rc = many_one(p, m->names[n], &gr, &ls[n], fds, nsend, why,
			      cap);
		if (rc < 0)
			break;
		len = td_wire_get_rep_encode(&gr, buf + off, TD__TX_CAP - off);
		r->reps[n] = (struct td_wire_bytes){buf + off, (uint32_t)len};
		off += len < 0 ? 0 : (size_t)len;
		if (len < 0 || off + 4 * (n + 2) > TD__TX_CAP) {
			snprintf(why, cap, "the reply would not fit one "
				 "message (%d bytes): ask for fewer names",
				 TD_WIRE_MAX_MSG);
			rc = -EMSGSIZE;
		} else if ((m->flags & TD_WIRE_REQ_SCM) &&
			   *nsend > TD_WIRE_MAX_FDS) {
			snprintf(why, cap, "the reply would attach %u fds, "
				 "more than %d: ask for fewer names",
				 *nsend, TD_WIRE_MAX_FDS);
			rc = -E2BIG;
		}
	}
	if (rc < 0)
		while (n-- > 0)
			lease_drop(td__d->store, p, ls[n]);
	r->count = m->count;
	return rc;
}

/*
 * GET_MANY's reply bodies are built in one buffer the loop reuses: a
 * handoff of several names allocates nothing in the daemon (a malloc per
 * answer grew it under ASan by the quarantine, td-soak's many path). An
 * answer made while another holds it (none is known) takes its own.
 */
static uint8_t many_buf[TD__TX_CAP];
static bool many_buf_busy;

static uint8_t *many_buf_take(void)
{
	if (many_buf_busy)
		return malloc(TD__TX_CAP);
	many_buf_busy = true;
	return many_buf;
}

static void many_buf_give(uint8_t *buf)
{
	if (buf == many_buf)
		many_buf_busy = false;
	else
		free(buf);
}

/* Lease every name of m and send the reply, or the refusal (nothing
 * leased): what GET_MANY answers now, or when its wait ends. */
static void many_answer(struct td__peer *p, uint64_t request_id,
			const struct td_wire_get_many_req *m)
{
	struct td_wire_get_many_rep r = {0};
	struct td__lease *ls[TD_WIRE_MANY_MAX];
	int fds[TD_WIRE_MANY_MAX * TD__TABLE_MAX];
	unsigned nsend = 0;
	uint32_t bad = 0;
	uint8_t *buf = many_buf_take();
	char why[512];
	int64_t len;
	int rc;

	if (!buf) {
		td__peer_error(p, TD_OP_GET_MANY, request_id, -ENOMEM,
			       "GET_MANY: out of memory: nothing leased");
		return;
	}
	rc = many_lease(p, m, ls, buf, &r, fds, &nsend, &bad, why,
			sizeof(why));
	if (rc < 0) {
		td__peer_error(p, TD_OP_GET_MANY, request_id, rc,
			       "GET_MANY element %u (\"%.*s\"): %s: nothing "
			       "leased",
			       bad, (int)m->names[bad].len, m->names[bad].ptr,
			       why);
		many_buf_give(buf);
		return;
	}
	/* fits: many_lease kept room for the counts */
	len = td_wire_get_many_rep_encode(&r, TD__TX_BODY(td__d), TD__TX_CAP);
	td__peer_send(p, TD_OP_GET_MANY, TD_WIRE_F_REPLY, request_id, 0,
		      len < 0 ? 0 : (size_t)len, fds,
		      (m->flags & TD_WIRE_REQ_SCM) ? nsend : 0);
	many_buf_give(buf);
}

/* A parked GET_MANY's request, decoded again from its copy. */
static void many_decode(const struct td__waiter *w,
			struct td_wire_get_many_req *m)
{
	int rc = td_wire_get_many_req_decode(w->many->data, w->many->len, m,
					     NULL);

	assert(rc == 0); /* it was decoded when it came */
	(void)rc;
}

/* A parked GET_MANY whose first name has its newer version: answered
 * now, or at the end of the PUBLISH_MANY that is committing it. */
static void many_wake(struct td__store *s, struct td__waiter *w)
{
	struct td_wire_get_many_req m;

	if (s->many_hold) {
		w->ready = true;
		return;
	}
	many_decode(w, &m);
	many_answer(w->peer, w->request_id, &m);
	waiter_free(w);
}

void td__lease_many_hold(bool on)
{
	struct td__store *s = td__d->store;
	struct td__list *l, *n;

	s->many_hold = on;
	if (on)
		return;
	for (l = s->many_waiters.next; l != &s->many_waiters; l = n) {
		struct td__waiter *w =
			td__container_of(l, struct td__waiter, rlink);

		n = l->next;
		if (w->ready && !w->peer->dead)
			many_wake(s, w);
	}
}

void td__lease_deleted(struct td_wire_str name)
{
	struct td__store *s = td__d->store;
	struct td__list *l, *n;

	for (l = s->many_waiters.next; l != &s->many_waiters; l = n) {
		struct td__waiter *w =
			td__container_of(l, struct td__waiter, rlink);
		struct td_wire_get_many_req m;

		n = l->next;
		if (w->peer->dead)
			continue;
		many_decode(w, &m);
		for (uint32_t i = 0; i < m.count; i++) {
			if (m.names[i].len != name.len ||
			    memcmp(m.names[i].ptr, name.ptr, name.len))
				continue;
			td__peer_error(w->peer, TD_OP_GET_MANY,
				       w->request_id, -ENOENT,
				       "GET_MANY element %u (\"%.*s\"): "
				       "deleted while the request waited: "
				       "nothing leased",
				       i, (int)name.len, name.ptr);
			waiter_free(w);
			break;
		}
	}
}

/* GET_MANY with TD_WIRE_MANY_NEWER: answered now when its first name has
 * a version newer than m->version, else parked (leasing nothing) until
 * it has one, its timeout, a DELETE of one of its names or its peer's
 * end. */
static void many_newer(struct td__peer *p, const struct td__req *rq,
		       const struct td_wire_get_many_req *m)
{
	const struct td_wire_hdr *h = rq->h;
	struct td__version *v = td__name_lookup(td__d->store, m->names[0]);
	struct td__waiter *w;

	if (v && v->number > m->version) {
		many_answer(p, h->request_id, m);
		return;
	}
	/* a ring among its names fails every wake: refused, not parked */
	for (uint32_t i = 0; i < m->count; i++)
		if (!td__name_lookup(td__d->store, m->names[i]) &&
		    td__ring_find(m->names[i])) {
			td__peer_error(p, h->opcode, h->request_id, -EINVAL,
				       "GET_MANY element %u (\"%.*s\"): a "
				       "ring: GET_MANY leases tensors, GET "
				       "leases a ring's slot: nothing leased",
				       i, (int)m->names[i].len,
				       m->names[i].ptr);
			return;
		}
	if (m->timeout_ms == 0) {
		td__peer_error(p, h->opcode, h->request_id, -ETIMEDOUT,
			       "GET_MANY: no version of \"%.*s\" newer than "
			       "%llu: nothing leased",
			       (int)m->names[0].len, m->names[0].ptr,
			       (unsigned long long)m->version);
		return;
	}
	w = park(p, rq, m->names[0], m->timeout_ms,
		 deadline_in(m->timeout_ms), "GET_MANY");
	if (!w)
		return;
	w->many = td__body_new(td__d->store, rq->body, h->body_len);
	if (!w->many) {
		waiter_free(w);
		td__peer_nomem(p, h);
		return;
	}
	w->mode = TD_GET_NEWER;
	w->version = m->version;
	w->flags = m->flags;
	td__list_add_tail(&td__d->store->many_waiters, &w->rlink);
}

void td__lease_get_many(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	struct td_wire_get_many_req m;
	struct td_err e = {0};
	int rc = td_wire_get_many_req_decode(rq->body, h->body_len, &m, &e);

	if (td__peer_bad_body(p, h, rc, &e))
		return;
	/* every name before any lookup: a refusal must not tell whether
	 * one exists */
	for (uint32_t i = 0; i < m.count; i++)
		if (!td__access_may(p, rq->op->perm, m.names[i].ptr,
				    m.names[i].len)) {
			td__peer_error(p, h->opcode, h->request_id, -EACCES,
				       "GET_MANY element %u: uid %u may not "
				       "read \"%.*s\" (policy %s): nothing "
				       "leased",
				       i, (unsigned)p->uid,
				       (int)m.names[i].len, m.names[i].ptr,
				       td__d->opts.policy_path);
			return;
		}
	if (m.flags & TD_WIRE_MANY_NEWER)
		many_newer(p, rq, &m);
	else
		many_answer(p, h->request_id, &m);
}

void td__lease_release(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	struct td__store *s = td__d->store;
	struct td_wire_release_req m;
	struct td_err e = {0};
	int rc = td_wire_release_req_decode(rq->body, h->body_len, &m, &e);

	if (td__peer_bad_body(p, h, rc, &e))
		return;
	if (m.flags & TD_WIRE_REL_ALLOC) {
		/* an alloc of this connection's, given up unpublished */
		if (td__loan_give_back(p, m.lease_id) < 0)
			td__peer_error(p, h->opcode, h->request_id, -ENOENT,
				       "no unpublished alloc %llu on this "
				       "connection",
				       (unsigned long long)m.lease_id);
		else if (!(m.flags & TD_WIRE_REL_QUIET))
			td__peer_done(p, h);
		return;
	}
	/* only this connection's leases: ids of others are not ours to end */
	for (struct td__list *l = p->leases.next; l != &p->leases;
	     l = l->next) {
		struct td__lease *ls =
			td__container_of(l, struct td__lease, link);

		if (ls->id != m.lease_id)
			continue;
		lease_drop(s, p, ls);
		/* QUIET: the client does not wait for a success reply */
		if (!(m.flags & TD_WIRE_REL_QUIET))
			td__peer_done(p, h);
		return;
	}
	td__peer_error(p, h->opcode, h->request_id, -ENOENT,
		       "no lease %llu on this connection",
		       (unsigned long long)m.lease_id);
}

/* Everything a dying peer holds here: its leases and parked GETs. */
void td__lease_peer_gone(struct td__peer *p)
{
	struct td__store *s = td__d->store;

	while (!td__list_empty(&p->leases))
		lease_drop(s, p,
			   td__container_of(p->leases.next, struct td__lease,
					    link));
	while (!td__list_empty(&p->waiters))
		waiter_free(td__container_of(p->waiters.next,
					     struct td__waiter, link));
}

/* Whether p may still read every name w waits for; else *no is one it
 * may not. */
static bool waiter_may(struct td__peer *p, const struct td__waiter *w,
		       struct td_wire_str *no)
{
	struct td_wire_get_many_req m = {.count = 1,
					 .names = {{w->name, w->len}}};

	if (w->many)
		many_decode(w, &m);
	for (uint32_t i = 0; i < m.count; i++)
		if (!td__access_may(p, TD__PERM_READ, m.names[i].ptr,
				    m.names[i].len)) {
			*no = m.names[i];
			return false;
		}
	return true;
}

/*
 * The policy was reloaded: a parked GET, GET_MANY or RING_SUBSCRIBE of
 * a name its uid may no longer read is refused now, as if it came after
 * the reload, not answered by the next publish with a version the
 * reload took away (a parked request was given nothing; a follow or
 * ring subscription made before was given a mapping, and ends instead:
 * td__follow_policy_changed, td__ring_policy_changed).
 */
void td__lease_policy_changed(void)
{
	struct td__daemon *d = td__d;

	for (struct td__list *pl = d->peers.next; pl != &d->peers;
	     pl = pl->next) {
		struct td__peer *p =
			td__container_of(pl, struct td__peer, link);
		struct td__list *l, *n;

		if (p->dead)
			continue;
		for (l = p->waiters.next; l != &p->waiters; l = n) {
			struct td__waiter *w =
				td__container_of(l, struct td__waiter, link);
			struct td_wire_str no;

			n = l->next;
			if (waiter_may(p, w, &no))
				continue;
			td__peer_error(p, w->op->opcode, w->request_id,
				       -EACCES,
				       "uid %u may not read \"%.*s\" (policy "
				       "%s, reloaded while the %s waited)",
				       (unsigned)p->uid, (int)no.len, no.ptr,
				       d->opts.policy_path,
				       td_wire_op_name(w->op->opcode));
			waiter_free(w);
		}
	}
}

void td__lease_init(void)
{
	static const struct td__ring_hooks hooks = {lease_ring, ring_poll,
						    ring_adopt, park_sub};

	td__ring_hooks_set(&hooks);
	td__store_rewrite_hook_set(rewrite_over);
}
