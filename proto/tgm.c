/* SPDX-License-Identifier: MIT */
/* Tensogram wire-v3 introspection (../shared/specs/tensogram.md §12-§14). */
#include "tgm.h"

#include <errno.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bytes.h"

static const uint8_t MAGIC[8] = { 'T', 'E', 'N', 'S', 'O', 'G', 'R', 'M' };
static const uint8_t END_MAGIC[8] = { '3', '9', '2', '7', '7', '7', '7', '7' };
static const uint8_t ENDF[4] = { 'E', 'N', 'D', 'F' };

/* preamble fields */
#define OFF_VERSION 8
#define OFF_FLAGS 10
#define OFF_TOTAL 16
/* postamble fields, relative to the postamble */
#define PA_FIRST_FOOTER 0
#define PA_TOTAL 8
#define PA_END_MAGIC 16

/* frame-header fields */
#define FR_TYPE 2
#define FR_VERSION 4
#define FR_FLAGS 6
#define FR_LENGTH 8

enum phase { PHASE_HEADER = 0, PHASE_BODY = 1, PHASE_FOOTER = 2 };

enum walk_state { WALKING = 0, CLEAN_END = 1 };

const char *td_tgm_frame_type_name(uint16_t type)
{
	switch (type) {
	case TD_TGM_HEADER_METADATA_FRAME:
		return "HeaderMetadata";
	case TD_TGM_HEADER_INDEX_FRAME:
		return "HeaderIndex";
	case TD_TGM_HEADER_HASH_FRAME:
		return "HeaderHash";
	case TD_TGM_FOOTER_HASH_FRAME:
		return "FooterHash";
	case TD_TGM_FOOTER_INDEX_FRAME:
		return "FooterIndex";
	case TD_TGM_FOOTER_METADATA_FRAME:
		return "FooterMetadata";
	case TD_TGM_PRECEDER_METADATA_FRAME:
		return "PrecederMetadata";
	case TD_TGM_NTENSOR_FRAME:
		return "NTensorFrame";
	}
	return NULL;
}

const char *td_tgm_predicate_name(unsigned bit)
{
	static const char *const names[TD_TGM_PREDICATE_COUNT] = {
		"has_header_metadata", "has_footer_metadata",
		"has_header_index",    "has_footer_index",
		"has_header_hashes",   "has_footer_hashes",
		"has_preceder_metadata", "has_hashes_present",
	};
	return bit < TD_TGM_PREDICATE_COUNT ? names[bit] : NULL;
}

int td_tgm_header_decode(const uint8_t *buf, size_t len,
			 struct td_tgm_header *out, struct td_err *err)
{
	struct td_tgm_header h;

	if (len < TD_TGM_PREAMBLE_LEN)
		return td__err_truncated(err, TD_TGM_PREAMBLE_LEN, len, 0,
					 "fewer than 24 bytes: no preamble");
	if (memcmp(buf, MAGIC, sizeof(MAGIC)))
		return td__err_set(err, TD_ERR_MALFORMED, "magic", false, 0, 0,
				   "magic is not TENSOGRM");
	h.version = td__be16(buf + OFF_VERSION);
	if (h.version != TD_TGM_VERSION)
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT,
				   "version", true, h.version, OFF_VERSION,
				   "wire version is not 3");
	h.flags = td__be16(buf + OFF_FLAGS);
	h.total_length = td__be64(buf + OFF_TOTAL);
	h.has_header_metadata = h.flags & TD_TGM_HEADER_METADATA;
	h.has_footer_metadata = h.flags & TD_TGM_FOOTER_METADATA;
	h.has_header_index = h.flags & TD_TGM_HEADER_INDEX;
	h.has_footer_index = h.flags & TD_TGM_FOOTER_INDEX;
	h.has_header_hashes = h.flags & TD_TGM_HEADER_HASHES;
	h.has_footer_hashes = h.flags & TD_TGM_FOOTER_HASHES;
	h.has_preceder_metadata = h.flags & TD_TGM_PRECEDER_METADATA;
	h.has_hashes_present = h.flags & TD_TGM_HASHES_PRESENT;
	*out = h;
	return 0;
}

/*
 * First offset e >= from with buf[e, e+8) == end magic, or SIZE_MAX.
 * memmem is a pure libc search (no syscall, no allocation).
 */
static size_t find_end_magic(const uint8_t *buf, size_t len, size_t from)
{
	const uint8_t *p;

	if (from >= len || len - from < sizeof(END_MAGIC))
		return SIZE_MAX;
	p = memmem(buf + from, len - from, END_MAGIC, sizeof(END_MAGIC));
	return p ? (size_t)(p - buf) : SIZE_MAX;
}

int td_tgm_walk_init(const uint8_t *msg, size_t len, struct td_tgm_walk *it,
		     struct td_err *err)
{
	struct td_tgm_header h;
	uint64_t end, pa, pa_total;
	int rc;

	rc = td_tgm_header_decode(msg, len, &h, err); /* E1-E3 */
	if (rc < 0)
		return rc;
	if (h.total_length > 0) {
		end = h.total_length;
		if (end > len) /* E4 */
			return td__err_truncated(err, end, len, OFF_TOTAL,
						 "total_length exceeds the "
						 "buffer");
		if (end < TD_TGM_MIN_MESSAGE_LEN) /* E5 */
			return td__err_set(err, TD_ERR_FORGED_LENGTH,
					   "total_length", true, end,
					   OFF_TOTAL,
					   "total_length below 48");
		/* cannot underflow: end >= 48 */
		if (memcmp(msg + end - TD_TGM_POSTAMBLE_LEN + PA_END_MAGIC,
			   END_MAGIC, 8)) /* E6 */
			return td__err_set(err, TD_ERR_MALFORMED, "end_magic",
					   false, 0, end - 8,
					   "no end magic at total_length - 8");
		pa_total = td__be64(msg + end - TD_TGM_POSTAMBLE_LEN +
				    PA_TOTAL);
		if (pa_total != 0 && pa_total != end) /* E7 */
			return td__err_set(err, TD_ERR_MALFORMED,
					   "postamble_total_length", true,
					   pa_total,
					   end - TD_TGM_POSTAMBLE_LEN +
						   PA_TOTAL,
					   "postamble total_length differs "
					   "from the preamble's");
	} else {
		/* rule 3: a streaming message ends at the first end magic */
		size_t e = find_end_magic(msg, len, TD_TGM_PREAMBLE_LEN);

		if (e == SIZE_MAX) /* E8 */
			return td__err_truncated(err, TD_TGM_MIN_MESSAGE_LEN,
						 len, TD_TGM_PREAMBLE_LEN,
						 "streaming message without "
						 "end magic");
		end = (uint64_t)e + 8; /* e + 8 <= len: no overflow */
		if (end < TD_TGM_MIN_MESSAGE_LEN)
			return td__err_set(err, TD_ERR_MALFORMED, "end_magic",
					   true, e, e,
					   "streaming message shorter than "
					   "48 bytes");
		pa_total = td__be64(msg + end - TD_TGM_POSTAMBLE_LEN +
				    PA_TOTAL);
	}
	pa = end - TD_TGM_POSTAMBLE_LEN;
	memset(it, 0, sizeof(*it));
	it->msg = msg;
	it->length = end;
	it->postamble_offset = pa;
	it->first_footer_offset = td__be64(msg + pa + PA_FIRST_FOOTER);
	it->postamble_total_length = pa_total;
	it->pos = TD_TGM_PREAMBLE_LEN;
	it->phase = PHASE_HEADER;
	it->preceder_pending = false;
	it->state = WALKING;
	return 0;
}

static int phase_of(uint16_t type)
{
	if (type <= TD_TGM_HEADER_HASH_FRAME)
		return PHASE_HEADER;
	if (type >= TD_TGM_PRECEDER_METADATA_FRAME)
		return PHASE_BODY;
	return PHASE_FOOTER;
}

/* Record the walk's one error, report it, and make it sticky. */
static int walk_fail(struct td_tgm_walk *it, struct td_err *err,
		     enum td_err_kind kind, const char *field, bool has_value,
		     uint64_t value, uint64_t offset, const char *reason)
{
	it->state = td__err_set(&it->err, kind, field, has_value, value,
				offset, reason);
	if (err)
		*err = it->err;
	return it->state;
}

int td_tgm_walk_next(struct td_tgm_walk *it, struct td_tgm_frame *frame,
		     struct td_err *err)
{
	const uint8_t *m = it->msg, *f;
	uint64_t pa = it->postamble_offset, pos = it->pos, length, end, min;
	uint16_t type, flags;
	int ph;

	if (it->state == CLEAN_END)
		return 0;
	if (it->state < 0) {
		if (err)
			*err = it->err;
		return it->state;
	}
	while (pos < pa && m[pos] == 0) /* zero padding (rule 2) */
		pos++;
	it->pos = pos;
	if (pos == pa) {
		if (it->preceder_pending) /* F6 at the end */
			return walk_fail(it, err, TD_ERR_MALFORMED, "type",
					 false, 0, pos,
					 "PrecederMetadata frame not followed "
					 "by a data-object frame");
		it->state = CLEAN_END;
		return 0;
	}
	f = m + pos;
	if (pa - pos < TD_TGM_FRAME_HEADER_LEN) /* F1 */
		return walk_fail(it, err, TD_ERR_MALFORMED, NULL, false, 0,
				 pos, "truncated frame header");
	if (f[0] != 'F' || f[1] != 'R') /* F2 */
		return walk_fail(it, err, TD_ERR_MALFORMED, "start_marker",
				 false, 0, pos,
				 "neither zero padding nor a frame start");
	type = td__be16(f + FR_TYPE);
	if (type == 4) /* F3 */
		return walk_fail(it, err, TD_ERR_MALFORMED, "type", true, type,
				 pos + FR_TYPE,
				 "frame type 4 (obsolete v2 data object)");
	if (type == 0 || type >= 10) /* F4 */
		return walk_fail(it, err, TD_ERR_MALFORMED, "type", true, type,
				 pos + FR_TYPE, "unknown frame type");
	ph = phase_of(type);
	if (ph < it->phase) /* F5 */
		return walk_fail(it, err, TD_ERR_MALFORMED, "type", true, type,
				 pos + FR_TYPE,
				 "frame out of header/body/footer order");
	if (it->preceder_pending && type != TD_TGM_NTENSOR_FRAME) /* F6 */
		return walk_fail(it, err, TD_ERR_MALFORMED, "type", true, type,
				 pos + FR_TYPE,
				 "PrecederMetadata frame not followed by a "
				 "data-object frame");
	length = td__be64(f + FR_LENGTH);
	min = TD_TGM_FRAME_HEADER_LEN + (type == TD_TGM_NTENSOR_FRAME
						 ? TD_TGM_NTENSOR_FOOTER_LEN
						 : TD_TGM_FOOTER_LEN);
	if (length < min) /* F7 */
		return walk_fail(it, err, TD_ERR_FORGED_LENGTH, "length", true,
				 length, pos + FR_LENGTH,
				 "frame length below the minimum");
	if (td__add_ovf(pos, length, &end) || end > pa) /* F8 */
		return walk_fail(it, err, TD_ERR_FORGED_LENGTH, "length", true,
				 length, pos + FR_LENGTH,
				 "frame overruns the postamble");
	/* from here f[0, length) lies inside the message */
	if (memcmp(f + length - 4, ENDF, sizeof(ENDF))) /* F9 */
		return walk_fail(it, err, TD_ERR_MALFORMED, "ENDF", false, 0,
				 pos, "missing ENDF");
	flags = td__be16(f + FR_FLAGS);
	frame->cbor_offset = 0;
	frame->cbor_after_payload = false;
	if (type == TD_TGM_NTENSOR_FRAME) {
		uint64_t co = td__be64(f + length - TD_TGM_NTENSOR_FOOTER_LEN);

		/* length >= 36, so length - 20 cannot underflow */
		if (co < TD_TGM_FRAME_HEADER_LEN ||
		    co > length - TD_TGM_NTENSOR_FOOTER_LEN) /* F10 */
			return walk_fail(it, err, TD_ERR_FORGED_LENGTH,
					 "cbor_offset", true, co,
					 pos + length -
						 TD_TGM_NTENSOR_FOOTER_LEN,
					 "cbor_offset outside the frame body");
		frame->cbor_offset = co;
		frame->cbor_after_payload =
			flags & TD_TGM_FRAME_CBOR_AFTER_PAYLOAD;
	}
	frame->type = type;
	frame->name = td_tgm_frame_type_name(type);
	frame->version = td__be16(f + FR_VERSION);
	frame->flags = flags;
	frame->offset = pos;
	frame->length = length;
	frame->payload = f + TD_TGM_FRAME_HEADER_LEN;
	frame->payload_len = length - min;
	frame->has_hash = flags & TD_TGM_FRAME_HASH_PRESENT;
	it->phase = ph;
	it->preceder_pending = type == TD_TGM_PRECEDER_METADATA_FRAME;
	it->pos = end;
	return 1;
}

int td_tgm_frame_verify(const struct td_tgm_frame *frame, uint64_t *digest,
			struct td_err *err)
{
	/* the walk checked the footer lies in the message: the slot is the
	 * 8 bytes right after the payload, past cbor_offset for type 9 */
	const uint8_t *slot = frame->payload + frame->payload_len +
			      (frame->type == TD_TGM_NTENSOR_FRAME ? 8 : 0);
	uint64_t got = XXH3_64bits(frame->payload, frame->payload_len);
	uint64_t want = td__be64(slot);

	if (digest)
		*digest = got;
	if (!frame->has_hash)
		return td__err_set(err, TD_ERR_INVALID_ARGUMENT, "flags", true,
				   frame->flags, frame->offset + FR_FLAGS,
				   "frame carries no hash (HASH_PRESENT "
				   "clear)");
	if (got != want)
		return td__err_set(err, TD_ERR_MALFORMED, "hash", true, want,
				   frame->offset + frame->length - 12,
				   "hash mismatch");
	return 0;
}

void td_tgm_scan_init(const uint8_t *buf, size_t len,
		      struct td_tgm_scanner *s)
{
	s->buf = buf;
	s->len = len;
	s->pos = 0;
	s->magic_from = SIZE_MAX;
	s->magic_at = SIZE_MAX;
}

/* find_end_magic() through the scanner's cache. */
static size_t scan_end_magic(struct td_tgm_scanner *s, size_t from)
{
	/* the first magic at or after magic_from is magic_at, so it is
	 * also the first one at or after any from in [magic_from, at] */
	if (s->magic_from != SIZE_MAX && from >= s->magic_from &&
	    from <= s->magic_at)
		return s->magic_at;
	s->magic_from = from;
	s->magic_at = find_end_magic(s->buf, s->len, from);
	return s->magic_at;
}

int td_tgm_scan_next(struct td_tgm_scanner *s, struct td_tgm_span *out)
{
	const uint8_t *b = s->buf;
	size_t len = s->len;

	/* pos <= len always; the loop test is pos + 48 <= len */
	while (len - s->pos >= TD_TGM_MIN_MESSAGE_LEN) {
		size_t pos = s->pos;
		const uint8_t *p;
		uint64_t t;

		/* step 1, fast: jump to the next candidate magic */
		p = memmem(b + pos, len - pos, MAGIC, sizeof(MAGIC));
		if (!p || (size_t)(p - b) > len - TD_TGM_MIN_MESSAGE_LEN) {
			s->pos = len;
			break;
		}
		pos = (size_t)(p - b);
		s->pos = pos;
		if (td__be16(b + pos + OFF_VERSION) != TD_TGM_VERSION) {
			s->pos = pos + 1; /* step 2: skip, not fatal */
			continue;
		}
		t = td__be64(b + pos + OFF_TOTAL);
		if (t > 0) { /* step 3 */
			if (t >= TD_TGM_MIN_MESSAGE_LEN && t <= len - pos &&
			    !memcmp(b + pos + t - 8, END_MAGIC, 8)) {
				out->offset = pos;
				out->length = t;
				s->pos = pos + (size_t)t;
				return 1;
			}
			s->pos = pos + 1;
			continue;
		}
		/* step 4: streaming, first end magic at >= pos + 24 */
		size_t e = scan_end_magic(s, pos + TD_TGM_PREAMBLE_LEN);
		if (e != SIZE_MAX) {
			out->offset = pos;
			out->length = e + 8 - pos;
			s->pos = e + 8;
			return 1;
		}
		s->pos = pos + 1;
	}
	return 0;
}

size_t td_tgm_scan_all(const uint8_t *buf, size_t len,
		       struct td_tgm_span *out, size_t cap)
{
	struct td_tgm_scanner s;
	struct td_tgm_span span;
	size_t n = 0;

	td_tgm_scan_init(buf, len, &s);
	while (td_tgm_scan_next(&s, &span) == 1) {
		if (n < cap)
			out[n] = span;
		n++;
	}
	return n;
}
