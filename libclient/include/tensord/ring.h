/* SPDX-License-Identifier: MIT */
/*
 * libtensord's rings (docs/fastpath.md): a part of <tensord/tensord.h>,
 * which includes it (and which it includes, for the handle and the
 * conventions, all of which hold here). Include either.
 */
#ifndef TENSORD_RING_H
#define TENSORD_RING_H

#include <tensord/tensord.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- rings: the fast path (docs/fastpath.md) ----
 *
 * A ring is a pool of reusable slots in shared memory that one producer
 * fills and any number of subscribers read in place. Every descriptor
 * crosses the socket once, when the ring is created or subscribed to;
 * every mapping is made then and kept. A handoff after that is a few
 * atomic operations on a shared control block plus a futex wake when a
 * reader sleeps: no message to the daemon, no fd, no mmap, no copy.
 *
 * Rings deliver the latest version, not every version: a subscriber that
 * reads slower than the producer writes skips versions (td_view.version
 * shows the gaps). A slot a subscriber holds is never rewritten until it
 * is released; a producer that finds every slot held or latest waits in
 * td_ring_acquire(). With slot_count >= subscribers + 2 it never waits.
 *
 * Threads: a struct td_ring or td_sub must be used by one thread at a time
 * (the fast path takes no lock); different rings and subscriptions are
 * independent. Creating, subscribing, closing and td_client_ring_stat()
 * talk to the daemon and serialise on the client handle like every other
 * call. A ring or subscription keeps its client's memory alive; closing the
 * client first ends the ring in the daemon (subscribers see it closed),
 * and the ring makes no version after that (td_ring_acquire()).
 */

struct td_ring;
struct td_sub;

#define TD_SLOT_MAX_PLANES 4 /* planes per slot */

#define TD_RING_HUGE_PAGES 0x1u /* back the slots with huge pages if any */

/* How a ring's slots are backed (td_ring_backing()). */
#define TD_RING_BACKING_HUGETLB 0x1u /* hugetlbfs pages (MFD_HUGETLB) */
#define TD_RING_BACKING_THP 0x2u     /* tmpfs, MADV_HUGEPAGE asked for */

/* What a ring carries. Zero-initialise, then set what applies. */
struct td_ring_desc {
	uint32_t dtype; /* enum td_tensor_dtype, as subscribers see it */
	uint32_t ndim;  /* <= TD_ENTRY_MAX_DIMS */
	const uint64_t *shape;
	/* planes per slot; 0 = one plane of the dense tensor size. When
	 * every plane size is a multiple of A (a power of two <= 2 MiB),
	 * every plane of every slot is A-aligned, producer and subscribers
	 * alike (one plane's size alone does not do it). Together they
	 * hold at least dtype size times shape (else -EINVAL) */
	uint32_t plane_count;
	const uint64_t *plane_sizes;
	uint32_t slot_count;   /* 2..64; 0 = 4 */
	uint32_t reader_count; /* subscriptions at once, 1..32; 0 = 4 */
	uint32_t flags;        /* TD_RING_HUGE_PAGES; other bits -EINVAL */
};

/* A slot the producer may write (td_ring_acquire()). */
struct td_slot {
	uint32_t index;
	uint32_t plane_count;
	void *planes[TD_SLOT_MAX_PLANES]; /* writable, valid until close */
	uint64_t sizes[TD_SLOT_MAX_PLANES];
};

/* A version a subscriber reads in place (td_sub_next()). */
struct td_view {
	uint64_t version; /* increasing; gaps are versions skipped */
	uint32_t slot;
	uint32_t plane_count;
	const void *planes[TD_SLOT_MAX_PLANES]; /* valid until release */
	uint64_t sizes[TD_SLOT_MAX_PLANES];
	uint32_t dtype;
	uint32_t ndim;
	const uint64_t *shape; /* ndim entries, valid while the sub lives */
};

/*
 * Create the ring `name` with this producer as its only writer. The name
 * is shared with tensors (LIST, STAT and GET see the ring) and must not
 * be taken by either. The daemon makes the slots (memory reserved and
 * pre-faulted, size-sealed); they are mapped writable here, page tables
 * populated, before this returns.
 * Returns 0 and *out (end it with td_ring_close()), -EEXIST the name is
 * a live ring or a tensor, -EINVAL a bad description, -ENOBUFS too many
 * rings, or -errno.
 */
TD_EXPORT int td_ring_create(struct td_client *c, const char *name,
			     const struct td_ring_desc *desc,
			     struct td_ring **out, struct td_error *err);
/*
 * Get a slot to write: never the latest version, never one a subscriber
 * or the daemon holds, never one whose fence is pending (published with
 * td_ring_publish_fenced() and not signalled: the device may still be
 * writing it). Waits up to timeout_ms (< 0 forever, 0 not at all) when
 * every slot is in use; td_ring_fence_signal() from another thread ends
 * such a wait (a one-thread producer whose every free slot is pending
 * signals one first). Calling it again before td_ring_publish()
 * returns the same slot. 0 and *slot, -ETIMEDOUT, -EINVAL, -ENOTCONN
 * once its client was closed (td_client_close(); by another thread
 * while this one waited too: the wait ends then), -EPIPE once the daemon
 * ended the ring (the client's connection dropped), -ECHILD in a child of
 * fork(). The slots stay mapped until td_ring_close() either way.
 */
TD_EXPORT int td_ring_acquire(struct td_ring *r, int timeout_ms,
			      struct td_slot *slot);
/*
 * Publish the acquired slot as the next version (*version, may be NULL)
 * and wake the subscribers that sleep. 0, as td_ring_acquire()
 * -ENOTCONN, -EPIPE, -ECHILD (whether a slot is acquired or not), else
 * -EINVAL when no slot is acquired (nothing is published).
 */
TD_EXPORT int td_ring_publish(struct td_ring *r, uint64_t *version);
/*
 * Wait until every subscriber has read `version` (one this producer
 * published): taken it or a newer version, and released it (or moved
 * on), waiting up to timeout_ms (< 0 forever, 0 just look). For a
 * producer that wants each version consumed before it goes on (lock
 * step; an answer with no bytes): the readers' releases are the answer,
 * so nothing else crosses back. Polls, then sleeps, like
 * td_ring_acquire(). The subscribers counted are those of the moment: one
 * that subscribes meanwhile counts once it is there (it reads the latest
 * version), one that closes or dies stops counting; with none, 0 at once.
 * While an acquired slot rewrites the latest version (every subscriber
 * had read it; none can take it any more), every version up to it counts
 * as read. GETs of the ring do not count. A subscriber that never reads
 * holds the answer up until the timeout. 0, -ETIMEDOUT, -EINVAL a version not
 * published yet (or 0), -ECHILD in a child of fork(), -ENOTCONN once the
 * client is closed (by another thread too, while this waits: the wait
 * ends at once), -EPIPE once the daemon ended the ring.
 */
TD_EXPORT int td_ring_wait_read(struct td_ring *r, uint64_t version,
				int timeout_ms);
/*
 * td_ring_publish() with the slot's fence pending: for a producer whose
 * device is still writing the slot (a GPU queue). Subscribers get the
 * version at once and wait in td_sub_fence_wait() until the producer
 * calls td_ring_fence_signal(); a plain GET of the ring is not answered
 * with it before then. No fd: the fence is a word of the slot's shared
 * state, so it costs no message and no descriptor per frame. 0, and the
 * errors of td_ring_publish().
 */
TD_EXPORT int td_ring_publish_fenced(struct td_ring *r, uint64_t *version);
/*
 * Signal the fence of `version` (published with td_ring_publish_fenced())
 * and wake the subscribers waiting on it, and a producer thread asleep in
 * td_ring_acquire() (the slot may be written again now). 0, -ENOENT when
 * no slot holds that version (never published, or rewritten after its
 * signal), -EALREADY when its fence is not pending, -EINVAL.
 */
TD_EXPORT int td_ring_fence_signal(struct td_ring *r, uint64_t version);
/* TD_RING_BACKING_* of the ring's slots, 0 for ordinary pages. */
TD_EXPORT uint32_t td_ring_backing(const struct td_ring *r);
/*
 * End the ring: the daemon marks it closed (subscribers get -EPIPE once
 * they read the last version) and the name is free again. Slots being
 * read stay mapped in their readers. Accepts NULL.
 */
TD_EXPORT void td_ring_close(struct td_ring *r);

/*
 * Subscribe to the ring `name`, waiting up to timeout_ms (< 0 forever, 0
 * not at all) for it to be created: one request the daemon answers when
 * the ring is made (an older daemon is asked every millisecond), which
 * holds the handle as td_client_get_newer() does. Its slots are mapped
 * read-only (the daemon hands out read-only fds) before this returns.
 * Returns 0 and *out (end it with td_sub_close()), -ENOENT/-ETIMEDOUT no
 * such ring, -EINVAL a tensor has the name (refused at once, not waited
 * for), -EBUSY every reader row in use, -ENOBUFS 64 subscriptions
 * on this connection already, -EACCES no read permission, -EDQUOT
 * another uid's ring whose bytes would take this uid past its pinned
 * limit (docs/policy.md §5), -EBADMSG a corrupt reply, or -errno.
 */
TD_EXPORT int td_ring_subscribe(struct td_client *c, const char *name,
				int timeout_ms, struct td_sub **out,
				struct td_error *err);
/*
 * Release the view held (if any), then hold the latest version newer than
 * the last one returned, waiting up to timeout_ms (< 0 forever, 0 not at
 * all). Its bytes cannot change until td_sub_release() or the next call.
 * Returns 0 and *view, -ETIMEDOUT, -EPIPE the producer closed the ring
 * (after its last version was returned) or the subscription is gone (its
 * connection dropped, or the daemon died: a wait looks once a second; it
 * never writes that row again, nor takes a version through it; subscribe
 * anew), -EBADMSG the control block holds values no producer writes (a
 * corrupt or hostile producer).
 */
TD_EXPORT int td_sub_next(struct td_sub *s, int timeout_ms,
			  struct td_view *view);
/* Give the held view back so its slot can be rewritten. 0, or -EINVAL
 * when none is held. */
TD_EXPORT int td_sub_release(struct td_sub *s);
/*
 * Wait until the held view's fence signals, at most timeout_ms (< 0
 * forever, 0 just look). 0 at once for a version published without a
 * fence. -ETIMEDOUT; -EPIPE the producer closed the ring (or died)
 * without signalling it, whose bytes may be unfinished, or, with it
 * still pending, the subscription is gone (as td_sub_next(): the
 * connection dropped or the daemon died; a wait looks once a second);
 * -EINVAL when no view is held; -EBADMSG a fence word no producer writes.
 */
TD_EXPORT int td_sub_fence_wait(struct td_sub *s, int timeout_ms);
/*
 * Where plane i of view v (a view of this subscription) lies in the
 * ring's data file: returns that file's descriptor (read-only; borrowed,
 * valid until td_sub_close(); never read from or close it) and the
 * plane's byte offset in it in *offset. For a consumer that needs its
 * own mapping of a slot: mmap(MAP_PRIVATE, PROT_READ | PROT_WRITE) of it
 * shares the slot's pages for reading (no copy) and gives the mapping
 * private pages where it is written, never seen by the producer or
 * other subscribers. Its bytes are the version's only while the view is
 * held (td_sub_release() or the next td_sub_next() lets the producer
 * rewrite the slot). -EINVAL for NULL, a plane out of range or a view
 * of another subscription.
 */
TD_EXPORT int td_sub_plane_fd(const struct td_sub *s, const struct td_view *v,
			      uint32_t i, uint64_t *offset);
/* End the subscription (releases the view held). Accepts NULL. */
TD_EXPORT void td_sub_close(struct td_sub *s);

/* ---- rings in an event loop ----
 *
 * A subscription can be woken through a descriptor instead of a futex:
 * td_sub_fd() gives it a timerfd (registered with the daemon, which hands
 * it to the producer once); while the subscription waits by fd, the
 * producer's td_ring_publish() fires that timerfd, beside the futex wake
 * it does for sleeping readers. The handoff itself stays free of messages
 * to the daemon: only the first publish after a new timerfd appears asks
 * the daemon for it.
 */

/*
 * The subscription's timerfd, made and registered on first call: it polls
 * readable when a version newer than the last one taken is published, or
 * the ring closes, while the subscription is armed (td_sub_poll() arms
 * it; it reads what it needs). A timerfd, so that firing it cannot block
 * the producer (an eventfd's write can): poll it, never write() it.
 * Borrowed: closed by td_sub_close(). Returns the fd, -EOPNOTSUPP
 * from a daemon without RING_WAKE, -ENOBUFS when the ring already has 16
 * such readers, -EDQUOT when the timerfd the daemon keeps would take the
 * uid past its fds limit (docs/policy.md §5), -ECHILD in a child of
 * fork() (made before or not), or -errno.
 */
TD_EXPORT int td_sub_fd(struct td_sub *s);
/*
 * td_sub_next() without waiting, for a subscription with td_sub_fd():
 * clears the fd, releases the view held, and takes the latest newer
 * version. Returns 0 and *view (the subscription stays armed, so the next
 * version makes the fd readable again), -EAGAIN nothing newer (armed: the
 * fd becomes readable when there is), -EPIPE the ring is closed or the
 * subscription gone (as for td_sub_next(): the fd becomes readable when
 * the daemon frees its row), -EBADMSG, or -EINVAL without td_sub_fd().
 */
TD_EXPORT int td_sub_poll(struct td_sub *s, struct td_view *view);

/*
 * Called by td_client_process() with no lock held: status 0 and the view
 * (held until a newer version is delivered, td_sub_release() or
 * td_sub_close()), or once at the end: -EPIPE the ring closed or the
 * subscription gone, -EBADMSG (its timerfd then leaves td_client_fd()).
 * It may close its own subscription, not another one with a handler.
 * Another thread's td_sub_close() or td_sub_set_handler() waits for a
 * td_client_process() that is calling these handlers to be done with them
 * (so a handler must not wait for a thread that makes such a call).
 */
typedef void (*td_sub_fn)(struct td_sub *s, int status,
			  const struct td_view *view, void *ud);
/*
 * Deliver this subscription's versions to fn from td_client_process() of
 * its client: its timerfd joins td_client_fd(). fn NULL takes it out
 * again. A version already published is delivered at the next
 * td_client_process(). 0, or the errors of td_sub_fd().
 */
TD_EXPORT int td_sub_set_handler(struct td_sub *s, td_sub_fn fn, void *ud);

/* A ring as the daemon sees it (td_client_ring_stat()). */
struct td_ring_stat {
	uint64_t id;
	uint32_t slot_count;
	uint32_t reader_count;
	uint32_t subscribers;
	uint32_t closed;         /* 1 once the producer is gone */
	uint64_t latest_version; /* 0 when nothing was published */
	/* datagrams the daemon received from every client since it started:
	 * the handoff path sends none, which tests and benches check */
	uint64_t daemon_requests;
};

/* Ask the daemon about the ring `name`. 0, -ENOENT, or -errno. */
TD_EXPORT int td_client_ring_stat(struct td_client *c, const char *name,
				  struct td_ring_stat *st,
				  struct td_error *err);

#ifdef __cplusplus
}
#endif

#endif
