/* SPDX-License-Identifier: MIT */
/*
 * What the HTTP store exports and its chunk bodies (http.h, docs/zarr.md).
 *
 * The exported set is what `tensorctl zarr export` of the same names
 * writes: the current tensors and the live rings under --http-prefix (and
 * granted by `allow http r` lines), in name order, each laid out by
 * td_zarr_walk_init() -- the rule export uses -- and left out when export
 * would refuse it.
 *
 * A chunk is leased (a version's reference, or a ring slot's lease, as a
 * GET takes) until its response is done, so a version replaced meanwhile
 * is still sent whole. A dense chunk in a tmpfs memfd is a response on a
 * duplicate of the fd that the kernel sends (sendfile), unless it is
 * recyclable (its pages are written again once it is free, and a socket
 * queue may still hold them); any other chunk is repacked: a callback response pread()s the plane bytes, in C order, into
 * the response's buffer, one block per call. pread() of a file cannot
 * fault: a plane that is short (or unreadable) ends the response with an
 * error instead, and the connection is closed. A dma-buf has no pread():
 * it is mapped read-only for the response, which starts only once poll()
 * says its writers are done (else 503, as for a pending fence, so the
 * DMA_BUF_IOCTL_SYNC bracket around the reads does not wait on the loop);
 * a dma-buf cannot shrink, so its mapping cannot fault either.
 */
#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "blob.h"
#include "os.h"

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif
#ifndef DMA_BUF_MAGIC
#define DMA_BUF_MAGIC 0x444d4142
#endif

/* Bytes a repacked response produces per callback. */
#define BLOCK (64u << 10)
/* Runs of plane bytes shorter than this are read through a window. */
#define WINDOW 4096u

/* ---- what is exported ---- */

static bool exported(const char *name, size_t len)
{
	const struct td__daemon *d = td__d;
	const char *pre = d->opts.http_prefix;
	size_t pl = pre ? strlen(pre) : 0;

	if (!pre || len < pl || memcmp(name, pre, pl))
		return false;
	return !d->policy || td__policy_allows_http(d->policy, name, len);
}

/* NUL-terminated copy of a string of at most TD_WIRE_MAX_NAME bytes. */
static void cstr(char *out, const char *p, size_t len)
{
	if (len > TD_WIRE_MAX_NAME)
		len = TD_WIRE_MAX_NAME;
	memcpy(out, p, len);
	out[len] = 0;
}

/* The attributes of a tensor (bv) or of a ring (bv NULL: a ring's GET
 * carries no metadata, strings or quantization). */
static struct json_object *attrs_of(const struct td__http_node *n,
                                    const struct td__version *v,
                                    const struct td_blob_view *bv)
{
	char name[TD_WIRE_MAX_NAME + 1], strs[5][TD_WIRE_MAX_NAME + 1];
	float scales[64];
	int32_t zps[64];
	struct td_zarr_tensor t = {.name = name, .quant_axis = -2};

	cstr(name, n->raw, n->raw_len);
	if (!bv)
		return td_zarr_tensor_attrs(&t);
	t.meta = v->meta;
	t.meta_len = v->meta_len;
	for (int i = 0; i < 5; i++) {
		cstr(strs[i], bv->strings[i].ptr, bv->strings[i].len);
		t.strings[i] = strs[i];
	}
	if (bv->quant_scales_len) {
		t.quant_axis = bv->quant_axis;
		t.nscales =
		        bv->quant_scales_len < 64 ? bv->quant_scales_len : 64;
		t.nzero_points = bv->quant_zero_points_len < 64
		                         ? bv->quant_zero_points_len
		                         : 64;
		for (uint32_t i = 0; i < t.nscales; i++)
			scales[i] = td_blob_quant_scale(bv, i);
		for (uint32_t i = 0; i < t.nzero_points; i++)
			zps[i] = td_blob_quant_zero_point(bv, i);
		t.scales = scales;
		t.zero_points = zps;
	}
	return td_zarr_tensor_attrs(&t);
}

/*
 * Plane p of v into n: its memfd or dma-buf and offset, its size into
 * *size. false for what is not served: an inline plane (the store holds
 * none), a plane past the end of its file, a plane with a DRM format
 * modifier.
 */
static bool plane_of(struct td__version *v, const struct td_blob_view *bv,
                     uint32_t p, struct td__http_node *n, uint64_t *size)
{
	struct td_blob_plane pl;
	struct statfs sfs;
	struct stat st;
	int fd;

	/* a non-zero modifier is a tiled or compressed layout: never read
	 * as linear (blob spec §6.1) */
	if (td_blob_plane_get(bv, p, &pl) < 0 || pl.handle < 0 ||
	    (uint64_t)pl.handle >= v->nfds || pl.modifier != 0)
		return false;
	fd = td__vfd_out(&v->fds[pl.handle]);
	if (fstatfs(fd, &sfs) < 0)
		return false;
	if ((unsigned long)sfs.f_type == DMA_BUF_MAGIC) {
		/* its size is what SEEK_END says (fstat gives none); the
		 * publish checked the plane against it already */
		off_t end = lseek(fd, 0, SEEK_END);

		if (end < 0 || pl.offset > (uint64_t)end ||
		    pl.size > (uint64_t)end - pl.offset)
			return false;
		n->repack = true;
		n->dmabuf |= 1u << p;
		goto found;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    pl.offset > (uint64_t)st.st_size ||
	    pl.size > (uint64_t)st.st_size - pl.offset)
		return false;
	/* the kernel sends tmpfs files; hugetlbfs ones are read */
	if ((unsigned long)sfs.f_type == HUGETLBFS_MAGIC)
		n->repack = true;
	else if ((unsigned long)sfs.f_type != TMPFS_MAGIC)
		return false;
found:
	n->fd[p] = fd;
	n->off[p] = pl.offset;
	*size = pl.size;
	return true;
}

/* v as a node, laid out as export lays it out; false when not served. */
static bool version_node(struct td__version *v, struct td__http_node *n,
                         bool attrs)
{
	struct td_blob_view bv;
	struct td_blob_plane pl;
	struct td_err e = {0};
	uint64_t sizes[TD_ZARR_MAX_PLANES];
	int64_t strides[TD_ZARR_MAX_DIMS];
	char fmt[TD_WIRE_MAX_NAME + 1];
	struct td_zarr_src src = {
	        .format = fmt, .plane_size = sizes, .strides = strides};

	if (td_blob_decode(v->blob, v->blob_len, &bv, &e) < 0 ||
	    bv.plane_count > TD_ZARR_MAX_PLANES ||
	    bv.strides_len > TD_ZARR_MAX_DIMS)
		return false;
	n->a.type = td_zarr_type_by_blob(bv.dtype);
	n->a.ndim = bv.ndim;
	if (!n->a.type || bv.ndim > TD_ZARR_MAX_DIMS)
		return false;
	for (uint32_t k = 0; k < bv.ndim; k++)
		n->a.shape[k] = td_blob_shape(&bv, k);
	for (uint32_t k = 0; k < bv.strides_len; k++)
		strides[k] = td_blob_stride(&bv, k);
	src.nstrides = bv.strides_len;
	src.nplanes = bv.plane_count;
	for (uint32_t p = 0; p < bv.plane_count; p++)
		if (!plane_of(v, &bv, p, n, &sizes[p]))
			return false;
	/*
	 * A recyclable version's buffer is written again once it is free,
	 * while a sendfile()d response's pages may still wait in the
	 * client's socket queue after its lease ended: copied instead
	 * (docs/fastpath.md, "Across names").
	 */
	if (v->recycle)
		n->repack = true;
	cstr(fmt, bv.strings[TD_BLOB_FORMAT].ptr,
	     bv.strings[TD_BLOB_FORMAT].len);
	if (fmt[0] && td_blob_plane_get(&bv, 0, &pl) == 0)
		src.row_pitch = pl.stride;
	if (td_zarr_walk_init(&n->w, &n->a, &src))
		return false;
	/* export waits for the fence; the loop cannot, so a chunk is
	 * refused (503) until it has signalled */
	n->fence = bv.fence_fd >= 0 && (uint32_t)bv.fence_fd < v->nfds
	                   ? v->fds[bv.fence_fd].fd
	                   : -1;
	n->v = v;
	n->raw = v->name;
	n->raw_len = v->name_len;
	if (!attrs)
		return true;
	n->a.attrs = attrs_of(n, v, &bv);
	return n->a.attrs != NULL;
}

/* A ring as a node: its latest version, as a GET of its name gives it. */
static bool ring_node(struct td__ring *r, struct td__http_node *n, bool attrs)
{
	struct td_wire_entry e;
	uint64_t sizes[TD_WIRE_RING_MAX_PLANES];
	struct td_zarr_src src = {.format = "", .plane_size = sizes};

	td__ring_entry(r, false, &e);
	n->a.type = td_zarr_type_by_blob(e.dtype);
	n->a.ndim = e.ndim;
	/* no version yet: a GET (so an export) of it is refused */
	if (!e.version || !n->a.type || e.ndim > TD_ZARR_MAX_DIMS)
		return false;
	memcpy(n->a.shape, e.shape, e.ndim * sizeof(*e.shape));
	src.nplanes = td__ring_planes(r, sizes);
	if (td_zarr_walk_init(&n->w, &n->a, &src))
		return false;
	n->ring = r;
	n->fence = -1; /* td__ring_lease_latest() checks the slot's */
	n->raw = e.name.ptr;
	n->raw_len = e.name.len;
	n->repack = true; /* its slot's bytes are read, never sent by fd */
	if (!attrs)
		return true;
	n->a.attrs = attrs_of(n, NULL, NULL);
	return n->a.attrs != NULL;
}

bool td__http_ring_served(struct td__ring *r)
{
	struct td__http_node nd = {0};
	struct td_wire_entry re;
	bool ok;

	td__ring_entry(r, false, &re);
	ok = exported(re.name.ptr, re.name.len) && ring_node(r, &nd, false);
	td_zarr_array_fini(&nd.a);
	return ok;
}

/*
 * The store's names under --http-prefix, [*lo, *hi): a range of the
 * sorted names (every name when the prefix is ""), found by two binary
 * searches, so a walk costs the names exported, not the names held.
 */
static void prefix_range(const struct td__store *s, const char *pre,
                         size_t pl, size_t *lo, size_t *hi)
{
	bool found;
	size_t a = td__name_find(s, pre, pl, &found), b = s->count;

	*lo = a;
	/* from a on, the names under pre come first */
	while (a < b) {
		size_t mid = a + (b - a) / 2;
		const struct td__version *v = s->names[mid];

		if (v->name_len >= pl && !memcmp(v->name, pre, pl))
			a = mid + 1;
		else
			b = mid;
	}
	*hi = a;
}

/*
 * Whether v is served, looked at once: a version does not change once
 * published, and a walk over every version of the store for each request
 * must not cost each of them a decode and two system calls per plane.
 */
static bool version_served(struct td__version *v)
{
	struct td__http_node n = {0};

	if (!v->http_ok) {
		v->http_ok = version_node(v, &n, false) ? 1 : -1;
		td_zarr_array_fini(&n.a);
	}
	return v->http_ok > 0;
}

int td__http_refs(struct td__http_ref **out, size_t *count, size_t *looks)
{
	static struct td__ring *rl[TD__MAX_RINGS];
	struct td__store *s = td__d->store;
	const char *pre = td__d->opts.http_prefix;
	size_t pl = pre ? strlen(pre) : 0, i = 0, end = 0, n = 0;
	struct td_wire_str none = {"", 0}, pw = {pre ? pre : "", (uint16_t)pl};
	/* without --http-prefix nothing is exported */
	unsigned nr = pre ? td__ring_list(pw, none, rl) : 0, j = 0;
	struct td__http_ref *rs;
	char **names;
	int rc;

	if (pre)
		prefix_range(s, pre, pl, &i, &end);
	rs = malloc((end - i + nr + 1) * sizeof(*rs));
	names = malloc((end - i + nr + 1) * sizeof(*names));
	if (!rs || !names) {
		free(rs);
		free(names);
		return -ENOMEM;
	}
	/* tensors and rings merged in name order, as LIST gives them */
	while (i < end || j < nr) {
		struct td__version *v = i < end ? s->names[i] : NULL;
		struct td_wire_entry re;
		struct td__http_ref *r = &rs[n];
		char name[TD_WIRE_MAX_NAME + 1];
		bool ok;

		if (j < nr)
			td__ring_entry(rl[j], false, &re);
		if (v &&
		    (j == nr || td__name_cmp(v->name, v->name_len, re.name.ptr,
		                             re.name.len) < 0)) {
			i++;
			td__d->stats.visits++;
			*r = (struct td__http_ref){.v = v};
			ok = exported(v->name, v->name_len);
			if (ok && !v->http_ok && looks && !(*looks)--) {
				free(rs);
				free(names);
				return -EAGAIN;
			}
			ok = ok && version_served(v);
			cstr(name, v->name, v->name_len);
		} else {
			j++;
			*r = (struct td__http_ref){.ring = rl[j - 1]};
			ok = td__http_ring_served(r->ring);
			cstr(name, re.name.ptr, re.name.len);
		}
		if (!ok)
			continue;
		td_tgm_node_name(name, r->name, TD_ZARR_NAME_MAX + 1);
		names[n++] = r->name;
	}
	rc = td_tgm_names_unique_seeded(names, n, sizeof(rs->name),
					s->name_seed);
	free(names);
	if (rc < 0) {
		free(rs);
		return rc;
	}
	*out = rs;
	*count = n;
	return 0;
}

bool td__http_node_of(const struct td__http_ref *r, struct td__http_node *n,
                      bool attrs)
{
	bool ok;

	memset(n, 0, sizeof(*n));
	ok = r->v ? version_node(r->v, n, attrs) : ring_node(r->ring, n, attrs);
	if (ok)
		memcpy(n->a.name, r->name, sizeof(r->name));
	else
		td_zarr_array_fini(&n->a);
	return ok;
}

/* ---- leases ---- */

/* A chunk response's lease: a tensor's version or a ring's slot. */
struct hold {
	struct td__version *v;
	struct td__ring *ring;
	uint32_t slot;
};

void td__http_hold_drop(void *hold)
{
	struct hold *h = hold;

	if (h->v) {
		h->v->lease_count--;
		td__version_unref(td__d->store, h->v);
	} else {
		td__ring_unlease(h->ring, h->slot, (uid_t)-1);
	}
	td__http_stats.leases--;
	free(h);
}

/* ---- repacked bodies ---- */

struct body {
	struct hold *h;
	struct td_zarr_walk w;
	int fd[TD_ZARR_MAX_PLANES]; /* borrowed: they live while h does */
	uint64_t off[TD_ZARR_MAX_PLANES];
	/* dma-buf planes: mapped read-only, inside a SYNC_START/END (bit p
	 * of synced); a far layout's sealed memfds: mapped read-only */
	uint8_t *map[TD_ZARR_MAX_PLANES];
	size_t map_len[TD_ZARR_MAX_PLANES];
	uint32_t synced;
	uint64_t start; /* of the body in the chunk (a range) */
	/* the last window read: plane wp's bytes [woff, woff + wlen) */
	uint32_t wp;
	uint64_t woff, wlen;
	bool far; /* consecutive runs lie a window or more apart */
	uint8_t win[WINDOW];
};

static ssize_t pread_full(int fd, uint8_t *dst, uint64_t n, uint64_t at)
{
	ssize_t r;

	do
		r = pread(fd, dst, n, (off_t)at);
	while (r < 0 && errno == EINTR);
	return r;
}

/* n bytes of plane p at off into dst; false when the plane is short. */
static bool plane_read(struct body *b, uint32_t p, uint64_t off, uint8_t *dst,
                       uint64_t n)
{
	uint64_t want;
	ssize_t r;

	if (b->map[p]) {
		memcpy(dst, b->map[p] + b->off[p] + off, n);
		return true;
	}
	/* long runs, and short ones too far apart for a window to hold
	 * the next (a transposed view): read where they are */
	if (n >= WINDOW || b->far)
		return pread_full(b->fd[p], dst, n, b->off[p] + off) ==
		       (ssize_t)n;
	if (!b->wlen || p != b->wp || off < b->woff ||
	    off + n > b->woff + b->wlen) {
		want = b->w.plane_size[p] - off;
		if (want > WINDOW)
			want = WINDOW;
		r = pread_full(b->fd[p], b->win, want, b->off[p] + off);
		if (r < (ssize_t)n)
			return false;
		b->wp = p;
		b->woff = off;
		b->wlen = (uint64_t)r;
	}
	memcpy(dst, b->win + (off - b->woff), n);
	return true;
}

/*
 * max bytes of a strided chunk from pos, its plane mapped: the index of
 * pos worked out once, then stepped run by run (td_zarr_walk_at() per
 * run costs a division per dimension, most of the time a transposed
 * view's one-byte runs took).
 */
static size_t mapped_strided(const struct body *b, uint64_t pos, uint8_t *dst,
                             size_t max)
{
	const struct td_zarr_walk *w = &b->w;
	const uint8_t *base = b->map[0] + b->off[0];
	uint64_t idx[TD_ZARR_MAX_DIMS], r = pos / w->run, within = pos % w->run;
	uint64_t at = 0;
	size_t done = 0;

	for (uint32_t k = w->outer; k-- > 0;) {
		idx[k] = r % w->shape[k];
		at += idx[k] * (uint64_t)w->st[k];
		r /= w->shape[k];
	}
	while (done < max) {
		uint64_t n = w->run - within;

		if (n > max - done)
			n = max - done;
		if (n == 1)
			dst[done] = base[at + within];
		else
			memcpy(dst + done, base + at + within, n);
		done += n;
		within += n;
		if (within < w->run)
			break;
		within = 0;
		for (uint32_t k = w->outer; k-- > 0;) {
			at += (uint64_t)w->st[k];
			if (++idx[k] < w->shape[k])
				break;
			at -= w->shape[k] * (uint64_t)w->st[k];
			idx[k] = 0;
		}
	}
	return done;
}

/* MHD's content reader: up to max bytes of the body from pos. */
static ssize_t body_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct body *b = cls;
	size_t done = 0;

	pos += b->start;
	if (b->w.layout == TD_ZARR_STRIDED && b->map[0])
		return (ssize_t)mapped_strided(b, pos, (uint8_t *)buf, max);
	while (done < max) {
		uint32_t p;
		uint64_t off, n = td_zarr_walk_at(&b->w, pos, &p, &off);

		if (n > max - done)
			n = max - done;
		if (!plane_read(b, p, off, (uint8_t *)buf + done, n)) {
			td__log(TD_LOG_WARN,
			        "http: plane %u ended early or could not be "
			        "read; response cut",
			        p);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		done += n;
		pos += n;
	}
	return (ssize_t)done;
}

/* Unmap b's dma-buf planes, ending each one's read bracket. */
static void body_unmap(struct body *b)
{
	for (uint32_t p = 0; p < TD_ZARR_MAX_PLANES; p++) {
		if (!b->map[p])
			continue;
		if (b->synced & (1u << p))
			(void)td__dmabuf_sync(b->fd[p], false);
		munmap(b->map[p], b->map_len[p]);
		b->map[p] = NULL;
	}
}

/* Map n's dma-buf planes into b, each inside a read bracket; false when
 * one cannot be. */
static bool body_map(struct body *b, const struct td__http_node *n)
{
	long page = sysconf(_SC_PAGESIZE);

	for (uint32_t p = 0; p < n->w.nplanes; p++) {
		uint64_t end = n->off[p] + n->w.plane_size[p];
		void *m;

		if (!(n->dmabuf & (1u << p)) || !n->w.plane_size[p])
			continue;
		b->map_len[p] = (size_t)((end + (uint64_t)page - 1) &
		                         ~((uint64_t)page - 1));
		m = mmap(NULL, b->map_len[p], PROT_READ, MAP_SHARED, n->fd[p],
		         0);
		if (m == MAP_FAILED) {
			td__log(TD_LOG_WARN, "http: mmap of a dma-buf plane: %s",
			        strerror(errno));
			return false;
		}
		b->map[p] = m;
		if (td__dmabuf_sync(n->fd[p], true) < 0) {
			munmap(m, b->map_len[p]);
			b->map[p] = NULL;
			return false;
		}
		b->synced |= 1u << p;
	}
	return true;
}

/*
 * Short runs cost a pread() each, or one per window: a transposed view
 * (runs of one element, each far from the last) was about 4 MB/s. A
 * tmpfs memfd sealed against shrinking cannot lose the pages a mapping
 * of it covers (no SIGBUS, the reason pread() is used at all), so such
 * planes are read through a read-only mapping for the response, a
 * memcpy() per run. Any other plane (no seal, not tmpfs, shorter than
 * the node says, a failed mmap) stays on pread().
 */
static void body_map_sealed(struct body *b, const struct td__http_node *n)
{
	long page = sysconf(_SC_PAGESIZE);

	for (uint32_t p = 0; p < n->w.nplanes; p++) {
		uint64_t end = n->off[p] + n->w.plane_size[p];
		struct statfs sfs;
		struct stat st;
		void *m;
		int seals;

		if (b->map[p] || !n->w.plane_size[p])
			continue;
		seals = fcntl(n->fd[p], F_GET_SEALS);
		if (seals < 0 || !(seals & F_SEAL_SHRINK) ||
		    fstatfs(n->fd[p], &sfs) < 0 ||
		    (unsigned long)sfs.f_type != TMPFS_MAGIC ||
		    fstat(n->fd[p], &st) < 0 || (uint64_t)st.st_size < end)
			continue;
		b->map_len[p] = (size_t)((end + (uint64_t)page - 1) &
		                         ~((uint64_t)page - 1));
		m = mmap(NULL, b->map_len[p], PROT_READ, MAP_SHARED, n->fd[p],
		         0);
		if (m != MAP_FAILED)
			b->map[p] = m;
	}
}

static void body_free(void *cls)
{
	struct body *b = cls;

	body_unmap(b);
	td__http_hold_drop(b->h);
	free(b);
}

/* Bytes a callback of n's repacked body produces: short runs cost a
 * syscall each, so smaller blocks keep each callback (and the loop's
 * pause for it) short. */
static size_t block_of(const struct td__http_node *n)
{
	return n->w.layout == TD_ZARR_STRIDED && n->w.run < 64 ? 8192 : BLOCK;
}

/* The reader of n's planes (its dma-bufs mapped), the body's bytes from
 * start; NULL when it cannot be had. It does not own h until
 * body_free() is its response's. */
static struct body *body_new(const struct td__http_node *n, struct hold *h,
                             uint64_t start)
{
	struct body *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->h = h;
	b->w = n->w;
	memcpy(b->fd, n->fd, sizeof(b->fd));
	memcpy(b->off, n->off, sizeof(b->off));
	b->start = start;
	b->wlen = 0;
	b->far = n->w.layout == TD_ZARR_STRIDED && n->w.outer &&
	         (uint64_t)n->w.st[n->w.outer - 1] >= WINDOW;
	if (n->dmabuf && !body_map(b, n)) {
		body_unmap(b);
		free(b);
		return NULL;
	}
	body_map_sealed(b, n);
	return b;
}

/* A repacked response of len bytes from start; takes h (NULL: not). */
static struct MHD_Response *repacked(const struct td__http_node *n,
                                     struct hold *h, uint64_t start,
                                     uint64_t len)
{
	struct body *b = body_new(n, h, start);
	struct MHD_Response *r;

	if (!b)
		return NULL;
	r = MHD_create_response_from_callback(len, block_of(n), body_read, b,
	                                      body_free);
	if (!r) {
		body_unmap(b);
		free(b);
	}
	return r;
}

/*
 * The multipart/byteranges response of rs's several ranges of n's chunk;
 * takes h (NULL: not). Every chunk's parts are read as a repacked body's
 * are (pread() into the response's buffer, BLOCK bytes per callback),
 * also a dense one's: libmicrohttpd sends one file per response, and the
 * parts' headers lie between its ranges.
 */
static struct MHD_Response *parts_of(const struct td__http_node *n,
                                     struct hold *h,
                                     const struct td__http_ranges *rs)
{
	struct body *b = body_new(n, h, 0);
	struct MHD_Response *r;

	if (!b)
		return NULL;
	r = td__http_multipart(rs, n->w.len, "application/octet-stream",
	                       body_read, b, body_free, block_of(n));
	if (!r) {
		body_unmap(b);
		free(b);
	}
	return r;
}

/* ---- chunks ---- */

/* Lease n's chunk into a new hold (n's ring fds and offsets filled in);
 * NULL with *why when it cannot be had now. */
static struct hold *lease(struct td__http_node *n, uint64_t *version,
                          uint64_t *ring_id, unsigned *code, const char **why)
{
	struct hold *h = calloc(1, sizeof(*h));
	struct td__ring_slot rs;
	int rc;

	*code = MHD_HTTP_SERVICE_UNAVAILABLE;
	*why = "out of memory\n";
	if (h && n->fence >= 0 &&
	    poll(&(struct pollfd){.fd = n->fence, .events = POLLIN}, 1, 0) !=
	            1) {
		free(h);
		*why = "its fence has not signalled yet; retry\n";
		return NULL;
	}
	if (!h)
		return NULL;
	/* a dma-buf's writers (its implicit fences) must be done first, so
	 * that the read bracket does not wait on the loop */
	for (uint32_t p = 0; p < n->w.nplanes; p++)
		if ((n->dmabuf & (1u << p)) &&
		    poll(&(struct pollfd){.fd = n->fd[p], .events = POLLIN}, 1,
		         0) != 1) {
			free(h);
			*why = "its dma-buf is still being written; retry\n";
			return NULL;
		}
	if (n->ring) {
		rc = td__ring_lease_latest(n->ring, &rs);
		if (rc < 0) {
			free(h);
			if (rc == -EAGAIN)
				*why = "the ring's latest version is being "
				       "rewritten; retry\n";
			else if (rc == -EINPROGRESS)
				*why = "the ring's latest version is published "
				       "but its fence has not signalled yet; "
				       "retry\n";
			else
				*code = MHD_HTTP_NOT_FOUND,
				*why = "no such key\n";
			return NULL;
		}
		h->ring = n->ring;
		h->slot = rs.slot;
		*version = rs.version;
		*ring_id = rs.ring_id;
		for (uint32_t p = 0; p < n->w.nplanes; p++) {
			n->fd[p] = rs.fd;
			n->off[p] = rs.off[p];
		}
	} else {
		/* a reference like a GET's: neither eviction nor a newer
		 * version frees the bytes while they are being sent */
		h->v = n->v;
		n->v->refs++;
		n->v->lease_count++;
		*version = n->v->number;
	}
	td__http_stats.leases++;
	return h;
}

/*
 * A strong ETag must change whenever the bytes may: versions count again
 * from 1 in a ring made anew under the same name, and in a daemon started
 * again without a snapshot, so the tag also names this daemon's run (a
 * random token) and, for a ring, the ring (ids are never reused).
 */
static void etag_of(char *out, size_t cap, const struct td__http_node *n,
                    uint64_t version, uint64_t ring_id)
{
	static uint32_t run;

	while (!run) {
		if (getrandom(&run, sizeof(run), GRND_NONBLOCK) !=
		    (ssize_t)sizeof(run))
			run = (uint32_t)time(NULL) ^ ((uint32_t)getpid() << 16);
	}
	if (n->ring)
		snprintf(out, cap, "\"%.*s@%" PRIu64 ".%08" PRIx32 ".r%" PRIu64
		         "\"",
		         (int)n->raw_len, n->raw, version, run, ring_id);
	else
		snprintf(out, cap, "\"%.*s@%" PRIu64 ".%08" PRIx32 "\"",
		         (int)n->raw_len, n->raw, version, run);
}

enum MHD_Result td__http_chunk(struct MHD_Connection *c,
                               struct td__http_node *n, void **con_cls)
{
	struct MHD_Response *r = NULL;
	struct td__http_ranges rs;
	enum MHD_Result res;
	uint64_t version = 0, ring_id = 0;
	char etag[TD_WIRE_MAX_NAME + 80];
	const char *why;
	unsigned code;
	struct hold *h = lease(n, &version, &ring_id, &code, &why);
	int rg, fd = -1;

	if (!h)
		return td__http_text(c, code, why);
	etag_of(etag, sizeof(etag), n, version, ring_id);
	rg = td__http_conditions(c, n->w.len, etag, &rs, &res);
	if (rg < 0) {
		td__http_hold_drop(h);
		return res;
	}
	/* the response owns h from here (repacked, parts), and drops it
	 * when freed */
	if (rs.count > 1)
		r = parts_of(n, h, &rs);
	else if (n->repack || n->w.layout != TD_ZARR_DENSE)
		r = repacked(n, h, rs.a[0], rs.n[0]);
	else if ((fd = fcntl(n->fd[0], F_DUPFD_CLOEXEC, 3)) < 0) {
		td__http_hold_drop(h);
		return td__http_text(c, MHD_HTTP_SERVICE_UNAVAILABLE,
		                     "out of descriptors\n");
	} else {
		/* MHD owns (and closes) fd; sendfile() reads it at an
		 * offset. h stays with the request (on_completed). */
		r = MHD_create_response_from_fd_at_offset64(rs.n[0], fd,
		                                            n->off[0] + rs.a[0]);
		if (!r) {
			close(fd);
			td__http_hold_drop(h);
			return MHD_NO;
		}
		*con_cls = h;
	}
	if (!r) {
		td__http_hold_drop(h);
		return td__http_text(c, MHD_HTTP_SERVICE_UNAVAILABLE,
		                     "the chunk's planes cannot be read now; "
		                     "retry\n");
	}
	return td__http_queue(c,
	                      td__http_finish(r, rg, &rs, n->w.len,
	                                      "application/octet-stream", etag),
	                      r);
}
