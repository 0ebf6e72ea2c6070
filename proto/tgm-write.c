/* SPDX-License-Identifier: MIT */
/*
 * Writing one buffered .tgm message (../shared/specs/tensogram.md §10,
 * §16; see tgm-desc.h): libcbor trees for the descriptors and metadata,
 * serialised as canonical CBOR, framed, hashed and padded.
 */
#include "tgm-desc.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bytes.h"
#include "tgm-cbor.h"

/* ---- a growable output buffer; oom is sticky so callers check once ---- */

struct gbuf {
	uint8_t *p;
	size_t len, cap;
	bool oom;
};

/* Room for n more bytes at the end (counted in len); NULL when out of
 * memory (then sticky) or n is 0. */
static uint8_t *gb_room(struct gbuf *g, size_t n)
{
	if (g->oom || !n)
		return NULL;
	if (n > g->cap - g->len) {
		size_t cap = g->cap ? g->cap : 256;
		uint8_t *p;

		while (cap - g->len < n) {
			if (cap > SIZE_MAX / 2) {
				g->oom = true;
				return NULL;
			}
			cap *= 2;
		}
		p = realloc(g->p, cap);
		if (!p) {
			g->oom = true;
			return NULL;
		}
		g->p = p;
		g->cap = cap;
	}
	g->len += n;
	return g->p + g->len - n;
}

static void gb_put(struct gbuf *g, const void *src, size_t n)
{
	uint8_t *dst = gb_room(g, n);

	if (dst)
		memcpy(dst, src, n);
}

static void gb_zero(struct gbuf *g, size_t n)
{
	static const uint8_t z[8];

	while (n) {
		size_t k = n < sizeof(z) ? n : sizeof(z);
		gb_put(g, z, k);
		n -= k;
	}
}

static void gb_fini(struct gbuf *g)
{
	free(g->p);
	*g = (struct gbuf){0};
}

/* ---- canonical CBOR out (§16) ---- */

static void head(struct gbuf *g,
                 size_t (*enc)(uint64_t, unsigned char *, size_t), uint64_t v)
{
	unsigned char b[9];
	gb_put(g, b, enc(v, b, sizeof(b)));
}

static size_t enc_bytes_start(uint64_t n, unsigned char *b, size_t cap)
{
	return cbor_encode_bytestring_start((size_t)n, b, cap);
}
static size_t enc_string_start(uint64_t n, unsigned char *b, size_t cap)
{
	return cbor_encode_string_start((size_t)n, b, cap);
}
static size_t enc_array_start(uint64_t n, unsigned char *b, size_t cap)
{
	return cbor_encode_array_start((size_t)n, b, cap);
}
static size_t enc_map_start(uint64_t n, unsigned char *b, size_t cap)
{
	return cbor_encode_map_start((size_t)n, b, cap);
}

/* The IEEE half with exactly the value v, if there is one. */
static bool half_exact(double v, float *f)
{
	unsigned char b[3];
	uint16_t h;
	int e;
	double back, mant;

	if ((double)(float)v != v)
		return false;
	*f = (float)v;
	if (cbor_encode_half(*f, b, sizeof(b)) != 3)
		return false;
	h = td__be16(b + 1);
	e = (h >> 10) & 0x1f;
	mant = h & 0x3ff;
	if (e == 0x1f)
		return false; /* non-finite: handled by the caller */
	back = e ? ldexp(1024 + mant, e - 25) : ldexp(mant, -24);
	if (h & 0x8000)
		back = -back;
	return back == v && (v != 0 || signbit(back) == signbit(v));
}

static void canon_float(struct gbuf *g, double v)
{
	unsigned char b[9];
	float f;

	/* deterministic encoding: the shortest width keeping the value */
	if (isnan(v)) {
		static const uint8_t qnan[] = {0xf9, 0x7e, 0x00};
		gb_put(g, qnan, 3);
	} else if (isinf(v)) {
		gb_put(g, b,
		       cbor_encode_half(v > 0 ? INFINITY : -INFINITY, b,
		                        sizeof(b)));
	} else if (half_exact(v, &f)) {
		gb_put(g, b, cbor_encode_half(f, b, sizeof(b)));
	} else if ((double)(float)v == v) {
		gb_put(g, b, cbor_encode_single((float)v, b, sizeof(b)));
	} else {
		gb_put(g, b, cbor_encode_double(v, b, sizeof(b)));
	}
}

struct ckey {
	struct gbuf k, v;
};

static int ckey_cmp(const void *a, const void *b)
{
	const struct ckey *x = a, *y = b;

	if (x->k.len != y->k.len)
		return x->k.len < y->k.len ? -1 : 1;
	return memcmp(x->k.p, y->k.p, x->k.len);
}

/* Depth: our own trees, or user attributes that passed
 * td_tgm_cbor_check() (TD_TGM_CBOR_MAX_DEPTH). */
static void canon(struct gbuf *g, const cbor_item_t *it)
{
	switch (cbor_typeof(it)) {
	case CBOR_TYPE_UINT:
		head(g, cbor_encode_uint, cbor_get_int(it));
		break;
	case CBOR_TYPE_NEGINT:
		head(g, cbor_encode_negint, cbor_get_int(it));
		break;
	case CBOR_TYPE_BYTESTRING:
	case CBOR_TYPE_STRING: {
		size_t n = td__cbor_string_copy(it, NULL);
		uint8_t *dst;

		head(g,
		     cbor_isa_string(it) ? enc_string_start : enc_bytes_start,
		     n);
		dst = gb_room(g, n);
		if (dst)
			td__cbor_string_copy(it, dst);
		break;
	}
	case CBOR_TYPE_ARRAY:
		head(g, enc_array_start, cbor_array_size(it));
		for (size_t i = 0; i < cbor_array_size(it); i++)
			canon(g, cbor_array_handle(it)[i]);
		break;
	case CBOR_TYPE_MAP: {
		size_t n = cbor_map_size(it), k = 0;
		struct cbor_pair *p = cbor_map_handle(it);
		struct ckey *e = calloc(n ? n : 1, sizeof(*e));

		if (!e) {
			g->oom = true;
			return;
		}
		for (size_t i = 0; i < n; i++) {
			canon(&e[i].k, p[i].key);
			canon(&e[i].v, p[i].value);
			g->oom |= e[i].k.oom || e[i].v.oom;
		}
		/* keys ordered by their encoded bytes, shorter first; a
		 * repeated key keeps its first value (stable order below) */
		for (size_t i = 0; i < n; i++) {
			bool dup = false;
			for (size_t j = 0; j < i && !dup; j++)
				dup = !ckey_cmp(&e[i], &e[j]);
			if (dup) {
				gb_fini(&e[i].k);
				gb_fini(&e[i].v);
				continue;
			}
			e[k++] = e[i];
		}
		qsort(e, k, sizeof(*e), ckey_cmp);
		head(g, enc_map_start, k);
		for (size_t i = 0; i < k; i++) {
			gb_put(g, e[i].k.p, e[i].k.len);
			gb_put(g, e[i].v.p, e[i].v.len);
			gb_fini(&e[i].k);
			gb_fini(&e[i].v);
		}
		free(e);
		break;
	}
	case CBOR_TYPE_TAG: {
		cbor_item_t *inner = cbor_tag_item(it);

		head(g, cbor_encode_tag, cbor_tag_value(it));
		canon(g, inner);
		cbor_decref(&inner);
		break;
	}
	case CBOR_TYPE_FLOAT_CTRL:
		if (!cbor_float_ctrl_is_ctrl(it)) {
			canon_float(g, cbor_float_get_float(it));
		} else {
			uint8_t b = (uint8_t)(0xe0 | cbor_ctrl_value(it));
			gb_put(g, &b, 1);
		}
		break;
	}
}

/* ---- building trees (refcounts: every helper consumes its value) ---- */

static bool map_put(cbor_item_t *m, const char *key, cbor_item_t *v)
{
	cbor_item_t *k;
	bool ok;

	if (!m || !v) {
		if (v)
			cbor_decref(&v);
		return false;
	}
	k = cbor_build_string(key);
	ok = k && cbor_map_add(m, (struct cbor_pair){.key = k, .value = v});
	if (k)
		cbor_decref(&k);
	cbor_decref(&v);
	return ok;
}

static bool arr_push(cbor_item_t *a, cbor_item_t *v)
{
	bool ok;

	if (!a || !v) {
		if (v)
			cbor_decref(&v);
		return false;
	}
	ok = cbor_array_push(a, v);
	cbor_decref(&v);
	return ok;
}

static cbor_item_t *uint_list(const uint64_t *v, size_t n)
{
	cbor_item_t *a = cbor_new_definite_array(n);
	bool ok = a != NULL;

	for (size_t i = 0; i < n && ok; i++)
		ok = arr_push(a, cbor_build_uint64(v[i]));
	if (!ok && a)
		cbor_decref(&a);
	return a;
}

/* ---- writing a message (§10 buffered, §16) ---- */

static cbor_item_t *tensor_info(const struct td_tgm_enc_object *o,
                                const uint64_t *strides, bool full)
{
	cbor_item_t *m = cbor_new_definite_map(full ? 9 : 4);
	bool ok = map_put(m, "ndim", cbor_build_uint64(o->ndim)) &&
	          map_put(m, "dtype",
	                  cbor_build_string(td_tgm_dtype_name(o->dtype))) &&
	          map_put(m, "shape", uint_list(o->shape, o->ndim)) &&
	          map_put(m, "strides", uint_list(strides, o->ndim));

	if (ok && full)
		ok = map_put(m, "type", cbor_build_string("ntensor")) &&
		     map_put(m, "byte_order", cbor_build_string("little")) &&
		     map_put(m, "encoding", cbor_build_string("none")) &&
		     map_put(m, "filter", cbor_build_string("none")) &&
		     map_put(m, "compression", cbor_build_string("none"));
	if (!ok && m)
		cbor_decref(&m);
	return m;
}

/* The user's part of base[i]: the entries of attrs (a CBOR map) or meta
 * kept whole as tensord_meta. */
static bool base_user(cbor_item_t *m, const struct td_tgm_enc_object *o)
{
	cbor_item_t *user;
	bool ok = true;

	if (o->attrs) {
		struct cbor_pair *p;

		/* td_tgm_message_encode() loaded it once already */
		if (td__tgm_cbor_load(o->attrs, o->attrs_len, &user, NULL,
		                      NULL) < 0)
			return false;
		p = cbor_map_handle(user);
		for (size_t i = 0; i < cbor_map_size(user) && ok; i++)
			ok = cbor_map_add(m, p[i]);
		cbor_decref(&user);
	} else if (o->meta && o->meta_len) {
		bool text = td__utf8_valid(o->meta, o->meta_len);
		cbor_item_t *v =
		        text ? cbor_build_stringn(o->meta, o->meta_len)
		             : cbor_build_bytestring(o->meta, o->meta_len);
		ok = map_put(m, "tensord_meta", v);
	}
	return ok;
}

/* base[i]: name, _reserved_.tensor, then the user's keys (first wins in
 * canon(), so the user cannot override the first two). */
static cbor_item_t *base_entry(const struct td_tgm_enc_object *o,
                               const uint64_t *strides)
{
	cbor_item_t *m = cbor_new_indefinite_map(), *res;
	bool ok = m != NULL;

	if (ok && o->name)
		ok = map_put(m, "name", cbor_build_string(o->name));
	/* map_put() consumes its value even when it fails: no leak paths */
	res = cbor_new_definite_map(1);
	ok &= map_put(res, "tensor", tensor_info(o, strides, false));
	ok &= map_put(m, "_reserved_", res);
	ok = ok && base_user(m, o);
	if (!ok && m)
		cbor_decref(&m);
	return ok ? m : NULL;
}

/* Serialise a tree canonically (unless ok is false) and drop it. */
static int to_bytes(cbor_item_t *it, bool ok, struct gbuf *out)
{
	if (!it)
		return -ENOMEM;
	if (!ok) { /* building it failed: drop it only */
		cbor_decref(&it);
		return -ENOMEM;
	}
	canon(out, it);
	cbor_decref(&it);
	return out->oom ? -ENOMEM : 0;
}

/* A frame's 16-byte header (§4): version 1, hashed; type 9 CBOR-after. */
static void frame_head(uint8_t h[16], uint16_t type, uint64_t len)
{
	bool nt = type == TD_TGM_NTENSOR_FRAME;

	memcpy(h, "FR", 2);
	td__put_be16(h + 2, type);
	td__put_be16(h + 4, 1);
	td__put_be16(h + 6, nt ? TD_TGM_FRAME_HASH_PRESENT |
	                                    TD_TGM_FRAME_CBOR_AFTER_PAYLOAD
	                       : TD_TGM_FRAME_HASH_PRESENT);
	td__put_be64(h + 8, len);
}

/* A frame's footer (§6) into t: [cbor_offset] (type 9: 16 + data_len)
 * hash ENDF; its length. */
static size_t frame_tail(uint8_t t[20], bool nt, uint64_t data_len,
                         uint64_t digest)
{
	size_t tl = 0;

	if (nt) {
		td__put_be64(t, 16 + data_len);
		tl = 8;
	}
	td__put_be64(t + tl, digest);
	memcpy(t + tl + 8, "ENDF", 4);
	return tl + 12;
}

static void frame_out(struct gbuf *g, uint16_t type, const uint8_t *body,
                      size_t body_len, const uint8_t *body2, size_t body2_len,
                      uint64_t *length_out)
{
	uint8_t h[16], t[20];
	bool nt = type == TD_TGM_NTENSOR_FRAME;
	uint64_t len = 16 + body_len + body2_len + (nt ? 20 : 12);
	XXH3_state_t st;

	frame_head(h, type, len);
	gb_put(g, h, 16);
	gb_put(g, body, body_len);
	gb_put(g, body2, body2_len);
	/* the digest covers the body only (§7), never cbor_offset */
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, body, body_len);
	XXH3_64bits_update(&st, body2, body2_len);
	gb_put(g, t, frame_tail(t, nt, body_len, XXH3_64bits_digest(&st)));
	/* zero padding so the next frame starts at a multiple of 8 (§8) */
	gb_zero(g, (size_t)(((len + 7) & ~(uint64_t)7) - len));
	if (length_out)
		*length_out = len;
}

static uint64_t pad8(uint64_t x)
{
	return (x + 7) & ~(uint64_t)7;
}

/* Objects the writer can hold as they are; -EINVAL naming the part. */
static int check_objects(const struct td_tgm_enc_object *objs, size_t count,
                         struct td_err *err)
{
	if (!count)
		return td__err_set(err, TD_ERR_INVALID_ARGUMENT, "count", true,
		                   0, 0, "a message needs an object");
	for (size_t i = 0; i < count; i++) {
		const struct td_tgm_enc_object *o = &objs[i];
		uint64_t want = td_tgm_dtype_width(o->dtype);
		cbor_item_t *attrs;

		if (!want || !td_tgm_dtype_name(o->dtype))
			return td__err_set(err, TD_ERR_INVALID_ARGUMENT,
			                   "dtype", true, i, 0,
			                   "object dtype cannot be written");
		if (o->ndim > TD_TGM_MAX_DIMS)
			return td__err_set(err, TD_ERR_INVALID_ARGUMENT, "ndim",
			                   true, i, 0,
			                   "object has too many dimensions");
		for (uint32_t k = 0; k < o->ndim; k++)
			if (td__mul_ovf(want, o->shape[k], &want))
				want = UINT64_MAX; /* cannot match data_len */
		if (want != o->data_len || (o->data_len && !o->data))
			return td__err_set(err, TD_ERR_INVALID_ARGUMENT, "data",
			                   true, i, 0,
			                   "object data length differs from "
			                   "shape x width");
		if (!o->attrs)
			continue;
		if (td__tgm_cbor_load(o->attrs, o->attrs_len, &attrs, NULL,
		                      NULL) < 0)
			return td__err_set(err, TD_ERR_INVALID_ARGUMENT,
			                   "attrs", true, i, 0,
			                   "object attributes are not one "
			                   "well-formed CBOR item");
		if (!cbor_isa_map(attrs)) {
			cbor_decref(&attrs);
			return td__err_set(err, TD_ERR_INVALID_ARGUMENT,
			                   "attrs", true, i, 0,
			                   "object attributes are not a CBOR "
			                   "map");
		}
		cbor_decref(&attrs);
	}
	return 0;
}

/* The parts of a message while it is being written. */
struct enc {
	const struct td_tgm_enc_object *objs;
	size_t count;
	struct gbuf meta, hashes, index, msg;
	struct gbuf *descs, *frames; /* one per object */
	uint64_t *flen;              /* each type-9 frame's length */
	uint64_t *dig;               /* td_tgm_message_write(): digests */
	cbor_item_t *base, *hl;      /* metadata base, hash list */
};

/* Object i's descriptor bytes (descs[i]) and its base entry. */
static int enc_describe(struct enc *e, size_t i)
{
	const struct td_tgm_enc_object *o = &e->objs[i];
	uint64_t strides[TD_TGM_MAX_DIMS], s = 1;

	for (uint32_t k = o->ndim; k-- > 0;) {
		strides[k] = s;
		s *= o->shape[k]; /* bounded: the product fit */
	}
	if (to_bytes(tensor_info(o, strides, true), true, &e->descs[i]) < 0 ||
	    !arr_push(e->base, base_entry(o, strides)))
		return -ENOMEM;
	return 0;
}

/* The next entry of the hash list (§7: it repeats each frame's slot). */
static int enc_hash_entry(struct enc *e, uint64_t digest)
{
	char hex[17];

	snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)digest);
	return arr_push(e->hl, cbor_build_string(hex)) ? 0 : -ENOMEM;
}

/* Every object's type-9 frame, its base entry and its hash. */
static int enc_objects(struct enc *e)
{
	for (size_t i = 0; i < e->count; i++) {
		const struct td_tgm_enc_object *o = &e->objs[i];

		if (enc_describe(e, i) < 0)
			return -ENOMEM;
		frame_out(&e->frames[i], TD_TGM_NTENSOR_FRAME, o->data,
		          o->data_len, e->descs[i].p, e->descs[i].len,
		          &e->flen[i]);
		if (e->frames[i].oom ||
		    enc_hash_entry(e, td__be64(e->frames[i].p + e->flen[i] -
		                               12)) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* HeaderMetadata and HeaderHash bodies; they take base and hl. */
static int enc_meta_hashes(struct enc *e, const char *encoder_version)
{
	cbor_item_t *top = cbor_new_definite_map(2);
	cbor_item_t *enc = cbor_new_definite_map(2);
	cbor_item_t *res = cbor_new_definite_map(1);
	bool ok;

	/* map_put() consumes its value even when it fails, so every call
	 * runs (&=) and nothing leaks on the error path */
	ok = map_put(enc, "name", cbor_build_string("tensord"));
	ok &= map_put(enc, "version",
	              cbor_build_string(encoder_version ? encoder_version
	                                                : "unknown"));
	ok &= map_put(res, "encoder", enc);
	ok &= map_put(top, "_reserved_", res);
	ok &= map_put(top, "base", e->base);
	e->base = NULL;
	if (to_bytes(top, ok, &e->meta) < 0) /* to_bytes() drops top */
		return -ENOMEM;
	top = cbor_new_definite_map(2);
	ok = map_put(top, "algorithm", cbor_build_string("xxh3"));
	ok &= map_put(top, "hashes", e->hl);
	e->hl = NULL;
	return to_bytes(top, ok, &e->hashes);
}

/*
 * The HeaderIndex body. It holds offsets that depend on its own length:
 * iterate until it stops changing (offsets only grow, so this ends).
 * *post gets the postamble's offset, *hash_at the HeaderHash frame's.
 */
static int enc_index(struct enc *e, uint64_t *post, uint64_t *hash_at)
{
	uint64_t idx_len = 0, pos;

	for (int iter = 0;; iter++) {
		cbor_item_t *offs = cbor_new_definite_array(e->count);
		cbor_item_t *lens = cbor_new_definite_array(e->count);
		cbor_item_t *m = cbor_new_definite_map(2);
		bool ok = true;

		pos = pad8(24 + 16 + e->meta.len + 12);
		pos = pad8(pos + idx_len);
		*hash_at = pos;
		pos = pad8(pos + 16 + e->hashes.len + 12);
		for (size_t i = 0; i < e->count; i++) {
			ok &= arr_push(offs, cbor_build_uint64(pos));
			ok &= arr_push(lens, cbor_build_uint64(e->flen[i]));
			pos = pad8(pos + e->flen[i]);
		}
		ok &= map_put(m, "offsets", offs);
		ok &= map_put(m, "lengths", lens);
		gb_fini(&e->index);
		if (to_bytes(m, ok, &e->index) < 0)
			return -ENOMEM;
		if (16 + e->index.len + 12 == idx_len)
			break;
		idx_len = 16 + e->index.len + 12;
		if (iter > 16)
			return -ENOMEM; /* cannot happen: lengths only grow */
	}
	*post = pos;
	return 0;
}

/* The postamble (§9) into p: first_footer_offset = its own offset. */
static void postamble(uint8_t p[24], uint64_t post)
{
	td__put_be64(p, post);
	td__put_be64(p + 8, post + 24);
	memcpy(p + 16, "39277777", 8);
}

/* Preamble and header frames into e->msg: the bytes before the first
 * type-9 frame. */
static int enc_head(struct enc *e, uint64_t post, uint64_t hash_at)
{
	uint8_t pre[24];

	memcpy(pre, "TENSOGRM", 8);
	td__put_be16(pre + 8, TD_TGM_VERSION);
	td__put_be16(pre + 10, TD_TGM_HEADER_METADATA | TD_TGM_HEADER_INDEX |
	                               TD_TGM_HEADER_HASHES |
	                               TD_TGM_HASHES_PRESENT);
	td__put_be32(pre + 12, 0);
	td__put_be64(pre + 16, post + 24);
	gb_put(&e->msg, pre, 24);
	frame_out(&e->msg, TD_TGM_HEADER_METADATA_FRAME, e->meta.p, e->meta.len,
	          NULL, 0, NULL);
	frame_out(&e->msg, TD_TGM_HEADER_INDEX_FRAME, e->index.p, e->index.len,
	          NULL, 0, NULL);
	if (e->msg.len != hash_at)
		return -ENOMEM;
	frame_out(&e->msg, TD_TGM_HEADER_HASH_FRAME, e->hashes.p, e->hashes.len,
	          NULL, 0, NULL);
	return e->msg.oom ? -ENOMEM : 0;
}

/* Preamble, header frames, the objects' frames, postamble. */
static int enc_assemble(struct enc *e, uint64_t post, uint64_t hash_at)
{
	uint8_t pa[24];

	if (enc_head(e, post, hash_at) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < e->count; i++)
		gb_put(&e->msg, e->frames[i].p, e->frames[i].len);
	postamble(pa, post);
	gb_put(&e->msg, pa, 24);
	return e->msg.oom || e->msg.len != post + 24 ? -ENOMEM : 0;
}

static void enc_fini(struct enc *e)
{
	gb_fini(&e->msg);
	gb_fini(&e->meta);
	gb_fini(&e->hashes);
	gb_fini(&e->index);
	for (size_t i = 0; e->descs && i < e->count; i++)
		gb_fini(&e->descs[i]);
	for (size_t i = 0; e->frames && i < e->count; i++)
		gb_fini(&e->frames[i]);
	free(e->descs);
	free(e->frames);
	free(e->flen);
	free(e->dig);
	if (e->base)
		cbor_decref(&e->base);
	if (e->hl)
		cbor_decref(&e->hl);
}

int td_tgm_message_encode(const struct td_tgm_enc_object *objs, size_t count,
                          const char *encoder_version, uint8_t **out,
                          size_t *out_len, struct td_err *err)
{
	struct enc e = {.objs = objs, .count = count};
	uint64_t post = 0, hash_at = 0;
	int rc = check_objects(objs, count, err);

	if (rc < 0)
		return rc;
	e.descs = calloc(count, sizeof(*e.descs));
	e.frames = calloc(count, sizeof(*e.frames));
	e.flen = calloc(count, sizeof(*e.flen));
	e.base = cbor_new_definite_array(count);
	e.hl = cbor_new_definite_array(count);
	rc = -ENOMEM;
	if (e.descs && e.frames && e.flen && e.base && e.hl)
		rc = enc_objects(&e);
	if (!rc)
		rc = enc_meta_hashes(&e, encoder_version);
	if (!rc)
		rc = enc_index(&e, &post, &hash_at);
	if (!rc)
		rc = enc_assemble(&e, post, hash_at);
	if (!rc) {
		*out = e.msg.p;
		*out_len = e.msg.len;
		e.msg = (struct gbuf){0};
	} else {
		td__err_set(err, TD_ERR_IO, NULL, false, 0, 0,
		            "out of memory while encoding");
	}
	enc_fini(&e);
	return rc;
}

/* ---- the same message through a sink (td_tgm_message_write) ---- */

/* The next piece of data at p (left bytes on): up to the next multiple
 * of TD_TGM_WRITE_CHUNK in memory, so interior pieces are aligned. */
static size_t piece(const uint8_t *p, uint64_t left)
{
	size_t n = TD_TGM_WRITE_CHUNK -
	           (size_t)((uintptr_t)p % TD_TGM_WRITE_CHUNK);

	return left < n ? (size_t)left : n;
}

/* Each object's descriptor, base entry, frame length and digest: its
 * data hashed where it is, a piece at a time (the digest of the pieces
 * is the digest of the whole, XXH3's streaming form). */
static int stream_hash(struct enc *e, const struct td_tgm_sink *k)
{
	for (size_t i = 0; i < e->count; i++) {
		const struct td_tgm_enc_object *o = &e->objs[i];
		const uint8_t *p = o->data;
		uint64_t left = o->data_len;
		XXH3_state_t st;

		if (enc_describe(e, i) < 0)
			return -ENOMEM;
		XXH3_64bits_reset(&st);
		while (left) {
			size_t n = piece(p, left);

			XXH3_64bits_update(&st, p, n);
			if (k->done)
				k->done(k->ctx, i, p, n);
			p += n;
			left -= n;
		}
		XXH3_64bits_update(&st, e->descs[i].p, e->descs[i].len);
		e->dig[i] = XXH3_64bits_digest(&st);
		e->flen[i] = 16 + o->data_len + e->descs[i].len + 20;
		if (enc_hash_entry(e, e->dig[i]) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* Object i's type-9 frame (as frame_out() lays it) and its padding. */
static int stream_object(struct enc *e, const struct td_tgm_sink *k,
                         size_t i)
{
	static const uint8_t zero[8];
	const struct td_tgm_enc_object *o = &e->objs[i];
	const uint8_t *p = o->data;
	uint64_t left = o->data_len, len = e->flen[i];
	uint8_t b[20];
	int rc;

	frame_head(b, TD_TGM_NTENSOR_FRAME, len);
	rc = k->write(k->ctx, b, 16);
	while (!rc && left) {
		size_t n = piece(p, left);

		rc = k->write(k->ctx, p, n);
		if (k->done)
			k->done(k->ctx, i, p, n);
		p += n;
		left -= n;
	}
	if (!rc)
		rc = k->write(k->ctx, e->descs[i].p, e->descs[i].len);
	if (!rc)
		rc = k->write(k->ctx, b,
		              frame_tail(b, true, o->data_len, e->dig[i]));
	if (!rc && pad8(len) != len)
		rc = k->write(k->ctx, zero, (size_t)(pad8(len) - len));
	return rc;
}

/* Everything, in order: e->msg (preamble, header frames), the objects'
 * frames, the postamble. */
static int stream_out(struct enc *e, const struct td_tgm_sink *k,
                      uint64_t post)
{
	uint8_t pa[24];
	int rc = k->begin ? k->begin(k->ctx, post + 24) : 0;

	if (!rc)
		rc = k->write(k->ctx, e->msg.p, e->msg.len);
	for (size_t i = 0; !rc && i < e->count; i++)
		rc = stream_object(e, k, i);
	postamble(pa, post);
	return rc ? rc : k->write(k->ctx, pa, sizeof(pa));
}

int td_tgm_message_write(const struct td_tgm_enc_object *objs, size_t count,
                         const char *encoder_version,
                         const struct td_tgm_sink *sink, uint64_t *out_len,
                         struct td_err *err)
{
	struct enc e = {.objs = objs, .count = count};
	uint64_t post = 0, hash_at = 0;
	int rc = check_objects(objs, count, err);

	if (rc < 0)
		return rc;
	if (!sink || !sink->write)
		return td__err_set(err, TD_ERR_INVALID_ARGUMENT, "sink", false,
		                   0, 0, "a message needs a sink to write to");
	e.descs = calloc(count, sizeof(*e.descs));
	e.flen = calloc(count, sizeof(*e.flen));
	e.dig = calloc(count, sizeof(*e.dig));
	e.base = cbor_new_definite_array(count);
	e.hl = cbor_new_definite_array(count);
	rc = -ENOMEM;
	if (e.descs && e.flen && e.dig && e.base && e.hl)
		rc = stream_hash(&e, sink);
	if (!rc)
		rc = enc_meta_hashes(&e, encoder_version);
	if (!rc)
		rc = enc_index(&e, &post, &hash_at);
	if (!rc)
		rc = enc_head(&e, post, hash_at);
	if (rc) {
		td__err_set(err, TD_ERR_IO, NULL, false, 0, 0,
		            "out of memory while encoding");
	} else if ((rc = stream_out(&e, sink, post)) < 0) {
		td__err_set(err, TD_ERR_IO, NULL, false, 0, 0,
		            "the output refused the bytes");
	} else if (out_len) {
		*out_len = post + 24;
	}
	enc_fini(&e);
	return rc;
}
