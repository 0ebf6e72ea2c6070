/* SPDX-License-Identifier: MIT */
/*
 * Naming data objects (../shared/specs/tensogram.md §18, see tgm-desc.h):
 * the lookup chain over metadata and descriptor, sanitising a name into
 * a tensord name, and unique suffixes for repeated names.
 */
#include "tgm-desc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tgm-cbor.h"

/* ---- naming (§18) ---- */

/* The value of a dotted path: the first segment in base (never
 * `_reserved_`), else among the descriptor's parameter keys (those
 * base lacks: the shallow merge); then nested maps only. */
static const cbor_item_t *path_get(const cbor_item_t *base,
                                   const cbor_item_t *desc, const char *path)
{
	const cbor_item_t *cur = NULL;
	const char *seg = path;

	for (bool first = true;; first = false) {
		const char *dot = strchr(seg, '.');
		size_t sl = dot ? (size_t)(dot - seg) : strlen(seg);
		char key[256];
		const cbor_item_t *next = NULL;

		if (sl >= sizeof(key))
			return NULL;
		memcpy(key, seg, sl);
		key[sl] = 0;
		if (first) {
			if (strcmp(key, "_reserved_"))
				next = td__cbor_map_get(base, key);
			if (!next && desc && !td__tgm_desc_key_known(key))
				next = td__cbor_map_get(desc, key);
		} else {
			next = td__cbor_map_get(cur, key);
		}
		if (!next)
			return NULL;
		cur = next;
		if (!dot)
			return cur;
		seg = dot + 1;
	}
}

/* A hit's text into out; false for a miss (null, float, bytes, ...). */
static bool name_value(const cbor_item_t *v, char *out, size_t cap)
{
	ssize_t n;

	switch (cbor_typeof(v)) {
	case CBOR_TYPE_STRING:
		n = td__cbor_text_get(v, out, cap);
		/* NUL is a control character: the sanitiser would make it
		 * '_', and a C string cannot carry it */
		for (ssize_t i = 0; i < n && (size_t)i < cap - 1; i++)
			if (!out[i])
				out[i] = '_';
		return true;
	case CBOR_TYPE_UINT:
		snprintf(out, cap, "%llu", (unsigned long long)cbor_get_int(v));
		return true;
	case CBOR_TYPE_NEGINT:
		if (cbor_get_int(v) == UINT64_MAX)
			snprintf(out, cap, "-18446744073709551616");
		else
			snprintf(out, cap, "-%llu",
			         (unsigned long long)cbor_get_int(v) + 1);
		return true;
	case CBOR_TYPE_FLOAT_CTRL:
		/* libcbor asserts when asked for a float's ctrl value:
		 * check that it is a ctrl first */
		if (!cbor_float_ctrl_is_ctrl(v) || !cbor_is_bool(v))
			return false;
		snprintf(out, cap, "%s", cbor_get_bool(v) ? "True" : "False");
		return true;
	default:
		return false;
	}
}

int td_tgm_object_name(const struct td_tgm_meta *m, size_t i,
                       const uint8_t *desc_cbor, size_t desc_len,
                       const char *variable_key, char *out, size_t cap,
                       struct td_err *err)
{
	static const char *const chain[] = {"name", "mars.param", "param",
	                                    "mars.shortName", "shortName"};
	const cbor_item_t *base = td__tgm_meta_base(m, i);
	cbor_item_t *desc = NULL;
	int found = 0;

	if (!cap)
		return -EINVAL;
	if (desc_cbor) {
		int rc = td__tgm_cbor_load(desc_cbor, desc_len, &desc, NULL,
		                           err);
		if (rc < 0)
			return rc;
		if (!cbor_isa_map(desc))
			cbor_decref(&desc); /* no parameters to merge */
	}
	for (int k = -1; k < 5 && !found; k++) {
		const char *path = k < 0 ? variable_key : chain[k];
		const cbor_item_t *v;

		if (!path || !*path)
			continue;
		v = path_get(base, desc, path);
		found = v && name_value(v, out, cap);
	}
	if (desc)
		cbor_decref(&desc);
	if (!found)
		snprintf(out, cap, "object_%zu", i);
	return found;
}

static bool name_byte_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || strchr("._:@+-", c);
}

/* Spec §18's first step: separators and control characters become '_'. */
static char spec_byte(unsigned char c)
{
	return (c == '/' || c == '\\' || c < 0x20 || c == 0x7f) ? '_' : (char)c;
}

/*
 * Spec §18's second step: the names that need the prefix "v_" (judged
 * after the first step, which never makes or unmakes "zarr.json").
 */
static bool needs_prefix(const char *in, size_t len)
{
	bool dots = len > 0;

	for (size_t i = 0; i < len; i++)
		dots &= in[i] == '.';
	return dots ||
	       (len >= 2 && spec_byte((unsigned char)in[0]) == '_' &&
	        spec_byte((unsigned char)in[1]) == '_') ||
	       !strcmp(in, "zarr.json");
}

void td_tgm_name_sanitize(const char *in, char *out, size_t cap)
{
	size_t len = strlen(in), o = 0;
	const char *pre = !len ? "_" : needs_prefix(in, len) ? "v_" : "";
	size_t pl = strlen(pre);

	if (!cap)
		return;
	/* then tensord names (proto/wire.h): one '_' per character outside
	 * the allowed set (a UTF-8 sequence counts once), no ".." */
	for (size_t i = 0; i < pl + len && o + 1 < cap; i++) {
		unsigned char c = i < pl ? (unsigned char)pre[i]
		                         : (unsigned char)spec_byte(
		                                   (unsigned char)in[i - pl]);

		if ((c & 0xc0) == 0x80)
			continue; /* continuation byte: already counted */
		out[o] = c < 0x80 && name_byte_ok((char)c) ? (char)c : '_';
		if (out[o] == '.' && o && out[o - 1] == '.')
			out[o] = '_';
		o++;
	}
	out[o] = 0;
}

void td_tgm_node_name(const char *in, char *out, size_t cap)
{
	size_t len = strlen(in), o = 0;
	const char *pre = !len ? "_" : needs_prefix(in, len) ? "v_" : "";

	if (!cap)
		return;
	for (; *pre && o + 1 < cap; pre++)
		out[o++] = *pre;
	size_t i = 0;

	for (; i < len && o + 1 < cap; i++)
		out[o++] = spec_byte((unsigned char)in[i]);
	/* cut: never end inside a UTF-8 sequence (the last one goes) */
	if (i < len) {
		size_t k = o;

		while (k && ((unsigned char)out[k - 1] & 0xc0) == 0x80)
			k--;
		if (k && ((unsigned char)out[k - 1] & 0xc0) == 0xc0)
			o = k - 1;
	}
	out[o] = 0;
}

static bool name_taken(char **names, size_t upto, const char *s)
{
	for (size_t j = 0; j < upto; j++)
		if (!strcmp(names[j], s))
			return true;
	return false;
}

int td_tgm_names_unique(char **names, size_t count, size_t cap)
{
	char **orig = calloc(count ? count : 1, sizeof(*orig));
	unsigned long *ctr = calloc(count ? count : 1, sizeof(*ctr));
	char *cand = malloc(cap ? cap : 1);
	int rc = 0;

	if (!orig || !ctr || !cand) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < count && !rc; i++) {
		unsigned long k = 0;

		orig[i] = strdup(names[i]);
		if (!orig[i]) {
			rc = -ENOMEM;
			break;
		}
		if (!name_taken(names, i, names[i]))
			continue;
		/* the per-base counter continues where the last object of
		 * the same original name stopped */
		for (size_t j = 0; j < i; j++)
			if (!strcmp(orig[j], orig[i]) && ctr[j] > k)
				k = ctr[j];
		do {
			int w = snprintf(cand, cap, "%s_%lu", orig[i], ++k);

			if (w < 0 || (size_t)w >= cap) {
				rc = -ENAMETOOLONG;
				break;
			}
		} while (name_taken(names, i, cand));
		if (rc)
			break;
		ctr[i] = k;
		strcpy(names[i], cand);
	}
out:
	if (orig)
		for (size_t i = 0; i < count; i++)
			free(orig[i]);
	free(orig);
	free(ctr);
	free(cand);
	return rc;
}
