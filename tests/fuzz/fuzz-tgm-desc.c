/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the .tgm CBOR readers (proto/tgm-*, and their
 * JSON form in json/): the input
 * is one CBOR item (a type-9 descriptor or a metadata frame body), or
 * anything. The bounded check and the descriptor decoder must agree, an
 * accepted item must lie inside the input, its JSON must be a whole
 * NUL-terminated string, and naming/attributes must never misbehave. As
 * JSON, the input converts only into one CBOR map that passes the check.
 * An object's Zarr attributes (zarr export) read back (zarr import).
 * A failure must always come with a reason.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "td-json.h"
#include "td-zarr.h"
#include "tgm-desc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* base[i] as zarr export writes its attributes: the reader zarr import
 * uses takes them back. */
static void zarr_attrs(const struct td_tgm_meta *m, size_t i)
{
	struct json_object *o = NULL, *back = NULL;
	struct td_err e = {0};
	const char *why = NULL;
	size_t tl;
	char *t;
	int rc = td_json_tgm_zarr_attrs(m, i, &o, &e);

	if (rc < 0) {
		if (rc != -ENOMEM && !e.reason)
			abort();
		return;
	}
	t = td_zarr_text(o, &tl);
	if (t && td_zarr_json_parse(t, tl, &back, &why) != 0)
		abort();
	json_object_put(back);
	json_object_put(o);
	free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct td_tgm_desc d;
	struct td_tgm_meta *m = NULL;
	struct td_err e = {0};
	size_t n = 0, jl, sl;
	uint8_t *saved;
	char *json, name[64], clean[64];
	int rc, rd;

	rc = td_tgm_cbor_check(data, size, &n, &e);
	if (rc == 0 && (n == 0 || n > size))
		abort();
	if (rc < 0 && !e.reason)
		abort();
	memset(&e, 0, sizeof(e));
	rd = td_tgm_desc_decode(data, size, &d, &e);
	if (rd < 0 && !e.reason)
		abort();
	/* a descriptor decodes only when its CBOR is well-formed */
	if (rd == 0 && (rc != 0 || d.cbor_len != n ||
			d.shape_count > TD_TGM_MAX_DIMS ||
			d.strides_count > TD_TGM_MAX_DIMS ||
			strnlen(d.dtype_name, TD_TGM_WORD_LEN) ==
				TD_TGM_WORD_LEN))
		abort();
	if (rd == 0)
		(void)td_tgm_desc_check_import(&d, size, &e);
	if (rc == 0) {
		rd = td_json_from_cbor(data, size, &json, &jl, &e);
		if (rd == 0 && strlen(json) != jl)
			abort();
		if (rd == 0)
			free(json);
		else if (rd != -ENOMEM && !(rd == -EBADMSG && e.reason))
			abort();
	}
	/* the input as JSON: what converts is a map the writer takes */
	{
		uint8_t *cbor = NULL;
		size_t cl = 0, used = 0;

		rd = td_json_to_cbor(data, size, &cbor, &cl);
		if (rd == 1 && (td_tgm_cbor_check(cbor, cl, &used, NULL) != 0 ||
		                used != cl || (cbor[0] & 0xe0) != 0xa0))
			abort();
		if (rd != 1 && cbor)
			abort();
		free(cbor);
	}
	if (td_tgm_meta_new(data, size, &m, &e) == 0) {
		size_t count = td_tgm_meta_base_count(m);

		for (size_t i = 0; i < count + 1 && i < 4; i++) {
			if (td_json_tgm_attrs(m, i, &json, &jl, &e) == 0) {
				if (strlen(json) != jl)
					abort();
				free(json);
			}
			/* tensorctl load's metadata: kept bytes or JSON */
			rd = td_tgm_meta_saved(m, i, &saved, &sl);
			if ((rd < 0 && rd != -ENOMEM) ||
			    (rd == 0 && (saved || sl)) || (!saved) != (!sl) ||
			    (i >= count && rd))
				abort();
			if (saved && sl)
				saved[sl - 1] ^= saved[0]; /* all of it is ours */
			free(saved);
			zarr_attrs(m, i);
			rd = td_tgm_object_name(m, i, data, size, "a.b", name,
						sizeof(name), &e);
			if (rd >= 0 && strlen(name) >= sizeof(name))
				abort();
			if (rd >= 0) {
				td_tgm_name_sanitize(name, clean,
						     sizeof(clean));
				if (!clean[0] || strstr(clean, ".."))
					abort();
			}
		}
		td_tgm_meta_free(m);
	}
	return 0;
}
