/* SPDX-License-Identifier: MIT */
/*
 * What daemon/ring.c and daemon/ring-hold.c share: a ring as the daemon
 * keeps it (docs/fastpath.md), and who holds it.
 */
#ifndef TD_DAEMON_RING_INT_H
#define TD_DAEMON_RING_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon.h"
#include "ring.h"
#include "shown.h"

struct row_owner {
	struct td__peer *peer; /* NULL: free */
	uint64_t sub_id;
	/* RING_WAKE: the subscriber's timerfd, valid while wake_gen != 0 */
	uint32_t wake_gen;
	int wake_fd;
	/* the wake_gen the producer's last RING_WAKE reply gave it for this
	 * row (0: none), which it keeps the row's fd under until it asks
	 * again. Never handed to the row anew (wake_register): the 32-bit
	 * count wraps, and a number come round to it would look unchanged
	 * to the producer, which would fire the last reader's timerfd, not
	 * the new one's. Other rows' numbers may repeat: one per row. */
	uint32_t sent_gen;
};

/* The RING_WAKE generation after cur: 1..max, never avoid (the row's
 * sent_gen, above): the count wraps. */
static inline uint32_t td__wake_gen_next(uint32_t cur, uint32_t max,
					 uint32_t avoid)
{
	do
		cur = cur >= max ? 1 : cur + 1;
	while (cur == avoid);
	return cur;
}

/* Rows of one ring woken through an eventfd: what one reply can carry. */
#define MAX_WAKE_FDS TD_WIRE_MAX_FDS

/*
 * A uid other than the ring's that holds it (subscriptions and GET
 * leases of its slots, on any of its connections): the ring's bytes
 * count once in that uid's pinned while n > 0 (ring-hold.c).
 */
struct ring_uid {
	uid_t uid;
	uint32_t n;
};

/* ring_uid entries kept in the ring itself: more go to the heap, once */
#define RING_UIDS_IN 4

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
	bool counted;  /* one ring and RING_FDS fds counted for uid */
	bool unowned;  /* left uid's account (ring_disown) */
	unsigned own;  /* uid's own subscriptions and GET leases */
	/* the other uids that hold it, uid_n of them in uids (uid_in, or
	 * a heap array of uid_cap once more came: kept till ring_free, so
	 * a warm GET allocates nothing) */
	struct ring_uid *uids;
	uint32_t uid_n, uid_cap;
	struct ring_uid uid_in[RING_UIDS_IN];
	struct row_owner rows[TD_RING_MAX_READERS];
	/* GET leases (store leases) per slot: the daemon's own count, which
	 * it stores into hdr->slots[].leases; a ring lives while any exists */
	uint32_t lease_n[TD_RING_MAX_SLOTS];
	unsigned leases;
	uint64_t keep_until; /* uv_now(): TD_RING_KEEP_LATEST until then */
	uint32_t wake_next;  /* last wake_gen handed out */
	uint64_t busy_pass;  /* poll_pass when a GET last found it busy */
	unsigned wakes;      /* rows with a wake eventfd */
	/* every connection handed the slots (subscriptions, GET leases):
	 * a reload that takes read from one ends the ring */
	struct td__shown shown;
	uint16_t name_len;
	char name[TD_WIRE_MAX_NAME + 1];
};

/*
 * A hold of r by p's uid begins: a subscription or a GET lease of a
 * slot, which shows p the slots (r->shown).
 * Another uid's holds count r once as one of its rings and r's bytes
 * once in its pinned (td__tenant_ring_hold), however many holds it has
 * on r on however many connections: charged at its first, given back at
 * its last (td__ring_unhold). 0, or -EDQUOT / -ENOMEM with why (nothing
 * taken then).
 */
int td__ring_hold(struct ring *r, const struct td__peer *p, char *why,
		  size_t cap);
/* A hold td__ring_hold took ends. */
void td__ring_unhold(struct ring *r, uid_t uid);
/* What a freed ring kept for its holders (none left by then). */
void td__ring_holds_fini(struct ring *r);
/* The producer is gone (RING_CLOSE, its connection, a policy reload): no
 * more versions; subscribers see CLOSED (ring-row.c). */
void td__ring_end(struct ring *r);

#endif
