/* SPDX-License-Identifier: MIT */
/*
 * The request headers the HTTP store parses itself (http-hdr.c), and the
 * --http-cors origins they are matched against, over
 * plain strings: the daemon passes what libmicrohttpd read, the fuzz
 * target (tests/fuzz/fuzz-http-hdr.c) any bytes.
 */
#ifndef TD_DAEMON_HTTP_HDR_H
#define TD_DAEMON_HTTP_HDR_H

#include <stdbool.h>
#include <stdint.h>

/*
 * The most satisfiable ranges a Range is served as: past that the two
 * nearest on the body are one, over the gap between them, until this
 * many are left (RFC 9110 14.6 lets a server coalesce; 14.6 and 17.15
 * warn of many small or overlapping ranges), so a request cannot make
 * the store produce more than this many parts, each a few hundred bytes
 * of headers, whatever the header's length, and the spec's "Range is
 * never ignored" (zarr.md 10) holds.
 */
#define TD__HTTP_MAX_RANGES 32

/* The Range field lines of a request, as td__http_ranges_add() reads
 * them (zeroed first). */
struct td__http_ranges {
	unsigned lines; /* Range field lines seen */
	unsigned specs; /* range-specs seen, satisfiable or not */
	bool ignore;    /* another unit than bytes */
	bool bad;       /* a malformed range-set */
	bool merged;    /* more than TD__HTTP_MAX_RANGES: nearest ones merged */
	unsigned count; /* the satisfiable ranges: [a[k], a[k] + n[k]) */
	uint64_t a[TD__HTTP_MAX_RANGES], n[TD__HTTP_MAX_RANGES];
};

/*
 * Add a Range field line h (NULL: none) against a body of len bytes (RFC
 * 9110 14.1, 14.2): "bytes=" and a list of range-specs "a-b", "a-", "-n"
 * (digits only, the unit in any case, OWS and empty elements around
 * them). Several lines are one list, as RFC 9110 5.3 combines them (so
 * another unit on a line after a bytes line is a malformed element). A
 * satisfiable range is taken, clamped to the body; an unsatisfiable one
 * (a start at or past the end, "-0") is dropped.
 */
void td__http_ranges_add(struct td__http_ranges *r, const char *h,
                         uint64_t len);
/*
 * What to send once every line is added: 0 the whole body (no Range, or
 * a unit other than bytes, which RFC 9110 14.2 says to ignore); -1 416 (a
 * malformed range-set, or no range satisfiable); 1 r->count ranges, each
 * inside the body and not empty, overlapping or touching ones coalesced
 * into one, so none overlaps or touches another, in the order the
 * request named them (more than TD__HTTP_MAX_RANGES: the nearest merged
 * over their gaps until that many are left).
 */
int td__http_ranges_end(struct td__http_ranges *r);
/* Whether If-None-Match (NULL: absent) names etag: "*", or a list of
 * tags compared weakly (RFC 9110). */
bool td__http_etag_matches(const char *inm, const char *etag);
/*
 * Whether If-Match im holds (RFC 9110 13.1.1): absent (NULL), "*", or a
 * list naming etag compared strongly (a W/ tag never matches). etag NULL:
 * the body has none, so only "*" holds.
 */
bool td__http_if_match(const char *im, const char *etag);
/*
 * Whether the Range header may stand beside If-Range ir (13.1.5): yes
 * without one (NULL); with one only when it is etag itself (strong,
 * around optional whitespace). A weak tag, a date (no body here has a
 * Last-Modified) or another tag: no, the whole body is sent.
 */
bool td__http_if_range(const char *ir, const char *etag);

/*
 * CORS (the Fetch standard; docs/zarr.md "From a browser: CORS").
 *
 * Whether list, the value of --http-cors, has a form the store takes:
 * "*" alone, or a comma-separated list of origins as a browser sends
 * them in Origin (RFC 6454 6.1): "http://" or "https://", a host of
 * lowercase letters, digits, '-', '.' and '_' (or an IPv6 address in
 * brackets), an optional ":PORT" (1 to 65535, not the scheme's default,
 * which browsers leave out), nothing after. 0, or -EINVAL with *why.
 */
int td__http_cors_check(const char *list, const char **why);
/*
 * Whether a request's Origin (NULL: absent) may read: with list "*" any
 * Origin, else only one equal, byte for byte, to an origin of list (one
 * td__http_cors_check() took), so that nothing else is ever echoed.
 */
bool td__http_cors_allowed(const char *list, const char *origin);
/*
 * Whether a preflight's Access-Control-Request-Headers h (NULL: absent)
 * names only headers the store reads: Range, If-None-Match, If-Match and
 * If-Range, in any case, as a list (empty elements and whitespace around
 * them allowed, RFC 9110 5.6.1).
 */
bool td__http_cors_headers_ok(const char *h);

/*
 * Whether a request's field name, as libmicrohttpd hands it on, may be
 * answered: a token (RFC 9110 5.6.2) and not one of the names the store
 * reads (Range, If-Range, If-Match, If-None-Match, Origin,
 * Access-Control-Request-Method, -Headers) with more after it, in any
 * case. libmicrohttpd up to 0.9.75 appends a folded line (obs-fold, RFC
 * 9112 5.2) to the name of the field it continues, not to its value:
 * "Range: bytes=0-\r\n 3" reaches the store as a field "Range3" whose
 * value is "bytes=0-", so the Range would go unseen and the whole body
 * out as a 200. Such a request is refused (400) instead, and so is any
 * name a fold left with other bytes than a token's (" Host", "Range,5-6").
 */
bool td__http_field_name_ok(const char *name);

#endif
