/* SPDX-License-Identifier: MIT */
/*
 * NumPy `.npy` headers (numpy/lib/format.py, format versions 1.0, 2.0 and
 * 3.0): the magic "\x93NUMPY", a major and a minor version byte, the
 * header's length (2 bytes little-endian for 1.x, 4 for 2.x and 3.x), then
 * a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': ...}
 * padded with spaces and ended by '\n'. The array's bytes follow it.
 *
 * Sans-I/O like the rest of proto/: the decoder reads a buffer, borrows
 * nothing after it returns and never allocates. It is strict: exactly the
 * three keys (any order, either quote, an optional trailing comma;
 * dimensions may carry Python 2's long suffix, 3L, as np.load takes),
 * a descr tensord has a dtype for ('=', the native order, read as the
 * host's, as numpy does), C order, and a shape of non-negative
 * integers whose byte count fits 64 bits. It refuses:
 *   MALFORMED (-EBADMSG)          not the magic; not such a dict (a key
 *                                 unknown, repeated or missing, a value
 *                                 of the wrong kind, a negative or
 *                                 non-integer dimension, bytes after the
 *                                 dict other than the padding and '\n')
 *   TRUNCATED (-ENODATA)          the input ends inside the header
 *   UNSUPPORTED_REQUIREMENT       a version other than 1.0, 2.0, 3.0; a
 *   (-ENOTSUP)                    structured, object or other dtype
 *                                 tensord has no code for; fortran_order
 *                                 True; more than TD_NPY_MAX_DIMS dims
 *   FORGED_LENGTH (-EOVERFLOW)    a header longer than TD_NPY_MAX_HEADER_LEN;
 *                                 a dimension, or the shape's product
 *                                 times the item size, past 64 bits (an
 *                                 array with a 0 dimension holds 0 bytes)
 */
#ifndef TD_PROTO_NPY_H
#define TD_PROTO_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Magic, version and the longest length field: what td_npy_header_len()
 * needs to know the header's size. */
#define TD_NPY_PREFIX_LEN 12
/* Most dimensions tensord takes (TD_ENTRY_MAX_DIMS). */
#define TD_NPY_MAX_DIMS 16
/* Cap on a hostile 2.x/3.x length field: numpy itself reads no header
 * over 10000 bytes unless told to; this leaves room for other writers'
 * padding without letting a 4-byte field ask for 4 GiB. */
#define TD_NPY_MAX_HEADER_LEN (1u << 20)
/* Room td_npy_encode() ever needs: 16 dims of 20 digits, the keys, the
 * spare digits numpy leaves and the alignment padding. */
#define TD_NPY_ENCODE_MAX 640

enum td_npy_order {
	TD_NPY_ORDER_NONE = 0, /* one-byte items: '|', or '<' '>' alike */
	TD_NPY_ORDER_LITTLE,
	TD_NPY_ORDER_BIG,
};

struct td_npy_header {
	uint8_t major, minor;
	uint32_t dtype;          /* enum td_dtype (TD_DTYPE_U8 ...) */
	enum td_npy_order order; /* of the data bytes */
	uint32_t ndim;           /* 0: a 0-d array, one item */
	uint64_t shape[TD_NPY_MAX_DIMS];
	uint64_t data_offset; /* where the data starts: magic .. '\n' */
	uint64_t data_len;    /* the data's bytes: items times item size */
};

/*
 * From the first bytes of a file (TD_NPY_PREFIX_LEN suffice; fewer are
 * enough for a 1.x file or to refuse a bad magic), the offset of its data
 * in *data_offset: 0, or -errno as above (TRUNCATED when len is too short
 * to tell).
 */
int td_npy_header_len(const uint8_t *buf, size_t len, uint64_t *data_offset,
		      struct td_err *err);

/*
 * Decode the header at the start of buf (len bytes; anything past the
 * header, such as the data, is not looked at) into *h: 0, or -errno as
 * above with *err filled (when not NULL) and *h undefined.
 */
int td_npy_decode(const uint8_t *buf, size_t len, struct td_npy_header *h,
		  struct td_err *err);

/*
 * The header np.save() writes for a C-order array of dtype (enum td_dtype)
 * and shape, in host byte order, byte for byte: version 1.0, or 2.0 when
 * its length does not fit 16 bits; the dict padded with spaces to a
 * multiple of 64 bytes, ended by '\n'. Into buf (cap bytes;
 * TD_NPY_ENCODE_MAX always suffice), its length in *len: 0, or -EINVAL
 * (unknown dtype, more than TD_NPY_MAX_DIMS dims, cap too small).
 */
int td_npy_encode(uint32_t dtype, uint32_t ndim, const uint64_t *shape,
		  uint8_t *buf, size_t cap, size_t *len, struct td_err *err);

#endif
