/* SPDX-License-Identifier: MIT */
/*
 * libtensord producing side: ALLOC loans, PUBLISH of loans and of the
 * caller's own buffers, PUT. Every PUBLISH carries a reference-mode blob
 * (pid = getpid(), plane handles = fd-table indices, fence appended last)
 * and the fd table as this process's fd numbers; on the SCM path the same
 * fds also ride along with SCM_RIGHTS.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blob.h"
#include "alloc.h"
#include "client.h"
#include "fence.h"
#include "gpu.h"

/*
 * Plane i of an ALLOC reply into a: a buffer this client holds reused
 * (fe->fd -1), else the new one imported (scm: its attached fd, NULL on
 * the pidfd path) and mapped. 0 or -errno.
 */
static int alloc_plane(struct td_client *c, struct td_alloc *a, uint32_t i,
		       uint64_t size, const struct td_wire_fdent *fe,
		       int *scm, struct td_error *err)
{
	struct td__loanbuf *b = NULL;
	struct stat st;
	void *p = NULL;
	int fd = -1, rc;

	a->size[i] = size;
	if (a->recycle)
		b = td__loanbuf_find(c, fe->buffer_id);
	if (fe->fd < 0) {
		/* a buffer this client holds: its mapping is reused */
		if (!b || b->busy || b->size != size)
			return td__fail(err, -EPROTO,
					"ALLOC reply recycles buffer %llu, "
					"which is not held here",
					(unsigned long long)fe->buffer_id);
		b->busy = true;
		c->idle_loans--;
		c->idle_bytes -= b->size;
		a->lb[i] = b;
		a->fds[i] = b->fd;
		a->addr[i] = b->addr;
		a->count = i + 1;
		return 0;
	}
	/* sent again (not advertised): the stale copy goes */
	if (b && b->busy)
		return td__fail(err, -EPROTO,
				"ALLOC reply names a buffer in use twice");
	if (b)
		td__loanbuf_destroy(c, b);
	rc = td__import_fd(c, fe->fd, scm, &fd);
	if (rc < 0)
		return td__fail(err, rc, "import buffer %u: %s", i,
				strerror(-rc));
	c->loan_imports++;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < size) {
		close(fd);
		return td__fail(err, -EPROTO,
				"buffer %u is smaller than asked", i);
	}
	if (size) {
		/* size a multiple of A: address A-aligned (gpu.h) */
		p = td__mmap_natural(size, PROT_READ | PROT_WRITE, MAP_SHARED,
				     fd, 0);
		if (p == MAP_FAILED) {
			rc = td__fail(err, -errno, "mmap buffer %u: %s", i,
				      strerror(errno));
			close(fd);
			return rc;
		}
		/* a child of fork() would keep a writable mapping of the
		 * loan until it execs, and the publish's write seal fails
		 * while any exists (EBUSY): the child gets none */
		(void)madvise(p, size, MADV_DONTFORK);
	}
	if (a->recycle) {
		b = calloc(1, sizeof(*b));
		if (!b) {
			if (p)
				munmap(p, size);
			close(fd);
			return td__fail(err, -ENOMEM, "out of memory");
		}
		*b = (struct td__loanbuf){.next = c->loans,
					  .buffer_id = fe->buffer_id,
					  .fd = fd,
					  .addr = p,
					  .size = size,
					  .busy = true};
		if (c->loans)
			c->loans->prev = b;
		c->loans = b;
		a->lb[i] = b;
	}
	a->fds[i] = fd;
	a->addr[i] = p;
	a->count = i + 1;
	return 0;
}

/*
 * An ALLOC reply body (from ALLOC, or a PUBLISH reply's loan) into a:
 * plane_count planes of sizes, the attached fds in m. 0 or -errno.
 */
static int alloc_take(struct td_client *c, struct td_alloc *a,
		      const struct td_wire_alloc_rep *rep,
		      uint32_t plane_count, const uint64_t *sizes,
		      bool recycle, struct td__msg *m, struct td_error *err)
{
	unsigned nfd = 0, k = 0;
	int rc;

	for (uint32_t i = 0; i < rep->fd_count; i++)
		nfd += rep->fds[i].fd >= 0;
	if (rep->fd_count != plane_count ||
	    (c->path_out == TD_IMPORT_SCM && m->nfds != nfd))
		return td__fail(err, -EPROTO, "bad ALLOC reply: fd count");
	a->alloc_id = rep->alloc_id;
	a->epoch = c->epoch; /* void after a reconnect (TD_CLIENT_RECONNECT) */
	a->recycle = recycle;
	for (uint32_t i = 0; i < plane_count; i++) {
		int *scm = NULL;

		/* attached fds come in order, one per plane not held */
		if (rep->fds[i].fd >= 0)
			scm = k < m->nfds ? &m->fds[k++] : NULL;
		rc = alloc_plane(c, a, i, sizes[i], &rep->fds[i], scm, err);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/*
 * Up to TD_WIRE_MAX_HELD idle loan buffers: what the client maps, for a
 * loan of planes planes named as a. Those last published as that name
 * only, when there are enough of them: a stream's next loan is its
 * name's version before, the cache keeps more buffers than a request can
 * name, and the daemon lends any buffer named held, so naming another
 * stream's took that one's next loan (which then came with an fd).
 */
static uint32_t loans_held(const struct td_client *c,
			   const struct td_alloc *a, uint32_t planes,
			   uint64_t *held)
{
	uint32_t n = 0, h = td__name_hash(a->name, a->name_len);

	for (int mine = 1; mine >= 0 && (mine || n < planes); mine--)
		for (struct td__loanbuf *b = c->loans;
		     b && n < TD_WIRE_MAX_HELD; b = b->next)
			if (!b->busy && (b->name_hash == h) == mine)
				held[n++] = b->buffer_id;
	return n;
}

/* One ALLOC round trip (lock held); recycle: ask for a recyclable loan,
 * advertising the idle buffers of the loan cache. Fills a. */
static int alloc_call(struct td_client *c, struct td_alloc *a,
		      uint32_t plane_count, const uint64_t *sizes,
		      bool recycle, uint32_t rewrite, struct td_error *err)
{
	struct td_wire_alloc_req req = {.plane_count = plane_count};
	struct td_wire_alloc_rep rep;
	struct td_err e = {0};
	struct td__msg m = {0};
	int64_t len;
	int rc;

	for (uint32_t i = 0; i < plane_count; i++)
		req.sizes[i] = sizes[i];
	if (c->path_out == TD_IMPORT_SCM)
		req.flags |= TD_WIRE_REQ_SCM;
	if (c->unloan)
		req.flags |= TD_WIRE_ALLOC_UNLOAN;
	/* new planes' memory is reserved here, not in the daemon's loop */
	if (c->reserve_self && td__has(c, TD_WIRE_FEAT_RESERVE))
		req.flags |= TD_WIRE_ALLOC_RESERVE;
	if (recycle) {
		/* rewrite: TD_WIRE_ALLOC_REWRITE, _REWRITABLE or 0 */
		req.flags |= TD_WIRE_ALLOC_RECYCLE | rewrite;
		req.held_count = loans_held(c, a, plane_count, req.held);
	}
	/* a daemon that predates named allocs gets none: the name is
	 * checked here at publish all the same */
	if (a->name_len && td__has(c, TD_WIRE_FEAT_ALLOC_NAME)) {
		req.flags |= TD_WIRE_ALLOC_NAMED;
		req.name = (struct td_wire_str){a->name, a->name_len};
	}
	req.flags |= td__stage_alloc_flag(c, &req); /* a take-back's */
	len = td_wire_alloc_req_encode(&req, c->sbuf + TD_WIRE_HDR_LEN,
				       TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
	if (len < 0)
		return td__fail(err, (int)len, "encode ALLOC");
	rc = td__call(c, TD_OP_ALLOC, (size_t)len, NULL, 0, &m, err);
	if (rc < 0)
		return rc;
	c->unloan = false; /* the daemon took it back before this ALLOC */
	rc = td_wire_alloc_rep_decode(m.body, m.body_len, &rep, &e);
	if (rc < 0)
		rc = td__fail(err, -EPROTO, "bad ALLOC reply: %s",
			      e.reason ? e.reason : "?");
	else if (!(rc = alloc_take(c, a, &rep, plane_count, sizes, recycle,
				   &m, err)))
		td__stage_note_alloc(c, &rep); /* fired if published alike */
	a->unreserved = rep.unreserved;
	td__msg_close_fds(&m);
	return rc;
}

/*
 * The memory of the planes the daemon made for this client unreserved
 * (TD_WIRE_ALLOC_RESERVE): taken now, so that a machine short of memory
 * answers with an error here and not with SIGBUS at a write later; here
 * and not in the daemon, whose loop every other client waits on while
 * the kernel allocates and clears a big plane (docs/protocol.md §6.2).
 * Without the client's lock. 0 or -errno.
 */
static int alloc_reserve(struct td_alloc *a, struct td_error *err)
{
	for (uint32_t i = 0; i < a->count; i++) {
		int rc;

		if (!(a->unreserved & (1u << i)))
			continue;
		/* interrupted, it has allocated part: again from the start */
		do
			rc = fallocate(a->fds[i], 0, 0, (off_t)a->size[i]);
		while (rc < 0 && errno == EINTR);
		if (rc < 0) {
			rc = -errno;
			return td__fail(err, rc,
					"reserve %llu bytes for plane %u: %s",
					(unsigned long long)a->size[i], i,
					strerror(-rc));
		}
	}
	a->unreserved = 0;
	return 0;
}

static int pub_settle(struct td_client *c, uint64_t *version,
		      struct td_error *err);

/* a's hand-out: a TD_ALLOC_REWRITE loan's fill time starts now */
static void loan_handed(struct td_alloc *a, uint32_t flags)
{
	a->rw_asked = flags & TD_ALLOC_REWRITE;
	a->handed_ns = a->rw_asked ? td__now_ns() : 0;
}

int td_client_alloc_named(struct td_client *c, const char *name,
			  uint32_t plane_count, const uint64_t *sizes,
			  uint32_t flags, struct td_alloc **out,
			  struct td_error *err)
{
	struct td_alloc *a = NULL, *lent;
	bool recycle, marked, rewrite;
	size_t name_len = name ? strlen(name) : 0;
	const char *why;
	int rc;

	if (!c || !out || !sizes)
		return td__fail(err, -EINVAL, "missing argument");
	*out = NULL;
	if (name && td_wire_name_check(name, name_len, false, &why) < 0)
		return td__fail(err, -EINVAL, "bad tensor name: %s", why);
	if (!plane_count || plane_count > TD_WIRE_MAX_PLANES)
		return td__fail(err, -EINVAL, "plane count must be 1..%d",
				TD_WIRE_MAX_PLANES);
	if (flags & TD_ALLOC_REWRITE)
		flags |= TD_ALLOC_STREAM;
	if (flags & ~(TD_ALLOC_RECYCLE | TD_ALLOC_STREAM | TD_ALLOC_REWRITE))
		return td__fail(err, -EINVAL, "unknown alloc flags %#x",
				flags);
	for (uint32_t i = 0; i < plane_count; i++)
		if (sizes[i] > SIZE_MAX)
			return td__fail(err, -EFBIG, "plane %u too large", i);
	a = calloc(1, sizeof(*a));
	if (!a)
		return td__fail(err, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < TD_WIRE_MAX_PLANES; i++)
		a->fds[i] = -1;
	a->c = c;
	a->name_len = (uint16_t)name_len;
	memcpy(a->name, name ? name : "", name_len);
	td__client_lock(c);
	/* the loan a PUBLISH sent without waiting lends, or its failure */
	rc = pub_settle(c, NULL, err);
	/* a broken connection first: its lent loan names nothing in the
	 * daemon a reconnect reaches (which forgets it) */
	if (rc == 0 && c->dead)
		rc = td__client_usable(c, err);
	if (rc < 0)
		goto fail;
	/* a daemon that predates recyclable loans lends plain ones */
	recycle = (flags & (TD_ALLOC_RECYCLE | TD_ALLOC_STREAM)) &&
		  td__has(c, TD_WIRE_FEAT_ALLOC_RECYCLE);
	marked = td__rewrite_marked(c, flags, recycle, plane_count, sizes);
	rewrite = td__rewrite_now(c, marked, a->name, a->name_len);
	lent = td__lent_claim(c, a, plane_count, sizes,
			      (flags & TD_ALLOC_STREAM) && !rewrite);
	if (lent) {
		/* lent by a PUBLISH reply of this name: no round trip */
		free(a);
		a = lent;
		a->marked = marked;
		loan_handed(a, flags);
		td__client_ref(c);
		pthread_mutex_unlock(&c->lock);
		*out = a;
		return 0;
	}
	rc = alloc_call(c, a, plane_count, sizes, recycle,
			rewrite  ? TD_WIRE_ALLOC_REWRITE
			: marked ? TD_WIRE_ALLOC_REWRITABLE
				 : 0,
			err);
	if (rc < 0)
		goto fail;
	a->stream = recycle && (flags & TD_ALLOC_STREAM);
	a->rewrite = rewrite;
	a->marked = marked;
	td__client_ref(c);
	pthread_mutex_unlock(&c->lock);
	rc = alloc_reserve(a, err);
	if (rc < 0) {
		/* unpublished: the daemon never lends these buffers again */
		td_alloc_free(a);
		return rc;
	}
	loan_handed(a, flags);
	*out = a;
	return 0;
fail:
	td__alloc_free_locked(a);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int td_client_alloc_ex(struct td_client *c, uint32_t plane_count,
		       const uint64_t *sizes, uint32_t flags,
		       struct td_alloc **out, struct td_error *err)
{
	return td_client_alloc_named(c, NULL, plane_count, sizes, flags, out,
				     err);
}

int td_client_alloc(struct td_client *c, uint32_t plane_count,
		    const uint64_t *sizes, struct td_alloc **out,
		    struct td_error *err)
{
	return td_client_alloc_ex(c, plane_count, sizes, 0, out, err);
}

/* ---- blobs ---- */

/* Everything a PUBLISH needs besides the caller's description. */
struct pub_ctx {
	uint32_t nbuf;       /* caller's buffers */
	const int *buf_fds;  /* their fds */
	const uint64_t *buf_len; /* their sizes, for default planes */
	bool identity;       /* fd table = buffers in order (loans) */
	uint32_t storage_kind;
	uint64_t alloc_id;
};

/*
 * Size and kind of a caller's buffer: a dma-buf (by its file system, as
 * the daemon tells it: whatever fstat says of its mode) or a regular
 * file (memfd, shm; the daemon checks which). 0, or -EINVAL with *why
 * for a pipe, socket, device or other fd no plane can be, or -errno.
 */
static int fd_len(int fd, uint64_t *len, bool *dmabuf, const char **why)
{
	struct stat st;
	off_t end;

	*why = NULL;
	if (fstat(fd, &st) < 0)
		return -errno;
	*dmabuf = td__plane_kind(fd) == TD_PLANE_DMABUF;
	if (!*dmabuf && !S_ISREG(st.st_mode)) {
		*why = S_ISFIFO(st.st_mode)   ? "a pipe"
		       : S_ISSOCK(st.st_mode) ? "a socket"
		       : S_ISCHR(st.st_mode)  ? "a character device"
		       : S_ISDIR(st.st_mode)  ? "a directory"
					      : "an fd of another kind";
		return -EINVAL;
	}
	if (!*dmabuf || st.st_size > 0) {
		*len = (uint64_t)st.st_size;
		return 0;
	}
	end = lseek(fd, 0, SEEK_END); /* older dma-bufs: no i_size */
	if (end < 0)
		return -errno;
	*len = (uint64_t)end;
	return 0;
}

int td_name_check(const char *name, struct td_error *err)
{
	const char *why;

	if (!name)
		return td__fail(err, -EINVAL, "missing tensor name");
	if (td_wire_name_check(name, strlen(name), false, &why) < 0)
		return td__fail(err, -EINVAL, "bad tensor name: %s", why);
	return 0;
}

#define PUBLISH_FLAGS \
	(TD_PUBLISH_PIN | TD_PUBLISH_FENCE | TD_PUBLISH_MODIFIERS | \
	 TD_PUBLISH_IF)

/* The PUBLISH's flags and condition; never sent to a daemon that would
 * publish without checking it (-EOPNOTSUPP). */
static int publish_cond(struct td_client *c, const struct td_publish *p,
			struct td_wire_publish_req *req, struct td_error *err)
{
	req->flags = p->flags & TD_PUBLISH_PIN;
	if (!(p->flags & TD_PUBLISH_IF))
		return 0;
	if (!td__has(c, TD_WIRE_FEAT_PUB_IF))
		return td__fail(err, -EOPNOTSUPP, "this daemon cannot publish "
				"\"%s\" only if it is at a version "
				"(TD_WIRE_FEAT_PUB_IF)", p->name);
	req->flags |= TD_WIRE_PUB_IF;
	req->expect = p->if_version;
	return 0;
}

/* What the daemon would refuse about p itself. 0 and *esz, or -errno. */
static int publish_check(const struct td_publish *p, unsigned *esz,
			 struct td_error *err)
{
	const char *why;

	if (!p->name || (p->ndim && !p->shape))
		return td__fail(err, -EINVAL, "no name or shape");
	if (td_wire_name_check(p->name, strlen(p->name), false, &why) < 0)
		return td__fail(err, -EINVAL, "tensor name: %s", why);
	*esz = td_dtype_size(p->dtype);
	if (!*esz)
		return td__fail(err, -EINVAL, "unknown dtype %u", p->dtype);
	if (p->ndim > TD_WIRE_MAX_DIMS)
		return td__fail(err, -EINVAL, "more than %d dimensions",
				TD_WIRE_MAX_DIMS);
	if (p->meta_len > TD_WIRE_MAX_META)
		return td__fail(err, -EMSGSIZE, "metadata over %d bytes",
				TD_WIRE_MAX_META);
	if (p->meta_len && !p->meta)
		return td__fail(err, -EINVAL, "meta_len %zu without meta",
				p->meta_len);
	if (p->flags & ~PUBLISH_FLAGS)
		return td__fail(err, -EINVAL, "unknown publish flags %#x",
				p->flags & ~PUBLISH_FLAGS);
	if ((p->flags & TD_PUBLISH_MODIFIERS) && !p->modifiers)
		return td__fail(err, -EINVAL,
				"TD_PUBLISH_MODIFIERS without modifiers");
	if ((p->flags & TD_PUBLISH_FENCE) && p->fence_fd < 0)
		return td__fail(err, -EBADF, "TD_PUBLISH_FENCE without fd");
	if (p->flags & TD_PUBLISH_FENCE) {
		/* the daemon checks too; a closed fd is only seen here */
		int kind = td__fence_publishable(p->fence_fd, &why);

		if (kind < 0)
			return td__fail(err, kind, "fence fd %d: %s",
					p->fence_fd, why);
	}
	return 0;
}

/* The blob's planes and the fd table they index into. */
struct pub_table {
	struct td_blob_plane planes[TD_WIRE_MAX_PLANES];
	uint32_t nplanes;
	int tab[TD_WIRE_MAX_PLANES + 1];
	uint32_t ntab;
	int32_t fence; /* its table index, -1 */
};

/*
 * The stride of plane i given as 0: for an image (format set), the row
 * pitch of its rows packed, or at the row dimension's stride when the
 * caller gave strides (what the daemon checks the plane by, spec §11.4);
 * otherwise the plane's size (not an image). A layout the format refuses
 * keeps the size, and the daemon says why.
 */
static uint64_t plane_stride0(const struct td_publish *p, uint32_t i,
			      uint64_t size)
{
	struct td_plane_layout l;
	uint64_t pitch = 0;
	unsigned np;

	if (!p->format || !p->format[0])
		return size;
	np = td_format_plane_count(p->format);
	if (!np)
		return size;
	if (p->strides && p->ndim >= 2) {
		int64_t s = p->strides[np > 1 && p->ndim >= 3 ? 1 : 0];

		pitch = s > 0 ? (uint64_t)s : 0;
	}
	if (td_format_plane_layout(p->format, p->dtype, p->ndim, p->shape, i,
				   pitch, &l) < 0)
		return size;
	return l.stride;
}

/* Planes and the fd table in order of first use (spec §8.1). */
static int publish_table(const struct td_publish *p, const struct pub_ctx *x,
			 struct pub_table *pt, struct td_error *err)
{
	uint32_t slot[TD_WIRE_MAX_PLANES] = {0}; /* buffer -> index + 1 */

	pt->ntab = 0;
	pt->nplanes = p->plane_count ? p->plane_count : x->nbuf;
	if (!pt->nplanes || pt->nplanes > TD_WIRE_MAX_PLANES)
		return td__fail(err, -EINVAL, "plane count must be 1..%d",
				TD_WIRE_MAX_PLANES);
	if (p->plane_count && !p->planes)
		return td__fail(err, -EINVAL, "plane_count %u without planes",
				p->plane_count);
	if (x->identity)
		for (pt->ntab = 0; pt->ntab < x->nbuf; pt->ntab++) {
			slot[pt->ntab] = pt->ntab + 1;
			pt->tab[pt->ntab] = x->buf_fds[pt->ntab];
		}
	for (uint32_t i = 0; i < pt->nplanes; i++) {
		struct td_plane pl = {i, 0, 0, 0};
		uint32_t b;

		if (p->plane_count)
			pl = p->planes[i];
		else
			pl.size = x->buf_len[i];
		b = pl.buffer;
		if (b >= x->nbuf)
			return td__fail(err, -EINVAL, "plane %u: no buffer %u",
					i, b);
		if (!slot[b]) {
			/* the same fd twice is one buffer: keep it once */
			for (uint32_t k = 0; k < pt->ntab && !slot[b]; k++)
				if (pt->tab[k] == x->buf_fds[b])
					slot[b] = k + 1;
			if (!slot[b]) {
				pt->tab[pt->ntab] = x->buf_fds[b];
				slot[b] = ++pt->ntab;
			}
		}
		pt->planes[i] = (struct td_blob_plane){
			.handle = slot[b] - 1,
			.offset = pl.offset,
			.stride = pl.stride ? pl.stride
					    : plane_stride0(p, i, pl.size),
			.size = pl.size,
			.used = pl.size,
			.modifier = p->flags & TD_PUBLISH_MODIFIERS
			                    ? p->modifiers[i]
			                    : 0,
		};
	}
	pt->fence = -1;
	if (p->flags & TD_PUBLISH_FENCE) {
		pt->fence = (int32_t)pt->ntab;
		pt->tab[pt->ntab++] = p->fence_fd;
	}
	return 0;
}

/*
 * The strides of p when it gives none (spec §8.1): dense C order, but an
 * image's row dimension (1 of a planar [C, H, W] grid, else 0) gets the
 * row pitch its first plane names, as edgefirst-tensor writes it.
 */
static void default_strides(const struct td_publish *p, unsigned esz,
			    int64_t *strides)
{
	int64_t st = esz;
	unsigned row;

	for (uint32_t i = p->ndim; i-- > 0;) {
		strides[i] = st;
		if (__builtin_mul_overflow(st, (int64_t)p->shape[i], &st) ||
		    p->shape[i] > INT64_MAX)
			st = 0; /* only a later dimension uses it */
	}
	if (!p->format || !p->format[0] || p->ndim < 2 || !p->plane_count ||
	    !p->planes || !p->planes[0].stride ||
	    p->planes[0].stride > INT64_MAX)
		return;
	row = td_format_plane_count(p->format) > 1 && p->ndim >= 3 ? 1 : 0;
	strides[row] = (int64_t)p->planes[0].stride;
}

/*
 * The blob of p into blob[TD_WIRE_MAX_BLOB], refused here when the
 * daemon would refuse it (§9.5). pid: the client's (no getpid() call per
 * publish: a system call, and a client is never used after a fork). Its
 * length, or -errno.
 */
static int64_t publish_blob(const struct td_publish *p,
			    const struct pub_ctx *x, unsigned esz,
			    struct pub_table *pt, uint32_t pid, uint8_t *blob,
			    struct td_error *err)
{
	const char *s[TD_BLOB_STRING_COUNT] = {
		p->format, p->color_space, p->color_transfer,
		p->color_encoding, p->color_range};
	int64_t strides[TD_WIRE_MAX_DIMS];
	struct td_blob_desc d = {0};
	struct td_blob_view v;
	struct td_err e = {0};
	int64_t n;
	int rc;

	if (!p->strides && p->ndim)
		default_strides(p, esz, strides);
	d.storage_kind = x->storage_kind;
	d.pid = pid;
	d.fence_fd = pt->fence;
	d.dtype = p->dtype;
	d.ndim = p->ndim;
	d.shape = p->shape;
	d.strides_len = p->ndim; /* the exporter always writes strides */
	d.strides = p->strides ? p->strides : strides;
	d.quant_axis = TD_QUANT_NONE;
	if (p->quant_scale_count) {
		d.quant_axis = p->quant_axis;
		d.quant_scales_len = p->quant_scale_count;
		d.quant_scales = p->quant_scales;
		d.quant_zero_points_len = p->quant_zero_point_count;
		d.quant_zero_points = p->quant_zero_points;
	}
	for (int i = 0; i < TD_BLOB_STRING_COUNT; i++)
		d.strings[i] = (struct td_str){
			s[i] ? s[i] : "", s[i] ? (uint32_t)strlen(s[i]) : 0};
	d.plane_count = pt->nplanes;
	d.planes = pt->planes;

	n = td_blob_encode(&d, blob, TD_WIRE_MAX_BLOB, &e);
	if (n < 0)
		return td__fail(err, (int)n, "blob: %s",
				e.reason ? e.reason : "too large");
	rc = td_blob_decode(blob, (size_t)n, &v, &e);
	if (rc == 0)
		rc = td_blob_check(&v, pt->ntab, &e);
	if (rc < 0)
		return td__fail(err, rc, "blob: %s%s%s",
				e.field ? e.field : "", e.field ? ": " : "",
				e.reason ? e.reason : "invalid");
	return n;
}

/* A published loan's buffers go idle in the cache (it owns them now). */
static void published_idle(struct td_client *c, struct td_alloc *a)
{
	uint32_t h = td__name_hash(a->name, a->name_len);

	for (uint32_t i = 0; i < a->count; i++) {
		if (!a->lb[i])
			continue;
		a->lb[i]->name_hash = h;
		td__loanbuf_idle(c, a->lb[i]);
		a->lb[i] = NULL;
		a->fds[i] = -1;
	}
}

/*
 * A published recyclable loan a: the next loan the reply lent, if any,
 * is kept for the next td_client_alloc_ex of the same sizes; then a's
 * buffers go idle. In that order: the next loan is mostly buffers idle
 * here (the daemon sends no fd for them), and a's going idle first
 * pushed the least recently used out of a full cache (TD__LOAN_CACHE),
 * which with a loan lent per name for as many names is the one lent
 * now: it could not be taken, went back, and nothing was staged.
 */
static void publish_done(struct td_client *c, struct td_alloc *a,
			 const struct td_wire_publish_rep *rep,
			 struct td__msg *m)
{
	struct td_alloc *next;

	if (!rep->has_loan || !rep->loan.alloc_id) {
		published_idle(c, a);
		return;
	}
	next = calloc(1, sizeof(*next));
	if (next) {
		for (uint32_t i = 0; i < TD_WIRE_MAX_PLANES; i++)
			next->fds[i] = -1;
		next->c = c;
		/* lent for the name a was published as (daemon: the same) */
		next->name_len = a->name_len;
		memcpy(next->name, a->name, a->name_len);
	}
	if (next)
		next->stream = true;
	if (!next || alloc_take(c, next, &rep->loan, a->count, a->size, true,
				m, NULL) < 0) {
		/* the daemon holds it: give it back with the next ALLOC */
		if (next)
			td__alloc_free_locked(next);
		c->unloan = true;
		published_idle(c, a);
		return;
	}
	published_idle(c, a);
	if (td__lent_keep(c, next))
		td__stage_note(c, rep); /* staged: fired if published alike */
}

/* A PUBLISH reply m to a request with flags: its version, its loan. */
static int publish_reply(struct td_client *c, struct td_alloc *a,
			 uint32_t flags, struct td__msg *m, uint64_t *version,
			 struct td_error *err)
{
	struct td_wire_publish_rep rep;
	int rc = td_wire_publish_rep_decode(m->body, m->body_len, &rep, NULL);

	if (rc < 0 || rep.has_loan != !!(flags & TD_WIRE_PUB_LOAN))
		return td__fail(err, -EPROTO, "bad PUBLISH reply");
	if (version)
		*version = rep.version;
	if (a)
		publish_done(c, a, &rep, m);
	return 0;
}

/* ---- a PUBLISH nobody waits for (td_client_publish_alloc_nowait) ---- */

void td__pub_answered(struct td_client *c, struct td__msg *m)
{
	struct td_alloc *a = c->pub_alloc;
	struct td_error e = {0};
	int rc;

	c->pub_id = 0;
	c->pub_alloc = NULL;
	if (m->hdr.status < 0)
		rc = td__reply_error(m, m->hdr.status, &e);
	else if (m->hdr.status > 0)
		rc = td__fail(&e, -EPROTO, "reply status %d > 0",
			      m->hdr.status);
	else
		rc = publish_reply(c, a, c->pub_flags, m, &c->pub_version, &e);
	/* published: its buffers went idle above; refused: they go, and
	 * the daemon is told (it may still hold the alloc) */
	if (rc < 0) {
		td__alloc_give_back(c, a);
		td__stage_refused(c);
	}
	td__alloc_free_locked(a);
	td__msg_close_fds(m);
	if (rc < 0 && !c->pub_err.code)
		td__fail(&c->pub_err, rc, "PUBLISH sent without waiting: %s",
			 e.reason);
}

void td__pub_forget(struct td_client *c, int code)
{
	if (!c->pub_id)
		return;
	c->pub_id = 0;
	td__alloc_free_locked(c->pub_alloc);
	c->pub_alloc = NULL;
	if (!c->pub_err.code)
		td__fail(&c->pub_err, code,
			 "the connection ended before the daemon answered the "
			 "PUBLISH sent without waiting (it may or may not "
			 "have been published): %s",
			 strerror(-code));
}

/*
 * Before the next producing call (lock held): wait for the answer to the
 * PUBLISH sent without waiting, if it is still on its way (the receive
 * sets aside whatever comes before it), then return a failure of it not
 * returned yet, once; or 0 and the version the last one published.
 */
static int pub_settle(struct td_client *c, uint64_t *version,
		      struct td_error *err)
{
	struct td__msg m = {0};
	int rc;

	/* a child of fork(): the answer on the socket, or the failure
	 * read already, is the parent's */
	if ((c->pub_id || c->pub_err.code) && td__client_foreign(c))
		return td__fail(err, -ECHILD,
				"this connection belongs to process %d; a "
				"child of fork() connects on its own",
				(int)c->pid);
	while (c->pub_id) {
		rc = td__msg_recv(c, &m, 0);
		if (rc < 0)
			td__pub_forget(c, rc);
		else
			td__msg_aside(c, &m);
	}
	if (c->pub_err.code) {
		rc = c->pub_err.code;
		if (err)
			*err = c->pub_err;
		c->pub_err = (struct td_error){0};
		return rc;
	}
	if (version)
		*version = c->pub_version;
	return 0;
}

int td_client_publish_wait(struct td_client *c, uint64_t *version,
			   struct td_error *err)
{
	int rc;

	if (!c)
		return td__fail(err, -EINVAL, "missing argument");
	td__client_lock(c);
	rc = pub_settle(c, version, err);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/*
 * Lock held: does a PUBLISH attach its fd table (SCM_RIGHTS) rather than
 * name the numbers for the daemon to pull? On the SCM path; and on the
 * pidfd path too once td_client_set_interrupt() is set: a signal may
 * then abandon the request unanswered (reply_wait), and the caller
 * closes its descriptors while the daemon, which still reads the
 * datagram queued before the hang-up, has yet to pull them: it would
 * pull whatever file took such a number meanwhile (another buffer, a
 * socket) and publish that. An attached descriptor is the caller's file
 * itself, whatever becomes of the number.
 */
static bool pub_attach(const struct td_client *c)
{
	return c->path_in == TD_IMPORT_SCM || c->intr_fn;
}

static int publish_send(struct td_client *c, const struct td_publish *p,
			const struct pub_ctx *x, struct td_alloc *a,
			uint64_t *version, bool nowait, struct td_error *err)
{
	struct pub_table pt;
	struct td_wire_publish_req req = {0};
	struct td__msg m = {0};
	uint8_t *blob = NULL;
	unsigned esz = 0;
	int64_t n;
	int rc;

	/* an earlier PUBLISH sent without waiting: answered first */
	rc = pub_settle(c, NULL, err);
	if (rc < 0)
		return rc;
	rc = publish_check(p, &esz, err);
	if (rc == 0)
		rc = publish_cond(c, p, &req, err);
	if (rc == 0)
		rc = publish_table(p, x, &pt, err);
	if (rc < 0)
		return rc;
	blob = malloc(TD_WIRE_MAX_BLOB);
	if (!blob)
		return td__fail(err, -ENOMEM, "out of memory");
	n = publish_blob(p, x, esz, &pt, (uint32_t)c->pid, blob, err);
	if (n < 0) {
		/* nothing kept yet: the descriptor kept last is another's */
		free(blob);
		return (int)n;
	}
	req.name = (struct td_wire_str){p->name, (uint16_t)strlen(p->name)};
	req.alloc_id = x->alloc_id;
	req.meta = (struct td_wire_bytes){p->meta, (uint32_t)p->meta_len};
	req.blob = (struct td_wire_bytes){blob, (uint32_t)n};
	req.fd_count = pt.ntab;
	for (uint32_t i = 0; i < pt.ntab; i++)
		req.fds[i] = pt.tab[i];
	if (td__lent_ask(c, a)) {
		req.flags |= TD_WIRE_PUB_LOAN;
		if (c->path_out == TD_IMPORT_SCM)
			req.flags |= TD_WIRE_PUB_LOAN_SCM;
		req.held_count = loans_held(c, a, a->count, req.held);
	}
	/* only a stream's publish that asks for the next loan, or a
	 * rewritable loan's, may be staged (its descriptor kept): a name
	 * past the lent loans a connection keeps must not push out the
	 * descriptor of one whose stage is on offer */
	req.flags |= td__stage_flags(
		c, a ? a->alloc_id : 0,
		a && a->name_len &&
			((a->stream && (req.flags & TD_WIRE_PUB_LOAN)) ||
			 a->rw_asked),
		p->name, &req);
	n = td_wire_publish_req_encode(&req, c->sbuf + TD_WIRE_HDR_LEN,
				       TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
	if (n < 0) {
		rc = td__fail(err, (int)n, "PUBLISH does not fit a message");
		goto out;
	}
	if (nowait) {
		uint64_t id;

		/*
		 * Its -EPERM would come too late to send it again with the
		 * fds: attach them whenever the daemon would pull some.
		 */
		rc = td__request(c, TD_OP_PUBLISH, (size_t)n, pt.tab,
				 x->identity && pt.ntab == x->nbuf ? 0
								   : pt.ntab,
				 &id, &m, err);
		if (rc == 0) {
			c->pub_id = id;
			c->pub_alloc = a;
			c->pub_flags = req.flags;
			/* the version is this one's (0 unless it makes one) */
			c->pub_version = 0;
		}
		goto out;
	}
	/*
	 * On the SCM path the fd table rides along, except when it is
	 * exactly a loan's planes: the daemon has those (§6.3); so too
	 * where a signal may abandon the wait for the reply (pub_attach).
	 */
	rc = td__call(c, TD_OP_PUBLISH, (size_t)n, pt.tab,
		      pub_attach(c) &&
				      !(x->identity && pt.ntab == x->nbuf)
			      ? pt.ntab
			      : 0,
		      &m, err);
	/*
	 * The daemon refuses to pull (-EPERM) when this process no longer
	 * has the credentials it connected with (a setuid exec, setresuid)
	 * or the kernel says no: send the same request with the fds
	 * attached, and attach them from now on (it switched too).
	 */
	if (rc == -EPERM && c->path_in == TD_IMPORT_PIDFD &&
	    !c->pidfd_forced) {
		c->path_in = TD_IMPORT_SCM;
		rc = td__call(c, TD_OP_PUBLISH, (size_t)n, pt.tab, pt.ntab, &m,
			      err);
	}
	if (rc == 0)
		rc = publish_reply(c, a, req.flags, &m, version, err);
out:
	if (rc < 0)
		td__stage_refused(c);
	td__msg_close_fds(&m);
	free(blob);
	return rc;
}

int64_t td__publish_body(struct td_client *c, struct td_alloc *a,
			 const struct td_publish *p, uint8_t *buf, size_t cap,
			 int *tab, uint32_t *nattach, struct td_error *err)
{
	struct pub_ctx x = {.storage_kind = TD_STORAGE_SHM, .identity = true,
			    .nbuf = a->count, .buf_fds = a->fds,
			    .buf_len = a->size, .alloc_id = a->alloc_id};
	struct td_wire_publish_req req = {0};
	struct pub_table pt;
	uint8_t *blob;
	unsigned esz = 0;
	int64_t n;
	int rc = publish_check(p, &esz, err);

	if (rc == 0)
		rc = publish_cond(c, p, &req, err);
	if (rc == 0)
		rc = publish_table(p, &x, &pt, err);
	if (rc < 0)
		return rc;
	blob = malloc(TD_WIRE_MAX_BLOB);
	if (!blob)
		return td__fail(err, -ENOMEM, "out of memory");
	n = publish_blob(p, &x, esz, &pt, (uint32_t)c->pid, blob, err);
	if (n >= 0) {
		req.name = (struct td_wire_str){p->name,
						(uint16_t)strlen(p->name)};
		req.alloc_id = x.alloc_id;
		req.meta = (struct td_wire_bytes){p->meta,
						  (uint32_t)p->meta_len};
		req.blob = (struct td_wire_bytes){blob, (uint32_t)n};
		req.fd_count = pt.ntab;
		for (uint32_t i = 0; i < pt.ntab; i++)
			req.fds[i] = pt.tab[i];
		n = td_wire_publish_req_encode(&req, buf, cap);
		if (n < 0)
			n = td__fail(err, -EMSGSIZE, "the PUBLISH_MANY "
				     "request does not fit one message");
	}
	/* on the SCM path the fd table rides along, except when it is
	 * exactly the loan's planes: the daemon has those (§6.3) */
	*nattach = 0;
	if (n >= 0 && pub_attach(c) && pt.ntab != x.nbuf) {
		memcpy(tab, pt.tab, pt.ntab * sizeof(*tab));
		*nattach = pt.ntab;
	}
	free(blob);
	return n;
}

int td__pub_settle(struct td_client *c, struct td_error *err)
{
	return pub_settle(c, NULL, err);
}

void td__published_idle(struct td_client *c, struct td_alloc *a)
{
	published_idle(c, a);
}

int td_client_publish(struct td_client *c, const struct td_publish *p,
		      uint64_t *version, struct td_error *err)
{
	uint64_t lens[TD_WIRE_MAX_PLANES];
	struct pub_ctx x = {.storage_kind = TD_STORAGE_SHM};
	int rc, kind_of[2] = {-1, -1}; /* a memfd's, a dma-buf's index */

	if (!c || !p || (p->fd_count && !p->fds))
		return td__fail(err, -EINVAL, "missing argument");
	if (!p->fd_count || p->fd_count > TD_WIRE_MAX_PLANES)
		return td__fail(err, -EINVAL, "fd count must be 1..%d",
				TD_WIRE_MAX_PLANES);
	for (uint32_t i = 0; i < p->fd_count; i++) {
		const char *why;
		bool dmabuf;

		rc = fd_len(p->fds[i], &lens[i], &dmabuf, &why);
		if (rc < 0 && why)
			return td__fail(err, rc, "buffer %u (fd %d) is %s, not "
					"a memfd or dma-buf", i, p->fds[i],
					why);
		if (rc < 0)
			return td__fail(err, rc, "buffer %u (fd %d): %s", i,
					p->fds[i], strerror(-rc));
		if (dmabuf)
			x.storage_kind = TD_STORAGE_DMABUF;
		if (kind_of[dmabuf] < 0)
			kind_of[dmabuf] = (int)i;
	}
	/* the blob has one storage kind per tensor: the daemon refused a
	 * mix naming a storage_kind the caller never chose */
	if (kind_of[0] >= 0 && kind_of[1] >= 0)
		return td__fail(err, -EINVAL, "buffer %d (fd %d) is a dma-buf "
				"but buffer %d (fd %d) is not: a tensor's "
				"buffers are all memfds or all dma-bufs",
				kind_of[1], p->fds[kind_of[1]], kind_of[0],
				p->fds[kind_of[0]]);
	x.nbuf = p->fd_count;
	x.buf_fds = p->fds;
	x.buf_len = lens;
	td__client_lock(c);
	rc = publish_send(c, p, &x, NULL, version, false, err);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static int publish_alloc(struct td_client *c, struct td_alloc *a,
			 const struct td_publish *p, uint64_t *version,
			 bool nowait, struct td_error *err)
{
	struct pub_ctx x = {.storage_kind = TD_STORAGE_SHM, .identity = true};
	int rc;

	if (!c || !a || !p || a->c != c) {
		if (a)
			td_alloc_free(a);
		return td__fail(err, -EINVAL,
				!c || !a || !p ? "missing argument"
					       : "the loan was made on another "
						 "connection (one closed or "
						 "reconnected since?): publish "
						 "it on the client it came "
						 "from");
	}
	if (a->name_len && (!p->name || strlen(p->name) != a->name_len ||
			    memcmp(p->name, a->name, a->name_len))) {
		rc = td__fail(err, -EINVAL, "the loan is for \"%s\", not "
			      "\"%s\"", a->name, p->name ? p->name : "");
		td_alloc_free(a);
		return rc;
	}
	x.nbuf = a->count;
	x.buf_fds = a->fds;
	x.buf_len = a->size;
	x.alloc_id = a->alloc_id;
	td__client_lock(c);
	/* the failure of an earlier PUBLISH sent without waiting comes first */
	rc = pub_settle(c, NULL, err);
	/* a loan of a connection that is gone names nothing in this daemon */
	if (rc == 0)
		rc = td__client_usable(c, err);
	if (rc == 0 && a->epoch != c->epoch)
		rc = td__fail(err, -ECONNRESET, "the loan was made before the "
			      "client reconnected");
	if (rc < 0) {
		td__alloc_give_back(c, a);
		td__alloc_free_locked(a);
		pthread_mutex_unlock(&c->lock);
		td__client_unref(c);
		return rc;
	}
	/*
	 * A plain loan is write-sealed (F_SEAL_WRITE) here, not in the
	 * daemon's loop, which the kernel refuses while any writable shared
	 * mapping exists: unmap first. A recyclable loan is not sealed and
	 * keeps its mappings for the next one (published: idle in the cache;
	 * refused: dropped with the loan).
	 */
	if (a->rw_asked)
		c->rw_fill_ns = td__now_ns() - a->handed_ns;
	if (a->marked && p->name && strlen(p->name) <= TD_WIRE_MAX_NAME) {
		c->rw_last_len = (uint16_t)strlen(p->name);
		memcpy(c->rw_last, p->name, c->rw_last_len);
	}
	td__alloc_unmap(a);
	rc = td__alloc_seal(a, -1, err);
	if (rc == 0)
		rc = publish_send(c, p, &x, a, version, nowait, err);
	/* sent without waiting: the loan is kept until the answer; refused:
	 * the daemon is told it is given up (it may still hold it) */
	if (rc < 0)
		td__alloc_give_back(c, a);
	if (rc < 0 || !nowait)
		td__alloc_free_locked(a);
	pthread_mutex_unlock(&c->lock);
	td__client_unref(c);
	return rc;
}

int td_client_publish_alloc(struct td_client *c, struct td_alloc *a,
			    const struct td_publish *p, uint64_t *version,
			    struct td_error *err)
{
	return publish_alloc(c, a, p, version, false, err);
}

int td_client_publish_alloc_nowait(struct td_client *c, struct td_alloc *a,
				   const struct td_publish *p,
				   struct td_error *err)
{
	return publish_alloc(c, a, p, NULL, true, err);
}

int td_client_put(struct td_client *c, const struct td_publish *p,
		  const void *data, size_t len, uint64_t *version,
		  struct td_error *err)
{
	return td_client_put_ex(c, p, data, len, 0, version, err);
}

int td_client_put_ex(struct td_client *c, const struct td_publish *p,
		     const void *data, size_t len, uint32_t alloc_flags,
		     uint64_t *version, struct td_error *err)
{
	struct td_publish q;
	struct td_alloc *a;
	uint64_t size = len;
	int rc;

	if (!c || !p || (len && !data))
		return td__fail(err, -EINVAL, "missing argument");
	if (alloc_flags & ~(TD_ALLOC_RECYCLE | TD_ALLOC_STREAM))
		return td__fail(err, -EINVAL, "put: alloc flags 0x%x: only "
				"TD_ALLOC_RECYCLE and TD_ALLOC_STREAM",
				alloc_flags);
	rc = td_client_alloc_named(c, alloc_flags ? p->name : NULL, 1, &size,
				   alloc_flags, &a, err);
	if (rc < 0)
		return rc;
	if (len)
		memcpy(td_alloc_data(a, 0), data, len);
	q = *p;
	q.plane_count = 0;
	q.planes = NULL;
	q.fd_count = 0;
	q.fds = NULL;
	return td_client_publish_alloc(c, a, &q, version, err);
}
