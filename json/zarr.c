/* SPDX-License-Identifier: MIT */
/*
 * Zarr v3 and v2 metadata for single-chunk arrays (td-zarr.h): json-c
 * objects built here, printed with sorted keys by td_zarr_text().
 */
#include "td-zarr.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "json-int.h"

static const struct td_zarr_type types[] = {
	{"bool", "|b1", 1, 'b', -1, TD_TGM_DTYPE_UNKNOWN},
	{"int8", "|i1", 1, 'i', 1, TD_TGM_INT8},
	{"int16", "<i2", 2, 'i', 3, TD_TGM_INT16},
	{"int32", "<i4", 4, 'i', 5, TD_TGM_INT32},
	{"int64", "<i8", 8, 'i', 7, TD_TGM_INT64},
	{"uint8", "|u1", 1, 'u', 0, TD_TGM_UINT8},
	{"uint16", "<u2", 2, 'u', 2, TD_TGM_UINT16},
	{"uint32", "<u4", 4, 'u', 4, TD_TGM_UINT32},
	{"uint64", "<u8", 8, 'u', 6, TD_TGM_UINT64},
	{"float16", "<f2", 2, 'f', 8, TD_TGM_FLOAT16},
	{"float32", "<f4", 4, 'f', 9, TD_TGM_FLOAT32},
	{"float64", "<f8", 8, 'f', 10, TD_TGM_FLOAT64},
	{"bfloat16", NULL, 2, 'f', -1, TD_TGM_BFLOAT16},
	{"complex64", "<c8", 8, 'c', -1, TD_TGM_COMPLEX64},
	{"complex128", "<c16", 16, 'c', -1, TD_TGM_COMPLEX128},
};
#define NTYPES (sizeof(types) / sizeof(types[0]))

const struct td_zarr_type *td_zarr_type_by_name(const char *name)
{
	for (size_t i = 0; name && i < NTYPES; i++)
		if (!strcmp(types[i].name, name))
			return &types[i];
	return NULL;
}

const struct td_zarr_type *td_zarr_type_by_blob(uint32_t code)
{
	for (size_t i = 0; i < NTYPES; i++)
		if (types[i].blob >= 0 && (uint32_t)types[i].blob == code)
			return &types[i];
	return NULL;
}

const struct td_zarr_type *td_zarr_type_by_tgm(enum td_tgm_dtype t)
{
	for (size_t i = 0; t != TD_TGM_DTYPE_UNKNOWN && i < NTYPES; i++)
		if (types[i].tgm == t)
			return &types[i];
	return NULL;
}

void td_zarr_array_fini(struct td_zarr_array *a)
{
	json_object_put(a->attrs);
	a->attrs = NULL;
}

int td_zarr_chunk_bytes(const struct td_zarr_array *a, uint64_t *bytes)
{
	uint64_t n = a->type->size;

	for (uint32_t k = 0; k < a->ndim; k++)
		if (__builtin_mul_overflow(n, a->shape[k], &n))
			return -EOVERFLOW;
	*bytes = n;
	return 0;
}

int td_zarr_chunk_key(const struct td_zarr_array *a, bool v2, char *buf,
                      size_t cap)
{
	size_t o = 0;

	for (uint32_t k = 0; k < a->ndim; k++)
		if (!a->shape[k])
			return 0;
	if (cap < 2 + 2 * (size_t)a->ndim)
		return -ENAMETOOLONG;
	if (v2) {
		buf[o++] = '0';
		for (uint32_t k = 1; k < a->ndim; k++) {
			buf[o++] = '.';
			buf[o++] = '0';
		}
	} else {
		buf[o++] = 'c';
		for (uint32_t k = 0; k < a->ndim; k++) {
			buf[o++] = '/';
			buf[o++] = '0';
		}
	}
	buf[o] = 0;
	return 1;
}

static struct json_object *u64_array(const uint64_t *v, uint32_t n,
                                     bool zero_as_one)
{
	struct json_object *arr = json_object_new_array_ext((int)n);

	for (uint32_t k = 0; arr && k < n; k++)
		json_object_array_add(arr, json_object_new_uint64(
		                                   zero_as_one && !v[k] ? 1
		                                                        : v[k]));
	return arr;
}

/* "NaN" for floats, ["NaN","NaN"] for complex, 0, false (zarr.md §8). */
static struct json_object *fill_value(const struct td_zarr_type *t)
{
	struct json_object *arr;

	switch (t->kind) {
	case 'b':
		return json_object_new_boolean(0);
	case 'f':
		return json_object_new_string("NaN");
	case 'c':
		arr = json_object_new_array_ext(2);
		json_object_array_add(arr, json_object_new_string("NaN"));
		json_object_array_add(arr, json_object_new_string("NaN"));
		return arr;
	default:
		return json_object_new_int(0);
	}
}

static struct json_object *named(const char *name, struct json_object *conf)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "name", json_object_new_string(name));
	json_object_object_add(o, "configuration", conf);
	return o;
}

static struct json_object *attrs_or_empty(struct json_object *attrs)
{
	return attrs ? json_object_get(attrs) : json_object_new_object();
}

struct json_object *td_zarr_v3_array(const struct td_zarr_array *a)
{
	struct json_object *o = json_object_new_object(), *c, *codecs;

	json_object_object_add(o, "zarr_format", json_object_new_int(3));
	json_object_object_add(o, "node_type", json_object_new_string("array"));
	json_object_object_add(o, "shape", u64_array(a->shape, a->ndim, false));
	json_object_object_add(o, "data_type",
	                       json_object_new_string(a->type->name));
	c = json_object_new_object();
	json_object_object_add(c, "chunk_shape",
	                       u64_array(a->shape, a->ndim, true));
	json_object_object_add(o, "chunk_grid", named("regular", c));
	c = json_object_new_object();
	json_object_object_add(c, "separator", json_object_new_string("/"));
	json_object_object_add(o, "chunk_key_encoding", named("default", c));
	json_object_object_add(o, "fill_value", fill_value(a->type));
	c = json_object_new_object();
	json_object_object_add(c, "endian", json_object_new_string("little"));
	codecs = json_object_new_array_ext(1);
	json_object_array_add(codecs, named("bytes", c));
	json_object_object_add(o, "codecs", codecs);
	json_object_object_add(o, "attributes", attrs_or_empty(a->attrs));
	return o;
}

struct json_object *td_zarr_v3_group(struct json_object *gattrs,
                                     const struct td_zarr_array *arrs,
                                     size_t n)
{
	struct json_object *o = json_object_new_object();
	struct json_object *cm = json_object_new_object();
	struct json_object *md = json_object_new_object();

	for (size_t i = 0; i < n; i++)
		json_object_object_add(md, arrs[i].name,
		                       td_zarr_v3_array(&arrs[i]));
	json_object_object_add(cm, "kind", json_object_new_string("inline"));
	json_object_object_add(cm, "must_understand",
	                       json_object_new_boolean(0));
	json_object_object_add(cm, "metadata", md);
	json_object_object_add(o, "attributes", attrs_or_empty(gattrs));
	json_object_object_add(o, "consolidated_metadata", cm);
	json_object_object_add(o, "node_type", json_object_new_string("group"));
	json_object_object_add(o, "zarr_format", json_object_new_int(3));
	return o;
}

struct json_object *td_zarr_v2_array(const struct td_zarr_array *a)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "zarr_format", json_object_new_int(2));
	json_object_object_add(o, "shape", u64_array(a->shape, a->ndim, false));
	json_object_object_add(o, "chunks", u64_array(a->shape, a->ndim, true));
	json_object_object_add(o, "dtype", json_object_new_string(
	                                           a->type->v2 ? a->type->v2
	                                                       : "|V2"));
	json_object_object_add(o, "compressor", NULL);
	json_object_object_add(o, "filters", NULL);
	/* integers and bool: no fill value (null, which v2 allows; every
	 * chunk is there). xarray reads a v2 fill value as "missing": with
	 * 0 it would turn every 0 into NaN and the array into floats */
	json_object_object_add(o, "fill_value",
	                       strchr("fc", a->type->kind) ? fill_value(a->type)
	                                                  : NULL);
	json_object_object_add(o, "order", json_object_new_string("C"));
	json_object_object_add(o, "dimension_separator",
	                       json_object_new_string("."));
	return o;
}

/* Whether d names each of ndim dimensions: a list of ndim strings. */
static bool dims_named(struct json_object *d, uint32_t ndim)
{
	if (!json_object_is_type(d, json_type_array) ||
	    json_object_array_length(d) != ndim)
		return false;
	for (uint32_t k = 0; k < ndim; k++)
		if (!json_object_is_type(json_object_array_get_idx(d, k),
		                         json_type_string))
			return false;
	return true;
}

struct json_object *td_zarr_v2_attrs(const struct td_zarr_array *a)
{
	struct json_object *o = json_object_new_object(), *dims, *own = NULL;
	char d[TD_ZARR_NAME_MAX + 48];
	const char *key;
	struct json_object *val;

	if (a->attrs)
		TD_JSON_EACH(a->attrs, key, val)
			json_object_object_add(o, key, json_object_get(val));
	/* the tensor's metadata names its dimensions: xarray's names. One
	 * that names them not (not ndim strings) moves aside, not lost */
	if (a->attrs &&
	    json_object_object_get_ex(a->attrs, "_ARRAY_DIMENSIONS", &own)) {
		if (dims_named(own, a->ndim))
			return o;
		json_object_object_add(o, "_tensord_array_dimensions",
		                       json_object_get(own));
	}
	dims = json_object_new_array_ext((int)a->ndim);
	for (uint32_t k = 0; k < a->ndim; k++) {
		/* "/" is in no node name: never another array's name */
		snprintf(d, sizeof(d), "%s/%" PRIu32, a->name, k);
		json_object_array_add(dims, json_object_new_string(d));
	}
	json_object_object_add(o, "_ARRAY_DIMENSIONS", dims);
	return o;
}

struct json_object *td_zarr_v2_group(void)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "zarr_format", json_object_new_int(2));
	return o;
}

struct json_object *td_zarr_v2_consolidated(struct json_object *gattrs,
                                            const struct td_zarr_array *arrs,
                                            size_t n)
{
	struct json_object *o = json_object_new_object();
	struct json_object *md = json_object_new_object();
	char key[sizeof(arrs->name) + 16];

	json_object_object_add(md, ".zgroup", td_zarr_v2_group());
	json_object_object_add(md, ".zattrs", attrs_or_empty(gattrs));
	for (size_t i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "%s/.zarray", arrs[i].name);
		json_object_object_add(md, key, td_zarr_v2_array(&arrs[i]));
		snprintf(key, sizeof(key), "%s/.zattrs", arrs[i].name);
		json_object_object_add(md, key, td_zarr_v2_attrs(&arrs[i]));
	}
	json_object_object_add(o, "metadata", md);
	json_object_object_add(o, "zarr_consolidated_format",
	                       json_object_new_int(1));
	return o;
}

/* ---- tensord tensors ---- */

static void add_str(struct json_object *o, const char *k, const char *v)
{
	if (v && *v)
		json_object_object_add(o, k, json_object_new_string(v));
}

/* How many levels of values o has, as json-c's depth counts them: 1 for
 * a scalar or an empty array or object. */
static int nesting(struct json_object *o)
{
	const char *key;
	struct json_object *val;
	int n = 0, d;

	switch (json_object_get_type(o)) {
	case json_type_array:
		for (size_t i = 0; i < json_object_array_length(o); i++)
			if ((d = nesting(json_object_array_get_idx(o, i))) > n)
				n = d;
		return n + 1;
	case json_type_object:
		TD_JSON_EACH(o, key, val)
			if ((d = nesting(val)) > n)
				n = d;
		return n + 1;
	default:
		return 1;
	}
}

/* Whether object o has a key of the attributes we write ourselves. */
static bool reserved_keys(struct json_object *o)
{
	struct json_object_iterator i = json_object_iter_begin(o),
	                            end = json_object_iter_end(o);

	for (; !json_object_iter_equal(&i, &end); json_object_iter_next(&i)) {
		const char *k = json_object_iter_peek_name(&i);

		if (!strncmp(k, "_tensord_", 9) || !strncmp(k, "_tensogram_", 11))
			return true;
	}
	return false;
}

struct json_object *td_zarr_tensor_attrs(const struct td_zarr_tensor *t)
{
	static const char *const keys[5] = {
	        "_tensord_format", "_tensord_color_space",
	        "_tensord_color_transfer", "_tensord_color_encoding",
	        "_tensord_color_range"};
	struct json_object *o = NULL;
	const char *why;

	/* metadata that is a JSON object (what load and import store)
	 * gives its keys; anything else is kept whole, and so is an object
	 * nested so deep that the root's consolidated metadata, four levels
	 * above it, would pass what td_zarr_json_parse() reads, and one
	 * with a key of ours (_tensord_*, _tensogram_*): merged, it would
	 * pass for what we write (a _tensord_quant of a tensor that is not
	 * quantized) and import, which drops such keys, would lose it */
	if (t->meta_len &&
	    td_zarr_json_parse(t->meta, t->meta_len, &o, &why) == 0 &&
	    (!json_object_is_type(o, json_type_object) || reserved_keys(o) ||
	     nesting(o) > TD_ZARR_JSON_MAX_DEPTH - 4)) {
		json_object_put(o);
		o = NULL;
	}
	if (!o) {
		o = json_object_new_object();
		if (t->meta_len && td__utf8_valid(t->meta, t->meta_len)) {
			json_object_object_add(
			        o, "_tensord_meta",
			        json_object_new_string_len(t->meta,
			                                   (int)t->meta_len));
		} else if (t->meta_len) {
			char *hex = malloc(2 * t->meta_len + 1);

			for (size_t i = 0; hex && i < t->meta_len; i++)
				sprintf(hex + 2 * i, "%02x",
				        ((const unsigned char *)t->meta)[i]);
			add_str(o, "_tensord_meta_hex", hex);
			free(hex);
		}
	}
	add_str(o, "_tensord_name", t->name);
	for (int i = 0; i < 5; i++)
		add_str(o, keys[i], t->strings[i]);
	if (t->quant_axis != -2) {
		struct json_object *q = json_object_new_object();
		struct json_object *a = json_object_new_array();

		json_object_object_add(q, "axis",
		                       json_object_new_int(t->quant_axis));
		for (uint32_t i = 0; i < t->nscales; i++)
			json_object_array_add(
			        a, json_object_new_double(t->scales[i]));
		json_object_object_add(q, "scales", a);
		a = json_object_new_array();
		for (uint32_t i = 0; i < t->nzero_points; i++)
			json_object_array_add(
			        a, json_object_new_int(t->zero_points[i]));
		json_object_object_add(q, "zero_points", a);
		json_object_object_add(o, "_tensord_quant", q);
	}
	return o;
}

struct json_object *td_zarr_tensor_group(const struct td_zarr_array *arrs,
                                         size_t n)
{
	struct json_object *o = json_object_new_object();
	struct json_object *v = json_object_new_array();

	for (size_t i = 0; i < n; i++)
		json_object_array_add(v, json_object_new_string(arrs[i].name));
	json_object_object_add(o, "_tensord_variables", v);
	return o;
}

/* ---- printing with sorted keys ---- */

static int key_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A copy of o whose objects have their keys in byte order. */
static struct json_object *sorted(struct json_object *o, int *bad)
{
	struct json_object *out;
	const char **keys, *key;
	struct json_object *val;
	size_t n = 0;
	double d;

	switch (json_object_get_type(o)) {
	case json_type_object:
		keys = malloc(
		        ((size_t)json_object_object_length(o) + 1) *
		        sizeof(*keys));
		out = json_object_new_object();
		if (!keys || !out) {
			free(keys);
			json_object_put(out);
			*bad = 1;
			return NULL;
		}
		TD_JSON_EACH(o, key, val)
			keys[n++] = key;
		qsort(keys, n, sizeof(*keys), key_cmp);
		for (size_t i = 0; i < n; i++)
			json_object_object_add(
			        out, keys[i],
			        sorted(json_object_object_get(o, keys[i]),
			               bad));
		free(keys);
		return out;
	case json_type_array:
		n = json_object_array_length(o);
		out = json_object_new_array_ext((int)n);
		if (!out) {
			*bad = 1;
			return NULL;
		}
		for (size_t i = 0; i < n; i++)
			json_object_array_add(
			        out,
			        sorted(json_object_array_get_idx(o, i), bad));
		return out;
	case json_type_double:
		d = json_object_get_double(o);
		if (isnan(d))
			return json_object_new_string("NaN");
		if (isinf(d))
			return json_object_new_string(d > 0 ? "Infinity"
			                                    : "-Infinity");
		return json_object_get(o);
	default:
		return json_object_get(o);
	}
}

/* The length of the UTF-8 sequence at t (of n bytes) and its code point,
 * or 0 where it is none: json-c gives a string's bytes as they are. */
static size_t utf8_seq(const unsigned char *t, size_t n, uint32_t *cp)
{
	size_t k = t[0] >= 0xf0 ? 4 : t[0] >= 0xe0 ? 3 : t[0] >= 0xc0 ? 2 : 0;

	if (!k || k > n)
		return 0;
	*cp = t[0] & (0x3f >> (k - 1));
	for (size_t i = 1; i < k; i++) {
		if ((t[i] & 0xc0) != 0x80)
			return 0;
		*cp = *cp << 6 | (t[i] & 0x3f);
	}
	/* the shortest form of a scalar value only: what the reader
	 * refuses (td_zarr_json_parse) is never written as another one */
	return td__utf8_valid(t, k) ? k : 0;
}

/*
 * The text in ASCII: every character past U+007F as a \uXXXX escape (a
 * surrogate pair past U+FFFF), as Python's json.dumps writes it. Only
 * strings hold such bytes, where the escape is the same string; a reader
 * that takes its keys as ASCII (zarr-python 2, and so Dask and xarray,
 * decode .zmetadata, .zarray and .zattrs so) then reads a store whose
 * metadata or names hold "é" instead of failing on the whole group.
 */
static char *ascii_text(const char *t, size_t l, size_t *len)
{
	const unsigned char *u = (const unsigned char *)t;
	char *out = l < SIZE_MAX / 3 ? malloc(3 * l + 1) : NULL, *w = out;
	uint32_t cp;
	size_t k;

	if (!out)
		return NULL;
	for (size_t i = 0; i < l; i += k) {
		k = u[i] < 0x80 ? 0 : utf8_seq(u + i, l - i, &cp);
		if (!k) {
			*w++ = t[i];
			k = 1;
		} else if (cp < 0x10000) {
			w += sprintf(w, "\\u%04x", (unsigned)cp);
		} else {
			cp -= 0x10000;
			w += sprintf(w, "\\u%04x\\u%04x",
			             (unsigned)(0xd800 + (cp >> 10)),
			             (unsigned)(0xdc00 + (cp & 0x3ff)));
		}
	}
	*w = 0;
	*len = (size_t)(w - out);
	return out;
}

char *td_zarr_text(struct json_object *o, size_t *len)
{
	int bad = 0;
	struct json_object *s = sorted(o, &bad);
	const char *t;
	size_t l;
	char *out = NULL;

	if (bad) {
		json_object_put(s);
		return NULL;
	}
	t = json_object_to_json_string_length(s, TD_JSON_FLAGS, &l);
	if (t)
		out = ascii_text(t, l, &l);
	if (out && len)
		*len = l;
	json_object_put(s);
	return out;
}

/* ---- reading ---- */

static bool finite_tree(struct json_object *o)
{
	const char *key;
	struct json_object *val;

	switch (json_object_get_type(o)) {
	case json_type_double:
		return isfinite(json_object_get_double(o));
	case json_type_array:
		for (size_t i = 0; i < json_object_array_length(o); i++)
			if (!finite_tree(json_object_array_get_idx(o, i)))
				return false;
		return true;
	case json_type_object:
		TD_JSON_EACH(o, key, val)
			if (!finite_tree(val))
				return false;
		return true;
	default:
		return true;
	}
}

/*
 * What json-c reads in strict mode beyond RFC 8259, and would keep or
 * write back as something else: a number's text is written back as it
 * came ("1." and "01" are no JSON for other readers), an integer past
 * int64/uint64 is clamped to the end, a lone surrogate escape becomes
 * U+FFFD, an escaped NUL cuts a key. The text has parsed: its strings and
 * escapes are whole.
 */
static unsigned hex4(const char *h)
{
	unsigned v = 0;

	for (int i = 0; i < 4; i++)
		v = v << 4 | (unsigned)(h[i] <= '9' ? h[i] - '0'
		                                    : (h[i] | 0x20) - 'a' + 10);
	return v;
}

/* The string whose quote is at t[*i]: *i past it; NULL or the reason. */
static const char *strict_string(const char *t, size_t len, size_t *i)
{
	bool nul = false;
	size_t p = *i + 1;
	unsigned u;

	for (; p < len && t[p] != '"'; p++) {
		if ((unsigned char)t[p] < 0x20)
			return "a control character not escaped in a string";
		if (t[p] != '\\' || ++p + 4 >= len || t[p] != 'u')
			continue;
		u = hex4(t + p + 1);
		p += 4;
		nul |= u == 0;
		if (u >= 0xdc00 && u <= 0xdfff)
			return "a lone surrogate escape (\\udc00-\\udfff)";
		if (u < 0xd800 || u > 0xdbff)
			continue;
		if (p + 6 >= len || t[p + 1] != '\\' || t[p + 2] != 'u' ||
		    (u = hex4(t + p + 3)) < 0xdc00 || u > 0xdfff)
			return "a lone surrogate escape (\\ud800-\\udbff)";
		p += 6;
	}
	*i = p + 1;
	while (*i < len && strchr(" \t\r\n", t[*i]))
		(*i)++;
	if (nul && *i < len && t[*i] == ':')
		return "an escaped NUL in a key";
	return NULL;
}

static size_t digits(const char *t, size_t len, size_t p)
{
	while (p < len && t[p] >= '0' && t[p] <= '9')
		p++;
	return p;
}

/* The number at t[*i]: *i past it; NULL or the reason. */
static const char *strict_number(const char *t, size_t len, size_t *i)
{
	size_t s = *i, d = s + (t[s] == '-'), p = digits(t, len, d);
	bool integer = true;
	char tmp[32];

	if (p == d)
		return "a number that is not RFC 8259 JSON";
	if (p - d > 1 && t[d] == '0')
		return "a number that is not RFC 8259 JSON (a leading zero)";
	if (p < len && t[p] == '.') {
		integer = false;
		if ((d = digits(t, len, p + 1)) == p + 1)
			return "a number that is not RFC 8259 JSON (no digit "
			       "after its point)";
		p = d;
	}
	if (p < len && (t[p] == 'e' || t[p] == 'E')) {
		integer = false;
		p += 1 + (p + 1 < len && (t[p + 1] == '+' || t[p + 1] == '-'));
		if ((d = digits(t, len, p)) == p)
			return "a number that is not RFC 8259 JSON (no digit "
			       "in its exponent)";
		p = d;
	}
	*i = p;
	if (!integer)
		return NULL; /* out of range: finite_tree() */
	if (p - s >= sizeof(tmp))
		return "an integer out of range (-2^63 .. 2^64-1)";
	memcpy(tmp, t + s, p - s);
	tmp[p - s] = 0;
	errno = 0;
	if (tmp[0] == '-')
		(void)strtoll(tmp, NULL, 10);
	else
		(void)strtoull(tmp, NULL, 10);
	return errno == ERANGE ? "an integer out of range (-2^63 .. 2^64-1)"
	                       : NULL;
}

/* NULL when text (which json-c took) is RFC 8259 JSON json-c keeps. */
static const char *strict_text(const char *t, size_t len)
{
	const char *why = NULL;

	for (size_t i = 0; i < len && !why;) {
		if (t[i] == '"')
			why = strict_string(t, len, &i);
		else if (t[i] == '-' || (t[i] >= '0' && t[i] <= '9'))
			why = strict_number(t, len, &i);
		else
			i++;
	}
	return why;
}

int td_zarr_json_parse(const char *text, size_t len, struct json_object **out,
                       const char **why)
{
	struct json_tokener *tok = json_tokener_new_ex(TD_ZARR_JSON_MAX_DEPTH);
	struct json_object *o;
	size_t end;

	*out = NULL;
	if (!tok) {
		*why = "out of memory";
		return -ENOMEM;
	}
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT |
	                                    JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, text, (int)len);
	end = json_tokener_get_parse_end(tok);
	if (json_tokener_get_error(tok) != json_tokener_success || !o) {
		*why = json_tokener_error_desc(json_tokener_get_error(tok));
		if (json_tokener_get_error(tok) == json_tokener_continue)
			*why = "JSON ends early";
		json_object_put(o);
		json_tokener_free(tok);
		return -EBADMSG;
	}
	json_tokener_free(tok);
	while (end < len && strchr(" \t\r\n", text[end]))
		end++;
	if (end != len || memchr(text, 0, len)) {
		*why = "bytes after the JSON value";
		json_object_put(o);
		return -EBADMSG;
	}
	if (!td__utf8_valid((const uint8_t *)text, len)) {
		/* json-c's UTF-8 check lets overlong forms and encoded
		 * surrogates through; written back as \u escapes they would
		 * be other characters than the ones read */
		*why = "text that is not UTF-8 (an overlong form or a "
		       "surrogate)";
		json_object_put(o);
		return -EBADMSG;
	}
	if (!finite_tree(o)) {
		/* json-c reads NaN, Infinity and overflowing numbers even in
		 * strict mode */
		*why = "a NaN or Infinity token, or a number out of range";
		json_object_put(o);
		return -EBADMSG;
	}
	if ((*why = strict_text(text, len))) {
		json_object_put(o);
		return -EBADMSG;
	}
	*out = o;
	return 0;
}

int td_zarr_keep_unreadable(struct json_object *o)
{
	struct json_object *kept = json_object_new_object(), *v, *back;
	const char *k, *why;
	size_t len;
	char *t;

	if (!kept)
		return -ENOMEM;
	TD_JSON_EACH(o, k, v) {
		struct json_object *one = json_object_new_array();

		/* read as it would be, inside the attributes (a number
		 * alone would be a text that ends early for json-c) */
		if (!one || json_object_array_add(one, json_object_get(v)) ||
		    !(t = td_zarr_text(one, &len))) {
			json_object_put(one);
			json_object_put(kept);
			return -ENOMEM; /* o as it was */
		}
		json_object_put(one);
		back = NULL;
		if (!strcmp(k, "_tensord_json") ||
		    td_zarr_json_parse(t, len, &back, &why) < 0)
			/* without the brackets */
			json_object_object_add(
			        kept, k,
			        json_object_new_string_len(t + 1,
			                                   (int)len - 2));
		json_object_put(back);
		free(t);
	}
	/* moved: deleted from o once its iteration is over */
	TD_JSON_EACH(kept, k, v)
		json_object_object_del(o, k);
	if (json_object_object_length(kept))
		json_object_object_add(o, "_tensord_json", kept);
	else
		json_object_put(kept);
	return 0;
}

static struct json_object *member(struct json_object *o, const char *k)
{
	struct json_object *v = NULL;

	return json_object_object_get_ex(o, k, &v) ? v : NULL;
}

static bool is_str(struct json_object *o, const char *s)
{
	return json_object_is_type(o, json_type_string) &&
	       !strcmp(json_object_get_string(o), s);
}

/* {"name": NAME, "configuration": {...}} with only those members. */
static struct json_object *named_conf(struct json_object *o, const char *name)
{
	struct json_object *c = member(o, "configuration");

	if (!json_object_is_type(o, json_type_object) ||
	    !is_str(member(o, "name"), name) ||
	    json_object_object_length(o) != (c ? 2 : 1))
		return NULL;
	/* without configuration: o itself, which has none of the
	 * configuration's members either */
	return !c ? o : json_object_is_type(c, json_type_object) ? c : NULL;
}

static bool float_fill_ok(struct json_object *v, unsigned size)
{
	const char *s;
	size_t l;

	if (json_object_is_type(v, json_type_int) ||
	    json_object_is_type(v, json_type_double))
		return true;
	if (!json_object_is_type(v, json_type_string))
		return false;
	s = json_object_get_string(v);
	if (!strcmp(s, "NaN") || !strcmp(s, "Infinity") ||
	    !strcmp(s, "-Infinity"))
		return true;
	l = strlen(s);
	if (l != 2 + 2 * (size_t)size || strncmp(s, "0x", 2))
		return false;
	return strspn(s + 2, "0123456789abcdefABCDEF") == l - 2;
}

static bool fill_ok(struct json_object *v, const struct td_zarr_type *t)
{
	int64_t i;

	switch (t->kind) {
	case 'b':
		return json_object_is_type(v, json_type_boolean);
	case 'f':
		return float_fill_ok(v, t->size);
	case 'c':
		return json_object_is_type(v, json_type_array) &&
		       json_object_array_length(v) == 2 &&
		       float_fill_ok(json_object_array_get_idx(v, 0),
		                     t->size / 2) &&
		       float_fill_ok(json_object_array_get_idx(v, 1),
		                     t->size / 2);
	default:
		if (!json_object_is_type(v, json_type_int))
			return false;
		/* json-c keeps -2^63 .. 2^64-1 exactly; check the range (its
		 * int64 getter gives INT64_MAX for what is above, errno 0) */
		i = json_object_get_int64(v);
		if (t->kind == 'u') {
			if (i < 0)
				return false;
			if (t->size == 8)
				return true;
			return (uint64_t)i < (UINT64_C(1) << (8 * t->size));
		}
		if (json_object_get_uint64(v) > (uint64_t)INT64_MAX)
			return false;
		if (t->size == 8)
			return true;
		return i >= -(INT64_C(1) << (8 * t->size - 1)) &&
		       i < (INT64_C(1) << (8 * t->size - 1));
	}
}

#define FAIL(rc_, ...)                                                        \
	do {                                                                  \
		snprintf(why, cap, __VA_ARGS__);                              \
		return (rc_);                                                 \
	} while (0)

static int read_shape(struct json_object *o, uint64_t *shape, uint32_t *n,
                      bool positive)
{
	size_t len;

	if (!json_object_is_type(o, json_type_array))
		return -1;
	len = json_object_array_length(o);
	if (len > TD_ZARR_MAX_DIMS)
		return -2;
	for (size_t k = 0; k < len; k++) {
		struct json_object *v = json_object_array_get_idx(o, k);
		int64_t x;

		if (!json_object_is_type(v, json_type_int))
			return -1;
		/* json-c's int64 getter gives INT64_MAX for what is above */
		x = json_object_get_int64(v);
		if (x < 0)
			return -1;
		shape[k] = json_object_get_uint64(v);
		if (positive && shape[k] == 0)
			return -1;
	}
	*n = (uint32_t)len;
	return 0;
}

/* The first of n dimension names that is neither a string nor null,
 * or -1 (zarr.md §4). */
static int dim_names_bad(struct json_object *names, uint32_t n)
{
	for (uint32_t k = 0; names && k < n; k++) {
		struct json_object *v = json_object_array_get_idx(names, k);

		if (v && !json_object_is_type(v, json_type_string))
			return (int)k;
	}
	return -1;
}

int td_zarr_array_read(struct json_object *meta, struct td_zarr_array *a,
                       bool *big_endian, char *sep, char *why, size_t cap)
{
	static const char *const known[] = {
	        "zarr_format", "node_type",          "shape",
	        "data_type",   "chunk_grid",         "chunk_key_encoding",
	        "fill_value",  "codecs",             "attributes",
	        "dimension_names", "storage_transformers"};
	struct json_object *v, *c, *codec, *val;
	const char *key;
	uint64_t chunk[TD_ZARR_MAX_DIMS];
	uint32_t cn = 0;
	const char *s;
	int rc;

	*big_endian = false;
	if (!json_object_is_type(meta, json_type_object))
		FAIL(-EBADMSG, "zarr.json is not a JSON object");
	TD_JSON_EACH(meta, key, val) {
		bool ok = false;

		for (size_t i = 0; i < sizeof(known) / sizeof(*known); i++)
			ok |= !strcmp(key, known[i]);
		if (!ok && !(json_object_is_type(val, json_type_object) &&
		             json_object_is_type(
		                     member(val, "must_understand"),
		                     json_type_boolean) &&
		             !json_object_get_boolean(
		                     member(val, "must_understand"))))
			FAIL(-EBADMSG, "unknown member \"%s\"", key);
	}
	v = member(meta, "zarr_format");
	if (!json_object_is_type(v, json_type_int) ||
	    json_object_get_int64(v) != 3)
		FAIL(-EBADMSG, "zarr_format is not 3");
	if (!is_str(member(meta, "node_type"), "array"))
		FAIL(-EBADMSG, "node_type is not \"array\"");
	rc = read_shape(member(meta, "shape"), a->shape, &a->ndim, false);
	if (rc == -2)
		FAIL(-ENOTSUP, "more than %d dimensions", TD_ZARR_MAX_DIMS);
	if (rc)
		FAIL(-EBADMSG, "shape is not a list of integers >= 0");
	v = member(meta, "data_type");
	if (!json_object_is_type(v, json_type_string))
		FAIL(-EBADMSG, "data_type is missing or not a string");
	s = json_object_get_string(v);
	a->type = td_zarr_type_by_name(s);
	if (!a->type)
		FAIL(-ENOTSUP, "data_type \"%s\" is not supported", s);
	c = named_conf(member(meta, "chunk_grid"), "regular");
	if (!c || read_shape(member(c, "chunk_shape"), chunk, &cn, true))
		FAIL(-EBADMSG, "chunk_grid is not regular with chunk_shape "
		               "entries > 0");
	if (cn != a->ndim)
		FAIL(-EBADMSG, "chunk_shape has rank %" PRIu32 ", shape %" PRIu32,
		     cn, a->ndim);
	for (uint32_t k = 0; k < cn; k++)
		if (chunk[k] != (a->shape[k] ? a->shape[k] : 1))
			FAIL(-ENOTSUP, "more than one chunk (chunk_shape "
			               "differs from shape in dimension %" PRIu32
			               ")",
			     k);
	v = member(meta, "chunk_key_encoding");
	c = named_conf(v, "default");
	if (!c)
		FAIL(-ENOTSUP, "chunk_key_encoding is not \"default\"");
	*sep = '/';
	if (member(c, "separator")) {
		if (is_str(member(c, "separator"), "."))
			*sep = '.';
		else if (!is_str(member(c, "separator"), "/"))
			FAIL(-EBADMSG, "chunk key separator is not / or .");
	}
	v = member(meta, "fill_value");
	if (!v || !fill_ok(v, a->type))
		FAIL(-EBADMSG, "fill_value is missing or not valid for %s",
		     a->type->name);
	v = member(meta, "codecs");
	if (!json_object_is_type(v, json_type_array) ||
	    !json_object_array_length(v))
		FAIL(-EBADMSG, "codecs is missing or empty");
	codec = json_object_array_get_idx(v, 0);
	if (json_object_is_type(codec, json_type_object) &&
	    !json_object_is_type(member(codec, "name"), json_type_string))
		FAIL(-EBADMSG, "the first codec has no name");
	if (json_object_is_type(codec, json_type_object) &&
	    !is_str(member(codec, "name"), "bytes"))
		FAIL(-ENOTSUP, "codec \"%s\" is not supported (only bytes)",
		     json_object_get_string(member(codec, "name")));
	if (json_object_array_length(v) != 1)
		FAIL(-ENOTSUP, "codecs other than bytes are not supported "
		               "(%zu codecs)",
		     json_object_array_length(v));
	c = named_conf(codec, "bytes");
	if (!c)
		FAIL(-EBADMSG, "the bytes codec is malformed");
	v = member(c, "endian");
	if (v && !is_str(v, "little") && !is_str(v, "big"))
		FAIL(-EBADMSG, "bytes codec endian is neither little nor big");
	if (!v && a->type->size > 1)
		FAIL(-EBADMSG, "bytes codec has no endian for %s",
		     a->type->name);
	*big_endian = v && is_str(v, "big") && a->type->size > 1;
	v = member(meta, "storage_transformers");
	if (v && !(json_object_is_type(v, json_type_array) &&
	           !json_object_array_length(v)))
		FAIL(-ENOTSUP, "storage transformers are not supported");
	v = member(meta, "dimension_names");
	if (v && (!json_object_is_type(v, json_type_array) ||
	          json_object_array_length(v) != a->ndim))
		FAIL(-EBADMSG, "dimension_names does not have one entry per "
		               "dimension");
	if ((rc = dim_names_bad(v, a->ndim)) >= 0)
		FAIL(-EBADMSG, "dimension_names[%d]: not a string or null", rc);
	v = member(meta, "attributes");
	if (v && !json_object_is_type(v, json_type_object))
		FAIL(-EBADMSG, "attributes is not an object");
	a->attrs = v ? json_object_get(v) : NULL;
	return 0;
}
