/* SPDX-License-Identifier: MIT */
/*
 * ECMWF Tensogram .tgm messages, wire version 3: introspection without a
 * daemon, in the shape of the format's own C API (specs/tensogram.md
 * 14: tgm_message_header, tgm_frame_iter_create/_next/_free,
 * tgm_frame_has_hash) with tensord names and error convention. Part of
 * libtensord (pkg-config tensord); tensord-tgm(3).
 *
 *   td_tgm_message_header()      14.1: the 24-byte preamble, walks nothing
 *   td_tgm_frame_iter_create()   13.1: envelope checks E1-E8, then
 *   td_tgm_frame_iter_next()     14.2: one frame per call, in wire order,
 *                                until the end or the first damage, which
 *   td_tgm_frame_iter_error()    reports (clean end: 0)
 *   td_tgm_scan_all()            12: where the messages of a file are
 *   td_tgm_frame_verify()        7: a frame's XXH3-64 hash
 *
 * Nothing here allocates except td_tgm_frame_iter_create(). Records borrow
 * the message: it must outlive the iterator and every frame's payload.
 * Errors: -errno and an optional struct td_err (<tensord/err.h>) whose
 * offset is relative to the message (to the buffer for scans).
 */
#ifndef TENSORD_TGM_H
#define TENSORD_TGM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tensord/err.h>

#ifdef __cplusplus
extern "C" {
#endif

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

/* A message found by a scan: its offset in the buffer and its length. */
struct td_tgm_span {
	uint64_t offset;
	uint64_t length;
};

/*
 * Verify one frame's XXH3-64 digest (§7) against its big-endian hash
 * slot. frame must come from td_tgm_frame_iter_next() over a message
 * still alive. When digest is not NULL it receives the computed value
 * (also on mismatch). Returns 0 on a match, -EINVAL when HASH_PRESENT is clear
 * (missing hash: the slot is undefined), -EBADMSG on a mismatch.
 */
TD_FORMAT_API int td_tgm_frame_verify(const struct td_tgm_frame *frame,
				      uint64_t *digest, struct td_err *err);

/*
 * Find the messages of a concatenation (a .tgm file): junk, damaged or
 * truncated messages are stepped over, never reported. The first
 * min(count, cap) spans go to out[] (out may be NULL when cap is 0).
 * Returns the total number of messages, which may exceed cap (call again
 * with a larger array).
 */
TD_FORMAT_API size_t td_tgm_scan_all(const uint8_t *buf, size_t len,
				     struct td_tgm_span *out, size_t cap);

/* "HeaderMetadata", ... for codes 1-3, 5-9; NULL for any other code. */
TD_FORMAT_API const char *td_tgm_frame_type_name(uint16_t type);

/* "has_header_metadata", ... for preamble bit 0-7; NULL otherwise. */
TD_FORMAT_API const char *td_tgm_predicate_name(unsigned bit);

/*
 * Decode the preamble of the message at buf (tgm_message_header). Reads
 * exactly 24 bytes and walks nothing: a truncated message still yields a
 * header. 0, or -ENODATA (fewer than 24 bytes), -EBADMSG (no magic),
 * -ENOTSUP (a wire version other than 3) with *err; *out is untouched on
 * failure.
 */
TD_FORMAT_API int td_tgm_message_header(const uint8_t *buf, size_t len,
					struct td_tgm_header *out,
					struct td_err *err);

/* A frame iterator over one borrowed message. */
struct td_tgm_frame_iter;

/*
 * Check the envelope of the message at msg (E1-E8; a longer buffer is
 * allowed, only its first message is walked) and make an iterator over
 * its frames. msg is borrowed: it must outlive the iterator and the
 * frames. Returns 0 and *out (td_tgm_frame_iter_free() it), -ENOMEM, or
 * the -errno of the first failing check with *err filled.
 */
TD_FORMAT_API int td_tgm_frame_iter_create(const uint8_t *msg, size_t len,
					   struct td_tgm_frame_iter **out,
					   struct td_err *err);
/*
 * The next frame into *frame: true, or false when there is none, because
 * the walk reached the postamble (a clean end) or met damage (every
 * intact frame before it was yielded first). td_tgm_frame_iter_error()
 * tells which. Once false, false forever. *frame is the caller's storage;
 * its payload points into the message.
 */
TD_FORMAT_API bool td_tgm_frame_iter_next(struct td_tgm_frame_iter *it,
					  struct td_tgm_frame *frame);
/*
 * Why the walk stopped: 0 while walking or after a clean end, else the
 * -errno of the damage (-EBADMSG, -EOVERFLOW, -ENODATA), with *err (may be
 * NULL) filled with its kind, reason and message offset.
 */
TD_FORMAT_API int td_tgm_frame_iter_error(const struct td_tgm_frame_iter *it,
					  struct td_err *err);
/* Free an iterator (the message and payloads stay valid). Accepts NULL. */
TD_FORMAT_API void td_tgm_frame_iter_free(struct td_tgm_frame_iter *it);
/* Whether the frame carries a hash (tgm_frame_has_hash): authoritative. */
TD_FORMAT_API bool td_tgm_frame_has_hash(const struct td_tgm_frame *frame);

#ifdef __cplusplus
}
#endif

#endif
