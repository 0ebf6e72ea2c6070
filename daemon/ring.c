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
 * Rings live in their own namespace (RING_STAT, not LIST/STAT), see
 * docs/fastpath.md for why.
 */
#include "daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ring.h"

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define MAX_RINGS 256         /* rings in the daemon */
#define MAX_RINGS_PER_PEER 16 /* rings one connection produces */
#define MAX_SUBS_PER_PEER 64  /* subscriptions of one connection */

_Static_assert(TD_WIRE_RING_MAX_PLANES == TD_RING_MAX_PLANES, "plane cap");
_Static_assert(TD_WIRE_MAX_DIMS == TD_RING_MAX_DIMS, "dims cap");

struct row_owner {
	struct td__peer *peer; /* NULL: free */
	uint64_t sub_id;
};

struct ring {
	struct td__list link;
	uint64_t id;
	struct td__peer *producer; /* NULL once it is gone */
	uint32_t flags;            /* TD_WIRE_RING_HUGETLB | _THP */
	uint32_t reader_count;
	uint32_t dtype, ndim;
	uint64_t shape[TD_WIRE_MAX_DIMS];
	struct td_ring_geom g;
	int hdr_rw, hdr_ro, rd_rw, data_rw, data_ro;
	struct td_ring_hdr *hdr;
	struct td_ring_readers *rd;
	unsigned subs;
	uid_t uid;     /* the producer's, charged with acct */
	uint64_t acct; /* bytes counted against --max-bytes and the quota */
	struct row_owner rows[TD_RING_MAX_READERS];
	uint16_t name_len;
	char name[TD_WIRE_MAX_NAME + 1];
};

static struct td__list rings = {&rings, &rings};
static unsigned ring_count;
static uint64_t next_id = 1;

static void futex_wake_all(_Atomic uint32_t *w)
{
	/* A shared (not PRIVATE) futex: the key is the memfd page, so a
	 * wake on our mapping reaches sleepers on theirs. */
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* ---- memfds ---- */

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static int seal_size(int fd, const char **why)
{
	/*
	 * SHRINK: nobody can cut pages from under a mapping (SIGBUS in the
	 * others). Not WRITE: the producer rewrites slots for ever.
	 */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
		*why = "cannot seal the memfd size";
		return -errno;
	}
	return 0;
}

/* A small control memfd, its pages allocated now. */
static int ctl_create(const char *name, size_t len, int *out,
		      const char **why)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int rc;

	if (fd < 0) {
		*why = "memfd_create failed";
		return -errno;
	}
	if (ftruncate(fd, (off_t)len) < 0 || fallocate(fd, 0, 0, (off_t)len)) {
		rc = -errno;
		*why = "cannot size the control memfd";
		goto fail;
	}
	rc = seal_size(fd, why);
	if (rc < 0)
		goto fail;
	*out = fd;
	return 0;
fail:
	close(fd);
	return rc;
}

/* hugetlbfs pages, if the machine has that many reserved. */
static int data_hugetlb(uint64_t len, int *out)
{
	int fd = memfd_create("tensord-ring-data",
			      MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0 ||
	    fallocate(fd, 0, 0, (off_t)len) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	*out = fd;
	return 0;
}

/*
 * Fault every page of a tmpfs memfd in through a mapping advised
 * MADV_HUGEPAGE: fallocate() alone allocates small pages unless
 * shmem_enabled is "always", while a fault in an advised mapping may take
 * a huge one. What the kernel gives is its choice; this only asks.
 */
static int populate_thp(int fd, uint64_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int rc = 0;

	if (p == MAP_FAILED)
		return -errno;
	madvise(p, len, MADV_HUGEPAGE);
	if (madvise(p, len, MADV_POPULATE_WRITE) < 0)
		rc = -errno;
	munmap(p, len);
	return rc;
}

/*
 * The slots: pre-allocated now so that neither side ever takes a
 * first-touch allocation (or a SIGBUS under memory pressure) while
 * handing off.
 */
static int data_create(uint64_t len, bool huge, uint32_t *flags, int *out,
		       const char **why)
{
	int fd = -1, rc;

	*flags = 0;
	if (huge && data_hugetlb(len, &fd) == 0) {
		*flags = TD_WIRE_RING_HUGETLB;
		goto seal;
	}
	fd = memfd_create("tensord-ring-data", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		*why = "memfd_create failed";
		return -errno;
	}
	if (ftruncate(fd, (off_t)len) < 0) {
		rc = -errno;
		*why = "cannot size the data memfd";
		goto fail;
	}
	if (huge && populate_thp(fd, len) == 0) {
		*flags = TD_WIRE_RING_THP;
		goto seal;
	}
	if (fallocate(fd, 0, 0, (off_t)len) < 0) {
		rc = -errno;
		*why = "cannot reserve memory for the ring";
		goto fail;
	}
seal:
	rc = seal_size(fd, why);
	if (rc < 0)
		goto fail;
	*out = fd;
	return 0;
fail:
	close(fd);
	return rc;
}

/*
 * A read-only descriptor of the same file: opening the /proc link anew
 * gives a new open file description with its own (read-only) mode, so a
 * consumer can neither map it writable nor add seals to it.
 */
static int reopen_ro(int fd, const char **why)
{
	char path[64];
	int ro;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	if (ro < 0) {
		*why = "cannot reopen the memfd read-only (is /proc mounted?)";
		return -errno;
	}
	return ro;
}

/* ---- ring objects ---- */

static void ring_free(struct ring *r)
{
	td__list_del(&r->link);
	ring_count--;
	td__store_uncharge(r->uid, r->acct);
	if (r->hdr)
		munmap(r->hdr, TD_RING_HDR_LEN);
	if (r->rd)
		munmap(r->rd, TD_RING_READERS_LEN);
	close_fd(&r->hdr_rw);
	close_fd(&r->hdr_ro);
	close_fd(&r->rd_rw);
	close_fd(&r->data_rw);
	close_fd(&r->data_ro);
	td__log(TD_LOG_DEBUG, "ring %.*s #%llu freed", (int)r->name_len,
		r->name, (unsigned long long)r->id);
	free(r);
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
static int ring_build(struct ring *r, bool huge, const char **why)
{
	int rc;

	rc = ctl_create("tensord-ring-hdr", TD_RING_HDR_LEN, &r->hdr_rw, why);
	if (rc < 0)
		return rc;
	rc = ctl_create("tensord-ring-readers", TD_RING_READERS_LEN, &r->rd_rw,
			why);
	if (rc < 0)
		return rc;
	rc = data_create(r->g.data_len, huge, &r->flags, &r->data_rw, why);
	if (rc < 0)
		return rc;
	r->hdr_ro = reopen_ro(r->hdr_rw, why);
	if (r->hdr_ro < 0)
		return r->hdr_ro;
	r->data_ro = reopen_ro(r->data_rw, why);
	if (r->data_ro < 0)
		return r->data_ro;
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
	for (uint32_t i = 0; i < TD_RING_MAX_READERS; i++) {
		atomic_store(&r->rd->rows[i].held, TD_RING_NONE);
		atomic_store(&r->rd->rows[i].taken, TD_RING_TAKEN_ANY);
	}
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

static void bad_body(struct td__peer *p, const struct td_wire_hdr *h, int rc,
		     const struct td_err *e)
{
	td__peer_error(p, h->opcode, h->request_id, rc, "%s: %s: %s",
		       td_wire_op_name(h->opcode), e->field ? e->field : "body",
		       e->reason ? e->reason : "invalid");
}

static void op_create(struct td__peer *p, const struct td_wire_hdr *h,
		      const uint8_t *body)
{
	struct td_wire_ring_create_req m;
	struct td_err e = {0};
	struct ring *r;
	const char *why = NULL;
	unsigned subs;
	int rc = td_wire_ring_create_req_decode(body, h->body_len, &m, &e);

	if (rc < 0) {
		bad_body(p, h, rc, &e);
		return;
	}
	if (m.reader_count < 1 || m.reader_count > TD_RING_MAX_READERS) {
		td__peer_error(p, h->opcode, h->request_id, -EINVAL,
			       "reader_count %u outside 1..%d", m.reader_count,
			       TD_RING_MAX_READERS);
		return;
	}
	if (!td__store_allowed(p, h, TD__PERM_WRITE, m.name))
		return;
	if (ring_named(m.name)) {
		td__peer_error(p, h->opcode, h->request_id, -EEXIST,
			       "a ring named \"%.*s\" exists", (int)m.name.len,
			       m.name.ptr);
		return;
	}
	if (ring_count >= MAX_RINGS ||
	    peer_rings(p, &subs) >= MAX_RINGS_PER_PEER) {
		td__peer_error(p, h->opcode, h->request_id, -ENOBUFS,
			       "too many rings (max %d per connection, %d in "
			       "all)",
			       MAX_RINGS_PER_PEER, MAX_RINGS);
		return;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		td__peer_error(p, h->opcode, h->request_id, -ENOMEM,
			       "out of memory");
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
		rc = ring_build(r, m.flags & TD_WIRE_RING_HUGE, &why);
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
}

static void op_subscribe(struct td__peer *p, const struct td_wire_hdr *h,
			 const uint8_t *body)
{
	struct td_wire_ring_sub_req m;
	struct td_err e = {0};
	struct ring *r;
	uint32_t row;
	unsigned subs;
	int rc = td_wire_ring_sub_req_decode(body, h->body_len, &m, &e);

	if (rc < 0) {
		bad_body(p, h, rc, &e);
		return;
	}
	if (!td__store_allowed(p, h, TD__PERM_READ, m.name))
		return;
	r = ring_named(m.name);
	if (!r) {
		td__peer_error(p, h->opcode, h->request_id, -ENOENT,
			       "no ring named \"%.*s\"", (int)m.name.len,
			       m.name.ptr);
		return;
	}
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
	/* a free row holds nothing (cleared when its last owner left); a
	 * new subscriber took nothing yet, so the producer keeps the latest
	 * version readable for it */
	atomic_store(&r->rd->rows[row].held, TD_RING_NONE);
	atomic_store(&r->rd->rows[row].waiting, 0);
	atomic_store(&r->rd->rows[row].taken, 0);
	r->rows[row].peer = p;
	r->rows[row].sub_id = next_id++;
	r->subs++;
	reply_ring(p, h, r, r->rows[row].sub_id, row, m.flags,
		   (const int[]){r->hdr_ro, r->rd_rw, r->data_ro});
}

/* A subscription ends (request or disconnect): its row holds nothing. */
static void row_clear(struct ring *r, uint32_t row)
{
	struct td_ring_readers *rd = r->rd;

	r->rows[row].peer = NULL;
	r->rows[row].sub_id = 0;
	r->subs--;
	atomic_store(&rd->rows[row].held, TD_RING_NONE);
	atomic_store(&rd->rows[row].waiting, 0);
	atomic_store(&rd->rows[row].taken, TD_RING_TAKEN_ANY);
	/* the producer may be asleep waiting for exactly this slot */
	if (atomic_load(&rd->prod_waiting)) {
		atomic_fetch_add(&rd->release_seq, 1);
		futex_wake_all(&rd->release_seq);
	}
}

/* The producer is gone: no more versions; subscribers see CLOSED. */
static void ring_close(struct ring *r)
{
	r->producer = NULL; /* the name is free again */
	atomic_fetch_or(&r->hdr->flags, TD_RING_CLOSED);
	atomic_fetch_add(&r->hdr->seq, 1);
	futex_wake_all(&r->hdr->seq);
	td__log(TD_LOG_DEBUG, "ring %.*s #%llu closed, %u subscribers",
		(int)r->name_len, r->name, (unsigned long long)r->id, r->subs);
}

static void op_close(struct td__peer *p, const struct td_wire_hdr *h,
		     const uint8_t *body)
{
	struct td_wire_ring_close_req m;
	struct td_err e = {0};
	int rc = td_wire_ring_close_req_decode(body, h->body_len, &m, &e);

	if (rc < 0) {
		bad_body(p, h, rc, &e);
		return;
	}
	for (struct td__list *l = rings.next; l != &rings; l = l->next) {
		struct ring *r = td__container_of(l, struct ring, link);
		bool hit = false;

		/* only this connection's rings and subscriptions */
		if (r->id == m.id && r->producer == p) {
			ring_close(r);
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
		if (!r->producer && !r->subs)
			ring_free(r);
		td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
			      0, NULL, 0);
		return;
	}
	td__peer_error(p, h->opcode, h->request_id, -ENOENT,
		       "no ring or subscription %llu on this connection",
		       (unsigned long long)m.id);
}

static void op_stat(struct td__peer *p, const struct td_wire_hdr *h,
		    const uint8_t *body)
{
	struct td__daemon *d = td__d;
	struct td_wire_name_req m;
	struct td_wire_ring_stat_rep r;
	struct td_err e = {0};
	struct ring *ring;
	uint64_t latest;
	int64_t len;
	int rc = td_wire_name_req_decode(body, h->body_len, &m, &e);

	if (rc < 0) {
		bad_body(p, h, rc, &e);
		return;
	}
	ring = ring_named(m.name);
	if (!ring) {
		td__peer_error(p, h->opcode, h->request_id, -ENOENT,
			       "no ring named \"%.*s\"", (int)m.name.len,
			       m.name.ptr);
		return;
	}
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

void td__ring_request(struct td__peer *p, const struct td_wire_hdr *h,
		      const uint8_t *body, int *fds, unsigned nfds)
{
	if (nfds) {
		for (unsigned i = 0; i < nfds; i++)
			close_fd(&fds[i]);
		td__peer_error(p, h->opcode, h->request_id, -EINVAL,
			       "%s carries no fds", td_wire_op_name(h->opcode));
		return;
	}
	switch (h->opcode) {
	case TD_OP_RING_CREATE:
		op_create(p, h, body);
		return;
	case TD_OP_RING_SUBSCRIBE:
		op_subscribe(p, h, body);
		return;
	case TD_OP_RING_CLOSE:
		op_close(p, h, body);
		return;
	case TD_OP_RING_STAT:
		op_stat(p, h, body);
		return;
	default:
		td__peer_error(p, h->opcode, h->request_id, -EOPNOTSUPP,
			       "unknown opcode %u", h->opcode);
	}
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
			ring_close(r);
		if (!r->producer && !r->subs)
			ring_free(r);
	}
}
