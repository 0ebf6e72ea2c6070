/* SPDX-License-Identifier: MIT */
/*
 * FOLLOW and FOLLOW_CLOSE (docs/protocol.md §13, docs/fastpath.md
 * "Following a name"): plain-API consumers of a stream that take each
 * new version of a name from shared memory, with no message per version.
 *
 * Per followed name a bell (proto/follow.h): the daemon writes the
 * current version's GET reply into an entry, stores `latest`, bumps
 * `seq` and wakes sleepers, inside td__name_set/td__name_remove (the
 * store's hooks, struct td__store_bell). Per follower a row memfd of its
 * own: which version it holds. When a version stops being current the
 * rows are scanned and every hold found becomes a reference on the
 * version (and a lease in STAT), dropped by sweep() once the row holds
 * something else: at the bell's next change, when a search for room
 * comes up short, and when the follower leaves.
 */
#include "store.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "follow-int.h"
#include "follow.h"
#include "os.h"
#include "wire-status.h"

static uint64_t next_id = 1;
static unsigned stages;    /* bells with a stage: the timer runs */
static uv_timer_t stage_timer;
#define STAGE_SETTLE_MS 1000 /* a producer that fired and stalled */

/* ---- holds ---- */

/*
 * A hold counts as a lease of the follower's uid, as a GET's does
 * (lease.c): one lease, and another uid's bytes as pinned. It cannot be
 * refused (the follower holds already), so FOLLOW checks for room for
 * one lease first, and a uid is over its limits by at most one version
 * per follow, which refuses its next GET. v's bytes counted while it
 * was current (rows_charge) go at the same change: counted once.
 */
static uint64_t row_bit(const struct bell *b, const struct follower *f)
{
	return 1ull << (f - b->rows);
}

static void hold_take(struct bell *b, struct follower *f,
		      struct td__version *v)
{
	uid_t uid = f->peer->uid;

	f->held = v;
	b->holding |= row_bit(b, f);
	f->pinned = td__follow_pin(v, uid);
	f->peer->follow_holds++;
	f->peer->follow_held_bytes += v->bytes;
	v->refs++;
	v->lease_count++;
	v->foreign_leases += v->uid != uid;
	/* the uid has an entry (its connection): these cannot fail */
	(void)td__tenant_add(uid, TD__LIM_LEASES, 1);
	(void)td__tenant_add(uid, TD__LIM_PINNED, f->pinned);
}

/*
 * Every row's uid is charged now's pinned bytes in place of the last
 * current version's (a row that held that one keeps it as a hold, which
 * hold_take counted: once). A row may take the current version with no
 * message, so it counts from the moment it is current, as a GET lease of
 * it would (docs/policy.md §4). It cannot be refused: over the uid's
 * pinned limit, the uid's next GET, FOLLOW or RING_SUBSCRIBE is
 * (docs/policy.md, "A follower's hold"), never the producer's PUBLISH.
 */
static void rows_charge(struct bell *b, const struct td__version *now)
{
	int i;

	for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;) {
		struct follower *f = &b->rows[i];
		uint64_t pin = td__follow_pin(now, f->peer->uid);
		/* a stream's versions are all of one size: nothing to do on
		 * the handoff path (and no tenant row emptied and remade) */
		if (pin != f->cur_pin) {
			td__tenant_sub(f->peer->uid, TD__LIM_PINNED,
				       f->cur_pin);
			(void)td__tenant_add(f->peer->uid, TD__LIM_PINNED,
					     pin);
			f->cur_pin = pin;
		}
		/* a GET lease it covered of the version that was current
		 * counts for itself now, unless the row holds that version
		 * (bell_retire: the hold covers it on); only a follower
		 * that took the last version by GET has one */
		if (f->cover && !td__row_charges(b, f, f->cover->v))
			td__follow_cover_end(f);
	}
}

static void hold_drop(struct bell *b, struct follower *f)
{
	struct td__version *v = f->held;
	uid_t uid = f->peer->uid;

	/* a held version is never current again: a lease of it covered by
	 * the hold counts for itself now */
	if (f->cover && f->cover->v == v)
		td__follow_cover_end(f);
	f->held = NULL;
	b->holding &= ~row_bit(b, f);
	f->peer->follow_holds--;
	f->peer->follow_held_bytes -= v->bytes;
	v->lease_count--;
	v->foreign_leases -= v->uid != uid;
	td__tenant_sub(uid, TD__LIM_LEASES, 1);
	td__tenant_sub(uid, TD__LIM_PINNED, f->pinned);
	f->pinned = 0;
	td__version_unref(td__d->store, v);
}

/* Drop the holds of b's rows that now hold something else. */
static void bell_sweep(struct bell *b)
{
	int i;

	for (uint64_t m = b->holding; (i = td__row_next(&m)) >= 0;) {
		struct follower *f = &b->rows[i];

		if (atomic_load(&f->row->held) != f->held->number)
			hold_drop(b, f);
	}
}

/*
 * v stopped being `latest` (the store and bump are done): every row that
 * holds it now keeps it (a follower whose hold comes later sees the new
 * `latest` when it checks, and lets go). A row may have let go of an
 * older retired version and taken v since the sweep that began this
 * change: the old hold goes, or v would be kept for nobody.
 */
static void bell_retire(struct bell *b, struct td__version *v)
{
	int i;

	for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;) {
		struct follower *f = &b->rows[i];

		if (f->held == v || atomic_load(&f->row->held) != v->number)
			continue;
		if (f->held)
			hold_drop(b, f);
		hold_take(b, f, v);
	}
}

/* ---- entries ---- */

static bool entry_busy(const struct bell *b, uint32_t e)
{
	uint64_t n = b->entry_of[e];
	int i;

	if (n == 0)
		return false;
	if (n == b->cur || (b->st.sv && n == b->st.sv->number))
		return true;
	for (uint64_t m = b->holding; (i = td__row_next(&m)) >= 0;)
		if (b->rows[i].held->number == n)
			return true;
	return false;
}

/*
 * Write v's GET reply, every fd left out, into a free entry: its index,
 * or TD_FOLLOW_ENTRY_NONE when v has a fence (an fd no entry can carry),
 * its reply does not fit, or every entry is held.
 */
static uint32_t entry_write(struct bell *b, const struct td__version *v)
{
	struct td_wire_get_rep r = {
		.version = v->number,
		.meta = {v->meta, v->meta_len},
		.blob = {v->blob, v->blob_len},
		.fd_count = v->nfds,
	};
	struct td_follow_entry *ent;
	uint32_t e;
	int64_t len;

	for (uint32_t i = 0; i < v->nfds; i++) {
		if (!v->fds[i].tracked)
			return TD_FOLLOW_ENTRY_NONE; /* a fence */
		r.fds[i].fd = -1;
		r.fds[i].buffer_id = v->fds[i].buffer_id;
	}
	/* a staged version's entry is written already, and may be read */
	for (e = 0; e < TD_FOLLOW_ENTRIES; e++)
		if (b->entry_of[e] == v->number)
			return e;
	for (e = 0; e < TD_FOLLOW_ENTRIES && entry_busy(b, e); e++)
		;
	if (e == TD_FOLLOW_ENTRIES)
		return TD_FOLLOW_ENTRY_NONE;
	ent = td_follow_entry_at(b->hdr, e);
	/* nobody holds the entry's version: a seqlock only for a follower
	 * whose connection is gone and still reads (it re-checks) */
	atomic_store_explicit(&ent->version, 0, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	len = td_wire_get_rep_encode(&r, ent->body, sizeof(ent->body));
	if (len < 0) {
		b->entry_of[e] = 0;
		return TD_FOLLOW_ENTRY_NONE;
	}
	ent->len = (uint32_t)len;
	atomic_store_explicit(&ent->version, v->number, memory_order_release);
	b->entry_of[e] = v->number;
	return e;
}

/* ---- a change of the current version ---- */

/*
 * The bell and trigger word (td_follow_trig_at) of the fired stage
 * being committed (NULL, 0: none): its producer woke that word.
 */
static const struct bell *fired_bell;
static uint64_t fired_at;

/*
 * Wake the rows asleep for version `now` (0: the name has none); a row
 * that took it already (from its stage) waits for a newer one, and a
 * row asleep on the fired word too, expecting there no FIRED word of a
 * version it waits for (trig_sleep), was woken by the producer's fire.
 * A trigger word holds 30 bits of a version: a row expects there at
 * most the FIRED word of the version it took last (`taken`), and when
 * that is `now`'s word too, it may have been `now`'s own, read after the
 * fire's wake: such a row is woken (docs/fastpath.md, "Woken by the
 * producer").
 */
static void bell_wake(struct bell *b, uint64_t now)
{
	bool futex = false;
	int i;

	for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;) {
		struct follower *f = &b->rows[i];
		uint32_t w;

		if ((now && atomic_load_explicit(
						&f->row->taken,
						memory_order_relaxed) >= now))
			continue;
		w = atomic_load(&f->row->waiting);
		if (w == TD_FOLLOW_WAIT_ROW && b == fired_bell &&
		    atomic_load_explicit(&f->row->trig_sleep,
					 memory_order_acquire) == fired_at &&
		    td_follow_trig(atomic_load_explicit(&f->row->taken,
							memory_order_relaxed),
				   TD_FOLLOW_TRIG_FIRED) !=
			    td_follow_trig(now, TD_FOLLOW_TRIG_FIRED))
			continue;
		if (w == TD_FOLLOW_WAIT_ROW)
			td__futex_wake_word(&f->row->waiting, w);
		futex |= w == TD_FOLLOW_WAIT_FUTEX;
		if (w == TD_FOLLOW_WAIT_FD && f->wake_fd >= 0)
			(void)td__timerfd_fire(f->wake_fd);
	}
	if (futex)
		td__futex_wake((const uint32_t *)&b->hdr->seq, INT_MAX);
}

/* now becomes `latest` (NULL: the name has none), gone is retired. */
static void bell_set(struct bell *b, struct td__version *now,
		     struct td__version *gone, bool quiet)
{
	uint32_t e = TD_FOLLOW_ENTRY_NONE;

	bell_sweep(b);
	if (now)
		e = entry_write(b, now);
	b->cur = now ? now->number : 0;
	b->cur_v = now;
	atomic_store_explicit(&b->hdr->latest,
			      now ? td_follow_latest_pack(now->number, e) : 0,
			      memory_order_release);
	/*
	 * quiet (a rewrite, loan.c): latest is 0 until the next publish,
	 * which bumps seq and wakes; a follower that looks meanwhile finds
	 * nothing to take. Its hold of gone, if one raced in, is still
	 * found by the scan below: the fence stands where the seq bump's
	 * full barrier stands otherwise, between the store of latest and
	 * the loads of the rows (a follower stores its hold, then re-reads
	 * latest).
	 */
	if (quiet)
		atomic_thread_fence(memory_order_seq_cst);
	else
		atomic_fetch_add(&b->hdr->seq, 1);
	if (gone)
		bell_retire(b, gone);
	rows_charge(b, now);
	if (!quiet)
		bell_wake(b, now ? now->number : 0);
}

static void on_changed(struct td__version *now, struct td__version *gone,
		       bool quiet)
{
	const struct td__version *v = now ? now : gone;
	struct bell *b;

	if (!v || td__list_empty(&td__bells))
		return;
	b = td__bell_named(v->name, v->name_len);
	if (!b || (!now && b->cur_v != gone))
		return;
	bell_set(b, now, gone, quiet);
}

/*
 * Whether v is a followed name's current version that a row holds now:
 * the store neither evicts it nor counts it as freed by the PUBLISH that
 * replaces it. One nobody holds goes like any unleased version; a hold
 * that lands between this look and the eviction's retire scan is kept
 * by that scan (a lease of the follower's uid), and its bytes stay until
 * the follower lets go.
 */
static bool on_pins(const struct td__version *v)
{
	const struct bell *b;
	int i;

	if (td__list_empty(&td__bells))
		return false;
	b = td__bell_named(v->name, v->name_len);
	if (!b || b->cur_v != v)
		return false;
	for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;)
		if (atomic_load(&b->rows[i].row->held) == v->number)
			return true;
	return false;
}

static void on_sweep(void)
{
	for (struct td__list *l = td__bells.next; l != &td__bells; l = l->next)
		bell_sweep(td__container_of(l, struct bell, link));
}

/* ---- staged publishes (docs/fastpath.md, "A followed publish ...") ---- */

static void stage_timer_arm(void);

/* b's stage is over (committed or cancelled): followers stop seeing it. */
static void stage_clear(struct bell *b)
{
	struct stage *st = &b->st;

	atomic_store_explicit(&b->hdr->stage, 0, memory_order_release);
	td__peer_stage_drop(st->owner, b);
	if (st->sv) {
		/* cancelled: its entry is free again, its number unused */
		if (b->entry_of[st->entry] == st->sv->number &&
		    b->cur != st->sv->number)
			b->entry_of[st->entry] = 0;
		/* its metadata's charge (stage_arm) */
		td__acct_sub(td__d->store, st->owner->uid, st->sv->acct);
		td__version_put(td__d->store, st->sv);
	}
	*st = (struct stage){0};
	stages--;
}

/* The owner fired b's stage: its version becomes the name's current. */
static void stage_commit(struct bell *b)
{
	struct stage st = b->st;
	struct td__alloc *a = td__loan_find(st.owner, st.alloc_id);

	/*
	 * The name may have gone meanwhile (an eviction: the fired version
	 * comes after it, as a PUBLISH read after it would), and the table
	 * may have filled since: room for it first. No memory: as a cancel,
	 * and the producer's PUBLISH then goes the plain way.
	 */
	if (!a || td__name_reserve(td__d->store) < 0) {
		/* no loan cannot happen: every end of it settles first */
		td__log(TD_LOG_ERROR, "staged %.*s version %llu not committed: "
			"%s", (int)b->name_len, b->name,
			(unsigned long long)st.sv->number,
			a ? "out of memory" : "its loan is gone");
		stage_clear(b);
		return;
	}
	b->st.sv = NULL; /* the store's now */
	td__peer_fired_note(st.owner, st.alloc_id, st.sv->number, a->rewrite);
	/* stays named (entry_busy) until td__name_set made it current;
	 * its producer woke its word when it fired (bell_wake) */
	fired_bell = b;
	fired_at = td_follow_trig_at(st.owner->trig->gen, st.slot);
	td__publish_staged(st.owner, a, st.sv);
	fired_bell = NULL;
	fired_at = 0;
	stage_clear(b);
}

/*
 * Decide b's stage: committed when its producer fired it; else, with
 * cancel, cancelled by the daemon's compare-exchange (which the
 * producer's can no longer win), and committed when the producer's won
 * just before. Without cancel a stage not fired stays.
 */
static void stage_settle(struct bell *b, bool cancel)
{
	uint64_t v = b->st.sv->number;
	uint32_t fired = td_follow_trig(v, TD_FOLLOW_TRIG_FIRED);
	uint32_t w = td_follow_trig(v, TD_FOLLOW_TRIG_STAGED);
	struct td_follow_trigger *t =
		b->st.owner->trig->map + b->st.slot;

	if (atomic_load(&t->word) == fired) {
		stage_commit(b);
		return;
	}
	if (!cancel)
		return;
	/* followers stop taking it first; a hold that raced in is the
	 * producer's word against ours, decided below */
	atomic_store(&b->hdr->stage, 0);
	if (atomic_compare_exchange_strong(
		    &t->word, &w,
		    td_follow_trig(v, TD_FOLLOW_TRIG_CANCELLED)) ||
	    w != fired)
		stage_clear(b); /* cancelled (or a word a producer garbled) */
	else
		stage_commit(b);
}

static void on_settle(const char *name, size_t len, bool cancel)
{
	struct td__list *l, *n;
	struct bell *b;

	if (!stages)
		return;
	if (name) {
		b = td__bell_named(name, len);
		if (b && b->st.owner)
			stage_settle(b, cancel);
		return;
	}
	for (l = td__bells.next; l != &td__bells; l = n) {
		b = td__container_of(l, struct bell, link);
		n = l->next;
		if (b->st.owner)
			stage_settle(b, cancel);
	}
}

void td__stage_owner(struct td__peer *p, bool cancel)
{
	struct bell *b[TD__PEER_STAGES];
	unsigned n = p->n_stages;

	/* a commit or cancel takes its bell out of p's list (still p's:
	 * nothing one does ends another's, but the walk does not rely on it) */
	memcpy(b, p->stage, n * sizeof(b[0]));
	for (unsigned i = 0; i < n; i++)
		if (b[i]->st.owner == p)
			stage_settle(b[i], cancel);
}

static void on_stage_timer(uv_timer_t *t)
{
	(void)t;
	/* a producer that fired and then stalled: committed within this */
	on_settle(NULL, 0, false);
	if (!stages)
		uv_timer_stop(&stage_timer);
}

static void stage_timer_arm(void)
{
	if (!uv_is_active((uv_handle_t *)&stage_timer))
		uv_timer_start(&stage_timer, on_stage_timer, STAGE_SETTLE_MS,
			       STAGE_SETTLE_MS);
}

/*
 * May loan a be staged as the next version of desc's name, repeating
 * desc's descriptor? A named recyclable loan of desc's planes (no fence,
 * no fd of the request's own), every buffer published before (its
 * read-only reopen made), while followers follow the name and nothing
 * else is staged there. desc is the version a PUBLISH just made (the
 * loan its reply lends: from the free list, so nobody's version, even
 * after a rewritable publish), or a copy of the version a REWRITE ALLOC
 * took back (the loan is that version's buffers, which nobody holds).
 */
static bool stage_fits(const struct bell *b, const struct td__alloc *a,
		       const struct td__version *desc)
{
	if (!b || !b->followers || b->st.owner || !a || !a->recycle ||
	    !a->name_len || a->count != desc->nfds ||
	    !desc->recycle || !td__alloc_is_for(
				      a, (struct td_wire_str){desc->name,
							      desc->name_len}))
		return false;
	for (uint32_t i = 0; i < a->count; i++)
		if (a->fds[i].ro < 0 || a->fds[i].fd < 0 ||
		    !desc->fds[i].tracked ||
		    a->fds[i].size != desc->fds[i].size)
			return false;
	return true;
}

/*
 * b's stage is t's page's from now on. The generation of a page may be
 * that of the page b named before (it has 32 bits and comes round after
 * 2^32 pages; stage_page tells them apart): a row asleep on the old
 * page's word then holds a trig_sleep that reads as this page's, and a
 * commit of this page's fire would leave it asleep (bell_wake), so it is
 * woken to look again. A row that stores `waiting` after this store
 * finds the new stage_page in its last look and does not sleep.
 */
static void stage_page_set(struct bell *b, const struct td__trig *t)
{
	struct td_follow_hdr *h = b->hdr;
	int i;

	if (atomic_load_explicit(&h->stage_page, memory_order_relaxed) ==
	    t->serial)
		return;
	atomic_store(&h->stage_page, t->serial); /* before the loads below */
	if (atomic_load_explicit(&h->stage_gen, memory_order_relaxed) !=
	    t->gen)
		return;
	for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;)
		if (atomic_load(&b->rows[i].row->waiting) ==
		    TD_FOLLOW_WAIT_ROW)
			td__futex_wake_word(&b->rows[i].row->waiting,
					    TD_FOLLOW_WAIT_ROW);
}

/*
 * Stage sv (td__version_desc_copy's; the stage's from now on, else put
 * back) as the next version of its name on b, with alloc a's buffers: a
 * number, an entry in the bell, STAGED at a word of p's trigger page no
 * other stage of p has (td__peer_trig_slot). *version, *gen and *slot name it
 * (left 0 when not staged; *slot only to a producer that reads it).
 */
static void stage_arm(struct td__peer *p, struct bell *b,
		      const struct td__alloc *a, struct td__version *sv,
		      uint64_t *version, uint32_t *gen, uint32_t *slot)
{
	bool any = p->features & TD_WIRE_FEAT_STAGE_WORD;
	uint32_t e, w = td__peer_trig_slot(
			    p,
			    p->features & TD_WIRE_FEAT_STAGE_SLOT
				    ? td_follow_trig_slot(b->name, b->name_len)
				    : 0,
			    any);
	struct td__trig *t =
		w < TD_FOLLOW_TRIG_SLOTS ? td__peer_trig(p) : NULL;

	/* its words show every follower handed the page: one who may not
	 * read this name (now, after a reload too) sees none of it */
	if (t && !td__shown_may(&t->shown, TD__PERM_READ, b->name,
				b->name_len))
		t = NULL;

	/*
	 * Its metadata lives on the heap as a PUBLISH's does, charged to
	 * p as that is (publish.c, td__pub_heap_bytes) from now on: the commit
	 * adds the loan's planes and cannot fail; a cancel gives it back.
	 * No room for it: not staged (the PUBLISH goes the plain way).
	 */
	if (t && sv->meta_len &&
	    (!td__acct_fits(td__d->store, p->uid, sv->meta_len) ||
	     td__acct_add(td__d->store, p->uid, sv->meta_len) < 0))
		t = NULL;
	if (!t) {
		td__version_put(td__d->store, sv);
		return;
	}
	sv->acct = sv->meta_len;
	/* for the entry; the commit moves the loan's descriptors in */
	sv->nfds = a->count;
	for (uint32_t i = 0; i < a->count; i++)
		sv->fds[i] = (struct td__vfd){.fd = -1, .ro = -1,
					      .buffer_id = a->fds[i].buffer_id,
					      .tracked = true};
	sv->number = td__store_take_version();
	e = entry_write(b, sv);
	if (e == TD_FOLLOW_ENTRY_NONE) {
		td__acct_sub(td__d->store, p->uid, sv->acct);
		td__version_put(td__d->store, sv);
		return;
	}
	b->st = (struct stage){p, a->id, sv, e, w};
	td__peer_stage_add(p, b, a->id, w);
	stages++;
	b->trig_owner = p;
	stage_page_set(b, t);
	atomic_store_explicit(&b->hdr->stage_gen, t->gen,
			      memory_order_relaxed);
	atomic_store_explicit(&b->hdr->stage_slot, b->st.slot,
			      memory_order_relaxed);
	td__trig_named(t, b->st.slot, b->name, b->name_len);
	atomic_store(&t->map[b->st.slot].word,
		     td_follow_trig(sv->number, TD_FOLLOW_TRIG_STAGED));
	atomic_store_explicit(&b->hdr->stage,
			      td_follow_latest_pack(sv->number, e),
			      memory_order_release);
	*version = sv->number;
	*gen = t->gen;
	*slot = any ? w : 0;
	stage_timer_arm();
}

static struct bell *bell_of(const struct td__version *v)
{
	return td__list_empty(&td__bells) ? NULL
				      : td__bell_named(v->name, v->name_len);
}

/* A PUBLISH of p made ver and lends loan a (its reply's stage). */
static void on_offer(struct td__peer *p, const struct td__version *ver,
		     const struct td__alloc *a, uint64_t *version,
		     uint32_t *gen, uint32_t *slot)
{
	struct bell *b = bell_of(ver);
	struct td__version *sv;

	if (p->n_stages == TD__PEER_STAGES || !stage_fits(b, a, ver) ||
	    !(sv = td__version_desc_copy(td__d->store, ver)))
		return;
	stage_arm(p, b, a, sv, version, gen, slot);
}

/* A REWRITE ALLOC takes ver back: its descriptor, if a stage may follow. */
static struct td__version *on_keep(const struct td__version *ver)
{
	const struct bell *b = bell_of(ver);

	return b && b->followers && !b->st.owner
		       ? td__version_desc_copy(td__d->store, ver)
		       : NULL;
}

/* ... and lends its buffers as loan a: staged if it may be (sv goes). */
static void on_takeback(struct td__peer *p, struct td__version *sv,
			const struct td__alloc *a, uint64_t *version,
			uint32_t *gen, uint32_t *slot)
{
	struct bell *b = bell_of(sv);

	if (p->n_stages == TD__PEER_STAGES || !stage_fits(b, a, sv)) {
		td__version_put(td__d->store, sv);
		return;
	}
	stage_arm(p, b, a, sv, version, gen, slot);
}

/* RING_SUBSCRIBE's WAIT flag, in the body FOLLOW and STAGE_PAGE share:
 * refused, with the reply sent */
static bool wait_refused(struct td__peer *p, const struct td_wire_hdr *h,
			 const struct td_wire_ring_sub_req *m)
{
	if (!(m->flags & TD_WIRE_RSUB_WAIT))
		return false;
	td__peer_error(p, h->opcode, h->request_id, -EBADMSG,
		       "flags: unknown bits %#x", (unsigned)TD_WIRE_RSUB_WAIT);
	return true;
}

/* STAGE_PAGE: the name's trigger page, to its producer or a follower. */
void td__stage_page(struct td__peer *p, const struct td__req *rq)
{
	struct td__daemon *d = td__d;
	const struct td_wire_hdr *h = rq->h;
	struct td_wire_ring_sub_req m;
	struct td_err e = {0};
	struct td_wire_follow_rep r = {.layout = TD_FOLLOW_LAYOUT,
				       .fd_count = 1};
	struct td__trig *t = NULL;
	struct bell *b;
	bool follows = false;
	int fd, i;
	int64_t len;
	int rc = td_wire_ring_sub_req_decode(rq->body, h->body_len, &m, &e);

	if (td__peer_bad_body(p, h, rc, &e) || wait_refused(p, h, &m))
		return;
	b = td__bell_named(m.name.ptr, m.name.len);
	for (uint64_t rows = b ? b->used : 0;
	     !follows && (i = td__row_next(&rows)) >= 0;)
		follows = b->rows[i].peer == p;
	/* the producer's own page, to fire through; or, to a follower of
	 * the name, the page of the producer the bell names, to read */
	if (b && b->trig_owner == p)
		t = p->trig;
	else if (b && follows && b->trig_owner) {
		/* a page whose words named what p may not read is renewed
		 * (its stages settled): p sees only stages made after, of
		 * names all it was handed to may read (stage_arm). None: a
		 * renewal its uid had no room for, made here if it fits */
		struct td__trig *old = b->trig_owner->trig;

		if (old && !td__trig_readable(old, p)) {
			td__stage_owner(b->trig_owner, true);
			td__peer_trig_free(b->trig_owner);
		}
		t = td__peer_trig(b->trig_owner);
		if (t)
			td__shown_add(&t->shown, p);
	}
	if (!t) {
		td__peer_error(p, h->opcode, h->request_id, -ENOENT,
			       "STAGE_PAGE: \"%.*s\" has no trigger page for "
			       "this connection",
			       (int)m.name.len, m.name.ptr);
		return;
	}
	fd = b->trig_owner == p ? t->rw : t->ro;
	r.id = t->gen;
	r.fds[0] = (struct td_wire_fdent){fd, 0};
	len = td_wire_follow_rep_encode(&r, TD__TX_BODY(d), TD__TX_CAP);
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
		      len < 0 ? 0 : (size_t)len, &fd,
		      (m.flags & TD_WIRE_REQ_SCM) ? 1 : 0);
	/* by number: p pulls it before its next request (td__trig_linger) */
	p->page_serial = (m.flags & TD_WIRE_REQ_SCM) ? 0 : t->serial;
	p->page_mark = p->requests;
}

/* ---- bells and rows ---- */

static void bell_free(struct bell *b)
{
	td__shown_fini(&b->shown);
	td__list_del(&b->link);
	td__bell_count--;
	munmap(b->hdr, TD_FOLLOW_BELL_LEN);
	close(b->fd_rw);
	if (b->fd_ro >= 0) /* -1: it lingers (td__follow_linger) */
		close(b->fd_ro);
	free(b);
}

static struct bell *bell_new(struct td_wire_str name, const char **why)
{
	struct bell *b = calloc(1, sizeof(*b));
	void *p;

	if (!b) {
		*why = "out of memory";
		return NULL;
	}
	b->fd_ro = -1;
	b->fd_rw = td__memfd_new("tensord-follow", TD_FOLLOW_BELL_LEN,
				 CTL_MEMFD, why);
	if (b->fd_rw < 0)
		goto fail;
	b->fd_ro = td__reopen_ro(b->fd_rw);
	if (b->fd_ro < 0) {
		*why = "cannot reopen the memfd read-only (is /proc mounted?)";
		goto fail;
	}
	p = mmap(NULL, TD_FOLLOW_BELL_LEN, PROT_READ | PROT_WRITE, MAP_SHARED,
		 b->fd_rw, 0);
	if (p == MAP_FAILED) {
		*why = "cannot map the bell";
		goto fail;
	}
	b->hdr = p;
	b->hdr->magic = TD_FOLLOW_MAGIC;
	b->hdr->layout = TD_FOLLOW_LAYOUT;
	b->hdr->entry_count = TD_FOLLOW_ENTRIES;
	b->hdr->entry_len = TD_FOLLOW_ENTRY_LEN;
	b->name_len = name.len;
	memcpy(b->name, name.ptr, name.len);
	td__list_add_tail(&td__bells, &b->link);
	td__bell_count++;
	return b;
fail:
	if (b->fd_rw >= 0)
		close(b->fd_rw);
	if (b->fd_ro >= 0)
		close(b->fd_ro);
	free(b);
	return NULL;
}

/*
 * The last follower of uid left b: the bell's descriptors count against
 * a remaining follower's uid from now on (it may go over its limit by
 * those two; they stay where they were if its count cannot be had).
 */
static void bell_recharge(struct bell *b, uid_t gone)
{
	const struct td__peer *p = NULL;
	int i;

	for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;) {
		if (b->rows[i].peer->uid == gone)
			return;
		p = b->rows[i].peer;
	}
	if (p && td__tenant_add(p->uid, TD__LIM_FDS, BELL_FDS) == 0) {
		td__tenant_sub(gone, TD__LIM_FDS, BELL_FDS);
		b->uid = p->uid;
	}
}

/*
 * A follower leaves: its hold, its row, the bell when it was the last
 * (true: b is freed).
 */
static bool follower_end(struct bell *b, struct follower *f)
{
	uid_t uid = f->peer->uid;

	if (f->held)
		hold_drop(b, f);
	if (f->cover)
		td__follow_cover_end(f);
	td__tenant_sub(uid, TD__LIM_PINNED, f->cur_pin);
	munmap(f->row, TD_FOLLOW_ROW_LEN);
	if (f->row_fd >= 0) /* -1: it lingers (td__follow_linger) */
		close(f->row_fd);
	/* a row fd that lingers stays counted (follow-linger.c) */
	td__tenant_sub(uid, TD__LIM_FDS, (f->row_fd >= 0) + (f->wake_fd >= 0));
	if (f->wake_fd >= 0)
		close(f->wake_fd);
	*f = (struct follower){.row_fd = -1, .wake_fd = -1};
	b->used &= ~row_bit(b, f);
	if (--b->followers) {
		atomic_store_explicit(&b->hdr->followers, b->followers,
				      memory_order_relaxed);
		if (b->uid == uid)
			bell_recharge(b, uid);
		return false;
	}
	/* nobody left to take a stage: it goes (or, fired, is committed,
	 * which writes this bell still) */
	if (b->st.owner)
		stage_settle(b, true);
	td__tenant_sub(b->uid, TD__LIM_FDS, BELL_FDS);
	bell_free(b);
	return true;
}

static int row_make(struct follower *f, const char **why)
{
	void *p;

	f->row_fd = td__memfd_new("tensord-follow-row", TD_FOLLOW_ROW_LEN,
				  CTL_MEMFD, why);
	if (f->row_fd < 0)
		return f->row_fd;
	p = mmap(NULL, TD_FOLLOW_ROW_LEN, PROT_READ | PROT_WRITE, MAP_SHARED,
		 f->row_fd, 0);
	if (p == MAP_FAILED) {
		*why = "cannot map the row";
		close(f->row_fd);
		f->row_fd = -1;
		return -ENOMEM;
	}
	f->row = p;
	atomic_store(&f->row->held, TD_FOLLOW_NONE);
	atomic_store(&f->row->waiting, 0);
	return 0;
}

/* ---- requests ---- */

static void reply_follow(struct td__peer *p, const struct td_wire_hdr *h,
			 uint32_t req_flags, const struct bell *b,
			 const struct follower *f)
{
	struct td__daemon *d = td__d;
	int fds[TD_WIRE_FOLLOW_FDS] = {b->fd_ro, f->row_fd};
	struct td_wire_follow_rep m = {
		.id = f->id,
		.entry_count = TD_FOLLOW_ENTRIES,
		.layout = TD_FOLLOW_LAYOUT,
		.fd_count = TD_WIRE_FOLLOW_FDS,
		.fds = {{fds[0], 0}, {fds[1], 0}},
	};
	int64_t len = td_wire_follow_rep_encode(&m, TD__TX_BODY(d),
						TD__TX_CAP);

	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
		      len < 0 ? 0 : (size_t)len, fds,
		      (req_flags & TD_WIRE_REQ_SCM) ? TD_WIRE_FOLLOW_FDS : 0);
}

void td__follow(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	struct td_wire_ring_sub_req m;
	struct td_err e = {0};
	const char *why = NULL;
	struct follower *f = NULL;
	struct bell *b;
	bool fresh = false;
	unsigned fds = 1;
	uint64_t free_rows; /* the rows not in use */
	int rc = td_wire_ring_sub_req_decode(rq->body, h->body_len, &m, &e);

	if (td__peer_bad_body(p, h, rc, &e) || wait_refused(p, h, &m))
		return;
	if (!td__access_check(p, h, rq->op->perm, m.name) ||
	    td__follow_admit(p, h, m.name, m.flags & TD_WIRE_FOLLOW_SPARE) < 0)
		return;
	b = td__bell_named(m.name.ptr, m.name.len);
	if (!b) {
		b = bell_new(m.name, &why);
		if (!b) {
			td__peer_error(p, h->opcode, h->request_id, -ENOMEM,
				       "FOLLOW: %s", why);
			return;
		}
		b->uid = p->uid;
		b->spare = m.flags & TD_WIRE_FOLLOW_SPARE;
		fresh = true;
		fds += BELL_FDS;
	}
	free_rows = ~b->used & ROWS_ALL;
	if (free_rows)
		f = &b->rows[__builtin_ctzll(free_rows)];
	if (!f) {
		td__peer_error(p, h->opcode, h->request_id, -EBUSY,
			       "\"%.*s\" has all its %u follower rows in use",
			       (int)m.name.len, m.name.ptr,
			       TD_FOLLOW_MAX_ROWS);
		return;
	}
	rc = row_make(f, &why);
	if (rc < 0 || td__tenant_add(p->uid, TD__LIM_FDS, fds) < 0) {
		if (rc == 0) {
			munmap(f->row, TD_FOLLOW_ROW_LEN);
			close(f->row_fd);
			f->row_fd = -1;
		}
		if (fresh)
			bell_free(b);
		td__peer_error(p, h->opcode, h->request_id, -ENOMEM,
			       "FOLLOW: %s", why ? why : "out of memory");
		return;
	}
	f->peer = p;
	b->used |= row_bit(b, f);
	f->id = next_id++;
	f->wake_fd = -1;
	f->spare = m.flags & TD_WIRE_FOLLOW_SPARE;
	f->by_number = !(m.flags & TD_WIRE_REQ_SCM);
	f->req_mark = p->requests;
	/* the current version's bytes (td__follow_admit found room) */
	f->cur_pin = td__follow_pin(b->cur_v, p->uid);
	(void)td__tenant_add(p->uid, TD__LIM_PINNED, f->cur_pin);
	b->followers++;
	atomic_store_explicit(&b->hdr->followers, b->followers,
			      memory_order_relaxed);
	if (fresh) {
		struct td__version *cur =
			td__name_lookup(td__d->store, m.name);

		if (cur)
			bell_set(b, cur, NULL, false);
	}
	/* a GET lease its uid holds of the current version counts once
	 * (td__follow_admit left room for the version, less that lease) */
	td__follow_cover_lease(f, b->cur_v, f->cur_pin);
	td__shown_add(&b->shown, p);
	reply_follow(p, h, m.flags, b, f);
}

/* p's follow with that id, or NULL (*bp its bell). */
static struct follower *follower_of(struct td__peer *p, uint64_t id,
				    struct bell **bp)
{
	for (struct td__list *l = td__bells.next; l != &td__bells;
	     l = l->next) {
		struct bell *b = td__container_of(l, struct bell, link);
		int i;

		for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;)
			if (b->rows[i].peer == p && b->rows[i].id == id) {
				*bp = b;
				return &b->rows[i];
			}
	}
	return NULL;
}

void td__follow_close(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	struct td_wire_ring_close_req m;
	struct td_err e = {0};
	struct follower *f;
	struct bell *b;
	int rc = td_wire_ring_close_req_decode(rq->body, h->body_len, &m, &e);

	if (td__peer_bad_body(p, h, rc, &e))
		return;
	f = follower_of(p, m.id, &b);
	if (!f) {
		td__peer_error(p, h->opcode, h->request_id, -ENOENT,
			       "no follow %llu on this connection",
			       (unsigned long long)m.id);
		return;
	}
	follower_end(b, f);
	td__peer_done(p, h);
}

void td__follow_wake(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	struct td_wire_ring_close_req m;
	struct td_err e = {0};
	struct follower *f;
	struct bell *b;
	char lim[256];
	int rc = td_wire_ring_close_req_decode(rq->body, h->body_len, &m, &e);

	if (td__peer_bad_body(p, h, rc, &e))
		goto out;
	f = follower_of(p, m.id, &b);
	if (!f) {
		td__peer_error(p, h->opcode, h->request_id, -ENOENT,
			       "FOLLOW_WAKE: no follow %llu on this "
			       "connection", (unsigned long long)m.id);
		goto out;
	}
	/* not an eventfd: its holder could make it blocking and fill it,
	 * and the daemon's write would then block (td__timerfd_fire) */
	if (rq->nfds != 1 || !td__is_timerfd(rq->fds[0])) {
		td__peer_error(p, h->opcode, h->request_id, -EINVAL,
			       "FOLLOW_WAKE attaches exactly one timerfd");
		goto out;
	}
	if (f->wake_fd < 0) {
		rc = td__tenant_check(p->uid, TD__LIM_FDS, 1, lim,
				      sizeof(lim));
		if (rc == 0)
			rc = td__tenant_add(p->uid, TD__LIM_FDS, 1);
		if (rc < 0) {
			td__peer_error(p, h->opcode, h->request_id, rc,
				       "FOLLOW_WAKE: %s", lim);
			goto out;
		}
	} else {
		close(f->wake_fd);
	}
	f->wake_fd = rq->fds[0];
	rq->fds[0] = -1;
	td__peer_done(p, h);
out:
	/* what was attached and not kept (a kept fd is -1 now) */
	td__close_fds(rq->fds, rq->nfds);
}

void td__follow_peer_gone(struct td__peer *p)
{
	struct td__list *l, *n;

	for (l = td__bells.next; l != &td__bells; l = n) {
		struct bell *b = td__container_of(l, struct bell, link);
		int i;

		n = l->next;
		/* its page goes with it (below) */
		if (b->trig_owner == p)
			b->trig_owner = NULL;
		/* the rows in use when the walk began: one ended is not
		 * looked at again, and the bell's end ends the walk */
		for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;)
			if (b->rows[i].peer == p &&
			    follower_end(b, &b->rows[i]))
				break;
	}
	td__peer_trig_free(p);
}

/*
 * A policy reload took read of b's name from a connection its bell was
 * shown to. The bell goes on showing every version's reply (blob, user
 * metadata) to whoever maps it, and a mapping cannot be taken back: every
 * follow of the name ends, and the next FOLLOW makes a new bell. Each
 * row says why before it is woken (`ended`): EACCES to a follower that may
 * no longer read the name, ESTALE ("follow it again") to the others. A
 * library that cannot read it (no TD_WIRE_FEAT_FOLLOW_END) would sleep
 * on a bell nobody writes: its connection is closed instead. A follower
 * may still read the version its row holds (a tensor not released yet),
 * which its end lets go: that version's buffers are lent no more, so no
 * loan writes into what it reads (td__loan_unheld).
 */
static void bell_end(struct bell *b)
{
	struct td__version *cur = td__name_lookup(
		td__d->store, (struct td_wire_str){b->name, b->name_len});
	int i;

	td__log(TD_LOG_WARN, "followed name \"%.*s\": its %u follows ended: "
		"the reloaded policy lets a uid its bell was shown to read it "
		"no more", (int)b->name_len, b->name, b->followers);
	for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;) {
		struct follower *f = &b->rows[i];
		bool may = td__access_may(f->peer, TD__PERM_READ, b->name,
					  b->name_len);

		if (!(f->peer->features & TD_WIRE_FEAT_FOLLOW_END))
			td__peer_kill(f->peer, "a follow a policy reload "
				      "ended, which its library cannot be "
				      "told of");
		atomic_store(&f->row->ended, may ? ESTALE : EACCES);
	}
	/* `latest` moves: a follower that stores its hold from now on
	 * finds it moved when it looks again, and then `ended` */
	atomic_store(&b->hdr->latest, 0);
	/* after `ended` and `latest`, before `waiting` and `held` are read
	 * (Dekker with a sleeper's store of `waiting` and look at seq, and
	 * with a hold's store and look at `latest`) */
	atomic_fetch_add(&b->hdr->seq, 1);
	bell_wake(b, 0);
	for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;) {
		const struct follower *f = &b->rows[i];
		uint64_t h = atomic_load(&f->row->held);

		if (f->held && f->held->number == h)
			td__loan_unheld(f->held);
		else if (cur && cur->number == h)
			td__loan_unheld(cur);
	}
	td__follow_linger(b);
	for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;)
		if (follower_end(b, &b->rows[i]))
			break;
}

void td__follow_policy_changed(void)
{
	for (struct td__list *l = td__bells.next, *n; l != &td__bells;
	     l = n) {
		struct bell *b = td__container_of(l, struct bell, link);

		n = l->next;
		if (!td__shown_may(&b->shown, TD__PERM_READ, b->name,
				   b->name_len))
			bell_end(b);
	}
}

void td__follow_peer_held(const struct td__peer *p, uint32_t *n,
			  uint64_t *bytes)
{
	*n += p->follow_holds;
	*bytes += p->follow_held_bytes;
}

void td__follow_init(void)
{
	static const struct td__store_bell hooks = {
		on_changed, on_pins, on_sweep, on_settle,
		on_offer,   on_keep, on_takeback};

	uv_timer_init(td__d->loop, &stage_timer);
	uv_unref((uv_handle_t *)&stage_timer);
	td__store_bell_set(&hooks);
}
