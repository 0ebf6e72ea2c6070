/* SPDX-License-Identifier: MIT */
/*
 * A GET_MANY reply that goes wrong part way (docs/protocol.md §6.10),
 * played by a fake daemon in a child: an element that does not decode,
 * an fd too many, an fd that is no buffer, a plane outside its buffer,
 * elements missing. td_client_get_many() (and _newer) hands out nothing
 * and keeps nothing: every lease the reply granted is RELEASEd (the
 * fake records which), every fd that came is closed and nothing it
 * mapped stays mapped, all checked right after the refused call.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rawclient.h"
#include "tensord/tensord.h"
#include "testchild.h"
#include "testutil.h"
#include "wire.h"

TestSuite(many_reply, .timeout = TU_TEST_TIMEOUT_S);

#define N 3             /* names asked for */
#define LEASE0 100u     /* element i's lease: LEASE0 + i */
#define BUF_LEN 4096u   /* each element's memfd */
#define PLANE 64u

enum bad {
	BAD_UNDECODABLE,  /* element 1 ends inside its blob */
	BAD_FD_TOO_MANY,  /* an eventfd no element describes */
	BAD_FD_KIND,      /* element 1's buffer is a pipe */
	BAD_PLANE,        /* element 1's plane past its buffer's end */
	BAD_COUNT,        /* two elements for three names */
	BAD_GET_PLANE,    /* a single GET's reply, its plane as BAD_PLANE */
};

/* What the fake was told and what it saw. */
struct fake {
	char dir[64];
	char sock[108];
	enum bad bad;
	int ls;        /* listening, for the child to accept on */
	int report[2]; /* the child writes the lease ids it was released */
};

/* Element i's GET reply body into out: its length. */
static int64_t element(uint32_t i, const struct fake *f, uint8_t *out,
		       size_t cap)
{
	bool past = (f->bad == BAD_PLANE || f->bad == BAD_GET_PLANE) && i == 1;
	uint8_t blob[512];
	int64_t blen, len;
	struct td_wire_get_rep rep = {
		.version = 10 + i,
		.lease_id = LEASE0 + i,
		.meta = {(const uint8_t *)"", 0},
		.fd_count = 1,
		.fds = {{.fd = 3 + (int32_t)i, .buffer_id = 1000 + i}},
	};

	/* past: the plane ends PLANE bytes past its buffer's end */
	blen = raw_blob_u8(PLANE, past ? BUF_LEN : 0, blob, sizeof(blob));
	CK(blen > 0);
	rep.blob = (struct td_wire_bytes){blob, (uint32_t)blen};
	len = td_wire_get_rep_encode(&rep, out, cap);
	CK(len > 20);
	/* version and lease id whole, then cut inside the meta's length */
	if (f->bad == BAD_UNDECODABLE && i == 1)
		len = 18;
	return len;
}

/* The GET_MANY reply the fake sends for f->bad, fds attached (a GET's:
 * element 1's body alone). */
static void send_many(int s, const struct td_wire_hdr *q, const struct fake *f)
{
	static uint8_t out[TD_WIRE_MAX_MSG], bodies[N][1024];
	struct td_wire_get_many_rep rep = {.count = N};
	struct td_wire_hdr h = *q;
	int fds[N + 1], p[2];
	unsigned nfds = 0;
	int64_t len;

	if (f->bad == BAD_COUNT)
		rep.count = N - 1;
	for (uint32_t i = 0; i < rep.count; i++) {
		int64_t n = element(i, f, bodies[i], sizeof(bodies[i]));

		rep.reps[i] = (struct td_wire_bytes){bodies[i], (uint32_t)n};
		if (f->bad == BAD_UNDECODABLE && i == 1)
			continue; /* no fd told of: none attached */
		if (f->bad == BAD_FD_KIND && i == 1) {
			CK(pipe2(p, O_CLOEXEC) == 0);
			close(p[1]);
			fds[nfds++] = p[0];
			continue;
		}
		fds[nfds] = memfd_create("td-fake-many", MFD_CLOEXEC);
		CK(fds[nfds] >= 0);
		CK(ftruncate(fds[nfds], BUF_LEN) == 0);
		nfds++;
	}
	if (f->bad == BAD_FD_TOO_MANY)
		CK((fds[nfds++] = eventfd(0, EFD_CLOEXEC)) >= 0);
	len = td_wire_get_many_rep_encode(&rep, out + TD_WIRE_HDR_LEN,
					  sizeof(out) - TD_WIRE_HDR_LEN);
	if (q->opcode == TD_OP_GET) {
		len = (int64_t)rep.reps[1].len;
		memcpy(out + TD_WIRE_HDR_LEN, bodies[1], (size_t)len);
		close(fds[0]);
		close(fds[2]);
		fds[0] = fds[1];
		nfds = 1;
	}
	CK(len > 0);
	h.flags = TD_WIRE_F_REPLY;
	h.status = 0;
	h.body_len = (uint32_t)len;
	h.fd_count = nfds;
	td_wire_hdr_encode(&h, out);
	CK(td__scm_send(s, out, TD_WIRE_HDR_LEN + (size_t)len, fds, nfds, 0) ==
	   (ssize_t)(TD_WIRE_HDR_LEN + (size_t)len));
	td__scm_close(fds, nfds);
}

/* A reply of status 0 with body[0, len) and no fd. */
static void send_rep(int s, const struct td_wire_hdr *q, const uint8_t *body,
		     int64_t len)
{
	uint8_t out[512];
	struct td_wire_hdr h = *q;

	CK(len >= 0 && (size_t)len <= sizeof(out) - TD_WIRE_HDR_LEN);
	h.flags = TD_WIRE_F_REPLY;
	h.status = 0;
	h.body_len = (uint32_t)len;
	h.fd_count = 0;
	td_wire_hdr_encode(&h, out);
	memcpy(out + TD_WIRE_HDR_LEN, body, (size_t)len);
	CK(send(s, out, TD_WIRE_HDR_LEN + (size_t)len, MSG_NOSIGNAL) ==
	   (ssize_t)(TD_WIRE_HDR_LEN + (size_t)len));
}

/*
 * The fake daemon: HELLO (SCM both ways, GET_MANY and quiet RELEASE
 * served), the bad GET_MANY reply, and every RELEASE until the client
 * hangs up; then the released lease ids, in order, down the pipe.
 */
static void fake_child(const struct tu_daemon *unused, void *arg)
{
	struct fake *f = arg;
	static uint8_t in[TD_WIRE_MAX_MSG];
	uint8_t body[256];
	struct td_wire_hello_rep hello = {
		.daemon_pid = (uint32_t)getpid(),
		.import_in = TD_IMPORT_SCM,
		.probe_fd = -1,
		.ident = {"fake", 4},
		.features = TD_WIRE_FEAT_MANY | TD_WIRE_FEAT_MANY_WAIT |
			    TD_WIRE_FEAT_RELEASE_QUIET,
	};
	uint64_t released[64];
	unsigned nrel = 0;
	ssize_t n;
	int s;

	(void)unused;
	close(f->report[0]);
	s = accept4(f->ls, NULL, NULL, SOCK_CLOEXEC);
	CK(s >= 0);
	close(f->ls);
	while ((n = recv(s, in, sizeof(in), 0)) > 0) {
		struct td_wire_release_req rq;
		struct td_wire_hdr h;

		CK(td_wire_hdr_decode(in, (size_t)n, &h, NULL) == 0);
		switch (h.opcode) {
		case TD_OP_HELLO:
			send_rep(s, &h, body,
				 td_wire_hello_rep_encode(&hello, body,
							  sizeof(body)));
			break;
		case TD_OP_GET_MANY:
		case TD_OP_GET:
			send_many(s, &h, f);
			break;
		case TD_OP_RELEASE:
			CK(td_wire_release_req_decode(in + TD_WIRE_HDR_LEN,
						      h.body_len, &rq,
						      NULL) == 0);
			CK(nrel < 64);
			released[nrel++] = rq.lease_id;
			if (!(rq.flags & TD_WIRE_REL_QUIET))
				send_rep(s, &h, body, 0);
			break;
		default:
			CK(!"a request the fake does not serve");
		}
	}
	CK(write(f->report[1], &nrel, sizeof(nrel)) == sizeof(nrel));
	CK(write(f->report[1], released, nrel * sizeof(*released)) ==
	   (ssize_t)(nrel * sizeof(*released)));
}

/*
 * get_many (or _newer) of three names against a fake that answers the
 * way f->bad says: the call returns want with why in its reason, hands
 * out nothing, leaves
 * this process's fds and mappings as they were, and the fake was
 * released exactly the leases in rel[0, nrel).
 */
static void bad_reply_run(enum bad bad, bool newer, int want,
			  const char *why, const uint64_t *rel, unsigned nrel)
{
	const char *names[N] = {"m/a", "m/b", "m/c"};
	struct td_tensor *t[N] = {(void *)1, (void *)1, (void *)1};
	struct fake f = {.bad = bad};
	struct td_client *c = NULL;
	struct td_error e = {0};
	uint64_t got[64];
	unsigned ngot = 0;
	int fds0, maps0, bufmaps0, rc;
	pid_t pid;

	snprintf(f.dir, sizeof(f.dir), "/tmp/td-many-XXXXXX");
	cr_assert(tu_mkdtemp(f.dir));
	snprintf(f.sock, sizeof(f.sock), "%s/s", f.dir);
	cr_assert_eq(pipe2(f.report, O_CLOEXEC), 0);
	f.ls = tu_mute_listener(f.sock, 1);
	pid = spawn(NULL, fake_child, &f);
	close(f.ls);
	close(f.report[1]);
	cr_assert_eq(td_client_connect(f.sock, &c, &e), 0, "%s", e.reason);
	fds0 = tu_fd_count();
	maps0 = tu_map_count();
	bufmaps0 = tu_buf_map_count();

	if (bad == BAD_GET_PLANE) {
		t[0] = t[2] = NULL; /* not asked for */
		rc = td_client_get(c, names[1], &t[1], &e);
	} else if (newer)
		rc = td_client_get_many_newer(c, N, names, 0, 1000, t, &e);
	else
		rc = td_client_get_many(c, N, names, t, &e);
	cr_assert_eq(rc, want, "%d %s", rc, e.reason);
	cr_assert(strstr(e.reason, why), "%s", e.reason);
	for (int i = 0; i < N; i++)
		cr_assert_null(t[i], "element %d handed out", i);
	cr_assert_eq(tu_fd_count(), fds0, "descriptors kept: %s", e.reason);
	cr_assert_eq(tu_buf_map_count(), bufmaps0, "buffers left mapped");
	if (TU_CHECK_ALL_MAPS)
		cr_assert_eq(tu_map_count(), maps0, "mappings left");

	td_client_close(c);
	tu_await_readable(f.report[0], TU_WAIT_S, "the fake's report");
	cr_assert_eq(read(f.report[0], &ngot, sizeof(ngot)),
		     (ssize_t)sizeof(ngot));
	cr_assert_leq(ngot, 64);
	cr_assert_eq(read(f.report[0], got, ngot * sizeof(*got)),
		     (ssize_t)(ngot * sizeof(*got)));
	cr_assert_eq(reap(pid), 0);
	close(f.report[0]);
	unlink(f.sock);
	rmdir(f.dir);
	cr_assert_eq(ngot, nrel, "%u RELEASEs, %u leases granted", ngot,
		     nrel);
	for (unsigned i = 0; i < nrel; i++) {
		bool seen = false;

		for (unsigned j = 0; j < ngot; j++)
			seen = seen || got[j] == rel[i];
		cr_assert(seen, "lease %llu was not released",
			  (unsigned long long)rel[i]);
	}
}

static const uint64_t all[N] = {LEASE0, LEASE0 + 1, LEASE0 + 2};

/* The leases of the elements after the bad one went too, and the bad
 * one's: its lease id was whole before it broke off. */
Test(many_reply, an_element_that_does_not_decode_releases_every_lease)
{
	bad_reply_run(BAD_UNDECODABLE, false, -EPROTO, "element 1: ", all, N);
}

Test(many_reply, a_waiting_get_many_with_an_undecodable_element_too)
{
	bad_reply_run(BAD_UNDECODABLE, true, -EPROTO, "element 1: ", all, N);
}

Test(many_reply, an_fd_no_element_describes_releases_and_closes_all)
{
	bad_reply_run(BAD_FD_TOO_MANY, false, -EPROTO,
		      "4 fds attached, 3 described", all, N);
}

Test(many_reply, a_buffer_that_is_a_pipe_releases_and_unmaps_all)
{
	bad_reply_run(BAD_FD_KIND, false, -ESPIPE,
		      "GET_MANY element 1: import buffer 0", all, N);
}

Test(many_reply, a_plane_past_its_buffer_releases_and_unmaps_all)
{
	bad_reply_run(BAD_PLANE, true, -EPROTO,
		      "GET_MANY element 1: plane 0 outside", all, N);
}

/* Two elements for three names: the two granted go back all the same. */
Test(many_reply, a_reply_short_of_elements_releases_those_it_has)
{
	bad_reply_run(BAD_COUNT, false, -EPROTO,
		      "2 elements for 3 names", all, N - 1);
}

/* A single GET's reply refused keeps no mapping either (the same
 * tensor_build), its lease released as ever. */
Test(many_reply, a_refused_get_keeps_no_fd_or_mapping_either)
{
	bad_reply_run(BAD_GET_PLANE, false, -EPROTO, "plane 0 outside",
		      &all[1], 1);
}
