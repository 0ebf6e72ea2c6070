/* SPDX-License-Identifier: MIT */
/*
 * Tensogram wire-v3 introspection (proto/tgm.c) against
 * ../shared/specs/tensogram.md §12-§14: the upstream vectors and their
 * expected.json (read in place, never copied), tensorctl inspect --json on
 * the same files, and messages built here for every malformed condition of
 * the envelope (§13.1) and the frame walk (§13.2).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include <json-c/json.h>

#include "bytes.h"
#include "testutil.h"
#include "tgm.h"

TestSuite(tgm, .timeout = TU_TEST_TIMEOUT_S);

/* ------------------------------------------------------------------ */
/* A tiny CBOR writer (definite lengths, shortest heads) for the bodies */

struct cb {
	uint8_t b[512];
	size_t len;
};

static void cb_byte(struct cb *c, uint8_t v)
{
	cr_assert(c->len < sizeof(c->b));
	c->b[c->len++] = v;
}

static void cb_head(struct cb *c, unsigned major, uint64_t v)
{
	uint8_t m = (uint8_t)(major << 5);
	int n;

	if (v < 24) {
		cb_byte(c, m | (uint8_t)v);
		return;
	}
	if (v <= 0xff)
		cb_byte(c, m | 24), n = 1;
	else if (v <= 0xffff)
		cb_byte(c, m | 25), n = 2;
	else if (v <= 0xffffffff)
		cb_byte(c, m | 26), n = 4;
	else
		cb_byte(c, m | 27), n = 8;
	for (int i = n - 1; i >= 0; i--)
		cb_byte(c, (uint8_t)(v >> (8 * i)));
}

static void cb_text(struct cb *c, const char *s)
{
	size_t n = strlen(s);

	cb_head(c, 3, n);
	for (size_t i = 0; i < n; i++)
		cb_byte(c, (uint8_t)s[i]);
}

/* ------------------------------------------------------------------ */
/* Message builder: writes wire-v3 messages the way upstream encoders do */

#define MB_CAP 8192
#define MB_MAX_FRAMES 32

struct mb {
	uint8_t b[MB_CAP];
	size_t len;
	size_t start; /* this message's first byte in b */
	size_t fr_off[MB_MAX_FRAMES]; /* message-relative frame offsets */
	uint16_t fr_type[MB_MAX_FRAMES];
	size_t fr_len[MB_MAX_FRAMES];
	int fr_count;
};

static void mb_put(struct mb *m, const void *p, size_t n)
{
	cr_assert(m->len + n <= MB_CAP, "builder overflow");
	memcpy(m->b + m->len, p, n);
	m->len += n;
}

static void mb_be16(struct mb *m, uint16_t v)
{
	uint8_t t[2];
	td__put_be16(t, v);
	mb_put(m, t, 2);
}

static void mb_be64(struct mb *m, uint64_t v)
{
	uint8_t t[8];
	td__put_be64(t, v);
	mb_put(m, t, 8);
}

/* Zero padding to 8, relative to the message start (§8). */
static void mb_pad8(struct mb *m)
{
	while ((m->len - m->start) % 8)
		mb_put(m, "", 1);
}

static void mb_preamble(struct mb *m, uint16_t flags, uint64_t total)
{
	m->start = m->len;
	m->fr_count = 0;
	mb_put(m, "TENSOGRM", 8);
	mb_be16(m, 3);
	mb_be16(m, flags);
	mb_put(m, "\0\0\0\0", 4);
	mb_be64(m, total);
}

/* A lone preamble (junk for scan): no frames, no postamble follow. */
static void mb_bare_preamble(struct mb *m, uint16_t version, uint64_t total)
{
	mb_put(m, "TENSOGRM", 8);
	mb_be16(m, version);
	mb_be16(m, 0);
	mb_put(m, "\0\0\0\0", 4);
	mb_be64(m, total);
}

/*
 * One frame with body[0, n) between header and footer; type 9 gets
 * cbor_offset (frame-relative) in its footer. The slot holds the XXH3 of
 * the body when HASH_PRESENT is set, else 0. Returns the frame offset.
 */
static size_t mb_frame(struct mb *m, uint16_t type, uint16_t flags,
		       const uint8_t *body, size_t n, uint64_t cbor_offset)
{
	size_t at = m->len - m->start;
	size_t footer = type == 9 ? 20 : 12;
	uint64_t h = flags & TD_TGM_FRAME_HASH_PRESENT ? XXH3_64bits(body, n)
						       : 0;

	mb_put(m, "FR", 2);
	mb_be16(m, type);
	mb_be16(m, 1);
	mb_be16(m, flags);
	mb_be64(m, 16 + n + footer);
	mb_put(m, body, n);
	if (type == 9)
		mb_be64(m, cbor_offset);
	mb_be64(m, h);
	mb_put(m, "ENDF", 4);
	cr_assert(m->fr_count < MB_MAX_FRAMES);
	m->fr_off[m->fr_count] = at;
	m->fr_type[m->fr_count] = type;
	m->fr_len[m->fr_count] = 16 + n + footer;
	m->fr_count++;
	mb_pad8(m);
	return at;
}

/* Postamble; total 0 leaves both copies unknown (streaming). */
static void mb_postamble(struct mb *m, uint64_t first_footer, bool backfill)
{
	uint64_t total = m->len - m->start + 24;

	mb_be64(m, first_footer);
	mb_be64(m, backfill ? total : 0);
	mb_put(m, "39277777", 8);
	if (backfill)
		td__put_be64(m->b + m->start + 16, total);
}

/* Object k: float32 little-endian [k+2] = k, k+1, ... */
static size_t object_body(int k, uint8_t *body, uint64_t *cbor_offset)
{
	uint32_t count = (uint32_t)k + 2;
	struct cb c = { .len = 0 };
	size_t n = 0;

	for (uint32_t i = 0; i < count; i++, n += 4)
		td__put_lef32(body + n, (float)(k + (int)i));
	*cbor_offset = 16 + n;
	/* canonical key order: shorter first, then bytewise */
	cb_head(&c, 5, 9);
	cb_text(&c, "ndim"), cb_head(&c, 0, 1);
	cb_text(&c, "type"), cb_text(&c, "ntensor");
	cb_text(&c, "dtype"), cb_text(&c, "float32");
	cb_text(&c, "shape"), cb_head(&c, 4, 1), cb_head(&c, 0, count);
	cb_text(&c, "filter"), cb_text(&c, "none");
	cb_text(&c, "strides"), cb_head(&c, 4, 1), cb_head(&c, 0, 1);
	cb_text(&c, "encoding"), cb_text(&c, "none");
	cb_text(&c, "byte_order"), cb_text(&c, "little");
	cb_text(&c, "compression"), cb_text(&c, "none");
	memcpy(body + n, c.b, c.len);
	return n + c.len;
}

static void index_body(struct cb *c, const uint64_t *off, const uint64_t *len,
		       int nobj)
{
	c->len = 0;
	cb_head(c, 5, 2);
	cb_text(c, "lengths"), cb_head(c, 4, (uint64_t)nobj);
	for (int i = 0; i < nobj; i++)
		cb_head(c, 0, len[i]);
	cb_text(c, "offsets"), cb_head(c, 4, (uint64_t)nobj);
	for (int i = 0; i < nobj; i++)
		cb_head(c, 0, off[i]);
}

static void hash_body(struct cb *c, int nobj)
{
	c->len = 0;
	cb_head(c, 5, 2);
	cb_text(c, "hashes"), cb_head(c, 4, (uint64_t)nobj);
	for (int i = 0; i < nobj; i++) {
		uint8_t body[256];
		uint64_t co;
		size_t n = object_body(i, body, &co);
		char hex[17];

		snprintf(hex, sizeof(hex), "%016llx",
			 (unsigned long long)XXH3_64bits(body, n));
		cb_text(c, hex);
	}
	cb_text(c, "algorithm"), cb_text(c, "xxh3");
}

#define MAX_OBJ 4

/*
 * Buffered layout (§10, §16): 1, 2, [3], 9..., postamble; exact flags.
 * The index holds the type-9 offsets, which depend on the index's own
 * size: build until the guess is stable (twice at most in practice).
 */
static void mb_buffered(struct mb *m, int nobj, bool hashed)
{
	uint64_t off[MAX_OBJ] = { 0 }, len[MAX_OBJ] = { 0 };
	uint16_t ff = hashed ? TD_TGM_FRAME_HASH_PRESENT : 0;
	size_t start = m->len;
	static const uint8_t empty_map = 0xa0;

	cr_assert(nobj <= MAX_OBJ);
	for (int pass = 0;; pass++) {
		struct cb c;
		bool stable = true;

		cr_assert(pass < 8);
		m->len = start;
		mb_preamble(m, hashed ? 0x0095 : 0x0005, 0);
		mb_frame(m, 1, ff, &empty_map, 1, 0);
		index_body(&c, off, len, nobj);
		mb_frame(m, 2, ff, c.b, c.len, 0);
		if (hashed) {
			hash_body(&c, nobj);
			mb_frame(m, 3, ff, c.b, c.len, 0);
		}
		for (int i = 0; i < nobj; i++) {
			uint8_t body[256];
			uint64_t co;
			size_t n = object_body(i, body, &co);
			size_t at = mb_frame(m, 9, ff | 1, body, n, co);

			stable &= off[i] == at && len[i] == 16 + n + 20;
			off[i] = at;
			len[i] = 16 + n + 20;
		}
		mb_postamble(m, m->len - m->start, true);
		if (stable)
			return;
	}
}

/*
 * Streaming layout (§10): total_length 0, 1, ([8], 9)..., 7, [5], 6,
 * postamble pointing at the type-7 frame; back-filled when asked.
 */
static void mb_streaming(struct mb *m, int nobj, bool hashed, bool preceder,
			 bool backfill)
{
	uint64_t off[MAX_OBJ], len[MAX_OBJ];
	uint16_t ff = hashed ? TD_TGM_FRAME_HASH_PRESENT : 0;
	static const uint8_t empty_map = 0xa0;
	struct cb c;
	size_t ffo;

	cr_assert(nobj <= MAX_OBJ);
	mb_preamble(m, (uint16_t)(0x004b | (hashed ? 0x00a0 : 0)), 0);
	mb_frame(m, 1, ff, &empty_map, 1, 0);
	for (int i = 0; i < nobj; i++) {
		uint8_t body[256];
		uint64_t co;
		size_t n = object_body(i, body, &co);

		if (preceder)
			mb_frame(m, 8, ff, &empty_map, 1, 0);
		off[i] = mb_frame(m, 9, ff | 1, body, n, co);
		len[i] = 16 + n + 20;
	}
	ffo = mb_frame(m, 7, ff, &empty_map, 1, 0);
	if (hashed) {
		hash_body(&c, nobj);
		mb_frame(m, 5, ff, c.b, c.len, 0);
	}
	index_body(&c, off, len, nobj);
	mb_frame(m, 6, ff, c.b, c.len, 0);
	mb_postamble(m, ffo, backfill);
}

/* The message at m->start as an exact-size heap copy (ASan sees overreads) */
static uint8_t *dup_exact(const uint8_t *p, size_t n)
{
	uint8_t *d = malloc(n ? n : 1);

	cr_assert(d);
	memcpy(d, p, n);
	return d;
}

/* ------------------------------------------------------------------ */
/* Walk helpers */

/*
 * Walk buf and require: init ok, exactly want_frames frames matching the
 * builder's record, then want_rc (0 clean, < 0 error at want_off), and
 * the same result again on the next two steps.
 */
static void walk_expect(const struct mb *m, const uint8_t *msg, size_t len,
			int want_frames, int want_rc, uint64_t want_off)
{
	struct td_tgm_walk it;
	struct td_tgm_frame f;
	struct td_err e;
	int rc, n = 0;

	rc = td_tgm_walk_init(msg, len, &it, &e);
	cr_assert_eq(rc, 0, "init: %d %s", rc, e.reason);
	while ((rc = td_tgm_walk_next(&it, &f, &e)) == 1) {
		cr_assert(n < want_frames, "frame %d beyond the %d expected", n,
			  want_frames);
		cr_assert_eq(f.offset, m->fr_off[n]);
		cr_assert_eq(f.type, m->fr_type[n]);
		cr_assert_eq(f.length, m->fr_len[n]);
		cr_assert_eq(f.payload, msg + f.offset + 16);
		n++;
	}
	cr_assert_eq(n, want_frames, "%d frames before the end, want %d", n,
		     want_frames);
	cr_assert_eq(rc, want_rc, "end %d (%s), want %d", rc,
		     rc < 0 ? e.reason : "clean", want_rc);
	if (rc < 0)
		cr_assert_eq(e.offset, want_off, "error offset %llu want %llu",
			     (unsigned long long)e.offset,
			     (unsigned long long)want_off);
	for (int k = 0; k < 2; k++) {
		struct td_err e2 = { 0 };
		cr_assert_eq(td_tgm_walk_next(&it, &f, &e2), want_rc,
			     "the end is not sticky");
		if (want_rc < 0)
			cr_assert_eq(e2.offset, want_off);
	}
}

/* ------------------------------------------------------------------ */
/* Constants and the header */

Test(tgm, wire_constants_pinned)
{
	cr_assert_eq(TD_TGM_PREAMBLE_LEN, 24);
	cr_assert_eq(TD_TGM_POSTAMBLE_LEN, 24);
	cr_assert_eq(TD_TGM_FRAME_HEADER_LEN, 16);
	cr_assert_eq(TD_TGM_MIN_MESSAGE_LEN, 48);
	cr_assert_eq(TD_TGM_FOOTER_LEN, 12);
	cr_assert_eq(TD_TGM_NTENSOR_FOOTER_LEN, 20);
	cr_assert_eq(TD_TGM_FRAME_HASH_PRESENT, 2);
	cr_assert_eq(TD_TGM_FRAME_CBOR_AFTER_PAYLOAD, 1);
	cr_assert_str_eq(td_tgm_frame_type_name(9), "NTensorFrame");
	cr_assert_str_eq(td_tgm_frame_type_name(5), "FooterHash");
	cr_assert_null(td_tgm_frame_type_name(4));
	cr_assert_null(td_tgm_frame_type_name(0));
	cr_assert_null(td_tgm_frame_type_name(10));
	cr_assert_str_eq(td_tgm_predicate_name(7), "has_hashes_present");
	cr_assert_null(td_tgm_predicate_name(8));
}

Test(tgm, header_predicates_follow_their_own_bit)
{
	uint8_t p[24] = "TENSOGRM\0\3";

	for (unsigned b = 0; b < 16; b++) {
		struct td_tgm_header h;
		bool want[8] = { false };

		td__put_be16(p + 10, (uint16_t)(1u << b));
		cr_assert_eq(td_tgm_header_decode(p, 24, &h, NULL), 0);
		cr_assert_eq(h.flags, 1u << b);
		if (b < 8)
			want[b] = true;
		cr_assert_eq(h.has_header_metadata, want[0]);
		cr_assert_eq(h.has_footer_metadata, want[1]);
		cr_assert_eq(h.has_header_index, want[2]);
		cr_assert_eq(h.has_footer_index, want[3]);
		cr_assert_eq(h.has_header_hashes, want[4]);
		cr_assert_eq(h.has_footer_hashes, want[5]);
		cr_assert_eq(h.has_preceder_metadata, want[6]);
		cr_assert_eq(h.has_hashes_present, want[7]);
	}
}

Test(tgm, header_reads_only_the_preamble)
{
	struct mb m = { .len = 0 };
	struct td_tgm_header h;
	struct td_err e;
	uint8_t *p;

	mb_buffered(&m, 1, true);
	/* exactly 24 bytes of a 200+ byte message: still a header */
	p = dup_exact(m.b, 24);
	cr_assert_eq(td_tgm_header_decode(p, 24, &h, &e), 0);
	cr_assert_eq(h.version, 3);
	cr_assert_eq(h.flags, 0x0095);
	cr_assert_eq(h.total_length, m.len);
	cr_assert(h.has_header_index && h.has_hashes_present);
	cr_assert(!h.has_footer_index && !h.has_preceder_metadata);
	free(p);
	for (size_t n = 0; n < 24; n++) {
		p = dup_exact(m.b, n);
		cr_assert_eq(td_tgm_header_decode(p, n, &h, &e), -ENODATA);
		cr_assert_eq(e.kind, TD_ERR_TRUNCATED);
		free(p);
	}
}

Test(tgm, header_refuses_bad_magic_and_other_versions)
{
	struct mb m = { .len = 0 };
	struct td_tgm_header h = { .version = 77 };
	struct td_err e;

	mb_buffered(&m, 1, false);
	m.b[3] = 'X';
	cr_assert_eq(td_tgm_header_decode(m.b, m.len, &h, &e), -EBADMSG);
	cr_assert_eq(h.version, 77, "output written on failure");
	m.b[3] = 'S';
	for (unsigned v = 0; v < 8; v++) {
		td__put_be16(m.b + 8, (uint16_t)v);
		int rc = td_tgm_header_decode(m.b, m.len, &h, &e);
		cr_assert_eq(rc, v == 3 ? 0 : -ENOTSUP, "version %u", v);
		if (v != 3)
			cr_assert_eq(e.value, v);
	}
}

/* ------------------------------------------------------------------ */
/* Built messages walk clean */

Test(tgm, buffered_message_walks_clean_with_exact_records)
{
	struct mb m = { .len = 0 };
	struct td_tgm_walk it;
	struct td_tgm_frame f;
	int n = 0;

	mb_buffered(&m, 3, true);
	cr_assert_eq(td_tgm_walk_init(m.b, m.len, &it, NULL), 0);
	cr_assert_eq(it.length, m.len);
	cr_assert_eq(it.postamble_offset, m.len - 24);
	cr_assert_eq(it.first_footer_offset, m.len - 24);
	cr_assert_eq(it.postamble_total_length, m.len);
	while (td_tgm_walk_next(&it, &f, NULL) == 1) {
		size_t footer = f.type == 9 ? 20 : 12;
		uint64_t d;

		cr_assert_eq(f.offset % 8, 0, "writer pads to 8");
		cr_assert_eq(f.version, 1);
		cr_assert(f.has_hash);
		cr_assert_eq(f.payload_len, f.length - 16 - footer);
		cr_assert_eq(td_tgm_frame_verify(&f, &d, NULL), 0);
		cr_assert_eq(d, XXH3_64bits(f.payload, f.payload_len));
		if (f.type == 9) {
			cr_assert_eq(f.flags, 3);
			cr_assert(f.cbor_after_payload);
			/* object k holds k+2 float32 values */
			cr_assert_eq(f.cbor_offset,
				     (uint64_t)(16 + 4 * (n - 3 + 2)));
		} else {
			cr_assert_eq(f.flags, 2);
			cr_assert_eq(f.cbor_offset, 0);
		}
		n++;
	}
	cr_assert_eq(n, 6);
	walk_expect(&m, m.b, m.len, 6, 0, 0);
}

Test(tgm, unhashed_frames_report_no_hash_and_refuse_verification)
{
	struct mb m = { .len = 0 };
	struct td_tgm_walk it;
	struct td_tgm_frame f;
	struct td_err e;

	mb_buffered(&m, 1, false);
	cr_assert_eq(td_tgm_walk_init(m.b, m.len, &it, NULL), 0);
	while (td_tgm_walk_next(&it, &f, NULL) == 1) {
		cr_assert(!f.has_hash);
		cr_assert_eq(td_tgm_frame_verify(&f, NULL, &e), -EINVAL);
		cr_assert_eq(e.kind, TD_ERR_INVALID_ARGUMENT);
	}
}

Test(tgm, hash_mismatch_found_by_verify_not_by_walk)
{
	struct mb m = { .len = 0 };
	struct td_tgm_walk it;
	struct td_tgm_frame f;
	struct td_err e;
	int n = 0;

	mb_buffered(&m, 2, true);
	/* one data byte of the last object */
	m.b[m.fr_off[4] + 16] ^= 0x40;
	cr_assert_eq(td_tgm_walk_init(m.b, m.len, &it, NULL), 0);
	while (td_tgm_walk_next(&it, &f, NULL) == 1) {
		int rc = td_tgm_frame_verify(&f, NULL, &e);
		cr_assert_eq(rc, n == 4 ? -EBADMSG : 0, "frame %d", n);
		if (rc)
			cr_assert_eq(e.offset, f.offset + f.length - 12);
		n++;
	}
	cr_assert_eq(n, 5, "rule 7: the walk never verifies hashes");
}

Test(tgm, streaming_message_ends_at_first_end_magic)
{
	struct mb m = { .len = 0 };
	struct td_tgm_header h;
	struct td_tgm_walk it;
	size_t one;

	mb_streaming(&m, 2, true, true, false);
	one = m.len;
	/* a second message right behind: the walk must stop at the first */
	mb_buffered(&m, 1, true);
	cr_assert_eq(td_tgm_header_decode(m.b, m.len, &h, NULL), 0);
	cr_assert_eq(h.total_length, 0);
	cr_assert(h.has_preceder_metadata && h.has_footer_index);
	cr_assert(!h.has_header_index);
	cr_assert_eq(td_tgm_walk_init(m.b, m.len, &it, NULL), 0);
	cr_assert_eq(it.length, one);
	cr_assert_eq(it.postamble_total_length, 0);
	m.start = 0;
	/* rebuild the frame record of message 1 for walk_expect */
	{
		struct mb m1 = { .len = 0 };
		mb_streaming(&m1, 2, true, true, false);
		cr_assert_eq(memcmp(m1.b, m.b, one), 0);
		cr_assert_eq(it.first_footer_offset, m1.fr_off[5]);
		walk_expect(&m1, m.b, m.len, 8, 0, 0);
	}
}

Test(tgm, backfilled_streaming_message_walks_clean_with_footer_order_7_5_6)
{
	struct mb m = { .len = 0 };

	mb_streaming(&m, 1, true, false, true);
	cr_assert_eq(m.fr_type[2], 7);
	cr_assert_eq(m.fr_type[3], 5);
	cr_assert_eq(m.fr_type[4], 6);
	cr_assert_eq(td__be64(m.b + 16), m.len);
	walk_expect(&m, m.b, m.len, 5, 0, 0);
}

Test(tgm, longer_buffer_walks_only_the_first_message)
{
	struct mb m = { .len = 0 }, m1 = { .len = 0 };

	mb_buffered(&m1, 1, true);
	mb_buffered(&m, 1, true);
	mb_buffered(&m, 2, false);
	walk_expect(&m1, m.b, m.len, 4, 0, 0);
}

Test(tgm, extra_zero_padding_is_stepped_over)
{
	struct mb m = { .len = 0 };
	static const uint8_t body = 0xa0;

	mb_preamble(&m, 0x0001, 0);
	mb_frame(&m, 1, 0, &body, 1, 0);
	mb_put(&m, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);
	mb_frame(&m, 7, 0, &body, 1, 0);
	mb_postamble(&m, m.fr_off[1], true);
	walk_expect(&m, m.b, m.len, 2, 0, 0);
}

Test(tgm, zero_frame_message_ends_clean_at_once)
{
	struct mb m = { .len = 0 };
	struct td_tgm_walk it;
	struct td_tgm_frame f;

	mb_preamble(&m, 0, 0);
	mb_postamble(&m, 24, true);
	cr_assert_eq(m.len, 48);
	cr_assert_eq(td_tgm_walk_init(m.b, m.len, &it, NULL), 0);
	cr_assert_eq(td_tgm_walk_next(&it, &f, NULL), 0);
	cr_assert_eq(td_tgm_walk_next(&it, &f, NULL), 0);
}

Test(tgm, order_within_a_phase_is_free)
{
	struct mb m = { .len = 0 };
	static const uint8_t body = 0xa0;
	static const uint16_t types[] = { 3, 1, 2, 2, 9, 8, 9, 9, 6, 7, 5, 7 };

	mb_preamble(&m, 0, 0);
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		uint8_t d[40] = { 0xa0 };
		if (types[i] == 9)
			mb_frame(&m, 9, 1, d, 8, 20);
		else
			mb_frame(&m, types[i], 0, &body, 1, 0);
	}
	mb_postamble(&m, 24, true);
	walk_expect(&m, m.b, m.len, 12, 0, 0);
}

/* ------------------------------------------------------------------ */
/* §13.1 envelope: creation fails */

static int init_rc(const uint8_t *p, size_t n, struct td_err *e)
{
	uint8_t *d = dup_exact(p, n);
	struct td_tgm_walk it;
	int rc = td_tgm_walk_init(d, n, &it, e);

	free(d);
	return rc;
}

Test(tgm, e1_fewer_than_24_bytes_is_truncated)
{
	struct mb m = { .len = 0 };
	struct td_err e;

	mb_buffered(&m, 1, true);
	for (size_t n = 0; n < 24; n++)
		cr_assert_eq(init_rc(m.b, n, &e), -ENODATA, "len %zu", n);
}

Test(tgm, e2_wrong_magic_is_malformed)
{
	struct mb m = { .len = 0 };
	struct td_err e;

	mb_buffered(&m, 1, true);
	m.b[0] = 't';
	cr_assert_eq(init_rc(m.b, m.len, &e), -EBADMSG);
	cr_assert_eq(e.kind, TD_ERR_MALFORMED);
}

Test(tgm, e3_other_wire_versions_unsupported)
{
	struct mb m = { .len = 0 };
	struct td_err e;

	mb_buffered(&m, 1, true);
	td__put_be16(m.b + 8, 2);
	cr_assert_eq(init_rc(m.b, m.len, &e), -ENOTSUP);
	td__put_be16(m.b + 8, 0x0300);
	cr_assert_eq(init_rc(m.b, m.len, &e), -ENOTSUP);
}

Test(tgm, e4_total_length_beyond_buffer_is_truncated)
{
	struct mb m = { .len = 0 };
	struct td_err e;

	mb_buffered(&m, 1, true);
	cr_assert_eq(init_rc(m.b, m.len - 1, &e), -ENODATA);
	cr_assert_eq(e.need, m.len);
	cr_assert_eq(e.have, m.len - 1);
	td__put_be64(m.b + 16, UINT64_MAX);
	cr_assert_eq(init_rc(m.b, m.len, &e), -ENODATA);
}

Test(tgm, e5_total_length_below_48_is_forged)
{
	struct mb m = { .len = 0 };
	struct td_err e;

	mb_buffered(&m, 1, true);
	for (uint64_t t = 1; t < 48; t++) {
		td__put_be64(m.b + 16, t);
		cr_assert_eq(init_rc(m.b, m.len, &e), -EOVERFLOW, "T %llu",
			     (unsigned long long)t);
	}
}

Test(tgm, e6_missing_end_magic_is_malformed)
{
	struct mb m = { .len = 0 };
	struct td_err e;

	mb_buffered(&m, 1, true);
	m.b[m.len - 1] = '8';
	cr_assert_eq(init_rc(m.b, m.len, &e), -EBADMSG);
	cr_assert_eq(e.offset, m.len - 8);
}

Test(tgm, e7_postamble_total_length_must_match_or_be_zero)
{
	struct mb m = { .len = 0 };
	struct td_err e;

	mb_buffered(&m, 1, true);
	td__put_be64(m.b + m.len - 16, m.len + 8);
	cr_assert_eq(init_rc(m.b, m.len, &e), -EBADMSG);
	cr_assert_eq(e.value, m.len + 8);
	td__put_be64(m.b + m.len - 16, 0);
	cr_assert_eq(init_rc(m.b, m.len, &e), 0, "0 = not back-filled");
}

Test(tgm, e8_streaming_without_end_magic_or_too_short)
{
	struct mb m = { .len = 0 };
	uint8_t shortmsg[40] = "TENSOGRM\0\3";
	struct td_err e;

	mb_streaming(&m, 1, false, false, false);
	m.b[m.len - 2] = 'X';
	cr_assert_eq(init_rc(m.b, m.len, &e), -ENODATA);
	/* end magic at offset 24 (a 32-byte "message"), and at 32 */
	memcpy(shortmsg + 24, "39277777", 8);
	cr_assert_eq(init_rc(shortmsg, 32, &e), -EBADMSG);
	memset(shortmsg + 24, 0, 8);
	memcpy(shortmsg + 32, "39277777", 8);
	cr_assert_eq(init_rc(shortmsg, 40, &e), -EBADMSG);
	/* an end magic inside the preamble does not count (e >= 24) */
	memcpy(shortmsg + 12, "39277777", 8);
	td__put_be64(shortmsg + 16, 0);
	memset(shortmsg + 24, 0, 16);
	cr_assert_eq(init_rc(shortmsg, 40, &e), -ENODATA);
}

Test(tgm, every_strict_prefix_refused_without_crash)
{
	struct mb m = { .len = 0 };

	mb_buffered(&m, 3, true);
	for (size_t n = 0; n < m.len; n++)
		cr_assert_lt(init_rc(m.b, n, NULL), 0, "prefix %zu", n);
	cr_assert_eq(init_rc(m.b, m.len, NULL), 0);
	m.len = 0;
	mb_streaming(&m, 2, true, true, false);
	for (size_t n = 0; n < m.len; n++)
		cr_assert_lt(init_rc(m.b, n, NULL), 0, "prefix %zu", n);
	cr_assert_eq(init_rc(m.b, m.len, NULL), 0);
}

/* ------------------------------------------------------------------ */
/* §13.2 per-frame: intact frames first, then exactly one error */

/* 1, 2, 3, 9, 9: frames 0..4 */
static void two_objects(struct mb *m)
{
	m->len = 0;
	mb_buffered(m, 2, true);
}

Test(tgm, f1_truncated_frame_header_before_postamble)
{
	struct mb m = { .len = 0 };
	static const uint8_t body = 0xa0;
	size_t at;

	mb_preamble(&m, 1, 0);
	mb_frame(&m, 1, 0, &body, 1, 0);
	at = m.len;
	mb_put(&m, "FR\0\x01\0\x01\0\0", 8); /* 8 of the 16 header bytes */
	mb_postamble(&m, m.len, true);
	walk_expect(&m, m.b, m.len, 1, -EBADMSG, at);
}

Test(tgm, f2_nonzero_padding_is_malformed)
{
	struct mb m;
	size_t pad;

	two_objects(&m);
	pad = m.fr_off[0] + m.fr_len[0];
	cr_assert_lt(pad, m.fr_off[1], "frame 1 has padding");
	m.b[pad] = 0x01;
	walk_expect(&m, m.b, m.len, 1, -EBADMSG, pad);
	/* and a zero run ending in a non-FR byte, mid padding */
	two_objects(&m);
	m.b[m.fr_off[1] - 1] = 'F';
	walk_expect(&m, m.b, m.len, 1, -EBADMSG, m.fr_off[1] - 1);
	/* a frame start whose second byte is wrong */
	two_objects(&m);
	m.b[m.fr_off[3] + 1] = 'r';
	walk_expect(&m, m.b, m.len, 3, -EBADMSG, m.fr_off[3]);
}

Test(tgm, f3_type_4_is_malformed)
{
	struct mb m;
	struct td_tgm_walk it;
	struct td_tgm_frame f;
	struct td_err e;

	two_objects(&m);
	td__put_be16(m.b + m.fr_off[4] + 2, 4);
	walk_expect(&m, m.b, m.len, 4, -EBADMSG, m.fr_off[4] + 2);
	cr_assert_eq(td_tgm_walk_init(m.b, m.len, &it, NULL), 0);
	while (td_tgm_walk_next(&it, &f, &e) == 1)
		;
	cr_assert_eq(e.value, 4);
	cr_assert_str_eq(e.field, "type");
}

Test(tgm, f4_type_0_and_10_up_are_malformed)
{
	static const uint16_t bad[] = { 0, 10, 11, 0x0100, 0xffff };
	struct mb m;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		two_objects(&m);
		td__put_be16(m.b + m.fr_off[2] + 2, bad[i]);
		walk_expect(&m, m.b, m.len, 2, -EBADMSG, m.fr_off[2] + 2);
	}
}

Test(tgm, f5_phase_order_header_body_footer)
{
	struct mb m = { .len = 0 };
	static const uint8_t body = 0xa0;
	uint8_t d[16] = { 0 };

	/* header frame after a body frame */
	mb_preamble(&m, 0, 0);
	mb_frame(&m, 1, 0, &body, 1, 0);
	mb_frame(&m, 9, 1, d, 8, 20);
	mb_frame(&m, 2, 0, &body, 1, 0);
	mb_postamble(&m, m.len, true);
	walk_expect(&m, m.b, m.len, 2, -EBADMSG, m.fr_off[2] + 2);
	/* body frame after a footer frame */
	m.len = 0;
	mb_preamble(&m, 0, 0);
	mb_frame(&m, 9, 1, d, 8, 20);
	mb_frame(&m, 5, 0, &body, 1, 0);
	mb_frame(&m, 9, 1, d, 8, 20);
	mb_postamble(&m, m.fr_off[1], true);
	walk_expect(&m, m.b, m.len, 2, -EBADMSG, m.fr_off[2] + 2);
	/* header frame after a footer frame */
	m.len = 0;
	mb_preamble(&m, 0, 0);
	mb_frame(&m, 6, 0, &body, 1, 0);
	mb_frame(&m, 3, 0, &body, 1, 0);
	mb_postamble(&m, 24, true);
	walk_expect(&m, m.b, m.len, 1, -EBADMSG, m.fr_off[1] + 2);
}

Test(tgm, f6_preceder_must_precede_a_data_object)
{
	struct mb m = { .len = 0 };
	static const uint8_t body = 0xa0;
	uint8_t d[16] = { 0 };

	mb_preamble(&m, 0x40, 0);
	mb_frame(&m, 8, 0, &body, 1, 0);
	mb_frame(&m, 9, 1, d, 8, 20);
	mb_frame(&m, 8, 0, &body, 1, 0);
	mb_frame(&m, 7, 0, &body, 1, 0);
	mb_postamble(&m, m.fr_off[3], true);
	walk_expect(&m, m.b, m.len, 3, -EBADMSG, m.fr_off[3] + 2);
	/* 8 then 8 */
	m.len = 0;
	mb_preamble(&m, 0x40, 0);
	mb_frame(&m, 8, 0, &body, 1, 0);
	mb_frame(&m, 8, 0, &body, 1, 0);
	mb_frame(&m, 9, 1, d, 8, 20);
	mb_postamble(&m, m.len, true);
	walk_expect(&m, m.b, m.len, 1, -EBADMSG, m.fr_off[1] + 2);
	/* left pending at the postamble: an error at the postamble */
	m.len = 0;
	mb_preamble(&m, 0x40, 0);
	mb_frame(&m, 1, 0, &body, 1, 0);
	mb_frame(&m, 8, 0, &body, 1, 0);
	mb_postamble(&m, m.len, true);
	walk_expect(&m, m.b, m.len, 2, -EBADMSG, m.len - 24);
}

Test(tgm, f7_frame_shorter_than_minimum_is_forged)
{
	struct mb m;

	for (uint64_t l = 0; l < 28; l++) {
		two_objects(&m);
		td__put_be64(m.b + m.fr_off[1] + 8, l);
		walk_expect(&m, m.b, m.len, 1, -EOVERFLOW, m.fr_off[1] + 8);
	}
	/* type 9 needs 36 */
	for (uint64_t l = 28; l < 36; l++) {
		two_objects(&m);
		td__put_be64(m.b + m.fr_off[3] + 8, l);
		walk_expect(&m, m.b, m.len, 3, -EOVERFLOW, m.fr_off[3] + 8);
	}
}

Test(tgm, f7_minimum_frames_are_accepted)
{
	struct mb m = { .len = 0 };
	uint8_t d[1] = { 0 };

	mb_preamble(&m, 0, 0);
	mb_frame(&m, 1, 0, d, 0, 0);
	mb_frame(&m, 9, 1, d, 0, 16);
	mb_postamble(&m, m.len, true);
	cr_assert_eq(m.fr_len[0], 28);
	cr_assert_eq(m.fr_len[1], 36);
	walk_expect(&m, m.b, m.len, 2, 0, 0);
}

Test(tgm, f8_frame_overrunning_postamble_is_forged)
{
	struct mb m;
	uint64_t pa;

	two_objects(&m);
	pa = m.len - 24;
	/* last frame exactly one byte past the postamble */
	td__put_be64(m.b + m.fr_off[4] + 8, pa - m.fr_off[4] + 1);
	walk_expect(&m, m.b, m.len, 4, -EOVERFLOW, m.fr_off[4] + 8);
	/* pos + length wraps */
	two_objects(&m);
	td__put_be64(m.b + m.fr_off[2] + 8, UINT64_MAX - 8);
	walk_expect(&m, m.b, m.len, 2, -EOVERFLOW, m.fr_off[2] + 8);
	two_objects(&m);
	td__put_be64(m.b + m.fr_off[2] + 8, UINT64_MAX);
	walk_expect(&m, m.b, m.len, 2, -EOVERFLOW, m.fr_off[2] + 8);
}

Test(tgm, f9_missing_endf_is_malformed)
{
	struct mb m;

	two_objects(&m);
	m.b[m.fr_off[3] + m.fr_len[3] - 4] = 'X';
	walk_expect(&m, m.b, m.len, 3, -EBADMSG, m.fr_off[3]);
	/* a length that lands short of the real ENDF */
	two_objects(&m);
	td__put_be64(m.b + m.fr_off[0] + 8, m.fr_len[0] - 1);
	walk_expect(&m, m.b, m.len, 0, -EBADMSG, m.fr_off[0]);
}

Test(tgm, f10_cbor_offset_outside_frame_body_is_forged)
{
	struct mb m;
	struct td_tgm_walk it;
	struct td_tgm_frame f;
	size_t slot;

	for (int k = 0; k < 5; k++) {
		two_objects(&m);
		uint64_t bad[] = { 15, 0, m.fr_len[4] - 19, m.fr_len[4] - 18,
				   UINT64_MAX };
		slot = m.fr_off[4] + m.fr_len[4] - 20;
		td__put_be64(m.b + slot, bad[k]);
		walk_expect(&m, m.b, m.len, 4, -EOVERFLOW, slot);
	}
	/* the two bounds themselves are fine */
	two_objects(&m);
	slot = m.fr_off[4] + m.fr_len[4] - 20;
	td__put_be64(m.b + slot, 16);
	walk_expect(&m, m.b, m.len, 5, 0, 0);
	td__put_be64(m.b + slot, m.fr_len[4] - 20);
	walk_expect(&m, m.b, m.len, 5, 0, 0);
	cr_assert_eq(td_tgm_walk_init(m.b, m.len, &it, NULL), 0);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(td_tgm_walk_next(&it, &f, NULL), 1);
	cr_assert_eq(f.cbor_offset, m.fr_len[4] - 20);
}

Test(tgm, clean_end_and_malformed_end_differ)
{
	struct mb m;
	struct td_tgm_walk a, b;
	struct td_tgm_frame f;
	struct td_err e = { .kind = TD_ERR_NONE };
	int ra, rb;

	two_objects(&m);
	cr_assert_eq(td_tgm_walk_init(m.b, m.len, &a, NULL), 0);
	while ((ra = td_tgm_walk_next(&a, &f, &e)) == 1)
		;
	cr_assert_eq(ra, 0);
	cr_assert_eq(e.kind, TD_ERR_NONE, "a clean end leaves err alone");
	/* the same message with the last frame's ENDF gone: 4 frames, then
	 * an error, never "5 frames minus one" */
	m.b[m.fr_off[4] + m.fr_len[4] - 1] = 0;
	cr_assert_eq(td_tgm_walk_init(m.b, m.len, &b, NULL), 0);
	int n = 0;
	while ((rb = td_tgm_walk_next(&b, &f, &e)) == 1)
		n++;
	cr_assert_eq(n, 4);
	cr_assert_lt(rb, 0);
	cr_assert_neq(ra, rb);
	cr_assert_eq(e.kind, TD_ERR_MALFORMED);
	cr_assert_not_null(e.reason);
}

/* ------------------------------------------------------------------ */
/* Scan (§12) */

static size_t scan_exact(const uint8_t *p, size_t n, struct td_tgm_span *out,
			 size_t cap)
{
	uint8_t *d = dup_exact(p, n);
	size_t k = td_tgm_scan_all(d, n, out, cap);

	free(d);
	return k;
}

Test(tgm, scan_finds_messages_between_junk)
{
	struct mb m = { .len = 0 };
	struct td_tgm_span s[8];
	size_t a, b, c, al, bl, cl;

	mb_put(&m, "\xff\xff\xff", 3);
	a = m.len;
	mb_buffered(&m, 1, true);
	al = m.len - a;
	/* a v2 preamble, a v3 one with a bad end, a bare streaming one */
	mb_bare_preamble(&m, 2, 48);
	mb_bare_preamble(&m, 3, 48);
	mb_put(&m, "\xaa\xaa\xaa\xaa\xaa", 5);
	b = m.len;
	mb_streaming(&m, 2, true, true, false);
	bl = m.len - b;
	mb_put(&m, "junk", 4);
	c = m.len;
	mb_buffered(&m, 2, false);
	cl = m.len - c;
	mb_bare_preamble(&m, 3, 0);
	mb_put(&m, "3927777", 7); /* a near-miss end magic in the tail */
	mb_put(&m, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 24);
	cr_assert_eq(scan_exact(m.b, m.len, s, 8), 3);
	cr_assert_eq(s[0].offset, a);
	cr_assert_eq(s[0].length, al);
	cr_assert_eq(s[1].offset, b);
	cr_assert_eq(s[1].length, bl);
	cr_assert_eq(s[2].offset, c);
	cr_assert_eq(s[2].length, cl);
}

Test(tgm, scan_all_counts_beyond_capacity)
{
	struct mb m = { .len = 0 };
	struct td_tgm_span s[3] = { { 7, 7 }, { 7, 7 }, { 7, 7 } };

	for (int i = 0; i < 4; i++)
		mb_buffered(&m, 1, i & 1);
	cr_assert_eq(td_tgm_scan_all(m.b, m.len, NULL, 0), 4);
	cr_assert_eq(td_tgm_scan_all(m.b, m.len, s, 2), 4);
	cr_assert_eq(s[0].offset, 0);
	cr_assert_neq(s[1].offset, 7);
	cr_assert_eq(s[2].offset, 7, "wrote past cap");
	cr_assert_eq(s[2].length, 7, "wrote past cap");
}

Test(tgm, scan_ignores_frames_and_skips_forged_totals)
{
	struct mb m = { .len = 0 };
	struct td_tgm_span s[4];

	mb_buffered(&m, 1, true);
	m.b[m.fr_off[3] + m.fr_len[3] - 4] = 'X'; /* broken frame */
	cr_assert_eq(scan_exact(m.b, m.len, s, 4), 1);
	cr_assert_eq(s[0].length, m.len);
	for (int k = 0; k < 4; k++) {
		static const uint64_t forged[] = { 1, 47, UINT64_MAX,
						   UINT64_MAX - 7 };
		td__put_be64(m.b + 16, forged[k]);
		cr_assert_eq(scan_exact(m.b, m.len, s, 4), 0);
	}
}

Test(tgm, scan_iterator_matches_scan_all_and_stays_ended)
{
	struct mb m = { .len = 0 };
	struct td_tgm_span all[8], one;
	struct td_tgm_scanner sc;
	size_t n, i = 0;

	mb_streaming(&m, 1, false, false, false);
	mb_buffered(&m, 2, true);
	mb_streaming(&m, 2, true, true, true);
	n = td_tgm_scan_all(m.b, m.len, all, 8);
	cr_assert_eq(n, 3);
	td_tgm_scan_init(m.b, m.len, &sc);
	while (td_tgm_scan_next(&sc, &one) == 1) {
		cr_assert_eq(one.offset, all[i].offset);
		cr_assert_eq(one.length, all[i].length);
		i++;
	}
	cr_assert_eq(i, n);
	cr_assert_eq(td_tgm_scan_next(&sc, &one), 0);
}

/* n bytes of streaming preambles and no end magic (malloc'ed). */
static uint8_t *endless_streaming_preambles(size_t n)
{
	uint8_t *p = malloc(n);
	static const uint8_t pre[24] = "TENSOGRM\0\3";

	cr_assert(p);
	for (size_t o = 0; o + 24 <= n; o += 24)
		memcpy(p + o, pre, 24);
	memset(p + n - n % 24, 0, n % 24);
	return p;
}

Test(tgm, scan_stays_linear_on_endless_streaming_preambles, .timeout = 60)
{
	/* 8 MiB of streaming preambles and no end magic: a naive end-magic
	 * search from every preamble would read ~10^12 bytes */
	size_t n = 8u << 20;
	uint8_t *p = endless_streaming_preambles(n);

	cr_assert_eq(td_tgm_scan_all(p, n, NULL, 0), 0);
	/* the same with one end magic at the very end: one message */
	memcpy(p + n - 8, "39277777", 8);
	cr_assert_eq(td_tgm_scan_all(p, n, NULL, 0), 1);
	free(p);
}

/* ------------------------------------------------------------------ */
/* Byte-at-a-time and bit flips */

/* Walk a message fully, checking record invariants; returns end rc. */
static int walk_checked(const uint8_t *msg, size_t len)
{
	struct td_tgm_walk it;
	struct td_tgm_frame f;
	struct td_err e;
	uint64_t prev_end = 24;
	int rc, steps = 0;

	if (td_tgm_walk_init(msg, len, &it, &e) < 0)
		return 1;
	cr_assert_leq(it.length, len);
	cr_assert_geq(it.length, 48);
	while ((rc = td_tgm_walk_next(&it, &f, &e)) == 1) {
		size_t footer = f.type == 9 ? 20 : 12;

		cr_assert_geq(f.offset, prev_end);
		cr_assert_leq(f.offset + f.length, it.postamble_offset);
		cr_assert_eq(f.payload, msg + f.offset + 16);
		cr_assert_eq(f.payload_len + 16 + footer, f.length);
		cr_assert_not_null(f.name);
		if (f.has_hash)
			(void)td_tgm_frame_verify(&f, NULL, NULL);
		prev_end = f.offset + f.length;
		cr_assert_leq(++steps, (int)(len / 28) + 1);
	}
	if (rc < 0) {
		cr_assert_not_null(e.reason);
		cr_assert_leq(e.offset, it.length);
	}
	cr_assert_eq(td_tgm_walk_next(&it, &f, NULL), rc);
	return rc;
}

Test(tgm, byte_at_a_time_finds_exactly_the_complete_messages)
{
	struct mb m = { .len = 0 };
	size_t ends[3];
	struct td_tgm_span s[4];

	mb_buffered(&m, 2, true);
	ends[0] = m.len;
	mb_streaming(&m, 1, true, true, false);
	ends[1] = m.len;
	mb_buffered(&m, 1, false);
	ends[2] = m.len;
	for (size_t k = 0; k <= m.len; k++) {
		size_t want = (k >= ends[0]) + (k >= ends[1]) + (k >= ends[2]);
		uint8_t *d = dup_exact(m.b, k);
		size_t got = td_tgm_scan_all(d, k, s, 4);

		cr_assert_eq(got, want, "prefix %zu: %zu messages, want %zu",
			     k, got, want);
		for (size_t i = 0; i < got && i < 4; i++)
			cr_assert_eq(walk_checked(d + s[i].offset,
						  k - s[i].offset),
				     0);
		(void)walk_checked(d, k);
		free(d);
	}
}

Test(tgm, random_bit_flips_never_crash)
{
	struct mb m = { .len = 0 };
	uint64_t rng = 0x7467u;
	struct td_tgm_span s[8];

	mb_buffered(&m, 2, true);
	mb_streaming(&m, 2, true, true, false);
	mb_streaming(&m, 1, false, false, true);
	for (int iter = 0; iter < 4000; iter++) {
		uint8_t *d = dup_exact(m.b, m.len);
		int flips = 1 + (int)(tu_rand(&rng) % 4);

		for (int i = 0; i < flips; i++) {
			uint64_t r = tu_rand(&rng);
			d[(r >> 3) % m.len] ^= (uint8_t)(1u << (r & 7));
		}
		size_t n = td_tgm_scan_all(d, m.len, s, 8);
		for (size_t i = 0; i < n && i < 8; i++) {
			struct td_tgm_header h;

			cr_assert_leq(s[i].offset + s[i].length, m.len);
			cr_assert_eq(td_tgm_header_decode(d + s[i].offset,
							  s[i].length, &h,
							  NULL),
				     0);
			(void)walk_checked(d + s[i].offset, s[i].length);
		}
		(void)walk_checked(d, m.len);
		free(d);
	}
}

/* ------------------------------------------------------------------ */
/* In-tree fuzz seeds are this builder's output */

struct seed {
	const char *name;
	void (*build)(struct mb *m);
};

static void seed_buffered(struct mb *m)
{
	mb_buffered(m, 2, true);
}

static void seed_buffered_unhashed(struct mb *m)
{
	mb_buffered(m, 1, false);
}

static void seed_streaming(struct mb *m)
{
	mb_streaming(m, 2, true, true, false);
}

static void seed_streaming_backfilled(struct mb *m)
{
	mb_streaming(m, 1, false, false, true);
}

static void seed_concat_with_junk(struct mb *m)
{
	mb_put(m, "\xff\xff\xff\xff\xff", 5);
	mb_buffered(m, 1, true);
	mb_bare_preamble(m, 2, 48);
	mb_streaming(m, 1, true, false, false);
	mb_put(m, "3927", 4);
}

static const struct seed seeds[] = {
	{ "buffered-2obj-hashed.tgm", seed_buffered },
	{ "buffered-1obj.tgm", seed_buffered_unhashed },
	{ "streaming-2obj-preceder.tgm", seed_streaming },
	{ "streaming-backfilled.tgm", seed_streaming_backfilled },
	{ "concat-with-junk.tgm", seed_concat_with_junk },
};

/*
 * tests/data/tgm-seeds/ holds these builder outputs (fuzz seeds). Set
 * TD_TGM_WRITE_SEEDS=DIR to (re)write them after changing the builder.
 */
Test(tgm, fuzz_seeds_are_builder_output)
{
	const char *out = getenv("TD_TGM_WRITE_SEEDS");

	for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
		struct mb *m = calloc(1, sizeof(*m));
		char rel[128];
		size_t len;
		uint8_t *got;

		cr_assert(m);
		seeds[i].build(m);
		if (out) {
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", out,
				 seeds[i].name);
			FILE *f = fopen(path, "wb");
			cr_assert(f, "%s", path);
			cr_assert_eq(fwrite(m->b, 1, m->len, f), m->len);
			cr_assert_eq(fclose(f), 0);
		}
		snprintf(rel, sizeof(rel), "tgm-seeds/%s", seeds[i].name);
		got = tu_read_file(tu_data_path(rel), &len);
		cr_assert_eq(len, m->len, "%s differs from the builder", rel);
		cr_assert_eq(memcmp(got, m->b, len), 0, "%s differs", rel);
		cr_assert_geq(td_tgm_scan_all(got, len, NULL, 0), 1);
		free(got);
		free(m);
	}
}

/* ------------------------------------------------------------------ */
/* Upstream vectors: ../shared/vectors/tgm/expected.json */

/*
 * Object members in order. json-c's json_object_object_foreach() is a
 * GNU statement expression, which clang -Wpedantic refuses.
 */
struct jiter {
	struct json_object_iterator it, end;
};

static void jiter_init(struct jiter *j, json_object *o)
{
	j->it = json_object_iter_begin(o);
	j->end = json_object_iter_end(o);
}

static bool jiter_next(struct jiter *j, const char **key, json_object **val)
{
	if (json_object_iter_equal(&j->it, &j->end))
		return false;
	*key = json_object_iter_peek_name(&j->it);
	*val = json_object_iter_peek_value(&j->it);
	json_object_iter_next(&j->it);
	return true;
}

static const char *vectors_dir(void)
{
	return tu_vectors_or_skip("tgm", "tgm");
}

static json_object *load_expected(const char *dir)
{
	char path[4200];
	json_object *j;

	snprintf(path, sizeof(path), "%s/expected.json", dir);
	j = json_object_from_file(path);
	cr_assert_not_null(j, "%s: %s", path, json_util_get_last_err());
	return j;
}

static json_object *jget(json_object *o, const char *key)
{
	json_object *v = NULL;

	cr_assert(json_object_object_get_ex(o, key, &v), "missing key %s",
		  key);
	return v;
}

static uint64_t jint(json_object *o, const char *key)
{
	return (uint64_t)json_object_get_int64(jget(o, key));
}

static bool jbool(json_object *o, const char *key)
{
	return json_object_get_boolean(jget(o, key));
}

static uint8_t *read_vector(const char *dir, const char *name, size_t *len)
{
	char path[4200];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return tu_read_file(path, len);
}

static void check_message(const char *file, const uint8_t *msg, size_t len,
			  json_object *jm)
{
	json_object *jh = jget(jm, "header"), *jp = jget(jm, "postamble");
	json_object *jf = jget(jm, "frames"), *preds;
	struct td_tgm_header h;
	struct td_tgm_walk it;
	struct td_tgm_frame f;
	struct td_err e;
	size_t nf = json_object_array_length(jf), i = 0;
	unsigned mask = 0;
	int rc;

	cr_assert_eq(td_tgm_header_decode(msg, len, &h, &e), 0, "%s", file);
	cr_assert_eq(h.version, jint(jh, "version"), "%s", file);
	cr_assert_eq(h.flags, jint(jh, "flags"), "%s", file);
	cr_assert_eq(h.total_length, jint(jh, "total_length"), "%s", file);
	preds = jget(jh, "predicates");
	for (size_t k = 0; k < json_object_array_length(preds); k++) {
		const char *p = json_object_get_string(
			json_object_array_get_idx(preds, k));
		unsigned b = 0;
		while (b < 8 && strcmp(td_tgm_predicate_name(b), p))
			b++;
		cr_assert_lt(b, 8, "%s: unknown predicate %s", file, p);
		mask |= 1u << b;
	}
	bool got[8] = { h.has_header_metadata, h.has_footer_metadata,
			h.has_header_index,    h.has_footer_index,
			h.has_header_hashes,   h.has_footer_hashes,
			h.has_preceder_metadata, h.has_hashes_present };
	for (unsigned b = 0; b < 8; b++)
		cr_assert_eq(got[b], !!(mask & (1u << b)), "%s: %s", file,
			     td_tgm_predicate_name(b));

	cr_assert_eq(td_tgm_walk_init(msg, len, &it, &e), 0, "%s: %s", file,
		     e.reason);
	cr_assert_eq(it.length, len, "%s", file);
	cr_assert_eq(it.postamble_offset, jint(jp, "offset"), "%s", file);
	cr_assert_eq(it.first_footer_offset, jint(jp, "first_footer_offset"),
		     "%s", file);
	cr_assert_eq(it.postamble_total_length, jint(jp, "total_length"),
		     "%s", file);
	while ((rc = td_tgm_walk_next(&it, &f, &e)) == 1) {
		json_object *x;

		cr_assert_lt(i, nf, "%s: extra frame at %llu", file,
			     (unsigned long long)f.offset);
		x = json_object_array_get_idx(jf, i++);
		cr_assert_eq(f.type, jint(x, "type"), "%s", file);
		cr_assert_str_eq(f.name,
				 json_object_get_string(jget(x, "name")));
		cr_assert_eq(f.version, jint(x, "version"), "%s", file);
		cr_assert_eq(f.flags, jint(x, "flags"), "%s", file);
		cr_assert_eq(f.offset, jint(x, "offset"), "%s", file);
		cr_assert_eq(f.length, jint(x, "length"), "%s", file);
		cr_assert_eq(f.payload_len, jint(x, "payload_len"), "%s",
			     file);
		cr_assert_eq(f.payload, msg + f.offset + 16);
		cr_assert_eq(f.has_hash, jbool(x, "has_hash"), "%s @%llu",
			     file, (unsigned long long)f.offset);
		if (f.has_hash)
			cr_assert_eq(td_tgm_frame_verify(&f, NULL, NULL) == 0,
				     jbool(x, "hash_ok"), "%s", file);
		else
			cr_assert_eq(td_tgm_frame_verify(&f, NULL, NULL),
				     -EINVAL);
		if (f.type == 9) {
			cr_assert_eq(f.cbor_offset, jint(x, "cbor_offset"));
			cr_assert_eq(f.cbor_after_payload,
				     jbool(x, "cbor_after_payload"));
		}
	}
	cr_assert_eq(i, nf, "%s: %zu frames, want %zu", file, i, nf);
	if (json_object_get_type(jget(jm, "walk_error")) == json_type_null)
		cr_assert_eq(rc, 0, "%s: %s", file, e.reason);
	else
		cr_assert_lt(rc, 0, "%s: clean end, want an error", file);
}

Test(tgm, upstream_vectors_match_expected_json)
{
	const char *dir = vectors_dir();
	json_object *exp = load_expected(dir);
	int files = 0;
	struct jiter ji;
	const char *name;
	json_object *jv;

	jiter_init(&ji, exp);
	while (jiter_next(&ji, &name, &jv)) {
		size_t len, n, i = 0;
		uint8_t *raw = read_vector(dir, name, &len);
		uint8_t *buf = dup_exact(raw, len);
		json_object *scan = jget(jv, "scan");
		json_object *msgs = jget(jv, "messages");
		struct td_tgm_span s[32];

		free(raw);
		cr_assert_eq(len, jint(jv, "size"), "%s", name);
		n = td_tgm_scan_all(buf, len, s, 32);
		cr_assert_eq(n, json_object_array_length(scan), "%s scan",
			     name);
		cr_assert_eq(n, json_object_array_length(msgs), "%s", name);
		for (i = 0; i < n; i++) {
			json_object *p = json_object_array_get_idx(scan, i);
			json_object *jm = json_object_array_get_idx(msgs, i);

			cr_assert_eq(s[i].offset,
				     (uint64_t)json_object_get_int64(
					     json_object_array_get_idx(p, 0)));
			cr_assert_eq(s[i].length,
				     (uint64_t)json_object_get_int64(
					     json_object_array_get_idx(p, 1)));
			cr_assert_eq(s[i].offset, jint(jm, "offset"));
			cr_assert_eq(s[i].length, jint(jm, "length"));
			/* walk an exact-size slice: overreads trip ASan */
			uint8_t *msg = dup_exact(buf + s[i].offset,
						 s[i].length);
			check_message(name, msg, s[i].length, jm);
			free(msg);
		}
		free(buf);
		files++;
	}
	cr_assert_eq(files, 13, "expected.json lists 13 files");
	json_object_put(exp);
}

Test(tgm, upstream_truncated_tail_slice_fails_creation)
{
	const char *dir = vectors_dir();
	json_object *exp = load_expected(dir);
	json_object *jv = jget(jget(exp, "corrupt_truncated.tgm"),
			       "walk_of_tail_slice_592_to_end");
	size_t len;
	uint8_t *buf = read_vector(dir, "corrupt_truncated.tgm", &len);
	uint8_t *tail = dup_exact(buf + 592, len - 592);
	struct td_tgm_header h;
	struct td_tgm_walk it;
	struct td_err e;

	cr_assert_not_null(jget(jv, "create_error"));
	cr_assert_eq(td_tgm_header_decode(tail, len - 592, &h, NULL), 0);
	cr_assert_eq(h.total_length, 592);
	cr_assert_eq(td_tgm_walk_init(tail, len - 592, &it, &e), -ENODATA);
	cr_assert_eq(e.need, 592);
	cr_assert_eq(e.have, 308);
	free(tail);
	free(buf);
	json_object_put(exp);
}

Test(tgm, upstream_vectors_walk_messages_one_byte_at_a_time)
{
	const char *dir = vectors_dir();
	json_object *exp = load_expected(dir);
	struct jiter ji;
	const char *name;
	json_object *jv;

	jiter_init(&ji, exp);
	while (jiter_next(&ji, &name, &jv)) {
		size_t len;
		uint8_t *buf = read_vector(dir, name, &len);
		json_object *scan = jget(jv, "scan");
		size_t nscan = json_object_array_length(scan);

		for (size_t k = 0; k <= len; k++) {
			uint8_t *d = dup_exact(buf, k);
			size_t n = td_tgm_scan_all(d, k, NULL, 0);
			size_t want = 0;

			for (size_t i = 0; i < nscan; i++) {
				json_object *p =
					json_object_array_get_idx(scan, i);
				uint64_t end =
					(uint64_t)json_object_get_int64(
						json_object_array_get_idx(p,
									  0)) +
					(uint64_t)json_object_get_int64(
						json_object_array_get_idx(p,
									  1));
				want += end <= k;
			}
			cr_assert_eq(n, want, "%s prefix %zu", name, k);
			(void)walk_checked(d, k);
			free(d);
		}
		free(buf);
	}
	json_object_put(exp);
}

/*
 * expected ⊆ got, recursively; walk_error compared by null-ness only (its
 * text is informative). The type-9 descriptor (every key) and data range
 * are compared like the rest.
 */
static int json_subset(json_object *want, json_object *got, const char *path)
{
	enum json_type t = json_object_get_type(want);
	int bad = 0;

	/* json-c holds a JSON null as a NULL object */
	if (strstr(path, ".walk_error"))
		return (t == json_type_null) !=
		       (json_object_get_type(got) == json_type_null);
	if (t != json_object_get_type(got)) {
		cr_log_error("%s: type differs", path);
		return 1;
	}
	switch (t) {
	case json_type_object: {
		struct jiter ji;
		const char *key;
		json_object *val;

		jiter_init(&ji, want);
		while (jiter_next(&ji, &key, &val)) {
			char sub[512];
			json_object *g = NULL;

			if (!strcmp(key, "walk_of_tail_slice_592_to_end"))
				continue;
			snprintf(sub, sizeof(sub), "%s.%s", path, key);
			if (!json_object_object_get_ex(got, key, &g)) {
				cr_log_error("%s: missing", sub);
				bad++;
				continue;
			}
			bad += json_subset(val, g, sub);
		}
		/* a descriptor is the whole CBOR map: no key may be added */
		if (strstr(path, ".descriptor") &&
		    json_object_object_length(got) !=
			    json_object_object_length(want)) {
			cr_log_error("%s: %d keys, want %d", path,
				     json_object_object_length(got),
				     json_object_object_length(want));
			bad++;
		}
		return bad;
	}
	case json_type_array: {
		size_t n = json_object_array_length(want);

		if (n != json_object_array_length(got)) {
			cr_log_error("%s: %zu elements, want %zu", path,
				     json_object_array_length(got), n);
			return 1;
		}
		for (size_t i = 0; i < n; i++) {
			char sub[512];
			snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
			bad += json_subset(json_object_array_get_idx(want, i),
					   json_object_array_get_idx(got, i),
					   sub);
		}
		return bad;
	}
	case json_type_int:
		bad = json_object_get_int64(want) != json_object_get_int64(got);
		break;
	case json_type_boolean:
		bad = json_object_get_boolean(want) !=
		      json_object_get_boolean(got);
		break;
	case json_type_string:
		bad = strcmp(json_object_get_string(want),
			     json_object_get_string(got)) != 0;
		break;
	default:
		break;
	}
	if (bad)
		cr_log_error("%s: %s, want %s", path,
			     json_object_to_json_string(got),
			     json_object_to_json_string(want));
	return bad;
}

/* 1 when expected.json says inspect must refuse (walk error, bad hash) */
static int expect_refusal(json_object *jv)
{
	json_object *msgs = jget(jv, "messages");
	int refused = json_object_array_length(msgs) == 0;

	for (size_t i = 0; i < json_object_array_length(msgs); i++) {
		json_object *jm = json_object_array_get_idx(msgs, i);
		json_object *fr = jget(jm, "frames"), *ok;

		refused |= json_object_get_type(jget(jm, "walk_error")) !=
			   json_type_null;
		for (size_t k = 0; k < json_object_array_length(fr); k++)
			if (json_object_object_get_ex(
				    json_object_array_get_idx(fr, k),
				    "hash_ok", &ok))
				refused |= !json_object_get_boolean(ok);
	}
	return refused;
}

Test(tgm, tensorctl_inspect_json_matches_expected_json)
{
	const char *dir = vectors_dir();
	const char *bin = getenv("TD_TENSORCTL");
	json_object *exp = load_expected(dir);
	int files = 0;
	struct jiter ji;
	const char *name;
	json_object *jv;

	cr_assert_not_null(bin, "TD_TENSORCTL is not set");
	jiter_init(&ji, exp);
	while (jiter_next(&ji, &name, &jv)) {
		char path[4200], *out = NULL;
		char *argv[] = { (char *)bin, "inspect", "--json", path, NULL };
		json_object *got;
		int st;

		snprintf(path, sizeof(path), "%s/%s", dir, name);
		st = tu_run_capture(argv, &out);
		cr_assert_eq(st, expect_refusal(jv) ? 1 : 0, "%s: status %d",
			     name, st);
		got = json_tokener_parse(out);
		cr_assert_not_null(got, "%s: not JSON: %s", name, out);
		cr_assert_str_eq(json_object_get_string(jget(got, "kind")),
				 "tgm");
		cr_assert_eq(json_subset(jv, got, name), 0,
			     "%s: inspect --json differs from expected.json",
			     name);
		json_object_put(got);
		free(out);
		files++;
	}
	cr_assert_eq(files, 13);
	json_object_put(exp);
}

Test(tgm, tensorctl_inspect_table_lists_frames_and_end)
{
	const char *dir = vectors_dir();
	const char *bin = getenv("TD_TENSORCTL");
	char path[4200], *out = NULL;
	char *argv[] = { (char *)bin, "inspect", path, NULL };

	cr_assert_not_null(bin);
	snprintf(path, sizeof(path), "%s/corrupt_bad_endf.tgm", dir);
	cr_assert_eq(tu_run_capture(argv, &out), 1);
	cr_assert_not_null(strstr(out, "HeaderHash"), "%s", out);
	cr_assert_null(strstr(out, "NTensorFrame"), "%s", out);
	cr_assert_not_null(strstr(out, "MALFORMED"), "%s", out);
	free(out);
	snprintf(path, sizeof(path), "%s/single-msg-footer.tgm", dir);
	cr_assert_eq(tu_run_capture(argv, &out), 0);
	cr_assert_not_null(strstr(out, "FooterIndex"), "%s", out);
	cr_assert_not_null(strstr(out, "end: clean"), "%s", out);
	free(out);
}


/* Built files through tensorctl: junk-prefixed .tgm is sniffed as tgm */
Test(tgm, tensorctl_inspect_sniffs_tgm_after_leading_junk)
{
	const char *bin = getenv("TD_TENSORCTL");
	char path[] = "/tmp/td-tgm-XXXXXX";
	struct mb m = { .len = 0 };
	char *argv[] = { (char *)bin, "inspect", "--json", path, NULL };
	char *out = NULL;
	int fd;

	cr_assert_not_null(bin, "TD_TENSORCTL is not set");
	mb_put(&m, "\x01\x02\x03", 3);
	mb_streaming(&m, 1, true, true, false);
	fd = tu_mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, m.b, m.len), (ssize_t)m.len);
	close(fd);
	cr_assert_eq(tu_run_capture(argv, &out), 0, "%s", out);
	cr_assert_not_null(strstr(out, "\"kind\":\"tgm\""), "%s", out);
	cr_assert_not_null(strstr(out, "\"scan\":[[3,"), "%s", out);
	cr_assert_not_null(strstr(out, "\"walk_error\":null"), "%s", out);
	/* the junk is listed, never silently passed over */
	cr_assert_not_null(strstr(out, "\"skipped\":[[0,3]]"), "%s", out);
	free(out);
	unlink(path);
}

/* A whole message then a cut one: the cut tail is listed as skipped
 * (the file read "end: clean" and nothing else before). */
Test(tgm, tensorctl_inspect_lists_a_cut_last_message)
{
	const char *bin = getenv("TD_TENSORCTL");
	char path[] = "/tmp/td-tgm-XXXXXX";
	struct mb m = { .len = 0 };
	char *argv[] = { (char *)bin, "inspect", path, NULL };
	char *out = NULL, want[160];
	size_t one;
	int fd;

	cr_assert_not_null(bin, "TD_TENSORCTL is not set");
	mb_streaming(&m, 1, true, true, false);
	one = m.len;
	mb_put(&m, m.b, one - 30); /* the same message, cut */
	fd = tu_mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, m.b, m.len), (ssize_t)m.len);
	close(fd);
	cr_assert_eq(tu_run_capture(argv, &out), 0, "%s", out);
	snprintf(want, sizeof(want), "skipped: %zu bytes at offset %zu,",
		 one - 30, one);
	cr_assert_not_null(strstr(out, want), "%s", out);
	cr_assert_not_null(strstr(out, "1 message(s)"), "%s", out);
	free(out);
	unlink(path);
}

/* tensorctl inspect [--json] of one message whose header metadata frame
 * holds body; the exit status, the output in *out. */
static int inspect_meta(const uint8_t *body, size_t n, int json, char **out)
{
	const char *bin = getenv("TD_TENSORCTL");
	char path[] = "/tmp/td-tgm-XXXXXX";
	char *argv[] = { (char *)bin, "inspect", json ? "--json" : path,
			 json ? path : NULL, NULL };
	struct mb m = { .len = 0 };
	int fd, st;

	cr_assert_not_null(bin, "TD_TENSORCTL is not set");
	mb_preamble(&m, 0x0001, 0);
	mb_frame(&m, 1, 0, body, n, 0);
	mb_postamble(&m, m.len - m.start, true);
	fd = tu_mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, m.b, m.len), (ssize_t)m.len);
	close(fd);
	st = tu_run_capture(argv, out);
	unlink(path);
	return st;
}

/*
 * inspect "prints every field" (README), but of a .tgm it printed the
 * frames and never the metadata, which is what a user inspects a
 * Tensogram file for: a metadata frame's CBOR is now printed as JSON
 * (text: a "metadata:" line with what would drive a terminal escaped),
 * and one that does not decode is said and fails the status, as a
 * descriptor that does not decode does.
 */
Test(tgm, tensorctl_inspect_prints_the_metadata)
{
	/* {"k": "a" U+0085 DEL} */
	static const uint8_t meta[] = { 0xa1, 0x61, 'k', 0x64, 'a',
					0xc2, 0x85, 0x7f };
	static const uint8_t bad[] = { 0xff };
	char *out = NULL;
	json_object *got, *fr;

	cr_assert_eq(inspect_meta(meta, sizeof(meta), 0, &out), 0, "%s", out);
	cr_expect_not_null(strstr(out, "\n       metadata: "
				       "{\"k\":\"a\\u0085\\u007f\"}\n"),
			   "%s", out);
	free(out);
	cr_assert_eq(inspect_meta(meta, sizeof(meta), 1, &out), 0, "%s", out);
	got = json_tokener_parse(out);
	cr_assert_not_null(got, "not JSON: %s", out);
	fr = json_object_array_get_idx(
		jget(json_object_array_get_idx(jget(got, "messages"), 0),
		     "frames"),
		0);
	cr_expect_str_eq(json_object_get_string(jget(jget(fr, "metadata"),
						     "k")),
			 "a\xc2\x85\x7f");
	json_object_put(got);
	free(out);
	cr_expect_eq(inspect_meta(bad, sizeof(bad), 0, &out), 1, "%s", out);
	cr_expect_not_null(strstr(out, "       metadata: REFUSED: "), "%s",
			   out);
	free(out);
	cr_expect_eq(inspect_meta(bad, sizeof(bad), 1, &out), 1, "%s", out);
	cr_expect_not_null(strstr(out, "\"metadata_error\":\""), "%s", out);
	free(out);
}

/*
 * A descriptor's words (encoding, filter, ...) are the file's text, and
 * the table printed them raw: a file could clear the user's terminal.
 * They are escaped as stat escapes metadata.
 */
Test(tgm, tensorctl_inspect_table_escapes_descriptor_words)
{
	const char *bin = getenv("TD_TENSORCTL");
	char path[] = "/tmp/td-tgm-XXXXXX";
	char *argv[] = { (char *)bin, "inspect", path, NULL };
	static const uint8_t empty_map = 0xa0;
	struct mb m = { .len = 0 };
	struct cb c = { .len = 0 };
	uint8_t body[512] = { 0 };
	char *out = NULL;
	int fd;

	cr_assert_not_null(bin, "TD_TENSORCTL is not set");
	cb_head(&c, 5, 9);
	cb_text(&c, "ndim"), cb_head(&c, 0, 1);
	cb_text(&c, "type"), cb_text(&c, "ntensor");
	cb_text(&c, "dtype"), cb_text(&c, "float32");
	cb_text(&c, "shape"), cb_head(&c, 4, 1), cb_head(&c, 0, 1);
	cb_text(&c, "filter"), cb_text(&c, "\xc2\x9b" "1m");
	cb_text(&c, "strides"), cb_head(&c, 4, 1), cb_head(&c, 0, 1);
	cb_text(&c, "encoding"), cb_text(&c, "\x1b[2J");
	cb_text(&c, "byte_order"), cb_text(&c, "little");
	cb_text(&c, "compression"), cb_text(&c, "none");
	memcpy(body + 4, c.b, c.len); /* after one float32 */
	mb_preamble(&m, 0x0001, 0);
	mb_frame(&m, 1, 0, &empty_map, 1, 0);
	mb_frame(&m, 9, 1 /* CBOR after the data */, body, 4 + c.len, 16 + 4);
	mb_postamble(&m, m.len - m.start, true);
	fd = tu_mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, m.b, m.len), (ssize_t)m.len);
	close(fd);
	tu_run_capture(argv, &out);
	unlink(path);
	cr_expect_not_null(strstr(out, "encoding \\x1b[2J, filter \\u009b1m,"),
			   "%s", out);
	cr_expect(!strchr(out, '\x1b') && !strstr(out, "\xc2\x9b"), "%s", out);
	free(out);
}

/* ------------------------------------------------------------------ */
/* The windowed walk (td_tgm_walk_begin/_post/_window: a file read with
 * pread) against the in-memory one */

/* Each window an exact-size heap copy (ASan sees a read past it). */
struct win {
	uint8_t *buf;
};

static void give(struct td_tgm_walk *it, struct win *w, const uint8_t *msg,
		 size_t w_len)
{
	uint64_t off = it->need_off, n = it->need_len;

	cr_assert(n >= 1 && n <= 20, "asked for %llu bytes",
		  (unsigned long long)n);
	cr_assert(off + n <= it->length, "asked beyond the message");
	if (n < w_len)
		n = w_len;
	if (n > it->length - off)
		n = it->length - off;
	free(w->buf);
	w->buf = dup_exact(msg + off, (size_t)n);
	td_tgm_walk_window(it, w->buf, off, (size_t)n);
}

static void same_err(int rc, const struct td_err *a, const struct td_err *b,
		     size_t len, size_t w_len)
{
	if (rc >= 0)
		return;
	cr_assert_eq(a->offset, b->offset, "len %zu window %zu", len, w_len);
	cr_assert_str_eq(a->reason, b->reason, "len %zu window %zu", len,
			 w_len);
	cr_assert_eq(a->kind, b->kind);
}

/* Envelope of msg[0, len) in two steps, as tools/tgm-file.c does it. */
static int begin_post(const uint8_t *msg, size_t len, struct td_tgm_walk *b,
		      struct td_err *e)
{
	uint64_t stream_end = 0;
	int rc;

	if (len >= 24 && td__be64(msg + 16) == 0) {
		const uint8_t *p = memmem(msg + 24, len - 24, "39277777", 8);

		stream_end = p ? (uint64_t)(p - msg) + 8 : 0;
	}
	rc = td_tgm_walk_begin(msg, len < 24 ? len : 24, len, stream_end, b, e);
	if (rc == 0)
		rc = td_tgm_walk_post(b, msg + b->length - 24, e);
	return rc;
}

/* Every result and record of the two walks agree; windows of w_len. */
static void windowed_same(const uint8_t *msg, size_t len, size_t w_len)
{
	struct td_tgm_walk a, b;
	struct td_err ea = {0}, eb = {0};
	struct win w = {NULL};
	int ra = td_tgm_walk_init(msg, len, &a, &ea);
	int rb = begin_post(msg, len, &b, &eb);

	cr_assert_eq(ra, rb, "init: len %zu", len);
	same_err(ra, &ea, &eb, len, w_len);
	if (ra < 0)
		return;
	cr_assert_eq(a.postamble_offset, b.postamble_offset);
	cr_assert_eq(a.first_footer_offset, b.first_footer_offset);
	cr_assert_eq(a.postamble_total_length, b.postamble_total_length);
	td_tgm_walk_window(&b, NULL, 0, 0);
	for (int steps = 0;; steps++) {
		struct td_tgm_frame fa, fb;

		cr_assert_lt(steps, 64);
		ra = td_tgm_walk_next(&a, &fa, &ea);
		for (int asks = 0;
		     (rb = td_tgm_walk_next(&b, &fb, &eb)) == -EAGAIN; asks++) {
			cr_assert_lt(asks, 4096, "the walk asks for ever");
			give(&b, &w, msg, w_len);
		}
		cr_assert_eq(ra, rb, "step %d: len %zu window %zu", steps, len,
			     w_len);
		same_err(ra, &ea, &eb, len, w_len);
		if (ra != 1)
			break;
		cr_assert(fa.type == fb.type && fa.version == fb.version &&
			  fa.flags == fb.flags && fa.offset == fb.offset &&
			  fa.length == fb.length &&
			  fa.payload_len == fb.payload_len &&
			  fa.has_hash == fb.has_hash &&
			  fa.cbor_offset == fb.cbor_offset &&
			  fa.cbor_after_payload == fb.cbor_after_payload);
		/* a payload in the window is the message's bytes */
		if (fb.payload)
			cr_assert_eq(memcmp(fb.payload, fa.payload,
					    fa.payload_len), 0);
	}
	free(w.buf);
}

/*
 * tensorctl reads a .tgm file with pread through the windowed walk: it
 * must give what the in-memory walk gives, for intact messages, every
 * prefix (envelope errors) and every byte flipped (frame errors), fed
 * the bytes it asks for only, or windows of 7 and 4096 bytes.
 */
Test(tgm, windowed_walk_matches_the_in_memory_walk)
{
	static const size_t wins[] = {1, 7, 4096};
	struct mb m = { .len = 0 };

	for (int kind = 0; kind < 3; kind++) {
		uint8_t *d;

		m.len = 0;
		if (kind == 0)
			mb_buffered(&m, 2, true);
		else
			mb_streaming(&m, 2, true, true, kind == 2);
		for (size_t i = 0; i < sizeof(wins) / sizeof(wins[0]); i++) {
			for (size_t n = 0; n <= m.len; n++) {
				d = dup_exact(m.b, n);
				windowed_same(d, n, wins[i]);
				free(d);
			}
			for (size_t k = 0; k < m.len; k++) {
				d = dup_exact(m.b, m.len);
				d[k] ^= 0xff;
				windowed_same(d, m.len, wins[i]);
				free(d);
			}
		}
	}
}

/* ------------------------------------------------------------------ */
/* The windowed scan (td_tgm_scan_begin/_window: a file read with pread)
 * against the in-memory one: one implementation of §12, fed two ways */

/* Give the scan a fresh exact-size window at need_off: w_len bytes, but
 * at least min(need_len, 24) (the contract); w_len 0: need_len exactly.
 * Returns the bytes given. */
static uint64_t give_scan(struct td_tgm_scanner *s, uint8_t **w,
			  const uint8_t *p, size_t w_len)
{
	uint64_t off = s->need_off, n = s->need_len;

	cr_assert(n >= 8, "asked for %llu bytes", (unsigned long long)n);
	cr_assert(off <= s->len && n <= s->len - off,
		  "asked beyond the input");
	if (w_len) {
		if (n > 24)
			n = 24;
		if (n < w_len)
			n = w_len;
		if (n > s->len - off)
			n = s->len - off;
	}
	free(*w);
	*w = dup_exact(p + off, (size_t)n);
	td_tgm_scan_window(s, *w, off, (size_t)n);
	return n;
}

/*
 * The windowed scan of p[0, len) with windows of w_len, stop as given,
 * finds exactly the in-memory scan's messages that start at or before
 * stop, and stays ended. Returns the bytes it was given.
 */
static uint64_t windowed_scan_same(const uint8_t *p, size_t len,
				   size_t w_len, uint64_t stop)
{
	struct td_tgm_scanner a, b;
	struct td_tgm_span sa, sb;
	uint8_t *w = NULL;
	uint64_t given = 0;
	int ra, rb;

	td_tgm_scan_init(p, len, &a);
	td_tgm_scan_begin(&b, len, stop);
	for (int steps = 0;; steps++) {
		cr_assert_lt(steps, 4096);
		ra = td_tgm_scan_next(&a, &sa);
		if (ra == 1 && sa.offset > stop)
			ra = 0;
		for (size_t asks = 0;
		     (rb = td_tgm_scan_next(&b, &sb)) == -EAGAIN; asks++) {
			cr_assert_leq(asks, len, "the scan asks for ever");
			given += give_scan(&b, &w, p, w_len);
		}
		cr_assert_eq(ra, rb, "step %d: len %zu window %zu stop %llu",
			     steps, len, w_len, (unsigned long long)stop);
		if (ra != 1)
			break;
		cr_assert(sa.offset == sb.offset && sa.length == sb.length,
			  "step %d: len %zu window %zu: (%llu, %llu) vs "
			  "(%llu, %llu)", steps, len, w_len,
			  (unsigned long long)sa.offset,
			  (unsigned long long)sa.length,
			  (unsigned long long)sb.offset,
			  (unsigned long long)sb.length);
	}
	cr_assert_eq(td_tgm_scan_next(&b, &sb), 0, "stays ended");
	free(w);
	return given;
}

/* Every prefix, every byte flipped and the whole of p[0, len), each an
 * exact-size copy (ASan sees a read past it), with windows of w_len. */
static void windowed_scan_mutations(const uint8_t *p, size_t len,
				    size_t w_len)
{
	uint8_t *d;

	for (size_t n = 0; n <= len; n++) {
		d = dup_exact(p, n);
		windowed_scan_same(d, n, w_len, UINT64_MAX);
		free(d);
	}
	for (size_t k = 0; k < len; k++) {
		d = dup_exact(p, len);
		d[k] ^= 0xff;
		windowed_scan_same(d, len, w_len, UINT64_MAX);
		free(d);
	}
	for (size_t k = 0; k < 4; k++) {
		static const uint64_t stops[] = { 0, 1, 600, 4095 };

		windowed_scan_same(p, len, w_len, stops[k]);
	}
}

/*
 * tensorctl scans .tgm files through the windowed scan: it must find
 * what the in-memory scan finds, for single messages, concatenations
 * with junk between them, every prefix and every byte flipped, fed the
 * bytes it asks for (all of them, or the least it accepts) or windows of
 * 9 and 4096 bytes.
 */
Test(tgm, windowed_scan_matches_the_in_memory_scan)
{
	static const size_t wins[] = { 0, 1, 9, 4096 };
	struct mb m = { .len = 0 };

	for (int kind = 0; kind < 5; kind++) {
		m.len = 0;
		if (kind == 0)
			mb_buffered(&m, 2, true);
		else if (kind == 1)
			mb_streaming(&m, 2, true, true, false);
		else if (kind == 2)
			mb_streaming(&m, 1, false, false, true);
		else if (kind == 3)
			seed_concat_with_junk(&m);
		else {
			/* messages back to back, junk and near misses
			 * between them, a bare streaming preamble last */
			mb_streaming(&m, 1, false, false, false);
			mb_buffered(&m, 1, false);
			mb_bare_preamble(&m, 3, 48);
			mb_put(&m, "TENSOGRM39277777", 16);
			mb_streaming(&m, 1, true, false, true);
			mb_put(&m, "3927777\0TENSOGR", 15);
			mb_bare_preamble(&m, 3, 0);
			mb_put(&m, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);
		}
		for (size_t i = 0; i < sizeof(wins) / sizeof(wins[0]); i++)
			windowed_scan_mutations(m.b, m.len, wins[i]);
	}
}

/* Its end-magic cache keeps the windowed scan linear too: 8 MiB of
 * streaming preambles without an end read in 1 MiB windows. */
Test(tgm, windowed_scan_stays_linear_on_endless_streaming_preambles,
     .timeout = 60)
{
	size_t n = 8u << 20;
	uint8_t *p = endless_streaming_preambles(n);

	cr_assert_leq(windowed_scan_same(p, n, 1u << 20, UINT64_MAX), 3 * n);
	memcpy(p + n - 8, "39277777", 8);
	cr_assert_leq(windowed_scan_same(p, n, 1u << 20, UINT64_MAX), 3 * n);
	free(p);
}

/* The upstream vectors, their mutations, and all of them concatenated
 * with junk between them. */
Test(tgm, windowed_scan_matches_on_the_upstream_vectors)
{
	static const size_t wins[] = { 0, 1, 64 };
	const char *dir = vectors_dir();
	json_object *exp = load_expected(dir);
	struct jiter ji;
	const char *name;
	json_object *jv;
	uint8_t *all = NULL;
	size_t all_len = 0;

	jiter_init(&ji, exp);
	while (jiter_next(&ji, &name, &jv)) {
		size_t len;
		uint8_t *buf = read_vector(dir, name, &len);

		for (size_t i = 0; i < sizeof(wins) / sizeof(wins[0]); i++)
			windowed_scan_mutations(buf, len, wins[i]);
		all = realloc(all, all_len + len + 5);
		cr_assert(all);
		memcpy(all + all_len, buf, len);
		memcpy(all + all_len + len, "TENS\xff", 5);
		all_len += len + 5;
		free(buf);
	}
	for (size_t i = 0; i < sizeof(wins) / sizeof(wins[0]); i++)
		windowed_scan_same(all, all_len, wins[i], UINT64_MAX);
	windowed_scan_same(all, all_len, 4096, UINT64_MAX);
	free(all);
	json_object_put(exp);
}
