/* SPDX-License-Identifier: MIT */
/*
 * tensorctl zarr export of the daemon's tensors (cmd-zarr.c writes the
 * hierarchy): each tensor GET and described, its chunk the plane it
 * maps (or a contiguous copy of a strided or planar one).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <json-c/json.h>

#include "td-zarr.h"
#include "tensorctl.h"
#include "tgm-desc.h"
#include "zarr-export.h"

/* The chunk bytes of t: its plane, or a contiguous copy. NULL or why not. */
static const char *tensor_chunk(struct zsrc *s, const struct td_tensor *t)
{
	uint64_t sizes[TD_ZARR_MAX_PLANES];
	struct td_zarr_src src = {.format = td_tensor_string(t, TD_TENSOR_FORMAT),
	                          .nplanes = td_tensor_plane_count(t),
	                          .plane_size = sizes};
	struct td_zarr_walk w;
	const char *why = tctl_cpu_unreadable(t);

	if (why)
		return why;
	src.strides = td_tensor_strides(t, &src.nstrides);
	if (src.format && src.format[0] && src.nplanes)
		src.row_pitch = td_tensor_plane_stride(t, 0);
	for (uint32_t p = 0; p < src.nplanes && p < TD_ZARR_MAX_PLANES; p++)
		sizes[p] = td_tensor_plane_size(t, p);
	why = td_zarr_walk_init(&w, &s->a, &src);
	if (why)
		return why;
	s->len = w.len;
	if (w.layout == TD_ZARR_DENSE) {
		s->data = td_tensor_plane_data(t, 0);
		return NULL;
	}
	s->owned = malloc(w.len);
	if (!s->owned)
		return "out of memory";
	s->data = s->owned;
	/* gathered as the HTTP store sends it */
	for (uint64_t pos = 0, n; pos < w.len; pos += n) {
		uint32_t p;
		uint64_t off;

		n = td_zarr_walk_at(&w, pos, &p, &off);
		memcpy(s->owned + pos,
		       (const uint8_t *)td_tensor_plane_data(t, p) + off, n);
	}
	return NULL;
}

/* The tensor's attributes (td_zarr_tensor_attrs()). */
static struct json_object *tensor_attrs(const struct td_tensor *t,
                                        const char *name)
{
	struct td_zarr_tensor zt = {.name = name};

	zt.meta = td_tensor_meta(t, &zt.meta_len);
	for (int i = 0; i < 5; i++)
		zt.strings[i] = td_tensor_string(t, (enum td_tensor_string)i);
	zt.quant_axis = td_tensor_quant(t, &zt.scales, &zt.nscales,
	                                &zt.zero_points, &zt.nzero_points);
	return td_zarr_tensor_attrs(&zt);
}

/* An export under way: DIR, and once the lease caps were met the new
 * folder the arrays are written to, a batch at a time (open). */
struct zexp {
	const char *dir;
	struct zout o;
	bool open;
	char (*raw)[TD_ZARR_NAME_MAX + 1]; /* node names before suffixes */
};

/* z's node names made final: the raw ones made distinct in order. An
 * array's name depends on the names before it only, so those of a batch
 * written early are the ones the whole export gives them. */
static int settle_names(struct zset *z, const struct zexp *x)
{
	for (size_t k = 0; k < z->n; k++)
		memcpy(z->s[k].a.name, x->raw[k], sizeof(x->raw[k]));
	if (tctl_zset_unique_names(z) < 0)
		return tctl_fail(TCTL_REFUSED, "input", ENAMETOOLONG,
		                 "names do not fit with their suffixes");
	return TCTL_OK;
}

/*
 * A written chunk that is a leased memfd plane's bytes leaves this
 * process's page tables (MADV_DONTNEED), as save's do (cmd-save.c): the
 * mapping outlives the lease's release, and every batch's pages would
 * stay resident, tensorctl as large as the store. Never a copy on the
 * heap (owned), whose bytes it would zero, nor a dma-buf's.
 */
static void drop_pages(const struct zsrc *s, const struct td_tensor *t)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)s->data, b = a + s->len;

	if (s->owned || !s->data ||
	    td_tensor_plane_kind(t, 0) != TD_PLANE_MEMFD)
		return;
	a = (a + pg - 1) & ~(pg - 1);
	b &= ~(pg - 1);
	if (b > a)
		(void)madvise((void *)a, b - a, MADV_DONTNEED);
}

/*
 * Every array of z not written yet written into the new folder (made
 * first), and the leases behind them released: a connection may hold
 * 4096 leases, a uid what its --uid-limit leases says
 * (docs/protocol.md §4), fewer than a store may have tensors. What is
 * held past them is one batch, not a copy of every tensor past the caps
 * (the copies were kept until the end). *released: how many. TCTL_OK or
 * reported (the new folder removed).
 */
static int flush(struct zexp *x, struct zset *z, int *released)
{
	int rc = TCTL_OK;

	*released = 0;
	for (size_t k = 0; k < z->n; k++)
		*released += z->s[k].held && *z->s[k].held;
	if (!*released)
		return TCTL_OK;
	if (!x->open && (rc = tctl_zarr_open(&x->o, x->dir)) != 0)
		return rc;
	x->open = true;
	rc = settle_names(z, x);
	if (!rc)
		rc = tctl_zarr_put(&x->o, z);
	if (rc) {
		x->open = false;
		return tctl_zarr_close(&x->o, z, rc);
	}
	for (size_t k = 0; k < z->n; k++) {
		struct zsrc *s = &z->s[k];

		if (s->held && *s->held)
			drop_pages(s, *s->held);
		if (s->held && *s->held)
			td_tensor_release(*s->held);
		if (s->held)
			*s->held = NULL;
		s->held = NULL;
		s->data = NULL; /* written */
		free(s->owned);
		s->owned = NULL;
	}
	return TCTL_OK;
}

/* GET each name into ts (listed NULL or listed[i]: it came from a LIST,
 * and one deleted since is left out) and describe it in z. A lease
 * refused (ENOBUFS, EDQUOT) is asked again once z's are written
 * (flush()). */
static int from_daemon(struct td_client *c, char **names, size_t n,
                       const bool *listed, struct td_tensor **ts,
                       struct zset *z, struct zexp *x)
{
	for (size_t i = 0; i < n; i++) {
		struct zsrc *s = &z->s[z->n];
		struct td_error e = {0};
		const char *why;
		int r = td_client_get(c, names[i], &ts[i], &e), u = 0;

		if (r == -ENOBUFS || r == -EDQUOT) {
			int f = flush(x, z, &u);

			if (f)
				return f;
		}
		if (u) {
			e = (struct td_error){0};
			r = td_client_get(c, names[i], &ts[i], &e);
		}
		if (r < 0 && tctl_gone_since_list("zarr export", names[i], r,
		                                  !listed || listed[i]))
			continue;
		if (r < 0)
			return tctl_refused(names[i], r, &e);
		r = tctl_fence_wait(names[i], ts[i], -1);
		if (r)
			return r;
		s->a.type = td_zarr_type_by_blob(td_tensor_dtype(ts[i]));
		s->a.ndim = td_tensor_ndim(ts[i]);
		if (!s->a.type || s->a.ndim > TD_ZARR_MAX_DIMS)
			return tctl_fail(TCTL_REFUSED, "input", ENOTSUP,
			                 "%s: cannot be exported: %s", names[i],
			                 !s->a.type ? "its dtype has no Zarr type"
			                            : "too many dimensions");
		memcpy(s->a.shape, td_tensor_shape(ts[i]),
		       s->a.ndim * sizeof(uint64_t));
		td_tgm_node_name(names[i], x->raw[z->n], sizeof(x->raw[z->n]));
		z->n++;
		why = tensor_chunk(s, ts[i]);
		s->held = &ts[i];
		if (why)
			return tctl_fail(TCTL_REFUSED, "input", ENOTSUP,
			                 "%s: cannot be exported: %s", names[i],
			                 why);
		s->a.attrs = tensor_attrs(ts[i], names[i]);
	}
	if (settle_names(z, x))
		return TCTL_REFUSED;
	return tctl_zset_group(z);
}

int tctl_zarr_export_daemon(const char *dir, char **names, size_t n)
{
	struct td_client *c = NULL;
	struct td_entry *list = NULL;
	size_t count = 0;
	struct td_tensor **ts = NULL;
	struct zset z = {0};
	struct tctl_names given = {0};
	struct zexp x = {.dir = dir};
	char **all = NULL;
	int rc = tctl_connect(&c);

	/* NAME/ stands for every tensor under it */
	if (!rc && n && !(rc = tctl_names_expand(c, "zarr export", names, n,
	                                         true, &given)))
		names = given.v, n = given.n;
	if (rc)
		goto out;
	if (!n) {
		struct td_error e = {0};
		int r = td_client_list(c, "", &list, &count, &e);

		if (r < 0) {
			rc = tctl_refused("list", r, &e);
			goto out;
		}
		all = calloc(count ? count : 1, sizeof(*all));
		if (!all) {
			rc = tctl_fail(TCTL_REFUSED, "io", ENOMEM,
			               "out of memory");
			goto out;
		}
		for (size_t i = 0; i < count; i++)
			all[i] = list[i].name;
		names = all;
		n = count;
	}
	ts = calloc(n ? n : 1, sizeof(*ts));
	x.raw = calloc(n ? n : 1, sizeof(*x.raw));
	if (!ts || !x.raw || tctl_zset_grow(&z, n) < 0) {
		rc = tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
		goto out;
	}
	rc = from_daemon(c, names, n, all ? NULL : given.listed, ts, &z, &x);
	/* past the caps: the batches written, the rest and the root now
	 * (or the new folder removed) */
	if (x.open)
		rc = tctl_zarr_close(&x.o, &z, rc);
	else if (!rc)
		rc = tctl_zarr_write(dir, &z);
	if (!rc)
		rc = tctl_zarr_print(dir, &z);
out:
	tctl_zset_fini(&z);
	for (size_t i = 0; ts && i < n; i++)
		td_tensor_release(ts[i]);
	free(ts);
	free(x.raw);
	free(all);
	tctl_names_fini(&given);
	td_entry_list_free(list, count);
	td_client_close(c);
	return rc;
}