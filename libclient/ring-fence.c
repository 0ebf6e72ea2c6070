/* SPDX-License-Identifier: MIT */
/*
 * A ring slot's fence (ring.h, td_ring_publish_fenced()): a word of the
 * slot's shared state the producer sets pending at the publish and
 * signalled when its device is done; subscribers wait on it, and the
 * producer takes no slot back while it is pending (docs/fastpath.md,
 * "Fences").
 */
#include <errno.h>
#include <limits.h>

#include "os.h"
#include "ring-int.h"

int td_ring_fence_signal(struct td_ring *r, uint64_t version)
{
	struct td_ring_hdr *h;

	if (!r || !version)
		return -EINVAL;
	h = r->m.hdr;
	for (uint32_t s = 0; s < r->m.g.slot_count; s++) {
		uint32_t pending = TD_RING_FENCE_PENDING;

		if (atomic_load(&h->slots[s].version) != version)
			continue;
		/* release (seq_cst: see td__ring_fence_busy): what the
		 * device wrote before the signal */
		if (!atomic_compare_exchange_strong_explicit(
			    &h->slots[s].fence, &pending,
			    TD_RING_FENCE_SIGNALLED, memory_order_seq_cst,
			    memory_order_relaxed))
			return -EALREADY;
		td__futex_wake((const uint32_t *)&h->slots[s].fence, INT_MAX);
		/* the slot may be taken again: a producer thread asleep in
		 * td_ring_acquire() for a slot looks again */
		if (atomic_load(&r->m.rd->prod_waiting) == TD_RING_PROD_SLOT)
			td__ring_prod_wake(r->m.rd);
		return 0;
	}
	return -ENOENT;
}

int td_sub_fence_wait(struct td_sub *s, int timeout_ms)
{
	_Atomic uint32_t *f;
	int64_t deadline;

	if (!s || !s->holding)
		return -EINVAL;
	f = &s->m.hdr->slots[s->held_slot].fence;
	deadline = td__deadline_of(timeout_ms);
	for (;;) {
		/* acquire: the signal's release orders the device's bytes */
		uint32_t v = atomic_load_explicit(f, memory_order_acquire);

		if (v == TD_RING_FENCE_NONE || v == TD_RING_FENCE_SIGNALLED)
			return 0;
		/* the daemon marks a pending fence abandoned (and wakes its
		 * waiters) when it closes the ring; other values are no
		 * producer's */
		if (v != TD_RING_FENCE_PENDING)
			return v == TD_RING_FENCE_ABANDONED ? -EPIPE
							    : -EBADMSG;
		/*
		 * Pending, and its subscription gone: with the daemon gone
		 * nobody marks it abandoned if its producer dies, so the
		 * wait ends as td_sub_next()'s does (a fence that signalled
		 * meanwhile was seen above)
		 */
		if (s->gone)
			return -EPIPE;
		if (timeout_ms == 0 || td__past(deadline))
			return -ETIMEDOUT;
		/* nothing wakes the word when the daemon goes: a look at the
		 * connection at least once a TD__HUP_CHECK_NS */
		int64_t until = td__now_ns() + TD__HUP_CHECK_NS;

		if (deadline >= 0 && deadline < until)
			until = deadline;
		td__futex_wait_until(f, TD_RING_FENCE_PENDING, until);
		(void)td__sub_gone(s);
	}
}
