/* SPDX-License-Identifier: MIT */
/* libtensord ring internals shared by ring.c and ring-loop.c. */
#ifndef TD_LIBCLIENT_RING_INT_H
#define TD_LIBCLIENT_RING_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "client.h"
#include "pace.h"
#include "ring.h"

/* The mappings of one ring, as the daemon described them. */
struct ringmap {
	struct td_ring_geom g;
	uint32_t reader_count;
	uint32_t backing;
	struct td_ring_hdr *hdr;
	struct td_ring_readers *rd;
	uint8_t *data;
	int data_fd; /* a subscriber's data memfd (td_sub_plane_fd), or -1 */
};

struct td_ring {
	struct td_client *c;
	uint64_t id;
	struct ringmap m;
	uint64_t next_version;
	uint32_t cur;  /* acquired slot, TD_RING_NONE */
	uint32_t last; /* latest published slot, TD_RING_NONE */
	/* the version last published in each slot: private, since pick()
	 * zeroes the shared version of a slot it looks at even when a
	 * reader holds it (td_ring_wait_read) */
	uint64_t published[TD_RING_MAX_SLOTS];
	struct td_pace pace;      /* td_ring_acquire's waits */
	struct td_pace read_pace; /* td_ring_wait_read's (the readers' work) */
	uint32_t epoch; /* c->epoch of the connection that made it */
	int prod_row; /* its entry in c->prod_rows, -1 none */
	/* event-loop readers' eventfds by row (RING_WAKE), -1 none; valid
	 * while the row's wake_gen equals ours */
	int wake_fd[TD_RING_MAX_READERS];
	uint32_t wake_gen[TD_RING_MAX_READERS];
};

struct td_sub {
	struct td_client *c;
	uint64_t id;
	struct ringmap m;
	struct td_ring_row *row;
	uint64_t last_version;
	bool holding;
	uint32_t held_slot; /* while holding */
	struct td_pace pace;
	uint32_t dtype, ndim;
	uint64_t shape[TD_RING_MAX_DIMS];
	uint32_t epoch; /* c->epoch of the connection that subscribed */
	/* our token in the row's words (TD_RING_ROW_OWNER), 0 none; and the
	 * `taken` we stored last, which only we write while the row is ours */
	uint32_t tok;
	uint64_t taken;
	uint32_t held_word; /* with a token: the `held` word we stored last */
	/* the row is no longer ours (the daemon freed it, or gave it away;
	 * or, without a token, our connection is gone): td_sub_next says
	 * -EPIPE and nothing writes the row again; so too once a wait found
	 * the connection gone (td_sub_next) */
	bool gone;
	/* with a token: when a wait looks at the connection next (a daemon
	 * that is gone closes no ring: td_sub_next) */
	int64_t hup_at;
	/* event loops (td_sub_fd, td_sub_set_handler) */
	int efd; /* -1 until td_sub_fd() */
	td_sub_fn fn;
	void *ud;
	bool ended;        /* the handler was told the end */
	struct td_sub *lnext; /* c->subs, while a handler is set */
};

/* ring-map.c: decode a CREATE/SUBSCRIBE reply, import and map its three
 * fds (rep's fds are consumed): 0 or -errno with a reason. */
int td__ringmap_take(struct td_client *c, struct td__msg *rep,
		     struct td_wire_ring_rep *r, bool producer,
		     struct ringmap *m, struct td_error *err);
/* ... and unmap them (and close a subscriber's data fd). */
void td__ringmap_unmap(struct ringmap *m);

/* wait.c: waiting, shared with follow.c (docs/fastpath.md, "Waiting") */
/* now + timeout_ms in ns, -1 for a negative timeout (none) */
int64_t td__deadline_of(int timeout_ms);
/* the deadline (-1: none) has passed */
bool td__past(int64_t deadline);
/* the whole ms left until deadline: 0 once past, -1 for none */
int td__ms_left(int64_t deadline);
/* Sleep while *w == val (a shared futex), until deadline (-1: none):
 * 0 woken or changed, -ETIMEDOUT. */
int td__futex_wait_until(_Atomic uint32_t *w, uint32_t val, int64_t deadline);
/* One step of a wait that found nothing: spin (true), or false with
 * *until the deadline to sleep to. The plan starts on the first call. */
bool td__pace_wait(const struct td_pace *p, struct td_pace_plan *w,
		   int64_t deadline, int64_t *until);
/* The connection made at `epoch` is gone or going (closed, dead, made
 * anew, or hung up on: POLLHUP). Locks c; one poll(2). */
bool td__conn_gone(struct td_client *c, uint32_t epoch);
/* How often a waiter looks for that (a poll(2) each time) at most. */
#define TD__HUP_CHECK_NS 1000000000ll
/*
 * ring.c: after a sleep of a subscriber's wait, is its subscription gone
 * (the connection dropped, the daemon died)? Sets and returns s->gone;
 * with an owner token it looks once a TD__HUP_CHECK_NS at most.
 */
bool td__sub_gone(struct td_sub *s);

/* ring.c: set a word of s's row (held, waiting) to `low`, keeping its
 * owner token: false, writing nothing, once the row is no longer s's
 * (s->gone). *was (if not NULL): the word it replaced. */
bool td__sub_row_set(struct td_sub *s, _Atomic uint32_t *w, uint32_t low,
		     uint32_t *was);

/* ring.c: wake the producer asleep on rd's release_seq. */
void td__ring_prod_wake(struct td_ring_readers *rd);
/*
 * Whether slot s's fence is pending (its device may still write it: the
 * producer does not take it back). seq_cst: a producer's pick() after
 * announcing its sleep, against td_ring_fence_signal()'s signal, then
 * look (ring-fence.c; Dekker, as a reader's release against the
 * producer's sleep).
 */
static inline bool td__ring_fence_busy(struct td_ring_hdr *h, uint32_t s)
{
	return atomic_load(&h->slots[s].fence) == TD_RING_FENCE_PENDING;
}

/* ring-loop.c: off the client's handler list and its epoll set (lock
 * held). */
void td__sub_unlink(struct td_sub *s);
/*
 * Lock held: wait out another thread's walk of the handlers
 * (ring-loop.c's td__sub_deliver), which may be about to read any
 * subscription's timerfd and call its fn, or hold it as the next one: a
 * close or a new handler waits for it to end, or the walk would read a
 * freed one, and a number closed meanwhile that another open took (an
 * 8-byte read from a socket eats a datagram). The walk's own handlers
 * go on at once.
 */
static inline void td__sub_walk_wait(struct td_client *c)
{
	while (c->sub_turn.depth &&
	       !pthread_equal(c->sub_turn.by, pthread_self()) &&
	       !td__client_foreign(c))
		pthread_cond_wait(&c->sub_walked, &c->lock);
}

#endif
