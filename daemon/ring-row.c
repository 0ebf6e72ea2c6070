/* SPDX-License-Identifier: MIT */
/*
 * A ring's reader rows as the daemon hands them out and takes them back
 * (docs/fastpath.md, "The daemon stays the authority" and "A row that
 * changed hands"). ring.c decides whose row is whose; this file writes
 * the shared words.
 */
#include "daemon.h"
#include "os.h"
#include "ring-int.h"
#include "ring.h"

#include <limits.h>

/*
 * The row's `waiting` becomes `to` (0 or a token), and a thread of the
 * last owner that sleeps is woken: on the row's own word (4), or on seq
 * with the ring's other sleepers on it (1; seq moves, and they find
 * nothing new and sleep again). No waker looks at a row whose low
 * bits read 0, so a sleeper left there would sleep on for good; woken, it
 * finds the row changed hands. Called after the row's other words are
 * written: a woken thread (or one whose sleep never begins) returns, and
 * its caller may look at the row, only once it reads as the daemon leaves
 * it: the thread's end of sleep reads `waiting` as this swap left it, so
 * it sees every store before the swap.
 */
static void row_unwait(struct td_ring_hdr *h, struct td_ring_row *row,
		       uint32_t to)
{
	uint32_t was = td__futex_unwait_word(&row->waiting, to,
					     TD_RING_WAIT_ROW);

	/*
	 * A change of seq first: a sleeper that checked seq but has not
	 * entered FUTEX_WAIT yet would miss a bare wake and, seq unchanged,
	 * sleep for good. The others on seq find nothing new and sleep
	 * again (seq only ever says "look again"; the close bumps it too).
	 */
	if ((was & TD_RING_LOW) == TD_RING_WAIT_FUTEX) {
		atomic_fetch_add(&h->seq, 1);
		td__futex_wake((const uint32_t *)&h->seq, INT_MAX);
	}
}

/*
 * Row `i` goes to the subscription sub_id: holds nothing, took nothing
 * (the producer keeps the latest version readable for it). On a ring with
 * TD_RING_ROW_OWNER the words carry the new owner's token, so a thread of
 * the last owner finds it changed at its next compare-exchange and writes
 * nothing here. A thread of the last owner asleep on the row is woken.
 */
void td__ring_row_give(struct td_ring_hdr *h, struct td_ring_readers *rd,
		       uint32_t i, uint64_t sub_id)
{
	struct td_ring_row *row = &rd->rows[i];
	uint32_t tok = 0;

	if (atomic_load(&h->flags) & TD_RING_ROW_OWNER)
		tok = td_ring_owner_of(sub_id);
	atomic_store(&row->held, tok ? td_ring_owned(tok, TD_RING_NONE)
				     : TD_RING_NONE);
	atomic_store(&row->taken, tok ? TD_RING_TAKEN_FRESH | tok : 0);
	row_unwait(h, row, td_ring_owned(tok, 0));
}

/*
 * Row `i` is nobody's (its subscription ended, or is being set up): it
 * holds nothing, its `taken` never stops the producer, a sleeper of the
 * last owner is woken, and so is a producer that waits for a slot.
 */
void td__ring_row_free(struct td_ring_hdr *h, struct td_ring_readers *rd,
		       uint32_t i)
{
	struct td_ring_row *row = &rd->rows[i];

	atomic_store(&row->held, TD_RING_NONE);
	atomic_store(&row->taken, TD_RING_TAKEN_ANY);
	row_unwait(h, row, 0);
	/* the producer may be asleep waiting for exactly this slot */
	if (atomic_load(&rd->prod_waiting)) {
		atomic_fetch_add(&rd->release_seq, 1);
		td__futex_wake((const uint32_t *)&rd->release_seq, INT_MAX);
	}
}

/*
 * Wake every reader asleep on its own row (the ring closed), and a
 * producer thread asleep in td_ring_acquire() while another thread
 * closed its client: it finds the ring ended (ring.h).
 */
void td__ring_rows_wake(struct td_ring_readers *rd, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t w = atomic_load(&rd->rows[i].waiting);

		if ((w & TD_RING_LOW) == TD_RING_WAIT_ROW)
			td__futex_wake_word(&rd->rows[i].waiting, w);
	}
	atomic_fetch_add(&rd->release_seq, 1);
	td__futex_wake((const uint32_t *)&rd->release_seq, INT_MAX);
}

/* The producer is gone: no more versions; subscribers see CLOSED. */
void td__ring_end(struct ring *r)
{
	r->producer = NULL; /* the name is free again */
	atomic_fetch_or(&r->hdr->flags, TD_RING_CLOSED);
	atomic_fetch_add(&r->hdr->seq, 1);
	td__futex_wake((const uint32_t *)&r->hdr->seq, INT_MAX);
	td__ring_rows_wake(r->rd, r->reader_count);
	/* readers waiting on a fence it will never signal see CLOSED now */
	for (uint32_t s = 0; s < r->g.slot_count; s++) {
		uint32_t pending = TD_RING_FENCE_PENDING;

		if (atomic_compare_exchange_strong(&r->hdr->slots[s].fence,
						   &pending,
						   TD_RING_FENCE_ABANDONED))
			td__futex_wake((const uint32_t *)&r->hdr->slots[s]
					       .fence,
				       INT_MAX);
	}
	/* event-loop readers learn it through their eventfd */
	for (uint32_t i = 0; i < r->reader_count; i++)
		if (r->rows[i].wake_gen)
			(void)td__timerfd_fire(r->rows[i].wake_fd);
	td__log(TD_LOG_DEBUG, "ring %.*s #%llu closed, %u subscribers",
		(int)r->name_len, r->name, (unsigned long long)r->id, r->subs);
}
