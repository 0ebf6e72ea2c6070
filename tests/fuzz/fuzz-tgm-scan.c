/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the .tgm scan over concatenated messages: spans are
 * in order, disjoint and inside the buffer, start with a v3 preamble, the
 * iterator and the array form agree, and each span can be walked. The
 * windowed scan (tensorctl's, over a file read with pread), fed the least
 * it accepts, must find the same spans.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tgm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP 64

/* The windowed scan of data finds the n spans of all[] (CAP at most). */
static void windowed_agrees(const uint8_t *data, size_t size,
			    const struct td_tgm_span *all, size_t n)
{
	struct td_tgm_scanner b;
	struct td_tgm_span s;
	size_t i = 0;
	int rb;

	td_tgm_scan_begin(&b, size, UINT64_MAX);
	for (;;) {
		while ((rb = td_tgm_scan_next(&b, &s)) == -EAGAIN) {
			uint64_t k = b.need_len < 24 ? b.need_len : 24;

			if (b.need_len < 8 || b.need_off > size ||
			    b.need_len > size - b.need_off)
				abort();
			td_tgm_scan_window(&b, data + b.need_off, b.need_off,
					   (size_t)k);
		}
		if (rb != 1)
			break;
		if (i < CAP &&
		    (s.offset != all[i].offset || s.length != all[i].length))
			abort();
		i++;
	}
	if (rb != 0 || i != n || td_tgm_scan_next(&b, &s) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct td_tgm_span all[CAP], s;
	struct td_tgm_scanner sc;
	uint64_t prev_end = 0;
	size_t n, i = 0;

	n = td_tgm_scan_all(data, size, all, CAP);
	windowed_agrees(data, size, all, n);
	td_tgm_scan_init(data, size, &sc);
	while (td_tgm_scan_next(&sc, &s) == 1) {
		struct td_tgm_header h;
		struct td_tgm_walk it;
		struct td_tgm_frame f;

		if (i < CAP &&
		    (s.offset != all[i].offset || s.length != all[i].length))
			abort();
		if (s.offset < prev_end || s.length > size ||
		    s.offset > size - s.length)
			abort();
		if (td_tgm_header_decode(data + s.offset, s.length, &h,
					 NULL) != 0)
			abort();
		if (h.total_length && h.total_length != s.length)
			abort();
		if (memcmp(data + s.offset + s.length - 8, "39277777", 8))
			abort();
		if (td_tgm_walk_init(data + s.offset, s.length, &it, NULL) ==
		    0)
			while (td_tgm_walk_next(&it, &f, NULL) == 1)
				;
		prev_end = s.offset + s.length;
		i++;
	}
	if (i != n || td_tgm_scan_next(&sc, &s) != 0)
		abort();
	return 0;
}
