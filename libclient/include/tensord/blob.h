/* SPDX-License-Identifier: MIT */
/*
 * The EdgeFirst tensor blob (specs/blob.md), byte-compatible with
 * edgefirst-tensor >= 0.33: encode, decode and check without a daemon.
 * Part of libtensord (pkg-config tensord). Sans-I/O: decode borrows the
 * caller's buffer and never allocates; encode writes into a caller
 * buffer. Errors: -errno and an optional struct td_err (<tensord/err.h>)
 * with the kind, field, value and byte offset. tensord-blob(3).
 *
 *   td_blob_decode()  = spec 9.1-9.4 (parse, eager validation)
 *   td_blob_check()   = spec 9.5 (import-level semantic checks)
 *   td_blob_encode()  = spec 8.1 writer (blob-absolute string padding)
 */
#ifndef TENSORD_BLOB_H
#define TENSORD_BLOB_H

#include <stddef.h>
#include <stdint.h>

#include <tensord/err.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TD_BLOB_HEADER_LEN              72
#define TD_BLOB_PLANE_RECORD_LEN        56
#define TD_BLOB_PID_OFFSET              28
#define TD_BLOB_FENCE_OFFSET            32
#define TD_BLOB_STRING_COUNT            5
#define TD_BLOB_SUPPORTED_REQUIRED_MASK UINT64_C(0)

/* Pass as fd_count to td_blob_check() when no fd table travels with it. */
#define TD_BLOB_NO_FD_TABLE (-1L)

enum td_storage_kind {
	TD_STORAGE_MEM = 0,
	TD_STORAGE_SHM = 1,
	TD_STORAGE_DMABUF = 2,
	TD_STORAGE_IOSURFACE = 3,
	TD_STORAGE_PBO = 4,
	TD_STORAGE_CUDA = 5,
};

enum td_dtype {
	TD_DTYPE_U8 = 0,
	TD_DTYPE_I8 = 1,
	TD_DTYPE_U16 = 2,
	TD_DTYPE_I16 = 3,
	TD_DTYPE_U32 = 4,
	TD_DTYPE_I32 = 5,
	TD_DTYPE_U64 = 6,
	TD_DTYPE_I64 = 7,
	TD_DTYPE_F16 = 8,
	TD_DTYPE_F32 = 9,
	TD_DTYPE_F64 = 10,
	TD_DTYPE_COUNT_ = 11,
};

#define TD_QUANT_NONE       (-2)
#define TD_QUANT_PER_TENSOR (-1)

enum td_blob_string {
	TD_BLOB_FORMAT = 0,
	TD_BLOB_COLOR_SPACE = 1,
	TD_BLOB_COLOR_TRANSFER = 2,
	TD_BLOB_COLOR_ENCODING = 3,
	TD_BLOB_COLOR_RANGE = 4,
};

/* A borrowed, length-delimited string (not NUL-terminated). */
struct td_str {
	const char *ptr;
	uint32_t len;
};

/* One plane record. In a decoded view, the pointers borrow the blob. */
struct td_blob_plane {
	int64_t handle; /* >= 0: fd-table index; -1: inline */
	uint64_t offset;
	uint64_t stride;
	uint64_t size;
	uint64_t used;
	uint64_t modifier;
	uint32_t handle_bytes_len;
	uint32_t data_len;
	const uint8_t *handle_bytes;
	const uint8_t *data;
};

/*
 * A decoded blob. Every field is valid once td_blob_decode() returned 0; the
 * view borrows `buf` and must not outlive it. Variable regions are read
 * through the accessors below (little-endian at any alignment).
 */
struct td_blob_view {
	const uint8_t *buf; /* first byte of the blob */
	uint64_t size;
	uint64_t required_mask;
	uint64_t planes_bytes;
	uint32_t storage_kind;
	uint32_t pid;
	int32_t fence_fd;
	uint32_t dtype;
	int32_t quant_axis;
	uint32_t ndim;
	uint32_t plane_count;
	uint32_t quant_scales_len;
	uint32_t quant_zero_points_len;
	uint32_t strings_bytes;
	uint32_t strides_len;
	/* region offsets from the start of the blob (spec §2) */
	uint64_t r_shape, r_strides, r_scales, r_zps, r_strings, r_planes,
	        r_end;
	struct td_str strings[TD_BLOB_STRING_COUNT];
};

/*
 * Everything a writer needs. Arrays are host values; counts as in the spec.
 * `required_mask` is always written 0 and `size`/`planes_bytes`/
 * `strings_bytes` are computed. A plane's handle_bytes/data pointers may be
 * NULL when their length is 0.
 */
struct td_blob_desc {
	uint32_t storage_kind;
	uint32_t pid;
	int32_t fence_fd;
	uint32_t dtype;
	int32_t quant_axis;
	uint32_t ndim;
	const uint64_t *shape;
	uint32_t strides_len; /* 0 or ndim */
	const int64_t *strides;
	uint32_t quant_scales_len;
	const float *quant_scales;
	uint32_t quant_zero_points_len;
	const int32_t *quant_zero_points;
	struct td_str strings[TD_BLOB_STRING_COUNT];
	uint32_t plane_count;
	const struct td_blob_plane *planes;
};

/*
 * Parse and validate a blob at the start of buf[0, len) in the order of spec
 * §9.1-§9.4. Returns 0 and fills *view, or a negative errno (see err.h for
 * the kind -> errno mapping) with *err describing the refusal. Never reads
 * outside [0, min(len, size)).
 */
TD_FORMAT_API int td_blob_decode(const uint8_t *buf, size_t len,
                                 struct td_blob_view *view, struct td_err *err);

/*
 * Import-level checks of spec §9.5 on a decoded view. fd_count is the length
 * of the fd table travelling with the blob, or TD_BLOB_NO_FD_TABLE to skip
 * the checks that need one (plane handle and fence indices). 0 or -errno.
 */
TD_FORMAT_API int td_blob_check(const struct td_blob_view *view, long fd_count,
                                struct td_err *err);

/* Accessors; indices must be below the matching count (asserted). */
TD_FORMAT_API uint64_t td_blob_shape(const struct td_blob_view *view,
                                     uint32_t i);
TD_FORMAT_API int64_t td_blob_stride(const struct td_blob_view *view,
                                     uint32_t i);
TD_FORMAT_API float td_blob_quant_scale(const struct td_blob_view *view,
                                        uint32_t i);
TD_FORMAT_API int32_t td_blob_quant_zero_point(const struct td_blob_view *view,
                                               uint32_t i);

/* Position of a plane walk; start from TD_BLOB_CURSOR_INIT. */
struct td_blob_cursor {
	uint32_t index; /* next plane */
	uint64_t off;   /* its byte offset inside the planes region */
};
#define TD_BLOB_CURSOR_INIT ((struct td_blob_cursor){0, 0})

/*
 * Plane iteration: each call fills *plane and advances *cursor. Cannot fail
 * on a decoded view (records were validated by decode); returns 0, or
 * -ENOENT after the last plane.
 */
TD_FORMAT_API int td_blob_plane_next(const struct td_blob_view *view,
                                     struct td_blob_cursor *cursor,
                                     struct td_blob_plane *plane);

/* Plane i (O(i) walk). 0 or -ENOENT. */
TD_FORMAT_API int td_blob_plane_get(const struct td_blob_view *view, uint32_t i,
                                    struct td_blob_plane *plane);

/*
 * Exact number of bytes td_blob_encode() will write for desc, into *len.
 * 0, or -EINVAL (with *err) for a description no reader would accept
 * (strides_len not 0/ndim, handle < -1, NULL array with a non-zero count),
 * -EILSEQ for a string that is not valid UTF-8, or -EOVERFLOW when a length
 * does not fit the format.
 */
TD_FORMAT_API int td_blob_encoded_len(const struct td_blob_desc *desc,
                                      uint64_t *len, struct td_err *err);

/*
 * Write the blob for desc into buf[0, cap). Returns the number of bytes
 * written (== td_blob_encoded_len), -ENOBUFS when cap is too small (nothing
 * meaningful written), or the errors of td_blob_encoded_len.
 */
TD_FORMAT_API int64_t td_blob_encode(const struct td_blob_desc *desc,
                                     uint8_t *buf, size_t cap,
                                     struct td_err *err);

/*
 * Where an image's pixels lie in one plane (spec 11.4), as an array: the
 * rows of that plane at its stride. What td_blob_check() and the daemon
 * require plane i to hold, and what a reader can view it as.
 */
struct td_plane_layout {
	uint32_t ndim;       /* 2, or 3 for packed formats with channels */
	uint64_t shape[3];   /* rows, elements per row, channels */
	int64_t strides[3];  /* bytes; strides[0] is the row stride */
	uint64_t stride;     /* the row stride (the plane's stride) */
	uint64_t row_bytes;  /* bytes of one row's pixels */
	uint64_t need;       /* bytes the plane spans: (rows-1)*stride+row */
};

/*
 * Planes of an image format ("NV12": 2), 1 for "" (not an image), 0 for
 * a format tensord does not know or NULL.
 */
TD_FORMAT_API unsigned td_format_plane_count(const char *format);

/*
 * The layout of plane i of an image of `format` (non-empty), dtype and
 * addressing grid shape[0, ndim) (spec 11.4: NV12 [H, W], rgb8 [H, W, 3],
 * rgb8_planar [3, H, W]) whose rows are `stride` bytes apart (0: rows
 * packed). NV12's chroma plane is ceil(H/2) rows of W elements (U and V
 * interleaved), a planar format's plane i is channel i. 0 and *out;
 * -EINVAL a shape that is not the format's grid, i out of range or a
 * stride smaller than a row; -ENOTSUP an unknown format; -EOVERFLOW.
 */
TD_FORMAT_API int td_format_plane_layout(const char *format, uint32_t dtype,
                                         uint32_t ndim, const uint64_t *shape,
                                         uint32_t i, uint64_t stride,
                                         struct td_plane_layout *out);

/* Element size of a dtype code in bytes, 0 when unknown. */
TD_FORMAT_API unsigned td_dtype_size(uint32_t dtype);
/* Lower-case name ("f32"), NULL when unknown; and the reverse (-1 unknown
 * or NULL). */
TD_FORMAT_API const char *td_dtype_name(uint32_t dtype);
TD_FORMAT_API int td_dtype_from_name(const char *name);
TD_FORMAT_API const char *td_storage_kind_name(uint32_t kind);
TD_FORMAT_API const char *td_blob_string_name(unsigned i);

#ifdef __cplusplus
}
#endif

#endif
