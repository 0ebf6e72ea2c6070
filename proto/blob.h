/* SPDX-License-Identifier: MIT */
/*
 * The EdgeFirst tensor blob (../shared/specs/blob.md), byte-compatible with
 * edgefirst-tensor >= 0.33. Sans-I/O: decode borrows the caller's buffer and
 * never allocates; encode writes into a caller buffer.
 *
 *   td_blob_decode()  = spec §9.1-§9.4 (parse, eager validation)
 *   td_blob_check()   = spec §9.5 (import-level semantic checks)
 *   td_blob_encode()  = spec §8.1 writer (blob-absolute string padding)
 */
#ifndef TD_PROTO_BLOB_H
#define TD_PROTO_BLOB_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Everything above the spec's internals is public: <tensord/blob.h>. */
#include "tensord/blob.h"

/*
 * Bytes plane i must hold for the layout described by shape, strides, dtype
 * and format (spec §9.5.9): the span from the first to one past the last
 * addressed byte, rows at the plane's stride for images. The view must have
 * passed td_blob_check(). 0 and *need, or -EINVAL (with *err) when the
 * shape does not fit the format or the span overflows 64 bits.
 */
int td_blob_plane_need(const struct td_blob_view *view, uint32_t i,
		       const struct td_blob_plane *plane, uint64_t *need,
		       struct td_err *err);

/*
 * Number of planes an image format needs (spec §11.4): 1 for "" (not an
 * image), 0 when the format is unknown.
 */
unsigned td_blob_format_planes(struct td_str format);

#endif
