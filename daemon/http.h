/* SPDX-License-Identifier: MIT */
/*
 * The HTTP store's files (docs/zarr.md; not installed), in call order:
 *
 *   http.c        libmicrohttpd in the loop, routing, metadata, /metrics
 *   http-body.c   what is exported and the chunk bodies: by sendfile()
 *                 from a dense memfd plane, or repacked (pread into the
 *                 response's buffer) from strided, planar and ring ones
 *   http-reply.c  replies: status counts, Range (several ranges as a
 *                 multipart/byteranges body), common headers, CORS
 */
#ifndef TD_DAEMON_HTTP_H
#define TD_DAEMON_HTTP_H

#include "http-hdr.h"
#include "store.h"

#include <microhttpd.h>

#include "td-zarr.h"

/* ---- http-reply.c ---- */

#define TD__HTTP_CODES 6 /* 200 206 304 404 405 416 */

struct td__http_stats {
	uint64_t by_code[TD__HTTP_CODES];
	uint64_t other;
	uint64_t leases; /* responses holding a version or ring slot now */
	uint64_t meta_builds; /* versions' metadata texts printed (http-meta.c) */
	uint64_t meta_cached; /* versions keeping such texts now */
	uint64_t meta_bytes;  /* their bytes (a quarter of --max-bytes at most) */
	uint64_t meta_waits;  /* group requests that waited for them */
	uint64_t text_bytes;  /* group keys' texts held by responses now */
	uint64_t text_busy;   /* requests refused (503) for text_bytes */
	uint64_t node_walks;  /* walks over the names for node keys */
};
extern struct td__http_stats td__http_stats;
extern const unsigned td__http_codes[TD__HTTP_CODES];

/* Queue r with code (counted; with --http-cors and an Origin it lists,
 * the CORS headers added) and drop our reference; MHD_NO if !r. */
enum MHD_Result td__http_queue(struct MHD_Connection *c, unsigned code,
                               struct MHD_Response *r);
/* A short text/plain reply (405 adds Allow). */
enum MHD_Result td__http_text(struct MHD_Connection *c, unsigned code,
                              const char *msg);
/*
 * An OPTIONS request with --http-cors: a CORS preflight of GET or HEAD
 * from an origin it lists, asking for headers the store reads
 * (td__http_cors_headers_ok()), is 204 with what the browser may send;
 * anything else the 405 of every method the store does not have.
 */
enum MHD_Result td__http_preflight(struct MHD_Connection *c);
/*
 * The conditions of a GET or HEAD of len bytes whose ETag is etag, in RFC
 * 9110 13.2.2's order: a failed If-Match (412), a matching If-None-Match
 * (304), a Range that cannot be met (416) are answered here (*res, -1).
 * Otherwise the bytes to send are rs's ranges: 0, the whole body (one
 * range, [0, len)); 1, the ranges of a Range (rs->count of them, a
 * multipart/byteranges body when more than one: td__http_multipart()).
 */
int td__http_conditions(struct MHD_Connection *c, uint64_t len,
                        const char *etag, struct td__http_ranges *rs,
                        enum MHD_Result *res);
/* Content-Range (one range) and the common headers; 200 or 206. */
unsigned td__http_finish(struct MHD_Response *r, int ranged,
                         const struct td__http_ranges *rs, uint64_t len,
                         const char *type, const char *etag);
/*
 * A representation's bytes [pos, pos + max), max of them into buf, or
 * MHD_CONTENT_READER_END_WITH_ERROR (the connection is then closed).
 */
typedef ssize_t td__http_reader(void *cls, uint64_t pos, char *buf,
                                size_t max);
/*
 * The 206 body of rs's several ranges of a len-byte representation of
 * type, as multipart/byteranges (RFC 9110 14.6): a random boundary, each
 * part with Content-Type and Content-Range, the Content-Length of the
 * whole; read() gives the parts' bytes, block bytes per callback, never
 * a copy of them all. Its Content-Type is set; takes cls (free_cls() when
 * the response is freed), except when it returns NULL.
 */
struct MHD_Response *td__http_multipart(const struct td__http_ranges *rs,
                                        uint64_t len, const char *type,
                                        td__http_reader *read, void *cls,
                                        void (*free_cls)(void *),
                                        size_t block);

/* ---- http-body.c ---- */

/* One exported tensor or ring: its array and where its chunk is. */
struct td__http_node {
	struct td_zarr_array a;
	struct td__version *v; /* a tensor's current version, or NULL */
	struct td__ring *ring; /* or a live ring */
	const char *raw;       /* the tensor's own name (borrowed) */
	uint16_t raw_len;
	bool repack;           /* never by sendfile (a ring, hugetlbfs, dma-buf) */
	uint32_t dmabuf;       /* bit p: plane p is a dma-buf, read mapped */
	int fence;             /* a tensor's acquire fence (borrowed), or -1 */
	struct td_zarr_walk w; /* the chunk in the planes */
	int fd[TD_ZARR_MAX_PLANES];       /* tensor planes' memfds (borrowed) */
	uint64_t off[TD_ZARR_MAX_PLANES]; /* where each plane starts */
};

/* An exported tensor or ring by the name the store gives it. */
struct td__http_ref {
	struct td__version *v; /* a tensor's current version, or NULL */
	struct td__ring *ring; /* or a live ring */
	char name[TD_ZARR_NAME_MAX + 16];
};
/*
 * Every exported tensor and ring in name order, named as an export names
 * them: the names alone. A walk over the names under --http-prefix (a
 * range of the sorted names) and the live rings. looks (NULL: no limit):
 * how many versions not looked at yet (whether they are served) it may
 * look at, counted down; -EAGAIN past that (they are looked at once
 * each, and a first walk over thousands takes long).
 */
int td__http_refs(struct td__http_ref **out, size_t *count, size_t *looks);
/* Whether the live ring r is exported: under --http-prefix, granted to
 * `http`, holding a version the store serves. */
bool td__http_ring_served(struct td__ring *r);
/*
 * ---- http-nodes.c ----
 * The exported nodes as td__http_refs() gives them (*rs, *count of them)
 * and their indices by node name (*order), from the last walk while the
 * store's current versions, the policy and the rings exported have not
 * changed since; walked again (looks as td__http_refs()'s) otherwise.
 * 0, -ENOMEM, -EAGAIN. Borrowed: valid until the next call and only
 * while the loop has not run since.
 */
int td__http_nodes(size_t *looks, const struct td__http_ref **rs,
		   const size_t **order, size_t *count);
/*
 * The ref of the exported node named node (len bytes, not NUL-ended) in
 * *out, NULL none; 0, or -ENOMEM. *out is valid as td__http_nodes()'.
 */
int td__http_node_find(const char *node, size_t len,
		       const struct td__http_ref **out);
/* The kept names go (td__http_stop). */
void td__http_nodes_drop(void);
/* r's node (zeroed first), with its attributes if attrs; false when it
 * is not served (n is left empty). */
bool td__http_node_of(const struct td__http_ref *r, struct td__http_node *n,
                      bool attrs);
/* The chunk of n, leased until the response ends (*con_cls: the lease of
 * a sendfile response, dropped by td__http_hold_drop()). */
enum MHD_Result td__http_chunk(struct MHD_Connection *c,
                               struct td__http_node *n, void **con_cls);
void td__http_hold_drop(void *hold);

/* ---- http-meta.c ---- */

/*
 * The group's key `key` of the v3 (!v2) or v2 view that lists every node
 * (v3 zarr.json; v2 .zattrs and .zmetadata): 1 with *text (malloc'ed,
 * NUL-terminated) and *len, 0 for any other key, -ENOMEM, or with
 * may_wait -EAGAIN when more versions lack their texts than one loop
 * turn prints (td__http_group_wait()). The versions' texts are kept on
 * them (td__version.http_meta) for the next request, within a budget
 * (tensord_http_meta_bytes); past it, printed for each request.
 */
int td__http_group_text(const char *key, bool v2, bool may_wait, char **text,
                        size_t *len);
/*
 * Suspend c's request (-EAGAIN above) while the loop prints the texts a
 * batch per turn; it is resumed, and its handler called again, once
 * they are all there, and then kick() lets libmicrohttpd run (http.c
 * passes it: a callback, so that http-meta.c calls nothing of http.c).
 * false on ENOMEM (nothing done).
 */
bool td__http_group_wait(struct MHD_Connection *c, bool v2,
                         void (*kick)(void));
/* Resume every waiting request (before MHD_stop_daemon()). */
void td__http_group_stop(void);

#endif
