/* SPDX-License-Identifier: MIT */
/*
 * Replies of the HTTP store (http.h): every status counted for /metrics,
 * the Range header of RFC 9110, the headers every body carries and, with
 * --http-cors, those a browser needs to let a page of another origin
 * read them.
 */
#include "http.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct td__http_stats td__http_stats;
const unsigned td__http_codes[TD__HTTP_CODES] = {200, 206, 304, 404, 405, 416};

static void count(unsigned code)
{
	for (size_t i = 0; i < TD__HTTP_CODES; i++)
		if (td__http_codes[i] == code) {
			td__http_stats.by_code[i]++;
			return;
		}
	td__http_stats.other++;
}

/*
 * The CORS headers of a reply to c (the Fetch standard, "CORS protocol"):
 * to every reply, errors included, so that a page sees a 404 or a 416 as
 * such and not as a failed fetch. Only an Origin of --http-cors is echoed
 * (td__http_cors_allowed(): byte for byte one of the operator's); "*"
 * answers "*", the same to everyone.
 */
static void cors(struct MHD_Connection *c, struct MHD_Response *r)
{
	const char *list = td__d->opts.http_cors, *origin;
	bool star;

	if (!list)
		return;
	/* the reply depends on Origin: a cache must not give one origin's
	 * reply (or one without any) to another, so Vary goes on every
	 * reply, also to a request without Origin (Fetch, "CORS protocol
	 * and HTTP caches"). "*" is the same reply to every request, one
	 * without Origin included (a page's fetch may be answered from a
	 * cache that stored a navigation's reply): no Vary. */
	star = !strcmp(list, "*");
	if (!star)
		MHD_add_response_header(r, "Vary", "Origin");
	origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
	if (!star && !td__http_cors_allowed(list, origin))
		return;
	MHD_add_response_header(r, "Access-Control-Allow-Origin",
	                        star ? "*" : origin);
	/* what a Zarr reader looks at beyond the safelisted headers
	 * (Content-Type...); Last-Modified is never sent */
	MHD_add_response_header(r, "Access-Control-Expose-Headers",
	                        "ETag, Content-Range, Content-Length, "
	                        "Accept-Ranges");
}

enum MHD_Result td__http_queue(struct MHD_Connection *c, unsigned code,
                               struct MHD_Response *r)
{
	enum MHD_Result res;

	if (!r)
		return MHD_NO;
	count(code);
	cors(c, r);
	res = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return res;
}

enum MHD_Result td__http_text(struct MHD_Connection *c, unsigned code,
                              const char *msg)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(
	        strlen(msg), (void *)(uintptr_t)msg, MHD_RESPMEM_PERSISTENT);

	if (r && code == 405)
		MHD_add_response_header(r, "Allow", "GET, HEAD");
	if (r)
		MHD_add_response_header(r, "Content-Type", "text/plain");
	return td__http_queue(c, code, r);
}

static enum MHD_Result count_range(void *cls, enum MHD_ValueKind kind,
                                   const char *key, const char *value)
{
	(void)kind;
	(void)value;
	if (!strcasecmp(key, "Range"))
		(*(unsigned *)cls)++;
	return MHD_YES;
}

/* td__http_range_parse() (http-hdr.h) of c's Range header; 0 (the whole
 * body) when an If-Range does not name etag. */
static int range(struct MHD_Connection *c, uint64_t len, const char *etag,
                 uint64_t *a, uint64_t *n)
{
	unsigned lines = 0;

	/* an If-Range naming another version: the whole body (RFC 9110
	 * 13.1.5), never a slice of this one spliced onto the old */
	if (!td__http_if_range(MHD_lookup_connection_value(c, MHD_HEADER_KIND,
	                                                   "If-Range"),
	                       etag))
		return 0;
	/* Range is one value: two lines are "a, b" (RFC 9110 5.3), several
	 * ranges, which this server does not serve; libmicrohttpd's lookup
	 * would give the first alone */
	MHD_get_connection_values(c, MHD_HEADER_KIND, count_range, &lines);
	if (lines > 1)
		return -1;
	return td__http_range_parse(
	        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Range"), len,
	        a, n);
}

/* The reader of a 304's response, which libmicrohttpd never calls: a
 * call ends the connection rather than send a body. */
static ssize_t no_body(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)cls;
	(void)pos;
	(void)buf;
	(void)max;
	return MHD_CONTENT_READER_END_WITH_ERROR;
}

/* 304 with etag and a 200's Content-Length, len, and no body. */
static enum MHD_Result not_modified(struct MHD_Connection *c, uint64_t len,
                                    const char *etag)
{
	/* RFC 9110 15.4.5: a 304's Content-Length, if any, is the 200's.
	 * libmicrohttpd sends no body with a 304 but writes the response's
	 * size as its Content-Length, so the size is the body's and the
	 * reader is never called. */
	struct MHD_Response *r = MHD_create_response_from_callback(
	        len, 4096, no_body, NULL, NULL);

	if (r)
		MHD_add_response_header(r, "ETag", etag);
	return td__http_queue(c, MHD_HTTP_NOT_MODIFIED, r);
}

/* 416 with Content-Range: bytes * /len. */
static enum MHD_Result unsatisfiable(struct MHD_Connection *c, uint64_t len)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(
	        0, NULL, MHD_RESPMEM_PERSISTENT);
	char cr[64];

	snprintf(cr, sizeof(cr), "bytes */%" PRIu64, len);
	if (r)
		MHD_add_response_header(r, "Content-Range", cr);
	return td__http_queue(c, MHD_HTTP_RANGE_NOT_SATISFIABLE, r);
}

int td__http_conditions(struct MHD_Connection *c, uint64_t len,
                        const char *etag, uint64_t *a, uint64_t *n,
                        enum MHD_Result *res)
{
	int rg;

	/* RFC 9110 13.2.2: If-Match first, before If-None-Match */
	if (!td__http_if_match(MHD_lookup_connection_value(c, MHD_HEADER_KIND,
	                                                   "If-Match"),
	                       etag)) {
		*res = td__http_text(c, MHD_HTTP_PRECONDITION_FAILED,
		                     "If-Match names no current version of "
		                     "this key\n");
		return -1;
	}
	if (td__http_etag_matches(MHD_lookup_connection_value(
	                                  c, MHD_HEADER_KIND, "If-None-Match"),
	                          etag)) {
		*res = not_modified(c, len, etag);
		return -1;
	}
	*a = 0;
	rg = range(c, len, etag, a, n);
	if (rg < 0) {
		*res = unsatisfiable(c, len);
		return -1;
	}
	if (rg == 0)
		*n = len;
	return rg;
}

/* Add Content-Range and the common headers; 200 or 206. */
unsigned td__http_finish(struct MHD_Response *r, int ranged, uint64_t a,
                         uint64_t n, uint64_t len, const char *type,
                         const char *etag)
{
	char cr[96];

	MHD_add_response_header(r, "Accept-Ranges", "bytes");
	MHD_add_response_header(r, "Content-Type", type);
	if (etag)
		MHD_add_response_header(r, "ETag", etag);
	if (!ranged)
		return MHD_HTTP_OK;
	snprintf(cr, sizeof(cr), "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, a,
	         a + n - 1, len);
	MHD_add_response_header(r, "Content-Range", cr);
	return MHD_HTTP_PARTIAL_CONTENT;
}

enum MHD_Result td__http_preflight(struct MHD_Connection *c)
{
	const char *m = MHD_lookup_connection_value(
	        c, MHD_HEADER_KIND, "Access-Control-Request-Method");
	struct MHD_Response *r;

	/* a method other than the two the store has, a header it does not
	 * read, an origin not listed, or no preflight at all: OPTIONS is
	 * a method the store does not have, as without --http-cors */
	if (!m || (strcmp(m, "GET") && strcmp(m, "HEAD")) ||
	    !td__http_cors_allowed(td__d->opts.http_cors,
	                           MHD_lookup_connection_value(
	                                   c, MHD_HEADER_KIND, "Origin")) ||
	    !td__http_cors_headers_ok(MHD_lookup_connection_value(
	            c, MHD_HEADER_KIND, "Access-Control-Request-Headers")))
		return td__http_text(c, MHD_HTTP_METHOD_NOT_ALLOWED,
		                     "read-only: GET and HEAD only\n");
	r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Access-Control-Allow-Methods",
	                        "GET, HEAD, OPTIONS");
	/* the fixed set, never the request's own text */
	MHD_add_response_header(r, "Access-Control-Allow-Headers",
	                        "Range, If-None-Match, If-Match, If-Range");
	MHD_add_response_header(r, "Access-Control-Max-Age", "600");
	return td__http_queue(c, MHD_HTTP_NO_CONTENT, r);
}
