/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the request headers the HTTP store parses itself
 * (daemon/http-hdr.c): Range, If-None-Match, If-Match and If-Range,
 * whatever a client sends (the If-None-Match text stands for all three),
 * and for CORS a --http-cors value, Origin and
 * Access-Control-Request-Headers (the If-None-Match text again).
 * Input: 8 bytes of body length (little-endian; fewer: the input's size),
 * then the Range text, a NUL, the If-None-Match text, a NUL, an entity
 * tag's inside, a NUL, a --http-cors value (absent: ""). A range taken
 * must lie inside the body, not be empty, and neither overlap nor touch
 * another (none is taken only for a unit other than bytes, which is
 * ignored; past TD__HTTP_MAX_RANGES the nearest are merged until that
 * many are left, so there are never more); the value twice
 * (two Range lines) gives the same ranges; "*" and the tag itself,
 * alone, weak, or after another tag, must match If-None-Match; If-Match
 * the same but weak; If-Range the tag alone. An Origin is let in only
 * when it is one of the value's origins byte for byte (never with CR or
 * LF), and each of them is; a header list taken stays taken with
 * ",range" after it and is refused with any other name. The Range text
 * as a field name is taken only when it is a token, and never after a
 * name the store reads (what a folded line leaves, http-hdr.h).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http-hdr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_range(const char *h, uint64_t len)
{
	struct td__http_ranges r, two;
	int rc;

	memset(&r, 0, sizeof(r));
	td__http_ranges_add(&r, h, len);
	rc = td__http_ranges_end(&r);
	/* 0 (ignored) only for another unit than bytes */
	if (rc != -1 && rc != 1 &&
	    (rc != 0 || !strncasecmp(h, "bytes=", 6)))
		abort();
	if (rc == 1 && (!r.count || r.count > TD__HTTP_MAX_RANGES))
		abort();
	/* each range taken lies in the body, is not empty, and neither
	 * overlaps nor touches another (they are coalesced) */
	for (unsigned k = 0; rc == 1 && k < r.count; k++) {
		if (r.n[k] == 0 || r.a[k] >= len || r.n[k] > len - r.a[k])
			abort();
		for (unsigned j = 0; j < k; j++)
			if (r.a[j] <= r.a[k] + r.n[k] &&
			    r.a[k] <= r.a[j] + r.n[j])
				abort();
	}
	/* the same value on two lines is the same set, coalesced again */
	memset(&two, 0, sizeof(two));
	td__http_ranges_add(&two, h, len);
	td__http_ranges_add(&two, h, len);
	if (rc == 1 && r.specs * 2 <= TD__HTTP_MAX_RANGES &&
	    (td__http_ranges_end(&two) != 1 || two.count != r.count ||
	     memcmp(two.a, r.a, r.count * sizeof(*r.a)) ||
	     memcmp(two.n, r.n, r.count * sizeof(*r.n))))
		abort();
	/* another unit on a line after a bytes line is a malformed element
	 * of that one list, never a unit to ignore (zarr.md 10) */
	memset(&two, 0, sizeof(two));
	td__http_ranges_add(&two, h, len);
	td__http_ranges_add(&two, "items=0-1", len);
	if (rc != 0 && td__http_ranges_end(&two) != -1)
		abort();
	memset(&r, 0, sizeof(r));
	td__http_ranges_add(&r, NULL, len);
	if (td__http_ranges_end(&r) != 0)
		abort();
}

/* inside: the tag's text between its quotes (quotes dropped) */
static void check_etag(const char *inm, const char *inside)
{
	size_t l = strlen(inside);
	char *tag = malloc(l + 3), *list = malloc(2 * l + 16);
	size_t k = 0;

	if (!tag || !list)
		abort();
	tag[k++] = '"';
	for (size_t i = 0; i < l; i++)
		if (inside[i] != '"')
			tag[k++] = inside[i];
	tag[k++] = '"';
	tag[k] = 0;
	(void)td__http_etag_matches(inm, tag);
	if (td__http_etag_matches(NULL, tag) ||
	    !td__http_etag_matches("*", tag) ||
	    !td__http_etag_matches(tag, tag))
		abort();
	(void)td__http_if_match(inm, tag);
	(void)td__http_if_match(inm, NULL);
	(void)td__http_if_range(inm, tag);
	if (!td__http_if_match(NULL, tag) || !td__http_if_match("*", tag) ||
	    !td__http_if_match(tag, tag) || !td__http_if_range(NULL, tag) ||
	    !td__http_if_range(tag, tag) || td__http_if_range(tag, NULL))
		abort();
	strcpy(list, "W/");
	strcat(list, tag);
	if (!td__http_etag_matches(list, tag) || td__http_if_match(list, tag) ||
	    td__http_if_range(list, tag))
		abort();
	strcpy(list, "\"other\" ,\t");
	strcat(list, tag);
	if (strcmp(tag, "\"other\"") && (!td__http_etag_matches(list, tag) ||
	                                  !td__http_if_match(list, tag)))
		abort();
	free(tag);
	free(list);
}

/* Whether origin is one of list's comma-separated entries, compared
 * here apart from http-hdr.c's own loop. */
static bool listed(const char *list, const char *origin)
{
	size_t n = strlen(origin);

	if (strchr(origin, ','))
		return false; /* two of them, or one and a piece */
	for (const char *p = list; (p = strstr(p, origin)); p++)
		if ((p == list || p[-1] == ',') && (!p[n] || p[n] == ','))
			return true;
	return false;
}

/* list: a --http-cors value; h: an Origin and a header list */
static void check_cors(const char *list, const char *h)
{
	const char *why = NULL;
	size_t hl = strlen(h);
	char *more = malloc(hl + 16);

	if (!more)
		abort();
	if (td__http_cors_allowed(list, NULL) ||
	    !td__http_cors_allowed("*", h) || !td__http_cors_headers_ok(NULL))
		abort();
	if (td__http_cors_check(list, &why) < 0) {
		if (!why)
			abort();
	} else if (strcmp(list, "*")) {
		/* taken: no empty origin, no "*", no byte a header line
		 * could not hold */
		if (!*list || strchr(list, '*') || strpbrk(list, "\r\n \t"))
			abort();
		if (td__http_cors_allowed(list, h) != (*h && listed(list, h)))
			abort();
		/* so never an Origin with a byte that ends a header line */
		if (td__http_cors_allowed(list, h) && strpbrk(h, "\r\n"))
			abort();
		/* each of its origins is let in, and nothing longer */
		for (const char *p = list;; p++) {
			size_t n = strcspn(p, ",");
			char *o = malloc(n + 2);

			if (!o)
				abort();
			memcpy(o, p, n);
			o[n] = o[n + 1] = 0;
			if (!td__http_cors_allowed(list, o))
				abort();
			o[n] = '/';
			if (td__http_cors_allowed(list, o))
				abort();
			free(o);
			p += n;
			if (!*p)
				break;
		}
	}
	memcpy(more, h, hl);
	strcpy(more + hl, ",range");
	if (td__http_cors_headers_ok(h) && !td__http_cors_headers_ok(more))
		abort();
	strcpy(more + hl, ",x-other");
	if (td__http_cors_headers_ok(more))
		abort();
	free(more);
}

/* n: a request's field name (the Range text) */
static void check_name(const char *n)
{
	static const char tchar[] = "!#$%&'*+-.^_`|~0123456789"
	                            "abcdefghijklmnopqrstuvwxyz"
	                            "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
	size_t l = strlen(n);
	char *more = malloc(l + 16);

	if (!more)
		abort();
	if (td__http_field_name_ok(n) && (!*n || n[strspn(n, tchar)]))
		abort();
	strcpy(more, "If-None-Match");
	strcat(more, n);
	if ((*n && td__http_field_name_ok(more)) ||
	    !td__http_field_name_ok("If-None-Match"))
		abort();
	free(more);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t len = size;
	char *s, *inm, *inside, *cors;

	if (size >= 8) {
		len = 0;
		for (int i = 7; i >= 0; i--)
			len = len << 8 | data[i];
		data += 8;
		size -= 8;
	}
	s = malloc(size + 4);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = s[size + 1] = s[size + 2] = s[size + 3] = 0;
	inm = s + strlen(s) + 1;
	inside = inm + strlen(inm) + 1;
	if (inm > s + size + 1)
		inm = s + size + 1;
	if (inside > s + size + 2)
		inside = s + size + 2;
	cors = inside + strlen(inside) + 1;
	if (cors > s + size + 3)
		cors = s + size + 3;
	check_range(s, len);
	check_name(s);
	check_etag(inm, inside);
	check_cors(cors, inm);
	free(s);
	return 0;
}
