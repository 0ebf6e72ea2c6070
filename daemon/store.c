/* SPDX-License-Identifier: MIT */
/*
 * The store: names -> current version, the versions themselves and what
 * they hold (descriptors, buffer ids, recycled buffers waiting for their
 * producer), their lifetime, eviction and the events watchers get. The
 * requests on it are served by loan.c, lease.c, publish.c and catalog.c
 * (store.h); nothing here calls them.
 */
#include "store.h"
#include "snapshot.h" /* td__store_snap_hold */

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

/* ---- persistence's hooks (sd.h, struct td__store_keeper) ---- */

static const struct td__store_keeper *keeper;

void td__store_keeper_set(const struct td__store_keeper *k)
{
	keeper = k;
}

uint64_t td__store_fd_kept(const struct td__vfd *f)
{
	return keeper ? keeper->fd_add(f->fd, f->tracked, f->dev, f->ino) : 0;
}

int td__store_fd_adopt(uint64_t id, const struct td__vfd *f)
{
	return keeper ? keeper->fd_adopt(id, f->fd, f->tracked, f->dev, f->ino)
		      : -ENOENT;
}

static void fd_drop(uint64_t id)
{
	if (keeper)
		keeper->fd_drop(id);
}

void td__store_changed(const char *name, size_t len)
{
	if (keeper)
		keeper->changed(name, len);
}

/* ---- followed names' hooks (follow.c, struct td__store_bell) ---- */

static const struct td__store_bell *bell;

void td__store_bell_set(const struct td__store_bell *b)
{
	bell = b;
}

static bool bell_pins(const struct td__version *v)
{
	return bell && v && bell->pins(v);
}

bool td__version_pinned(const struct td__version *v)
{
	return bell_pins(v);
}

/* ---- a rewrite that ended without its publish (lease.c's hook) ---- */

static td__store_rewrite_fn *rewrite_hook;

void td__store_rewrite_hook_set(td__store_rewrite_fn *fn)
{
	rewrite_hook = fn;
}

void td__store_rewrite_over(struct td__store *s, const char *name,
			    uint16_t len)
{
	if (rewrite_hook)
		rewrite_hook(s, name, len);
}

/* ---- buffer ids and the descriptors of versions ---- */

/* Take ownership of fd as a stored plane (tracked) or fence. */
void td__vfd_set(struct td__store *s, struct td__vfd *f, int fd, bool plane,
		 uid_t uid)
{
	struct stat st;

	f->fd = fd;
	f->ro = -1;
	f->uid = uid;
	f->exposed = false;
	f->shown = false;
	f->unheld = false;
	f->carried = 0;
	f->mixed = false;
	td__tenant_add(uid, TD__LIM_FDS, 1);
	f->size = 0;
	f->file_len = 0;
	f->tracked = false;
	if (plane && fstat(fd, &st) == 0) {
		f->file_len = st.st_size > 0 ? (uint64_t)st.st_size : 0;
		f->dev = st.st_dev;
		f->ino = st.st_ino;
		f->tracked = true;
		f->buffer_id = td__buf_ref(s, st.st_dev, st.st_ino);
		return;
	}
	/* fences share one anonymous inode: never a shared id */
	f->buffer_id = s->next_buf++;
}

void td__vfd_close(struct td__store *s, struct td__vfd *f)
{
	if (f->ro >= 0) {
		close(f->ro);
		td__tenant_sub(f->uid, TD__LIM_FDS, 1);
	}
	f->ro = -1;
	if (f->fd < 0)
		return;
	td__tenant_sub(f->uid, TD__LIM_FDS, 1);
	if (f->tracked)
		td__buf_unref(s, f->dev, f->ino);
	if (f->sid)
		fd_drop(f->sid);
	f->sid = 0;
	/* a big plane's pages may be freed by this close: not on the loop */
	td__closer_close(f->fd, f->size ? f->size : f->file_len);
	f->fd = -1;
}

/* Move src (its fds, its buffer-table reference) into dst. */
void td__vfd_move(struct td__vfd *dst, struct td__vfd *src)
{
	*dst = *src;
	src->fd = src->ro = -1;
	src->sid = 0;
}

/* What consumers get: the read-only reopen of a recyclable buffer. */
int td__vfd_out(const struct td__vfd *f)
{
	return f->ro >= 0 ? f->ro : f->fd;
}
/* ---- recycled buffers (docs/fastpath.md, "Recycled loans") ---- */

void td__freebuf_drop(struct td__store *s, struct td__freebuf *fb)
{
	td__list_del(&fb->link);
	td__list_del(&fb->slink);
	fb->peer->n_freebufs--;
	td__acct_sub(s, fb->uid, fb->f.size);
	td__fence_drop(&fb->fence, fb->uid);
	td__vfd_close(s, &fb->f);
	TD__SPARE_PUT(&s->spare_freebufs, fb, struct td__freebuf, link);
}


/*
 * A recyclable buffer of a version that is gone (retired, unleased): back
 * to its producer's connection, charged to uid again, when that
 * connection is alive and the bytes fit the limits (the oldest of its
 * free list makes way beyond TD__MAX_FREEBUFS); otherwise closed. f is
 * consumed either way.
 */
void td__freebuf_keep(struct td__store *s, struct td__peer *p, uid_t uid,
		      struct td__vfd *f, struct td_wire_str name, int fence)
{
	struct td__freebuf *fb = NULL;

	if (p && !p->dead && p->n_freebufs >= TD__MAX_FREEBUFS)
		td__freebuf_drop(s, td__container_of(p->freebufs.next,
						 struct td__freebuf, link));
	/* an exposed buffer bound to no name, one shown before a policy
	 * reload, or one a follower reads unheld, is lent to nobody again
	 * (loan.c, lendable) */
	if (!p || p->dead || (f->exposed && !name.len) || f->unheld ||
	    (f->shown && f->shown_at != td__d->stats.policy_reloads) ||
	    !td__acct_fits(s, uid, f->size) ||
	    !(fb = TD__SPARE_NEW(&s->spare_freebufs, struct td__freebuf,
				 link)) ||
	    td__acct_add(s, uid, f->size) < 0) {
		if (fb)
			TD__SPARE_PUT(&s->spare_freebufs, fb,
				      struct td__freebuf, link);
		td__fence_drop(&fence, uid);
		td__vfd_close(s, f);
		return;
	}
	/* recyclable versions are never in the fd store (restart) */
	if (f->sid)
		fd_drop(f->sid);
	f->sid = 0;
	td__vfd_move(&fb->f, f);
	fb->peer = p;
	fb->uid = uid;
	fb->fence = fence;
	fb->name_len = fb->f.exposed ? (uint16_t)name.len : 0;
	if (fb->name_len)
		memcpy(fb->name, name.ptr, name.len);
	td__list_add_tail(&p->freebufs, &fb->link);
	td__list_add_tail(&s->freebufs, &fb->slink);
	p->n_freebufs++;
}

/* ---- versions and names ---- */

void td__version_unref(struct td__store *s, struct td__version *v)
{
	int fence[TD__TABLE_MAX];

	if (--v->refs)
		return;
	/* a leased version never gets here: its bytes stayed intact. A
	 * pending fence: a device may still write them, so each recyclable
	 * buffer keeps a descriptor of it and is lent once it signalled
	 * (-2: none could be made, the buffer is closed) */
	for (uint32_t i = 0; i < v->nfds; i++)
		fence[i] = v->fds[i].ro >= 0 ? td__fence_hold(v, v->uid) : -1;
	td__fence_forget(v); /* out of the watched set before its close */
	for (uint32_t i = 0; i < v->nfds; i++)
		if (v->fds[i].ro < 0)
			td__vfd_close(s, &v->fds[i]);
	if (v->unowned)
		s->total -= v->acct; /* uid's count let go at retire */
	else
		td__acct_sub(s, v->uid, v->acct);
	for (uint32_t i = 0; i < v->nfds; i++)
		if (v->fds[i].fd >= 0 && fence[i] == -2)
			td__vfd_close(s, &v->fds[i]);
		else if (v->fds[i].fd >= 0)
			td__freebuf_keep(s, v->owner, v->uid, &v->fds[i],
					 (struct td_wire_str){v->name,
							      v->name_len},
					 fence[i]);
	td__list_del(&v->all);
	td__log(TD_LOG_DEBUG, "freed %.*s version %llu", (int)v->name_len,
		v->name, (unsigned long long)v->number);
	td__version_put(s, v);
}

void td__version_retire(struct td__store *s, struct td__version *v)
{
	if (v->lease_count && v->foreign_leases == v->lease_count &&
	    !v->unowned) {
		td__acct_sub_uid(s, v->uid, v->acct);
		v->unowned = true;
	}
}

int td__name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

/* Index of the first name >= key (exact match when *found). */
size_t td__name_find(const struct td__store *s, const char *key,
			size_t len, bool *found)
{
	size_t lo = 0, hi = s->count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct td__version *v = s->names[mid];

		if (td__name_cmp(v->name, v->name_len, key, len) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < s->count && td__name_cmp(s->names[lo]->name,
					   s->names[lo]->name_len, key,
					   len) == 0;
	return lo;
}

/*
 * A version replaced or deleted but kept alive by a lease: GET EXACT may
 * take another lease on it (same bytes, still immutable).
 */
struct td__version *td__version_retired(struct td__store *s,
					struct td_wire_str n, uint64_t number)
{
	for (struct td__list *l = s->versions.next; l != &s->versions;
	     l = l->next) {
		struct td__version *v =
			td__container_of(l, struct td__version, all);

		if (v->number == number && v->name_len == n.len &&
		    memcmp(v->name, n.ptr, n.len) == 0)
			return v;
	}
	return NULL;
}

struct td__version *td__name_lookup(struct td__store *s, struct td_wire_str n)
{
	bool found;
	size_t i = td__name_find(s, n.ptr, n.len, &found);

	return found ? s->names[i] : NULL;
}

/* ---- watchers' events (WATCH itself is catalog.c) ---- */

uint64_t td__name_tag(const struct td__store *s, struct td_wire_str name)
{
	/* another seed than the buckets' (their low bits are public) */
	return XXH3_64bits_withSeed(name.ptr, name.len, ~s->name_seed) | 1;
}

void td__vfd_carry(const struct td__store *s, struct td__vfd *f,
		   struct td_wire_str name)
{
	uint64_t tag = td__name_tag(s, name);

	if (!f->carried)
		f->carried = tag;
	else if (f->carried != tag)
		f->mixed = true;
}

struct td__list *td__name_bucket(struct td__store *s, struct td__list *table,
				 const char *name, size_t len)
{
	uint64_t h = XXH3_64bits_withSeed(name, len, s->name_seed);

	return &table[h & (TD__WAIT_BUCKETS - 1)];
}

void td__watch_add(struct td__store *s, struct td__watch *w)
{
	td__list_add_tail(td__name_bucket(s, s->watch_buckets, w->name, w->len),
			  &w->slink);
	if (w->prefix)
		s->prefix_lens[w->len]++;
}

void td__watch_del(struct td__store *s, struct td__watch *w)
{
	td__list_del(&w->slink);
	if (w->prefix)
		s->prefix_lens[w->len]--;
}

void td__notify(struct td__store *s, uint32_t event,
		   const struct td__version *v)
{
	td__notify_name(s, event, (struct td_wire_str){v->name, v->name_len},
			v->number);
}

/* The watches of bucket b that match name through its first k bytes:
 * prefix watches of length k, and at k = name.len exact ones too. */
static void notify_bucket(struct td__store *s, struct td__list *b, size_t k,
			  uint32_t event, struct td_wire_str name,
			  uint64_t number)
{
	for (struct td__list *l = b->next; l != b; l = l->next) {
		struct td__watch *w =
			td__container_of(l, struct td__watch, slink);
		struct td_wire_notify n = {w->id, event, number, name};
		int64_t len;

		if (w->len != k || (!w->prefix && k != name.len) ||
		    memcmp(w->name, name.ptr, k) != 0 || w->peer->dead ||
		    !td__access_may(w->peer, TD__PERM_READ, name.ptr,
				    name.len))
			continue;
		len = td_wire_notify_encode(&n, TD__TX_BODY(s->d), TD__TX_CAP);
		if (len >= 0)
			td__peer_send(w->peer, TD_OP_NOTIFY, TD_WIRE_F_NOTIFY,
				      0, 0, (size_t)len, NULL, 0);
	}
}

void td__notify_name(struct td__store *s, uint32_t event,
		     struct td_wire_str name, uint64_t number)
{
	/* the prefixes some prefix watch has the length of, then the name */
	for (size_t k = 0; k <= name.len; k++)
		if (k == name.len || s->prefix_lens[k])
			notify_bucket(s,
				      td__name_bucket(s, s->watch_buckets,
						      name.ptr, k),
				      k, event, name, number);
}
void td__store_settle(const char *name, size_t len)
{
	if (bell)
		bell->settle(name, len, true);
}

void td__store_stage_offer(struct td__peer *p, const struct td__version *ver,
			   const struct td__alloc *a, uint64_t *version,
			   uint32_t *gen, uint32_t *slot)
{
	if (bell)
		bell->offer(p, ver, a, version, gen, slot);
}

struct td__version *td__store_stage_keep(const struct td__version *ver)
{
	return bell ? bell->keep(ver) : NULL;
}

void td__store_stage_takeback(struct td__peer *p, struct td__version *sv,
			      const struct td__alloc *a, uint64_t *version,
			      uint32_t *gen, uint32_t *slot)
{
	if (bell)
		bell->takeback(p, sv, a, version, gen, slot);
	else
		td__version_put(td__d->store, sv);
}

bool td__store_name_taken(struct td_wire_str name)
{
	td__store_settle(name.ptr, name.len);
	return td__name_lookup(td__d->store, name) != NULL;
}

void td__store_no_ring(struct td__peer *p, const struct td_wire_hdr *h,
		       struct td_wire_str name, bool subscribe)
{
	if (subscribe && td__store_name_taken(name))
		td__peer_error(p, h->opcode, h->request_id, -EINVAL,
			       "\"%.*s\" is a tensor, not a ring: get or "
			       "follow it", (int)name.len, name.ptr);
	else
		td__peer_error(p, h->opcode, h->request_id, -ENOENT,
			       "no ring named \"%.*s\"", (int)name.len,
			       name.ptr);
}

/* ---- the sorted name table ---- */

void *td__table_room(void *a, size_t count, size_t *cap, size_t size)
{
	size_t n = *cap ? *cap * 2 : 64;
	void *b;

	if (count < *cap)
		return a;
	b = realloc(a, n * size);
	if (b)
		*cap = n;
	return b;
}

int td__name_reserve_n(struct td__store *s, size_t n)
{
	while (s->count + n > s->cap) {
		struct td__version **t = td__table_room(s->names, s->cap,
							 &s->cap, sizeof(*t));

		if (!t)
			return -ENOMEM;
		s->names = t;
	}
	return 0;
}

int td__name_reserve(struct td__store *s)
{
	struct td__version **n =
		td__table_room(s->names, s->count, &s->cap, sizeof(*n));

	if (!n)
		return -ENOMEM;
	s->names = n;
	return 0;
}

/*
 * A change of v's name in names[]: the HTTP store's kept node names are
 * made again only when it is a name they could hold, one under
 * --http-prefix (a stream outside it walks nothing).
 */
static void names_changed(struct td__store *s, const struct td__version *v)
{
	const char *pre = s->d ? s->d->opts.http_prefix : NULL;
	size_t n = pre ? strlen(pre) : 0;

	if (pre && v->name_len >= n && !memcmp(v->name, pre, n))
		s->names_gen++;
}

struct td__version *td__name_set(struct td__store *s, struct td__version *v)
{
	bool found;
	size_t at = td__name_find(s, v->name, v->name_len, &found);
	struct td__version *old = found ? s->names[at] : NULL;

	if (!found) {
		memmove(&s->names[at + 1], &s->names[at],
			(s->count - at) * sizeof(*s->names));
		s->count++;
	}
	s->names[at] = v;
	names_changed(s, v);
	td__acct_pin(s, v, true);
	if (old) {
		td__acct_pin(s, old, false);
		td__lru_del(old);
	}
	td__lru_del(v); /* never listed twice, whatever came before */
	td__lru_add(&s->lru_order, v);
	if (bell)
		bell->changed(v, old, false);
	return old;
}

static void name_drop(struct td__store *s, const struct td__version *v,
		      bool quiet)
{
	bool found;
	size_t at = td__name_find(s, v->name, v->name_len, &found);

	if (!found || s->names[at] != v)
		return;
	memmove(&s->names[at], &s->names[at + 1],
		(s->count - at - 1) * sizeof(*s->names));
	s->count--;
	names_changed(s, v);
	td__acct_pin(s, (struct td__version *)v, false);
	td__lru_del((struct td__version *)v);
	if (bell)
		bell->changed(NULL, (struct td__version *)v, quiet);
}

void td__name_remove(struct td__store *s, const struct td__version *v)
{
	name_drop(s, v, false);
}

void td__name_withdraw(struct td__store *s, const struct td__version *v)
{
	name_drop(s, v, true);
}

/* ---- eviction (quota.c counts the bytes, this picks what goes) ---- */

/*
 * The bytes in use for make_room: in all (*total) and uid's (*mine),
 * less what `old` (the version a PUBLISH replaces) frees for sure.
 */
static void room_count(struct td__store *s, uid_t uid,
		       const struct td__version *const *olds, size_t nold,
		       uint64_t *total, uint64_t *mine)
{
	*total = s->total;
	*mine = td__acct_bytes(s, uid);
	for (size_t i = 0; i < nold; i++) {
		const struct td__version *old = olds[i];

		/* a followed version held right now stays counted */
		if (!old || bell_pins(old)) {
			/* nothing freed for sure */
		} else if (old->refs == 1) {
			*total -= old->acct;
			if (old->uid == uid && !old->unowned)
				*mine -= old->acct;
		} else if (old->uid == uid && !old->unowned &&
			   old->foreign_leases == old->lease_count) {
			*mine -= old->acct; /* it leaves uid's count (retire) */
		}
	}
}

static bool is_old(const struct td__version *v,
		   const struct td__version *const *olds, size_t nold)
{
	for (size_t i = 0; i < nold; i++)
		if (olds[i] == v)
			return true;
	return false;
}

/* May make_room evict v for uid at all (leases, pins, followers, the
 * versions a PUBLISH replaces)? Nothing in one make_room call changes
 * it but the picks themselves (v->evict). */
static bool lru_may(const struct td__version *v,
		    const struct td__version *const *olds, size_t nold)
{
	return !is_old(v, olds, nold) && !v->evict && v->refs == 1 &&
	       !bell_pins(v) && !(v->flags & TD_WIRE_PUB_PIN);
}

/* And for this uid now: whose bytes it frees may be taken. */
static bool lru_fair(struct td__store *s, const struct td__version *v,
		     uid_t uid, bool over_uid, uint64_t fair)
{
	/* a restored version is no uid's (fdstore, snapshot): it counts in
	 * --max-bytes only, so it makes room there for anyone and in no
	 * uid's quota */
	return v->unowned ? !over_uid
			  : td__acct_evictable(s, v->uid, uid, over_uid, fair);
}

/* One make_room call's walk down s->lru_order: where it is, and the
 * over_uid it walked with. */
struct lru_run {
	struct td__list *at;
	bool over_uid;
};

/*
 * The least recently used version make_room may evict for uid, NULL
 * none: the next on s->lru_order it may take. One passed by as not
 * fair to take stays unfair for the rest of the call (a uid's picked
 * bytes only grow) while over_uid stays as it is; over_uid only goes
 * from true to false (uid's bytes only fall), which can make more
 * fair, so the walk starts again from the head then, once.
 */
static struct td__version *lru_next(struct td__store *s, struct lru_run *r,
				    uid_t uid,
				    const struct td__version *const *olds,
				    size_t nold, bool over_uid, uint64_t fair)
{
	if (!r->at || r->over_uid != over_uid) {
		r->at = s->lru_order.next;
		r->over_uid = over_uid;
	}
	for (; r->at != &s->lru_order; r->at = r->at->next) {
		struct td__version *v =
			td__container_of(r->at, struct td__version, lru);

		td__d->stats.visits++;
		if (lru_may(v, olds, nold) &&
		    lru_fair(s, v, uid, over_uid, fair)) {
			r->at = r->at->next;
			return v;
		}
	}
	return NULL;
}

/*
 * Unpick the `picked` versions make_room picked (v->evict), and evict
 * them unless `keep` (a dry run, or not room enough). They lie on
 * s->lru_order before where lru_next stopped: the walk from its head
 * ends with the last of them. (Every PUBLISH and ALLOC makes room, most
 * with room to spare: then it walks nothing.)
 */
static void evict_picked(struct td__store *s, uid_t uid, size_t picked,
			 bool keep)
{
	for (struct td__list *l = s->lru_order.next, *n;
	     picked && l != &s->lru_order; l = n) {
		struct td__version *v =
			td__container_of(l, struct td__version, lru);

		n = l->next;
		td__d->stats.visits++;
		if (!v->evict)
			continue;
		v->evict = false;
		picked--;
		if (keep)
			continue;
		td__d->stats.evictions++;
		td__log(TD_LOG_INFO,
			"evicted %.*s version %llu (%llu bytes of uid %u) "
			"for uid %u",
			(int)v->name_len, v->name,
			(unsigned long long)v->number,
			(unsigned long long)v->acct, (unsigned)v->uid,
			(unsigned)uid);
		td__name_remove(s, v); /* off s->lru_order too */
		/* the set of current versions changed */
		td__store_changed(v->name, v->name_len);
		td__notify(s, TD_EVENT_DELETED, v);
		/* its recyclable buffers close: back on a free list they
		 * would be charged again, and no room made (refs is 1) */
		v->owner = NULL;
		td__version_unref(s, v);
	}
}

/*
 * Room for `add` more bytes charged to uid, under --max-bytes and uid's
 * quota. `old` is the version a PUBLISH replaces: it goes anyway, so its
 * bytes count as free when nobody leases it, and it is never picked.
 * Otherwise the least recently used versions that nobody leases and
 * nobody pinned are evicted: only uid's own when uid's quota is short;
 * for --max-bytes also those of uids above a fair share of it, until
 * they are down to it (td__acct_evictable, docs/policy.md §4) -
 * with `dry` only picked and unpicked, so a PUBLISH can check before it
 * seals and evict after. 0, or -ENOSPC/-EDQUOT with *why filled.
 */
int td__store_make_room(struct td__store *s, uid_t uid, uint64_t add,
			const struct td__version *old, bool dry,
			struct td__room *why)
{
	return td__store_make_room_many(s, uid, add, &old, 1, dry, why);
}

int td__store_make_room_many(struct td__store *s, uid_t uid, uint64_t add,
			     const struct td__version *const *olds,
			     size_t nold, bool dry, struct td__room *why)
{
	/* uids but root and the daemon's stop short of the byte reserve */
	uint64_t max = td__acct_cap(s, uid);
	uint64_t qmax = td__tenant_quota(uid);
	uint64_t total, mine, fair;
	struct lru_run run = {0};
	size_t picked = 0; /* versions picked (v->evict) */
	int rc = 0;

	for (bool swept = false;; swept = true) {
		room_count(s, uid, olds, nold, &total, &mine);
		if (swept || !bell ||
		    (!(max && (total + add < total || total + add > max)) &&
		     !(qmax && (mine + add < mine || mine + add > qmax))))
			break;
		/*
		 * Short of room: the holds followers let go of free their
		 * versions now, and the count starts again. Only then, so
		 * that a PUBLISH with room to spare does not scan every
		 * follower row of the daemon.
		 */
		bell->sweep();
	}
	fair = td__acct_fair_share(s, uid);
	for (;;) {
		bool over_total = max && (total + add < total ||
					  total + add > max);
		bool over_uid = qmax && (mine + add < mine ||
					 mine + add > qmax);
		struct td__version *lru = NULL;
		struct td__freebuf *fb = NULL;

		if (!over_total && !over_uid)
			break;
		/* recyclable buffers nobody uses go first, oldest first */
		for (struct td__list *l = s->freebufs.next;
		     l != &s->freebufs && !fb; l = l->next) {
			struct td__freebuf *f =
				td__container_of(l, struct td__freebuf, slink);

			if (!f->evict && td__acct_evictable(s, f->uid, uid,
							    over_uid, fair))
				fb = f;
		}
		if (fb) {
			fb->evict = true;
			total -= fb->f.size;
			if (fb->uid == uid)
				mine -= fb->f.size;
			td__acct_pick(s, fb->uid, fb->f.size);
			continue;
		}
		lru = lru_next(s, &run, uid, olds, nold, over_uid, fair);
		if (!lru) {
			why->rc = rc = over_uid ? -EDQUOT : -ENOSPC;
			why->limit = over_uid ? qmax : max;
			why->in_use = over_uid ? mine : total;
			why->reserve =
				over_uid ? 0 : s->d->opts.max_bytes - max;
			break;
		}
		lru->evict = true;
		picked++;
		total -= lru->acct;
		if (lru->uid == uid && !lru->unowned)
			mine -= lru->acct;
		if (!lru->unowned)
			td__acct_pick(s, lru->uid, lru->acct);
	}
	td__acct_unpick_all(s);
	/* unpick (dry, or failed: evict nothing) or evict what was picked */
	for (struct td__list *l = s->freebufs.next, *n; l != &s->freebufs;
	     l = n) {
		struct td__freebuf *f =
			td__container_of(l, struct td__freebuf, slink);

		n = l->next;
		if (!f->evict)
			continue;
		f->evict = false;
		if (!dry && rc == 0)
			td__freebuf_drop(s, f);
	}
	evict_picked(s, uid, picked, dry || rc < 0);
	return rc;
}

void td__room_reason(char *buf, size_t n, const char *op, uint64_t add,
		     const struct td__room *r)
{
	const char *what = r->rc == -EDQUOT ? "the uid quota" : "--max-bytes";

	if (r->rc == -ENOSPC && r->reserve && add <= r->limit + r->reserve) {
		/* a tenant at --max-bytes less the operator's reserve */
		snprintf(buf, n, "%s of %llu bytes: the daemon is down to its "
				 "reserve of bytes (%llu in use, %llu of "
				 "--max-bytes %llu kept for root and its own "
				 "uid) and nothing more can be evicted (what "
				 "is held is leased, pinned or not yet "
				 "published)",
			 op, (unsigned long long)add,
			 (unsigned long long)r->in_use,
			 (unsigned long long)r->reserve,
			 (unsigned long long)(r->limit + r->reserve));
		return;
	}
	/* more than the limit itself: no eviction could make room, and
	 * "0 in use of L and nothing more can be evicted (what is held is
	 * leased, ...)" sent the user looking for leases */
	if (add > r->limit)
		snprintf(buf, n, "%s of %llu bytes is more than %s itself "
				 "(%llu)",
			 op, (unsigned long long)add, what,
			 (unsigned long long)(r->limit + r->reserve));
	else
		snprintf(buf, n, "%s of %llu bytes exceeds %s (%llu in use "
				 "of %llu) and nothing more can be evicted "
				 "(what is held is leased, pinned or not yet "
				 "published)",
			 op, (unsigned long long)add, what,
			 (unsigned long long)r->in_use,
			 (unsigned long long)r->limit);
}

/* The reply for a td__store_make_room() failure. */
void td__store_room_error(struct td__peer *p, const struct td_wire_hdr *h,
		       uint64_t add, const struct td__room *r)
{
	char why[256];

	td__room_reason(why, sizeof(why), td_wire_op_name(h->opcode), add, r);
	td__peer_error(p, h->opcode, h->request_id, r->rc, "%s", why);
}

/*
 * Memory held outside versions and allocs (rings): charged to uid and the
 * total like an ALLOC, evicting unleased unpinned versions first. 0, or
 * -ENOSPC/-EDQUOT/-ENOMEM with the error reply already sent.
 */
int td__store_charge(struct td__peer *p, const struct td_wire_hdr *h,
		     uint64_t bytes)
{
	struct td__store *s = td__d->store;
	struct td__room room = {0};

	if (td__store_make_room(s, p->uid, bytes, NULL, false, &room) < 0) {
		td__store_room_error(p, h, bytes, &room);
		return room.rc;
	}
	if (td__acct_add(s, p->uid, bytes) < 0) {
		td__peer_nomem(p, h);
		return -ENOMEM;
	}
	return 0;
}

void td__store_uncharge_total(uint64_t bytes)
{
	td__d->store->total -= bytes;
}

void td__store_disown(uid_t uid, uint64_t bytes)
{
	if (bytes)
		td__acct_sub_uid(td__d->store, uid, bytes);
}
int td__store_new(struct td__daemon *d)
{
	struct td__store *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->d = d;
	for (unsigned i = 0; i < TD__WAIT_BUCKETS; i++)
		td__list_init(&s->watch_buckets[i]);
	if (getrandom(&s->name_seed, sizeof(s->name_seed), GRND_NONBLOCK) !=
	    (ssize_t)sizeof(s->name_seed))
		s->name_seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	td__list_init(&s->free_leases);
	td__list_init(&s->versions);
	td__list_init(&s->lru_order);
	td__list_init(&s->freebufs);
	for (unsigned i = 0; i < TD__WAIT_BUCKETS; i++)
		td__list_init(&s->wait_buckets[i]);
	td__list_init(&s->ring_waiters);
	td__list_init(&s->many_waiters);
	s->timer_due = UINT64_MAX;
	td__list_init(&s->rewrites);
	td__list_init(&s->spare_allocs.head);
	td__list_init(&s->spare_versions.head);
	td__list_init(&s->spare_freebufs.head);
	td__list_init(&s->spare_waiters.head);
	td__list_init(&s->spare_bodies.head);
	s->next_version = s->next_lease = s->next_alloc = s->next_watch =
		s->next_buf = 1;
	s->version_ceiling = 0; /* the first number asks keeper->reserve */
	if (d->opts.first_version > 1 &&
	    d->opts.first_version <= TD__VERSION_MAX)
		s->next_version = d->opts.first_version;
	uv_timer_init(d->loop, &s->timer);
	s->timer.data = s;
	d->store = s;
	return 0;
}

static void on_timer_closed(uv_handle_t *h)
{
	struct td__store *s = h->data;

	while (!td__list_empty(&s->free_leases)) {
		struct td__list *l = s->free_leases.next;

		td__list_del(l);
		free(td__container_of(l, struct td__lease, link));
	}
	td__spares_fini(&s->spare_allocs, offsetof(struct td__alloc, link));
	td__spares_fini(&s->spare_versions, offsetof(struct td__version, all));
	td__spares_fini(&s->spare_freebufs, offsetof(struct td__freebuf, link));
	td__spares_fini(&s->spare_waiters, offsetof(struct td__waiter, link));
	td__spares_fini(&s->spare_bodies, offsetof(struct td__body, link));
	free(s->bufs);
	free(s->buf_heads);
	free(s->due);
	free(s->uids); /* kept at its capacity when every uid is back at 0 */
	free(s);
}

void td__store_free(struct td__daemon *d)
{
	struct td__store *s = d->store;

	if (!s)
		return;
	/* peers are gone, so only the current reference is left */
	for (size_t i = 0; i < s->count; i++)
		td__version_unref(s, s->names[i]);
	free(s->names);
	s->names = NULL;
	s->count = 0;
	d->store = NULL;
	uv_close((uv_handle_t *)&s->timer, on_timer_closed);
}

/*
 * Memory goes back after a burst (issue 18): once TRIM_RECORDS records
 * beyond the spare lists were freed (leases, versions, watches, parked
 * GETs, whole connections), the lease spares go down to TRIM_KEEP_LEASES
 * made anew (a burst spreads them over the heap, each pinning a page),
 * the name
 * and buffer tables shrink to fit and malloc_trim() hands free heap pages
 * back to the system. A warm handoff frees nothing, so it never gets
 * here.
 */
#define TRIM_RECORDS 256
#define TRIM_KEEP_LEASES 64

static void *shrink(void *a, size_t count, size_t *cap, size_t size)
{
	void *n;

	if (*cap <= 64 || count >= *cap / 4)
		return a;
	n = realloc(a, (*cap / 2) * size);
	if (!n)
		return a;
	*cap /= 2;
	return n;
}

unsigned td__store_lease_spares(void)
{
	return td__d->store ? td__d->store->n_free_leases : 0;
}

void td__store_trim(unsigned more)
{
	struct td__store *s = td__d->store;

	if (!s)
		return;
	s->freed += more;
	if (s->freed < TRIM_RECORDS)
		return;
	s->freed = 0;
	/* every spare goes, and those kept are made anew after the trim:
	 * side by side on a page or two, where the ones a burst left were
	 * spread over its whole heap, each keeping its page */
	while (s->n_free_leases) {
		struct td__list *l = s->free_leases.prev;

		td__list_del(l);
		s->n_free_leases--;
		free(td__container_of(l, struct td__lease, link));
	}
	s->names = shrink(s->names, s->count, &s->cap, sizeof(*s->names));
	s->bufs = shrink(s->bufs, s->nbufs, &s->bufs_cap, sizeof(*s->bufs));
	td__buf_trim(s);
	s->due = shrink(s->due, s->ndue, &s->due_cap, sizeof(*s->due));
	malloc_trim(0); /* it merges the freed records first */
	while (s->n_free_leases < TRIM_KEEP_LEASES) {
		struct td__lease *l = malloc(sizeof(*l));

		if (!l)
			break;
		td__list_add_tail(&s->free_leases, &l->link);
		s->n_free_leases++;
	}
}

/* ---- persistence (sd.h, fdstore.c) ---- */

void td__store_info(struct td__store_info *si)
{
	struct td__store *s = td__d ? td__d->store : NULL;

	if (!s) {
		*si = (struct td__store_info){0, 0, 1};
		return;
	}
	si->count = s->count;
	si->bytes = s->total;
	si->next_version = s->next_version;
}

int64_t td__store_each_after(const struct td_wire_str *after, size_t max,
			     int (*fn)(void *arg,
				       const struct td_state_entry *ent),
			     void *arg, bool *end)
{
	struct td__store *s = td__d->store;
	size_t i = 0, n = 0;
	bool found;

	if (after) {
		i = td__name_find(s, after->ptr, after->len, &found);
		i += found;
	}
	for (; i < s->count && n < max; i++, n++) {
		const struct td__version *v = s->names[i];
		struct td_state_entry ent = {
			.name = {v->name, v->name_len},
			.flags = v->flags,
			.version = v->number,
			.meta = {v->meta, v->meta_len},
			.blob = {v->blob, v->blob_len},
			.fd_count = v->nfds,
		};
		int rc;

		for (uint32_t j = 0; j < v->nfds; j++)
			ent.fd_ids[j] = v->fds[j].sid;
		rc = fn(arg, &ent);
		if (rc < 0)
			return rc;
		if (rc > 0) { /* this one was the last it wanted */
			i++, n++;
			break;
		}
	}
	if (end)
		*end = i >= s->count;
	return (int64_t)n;
}

int td__store_each(int (*fn)(void *arg, const struct td_state_entry *ent),
		   void *arg)
{
	int64_t n = td__store_each_after(NULL, SIZE_MAX, fn, arg, NULL);

	return n < 0 ? (int)n : 0;
}

void td__store_set_next_version(uint64_t next)
{
	struct td__store *s = td__d->store;

	if (next > TD__VERSION_MAX) {
		td__log(TD_LOG_WARN, "a restored version counter of %" PRIu64
				     " is out of range; ignored",
			next);
		return;
	}
	if (next > s->next_version)
		s->next_version = next;
}

uint64_t td__store_take_version(void)
{
	struct td__store *s = td__d->store;

	if (s->next_version >= s->version_ceiling)
		s->version_ceiling = keeper ? keeper->reserve(s->next_version)
					    : UINT64_MAX;
	return s->next_version++;
}

/* What a dying peer leaves here: its recyclable buffers. */
void td__store_peer_gone(struct td__peer *p)
{
	struct td__store *s = td__d->store;

	/* its recyclable versions close their buffers when they go */
	for (struct td__list *l = s->versions.next; l != &s->versions;
	     l = l->next) {
		struct td__version *v =
			td__container_of(l, struct td__version, all);

		if (v->owner == p)
			v->owner = NULL;
	}
	while (!td__list_empty(&p->freebufs))
		td__freebuf_drop(s, td__container_of(p->freebufs.next,
						     struct td__freebuf,
						     link));
}

/* ---- snapshots (snapshot.c) ---- */

/*
 * Every current version, referenced like a lease (never evicted, never
 * freed, a recyclable buffer never handed back) until
 * td__store_snap_unref(): what a snapshot writes stays intact while
 * clients keep publishing. Fences and fd ids are left to the caller.
 */
void td__store_snap_view(void *ref, struct td__snap_ver *sv)
{
	struct td__version *v = ref;

	*sv = (struct td__snap_ver){
		.ent = {.name = {v->name, v->name_len},
			.flags = v->flags,
			.version = v->number,
			.meta = {v->meta, v->meta_len},
			.blob = {v->blob, v->blob_len},
			.fd_count = v->nfds},
		.ref = v,
	};
	for (uint32_t j = 0; j < v->nfds; j++)
		sv->fds[j] = td__vfd_out(&v->fds[j]);
}

int td__store_snap_hold(int (*fn)(void *arg, const struct td__snap_ver *sv),
			void *arg)
{
	struct td__store *s = td__d->store;

	for (size_t i = 0; i < s->count; i++) {
		struct td__version *v = s->names[i];
		struct td__snap_ver sv;
		int rc;

		td__store_snap_view(v, &sv);
		v->refs++;
		rc = fn(arg, &sv);
		if (rc < 0)
			return rc;
	}
	return 0;
}

void td__store_snap_unref(void *ref)
{
	td__version_unref(td__d->store, ref);
}
