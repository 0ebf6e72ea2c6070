/* SPDX-License-Identifier: MIT */
/*
 * The request headers the HTTP store reads itself (http-hdr.h): Range
 * (RFC 9110 14.2), If-None-Match (13.1.2), If-Match (13.1.1) and
 * If-Range (13.1.5). Plain strings in, no
 * libmicrohttpd, so that tests/fuzz/fuzz-http-hdr.c fuzzes exactly this.
 */
#include "http-hdr.h"

#include <string.h>
#include <strings.h>

/* A number of one or more digits at p into *v; past it, or NULL when
 * there is none or it overflows (strtoull would take signs and spaces). */
static const char *digits(const char *p, uint64_t *v)
{
	const char *s = p;

	for (*v = 0; *p >= '0' && *p <= '9'; p++)
		if (__builtin_mul_overflow(*v, 10, v) ||
		    __builtin_add_overflow(*v, (uint64_t)(*p - '0'), v))
			return NULL;
	return p == s ? NULL : p;
}

/* Whether only optional whitespace (RFC 9110 5.6.3) is left at p: a
 * field value ends there (libmicrohttpd strips the leading, not the
 * trailing). */
static bool at_end(const char *p)
{
	return !p[strspn(p, " \t")];
}

int td__http_range_parse(const char *h, uint64_t len, uint64_t *a,
                         uint64_t *n)
{
	uint64_t x = 0, y = 0;

	if (!h)
		return 0;
	/* the unit is case-insensitive; one range only */
	if (strncasecmp(h, "bytes=", 6) || strchr(h, ','))
		return -1;
	h += 6;
	h += strspn(h, " \t"); /* a range-set is a list: OWS before it */
	if (*h == '-') {
		/* the last y bytes */
		h = digits(h + 1, &y);
		if (!h || !at_end(h) || !y || !len)
			return -1;
		*n = y < len ? y : len;
		*a = len - *n;
		return 1;
	}
	h = digits(h, &x);
	if (!h || *h != '-' || x >= len)
		return -1;
	h++;
	if (at_end(h)) {
		y = len - 1;
	} else {
		h = digits(h, &y);
		if (!h || !at_end(h) || y < x)
			return -1;
		if (y >= len)
			y = len - 1;
	}
	*a = x;
	*n = y - x + 1;
	return 1;
}

/*
 * Whether the list "*" / #entity-tag names etag (NULL: none): weakly
 * (If-None-Match, RFC 9110 13.1.2: a W/ tag matches its strong one) or
 * strongly (If-Match: a W/ tag never matches).
 */
static bool etag_listed(const char *list, const char *etag, bool strong)
{
	size_t len = etag ? strlen(etag) : 0;

	for (const char *p = list;;) {
		bool weak;

		p += strspn(p, " \t,");
		if (!*p)
			return false;
		if (*p == '*')
			return true;
		weak = !strncmp(p, "W/", 2);
		if (weak)
			p += 2;
		if ((!weak || !strong) && etag && !strncmp(p, etag, len) &&
		    strchr(" \t,", p[len]))
			return true;
		/* past this tag: its quotes, then up to the next comma */
		if (*p == '"') {
			const char *q = strchr(p + 1, '"');

			p = q ? q + 1 : p + strlen(p);
		}
		p += strcspn(p, ",");
	}
}

bool td__http_etag_matches(const char *inm, const char *etag)
{
	return inm && etag_listed(inm, etag, false);
}

bool td__http_if_match(const char *im, const char *etag)
{
	return !im || etag_listed(im, etag, true);
}

bool td__http_if_range(const char *ir, const char *etag)
{
	size_t len;

	if (!ir)
		return true;
	if (!etag)
		return false;
	ir += strspn(ir, " \t");
	len = strlen(etag);
	return !strncmp(ir, etag, len) && at_end(ir + len);
}
