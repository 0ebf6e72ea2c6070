/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for proto/state: the daemon's state image, which comes
 * back through systemd's fd store at start. Decoding is strict and the
 * encoding canonical, so an accepted image must re-encode to exactly the
 * same bytes; a refusal must always say why. Every input is tried twice:
 * as it is, and with its checksum made right, so the fuzzer gets past the
 * XXH3 to the entry checks. An image that decodes whole must also pass
 * td_state_check_len(), the check a reader makes before reading it.
 * The one liberty: the encoder writes format 2 only when an entry has no
 * fds, and a format-2 image whose entries all have some is read (a newer
 * writer may make one), so there the format field alone may differ.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bytes.h"
#include "state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void one(const uint8_t *data, size_t size)
{
	struct td_state_hdr h;
	struct td_state_rd rd;
	struct td_state_entry ent;
	struct td_state_wr w;
	struct td_err e = {0};
	uint8_t *re;
	int64_t len;
	uint32_t format;
	int rc;

	rc = td_state_decode(data, size, &h, &rd, &e);
	if (rc < 0) {
		if (e.kind == TD_ERR_NONE || !e.reason)
			abort();
		return;
	}
	format = td__le32(data + 8);
	if (format != TD_STATE_FORMAT && format != TD_STATE_FORMAT_NOFDS)
		abort();
	re = malloc(size);
	if (!re)
		abort();
	if (td_state_encode_begin(&w, re, size, &h) < 0)
		abort(); /* the decoder accepted this header */
	while ((rc = td_state_next(&rd, &ent)) == 1) {
		if ((ent.fd_count == 0 && format == TD_STATE_FORMAT) ||
		    ent.fd_count > TD_STATE_MAX_FDS ||
		    ent.name.len > TD_WIRE_MAX_NAME)
			abort();
		if (td_state_encode_entry(&w, &ent) < 0)
			abort();
	}
	if (rc < 0) {
		if (e.kind == TD_ERR_NONE || !e.reason)
			abort();
		free(re);
		return;
	}
	len = td_state_encode_finish(&w);
	if (len < 0 || (size_t)len != size)
		abort();
	if (td__le32(re + 8) != format) {
		/* only a format-2 image with fds in every entry */
		if (format != TD_STATE_FORMAT_NOFDS || w.nofds)
			abort();
		td__put_le32(re + 8, format);
		td__put_le64(re + size - TD_STATE_SUM_LEN,
			     XXH3_64bits(re, size - TD_STATE_SUM_LEN));
	}
	if (memcmp(re, data, size) != 0)
		abort();
	/* the early length check never refuses an image that decodes */
	if (td_state_check_len(data, size, NULL) < 0)
		abort();
	free(re);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *fixed;

	one(data, size);
	if (size < TD_STATE_HDR_LEN + TD_STATE_SUM_LEN)
		return 0;
	fixed = malloc(size);
	if (!fixed)
		abort();
	memcpy(fixed, data, size);
	td__put_le64(fixed + size - TD_STATE_SUM_LEN,
		     XXH3_64bits(fixed, size - TD_STATE_SUM_LEN));
	one(fixed, size);
	free(fixed);
	return 0;
}
