/* SPDX-License-Identifier: MIT */
/*
 * A JSON object text as one CBOR map (td-json.h): json-c reads it, the
 * tree becomes libcbor's, libcbor serialises it (proto/tgm-write.c makes
 * it canonical when it writes the message).
 */
#include "td-json.h"

#include <cbor.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "json-int.h"
#include "tgm-desc.h"

/* A conversion under way. */
struct conv {
	bool keep;     /* json-c did not keep a value exactly */
	bool end_ints; /* an integer at an end of json-c's range */
	bool big;      /* more items than a .tgm reader takes */
	size_t items;  /* CBOR items made so far, keys included */
};

/* One more item; false (c->big) past TD_TGM_CBOR_MAX_ITEMS, which the
 * .tgm reader (proto/tgm-cbor.c) refuses: the writer would too. */
static bool count(struct conv *c)
{
	c->big |= ++c->items > TD_TGM_CBOR_MAX_ITEMS;
	return !c->big;
}

/* NULL with c->keep false: out of memory (or c->big); with c->keep
 * true: a value json-c did not keep exactly (the caller keeps the whole
 * text). */
static cbor_item_t *value(struct json_object *o, struct conv *c);

static cbor_item_t *object(struct json_object *o, struct conv *c)
{
	cbor_item_t *m =
	        cbor_new_definite_map((size_t)json_object_object_length(o));

	if (!m)
		return NULL;
	/* the iterator API: json_object_object_foreach() is a GNU
	 * statement expression, which -Wpedantic refuses */
	for (struct json_object_iterator it = json_object_iter_begin(o),
	                                 end = json_object_iter_end(o);
	     !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
		const char *key = json_object_iter_peek_name(&it);
		struct json_object *val = json_object_iter_peek_value(&it);
		bool key_ok = td__utf8_valid((const uint8_t *)key, strlen(key));
		cbor_item_t *k = key_ok && count(c) ? cbor_build_string(key)
		                                    : NULL;
		cbor_item_t *v = k ? value(val, c) : NULL;
		bool ok = v && cbor_map_add(m, (struct cbor_pair){k, v});

		if (k)
			cbor_decref(&k);
		if (v)
			cbor_decref(&v);
		if (!ok) {
			c->keep |= !key_ok;
			cbor_decref(&m);
			return NULL;
		}
	}
	return m;
}

static cbor_item_t *array(struct json_object *o, struct conv *c)
{
	size_t n = json_object_array_length(o);
	cbor_item_t *a = cbor_new_definite_array(n);

	for (size_t i = 0; a && i < n; i++) {
		cbor_item_t *v = value(json_object_array_get_idx(o, i), c);
		bool ok = v && cbor_array_push(a, v);

		if (v)
			cbor_decref(&v);
		if (!ok)
			cbor_decref(&a);
	}
	return a;
}

static cbor_item_t *value(struct json_object *o, struct conv *c)
{
	int64_t v;
	double d;

	if (!count(c))
		return NULL;
	switch (json_object_get_type(o)) {
	case json_type_null:
		return cbor_new_null();
	case json_type_boolean:
		return cbor_build_bool(json_object_get_boolean(o));
	case json_type_int:
		/* json-c holds int64 or, above it, uint64, and clamps what
		 * is beyond to the ends: an end value may be a clamped one */
		v = json_object_get_int64(o);
		c->end_ints |=
		        v == INT64_MIN ||
		        (v >= 0 && json_object_get_uint64(o) == UINT64_MAX);
		if (v >= 0)
			return cbor_build_uint64(json_object_get_uint64(o));
		return cbor_build_negint64((uint64_t) - (v + 1));
	case json_type_double:
		d = json_object_get_double(o);
		if (!isfinite(d)) {
			c->keep = true; /* JSON has no NaN or Infinity */
			return NULL;
		}
		return cbor_build_float8(d);
	case json_type_string:
		/* json-c lets UTF-8-encoded surrogates through */
		if (!td__utf8_valid((const uint8_t *)json_object_get_string(o),
		                    (size_t)json_object_get_string_len(o))) {
			c->keep = true;
			return NULL;
		}
		return cbor_build_stringn(
		        json_object_get_string(o),
		        (size_t)json_object_get_string_len(o));
	case json_type_array:
		return array(o, c);
	case json_type_object:
		return object(o, c);
	}
	return NULL;
}

/* json-c cuts a key at an escaped NUL: such a text is not kept as an
 * object (a value with one is refused too; the rule stays simple). */
static bool has_escaped_nul(const char *s, size_t len)
{
	for (size_t i = 0; i + 6 <= len; i++)
		if (s[i] == '\\' && s[i + 1] == 'u' &&
		    !memcmp(s + i + 2, "0000", 4))
			return true;
	return false;
}

/*
 * Does the text hold an integer json-c clamps (outside int64 and uint64)?
 * Asked only when the tree holds an end value. A digit run inside a
 * string may answer yes too: that only keeps the text whole.
 */
static bool has_clamped_int(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		size_t st = i, e;
		char tmp[32];

		if (s[i] != '-' && (s[i] < '0' || s[i] > '9'))
			continue;
		if (i && strchr("0123456789.eE+-", s[i - 1]))
			continue; /* inside a number (or a string) */
		e = st + (s[st] == '-');
		while (e < len && s[e] >= '0' && s[e] <= '9')
			e++;
		i = e;
		if (e == st + (s[st] == '-') ||
		    (e < len && strchr(".eE", s[e])))
			continue; /* not an integer */
		if (e - st >= sizeof(tmp))
			return true;
		memcpy(tmp, s + st, e - st);
		tmp[e - st] = 0;
		errno = 0;
		if (tmp[0] == '-')
			(void)strtoll(tmp, NULL, 10);
		else
			(void)strtoull(tmp, NULL, 10);
		if (errno == ERANGE)
			return true;
	}
	return false;
}

int td_json_to_cbor(const void *text, size_t len, uint8_t **cbor,
                    size_t *cbor_len)
{
	struct json_tokener *tok;
	struct json_object *o;
	cbor_item_t *it = NULL;
	struct conv c = {false, false, false, 0};
	bool whole;
	size_t cap = 0;

	if (!len || len > INT_MAX || has_escaped_nul(text, len))
		return 0;
	tok = json_tokener_new_ex(TD_TGM_CBOR_MAX_DEPTH);
	if (!tok)
		return -ENOMEM;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT |
	                                    JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, text, (int)len);
	whole = json_tokener_get_error(tok) == json_tokener_success &&
	        json_tokener_get_parse_end(tok) == len;
	json_tokener_free(tok);
	if (whole && json_object_is_type(o, json_type_object))
		it = value(o, &c);
	else
		c.keep = true;
	json_object_put(o);
	if (it && c.end_ints && has_clamped_int(text, len)) {
		cbor_decref(&it);
		c.keep = true;
	}
	if (!it)
		return c.big ? -E2BIG : c.keep ? 0 : -ENOMEM;
	*cbor_len = cbor_serialize_alloc(it, cbor, &cap);
	cbor_decref(&it);
	return *cbor_len ? 1 : -ENOMEM;
}
