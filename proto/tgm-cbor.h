/* SPDX-License-Identifier: MIT */
/*
 * Internal to the .tgm CBOR code (tgm-cbor.c, tgm-desc.c, tgm-name.c,
 * tgm-write.c) and the JSON bridge outside proto/ (json/): loading a
 * checked item into libcbor's tree and reading that tree. Not a public
 * header: it exposes libcbor's types.
 */
#ifndef TD_PROTO_TGM_CBOR_H
#define TD_PROTO_TGM_CBOR_H

#include <cbor.h>
#include <sys/types.h>

#include "tgm-desc.h"

/*
 * td_tgm_cbor_check(), then libcbor's tree of that one item in *out
 * (cbor_decref() it); *used (may be NULL) gets the item's length.
 * Returns 0, a check error, -EBADMSG when libcbor refuses, -ENOMEM.
 */
int td__tgm_cbor_load(const uint8_t *buf, size_t len, cbor_item_t **out,
                      size_t *used, struct td_err *err);
/*
 * it with every tag (major type 6) replaced by the item it tags, as
 * upstream's deserialiser reads them (tensogram.md §15: tags are skipped
 * over). Takes it and returns the item to keep; the readers of
 * descriptors and metadata call it, the writer keeps a user's tags.
 */
cbor_item_t *td__cbor_untag(cbor_item_t *it);

/* Text (definite or chunked) into buf (cut to cap - 1, NUL-terminated,
 * NUL bytes kept); its full length, or -1 when it is not text. */
ssize_t td__cbor_text_get(const cbor_item_t *it, char *buf, size_t cap);
/* Does a text item equal key (NUL-free, shorter than 64 bytes)? */
bool td__cbor_text_is(const cbor_item_t *it, const char *key);
/* First value under a text key; NULL when none or m is not a map. */
cbor_item_t *td__cbor_map_get(const cbor_item_t *m, const char *key);
/*
 * The bytes of a text or byte string (definite or chunked), in one piece:
 * returns their count and, when dst is not NULL, copies them there (the
 * caller sized dst with a first call with dst NULL).
 */
size_t td__cbor_string_copy(const cbor_item_t *it, uint8_t *dst);

/* base[i] of a metadata frame, borrowed from m; NULL when none. */
const cbor_item_t *td__tgm_meta_base(const struct td_tgm_meta *m, size_t i);

/* The top-level value under key of a metadata frame; NULL when none. */
const cbor_item_t *td__tgm_meta_get(const struct td_tgm_meta *m,
                                    const char *key);

/* Is key one of the descriptor keys upstream's deserialiser knows? */
bool td__tgm_desc_key_known(const char *key);

#endif
