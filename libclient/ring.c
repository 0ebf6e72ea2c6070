/* SPDX-License-Identifier: MIT */
/*
 * libtensord rings: the fast path (docs/fastpath.md).
 *
 * Creating and subscribing are ordinary request/reply calls that bring
 * three descriptors (header, readers, data); they are mapped at once,
 * page tables populated, and closed (ring-map.c). After that a handoff
 * touches only the shared control block:
 *
 *   producer  pick a slot that is not the latest and that no reader row
 *             (nor the daemon) holds -> write -> version, latest, seq++ ->
 *             FUTEX_WAKE only if some reader sleeps
 *   consumer  read latest -> exchange it into our row (held) -> re-read
 *             seq, then latest (a first hold, or one through a row the
 *             daemon reset: the slot's version): unchanged means the
 *             producer saw our hold or had not started to reuse the slot
 *             (Dekker pair on held and seq, whose bump is the publish's
 *             seq_cst step; latest itself is a release store) -> read in
 *             place -> clear held
 *
 * Every value read from shared memory is checked against the geometry the
 * daemon sent (a private copy): a producer that writes garbage makes
 * td_sub_next() fail with -EBADMSG, never index out of bounds.
 */
#include <errno.h>
#include <sys/epoll.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "gpu.h"
#include "os.h"
#include "pace.h"
#include "ring-int.h"
#include "ring.h"
#include "wire-status.h"

_Static_assert(TD_SLOT_MAX_PLANES == TD_RING_MAX_PLANES, "plane cap");
_Static_assert(TD_RING_BACKING_HUGETLB == TD_WIRE_RING_HUGETLB, "backing");
_Static_assert(TD_RING_BACKING_THP == TD_WIRE_RING_THP, "backing");

#define DEFAULT_SLOTS 4
#define DEFAULT_READERS 4

/* RING_CLOSE id, lock held; errors are moot (the peer may be gone). */
static void send_close(struct td_client *c, uint64_t id)
{
	/* id 0: the reply did not even decode */
	if (id && c->sock >= 0 && !c->dead)
		(void)td__call_id(c, TD_OP_RING_CLOSE, id, NULL, 0);
}

static bool name_ok(const char *name, struct td_error *err, int *rc)
{
	const char *why;

	if (!name ||
	    td_wire_name_check(name, strlen(name), false, &why) < 0) {
		*rc = td__fail(err, -EINVAL, "ring name: %s",
			       name ? why : "NULL");
		return false;
	}
	return true;
}

/* ---- producer ---- */

/*
 * Register r's reader rows with its client (lock held), for the prefetch
 * in try_hold: a client that subscribes to one ring and produces another
 * (a pipeline stage; the bench's ping-pong, whose answer is a ring back)
 * acquires a slot of its own ring soon after it takes a version, and that
 * acquire reads the rows its readers wrote since. The first rings only:
 * it is a hint.
 */
static void prod_rows_add(struct td_ring *r)
{
	struct td_client *c = r->c;

	for (int i = 0; i < TD__PROD_ROWS; i++) {
		if (atomic_load_explicit(&c->prod_rows[i],
					 memory_order_relaxed))
			continue;
		atomic_store_explicit(&c->prod_row_n[i],
				      r->m.reader_count < TD__PROD_ROW_LINES
					      ? r->m.reader_count
					      : TD__PROD_ROW_LINES,
				      memory_order_relaxed);
		atomic_store_explicit(&c->prod_rows[i],
				      (const void *)r->m.rd->rows,
				      memory_order_relaxed);
		r->prod_row = i;
		return;
	}
}

/* Take it off again, before the rows are unmapped (lock held). */
static void prod_rows_del(struct td_ring *r)
{
	if (r->prod_row >= 0)
		atomic_store_explicit(&r->c->prod_rows[r->prod_row], NULL,
				      memory_order_relaxed);
	r->prod_row = -1;
}

int td_ring_create(struct td_client *c, const char *name,
		   const struct td_ring_desc *desc, struct td_ring **out,
		   struct td_error *err)
{
	struct td_wire_ring_create_req q = {0};
	struct td_wire_ring_rep r = {0};
	struct td_ring *ring;
	struct td__msg rep;
	uint64_t dense = 0;
	int64_t len;
	int rc;

	if (!c || !desc || !out)
		return td__fail(err, -EINVAL, "no client, desc or out");
	*out = NULL;
	if (!name_ok(name, err, &rc))
		return rc;
	if (desc->ndim > TD_WIRE_MAX_DIMS || (desc->ndim && !desc->shape) ||
	    desc->plane_count > TD_SLOT_MAX_PLANES ||
	    (desc->plane_count && !desc->plane_sizes))
		return td__fail(err, -EINVAL, "ring description out of range");
	if (desc->flags & ~TD_RING_HUGE_PAGES)
		return td__fail(err, -EINVAL, "unknown ring flags %#x",
				desc->flags & ~TD_RING_HUGE_PAGES);
	q.name = (struct td_wire_str){name, (uint16_t)strlen(name)};
	q.flags = (desc->flags & TD_RING_HUGE_PAGES) ? TD_WIRE_RING_HUGE : 0;
	q.slot_count = desc->slot_count ? desc->slot_count : DEFAULT_SLOTS;
	q.reader_count =
		desc->reader_count ? desc->reader_count : DEFAULT_READERS;
	q.dtype = desc->dtype;
	q.ndim = desc->ndim;
	if (desc->ndim)
		memcpy(q.shape, desc->shape, desc->ndim * sizeof(uint64_t));
	if (desc->plane_count) {
		q.plane_count = desc->plane_count;
		memcpy(q.plane_sizes, desc->plane_sizes,
		       desc->plane_count * sizeof(uint64_t));
	} else {
		/* one dense plane: element size times every dimension */
		dense = td_tensor_dtype_size(desc->dtype);
		if (!dense)
			return td__fail(err, -EINVAL, "no plane sizes, and "
					"dtype %u has no element size",
					desc->dtype);
		for (uint32_t i = 0; i < desc->ndim; i++) {
			if (!desc->shape[i])
				return td__fail(err, -EINVAL, "shape dimension"
						" %u is 0: a slot must hold at"
						" least one byte", i);
			if (__builtin_mul_overflow(dense, desc->shape[i],
						   &dense))
				return td__fail(err, -EINVAL, "the slot size "
						"(dtype times shape) "
						"overflows");
		}
		q.plane_count = 1;
		q.plane_sizes[0] = dense;
	}
	ring = calloc(1, sizeof(*ring));
	if (!ring)
		return td__fail(err, -ENOMEM, "out of memory");
	ring->cur = ring->last = TD_RING_NONE;
	ring->prod_row = -1;
	ring->next_version = 1;
	for (uint32_t i = 0; i < TD_RING_MAX_READERS; i++)
		ring->wake_fd[i] = -1;
	td__pace_init_env(&ring->pace);
	td__pace_init_env(&ring->read_pace);

	td__client_lock(c);
	if (c->path_out == TD_IMPORT_SCM)
		q.flags |= TD_WIRE_REQ_SCM;
	/* wake_readers() wakes rows: readers may sleep on their own */
	if (td__wake_rows(c))
		q.flags |= TD_WIRE_RING_ROW_WAKE;
	/* the rows' owner tokens are read below (td_ring_held_slot, ...) */
	if (td__has(c, TD_WIRE_FEAT_ROW_OWNER))
		q.flags |= TD_WIRE_RING_ROW_OWNER;
	/* the slots' memory is allocated by our mapping, not the daemon */
	if (c->reserve_self && td__has(c, TD_WIRE_FEAT_RESERVE))
		q.flags |= TD_WIRE_RING_RESERVE;
	len = td_wire_ring_create_req_encode(&q, c->sbuf + TD_WIRE_HDR_LEN,
					     TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
	if (len < 0) {
		rc = td__fail(err, (int)len, "encode RING_CREATE");
		goto fail;
	}
	rc = td__call(c, TD_OP_RING_CREATE, (size_t)len, NULL, 0, &rep, err);
	if (rc < 0)
		goto fail;
	rc = td__ringmap_take(c, &rep, &r, true, &ring->m, err);
	if (rc < 0) {
		/* the daemon made it: end it there too */
		send_close(c, r.id);
		goto fail;
	}
	ring->id = r.id;
	ring->epoch = c->epoch;
	ring->c = c;
	prod_rows_add(ring);
	td__client_ref(c);
	pthread_mutex_unlock(&c->lock);
	*out = ring;
	return 0;
fail:
	pthread_mutex_unlock(&c->lock);
	free(ring);
	return rc;
}

/*
 * Fill a slot (or view, below) field by field, planes past plane_count
 * zero: a memset of the struct first compiles to `rep stos`, whose
 * start-up cost was a quarter of td_sub_next's time in a one-CPU loop of
 * handoffs (perf, cpu-clock samples).
 */
static void slot_fill(const struct ringmap *m, uint32_t s, struct td_slot *o)
{
	uint8_t *base = m->data + (size_t)s * m->g.slot_stride;

	o->index = s;
	o->plane_count = m->g.plane_count;
	for (uint32_t i = 0; i < TD_SLOT_MAX_PLANES; i++) {
		bool in = i < m->g.plane_count;

		o->planes[i] = in ? base + m->g.plane_off[i] : NULL;
		o->sizes[i] = in ? m->g.plane_size[i] : 0;
	}
}

/*
 * A slot the producer may overwrite, or -1. Unpublish a candidate first
 * (version 0), then look for holds: a reader that stored its hold before
 * our scan is seen and the slot skipped; one that stores it after finds
 * version 0 when it re-checks and retries. Both sides are seq_cst, so
 * one of the two always happens (store-buffering litmus).
 */
/*
 * Every reader row has taken version v (or belongs to nobody) and none
 * holds slot s, and the daemon holds no lease on it nor serves GETs of
 * the ring (they want the latest version readable).
 */
/*
 * The producer's cache of event-loop readers' eventfds is stale: ask the
 * daemon for them (RING_WAKE). Once per reader that starts waiting by
 * fd, never per handoff.
 */
static void wake_fetch(struct td_ring *r)
{
	struct td_wire_ring_close_req q = {.id = r->id};
	struct td_wire_ring_wake_rep m;
	struct td_client *c = r->c;
	struct td__msg rep;
	int64_t len;
	unsigned k = 0;

	td__client_lock(c);
	if (!td__has(c, TD_WIRE_FEAT_RING_WAKE) || r->epoch != c->epoch)
		goto out;
	len = td_wire_ring_close_req_encode(&q, c->sbuf + TD_WIRE_HDR_LEN,
					    TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
	if (len < 0 ||
	    td__call(c, TD_OP_RING_WAKE, (size_t)len, NULL, 0, &rep, NULL) < 0)
		goto out;
	if (td_wire_ring_wake_rep_decode(rep.body, rep.body_len, &m, NULL) <
		    0 ||
	    m.count != rep.nfds) {
		td__msg_close_fds(&rep);
		goto out;
	}
	for (uint32_t i = 0; i < TD_RING_MAX_READERS; i++) {
		if (r->wake_fd[i] >= 0)
			close(r->wake_fd[i]);
		r->wake_fd[i] = -1;
		r->wake_gen[i] = 0;
	}
	for (; k < m.count; k++) {
		uint32_t row = m.ents[k].row;

		if (row >= r->m.reader_count || r->wake_fd[row] >= 0)
			continue; /* closed below with the rest */
		r->wake_fd[row] = rep.fds[k];
		r->wake_gen[row] = m.ents[k].gen;
		rep.fds[k] = -1;
	}
	td__msg_close_fds(&rep);
out:
	pthread_mutex_unlock(&c->lock);
}

/*
 * Wake the readers that sleep: each one asleep on its own row's word
 * (TD_RING_WAIT_ROW) with a wake of that word, those asleep on seq (a
 * reader of a ring without TD_RING_ROW_WAKE, or an older libtensord) with
 * one wake of seq, and the eventfd of each event-loop reader that waits.
 * No syscall at all when nobody waits.
 */
static void wake_readers(struct td_ring *r)
{
	struct td_ring_readers *rd = r->m.rd;
	uint32_t any = 0;
	bool fetched = false;

	for (uint32_t i = 0; i < r->m.reader_count; i++) {
		/* the low 8 bits: the high ones are the owner's token */
		uint32_t w = atomic_load(&rd->rows[i].waiting);

		if ((w & TD_RING_LOW) == TD_RING_WAIT_ROW)
			td__futex_wake_word(&rd->rows[i].waiting, w);
		else
			any |= w & TD_RING_LOW;
	}
	if (any & TD_RING_WAIT_FUTEX)
		td__futex_wake((const uint32_t *)&r->m.hdr->seq, INT_MAX);
	if (!(any & TD_RING_WAIT_FD))
		return;
	for (uint32_t i = 0; i < r->m.reader_count; i++) {
		uint32_t gen;

		if ((atomic_load(&rd->rows[i].waiting) & TD_RING_LOW) !=
		    TD_RING_WAIT_FD)
			continue;
		gen = atomic_load(&rd->rows[i].wake_gen);
		if (gen && gen != r->wake_gen[i] && !fetched) {
			wake_fetch(r);
			fetched = true;
		}
		if (gen && gen == r->wake_gen[i] && r->wake_fd[i] >= 0)
			(void)td__timerfd_fire(r->wake_fd[i]);
	}
}

static bool all_took(const struct td_ring *r, uint32_t s, uint64_t v)
{
	const struct td_ring_readers *rd = r->m.rd;

	if (atomic_load(&r->m.hdr->slots[s].leases) ||
	    (atomic_load(&r->m.hdr->flags) & TD_RING_KEEP_LATEST))
		return false;
	for (uint32_t i = 0; i < r->m.reader_count; i++)
		if (td_ring_held_slot(atomic_load(&rd->rows[i].held)) == s ||
		    td_ring_took(atomic_load(&rd->rows[i].taken)) < v)
			return false;
	return true;
}

/*
 * Rewrite the latest slot when every reader has had it: a ping-pong then
 * reuses one slot, warm in every cache, instead of alternating two (twice
 * the working set: 1-16 MiB payloads fall out of L2/L3). The latest
 * version stays readable for any reader that has not taken it yet, so a
 * reuse never makes a reader miss a version it could have had; a reader
 * that subscribes mid-rewrite finds version 0 and waits for the publish.
 *
 * Same Dekker order as pick(): unpublish, then look again. If the second
 * look fails (a hold or a new subscriber raced in), the version is put
 * back and seq bumped, so a reader that saw 0 and went to sleep wakes and
 * takes it.
 */
static bool reuse_latest(struct td_ring *r)
{
	struct td_ring_hdr *h = r->m.hdr;
	const uint32_t s = r->last;
	const uint64_t v = r->next_version - 1;

	if (s == TD_RING_NONE || td__ring_fence_busy(h, s) ||
	    !all_took(r, s, v))
		return false;
	atomic_store(&h->slots[s].version, 0);
	if (all_took(r, s, v))
		return true;
	atomic_store(&h->slots[s].version, v);
	atomic_fetch_add(&h->seq, 1);
	wake_readers(r);
	return false;
}

static int pick(struct td_ring *r)
{
	struct td_ring_hdr *h = r->m.hdr;
	struct td_ring_readers *rd = r->m.rd;
	const uint32_t n = r->m.g.slot_count;

	if (reuse_latest(r))
		return (int)r->last;

	/*
	 * Lowest free index first, not round-robin: the working set stays
	 * as small as the readers allow, so slots stay warm in the caches
	 * (and with reuse_latest a ping-pong uses one slot).
	 */
	for (uint32_t s = 0; s < n; s++) {
		bool held = false;

		if (s == r->last || atomic_load(&h->slots[s].leases) ||
		    td__ring_fence_busy(h, s))
			continue;
		atomic_store(&h->slots[s].version, 0);
		for (uint32_t i = 0; i < r->m.reader_count && !held; i++)
			held = td_ring_held_slot(
				       atomic_load(&rd->rows[i].held)) == s;
		if (held || atomic_load(&h->slots[s].leases))
			continue;
		return (int)s;
	}
	return -1;
}

/*
 * The producer's wait for its readers: until look(r, arg) finds what it
 * wants (>= 0, returned), at most timeout_ms. Polls as its pace plans,
 * then sleeps on release_seq with prod_waiting = why (TD_RING_PROD_*): a
 * subscriber bumps it and wakes when it releases, or for _READ also when
 * it takes; the daemon when it frees or resets a row, or ends the ring.
 * -ETIMEDOUT, or what look returns below -1: an error that ends the wait
 * (pick_look's).
 */
static int prod_wait(struct td_ring *r, struct td_pace *pace, int timeout_ms,
		     uint32_t why, int (*look)(struct td_ring *r, uint64_t arg),
		     uint64_t arg)
{
	struct td_ring_readers *rd = r->m.rd;
	struct td_pace_plan plan = {0};
	int64_t deadline, until;
	int got = look(r, arg);

	if (got >= 0 || got < -1)
		return got;
	if (timeout_ms == 0)
		return -ETIMEDOUT;
	deadline = td__deadline_of(timeout_ms);
	for (;;) {
		uint32_t w = atomic_load(&rd->release_seq);

		got = look(r, arg);
		if (got >= 0)
			break;
		if (got < -1)
			return got;
		if (td__past(deadline))
			return -ETIMEDOUT;
		if (td__pace_wait(pace, &plan, deadline, &until))
			continue;
		/* announce the sleep, then look once more (Dekker with the
		 * reader's clear-then-check) */
		atomic_store(&rd->prod_waiting, why);
		got = look(r, arg);
		if (got == -1)
			td__futex_wait_until(&rd->release_seq, w, until);
		atomic_store(&rd->prod_waiting, 0);
		if (got >= 0)
			break;
		if (got < -1)
			return got;
	}
	td_pace_end(pace, &plan, td__now_ns);
	return got;
}


/*
 * May r still make versions? -ECHILD in a child of fork() (see
 * td_client_connect), -ENOTCONN once its client was closed, -EPIPE once
 * the daemon ended it (CLOSED): a later version would reach subscribers
 * told the ring is over. No lock, no syscall (flags: a publish's line).
 */
static int prod_usable(const struct td_ring *r)
{
	if (td__client_foreign(r->c))
		return -ECHILD;
	if (atomic_load_explicit(&r->c->closed, memory_order_relaxed))
		return -ENOTCONN;
	if (atomic_load_explicit(&r->m.hdr->flags, memory_order_relaxed) &
	    TD_RING_CLOSED)
		return -EPIPE;
	return 0;
}

/* A slot, -1 none yet, or prod_usable's error: a client closed by
 * another thread meanwhile (the daemon then ends the ring and wakes this
 * wait) ends the wait at once, not at its timeout (ring.h). */
static int pick_look(struct td_ring *r, uint64_t arg)
{
	int rc = prod_usable(r);

	(void)arg;
	return rc < 0 ? rc : pick(r);
}

/* td_ring_acquire's wait, then prod_usable again (another thread may
 * have closed the client meanwhile) */
static int acquire_wait(struct td_ring *r, int timeout_ms)
{
	int s = prod_wait(r, &r->pace, timeout_ms, TD_RING_PROD_SLOT,
			  pick_look, 0);
	int rc = s >= 0 ? prod_usable(r) : 0;

	return rc < 0 ? rc : s;
}

int td_ring_acquire(struct td_ring *r, int timeout_ms, struct td_slot *slot)
{
	int s = r && slot ? prod_usable(r) : -EINVAL;

	if (s < 0)
		return s;
	if (r->cur == TD_RING_NONE) {
		/* a free slot at once, the usual case, without prod_wait's
		 * call through a pointer (it looks again before waiting) */
		s = pick(r);
		if (s < 0)
			s = acquire_wait(r, timeout_ms);
		if (s < 0)
			return s;
		r->cur = (uint32_t)s;
	}
	slot_fill(&r->m, r->cur, slot);
	return 0;
}

/*
 * 0 when every reader row has read version v: took it or a newer one, and
 * holds it no more; -1 while one has not. A row that took v holds it
 * while its `held` slot is the one v was published in (by our private
 * record: the shared version word of a held slot may read 0, see
 * published[]; a held slot is never republished, so a slot published
 * since is not v's). A free row (taken TD_RING_TAKEN_ANY) has nothing to
 * read; a new one (taken 0) has.
 */
static int read_look(struct td_ring *r, uint64_t v)
{
	const struct td_ring_readers *rd = r->m.rd;
	int rc = prod_usable(r);

	/* a client closed by another thread meanwhile ends the wait (the
	 * daemon ends the ring and wakes it), as pick_look does */
	if (rc < 0)
		return rc;

	for (uint32_t i = 0; i < r->m.reader_count; i++) {
		uint64_t taken = atomic_load(&rd->rows[i].taken);
		uint32_t held;

		if (taken == TD_RING_TAKEN_ANY)
			continue;
		if (td_ring_took(taken) < v)
			return -1;
		held = td_ring_held_slot(atomic_load(&rd->rows[i].held));
		if (taken == v && held < r->m.g.slot_count &&
		    r->published[held] == v)
			return -1;
	}
	return 0;
}

int td_ring_wait_read(struct td_ring *r, uint64_t version, int timeout_ms)
{
	int rc;

	if (!r || !version || version >= r->next_version)
		return -EINVAL;
	rc = prod_usable(r);
	if (rc < 0)
		return rc;
	/*
	 * Mid-rewrite of the latest slot (acquired by reuse_latest, not yet
	 * published): every row had taken the latest version and none held
	 * it then, so every version up to it was read; nobody can take them
	 * any more (a subscriber arriving now waits for the publish).
	 */
	if (r->cur != TD_RING_NONE && r->cur == r->last)
		return 0;
	return prod_wait(r, &r->read_pace, timeout_ms, TD_RING_PROD_READ,
			 read_look, version);
}

/* Publish the acquired slot with its fence word set to `fence`. */
static int publish(struct td_ring *r, uint32_t fence, uint64_t *version)
{
	struct td_ring_hdr *h;
	uint32_t s;
	uint64_t v;
	/* an unusable ring says why (-ECHILD in a child of fork(),
	 * -ENOTCONN, -EPIPE) before there is no slot to publish: a child or
	 * a closed client that had not acquired one was told -EINVAL */
	int rc = r ? prod_usable(r) : -EINVAL;

	if (rc == 0 && r->cur == TD_RING_NONE)
		rc = -EINVAL;
	if (rc < 0)
		return rc;
	h = r->m.hdr;
	s = r->cur;
	v = r->next_version++;
	/* this version's fence before its version (readers that see the
	 * version see this or a later signal) */
	atomic_store_explicit(&h->slots[s].fence, fence, memory_order_relaxed);
	/* release: the slot's bytes before its version, version before
	 * latest. The seq_cst bump of seq orders both before the loads
	 * that follow (the sleepers check below, the next pick's look at
	 * the rows): subscribers check against seq, then latest
	 * (td_ring_latest_recheck), so latest needs no fence of its own */
	atomic_store_explicit(&h->slots[s].version, v, memory_order_release);
	atomic_store_explicit(&h->latest, td_ring_latest_pack(v, s),
			      memory_order_release);
	atomic_fetch_add(&h->seq, 1);
	r->published[s] = v;
	/* the only syscall of a handoff, and only when a reader sleeps */
	wake_readers(r);
	r->last = s;
	r->cur = TD_RING_NONE;
	if (version)
		*version = v;
	return 0;
}

int td_ring_publish(struct td_ring *r, uint64_t *version)
{
	return publish(r, TD_RING_FENCE_NONE, version);
}

int td_ring_publish_fenced(struct td_ring *r, uint64_t *version)
{
	return publish(r, TD_RING_FENCE_PENDING, version);
}

uint32_t td_ring_backing(const struct td_ring *r)
{
	return r ? r->m.backing : 0;
}

void td_ring_close(struct td_ring *r)
{
	struct td_client *c;

	if (!r)
		return;
	c = r->c;
	td__client_lock(c);
	/* else the id means nothing there, or (a child of fork()) it is the
	 * parent's ring: only the child's copy is freed */
	if (r->epoch == c->epoch && !td__client_foreign(c))
		send_close(c, r->id);
	prod_rows_del(r);
	pthread_mutex_unlock(&c->lock);
	td__ringmap_unmap(&r->m);
	for (uint32_t i = 0; i < TD_RING_MAX_READERS; i++)
		if (r->wake_fd[i] >= 0)
			close(r->wake_fd[i]);
	free(r);
	td__client_unref(c);
}

/* ---- subscriber ---- */

int td_ring_subscribe(struct td_client *c, const char *name, int timeout_ms,
		      struct td_sub **out, struct td_error *err)
{
	struct td_wire_ring_sub_req q = {0};
	struct td_wire_ring_rep r = {0};
	struct td_sub *sub;
	struct td__msg rep;
	int64_t deadline = td__deadline_of(timeout_ms), len;
	int rc;

	if (!c || !out)
		return td__fail(err, -EINVAL, "no client or out");
	*out = NULL;
	if (!name_ok(name, err, &rc))
		return rc;
	sub = calloc(1, sizeof(*sub));
	if (!sub)
		return td__fail(err, -ENOMEM, "out of memory");
	sub->efd = -1;
	td__pace_init_env(&sub->pace);
	q.name = (struct td_wire_str){name, (uint16_t)strlen(name)};
	td__client_lock(c);
	q.flags = c->path_out == TD_IMPORT_SCM ? TD_WIRE_REQ_SCM : 0;
	/* a daemon that parks the request until the ring exists answers
	 * once; an older one is asked again every millisecond */
	if (timeout_ms != 0 && td__has(c, TD_WIRE_FEAT_SUB_WAIT)) {
		q.flags |= TD_WIRE_RSUB_WAIT;
		q.timeout_ms = timeout_ms < 0 ? TD_WIRE_WAIT_FOREVER
					      : (uint32_t)timeout_ms;
	}
	for (;;) {
		struct timespec ms = {0, 1000000};

		len = td_wire_ring_sub_req_encode(
			&q, c->sbuf + TD_WIRE_HDR_LEN,
			TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
		if (len < 0) {
			rc = td__fail(err, (int)len, "encode RING_SUBSCRIBE");
			goto fail;
		}
		/* a parked one: held until the ring comes or it times out */
		c->park_ms = q.timeout_ms == TD_WIRE_WAIT_FOREVER
				     ? 0
				     : q.timeout_ms;
		rc = td__call(c, TD_OP_RING_SUBSCRIBE, (size_t)len, NULL, 0,
			      &rep, err);
		c->park_ms = 0;
		if (rc != -ENOENT || timeout_ms == 0)
			break;
		if (deadline >= 0 && td__now_ns() >= deadline) {
			rc = td__fail(err, -ETIMEDOUT,
				      "no ring named \"%s\" within %d ms",
				      name, timeout_ms);
			goto fail;
		}
		/* rings announce nothing; poll the name while waiting */
		pthread_mutex_unlock(&c->lock);
		nanosleep(&ms, NULL);
		td__client_lock(c);
	}
	if (rc < 0)
		goto fail;
	rc = td__ringmap_take(c, &rep, &r, false, &sub->m, err);
	if (rc < 0) {
		send_close(c, r.id);
		goto fail;
	}
	sub->id = r.id;
	sub->epoch = c->epoch;
	sub->row = &sub->m.rd->rows[r.row];
	if (atomic_load(&sub->m.hdr->flags) & TD_RING_ROW_OWNER) {
		sub->tok = td_ring_owner_of(r.id);
		sub->taken = TD_RING_TAKEN_FRESH | sub->tok;
		/* what the daemon stored at RING_SUBSCRIBE */
		sub->held_word = td_ring_owned(sub->tok, TD_RING_NONE);
	}
	sub->dtype = r.dtype;
	sub->ndim = r.ndim;
	memcpy(sub->shape, r.shape, sizeof(sub->shape));
	sub->c = c;
	td__client_ref(c);
	pthread_mutex_unlock(&c->lock);
	*out = sub;
	return 0;
fail:
	pthread_mutex_unlock(&c->lock);
	free(sub);
	return rc;
}

void td__ring_prod_wake(struct td_ring_readers *rd)
{
	atomic_fetch_add(&rd->release_seq, 1);
	td__futex_wake((const uint32_t *)&rd->release_seq, 1);
}

bool td__sub_row_set(struct td_sub *s, _Atomic uint32_t *w, uint32_t low,
		     uint32_t *was)
{
	uint32_t cur;

	if (s->gone)
		return false;
	if (!s->tok) {
		cur = atomic_exchange(w, low);
	} else {
		/* only a compare-exchange that finds our token writes: the
		 * daemon changes it, in the same word, when the row changes
		 * hands (docs/fastpath.md, "A row that changed hands") */
		/*
		 * `held`, written twice a handoff, is compared with what we
		 * stored last instead of a load first: a load that finds the
		 * line shared (the producer reads it) and a compare-exchange
		 * that then takes it are two trips between the CPUs where an
		 * exchange made one (measured: +25% on a lock-step ring).
		 */
		bool held = w == &s->row->held;

		cur = held ? s->held_word : atomic_load(w);
		do {
			if (cur >> TD_RING_TOKEN_SHIFT != s->tok) {
				s->gone = true;
				return false;
			}
		} while (!atomic_compare_exchange_weak(
			w, &cur, td_ring_owned(s->tok, low)));
		if (held)
			s->held_word = td_ring_owned(s->tok, low);
	}
	if (was)
		*was = cur;
	return true;
}

/*
 * Our row's `taken` = v (seq_cst: the store half of the take's wake), but
 * never into a row that is no longer ours: false then (s->gone). With a
 * token, a compare-exchange from the value we stored last: nobody else
 * writes `taken` while the row is ours, and once the daemon resets it,
 * it never again reads that value (a fresh mark of another token, ANY,
 * or a version its next owner took, newer than any we took before the
 * hold this take validates). Without one, at least never into a row
 * the daemon freed (TAKEN_ANY): it would count there, for
 * td_ring_wait_read and the rewrite of the latest slot, as a reader that
 * nobody moves on or frees again.
 */
static bool taken_store(struct td_sub *s, uint64_t v)
{
	_Atomic uint64_t *w = &s->row->taken;
	uint64_t t;

	if (s->tok) {
		t = s->taken;
		if (!atomic_compare_exchange_strong(w, &t, v))
			s->gone = true;
	} else {
		t = atomic_load(w);
		while (t != TD_RING_TAKEN_ANY &&
		       !atomic_compare_exchange_weak(w, &t, v))
			;
		if (t == TD_RING_TAKEN_ANY)
			s->gone = true;
	}
	s->taken = v;
	return !s->gone;
}

/* Drop our hold (unless the row is no longer ours: the daemon dropped it
 * then); wake the producer if it sleeps for its readers. */
static void row_clear(struct td_sub *s)
{
	struct td_ring_readers *rd = s->m.rd;

	if (!td__sub_row_set(s, &s->row->held, TD_RING_RELEASED, NULL))
		return;
	if (atomic_load(&rd->prod_waiting))
		td__ring_prod_wake(rd);
}

int td_sub_release(struct td_sub *s)
{
	if (!s || !s->holding)
		return -EINVAL;
	/* a child of fork(): the row is the parent's, and so is the hold */
	if (td__client_foreign(s->c))
		return -ECHILD;
	s->holding = false;
	row_clear(s);
	return 0;
}

int td_sub_plane_fd(const struct td_sub *s, const struct td_view *v,
		    uint32_t i, uint64_t *offset)
{
	if (!s || !v || !offset || s->m.data_fd < 0 ||
	    v->slot >= s->m.g.slot_count || i >= s->m.g.plane_count ||
	    v->planes[i] != s->m.data + (size_t)v->slot * s->m.g.slot_stride +
				    s->m.g.plane_off[i])
		return -EINVAL;
	*offset = (uint64_t)v->slot * s->m.g.slot_stride + s->m.g.plane_off[i];
	return s->m.data_fd;
}

static void view_fill(const struct td_sub *s, uint32_t slot, uint64_t v,
		      struct td_view *o)
{
	const struct ringmap *m = &s->m;
	const uint8_t *base = m->data + (size_t)slot * m->g.slot_stride;

	/* no memset: see slot_fill */
	o->version = v;
	o->slot = slot;
	o->plane_count = m->g.plane_count;
	for (uint32_t i = 0; i < TD_SLOT_MAX_PLANES; i++) {
		bool in = i < m->g.plane_count;

		o->planes[i] = in ? base + m->g.plane_off[i] : NULL;
		o->sizes[i] = in ? m->g.plane_size[i] : 0;
	}
	o->dtype = s->dtype;
	o->ndim = s->ndim;
	o->shape = s->shape;
}

/*
 * Ask the caches for what comes next, before the hold's exchange, which
 * waits for our row's line (the producer read it last: a trip between
 * the CPUs): the first line of each plane of `slot`, which the caller
 * reads, and the reader rows of the rings this client produces
 * (prod_rows_add), which its next td_ring_acquire reads. These lines
 * then cross from the other CPUs while the exchange waits, not one after
 * another after it. A prefetch is a hint to the cache only: it reads
 * nothing the program sees and never faults, so it changes no order and
 * no value, and a line written after it is fetched again by the real
 * read, as without it (docs/fastpath.md, "Why the two-ring round trip is
 * not at 2×").
 */
static void prefetch_hold(const struct td_sub *s, uint32_t slot)
{
	const struct ringmap *m = &s->m;
	const struct td_client *c = s->c;

	for (uint32_t i = 0; i < m->g.plane_count; i++)
		__builtin_prefetch(m->data + (size_t)slot * m->g.slot_stride +
				   m->g.plane_off[i]);
	for (int i = 0; i < TD__PROD_ROWS; i++) {
		const struct td_ring_row *row = atomic_load_explicit(
			&c->prod_rows[i], memory_order_relaxed);
		uint32_t n = atomic_load_explicit(&c->prod_row_n[i],
						  memory_order_relaxed);

		for (uint32_t k = 0; row && k < n && k < TD__PROD_ROW_LINES;
		     k++)
			__builtin_prefetch(row + k);
	}
}

/*
 * Hold the latest version if it is newer than the last one returned.
 * 1 held, 0 nothing newer, -EBADMSG a slot index out of range, -EPIPE
 * the row is no longer ours (s->gone; nothing written to it).
 */
static int try_hold(struct td_sub *s, uint64_t latest, struct td_view *view)
{
	struct td_ring_hdr *h = s->m.hdr;
	uint32_t slot, was;
	uint64_t v;
	bool by_latest;
	int rc = td_ring_latest_unpack(latest, s->m.g.slot_count, &slot, &v);

	if (rc <= 0 || v <= s->last_version)
		return rc < 0 ? rc : 0;
	prefetch_hold(s, slot);
	if (!td__sub_row_set(s, &s->row->held, slot, &was))
		return -EPIPE;
	/* the value it replaces says who wrote our row last: we
	 * (TD_RING_RELEASED) or the daemon (TD_RING_NONE, a reset) */
	by_latest = td_ring_held_slot(was) ==
			    td_ring_held_slot(TD_RING_RELEASED) &&
		    s->last_version;
	/*
	 * Validate the hold (docs/fastpath.md, "Why a held slot is never
	 * rewritten"). A subscriber that took a version before re-reads
	 * `latest`, on the line it polls anyway: unchanged means the
	 * producer cannot be reusing the slot, since it reuses a slot only
	 * after moving `latest` away from it, or rewrites the latest slot
	 * only once every row took that version, ours included. Our first
	 * hold, or one through a row the daemon reset or freed since we
	 * cleared it (a connection that is gone), checks the slot's
	 * version: a producer mid-rewrite may have read such a row's
	 * `taken` as "took everything".
	 */
	if (by_latest ? td_ring_latest_recheck(h) != latest
		      : atomic_load(&h->slots[slot].version) != v) {
		/* the producer is rewriting it (latest has moved on, or
		 * it is the latest slot being rewritten for the next
		 * version: then seq moves when that is published) */
		row_clear(s);
		return 0;
	}
	/* after the hold is validated: the producer may rewrite this slot
	 * once every reader took it and none holds it. A row reset since
	 * the hold was validated holds nothing for us any more. */
	if (!taken_store(s, v)) {
		/* without a token we found the row free (the daemon's
		 * TAKEN_ANY) after our exchange put a hold there: take it
		 * back as the daemon left it, unless written since */
		uint32_t mine = slot;

		if (!s->tok)
			atomic_compare_exchange_strong(&s->row->held, &mine,
						       TD_RING_NONE);
		return -EPIPE;
	}
	s->holding = true;
	s->held_slot = slot;
	s->last_version = v;
	/* a producer asleep in td_ring_wait_read() for a version we skipped
	 * is done: seq_cst store, then look (Dekker with its announce, then
	 * look, as row_clear) */
	if (atomic_load(&s->m.rd->prod_waiting) == TD_RING_PROD_READ)
		td__ring_prod_wake(s->m.rd);
	view_fill(s, slot, v, view);
	return 1;
}

/*
 * Announce the sleep, then check once more (Dekker with the producer's
 * publish, and the daemon's close: store latest or CLOSED, bump seq, then
 * look at the rows) and sleep. On a ring whose producer wakes rows
 * (TD_RING_ROW_WAKE) a reader sleeps on its own row's word, so a publish
 * wakes each sleeper with a wake of its own word instead of all of them
 * through one: measured, four readers on two CPUs get each version about
 * a third sooner (docs/fastpath.md, "One futex word per sleeper"). seq
 * is checked as well as latest: a slot put back after a failed reuse
 * bumps seq without moving latest (reuse_latest).
 */
static void sleep_on(struct td_sub *s, uint32_t seq, uint64_t latest,
		     int64_t until)
{
	struct td_ring_hdr *h = s->m.hdr;
	_Atomic uint32_t *w = &s->row->waiting;
	bool own = atomic_load(&h->flags) & TD_RING_ROW_WAKE;

	/* no sleep on a row that is no longer ours: the daemon woke it */
	if (!td__sub_row_set(s, w, own ? TD_RING_WAIT_ROW : TD_RING_WAIT_FUTEX,
			     NULL))
		return;
	if (td_ring_latest_recheck(h) == latest &&
	    atomic_load(&h->seq) == seq &&
	    !(atomic_load(&h->flags) & TD_RING_CLOSED)) {
		if (own)
			td__futex_wait_until(
				w, td_ring_owned(s->tok, TD_RING_WAIT_ROW),
				until);
		else
			td__futex_wait_until(&h->seq, seq, until);
	}
	(void)td__sub_row_set(s, w, 0, NULL);
}

/*
 * With a token: is s's connection gone, looked at once a TD__HUP_CHECK_NS
 * at most (else false)? The daemon marks a ring CLOSED when its producer
 * ends; once the daemon is gone nothing will, so a wait must not last
 * for ever on the producer's word alone. Not while another thread holds
 * the handle (a call that waits there): looked at on a later sleep.
 */
static bool hup_due(struct td_sub *s)
{
	struct td_client *c = s->c;
	int64_t now = td__now_ns();
	struct pollfd p = {.fd = -1};
	bool gone;

	if (now < s->hup_at)
		return false;
	s->hup_at = now + TD__HUP_CHECK_NS;
	if (pthread_mutex_trylock(&c->lock))
		return false;
	gone = c->sock < 0 || c->dead || c->epoch != s->epoch;
	p.fd = c->sock;
	pthread_mutex_unlock(&c->lock);
	return gone || (poll(&p, 1, 0) == 1 && (p.revents & POLLHUP));
}

bool td__sub_gone(struct td_sub *s)
{
	/* without a token (a ring of an older producer or daemon) only our
	 * connection tells whether the row is still ours: a look after each
	 * sleep, before the row is written again (the daemon wakes a row it
	 * frees or gives away) */
	if (!s->gone && (!s->tok ? td__conn_gone(s->c, s->epoch) : hup_due(s)))
		s->gone = true;
	return s->gone;
}

int td_sub_next(struct td_sub *s, int timeout_ms, struct td_view *view)
{
	struct td_ring_hdr *h;
	struct td_pace_plan plan = {0};
	int64_t deadline = -2, until; /* computed when first needed */
	int rc;

	if (!s || !view)
		return -EINVAL;
	if (td__client_foreign(s->c))
		return -ECHILD;
	if (s->holding)
		td_sub_release(s);
	h = s->m.hdr;
	for (;;) {
		uint32_t seq = atomic_load(&h->seq);
		uint64_t latest = atomic_load(&h->latest);

		if (s->gone)
			return -EPIPE;
		rc = try_hold(s, latest, view);
		if (rc != 0) {
			if (rc > 0)
				td_pace_end(&s->pace, &plan, td__now_ns);
			return rc < 0 ? rc : 0;
		}
		if (latest != atomic_load(&h->latest))
			continue; /* moved while we looked: look again */
		if (atomic_load(&h->flags) & TD_RING_CLOSED)
			return -EPIPE;
		if (timeout_ms == 0)
			return -ETIMEDOUT;
		if (deadline == -2)
			deadline = td__deadline_of(timeout_ms);
		if (td__past(deadline))
			return -ETIMEDOUT;
		if (td__pace_wait(&s->pace, &plan, deadline, &until))
			continue;
		/* with a token, up to the next look at the connection */
		if (s->tok && (until < 0 || until > s->hup_at))
			until = s->hup_at;
		sleep_on(s, seq, latest, until);
		(void)td__sub_gone(s);
	}
}

/* Off the client's list of handler subscriptions and its epoll set. */
void td__sub_unlink(struct td_sub *s)
{
	struct td_client *c = s->c;

	for (struct td_sub **pp = &c->subs; *pp; pp = &(*pp)->lnext)
		if (*pp == s) {
			*pp = s->lnext;
			/* a child of fork() shares the parent's epoll
			 * set: taking the fd out would take it out there */
			if (c->epfd >= 0 && !td__client_foreign(c))
				epoll_ctl(c->epfd, EPOLL_CTL_DEL, s->efd, NULL);
			break;
		}
	s->lnext = NULL;
}

void td_sub_close(struct td_sub *s)
{
	struct td_client *c;

	if (!s)
		return;
	c = s->c;
	/* a walk of another thread may be at s, or next to it: s goes
	 * once it is over (td__sub_walk_wait), and no later one sees it */
	td__client_lock(c);
	td__sub_walk_wait(c);
	td__sub_unlink(s);
	pthread_mutex_unlock(&c->lock);
	if (s->holding)
		td_sub_release(s); /* not in a child of fork(): -ECHILD */
	td__client_lock(c);
	if (s->epoch == c->epoch && !td__client_foreign(c))
		send_close(c, s->id);
	pthread_mutex_unlock(&c->lock);
	td__ringmap_unmap(&s->m);
	if (s->efd >= 0)
		close(s->efd);
	free(s);
	td__client_unref(c);
}

/* ---- RING_STAT ---- */

int td_client_ring_stat(struct td_client *c, const char *name,
			struct td_ring_stat *st, struct td_error *err)
{
	struct td_wire_name_req q;
	struct td_wire_ring_stat_rep r;
	struct td_err e = {0};
	struct td__msg rep;
	int64_t len;
	int rc;

	if (!c || !st)
		return td__fail(err, -EINVAL, "no client or stat");
	if (!name_ok(name, err, &rc))
		return rc;
	q.name = (struct td_wire_str){name, (uint16_t)strlen(name)};
	td__client_lock(c);
	len = td_wire_name_req_encode(&q, c->sbuf + TD_WIRE_HDR_LEN,
				      TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
	rc = len < 0 ? td__fail(err, (int)len, "encode RING_STAT")
		     : td__call(c, TD_OP_RING_STAT, (size_t)len, NULL, 0,
				&rep, err);
	if (rc == 0) {
		td__msg_close_fds(&rep);
		rc = td_wire_ring_stat_rep_decode(rep.body, rep.body_len, &r,
						  &e);
		if (rc < 0)
			rc = td__fail(err, -EPROTO, "RING_STAT reply: %s",
				      e.reason ? e.reason : "invalid");
	}
	pthread_mutex_unlock(&c->lock);
	if (rc < 0)
		return rc;
	*st = (struct td_ring_stat){
		.id = r.id,
		.slot_count = r.slot_count,
		.reader_count = r.reader_count,
		.subscribers = r.subscribers,
		.closed = !!(r.flags & TD_RING_CLOSED),
		.latest_version = r.latest_version,
		.daemon_requests = r.requests,
	};
	return 0;
}
