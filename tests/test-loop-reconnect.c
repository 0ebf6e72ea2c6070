/* SPDX-License-Identifier: MIT */
/*
 * TD_CLIENT_RECONNECT in an event loop: td_client_process() never waits
 * for the daemon. Its reconnect is a non-blocking connect() (tried again
 * on a timer while the listen queue is full) and a HELLO whose reply, or
 * whose deadline ($TENSORD_CONNECT_TIMEOUT_MS), wakes td_client_fd().
 * The peers: a listener nobody serves (the connection queues, HELLO is
 * never answered), one whose queue is full, and a tensord that later
 * takes that very listener over (socket activation) and answers what
 * queued meanwhile.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <tensord/tensord.h>

#include "testclient.h"
#include "testutil.h"
#include "wire.h"

TestSuite(loop_reconnect, .timeout = TU_TEST_TIMEOUT_S);

/* Hang guard only: nothing about speed is asserted. */
#define HANG_MS 20000

/* A deadline no test reaches: a reconnect that waited for the peer in
 * td_client_process() would hold it that long. */
#define FAR_MS "600000"

struct rig {
	char dir[64], link[96], mute[96];
	struct tu_daemon d;
	struct td_client *c;
	int ls;          /* the peer's listener */
	pid_t late;      /* the tensord that took ls over, 0 none */
	int fill[8];     /* connections that fill ls's queue */
	int nfill;
	int reconnected; /* TD_EVENT_TYPE_RECONNECTED events */
	uint64_t restored; /* the watches the last one made again */
	int published;
	uint64_t wid, pub_watch;
	int fds0;
};

static void on_event(struct td_client *c, const struct td_event *ev,
		     void *ud)
{
	struct rig *r = ud;

	(void)c;
	if (ev->type == TD_EVENT_TYPE_RECONNECTED) {
		r->reconnected++;
		r->restored = ev->version;
	}
	if (ev->type == TD_EVENT_TYPE_PUBLISHED) {
		r->published++;
		r->pub_watch = ev->watch_id;
	}
}

/*
 * A reconnecting client of a daemon that then dies; the socket path
 * (a symlink) then names ls, a listener with this backlog that nobody
 * serves. deadline: $TENSORD_CONNECT_TIMEOUT_MS at connect.
 */
static void rig_up(struct rig *r, const char *deadline, int backlog)
{
	struct td_error e = {0};
	int rc;

	memset(r, 0, sizeof(*r));
	r->fds0 = tu_fd_count();
	snprintf(r->dir, sizeof(r->dir), "/tmp/td-lrec-XXXXXX");
	cr_assert(tu_mkdtemp(r->dir));
	snprintf(r->link, sizeof(r->link), "%s/link.sock", r->dir);
	snprintf(r->mute, sizeof(r->mute), "%s/mute.sock", r->dir);
	tu_daemon_start(&r->d, "warn");
	tu_link_to(r->link, r->d.sock);
	setenv("TENSORD_CONNECT_TIMEOUT_MS", deadline, 1);
	rc = td_client_connect_ex(r->link, TD_CLIENT_RECONNECT, &r->c, &e);
	unsetenv("TENSORD_CONNECT_TIMEOUT_MS");
	cr_assert_eq(rc, 0, "%s", e.reason);
	cr_assert_eq(td_client_set_event_handler(r->c, on_event, r), 0);
	cr_assert_eq(td_client_watch(r->c, "w/", TD_WATCH_PREFIX, &r->wid,
				     NULL),
		     0);
	tu_daemon_kill(&r->d);
	r->ls = tu_mute_listener(r->mute, backlog);
	tu_link_to(r->link, r->mute);
}

/* Fill ls's listen queue: connections until the next one is refused. */
static void rig_fill(struct rig *r)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	strcpy(sa.sun_path, r->mute);
	for (;;) {
		int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC |
						SOCK_NONBLOCK,
			       0);

		cr_assert_geq(s, 0);
		if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			cr_assert_eq(errno, EAGAIN, "%s", strerror(errno));
			close(s);
			break;
		}
		cr_assert_lt(r->nfill, 8, "the queue never filled");
		r->fill[r->nfill++] = s;
	}
	cr_assert_gt(r->nfill, 0);
}

/* Is a connection waiting in ls's queue, accepted by nobody? */
static bool rig_queued(const struct rig *r)
{
	struct pollfd p = {.fd = r->ls, .events = POLLIN};

	return poll(&p, 1, 0) == 1;
}

/* Does td_client_fd() poll readable within ms? */
static bool wakes(struct td_client *c, int ms)
{
	struct pollfd p = {.fd = td_client_fd(c), .events = POLLIN};
	int n;

	cr_assert_geq(p.fd, 0);
	n = poll(&p, 1, ms);
	cr_assert_geq(n, 0);
	return n == 1;
}

/* A tensord takes ls over (socket activation) and serves what queued. */
static void rig_serve(struct rig *r)
{
	const char *bin = getenv("TD_TENSORD");
	char sock[128];

	cr_assert(bin, "TD_TENSORD is not set (run through meson test)");
	snprintf(sock, sizeof(sock), "%s/unused.sock", r->dir);
	r->late = tu_fork();
	if (r->late == 0) {
		char pid[32];

		if (r->ls == 3 ? fcntl(3, F_SETFD, 0) < 0
			       : dup2(r->ls, 3) < 0)
			_exit(126);
		snprintf(pid, sizeof(pid), "%d", (int)getpid());
		setenv("LISTEN_FDS", "1", 1);
		setenv("LISTEN_PID", pid, 1);
		execl(bin, bin, "--socket", sock, "--log-level", "warn",
		      (char *)NULL);
		_exit(127);
	}
}

static void rig_down(struct rig *r)
{
	int st;

	td_client_close(r->c);
	if (r->late > 0) {
		kill(r->late, SIGKILL);
		waitpid(r->late, &st, 0);
	}
	for (int i = 0; i < r->nfill; i++)
		close(r->fill[i]);
	close(r->ls);
	unlink(r->mute);
	unlink(r->link);
	char unused[128];
	snprintf(unused, sizeof(unused), "%s/unused.sock", r->dir);
	unlink(unused);
	rmdir(r->dir);
	cr_assert_eq(tu_fd_count(), r->fds0, "fd leak: %d -> %d", r->fds0,
		     tu_fd_count());
}

/* ---- td_client_process() in a thread: did it come back? ---- */

struct call {
	struct td_client *c;
	int rc;
	struct td_error e;
};

static void *process_once(void *arg)
{
	struct call *k = arg;

	k->rc = td_client_process(k->c, &k->e);
	return NULL;
}

/*
 * One td_client_process() on another thread, which must return while
 * the peer has not answered: the test's thread waits for it (HANG_MS,
 * a hang guard) and only then lets the peer answer, so a call that
 * waited for the peer never comes back here.
 */
static int process_returns(struct rig *r, struct td_error *e)
{
	struct call k = {.c = r->c};
	struct timespec by;
	pthread_t t;
	int rc;

	cr_assert_eq(pthread_create(&t, NULL, process_once, &k), 0);
	clock_gettime(CLOCK_REALTIME, &by);
	by.tv_sec += HANG_MS / 1000;
	rc = pthread_timedjoin_np(t, NULL, &by);
	cr_assert_eq(rc, 0, "td_client_process() waited for a peer that "
			    "has not answered: the caller's loop is blocked");
	if (e)
		*e = k.e;
	return k.rc;
}

/* The hang-up of the dead daemon: the one call that fails on it. */
static void see_hangup(struct rig *r)
{
	cr_assert(wakes(r->c, HANG_MS), "no hang-up");
	cr_assert_lt(process_returns(r, NULL), 0);
}

/* Poll and process until f(r) or a failure; the last return. */
static int run_until(struct rig *r, bool (*f)(const struct rig *r),
		     struct td_error *e)
{
	int rc = 0;

	while (!f(r) && rc >= 0) {
		cr_assert(wakes(r->c, HANG_MS), "nothing woke the loop");
		rc = td_client_process(r->c, e);
	}
	return rc;
}

static bool is_reconnected(const struct rig *r)
{
	return r->reconnected > 0;
}

struct got {
	int calls, status;
	uint64_t version;
	char reason[TD_REASON_MAX + 1];
};

static void on_get(struct td_client *c, int status, struct td_tensor *t,
		   const struct td_error *err, void *ud)
{
	struct got *g = ud;

	(void)c;
	g->calls++;
	g->status = status;
	snprintf(g->reason, sizeof(g->reason), "%s", err ? err->reason : "");
	if (t) {
		g->version = td_tensor_version(t);
		td_tensor_release(t);
	}
}

static void put(const char *path, const char *name)
{
	struct td_client *p;
	struct td_error e = {0};
	uint64_t shape[1] = {4};
	uint8_t buf[4] = {1, 2, 3, 4};
	struct td_publish pub = {.name = name, .dtype = TD_TENSOR_U8,
				 .ndim = 1, .shape = shape};

	cr_assert_eq(td_client_connect(path, &p, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_put(p, &pub, buf, sizeof(buf), NULL, &e), 0,
		     "%s", e.reason);
	td_client_close(p);
}

/* Reconnected: the watch is back under its id, the queued GET was sent
 * to the new daemon, requests work. */
static void check_served(struct rig *r, struct got *g)
{
	struct td_entry ent;

	cr_assert_eq(g->calls, 0, "the queued GET waits for a version");
	put(r->mute, "w/x");
	while (!g->calls || !r->published) {
		cr_assert(wakes(r->c, HANG_MS), "the GET or event never came");
		cr_assert_geq(td_client_process(r->c, NULL), 0);
	}
	cr_assert_eq(g->status, 0, "%s", g->reason);
	cr_assert_eq(g->version, 1);
	cr_assert_eq(r->pub_watch, r->wid, "the watch's id is kept");
	cr_assert_eq(td_client_stat(r->c, "w/none", &ent, NULL), -ENOENT);
	cr_assert_eq(r->reconnected, 1);
}

/*
 * The path names a socket that takes the connection and never answers
 * HELLO (another program's, a wedged tensord): td_client_process() sent
 * HELLO and came back; while the peer is silent the loop has nothing to
 * wake it (no spin). A GET asked meanwhile waits for the reconnect. Once
 * a tensord takes that listener over, its answer to the queued HELLO
 * completes the reconnect through td_client_process().
 */
Test(loop_reconnect, a_silent_peer_never_blocks_process_and_a_late_answer_reconnects)
{
	struct rig r;
	struct got g = {0};
	struct td_error e = {0};
	int rc;

	rig_up(&r, FAR_MS, 16);
	see_hangup(&r);
	cr_assert(!rig_queued(&r));
	rc = process_returns(&r, &e);
	cr_assert_geq(rc, 0, "a try under way is no failure: %d %s", rc,
		      e.reason);
	cr_assert(rig_queued(&r), "the new connection waits in the queue, "
				  "nobody has answered it");
	cr_assert_eq(r.reconnected, 0);
	cr_assert(!wakes(r.c, 0), "nothing to do until the peer answers");
	cr_assert_eq(td_client_get_newer_async(r.c, "w/x", 0, -1, on_get, &g,
					       &e),
		     0, "a GET while reconnecting waits for it: %s", e.reason);
	cr_assert_eq(process_returns(&r, NULL), 0);
	cr_assert_eq(g.calls, 0);

	rig_serve(&r);
	rc = run_until(&r, is_reconnected, &e);
	cr_assert_geq(rc, 0, "%d %s", rc, e.reason);
	check_served(&r, &g);
	rig_down(&r);
}

/*
 * The listener's queue is full (a stopped daemon's): a blocking
 * connect() would wait until it drains. td_client_process() comes back
 * and connect() is tried again on the client's timer; once a tensord
 * drains the queue the reconnect completes.
 */
Test(loop_reconnect, a_full_listen_queue_never_blocks_process_and_a_drained_one_reconnects)
{
	struct rig r;
	struct got g = {0};
	struct td_error e = {0};
	int rc;

	rig_up(&r, FAR_MS, 0);
	rig_fill(&r);
	see_hangup(&r);
	rc = process_returns(&r, &e);
	cr_assert_geq(rc, 0, "a try under way is no failure: %d %s", rc,
		      e.reason);
	cr_assert_eq(r.reconnected, 0);
	cr_assert_eq(td_client_get_newer_async(r.c, "w/x", 0, -1, on_get, &g,
					       &e),
		     0, "%s", e.reason);
	/* the retry timer wakes the loop; each call comes back */
	for (int i = 0; i < 3; i++) {
		cr_assert(wakes(r.c, HANG_MS), "no retry of connect()");
		cr_assert_geq(process_returns(&r, &e), 0, "%s", e.reason);
		cr_assert_eq(r.reconnected, 0);
	}

	rig_serve(&r);
	rc = run_until(&r, is_reconnected, &e);
	cr_assert_geq(rc, 0, "%d %s", rc, e.reason);
	check_served(&r, &g);
	rig_down(&r);
}

/* ---- a fake daemon, played by the test's thread ---- */

/* The next request on s into *h (its body in buf). */
static void fake_recv(int s, struct td_wire_hdr *h, uint8_t *buf, size_t cap)
{
	ssize_t n = recv(s, buf, cap, 0);

	cr_assert_geq(n, TD_WIRE_HDR_LEN, "%zd %s", n, strerror(errno));
	cr_assert_eq(td_wire_hdr_decode(buf, (size_t)n, h, NULL), 0);
}

/* Send the header h (request_id, opcode, flags set) with body[0, len). */
static void fake_send(int s, struct td_wire_hdr h, const uint8_t *body,
		      int64_t len)
{
	uint8_t out[512];

	cr_assert(len >= 0 && (size_t)len <= sizeof(out) - TD_WIRE_HDR_LEN);
	h.magic = TD_WIRE_MAGIC;
	h.version = TD_WIRE_VERSION;
	h.body_len = (uint32_t)len;
	td_wire_hdr_encode(&h, out);
	memcpy(out + TD_WIRE_HDR_LEN, body, (size_t)len);
	cr_assert_eq(send(s, out, TD_WIRE_HDR_LEN + (size_t)len, MSG_NOSIGNAL),
		     TD_WIRE_HDR_LEN + len);
}

/*
 * The daemon that answers HELLO and then is slow (or wedged) to answer
 * the WATCHes a reconnect makes again: td_client_process() does not
 * wait for them either. The application is told of the reconnect once
 * their replies are in, and the watch then goes on under its id.
 */
Test(loop_reconnect, a_daemon_slow_to_answer_the_watches_never_blocks_process)
{
	struct rig r;
	struct td_error e = {0};
	struct td_wire_hdr h, rh;
	struct td_wire_hello_rep hello = {
		.daemon_pid = (uint32_t)getpid(),
		.import_in = TD_IMPORT_SCM,
		.probe_fd = -1,
		.ident = {"fake", 4},
	};
	struct td_wire_watch_rep wrep = {.watch_id = 7};
	struct td_wire_notify note = {.watch_id = 7,
				      .event = TD_EVENT_PUBLISHED,
				      .version = 3,
				      .name = {"w/x", 3}};
	uint8_t buf[TD_WIRE_MAX_MSG], body[256];
	int s, rc;

	rig_up(&r, FAR_MS, 16);
	see_hangup(&r);
	rc = process_returns(&r, &e);
	cr_assert_geq(rc, 0, "%d %s", rc, e.reason);
	s = accept4(r.ls, NULL, NULL, SOCK_CLOEXEC);
	cr_assert_geq(s, 0);
	fake_recv(s, &h, buf, sizeof(buf));
	cr_assert_eq(h.opcode, TD_OP_HELLO);
	rh = (struct td_wire_hdr){.opcode = h.opcode,
				  .flags = TD_WIRE_F_REPLY,
				  .request_id = h.request_id};
	fake_send(s, rh, body,
		  td_wire_hello_rep_encode(&hello, body, sizeof(body)));

	/* HELLO answered: this call sends the WATCH and comes back */
	cr_assert(wakes(r.c, HANG_MS), "the HELLO reply did not wake it");
	rc = process_returns(&r, &e);
	cr_assert_geq(rc, 0, "%d %s", rc, e.reason);
	fake_recv(s, &h, buf, sizeof(buf));
	cr_assert_eq(h.opcode, TD_OP_WATCH, "the watch is made again");
	cr_assert_eq(r.reconnected, 0, "told before the watch is back");
	cr_assert(!wakes(r.c, 0), "nothing to do until the daemon answers");

	rh.opcode = h.opcode;
	rh.request_id = h.request_id;
	fake_send(s, rh, body,
		  td_wire_watch_rep_encode(&wrep, body, sizeof(body)));
	rc = run_until(&r, is_reconnected, &e);
	cr_assert_geq(rc, 0, "%d %s", rc, e.reason);
	cr_assert_eq(r.restored, 1, "one watch made again");
	rh = (struct td_wire_hdr){.opcode = TD_OP_NOTIFY,
				  .flags = TD_WIRE_F_NOTIFY};
	fake_send(s, rh, body,
		  td_wire_notify_encode(&note, body, sizeof(body)));
	while (!r.published) {
		cr_assert(wakes(r.c, HANG_MS), "the event never came");
		cr_assert_geq(td_client_process(r.c, NULL), 0);
	}
	cr_assert_eq(r.pub_watch, r.wid, "the daemon's new id maps to the "
					 "application's");
	close(s);
	rig_down(&r);
}

/*
 * A daemon that predates HELLO's feature bits refuses the word
 * (-EBADMSG): the loop's reconnect says HELLO again without it, also
 * without waiting, as a blocking connect does in place.
 */
Test(loop_reconnect, a_daemon_before_feature_bits_is_said_hello_again_without_waiting)
{
	struct rig r;
	struct td_error e = {0};
	struct td_wire_hdr h, rh;
	struct td_wire_hello_req q;
	struct td_wire_hello_rep hello = {
		.daemon_pid = (uint32_t)getpid(),
		.import_in = TD_IMPORT_SCM,
		.probe_fd = -1,
		.ident = {"old", 3},
	};
	struct td_wire_error no = {.reason = {"trailing bytes", 14}};
	struct td_wire_watch_rep wrep = {.watch_id = 9};
	struct td_client_info info;
	uint8_t buf[TD_WIRE_MAX_MSG], body[256];
	int s, rc;

	rig_up(&r, FAR_MS, 16);
	see_hangup(&r);
	cr_assert_geq(process_returns(&r, NULL), 0);
	s = accept4(r.ls, NULL, NULL, SOCK_CLOEXEC);
	cr_assert_geq(s, 0);
	fake_recv(s, &h, buf, sizeof(buf));
	cr_assert_eq(h.opcode, TD_OP_HELLO);
	cr_assert_eq(td_wire_hello_req_decode(buf + TD_WIRE_HDR_LEN,
					      h.body_len, &q, NULL),
		     0);
	cr_assert_neq(q.features, 0);
	rh = (struct td_wire_hdr){.opcode = h.opcode,
				  .flags = TD_WIRE_F_REPLY,
				  .request_id = h.request_id,
				  .status = -EBADMSG};
	fake_send(s, rh, body, td_wire_error_encode(&no, body, sizeof(body)));
	cr_assert(wakes(r.c, HANG_MS));
	rc = process_returns(&r, &e);
	cr_assert_geq(rc, 0, "%d %s", rc, e.reason);

	fake_recv(s, &h, buf, sizeof(buf));
	cr_assert_eq(h.opcode, TD_OP_HELLO, "HELLO again");
	cr_assert_eq(td_wire_hello_req_decode(buf + TD_WIRE_HDR_LEN,
					      h.body_len, &q, NULL),
		     0);
	cr_assert_eq(q.features, 0, "without the word");
	rh.request_id = h.request_id;
	rh.status = 0;
	fake_send(s, rh, body,
		  td_wire_hello_rep_encode(&hello, body, sizeof(body)));
	cr_assert(wakes(r.c, HANG_MS));
	cr_assert_geq(process_returns(&r, NULL), 0);
	fake_recv(s, &h, buf, sizeof(buf));
	cr_assert_eq(h.opcode, TD_OP_WATCH);
	rh.opcode = h.opcode;
	rh.request_id = h.request_id;
	fake_send(s, rh, body,
		  td_wire_watch_rep_encode(&wrep, body, sizeof(body)));
	rc = run_until(&r, is_reconnected, &e);
	cr_assert_geq(rc, 0, "%d %s", rc, e.reason);
	cr_assert_eq(td_client_info(r.c, &info), 0);
	cr_assert_str_eq(info.ident, "old");
	close(s);
	rig_down(&r);
}

/* The fake daemon's thread for the UNWATCH below: the WATCH's reply,
 * then the UNWATCH read (the id it names kept) and answered. */
struct unwatch_peer {
	int s;
	struct td_wire_hdr watch; /* the WATCH to answer */
	int ok;                   /* 1: all went as planned */
	uint64_t named;           /* the id the UNWATCH named */
};

static void *unwatch_answers(void *arg)
{
	struct unwatch_peer *u = arg;
	struct td_wire_watch_rep wrep = {.watch_id = 7};
	struct td_wire_unwatch_req q;
	struct td_wire_hdr h, rh = {.magic = TD_WIRE_MAGIC,
				    .version = TD_WIRE_VERSION,
				    .flags = TD_WIRE_F_REPLY};
	uint8_t out[128], in[512];
	int64_t len = td_wire_watch_rep_encode(&wrep, out + TD_WIRE_HDR_LEN,
					       sizeof(out) - TD_WIRE_HDR_LEN);
	ssize_t n;

	rh.opcode = u->watch.opcode;
	rh.request_id = u->watch.request_id;
	rh.body_len = (uint32_t)len;
	td_wire_hdr_encode(&rh, out);
	if (len < 0 || send(u->s, out, TD_WIRE_HDR_LEN + (size_t)len,
			    MSG_NOSIGNAL) < 0)
		return NULL;
	n = recv(u->s, in, sizeof(in), 0);
	if (n < TD_WIRE_HDR_LEN ||
	    td_wire_hdr_decode(in, (size_t)n, &h, NULL) < 0 ||
	    h.opcode != TD_OP_UNWATCH ||
	    td_wire_unwatch_req_decode(in + TD_WIRE_HDR_LEN, h.body_len, &q,
				       NULL) < 0)
		return NULL;
	u->named = q.watch_id;
	rh.opcode = h.opcode;
	rh.request_id = h.request_id;
	rh.body_len = 0;
	td_wire_hdr_encode(&rh, out);
	if (send(u->s, out, TD_WIRE_HDR_LEN, MSG_NOSIGNAL) < 0)
		return NULL;
	u->ok = 1;
	return NULL;
}

/*
 * An UNWATCH of a watch whose WATCH (sent again by a loop's reconnect)
 * is not answered yet must name the id that reply gives: it waits for
 * that reply first (a blocking call), and the reconnect is told.
 */
Test(loop_reconnect, an_unwatch_waits_for_the_reply_of_the_watch_made_again)
{
	struct rig r;
	struct td_error e = {0};
	struct td_wire_hdr h, rh;
	struct td_wire_hello_rep hello = {
		.daemon_pid = (uint32_t)getpid(),
		.import_in = TD_IMPORT_SCM,
		.probe_fd = -1,
		.ident = {"fake", 4},
	};
	struct unwatch_peer u = {0};
	uint8_t buf[TD_WIRE_MAX_MSG], body[256];
	pthread_t t;
	int rc;

	rig_up(&r, FAR_MS, 16);
	see_hangup(&r);
	cr_assert_geq(process_returns(&r, NULL), 0);
	u.s = accept4(r.ls, NULL, NULL, SOCK_CLOEXEC);
	cr_assert_geq(u.s, 0);
	fake_recv(u.s, &h, buf, sizeof(buf));
	cr_assert_eq(h.opcode, TD_OP_HELLO);
	rh = (struct td_wire_hdr){.opcode = h.opcode,
				  .flags = TD_WIRE_F_REPLY,
				  .request_id = h.request_id};
	fake_send(u.s, rh, body,
		  td_wire_hello_rep_encode(&hello, body, sizeof(body)));
	cr_assert(wakes(r.c, HANG_MS));
	cr_assert_geq(process_returns(&r, NULL), 0);
	fake_recv(u.s, &u.watch, buf, sizeof(buf));
	cr_assert_eq(u.watch.opcode, TD_OP_WATCH);
	cr_assert_eq(r.reconnected, 0);

	cr_assert_eq(pthread_create(&t, NULL, unwatch_answers, &u), 0);
	rc = td_client_unwatch(r.c, r.wid, &e);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(rc, 0, "%d %s", rc, e.reason);
	cr_assert(u.ok, "the fake daemon's exchange went wrong");
	cr_assert_eq(u.named, 7, "the UNWATCH named %llu, not the new id",
		     (unsigned long long)u.named);
	cr_assert_geq(td_client_process(r.c, NULL), 1);
	cr_assert_eq(r.reconnected, 1);
	cr_assert_eq(r.restored, 1);
	close(u.s);
	rig_down(&r);
}

/*
 * A blocking call while the loop's reconnect waits for a silent peer
 * keeps its old behaviour: it drops that try and reconnects in place,
 * waiting (here for a tensord that took the listener over); the GET
 * that waited for the loop's try goes with this reconnect.
 */
Test(loop_reconnect, a_blocking_call_during_a_loop_reconnect_reconnects_in_place)
{
	struct rig r;
	struct got g = {0};
	struct td_error e = {0};
	struct td_entry ent;
	int rc;

	rig_up(&r, FAR_MS, 16);
	see_hangup(&r);
	rc = process_returns(&r, &e);
	cr_assert_geq(rc, 0, "%d %s", rc, e.reason);
	cr_assert_eq(td_client_get_newer_async(r.c, "w/x", 0, -1, on_get, &g,
					       &e),
		     0, "%s", e.reason);
	rig_serve(&r);
	rc = td_client_stat(r.c, "w/none", &ent, &e);
	cr_assert_eq(rc, -ENOENT, "the new daemon answers: %d %s", rc,
		     e.reason);
	cr_assert_eq(td_client_process(r.c, NULL), 1, "RECONNECTED");
	check_served(&r, &g);
	rig_down(&r);
}

/*
 * Tries that never finish end at the connect deadline, each with the
 * documented -ETIMEDOUT and reason, told by td_client_process() (the
 * timer wakes the loop for it) and to the GET that waited; a later try
 * begins on its own. Nothing of a failed try stays open.
 */
static void deadline_case(bool full, const char *want)
{
	struct rig r;
	struct got g = {0};
	struct td_error e = {0};
	int fds1 = -1, rc;

	rig_up(&r, "200", 16);
	if (full) {
		close(r.ls);
		r.ls = tu_mute_listener(r.mute, 0);
		rig_fill(&r);
	}
	see_hangup(&r);
	for (int try = 0; try < 3; try++) {
		int pending = 0;

		do {
			if (try || pending)
				cr_assert(wakes(r.c, HANG_MS), "nothing woke "
							       "the loop");
			memset(&e, 0, sizeof(e));
			rc = process_returns(&r, &e);
			pending += rc >= 0;
			if (try == 0 && pending == 1 && rc >= 0)
				cr_assert_eq(td_client_get_newer_async(
						     r.c, "w/x", 0, -1, on_get,
						     &g, NULL),
					     0);
		} while (rc >= 0 || rc == -ECONNRESET);
		cr_assert_gt(pending, 0, "the try was never under way: it "
					 "ran to its end inside one call");
		cr_assert_eq(rc, -ETIMEDOUT, "%d %s", rc, e.reason);
		cr_assert(strstr(e.reason, want), "%s", e.reason);
		if (fds1 < 0)
			fds1 = tu_fd_count();
		cr_assert_eq(tu_fd_count(), fds1, "try %d left an fd open", try);
	}
	cr_assert_eq(g.calls, 1);
	cr_assert_eq(g.status, -ETIMEDOUT, "%s", g.reason);
	cr_assert(strstr(g.reason, want), "%s", g.reason);
	cr_assert_eq(r.reconnected, 0);
	rig_down(&r);
}

Test(loop_reconnect, a_silent_peer_times_out_at_the_deadline_and_leaks_nothing)
{
	deadline_case(false, "did not answer HELLO within 200 ms");
}

Test(loop_reconnect, a_queue_that_never_drains_times_out_and_leaks_nothing)
{
	deadline_case(true, "nobody took the connection within 200 ms");
}
