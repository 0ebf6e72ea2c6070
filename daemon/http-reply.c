/* SPDX-License-Identifier: MIT */
/*
 * Replies of the HTTP store (http.h): every status counted for /metrics,
 * the Range header of RFC 9110 and the headers every body carries.
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

enum MHD_Result td__http_queue(struct MHD_Connection *c, unsigned code,
                               struct MHD_Response *r)
{
	enum MHD_Result res;

	if (!r)
		return MHD_NO;
	count(code);
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

/*
 * The Range header against a body of len bytes (RFC 9110): 0 none, 1 a
 * satisfiable range in [*a, *a + *n), -1 unsatisfiable (or a form this
 * server does not serve: several ranges).
 */
int td__http_range(struct MHD_Connection *c, uint64_t len, uint64_t *a,
                   uint64_t *n)
{
	const char *h =
	        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Range");
	uint64_t x = 0, y = 0;

	if (!h)
		return 0;
	/* the unit is case-insensitive; one range only */
	if (strncasecmp(h, "bytes=", 6) || strchr(h, ','))
		return -1;
	h += 6;
	if (*h == '-') {
		/* the last y bytes */
		h = digits(h + 1, &y);
		if (!h || *h || !y || !len)
			return -1;
		*n = y < len ? y : len;
		*a = len - *n;
		return 1;
	}
	h = digits(h, &x);
	if (!h || *h != '-' || x >= len)
		return -1;
	h++;
	if (!*h) {
		y = len - 1;
	} else {
		h = digits(h, &y);
		if (!h || *h || y < x)
			return -1;
		if (y >= len)
			y = len - 1;
	}
	*a = x;
	*n = y - x + 1;
	return 1;
}

bool td__http_etag_matches(const char *inm, const char *etag)
{
	size_t len = strlen(etag);

	if (!inm)
		return false;
	/* If-None-Match: "*" / #entity-tag, compared weakly (RFC 9110
	 * 13.1.2): W/ and the list around the tag do not count */
	for (const char *p = inm;;) {
		p += strspn(p, " \t,");
		if (!*p)
			return false;
		if (*p == '*')
			return true;
		if (!strncmp(p, "W/", 2))
			p += 2;
		if (!strncmp(p, etag, len) && strchr(" \t,", p[len]))
			return true;
		/* past this tag: its quotes, then up to the next comma */
		if (*p == '"') {
			const char *q = strchr(p + 1, '"');

			p = q ? q + 1 : p + strlen(p);
		}
		p += strcspn(p, ",");
	}
}

enum MHD_Result td__http_unsatisfiable(struct MHD_Connection *c, uint64_t len)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(
	        0, NULL, MHD_RESPMEM_PERSISTENT);
	char cr[64];

	snprintf(cr, sizeof(cr), "bytes */%" PRIu64, len);
	if (r)
		MHD_add_response_header(r, "Content-Range", cr);
	return td__http_queue(c, MHD_HTTP_RANGE_NOT_SATISFIABLE, r);
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
