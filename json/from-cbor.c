/* SPDX-License-Identifier: MIT */
/*
 * The JSON form of .tgm CBOR (rules in td-json.h): libcbor's tree (loaded
 * by proto/tgm-cbor.c after the bounded check) into json-c objects, then
 * json-c's serialiser. Depth is bounded by the check.
 */
#include "td-json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json-int.h"
#include "td-zarr.h"
#include "tgm-cbor.h"

/* A conversion under way: the first refusal's reason. */
struct conv {
	const char *why;
};

static int item(struct conv *c, const cbor_item_t *it, bool attrs,
                struct json_object **out);

/* Shortest text that reads back as the same double, kept a float. */
static struct json_object *finite_double(double v)
{
	char tmp[48];

	for (int prec = 15; prec <= 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
		if (strtod(tmp, NULL) == v)
			break;
	}
	if (!strpbrk(tmp, ".eE"))
		strcat(tmp, ".0"); /* keep it a float for the reader */
	return json_object_new_double_s(v, tmp);
}

static int number(const cbor_item_t *it, struct json_object **out)
{
	uint64_t n = cbor_get_int(it);
	char tmp[32];

	if (cbor_isa_uint(it)) {
		*out = json_object_new_uint64(n);
	} else if (n <= INT64_MAX) {
		*out = json_object_new_int64(-1 - (int64_t)n);
	} else {
		/* -1 - n is below int64: json-c keeps it only as text;
		 * n + 1 overflows only for the very last value */
		if (n == UINT64_MAX)
			snprintf(tmp, sizeof(tmp), "-18446744073709551616");
		else
			snprintf(tmp, sizeof(tmp), "-%llu",
			         (unsigned long long)n + 1);
		*out = json_object_new_double_s(-1.0 - (double)n, tmp);
	}
	return *out ? 0 : -ENOMEM;
}

static int float_ctrl(const cbor_item_t *it, struct json_object **out)
{
	double v;

	if (cbor_float_ctrl_is_ctrl(it)) {
		if (!cbor_is_bool(it)) {
			*out = NULL; /* null, undefined: JSON null */
			return 0;
		}
		*out = json_object_new_boolean(cbor_get_bool(it));
		return *out ? 0 : -ENOMEM;
	}
	v = cbor_float_get_float(it);
	if (isnan(v))
		*out = json_object_new_string("NaN");
	else if (isinf(v))
		*out = json_object_new_string(v > 0 ? "Infinity" : "-Infinity");
	else
		*out = finite_double(v);
	return *out ? 0 : -ENOMEM;
}

/* Text as it is, byte strings as lower-case hex. */
static int string(const cbor_item_t *it, struct json_object **out)
{
	size_t n = td__cbor_string_copy(it, NULL);
	bool hex = cbor_isa_bytestring(it);
	size_t tl = hex ? 2 * n : n;
	uint8_t *b = malloc(n + tl + 1);

	*out = NULL;
	if (!b || n > INT32_MAX / 2)
		goto out;
	td__cbor_string_copy(it, b);
	if (hex) {
		static const char digits[] = "0123456789abcdef";
		char *t = (char *)b + n;

		for (size_t i = 0; i < n; i++) {
			t[2 * i] = digits[b[i] >> 4];
			t[2 * i + 1] = digits[b[i] & 15];
		}
		*out = json_object_new_string_len(t, (int)tl);
	} else {
		*out = json_object_new_string_len((const char *)b, (int)n);
	}
out:
	free(b);
	return *out ? 0 : -ENOMEM;
}

static int array(struct conv *c, const cbor_item_t *it,
                 struct json_object **out)
{
	cbor_item_t **h = cbor_array_handle(it);
	size_t n = cbor_array_size(it);
	int rc = 0;

	*out = json_object_new_array_ext(n < INT32_MAX ? (int)n : 0);
	if (!*out)
		return -ENOMEM;
	for (size_t i = 0; i < n && !rc; i++) {
		struct json_object *v;

		rc = item(c, h[i], false, &v);
		if (!rc && json_object_array_add(*out, v) < 0) {
			json_object_put(v);
			rc = -ENOMEM;
		}
	}
	if (rc) {
		json_object_put(*out);
		*out = NULL;
	}
	return rc;
}

struct jkey {
	char *text; /* NUL-terminated, NUL-free */
	size_t len;
	size_t index; /* its place in the map: the first of equals wins */
	const cbor_item_t *value;
};

static int jkey_cmp(const void *a, const void *b)
{
	const struct jkey *x = a, *y = b;
	size_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->text, y->text, n);

	if (c)
		return c;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* A map key as the text JSON will carry. */
static int key_text(struct conv *c, const cbor_item_t *k, struct jkey *out)
{
	struct json_object *o;
	const char *t;
	int rc;

	if (cbor_isa_array(k) || cbor_isa_map(k) || cbor_isa_tag(k)) {
		/*
		 * Refused: its JSON would be escaped into a key, and keys
		 * nested in keys double the escapes per level (2^depth
		 * bytes from a few hundred of input).
		 */
		c->why = "a map key is an array, map or tag: JSON keys are "
		         "text";
		return -EBADMSG;
	}
	if (cbor_isa_string(k)) {
		out->len = td__cbor_string_copy(k, NULL);
		out->text = malloc(out->len + 1);
		if (!out->text)
			return -ENOMEM;
		td__cbor_string_copy(k, (uint8_t *)out->text);
		out->text[out->len] = 0;
		if (strlen(out->text) == out->len)
			return 0;
		c->why = "a map key holds a NUL byte: JSON keys here are C "
		         "strings";
		return -EBADMSG;
	}
	/* a scalar key: its own JSON as the key text */
	rc = item(c, k, false, &o);
	if (rc < 0)
		return rc;
	t = json_object_to_json_string_length(o, TD_JSON_FLAGS, &out->len);
	out->text = t ? strdup(t) : NULL;
	json_object_put(o);
	return out->text ? 0 : -ENOMEM;
}

/* Keys and values sorted, repeats dropped; *count gets how many stay. */
static int map_keys(struct conv *c, const cbor_item_t *it, bool skip_reserved,
                    struct jkey *keys, size_t *count)
{
	struct cbor_pair *p = cbor_map_handle(it);
	size_t k = 0, n = 0;
	int rc = 0;

	for (size_t i = 0; i < cbor_map_size(it) && !rc; i++) {
		if (skip_reserved && td__cbor_text_is(p[i].key, "_reserved_"))
			continue;
		keys[k].index = i;
		keys[k].value = p[i].value;
		rc = key_text(c, p[i].key, &keys[k]);
		k++;
	}
	*count = k;
	if (rc)
		return rc;
	qsort(keys, k, sizeof(*keys), jkey_cmp);
	for (size_t i = 0; i < k; i++) {
		if (n && keys[n - 1].len == keys[i].len &&
		    !memcmp(keys[n - 1].text, keys[i].text, keys[i].len)) {
			free(keys[i].text);
			continue;
		}
		keys[n++] = keys[i];
	}
	*count = n;
	return 0;
}

/* A map with keys sorted by their text; skip_reserved drops the
 * `_reserved_` key (per-object attributes, §18). */
static int map(struct conv *c, const cbor_item_t *it, bool skip_reserved,
               struct json_object **out)
{
	size_t n = cbor_map_size(it), k = 0;
	struct jkey *keys = calloc(n ? n : 1, sizeof(*keys));
	int rc = keys ? map_keys(c, it, skip_reserved, keys, &k) : -ENOMEM;

	*out = rc ? NULL : json_object_new_object();
	if (!rc && !*out)
		rc = -ENOMEM;
	for (size_t i = 0; i < k && !rc; i++) {
		struct json_object *v;

		rc = item(c, keys[i].value, false, &v);
		/* the keys are distinct: no lookup needed */
		if (!rc && json_object_object_add_ex(
		                   *out, keys[i].text, v,
		                   JSON_C_OBJECT_ADD_KEY_IS_NEW) < 0) {
			json_object_put(v);
			rc = -ENOMEM;
		}
	}
	for (size_t i = 0; keys && i < k; i++)
		free(keys[i].text);
	free(keys);
	if (rc) {
		json_object_put(*out);
		*out = NULL;
	}
	return rc;
}

static int item(struct conv *c, const cbor_item_t *it, bool attrs,
                struct json_object **out)
{
	*out = NULL;
	switch (cbor_typeof(it)) {
	case CBOR_TYPE_UINT:
	case CBOR_TYPE_NEGINT:
		return number(it, out);
	case CBOR_TYPE_BYTESTRING:
	case CBOR_TYPE_STRING:
		return string(it, out);
	case CBOR_TYPE_ARRAY:
		return array(c, it, out);
	case CBOR_TYPE_MAP:
		return map(c, it, attrs, out);
	case CBOR_TYPE_TAG: {
		/* cbor_tag_item() takes a reference */
		cbor_item_t *inner = cbor_tag_item(it);
		int rc = item(c, inner, attrs, out);

		cbor_decref(&inner);
		return rc;
	}
	case CBOR_TYPE_FLOAT_CTRL:
		return float_ctrl(it, out);
	}
	return -EBADMSG; /* no other type exists */
}

/* o (dropped) as a malloc'ed text. */
static int finish(struct json_object *o, char **json, size_t *json_len)
{
	size_t n;
	const char *t = json_object_to_json_string_length(o, TD_JSON_FLAGS, &n);
	char *copy = t ? malloc(n + 1) : NULL;

	if (copy)
		memcpy(copy, t, n + 1);
	json_object_put(o);
	if (!copy)
		return -ENOMEM;
	*json = copy;
	if (json_len)
		*json_len = n;
	return 0;
}

/* it (NULL: an empty object) as a json-c tree in *o. */
static int convert_obj(const cbor_item_t *it, bool attrs,
                       struct json_object **o, struct td_err *err)
{
	struct conv c = {NULL};
	int rc = it ? item(&c, it, attrs, o) : 0;

	if (rc == -EBADMSG)
		return td__err_set(err, TD_ERR_MALFORMED, NULL, false, 0, 0,
		                   c.why);
	if (rc == 0 && !it)
		*o = json_object_new_object();
	if (rc == 0 && !*o && !it)
		rc = -ENOMEM;
	if (rc < 0)
		td__err_set(err, TD_ERR_IO, NULL, false, 0, 0, "out of memory");
	return rc;
}

static int convert(const cbor_item_t *it, bool attrs, char **json,
                   size_t *json_len, struct td_err *err)
{
	struct json_object *o = NULL;
	int rc = convert_obj(it, attrs, &o, err);

	if (rc < 0)
		return rc;
	rc = finish(o, json, json_len);
	if (rc < 0)
		td__err_set(err, TD_ERR_IO, NULL, false, 0, 0, "out of memory");
	return rc;
}

int td_json_from_cbor(const uint8_t *cbor, size_t len, char **json,
                      size_t *json_len, struct td_err *err)
{
	cbor_item_t *it;
	int rc = td__tgm_cbor_load(cbor, len, &it, NULL, err);

	if (rc < 0)
		return rc;
	rc = convert(it, false, json, json_len, err);
	cbor_decref(&it);
	return rc;
}

int td_json_tgm_attrs(const struct td_tgm_meta *m, size_t i, char **json,
                      size_t *json_len, struct td_err *err)
{
	return convert(td__tgm_meta_base(m, i), true, json, json_len, err);
}

int td_json_tgm_attrs_obj(const struct td_tgm_meta *m, size_t i,
                          struct json_object **out, struct td_err *err)
{
	*out = NULL;
	return convert_obj(td__tgm_meta_base(m, i), true, out, err);
}

int td_json_tgm_zarr_attrs(const struct td_tgm_meta *m, size_t i,
                           struct json_object **out, struct td_err *err)
{
	struct td_zarr_tensor zt = {.quant_axis = -2};
	uint8_t *saved = NULL;
	char *text = NULL;
	size_t len = 0;
	int rc = td_tgm_meta_saved(m, i, &saved, &len);

	*out = NULL;
	if (rc == 0)
		rc = td_json_tgm_attrs(m, i, &text, &len, err);
	else if (rc < 0)
		td__err_set(err, TD_ERR_IO, NULL, false, 0, 0, "out of memory");
	if (rc < 0)
		return rc;
	zt.meta = saved ? (const void *)saved : text;
	zt.meta_len = len;
	*out = td_zarr_tensor_attrs(&zt);
	free(saved);
	free(text);
	if (*out)
		return 0;
	td__err_set(err, TD_ERR_IO, NULL, false, 0, 0, "out of memory");
	return -ENOMEM;
}

int td_json_tgm_extra_obj(const struct td_tgm_meta *m,
                          struct json_object **out, struct td_err *err)
{
	const cbor_item_t *x = m ? td__tgm_meta_get(m, "_extra_") : NULL;

	*out = NULL;
	if (x && !cbor_isa_map(x))
		x = NULL; /* not a map: nothing to spread into attributes */
	return convert_obj(x, false, out, err);
}

int td_json_tgm_params_obj(const uint8_t *desc, size_t len,
                           struct json_object **out, struct td_err *err)
{
	cbor_item_t *it;
	struct json_object *o = NULL;
	int rc = td__tgm_cbor_load(desc, len, &it, NULL, err);

	*out = NULL;
	if (rc < 0)
		return rc;
	rc = convert_obj(cbor_isa_map(it) ? it : NULL, false, &o, err);
	cbor_decref(&it);
	if (rc < 0)
		return rc;
	{
		/* keep only the keys the descriptor reader does not know */
		const char *drop[64];
		size_t nd = 0;

		const char *k;
		struct json_object *v;

		TD_JSON_EACH(o, k, v)
			if (td__tgm_desc_key_known(k) && nd < 64)
				drop[nd++] = k;
		for (size_t i = 0; i < nd; i++)
			json_object_object_del(o, drop[i]);
	}
	if (!json_object_object_length(o)) {
		json_object_put(o);
		return 0;
	}
	*out = o;
	return 0;
}
