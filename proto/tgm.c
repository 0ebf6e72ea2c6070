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

int td_tgm_walk_begin(const uint8_t *pre, size_t pre_len, uint64_t avail,
		      uint64_t stream_end, struct td_tgm_walk *it,
		      struct td_err *err)
{
	struct td_tgm_header h;
	uint64_t end;
	int rc;

	rc = td_tgm_header_decode(pre, pre_len, &h, err); /* E1-E3 */
	if (rc < 0)
		return rc;
	if (h.total_length > 0) {
		end = h.total_length;
		if (end > avail) /* E4 */
			return td__err_truncated(err, end, avail, OFF_TOTAL,
						 "total_length exceeds the "
						 "buffer");
		if (end < TD_TGM_MIN_MESSAGE_LEN) /* E5 */
			return td__err_set(err, TD_ERR_FORGED_LENGTH,
					   "total_length", true, end,
					   OFF_TOTAL,
					   "total_length below 48");
	} else {
		/* rule 3: a streaming message ends at the first end magic */
		if (stream_end < TD_TGM_PREAMBLE_LEN + 8 ||
		    stream_end > avail) /* E8 */
			return td__err_truncated(err, TD_TGM_MIN_MESSAGE_LEN,
						 avail, TD_TGM_PREAMBLE_LEN,
						 "streaming message without "
						 "end magic");
		end = stream_end;
		if (end < TD_TGM_MIN_MESSAGE_LEN)
			return td__err_set(err, TD_ERR_MALFORMED, "end_magic",
					   true, end - 8, end - 8,
					   "streaming message shorter than "
					   "48 bytes");
	}
	memset(it, 0, sizeof(*it));
	it->length = end;
	it->total_length = h.total_length;
	return 0;
}

int td_tgm_walk_post(struct td_tgm_walk *it, const uint8_t *post,
		     struct td_err *err)
{
	uint64_t end = it->length, pa_total;

	if (it->total_length > 0) {
		if (memcmp(post + PA_END_MAGIC, END_MAGIC, 8)) /* E6 */
			return td__err_set(err, TD_ERR_MALFORMED, "end_magic",
					   false, 0, end - 8,
					   "no end magic at total_length - 8");
		pa_total = td__be64(post + PA_TOTAL);
		if (pa_total != 0 && pa_total != end) /* E7 */
			return td__err_set(err, TD_ERR_MALFORMED,
					   "postamble_total_length", true,
					   pa_total,
					   end - TD_TGM_POSTAMBLE_LEN +
						   PA_TOTAL,
					   "postamble total_length differs "
					   "from the preamble's");
	} else {
		pa_total = td__be64(post + PA_TOTAL);
	}
	/* cannot underflow: end >= 48 */
	it->postamble_offset = end - TD_TGM_POSTAMBLE_LEN;
	it->first_footer_offset = td__be64(post + PA_FIRST_FOOTER);
	it->postamble_total_length = pa_total;
	it->pos = TD_TGM_PREAMBLE_LEN;
	it->phase = PHASE_HEADER;
	it->preceder_pending = false;
	it->state = WALKING;
	return 0;
}

void td_tgm_walk_window(struct td_tgm_walk *it, const uint8_t *buf,
			uint64_t off, size_t len)
{
	it->win = buf;
	it->win_off = off;
	it->win_len = len;
}

int td_tgm_walk_init(const uint8_t *msg, size_t len, struct td_tgm_walk *it,
		     struct td_err *err)
{
	uint64_t stream_end = 0;
	int rc;

	/* the end magic is searched only for a streaming preamble; the
	 * header checks still come first in td_tgm_walk_begin() */
	if (len >= TD_TGM_PREAMBLE_LEN && td__be64(msg + OFF_TOTAL) == 0) {
		struct td_tgm_scanner sc;
		uint64_t e;

		/* the scan's own search (rule 3); it holds all of msg, so
		 * it never says -EAGAIN */
		td_tgm_scan_init(msg, len, &sc);
		(void)td_tgm_scan_end_magic(&sc, TD_TGM_PREAMBLE_LEN, &e);
		stream_end = e == UINT64_MAX ? 0 : e + 8;
	}
	rc = td_tgm_walk_begin(msg, len < TD_TGM_PREAMBLE_LEN
				       ? len : TD_TGM_PREAMBLE_LEN,
			       len, stream_end, it, err);
	if (rc < 0)
		return rc;
	rc = td_tgm_walk_post(it, msg + it->length - TD_TGM_POSTAMBLE_LEN,
			      err);
	if (rc < 0)
		return rc;
	it->msg = msg;
	td_tgm_walk_window(it, msg, 0, it->length);
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

/*
 * Bytes [off, off + n) of the window win = [win_off, win_off + win_len),
 * or NULL with them recorded as needed: the caller gives them and steps
 * again (-EAGAIN). The walk's and the scan's.
 */
static const uint8_t *win_get(const uint8_t *win, uint64_t win_off,
			      uint64_t win_len, uint64_t off, uint64_t n,
			      uint64_t *need_off, uint64_t *need_len)
{
	if (off >= win_off && off - win_off <= win_len &&
	    n <= win_len - (off - win_off))
		return win + (off - win_off);
	*need_off = off;
	*need_len = n;
	return NULL;
}

static const uint8_t *win_at(struct td_tgm_walk *it, uint64_t off,
			     uint64_t n)
{
	return win_get(it->win, it->win_off, it->win_len, off, n,
		       &it->need_off, &it->need_len);
}

/* Step over zero padding (rule 2) up to pa; -EAGAIN when the window
 * ends first. */
static int skip_zeros(struct td_tgm_walk *it, uint64_t pa)
{
	while (it->pos < pa) {
		const uint8_t *p = win_at(it, it->pos, 1);
		uint64_t n;

		if (!p)
			return -EAGAIN;
		/* cannot underflow: win_at() checked pos is in the window */
		n = it->win_off + it->win_len - it->pos;
		if (n > pa - it->pos)
			n = pa - it->pos;
		for (uint64_t i = 0; i < n; i++, it->pos++)
			if (p[i])
				return 0;
	}
	return 0;
}

int td_tgm_walk_next(struct td_tgm_walk *it, struct td_tgm_frame *frame,
		     struct td_err *err)
{
	const uint8_t *f, *tail;
	uint64_t pa = it->postamble_offset, pos, length, end, min;
	uint16_t type, flags;
	int ph;

	if (it->state == CLEAN_END)
		return 0;
	if (it->state < 0) {
		if (err)
			*err = it->err;
		return it->state;
	}
	/* a header read before a -EAGAIN for the tail is kept: header and
	 * tail of a big frame never share a window */
	if (!it->head_ok || it->head_pos != it->pos) {
		if (skip_zeros(it, pa) < 0)
			return -EAGAIN;
		pos = it->pos;
		if (pos == pa) {
			if (it->preceder_pending) /* F6 at the end */
				return walk_fail(it, err, TD_ERR_MALFORMED,
						 "type", false, 0, pos,
						 "PrecederMetadata frame not "
						 "followed by a data-object "
						 "frame");
			it->state = CLEAN_END;
			return 0;
		}
		if (pa - pos < TD_TGM_FRAME_HEADER_LEN) /* F1 */
			return walk_fail(it, err, TD_ERR_MALFORMED, NULL,
					 false, 0, pos,
					 "truncated frame header");
		f = win_at(it, pos, TD_TGM_FRAME_HEADER_LEN);
		if (!f)
			return -EAGAIN;
		memcpy(it->head, f, sizeof(it->head));
		it->head_pos = pos;
		it->head_ok = true;
	}
	pos = it->pos;
	f = it->head;
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
	/* from here [pos, end) lies inside the message; its footer is
	 * tail[0, min - 16) (min - 16 <= length - 16) */
	tail = win_at(it, end - (min - TD_TGM_FRAME_HEADER_LEN),
		      min - TD_TGM_FRAME_HEADER_LEN);
	if (!tail)
		return -EAGAIN;
	if (memcmp(tail + (min - TD_TGM_FRAME_HEADER_LEN) - 4, ENDF,
		   sizeof(ENDF))) /* F9 */
		return walk_fail(it, err, TD_ERR_MALFORMED, "ENDF", false, 0,
				 pos, "missing ENDF");
	flags = td__be16(f + FR_FLAGS);
	frame->cbor_offset = 0;
	frame->cbor_after_payload = false;
	if (type == TD_TGM_NTENSOR_FRAME) {
		uint64_t co = td__be64(tail);

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
	frame->payload_len = length - min;
	frame->payload = win_at(it, pos + TD_TGM_FRAME_HEADER_LEN,
				frame->payload_len);
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

void td_tgm_scan_begin(struct td_tgm_scanner *s, uint64_t len,
		       uint64_t stop)
{
	memset(s, 0, sizeof(*s));
	s->len = len;
	s->stop = stop;
	s->magic_from = UINT64_MAX;
}

void td_tgm_scan_window(struct td_tgm_scanner *s, const uint8_t *buf,
			uint64_t off, size_t len)
{
	s->win = buf;
	s->win_off = off;
	s->win_len = len;
}

void td_tgm_scan_init(const uint8_t *buf, size_t len,
		      struct td_tgm_scanner *s)
{
	td_tgm_scan_begin(s, len, UINT64_MAX);
	td_tgm_scan_window(s, buf, 0, len);
}

/*
 * The first at in [*from, end - 8] with the 8 bytes pat at at: 1 (*at),
 * 0 (none), or -EAGAIN when the window holds no 8 bytes at *from. *from
 * moves past the offsets searched, so a search goes on where it stopped;
 * across a window's end 7 bytes are looked at again.
 */
static int win_find(struct td_tgm_scanner *s, uint64_t *from, uint64_t end,
		    const uint8_t *pat, uint64_t *at)
{
	while (*from <= end && end - *from >= 8) {
		uint64_t wend = s->win_off + s->win_len, n;
		const uint8_t *w, *p;

		if (*from < s->win_off || *from >= wend || wend - *from < 8) {
			s->need_off = *from;
			s->need_len = end - *from;
			return -EAGAIN;
		}
		n = (end < wend ? end : wend) - *from;
		w = s->win + (*from - s->win_off);
		/* memmem: a pure libc search (no syscall, no allocation) */
		p = memmem(w, (size_t)n, pat, 8);
		if (p) {
			*at = *from + (uint64_t)(p - w);
			return 1;
		}
		*from += n - 7;
	}
	return 0;
}

int td_tgm_scan_end_magic(struct td_tgm_scanner *s, uint64_t from,
			  uint64_t *at)
{
	uint64_t e;
	int rc;

	/* what a search from magic_from knows holds for any from in
	 * [magic_from, magic_next]: no magic starts before magic_next */
	if (s->magic_from == UINT64_MAX || from < s->magic_from ||
	    from > s->magic_next) {
		s->magic_from = from;
		s->magic_next = from;
		s->magic_done = false;
	}
	if (!s->magic_done) {
		rc = win_find(s, &s->magic_next, s->len, END_MAGIC, &e);
		if (rc < 0)
			return rc;
		s->magic_at = rc ? e : UINT64_MAX;
		s->magic_next = s->magic_at;
		s->magic_done = true;
	}
	*at = s->magic_at;
	return 0;
}

/* Steps 1-2: the next v3 preamble at or after pos, into cand_*: 1, 0
 * (none: the scan is over), -EAGAIN. */
static int scan_preamble(struct td_tgm_scanner *s)
{
	/* the caller checked pos + 48 <= len */
	uint64_t last = s->len - TD_TGM_MIN_MESSAGE_LEN, at;
	const uint8_t *p;
	int rc;

	if (last > s->stop)
		last = s->stop;
	for (;;) {
		/* step 1, fast: jump to the next candidate magic */
		rc = win_find(s, &s->pos, last + 8, MAGIC, &at);
		if (rc == 0)
			s->pos = s->len;
		if (rc <= 0)
			return rc;
		s->pos = at;
		p = win_get(s->win, s->win_off, s->win_len, at,
			    TD_TGM_PREAMBLE_LEN, &s->need_off, &s->need_len);
		if (!p)
			return -EAGAIN;
		if (td__be16(p + OFF_VERSION) == TD_TGM_VERSION) {
			s->cand_pos = at;
			s->cand_total = td__be64(p + OFF_TOTAL);
			s->cand_ok = true;
			return 1;
		}
		s->pos = at + 1; /* step 2: skip, not fatal */
	}
}

int td_tgm_scan_next(struct td_tgm_scanner *s, struct td_tgm_span *out)
{
	/* pos <= len always; the loop test is pos + 48 <= len */
	while (s->len - s->pos >= TD_TGM_MIN_MESSAGE_LEN) {
		const uint8_t *p;
		uint64_t pos, t, e;
		int rc;

		/* a preamble read before a -EAGAIN is kept */
		if (!s->cand_ok || s->cand_pos != s->pos) {
			rc = scan_preamble(s);
			if (rc <= 0)
				return rc;
		}
		pos = s->pos;
		t = s->cand_total;
		if (t > 0) { /* step 3 */
			if (t >= TD_TGM_MIN_MESSAGE_LEN && t <= s->len - pos) {
				p = win_get(s->win, s->win_off, s->win_len,
					    pos + t - 8, 8, &s->need_off,
					    &s->need_len);
				if (!p)
					return -EAGAIN;
				if (!memcmp(p, END_MAGIC, 8)) {
					out->offset = pos;
					out->length = t;
					s->pos = pos + t;
					return 1;
				}
			}
			s->pos = pos + 1;
			continue;
		}
		/* step 4: streaming, first end magic at >= pos + 24 */
		rc = td_tgm_scan_end_magic(s, pos + TD_TGM_PREAMBLE_LEN, &e);
		if (rc < 0)
			return rc;
		if (e != UINT64_MAX) {
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
