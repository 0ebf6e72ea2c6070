/* SPDX-License-Identifier: MIT */
/*
 * Naming data objects (../shared/specs/tensogram.md §18, see tgm-desc.h):
 * the lookup chain over metadata and descriptor, sanitising a name into
 * a tensord name, and unique suffixes for repeated names.
 */
#include "tgm-desc.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tgm-cbor.h"
#include <xxhash.h>

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
		desc = td__cbor_untag(desc);
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

/*
 * An open-addressing set of strings (borrowed) with a counter each, by
 * their seeded XXH3: td_tgm_names_unique() asks "taken?" for every name
 * and candidate, and a walk over the names before it made that O(n^2) -
 * 32 million compares for 8000 tensors, on the daemon's loop for every
 * request of its HTTP store.
 */
struct strset {
	const char **key;
	unsigned long *val;
	size_t mask, count;
	uint64_t seed;
};

static int strset_init(struct strset *t, size_t n, uint64_t seed)
{
	size_t cap = 16;

	while (cap < 2 * n + 2)
		cap *= 2;
	t->key = calloc(cap, sizeof(*t->key));
	t->val = calloc(cap, sizeof(*t->val));
	t->mask = cap - 1;
	t->count = 0;
	t->seed = seed;
	return t->key && t->val ? 0 : -ENOMEM;
}

/* The slot of s: where it is, or the empty one where it would go. */
static size_t strset_slot(const struct strset *t, const char *s)
{
	size_t i = XXH3_64bits_withSeed(s, strlen(s), t->seed) & t->mask;

	while (t->key[i] && strcmp(t->key[i], s))
		i = (i + 1) & t->mask;
	return i;
}

static bool strset_has(const struct strset *t, const char *s)
{
	return t->key[strset_slot(t, s)] != NULL;
}

static void strset_fini(struct strset *t)
{
	free(t->key);
	free(t->val);
	t->key = NULL;
	t->val = NULL;
}

/* Room for one more key: at most half full, doubled (rehashed) when it
 * would be more, so that the probes stay short however many names come
 * (a stream's, message by message). 0 or -ENOMEM (t kept). */
static int strset_room(struct strset *t)
{
	struct strset n;

	if (2 * (t->count + 1) + 2 <= t->mask + 1)
		return 0;
	if (strset_init(&n, (t->mask + 1) / 2, t->seed) < 0) {
		strset_fini(&n);
		return -ENOMEM;
	}
	for (size_t i = 0; i <= t->mask; i++)
		if (t->key[i]) {
			size_t j = strset_slot(&n, t->key[i]);

			n.key[j] = t->key[i];
			n.val[j] = t->val[i];
		}
	n.count = t->count;
	strset_fini(t);
	*t = n;
	return 0;
}

/* Insert s (kept, not copied) or find it: its counter; NULL when out of
 * memory. */
static unsigned long *strset_at(struct strset *t, const char *s)
{
	size_t i;

	if (strset_room(t) < 0)
		return NULL;
	i = strset_slot(t, s);
	if (!t->key[i]) {
		t->key[i] = s;
		t->count++;
	}
	return &t->val[i];
}

/*
 * base_k into cand (cap bytes), base cut at a character's start when the
 * whole does not fit. 0, or -ENAMETOOLONG when the suffix alone does not.
 */
static int candidate(char *cand, size_t cap, const char *base,
		     unsigned long k)
{
	char suf[24];
	int sl = snprintf(suf, sizeof(suf), "_%lu", k);
	size_t len = strlen(base), keep;

	if (sl < 0 || (size_t)sl + 1 >= cap)
		return -ENAMETOOLONG;
	keep = cap - 1 - (size_t)sl;
	if (len <= keep)
		keep = len;
	else /* base[keep], the first byte cut, may not continue a char */
		while (keep && ((unsigned char)base[keep] & 0xc0) == 0x80)
			keep--;
	memcpy(cand, base, keep);
	strcpy(cand + keep, suf);
	return 0;
}

/*
 * taken: the names settled so far (borrowed: the callers' buffers);
 * bases: a renamed name's original (orig[], owned), with the last suffix
 * given to it.
 */
struct td_tgm_names {
	struct strset taken, bases;
	char **orig;
	size_t norig, orig_cap, cap;
	char *cand;
};

int td_tgm_names_new(size_t cap, uint64_t seed, struct td_tgm_names **out)
{
	struct td_tgm_names *s = calloc(1, sizeof(*s));

	*out = NULL;
	if (!s)
		return -ENOMEM;
	s->cap = cap;
	s->cand = malloc(cap ? cap : 1);
	if (!s->cand || strset_init(&s->taken, 0, seed) < 0 ||
	    strset_init(&s->bases, 0, seed) < 0) {
		td_tgm_names_free(s);
		return -ENOMEM;
	}
	*out = s;
	return 0;
}

void td_tgm_names_free(struct td_tgm_names *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->norig; i++)
		free(s->orig[i]);
	free(s->orig);
	free(s->cand);
	strset_fini(&s->taken);
	strset_fini(&s->bases);
	free(s);
}

int td_tgm_names_add(struct td_tgm_names *s, char **names, size_t count)
{
	int rc = 0;

	for (size_t i = 0; i < count && !rc; i++) {
		unsigned long *k;
		char *o;

		if (!strset_has(&s->taken, names[i])) {
			if (!strset_at(&s->taken, names[i]))
				rc = -ENOMEM;
			continue;
		}
		if (s->norig == s->orig_cap) {
			size_t c = s->orig_cap ? 2 * s->orig_cap : 8;
			char **n = realloc(s->orig, c * sizeof(*n));

			if (!n)
				return -ENOMEM;
			s->orig = n;
			s->orig_cap = c;
		}
		o = strdup(names[i]);
		if (!o)
			return -ENOMEM;
		s->orig[s->norig++] = o;
		/* the per-base counter continues where the last object of
		 * the same original name stopped */
		k = strset_at(&s->bases, o);
		if (!k)
			return -ENOMEM;
		do {
			rc = candidate(s->cand, s->cap, o, ++*k);
		} while (!rc && strset_has(&s->taken, s->cand));
		if (rc)
			break;
		strcpy(names[i], s->cand);
		if (!strset_at(&s->taken, names[i]))
			rc = -ENOMEM;
	}
	return rc;
}

int td_tgm_names_unique(char **names, size_t count, size_t cap)
{
	return td_tgm_names_unique_seeded(names, count, cap, 0);
}

int td_tgm_names_unique_seeded(char **names, size_t count, size_t cap,
			       uint64_t seed)
{
	struct td_tgm_names *s;
	int rc = td_tgm_names_new(cap, seed, &s);

	if (!rc)
		rc = td_tgm_names_add(s, names, count);
	td_tgm_names_free(s);
	return rc;
}
