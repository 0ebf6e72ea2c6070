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
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

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
	/* every 503 is a state that passes (a fence, a limit) */
	if (r && code == 503)
		MHD_add_response_header(r, "Retry-After", "1");
	/* a malformed request (no Host, a folded line, a body whose end is
	 * in doubt, a transfer coding it cannot read): its connection is
	 * not trusted with another, whose start may be in doubt (RFC 9112
	 * 9.6 lets a server close; 6.1 and 6.3 make it) */
	if (r && (code == 400 || code == 501))
		MHD_add_response_header(r, "Connection", "close");
	if (r)
		MHD_add_response_header(r, "Content-Type", "text/plain");
	return td__http_queue(c, code, r);
}

struct field_lines {
	const char *name;
	char *buf;
	size_t cap, len;
	unsigned lines;
	bool cut; /* more than cap */
};

static enum MHD_Result field_line(void *cls, enum MHD_ValueKind kind,
                                  const char *key, const char *value)
{
	struct field_lines *fl = cls;
	size_t n = value ? strlen(value) : 0;

	(void)kind;
	if (strcasecmp(key, fl->name))
		return MHD_YES;
	if (fl->len + 2 + n + 1 > fl->cap) {
		fl->cut = true;
		return MHD_NO;
	}
	if (fl->lines++) {
		memcpy(fl->buf + fl->len, ", ", 2);
		fl->len += 2;
	}
	memcpy(fl->buf + fl->len, value ? value : "", n);
	fl->len += n;
	fl->buf[fl->len] = 0;
	return MHD_YES;
}

/*
 * Every field line named name of c's request as one value, the lines'
 * values in order joined by ", ", as RFC 9110 5.3 combines them (NULL:
 * no such line). libmicrohttpd's lookup gives the first line alone: two
 * If-None-Match lines, the second naming the current tag, were a 200
 * of the whole body, not a 304; two If-Match lines, a 412. The lines
 * are held in the connection's 16 KiB, so they fit; a value that would
 * not is given as "" (no tag), a condition that holds for no tag. Into
 * a static buffer, valid until the next call.
 */
static const char *field(struct MHD_Connection *c, const char *name)
{
	static char buf[32u << 10];
	struct field_lines fl = {name, buf, sizeof(buf), 0, 0, false};

	MHD_get_connection_values(c, MHD_HEADER_KIND, field_line, &fl);
	if (!fl.lines)
		return NULL;
	return fl.cut ? "" : buf;
}

struct range_lines {
	struct td__http_ranges *rs;
	uint64_t len;
};

static enum MHD_Result add_range(void *cls, enum MHD_ValueKind kind,
                                 const char *key, const char *value)
{
	struct range_lines *rl = cls;

	(void)kind;
	if (!strcasecmp(key, "Range"))
		td__http_ranges_add(rl->rs, value, rl->len);
	return MHD_YES;
}

/* td__http_ranges_end() (http-hdr.h) of c's Range lines into *rs; 0 (the
 * whole body) when an If-Range does not name etag. */
static int range(struct MHD_Connection *c, uint64_t len, const char *etag,
                 struct td__http_ranges *rs)
{
	struct range_lines rl = {rs, len};

	/* an If-Range naming another version: the whole body (RFC 9110
	 * 13.1.5), never a slice of this one spliced onto the old */
	if (!td__http_if_range(field(c, "If-Range"), etag))
		return 0;
	/* Range is one value: two lines are "a, b" (RFC 9110 5.3), the
	 * ranges of both; libmicrohttpd's lookup would give the first alone,
	 * its iteration gives every line in order */
	MHD_get_connection_values(c, MHD_HEADER_KIND, add_range, &rl);
	return td__http_ranges_end(rs);
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
                        const char *etag, struct td__http_ranges *rs,
                        enum MHD_Result *res)
{
	int rg;

	/* RFC 9110 13.2.2: If-Match first, before If-None-Match */
	if (!td__http_if_match(field(c, "If-Match"), etag)) {
		*res = td__http_text(c, MHD_HTTP_PRECONDITION_FAILED,
		                     "If-Match names no current version of "
		                     "this key\n");
		return -1;
	}
	if (td__http_etag_matches(field(c, "If-None-Match"), etag)) {
		*res = not_modified(c, len, etag);
		return -1;
	}
	memset(rs, 0, sizeof(*rs));
	rg = range(c, len, etag, rs);
	if (rg < 0) {
		*res = unsatisfiable(c, len);
		return -1;
	}
	if (rg == 0) {
		rs->count = 1;
		rs->a[0] = 0;
		rs->n[0] = len;
	}
	return rg;
}

/* Add Content-Range and the common headers; 200 or 206. */
unsigned td__http_finish(struct MHD_Response *r, int ranged,
                         const struct td__http_ranges *rs, uint64_t len,
                         const char *type, const char *etag)
{
	char cr[96];

	MHD_add_response_header(r, "Accept-Ranges", "bytes");
	if (etag)
		MHD_add_response_header(r, "ETag", etag);
	if (!ranged) {
		MHD_add_response_header(r, "Content-Type", type);
		return MHD_HTTP_OK;
	}
	/* several parts: td__http_multipart() set the Content-Type, and
	 * each part has its own type and range */
	if (rs->count > 1)
		return MHD_HTTP_PARTIAL_CONTENT;
	MHD_add_response_header(r, "Content-Type", type);
	snprintf(cr, sizeof(cr), "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64,
	         rs->a[0], rs->a[0] + rs->n[0] - 1, len);
	MHD_add_response_header(r, "Content-Range", cr);
	return MHD_HTTP_PARTIAL_CONTENT;
}

/* ---- multipart/byteranges (RFC 9110 14.6) ---- */

/*
 * The body of a 206 of several ranges: before part k, at[k], its headers
 * (text[hoff[k]], hlen[k] bytes), then its n[k] bytes, read from the
 * representation at a[k]; after the last, the closing delimiter
 * (at[count]). Only the representation's reader touches its bytes: no
 * part is ever assembled in memory.
 */
struct parts {
	td__http_reader *read;
	void *cls;
	void (*free_cls)(void *);
	unsigned count;
	uint64_t a[TD__HTTP_MAX_RANGES], n[TD__HTTP_MAX_RANGES];
	uint64_t at[TD__HTTP_MAX_RANGES + 1], total;
	size_t hoff[TD__HTTP_MAX_RANGES + 1], hlen[TD__HTTP_MAX_RANGES + 1];
	char text[];
};

static ssize_t parts_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct parts *p = cls;
	size_t done = 0;

	while (done < max && pos < p->total) {
		unsigned k = p->count;
		uint64_t in, m;

		while (k > 0 && p->at[k] > pos)
			k--;
		in = pos - p->at[k];
		if (in < p->hlen[k]) {
			m = p->hlen[k] - in;
			if (m > max - done)
				m = max - done;
			memcpy(buf + done, p->text + p->hoff[k] + in, m);
		} else {
			in -= p->hlen[k];
			m = p->n[k] - in;
			if (m > max - done)
				m = max - done;
			if (p->read(p->cls, p->a[k] + in, buf + done, m) !=
			    (ssize_t)m)
				return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		done += m;
		pos += m;
	}
	return done ? (ssize_t)done : MHD_CONTENT_READER_END_OF_STREAM;
}

static void parts_free(void *cls)
{
	struct parts *p = cls;

	p->free_cls(p->cls);
	free(p);
}

/* A boundary no body holds but by chance (RFC 2046 5.1.1): 128 random
 * bits, new for each response, so no publisher can put it in a tensor. */
static void boundary(char *out, size_t cap)
{
	static uint64_t seq;
	uint64_t r[2] = {0, 0};

	if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		/* no entropy yet (early boot): unique in this run at least */
		r[0] ^= (uint64_t)time(NULL) << 20 ^ (uint64_t)getpid();
		r[1] ^= ++seq;
	}
	snprintf(out, cap, "td-%016" PRIx64 "%016" PRIx64, r[0], r[1]);
}

/* The headers of part k (k == count: the closing delimiter) into out
 * (NULL: only measured); their length. */
static size_t part_head(char *out, size_t cap, const char *b, unsigned k,
                        const struct td__http_ranges *rs, uint64_t len,
                        const char *type)
{
	const char *nl = k ? "\r\n" : "";

	if (k == rs->count)
		return (size_t)snprintf(out, cap, "\r\n--%s--\r\n", b);
	return (size_t)snprintf(out, cap,
	                        "%s--%s\r\nContent-Type: %s\r\n"
	                        "Content-Range: bytes %" PRIu64 "-%" PRIu64
	                        "/%" PRIu64 "\r\n\r\n",
	                        nl, b, type, rs->a[k], rs->a[k] + rs->n[k] - 1,
	                        len);
}

struct MHD_Response *td__http_multipart(const struct td__http_ranges *rs,
                                        uint64_t len, const char *type,
                                        td__http_reader *read, void *cls,
                                        void (*free_cls)(void *),
                                        size_t block)
{
	struct MHD_Response *r;
	struct parts *p;
	size_t size = 0, off = 0;
	char b[40], ct[80];

	boundary(b, sizeof(b));
	for (unsigned k = 0; k <= rs->count; k++)
		size += part_head(NULL, 0, b, k, rs, len, type) + 1;
	p = calloc(1, sizeof(*p) + size);
	if (!p)
		return NULL;
	p->read = read;
	p->cls = cls;
	p->free_cls = free_cls;
	p->count = rs->count;
	for (unsigned k = 0; k <= rs->count; k++) {
		p->at[k] = p->total;
		p->hoff[k] = off;
		p->hlen[k] = part_head(p->text + off, size - off, b, k, rs, len,
		                       type);
		off += p->hlen[k];
		p->total += p->hlen[k];
		if (k < rs->count) {
			p->a[k] = rs->a[k];
			p->n[k] = rs->n[k];
			p->total += rs->n[k];
		}
	}
	r = MHD_create_response_from_callback(p->total, block, parts_read, p,
	                                      parts_free);
	if (!r) {
		free(p);
		return NULL;
	}
	snprintf(ct, sizeof(ct), "multipart/byteranges; boundary=%s", b);
	MHD_add_response_header(r, "Content-Type", ct);
	return r;
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
