/* SPDX-License-Identifier: MIT */
/*
 * json/: the JSON form of .tgm CBOR and the CBOR form of JSON objects,
 * both through json-c, and the tools' string printer. Pins the rules of
 * json/td-json.h byte for byte: these texts are what tensorctl inspect
 * --json prints and what tensorctl load stores as tensor metadata.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td-json.h"
#include "tgm-desc.h"
#include "testutil.h"

TestSuite(json, .timeout = TU_TEST_TIMEOUT_S);

/* CBOR written as hex (spaces allowed) into buf; its length. */
static size_t unhex(const char *hex, uint8_t *buf, size_t cap)
{
	size_t n = 0;

	for (const char *p = hex; *p;) {
		unsigned v;

		if (*p == ' ') {
			p++;
			continue;
		}
		cr_assert(sscanf(p, "%2x", &v) == 1, "bad hex at %s", p);
		cr_assert_lt(n, cap);
		buf[n++] = (uint8_t)v;
		p += 2;
	}
	return n;
}

static void expect_json(const char *hex, const char *want)
{
	uint8_t cbor[256];
	size_t n = unhex(hex, cbor, sizeof(cbor)), jl = 0;
	struct td_err e = {0};
	char *json = NULL;
	int rc = td_json_from_cbor(cbor, n, &json, &jl, &e);

	cr_assert_eq(rc, 0, "%s: rc %d (%s)", hex, rc, e.reason);
	cr_expect_str_eq(json, want, "%s", hex);
	cr_expect_eq(jl, strlen(json), "%s", hex);
	free(json);
}

Test(json, integers_are_exact_over_the_whole_cbor_range)
{
	expect_json("00", "0");
	expect_json("17", "23");
	expect_json("1b ffffffffffffffff", "18446744073709551615");
	expect_json("20", "-1");
	expect_json("3b 7fffffffffffffff", "-9223372036854775808");
	/* below int64: json-c holds it only as text */
	expect_json("3b 8000000000000000", "-9223372036854775809");
	expect_json("3b ffffffffffffffff", "-18446744073709551616");
}

Test(json, floats_are_shortest_and_stay_floats)
{
	expect_json("f9 3c00", "1.0");                     /* half 1.0 */
	expect_json("f9 8000", "-0.0");                    /* half -0.0 */
	expect_json("fa 3dcccccd", "0.10000000149011612"); /* single 0.1 */
	expect_json("fb 3fb999999999999a", "0.1");
	expect_json("fb 4059000000000000", "100.0");
	expect_json("fb 444b1ae4d6e2ef50", "1e+21");
	expect_json("fb 0000000000000001", "4.94065645841247e-324");
	expect_json("fb 7fefffffffffffff", "1.7976931348623157e+308");
	/* json-c's own "%.17g" would print 0.10000000000000001 and bare
	 * NaN / Infinity, which are not JSON */
	expect_json("f9 7e00", "\"NaN\"");
	expect_json("f9 7c00", "\"Infinity\"");
	expect_json("f9 fc00", "\"-Infinity\"");
	expect_json("fb 7ff8000000000001", "\"NaN\"");
}

Test(json, bytes_tags_and_simple_values)
{
	expect_json("43 00ff10", "\"00ff10\"");
	expect_json("40", "\"\"");
	expect_json("5f 41 01 42 02ab ff", "\"0102ab\""); /* chunked */
	expect_json("c1 1a 00000001", "1");               /* tag dropped */
	expect_json("82 c0 61 78 d9d9f7 f5", "[\"x\",true]");
	expect_json("f6", "null");
	expect_json("f7", "null"); /* undefined */
	expect_json("f4", "false");
}

Test(json, text_escapes_controls_and_keeps_slash_and_non_ascii)
{
	/* 01 08 09 0a 0b 0c 0d 1f " \ / 7f é 😀 */
	expect_json("72 01 08 09 0a 0b 0c 0d 1f 22 5c 2f 7f c3a9 f09f9880",
	            "\"\\u0001\\b\\t\\n\\u000b\\f\\r\\u001f\\\"\\\\/\x7f"
	            "\xc3\xa9\xf0\x9f\x98\x80\"");
	expect_json("63 61 00 62", "\"a\\u0000b\"");   /* NUL in a value */
	expect_json("7f 61 61 62 6263 ff", "\"abc\""); /* chunked text */
}

Test(json, maps_sort_keys_by_bytes_and_nest)
{
	/* {"b": [1, {"c": []}], "a": {}, "ab": 2, "": 3} */
	expect_json("a4 61 62 82 01 a1 61 63 80 61 61 a0 62 6162 02 60 03",
	            "{\"\":3,\"a\":{},\"ab\":2,\"b\":[1,{\"c\":[]}]}");
	/* indefinite map and array */
	expect_json("bf 61 7a 9f 01 02 ff 61 79 f6 ff",
	            "{\"y\":null,\"z\":[1,2]}");
	/* non-ASCII keys sort by their UTF-8 bytes */
	expect_json("a2 62 c3a9 01 61 7a 02", "{\"z\":2,\"\xc3\xa9\":1}");
}

Test(json, scalar_keys_become_their_json_text)
{
	expect_json("a1 01 02", "{\"1\":2}");
	expect_json("a1 20 00", "{\"-1\":0}");
	expect_json("a1 f9 3e00 00", "{\"1.5\":0}");
	expect_json("a1 f5 00", "{\"true\":0}");
	expect_json("a1 f6 00", "{\"null\":0}");
	expect_json("a1 41 01 00", "{\"\\\"01\\\"\":0}"); /* bytes: "01" */
	expect_json("a1 f9 7e00 00", "{\"\\\"NaN\\\"\":0}");
}

Test(json, a_repeated_key_keeps_its_first_value)
{
	/* {"a": 1, "a": 2} */
	expect_json("a2 61 61 01 61 61 02", "{\"a\":1}");
	/* 1 and "1" are the same JSON key: the first in map order wins */
	expect_json("a2 01 61 78 61 31 61 79", "{\"1\":\"x\"}");
	expect_json("a2 61 31 61 79 01 61 78", "{\"1\":\"y\"}");
}

Test(json, a_key_with_a_nul_byte_is_refused)
{
	/* json-c's keys are C strings: "a\0b" would lose its tail */
	uint8_t cbor[] = {0xa1, 0x63, 'a', 0, 'b', 0x01};
	struct td_err e = {0};
	char *json = NULL;

	cr_assert_eq(td_json_from_cbor(cbor, sizeof(cbor), &json, NULL, &e),
	             -EBADMSG);
	cr_assert_null(json);
	cr_assert(e.reason && strstr(e.reason, "NUL"), "%s", e.reason);
}

Test(json, malformed_cbor_keeps_the_check_error)
{
	uint8_t trunc[] = {0x82, 0x01};
	uint8_t utf8[] = {0x62, 0xc3, 0x28};
	struct td_err e = {0};
	char *json = NULL;

	cr_expect_eq(td_json_from_cbor(trunc, sizeof(trunc), &json, NULL, &e),
	             -ENODATA);
	cr_expect_eq(td_json_from_cbor(utf8, sizeof(utf8), &json, NULL, &e),
	             -EILSEQ);
	cr_expect_null(json);
}

Test(json, attrs_of_no_metadata_is_an_empty_object)
{
	char *json = NULL;
	size_t jl = 9;

	cr_assert_eq(td_json_tgm_attrs(NULL, 0, &json, &jl, NULL), 0);
	cr_expect_str_eq(json, "{}");
	cr_expect_eq(jl, 2);
	free(json);
}

/* ---- printing ---- */

static char *printed(void (*fn)(FILE *, const char *), const char *s)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	cr_assert_not_null(f);
	fn(f, s);
	fclose(f);
	return buf;
}

Test(json, printed_strings_use_the_same_escapes)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	char *p;

	cr_assert_not_null(f);
	td_json_str(f, "a\0\x01\b\t\n\x0b\f\r\"\\/\x7f\xc3\xa9", 15);
	fclose(f);
	cr_expect_str_eq(buf, "\"a\\u0000\\u0001\\b\\t\\n\\u000b\\f\\r\\\"\\\\/"
	                      "\x7f\xc3\xa9\"");
	free(buf);
	p = printed(td_json_cstr, NULL);
	cr_expect_str_eq(p, "null");
	free(p);
	p = printed(td_json_cstr, "x");
	cr_expect_str_eq(p, "\"x\"");
	free(p);
}

Test(json, printed_doubles)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	cr_assert_not_null(f);
	td_json_double(f, 0.5);
	fputc(' ', f);
	td_json_double(f, NAN);
	fputc(' ', f);
	td_json_double(f, -INFINITY);
	fclose(f);
	cr_expect_str_eq(buf, "0.5 null null");
	free(buf);
}

/* ---- JSON text -> CBOR map ---- */

/* text -> CBOR -> JSON again; returns td_json_to_cbor()'s result. */
static int through_cbor(const char *text, size_t len, char **back)
{
	uint8_t *cbor = NULL;
	size_t cl = 0, used = 0;
	int rc = td_json_to_cbor(text, len, &cbor, &cl);

	*back = NULL;
	if (rc != 1)
		return rc;
	/* what the writer will check before using it */
	cr_assert_eq(td_tgm_cbor_check(cbor, cl, &used, NULL), 0, "%s", text);
	cr_assert_eq(used, cl);
	cr_assert_eq(td_json_from_cbor(cbor, cl, back, NULL, NULL), 0);
	free(cbor);
	return rc;
}

static void expect_kept(const char *text, const char *want)
{
	char *back;

	cr_assert_eq(through_cbor(text, strlen(text), &back), 1, "%s", text);
	cr_expect_str_eq(back, want, "%s", text);
	free(back);
}

static void expect_whole(const char *text, size_t len)
{
	char *back;

	cr_expect_eq(through_cbor(text, len, &back), 0, "%.*s", (int)len, text);
	cr_expect_null(back);
}

/* {"a":[0,0,...]} with n zeros: 3 + n CBOR items. */
static char *zeros(size_t n, size_t *len)
{
	char *t = malloc(2 * n + 16);
	size_t o;

	cr_assert(t);
	o = (size_t)sprintf(t, "{\"a\":[");
	for (size_t i = 0; i < n; i++)
		o += (size_t)sprintf(t + o, i ? ",0" : "0");
	o += (size_t)sprintf(t + o, "]}");
	*len = o;
	return t;
}

/*
 * More than TD_TGM_CBOR_MAX_ITEMS items was converted all the same, into
 * CBOR the .tgm reader (and so the writer, "not one well-formed CBOR
 * item") refuses: now -E2BIG, and exactly as many as the reader takes
 * are converted into CBOR it reads.
 */
Test(json, more_cbor_items_than_a_reader_takes_is_e2big)
{
	size_t len, cl = 0, used = 0;
	uint8_t *cbor = NULL;
	char *t = zeros(TD_TGM_CBOR_MAX_ITEMS - 3, &len);
	int rc = td_json_to_cbor(t, len, &cbor, &cl);

	/* (through_cbor() would print the whole text on a failure) */
	cr_assert_eq(rc, 1, "%d", rc);
	cr_assert_eq(td_tgm_cbor_check(cbor, cl, &used, NULL), 0,
	             "the reader refuses as many items as it takes");
	cr_assert_eq(used, cl);
	free(cbor);
	free(t);
	cbor = NULL;
	t = zeros(TD_TGM_CBOR_MAX_ITEMS - 2, &len);
	rc = td_json_to_cbor(t, len, &cbor, &cl);
	cr_assert_eq(rc, -E2BIG, "%d: converted into CBOR the reader refuses",
	             rc);
	cr_assert_null(cbor);
	free(t);
}

Test(json, objects_become_cbor_maps)
{
	expect_kept("{}", "{}");
	expect_kept(" \t\r\n{\"b\":[true,null,-2,2.5,\"x\",{}],\"a\":1}\n",
	            "{\"a\":1,\"b\":[true,null,-2,2.5,\"x\",{}]}");
	expect_kept("{\"a\":-0,\"b\":-0.0,\"c\":1E2,\"d\":0.1}",
	            "{\"a\":0,\"b\":-0.0,\"c\":100.0,\"d\":0.1}");
	expect_kept(
	        "{\"s\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\"}",
	        "{\"s\":\"\\\"\\\\/\\b\\f\\n\\r\\t\xc3\xa9\xf0\x9f\x98\x80\"}");
	expect_kept("{\"\xc3\xa9\":\"\xe2\x82\xac\"}",
	            "{\"\xc3\xa9\":\"\xe2\x82\xac\"}");
	/* the ends of json-c's integers are kept exactly */
	expect_kept("{\"a\":-9223372036854775808,\"b\":18446744073709551615}",
	            "{\"a\":-9223372036854775808,\"b\":18446744073709551615}");
	/* json-c: a repeated key keeps its last value */
	expect_kept("{\"a\":1,\"a\":2}", "{\"a\":2}");
}

Test(json, texts_json_c_would_not_keep_exactly_stay_whole)
{
	static const char *const t[] = {
	        "",
	        "[1]",
	        "\"x\"",
	        "{",
	        "{\"a\":1} x",
	        "{\"a\":1}\v",
	        "{\"a\":01}",
	        "not json",
	        /* json-c clamps these to its ends */
	        "{\"a\":-9223372036854775809}",
	        "{\"a\":18446744073709551616}",
	        "{\"a\":[1,-123456789012345678901234567890]}",
	        /* JSON has no NaN or Infinity */
	        "{\"a\":NaN}",
	        "{\"a\":-Infinity}",
	        "{\"a\":1e400}",
	        /* json-c cuts keys at an escaped NUL */
	        "{\"a\\u0000b\":1}",
	        "{\"a\":\"\\u0000\"}",
	        /* not UTF-8: a stray byte, an encoded surrogate */
	        "{\"a\":\"\xff\"}",
	        "{\"a\":\"\xed\xa0\x80\"}",
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		expect_whole(t[i], strlen(t[i]));
	expect_whole("{\"a\":1}\0", 8); /* a NUL after the object */
}

static char *nested(int levels, const char *inner)
{
	size_t il = strlen(inner), at = 0;
	char *s = malloc((size_t)levels * 6 + il + 1);

	cr_assert_not_null(s);
	if (!s) /* for the compiler, which does not know cr_assert returns */
		abort();
	for (int i = 0; i < levels; i++) {
		memcpy(s + at, "{\"a\":", 5);
		at += 5;
	}
	memcpy(s + at, inner, il);
	at += il;
	for (int i = 0; i < levels; i++)
		s[at++] = '}';
	s[at] = 0;
	return s;
}

Test(json, depth_is_bounded_like_cbor)
{
	/* TD_TGM_CBOR_MAX_DEPTH values deep, the innermost one counted */
	char *ok = nested(TD_TGM_CBOR_MAX_DEPTH - 1, "1");
	char *ok_empty = nested(TD_TGM_CBOR_MAX_DEPTH - 1, "{}");
	char *deep = nested(TD_TGM_CBOR_MAX_DEPTH, "1");
	char *back;

	cr_expect_eq(through_cbor(ok, strlen(ok), &back), 1);
	free(back);
	cr_expect_eq(through_cbor(ok_empty, strlen(ok_empty), &back), 1);
	free(back);
	expect_whole(deep, strlen(deep));
	free(ok);
	free(ok_empty);
	free(deep);
}

Test(json, cbor_json_cbor_is_stable)
{
	/* {"f": 0.1f, "n": -2^64, "b": h'01', "t": "a\tb", "u": [undef]} */
	uint8_t cbor[64];
	size_t n = unhex("a5 61 66 fa 3dcccccd 61 6e 3b ffffffffffffffff "
	                 "61 62 41 01 61 74 63 61 09 62 61 75 81 f7",
	                 cbor, sizeof(cbor));
	char *json, *back;

	cr_assert_eq(td_json_from_cbor(cbor, n, &json, NULL, NULL), 0);
	cr_expect_str_eq(json, "{\"b\":\"01\",\"f\":0.10000000149011612,"
	                       "\"n\":-18446744073709551616,\"t\":\"a\\tb\","
	                       "\"u\":[null]}");
	/* -2^64 is beyond json-c: that text stays whole */
	cr_expect_eq(through_cbor(json, strlen(json), &back), 0);
	free(json);
	n = unhex("a3 61 66 fa 3dcccccd 61 62 41 01 61 74 63 61 09 62", cbor,
	          sizeof(cbor));
	cr_assert_eq(td_json_from_cbor(cbor, n, &json, NULL, NULL), 0);
	cr_assert_eq(through_cbor(json, strlen(json), &back), 1);
	cr_expect_str_eq(back, json);
	free(back);
	free(json);
}
