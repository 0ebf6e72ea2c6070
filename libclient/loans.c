/* SPDX-License-Identifier: MIT */
/*
 * libtensord loans: the cache of recyclable loan buffers, a loan's end
 * (td_alloc_free), and the next loans PUBLISH replies lend
 * (TD_WIRE_PUB_LOAN; docs/fastpath.md, "Streams: one round trip per
 * tensor"), kept one per name, TD__LENT_MAX names at most, until an
 * alloc of that name takes one: a producer of several named streams on
 * one connection makes one request per tensor, as a producer of one
 * does. ALLOC and PUBLISH themselves are produce.c's.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alloc.h"
#include "os.h"
#include "wire-status.h"

/* ---- the recyclable loan cache (lock held) ---- */

void td__loanbuf_destroy(struct td_client *c, struct td__loanbuf *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else
		c->loans = b->next;
	if (b->next)
		b->next->prev = b->prev;
	if (!b->busy) {
		c->idle_loans--;
		c->idle_bytes -= b->size;
	}
	if (b->addr)
		munmap(b->addr, b->size);
	if (b->fd >= 0)
		close(b->fd);
	free(b);
}

struct td__loanbuf *td__loanbuf_find(struct td_client *c, uint64_t id)
{
	for (struct td__loanbuf *b = c->loans; b; b = b->next)
		if (b->buffer_id == id)
			return b;
	return NULL;
}

/*
 * A published buffer goes idle; the least recently used beyond the caps
 * go: TD__LOAN_CACHE buffers, and beyond TD_WIRE_MAX_HELD of them those
 * past TD__LOAN_CACHE_BYTES (mappings kept here keep their memory alive
 * after the daemon has dropped the buffer).
 */
void td__loanbuf_idle(struct td_client *c, struct td__loanbuf *b)
{
	b->busy = false;
	b->used = ++c->clock;
	c->idle_loans++;
	c->idle_bytes += b->size;
	while (c->idle_loans > TD__LOAN_CACHE ||
	       (c->idle_bytes > TD__LOAN_CACHE_BYTES &&
		c->idle_loans > TD_WIRE_MAX_HELD)) {
		struct td__loanbuf *old = NULL;

		for (struct td__loanbuf *x = c->loans; x; x = x->next)
			if (!x->busy && (!old || x->used < old->used))
				old = x;
		td__loanbuf_destroy(c, old);
	}
}

unsigned td__loans_drop(struct td_client *c, bool all)
{
	struct td__loanbuf *b = c->loans, *next;
	unsigned n = 0;

	for (; b; b = next) {
		next = b->next;
		if (b->busy && !all)
			continue;
		n += !b->busy;
		td__loanbuf_destroy(c, b);
	}
	return n;
}

/* ---- loans ---- */

void td__alloc_unmap(struct td_alloc *a)
{
	for (uint32_t i = 0; i < a->count; i++) {
		if (a->addr[i] && !a->lb[i])
			munmap(a->addr[i], a->size[i]);
		a->addr[i] = NULL;
	}
}

int td__alloc_seal(const struct td_alloc *a, int elem, struct td_error *err)
{
	const char *why = NULL;
	int rc;

	/* written again once it comes back: only its size is sealed;
	 * $TENSORD_SEAL=daemon: left to the daemon, as older libraries do */
	if (a->recycle || !a->c->seal_self)
		return 0;
	for (uint32_t i = 0; i < a->count; i++) {
		/* a loan's buffers are the daemon's memfds (ALLOC): one
		 * F_GET_SEALS, and F_ADD_SEALS where they are not sealed */
		if (a->fds[i] < 0)
			continue;
		rc = td__memfd_seal_publish(a->fds[i], &why);
		if (rc < 0 && elem < 0)
			return td__fail(err, rc, "buffer %u: %s", i, why);
		if (rc < 0)
			return td__fail(err, rc, "element %d, buffer %u: %s",
					elem, i, why);
	}
	return 0;
}

/*
 * Free a loan. Its recyclable buffers go too: unpublished, the daemon
 * keeps them in the alloc until this connection ends, never recycled.
 */
void td__alloc_free_locked(struct td_alloc *a)
{
	/* the ids of an earlier connection's daemon name nothing now */
	if (a->epoch == a->c->epoch)
		td__stage_drop(a->c, a->alloc_id);
	td__alloc_unmap(a);
	for (uint32_t i = 0; i < a->count; i++) {
		if (a->lb[i])
			td__loanbuf_destroy(a->c, a->lb[i]);
		else if (a->fds[i] >= 0)
			close(a->fds[i]);
	}
	free(a);
}

/*
 * Lock held: tell the daemon that unpublished alloc a is given up
 * (RELEASE TD_WIRE_REL_ALLOC, quiet), or it would keep it, and count it
 * against the connection's 64, until the connection ends. Nothing to
 * tell for a loan of an earlier connection, a connection that is gone,
 * a child of fork(), or a daemon that predates the flag.
 */
void td__alloc_give_back(struct td_client *c, const struct td_alloc *a)
{
	struct td_wire_release_req req = {
		.lease_id = a->alloc_id,
		.flags = TD_WIRE_REL_QUIET | TD_WIRE_REL_ALLOC,
	};
	int64_t len;

	if (!a->alloc_id || a->epoch != c->epoch || c->sock < 0 || c->dead ||
	    td__client_foreign(c) || !td__has(c, TD_WIRE_FEAT_ALLOC_FREE) ||
	    !td__has(c, TD_WIRE_FEAT_RELEASE_QUIET))
		return;
	len = td_wire_release_req_encode(&req, c->sbuf + TD_WIRE_HDR_LEN,
					 TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
	if (len >= 0)
		(void)td__send(c, TD_OP_RELEASE, (size_t)len, NULL);
}

void td_alloc_free(struct td_alloc *a)
{
	struct td_client *c;

	if (!a)
		return;
	c = a->c;
	td__client_lock(c);
	td__alloc_give_back(c, a);
	td__alloc_free_locked(a);
	pthread_mutex_unlock(&c->lock);
	td__client_unref(c);
}

void *td_alloc_data(struct td_alloc *a, uint32_t i)
{
	return a && i < a->count ? a->addr[i] : NULL;
}

uint64_t td_alloc_size(const struct td_alloc *a, uint32_t i)
{
	return a && i < a->count ? a->size[i] : 0;
}

int td_alloc_fd(const struct td_alloc *a, uint32_t i)
{
	return a && i < a->count ? a->fds[i] : -1;
}

/* ---- the next loans, lent by PUBLISH replies (TD_WIRE_PUB_LOAN) ---- */

static bool next_loan_fits(const struct td_alloc *a, uint32_t plane_count,
			   const uint64_t *sizes, const struct td_alloc *want)
{
	/* a loan lent after a named alloc's publish is for that name */
	if (a->count != plane_count || a->name_len != want->name_len ||
	    memcmp(a->name, want->name, want->name_len))
		return false;
	for (uint32_t i = 0; i < plane_count; i++)
		if (a->size[i] != sizes[i])
			return false;
	return true;
}

/*
 * How many names' lent loans this client may hold: one per name needs
 * a way to give back each one it does not take (RELEASE of an alloc by
 * id, quiet); UNLOAN gives back only the one the daemon lent last.
 */
static unsigned lent_max(const struct td_client *c)
{
	return td__has(c, TD_WIRE_FEAT_ALLOC_FREE) &&
			       td__has(c, TD_WIRE_FEAT_RELEASE_QUIET)
		       ? TD__LENT_MAX
		       : 1;
}

/* The index of the lent loan for the name of a (a loan), or -1. */
static int lent_find(const struct td_client *c, const struct td_alloc *a)
{
	for (unsigned i = 0; i < c->n_lent; i++)
		if (c->lent[i]->name_len == a->name_len &&
		    !memcmp(c->lent[i]->name, a->name, a->name_len))
			return (int)i;
	return -1;
}

/* Lent loan i out of the list (handed out, or dropped). */
static struct td_alloc *lent_take(struct td_client *c, unsigned i)
{
	struct td_alloc *a = c->lent[i];

	memmove(&c->lent[i], &c->lent[i + 1],
		(c->n_lent - i - 1) * sizeof(c->lent[0]));
	c->n_lent--;
	return a;
}

/*
 * Not wanted (other sizes, or a name's loan pushed out by another's):
 * the one the daemon lent last goes back with the next ALLOC (UNLOAN),
 * which may lend its buffers again without an fd: they go idle here,
 * still mapped. Another goes back by id now, its buffers closed on
 * both sides (the rarer case: a name's sizes changed while another
 * name's loan came later).
 */
static void next_loan_drop(struct td_client *c, unsigned i)
{
	struct td_alloc *a = lent_take(c, i);

	if (a->alloc_id != c->lent_last) {
		td__alloc_give_back(c, a);
		td__alloc_free_locked(a);
		return;
	}
	c->lent_last = 0;
	c->unloan = true;
	td__stage_drop(c, a->alloc_id);
	for (uint32_t k = 0; k < a->count; k++)
		if (a->lb[k])
			td__loanbuf_idle(c, a->lb[k]);
	free(a);
}

void td__next_loan_reset(struct td_client *c)
{
	/* their buffers go idle, with the rest of the old daemon's ids */
	while (c->n_lent) {
		struct td_alloc *a = lent_take(c, 0);

		for (uint32_t k = 0; k < a->count; k++)
			if (a->lb[k])
				td__loanbuf_idle(c, a->lb[k]);
		free(a);
	}
	/* and the new daemon lent this client nothing to give back */
	c->lent_last = 0;
	c->unloan = false;
}

void td__next_loan_forget(struct td_client *c)
{
	/* their buffers are in c->loans, which the caller drops */
	while (c->n_lent)
		free(lent_take(c, 0));
	c->lent_last = 0;
}

struct td_alloc *td__lent_claim(struct td_client *c,
				const struct td_alloc *want,
				uint32_t plane_count, const uint64_t *sizes,
				bool take)
{
	int i = lent_find(c, want);

	if (i >= 0 && take &&
	    next_loan_fits(c->lent[i], plane_count, sizes, want))
		return lent_take(c, (unsigned)i);
	/* this name's goes back; with one lent loan at most, any name's */
	if (i >= 0)
		next_loan_drop(c, (unsigned)i);
	else if (c->n_lent && lent_max(c) == 1)
		next_loan_drop(c, 0);
	return NULL;
}

/*
 * Lock held: may the PUBLISH of loan a ask for the next loan of its name
 * in the reply? Not while one of that name is waiting already, nor while
 * one this client could not take is still to be given back by UNLOAN
 * (the next ALLOC): the daemon's UNLOAN gives back the loan it lent last,
 * which this reply's would then be. Room for it (TD__LENT_MAX names at
 * most): the oldest name's goes back, if no publish of it came in the
 * last TD__LENT_STALE stream publishes; else this name goes without. A
 * producer of more names in turn than it may hold loans for then keeps
 * TD__LENT_MAX of them lent (and staged) and sends the others' ALLOCs,
 * where giving back the oldest would give back, every time, the loan
 * the next alloc wants. A loan lent before is no longer the daemon's
 * last one from here on.
 */
#define TD__LENT_STALE (4 * TD__LENT_MAX)
bool td__lent_ask(struct td_client *c, const struct td_alloc *a)
{
	if (a && a->stream)
		c->lent_clock++;
	if (!a || !a->stream || a->rewrite || c->unloan ||
	    !td__has(c, TD_WIRE_FEAT_PUB_LOAN) || lent_find(c, a) >= 0 ||
	    (c->n_lent && lent_max(c) == 1))
		return false;
	if (c->n_lent == TD__LENT_MAX &&
	    c->lent_clock - c->lent[0]->lent_at <= TD__LENT_STALE)
		return false;
	if (c->n_lent == TD__LENT_MAX) {
		struct td_alloc *old = lent_take(c, 0);

		td__alloc_give_back(c, old);
		td__alloc_free_locked(old);
	}
	c->lent_last = 0;
	return true;
}

/* room was made before the PUBLISH asked (td__lent_ask) */
bool td__lent_keep(struct td_client *c, struct td_alloc *next)
{
	if (c->n_lent == TD__LENT_MAX) {
		td__alloc_give_back(c, next);
		td__alloc_free_locked(next);
		return false;
	}
	next->lent_at = c->lent_clock;
	c->lent[c->n_lent++] = next;
	c->lent_last = next->alloc_id;
	return true;
}
