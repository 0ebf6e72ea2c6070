/* SPDX-License-Identifier: MIT */
/*
 * JSON for the tools and the benchmark, through json-c: printing strings,
 * the JSON form of .tgm CBOR (descriptors, metadata attributes) and the
 * CBOR form of a JSON object (user metadata written into a .tgm). It lives
 * outside proto/ so that the codecs stay free of a JSON library.
 *
 * CBOR -> JSON rules (compact, keys sorted by their bytes, shorter first
 * on a common prefix):
 *   unsigned and negative integers   exact decimal, -2^64 .. 2^64-1
 *   floats                           the shortest text that reads back as
 *                                    the same double, ".0" added when it
 *                                    would read as an integer; NaN,
 *                                    +-Infinity as the strings "NaN",
 *                                    "Infinity", "-Infinity"
 *   text                             JSON string: '"' '\\' and \b \t \n
 *                                    \f \r escaped, other bytes below 0x20
 *                                    as \u00xx, '/' and non-ASCII as is
 *   byte strings                     lower-case hex text
 *   tags                             dropped (their content stays)
 *   null, undefined                  null
 *   map keys                         text as it is; a scalar key becomes
 *                                    its own JSON text; a key that is an
 *                                    array, map or tag, or text holding a
 *                                    NUL byte, is refused (-EBADMSG)
 *   a repeated key (after the above) keeps its first value
 */
#ifndef TD_JSON_TD_JSON_H
#define TD_JSON_TD_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"

struct td_tgm_meta;

/* s[0, len) as a JSON string literal (the text rules above). */
void td_json_str(FILE *f, const char *s, size_t len);
/* NUL-terminated convenience; NULL prints null. */
void td_json_cstr(FILE *f, const char *s);
/* A double as "%.17g"; non-finite values print as null. */
void td_json_double(FILE *f, double d);

/*
 * Any one CBOR item (checked by td_tgm_cbor_check()) as JSON text. *json
 * is malloc'ed and NUL-terminated, *json_len (may be NULL) excludes the
 * NUL. Returns 0, a CBOR error with *err, -EBADMSG for a refused map key
 * (err->reason says which), -ENOMEM.
 */
int td_json_from_cbor(const uint8_t *cbor, size_t len, char **json,
                      size_t *json_len, struct td_err *err);

/*
 * base[i] of a metadata frame (td_tgm_meta_new()) without `_reserved_`,
 * as a JSON object text; "{}" when m is NULL or base has no entry i.
 * Same rules, results and ownership as td_json_from_cbor().
 */
int td_json_tgm_attrs(const struct td_tgm_meta *m, size_t i, char **json,
                      size_t *json_len, struct td_err *err);

/*
 * The same as json-c trees (*out a new reference; see td-zarr.h): base[i]
 * without `_reserved_` ({} when none); the message's `_extra_` map ({}
 * when absent or not a map); the keys of a type-9 descriptor that are no
 * descriptor field (codec parameters), *out NULL when there are none.
 */
struct json_object;
int td_json_tgm_attrs_obj(const struct td_tgm_meta *m, size_t i,
                          struct json_object **out, struct td_err *err);
/*
 * base[i] as its Zarr array's attributes (*out a new reference): the
 * metadata `tensorctl load` gives the object (td_tgm_meta_saved(), else
 * td_json_tgm_attrs()) through td_zarr_tensor_attrs(), so that `zarr
 * import` gives back the very same bytes: its keys where the JSON reader
 * takes the text back as it is; else kept whole as _tensord_meta or
 * _tensord_meta_hex (an integer below -2^63, text that is not UTF-8, a
 * key of ours).
 */
int td_json_tgm_zarr_attrs(const struct td_tgm_meta *m, size_t i,
                           struct json_object **out, struct td_err *err);
int td_json_tgm_extra_obj(const struct td_tgm_meta *m,
                          struct json_object **out, struct td_err *err);
int td_json_tgm_params_obj(const uint8_t *desc, size_t len,
                           struct json_object **out, struct td_err *err);

/*
 * A JSON object text (RFC 8259, read by json-c in strict mode with UTF-8
 * checked, at most TD_TGM_CBOR_MAX_DEPTH levels of values) as one CBOR map
 * in *cbor (malloc'ed). Returns 1 when converted; 0 when the text is
 * not such an object or holds what json-c would not keep exactly, and
 * the caller keeps the text whole instead: an integer beyond what
 * json-c holds (-2^63 .. 2^64-1; it clamps to the ends), NaN
 * or Infinity, an escaped NUL (json-c cuts keys there), text that is not
 * UTF-8 (json-c lets encoded surrogates through); -E2BIG for more than
 * TD_TGM_CBOR_MAX_ITEMS CBOR items (keys count), which the .tgm reader
 * and writer refuse; -ENOMEM. Where json-c
 * reads more than RFC 8259: a repeated key keeps its last value, a lone
 * surrogate escape reads as U+FFFD, "1." is a number, '...' a string,
 * raw tabs may stand in strings.
 */
int td_json_to_cbor(const void *text, size_t len, uint8_t **cbor,
                    size_t *cbor_len);

#endif
