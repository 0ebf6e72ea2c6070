/* SPDX-License-Identifier: MIT */
/*
 * libtensord consuming side: GET, the mapping cache, tensor accessors,
 * fences, RELEASE.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blob.h"
#include "bytes.h"
#include "client.h"
#include "gpu.h"
#include "os.h"

struct td__tplane {
	const uint8_t *data;
	uint8_t *copy; /* an inline plane's bytes, owned */
	uint64_t size;
	uint64_t stride;
	uint64_t offset; /* inside its buffer (the fd's file), 0 inline */
	uint64_t modifier; /* DRM format modifier, 0 linear */
	int fd;
	int kind; /* TD_PLANE_*, 0 inline */
};

struct td_tensor {
	struct td_client *c;
	uint64_t version;
	uint64_t lease_id;
	uint32_t epoch; /* c->epoch of the connection that leased it */
	uint32_t dtype;
	uint32_t ndim;
	uint32_t strides_len;
	int32_t quant_axis;
	uint32_t scale_count, zp_count;
	uint32_t plane_count;
	uint32_t map_count;
	int fence_fd;
	uint64_t *shape;
	int64_t *strides;
	float *scales;
	int32_t *zps;
	char *strings[TD_BLOB_STRING_COUNT];
	uint8_t *meta;
	size_t meta_len;
	struct td__tplane planes[TD_WIRE_MAX_PLANES];
	struct td__map *maps[TD_WIRE_MAX_PLANES];
	/* maps[i] is a dma-buf whose CPU access was started (SYNC_START) */
	bool synced[TD_WIRE_MAX_PLANES];
	/* the follow that gave it: held through its row (lease_id 0), or
	 * a lease got by GET for it (td__tensor_follow), and what lets it
	 * go on once the tensor is released (follow.c's, handed down) */
	struct td_follow *follow;
	void (*let_go)(struct td_follow *f);
};

/* ---- mapping cache ---- */

static void map_destroy(struct td_client *c, struct td__map *m)
{
	if (m->prev)
		m->prev->next = m->next;
	else
		c->maps = m->next;
	if (m->next)
		m->next->prev = m->prev;
	if (m->addr)
		munmap(m->addr, m->len);
	if (m->fd >= 0)
		close(m->fd);
	free(m);
}

static int buffer_len(int fd, size_t *len, uint64_t *align)
{
	struct stat st;
	off_t end;

	if (fstat(fd, &st) < 0)
		return -errno;
	/* mmap offsets: pages, or huge pages on hugetlbfs (its blksize) */
	*align = (uint64_t)sysconf(_SC_PAGESIZE);
	if (st.st_blksize > 0 && (uint64_t)st.st_blksize > *align &&
	    !(st.st_blksize & (st.st_blksize - 1)))
		*align = (uint64_t)st.st_blksize;
	if (S_ISREG(st.st_mode)) {
		*len = (size_t)st.st_size;
		return 0;
	}
	/* dma-bufs report their size through lseek, not fstat */
	end = lseek(fd, 0, SEEK_END);
	if (end < 0)
		return -errno;
	*len = (size_t)end;
	return 0;
}

/*
 * Map a buffer read-only. Shared first: read-only shared mappings of a
 * write-sealed memfd are allowed on current kernels, but some older ones
 * refuse any MAP_SHARED of it (EPERM); a private read-only mapping of
 * shmem still maps the same page-cache pages, so zero copy holds.
 */
static int map_ro(int fd, uint64_t off, size_t len, void **addr)
{
	void *p;

	*addr = NULL;
	if (len == 0)
		return 0;
	/* aligned for host-pointer imports when len allows (gpu.h) */
	p = td__mmap_natural(len, PROT_READ, MAP_SHARED, fd, (off_t)off);
	if (p == MAP_FAILED && (errno == EPERM || errno == EACCES))
		p = td__mmap_natural(len, PROT_READ, MAP_PRIVATE, fd,
				     (off_t)off);
	if (p == MAP_FAILED)
		return -errno;
	*addr = p;
	return 0;
}

int td__map_get(struct td_client *c, uint64_t buffer_id, int32_t remote,
		int *scm, uint64_t lo, uint64_t hi, struct td__map **out)
{
	bool window = buffer_id & TD_WIRE_BUF_WINDOW;
	struct td__map *m;
	uint64_t align = 0, end;
	size_t flen = 0;
	int rc, fd = -1;

	for (m = c->maps; m; m = m->next) {
		/* a window of the right pages: its aligned span covers them */
		if (m->buffer_id != buffer_id ||
		    (window && (lo < m->off || hi > m->off + m->len)))
			continue;
		if (m->refs++ == 0)
			c->idle_maps--;
		*out = m;
		return 0; /* an attached duplicate is closed by the caller */
	}
	if (remote < 0 && !scm)
		return -ENOENT; /* left out, and not mapped here */
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->fd = -1;
	rc = td__import_fd(c, remote, scm, &fd);
	if (rc < 0)
		goto fail;
	m->fd = fd;
	rc = buffer_len(fd, &flen, &align);
	if (rc < 0)
		goto fail;
	m->len = flen;
	if (window && hi > lo) {
		/*
		 * Only the pages the planes use: a ring's data file holds
		 * every slot, and mapping all of it per GET would cost its
		 * whole size in address space and page tables.
		 */
		m->off = lo & ~(align - 1);
		if (td__add_ovf(hi, align - 1, &end) ||
		    (end & ~(align - 1)) > flen) {
			rc = -EPROTO;
			goto fail;
		}
		m->len = (size_t)((end & ~(align - 1)) - m->off);
	} else if (window) {
		m->len = 0; /* no plane uses it */
	}
	m->kind = td__plane_kind(fd);
	rc = map_ro(fd, m->off, m->len, &m->addr);
	/* a dma-buf whose exporter refuses CPU maps is still handed over,
	 * unmapped, for the consumer to import (td_tensor_plane_kind) */
	if (rc < 0 && m->kind == TD_PLANE_DMABUF)
		rc = 0;
	if (rc < 0)
		goto fail;
	m->buffer_id = buffer_id;
	m->refs = 1;
	m->next = c->maps;
	if (c->maps)
		c->maps->prev = m;
	c->maps = m;
	*out = m;
	return 0;
fail:
	if (m->fd >= 0)
		close(m->fd);
	free(m);
	return rc;
}

static void evict_lru(struct td_client *c)
{
	struct td__map *m, *old = NULL;

	for (m = c->maps; m; m = m->next)
		if (m->refs == 0 && (!old || m->used < old->used))
			old = m;
	if (old) {
		map_destroy(c, old);
		c->idle_maps--;
	}
}

void td__map_put(struct td_client *c, struct td__map *m)
{
	if (--m->refs)
		return;
	/* once the client is closed nothing can reuse it */
	if (c->sock < 0) {
		map_destroy(c, m);
		return;
	}
	m->used = ++c->clock;
	c->idle_maps++;
	while (c->idle_maps > TD__CACHE_MAX)
		evict_lru(c);
}

void td__maps_drop(struct td_client *c, bool all)
{
	struct td__map *m = c->maps, *next;

	for (; m; m = next) {
		next = m->next;
		if (m->refs && !all)
			continue;
		if (!m->refs)
			c->idle_maps--;
		map_destroy(c, m);
	}
}

int td_client_trim(struct td_client *c)
{
	unsigned before;

	if (!c)
		return -EINVAL;
	td__client_lock(c);
	before = c->idle_maps;
	td__maps_drop(c, false);
	/*
	 * Not while a PUBLISH sent without waiting asks for the next loan:
	 * it told the daemon these buffers are held here, and its reply may
	 * lend them back without an fd.
	 */
	if (!c->pub_id || !(c->pub_flags & TD_WIRE_PUB_LOAN))
		before += td__loans_drop(c, false);
	pthread_mutex_unlock(&c->lock);
	return (int)before;
}

/* ---- tensors ---- */

/*
 * refused: the tensor of a reply that is not handed out. A mapping it
 * made and no other tensor took (never idle, so nobody else has it) is
 * not kept for later either: the fds and mappings of a refused reply
 * all go with it, and the cache never names a buffer by an id from a
 * reply found bad.
 */
static void tensor_free(struct td_tensor *t, bool refused)
{
	for (uint32_t i = 0; i < t->map_count; i++) {
		struct td__map *m = t->maps[i];

		if (t->synced[i])
			(void)td__dmabuf_sync(m->fd, false);
		if (refused && m->refs == 1 && m->used == 0)
			map_destroy(t->c, m);
		else
			td__map_put(t->c, m);
	}
	if (t->fence_fd >= 0)
		close(t->fence_fd);
	free(t->shape);
	free(t->strides);
	free(t->scales);
	free(t->zps);
	for (int i = 0; i < TD_BLOB_STRING_COUNT; i++)
		free(t->strings[i]);
	free(t->meta);
	for (uint32_t i = 0; i < t->plane_count; i++)
		free(t->planes[i].copy);
	free(t);
}

/*
 * RELEASE. quiet (to a daemon that serves TD_WIRE_FEAT_RELEASE_QUIET):
 * without waiting, the request on the socket is ordered before this
 * connection's next one. nowait: a path that must not block (an
 * asynchronous GET's reply): sent without waiting, its reply dropped
 * when it comes.
 */
static int send_release(struct td_client *c, uint64_t lease_id, bool quiet,
			bool nowait)
{
	struct td_wire_release_req req = {.lease_id = lease_id};
	struct td__msg m;
	int64_t len;
	int rc;

	if (quiet && td__has(c, TD_WIRE_FEAT_RELEASE_QUIET))
		req.flags = TD_WIRE_REL_QUIET;
	len = td_wire_release_req_encode(&req, c->sbuf + TD_WIRE_HDR_LEN,
					 TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
	if (len < 0)
		return (int)len;
	if (nowait || req.flags)
		return td__send(c, TD_OP_RELEASE, (size_t)len, NULL);
	rc = td__call(c, TD_OP_RELEASE, (size_t)len, NULL, 0, &m, NULL);
	if (rc == 0)
		td__msg_close_fds(&m);
	return rc;
}

static void tensor_release(struct td_tensor *t, bool quiet)
{
	struct td_client *c;

	if (!t)
		return;
	c = t->c;
	td__client_lock(c);
	/*
	 * A closed or broken connection already ended the lease on the
	 * daemon's side; there is nothing to tell it then. A follow's
	 * hold is one store to its row; a lease a follow got by GET is
	 * released as any, and then its follow goes on (or ends).
	 */
	if ((t->lease_id || !t->follow) && c->sock >= 0 && !c->dead &&
	    t->epoch == c->epoch)
		send_release(c, t->lease_id, quiet, false);
	if (t->follow)
		t->let_go(t->follow);
	tensor_free(t, false);
	pthread_mutex_unlock(&c->lock);
	td__client_unref(c);
}

void td_tensor_release(struct td_tensor *t)
{
	tensor_release(t, false);
}

void td_tensor_release_nowait(struct td_tensor *t)
{
	tensor_release(t, true);
}

static char *str_dup(struct td_str s)
{
	char *p = malloc((size_t)s.len + 1);

	if (!p)
		return NULL;
	if (s.len)
		memcpy(p, s.ptr, s.len);
	p[s.len] = 0;
	return p;
}

static void *arr_alloc(size_t n, size_t elem)
{
	return calloc(n ? n : 1, elem);
}

/* Copy the description out of the blob (it borrows c->rbuf). */
static int tensor_describe(struct td_tensor *t, const struct td_blob_view *v,
			   struct td_wire_bytes meta)
{
	t->dtype = v->dtype;
	t->ndim = v->ndim;
	t->strides_len = v->strides_len;
	t->quant_axis = v->quant_axis;
	t->scale_count = v->quant_scales_len;
	t->zp_count = v->quant_zero_points_len;
	t->shape = arr_alloc(v->ndim, sizeof(*t->shape));
	t->strides = arr_alloc(v->strides_len, sizeof(*t->strides));
	t->scales = arr_alloc(v->quant_scales_len, sizeof(*t->scales));
	t->zps = arr_alloc(v->quant_zero_points_len, sizeof(*t->zps));
	if (!t->shape || !t->strides || !t->scales || !t->zps)
		return -ENOMEM;
	for (uint32_t i = 0; i < v->ndim; i++)
		t->shape[i] = td_blob_shape(v, i);
	for (uint32_t i = 0; i < v->strides_len; i++)
		t->strides[i] = td_blob_stride(v, i);
	for (uint32_t i = 0; i < v->quant_scales_len; i++)
		t->scales[i] = td_blob_quant_scale(v, i);
	for (uint32_t i = 0; i < v->quant_zero_points_len; i++)
		t->zps[i] = td_blob_quant_zero_point(v, i);
	for (int i = 0; i < TD_BLOB_STRING_COUNT; i++) {
		t->strings[i] = str_dup(v->strings[i]);
		if (!t->strings[i])
			return -ENOMEM;
	}
	if (meta.len) {
		t->meta = malloc(meta.len);
		if (!t->meta)
			return -ENOMEM;
		memcpy(t->meta, meta.ptr, meta.len);
		t->meta_len = meta.len;
	}
	return 0;
}

/*
 * Import every fd-table entry of a GET reply: the fence fresh each time,
 * buffers through the cache. Attached fds that are not kept stay in m and
 * are closed by the caller.
 */
static int tensor_import(struct td_client *c, struct td_tensor *t,
			 const struct td_wire_get_rep *rep,
			 const struct td_blob_view *v, struct td__msg *m,
			 bool cache_only, struct td_error *err)
{
	struct td__map *tab[TD_WIRE_MAX_PLANES + 1] = {0};
	/* the span of each fd-table entry the planes use (windows) */
	uint64_t lo[TD_WIRE_MAX_PLANES + 1], hi[TD_WIRE_MAX_PLANES + 1];
	struct td_blob_cursor cur = TD_BLOB_CURSOR_INIT;
	struct td_blob_plane p;
	bool scm_path = c->path_out == TD_IMPORT_SCM;
	unsigned nfd = 0, k = 0;
	int rc;

	/* SCM: entries with fd -1 (held buffers) have nothing attached */
	for (uint32_t i = 0; i < rep->fd_count; i++)
		nfd += rep->fds[i].fd >= 0;
	if (scm_path && m->nfds != nfd)
		return td__fail(err, -EPROTO, "GET: %u fds attached, %u "
				"described", m->nfds, nfd);
	for (uint32_t i = 0; i <= TD_WIRE_MAX_PLANES; i++) {
		lo[i] = UINT64_MAX;
		hi[i] = 0;
	}
	while (td_blob_plane_next(v, &cur, &p) == 0) {
		uint64_t end;

		/* td_blob_check() bounded handle by fd_count */
		if (p.handle < 0)
			continue;
		if (td__add_ovf(p.offset, p.size, &end))
			return td__fail(err, -EPROTO, "plane past 2^64");
		if (p.offset < lo[p.handle])
			lo[p.handle] = p.offset;
		if (end > hi[p.handle])
			hi[p.handle] = end;
	}
	cur = TD_BLOB_CURSOR_INIT;
	for (uint32_t i = 0; i < rep->fd_count; i++) {
		/* left out because this client said it maps that buffer,
		 * or a follow's entry (which carries no fd at all) */
		bool omitted = (scm_path || cache_only) && rep->fds[i].fd < 0;
		int *scm = !omitted && k < m->nfds ? &m->fds[k++] : NULL;

		if (v->fence_fd >= 0 && (uint32_t)v->fence_fd == i) {
			if (omitted)
				return td__fail(err, -EPROTO, "GET reply "
						"left out the fence");
			rc = td__import_fd(c, rep->fds[i].fd, scm,
					   &t->fence_fd);
			if (rc < 0)
				return td__fail(err, rc, "import fence: %s",
						strerror(-rc));
			continue;
		}
		rc = td__map_get(c, rep->fds[i].buffer_id, rep->fds[i].fd, scm,
				 lo[i] > hi[i] ? 0 : lo[i], hi[i], &tab[i]);
		if (rc == -ENOENT && cache_only)
			return -ENOENT; /* the caller GETs it instead */
		if (rc < 0 && omitted)
			return td__fail(err, -EPROTO, "GET reply left out "
					"buffer %u (id %llu), which is not "
					"mapped here", i,
					(unsigned long long)
						rep->fds[i].buffer_id);
		if (rc < 0)
			return td__fail(err, rc, "import buffer %u: %s", i,
					strerror(-rc));
		t->maps[t->map_count++] = tab[i];
	}
	for (uint32_t i = 0; td_blob_plane_next(v, &cur, &p) == 0; i++) {
		struct td__map *mp;
		uint64_t end;

		t->planes[i].size = p.size;
		t->planes[i].stride = p.stride;
		t->planes[i].modifier = p.modifier;
		t->planes[i].fd = -1;
		if (p.handle < 0) {
			/* inline (td_blob_check: all planes are): copy out */
			t->planes[i].copy = malloc(p.data_len ? p.data_len : 1);
			if (!t->planes[i].copy)
				return td__fail(err, -ENOMEM, "out of memory");
			if (p.data_len)
				memcpy(t->planes[i].copy, p.data, p.data_len);
			t->planes[i].data = p.data_len ? t->planes[i].copy
						       : NULL;
			continue;
		}
		/* td_blob_check() bounded handle by fd_count */
		mp = tab[p.handle];
		if (!mp || td__add_ovf(p.offset, p.size, &end) ||
		    p.offset < mp->off || end - mp->off > mp->len)
			return td__fail(err, -EPROTO, "plane %u outside its "
					"buffer", i);
		t->planes[i].data = mp->addr ? (uint8_t *)mp->addr +
						       (p.offset - mp->off)
					     : NULL;
		if (!p.size)
			t->planes[i].data = NULL;
		t->planes[i].fd = mp->fd;
		t->planes[i].offset = p.offset;
		t->planes[i].kind = mp->kind;
	}
	/* CPU reads of a dma-buf between SYNC_START and SYNC_END (release) */
	for (uint32_t i = 0; i < t->map_count; i++) {
		if (t->maps[i]->kind != TD_PLANE_DMABUF || !t->maps[i]->addr)
			continue;
		rc = td__dmabuf_sync(t->maps[i]->fd, true);
		if (rc < 0)
			return td__fail(err, rc, "DMA_BUF_IOCTL_SYNC start on "
					"buffer %u: %s", i, strerror(-rc));
		t->synced[i] = true;
	}
	return 0;
}

/*
 * SCM path: advertise the buffers mapped here, so the daemon attaches no
 * fd for them (docs/fastpath.md, "Recycled loans"). At most
 * TD_WIRE_MAX_HELD of the cache's ids, the most recently used first
 * (in use counts as most recent); windows (ring slots) never, their
 * cache entry depends on the pages. Lock held.
 */
static void held_pick(const struct td_client *c, struct td_wire_get_req *r)
{
	uint64_t key[TD_WIRE_MAX_HELD];
	uint32_t n = 0;

	for (const struct td__map *m = c->maps; m; m = m->next) {
		uint64_t k = m->refs ? UINT64_MAX : m->used;
		uint32_t at;

		if (m->buffer_id == 0 || (m->buffer_id & TD_WIRE_BUF_WINDOW))
			continue;
		/* ids are unique in the cache (one mapping per buffer) */
		for (at = n; at > 0 && key[at - 1] < k; at--)
			;
		if (at == TD_WIRE_MAX_HELD)
			continue;
		if (n < TD_WIRE_MAX_HELD)
			n++;
		memmove(&key[at + 1], &key[at], (n - 1 - at) * sizeof(*key));
		memmove(&r->held[at + 1], &r->held[at],
			(n - 1 - at) * sizeof(*r->held));
		key[at] = k;
		r->held[at] = m->buffer_id;
	}
	r->held_count = n;
}

int64_t td__get_encode(struct td_client *c, const char *name, uint32_t mode,
		       uint64_t version, uint32_t timeout_ms)
{
	struct td_wire_get_req req = {
		.mode = mode,
		.version = version,
		.timeout_ms = timeout_ms,
	};

	req.name = (struct td_wire_str){name, (uint16_t)strnlen(name, 256)};
	if (c->path_out == TD_IMPORT_SCM)
		req.flags |= TD_WIRE_REQ_SCM;
	if (c->path_out == TD_IMPORT_SCM && td__has(c, TD_WIRE_FEAT_GET_HELD))
		held_pick(c, &req);
	return td_wire_get_req_encode(&req, c->sbuf + TD_WIRE_HDR_LEN,
				      TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
}

/*
 * A tensor from a decoded GET reply (or a follow's entry: cache_only,
 * every fd left out). Lock held; -ENOENT in cache_only when a buffer is
 * not mapped here (nothing reported in err).
 */
static int tensor_build(struct td_client *c, const struct td_wire_get_rep *rp,
			struct td__msg *m, bool cache_only,
			struct td_tensor **out, struct td_error *err)
{
	const struct td_wire_get_rep rep = *rp;
	struct td_blob_view v;
	struct td_tensor *t = NULL;
	struct td_err e = {0};
	int rc;

	rc = td_blob_decode(rep.blob.ptr, rep.blob.len, &v, &e);
	if (rc == 0)
		rc = td_blob_check(&v, rep.fd_count, &e);
	if (rc < 0 || v.plane_count > TD_WIRE_MAX_PLANES) {
		rc = td__fail(err, -EPROTO, "daemon sent a bad blob: %s",
			      e.reason ? e.reason : "plane count");
		goto out;
	}
	t = calloc(1, sizeof(*t));
	if (!t) {
		rc = td__fail(err, -ENOMEM, "out of memory");
		goto out;
	}
	t->c = c;
	t->fence_fd = -1;
	t->version = rep.version;
	t->lease_id = rep.lease_id;
	t->epoch = c->epoch;
	t->plane_count = v.plane_count;
	rc = tensor_describe(t, &v, rep.meta);
	if (rc < 0) {
		td__fail(err, rc, "out of memory");
		goto out;
	}
	rc = tensor_import(c, t, &rep, &v, m, cache_only, err);
	if (rc < 0)
		goto out;
	td__client_ref(c);
	*out = t;
	t = NULL;
out:
	if (t)
		tensor_free(t, true);
	return rc;
}

int td__get_reply(struct td_client *c, struct td__msg *m, bool nowait,
		  struct td_tensor **out, struct td_error *err)
{
	struct td_wire_get_rep rep;
	struct td_err e = {0};
	int rc;

	rc = td_wire_get_rep_decode(m->body, m->body_len, &rep, &e);
	if (rc < 0) {
		td__msg_close_fds(m);
		return td__fail(err, -EPROTO, "bad GET reply: %s",
				e.reason ? e.reason : "");
	}
	rc = tensor_build(c, &rep, m, false, out, err);
	td__msg_close_fds(m);
	/* a lease granted but not handed out must not outlive this call */
	if (rc < 0)
		send_release(c, rep.lease_id, false, nowait);
	return rc;
}

/*
 * Element i of GET_MANY reply m, decoded into rep, with the fds it
 * attaches from m->fds[*k] on (taken): its tensor into *out, or -errno
 * with err saying which element.
 */
static int many_build(struct td_client *c, struct td__msg *m, unsigned *k,
		      uint32_t i, const struct td_wire_get_rep *rep,
		      struct td_tensor **out, struct td_error *err)
{
	struct td__msg sub = {0};
	char why[TD_REASON_MAX + 1] = "";
	int rc;

	/* SCM: this element's attached fds, those of fd >= 0 */
	for (uint32_t j = 0; c->path_out == TD_IMPORT_SCM &&
			     j < rep->fd_count && *k < m->nfds; j++) {
		if (rep->fds[j].fd < 0)
			continue;
		sub.fds[sub.nfds++] = m->fds[*k];
		m->fds[(*k)++] = -1;
	}
	rc = tensor_build(c, rep, &sub, false, out, err);
	td__msg_close_fds(&sub);
	if (rc < 0 && err) {
		memcpy(why, err->reason, sizeof(why));
		td__fail(err, rc, "GET_MANY element %u: %s", i, why);
	}
	return rc;
}

int td__tensors_many(struct td_client *c, struct td__msg *m, uint32_t n,
		     struct td_tensor **out, struct td_error *err)
{
	struct td_wire_get_many_rep mr = {0};
	struct td_wire_get_rep rep[TD_WIRE_MANY_MAX];
	struct td_err e = {0};
	uint32_t i, have, built = 0;
	unsigned k = 0;
	int rc = 0;

	if (td_wire_get_many_rep_decode(m->body, m->body_len, &mr, &e) < 0)
		rc = td__fail(err, -EPROTO, "bad GET_MANY reply: %s",
			      e.reason ? e.reason : "");
	else if (mr.count != n)
		rc = td__fail(err, -EPROTO, "bad GET_MANY reply: %u elements "
			      "for %u names", mr.count, n);
	/*
	 * Every element is read, also past a bad one and in a reply that
	 * is bad as a whole: what each granted goes back below. A lease
	 * id comes first in an element (§6.4), so one that breaks off
	 * later still names its lease (the decoder leaves 0 otherwise).
	 */
	have = mr.count < TD_WIRE_MANY_MAX ? mr.count : TD_WIRE_MANY_MAX;
	for (i = 0; i < have; i++) {
		e = (struct td_err){0};
		if (td_wire_get_rep_decode(mr.reps[i].ptr, mr.reps[i].len,
					   &rep[i], &e) < 0 &&
		    rc == 0)
			rc = td__fail(err, -EPROTO, "bad GET_MANY reply: "
				      "element %u: %s", i,
				      e.reason ? e.reason : "");
	}
	for (i = 0; i < n && rc == 0; i++) {
		rc = many_build(c, m, &k, i, &rep[i], &out[i], err);
		if (rc == 0)
			built++;
	}
	if (rc == 0 && k != m->nfds)
		rc = td__fail(err, -EPROTO, "GET_MANY: %u fds attached, %u "
			      "described", m->nfds, k);
	if (rc == 0)
		return 0;
	/* none handed out: every lease granted goes, every fd and mapping
	 * with it (the fds left in m: the caller closes them) */
	for (i = 0; i < built; i++) {
		tensor_free(out[i], true);
		out[i] = NULL;
		c->refs--; /* tensor_build's; the caller's handle keeps one */
	}
	for (i = 0; i < have; i++)
		if (rep[i].lease_id)
			send_release(c, rep[i].lease_id, true, false);
	return rc;
}

void td__tensor_follow(struct td_tensor *t, struct td_follow *f,
		       void (*let_go)(struct td_follow *f))
{
	t->follow = f;
	t->let_go = let_go;
}

int td__tensor_from_entry(struct td_client *c, const uint8_t *body,
			  size_t len, uint64_t version, struct td_follow *f,
			  void (*let_go)(struct td_follow *f),
			  struct td_tensor **out, struct td_error *err)
{
	struct td_wire_get_rep rep;
	struct td__msg none = {0};
	struct td_err e = {0};
	int rc = td_wire_get_rep_decode(body, len, &rep, &e);

	if (rc < 0 || rep.version != version || rep.lease_id != 0)
		return td__fail(err, -EPROTO, "bad follow entry: %s",
				e.reason ? e.reason : "version");
	rc = tensor_build(c, &rep, &none, true, out, err);
	if (rc == 0)
		td__tensor_follow(*out, f, let_go);
	return rc;
}

int td__get_common(struct td_client *c, const char *name, uint32_t mode,
		   uint64_t version, uint32_t timeout_ms,
		   struct td_tensor **out, struct td_error *err)
{
	struct td__msg m = {0};
	int64_t len;
	int rc;

	if (!c || !name || !out)
		return td__fail(err, -EINVAL, "missing argument");
	*out = NULL;
	td__client_lock(c);
	/*
	 * A broken connection first: a reconnect forgets the old daemon's
	 * buffer ids, which the held ids encoded below would name to the
	 * new daemon (it numbers its buffers from 1 again: a buffer it
	 * left out as held would not be mapped here).
	 */
	if (c->dead) {
		rc = td__client_usable(c, err);
		if (rc < 0)
			goto out;
	}
	len = td__get_encode(c, name, mode, version, timeout_ms);
	if (len < 0) {
		rc = td__fail(err, -EINVAL, "bad tensor name");
		goto out;
	}
	/* a GET that may park waits for another client's PUBLISH, which
	 * the daemon holds it for: no late reply until that time passed */
	c->park_ms = timeout_ms == TD_WIRE_WAIT_FOREVER ? 0 : timeout_ms;
	rc = td__call_paced(c, TD_OP_GET, (size_t)len, NULL, 0,
			    timeout_ms ? &c->pace_get : NULL, &m, err);
	c->park_ms = 0;
	if (rc == 0)
		rc = td__get_reply(c, &m, false, out, err);
out:
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int td_client_get(struct td_client *c, const char *name,
		  struct td_tensor **out, struct td_error *err)
{
	return td__get_common(c, name, TD_GET_LATEST, 0, 0, out, err);
}

int td_client_get_version(struct td_client *c, const char *name,
			  uint64_t version, struct td_tensor **out,
			  struct td_error *err)
{
	return td__get_common(c, name, TD_GET_EXACT, version, 0, out, err);
}

/* ---- accessors ----
 *
 * A NULL tensor reads as one of nothing (no planes, no dims, version 0,
 * an unknown dtype), its int-returning calls -EINVAL: an application
 * that passes the NULL of a failed get along gets no crash.
 */

uint64_t td_tensor_version(const struct td_tensor *t)
{
	return t ? t->version : 0;
}

uint32_t td_tensor_dtype(const struct td_tensor *t)
{
	return t ? t->dtype : UINT32_MAX;
}

uint32_t td_tensor_ndim(const struct td_tensor *t)
{
	return t ? t->ndim : 0;
}

const uint64_t *td_tensor_shape(const struct td_tensor *t)
{
	return t ? t->shape : NULL;
}

const int64_t *td_tensor_strides(const struct td_tensor *t, uint32_t *count)
{
	if (count)
		*count = t ? t->strides_len : 0;
	return t && t->strides_len ? t->strides : NULL;
}

int32_t td_tensor_quant(const struct td_tensor *t, const float **scales,
			uint32_t *scale_count, const int32_t **zero_points,
			uint32_t *zero_point_count)
{
	static const struct td_tensor none = {.quant_axis = TD_QUANT_NONE};

	if (!t)
		t = &none;
	if (scales)
		*scales = t->scale_count ? t->scales : NULL;
	if (scale_count)
		*scale_count = t->scale_count;
	if (zero_points)
		*zero_points = t->zp_count ? t->zps : NULL;
	if (zero_point_count)
		*zero_point_count = t->zp_count;
	return t->quant_axis;
}

const char *td_tensor_string(const struct td_tensor *t,
			     enum td_tensor_string which)
{
	if (!t || (unsigned)which >= TD_BLOB_STRING_COUNT)
		return "";
	return t->strings[which];
}

const void *td_tensor_meta(const struct td_tensor *t, size_t *len)
{
	if (len)
		*len = t ? t->meta_len : 0;
	return t ? t->meta : NULL;
}

uint32_t td_tensor_plane_count(const struct td_tensor *t)
{
	return t ? t->plane_count : 0;
}

const void *td_tensor_plane_data(const struct td_tensor *t, uint32_t i)
{
	return t && i < t->plane_count ? t->planes[i].data : NULL;
}

uint64_t td_tensor_plane_size(const struct td_tensor *t, uint32_t i)
{
	return t && i < t->plane_count ? t->planes[i].size : 0;
}

uint64_t td_tensor_plane_stride(const struct td_tensor *t, uint32_t i)
{
	return t && i < t->plane_count ? t->planes[i].stride : 0;
}

int td_tensor_plane_fd(const struct td_tensor *t, uint32_t i)
{
	return t && i < t->plane_count ? t->planes[i].fd : -1;
}

uint64_t td_tensor_plane_offset(const struct td_tensor *t, uint32_t i)
{
	return t && i < t->plane_count ? t->planes[i].offset : 0;
}

uint64_t td_tensor_bytes(const struct td_tensor *t)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; t && i < t->plane_count; i++)
		sum += t->planes[i].size;
	return sum;
}

int td_tensor_has_fence(const struct td_tensor *t)
{
	return t && t->fence_fd >= 0;
}

int td_tensor_fence_wait_err(const struct td_tensor *t, int timeout_ms,
			     struct td_error *err)
{
	if (!t)
		return td__fail(err, -EINVAL, "no tensor");
	return t->fence_fd < 0 ? 0
			       : td__fence_wait_leased(t->fence_fd, t->c,
						       t->epoch, timeout_ms,
						       err);
}

int td_tensor_fence_wait(const struct td_tensor *t, int timeout_ms)
{
	return td_tensor_fence_wait_err(t, timeout_ms, NULL);
}

int td_tensor_fence_fd(const struct td_tensor *t)
{
	return t ? t->fence_fd : -1;
}

int td_tensor_plane_kind(const struct td_tensor *t, uint32_t i)
{
	return t && i < t->plane_count ? t->planes[i].kind : 0;
}

uint64_t td_tensor_plane_modifier(const struct td_tensor *t, uint32_t i)
{
	return t && i < t->plane_count ? t->planes[i].modifier : 0;
}

int td_tensor_linear(const struct td_tensor *t, const char **why)
{
	if (!t) {
		if (why)
			*why = "no tensor";
		return -EINVAL;
	}
	for (uint32_t i = 0; i < t->plane_count; i++) {
		if (t->planes[i].modifier == 0)
			continue;
		if (why)
			*why = "a plane carries a DRM format modifier (a "
			       "tiled or compressed layout), which is not "
			       "read as linear bytes";
		return -ENOTSUP;
	}
	return 0;
}
