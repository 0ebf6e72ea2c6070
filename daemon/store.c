/* SPDX-License-Identifier: MIT */
/*
 * The store: names -> current version, versions kept alive by leases,
 * unpublished allocs, watches and parked GETs. Requests other than HELLO
 * land in td__store_request().
 *
 * Lifetime rule: a version is referenced once while it is the current
 * version of its name and once per lease. DELETE or a newer PUBLISH drops
 * the first reference; the version (its fds, its bytes) goes when the last
 * lease is released or its holder disconnects.
 */
#include "daemon.h"

#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blob.h"
#include "bytes.h"
#include "sd.h"

#define TABLE_MAX (TD_WIRE_MAX_PLANES + 1)

/* A stored file, so equal files get equal buffer_ids (client map cache). */
struct buf {
	dev_t dev;
	ino_t ino;
	uint64_t id;
	unsigned refs;
};

struct vfd {
	int fd;
	/*
	 * A recyclable buffer (docs/fastpath.md, "Recycled loans") keeps two
	 * descriptors: fd, the writable memfd, and ro, its read-only reopen
	 * made once and handed to consumers. -1 for every other entry, whose
	 * fd is what consumers get.
	 */
	int ro;
	uint64_t size; /* recyclable: bytes charged for the buffer */
	uint64_t buffer_id;
	bool tracked; /* counted in the buf table (planes, not fences) */
	dev_t dev;
	ino_t ino;
	uint64_t sid; /* systemd fd-store id (fdstore.c), 0 = not stored */
	uid_t uid;    /* whose descriptors fd and ro are (tenant.c) */
};

struct version {
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
	uint32_t flags;
	uint32_t dtype, ndim;
	uint64_t shape[TD_WIRE_MAX_DIMS];
	uint64_t bytes; /* sum of plane sizes (STAT/LIST) */
	uint64_t acct;  /* bytes counted against --max-bytes */
	uid_t uid;      /* the publisher's, charged with acct */
	uint64_t used;  /* store tick of the last PUBLISH or GET (LRU) */
	bool evict;     /* picked by make_room() */
	/*
	 * A recyclable version: its alloc planes are not write-sealed and go
	 * to owner's free list when the version is retired and unleased.
	 * owner is cleared when that connection goes.
	 */
	bool recycle;
	struct td__peer *owner;
	uint32_t nfds;
	struct vfd fds[TABLE_MAX];
	uint16_t name_len;
	char name[TD_WIRE_MAX_NAME + 1];
	uint32_t meta_len, blob_len;
	uint8_t *meta, *blob; /* point into data[] */
	size_t data_cap;      /* bytes of data[] (kept across reuse) */
	uint8_t data[];
};

struct lease {
	struct td__list link; /* peer->leases */
	uint64_t id;
	uint64_t pinned;       /* bytes counted as the holder's pinned */
	struct version *v;     /* NULL for a lease on a ring slot: */
	struct td__ring *ring; /* ring.c holds the slot (td__ring_unlease) */
	uint32_t slot;
};

struct alloc {
	struct td__list link; /* peer->allocs */
	uint64_t id;
	bool recycle; /* TD_WIRE_ALLOC_RECYCLE */
	uint32_t count;
	uint64_t acct;
	uid_t uid;
	struct vfd fds[TD_WIRE_MAX_PLANES];
	uint64_t sizes[TD_WIRE_MAX_PLANES];
};

/*
 * A recyclable buffer back from a retired version, waiting for its
 * producer's next RECYCLE ALLOC. Still charged to uid; dropped first when
 * room is needed, beyond TD__MAX_FREEBUFS and with its connection.
 */
struct freebuf {
	struct td__list link;  /* peer->freebufs, oldest first */
	struct td__list slink; /* store->freebufs, oldest first */
	struct td__peer *peer;
	struct vfd f; /* fd writable, ro its read-only reopen */
	uid_t uid;
	bool evict; /* picked by make_room() */
};

struct watch {
	struct td__list link;  /* peer->watches */
	struct td__list slink; /* store->watches */
	struct td__peer *peer;
	uint64_t id;
	bool prefix;
	uint16_t len;
	char name[TD_WIRE_MAX_NAME + 1];
};

struct waiter {
	struct td__list link;  /* peer->waiters */
	struct td__list slink; /* store->waiters */
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
	uint16_t len;
	char name[TD_WIRE_MAX_NAME + 1];
};

/*
 * How long a GET that does not wait (timeout 0) waits anyway for a ring
 * version whose slot is being rewritten: that version is on its way, and
 * refusing would make GET of a busy ring fail at random.
 */
#define RING_REWRITE_WAIT_MS 1000

/* Released records of one kind, kept for reuse (td__store, below). */
struct spares {
	struct td__list head;
	unsigned n;
};

#define SPARE_MAX 64
/* a spare version keeps its data[]: at least this much, so that small
 * blobs of different sizes share records */
#define VERSION_DATA_MIN 512

struct td__store {
	struct td__daemon *d;
	/* current versions sorted by name (binary search, LIST paging) */
	struct version **names;
	size_t count, cap;
	struct buf *bufs;
	size_t nbufs, bufs_cap;
	struct td__list watches, waiters;
	uv_timer_t timer; /* earliest parked-GET deadline */
	uint64_t total;   /* accounted bytes */
	struct uidacct *uids; /* accounted bytes per uid (nonzero only) */
	size_t nuids, uids_cap;
	uint64_t tick; /* LRU clock */
	uint64_t next_version, next_lease, next_alloc, next_watch, next_buf;
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
	struct spares spare_allocs, spare_versions, spare_freebufs,
		spare_waiters;
	/*
	 * Every live version, current or retired (replaced or deleted but
	 * still leased), so GET EXACT can reach a retired one.
	 */
	struct td__list versions;
	struct td__list freebufs; /* struct freebuf.slink, oldest first */
	uint64_t freed; /* records given back to malloc since the last trim */
};

#define LEASE_CACHE 1024

/* ---- spare records (no per-handoff allocation in the steady state) ---- */

static struct td__list *spare_take(struct spares *sp)
{
	struct td__list *l;

	if (td__list_empty(&sp->head))
		return NULL;
	l = sp->head.next;
	td__list_del(l);
	sp->n--;
	return l;
}

/* Keep l for reuse; false when SPARE_MAX are kept already (free it). */
static bool spare_keep(struct spares *sp, struct td__list *l)
{
	if (sp->n >= SPARE_MAX)
		return false;
	td__list_add_tail(&sp->head, l);
	sp->n++;
	return true;
}

/* Zeroed record of size bytes whose list member is at off. */
static void *spare_new(struct spares *sp, size_t size, size_t off)
{
	struct td__list *l = spare_take(sp);
	void *r = l ? (char *)l - off : malloc(size);

	if (r)
		memset(r, 0, size);
	return r;
}

static void spare_put(struct spares *sp, void *r, size_t off)
{
	if (!spare_keep(sp, (struct td__list *)(void *)((char *)r + off))) {
		free(r);
		td__d->store->freed++;
	}
}

static void spares_fini(struct spares *sp, size_t off)
{
	struct td__list *l;

	while ((l = spare_take(sp)))
		free((char *)l - off);
}

#define SPARE_NEW(sp, type, member)                                           \
	((type *)spare_new(sp, sizeof(type), offsetof(type, member)))
#define SPARE_PUT(sp, r, type, member)                                        \
	spare_put(sp, r, offsetof(type, member))

/*
 * A zeroed version with room for data_len bytes of meta and blob: the
 * first spare one whose data[] is large enough, else a new one.
 */
static struct version *version_new(struct td__store *s, size_t data_len)
{
	struct version *v = NULL;
	size_t cap;

	for (struct td__list *l = s->spare_versions.head.next;
	     l != &s->spare_versions.head; l = l->next) {
		struct version *x = td__container_of(l, struct version, all);

		if (x->data_cap >= data_len) {
			td__list_del(l);
			s->spare_versions.n--;
			v = x;
			break;
		}
	}
	cap = v ? v->data_cap
		: data_len > VERSION_DATA_MIN ? data_len : VERSION_DATA_MIN;
	if (!v && !(v = malloc(sizeof(*v) + cap)))
		return NULL;
	memset(v, 0, sizeof(*v));
	v->data_cap = cap;
	return v;
}

static void version_put(struct td__store *s, struct version *v)
{
	if (!spare_keep(&s->spare_versions, &v->all)) {
		free(v);
		s->freed++;
	}
}

/* Bytes one uid holds (allocs and versions it published). */
struct uidacct {
	uid_t uid;
	uint64_t bytes;
	uint64_t picked; /* make_room(): bytes of it picked for eviction */
};

/* ---- accounting ---- */

static struct uidacct *uid_find(const struct td__store *s, uid_t uid)
{
	for (size_t i = 0; i < s->nuids; i++)
		if (s->uids[i].uid == uid)
			return &s->uids[i];
	return NULL;
}

static uint64_t uid_bytes(const struct td__store *s, uid_t uid)
{
	const struct uidacct *u = uid_find(s, uid);

	return u ? u->bytes : 0;
}

/* Charge n bytes to uid and the total. -ENOMEM leaves both unchanged. */
static int acct_add(struct td__store *s, uid_t uid, uint64_t n)
{
	struct uidacct *u = uid_find(s, uid);

	if (n == 0)
		return 0;
	if (!u) {
		if (s->nuids == s->uids_cap) {
			size_t cap = s->uids_cap ? s->uids_cap * 2 : 16;
			struct uidacct *a = realloc(s->uids, cap * sizeof(*a));

			if (!a)
				return -ENOMEM;
			s->uids = a;
			s->uids_cap = cap;
		}
		u = &s->uids[s->nuids++];
		*u = (struct uidacct){uid, 0, 0};
	}
	u->bytes += n;
	s->total += n;
	return 0;
}

/* Take n bytes off uid's count only (the total keeps them). */
static void acct_sub_uid(struct td__store *s, uid_t uid, uint64_t n)
{
	struct uidacct *u = uid_find(s, uid);

	if (!u)
		return;
	/* clamped: a version charged to the total only (restore) */
	u->bytes -= n < u->bytes ? n : u->bytes;
	if (u->bytes == 0)
		*u = s->uids[--s->nuids];
}

static void acct_sub(struct td__store *s, uid_t uid, uint64_t n)
{
	s->total -= n;
	acct_sub_uid(s, uid, n);
}

/* ---- buffer ids ---- */

static uint64_t buf_ref(struct td__store *s, dev_t dev, ino_t ino)
{
	struct buf *b;

	for (size_t i = 0; i < s->nbufs; i++)
		if (s->bufs[i].dev == dev && s->bufs[i].ino == ino) {
			s->bufs[i].refs++;
			return s->bufs[i].id;
		}
	if (s->nbufs == s->bufs_cap) {
		size_t cap = s->bufs_cap ? s->bufs_cap * 2 : 64;
		b = realloc(s->bufs, cap * sizeof(*b));
		if (!b)
			return s->next_buf++; /* unshared id: still correct */
		s->bufs = b;
		s->bufs_cap = cap;
	}
	b = &s->bufs[s->nbufs++];
	*b = (struct buf){dev, ino, s->next_buf++, 1};
	return b->id;
}

static void buf_unref(struct td__store *s, dev_t dev, ino_t ino)
{
	for (size_t i = 0; i < s->nbufs; i++)
		if (s->bufs[i].dev == dev && s->bufs[i].ino == ino) {
			if (--s->bufs[i].refs == 0)
				s->bufs[i] = s->bufs[--s->nbufs];
			return;
		}
}

/* Take ownership of fd as a stored plane (tracked) or fence. */
static void vfd_set(struct td__store *s, struct vfd *f, int fd, bool plane,
		    uid_t uid)
{
	struct stat st;

	f->fd = fd;
	f->ro = -1;
	f->uid = uid;
	td__tenant_add(uid, TD__LIM_FDS, 1);
	f->size = 0;
	f->tracked = false;
	if (plane && fstat(fd, &st) == 0) {
		f->dev = st.st_dev;
		f->ino = st.st_ino;
		f->tracked = true;
		f->buffer_id = buf_ref(s, st.st_dev, st.st_ino);
		return;
	}
	/* fences share one anonymous inode: never a shared id */
	f->buffer_id = s->next_buf++;
}

static void vfd_close(struct td__store *s, struct vfd *f)
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
		buf_unref(s, f->dev, f->ino);
	if (f->sid)
		td__fdstore_drop(f->sid);
	f->sid = 0;
	close(f->fd);
	f->fd = -1;
}

/* Move src (its fds, its buffer-table reference) into dst. */
static void vfd_move(struct vfd *dst, struct vfd *src)
{
	*dst = *src;
	src->fd = src->ro = -1;
	src->sid = 0;
}

/* What consumers get: the read-only reopen of a recyclable buffer. */
static int vfd_out(const struct vfd *f)
{
	return f->ro >= 0 ? f->ro : f->fd;
}

/* ---- recycled buffers (docs/fastpath.md, "Recycled loans") ---- */

static void freebuf_drop(struct td__store *s, struct freebuf *fb)
{
	td__list_del(&fb->link);
	td__list_del(&fb->slink);
	fb->peer->n_freebufs--;
	acct_sub(s, fb->uid, fb->f.size);
	vfd_close(s, &fb->f);
	SPARE_PUT(&s->spare_freebufs, fb, struct freebuf, link);
}

/* Would n more bytes charged to uid fit --max-bytes and uid's quota? */
static bool fits(const struct td__store *s, uid_t uid, uint64_t n)
{
	const struct td__daemon *d = s->d;
	uint64_t max = d->opts.max_bytes, t = s->total;
	uint64_t qmax = td__tenant_quota(uid);
	uint64_t mine = uid_bytes(s, uid);

	return !(max && (t + n < t || t + n > max)) &&
	       !(qmax && (mine + n < mine || mine + n > qmax));
}

/*
 * A recyclable buffer of a version that is gone (retired, unleased): back
 * to its producer's connection, charged to uid again, when that
 * connection is alive and the bytes fit the limits (the oldest of its
 * free list makes way beyond TD__MAX_FREEBUFS); otherwise closed. f is
 * consumed either way.
 */
static void freebuf_keep(struct td__store *s, struct td__peer *p, uid_t uid,
			 struct vfd *f)
{
	struct freebuf *fb = NULL;

	if (p && !p->dead && p->n_freebufs >= TD__MAX_FREEBUFS)
		freebuf_drop(s, td__container_of(p->freebufs.next,
						 struct freebuf, link));
	if (!p || p->dead || !fits(s, uid, f->size) ||
	    !(fb = SPARE_NEW(&s->spare_freebufs, struct freebuf, link)) ||
	    acct_add(s, uid, f->size) < 0) {
		if (fb)
			SPARE_PUT(&s->spare_freebufs, fb, struct freebuf,
				  link);
		vfd_close(s, f);
		return;
	}
	/* recyclable versions are never in the fd store (restart) */
	if (f->sid)
		td__fdstore_drop(f->sid);
	f->sid = 0;
	vfd_move(&fb->f, f);
	fb->peer = p;
	fb->uid = uid;
	td__list_add_tail(&p->freebufs, &fb->link);
	td__list_add_tail(&s->freebufs, &fb->slink);
	p->n_freebufs++;
}

/* ---- versions and names ---- */

static void version_unref(struct td__store *s, struct version *v)
{
	if (--v->refs)
		return;
	/* a leased version never gets here: its bytes stayed intact */
	for (uint32_t i = 0; i < v->nfds; i++)
		if (v->fds[i].ro < 0)
			vfd_close(s, &v->fds[i]);
	if (v->unowned)
		s->total -= v->acct; /* uid's count let go at retire() */
	else
		acct_sub(s, v->uid, v->acct);
	for (uint32_t i = 0; i < v->nfds; i++)
		if (v->fds[i].fd >= 0)
			freebuf_keep(s, v->owner, v->uid, &v->fds[i]);
	td__list_del(&v->all);
	td__log(TD_LOG_DEBUG, "freed %.*s version %llu", (int)v->name_len,
		v->name, (unsigned long long)v->number);
	version_put(s, v);
}

/*
 * v leaves its name (replaced or deleted). When only other uids hold it
 * leased, its bytes stop counting against its publisher's quota: they are
 * those readers' pinned bytes now (td__tenant, TD__LIM_PINNED), and a
 * reader's leases cannot push a producer out of its own quota. They stay
 * in --max-bytes until the last lease ends.
 */
static void retire(struct td__store *s, struct version *v)
{
	if (v->lease_count && v->foreign_leases == v->lease_count &&
	    !v->unowned) {
		acct_sub_uid(s, v->uid, v->acct);
		v->unowned = true;
	}
}

static int name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

/* Index of the first name >= key (exact match when *found). */
static size_t name_find(const struct td__store *s, const char *key,
			size_t len, bool *found)
{
	size_t lo = 0, hi = s->count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct version *v = s->names[mid];

		if (name_cmp(v->name, v->name_len, key, len) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < s->count && name_cmp(s->names[lo]->name,
					   s->names[lo]->name_len, key,
					   len) == 0;
	return lo;
}

/*
 * A version replaced or deleted but kept alive by a lease: GET EXACT may
 * take another lease on it (same bytes, still immutable).
 */
static struct version *retired(struct td__store *s, struct td_wire_str n,
			       uint64_t number)
{
	for (struct td__list *l = s->versions.next; l != &s->versions;
	     l = l->next) {
		struct version *v = td__container_of(l, struct version, all);

		if (v->number == number && v->name_len == n.len &&
		    memcmp(v->name, n.ptr, n.len) == 0)
			return v;
	}
	return NULL;
}

static struct version *lookup(struct td__store *s, struct td_wire_str n)
{
	bool found;
	size_t i = name_find(s, n.ptr, n.len, &found);

	return found ? s->names[i] : NULL;
}

/* ---- helpers ---- */

static void close_fds(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (fds[i] >= 0) {
			close(fds[i]);
			fds[i] = -1;
		}
}

static bool name_matches(const struct watch *w, const char *name,
			 uint16_t len)
{
	if (w->prefix)
		return len >= w->len && memcmp(name, w->name, w->len) == 0;
	return len == w->len && memcmp(name, w->name, len) == 0;
}

/* Reply for a body that failed to decode. */
static void bad_body(struct td__peer *p, const struct td_wire_hdr *h, int rc,
		     const struct td_err *e)
{
	td__peer_error(p, h->opcode, h->request_id, rc, "%s: %s: %s",
		       td_wire_op_name(h->opcode), e->field ? e->field : "body",
		       e->reason ? e->reason : "invalid");
}

static bool may(const struct td__peer *p, unsigned perm, const char *name,
		size_t len);

static void notify(struct td__store *s, uint32_t event,
		   const struct version *v)
{
	struct td__daemon *d = s->d;

	for (struct td__list *l = s->watches.next; l != &s->watches;
	     l = l->next) {
		struct watch *w = td__container_of(l, struct watch, slink);
		struct td_wire_notify n = {
			w->id, event, v->number, {v->name, v->name_len}};
		int64_t len;

		if (w->peer->dead || !name_matches(w, v->name, v->name_len) ||
		    !may(w->peer, TD__PERM_READ, v->name, v->name_len))
			continue;
		len = td_wire_notify_encode(&n, TD__TX_BODY(d), TD__TX_CAP);
		if (len >= 0)
			td__peer_send(w->peer, TD_OP_NOTIFY, TD_WIRE_F_NOTIFY,
				      0, 0, (size_t)len, NULL, 0);
	}
}

/* ---- access policy ---- */

/*
 * May p do perm on name? Without --policy everyone may; the daemon's own
 * uid (its operator) always may.
 */
static bool may(const struct td__peer *p, unsigned perm, const char *name,
		size_t len)
{
	const struct td__policy *pol = td__d->policy;
	struct td__cred c = {p->uid, p->gid, p->groups, p->ngroups};

	if (!pol || p->uid == geteuid())
		return true;
	return td__policy_allows(pol, &c, perm, name, len);
}

static bool may_any(const struct td__peer *p, unsigned perm)
{
	const struct td__policy *pol = td__d->policy;
	struct td__cred c = {p->uid, p->gid, p->groups, p->ngroups};

	if (!pol || p->uid == geteuid())
		return true;
	return td__policy_any(pol, &c, perm);
}

/* The -EACCES reply; false so that callers can `if (!allowed(...))`. */
static bool allowed(struct td__peer *p, const struct td_wire_hdr *h,
		    unsigned perm, struct td_wire_str name)
{
	if (may(p, perm, name.ptr, name.len))
		return true;
	td__peer_error(p, h->opcode, h->request_id, -EACCES,
		       "uid %u may not %s \"%.*s\" (policy %s)",
		       (unsigned)p->uid,
		       perm == TD__PERM_WRITE ? "write" : "read",
		       (int)name.len, name.ptr, td__d->opts.policy_path);
	return false;
}

bool td__store_name_taken(struct td_wire_str name)
{
	return lookup(td__d->store, name) != NULL;
}

/* For daemon/ring.c: the same policy gate as the store's requests. */
bool td__store_allowed(struct td__peer *p, const struct td_wire_hdr *h,
		       unsigned perm, struct td_wire_str name)
{
	return allowed(p, h, perm, name);
}

/* ---- quotas and eviction ---- */

static void name_remove(struct td__store *s, const struct version *v)
{
	bool found;
	size_t at = name_find(s, v->name, v->name_len, &found);

	if (!found || s->names[at] != v)
		return;
	memmove(&s->names[at], &s->names[at + 1],
		(s->count - at - 1) * sizeof(*s->names));
	s->count--;
}

/*
 * May make_room() for uid evict what owner holds? Its own, always; another
 * uid's only for --max-bytes (not for uid's quota), and only while that
 * uid holds more than its fair share (less what is picked of it already).
 */
static bool evictable(const struct td__store *s, uid_t owner, uid_t uid,
		      bool over_uid, uint64_t fair)
{
	const struct uidacct *u;

	if (owner == uid)
		return true;
	if (over_uid)
		return false;
	u = uid_find(s, owner);
	return u && u->bytes > u->picked + fair;
}

static void pick(struct td__store *s, uid_t owner, uint64_t n)
{
	struct uidacct *u = uid_find(s, owner);

	if (u)
		u->picked += n;
}

/* What a make_room() shortage was, for the reply. */
struct room {
	int rc;             /* -ENOSPC (--max-bytes) or -EDQUOT (uid quota) */
	uint64_t limit, in_use;
};

/*
 * Room for `add` more bytes charged to uid, under --max-bytes and uid's
 * quota. `old` is the version a PUBLISH replaces: it goes anyway, so its
 * bytes count as free when nobody leases it, and it is never picked.
 * Otherwise the least recently used versions that nobody leases and
 * nobody pinned are evicted (only uid's own when uid's quota is short) -
 * with `dry` only picked and unpicked, so a PUBLISH can check before it
 * seals and evict after. 0, or -ENOSPC/-EDQUOT with *why filled.
 */
static int make_room(struct td__store *s, uid_t uid, uint64_t add,
		     const struct version *old, bool dry, struct room *why)
{
	struct td__daemon *d = s->d;
	uint64_t max = d->opts.max_bytes;
	uint64_t qmax = td__tenant_quota(uid);
	uint64_t total = s->total, mine = uid_bytes(s, uid), fair;
	int rc = 0;

	if (old && old->refs == 1) {
		total -= old->acct;
		if (old->uid == uid)
			mine -= old->acct;
	} else if (old && old->uid == uid &&
		   old->foreign_leases == old->lease_count) {
		mine -= old->acct; /* it leaves uid's count (retire()) */
	}
	/*
	 * Fairness when --max-bytes is short: besides uid's own, only
	 * versions (and idle recyclable buffers) of uids holding more than
	 * a fair share, max_bytes / the number of uids holding bytes (uid
	 * included), are candidates; a uid stops being one once what is
	 * picked of it brings it down to its share.
	 */
	fair = max / (uint64_t)(s->nuids + (uid_find(s, uid) ? 0 : 1));
	for (;;) {
		bool over_total = max && (total + add < total ||
					  total + add > max);
		bool over_uid = qmax && (mine + add < mine ||
					 mine + add > qmax);
		struct version *lru = NULL;
		struct freebuf *fb = NULL;

		if (!over_total && !over_uid)
			break;
		/* recyclable buffers nobody uses go first, oldest first */
		for (struct td__list *l = s->freebufs.next;
		     l != &s->freebufs && !fb; l = l->next) {
			struct freebuf *f = td__container_of(l, struct freebuf,
							     slink);

			if (!f->evict &&
			    evictable(s, f->uid, uid, over_uid, fair))
				fb = f;
		}
		if (fb) {
			fb->evict = true;
			total -= fb->f.size;
			if (fb->uid == uid)
				mine -= fb->f.size;
			pick(s, fb->uid, fb->f.size);
			continue;
		}
		for (size_t i = 0; i < s->count; i++) {
			struct version *v = s->names[i];

			if (v == old || v->evict || v->refs != 1 ||
			    (v->flags & TD_WIRE_PUB_PIN) ||
			    !evictable(s, v->uid, uid, over_uid, fair))
				continue;
			if (!lru || v->used < lru->used)
				lru = v;
		}
		if (!lru) {
			why->rc = rc = over_uid ? -EDQUOT : -ENOSPC;
			why->limit = over_uid ? qmax : max;
			why->in_use = over_uid ? mine : total;
			break;
		}
		lru->evict = true;
		total -= lru->acct;
		if (lru->uid == uid)
			mine -= lru->acct;
		pick(s, lru->uid, lru->acct);
	}
	for (size_t i = 0; i < s->nuids; i++)
		s->uids[i].picked = 0;
	/* unpick (dry, or failed: evict nothing) or evict what was picked */
	for (struct td__list *l = s->freebufs.next, *n; l != &s->freebufs;
	     l = n) {
		struct freebuf *f = td__container_of(l, struct freebuf, slink);

		n = l->next;
		if (!f->evict)
			continue;
		f->evict = false;
		if (!dry && rc == 0)
			freebuf_drop(s, f);
	}
	for (size_t i = 0; i < s->count;) {
		struct version *v = s->names[i];

		if (!v->evict) {
			i++;
			continue;
		}
		v->evict = false;
		if (dry || rc < 0) {
			i++;
			continue;
		}
		td__log(TD_LOG_INFO,
			"evicted %.*s version %llu (%llu bytes of uid %u) "
			"for uid %u",
			(int)v->name_len, v->name,
			(unsigned long long)v->number,
			(unsigned long long)v->acct, (unsigned)v->uid,
			(unsigned)uid);
		name_remove(s, v); /* s->names[i] is the next one now */
		notify(s, TD_EVENT_DELETED, v);
		version_unref(s, v);
	}
	return rc;
}

/* The reply for a make_room() failure. */
static void room_error(struct td__peer *p, const struct td_wire_hdr *h,
		       uint64_t add, const struct room *r)
{
	td__peer_error(p, h->opcode, h->request_id, r->rc,
		       "%s of %llu bytes exceeds %s (%llu in use of %llu) "
		       "and nothing more can be evicted (what is held is "
		       "leased, pinned or not yet published)",
		       td_wire_op_name(h->opcode), (unsigned long long)add,
		       r->rc == -EDQUOT ? "the uid quota" : "--max-bytes",
		       (unsigned long long)r->in_use,
		       (unsigned long long)r->limit);
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
	struct room room = {0};

	if (make_room(s, p->uid, bytes, NULL, false, &room) < 0) {
		room_error(p, h, bytes, &room);
		return room.rc;
	}
	if (acct_add(s, p->uid, bytes) < 0) {
		td__peer_error(p, h->opcode, h->request_id, -ENOMEM,
			       "out of memory");
		return -ENOMEM;
	}
	return 0;
}

void td__store_uncharge(uid_t uid, uint64_t bytes)
{
	if (bytes)
		acct_sub(td__d->store, uid, bytes);
}

/* ---- GET, leases ---- */

/*
 * Whether the reply may leave out entry f: a plane buffer the SCM client
 * says it has mapped (held). The list is believed for this and nothing
 * else: a client that lies only gets a reply it cannot map. Fences are
 * always attached (a fresh one each time, never cached by the client).
 */
static bool held_by_client(const struct vfd *f, uint32_t held_count,
			   const uint64_t *held)
{
	if (!f->tracked)
		return false;
	for (uint32_t i = 0; i < held_count; i++)
		if (held[i] == f->buffer_id)
			return true;
	return false;
}

/* A lease record: a spare one, else a new one (NULL: no memory). */
static struct lease *lease_new(struct td__store *s)
{
	struct lease *l;

	if (td__list_empty(&s->free_leases))
		return malloc(sizeof(*l));
	l = td__container_of(s->free_leases.next, struct lease, link);
	td__list_del(&l->link);
	s->n_free_leases--;
	return l;
}

/* Give back what l counted for uid and keep the record (or free it). */
static void lease_put(struct td__store *s, struct lease *l, uid_t uid)
{
	td__tenant_sub(uid, TD__LIM_LEASES, 1);
	td__tenant_sub(uid, TD__LIM_PINNED, l->pinned);
	l->pinned = 0;
	if (s->n_free_leases < LEASE_CACHE) {
		td__list_add_tail(&s->free_leases, &l->link);
		s->n_free_leases++;
	} else {
		free(l);
		s->freed++;
	}
}

static void reply_get(struct td__peer *p, uint16_t op, uint64_t request_id,
		      uint32_t flags, uint32_t held_count,
		      const uint64_t *held, struct version *v)
{
	struct td__daemon *d = td__d;
	struct td__store *s = d->store;
	struct td_wire_get_rep r;
	int fds[TABLE_MAX];
	unsigned nsend = 0;
	struct lease *l;
	int64_t len;

	/* a reader holding another uid's version pins those bytes */
	uint64_t pin = v->uid != p->uid ? v->acct : 0;
	int rc;

	if (p->n_leases >= TD__MAX_LEASES) {
		td__peer_error(p, op, request_id, -ENOBUFS,
			       "too many leases on this connection (max %d)",
			       TD__MAX_LEASES);
		return;
	}
	char why[256];

	rc = td__tenant_check(p->uid, TD__LIM_LEASES, 1, why, sizeof(why));
	if (rc == 0)
		rc = td__tenant_check(p->uid, TD__LIM_PINNED, pin, why,
				      sizeof(why));
	if (rc < 0) {
		td__peer_error(p, op, request_id, rc,
			       "GET \"%.*s\" (%llu bytes of uid %u): %s; "
			       "release leases first",
			       (int)v->name_len, v->name,
			       (unsigned long long)v->acct, (unsigned)v->uid,
			       why);
		return;
	}
	l = lease_new(s);
	if (l)
		l->pinned = 0;
	if (!l || td__tenant_add(p->uid, TD__LIM_LEASES, 1) < 0 ||
	    td__tenant_add(p->uid, TD__LIM_PINNED, pin) < 0) {
		if (l)
			lease_put(s, l, p->uid);
		td__peer_error(p, op, request_id, -ENOMEM, "out of memory");
		return;
	}
	l->id = s->next_lease++;
	l->v = v;
	l->ring = NULL;
	l->pinned = pin;
	v->used = ++s->tick;
	v->refs++;
	v->lease_count++;
	v->foreign_leases += v->uid != p->uid;
	td__list_add_tail(&p->leases, &l->link);
	p->n_leases++;

	r = (struct td_wire_get_rep){
		.version = v->number,
		.lease_id = l->id,
		.meta = {v->meta, v->meta_len},
		.blob = {v->blob, v->blob_len},
		.fd_count = v->nfds,
	};
	for (uint32_t i = 0; i < v->nfds; i++) {
		r.fds[i].fd = vfd_out(&v->fds[i]);
		r.fds[i].buffer_id = v->fds[i].buffer_id;
		/* held ids come only with TD_WIRE_REQ_SCM (wire decoder) */
		if (held_by_client(&v->fds[i], held_count, held))
			r.fds[i].fd = -1;
		else
			fds[nsend++] = r.fds[i].fd;
	}
	len = td_wire_get_rep_encode(&r, TD__TX_BODY(d), TD__TX_CAP);
	/* cannot fail: blob and meta were bounded when published */
	td__peer_send(p, op, TD_WIRE_F_REPLY, request_id, 0,
		      len < 0 ? 0 : (size_t)len, fds,
		      (flags & TD_WIRE_REQ_SCM) ? nsend : 0);
}

static void lease_drop(struct td__store *s, struct td__peer *p,
		       struct lease *l)
{
	td__list_del(&l->link);
	p->n_leases--;
	if (l->ring) {
		td__ring_unlease(l->ring, l->slot);
	} else {
		l->v->lease_count--;
		l->v->foreign_leases -= l->v->uid != p->uid;
		version_unref(s, l->v);
	}
	lease_put(s, l, p->uid);
}

int td__store_lease_ring(struct td__peer *p, struct td__ring *r,
			 uint32_t slot, uint64_t *id)
{
	struct td__store *s = td__d->store;
	struct lease *l;

	if (p->n_leases >= TD__MAX_LEASES)
		return -ENOBUFS;
	if (td__tenant_check(p->uid, TD__LIM_LEASES, 1, td__d->reason,
			     sizeof(td__d->reason)) < 0)
		return -EDQUOT;
	l = lease_new(s);
	if (!l)
		return -ENOMEM;
	l->pinned = 0;
	if (td__tenant_add(p->uid, TD__LIM_LEASES, 1) < 0) {
		/* no entry for uid was made: the sub in lease_put is a no-op */
		lease_put(s, l, p->uid);
		return -ENOMEM;
	}
	l->id = s->next_lease++;
	l->v = NULL;
	l->ring = r;
	l->slot = slot;
	td__list_add_tail(&p->leases, &l->link);
	p->n_leases++;
	*id = l->id;
	return 0;
}

static void waiter_free(struct waiter *w)
{
	td__list_del(&w->link);
	td__list_del(&w->slink);
	w->peer->n_waiters--;
	td__tenant_sub(w->peer->uid, TD__LIM_WAITERS, 1);
	SPARE_PUT(&td__d->store->spare_waiters, w, struct waiter, link);
}

static void on_timer(uv_timer_t *t);

static void rearm(struct td__store *s)
{
	uint64_t next = UINT64_MAX, now = uv_now(s->d->loop);

	for (struct td__list *l = s->waiters.next; l != &s->waiters;
	     l = l->next) {
		struct waiter *w = td__container_of(l, struct waiter, slink);

		if (w->deadline < next)
			next = w->deadline;
	}
	if (next == UINT64_MAX) {
		uv_timer_stop(&s->timer);
		return;
	}
	uv_timer_start(&s->timer, on_timer, next > now ? next - now : 0, 0);
}

static void on_timer(uv_timer_t *t)
{
	struct td__store *s = t->data;
	uint64_t now = uv_now(s->d->loop);
	struct td__list *l, *n;

	for (l = s->waiters.next; l != &s->waiters; l = n) {
		struct waiter *w = td__container_of(l, struct waiter, slink);

		n = l->next;
		if (w->deadline > now)
			continue;
		if (w->rewrite)
			td__peer_error(w->peer, TD_OP_GET, w->request_id,
				       -ETIMEDOUT,
				       "ring \"%.*s\": the producer started "
				       "rewriting its latest version and "
				       "published nothing within %d ms",
				       (int)w->len, w->name,
				       RING_REWRITE_WAIT_MS);
		else if (w->mode == TD_GET_NEWER)
			td__peer_error(w->peer, TD_OP_GET, w->request_id,
				       -ETIMEDOUT,
				       "no version of \"%.*s\" newer than "
				       "%llu within %u ms",
				       (int)w->len, w->name,
				       (unsigned long long)w->version,
				       w->timeout_ms);
		else
			td__peer_error(w->peer, TD_OP_GET, w->request_id,
				       -ETIMEDOUT,
				       "no tensor named \"%.*s\" within %u ms",
				       (int)w->len, w->name, w->timeout_ms);
		waiter_free(w);
	}
	rearm(s);
}

static void wake(struct td__store *s, struct version *v)
{
	struct td__list *l, *n;

	for (l = s->waiters.next; l != &s->waiters; l = n) {
		struct waiter *w = td__container_of(l, struct waiter, slink);

		n = l->next;
		if (w->peer->dead || w->len != v->name_len ||
		    memcmp(w->name, v->name, w->len) != 0)
			continue;
		if (w->mode == TD_GET_NEWER && v->number <= w->version)
			continue;
		reply_get(w->peer, TD_OP_GET, w->request_id, w->flags,
			  w->held_count, w->held, v);
		waiter_free(w);
	}
	rearm(s);
}

static void op_get(struct td__peer *p, const struct td_wire_hdr *h,
		   const uint8_t *body)
{
	struct td__store *s = td__d->store;
	struct td_wire_get_req m;
	struct td_err e = {0};
	struct td__ring *ring = NULL;
	struct version *v;
	struct waiter *w;
	bool rewrite = false;
	char why[256];
	int rc = td_wire_get_req_decode(body, h->body_len, &m, &e);

	if (rc < 0) {
		bad_body(p, h, rc, &e);
		return;
	}
	/* before the lookup: a refusal must not tell whether it exists */
	if (!allowed(p, h, TD__PERM_READ, m.name))
		return;
	v = lookup(s, m.name);
	/* a ring name: lease its latest slot (EXACT: any slot) */
	if (!v && (ring = td__ring_find(m.name))) {
		rc = td__ring_try_get(p, h->opcode, h->request_id, m.flags,
				      m.mode, m.version, ring);
		if (rc > 0)
			return;
		rewrite = rc == -EAGAIN;
	}
	if (m.mode == TD_GET_EXACT) {
		struct version *x = retired(s, m.name, m.version);

		if (v && v->number == m.version)
			x = v;
		if (x) {
			reply_get(p, h->opcode, h->request_id, m.flags,
				  m.held_count, m.held, x);
			return;
		}
		if (v)
			td__peer_error(p, h->opcode, h->request_id, -ENOENT,
				       "version %llu of \"%.*s\" is neither "
				       "current (%llu) nor still leased",
				       (unsigned long long)m.version,
				       (int)m.name.len, m.name.ptr,
				       (unsigned long long)v->number);
		else
			td__peer_error(p, h->opcode, h->request_id, -ENOENT,
				       "no tensor named \"%.*s\"",
				       (int)m.name.len, m.name.ptr);
		return;
	}
	if (v && (m.mode == TD_GET_LATEST || v->number > m.version)) {
		reply_get(p, h->opcode, h->request_id, m.flags, m.held_count,
			  m.held, v);
		return;
	}
	if (m.timeout_ms == 0 && !rewrite) {
		if (m.mode == TD_GET_LATEST && ring)
			td__peer_error(p, h->opcode, h->request_id, -ENOENT,
				       "ring \"%.*s\" has no version yet",
				       (int)m.name.len, m.name.ptr);
		else if (m.mode == TD_GET_LATEST)
			td__peer_error(p, h->opcode, h->request_id, -ENOENT,
				       "no tensor named \"%.*s\"",
				       (int)m.name.len, m.name.ptr);
		else
			td__peer_error(p, h->opcode, h->request_id,
				       -ETIMEDOUT,
				       "no version of \"%.*s\" newer than "
				       "%llu",
				       (int)m.name.len, m.name.ptr,
				       (unsigned long long)m.version);
		return;
	}
	if (p->n_waiters >= TD__MAX_WAITERS) {
		td__peer_error(p, h->opcode, h->request_id, -EAGAIN,
			       "too many parked GETs on this connection "
			       "(max %d)",
			       TD__MAX_WAITERS);
		return;
	}
	rc = td__tenant_check(p->uid, TD__LIM_WAITERS, 1, why, sizeof(why));
	if (rc < 0) {
		td__peer_error(p, h->opcode, h->request_id, rc,
			       "GET cannot wait: %s", why);
		return;
	}
	w = SPARE_NEW(&s->spare_waiters, struct waiter, link);
	if (!w || td__tenant_add(p->uid, TD__LIM_WAITERS, 1) < 0) {
		if (w)
			SPARE_PUT(&s->spare_waiters, w, struct waiter, link);
		td__peer_error(p, h->opcode, h->request_id, -ENOMEM,
			       "out of memory");
		return;
	}
	w->peer = p;
	w->request_id = h->request_id;
	w->mode = m.mode;
	w->flags = m.flags;
	w->version = m.version;
	w->held_count = m.held_count;
	memcpy(w->held, m.held, m.held_count * sizeof(*m.held));
	w->timeout_ms = m.timeout_ms;
	w->rewrite = rewrite && m.timeout_ms < RING_REWRITE_WAIT_MS;
	w->deadline = m.timeout_ms == TD_WIRE_WAIT_FOREVER
			      ? UINT64_MAX
			      : uv_now(td__d->loop) +
					(w->rewrite ? RING_REWRITE_WAIT_MS
						    : m.timeout_ms);
	w->len = m.name.len;
	memcpy(w->name, m.name.ptr, m.name.len);
	td__list_add_tail(&p->waiters, &w->link);
	td__list_add_tail(&s->waiters, &w->slink);
	p->n_waiters++;
	rearm(s);
	if (ring)
		td__ring_poll_arm();
}

bool td__store_ring_poll(void)
{
	struct td__store *s = td__d->store;
	struct td__list *l, *n;
	bool any = false, served = false;

	for (l = s->waiters.next; l != &s->waiters; l = n) {
		struct waiter *w = td__container_of(l, struct waiter, slink);
		struct td__ring *r;

		n = l->next;
		if (w->peer->dead)
			continue;
		/* a name with no live ring stays an ordinary parked GET */
		r = td__ring_find((struct td_wire_str){w->name, w->len});
		if (!r)
			continue;
		if (td__ring_try_get(w->peer, TD_OP_GET, w->request_id,
				     w->flags, w->mode, w->version, r) > 0) {
			waiter_free(w);
			served = true;
			continue;
		}
		any = true;
	}
	if (served)
		rearm(s);
	return any;
}

static void op_release(struct td__peer *p, const struct td_wire_hdr *h,
		       const uint8_t *body)
{
	struct td__store *s = td__d->store;
	struct td_wire_release_req m;
	struct td_err e = {0};
	int rc = td_wire_release_req_decode(body, h->body_len, &m, &e);

	if (rc < 0) {
		bad_body(p, h, rc, &e);
		return;
	}
	/* only this connection's leases: ids of others are not ours to end */
	for (struct td__list *l = p->leases.next; l != &p->leases;
	     l = l->next) {
		struct lease *ls = td__container_of(l, struct lease, link);

		if (ls->id != m.lease_id)
			continue;
		lease_drop(s, p, ls);
		td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
			      0, NULL, 0);
		return;
	}
	td__peer_error(p, h->opcode, h->request_id, -ENOENT,
		       "no lease %llu on this connection",
		       (unsigned long long)m.lease_id);
}

/* ---- ALLOC ---- */

static void alloc_free(struct td__store *s, struct alloc *a)
{
	for (uint32_t i = 0; i < a->count; i++)
		vfd_close(s, &a->fds[i]);
	acct_sub(s, a->uid, a->acct);
	SPARE_PUT(&s->spare_allocs, a, struct alloc, link);
}

static bool over_quota(const struct td__store *s, uint64_t add,
		       uint64_t freed)
{
	uint64_t max = s->d->opts.max_bytes, t = s->total - freed;

	return max && (t + add < t || t + add > max);
}

/*
 * A free buffer of p for a plane of `size` bytes: one the client says it
 * holds mapped (held ids) first, else any of that size. Oldest first.
 */
static struct freebuf *freebuf_pick(struct td__peer *p, uint64_t size,
				    const struct td_wire_alloc_req *m,
				    bool *held)
{
	struct freebuf *any = NULL;

	for (struct td__list *l = p->freebufs.next; l != &p->freebufs;
	     l = l->next) {
		struct freebuf *fb = td__container_of(l, struct freebuf, link);

		if (fb->f.size != size)
			continue;
		for (uint32_t i = 0; i < m->held_count; i++)
			if (m->held[i] == fb->f.buffer_id) {
				*held = true;
				return fb;
			}
		if (!any)
			any = fb;
	}
	*held = false;
	return any;
}

static void op_alloc(struct td__peer *p, const struct td_wire_hdr *h,
		     const uint8_t *body)
{
	struct td__daemon *d = td__d;
	struct td__store *s = d->store;
	struct td_wire_alloc_req m;
	struct td_wire_alloc_rep r = {0};
	struct td_err e = {0};
	struct alloc *a;
	const char *why = NULL;
	int fds[TD_WIRE_MAX_PLANES];
	bool held[TD_WIRE_MAX_PLANES] = {false};
	unsigned nsend = 0, nfresh = 0;
	char lim[256];
	struct room room;
	uint64_t sum = 0, fresh = 0;
	int64_t len;
	int rc = td_wire_alloc_req_decode(body, h->body_len, &m, &e);

	if (rc < 0) {
		bad_body(p, h, rc, &e);
		return;
	}
	if (m.plane_count == 0) {
		td__peer_error(p, h->opcode, h->request_id, -EINVAL,
			       "ALLOC of zero planes");
		return;
	}
	for (uint32_t i = 0; i < m.plane_count; i++) {
		/*
		 * Size 0 is a valid plane (an empty tensor, e.g. shape
		 * [0, 4]): an empty memfd that nobody maps.
		 */
		if (td__add_ovf(sum, m.sizes[i], &sum)) {
			td__peer_error(p, h->opcode, h->request_id, -EOVERFLOW,
				       "plane sizes overflow 64 bits");
			return;
		}
	}
	if (p->n_allocs >= TD__MAX_ALLOCS) {
		td__peer_error(p, h->opcode, h->request_id, -ENOBUFS,
			       "too many unpublished allocs on this "
			       "connection (max %d)",
			       TD__MAX_ALLOCS);
		return;
	}
	if (!may_any(p, TD__PERM_WRITE)) {
		td__peer_error(p, h->opcode, h->request_id, -EACCES,
			       "uid %u may not write any name (policy %s)",
			       (unsigned)p->uid, d->opts.policy_path);
		return;
	}
	a = SPARE_NEW(&s->spare_allocs, struct alloc, link);
	if (!a) {
		td__peer_error(p, h->opcode, h->request_id, -ENOMEM,
			       "out of memory");
		return;
	}
	a->id = s->next_alloc++;
	a->uid = p->uid;
	a->recycle = m.flags & TD_WIRE_ALLOC_RECYCLE;
	/*
	 * Recycled buffers first: taken off the free list (their charge
	 * moves to the alloc), so make_room() below cannot drop them.
	 */
	for (uint32_t i = 0; i < m.plane_count; i++) {
		struct freebuf *fb = a->recycle
					     ? freebuf_pick(p, m.sizes[i], &m,
							    &held[i])
					     : NULL;

		a->sizes[i] = m.sizes[i];
		a->fds[i].fd = a->fds[i].ro = -1;
		if (!fb) {
			fresh += m.sizes[i];
			nfresh++;
			continue;
		}
		vfd_move(&a->fds[i], &fb->f);
		a->acct += fb->f.size;
		td__list_del(&fb->link);
		td__list_del(&fb->slink);
		p->n_freebufs--;
		SPARE_PUT(&s->spare_freebufs, fb, struct freebuf, link);
	}
	a->count = m.plane_count;
	/* a plane is a descriptor whatever its size (zero-byte ones too) */
	rc = td__tenant_check(p->uid, TD__LIM_FDS, nfresh, lim,
			      sizeof(lim));
	if (rc < 0) {
		td__peer_error(p, h->opcode, h->request_id, rc,
			       "ALLOC of %u planes: %s", nfresh, lim);
		alloc_free(s, a);
		return;
	}
	/* evicting first frees the memory the planes are about to take */
	if (make_room(s, p->uid, fresh, NULL, false, &room) < 0) {
		room_error(p, h, fresh, &room);
		alloc_free(s, a);
		return;
	}
	for (uint32_t i = 0; i < m.plane_count; i++) {
		int fd;

		if (a->fds[i].fd >= 0)
			continue;
		rc = td__plane_create(m.sizes[i], &fd, &why);
		if (rc < 0) {
			td__peer_error(p, h->opcode, h->request_id, rc,
				       "plane %u (%llu bytes): %s: %s", i,
				       (unsigned long long)m.sizes[i], why,
				       strerror(-rc));
			alloc_free(s, a);
			return;
		}
		vfd_set(s, &a->fds[i], fd, true, a->uid);
		a->fds[i].size = m.sizes[i];
	}
	if (acct_add(s, a->uid, fresh) < 0) {
		td__peer_error(p, h->opcode, h->request_id, -ENOMEM,
			       "out of memory");
		alloc_free(s, a);
		return;
	}
	a->acct += fresh;
	for (uint32_t i = 0; i < a->count; i++) {
		/* the client maps a held buffer already: no fd for it */
		r.fds[i].fd = held[i] ? -1 : a->fds[i].fd;
		r.fds[i].buffer_id = a->fds[i].buffer_id;
		if (!held[i])
			fds[nsend++] = a->fds[i].fd;
	}
	td__list_add_tail(&p->allocs, &a->link);
	p->n_allocs++;
	r.alloc_id = a->id;
	r.fd_count = a->count;
	len = td_wire_alloc_rep_encode(&r, TD__TX_BODY(d), TD__TX_CAP);
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
		      (size_t)len, fds,
		      (m.flags & TD_WIRE_REQ_SCM) ? nsend : 0);
}

/* ---- PUBLISH ---- */

/* Everything one PUBLISH gathers; on failure every owned fd is closed. */
struct pub {
	struct td__peer *p;
	const struct td_wire_hdr *h;
	struct td_wire_publish_req m;
	struct td_blob_view view;
	struct alloc *alloc;
	uint32_t ntab;
	int tab[TABLE_MAX];   /* the daemon's fds, in fd-table order */
	bool own[TABLE_MAX];  /* tab[i] is ours to close on failure */
	struct td__plane_info info[TABLE_MAX];
	bool is_plane[TABLE_MAX];
	/* the refusal, sent only after every fd is closed (see op_publish) */
	int rc;
	char why[TD_WIRE_MAX_REASON];
};

static int pub_fail(struct pub *x, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int pub_fail(struct pub *x, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(x->why, sizeof(x->why), fmt, ap);
	va_end(ap);
	x->rc = rc;
	return rc;
}

/* Steps 1-3: the blob itself, before any descriptor is pulled. */
static int pub_check_blob(struct pub *x)
{
	const struct td_blob_view *v = &x->view;
	struct td_err e = {0};
	bool used[TABLE_MAX] = {false};
	struct td_blob_plane pl;
	int rc;

	rc = td_blob_decode(x->m.blob.ptr, x->m.blob.len, &x->view, &e);
	if (rc == 0)
		rc = td_blob_check(&x->view, x->ntab, &e);
	if (rc < 0)
		return pub_fail(x, rc, "blob: %s%s%s%s: %s",
				td_err_kind_name(e.kind), e.field ? " (" : "",
				e.field ? e.field : "", e.field ? ")" : "",
				e.reason ? e.reason : "invalid");
	if (v->plane_count == 0 ||
	    (td_blob_plane_get(v, 0, &pl) == 0 && pl.handle < 0))
		return pub_fail(x, -EINVAL,
				"inline tensors are not stored; use reference "
				"mode");
	if (v->pid != (uint32_t)x->p->pid)
		return pub_fail(x, -EPERM,
				"blob pid %u is not the connected process "
				"(pid %d)",
				v->pid, (int)x->p->pid);
	if (v->ndim > TD_WIRE_MAX_DIMS)
		return pub_fail(x, -EINVAL, "more than %d dimensions",
				TD_WIRE_MAX_DIMS);
	for (uint32_t i = 0; td_blob_plane_get(v, i, &pl) == 0; i++) {
		used[pl.handle] = true;
		x->is_plane[pl.handle] = true;
	}
	if (v->fence_fd >= 0) {
		if (x->is_plane[v->fence_fd])
			return pub_fail(x, -EINVAL,
					"fence index %d is also a plane handle",
					v->fence_fd);
		if (x->alloc && (uint32_t)v->fence_fd < x->alloc->count)
			return pub_fail(x, -EINVAL,
					"fence index %d names an alloc plane",
					v->fence_fd);
		used[v->fence_fd] = true;
	}
	for (uint32_t i = 0; i < x->ntab; i++)
		if (!used[i])
			return pub_fail(x, -EINVAL,
					"fd table entry %u is used by no plane "
					"and is not the fence",
					i);
	return 0;
}

/* Step 4: the descriptors, from the alloc, SCM_RIGHTS or pidfd_getfd. */
static int pub_take_fds(struct pub *x, int *fds, unsigned nfds)
{
	struct td__peer *p = x->p;
	bool pulled = false;

	for (uint32_t i = 0; i < x->ntab; i++) {
		if (x->alloc && i < x->alloc->count) {
			x->tab[i] = x->alloc->fds[i].fd;
			x->own[i] = false;
			if (nfds) {
				/* a copy of the alloc plane came along */
				struct stat a, b;

				if (fstat(fds[i], &b) < 0 ||
				    fstat(x->tab[i], &a) < 0 ||
				    a.st_ino != b.st_ino ||
				    a.st_dev != b.st_dev)
					return pub_fail(x, -EINVAL,
							"fd table entry %u is "
							"not plane %u of alloc "
							"%llu",
							i, i,
							(unsigned long long)
								x->alloc->id);
			}
			continue;
		}
		if (nfds) {
			x->tab[i] = fds[i];
			fds[i] = -1;
			x->own[i] = true;
			continue;
		}
		if (p->import_in != TD_IMPORT_PIDFD)
			return pub_fail(x, -EINVAL,
					"this connection imports with "
					"SCM_RIGHTS: attach the %u fds",
					x->ntab);
		x->tab[i] = td__pidfd_getfd(p->pidfd, x->m.fds[i]);
		if (x->tab[i] < 0) {
			int rc = x->tab[i];

			x->tab[i] = -1;
			return pub_fail(x, rc,
					"fd table entry %u: pidfd_getfd of "
					"producer fd %d failed: %s",
					i, x->m.fds[i], strerror(-rc));
		}
		x->own[i] = true;
		pulled = true;
	}
	/*
	 * After the pulls, before anything uses what was pulled: a process
	 * that changed credentials (a setuid exec) in between is seen here.
	 * Such a connection imports by SCM_RIGHTS from now on.
	 */
	if (pulled && td__peer_pull_check(p, x->why, sizeof(x->why)) < 0) {
		char why[sizeof(x->why)];

		static struct td__ratelimit rl;

		memcpy(why, x->why, sizeof(why));
		p->import_in = TD_IMPORT_SCM;
		if (td__ratelimit_ok(&rl, TD__LOG_INTERVAL_MS)) {
			td__log(TD_LOG_WARN, "peer pid %d uid %u: pidfd "
				"import refused: %s (%lu more since the last "
				"such line)", (int)p->pid, (unsigned)p->uid,
				why, rl.suppressed);
			rl.suppressed = 0;
		}
		return pub_fail(x, -EPERM,
				"pidfd import refused: %s; attach the fds "
				"(SCM_RIGHTS)",
				why);
	}
	return 0;
}

/* Step 5: every descriptor checked before anything is sealed or kept. */
static int pub_check_fds(struct pub *x)
{
	const struct td_blob_view *v = &x->view;
	struct td_blob_plane pl;
	const char *why = NULL;
	struct td_err e = {0};
	int rc;

	for (uint32_t i = 0; i < x->ntab; i++) {
		if (!x->is_plane[i]) {
			rc = td__fence_check(x->tab[i], &why);
			if (rc < 0)
				return pub_fail(x, rc, "fd table entry %u: %s",
						i, why);
			continue;
		}
		rc = td__plane_probe(x->tab[i], &x->info[i], &why);
		if (rc < 0)
			return pub_fail(x, rc, "fd table entry %u: %s", i,
					why);
		bool dmabuf = x->info[i].type == TD__PLANE_DMABUF;

		if (dmabuf != (v->storage_kind == TD_STORAGE_DMABUF))
			return pub_fail(x, -EINVAL,
					"fd table entry %u is a %s but the "
					"blob says storage_kind %s",
					i, dmabuf ? "dma-buf" : "memfd",
					td_storage_kind_name(v->storage_kind));
		for (uint32_t j = 0; j < i; j++)
			if (x->is_plane[j] &&
			    x->info[j].dev == x->info[i].dev &&
			    x->info[j].ino == x->info[i].ino)
				return pub_fail(x, -EINVAL,
						"fd table entries %u and %u "
						"are the same buffer",
						j, i);
	}
	for (uint32_t i = 0; td_blob_plane_get(v, i, &pl) == 0; i++) {
		const struct td__plane_info *pi = &x->info[pl.handle];
		uint64_t end, need;

		if (td__add_ovf(pl.offset, pl.size, &end) || end > pi->size)
			return pub_fail(x, -EINVAL,
					"plane %u: offset %llu + size %llu is "
					"past the end of its buffer (%llu "
					"bytes)",
					i, (unsigned long long)pl.offset,
					(unsigned long long)pl.size,
					(unsigned long long)pi->size);
		if (pl.used > pl.size)
			return pub_fail(x, -EINVAL,
					"plane %u: used %llu > size %llu", i,
					(unsigned long long)pl.used,
					(unsigned long long)pl.size);
		if (pl.modifier != 0 && pi->type == TD__PLANE_MEMFD)
			return pub_fail(x, -EINVAL,
					"plane %u: a memfd plane is linear "
					"(modifier must be 0)",
					i);
		rc = td_blob_plane_need(v, i, &pl, &need, &e);
		if (rc < 0)
			return pub_fail(x, rc, "plane %u: %s", i, e.reason);
		if (need > pl.size)
			return pub_fail(x, -EINVAL,
					"plane %u holds %llu bytes but its "
					"layout needs %llu",
					i, (unsigned long long)pl.size,
					(unsigned long long)need);
	}
	return 0;
}

/*
 * Step 5b: what the uid may hold. dma-buf planes need the policy's
 * dmabuf permission (a dma-buf cannot be handed out read-only, see
 * docs/reliability.md); every descriptor the version keeps counts
 * against the uid's fds limit.
 */
static int pub_check_tenant(struct pub *x)
{
	struct td__peer *p = x->p;
	unsigned n = 0;
	bool dmabuf = false;
	int rc;

	for (uint32_t i = 0; i < x->ntab; i++) {
		bool recyc = x->alloc && x->alloc->recycle &&
			     i < x->alloc->count;

		n += x->own[i];
		/* a recyclable plane keeps a read-only reopen besides */
		n += recyc && x->alloc->fds[i].ro < 0 && x->is_plane[i];
		dmabuf = dmabuf || (x->is_plane[i] &&
				    x->info[i].type == TD__PLANE_DMABUF);
	}
	if (dmabuf &&
	    !may(p, TD__PERM_DMABUF, x->m.name.ptr, x->m.name.len))
		return pub_fail(x, -EACCES,
				"uid %u may not publish dma-buf planes as "
				"\"%.*s\" (policy %s: allow ... dmabuf): "
				"consumers could write into them",
				(unsigned)p->uid, (int)x->m.name.len,
				x->m.name.ptr, td__d->opts.policy_path);
	rc = td__tenant_check(p->uid, TD__LIM_FDS, n, x->why,
			      sizeof(x->why));
	if (rc < 0) {
		char why[sizeof(x->why)];

		memcpy(why, x->why, sizeof(why));
		return pub_fail(x, rc, "PUBLISH: %s", why);
	}
	return 0;
}

static struct version *pub_build(struct pub *x)
{
	struct td__store *s = td__d->store;
	const struct td_blob_view *v = &x->view;
	size_t blen = (size_t)v->size; /* <= m.blob.len after decode */
	struct version *ver;

	ver = version_new(s, x->m.meta.len + blen);
	if (!ver)
		return NULL;
	ver->refs = 1;
	ver->flags = x->m.flags;
	ver->dtype = v->dtype;
	ver->ndim = v->ndim;
	for (uint32_t i = 0; i < v->ndim; i++)
		ver->shape[i] = td_blob_shape(v, i);
	for (uint32_t i = 0; i < v->plane_count; i++) {
		struct td_blob_plane pl;

		td_blob_plane_get(v, i, &pl);
		ver->bytes += pl.size;
	}
	ver->name_len = x->m.name.len;
	memcpy(ver->name, x->m.name.ptr, x->m.name.len);
	ver->meta = ver->data;
	ver->meta_len = x->m.meta.len;
	if (x->m.meta.len)
		memcpy(ver->meta, x->m.meta.ptr, x->m.meta.len);
	ver->blob = ver->data + x->m.meta.len;
	ver->blob_len = (uint32_t)blen;
	memcpy(ver->blob, x->m.blob.ptr, blen);
	/* consumers import from the daemon: pid = ours, handles unchanged */
	td__put_le32(ver->blob + TD_BLOB_PID_OFFSET, (uint32_t)s->d->pid);
	return ver;
}

static void op_publish(struct td__peer *p, const struct td_wire_hdr *h,
		       const uint8_t *body, int *fds, unsigned nfds)
{
	struct td__daemon *d = td__d;
	struct td__store *s = d->store;
	struct pub x = {.p = p, .h = h};
	struct td_wire_publish_rep r;
	struct td_err e = {0};
	struct version *ver, *old;
	const char *why = NULL;
	struct room room;
	int ro[TABLE_MAX]; /* read-only reopens of the memfd planes */
	uint64_t acct = 0;
	size_t at;
	bool found;
	int rc;

	for (uint32_t i = 0; i < TABLE_MAX; i++)
		x.tab[i] = ro[i] = -1;
	rc = td_wire_publish_req_decode(body, h->body_len, &x.m, &e);
	if (rc < 0) {
		pub_fail(&x, rc, "PUBLISH: %s: %s", e.field ? e.field : "body",
			 e.reason ? e.reason : "invalid");
		goto out;
	}
	if (!may(p, TD__PERM_WRITE, x.m.name.ptr, x.m.name.len)) {
		pub_fail(&x, -EACCES, "uid %u may not write \"%.*s\" (policy "
			 "%s)", (unsigned)p->uid, (int)x.m.name.len,
			 x.m.name.ptr, d->opts.policy_path);
		goto out;
	}
	/* one meaning per name, so GET and STAT are unambiguous */
	if (td__ring_find(x.m.name)) {
		pub_fail(&x, -EEXIST, "a ring named \"%.*s\" exists",
			 (int)x.m.name.len, x.m.name.ptr);
		goto out;
	}
	if (x.m.alloc_id) {
		for (struct td__list *l = p->allocs.next; l != &p->allocs;
		     l = l->next) {
			struct alloc *a = td__container_of(l, struct alloc,
							   link);
			if (a->id == x.m.alloc_id)
				x.alloc = a;
		}
		if (!x.alloc) {
			pub_fail(&x, -ENOENT,
				 "no alloc %llu on this connection",
				 (unsigned long long)x.m.alloc_id);
			goto out;
		}
	}
	if (nfds && nfds != x.m.fd_count) {
		pub_fail(&x, -EINVAL,
			 "%u fds attached but the fd table has %u entries",
			 nfds, x.m.fd_count);
		goto out;
	}
	x.ntab = x.m.fd_count;
	if (x.alloc && x.ntab == 0)
		x.ntab = x.alloc->count;
	if (x.alloc && x.ntab < x.alloc->count) {
		pub_fail(&x, -EINVAL,
			 "fd table has %u entries but alloc %llu has %u planes",
			 x.ntab, (unsigned long long)x.alloc->id,
			 x.alloc->count);
		goto out;
	}
	if (pub_check_blob(&x) < 0 || pub_take_fds(&x, fds, nfds) < 0 ||
	    pub_check_fds(&x) < 0 || pub_check_tenant(&x) < 0)
		goto out;

	/* quota: the alloc's bytes are counted already */
	for (uint32_t i = 0; i < x.ntab; i++)
		if (x.own[i] && x.is_plane[i])
			acct += x.info[i].size;
	old = lookup(s, x.m.name);
	/* only checked here; evicted after the seals, which cannot undo */
	if (make_room(s, p->uid, acct, old, true, &room) < 0) {
		pub_fail(&x, room.rc,
			 "PUBLISH of %llu bytes exceeds %s (%llu in use of "
			 "%llu) and nothing more can be evicted (what is held "
			 "is leased, pinned or not yet published)",
			 (unsigned long long)acct,
			 room.rc == -EDQUOT ? "the uid quota" : "--max-bytes",
			 (unsigned long long)room.in_use,
			 (unsigned long long)room.limit);
		goto out;
	}
	/* Seal last: irreversible, so only once everything else passed. */
	for (uint32_t i = 0; i < x.ntab; i++) {
		bool recyc = x.alloc && x.alloc->recycle &&
			     i < x.alloc->count;

		if (!x.is_plane[i] || x.info[i].type != TD__PLANE_MEMFD)
			continue;
		/*
		 * A recyclable buffer keeps only its size seals (its producer
		 * writes it again once it comes back) and its read-only
		 * reopen, made the first time it is published.
		 */
		if (recyc && x.alloc->fds[i].ro >= 0)
			continue;
		rc = recyc ? 0 : td__plane_seal(x.tab[i], &why);
		if (rc == 0)
			rc = td__plane_readonly(x.tab[i], &ro[i], &why);
		if (rc < 0) {
			pub_fail(&x, rc, "fd table entry %u: %s", i, why);
			goto out;
		}
	}
	ver = pub_build(&x);
	if (!ver) {
		pub_fail(&x, -ENOMEM, "out of memory");
		goto out;
	}
	if (s->count == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct version **n = realloc(s->names, cap * sizeof(*n));

		if (!n) {
			version_put(s, ver);
			pub_fail(&x, -ENOMEM, "out of memory");
			goto out;
		}
		s->names = n;
		s->cap = cap;
	}
	/* cannot fail after the dry run above: nothing changed since */
	make_room(s, p->uid, acct, old, false, &room);
	if (acct_add(s, p->uid, acct) < 0) {
		version_put(s, ver);
		pub_fail(&x, -ENOMEM, "out of memory");
		goto out;
	}

	/* commit: nothing below fails */
	ver->nfds = x.ntab;
	ver->recycle = x.alloc && x.alloc->recycle;
	ver->owner = ver->recycle ? p : NULL;
	for (uint32_t i = 0; i < x.ntab; i++) {
		if (x.alloc && i < x.alloc->count) {
			vfd_move(&ver->fds[i], &x.alloc->fds[i]);
		} else {
			vfd_set(s, &ver->fds[i], x.tab[i], x.is_plane[i],
				p->uid);
			x.own[i] = false;
		}
		/* consumers get the read-only description (same inode) */
		if (ro[i] >= 0 && ver->recycle && i < x.alloc->count) {
			ver->fds[i].ro = ro[i]; /* and the writable one stays */
			td__tenant_add(p->uid, TD__LIM_FDS, 1);
			ro[i] = -1;
		} else if (ro[i] >= 0) {
			close(ver->fds[i].fd);
			ver->fds[i].fd = ro[i];
			ro[i] = -1;
		}
	}
	ver->acct = acct;
	ver->uid = p->uid;
	ver->used = ++s->tick;
	if (x.alloc) {
		ver->acct += x.alloc->acct;
		x.alloc->acct = 0; /* moved to the version */
		td__list_del(&x.alloc->link);
		p->n_allocs--;
		alloc_free(s, x.alloc);
	}
	ver->number = s->next_version++;
	/*
	 * into systemd's fd store before the reply (fdstore.c); not a
	 * recyclable version, whose bytes are not sealed (its fd ids stay 0,
	 * so the state image leaves it out)
	 */
	for (uint32_t i = 0; i < ver->nfds && !ver->recycle; i++)
		ver->fds[i].sid = td__fdstore_add(ver->fds[i].fd,
						  ver->fds[i].tracked,
						  ver->fds[i].dev,
						  ver->fds[i].ino);
	td__fdstore_dirty();
	td__list_add_tail(&s->versions, &ver->all);
	at = name_find(s, ver->name, ver->name_len, &found);
	if (found) {
		s->names[at] = ver;
		retire(s, old);
		version_unref(s, old);
	} else {
		memmove(&s->names[at + 1], &s->names[at],
			(s->count - at) * sizeof(*s->names));
		s->names[at] = ver;
		s->count++;
	}
	td__log(TD_LOG_DEBUG, "published %.*s version %llu (%u fds)",
		(int)ver->name_len, ver->name,
		(unsigned long long)ver->number, ver->nfds);
	r.version = ver->number;
	rc = (int)td_wire_publish_rep_encode(&r, TD__TX_BODY(d), TD__TX_CAP);
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
		      (size_t)rc, NULL, 0);
	notify(s, TD_EVENT_PUBLISHED, ver);
	wake(s, ver);
out:
	for (uint32_t i = 0; i < x.ntab && i < TABLE_MAX; i++)
		if (x.own[i] && x.tab[i] >= 0)
			close(x.tab[i]);
	close_fds(ro, TABLE_MAX);
	close_fds(fds, nfds);
	/*
	 * Refuse only now: once the reply is out the peer may look at our fd
	 * table (the tests do), and every fd of the request must be gone.
	 */
	if (x.rc < 0)
		td__peer_error(p, h->opcode, h->request_id, x.rc, "%s", x.why);
}

/* ---- LIST, STAT, DELETE ---- */

/* kinds: the request's TD_WIRE_CAT_* bits (which entry flags it reads) */
static struct td_wire_entry entry_of(const struct version *v, uint32_t kinds)
{
	struct td_wire_entry e = {
		.name = {v->name, v->name_len},
		.version = v->number,
		.dtype = v->dtype,
		.ndim = v->ndim,
		.bytes = v->bytes,
		.lease_count = v->lease_count,
		.flags = v->flags | (v->recycle && (kinds & TD_WIRE_CAT_RECYCLE)
					     ? TD_WIRE_ENT_RECYCLE
					     : 0),
		.meta = {v->meta, v->meta_len},
	};

	memcpy(e.shape, v->shape, sizeof(e.shape));
	return e;
}

static void op_list(struct td__peer *p, const struct td_wire_hdr *h,
		    const uint8_t *body)
{
	struct td__daemon *d = td__d;
	struct td__store *s = d->store;
	/* single-threaded: one LIST at a time uses it */
	static struct td__ring *rl[TD__MAX_RINGS];
	struct td_wire_list_req m;
	struct td_err e = {0};
	struct td_wire_wr wr;
	uint32_t count = 0, more = 0;
	unsigned nr, j = 0;
	size_t i;
	bool found;
	int rc = td_wire_list_req_decode(body, h->body_len, &m, &e);

	if (rc < 0) {
		bad_body(p, h, rc, &e);
		return;
	}
	/* start at the first name > after, and >= prefix */
	i = name_find(s, m.after.ptr, m.after.len, &found);
	if (found)
		i++;
	if (name_cmp(m.prefix.ptr, m.prefix.len, m.after.ptr, m.after.len) >
	    0)
		i = name_find(s, m.prefix.ptr, m.prefix.len, &found);
	/* rings, merged in name order (a name is never both) */
	nr = td__ring_list(m.prefix, m.after, rl);
	td_wire_wr_init(&wr, TD__TX_BODY(d), TD__TX_CAP);
	td_wire_list_rep_begin(&wr);
	for (;;) {
		const struct version *v = i < s->count ? s->names[i] : NULL;
		struct td_wire_entry ent, rent;

		/* names sharing the prefix are contiguous once sorted */
		if (v && (v->name_len < m.prefix.len ||
			  memcmp(v->name, m.prefix.ptr, m.prefix.len) != 0))
			v = NULL;
		if (j < nr)
			td__ring_entry(rl[j], m.flags & TD_WIRE_CAT_KINDS,
				       &rent);
		if (v && (j == nr || name_cmp(v->name, v->name_len,
					      rent.name.ptr,
					      rent.name.len) < 0)) {
			ent = entry_of(v, m.flags);
			i++;
		} else if (j < nr) {
			ent = rent;
			j++;
		} else {
			break;
		}
		/* names this peer may not read are not listed */
		if (!may(p, TD__PERM_READ, ent.name.ptr, ent.name.len))
			continue;
		if (td_wire_entry_put(&wr, &ent) < 0) {
			more = 1;
			break;
		}
		count++;
	}
	td_wire_list_rep_finish(&wr, count, more);
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0, wr.off,
		      NULL, 0);
}

static void op_stat(struct td__peer *p, const struct td_wire_hdr *h,
		    const uint8_t *body)
{
	struct td__daemon *d = td__d;
	struct td_wire_stat_req m;
	struct td_wire_entry ent;
	struct td_err e = {0};
	struct td__ring *r;
	struct version *v;
	int64_t len;
	int rc = td_wire_stat_req_decode(body, h->body_len, &m, &e);

	if (rc < 0) {
		bad_body(p, h, rc, &e);
		return;
	}
	if (!allowed(p, h, TD__PERM_READ, m.name))
		return;
	v = lookup(d->store, m.name);
	if (!v && (r = td__ring_find(m.name))) {
		td__ring_entry(r, m.flags & TD_WIRE_CAT_KINDS, &ent);
		len = td_wire_entry_encode(&ent, TD__TX_BODY(d), TD__TX_CAP);
		td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
			      (size_t)len, NULL, 0);
		return;
	}
	if (!v) {
		td__peer_error(p, h->opcode, h->request_id, -ENOENT,
			       "no tensor named \"%.*s\"", (int)m.name.len,
			       m.name.ptr);
		return;
	}
	ent = entry_of(v, m.flags);
	len = td_wire_entry_encode(&ent, TD__TX_BODY(d), TD__TX_CAP);
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
		      (size_t)len, NULL, 0);
}

static void op_delete(struct td__peer *p, const struct td_wire_hdr *h,
		      const uint8_t *body)
{
	struct td__daemon *d = td__d;
	struct td__store *s = d->store;
	struct td_wire_name_req m;
	struct td_wire_delete_rep r;
	struct td_err e = {0};
	struct version *v;
	size_t at;
	bool found;
	int64_t len;
	int rc = td_wire_name_req_decode(body, h->body_len, &m, &e);

	if (rc < 0) {
		bad_body(p, h, rc, &e);
		return;
	}
	if (!allowed(p, h, TD__PERM_WRITE, m.name))
		return;
	at = name_find(s, m.name.ptr, m.name.len, &found);
	if (!found && td__ring_find(m.name)) {
		td__peer_error(p, h->opcode, h->request_id, -EBUSY,
			       "\"%.*s\" is a ring: it ends when its producer "
			       "closes it",
			       (int)m.name.len, m.name.ptr);
		return;
	}
	if (!found) {
		td__peer_error(p, h->opcode, h->request_id, -ENOENT,
			       "no tensor named \"%.*s\"", (int)m.name.len,
			       m.name.ptr);
		return;
	}
	v = s->names[at];
	memmove(&s->names[at], &s->names[at + 1],
		(s->count - at - 1) * sizeof(*s->names));
	s->count--;
	td__fdstore_dirty(); /* leased versions are not freed yet */
	r.version = v->number;
	len = td_wire_delete_rep_encode(&r, TD__TX_BODY(d), TD__TX_CAP);
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
		      (size_t)len, NULL, 0);
	notify(s, TD_EVENT_DELETED, v);
	retire(s, v);
	version_unref(s, v); /* leased versions live on, unlisted */
}

/* ---- WATCH ---- */

static void watch_free(struct td__peer *p, struct watch *w)
{
	td__list_del(&w->link);
	td__list_del(&w->slink);
	p->n_watches--;
	td__tenant_sub(p->uid, TD__LIM_WATCHES, 1);
	free(w);
	td__d->store->freed++;
}

static void op_watch(struct td__peer *p, const struct td_wire_hdr *h,
		     const uint8_t *body)
{
	struct td__daemon *d = td__d;
	struct td__store *s = d->store;
	struct td_wire_watch_req m;
	struct td_wire_watch_rep r;
	struct td_err e = {0};
	struct watch *w;
	int64_t len;
	char why[256];
	int rc = td_wire_watch_req_decode(body, h->body_len, &m, &e);

	if (rc < 0) {
		bad_body(p, h, rc, &e);
		return;
	}
	/* a prefix watch is filtered per event instead (notify) */
	if (!(m.flags & TD_WIRE_WATCH_PREFIX) &&
	    !allowed(p, h, TD__PERM_READ, m.name))
		return;
	/*
	 * The daemon sees no message per ring publish, so it has nothing to
	 * notify; a watch that could never fire is refused rather than
	 * accepted in silence. (Prefix watches report tensors only.)
	 */
	if (!(m.flags & TD_WIRE_WATCH_PREFIX) && td__ring_find(m.name)) {
		td__peer_error(p, h->opcode, h->request_id, -EOPNOTSUPP,
			       "\"%.*s\" is a ring: WATCH does not see ring "
			       "publishes; subscribe to it, or GET it with a "
			       "newer-than wait",
			       (int)m.name.len, m.name.ptr);
		return;
	}
	if (p->n_watches >= TD__MAX_WATCHES) {
		td__peer_error(p, h->opcode, h->request_id, -ENOBUFS,
			       "too many watches on this connection (max %d)",
			       TD__MAX_WATCHES);
		return;
	}
	rc = td__tenant_check(p->uid, TD__LIM_WATCHES, 1, why, sizeof(why));
	if (rc < 0) {
		td__peer_error(p, h->opcode, h->request_id, rc, "WATCH: %s",
			       why);
		return;
	}
	w = calloc(1, sizeof(*w));
	if (w && td__tenant_add(p->uid, TD__LIM_WATCHES, 1) < 0) {
		free(w);
		w = NULL;
	}
	if (!w) {
		td__peer_error(p, h->opcode, h->request_id, -ENOMEM,
			       "out of memory");
		return;
	}
	w->peer = p;
	w->id = s->next_watch++;
	w->prefix = m.flags & TD_WIRE_WATCH_PREFIX;
	w->len = m.name.len;
	memcpy(w->name, m.name.ptr, m.name.len);
	td__list_add_tail(&p->watches, &w->link);
	td__list_add_tail(&s->watches, &w->slink);
	p->n_watches++;
	r.watch_id = w->id;
	len = td_wire_watch_rep_encode(&r, TD__TX_BODY(d), TD__TX_CAP);
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
		      (size_t)len, NULL, 0);
}

static void op_unwatch(struct td__peer *p, const struct td_wire_hdr *h,
		       const uint8_t *body)
{
	struct td_wire_unwatch_req m;
	struct td_err e = {0};
	int rc = td_wire_unwatch_req_decode(body, h->body_len, &m, &e);

	if (rc < 0) {
		bad_body(p, h, rc, &e);
		return;
	}
	for (struct td__list *l = p->watches.next; l != &p->watches;
	     l = l->next) {
		struct watch *w = td__container_of(l, struct watch, link);

		if (w->id != m.watch_id)
			continue;
		watch_free(p, w);
		td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
			      0, NULL, 0);
		return;
	}
	td__peer_error(p, h->opcode, h->request_id, -ENOENT,
		       "no watch %llu on this connection",
		       (unsigned long long)m.watch_id);
}

/* ---- entry points ---- */

static void store_request(struct td__peer *p, const struct td_wire_hdr *h,
			  const uint8_t *body, int *fds, unsigned nfds);

void td__store_request(struct td__peer *p, const struct td_wire_hdr *h,
		       const uint8_t *body, int *fds, unsigned nfds)
{
	store_request(p, h, body, fds, nfds);
	td__store_trim(0);
}

static void store_request(struct td__peer *p, const struct td_wire_hdr *h,
			  const uint8_t *body, int *fds, unsigned nfds)
{
	if (h->opcode == TD_OP_PUBLISH) {
		op_publish(p, h, body, fds, nfds);
		return;
	}
	if (nfds) {
		close_fds(fds, nfds);
		td__peer_error(p, h->opcode, h->request_id, -EINVAL,
			       "%s carries no fds", td_wire_op_name(h->opcode));
		return;
	}
	switch (h->opcode) {
	case TD_OP_ALLOC:
		op_alloc(p, h, body);
		return;
	case TD_OP_GET:
		op_get(p, h, body);
		return;
	case TD_OP_RELEASE:
		op_release(p, h, body);
		return;
	case TD_OP_LIST:
		op_list(p, h, body);
		return;
	case TD_OP_STAT:
		op_stat(p, h, body);
		return;
	case TD_OP_DELETE:
		op_delete(p, h, body);
		return;
	case TD_OP_WATCH:
		op_watch(p, h, body);
		return;
	case TD_OP_UNWATCH:
		op_unwatch(p, h, body);
		return;
	default:
		td__peer_error(p, h->opcode, h->request_id, -EOPNOTSUPP,
			       "unknown opcode %u", h->opcode);
	}
}

void td__store_peer_gone(struct td__peer *p)
{
	struct td__store *s = td__d->store;
	bool parked = !td__list_empty(&p->waiters);

	while (!td__list_empty(&p->leases))
		lease_drop(s, p,
			   td__container_of(p->leases.next, struct lease,
					    link));
	while (!td__list_empty(&p->allocs)) {
		struct alloc *a =
			td__container_of(p->allocs.next, struct alloc, link);

		/* unpublished allocs die with their producer */
		td__list_del(&a->link);
		p->n_allocs--;
		alloc_free(s, a);
	}
	while (!td__list_empty(&p->watches))
		watch_free(p, td__container_of(p->watches.next, struct watch,
					       link));
	while (!td__list_empty(&p->waiters))
		waiter_free(td__container_of(p->waiters.next, struct waiter,
					     link));
	if (parked)
		rearm(s);
	/* its recyclable versions close their buffers when they go */
	for (struct td__list *l = s->versions.next; l != &s->versions;
	     l = l->next) {
		struct version *v = td__container_of(l, struct version, all);

		if (v->owner == p)
			v->owner = NULL;
	}
	while (!td__list_empty(&p->freebufs))
		freebuf_drop(s, td__container_of(p->freebufs.next,
						 struct freebuf, link));
}

int td__store_new(struct td__daemon *d)
{
	struct td__store *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->d = d;
	td__list_init(&s->watches);
	td__list_init(&s->free_leases);
	td__list_init(&s->versions);
	td__list_init(&s->freebufs);
	td__list_init(&s->waiters);
	td__list_init(&s->spare_allocs.head);
	td__list_init(&s->spare_versions.head);
	td__list_init(&s->spare_freebufs.head);
	td__list_init(&s->spare_waiters.head);
	s->next_version = s->next_lease = s->next_alloc = s->next_watch =
		s->next_buf = 1;
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
		free(td__container_of(l, struct lease, link));
	}
	spares_fini(&s->spare_allocs, offsetof(struct alloc, link));
	spares_fini(&s->spare_versions, offsetof(struct version, all));
	spares_fini(&s->spare_freebufs, offsetof(struct freebuf, link));
	spares_fini(&s->spare_waiters, offsetof(struct waiter, link));
	free(s->bufs);
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
		version_unref(s, s->names[i]);
	free(s->names);
	s->names = NULL;
	s->count = 0;
	d->store = NULL;
	uv_close((uv_handle_t *)&s->timer, on_timer_closed);
}

/*
 * Memory goes back after a burst (issue 18): once TRIM_RECORDS records
 * beyond the spare lists were freed (leases, versions, watches, parked
 * GETs, whole connections), the lease spares go down to TRIM_KEEP_LEASES,
 * the name and buffer tables shrink to fit and malloc_trim() hands free
 * heap pages back to the system. A warm handoff frees nothing, so it
 * never gets here.
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

void td__store_trim(unsigned more)
{
	struct td__store *s = td__d->store;

	if (!s)
		return;
	s->freed += more;
	if (s->freed < TRIM_RECORDS)
		return;
	s->freed = 0;
	/*
	 * The lease records kept for reuse were freed by a burst that
	 * spread them over the heap, each pinning a page: keep a few.
	 */
	while (s->n_free_leases > TRIM_KEEP_LEASES) {
		struct td__list *l = s->free_leases.prev;

		td__list_del(l);
		s->n_free_leases--;
		free(td__container_of(l, struct lease, link));
	}
	s->names = shrink(s->names, s->count, &s->cap, sizeof(*s->names));
	s->bufs = shrink(s->bufs, s->nbufs, &s->bufs_cap, sizeof(*s->bufs));
	malloc_trim(0);
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

int td__store_each(int (*fn)(void *arg, const struct td_state_entry *ent),
		   void *arg)
{
	struct td__store *s = td__d->store;

	for (size_t i = 0; i < s->count; i++) {
		const struct version *v = s->names[i];
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
	}
	return 0;
}

void td__store_set_next_version(uint64_t next)
{
	struct td__store *s = td__d->store;

	if (next > s->next_version)
		s->next_version = next;
}

/*
 * An image entry comes from outside the process (through PID 1), so it
 * runs the PUBLISH checks (steps 3-9) as if the daemon itself were the
 * producer: the blob was stored with the old daemon's pid, which is
 * rewritten to ours first.
 */
int td__store_restore(const struct td_state_entry *ent, int *fds, char *why,
		      size_t cap)
{
	struct td__daemon *d = td__d;
	struct td__store *s = d->store;
	struct td__peer self = {.pid = d->pid, .pidfd = -1};
	struct td_wire_hdr h = {.opcode = TD_OP_PUBLISH};
	struct pub x = {.p = &self, .h = &h};
	struct version *ver = NULL;
	const char *seal_why = NULL;
	uint8_t *blob = NULL;
	uint64_t acct = 0;
	size_t at;
	bool found;
	int rc = 0;

	for (uint32_t i = 0; i < TABLE_MAX; i++)
		x.tab[i] = -1;
	x.ntab = ent->fd_count;
	for (uint32_t i = 0; i < x.ntab; i++) {
		x.tab[i] = fds[i];
		x.own[i] = true;
		fds[i] = -1;
	}
	if (ent->blob.len < TD_BLOB_PID_OFFSET + 4) {
		rc = pub_fail(&x, -ENODATA, "blob of %u bytes is too short",
			      ent->blob.len);
		goto out;
	}
	blob = malloc(ent->blob.len);
	if (!blob) {
		rc = pub_fail(&x, -ENOMEM, "out of memory");
		goto out;
	}
	memcpy(blob, ent->blob.ptr, ent->blob.len);
	td__put_le32(blob + TD_BLOB_PID_OFFSET, (uint32_t)d->pid);
	x.m.name = ent->name;
	x.m.flags = ent->flags;
	x.m.meta = ent->meta;
	x.m.blob = (struct td_wire_bytes){blob, ent->blob.len};
	x.m.fd_count = ent->fd_count;
	rc = pub_check_blob(&x);
	if (rc == 0)
		rc = pub_check_fds(&x);
	if (rc < 0)
		goto out;
	if (lookup(s, ent->name)) {
		rc = pub_fail(&x, -EEXIST, "name restored twice");
		goto out;
	}
	for (uint32_t i = 0; i < x.ntab; i++)
		if (x.is_plane[i])
			acct += x.info[i].size;
	if (over_quota(s, acct, 0)) {
		rc = pub_fail(&x, -ENOSPC, "%llu more bytes exceed --max-bytes",
			      (unsigned long long)acct);
		goto out;
	}
	/* published memfds are sealed already; this only confirms it */
	for (uint32_t i = 0; i < x.ntab; i++) {
		if (!x.is_plane[i] || x.info[i].type != TD__PLANE_MEMFD)
			continue;
		rc = td__plane_seal(x.tab[i], &seal_why);
		if (rc < 0) {
			pub_fail(&x, rc, "fd table entry %u: %s", i, seal_why);
			goto out;
		}
	}
	ver = pub_build(&x);
	if (!ver) {
		rc = pub_fail(&x, -ENOMEM, "out of memory");
		goto out;
	}
	if (s->count == s->cap) {
		size_t ncap = s->cap ? s->cap * 2 : 64;
		struct version **n = realloc(s->names, ncap * sizeof(*n));

		if (!n) {
			rc = pub_fail(&x, -ENOMEM, "out of memory");
			goto out;
		}
		s->names = n;
		s->cap = ncap;
	}
	/* commit: nothing below fails */
	ver->nfds = x.ntab;
	for (uint32_t i = 0; i < x.ntab; i++) {
		struct vfd *f = &ver->fds[i];

		vfd_set(s, f, x.tab[i], x.is_plane[i], 0);
		x.own[i] = false;
		if (td__fdstore_adopt(ent->fd_ids[i], f->fd, f->tracked,
				      f->dev, f->ino) == 0)
			f->sid = ent->fd_ids[i];
	}
	ver->acct = acct;
	s->total += acct;
	ver->number = ent->version;
	if (ent->version >= s->next_version)
		s->next_version = ent->version + 1;
	at = name_find(s, ver->name, ver->name_len, &found);
	memmove(&s->names[at + 1], &s->names[at],
		(s->count - at) * sizeof(*s->names));
	s->names[at] = ver;
	td__list_add_tail(&s->versions, &ver->all);
	s->count++;
	ver = NULL;
out:
	if (ver)
		version_put(s, ver);
	free(blob);
	for (uint32_t i = 0; i < x.ntab; i++)
		if (x.own[i] && x.tab[i] >= 0)
			close(x.tab[i]);
	if (rc < 0)
		snprintf(why, cap, "%s", x.why);
	return rc;
}
