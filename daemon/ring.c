/* SPDX-License-Identifier: MIT */
/*
 * Rings: the fast path (docs/fastpath.md). The daemon creates a ring's
 * three memfds (header, readers, data), hands them out once per producer
 * and once per subscriber, and stays the authority on who may hold what:
 * it assigns reader rows, clears the row of a subscriber that goes away
 * (so a crashed consumer never pins a slot) and marks the ring closed when
 * its producer goes. It takes no part in a handoff: producer and consumers
 * meet in shared memory and wake each other with futexes.
 *
 * Rings also appear in the catalogue: LIST and STAT describe them, and a
 * GET of a ring name leases its latest slot through the slot's `leases`
 * word (docs/fastpath.md, "Rings in the catalogue").
 */
#include "daemon.h"
#include "wire-status.h"
#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "blob.h"
#include "bytes.h"
#include "ring.h"
#include "ring-int.h"

#define MAX_RINGS TD__MAX_RINGS
/* descriptors a ring holds: hdr_rw, hdr_ro, rd_rw, data_rw, data_ro */
#define RING_FDS 5
#define MAX_RINGS_PER_PEER 16 /* rings one connection produces */
#define MAX_SUBS_PER_PEER 64  /* subscriptions of one connection */

_Static_assert(TD_WIRE_RING_MAX_PLANES == TD_RING_MAX_PLANES, "plane cap");
_Static_assert(TD_WIRE_MAX_DIMS == TD_RING_MAX_DIMS, "dims cap");

static struct td__list rings = {&rings, &rings};
static unsigned ring_count;
static uint64_t next_id = 1;

/*
 * Loop timers, made on first use and closed with every other handle at
 * shutdown (main.c): `keep` clears TD_RING_KEEP_LATEST once GETs stop,
 * `poll` retries parked GETs on rings every POLL_MS while there are any.
 * Neither runs while nobody GETs a ring: a handoff costs the daemon
 * nothing.
 */
static uv_timer_t keep_timer, poll_timer;
static bool timers_ready;
/* on_poll's passes, from 1 (td__ring_busy) */
static uint64_t poll_pass;
/* lease.c's side of GETs on a ring (td__ring_hooks_set) */
static const struct td__ring_hooks *hooks;

/* How long the latest slot stays kept after the last GET or RELEASE. */
#define KEEP_MS 1000
#define POLL_MS 1

/* store.c holds rings as an opaque type. */
static struct ring *ring_of(struct td__ring *x)
{
	return (struct ring *)(void *)x;
}

static struct td__ring *handle_of(struct ring *r)
{
	return (struct td__ring *)(void *)r;
}

/* ---- memfds ---- */

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* A small control memfd: its pages allocated now, its size sealed. */
#define CTL_MEMFD (TD__MEMFD_SEALABLE | TD__MEMFD_RESERVE | TD__MEMFD_SEAL_SIZE)

/*
 * The ring leaves its creator's account: rings, fds, quota (--max-bytes
 * keeps its bytes). At its end; or once closed and kept only by other
 * uids, as their pinned bytes (docs/fastpath.md, "A hostile producer").
 */
static void ring_disown(struct ring *r)
{
	if (r->counted) {
		td__tenant_sub(r->uid, TD__LIM_RINGS, 1);
		td__tenant_sub(r->uid, TD__LIM_FDS, RING_FDS);
	}
	if (!r->unowned)
		td__store_disown(r->uid, r->acct);
	r->counted = false;
	r->unowned = true;
}

static void ring_free(struct ring *r)
{
	td__list_del(&r->link);
	ring_count--;
	ring_disown(r);
	td__ring_holds_fini(r);
	td__store_uncharge_total(r->acct);
	if (r->hdr)
		munmap(r->hdr, TD_RING_HDR_LEN);
	if (r->rd)
		munmap(r->rd, TD_RING_READERS_LEN);
	close_fd(&r->hdr_rw);
	close_fd(&r->hdr_ro);
	close_fd(&r->rd_rw);
	close_fd(&r->data_ro);
	/* the slots' pages may go with this close: not on the loop */
	td__closer_close(r->data_rw, r->g.data_len);
	r->data_rw = -1;
	td__log(TD_LOG_DEBUG, "ring %.*s #%llu freed", (int)r->name_len,
		r->name, (unsigned long long)r->id);
	free(r);
}

/* A ring goes when nobody produces, subscribes to or leases it. */
static void ring_maybe_free(struct ring *r)
{
	if (!r->producer && !r->subs && !r->leases)
		ring_free(r);
	else if (!r->producer && !r->own)
		ring_disown(r);
}

static struct ring *ring_named(struct td_wire_str n)
{
	for (struct td__list *l = rings.next; l != &rings; l = l->next) {
		struct ring *r = td__container_of(l, struct ring, link);

		if (r->producer && r->name_len == n.len &&
		    memcmp(r->name, n.ptr, n.len) == 0)
			return r;
	}
	return NULL;
}

static void *map_ctl(int fd, size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* Everything but the name and the producer; -errno with *why. */
static int ring_build(struct ring *r, uint32_t flags, const char **why)
{
	int rc;

	r->hdr_rw = td__memfd_new("tensord-ring-hdr", TD_RING_HDR_LEN,
				  CTL_MEMFD, why);
	if (r->hdr_rw < 0)
		return r->hdr_rw;
	r->rd_rw = td__memfd_new("tensord-ring-readers", TD_RING_READERS_LEN,
				 CTL_MEMFD, why);
	if (r->rd_rw < 0)
		return r->rd_rw;
	rc = td__plane_create_ring(r->g.data_len, flags & TD_WIRE_RING_HUGE,
				   !(flags & TD_WIRE_RING_RESERVE), &r->flags,
				   &r->data_rw, why);
	if (rc < 0)
		return rc;
	r->hdr_ro = td__reopen_ro(r->hdr_rw);
	r->data_ro = r->hdr_ro < 0 ? r->hdr_ro : td__reopen_ro(r->data_rw);
	if (r->data_ro < 0) {
		*why = "cannot reopen the memfd read-only (is /proc mounted?)";
		return r->data_ro;
	}
	/*
	 * No more seals, by anyone: a subscriber is handed the readers
	 * memfd read-write, and its F_SEAL_FUTURE_WRITE there (or the
	 * producer's on the others) made every later writable mapping
	 * of it fail, so every later RING_SUBSCRIBE of the ring.
	 */
	if (fcntl(r->hdr_rw, F_ADD_SEALS, F_SEAL_SEAL) < 0 ||
	    fcntl(r->rd_rw, F_ADD_SEALS, F_SEAL_SEAL) < 0 ||
	    fcntl(r->data_rw, F_ADD_SEALS, F_SEAL_SEAL) < 0) {
		*why = "cannot seal the memfds' seals";
		return -errno;
	}
	r->hdr = map_ctl(r->hdr_rw, TD_RING_HDR_LEN);
	r->rd = map_ctl(r->rd_rw, TD_RING_READERS_LEN);
	if (!r->hdr || !r->rd) {
		*why = "cannot map the control memfds";
		return -ENOMEM;
	}
	r->hdr->magic = TD_RING_MAGIC;
	r->hdr->layout = TD_RING_LAYOUT;
	r->hdr->slot_count = r->g.slot_count;
	r->hdr->reader_count = r->reader_count;
	r->hdr->slot_stride = r->g.slot_stride;
	r->hdr->data_len = r->g.data_len;
	/* its producer wakes rows (every reader may sleep on its own) and
	 * reads owner tokens in them */
	atomic_store(&r->hdr->flags,
		     (flags & TD_WIRE_RING_ROW_WAKE ? TD_RING_ROW_WAKE : 0) |
			     (flags & TD_WIRE_RING_ROW_OWNER ? TD_RING_ROW_OWNER
							     : 0));
	for (uint32_t i = 0; i < TD_RING_MAX_READERS; i++)
		td__ring_row_free(r->hdr, r->rd, i);
	return 0;
}

static unsigned peer_rings(const struct td__peer *p, unsigned *subs)
{
	unsigned n = 0;

	*subs = 0;
	for (struct td__list *l = rings.next; l != &rings; l = l->next) {
		struct ring *r = td__container_of(l, struct ring, link);

		n += r->producer == p;
		for (uint32_t i = 0; i < r->reader_count; i++)
			*subs += r->rows[i].peer == p;
	}
	return n;
}

static void reply_ring(struct td__peer *p, const struct td_wire_hdr *h,
		       const struct ring *r, uint64_t id, uint32_t row,
		       uint32_t req_flags, const int fds[TD_WIRE_RING_FDS])
{
	struct td__daemon *d = td__d;
	struct td_wire_ring_rep m = {
		.id = id,
		.flags = r->flags,
		.row = row,
		.reader_count = r->reader_count,
		.slot_count = r->g.slot_count,
		.plane_count = r->g.plane_count,
		.slot_stride = r->g.slot_stride,
		.data_len = r->g.data_len,
		.dtype = r->dtype,
		.ndim = r->ndim,
		.fd_count = TD_WIRE_RING_FDS,
	};
	int64_t len;

	for (uint32_t i = 0; i < r->g.plane_count; i++) {
		m.plane_off[i] = r->g.plane_off[i];
		m.plane_size[i] = r->g.plane_size[i];
	}
	memcpy(m.shape, r->shape, sizeof(m.shape));
	for (uint32_t i = 0; i < TD_WIRE_RING_FDS; i++) {
		m.fds[i].fd = fds[i];
		/* ring buffers are never in the GET map cache: no shared id */
		m.fds[i].buffer_id = 0;
	}
	len = td_wire_ring_rep_encode(&m, TD__TX_BODY(d), TD__TX_CAP);
	/* cannot fail: every count was bounded when the ring was made */
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
		      len < 0 ? 0 : (size_t)len, fds,
		      (req_flags & TD_WIRE_REQ_SCM) ? TD_WIRE_RING_FDS : 0);
}

/* ---- requests ---- */

/* One meaning per name, so GET and STAT are unambiguous: false (the
 * error sent) when a tensor or a live ring has it. */
static bool name_free(struct td__peer *p, const struct td_wire_hdr *h,
		      struct td_wire_str name)
{
	if (td__store_name_taken(name)) {
		td__peer_error(p, h->opcode, h->request_id, -EEXIST,
			       "a tensor named \"%.*s\" exists", (int)name.len,
			       name.ptr);
		return false;
	}
	if (ring_named(name)) {
		td__peer_error(p, h->opcode, h->request_id, -EEXIST,
			       "a ring named \"%.*s\" exists", (int)name.len,
			       name.ptr);
		return false;
	}
	return true;
}

/*
 * false (the error sent) when the slot's planes together hold fewer bytes
 * than dtype times shape: a GET of the ring hands out a tensor of that
 * shape over them (lease_taken), and a publish's planes are held to their
 * layout the same way. A dtype without a size is refused at GET instead.
 */
static bool planes_hold_shape(struct td__peer *p, const struct td_wire_hdr *h,
			      const struct td_wire_ring_create_req *m)
{
	uint64_t need = td_dtype_size(m->dtype), have = 0;

	if (need == 0)
		return true;
	for (uint32_t i = 0; i < m->ndim; i++)
		if (m->shape[i] == 0)
			return true;
	for (uint32_t i = 0; i < m->ndim; i++)
		if (td__mul_ovf(need, m->shape[i], &need)) {
			td__peer_error(p, h->opcode, h->request_id, -EINVAL,
				       "dtype times shape "
				       "overflows 64 bits");
			return false;
		}
	for (uint32_t i = 0; i < m->plane_count; i++)
		if (td__add_ovf(have, m->plane_sizes[i], &have))
			return true; /* more than any shape; geom refuses it */
	if (have < need) {
		td__peer_error(p, h->opcode, h->request_id, -EINVAL,
			       "the planes hold %llu bytes but "
			       "dtype times shape needs %llu",
			       (unsigned long long)have,
			       (unsigned long long)need);
		return false;
	}
	return true;
}

void td__ring_create(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	struct td_wire_ring_create_req m;
	struct td_err e = {0};
	struct ring *r;
	const char *why = NULL;
	char lim[256];
	unsigned subs;
	int rc = td_wire_ring_create_req_decode(rq->body, h->body_len, &m, &e);

	if (td__peer_bad_body(p, h, rc, &e))
		return;
	if (m.reader_count < 1 || m.reader_count > TD_RING_MAX_READERS) {
		td__peer_error(p, h->opcode, h->request_id, -EINVAL,
			       "reader_count %u outside 1..%d", m.reader_count,
			       TD_RING_MAX_READERS);
		return;
	}
	if (!planes_hold_shape(p, h, &m))
		return;
	if (!td__access_check(p, h, rq->op->perm, m.name))
		return;
	if (!name_free(p, h, m.name))
		return;
	if (ring_count >= MAX_RINGS ||
	    peer_rings(p, &subs) >= MAX_RINGS_PER_PEER) {
		td__peer_error(p, h->opcode, h->request_id, -ENOBUFS,
			       "too many rings (max %d per connection, %d in "
			       "all)",
			       MAX_RINGS_PER_PEER, MAX_RINGS);
		return;
	}
	/* the uid's rings and the five memfd descriptors of this one */
	rc = td__tenant_check(p->uid, TD__LIM_RINGS, 1, lim, sizeof(lim));
	if (rc == 0)
		rc = td__tenant_ring_room(p->uid, ring_count, lim, sizeof(lim));
	if (rc == 0)
		rc = td__tenant_check(p->uid, TD__LIM_FDS, RING_FDS, lim,
				      sizeof(lim));
	if (rc < 0) {
		td__peer_error(p, h->opcode, h->request_id, rc,
			       "RING_CREATE \"%.*s\": %s", (int)m.name.len,
			       m.name.ptr, lim);
		return;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		td__peer_nomem(p, h);
		return;
	}
	r->hdr_rw = r->hdr_ro = r->rd_rw = r->data_rw = r->data_ro = -1;
	td__list_add_tail(&rings, &r->link);
	ring_count++;
	rc = td_ring_geom_compute(m.slot_count, m.plane_count, m.plane_sizes,
				  (m.flags & TD_WIRE_RING_HUGE)
					  ? TD_RING_HUGE_PAGE
					  : TD_RING_PAGE,
				  &r->g, &why);
	if (rc == 0)
		r->reader_count = m.reader_count;
	if (rc == 0) {
		/*
		 * Charged before the memory is taken: a ring is as real as
		 * any plane, and an uncounted one would let a client fill
		 * the machine (tmpfs has no limit of its own).
		 */
		uint64_t bytes = r->g.data_len + TD_RING_HDR_LEN +
				 TD_RING_READERS_LEN;
		if (td__store_charge(p, h, bytes) < 0) {
			ring_free(r); /* reply sent by td__store_charge */
			return;
		}
		r->uid = p->uid;
		r->acct = bytes;
		if (td__tenant_add(p->uid, TD__LIM_RINGS, 1) < 0 ||
		    td__tenant_add(p->uid, TD__LIM_FDS, RING_FDS) < 0) {
			td__tenant_sub(p->uid, TD__LIM_RINGS, 1);
			ring_free(r);
			td__peer_error(p, h->opcode, h->request_id, -ENOMEM,
				       "out of memory");
			return;
		}
		r->counted = true;
		rc = ring_build(r, m.flags, &why);
	}
	if (rc < 0) {
		/* the error is sent after every fd of the ring is closed */
		ring_free(r);
		td__peer_error(p, h->opcode, h->request_id, rc,
			       "RING_CREATE \"%.*s\": %s: %s", (int)m.name.len,
			       m.name.ptr, why, strerror(-rc));
		return;
	}
	r->id = next_id++;
	r->producer = p;
	r->dtype = m.dtype;
	r->ndim = m.ndim;
	memcpy(r->shape, m.shape, sizeof(r->shape));
	r->name_len = m.name.len;
	memcpy(r->name, m.name.ptr, m.name.len);
	td__log(TD_LOG_DEBUG,
		"ring %.*s #%llu: %u slots of %llu bytes, %u readers%s",
		(int)r->name_len, r->name, (unsigned long long)r->id,
		r->g.slot_count, (unsigned long long)r->g.slot_stride,
		r->reader_count,
		r->flags & TD_WIRE_RING_HUGETLB ? ", hugetlb"
		: r->flags & TD_WIRE_RING_THP	? ", thp advised"
						: "");
	reply_ring(p, h, r, r->id, UINT32_MAX, m.flags,
		   (const int[]){r->hdr_rw, r->rd_rw, r->data_rw});
	/* GETs parked on this name before it existed */
	if (hooks->adopt((struct td_wire_str){r->name, r->name_len}))
		td__ring_poll_arm();
}

/*
 * The ring a SUBSCRIBE (sub) or RING_STAT names, or NULL with the error
 * sent: read permission first (like STAT: what exists is nobody's
 * business without it), then -ENOENT, or a SUBSCRIBE that waits parked
 * (not on a tensor's name, td__store_no_ring).
 */
static struct ring *readable_ring(struct td__peer *p,
				  const struct td__req *rq,
				  struct td_wire_str name,
				  const struct td_wire_ring_sub_req *sub)
{
	const struct td_wire_hdr *h = rq->h;
	struct ring *r;

	if (!td__access_check(p, h, rq->op->perm, name))
		return NULL;
	r = ring_named(name);
	if (!r && sub && (sub->flags & TD_WIRE_RSUB_WAIT) && sub->timeout_ms &&
	    !td__store_name_taken(name))
		hooks->park_sub(p, rq, sub);
	else if (!r)
		td__store_no_ring(p, h, name, sub != NULL);
	return r;
}

void td__ring_subscribe(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	struct td_wire_ring_sub_req m;
	struct td_err e = {0};
	struct ring *r;
	uint32_t row;
	unsigned subs;
	char why[256];
	int rc = td_wire_ring_sub_req_decode(rq->body, h->body_len, &m, &e);

	if (td__peer_bad_body(p, h, rc, &e))
		return;
	if (m.flags & TD_WIRE_FOLLOW_SPARE) { /* FOLLOW's alone */
		td__peer_error(p, h->opcode, h->request_id, -EBADMSG,
			       "RING_SUBSCRIBE: flags: unknown bits %#x",
			       (unsigned)TD_WIRE_FOLLOW_SPARE);
		return;
	}
	r = readable_ring(p, rq, m.name, &m);
	if (!r)
		return;
	peer_rings(p, &subs);
	if (subs >= MAX_SUBS_PER_PEER) {
		td__peer_error(p, h->opcode, h->request_id, -ENOBUFS,
			       "too many subscriptions on this connection "
			       "(max %d)",
			       MAX_SUBS_PER_PEER);
		return;
	}
	for (row = 0; row < r->reader_count; row++)
		if (!r->rows[row].peer)
			break;
	if (row == r->reader_count) {
		td__peer_error(p, h->opcode, h->request_id, -EBUSY,
			       "ring \"%.*s\" has all its %u reader rows in "
			       "use",
			       (int)m.name.len, m.name.ptr, r->reader_count);
		return;
	}
	rc = td__ring_hold(r, p, why, sizeof(why));
	if (rc < 0) {
		td__peer_error(p, h->opcode, h->request_id, rc,
			       "RING_SUBSCRIBE: %s", why);
		return;
	}
	r->rows[row].peer = p;
	r->rows[row].sub_id = next_id++;
	/* a new subscriber took nothing yet: the producer keeps the latest
	 * version readable for it */
	td__ring_row_give(r->hdr, r->rd, row, r->rows[row].sub_id);
	r->subs++;
	reply_ring(p, h, r, r->rows[row].sub_id, row, m.flags,
		   (const int[]){r->hdr_ro, r->rd_rw, r->data_ro});
}

/* A subscription ends (request or disconnect): its row holds nothing. */
static void row_clear(struct ring *r, uint32_t row)
{
	struct td_ring_readers *rd = r->rd;
	uid_t uid = r->rows[row].peer->uid;

	td__ring_unhold(r, uid);
	r->rows[row].peer = NULL;
	r->rows[row].sub_id = 0;
	r->subs--;
	td__ring_row_free(r->hdr, rd, row);
	if (r->rows[row].wake_gen) {
		/* a thread of it that waits by fd finds the row freed */
		(void)td__timerfd_fire(r->rows[row].wake_fd);
		close(r->rows[row].wake_fd);
		td__tenant_sub(uid, TD__LIM_FDS, 1);
		r->rows[row].wake_gen = 0;
		r->wakes--;
		atomic_store(&rd->rows[row].wake_gen, 0);
	}
}

void td__ring_close(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	struct td_wire_ring_close_req m;
	struct td_err e = {0};
	int rc = td_wire_ring_close_req_decode(rq->body, h->body_len, &m, &e);

	if (td__peer_bad_body(p, h, rc, &e))
		return;
	for (struct td__list *l = rings.next; l != &rings; l = l->next) {
		struct ring *r = td__container_of(l, struct ring, link);
		bool hit = false;

		/* only this connection's rings and subscriptions */
		if (r->id == m.id && r->producer == p) {
			td__ring_end(r);
			hit = true;
		}
		for (uint32_t i = 0; !hit && i < r->reader_count; i++)
			if (r->rows[i].peer == p &&
			    r->rows[i].sub_id == m.id) {
				row_clear(r, i);
				hit = true;
			}
		if (!hit)
			continue;
		ring_maybe_free(r);
		td__peer_done(p, h);
		return;
	}
	td__peer_error(p, h->opcode, h->request_id, -ENOENT,
		       "no ring or subscription %llu on this connection",
		       (unsigned long long)m.id);
}

/*
 * RING_WAKE from a subscriber: its timerfd becomes its row's wake-up. Not
 * an eventfd: the subscriber shares it and could make it blocking and
 * fill it, and the producer's or the daemon's write would block for good.
 */
static void wake_register(struct td__peer *p, const struct td__req *rq,
			  struct ring *r, uint32_t row)
{
	const struct td_wire_hdr *h = rq->h;
	struct row_owner *o = &r->rows[row];
	char lim[256];
	int rc;

	if (rq->nfds != 1 || !td__is_timerfd(rq->fds[0])) {
		td__peer_error(p, h->opcode, h->request_id, -EINVAL,
			       "RING_WAKE: a subscription attaches exactly "
			       "one timerfd");
		return;
	}
	if (!o->wake_gen && r->wakes == MAX_WAKE_FDS) {
		td__peer_error(p, h->opcode, h->request_id, -ENOBUFS,
			       "RING_WAKE: ring has %d timerfd readers",
			       MAX_WAKE_FDS);
		return;
	}
	/* the timerfd it keeps is one of the subscriber's descriptors, as
	 * FOLLOW_WAKE's is (docs/policy.md section 5) */
	if (!o->wake_gen &&
	    (rc = td__tenant_take(p->uid, TD__LIM_FDS, 1, lim, sizeof(lim))) <
		    0) {
		td__peer_error(p, h->opcode, h->request_id, rc,
			       "RING_WAKE: %s", lim);
		return;
	}
	if (o->wake_gen)
		close(o->wake_fd);
	else
		r->wakes++;
	o->wake_fd = rq->fds[0];
	rq->fds[0] = -1;
	r->wake_next = td__wake_gen_next(r->wake_next,
					 td__d->opts.wake_gen_max, o->sent_gen);
	o->wake_gen = r->wake_next;
	atomic_store(&r->rd->rows[row].wake_gen, o->wake_gen);
	td__peer_done(p, h);
}

/* RING_WAKE from the producer: every registered eventfd, attached. */
static void wake_fetch(struct td__peer *p, const struct td_wire_hdr *h,
		       struct ring *r)
{
	struct td__daemon *d = td__d;
	struct td_wire_ring_wake_rep m = {0};
	int fds[MAX_WAKE_FDS];
	int64_t len;

	for (uint32_t i = 0; i < r->reader_count; i++) {
		r->rows[i].sent_gen = 0; /* what the producer will keep */
		if (!r->rows[i].wake_gen || m.count == MAX_WAKE_FDS)
			continue;
		m.ents[m.count] = (struct td_wire_ring_wake_ent){
			i, r->rows[i].wake_gen};
		r->rows[i].sent_gen = r->rows[i].wake_gen;
		fds[m.count++] = r->rows[i].wake_fd;
	}
	len = td_wire_ring_wake_rep_encode(&m, TD__TX_BODY(d), TD__TX_CAP);
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
		      len < 0 ? 0 : (size_t)len, fds, m.count);
}

void td__ring_wake(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	struct td_wire_ring_close_req m;
	struct td_err e = {0};
	int rc = td_wire_ring_close_req_decode(rq->body, h->body_len, &m, &e);

	if (td__peer_bad_body(p, h, rc, &e))
		goto out;
	for (struct td__list *l = rings.next; l != &rings; l = l->next) {
		struct ring *r = td__container_of(l, struct ring, link);

		if (r->id == m.id && r->producer == p && rq->nfds == 0) {
			wake_fetch(p, h, r);
			goto out;
		}
		for (uint32_t i = 0; i < r->reader_count; i++)
			if (r->rows[i].peer == p &&
			    r->rows[i].sub_id == m.id) {
				wake_register(p, rq, r, i);
				goto out;
			}
	}
	td__peer_error(p, h->opcode, h->request_id, -ENOENT,
		       "RING_WAKE: no ring or subscription %llu on this "
		       "connection",
		       (unsigned long long)m.id);
out:
	/* what was attached and not kept (a kept fd is -1 now) */
	td__close_fds(rq->fds, rq->nfds);
}

void td__ring_stat(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	struct td__daemon *d = td__d;
	struct td_wire_name_req m;
	struct td_wire_ring_stat_rep r;
	struct td_err e = {0};
	struct ring *ring;
	uint64_t latest;
	int64_t len;
	int rc = td_wire_name_req_decode(rq->body, h->body_len, &m, &e);

	if (td__peer_bad_body(p, h, rc, &e))
		return;
	ring = readable_ring(p, rq, m.name, NULL);
	if (!ring)
		return;
	latest = atomic_load(&ring->hdr->latest);
	r = (struct td_wire_ring_stat_rep){
		.id = ring->id,
		.slot_count = ring->g.slot_count,
		.reader_count = ring->reader_count,
		.subscribers = ring->subs,
		.flags = atomic_load(&ring->hdr->flags) & TD_RING_CLOSED,
		/* producer-written: reported, never used for anything */
		.latest_version = latest >> 8,
		.requests = d->requests,
	};
	len = td_wire_ring_stat_rep_encode(&r, TD__TX_BODY(d), TD__TX_CAP);
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
		      len < 0 ? 0 : (size_t)len, NULL, 0);
}

/* ---- entry points ---- */

void td__ring_hooks_set(const struct td__ring_hooks *h)
{
	hooks = h;
}

void td__ring_peer_gone(struct td__peer *p)
{
	struct td__list *l, *n;

	for (l = rings.next; l != &rings; l = n) {
		struct ring *r = td__container_of(l, struct ring, link);

		n = l->next;
		for (uint32_t i = 0; i < r->reader_count; i++)
			if (r->rows[i].peer == p)
				row_clear(r, i);
		if (r->producer == p)
			td__ring_end(r);
		ring_maybe_free(r);
	}
}

/* A ring whose producer may write, or someone shown its slots read, its
 * name no more ends: a mapping cannot be taken back, and the producer
 * would go on writing its next versions into the slots mapped. */
void td__ring_policy_changed(void)
{
	for (struct td__list *l = rings.next, *n; l != &rings; l = n) {
		struct ring *r = td__container_of(l, struct ring, link);
		bool w;

		n = l->next;
		if (!r->producer)
			continue;
		w = td__access_may(r->producer, TD__PERM_WRITE, r->name,
				   r->name_len);
		if (w && td__shown_may(&r->shown, TD__PERM_READ, r->name,
				       r->name_len))
			continue;
		td__log(TD_LOG_WARN, "ring \"%.*s\" ended: the reloaded policy "
			"lets %s", (int)r->name_len, r->name,
			w ? "a uid it was shown to read it no more"
			  : "its producer write it no more");
		td__ring_end(r);
		ring_maybe_free(r);
	}
}

/* ---- the catalogue: LIST, STAT and GET of ring names ---- */

struct td__ring *td__ring_find(struct td_wire_str n)
{
	struct ring *r = ring_named(n);

	return r ? handle_of(r) : NULL;
}

/* The latest version the header names; 0 for none (or a corrupt word). */
static uint64_t latest_version(const struct ring *r)
{
	uint64_t v;
	uint32_t s;

	if (td_ring_latest_unpack(atomic_load(&r->hdr->latest),
				  r->g.slot_count, &s, &v) <= 0)
		return 0;
	return v;
}

void td__ring_entry(struct td__ring *x, bool kinds, struct td_wire_entry *e)
{
	const struct ring *r = ring_of(x);

	memset(e, 0, sizeof(*e));
	e->name = (struct td_wire_str){r->name, r->name_len};
	/* producer-written: reported, never used to find bytes */
	e->version = latest_version(r);
	e->dtype = r->dtype;
	e->ndim = r->ndim;
	memcpy(e->shape, r->shape, sizeof(e->shape));
	for (uint32_t i = 0; i < r->g.plane_count; i++)
		e->bytes += r->g.plane_size[i];
	e->lease_count = r->leases;
	e->flags = kinds ? TD_WIRE_ENT_RING : 0;
}

uint64_t td__ring_id(const struct td__ring *x)
{
	return ((const struct ring *)(const void *)x)->id;
}

static int name_order(const void *a, const void *b)
{
	const struct ring *x = *(struct ring *const *)a;
	const struct ring *y = *(struct ring *const *)b;
	int c = memcmp(x->name, y->name,
		       x->name_len < y->name_len ? x->name_len : y->name_len);

	if (c)
		return c;
	return (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

/* Byte-wise order of a name against `after` (the store's order). */
static int after_cmp(const struct ring *r, struct td_wire_str after)
{
	int c = memcmp(r->name, after.ptr,
		       r->name_len < after.len ? r->name_len : after.len);

	if (c)
		return c;
	return (r->name_len > after.len) - (r->name_len < after.len);
}

unsigned td__ring_list(struct td_wire_str prefix, struct td_wire_str after,
		       struct td__ring **out)
{
	struct ring **v = (struct ring **)(void *)out;
	unsigned n = 0;

	for (struct td__list *l = rings.next; l != &rings; l = l->next) {
		struct ring *r = td__container_of(l, struct ring, link);

		if (!r->producer || r->name_len < prefix.len ||
		    memcmp(r->name, prefix.ptr, prefix.len) != 0 ||
		    after_cmp(r, after) <= 0)
			continue;
		/* cannot overflow: at most MAX_RINGS rings exist */
		v[n++] = r;
	}
	qsort(v, n, sizeof(*v), name_order);
	return n;
}

static void timers_init(void)
{
	if (timers_ready)
		return;
	uv_timer_init(td__d->loop, &keep_timer);
	uv_timer_init(td__d->loop, &poll_timer);
	timers_ready = true;
}

static void on_poll(uv_timer_t *t)
{
	poll_pass++;
	if (!hooks->poll())
		uv_timer_stop(t);
}

void td__ring_poll_arm(void)
{
	timers_init();
	if (!uv_is_active((uv_handle_t *)&poll_timer))
		uv_timer_start(&poll_timer, on_poll, POLL_MS, POLL_MS);
}

/*
 * Clear TD_RING_KEEP_LATEST where GETs stopped: no lease held and none
 * taken or released for KEEP_MS. Re-armed for the next expiry.
 */
static void on_keep(uv_timer_t *t)
{
	uint64_t now = uv_now(td__d->loop), next = UINT64_MAX;

	for (struct td__list *l = rings.next; l != &rings; l = l->next) {
		struct ring *r = td__container_of(l, struct ring, link);

		if (!(atomic_load(&r->hdr->flags) & TD_RING_KEEP_LATEST))
			continue;
		if (!r->leases && r->keep_until <= now) {
			atomic_fetch_and(&r->hdr->flags, ~TD_RING_KEEP_LATEST);
			continue;
		}
		if (r->keep_until <= now)
			r->keep_until = now + KEEP_MS; /* leased: look later */
		if (r->keep_until < next)
			next = r->keep_until;
	}
	if (next != UINT64_MAX)
		uv_timer_start(t, on_keep, next - now, 0);
}

/*
 * GETs are being served from r: ask the producer to keep the latest
 * version readable instead of rewriting its slot once every subscriber
 * took it (docs/fastpath.md, "Rewriting the latest slot"), so the next
 * GET finds it. Policy only: the bytes are guarded by the lease.
 */
static void keep_latest(struct ring *r)
{
	timers_init();
	r->keep_until = uv_now(td__d->loop) + KEEP_MS;
	if (!(atomic_load(&r->hdr->flags) & TD_RING_KEEP_LATEST))
		atomic_fetch_or(&r->hdr->flags, TD_RING_KEEP_LATEST);
	if (!uv_is_active((uv_handle_t *)&keep_timer))
		uv_timer_start(&keep_timer, on_keep, KEEP_MS, 0);
}

/*
 * Hold slot s for a GET: the same Dekker order as a reader row. We store
 * the count, then (caller) re-read the slot's version; the producer
 * stores version 0, then reads the count. One of the two sees the other.
 * The daemon is the only writer of `leases`, so it stores its own count
 * rather than incrementing whatever the word holds: a producer that
 * scribbles on it cannot make the daemon's count drift.
 */
static void slot_lease(struct ring *r, uint32_t s)
{
	r->lease_n[s]++;
	r->leases++;
	atomic_store(&r->hdr->slots[s].leases, r->lease_n[s]);
}

static void slot_unlease(struct ring *r, uint32_t s)
{
	struct td_ring_readers *rd = r->rd;

	r->lease_n[s]--;
	r->leases--;
	atomic_store(&r->hdr->slots[s].leases, r->lease_n[s]);
	/* the producer may be asleep waiting for exactly this slot (the
	 * same clear-then-look order as row_clear) */
	if (atomic_load(&rd->prod_waiting)) {
		atomic_fetch_add(&rd->release_seq, 1);
		td__futex_wake((const uint32_t *)&rd->release_seq, INT_MAX);
	}
}

void td__ring_unlease(struct td__ring *x, uint32_t slot, uid_t uid)
{
	struct ring *r = ring_of(x);

	slot_unlease(r, slot);
	if (uid != (uid_t)-1) /* HTTP's holds nothing of a uid's */
		td__ring_unhold(r, uid);
	if (timers_ready)
		r->keep_until = uv_now(td__d->loop) + KEEP_MS;
	ring_maybe_free(r);
}

/*
 * The GET reply: an ordinary reference-mode blob whose planes point into
 * the ring's read-only data memfd at slot * stride + plane offset, with
 * that one fd. Its buffer_id carries TD_WIRE_BUF_WINDOW: the client maps
 * the slot's pages, not the whole ring.
 */
static void reply_lease(struct td__peer *p, uint16_t op, uint64_t request_id,
			uint32_t flags, struct ring *r, uint32_t s,
			uint64_t version, uint64_t lease_id)
{
	struct td__daemon *d = td__d;
	struct td_blob_plane pl[TD_RING_MAX_PLANES];
	/* cannot overflow: s < slot_count and data_len was computed */
	uint64_t base = (uint64_t)s * r->g.slot_stride;
	struct td_blob_desc bd = {
		.storage_kind = TD_STORAGE_SHM,
		.pid = (uint32_t)d->pid,
		.fence_fd = -1,
		.dtype = r->dtype,
		.quant_axis = TD_QUANT_NONE,
		.ndim = r->ndim,
		.shape = r->shape,
		.plane_count = r->g.plane_count,
		.planes = pl,
	};
	struct td_wire_get_rep rep = {
		.version = version,
		.lease_id = lease_id,
		.fd_count = 1,
		.fds = {{r->data_ro, TD_WIRE_BUF_WINDOW | r->id}},
	};
	/* header + 16 dims + 5 empty strings + 4 plane records */
	uint8_t blob[TD_BLOB_HEADER_LEN + 8 * TD_RING_MAX_DIMS + 64 +
		     TD_BLOB_PLANE_RECORD_LEN * TD_RING_MAX_PLANES];
	int64_t blen, len;

	for (uint32_t i = 0; i < TD_BLOB_STRING_COUNT; i++)
		bd.strings[i] = (struct td_str){"", 0};
	for (uint32_t i = 0; i < r->g.plane_count; i++)
		pl[i] = (struct td_blob_plane){
			.handle = 0,
			.offset = base + r->g.plane_off[i],
			.size = r->g.plane_size[i],
			.used = r->g.plane_size[i],
		};
	blen = td_blob_encode(&bd, blob, sizeof(blob), NULL);
	rep.blob = (struct td_wire_bytes){blob, blen < 0 ? 0 : (uint32_t)blen};
	len = td_wire_get_rep_encode(&rep, TD__TX_BODY(d), TD__TX_CAP);
	/* cannot fail: the ring's counts were bounded at RING_CREATE and
	 * its dtype checked before the lease */
	td__peer_send(p, op, TD_WIRE_F_REPLY, request_id, 0,
		      len < 0 || blen < 0 ? 0 : (size_t)len, &r->data_ro,
		      (flags & TD_WIRE_REQ_SCM) ? 1 : 0);
}

/*
 * Hold slot s if it still holds `version`, readable: a lease carries no
 * fence, so a version whose fence has not signalled is not handed out yet
 * (the GET waits, as for a slot being rewritten). true: held.
 */
static bool slot_take(struct ring *r, uint32_t s, uint64_t version)
{
	slot_lease(r, s);
	if (atomic_load(&r->hdr->slots[s].version) != version ||
	    atomic_load(&r->hdr->slots[s].fence) == TD_RING_FENCE_PENDING) {
		slot_unlease(r, s);
		return false;
	}
	return true;
}

/* Lease slot s, taken for version by slot_take(), to p and reply. */
static void lease_taken(struct td__peer *p, uint16_t op, uint64_t request_id,
			uint32_t flags, struct ring *r, uint32_t s,
			uint64_t version)
{
	uint64_t id;
	int rc = td__ring_hold(r, p, td__d->reason,
			       sizeof(td__d->reason));

	if (rc == 0 && (rc = hooks->lease(p, handle_of(r), s, &id)) < 0)
		td__ring_unhold(r, p->uid);
	if (rc < 0) {
		slot_unlease(r, s);
		if (rc == -ENOBUFS)
			td__peer_error(p, op, request_id, rc,
				       "too many leases on this connection "
				       "(max %d)", TD__MAX_LEASES);
		else if (rc == -EDQUOT) {
			/* the reason is in td__d->reason, which the reply
			 * is formatted into: copy it out first */
			char why[256];

			snprintf(why, sizeof(why), "%.255s", td__d->reason);
			td__peer_error(p, op, request_id, rc,
				       "GET of ring \"%.*s\": %s",
				       (int)r->name_len, r->name, why);
		} else
			td__peer_error(p, op, request_id, rc, "out of memory");
		return;
	}
	reply_lease(p, op, request_id, flags, r, s, version, id);
}

/*
 * Take (slot_take) the latest slot if its version is newer than after:
 * 1 taken (*slot, *version), -ENOENT none (newer), -EBADMSG the header
 * names a slot past the ring (*slot), -EAGAIN the latest slot is being
 * rewritten, -EINPROGRESS its fence is pending. A mismatch means the
 * producer moved on between our two reads: a few tries, then the
 * caller's poll or refusal, so a busy producer cannot hold the loop.
 */
static int take_latest(struct ring *r, uint64_t after, uint32_t *slot,
		       uint64_t *version)
{
	struct td_ring_hdr *h = r->hdr;

	for (int tries = 0; tries < 8; tries++) {
		uint64_t latest = atomic_load(&h->latest), v;
		uint32_t s;
		int rc = td_ring_latest_unpack(latest, r->g.slot_count, &s,
					       &v);

		*slot = s;
		if (rc < 0)
			return -EBADMSG;
		if (rc == 0 || v <= after)
			return -ENOENT;
		if (slot_take(r, s, v)) {
			*version = v;
			return 1;
		}
		/* latest unchanged: its version waits for its fence, or its
		 * slot is unpublished (the producer is rewriting it because
		 * nobody else wanted it) */
		if (atomic_load(&h->latest) == latest)
			return atomic_load(&h->slots[s].version) == v &&
					       atomic_load(&h->slots[s].fence) ==
						       TD_RING_FENCE_PENDING
				       ? -EINPROGRESS
				       : -EAGAIN;
	}
	return -EAGAIN;
}

int td__ring_try_get(struct td__peer *p, uint16_t op, uint64_t request_id,
		     uint32_t flags, uint32_t mode, uint64_t version,
		     struct td__ring *x)
{
	struct ring *r = ring_of(x);
	struct td_ring_hdr *h = r->hdr;
	uint32_t slot;
	uint64_t v;
	int rc;

	if (td_dtype_size(r->dtype) == 0) {
		td__peer_error(p, op, request_id, -ENOTSUP,
			       "ring \"%.*s\" has dtype %u, which a tensor "
			       "blob cannot describe",
			       (int)r->name_len, r->name, r->dtype);
		return 1;
	}
	keep_latest(r);
	if (mode == TD_GET_EXACT) {
		/* any slot that holds it now; never waits */
		for (uint32_t s = 0; version && s < r->g.slot_count; s++)
			if (atomic_load(&h->slots[s].version) == version &&
			    slot_take(r, s, version)) {
				lease_taken(p, op, request_id, flags, r, s,
					    version);
				return 1;
			}
		for (uint32_t s = 0; version && s < r->g.slot_count; s++)
			if (atomic_load(&h->slots[s].version) == version) {
				td__peer_error(p, op, request_id, -EAGAIN,
					       "version %llu of ring \"%.*s\" "
					       "is published but its fence "
					       "has not signalled yet",
					       (unsigned long long)version,
					       (int)r->name_len, r->name);
				return 1;
			}
		td__peer_error(p, op, request_id, -ENOENT,
			       "version %llu of ring \"%.*s\" is in none of "
			       "its slots (latest %llu)",
			       (unsigned long long)version, (int)r->name_len,
			       r->name, (unsigned long long)latest_version(r));
		return 1;
	}
	rc = take_latest(r, mode == TD_GET_NEWER ? version : 0, &slot, &v);
	if (rc == -EBADMSG) {
		td__peer_error(p, op, request_id, -EBADMSG,
			       "ring \"%.*s\": its header names slot %u of %u "
			       "(a corrupt producer)",
			       (int)r->name_len, r->name, slot,
			       r->g.slot_count);
		return 1;
	}
	if (rc == -ENOENT)
		return 0;
	if (rc < 0) {
		r->busy_pass = poll_pass;
		return rc;
	}
	lease_taken(p, op, request_id, flags, r, slot, v);
	return 1;
}

bool td__ring_busy(struct td__ring *x)
{
	return poll_pass && ring_of(x)->busy_pass == poll_pass;
}

uint32_t td__ring_planes(struct td__ring *x, uint64_t *size)
{
	const struct ring *r = ring_of(x);

	memcpy(size, r->g.plane_size, r->g.plane_count * sizeof(*size));
	return r->g.plane_count;
}

int td__ring_lease_latest(struct td__ring *x, struct td__ring_slot *out)
{
	struct ring *r = ring_of(x);
	uint32_t s;
	uint64_t v;
	int rc;

	keep_latest(r);
	rc = take_latest(r, 0, &s, &v);
	if (rc < 0)
		return rc;
	out->slot = s;
	out->version = v;
	out->ring_id = r->id;
	out->fd = r->data_ro;
	/* cannot overflow: checked when the ring was made */
	for (uint32_t i = 0; i < r->g.plane_count; i++)
		out->off[i] = (uint64_t)s * r->g.slot_stride +
			      r->g.plane_off[i];
	return 0;
}
