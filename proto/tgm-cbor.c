/* SPDX-License-Identifier: MIT */
/*
 * The bounded CBOR pass every .tgm CBOR input goes through first (see
 * tgm-desc.h), loading the checked item into libcbor's tree, and the
 * small readers of that tree the descriptor, naming and JSON code share
 * (tgm-cbor.h).
 */
#include "tgm-cbor.h"

#include <errno.h>
#include <string.h>

#include "bytes.h"

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

/* The open containers of the item being checked. */
struct cstack {
	struct {
		enum ckind kind;
		uint64_t left; /* definite: items to go; indef map: parity */
	} st[TD_TGM_CBOR_MAX_DEPTH];
	int depth;
};

/* Inside an indefinite string only same-type chunks and the break may
 * appear (RFC 8949 §3.2.3). */
static int check_chunk(const struct cstack *k, enum cev ev, size_t pos,
                       struct td_err *err)
{
	enum ckind top = k->depth ? k->st[k->depth - 1].kind : K_ARRAY;
	enum cev want = top == K_INDEF_TEXT ? EV_TEXT : EV_BYTES;

	if ((top == K_INDEF_TEXT || top == K_INDEF_BYTES) && ev != want &&
	    ev != EV_BREAK)
		return td__err_set(err, TD_ERR_MALFORMED, NULL, false, 0, pos,
		                   "indefinite string chunk of the "
		                   "wrong type");
	return 0;
}

/* A definite array or map: every item takes at least one byte, so a
 * larger count needs more input (refused before libcbor allocates slots
 * for it). head is where its head started, pos where it ended. */
static int check_count(const struct cstate *s, size_t head, size_t pos,
                       size_t len, struct td_err *err)
{
	size_t left = len - pos;
	uint64_t per = s->ev == EV_MAP ? 2 : 1;

	if (s->n <= left && (s->ev != EV_MAP || s->n <= left / 2))
		return 0;
	return td__err_truncated(
	        err,
	        s->n > UINT64_MAX / 2 - pos ? UINT64_MAX : pos + per * s->n,
	        len, head, "CBOR count larger than the bytes left");
}

/* A break closes the innermost indefinite item. */
static int check_break(struct cstack *k, size_t pos, struct td_err *err)
{
	enum ckind top = k->depth ? k->st[k->depth - 1].kind : K_ARRAY;

	if (!k->depth || top == K_ARRAY || top == K_MAP || top == K_TAG)
		return td__err_set(err, TD_ERR_MALFORMED, NULL, false, 0, pos,
		                   "CBOR break outside an indefinite item");
	if (top == K_INDEF_MAP && k->st[k->depth - 1].left)
		return td__err_set(err, TD_ERR_MALFORMED, NULL, false, 0, pos,
		                   "CBOR map key without a value");
	k->depth--;
	return 0;
}

static int check_open(struct cstack *k, const struct cstate *s, size_t head,
                      struct td_err *err)
{
	static const enum ckind kinds[] = {
	        [EV_ARRAY] = K_ARRAY,
	        [EV_MAP] = K_MAP,
	        [EV_INDEF_ARRAY] = K_INDEF_ARRAY,
	        [EV_INDEF_MAP] = K_INDEF_MAP,
	        [EV_INDEF_TEXT] = K_INDEF_TEXT,
	        [EV_INDEF_BYTES] = K_INDEF_BYTES,
	        [EV_TAG] = K_TAG,
	};

	if (k->depth == TD_TGM_CBOR_MAX_DEPTH)
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT, NULL,
		                   false, 0, head, "CBOR nested too deeply");
	k->st[k->depth].kind = kinds[s->ev];
	k->st[k->depth].left = s->ev == EV_ARRAY ? s->n
	                       : s->ev == EV_MAP ? 2 * s->n
	                       : s->ev == EV_TAG ? 1
	                                         : 0;
	k->depth++;
	return 0;
}

/* An item completed: count it against its container(s). True when it
 * was the outermost one. */
static bool check_done(struct cstack *k)
{
	for (;;) {
		if (!k->depth)
			return true;
		switch (k->st[k->depth - 1].kind) {
		case K_ARRAY:
		case K_MAP:
		case K_TAG:
			if (--k->st[k->depth - 1].left)
				return false;
			k->depth--; /* it completed too */
			break;
		case K_INDEF_MAP:
			k->st[k->depth - 1].left ^= 1;
			return false;
		default:
			return false;
		}
	}
}

/*
 * One decoded head at buf[head..pos): check it and update the stack.
 * Returns 1 when the outermost item is complete, 0 to go on, -errno.
 */
static int check_head(struct cstack *k, const struct cstate *s, size_t head,
                      size_t pos, size_t len, struct td_err *err)
{
	int rc = 0;

	switch (s->ev) {
	case EV_TEXT:
		if (!td__utf8_valid(s->sp, s->slen))
			return td__err_set(err, TD_ERR_INVALID_UTF8, NULL,
			                   false, 0, pos - s->slen,
			                   "CBOR text is not UTF-8");
		break;
	case EV_SCALAR:
	case EV_BYTES:
		break;
	case EV_ARRAY:
	case EV_MAP:
		rc = check_count(s, head, pos, len, err);
		if (rc < 0 || s->n == 0)
			break;
		return check_open(k, s, head, err);
	case EV_BREAK:
		rc = check_break(k, pos - 1, err);
		break;
	case EV_NONE: /* refused by the caller */
	default:      /* indefinite items and tags */
		return check_open(k, s, head, err);
	}
	if (rc < 0)
		return rc;
	return check_done(k) ? 1 : 0;
}

int td_tgm_cbor_check(const uint8_t *buf, size_t len, size_t *item_len,
                      struct td_err *err)
{
	struct cstack k = {.depth = 0};
	size_t pos = 0;
	uint64_t items = 0;

	for (;;) {
		struct cstate s = {.ev = EV_NONE};
		struct cbor_decoder_result r;
		int rc;

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
		rc = check_chunk(&k, s.ev, pos, err);
		if (rc < 0)
			return rc;
		rc = check_head(&k, &s, pos, pos + r.read, len, err);
		if (rc < 0)
			return rc;
		pos += r.read;
		if (rc == 1) {
			if (item_len)
				*item_len = pos;
			return 0;
		}
	}
}

int td__tgm_cbor_load(const uint8_t *buf, size_t len, cbor_item_t **out,
                      size_t *used, struct td_err *err)
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

cbor_item_t *td__cbor_untag(cbor_item_t *it)
{
	/* depth is bounded by td_tgm_cbor_check() (a tag opens a level) */
	while (cbor_isa_tag(it)) {
		cbor_item_t *in = cbor_tag_item(it); /* a reference of ours */

		cbor_decref(&it);
		it = in;
	}
	if (cbor_isa_array(it)) {
		cbor_item_t **h = cbor_array_handle(it);

		for (size_t i = 0; i < cbor_array_size(it); i++)
			h[i] = td__cbor_untag(h[i]);
	} else if (cbor_isa_map(it)) {
		struct cbor_pair *p = cbor_map_handle(it);

		for (size_t i = 0; i < cbor_map_size(it); i++) {
			p[i].key = td__cbor_untag(p[i].key);
			p[i].value = td__cbor_untag(p[i].value);
		}
	}
	return it;
}

/* ---- reading the tree ---- */

ssize_t td__cbor_text_get(const cbor_item_t *it, char *buf, size_t cap)
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

bool td__cbor_text_is(const cbor_item_t *it, const char *key)
{
	char tmp[64];
	size_t kl = strlen(key);
	ssize_t n;

	if (kl >= sizeof(tmp))
		return false;
	n = td__cbor_text_get(it, tmp, sizeof(tmp));
	return n == (ssize_t)kl && !memcmp(tmp, key, kl);
}

cbor_item_t *td__cbor_map_get(const cbor_item_t *m, const char *key)
{
	struct cbor_pair *p;

	if (!m || !cbor_isa_map(m))
		return NULL;
	p = cbor_map_handle(m);
	for (size_t i = 0; i < cbor_map_size(m); i++)
		if (td__cbor_text_is(p[i].key, key))
			return p[i].value;
	return NULL;
}

size_t td__cbor_string_copy(const cbor_item_t *it, uint8_t *dst)
{
	bool text = cbor_isa_string(it);
	cbor_item_t **ch;
	size_t n, len = 0;

	if (text ? cbor_string_is_definite(it)
	         : cbor_bytestring_is_definite(it)) {
		len = text ? cbor_string_length(it)
		           : cbor_bytestring_length(it);
		if (dst && len)
			memcpy(dst,
			       text ? cbor_string_handle(it)
			            : cbor_bytestring_handle(it),
			       len);
		return len;
	}
	/* chunks are definite strings (td_tgm_cbor_check() saw to it) */
	ch = text ? cbor_string_chunks_handle(it)
	          : cbor_bytestring_chunks_handle(it);
	n = text ? cbor_string_chunk_count(it)
	         : cbor_bytestring_chunk_count(it);
	for (size_t i = 0; i < n; i++)
		len += td__cbor_string_copy(ch[i], dst ? dst + len : NULL);
	return len;
}
