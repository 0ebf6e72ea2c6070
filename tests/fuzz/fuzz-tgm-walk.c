/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the .tgm message header and frame walk: the input
 * is one message (or anything). Every yielded frame must lie before the
 * postamble, after the previous one, with a payload inside it; the walk
 * must end (clean or malformed) and stay ended; hashes are verified.
 * The windowed walk (tensorctl's, over a file read with pread), fed only
 * the bytes it asks for, must give the same results and records. A
 * data-object frame splits into descriptor and data inside its payload,
 * the same from the frame (td_tgm_object_decode) and from the descriptor's
 * bytes alone (td_tgm_object_decode_at, what tensorctl reads with pread).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tgm-desc.h"
#include "tgm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The windowed walk of data agrees with the in-memory one. */
static void windowed_agrees(const uint8_t *data, size_t size)
{
	struct td_tgm_walk a, b;
	struct td_tgm_frame fa, fb;
	struct td_err ea, eb;
	uint64_t stream_end = 0;
	int ra = td_tgm_walk_init(data, size, &a, &ea), rb;

	if (size >= 24 && !data[16] && !data[17] && !data[18] && !data[19] &&
	    !data[20] && !data[21] && !data[22] && !data[23]) {
		const uint8_t *p = memmem(data + 24, size - 24, "39277777", 8);

		stream_end = p ? (uint64_t)(p - data) + 8 : 0;
	}
	rb = td_tgm_walk_begin(data, size < 24 ? size : 24, size, stream_end,
			       &b, &eb);
	if (rb == 0)
		rb = td_tgm_walk_post(&b, data + b.length - 24, &eb);
	if (ra != rb || (ra < 0 && ea.offset != eb.offset))
		abort();
	if (ra < 0)
		return;
	td_tgm_walk_window(&b, NULL, 0, 0);
	do {
		ra = td_tgm_walk_next(&a, &fa, &ea);
		while ((rb = td_tgm_walk_next(&b, &fb, &eb)) == -EAGAIN) {
			if (b.need_len > 20 || b.need_off > b.length ||
			    b.need_len > b.length - b.need_off)
				abort();
			td_tgm_walk_window(&b, data + b.need_off, b.need_off,
					   (size_t)b.need_len);
		}
		if (ra != rb || (ra < 0 && ea.offset != eb.offset) ||
		    (ra == 1 && (fa.offset != fb.offset ||
				 fa.length != fb.length ||
				 fa.type != fb.type ||
				 fa.cbor_offset != fb.cbor_offset)))
			abort();
	} while (ra == 1);
}

/* Frame f of the message at msg: both object decoders agree. */
static void object_agrees(const uint8_t *msg, const struct td_tgm_frame *f)
{
	struct td_tgm_object a, b;
	struct td_err ea = {0}, eb = {0};
	uint64_t at = f->cbor_after_payload ? f->cbor_offset
	                                    : TD_TGM_FRAME_HEADER_LEN;
	int ra = td_tgm_object_decode(f, &a, &ea);
	int rb = td_tgm_object_decode_at(
	        f, msg + f->offset + at,
	        f->length - TD_TGM_NTENSOR_FOOTER_LEN - at, &b, &eb);

	if (ra != rb || (ra < 0 && (!ea.reason || ea.offset != eb.offset)))
		abort();
	if (ra < 0)
		return;
	if (a.data_offset != b.data_offset || a.data_len != b.data_len ||
	    a.cbor_len != b.cbor_len || b.data ||
	    a.data != msg + a.data_offset ||
	    a.data_offset < f->offset + TD_TGM_FRAME_HEADER_LEN ||
	    a.data_len > f->payload_len ||
	    a.data_offset - f->offset - TD_TGM_FRAME_HEADER_LEN >
	            f->payload_len - a.data_len ||
	    a.desc.shape_count > TD_TGM_MAX_DIMS)
		abort();
	(void)td_tgm_desc_check_import(&a.desc, a.data_len, &ea);
	(void)td_tgm_desc_check_plain(&a.desc, a.data_len, &ea);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct td_tgm_header h;
	struct td_tgm_walk it;
	struct td_tgm_frame f;
	struct td_err e;
	uint64_t prev_end = TD_TGM_PREAMBLE_LEN, steps = 0;
	int rc, hrc;

	windowed_agrees(data, size);
	hrc = td_tgm_header_decode(data, size, &h, &e);
	rc = td_tgm_walk_init(data, size, &it, &e);
	if (rc < 0)
		return 0;
	/* the walk's envelope implies a header */
	if (hrc != 0 || h.version != TD_TGM_VERSION)
		abort();
	if (it.length > size || it.length < TD_TGM_MIN_MESSAGE_LEN ||
	    it.postamble_offset + TD_TGM_POSTAMBLE_LEN != it.length)
		abort();
	while ((rc = td_tgm_walk_next(&it, &f, &e)) == 1) {
		uint64_t footer = f.type == TD_TGM_NTENSOR_FRAME
					  ? TD_TGM_NTENSOR_FOOTER_LEN
					  : TD_TGM_FOOTER_LEN;

		if (f.offset < prev_end ||
		    f.offset + f.length > it.postamble_offset ||
		    f.payload != data + f.offset + TD_TGM_FRAME_HEADER_LEN ||
		    f.payload_len + TD_TGM_FRAME_HEADER_LEN + footer !=
			    f.length ||
		    !f.name)
			abort();
		if (f.type == TD_TGM_NTENSOR_FRAME &&
		    (f.cbor_offset < 16 || f.cbor_offset > f.length - 20))
			abort();
		(void)td_tgm_frame_verify(&f, NULL, &e);
		if (f.type == TD_TGM_NTENSOR_FRAME)
			object_agrees(data, &f);
		prev_end = f.offset + f.length;
		/* each frame is >= 28 bytes: the walk cannot spin */
		if (++steps > size / 28 + 1)
			abort();
	}
	if (rc < 0 && (!e.reason || e.offset > it.length))
		abort();
	if (td_tgm_walk_next(&it, &f, NULL) != rc)
		abort();
	return 0;
}
