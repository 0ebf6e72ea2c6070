/* SPDX-License-Identifier: MIT */
/*
 * The request headers the HTTP store reads itself (http-hdr.h): Range
 * (RFC 9110 14.2), If-None-Match (13.1.2), If-Match (13.1.1) and
 * If-Range (13.1.5), and for CORS Origin and a preflight's
 * Access-Control-Request-Headers against --http-cors, and the field
 * names a folded line leaves behind. Plain strings in,
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

/* The length of the token (RFC 9110 5.6.2) at h: 0 when none. */
static size_t token_len(const char *h)
{
	static const char tchar[] = "!#$%&'*+-.^_`|~";
	size_t n = 0;

	while (h[n] && (isalnum((unsigned char)h[n]) || strchr(tchar, h[n])))
		n++;
	return n;
}

/* Whether h is "UNIT=..." with UNIT a token (RFC 9110 5.6.2) other
 * than bytes (the caller has seen it is not). */
static bool other_unit(const char *h)
{
	size_t n = token_len(h);

	return n && h[n] == '=';
}

/*
 * Range k of r: [a, a + n), in the request's order. Past
 * TD__HTTP_MAX_RANGES ranges the two nearest on the body (the least gap
 * between them, ties to the first; overlapping ones first of all)
 * become one range, over the gap, where the earlier asked of the two
 * stood (RFC 9110 14.6: a server may coalesce ranges): the spec's "Range
 * is never ignored" holds, a request cannot make more parts than the
 * cap, no byte is sent twice, and the bytes sent that nobody asked for
 * are those of the least gaps (until 2026-12-06 one range spanned all).
 */
static void range_put(struct td__http_ranges *r, uint64_t a, uint64_t n)
{
	enum { M = TD__HTTP_MAX_RANGES };
	uint64_t ra[M + 1], rn[M + 1], best = UINT64_MAX, hi;
	unsigned idx[M + 1], p = 0, q = 0;

	if (r->count < M) {
		r->a[r->count] = a;
		r->n[r->count++] = n;
		return;
	}
	memcpy(ra, r->a, sizeof(r->a));
	memcpy(rn, r->n, sizeof(r->n));
	ra[M] = a;
	rn[M] = n;
	/* by start (insertion sort, stable), then the least gap between
	 * neighbours: 0 for ranges that overlap or touch */
	for (unsigned i = 0; i <= M; i++) {
		unsigned k = i;

		for (; k > 0 && ra[idx[k - 1]] > ra[i]; k--)
			idx[k] = idx[k - 1];
		idx[k] = i;
	}
	for (unsigned i = 0; i < M; i++) {
		uint64_t end = ra[idx[i]] + rn[idx[i]], next = ra[idx[i + 1]];
		uint64_t gap = next > end ? next - end : 0;

		if (gap < best) {
			best = gap;
			p = idx[i];
			q = idx[i + 1];
		}
	}
	hi = ra[p] + rn[p] > ra[q] + rn[q] ? ra[p] + rn[p] : ra[q] + rn[q];
	if (q < p) { /* the one asked first keeps its place */
		unsigned t = p;

		p = q;
		q = t;
	}
	ra[p] = ra[p] < ra[q] ? ra[p] : ra[q];
	rn[p] = hi - ra[p];
	for (unsigned k = q; k < M; k++) {
		ra[k] = ra[k + 1];
		rn[k] = rn[k + 1];
	}
	memcpy(r->a, ra, sizeof(r->a));
	memcpy(r->n, rn, sizeof(r->n));
	r->merged = true;
}

/*
 * One range-spec at h (RFC 9110 14.1.1) against len bytes: a satisfiable
 * one is added to r (an end past the body clamped, as is a suffix longer
 * than it), an unsatisfiable one (a start at or past the end, a suffix of
 * 0, any range of an empty body) is dropped; past it, or NULL when it is
 * malformed (no digits, "b < a").
 */
static const char *range_spec(const char *h, uint64_t len,
                              struct td__http_ranges *r)
{
	const char *e;
	uint64_t x, y;

	if (*h == '-') {
		/* the last y bytes */
		h = digits(h + 1, &y);
		if (y > len)
			y = len;
		if (h && y)
			range_put(r, len - y, y);
		return h;
	}
	h = digits(h, &x);
	if (!h || *h != '-')
		return NULL;
	e = digits(++h, &y);
	if (!e) {
		y = UINT64_MAX; /* "x-": to the end */
	} else if (y < x) {
		return NULL;
	} else {
		h = e;
	}
	if (x < len)
		range_put(r, x, (y < len ? y : len - 1) - x + 1);
	return h;
}

void td__http_ranges_add(struct td__http_ranges *r, const char *h,
                         uint64_t len)
{
	unsigned here = 0;

	if (!h || r->ignore || r->bad)
		return;
	r->lines++;
	/* a unit other than bytes: ignored, the whole body (RFC 9110 14.2:
	 * MUST); the unit is case-insensitive. After a bytes line it is no
	 * unit but an element of that line's range-set (the lines are one
	 * value, "bytes=0-1, items=0-1"), a malformed one: ignoring it
	 * would send the whole body to a reader that asked for a range */
	if (strncasecmp(h, "bytes=", 6)) {
		if (r->lines == 1 && other_unit(h))
			r->ignore = true;
		else
			r->bad = true;
		return;
	}
	/* a range-set is a list (RFC 9110 5.6.1): OWS around its elements,
	 * and empty ones, which do not count */
	for (h += 6;;) {
		h += strspn(h, " \t");
		if (*h == ',') {
			h++;
			continue;
		}
		if (!*h)
			break;
		r->specs++;
		here++;
		h = range_spec(h, len, r);
		if (h)
			h += strspn(h, " \t");
		if (!h || (*h && *h != ',')) {
			r->bad = true;
			return;
		}
	}
	if (!here)
		r->bad = true; /* "bytes=" alone: no range-set */
}

/*
 * Coalesce r's ranges that overlap or touch (RFC 9110 14.6 allows it,
 * whatever their order): each group becomes one range, placed where its
 * first range came in the request, so ranges that stand alone keep the
 * request's order (15.3.7.2). At most TD__HTTP_MAX_RANGES: a few compares.
 */
static void coalesce(struct td__http_ranges *r)
{
	unsigned idx[TD__HTTP_MAX_RANGES], first[TD__HTTP_MAX_RANGES];
	uint64_t ga[TD__HTTP_MAX_RANGES], gend[TD__HTTP_MAX_RANGES];
	unsigned groups = 0, count = r->count;

	/* the ranges by start (insertion sort, stable) */
	for (unsigned i = 0; i < count; i++) {
		unsigned k = i;

		for (; k > 0 && r->a[idx[k - 1]] > r->a[i]; k--)
			idx[k] = idx[k - 1];
		idx[k] = i;
	}
	for (unsigned i = 0; i < count; i++) {
		unsigned j = idx[i];
		uint64_t end = r->a[j] + r->n[j];

		if (groups && r->a[j] <= gend[groups - 1]) {
			if (end > gend[groups - 1])
				gend[groups - 1] = end;
			if (j < first[groups - 1])
				first[groups - 1] = j;
			continue;
		}
		ga[groups] = r->a[j];
		gend[groups] = end;
		first[groups++] = j;
	}
	/* the groups back in the order their first ranges were asked */
	r->count = 0;
	for (unsigned i = 0; i < count; i++)
		for (unsigned g = 0; g < groups; g++)
			if (first[g] == i)
				range_put(r, ga[g], gend[g] - ga[g]);
}

int td__http_ranges_end(struct td__http_ranges *r)
{
	if (!r->lines || r->ignore)
		return 0;
	if (r->bad || !r->count)
		return -1;
	coalesce(r);
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

bool td__http_field_name_ok(const char *name)
{
	/* what the store reads of a request, Host aside: a fold of Host
	 * leaves an HTTP/1.1 request without one, a 400 already, and an
	 * HTTP/1.0 one needs none */
	static const char *const read[] = {
	        "range", "if-range", "if-match", "if-none-match", "origin",
	        "access-control-request-method",
	        "access-control-request-headers"};
	size_t n = token_len(name);

	if (!n || name[n])
		return false;
	for (size_t i = 0; i < sizeof(read) / sizeof(*read); i++) {
		size_t k = strlen(read[i]);

		if (n > k && !strncasecmp(name, read[i], k))
			return false;
	}
	return true;
}
