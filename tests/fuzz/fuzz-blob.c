/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the blob decoder: decode, then the import checks
 * with and without an fd table, then walk every accessor; what a
 * successful decode gives must lie inside the input (its regions) and
 * every plane's handle bytes and data inside the planes region. (No re-encode: the decoder takes padding and a
 * trailing region the writer does not make, so bytes need not match.)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct td_blob_view v;
	struct td_blob_cursor c = TD_BLOB_CURSOR_INIT;
	struct td_blob_plane p;
	volatile uint64_t sink = 0;

	if (td_blob_decode(data, size, &v, NULL) < 0)
		return 0;
	if (v.size > size || v.r_end > v.size)
		abort();
	for (uint32_t i = 0; i < v.ndim; i++)
		sink += td_blob_shape(&v, i);
	for (uint32_t i = 0; i < v.strides_len; i++)
		sink += (uint64_t)td_blob_stride(&v, i);
	for (uint32_t i = 0; i < v.quant_zero_points_len; i++)
		sink += (uint64_t)td_blob_quant_zero_point(&v, i);
	for (uint32_t i = 0; td_blob_plane_next(&v, &c, &p) == 0; i++) {
		/* inside the planes region [r_planes, r_end), which lies
		 * in the input (checked above): not just inside the input */
		if (p.handle_bytes < data + v.r_planes ||
		    p.data < p.handle_bytes ||
		    p.data + p.data_len > data + v.r_end)
			abort();
		for (uint32_t k = 0; k < p.data_len; k++)
			sink += p.data[k];
		uint64_t need;
		(void)td_blob_plane_need(&v, i, &p, &need, NULL);
	}
	(void)td_blob_check(&v, TD_BLOB_NO_FD_TABLE, NULL);
	(void)td_blob_check(&v, 0, NULL);
	(void)td_blob_check(&v, 3, NULL);
	(void)sink;
	return 0;
}
