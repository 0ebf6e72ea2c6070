/* SPDX-License-Identifier: MIT */
/*
 * Test helpers for Hurray files: a growable in-memory sink transport and a
 * core-level writer that can emit what the public writer refuses (torn or
 * broken composites, unsupported tensors) to derive bad files in tests and
 * fuzz seeds. Header-only so the fuzz seed generator can share it.
 */
#ifndef TD_TESTS_HRRY_UTIL_H
#define TD_TESTS_HRRY_UTIL_H

#include <stdlib.h>
#include <string.h>

#include "hrry.h"

struct hu_sink {
	uint8_t *buf;
	size_t len, cap;
	size_t max_put; /* > 0: accept at most this much per write call */
};

static inline int hu_sink_write(void *ctx, const void *p, size_t n,
				size_t *put)
{
	struct hu_sink *s = ctx;
	if (s->max_put && n > s->max_put)
		n = s->max_put;
	if (s->len + n > s->cap) {
		size_t nc = s->cap ? s->cap : 4096;
		while (nc < s->len + n)
			nc *= 2;
		uint8_t *nb = realloc(s->buf, nc);
		if (!nb)
			return -12;
		s->buf = nb;
		s->cap = nc;
	}
	memcpy(s->buf + s->len, p, n);
	s->len += n;
	*put = n;
	return 0;
}

static inline struct td_hrry_transport hu_sink_transport(struct hu_sink *s)
{
	struct td_hrry_transport t = {.ctx = s, .write = hu_sink_write};
	return t;
}

/* Core-level writer into a sink; entries kept here (up to 64). */
struct hu_raw {
	struct td_hrry_wcore w;
	struct hu_sink *sink;
	struct td_hrry_wentry e[64];
	uint64_t n;
};

static inline void hu_raw_emit(struct hu_raw *r, const void *const *bufs)
{
	static const uint8_t z[4096];
	struct td_hrry_slice s;
	while (td_hrry_wcore_next(&r->w, &s) == TD_HRRY_STEP_NEED) {
		const uint8_t *p = s.kind == TD_HRRY_SLICE_BYTES ? s.ptr :
				   s.kind == TD_HRRY_SLICE_ZEROS ?
								   z :
				   (const uint8_t *)bufs[s.buffer] + s.skip;
		size_t n = s.kind == TD_HRRY_SLICE_ZEROS && s.len > sizeof(z) ?
				   sizeof(z) :
				   (size_t)s.len;
		size_t put = 0;
		hu_sink_write(r->sink, p, n, &put);
		td_hrry_wcore_advance(&r->w, put);
	}
}

static inline int hu_raw_init(struct hu_raw *r, struct hu_sink *s,
			      const struct td_hrry_writer_options *o)
{
	memset(r, 0, sizeof(*r));
	r->sink = s;
	int rc = td_hrry_wcore_init(&r->w, o, NULL);
	if (rc)
		return rc;
	r->w.allow_unsupported = true;
	hu_raw_emit(r, NULL);
	return 0;
}

/* One record; data may be NULL for heads. Zero-filled data when NULL. */
static inline int hu_raw_tensor(struct hu_raw *r, const char *name,
				const struct td_hrry_desc *d,
				const void *const *bufs)
{
	int rc = td_hrry_wcore_begin_tensor(&r->w, name, strlen(name), d,
					    &r->e[r->n], NULL);
	if (rc)
		return rc;
	r->n++;
	hu_raw_emit(r, bufs);
	return 0;
}

static inline int hu_raw_finish(struct hu_raw *r,
				const struct td_hrry_kv_entry *kv, size_t n)
{
	uint32_t order[64], kv_order[64];
	int rc = td_hrry_wcore_begin_finish(&r->w, kv, n,
					    n <= 64 ? kv_order : NULL, r->e,
					    r->n, order, NULL);
	if (rc)
		return rc;
	hu_raw_emit(r, NULL);
	return 0;
}

/* A composite head of type, shape, rule, members. */
static inline void hu_head(struct td_hrry_desc *d, uint8_t type,
			   uint32_t rank, const uint64_t *shape, uint8_t rule,
			   uint8_t op, uint32_t members)
{
	memset(d, 0, sizeof(*d));
	d->version_major = 1;
	d->type_tag = type;
	d->layout_tag = TD_HRRY_LAYOUT_COMPOSITE;
	d->rank = rank;
	memcpy(d->shape, shape, rank * sizeof(*shape));
	d->rule = rule;
	d->combine_op = op;
	d->member_count = members;
}

/* A dense member: shard of parent at offset (NULL: no shard). */
static inline void hu_member(struct td_hrry_desc *d, uint8_t type,
			     uint32_t rank, const uint64_t *shape,
			     const uint64_t *parent, const uint64_t *offset)
{
	td_hrry_desc_init_dense(d, type, rank, shape);
	if (parent) {
		d->flags |= TD_HRRY_DESC_HAS_SHARD;
		memcpy(d->parent_shape, parent, rank * sizeof(*parent));
		memcpy(d->shard_offset, offset, rank * sizeof(*offset));
	}
}

#endif
