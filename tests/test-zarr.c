/* SPDX-License-Identifier: MIT */
/*
 * Zarr (issue 13): metadata bytes and refusals of json/zarr.c, node names,
 * tensorctl zarr export (daemon tensors and .tgm files) and import, each
 * hierarchy checked by the strict structure checker (scripts/zarr-check.py)
 * and read back by zarrita 0.7.5 (tests/zarr/, installed by
 * scripts/deps.sh) with every value compared byte for byte against what
 * went in. A missing reader fails the test and says so.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <linux/udmabuf.h>
#include <json-c/json.h>

#include "td-json.h"
#include "td-zarr.h"
#include "tgm-desc.h"
#include "tensord/tensord.h"
#include "testclient.h"
#include "testutil.h"
#include "zarrtest.h"

TestSuite(checkers, .timeout = TU_TEST_TIMEOUT_S);
TestSuite(export, .timeout = TU_TEST_TIMEOUT_S);
TestSuite(http, .timeout = TU_TEST_TIMEOUT_S);
TestSuite(import, .timeout = TU_TEST_TIMEOUT_S);
TestSuite(meta, .timeout = TU_TEST_TIMEOUT_S);
TestSuite(names, .timeout = TU_TEST_TIMEOUT_S);

/* ---- metadata ---- */

static struct td_zarr_array arr(const char *name, const char *type,
                                uint32_t ndim, const uint64_t *shape)
{
	struct td_zarr_array a = {.ndim = ndim};

	snprintf(a.name, sizeof(a.name), "%s", name);
	a.type = td_zarr_type_by_name(type);
	cr_assert(a.type, "%s", type);
	if (ndim)
		memcpy(a.shape, shape, ndim * sizeof(*shape));
	return a;
}

static char *text(struct json_object *o)
{
	char *t = td_zarr_text(o, NULL);

	json_object_put(o);
	cr_assert(t);
	return t;
}

Test(meta, array_matches_the_spec_example)
{
	static const uint64_t shape[] = {2, 3};
	struct td_zarr_array a = arr("t", "float32", 2, shape);
	char *t;

	a.attrs = json_object_new_object();
	json_object_object_add(a.attrs, "units", json_object_new_string("K"));
	json_object_object_add(a.attrs, "_tensogram_filter",
	                       json_object_new_string("none"));
	t = text(td_zarr_v3_array(&a));
	/* zarr.md §4 without dimension_names: keys sorted, compact */
	cr_assert_str_eq(
	        t, "{\"attributes\":{\"_tensogram_filter\":\"none\",\"units\":"
	           "\"K\"},\"chunk_grid\":{\"configuration\":{\"chunk_shape\":"
	           "[2,3]},\"name\":\"regular\"},\"chunk_key_encoding\":{"
	           "\"configuration\":{\"separator\":\"/\"},\"name\":"
	           "\"default\"},\"codecs\":[{\"configuration\":{\"endian\":"
	           "\"little\"},\"name\":\"bytes\"}],\"data_type\":\"float32\","
	           "\"fill_value\":\"NaN\",\"node_type\":\"array\",\"shape\":"
	           "[2,3],\"zarr_format\":3}");
	free(t);
	td_zarr_array_fini(&a);
}

Test(meta, fill_values_per_type)
{
	static const struct {
		const char *type, *fill;
	} cases[] = {{"bool", "false"},     {"int64", "0"},
	             {"uint8", "0"},         {"float16", "\"NaN\""},
	             {"bfloat16", "\"NaN\""}, {"float64", "\"NaN\""},
	             {"complex64", "[\"NaN\",\"NaN\"]"}};

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		struct td_zarr_array a = arr("x", cases[i].type, 0, NULL);
		char *t = text(td_zarr_v3_array(&a)), want[64];

		snprintf(want, sizeof(want), "\"fill_value\":%s,",
		         cases[i].fill);
		cr_assert(strstr(t, want), "%s: %s", cases[i].type, t);
		free(t);
	}
}

Test(meta, chunk_keys_and_shapes)
{
	static const uint64_t s6[] = {6}, s23[] = {2, 3}, s03[] = {0, 3},
	                      s4[] = {1, 1, 1, 1};
	struct td_zarr_array a;
	char key[64], *t;
	uint64_t n;

	a = arr("x", "uint8", 1, s6);
	cr_assert_eq(td_zarr_chunk_key(&a, false, key, sizeof(key)), 1);
	cr_assert_str_eq(key, "c/0");
	a = arr("x", "uint8", 2, s23);
	cr_assert_eq(td_zarr_chunk_key(&a, false, key, sizeof(key)), 1);
	cr_assert_str_eq(key, "c/0/0");
	cr_assert_eq(td_zarr_chunk_key(&a, true, key, sizeof(key)), 1);
	cr_assert_str_eq(key, "0.0");
	a = arr("x", "uint8", 4, s4);
	cr_assert_eq(td_zarr_chunk_key(&a, false, key, sizeof(key)), 1);
	cr_assert_str_eq(key, "c/0/0/0/0");
	/* 0-d: exactly "c" (zarr.md §7), chunk_shape [] */
	a = arr("x", "int32", 0, NULL);
	cr_assert_eq(td_zarr_chunk_key(&a, false, key, sizeof(key)), 1);
	cr_assert_str_eq(key, "c");
	cr_assert_eq(td_zarr_chunk_bytes(&a, &n), 0);
	cr_assert_eq(n, 4);
	t = text(td_zarr_v3_array(&a));
	cr_assert(strstr(t, "\"chunk_shape\":[]"), "%s", t);
	cr_assert(strstr(t, "\"shape\":[]"), "%s", t);
	free(t);
	/* zero-size: chunk_shape 0 -> 1, no chunk at all */
	a = arr("x", "float32", 2, s03);
	cr_assert_eq(td_zarr_chunk_key(&a, false, key, sizeof(key)), 0);
	cr_assert_eq(td_zarr_chunk_bytes(&a, &n), 0);
	cr_assert_eq(n, 0);
	t = text(td_zarr_v3_array(&a));
	cr_assert(strstr(t, "\"chunk_shape\":[1,3]"), "%s", t);
	cr_assert(strstr(t, "\"shape\":[0,3]"), "%s", t);
	free(t);
}

Test(meta, non_finite_attributes_become_sentinels)
{
	struct json_object *o = json_object_new_object();
	char *t;

	json_object_object_add(o, "b", json_object_new_double(NAN));
	json_object_object_add(o, "a", json_object_new_double(-INFINITY));
	json_object_object_add(o, "c", json_object_new_double(INFINITY));
	t = text(o);
	cr_assert_str_eq(t, "{\"a\":\"-Infinity\",\"b\":\"NaN\",\"c\":"
	                    "\"Infinity\"}");
	free(t);
}

/*
 * Metadata that is a JSON object gave its keys as attributes, ours too: a
 * publisher's {"_tensord_quant":...} passed for the quantization of a
 * tensor that has none (and the real _tensord_name won only by order),
 * and import, which drops _tensord_* keys, lost them. Such an object is
 * kept whole, as text, like any metadata that is not an object.
 */
Test(meta, metadata_with_our_keys_is_kept_whole)
{
	static const char meta[] = "{\"_tensord_quant\":{\"axis\":0},\"a\":1}";
	struct td_zarr_tensor t = {.name = "x", .meta = meta,
	                           .meta_len = sizeof(meta) - 1,
	                           .quant_axis = -2};
	char *txt = text(td_zarr_tensor_attrs(&t));

	cr_assert_str_eq(txt, "{\"_tensord_meta\":\"{\\\"_tensord_quant\\\":"
	                      "{\\\"axis\\\":0},\\\"a\\\":1}\",\"_tensord_name\":"
	                      "\"x\"}");
	free(txt);
	/* without our keys: the keys, as before */
	t.meta = "{\"a\":1}";
	t.meta_len = 7;
	txt = text(td_zarr_tensor_attrs(&t));
	cr_assert_str_eq(txt, "{\"_tensord_name\":\"x\",\"a\":1}");
	free(txt);
}

/* The v3 zarr.json of a, and of a root holding it, read back. */
static void reads_back(struct td_zarr_array *a, const char *what, int depth)
{
	struct json_object *o;
	const char *w = "";
	char *t = text(td_zarr_v3_array(a));

	cr_assert_eq(td_zarr_json_parse(t, strlen(t), &o, &w), 0,
	             "%s %d: array: %s", what, depth, w);
	json_object_put(o);
	free(t);
	t = text(td_zarr_v3_group(NULL, a, 1));
	cr_assert_eq(td_zarr_json_parse(t, strlen(t), &o, &w), 0,
	             "%s %d: group: %s", what, depth, w);
	json_object_put(o);
	free(t);
}

/*
 * What tensord writes, it reads back, however deep the metadata: the
 * attributes sit one level down in an array's zarr.json and four in the
 * root's consolidated metadata, so metadata nested as deep as the reader
 * took was written deeper than it takes, and export -> import refused
 * the store's own root zarr.json (nesting too deep). The same for a
 * .tgm's attributes, from CBOR nested as deep as its reader takes.
 */
Test(meta, written_nesting_reads_back)
{
	static const uint64_t one = 1;
	char meta[512];
	uint8_t cbor[3 * TD_TGM_CBOR_MAX_DEPTH + 1];

	for (int depth = 1; depth <= 60; depth++) {
		struct td_zarr_array a = arr("x", "uint8", 1, &one);
		struct td_zarr_tensor t = {.name = "x", .meta = meta,
		                           .quant_axis = -2};
		size_t n = 0;

		/* memcpy: gcc's -Wformat-overflow under the sanitizers takes
		 * meta + n for a null pointer */
		for (int k = 0; k < depth; k++, n += 5)
			memcpy(meta + n, "{\"a\":", 5);
		meta[n++] = '1';
		for (int k = 0; k < depth; k++)
			meta[n++] = '}';
		t.meta_len = n;
		a.attrs = td_zarr_tensor_attrs(&t);
		cr_assert(a.attrs);
		reads_back(&a, "metadata", depth);
		td_zarr_array_fini(&a);
	}
	for (int k = 0; k < TD_TGM_CBOR_MAX_DEPTH; k++)
		memcpy(cbor + 3 * k, "\xa1\x61\x61", 3); /* {"a": */
	cbor[3 * TD_TGM_CBOR_MAX_DEPTH] = 1;
	{
		struct td_zarr_array a = arr("x", "uint8", 1, &one);
		struct td_err e = {0};
		const char *w = "";
		char *json;
		size_t jl;

		cr_assert_eq(td_json_from_cbor(cbor, sizeof(cbor), &json, &jl,
		                               &e),
		             0, "%s", e.reason);
		cr_assert_eq(td_zarr_json_parse(json, jl, &a.attrs, &w), 0,
		             "%s", w);
		free(json);
		reads_back(&a, "cbor", TD_TGM_CBOR_MAX_DEPTH);
		td_zarr_array_fini(&a);
	}
}

/*
 * zarr-python 2 (and so Dask and xarray) decodes .zmetadata, .zarray and
 * .zattrs as ASCII: one tensor whose str metadata held "é" (UTF-8 as
 * json-c printed it) made the whole /zarr-v2/ group unreadable
 * (UnicodeDecodeError). The texts are ASCII, with \u escapes (a
 * surrogate pair past U+FFFF), the same strings to any JSON reader.
 */
Test(meta, texts_are_ascii_with_unicode_escapes)
{
	static const char meta[] = "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x99\x82";
	struct td_zarr_tensor t = {.name = "x", .meta = meta,
	                           .meta_len = sizeof(meta) - 1,
	                           .quant_axis = -2};
	struct json_object *back;
	size_t len;
	char *txt = td_zarr_text(td_zarr_tensor_attrs(&t), &len);

	cr_assert(txt);
	cr_assert_eq(len, strlen(txt));
	for (size_t i = 0; i < len; i++)
		cr_assert(!(txt[i] & 0x80), "byte %zu of %s is not ASCII", i,
		          txt);
	cr_assert_str_eq(txt, "{\"_tensord_meta\":\"h\\u00e9llo \\u20ac "
	                      "\\ud83d\\ude42\",\"_tensord_name\":\"x\"}");
	back = json_tokener_parse(txt);
	cr_assert(back);
	cr_assert_str_eq(json_object_get_string(
	                         json_object_object_get(back, "_tensord_meta")),
	                 meta);
	json_object_put(back);
	free(txt);
}

Test(meta, group_consolidates_every_array)
{
	static const uint64_t s[] = {2};
	struct td_zarr_array as[2] = {arr("b", "int8", 1, s),
	                              arr("a", "uint16", 1, s)};
	struct json_object *g = json_object_new_object();
	char *t;

	t = text(td_zarr_v3_group(g, as, 2));
	cr_assert(!strncmp(t, "{\"attributes\":{},\"consolidated_metadata\":"
	                      "{\"kind\":\"inline\",\"metadata\":{\"a\":{",
	                   strlen("{\"attributes\":{},\"consolidated_metadata\":"
	                          "{\"kind\":\"inline\",\"metadata\":{\"a\":{")),
	          "%s", t);
	cr_assert(strstr(t, "},\"must_understand\":false},\"node_type\":"
	                    "\"group\",\"zarr_format\":3}"),
	          "%s", t);
	free(t);
	t = text(td_zarr_v3_group(g, NULL, 0));
	cr_assert(strstr(t, "\"metadata\":{}"), "%s", t);
	free(t);
	/* v2: consolidated keys and xarray's dimension names */
	t = text(td_zarr_v2_consolidated(g, as, 2));
	cr_assert(strstr(t, "\"a/.zarray\":{\"chunks\":[2],\"compressor\":"
	                    "null,\"dimension_separator\":\".\",\"dtype\":"
	                    "\"<u2\",\"fill_value\":null,\"filters\":null,"
	                    "\"order\":\"C\",\"shape\":[2],\"zarr_format\":2}"),
	          "%s", t);
	cr_assert(strstr(t, "\"b/.zattrs\":{\"_ARRAY_DIMENSIONS\":[\"b/0\"]}"),
	          "%s", t);
	cr_assert(strstr(t, "\"zarr_consolidated_format\":1}"), "%s", t);
	free(t);
	json_object_put(g);
}

/*
 * A tensor whose metadata names its dimensions (_ARRAY_DIMENSIONS, one
 * string each) keeps those names in its v2 .zattrs, xarray's dimension
 * names; they were replaced by the store's, the user's dropped silently.
 * A value that names them not (wrong count, not strings) would break
 * xarray: the store's names go there, the user's value beside them.
 */
Test(meta, v2_attrs_keep_the_dimension_names_the_metadata_gives)
{
	static const uint64_t s[] = {2, 3};
	static const struct {
		const char *meta, *want;
	} c[] = {
	        {"{\"_ARRAY_DIMENSIONS\":[\"y\",\"x\"],\"units\":\"K\"}",
	         "{\"_ARRAY_DIMENSIONS\":[\"y\",\"x\"],\"units\":\"K\"}"},
	        {"{\"_ARRAY_DIMENSIONS\":[\"y\"]}",
	         "{\"_ARRAY_DIMENSIONS\":[\"t/0\",\"t/1\"],"
	         "\"_tensord_array_dimensions\":[\"y\"]}"},
	        {"{\"_ARRAY_DIMENSIONS\":[\"y\",1]}",
	         "{\"_ARRAY_DIMENSIONS\":[\"t/0\",\"t/1\"],"
	         "\"_tensord_array_dimensions\":[\"y\",1]}"},
	        {"{\"_ARRAY_DIMENSIONS\":\"yx\"}",
	         "{\"_ARRAY_DIMENSIONS\":[\"t/0\",\"t/1\"],"
	         "\"_tensord_array_dimensions\":\"yx\"}"},
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		struct td_zarr_array a = arr("t", "float32", 2, s);
		const char *why = NULL;
		char *t;

		cr_assert_eq(td_zarr_json_parse(c[i].meta, strlen(c[i].meta),
		                                &a.attrs, &why),
		             0, "%s", why);
		t = text(td_zarr_v2_attrs(&a));
		cr_assert_str_eq(t, c[i].want, "%s", c[i].meta);
		free(t);
		td_zarr_array_fini(&a);
	}
}

/* td_zarr_array_read() of a zarr.json text: its result and reason. */
static int read_meta(const char *json, char *why, size_t cap, bool *big)
{
	struct td_zarr_array a = {0};
	struct json_object *o;
	const char *w;
	char sep;
	int rc = td_zarr_json_parse(json, strlen(json), &o, &w);

	if (rc < 0) {
		snprintf(why, cap, "%s", w);
		return rc;
	}
	rc = td_zarr_array_read(o, &a, big, &sep, why, cap);
	json_object_put(o);
	td_zarr_array_fini(&a);
	return rc;
}

#define ARR_HEAD                                                              \
	"{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[2],"           \
	"\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{"            \
	"\"chunk_shape\":[2]}},\"chunk_key_encoding\":{\"name\":\"default\"," \
	"\"configuration\":{\"separator\":\"/\"}},"

/* an array of uint8 with attributes A */
#define ATTRS(A)                                                              \
	ARR_HEAD "\"data_type\":\"uint8\",\"fill_value\":0,"                   \
	         "\"codecs\":[{\"name\":\"bytes\"}],\"attributes\":" A "}"

Test(meta, read_accepts_and_refuses_with_reasons)
{
	static const struct {
		const char *json;
		int rc;
		const char *why;
	} cases[] = {
	        {ARR_HEAD "\"data_type\":\"float32\",\"fill_value\":\"NaN\","
	                  "\"codecs\":[{\"name\":\"bytes\",\"configuration\":"
	                  "{\"endian\":\"big\"}}]}",
	         0, NULL},
	        {ARR_HEAD "\"data_type\":\"float64\",\"fill_value\":"
	                  "\"-Infinity\",\"codecs\":[{\"name\":\"bytes\","
	                  "\"configuration\":{\"endian\":\"little\"}}]}",
	         0, NULL},
	        {ARR_HEAD "\"data_type\":\"float32\",\"fill_value\":"
	                  "\"0x7fc00000\",\"codecs\":[{\"name\":\"bytes\","
	                  "\"configuration\":{\"endian\":\"little\"}}],"
	                  "\"x\":{\"must_understand\":false}}",
	         0, NULL},
	        {ARR_HEAD "\"data_type\":\"float32\",\"fill_value\":NaN,"
	                  "\"codecs\":[]}",
	         -EBADMSG, NULL},
	        {ARR_HEAD "\"data_type\":\"float32\",\"fill_value\":0,"
	                  "\"codecs\":[{\"name\":\"gzip\",\"configuration\":"
	                  "{\"level\":1}}]}",
	         -ENOTSUP, "codec \"gzip\""},
	        {ARR_HEAD "\"data_type\":\"float32\",\"fill_value\":0,"
	                  "\"codecs\":[{\"name\":\"bytes\",\"configuration\":"
	                  "{\"endian\":\"little\"}},{\"name\":\"crc32c\"}]}",
	         -ENOTSUP, "codecs other than bytes"},
	        {ARR_HEAD "\"data_type\":\"r24\",\"fill_value\":0,"
	                  "\"codecs\":[]}",
	         -ENOTSUP, "data_type \"r24\""},
	        {ARR_HEAD "\"data_type\":\"float32\",\"fill_value\":0,"
	                  "\"codecs\":[{\"name\":\"bytes\"}]}",
	         -EBADMSG, "no endian"},
	        {ARR_HEAD "\"data_type\":\"uint8\",\"fill_value\":0,"
	                  "\"codecs\":[{\"configuration\":{}}]}",
	         -EBADMSG, "the first codec has no name"},
	        {ARR_HEAD "\"data_type\":\"uint8\",\"fill_value\":0,"
	                  "\"codecs\":[{\"name\":7}]}",
	         -EBADMSG, "the first codec has no name"},
	        {ARR_HEAD "\"data_type\":\"uint8\",\"fill_value\":256,"
	                  "\"codecs\":[{\"name\":\"bytes\"}]}",
	         -EBADMSG, "fill_value"},
	        {ARR_HEAD "\"data_type\":\"uint8\",\"fill_value\":0,"
	                  "\"codecs\":[{\"name\":\"bytes\"}],\"extra\":1}",
	         -EBADMSG, "unknown member \"extra\""},
	        {"{\"zarr_format\":2,\"node_type\":\"array\"}", -EBADMSG,
	         "zarr_format"},
	        {"{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[4],"
	         "\"data_type\":\"uint8\",\"chunk_grid\":{\"name\":"
	         "\"regular\",\"configuration\":{\"chunk_shape\":[2]}}}",
	         -ENOTSUP, "more than one chunk"},
	        {"{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[4],"
	         "\"data_type\":\"uint8\",\"chunk_grid\":{\"name\":\"regular\","
	         "\"configuration\":{\"chunk_shape\":[4,1]}}}",
	         -EBADMSG, "rank"},
	        {"{\"a\":1} x", -EBADMSG, NULL},
	        /* zarr.md §4: one string or null per dimension */
	        {ARR_HEAD "\"data_type\":\"uint8\",\"fill_value\":0,"
	                  "\"codecs\":[{\"name\":\"bytes\"}],"
	                  "\"dimension_names\":[null]}",
	         0, NULL},
	        {ARR_HEAD "\"data_type\":\"uint8\",\"fill_value\":0,"
	                  "\"codecs\":[{\"name\":\"bytes\"}],"
	                  "\"dimension_names\":[7]}",
	         -EBADMSG, "dimension_names[0]: not a string"},
	        /* RFC 8259 §8.1: UTF-8; json-c lets an overlong "A" and an
	         * encoded surrogate through, which the \u escapes of
	         * td_zarr_text() would write as other strings */
	        {ARR_HEAD "\"data_type\":\"uint8\",\"fill_value\":0,"
	                  "\"codecs\":[{\"name\":\"bytes\"}],"
	                  "\"attributes\":{\"a\":\"\xc1\x81\"}}",
	         -EBADMSG, "not UTF-8"},
	        {ARR_HEAD "\"data_type\":\"uint8\",\"fill_value\":0,"
	                  "\"codecs\":[{\"name\":\"bytes\"}],"
	                  "\"attributes\":{\"\xed\xa0\x80\":1}}",
	         -EBADMSG, "not UTF-8"},
	        {ARR_HEAD "\"data_type\":\"uint8\",\"fill_value\":0,"
	                  "\"codecs\":[{\"name\":\"bytes\"}],"
	                  "\"attributes\":{\"\xc3\xa9\":\"\xf0\x9f\x98\x80\"}}",
	         0, NULL},
	        /* what json-c takes in strict mode beyond RFC 8259 and would
	         * write back as it came (no JSON for zarr-python) or as
	         * another value: clamped, U+FFFD, a key cut at the NUL */
	        {ATTRS("{\"a\":1.}"), -EBADMSG, "no digit after its point"},
	        {ATTRS("{\"a\":1.e3}"), -EBADMSG, "no digit after its point"},
	        {ATTRS("{\"a\":[00]}"), -EBADMSG, "a leading zero"},
	        {ATTRS("{\"a\":-01.5}"), -EBADMSG, "a leading zero"},
	        {ATTRS("{\"a\":99999999999999999999}"), -EBADMSG,
	         "integer out of range"},
	        {ATTRS("{\"a\":-9223372036854775809}"), -EBADMSG,
	         "integer out of range"},
	        {ATTRS("{\"a\":\"\\ud800\"}"), -EBADMSG, "lone surrogate"},
	        {ATTRS("{\"a\":\"\\udc00\\ud800\"}"), -EBADMSG,
	         "lone surrogate"},
	        {ATTRS("{\"a\":\"\\ud83d\\u0041\"}"), -EBADMSG,
	         "lone surrogate"},
	        {ATTRS("{\"a\\u0000b\":1}"), -EBADMSG, "escaped NUL in a key"},
	        {ATTRS("{\"a\":\"x\ty\"}"), -EBADMSG, "control character"},
	        /* the RFC forms of each are taken as they are */
	        {ATTRS("{\"a\":[1.0,1e05,-0.5E-3,0,-0,18446744073709551615,"
	               "-9223372036854775808],\"b\\\"\":\"\\u0000"
	               "\\ud83d\\ude00\\\\u0041\\t\"}"),
	         0, NULL},
	};
	char why[256];
	bool big;

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		int rc;

		why[0] = 0;
		rc = read_meta(cases[i].json, why, sizeof(why), &big);
		cr_assert_eq(rc, cases[i].rc, "case %zu: %d (%s)", i, rc, why);
		if (cases[i].why)
			cr_assert(strstr(why, cases[i].why), "case %zu: %s", i,
			          why);
		if (i == 0)
			cr_assert(big, "endian big is read");
	}
}

/*
 * Integers above 2^63 - 1: json-c's int64 getter gives INT64_MAX for them
 * (errno 0), so a shape of 2^63 was read as 2^63 - 1 and an int64 fill
 * value up to 2^64 - 1 was taken. A dimension is read whole (written
 * back as it came); such a fill value is out of int64's range.
 */
Test(meta, integers_above_int64_are_not_clamped)
{
	static const char *const json =
	        "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":"
	        "[0,18446744073709551615],\"data_type\":\"int64\","
	        "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{"
	        "\"chunk_shape\":[1,18446744073709551615]}},"
	        "\"chunk_key_encoding\":{\"name\":\"default\"},"
	        "\"fill_value\":9223372036854775807,\"codecs\":[{\"name\":"
	        "\"bytes\",\"configuration\":{\"endian\":\"little\"}}]}";
	struct td_zarr_array a = {0};
	struct json_object *o;
	const char *w;
	char why[256] = "", sep, *t;
	bool big;

	cr_assert_eq(td_zarr_json_parse(json, strlen(json), &o, &w), 0, "%s",
	             w);
	cr_assert_eq(td_zarr_array_read(o, &a, &big, &sep, why, sizeof(why)),
	             0, "%s", why);
	json_object_put(o);
	cr_assert_eq(a.ndim, 2);
	cr_assert_eq(a.shape[1], UINT64_MAX);
	t = text(td_zarr_v3_array(&a));
	cr_assert(strstr(t, "\"shape\":[0,18446744073709551615]"), "%s", t);
	free(t);
	td_zarr_array_fini(&a);
	/* a fill value one above int64's largest */
	{
		char *bad = strdup(json);
		char *f = strstr(bad, "9223372036854775807");

		cr_assert(f);
		f[18] = '8';
		cr_assert_eq(read_meta(bad, why, sizeof(why), &big), -EBADMSG);
		cr_assert(strstr(why, "fill_value"), "%s", why);
		free(bad);
	}
}

/* ---- names (tensogram.md §18) ---- */

/* Every chunk byte through td_zarr_walk_at(): (plane, offset) pairs. */
static void walk_all(const struct td_zarr_walk *w, uint32_t *planes,
                     uint64_t *offs)
{
	for (uint64_t pos = 0, n; pos < w->len; pos += n) {
		uint32_t p;
		uint64_t off;

		n = td_zarr_walk_at(w, pos, &p, &off);
		cr_assert(n >= 1 && n <= w->len - pos, "pos %llu: %llu",
		          (unsigned long long)pos, (unsigned long long)n);
		for (uint64_t k = 0; k < n; k++) {
			planes[pos + k] = p;
			offs[pos + k] = off + k;
		}
	}
}

Test(meta, walk_layouts_and_refusals)
{
	static const uint64_t shape[] = {3, 2};
	struct td_zarr_array a = arr("x", "uint16", 2, shape);
	struct td_zarr_walk w;
	uint64_t one[] = {64}, three[] = {4, 0, 8}, offs[12];
	uint32_t planes[12];
	int64_t pitch[] = {16, 2}, tr[] = {2, 6}, neg[] = {-16, 2},
	        far[] = {INT64_MAX, 2};
	struct td_zarr_src s = {.nplanes = 1, .plane_size = one};

	/* dense: plane 0 from its first byte */
	cr_assert_null(td_zarr_walk_init(&w, &a, &s));
	cr_assert_eq(w.layout, TD_ZARR_DENSE);
	cr_assert_eq(w.len, 12);
	/* a row pitch: runs of one row (4 bytes) 16 bytes apart */
	s.nstrides = 2;
	s.strides = pitch;
	cr_assert_null(td_zarr_walk_init(&w, &a, &s));
	cr_assert_eq(w.layout, TD_ZARR_STRIDED);
	cr_assert_eq(w.run, 4);
	walk_all(&w, planes, offs);
	for (uint64_t i = 0; i < 12; i++)
		cr_assert_eq(offs[i], (i / 4) * 16 + i % 4, "byte %llu",
		             (unsigned long long)i);
	/* transposed: element runs */
	s.strides = tr;
	cr_assert_null(td_zarr_walk_init(&w, &a, &s));
	cr_assert_eq(w.run, 2);
	walk_all(&w, planes, offs);
	for (uint64_t e = 0; e < 6; e++)
		cr_assert_eq(offs[2 * e], (e / 2) * 2 + (e % 2) * 6);
	/* refusals, each with its reason */
	s.strides = neg;
	cr_assert_str_eq(td_zarr_walk_init(&w, &a, &s),
	                 "it has negative strides");
	s.strides = far;
	cr_assert_str_eq(td_zarr_walk_init(&w, &a, &s),
	                 "its strides reach past its plane");
	s.strides = pitch;
	one[0] = 2 * 16 + 2 + 1; /* the last element one byte short */
	cr_assert_str_eq(td_zarr_walk_init(&w, &a, &s),
	                 "its strides reach past its plane");
	s.nstrides = 0;
	one[0] = 11;
	cr_assert_str_eq(td_zarr_walk_init(&w, &a, &s),
	                 "its plane is smaller than its shape");
	s.format = "nv12";
	cr_assert_str_eq(td_zarr_walk_init(&w, &a, &s),
	                 "a semi-planar format has no single-array form");
	/* planar: packed planes in order, an empty one skipped */
	s.format = "";
	s.nplanes = 3;
	s.plane_size = three;
	cr_assert_null(td_zarr_walk_init(&w, &a, &s));
	cr_assert_eq(w.layout, TD_ZARR_PLANAR);
	walk_all(&w, planes, offs);
	for (uint64_t i = 0; i < 12; i++) {
		cr_assert_eq(planes[i], i < 4 ? 0 : 2);
		cr_assert_eq(offs[i], i < 4 ? i : i - 4);
	}
	three[2] = 9;
	cr_assert_str_eq(td_zarr_walk_init(&w, &a, &s),
	                 "its planes are padded (not supported)");
}

/* A single-plane image is packed rows at its plane's stride (what the
 * daemon checks), whatever its blob strides say. */
Test(meta, an_image_is_rows_at_its_plane_stride)
{
	static const uint64_t shape[] = {2, 2, 3};
	struct td_zarr_array a = arr("x", "uint8", 3, shape);
	struct td_zarr_walk w;
	uint64_t one[] = {70}, offs[12];
	uint32_t planes[12];
	int64_t dense[] = {6, 3, 1};
	struct td_zarr_src s = {.format = "rgb8", .nstrides = 3,
	                        .strides = dense, .nplanes = 1,
	                        .plane_size = one, .row_pitch = 64};

	cr_assert_null(td_zarr_walk_init(&w, &a, &s));
	cr_assert_eq(w.layout, TD_ZARR_STRIDED);
	walk_all(&w, planes, offs);
	for (uint64_t i = 0; i < 12; i++)
		cr_assert_eq(offs[i], (i / 6) * 64 + i % 6, "byte %llu",
		             (unsigned long long)i);
	/* a pitch the plane cannot hold is refused, not read past */
	one[0] = 69;
	cr_assert_str_eq(td_zarr_walk_init(&w, &a, &s),
	                 "its strides reach past its plane");
	/* the packed pitch is the dense layout */
	s.row_pitch = 6;
	one[0] = 12;
	cr_assert_null(td_zarr_walk_init(&w, &a, &s));
	cr_assert_eq(w.layout, TD_ZARR_DENSE);
}

Test(names, node_names_are_sanitised)
{
	static const char *const cases[][2] = {
	        {"a/b", "a_b"},           {"a\\b", "a_b"},
	        {"", "_"},                {"..", "v_.."},
	        {"...", "v_..."},         {"__x", "v___x"},
	        {"zarr.json", "v_zarr.json"}, {"cam/left", "cam_left"},
	        {"tab\there", "tab_here"}, {"temp\xc3\xa9rature", "temp\xc3\xa9rature"},
	        {"_x", "_x"},
	};
	char out[64];

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		td_tgm_node_name(cases[i][0], out, sizeof(out));
		cr_assert_str_eq(out, cases[i][1], "'%s'", cases[i][0]);
	}
	/* a cut never ends inside a UTF-8 sequence */
	td_tgm_node_name("ab\xc3\xa9", out, 4);
	cr_assert_str_eq(out, "ab");
}

/* ---- export and import against a daemon ---- */

static struct tu_daemon d;

static void start(void)
{
	tu_daemon_start(&d, "warn");
	zt_setup(&d);
}

static void stop(void)
{
	zt_teardown();
	tu_daemon_stop(&d, false);
}

/* name, dtype, shape text, element bytes */
struct put {
	const char *name, *dtype, *shape, *zdtype;
	uint32_t ndim;
	uint64_t dims[4];
	const void *bytes;
	size_t len;
};

static const float f32v[] = {1.5f, -2.25f, 0.0f, 3.0f, -0.5f, 1024.0f};
static const int64_t i64v[] = {INT64_MIN, -1, 9007199254740993LL, INT64_MAX};
static const uint16_t f16v[] = {0x3e00, 0xc080, 0x7c00, 0xfc00, 0x7e00};
static const int16_t i16v[] = {-32768, 7, 32767};
static const double f64v[] = {0.125, -1e300};
static const uint8_t u8v[] = {200};

static const struct put puts_[] = {
        {"cam/left", "f32", "2,3", "float32", 2, {2, 3}, f32v, sizeof(f32v)},
        {"cam_left", "i64", "4", "int64", 1, {4}, i64v, sizeof(i64v)},
        {"half", "f16", "5", "float16", 1, {5}, f16v, sizeof(f16v)},
        {"small", "i16", "1,3", "int16", 2, {1, 3}, i16v, sizeof(i16v)},
        {"wide", "f64", "2,1,1", "float64", 3, {2, 1, 1}, f64v, sizeof(f64v)},
        {"scalar", "u8", "", "uint8", 0, {0}, u8v, sizeof(u8v)},
        {"empty", "f32", "0,3", "float32", 2, {0, 3}, NULL, 0},
};
#define NPUTS (sizeof(puts_) / sizeof(*puts_))
/* node names: cam/left -> cam_left, the real cam_left gets a suffix */
static const char *const nodes[NPUTS] = {"cam_left", "cam_left_1", "half",
                                         "small",    "wide",       "scalar",
                                         "empty"};

static void put_all(void)
{
	for (size_t i = 0; i < NPUTS; i++) {
		char *raw = zt_write_raw(nodes[i], puts_[i].bytes, puts_[i].len);

		zt_ok("put '%s' --dtype %s --shape '%s' %s", puts_[i].name,
		      puts_[i].dtype, puts_[i].shape, raw);
		free(raw);
	}
}

/* The expectations file for zarrita: every put, under its node name. */
static char *expect_puts(bool with_attrs)
{
	struct zt_expect *x = zt_expect_new();

	for (size_t i = 0; i < NPUTS; i++) {
		char attrs[128];

		snprintf(attrs, sizeof(attrs), "{\"_tensord_name\":\"%s\"}",
		         puts_[i].name);
		zt_expect_array(x, nodes[i], puts_[i].zdtype, puts_[i].ndim,
		                puts_[i].dims, nodes[i],
		                with_attrs ? attrs : NULL);
	}
	return zt_expect_done(x, NULL);
}

Test(export, daemon_tensors_read_back_by_zarrita, .init = start, .fini = stop)
{
	char *exp, *out;

	put_all();
	zt_ok("zarr export %s/x", zt_dir);
	zt_check_dir("x");
	exp = expect_puts(true);
	zt_zarrita("x", exp);
	/* the group lists the arrays in the daemon's (name) order */
	out = zt_file("x/zarr.json");
	cr_assert(strstr(out, "\"_tensord_variables\":[\"cam_left\","
	                      "\"cam_left_1\",\"empty\",\"half\","
	                      "\"scalar\",\"small\",\"wide\"]"),
	          "%s", out);
	free(out);
	free(exp);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* The syncs (fsync, fdatasync, syncfs: *fs) of `zarr export DIR ARGS`,
 * counted by the shim. */
static unsigned export_syncs(const char *dir, const char *args, unsigned *fs)
{
	const char *shim = getenv("TD_RAISE_BEFORE_OPEN_SHIM");
	unsigned f = 0, fd = 0, s = 0;
	char *out, *got, rel[64];

	cr_assert(shim, "TD_RAISE_BEFORE_OPEN_SHIM is not set");
	/* a sanitized tensorctl is told its runtime need not come first */
	cr_assert_eq(zt_sh(&out, "TD_COUNT_SYNC=%s/%s.count LD_PRELOAD=%s "
	                         "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:"
	                         "verify_asan_link_order=0 "
	                         "'%s' --socket '%s' zarr export %s/%s %s",
	                   zt_dir, dir, shim, getenv("TD_TENSORCTL"), zt_sock,
	                   zt_dir, dir, args),
	             0, "%s", out);
	free(out);
	snprintf(rel, sizeof(rel), "%s.count", dir);
	got = zt_file(rel);
	cr_assert_eq(sscanf(got, "fsync %u fdatasync %u syncfs %u", &f, &fd,
	                    &s),
	             3, "%s", got);
	free(got);
	*fs = s;
	return f + fd + s;
}

/*
 * An export synced every file and every folder it wrote, one by one:
 * about 12 ms an array on a disk, 70 s for 6000 arrays. Its whole tree is
 * now made durable with one syncfs(2) before the rename (and the parent
 * folder's fsync after it): the syncs of an export do not grow with its
 * arrays, and it still syncs.
 */
Test(export, syncs_do_not_grow_with_the_arrays, .init = start, .fini = stop)
{
	unsigned one, many, fs1, fs40;
	char *raw = zt_write_raw("one", "\x07", 1);

	zt_ok_sh("for i in $(seq 40); do '%s' --socket '%s' put t$i --dtype u8 "
	         "--shape 1 %s || exit 1; done",
	         getenv("TD_TENSORCTL"), zt_sock, raw);
	free(raw);
	one = export_syncs("one", "t1", &fs1);
	many = export_syncs("many", "", &fs40);
	cr_expect_geq(fs1, 1, "one array: no syncfs, not made durable");
	cr_expect_geq(fs40, 1, "40 arrays: no syncfs, not made durable");
	cr_expect_eq(many, one, "syncs: %u for 1 array, %u for 40", one,
	             many);
	zt_check_dir("many");
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * DIR an existing empty mount point (a fresh volume's root): the export
 * was built beside it and renamed over it, which a mount point refuses
 * (EBUSY), so it always failed. It is built inside it and moved up now;
 * a failure still leaves it empty. A tmpfs in a private mount namespace.
 */
Test(export, into_an_empty_mount_point, .init = start, .fini = stop)
{
	char vol[128], *out, *raw;
	uint8_t *big = calloc(1, 1 << 20);

	cr_assert(big);
	snprintf(vol, sizeof(vol), "%s/vol", zt_dir);
	cr_assert_eq(mkdir(vol, 0755), 0);
	if (unshare(CLONE_NEWNS) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", vol, "tmpfs", 0, "size=256k") < 0) {
		free(big);
		cr_skip_test("needs root: a mount namespace with a tmpfs (%s)",
		             strerror(errno));
	}
	put_all();
	zt_ok("zarr export %s", vol);
	zt_check_dir("vol");
	out = expect_puts(true);
	zt_zarrita("vol", out);
	free(out);
	cr_assert_eq(zt_sh(&out, "ls -A %s | grep -c tensorctl", vol), 1,
	             "a temporary folder is left: %s", out);
	free(out);
	/* a failure (the volume full) leaves it empty, no temporary left */
	cr_assert_eq(umount(vol), 0);
	cr_assert_eq(mount("tmpfs", vol, "tmpfs", 0, "size=64k"), 0);
	raw = zt_write_raw("big", big, 1 << 20);
	free(big);
	zt_ok("put big --dtype u8 --shape 1048576 %s", raw);
	free(raw);
	cr_assert_eq(zt_ctl(&out, "zarr export %s/ big small", vol), 1);
	cr_assert(strstr(out, "No space left on device"), "%s", out);
	free(out);
	cr_assert_eq(zt_sh(&out, "ls -A %s", vol), 0);
	cr_assert_str_eq(out, "", "left in the volume");
	free(out);
	/* and the volume takes the next export whole */
	zt_ok("zarr export %s small half", vol);
	cr_assert_eq(zt_sh(&out, "ls -A %s", vol), 0);
	cr_assert_str_eq(out, "half\nsmall\nzarr.json\n");
	free(out);
	umount(vol);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* The entries of folder whose name starts with ".tensorctl-". */
static int leftovers(const char *folder)
{
	char *out;
	int n;

	zt_sh(&out, "ls -A '%s' | grep -c '^\\.tensorctl-'", folder);
	n = atoi(out);
	free(out);
	return n;
}

/* `zarr export DIR`, killed (SIGKILL) at its first write into its
 * hidden folder, made in folder. */
static void killed_export(const char *dir, const char *folder)
{
	char spec[200], *out;

	snprintf(spec, sizeof(spec), "9:%s/.tensorctl-*", folder);
	tu_shim_on("TD_RAISE_BEFORE_WRITE", spec);
	cr_assert_eq(zt_ctl(&out, "zarr export %s", dir), 128 + 9, "%s", out);
	tu_shim_off("TD_RAISE_BEFORE_WRITE");
	free(out);
}

/*
 * An export killed part way (SIGKILL, the OOM killer) left its hidden
 * folder (.tensorctl-PID-NAME-XXXXXX, its arrays so far) for good:
 * nothing removed it, unlike a killed -o's temporary file. Into an empty
 * mount point that folder is inside DIR, which then was never empty
 * again: every later export there was refused ("is not empty"). The next
 * export removes what a dead export of this uid left, beside DIR or in
 * it.
 */
Test(export, what_a_killed_export_left_is_removed_by_the_next,
     .init = start, .fini = stop)
{
	char dir[128], vol[128], *out;

	put_all();
	snprintf(dir, sizeof(dir), "%s/x", zt_dir);
	killed_export(dir, zt_dir);
	cr_assert_eq(leftovers(zt_dir), 1, "the kill left nothing");
	zt_ok("zarr export %s/y", zt_dir);
	cr_expect_eq(leftovers(zt_dir), 0, "the killed export's folder stays");
	zt_check_dir("y");
	/* into an empty mount point: the folder was inside it */
	snprintf(vol, sizeof(vol), "%s/vol", zt_dir);
	snprintf(dir, sizeof(dir), "%s/vol", zt_dir);
	zt_ok_sh("rm -rf %s/.tensorctl-*", zt_dir); /* the base's leftover */
	cr_assert_eq(mkdir(vol, 0755), 0);
	if (unshare(CLONE_NEWNS) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", vol, "tmpfs", 0, "size=256k") < 0)
		cr_skip_test("needs root: a mount namespace with a tmpfs (%s)",
		             strerror(errno));
	killed_export(dir, vol);
	cr_assert_eq(leftovers(vol), 1, "the kill left nothing in the volume");
	cr_expect_eq(zt_ctl(&out, "zarr export %s", vol), 0, "%s", out);
	free(out);
	cr_expect_eq(leftovers(vol), 0);
	zt_check_dir("vol");
	umount(vol);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* The daemon open to every uid, the tensors of put_all, and an empty
 * folder shelf/mine of uid 65534 in a shelf only root may write. */
static void shelf_start(void)
{
	static const char *const more[] = {"--socket-mode", "0666", NULL};

	cr_assert_eq(geteuid(), 0, "this test runs as root (as CI does)");
	tu_daemon_start_args(&d, "warn", more);
	zt_setup(&d);
	put_all();
	zt_ok_sh("chmod 0711 %s && chmod 0755 %s && mkdir -m 0755 %s/shelf && "
	         "mkdir -m 0750 %s/shelf/mine && chown 65534:65534 "
	         "%s/shelf/mine",
	         d.dir, zt_dir, zt_dir, zt_dir, zt_dir);
}

/*
 * DIR an existing empty folder that an administrator made for a user in a
 * parent the user may not write (a shelf of per-user folders): the
 * temporary folder beside DIR could not be made, so the export always
 * failed ("making a new folder in ...: Permission denied"). It is built
 * inside DIR and moved up now, and DIR keeps its owner and mode.
 */
Test(export, into_an_empty_folder_whose_parent_the_user_may_not_write,
     .fini = stop)
{
	char *out;
	struct stat st;

	shelf_start();
	cr_assert_eq(zt_sh(&out,
	                   "setpriv --reuid=65534 --regid=65534 "
	                   "--clear-groups '%s' --socket '%s' zarr export "
	                   "%s/shelf/mine",
	                   getenv("TD_TENSORCTL"), d.sock, zt_dir),
	             0, "%s", out);
	free(out);
	zt_check_dir("shelf/mine");
	out = expect_puts(true);
	zt_zarrita("shelf/mine", out);
	free(out);
	cr_assert_eq(zt_sh(&out, "ls -A %s/shelf/mine | grep -c tensorctl",
	                   zt_dir),
	             1, "a temporary folder is left: %s", out);
	free(out);
	cr_assert_eq(zt_sh(&out, "ls -A %s/shelf", zt_dir), 0);
	cr_assert_str_eq(out, "mine\n", "left beside it");
	free(out);
	{
		char p[256];

		snprintf(p, sizeof(p), "%s/shelf/mine", zt_dir);
		cr_assert_eq(stat(p, &st), 0);
	}
	cr_assert(st.st_uid == 65534 && (st.st_mode & 07777) == 0750,
	          "the folder's owner and mode are kept: %u %o",
	          (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
	/* a second export into it is refused: it is not empty now */
	cr_assert_eq(zt_sh(&out,
	                   "setpriv --reuid=65534 --regid=65534 "
	                   "--clear-groups '%s' --socket '%s' zarr export "
	                   "%s/shelf/mine small",
	                   getenv("TD_TENSORCTL"), d.sock, zt_dir),
	             1, "%s", out);
	cr_assert(strstr(out, "is not empty"), "%s", out);
	free(out);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * A move up into DIR that fails half-way (the disk, here the root
 * zarr.json, the last): what was moved is moved back, so DIR is left as it
 * was, empty, and the temporary folder is removed. This path had no test.
 */
Test(export, a_failed_move_up_leaves_the_folder_empty, .fini = stop)
{
	const char *shim = getenv("TD_RAISE_BEFORE_OPEN_SHIM");
	char *out;

	cr_assert(shim, "TD_RAISE_BEFORE_OPEN_SHIM is not set");
	shelf_start();
	/* a sanitized tensorctl is told its runtime need not come first */
	cr_assert_eq(zt_sh(&out,
	                   "TD_FAIL_RENAMEAT2=zarr.json LD_PRELOAD=%s "
	                   "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:"
	                   "verify_asan_link_order=0 "
	                   "setpriv --reuid=65534 --regid=65534 "
	                   "--clear-groups '%s' --socket '%s' zarr export "
	                   "%s/shelf/mine",
	                   shim, getenv("TD_TENSORCTL"), d.sock, zt_dir),
	             1, "%s", out);
	cr_assert(strstr(out, "moving zarr.json up into it: Input/output "
	                      "error; nothing written"),
	          "%s", out);
	free(out);
	cr_assert_eq(zt_sh(&out, "ls -A %s/shelf/mine", zt_dir), 0);
	cr_assert_str_eq(out, "", "left in the folder");
	free(out);
	/* and it takes the next export whole */
	cr_assert_eq(zt_sh(&out,
	                   "setpriv --reuid=65534 --regid=65534 "
	                   "--clear-groups '%s' --socket '%s' zarr export "
	                   "%s/shelf/mine small half",
	                   getenv("TD_TENSORCTL"), d.sock, zt_dir),
	             0, "%s", out);
	free(out);
	cr_assert_eq(zt_sh(&out, "ls -A %s/shelf/mine", zt_dir), 0);
	cr_assert_str_eq(out, "half\nsmall\nzarr.json\n");
	free(out);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

Test(export, is_byte_stable_and_never_half_written, .init = start,
     .fini = stop)
{
	char *out;

	put_all();
	zt_ok("zarr export %s/a", zt_dir);
	zt_ok("zarr export %s/b cam/left half scalar empty", zt_dir);
	zt_ok("zarr export %s/c cam/left half scalar empty", zt_dir);
	/* equal inputs, equal bytes */
	cr_assert_eq(zt_sh(&out, "diff -r %s/b %s/c", zt_dir, zt_dir), 0,
	             "%s", out);
	free(out);
	cr_assert_eq(zt_sh(&out, "test -d %s/b/small", zt_dir), 1);
	free(out);
	/* an existing, non-empty target is refused and left alone */
	cr_assert_eq(zt_ctl(&out, "zarr export %s/a small", zt_dir), 1);
	cr_assert(strstr(out, "is not empty"), "%s", out);
	free(out);
	cr_assert_eq(zt_sh(&out, "test -d %s/a/half && ls -a %s | grep -c "
	                         "tensorctl",
	                   zt_dir, zt_dir),
	             1, "no temporary folder is left: %s", out);
	free(out);
	/* a missing tensor: nothing is written */
	cr_assert_eq(zt_ctl(&out, "zarr export %s/d nosuch", zt_dir), 1);
	free(out);
	cr_assert_eq(zt_sh(&out, "test -e %s/d", zt_dir), 1);
	free(out);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * A NAME ending in '/' stands for every tensor under it, as `ls cam/`
 * lists them, beside names given: `zarr export out cam/` was the
 * daemon's refusal "cam/: GET: name: name ends with '/'". A prefix
 * nothing has fails the export, as a missing name does: nothing written.
 */
Test(export, a_name_ending_in_slash_exports_what_is_under_it,
     .init = start, .fini = stop)
{
	char *out;

	put_all();
	zt_ok("zarr export %s/x cam/ half", zt_dir);
	out = zt_file("x/zarr.json");
	cr_assert(strstr(out, "\"_tensord_variables\":[\"cam_left\","
	                      "\"half\"]"),
	          "%s", out);
	free(out);
	zt_check_dir("x");
	/* a name both under a NAME/ and given, or given twice, is one
	 * array: it was exported twice, as cam_left and cam_left_1 */
	zt_ok("zarr export %s/z cam/left cam/ half cam/left half", zt_dir);
	out = zt_file("z/zarr.json");
	cr_assert(strstr(out, "\"_tensord_variables\":[\"cam_left\","
	                      "\"half\"]"),
	          "%s", out);
	free(out);
	zt_check_dir("z");
	cr_assert_eq(zt_ctl(&out, "zarr export %s/y half nope/", zt_dir), 1);
	cr_assert(strstr(out, "zarr export: nope/: no tensor starts with it"),
	          "%s", out);
	free(out);
	cr_assert_eq(zt_sh(&out, "test -e %s/y", zt_dir), 1);
	free(out);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

Test(export, semi_planar_is_refused, .init = start, .fini = stop)
{
	struct td_client *c = NULL;
	struct td_error e = {0};
	struct td_alloc *a;
	struct td_publish p = {0};
	uint64_t size = 64 * 48 * 3 / 2, shape[] = {48, 64}, v;
	struct td_plane planes[2] = {{0, 0, 64, 64 * 48},
	                             {0, 64 * 48, 64, 64 * 24}};
	char *out;
	int rc;

	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_alloc(c, 1, &size, &a, &e), 0, "%s", e.reason);
	memset(td_alloc_data(a, 0), 7, size);
	p.name = "cam/nv12";
	p.dtype = TD_TENSOR_U8;
	p.ndim = 2;
	p.shape = shape;
	p.format = "NV12";
	p.plane_count = 2;
	p.planes = planes;
	rc = td_client_publish_alloc(c, a, &p, &v, &e);
	td_client_close(c);
	cr_assert_eq(rc, 0, "%s", e.reason);
	cr_assert_eq(zt_ctl(&out, "zarr export %s/x cam/nv12", zt_dir), 1);
	cr_assert(strstr(out, "cam/nv12: cannot be exported: a semi-planar "
	                      "format has no single-array form"),
	          "%s", out);
	free(out);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

Test(import, export_then_import_gives_the_same_tensors, .init = start,
     .fini = stop)
{
	char *out;

	put_all();
	zt_ok("zarr export %s/x", zt_dir);
	zt_ok("zarr import %s/x --prefix back/", zt_dir);
	/* under their own names (_tensord_name): cam/left is back/cam/left,
	 * cam_left back/cam_left (they came back as back/cam_left and
	 * back/cam_left_1, the folder names) */
	for (size_t i = 0; i < NPUTS; i++) {
		char *raw = zt_path(nodes[i]);

		cr_assert_eq(zt_ctl(&out, "get 'back/%s' -o %s.got",
		                    puts_[i].name, raw),
		             0, "%s", out);
		free(out);
		cr_assert_eq(zt_sh(&out, "cmp %s %s.got", raw, raw), 0,
		             "%s: %s", nodes[i], out);
		free(out);
		free(raw);
	}
	cr_assert_eq(zt_ctl(&out, "stat back/small --json"), 0);
	cr_assert(strstr(out, "\"shape\":[1,3]"), "%s", out);
	free(out);
	/* and the re-export reads the same */
	zt_ok("zarr export %s/y back/cam_left back/scalar", zt_dir);
	zt_check_dir("y");
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * An image's blob strings come back from export -> import: export writes
 * them as _tensord_format and _tensord_color_* (§1, "Attributes"), and
 * import dropped them with tensord's other keys, so an rgb8 frame came
 * back as a bare u8 array (no format, its plane not rows). Its rows come
 * back packed, also from a row-pitched source (export gathers them).
 */
Test(import, an_images_format_and_colour_strings_come_back, .init = start,
     .fini = stop)
{
	uint64_t shape[3] = {2, 3, 3};
	uint8_t px[25]; /* two rows of 9 bytes, 16 apart */
	struct td_plane pl = {0, 0, 16, 25};
	struct td_publish p = {.name = "img/rgb", .dtype = TD_TENSOR_U8,
	                       .ndim = 3, .shape = shape, .format = "rgb8",
	                       .color_space = "bt709",
	                       .color_range = "limited"};
	struct td_client *c = NULL;
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	struct td_alloc *a;
	char *out;

	for (size_t i = 0; i < sizeof(px); i++)
		px[i] = (uint8_t)(i * 7);
	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_put(c, &p, px, 18, NULL, &e), 0, "%s",
	             e.reason);
	p.name = "img/pitch";
	p.color_space = NULL;
	p.plane_count = 1;
	p.planes = &pl;
	cr_assert_eq(td_client_alloc(c, 1, &(uint64_t){25}, &a, &e), 0, "%s",
	             e.reason);
	memcpy(td_alloc_data(a, 0), px, 25);
	cr_assert_eq(td_client_publish_alloc(c, a, &p, NULL, &e), 0, "%s",
	             e.reason);
	zt_ok("zarr export %s/x img/rgb img/pitch", zt_dir);
	zt_ok("zarr import %s/x --prefix back/", zt_dir);
	cr_assert_eq(zt_ctl(&out, "get back/img/rgb --json -o /dev/null"), 0);
	cr_assert(strstr(out, "\"format\":\"rgb8\",\"color_space\":\"bt709\""),
	          "%s", out);
	cr_assert(strstr(out, "\"color_range\":\"limited\""), "%s", out);
	free(out);
	cr_assert_eq(td_client_get(c, "back/img/pitch", &t, &e), 0, "%s",
	             e.reason);
	cr_assert_str_eq(td_tensor_string(t, TD_TENSOR_FORMAT), "rgb8");
	cr_assert_eq(td_tensor_plane_stride(t, 0), 9);
	cr_assert_eq(memcmp(td_tensor_plane_data(t, 0), px, 9), 0);
	cr_assert_eq(memcmp((const uint8_t *)td_tensor_plane_data(t, 0) + 9,
	                    px + 16, 9), 0);
	td_tensor_release(t);
	td_client_close(c);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* A hand-made array folder: zarr.json text and an optional chunk. */
static void handmade(const char *store, const char *name, const char *meta,
                     const char *key, const void *chunk, size_t len)
{
	char *p;

	zt_ok_sh("mkdir -p %s/%s/%s && printf '%%s' '{\"zarr_format\":3,"
	         "\"node_type\":\"group\"}' > %s/%s/zarr.json",
	         zt_dir, store, name, zt_dir, store);
	p = zt_path2(store, name, "zarr.json");
	zt_put_file(p, meta, strlen(meta));
	free(p);
	if (key) {
		char dir[512];

		snprintf(dir, sizeof(dir), "%s/%s/%s/%s", zt_dir, store, name,
		         key);
		*strrchr(dir, '/') = 0;
		zt_ok_sh("mkdir -p %s", dir);
		p = zt_path2(store, name, key);
		zt_put_file(p, chunk, len);
		free(p);
	}
}

#define META(type, shape, chunk, fill, endian)                                \
	"{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":" shape         \
	",\"data_type\":\"" type "\",\"chunk_grid\":{\"name\":\"regular\","   \
	"\"configuration\":{\"chunk_shape\":" chunk "}},"                     \
	"\"chunk_key_encoding\":{\"name\":\"default\",\"configuration\":{"    \
	"\"separator\":\"/\"}},\"fill_value\":" fill ",\"codecs\":[{"         \
	"\"name\":\"bytes\",\"configuration\":{\"endian\":\"" endian          \
	"\"}}],\"attributes\":{\"units\":\"K\"}}"

/* one uint8 element, little-endian, with attributes A */
#define U8_ATTRS(A)                                                           \
	"{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[1],"           \
	"\"data_type\":\"uint8\",\"chunk_grid\":{\"name\":\"regular\","     \
	"\"configuration\":{\"chunk_shape\":[1]}},\"chunk_key_encoding\":"  \
	"{\"name\":\"default\"},\"fill_value\":0,\"codecs\":[{\"name\":"    \
	"\"bytes\"}],\"attributes\":" A "}"

/*
 * What export keeps whole comes back whole: metadata with a NUL byte
 * (valid UTF-8, so the _tensord_meta text, "a\u0000b") was cut at the
 * NUL by strdup, and metadata that is not UTF-8 (_tensord_meta_hex) was
 * dropped with tensord's other keys: export -> import lost both.
 */
Test(import, metadata_kept_whole_comes_back_whole, .init = start,
     .fini = stop)
{
	static const uint8_t one = 1;
	char *out;

	handmade("k", "nul", U8_ATTRS("{\"_tensord_meta\":\"a\\u0000b\"}"),
	         "c/0", &one, 1);
	handmade("k", "hex",
	         U8_ATTRS("{\"_tensord_meta_hex\":\"ff00Fe\",\"x\":1}"),
	         "c/0", &one, 1);
	cr_assert_eq(zt_ctl(&out, "zarr import %s/k --prefix k/", zt_dir), 0,
	             "%s", out);
	free(out);
	cr_assert_eq(zt_ctl(&out, "stat k/nul --json"), 0);
	cr_assert(strstr(out, "\"meta\":\"a\\u0000b\""), "%s", out);
	free(out);
	cr_assert_eq(zt_ctl(&out, "stat k/hex --json"), 0);
	cr_assert(strstr(out, "\"meta_hex\":\"ff00fe\""), "%s", out);
	free(out);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* One .tgm object: a u8 scalar named name with CBOR attrs (or opaque
 * meta, kept whole by the writer), at path. */
struct tgm_one {
	const char *name;
	const uint8_t *attrs;
	size_t attrs_len;
	const char *meta;
	size_t meta_len;
};

static void write_tgm(const char *path, const struct tgm_one *o, size_t n)
{
	struct td_tgm_enc_object ob[8];
	static const uint8_t one = 7;
	uint8_t *msg;
	size_t len;
	FILE *f;

	cr_assert_leq(n, 8);
	for (size_t i = 0; i < n; i++)
		ob[i] = (struct td_tgm_enc_object){
		        .dtype = TD_TGM_UINT8, .ndim = 0, .data = &one,
		        .data_len = 1, .name = o[i].name, .attrs = o[i].attrs,
		        .attrs_len = o[i].attrs_len, .meta = o[i].meta,
		        .meta_len = o[i].meta_len};
	struct td_err te = {0};
	int erc = td_tgm_message_encode(ob, n, "t", &msg, &len, &te);

	cr_assert_eq(erc, 0, "%d object %llu: %s", erc,
	             (unsigned long long)te.value, te.reason);
	f = fopen(path, "wb");
	cr_assert(f);
	cr_assert_eq(fwrite(msg, 1, len, f), len);
	cr_assert_eq(fclose(f), 0);
	free(msg);
}

/* The metadata of tensor name, malloc'ed (NULL when none), in *len. */
static uint8_t *meta_of(struct td_client *c, const char *name, size_t *len)
{
	struct td_tensor *t;
	struct td_error e = {0};
	const void *m;
	uint8_t *copy;

	cr_assert_eq(td_client_get(c, name, &t, &e), 0, "%s: %s", name,
	             e.reason);
	m = td_tensor_meta(t, len);
	copy = *len ? malloc(*len) : NULL;
	if (*len)
		memcpy(copy, m, *len);
	td_tensor_release(t);
	return copy;
}

/*
 * zarr export --from FILE.tgm wrote CBOR metadata as attributes JSON
 * cannot carry: a negative integer below -2^63 came out as
 * -18446744073709551616, which import then refused ("an integer out of
 * range"), so the export could not be imported at all; bytes that are not
 * UTF-8, a key of ours and what tensord's writer kept whole came back as
 * other metadata. Now an array keeps whole (_tensord_meta, _hex) what the
 * reader would not take back as it is, and export -> import gives each
 * tensor the very bytes `tensorctl load` gives it.
 */
Test(import, tgm_metadata_comes_back_as_load_gives_it, .init = start,
     .fini = stop)
{
	/* {"big": -2^64}, {"low": -2^63 - 1} */
	static const uint8_t big[] = {0xa1, 0x63, 'b', 'i', 'g', 0x3b, 0xff,
	                              0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	static const uint8_t low[] = {0xa1, 0x63, 'l', 'o', 'w', 0x3b, 0x80,
	                              0,    0,    0,    0,    0,    0,    0};
	/* {"h": half NaN, "i": half -Inf, "t": 1(1), "u": undefined,
	 *  "b": h'00ff', 1: "one", "f": 1.5 (half)} (a simple value
	 *  other than false, true, null, undefined: the reader refuses) */
	static const uint8_t odd[] = {
	        0xa7, 0x61, 'h', 0xf9, 0x7e, 0x00, 0x61, 'i',  0xf9, 0xfc,
	        0x00, 0x61, 't', 0xc1, 0x01, 0x61, 'u', 0xf7, 0x61, 'b',
	        0x42, 0x00, 0xff, 0x01, 0x63, 'o',  'n', 'e',  0x61, 'f',
	        0xf9, 0x3e, 0x00};
	/* {"_tensord_q": 1}: a key of ours, which import drops */
	static const uint8_t ours[] = {0xa1, 0x6a, '_', 't', 'e', 'n', 's',
	                               'o',  'r',  'd', '_', 'q', 0x01};
	static const struct tgm_one objs[] = {
	        {"big", big, sizeof(big), NULL, 0},
	        {"low", low, sizeof(low), NULL, 0},
	        {"odd", odd, sizeof(odd), NULL, 0},
	        {"ours", ours, sizeof(ours), NULL, 0},
	        /* kept whole by the writer: not UTF-8 (the reader refuses
	         * text that is not: this comes as a byte string) */
	        {"saved", NULL, 0, "\xff\x00text", 6},
	        {"plain", NULL, 0, NULL, 0},
	};
	size_t n = sizeof(objs) / sizeof(*objs);
	struct td_client *c;
	struct td_error e = {0};
	char path[128], lname[64], zname[64];

	snprintf(path, sizeof(path), "%s/odd.tgm", zt_dir);
	write_tgm(path, objs, n);
	zt_ok("load %s --prefix l/", path);
	zt_ok("zarr export %s/z --from %s", zt_dir, path);
	zt_ok("zarr import %s/z --prefix z/", zt_dir);
	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	for (size_t i = 0; i < n; i++) {
		size_t ll, zl;
		uint8_t *lm, *zm;

		snprintf(lname, sizeof(lname), "l/%s", objs[i].name);
		snprintf(zname, sizeof(zname), "z/%s", objs[i].name);
		lm = meta_of(c, lname, &ll);
		zm = meta_of(c, zname, &zl);
		cr_expect(ll == zl && (!ll || !memcmp(lm, zm, ll)),
		          "%s: load gave %zu bytes '%.*s', export -> import "
		          "%zu bytes '%.*s'",
		          objs[i].name, ll, (int)ll, lm ? (char *)lm : "", zl,
		          (int)zl, zm ? (char *)zm : "");
		free(lm);
		free(zm);
	}
	td_client_close(c);
}

/* A growing byte buffer for hand-made CBOR and .tgm messages. */
struct bb {
	uint8_t b[1024];
	size_t n;
};

static void bb_put(struct bb *b, const void *p, size_t n)
{
	cr_assert_leq(b->n + n, sizeof(b->b));
	memcpy(b->b + b->n, p, n);
	b->n += n;
}

static void bb_be(struct bb *b, uint64_t v, unsigned bytes)
{
	for (unsigned i = bytes; i-- > 0;)
		bb_put(b, &(uint8_t){(uint8_t)(v >> (8 * i))}, 1);
}

/* A CBOR head (major type, argument in its shortest form). */
static void cb_head(struct bb *b, unsigned major, uint64_t v)
{
	unsigned k = v < 24 ? 0 : v <= 0xff ? 1 : v <= 0xffff ? 2
	                                     : v <= 0xffffffff ? 4 : 8;
	uint8_t ib = (uint8_t)(major << 5 | (k == 0 ? v
	                                     : k == 1 ? 24
	                                     : k == 2 ? 25
	                                     : k == 4 ? 26 : 27));

	bb_put(b, &ib, 1);
	if (k)
		bb_be(b, v, k);
}

static void cb_str(struct bb *b, const char *s)
{
	cb_head(b, 3, strlen(s));
	bb_put(b, s, strlen(s));
}

/* A frame of type (16-byte header, body, [cbor offset,] no hash, ENDF),
 * padded to 8 from the message start. */
static void tgm_frame(struct bb *m, uint16_t type, uint16_t flags,
                      const struct bb *body, size_t cbor_at)
{
	size_t footer = type == 9 ? 20 : 12;

	bb_put(m, "FR", 2);
	bb_be(m, type, 2);
	bb_be(m, 1, 2);
	bb_be(m, flags, 2);
	bb_be(m, 16 + body->n + footer, 8);
	bb_put(m, body->b, body->n);
	if (type == 9)
		bb_be(m, 16 + cbor_at, 8);
	bb_be(m, 0, 8);
	bb_put(m, "ENDF", 4);
	while (m->n % 8)
		bb_put(m, "", 1);
}

/*
 * Group attributes (the message's _extra_) and _tensogram_params holding
 * a CBOR integer below -2^63 were written as converted JSON
 * (-18446744073709551616), which import (json-c) refuses, so the export
 * of such a .tgm could not be imported at all. Now each attribute whose
 * value import's reader would refuse is kept as its exact JSON text in
 * _tensord_json under its own key: the store passes the structure check,
 * import takes it and gives the tensor load's bytes and metadata, and
 * the texts read back (Python's json) as the very integers.
 */
Test(import, tgm_big_negative_integers_in_extra_and_params_round_trip,
     .init = start, .fini = stop)
{
	static const uint8_t data[2] = {3, 250};
	struct bb meta = {.n = 0}, obj = {.n = 0}, m = {.n = 0};
	char path[128], *out, *zl, *ll;
	size_t cbor_at, post, zn, ln;
	struct json_object *root, *attrs, *kept, *v;
	const char *why;

	/* {"base": [{"name": "v", "k": 1}], "_extra_": {"big": -2^64,
	 *  "nest": [1, {"x": -2^63 - 1}], "ok": 5, "_tensord_json": "m"}} */
	cb_head(&meta, 5, 2);
	cb_str(&meta, "base");
	cb_head(&meta, 4, 1);
	cb_head(&meta, 5, 2);
	cb_str(&meta, "name"), cb_str(&meta, "v");
	cb_str(&meta, "k"), cb_head(&meta, 0, 1);
	cb_str(&meta, "_extra_");
	cb_head(&meta, 5, 4);
	cb_str(&meta, "big"), cb_head(&meta, 1, UINT64_MAX);
	cb_str(&meta, "nest"), cb_head(&meta, 4, 2), cb_head(&meta, 0, 1);
	cb_head(&meta, 5, 1), cb_str(&meta, "x");
	cb_head(&meta, 1, (uint64_t)INT64_MAX + 1);
	cb_str(&meta, "ok"), cb_head(&meta, 0, 5);
	cb_str(&meta, "_tensord_json"), cb_str(&meta, "m");
	/* a u8 [2] object whose descriptor has two codec parameters,
	 * "lo": -2^64 and "scale": 2 */
	bb_put(&obj, data, sizeof(data));
	cbor_at = obj.n;
	cb_head(&obj, 5, 11);
	cb_str(&obj, "type"), cb_str(&obj, "ntensor");
	cb_str(&obj, "ndim"), cb_head(&obj, 0, 1);
	cb_str(&obj, "shape"), cb_head(&obj, 4, 1), cb_head(&obj, 0, 2);
	cb_str(&obj, "strides"), cb_head(&obj, 4, 1), cb_head(&obj, 0, 1);
	cb_str(&obj, "dtype"), cb_str(&obj, "uint8");
	cb_str(&obj, "byte_order"), cb_str(&obj, "little");
	cb_str(&obj, "encoding"), cb_str(&obj, "none");
	cb_str(&obj, "filter"), cb_str(&obj, "none");
	cb_str(&obj, "compression"), cb_str(&obj, "none");
	cb_str(&obj, "lo"), cb_head(&obj, 1, UINT64_MAX);
	cb_str(&obj, "scale"), cb_head(&obj, 0, 2);
	/* preamble (header metadata), the two frames, postamble */
	bb_put(&m, "TENSOGRM", 8);
	bb_be(&m, 3, 2);
	bb_be(&m, 1, 2); /* HEADER_METADATA */
	bb_be(&m, 0, 4);
	bb_be(&m, 0, 8); /* the total, set below */
	tgm_frame(&m, 1, 0, &meta, 0);
	tgm_frame(&m, 9, 1 /* CBOR after the payload */, &obj, cbor_at);
	post = m.n;
	bb_be(&m, post, 8);
	bb_be(&m, post + 24, 8);
	bb_put(&m, "39277777", 8);
	for (unsigned i = 0; i < 8; i++)
		m.b[16 + i] = (uint8_t)((uint64_t)m.n >> (8 * (7 - i)));
	snprintf(path, sizeof(path), "%s/big.tgm", zt_dir);
	zt_put_file(path, m.b, m.n);

	zt_ok("load %s --prefix l/", path);
	zt_ok("zarr export %s/z --from %s", zt_dir, path);
	zt_check_dir("z");
	zt_ok("zarr import %s/z --prefix z/", zt_dir);
	/* the tensor as load gives it: bytes and metadata */
	zl = zt_get("z/v", &zn);
	ll = zt_get("l/v", &ln);
	cr_assert(zn == ln && !memcmp(zl, ll, ln), "bytes differ");
	free(zl);
	free(ll);
	{
		struct td_client *c;
		struct td_error e = {0};
		uint8_t *a, *b;

		cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s",
		             e.reason);
		a = meta_of(c, "l/v", &ln);
		b = meta_of(c, "z/v", &zn);
		cr_assert(ln && ln == zn && !memcmp(a, b, ln),
		          "load '%.*s', export -> import '%.*s'", (int)ln,
		          (char *)a, (int)zn, (char *)b);
		free(a);
		free(b);
		td_client_close(c);
	}
	/* nothing lost: the group's readable attribute as it was, the
	 * others as their exact text (each read back strictly or not at
	 * all), and the array's _tensogram_params alike */
	out = zt_file("z/zarr.json");
	cr_assert_eq(td_zarr_json_parse(out, strlen(out), &root, &why), 0,
	             "%s: %s", why, out);
	attrs = json_object_object_get(root, "attributes");
	cr_assert_eq(json_object_get_int(json_object_object_get(attrs, "ok")),
	             5, "%s", out);
	cr_assert(!json_object_object_get_ex(attrs, "big", NULL), "%s", out);
	kept = json_object_object_get(attrs, "_tensord_json");
	cr_assert_eq(json_object_object_length(kept), 3, "%s", out);
	cr_assert_str_eq(json_object_get_string(
	                         json_object_object_get(kept, "big")),
	                 "-18446744073709551616");
	cr_assert_str_eq(json_object_get_string(
	                         json_object_object_get(kept, "nest")),
	                 "[1,{\"x\":-9223372036854775809}]");
	cr_assert_str_eq(json_object_get_string(json_object_object_get(
	                         kept, "_tensord_json")),
	                 "\"m\"");
	json_object_put(root);
	free(out);
	out = zt_file("z/v/zarr.json");
	cr_assert_eq(td_zarr_json_parse(out, strlen(out), &root, &why), 0,
	             "%s: %s", why, out);
	attrs = json_object_object_get(root, "attributes");
	cr_assert(!json_object_object_get_ex(attrs, "_tensogram_params",
	                                     NULL),
	          "%s", out);
	v = json_object_object_get(
	        json_object_object_get(attrs, "_tensord_json"),
	        "_tensogram_params");
	cr_assert_str_eq(json_object_get_string(v),
	                 "{\"lo\":-18446744073709551616,\"scale\":2}", "%s",
	                 out);
	cr_assert_eq(json_object_get_int(json_object_object_get(attrs, "k")),
	             1, "%s", out);
	json_object_put(root);
	free(out);
	/* a reader that knows the rule gets the integers exactly */
	zt_ok_sh("/usr/bin/python3 -c 'import json,sys; "
	         "g=json.load(open(\"%s/z/zarr.json\"))[\"attributes\"]; "
	         "a=json.load(open(\"%s/z/v/zarr.json\"))[\"attributes\"]; "
	         "k=g[\"_tensord_json\"]; "
	         "assert json.loads(k[\"big\"]) == -2**64, k; "
	         "assert json.loads(k[\"nest\"]) == [1, {\"x\": -2**63 - 1}]; "
	         "p=json.loads(a[\"_tensord_json\"][\"_tensogram_params\"]); "
	         "assert p == {\"lo\": -2**64, \"scale\": 2}, p'",
	         zt_dir, zt_dir);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

Test(import, hand_made_stores, .init = start, .fini = stop)
{
	static const uint8_t be_f32[] = {0x3f, 0xc0, 0, 0, 0xc0, 0x10, 0, 0,
	                                 0x40, 0x40, 0, 0};
	static const float le_f32[] = {1.5f, -2.25f, 3.0f};
	static const uint8_t be_i16[] = {0x01, 0x02};
	static const int32_t zero_d = -7;
	char *out, *got;
	size_t len;

	handmade("h", "big", META("float32", "[3]", "[3]", "\"Infinity\"", "big"),
	         "c/0", be_f32, sizeof(be_f32));
	handmade("h", "big0d", META("int16", "[]", "[]", "-5", "big"), "c",
	         be_i16, sizeof(be_i16));
	handmade("h", "upstream0d", META("int32", "[]", "[]", "0", "little"),
	         "c/0", &zero_d, sizeof(zero_d));
	handmade("h", "nothing", META("float64", "[0,3]", "[1,3]", "\"NaN\"",
	                              "little"),
	         NULL, NULL, 0);
	handmade("h", "hexfill", META("float32", "[1]", "[1]",
	                              "\"0x7fc00000\"", "little"),
	         "c/0", le_f32, 4);
	cr_assert_eq(zt_ctl(&out, "zarr import %s/h --prefix h/", zt_dir), 0,
	             "%s", out);
	free(out);
	/* big-endian swapped to host order */
	got = zt_get("h/big", &len);
	cr_assert_eq(len, sizeof(le_f32));
	cr_assert_arr_eq(got, le_f32, sizeof(le_f32));
	free(got);
	got = zt_get("h/big0d", &len);
	cr_assert_eq(len, 2);
	cr_assert_eq(*(int16_t *)(void *)got, 0x0102);
	free(got);
	got = zt_get("h/upstream0d", &len);
	cr_assert_eq(len, 4);
	cr_assert_eq(*(int32_t *)(void *)got, -7);
	free(got);
	got = zt_get("h/nothing", &len);
	cr_assert_eq(len, 0);
	free(got);
	/* attributes become the tensor's metadata */
	cr_assert_eq(zt_ctl(&out, "stat h/big --json"), 0);
	cr_assert(strstr(out, "{\\\"units\\\":\\\"K\\\"}"), "%s", out);
	free(out);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * Folders that become the same tensor name ("a b", "a_b" and "a\x01b" are
 * all a_b) were each published under it, the later replacing the
 * earlier: two arrays lost, exit 0. They now get _1, _2 in sorted
 * order, as load makes a file's names distinct.
 */
Test(import, folders_that_become_one_name_stay_distinct, .init = start,
     .fini = stop)
{
	static const char *const dirs[] = {"a b", "a_b", "a\001b"};
	static const char *const tensors[] = {"d/a_b_1", "d/a_b_2", "d/a_b"};
	char *out, *got;
	size_t len;

	/* sorted: "a\001b" < "a b" < "a_b" */
	for (size_t i = 0; i < 3; i++) {
		uint8_t b = (uint8_t)(10 + i);

		handmade("d", "tmp", META("uint8", "[1]", "[1]", "0", "little"),
		         "c/0", &b, 1);
		zt_ok_sh("mv %s/d/tmp \"%s/d/$(printf '%s')\"", zt_dir, zt_dir,
		         dirs[i]);
	}
	cr_assert_eq(zt_ctl(&out, "zarr import %s/d --prefix d/", zt_dir), 0,
	             "%s", out);
	free(out);
	for (size_t i = 0; i < 3; i++) {
		got = zt_get(tensors[i], &len);
		cr_assert_eq(len, 1, "%s", tensors[i]);
		cr_assert_eq((uint8_t)got[0], 10 + i, "%s", tensors[i]);
		free(got);
	}
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * Import named tensors by their folder, though export keeps each
 * tensor's whole name in _tensord_name: a/... came back as a_... Two
 * 255-byte names that sanitise to one folder name (the second folder's
 * base cut for its "_1") come back as themselves now, with no prefix.
 */
Test(import, tensord_name_gives_long_names_back_whole, .init = start,
     .fini = stop)
{
	char a[256], b[256], *out, *got;
	size_t len;

	memset(a, 'x', 255);
	memset(b, 'x', 255);
	a[255] = b[255] = 0;
	a[1] = '/';
	b[1] = '_';
	zt_ok_sh("printf A > %s/a.bin && printf B > %s/b.bin", zt_dir, zt_dir);
	zt_ok("put %s --dtype u8 --shape 1 %s/a.bin", a, zt_dir);
	zt_ok("put %s --dtype u8 --shape 1 %s/b.bin", b, zt_dir);
	zt_ok("zarr export %s/x", zt_dir);
	/* a/x... -> x_x... (255 bytes), b's folder cut for its suffix */
	cr_assert_eq(zt_sh(&out, "cd %s/x && test -d x_%.253s && "
	                         "test -d x_%.251s_1",
	                   zt_dir, a + 2, a + 2),
	             0, "%s", out);
	free(out);
	zt_ok("rm %s", a);
	zt_ok("rm %s", b);
	zt_ok("zarr import %s/x", zt_dir);
	got = zt_get(a, &len);
	cr_assert(len == 1 && got[0] == 'A', "%s", a);
	free(got);
	got = zt_get(b, &len);
	cr_assert(len == 1 && got[0] == 'B', "%s", b);
	free(got);
	cr_assert_eq(zt_ctl(&out, "ls"), 0);
	cr_assert(!strstr(out, "_1"), "no folder name came back: %s", out);
	free(out);
	/* with a prefix the name is over 255 bytes: the folder names it,
	 * as it did before _tensord_name was read, and the import says so */
	cr_assert_eq(zt_ctl(&out, "zarr import %s/x --prefix p/", zt_dir), 0,
	             "%s", out);
	cr_assert(strstr(out, "_tensord_name after --prefix makes a tensor "
	                      "name of 257 bytes, more than 255: named by "
	                      "its folder"),
	          "%s", out);
	free(out);
	cr_assert_eq(zt_ctl(&out, "ls p/"), 0);
	{
		size_t lines = 0;

		for (const char *q = out; (q = strstr(q, "p/x_")); q++)
			lines++;
		cr_assert_eq(lines, 2, "both, by their folders: %s", out);
	}
	free(out);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * _tensord_name comes from the store, which may be anyone's (or a Hurray
 * file's, whose names may hold a space): one that is no string or no
 * valid tensor name is not used, the import saying so and naming the
 * array by its folder, as before; two arrays that would publish one name
 * are refused before anything is published, rather than the later
 * replacing the earlier.
 */
Test(import, unusable_tensord_names_fall_back_repeated_ones_are_refused, .init = start,
     .fini = stop)
{
	static const uint8_t one = 1;
	static const struct {
		const char *attrs, *why;
	} cases[] = {
	        {"{\"_tensord_name\":7}", "_tensord_name is not a string"},
	        {"{\"_tensord_name\":null}", "_tensord_name is not a string"},
	        {"{\"_tensord_name\":[\"a\"]}", "_tensord_name is not a string"},
	        {"{\"_tensord_name\":\"\"}", "_tensord_name is not a valid"},
	        {"{\"_tensord_name\":\"a/\"}", "_tensord_name is not a valid"},
	        {"{\"_tensord_name\":\"../etc\"}", "_tensord_name is not a valid"},
	        {"{\"_tensord_name\":\"a b\"}", "_tensord_name is not a valid"},
	        {"{\"_tensord_name\":\"a\\u0000b\"}",
	         "_tensord_name is not a valid"},
	};
	char *out;

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		char store[16];

		snprintf(store, sizeof(store), "n%zu", i);
		handmade(store, "ok", U8_ATTRS("{}"), "c/0", &one, 1);
		handmade(store, "bad", U8_ATTRS("{}"), "c/0", &one, 1);
		{
			char *p = zt_path2(store, "bad", "zarr.json");
			char meta[512];

			snprintf(meta, sizeof(meta), U8_ATTRS("%s"),
			         cases[i].attrs);
			zt_put_file(p, meta, strlen(meta));
			free(p);
		}
		cr_assert_eq(zt_ctl(&out, "zarr import %s/%s --prefix q%zu/",
		                    zt_dir, store, i),
		             0, "case %zu: %s", i, out);
		cr_assert(strstr(out, "/bad: attribute ") &&
		                  strstr(out, cases[i].why) &&
		                  strstr(out, ": named by its folder"),
		          "case %zu: %s", i, out);
		free(out);
		cr_assert_eq(zt_ctl(&out, "stat q%zu/bad", i), 0, "case %zu: %s",
		             i, out);
		free(out);
		cr_assert_eq(zt_ctl(&out, "stat q%zu/ok", i), 0, "case %zu", i);
		free(out);
	}
	/* one name twice, or a name another folder becomes: nothing */
	handmade("dup", "a", U8_ATTRS("{\"_tensord_name\":\"t/x\"}"), "c/0",
	         &one, 1);
	handmade("dup", "b", U8_ATTRS("{\"_tensord_name\":\"t/x\"}"), "c/0",
	         &one, 1);
	handmade("dup", "c", U8_ATTRS("{}"), "c/0", &one, 1);
	cr_assert_eq(zt_ctl(&out, "zarr import %s/dup --prefix d/", zt_dir), 1);
	cr_assert(strstr(out, "arrays a and b would both be published as "
	                      "d/t/x"),
	          "%s", out);
	free(out);
	handmade("mix", "a", U8_ATTRS("{\"_tensord_name\":\"c\"}"), "c/0",
	         &one, 1);
	handmade("mix", "c", U8_ATTRS("{}"), "c/0", &one, 1);
	cr_assert_eq(zt_ctl(&out, "zarr import %s/mix --prefix d/", zt_dir), 1);
	cr_assert(strstr(out, "arrays a and c would both be published as d/c"),
	          "%s", out);
	free(out);
	cr_assert_eq(zt_ctl(&out, "ls d/"), 0);
	cr_assert(!strstr(out, "d/"), "nothing was published: %s", out);
	free(out);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

Test(import, refusals_name_the_reason, .init = start, .fini = stop)
{
	static const uint8_t six[32] = {0}; /* chunks up to 28 bytes */
	static const struct {
		const char *meta, *key;
		size_t len;
		const char *why;
	} cases[] = {
	        {"{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[6],"
	         "\"data_type\":\"float32\",\"chunk_grid\":{\"name\":"
	         "\"regular\",\"configuration\":{\"chunk_shape\":[6]}},"
	         "\"chunk_key_encoding\":{\"name\":\"default\"},"
	         "\"fill_value\":0,\"codecs\":[{\"name\":\"bytes\","
	         "\"configuration\":{\"endian\":\"little\"}},{\"name\":"
	         "\"gzip\",\"configuration\":{\"level\":5}}]}",
	         "c/0", 24, "codecs other than bytes are not supported"},
	        {META("complex64", "[3]", "[3]", "[\"NaN\",\"NaN\"]", "little"),
	         "c/0", 24, "data_type complex64 has no tensord dtype"},
	        {META("float32", "[6]", "[6]", "\"NaN\"", "little"), "c/0", 20,
	         "expected 24 bytes (6 elements x 4 bytes/element), got 20"},
	        {META("float32", "[6]", "[6]", "\"NaN\"", "little"), "c/0", 28,
	         "expected 24 bytes (6 elements x 4 bytes/element), got 28"},
	        {"{\"zarr_format\":3,\"node_type\":\"array\",\"fill_value\":"
	         "NaN}",
	         NULL, 0, "not strict JSON"},
	        {U8_ATTRS("{\"a\":1.}"), "c/0", 1,
	         "not strict JSON: a number that is not RFC 8259 JSON"},
	        {U8_ATTRS("{\"_tensord_meta_hex\":\"f\"}"), "c/0", 1,
	         "_tensord_meta_hex has an odd number of digits"},
	        {U8_ATTRS("{\"_tensord_meta_hex\":\"0g\"}"), "c/0", 1,
	         "_tensord_meta_hex is not hex digits"},
	};
	char *out;

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		char store[16];

		snprintf(store, sizeof(store), "r%zu", i);
		handmade(store, "a", cases[i].meta, cases[i].key, six,
		         cases[i].len);
		cr_assert_eq(zt_ctl(&out, "zarr import %s/%s", zt_dir, store),
		             1, "case %zu: %s", i, out);
		cr_assert(strstr(out, cases[i].why), "case %zu: %s", i, out);
		free(out);
		/* nothing was published */
		cr_assert_eq(zt_ctl(&out, "stat a"), 1, "case %zu", i);
		free(out);
	}
	/* a chunk that is a FIFO: refused, not waited on for ever */
	{
		char *p;

		handmade("rf", "a",
		         META("float32", "[6]", "[6]", "\"NaN\"", "little"),
		         "c/0", six, 24);
		p = zt_path2("rf", "a", "c/0");
		cr_assert_eq(unlink(p), 0);
		cr_assert_eq(mkfifo(p, 0600), 0);
		free(p);
		cr_assert_eq(zt_ctl(&out, "zarr import %s/rf", zt_dir), 1,
		             "%s", out);
		free(out);
	}
	/*
	 * A folder of the chunk's key that is a symbolic link out of the
	 * store (a/c -> a folder elsewhere holding a file 0): O_NOFOLLOW
	 * looked at the chunk's own name only, so the import published
	 * that outside file as the chunk. Refused like a linked chunk.
	 */
	{
		zt_ok_sh("mkdir -p %s/elsewhere && head -c 24 /dev/zero > "
		         "%s/elsewhere/0",
		         zt_dir, zt_dir);
		handmade("rl", "a",
		         META("float32", "[6]", "[6]", "\"NaN\"", "little"),
		         "c/0", six, 24);
		zt_ok_sh("rm -r %s/rl/a/c && ln -s %s/elsewhere %s/rl/a/c",
		         zt_dir, zt_dir, zt_dir);
		cr_assert_eq(zt_ctl(&out, "zarr import %s/rl", zt_dir), 1,
		             "%s", out);
		cr_assert(strstr(out, "a/c/0: Too many levels of symbolic "
		                      "links"),
		          "%s", out);
		free(out);
		cr_assert_eq(zt_ctl(&out, "stat a"), 1, "%s", out);
		free(out);
	}
	/*
	 * An array whose zarr.json is a dangling link, or a folder that is
	 * a link to itself: the listing followed them, found nothing and
	 * dropped that array without a word; the import published the
	 * others and exited 0. Refused now, naming it.
	 */
	{
		for (size_t i = 0; i < 2; i++) {
			char store[8];

			snprintf(store, sizeof(store), "rd%zu", i);
			handmade(store, "a",
			         META("float32", "[6]", "[6]", "\"NaN\"",
			              "little"),
			         "c/0", six, 24);
			if (i == 0) /* b/zarr.json -> nowhere */
				zt_ok_sh("mkdir %s/%s/b && ln -s nowhere "
				         "%s/%s/b/zarr.json",
				         zt_dir, store, zt_dir, store);
			else /* b -> b */
				zt_ok_sh("ln -s b %s/%s/b", zt_dir, store);
			cr_assert_eq(zt_ctl(&out, "zarr import %s/%s", zt_dir,
			                    store),
			             1, "case %zu: %s", i, out);
			cr_assert(strstr(out, "b/zarr.json: Too many levels of "
			                      "symbolic links"),
			          "case %zu: %s", i, out);
			free(out);
			cr_assert_eq(zt_ctl(&out, "stat a"), 1, "case %zu: %s",
			             i, out);
			free(out);
		}
	}
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* ---- .tgm sources ---- */

static const char *tgm_vector(const char *name)
{
	static char path[4200];
	const char *dir = tu_vectors_path("tgm");

	if (!dir)
		cr_skip_test("upstream vectors folder absent: %s not checked",
		             name);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return path;
}

Test(export, tgm_files_read_back_by_zarrita, .init = start, .fini = stop)
{
	static const struct {
		const char *file, *names[2], *types[2];
		uint32_t ndim[2];
		uint64_t shape[2][2];
		const char *group;
	} cases[] = {
	        {"metadata_parity.tgm", {"2t", "msl"}, {"float32", "float64"},
	         {2, 1}, {{2, 3}, {4, 0}},
	         "{\"_tensogram_variables\":[\"2t\",\"msl\"],"
	         "\"_tensogram_wire_version\":3,\"source\":\"parity-fixture\"}"},
	        {"mars_metadata.tgm", {"object_0", NULL}, {NULL, NULL}, {0, 0},
	         {{0}}, NULL},
	};
	char *out;

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		const char *path = tgm_vector(cases[i].file);
		struct zt_expect *x = zt_expect_new();
		char *exp, dir[64];

		snprintf(dir, sizeof(dir), "t%zu", i);
		zt_ok("zarr export %s/%s --from %s", zt_dir, dir, path);
		zt_check_dir(dir);
		/* the values: load the same file, get the bytes back */
		zt_ok("load %s --prefix %s/", path, dir);
		for (size_t k = 0; k < 2 && cases[i].names[k]; k++) {
			char name[160], *raw;

			snprintf(name, sizeof(name), "%s/%s", dir,
			         cases[i].names[k]);
			raw = zt_path(name);
			zt_ok_sh("mkdir -p %s/%s", zt_dir, dir);
			zt_ok("get %s -o %s", name, raw);
			if (cases[i].types[k])
				zt_expect_array(x, cases[i].names[k],
				                cases[i].types[k],
				                cases[i].ndim[k],
				                cases[i].shape[k], name, NULL);
			free(raw);
		}
		if (cases[i].types[0]) {
			exp = zt_expect_done(x, cases[i].group);
			zt_zarrita(dir, exp);
			free(exp);
		} else {
			free(zt_expect_done(x, NULL));
			out = zt_file("t1/zarr.json");
			cr_assert(strstr(out, "\"object_0\":{"), "%s", out);
			free(out);
		}
	}
	/* a later message, and one past the end */
	cr_assert_eq(zt_ctl(&out, "zarr export %s/m9 --from %s --message 9",
	                    zt_dir, tgm_vector("two-msg.tgm")),
	             1);
	cr_assert(strstr(out, "no message 9 (the file has 2)"), "%s", out);
	free(out);
	zt_ok("zarr export %s/m1 --from %s --message 1", zt_dir,
	      tgm_vector("two-msg.tgm"));
	zt_check_dir("m1");
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

Test(export, tgm_name_key_and_duplicates, .init = start, .fini = stop)
{
	const char *path = tgm_vector("metadata_parity.tgm");
	char *out;

	/* --name-key comes first in the chain: both objects have mars.class
	 * ("od", "ea") */
	zt_ok("zarr export %s/k --from %s --name-key mars.class", zt_dir,
	      path);
	zt_check_dir("k");
	out = zt_file("k/zarr.json");
	cr_assert(strstr(out, "\"_tensogram_variables\":[\"od\",\"ea\"]"),
	          "%s", out);
	free(out);
	/* a key both objects lack: the default chain */
	zt_ok("zarr export %s/k2 --from %s --name-key no.such", zt_dir, path);
	out = zt_file("k2/zarr.json");
	cr_assert(strstr(out, "\"_tensogram_variables\":[\"2t\",\"msl\"]"),
	          "%s", out);
	free(out);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* ---- the HTTP store ---- */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

static unsigned short port;
static char base[64];

/* A free loopback port (the kernel's pick; closed again). */
static unsigned short free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert(fd >= 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

/* The daemon with --http on a loopback port and more arguments. */
static void start_http_args(const char *const *more)
{
	char addr[32];
	const char *args[16] = {"--http", addr};
	unsigned n = 2;

	port = free_port();
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
	snprintf(base, sizeof(base), "http://127.0.0.1:%u", port);
	for (; more && *more; more++)
		args[n++] = *more;
	args[n] = NULL;
	tu_daemon_start_args(&d, "warn", args);
	zt_setup(&d);
}

/* The daemon started with more (start_http_args), and a client of it */
static struct td_client *http_client(const char *const *more)
{
	struct td_client *c;
	struct td_error e = {0};

	start_http_args(more);
	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	return c;
}

static void start_http(void)
{
	static const char *const more[] = {"--http-prefix", "", NULL};

	start_http_args(more);
}

static int connect_tcp(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
	                         .sin_port = htons(port)};
	struct timeval tv = {TU_WAIT_S, 0};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert(fd >= 0);
	/* every receive on it is bounded: a response the daemon never
	 * sends or ends fails the test instead of hanging it */
	cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv,
	                        sizeof(tv)),
	             0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0,
	             "connect: %s", strerror(errno));
	return fd;
}

/* Send req on fd, read the answer to EOF into *resp (NUL-terminated). */
static size_t exchange(int fd, const char *req, char **resp)
{
	size_t cap = 1 << 16, len = 0;
	char *b = malloc(cap + 1);
	ssize_t r;

	cr_assert(b);
	cr_assert_eq(send(fd, req, strlen(req), MSG_NOSIGNAL),
	             (ssize_t)strlen(req));
	while ((r = recv(fd, b + len, cap - len, 0)) > 0) {
		len += (size_t)r;
		if (len == cap) {
			b = realloc(b, (cap *= 2) + 1);
			cr_assert(b);
		}
	}
	close(fd);
	b[len] = 0;
	*resp = b;
	return len;
}

/* One request to the store: METHOD PATH with extra header lines. */
static size_t http(const char *method, const char *path, const char *hdrs,
                   char **resp)
{
	char req[2048];

	snprintf(req, sizeof(req),
	         "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n%s\r\n",
	         method, path, hdrs ? hdrs : "");
	return exchange(connect_tcp(), req, resp);
}

static int status_of(const char *resp)
{
	int code = 0;

	cr_assert_eq(sscanf(resp, "HTTP/1.1 %d", &code), 1, "%s", resp);
	return code;
}

static const char *body_of(const char *resp)
{
	const char *b = strstr(resp, "\r\n\r\n");

	cr_assert(b, "%s", resp);
	return b + 4;
}

/* The ETag header of a response (malloc'ed). */
static char *etag_in(const char *resp)
{
	const char *t = strstr(resp, "ETag: ");
	size_t n;
	char *out;

	cr_assert(t, "%s", resp);
	t += 6;
	n = strcspn(t, "\r");
	out = strndup(t, n);
	cr_assert(out);
	return out;
}

/* GET path: 200 and its body (malloc'ed, *len bytes). */
static char *get_ok(const char *path, size_t *len)
{
	char *resp, *body;
	size_t n = http("GET", path, NULL, &resp);
	const char *b = body_of(resp);

	cr_assert_eq(status_of(resp), 200, "%s: %s", path, resp);
	*len = n - (size_t)(b - resp);
	body = malloc(*len + 1);
	memcpy(body, b, *len);
	body[*len] = 0;
	free(resp);
	return body;
}

/* The root zarr.json and every node's over HTTP are the bytes export
 * wrote into zt_dir/dir. */
static void metadata_as_exported(const char *dir, const char *const *nodes_,
                                 size_t n)
{
	for (size_t i = 0; i <= n; i++) {
		char rel[300], path[320], url[320], *want, *got;
		size_t len;

		snprintf(rel, sizeof(rel), "%s%szarr.json",
		         i < n ? nodes_[i] : "", i < n ? "/" : "");
		snprintf(path, sizeof(path), "/zarr/%s", rel);
		snprintf(url, sizeof(url), "%s/%s", dir, rel);
		want = zt_file(url);
		got = get_ok(path, &len);
		cr_assert_str_eq(got, want, "%s", path);
		free(want);
		free(got);
	}
}

Test(http, zarr_v3_as_an_export_would_write_it, .init = start_http,
     .fini = stop)
{
	char url[192], *exp;

	put_all();
	zt_ok("zarr export %s/x", zt_dir);
	/* every key the same bytes as the exported file */
	metadata_as_exported("x", nodes, NPUTS);
	snprintf(url, sizeof(url), "%s/zarr", base);
	zt_check(url);
	exp = expect_puts(true);
	zt_zarrita(url, exp);
	free(exp);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

Test(http, rules_of_zarr_md_10, .init = start_http, .fini = stop)
{
	static const char *const missing[] = {
	        "/zarr/",         "/zarr/cam_left",   "/zarr/cam_left/",
	        "/zarr/cam_left/c", "/zarr/cam_left/c/0", "/zarr/nosuch/zarr.json",
	        "/zarr/scalar/c/0", "/zarr/empty/c/0/0", "/zarr-v2/cam_left/0",
	        "/", "/zarr",     "/zarr/cam_left/zarr.json/x",
	        /* a %00 ended the path the handler read: served as
	         * /zarr/zarr.json before */
	        "/zarr/zarr.json%00", "/zarr/cam_left/zarr.json%00x",
	        "/zarr-v2/cam_left/.zarray%00",
	        /* the shortest such path: its 404 marker must fit in it */
	        "%00"};
	static const char *const methods[] = {"POST", "PUT", "DELETE", "PATCH",
	                                      "OPTIONS"};
	char *resp;
	const char *b;

	put_all();
	for (size_t i = 0; i < sizeof(missing) / sizeof(*missing); i++) {
		http("GET", missing[i], NULL, &resp);
		cr_assert_eq(status_of(resp), 404, "%s: %s", missing[i], resp);
		free(resp);
	}
	for (size_t i = 0; i < sizeof(methods) / sizeof(*methods); i++) {
		http(methods[i], "/zarr/zarr.json", "Content-Length: 0\r\n",
		     &resp);
		cr_assert_eq(status_of(resp), 405, "%s: %s", methods[i], resp);
		cr_assert(strstr(resp, "Allow: GET, HEAD\r\n"), "%s", resp);
		free(resp);
	}
	/* HEAD: the length, no body */
	http("HEAD", "/zarr/cam_left/c/0/0", NULL, &resp);
	cr_assert_eq(status_of(resp), 200);
	cr_assert(strstr(resp, "Content-Length: 24\r\n"), "%s", resp);
	cr_assert_str_eq(body_of(resp), "");
	free(resp);
	/* ranges: exactly the slice, with Content-Range */
	http("GET", "/zarr/cam_left/c/0/0", "Range: bytes=4-11\r\n", &resp);
	cr_assert_eq(status_of(resp), 206, "%s", resp);
	cr_assert(strstr(resp, "Content-Range: bytes 4-11/24\r\n"), "%s", resp);
	cr_assert(strstr(resp, "Content-Length: 8\r\n"), "%s", resp);
	b = body_of(resp);
	cr_assert_arr_eq(b, (const char *)f32v + 4, 8);
	free(resp);
	http("GET", "/zarr/cam_left/c/0/0", "Range: bytes=20-\r\n", &resp);
	cr_assert_eq(status_of(resp), 206);
	cr_assert(strstr(resp, "Content-Range: bytes 20-23/24\r\n"), "%s", resp);
	cr_assert_arr_eq(body_of(resp), (const char *)f32v + 20, 4);
	free(resp);
	http("GET", "/zarr/cam_left/c/0/0", "Range: bytes=-3\r\n", &resp);
	cr_assert_eq(status_of(resp), 206);
	cr_assert(strstr(resp, "Content-Range: bytes 21-23/24\r\n"), "%s", resp);
	free(resp);
	http("GET", "/zarr/cam_left/c/0/0", "Range: bytes=10-999\r\n", &resp);
	cr_assert_eq(status_of(resp), 206);
	cr_assert(strstr(resp, "Content-Range: bytes 10-23/24\r\n"), "%s", resp);
	free(resp);
	/* numbers past 2^64 are clamped like any other (RFC 9110 14.1.1
	 * sets no limit); they used to be 416 */
	http("GET", "/zarr/cam_left/c/0/0",
	     "Range: bytes=10-99999999999999999999999\r\n", &resp);
	cr_assert_eq(status_of(resp), 206, "%s", resp);
	cr_assert(strstr(resp, "Content-Range: bytes 10-23/24\r\n"), "%s", resp);
	free(resp);
	http("GET", "/zarr/cam_left/c/0/0",
	     "Range: bytes=-99999999999999999999999\r\n", &resp);
	cr_assert_eq(status_of(resp), 206, "%s", resp);
	cr_assert(strstr(resp, "Content-Range: bytes 0-23/24\r\n"), "%s", resp);
	free(resp);
	/* metadata keys take ranges too */
	http("GET", "/zarr/zarr.json", "Range: bytes=0-0\r\n", &resp);
	cr_assert_eq(status_of(resp), 206);
	cr_assert_str_eq(body_of(resp), "{");
	free(resp);
	/* unsatisfiable: 416 with the length, never the whole body */
	for (int i = 0; i < 4; i++) {
		static const char *const bad[] = {
		        "Range: bytes=-0\r\n", "Range: bytes=24-\r\n",
		        "Range: bytes=5-2\r\n",
		        "Range: bytes=99999999999999999999999-\r\n"};

		http("GET", "/zarr/cam_left/c/0/0", bad[i], &resp);
		cr_assert_eq(status_of(resp), 416, "%s: %s", bad[i], resp);
		cr_assert(strstr(resp, "Content-Range: bytes */24\r\n"), "%s",
		          resp);
		free(resp);
	}
	/* ETag = name, version and the daemon's run; a matching
	 * If-None-Match is 304 */
	http("GET", "/zarr/cam_left/c/0/0", NULL, &resp);
	{
		char *tag = etag_in(resp), hdr[320];

		cr_assert(!strncmp(tag, "\"cam/left@1.", 12), "%s", tag);
		free(resp);
		snprintf(hdr, sizeof(hdr), "If-None-Match: %s\r\n", tag);
		http("GET", "/zarr/cam_left/c/0/0", hdr, &resp);
		cr_assert_eq(status_of(resp), 304, "%s", resp);
		/* RFC 9110 15.4.5: the 200's length or none; never 0 */
		cr_assert(strstr(resp, "Content-Length: 24\r\n"), "%s", resp);
		cr_assert_str_eq(body_of(resp), "");
		free(resp);
		/* and no body on the wire: the next response follows it */
		snprintf(hdr, sizeof(hdr),
		         "GET /zarr/cam_left/c/0/0 HTTP/1.1\r\nHost: t\r\n"
		         "If-None-Match: %s\r\n\r\n"
		         "GET /zarr-v2/.zgroup HTTP/1.1\r\nHost: t\r\n"
		         "Connection: close\r\n\r\n", tag);
		exchange(connect_tcp(), hdr, &resp);
		cr_assert_eq(status_of(resp), 304, "%s", resp);
		b = strstr(resp, "\r\n\r\n");
		cr_assert(b && !strncmp(b + 4, "HTTP/1.1 200", 12), "%s", resp);
		free(tag);
	}
	free(resp);
	/* the 0-d chunk is exactly "c"; the v2 view's keys */
	http("GET", "/zarr/scalar/c", NULL, &resp);
	cr_assert_eq(status_of(resp), 200);
	cr_assert_eq((unsigned char)body_of(resp)[0], 200);
	free(resp);
	http("GET", "/zarr-v2/cam_left/0.0", NULL, &resp);
	cr_assert_eq(status_of(resp), 200);
	cr_assert_arr_eq(body_of(resp), (const char *)f32v, 24);
	free(resp);
	http("GET", "/zarr-v2/scalar/0", NULL, &resp);
	cr_assert_eq(status_of(resp), 200);
	free(resp);
	http("GET", "/zarr-v2/.zgroup", NULL, &resp);
	cr_assert_str_eq(body_of(resp), "{\"zarr_format\":2}");
	free(resp);
	/* keep-alive: two requests on one connection, both answered */
	exchange(connect_tcp(),
	         "GET /zarr/zarr.json HTTP/1.1\r\nHost: t\r\n\r\n"
	         "GET /zarr/cam_left/c/0/0 HTTP/1.1\r\nHost: t\r\n"
	         "Connection: close\r\n\r\n",
	         &resp);
	b = strstr(resp, "HTTP/1.1 200");
	cr_assert(b && strstr(b + 1, "HTTP/1.1 200"), "%s", resp);
	cr_assert(!strstr(resp, "Connection: close\r\n\r\n{"), "%s", resp);
	free(resp);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* RFC 9112 §3.2: an HTTP/1.1 request without Host is answered 400 (it
 * was served); an HTTP/1.0 one needs none. */
Test(http, an_http_1_1_request_without_host_is_a_400, .init = start_http,
     .fini = stop)
{
	char *resp;

	exchange(connect_tcp(),
	         "GET /zarr/zarr.json HTTP/1.1\r\nConnection: close\r\n\r\n",
	         &resp);
	cr_assert_eq(status_of(resp), 400, "%.200s", resp);
	free(resp);
	exchange(connect_tcp(), "GET /zarr/zarr.json HTTP/1.0\r\n\r\n", &resp);
	cr_assert(!strncmp(resp, "HTTP/1.0 200", 12) ||
	                  !strncmp(resp, "HTTP/1.1 200", 12),
	          "%.200s", resp);
	free(resp);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

Test(http, prefix_and_policy_decide_what_is_served, .fini = stop)
{
	static const char text[] = "allow any rw *\n"
	                           "allow http r pub/a\n";
	char pol[64];
	const char *const more[] = {"--http-prefix", "pub/", "--policy", pol,
	                            NULL};
	char *body, *out;
	size_t len;

	/* this run's own: another suite's run on the machine removes its */
	snprintf(pol, sizeof(pol), "/tmp/td-zarr-policy-%d", (int)getpid());
	zt_put_file(pol, text, sizeof(text) - 1);
	start_http_args(more);
	zt_ok_sh("printf abcd > %s/four", zt_dir);
	zt_ok("put pub/a --dtype u8 --shape 4 %s/four", zt_dir);
	zt_ok("put pub/b --dtype u8 --shape 4 %s/four", zt_dir);
	zt_ok("put priv/c --dtype u8 --shape 4 %s/four", zt_dir);
	body = get_ok("/zarr/zarr.json", &len);
	cr_assert(strstr(body, "\"_tensord_variables\":[\"pub_a\"]"), "%s",
	          body);
	free(body);
	http("GET", "/zarr/pub_b/zarr.json", NULL, &out);
	cr_assert_eq(status_of(out), 404);
	free(out);
	http("GET", "/zarr/priv_c/c/0", NULL, &out);
	cr_assert_eq(status_of(out), 404);
	free(out);
	unlink(pol);
	/* an http line that would write is refused at start */
	zt_put_file(pol, "allow http rw pub/\n", 19);
	cr_assert_eq(zt_sh(&out, "'%s' --socket %s/x.sock --policy %s",
	                   getenv("TD_TENSORD"), zt_dir, pol),
	             1, "%s", out);
	cr_assert(strstr(out, "http may only read"), "%s", out);
	free(out);
	unlink(pol);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

Test(http, nothing_is_served_without_a_prefix, .fini = stop)
{
	char *body;
	size_t len;

	start_http_args(NULL);
	put_all();
	body = get_ok("/zarr/zarr.json", &len);
	cr_assert(strstr(body, "\"_tensord_variables\":[]"), "%s", body);
	cr_assert(strstr(body, "\"metadata\":{}"), "%s", body);
	free(body);
	body = get_ok("/zarr-v2/.zmetadata", &len);
	cr_assert(strstr(body, "\"metadata\":{\".zattrs\":{\"_tensord_"
	                       "variables\":[]},\".zgroup\":{\"zarr_format\":"
	                       "2}}"),
	          "%s", body);
	free(body);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

Test(http, a_unix_socket_address, .fini = stop)
{
	char addr[64], *resp, req[] = "GET /zarr/zarr.json HTTP/1.1\r\n"
	                               "Host: t\r\nConnection: close\r\n\r\n";
	const char *more[] = {"--http", addr, "--http-prefix", "", NULL};
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd;

	snprintf(addr, sizeof(addr), "unix:/tmp/td-zarr-%d.sock", getpid());
	tu_daemon_start_args(&d, "warn", more);
	zt_setup(&d);
	put_all();
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", addr + 5);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	exchange(fd, req, &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	cr_assert(strstr(resp, "\"cam_left\""), "%s", resp);
	free(resp);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * A daemon killed without its clean stop leaves its --http unix: socket
 * file; the next start failed to bind it ("Address already in use") and
 * did not start until someone deleted it, where the main socket's stale
 * file is replaced. Now a socket nobody listens on is replaced too; a live
 * one (another daemon's) and a file that is not a socket are refused and
 * left as they are.
 */
Test(http, a_stale_unix_socket_is_replaced_a_live_one_is_not, .fini = stop)
{
	char addr[64], file[80], *out, req[] = "GET /zarr/zarr.json HTTP/1.1\r\n"
	                                 "Host: t\r\nConnection: close\r\n\r\n";
	const char *more[] = {"--http", addr, "--http-prefix", "", NULL};
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;
	int fd, rc;

	snprintf(addr, sizeof(addr), "unix:/tmp/td-zarr-stale-%d.sock",
	         getpid());
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", addr + 5);
	unlink(sa.sun_path);
	/* bound, then closed without unlink: what a killed daemon leaves */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	tu_daemon_start_args(&d, "warn", more);
	zt_setup(&d);
	put_all();
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	exchange(fd, req, &out);
	cr_assert_eq(status_of(out), 200, "%s", out);
	free(out);
	/* a second daemon on the live path: refused, the first still served */
	rc = zt_sh(&out, "'%s' --socket %s/s2.sock --http %s --http-prefix ''",
	           getenv("TD_TENSORD"), zt_dir, addr);
	cr_expect_eq(rc, 1, "%s", out);
	cr_expect(strstr(out, "something is listening"), "%s", out);
	free(out);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	exchange(fd, req, &out);
	cr_assert_eq(status_of(out), 200, "%s", out);
	free(out);
	/* a regular file there: refused, kept */
	snprintf(file, sizeof(file), "%s/file", zt_dir);
	zt_put_file(file, "x", 1);
	rc = zt_sh(&out, "'%s' --socket %s/s3.sock --http unix:%s "
	                 "--http-prefix ''",
	           getenv("TD_TENSORD"), zt_dir, file);
	cr_expect_eq(rc, 1, "%s", out);
	cr_expect(strstr(out, "not a socket"), "%s", out);
	free(out);
	cr_expect(stat(file, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 1);
	/* a live server whose backlog is full: refused at once (a blocking
	 * probe would wait until it accepts) */
	{
		struct sockaddr_un fa = {.sun_family = AF_UNIX};
		int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), c[64];
		int nc = 0;

		snprintf(fa.sun_path, sizeof(fa.sun_path), "%s/full.sock",
		         zt_dir);
		cr_assert_eq(bind(lfd, (struct sockaddr *)&fa, sizeof(fa)), 0);
		cr_assert_eq(listen(lfd, 0), 0);
		while (nc < 64) {
			c[nc] = socket(AF_UNIX,
			               SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
			               0);
			if (connect(c[nc], (struct sockaddr *)&fa,
			            sizeof(fa)) < 0) {
				close(c[nc]);
				break;
			}
			nc++;
		}
		cr_assert_lt(nc, 64, "the backlog never filled");
		rc = zt_sh(&out, "'%s' --socket %s/s4.sock --http unix:%s "
		                 "--http-prefix ''",
		           getenv("TD_TENSORD"), zt_dir, fa.sun_path);
		cr_expect_eq(rc, 1, "%s", out);
		cr_expect(strstr(out, "something is listening"), "%s", out);
		free(out);
		while (nc > 0)
			close(c[--nc]);
		close(lfd);
	}
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* The value of the sample that starts with `line` in metrics text m. */
static unsigned long long metric_value(const char *m, const char *line)
{
	char l[256];
	const char *p;

	/* a sample line, not the # HELP line naming it */
	snprintf(l, sizeof(l), "\n%s", line);
	p = strstr(m, l);
	cr_assert(p, "no %s in:\n%s", line, m);
	return strtoull(p + strlen(l), NULL, 10);
}

/* The value of header `name` ("Name: ") in resp's header section
 * (malloc'ed), or NULL. */
static char *header_of(const char *resp, const char *name)
{
	const char *end = strstr(resp, "\r\n\r\n");
	size_t nl = strlen(name);

	cr_assert(end, "%s", resp);
	for (const char *p = strstr(resp, "\r\n"); p && p < end;
	     p = strstr(p + 2, "\r\n"))
		if (!strncasecmp(p + 2, name, nl))
			return strndup(p + 2 + nl, strcspn(p + 2 + nl, "\r"));
	return NULL;
}

/*
 * resp (rlen bytes, a GET's; a HEAD's when head) must be a 206 of the
 * count ranges [a[k], a[k] + n[k]) of whole (len bytes, of type) as
 * multipart/byteranges (RFC 9110 14.6, RFC 2046 5.1.1), parts in that
 * order: the boundary read from its Content-Type (1 to 70 characters of
 * bchars), the body built here from it -- each part a delimiter,
 * Content-Type, Content-Range and exactly its bytes, then the close
 * delimiter -- and compared byte for byte, its length with
 * Content-Length; the whole response has no Content-Range of its own,
 * and the boundary is nowhere in whole.
 */
static void assert_parts(const char *resp, size_t rlen, bool head,
                         const uint8_t *whole, uint64_t len, const char *type,
                         const uint64_t *a, const uint64_t *n, unsigned count)
{
	static const char pre[] = "multipart/byteranges; boundary=";
	char *ct = header_of(resp, "Content-Type: "),
	     *cl = header_of(resp, "Content-Length: "),
	     *cr = header_of(resp, "Content-Range: "), *exp;
	const char *b, *body = body_of(resp);
	size_t bl, cap = 64, got = 0;

	cr_assert_eq(status_of(resp), 206, "%s", resp);
	cr_assert(ct && cl, "%s", resp);
	cr_assert(!cr, "%s", resp);
	cr_assert(!strncmp(ct, pre, sizeof(pre) - 1), "%s", ct);
	b = ct + sizeof(pre) - 1;
	bl = strlen(b);
	cr_assert(bl >= 1 && bl <= 70 &&
	                  strspn(b, "abcdefghijklmnopqrstuvwxyz"
	                            "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	                            "0123456789'()+_,-./:=?") == bl,
	          "a boundary of RFC 2046: %s", b);
	cr_assert(!memmem(whole, len, b, bl), "the boundary is in the body");
	for (unsigned k = 0; k < count; k++)
		cap += 160 + strlen(type) + bl + n[k];
	exp = malloc(cap);
	cr_assert(exp);
	for (unsigned k = 0; k < count; k++) {
		cr_assert(n[k] && a[k] + n[k] <= len);
		got += (size_t)snprintf(exp + got, cap - got,
		                        "%s--%s\r\nContent-Type: %s\r\n"
		                        "Content-Range: bytes %" PRIu64
		                        "-%" PRIu64 "/%" PRIu64 "\r\n\r\n",
		                        k ? "\r\n" : "", b, type, a[k],
		                        a[k] + n[k] - 1, len);
		memcpy(exp + got, whole + a[k], n[k]);
		got += n[k];
	}
	got += (size_t)snprintf(exp + got, cap - got, "\r\n--%s--\r\n", b);
	cr_assert_eq(strtoull(cl, NULL, 10), got, "Content-Length %s, body %zu",
	             cl, got);
	if (head) {
		cr_assert_eq(rlen, (size_t)(body - resp), "HEAD has no body");
	} else {
		cr_assert_eq(rlen - (size_t)(body - resp), got, "%s", resp);
		cr_assert(!memcmp(body, exp, got), "got:\n%s\nwanted:\n%s",
		          body, exp);
	}
	free(exp);
	free(ct);
	free(cl);
}

/* GET (or HEAD) path with hdrs: must be the multipart 206 of the count
 * ranges a/n of whole. */
static void parts_are(const char *method, const char *path, const char *hdrs,
                      const uint8_t *whole, uint64_t len, const char *type,
                      const uint64_t *a, const uint64_t *n, unsigned count)
{
	char *resp;
	size_t rlen = http(method, path, hdrs, &resp);

	assert_parts(resp, rlen, !strcmp(method, "HEAD"), whole, len, type,
	             a, n, count);
	free(resp);
}

/* A 64 MiB tensor of one byte value. */
static void put_filled(const char *name, int byte, size_t len)
{
	char *p = malloc(len);
	char path[128];

	memset(p, byte, len);
	snprintf(path, sizeof(path), "%s/fill.bin", zt_dir);
	zt_put_file(path, p, len);
	free(p);
	zt_ok("put %s --dtype u8 --shape %zu %s", name, len, path);
}

/*
 * GET path (a chunk of len bytes, all 'A'), read its first 4 KiB, then
 * replace() publishes a new version of "big" (both versions held: held
 * bytes) and "big" is deleted; the rest of the body must still be the
 * first version, whole. Then the lease goes and every byte is freed.
 */
static void keeps_its_version(const char *path, size_t len, uint64_t held,
                              void (*replace)(void *), void *arg)
{
	char head[4096], *rest, *m;
	size_t got = 0, mlen;
	ssize_t r;
	int fd = connect_tcp();

	snprintf(head, sizeof(head),
	         "GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
	         path);
	cr_assert(send(fd, head, strlen(head), 0) > 0);
	r = recv(fd, head, sizeof(head), MSG_WAITALL);
	cr_assert_eq(r, (ssize_t)sizeof(head));
	replace(arg);
	m = get_ok("/metrics", &mlen);
	cr_assert_eq(metric_value(m, "tensord_bytes "), held,
	             "both versions are held while the response runs: %s", m);
	cr_assert_eq(metric_value(m, "tensord_http_leases "), 1, "%s", m);
	free(m);
	zt_ok("rm big");
	rest = malloc(len + 8192);
	cr_assert(rest);
	while ((r = recv(fd, rest + got, len + 8192 - got, 0)) > 0)
		got += (size_t)r;
	close(fd);
	{
		const char *b = strstr(head, "\r\n\r\n") + 4;
		size_t first = sizeof(head) - (size_t)(b - head);
		char cl[64];

		snprintf(cl, sizeof(cl), "Content-Length: %zu\r\n", len);
		cr_assert(strstr(head, cl), "%s", head);
		cr_assert_eq(first + got, len, "the whole chunk");
		for (size_t i = 0; i < first; i++)
			cr_assert_eq(b[i], 'A');
		for (size_t i = 0; i < got; i++)
			if (rest[i] != 'A')
				cr_assert_fail("byte %zu is %c, not A (v1)",
				               first + i, rest[i]);
	}
	free(rest);
	/* the lease is gone with the response: the bytes are freed */
	for (int i = 0; i < 2000; i++) {
		m = get_ok("/metrics", &mlen);
		if (strstr(m, "tensord_bytes 0\n") &&
		    strstr(m, "tensord_http_leases 0\n"))
			break;
		free(m);
		m = NULL;
		usleep(10000);
	}
	cr_assert(m, "version 1 was not freed after its response");
	free(m);
}

static void put_big_b(void *arg)
{
	put_filled("big", 'B', *(const size_t *)arg);
}

Test(http, a_response_keeps_its_version_whole, .init = start_http,
     .fini = stop)
{
	size_t len = 64u << 20;

	put_filled("big", 'A', len);
	keeps_its_version("/zarr/big/c/0", len, 2 * len, put_big_b, &len);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * A client that sent the start of a request and closed while it waited
 * in the listen backlog (the store at --http-max-connections) left its
 * slot taken, in CLOSE_WAIT, until --http-timeout: libmicrohttpd read the
 * request's start and never saw the end of file that came with it. Such
 * connections cost a client no descriptor, so a few of them kept the
 * store from every reader. The store looks for them once a second.
 */
Test(http, a_client_gone_before_its_request_frees_its_slot, .fini = stop)
{
	static const char *const more[] = {"--http-prefix", "",
	                                   "--http-max-connections", "1",
	                                   "--http-timeout", "600", NULL};
	static const char part[] = "GET /metrics HTTP/1.1\r\nHost: t\r\n";
	char *resp;
	int idle, gone;

	start_http_args(more);
	/* the one slot; the listen backlog is first come, first served */
	idle = connect_tcp();
	gone = connect_tcp();
	cr_assert_eq(send(gone, part, strlen(part), 0), (ssize_t)strlen(part));
	close(gone);
	/* the slot goes to the client that is gone */
	close(idle);
	/* with it held for 600 s, this reader would wait that long (its
	 * receive times out first, after TU_WAIT_S, and the test fails) */
	http("GET", "/metrics", NULL, &resp);
	cr_assert_eq(status_of(resp), 200, "%.300s", resp);
	free(resp);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* Publish n one-byte tensors "m/I" whose meta_len-byte (16 000 at most)
 * metadata of 0x01 bytes (UTF-8, not JSON) the store prints as "\u0001"
 * escapes: six text bytes for each metadata byte in the group's keys. */
static void put_escaped_meta_len(struct td_client *c, const char *prefix,
                                 unsigned n, size_t meta_len)
{
	static char meta[16000];
	uint64_t shape[1] = {1}, v;
	struct td_error e = {0};

	cr_assert(meta_len <= sizeof(meta));
	memset(meta, 1, sizeof(meta));
	for (unsigned i = 0; i < n; i++) {
		char name[64];
		int fd = memfd_create("meta", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
		                       .ndim = 1, .shape = shape,
		                       .fd_count = 1, .fds = &fd,
		                       .fence_fd = -1, .meta = meta,
		                       .meta_len = meta_len};

		cr_assert(fd >= 0);
		cr_assert_eq(write(fd, "x", 1), 1);
		cr_assert_eq(fcntl(fd, F_ADD_SEALS,
		                   F_SEAL_SHRINK | F_SEAL_GROW),
		             0);
		snprintf(name, sizeof(name), "%s%u", prefix, i);
		cr_assert_eq(td_client_publish(c, &p, &v, &e), 0, "%s",
		             e.reason);
		close(fd);
	}
}

static void put_escaped_meta(struct td_client *c, const char *prefix,
                             unsigned n)
{
	put_escaped_meta_len(c, prefix, n, 16000);
}

/* A reader of path that takes the response's first 4 KiB and no more,
 * with a receive window of 4 KiB: what it was sent stays in flight. */
static int slow_reader(const char *path)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
	                         .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), small = 4096;
	char buf[4096];

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert(fd >= 0);
	cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small,
	                        sizeof(small)),
	             0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	snprintf(buf, sizeof(buf), "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
	cr_assert(send(fd, buf, strlen(buf), 0) > 0);
	tu_await_readable(fd, TU_WAIT_S, "the group key's response");
	cr_assert_eq(recv(fd, buf, sizeof(buf), MSG_WAITALL),
	             (ssize_t)sizeof(buf));
	cr_assert_eq(strncmp(buf, "HTTP/1.1 200", 12), 0, "%.200s", buf);
	return fd;
}

/*
 * A tenant's slow readers of group keys that differ (a publish between
 * requests) held one text each, six bytes per metadata byte: 256 of them
 * a multiple of --max-bytes that no uid is charged for. Texts in flight
 * are capped at a quarter of --max-bytes, one always taken; equal texts
 * are shared.
 */
/* Wait until no response holds a group text (tensord_http_text_bytes 0):
 * a group request then is never refused for one still being let go. */
static void texts_let_go(void)
{
	char *m = NULL;
	size_t mlen;

	for (int i = 0; i < 2000; i++) {
		m = get_ok("/metrics", &mlen);
		if (strstr(m, "\ntensord_http_text_bytes 0\n"))
			break;
		free(m);
		m = NULL;
		usleep(10000);
	}
	cr_assert(m, "a group text was never let go");
	free(m);
}

Test(http, group_texts_in_flight_are_bounded, .fini = stop)
{
	static const char *const more[] = {"--http-prefix", "", "--max-bytes",
	                                   "64M", NULL};
	struct td_client *c = NULL;
	unsigned long long held;
	size_t mlen;
	char *m, *resp, *ra;
	int slow;

	c = http_client(more);
	/* 200 x 16 000 metadata bytes: a zarr.json of about 19 MB, past
	 * the 16 MiB budget and the socket buffers */
	put_escaped_meta(c, "m/", 200);
	slow = slow_reader("/zarr/zarr.json");
	m = get_ok("/metrics", &mlen);
	held = metric_value(m, "tensord_http_text_bytes ");
	cr_assert_gt(held, 16u << 20, "%s", m);
	free(m);
	/* the same text: shared, not a second copy */
	http("GET", "/zarr/zarr.json", NULL, &resp);
	cr_assert_eq(status_of(resp), 200, "%.300s", resp);
	free(resp);
	m = get_ok("/metrics", &mlen);
	cr_assert_eq(metric_value(m, "tensord_http_text_bytes "), held, "%s",
	             m);
	free(m);
	/* another text while the first is held: over the budget */
	put_escaped_meta(c, "n/", 1);
	http("GET", "/zarr/zarr.json", NULL, &resp);
	cr_assert_eq(status_of(resp), 503, "%.300s", resp);
	ra = header_of(resp, "Retry-After: ");
	cr_assert(ra, "%.300s", resp);
	cr_assert_str_eq(ra, "1");
	free(ra);
	free(resp);
	m = get_ok("/metrics", &mlen);
	cr_assert_eq(metric_value(m, "tensord_http_text_busy_total "), 1,
	             "%s", m);
	cr_assert_eq(metric_value(m, "tensord_http_text_bytes "), held, "%s",
	             m);
	free(m);
	/* a node's own small keys still fit beside it */
	http("GET", "/zarr/n_0/zarr.json", NULL, &resp);
	cr_assert_eq(status_of(resp), 200, "%.300s", resp);
	free(resp);
	/* once the slow reader is gone, its text is let go */
	close(slow);
	texts_let_go();
	http("GET", "/zarr/zarr.json", NULL, &resp);
	cr_assert_eq(status_of(resp), 200, "%.300s", resp);
	free(resp);
	td_client_close(c);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

Test(http, metrics_count_what_happened, .fini = stop)
{
	static const char *const more[] = {"--http-prefix", "", "--max-bytes",
	                                   "1M", NULL};
	char *m, *out;
	size_t mlen;

	start_http_args(more);
	put_filled("fill/a", 'a', 600u << 10);
	put_filled("fill/b", 'b', 600u << 10); /* evicts fill/a */
	put_all();
	cr_assert_eq(zt_ctl(&out, "get nosuch -o /dev/null"), 1);
	free(out);
	{
		char path[128];

		snprintf(path, sizeof(path), "%s/big.bin", zt_dir);
		zt_ok_sh("head -c 2097152 /dev/zero > %s", path);
		cr_assert_eq(zt_ctl(&out, "put toobig --dtype u8 --shape "
		                          "2097152 %s",
		                    path),
		             1);
		free(out);
	}
	free(get_ok("/zarr/zarr.json", &mlen));
	http("GET", "/zarr/nosuch/zarr.json", NULL, &out);
	free(out);
	m = get_ok("/metrics", &mlen);
	cr_assert_eq(metric_value(m, "tensord_tensors "), NPUTS + 1, "%s", m);
	cr_assert_eq(metric_value(m, "tensord_evictions_total "), 1);
	cr_assert_eq(metric_value(m, "tensord_bytes "),
	             (600u << 10) + sizeof(f32v) + sizeof(i64v) +
	                     sizeof(f16v) + sizeof(i16v) + sizeof(f64v) +
	                     sizeof(u8v));
	cr_assert_eq(metric_value(m, "tensord_requests_total{op=\"PUBLISH\","
	                             "result=\"ok\"} "),
	             NPUTS + 2);
	cr_assert_eq(metric_value(m, "tensord_requests_total{op=\"GET\","
	                             "result=\"error\"} "),
	             1);
	cr_assert_eq(metric_value(m, "tensord_refusals_total{reason="
	                             "\"space\"} "),
	             1);
	cr_assert_eq(metric_value(m, "tensord_http_responses_total{code="
	                             "\"404\"} "),
	             1);
	cr_assert_eq(metric_value(m, "tensord_http_responses_total{code="
	                             "\"200\"} "),
	             1);
	cr_assert_eq(metric_value(m, "tensord_clients "), 0);
	cr_assert_eq(metric_value(m, "tensord_leases "), 0);
	cr_assert_eq(metric_value(m, "tensord_ring_handoffs "), 0);
	free(m);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* A small tensor's put on c: name, 64 bytes of `byte` */
static void put_small(struct td_client *c, const char *name, int byte)
{
	uint64_t shape[1] = {64};
	char buf[64];
	struct td_publish pub = {.name = name, .dtype = TD_TENSOR_U8,
	                         .ndim = 1, .shape = shape};
	struct td_error e = {0};

	memset(buf, byte, sizeof(buf));
	cr_assert_eq(td_client_put(c, &pub, buf, sizeof(buf), NULL, &e), 0,
	             "%s: %s", name, e.reason);
}

/* n small tensors on c, named fmt with i = 0..n-1, each of bytes
 * first + i % mod */
static void put_names(struct td_client *c, const char *fmt, int n, int first,
                      int mod)
{
	char name[64];

	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), fmt, i);
		put_small(c, name, first + i % mod);
	}
}

/*
 * With thousands of tensors held and room to spare, a PUBLISH (a put:
 * ALLOC, then PUBLISH of a new name or a new version, the old one's
 * buffer closed) and a DELETE visit a few store records each, whatever
 * the count of names: before, every ALLOC and PUBLISH walked every name
 * looking for versions picked for eviction when none was picked, and
 * every plane taken or closed looked for its file among every buffer
 * held. Then eviction still picks the least recently used.
 */
Test(http, requests_visit_few_records_among_many_tensors, .fini = stop)
{
	enum { NAMES = 3000, OPS = 100 };
	static const char *const more[] = {"--http-prefix", "", NULL};
	unsigned long long before, after;
	struct td_client *c;
	struct td_error e = {0};
	char name[32], *m;
	size_t mlen;

	c = http_client(more);
	put_names(c, "many/%05d", NAMES, 0, 256);
	m = get_ok("/metrics", &mlen);
	cr_assert_eq(metric_value(m, "tensord_tensors "), NAMES);
	before = metric_value(m, "tensord_store_visits_total ");
	free(m);
	for (int i = 0; i < OPS; i++) {
		/* a new version of one name, a new name, its delete, and
		 * a delete of an old name and its put anew */
		snprintf(name, sizeof(name), "many/%05d", NAMES / 2);
		put_small(c, name, 'v');
		snprintf(name, sizeof(name), "new/%05d", i);
		put_small(c, name, 'n');
		cr_assert_eq(td_client_delete(c, name, NULL, &e), 0, "%s",
		             e.reason);
		snprintf(name, sizeof(name), "many/%05d", i * 7);
		cr_assert_eq(td_client_delete(c, name, NULL, &e), 0, "%s",
		             e.reason);
		put_small(c, name, 'o');
	}
	m = get_ok("/metrics", &mlen);
	after = metric_value(m, "tensord_store_visits_total ");
	cr_assert_eq(metric_value(m, "tensord_tensors "), NAMES);
	cr_assert_eq(metric_value(m, "tensord_evictions_total "), 0);
	free(m);
	/* 3 puts and 2 deletes an op: a chain or two each (a walk over
	 * the names would be NAMES a put) */
	cr_assert_leq(after - before, OPS * 5 * 8ull,
	              "%llu records visited by %d ops among %d names",
	              after - before, OPS, NAMES);
	td_client_close(c);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * At --max-bytes among thousands of tensors, each put of a new name
 * evicts the least recently used one and visits a few store records:
 * before, each evicting ALLOC and PUBLISH walked every name to heap the
 * candidates and again to find the ones it picked. The order is the
 * one of last use: a GET makes a version the most recently used.
 */
Test(http, eviction_visits_few_records_among_many_tensors, .fini = stop)
{
	enum { NAMES = 3000, OPS = 100 };
	char cap[32];
	const char *more[] = {"--http-prefix", "", "--max-bytes", cap, NULL};
	unsigned long long before, after;
	struct td_client *c;
	struct td_tensor *t;
	struct td_entry en;
	struct td_error e = {0};
	char name[32], *m;
	size_t mlen;

	snprintf(cap, sizeof(cap), "%d", NAMES * 64);
	c = http_client(more);
	put_names(c, "many/%05d", NAMES, 0, 256);
	/* the oldest made the most recently used */
	cr_assert_eq(td_client_get(c, "many/00000", &t, &e), 0, "%s",
	             e.reason);
	td_tensor_release(t);
	m = get_ok("/metrics", &mlen);
	cr_assert_eq(metric_value(m, "tensord_evictions_total "), 0);
	before = metric_value(m, "tensord_store_visits_total ");
	free(m);
	for (int i = 0; i < OPS; i++) {
		snprintf(name, sizeof(name), "new/%05d", i);
		put_small(c, name, 'n');
	}
	m = get_ok("/metrics", &mlen);
	after = metric_value(m, "tensord_store_visits_total ");
	cr_assert_eq(metric_value(m, "tensord_evictions_total "), OPS);
	cr_assert_eq(metric_value(m, "tensord_tensors "), NAMES);
	free(m);
	/* the next OPS in last use went, many/00000 and the rest stayed */
	cr_assert_eq(td_client_stat(c, "many/00000", &en, &e), 0, "%s",
	             e.reason);
	td_entry_fini(&en);
	for (int i = 1; i <= OPS + 1; i++) {
		snprintf(name, sizeof(name), "many/%05d", i);
		cr_assert_eq(td_client_stat(c, name, &en, &e),
		             i <= OPS ? -ENOENT : 0, "%s", name);
		if (i > OPS)
			td_entry_fini(&en);
	}
	/* a victim or two and their chains an op (a walk over the names
	 * would be NAMES a put, twice) */
	cr_assert_leq(after - before, OPS * 16ull,
	              "%llu records visited by %d evicting puts among %d "
	              "names", after - before, OPS, NAMES);
	td_client_close(c);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* tensord_http_node_walks_total now */
static unsigned long long node_walks(void)
{
	size_t mlen;
	char *m = get_ok("/metrics", &mlen);
	unsigned long long n = metric_value(m, "tensord_http_node_walks_total ");

	free(m);
	return n;
}

/*
 * A node's keys (its metadata, its chunk) among many tensors walk the
 * names once while they do not change, not once per request: the node
 * names are kept, and found by a binary search. A new version, a new
 * name, a delete each make the next key walk again, and what it serves
 * is the store's state then: the new version's bytes, a node renamed by
 * the suffix rule when the name that held its node name goes.
 */
Test(http, node_keys_walk_the_names_once_while_they_do_not_change,
     .fini = stop)
{
	enum { NAMES = 500, GETS = 40 };
	static const char *const more[] = {"--http-prefix", "", NULL};
	unsigned long long w0;
	struct td_client *c;
	struct td_error e = {0};
	char path[64], *b;
	size_t len;

	c = http_client(more);
	put_names(c, "many/%05d", NAMES, 'a', 16);
	put_small(c, "cam/left", 'L');
	put_small(c, "cam_left", 'R');
	w0 = node_walks();
	for (int i = 0; i < GETS; i++) {
		snprintf(path, sizeof(path), "/zarr/many_%05d/%s",
		         i * 11 % NAMES, i % 2 ? "zarr.json" : "c/0");
		free(get_ok(path, &len));
	}
	http("GET", "/zarr/nosuch/zarr.json", NULL, &b);
	cr_assert_eq(status_of(b), 404, "%s", b);
	free(b);
	cr_assert_leq(node_walks() - w0, 1, "%llu walks for %d keys",
	              node_walks() - w0, GETS + 1);
	/* a new version is served by the next key, after one walk */
	w0 = node_walks();
	put_small(c, "many/00007", 'z');
	b = get_ok("/zarr/many_00007/c/0", &len);
	cr_assert_eq(len, 64);
	cr_assert_eq(b[0], 'z');
	free(b);
	b = get_ok("/zarr/many_00008/c/0", &len);
	cr_assert_eq(b[0], 'a' + 8);
	free(b);
	cr_assert_eq(node_walks() - w0, 1);
	/* cam/left is node cam_left, cam_left cam_left_1; once cam/left
	 * goes, cam_left is node cam_left */
	b = get_ok("/zarr/cam_left/c/0", &len);
	cr_assert_eq(b[0], 'L');
	free(b);
	cr_assert_eq(td_client_delete(c, "cam/left", NULL, &e), 0, "%s",
	             e.reason);
	b = get_ok("/zarr/cam_left/c/0", &len);
	cr_assert_eq(b[0], 'R');
	free(b);
	http("GET", "/zarr/cam_left_1/c/0", NULL, &b);
	cr_assert_eq(status_of(b), 404, "%s", b);
	free(b);
	cr_assert_eq(node_walks() - w0, 2);
	td_client_close(c);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* A ring of u8 [64] named name, holding no version yet. */
static struct td_ring *ring_u8(struct td_client *c, const char *name)
{
	uint64_t shape[] = {64}, sizes[] = {64};
	struct td_ring_desc rd = {.dtype = TD_TENSOR_U8, .ndim = 1,
	                          .shape = shape, .plane_count = 1,
	                          .plane_sizes = sizes};
	struct td_ring *r;
	struct td_error e = {0};

	cr_assert_eq(td_ring_create(c, name, &rd, &r, &e), 0, "%s: %s", name,
	             e.reason);
	return r;
}

/* One handoff into r: 64 bytes of `byte`. */
static void ring_put(struct td_ring *r, int byte)
{
	struct td_slot slot;

	cr_assert_eq(td_ring_acquire(r, -1, &slot), 0);
	memset(slot.planes[0], byte, 64);
	cr_assert_eq(td_ring_publish(r, NULL), 0);
}

/* The chunk of node over HTTP: 200 and its first byte, or the status. */
static int chunk_byte(const char *node)
{
	char path[96], *resp;
	int code, b;

	snprintf(path, sizeof(path), "/zarr/%s/c/0", node);
	http("GET", path, NULL, &resp);
	code = status_of(resp);
	b = code == 200 ? (unsigned char)body_of(resp)[0] : -code;
	free(resp);
	return b;
}

/*
 * With a ring live and streaming (a camera's, the usual case), node keys
 * among many tensors walk the names once while the exported names do not
 * change: a ring's handoffs change its latest version without a message
 * to the daemon, and every key walked the names again (one walk a key).
 * What the node names depend on of a ring is whether it is exported at
 * all: live, and holding a version; that is looked at per request, over
 * the rings alone.
 */
Test(http, node_keys_walk_once_while_a_ring_streams, .fini = stop)
{
	enum { NAMES = 3000, GETS = 40 };
	static const char *const more[] = {"--http-prefix", "", NULL};
	unsigned long long w0;
	struct td_client *c;
	struct td_ring *r, *r2;
	struct td_error e = {0};
	char node[32];

	c = http_client(more);
	put_names(c, "many/%05d", NAMES, 'a', 16);
	r = ring_u8(c, "cam/ring");
	ring_put(r, 1);
	cr_assert_eq(chunk_byte("cam_ring"), 1);
	w0 = node_walks();
	for (int i = 0; i < GETS; i++) {
		ring_put(r, 2 + i);
		snprintf(node, sizeof(node), "many_%05d", i * 71 % NAMES);
		cr_assert_eq(chunk_byte(node), 'a' + i * 71 % NAMES % 16);
		cr_assert_eq(chunk_byte("cam_ring"), 2 + i);
	}
	cr_assert_leq(node_walks() - w0, 1,
	              "%llu walks for %d keys while a ring streams",
	              node_walks() - w0, 2 * GETS);
	/* a ring created is a node once it holds a version; closed, none */
	r2 = ring_u8(c, "cam/ring2");
	cr_assert_eq(chunk_byte("cam_ring2"), -404);
	ring_put(r2, 'q');
	cr_assert_eq(chunk_byte("cam_ring2"), 'q');
	ring_put(r, 'r');
	cr_assert_eq(chunk_byte("cam_ring"), 'r');
	td_ring_close(r2);
	/* a round trip on c: the close is in */
	cr_assert_eq(td_client_delete(c, "many/00001", NULL, &e), 0, "%s",
	             e.reason);
	cr_assert_eq(chunk_byte("cam_ring2"), -404);
	cr_assert_eq(chunk_byte("many_00001"), -404);
	cr_assert_eq(chunk_byte("many_00002"), 'a' + 2);
	put_small(c, "many/00001", 'n');
	cr_assert_eq(chunk_byte("many_00001"), 'n');
	ring_put(r, 's');
	cr_assert_eq(chunk_byte("cam_ring"), 's');
	td_ring_close(r);
	td_client_close(c);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* Policy reloads the daemon counted (a tc_status_until field) */
static uint64_t reloads_of(const struct td_status *st)
{
	return st->policy_reloads;
}

/* Whether the root listing (v3 and v2) names node, checked both agree */
static bool listed(const char *node)
{
	char quoted[64], key[80];
	size_t len;
	char *v3 = get_ok("/zarr/zarr.json", &len);
	char *v2 = get_ok("/zarr-v2/.zmetadata", &len);
	bool in3, in2;

	snprintf(quoted, sizeof(quoted), "\"%s\":{", node);
	snprintf(key, sizeof(key), "\"%s/.zarray\":", node);
	in3 = strstr(v3, quoted) != NULL;
	in2 = strstr(v2, key) != NULL;
	cr_assert_eq(in3, in2, "%s: v3 %d, v2 %d", node, in3, in2);
	free(v3);
	free(v2);
	return in3;
}

/*
 * The kept node names, and the group listings made from them, follow
 * every change of the exported names while a ring streams: a name added
 * or deleted, a ring created, given its first version or closed, and a
 * policy reload (SIGHUP) that takes names away from `http` and gives
 * them back.
 */
Test(http, names_and_listings_follow_rings_names_and_policy_reloads,
     .fini = stop)
{
	static const char open_pol[] = "allow any rw *\nallow http r *\n";
	static const char shut_b[] = "allow any rw *\nallow http r a/\n"
	                             "allow http r cam/\n";
	static const char shut_pol[] = "allow any rw *\nallow http r a/\n";
	char pol[64];
	const char *const more[] = {"--http-prefix", "", "--policy", pol,
	                            NULL};
	struct td_client *c;
	struct td_ring *r, *r2;
	struct td_error e = {0};

	snprintf(pol, sizeof(pol), "/tmp/td-zarr-policy-%d", (int)getpid());
	zt_put_file(pol, open_pol, sizeof(open_pol) - 1);
	c = http_client(more);
	put_names(c, "a/%02d", 50, 'a', 1);
	r = ring_u8(c, "cam/ring");
	ring_put(r, 1);
	cr_assert(listed("cam_ring"));
	cr_assert(listed("a_07"));
	cr_assert_eq(chunk_byte("cam_ring"), 1);
	/* a name added, then deleted, between handoffs */
	ring_put(r, 2);
	put_small(c, "b/new", 'b');
	cr_assert(listed("b_new"));
	cr_assert_eq(chunk_byte("b_new"), 'b');
	ring_put(r, 3);
	cr_assert_eq(td_client_delete(c, "b/new", NULL, &e), 0, "%s",
	             e.reason);
	cr_assert(!listed("b_new"));
	cr_assert_eq(chunk_byte("b_new"), -404);
	cr_assert_eq(chunk_byte("cam_ring"), 3);
	/* a ring created: listed once it holds a version */
	r2 = ring_u8(c, "cam/two");
	cr_assert(!listed("cam_two"));
	ring_put(r2, 9);
	cr_assert(listed("cam_two"));
	cr_assert_eq(chunk_byte("cam_two"), 9);
	/* a ring closed: gone from both */
	td_ring_close(r2);
	cr_assert_eq(td_client_delete(c, "a/49", NULL, &e), 0, "%s",
	             e.reason); /* a round trip: the close is in */
	cr_assert(!listed("cam_two"));
	cr_assert_eq(chunk_byte("cam_two"), -404);
	cr_assert(!listed("a_49"));
	/* a reload that takes b/ from http, the ring left as it was */
	put_small(c, "b/kept", 'k');
	ring_put(r, 4);
	cr_assert(listed("b_kept"));
	zt_put_file(pol, shut_b, sizeof(shut_b) - 1);
	cr_assert_eq(kill(d.pid, SIGHUP), 0);
	cr_assert_eq(tc_status_until(c, reloads_of, 1), 1);
	ring_put(r, 5);
	cr_assert_eq(chunk_byte("b_kept"), -404);
	cr_assert_eq(chunk_byte("cam_ring"), 5);
	cr_assert(!listed("b_kept"));
	cr_assert(listed("cam_ring"));
	/* one that leaves http only a/: the ring goes too */
	zt_put_file(pol, shut_pol, sizeof(shut_pol) - 1);
	cr_assert_eq(kill(d.pid, SIGHUP), 0);
	cr_assert_eq(tc_status_until(c, reloads_of, 2), 2);
	ring_put(r, 6);
	cr_assert_eq(chunk_byte("cam_ring"), -404);
	cr_assert_eq(chunk_byte("a_07"), 'a');
	cr_assert(!listed("cam_ring"));
	cr_assert(listed("a_07"));
	/* and one that gives them back */
	zt_put_file(pol, open_pol, sizeof(open_pol) - 1);
	cr_assert_eq(kill(d.pid, SIGHUP), 0);
	cr_assert_eq(tc_status_until(c, reloads_of, 3), 3);
	cr_assert(listed("cam_ring"));
	cr_assert(listed("b_kept"));
	cr_assert_eq(chunk_byte("cam_ring"), 6);
	td_ring_close(r);
	td_client_close(c);
	unlink(pol);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* tensord_store_visits_total now */
static unsigned long long store_visits(void)
{
	size_t mlen;
	char *m = get_ok("/metrics", &mlen);
	unsigned long long n = metric_value(m, "tensord_store_visits_total ");

	free(m);
	return n;
}

/*
 * A group's listing (the root zarr.json, .zmetadata) among many names
 * visits the names it lists, not every name held: the names under
 * --http-prefix are a range of the sorted names, found by a binary
 * search, and between changes the listing is made from the kept names.
 */
Test(http, a_group_listing_visits_the_names_it_lists, .fini = stop)
{
	enum { NAMES = 3000, PUB = 10, ROUNDS = 20 };
	static const char *const more[] = {"--http-prefix", "pub/", NULL};
	unsigned long long v0, v;
	struct td_client *c;
	char name[32], *b;
	size_t len;

	c = http_client(more);
	put_names(c, "many/%05d", NAMES, 'm', 1);
	for (int i = 0; i < PUB; i++) {
		snprintf(name, sizeof(name), "pub/%02d", i);
		put_small(c, name, 'p');
	}
	free(get_ok("/zarr/zarr.json", &len));
	v0 = store_visits();
	for (int i = 0; i < ROUNDS; i++) {
		/* a new version: the next listing names the nodes again */
		put_small(c, "pub/03", 'a' + i % 16);
		b = get_ok("/zarr/zarr.json", &len);
		cr_assert(strstr(b, "\"_tensord_variables\":[\"pub_00\","
		                    "\"pub_01\",\"pub_02\",\"pub_03\","
		                    "\"pub_04\",\"pub_05\",\"pub_06\","
		                    "\"pub_07\",\"pub_08\",\"pub_09\"]"),
		          "%s", b);
		free(b);
		b = get_ok("/zarr-v2/.zmetadata", &len);
		cr_assert(strstr(b, "\"pub_09/.zattrs\":"), "%s", b);
		cr_assert(!strstr(b, "many_"), "%s", b);
		free(b);
	}
	v = store_visits() - v0;
	/* a put (a few chains) and one walk over the PUB names a round;
	 * a walk over every name would be NAMES a listing */
	cr_assert_leq(v, ROUNDS * (8ull + 2 * (PUB + 2)),
	              "%llu records visited by %d rounds of two listings "
	              "among %d names", v, ROUNDS, NAMES + PUB);
	td_client_close(c);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * A stream outside --http-prefix (a camera under cam/, the store
 * exporting pub/) makes no node key walk the names again: only a change
 * of a name the store could export does. Each of its puts made the next
 * key walk the exported names before.
 */
Test(http, a_stream_outside_the_http_prefix_makes_no_walk, .fini = stop)
{
	enum { PUB = 10, ROUNDS = 30 };
	static const char *const more[] = {"--http-prefix", "pub/", NULL};
	unsigned long long w0;
	struct td_client *c;
	struct td_error e = {0};
	char name[32], *b;
	size_t len;

	c = http_client(more);
	put_names(c, "pub/%02d", PUB, 'a', 16);
	free(get_ok("/zarr/pub_00/c/0", &len));
	w0 = node_walks();
	for (int i = 0; i < ROUNDS; i++) {
		/* a frame, then a new name, then a delete: all outside */
		put_small(c, "cam/0", 'c');
		snprintf(name, sizeof(name), "cam/extra/%d", i);
		put_small(c, name, 'x');
		cr_assert_eq(td_client_delete(c, name, NULL, &e), 0, "%s",
		             e.reason);
		b = get_ok(i % 2 ? "/zarr/pub_03/c/0" : "/zarr/pub_07/zarr.json",
		           &len);
		if (i % 2)
			cr_assert_eq(b[0], 'a' + 3);
		free(b);
	}
	cr_assert_eq(node_walks() - w0, 0, "%llu walks for %d keys between "
	             "puts outside the prefix", node_walks() - w0, ROUNDS);
	/* a name inside it: one walk, and its bytes served */
	put_small(c, "pub/03", 'Z');
	b = get_ok("/zarr/pub_03/c/0", &len);
	cr_assert_eq(b[0], 'Z');
	free(b);
	http("GET", "/zarr/cam_0/c/0", NULL, &b);
	cr_assert_eq(status_of(b), 404, "%s", b);
	free(b);
	cr_assert_eq(node_walks() - w0, 1);
	td_client_close(c);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* A small tensor's put on c with flags */
static void put_small_flags(struct td_client *c, const char *name,
                            uint32_t flags)
{
	uint64_t shape[1] = {64};
	char buf[64] = {0};
	struct td_publish pub = {.name = name, .dtype = TD_TENSOR_U8,
	                         .ndim = 1, .shape = shape, .flags = flags};
	struct td_error e = {0};

	cr_assert_eq(td_client_put(c, &pub, buf, sizeof(buf), NULL, &e), 0,
	             "%s: %s", name, e.reason);
}

/* The pinned bytes of uid's row in a STATUS now */
static uint64_t pinned_of(struct td_client *c, uid_t uid)
{
	struct td_status *s;
	struct td_error e = {0};
	uint64_t n = ~0ull;

	cr_assert_eq(td_client_status(c, &s, &e), 0, "%s", e.reason);
	for (size_t i = 0; i < s->uid_count; i++)
		if (s->uids[i].uid == (uint32_t)uid)
			n = s->uids[i].pinned;
	td_status_free(s);
	cr_assert_neq(n, ~0ull, "no row for uid %u", (unsigned)uid);
	return n;
}

/*
 * A STATUS among many tensors visits no names: each uid's pinned bytes
 * (its current PIN versions') are kept as versions become current and
 * stop being so, where STATUS summed them over every name, for each uid
 * row. The figure follows pins put, replaced by versions without the
 * flag, deleted, and versions that replace them.
 */
Test(http, status_visits_no_names_among_many_tensors, .fini = stop)
{
	enum { NAMES = 3000, PINNED = 100, CALLS = 20 };
	static const char *const more[] = {"--http-prefix", "", NULL};
	unsigned long long v0, v;
	struct td_client *c;
	struct td_error e = {0};
	char name[32];
	uint64_t want;

	c = http_client(more);
	for (int i = 0; i < NAMES; i++) {
		snprintf(name, sizeof(name), "many/%05d", i);
		put_small_flags(c, name, i < PINNED ? TD_PUBLISH_PIN : 0);
	}
	want = PINNED * 64ull;
	cr_assert_eq(pinned_of(c, geteuid()), want);
	v0 = store_visits();
	for (int i = 0; i < CALLS; i++)
		cr_assert_eq(pinned_of(c, geteuid()), want);
	v = store_visits() - v0;
	cr_assert_leq(v, CALLS * 4ull,
	              "%llu records visited by %d STATUS among %d names", v,
	              CALLS, NAMES);
	/* a pin replaced without the flag, one deleted, one pinned anew,
	 * a pin replaced by a pin */
	put_small_flags(c, "many/00000", 0);
	cr_assert_eq(td_client_delete(c, "many/00001", NULL, &e), 0, "%s",
	             e.reason);
	put_small_flags(c, "many/02000", TD_PUBLISH_PIN);
	put_small_flags(c, "many/00002", TD_PUBLISH_PIN);
	want = want - 2 * 64 + 64;
	cr_assert_eq(pinned_of(c, geteuid()), want);
	put_small_flags(c, "many/00001", TD_PUBLISH_PIN);
	cr_assert_eq(pinned_of(c, geteuid()), want + 64);
	td_client_close(c);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

Test(http, many_readers_and_slow_clients, .fini = stop)
{
	enum { READERS = 200, SLOW = 40 };
	static const char *const more[] = {"--http-prefix", "",
	                                   "--http-timeout", "2", NULL};
	static int fds[READERS], slow[SLOW];
	static size_t got[READERS];
	static char *bufs[READERS];
	const size_t len = 1u << 20;
	char req[] = "GET /zarr/big/c/0 HTTP/1.1\r\nHost: t\r\n"
	             "Connection: close\r\n\r\n";
	char *big, *resp, *m;
	size_t mlen;
	unsigned done = 0;

	start_http_args(more);
	put_filled("big", 'Z', len);
	/* slowloris: headers that never end */
	for (int i = 0; i < SLOW; i++) {
		slow[i] = connect_tcp();
		cr_assert(send(slow[i], "GET /zarr/zarr.json HTTP/1.1\r\nHo", 32,
		               MSG_NOSIGNAL) == 32);
	}
	/* a header larger than the limit is refused, not buffered */
	big = malloc(40000);
	memset(big, 'a', 40000);
	memcpy(big, "GET /zarr/zarr.json HTTP/1.1\r\nX-Big: ", 37);
	memcpy(big + 40000 - 5, "\r\n\r\n", 5);
	exchange(connect_tcp(), big, &resp);
	free(big);
	cr_assert(!strncmp(resp, "HTTP/1.1 431", 12) || !*resp,
	          "an oversized header: %.200s", resp);
	free(resp);
	/* 200 readers at once, each reading the whole chunk */
	for (int i = 0; i < READERS; i++) {
		fds[i] = connect_tcp();
		cr_assert(send(fds[i], req, strlen(req), MSG_NOSIGNAL) > 0);
		bufs[i] = malloc(len + 4096);
		cr_assert(bufs[i]);
	}
	/* bounded: every round reads what is there; 60 s at most */
	for (int round = 0; round < 60000 && done < READERS; round++) {
		struct pollfd pf[READERS];

		for (int i = 0; i < READERS; i++)
			pf[i] = (struct pollfd){fds[i], POLLIN, 0};
		poll(pf, READERS, 1);
		for (int i = 0; i < READERS; i++) {
			ssize_t r;

			if (fds[i] < 0 || !pf[i].revents)
				continue;
			r = recv(fds[i], bufs[i] + got[i],
			         len + 4096 - got[i], MSG_DONTWAIT);
			if (r > 0) {
				got[i] += (size_t)r;
				continue;
			}
			if (r < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			close(fds[i]);
			fds[i] = -1;
			done++;
		}
	}
	cr_assert_eq(done, READERS, "readers left unfinished");
	for (int i = 0; i < READERS; i++) {
		const char *b;

		bufs[i][got[i]] = 0;
		cr_assert_eq(status_of(bufs[i]), 200, "reader %d", i);
		b = strstr(bufs[i], "\r\n\r\n") + 4;
		cr_assert_eq(got[i] - (size_t)(b - bufs[i]), len, "reader %d",
		             i);
		for (size_t k = 0; k < len; k += 4099)
			cr_assert_eq(b[k], 'Z');
		free(bufs[i]);
	}
	/* the slow ones are cut by the per-connection timeout (2 s; wait
	 * at most 30 s) */
	for (int i = 0; i < SLOW; i++) {
		struct pollfd pf = {slow[i], POLLIN, 0};
		char c[256];

		cr_assert_eq(poll(&pf, 1, 30000), 1, "slow client %d kept", i);
		while (recv(slow[i], c, sizeof(c), 0) > 0)
			;
		close(slow[i]);
	}
	/* and the daemon still answers on both sides */
	m = get_ok("/metrics", &mlen);
	cr_assert_eq(metric_value(m, "tensord_http_responses_total{code="
	                             "\"200\"} "),
	             READERS);
	free(m);
	zt_ok("stat big");
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

Test(http, dask_and_xarray_read_the_v2_view, .init = start_http,
     .fini = stop, .timeout = 240)
{
	const char *src = getenv("TD_SOURCE_ROOT");
	char *exp, *out;
	int rc;

	put_all();
	/* the expected values: what tensorctl get returns */
	for (size_t i = 0; i < NPUTS; i++) {
		char *raw = zt_path(nodes[i]);

		zt_ok("get '%s' -o %s", puts_[i].name, raw);
		free(raw);
	}
	exp = expect_puts(false);
	rc = zt_interp(&out, "/usr/bin/python3 '%s/tests/zarr/dask-read.py' "
	                     "'%s/zarr-v2' '%s'",
	               src, base, exp);
	cr_assert_neq(rc, 2, "%s", out);
	cr_assert_eq(rc, 0, "%s", out);
	cr_assert(strstr(out, "6 reduction(s) equal on 2 workers, xarray "
	                      "lists and reads 7 array(s) as published"),
	          "%s", out);
	free(out);
	free(exp);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* ---- the checkers themselves fail on what they must catch ---- */

Test(checkers, catch_what_zarrita_lets_through, .init = start, .fini = stop)
{
	static const struct {
		const char *damage, *says;
	} cases[] = {
	        {"truncate -s 20 D/cam_left/c/0/0",
	         "chunk c/0/0 is 20 bytes, expected 24"},
	        {"printf x > D/cam_left/c/0/1", "files ["},
	        {"sed -i 's/\"NaN\"/NaN/' D/cam_left/zarr.json",
	         "not strict JSON"},
	        {"sed -i 's/\"chunk_shape\":\\[2,3\\]/\"chunk_shape\":[2]/' "
	         "D/cam_left/zarr.json",
	         "chunk_grid is not regular"},
	        {"sed -i 's/\"zarr_format\":3}$/\"zarr_format\":3,\"x\":1}/' "
	         "D/cam_left/zarr.json",
	         "unknown top-level member 'x'"},
	        {"sed -i 's/\"endian\":\"little\"//' D/half/zarr.json",
	         "no endian"},
	        {"mv D/scalar/c D/scalar/c0", "files ["},
	        {"printf x > D/stray", "a group holds a file other than"},
	};
	const char *src = getenv("TD_SOURCE_ROOT");
	char *out, *exp;

	put_all();
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		char dir[32], cmd[512];
		const char *p = cases[i].damage;
		size_t o = 0;

		snprintf(dir, sizeof(dir), "d%zu", i);
		zt_ok("zarr export %s/%s", zt_dir, dir);
		/* D is the export's folder */
		for (; *p && o < sizeof(cmd) - 64; p++) {
			if (*p == 'D' && (p[1] == '/' || !p[1]))
				o += (size_t)snprintf(cmd + o, sizeof(cmd) - o,
				                      "%s/%s", zt_dir, dir);
			else
				cmd[o++] = *p;
		}
		cmd[o] = 0;
		zt_ok_sh("%s", cmd);
		cr_assert_eq(zt_interp(&out, "/usr/bin/python3 "
		                             "'%s/scripts/zarr-check.py' %s/%s",
		                       src, zt_dir, dir),
		             1, "case %zu passed the checker: %s", i, out);
		cr_assert(strstr(out, cases[i].says), "case %zu: %s", i, out);
		free(out);
	}
	/* zarrita's comparison fails on one changed byte */
	zt_ok("zarr export %s/v", zt_dir);
	zt_ok_sh("printf '\\377' | dd of=%s/v/small/c/0/0 bs=1 seek=2 "
	         "conv=notrunc status=none",
	         zt_dir);
	exp = expect_puts(false);
	cr_assert_eq(zt_interp(&out, "node '%s/tests/zarr/zarrita-read.mjs' "
	                             "%s/v '%s'",
	                       src, zt_dir, exp),
	             1, "%s", out);
	cr_assert(strstr(out, "small: values differ"), "%s", out);
	free(out);
	free(exp);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

#include "malloc-count.h"


/* The tests below run the daemon or a tool under tests/malloc-count.c;
 * ASan cannot take that shim (it replaces malloc), so they are built into
 * the plain suite only (as test-recycle.c). */
#ifndef __SANITIZE_ADDRESS__
#include <sys/mman.h>
#include <sys/resource.h>

/* Zero copy: the shim counts the bytes sendfile() moves. */
Test(http, chunk_bodies_go_by_sendfile, .fini = stop)
{
	static const char *const more[] = {"--http-prefix", "", NULL};
	const char *shim = getenv("TD_MALLOC_COUNT");
	const size_t len = 4u << 20;
	volatile struct td_malloc_counts *n;
	char path[32] = "/tmp/td-sendfile-XXXXXX", *resp;
	uint64_t before;

	cr_assert(shim, "TD_MALLOC_COUNT is not set (run through meson test)");
	n = tu_counts_map(path);
	cr_assert_eq(setenv("LD_PRELOAD", shim, 1), 0);
	cr_assert_eq(setenv("TD_MALLOC_COUNT_FILE", path, 1), 0);
	start_http_args(more);
	unsetenv("LD_PRELOAD");
	unsetenv("TD_MALLOC_COUNT_FILE");
	put_filled("big", 'S', len);
	before = n->sendfile_bytes;
	for (int i = 0; i < 3; i++) {
		size_t got = http("GET", "/zarr/big/c/0", NULL, &resp);

		cr_assert_eq(status_of(resp), 200);
		cr_assert_eq(got - (size_t)(body_of(resp) - resp), len);
		free(resp);
	}
	http("GET", "/zarr/big/c/0", "Range: bytes=1000-1999\r\n", &resp);
	cr_assert_eq(status_of(resp), 206);
	free(resp);
	/* every body byte, and only those, went by sendfile() */
	cr_assert_eq(n->sendfile_bytes - before, 3 * len + 1000);
	munmap((void *)n, 4096);
	unlink(path);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * zarr import read every chunk into the heap and kept them all until it
 * published (then copied each into the daemon's buffer): a store of
 * N GiB took N GiB of tensorctl's memory on top of the daemon's. The
 * sizes are checked first and each chunk is read when it is published,
 * straight into the buffer: no allocation near a chunk's size.
 */
Test(import, chunks_go_straight_into_the_daemons_buffer, .init = start,
     .fini = stop)
{
	const char *shim = getenv("TD_MALLOC_COUNT");
	const size_t len = 16u << 20;
	volatile struct td_malloc_counts *n;
	char path[32] = "/tmp/td-import-XXXXXX", *out, *got;
	size_t glen;

	cr_assert(shim, "TD_MALLOC_COUNT is not set (run through meson test)");
	n = tu_counts_map(path);
	put_filled("big", 'I', len);
	zt_ok("zarr export %s/x big", zt_dir);
	cr_assert_eq(zt_sh(&out, "LD_PRELOAD='%s' TD_MALLOC_COUNT_FILE=%s "
	                         "'%s' --socket '%s' zarr import %s/x "
	                         "--prefix back/",
	                   shim, path, getenv("TD_TENSORCTL"), zt_sock,
	                   zt_dir),
	             0, "%s", out);
	free(out);
	cr_assert_lt(n->largest, len / 4, "a %llu-byte allocation",
	             (unsigned long long)n->largest);
	cr_assert_gt(n->malloc, 0); /* the shim was there */
	got = zt_get("back/big", &glen);
	cr_assert_eq(glen, len);
	{
		size_t i = 0;

		while (i < len && got[i] == 'I')
			i++;
		cr_assert_eq(i, len, "byte %zu differs", i);
	}
	free(got);
	munmap((void *)n, 4096);
	unlink(path);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}
#endif

Test(export, big_endian_tgm_objects_are_swapped)
{
	/* multi_object.tgm: three big-endian objects (vectors README) */
	static const float f[] = {1.5f, 2.5f};
	static const int64_t i[] = {100, -200, 300};
	static const uint8_t u[] = {10, 20, 30, 40, 50};
	const char *path = tgm_vector("multi_object.tgm");
	char *b;

	zt_setup(NULL);
	zt_ok_sh("'%s' zarr export %s/m --from %s", getenv("TD_TENSORCTL"),
	         zt_dir, path);
	zt_check_dir("m");
	b = zt_file("m/object_0/c/0");
	cr_assert_arr_eq(b, f, sizeof(f));
	free(b);
	b = zt_file("m/object_1/c/0");
	cr_assert_arr_eq(b, i, sizeof(i));
	free(b);
	b = zt_file("m/object_2/c/0");
	cr_assert_arr_eq(b, u, sizeof(u));
	free(b);
	b = zt_file("m/object_1/zarr.json");
	cr_assert(strstr(b, "\"data_type\":\"int64\""), "%s", b);
	free(b);
	zt_teardown();
}

Test(http, bad_addresses_stop_the_daemon_with_a_reason)
{
	static const struct {
		const char *args, *says;
		int status;
	} cases[] = {
	        /* a malformed address is a bad value, as tensord(8) says:
	         * 2, before anything starts (it was 1, from the start) */
	        {"--http localhost:8080", "names are not resolved", 2},
	        {"--http 127.0.0.1:99999", "bad port", 2},
	        /* digits only: strtoul() took a sign or spaces, and these
	         * started a store on port 80, or on a port of the
	         * kernel's choice (":-0"); the bad option after them is
	         * what a start that took them would stop at */
	        {"--http 127.0.0.1:+80 --http-timeout 0", "bad port", 2},
	        {"--http '127.0.0.1: 80' --http-timeout 0", "bad port", 2},
	        {"--http 127.0.0.1:-0 --http-timeout 0", "bad port", 2},
	        {"--http '[::1]:+80' --http-timeout 0", "bad port", 2},
	        {"--http '[::1' ", "not a numeric", 2},
	        {"--http 127.0.0.1", "want 127.0.0.1:PORT", 2},
	        {"--http unix:", "unix: path empty", 2},
	        /* one of the right form that cannot be served stops the
	         * start: 1 */
	        {"--http 192.0.2.1:8750", "bind/listen", 1},
	        {"--http-prefix ../x", "not a valid name prefix", 2},
	        {"--http-timeout 0", "want 1 to 65536", 2},
	        {"--http-timeout ' 5' --http-max-connections 0",
	         "--http-timeout: want 1 to 65536", 2},
	        {"--http-max-connections +5 --http-timeout 0",
	         "--http-max-connections: want 1 to 65536", 2},
	        /* --http-cors: only origins a browser sends in Origin,
	         * which would otherwise never match, without a word */
	        {"--http-cors http://localhost:8888/", "no path", 2},
	        {"--http-cors HTTP://localhost", "http:// or https://", 2},
	        {"--http-cors http://Localhost", "in lowercase", 2},
	        {"--http-cors ftp://localhost", "http:// or https://", 2},
	        {"--http-cors localhost:8888", "http:// or https://", 2},
	        {"--http-cors http://", "needs a host", 2},
	        {"--http-cors http://x:80", "default port", 2},
	        {"--http-cors https://x:443", "default port", 2},
	        {"--http-cors http://x:0", "1 to 65535", 2},
	        {"--http-cors http://x:65536", "1 to 65535", 2},
	        {"--http-cors http://x:", "1 to 65535", 2},
	        {"--http-cors '[::1]'", "http:// or https://", 2},
	        {"--http-cors 'http://[::1'", "IPv6", 2},
	        {"--http-cors ''", "an empty origin", 2},
	        {"--http-cors 'http://a,,http://b'", "an empty origin", 2},
	        {"--http-cors 'http://a,'", "an empty origin", 2},
	        {"--http-cors 'http://a, http://b'", "no spaces", 2},
	        {"--http-cors 'http://a '", "no spaces", 2},
	        {"--http-cors '*,http://a'", "stands alone", 2},
	        {"--http-cors null", "http:// or https://", 2},
	};
	char *out;

	zt_setup(NULL);
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		int rc = zt_sh(&out, "'%s' --socket %s/s.sock %s",
		               getenv("TD_TENSORD"), zt_dir, cases[i].args);

		cr_assert_eq(rc, cases[i].status, "%s: %s", cases[i].args, out);
		cr_assert(strstr(out, cases[i].says), "%s: %s", cases[i].args,
		          out);
		free(out);
	}
	zt_teardown();
}

/*
 * What the start says of the HTTP options: port 0 is a port the kernel
 * picks, which the log names (it said ":0", leaving the reader no way to
 * find the store); an option that tunes --http or --snapshot given
 * without them is warned about (it was ignored without a word, so
 * `--http-prefix cam/` alone started no store and said nothing).
 */
Test(http, the_start_names_port_0_and_warns_of_options_without_http)
{
	char *out, *p;
	unsigned bound = 0;

	zt_setup(NULL);
	/* in braces: zt_sh()'s 2>&1 then takes the daemon's log too */
	cr_assert_eq(zt_sh(&out, "{ timeout -s INT 1 '%s' --socket %s/s.sock "
	                         "--http 127.0.0.1:0 --http-prefix ''; true; }",
	                   getenv("TD_TENSORD"), zt_dir),
	             0);
	p = strstr(out, "on 127.0.0.1:0 (port ");
	cr_assert(p, "%s", out);
	cr_assert_eq(sscanf(p, "on 127.0.0.1:0 (port %u)", &bound), 1, "%s",
	             out);
	cr_assert(bound > 0 && bound < 65536, "%s", out);
	free(out);
	cr_assert_eq(zt_sh(&out, "{ timeout -s INT 1 '%s' --socket %s/s.sock "
	                         "--http-prefix cam/ --snapshot-interval 5; "
	                         "true; }",
	                   getenv("TD_TENSORD"), zt_dir),
	             0);
	cr_assert(strstr(out, "--http-prefix has no effect without --http "
	                      "ADDR"),
	          "%s", out);
	cr_assert(strstr(out, "--snapshot-interval has no effect without "
	                      "--snapshot FILE"),
	          "%s", out);
	free(out);
	cr_assert_eq(zt_sh(&out, "{ timeout -s INT 1 '%s' --socket %s/s.sock "
	                         "--http-cors '*'; true; }",
	                   getenv("TD_TENSORD"), zt_dir),
	             0);
	cr_assert(strstr(out, "--http-cors has no effect without --http ADDR"),
	          "%s", out);
	free(out);
	zt_teardown();
}

Test(export, hurray_files_read_back_by_zarrita, .init = start, .fini = stop)
{
	struct zt_expect *x = zt_expect_new();
	char *exp, *out;

	/* a file written by tensorctl save, read without the daemon */
	put_all();
	zt_ok("save -o %s/t.hrry", zt_dir);
	zt_ok_sh("'%s' zarr export %s/h --from %s/t.hrry",
	         getenv("TD_TENSORCTL"), zt_dir, zt_dir);
	zt_check_dir("h");
	for (size_t i = 0; i < NPUTS; i++) {
		char attrs[128];

		snprintf(attrs, sizeof(attrs), "{\"_tensord_name\":\"%s\"}",
		         puts_[i].name);
		zt_expect_array(x, nodes[i], puts_[i].zdtype, puts_[i].ndim,
		                puts_[i].dims, nodes[i], attrs);
	}
	exp = zt_expect_done(x, NULL);
	zt_zarrita("h", exp);
	free(exp);
	/* a .tgm option with a Hurray file is a usage error, whether the
	 * file is named or comes on stdin (which ignored them) */
	cr_assert_eq(zt_sh(&out, "'%s' zarr export %s/c --from %s/t.hrry "
	                         "--name-key x",
	                   getenv("TD_TENSORCTL"), zt_dir, zt_dir),
	             2, "%s", out);
	free(out);
	cr_assert_eq(zt_sh(&out, "'%s' zarr export %s/d --from - --message 1 "
	                         "< %s/t.hrry",
	                   getenv("TD_TENSORCTL"), zt_dir, zt_dir),
	             2, "%s", out);
	cr_assert(strstr(out, "are for .tgm files"), "%s", out);
	free(out);
	/* --message 0, the default's value, is refused alike (it was taken
	 * without a word, since only a value other than 0 was looked at) */
	cr_assert_eq(zt_sh(&out, "'%s' zarr export %s/e --from %s/t.hrry "
	                         "--message 0",
	                   getenv("TD_TENSORCTL"), zt_dir, zt_dir),
	             2, "%s", out);
	cr_assert(strstr(out, "are for .tgm files"), "%s", out);
	free(out);
	cr_assert_eq(zt_sh(&out, "'%s' zarr export %s/f --from - --message 0 "
	                         "< %s/t.hrry",
	                   getenv("TD_TENSORCTL"), zt_dir, zt_dir),
	             2, "%s", out);
	cr_assert(strstr(out, "are for .tgm files"), "%s", out);
	free(out);
	/* and without --from it needs one, whatever its value */
	cr_assert_eq(zt_ctl(&out, "zarr export %s/g --message 0 %s", zt_dir,
	                    puts_[0].name),
	             2, "%s", out);
	cr_assert(strstr(out, "need --from"), "%s", out);
	free(out);
	/* the upstream vector: its KV becomes a group attribute */
	{
		const char *dir = tu_vectors_path("hurray");
		char *root;

		if (!dir)
			cr_skip_test("upstream vectors folder absent: "
			             "basic.hrry not checked");
		zt_ok_sh("'%s' zarr export %s/b --from %s/golden/basic.hrry",
		         getenv("TD_TENSORCTL"), zt_dir, dir);
		zt_check_dir("b");
		root = zt_file("b/zarr.json");
		cr_assert(strstr(root, "\"_tensord_hurray_kv\":{\"producer\":"
		                       "\"hurray-conformance\",\"tensor_"
		                       "count\":2}"),
		          "%s", root);
		cr_assert(strstr(root, "\"_tensord_variables\":[\"weights\","
		                       "\"bias\"]"),
		          "%s", root);
		free(root);
	}
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * zarr export --from FILE.hrry mapped the file: cut short by someone else
 * while it was read, tensorctl died of SIGBUS (the cut just after it
 * learned the size: the header and descriptors read through the
 * mapping), or its write of a chunk from the mapping failed with "Bad
 * address" (the cut when the first output file is made). The test shim
 * makes each cut happen at that moment. Now the file is read with pread:
 * either cut is an error naming the file, exit 1, and no DIR.
 */
static void cut_while_exported(const char *var, const char *says,
                               const char *ext)
{
	const char *shim = getenv("TD_RAISE_BEFORE_OPEN_SHIM");
	char *out = NULL;
	int rc;

	cr_assert(shim, "TD_RAISE_BEFORE_OPEN_SHIM is not set (run through "
	                "meson test)");
	char cut[16];

	snprintf(cut, sizeof(cut), "cut.%s: ", ext);
	zt_ok_sh("cp %s/t.%s %s/cut.%s && rm -rf %s/x", zt_dir, ext, zt_dir,
	         ext, zt_dir);
	rc = zt_sh(&out,
	           "LD_PRELOAD='%s' %s=%s/cut.%s ASAN_OPTIONS="
	           "detect_leaks=1:abort_on_error=0:verify_asan_link_order=0 "
	           "'%s' zarr export %s/x --from %s/cut.%s",
	           shim, var, zt_dir, ext, getenv("TD_TENSORCTL"), zt_dir,
	           zt_dir, ext);
	cr_expect_eq(rc, 1, "%s: exit %d: %s", var, rc, out);
	cr_expect(strstr(out, cut) && strstr(out, says), "%s: %s", var, out);
	free(out);
	out = NULL;
	/* neither DIR nor a temporary folder beside it */
	cr_expect_eq(zt_sh(&out, "ls -A %s | grep -e '^x$' -e tensorctl",
	                   zt_dir),
	             1, "%s", out);
	free(out);
}

Test(export, a_hurray_file_cut_while_exported_is_an_error_not_a_crash,
     .init = start, .fini = stop)
{
	put_all();
	zt_ok("save -o %s/t.hrry", zt_dir);
	cut_while_exported("TD_TRUNCATE_AFTER_FSTAT", "UnexpectedEof", "hrry");
	cut_while_exported("TD_TRUNCATE_AT_CREATE", "the file ended early",
	                   "hrry");
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * zarr export --from FILE.tgm read the file whole first: one cut short
 * while it was read gave an empty group (cut when its size was learned)
 * or a complete export of bytes the file no longer held (cut when the
 * first output file is made). It is now read with pread, the chunks when
 * they are written: either cut is an error naming the file, exit 1, and
 * no DIR.
 */
Test(export, a_tgm_file_cut_while_exported_is_an_error_not_a_crash,
     .init = start, .fini = stop)
{
	put_all();
	zt_ok("save wide small half -o %s/t.tgm", zt_dir);
	cut_while_exported("TD_TRUNCATE_AFTER_FSTAT", "UnexpectedEof", "tgm");
	cut_while_exported("TD_TRUNCATE_AT_CREATE", "the file ended early",
	                   "tgm");
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * Inputs that are not a .tgm file went to the .tgm scanner, found no
 * message and gave an empty group with exit 0: a Hurray file on stdin
 * (load takes one by its magic) and a file of junk (load refuses it:
 * "no complete .tgm message found"). Now stdin is sniffed for the Hurray
 * magic as load does, and bytes without a whole message are refused;
 * only an empty input is an empty group.
 */
Test(export, a_hurray_stdin_is_read_and_junk_is_refused, .init = start,
     .fini = stop)
{
	const char *ctl = getenv("TD_TENSORCTL");
	char *a, *b, *out;

	put_all();
	zt_ok("save -o %s/t.hrry", zt_dir);
	zt_ok_sh("'%s' zarr export %s/f --from %s/t.hrry", ctl, zt_dir,
	         zt_dir);
	zt_ok_sh("'%s' zarr export %s/s --from - < %s/t.hrry", ctl, zt_dir,
	         zt_dir);
	a = zt_file("f/zarr.json");
	b = zt_file("s/zarr.json");
	cr_assert_str_eq(a, b);
	free(a);
	free(b);
	zt_ok_sh("diff -r %s/f %s/s", zt_dir, zt_dir);
	zt_check_dir("s");
	/* junk: refused, nothing written */
	zt_ok_sh("head -c 4096 /dev/urandom > %s/junk.tgm", zt_dir);
	cr_assert_eq(zt_sh(&out, "'%s' zarr export %s/j --from %s/junk.tgm",
	                   ctl, zt_dir, zt_dir),
	             1, "%s", out);
	cr_assert(strstr(out, "no complete .tgm message found"), "%s", out);
	free(out);
	cr_assert_eq(zt_sh(&out, "test -e %s/j", zt_dir), 1);
	free(out);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * A FIFO given to --from: its magic was sniffed by reading 8 bytes from
 * it, which the export then lacked (a Hurray stream became junk), and one
 * named .hrry went to the Hurray reader, which needs a file's size (0).
 * Now anything but a regular file is a stream, read whole and sniffed.
 */
/*
 * README's Zarr block: its tensorctl lines as written, in order, in a
 * folder that holds the run.tgm and model.hrry they name (the socket from
 * $TENSORD_SOCKET, as the lines name none), each exit status 0, and the
 * import's names back. The block's second and third lines exported into
 * the first's out.zarr, which export refuses (not empty). Its tensord line
 * is the http suite's (it binds a fixed port).
 */
Test(export, readme_zarr_lines_run_as_written, .init = start, .fini = stop)
{
	static const char head[] = "## Zarr, and reading tensors from other "
				   "hosts\n\n";
	char *text, *block, *line, *save = NULL, *out, readme[4200];
	int lines = 0;
	size_t len;

	snprintf(readme, sizeof(readme), "%s/../../README.md",
		 getenv("TD_TEST_DATA"));
	text = (char *)tu_read_file(readme, &len);
	text = realloc(text, len + 1);
	cr_assert_not_null(text);
	text[len] = 0;
	block = strstr(text, head);
	cr_assert(block, "README has no Zarr section");
	block += strlen(head);
	*strstr(block, "\n\n") = 0;
	zt_ok_sh("mkdir %s/bin && ln -s '%s' %s/bin/tensorctl && "
		 "printf abcdefgh > %s/l.bin", zt_dir, getenv("TD_TENSORCTL"),
		 zt_dir, zt_dir);
	zt_ok("put cam/left --dtype u8 --shape 2,4 %s/l.bin", zt_dir);
	zt_ok("put cam/right --dtype f32 --shape 2 %s/l.bin", zt_dir);
	zt_ok("save -o %s/run.tgm", zt_dir);
	zt_ok("save -o %s/model.hrry cam/left", zt_dir);
	for (line = strtok_r(block, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		int st;

		cr_assert(!strncmp(line, "    ", 4), "not a code line: %s", line);
		if (strncmp(line + 4, "tensorctl ", 10))
			continue;
		st = zt_sh(&out, "cd %s && PATH=%s/bin:$PATH "
				 "TENSORD_SOCKET='%s' %s",
			   zt_dir, zt_dir, zt_sock, line + 4);
		cr_expect_eq(st, 0, "'%s' exited %d: %s", line + 4, st, out);
		free(out);
		lines++;
	}
	cr_expect_eq(lines, 4, "the block's tensorctl lines");
	cr_assert_eq(zt_ctl(&out, "ls back/"), 0, "%s", out);
	/* under their own names, by _tensord_name */
	cr_expect(strstr(out, "back/cam/left ") &&
			  strstr(out, "back/cam/right "),
		  "%s", out);
	free(out);
	free(text);
}

Test(export, a_fifo_is_read_as_a_stream, .init = start, .fini = stop)
{
	const char *ctl = getenv("TD_TENSORCTL");
	const char *const names[] = {"in.fifo", "in.hrry"};

	put_all();
	zt_ok("save -o %s/t.hrry", zt_dir);
	zt_ok_sh("'%s' zarr export %s/f --from %s/t.hrry", ctl, zt_dir,
	         zt_dir);
	for (size_t i = 0; i < 2; i++) {
		zt_ok_sh("cd %s && rm -rf p && mkfifo %s && "
		         "{ cat t.hrry > %s & } && "
		         "'%s' zarr export p --from %s && wait && diff -r f p",
		         zt_dir, names[i], names[i], ctl, names[i]);
		zt_ok_sh("rm -f %s/%s", zt_dir, names[i]);
	}
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

Test(export, a_tgm_file_without_messages_is_an_empty_group)
{
	char *root;

	zt_setup(NULL);
	zt_ok_sh(": > %s/none.tgm && '%s' zarr export %s/e --from %s/none.tgm",
	         zt_dir, getenv("TD_TENSORCTL"), zt_dir, zt_dir);
	zt_check_dir("e");
	root = zt_file("e/zarr.json");
	cr_assert_str_eq(root, "{\"attributes\":{},\"consolidated_metadata\":"
	                       "{\"kind\":\"inline\",\"metadata\":{},"
	                       "\"must_understand\":false},\"node_type\":"
	                       "\"group\",\"zarr_format\":3}");
	free(root);
	zt_teardown();
}

Test(http, the_connection_limit_holds_back_new_connections, .fini = stop)
{
	static const char *const more[] = {"--http-prefix", "",
	                                   "--http-max-connections", "2",
	                                   NULL};
	const char req[] = "GET /metrics HTTP/1.1\r\nHost: t\r\n"
	                   "Connection: close\r\n\r\n";
	struct pollfd pf;
	char *resp;
	int a, b, c;

	start_http_args(more);
	a = connect_tcp();
	b = connect_tcp();
	/* both slots are taken: a third connection waits in the backlog */
	c = connect_tcp();
	cr_assert(send(c, req, strlen(req), MSG_NOSIGNAL) > 0);
	pf = (struct pollfd){c, POLLIN, 0};
	cr_assert_eq(poll(&pf, 1, 300), 0, "served past the limit");
	/* a slot frees: it is served, next to the one still open */
	close(a);
	pf = (struct pollfd){c, POLLIN, 0};
	cr_assert_eq(poll(&pf, 1, 20000), 1, "never served");
	exchange(c, "", &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	cr_assert_eq(metric_value(resp, "tensord_http_connections "), 2,
	             "%s", resp);
	free(resp);
	close(b);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* Whether the daemon has closed fd (its end read, or an error). */
static bool closed_by_peer(int fd)
{
	struct pollfd pf = {fd, POLLIN, 0};
	char b[256];

	if (poll(&pf, 1, 0) != 1)
		return false;
	while (true) {
		ssize_t r = recv(fd, b, sizeof(b), MSG_DONTWAIT);

		if (r <= 0)
			return r == 0 || errno != EAGAIN;
	}
}

/*
 * --http-timeout closed only connections on which nothing came for that
 * long: a client that sent its headers (or a body) a line at a time was
 * never idle and held its slot for ever, so --http-max-connections such
 * clients kept every reader out (slowloris). A request must now be whole
 * within --http-timeout seconds: both trickling clients are cut while
 * they are still sending, and a reader gets their slot.
 */
Test(http, requests_sent_a_byte_at_a_time_are_cut, .fini = stop)
{
	static const char *const more[] = {"--http-prefix", "",
	                                   "--http-max-connections", "2",
	                                   "--http-timeout", "1", NULL};
	const char req[] = "GET /metrics HTTP/1.1\r\nHost: t\r\n"
	                   "Connection: close\r\n\r\n";
	const char get[] = "GET /zarr/zarr.json HTTP/1.1\r\n";
	const char post[] = "POST /zarr/zarr.json HTTP/1.1\r\nHost: t\r\n"
	                    "Content-Length: 100000\r\n\r\n";
	int fd[2], sent[2] = {0, 0};
	bool cut[2] = {false, false};
	char *resp;

	start_http_args(more);
	fd[0] = connect_tcp();
	fd[1] = connect_tcp();
	cr_assert(send(fd[0], get, strlen(get), MSG_NOSIGNAL) ==
	          (ssize_t)strlen(get));
	cr_assert(send(fd[1], post, strlen(post), MSG_NOSIGNAL) ==
	          (ssize_t)strlen(post));
	/* a header line, a body byte, every 200 ms: never idle for 1 s;
	 * 150 each at most (that long uncut: the test fails) */
	for (int i = 0; i < 150 && !(cut[0] && cut[1]); i++) {
		usleep(200 * 1000);
		for (int k = 0; k < 2; k++) {
			if (cut[k])
				continue;
			cut[k] = closed_by_peer(fd[k]) ||
			         send(fd[k], k ? "x" : "X-A: b\r\n",
			              k ? 1 : 8, MSG_NOSIGNAL) < 0;
			sent[k] += !cut[k];
		}
	}
	cr_assert(cut[0], "the trickled headers were never cut (%d lines)",
	          sent[0]);
	cr_assert(cut[1], "the trickled body was never cut (%d bytes)",
	          sent[1]);
	close(fd[0]);
	close(fd[1]);
	exchange(connect_tcp(), req, &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	free(resp);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* ---- repacked chunks: strided, planar, rings ---- */

/* Publish one alloc buffer of `size` bytes (filled by pat) as a tensor. */
static void publish_buf(struct td_client *c, struct td_publish *p,
                        uint64_t size, uint8_t (*pat)(uint64_t))
{
	struct td_error e = {0};
	struct td_alloc *a;
	uint8_t *b;

	cr_assert_eq(td_client_alloc(c, 1, &size, &a, &e), 0, "%s", e.reason);
	b = td_alloc_data(a, 0);
	for (uint64_t i = 0; i < size; i++)
		b[i] = pat(i);
	cr_assert_eq(td_client_publish_alloc(c, a, p, NULL, &e), 0, "%s: %s",
	             p->name, e.reason);
}

static uint8_t pat13(uint64_t i)
{
	return (uint8_t)(i * 13 + 1);
}

/* A chunk over HTTP (v3 key rel under /zarr/NODE/) equals the exported
 * file and want (len bytes), and v2's chunk is the same. */
static void chunk_is(const char *node, const char *key3, const char *key2,
                     const uint8_t *want, size_t len)
{
	char path[256], *got, *file;
	size_t glen, flen;

	snprintf(path, sizeof(path), "%s/x/%s/%s", zt_dir, node, key3);
	file = (char *)tu_read_file(path, &flen);
	cr_assert_eq(flen, len, "%s: exported %zu bytes", path, flen);
	cr_assert(!memcmp(file, want, len), "%s: export gathered wrong", path);
	snprintf(path, sizeof(path), "/zarr/%s/%s", node, key3);
	got = get_ok(path, &glen);
	cr_assert_eq(glen, len, "%s: %zu bytes", path, glen);
	cr_assert(!memcmp(got, want, len), "%s: not the export's bytes", path);
	free(got);
	snprintf(path, sizeof(path), "/zarr-v2/%s/%s", node, key2);
	got = get_ok(path, &glen);
	cr_assert(glen == len && !memcmp(got, want, len), "%s", path);
	free(got);
	free(file);
}

Test(http, repacked_chunks_are_what_export_writes, .init = start_http,
     .fini = stop)
{
	static const char *const nodes_[] = {"rep_dense",  "rep_far",
	                                     "rep_pitch",  "rep_planar",
	                                     "rep_ring",   "rep_transposed"};
	struct td_client *c = NULL;
	struct td_error e = {0};
	struct td_ring *ring;
	struct td_slot slot;
	uint8_t pitch[40], tr[12], far[12], planar[24], ringb[24],
	        dense[6] = {0};
	char *out, *exp, url[160];
	size_t len;

	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	{
		/* u16 [4,5] rows 16 bytes apart (a row pitch) */
		uint64_t shape[] = {4, 5};
		int64_t st[] = {16, 2};
		struct td_plane pl = {0, 0, 0, 64};
		struct td_publish p = {.name = "rep/pitch", .dtype = TD_TENSOR_U16,
		                       .ndim = 2, .shape = shape, .strides = st,
		                       .plane_count = 1, .planes = &pl};

		publish_buf(c, &p, 64, pat13);
		for (uint64_t r = 0, o = 0; r < 4; r++)
			for (uint64_t k = 0; k < 10; k++)
				pitch[o++] = pat13(r * 16 + k);
	}
	{
		/* u8 [3,4] in column-major order: runs of one byte */
		uint64_t shape[] = {3, 4};
		int64_t st[] = {1, 3};
		struct td_plane pl = {0, 0, 0, 12};
		struct td_publish p = {.name = "rep/transposed",
		                       .dtype = TD_TENSOR_U8, .ndim = 2,
		                       .shape = shape, .strides = st,
		                       .plane_count = 1, .planes = &pl};

		publish_buf(c, &p, 12, pat13);
		for (uint64_t r = 0; r < 3; r++)
			for (uint64_t k = 0; k < 4; k++)
				tr[r * 4 + k] = pat13(r + 3 * k);
		/* the same with columns 4 KiB apart: one read per byte */
		st[1] = 4096;
		pl.size = 3 * 4096 + 3;
		p.name = "rep/far";
		publish_buf(c, &p, 4 * 4096, pat13);
		for (uint64_t r = 0; r < 3; r++)
			for (uint64_t k = 0; k < 4; k++)
				far[r * 4 + k] = pat13(r + 4096 * k);
	}
	{
		/* rgb8_planar [3,2,4]: three packed planes, 64 bytes apart;
		 * and the same with padded rows, which export refuses */
		uint64_t shape[] = {3, 2, 4};
		struct td_plane pl[3] = {{0, 0, 4, 8}, {0, 64, 4, 8},
		                         {0, 128, 4, 8}};
		struct td_plane pad[3] = {{0, 0, 8, 16}, {0, 64, 8, 16},
		                          {0, 128, 8, 16}};
		struct td_publish p = {.name = "rep/planar", .dtype = TD_TENSOR_U8,
		                       .ndim = 3, .shape = shape,
		                       .format = "rgb8_planar", .plane_count = 3,
		                       .planes = pl};

		publish_buf(c, &p, 192, pat13);
		for (uint64_t i = 0; i < 24; i++)
			planar[i] = pat13((i / 8) * 64 + i % 8);
		p.name = "rep/padded";
		p.planes = pad;
		publish_buf(c, &p, 192, pat13);
	}
	{
		/* a ring of f32 [2,3] in two planes; its latest version */
		uint64_t shape[] = {2, 3}, sizes[] = {12, 12};
		struct td_ring_desc rd = {.dtype = TD_TENSOR_F32, .ndim = 2,
		                          .shape = shape, .plane_count = 2,
		                          .plane_sizes = sizes};

		cr_assert_eq(td_ring_create(c, "rep/ring", &rd, &ring, &e), 0,
		             "%s", e.reason);
		for (int v = 0; v < 2; v++) {
			cr_assert_eq(td_ring_acquire(ring, -1, &slot), 0);
			for (uint64_t i = 0; i < 24; i++)
				ringb[i] = (uint8_t)(v * 100 + i);
			memcpy(slot.planes[0], ringb, 12);
			memcpy(slot.planes[1], ringb + 12, 12);
			cr_assert_eq(td_ring_publish(ring, NULL), 0);
		}
	}
	{
		char *raw = zt_write_raw("rep_dense", dense, sizeof(dense));

		zt_ok("put rep/dense --dtype u8 --shape 6 %s", raw);
		free(raw);
	}
	/* export refuses the padded one, so the store leaves it out */
	cr_assert_eq(zt_ctl(&out, "zarr export %s/y rep/padded", zt_dir), 1);
	cr_assert(strstr(out, "rep/padded: cannot be exported: its planes are "
	                      "padded"),
	          "%s", out);
	free(out);
	zt_ok("zarr export %s/x rep/dense rep/far rep/pitch rep/planar "
	      "rep/ring rep/transposed",
	      zt_dir);
	/* every metadata key the exported bytes */
	metadata_as_exported("x", nodes_, 6);
	out = get_ok("/zarr-v2/.zmetadata", &len);
	cr_assert(strstr(out, "rep_ring/.zarray") &&
	                  strstr(out, "rep_pitch/.zarray") &&
	                  !strstr(out, "rep_padded"),
	          "%s", out);
	free(out);
	chunk_is("rep_pitch", "c/0/0", "0.0", pitch, sizeof(pitch));
	chunk_is("rep_transposed", "c/0/0", "0.0", tr, sizeof(tr));
	chunk_is("rep_far", "c/0/0", "0.0", far, sizeof(far));
	chunk_is("rep_planar", "c/0/0/0", "0.0.0", planar, sizeof(planar));
	chunk_is("rep_ring", "c/0/0", "0.0", ringb, sizeof(ringb));
	chunk_is("rep_dense", "c/0", "0", dense, sizeof(dense));
	http("GET", "/zarr/rep_padded/c/0/0/0", NULL, &out);
	cr_assert_eq(status_of(out), 404, "%s", out);
	free(out);
	/* Range, HEAD and ETag on the repacked bytes */
	http("GET", "/zarr/rep_pitch/c/0/0", "Range: bytes=3-9\r\n", &out);
	cr_assert_eq(status_of(out), 206, "%s", out);
	cr_assert(strstr(out, "Content-Range: bytes 3-9/40\r\n"), "%s", out);
	cr_assert(!memcmp(body_of(out), pitch + 3, 7));
	free(out);
	http("GET", "/zarr/rep_ring/c/0/0", "Range: bytes=-5\r\n", &out);
	cr_assert(strstr(out, "Content-Range: bytes 19-23/24\r\n"), "%s", out);
	cr_assert(!memcmp(body_of(out), ringb + 19, 5));
	free(out);
	http("GET", "/zarr/rep_ring/c/0/0", "Range: bytes=24-\r\n", &out);
	cr_assert_eq(status_of(out), 416, "%s", out);
	free(out);
	/* several ranges of repacked bytes: parts read as the body is,
	 * across rows, planes and a ring's two planes */
	{
		const uint64_t pa[] = {3, 30}, pn[] = {7, 10}, la[] = {5, 20},
		               ln[] = {6, 4}, ra[] = {20, 0}, rn[] = {4, 13};

		parts_are("GET", "/zarr/rep_pitch/c/0/0",
		          "Range: bytes=3-9,30-\r\n", pitch, sizeof(pitch),
		          "application/octet-stream", pa, pn, 2);
		parts_are("GET", "/zarr/rep_planar/c/0/0/0",
		          "Range: bytes=5-10,-4\r\n", planar, sizeof(planar),
		          "application/octet-stream", la, ln, 2);
		parts_are("GET", "/zarr/rep_ring/c/0/0",
		          "Range: bytes=-4,0-12\r\n", ringb, sizeof(ringb),
		          "application/octet-stream", ra, rn, 2);
		parts_are("GET", "/zarr/rep_transposed/c/0/0",
		          "Range: bytes=0-0,11-11\r\n", tr, sizeof(tr),
		          "application/octet-stream", (const uint64_t[]){0, 11},
		          (const uint64_t[]){1, 1}, 2);
	}
	len = http("HEAD", "/zarr/rep_transposed/c/0/0", NULL, &out);
	cr_assert(strstr(out, "Content-Length: 12\r\n"), "%s", out);
	cr_assert_eq(len, (size_t)(body_of(out) - out), "HEAD has no body");
	free(out);
	http("GET", "/zarr/rep_ring/c/0/0", NULL, &out);
	{
		char *tag = etag_in(out), hdr[160];

		cr_assert(!strncmp(tag, "\"rep/ring@2.", 12), "%s", tag);
		free(out);
		snprintf(hdr, sizeof(hdr), "If-None-Match: %s\r\n", tag);
		http("GET", "/zarr/rep_ring/c/0/0", hdr, &out);
		cr_assert_eq(status_of(out), 304, "%s", out);
		free(tag);
	}
	free(out);
	/* the structure checker and zarrita over the store */
	snprintf(url, sizeof(url), "%s/zarr", base);
	zt_check(url);
	{
		static const uint64_t s1[] = {6}, s2[] = {4, 5}, s3[] = {3, 2, 4},
		                      s4[] = {2, 3}, s5[] = {3, 4};
		const uint8_t *vals[] = {dense, far, pitch, planar, ringb, tr};
		const size_t lens[] = {6, 12, 40, 24, 24, 12};
		const char *types[] = {"uint8", "uint8",   "uint16",
		                       "uint8", "float32", "uint8"};
		const uint64_t *shapes[] = {s1, s5, s2, s3, s4, s5};
		const uint32_t ndims[] = {1, 2, 2, 3, 2, 2};
		struct zt_expect *x = zt_expect_new();

		for (size_t i = 0; i < 6; i++) {
			free(zt_write_raw(nodes_[i], vals[i], lens[i]));
			zt_expect_array(x, nodes_[i], types[i], ndims[i],
			                shapes[i], nodes_[i], NULL);
		}
		exp = zt_expect_done(x, NULL);
	}
	zt_zarrita(url, exp);
	free(exp);
	td_ring_close(ring);
	td_client_close(c);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

static uint8_t pat_a(uint64_t i)
{
	return (uint8_t)('A' + (i % 8192 >= 8000)); /* 'B' in the padding */
}

static uint8_t pat_c(uint64_t i)
{
	(void)i;
	return 'C';
}

struct republish {
	struct td_client *c;
	struct td_publish *p;
	uint64_t size;
};

static void publish_c(void *arg)
{
	struct republish *rp = arg;

	publish_buf(rp->c, rp->p, rp->size, pat_c);
}

/*
 * An image published the way cameras describe one, a row pitch as its
 * plane's stride: the blob carries the pitch as the row stride (blob
 * spec §8.1), and export and the store read rows that far apart, also
 * when the blob's strides say otherwise (the plane's stride is what the
 * daemon checks, §9.5.9). Both used to send the rows packed from the
 * plane's first byte: row 1 was the padding after row 0.
 */
Test(http, an_images_rows_are_read_at_its_row_pitch, .init = start_http,
     .fini = stop)
{
	uint64_t shape[] = {2, 2, 3};
	int64_t dense[] = {6, 3, 1};
	const int64_t *st;
	struct td_plane pl = {0, 0, 64, 70};
	struct td_publish p = {.name = "img/pitch", .dtype = TD_TENSOR_U8,
	                       .ndim = 3, .shape = shape, .format = "rgb8",
	                       .plane_count = 1, .planes = &pl};
	struct td_client *c = NULL;
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	uint8_t want[12];
	uint32_t n = 0;

	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	publish_buf(c, &p, 70, pat13);
	/* the same bytes, its strides (wrongly) dense */
	p.name = "img/dense";
	p.strides = dense;
	publish_buf(c, &p, 70, pat13);
	cr_assert_eq(td_client_get(c, "img/pitch", &t, &e), 0, "%s", e.reason);
	st = td_tensor_strides(t, &n);
	cr_assert(n == 3 && st[0] == 64 && st[1] == 3 && st[2] == 1,
	          "strides %u: [%lld, ...]", n, n ? (long long)st[0] : 0);
	td_tensor_release(t);
	td_client_close(c);
	for (uint64_t i = 0; i < 12; i++)
		want[i] = pat13((i / 6) * 64 + i % 6);
	zt_ok("zarr export %s/x img/pitch img/dense", zt_dir);
	chunk_is("img_pitch", "c/0/0/0", "0.0.0", want, sizeof(want));
	chunk_is("img_dense", "c/0/0/0", "0.0.0", want, sizeof(want));
}

Test(http, a_repacked_response_keeps_its_version_whole, .init = start_http,
     .fini = stop)
{
	/* u8 [4096, 8000] with rows 8192 bytes apart: 31.25 MiB repacked */
	const size_t rows = 4096, cols = 8000;
	uint64_t shape[] = {rows, cols}, size = rows * 8192;
	int64_t st[] = {8192, 1};
	struct td_plane pl = {0, 0, 0, rows * 8192};
	struct td_publish p = {.name = "big", .dtype = TD_TENSOR_U8,
	                       .ndim = 2, .shape = shape, .strides = st,
	                       .plane_count = 1, .planes = &pl};
	struct td_error e = {0};
	struct republish rp = {NULL, &p, size};

	cr_assert_eq(td_client_connect(d.sock, &rp.c, &e), 0, "%s", e.reason);
	publish_buf(rp.c, &p, size, pat_a);
	keeps_its_version("/zarr/big/c/0/0", rows * cols, 2 * size, publish_c,
	                  &rp);
	td_client_close(rp.c);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* A reader that takes a whole response as fast as it comes. */
struct drain {
	int fd;
	_Atomic uint64_t got; /* bytes received */
	_Atomic bool done;
};

static void *drain_all(void *arg)
{
	struct drain *dr = arg;
	static char buf[1 << 16];
	ssize_t r;

	while ((r = recv(dr->fd, buf, sizeof(buf), 0)) > 0)
		dr->got += (uint64_t)r;
	dr->done = true;
	return NULL;
}

/*
 * While an HTTP reader takes a slowly repacked chunk (u8 [4096, 4096]
 * transposed: a run of one byte at a time, 16 Mi of them) as fast as it
 * comes, socket
 * clients are served between the response's callbacks. libmicrohttpd
 * says "run again now" (a timeout of 0) while it has bytes for a socket
 * that takes them, and the store ran it from a 0 ms timer restarted in
 * its own callback, which libuv 1.44 runs again at once, without polling
 * anything else: every socket request waited for the whole body (a STAT
 * 30 s behind two such readers, in a probe). Ten STATs now come back
 * while the body is still being sent (a count of bytes, not a clock).
 */
Test(http, a_busy_response_leaves_the_loop_to_socket_clients,
     .init = start_http, .fini = stop)
{
	const uint64_t n = 4096;
	uint64_t shape[] = {n, n};
	int64_t st[] = {1, (int64_t)n};
	struct td_plane pl = {0, 0, 0, n * n};
	struct td_publish p = {.name = "slow", .dtype = TD_TENSOR_U8,
	                       .ndim = 2, .shape = shape, .strides = st,
	                       .plane_count = 1, .planes = &pl};
	struct drain dr = {.fd = -1};
	struct td_client *c = NULL;
	struct td_error e = {0};
	struct td_entry ent = {0};
	const char *req = "GET /zarr/slow/c/0/0 HTTP/1.1\r\nHost: t\r\n"
	                  "Connection: close\r\n\r\n";
	pthread_t th;
	uint64_t got;

	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	publish_buf(c, &p, n * n, pat13);
	dr.fd = connect_tcp();
	cr_assert_eq(send(dr.fd, req, strlen(req), MSG_NOSIGNAL),
	             (ssize_t)strlen(req));
	cr_assert_eq(pthread_create(&th, NULL, drain_all, &dr), 0);
	/* the body has started (hang guard: the socket's receive timeout) */
	while (dr.got < 65536 && !dr.done)
		usleep(1000);
	for (int i = 0; i < 10; i++) {
		cr_assert_eq(td_client_stat(c, "slow", &ent, &e), 0, "%s",
		             e.reason);
		td_entry_fini(&ent);
	}
	got = dr.got;
	cr_assert(!dr.done && got < n * n,
	          "the socket client waited for the whole body (%" PRIu64
	          " bytes received before its ten STATs came back)",
	          got);
	pthread_join(th, NULL);
	close(dr.fd);
	cr_assert_gt(dr.got, n * n, "the body was cut: %" PRIu64, dr.got);
	td_client_close(c);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* The daemon's read system calls so far (/proc/PID/io syscr). */
static uint64_t daemon_reads(void)
{
	char path[64], line[128];
	uint64_t n = 0;
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/io", (int)d.pid);
	f = fopen(path, "re");
	cr_assert(f, "%s: %s", path, strerror(errno));
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "syscr: %" SCNu64, &n) == 1;
	fclose(f);
	cr_assert(found, "no syscr in %s", path);
	return n;
}

/*
 * A transposed view (u8 [2048, 2048], strides [1, 2048]): every element
 * of the dense chunk lies 2 KiB past the one before in the plane. It was
 * one pread() per element (4 Mi system calls, about 4 MB/s); a sealed
 * memfd plane is now read through a mapping for the response. Counted
 * by the daemon's read calls, every byte checked.
 */
Test(http, a_transposed_chunk_is_not_a_read_per_element, .init = start_http,
     .fini = stop)
{
	const uint64_t n = 2048;
	uint64_t shape[] = {n, n};
	int64_t st[] = {1, (int64_t)n};
	struct td_plane pl = {0, 0, 0, n * n};
	struct td_publish p = {.name = "tr", .dtype = TD_TENSOR_U8,
	                       .ndim = 2, .shape = shape, .strides = st,
	                       .plane_count = 1, .planes = &pl};
	struct td_client *c = NULL;
	struct td_error e = {0};
	uint64_t reads0, reads;
	struct timespec t0, t1;
	size_t len;
	char *out;

	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	publish_buf(c, &p, n * n, pat13);
	reads0 = daemon_reads();
	clock_gettime(CLOCK_MONOTONIC, &t0);
	out = get_ok("/zarr/tr/c/0/0", &len);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	reads = daemon_reads() - reads0;
	cr_assert_eq(len, n * n);
	for (uint64_t i = 0; i < n; i++)
		for (uint64_t j = 0; j < n; j++)
			cr_assert_eq((uint8_t)out[i * n + j], pat13(i + j * n),
			             "element [%" PRIu64 ", %" PRIu64 "]", i, j);
	free(out);
	fprintf(stderr,
	        "http: transposed 4 MiB chunk: %" PRIu64 " daemon reads, "
	        "%.1f ms (reported, not asserted)\n",
	        reads,
	        (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
	                (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
	/* the request's own reads and the loop's, not one per element */
	cr_assert_lt(reads, n * n / 64,
	             "%" PRIu64 " read calls for %" PRIu64 " elements", reads,
	             n * n);
	td_client_close(c);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

Test(http, dmabuf_planes_are_served_mapped, .init = start_http, .fini = stop)
{
	struct udmabuf_create cr = {.flags = UDMABUF_FLAGS_CLOEXEC,
	                            .size = 4096};
	uint64_t shape[] = {4096};
	struct td_client *c = NULL;
	struct td_error e = {0};
	struct td_publish p = {.name = "db/t", .dtype = TD_TENSOR_U8,
	                       .ndim = 1, .shape = shape, .fd_count = 1};
	char *out;
	size_t len;
	int mfd, dev, dbuf;

	if (access("/dev/udmabuf", R_OK | W_OK) != 0)
		cr_skip_test("kernel feature missing: /dev/udmabuf (the "
		             "udmabuf driver) is absent, so no dma-buf can be "
		             "made here; the HTTP store's dma-buf path not "
		             "exercised");
	mfd = memfd_create("td-test-udmabuf", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	cr_assert(mfd >= 0 && ftruncate(mfd, 4096) == 0);
	for (unsigned i = 0; i < 4096; i++) {
		uint8_t b = (uint8_t)(i * 7 + 3);

		cr_assert_eq(pwrite(mfd, &b, 1, i), 1);
	}
	cr_assert_eq(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
	dev = open("/dev/udmabuf", O_RDWR | O_CLOEXEC);
	cr_assert(dev >= 0);
	cr.memfd = (uint32_t)mfd;
	dbuf = ioctl(dev, UDMABUF_CREATE, &cr);
	cr_assert(dbuf >= 0, "UDMABUF_CREATE: %s", strerror(errno));
	p.fds = &dbuf;
	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_publish(c, &p, NULL, &e), 0, "%s", e.reason);
	/* listed, and its chunk read through a mapping of the dma-buf */
	out = get_ok("/zarr/zarr.json", &len);
	cr_assert(strstr(out, "db_t"), "%s", out);
	free(out);
	out = get_ok("/zarr/db_t/c/0", &len);
	cr_assert_eq(len, 4096);
	for (unsigned i = 0; i < 4096; i++)
		cr_assert_eq((uint8_t)out[i], (uint8_t)(i * 7 + 3), "byte %u", i);
	free(out);
	td_client_close(c);
	close(dbuf);
	close(dev);
	close(mfd);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

Test(http, a_chunk_waits_for_its_fence, .init = start_http, .fini = stop)
{
	uint64_t shape[] = {16}, one = 1;
	struct td_publish p = {.name = "fenced", .dtype = TD_TENSOR_U8,
	                       .ndim = 1, .shape = shape,
	                       .flags = TD_PUBLISH_FENCE};
	struct td_client *c = NULL;
	struct td_error e = {0};
	char *out;
	size_t len;

	p.fence_fd = eventfd(0, EFD_CLOEXEC);
	cr_assert(p.fence_fd >= 0);
	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	publish_buf(c, &p, 16, pat13);
	/* listed (its metadata does not depend on the bytes), not sent */
	out = get_ok("/zarr/fenced/zarr.json", &len);
	free(out);
	http("GET", "/zarr/fenced/c/0", NULL, &out);
	cr_assert_eq(status_of(out), 503, "%s", out);
	cr_assert(strstr(out, "fence has not signalled"), "%s", out);
	free(out);
	cr_assert_eq(write(p.fence_fd, &one, sizeof(one)), 8);
	out = get_ok("/zarr/fenced/c/0", &len);
	cr_assert_eq(len, 16);
	for (size_t i = 0; i < 16; i++)
		cr_assert_eq((uint8_t)out[i], pat13(i));
	free(out);
	close(p.fence_fd);
	td_client_close(c);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* A ring's latest slot published with a pending fence: 503 naming it */
Test(http, a_ring_chunk_waits_for_its_slot_fence, .init = start_http,
     .fini = stop)
{
	uint64_t shape[] = {4}, sizes[] = {4}, v = 0;
	struct td_ring_desc rd = {.dtype = TD_TENSOR_U8, .ndim = 1,
	                          .shape = shape, .plane_count = 1,
	                          .plane_sizes = sizes};
	struct td_client *c = NULL;
	struct td_error e = {0};
	struct td_ring *ring;
	struct td_slot slot;
	char *out;
	size_t len;

	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	cr_assert_eq(td_ring_create(c, "rf/r", &rd, &ring, &e), 0, "%s",
	             e.reason);
	cr_assert_eq(td_ring_acquire(ring, -1, &slot), 0);
	memset(slot.planes[0], 7, 4);
	cr_assert_eq(td_ring_publish_fenced(ring, &v), 0);
	http("GET", "/zarr/rf_r/c/0", NULL, &out);
	cr_assert_eq(status_of(out), 503, "%s", out);
	cr_assert(strstr(out, "fence has not signalled"), "%s", out);
	free(out);
	cr_assert_eq(td_ring_fence_signal(ring, v), 0);
	out = get_ok("/zarr/rf_r/c/0", &len);
	cr_assert_eq(len, 4);
	cr_assert_eq(memcmp(out, "\7\7\7\7", 4), 0);
	free(out);
	td_ring_close(ring);
	td_client_close(c);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* ---- import: all or nothing ---- */

Test(import, all_or_nothing_unless_partial, .fini = stop)
{
	static const char *const more[] = {"--max-bytes", "1M", NULL};
	static const uint8_t four[4] = {1, 2, 3, 4};
	const size_t big = 2u << 20;
	uint8_t *two = calloc(1, big);
	char *out;

	tu_daemon_start_args(&d, "warn", more);
	zt_setup(&d);
	/* a bad array after good ones: refused before anything is published */
	handmade("v", "a", META("uint8", "[4]", "[4]", "0", "little"), "c/0",
	         four, 4);
	handmade("v", "b", META("uint8", "[4]", "[4]", "0", "little"), "c/0",
	         four, 4);
	handmade("v", "c", META("uint8", "[4]", "[4]", "0", "little"), "c/0",
	         four, 3);
	cr_assert_eq(zt_ctl(&out, "zarr import %s/v --prefix v/", zt_dir), 1);
	cr_assert(strstr(out, "expected 4 bytes"), "%s", out);
	free(out);
	/* a daemon refusal after good ones (c is over --max-bytes): the good
	 * ones are deleted again */
	handmade("p", "a", META("uint8", "[4]", "[4]", "0", "little"), "c/0",
	         four, 4);
	handmade("p", "b", META("uint8", "[4]", "[4]", "0", "little"), "c/0",
	         four, 4);
	handmade("p", "c", META("uint8", "[2097152]", "[2097152]", "0",
	                        "little"),
	         "c/0", two, big);
	cr_assert_eq(zt_ctl(&out, "zarr import %s/p --prefix p/", zt_dir), 1);
	cr_assert(strstr(out, "2 array(s) published before this failure; 2 "
	                      "deleted again"),
	          "%s", out);
	free(out);
	cr_assert_eq(zt_ctl(&out, "ls"), 0);
	cr_assert(!strstr(out, "v/") && !strstr(out, "p/"),
	          "nothing of either import remains: %s", out);
	free(out);
	/* --partial keeps them */
	cr_assert_eq(zt_ctl(&out, "zarr import %s/p --prefix p/ --partial",
	                    zt_dir),
	             1);
	cr_assert(strstr(out, "2 array(s) published before this failure, "
	                      "kept (--partial)"),
	          "%s", out);
	cr_assert(strstr(out, "p/a version") && strstr(out, "p/b version"),
	          "%s", out);
	free(out);
	{
		size_t len;
		char *got = zt_get("p/b", &len);

		cr_assert(len == 4 && !memcmp(got, four, 4));
		free(got);
	}
	cr_assert_eq(zt_ctl(&out, "stat p/c"), 1);
	free(out);
	/* --json --partial: the error object says what was kept */
	cr_assert_eq(zt_ctl(&out, "zarr import %s/p --prefix q/ --partial "
	                          "--json",
	                    zt_dir),
	             1);
	cr_assert(strstr(out, "{\"error\":{\"kind\":\"daemon\","), "%s", out);
	cr_assert(strstr(out, "\"published\":[{\"name\":\"q/a\",\"version\":") &&
	                  strstr(out, "{\"name\":\"q/b\",\"version\":"),
	          "%s", out);
	free(out);
	free(two);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * --no-replace (docs/tensorctl.md, "zarr"): an array whose name has a
 * version is left alone, said, the rest published, status 3; with
 * --json the names left alone are "skipped".
 */
Test(import, no_replace_leaves_names_that_exist_alone, .fini = stop)
{
	static const char *const more[] = {"--max-bytes", "1M", NULL};
	static const uint8_t four[4] = {1, 2, 3, 4}, five[4] = {5, 5, 5, 5};
	const size_t big = 2u << 20;
	uint8_t *two = calloc(1, big);
	char *out;
	size_t len;
	char *got;

	tu_daemon_start_args(&d, "warn", more);
	zt_setup(&d);
	handmade("n", "a", META("uint8", "[4]", "[4]", "0", "little"), "c/0",
	         four, 4);
	handmade("n", "b", META("uint8", "[4]", "[4]", "0", "little"), "c/0",
	         four, 4);
	handmade("m", "b", META("uint8", "[4]", "[4]", "0", "little"), "c/0",
	         five, 4);
	/* n/b exists (five), n/a does not */
	zt_ok("zarr import %s/m --prefix n/", zt_dir);
	cr_assert_eq(zt_ctl(&out, "zarr import %s/n --prefix n/ --no-replace",
	                    zt_dir),
	             3, "%s", out);
	cr_assert(strstr(out, "tensorctl: n/b: skipped: \"n/b\" exists "
	                      "(version "),
	          "%s", out);
	cr_assert(strstr(out, "n/a version"), "%s", out);
	cr_assert(!strstr(out, "n/b version"), "%s", out);
	free(out);
	got = zt_get("n/b", &len);
	cr_assert(len == 4 && !memcmp(got, five, 4), "n/b was replaced");
	free(got);
	got = zt_get("n/a", &len);
	cr_assert(len == 4 && !memcmp(got, four, 4));
	free(got);
	/* --json: both exist now */
	cr_assert_eq(zt_ctl(&out, "zarr import %s/n --prefix n/ --no-replace "
	                          "--json",
	                    zt_dir),
	             3, "%s", out);
	cr_assert(strstr(out, "\n{\"published\":[],\"skipped\":[\"n/a\","
	                      "\"n/b\"]}\n"),
	          "%s", out);
	cr_assert(strstr(out, "tensorctl: n/a: skipped:"), "%s", out);
	free(out);
	/* a refusal after a skip (c is over --max-bytes), --partial --json:
	 * the error object says what was skipped too */
	handmade("q", "a", META("uint8", "[4]", "[4]", "0", "little"), "c/0",
	         four, 4);
	handmade("q", "c", META("uint8", "[2097152]", "[2097152]", "0",
	                        "little"),
	         "c/0", two, big);
	cr_assert_eq(zt_ctl(&out, "zarr import %s/q --prefix n/ --no-replace "
	                          "--partial --json",
	                    zt_dir),
	             1, "%s", out);
	cr_assert(strstr(out, "{\"error\":{\"kind\":\"daemon\","), "%s", out);
	cr_assert(strstr(out, "\"published\":[],\"skipped\":[\"n/a\"]}"),
	          "%s", out);
	free(out);
	free(two);
	/* without it: replaced, as ever */
	zt_ok("zarr import %s/n --prefix n/", zt_dir);
	got = zt_get("n/b", &len);
	cr_assert(len == 4 && !memcmp(got, four, 4));
	free(got);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* ---- /metrics: access refusals ---- */

Test(http, access_refusals_are_counted_exactly, .fini = stop)
{
	static const char text[] = "allow uid=65534 rw pub/\n"
	                           "allow http r pub/a\n";
	char pol[64], *m, *out;
	const char *const more[] = {"--http-prefix", "pub/", "--policy", pol,
	                            "--socket-mode", "0666", NULL};
	size_t len;

	/* the daemon's own uid is never refused: a second uid is */
	cr_assert_eq(geteuid(), 0, "this test runs as root (as CI does)");
	snprintf(pol, sizeof(pol), "/tmp/td-zarr-policy-%d", (int)getpid());
	zt_put_file(pol, text, sizeof(text) - 1);
	start_http_args(more);
	unlink(pol);
	zt_ok_sh("chmod 0711 %s && chmod 0755 %s && printf abcd > %s/four",
	         d.dir, zt_dir, zt_dir);
	zt_ok("put pub/a --dtype u8 --shape 4 %s/four", zt_dir);
	zt_ok("put pub/b --dtype u8 --shape 4 %s/four", zt_dir);
	/* uid 65534: two writes and a read the policy refuses, one write
	 * it grants */
	for (int i = 0; i < 4; i++) {
		static const char *const cmd[] = {
		        "put priv/c --dtype u8 --shape 4 %s/four",
		        "put pub/d --dtype u8 --shape 4 %s/four",
		        "put other/e --dtype u8 --shape 4 %s/four",
		        "stat priv/none"};
		char args[256];

		snprintf(args, sizeof(args), cmd[i], zt_dir);
		cr_assert_eq(zt_sh(&out,
		                   "setpriv --reuid=65534 --regid=65534 "
		                   "--clear-groups '%s' --socket '%s' %s",
		                   getenv("TD_TENSORCTL"), d.sock, args),
		             i == 1 ? 0 : 1, "%s: %s", args, out);
		cr_assert(i == 1 || strstr(out, "may not"), "%s", out);
		free(out);
	}
	m = get_ok("/metrics", &len);
	cr_assert_eq(metric_value(m, "tensord_refusals_total{reason="
	                             "\"access\"} "),
	             3, "%s", m);
	free(m);
	/*
	 * HTTP names outside the prefix or denied to `http` are missing
	 * keys, not refusals: counting them would let any HTTP client learn
	 * from /metrics that a hidden name exists.
	 */
	http("GET", "/zarr/pub_b/zarr.json", NULL, &out);
	cr_assert_eq(status_of(out), 404, "%s", out);
	free(out);
	http("GET", "/zarr-v2/priv_c/.zarray", NULL, &out);
	cr_assert_eq(status_of(out), 404, "%s", out);
	free(out);
	m = get_ok("/metrics", &len);
	cr_assert_eq(metric_value(m, "tensord_refusals_total{reason="
	                             "\"access\"} "),
	             3, "%s", m);
	cr_assert_eq(metric_value(m, "tensord_http_responses_total{code="
	                             "\"404\"} "),
	             2, "%s", m);
	free(m);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * Two names of the maximum length (255 bytes) that sanitise to the same
 * node name: the one that sorts second takes the suffix "_1" (node names
 * have room for it), and one tenant's names never take the store down.
 */
Test(http, long_names_that_collide_are_both_served,
     .init = start_http, .fini = stop)
{
	char a[256], b[256], node[272], path[320], *out;
	size_t len;

	memset(a, 'a', 255);
	a[255] = 0;
	a[253] = '/';
	memcpy(b, a, sizeof(b));
	b[253] = '_';
	put_filled("other", 'O', 8);
	put_filled(a, 'A', 8);
	put_filled(b, 'B', 8);
	/* "aaa…/b" sorts first and keeps the name "aaa…_b" */
	memcpy(node, b, sizeof(b));
	out = get_ok("/zarr/zarr.json", &len);
	cr_assert(strstr(out, "\"other\""), "%s", out);
	cr_assert(strstr(out, node), "%s", out);
	free(out);
	out = get_ok("/zarr/other/c/0", &len);
	cr_assert_eq(len, 8);
	cr_assert_eq(out[0], 'O');
	free(out);
	snprintf(path, sizeof(path), "/zarr/%s/c/0", node);
	out = get_ok(path, &len);
	cr_assert_eq(len, 8);
	cr_assert_eq(out[0], 'A', "the name that sorts first keeps the node");
	free(out);
	strcat(node, "_1");
	snprintf(path, sizeof(path), "/zarr/%s/c/0", node);
	out = get_ok(path, &len);
	cr_assert_eq(len, 8);
	cr_assert_eq(out[0], 'B');
	free(out);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* A ring of u8 [4] with one version, every byte b. */
static struct td_ring *ring_of_bytes(struct td_client *c, uint8_t b)
{
	uint64_t shape[] = {4}, sizes[] = {4};
	struct td_ring_desc rd = {.dtype = TD_TENSOR_U8, .ndim = 1,
	                          .shape = shape, .plane_count = 1,
	                          .plane_sizes = sizes};
	struct td_error e = {0};
	struct td_ring *ring;
	struct td_slot slot;

	cr_assert_eq(td_ring_create(c, "etag/r", &rd, &ring, &e), 0, "%s",
	             e.reason);
	cr_assert_eq(td_ring_acquire(ring, -1, &slot), 0);
	memset(slot.planes[0], b, 4);
	cr_assert_eq(td_ring_publish(ring, NULL), 0);
	return ring;
}

/*
 * A strong ETag names one representation: a ring closed and made again
 * under the same name counts its versions from 1 again, so its chunk's
 * ETag must still differ, or a cache that revalidates with
 * If-None-Match is told (304) that the old bytes are still current.
 */
Test(http, a_new_ring_of_the_same_name_has_a_new_etag, .init = start_http,
     .fini = stop)
{
	struct td_client *c = NULL;
	struct td_error e = {0};
	struct td_ring *ring;
	char *out, *tag, hdr[160];

	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	ring = ring_of_bytes(c, 'x');
	http("GET", "/zarr/etag_r/c/0", NULL, &out);
	cr_assert_eq(status_of(out), 200, "%s", out);
	cr_assert(!memcmp(body_of(out), "xxxx", 4));
	tag = etag_in(out);
	free(out);
	td_ring_close(ring);
	ring = ring_of_bytes(c, 'y');
	snprintf(hdr, sizeof(hdr), "If-None-Match: %s\r\n", tag);
	http("GET", "/zarr/etag_r/c/0", hdr, &out);
	cr_assert_eq(status_of(out), 200, "stale 304 for new bytes: %s", out);
	cr_assert(!memcmp(body_of(out), "yyyy", 4));
	free(out);
	free(tag);
	td_ring_close(ring);
	td_client_close(c);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

static int daemon_fds(void)
{
	char path[64];
	struct dirent *de;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)d.pid);
	dir = opendir(path);
	cr_assert(dir, "%s: %s", path, strerror(errno));
	while ((de = readdir(dir)))
		n += de->d_name[0] != '.';
	closedir(dir);
	return n;
}

/*
 * Clients that go away in the middle of repacked bodies (a ring's slot,
 * a strided tensor) and of a sendfile one: every lease goes back, the
 * daemon keeps no descriptor of theirs, and it serves on.
 */
Test(http, clients_that_leave_mid_body_leave_nothing_held,
     .init = start_http, .fini = stop)
{
	static const char *const paths[] = {"/zarr/gone_r/c/0",
	                                     "/zarr/gone_s/c/0/0",
	                                     "/zarr/gone_d/c/0"};
	uint64_t rshape[] = {4u << 20}, rsizes[] = {4u << 20};
	struct td_ring_desc rd = {.dtype = TD_TENSOR_U8, .ndim = 1,
	                          .shape = rshape, .plane_count = 1,
	                          .plane_sizes = rsizes};
	uint64_t shape[] = {1024, 4000};
	int64_t st[] = {4096, 1};
	struct td_plane pl = {0, 0, 0, 1024 * 4096};
	struct td_publish p = {.name = "gone/s", .dtype = TD_TENSOR_U8,
	                       .ndim = 2, .shape = shape, .strides = st,
	                       .plane_count = 1, .planes = &pl};
	struct td_client *c = NULL;
	struct td_error e = {0};
	struct td_ring *ring;
	struct td_slot slot;
	char *m, *out;
	size_t len;
	int fds0;

	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	cr_assert_eq(td_ring_create(c, "gone/r", &rd, &ring, &e), 0, "%s",
	             e.reason);
	cr_assert_eq(td_ring_acquire(ring, -1, &slot), 0);
	memset(slot.planes[0], 'r', 4u << 20);
	cr_assert_eq(td_ring_publish(ring, NULL), 0);
	publish_buf(c, &p, 1024 * 4096, pat13);
	put_filled("gone/d", 'D', 8u << 20);
	fds0 = daemon_fds();
	for (int round = 0; round < 3; round++)
		for (size_t i = 0; i < 3; i++) {
			char req[256], head[8192];
			int fd = connect_tcp();

			snprintf(req, sizeof(req),
			         "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", paths[i]);
			cr_assert(send(fd, req, strlen(req), 0) > 0);
			cr_assert_eq(recv(fd, head, sizeof(head), MSG_WAITALL),
			             (ssize_t)sizeof(head));
			/* a reset, not an orderly close */
			setsockopt(fd, SOL_SOCKET, SO_LINGER,
			           &(struct linger){1, 0},
			           sizeof(struct linger));
			close(fd);
		}
	/* the daemon notices each on its next write; /metrics comes after */
	for (int tries = 0;; tries++) {
		m = get_ok("/metrics", &len);
		/* (the daemon closes /metrics' own connection, and
		 * tensorctl's before fds0, a moment after they went: at
		 * most fds0, nine connections' worth fewer than a leak) */
		if (metric_value(m, "tensord_http_leases ") == 0 &&
		    daemon_fds() <= fds0)
			break;
		cr_assert(tries < 2000, "held: %d fds, more than %d: %s",
		          daemon_fds(), fds0, m);
		free(m);
		usleep(5000);
	}
	free(m);
	/* every slot can be written again: no lease is left on any */
	for (int v = 0; v < 8; v++) {
		cr_assert_eq(td_ring_acquire(ring, 0, &slot), 0, "version %d", v);
		memset(slot.planes[0], 'a' + v, 4u << 20);
		cr_assert_eq(td_ring_publish(ring, NULL), 0);
	}
	out = get_ok("/zarr/gone_r/c/0", &len);
	cr_assert_eq(len, 4u << 20);
	cr_assert_eq(out[0], 'h');
	free(out);
	td_ring_close(ring);
	td_client_close(c);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * Range and If-None-Match as RFC 9110 writes them: a range's numbers are
 * digits only (a sign, a space or a second '-' is not a range, never a
 * 206 of bytes nobody asked for), its unit is case-insensitive; and
 * If-None-Match compares weakly, takes a list and "*".
 */
Test(http, ranges_and_if_none_match_per_rfc_9110, .init = start_http,
     .fini = stop)
{
	static const char *const bad[] = {"bytes=0--1", "bytes=--5",
	                                  "bytes=+5-9", "bytes=5-+9",
	                                  "bytes=- 5",  "bytes=0x1-2"};
	char *resp, *tag, hdr[256];

	put_filled("rfc", 'R', 100);
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		snprintf(hdr, sizeof(hdr), "Range: %s\r\n", bad[i]);
		http("GET", "/zarr/rfc/c/0", hdr, &resp);
		cr_assert_eq(status_of(resp), 416, "%s: %s", bad[i], resp);
		free(resp);
	}
	http("GET", "/zarr/rfc/c/0", "Range: BYTES=2-4\r\n", &resp);
	cr_assert_eq(status_of(resp), 206, "%s", resp);
	cr_assert(strstr(resp, "Content-Range: bytes 2-4/100\r\n"), "%s", resp);
	free(resp);
	/* a unit other than bytes is ignored (RFC 9110 14.2: MUST): the
	 * whole body, 200; a unit that is no token is a bad range */
	http("GET", "/zarr/rfc/c/0", "Range: items=0-1\r\n", &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	cr_assert(strstr(resp, "Content-Length: 100\r\n") &&
	                  !strstr(resp, "Content-Range"),
	          "%s", resp);
	free(resp);
	http("GET", "/zarr/rfc/c/0", "Range: bytes 0-1\r\n", &resp);
	cr_assert_eq(status_of(resp), 416, "%s", resp);
	free(resp);
	http("GET", "/zarr/rfc/c/0", NULL, &resp);
	tag = etag_in(resp);
	free(resp);
	{
		const char *fmt[] = {"If-None-Match: *\r\n",
		                     "If-None-Match: W/%s\r\n",
		                     "If-None-Match: \"a\", %s\r\n",
		                     "If-None-Match: \"a\",W/%s , \"b\"\r\n"};

		for (size_t i = 0; i < sizeof(fmt) / sizeof(*fmt); i++) {
			snprintf(hdr, sizeof(hdr), fmt[i], tag);
			http("GET", "/zarr/rfc/c/0", hdr, &resp);
			cr_assert_eq(status_of(resp), 304, "%s: %s", hdr, resp);
			free(resp);
		}
	}
	http("GET", "/zarr/rfc/c/0", "If-None-Match: \"a\", W/\"b\"\r\n",
	     &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	free(resp);
	free(tag);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * If-Range and If-Match (RFC 9110 13.1.5, 13.1.1): a reader resuming a
 * chunk with If-Range naming the version it has gets the rest of that
 * version, or, once another version is current, the whole new body (a
 * 206 of the new bytes would be spliced onto the old: a tensor nobody
 * published); one that reads a chunk in ranges under If-Match gets 412
 * rather than a range of another version. A Range value may end in
 * optional whitespace (5.6.3).
 */
Test(http, if_range_and_if_match_name_one_version, .init = start_http,
     .fini = stop)
{
	static const char *const ws[] = {"bytes=2-4 ", "bytes=2-4\t",
	                                 "bytes= 2-4"};
	char *resp, *tag, hdr[256];

	put_filled("cond", 'A', 100);
	http("GET", "/zarr/cond/c/0", NULL, &resp);
	tag = etag_in(resp);
	free(resp);
	for (size_t i = 0; i < sizeof(ws) / sizeof(*ws); i++) {
		snprintf(hdr, sizeof(hdr), "Range: %s\r\n", ws[i]);
		http("GET", "/zarr/cond/c/0", hdr, &resp);
		cr_assert_eq(status_of(resp), 206, "%s: %s", ws[i], resp);
		cr_assert(strstr(resp, "Content-Range: bytes 2-4/100\r\n"),
		          "%s", resp);
		free(resp);
	}
	snprintf(hdr, sizeof(hdr), "If-Range: %s\r\nRange: bytes=90-\r\n",
	         tag);
	http("GET", "/zarr/cond/c/0", hdr, &resp);
	cr_assert_eq(status_of(resp), 206, "%s", resp);
	free(resp);
	/* two Range lines are two ranges: not the first alone (they were
	 * a 416: http::several_ranges_are_multipart_byteranges) */
	http("GET", "/zarr/cond/c/0", "Range: bytes=0-1\r\nRange: bytes=5-6\r\n",
	     &resp);
	cr_assert_eq(status_of(resp), 206, "%s", resp);
	cr_assert(strstr(resp, "multipart/byteranges; boundary="), "%s", resp);
	free(resp);
	snprintf(hdr, sizeof(hdr), "If-Match: \"x\", %s\r\n", tag);
	http("GET", "/zarr/cond/c/0", hdr, &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	free(resp);
	put_filled("cond", 'B', 100);
	snprintf(hdr, sizeof(hdr), "If-Range: %s\r\nRange: bytes=90-\r\n",
	         tag);
	http("GET", "/zarr/cond/c/0", hdr, &resp);
	cr_assert_eq(status_of(resp), 200, "a slice of another version: %s",
	             resp);
	cr_assert_eq(strlen(body_of(resp)), 100, "%s", resp);
	cr_assert_eq(body_of(resp)[0], 'B', "%s", resp);
	free(resp);
	/* a weak tag, or a date, never lets a range stand */
	http("GET", "/zarr/cond/c/0",
	     "If-Range: Sat, 05 Dec 2026 00:00:00 GMT\r\n"
	     "Range: bytes=0-0\r\n", &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	free(resp);
	snprintf(hdr, sizeof(hdr), "If-Match: %s\r\nRange: bytes=90-\r\n",
	         tag);
	http("GET", "/zarr/cond/c/0", hdr, &resp);
	cr_assert_eq(status_of(resp), 412, "a range of another version: %s",
	             resp);
	free(resp);
	free(tag);
	http("GET", "/zarr/cond/c/0", NULL, &resp);
	tag = etag_in(resp);
	free(resp);
	snprintf(hdr, sizeof(hdr), "If-Match: W/%s\r\n", tag);
	http("GET", "/zarr/cond/c/0", hdr, &resp);
	cr_assert_eq(status_of(resp), 412, "weak If-Match: %s", resp);
	free(resp);
	http("GET", "/zarr/cond/c/0", "If-Match: *\r\n", &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	free(resp);
	/* a metadata key's tag is its own: another's neither matches nor
	 * lets a range stand */
	http("GET", "/zarr/zarr.json", "If-Match: \"x\"\r\n", &resp);
	cr_assert_eq(status_of(resp), 412, "%s", resp);
	free(resp);
	http("GET", "/zarr/zarr.json",
	     "If-Range: \"x\"\r\nRange: bytes=0-0\r\n", &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	free(resp);
	free(tag);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * A field line folded onto the next (obs-fold, RFC 9112 5.2) never hides
 * a Range or a condition: libmicrohttpd 0.9.75 appends the folded line to
 * the field's name ("Range3" for "Range: bytes=0-\r\n 3"), so the store
 * saw no Range and sent the whole body as a 200 (zarr.md 10: Range is
 * never ignored). Such a request is a 400 now; a continuation of only
 * whitespace changes nothing and is served.
 */
Test(http, a_folded_header_line_is_a_400_never_the_whole_body,
     .init = start_http, .fini = stop)
{
	static const char *const folded[] = {
	        "Range: bytes=0-3\r\n ,5-6\r\n",
	        "Range:\r\n bytes=0-3\r\n",
	        "Range: bytes=10-\r\n 20\r\n",
	        "Range: bytes=10-\r\n\t20\r\n",
	        "range: bytes=0-3\r\n  \t x\r\n",
	        "If-None-Match: \"a\",\r\n %s\r\n",
	        "If-None-Match:\r\n *\r\n",
	        "If-Match: \"a\"\r\n b\r\n",
	        "If-Range: %s\r\n x\r\nRange: bytes=0-3\r\n",
	        "Origin: http://a.example\r\n :8080\r\n",
	        "User-Agent: t\r\n Range: bytes=0-3\r\n",
	};
	char *resp, *tag, req[512], hdr[256];

	put_filled("fold", 'F', 100);
	http("GET", "/zarr/fold/c/0", NULL, &resp);
	tag = etag_in(resp);
	free(resp);
	for (size_t i = 0; i < sizeof(folded) / sizeof(*folded); i++) {
		snprintf(hdr, sizeof(hdr), folded[i], tag);
		http("GET", "/zarr/fold/c/0", hdr, &resp);
		cr_assert_eq(status_of(resp), 400, "%s: %s", hdr, resp);
		cr_assert(strstr(body_of(resp), "obs-fold"), "%s", resp);
		free(resp);
	}
	/* a fold of the first field line (whitespace after the request
	 * line, RFC 9112 2.2), and HEAD alike */
	exchange(connect_tcp(),
	         "GET /zarr/fold/c/0 HTTP/1.0\r\n Range: bytes=0-3\r\n\r\n",
	         &resp);
	cr_assert(strstr(resp, " 400 "), "%.200s", resp);
	free(resp);
	http("HEAD", "/zarr/fold/c/0", "Range: bytes=0-\r\n 3\r\n", &resp);
	cr_assert_eq(status_of(resp), 400, "%s", resp);
	free(resp);
	/* only whitespace on the folded line: the same Range, served */
	http("GET", "/zarr/fold/c/0", "Range: bytes=2-4\r\n \t\r\n", &resp);
	cr_assert_eq(status_of(resp), 206, "%s", resp);
	cr_assert(strstr(resp, "Content-Range: bytes 2-4/100\r\n"), "%s", resp);
	free(resp);
	/* the connection a 400 answers is closed, the store serves on */
	snprintf(req, sizeof(req),
	         "GET /zarr/fold/c/0 HTTP/1.1\r\nHost: t\r\n"
	         "Range: bytes=0-\r\n 3\r\n\r\n"
	         "GET /zarr/fold/c/0 HTTP/1.1\r\nHost: t\r\n\r\n");
	exchange(connect_tcp(), req, &resp);
	cr_assert_eq(status_of(resp), 400, "%s", resp);
	cr_assert(!strstr(resp, " 200 "), "%s", resp);
	free(resp);
	http("GET", "/zarr/fold/c/0", "Range: bytes=0-3\r\n", &resp);
	cr_assert_eq(status_of(resp), 206, "%s", resp);
	free(resp);
	free(tag);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* A u8 tensor of len bytes, no two neighbours equal (byte i is
 * (31 i + 7) mod 256), into *whole (malloc'ed) as a GET reads it. */
static uint8_t *put_ramp(const char *name, size_t len)
{
	uint8_t *p = malloc(len);
	char path[160];

	cr_assert(p);
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(31 * i + 7);
	snprintf(path, sizeof(path), "%s/ramp.bin", zt_dir);
	zt_put_file(path, p, len);
	zt_ok("put %s --dtype u8 --shape %zu %s", name, len, path);
	return p;
}

/* GET path with hdrs: must be a 206 of the one range [a, a + n). */
static void one_part_is(const char *path, const char *hdrs,
                        const uint8_t *whole, uint64_t len, uint64_t a,
                        uint64_t n)
{
	char *resp, want[96], cl[64];
	size_t rlen = http("GET", path, hdrs, &resp);

	snprintf(want, sizeof(want),
	         "\r\nContent-Range: bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64
	         "\r\n",
	         a, a + n - 1, len);
	snprintf(cl, sizeof(cl), "\r\nContent-Length: %" PRIu64 "\r\n", n);
	cr_assert_eq(status_of(resp), 206, "%s: %s", hdrs, resp);
	cr_assert(strstr(resp, want) && strstr(resp, cl), "%s: %s", hdrs,
	          resp);
	cr_assert(!strstr(resp, "multipart"), "%s", resp);
	cr_assert_eq(rlen - (size_t)(body_of(resp) - resp), n);
	cr_assert(!memcmp(body_of(resp), whole + a, n), "%s", hdrs);
	free(resp);
}

/*
 * Several ranges (RFC 9110 14.2, 14.6): a 206 of multipart/byteranges,
 * each part with its type and Content-Range and exactly its bytes, in the
 * request's order, the unsatisfiable ones dropped and the overlapping or
 * touching ones coalesced (a single part left is a plain 206); a 416 only
 * when none is satisfiable; past 32 ranges the nearest merged until 32.
 * Two Range lines are one list. HEAD, If-Range, If-None-Match, If-Match
 * and metadata keys as for one range, and /metrics counts the 206. They
 * were all a 416, which says that no range overlaps the body.
 */
Test(http, several_ranges_are_multipart_byteranges, .init = start_http,
     .fini = stop)
{
	static const char path[] = "/zarr/mr/c/0",
	                  oct[] = "application/octet-stream";
	static const struct {
		const char *hdrs;
		unsigned count;
		uint64_t a[3], n[3];
	} multi[] = {
	        {"Range: bytes=0-9,20-29\r\n", 2, {0, 20}, {10, 10}},
	        {"Range: bytes=0-9\r\nRange: bytes=20-29\r\n", 2, {0, 20},
	         {10, 10}},
	        /* the request's order, not the body's */
	        {"Range: bytes=-3, 1-1\r\n", 2, {997, 1}, {3, 1}},
	        /* overlapping and touching: one part, where its first
	         * range was asked */
	        {"Range: bytes=500-509,0-9,5-14,15-19\r\n", 2, {500, 0},
	         {10, 20}},
	        {"Range: bytes=900-,-50, 0-0\r\n", 2, {900, 0}, {100, 1}},
	        /* the unsatisfiable dropped, an empty element skipped,
	         * an end past the body clamped */
	        {"Range: bytes=10-19, 2000-, 30-39\r\n", 2, {10, 30}, {10, 10}},
	        {"Range: bytes=-0,0-3,,5-99999999999999999999999\r\n", 2,
	         {0, 5}, {4, 995}},
	        {"Range: bytes=1-2,4-5,7-8\r\n", 3, {1, 4, 7}, {2, 2, 2}},
	};
	static const char *const none[] = {
	        "Range: bytes=1000-,2000-3000,-0\r\n",
	        "Range: bytes=1000-\r\nRange: bytes=-0\r\n",
	        /* a malformed element spoils the set, as alone */
	        "Range: bytes=0-1,x\r\n", "Range: bytes=0-1,5-2\r\n",
	        "Range: bytes=0-1\r\nRange: bytes 5-6\r\n",
	        /* another unit after a bytes line is an element of its
	         * list, a malformed one: never the whole body (zarr.md 10) */
	        "Range: bytes=0-1\r\nRange: items=0-1\r\n",
	        "Range: bytes=0-1,3-4\r\nRange: items=0-1\r\n"};
	uint64_t a[33], n[33];
	char *resp, *tag, *m, hdr[1024], *b1, *b2;
	unsigned long long before;
	uint8_t *whole = put_ramp("mr", 1000), *json;
	size_t len, k;

	for (size_t i = 0; i < sizeof(multi) / sizeof(*multi); i++)
		parts_are("GET", path, multi[i].hdrs, whole, 1000, oct,
		          multi[i].a, multi[i].n, multi[i].count);
	/* HEAD: the same headers and length, no body */
	parts_are("HEAD", path, multi[0].hdrs, whole, 1000, oct, multi[0].a,
	          multi[0].n, multi[0].count);
	/* one satisfiable range left, or one after coalescing: a plain
	 * 206 (RFC 9110 14.6: never a multipart of one range asked) */
	one_part_is(path, "Range: bytes=0-9,2000-\r\n", whole, 1000, 0, 10);
	one_part_is(path, "Range: bytes=0-9,10-19\r\n", whole, 1000, 0, 20);
	one_part_is(path, "Range: bytes=90-,-5\r\n", whole, 1000, 90, 910);
	one_part_is(path, "Range: bytes=3-5\r\nRange: bytes=4-8\r\n", whole,
	            1000, 3, 6);
	for (size_t i = 0; i < sizeof(none) / sizeof(*none); i++) {
		http("GET", path, none[i], &resp);
		cr_assert_eq(status_of(resp), 416, "%s: %s", none[i], resp);
		cr_assert(strstr(resp, "Content-Range: bytes */1000\r\n"),
		          "%s", resp);
		free(resp);
	}
	/* 32 ranges are served; of 33 (on one line or two) the two nearest
	 * are one: never ignored (zarr.md 10), never more than 32 parts.
	 * Range i is [30 i, 30 i + 1 + i % 3): the least gap (27 bytes)
	 * follows each range i % 3 == 2, the first of them range 2's, so
	 * ranges 2 and 3 become [60, 91). (They were one range over all,
	 * 0-962, before.) */
	k = (size_t)snprintf(hdr, sizeof(hdr), "Range: bytes=");
	for (unsigned i = 0; i < 33; i++) {
		a[i] = 30 * i;
		n[i] = 1 + i % 3;
		k += (size_t)snprintf(hdr + k, sizeof(hdr) - k,
		                      "%s%" PRIu64 "-%" PRIu64,
		                      i == 20 ? "\r\nRange: bytes=" : i ? "," : "",
		                      a[i], a[i] + n[i] - 1);
		if (i == 31) {
			snprintf(hdr + k, sizeof(hdr) - k, "\r\n");
			parts_are("GET", path, hdr, whole, 1000, oct, a, n, 32);
		}
	}
	snprintf(hdr + k, sizeof(hdr) - k, "\r\n");
	n[2] = a[3] + n[3] - a[2];
	memmove(a + 3, a + 4, 29 * sizeof(*a));
	memmove(n + 3, n + 4, 29 * sizeof(*n));
	parts_are("GET", path, hdr, whole, 1000, oct, a, n, 32);
	/* each response has a boundary of its own */
	http("GET", path, multi[0].hdrs, &resp);
	b1 = header_of(resp, "Content-Type: ");
	free(resp);
	http("GET", path, multi[0].hdrs, &resp);
	b2 = header_of(resp, "Content-Type: ");
	free(resp);
	cr_assert(b1 && b2 && strcmp(b1, b2), "%s and %s", b1, b2);
	free(b1);
	free(b2);
	/* the conditions as for one range */
	http("GET", path, NULL, &resp);
	tag = etag_in(resp);
	free(resp);
	snprintf(hdr, sizeof(hdr), "If-Range: %s\r\n%s", tag, multi[0].hdrs);
	parts_are("GET", path, hdr, whole, 1000, oct, multi[0].a, multi[0].n,
	          2);
	snprintf(hdr, sizeof(hdr), "If-Range: \"x\"\r\n%s", multi[0].hdrs);
	len = http("GET", path, hdr, &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	cr_assert_eq(len - (size_t)(body_of(resp) - resp), 1000);
	free(resp);
	snprintf(hdr, sizeof(hdr), "If-None-Match: %s\r\n%s", tag,
	         multi[0].hdrs);
	http("GET", path, hdr, &resp);
	cr_assert_eq(status_of(resp), 304, "%s", resp);
	free(resp);
	snprintf(hdr, sizeof(hdr), "If-Match: \"x\"\r\n%s", multi[0].hdrs);
	http("GET", path, hdr, &resp);
	cr_assert_eq(status_of(resp), 412, "%s", resp);
	free(resp);
	free(tag);
	/* a metadata key's parts are of its text, typed as it is */
	json = (uint8_t *)get_ok("/zarr/mr/zarr.json", &len);
	{
		const uint64_t ja[] = {0, len - 1}, jn[] = {1, 1};

		parts_are("GET", "/zarr/mr/zarr.json",
		          "Range: bytes=0-0,-1\r\n", json, len,
		          "application/json", ja, jn, 2);
	}
	free(json);
	/* /metrics counts a multipart reply as the 206 it is */
	m = get_ok("/metrics", &len);
	before = metric_value(m, "tensord_http_responses_total{code=\"206\"} ");
	free(m);
	parts_are("GET", path, multi[0].hdrs, whole, 1000, oct, multi[0].a,
	          multi[0].n, 2);
	m = get_ok("/metrics", &len);
	cr_assert_eq(metric_value(m,
	                          "tensord_http_responses_total{code=\"206\"} "),
	             before + 1, "%s", m);
	/* and every part's lease ended with its response */
	cr_assert_eq(metric_value(m, "tensord_leases "), 0, "%s", m);
	free(m);
	free(whole);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * Metadata keys carry a strong ETag of their text, so a reader polling
 * zarr.json for a new shape or a new array gets 304 until it changes;
 * If-Match, If-Range and Range honour it as they do a chunk's. (They had
 * none: every poll got the whole text again.)
 */
Test(http, metadata_keys_have_an_etag_of_their_text, .init = start_http,
     .fini = stop)
{
	static const char *const keys[] = {"/zarr/zarr.json",
	                                   "/zarr/m/zarr.json",
	                                   "/zarr-v2/m/.zarray",
	                                   "/zarr-v2/.zgroup"};
	char *resp, *tag, *again, hdr[256];

	put_filled("m", 'A', 100);
	for (size_t i = 0; i < sizeof(keys) / sizeof(*keys); i++) {
		http("GET", keys[i], NULL, &resp);
		cr_assert_eq(status_of(resp), 200, "%s: %s", keys[i], resp);
		tag = etag_in(resp);
		cr_assert(tag && !strncmp(tag, "\"z.", 3), "%s: %s", keys[i],
		          resp);
		free(resp);
		http("GET", keys[i], NULL, &resp);
		again = etag_in(resp);
		cr_assert_str_eq(again, tag, "%s: the same text, the same tag",
		                 keys[i]);
		free(again);
		free(resp);
		snprintf(hdr, sizeof(hdr), "If-None-Match: W/%s\r\n", tag);
		http("GET", keys[i], hdr, &resp);
		cr_assert_eq(status_of(resp), 304, "%s: %s", keys[i], resp);
		cr_assert_str_eq(body_of(resp), "", "%s", resp);
		free(resp);
		snprintf(hdr, sizeof(hdr), "If-Match: %s\r\n", tag);
		http("GET", keys[i], hdr, &resp);
		cr_assert_eq(status_of(resp), 200, "%s: %s", keys[i], resp);
		free(resp);
		snprintf(hdr, sizeof(hdr), "If-Range: %s\r\nRange: bytes=0-0\r\n",
		         tag);
		http("GET", keys[i], hdr, &resp);
		cr_assert_eq(status_of(resp), 206, "%s: %s", keys[i], resp);
		cr_assert_str_eq(body_of(resp), "{", "%s", resp);
		free(resp);
		free(tag);
	}
	/* the array's shape changes: its zarr.json, and the group's, get
	 * a new tag; a reader holding the old one gets the new text */
	http("GET", "/zarr/m/zarr.json", NULL, &resp);
	tag = etag_in(resp);
	free(resp);
	put_filled("m", 'A', 50);
	snprintf(hdr, sizeof(hdr), "If-None-Match: %s\r\n", tag);
	http("GET", "/zarr/m/zarr.json", hdr, &resp);
	cr_assert_eq(status_of(resp), 200, "a new shape: %s", resp);
	cr_assert(strstr(body_of(resp), "50"), "%s", resp);
	again = etag_in(resp);
	cr_assert_str_neq(again, tag);
	free(again);
	free(resp);
	snprintf(hdr, sizeof(hdr), "If-Match: %s\r\n", tag);
	http("GET", "/zarr/m/zarr.json", hdr, &resp);
	cr_assert_eq(status_of(resp), 412, "%s", resp);
	free(resp);
	free(tag);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * A request with a body (a GET that carries one, as some clients send,
 * or another method): the body is not read, the request is answered,
 * and nothing stays held.
 */
Test(http, requests_with_a_body_are_answered, .init = start_http,
     .fini = stop)
{
	char *resp, *m;
	size_t len;

	put_filled("body", 'Y', 16);
	http("GET", "/zarr/body/c/0", "Content-Length: 5\r\n\r\nhello", &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	cr_assert_str_eq(body_of(resp), "YYYYYYYYYYYYYYYY");
	free(resp);
	http("GET", "/zarr/zarr.json", "Content-Length: 3\r\n\r\nabc", &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	free(resp);
	http("POST", "/zarr/body/c/0", "Content-Length: 4\r\n\r\nabcd", &resp);
	cr_assert_eq(status_of(resp), 405, "%s", resp);
	free(resp);
	m = get_ok("/metrics", &len);
	cr_assert_eq(metric_value(m, "tensord_http_leases "), 0, "%s", m);
	free(m);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* The responses in resp: its status lines (no body here holds one). */
static unsigned responses_in(const char *resp)
{
	unsigned n = 0;

	for (const char *p = resp; (p = strstr(p, "HTTP/1.1 ")); p++)
		n++;
	return n;
}

/*
 * A request whose end is in doubt is answered (400, or 501 for a
 * transfer coding the store cannot read) and its connection closed,
 * before any body is read (RFC 9112 3.2, 6.1, 6.3). libmicrohttpd took
 * Transfer-Encoding over Content-Length, the first of two Content-Length
 * lines and a chunked HTTP/1.0 body, and served the bytes after them as
 * the next request on the connection: behind a proxy that framed the
 * request otherwise, a request of the client's own making answered into
 * the proxy's connection (request smuggling). Another coding hung the
 * connection until --http-timeout. A plain chunked or Content-Length
 * body is still read and the connection kept.
 */
Test(http, a_request_whose_end_is_in_doubt_is_refused_and_closed,
     .init = start_http, .fini = stop)
{
	static const struct {
		const char *req;
		int code;
	} bad[] = {
	        {"GET /zarr/zarr.json HTTP/1.1\r\nHost: t\r\n"
	         "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
	         "0\r\n\r\n",
	         400},
	        {"GET /zarr/zarr.json HTTP/1.1\r\nHost: t\r\n"
	         "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
	         400},
	        {"GET /zarr/zarr.json HTTP/1.0\r\nConnection: keep-alive\r\n"
	         "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	         400},
	        {"GET /zarr/zarr.json HTTP/1.1\r\nHost: t\r\nHost: u\r\n\r\n",
	         400},
	        {"GET /zarr/zarr.json HTTP/1.1\r\nHost: t\r\n"
	         "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	         501},
	        {"GET /zarr/zarr.json HTTP/1.1\r\nHost: t\r\n"
	         "Transfer-Encoding: chunked \r\n\r\n0\r\n\r\n",
	         501},
	};
	static const char *const good[] = {
	        "GET /zarr/zarr.json HTTP/1.1\r\nHost: t\r\n"
	        "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	        "GET /zarr/zarr.json HTTP/1.1\r\nHost: t\r\n"
	        "Content-Length: 5\r\n\r\nhello",
	};
	/* what a smuggled request would be: its own answer */
	const char *next = "GET /zarr/body/c/0 HTTP/1.1\r\nHost: t\r\n"
	                   "Connection: close\r\n\r\n";
	char req[512], *resp, *m;
	size_t len;

	put_filled("body", 'Y', 16);
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		snprintf(req, sizeof(req), "%s%s", bad[i].req, next);
		exchange(connect_tcp(), req, &resp);
		cr_assert_eq(responses_in(resp), 1, "%zu: %s", i, resp);
		cr_assert_eq(status_of(resp), bad[i].code, "%zu: %s", i, resp);
		cr_assert(strstr(resp, "Connection: close\r\n"), "%s", resp);
		cr_assert(!strstr(resp, "YYYY"), "%zu: %s", i, resp);
		free(resp);
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++) {
		snprintf(req, sizeof(req), "%s%s", good[i], next);
		exchange(connect_tcp(), req, &resp);
		cr_assert_eq(responses_in(resp), 2, "%zu: %s", i, resp);
		cr_assert_eq(status_of(resp), 200, "%zu: %s", i, resp);
		cr_assert(strstr(resp, "\r\n\r\nYYYYYYYYYYYYYYYY"), "%s", resp);
		free(resp);
	}
	m = get_ok("/metrics", &len);
	cr_assert_eq(metric_value(m, "tensord_http_leases "), 0, "%s", m);
	free(m);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * If-None-Match, If-Match and If-Range on several lines are one value,
 * the lines joined by commas (RFC 9110 5.3), as Range is: libmicrohttpd's
 * lookup gave the first line alone, so a second If-None-Match line
 * naming the chunk's tag got the whole body (not 304), a second If-Match
 * line naming it a 412, and two If-Range lines (no single tag) let the
 * range stand when the first named it.
 */
Test(http, conditions_on_several_lines_are_one_list, .init = start_http,
     .fini = stop)
{
	char *resp, *tag, hdr[512];

	put_filled("lines", 'L', 100);
	http("GET", "/zarr/lines/c/0", NULL, &resp);
	tag = etag_in(resp);
	free(resp);
	snprintf(hdr, sizeof(hdr),
	         "If-None-Match: \"a\"\r\nIf-None-Match: %s\r\n", tag);
	http("GET", "/zarr/lines/c/0", hdr, &resp);
	cr_assert_eq(status_of(resp), 304, "%s", resp);
	free(resp);
	snprintf(hdr, sizeof(hdr), "If-Match: \"a\"\r\nIf-Match: %s\r\n", tag);
	http("GET", "/zarr/lines/c/0", hdr, &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	free(resp);
	http("GET", "/zarr/lines/c/0", "If-Match: \"a\"\r\nIf-Match: \"b\"\r\n",
	     &resp);
	cr_assert_eq(status_of(resp), 412, "%s", resp);
	free(resp);
	snprintf(hdr, sizeof(hdr),
	         "If-Range: %s\r\nIf-Range: \"old\"\r\nRange: bytes=0-1\r\n",
	         tag);
	http("GET", "/zarr/lines/c/0", hdr, &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	cr_assert_eq(strlen(body_of(resp)), 100, "%s", resp);
	free(resp);
	/* one line of each still works as it did */
	snprintf(hdr, sizeof(hdr), "If-Range: %s\r\nRange: bytes=0-1\r\n", tag);
	http("GET", "/zarr/lines/c/0", hdr, &resp);
	cr_assert_eq(status_of(resp), 206, "%s", resp);
	free(resp);
	/* a metadata key's too */
	http("GET", "/zarr/zarr.json", NULL, &resp);
	free(tag);
	tag = etag_in(resp);
	free(resp);
	snprintf(hdr, sizeof(hdr),
	         "If-None-Match: \"a\"\r\nIf-None-Match: W/%s\r\n", tag);
	http("GET", "/zarr/zarr.json", hdr, &resp);
	cr_assert_eq(status_of(resp), 304, "%s", resp);
	free(resp);
	free(tag);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * An absolute-form request-target ("GET http://host/zarr/... HTTP/1.1",
 * RFC 9112 3.2.2: a server MUST accept it) names the path after its
 * authority; it was a 404 for every key.
 */
Test(http, an_absolute_form_target_is_served, .init = start_http,
     .fini = stop)
{
	char *resp;

	put_filled("abs", 'Q', 8);
	http("GET", "http://t/zarr/abs/c/0", NULL, &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	cr_assert_str_eq(body_of(resp), "QQQQQQQQ");
	free(resp);
	http("HEAD", "HTTP://t:80/zarr-v2/abs/.zarray", NULL, &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	free(resp);
	http("GET", "http://t/metrics", NULL, &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	free(resp);
	http("GET", "http://t", NULL, &resp);
	cr_assert_eq(status_of(resp), 404, "%s", resp);
	free(resp);
	http("GET", "http://t/zarr/nope/c/0", NULL, &resp);
	cr_assert_eq(status_of(resp), 404, "%s", resp);
	free(resp);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* ---- the group's consolidated metadata, from texts kept per version ---- */

/* name as dtype/shape (len bytes 0, 1, 2, ...) with metadata meta. */
static void put_shaped(const char *name, const char *dtype, const char *shape,
                       size_t len, const char *meta)
{
	char *p = malloc(len), path[128];

	for (size_t i = 0; i < len; i++)
		p[i] = (char)i;
	snprintf(path, sizeof(path), "%s/shaped.bin", zt_dir);
	zt_put_file(path, p, len);
	free(p);
	zt_ok("put '%s' --dtype %s --shape %s --meta '%s' %s", name, dtype,
	      shape, meta, path);
}

/* One member of a v2 .zmetadata: its key (unescaped) and its text. */
struct v2member {
	char *key, *text;
};

static int v2member_cmp(const void *x, const void *y)
{
	return strcmp(((const struct v2member *)x)->key,
	              ((const struct v2member *)y)->key);
}

/*
 * /zarr-v2/.zmetadata as json/zarr.c prints it, made from each key's own
 * response (every node's .zarray and .zattrs are built apart, per
 * request): the members sorted by key (tensor names hold nothing JSON
 * escapes).
 */
static char *v2_consolidated_of(const char *const *ns, size_t n)
{
	struct v2member *ms = calloc(2 * n + 2, sizeof(*ms));
	char *doc = strdup("{\"metadata\":{"), *t;
	size_t len;

	cr_assert(ms && doc);
	ms[0].key = strdup(".zattrs");
	ms[0].text = get_ok("/zarr-v2/.zattrs", &len);
	ms[1].key = strdup(".zgroup");
	ms[1].text = get_ok("/zarr-v2/.zgroup", &len);
	for (size_t i = 0; i < 2 * n; i++) {
		char url[320];

		cr_assert(asprintf(&ms[2 + i].key, "%s/%s", ns[i / 2],
		                   i % 2 ? ".zattrs" : ".zarray") > 0);
		snprintf(url, sizeof(url), "/zarr-v2/%s", ms[2 + i].key);
		ms[2 + i].text = get_ok(url, &len);
	}
	qsort(ms, 2 * n + 2, sizeof(*ms), v2member_cmp);
	for (size_t i = 0; i < 2 * n + 2; i++) {
		cr_assert(asprintf(&t, "%s%s\"%s\":%s", doc, i ? "," : "",
		                   ms[i].key, ms[i].text) > 0);
		free(doc);
		doc = t;
		free(ms[i].key);
		free(ms[i].text);
	}
	free(ms);
	cr_assert(asprintf(&t, "%s},\"zarr_consolidated_format\":1}", doc) > 0);
	free(doc);
	return t;
}

/* /zarr-v2/.zmetadata, asked twice (the second from the kept texts), is
 * what its nodes ns (all n of them) give on their own keys. */
static void v2_group_is_current(const char *const *ns, size_t n)
{
	char *want = v2_consolidated_of(ns, n), *got;
	size_t len;

	for (int k = 0; k < 2; k++) {
		got = get_ok("/zarr-v2/.zmetadata", &len);
		cr_assert_str_eq(got, want);
		free(got);
	}
	free(want);
}

/*
 * The group keys of both views, each asked twice: /zarr/zarr.json is
 * what `zarr export` of every name writes into dir, and .zmetadata as
 * above.
 */
static void group_keys_are_current(const char *dir, const char *const *ns,
                                   size_t n)
{
	char url[320], *want, *got;
	size_t len;

	zt_ok("zarr export %s/%s", zt_dir, dir);
	snprintf(url, sizeof(url), "%s/zarr.json", dir);
	want = zt_file(url);
	for (int k = 0; k < 2; k++) {
		got = get_ok("/zarr/zarr.json", &len);
		cr_assert_str_eq(got, want, "%s", dir);
		free(got);
	}
	free(want);
	v2_group_is_current(ns, n);
}

/*
 * A version's metadata texts are kept for the next request, but what
 * the group shows is always the current versions under their current
 * node names: a new version with another shape, type and metadata is
 * shown at once; a deleted name is gone; and when "cam/left" goes,
 * "cam_left" (same version) moves from node cam_left_1 to cam_left, in
 * its key and in its v2 _ARRAY_DIMENSIONS.
 */
Test(http, the_group_shows_current_versions_under_current_node_names,
     .init = start_http, .fini = stop)
{
	/* node names that sort apart from their v2 keys ("a-b/" < "a.b/" <
	 * "a/"), one named as the group's .zattrs, the other bytes a name
	 * may hold */
	static const char *const all[] = {"cam_left", "cam_left_1", "zz",
	                                  "a",        "a.b",        "a-b",
	                                  ".zattrs",  "p:q@r+s",    "A+B"};
	static const char *const after[] = {"cam_left", "a",       "a.b",
	                                    "a-b",      ".zattrs", "p:q@r+s",
	                                    "A+B",      "zz"};
	char *root;
	size_t len;

	put_shaped("cam/left", "u8", "4", 4, "{\"k\":1}");
	put_shaped("cam_left", "f32", "2,3", 24, "{\"units\":\"K\"}");
	put_shaped("zz", "i16", "3", 6, "free text");
	for (size_t i = 3; i < 9; i++)
		put_shaped(all[i], "u8", "2", 2, "{}");
	group_keys_are_current("g1", all, 9);
	put_shaped("cam_left", "i16", "5", 10, "{\"units\":\"mK\",\"v\":2}");
	group_keys_are_current("g2", all, 9);
	root = get_ok("/zarr/zarr.json", &len);
	cr_assert(strstr(root, "\"units\":\"mK\""), "%s", root);
	cr_assert_eq(strstr(root, "\"units\":\"K\""), NULL, "%s", root);
	free(root);
	zt_ok("rm cam/left");
	group_keys_are_current("g3", after, 8);
	root = get_ok("/zarr/zarr.json", &len);
	cr_assert_eq(strstr(root, "cam_left_1"), NULL, "%s", root);
	cr_assert_eq(strstr(root, "\"cam/left\""), NULL, "%s", root);
	free(root);
	zt_ok("rm zz");
	group_keys_are_current("g4", after, 7);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * xarray reads a tensor under the dimension names its metadata gives
 * (_ARRAY_DIMENSIONS), and a tensor without them under the store's.
 */
Test(http, xarray_takes_the_dimension_names_the_metadata_gives,
     .init = start_http, .fini = stop, .timeout = 120)
{
	char *out;
	int rc;

	put_shaped("named", "f32", "2,3", 24,
	           "{\"_ARRAY_DIMENSIONS\":[\"y\",\"x\"],\"units\":\"K\"}");
	put_shaped("plain", "u8", "4", 4, "{}");
	rc = zt_interp(&out, "/usr/bin/python3 -c 'import sys, xarray as xr; "
	                     "ds = xr.open_zarr(sys.argv[1], consolidated=True); "
	                     "print(ds[\"named\"].dims, ds[\"plain\"].dims, "
	                     "ds[\"named\"].attrs[\"units\"])' '%s/zarr-v2'",
	               base);
	cr_assert_eq(rc, 0, "%s", out);
	cr_assert(strstr(out, "('y', 'x') ('plain/0',) K"), "%s", out);
	free(out);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/*
 * Each version's array metadata is printed once for the group keys
 * (tensord_http_meta_builds_total), however often the group is asked,
 * kept while the version lives (tensord_http_meta_cached) and freed with
 * it: publishing again and again while the group is read keeps one set
 * of texts per name.
 */
Test(http, a_versions_group_metadata_is_printed_once_and_freed_with_it,
     .init = start_http, .fini = stop)
{
	char *m;
	size_t len;

	put_filled("p/a", 'a', 4);
	put_filled("p/b", 'b', 4);
	put_filled("p/c", 'c', 4);
	m = get_ok("/metrics", &len);
	cr_assert_eq(metric_value(m, "tensord_http_meta_builds_total "), 0);
	cr_assert_eq(metric_value(m, "tensord_http_meta_cached "), 0);
	free(m);
	for (int k = 0; k < 3; k++) {
		free(get_ok("/zarr/zarr.json", &len));
		free(get_ok("/zarr/p_a/zarr.json", &len)); /* not kept */
	}
	m = get_ok("/metrics", &len);
	cr_assert_eq(metric_value(m, "tensord_http_meta_builds_total "), 3,
	             "%s", m);
	cr_assert_eq(metric_value(m, "tensord_http_meta_cached "), 3);
	free(m);
	/* the v2 texts are printed once too, on their first need */
	for (int k = 0; k < 3; k++) {
		free(get_ok("/zarr-v2/.zmetadata", &len));
		free(get_ok("/zarr-v2/.zattrs", &len));
	}
	m = get_ok("/metrics", &len);
	cr_assert_eq(metric_value(m, "tensord_http_meta_builds_total "), 6,
	             "%s", m);
	free(m);
	for (unsigned i = 1; i <= 20; i++) {
		put_filled("p/b", 'B', 4);
		free(get_ok("/zarr/zarr.json", &len));
		free(get_ok("/zarr/zarr.json", &len));
		m = get_ok("/metrics", &len);
		cr_assert_eq(metric_value(m, "tensord_http_meta_builds_total "),
		             6 + i, "%s", m);
		cr_assert_eq(metric_value(m, "tensord_http_meta_cached "), 3,
		             "replaced versions take their texts along: %s",
		             m);
		free(m);
	}
	zt_ok("rm p/c");
	m = get_ok("/metrics", &len);
	cr_assert_eq(metric_value(m, "tensord_http_meta_cached "), 2, "%s", m);
	free(m);
	free(get_ok("/zarr/zarr.json", &len));
	m = get_ok("/metrics", &len);
	cr_assert_eq(metric_value(m, "tensord_http_meta_builds_total "), 26,
	             "%s", m);
	free(m);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* GET path on fd, its answer read only when read (to its end): 200 and
 * the body, malloc'ed. */
static char *body_on(int fd, const char *path, bool read)
{
	char req[512], *resp, *body;

	snprintf(req, sizeof(req),
	         "GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
	         path);
	if (!read) {
		cr_assert_eq(send(fd, req, strlen(req), MSG_NOSIGNAL),
		             (ssize_t)strlen(req));
		return NULL;
	}
	exchange(fd, "", &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	body = strdup(body_of(resp));
	free(resp);
	return body;
}

/*
 * Where many versions lack their texts (a first request after many
 * publishes), the group request waits while the loop prints them a
 * batch per turn (tensord_http_meta_waits_total), and is then answered
 * with the same bytes as ever: the root as export writes it, for two
 * readers asking at once, and .zmetadata as the nodes' own keys give it.
 */
Test(http, a_group_request_waits_while_many_texts_are_printed,
     .init = start_http, .fini = stop)
{
	/* more than a batch: 256 versions looked at, 256 printed */
	enum { N = 400 };
	static char names[N][16];
	static const char *ns[N];
	struct td_client *c;
	struct td_error e = {0};
	char *want, *m, *got[2];
	unsigned long long waits;
	int fd[2];
	size_t len;

	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	for (unsigned i = 0; i < N; i++) {
		uint64_t shape[] = {2};
		uint16_t v[2] = {(uint16_t)i, (uint16_t)~i};
		char meta[32];
		struct td_publish p = {.name = names[i], .dtype = TD_TENSOR_U16,
		                       .ndim = 1, .shape = shape, .meta = meta};

		snprintf(names[i], sizeof(names[i]), "w%03u", i);
		ns[i] = names[i];
		p.meta_len = (size_t)snprintf(meta, sizeof(meta), "{\"i\":%u}", i);
		cr_assert_eq(td_client_put(c, &p, v, sizeof(v), NULL, &e), 0,
		             "%s", e.reason);
	}
	td_client_close(c);
	zt_ok("zarr export %s/w", zt_dir);
	want = zt_file("w/zarr.json");
	/* two readers at once: both asked before either is read */
	fd[0] = connect_tcp();
	fd[1] = connect_tcp();
	body_on(fd[0], "/zarr/zarr.json", false);
	body_on(fd[1], "/zarr/zarr.json", false);
	got[1] = body_on(fd[1], "/zarr/zarr.json", true);
	got[0] = body_on(fd[0], "/zarr/zarr.json", true);
	for (int k = 0; k < 2; k++) {
		cr_assert_str_eq(got[k], want);
		free(got[k]);
	}
	free(want);
	m = get_ok("/metrics", &len);
	waits = metric_value(m, "tensord_http_meta_waits_total ");
	/* the second may come after the first's texts are all there */
	cr_assert(waits == 1 || waits == 2, "%s", m);
	cr_assert_eq(metric_value(m, "tensord_http_meta_builds_total "), N);
	free(m);
	/* the v2 texts: printed (waiting) for the first v2 group key */
	v2_group_is_current(ns, N);
	m = get_ok("/metrics", &len);
	cr_assert_eq(metric_value(m, "tensord_http_meta_builds_total "), 2 * N,
	             "%s", m);
	cr_assert_eq(metric_value(m, "tensord_http_meta_waits_total "),
	             waits + 1, "%s", m);
	free(m);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* The texts versions keep (tensord_http_meta_bytes), within budget, and
 * what versions keep texts (tensord_http_meta_cached) each keeping at
 * least `one` bytes (a node's zarr.json), within it too. */
static void kept_texts_within(unsigned long long budget, size_t one)
{
	size_t len;
	char *m = get_ok("/metrics", &len);
	unsigned long long cached = metric_value(m, "tensord_http_meta_cached ");

	cr_assert_leq(metric_value(m, "tensord_http_meta_bytes "), budget,
	              "%s", m);
	cr_assert_gt(cached, 0, "what fits is still kept: %s", m);
	cr_assert_leq(cached * one, budget, "%llu versions keep texts of "
	              "%zu bytes at least, past %llu", cached, one, budget);
	free(m);
}

/*
 * The texts versions keep for the group keys were bounded by nothing:
 * a metadata byte 0x01 is six text bytes ("\u0001") in each of the v3
 * and v2 views, up to about 12 times --max-bytes that no uid is charged
 * for (1 000 tensors of 16 000 such bytes: about 190 MB of texts). Versions now keep at most a quarter of --max-bytes
 * (tensord_http_meta_bytes); a group request prints the texts of the
 * others for itself, and the group keys are the same bytes as ever: for
 * a first request that waits (more than a batch lack texts, and the
 * budget is reached while the loop prints them), and for v2.
 */
Test(http, the_group_texts_versions_keep_are_bounded, .fini = stop)
{
	enum { N = 400 };
	/* a budget of 2 MiB: past 256 versions' v3 texts (about 6.4 KB
	 * each), short of 400 */
	static const char *const more[] = {"--http-prefix", "", "--max-bytes",
	                                   "8M", NULL};
	const unsigned long long budget = (8ull << 20) / 4;
	static char names[N][16];
	static const char *ns[N];
	struct td_client *c;
	char *want, *got, *m;
	size_t len, one;

	c = http_client(more);
	put_escaped_meta_len(c, "m/", N, 1000);
	td_client_close(c);
	for (unsigned i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "m_%u", i);
		ns[i] = names[i];
	}
	free(get_ok("/zarr/m_0/zarr.json", &one));
	cr_assert(one * 256 < budget && one * N > budget, "%zu", one);
	zt_ok("zarr export %s/w", zt_dir);
	want = zt_file("w/zarr.json");
	for (int k = 0; k < 2; k++) {
		texts_let_go();
		got = get_ok("/zarr/zarr.json", &len);
		cr_assert(!strcmp(got, want), "zarr.json %zu bytes, export's %zu",
		          len, strlen(want));
		free(got);
		kept_texts_within(budget, one);
	}
	free(want);
	m = get_ok("/metrics", &len);
	cr_assert_eq(metric_value(m, "tensord_http_meta_waits_total "), 1,
	             "%s", m);
	cr_assert_eq(metric_value(m, "tensord_evictions_total "), 0, "%s", m);
	free(m);
	texts_let_go();
	want = v2_consolidated_of(ns, N);
	for (int k = 0; k < 2; k++) {
		texts_let_go();
		got = get_ok("/zarr-v2/.zmetadata", &len);
		cr_assert(!strcmp(got, want), ".zmetadata %zu bytes, its "
		          "nodes' %zu", len, strlen(want));
		free(got);
		kept_texts_within(budget, one);
	}
	free(want);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* The daemon's RLIMIT_NOFILE (its child hook). */
static void nofile_256(void)
{
	struct rlimit rl = {256, 256};

	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		_exit(125);
}

/*
 * The HTTP store's descriptors (a socket per connection, a duplicate of
 * the plane per chunk going by sendfile) were counted for nobody: at
 * RLIMIT_NOFILE 256, --http-max-connections 200 readers of a chunk
 * could hold 402 descriptors (at 80, 63 idle connections were enough),
 * and root could no longer connect to the socket (accept4: EMFILE):
 * unauthenticated clients took the reserve the daemon keeps for root. Now they are the daemon's own, out
 * of what clients may hold: a limit that cannot hold them stops the
 * start, naming both numbers; at one that can, every reader holding a
 * chunk still leaves root its socket.
 */
Test(http, the_stores_descriptors_are_the_daemons_own, .fini = stop)
{
	static const char *const more[] = {"--http-prefix", "",
	                                   "--http-max-connections", "100",
	                                   NULL};
	const size_t len = 4u << 20;
	char *out, req[128];
	int fds[99];

	zt_setup(NULL);
	/* a hang guard only: with the fix it exits at once */
	cr_assert_eq(zt_sh(&out,
	                   "ulimit -n 256; timeout 20 '%s' --socket %s/s.sock "
	                   "--http 127.0.0.1:0 --http-prefix '' "
	                   "--http-max-connections 200",
	                   getenv("TD_TENSORD"), zt_dir),
	             1, "%s", out);
	cr_assert(strstr(out, "--http-max-connections 200 needs 402 "
	                      "descriptors; RLIMIT_NOFILE 256"),
	          "%s", out);
	free(out);
	zt_teardown();

	port = free_port();
	snprintf(req, sizeof(req), "127.0.0.1:%u", port);
	{
		const char *args[] = {"--http", req, more[0], more[1], more[2],
		                      more[3], NULL};

		tu_daemon_start_log(&d, "warn", args, NULL, nofile_256);
	}
	zt_setup(&d);
	put_filled("big", 'A', len);
	snprintf(req, sizeof(req),
	         "GET /zarr/big/c/0 HTTP/1.1\r\nHost: t\r\n\r\n");
	/* all slots but one a reader that takes no byte: each response
	 * holds its socket and its plane's duplicate */
	for (int i = 0; i < 99; i++) {
		fds[i] = connect_tcp();
		cr_assert(send(fds[i], req, strlen(req), 0) > 0);
	}
	for (int i = 0; i < 2000; i++) {
		size_t mlen;
		char *m = get_ok("/metrics", &mlen);
		bool all = strstr(m, "tensord_http_leases 99\n");

		free(m);
		if (all)
			break;
		cr_assert_lt(i, 1999, "99 responses never started");
		usleep(10000);
	}
	/* root still gets descriptors: a connection, a plane */
	put_filled("small", 'B', 4);
	zt_ok("ls");
	for (int i = 0; i < 99; i++)
		close(fds[i]);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* ---- CORS (--http-cors, docs/zarr.md "From a browser: CORS") ---- */

#define PAGE "http://localhost:8888"

/* The store with --http-prefix "" and --http-cors origins. */
static void start_cors(const char *origins)
{
	const char *const more[] = {"--http-prefix", "", "--http-cors",
	                            origins, NULL};

	start_http_args(more);
}

/* resp lets the page of origin read it, as a list's echo does. */
static void cors_for(const char *resp, const char *origin)
{
	char want[160];

	snprintf(want, sizeof(want), "\r\nAccess-Control-Allow-Origin: %s\r\n",
	         origin);
	cr_assert(strstr(resp, want), "%s: %.600s", origin, resp);
	cr_assert(strstr(resp, "\r\nVary: Origin\r\n"), "%.600s", resp);
	cr_assert(strstr(resp, "\r\nAccess-Control-Expose-Headers: ETag, "
	                       "Content-Range, Content-Length, "
	                       "Accept-Ranges\r\n"),
	          "%.600s", resp);
}

/* A GET of a listed origin (and one of each other kind) with more
 * header lines: status and CORS headers. */
static char *get_from(const char *origin, const char *path, const char *more,
                      int status)
{
	char hdr[512], *resp;

	snprintf(hdr, sizeof(hdr), "Origin: %s\r\n%s", origin,
	         more ? more : "");
	http("GET", path, hdr, &resp);
	cr_assert_eq(status_of(resp), status, "%s %s: %.600s", path, hdr,
	             resp);
	return resp;
}

/*
 * A page of a listed origin may read every reply, errors included (a
 * 404 or a 416 it could not see would be a network error to it): 200,
 * 206, 304, 404, 412, 416 and a HEAD carry Access-Control-Allow-Origin
 * with its origin, Vary: Origin and the headers a Zarr reader looks at.
 * Any other Origin, even one that differs by a byte, a case, a port or
 * a slash, gets none of them, and the reply is otherwise the same.
 */
Test(http, a_listed_origin_may_read_every_reply, .fini = stop)
{
	static const char *const others[] = {
	        "http://localhost:8889", "http://localhost:888",
	        "http://localhost:88888", "https://localhost:8888",
	        "HTTP://localhost:8888", "http://LOCALHOST:8888",
	        "http://localhost:8888/", "http://localhost",
	        "null", "*", "",
	        "http://localhost:8888,https://viewer.example",
	        "http://localhost:8888 https://viewer.example"};
	char *resp, *tag, hdr[256];

	start_cors(PAGE ",https://viewer.example");
	put_filled("cors", 'C', 100);
	resp = get_from(PAGE, "/zarr/cors/c/0", NULL, 200);
	cors_for(resp, PAGE);
	cr_assert_eq(body_of(resp)[0], 'C');
	tag = etag_in(resp);
	free(resp);
	resp = get_from("https://viewer.example", "/zarr/zarr.json", NULL, 200);
	cors_for(resp, "https://viewer.example");
	free(resp);
	resp = get_from(PAGE, "/zarr/cors/c/0", "Range: bytes=2-4\r\n", 206);
	cors_for(resp, PAGE);
	free(resp);
	snprintf(hdr, sizeof(hdr), "If-None-Match: %s\r\n", tag);
	resp = get_from(PAGE, "/zarr/cors/c/0", hdr, 304);
	cors_for(resp, PAGE);
	free(resp);
	resp = get_from(PAGE, "/zarr/nosuch/c/0", NULL, 404);
	cors_for(resp, PAGE);
	free(resp);
	resp = get_from(PAGE, "/zarr/cors/c/0", "If-Match: \"other\"\r\n", 412);
	cors_for(resp, PAGE);
	free(resp);
	resp = get_from(PAGE, "/zarr/cors/c/0", "Range: bytes=100-\r\n", 416);
	cors_for(resp, PAGE);
	free(resp);
	http("HEAD", "/zarr/cors/c/0", "Origin: " PAGE "\r\n", &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	cors_for(resp, PAGE);
	free(resp);
	for (size_t i = 0; i < sizeof(others) / sizeof(*others); i++) {
		resp = get_from(others[i], "/zarr/cors/c/0", NULL, 200);
		cr_assert(!strstr(resp, "Access-Control-"), "%s: %.600s",
		          others[i], resp);
		cr_assert(strstr(resp, "\r\nETag: "), "%.600s", resp);
		cr_assert_eq(body_of(resp)[0], 'C');
		free(resp);
	}
	/* no Origin (not a browser's cross-origin request): none either;
	 * Vary still says the reply depends on it, for caches */
	http("GET", "/zarr/cors/c/0", NULL, &resp);
	cr_assert_eq(status_of(resp), 200, "%s", resp);
	cr_assert(!strstr(resp, "Access-Control-"), "%.600s", resp);
	cr_assert(strstr(resp, "\r\nVary: Origin\r\n"), "%.600s", resp);
	free(resp);
	free(tag);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* --http-cors '*': every Origin may read, told "*" (never its own text
 * echoed), and the reply does not vary with it: a request without
 * Origin gets "*" too (Fetch, "CORS protocol and HTTP caches": a cache
 * may answer a page's fetch with what it stored for a navigation). */
Test(http, cors_star_answers_star_to_any_origin, .fini = stop)
{
	static const char *const origins[] = {PAGE, "https://a.example:9",
	                                      "null"};
	char *resp;

	start_cors("*");
	put_filled("cors", 'C', 100);
	for (size_t i = 0; i < sizeof(origins) / sizeof(*origins); i++) {
		resp = get_from(origins[i], "/zarr/cors/c/0", NULL, 200);
		cr_assert(strstr(resp, "\r\nAccess-Control-Allow-Origin: *\r\n"),
		          "%s: %.600s", origins[i], resp);
		cr_assert(strstr(resp, "\r\nAccess-Control-Expose-Headers: "
		                       "ETag, Content-Range"),
		          "%.600s", resp);
		cr_assert(!strstr(resp, "Vary: Origin"), "%.600s", resp);
		free(resp);
	}
	resp = get_from(PAGE, "/zarr/nosuch/zarr.json", NULL, 404);
	cr_assert(strstr(resp, "\r\nAccess-Control-Allow-Origin: *\r\n"),
	          "%.600s", resp);
	free(resp);
	http("GET", "/zarr/cors/c/0", NULL, &resp);
	cr_assert_eq(status_of(resp), 200, "%.600s", resp);
	cr_assert(strstr(resp, "\r\nAccess-Control-Allow-Origin: *\r\n"),
	          "%.600s", resp);
	cr_assert(!strstr(resp, "Vary: Origin"), "%.600s", resp);
	free(resp);
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* An OPTIONS request from origin asking for method and headers (NULL:
 * no such line). */
static char *preflight(const char *origin, const char *method,
                       const char *headers)
{
	char hdr[512], *resp;
	int n = 0;

	if (origin)
		n += snprintf(hdr + n, sizeof(hdr) - (size_t)n,
		              "Origin: %s\r\n", origin);
	if (method)
		n += snprintf(hdr + n, sizeof(hdr) - (size_t)n,
		              "Access-Control-Request-Method: %s\r\n", method);
	if (headers)
		n += snprintf(hdr + n, sizeof(hdr) - (size_t)n,
		              "Access-Control-Request-Headers: %s\r\n",
		              headers);
	hdr[n] = 0;
	http("OPTIONS", "/zarr/cors/c/0", hdr, &resp);
	return resp;
}

/* resp refuses a preflight: the 405 of a method the store lacks, as
 * without --http-cors, and nothing a browser would take as a grant. */
static void preflight_refused(char *resp, const char *why)
{
	cr_assert_eq(status_of(resp), 405, "%s: %.600s", why, resp);
	cr_assert(strstr(resp, "\r\nAllow: GET, HEAD\r\n"), "%s: %.600s", why,
	          resp);
	cr_assert(!strstr(resp, "Access-Control-Allow-Methods"), "%s: %.600s",
	          why, resp);
	cr_assert(!strstr(resp, "Access-Control-Allow-Headers"), "%s: %.600s",
	          why, resp);
	free(resp);
}

/*
 * A browser asks before a GET with Range or a conditional header (a
 * preflight): from a listed origin, for GET or HEAD and the headers a
 * Zarr reader sends (in any case, as a list), the answer is 204 with
 * the methods, the headers (the store's fixed set, never the request's
 * own text), how long to keep it, and the origin. Another method,
 * another header, another origin, or an OPTIONS that is no preflight:
 * 405, as without --http-cors; the store stays read-only.
 */
Test(http, a_preflight_grants_reads_and_nothing_else, .fini = stop)
{
	static const char *const asks[] = {
	        NULL, "range", "Range, If-None-Match",
	        "if-match,if-range", " range ,, if-none-match "};
	static const char *const bad_headers[] = {
	        "range, x-evil", "content-type", "range if-match",
	        "authorization", "range\tx"};
	static const char *const bad_methods[] = {"PUT", "POST", "DELETE",
	                                          "get", "OPTIONS"};
	char *resp;

	start_cors(PAGE);
	put_filled("cors", 'C', 100);
	for (size_t i = 0; i < sizeof(asks) / sizeof(*asks); i++) {
		resp = preflight(PAGE, i % 2 ? "HEAD" : "GET", asks[i]);
		cr_assert_eq(status_of(resp), 204, "%s: %.600s", asks[i],
		             resp);
		cors_for(resp, PAGE);
		cr_assert(strstr(resp, "\r\nAccess-Control-Allow-Methods: GET, "
		                       "HEAD, OPTIONS\r\n"),
		          "%.600s", resp);
		cr_assert(strstr(resp, "\r\nAccess-Control-Allow-Headers: "
		                       "Range, If-None-Match, If-Match, "
		                       "If-Range\r\n"),
		          "%.600s", resp);
		cr_assert(strstr(resp, "\r\nAccess-Control-Max-Age: 600\r\n"),
		          "%.600s", resp);
		cr_assert_str_eq(body_of(resp), "");
		free(resp);
	}
	for (size_t i = 0; i < sizeof(bad_methods) / sizeof(*bad_methods); i++)
		preflight_refused(preflight(PAGE, bad_methods[i], "range"),
		                  bad_methods[i]);
	for (size_t i = 0; i < sizeof(bad_headers) / sizeof(*bad_headers); i++)
		preflight_refused(preflight(PAGE, "GET", bad_headers[i]),
		                  bad_headers[i]);
	resp = preflight("http://localhost:8889", "GET", "range");
	cr_assert(!strstr(resp, "Access-Control-"), "%.600s", resp);
	preflight_refused(resp, "another origin");
	preflight_refused(preflight(NULL, "GET", "range"), "no Origin");
	preflight_refused(preflight(PAGE, NULL, NULL), "no preflight");
	stop(); /* checked here: criterion ignores a .fini's asserts */
}

/* Without --http-cors nothing of CORS is sent, whatever the request
 * says, and OPTIONS is the 405 it always was. */
Test(http, without_http_cors_no_cors_headers, .init = start_http,
     .fini = stop)
{
	char *resp;

	put_filled("cors", 'C', 100);
	resp = get_from(PAGE, "/zarr/cors/c/0", NULL, 200);
	cr_assert(!strstr(resp, "Access-Control-"), "%.600s", resp);
	cr_assert(!strstr(resp, "Vary:"), "%.600s", resp);
	free(resp);
	resp = get_from(PAGE, "/zarr/nosuch/c/0", NULL, 404);
	cr_assert(!strstr(resp, "Access-Control-"), "%.600s", resp);
	free(resp);
	resp = preflight(PAGE, "GET", "range");
	cr_assert(!strstr(resp, "Access-Control-"), "%.600s", resp);
	preflight_refused(resp, "no --http-cors");
	stop(); /* checked here: criterion ignores a .fini's asserts */
}
