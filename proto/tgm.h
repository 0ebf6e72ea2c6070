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

/* Constants, flags, frame types, header and frame records: public. */
#include "tensord/tgm.h"

/*
 * Frame-walk iterator over one message. Caller's storage, filled by
 * td_tgm_walk_init(); it borrows the message and owns nothing, so there is
 * no fini. The public fields are read-only results of the envelope checks.
 */
struct td_tgm_walk {
	const uint8_t *msg; /* NULL in a windowed walk (td_tgm_walk_begin) */
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
	uint64_t total_length; /* the preamble's */
	/* the bytes the walk may look at: msg[win_off, win_off + win_len) */
	const uint8_t *win;
	uint64_t win_off, win_len;
	/* after -EAGAIN: the bytes it needs next, msg[need_off, +need_len) */
	uint64_t need_off, need_len;
	uint8_t head[16]; /* the frame header at head_pos, when head_ok */
	uint64_t head_pos;
	bool head_ok;
};

/*
 * Scan iterator (§12); caller's storage, borrows the bytes it is given.
 * One implementation for a buffer held whole (td_tgm_scan_init(): its
 * window is the whole input) and for a reader that is not
 * (td_tgm_scan_begin(): a file read with pread, tools/tgm-file.c, fed
 * windows on -EAGAIN like the windowed walk). All offsets are input
 * offsets.
 */
struct td_tgm_scanner {
	uint64_t len;  /* the input's length */
	uint64_t stop; /* no message starting beyond it is looked for */
	/* private */
	uint64_t pos;
	/* the v3 preamble at cand_pos (its total_length), read before a
	 * -EAGAIN, when cand_ok */
	uint64_t cand_pos, cand_total;
	bool cand_ok;
	/* end-magic cache: no end magic starts in [magic_from, magic_next);
	 * when magic_done, magic_at (== magic_next) is the first at or after
	 * magic_from (UINT64_MAX: none), so a run of streaming preambles
	 * without an end stays linear; magic_from UINT64_MAX: empty */
	uint64_t magic_from, magic_next, magic_at;
	bool magic_done;
	/* the bytes the scan may look at: input [win_off, win_off + win_len) */
	const uint8_t *win;
	uint64_t win_off, win_len;
	/* after -EAGAIN: the input bytes it looks at next */
	uint64_t need_off, need_len;
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
 * The same envelope checks in two steps, for a reader that does not hold
 * the message (a file read with pread; tools/tgm-file.c). First the
 * preamble: pre holds pre_len = min(24, avail) bytes, avail is how many
 * bytes the input has from the preamble on, stream_end is where a
 * streaming message (total_length 0) ends: the first end magic at an
 * offset >= 24 plus 8, or 0 when there is none (the caller searched,
 * with td_tgm_scan_end_magic() as td_tgm_walk_init() does).
 * Returns 0 with it->length (the message end) set, or the error of E1-E5,
 * E8 as td_tgm_walk_init() gives it. Then td_tgm_walk_post() with the 24
 * bytes at it->length - 24: E6, E7. The walk then holds no bytes: feed
 * it with td_tgm_walk_window() when td_tgm_walk_next() says -EAGAIN.
 */
int td_tgm_walk_begin(const uint8_t *pre, size_t pre_len, uint64_t avail,
		      uint64_t stream_end, struct td_tgm_walk *it,
		      struct td_err *err);
int td_tgm_walk_post(struct td_tgm_walk *it, const uint8_t *post,
		     struct td_err *err);
/*
 * Let the walk look at buf[0, len) = message bytes [off, off + len)
 * (borrowed until the next call that replaces it). A walk made by
 * td_tgm_walk_init() holds the whole message already.
 */
void td_tgm_walk_window(struct td_tgm_walk *it, const uint8_t *buf,
			uint64_t off, size_t len);

/*
 * Step the walk (§13.2). Returns 1 with *frame filled (its payload points
 * into the message), 0 at a clean end (the postamble was reached), or a
 * negative -errno when the chain is malformed, with *err giving the
 * reason and the message offset where the walk stopped. Every intact
 * frame before the damage is yielded first. Once ended, every further
 * call returns the same result (0, or the same error again). A windowed
 * walk may return -EAGAIN instead (never from td_tgm_walk_init()'s):
 * message bytes [need_off, need_off + need_len) are not in the window;
 * give them (or more) with td_tgm_walk_window() and call again. A frame
 * whose payload is not all in the window has frame->payload NULL.
 */
int td_tgm_walk_next(struct td_tgm_walk *it, struct td_tgm_frame *frame,
		     struct td_err *err);


/* Start a forward scan (§12) of buf[0, len). Never fails. */
void td_tgm_scan_init(const uint8_t *buf, size_t len,
		      struct td_tgm_scanner *s);

/*
 * The same scan for a reader that does not hold the input (a file read
 * with pread; tools/tgm-file.c): len is the input's length, stop the
 * last offset at which a message may start (UINT64_MAX: any). The scan
 * then holds no bytes: feed it with td_tgm_scan_window() when
 * td_tgm_scan_next() or td_tgm_scan_end_magic() says -EAGAIN.
 */
void td_tgm_scan_begin(struct td_tgm_scanner *s, uint64_t len,
		       uint64_t stop);
/*
 * Let the scan look at buf[0, len) = input bytes [off, off + len)
 * (borrowed until the next call that replaces it; a caller whose buffer
 * is also written by others replaces it before each step).
 */
void td_tgm_scan_window(struct td_tgm_scanner *s, const uint8_t *buf,
			uint64_t off, size_t len);

/*
 * Find the next message. Returns 1 with *out filled, 0 when no further
 * message exists (and forever after). Junk, wrong-version preambles,
 * damaged ends and truncated tails are stepped over, never reported.
 * A windowed scan may return -EAGAIN instead (never one made by
 * td_tgm_scan_init()): it looks at input bytes [need_off, need_off +
 * need_len) next (8 <= need_len, need_off + need_len <= len; a search
 * asks for all it would read); give a window that holds at least the
 * first min(need_len, TD_TGM_PREAMBLE_LEN) of them, or more, and call
 * again. Each -EAGAIN is progress: a search asks for the bytes past
 * those it has searched.
 */
int td_tgm_scan_next(struct td_tgm_scanner *s, struct td_tgm_span *out);

/*
 * Rule 3's search, shared by the scan (step 4) and the walk (the end of
 * a streaming message): the first end magic at an input offset >= from,
 * whole in the input, into *at (UINT64_MAX: none). 0, or -EAGAIN as
 * td_tgm_scan_next() says it.
 */
int td_tgm_scan_end_magic(struct td_tgm_scanner *s, uint64_t from,
			  uint64_t *at);

#endif
