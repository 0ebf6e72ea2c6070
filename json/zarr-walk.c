/* SPDX-License-Identifier: MIT */
/*
 * The layout of a tensor's one Zarr chunk in its planes (td-zarr.h,
 * td_zarr_walk_init): the rule export and the HTTP store share, and the
 * walk from a chunk byte to the plane byte that holds it.
 */
#include "td-zarr.h"

#include <string.h>
#include <strings.h>

static bool semi_planar(const char *fmt)
{
	static const char *const sp[] = {"NV12", "NV21", "NV16", "NV61",
	                                 "NV24", "NV42", "P010", "P016"};

	for (size_t i = 0; fmt && i < sizeof(sp) / sizeof(*sp); i++)
		if (!strcasecmp(fmt, sp[i]))
			return true;
	return false;
}

/* Strided: every element inside plane 0, and the runs found. */
static const char *strided(struct td_zarr_walk *w,
                           const struct td_zarr_array *a,
                           const struct td_zarr_src *s)
{
	uint64_t hi = 0, d = a->type->size;
	uint32_t k;

	for (k = 0; k < a->ndim; k++) {
		uint64_t reach;

		if (s->strides[k] < 0)
			return "it has negative strides";
		if (__builtin_mul_overflow(a->shape[k] - 1,
		                           (uint64_t)s->strides[k], &reach) ||
		    __builtin_add_overflow(hi, reach, &hi))
			return "its strides reach past its plane";
		w->shape[k] = a->shape[k];
		w->st[k] = s->strides[k];
	}
	if (hi >= s->plane_size[0] || s->plane_size[0] - hi < d)
		return "its strides reach past its plane";
	/* the innermost dimensions that are dense form one run */
	for (k = a->ndim; k > 0; k--) {
		if (a->shape[k - 1] > 1 && (uint64_t)s->strides[k - 1] != d)
			break;
		d *= a->shape[k - 1];
	}
	w->outer = k;
	w->run = d;
	w->layout = TD_ZARR_STRIDED;
	return NULL;
}

/*
 * A single-plane image: dense C order but for dimension 0, its rows
 * row_pitch bytes apart (blob spec §11.4 packed grids), into *img.
 */
static const char *image_rows(const struct td_zarr_array *a,
                              const struct td_zarr_src *s,
                              struct td_zarr_src *img, int64_t *st)
{
	int64_t d = (int64_t)a->type->size;

	if (s->row_pitch > INT64_MAX)
		return "its row pitch overflows";
	for (uint32_t k = a->ndim; k-- > 1;) {
		st[k] = d;
		if (__builtin_mul_overflow(d, (int64_t)a->shape[k], &d) ||
		    a->shape[k] > INT64_MAX)
			return "its size overflows";
	}
	st[0] = (int64_t)s->row_pitch;
	*img = *s;
	img->nstrides = a->ndim;
	img->strides = st;
	return NULL;
}

const char *td_zarr_walk_init(struct td_zarr_walk *w,
                              const struct td_zarr_array *a,
                              const struct td_zarr_src *s)
{
	uint64_t have = 0, d = a->type->size;
	int64_t st[TD_ZARR_MAX_DIMS];
	struct td_zarr_src img;
	bool dense = true;

	memset(w, 0, sizeof(*w));
	if (td_zarr_chunk_bytes(a, &w->len))
		return "its size overflows";
	if (semi_planar(s->format))
		return "a semi-planar format has no single-array form";
	if (s->row_pitch && s->nplanes == 1 && a->ndim >= 2) {
		const char *why = image_rows(a, s, &img, st);

		if (why)
			return why;
		s = &img;
	}
	if (!s->nplanes || s->nplanes > TD_ZARR_MAX_PLANES)
		return "it has no plane or too many";
	if (s->nstrides && s->nstrides != a->ndim)
		return "its strides do not match its shape";
	for (uint32_t k = s->nstrides; k-- > 0;) {
		dense &= (uint64_t)s->strides[k] == d || a->shape[k] <= 1;
		d *= a->shape[k];
	}
	w->nplanes = s->nplanes;
	memcpy(w->plane_size, s->plane_size,
	       s->nplanes * sizeof(*s->plane_size));
	w->layout = TD_ZARR_DENSE;
	if (s->nplanes == 1 && dense)
		return s->plane_size[0] < w->len
		               ? "its plane is smaller than its shape"
		               : NULL;
	if (!w->len)
		return NULL;
	if (s->nplanes == 1)
		return strided(w, a, s);
	/* planar: the planes one after the other, each packed */
	for (uint32_t p = 0; p < s->nplanes; p++)
		if (__builtin_add_overflow(have, s->plane_size[p], &have))
			return "its planes are padded (not supported)";
	if (have != w->len || !dense)
		return "its planes are padded (not supported)";
	w->layout = TD_ZARR_PLANAR;
	return NULL;
}

uint64_t td_zarr_walk_at(const struct td_zarr_walk *w, uint64_t pos,
                         uint32_t *plane, uint64_t *off)
{
	uint64_t r, within;

	*plane = 0;
	switch (w->layout) {
	case TD_ZARR_DENSE:
		*off = pos;
		return w->len - pos;
	case TD_ZARR_PLANAR:
		while (*plane + 1 < w->nplanes && pos >= w->plane_size[*plane])
			pos -= w->plane_size[(*plane)++];
		*off = pos;
		return w->plane_size[*plane] - pos;
	case TD_ZARR_STRIDED:
		break;
	}
	r = pos / w->run;
	within = pos % w->run;
	*off = within;
	for (uint32_t k = w->outer; k-- > 0;) {
		*off += (r % w->shape[k]) * (uint64_t)w->st[k];
		r /= w->shape[k];
	}
	return w->run - within;
}
