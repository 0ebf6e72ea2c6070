/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the .tgm message header and frame walk: the input
 * is one message (or anything). Every yielded frame must lie before the
 * postamble, after the previous one, with a payload inside it; the walk
 * must end (clean or malformed) and stay ended; hashes are verified.
 */
#include <stdint.h>
#include <stdlib.h>

#include "tgm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct td_tgm_header h;
	struct td_tgm_walk it;
	struct td_tgm_frame f;
	struct td_err e;
	uint64_t prev_end = TD_TGM_PREAMBLE_LEN, steps = 0;
	int rc, hrc;

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
