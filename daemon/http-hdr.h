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
 * A Range header h (NULL: absent) against a body of len bytes (RFC 9110):
 * 0 none (or a unit other than bytes, which RFC 9110 14.2 says to ignore),
 * 1 a satisfiable range in [*a, *a + *n), -1 unsatisfiable (or a form this
 * server does not serve: several ranges).
 */
int td__http_range_parse(const char *h, uint64_t len, uint64_t *a,
                         uint64_t *n);
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

#endif
