/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the Zarr metadata reader (json/zarr.c), what
 * `tensorctl zarr import` runs over every array's zarr.json of a folder it
 * was given: any bytes go through td_zarr_json_parse() and, when they
 * parse, td_zarr_array_read(). A refusal must come with its reason and
 * one of the documented errnos; an accepted array must be one tensord
 * can hold (a known type, at most TD_ZARR_MAX_DIMS dimensions, a key
 * separator of '/' or '.'), and the zarr.json tensord writes for it must
 * read back as the same array (type, shape, attributes).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "td-zarr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* a is what the fuzzer's input read as: what tensord writes for it
 * reads back as a, little-endian with '/' keys. */
static void check_written(const struct td_zarr_array *a)
{
	struct json_object *o = td_zarr_v3_array(a), *back = NULL;
	struct td_zarr_array b = {0};
	const char *w = NULL;
	char why[256] = "", sep = 0;
	size_t len = 0;
	char *t;
	bool big = true;

	if (!o)
		return; /* out of memory */
	t = td_zarr_text(o, &len);
	json_object_put(o);
	if (!t)
		return;
	if (strlen(t) != len || td_zarr_json_parse(t, len, &back, &w) != 0)
		abort();
	if (td_zarr_array_read(back, &b, &big, &sep, why, sizeof(why)) != 0 ||
	    big || sep != '/' || b.type != a->type || b.ndim != a->ndim ||
	    memcmp(b.shape, a->shape, a->ndim * sizeof(a->shape[0])))
		abort();
	/* attributes: absent reads back as {} */
	if (a->attrs ? !json_object_equal(a->attrs, b.attrs)
	             : json_object_object_length(b.attrs) != 0)
		abort();
	td_zarr_array_fini(&b);
	json_object_put(back);
	free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct json_object *meta = NULL;
	struct td_zarr_array a = {0};
	char why[256] = "", key[2 + 2 * TD_ZARR_MAX_DIMS + 1], sep = 0;
	const char *w = NULL;
	uint64_t bytes;
	bool big = false;
	int rc;

	rc = td_zarr_json_parse((const char *)data, size, &meta, &w);
	if (rc < 0) {
		if (meta || !w || !*w || (rc != -EBADMSG && rc != -ENOMEM))
			abort();
		return 0;
	}
	if (rc != 0 || !meta)
		abort();
	rc = td_zarr_array_read(meta, &a, &big, &sep, why, sizeof(why));
	json_object_put(meta);
	if (rc < 0) {
		if (!why[0] || (rc != -EBADMSG && rc != -ENOTSUP))
			abort();
		td_zarr_array_fini(&a);
		return 0;
	}
	if (rc != 0 || !a.type || a.ndim > TD_ZARR_MAX_DIMS ||
	    (sep != '/' && sep != '.') || (big && a.type->size == 1))
		abort();
	rc = td_zarr_chunk_bytes(&a, &bytes);
	if (rc != 0 && rc != -EOVERFLOW)
		abort();
	for (int v2 = 0; v2 < 2; v2++) {
		rc = td_zarr_chunk_key(&a, v2, key, sizeof(key));
		/* the key buffer the importer and the HTTP store use fits
		 * every key of TD_ZARR_MAX_DIMS dimensions */
		if (rc != 0 && rc != 1)
			abort();
		if (rc == 1 && strlen(key) >= sizeof(key))
			abort();
	}
	check_written(&a);
	td_zarr_array_fini(&a);
	return 0;
}
