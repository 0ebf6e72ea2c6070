/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the .npy header reader (proto/npy.h): the input is
 * the start of a file. What decodes must lie inside the input and say a
 * consistent size; the header the writer makes for the same dtype and
 * shape must decode to them again, and every strict prefix of a header
 * that decodes must be TRUNCATED.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct td_npy_header h, h2;
	struct td_err e = {0};
	uint8_t buf[TD_NPY_ENCODE_MAX];
	uint64_t off, bytes;
	size_t n;
	int rc = td_npy_decode(data, size, &h, &e);

	if (rc < 0) {
		if (rc != td_err_kind_errno(e.kind) || !e.reason)
			abort();
		return 0;
	}
	if (td_npy_header_len(data, size, &off, NULL) || off != h.data_offset ||
	    off > size || h.ndim > TD_NPY_MAX_DIMS ||
	    h.dtype >= TD_DTYPE_COUNT_)
		abort();
	bytes = td_dtype_size(h.dtype);
	for (uint32_t k = 0; k < h.ndim; k++)
		if (!h.shape[k])
			bytes = 0; /* empty, whatever the other dimensions */
	for (uint32_t k = 0; k < h.ndim && bytes; k++)
		if (__builtin_mul_overflow(bytes, h.shape[k], &bytes))
			abort();
	if (bytes != h.data_len)
		abort();
	if (td_npy_decode(data, (size_t)off - 1, &h2, NULL) != -ENODATA)
		abort();
	if (td_npy_encode(h.dtype, h.ndim, h.shape, buf, sizeof(buf), &n,
			  NULL) ||
	    n % 64 || td_npy_decode(buf, n, &h2, NULL) ||
	    h2.dtype != h.dtype || h2.ndim != h.ndim ||
	    memcmp(h2.shape, h.shape, h.ndim * sizeof(*h.shape)) ||
	    h2.data_len != h.data_len || h2.data_offset != n)
		abort();
	return 0;
}
