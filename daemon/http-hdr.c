/* SPDX-License-Identifier: MIT */
/*
 * The request headers the HTTP store reads itself (http-hdr.h): Range
 * (RFC 9110 14.2), If-None-Match (13.1.2), If-Match (13.1.1) and
 * If-Range (13.1.5), and for CORS Origin and a preflight's
 * Access-Control-Request-Headers against --http-cors. Plain strings in,
 * no libmicrohttpd, so that tests/fuzz/fuzz-http-hdr.c fuzzes exactly
 * this.
 */
#include "http-hdr.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <strings.h>

/*
 * A number of one or more digits at p into *v, UINT64_MAX when it is
 * larger (RFC 9110 14.1.1 sets no limit: such a last-pos or suffix-length
 * is clamped to the body, such a first-pos is past it); past it, or NULL
 * when there is none (strtoull would take signs and spaces).
 */
static const char *digits(const char *p, uint64_t *v)
{
	const char *s = p;

	for (*v = 0; *p >= '0' && *p <= '9'; p++)
		if (__builtin_mul_overflow(*v, 10, v) ||
		    __builtin_add_overflow(*v, (uint64_t)(*p - '0'), v))
			*v = UINT64_MAX;
	return p == s ? NULL : p;
}

/* Whether only optional whitespace (RFC 9110 5.6.3) is left at p: a
 * field value ends there (libmicrohttpd strips the leading, not the
 * trailing). */
static bool at_end(const char *p)
{
	return !p[strspn(p, " \t")];
}

/* Whether h is "UNIT=..." with UNIT a token (RFC 9110 5.6.2) other
 * than bytes (the caller has seen it is not). */
static bool other_unit(const char *h)
{
	static const char tchar[] = "!#$%&'*+-.^_`|~";
	size_t n = 0;

	while (h[n] && (isalnum((unsigned char)h[n]) || strchr(tchar, h[n])))
		n++;
	return n && h[n] == '=';
}

int td__http_range_parse(const char *h, uint64_t len, uint64_t *a,
                         uint64_t *n)
{
	uint64_t x = 0, y = 0;

	if (!h)
		return 0;
	/* a unit other than bytes: ignored, the whole body (RFC 9110 14.2:
	 * MUST); the unit is case-insensitive; one range only */
	if (strncasecmp(h, "bytes=", 6))
		return other_unit(h) ? 0 : -1;
	if (strchr(h, ','))
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

/* ---- CORS ---- */

/*
 * One origin of --http-cors, the n bytes at o: 0, or -EINVAL with *why.
 * Only the form a browser sends (RFC 6454 6.1, the URL standard's
 * serialisation): anything else would never equal an Origin, and the
 * operator would see no error, only a browser that is refused.
 */
static int origin_check(const char *o, size_t n, const char **why)
{
	const char *end = o + n, *host, *p;
	unsigned long port = 0;
	bool https = n >= 8 && !strncmp(o, "https://", 8);

	if (!https && (n < 7 || strncmp(o, "http://", 7))) {
		*why = "an origin is http:// or https:// and a host";
		return -EINVAL;
	}
	host = p = o + (https ? 8 : 7);
	if (p < end && *p == '[') {
		/* an IPv6 literal; the browser writes it compressed and in
		 * lowercase (RFC 5952), which only a comparison shows */
		while (++p < end && *p && strchr("0123456789abcdef:.", *p))
			;
		if (p == end || *p != ']' || p == host + 1) {
			*why = "an IPv6 host is [lowercase hex digits and "
			       "colons]";
			return -EINVAL;
		}
		p++;
	} else {
		while (p < end && *p && strchr("abcdefghijklmnopqrstuvwxyz"
		                               "0123456789-._",
		                               *p))
			p++;
		if (p == host) {
			*why = "an origin needs a host, in lowercase "
			       "(letters, digits, '-', '.', '_')";
			return -EINVAL;
		}
	}
	if (p < end && *p == ':') {
		const char *d = ++p;

		for (; p < end && *p >= '0' && *p <= '9' && port <= 65535; p++)
			port = port * 10 + (unsigned long)(*p - '0');
		if (p == d || *d == '0' || port > 65535) {
			*why = "a port is 1 to 65535, without leading zeros";
			return -EINVAL;
		}
		if (port == (https ? 443u : 80u)) {
			*why = "a browser leaves the scheme's default port "
			       "out of Origin: drop it";
			return -EINVAL;
		}
	}
	if (p < end) {
		*why = "an origin is scheme://host[:port] in lowercase, "
		       "with no path, not even \"/\"";
		return -EINVAL;
	}
	return 0;
}

int td__http_cors_check(const char *list, const char **why)
{
	if (!strcmp(list, "*"))
		return 0;
	if (strpbrk(list, " \t")) {
		*why = "no spaces: origins are separated by commas alone";
		return -EINVAL;
	}
	for (const char *p = list;; p++) {
		size_t n = strcspn(p, ",");

		if (!n) {
			*why = "an empty origin (\"*\" alone, or origins "
			       "separated by single commas, no spaces)";
			return -EINVAL;
		}
		if (n == 1 && *p == '*') {
			*why = "\"*\" stands alone, not in a list";
			return -EINVAL;
		}
		if (origin_check(p, n, why) < 0)
			return -EINVAL;
		p += n;
		if (!*p)
			return 0;
	}
}

bool td__http_cors_allowed(const char *list, const char *origin)
{
	size_t len;

	if (!origin)
		return false;
	if (!strcmp(list, "*"))
		return true;
	len = strlen(origin);
	for (const char *p = list;; p++) {
		size_t n = strcspn(p, ",");

		if (n == len && !memcmp(p, origin, n))
			return true;
		p += n;
		if (!*p)
			return false;
	}
}

bool td__http_cors_headers_ok(const char *h)
{
	static const char *const ok[] = {"range", "if-none-match",
	                                 "if-match", "if-range"};

	if (!h)
		return true;
	for (const char *p = h;;) {
		size_t n, i;

		p += strspn(p, " \t,");
		if (!*p)
			return true;
		n = strcspn(p, " \t,");
		for (i = 0; i < sizeof(ok) / sizeof(*ok); i++)
			if (strlen(ok[i]) == n && !strncasecmp(p, ok[i], n))
				break;
		if (i == sizeof(ok) / sizeof(*ok))
			return false;
		/* a name ends at OWS and then a comma or the end: "range
		 * x" is not two names */
		p += n;
		p += strspn(p, " \t");
		if (*p && *p != ',')
			return false;
	}
}
