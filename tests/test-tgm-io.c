/* SPDX-License-Identifier: MIT */
/*
 * .tgm contents and tensorctl load/save (issue 7): descriptor decoding and
 * its refusals, the import subset, the naming chain, the writer against
 * upstream's bytes, and end-to-end load/save against a real tensord on a
 * temporary socket. Upstream vectors are read from ../shared (never
 * copied); tests that need them skip when the folder is absent.
 */
#include <cbor.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bytes.h"
#include "td-json.h"
#include "tensord/hrry.h"
#include "tensord/tensord.h"
#include "testutil.h"
#include "tgm-desc.h"
#include "tgm.h"

TestSuite(tgm_io, .timeout = TU_TEST_TIMEOUT_S);

/* ---- helpers ---- */

static uint8_t *vector(const char *name, size_t *len)
{
	const char *dir = tu_vectors_path("tgm");
	char path[4200];

	if (!dir)
		cr_skip_test("upstream vectors folder absent: %s not checked",
		             name);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return tu_read_file(path, len);
}

/* The type-9 objects of the message at msg (first message only). */
static size_t objects(const uint8_t *msg, size_t len, struct td_tgm_object *out,
                      size_t cap, struct td_tgm_frame *meta_frame)
{
	struct td_tgm_walk it;
	struct td_tgm_frame fr;
	struct td_err e = {0};
	size_t n = 0;
	int rc;

	cr_assert_eq(td_tgm_walk_init(msg, len, &it, &e), 0, "%s", e.reason);
	while ((rc = td_tgm_walk_next(&it, &fr, &e)) == 1) {
		if (fr.type == TD_TGM_HEADER_METADATA_FRAME && meta_frame)
			*meta_frame = fr;
		if (fr.type != TD_TGM_NTENSOR_FRAME)
			continue;
		cr_assert_lt(n, cap);
		cr_assert_eq(td_tgm_object_decode(&fr, &out[n], &e), 0,
		             "object %zu: %s", n, e.reason);
		n++;
	}
	cr_assert_eq(rc, 0, "walk: %s", e.reason);
	return n;
}

static double be_f64(const uint8_t *p)
{
	uint64_t u = td__be64(p);
	double d;

	memcpy(&d, &u, sizeof(d));
	return d;
}

static float be_f32(const uint8_t *p)
{
	uint32_t u = td__be32(p);
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* Serialise a libcbor item (the test's own descriptors), then drop it. */
static uint8_t *cbor_bytes(cbor_item_t *it, size_t *len)
{
	unsigned char *buf = NULL;
	size_t cap = 0;

	*len = cbor_serialize_alloc(it, &buf, &cap);
	cr_assert(*len > 0);
	cbor_decref(&it);
	return buf;
}

static void put_text(cbor_item_t *m, const char *k, const char *v)
{
	cr_assert(cbor_map_add(
	        m,
	        (struct cbor_pair){.key = cbor_move(cbor_build_string(k)),
	                           .value = cbor_move(cbor_build_string(v))}));
}

static void put_item(cbor_item_t *m, const char *k, cbor_item_t *v)
{
	cr_assert(cbor_map_add(
	        m, (struct cbor_pair){.key = cbor_move(cbor_build_string(k)),
	                              .value = cbor_move(v)}));
}

static cbor_item_t *uints(int n, ...)
{
	cbor_item_t *a = cbor_new_definite_array((size_t)n);
	va_list ap;

	va_start(ap, n);
	for (int i = 0; i < n; i++)
		cr_assert(cbor_array_push(
		        a, cbor_move(cbor_build_uint64(va_arg(ap, uint64_t)))));
	va_end(ap);
	return a;
}

/*
 * A descriptor like upstream's for a 1-d uint8 [n] object, with one text
 * key replaced (or added) by key=value when key is not NULL.
 */
static uint8_t *desc_u8(uint64_t n, const char *key, const char *value,
                        size_t *len)
{
	static const char *const keys[] = {"type",     "dtype",  "byte_order",
	                                   "encoding", "filter", "compression"};
	static const char *const vals[] = {"ntensor", "uint8", "little",
	                                   "none",    "none",  "none"};
	cbor_item_t *m = cbor_new_indefinite_map();
	bool used = false;

	put_item(m, "ndim", cbor_build_uint8(1));
	put_item(m, "shape", uints(1, n));
	put_item(m, "strides", uints(1, (uint64_t)1));
	for (int i = 0; i < 6; i++) {
		bool mine = key && !strcmp(key, keys[i]);
		put_text(m, keys[i], mine ? value : vals[i]);
		used |= mine;
	}
	if (key && !used)
		put_text(m, key, value);
	return cbor_bytes(m, len);
}

/* One unhashed buffered-style message: preamble, one type-9 frame with
 * the given data and descriptor (CBOR after), postamble. */
static uint8_t *msg_one(const uint8_t *data, size_t dlen, const uint8_t *desc,
                        size_t clen, size_t *len)
{
	size_t flen = 16 + dlen + clen + 20, fpad = (flen + 7) & ~(size_t)7;
	size_t total = 24 + fpad + 24, o = 0;
	uint8_t *m = calloc(1, total);

	cr_assert(m);
	memcpy(m, "TENSOGRM", 8);
	td__put_be16(m + 8, 3);
	td__put_be64(m + 16, total);
	o = 24;
	memcpy(m + o, "FR", 2);
	td__put_be16(m + o + 2, 9);
	td__put_be16(m + o + 4, 1);
	td__put_be16(m + o + 6, TD_TGM_FRAME_CBOR_AFTER_PAYLOAD);
	td__put_be64(m + o + 8, flen);
	memcpy(m + o + 16, data, dlen);
	memcpy(m + o + 16 + dlen, desc, clen);
	td__put_be64(m + o + flen - 20, 16 + dlen);
	memcpy(m + o + flen - 4, "ENDF", 4);
	o = 24 + fpad;
	td__put_be64(m + o, o);
	td__put_be64(m + o + 8, total);
	memcpy(m + o + 16, "39277777", 8);
	*len = total;
	return m;
}

/* ---- descriptors of the vectors ---- */

Test(tgm_io, vector_descriptors_and_big_endian_values)
{
	struct td_tgm_object o[4];
	size_t len, n;
	uint8_t *b = vector("simple_f32.tgm", &len);

	n = objects(b, len, o, 4, NULL);
	cr_assert_eq(n, 1);
	cr_assert_str_eq(o[0].desc.type, "ntensor");
	cr_assert_eq(o[0].desc.dtype, TD_TGM_FLOAT32);
	cr_assert_eq(o[0].desc.byte_order, TD_TGM_ORDER_BIG);
	cr_assert_eq(o[0].desc.shape_count, 1);
	cr_assert_eq(o[0].desc.shape[0], 4);
	cr_assert_eq(o[0].desc.strides[0], 1);
	cr_assert_eq(o[0].data_offset, 416);
	cr_assert_eq(o[0].data_len, 16);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(be_f32(o[0].data + 4 * i), (float)(i + 1));
	cr_assert_eq(td_tgm_desc_check_import(&o[0].desc, o[0].data_len, NULL),
	             0);
	free(b);

	b = vector("multi_object.tgm", &len);
	n = objects(b, len, o, 4, NULL);
	cr_assert_eq(n, 3);
	cr_assert_eq(o[0].desc.dtype, TD_TGM_FLOAT32);
	cr_assert_eq(be_f32(o[0].data), 1.5f);
	cr_assert_eq(be_f32(o[0].data + 4), 2.5f);
	cr_assert_eq(o[1].desc.dtype, TD_TGM_INT64);
	cr_assert_eq((int64_t)td__be64(o[1].data + 8), -200);
	cr_assert_eq((int64_t)td__be64(o[1].data + 16), 300);
	cr_assert_eq(o[2].desc.dtype, TD_TGM_UINT8);
	cr_assert_eq(o[2].data_len, 5);
	cr_assert_eq(o[2].data_offset, 960);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(o[2].data[i], 10 * (i + 1));
	free(b);

	b = vector("mars_metadata.tgm", &len);
	n = objects(b, len, o, 4, NULL);
	cr_assert_eq(n, 1);
	cr_assert_eq(o[0].desc.dtype, TD_TGM_FLOAT64);
	cr_assert_eq(o[0].desc.shape_count, 2);
	cr_assert_eq(o[0].desc.strides[0], 3);
	cr_assert_eq(o[0].desc.strides[1], 1);
	for (int i = 0; i < 6; i++)
		cr_assert_eq(be_f64(o[0].data + 8 * i), (double)(i + 1));
	free(b);
}

Test(tgm_io, descriptor_fed_one_byte_at_a_time_is_truncated)
{
	size_t len, clen;
	uint8_t *c = desc_u8(5, NULL, NULL, &clen);
	struct td_tgm_desc d;
	struct td_err e;

	(void)len;
	for (size_t k = 0; k < clen; k++) {
		uint8_t *p = malloc(k ? k : 1); /* exact size: ASan sees */

		memcpy(p, c, k);
		memset(&e, 0, sizeof(e));
		cr_assert_eq(td_tgm_desc_decode(p, k, &d, &e), -ENODATA,
		             "prefix %zu", k);
		cr_assert_eq(e.kind, TD_ERR_TRUNCATED);
		cr_assert_not_null(e.reason);
		free(p);
	}
	cr_assert_eq(td_tgm_desc_decode(c, clen, &d, &e), 0, "%s", e.reason);
	cr_assert_eq(d.cbor_len, clen);
	cr_assert_eq(d.shape[0], 5);
	free(c);
}

struct bad_cbor {
	const char *what;
	const uint8_t *b;
	size_t len;
	int rc;
	enum td_err_kind kind;
	const char *field; /* NULL: any */
};

#define B(...)                                                                 \
	(const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})

Test(tgm_io, descriptor_refuses_malformed_cbor_with_errno_and_reason)
{
	static uint8_t deep[TD_TGM_CBOR_MAX_DEPTH + 2];
	const struct bad_cbor t[] = {
	        {"empty", (const uint8_t[]){0}, 0, -ENODATA, TD_ERR_TRUNCATED,
	         NULL},
	        {"map of 9 with nothing", B(0xa9), -ENODATA, TD_ERR_TRUNCATED,
	         NULL},
	        {"array count 2^63", B(0x9b, 0x80, 0, 0, 0, 0, 0, 0, 0, 0),
	         -ENODATA, TD_ERR_TRUNCATED, NULL},
	        {"map count 2^62 in a tiny input",
	         B(0xbb, 0x40, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x02), -ENODATA,
	         TD_ERR_TRUNCATED, NULL},
	        {"text longer than input", B(0xa1, 0x78, 0x40, 'a'), -ENODATA,
	         TD_ERR_TRUNCATED, NULL},
	        {"reserved initial byte", B(0xa1, 0x1c, 0x00), -EBADMSG,
	         TD_ERR_MALFORMED, NULL},
	        {"stray break", B(0xff), -EBADMSG, TD_ERR_MALFORMED, NULL},
	        {"break in a definite map", B(0xa1, 0x61, 'a', 0xff), -EBADMSG,
	         TD_ERR_MALFORMED, NULL},
	        {"byte chunk in indefinite text",
	         B(0xa1, 0x61, 'a', 0x7f, 0x41, 0x00, 0xff), -EBADMSG,
	         TD_ERR_MALFORMED, NULL},
	        {"indefinite map with a lone key", B(0xbf, 0x61, 'a', 0xff),
	         -EBADMSG, TD_ERR_MALFORMED, NULL},
	        {"unassigned simple value", B(0xa1, 0x61, 'a', 0xf0), -EBADMSG,
	         TD_ERR_MALFORMED, NULL},
	        {"text not UTF-8", B(0xa1, 0x61, 0xff, 0x00), -EILSEQ,
	         TD_ERR_INVALID_UTF8, NULL},
	        {"not a map", B(0x01), -EBADMSG, TD_ERR_MALFORMED, NULL},
	        {"empty map lacks keys", B(0xa0), -EBADMSG, TD_ERR_MALFORMED,
	         "type"},
	        {"shape is text",
	         B(0xa1, 0x65, 's', 'h', 'a', 'p', 'e', 0x61, 'x'), -EBADMSG,
	         TD_ERR_MALFORMED, "shape"},
	        {"negative shape",
	         B(0xa1, 0x65, 's', 'h', 'a', 'p', 'e', 0x81, 0x20), -EBADMSG,
	         TD_ERR_MALFORMED, "shape"},
	        {"ndim is text", B(0xa1, 0x64, 'n', 'd', 'i', 'm', 0x60),
	         -EBADMSG, TD_ERR_MALFORMED, "ndim"},
	        {"repeated key",
	         B(0xa2, 0x64, 'n', 'd', 'i', 'm', 0x01, 0x64, 'n', 'd', 'i',
	           'm', 0x01),
	         -EBADMSG, TD_ERR_MALFORMED, "ndim"},
	        {"byte_order sideways",
	         B(0xa1, 0x6a, 'b', 'y', 't', 'e', '_', 'o', 'r', 'd', 'e', 'r',
	           0x61, 'x'),
	         -EBADMSG, TD_ERR_MALFORMED, "byte_order"},
	        {"17 dimensions",
	         B(0xa1, 0x65, 's', 'h', 'a', 'p', 'e', 0x91, 1, 1, 1, 1, 1, 1,
	           1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1),
	         -ENOTSUP, TD_ERR_UNSUPPORTED_REQUIREMENT, "shape"},
	        {"nested too deeply", deep, sizeof(deep), -ENOTSUP,
	         TD_ERR_UNSUPPORTED_REQUIREMENT, NULL},
	};

	memset(deep, 0x81, sizeof(deep) - 1); /* [[[[...0]]]] */
	deep[sizeof(deep) - 1] = 0x00;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct td_tgm_desc d;
		struct td_err e = {0};
		uint8_t *p = malloc(t[i].len ? t[i].len : 1);
		int rc;

		memcpy(p, t[i].b, t[i].len);
		rc = td_tgm_desc_decode(p, t[i].len, &d, &e);
		cr_expect_eq(rc, t[i].rc, "%s: rc %d want %d (%s)", t[i].what,
		             rc, t[i].rc, e.reason ? e.reason : "");
		cr_expect_eq(e.kind, t[i].kind, "%s: kind %s", t[i].what,
		             td_err_kind_name(e.kind));
		cr_expect_not_null(e.reason, "%s: no reason", t[i].what);
		if (t[i].field)
			cr_expect(e.field && !strcmp(e.field, t[i].field),
			          "%s: field %s", t[i].what,
			          e.field ? e.field : "(null)");
		free(p);
	}
}

Test(tgm_io, import_refuses_codecs_masks_dtypes_and_strides_naming_them)
{
	static const struct {
		const char *key, *value, *field;
	} t[] = {
	        {"compression", "zstd", "compression"},
	        {"filter", "shuffle", "filter"},
	        {"encoding", "simple_packing", "encoding"},
	        {"dtype", "bfloat16", "dtype"},
	        {"dtype", "complex64", "dtype"},
	        {"dtype", "bitmask", "dtype"},
	        {"type", "ntensor2", "type"},
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		size_t clen;
		uint8_t *c = desc_u8(4, t[i].key, t[i].value, &clen);
		struct td_tgm_desc d;
		struct td_err e = {0};

		cr_assert_eq(td_tgm_desc_decode(c, clen, &d, &e), 0, "%s",
		             e.reason);
		cr_expect_eq(td_tgm_desc_check_import(&d, 4, &e), -ENOTSUP,
		             "%s=%s", t[i].key, t[i].value);
		cr_expect_str_eq(e.field, t[i].field);
		free(c);
	}
	{
		/* masks: refused; strides not C order: refused; length */
		cbor_item_t *m = cbor_new_indefinite_map(), *mk, *nan;
		size_t clen;
		uint8_t *c;
		struct td_tgm_desc d;
		struct td_err e = {0};

		put_item(m, "ndim", cbor_build_uint8(2));
		put_item(m, "shape", uints(2, (uint64_t)2, (uint64_t)3));
		put_item(m, "strides", uints(2, (uint64_t)1, (uint64_t)2));
		put_text(m, "type", "ntensor");
		put_text(m, "dtype", "uint8");
		put_text(m, "encoding", "none");
		put_text(m, "filter", "none");
		put_text(m, "compression", "none");
		c = cbor_bytes(m, &clen);
		cr_assert_eq(td_tgm_desc_decode(c, clen, &d, &e), 0);
		cr_expect_eq(td_tgm_desc_check_import(&d, 6, &e), -ENOTSUP);
		cr_expect_str_eq(e.field, "strides");
		d.strides[0] = 3, d.strides[1] = 1;
		cr_expect_eq(td_tgm_desc_check_import(&d, 6, &e), 0);
		cr_expect_eq(td_tgm_desc_check_import(&d, 5, &e), -EBADMSG);
		cr_expect_str_eq(e.field, "data");
		d.ndim = 3;
		cr_expect_eq(td_tgm_desc_check_import(&d, 6, &e), -EBADMSG);
		free(c);

		m = cbor_new_indefinite_map();
		put_item(m, "ndim", cbor_build_uint8(1));
		put_item(m, "shape", uints(1, (uint64_t)4));
		put_item(m, "strides", uints(1, (uint64_t)1));
		put_text(m, "type", "ntensor");
		put_text(m, "dtype", "uint8");
		put_text(m, "encoding", "none");
		put_text(m, "filter", "none");
		put_text(m, "compression", "none");
		mk = cbor_new_indefinite_map();
		nan = cbor_new_indefinite_map();
		put_text(nan, "method", "roaring");
		put_item(nan, "offset", cbor_build_uint8(4));
		put_item(nan, "length", cbor_build_uint8(2));
		put_item(mk, "nan", nan);
		put_item(m, "masks", mk);
		c = cbor_bytes(m, &clen);
		cr_assert_eq(td_tgm_desc_decode(c, clen, &d, &e), 0);
		cr_expect(d.has_masks);
		cr_expect_eq(d.masks_min_offset, 4);
		cr_expect_eq(td_tgm_desc_check_import(&d, 4, &e), -ENOTSUP);
		cr_expect_str_eq(e.field, "masks");
		free(c);
	}
}

Test(tgm_io, object_decode_handles_cbor_before_and_trailing_bytes)
{
	size_t clen, len;
	uint8_t *c = desc_u8(3, NULL, NULL, &clen);
	uint8_t data[3] = {7, 8, 9};
	uint8_t *m = msg_one(data, 3, c, clen, &len);
	struct td_tgm_object o[1];
	struct td_tgm_walk it;
	struct td_tgm_frame fr;
	struct td_err e = {0};
	uint8_t *body;

	cr_assert_eq(objects(m, len, o, 1, NULL), 1);
	cr_assert_eq(o[0].data_len, 3);
	cr_assert_eq(o[0].data_offset, 40);
	cr_assert(!memcmp(o[0].data, data, 3));

	/* the same frame in the CBOR-before layout: descriptor, then data */
	body = m + 24 + 16;
	memcpy(body, c, clen);
	memcpy(body + clen, data, 3);
	td__put_be16(m + 24 + 6, 0);
	td__put_be64(m + 24 + td__be64(m + 24 + 8) - 20, 16);
	cr_assert_eq(objects(m, len, o, 1, NULL), 1);
	cr_assert_eq(o[0].data_len, 3);
	cr_assert_eq(o[0].data_offset, 24 + 16 + clen);
	cr_assert(!memcmp(o[0].data, data, 3));
	free(m);

	/* CBOR after, with a stray byte after the descriptor: refused */
	{
		uint8_t *c2 = malloc(clen + 1);
		memcpy(c2, c, clen);
		c2[clen] = 0;
		m = msg_one(data, 3, c2, clen + 1, &len);
		cr_assert_eq(td_tgm_walk_init(m, len, &it, &e), 0);
		cr_assert_eq(td_tgm_walk_next(&it, &fr, &e), 1);
		cr_expect_eq(td_tgm_object_decode(&fr, o, &e), -EBADMSG);
		cr_expect_not_null(e.reason);
		free(c2);
		free(m);
	}
	free(c);
}

/*
 * The decode tensorctl uses on a file (td_tgm_object_decode_at: the
 * descriptor's bytes alone, read with pread) says what the in-memory one
 * says, both layouts; a CBOR-after region not given whole is refused, a
 * CBOR-before prefix that cuts the descriptor is TRUNCATED.
 */
Test(tgm_io, object_decode_at_matches_the_in_memory_decode)
{
	size_t clen, len;
	uint8_t *c = desc_u8(3, NULL, NULL, &clen);
	uint8_t data[3] = {7, 8, 9};
	struct td_tgm_object a, b;
	struct td_tgm_walk it;
	struct td_tgm_frame fr;
	struct td_err e = {0};

	for (int before = 0; before < 2; before++) {
		uint8_t *m = msg_one(data, 3, c, clen, &len), *at;

		if (before) { /* descriptor, then data */
			memcpy(m + 40, c, clen);
			memcpy(m + 40 + clen, data, 3);
			td__put_be16(m + 24 + 6, 0);
			td__put_be64(m + 24 + td__be64(m + 24 + 8) - 20, 16);
		}
		cr_assert_eq(td_tgm_walk_init(m, len, &it, &e), 0);
		cr_assert_eq(td_tgm_walk_next(&it, &fr, &e), 1);
		cr_assert_eq(td_tgm_object_decode(&fr, &a, &e), 0);
		at = m + 24 + (before ? 16 : fr.cbor_offset);
		cr_assert_eq(td_tgm_object_decode_at(&fr, at, clen, &b, &e), 0);
		cr_expect_null(b.data);
		cr_expect_eq(b.data_offset, a.data_offset);
		cr_expect_eq(b.data_len, a.data_len);
		cr_expect_eq(b.cbor_len, a.cbor_len);
		cr_expect_eq(b.desc.shape[0], a.desc.shape[0]);
		cr_expect_eq(td_tgm_object_decode_at(&fr, at, clen - 1, &b, &e),
		             before ? -ENODATA : -EINVAL);
		cr_expect_not_null(e.reason);
		free(m);
	}
	free(c);
}

/* ---- naming (§18) ---- */

/* base[i] from JSON through our own writer, then the chain. */
static void name_of(const char *meta_json, const char *variable_key, char *out,
                    size_t cap)
{
	uint64_t shape[1] = {1};
	uint8_t one = 1;
	struct td_tgm_enc_object ob = {.dtype = TD_TGM_UINT8,
	                               .ndim = 1,
	                               .shape = shape,
	                               .data = &one,
	                               .data_len = 1,
	                               .meta = meta_json,
	                               .meta_len = strlen(meta_json)};
	struct td_tgm_object o[1];
	struct td_tgm_frame mf;
	struct td_tgm_meta *m;
	uint8_t *msg, *attrs = NULL;
	size_t len;

	/* a JSON object's keys become attributes, as tensorctl save does */
	if (td_json_to_cbor(meta_json, strlen(meta_json), &attrs,
	                    &ob.attrs_len) == 1)
		ob.attrs = attrs;
	cr_assert_eq(td_tgm_message_encode(&ob, 1, "t", &msg, &len, NULL), 0);
	free(attrs);
	cr_assert_eq(objects(msg, len, o, 1, &mf), 1);
	cr_assert_eq(td_tgm_meta_new(mf.payload, mf.payload_len, &m, NULL), 0);
	cr_assert_geq(td_tgm_object_name(m, 0, o[0].cbor, o[0].cbor_len,
	                                 variable_key, out, cap, NULL),
	              0);
	td_tgm_meta_free(m);
	free(msg);
}

Test(tgm_io, naming_chain_table)
{
	static const struct {
		const char *meta, *key, *want;
	} t[] = {
	        {"{\"shortName\":\"a\",\"name\":\"b\"}", NULL, "b"},
	        {"{\"bids\":{\"task\":\"rest\"},\"name\":\"n\"}", "bids.task",
	         "rest"},
	        {"{\"name\":\"n\"}", "bids.task", "n"},
	        {"{\"other\":1}", NULL, "object_0"},
	        {"{\"mars\":{\"param\":128}}", NULL, "128"},
	        {"{\"mars\":{\"param\":\"2t\"},\"param\":\"p\"}", NULL, "2t"},
	        {"{\"param\":\"p\",\"mars\":{\"shortName\":\"s\"}}", NULL, "p"},
	        {"{\"mars\":{\"shortName\":\"s\"},\"shortName\":\"t\"}", NULL,
	         "s"},
	        {"{\"shortName\":true}", NULL, "True"},
	        {"{\"name\":-7}", NULL, "-7"},
	        {"{\"name\":null,\"shortName\":\"x\"}", NULL, "x"},
	        {"{\"name\":1.5,\"shortName\":\"x\"}", NULL, "x"},
	        {"{\"name\":[\"a\"],\"shortName\":\"x\"}", NULL, "x"},
	        {"{\"name\":{\"a\":1},\"shortName\":\"x\"}", NULL, "x"},
	        {"{\"name\":\"\"}", NULL, ""},
	        {"{\"mars\":\"flat\",\"shortName\":\"x\"}", NULL, "x"},
	        {"{\"_reserved_\":{\"name\":\"r\"}}", "_reserved_.name",
	         "object_0"},
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		char got[256];

		name_of(t[i].meta, t[i].key, got, sizeof(got));
		cr_expect_str_eq(got, t[i].want, "%s", t[i].meta);
	}
}

/*
 * Tags are skipped over (tensogram.md §15; upstream's deserialiser does
 * so): a tagged descriptor value, a tagged metadata base and a tagged
 * name read as the items they tag. They were refused ("descriptor key
 * has the wrong type", "metadata base is not an array of maps") while
 * inspect printed the same metadata as fine.
 */
Test(tgm_io, tags_are_skipped_over)
{
	/* {"base": 32([{"name": 1("q")}])} */
	static const uint8_t meta[] = {0xa1, 0x64, 'b', 'a', 's', 'e', 0xd8,
	                               0x20, 0x81, 0xa1, 0x64, 'n', 'a', 'm',
	                               'e', 0xc1, 0x61, 'q'};
	cbor_item_t *m = cbor_new_indefinite_map();
	struct td_tgm_desc d;
	struct td_tgm_meta *mm;
	struct td_err e = {0};
	uint8_t *c;
	size_t clen;
	char got[64];

	put_item(m, "ndim", cbor_build_uint8(1));
	put_item(m, "shape", uints(1, (uint64_t)3));
	put_item(m, "strides", uints(1, (uint64_t)1));
	put_item(m, "dtype",
	         cbor_build_tag(1, cbor_move(cbor_build_string("uint8"))));
	put_text(m, "type", "ntensor");
	put_text(m, "encoding", "none");
	put_text(m, "filter", "none");
	put_text(m, "compression", "none");
	c = cbor_bytes(m, &clen);
	cr_assert_eq(td_tgm_desc_decode(c, clen, &d, &e), 0, "%s", e.reason);
	cr_expect_eq(d.dtype, TD_TGM_UINT8);
	cr_expect_eq(td_tgm_desc_check_import(&d, 3, &e), 0, "%s", e.reason);
	free(c);
	cr_assert_eq(td_tgm_meta_new(meta, sizeof(meta), &mm, &e), 0, "%s",
	             e.reason);
	cr_expect_eq(td_tgm_object_name(mm, 0, NULL, 0, NULL, got, sizeof(got),
	                                NULL),
	             1);
	cr_expect_str_eq(got, "q");
	td_tgm_meta_free(mm);
}

Test(tgm_io, naming_merges_descriptor_params_shallowly)
{
	/* {"name":"n"} and {"mars":{"param":"2t"}} as descriptor params */
	static const uint8_t p_name[] = {0xa1, 0x64, 'n',  'a',
	                                 'm',  'e',  0x61, 'n'};
	static const uint8_t p_mars[] = {0xa1, 0x64, 'm', 'a', 'r', 's',
	                                 0xa1, 0x65, 'p', 'a', 'r', 'a',
	                                 'm',  0x62, '2', 't'};
	static const uint8_t m_short[] = {0xa1, 0x64, 'b', 'a', 's',  'e', 0x81,
	                                  0xa1, 0x69, 's', 'h', 'o',  'r', 't',
	                                  'N',  'a',  'm', 'e', 0x61, 's'};
	static const uint8_t m_lev[] = {0xa1, 0x64, 'b', 'a', 's', 'e', 0x81,
	                                0xa1, 0x64, 'm', 'a', 'r', 's', 0xa1,
	                                0x67, 'l',  'e', 'v', 't', 'y', 'p',
	                                'e',  0x63, 's', 'f', 'c'};
	struct td_tgm_meta *m;
	char got[64];

	cr_assert_eq(td_tgm_meta_new(m_short, sizeof(m_short), &m, NULL), 0);
	cr_expect_eq(td_tgm_object_name(m, 0, p_name, sizeof(p_name), NULL, got,
	                                sizeof(got), NULL),
	             1);
	cr_expect_str_eq(got, "n");
	td_tgm_meta_free(m);
	cr_assert_eq(td_tgm_meta_new(m_lev, sizeof(m_lev), &m, NULL), 0);
	cr_expect_eq(td_tgm_object_name(m, 0, p_mars, sizeof(p_mars), NULL, got,
	                                sizeof(got), NULL),
	             0);
	cr_expect_str_eq(got, "object_0");
	td_tgm_meta_free(m);
	/* no metadata at all: the params alone still name it */
	cr_expect_eq(td_tgm_object_name(NULL, 3, p_mars, sizeof(p_mars), NULL,
	                                got, sizeof(got), NULL),
	             1);
	cr_expect_str_eq(got, "2t");
}

/*
 * td_tgm_meta_saved(): tensord_meta kept whole comes back as its bytes
 * (an indefinite-length string as its chunks joined), beside a text
 * name only; a name that is no text is the user's metadata, read as
 * JSON (it was dropped: {"name":5,"tensord_meta":"hi"} loaded as "hi").
 */
Test(tgm_io, meta_saved_only_beside_a_text_name)
{
	/* {"base": [{"name": N, "tensord_meta": V}]}: N at 13, V after */
	static const uint8_t head[] = {0xa1, 0x64, 'b', 'a', 's', 'e', 0x81,
	                               0xa2, 0x64, 'n', 'a', 'm', 'e'};
	static const uint8_t key[] = {0x6c, 't', 'e', 'n', 's', 'o', 'r',
	                              'd',  '_', 'm', 'e', 't', 'a'};
	static const struct {
		uint8_t name[4], value[8];
		size_t name_len, value_len;
		int rc;
		const char *saved;
	} c[] = {
	        {{0x61, 'x'}, {0x62, 'h', 'i'}, 2, 3, 1, "hi"},
	        {{0x61, 'x'}, {0x7f, 0x61, 'h', 0x61, 'i', 0xff}, 2, 6, 1, "hi"},
	        {{0x61, 'x'}, {0x60}, 2, 1, 1, ""},
	        {{0x61, 'x'}, {0x05}, 2, 1, 0, NULL},
	        {{0x05}, {0x62, 'h', 'i'}, 1, 3, 0, NULL},
	        {{0xf6}, {0x62, 'h', 'i'}, 1, 3, 0, NULL},
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		uint8_t b[64], *out = NULL;
		size_t n = 0, len = 99;
		struct td_tgm_meta *m;
		int rc;

		memcpy(b, head, sizeof(head));
		n += sizeof(head);
		memcpy(b + n, c[i].name, c[i].name_len);
		n += c[i].name_len;
		memcpy(b + n, key, sizeof(key));
		n += sizeof(key);
		memcpy(b + n, c[i].value, c[i].value_len);
		n += c[i].value_len;
		cr_assert_eq(td_tgm_meta_new(b, n, &m, NULL), 0, "case %zu", i);
		rc = td_tgm_meta_saved(m, 0, &out, &len);
		cr_expect_eq(rc, c[i].rc, "case %zu: %d", i, rc);
		if (c[i].saved)
			cr_expect(len == strlen(c[i].saved) &&
			                  (!len || !memcmp(out, c[i].saved, len)),
			          "case %zu: %zu bytes", i, len);
		else
			cr_expect(!out && !len, "case %zu", i);
		free(out);
		td_tgm_meta_free(m);
	}
	/* {"base": [{"name": 5}]}: the user's name, as JSON */
	{
		static const uint8_t only[] = {0xa1, 0x64, 'b', 'a', 's', 'e',
		                               0x81, 0xa1, 0x64, 'n', 'a', 'm',
		                               'e', 0x05};
		struct td_tgm_meta *m;
		uint8_t *out = NULL;
		size_t len = 0;

		cr_assert_eq(td_tgm_meta_new(only, sizeof(only), &m, NULL), 0);
		cr_expect_eq(td_tgm_meta_saved(m, 0, &out, &len), 0);
		free(out);
		td_tgm_meta_free(m);
	}
}

Test(tgm_io, naming_of_the_vectors)
{
	struct td_tgm_object o[4];
	struct td_tgm_frame mf;
	struct td_tgm_meta *m;
	char got[64];
	size_t len;
	uint8_t *b = vector("metadata_parity.tgm", &len);

	cr_assert_eq(objects(b, len, o, 4, &mf), 2);
	cr_assert_eq(td_tgm_meta_new(mf.payload, mf.payload_len, &m, NULL), 0);
	cr_assert_eq(td_tgm_meta_base_count(m), 2);
	td_tgm_object_name(m, 0, o[0].cbor, o[0].cbor_len, NULL, got,
	                   sizeof(got), NULL);
	cr_expect_str_eq(got, "2t");
	td_tgm_object_name(m, 1, o[1].cbor, o[1].cbor_len, NULL, got,
	                   sizeof(got), NULL);
	cr_expect_str_eq(got, "msl");
	{
		char *json;
		size_t jl;

		cr_assert_eq(td_json_tgm_attrs(m, 0, &json, &jl, NULL), 0);
		cr_expect_str_eq(json,
		                 "{\"big\":2147483648,\"count\":-5,\"flag\":"
		                 "true,\"level\":0,\"levels\":[1000,850,500],"
		                 "\"mars\":{\"class\":\"od\",\"stream\":"
		                 "\"oper\"},\"note\":\"\",\"only0\":\"x\","
		                 "\"ratio\":0.5,\"shortName\":\"2t\"}");
		cr_expect_eq(jl, strlen(json));
		free(json);
	}
	td_tgm_meta_free(m);
	free(b);

	b = vector("mars_metadata.tgm", &len);
	cr_assert_eq(objects(b, len, o, 4, &mf), 1);
	cr_assert_eq(td_tgm_meta_new(mf.payload, mf.payload_len, &m, NULL), 0);
	cr_expect_eq(td_tgm_object_name(m, 0, o[0].cbor, o[0].cbor_len, NULL,
	                                got, sizeof(got), NULL),
	             0);
	cr_expect_str_eq(got, "object_0");
	td_tgm_meta_free(m);
	free(b);
}

Test(tgm_io, sanitize_table)
{
	static const struct {
		const char *in, *want;
	} t[] = {
	        {"temperature/surface", "temperature_surface"},
	        {"a/b", "a_b"},
	        {"a\\b", "a_b"},
	        {"", "_"},
	        {"..", "v_._"}, /* spec: v_..; the daemon refuses ".." */
	        {".", "v_."},
	        {"__x", "v___x"},
	        {"zarr.json", "v_zarr.json"},
	        {"a\x01"
	         "b\x7f",
	         "a_b_"},
	        {"caf\xc3\xa9 au lait", "caf__au_lait"},
	        {"2t", "2t"},
	        {"x:y@z+1-2.3", "x:y@z+1-2.3"},
	        {"a...b", "a._.b"},
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		char out[64];

		td_tgm_name_sanitize(t[i].in, out, sizeof(out));
		cr_expect_str_eq(out, t[i].want, "in %s", t[i].in);
	}
	{
		char out[4];

		td_tgm_name_sanitize("abcdef", out, sizeof(out));
		cr_expect_str_eq(out, "abc");
	}
}

static void unique_case(const char *const *in, const char *const *want,
                        size_t n)
{
	char buf[8][32], *names[8];

	for (size_t i = 0; i < n; i++) {
		snprintf(buf[i], sizeof(buf[i]), "%s", in[i]);
		names[i] = buf[i];
	}
	cr_assert_eq(td_tgm_names_unique(names, n, sizeof(buf[0])), 0);
	for (size_t i = 0; i < n; i++)
		cr_expect_str_eq(names[i], want[i], "[%zu]", i);
}

Test(tgm_io, duplicate_names_get_suffixes_without_collisions)
{
	unique_case((const char *const[]){"x", "x", "x"},
	            (const char *const[]){"x", "x_1", "x_2"}, 3);
	unique_case((const char *const[]){"x", "x", "x_1"},
	            (const char *const[]){"x", "x_1", "x_1_1"}, 3);
	unique_case((const char *const[]){"x", "x_1", "x", "x"},
	            (const char *const[]){"x", "x_1", "x_2", "x_3"}, 4);
	unique_case((const char *const[]){"a", "b", "a", "b", "a"},
	            (const char *const[]){"a", "b", "a_1", "b_1", "a_2"}, 5);
	/* a candidate past cap - 1 bytes has its base cut for its suffix
	 * (a file name's 255 bytes); only a suffix that cannot fit fails */
	{
		char a[4] = "abc", b[4] = "abc", c[4] = "abc";
		char *n[3] = {a, b, c};

		cr_expect_eq(td_tgm_names_unique(n, 3, sizeof(a)), 0);
		cr_expect_str_eq(a, "abc");
		cr_expect_str_eq(b, "a_1");
		cr_expect_str_eq(c, "a_2");
		strcpy(b, "abc");
		cr_expect_eq(td_tgm_names_unique(n, 2, 3), -ENAMETOOLONG);
	}
	{
		/* never inside a UTF-8 character: "xé" is 78 c3 a9 */
		char a[8] = "x\xc3\xa9y", b[8] = "x\xc3\xa9y", *n[2] = {a, b};

		cr_expect_eq(td_tgm_names_unique(n, 2, 5), 0);
		cr_expect_str_eq(b, "x_1");
		strcpy(b, a);
		cr_expect_eq(td_tgm_names_unique(n, 2, 6), 0);
		cr_expect_str_eq(b, "x\xc3\xa9_1");
	}
}

/* The rule as first written (a walk over the names before each one),
 * to check the hashed one against: it must be the same function. */
static bool ref_taken(char **names, size_t upto, const char *s)
{
	for (size_t j = 0; j < upto; j++)
		if (!strcmp(names[j], s))
			return true;
	return false;
}

static void ref_unique(char **names, size_t n, size_t cap)
{
	char orig[300][32], cand[32];
	unsigned long ctr[300] = {0};

	for (size_t i = 0; i < n; i++) {
		unsigned long k = 0;

		snprintf(orig[i], sizeof(orig[i]), "%s", names[i]);
		if (!ref_taken(names, i, names[i]))
			continue;
		for (size_t j = 0; j < i; j++)
			if (!strcmp(orig[j], orig[i]) && ctr[j] > k)
				k = ctr[j];
		do
			snprintf(cand, cap, "%s_%lu", orig[i], ++k);
		while (ref_taken(names, i, cand));
		ctr[i] = k;
		strcpy(names[i], cand);
	}
}

/*
 * The hashed td_tgm_names_unique (the HTTP store runs it over every
 * exported name for each request) gives what the quadratic walk gave, on
 * sets dense in duplicates and in names that look like suffixed ones, with
 * any seed.
 */
Test(tgm_io, hashed_unique_names_are_the_walks)
{
	static const char *const pool[] = {"a", "a_1", "a_2", "a_1_1", "b",
	                                   "b_1", "a_3", "c", "a_10", "b_2"};
	unsigned seed = 7;

	for (int round = 0; round < 2000; round++) {
		char got[64][32], want[64][32], *g[64], *w[64];
		size_t n = 1 + (size_t)(rand_r(&seed) % 64);

		for (size_t i = 0; i < n; i++) {
			const char *p = pool[rand_r(&seed) % 10];

			snprintf(got[i], sizeof(got[i]), "%s", p);
			snprintf(want[i], sizeof(want[i]), "%s", p);
			g[i] = got[i];
			w[i] = want[i];
		}
		ref_unique(w, n, sizeof(want[0]));
		cr_assert_eq(td_tgm_names_unique_seeded(g, n, sizeof(got[0]),
		                                        (uint64_t)round * 977),
		             0);
		for (size_t i = 0; i < n; i++)
			cr_assert_str_eq(g[i], w[i], "round %d [%zu]", round,
			                 i);
	}
}

/*
 * The incremental set (load - makes a stream's names distinct a message
 * at a time with it, not by walking every name so far for each message
 * again) gives, over names added in batches of any size, what one walk
 * over all of them gives; its tables grow past any first size.
 */
Test(tgm_io, names_added_in_batches_are_the_walks)
{
	static const char *const pool[] = {"a", "a_1", "a_2", "a_1_1", "b",
	                                   "b_1", "a_3", "c", "a_10", "b_2"};
	static char got[300][32], want[300][32];
	char *g[300], *w[300];
	unsigned seed = 11;

	for (int round = 0; round < 300; round++) {
		size_t n = 1 + (size_t)(rand_r(&seed) % 300);
		struct td_tgm_names *ns;

		for (size_t i = 0; i < n; i++) {
			const char *p = pool[rand_r(&seed) % 10];

			snprintf(got[i], sizeof(got[i]), "%s", p);
			snprintf(want[i], sizeof(want[i]), "%s", p);
			g[i] = got[i];
			w[i] = want[i];
		}
		ref_unique(w, n, sizeof(want[0]));
		cr_assert_eq(td_tgm_names_new(sizeof(got[0]),
		                              (uint64_t)round * 31, &ns),
		             0);
		for (size_t at = 0; at < n;) {
			size_t k = 1 + (size_t)(rand_r(&seed) % 40);

			if (k > n - at)
				k = n - at;
			cr_assert_eq(td_tgm_names_add(ns, g + at, k), 0);
			at += k;
		}
		td_tgm_names_free(ns);
		for (size_t i = 0; i < n; i++)
			cr_assert_str_eq(g[i], w[i], "round %d [%zu]", round,
			                 i);
	}
}

/* ---- writing ---- */

Test(tgm_io, writer_frames_match_upstream_bytes)
{
	/* metadata_parity holds f32 [2,3] and f64 [4] of zeros, little-
	 * endian, written by upstream 0.23.0: our type-9 frames for the
	 * same tensors must be byte-identical (canonical CBOR, layout,
	 * flags, cbor_offset, hash) */
	static const uint8_t zeros[32];
	uint64_t s0[2] = {2, 3}, s1[1] = {4};
	struct td_tgm_enc_object ob[2] = {
	        {.dtype = TD_TGM_FLOAT32,
	         .ndim = 2,
	         .shape = s0,
	         .data = zeros,
	         .data_len = 24,
	         .name = "2t"},
	        {.dtype = TD_TGM_FLOAT64,
	         .ndim = 1,
	         .shape = s1,
	         .data = zeros,
	         .data_len = 32,
	         .name = "msl"},
	};
	struct td_tgm_walk it, up;
	struct td_tgm_frame fr, uf;
	struct td_tgm_header h;
	struct td_err e = {0};
	uint8_t *msg, *ref;
	size_t len, rlen;
	int types[8], n = 0, rc;

	ref = vector("metadata_parity.tgm", &rlen);
	cr_assert_eq(td_tgm_message_encode(ob, 2, "test", &msg, &len, &e), 0);
	cr_assert_eq(len % 8, 0);
	cr_assert_eq(td_tgm_header_decode(msg, len, &h, NULL), 0);
	cr_expect_eq(h.flags, 0x0095);
	cr_expect_eq(h.total_length, len);
	cr_assert_eq(td_tgm_walk_init(msg, len, &it, &e), 0);
	cr_expect_eq(it.first_footer_offset, it.postamble_offset);
	cr_expect_eq(it.postamble_total_length, len);
	cr_assert_eq(td_tgm_walk_init(ref, rlen, &up, &e), 0);
	while ((rc = td_tgm_walk_next(&it, &fr, &e)) == 1) {
		cr_assert_lt(n, 8);
		types[n++] = fr.type;
		cr_expect_eq(fr.version, 1);
		cr_expect(fr.has_hash);
		cr_expect_eq(td_tgm_frame_verify(&fr, NULL, &e), 0);
		cr_expect_eq(fr.offset % 8, 0);
		if (fr.type != TD_TGM_NTENSOR_FRAME)
			continue;
		do
			cr_assert_eq(td_tgm_walk_next(&up, &uf, &e), 1);
		while (uf.type != TD_TGM_NTENSOR_FRAME);
		cr_expect_eq(fr.length, uf.length);
		cr_expect(!memcmp(fr.payload - 16, uf.payload - 16, fr.length),
		          "type-9 frame @%llu differs from upstream's",
		          (unsigned long long)fr.offset);
	}
	cr_assert_eq(rc, 0, "%s", e.reason);
	cr_assert_eq(n, 5);
	cr_expect(types[0] == 1 && types[1] == 2 && types[2] == 3 &&
	          types[3] == 9 && types[4] == 9);
	free(ref);
	free(msg);
}

Test(tgm_io, writer_index_hashes_and_metadata_agree_with_the_frames)
{
	uint64_t shape[3] = {2, 1, 3};
	int16_t v[6] = {1, -2, 3, -4, 5, -6};
	const char *meta = "{\"name\":\"ignored\",\"units\":\"K\","
	                   "\"_reserved_\":7,\"n\":[1,2.5,null,true]}";
	struct td_tgm_enc_object ob[3] = {
	        {.dtype = TD_TGM_INT16,
	         .ndim = 3,
	         .shape = shape,
	         .data = v,
	         .data_len = 12,
	         .name = "a",
	         .meta = meta,
	         .meta_len = strlen(meta)},
	        {.dtype = TD_TGM_UINT8,
	         .ndim = 0,
	         .shape = NULL,
	         .data = v,
	         .data_len = 1,
	         .name = "scalar",
	         .meta = "plain text",
	         .meta_len = 10},
	        {.dtype = TD_TGM_UINT8,
	         .ndim = 1,
	         .shape = (uint64_t[]){0},
	         .data = NULL,
	         .data_len = 0,
	         .name = "empty",
	         .meta = "\xff\x00",
	         .meta_len = 2},
	};
	struct td_tgm_walk it;
	struct td_tgm_frame fr;
	struct td_tgm_meta *m = NULL;
	char idx[256] = "", hashes[256] = "", want[256], *json;
	char offs[128] = "", lens[128] = "", slots[128] = "";
	uint8_t *msg, *attrs;
	size_t len;
	int k = 0;

	cr_assert_eq(td_json_to_cbor(meta, strlen(meta), &attrs,
	                             &ob[0].attrs_len),
	             1);
	ob[0].attrs = attrs;
	cr_assert_eq(td_tgm_message_encode(ob, 3, "t", &msg, &len, NULL), 0);
	free(attrs);
	cr_assert_eq(td_tgm_walk_init(msg, len, &it, NULL), 0);
	while (td_tgm_walk_next(&it, &fr, NULL) == 1) {
		struct td_tgm_object o;

		if (fr.type == TD_TGM_HEADER_METADATA_FRAME)
			cr_assert_eq(td_tgm_meta_new(fr.payload, fr.payload_len,
			                             &m, NULL),
			             0);
		if (fr.type == TD_TGM_HEADER_INDEX_FRAME) {
			cr_assert_eq(td_json_from_cbor(fr.payload,
			                                 fr.payload_len, &json,
			                                 NULL, NULL),
			             0);
			snprintf(idx, sizeof(idx), "%s", json);
			free(json);
		}
		if (fr.type == TD_TGM_HEADER_HASH_FRAME) {
			cr_assert_eq(td_json_from_cbor(fr.payload,
			                                 fr.payload_len, &json,
			                                 NULL, NULL),
			             0);
			snprintf(hashes, sizeof(hashes), "%s", json);
			free(json);
		}
		if (fr.type != TD_TGM_NTENSOR_FRAME)
			continue;
		cr_assert_eq(td_tgm_object_decode(&fr, &o, NULL), 0);
		cr_expect_eq(
		        td_tgm_desc_check_import(&o.desc, o.data_len, NULL), 0,
		        "object %d", k);
		snprintf(offs + strlen(offs), sizeof(offs) - strlen(offs),
		         "%s%llu", k ? "," : "", (unsigned long long)fr.offset);
		snprintf(lens + strlen(lens), sizeof(lens) - strlen(lens),
		         "%s%llu", k ? "," : "", (unsigned long long)fr.length);
		snprintf(slots + strlen(slots), sizeof(slots) - strlen(slots),
		         "%s\"%016llx\"", k ? "," : "",
		         (unsigned long long)td__be64(fr.payload - 16 +
		                                      fr.length - 12));
		k++;
	}
	cr_assert_eq(k, 3);
	snprintf(want, sizeof(want), "{\"lengths\":[%s],\"offsets\":[%s]}",
	         lens, offs);
	cr_expect_str_eq(idx, want);
	snprintf(want, sizeof(want), "{\"algorithm\":\"xxh3\",\"hashes\":[%s]}",
	         slots);
	cr_expect_str_eq(hashes, want);
	cr_assert_not_null(m);
	cr_assert_eq(td_tgm_meta_base_count(m), 3);
	cr_assert_eq(td_json_tgm_attrs(m, 0, &json, NULL, NULL), 0);
	cr_expect_str_eq(json, "{\"n\":[1,2.5,null,true],\"name\":\"a\","
	                       "\"units\":\"K\"}");
	free(json);
	cr_assert_eq(td_json_tgm_attrs(m, 1, &json, NULL, NULL), 0);
	cr_expect_str_eq(json, "{\"name\":\"scalar\",\"tensord_meta\":"
	                       "\"plain text\"}");
	free(json);
	cr_assert_eq(td_json_tgm_attrs(m, 2, &json, NULL, NULL), 0);
	cr_expect_str_eq(json,
	                 "{\"name\":\"empty\",\"tensord_meta\":\"ff00\"}");
	free(json);
	cr_assert_eq(td_json_tgm_attrs(m, 9, &json, NULL, NULL), 0);
	cr_expect_str_eq(json, "{}");
	free(json);
	td_tgm_meta_free(m);
	free(msg);
}

Test(tgm_io, writer_refuses_unusable_objects)
{
	uint64_t shape[1] = {4};
	uint8_t d[4] = {0};
	struct td_tgm_enc_object ob = {.dtype = TD_TGM_UINT8,
	                               .ndim = 1,
	                               .shape = shape,
	                               .data = d,
	                               .data_len = 3};
	struct td_err e = {0};
	uint8_t *msg = NULL;
	size_t len;

	cr_expect_eq(td_tgm_message_encode(&ob, 1, "t", &msg, &len, &e),
	             -EINVAL);
	cr_expect_str_eq(e.field, "data");
	ob.data_len = 4;
	ob.dtype = TD_TGM_BITMASK;
	cr_expect_eq(td_tgm_message_encode(&ob, 1, "t", &msg, &len, &e),
	             -EINVAL);
	cr_expect_str_eq(e.field, "dtype");
	cr_expect_eq(td_tgm_message_encode(&ob, 0, "t", &msg, &len, &e),
	             -EINVAL);
	cr_expect_null(msg);
	/* attributes must be one well-formed CBOR map */
	ob.dtype = TD_TGM_UINT8;
	ob.attrs = (const uint8_t[]){0x81, 0x01}; /* [1] */
	ob.attrs_len = 2;
	cr_expect_eq(td_tgm_message_encode(&ob, 1, "t", &msg, &len, &e),
	             -EINVAL);
	cr_expect_str_eq(e.field, "attrs");
	ob.attrs = (const uint8_t[]){0xa1, 0x61}; /* {"?... truncated */
	cr_expect_eq(td_tgm_message_encode(&ob, 1, "t", &msg, &len, &e),
	             -EINVAL);
	cr_expect_str_eq(e.field, "attrs");
	cr_expect_null(msg);
	ob.attrs = (const uint8_t[]){0xa1, 0x61, 'k', 0x01}; /* {"k": 1} */
	ob.attrs_len = 4;
	cr_expect_eq(td_tgm_message_encode(&ob, 1, "t", &msg, &len, &e), 0);
	free(msg);
}

/* What a td_tgm_sink saw. */
struct grab {
	uint8_t *p;
	size_t len, cap;
	int begins;
	uint64_t total;
	size_t writes, fail_at; /* fail_at: that write (1-based) fails */
	size_t biggest_write;
	uint64_t done[4];       /* bytes of objs[i] said done */
	size_t unaligned_done;  /* interior pieces not chunk-aligned */
};

static int grab_begin(void *ctx, uint64_t total)
{
	struct grab *g = ctx;

	g->begins++;
	g->total = total;
	return g->fail_at == (size_t)-1 ? -EIO : 0;
}

static int grab_write(void *ctx, const void *p, size_t n)
{
	struct grab *g = ctx;

	cr_assert_eq(g->begins, 1, "a write before begin");
	cr_assert_gt(n, 0);
	if (++g->writes == g->fail_at)
		return -ENOSPC;
	if (n > g->biggest_write)
		g->biggest_write = n;
	if (g->len + n > g->cap) {
		g->cap = (g->len + n) * 2;
		g->p = realloc(g->p, g->cap);
		cr_assert(g->p);
	}
	memcpy(g->p + g->len, p, n);
	g->len += n;
	return 0;
}

static void grab_done(void *ctx, size_t obj, const void *p, size_t n)
{
	struct grab *g = ctx;

	cr_assert_lt(obj, 4);
	g->done[obj] += n;
	/* only a first piece may start off a chunk boundary, and only a
	 * last one end off one */
	if ((uintptr_t)p % TD_TGM_WRITE_CHUNK &&
	    n == TD_TGM_WRITE_CHUNK)
		g->unaligned_done++;
}

static struct td_tgm_sink grab_sink(struct grab *g)
{
	return (struct td_tgm_sink){grab_begin, grab_write, grab_done, g};
}

/*
 * td_tgm_message_write() (what tensorctl save writes with, streaming
 * from the tensors' mappings) gives the in-memory encoder's message byte
 * for byte: objects of several pieces at odd addresses, empty data,
 * attributes, opaque metadata, no name. Each object's data is said done
 * twice over (hashed, then written), never written in pieces larger
 * than TD_TGM_WRITE_CHUNK.
 */
Test(tgm_io, streamed_message_is_the_in_memory_encoders)
{
	size_t big = 2 * TD_TGM_WRITE_CHUNK + TD_TGM_WRITE_CHUNK / 3 + 5;
	uint8_t *raw = malloc(big + 1), *msg = NULL;
	uint64_t s_big[1] = {big}, s_f32[2] = {2, 3}, s_zero[2] = {0, 7},
	         s_u16[1] = {2}, x = 0x9e3779b97f4a7c15ull, len = 0;
	float f32[6] = {1.5f, -2.0f, NAN, INFINITY, 0.0f, 1e-30f};
	uint16_t u16[2] = {0xbeef, 7};
	static const uint8_t attrs[] = {0xa2, 0x61, 'k', 0x01, 0x64, 'n',
	                                'a',  'm',  'e',  0x61, 'x'};
	struct td_tgm_enc_object ob[4] = {
	        {.dtype = TD_TGM_FLOAT32, .ndim = 2, .shape = s_f32,
	         .data = f32, .data_len = sizeof(f32), .name = "f",
	         .attrs = attrs, .attrs_len = sizeof(attrs)},
	        {.dtype = TD_TGM_UINT8, .ndim = 1, .shape = s_big,
	         .data = raw + 1, .data_len = big, .name = "big",
	         .meta = "\xff opaque", .meta_len = 7},
	        {.dtype = TD_TGM_INT64, .ndim = 2, .shape = s_zero,
	         .data = NULL, .data_len = 0, .name = "empty"},
	        {.dtype = TD_TGM_UINT16, .ndim = 1, .shape = s_u16,
	         .data = u16, .data_len = sizeof(u16), .meta = "text",
	         .meta_len = 4},
	};
	struct td_err e = {0};
	size_t mlen = 0;

	cr_assert(raw);
	for (size_t i = 0; i < big; i++) { /* xorshift: no repeats */
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		raw[i + 1] = (uint8_t)(x >> 32);
	}
	for (size_t n = 1; n <= 4; n++) {
		struct grab g = {0};
		struct td_tgm_sink k = grab_sink(&g);

		cr_assert_eq(td_tgm_message_encode(ob, n, "v1", &msg, &mlen,
		                                   &e),
		             0, "%s", e.reason);
		cr_assert_eq(td_tgm_message_write(ob, n, "v1", &k, &len, &e),
		             0, "%s", e.reason);
		cr_expect_eq(g.begins, 1);
		cr_expect_eq(g.total, mlen);
		cr_expect_eq(len, mlen);
		cr_assert_eq(g.len, mlen, "%zu objects: %zu bytes, not %zu",
		             n, g.len, mlen);
		cr_expect(!memcmp(g.p, msg, mlen),
		          "%zu objects: the streamed bytes differ", n);
		cr_expect_leq(g.biggest_write, TD_TGM_WRITE_CHUNK);
		cr_expect_eq(g.unaligned_done, 0);
		for (size_t i = 0; i < n; i++)
			cr_expect_eq(g.done[i], 2 * ob[i].data_len,
			             "object %zu: %" PRIu64 " bytes done", i,
			             g.done[i]);
		free(g.p);
		free(msg);
		msg = NULL;
	}
	free(raw);
}

/* The sink's errors stop the write and come back as they were; an
 * unusable object is refused (as encode refuses it) before begin. */
Test(tgm_io, streamed_message_stops_at_the_sinks_error)
{
	uint64_t shape[1] = {4};
	uint8_t d[4] = {1, 2, 3, 4};
	struct td_tgm_enc_object ob = {.dtype = TD_TGM_UINT8, .ndim = 1,
	                               .shape = shape, .data = d,
	                               .data_len = 4, .name = "a"};
	struct td_err e = {0};
	struct grab g = {.fail_at = 3};
	struct td_tgm_sink k = grab_sink(&g);

	cr_expect_eq(td_tgm_message_write(&ob, 1, "t", &k, NULL, &e),
	             -ENOSPC);
	cr_expect_eq(g.writes, 3, "no write after the failed one");
	cr_expect_str_eq(e.reason, "the output refused the bytes");
	free(g.p);
	g = (struct grab){.fail_at = (size_t)-1};
	cr_expect_eq(td_tgm_message_write(&ob, 1, "t", &k, NULL, &e), -EIO);
	cr_expect_eq(g.writes, 0);
	g = (struct grab){0};
	ob.data_len = 3;
	cr_expect_eq(td_tgm_message_write(&ob, 1, "t", &k, NULL, &e),
	             -EINVAL);
	cr_expect_str_eq(e.field, "data");
	cr_expect_eq(g.begins, 0);
	ob.data_len = 4;
	cr_expect_eq(td_tgm_message_write(&ob, 1, "t", NULL, NULL, &e),
	             -EINVAL);
	cr_expect_str_eq(e.field, "sink");
}

/* ---- end to end: a real tensord, tensorctl as a separate program ---- */



/* tensorctl --socket SOCK ARGS... (testutil.h) */
#define ctl tu_tensorctl

static struct td_tensor *get(struct td_client *c, const char *name)
{
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	int rc = td_client_get(c, name, &t, &e);

	cr_assert_eq(rc, 0, "get %s: %d %s", name, rc, e.reason);
	return t;
}

static struct td_client *client(const struct tu_daemon *d)
{
	struct td_client *c = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_connect(d->sock, &c, &e), 0, "%s", e.reason);
	return c;
}

static void expect_meta_has(const struct td_tensor *t, const char *needle)
{
	size_t ml;
	const char *m = td_tensor_meta(t, &ml);
	char *s = strndup(m ? m : "", ml);

	cr_expect(strstr(s, needle), "meta %s lacks %s", s, needle);
	free(s);
}

Test(tgm_io, load_vectors_gives_documented_values)
{
	const char *dir = tu_vectors_path("tgm");
	struct tu_daemon d;
	struct td_client *c;
	struct td_tensor *t;
	char path[4200], *out;
	const float *f;
	const double *g;
	const int64_t *q;
	const uint8_t *u;

	if (!dir)
		cr_skip_test("upstream vectors folder absent: load of the "
		             "vectors not checked");
	tu_daemon_start(&d, "error");
	c = client(&d);

	snprintf(path, sizeof(path), "%s/simple_f32.tgm", dir);
	cr_assert_eq(ctl(&d, &out, "load", path, NULL), 0, "%s", out);
	free(out);
	t = get(c, "object_0");
	cr_expect_eq(td_tensor_dtype(t), TD_TENSOR_F32);
	cr_assert_eq(td_tensor_ndim(t), 1);
	cr_expect_eq(td_tensor_shape(t)[0], 4);
	cr_assert_eq(td_tensor_bytes(t), 16);
	f = td_tensor_plane_data(t, 0);
	for (int i = 0; i < 4; i++)
		cr_expect_eq(f[i], (float)(i + 1), "[%d] = %g", i, f[i]);
	expect_meta_has(t, "\"parameter\":\"pressure\"");
	expect_meta_has(t, "\"product\":\"efi\"");
	td_tensor_release(t);

	snprintf(path, sizeof(path), "%s/multi_object.tgm", dir);
	cr_assert_eq(ctl(&d, &out, "load", path, NULL), 0, "%s", out);
	free(out);
	t = get(c, "object_0");
	f = td_tensor_plane_data(t, 0);
	cr_expect_eq(td_tensor_bytes(t), 8);
	cr_expect(f[0] == 1.5f && f[1] == 2.5f);
	td_tensor_release(t);
	t = get(c, "object_1");
	cr_expect_eq(td_tensor_dtype(t), TD_TENSOR_I64);
	q = td_tensor_plane_data(t, 0);
	cr_expect(q[0] == 100 && q[1] == -200 && q[2] == 300);
	td_tensor_release(t);
	t = get(c, "object_2");
	cr_expect_eq(td_tensor_dtype(t), TD_TENSOR_U8);
	u = td_tensor_plane_data(t, 0);
	cr_assert_eq(td_tensor_bytes(t), 5);
	for (int i = 0; i < 5; i++)
		cr_expect_eq(u[i], 10 * (i + 1));
	expect_meta_has(t, "\"parameter\":\"humidity\"");
	td_tensor_release(t);

	snprintf(path, sizeof(path), "%s/mars_metadata.tgm", dir);
	cr_assert_eq(ctl(&d, &out, "load", path, NULL), 0, "%s", out);
	free(out);
	t = get(c, "object_0");
	cr_expect_eq(td_tensor_dtype(t), TD_TENSOR_F64);
	cr_assert_eq(td_tensor_ndim(t), 2);
	cr_expect(td_tensor_shape(t)[0] == 2 && td_tensor_shape(t)[1] == 3);
	g = td_tensor_plane_data(t, 0);
	for (int i = 0; i < 6; i++)
		cr_expect_eq(g[i], (double)(i + 1));
	expect_meta_has(t, "\"mars\":{\"class\":\"od\",\"step\":12,"
	                   "\"type\":\"fc\"}");
	td_tensor_release(t);

	snprintf(path, sizeof(path), "%s/metadata_parity.tgm", dir);
	cr_assert_eq(ctl(&d, &out, "load", path, NULL), 0, "%s", out);
	cr_expect(strstr(out, "2t version") && strstr(out, "msl version"), "%s",
	          out);
	free(out);

	/* the second message of multi_message: (3, 4) */
	snprintf(path, sizeof(path), "%s/multi_message.tgm", dir);
	cr_assert_eq(ctl(&d, &out, "load", path, "--message", "1", NULL), 0,
	             "%s", out);
	free(out);
	t = get(c, "object_0");
	f = td_tensor_plane_data(t, 0);
	cr_expect(f[0] == 3.0f && f[1] == 4.0f);
	td_tensor_release(t);
	cr_expect_eq(ctl(&d, &out, "load", path, "--message", "2", NULL), 1);
	cr_expect(strstr(out, "no message 2"), "%s", out);
	free(out);

	/* broken files: refused, nothing published */
	snprintf(path, sizeof(path), "%s/corrupt_bad_endf.tgm", dir);
	cr_expect_eq(ctl(&d, &out, "load", path, NULL), 1);
	cr_expect(strstr(out, "ENDF"), "%s", out);
	free(out);

	td_client_close(c);
	tu_daemon_stop(&d, false);
}

static void write_file(const char *path, const void *b, size_t n)
{
	FILE *f = fopen(path, "wb");

	cr_assert(f && fwrite(b, 1, n, f) == n);
	fclose(f);
}

Test(tgm_io, save_inspect_load_round_trip_is_byte_identical)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_error e = {0};
	char path[160], *out;
	float f32[6] = {1.5f, -2.0f, NAN, INFINITY, 0.0f, 1e-30f};
	int64_t i64[3] = {INT64_MIN, -1, INT64_MAX};
	uint16_t f16[2] = {0x3c00, 0x7bff};
	uint8_t u8[5] = {0, 1, 2, 254, 255};
	uint64_t s_f32[2] = {2, 3}, s_i64[1] = {3}, s_f16[3] = {1, 2, 1},
	         s_u8[1] = {5};
	const struct {
		const char *name;
		uint32_t dtype;
		uint32_t ndim;
		const uint64_t *shape;
		const void *data;
		size_t len;
		const char *meta;
	} t[] = {
	        {"rt_f32", TD_TENSOR_F32, 2, s_f32, f32, sizeof(f32),
	         "{\"units\":\"K\",\"level\":[1000,850]}"},
	        {"rt_i64", TD_TENSOR_I64, 1, s_i64, i64, sizeof(i64),
	         "not json"},
	        {"rt_f16", TD_TENSOR_F16, 3, s_f16, f16, sizeof(f16), NULL},
	        {"rt_u8", TD_TENSOR_U8, 1, s_u8, u8, sizeof(u8),
	         "\xff\xfe not UTF-8"},
	};
	size_t n = sizeof(t) / sizeof(t[0]);

	tu_daemon_start(&d, "error");
	c = client(&d);
	for (size_t i = 0; i < n; i++) {
		struct td_publish p = {.name = t[i].name,
		                       .dtype = t[i].dtype,
		                       .ndim = t[i].ndim,
		                       .shape = t[i].shape,
		                       .meta = t[i].meta,
		                       .meta_len = t[i].meta ? strlen(t[i].meta)
		                                             : 0};
		cr_assert_eq(
		        td_client_put(c, &p, t[i].data, t[i].len, NULL, &e), 0,
		        "%s", e.reason);
	}
	snprintf(path, sizeof(path), "%s/rt.tgm", d.dir);
	cr_assert_eq(ctl(&d, &out, "save", "rt_f32", "rt_i64", "rt_f16",
	                 "rt_u8", "-o", path, NULL),
	             0, "%s", out);
	free(out);

	/* our own reader: clean walk, every hash verified */
	cr_assert_eq(ctl(&d, &out, "inspect", path, NULL), 0, "%s", out);
	cr_expect(strstr(out, "end: clean"), "%s", out);
	cr_expect(!strstr(out, "MISMATCH"), "%s", out);
	cr_expect(strstr(out, "0x0095"), "%s", out);
	free(out);

	for (size_t i = 0; i < n; i++)
		cr_assert_eq(td_client_delete(c, t[i].name, NULL, &e), 0);
	cr_assert_eq(ctl(&d, &out, "load", path, NULL), 0, "%s", out);
	free(out);
	for (size_t i = 0; i < n; i++) {
		struct td_tensor *x = get(c, t[i].name);

		cr_expect_eq(td_tensor_dtype(x), t[i].dtype, "%s", t[i].name);
		cr_assert_eq(td_tensor_ndim(x), t[i].ndim);
		for (uint32_t k = 0; k < t[i].ndim; k++)
			cr_expect_eq(td_tensor_shape(x)[k], t[i].shape[k]);
		cr_assert_eq(td_tensor_bytes(x), t[i].len, "%s", t[i].name);
		cr_expect(!memcmp(td_tensor_plane_data(x, 0), t[i].data,
		                  t[i].len),
		          "%s: bytes differ after the round trip", t[i].name);
		td_tensor_release(x);
	}
	{
		struct td_tensor *x = get(c, "rt_f32");

		expect_meta_has(x, "\"level\":[1000,850]");
		expect_meta_has(x, "\"units\":\"K\"");
		expect_meta_has(x, "\"name\":\"rt_f32\"");
		td_tensor_release(x);
		/* metadata that is not a JSON object comes back as it was
		 * (it came back as {"name":...,"tensord_meta":...}), and
		 * none as none */
		for (size_t i = 1; i < n; i++) {
			size_t ml = 0;
			const void *m;

			x = get(c, t[i].name);
			m = td_tensor_meta(x, &ml);
			cr_expect_eq(ml, t[i].meta ? strlen(t[i].meta) : 0,
			             "%s: %zu bytes of metadata", t[i].name,
			             ml);
			cr_expect(!ml || (t[i].meta && ml == strlen(t[i].meta) &&
			                  !memcmp(m, t[i].meta, ml)),
			          "%s: %.*s",
			          t[i].name, (int)ml, (const char *)m);
			td_tensor_release(x);
		}
	}
	/* a second save of the reloaded tensors writes the same file */
	{
		char p2[160];
		uint8_t *a, *b;
		size_t la, lb;

		snprintf(p2, sizeof(p2), "%s/rt2.tgm", d.dir);
		cr_assert_eq(ctl(&d, &out, "save", "rt_f32", "rt_i64", "rt_f16",
		                 "rt_u8", "-o", p2, NULL),
		             0, "%s", out);
		free(out);
		a = tu_read_file(path, &la);
		b = tu_read_file(p2, &lb);
		cr_expect(la == lb && !memcmp(a, b, la),
		          "save is not stable across load");
		free(a);
		free(b);
		unlink(p2);
	}
	cr_expect_eq(ctl(&d, &out, "save", "rt_nope", "-o", path, NULL), 1);
	free(out);
	cr_expect_eq(ctl(&d, &out, "save", "rt_u8", NULL), 2, "no -o: usage");
	free(out);
	unlink(path);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

/* ---- a store larger than tensorctl's memory may grow ---- */

#define BIG_N 4
#define BIG_BYTES ((uint64_t)64 << 20)

/* Word k of big tensor i: distinct across tensors and offsets. */
static uint64_t big_word(unsigned i, uint64_t k)
{
	uint64_t z = ((uint64_t)i << 40) + k + 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Whether p holds big tensor i's bytes. */
static bool big_same(unsigned i, const void *p)
{
	const uint64_t *w = p;

	for (uint64_t k = 0; k < BIG_BYTES / 8; k++)
		if (w[k] != big_word(i, k))
			return false;
	return true;
}

/* stdout into stdout_path (NULL: log), stderr into log */
static struct tu_ctl_how ctl_how(const char *stdout_path, const char *log)
{
	return (struct tu_ctl_how){.out = stdout_path ? stdout_path : log,
				   .err = log};
}

/* $TD_TENSORCTL --socket SOCK ARGS... (NULL-ended) as ctl_how() says
 * (tu_ctl_run) */
#define ctl_peak(d, stdout_path, log, peak, ...)                              \
	tu_ctl_run((d)->sock, ctl_how((stdout_path), (log)), (peak),          \
		   __VA_ARGS__)

/* The log ctl_peak() wrote, for a failure's message. */
static char *log_text(const char *log)
{
	size_t n;
	uint8_t *b = tu_read_file(log, &n);
	char *s = strndup(b ? (const char *)b : "", b ? n : 0);

	free(b);
	return s;
}

/*
 * save of a store streams it: tensorctl's peak resident size (VmHWM,
 * mapped tensor pages included) stays under a quarter of the tensors'
 * bytes, for -o FILE and -o - alike, and the file loads back bit for bit
 * with load's peak under that bound too. save encoded the whole message
 * in memory (every tensor's bytes copied into its frame, then into the
 * message: three times the store, with the mappings); load kept each
 * object's whole buffer resident while it read it.
 */
Test(tgm_io, save_of_a_large_store_streams_in_bounded_memory)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_error e = {0};
	char path[160], piped[160], log[160], name[BIG_N][16], *out;
	uint64_t total = BIG_N * BIG_BYTES, shape = BIG_BYTES / 8, peak = 0;
	uint8_t *a, *b;
	size_t la, lb;
	int rc;

	tu_daemon_start(&d, "error");
	c = client(&d);
	for (unsigned i = 0; i < BIG_N; i++) {
		struct td_alloc *al;
		uint64_t size = BIG_BYTES, *w;
		struct td_publish p = {.name = name[i],
		                       .dtype = TD_TENSOR_U64,
		                       .ndim = 1,
		                       .shape = &shape};

		snprintf(name[i], sizeof(name[i]), "big_t%u", i);
		cr_assert_eq(td_client_alloc(c, 1, &size, &al, &e), 0, "%s",
		             e.reason);
		w = td_alloc_data(al, 0);
		for (uint64_t k = 0; k < BIG_BYTES / 8; k++)
			w[k] = big_word(i, k);
		cr_assert_eq(td_client_publish_alloc(c, al, &p, NULL, &e), 0,
		             "%s", e.reason);
	}
	snprintf(path, sizeof(path), "%s/big.tgm", d.dir);
	snprintf(piped, sizeof(piped), "%s/piped.tgm", d.dir);
	snprintf(log, sizeof(log), "%s/ctl.log", d.dir);

	rc = ctl_peak(&d, NULL, log, &peak, "save", "-o", path, NULL);
	out = log_text(log);
	cr_assert_eq(rc, 0, "%s", out);
	free(out);
	cr_expect(TU_BOUNDED(peak, total / 4),
	          "save -o FILE peaked at %" PRIu64 " MiB for %" PRIu64
	          " MiB of tensors",
	          peak >> 20, total >> 20);
	rc = ctl_peak(&d, piped, log, &peak, "save", "-o", "-", NULL);
	out = log_text(log);
	cr_assert_eq(rc, 0, "%s", out);
	free(out);
	cr_expect(TU_BOUNDED(peak, total / 4),
	          "save -o - peaked at %" PRIu64 " MiB for %" PRIu64
	          " MiB of tensors",
	          peak >> 20, total >> 20);
	a = tu_read_file(path, &la);
	b = tu_read_file(piped, &lb);
	cr_assert_gt(la, total);
	cr_expect(la == lb && !memcmp(a, b, la),
	          "-o - wrote other bytes than -o FILE");
	free(a);
	free(b);
	unlink(piped);

	cr_assert_eq(ctl(&d, &out, "inspect", path, NULL), 0, "%s", out);
	cr_expect(strstr(out, "end: clean"), "%s", out);
	cr_expect(!strstr(out, "MISMATCH"), "%s", out);
	free(out);
	for (unsigned i = 0; i < BIG_N; i++)
		cr_assert_eq(td_client_delete(c, name[i], NULL, &e), 0);
	rc = ctl_peak(&d, NULL, log, &peak, "load", path, NULL);
	out = log_text(log);
	cr_assert_eq(rc, 0, "%s", out);
	free(out);
	/* load reads each object into the daemon's buffer a piece at a
	 * time: not even one whole tensor is resident at once */
	cr_expect(TU_BOUNDED(peak, total / 4),
	          "load peaked at %" PRIu64 " MiB for %" PRIu64
	          " MiB of tensors",
	          peak >> 20, total >> 20);
	for (unsigned i = 0; i < BIG_N; i++) {
		struct td_tensor *x = get(c, name[i]);

		cr_assert_eq(td_tensor_bytes(x), BIG_BYTES, "%s", name[i]);
		cr_expect_eq(td_tensor_dtype(x), TD_TENSOR_U64);
		cr_expect(big_same(i, td_tensor_plane_data(x, 0)),
		          "%s: bytes differ after save and load", name[i]);
		td_tensor_release(x);
	}
	unlink(path);
	unlink(log);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

/*
 * JSON object metadata that load would not give back as such (no keys
 * but the writer's own, or tensord_meta alone) is saved whole: it came
 * back as "hi" for {"tensord_meta":"hi"}, and as none for {} and
 * {"name":"foo"}.
 */
Test(tgm_io, save_load_keeps_objects_load_would_misread)
{
	static const char *const metas[] = {
	        "{\"tensord_meta\":\"hi\"}", "{\"tensord_meta\":\"\"}",
	        "{}", "{\"name\":\"foo\"}",
	        "{\"_reserved_\":1,\"tensord_meta\":[1]}",
	};
	const size_t n = sizeof(metas) / sizeof(metas[0]);
	struct tu_daemon d;
	struct td_client *c;
	struct td_error e = {0};
	char path[160], names[5][24], *out;
	uint8_t byte = 7;
	uint64_t one = 1;

	tu_daemon_start(&d, "error");
	c = client(&d);
	for (size_t i = 0; i < n; i++) {
		struct td_publish p = {.name = names[i],
		                       .dtype = TD_TENSOR_U8,
		                       .ndim = 1,
		                       .shape = &one,
		                       .meta = metas[i],
		                       .meta_len = strlen(metas[i])};

		snprintf(names[i], sizeof(names[i]), "m%zu", i);
		cr_assert_eq(td_client_put(c, &p, &byte, 1, NULL, &e), 0,
		             "%s", e.reason);
	}
	snprintf(path, sizeof(path), "%s/m.tgm", d.dir);
	cr_assert_eq(ctl(&d, &out, "save", "-o", path, NULL), 0, "%s", out);
	free(out);
	cr_assert_eq(ctl(&d, &out, "load", path, "--prefix", "r.", NULL), 0,
	             "%s", out);
	free(out);
	for (size_t i = 0; i < n; i++) {
		char name[32];
		struct td_tensor *x;
		const void *m;
		size_t ml = 0;

		snprintf(name, sizeof(name), "r.m%zu", i);
		x = get(c, name);
		m = td_tensor_meta(x, &ml);
		cr_expect(ml == strlen(metas[i]) &&
		                  (!ml || !memcmp(m, metas[i], ml)),
		          "%s: %.*s, not %s", names[i], (int)ml,
		          ml ? (const char *)m : "", metas[i]);
		td_tensor_release(x);
	}
	unlink(path);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

Test(tgm_io, load_names_objects_by_the_chain_without_collisions)
{
	uint8_t one[1] = {42};
	uint64_t shape[1] = {1};
	const char *metas[] = {
	        "{\"name\":\"x\"}",
	        "{\"mars\":{\"param\":\"x\"}}",
	        "{\"shortName\":\"x_1\"}",
	        "{\"name\":\"a/b\"}",
	        "{\"bids\":{\"task\":\"rest\"},\"name\":\"n\"}",
	        "{}",
	};
	struct td_tgm_enc_object ob[6];
	struct tu_daemon d;
	struct td_entry *list;
	size_t count, len;
	char path[160], *out;
	uint8_t *msg, *attrs[6];
	struct td_client *c;

	for (int i = 0; i < 6; i++) {
		ob[i] = (struct td_tgm_enc_object){.dtype = TD_TGM_UINT8,
		                                   .ndim = 1,
		                                   .shape = shape,
		                                   .data = one,
		                                   .data_len = 1};
		cr_assert_eq(td_json_to_cbor(metas[i], strlen(metas[i]),
		                             &attrs[i], &ob[i].attrs_len),
		             1);
		ob[i].attrs = attrs[i];
	}
	cr_assert_eq(td_tgm_message_encode(ob, 6, "t", &msg, &len, NULL), 0);
	for (int i = 0; i < 6; i++)
		free(attrs[i]);
	tu_daemon_start(&d, "error");
	snprintf(path, sizeof(path), "%s/names.tgm", d.dir);
	write_file(path, msg, len);
	free(msg);
	cr_assert_eq(ctl(&d, &out, "load", path, NULL), 0, "%s", out);
	free(out);
	c = client(&d);
	cr_assert_eq(td_client_list(c, NULL, &list, &count, NULL), 0);
	{
		/* every name once (the daemon's order is not ours) */
		const char *want[] = {"x",   "x_1", "x_1_1",
		                      "a_b", "n",   "object_5"};
		char got[256] = "";

		for (size_t i = 0; i < count; i++)
			snprintf(got + strlen(got), sizeof(got) - strlen(got),
			         " %s ", list[i].name);
		cr_assert_eq(count, 6, "%s", got);
		for (size_t i = 0; i < 6; i++) {
			char w[64];

			snprintf(w, sizeof(w), " %s ", want[i]);
			cr_expect(strstr(got, w), "%s not in%s", want[i], got);
		}
	}
	td_entry_list_free(list, count);
	/* the variable key comes first when given */
	cr_assert_eq(ctl(&d, &out, "load", path, "--variable-key", "bids.task",
	                 NULL),
	             0, "%s", out);
	cr_expect(strstr(out, "rest version"), "%s", out);
	free(out);
	unlink(path);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

Test(tgm_io, load_refuses_codecs_naming_them_and_publishes_nothing)
{
	static const struct {
		const char *key, *value, *says;
	} t[] = {
	        {"compression", "zstd", "compression \"zstd\""},
	        {"filter", "shuffle", "filter \"shuffle\""},
	        {"encoding", "simple_packing", "encoding \"simple_packing\""},
	        {"dtype", "bfloat16", "dtype \"bfloat16\""},
	};
	struct tu_daemon d;
	struct td_client *c;
	struct td_entry *list;
	size_t count;

	tu_daemon_start(&d, "error");
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		uint8_t data[4] = {1, 2, 3, 4}, *m, *good, *both;
		size_t clen, glen, len, blen;
		uint8_t *cb = desc_u8(4, t[i].key, t[i].value, &clen);
		uint8_t *cg = desc_u8(4, NULL, NULL, &glen);
		char path[160], *out;

		/* a good object first, then the refused one: the good one
		 * must not be published either */
		good = msg_one(data, 4, cg, glen, &len);
		m = msg_one(data, 4, cb, clen, &blen);
		both = malloc(len + blen);
		/* splice: good's frame then bad's frame in one message */
		{
			size_t gf = len - 48, bf = blen - 48, o = 0;
			memcpy(both, good, 24 + gf);
			o = 24 + gf;
			memcpy(both + o, m + 24, bf);
			o += bf;
			td__put_be64(both + 16, o + 24);
			td__put_be64(both + o, o);
			td__put_be64(both + o + 8, o + 24);
			memcpy(both + o + 16, "39277777", 8);
			blen = o + 24;
		}
		snprintf(path, sizeof(path), "%s/bad.tgm", d.dir);
		write_file(path, both, blen);
		cr_expect_eq(ctl(&d, &out, "load", path, NULL), 1, "%s", out);
		cr_expect(strstr(out, t[i].says), "%s: %s", t[i].says, out);
		cr_expect(strstr(out, "object 1"), "%s", out);
		free(out);
		unlink(path);
		free(cb);
		free(cg);
		free(m);
		free(good);
		free(both);
	}
	c = client(&d);
	cr_assert_eq(td_client_list(c, NULL, &list, &count, NULL), 0);
	cr_expect_eq(count, 0, "refused loads published %zu tensor(s)", count);
	td_entry_list_free(list, count);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

Test(tgm_io, structured_map_keys_are_refused_not_escaped_exponentially)
{
	/* {{1: 1}: 1}: a map as a key */
	static const uint8_t one[] = {0xa1, 0xa1, 0x01, 0x01, 0x01};
	uint8_t deep[64];
	size_t n = 0, jl;
	char *json = NULL;
	struct td_err e = {0};

	cr_assert_eq(td_json_from_cbor(one, sizeof(one), &json, &jl, &e),
		     -EBADMSG);
	cr_assert(e.reason && strstr(e.reason, "map key"), "%s", e.reason);
	/*
	 * Keys nested in keys 20 deep: escaping each level into the next
	 * doubled the output per level (the fuzzer found a 642-byte input
	 * taking 10 s and gigabytes); now refused at once.
	 */
	for (int i = 0; i < 20; i++)
		deep[n++] = 0xa1;
	deep[n++] = 0x01;
	for (int i = 0; i < 20; i++)
		deep[n++] = 0x01;
	memset(&e, 0, sizeof(e));
	cr_assert_eq(td_json_from_cbor(deep, n, &json, &jl, &e), -EBADMSG);
	/* a scalar key still becomes its JSON text */
	static const uint8_t scalar[] = {0xa1, 0x01, 0x02};
	cr_assert_eq(td_json_from_cbor(scalar, sizeof(scalar), &json, &jl,
					 &e),
		     0);
	cr_assert_str_eq(json, "{\"1\":2}");
	free(json);
}

/* ---- save of several names: one instant (td_client_get_many) ---- */

#define PAIR_SIZE 64u

/* not cr_assert: the writer is a child process */
static void pair_failed(const char *what, const struct td_error *e)
{
	fprintf(stderr, "pair writer: %s: %s\n", what, e->reason);
	_exit(2);
}

/* pair/image and pair/label, every byte of both step % 251, in one
 * td_client_publish_many. */
static void pair_publish(struct td_client *c, unsigned long step)
{
	static const uint64_t shape[1] = {PAIR_SIZE};
	struct td_alloc *a[2] = {NULL, NULL};
	struct td_publish p[2] = {
	        {.name = "pair/image", .dtype = TD_TENSOR_U8, .ndim = 1,
	         .shape = shape},
	        {.name = "pair/label", .dtype = TD_TENSOR_U8, .ndim = 1,
	         .shape = shape},
	};
	struct td_error e = {0};
	uint64_t size = PAIR_SIZE;

	for (int i = 0; i < 2; i++) {
		if (td_client_alloc(c, 1, &size, &a[i], &e) < 0)
			pair_failed("alloc", &e);
		memset(td_alloc_data(a[i], 0), (int)(step % 251), PAIR_SIZE);
	}
	if (td_client_publish_many(c, 2, a, p, NULL, &e) < 0)
		pair_failed("publish_many", &e);
}

/* A child process that pair_publish()es step 1, 2, ... until killed: a
 * process of its own, since a loan's writable mapping that a fork of
 * this one (tensorctl's) inherits keeps the daemon from sealing it. */
static pid_t pair_writer(const struct tu_daemon *d)
{
	pid_t pid = fork();
	struct td_client *c = NULL;
	struct td_error e = {0};

	cr_assert_geq(pid, 0);
	if (pid > 0)
		return pid;
	if (td_client_connect(d->sock, &c, &e) < 0)
		pair_failed("connect", &e);
	for (unsigned long step = 1;; step++)
		pair_publish(c, step);
}

/* The byte of pair/image and of pair/label (each all one byte) in the
 * .tgm (objects in the order saved) or .hrry file at path. */
static void pair_bytes(const char *path, bool hrry, uint8_t out[2])
{
	static const char *const names[2] = {"pair/image", "pair/label"};
	struct td_tgm_object o[2];
	uint8_t data[2][PAIR_SIZE];
	size_t len;
	uint8_t *msg = tu_read_file(path, &len);

	if (hrry) {
		struct td_hrry_transport t;
		struct td_hrry_file_reader *r = NULL;
		struct td_hrry_err he = {0};

		cr_assert_eq(td_hrry_transport_mem(msg, len, &t), 0);
		cr_assert_eq(td_hrry_file_reader_new(&t, &r, &he), 0, "%s",
		             he.reason);
		for (int i = 0; i < 2; i++)
			cr_assert_eq(td_hrry_file_reader_read_tensor_into(
			                     r, names[i], strlen(names[i]),
			                     data[i], PAIR_SIZE, NULL, &he),
			             0, "%s: %s", names[i], he.reason);
		td_hrry_file_reader_free(&r);
	} else {
		cr_assert_eq(objects(msg, len, o, 2, NULL), 2);
		for (int i = 0; i < 2; i++) {
			cr_assert_eq(o[i].data_len, PAIR_SIZE);
			memcpy(data[i], o[i].data, PAIR_SIZE);
		}
	}
	for (int i = 0; i < 2; i++) {
		for (uint32_t k = 1; k < PAIR_SIZE; k++)
			cr_assert_eq(data[i][k], data[i][0], "%s", names[i]);
		out[i] = data[i][0];
	}
	free(msg);
}

/*
 * tensorctl save -o F image label while a writer publishes the pair as
 * one step over and over: every saved file's image and label are of one
 * step (the save leases both at one instant), which reading them one
 * by one did not give.
 */
Test(tgm_io, save_of_a_pair_holds_one_step)
{
	struct tu_daemon d;
	struct td_client *c;
	pid_t writer;
	int status;
	char path[2][200], *out = NULL;
	unsigned mixed[2] = {0, 0}, steps_seen = 0;
	int last = -1;

	tu_daemon_start(&d, "error");
	snprintf(path[0], sizeof(path[0]), "%s/pair.tgm", d.dir);
	snprintf(path[1], sizeof(path[1]), "%s/pair.hrry", d.dir);
	c = client(&d);
	pair_publish(c, 0); /* both there before the first save */
	td_client_close(c);
	writer = pair_writer(&d);
	for (int i = 0; i < 120; i++) {
		bool hrry = i % 2;
		uint8_t b[2];
		int rc = ctl(&d, &out, "save", "-o", path[hrry], "pair/image",
		             "pair/label", NULL);

		cr_assert_eq(rc, 0, "%s", out ? out : "");
		free(out);
		out = NULL;
		pair_bytes(path[hrry], hrry, b);
		mixed[hrry] += b[0] != b[1];
		steps_seen += b[0] != last;
		last = b[0];
	}
	kill(writer, SIGKILL);
	cr_assert_eq(waitpid(writer, &status, 0), writer);
	cr_assert(WIFSIGNALED(status), "the writer failed: %d", status);
	cr_assert_eq(mixed[0], 0, "%u of 60 .tgm saves paired two steps",
	             mixed[0]);
	cr_assert_eq(mixed[1], 0, "%u of 60 .hrry saves paired two steps",
	             mixed[1]);
	/* the writer ran meanwhile: the saves were of several steps */
	cr_assert_gt(steps_seen, 1);
	tu_daemon_stop(&d, false);
}
