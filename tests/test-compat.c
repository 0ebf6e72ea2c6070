/* SPDX-License-Identifier: MIT */
/*
 * A client of version 1 against this daemon (docs/protocol.md §6.1,
 * "Both features words are optional"): its HELLO has no features word,
 * it sends every body as version 1 wrote it, and its decoders refuse
 * trailing bytes and header flags they do not know. The daemon must
 * answer each request of the basic cycle (WATCH, ALLOC, PUBLISH, the
 * NOTIFY, GET, RELEASE, LIST, STAT, DELETE) with the body of version
 * 1 exactly: a reply is decoded with today's decoder, the fields added
 * since are cleared, and the re-encoding must be the very bytes
 * received (today's encoders leave an absent optional field out).
 * Checked by hand against the real binaries of d4edd18 (before feature
 * bits), bd8a3e5 and f768ded; this keeps the daemon's side of it.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rawclient.h"
#include "testutil.h"
#include "wire.h"

TestSuite(compat, .timeout = TU_TEST_TIMEOUT_S);

#define SIZE 4096u

/* what today's encoder made of the decoded reply, for the comparison */
static uint8_t again[TD_WIRE_MAX_MSG];

/* The received body is the re-encoding (len bytes at again). */
static void same_bytes(const struct rawrep *r, int64_t len, const char *what)
{
	cr_assert_geq(len, 0, "%s: re-encode %lld", what, (long long)len);
	cr_assert_eq((uint64_t)len, r->h.body_len,
		     "%s: %u bytes, version 1 has %lld", what, r->h.body_len,
		     (long long)len);
	cr_assert_eq(memcmp(again, RAW_BODY, (size_t)len), 0,
		     "%s: not the body of version 1", what);
	/* F_REPLY alone: F_CROWD only to a client that named it */
	cr_assert_eq(r->h.flags, TD_WIRE_F_REPLY, "%s: header flags %#x",
		     what, r->h.flags);
}

/* The next NOTIFY on sock: event and name, its body checked as above. */
static void expect_notify(int sock, uint32_t event, const char *name,
			  uint64_t version)
{
	struct td_wire_notify n;
	struct rawrep r;

	raw_recv(sock, &r);
	cr_assert_eq(r.h.opcode, TD_OP_NOTIFY);
	cr_assert_eq(r.h.flags, TD_WIRE_F_NOTIFY, "NOTIFY flags %#x",
		     r.h.flags);
	cr_assert_eq(td_wire_notify_decode(RAW_BODY, r.h.body_len, &n, NULL),
		     0);
	cr_assert_eq(td_wire_notify_encode(&n, again, sizeof(again)),
		     (int64_t)r.h.body_len, "NOTIFY: trailing bytes");
	cr_assert_eq(n.event, event);
	cr_assert_eq(n.version, version);
	cr_assert_eq(n.name.len, strlen(name));
	cr_assert_eq(memcmp(n.name.ptr, name, n.name.len), 0);
}

/* The entry in an entry body (STAT) or LIST reply has the flags of
 * version 1 only: a ring or recycle bit is for a client that asked. */
static void v1_entry(const struct td_wire_entry *e, uint64_t version)
{
	cr_assert_eq(e->version, version);
	cr_assert_eq(e->bytes, SIZE);
	cr_assert_eq(e->flags & ~TD_WIRE_PUB_PIN, 0, "entry flags %#x",
		     e->flags);
}

Test(compat, a_version_1_client_gets_version_1_bodies_through_a_cycle)
{
	struct tu_daemon d;
	struct rawrep r;
	struct td_wire_alloc_rep ar;
	struct td_wire_get_rep gr;
	struct td_wire_entry ent;
	struct td_wire_list_rd lr;
	struct td_wire_delete_rep dr;
	struct td_wire_publish_rep pr;
	struct td_wire_watch_req wq = {{"old/", 4}, TD_WIRE_WATCH_PREFIX};
	struct td_wire_alloc_req aq = {.flags = TD_WIRE_REQ_SCM,
				       .plane_count = 1, .sizes = {SIZE}};
	struct td_wire_get_req gq = {.name = {"old/t", 5},
				     .mode = TD_GET_LATEST,
				     .flags = TD_WIRE_REQ_SCM};
	struct td_wire_list_req lq = {.prefix = {"old/", 4}};
	struct td_wire_name_req nq = {{"old/t", 5}};
	struct td_wire_release_req rq = {0};
	uint64_t version, got = 0;
	int watcher, sock, rc;
	uint8_t *p;

	tu_daemon_start(&d, "warn");
	/* raw_scm_conn: a HELLO without the features word */
	watcher = raw_scm_conn(&d);
	sock = raw_scm_conn(&d);

	/* WATCH: the watch id alone */
	cr_assert_eq(raw_call(watcher, TD_OP_WATCH, 2,
			      td_wire_watch_req_encode(&wq, RAW_BODY,
						       RAW_CAP),
			      &r),
		     0);
	cr_assert_eq(r.h.body_len, 8, "WATCH reply: the watch id alone");

	/* ALLOC: no unreserved mask, no stage section */
	cr_assert_eq(raw_call(sock, TD_OP_ALLOC, 3,
			      td_wire_alloc_req_encode(&aq, RAW_BODY, RAW_CAP),
			      &r),
		     0);
	cr_assert_eq(r.nfds, 1);
	cr_assert_eq(td_wire_alloc_rep_decode(RAW_BODY, r.h.body_len, &ar,
					      NULL),
		     0);
	ar.unreserved = 0;
	ar.stage_version = 0;
	ar.stage_gen = ar.stage_slot = 0;
	same_bytes(&r, td_wire_alloc_rep_encode(&ar, again, sizeof(again)),
		   "ALLOC");
	p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, r.fds[0], 0);
	cr_assert_neq(p, MAP_FAILED);
	memset(p, 0x5a, SIZE);
	munmap(p, SIZE);
	close(r.fds[0]);

	/* PUBLISH: the version alone, no loan, no stage section */
	cr_assert_eq(raw_call(sock, TD_OP_PUBLISH, 4,
			      raw_pub_body("old/t", ar.alloc_id, SIZE, 0, 0,
					   RAW_BODY, RAW_CAP),
			      &r),
		     0);
	cr_assert_eq(r.h.body_len, 8, "PUBLISH reply: the version alone");
	cr_assert_eq(r.h.flags, TD_WIRE_F_REPLY);
	cr_assert_eq(td_wire_publish_rep_decode(RAW_BODY, r.h.body_len, &pr,
						NULL),
		     0);
	cr_assert_not(pr.has_loan);
	version = pr.version;
	cr_assert_gt(version, 0);
	expect_notify(watcher, TD_EVENT_PUBLISHED, "old/t", version);

	/* GET: every fd attached (none -1: it sent no held ids), no CROWD */
	cr_assert_eq(raw_call(sock, TD_OP_GET, 5,
			      td_wire_get_req_encode(&gq, RAW_BODY, RAW_CAP),
			      &r),
		     0);
	cr_assert_eq(td_wire_get_rep_decode(RAW_BODY, r.h.body_len, &gr, NULL),
		     0);
	same_bytes(&r, td_wire_get_rep_encode(&gr, again, sizeof(again)),
		   "GET");
	cr_assert_eq(gr.version, version);
	cr_assert_eq(gr.fd_count, 1);
	cr_assert_eq(r.nfds, 1);
	cr_assert_geq(gr.fds[0].fd, 0);
	p = mmap(NULL, SIZE, PROT_READ, MAP_SHARED, r.fds[0], 0);
	cr_assert_neq(p, MAP_FAILED);
	for (unsigned i = 0; i < SIZE; i++)
		got += p[i] != 0x5a;
	cr_assert_eq(got, 0, "%llu bytes not the producer's",
		     (unsigned long long)got);
	munmap(p, SIZE);
	close(r.fds[0]);

	/* RELEASE of version 1 (no flags word): answered, empty */
	rq.lease_id = gr.lease_id;
	cr_assert_eq(raw_call(sock, TD_OP_RELEASE, 6,
			      td_wire_release_req_encode(&rq, RAW_BODY,
							 RAW_CAP),
			      &r),
		     0);
	cr_assert_eq(r.h.body_len, 0);

	/* LIST and STAT: entries with the flags of version 1 */
	cr_assert_eq(raw_call(sock, TD_OP_LIST, 7,
			      td_wire_list_req_encode(&lq, RAW_BODY, RAW_CAP),
			      &r),
		     0);
	cr_assert_eq(r.h.flags, TD_WIRE_F_REPLY);
	cr_assert_eq(td_wire_list_rep_init(&lr, RAW_BODY, r.h.body_len, NULL),
		     0);
	cr_assert_eq(lr.count, 1);
	cr_assert_eq(td_wire_list_rep_next(&lr, &ent), 1);
	v1_entry(&ent, version);
	cr_assert_eq(td_wire_list_rep_next(&lr, &ent), 0, "one entry, then "
							  "nothing");
	cr_assert_eq(raw_call(sock, TD_OP_STAT, 8,
			      td_wire_name_req_encode(&nq, RAW_BODY, RAW_CAP),
			      &r),
		     0);
	cr_assert_eq(td_wire_entry_decode(RAW_BODY, r.h.body_len, &ent, NULL),
		     0);
	same_bytes(&r, td_wire_entry_encode(&ent, again, sizeof(again)),
		   "STAT");
	v1_entry(&ent, version);

	/* DELETE without a version: the version removed */
	cr_assert_eq(raw_call(sock, TD_OP_DELETE, 9,
			      td_wire_name_req_encode(&nq, RAW_BODY, RAW_CAP),
			      &r),
		     0);
	cr_assert_eq(td_wire_delete_rep_decode(RAW_BODY, r.h.body_len, &dr,
					       NULL),
		     0);
	same_bytes(&r, td_wire_delete_rep_encode(&dr, again, sizeof(again)),
		   "DELETE");
	cr_assert_eq(dr.version, version);
	expect_notify(watcher, TD_EVENT_DELETED, "old/t", version);

	/* gone for it as for anyone */
	rc = raw_call(sock, TD_OP_GET, 10,
		      td_wire_get_req_encode(&gq, RAW_BODY, RAW_CAP), &r);
	cr_assert_eq(rc, -ENOENT);
	close(sock);
	close(watcher);
	tu_daemon_stop(&d, true);
}
