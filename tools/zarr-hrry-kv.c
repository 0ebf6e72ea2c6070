/* SPDX-License-Identifier: MIT */
/* A Hurray file's KV as JSON, for zarr export --from FILE.hrry
 * (cmd-zarr.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "hrry.h"
#include "tensorctl.h"

/* A KV value as JSON (bytes as hex, non-finite floats as sentinels). */
static struct json_object *kv_json(const struct td_hrry_kv_value *v)
{
	struct json_object *a;
	char *hex;

	switch (v->kind) {
	case TD_HRRY_KV_STRING:
		return json_object_new_string_len((const char *)v->data,
		                                  (int)v->data_len);
	case TD_HRRY_KV_INT64:
		return json_object_new_int64(v->i64_value);
	case TD_HRRY_KV_UINT64:
		return json_object_new_uint64(v->u64_value);
	case TD_HRRY_KV_FLOAT64:
		return json_object_new_double(v->f64_value);
	case TD_HRRY_KV_BOOL:
		return json_object_new_boolean(v->bool_value);
	case TD_HRRY_KV_BYTES:
		hex = malloc(2 * v->data_len + 1);
		if (!hex)
			return NULL;
		hex[0] = 0;
		for (size_t i = 0; i < v->data_len; i++)
			sprintf(hex + 2 * i, "%02x", v->data[i]);
		a = json_object_new_string(hex);
		free(hex);
		return a;
	case TD_HRRY_KV_ARRAY:
		a = json_object_new_array();
		for (size_t i = 0; i < v->item_count; i++)
			json_object_array_add(a, kv_json(&v->items[i]));
		return a;
	}
	return NULL;
}

struct json_object *tctl_hrry_kv_json(const struct td_hrry_file_reader *r)
{
	struct json_object *o;
	uint64_t n = 0;

	td_hrry_file_reader_kv_count(r, &n);
	if (!n)
		return NULL;
	o = json_object_new_object();
	for (uint64_t i = 0; i < n; i++) {
		struct td_hrry_kv_entry e;
		char *key;

		td_hrry_file_reader_kv_entry(r, i, &e);
		/* the whole key: up to 65535 bytes (hurray.md), no NUL in
		 * it; a fixed buffer cut long keys and merged two that
		 * shared its length of prefix into one */
		key = strndup(e.key, e.key_len);
		if (!key) {
			json_object_put(o);
			return NULL;
		}
		json_object_object_add(o, key, kv_json(&e.value));
		free(key);
	}
	return o;
}
