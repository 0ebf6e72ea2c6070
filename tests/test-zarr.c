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
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "td-zarr.h"
#include "tensord/tensord.h"
#include "testutil.h"
#include "zarrtest.h"

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
	                    "\"<u2\",\"fill_value\":0,\"filters\":null,"
	                    "\"order\":\"C\",\"shape\":[2],\"zarr_format\":2}"),
	          "%s", t);
	cr_assert(strstr(t, "\"b/.zattrs\":{\"_ARRAY_DIMENSIONS\":[\"b_0\"]}"),
	          "%s", t);
	cr_assert(strstr(t, "\"zarr_consolidated_format\":1}"), "%s", t);
	free(t);
	json_object_put(g);
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

/* ---- names (tensogram.md §18) ---- */

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
	cr_assert_eq(zt_sh(&out, "test -d %s/a/half && ls %s | grep -c tmp",
	                   zt_dir, zt_dir),
	             1, "no temporary folder is left: %s", out);
	free(out);
	/* a missing tensor: nothing is written */
	cr_assert_eq(zt_ctl(&out, "zarr export %s/d nosuch", zt_dir), 1);
	free(out);
	cr_assert_eq(zt_sh(&out, "test -e %s/d", zt_dir), 1);
	free(out);
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
}

Test(import, export_then_import_gives_the_same_tensors, .init = start,
     .fini = stop)
{
	char *out;

	put_all();
	zt_ok("zarr export %s/x", zt_dir);
	zt_ok("zarr import %s/x --prefix back/", zt_dir);
	for (size_t i = 0; i < NPUTS; i++) {
		char *raw = zt_path(nodes[i]);

		cr_assert_eq(zt_ctl(&out, "get back/%s -o %s.got", nodes[i],
		                    raw),
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
}

Test(import, refusals_name_the_reason, .init = start, .fini = stop)
{
	static const uint8_t six[24] = {0};
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
}
