/* SPDX-License-Identifier: MIT */
/*
 * Tensogram descriptors, metadata, naming and message writing (see
 * tgm-desc.h). CBOR through libcbor: its streaming decoder bounds every
 * input first (cbor_check), then cbor_load() builds the tree we read.
 */
#include "tgm-desc.h"

#include <cbor.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bytes.h"

/* ---- a growable output buffer; oom is sticky so callers check once ---- */

struct gbuf {
	uint8_t *p;
	size_t len, cap;
	bool oom;
	bool structured_key; /* a map key was an array, map or tag */
};

static void gb_put(struct gbuf *g, const void *src, size_t n)
{
	if (g->oom)
		return;
	if (n > g->cap - g->len) {
		size_t cap = g->cap ? g->cap : 256;
		uint8_t *p;

		while (cap - g->len < n) {
			if (cap > SIZE_MAX / 2) {
				g->oom = true;
				return;
			}
			cap *= 2;
		}
		p = realloc(g->p, cap);
		if (!p) {
			g->oom = true;
			return;
		}
		g->p = p;
		g->cap = cap;
	}
	if (n)
		memcpy(g->p + g->len, src, n);
	g->len += n;
}

static void gb_str(struct gbuf *g, const char *s)
{
	gb_put(g, s, strlen(s));
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

/* ---- bounded well-formedness pass (no allocation) ---- */

enum cev {
	EV_NONE,
	EV_SCALAR, /* int, float, bool, null, undefined */
	EV_TEXT,   /* definite text string */
	EV_BYTES,  /* definite byte string */
	EV_ARRAY,
	EV_MAP,
	EV_INDEF_ARRAY,
	EV_INDEF_MAP,
	EV_INDEF_TEXT,
	EV_INDEF_BYTES,
	EV_TAG,
	EV_BREAK,
};

/* What is open: a definite container counts down `left` items (a map
 * counts keys and values), an indefinite one waits for its break. */
enum ckind {
	K_ARRAY,
	K_MAP,
	K_INDEF_ARRAY,
	K_INDEF_MAP,
	K_INDEF_TEXT,
	K_INDEF_BYTES,
	K_TAG
};

struct cstate {
	enum cev ev;
	uint64_t n;        /* container count */
	const uint8_t *sp; /* definite string bytes */
	size_t slen;
};

static void cb_scalar_u8(void *c, uint8_t v)
{
	(void)v;
	((struct cstate *)c)->ev = EV_SCALAR;
}
static void cb_scalar_u16(void *c, uint16_t v)
{
	(void)v;
	((struct cstate *)c)->ev = EV_SCALAR;
}
static void cb_scalar_u32(void *c, uint32_t v)
{
	(void)v;
	((struct cstate *)c)->ev = EV_SCALAR;
}
static void cb_scalar_u64(void *c, uint64_t v)
{
	(void)v;
	((struct cstate *)c)->ev = EV_SCALAR;
}
static void cb_scalar_f(void *c, float v)
{
	(void)v;
	((struct cstate *)c)->ev = EV_SCALAR;
}
static void cb_scalar_d(void *c, double v)
{
	(void)v;
	((struct cstate *)c)->ev = EV_SCALAR;
}
static void cb_scalar_b(void *c, bool v)
{
	(void)v;
	((struct cstate *)c)->ev = EV_SCALAR;
}
static void cb_scalar(void *c)
{
	((struct cstate *)c)->ev = EV_SCALAR;
}
static void cb_text(void *c, cbor_data p, size_t n)
{
	struct cstate *s = c;
	s->ev = EV_TEXT, s->sp = p, s->slen = n;
}
static void cb_bytes(void *c, cbor_data p, size_t n)
{
	struct cstate *s = c;
	s->ev = EV_BYTES, s->sp = p, s->slen = n;
}
static void cb_array(void *c, size_t n)
{
	struct cstate *s = c;
	s->ev = EV_ARRAY, s->n = n;
}
static void cb_map(void *c, size_t n)
{
	struct cstate *s = c;
	s->ev = EV_MAP, s->n = n;
}
static void cb_indef_array(void *c)
{
	((struct cstate *)c)->ev = EV_INDEF_ARRAY;
}
static void cb_indef_map(void *c)
{
	((struct cstate *)c)->ev = EV_INDEF_MAP;
}
static void cb_indef_text(void *c)
{
	((struct cstate *)c)->ev = EV_INDEF_TEXT;
}
static void cb_indef_bytes(void *c)
{
	((struct cstate *)c)->ev = EV_INDEF_BYTES;
}
static void cb_tag(void *c, uint64_t v)
{
	(void)v;
	((struct cstate *)c)->ev = EV_TAG;
}
static void cb_break(void *c)
{
	((struct cstate *)c)->ev = EV_BREAK;
}

static const struct cbor_callbacks check_cbs = {
        .uint8 = cb_scalar_u8,
        .uint16 = cb_scalar_u16,
        .uint32 = cb_scalar_u32,
        .uint64 = cb_scalar_u64,
        .negint8 = cb_scalar_u8,
        .negint16 = cb_scalar_u16,
        .negint32 = cb_scalar_u32,
        .negint64 = cb_scalar_u64,
        /* libcbor's member names: byte_string/string are the definite ones,
         * *_start the indefinite ones (its comments have them swapped) */
        .byte_string = cb_bytes,
        .byte_string_start = cb_indef_bytes,
        .string = cb_text,
        .string_start = cb_indef_text,
        .array_start = cb_array,
        .indef_array_start = cb_indef_array,
        .map_start = cb_map,
        .indef_map_start = cb_indef_map,
        .tag = cb_tag,
        .float2 = cb_scalar_f,
        .float4 = cb_scalar_f,
        .float8 = cb_scalar_d,
        .undefined = cb_scalar,
        .null = cb_scalar,
        .boolean = cb_scalar_b,
        .indef_break = cb_break,
};

int td_tgm_cbor_check(const uint8_t *buf, size_t len, size_t *item_len,
                      struct td_err *err)
{
	struct {
		enum ckind kind;
		uint64_t left; /* definite: items to go; indef map: parity */
	} st[TD_TGM_CBOR_MAX_DEPTH];
	int depth = 0;
	size_t pos = 0;
	uint64_t items = 0;

	for (;;) {
		struct cstate s = {.ev = EV_NONE};
		struct cbor_decoder_result r;
		size_t left;
		bool done = false, open = false;

		if (pos >= len)
			return td__err_truncated(err, pos + 1, len, pos,
			                         "CBOR item ends early");
		r = cbor_stream_decode(buf + pos, len - pos, &check_cbs, &s);
		if (r.status == CBOR_DECODER_NEDATA)
			return td__err_truncated(err, pos + r.required, len,
			                         pos, "CBOR item ends early");
		if (r.status != CBOR_DECODER_FINISHED || s.ev == EV_NONE)
			return td__err_set(err, TD_ERR_MALFORMED, NULL, true,
			                   buf[pos], pos,
			                   "not well-formed CBOR (reserved "
			                   "or unassigned initial byte)");
		if (++items > TD_TGM_CBOR_MAX_ITEMS)
			return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT,
			                   NULL, false, 0, pos,
			                   "CBOR has too many items");
		/* inside an indefinite string only same-type chunks and the
		 * break may appear (RFC 8949 §3.2.3) */
		if (depth && (st[depth - 1].kind == K_INDEF_TEXT ||
		              st[depth - 1].kind == K_INDEF_BYTES)) {
			enum cev want = st[depth - 1].kind == K_INDEF_TEXT
			                        ? EV_TEXT
			                        : EV_BYTES;
			if (s.ev != want && s.ev != EV_BREAK)
				return td__err_set(
				        err, TD_ERR_MALFORMED, NULL, false, 0,
				        pos,
				        "indefinite string chunk of the "
				        "wrong type");
		}
		pos += r.read;
		left = len - pos;
		switch (s.ev) {
		case EV_TEXT:
			if (!td__utf8_valid(s.sp, s.slen))
				return td__err_set(err, TD_ERR_INVALID_UTF8,
				                   NULL, false, 0, pos - s.slen,
				                   "CBOR text is not UTF-8");
			done = true;
			break;
		case EV_SCALAR:
		case EV_BYTES:
			done = true;
			break;
		case EV_ARRAY:
		case EV_MAP:
			/* every item takes at least one byte: a larger count
			 * needs more input (refused before libcbor allocates
			 * slots for it) */
			if (s.n > left || (s.ev == EV_MAP && s.n > left / 2))
				return td__err_truncated(
				        err,
				        s.n > UINT64_MAX / 2 - pos
				                ? UINT64_MAX
				                : pos + (s.ev == EV_MAP ? 2
				                                        : 1) *
				                                  s.n,
				        len, pos - r.read,
				        "CBOR count larger than the bytes "
				        "left");
			if (s.n == 0)
				done = true;
			else
				open = true;
			break;
		case EV_INDEF_ARRAY:
		case EV_INDEF_MAP:
		case EV_INDEF_TEXT:
		case EV_INDEF_BYTES:
		case EV_TAG:
			open = true;
			break;
		case EV_BREAK:
			if (!depth || st[depth - 1].kind == K_ARRAY ||
			    st[depth - 1].kind == K_MAP ||
			    st[depth - 1].kind == K_TAG)
				return td__err_set(err, TD_ERR_MALFORMED, NULL,
				                   false, 0, pos - 1,
				                   "CBOR break outside an "
				                   "indefinite item");
			if (st[depth - 1].kind == K_INDEF_MAP &&
			    st[depth - 1].left)
				return td__err_set(err, TD_ERR_MALFORMED, NULL,
				                   false, 0, pos - 1,
				                   "CBOR map key without a "
				                   "value");
			depth--;
			done = true;
			break;
		case EV_NONE:
			break;
		}
		if (open) {
			static const enum ckind kinds[] = {
			        [EV_ARRAY] = K_ARRAY,
			        [EV_MAP] = K_MAP,
			        [EV_INDEF_ARRAY] = K_INDEF_ARRAY,
			        [EV_INDEF_MAP] = K_INDEF_MAP,
			        [EV_INDEF_TEXT] = K_INDEF_TEXT,
			        [EV_INDEF_BYTES] = K_INDEF_BYTES,
			        [EV_TAG] = K_TAG,
			};
			if (depth == TD_TGM_CBOR_MAX_DEPTH)
				return td__err_set(
				        err, TD_ERR_UNSUPPORTED_REQUIREMENT,
				        NULL, false, 0, pos - r.read,
				        "CBOR nested too deeply");
			st[depth].kind = kinds[s.ev];
			st[depth].left = s.ev == EV_ARRAY ? s.n
			                 : s.ev == EV_MAP ? 2 * s.n
			                 : s.ev == EV_TAG ? 1
			                                  : 0;
			depth++;
		}
		/* an item completed: count it against its container(s) */
		while (done) {
			if (!depth) {
				if (item_len)
					*item_len = pos;
				return 0;
			}
			switch (st[depth - 1].kind) {
			case K_ARRAY:
			case K_MAP:
			case K_TAG:
				if (--st[depth - 1].left == 0)
					depth--; /* it completed too */
				else
					done = false;
				break;
			case K_INDEF_MAP:
				st[depth - 1].left ^= 1;
				done = false;
				break;
			default:
				done = false;
				break;
			}
		}
	}
}

/* Check, then build libcbor's tree. *used (may be NULL) = item length. */
static int load(const uint8_t *buf, size_t len, cbor_item_t **out, size_t *used,
                struct td_err *err)
{
	struct cbor_load_result r;
	size_t n;
	int rc = td_tgm_cbor_check(buf, len, &n, err);

	if (rc < 0)
		return rc;
	*out = cbor_load(buf, n, &r);
	if (!*out && r.error.code == CBOR_ERR_MEMERROR) {
		td__err_set(err, TD_ERR_IO, NULL, false, 0, 0, "out of memory");
		return -ENOMEM;
	}
	if (!*out)
		return td__err_set(err, TD_ERR_MALFORMED, NULL, false, 0,
		                   r.error.position,
		                   "libcbor refused the item");
	if (used)
		*used = n;
	return 0;
}

/* ---- reading the tree ---- */

/* Text (definite or chunked) into buf (cut to cap - 1, NUL-terminated,
 * NUL bytes kept); its full length, or -1 when item is not text. */
static ssize_t text_get(const cbor_item_t *it, char *buf, size_t cap)
{
	size_t n = 0;

	if (!cbor_isa_string(it))
		return -1;
	if (cbor_string_is_definite(it)) {
		n = cbor_string_length(it);
		if (cap)
			memcpy(buf, cbor_string_handle(it),
			       n < cap - 1 ? n : cap - 1);
	} else {
		cbor_item_t **ch = cbor_string_chunks_handle(it);

		for (size_t i = 0; i < cbor_string_chunk_count(it); i++) {
			size_t cl = cbor_string_length(ch[i]);

			if (cap && n < cap - 1)
				memcpy(buf + n, cbor_string_handle(ch[i]),
				       cl < cap - 1 - n ? cl : cap - 1 - n);
			n += cl;
		}
	}
	if (cap)
		buf[n < cap - 1 ? n : cap - 1] = 0;
	return (ssize_t)n;
}

/* Does a text item equal key (NUL-free)? */
static bool text_is(const cbor_item_t *it, const char *key)
{
	char tmp[64];
	size_t kl = strlen(key);
	ssize_t n;

	if (kl >= sizeof(tmp))
		return false;
	n = text_get(it, tmp, sizeof(tmp));
	return n == (ssize_t)kl && !memcmp(tmp, key, kl);
}

/* First value under a text key, NULL when none (or m is not a map). */
static cbor_item_t *map_get(const cbor_item_t *m, const char *key)
{
	struct cbor_pair *p;

	if (!m || !cbor_isa_map(m))
		return NULL;
	p = cbor_map_handle(m);
	for (size_t i = 0; i < cbor_map_size(m); i++)
		if (text_is(p[i].key, key))
			return p[i].value;
	return NULL;
}

/* Keep a short name; a longer one (or one with a NUL inside) is cut and
 * marked with "...", so it never compares equal to a real short name. */
static bool word_get(const cbor_item_t *it, char *w)
{
	ssize_t n = text_get(it, w, TD_TGM_WORD_LEN);
	size_t sl;

	if (n < 0)
		return false;
	sl = strlen(w);
	if (sl != (size_t)n) {
		sl = sl < TD_TGM_WORD_LEN - 4 ? sl : TD_TGM_WORD_LEN - 4;
		memcpy(w + sl, "...", 4);
	}
	return true;
}

static int uint_array(const cbor_item_t *it, uint64_t *out, uint32_t *count,
                      const char *field, struct td_err *err)
{
	cbor_item_t **h;
	size_t n;

	if (!cbor_isa_array(it))
		return td__err_set(err, TD_ERR_MALFORMED, field, false, 0, 0,
		                   "descriptor key is not an array");
	n = cbor_array_size(it);
	if (n > TD_TGM_MAX_DIMS)
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT, field,
		                   true, n, 0,
		                   "descriptor has too many dimensions");
	h = cbor_array_handle(it);
	for (size_t i = 0; i < n; i++) {
		if (!cbor_isa_uint(h[i]))
			return td__err_set(err, TD_ERR_MALFORMED, field, false,
			                   0, 0,
			                   "descriptor array element is not "
			                   "an unsigned integer");
		out[i] = cbor_get_int(h[i]);
	}
	*count = (uint32_t)n;
	return 0;
}

/* ---- dtypes ---- */

static const struct {
	const char *name;
	unsigned width;
} dtypes[] = {
        [TD_TGM_INT8] = {"int8", 1},
        [TD_TGM_INT16] = {"int16", 2},
        [TD_TGM_INT32] = {"int32", 4},
        [TD_TGM_INT64] = {"int64", 8},
        [TD_TGM_UINT8] = {"uint8", 1},
        [TD_TGM_UINT16] = {"uint16", 2},
        [TD_TGM_UINT32] = {"uint32", 4},
        [TD_TGM_UINT64] = {"uint64", 8},
        [TD_TGM_FLOAT16] = {"float16", 2},
        [TD_TGM_FLOAT32] = {"float32", 4},
        [TD_TGM_FLOAT64] = {"float64", 8},
        [TD_TGM_BFLOAT16] = {"bfloat16", 2},
        [TD_TGM_COMPLEX64] = {"complex64", 8},
        [TD_TGM_COMPLEX128] = {"complex128", 16},
        [TD_TGM_BITMASK] = {"bitmask", 0},
};
#define DTYPE_COUNT (sizeof(dtypes) / sizeof(dtypes[0]))

unsigned td_tgm_dtype_width(enum td_tgm_dtype t)
{
	return (unsigned)t < DTYPE_COUNT ? dtypes[t].width : 0;
}

const char *td_tgm_dtype_name(enum td_tgm_dtype t)
{
	return (unsigned)t < DTYPE_COUNT ? dtypes[t].name : NULL;
}

enum td_tgm_dtype td_tgm_dtype_from_name(const char *name)
{
	for (unsigned i = 1; i < DTYPE_COUNT; i++)
		if (!strcmp(dtypes[i].name, name))
			return (enum td_tgm_dtype)i;
	return TD_TGM_DTYPE_UNKNOWN;
}

/* ---- the descriptor ---- */

/* The keys upstream's deserialiser knows; anything else is a codec
 * parameter (counted, and searched by the naming chain). */
static const char *const known_keys[] = {
        "type",       "ndim",     "shape",  "strides",     "dtype",
        "byte_order", "encoding", "filter", "compression", "masks",
};
enum {
	KEY_TYPE,
	KEY_NDIM,
	KEY_SHAPE,
	KEY_STRIDES,
	KEY_DTYPE,
	KEY_ORDER,
	KEY_ENCODING,
	KEY_FILTER,
	KEY_COMPRESSION,
	KEY_MASKS,
	KEY_COUNT
};
#define KEYS_REQUIRED                                                          \
	(1u << KEY_TYPE | 1u << KEY_NDIM | 1u << KEY_SHAPE |                   \
	 1u << KEY_STRIDES | 1u << KEY_DTYPE | 1u << KEY_ENCODING |            \
	 1u << KEY_FILTER | 1u << KEY_COMPRESSION)

static int known_key(const cbor_item_t *k)
{
	for (int i = 0; i < KEY_COUNT; i++)
		if (text_is(k, known_keys[i]))
			return i;
	return -1;
}

static int desc_masks(const cbor_item_t *v, struct td_tgm_desc *d,
                      struct td_err *err)
{
	struct cbor_pair *p;

	if (!cbor_isa_map(v))
		return td__err_set(err, TD_ERR_MALFORMED, "masks", false, 0, 0,
		                   "descriptor masks is not a map");
	d->has_masks = true;
	p = cbor_map_handle(v);
	for (size_t i = 0; i < cbor_map_size(v); i++) {
		cbor_item_t *off = map_get(p[i].value, "offset");

		if (off && cbor_isa_uint(off) &&
		    cbor_get_int(off) < d->masks_min_offset)
			d->masks_min_offset = cbor_get_int(off);
	}
	return 0;
}

static int desc_from_item(const cbor_item_t *it, struct td_tgm_desc *d,
                          struct td_err *err)
{
	struct cbor_pair *p;
	unsigned seen = 0;
	int rc = 0;

	if (!cbor_isa_map(it))
		return td__err_set(err, TD_ERR_MALFORMED, NULL, false, 0, 0,
		                   "descriptor is not a CBOR map");
	p = cbor_map_handle(it);
	for (size_t i = 0; i < cbor_map_size(it) && !rc; i++) {
		const cbor_item_t *v = p[i].value;
		int k = known_key(p[i].key);
		char w[TD_TGM_WORD_LEN];

		if (k < 0) {
			d->extra_count++;
			continue;
		}
		if (seen & (1u << k))
			return td__err_set(err, TD_ERR_MALFORMED, known_keys[k],
			                   false, 0, 0,
			                   "descriptor repeats a key");
		seen |= 1u << k;
		switch (k) {
		case KEY_NDIM:
			if (!cbor_isa_uint(v))
				goto wrong_type;
			d->ndim = cbor_get_int(v);
			break;
		case KEY_SHAPE:
			rc = uint_array(v, d->shape, &d->shape_count, "shape",
			                err);
			break;
		case KEY_STRIDES:
			rc = uint_array(v, d->strides, &d->strides_count,
			                "strides", err);
			break;
		case KEY_MASKS:
			rc = desc_masks(v, d, err);
			break;
		case KEY_ORDER:
			if (!word_get(v, w))
				goto wrong_type;
			if (!strcmp(w, "big"))
				d->byte_order = TD_TGM_ORDER_BIG;
			else if (!strcmp(w, "little"))
				d->byte_order = TD_TGM_ORDER_LITTLE;
			else
				return td__err_set(err, TD_ERR_MALFORMED,
				                   "byte_order", false, 0, 0,
				                   "descriptor byte_order is "
				                   "neither big nor little");
			break;
		default: {
			char *dst = k == KEY_TYPE       ? d->type
			            : k == KEY_DTYPE    ? d->dtype_name
			            : k == KEY_ENCODING ? d->encoding
			            : k == KEY_FILTER   ? d->filter
			                                : d->compression;
			if (!word_get(v, dst))
				goto wrong_type;
			if (k == KEY_DTYPE)
				d->dtype = td_tgm_dtype_from_name(dst);
			break;
		}
		}
		continue;
	wrong_type:
		return td__err_set(err, TD_ERR_MALFORMED, known_keys[k], false,
		                   0, 0, "descriptor key has the wrong type");
	}
	if (rc < 0)
		return rc;
	if ((seen & KEYS_REQUIRED) != KEYS_REQUIRED) {
		for (int k = 0; k < KEY_COUNT; k++)
			if ((KEYS_REQUIRED & ~seen) & (1u << k))
				return td__err_set(
				        err, TD_ERR_MALFORMED, known_keys[k],
				        false, 0, 0,
				        "descriptor lacks a required key");
	}
	return 0;
}

int td_tgm_desc_decode(const uint8_t *buf, size_t len, struct td_tgm_desc *d,
                       struct td_err *err)
{
	cbor_item_t *it;
	size_t used;
	int rc;

	memset(d, 0, sizeof(*d));
	d->masks_min_offset = UINT64_MAX;
	rc = load(buf, len, &it, &used, err);
	if (rc < 0)
		return rc;
	rc = desc_from_item(it, d, err);
	cbor_decref(&it);
	d->cbor_len = used;
	return rc;
}

int td_tgm_object_decode(const struct td_tgm_frame *fr, struct td_tgm_object *o,
                         struct td_err *err)
{
	const uint8_t *f;
	uint64_t region;
	int rc;

	memset(o, 0, sizeof(*o));
	if (fr->type != TD_TGM_NTENSOR_FRAME)
		return td__err_set(err, TD_ERR_INVALID_ARGUMENT, "type", true,
		                   fr->type, fr->offset,
		                   "not a data-object frame");
	f = fr->payload - TD_TGM_FRAME_HEADER_LEN;
	/* the walk checked 16 <= cbor_offset <= length - 20 (F10) */
	if (fr->cbor_after_payload) {
		o->cbor = f + fr->cbor_offset;
		o->cbor_len = fr->length - TD_TGM_NTENSOR_FOOTER_LEN -
		              fr->cbor_offset;
		rc = td_tgm_desc_decode(o->cbor, o->cbor_len, &o->desc, err);
		if (rc < 0)
			goto fail;
		if (o->desc.cbor_len != o->cbor_len) {
			rc = td__err_set(err, TD_ERR_MALFORMED, "descriptor",
			                 true, o->cbor_len - o->desc.cbor_len,
			                 0, "bytes after the descriptor");
			goto fail;
		}
		o->data = f + TD_TGM_FRAME_HEADER_LEN;
		o->data_len = fr->cbor_offset - TD_TGM_FRAME_HEADER_LEN;
	} else {
		if (fr->cbor_offset != TD_TGM_FRAME_HEADER_LEN)
			return td__err_set(err, TD_ERR_MALFORMED, "cbor_offset",
			                   true, fr->cbor_offset,
			                   fr->offset + fr->length - 20,
			                   "CBOR-before frame with cbor_offset "
			                   "other than 16");
		o->cbor = fr->payload;
		region = fr->payload_len;
		rc = td_tgm_desc_decode(o->cbor, region, &o->desc, err);
		if (rc < 0)
			goto fail;
		o->cbor_len = o->desc.cbor_len;
		o->data = o->cbor + o->cbor_len;
		o->data_len = region - o->cbor_len;
	}
	if (o->desc.has_masks && o->desc.masks_min_offset != UINT64_MAX) {
		if (o->desc.masks_min_offset > o->data_len)
			return td__err_set(err, TD_ERR_MALFORMED, "masks", true,
			                   o->desc.masks_min_offset, fr->offset,
			                   "mask offset beyond the data "
			                   "region");
		o->data_len = o->desc.masks_min_offset;
	}
	o->data_offset = fr->offset + (uint64_t)(o->data - f);
	return 0;
fail:
	/* descriptor offsets are relative to the CBOR: make them message
	 * offsets */
	if (err)
		err->offset += fr->offset + (uint64_t)(o->cbor - f);
	return rc;
}

int td_tgm_desc_check_import(const struct td_tgm_desc *d, uint64_t data_len,
                             struct td_err *err)
{
	uint64_t want = 1, stride = 1;
	unsigned width = td_tgm_dtype_width(d->dtype);

	if (strcmp(d->type, "ntensor"))
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT, "type",
		                   false, 0, 0, "object type is not ntensor");
	if (!width || d->dtype == TD_TGM_BFLOAT16 ||
	    d->dtype == TD_TGM_COMPLEX64 || d->dtype == TD_TGM_COMPLEX128)
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT, "dtype",
		                   false, 0, 0,
		                   "dtype has no tensord equivalent");
	if (strcmp(d->encoding, "none"))
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT,
		                   "encoding", false, 0, 0,
		                   "encoded objects are not imported");
	if (strcmp(d->filter, "none"))
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT,
		                   "filter", false, 0, 0,
		                   "filtered objects are not imported");
	if (strcmp(d->compression, "none"))
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT,
		                   "compression", false, 0, 0,
		                   "compressed objects are not imported");
	if (d->has_masks)
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT, "masks",
		                   false, 0, 0,
		                   "masked objects are not imported");
	if (d->ndim != d->shape_count || d->strides_count != d->shape_count)
		return td__err_set(err, TD_ERR_MALFORMED, "ndim", true, d->ndim,
		                   0, "ndim, shape and strides disagree");
	for (uint32_t k = d->shape_count; k-- > 0;) {
		if (d->strides[k] != stride)
			return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT,
			                   "strides", true, d->strides[k], 0,
			                   "strides are not C-contiguous");
		/* past an overflow no stride can match: the product check
		 * below reports it */
		if (td__mul_ovf(stride, d->shape[k], &stride))
			stride = 0;
	}
	for (uint32_t k = 0; k < d->shape_count; k++)
		if (td__mul_ovf(want, d->shape[k], &want))
			return td__err_set(err, TD_ERR_FORGED_LENGTH, "shape",
			                   false, 0, 0,
			                   "element count overflows");
	if (td__mul_ovf(want, width, &want))
		return td__err_set(err, TD_ERR_FORGED_LENGTH, "shape", false, 0,
		                   0, "byte count overflows");
	if (want != data_len)
		return td__err_set(err, TD_ERR_MALFORMED, "data", true,
		                   data_len, 0,
		                   "data length differs from shape x width");
	return 0;
}

/* ---- JSON out ---- */

static void json_string(struct gbuf *g, const uint8_t *s, size_t n)
{
	gb_put(g, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		char esc[8];
		uint8_t c = s[i];

		if (c == '"' || c == '\\') {
			esc[0] = '\\', esc[1] = (char)c;
			gb_put(g, esc, 2);
		} else if (c < 0x20) {
			static const char short_esc[] = "btn\0fr";
			if (c >= 8 && c <= 13 && short_esc[c - 8]) {
				esc[0] = '\\', esc[1] = short_esc[c - 8];
				gb_put(g, esc, 2);
			} else {
				snprintf(esc, sizeof(esc), "\\u%04x", c);
				gb_put(g, esc, 6);
			}
		} else {
			gb_put(g, &c, 1);
		}
	}
	gb_put(g, "\"", 1);
}

/* The bytes of a (possibly chunked) text or byte string, in one piece. */
static void string_bytes(const cbor_item_t *it, struct gbuf *out)
{
	bool text = cbor_isa_string(it);

	if (text ? cbor_string_is_definite(it)
	         : cbor_bytestring_is_definite(it)) {
		gb_put(out,
		       text ? cbor_string_handle(it)
		            : cbor_bytestring_handle(it),
		       text ? cbor_string_length(it)
		            : cbor_bytestring_length(it));
		return;
	}
	{
		cbor_item_t **ch = text ? cbor_string_chunks_handle(it)
		                        : cbor_bytestring_chunks_handle(it);
		size_t n = text ? cbor_string_chunk_count(it)
		                : cbor_bytestring_chunk_count(it);

		for (size_t i = 0; i < n; i++)
			string_bytes(ch[i], out);
	}
}

static void json_double(struct gbuf *g, double v)
{
	char tmp[40];

	if (isnan(v)) {
		gb_str(g, "\"NaN\"");
		return;
	}
	if (isinf(v)) {
		gb_str(g, v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
		return;
	}
	/* shortest text that reads back as the same double */
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
		if (strtod(tmp, NULL) == v)
			break;
	}
	gb_str(g, tmp);
	if (!strpbrk(tmp, ".eE"))
		gb_str(g, ".0"); /* keep it a float for the reader */
}

struct jkey {
	struct gbuf key; /* the key as text */
	const cbor_item_t *value;
};

static int jkey_cmp(const void *a, const void *b)
{
	const struct jkey *x = a, *y = b;
	size_t n = x->key.len < y->key.len ? x->key.len : y->key.len;
	int c = n ? memcmp(x->key.p, y->key.p, n) : 0;

	return c ? c : (x->key.len > y->key.len) - (x->key.len < y->key.len);
}

static void json_item(struct gbuf *g, const cbor_item_t *it, bool attrs);

/* A map with keys sorted by their text; skip_reserved drops the
 * `_reserved_` key (per-object attributes, §18). */
static void json_map(struct gbuf *g, const cbor_item_t *it, bool skip_reserved)
{
	size_t n = cbor_map_size(it), k = 0;
	struct cbor_pair *p = cbor_map_handle(it);
	struct jkey *keys = calloc(n ? n : 1, sizeof(*keys));

	if (!keys) {
		g->oom = true;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if (skip_reserved && text_is(p[i].key, "_reserved_"))
			continue;
		if (cbor_isa_string(p[i].key)) {
			string_bytes(p[i].key, &keys[k].key);
		} else if (cbor_isa_array(p[i].key) || cbor_isa_map(p[i].key) ||
			   cbor_isa_tag(p[i].key)) {
			/*
			 * Refused: its JSON would be escaped into a key, and
			 * keys nested in keys double the escapes per level
			 * (2^depth bytes from a few hundred of input).
			 */
			g->structured_key = true;
			continue;
		} else {
			/* a scalar key: its own JSON as the key text */
			json_item(&keys[k].key, p[i].key, false);
		}
		g->oom |= keys[k].key.oom;
		keys[k++].value = p[i].value;
	}
	qsort(keys, k, sizeof(*keys), jkey_cmp);
	gb_put(g, "{", 1);
	for (size_t i = 0; i < k; i++) {
		if (i)
			gb_put(g, ",", 1);
		json_string(g, keys[i].key.p, keys[i].key.len);
		gb_put(g, ":", 1);
		json_item(g, keys[i].value, false);
	}
	gb_put(g, "}", 1);
	for (size_t i = 0; i < k; i++)
		gb_fini(&keys[i].key);
	free(keys);
}

/* Depth is bounded by td_tgm_cbor_check() (TD_TGM_CBOR_MAX_DEPTH). */
static void json_item(struct gbuf *g, const cbor_item_t *it, bool attrs)
{
	char tmp[32];

	switch (cbor_typeof(it)) {
	case CBOR_TYPE_UINT:
		snprintf(tmp, sizeof(tmp), "%llu",
		         (unsigned long long)cbor_get_int(it));
		gb_str(g, tmp);
		break;
	case CBOR_TYPE_NEGINT:
		/* -1 - n; n + 1 overflows only for the very last value */
		if (cbor_get_int(it) == UINT64_MAX)
			gb_str(g, "-18446744073709551616");
		else {
			snprintf(tmp, sizeof(tmp), "-%llu",
			         (unsigned long long)cbor_get_int(it) + 1);
			gb_str(g, tmp);
		}
		break;
	case CBOR_TYPE_BYTESTRING: {
		struct gbuf b = {0};

		string_bytes(it, &b);
		gb_put(g, "\"", 1);
		for (size_t i = 0; i < b.len; i++) {
			snprintf(tmp, sizeof(tmp), "%02x", b.p[i]);
			gb_put(g, tmp, 2);
		}
		gb_put(g, "\"", 1);
		g->oom |= b.oom;
		gb_fini(&b);
		break;
	}
	case CBOR_TYPE_STRING: {
		struct gbuf b = {0};

		string_bytes(it, &b);
		json_string(g, b.p, b.len);
		g->oom |= b.oom;
		gb_fini(&b);
		break;
	}
	case CBOR_TYPE_ARRAY: {
		cbor_item_t **h = cbor_array_handle(it);

		gb_put(g, "[", 1);
		for (size_t i = 0; i < cbor_array_size(it); i++) {
			if (i)
				gb_put(g, ",", 1);
			json_item(g, h[i], false);
		}
		gb_put(g, "]", 1);
		break;
	}
	case CBOR_TYPE_MAP:
		json_map(g, it, attrs);
		break;
	case CBOR_TYPE_TAG: {
		/* cbor_tag_item() takes a reference */
		cbor_item_t *inner = cbor_tag_item(it);

		json_item(g, inner, attrs);
		cbor_decref(&inner);
		break;
	}
	case CBOR_TYPE_FLOAT_CTRL:
		if (!cbor_float_ctrl_is_ctrl(it))
			json_double(g, cbor_float_get_float(it));
		else if (cbor_ctrl_value(it) == CBOR_CTRL_TRUE)
			gb_str(g, "true");
		else if (cbor_ctrl_value(it) == CBOR_CTRL_FALSE)
			gb_str(g, "false");
		else
			gb_str(g, "null");
		break;
	}
}

static int json_finish(struct gbuf *g, char **json, size_t *len)
{
	gb_put(g, "", 1);
	if (g->oom || g->structured_key) {
		int rc = g->oom ? -ENOMEM : -EBADMSG;

		gb_fini(g);
		return rc;
	}
	*json = (char *)g->p;
	if (len)
		*len = g->len - 1;
	return 0;
}

int td_tgm_cbor_to_json(const uint8_t *cbor, size_t len, char **json,
                        size_t *json_len, struct td_err *err)
{
	struct gbuf g = {0};
	cbor_item_t *it;
	int rc = load(cbor, len, &it, NULL, err);

	if (rc < 0)
		return rc;
	json_item(&g, it, false);
	cbor_decref(&it);
	rc = json_finish(&g, json, json_len);
	if (rc == -EBADMSG)
		td__err_set(err, TD_ERR_MALFORMED, NULL, false, 0, 0,
			    "a map key is an array, map or tag: JSON keys "
			    "are text");
	return rc;
}

/* ---- metadata frames ---- */

struct td_tgm_meta {
	cbor_item_t *root;
	cbor_item_t *base; /* borrowed from root; NULL when absent */
};

int td_tgm_meta_new(const uint8_t *cbor, size_t len, struct td_tgm_meta **out,
                    struct td_err *err)
{
	struct td_tgm_meta *m;
	cbor_item_t *root;
	int rc = load(cbor, len, &root, NULL, err);

	if (rc < 0)
		return rc;
	if (!cbor_isa_map(root)) {
		cbor_decref(&root);
		return td__err_set(err, TD_ERR_MALFORMED, NULL, false, 0, 0,
		                   "metadata is not a CBOR map");
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		cbor_decref(&root);
		return -ENOMEM;
	}
	m->root = root;
	m->base = map_get(root, "base");
	if (m->base) {
		cbor_item_t **h;

		if (!cbor_isa_array(m->base))
			goto bad_base;
		h = cbor_array_handle(m->base);
		for (size_t i = 0; i < cbor_array_size(m->base); i++)
			if (!cbor_isa_map(h[i]))
				goto bad_base;
	}
	*out = m;
	return 0;
bad_base:
	td_tgm_meta_free(m);
	return td__err_set(err, TD_ERR_MALFORMED, "base", false, 0, 0,
	                   "metadata base is not an array of maps");
}

void td_tgm_meta_free(struct td_tgm_meta *m)
{
	if (!m)
		return;
	cbor_decref(&m->root);
	free(m);
}

size_t td_tgm_meta_base_count(const struct td_tgm_meta *m)
{
	return m && m->base ? cbor_array_size(m->base) : 0;
}

static const cbor_item_t *meta_base(const struct td_tgm_meta *m, size_t i)
{
	return i < td_tgm_meta_base_count(m) ? cbor_array_handle(m->base)[i]
	                                     : NULL;
}

int td_tgm_meta_attrs_json(const struct td_tgm_meta *m, size_t i, char **json,
                           size_t *len)
{
	struct gbuf g = {0};
	const cbor_item_t *b = meta_base(m, i);

	if (b)
		json_map(&g, b, true);
	else
		gb_str(&g, "{}");
	return json_finish(&g, json, len);
}

/* ---- naming (§18) ---- */

/* The value of a dotted path: the first segment in base (never
 * `_reserved_`), else among the descriptor's parameter keys (those
 * base lacks: the shallow merge); then nested maps only. */
static const cbor_item_t *path_get(const cbor_item_t *base,
                                   const cbor_item_t *desc, const char *path)
{
	const cbor_item_t *cur = NULL;
	const char *seg = path;

	for (bool first = true;; first = false) {
		const char *dot = strchr(seg, '.');
		size_t sl = dot ? (size_t)(dot - seg) : strlen(seg);
		char key[256];
		const cbor_item_t *next = NULL;

		if (sl >= sizeof(key))
			return NULL;
		memcpy(key, seg, sl);
		key[sl] = 0;
		if (first) {
			if (strcmp(key, "_reserved_"))
				next = map_get(base, key);
			if (!next && desc) {
				bool known = false;
				for (int k = 0; k < KEY_COUNT; k++)
					known |= !strcmp(key, known_keys[k]);
				if (!known)
					next = map_get(desc, key);
			}
		} else {
			next = map_get(cur, key);
		}
		if (!next)
			return NULL;
		cur = next;
		if (!dot)
			return cur;
		seg = dot + 1;
	}
}

/* A hit's text into out; false for a miss (null, float, bytes, ...). */
static bool name_value(const cbor_item_t *v, char *out, size_t cap)
{
	ssize_t n;

	switch (cbor_typeof(v)) {
	case CBOR_TYPE_STRING:
		n = text_get(v, out, cap);
		/* NUL is a control character: the sanitiser would make it
		 * '_', and a C string cannot carry it */
		for (ssize_t i = 0; i < n && (size_t)i < cap - 1; i++)
			if (!out[i])
				out[i] = '_';
		return true;
	case CBOR_TYPE_UINT:
		snprintf(out, cap, "%llu", (unsigned long long)cbor_get_int(v));
		return true;
	case CBOR_TYPE_NEGINT:
		if (cbor_get_int(v) == UINT64_MAX)
			snprintf(out, cap, "-18446744073709551616");
		else
			snprintf(out, cap, "-%llu",
			         (unsigned long long)cbor_get_int(v) + 1);
		return true;
	case CBOR_TYPE_FLOAT_CTRL:
		/* libcbor asserts when asked for a float's ctrl value:
		 * check that it is a ctrl first */
		if (!cbor_float_ctrl_is_ctrl(v) || !cbor_is_bool(v))
			return false;
		snprintf(out, cap, "%s", cbor_get_bool(v) ? "True" : "False");
		return true;
	default:
		return false;
	}
}

int td_tgm_object_name(const struct td_tgm_meta *m, size_t i,
                       const uint8_t *desc_cbor, size_t desc_len,
                       const char *variable_key, char *out, size_t cap,
                       struct td_err *err)
{
	static const char *const chain[] = {"name", "mars.param", "param",
	                                    "mars.shortName", "shortName"};
	const cbor_item_t *base = meta_base(m, i);
	cbor_item_t *desc = NULL;
	int found = 0;

	if (!cap)
		return -EINVAL;
	if (desc_cbor) {
		int rc = load(desc_cbor, desc_len, &desc, NULL, err);
		if (rc < 0)
			return rc;
		if (!cbor_isa_map(desc))
			cbor_decref(&desc); /* no parameters to merge */
	}
	for (int k = -1; k < 5 && !found; k++) {
		const char *path = k < 0 ? variable_key : chain[k];
		const cbor_item_t *v;

		if (!path || !*path)
			continue;
		v = path_get(base, desc, path);
		found = v && name_value(v, out, cap);
	}
	if (desc)
		cbor_decref(&desc);
	if (!found)
		snprintf(out, cap, "object_%zu", i);
	return found;
}

static bool name_byte_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || strchr("._:@+-", c);
}

void td_tgm_name_sanitize(const char *in, char *out, size_t cap)
{
	size_t n = 0, o = 0, len = strlen(in);
	bool dots = true;
	char *s;

	if (!cap)
		return;
	/* room for "v_" and the worst case of the input */
	s = malloc(len + 3);
	if (!s) {
		snprintf(out, cap, "_");
		return;
	}
	/* spec §18: separators and control characters, then unsafe names */
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)in[i];
		s[n++] = (c == '/' || c == '\\' || c < 0x20 || c == 0x7f)
		                 ? '_'
		                 : (char)c;
		dots &= c == '.';
	}
	s[n] = 0;
	if (!n) {
		s[n++] = '_';
		s[n] = 0;
	} else if (dots || !strncmp(s, "__", 2) || !strcmp(s, "zarr.json")) {
		memmove(s + 2, s, n + 1);
		memcpy(s, "v_", 2);
		n += 2;
	}
	/* tensord names (proto/wire.h): one '_' per character outside the
	 * allowed set (a UTF-8 sequence counts once), no ".." */
	for (size_t i = 0; i < n && o + 1 < cap; i++) {
		unsigned char c = (unsigned char)s[i];

		if ((c & 0xc0) == 0x80)
			continue; /* continuation byte: already counted */
		out[o] = c < 0x80 && name_byte_ok((char)c) ? (char)c : '_';
		if (out[o] == '.' && o && out[o - 1] == '.')
			out[o] = '_';
		o++;
	}
	out[o] = 0;
	free(s);
}

static bool name_taken(char **names, size_t upto, const char *s)
{
	for (size_t j = 0; j < upto; j++)
		if (!strcmp(names[j], s))
			return true;
	return false;
}

int td_tgm_names_unique(char **names, size_t count, size_t cap)
{
	char **orig = calloc(count ? count : 1, sizeof(*orig));
	unsigned long *ctr = calloc(count ? count : 1, sizeof(*ctr));
	char *cand = malloc(cap ? cap : 1);
	int rc = 0;

	if (!orig || !ctr || !cand) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < count && !rc; i++) {
		unsigned long k = 0;

		orig[i] = strdup(names[i]);
		if (!orig[i]) {
			rc = -ENOMEM;
			break;
		}
		if (!name_taken(names, i, names[i]))
			continue;
		/* the per-base counter continues where the last object of
		 * the same original name stopped */
		for (size_t j = 0; j < i; j++)
			if (!strcmp(orig[j], orig[i]) && ctr[j] > k)
				k = ctr[j];
		do {
			int w = snprintf(cand, cap, "%s_%lu", orig[i], ++k);

			if (w < 0 || (size_t)w >= cap) {
				rc = -ENAMETOOLONG;
				break;
			}
		} while (name_taken(names, i, cand));
		if (rc)
			break;
		ctr[i] = k;
		strcpy(names[i], cand);
	}
out:
	if (orig)
		for (size_t i = 0; i < count; i++)
			free(orig[i]);
	free(orig);
	free(ctr);
	free(cand);
	return rc;
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

/* Depth: our own trees, built by the encoder or the bounded JSON parser. */
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
		struct gbuf b = {0};

		string_bytes(it, &b);
		head(g,
		     cbor_isa_string(it) ? enc_string_start : enc_bytes_start,
		     b.len);
		gb_put(g, b.p, b.len);
		g->oom |= b.oom;
		gb_fini(&b);
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

/* ---- JSON in (user metadata on save), bounded depth ---- */

struct jp {
	const char *s;
	size_t len, pos;
	int depth;
};

static void jp_ws(struct jp *p)
{
	while (p->pos < p->len && strchr(" \t\r\n", p->s[p->pos]) &&
	       p->s[p->pos])
		p->pos++;
}

static bool jp_lit(struct jp *p, const char *lit)
{
	size_t n = strlen(lit);

	if (p->len - p->pos < n || memcmp(p->s + p->pos, lit, n))
		return false;
	p->pos += n;
	return true;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
	                              : -1;
}

static bool jp_u4(struct jp *p, unsigned *u)
{
	*u = 0;
	if (p->len - p->pos < 4)
		return false;
	for (int i = 0; i < 4; i++) {
		int h = hexval(p->s[p->pos++]);
		if (h < 0)
			return false;
		*u = *u << 4 | (unsigned)h;
	}
	return true;
}

static cbor_item_t *jp_string(struct jp *p)
{
	struct gbuf b = {0};
	cbor_item_t *it = NULL;

	p->pos++; /* the opening quote */
	while (p->pos < p->len && p->s[p->pos] != '"') {
		unsigned char c = (unsigned char)p->s[p->pos++];
		unsigned u, lo;
		uint8_t enc[4];
		size_t n;

		if (c < 0x20)
			goto out;
		if (c != '\\') {
			gb_put(&b, &c, 1);
			continue;
		}
		if (p->pos >= p->len)
			goto out;
		c = (unsigned char)p->s[p->pos++];
		switch (c) {
		case '"':
		case '\\':
		case '/':
			gb_put(&b, &c, 1);
			continue;
		case 'b':
			gb_put(&b, "\b", 1);
			continue;
		case 'f':
			gb_put(&b, "\f", 1);
			continue;
		case 'n':
			gb_put(&b, "\n", 1);
			continue;
		case 'r':
			gb_put(&b, "\r", 1);
			continue;
		case 't':
			gb_put(&b, "\t", 1);
			continue;
		case 'u':
			break;
		default:
			goto out;
		}
		if (!jp_u4(p, &u))
			goto out;
		if (u >= 0xd800 && u < 0xdc00) {
			if (!jp_lit(p, "\\u") || !jp_u4(p, &lo) ||
			    lo < 0xdc00 || lo > 0xdfff)
				goto out;
			u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
		} else if (u >= 0xdc00 && u < 0xe000) {
			goto out;
		}
		if (u < 0x80) {
			enc[0] = (uint8_t)u, n = 1;
		} else if (u < 0x800) {
			enc[0] = (uint8_t)(0xc0 | u >> 6);
			enc[1] = (uint8_t)(0x80 | (u & 0x3f)), n = 2;
		} else if (u < 0x10000) {
			enc[0] = (uint8_t)(0xe0 | u >> 12);
			enc[1] = (uint8_t)(0x80 | ((u >> 6) & 0x3f));
			enc[2] = (uint8_t)(0x80 | (u & 0x3f)), n = 3;
		} else {
			enc[0] = (uint8_t)(0xf0 | u >> 18);
			enc[1] = (uint8_t)(0x80 | ((u >> 12) & 0x3f));
			enc[2] = (uint8_t)(0x80 | ((u >> 6) & 0x3f));
			enc[3] = (uint8_t)(0x80 | (u & 0x3f)), n = 4;
		}
		gb_put(&b, enc, n);
	}
	if (p->pos >= p->len || b.oom || !td__utf8_valid(b.p, b.len))
		goto out;
	p->pos++;
	it = cbor_build_stringn(b.len ? (const char *)b.p : "", b.len);
out:
	gb_fini(&b);
	return it;
}

static cbor_item_t *jp_number(struct jp *p)
{
	size_t st = p->pos;
	bool is_int = true;
	char tmp[64];
	char *end;

	if (p->pos < p->len && p->s[p->pos] == '-')
		p->pos++;
	if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
		return NULL;
	if (p->s[p->pos] == '0')
		p->pos++;
	else
		while (p->pos < p->len && p->s[p->pos] >= '0' &&
		       p->s[p->pos] <= '9')
			p->pos++;
	if (p->pos < p->len && p->s[p->pos] == '.') {
		is_int = false;
		if (++p->pos >= p->len || p->s[p->pos] < '0' ||
		    p->s[p->pos] > '9')
			return NULL;
		while (p->pos < p->len && p->s[p->pos] >= '0' &&
		       p->s[p->pos] <= '9')
			p->pos++;
	}
	if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
		is_int = false;
		p->pos++;
		if (p->pos < p->len &&
		    (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
			p->pos++;
		if (p->pos >= p->len || p->s[p->pos] < '0' ||
		    p->s[p->pos] > '9')
			return NULL;
		while (p->pos < p->len && p->s[p->pos] >= '0' &&
		       p->s[p->pos] <= '9')
			p->pos++;
	}
	if (p->pos - st >= sizeof(tmp))
		return NULL;
	memcpy(tmp, p->s + st, p->pos - st);
	tmp[p->pos - st] = 0;
	if (is_int) {
		errno = 0;
		if (tmp[0] == '-') {
			unsigned long long m = strtoull(tmp + 1, &end, 10);
			if (!errno && m >= 1)
				return cbor_build_negint64(m - 1);
			if (!errno)
				return cbor_build_uint8(0); /* "-0" */
		} else {
			unsigned long long u = strtoull(tmp, &end, 10);
			if (!errno)
				return cbor_build_uint64(u);
		}
	}
	return cbor_build_float8(strtod(tmp, &end));
}

static cbor_item_t *jp_value(struct jp *p)
{
	cbor_item_t *it = NULL;

	jp_ws(p);
	if (p->pos >= p->len || ++p->depth > TD_TGM_CBOR_MAX_DEPTH)
		return NULL;
	switch (p->s[p->pos]) {
	case '{':
		p->pos++;
		it = cbor_new_indefinite_map();
		jp_ws(p);
		if (p->pos < p->len && p->s[p->pos] == '}') {
			p->pos++;
			break;
		}
		while (it) {
			cbor_item_t *k, *v;
			bool ok;

			jp_ws(p);
			if (p->pos >= p->len || p->s[p->pos] != '"')
				goto fail;
			k = jp_string(p);
			jp_ws(p);
			if (!k || !jp_lit(p, ":")) {
				if (k)
					cbor_decref(&k);
				goto fail;
			}
			v = jp_value(p);
			ok = v && cbor_map_add(it, (struct cbor_pair){k, v});
			cbor_decref(&k);
			if (v)
				cbor_decref(&v);
			if (!ok)
				goto fail;
			jp_ws(p);
			if (jp_lit(p, "}"))
				break;
			if (!jp_lit(p, ","))
				goto fail;
		}
		break;
	case '[':
		p->pos++;
		it = cbor_new_indefinite_array();
		jp_ws(p);
		if (p->pos < p->len && p->s[p->pos] == ']') {
			p->pos++;
			break;
		}
		while (it) {
			if (!arr_push(it, jp_value(p)))
				goto fail;
			jp_ws(p);
			if (jp_lit(p, "]"))
				break;
			if (!jp_lit(p, ","))
				goto fail;
		}
		break;
	case '"':
		it = jp_string(p);
		break;
	case 't':
		it = jp_lit(p, "true") ? cbor_build_bool(true) : NULL;
		break;
	case 'f':
		it = jp_lit(p, "false") ? cbor_build_bool(false) : NULL;
		break;
	case 'n':
		it = jp_lit(p, "null") ? cbor_new_null() : NULL;
		break;
	default:
		it = jp_number(p);
		break;
	}
	p->depth--;
	return it;
fail:
	if (it)
		cbor_decref(&it);
	return NULL;
}

/* A JSON object text into a map item; NULL when it is not one. */
static cbor_item_t *json_object_parse(const void *s, size_t len)
{
	struct jp p = {.s = s, .len = len};
	cbor_item_t *it;

	jp_ws(&p);
	if (p.pos >= len || p.s[p.pos] != '{')
		return NULL;
	it = jp_value(&p);
	jp_ws(&p);
	if (it && p.pos != len)
		cbor_decref(&it);
	return it;
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

/* base[i]: name, _reserved_.tensor, then the user's keys (first wins in
 * canon(), so the user cannot override the first two). */
static cbor_item_t *base_entry(const struct td_tgm_enc_object *o,
                               const uint64_t *strides)
{
	cbor_item_t *m = cbor_new_indefinite_map(), *res, *user = NULL;
	bool ok = m != NULL;

	if (ok && o->name)
		ok = map_put(m, "name", cbor_build_string(o->name));
	/* map_put() consumes its value even when it fails: no leak paths */
	res = cbor_new_definite_map(1);
	ok &= map_put(res, "tensor", tensor_info(o, strides, false));
	ok &= map_put(m, "_reserved_", res);
	if (ok && o->meta && o->meta_len)
		user = json_object_parse(o->meta, o->meta_len);
	if (ok && user) {
		struct cbor_pair *p = cbor_map_handle(user);

		for (size_t i = 0; i < cbor_map_size(user) && ok; i++)
			ok = cbor_map_add(m, p[i]);
		cbor_decref(&user);
	} else if (ok && o->meta && o->meta_len) {
		bool text = td__utf8_valid(o->meta, o->meta_len);
		cbor_item_t *v =
		        text ? cbor_build_stringn(o->meta, o->meta_len)
		             : cbor_build_bytestring(o->meta, o->meta_len);
		ok = map_put(m, "tensord_meta", v);
	}
	if (!ok && m)
		cbor_decref(&m);
	return ok ? m : NULL;
}

/* Serialise a tree canonically and drop it. */
static int to_bytes(cbor_item_t *it, struct gbuf *out)
{
	if (!it)
		return -ENOMEM;
	canon(out, it);
	cbor_decref(&it);
	return out->oom ? -ENOMEM : 0;
}

static void frame_out(struct gbuf *g, uint16_t type, const uint8_t *body,
                      size_t body_len, const uint8_t *body2, size_t body2_len,
                      uint64_t *length_out)
{
	uint8_t h[16], t[20];
	bool nt = type == TD_TGM_NTENSOR_FRAME;
	uint64_t len = 16 + body_len + body2_len + (nt ? 20 : 12);
	XXH3_state_t st;
	size_t tl = 0;

	memcpy(h, "FR", 2);
	td__put_be16(h + 2, type);
	td__put_be16(h + 4, 1);
	td__put_be16(h + 6, nt ? TD_TGM_FRAME_HASH_PRESENT |
	                                    TD_TGM_FRAME_CBOR_AFTER_PAYLOAD
	                       : TD_TGM_FRAME_HASH_PRESENT);
	td__put_be64(h + 8, len);
	gb_put(g, h, 16);
	gb_put(g, body, body_len);
	gb_put(g, body2, body2_len);
	/* the digest covers the body only (§7), never cbor_offset */
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, body, body_len);
	XXH3_64bits_update(&st, body2, body2_len);
	if (nt) {
		td__put_be64(t, 16 + body_len);
		tl = 8;
	}
	td__put_be64(t + tl, XXH3_64bits_digest(&st));
	memcpy(t + tl + 8, "ENDF", 4);
	gb_put(g, t, tl + 12);
	/* zero padding so the next frame starts at a multiple of 8 (§8) */
	gb_zero(g, (size_t)(((len + 7) & ~(uint64_t)7) - len));
	if (length_out)
		*length_out = len;
}

static uint64_t pad8(uint64_t x)
{
	return (x + 7) & ~(uint64_t)7;
}

int td_tgm_message_encode(const struct td_tgm_enc_object *objs, size_t count,
                          const char *encoder_version, uint8_t **out,
                          size_t *out_len, struct td_err *err)
{
	struct gbuf meta = {0}, hashes = {0}, index = {0}, msg = {0};
	struct gbuf *descs = NULL, *frames = NULL;
	uint64_t *flen = NULL, idx_len = 0, pos = 0, ha = 0;
	cbor_item_t *base = NULL, *top = NULL, *enc, *res, *hl = NULL;
	bool ok;
	uint8_t pre[24];
	int rc = -ENOMEM;

	if (!count)
		return td__err_set(err, TD_ERR_INVALID_ARGUMENT, "count", true,
		                   0, 0, "a message needs an object");
	for (size_t i = 0; i < count; i++) {
		const struct td_tgm_enc_object *o = &objs[i];
		uint64_t want = td_tgm_dtype_width(o->dtype);

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
	}
	descs = calloc(count, sizeof(*descs));
	frames = calloc(count, sizeof(*frames));
	flen = calloc(count, sizeof(*flen));
	base = cbor_new_definite_array(count);
	hl = cbor_new_definite_array(count);
	if (!descs || !frames || !flen || !base || !hl)
		goto out;
	for (size_t i = 0; i < count; i++) {
		const struct td_tgm_enc_object *o = &objs[i];
		uint64_t strides[TD_TGM_MAX_DIMS], s = 1;
		char hex[17];

		for (uint32_t k = o->ndim; k-- > 0;) {
			strides[k] = s;
			s *= o->shape[k]; /* bounded: the product fit above */
		}
		if (to_bytes(tensor_info(o, strides, true), &descs[i]) < 0 ||
		    !arr_push(base, base_entry(o, strides)))
			goto out;
		frame_out(&frames[i], TD_TGM_NTENSOR_FRAME, o->data,
		          o->data_len, descs[i].p, descs[i].len, &flen[i]);
		if (frames[i].oom)
			goto out;
		/* the hash list repeats each frame's slot (§7) */
		snprintf(hex, sizeof(hex), "%016llx",
		         (unsigned long long)td__be64(frames[i].p + flen[i] -
		                                      12));
		if (!arr_push(hl, cbor_build_string(hex)))
			goto out;
	}
	/* map_put() consumes its value even when it fails, so every call
	 * runs (&=) and nothing leaks on the error path */
	top = cbor_new_definite_map(2);
	enc = cbor_new_definite_map(2);
	res = cbor_new_definite_map(1);
	ok = map_put(enc, "name", cbor_build_string("tensord"));
	ok &= map_put(enc, "version",
	              cbor_build_string(encoder_version ? encoder_version
	                                                : "unknown"));
	ok &= map_put(res, "encoder", enc);
	ok &= map_put(top, "_reserved_", res);
	ok &= map_put(top, "base", base);
	base = NULL;
	if (!ok || to_bytes(top, &meta) < 0) /* to_bytes() drops top */
		goto out;
	top = cbor_new_definite_map(2);
	ok = map_put(top, "algorithm", cbor_build_string("xxh3"));
	ok &= map_put(top, "hashes", hl);
	hl = NULL;
	if (!ok || to_bytes(top, &hashes) < 0)
		goto out;
	top = NULL;
	/* the index holds offsets that depend on its own length: iterate
	 * until it stops changing (offsets only grow, so this ends) */
	for (int iter = 0;; iter++) {
		cbor_item_t *offs = cbor_new_definite_array(count);
		cbor_item_t *lens = cbor_new_definite_array(count);
		cbor_item_t *m = cbor_new_definite_map(2);

		pos = pad8(24 + 16 + meta.len + 12);
		pos = pad8(pos + idx_len);
		ha = pos;
		pos = pad8(pos + 16 + hashes.len + 12);
		ok = true;
		for (size_t i = 0; i < count; i++) {
			ok &= arr_push(offs, cbor_build_uint64(pos));
			ok &= arr_push(lens, cbor_build_uint64(flen[i]));
			pos = pad8(pos + flen[i]);
		}
		ok &= map_put(m, "offsets", offs);
		ok &= map_put(m, "lengths", lens);
		gb_fini(&index);
		if (!ok) {
			if (m)
				cbor_decref(&m);
			goto out;
		}
		if (to_bytes(m, &index) < 0)
			goto out;
		if (16 + index.len + 12 == idx_len)
			break;
		idx_len = 16 + index.len + 12;
		if (iter > 16)
			goto out; /* cannot happen: lengths only grow */
	}
	/* pos is now the postamble's offset */
	memcpy(pre, "TENSOGRM", 8);
	td__put_be16(pre + 8, TD_TGM_VERSION);
	td__put_be16(pre + 10, TD_TGM_HEADER_METADATA | TD_TGM_HEADER_INDEX |
	                               TD_TGM_HEADER_HASHES |
	                               TD_TGM_HASHES_PRESENT);
	td__put_be32(pre + 12, 0);
	td__put_be64(pre + 16, pos + 24);
	gb_put(&msg, pre, 24);
	frame_out(&msg, TD_TGM_HEADER_METADATA_FRAME, meta.p, meta.len, NULL, 0,
	          NULL);
	frame_out(&msg, TD_TGM_HEADER_INDEX_FRAME, index.p, index.len, NULL, 0,
	          NULL);
	if (msg.len != ha)
		goto out;
	frame_out(&msg, TD_TGM_HEADER_HASH_FRAME, hashes.p, hashes.len, NULL, 0,
	          NULL);
	for (size_t i = 0; i < count; i++)
		gb_put(&msg, frames[i].p, frames[i].len);
	td__put_be64(pre, pos);
	td__put_be64(pre + 8, pos + 24);
	memcpy(pre + 16, "39277777", 8);
	gb_put(&msg, pre, 24);
	if (msg.oom || msg.len != pos + 24)
		goto out;
	*out = msg.p;
	*out_len = msg.len;
	msg = (struct gbuf){0};
	rc = 0;
out:
	if (rc < 0)
		td__err_set(err, TD_ERR_IO, NULL, false, 0, 0,
		            "out of memory while encoding");
	gb_fini(&msg);
	gb_fini(&meta);
	gb_fini(&hashes);
	gb_fini(&index);
	for (size_t i = 0; descs && i < count; i++)
		gb_fini(&descs[i]);
	for (size_t i = 0; frames && i < count; i++)
		gb_fini(&frames[i]);
	free(descs);
	free(frames);
	free(flen);
	if (base)
		cbor_decref(&base);
	if (hl)
		cbor_decref(&hl);
	if (top)
		cbor_decref(&top);
	return rc;
}
