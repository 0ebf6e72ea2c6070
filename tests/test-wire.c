/* SPDX-License-Identifier: MIT */
/*
 * proto/wire: header pins, round trips, and the strict decoder contract
 * (truncation -ENODATA, caps -EOVERFLOW, trailing/out-of-set -EBADMSG,
 * names -EINVAL) for every message body.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "testutil.h"
#include "wire.h"
#include "wire-status.h"

TestSuite(wire, .timeout = TU_TEST_TIMEOUT_S);

#define STR(s) ((struct td_wire_str){(s), (uint16_t)(sizeof(s) - 1)})
#define BYTES(s) ((struct td_wire_bytes){(const uint8_t *)(s), sizeof(s) - 1})

/* ---- header ---- */

static const struct td_wire_hdr sample_hdr = {
	.magic = TD_WIRE_MAGIC,
	.version = TD_WIRE_VERSION,
	.opcode = 0x0203,
	.flags = TD_WIRE_F_REPLY,
	.fd_count = 3,
	.request_id = 0x1122334455667788ull,
	.body_len = 0,
	.status = -5,
};

Test(wire, header_is_32_bytes_little_endian_at_fixed_offsets)
{
	uint8_t b[TD_WIRE_HDR_LEN + 1];
	static const uint8_t want[TD_WIRE_HDR_LEN] = {
		'T', 'D', 'W', '1',         /* magic */
		0x01, 0x00,                 /* version */
		0x03, 0x02,                 /* opcode */
		0x01, 0x00, 0x00, 0x00,     /* flags */
		0x03, 0x00, 0x00, 0x00,     /* fd_count */
		0x88, 0x77, 0x66, 0x55,     /* request_id */
		0x44, 0x33, 0x22, 0x11,
		0x00, 0x00, 0x00, 0x00,     /* body_len */
		0xfb, 0xff, 0xff, 0xff,     /* status -5 */
	};

	cr_assert_eq(TD_WIRE_HDR_LEN, 32);
	memset(b, 0xAA, sizeof(b));
	td_wire_hdr_encode(&sample_hdr, b);
	cr_assert(memcmp(b, want, sizeof(want)) == 0);
	cr_assert_eq(b[32], 0xAA, "encode wrote past 32 bytes");
}

Test(wire, header_round_trips)
{
	uint8_t b[TD_WIRE_HDR_LEN + 7];
	struct td_wire_hdr h = sample_hdr, g;

	h.body_len = 7;
	td_wire_hdr_encode(&h, b);
	cr_assert_eq(td_wire_hdr_decode(b, sizeof(b), &g, NULL), 0);
	cr_assert_eq(g.magic, h.magic);
	cr_assert_eq(g.version, h.version);
	cr_assert_eq(g.opcode, h.opcode);
	cr_assert_eq(g.flags, h.flags);
	cr_assert_eq(g.fd_count, h.fd_count);
	cr_assert_eq(g.request_id, h.request_id);
	cr_assert_eq(g.body_len, h.body_len);
	cr_assert_eq(g.status, h.status);
}

Test(wire, header_shorter_than_32_bytes_is_truncation)
{
	uint8_t b[TD_WIRE_HDR_LEN];
	struct td_wire_hdr g;
	struct td_err e;

	td_wire_hdr_encode(&sample_hdr, b);
	for (size_t n = 0; n < TD_WIRE_HDR_LEN; n++) {
		cr_assert_eq(td_wire_hdr_decode(b, n, &g, &e), -ENODATA);
		cr_assert_eq(e.kind, TD_ERR_TRUNCATED);
		cr_assert_eq(e.need, 32);
		cr_assert_eq(e.have, n);
	}
}

static int hdr_variant(void (*edit)(struct td_wire_hdr *), size_t len)
{
	static uint8_t b[TD_WIRE_MAX_MSG + 64];
	struct td_wire_hdr h = sample_hdr, g;

	h.body_len = (uint32_t)(len - TD_WIRE_HDR_LEN);
	if (edit)
		edit(&h);
	td_wire_hdr_encode(&h, b);
	return td_wire_hdr_decode(b, len, &g, NULL);
}

static void bad_magic(struct td_wire_hdr *h)
{
	h->magic = 0x31574455u;
}
static void bad_version(struct td_wire_hdr *h)
{
	h->version = 2;
}
static void version_zero(struct td_wire_hdr *h)
{
	h->version = 0;
}
static void body_len_plus(struct td_wire_hdr *h)
{
	h->body_len++;
}
static void body_len_minus(struct td_wire_hdr *h)
{
	h->body_len--;
}
static void fds_at_cap(struct td_wire_hdr *h)
{
	h->fd_count = TD_WIRE_MAX_FDS;
}
static void fds_over_cap(struct td_wire_hdr *h)
{
	h->fd_count = TD_WIRE_MAX_FDS + 1;
}
static void fds_huge(struct td_wire_hdr *h)
{
	h->fd_count = UINT32_MAX;
}
static void unknown_flag(struct td_wire_hdr *h)
{
	h->flags |= 0x80;
}

Test(wire, header_refuses_each_bad_field_with_its_errno)
{
	cr_assert_eq(hdr_variant(NULL, 40), 0);
	cr_assert_eq(hdr_variant(bad_magic, 40), -EBADMSG);
	cr_assert_eq(hdr_variant(bad_version, 40), -EPROTONOSUPPORT);
	cr_assert_eq(hdr_variant(version_zero, 40), -EPROTONOSUPPORT);
	cr_assert_eq(hdr_variant(body_len_plus, 40), -EBADMSG);
	cr_assert_eq(hdr_variant(body_len_minus, 40), -EBADMSG);
	cr_assert_eq(hdr_variant(fds_at_cap, 40), 0);
	cr_assert_eq(hdr_variant(fds_over_cap, 40), -E2BIG);
	cr_assert_eq(hdr_variant(fds_huge, 40), -E2BIG);
	cr_assert_eq(hdr_variant(unknown_flag, 40), -EBADMSG);
}

Test(wire, header_enforces_the_datagram_cap)
{
	cr_assert_eq(hdr_variant(NULL, TD_WIRE_MAX_MSG), 0);
	cr_assert_eq(hdr_variant(NULL, TD_WIRE_MAX_MSG + 1), -EMSGSIZE);
}

/* ---- every message: samples, generic decode ---- */

enum kind {
	K_HELLO_REQ,
	K_HELLO_REP,
	K_ALLOC_REQ,
	K_ALLOC_REP,
	K_PUBLISH_REQ,
	K_PUBLISH_REP,
	K_GET_REQ,
	K_GET_REP,
	K_RELEASE_REQ,
	K_LIST_REQ,
	K_LIST_REP,
	K_NAME_REQ,
	K_ENTRY,
	K_WATCH_REQ,
	K_WATCH_REP,
	K_UNWATCH_REQ,
	K_NOTIFY,
	K_DELETE_REP,
	K_ERROR,
	K_STAT_REQ,
	K_DELETE_REQ,
	K_PUBLISH_MANY_REQ,
	K_PUBLISH_MANY_REP,
	K_GET_MANY_REQ,
	K_GET_MANY_REP,
	K_COUNT,
};

static const char *const kind_names[K_COUNT] = {
	"hello_req", "hello_rep", "alloc_req", "alloc_rep", "publish_req",
	"publish_rep", "get_req", "get_rep", "release_req", "list_req",
	"list_rep", "name_req", "entry", "watch_req", "watch_rep",
	"unwatch_req", "notify", "delete_rep", "error", "stat_req",
	"delete_req", "publish_many_req", "publish_many_rep", "get_many_req",
	"get_many_rep",
};

union msg {
	struct td_wire_hello_req hello_req;
	struct td_wire_hello_rep hello_rep;
	struct td_wire_alloc_req alloc_req;
	struct td_wire_alloc_rep alloc_rep;
	struct td_wire_publish_req publish_req;
	struct td_wire_publish_rep publish_rep;
	struct td_wire_get_req get_req;
	struct td_wire_get_rep get_rep;
	struct td_wire_release_req release_req;
	struct td_wire_list_req list_req;
	struct td_wire_name_req name_req;
	struct td_wire_entry entry;
	struct td_wire_watch_req watch_req;
	struct td_wire_watch_rep watch_rep;
	struct td_wire_unwatch_req unwatch_req;
	struct td_wire_notify notify;
	struct td_wire_delete_rep delete_rep;
	struct td_wire_error error;
	struct td_wire_stat_req stat_req;
	struct td_wire_delete_req delete_req;
	struct td_wire_publish_many_req publish_many_req;
	struct td_wire_publish_many_rep publish_many_rep;
	struct td_wire_get_many_req get_many_req;
	struct td_wire_get_many_rep get_many_rep;
};

static const uint8_t blob_bytes[40] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

static struct td_wire_entry sample_entry(const char *name, uint64_t ver)
{
	struct td_wire_entry e = {
		.name = {name, (uint16_t)strlen(name)},
		.version = ver,
		.dtype = 9,
		.ndim = 3,
		.shape = {2, 480, 640},
		.bytes = 2 * 480 * 640 * 4,
		.lease_count = 2,
		.flags = TD_WIRE_PUB_PIN,
		.meta = BYTES("{\"k\":1}"),
	};
	return e;
}

static void sample_msg(enum kind k, union msg *m)
{
	memset(m, 0, sizeof(*m));
	switch (k) {
	case K_HELLO_REQ:
		m->hello_req = (struct td_wire_hello_req){
			TD_IMPORT_PIDFD, 7, STR("cam0 producer"), 0};
		break;
	case K_HELLO_REP:
		m->hello_rep = (struct td_wire_hello_rep){
			.daemon_pid = 4242, .import_in = TD_IMPORT_SCM,
			.out_pidfd = 1, .probe_fd = 12,
			.max_msg = TD_WIRE_MAX_MSG, .max_fds = TD_WIRE_MAX_FDS,
			.max_name = TD_WIRE_MAX_NAME,
			.max_meta = TD_WIRE_MAX_META,
			.max_planes = TD_WIRE_MAX_PLANES,
			.max_bytes = 1ull << 33, .ident = STR("tensord 0.1.0")};
		break;
	case K_ALLOC_REQ:
		m->alloc_req = (struct td_wire_alloc_req){
			.flags = TD_WIRE_REQ_SCM, .plane_count = 3,
			.sizes = {4096, 1 << 20, 12}};
		break;
	case K_ALLOC_REP:
		m->alloc_rep = (struct td_wire_alloc_rep){
			.alloc_id = 77,
			.fd_count = 2,
			.fds = {{10, 1000}, {11, 1001}}};
		break;
	case K_PUBLISH_REQ:
		m->publish_req = (struct td_wire_publish_req){
			.name = STR("cam/0/frame"), .flags = TD_WIRE_PUB_PIN,
			.alloc_id = 0, .meta = BYTES("meta!"),
			.blob = {blob_bytes, sizeof(blob_bytes)},
			.fd_count = 3, .fds = {5, 9, 33}};
		break;
	case K_PUBLISH_REP:
		m->publish_rep.version = 0x0102030405060708ull;
		break;
	case K_GET_REQ:
		m->get_req = (struct td_wire_get_req){
			STR("cam/0/frame"), TD_GET_NEWER, TD_WIRE_REQ_SCM, 41,
			2500, 0, {0}};
		break;
	case K_GET_REP:
		m->get_rep = (struct td_wire_get_rep){
			.version = 42, .lease_id = 9001, .meta = BYTES("m"),
			.blob = {blob_bytes, sizeof(blob_bytes)},
			.fd_count = 2, .fds = {{20, 5}, {21, 6}}};
		break;
	case K_RELEASE_REQ:
		m->release_req.lease_id = 9001;
		break;
	case K_LIST_REQ:
		m->list_req = (struct td_wire_list_req){STR("cam/"),
							STR("cam/0/frame"), 0};
		break;
	case K_LIST_REP: /* built by build_sample() */
		break;
	case K_NAME_REQ:
		m->name_req.name = STR("a.b-c_d:e@f+g/h");
		break;
	case K_ENTRY:
		m->entry = sample_entry("cam/0/frame", 42);
		break;
	case K_WATCH_REQ:
		m->watch_req = (struct td_wire_watch_req){STR("cam/"),
							  TD_WIRE_WATCH_PREFIX};
		break;
	case K_WATCH_REP:
		m->watch_rep.watch_id = 3;
		break;
	case K_UNWATCH_REQ:
		m->unwatch_req.watch_id = 3;
		break;
	case K_NOTIFY:
		m->notify = (struct td_wire_notify){
			3, TD_EVENT_DELETED, 42, STR("cam/0/frame")};
		break;
	case K_DELETE_REP:
		m->delete_rep.version = 42;
		break;
	case K_ERROR:
		m->error.reason = STR("name contains \"..\"");
		break;
	case K_STAT_REQ: /* the form of version 1: no flags */
		m->stat_req.name = STR("cam/0/frame");
		break;
	case K_DELETE_REQ: /* the form of version 1: no condition */
		m->delete_req = (struct td_wire_delete_req){STR("cam/0"), 0};
		break;
	case K_PUBLISH_MANY_REQ: /* two PUBLISH bodies (opaque here) */
		m->publish_many_req.count = 2;
		m->publish_many_req.el[0] = (struct td_wire_pub_elem){
			0, {blob_bytes, 12}};
		m->publish_many_req.el[1] = (struct td_wire_pub_elem){
			1, {blob_bytes + 12, 20}};
		break;
	case K_PUBLISH_MANY_REP:
		m->publish_many_rep = (struct td_wire_publish_many_rep){
			2, {41, 42}};
		break;
	case K_GET_MANY_REQ:
		m->get_many_req = (struct td_wire_get_many_req){
			.flags = TD_WIRE_REQ_SCM,
			.count = 2,
			.names = {STR("cam/image"), STR("cam/label")}};
		break;
	case K_GET_MANY_REP: /* two GET reply bodies (opaque here) */
		m->get_many_rep.count = 2;
		m->get_many_rep.reps[0] = (struct td_wire_bytes){blob_bytes, 30};
		m->get_many_rep.reps[1] = (struct td_wire_bytes){blob_bytes, 9};
		break;
	case K_COUNT:
		break;
	}
}

static int64_t encode_any(enum kind k, const union msg *m, uint8_t *b,
			  size_t cap)
{
	switch (k) {
	case K_HELLO_REQ:
		return td_wire_hello_req_encode(&m->hello_req, b, cap);
	case K_HELLO_REP:
		return td_wire_hello_rep_encode(&m->hello_rep, b, cap);
	case K_ALLOC_REQ:
		return td_wire_alloc_req_encode(&m->alloc_req, b, cap);
	case K_ALLOC_REP:
		return td_wire_alloc_rep_encode(&m->alloc_rep, b, cap);
	case K_PUBLISH_REQ:
		return td_wire_publish_req_encode(&m->publish_req, b, cap);
	case K_PUBLISH_REP:
		return td_wire_publish_rep_encode(&m->publish_rep, b, cap);
	case K_GET_REQ:
		return td_wire_get_req_encode(&m->get_req, b, cap);
	case K_GET_REP:
		return td_wire_get_rep_encode(&m->get_rep, b, cap);
	case K_RELEASE_REQ:
		return td_wire_release_req_encode(&m->release_req, b, cap);
	case K_LIST_REQ:
		return td_wire_list_req_encode(&m->list_req, b, cap);
	case K_NAME_REQ:
		return td_wire_name_req_encode(&m->name_req, b, cap);
	case K_ENTRY:
		return td_wire_entry_encode(&m->entry, b, cap);
	case K_WATCH_REQ:
		return td_wire_watch_req_encode(&m->watch_req, b, cap);
	case K_WATCH_REP:
		return td_wire_watch_rep_encode(&m->watch_rep, b, cap);
	case K_UNWATCH_REQ:
		return td_wire_unwatch_req_encode(&m->unwatch_req, b, cap);
	case K_NOTIFY:
		return td_wire_notify_encode(&m->notify, b, cap);
	case K_DELETE_REP:
		return td_wire_delete_rep_encode(&m->delete_rep, b, cap);
	case K_ERROR:
		return td_wire_error_encode(&m->error, b, cap);
	case K_STAT_REQ:
		return td_wire_stat_req_encode(&m->stat_req, b, cap);
	case K_DELETE_REQ:
		return td_wire_delete_req_encode(&m->delete_req, b, cap);
	case K_PUBLISH_MANY_REQ:
		return td_wire_publish_many_req_encode(&m->publish_many_req, b,
						       cap);
	case K_PUBLISH_MANY_REP:
		return td_wire_publish_many_rep_encode(&m->publish_many_rep, b,
						       cap);
	case K_GET_MANY_REQ:
		return td_wire_get_many_req_encode(&m->get_many_req, b, cap);
	case K_GET_MANY_REP:
		return td_wire_get_many_rep_encode(&m->get_many_rep, b, cap);
	case K_LIST_REP:
	case K_COUNT:
		break;
	}
	return -EINVAL;
}

/* A LIST reply with two entries, more = 1. */
static size_t encode_list_rep(uint8_t *b, size_t cap)
{
	struct td_wire_wr wr;
	struct td_wire_entry e1 = sample_entry("cam/0/frame", 42);
	struct td_wire_entry e2 = sample_entry("cam/1/frame", 7);

	td_wire_wr_init(&wr, b, cap);
	cr_assert_eq(td_wire_list_rep_begin(&wr), 0);
	cr_assert_eq(td_wire_entry_put(&wr, &e1), 0);
	e2.ndim = 0;
	e2.meta.len = 0;
	cr_assert_eq(td_wire_entry_put(&wr, &e2), 0);
	td_wire_list_rep_finish(&wr, 2, 1);
	cr_assert(!wr.overflow);
	return wr.off;
}

static size_t build_sample(enum kind k, uint8_t *b, size_t cap)
{
	union msg m;
	int64_t n;

	if (k == K_LIST_REP)
		return encode_list_rep(b, cap);
	sample_msg(k, &m);
	n = encode_any(k, &m, b, cap);
	cr_assert(n > 0, "%s encode: %lld", kind_names[k], (long long)n);
	return (size_t)n;
}

/*
 * Decode with the kind's decoder; on success re-encode into *re (the
 * canonical form, which must reproduce an accepted input exactly).
 */
static int decode_any(enum kind k, const uint8_t *b, size_t len,
		      struct td_err *e, uint8_t *re, size_t *re_len)
{
	union msg m;
	int rc = -EINVAL;
	int64_t n;

	memset(&m, 0x5A, sizeof(m));
	switch (k) {
	case K_HELLO_REQ:
		rc = td_wire_hello_req_decode(b, len, &m.hello_req, e);
		break;
	case K_HELLO_REP:
		rc = td_wire_hello_rep_decode(b, len, &m.hello_rep, e);
		break;
	case K_ALLOC_REQ:
		rc = td_wire_alloc_req_decode(b, len, &m.alloc_req, e);
		break;
	case K_ALLOC_REP:
		rc = td_wire_alloc_rep_decode(b, len, &m.alloc_rep, e);
		break;
	case K_PUBLISH_REQ:
		rc = td_wire_publish_req_decode(b, len, &m.publish_req, e);
		break;
	case K_PUBLISH_REP:
		rc = td_wire_publish_rep_decode(b, len, &m.publish_rep, e);
		break;
	case K_GET_REQ:
		rc = td_wire_get_req_decode(b, len, &m.get_req, e);
		break;
	case K_GET_REP:
		rc = td_wire_get_rep_decode(b, len, &m.get_rep, e);
		break;
	case K_RELEASE_REQ:
		rc = td_wire_release_req_decode(b, len, &m.release_req, e);
		break;
	case K_LIST_REQ:
		rc = td_wire_list_req_decode(b, len, &m.list_req, e);
		break;
	case K_NAME_REQ:
		rc = td_wire_name_req_decode(b, len, &m.name_req, e);
		break;
	case K_ENTRY:
		rc = td_wire_entry_decode(b, len, &m.entry, e);
		break;
	case K_WATCH_REQ:
		rc = td_wire_watch_req_decode(b, len, &m.watch_req, e);
		break;
	case K_WATCH_REP:
		rc = td_wire_watch_rep_decode(b, len, &m.watch_rep, e);
		break;
	case K_UNWATCH_REQ:
		rc = td_wire_unwatch_req_decode(b, len, &m.unwatch_req, e);
		break;
	case K_NOTIFY:
		rc = td_wire_notify_decode(b, len, &m.notify, e);
		break;
	case K_DELETE_REP:
		rc = td_wire_delete_rep_decode(b, len, &m.delete_rep, e);
		break;
	case K_ERROR:
		rc = td_wire_error_decode(b, len, &m.error, e);
		break;
	case K_STAT_REQ:
		rc = td_wire_stat_req_decode(b, len, &m.stat_req, e);
		break;
	case K_DELETE_REQ:
		rc = td_wire_delete_req_decode(b, len, &m.delete_req, e);
		break;
	case K_PUBLISH_MANY_REQ:
		rc = td_wire_publish_many_req_decode(b, len,
						     &m.publish_many_req, e);
		break;
	case K_PUBLISH_MANY_REP:
		rc = td_wire_publish_many_rep_decode(b, len,
						     &m.publish_many_rep, e);
		break;
	case K_GET_MANY_REQ:
		rc = td_wire_get_many_req_decode(b, len, &m.get_many_req, e);
		break;
	case K_GET_MANY_REP:
		rc = td_wire_get_many_rep_decode(b, len, &m.get_many_rep, e);
		break;
	case K_LIST_REP: {
		struct td_wire_list_rd lr;
		struct td_wire_wr wr;
		uint32_t count = 0;

		rc = td_wire_list_rep_init(&lr, b, len, e);
		if (rc)
			return rc;
		td_wire_wr_init(&wr, re, TD_WIRE_MAX_MSG);
		cr_assert_eq(td_wire_list_rep_begin(&wr), 0);
		while ((rc = td_wire_list_rep_next(&lr, &m.entry)) == 1) {
			cr_assert_eq(td_wire_entry_put(&wr, &m.entry), 0);
			count++;
		}
		if (rc)
			return rc;
		cr_assert_eq(count, lr.count);
		td_wire_list_rep_finish(&wr, lr.count, lr.more);
		*re_len = wr.off;
		return 0;
	}
	case K_COUNT:
		break;
	}
	if (rc)
		return rc;
	n = encode_any(k, &m, re, TD_WIRE_MAX_MSG);
	cr_assert(n >= 0, "%s: a decoded message must re-encode",
		  kind_names[k]);
	*re_len = (size_t)n;
	return 0;
}

static uint8_t body[TD_WIRE_MAX_MSG];
static uint8_t canon[TD_WIRE_MAX_MSG];

Test(wire, every_message_round_trips_byte_exactly)
{
	for (int k = 0; k < K_COUNT; k++) {
		size_t n = build_sample(k, body, sizeof(body)), rn = 0;
		struct td_err e;
		int rc = decode_any(k, body, n, &e, canon, &rn);

		cr_assert_eq(rc, 0, "%s: %d %s", kind_names[k], rc, e.reason);
		cr_assert_eq(rn, n, "%s", kind_names[k]);
		cr_assert(memcmp(canon, body, n) == 0, "%s", kind_names[k]);
	}
}

Test(wire, decoded_fields_match_what_was_encoded)
{
	struct td_wire_publish_req p;
	struct td_wire_get_rep g;
	union msg m;
	size_t n;

	sample_msg(K_PUBLISH_REQ, &m);
	n = (size_t)td_wire_publish_req_encode(&m.publish_req, body,
					       sizeof(body));
	cr_assert_eq(td_wire_publish_req_decode(body, n, &p, NULL), 0);
	cr_assert_eq(p.name.len, 11);
	cr_assert(memcmp(p.name.ptr, "cam/0/frame", 11) == 0);
	cr_assert_eq(p.flags, TD_WIRE_PUB_PIN);
	cr_assert_eq(p.meta.len, 5);
	cr_assert_eq(p.blob.len, sizeof(blob_bytes));
	cr_assert(p.blob.ptr >= body && p.blob.ptr < body + n,
		  "decoded byte strings borrow the input");
	cr_assert_eq(p.fd_count, 3);
	cr_assert_eq(p.fds[2], 33);

	sample_msg(K_GET_REP, &m);
	n = (size_t)td_wire_get_rep_encode(&m.get_rep, body, sizeof(body));
	cr_assert_eq(td_wire_get_rep_decode(body, n, &g, NULL), 0);
	cr_assert_eq(g.lease_id, 9001);
	cr_assert_eq(g.fd_count, 2);
	cr_assert_eq(g.fds[1].fd, 21);
	cr_assert_eq(g.fds[1].buffer_id, 6);
}

Test(wire, hello_request_bytes_match_the_documented_layout)
{
	union msg m;
	static const uint8_t want[] = {
		1, 0, 0, 0,                           /* import_pref PIDFD */
		7, 0, 0, 0,                           /* probe_fd */
		13, 0, 'c', 'a', 'm', '0', ' ', 'p', /* client_name */
		'r', 'o', 'd', 'u', 'c', 'e', 'r',
	};

	sample_msg(K_HELLO_REQ, &m);
	cr_assert_eq(td_wire_hello_req_encode(&m.hello_req, body,
					      sizeof(body)),
		     (int64_t)sizeof(want));
	cr_assert(memcmp(body, want, sizeof(want)) == 0);
}

Test(wire, every_strict_prefix_of_every_message_is_truncation)
{
	for (int k = 0; k < K_COUNT; k++) {
		size_t n = build_sample(k, body, sizeof(body)), rn;

		for (size_t cut = 0; cut < n; cut++) {
			struct td_err e;
			int rc = decode_any(k, body, cut, &e, canon, &rn);
			/*
			 * A LIST reply's count is checked against the bytes
			 * present first, so a deep cut may read as a forged
			 * count instead.
			 */
			if (k == K_LIST_REP && rc == -EOVERFLOW)
				continue;
			cr_assert_eq(rc, -ENODATA, "%s cut at %zu of %zu: %d",
				     kind_names[k], cut, n, rc);
			cr_assert_eq(e.kind, TD_ERR_TRUNCATED);
		}
	}
}

Test(wire, a_trailing_byte_is_refused_for_every_message)
{
	for (int k = 0; k < K_COUNT; k++) {
		size_t n = build_sample(k, body, sizeof(body)), rn;
		struct td_err e;

		body[n] = 0;
		cr_assert_eq(decode_any(k, body, n + 1, &e, canon, &rn),
			     -EBADMSG, "%s", kind_names[k]);
		cr_assert_eq(e.kind, TD_ERR_MALFORMED);
		cr_assert_eq(e.offset, n);
	}
}

Test(wire, encoders_report_a_short_buffer_for_every_cap)
{
	static uint8_t small[TD_WIRE_MAX_MSG];

	for (int k = 0; k < K_COUNT; k++) {
		union msg m;
		size_t n;

		if (k == K_LIST_REP)
			continue;
		sample_msg(k, &m);
		n = build_sample(k, body, sizeof(body));
		for (size_t cap = 0; cap < n; cap++)
			cr_assert_eq(encode_any(k, &m, small, cap), -ENOBUFS,
				     "%s cap %zu", kind_names[k], cap);
		cr_assert_eq(encode_any(k, &m, small, n), (int64_t)n);
	}
}

static bool allowed_errno(int rc)
{
	return rc == -ENODATA || rc == -EOVERFLOW || rc == -EBADMSG ||
	       rc == -EINVAL || rc == -EILSEQ;
}

Test(wire, random_bit_flips_are_refused_or_reencode_identically)
{
	static uint8_t flip[TD_WIRE_MAX_MSG];
	uint64_t seed = 0xC0FFEE;

	for (int k = 0; k < K_COUNT; k++) {
		size_t n = build_sample(k, body, sizeof(body));

		for (int round = 0; round < 2000; round++) {
			size_t rn = 0;
			int flips = 1 + (int)(tu_rand(&seed) % 4), rc;

			memcpy(flip, body, n);
			for (int f = 0; f < flips; f++) {
				uint64_t r = tu_rand(&seed);
				flip[(r >> 8) % n] ^= (uint8_t)(1u << (r & 7));
			}
			rc = decode_any(k, flip, n, NULL, canon, &rn);
			if (rc == 0) {
				/* strict + canonical: accepted = re-encoded */
				cr_assert_eq(rn, n, "%s", kind_names[k]);
				cr_assert(memcmp(canon, flip, n) == 0, "%s",
					  kind_names[k]);
			} else {
				cr_assert(allowed_errno(rc), "%s: rc %d",
					  kind_names[k], rc);
			}
		}
	}
}

/* ---- caps ---- */

/* A PUBLISH body with each variable part chosen by the caller. */
static size_t publish_body(uint8_t *b, size_t name_len, uint32_t meta_len,
			   uint32_t blob_len, uint32_t fd_count)
{
	static uint8_t filler[TD_WIRE_MAX_MSG];
	struct td_wire_wr wr;

	memset(filler, 'a', sizeof(filler));
	td_wire_wr_init(&wr, b, TD_WIRE_MAX_MSG * 2);
	td_wire_wr_str(&wr, (const char *)filler, name_len);
	td_wire_wr_u32(&wr, 0);
	td_wire_wr_u64(&wr, 0);
	td_wire_wr_bytes(&wr, filler, meta_len);
	td_wire_wr_bytes(&wr, filler, blob_len);
	td_wire_wr_u32(&wr, fd_count);
	for (uint32_t i = 0; i < fd_count; i++)
		td_wire_wr_i32(&wr, (int32_t)i);
	cr_assert(!wr.overflow);
	return wr.off;
}

static int publish_decode(size_t name_len, uint32_t meta_len,
			  uint32_t blob_len, uint32_t fd_count,
			  struct td_err *e)
{
	static uint8_t b[TD_WIRE_MAX_MSG * 2];
	struct td_wire_publish_req p;
	size_t n = publish_body(b, name_len, meta_len, blob_len, fd_count);

	return td_wire_publish_req_decode(b, n, &p, e);
}

Test(wire, publish_enforces_every_cap)
{
	struct td_err e;

	cr_assert_eq(publish_decode(TD_WIRE_MAX_NAME, TD_WIRE_MAX_META,
				    TD_WIRE_MAX_BLOB, TD_WIRE_MAX_PLANES + 1,
				    &e),
		     0);
	cr_assert_eq(publish_decode(TD_WIRE_MAX_NAME + 1, 0, 0, 0, &e),
		     -EOVERFLOW);
	cr_assert_str_eq(e.field, "name");
	cr_assert_eq(e.kind, TD_ERR_FORGED_LENGTH);
	cr_assert_eq(publish_decode(1, TD_WIRE_MAX_META + 1, 0, 0, &e),
		     -EOVERFLOW);
	cr_assert_str_eq(e.field, "meta");
	cr_assert_eq(publish_decode(1, 0, TD_WIRE_MAX_BLOB + 1, 0, &e),
		     -EOVERFLOW);
	cr_assert_str_eq(e.field, "blob");
	cr_assert_eq(publish_decode(1, 0, 0, TD_WIRE_MAX_PLANES + 2, &e),
		     -EOVERFLOW);
	cr_assert_str_eq(e.field, "fd_count");
}

static int count_body_decode(enum kind k, uint32_t count, struct td_err *e)
{
	struct td_wire_wr wr;
	size_t rn;

	td_wire_wr_init(&wr, body, sizeof(body));
	switch (k) {
	case K_ALLOC_REQ:
		td_wire_wr_u32(&wr, 0);
		td_wire_wr_u32(&wr, count);
		for (uint32_t i = 0; i < count; i++)
			td_wire_wr_u64(&wr, 1);
		break;
	case K_ALLOC_REP:
	case K_GET_REP:
		td_wire_wr_u64(&wr, 1);
		if (k == K_GET_REP) {
			td_wire_wr_u64(&wr, 1);
			td_wire_wr_bytes(&wr, NULL, 0);
			td_wire_wr_bytes(&wr, NULL, 0);
		}
		td_wire_wr_u32(&wr, count);
		for (uint32_t i = 0; i < count; i++) {
			td_wire_wr_i32(&wr, 3);
			td_wire_wr_u64(&wr, 4);
		}
		break;
	case K_ENTRY:
		td_wire_wr_str(&wr, "x", 1);
		td_wire_wr_u64(&wr, 1);
		td_wire_wr_u32(&wr, 0);
		td_wire_wr_u32(&wr, count);
		for (uint32_t i = 0; i < count; i++)
			td_wire_wr_u64(&wr, 2);
		td_wire_wr_u64(&wr, 0);
		td_wire_wr_u32(&wr, 0);
		td_wire_wr_u32(&wr, 0);
		td_wire_wr_bytes(&wr, NULL, 0);
		break;
	default:
		cr_assert_fail();
	}
	cr_assert(!wr.overflow);
	return decode_any(k, body, wr.off, e, canon, &rn);
}

Test(wire, counts_are_bounded_by_their_caps)
{
	struct td_err e;

	cr_assert_eq(count_body_decode(K_ALLOC_REQ, TD_WIRE_MAX_PLANES, &e), 0);
	cr_assert_eq(count_body_decode(K_ALLOC_REQ, TD_WIRE_MAX_PLANES + 1, &e),
		     -EOVERFLOW);
	cr_assert_str_eq(e.field, "plane_count");
	cr_assert_eq(count_body_decode(K_ALLOC_REP, TD_WIRE_MAX_PLANES, &e), 0);
	cr_assert_eq(count_body_decode(K_ALLOC_REP, TD_WIRE_MAX_PLANES + 1, &e),
		     -EOVERFLOW);
	cr_assert_eq(count_body_decode(K_GET_REP, TD_WIRE_MAX_PLANES + 1, &e),
		     0);
	cr_assert_eq(count_body_decode(K_GET_REP, TD_WIRE_MAX_PLANES + 2, &e),
		     -EOVERFLOW);
	cr_assert_eq(count_body_decode(K_ENTRY, TD_WIRE_MAX_DIMS, &e), 0);
	cr_assert_eq(count_body_decode(K_ENTRY, TD_WIRE_MAX_DIMS + 1, &e),
		     -EOVERFLOW);
	cr_assert_str_eq(e.field, "ndim");
	/* a huge count fails on the cap, before any element is read */
	cr_assert_eq(count_body_decode(K_ALLOC_REQ, 0, &e), 0);
}

Test(wire, error_reason_is_capped_on_read_and_cut_on_write)
{
	static char big[TD_WIRE_MAX_REASON + 10];
	struct td_wire_error m = {{big, TD_WIRE_MAX_REASON + 10}}, g;
	struct td_wire_wr wr;
	int64_t n;

	memset(big, 'r', sizeof(big));
	n = td_wire_error_encode(&m, body, sizeof(body));
	cr_assert_eq(n, 2 + TD_WIRE_MAX_REASON);
	cr_assert_eq(td_wire_error_decode(body, (size_t)n, &g, NULL), 0);
	cr_assert_eq(g.reason.len, TD_WIRE_MAX_REASON);

	td_wire_wr_init(&wr, body, sizeof(body));
	td_wire_wr_str(&wr, big, TD_WIRE_MAX_REASON + 1);
	cr_assert_eq(td_wire_error_decode(body, wr.off, &g, NULL), -EOVERFLOW);
}

Test(wire, encoders_refuse_counts_the_decoder_would_refuse)
{
	struct td_wire_alloc_req a = {.plane_count = TD_WIRE_MAX_PLANES + 1};
	struct td_wire_alloc_rep ar = {.fd_count = TD_WIRE_MAX_PLANES + 1};
	struct td_wire_publish_req p = {.fd_count = TD_WIRE_MAX_PLANES + 2};
	struct td_wire_get_rep g = {.fd_count = TD_WIRE_MAX_PLANES + 2};
	struct td_wire_entry e = {.ndim = TD_WIRE_MAX_DIMS + 1};

	cr_assert_eq(td_wire_alloc_req_encode(&a, body, sizeof(body)), -EINVAL);
	cr_assert_eq(td_wire_alloc_rep_encode(&ar, body, sizeof(body)),
		     -EINVAL);
	cr_assert_eq(td_wire_publish_req_encode(&p, body, sizeof(body)),
		     -EINVAL);
	cr_assert_eq(td_wire_get_rep_encode(&g, body, sizeof(body)), -EINVAL);
	cr_assert_eq(td_wire_entry_encode(&e, body, sizeof(body)), -EINVAL);
}

/* ---- values outside their sets ---- */

static int patched_decode(enum kind k, size_t off, uint32_t v)
{
	size_t n = build_sample(k, body, sizeof(body)), rn;

	td__put_le32(body + off, v);
	return decode_any(k, body, n, NULL, canon, &rn);
}

Test(wire, enum_and_flag_values_outside_their_sets_are_malformed)
{
	size_t name_end = 2 + 11; /* "cam/0/frame" */

	cr_assert_eq(patched_decode(K_HELLO_REQ, 0, 3), -EBADMSG);
	cr_assert_eq(patched_decode(K_HELLO_REQ, 0, TD_IMPORT_AUTO), 0);
	cr_assert_eq(patched_decode(K_HELLO_REP, 4, 0), -EBADMSG);
	cr_assert_eq(patched_decode(K_HELLO_REP, 8, 2), -EBADMSG);
	cr_assert_eq(patched_decode(K_ALLOC_REQ, 0, 8), -EBADMSG);
	cr_assert_eq(patched_decode(K_GET_REQ, name_end, 3), -EBADMSG);
	cr_assert_eq(patched_decode(K_GET_REQ, name_end + 4, 4), -EBADMSG);
	cr_assert_eq(patched_decode(K_PUBLISH_REQ, name_end, 8), -EBADMSG);
	cr_assert_eq(patched_decode(K_NOTIFY, 8, 0), -EBADMSG);
	cr_assert_eq(patched_decode(K_NOTIFY, 8, 3), -EBADMSG);
	cr_assert_eq(patched_decode(K_WATCH_REQ, 2 + 4, 2), -EBADMSG);
	cr_assert_eq(patched_decode(K_LIST_REP, 4, 2), -EBADMSG);
}

Test(wire, list_reply_count_is_bounded_by_the_bytes_present)
{
	cr_assert_eq(patched_decode(K_LIST_REP, 0, 3), -ENODATA);
	cr_assert_eq(patched_decode(K_LIST_REP, 0, UINT32_MAX), -EOVERFLOW);
	cr_assert_eq(patched_decode(K_LIST_REP, 0, 1), -EBADMSG);
}

/* ---- names ---- */

static int name_rc(const char *s, bool prefix)
{
	const char *why = "untouched";
	int rc = td_wire_name_check(s, strlen(s), prefix, &why);

	if (rc)
		cr_assert(why && *why, "a refusal carries a reason");
	else
		cr_assert_null(why);
	return rc;
}

Test(wire, name_check_accepts_the_documented_set)
{
	char max[TD_WIRE_MAX_NAME + 1];

	memset(max, 'n', TD_WIRE_MAX_NAME);
	max[TD_WIRE_MAX_NAME] = 0;
	cr_assert_eq(name_rc("a", false), 0);
	cr_assert_eq(name_rc("cam/0/frame", false), 0);
	cr_assert_eq(name_rc("A-Z.a_z:0@9+x", false), 0);
	cr_assert_eq(name_rc(".hidden", false), 0);
	cr_assert_eq(name_rc("a.b.c", false), 0);
	cr_assert_eq(name_rc(max, false), 0);
	cr_assert_eq(name_rc("", true), 0);
	cr_assert_eq(name_rc("cam/", true), 0);
}

Test(wire, name_check_refuses_each_bad_shape)
{
	static const char *const bad[] = {
		"", "/abs", "a/", "a//b", "..", "a/..", "../a", "a/../b",
		"a..b", "sp ace", "tab\t", "nl\n", "del\x7f", "hi\x80",
		"q?", "star*", "back\\slash", "per%cent", "quo\"te",
	};
	char big[TD_WIRE_MAX_NAME + 2];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(name_rc(bad[i], false), -EINVAL, "'%s'", bad[i]);
	cr_assert_eq(name_rc("/cam", true), -EINVAL);
	cr_assert_eq(name_rc("cam//", true), -EINVAL);
	cr_assert_eq(name_rc("a/..", true), -EINVAL);
	cr_assert_eq(td_wire_name_check("a\0b", 3, false, NULL), -EINVAL);
	memset(big, 'n', sizeof(big));
	cr_assert_eq(td_wire_name_check(big, TD_WIRE_MAX_NAME + 1, false,
					NULL),
		     -EINVAL);
}

Test(wire, decoders_check_names_and_report_the_reason)
{
	struct td_wire_name_req m;
	struct td_wire_wr wr;
	struct td_err e;

	td_wire_wr_init(&wr, body, sizeof(body));
	td_wire_wr_str(&wr, "cam/../etc", 10);
	cr_assert_eq(td_wire_name_req_decode(body, wr.off, &m, &e), -EINVAL);
	cr_assert_eq(e.kind, TD_ERR_INVALID_ARGUMENT);
	cr_assert_str_eq(e.field, "name");
	cr_assert(strstr(e.reason, ".."), "reason: %s", e.reason);

	td_wire_wr_init(&wr, body, sizeof(body));
	td_wire_wr_str(&wr, "", 0);
	cr_assert_eq(td_wire_name_req_decode(body, wr.off, &m, &e), -EINVAL);

	/* a watch without the prefix flag must name a full name */
	td_wire_wr_init(&wr, body, sizeof(body));
	td_wire_wr_str(&wr, "cam/", 4);
	td_wire_wr_u32(&wr, 0);
	cr_assert_eq(td_wire_watch_req_decode(body, wr.off,
					      &(struct td_wire_watch_req){0},
					      NULL),
		     -EINVAL);
}

Test(wire, free_text_must_be_utf8_without_nul)
{
	struct td_wire_error g;
	struct td_wire_wr wr;

	td_wire_wr_init(&wr, body, sizeof(body));
	td_wire_wr_str(&wr, "bad \xff", 5);
	cr_assert_eq(td_wire_error_decode(body, wr.off, &g, NULL), -EILSEQ);
	td_wire_wr_init(&wr, body, sizeof(body));
	td_wire_wr_str(&wr, "nul\0", 4);
	cr_assert_eq(td_wire_error_decode(body, wr.off, &g, NULL), -EILSEQ);
	td_wire_wr_init(&wr, body, sizeof(body));
	td_wire_wr_str(&wr, "caf\xc3\xa9", 5);
	cr_assert_eq(td_wire_error_decode(body, wr.off, &g, NULL), 0);
}

/* ---- cursors and LIST paging ---- */

Test(wire, reader_errors_are_sticky_and_name_the_field)
{
	static const uint8_t b[6] = {1, 0, 0, 0, 9, 9};
	struct td_wire_rd rd;
	struct td_err e;

	td_wire_rd_init(&rd, b, sizeof(b), &e);
	cr_assert_eq(td_wire_rd_u32(&rd, "a"), 1);
	cr_assert_eq(td_wire_rd_u32(&rd, "b"), 0);
	cr_assert_eq(rd.rc, -ENODATA);
	cr_assert_str_eq(e.field, "b");
	cr_assert_eq(e.offset, 4);
	cr_assert_eq(e.need, 8);
	cr_assert_eq(e.have, 6);
	cr_assert_eq(td_wire_rd_u64(&rd, "c"), 0);
	cr_assert_str_eq(e.field, "b", "the first error is kept");
	cr_assert_eq(td_wire_rd_end(&rd), -ENODATA);
}

Test(wire, writer_overflow_is_sticky)
{
	uint8_t b[6];
	struct td_wire_wr wr;

	td_wire_wr_init(&wr, b, sizeof(b));
	td_wire_wr_u32(&wr, 1);
	cr_assert(!wr.overflow);
	td_wire_wr_u32(&wr, 2);
	cr_assert(wr.overflow);
	td_wire_wr_str(&wr, "", 0); /* would fit, but the body is lost */
	cr_assert(wr.overflow);
	cr_assert_eq(wr.off, 4);
}

Test(wire, list_reply_pages_until_full_and_rolls_back_the_last_entry)
{
	static uint8_t b[TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN];
	struct td_wire_wr wr;
	struct td_wire_list_rd lr;
	struct td_wire_entry e, g;
	char name[32];
	uint32_t put = 0, got = 0;
	int rc;

	td_wire_wr_init(&wr, b, sizeof(b));
	cr_assert_eq(td_wire_list_rep_begin(&wr), 0);
	for (;;) {
		snprintf(name, sizeof(name), "t/%06u", put);
		e = sample_entry(name, put + 1);
		rc = td_wire_entry_put(&wr, &e);
		if (rc)
			break;
		put++;
	}
	cr_assert_eq(rc, -ENOBUFS);
	cr_assert(!wr.overflow, "a refused entry leaves the body valid");
	cr_assert_gt(put, 100);
	td_wire_list_rep_finish(&wr, put, 1);

	cr_assert_eq(td_wire_list_rep_init(&lr, b, wr.off, NULL), 0);
	cr_assert_eq(lr.count, put);
	cr_assert_eq(lr.more, 1);
	while ((rc = td_wire_list_rep_next(&lr, &g)) == 1) {
		snprintf(name, sizeof(name), "t/%06u", got);
		cr_assert_eq(g.name.len, strlen(name));
		cr_assert(memcmp(g.name.ptr, name, g.name.len) == 0);
		cr_assert_eq(g.version, got + 1);
		got++;
	}
	cr_assert_eq(rc, 0);
	cr_assert_eq(got, put);
}

Test(wire, list_reply_begin_needs_an_empty_writer)
{
	uint8_t b[16];
	struct td_wire_wr wr;

	td_wire_wr_init(&wr, b, sizeof(b));
	td_wire_wr_u32(&wr, 0);
	cr_assert_eq(td_wire_list_rep_begin(&wr), -EINVAL);
	td_wire_wr_init(&wr, b, 7);
	cr_assert_eq(td_wire_list_rep_begin(&wr), -ENOBUFS);
}

Test(wire, opcode_names)
{
	cr_assert_str_eq(td_wire_op_name(TD_OP_HELLO), "HELLO");
	cr_assert_str_eq(td_wire_op_name(TD_OP_PUBLISH), "PUBLISH");
	cr_assert_str_eq(td_wire_op_name(TD_OP_UNWATCH), "UNWATCH");
	cr_assert_str_eq(td_wire_op_name(TD_OP_NOTIFY), "NOTIFY");
	cr_assert_str_eq(td_wire_op_name(0), "UNKNOWN");
	cr_assert_str_eq(td_wire_op_name(TD_OP_RING_CREATE), "RING_CREATE");
	cr_assert_str_eq(td_wire_op_name(TD_OP_RING_STAT), "RING_STAT");
	cr_assert_str_eq(td_wire_op_name(TD_OP_STATUS), "STATUS");
	cr_assert_str_eq(td_wire_op_name(TD_OP_RING_WAKE), "RING_WAKE");
	cr_assert_str_eq(td_wire_op_name(TD_OP_FOLLOW), "FOLLOW");
	cr_assert_str_eq(td_wire_op_name(TD_OP_FOLLOW_CLOSE), "FOLLOW_CLOSE");
	cr_assert_str_eq(td_wire_op_name(TD_OP_FOLLOW_WAKE), "FOLLOW_WAKE");
	cr_assert_str_eq(td_wire_op_name(TD_OP_STAGE_PAGE), "STAGE_PAGE");
	cr_assert_str_eq(td_wire_op_name(TD_OP_PUBLISH_MANY), "PUBLISH_MANY");
	cr_assert_str_eq(td_wire_op_name(TD_OP_GET_MANY), "GET_MANY");
	cr_assert_str_eq(td_wire_op_name(23), "UNKNOWN");
	/*
	 * Every request opcode has its name: STAGE_PAGE had none, so its
	 * refusals read "UNKNOWN: ...", the audit log said UNKNOWN and the
	 * metrics left its replies out (daemon/http.c skips UNKNOWN).
	 */
	for (uint16_t op = TD_OP_HELLO; op <= TD_OP_GET_MANY; op++)
		cr_assert_str_neq(td_wire_op_name(op), "UNKNOWN", "opcode %u",
				  op);
}

Test(wire, opcodes_and_flags_have_their_documented_values)
{
	cr_assert_eq(TD_WIRE_MAGIC, 0x31574454u);
	cr_assert_eq(TD_OP_HELLO, 1);
	cr_assert_eq(TD_OP_UNWATCH, 10);
	cr_assert_eq(TD_OP_NOTIFY, 0x100);
	cr_assert_eq(TD_WIRE_F_REPLY, 1);
	cr_assert_eq(TD_WIRE_F_NOTIFY, 2);
	cr_assert_eq(TD_WIRE_MAX_BLOB, 65536 - 16384 - 1024);
}

/*
 * tests/data/wire-seeds/ is written by scripts/gen-wire-seeds.py from the
 * byte tables of docs/protocol.md, independently of wire.c: every seed must
 * decode with its kind's decoder and re-encode to the same bytes.
 */
Test(wire, seeds_built_from_the_documented_tables_decode)
{
	for (int k = 0; k < K_COUNT; k++) {
		char rel[64];
		size_t len, rn = 0;
		uint8_t *buf;
		struct td_wire_hdr h;
		struct td_err e;
		int rc;

		snprintf(rel, sizeof(rel), "wire-seeds/%s.bin", kind_names[k]);
		buf = tu_read_file(tu_data_path(rel), &len);
		cr_assert_eq(td_wire_hdr_decode(buf, len, &h, &e), 0, "%s: %s",
			     rel, e.reason);
		rc = decode_any(k, buf + TD_WIRE_HDR_LEN, h.body_len, &e, canon,
				&rn);
		cr_assert_eq(rc, 0, "%s: %d %s", rel, rc, e.reason);
		cr_assert_eq(rn, h.body_len, "%s", rel);
		cr_assert(memcmp(canon, buf + TD_WIRE_HDR_LEN, rn) == 0, "%s",
			  rel);
		free(buf);
	}
}

/* ---- catalogue kinds: rings in LIST/STAT (docs/protocol.md §6.6) ---- */

Test(wire, list_and_stat_flags_are_optional_and_canonical)
{
	struct td_wire_list_req l = {STR("cam/"), STR(""), TD_WIRE_CAT_KINDS};
	struct td_wire_stat_req st = {STR("cam/0"), TD_WIRE_CAT_KINDS};
	struct td_wire_list_req lg;
	struct td_wire_stat_req sg;
	struct td_err e;
	int64_t n, old;

	/* without flags: the bytes of version 1 */
	l.flags = 0;
	old = td_wire_list_req_encode(&l, body, sizeof(body));
	cr_assert_eq(old, 2 + 4 + 2);
	cr_assert_eq(td_wire_list_req_decode(body, (size_t)old, &lg, &e), 0);
	cr_assert_eq(lg.flags, 0);
	/* with them: four more bytes, read back */
	l.flags = TD_WIRE_CAT_KINDS;
	n = td_wire_list_req_encode(&l, body, sizeof(body));
	cr_assert_eq(n, old + 4);
	cr_assert_eq(td__le32(body + old), TD_WIRE_CAT_KINDS);
	cr_assert_eq(td_wire_list_req_decode(body, (size_t)n, &lg, &e), 0);
	cr_assert_eq(lg.flags, TD_WIRE_CAT_KINDS);
	/* a present 0 would be a second encoding of "no flags" */
	td__put_le32(body + old, 0);
	cr_assert_eq(td_wire_list_req_decode(body, (size_t)n, &lg, &e),
		     -EBADMSG);
	cr_assert_str_eq(e.field, "flags");
	cr_assert_eq(e.offset, (uint64_t)old);
	td__put_le32(body + old, 0x4);
	cr_assert_eq(td_wire_list_req_decode(body, (size_t)n, &lg, &e),
		     -EBADMSG, "unknown bits");
	/* 1-3 or 5 bytes after `after` are trailing bytes, not flags */
	for (size_t extra = 1; extra <= 5; extra++) {
		if (extra == 4)
			continue;
		memset(body + old, 1, extra);
		cr_assert_eq(td_wire_list_req_decode(body, (size_t)old + extra,
						     &lg, &e),
			     -EBADMSG, "%zu extra", extra);
		cr_assert_eq(e.offset, (uint64_t)old);
	}
	l.flags = 0x8;
	cr_assert_eq(td_wire_list_req_encode(&l, body, sizeof(body)), -EINVAL);

	n = td_wire_stat_req_encode(&st, body, sizeof(body));
	cr_assert_eq(n, 2 + 5 + 4);
	cr_assert_eq(td_wire_stat_req_decode(body, (size_t)n, &sg, &e), 0);
	cr_assert_eq(sg.flags, TD_WIRE_CAT_KINDS);
	cr_assert_eq(sg.name.len, 5);
	/* a STAT body of version 1 is a name_req body, and decodes as both */
	cr_assert_eq(td_wire_stat_req_decode(body, (size_t)n - 4, &sg, &e), 0);
	cr_assert_eq(sg.flags, 0);
	for (size_t cut = 0; cut < (size_t)n - 4; cut++)
		cr_assert_eq(td_wire_stat_req_decode(body, cut, &sg, &e),
			     -ENODATA);
	td__put_le32(body + n - 4, 0);
	cr_assert_eq(td_wire_stat_req_decode(body, (size_t)n, &sg, &e),
		     -EBADMSG);
}

/* DELETE's optional version condition (docs/protocol.md §6.7) */
Test(wire, delete_condition_is_optional_and_canonical)
{
	struct td_wire_delete_req d = {STR("cam/0"), 0}, g;
	struct td_err e;
	int64_t n, old;

	/* without a condition: the bytes of version 1, a name_req body */
	old = td_wire_delete_req_encode(&d, body, sizeof(body));
	cr_assert_eq(old, 2 + 5);
	cr_assert_eq(td_wire_delete_req_decode(body, (size_t)old, &g, &e), 0);
	cr_assert_eq(g.version, 0);
	d.version = 0x0102030405060708ull;
	n = td_wire_delete_req_encode(&d, body, sizeof(body));
	cr_assert_eq(n, old + 8);
	cr_assert_eq(td__le64(body + old), 0x0102030405060708ull);
	cr_assert_eq(td_wire_delete_req_decode(body, (size_t)n, &g, &e), 0);
	cr_assert_eq(g.version, 0x0102030405060708ull);
	cr_assert_eq(g.name.len, 5);
	/* a present 0 would be a second encoding of "any version" */
	memset(body + old, 0, 8);
	cr_assert_eq(td_wire_delete_req_decode(body, (size_t)n, &g, &e),
		     -EBADMSG);
	cr_assert_str_eq(e.field, "version");
	cr_assert_eq(e.offset, (uint64_t)old);
	/* any other remainder is trailing bytes */
	for (size_t extra = 1; extra <= 9; extra++) {
		if (extra == 8)
			continue;
		memset(body + old, 1, extra);
		cr_assert_eq(td_wire_delete_req_decode(body,
						       (size_t)old + extra,
						       &g, &e),
			     -EBADMSG, "%zu extra", extra);
		cr_assert_eq(e.offset, (uint64_t)old);
	}
}

/* PUBLISH's condition (TD_WIRE_PUB_IF, docs/protocol.md §6.3): the flag
 * says whether `expect` is there, so each condition has one encoding */
Test(wire, publish_condition_rides_with_its_flag_only)
{
	struct td_wire_publish_req q = {
		.name = STR("cam/0"), .alloc_id = 4,
		.meta = BYTES(""), .blob = BYTES("blob"),
		.fd_count = 1, .fds = {-1}}, g;
	struct td_err e;
	int64_t old, n;

	/* without the flag: the bytes of before, and no expect */
	old = td_wire_publish_req_encode(&q, body, sizeof(body));
	cr_assert_gt(old, 0);
	cr_assert_eq(td_wire_publish_req_decode(body, (size_t)old, &g, &e), 0);
	cr_assert_eq(g.expect, 0);
	q.expect = 7; /* a condition without its flag: not encodable */
	cr_assert_eq(td_wire_publish_req_encode(&q, body, sizeof(body)),
		     -EINVAL);
	/* with the flag, expect 0 (no version) is 8 bytes too */
	for (uint64_t want = 0; want <= 7; want += 7) {
		q.flags = TD_WIRE_PUB_IF;
		q.expect = want;
		n = td_wire_publish_req_encode(&q, body, sizeof(body));
		cr_assert_eq(n, old + 8);
		cr_assert_eq(td__le64(body + old), want);
		cr_assert_eq(td_wire_publish_req_decode(body, (size_t)n, &g,
							&e), 0);
		cr_assert_eq(g.flags, TD_WIRE_PUB_IF);
		cr_assert_eq(g.expect, want);
		/* the field cut short, or left out */
		for (int64_t cut = old; cut < n; cut++)
			cr_assert_eq(td_wire_publish_req_decode(
					     body, (size_t)cut, &g, &e),
				     -ENODATA, "%lld bytes",
				     (long long)cut);
	}
	/* with LOAN's held ids, expect comes first */
	q.flags = TD_WIRE_PUB_IF | TD_WIRE_PUB_LOAN;
	q.held_count = 1;
	q.held[0] = 9;
	n = td_wire_publish_req_encode(&q, body, sizeof(body));
	cr_assert_eq(n, old + 8 + 4 + 8);
	cr_assert_eq(td__le64(body + old), 7);
	cr_assert_eq(td_wire_publish_req_decode(body, (size_t)n, &g, &e), 0);
	cr_assert_eq(g.expect, 7);
	cr_assert_eq(g.held_count, 1);
	cr_assert_eq(g.held[0], 9);
	/* a fired stage's notice is committed already: no condition */
	q.flags = TD_WIRE_PUB_IF | TD_WIRE_PUB_LOAN | TD_WIRE_PUB_FIRED;
	cr_assert_eq(td_wire_publish_req_encode(&q, body, sizeof(body)),
		     -EINVAL);
	q.flags = TD_WIRE_PUB_IF | TD_WIRE_PUB_LOAN;
	n = td_wire_publish_req_encode(&q, body, sizeof(body));
	td__put_le32(body + 2 + 5, TD_WIRE_PUB_IF | TD_WIRE_PUB_LOAN |
					   TD_WIRE_PUB_FIRED);
	cr_assert_eq(td_wire_publish_req_decode(body, (size_t)n, &g, &e),
		     -EBADMSG);
	cr_assert_str_eq(e.field, "flags");
}

Test(wire, ring_entries_round_trip_and_other_flag_bits_are_refused)
{
	struct td_wire_entry e1 = sample_entry("cam/frames", 9), g;
	struct td_err e;
	int64_t n;

	e1.flags = TD_WIRE_ENT_RING;
	e1.meta.len = 0;
	n = td_wire_entry_encode(&e1, body, sizeof(body));
	cr_assert(n > 0);
	cr_assert_eq(td_wire_entry_decode(body, (size_t)n, &g, &e), 0);
	cr_assert_eq(g.flags, TD_WIRE_ENT_RING);
	cr_assert_eq(g.version, 9);
	cr_assert_eq(g.ndim, 3);
	/* flags, then the (empty) meta length: the last 8 bytes */
	cr_assert_eq(td__le32(body + n - 8), TD_WIRE_ENT_RING);
	td__put_le32(body + n - 8, 0x8);
	cr_assert_eq(td_wire_entry_decode(body, (size_t)n, &g, &e), -EBADMSG);
	cr_assert_str_eq(e.field, "flags");
	e1.flags = 0x8;
	cr_assert_eq(td_wire_entry_encode(&e1, body, sizeof(body)), -EINVAL);
}

/* The seeds of the forms added for rings (scripts/gen-wire-seeds.py). */
Test(wire, ring_catalogue_seeds_decode)
{
	static const struct {
		const char *file;
		enum kind k;
	} seeds[] = {
		{"list_req_kinds", K_LIST_REQ},
		{"entry_ring", K_ENTRY},
		{"list_rep_ring", K_LIST_REP},
	};

	for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
		char rel[64];
		size_t len, rn = 0;
		uint8_t *buf;
		struct td_wire_hdr h;
		struct td_err e;

		snprintf(rel, sizeof(rel), "wire-seeds/%s.bin", seeds[i].file);
		buf = tu_read_file(tu_data_path(rel), &len);
		cr_assert_eq(td_wire_hdr_decode(buf, len, &h, &e), 0);
		cr_assert_eq(decode_any(seeds[i].k, buf + TD_WIRE_HDR_LEN,
					h.body_len, &e, canon, &rn),
			     0, "%s: %s", rel, e.reason);
		cr_assert_eq(rn, h.body_len, "%s", rel);
		cr_assert(memcmp(canon, buf + TD_WIRE_HDR_LEN, rn) == 0, "%s",
			  rel);
		free(buf);
	}
}

/* ---- recyclable loans (docs/fastpath.md, "Recycled loans") ---- */

/* The seeds of the forms added for recyclable loans. */
Test(wire, recycle_seeds_decode)
{
	static const struct {
		const char *file;
		enum kind k;
	} seeds[] = {
		{"alloc_req_recycle", K_ALLOC_REQ},
		{"alloc_rep_recycled", K_ALLOC_REP},
		{"stat_req_recycle", K_STAT_REQ},
		{"entry_recycle", K_ENTRY},
		{"alloc_req_named", K_ALLOC_REQ},
		/* staged publishes (§13) */
		{"publish_req_fired", K_PUBLISH_REQ},
		{"publish_rep_stage", K_PUBLISH_REP},
		{"alloc_req_stage", K_ALLOC_REQ},
		{"alloc_rep_stage", K_ALLOC_REP},
		/* a publish with a condition (§6.3), and in PUBLISH_MANY */
		{"publish_req_if_absent", K_PUBLISH_REQ},
		{"publish_req_if", K_PUBLISH_REQ},
		{"publish_many_req_if", K_PUBLISH_MANY_REQ},
		/* a GET_MANY that waits (§6.10) */
		{"get_many_req_newer", K_GET_MANY_REQ},
	};

	for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
		char rel[64];
		size_t len, rn = 0;
		uint8_t *buf;
		struct td_wire_hdr h;
		struct td_err e;

		snprintf(rel, sizeof(rel), "wire-seeds/%s.bin", seeds[i].file);
		buf = tu_read_file(tu_data_path(rel), &len);
		cr_assert_eq(td_wire_hdr_decode(buf, len, &h, &e), 0);
		cr_assert_eq(decode_any(seeds[i].k, buf + TD_WIRE_HDR_LEN,
					h.body_len, &e, canon, &rn),
			     0, "%s: %s", rel, e.reason);
		cr_assert_eq(rn, h.body_len, "%s", rel);
		cr_assert(memcmp(canon, buf + TD_WIRE_HDR_LEN, rn) == 0, "%s",
			  rel);
		free(buf);
	}
}

static const struct td_wire_alloc_req recycle_req = {
	.flags = TD_WIRE_ALLOC_RECYCLE | TD_WIRE_REQ_SCM,
	.plane_count = 2,
	.sizes = {4096, 8192},
	.held_count = 3,
	.held = {7, 9, 1ull << 40},
};

Test(wire, alloc_held_ids_round_trip_and_truncate_at_every_byte)
{
	struct td_wire_alloc_req g;
	struct td_err e;
	int64_t n = td_wire_alloc_req_encode(&recycle_req, body, sizeof(body));

	/* flags, count, 2 sizes, held count, 3 ids */
	cr_assert_eq(n, 4 + 4 + 16 + 4 + 24);
	cr_assert_eq(td_wire_alloc_req_decode(body, (size_t)n, &g, &e), 0);
	cr_assert_eq(g.flags, recycle_req.flags);
	cr_assert_eq(g.held_count, 3);
	cr_assert_eq(g.held[0], 7);
	cr_assert_eq(g.held[2], 1ull << 40);
	cr_assert_eq(g.sizes[1], 8192);
	/*
	 * Every cut: the version-1 body (after the sizes) decodes with no
	 * held ids; 1-3 bytes more are trailing bytes; a cut list is
	 * truncated.
	 */
	for (int64_t cut = 0; cut < n; cut++) {
		int rc = td_wire_alloc_req_decode(body, (size_t)cut, &g, &e);

		if (cut == 24) {
			cr_assert_eq(rc, 0);
			cr_assert_eq(g.held_count, 0);
		} else if (cut > 24 && cut < 28) {
			cr_assert_eq(rc, -EBADMSG, "cut %lld", (long long)cut);
			cr_assert_str_eq(e.reason,
					 "trailing bytes after the message");
		} else {
			cr_assert_eq(rc, -ENODATA, "cut %lld", (long long)cut);
			cr_assert_eq(g.held_count, 0);
		}
	}
	/* without held ids the body is exactly the version-1 one */
	g = recycle_req;
	g.held_count = 0;
	cr_assert_eq(td_wire_alloc_req_encode(&g, body, sizeof(body)), 24);
}

/* Decode recycle_req with the u64/u32 at off replaced; 0 or -errno. */
static int held_patched(size_t off, uint64_t v, bool wide,
			struct td_err *e)
{
	struct td_wire_alloc_req g;
	int64_t n = td_wire_alloc_req_encode(&recycle_req, body, sizeof(body));

	cr_assert(n > 0);
	if (wide)
		td__put_le64(body + off, v);
	else
		td__put_le32(body + off, (uint32_t)v);
	memset(e, 0, sizeof(*e));
	return td_wire_alloc_req_decode(body, (size_t)n, &g, e);
}

/* REWRITE takes back a recyclable version: only with RECYCLE */
Test(wire, alloc_rewrite_needs_the_recycle_flag)
{
	struct td_wire_alloc_req m = recycle_req, g;
	struct td_err e = {0};
	int64_t n;

	m.flags |= TD_WIRE_ALLOC_REWRITE;
	n = td_wire_alloc_req_encode(&m, body, sizeof(body));
	cr_assert_gt(n, 0);
	cr_assert_eq(td_wire_alloc_req_decode(body, (size_t)n, &g, &e), 0);
	cr_assert_eq(g.flags, m.flags);
	m.flags = TD_WIRE_ALLOC_REWRITE;
	m.held_count = 0;
	cr_assert_eq(td_wire_alloc_req_encode(&m, body, sizeof(body)),
		     -EINVAL);
	/* the same body by hand: flags REWRITE, one plane of 4096 */
	td__put_le32(body, TD_WIRE_ALLOC_REWRITE);
	td__put_le32(body + 4, 1);
	td__put_le64(body + 8, 4096);
	cr_assert_eq(td_wire_alloc_req_decode(body, 16, &g, &e), -EBADMSG);
	cr_assert_str_eq(e.reason, "REWRITE without the RECYCLE flag");
	cr_assert_str_eq(e.field, "flags");
}

/* A named alloc (docs/fastpath.md, "Across names"): the name after the
 * sizes, before the held ids; only with the flag, and a valid name. */
Test(wire, alloc_named_round_trip_and_refusals)
{
	struct td_wire_alloc_req m = recycle_req, g;
	struct td_err e = {0};
	int64_t n;

	m.flags |= TD_WIRE_ALLOC_NAMED;
	m.name = (struct td_wire_str){"cam/0", 5};
	n = td_wire_alloc_req_encode(&m, body, sizeof(body));
	/* flags, count, 2 sizes, u16 + 5 name bytes, held count, 3 ids */
	cr_assert_eq(n, 4 + 4 + 16 + 2 + 5 + 4 + 24);
	cr_assert_eq(memcmp(body + 24, "\x05\x00" "cam/0", 7), 0);
	cr_assert_eq(td_wire_alloc_req_decode(body, (size_t)n, &g, &e), 0);
	cr_assert_eq(g.name.len, 5);
	cr_assert_eq(memcmp(g.name.ptr, "cam/0", 5), 0);
	cr_assert_eq(g.held_count, 3);
	/* the name cut off */
	cr_assert_eq(td_wire_alloc_req_decode(body, 28, &g, &e), -ENODATA);
	/* without the flag those bytes are a bad held list */
	td__put_le32(body, recycle_req.flags);
	cr_assert_neq(td_wire_alloc_req_decode(body, (size_t)n, &g, &e), 0);
	/* an empty name, or one the name rules refuse */
	td__put_le32(body, m.flags);
	body[24] = 0;
	cr_assert_eq(td_wire_alloc_req_decode(body, 26, &g, &e), -EINVAL);
	cr_assert_str_eq(e.field, "name");
	body[24] = 5;
	body[26] = '/';
	cr_assert_eq(td_wire_alloc_req_decode(body, (size_t)n, &g, &e),
		     -EINVAL);
	cr_assert_str_eq(e.field, "name");
	/* the encoder refuses what the decoder would */
	m.name.len = 0;
	cr_assert_eq(td_wire_alloc_req_encode(&m, body, sizeof(body)),
		     -EINVAL);
	/* unnamed: the name field is not there at all */
	m = recycle_req;
	m.name = (struct td_wire_str){"cam/0", 5};
	cr_assert_eq(td_wire_alloc_req_encode(&m, body, sizeof(body)),
		     4 + 4 + 16 + 4 + 24);
}

Test(wire, bad_held_ids_are_refused_with_a_reason)
{
	struct td_wire_alloc_req m = recycle_req;
	struct td_err e;

	/* a count over the cap */
	cr_assert_eq(held_patched(24, TD_WIRE_MAX_HELD + 1, false, &e),
		     -EOVERFLOW);
	cr_assert_str_eq(e.field, "held_count");
	/* a present empty list: one encoding per body */
	cr_assert_eq(held_patched(24, 0, false, &e), -EBADMSG);
	cr_assert_str_eq(e.reason,
			 "an empty held list is sent by leaving it out");
	/* held ids without the flag */
	cr_assert_eq(held_patched(0, TD_WIRE_REQ_SCM, false, &e), -EBADMSG);
	cr_assert_str_eq(e.reason, "held buffer ids without the RECYCLE flag");
	/* id 0, a ring window, a repeated id */
	cr_assert_eq(held_patched(28, 0, true, &e), -EINVAL);
	cr_assert_eq(e.kind, TD_ERR_INVALID_ARGUMENT);
	cr_assert_eq(e.offset, 28);
	cr_assert_eq(held_patched(36, TD_WIRE_BUF_WINDOW | 9, true, &e),
		     -EINVAL);
	cr_assert_eq(e.offset, 36);
	cr_assert_eq(held_patched(44, 7, true, &e), -EINVAL);
	cr_assert_str_eq(e.reason, "held id listed twice");
	cr_assert_eq(e.offset, 44);
	/* the encoder refuses what the decoder would */
	m.held_count = TD_WIRE_MAX_HELD + 1;
	cr_assert_eq(td_wire_alloc_req_encode(&m, body, sizeof(body)),
		     -EINVAL);
	m = recycle_req;
	m.flags = TD_WIRE_REQ_SCM;
	cr_assert_eq(td_wire_alloc_req_encode(&m, body, sizeof(body)),
		     -EINVAL);
	m = recycle_req;
	m.held[1] = 7;
	cr_assert_eq(td_wire_alloc_req_encode(&m, body, sizeof(body)),
		     -EINVAL);
	m = recycle_req;
	m.held[0] = 0;
	cr_assert_eq(td_wire_alloc_req_encode(&m, body, sizeof(body)),
		     -EINVAL);
	m = recycle_req;
	m.flags |= 0x40;
	cr_assert_eq(td_wire_alloc_req_encode(&m, body, sizeof(body)),
		     -EINVAL);
}

/* An ALLOC reply's optional unreserved mask (TD_WIRE_ALLOC_RESERVE). */
Test(wire, alloc_reply_unreserved_mask_round_trips_and_is_checked)
{
	struct td_wire_alloc_rep r = {.alloc_id = 5,
				      .fd_count = 3,
				      .fds = {{10, 1}, {-1, 2}, {12, 3}},
				      .unreserved = 0x5},
				 g;
	struct td_wire_publish_rep pr = {.version = 9, .has_loan = true};
	struct td_err e;
	int64_t n = td_wire_alloc_rep_encode(&r, body, sizeof(body)), n0;

	cr_assert_gt(n, 0);
	cr_assert_eq(td_wire_alloc_rep_decode(body, (size_t)n, &g, &e), 0);
	cr_assert_eq(g.unreserved, 0x5);
	cr_assert_eq(g.fd_count, 3);
	/* left out when 0: the body a daemon without it sends */
	r.unreserved = 0;
	n0 = td_wire_alloc_rep_encode(&r, body, sizeof(body));
	cr_assert_eq(n0, n - 4);
	g.unreserved = 7;
	cr_assert_eq(td_wire_alloc_rep_decode(body, (size_t)n0, &g, &e), 0);
	cr_assert_eq(g.unreserved, 0);
	/* a present 0, a plane the client holds, a plane past the reply */
	td__put_le32(body + n0, 0);
	cr_assert_eq(td_wire_alloc_rep_decode(body, (size_t)n, &g, &e),
		     -EBADMSG);
	cr_assert_str_eq(e.reason, "an empty unreserved mask is sent by "
				   "leaving it out");
	cr_assert_eq(e.offset, (uint64_t)n0);
	td__put_le32(body + n0, 0x2);
	cr_assert_eq(td_wire_alloc_rep_decode(body, (size_t)n, &g, &e),
		     -EINVAL);
	cr_assert_str_eq(e.field, "unreserved");
	cr_assert_str_eq(e.reason, "unreserved names a plane the client "
				   "holds (fd -1), which was not made now");
	td__put_le32(body + n0, 0x8);
	cr_assert_eq(td_wire_alloc_rep_decode(body, (size_t)n, &g, &e),
		     -EINVAL);
	cr_assert_str_eq(e.reason,
			 "unreserved names a plane the reply does not have");
	/* fewer bytes than the mask are trailing bytes */
	cr_assert_eq(td_wire_alloc_rep_decode(body, (size_t)n0 + 2, &g, &e),
		     -EBADMSG);
	/* the encoders refuse what the decoder would, and a loan's mask */
	r.unreserved = 0x2;
	cr_assert_eq(td_wire_alloc_rep_encode(&r, body, sizeof(body)),
		     -EINVAL);
	r.unreserved = 0x8;
	cr_assert_eq(td_wire_alloc_rep_encode(&r, body, sizeof(body)),
		     -EINVAL);
	pr.loan = (struct td_wire_alloc_rep){
		.alloc_id = 4, .fd_count = 1, .fds = {{3, 8}}, .unreserved = 1};
	cr_assert_eq(td_wire_publish_rep_encode(&pr, body, sizeof(body)),
		     -EINVAL);
	/* the flag is known, and needs no other */
	cr_assert_gt(td_wire_alloc_req_encode(
			     &(struct td_wire_alloc_req){
				     .flags = TD_WIRE_ALLOC_RESERVE,
				     .plane_count = 1,
				     .sizes = {1 << 20}},
			     body, sizeof(body)),
		     0);
}

/* An SCM consumer's GET advertising the buffers it has mapped (§6.4). */
static const struct td_wire_get_req held_get = {
	.name = {"cam/0", 5},
	.mode = TD_GET_LATEST,
	.flags = TD_WIRE_REQ_SCM,
	.timeout_ms = 0,
	.held_count = 3,
	.held = {7, 9, 1ull << 40},
};

Test(wire, get_held_ids_round_trip_and_truncate_at_every_byte)
{
	struct td_wire_get_req g;
	struct td_err e;
	int64_t n = td_wire_get_req_encode(&held_get, body, sizeof(body));

	/* name (2 + 5), mode, flags, version, timeout, held count, 3 ids */
	cr_assert_eq(n, 7 + 4 + 4 + 8 + 4 + 4 + 24);
	cr_assert_eq(td_wire_get_req_decode(body, (size_t)n, &g, &e), 0);
	cr_assert_eq(g.flags, TD_WIRE_REQ_SCM);
	cr_assert_eq(g.held_count, 3);
	cr_assert_eq(g.held[0], 7);
	cr_assert_eq(g.held[1], 9);
	cr_assert_eq(g.held[2], 1ull << 40);
	/*
	 * Every cut: the version-1 body (after timeout_ms) decodes with no
	 * held ids; 1-3 bytes more are trailing bytes; a cut list is
	 * truncated.
	 */
	for (int64_t cut = 0; cut < n; cut++) {
		int rc = td_wire_get_req_decode(body, (size_t)cut, &g, &e);

		if (cut == 27) {
			cr_assert_eq(rc, 0);
			cr_assert_eq(g.held_count, 0);
		} else if (cut > 27 && cut < 31) {
			cr_assert_eq(rc, -EBADMSG, "cut %lld", (long long)cut);
			cr_assert_str_eq(e.reason,
					 "trailing bytes after the message");
		} else {
			cr_assert_eq(rc, -ENODATA, "cut %lld", (long long)cut);
			cr_assert_eq(g.held_count, 0);
		}
	}
	/* without held ids the body is exactly the version-1 one */
	g = held_get;
	g.held_count = 0;
	cr_assert_eq(td_wire_get_req_encode(&g, body, sizeof(body)), 27);
}

/* Decode held_get with the u64/u32 at off replaced; 0 or -errno. */
static int get_held_patched(size_t off, uint64_t v, bool wide,
			    struct td_err *e)
{
	struct td_wire_get_req g;
	int64_t n = td_wire_get_req_encode(&held_get, body, sizeof(body));
	int rc;

	cr_assert(n > 0);
	if (wide)
		td__put_le64(body + off, v);
	else
		td__put_le32(body + off, (uint32_t)v);
	memset(e, 0, sizeof(*e));
	rc = td_wire_get_req_decode(body, (size_t)n, &g, e);
	/* a refused list is never half reported */
	cr_assert(rc == 0 || g.held_count == 0);
	return rc;
}

Test(wire, bad_get_held_ids_are_refused_with_a_reason)
{
	struct td_wire_get_req m = held_get;
	struct td_err e;

	/* a count over the cap */
	cr_assert_eq(get_held_patched(27, TD_WIRE_MAX_HELD + 1, false, &e),
		     -EOVERFLOW);
	cr_assert_str_eq(e.field, "held_count");
	cr_assert_eq(e.offset, 27);
	/* a present empty list: one encoding per body */
	cr_assert_eq(get_held_patched(27, 0, false, &e), -EBADMSG);
	cr_assert_str_eq(e.reason,
			 "an empty held list is sent by leaving it out");
	/* held ids without the SCM flag: a pidfd consumer pulls what it
	 * lacks and needs none */
	cr_assert_eq(get_held_patched(11, 0, false, &e), -EBADMSG);
	cr_assert_str_eq(e.reason, "held buffer ids without the SCM flag");
	cr_assert_eq(e.offset, 27);
	/* id 0, a ring window, a repeated id */
	cr_assert_eq(get_held_patched(31, 0, true, &e), -EINVAL);
	cr_assert_eq(e.kind, TD_ERR_INVALID_ARGUMENT);
	cr_assert_eq(e.offset, 31);
	cr_assert_eq(get_held_patched(39, TD_WIRE_BUF_WINDOW | 9, true, &e),
		     -EINVAL);
	cr_assert_eq(e.offset, 39);
	cr_assert_eq(get_held_patched(47, 7, true, &e), -EINVAL);
	cr_assert_str_eq(e.reason, "held id listed twice");
	cr_assert_eq(e.offset, 47);
	/* the encoder refuses what the decoder would */
	m.held_count = TD_WIRE_MAX_HELD + 1;
	cr_assert_eq(td_wire_get_req_encode(&m, body, sizeof(body)), -EINVAL);
	m = held_get;
	m.flags = 0;
	cr_assert_eq(td_wire_get_req_encode(&m, body, sizeof(body)), -EINVAL);
	m = held_get;
	m.held[1] = 7;
	cr_assert_eq(td_wire_get_req_encode(&m, body, sizeof(body)), -EINVAL);
	m = held_get;
	m.held[2] = TD_WIRE_BUF_WINDOW;
	cr_assert_eq(td_wire_get_req_encode(&m, body, sizeof(body)), -EINVAL);
}

Test(wire, get_reply_with_a_held_buffer_left_out_round_trips)
{
	struct td_wire_get_rep r = {
		.version = 6,
		.lease_id = 2,
		.blob = {(const uint8_t *)"0123", 4},
		.fd_count = 2,
		.fds = {{-1, 7}, {11, 13}},
	}, g;
	struct td_err e;
	int64_t n = td_wire_get_rep_encode(&r, body, sizeof(body));

	cr_assert(n > 0);
	cr_assert_eq(td_wire_get_rep_decode(body, (size_t)n, &g, &e), 0);
	cr_assert_eq(g.fd_count, 2);
	cr_assert_eq(g.fds[0].fd, -1);
	cr_assert_eq(g.fds[0].buffer_id, 7);
	cr_assert_eq(g.fds[1].fd, 11);
	cr_assert_eq(g.fds[1].buffer_id, 13);
}

Test(wire, recycle_entry_flag_and_catalogue_bit_round_trip)
{
	struct td_wire_entry e1 = sample_entry("cam/0", 4), g;
	struct td_wire_stat_req sr = {{"cam/0", 5},
				      TD_WIRE_CAT_KINDS | TD_WIRE_CAT_RECYCLE};
	struct td_wire_stat_req sg;
	struct td_err e;
	int64_t n;

	e1.flags = TD_WIRE_ENT_RECYCLE | TD_WIRE_PUB_PIN;
	n = td_wire_entry_encode(&e1, body, sizeof(body));
	cr_assert(n > 0);
	cr_assert_eq(td_wire_entry_decode(body, (size_t)n, &g, &e), 0);
	cr_assert_eq(g.flags, TD_WIRE_ENT_RECYCLE | TD_WIRE_PUB_PIN);
	n = td_wire_stat_req_encode(&sr, body, sizeof(body));
	cr_assert_eq(n, 2 + 5 + 4);
	cr_assert_eq(td_wire_stat_req_decode(body, (size_t)n, &sg, &e), 0);
	cr_assert_eq(sg.flags, TD_WIRE_CAT_KINDS | TD_WIRE_CAT_RECYCLE);
	td__put_le32(body + 7, 0x4);
	cr_assert_eq(td_wire_stat_req_decode(body, (size_t)n, &sg, &e),
		     -EBADMSG);
	cr_assert_str_eq(e.reason, "unknown flag bits");
}

Test(wire, hello_feature_bits_are_optional_and_never_zero)
{
	struct td_wire_hello_req q = {TD_IMPORT_AUTO, 3, STR("cli"), 0};
	struct td_wire_hello_rep r = {
		.daemon_pid = 1, .import_in = TD_IMPORT_SCM,
		.probe_fd = -1, .max_msg = TD_WIRE_MAX_MSG,
		.ident = STR("tensord 0.1.0")};
	struct td_wire_hello_req qg;
	struct td_wire_hello_rep rg;
	struct td_err e;
	int64_t n, old;

	/* a version-1 HELLO: no word, and it reads as no features */
	old = td_wire_hello_req_encode(&q, body, sizeof(body));
	cr_assert_eq(old, 4 + 4 + 2 + 3);
	cr_assert_eq(td_wire_hello_req_decode(body, (size_t)old, &qg, &e), 0);
	cr_assert_eq(qg.features, 0);
	/* with features: four more bytes, unknown bits kept */
	q.features = TD_WIRE_FEAT_GET_HELD | 0x80000000u;
	n = td_wire_hello_req_encode(&q, body, sizeof(body));
	cr_assert_eq(n, old + 4);
	cr_assert_eq(td__le32(body + old), q.features);
	cr_assert_eq(td_wire_hello_req_decode(body, (size_t)n, &qg, &e), 0);
	cr_assert_eq(qg.features, q.features);
	/* a present 0 would be a second encoding of "none" */
	td__put_le32(body + old, 0);
	cr_assert_eq(td_wire_hello_req_decode(body, (size_t)n, &qg, &e),
		     -EBADMSG);
	cr_assert_str_eq(e.field, "features");
	cr_assert_eq(e.offset, (uint64_t)old);
	for (size_t extra = 1; extra < 4; extra++)
		cr_assert_eq(td_wire_hello_req_decode(body, (size_t)old + extra,
						      &qg, &e),
			     -EBADMSG, "%zu extra", extra);

	/* the reply: the same rule after ident */
	old = td_wire_hello_rep_encode(&r, body, sizeof(body));
	cr_assert_eq(old, 4 * 9 + 8 + 2 + 13);
	cr_assert_eq(td_wire_hello_rep_decode(body, (size_t)old, &rg, &e), 0);
	cr_assert_eq(rg.features, 0);
	r.features = TD_WIRE_FEAT_CAT_KINDS | TD_WIRE_FEAT_ALLOC_RECYCLE;
	n = td_wire_hello_rep_encode(&r, body, sizeof(body));
	cr_assert_eq(n, old + 4);
	cr_assert_eq(td_wire_hello_rep_decode(body, (size_t)n, &rg, &e), 0);
	cr_assert_eq(rg.features, r.features);
	td__put_le32(body + old, 0);
	cr_assert_eq(td_wire_hello_rep_decode(body, (size_t)n, &rg, &e),
		     -EBADMSG);
	cr_assert_str_eq(e.field, "features");
}

Test(wire, hdr_peek_echoes_what_the_bytes_reach)
{
	struct td_wire_hdr h = {TD_WIRE_MAGIC, TD_WIRE_VERSION, TD_OP_GET, 0,
				0, 0x1122334455667788ull, 0, 0};
	uint8_t b[TD_WIRE_HDR_LEN];
	uint16_t op;
	uint64_t id;

	td_wire_hdr_encode(&h, b);
	td_wire_hdr_peek(b, sizeof(b), &op, &id);
	cr_assert_eq(op, TD_OP_GET);
	cr_assert_eq(id, h.request_id);
	/* a bad magic does not matter: it is an echo, not a decode */
	b[0] ^= 0xff;
	td_wire_hdr_peek(b, 24, &op, &id);
	cr_assert_eq(op, TD_OP_GET);
	cr_assert_eq(id, h.request_id);
	/* what the length does not reach is 0 */
	td_wire_hdr_peek(b, 23, &op, &id);
	cr_assert_eq(op, TD_OP_GET);
	cr_assert_eq(id, 0);
	td_wire_hdr_peek(b, 7, &op, &id);
	cr_assert_eq(op, 0);
	cr_assert_eq(id, 0);
}

/* One size parser for daemon options and the policy file (bytes.h). */
Test(wire, size_parse_reads_digits_and_one_binary_suffix)
{
	static const struct {
		const char *s;
		uint64_t v;
	} ok[] = {
		{"0", 0},
		{"12", 12},
		{"12K", 12ull << 10},
		{"3m", 3ull << 20},
		{"1G", 1ull << 30},
		{"2t", 2ull << 40},
		{"18446744073709551615", UINT64_MAX},
		{"16777215T", 16777215ull << 40},
		{"007", 7},
	};
	static const char *const bad[] = {
		"", "K", "-1", "+1", " 1", "1 ", "1KB", "1P", "1.5G", "0x10",
		"18446744073709551616", "16777216T", "99999999999999999999",
	};
	uint64_t v;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		v = 42;
		cr_assert_eq(td__size_parse(ok[i].s, strlen(ok[i].s), &v), 0,
			     "%s", ok[i].s);
		cr_assert_eq(v, ok[i].v, "%s", ok[i].s);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 42;
		cr_assert_eq(td__size_parse(bad[i], strlen(bad[i]), &v),
			     -EINVAL, "%s", bad[i]);
		cr_assert_eq(v, 42, "%s: *out untouched", bad[i]);
	}
	/* the length bounds the text: no NUL needed, none read past */
	cr_assert_eq(td__size_parse("64Kxyz", 3, &v), 0);
	cr_assert_eq(v, 64ull << 10);
}

/* STATUS: a round trip, every truncation refused, counts over the cap. */
/*
 * TD_WIRE_FEAT_STATUS_PINNED: each uid row ends with pinned_use and
 * pinned_limit (16 more bytes a row), read only by a decoder told to
 * expect them; with them, a uid repeated in the rows is refused.
 */
Test(wire, status_pinned_rows_round_trip_and_refuse_a_repeated_uid)
{
	struct td_wire_status_uid ui[2] = {
		{.uid = 1000, .bytes = 1 << 20, .pinned = 4096,
		 .pinned_use = 3 << 20, .pinned_limit = 2 << 20},
		{.uid = 65534, .pinned_use = 1 << 20, .pinned_limit = 0},
	};
	struct td_wire_status_rep m = {
		.ident = {"tensord 9", 9}, .uid_count = 2, .uids = ui,
		.has_pinned = true,
	};
	static uint8_t buf[TD_WIRE_MAX_MSG], re[TD_WIRE_MAX_MSG];
	struct td_wire_status_uid gu[2];
	struct td_wire_status_rep g = {.uids = gu, .has_pinned = true};
	struct td_err e = {0};
	int64_t n = td_wire_status_rep_encode(&m, buf, sizeof(buf)), old;

	cr_assert_gt(n, 0);
	m.has_pinned = false;
	old = td_wire_status_rep_encode(&m, re, sizeof(re));
	cr_assert_eq(n, old + 2 * 16, "16 bytes more a row");
	m.has_pinned = true;
	cr_assert_eq(td_wire_status_rep_decode(buf, (size_t)n, &g, 0, 2, &e),
		     0, "%s", e.reason);
	cr_assert_eq(g.uid_count, 2);
	/* over its limit is a state the daemon reports, not a bad row */
	cr_assert_eq(gu[0].pinned_use, 3 << 20);
	cr_assert_eq(gu[0].pinned_limit, 2 << 20);
	cr_assert_eq(gu[0].pinned, 4096, "the PIN versions' figure apart");
	cr_assert_eq(gu[1].pinned_use, 1 << 20);
	cr_assert_eq(td_wire_status_rep_encode(&g, re, sizeof(re)), n);
	cr_assert(!memcmp(re, buf, (size_t)n));
	for (int64_t i = 0; i < n; i++) {
		memset(&e, 0, sizeof(e));
		cr_assert_eq(td_wire_status_rep_decode(buf, (size_t)i, &g, 0,
						       2, &e),
			     -ENODATA, "truncated at %lld", (long long)i);
		cr_assert_not_null(e.reason);
		cr_assert_eq(g.uid_count, 0, "nothing half-read");
	}
	/* one decoder, fed the other layout: refused, not misread */
	g.has_pinned = false;
	cr_assert_lt(td_wire_status_rep_decode(buf, (size_t)n, &g, 0, 2,
					       NULL),
		     0, "pinned rows to an old decoder");
	g.has_pinned = true;
	cr_assert_lt(td_wire_status_rep_decode(re, (size_t)old, &g, 0, 2,
					       NULL),
		     0, "old rows to a new decoder");
	/* a uid twice: its figures would be added up twice */
	ui[1].uid = 1000;
	n = td_wire_status_rep_encode(&m, buf, sizeof(buf));
	memset(&e, 0, sizeof(e));
	cr_assert_eq(td_wire_status_rep_decode(buf, (size_t)n, &g, 0, 2, &e),
		     -EBADMSG);
	cr_assert_str_eq(e.field, "uid");
	cr_assert_str_eq(e.reason, "a uid row repeated");
	cr_assert_eq(e.offset, (uint64_t)n - 44, "the second row: %llu",
		     (unsigned long long)e.offset);
	cr_assert_eq(g.uid_count, 0, "nothing half-read is handed out");
	/* the old layout never refused one (nor does it now) */
	m.has_pinned = g.has_pinned = false;
	n = td_wire_status_rep_encode(&m, buf, sizeof(buf));
	cr_assert_eq(td_wire_status_rep_decode(buf, (size_t)n, &g, 0, 2, &e),
		     0, "%s", e.reason);
}

Test(wire, status_reply_round_trips_and_refuses_truncation_and_forged_counts)
{
	struct td_wire_status_client cl[2] = {
		{.pid = 7, .uid = 1000, .import_in = TD_IMPORT_SCM,
		 .leases = 3, .bytes_held = 4096, .requests = 99,
		 .refusals = 1, .age_ms = 5, .comm = {"cam", 3}},
		{.pid = 8, .uid = 0, .import_in = TD_IMPORT_PIDFD,
		 .comm = {"", 0}},
	};
	struct td_wire_status_uid ui[1] = {{1000, 1 << 20, 2 << 20, 4096, 0, 0}};
	struct td_wire_status_rep m = {
		.ident = {"tensord 9", 9}, .scope = TD_WIRE_STATUS_UID,
		.daemon_uid = 0, .uptime_ms = 1234, .tensors = 5,
		.bytes = 1 << 20, .refused = {1, 2, 3}, .clients_total = 4,
		.client_count = 2, .clients = cl, .uid_count = 1, .uids = ui,
	};
	static uint8_t buf[TD_WIRE_MAX_MSG], re[TD_WIRE_MAX_MSG];
	struct td_wire_status_client gc[2];
	struct td_wire_status_uid gu[1];
	struct td_wire_status_rep g = {.clients = gc, .uids = gu};
	struct td_err e = {0};
	int64_t n = td_wire_status_rep_encode(&m, buf, sizeof(buf));

	cr_assert_gt(n, 0);
	cr_assert_eq(td_wire_status_rep_decode(buf, (size_t)n, &g, 2, 1, &e),
		     0, "%s", e.reason);
	cr_assert_eq(g.client_count, 2);
	cr_assert_eq(g.clients[0].bytes_held, 4096);
	cr_assert_eq(g.clients[0].comm.len, 3);
	cr_assert(!memcmp(g.clients[0].comm.ptr, "cam", 3));
	cr_assert_eq(g.uids[0].quota, 2 << 20);
	cr_assert_eq(g.refused[2], 3);
	cr_assert_eq(td_wire_status_rep_encode(&g, re, sizeof(re)), n);
	cr_assert(!memcmp(re, buf, (size_t)n));
	for (int64_t i = 0; i < n; i++)
		cr_assert_lt(td_wire_status_rep_decode(buf, (size_t)i, &g, 2, 1,
						       NULL),
			     0, "truncated at %lld", (long long)i);
	/* the byte reserve's tail (TD_WIRE_FEAT_STATUS_RESERVE): 8 more
	 * bytes, read only by a decoder told to expect them */
	m.has_reserve = true;
	m.byte_reserve = 1ull << 30;
	cr_assert_eq(td_wire_status_rep_encode(&m, re, sizeof(re)), n + 8);
	g.has_reserve = true;
	cr_assert_eq(td_wire_status_rep_decode(re, (size_t)n + 8, &g, 2, 1,
					       &e),
		     0, "%s", e.reason);
	cr_assert_eq(g.byte_reserve, 1ull << 30);
	cr_assert_eq(td_wire_status_rep_decode(buf, (size_t)n, &g, 2, 1, NULL),
		     -ENODATA, "the tail expected and missing");
	g.has_reserve = false;
	cr_assert_lt(td_wire_status_rep_decode(re, (size_t)n + 8, &g, 2, 1,
					       NULL),
		     0, "a tail not expected");
	m.has_reserve = false;
	/* more clients than the caller has room for */
	cr_assert_eq(td_wire_status_rep_decode(buf, (size_t)n, &g, 1, 1, &e),
		     -EOVERFLOW);
	cr_assert_eq(g.client_count, 0, "nothing half-read is handed out");
	/* a scope outside its set */
	m.scope = 7;
	n = td_wire_status_rep_encode(&m, buf, sizeof(buf));
	cr_assert_eq(td_wire_status_rep_decode(buf, (size_t)n, &g, 2, 1, &e),
		     -EBADMSG);
	/* RING_WAKE reply: round trip, count over the fd cap refused */
	struct td_wire_ring_wake_rep w = {.count = 2,
					  .ents = {{0, 7}, {31, 9}}};
	struct td_wire_ring_wake_rep wg;
	n = td_wire_ring_wake_rep_encode(&w, buf, sizeof(buf));
	cr_assert_eq(n, 4 + 2 * 8);
	cr_assert_eq(td_wire_ring_wake_rep_decode(buf, (size_t)n, &wg, &e), 0);
	cr_assert_eq(wg.count, 2);
	cr_assert_eq(wg.ents[1].row, 31);
	cr_assert_eq(wg.ents[1].gen, 9);
	for (int64_t i = 0; i < n; i++)
		cr_assert_lt(td_wire_ring_wake_rep_decode(buf, (size_t)i, &wg,
							  NULL),
			     0);
	w.count = TD_WIRE_MAX_FDS + 1;
	cr_assert_eq(td_wire_ring_wake_rep_encode(&w, buf, sizeof(buf)),
		     -EINVAL);
	buf[0] = TD_WIRE_MAX_FDS + 1;
	cr_assert_eq(td_wire_ring_wake_rep_decode(buf, 4, &wg, &e),
		     -EOVERFLOW);
	/* FOLLOW reply: round trip, truncation, fd count over its cap */
	struct td_wire_follow_rep f = {.id = 9, .entry_count = 16,
				       .layout = 1, .fd_count = 2,
				       .fds = {{5, 0}, {6, 0}}};
	struct td_wire_follow_rep fg;
	n = td_wire_follow_rep_encode(&f, buf, sizeof(buf));
	cr_assert_gt(n, 0);
	cr_assert_eq(td_wire_follow_rep_decode(buf, (size_t)n, &fg, &e), 0);
	cr_assert_eq(fg.id, 9);
	cr_assert_eq(fg.entry_count, 16);
	cr_assert_eq(fg.fd_count, 2);
	cr_assert_eq(fg.fds[1].fd, 6);
	for (int64_t i = 0; i < n; i++)
		cr_assert_lt(td_wire_follow_rep_decode(buf, (size_t)i, &fg,
						       NULL),
			     0);
	f.fd_count = TD_WIRE_FOLLOW_FDS + 1;
	cr_assert_eq(td_wire_follow_rep_encode(&f, buf, sizeof(buf)),
		     -EINVAL);
	buf[16] = TD_WIRE_FOLLOW_FDS + 1;
	cr_assert_eq(td_wire_follow_rep_decode(buf, (size_t)n, &fg, &e),
		     -EOVERFLOW);
	/* the request: flags must be 0 */
	struct td_wire_status_req rq = {.flags = 1};
	n = td_wire_status_req_encode(&rq, buf, sizeof(buf));
	cr_assert_lt(td_wire_status_req_decode(buf, (size_t)n, &rq, &e), 0);
}

/* RELEASE's flags: QUIET and ALLOC (an unpublished alloc given up) */
Test(wire, release_alloc_flag_round_trip_and_refusals)
{
	struct td_wire_release_req m = {
		.lease_id = 77, .flags = TD_WIRE_REL_QUIET | TD_WIRE_REL_ALLOC};
	struct td_wire_release_req g;
	struct td_err e = {0};
	int64_t n = td_wire_release_req_encode(&m, body, sizeof(body));

	cr_assert_eq(n, 8 + 4);
	cr_assert_eq(td_wire_release_req_decode(body, (size_t)n, &g, &e), 0);
	cr_assert_eq(g.lease_id, 77);
	cr_assert_eq(g.flags, TD_WIRE_REL_QUIET | TD_WIRE_REL_ALLOC);
	/* a flag nobody defined, in the decoder and the encoder */
	td__put_le32(body + 8, 0x4);
	cr_assert_eq(td_wire_release_req_decode(body, (size_t)n, &g, &e),
		     -EBADMSG);
	cr_assert_str_eq(e.field, "flags");
	m.flags = 0x4;
	cr_assert_eq(td_wire_release_req_encode(&m, body, sizeof(body)),
		     -EINVAL);
}

/*
 * Staged publishes (TD_WIRE_FEAT_STAGE, docs/protocol.md §13, "Staged
 * publishes"): the
 * PUBLISH flags STAGE (with LOAN only) and FIRED (with an alloc only),
 * and the reply's stage section (after a loan only, never version 0),
 * left out when nothing is staged so the body is what it was.
 */
Test(wire, staged_publish_flags_and_reply_section)
{
	struct td_wire_publish_req q = {
		.name = {"cam/0", 5},
		.flags = TD_WIRE_PUB_LOAN | TD_WIRE_PUB_STAGE | TD_WIRE_PUB_FIRED,
		.alloc_id = 4,
		.blob = {(const uint8_t *)"x", 1}},
				   gq;
	struct td_wire_publish_rep r = {
		.version = 9,
		.has_loan = true,
		.loan = {.alloc_id = 4, .fd_count = 1, .fds = {{-1, 8}}},
		.stage_version = 10,
		.stage_gen = 2},
				   g;
	struct td_err e;
	int64_t n = td_wire_publish_req_encode(&q, body, sizeof(body)), n0;
	size_t flags_at = 2 + 5; /* after the name */

	cr_assert_gt(n, 0);
	cr_assert_eq(td_wire_publish_req_decode(body, (size_t)n, &gq, &e), 0);
	cr_assert_eq(gq.flags, q.flags);
	/* STAGE asks for a stage of the next loan: not without LOAN */
	td__put_le32(body + flags_at, TD_WIRE_PUB_STAGE);
	cr_assert_eq(td_wire_publish_req_decode(body, (size_t)n, &gq, &e),
		     -EBADMSG);
	cr_assert_str_eq(e.reason, "STAGE without LOAN");
	q.flags = TD_WIRE_PUB_STAGE;
	cr_assert_eq(td_wire_publish_req_encode(&q, body, sizeof(body)),
		     -EINVAL);
	/* FIRED is the notice of an alloc's stage: not without the alloc */
	q.flags = TD_WIRE_PUB_FIRED;
	q.alloc_id = 0;
	cr_assert_eq(td_wire_publish_req_encode(&q, body, sizeof(body)),
		     -EINVAL);
	q.alloc_id = 4;
	n = td_wire_publish_req_encode(&q, body, sizeof(body));
	cr_assert_gt(n, 0);
	td__put_le64(body + flags_at + 4, 0);
	cr_assert_eq(td_wire_publish_req_decode(body, (size_t)n, &gq, &e),
		     -EBADMSG);
	cr_assert_str_eq(e.reason, "FIRED names no alloc");

	n = td_wire_publish_rep_encode(&r, body, sizeof(body));
	cr_assert_gt(n, 0);
	cr_assert_eq(td_wire_publish_rep_decode(body, (size_t)n, &g, &e), 0);
	cr_assert_eq(g.stage_version, 10);
	cr_assert_eq(g.stage_gen, 2);
	cr_assert_eq(g.loan.alloc_id, 4);
	/* nothing staged: left out, the body a daemon before it sends */
	r.stage_version = 0;
	n0 = td_wire_publish_rep_encode(&r, body, sizeof(body));
	cr_assert_eq(n0, n - 12);
	g.stage_version = 7;
	cr_assert_eq(td_wire_publish_rep_decode(body, (size_t)n0, &g, &e), 0);
	cr_assert_eq(g.stage_version, 0);
	/* a present version 0; fewer bytes than the section */
	td__put_le64(body + n0, 0);
	td__put_le32(body + n0 + 8, 2);
	cr_assert_eq(td_wire_publish_rep_decode(body, (size_t)n, &g, &e),
		     -EBADMSG);
	cr_assert_str_eq(e.reason, "a stage names a version of a loan");
	cr_assert_eq(e.offset, (uint64_t)n0);
	cr_assert_eq(td_wire_publish_rep_decode(body, (size_t)n0 + 8, &g, &e),
		     -EBADMSG);
	/* a stage of no loan is refused both ways */
	r.stage_version = 10;
	r.loan = (struct td_wire_alloc_rep){0};
	cr_assert_eq(td_wire_publish_rep_encode(&r, body, sizeof(body)),
		     -EINVAL);
}

/*
 * A stage's word (TD_WIRE_FEAT_STAGE_WORD): the section's last u32 when
 * not 0, in both replies; 0 or past the page's words is refused, and a
 * word without a stage is never encoded.
 */
Test(wire, a_stage_section_names_its_word)
{
	struct td_wire_publish_rep r = {
		.version = 9,
		.has_loan = true,
		.loan = {.alloc_id = 4, .fd_count = 1, .fds = {{-1, 8}}},
		.stage_version = 10,
		.stage_gen = 2,
		.stage_slot = 5},
				   g;
	struct td_wire_alloc_rep a = {.alloc_id = 4,
				      .fd_count = 1,
				      .fds = {{-1, 8}},
				      .stage_version = 10,
				      .stage_gen = 2,
				      .stage_slot = 63},
				 ga;
	struct td_err e;
	int64_t n = td_wire_publish_rep_encode(&r, body, sizeof(body)), n12;

	cr_assert_gt(n, 0);
	cr_assert_eq(td_wire_publish_rep_decode(body, (size_t)n, &g, &e), 0);
	cr_assert_eq(g.stage_version, 10);
	cr_assert_eq(g.stage_slot, 5u);
	r.stage_slot = 0;
	n12 = td_wire_publish_rep_encode(&r, body, sizeof(body));
	cr_assert_eq(n12, n - 4, "no word: the section a daemon before sends");
	g.stage_slot = 7;
	cr_assert_eq(td_wire_publish_rep_decode(body, (size_t)n12, &g, &e),
		     0);
	cr_assert_eq(g.stage_slot, 0u);
	/* word 0 and a word past the page, as sent */
	td__put_le32(body + n12, 0);
	cr_assert_eq(td_wire_publish_rep_decode(body, (size_t)n, &g, &e),
		     -EBADMSG);
	cr_assert_str_eq(e.reason, "a stage's word is one of the trigger "
				   "page's 1..63");
	cr_assert_eq(e.offset, (uint64_t)n12);
	td__put_le32(body + n12, TD_WIRE_STAGE_SLOTS);
	cr_assert_eq(td_wire_publish_rep_decode(body, (size_t)n, &g, &e),
		     -EBADMSG);
	r.stage_slot = TD_WIRE_STAGE_SLOTS;
	cr_assert_eq(td_wire_publish_rep_encode(&r, body, sizeof(body)),
		     -EINVAL);
	/* a word without a stage */
	r.stage_slot = 1;
	r.stage_version = 0;
	cr_assert_eq(td_wire_publish_rep_encode(&r, body, sizeof(body)),
		     -EINVAL);

	n = td_wire_alloc_rep_encode(&a, body, sizeof(body));
	cr_assert_gt(n, 0);
	cr_assert_eq(td_wire_alloc_rep_decode(body, (size_t)n, &ga, &e), 0);
	cr_assert_eq(ga.stage_version, 10);
	cr_assert_eq(ga.stage_slot, 63u);
	cr_assert_eq(ga.unreserved, 0u);
	td__put_le32(body + n - 4, 64);
	cr_assert_eq(td_wire_alloc_rep_decode(body, (size_t)n, &ga, &e),
		     -EBADMSG);
	cr_assert_str_eq(e.reason, "a stage's word is one of the trigger "
				   "page's 1..63");
	a.stage_version = 0;
	cr_assert_eq(td_wire_alloc_rep_encode(&a, body, sizeof(body)),
		     -EINVAL);
}

/* A staged take-back: ALLOC's STAGE flag, the ALLOC reply's stage. */
Test(wire, staged_take_back_flag_and_alloc_reply_section)
{
	struct td_wire_alloc_req q = {
		.flags = TD_WIRE_ALLOC_RECYCLE | TD_WIRE_ALLOC_REWRITE |
			 TD_WIRE_ALLOC_NAMED | TD_WIRE_ALLOC_STAGE,
		.plane_count = 1,
		.sizes = {4096},
		.name = {"cam/0", 5}},
				 gq;
	struct td_wire_alloc_rep r = {.alloc_id = 4,
				      .fd_count = 1,
				      .fds = {{-1, 8}},
				      .stage_version = 10,
				      .stage_gen = 2},
				 g;
	struct td_err e;
	int64_t n = td_wire_alloc_req_encode(&q, body, sizeof(body)), n0;

	cr_assert_gt(n, 0);
	cr_assert_eq(td_wire_alloc_req_decode(body, (size_t)n, &gq, &e), 0);
	cr_assert_eq(gq.flags, q.flags);
	/* a stage is of a take-back of a name: not without both */
	td__put_le32(body, q.flags & ~TD_WIRE_ALLOC_REWRITE);
	cr_assert_eq(td_wire_alloc_req_decode(body, (size_t)n, &gq, &e),
		     -EBADMSG);
	cr_assert_str_eq(e.reason, "STAGE without REWRITE and NAMED");
	q.flags &= ~TD_WIRE_ALLOC_NAMED;
	cr_assert_eq(td_wire_alloc_req_encode(&q, body, sizeof(body)),
		     -EINVAL);

	n = td_wire_alloc_rep_encode(&r, body, sizeof(body));
	cr_assert_gt(n, 0);
	cr_assert_eq(td_wire_alloc_rep_decode(body, (size_t)n, &g, &e), 0);
	cr_assert_eq(g.stage_version, 10);
	cr_assert_eq(g.stage_gen, 2);
	cr_assert_eq(g.unreserved, 0u);
	/* nothing staged: left out, the body a daemon before it sends */
	r.stage_version = 0;
	n0 = td_wire_alloc_rep_encode(&r, body, sizeof(body));
	cr_assert_eq(n0, n - 12);
	g.stage_version = 7;
	cr_assert_eq(td_wire_alloc_rep_decode(body, (size_t)n0, &g, &e), 0);
	cr_assert_eq(g.stage_version, 0);
	/* a present version 0 is refused */
	td__put_le64(body + n0, 0);
	td__put_le32(body + n0 + 8, 2);
	cr_assert_eq(td_wire_alloc_rep_decode(body, (size_t)n, &g, &e),
		     -EBADMSG);
	cr_assert_str_eq(e.reason, "a stage names a version of a loan");
	cr_assert_eq(e.offset, (uint64_t)n0);
	/* a stage with unreserved planes, or of no loan: never encoded */
	r.stage_version = 10;
	r.fds[0].fd = 3;
	r.unreserved = 1;
	cr_assert_eq(td_wire_alloc_rep_encode(&r, body, sizeof(body)),
		     -EINVAL);
	r.unreserved = 0;
	r.alloc_id = 0;
	cr_assert_eq(td_wire_alloc_rep_encode(&r, body, sizeof(body)),
		     -EINVAL);
	/* and never inside a PUBLISH reply's loan */
	cr_assert_eq(td_wire_publish_rep_encode(
			     &(struct td_wire_publish_rep){
				     .version = 9,
				     .has_loan = true,
				     .loan = {.alloc_id = 4,
					      .fd_count = 1,
					      .fds = {{-1, 8}},
					      .stage_version = 3}},
			     body, sizeof(body)),
		     -EINVAL);
}

/* ---- several names in one step (docs/protocol.md §6.10) ---- */

/* Each refusal of the PUBLISH_MANY and GET_MANY decoders, its errno. */
Test(wire, many_bodies_refuse_bad_counts_names_and_versions)
{
	struct td_wire_get_many_req g = {.count = 2,
					 .names = {STR("a/x"), STR("a/x")}};
	struct td_wire_publish_many_rep r = {1, {0}};
	union msg m;
	struct td_err e = {0};
	int64_t n;

	/* count 0: no elements */
	td__put_le32(body, 0);
	cr_assert_eq(td_wire_publish_many_req_decode(body, 4, &m.publish_many_req,
						     &e),
		     -EBADMSG);
	cr_assert_eq(td_wire_get_many_rep_decode(body, 4, &m.get_many_rep, &e),
		     -EBADMSG);
	/* count past TD_WIRE_MANY_MAX */
	td__put_le32(body, TD_WIRE_MANY_MAX + 1);
	cr_assert_eq(td_wire_publish_many_rep_decode(body, 4,
						     &m.publish_many_rep, &e),
		     -EOVERFLOW);
	cr_assert_eq(e.kind, TD_ERR_FORGED_LENGTH);
	/* an element that attaches more fds than a fd table has */
	td__put_le32(body, 1);
	td__put_le32(body + 4, TD_WIRE_MAX_PLANES + 2);
	td__put_le32(body + 8, 0);
	cr_assert_eq(td_wire_publish_many_req_decode(body, 12,
						     &m.publish_many_req, &e),
		     -EOVERFLOW);
	cr_assert_str_eq(e.field, "attached");
	/* version 0 is never published */
	n = td_wire_publish_many_rep_encode(&r, body, sizeof(body));
	cr_assert_eq(td_wire_publish_many_rep_decode(body, (size_t)n,
						     &m.publish_many_rep, &e),
		     -EBADMSG);
	cr_assert_str_eq(e.field, "version");
	/* a name twice */
	n = td_wire_get_many_req_encode(&g, body, sizeof(body));
	cr_assert_eq(td_wire_get_many_req_decode(body, (size_t)n,
						 &m.get_many_req, &e),
		     -EBADMSG);
	cr_assert(strstr(e.reason, "twice"), "%s", e.reason);
	/* a bad name, an unknown flag */
	g.names[1] = STR("a/../x");
	n = td_wire_get_many_req_encode(&g, body, sizeof(body));
	cr_assert_eq(td_wire_get_many_req_decode(body, (size_t)n,
						 &m.get_many_req, &e),
		     -EINVAL);
	g.names[1] = STR("a/y");
	n = td_wire_get_many_req_encode(&g, body, sizeof(body));
	td__put_le32(body, 0x4);
	cr_assert_eq(td_wire_get_many_req_decode(body, (size_t)n,
						 &m.get_many_req, &e),
		     -EBADMSG);
	/* TD_WIRE_MANY_NEWER: version and timeout present exactly with it */
	td__put_le32(body, TD_WIRE_MANY_NEWER);
	cr_assert_eq(td_wire_get_many_req_decode(body, (size_t)n,
						 &m.get_many_req, &e),
		     -ENODATA);
	cr_assert_str_eq(e.field, "version");
	g.flags = TD_WIRE_MANY_NEWER;
	g.version = 7;
	g.timeout_ms = 30;
	n = td_wire_get_many_req_encode(&g, body, sizeof(body));
	cr_assert_eq(td_wire_get_many_req_decode(body, (size_t)n - 1,
						 &m.get_many_req, &e),
		     -ENODATA);
	cr_assert_str_eq(e.field, "timeout_ms");
	cr_assert_eq(td_wire_get_many_req_decode(body, (size_t)n,
						 &m.get_many_req, &e),
		     0);
	cr_assert_eq(m.get_many_req.version, 7);
	cr_assert_eq(m.get_many_req.timeout_ms, 30);
	td__put_le32(body, 0); /* the same fields without the flag */
	cr_assert_eq(td_wire_get_many_req_decode(body, (size_t)n,
						 &m.get_many_req, &e),
		     -EBADMSG);
	g.flags = 0;
	/* the encoders refuse what no decoder takes */
	g.count = 0;
	cr_assert_eq(td_wire_get_many_req_encode(&g, body, sizeof(body)),
		     -EINVAL);
	r.count = TD_WIRE_MANY_MAX + 1;
	cr_assert_eq(td_wire_publish_many_rep_encode(&r, body, sizeof(body)),
		     -EINVAL);
}
