/* SPDX-License-Identifier: MIT */
/*
 * Tensogram `.tgm` contents: the type-9 data-object descriptor, metadata
 * frames, the naming chain, and writing one buffered message
 * (../shared/specs/tensogram.md §6, §7, §10, §15, §16, §18 naming).
 * Sans-I/O like tgm.h, but CBOR goes through libcbor, which allocates:
 * these calls are for tools and importers, never a daemon hot path.
 * One file per job: tgm-cbor.c (the bounded check below), tgm-desc.c
 * (descriptors, import check, metadata frames), tgm-name.c (naming),
 * tgm-write.c (canonical CBOR, the message writer). Their JSON form
 * lives outside proto/, in json/ (json-c).
 *
 * Every CBOR input is first checked by a bounded, allocation-free pass
 * (libcbor's streaming decoder) before libcbor builds a tree, because
 * libcbor allocates a definite array's slots from its declared count: a
 * nine-byte input could otherwise ask for gigabytes. The pass refuses:
 *   TRUNCATED (-ENODATA)        the item ends past the input, or a
 *                               count or length is larger than the
 *                               bytes left (every strict prefix of a
 *                               valid item is TRUNCATED)
 *   MALFORMED (-EBADMSG)        not well-formed CBOR (reserved bytes, a
 *                               stray break, a chunk of the wrong type,
 *                               an odd indefinite map, simple values)
 *   INVALID_UTF8 (-EILSEQ)      a text string that is not UTF-8
 *   UNSUPPORTED_REQUIREMENT     nesting deeper than TD_TGM_CBOR_MAX_DEPTH
 *   (-ENOTSUP)                  or more than TD_TGM_CBOR_MAX_ITEMS items
 */
#ifndef TD_PROTO_TGM_DESC_H
#define TD_PROTO_TGM_DESC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "tgm.h"

/* Caps on hostile CBOR: nesting (arrays, maps, tags) and total items. */
#define TD_TGM_CBOR_MAX_DEPTH 32
#define TD_TGM_CBOR_MAX_ITEMS (1u << 20)
/* Most dimensions a descriptor may have here (blob and wire allow 16). */
#define TD_TGM_MAX_DIMS 16
/* Room for a dtype / codec name; a longer one is kept cut with "...". */
#define TD_TGM_WORD_LEN 32

enum td_tgm_dtype {
	TD_TGM_DTYPE_UNKNOWN = 0,
	TD_TGM_INT8,
	TD_TGM_INT16,
	TD_TGM_INT32,
	TD_TGM_INT64,
	TD_TGM_UINT8,
	TD_TGM_UINT16,
	TD_TGM_UINT32,
	TD_TGM_UINT64,
	TD_TGM_FLOAT16,
	TD_TGM_FLOAT32,
	TD_TGM_FLOAT64,
	TD_TGM_BFLOAT16,
	TD_TGM_COMPLEX64,
	TD_TGM_COMPLEX128,
	TD_TGM_BITMASK,
};

enum td_tgm_byte_order {
	TD_TGM_ORDER_NATIVE = 0, /* key absent: the reader's order (§15) */
	TD_TGM_ORDER_BIG,
	TD_TGM_ORDER_LITTLE,
};

/* A decoded descriptor: a value copy, owns nothing. */
struct td_tgm_desc {
	char type[TD_TGM_WORD_LEN]; /* "ntensor" */
	char dtype_name[TD_TGM_WORD_LEN];
	enum td_tgm_dtype dtype; /* UNKNOWN for any other name */
	enum td_tgm_byte_order byte_order;
	char encoding[TD_TGM_WORD_LEN];
	char filter[TD_TGM_WORD_LEN];
	char compression[TD_TGM_WORD_LEN];
	uint64_t ndim;          /* the ndim key, as written */
	uint32_t shape_count;   /* elements of shape[] */
	uint32_t strides_count; /* elements of strides[] */
	uint64_t shape[TD_TGM_MAX_DIMS];
	uint64_t strides[TD_TGM_MAX_DIMS]; /* in elements */
	bool has_masks;
	/* smallest mask offset (relative to the data region), UINT64_MAX
	 * when there is no mask with an offset */
	uint64_t masks_min_offset;
	uint32_t extra_count; /* keys beyond the ones above: codec params */
	uint64_t cbor_len;    /* bytes of the one CBOR item decoded */
};

/* One data object of a message: its descriptor and data region. */
struct td_tgm_object {
	struct td_tgm_desc desc;
	const uint8_t *data; /* borrows the message */
	uint64_t data_len;
	uint64_t data_offset; /* in the message */
	const uint8_t *cbor;  /* the descriptor's bytes */
	uint64_t cbor_len;
};

/*
 * Check that buf starts with one well-formed CBOR item within the caps
 * above; *item_len (may be NULL) gets its length. Trailing bytes are not
 * looked at. Returns 0 or -errno (see the list at the top) with *err.
 */
int td_tgm_cbor_check(const uint8_t *buf, size_t len, size_t *item_len,
                      struct td_err *err);

/*
 * Decode a type-9 descriptor at buf (one CBOR map; trailing bytes are
 * ignored, d->cbor_len says where it ended). Required keys: type, ndim,
 * shape, strides, dtype, encoding, filter, compression; byte_order and
 * masks are optional; other keys are counted in extra_count. Returns 0, a
 * CBOR error from td_tgm_cbor_check(), -EBADMSG for a non-map, a missing
 * key or a key of the wrong type (err->field names it), -ENOTSUP for more
 * than TD_TGM_MAX_DIMS dimensions.
 */
int td_tgm_desc_decode(const uint8_t *buf, size_t len, struct td_tgm_desc *d,
                       struct td_err *err);

/*
 * Split a frame from td_tgm_walk_next() (type 9) into data and descriptor
 * (§6): CBOR after the data (flag bit 0) or before it. With masks the
 * data ends at the first mask. The descriptor must fill its region
 * exactly in the CBOR-after layout. Returns 0 or the descriptor's -errno;
 * -EINVAL for a frame of another type; -EBADMSG for a CBOR-before frame
 * whose cbor_offset is not 16 or a mask offset beyond the data region.
 */
int td_tgm_object_decode(const struct td_tgm_frame *fr, struct td_tgm_object *o,
                         struct td_err *err);
/*
 * The same for a reader that does not hold the frame (a file read with
 * pread): cbor holds cbor_avail bytes of the frame from the descriptor's
 * first byte on (cbor_offset with the CBOR after the data, 16 before it;
 * fr->payload is not used). CBOR after: the whole descriptor region must
 * be given (-EINVAL otherwise); CBOR before: up to the payload's end, a
 * shorter prefix is decoded as the whole (a descriptor longer than it is
 * TRUNCATED). o->data is NULL; data_offset and data_len say where the
 * data lies. Returns as td_tgm_object_decode().
 */
int td_tgm_object_decode_at(const struct td_tgm_frame *fr,
                            const uint8_t *cbor, uint64_t cbor_avail,
                            struct td_tgm_object *o, struct td_err *err);

/*
 * The tensord import subset (§15): type ntensor, a dtype with a blob code,
 * ndim == len(shape) == len(strides), C-contiguous strides, encoding,
 * filter and compression "none", no masks, and data_len equal to the
 * element count times the width. Returns 0, -ENOTSUP naming the refused
 * feature in err->field (its value is in *d), -EBADMSG for an
 * inconsistent descriptor, -EOVERFLOW for a size that overflows.
 */
int td_tgm_desc_check_import(const struct td_tgm_desc *d, uint64_t data_len,
                             struct td_err *err);

/*
 * The same checks for a reader that keeps the element type (Zarr export):
 * any dtype with whole-byte elements (bfloat16 and complex too, not
 * bitmask); the rest as td_tgm_desc_check_import().
 */
int td_tgm_desc_check_plain(const struct td_tgm_desc *d, uint64_t data_len,
                            struct td_err *err);

/* Width in bytes of a dtype (bitmask: 0, packed bits), 0 when unknown. */
unsigned td_tgm_dtype_width(enum td_tgm_dtype t);
/* Wire name ("float32"), NULL for UNKNOWN. */
const char *td_tgm_dtype_name(enum td_tgm_dtype t);
/* The dtype of a wire name, UNKNOWN when none. */
enum td_tgm_dtype td_tgm_dtype_from_name(const char *name);

/* ---- metadata frames (types 1, 7, 8) ---- */

struct td_tgm_meta;

/*
 * Decode a metadata frame's CBOR (its whole payload). Returns 0 and a new
 * handle in *out (td_tgm_meta_free() it), a CBOR error, -EBADMSG when it
 * is not a map or `base` is not an array of maps, -ENOMEM.
 */
int td_tgm_meta_new(const uint8_t *cbor, size_t len, struct td_tgm_meta **out,
                    struct td_err *err);
/* Accepts NULL. */
void td_tgm_meta_free(struct td_tgm_meta *m);
/* Entries of `base` (0 when absent). */
size_t td_tgm_meta_base_count(const struct td_tgm_meta *m);
/*
 * The metadata tensord's writer kept whole in base[i] as `tensord_meta`
 * (metadata that is not a JSON object: text, or bytes not UTF-8), when
 * base[i] holds nothing else but `name` (text) and `_reserved_`: its
 * bytes in *out (malloc'ed, *len of them; NULL and 0 when base[i] has no
 * `tensord_meta`: no metadata), 1. 0 when base[i] holds other keys (they
 * are the metadata, as JSON: a `name` not text among them) or
 * `tensord_meta` twice; -ENOMEM.
 */
int td_tgm_meta_saved(const struct td_tgm_meta *m, size_t i, uint8_t **out,
                      size_t *len);

/*
 * The naming chain (§18): look up variable_key (may be NULL), `name`,
 * `mars.param`, `param`, `mars.shortName`, `shortName` in base[i] minus
 * `_reserved_`, shallow-merged with the top-level keys of the descriptor
 * at desc_cbor that base[i] lacks (desc_cbor may be NULL). A text value is
 * used verbatim, an integer as decimal, a boolean as True/False; null,
 * floats, byte strings, maps and arrays are misses. Nothing found:
 * "object_<i>". The raw (unsanitised) name goes to out (cut to cap - 1
 * bytes, NUL-terminated). Returns 1 when a key matched, 0 for object_<i>,
 * or a CBOR error from desc_cbor.
 */
int td_tgm_object_name(const struct td_tgm_meta *m, size_t i,
                       const uint8_t *desc_cbor, size_t desc_len,
                       const char *variable_key, char *out, size_t cap,
                       struct td_err *err);

/*
 * Sanitise a name into a tensord tensor name (NUL-terminated in out, at
 * most cap - 1 bytes). First the spec's rules (§18): '/' and '\\' and
 * control characters become '_', empty becomes '_', all-dots / "__x" /
 * "zarr.json" get the prefix "v_". Then the daemon's name rules
 * (proto/wire.h): every byte outside [A-Za-z0-9._:@+-] becomes '_' (one
 * '_' per UTF-8 sequence), and the second '.' of any ".." becomes '_'.
 */
void td_tgm_name_sanitize(const char *in, char *out, size_t cap);

/*
 * The spec's rules alone (§18), for Zarr node names: '/' '\\' and control
 * characters become '_', empty becomes '_', all-dots / "__x" /
 * "zarr.json" get the prefix "v_"; other bytes (UTF-8) stay. Cut to
 * cap - 1 bytes at a character boundary, NUL-terminated.
 */
void td_tgm_node_name(const char *in, char *out, size_t cap);

/*
 * Make names[0..count) distinct in object order (§18, tensord rule): the
 * first occurrence keeps its name, later ones get _1, _2, ... per base
 * name, a candidate already taken keeps being counted up until unused.
 * Each names[i] is a buffer of cap bytes; a candidate longer than cap - 1
 * bytes has its base cut (at a UTF-8 character's start) to leave room
 * for its suffix, as a node name is cut to a file name's 255 bytes.
 * Returns 0, -ENAMETOOLONG when a suffix alone does not fit in cap,
 * -ENOMEM.
 */
int td_tgm_names_unique(char **names, size_t count, size_t cap);
/* The same, its hash tables seeded (the daemon's random name seed: a
 * publisher cannot pick names that all collide). */
int td_tgm_names_unique_seeded(char **names, size_t count, size_t cap,
			       uint64_t seed);
/*
 * The same rule over names that come in batches (a stream's messages):
 * td_tgm_names_add() makes names[0..count) distinct from each other and
 * from every name added before, as td_tgm_names_unique() would over all
 * of them at once, in time linear in the batch (hash sets; the names
 * before are not looked at again). The set borrows each names[i] (keep
 * them until td_tgm_names_free()). 0, -ENAMETOOLONG or -ENOMEM.
 */
struct td_tgm_names;
int td_tgm_names_new(size_t cap, uint64_t seed, struct td_tgm_names **out);
int td_tgm_names_add(struct td_tgm_names *s, char **names, size_t count);
void td_tgm_names_free(struct td_tgm_names *s);

/* ---- writing (§16) ---- */

/* One object to write. */
struct td_tgm_enc_object {
	enum td_tgm_dtype dtype; /* a dtype with a width */
	uint32_t ndim;           /* <= TD_TGM_MAX_DIMS */
	const uint64_t *shape;
	const void *data;  /* element bytes, little-endian */
	uint64_t data_len; /* == product(shape) * width */
	const char *name;  /* goes into base[i]["name"]; may be NULL */
	/*
	 * Optional user attributes (may be NULL): one CBOR map whose
	 * entries become base[i] entries (except "_reserved_"; "name" is
	 * overridden by name). json/ makes it from a JSON object
	 * (td_json_to_cbor()).
	 */
	const uint8_t *attrs;
	size_t attrs_len;
	/*
	 * Optional opaque metadata, used only without attrs: anything
	 * non-empty is kept whole as base[i]["tensord_meta"], text when
	 * UTF-8, else a byte string.
	 */
	const void *meta;
	size_t meta_len;
};

/*
 * Encode one buffered, hashed wire-v3 message (§16) holding objs[0..count)
 * (count >= 1): preamble (flags 0x0095), HeaderMetadata, HeaderIndex,
 * HeaderHash, one CBOR-after type-9 frame per object (byte_order
 * "little", no codecs, C-contiguous strides), postamble; canonical CBOR;
 * zero padding to 8. encoder_version goes into _reserved_.encoder.
 * Returns 0 with a malloc'ed message in *out / *out_len, -EINVAL for an
 * unusable object (err->field says which part: attrs that are not one
 * well-formed CBOR map too), -ENOMEM.
 */
int td_tgm_message_encode(const struct td_tgm_enc_object *objs, size_t count,
                          const char *encoder_version, uint8_t **out,
                          size_t *out_len, struct td_err *err);

/*
 * Where td_tgm_message_write() sends the message, in order. begin and
 * done may be NULL.
 */
struct td_tgm_sink {
	/* Once, before the first byte: the message's total length. 0, or a
	 * negative errno that stops the write. */
	int (*begin)(void *ctx, uint64_t total_len);
	/* The next n bytes (n >= 1): 0, or a negative errno that stops the
	 * write. p may point into an object's data. */
	int (*write)(void *ctx, const void *p, size_t n);
	/* The writer is done with objs[obj].data[p .. p + n) for now (it
	 * was hashed, or written): its pages may be dropped (it reads them
	 * again, at most once more, to write them). */
	void (*done)(void *ctx, size_t obj, const void *p, size_t n);
	void *ctx;
};

/*
 * The same message as td_tgm_message_encode(), byte for byte, written
 * through sink with memory independent of the objects' data: a first pass
 * hashes each object's data where it is (no copy), the headers are built,
 * then the bytes go out in order, data straight from objs[i].data in
 * pieces of at most TD_TGM_WRITE_CHUNK bytes (interior pieces aligned to
 * it in memory), sink->done() after each piece of either pass. Returns 0
 * with the total length in *out_len (may be NULL), -EINVAL as
 * td_tgm_message_encode(), -ENOMEM, or the first negative errno begin or
 * write returned (err says "the output refused the bytes").
 */
#define TD_TGM_WRITE_CHUNK ((size_t)4 << 20)
int td_tgm_message_write(const struct td_tgm_enc_object *objs, size_t count,
                         const char *encoder_version,
                         const struct td_tgm_sink *sink, uint64_t *out_len,
                         struct td_err *err);

#endif
