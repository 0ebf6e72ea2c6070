/* SPDX-License-Identifier: MIT */
/*
 * A raw SCM_RIGHTS client of a tu_daemon: requests libtensord would not
 * send (forged held ids, a named loan published under another name).
 * Header-only, one static buffer per including suite.
 */
#ifndef TD_TESTS_RAWCLIENT_H
#define TD_TESTS_RAWCLIENT_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "blob.h"
#include "scm.h"
#include "testutil.h"
#include "wire.h"

static uint8_t rawbuf[TD_WIRE_MAX_MSG];
/* where a request's or reply's body goes, and its room */
#define RAW_BODY (rawbuf + TD_WIRE_HDR_LEN)
#define RAW_CAP (sizeof(rawbuf) - TD_WIRE_HDR_LEN)

struct rawrep {
	struct td_wire_hdr h;
	int fds[TD_WIRE_MAX_FDS];
	unsigned nfds;
};

static inline void raw_send(int sock, uint16_t op, uint64_t id, size_t body_len)
{
	struct td_wire_hdr h = {TD_WIRE_MAGIC, TD_WIRE_VERSION, op, 0, 0, id,
				(uint32_t)body_len, 0};

	td_wire_hdr_encode(&h, rawbuf);
	cr_assert_eq(td__scm_send(sock, rawbuf, TD_WIRE_HDR_LEN + body_len,
				  NULL, 0, 0),
		     (ssize_t)(TD_WIRE_HDR_LEN + body_len));
}

static inline void raw_recv(int sock, struct rawrep *r)
{
	struct td__scm_rx rx = {.fds = r->fds, .cap = TD_WIRE_MAX_FDS};
	ssize_t n;

	/* a reply the daemon never sends fails the test */
	tu_await_readable(sock, TU_WAIT_S, "tensord's reply");
	n = td__scm_recv(sock, rawbuf, sizeof(rawbuf), 0, &rx);
	cr_assert_gt(n, 0);
	cr_assert_eq(td_wire_hdr_decode(rawbuf, (size_t)n, &r->h, NULL), 0);
	r->nfds = rx.nfds;
	cr_assert_eq(r->nfds, r->h.fd_count);
}

/* A request of body_len bytes (in rawbuf after the header) and its
 * reply into *r (its body in rawbuf): the reply's status. */
static inline int32_t raw_call(int sock, uint16_t op, uint64_t id,
			       int64_t body_len, struct rawrep *r)
{
	cr_assert_geq(body_len, 0, "encode: %lld", (long long)body_len);
	raw_send(sock, op, id, (size_t)body_len);
	raw_recv(sock, r);
	cr_assert_eq(r->h.request_id, id);
	return r->h.status;
}

/* The reason of r's error reply (its body in rawbuf) into why (cap
 * bytes); "" when r is no error or its body no error body. */
static inline void raw_reason(const struct rawrep *r, char *why, size_t cap)
{
	struct td_wire_error er;

	why[0] = 0;
	if (r->h.status < 0 &&
	    td_wire_error_decode(RAW_BODY, r->h.body_len, &er, NULL) == 0)
		snprintf(why, cap, "%.*s", (int)er.reason.len, er.reason.ptr);
}

/* The ALLOC request q, which the daemon must grant: its alloc id (the
 * reply's descriptors closed). */
static inline uint64_t raw_alloc_req(int sock, uint64_t id,
				     const struct td_wire_alloc_req *q)
{
	struct td_wire_alloc_rep rep;
	struct rawrep r;

	cr_assert_eq(raw_call(sock, TD_OP_ALLOC, id,
			      td_wire_alloc_req_encode(q, RAW_BODY, RAW_CAP),
			      &r),
		     0);
	td__scm_close(r.fds, r.nfds);
	cr_assert_eq(td_wire_alloc_rep_decode(RAW_BODY, r.h.body_len, &rep,
					      NULL),
		     0);
	return rep.alloc_id;
}

/* An ALLOC of one plane of size bytes, which the daemon must grant: its
 * alloc id (the plane's fd closed). */
static inline uint64_t raw_alloc_one(int sock, uint64_t id, uint64_t size)
{
	struct td_wire_alloc_req q = {.flags = TD_WIRE_REQ_SCM,
				      .plane_count = 1, .sizes = {size}};

	return raw_alloc_req(sock, id, &q);
}

/*
 * The blob of a 1-D u8 tensor of size bytes, this process's, in one
 * plane at offset of fd-table entry 0, into blob: its length or -errno
 * (asserted by the caller: a forked fake daemon has no criterion).
 */
static inline int64_t raw_blob_u8(uint64_t size, uint64_t offset,
				  uint8_t *blob, size_t cap)
{
	const uint64_t shape[1] = {size};
	static const int64_t strides[1] = {1};
	struct td_blob_plane pl = {.handle = 0, .offset = offset,
				   .stride = size, .size = size, .used = size};
	struct td_blob_desc bd = {
		.storage_kind = TD_STORAGE_SHM, .pid = (uint32_t)getpid(),
		.fence_fd = -1, .dtype = TD_DTYPE_U8,
		.quant_axis = TD_QUANT_NONE, .ndim = 1, .shape = shape,
		.strides_len = 1, .strides = strides, .plane_count = 1,
		.planes = &pl,
	};

	return td_blob_encode(&bd, blob, cap, NULL);
}

/*
 * The PUBLISH body of alloc `alloc` (its one plane of size bytes, no fd
 * attached) as name, with flags and expect (TD_WIRE_PUB_IF's version),
 * into out: its length or -errno.
 */
static inline int64_t raw_pub_body(const char *name, uint64_t alloc,
				   uint64_t size, uint32_t flags,
				   uint64_t expect, uint8_t *out, size_t cap)
{
	uint8_t blob[512];
	int64_t blen = raw_blob_u8(size, 0, blob, sizeof(blob));
	struct td_wire_publish_req q = {
		.name = {name, (uint16_t)strlen(name)},
		.flags = flags,
		.alloc_id = alloc,
		.meta = {(const uint8_t *)"", 0},
		.blob = {blob, (uint32_t)blen},
		.fd_count = 1,
		.fds = {-1},
		.expect = expect,
	};

	cr_assert_gt(blen, 0);
	return td_wire_publish_req_encode(&q, out, cap);
}

/* PUBLISH_MANY of (names[i], allocs[i]), each one plane of size bytes:
 * the reply's status, its reason in why. */
static inline int32_t raw_pub_many(int sock, uint64_t size, uint64_t id,
				   uint32_t n, const char *const *names,
				   const uint64_t *allocs, char *why,
				   size_t cap)
{
	static uint8_t bodies[8][1024];
	struct td_wire_publish_many_req q = {.count = n};
	struct rawrep r;
	int32_t st;

	for (uint32_t i = 0; i < n; i++) {
		int64_t len = raw_pub_body(names[i], allocs[i], size, 0, 0,
					   bodies[i], sizeof(bodies[i]));

		cr_assert_gt(len, 0);
		q.el[i].body = (struct td_wire_bytes){bodies[i], (uint32_t)len};
	}
	st = raw_call(sock, TD_OP_PUBLISH_MANY, id,
		      td_wire_publish_many_req_encode(&q, RAW_BODY, RAW_CAP),
		      &r);
	raw_reason(&r, why, cap);
	return st;
}

/* Connect and HELLO asking for SCM_RIGHTS both ways and features. */
static inline int raw_scm_conn_feat(const struct tu_daemon *d,
				    uint32_t features)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct td_wire_hello_req hr = {TD_IMPORT_SCM, -1, {"liar", 4},
				       features};
	struct td_wire_hello_rep rep;
	struct rawrep r;
	int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	int64_t n;

	cr_assert_geq(sock, 0);
	memcpy(sa.sun_path, d->sock, sizeof(d->sock));
	cr_assert_eq(connect(sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
	n = td_wire_hello_req_encode(&hr, RAW_BODY, RAW_CAP);
	cr_assert_eq(raw_call(sock, TD_OP_HELLO, 1, n, &r), 0);
	cr_assert_eq(td_wire_hello_rep_decode(RAW_BODY, r.h.body_len, &rep,
					      NULL),
		     0);
	cr_assert_eq(rep.import_in, TD_IMPORT_SCM);
	td__scm_close(r.fds, r.nfds);
	return sock;
}

static inline int raw_scm_conn(const struct tu_daemon *d)
{
	return raw_scm_conn_feat(d, 0);
}

#endif
