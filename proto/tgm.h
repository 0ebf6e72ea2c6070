/* SPDX-License-Identifier: MIT */
/*
 * ECMWF Tensogram `.tgm` messages, wire version 3: introspection only
 * (../shared/specs/tensogram.md §12-§14). Sans-I/O: no syscalls, no
 * allocation; every view borrows the caller's buffer, every length read
 * from it is bounds- and overflow-checked.
 *
 *   td_tgm_header_decode()          §14.1 (24-byte preamble, walks nothing)
 *   td_tgm_walk_init() / _next()    §13 / §14.2-§14.3 (frames of ONE message)
 *   td_tgm_scan_init() / _next()    §12 (messages in a concatenation)
 *   td_tgm_scan_all()               §12, into a caller array
 *   td_tgm_frame_verify()           §7 (XXH3-64 of one frame, explicit)
 *
 * Error kinds (struct td_err, -errno):
 *   TRUNCATED (-ENODATA)      E1 fewer than 24 bytes, E4 total_length beyond
 *                             the buffer, E8 streaming message without end
 *                             magic: more bytes could complete the message
 *   UNSUPPORTED_REQUIREMENT   E3 wire version other than 3
 *   (-ENOTSUP)
 *   FORGED_LENGTH (-EOVERFLOW) E5 0 < total_length < 48, F7 frame length
 *                             below the minimum, F8 frame overruns the
 *                             postamble, F10 cbor_offset out of range
 *   MALFORMED (-EBADMSG)      E2, E6, E7, E8 (message < 48 bytes), F1-F6,
 *                             F9, hash mismatch
 *   INVALID_ARGUMENT (-EINVAL) hash verification of a frame without
 *                             HASH_PRESENT
 * Offsets in td_err are relative to the message (to the buffer for scan).
 */
#ifndef TD_PROTO_TGM_H
#define TD_PROTO_TGM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define TD_TGM_VERSION 3
#define TD_TGM_PREAMBLE_LEN 24
#define TD_TGM_POSTAMBLE_LEN 24
#define TD_TGM_FRAME_HEADER_LEN 16
#define TD_TGM_MIN_MESSAGE_LEN 48
#define TD_TGM_FOOTER_LEN 12      /* [hash u64][ENDF] */
#define TD_TGM_NTENSOR_FOOTER_LEN 20 /* [cbor_offset u64][hash u64][ENDF] */

/* Preamble flags (§3); bit i is predicate i of td_tgm_predicate_name(). */
enum td_tgm_msg_flag {
	TD_TGM_HEADER_METADATA = 0x0001,
	TD_TGM_FOOTER_METADATA = 0x0002,
	TD_TGM_HEADER_INDEX = 0x0004,
	TD_TGM_FOOTER_INDEX = 0x0008,
	TD_TGM_HEADER_HASHES = 0x0010,
	TD_TGM_FOOTER_HASHES = 0x0020,
	TD_TGM_PRECEDER_METADATA = 0x0040,
	TD_TGM_HASHES_PRESENT = 0x0080,
};
#define TD_TGM_PREDICATE_COUNT 8

/* Frame-header flags (§4). */
#define TD_TGM_FRAME_CBOR_AFTER_PAYLOAD 0x0001 /* type 9 only */
#define TD_TGM_FRAME_HASH_PRESENT 0x0002

/* Frame type codes (§5); 0, 4 and >= 10 are malformed. */
enum td_tgm_frame_type {
	TD_TGM_HEADER_METADATA_FRAME = 1,
	TD_TGM_HEADER_INDEX_FRAME = 2,
	TD_TGM_HEADER_HASH_FRAME = 3,
	TD_TGM_FOOTER_HASH_FRAME = 5,
	TD_TGM_FOOTER_INDEX_FRAME = 6,
	TD_TGM_FOOTER_METADATA_FRAME = 7,
	TD_TGM_PRECEDER_METADATA_FRAME = 8,
	TD_TGM_NTENSOR_FRAME = 9,
};

/* The decoded preamble: a value copy, owns nothing. */
struct td_tgm_header {
	uint16_t version;      /* always 3 on success */
	uint16_t flags;        /* raw preamble flags */
	uint64_t total_length; /* 0: streaming, never back-filled */
	bool has_header_metadata;
	bool has_footer_metadata;
	bool has_header_index;
	bool has_footer_index;
	bool has_header_hashes;
	bool has_footer_hashes;
	bool has_preceder_metadata;
	bool has_hashes_present; /* summary only; per frame see has_hash */
};

/* One frame (§14.2). Pointers borrow the message buffer. */
struct td_tgm_frame {
	uint16_t type;      /* 1-3, 5-9 */
	const char *name;   /* static, e.g. "NTensorFrame" */
	uint16_t version;   /* raw frame-header version */
	uint16_t flags;     /* raw frame-header flags */
	uint64_t offset;    /* of the 16-byte header, in the message */
	uint64_t length;    /* header through ENDF, padding excluded */
	const uint8_t *payload; /* msg + offset + 16 */
	uint64_t payload_len;   /* length - 16 - footer */
	bool has_hash;          /* flags & HASH_PRESENT: authoritative */
	/* type 9 only (0 / false otherwise) */
	uint64_t cbor_offset; /* from the frame's first byte */
	bool cbor_after_payload;
};

/*
 * Frame-walk iterator over one message. Caller's storage, filled by
 * td_tgm_walk_init(); it borrows the message and owns nothing, so there is
 * no fini. The public fields are read-only results of the envelope checks.
 */
struct td_tgm_walk {
	const uint8_t *msg;
	uint64_t length;              /* message end (its total length) */
	uint64_t postamble_offset;    /* length - 24 */
	uint64_t first_footer_offset; /* raw postamble field, not validated */
	uint64_t postamble_total_length; /* raw postamble copy (0 allowed) */
	/* private */
	uint64_t pos;
	int phase;
	bool preceder_pending;
	int state; /* 0 walking, 1 clean end, < 0 the error returned */
	struct td_err err;
};

/* A message found by scan: buffer offset and byte length. */
struct td_tgm_span {
	uint64_t offset;
	uint64_t length;
};

/* Scan iterator (§12); caller's storage, borrows the buffer. */
struct td_tgm_scanner {
	const uint8_t *buf;
	size_t len;
	size_t pos;
	/* cache: the first end magic at or after magic_from is magic_at
	 * (SIZE_MAX: none), so a run of streaming preambles without an end
	 * stays linear */
	size_t magic_from;
	size_t magic_at;
};

/*
 * Decode the 24-byte preamble at buf into *out. Reads exactly 24 bytes and
 * walks nothing: a truncated message still yields a header.
 * Returns 0, or -ENODATA (E1), -EBADMSG (E2), -ENOTSUP (E3) with *err
 * filled when not NULL; *out is untouched on failure.
 */
int td_tgm_header_decode(const uint8_t *buf, size_t len,
			 struct td_tgm_header *out, struct td_err *err);

/*
 * Prepare a frame walk over the message starting at msg (a longer buffer
 * is allowed; only its first message is walked). Applies the envelope
 * checks E1-E8 (§13.1). msg must outlive *it and every frame it yields.
 * Returns 0, or the -errno of the first failing check with *err filled;
 * on failure *it must not be passed to td_tgm_walk_next().
 */
int td_tgm_walk_init(const uint8_t *msg, size_t len, struct td_tgm_walk *it,
		     struct td_err *err);

/*
 * Step the walk (§13.2). Returns 1 with *frame filled (its payload points
 * into the message), 0 at a clean end (the postamble was reached), or a
 * negative -errno when the chain is malformed, with *err giving the
 * reason and the message offset where the walk stopped. Every intact
 * frame before the damage is yielded first. Once ended, every further
 * call returns the same result (0, or the same error again).
 */
int td_tgm_walk_next(struct td_tgm_walk *it, struct td_tgm_frame *frame,
		     struct td_err *err);

/*
 * Verify one frame's XXH3-64 digest (§7) against its big-endian hash
 * slot. frame must come from td_tgm_walk_next() over a buffer still
 * alive. When digest is not NULL it receives the computed value (also on
 * mismatch). Returns 0 on a match, -EINVAL when HASH_PRESENT is clear
 * (missing hash: the slot is undefined), -EBADMSG on a mismatch.
 */
int td_tgm_frame_verify(const struct td_tgm_frame *frame, uint64_t *digest,
			struct td_err *err);

/* Start a forward scan (§12) of buf[0, len). Never fails. */
void td_tgm_scan_init(const uint8_t *buf, size_t len,
		      struct td_tgm_scanner *s);

/*
 * Find the next message. Returns 1 with *out filled, 0 when no further
 * message exists (and forever after). Junk, wrong-version preambles,
 * damaged ends and truncated tails are stepped over, never reported.
 */
int td_tgm_scan_next(struct td_tgm_scanner *s, struct td_tgm_span *out);

/*
 * Scan all of buf: the first min(count, cap) spans go to out[] (out may be
 * NULL when cap is 0). Returns the total number of messages, which may
 * exceed cap (call again with a larger array).
 */
size_t td_tgm_scan_all(const uint8_t *buf, size_t len,
		       struct td_tgm_span *out, size_t cap);

/* "HeaderMetadata", ... for codes 1-3, 5-9; NULL for any other code. */
const char *td_tgm_frame_type_name(uint16_t type);

/* "has_header_metadata", ... for preamble bit 0-7; NULL otherwise. */
const char *td_tgm_predicate_name(unsigned bit);

#endif
