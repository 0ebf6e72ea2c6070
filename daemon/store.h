/* SPDX-License-Identifier: MIT */
/*
 * The store's records, shared by the files that serve requests on them
 * (not installed):
 *
 *   store.c    names -> versions, their lifetime, buffer ids, recycled
 *              buffers waiting for reuse, eviction, watches' events
 *   lru.c      eviction's order: one call's candidates in a heap
 *   quota.c    bytes per uid and in total, limits, the access policy gate
 *   loan.c     ALLOC: unpublished allocs, recycled buffers handed out
 *   lease.c    GET, RELEASE, parked GETs
 *   publish.c  PUBLISH and restoring a version from a state image
 *   catalog.c  LIST, STAT, DELETE, WATCH, UNWATCH
 *
 * Calls point down that list's dependency order (docs/architecture.md):
 * store.c and quota.c call none of the request files.
 *
 * Lifetime rule: a version is referenced once while it is the current
 * version of its name and once per lease. DELETE or a newer PUBLISH drops
 * the first reference; the version (its fds, its bytes) goes when the last
 * lease is released or its holder disconnects.
 */
#ifndef TD_DAEMON_STORE_H
#define TD_DAEMON_STORE_H

#include "daemon.h"
#include "sd.h"


#define TD__TABLE_MAX (TD_WIRE_MAX_PLANES + 1)

/* A stored file, so equal files get equal buffer_ids (client map cache). */
struct td__buf {
	dev_t dev;
	ino_t ino;
	uint64_t id;
	unsigned refs;
	/* 1 + the index of the next entry of its td__store.buf_heads
	 * chain, 0 at its end */
	size_t next;
};

struct td__vfd {
	int fd;
	/*
	 * A recyclable buffer (docs/fastpath.md, "Recycled loans") keeps two
	 * descriptors: fd, the writable memfd, and ro, its read-only reopen
	 * made once and handed to consumers. -1 for every other entry, whose
	 * fd is what consumers get.
	 */
	int ro;
	uint64_t size; /* recyclable: bytes charged for the buffer */
	/* a plane's file size when taken (td__vfd_set), what its close may
	 * free at most (closer.c); 0 for fences */
	uint64_t file_len;
	uint64_t buffer_id;
	bool tracked; /* counted in the buf table (planes, not fences) */
	dev_t dev;
	ino_t ino;
	uint64_t sid; /* systemd fd-store id (fdstore.c), 0 = not stored */
	uid_t uid;    /* whose descriptors fd and ro are (tenant.c) */
	/*
	 * A recyclable buffer sent to another connection that may not read
	 * every name its producer may write: bound for good to the name it
	 * was sent under, lent only to an alloc of that name
	 * (docs/fastpath.md, "Across names").
	 */
	bool exposed;
	/*
	 * Sent to another connection that may not read every name, exposed
	 * or not (it may read all its producer writes), at shown_at policy
	 * reloads: a reload since may have taken that reader's access
	 * away, so it is lent no more.
	 */
	bool shown;
	uint64_t shown_at;
	/*
	 * A follower may read it still with no hold the daemon keeps (its
	 * follow ended by a policy reload while it read: follow.c,
	 * bell_end): lent no more, so nothing is written into it again.
	 */
	bool unheld;
	/*
	 * Recyclable: td__name_tag() of the name it was first published
	 * under (0 never published), and whether it was published under
	 * another since. Its bytes may hold what any of them wrote, so a
	 * named alloc takes it only while it carried that name alone.
	 */
	uint64_t carried;
	bool mixed;
};

struct td__version {
	struct td__list all; /* td__store.versions: current and retired */
	uint64_t number;
	unsigned refs; /* 1 while current + 1 per lease */
	uint32_t lease_count;
	uint32_t foreign_leases; /* of them, held by uids other than uid */
	/*
	 * Retired while only other uids held it leased: its bytes left
	 * uid's quota (they count as those readers' pinned bytes) and stay
	 * in --max-bytes only.
	 */
	bool unowned;
	/* acct counted in its uid's td__uidacct.pinned (td__acct_pin) */
	bool pin_counted;
	uint32_t flags;
	uint32_t dtype, ndim;
	uint64_t shape[TD_WIRE_MAX_DIMS];
	uint64_t bytes; /* sum of plane sizes (STAT/LIST) */
	uint64_t acct;  /* bytes counted against --max-bytes */
	uid_t uid;      /* the publisher's, charged with acct */
	uint64_t used;  /* store tick of the last PUBLISH or GET (LRU) */
	/* store->lru_order while current (lru.c), zeroed otherwise */
	struct td__list lru;
	bool evict;     /* picked by td__store_make_room() */
	/*
	 * A recyclable version: its alloc planes are not write-sealed and go
	 * to owner's free list when the version is retired and unleased.
	 * owner is cleared when that connection goes.
	 */
	bool recycle;
	/* the HTTP store's verdict on it (http-body.c): 1 served, -1 not,
	 * 0 not looked at yet; a version does not change once published */
	int8_t http_ok;
	/* the fd-table index of its acquire fence, -1 none */
	int8_t fence_ix;
	/*
	 * fence.c: the fence's kind (0 not looked at yet), whether an
	 * eventfd fence is watched or seen signalled, and the leases whose
	 * own fence waits for it (docs/fastpath.md, "Fences")
	 */
	uint8_t fence_kind, fence_state;
	struct td__list fence_waits;
	/* its array's metadata texts for the HTTP store's group keys
	 * (http-meta.c), printed on first need; freed with the version */
	struct td__http_meta *http_meta;
	struct td__peer *owner;
	uint32_t nfds;
	struct td__vfd fds[TD__TABLE_MAX];
	uint16_t name_len;
	char name[TD_WIRE_MAX_NAME + 1];
	uint32_t meta_len, blob_len;
	uint8_t *meta, *blob; /* point into data[] */
	size_t data_cap;      /* bytes of data[] (kept across reuse) */
	uint8_t data[];
};

struct td__lease {
	struct td__list link; /* peer->leases */
	uint64_t id;
	uint64_t pinned; /* bytes counted as the holder's pinned (tenant.c) */
	/*
	 * follow.c: the follow row of the holder's uid whose own charge
	 * counts v's bytes in pinned while this lease has none (pinned 0),
	 * NULL none: a version a uid holds by a GET lease and may take by
	 * its follow counts once (td__follow_cover)
	 */
	struct follower *cover;
	struct td__version *v;     /* NULL for a lease on a ring slot: */
	struct td__ring *ring; /* ring.c holds the slot (td__ring_unlease) */
	uint32_t slot;
	/*
	 * fence.c: the holder's own fence, a timerfd (-1 none), on its
	 * version's fence_waits while the producer's has not signalled
	 */
	int tfd;
	struct td__list fence_link;
};

struct td__alloc {
	struct td__list link; /* peer->allocs */
	uint64_t id;
	bool recycle; /* TD_WIRE_ALLOC_RECYCLE */
	bool rewrite; /* TD_WIRE_ALLOC_REWRITE: its version may be taken back */
	uint32_t count;
	uint64_t acct;
	uid_t uid;
	struct td__vfd fds[TD_WIRE_MAX_PLANES];
	uint64_t sizes[TD_WIRE_MAX_PLANES];
	/* the name it may be published as (TD_WIRE_ALLOC_NAMED), 0: any */
	uint16_t name_len;
	char name[TD_WIRE_MAX_NAME + 1];
	uint64_t name_tag; /* td__name_tag(name) */
};

/*
 * A recyclable buffer back from a retired version, waiting for its
 * producer's next RECYCLE ALLOC. Still charged to uid; dropped first when
 * room is needed, beyond TD__MAX_FREEBUFS and with its connection.
 */
struct td__freebuf {
	struct td__list link;  /* peer->freebufs, oldest first */
	struct td__list slink; /* store->freebufs, oldest first */
	struct td__peer *peer;
	struct td__vfd f; /* fd writable, ro its read-only reopen */
	uid_t uid;
	/* the acquire fence of its version, pending when that went (a
	 * device may still write the buffer): lent once it signalled;
	 * -1 none */
	int fence;
	bool evict; /* picked by td__store_make_room() */
	/* f.exposed: the name it is bound to */
	uint16_t name_len;
	char name[TD_WIRE_MAX_NAME + 1];
};

struct td__watch {
	struct td__list link;  /* peer->watches */
	/* store->watch_buckets[], by the hash of its name or prefix */
	struct td__list slink;
	struct td__peer *peer;
	uint64_t id;
	bool prefix;
	uint16_t len;
	char name[TD_WIRE_MAX_NAME + 1];
};

#define TD__WAIT_BUCKETS 1024 /* a power of two */

struct td__waiter {
	struct td__list link;  /* peer->waiters */
	/* 1 + its index in store->due, 0 when it is not there (no deadline) */
	size_t due_at;
	struct td__list blink; /* store->wait_buckets[], by name (lease.c) */
	/* store->ring_waiters while its name is a live ring (lease.c);
	 * self-linked otherwise */
	struct td__list rlink;
	struct td__peer *peer;
	uint64_t request_id;
	uint32_t mode, flags;
	uint64_t version;
	uint32_t held_count; /* the request's held ids (SCM consumers) */
	uint64_t held[TD_WIRE_MAX_HELD];
	uint64_t deadline; /* uv_now() ms, UINT64_MAX = never */
	uint32_t timeout_ms;
	/* parked only because a ring's latest slot was being rewritten */
	bool rewrite;
	/* parked while a ring's latest version waited for its fence */
	bool fence;
	/* a RING_SUBSCRIBE parked until its ring is made (ring_adopt):
	 * replayed through op, never answered by a PUBLISH */
	bool sub;
	/* a GET_MANY parked (TD_WIRE_MANY_NEWER) on its first name: a copy
	 * of its request body, decoded again to answer it; on
	 * store->many_waiters (rlink), never on ring_waiters */
	struct td__body *many;
	/* its first name's newer version came within a PUBLISH_MANY: it is
	 * answered once every element is committed (td__lease_many_hold) */
	bool ready;
	const struct td__op *op;
	uint16_t len;
	char name[TD_WIRE_MAX_NAME + 1];
};

/* A copy of a request's body that outlives the request (a parked
 * GET_MANY's): kept by capacity in store->spare_bodies, so that a loop
 * that parks the same request again allocates nothing. */
struct td__body {
	struct td__list link;
	size_t cap, len;
	uint8_t data[];
};

/* Released records of one kind, kept for reuse (td__store, below). */
struct td__spares {
	struct td__list head;
	unsigned n;
};

/* Bytes one uid holds (allocs and versions it published). */
struct td__uidacct {
	uid_t uid;
	uint64_t bytes;
	uint64_t picked; /* td__store_make_room(): bytes of it picked */
	/* of bytes, its current PIN versions' (STATUS), kept as they
	 * become current and stop being so: STATUS summed them over every
	 * name for each uid */
	uint64_t pinned;
};


struct td__store {
	struct td__daemon *d;
	/* current versions sorted by name (binary search, LIST paging) */
	struct td__version **names;
	size_t count, cap;
	/* counts changes of names[] under --http-prefix (td__name_set, a
	 * name's removal): what the HTTP store's kept node names were
	 * made at */
	uint64_t names_gen;
	/* the current versions, least recently used first (lru.c) */
	struct td__list lru_order;
	struct td__buf *bufs;
	size_t nbufs, bufs_cap;
	/*
	 * bufs by a seeded hash of their file (store.c buf_link): each head
	 * 1 + the index of its chain's first entry, 0 none; buf_nheads a
	 * power of two, 0 before the first. A PUBLISH finds its planes'
	 * ids among a chain, not among every buffer the store holds.
	 */
	size_t *buf_heads;
	size_t buf_nheads;
	/*
	 * Watches by a seeded hash of their name, or of their prefix
	 * (td__watch_add): a PUBLISH looks at its name's bucket and at the
	 * buckets of its prefixes of the lengths some prefix watch has
	 * (prefix_lens), not at every watch in the daemon.
	 */
	struct td__list watch_buckets[TD__WAIT_BUCKETS];
	uint32_t prefix_lens[TD_WIRE_MAX_NAME + 1]; /* prefix watches */
	/* the seed of the name hashes (td__name_bucket), random per daemon:
	 * a client cannot pick names that all land in another's bucket */
	uint64_t name_seed;
	/*
	 * The parked GETs with a deadline, a binary min-heap by deadline
	 * (lease.c): the timer finds the next one to expire at the top, so
	 * a GET that times out costs log(n), not a walk over every GET
	 * parked in the daemon. GETs that wait forever are not in it.
	 */
	struct td__waiter **due;
	size_t ndue, due_cap;
	/*
	 * Parked GETs again, by a seeded hash of their name (lease.c): a
	 * PUBLISH looks at the GETs of one bucket, not at every GET parked
	 * in the daemon, so GETs parked on other names cost it nothing.
	 */
	struct td__list wait_buckets[TD__WAIT_BUCKETS];
	/*
	 * The parked GETs whose name is a live ring (rlink), the only ones
	 * the 1 ms ring poll retries: a GET parked on a ring must not cost
	 * the daemon a walk over every GET parked on other names (lease.c).
	 */
	struct td__list ring_waiters;
	/* the parked GET_MANYs (rlink), for DELETE and PUBLISH_MANY */
	struct td__list many_waiters;
	/* a PUBLISH_MANY is committing: a GET_MANY it answers waits until
	 * every element is in (td__lease_many_hold) */
	bool many_hold;
	/* peers whose latest version is being rewritten (peer->rw_link) */
	struct td__list rewrites;
	uv_timer_t timer; /* earliest parked-GET deadline */
	/* when `timer` fires (uv_now() ms), UINT64_MAX: stopped. Served GETs
	 * do not rearm it: it may fire for a GET that is gone, and then looks
	 * for the next deadline (lease.c) */
	uint64_t timer_due;
	uint64_t total;   /* accounted bytes */
	struct td__uidacct *uids; /* accounted bytes per uid (nonzero only) */
	size_t nuids, uids_cap;
	uint64_t tick; /* LRU clock */
	uint64_t next_version, next_lease, next_alloc, next_watch, next_buf;
	/*
	 * Version numbers from here on are not yet on record where a
	 * restart after a crash looks (the fd store's image, FILE.lock):
	 * taking one puts a block beyond it on record first
	 * (td__store_take_version). UINT64_MAX: no record is kept.
	 */
	uint64_t version_ceiling;
	/*
	 * Released lease records, reused by the next GET: a steady stream of
	 * GET/RELEASE then allocates nothing (the brief: no per-handoff
	 * allocation in the daemon). Bounded by LEASE_CACHE.
	 */
	struct td__list free_leases;
	unsigned n_free_leases;
	/*
	 * The same for the other records of a handoff: allocs, versions,
	 * free-list entries and parked GETs, each linked through its own
	 * list member while spare. Bounded by SPARE_MAX per kind, freed at
	 * exit.
	 */
	struct td__spares spare_allocs, spare_versions, spare_freebufs,
		spare_waiters, spare_bodies;
	/*
	 * Every live version, current or retired (replaced or deleted but
	 * still leased), so GET EXACT can reach a retired one.
	 */
	struct td__list versions;
	struct td__list freebufs; /* struct td__freebuf.slink, oldest first */
	uint64_t freed; /* records given back to malloc since the last trim */
};

/* ---- bufid.c ---- */

/* The buffer id of the file dev/ino, counted once more (a new id for a
 * file not held yet); and counted once less, forgotten at none. */
uint64_t td__buf_ref(struct td__store *s, dev_t dev, ino_t ino);
void td__buf_unref(struct td__store *s, dev_t dev, ino_t ino);
/* The table's index to its size, after td__store_trim shrank it. */
void td__buf_trim(struct td__store *s);

/* ---- store.c ---- */

/*
 * Followed names (follow.c registers these, so store.c calls no file
 * above it): `changed` when a name's current version changes (now the
 * new one or NULL, gone the one it replaced or removed, either NULL),
 * called inside td__name_set/td__name_remove before gone's reference is
 * dropped; `pins` whether v is a followed name's current version that a
 * follower holds now (so it is neither evicted nor counted as freed by a
 * PUBLISH that replaces it, as a leased version); `sweep` drops the
 * holds followers have let go of, when a search for room comes up
 * short (then it counts again).
 */
struct td__store_bell {
	/* quiet: a rewrite took gone back (loan.c); its next version is on
	 * its way, so nobody is woken for the gap */
	void (*changed)(struct td__version *now, struct td__version *gone,
			bool quiet);
	bool (*pins)(const struct td__version *v);
	void (*sweep)(void);
	/* a staged publish of name (NULL: of every name) is settled:
	 * committed if its producer fired it, else (cancel) cancelled */
	void (*settle)(const char *name, size_t len, bool cancel);
	/* a PUBLISH of p made ver and lends loan a: staged as the name's
	 * next version if it may be (*version, *gen, *slot: the stage's
	 * section of the reply; *slot only to TD_WIRE_FEAT_STAGE_WORD) */
	void (*offer)(struct td__peer *p, const struct td__version *ver,
		      const struct td__alloc *a, uint64_t *version,
		      uint32_t *gen, uint32_t *slot);
	/* a REWRITE ALLOC takes ver back: a copy of its descriptor when a
	 * stage of its buffers may follow, else NULL */
	struct td__version *(*keep)(const struct td__version *ver);
	/* ... and lends them as loan a: staged as the name's next version
	 * with that descriptor if it may be (sv, keep's, goes either way) */
	void (*takeback)(struct td__peer *p, struct td__version *sv,
			 const struct td__alloc *a, uint64_t *version,
			 uint32_t *gen, uint32_t *slot);
};
void td__store_bell_set(const struct td__store_bell *b);
/*
 * Before a change of name other than a PUBLISH's commit (a PUBLISH, a
 * DELETE, a ring, a rewrite's take-back, a policy reload: name NULL):
 * a staged publish of it fired is committed first, one not fired is
 * cancelled.
 */
void td__store_settle(const char *name, size_t len);
/* bell->offer, ->keep, ->takeback (publish.c and loan.c call no file
 * above them) */
void td__store_stage_offer(struct td__peer *p, const struct td__version *ver,
			   const struct td__alloc *a, uint64_t *version,
			   uint32_t *gen, uint32_t *slot);
struct td__version *td__store_stage_keep(const struct td__version *ver);
void td__store_stage_takeback(struct td__peer *p, struct td__version *sv,
			      const struct td__alloc *a, uint64_t *version,
			      uint32_t *gen, uint32_t *slot);
/* The commit of a fired stage (publish.c): sv, numbered already, takes
 * alloc a's buffers and becomes its name's current version. */
void td__publish_staged(struct td__peer *p, struct td__alloc *a,
			struct td__version *sv);

/*
 * A rewrite of name ended without its publish (loan.c): the parked GETs
 * that wait only because of it are answered by the hook lease.c sets
 * (calls point down the list above; this one goes up through it).
 */
typedef void td__store_rewrite_fn(struct td__store *s, const char *name,
				  uint16_t len);
void td__store_rewrite_hook_set(td__store_rewrite_fn *fn);
void td__store_rewrite_over(struct td__store *s, const char *name,
			    uint16_t len);

/* Persistence (struct td__store_keeper): a published version's fd goes
 * to the fd store (its id, 0 = not stored); a restored one adopts its
 * stored id (0 or -errno); the set of current versions changed, by a
 * change of the name's current version (a snapshot does not keep every
 * name: docs/snapshot.md, "Which names"). */
uint64_t td__store_fd_kept(const struct td__vfd *f);
int td__store_fd_adopt(uint64_t id, const struct td__vfd *f);
void td__store_changed(const char *name, size_t len);

/* A zeroed record of size bytes whose list member is at off (spares). */
void *td__spare_new(struct td__spares *sp, size_t size, size_t off);
void td__spare_put(struct td__spares *sp, void *r, size_t off);
/* Free every record kept (the store's end). */
void td__spares_fini(struct td__spares *sp, size_t off);
#define TD__SPARE_NEW(sp, type, member)                                       \
	((type *)td__spare_new(sp, sizeof(type), offsetof(type, member)))
#define TD__SPARE_PUT(sp, r, type, member)                                    \
	td__spare_put(sp, r, offsetof(type, member))

struct td__version *td__version_new(struct td__store *s, size_t data_len);
/*
 * A version record that repeats ver's descriptor (the store's spare
 * list): the planes' sizes, no descriptors, no number yet. What a
 * stage commits (follow.c), once it has its loan's buffers.
 */
struct td__version *td__version_desc_copy(struct td__store *s,
					  const struct td__version *ver);
/* Back to the spares (a version never referenced). */
void td__version_put(struct td__store *s, struct td__version *v);
/* A copy of len bytes at p, from a spare body whose capacity fits, else
 * the heap; NULL when the heap has no room. */
struct td__body *td__body_new(struct td__store *s, const void *p, size_t len);
/* Back to the spares (NULL: nothing). */
void td__body_put(struct td__store *s, struct td__body *b);
/* Free v's HTTP metadata texts, if any (http-meta.c). */
void td__http_meta_free(struct td__version *v);
/*
 * What td__version_put() calls first, with a version that has HTTP
 * metadata texts: td__http_meta_free, which the HTTP store sets at its
 * start (a hook, so that store.c calls nothing of the HTTP files above
 * it, which call it: docs/architecture.md).
 */
typedef void td__version_put_fn(struct td__version *v);
void td__store_meta_hook_set(td__version_put_fn *fn);
/* Drop one reference; the last one frees the version (see above). */
void td__version_unref(struct td__store *s, struct td__version *v);
/* Whether a follower's row holds v, the current version of its name. */
bool td__version_pinned(const struct td__version *v);
/* A retired version of n still alive (leased), or NULL. */
struct td__version *td__version_retired(struct td__store *s,
					struct td_wire_str n,
					uint64_t number);

/* Take ownership of fd as a stored plane (tracked) or fence, one of
 * uid's descriptors (tenant.c). */
void td__vfd_set(struct td__store *s, struct td__vfd *f, int fd, bool plane,
		 uid_t uid);
void td__vfd_close(struct td__store *s, struct td__vfd *f);
/* Move src (its fds, its buffer-table reference) into dst. */
void td__vfd_move(struct td__vfd *dst, struct td__vfd *src);
/* What consumers get: the read-only reopen of a recyclable buffer. */
int td__vfd_out(const struct td__vfd *f);

/* A name's tag (nonzero; a keyed hash, so no client can aim at a
 * collision): what td__vfd.carried records. */
uint64_t td__name_tag(const struct td__store *s, struct td_wire_str name);
/* A recyclable buffer published under name: td__vfd.carried, .mixed. */
void td__vfd_carry(const struct td__store *s, struct td__vfd *f,
		   struct td_wire_str name);
void td__freebuf_drop(struct td__store *s, struct td__freebuf *fb);
/*
 * A recyclable buffer back to p's free list, charged to uid again, when
 * p is alive and the bytes fit the limits; otherwise closed. f is
 * consumed either way.
 */
/* name: what an exposed f is bound to (the name it carried or was lent
 * for; docs/fastpath.md, "Across names"); fence: td__fence_hold()'s
 * descriptor of a pending fence (-1 none), consumed too: the buffer is
 * lent once it signalled */
void td__freebuf_keep(struct td__store *s, struct td__peer *p, uid_t uid,
		      struct td__vfd *f, struct td_wire_str name, int fence);

int td__name_cmp(const char *a, size_t alen, const char *b, size_t blen);
/* Index of the first name >= key (exact match when *found). */
size_t td__name_find(const struct td__store *s, const char *key, size_t len,
		     bool *found);
struct td__version *td__name_lookup(struct td__store *s,
				    struct td_wire_str n);
/* The bucket of name[0..len) in a table of TD__WAIT_BUCKETS lists. */
struct td__list *td__name_bucket(struct td__store *s, struct td__list *table,
				 const char *name, size_t len);
/* A WATCH joins and leaves the store's buckets (catalog.c). */
void td__watch_add(struct td__store *s, struct td__watch *w);
void td__watch_del(struct td__store *s, struct td__watch *w);
/* Table a of *cap elements of size bytes, count of them used, with room
 * for one more: a itself, or a doubled (64 at first) with *cap updated,
 * or NULL with both untouched. */
void *td__table_room(void *a, size_t count, size_t *cap, size_t size);
/* Room for one more name (0 or -ENOMEM), then v as its name's current. */
int td__name_reserve(struct td__store *s);
/* Room for n more names (PUBLISH_MANY): 0 or -ENOMEM. */
int td__name_reserve_n(struct td__store *s, size_t n);
/* v becomes its name's current version; the one it replaces, or NULL. */
struct td__version *td__name_set(struct td__store *s,
				 struct td__version *v);
/* v is no longer current (DELETE, eviction); its reference stays. */
void td__name_remove(struct td__store *s, const struct td__version *v);
/* The same for a rewrite (loan.c): followers are not woken for it. */
void td__name_withdraw(struct td__store *s, const struct td__version *v);
/*
 * v leaves its name (replaced or deleted; before its reference is
 * dropped). When only other uids hold it leased, its bytes stop counting
 * against its publisher's quota: they are those readers' pinned bytes.
 */
void td__version_retire(struct td__store *s, struct td__version *v);

/* Tell the watchers of v's name (TD_EVENT_*). */
void td__notify(struct td__store *s, uint32_t event,
		const struct td__version *v);
/* The same for version `number` of name, which is gone already. */
void td__notify_name(struct td__store *s, uint32_t event,
		     struct td_wire_str name, uint64_t number);

/*
 * lru.c: the current versions in eviction's order (store->lru_order,
 * their lru member). add: v became current, the most recently used;
 * del: v is current no more (idempotent); touch: v was just used (a
 * GET), the most recently used if it is current.
 */
void td__lru_add(struct td__list *order, struct td__version *v);
void td__lru_del(struct td__version *v);
void td__lru_touch(struct td__list *order, struct td__version *v);

/* What a td__store_make_room() shortage was, for the reply. */
struct td__room {
	int rc; /* -ENOSPC (--max-bytes) or -EDQUOT (uid quota) */
	uint64_t limit, in_use;
	uint64_t reserve; /* -ENOSPC: the byte reserve kept from uid */
};

int td__store_make_room(struct td__store *s, uid_t uid, uint64_t add,
			const struct td__version *old, bool dry,
			struct td__room *why);
/* The same for a PUBLISH_MANY: olds[nold] (NULL entries: none) are the
 * versions it replaces. */
int td__store_make_room_many(struct td__store *s, uid_t uid, uint64_t add,
			     const struct td__version *const *olds,
			     size_t nold, bool dry, struct td__room *why);
void td__store_room_error(struct td__peer *p, const struct td_wire_hdr *h,
			  uint64_t add, const struct td__room *r);
/* Why op ("ALLOC") of add bytes found no room (r), into buf. */
void td__room_reason(char *buf, size_t n, const char *op, uint64_t add,
		     const struct td__room *r);

/* ---- quota.c ---- */

uint64_t td__acct_bytes(const struct td__store *s, uid_t uid);
/* Charge n bytes to uid and the total. -ENOMEM leaves both unchanged. */
int td__acct_add(struct td__store *s, uid_t uid, uint64_t n);
void td__acct_sub(struct td__store *s, uid_t uid, uint64_t n);
/* Take n off uid's count only (the total keeps them). */
void td__acct_sub_uid(struct td__store *s, uid_t uid, uint64_t n);
/* v becomes current (on) or stops being so: its uid's pinned bytes
 * (STATUS) take it in or let it go, if it is a PIN version charged to
 * its uid. */
void td__acct_pin(struct td__store *s, struct td__version *v, bool on);
/* uid's pinned bytes: its current PIN versions' acct. */
uint64_t td__acct_pinned(const struct td__store *s, uid_t uid);
/*
 * May an allocation by uid evict what owner holds? Its own, always;
 * another uid's only for --max-bytes (not for uid's quota), and only
 * while that uid holds more than fair (less what is picked of it).
 */
bool td__acct_evictable(const struct td__store *s, uid_t owner, uid_t uid,
			bool over_uid, uint64_t fair);
/* n bytes of owner picked for eviction; td__acct_unpick_all() after. */
void td__acct_pick(struct td__store *s, uid_t owner, uint64_t n);
void td__acct_unpick_all(struct td__store *s);
/* --max-bytes / the uids holding bytes (uid counted if it holds none). */
uint64_t td__acct_fair_share(const struct td__store *s, uid_t uid);
/* Would n more bytes charged to uid fit --max-bytes and uid's quota? */
bool td__acct_fits(const struct td__store *s, uid_t uid, uint64_t n);
/* What uid may fill of --max-bytes: all of it for root and the daemon's
 * uid, less the byte reserve for the others; 0 = unlimited. */
uint64_t td__acct_cap(const struct td__store *s, uid_t uid);
/* Would add more bytes (freed fewer) pass --max-bytes? */
bool td__acct_over_max(const struct td__store *s, uint64_t add,
		       uint64_t freed);

/* ---- loan.c ---- */

void td__loan_free(struct td__store *s, struct td__alloc *a);
/* p's alloc with that id, or NULL. */
struct td__alloc *td__loan_find(struct td__peer *p, uint64_t id);
/* RELEASE TD_WIRE_REL_ALLOC: an unpublished alloc given up; -ENOENT */
int td__loan_give_back(struct td__peer *p, uint64_t id);
/* Is a named alloc for name (always false for an unnamed one, unless
 * name is empty)? */
bool td__alloc_is_for(const struct td__alloc *a, struct td_wire_str name);
/*
 * v is sent to p (a GET reply): a recyclable buffer shown to another
 * connection that may not read every name is remembered (shown,
 * shown_at), and bound to v's name (exposed) when p may not read every
 * name v's producer may write (docs/fastpath.md, "Across names").
 */
void td__loan_shown(struct td__version *v, struct td__peer *p);
/* A follower reads v with no hold the daemon keeps (a follow a reload
 * ended): its recyclable buffers are lent no more (td__vfd.unheld). */
void td__loan_unheld(struct td__version *v);
/* A published alloc: off p's list and freed (its bytes moved on). */
void td__loan_done(struct td__peer *p, struct td__alloc *a);
/*
 * After a PUBLISH with TD_WIRE_PUB_LOAN of a recyclable alloc of `count`
 * planes of `sizes`: lend the next alloc of those sizes from p's free
 * list (held: the ids the client maps; rewrite: the published alloc was
 * a REWRITE one, and so is the loan; name: the published alloc was
 * named, and so is the loan, len 0 none) into *r and fds[*nfds] (the
 * planes not held), and remember it in p->loan_id. Never makes a new
 * plane: r->alloc_id 0 (no loan) when the free list lacks one.
 */
void td__loan_lend(struct td__peer *p, uint32_t count, const uint64_t *sizes,
		   bool rewrite, struct td_wire_str name,
		   uint32_t held_count, const uint64_t *held,
		   struct td_wire_alloc_rep *r, int *fds, unsigned *nfds);
/*
 * How long a name whose latest version a producer took back to rewrite
 * it stays "being rewritten" (a GET waits for its publish), as for a
 * ring's latest slot (lease.c). A GET that does not wait (timeout 0)
 * waits anyway, this long at most, for a ring version whose slot is
 * being rewritten: that version is on its way, and refusing would make
 * GET of a busy ring fail at random.
 */
#define TD__REWRITE_WAIT_MS 1000
/*
 * A PUBLISH of a REWRITE alloc made v (after its reply): the version p's
 * next REWRITE ALLOC may take back. A rewrite of p in progress ends.
 */
void td__rewrite_published(struct td__peer *p, const struct td__version *v);
/*
 * v is the current version of its name now: a rewrite of that name in
 * progress is over (its producer's publish is just another version, and
 * the name's end is v's, not the one taken back).
 */
void td__rewrite_superseded(const struct td__version *v);
/* Whether a producer is rewriting the latest version of name now (for
 * TD__REWRITE_WAIT_MS at most). */
bool td__rewrite_pending(struct td_wire_str name);

/* ---- lease.c ---- */

/* Serve every parked GET that v (just published) satisfies. */
void td__lease_wake(struct td__store *s, struct td__version *v);
/*
 * PUBLISH_MANY's commit: true before its first element, false after its
 * last, which answers the GET_MANYs its elements woke: so each leases
 * every name as the whole step left it, never a version of the step
 * before for a name committed later in it.
 */
void td__lease_many_hold(bool on);
/* DELETE removed name: a GET_MANY parked on it ends (-ENOENT). */
void td__lease_deleted(struct td_wire_str name);

/* ---- fence.c: a fence of each consumer's own (docs/fastpath.md) ---- */

/*
 * A GET of v by p took lease l: when v's fence is an eventfd and p
 * named TD_WIRE_FEAT_FENCE_OWN, l gets a timerfd of p's own,
 * fired now if the eventfd has signalled, else when it does. 1 (l->tfd
 * goes in the reply in place of the eventfd), 0 (v has no eventfd
 * fence, or p takes none and gets the eventfd), or -errno with the
 * reason in why (p's uid is out of descriptors, the daemon out of
 * memory; -EPROTONOSUPPORT: p takes none, and --own-fences-only).
 */
int td__fence_lease(struct td__peer *p, struct td__version *v,
		    struct td__lease *l, char *why, size_t cap);
/* l is released: its timerfd goes back to p, disarmed, or is closed. */
void td__fence_unlease(struct td__peer *p, struct td__lease *l);
/* v is about to be freed: its eventfd leaves the watched set. */
void td__fence_forget(struct td__version *v);
/*
 * v has an acquire fence (eventfd or sync_file) that has not signalled:
 * the producer's device may still be writing its buffers. A descriptor
 * of it (counted in uid's fds) for a buffer of v that waits on the free
 * list until it signals (td__fence_let_go); -1 when there is no fence or
 * it signalled; -2 when it is pending and no descriptor could be made
 * (the buffer is then closed, never lent with the device on it).
 */
int td__fence_hold(const struct td__version *v, uid_t uid);
/* Whether the fence *fd (from td__fence_hold, -1 none) has signalled:
 * then it is closed and *fd -1. */
bool td__fence_let_go(int *fd, uid_t uid);
/* Close a held fence *fd (-1: nothing) and uncount it from uid. */
void td__fence_drop(int *fd, uid_t uid);


/*
 * A follow row of p's uid whose charge counts v's pin bytes now (v the
 * name's current version, or the version the row holds) and covers no
 * lease yet, or NULL (follow.c): a GET lease of v by p then counts
 * nothing of its own (docs/policy.md, "A follower's hold").
 */
struct follower *td__follow_cover_find(const struct td__peer *p,
				       const struct td__version *v,
				       uint64_t pin);
/* f's charge covers lease l (of f's uid, on the version it charges);
 * f NULL: nothing. */
void td__follow_cover(struct follower *f, struct td__lease *l);
/* l's row, if any, covers it no more. */
void td__follow_uncover(struct td__lease *l);
/* l goes (RELEASE, its holder's end; off its list already): its row, if
 * any, covers another lease of its uid on l's version that counts for
 * itself, if there is one, else none. */
void td__follow_lease_gone(struct td__lease *l);

#endif
