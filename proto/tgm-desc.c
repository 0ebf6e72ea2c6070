/* SPDX-License-Identifier: MIT */
/*
 * Tensogram data-object descriptors, the import check and metadata
 * frames (see tgm-desc.h). Every CBOR input is checked and loaded by
 * tgm-cbor.c first.
 */
#include "tgm-desc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "tgm-cbor.h"

/* Keep a short name; a longer one (or one with a NUL inside) is cut and
 * marked with "...", so it never compares equal to a real short name. */
static bool word_get(const cbor_item_t *it, char *w)
{
	ssize_t n = td__cbor_text_get(it, w, TD_TGM_WORD_LEN);
	size_t sl;

	if (n < 0)
		return false;
	sl = strlen(w);
	if (sl != (size_t)n) {
		sl = sl < TD_TGM_WORD_LEN - 4 ? sl : TD_TGM_WORD_LEN - 4;
		memcpy(w + sl, "...", 4);
	}
	return true;
}

static int uint_array(const cbor_item_t *it, uint64_t *out, uint32_t *count,
                      const char *field, struct td_err *err)
{
	cbor_item_t **h;
	size_t n;

	if (!cbor_isa_array(it))
		return td__err_set(err, TD_ERR_MALFORMED, field, false, 0, 0,
		                   "descriptor key is not an array");
	n = cbor_array_size(it);
	if (n > TD_TGM_MAX_DIMS)
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT, field,
		                   true, n, 0,
		                   "descriptor has too many dimensions");
	h = cbor_array_handle(it);
	for (size_t i = 0; i < n; i++) {
		if (!cbor_isa_uint(h[i]))
			return td__err_set(err, TD_ERR_MALFORMED, field, false,
			                   0, 0,
			                   "descriptor array element is not "
			                   "an unsigned integer");
		out[i] = cbor_get_int(h[i]);
	}
	*count = (uint32_t)n;
	return 0;
}

/* ---- dtypes ---- */

static const struct {
	const char *name;
	unsigned width;
} dtypes[] = {
        [TD_TGM_INT8] = {"int8", 1},
        [TD_TGM_INT16] = {"int16", 2},
        [TD_TGM_INT32] = {"int32", 4},
        [TD_TGM_INT64] = {"int64", 8},
        [TD_TGM_UINT8] = {"uint8", 1},
        [TD_TGM_UINT16] = {"uint16", 2},
        [TD_TGM_UINT32] = {"uint32", 4},
        [TD_TGM_UINT64] = {"uint64", 8},
        [TD_TGM_FLOAT16] = {"float16", 2},
        [TD_TGM_FLOAT32] = {"float32", 4},
        [TD_TGM_FLOAT64] = {"float64", 8},
        [TD_TGM_BFLOAT16] = {"bfloat16", 2},
        [TD_TGM_COMPLEX64] = {"complex64", 8},
        [TD_TGM_COMPLEX128] = {"complex128", 16},
        [TD_TGM_BITMASK] = {"bitmask", 0},
};
#define DTYPE_COUNT (sizeof(dtypes) / sizeof(dtypes[0]))

unsigned td_tgm_dtype_width(enum td_tgm_dtype t)
{
	return (unsigned)t < DTYPE_COUNT ? dtypes[t].width : 0;
}

const char *td_tgm_dtype_name(enum td_tgm_dtype t)
{
	return (unsigned)t < DTYPE_COUNT ? dtypes[t].name : NULL;
}

enum td_tgm_dtype td_tgm_dtype_from_name(const char *name)
{
	for (unsigned i = 1; i < DTYPE_COUNT; i++)
		if (!strcmp(dtypes[i].name, name))
			return (enum td_tgm_dtype)i;
	return TD_TGM_DTYPE_UNKNOWN;
}

/* ---- the descriptor ---- */

/* The keys upstream's deserialiser knows; anything else is a codec
 * parameter (counted, and searched by the naming chain). */
static const char *const known_keys[] = {
        "type",       "ndim",     "shape",  "strides",     "dtype",
        "byte_order", "encoding", "filter", "compression", "masks",
};
enum {
	KEY_TYPE,
	KEY_NDIM,
	KEY_SHAPE,
	KEY_STRIDES,
	KEY_DTYPE,
	KEY_ORDER,
	KEY_ENCODING,
	KEY_FILTER,
	KEY_COMPRESSION,
	KEY_MASKS,
	KEY_COUNT
};
#define KEYS_REQUIRED                                                          \
	(1u << KEY_TYPE | 1u << KEY_NDIM | 1u << KEY_SHAPE |                   \
	 1u << KEY_STRIDES | 1u << KEY_DTYPE | 1u << KEY_ENCODING |            \
	 1u << KEY_FILTER | 1u << KEY_COMPRESSION)

bool td__tgm_desc_key_known(const char *key)
{
	for (int k = 0; k < KEY_COUNT; k++)
		if (!strcmp(key, known_keys[k]))
			return true;
	return false;
}

static int known_key(const cbor_item_t *k)
{
	for (int i = 0; i < KEY_COUNT; i++)
		if (td__cbor_text_is(k, known_keys[i]))
			return i;
	return -1;
}

static int desc_masks(const cbor_item_t *v, struct td_tgm_desc *d,
                      struct td_err *err)
{
	struct cbor_pair *p;

	if (!cbor_isa_map(v))
		return td__err_set(err, TD_ERR_MALFORMED, "masks", false, 0, 0,
		                   "descriptor masks is not a map");
	d->has_masks = true;
	p = cbor_map_handle(v);
	for (size_t i = 0; i < cbor_map_size(v); i++) {
		cbor_item_t *off = td__cbor_map_get(p[i].value, "offset");

		if (off && cbor_isa_uint(off) &&
		    cbor_get_int(off) < d->masks_min_offset)
			d->masks_min_offset = cbor_get_int(off);
	}
	return 0;
}

static int desc_from_item(const cbor_item_t *it, struct td_tgm_desc *d,
                          struct td_err *err)
{
	struct cbor_pair *p;
	unsigned seen = 0;
	int rc = 0;

	if (!cbor_isa_map(it))
		return td__err_set(err, TD_ERR_MALFORMED, NULL, false, 0, 0,
		                   "descriptor is not a CBOR map");
	p = cbor_map_handle(it);
	for (size_t i = 0; i < cbor_map_size(it) && !rc; i++) {
		const cbor_item_t *v = p[i].value;
		int k = known_key(p[i].key);
		char w[TD_TGM_WORD_LEN];

		if (k < 0) {
			d->extra_count++;
			continue;
		}
		if (seen & (1u << k))
			return td__err_set(err, TD_ERR_MALFORMED, known_keys[k],
			                   false, 0, 0,
			                   "descriptor repeats a key");
		seen |= 1u << k;
		switch (k) {
		case KEY_NDIM:
			if (!cbor_isa_uint(v))
				goto wrong_type;
			d->ndim = cbor_get_int(v);
			break;
		case KEY_SHAPE:
			rc = uint_array(v, d->shape, &d->shape_count, "shape",
			                err);
			break;
		case KEY_STRIDES:
			rc = uint_array(v, d->strides, &d->strides_count,
			                "strides", err);
			break;
		case KEY_MASKS:
			rc = desc_masks(v, d, err);
			break;
		case KEY_ORDER:
			if (!word_get(v, w))
				goto wrong_type;
			if (!strcmp(w, "big"))
				d->byte_order = TD_TGM_ORDER_BIG;
			else if (!strcmp(w, "little"))
				d->byte_order = TD_TGM_ORDER_LITTLE;
			else
				return td__err_set(err, TD_ERR_MALFORMED,
				                   "byte_order", false, 0, 0,
				                   "descriptor byte_order is "
				                   "neither big nor little");
			break;
		default: {
			char *dst = k == KEY_TYPE       ? d->type
			            : k == KEY_DTYPE    ? d->dtype_name
			            : k == KEY_ENCODING ? d->encoding
			            : k == KEY_FILTER   ? d->filter
			                                : d->compression;
			if (!word_get(v, dst))
				goto wrong_type;
			if (k == KEY_DTYPE)
				d->dtype = td_tgm_dtype_from_name(dst);
			break;
		}
		}
		continue;
	wrong_type:
		return td__err_set(err, TD_ERR_MALFORMED, known_keys[k], false,
		                   0, 0, "descriptor key has the wrong type");
	}
	if (rc < 0)
		return rc;
	if ((seen & KEYS_REQUIRED) != KEYS_REQUIRED) {
		for (int k = 0; k < KEY_COUNT; k++)
			if ((KEYS_REQUIRED & ~seen) & (1u << k))
				return td__err_set(
				        err, TD_ERR_MALFORMED, known_keys[k],
				        false, 0, 0,
				        "descriptor lacks a required key");
	}
	return 0;
}

int td_tgm_desc_decode(const uint8_t *buf, size_t len, struct td_tgm_desc *d,
                       struct td_err *err)
{
	cbor_item_t *it;
	size_t used;
	int rc;

	memset(d, 0, sizeof(*d));
	d->masks_min_offset = UINT64_MAX;
	rc = td__tgm_cbor_load(buf, len, &it, &used, err);
	if (rc < 0)
		return rc;
	it = td__cbor_untag(it);
	rc = desc_from_item(it, d, err);
	cbor_decref(&it);
	d->cbor_len = used;
	return rc;
}

int td_tgm_object_decode_at(const struct td_tgm_frame *fr,
                            const uint8_t *cbor, uint64_t cbor_avail,
                            struct td_tgm_object *o, struct td_err *err)
{
	uint64_t at; /* the CBOR's offset in the frame */
	int rc;

	memset(o, 0, sizeof(*o));
	if (fr->type != TD_TGM_NTENSOR_FRAME)
		return td__err_set(err, TD_ERR_INVALID_ARGUMENT, "type", true,
		                   fr->type, fr->offset,
		                   "not a data-object frame");
	/* the walk checked 16 <= cbor_offset <= length - 20 (F10) */
	if (fr->cbor_after_payload) {
		at = fr->cbor_offset;
		o->cbor = cbor;
		o->cbor_len = fr->length - TD_TGM_NTENSOR_FOOTER_LEN -
		              fr->cbor_offset;
		if (cbor_avail < o->cbor_len)
			return td__err_set(err, TD_ERR_INVALID_ARGUMENT,
			                   "descriptor", true, cbor_avail,
			                   fr->offset + at,
			                   "descriptor bytes not all given");
		rc = td_tgm_desc_decode(o->cbor, o->cbor_len, &o->desc, err);
		if (rc < 0)
			goto fail;
		if (o->desc.cbor_len != o->cbor_len) {
			rc = td__err_set(err, TD_ERR_MALFORMED, "descriptor",
			                 true, o->cbor_len - o->desc.cbor_len,
			                 0, "bytes after the descriptor");
			goto fail;
		}
		o->data_offset = fr->offset + TD_TGM_FRAME_HEADER_LEN;
		o->data_len = fr->cbor_offset - TD_TGM_FRAME_HEADER_LEN;
	} else {
		if (fr->cbor_offset != TD_TGM_FRAME_HEADER_LEN)
			return td__err_set(err, TD_ERR_MALFORMED, "cbor_offset",
			                   true, fr->cbor_offset,
			                   fr->offset + fr->length - 20,
			                   "CBOR-before frame with cbor_offset "
			                   "other than 16");
		at = TD_TGM_FRAME_HEADER_LEN;
		o->cbor = cbor;
		rc = td_tgm_desc_decode(o->cbor,
		                        cbor_avail < fr->payload_len
		                                ? cbor_avail
		                                : fr->payload_len,
		                        &o->desc, err);
		if (rc < 0)
			goto fail;
		o->cbor_len = o->desc.cbor_len;
		o->data_offset = fr->offset + at + o->cbor_len;
		o->data_len = fr->payload_len - o->cbor_len;
	}
	if (o->desc.has_masks && o->desc.masks_min_offset != UINT64_MAX) {
		if (o->desc.masks_min_offset > o->data_len)
			return td__err_set(err, TD_ERR_MALFORMED, "masks", true,
			                   o->desc.masks_min_offset, fr->offset,
			                   "mask offset beyond the data "
			                   "region");
		o->data_len = o->desc.masks_min_offset;
	}
	return 0;
fail:
	/* descriptor offsets are relative to the CBOR: make them message
	 * offsets */
	if (err)
		err->offset += fr->offset + at;
	return rc;
}

int td_tgm_object_decode(const struct td_tgm_frame *fr, struct td_tgm_object *o,
                         struct td_err *err)
{
	uint64_t at = fr->cbor_after_payload ? fr->cbor_offset
	                                     : TD_TGM_FRAME_HEADER_LEN;
	const uint8_t *f;
	int rc;

	if (fr->type != TD_TGM_NTENSOR_FRAME)
		return td_tgm_object_decode_at(fr, NULL, 0, o, err);
	f = fr->payload - TD_TGM_FRAME_HEADER_LEN;
	/* cannot underflow: the walk checked cbor_offset <= length - 20 */
	rc = td_tgm_object_decode_at(fr, f + at, fr->length - 12 - 8 - at, o,
	                             err);
	if (rc == 0)
		o->data = f + (o->data_offset - fr->offset);
	return rc;
}

static int check_layout(const struct td_tgm_desc *d, uint64_t data_len,
                        struct td_err *err);

int td_tgm_desc_check_import(const struct td_tgm_desc *d, uint64_t data_len,
                             struct td_err *err)
{
	unsigned width = td_tgm_dtype_width(d->dtype);

	if (strcmp(d->type, "ntensor"))
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT, "type",
		                   false, 0, 0, "object type is not ntensor");
	if (!width || d->dtype == TD_TGM_BFLOAT16 ||
	    d->dtype == TD_TGM_COMPLEX64 || d->dtype == TD_TGM_COMPLEX128)
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT, "dtype",
		                   false, 0, 0,
		                   "dtype has no tensord equivalent");
	return check_layout(d, data_len, err);
}

int td_tgm_desc_check_plain(const struct td_tgm_desc *d, uint64_t data_len,
                            struct td_err *err)
{
	if (strcmp(d->type, "ntensor"))
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT, "type",
		                   false, 0, 0, "object type is not ntensor");
	if (!td_tgm_dtype_width(d->dtype))
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT, "dtype",
		                   false, 0, 0,
		                   "dtype has no whole-byte element");
	return check_layout(d, data_len, err);
}

/* The encoding, mask and layout part of the checks above. */
static int check_layout(const struct td_tgm_desc *d, uint64_t data_len,
                        struct td_err *err)
{
	uint64_t want = 1, stride = 1;
	unsigned width = td_tgm_dtype_width(d->dtype);

	if (strcmp(d->encoding, "none"))
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT,
		                   "encoding", false, 0, 0,
		                   "encoded objects are not supported");
	if (strcmp(d->filter, "none"))
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT,
		                   "filter", false, 0, 0,
		                   "filtered objects are not supported");
	if (strcmp(d->compression, "none"))
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT,
		                   "compression", false, 0, 0,
		                   "compressed objects are not supported");
	if (d->has_masks)
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT, "masks",
		                   false, 0, 0,
		                   "masked objects are not supported");
	if (d->ndim != d->shape_count || d->strides_count != d->shape_count)
		return td__err_set(err, TD_ERR_MALFORMED, "ndim", true, d->ndim,
		                   0, "ndim, shape and strides disagree");
	for (uint32_t k = d->shape_count; k-- > 0;) {
		if (d->strides[k] != stride)
			return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT,
			                   "strides", true, d->strides[k], 0,
			                   "strides are not C-contiguous");
		/* past an overflow no stride can match: the product check
		 * below reports it */
		if (td__mul_ovf(stride, d->shape[k], &stride))
			stride = 0;
	}
	for (uint32_t k = 0; k < d->shape_count; k++)
		if (td__mul_ovf(want, d->shape[k], &want))
			return td__err_set(err, TD_ERR_FORGED_LENGTH, "shape",
			                   false, 0, 0,
			                   "element count overflows");
	if (td__mul_ovf(want, width, &want))
		return td__err_set(err, TD_ERR_FORGED_LENGTH, "shape", false, 0,
		                   0, "byte count overflows");
	if (want != data_len)
		return td__err_set(err, TD_ERR_MALFORMED, "data", true,
		                   data_len, 0,
		                   "data length differs from shape x width");
	return 0;
}

/* ---- metadata frames ---- */

struct td_tgm_meta {
	cbor_item_t *root;
	cbor_item_t *base; /* borrowed from root; NULL when absent */
};

int td_tgm_meta_new(const uint8_t *cbor, size_t len, struct td_tgm_meta **out,
                    struct td_err *err)
{
	struct td_tgm_meta *m;
	cbor_item_t *root;
	int rc = td__tgm_cbor_load(cbor, len, &root, NULL, err);

	if (rc < 0)
		return rc;
	root = td__cbor_untag(root);
	if (!cbor_isa_map(root)) {
		cbor_decref(&root);
		return td__err_set(err, TD_ERR_MALFORMED, NULL, false, 0, 0,
		                   "metadata is not a CBOR map");
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		cbor_decref(&root);
		return -ENOMEM;
	}
	m->root = root;
	m->base = td__cbor_map_get(root, "base");
	if (m->base) {
		cbor_item_t **h;

		if (!cbor_isa_array(m->base))
			goto bad_base;
		h = cbor_array_handle(m->base);
		for (size_t i = 0; i < cbor_array_size(m->base); i++)
			if (!cbor_isa_map(h[i]))
				goto bad_base;
	}
	*out = m;
	return 0;
bad_base:
	td_tgm_meta_free(m);
	return td__err_set(err, TD_ERR_MALFORMED, "base", false, 0, 0,
	                   "metadata base is not an array of maps");
}

void td_tgm_meta_free(struct td_tgm_meta *m)
{
	if (!m)
		return;
	cbor_decref(&m->root);
	free(m);
}

size_t td_tgm_meta_base_count(const struct td_tgm_meta *m)
{
	return m && m->base ? cbor_array_size(m->base) : 0;
}

const cbor_item_t *td__tgm_meta_get(const struct td_tgm_meta *m,
                                    const char *key)
{
	return td__cbor_map_get(m->root, key);
}

const cbor_item_t *td__tgm_meta_base(const struct td_tgm_meta *m, size_t i)
{
	return i < td_tgm_meta_base_count(m) ? cbor_array_handle(m->base)[i]
	                                     : NULL;
}

int td_tgm_meta_saved(const struct td_tgm_meta *m, size_t i, uint8_t **out,
                      size_t *len)
{
	const cbor_item_t *base = td__tgm_meta_base(m, i), *v = NULL;
	struct cbor_pair *p;

	*out = NULL;
	*len = 0;
	if (!base || !cbor_isa_map(base))
		return 0;
	p = cbor_map_handle(base);
	for (size_t k = 0; k < cbor_map_size(base); k++) {
		/* a name that is no text is not the writer's: the user's */
		if ((td__cbor_text_is(p[k].key, "name") &&
		     cbor_isa_string(p[k].value)) ||
		    td__cbor_text_is(p[k].key, "_reserved_"))
			continue;
		if (v || !td__cbor_text_is(p[k].key, "tensord_meta"))
			return 0; /* the user's keys: they are the metadata */
		v = p[k].value;
	}
	if (!v)
		return 1; /* nothing but the name: no metadata */
	if (!cbor_isa_string(v) && !cbor_isa_bytestring(v))
		return 0;
	*len = td__cbor_string_copy(v, NULL);
	if (!*len)
		return 1;
	*out = malloc(*len);
	if (!*out) {
		*len = 0;
		return -ENOMEM;
	}
	td__cbor_string_copy(v, *out);
	return 1;
}
