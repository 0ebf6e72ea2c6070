/* SPDX-License-Identifier: MIT */
/*
 * Zarr metadata for tensord's single-chunk arrays (../shared/specs/zarr.md,
 * tensogram.md §18): the v3 `zarr.json` of arrays and of the root group
 * with consolidated metadata, the v2 view (`.zarray`, `.zattrs`, `.zgroup`,
 * `.zmetadata`), chunk keys, and reading an array's `zarr.json` back for
 * import. No I/O: the tools write directories, the daemon serves HTTP.
 *
 * Every text is strict RFC 8259 JSON with keys sorted by their bytes and
 * compact separators (td_zarr_text()), so equal inputs give equal bytes.
 * Fill values: "NaN" for floats, ["NaN","NaN"] for complex, 0 for
 * integers, false for bool (never hex, never above 2^53).
 */
#ifndef TD_JSON_TD_ZARR_H
#define TD_JSON_TD_ZARR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tgm-desc.h"

#include <json-c/json_object_iterator.h>

struct json_object;

/*
 * For each member of object o: key (const char *) and val (struct
 * json_object *), declared by the caller. json-c's own foreach macro is a
 * GNU statement expression, which -Wpedantic refuses.
 */
#define TD_JSON_EACH(o, key, val)                                             \
	for (struct json_object_iterator it_ = json_object_iter_begin(o),     \
	                                 end_ = json_object_iter_end(o);      \
	     !json_object_iter_equal(&it_, &end_) &&                          \
	     ((key = json_object_iter_peek_name(&it_)), (void)key,           \
	      (val = json_object_iter_peek_value(&it_)), (void)val, 1);       \
	     json_object_iter_next(&it_))

/* Longest node name tensord writes (bytes, before a duplicate suffix). */
#define TD_ZARR_NAME_MAX 255
#define TD_ZARR_MAX_DIMS 16

/* A Zarr data type tensord knows (zarr.md §5). */
struct td_zarr_type {
	const char *name;   /* v3 data_type */
	const char *v2;     /* v2 dtype, little-endian; NULL: no v2 form */
	unsigned size;      /* itemsize in bytes */
	char kind;          /* 'b' bool, 'i', 'u', 'f' float, 'c' complex */
	int blob;           /* blob / tensor dtype code, -1 when none */
	enum td_tgm_dtype tgm; /* UNKNOWN for bool */
};

const struct td_zarr_type *td_zarr_type_by_name(const char *name);
/* NULL for a code with no Zarr type. */
const struct td_zarr_type *td_zarr_type_by_blob(uint32_t code);
/* NULL for bitmask and UNKNOWN. */
const struct td_zarr_type *td_zarr_type_by_tgm(enum td_tgm_dtype t);

/* One array of a hierarchy. */
struct td_zarr_array {
	char name[TD_ZARR_NAME_MAX + 16]; /* node name, unique in its group */
	const struct td_zarr_type *type;
	uint32_t ndim;
	uint64_t shape[TD_ZARR_MAX_DIMS];
	/* attributes: a json-c object owned by the array (may be NULL) */
	struct json_object *attrs;
};

/* Drop the attributes (the rest is a value). */
void td_zarr_array_fini(struct td_zarr_array *a);

/*
 * Bytes of the one chunk, Π shape × itemsize (1 element for 0-d, 0 for a
 * zero-size array); -EOVERFLOW when it does not fit in 64 bits.
 */
int td_zarr_chunk_bytes(const struct td_zarr_array *a, uint64_t *bytes);

/*
 * The chunk key under the array's folder into buf: v3 "c/0/…/0" ("c" for
 * 0-d), v2 "0.0…" ("0" for 0-d). Returns 1 when written, 0 when the array
 * has no chunk (a zero-size dimension), -ENAMETOOLONG.
 */
int td_zarr_chunk_key(const struct td_zarr_array *a, bool v2, char *buf,
                      size_t cap);

/*
 * How a tensor's planes make its one chunk (docs/zarr.md, "The mapping").
 * `tensorctl zarr export` and the daemon's HTTP store both decide and walk
 * it here, so they refuse the same tensors and give the same bytes.
 */
#define TD_ZARR_MAX_PLANES 8

enum td_zarr_layout {
	TD_ZARR_DENSE,   /* plane 0 holds the chunk from its first byte */
	TD_ZARR_STRIDED, /* one plane, gathered by its byte strides */
	TD_ZARR_PLANAR,  /* the planes one after the other, each packed */
};

/* What the tensor says about its bytes. */
struct td_zarr_src {
	const char *format;       /* the blob's format ("" or NULL: none) */
	uint32_t nstrides;        /* 0 (dense C order) or ndim */
	const int64_t *strides;   /* byte strides */
	uint32_t nplanes;         /* 1 .. TD_ZARR_MAX_PLANES */
	const uint64_t *plane_size;
	/* an image's (format not "") plane 0 stride, 0 for none: a
	 * single-plane image is packed rows this far apart (blob spec
	 * §9.5.9, what the daemon checks), whatever its strides say */
	uint64_t row_pitch;
};

struct td_zarr_walk {
	enum td_zarr_layout layout;
	uint64_t len; /* chunk bytes */
	uint32_t nplanes;
	uint64_t plane_size[TD_ZARR_MAX_PLANES];
	/* strided: dimensions [0, outer) are walked; the rest is one run of
	 * `run` contiguous bytes */
	uint32_t outer;
	uint64_t run;
	uint64_t shape[TD_ZARR_MAX_DIMS];
	int64_t st[TD_ZARR_MAX_DIMS];
};

/*
 * Decide the layout of a's chunk from s: NULL with *w ready, or the
 * reason the tensor cannot be exported ("a semi-planar format has no
 * single-array form", "its planes are padded (not supported)", ...).
 */
const char *td_zarr_walk_init(struct td_zarr_walk *w,
                              const struct td_zarr_array *a,
                              const struct td_zarr_src *s);

/*
 * Where chunk byte pos (< w->len) lies: its plane and the offset in that
 * plane. Returns how many chunk bytes from pos follow contiguously there
 * (at least 1, at most w->len - pos).
 */
uint64_t td_zarr_walk_at(const struct td_zarr_walk *w, uint64_t pos,
                         uint32_t *plane, uint64_t *off);

/*
 * json-c objects (new references; NULL only on ENOMEM). Group attributes
 * `gattrs` are borrowed.
 *   v3 array zarr.json        td_zarr_v3_array()
 *   v3 root zarr.json         td_zarr_v3_group(): attributes + inline
 *                             consolidated metadata of every array
 *   v2 .zarray                td_zarr_v2_array()
 *   v2 .zattrs of an array    td_zarr_v2_attrs(): attributes plus
 *                             _ARRAY_DIMENSIONS ("<name>/<k>") for xarray,
 *                             unless the attributes' own name each
 *                             dimension (one that does not moves to
 *                             _tensord_array_dimensions)
 *   v2 .zgroup                td_zarr_v2_group()
 *   v2 .zmetadata             td_zarr_v2_consolidated()
 */
struct json_object *td_zarr_v3_array(const struct td_zarr_array *a);
struct json_object *td_zarr_v3_group(struct json_object *gattrs,
                                     const struct td_zarr_array *arrs,
                                     size_t n);
struct json_object *td_zarr_v2_array(const struct td_zarr_array *a);
struct json_object *td_zarr_v2_attrs(const struct td_zarr_array *a);
struct json_object *td_zarr_v2_group(void);
struct json_object *td_zarr_v2_consolidated(struct json_object *gattrs,
                                            const struct td_zarr_array *arrs,
                                            size_t n);

/*
 * What a tensord tensor brings to its array's attributes (docs/zarr.md,
 * "Attributes"): metadata that is a JSON object gives its keys; other
 * metadata is kept whole as _tensord_meta (UTF-8) or _tensord_meta_hex;
 * then _tensord_name (the tensor's own name), the blob strings as
 * _tensord_format, _tensord_color_space, _tensord_color_transfer,
 * _tensord_color_encoding, _tensord_color_range when not empty, and
 * _tensord_quant {axis, scales, zero_points} when quantized.
 */
struct td_zarr_tensor {
	const char *name;
	const void *meta;
	size_t meta_len;
	const char *strings[5]; /* NUL-terminated, "" or NULL when empty */
	int32_t quant_axis;     /* -2: not quantized */
	const float *scales;
	uint32_t nscales;
	const int32_t *zero_points;
	uint32_t nzero_points;
};
/* A new object (NULL on ENOMEM). */
struct json_object *td_zarr_tensor_attrs(const struct td_zarr_tensor *t);
/* The group attributes of a set of tensors: _tensord_variables. */
struct json_object *td_zarr_tensor_group(const struct td_zarr_array *arrs,
                                         size_t n);

/*
 * o as strict compact JSON with keys sorted by their bytes, malloc'ed and
 * NUL-terminated, *len (may be NULL) without the NUL. Non-finite doubles
 * become "NaN", "Infinity", "-Infinity". NULL on ENOMEM.
 */
char *td_zarr_text(struct json_object *o, size_t *len);

/*
 * Strict JSON (RFC 8259, UTF-8, no NaN/Infinity tokens, nothing after the
 * value, at most TD_ZARR_JSON_MAX_DEPTH levels of values, as json-c
 * counts them: [[1]] has 3, [[]] 2) into *out. 0, or -EBADMSG with *why.
 *
 * The depth leaves room for everything tensord writes: attributes sit
 * four levels down in a root's consolidated metadata, and a .tgm's come
 * from CBOR of TD_TGM_CBOR_MAX_DEPTH levels; tensor metadata deeper than
 * TD_ZARR_JSON_MAX_DEPTH - 4 levels is kept whole as _tensord_meta.
 */
#define TD_ZARR_JSON_MAX_DEPTH (TD_TGM_CBOR_MAX_DEPTH + 8)
int td_zarr_json_parse(const char *text, size_t len, struct json_object **out,
                       const char **why);

/*
 * Make attributes o (an object) text that td_zarr_json_parse(), and so
 * `zarr import`, reads back: each attribute whose value it would refuse
 * (an integer below -2^63, which CBOR holds, JSON text can hold, and
 * json-c cannot) moves, as the exact JSON text it would have been written
 * as, into the object `_tensord_json` under its own key; an attribute
 * already named `_tensord_json` too, so that key is always this. 0, or
 * -ENOMEM (o left as it was).
 */
int td_zarr_keep_unreadable(struct json_object *o);

/*
 * Read an array's zarr.json for import: the checks of zarr.md §4-§8 that
 * matter for a single-chunk uncompressed array (zarr_format 3, node_type
 * array, a known data_type, regular grid with chunk_shape equal to shape
 * (0 as 1), default key encoding, exactly one `bytes` codec, a fill value
 * valid for the type). Fills a (attrs: a new reference, or NULL) and
 * *big_endian; sep gets the key separator ('/' or '.'). Returns 0,
 * -ENOTSUP (an unsupported data type or codec: why says which),
 * -EBADMSG (malformed metadata: why says what).
 */
int td_zarr_array_read(struct json_object *meta, struct td_zarr_array *a,
                       bool *big_endian, char *sep, char *why, size_t cap);

#endif
