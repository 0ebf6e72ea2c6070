/* SPDX-License-Identifier: MIT */
/*
 * Event-loop clients: td_client_fd() polls readable exactly while there is
 * work (also work queued during another call), td_client_process()
 * delivers watch events and asynchronous GETs to callbacks (which may
 * call back into the library: close, process again, ask again), a
 * broken or closed connection fails what is outstanding, and a child of
 * fork() leaves the parent's descriptor alone.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tensord/tensord.h>

#include "testclient.h"
#include "testutil.h"

TestSuite(loop, .timeout = TU_TEST_TIMEOUT_S);

/* Hang guard only: nothing about speed is asserted. */
#define HANG_MS 20000

/* A private daemon and two connections to it: c waits, p publishes. */
struct pair {
	struct tu_daemon d;
	struct td_client *c, *p;
};

static void pair_up(struct pair *x)
{
	tu_daemon_start(&x->d, "warn");
	x->c = tc_open(&x->d);
	x->p = tc_open(&x->d);
}

static void pair_down(struct pair *x)
{
	td_client_close(x->p);
	td_client_close(x->c);
	tu_daemon_stop(&x->d, true);
}

static int readable(struct td_client *c, int timeout_ms)
{
	struct pollfd p = {.fd = td_client_fd(c), .events = POLLIN};
	cr_assert_geq(p.fd, 0);
	int n = poll(&p, 1, timeout_ms);
	cr_assert_geq(n, 0);
	return n;
}

static void put(struct td_client *c, const char *name, uint8_t byte)
{
	uint64_t shape[1] = {4};
	uint8_t buf[4];
	memset(buf, byte, sizeof(buf));
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape};
	struct td_error e = {0};
	cr_assert_eq(td_client_put(c, &p, buf, sizeof(buf), NULL, &e), 0,
		     "put: %s", e.reason);
}

struct got {
	int calls;
	int status;
	uint64_t version;
	uint8_t first;
	char reason[TD_REASON_MAX + 1];
	struct td_client *c;
};

static void on_get(struct td_client *c, int status, struct td_tensor *t,
		   const struct td_error *err, void *ud)
{
	struct got *g = ud;
	g->calls++;
	g->status = status;
	g->c = c;
	strcpy(g->reason, err ? err->reason : "");
	if (t) {
		g->version = td_tensor_version(t);
		g->first = *(const uint8_t *)td_tensor_plane_data(t, 0);
		td_tensor_release(t);
	}
}

/* Poll then process until g has been called (bounded by HANG_MS). */
static void run_until(struct td_client *c, const struct got *g)
{
	while (!g->calls) {
		cr_assert_gt(readable(c, HANG_MS), 0, "no work came");
		cr_assert_geq(td_client_process(c, NULL), 0);
	}
}

Test(loop, fd_is_readable_for_events_queued_during_another_call)
{
	struct pair x;
	pair_up(&x);
	struct td_client *w = x.c, *p = x.p;
	uint64_t id;
	cr_assert_eq(td_client_watch(w, "a", 0, &id, NULL), 0);
	cr_assert_eq(readable(w, 0), 0, "nothing to do yet");

	put(p, "a", 1);
	/*
	 * The daemon sends the NOTIFY while handling the PUBLISH, before it
	 * reads this STAT: the STAT call reads the event aside, and the
	 * socket is empty again. The fd must still say there is work.
	 */
	struct td_entry ent;
	cr_assert_eq(td_client_stat(w, "a", &ent, NULL), 0);
	td_entry_fini(&ent);
	cr_assert_eq(readable(w, 0), 1, "queued event makes the fd readable");

	struct td_event ev;
	cr_assert_eq(td_client_next_event(w, 0, &ev, NULL), 0);
	cr_assert_str_eq(ev.name, "a");
	cr_assert_eq(ev.version, 1);
	cr_assert_eq(readable(w, 0), 0, "drained: no longer readable");
	cr_assert_eq(td_client_next_event(w, 0, &ev, NULL), -ETIMEDOUT);

	pair_down(&x);
}

struct evs {
	int n;
	uint64_t versions[8];
};

static void on_event(struct td_client *c, const struct td_event *ev,
		     void *ud)
{
	struct evs *e = ud;
	(void)c;
	cr_assert_lt(e->n, 8);
	e->versions[e->n++] = ev->version;
}

Test(loop, process_delivers_watch_events_in_order_to_the_handler)
{
	struct pair x;
	pair_up(&x);
	struct td_client *w = x.c, *p = x.p;
	struct evs got = {0};
	uint64_t id;
	cr_assert_eq(td_client_set_event_handler(w, on_event, &got), 0);
	cr_assert_eq(td_client_watch(w, "b/", TD_WATCH_PREFIX, &id, NULL), 0);
	for (int i = 0; i < 3; i++)
		put(p, "b/x", (uint8_t)i);
	while (got.n < 3) {
		cr_assert_gt(readable(w, HANG_MS), 0);
		cr_assert_geq(td_client_process(w, NULL), 0);
	}
	for (int i = 0; i < 3; i++)
		cr_assert_eq(got.versions[i], (uint64_t)i + 1);
	cr_assert_eq(readable(w, 0), 0);
	cr_assert_eq(td_client_process(w, NULL), 0, "nothing more");
	pair_down(&x);
}

/* n publishes of name by p, then a call of w that reads their events
 * aside (the daemon sent them before it answers the STAT) */
static void puts_read_aside(struct td_client *p, struct td_client *w,
			    const char *name, int n)
{
	struct td_entry ent;

	for (int i = 0; i < n; i++)
		put(p, name, (uint8_t)i);
	cr_assert_eq(td_client_stat(w, name, &ent, NULL), 0);
	td_entry_fini(&ent);
}

/*
 * With a limit, the queue keeps that many events; what comes while it is
 * full is dropped and counted in one OVERFLOWED event in its place (not
 * counted by the limit), for td_client_next_event() and for a handler.
 */
Test(loop, a_bounded_event_queue_counts_what_it_dropped)
{
	struct pair x;
	pair_up(&x);
	struct td_client *w = x.c, *p = x.p;
	struct td_event ev;
	struct evs got = {0};
	uint64_t id;

	cr_assert_eq(td_client_set_event_limit(NULL, 3), -EINVAL);
	cr_assert_eq(td_client_set_event_limit(w, 3), 0);
	cr_assert_eq(td_client_watch(w, "q", 0, &id, NULL), 0);
	puts_read_aside(p, w, "q", 10);
	for (uint64_t v = 1; v <= 3; v++) {
		cr_assert_eq(td_client_next_event(w, 0, &ev, NULL), 0);
		cr_assert_eq(ev.type, TD_EVENT_TYPE_PUBLISHED);
		cr_assert_eq(ev.version, v);
	}
	cr_assert_eq(td_client_next_event(w, 0, &ev, NULL), 0);
	cr_assert_eq(ev.type, TD_EVENT_TYPE_OVERFLOWED);
	cr_assert_eq(ev.version, 7, "dropped: %llu",
		     (unsigned long long)ev.version);
	cr_assert_eq(ev.watch_id, 0);
	cr_assert_str_eq(ev.name, "");
	cr_assert_eq(readable(w, 0), 0, "drained");
	cr_assert_eq(td_client_next_event(w, 0, &ev, NULL), -ETIMEDOUT);
	/* room again: events are kept again, in order */
	puts_read_aside(p, w, "q", 2);
	cr_assert_eq(td_client_next_event(w, 0, &ev, NULL), 0);
	cr_assert_eq(ev.version, 11);
	cr_assert_eq(td_client_next_event(w, 0, &ev, NULL), 0);
	cr_assert_eq(ev.version, 12);
	/* a handler gets the same: two kept, then the count of three */
	cr_assert_eq(td_client_set_event_limit(w, 2), 0);
	cr_assert_eq(td_client_set_event_handler(w, on_event, &got), 0);
	puts_read_aside(p, w, "q", 5);
	while (got.n < 3) {
		cr_assert_gt(readable(w, HANG_MS), 0);
		cr_assert_geq(td_client_process(w, NULL), 0);
	}
	cr_assert_eq(got.versions[0], 13);
	cr_assert_eq(got.versions[1], 14);
	cr_assert_eq(got.versions[2], 3, "the OVERFLOWED count");
	cr_assert_eq(readable(w, 0), 0);
	/* no limit: every event kept again */
	cr_assert_eq(td_client_set_event_handler(w, NULL, NULL), 0);
	cr_assert_eq(td_client_set_event_limit(w, 0), 0);
	puts_read_aside(p, w, "q", 20);
	for (uint64_t v = 18; v <= 37; v++) {
		cr_assert_eq(td_client_next_event(w, 0, &ev, NULL), 0);
		cr_assert_eq(ev.version, v);
	}
	pair_down(&x);
}

Test(loop, async_get_is_parked_then_delivered_by_process)
{
	struct pair x;
	pair_up(&x);
	struct td_client *c = x.c, *p = x.p;
	struct got g = {0};
	cr_assert_eq(td_client_get_newer_async(c, "later", 0, -1, on_get, &g,
					       NULL), 0);
	/* parked: the daemon has nothing to say until a publish */
	cr_assert_eq(td_client_process(c, NULL), 0);
	cr_assert_eq(g.calls, 0);

	put(p, "later", 7);
	run_until(c, &g);
	cr_assert_eq(g.calls, 1);
	cr_assert_eq(g.status, 0, "%s", g.reason);
	cr_assert_eq(g.version, 1);
	cr_assert_eq(g.first, 7);
	cr_assert_eq(g.c, c);
	pair_down(&x);
}

Test(loop, async_reply_read_by_a_blocking_call_is_kept_for_process)
{
	struct pair x;
	pair_up(&x);
	struct td_client *c = x.c, *p = x.p;
	struct got g = {0};
	cr_assert_eq(td_client_get_newer_async(c, "k", 0, -1, on_get, &g,
					       NULL), 0);
	put(p, "k", 3);
	/* the GET reply precedes this STAT's reply and is read aside */
	struct td_entry ent;
	cr_assert_eq(td_client_stat(c, "k", &ent, NULL), 0);
	td_entry_fini(&ent);
	cr_assert_eq(g.calls, 0, "callbacks run only from process");
	cr_assert_eq(readable(c, 0), 1);
	cr_assert_eq(td_client_process(c, NULL), 1);
	cr_assert_eq(g.status, 0, "%s", g.reason);
	cr_assert_eq(g.first, 3);
	cr_assert_eq(readable(c, 0), 0);
	pair_down(&x);
}

Test(loop, async_get_timeout_and_refusal_reach_the_callback)
{
	struct tu_daemon d;
	tu_daemon_start(&d, "warn");
	struct td_client *c = tc_open(&d);
	struct got g = {0};
	cr_assert_eq(td_client_get_newer_async(c, "none", 0, 0, on_get, &g,
					       NULL), 0);
	run_until(c, &g);
	cr_assert_eq(g.status, -ETIMEDOUT);
	struct got bad = {0};
	cr_assert_eq(td_client_get_newer_async(c, "", 0, 0, on_get, &bad,
					       NULL), 0);
	run_until(c, &bad);
	cr_assert_lt(bad.status, 0);
	cr_assert_neq(bad.status, -ETIMEDOUT);
	cr_assert_neq(bad.reason[0], 0, "the daemon's reason is passed on");
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

Test(loop, close_cancels_outstanding_gets)
{
	struct tu_daemon d;
	tu_daemon_start(&d, "warn");
	struct td_client *c = tc_open(&d);
	struct got g = {0};
	cr_assert_eq(td_client_get_newer_async(c, "never", 0, -1, on_get, &g,
					       NULL), 0);
	td_client_close(c);
	cr_assert_eq(g.calls, 1);
	cr_assert_eq(g.status, -ECANCELED);
	tu_daemon_stop(&d, true);
}

Test(loop, daemon_gone_fails_outstanding_gets_and_process)
{
	struct tu_daemon d;
	tu_daemon_start(&d, "warn");
	struct td_client *c = tc_open(&d);
	struct got g = {0};
	cr_assert_eq(td_client_get_newer_async(c, "never", 0, -1, on_get, &g,
					       NULL), 0);
	int fds0 = d.fds0, maps0 = d.maps0;
	kill(d.pid, SIGKILL);
	int st;
	cr_assert_eq(waitpid(d.pid, &st, 0), d.pid);
	cr_assert_gt(readable(c, HANG_MS), 0, "hang-up polls readable");
	int rc = td_client_process(c, NULL);
	cr_assert_eq(rc, -ECONNRESET, "%d", rc);
	cr_assert_eq(g.calls, 1);
	cr_assert_eq(g.status, -ECONNRESET);
	cr_assert_lt(td_client_get_newer_async(c, "x", 0, 0, on_get, &g, NULL),
		     0, "a broken handle sends nothing");
	td_client_close(c);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", d.dir);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(tu_fd_count(), fds0);
	if (TU_CHECK_ALL_MAPS)
		cr_assert_eq(tu_map_count(), maps0);
}

/* ---- rings in the loop ---- */

struct views {
	int calls, ended;
	uint64_t last;
	uint8_t first;
};

static void on_view(struct td_sub *s, int status, const struct td_view *v,
		    void *ud)
{
	struct views *w = ud;
	(void)s;
	w->calls++;
	if (status < 0) {
		w->ended = status;
		return;
	}
	cr_assert_gt(v->version, w->last, "versions only grow");
	w->last = v->version;
	w->first = *(const uint8_t *)v->planes[0];
}

static void ring_put(struct td_ring *r, uint8_t byte)
{
	struct td_slot slot;
	cr_assert_eq(td_ring_acquire(r, -1, &slot), 0);
	memset(slot.planes[0], byte, slot.sizes[0]);
	cr_assert_eq(td_ring_publish(r, NULL), 0);
}

Test(loop, ring_versions_wake_the_fd_and_reach_the_handler)
{
	struct pair x;
	pair_up(&x);
	struct td_client *pc = x.p, *c = x.c;
	uint64_t shape[1] = {64};
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = shape};
	struct td_ring *r;
	struct td_sub *s;
	cr_assert_eq(td_ring_create(pc, "loop/ring", &desc, &r, NULL), 0);
	cr_assert_eq(td_ring_subscribe(c, "loop/ring", 0, &s, NULL), 0);
	struct views w = {0};
	cr_assert_eq(td_sub_set_handler(s, on_view, &w), 0);
	cr_assert_eq(td_client_process(c, NULL), 0, "nothing published yet");
	cr_assert_eq(readable(c, 0), 0, "armed, nothing to do");

	ring_put(r, 11);
	/* the producer fires the reader's timerfd with a 1 ns expiry: it
	 * reads readable once the timer's interrupt ran, so wait for it */
	cr_assert_eq(readable(c, HANG_MS), 1, "the publish fired the timerfd");
	cr_assert_eq(td_client_process(c, NULL), 1);
	cr_assert_eq(w.calls, 1);
	cr_assert_eq(w.last, 1);
	cr_assert_eq(w.first, 11);
	cr_assert_eq(readable(c, 0), 0);
	/* other work of the client calls no ring handler */
	uint64_t wid;
	cr_assert_eq(td_client_watch(c, "loop/other", 0, &wid, NULL), 0);
	put(pc, "loop/other", 1);
	cr_assert_eq(readable(c, HANG_MS), 1);
	cr_assert_eq(td_client_process(c, NULL), 0, "no handler for events");
	struct td_event ev;
	cr_assert_eq(td_client_next_event(c, 0, &ev, NULL), 0);
	cr_assert_eq(td_client_unwatch(c, wid, NULL), 0);
	cr_assert_eq(w.calls, 1, "no new version, no call");

	/* warm: handoffs send the daemon nothing, whoever waits by fd */
	uint64_t before = tc_daemon_requests(pc, "loop/ring");
	for (int i = 0; i < 50; i++) {
		ring_put(r, (uint8_t)(20 + i));
		cr_assert_eq(readable(c, HANG_MS), 1, "publish %d wakes", i);
		cr_assert_eq(td_client_process(c, NULL), 1);
		cr_assert_eq(w.first, 20 + i);
	}
	cr_assert_eq(tc_daemon_requests(pc, "loop/ring"), before + 1,
		     "only the RING_STAT itself reached the daemon");
	cr_assert_eq(w.last, 51);

	td_ring_close(r);
	cr_assert_eq(readable(c, HANG_MS), 1, "the close wakes too");
	cr_assert_eq(td_client_process(c, NULL), 1);
	cr_assert_eq(w.ended, -EPIPE);
	cr_assert_eq(td_client_process(c, NULL), 0, "the end is told once");
	td_sub_close(s);
	pair_down(&x);
}

Test(loop, sub_poll_takes_a_version_published_before_it_armed)
{
	struct pair x;
	pair_up(&x);
	struct td_client *pc = x.p, *c = x.c;
	uint64_t shape[1] = {8};
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = shape};
	struct td_ring *r;
	struct td_sub *s;
	struct td_view v;
	cr_assert_eq(td_ring_create(pc, "loop/r2", &desc, &r, NULL), 0);
	cr_assert_eq(td_ring_subscribe(c, "loop/r2", 0, &s, NULL), 0);
	cr_assert_eq(td_sub_poll(s, &v), -EINVAL, "no fd yet");
	int fd = td_sub_fd(s);
	cr_assert_geq(fd, 0);
	cr_assert_eq(td_sub_fd(s), fd, "one fd per subscription");
	cr_assert_eq(td_sub_poll(s, &v), -EAGAIN);
	struct pollfd p = {.fd = fd, .events = POLLIN};
	cr_assert_eq(poll(&p, 1, 0), 0);
	ring_put(r, 5);
	/* a timerfd fired with a 1 ns expiry: readable within moments */
	cr_assert_eq(poll(&p, 1, 20000), 1);
	cr_assert_eq(td_sub_poll(s, &v), 0);
	cr_assert_eq(v.version, 1);
	cr_assert_eq(*(const uint8_t *)v.planes[0], 5);
	cr_assert_eq(poll(&p, 1, 0), 0, "cleared by the poll");
	cr_assert_eq(td_sub_poll(s, &v), -EAGAIN);
	td_sub_close(s);
	td_ring_close(r);
	pair_down(&x);
}

/* ---- TD_CLIENT_RECONNECT ---- */

/*
 * TD_CLIENT_RECONNECT: the restarted "daemon" at the path is a socket that
 * queues the connection and never answers HELLO; the reconnect waited for
 * ever in the call that made it. It keeps the connect deadline.
 */
Test(loop, reconnect_to_a_socket_that_never_answers_times_out,
     .timeout = TU_WAIT_S)
{
	char link[64], mute[64];
	struct tu_daemon d;
	struct td_client *c;
	struct td_error e = {0};
	struct td_entry ent;
	int fds0 = tu_fd_count(), ls, rc;

	snprintf(link, sizeof(link), "/tmp/td-recmute-%d.sock", (int)getpid());
	snprintf(mute, sizeof(mute), "/tmp/td-recmute-%d.mute", (int)getpid());
	tu_daemon_start(&d, "warn");
	tu_link_to(link, d.sock);
	setenv("TENSORD_CONNECT_TIMEOUT_MS", "200", 1);
	rc = td_client_connect_ex(link, TD_CLIENT_RECONNECT, &c, &e);
	unsetenv("TENSORD_CONNECT_TIMEOUT_MS");
	cr_assert_eq(rc, 0, "%s", e.reason);
	tu_daemon_kill(&d);
	ls = tu_mute_listener(mute, 4);
	tu_link_to(link, mute);
	/* the call that finds the daemon gone may fail on the old socket;
	 * the next one reconnects, to the mute socket */
	rc = td_client_stat(c, "x", &ent, &e);
	if (rc != -ETIMEDOUT)
		rc = td_client_stat(c, "x", &ent, &e);
	cr_assert_eq(rc, -ETIMEDOUT, "%d %s", rc, e.reason);
	cr_assert(strstr(e.reason, "did not answer HELLO within 200 ms"), "%s",
		  e.reason);
	td_client_close(c);
	close(ls);
	unlink(mute);
	unlink(link);
	cr_assert_eq(tu_fd_count(), fds0);
}

Test(loop, reconnect_after_a_restart_rewatches_and_tells_the_application)
{
	char link[64];
	snprintf(link, sizeof(link), "/tmp/td-reconnect-%d.sock",
		 (int)getpid());
	int fds0 = tu_fd_count(), bufmaps0 = tu_buf_map_count();
	struct tu_daemon d1, d2;
	tu_daemon_start(&d1, "warn");
	tu_link_to(link, d1.sock);

	struct td_client *c, *p;
	struct td_error e = {0};
	uint64_t wid, other;
	cr_assert_eq(td_client_connect_ex(link, TD_CLIENT_RECONNECT, &c, &e),
		     0, "%s", e.reason);
	cr_assert_eq(td_client_connect_ex(link, 0x8, &p, &e), -EINVAL);
	cr_assert_eq(td_client_connect(d1.sock, &p, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_watch(c, "gone/", TD_WATCH_PREFIX, &other, NULL),
		     0);
	cr_assert_eq(td_client_watch(c, "r/", TD_WATCH_PREFIX, &wid, NULL), 0);
	cr_assert_eq(td_client_unwatch(c, other, NULL), 0);
	put(p, "r/old", 1);
	struct td_tensor *old;
	cr_assert_eq(td_client_get(c, "r/old", &old, NULL), 0);
	struct td_event ev;
	cr_assert_eq(td_client_next_event(c, HANG_MS, &ev, NULL), 0);
	cr_assert_eq(ev.watch_id, wid);
	struct td_alloc *loan;
	uint64_t four = 4;
	cr_assert_eq(td_client_alloc(c, 1, &four, &loan, NULL), 0);
	struct got g = {0};
	cr_assert_eq(td_client_get_newer_async(c, "never", 0, -1, on_get, &g,
					       NULL), 0);
	td_client_close(p);

	/* the daemon goes; while it is away calls fail and try again */
	tu_daemon_kill(&d1);
	struct td_entry ent;
	cr_assert_lt(td_client_stat(c, "r/old", &ent, NULL), 0);
	cr_assert_lt(td_client_stat(c, "r/old", &ent, NULL), 0,
		     "no daemon yet");
	cr_assert_eq(g.calls, 0, "callbacks run from process only");
	cr_assert_lt(td_client_process(c, NULL), 0);
	cr_assert_eq(g.calls, 1);
	cr_assert_eq(g.status, -ECONNRESET, "the parked GET is lost");

	/* back: the next call reconnects and watches again */
	tu_daemon_start(&d2, "warn");
	tu_link_to(link, d2.sock);
	int rc = td_client_stat(c, "r/old", &ent, &e);
	cr_assert_eq(rc, -ENOENT, "the new daemon answers: %d %s", rc,
		     e.reason);
	cr_assert_eq(td_client_next_event(c, 0, &ev, NULL), 0);
	cr_assert_eq(ev.type, TD_EVENT_TYPE_RECONNECTED);
	cr_assert_eq(ev.version, 1, "one watch re-established");
	cr_assert_eq(td_client_connect(d2.sock, &p, &e), 0, "%s", e.reason);
	put(p, "r/new", 2);
	cr_assert_eq(td_client_next_event(c, HANG_MS, &ev, NULL), 0);
	cr_assert_eq(ev.type, TD_EVENT_TYPE_PUBLISHED);
	cr_assert_eq(ev.watch_id, wid, "the application's id is kept");
	cr_assert_str_eq(ev.name, "r/new");

	/* old objects name nothing in the new daemon and touch nothing */
	struct td_tensor *t;
	cr_assert_eq(td_client_get(c, "r/new", &t, NULL), 0);
	cr_assert_eq(*(const uint8_t *)td_tensor_plane_data(t, 0), 2);
	cr_assert_eq(*(const uint8_t *)td_tensor_plane_data(old, 0), 1,
		     "the old tensor stays mapped and readable");
	td_tensor_release(old);
	cr_assert_eq(td_client_stat(p, "r/new", &ent, NULL), 0);
	cr_assert_eq(ent.lease_count, 1, "releasing the old one sent nothing");
	td_entry_fini(&ent);
	uint64_t shape[1] = {4};
	struct td_publish pub = {.name = "r/loan", .dtype = TD_TENSOR_U8,
				 .ndim = 1, .shape = shape};
	cr_assert_eq(td_client_publish_alloc(c, loan, &pub, NULL, &e),
		     -ECONNRESET, "%s", e.reason);
	td_tensor_release(t);
	cr_assert_eq(td_client_unwatch(c, wid, NULL), 0);

	td_client_close(p);
	td_client_close(c);
	tu_daemon_kill(&d2);
	unlink(link);
	cr_assert_eq(tu_fd_count(), fds0);
	cr_assert_eq(tu_buf_map_count(), bufmaps0);
}

/*
 * An async GET that reconnects, on SCM_RIGHTS: its GET names the
 * buffers mapped here (held ids), and must name none of the old
 * daemon's, whose buffer ids the new one uses again for its own (it
 * left buffer 1 out as held, and the callback got "not mapped here").
 */
Test(loop, an_async_get_that_reconnects_names_no_old_buffer_scm)
{
	char link[64];
	snprintf(link, sizeof(link), "/tmp/td-reconnect-a-%d.sock",
		 (int)getpid());
	struct tu_daemon d1, d2;
	tu_daemon_start(&d1, "warn");
	tu_link_to(link, d1.sock);

	struct td_client *c, *p;
	struct td_error e = {0};
	cr_assert_eq(setenv("TENSORD_IMPORT", "scm", 1), 0);
	cr_assert_eq(td_client_connect_ex(link, TD_CLIENT_RECONNECT, &c, &e),
		     0, "%s", e.reason);
	cr_assert_eq(td_client_connect(d1.sock, &p, &e), 0, "%s", e.reason);
	put(p, "a", 1);
	struct td_tensor *t;
	cr_assert_eq(td_client_get(c, "a", &t, NULL), 0);
	td_tensor_release(t); /* its mapping stays cached */
	td_client_close(p);
	tu_daemon_kill(&d1);
	struct td_entry ent;
	cr_assert_lt(td_client_stat(c, "a", &ent, NULL), 0);

	tu_daemon_start(&d2, "warn");
	tu_link_to(link, d2.sock);
	cr_assert_eq(td_client_connect(d2.sock, &p, &e), 0, "%s", e.reason);
	put(p, "a", 5);
	struct got g = {0};
	cr_assert_eq(td_client_get_newer_async(c, "a", 0, 0, on_get, &g, &e),
		     0, "%s", e.reason);
	run_until(c, &g);
	cr_assert_eq(g.status, 0, "%s", g.reason);
	cr_assert_eq(g.first, 5);
	td_client_close(p);
	td_client_close(c);
	tu_daemon_kill(&d2);
	unlink(link);
}

/*
 * An application that only waits for events: the next_event during
 * which the daemon went away fails, and the next one reconnected but then
 * waited on the new socket with the RECONNECTED event queued, until some
 * other message came (none: for ever). Now that event is given at once.
 */
Test(loop, next_event_gives_the_reconnected_event_without_other_traffic)
{
	char link[64];
	snprintf(link, sizeof(link), "/tmp/td-reconnect-ev-%d.sock",
		 (int)getpid());
	struct tu_daemon d1, d2;
	tu_daemon_start(&d1, "warn");
	tu_link_to(link, d1.sock);
	struct td_client *c;
	struct td_error e = {0};
	uint64_t wid;
	cr_assert_eq(td_client_connect_ex(link, TD_CLIENT_RECONNECT, &c, &e),
		     0, "%s", e.reason);
	cr_assert_eq(td_client_watch(c, "r/", TD_WATCH_PREFIX, &wid, NULL), 0);
	tu_daemon_kill(&d1);
	struct td_event ev;
	cr_assert_lt(td_client_next_event(c, HANG_MS, &ev, NULL), 0,
		     "the daemon went away");
	tu_daemon_start(&d2, "warn");
	tu_link_to(link, d2.sock);
	int rc = td_client_next_event(c, HANG_MS, &ev, &e);
	cr_assert_eq(rc, 0, "%d %s", rc, e.reason);
	cr_assert_eq(ev.type, TD_EVENT_TYPE_RECONNECTED);
	cr_assert_eq(ev.version, 1, "one watch re-established");
	td_client_close(c);
	tu_daemon_kill(&d2);
	unlink(link);
}

/* ---- which watches an event reaches (daemon/store.c, td__notify_name) ---- */

/* The watch ids of every event c has received so far, in order, into ids
 * (at most cap); each event's name must be `name` (NULL: any). A STAT
 * first: the daemon sends a connection's events in order, so its reply
 * comes after every event already sent to c. */
static int drain_events(struct td_client *c, const char *name, uint64_t *ids,
			int cap)
{
	struct td_entry ent;
	struct td_event ev;
	int n = 0;

	cr_assert_eq(td_client_stat(c, "none/such", &ent, NULL), -ENOENT);
	while (td_client_next_event(c, 0, &ev, NULL) == 0) {
		cr_assert_lt(n, cap, "more events than watches");
		cr_assert_eq(ev.type, TD_EVENT_TYPE_PUBLISHED);
		if (name)
			cr_assert_str_eq(ev.name, name);
		ids[n++] = ev.watch_id;
	}
	return n;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* Publish name and check that exactly the watches want[0..n) fired. */
static void expect_watches(struct td_client *w, struct td_client *p,
			   const char *name, uint64_t *want, int n)
{
	uint64_t got[16];
	int k;

	put(p, name, 1);
	k = drain_events(w, name, got, 16);
	cr_assert_eq(k, n, "%s: %d events, want %d", name, k, n);
	qsort(got, (size_t)k, sizeof(*got), cmp_u64);
	qsort(want, (size_t)n, sizeof(*want), cmp_u64);
	for (int i = 0; i < n; i++)
		cr_assert_eq(got[i], want[i], "%s: event %d", name, i);
}

/*
 * Watches are found by the hash of their name, and prefix watches by the
 * hash of their prefix at each length some prefix watch has: an exact
 * watch fires for its name only, a prefix watch for every name it
 * begins (its own full name, and "" for all), never for a shorter name;
 * two prefix watches of one length both fire, and either one unwatched
 * leaves the other firing.
 */
Test(loop, an_event_reaches_exactly_the_watches_of_its_name_and_prefixes)
{
	struct pair x;
	pair_up(&x);
	struct td_client *w = x.c, *p = x.p;
	const char *pre[] = {"", "wx/", "wx/", "wx/1", "wx/12", "wx/123",
			     "wx/1234", "wy/"};
	uint64_t exact[200], pid[8], want[16];

	for (int i = 0; i < 200; i++) {
		char name[16];
		snprintf(name, sizeof(name), "wx/%d", i);
		cr_assert_eq(td_client_watch(w, name, 0, &exact[i], NULL), 0);
	}
	for (int i = 0; i < 8; i++)
		cr_assert_eq(td_client_watch(w, pre[i], TD_WATCH_PREFIX,
					     &pid[i], NULL),
			     0);
	/* wx/5: its own, "", both "wx/" */
	want[0] = exact[5], want[1] = pid[0], want[2] = pid[1];
	want[3] = pid[2];
	expect_watches(w, p, "wx/5", want, 4);
	/* wx/123: its own and every prefix but wx/1234 and wy/ */
	want[0] = exact[123];
	for (int i = 0; i < 6; i++)
		want[1 + i] = pid[i];
	expect_watches(w, p, "wx/123", want, 7);
	/* a name no exact watch has: "" only */
	want[0] = pid[0];
	expect_watches(w, p, "wz", want, 1);
	/* one "wx/" and "wx/12" gone: the other "wx/" still fires */
	cr_assert_eq(td_client_unwatch(w, pid[1], NULL), 0);
	cr_assert_eq(td_client_unwatch(w, pid[4], NULL), 0);
	want[0] = exact[12], want[1] = pid[0], want[2] = pid[2];
	want[3] = pid[3];
	expect_watches(w, p, "wx/12", want, 4);
	pair_down(&x);
}

/*
 * 1250 exact watches on five connections, more than the daemon's 1024
 * buckets, so names share buckets whatever its seed: each publish reaches
 * the one watch of its name, on its connection, in publish order.
 */
Test(loop, exact_watches_on_many_names_each_fire_for_their_own_name)
{
	enum { CONNS = 5, PER = 250 };
	struct tu_daemon d;
	struct td_client *w[CONNS], *p;
	static uint64_t ids[CONNS][PER], got[PER];
	char name[16];

	tu_daemon_start(&d, "warn");
	p = tc_open(&d);
	for (int c = 0; c < CONNS; c++) {
		w[c] = tc_open(&d);
		for (int k = 0; k < PER; k++) {
			snprintf(name, sizeof(name), "wb/%d", c * PER + k);
			cr_assert_eq(td_client_watch(w[c], name, 0,
						     &ids[c][k], NULL),
				     0);
		}
	}
	for (int k = 0; k < PER; k++)
		for (int c = 0; c < CONNS; c++) {
			snprintf(name, sizeof(name), "wb/%d", c * PER + k);
			put(p, name, (uint8_t)k);
		}
	for (int c = 0; c < CONNS; c++) {
		cr_assert_eq(drain_events(w[c], NULL, got, PER), PER);
		for (int k = 0; k < PER; k++)
			cr_assert_eq(got[k], ids[c][k], "connection %d, %d", c,
				     k);
		td_client_close(w[c]);
	}
	td_client_close(p);
	tu_daemon_stop(&d, true);
}

/* ---- callbacks that call back into the library ---- */

struct closer {
	int calls;
	struct td_client *c;
};

static void close_on_event(struct td_client *c, const struct td_event *ev,
			   void *ud)
{
	struct closer *k = ud;
	(void)ev;
	k->calls++;
	cr_assert_eq(c, k->c, "called for a client already closed");
	td_client_close(c);
}

/*
 * A handler may call any function on its handle, td_client_close() too:
 * the events still in the batch td_client_process() took are dropped
 * with the handle, never handed to a handler with a freed client.
 */
Test(loop, an_event_handler_may_close_its_client)
{
	struct pair x;
	pair_up(&x);
	struct td_client *w = x.c, *p = x.p;
	struct closer k = {.c = w};
	uint64_t id;
	cr_assert_eq(td_client_watch(w, "z", 0, &id, NULL), 0);
	cr_assert_eq(td_client_set_event_handler(w, close_on_event, &k), 0);
	put(p, "z", 1);
	put(p, "z", 2);
	/* both events queued before the handler runs */
	struct td_entry ent;
	cr_assert_eq(td_client_stat(w, "z", &ent, NULL), 0);
	cr_assert_eq(ent.version, 2);
	td_entry_fini(&ent);
	td_client_process(w, NULL);
	cr_assert_eq(k.calls, 1, "no event after the close");
	td_client_close(p);
	tu_daemon_stop(&x.d, true);
}

struct rearm {
	int calls, status, again;
};

static void rearm_on_get(struct td_client *c, int status, struct td_tensor *t,
			 const struct td_error *err, void *ud)
{
	struct rearm *r = ud;
	(void)err;
	r->calls++;
	r->status = status;
	td_tensor_release(t);
	/* a chain that asks again whatever happened */
	r->again = td_client_get_newer_async(c, "never", 0, -1, rearm_on_get,
					     r, NULL);
}

/*
 * td_client_close() tells each waiting GET -ECANCELED; a callback that
 * asks again then is refused (its fn never called), not sent on a
 * connection about to close, where nothing would ever answer or free it.
 */
Test(loop, a_get_asked_for_while_closing_is_refused)
{
	struct tu_daemon d;
	tu_daemon_start(&d, "warn");
	struct td_client *c = tc_open(&d);
	struct rearm r = {0};
	cr_assert_eq(td_client_get_newer_async(c, "never", 0, -1, rearm_on_get,
					       &r, NULL), 0);
	td_client_close(c);
	cr_assert_eq(r.calls, 1);
	cr_assert_eq(r.status, -ECANCELED);
	cr_assert_eq(r.again, -ENOTCONN, "%d", r.again);
	tu_daemon_stop(&d, true);
}

/* ---- fork() ---- */

/*
 * A child of fork() shares the parent's epoll set and eventfd: what it
 * does with its copy of the handle (close it, drain its copy of the
 * queue) must not change what the parent's td_client_fd() says.
 */
Test(loop, a_child_of_fork_leaves_the_parents_fd_alone)
{
	struct pair x;
	pair_up(&x);
	struct td_client *c = x.c, *p = x.p;
	struct got g = {0};
	uint64_t id;
	cr_assert_eq(td_client_watch(c, "f", 0, &id, NULL), 0);
	cr_assert_eq(td_client_get_newer_async(c, "never", 0, -1, on_get, &g,
					       NULL), 0);
	cr_assert_eq(readable(c, 0), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		td_client_close(c);
		_exit(0);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert_eq(readable(c, 0), 0, "nothing queued in the parent");

	/* an event queued in the parent, drained by a child */
	put(p, "f", 1);
	struct td_entry ent;
	cr_assert_eq(td_client_stat(c, "f", &ent, NULL), 0);
	td_entry_fini(&ent);
	cr_assert_eq(readable(c, 0), 1);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct td_event ev;
		(void)td_client_next_event(c, 0, &ev, NULL);
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert_eq(readable(c, 0), 1, "the parent's event is still there");
	struct td_event ev;
	cr_assert_eq(td_client_next_event(c, 0, &ev, NULL), 0);
	cr_assert_str_eq(ev.name, "f");
	cr_assert_eq(readable(c, 0), 0);
	cr_assert_eq(g.calls, 0);
	pair_down(&x);
	cr_assert_eq(g.status, -ECANCELED);
}

static void no_view(struct td_sub *s, int status, const struct td_view *v,
		    void *ud)
{
	(void)s, (void)status, (void)v, (void)ud;
}

/* Nor may a child put the parent's subscription into the shared set. */
Test(loop, a_child_of_fork_cannot_give_the_parents_sub_a_handler)
{
	struct pair x;
	pair_up(&x);
	struct td_client *pc = x.p, *c = x.c;
	uint64_t shape[1] = {8};
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = shape};
	struct td_ring *r;
	struct td_sub *s;
	cr_assert_eq(td_ring_create(pc, "loop/fk", &desc, &r, NULL), 0);
	cr_assert_eq(td_ring_subscribe(c, "loop/fk", 0, &s, NULL), 0);
	cr_assert_geq(td_sub_fd(s), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (td_sub_set_handler(s, no_view, NULL) != -ECHILD)
			_exit(1);
		/* made before the fork, it is the parent's all the same */
		_exit(td_sub_fd(s) == -ECHILD ? 0 : 2);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "-ECHILD (%d)", st);
	ring_put(r, 1);
	cr_assert_eq(readable(c, 0), 0, "no handler in the parent");
	td_sub_close(s);
	td_ring_close(r);
	pair_down(&x);
}

/* A GET callback that stays in its thread until a byte comes on rd. */
struct parked {
	int rd;
	atomic_int inside;
};

static void park_on_get(struct td_client *c, int status, struct td_tensor *t,
			const struct td_error *err, void *ud)
{
	struct parked *k = ud;
	char b;

	(void)c, (void)status, (void)err;
	td_tensor_release(t);
	atomic_store(&k->inside, 1);
	(void)!read(k->rd, &b, 1);
}

static void *process_once(void *arg)
{
	(void)td_client_process(arg, NULL);
	return NULL;
}

/*
 * A thread of the parent inside a GET callback at the fork held the
 * handle's GET turn; in the child that thread does not exist, so the
 * child's copy must not find the turn taken (as it must not find the
 * mutex held): its td_client_close() tells the GET still waiting, as
 * any close does, instead of forgetting it untold.
 */
Test(loop, a_child_of_fork_closes_while_a_parent_thread_was_in_a_callback)
{
	struct pair x;
	pair_up(&x);
	struct td_client *c = x.c;
	int fds[2];
	cr_assert_eq(pipe(fds), 0);
	struct parked k = {.rd = fds[0]};
	struct got g = {0};
	put(x.p, "fk/g", 1);
	cr_assert_eq(td_client_get_newer_async(c, "fk/g", 0, -1, park_on_get,
					       &k, NULL), 0);
	cr_assert_eq(td_client_get_newer_async(c, "never", 0, -1, on_get, &g,
					       NULL), 0);
	cr_assert_gt(readable(c, HANG_MS), 0, "the first GET's reply");
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, process_once, c), 0);
	for (int i = 0; !atomic_load(&k.inside); i++) {
		cr_assert_lt(i, HANG_MS, "the callback did not run");
		usleep(1000);
	}
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		td_client_close(c);
		_exit(g.calls == 1 && g.status == -ECANCELED ? 0 : 1);
	}
	int st;
	pid_t w = waitpid(pid, &st, 0);
	cr_assert_eq(write(fds[1], "x", 1), 1);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(w, pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "the child's close told the waiting GET (status %#x)", st);
	cr_assert_eq(g.calls, 0, "nothing told in the parent");
	close(fds[0]);
	close(fds[1]);
	td_client_close(x.p);
	td_client_close(c);
	/* mappings not counted: the thread's stack and malloc arena stay */
	tu_daemon_stop(&x.d, false);
	cr_assert_eq(g.status, -ECANCELED);
}

/* (the test below and its helpers: not under TSan, see there) */
#ifndef __SANITIZE_THREAD__
static pid_t forked_in_cb;

static void fork_on_get(struct td_client *c, int status, struct td_tensor *t,
			const struct td_error *err, void *ud)
{
	(void)c, (void)status, (void)err, (void)ud;
	td_tensor_release(t);
	forked_in_cb = fork();
}

static void *close_client(void *arg)
{
	td_client_close(arg);
	return NULL;
}

/*
 * The other way round: the thread that forks is inside a callback, and
 * goes on in the child, where it gives its turn back when the callback
 * returns. The child's remade turns must leave that one to it: another
 * thread of the child then finds the turn free, and its close tells the
 * GET still waiting.
 *
 * Not built under ThreadSanitizer: the child starts a thread, and TSan
 * cannot follow a thread started in the child of a threaded fork() ("dup
 * thread with used id", its own limit, not a race; docs/reliability.md,
 * "Under ThreadSanitizer"). The plain and ASan runs run it.
 */
Test(loop, a_child_forked_inside_a_callback_gives_its_turn_back)
{
	struct pair x;
	pair_up(&x);
	struct td_client *c = x.c;
	struct got g = {0};
	put(x.p, "fk/c", 1);
	cr_assert_eq(td_client_get_newer_async(c, "fk/c", 0, -1, fork_on_get,
					       NULL, NULL), 0);
	cr_assert_eq(td_client_get_newer_async(c, "never", 0, -1, on_get, &g,
					       NULL), 0);
	forked_in_cb = -2;
	for (int i = 0; forked_in_cb == -2 && i < 100; i++) {
		if (readable(c, HANG_MS) > 0)
			(void)td_client_process(c, NULL);
	}
	if (forked_in_cb == 0) {
		pthread_t th;
		if (pthread_create(&th, NULL, close_client, c) != 0)
			_exit(2);
		pthread_join(th, NULL);
		_exit(g.calls == 1 && g.status == -ECANCELED ? 0 : 1);
	}
	cr_assert_gt(forked_in_cb, 0, "the callback forked");
	int st;
	cr_assert_eq(waitpid(forked_in_cb, &st, 0), forked_in_cb);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "the child's other thread told the waiting GET (status %#x)",
		  st);
	cr_assert_eq(g.calls, 0, "nothing told in the parent");
	pair_down(&x);
	cr_assert_eq(g.status, -ECANCELED);
}
#endif

/* ---- TD_CLIENT_RECONNECT in an event loop ---- */

/* What the fds registered in epoll fd epfd are: sockets, timerfds. */
static void epoll_kinds(int epfd, int *sockets, int *timers)
{
	char path[64], line[256];
	FILE *f;

	*sockets = *timers = 0;
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
	f = fopen(path, "r");
	cr_assert(f);
	while (fgets(line, sizeof(line), f)) {
		char lp[64], target[128];
		int fd;
		ssize_t n;

		if (sscanf(line, "tfd: %d", &fd) != 1)
			continue;
		snprintf(lp, sizeof(lp), "/proc/self/fd/%d", fd);
		n = readlink(lp, target, sizeof(target) - 1);
		cr_assert_gt(n, 0);
		target[n] = 0;
		*sockets += !strncmp(target, "socket:", 7);
		*timers += strstr(target, "timerfd") != NULL;
	}
	fclose(f);
}

/*
 * While the daemon is away, a failed reconnect takes the broken socket
 * out of td_client_fd()'s set (its hang-up kept the loop awake, so every
 * wake-up tried to connect: a busy loop) and a timer wakes the loop for
 * the next try; once the daemon is back, that timer alone brings the
 * reconnect.
 */
Test(loop, a_loop_waits_for_its_reconnects_on_a_timer)
{
	char link[64];
	struct tu_daemon d1, d2;
	struct td_client *c;
	struct td_error e = {0};
	struct td_event ev;
	int epfd, socks, timers, rc = -1;
	uint64_t wid;

	int fds0 = tu_fd_count();

	snprintf(link, sizeof(link), "/tmp/td-paced-%d.sock", (int)getpid());
	tu_daemon_start(&d1, "warn");
	tu_link_to(link, d1.sock);
	cr_assert_eq(td_client_connect_ex(link, TD_CLIENT_RECONNECT, &c, &e),
		     0, "%s", e.reason);
	cr_assert_eq(td_client_watch(c, "w/", TD_WATCH_PREFIX, &wid, NULL), 0);
	epfd = td_client_fd(c);
	cr_assert_geq(epfd, 0);
	epoll_kinds(epfd, &socks, &timers);
	cr_assert_eq(socks, 1);
	tu_daemon_kill(&d1);
	/* the hang-up, then a first try that fails */
	for (int i = 0; i < 2; i++) {
		struct pollfd pf = {.fd = epfd, .events = POLLIN};

		cr_assert_eq(poll(&pf, 1, HANG_MS), 1);
		cr_assert_lt(td_client_process(c, NULL), 0);
	}
	epoll_kinds(epfd, &socks, &timers);
	cr_assert_eq(socks, 0, "the broken socket still wakes the loop");
	cr_assert_eq(timers, 1);
	tu_daemon_start(&d2, "warn");
	tu_link_to(link, d2.sock);
	/* nothing but the timer can wake the loop now */
	for (int i = 0; i < 1000 && rc < 0; i++) {
		struct pollfd pf = {.fd = epfd, .events = POLLIN};

		cr_assert_eq(poll(&pf, 1, HANG_MS), 1, "no retry came");
		rc = td_client_process(c, NULL);
	}
	cr_assert_geq(rc, 0);
	cr_assert_eq(td_client_next_event(c, HANG_MS, &ev, NULL), 0);
	cr_assert_eq(ev.type, TD_EVENT_TYPE_RECONNECTED);
	epoll_kinds(epfd, &socks, &timers);
	cr_assert_eq(socks, 1, "the new connection is in the set");
	td_client_close(c);
	tu_daemon_kill(&d2);
	unlink(link);
	cr_assert_eq(tu_fd_count(), fds0, "the retry timer was closed too");
}

/* ---- TD_CLIENT_RECONNECT and watch ids ---- */

/*
 * An UNWATCH whose call is the one that reconnects names the watch by
 * the id the new daemon gave it, not the old daemon's: that id may be
 * another watch's there (the watches are made again in another order).
 */
Test(loop, unwatch_after_a_restart_ends_the_watch_it_names)
{
	char link[64];
	snprintf(link, sizeof(link), "/tmp/td-unwatch-%d.sock", (int)getpid());
	struct tu_daemon d1, d2;
	tu_daemon_start(&d1, "warn");
	tu_link_to(link, d1.sock);
	struct td_client *c, *p;
	struct td_error e = {0};
	uint64_t a, b, ids[4];
	cr_assert_eq(td_client_connect_ex(link, TD_CLIENT_RECONNECT, &c, &e),
		     0, "%s", e.reason);
	cr_assert_eq(td_client_watch(c, "ua", 0, &a, NULL), 0);
	cr_assert_eq(td_client_watch(c, "ub", 0, &b, NULL), 0);
	tu_daemon_kill(&d1);
	cr_assert_gt(readable(c, HANG_MS), 0, "hang-up polls readable");
	cr_assert_lt(td_client_process(c, NULL), 0, "the break is seen");
	tu_daemon_start(&d2, "warn");
	tu_link_to(link, d2.sock);
	cr_assert_eq(td_client_unwatch(c, a, &e), 0, "%s", e.reason);
	struct td_event ev;
	cr_assert_eq(td_client_next_event(c, 0, &ev, NULL), 0);
	cr_assert_eq(ev.type, TD_EVENT_TYPE_RECONNECTED);
	cr_assert_eq(td_client_connect(d2.sock, &p, &e), 0, "%s", e.reason);
	put(p, "ua", 1);
	cr_assert_eq(drain_events(c, NULL, ids, 4), 0, "ua is not watched");
	put(p, "ub", 1);
	cr_assert_eq(drain_events(c, "ub", ids, 4), 1, "ub still is");
	cr_assert_eq(ids[0], b);
	td_client_close(p);
	td_client_close(c);
	tu_daemon_kill(&d2);
	unlink(link);
}

/*
 * The reconnect is told also to a client whose bound of watch events is
 * full (td_client_set_event_limit): TD_EVENT_TYPE_RECONNECTED is no watch
 * event. It was dropped into the OVERFLOWED count, and the application
 * never learnt that its tensors, follows and rings were the old daemon's.
 * Outside the bound, one at most waits: reconnects that nobody takes
 * raise its count of watches to the latest, not the queue's length.
 */
Test(loop, a_full_event_queue_still_tells_the_reconnect)
{
	char link[64];
	snprintf(link, sizeof(link), "/tmp/td-fullre-%d.sock", (int)getpid());
	struct tu_daemon d1, d2;
	tu_daemon_start(&d1, "warn");
	tu_link_to(link, d1.sock);
	struct td_client *c, *p;
	struct td_error e = {0};
	struct td_entry ent;
	struct td_event ev;
	uint64_t w;
	cr_assert_eq(td_client_connect_ex(link, TD_CLIENT_RECONNECT, &c, &e),
		     0, "%s", e.reason);
	cr_assert_eq(td_client_set_event_limit(c, 2), 0);
	cr_assert_eq(td_client_watch(c, "f/", TD_WATCH_PREFIX, &w, NULL), 0);
	cr_assert_eq(td_client_connect(d1.sock, &p, &e), 0, "%s", e.reason);
	for (int i = 0; i < 4; i++)
		put(p, "f/a", (uint8_t)i);
	td_client_close(p);
	/* two events wait, two are counted dropped */
	cr_assert_eq(td_client_stat(c, "f/a", &ent, NULL), 0);
	td_entry_fini(&ent);
	for (int i = 0; i < 2; i++) {
		tu_daemon_kill(i ? &d2 : &d1);
		tu_daemon_start(&d2, "warn");
		tu_link_to(link, d2.sock);
		cr_assert_lt(td_client_stat(c, "f/a", &ent, NULL), 0);
		cr_assert_eq(td_client_stat(c, "f/a", &ent, &e), -ENOENT,
			     "%s", e.reason);
	}
	int types[8], n = 0;
	uint64_t recon = 0;
	while (n < 8 && td_client_next_event(c, 0, &ev, NULL) == 0) {
		types[n++] = (int)ev.type;
		if (ev.type == TD_EVENT_TYPE_RECONNECTED)
			recon = ev.version;
	}
	cr_assert_eq(n, 4, "2 events, their overflow, one reconnect: %d", n);
	cr_assert_eq(types[0], TD_EVENT_TYPE_PUBLISHED);
	cr_assert_eq(types[1], TD_EVENT_TYPE_PUBLISHED);
	cr_assert_eq(types[2], TD_EVENT_TYPE_OVERFLOWED);
	cr_assert_eq(types[3], TD_EVENT_TYPE_RECONNECTED);
	cr_assert_eq(recon, 1, "the one watch made again");
	td_client_close(c);
	tu_daemon_kill(&d2);
	unlink(link);
}

struct nest {
	struct td_client *p;
	int n;
	uint64_t versions[4];
};

static void nest_on_event(struct td_client *c, const struct td_event *ev,
			  void *ud)
{
	struct nest *k = ud;
	cr_assert_lt(k->n, 4);
	k->versions[k->n++] = ev->version;
	if (k->n > 1)
		return;
	/* a third version comes in; the handler processes again */
	put(k->p, "nest", 3);
	cr_assert_gt(readable(c, HANG_MS), 0);
	cr_assert_geq(td_client_process(c, NULL), 0);
}

/*
 * A handler that calls td_client_process() itself gets the events in
 * arrival order still: the nested call hands out the next queued event,
 * not one that came after the rest of the outer call's batch.
 */
Test(loop, a_nested_process_keeps_events_in_arrival_order)
{
	struct pair x;
	pair_up(&x);
	struct td_client *w = x.c, *p = x.p;
	struct nest k = {.p = p};
	uint64_t id;
	cr_assert_eq(td_client_watch(w, "nest", 0, &id, NULL), 0);
	cr_assert_eq(td_client_set_event_handler(w, nest_on_event, &k), 0);
	put(p, "nest", 1);
	put(p, "nest", 2);
	struct td_entry ent;
	cr_assert_eq(td_client_stat(w, "nest", &ent, NULL), 0);
	td_entry_fini(&ent);
	while (k.n < 3) {
		cr_assert_gt(readable(w, HANG_MS), 0);
		cr_assert_geq(td_client_process(w, NULL), 0);
	}
	for (int i = 0; i < 3; i++)
		cr_assert_eq(k.versions[i], (uint64_t)i + 1, "event %d: %lu", i,
			     (unsigned long)k.versions[i]);
	pair_down(&x);
}

struct tally {
	int calls, eagain, cancelled, other;
};

static void count_get(struct td_client *c, int status, struct td_tensor *t,
		      const struct td_error *err, void *ud)
{
	struct tally *k = ud;
	(void)c, (void)err;
	k->calls++;
	if (status == -EAGAIN)
		k->eagain++;
	else if (status == -ECANCELED)
		k->cancelled++;
	else
		k->other++;
	td_tensor_release(t);
}

/*
 * The daemon parks 256 GETs per connection; the 257th is refused with
 * the status tensord.h names, delivered to its callback, and the
 * connection stays. Closing then tells the 256 parked ones.
 */
Test(loop, the_257th_outstanding_get_is_refused_as_documented)
{
	struct tu_daemon d;
	tu_daemon_start(&d, "warn");
	int fds0 = tu_fd_count();
	struct td_client *c = tc_open(&d);
	struct tally k = {0};
	for (int i = 0; i < 257; i++)
		cr_assert_eq(td_client_get_newer_async(c, "never", 0, -1,
						       count_get, &k, NULL),
			     0);
	while (!k.calls) {
		cr_assert_gt(readable(c, HANG_MS), 0);
		cr_assert_geq(td_client_process(c, NULL), 0);
	}
	cr_assert_eq(k.eagain, 1, "-EAGAIN (tensord.h, protocol.md §4)");
	cr_assert_eq(k.other, 0);
	struct td_entry ent;
	cr_assert_eq(td_client_stat(c, "never", &ent, NULL), -ENOENT,
		     "the connection stays");
	td_client_close(c);
	cr_assert_eq(k.cancelled, 256);
	cr_assert_eq(tu_fd_count(), fds0);
	tu_daemon_stop(&d, true);
}

/*
 * A watcher that never reads is cut by the daemon once its outgoing
 * queue is over budget (protocol.md §4), without holding up the
 * publisher; it then reads the events that reached it, a gapless run
 * from the first, and -ECONNRESET, never a hang or a silent gap.
 */
Test(loop, a_watcher_that_never_reads_is_cut_and_told)
{
	struct pair x;
	pair_up(&x);
	struct td_client *w = x.c, *p = x.p;
	uint64_t id;
	cr_assert_eq(td_client_watch(w, "flood", 0, &id, NULL), 0);
	for (int i = 0; i < 3000; i++)
		put(p, "flood", (uint8_t)i);
	struct td_event ev;
	uint64_t n = 0;
	int rc;
	while ((rc = td_client_next_event(w, HANG_MS, &ev, NULL)) == 0) {
		cr_assert_eq(ev.version, ++n, "no gap");
		cr_assert_eq(ev.watch_id, id);
	}
	cr_assert_eq(rc, -ECONNRESET, "%d after %lu events", rc,
		     (unsigned long)n);
	cr_assert_lt(n, 3000);
	cr_assert_gt(n, 0);
	cr_assert_eq(td_client_process(w, NULL), -ECONNRESET);
	pair_down(&x);
}

/* ---- descriptors of follows and subscriptions ---- */

/*
 * td_follow_fd() polls readable for a version that was there before it
 * was made (a loop polls first, then calls td_follow_poll()). The
 * timerfds td_follow_fd() and td_sub_fd() make go with their follow or
 * subscription, whichever order the program ends things in: a follow
 * closed while its tensor is held, a subscription with a handler whose
 * client was closed first.
 */
Test(loop, a_follow_fd_is_armed_at_once_and_wake_fds_go_in_any_order)
{
	struct pair x;
	pair_up(&x);
	struct td_client *pc = x.p, *c = x.c;
	int fds0 = tu_fd_count();
	struct td_follow *f;
	struct td_tensor *t;
	struct td_error e = {0};
	put(pc, "lf", 1);
	cr_assert_eq(td_client_follow(c, "lf", &f, &e), 0, "%s", e.reason);
	int fd = td_follow_fd(f);
	cr_assert_geq(fd, 0, "%s", strerror(-fd));
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	cr_assert_eq(poll(&pf, 1, HANG_MS), 1);
	cr_assert_eq(td_follow_poll(f, &t, &e), 0, "%s", e.reason);
	td_follow_close(f);
	td_tensor_release(t);
	td_client_trim(c); /* the mapping cache keeps the plane's fd */
	cr_assert_eq(tu_fd_count(), fds0, "the follow's fds");

	struct td_client *c2 = tc_open(&x.d);
	uint64_t shape[1] = {8};
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = shape};
	struct td_ring *r;
	struct td_sub *s;
	struct views w = {0};
	cr_assert_eq(td_ring_create(pc, "loop/lfd", &desc, &r, NULL), 0);
	cr_assert_eq(td_ring_subscribe(c2, "loop/lfd", 0, &s, NULL), 0);
	cr_assert_eq(td_sub_set_handler(s, on_view, &w), 0);
	ring_put(r, 1);
	while (!w.calls) {
		cr_assert_gt(readable(c2, HANG_MS), 0);
		cr_assert_geq(td_client_process(c2, NULL), 0);
	}
	td_client_close(c2);
	td_sub_close(s);
	td_ring_close(r);
	cr_assert_eq(tu_fd_count(), fds0, "the subscription's fds");
	pair_down(&x);
}

struct subnest {
	struct td_client *c;
	int a_calls, b_calls;
};

static void b_closes_itself(struct td_sub *s, int status,
			    const struct td_view *v, void *ud)
{
	struct subnest *k = ud;
	(void)status, (void)v;
	k->b_calls++;
	td_sub_close(s);
}

static void a_processes_again(struct td_sub *s, int status,
			      const struct td_view *v, void *ud)
{
	struct subnest *k = ud;
	(void)s, (void)status, (void)v;
	if (k->a_calls++ == 0)
		cr_assert_geq(td_client_process(k->c, NULL), 0);
}

/*
 * A subscription's handler that processes again (nested) while another
 * subscription's handler closes its own subscription: the outer call
 * must not go on to the subscription closed under it.
 */
Test(loop, a_sub_closed_in_a_nested_process_is_not_touched_again)
{
	struct pair x;
	pair_up(&x);
	struct td_client *pc = x.p, *c = x.c;
	uint64_t shape[1] = {8};
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = shape};
	struct td_ring *ra, *rb;
	struct td_sub *sa, *sb;
	struct subnest k = {.c = c};
	cr_assert_eq(td_ring_create(pc, "loop/na", &desc, &ra, NULL), 0);
	cr_assert_eq(td_ring_create(pc, "loop/nb", &desc, &rb, NULL), 0);
	cr_assert_eq(td_ring_subscribe(c, "loop/na", 0, &sa, NULL), 0);
	cr_assert_eq(td_ring_subscribe(c, "loop/nb", 0, &sb, NULL), 0);
	/* the handler set last is called first */
	cr_assert_eq(td_sub_set_handler(sb, b_closes_itself, &k), 0);
	cr_assert_eq(td_sub_set_handler(sa, a_processes_again, &k), 0);
	ring_put(ra, 1);
	ring_put(rb, 2);
	while (!k.b_calls) {
		cr_assert_gt(readable(c, HANG_MS), 0);
		cr_assert_geq(td_client_process(c, NULL), 0);
	}
	cr_assert_eq(k.b_calls, 1);
	td_sub_close(sa);
	td_ring_close(ra);
	td_ring_close(rb);
	pair_down(&x);
}

/*
 * At most 16 readers of a ring wait by fd (protocol.md §12): the 17th
 * td_sub_fd() is -ENOBUFS and leaves no fd behind; a subscription that
 * ends makes room for another.
 */
Test(loop, the_17th_wake_fd_of_a_ring_is_refused_and_leaves_no_fd)
{
	struct pair x;
	pair_up(&x);
	struct td_client *pc = x.p, *c = x.c;
	uint64_t shape[1] = {8};
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = shape, .reader_count = 17};
	struct td_ring *r;
	struct td_sub *s[17];
	cr_assert_eq(td_ring_create(pc, "loop/w17", &desc, &r, NULL), 0);
	for (int i = 0; i < 17; i++)
		cr_assert_eq(td_ring_subscribe(c, "loop/w17", 0, &s[i], NULL),
			     0, "subscription %d", i);
	for (int i = 0; i < 16; i++)
		cr_assert_geq(td_sub_fd(s[i]), 0, "fd %d", i);
	int fds0 = tu_fd_count();
	cr_assert_eq(td_sub_fd(s[16]), -ENOBUFS);
	cr_assert_eq(tu_fd_count(), fds0);
	td_sub_close(s[0]);
	int fd = td_sub_fd(s[16]);
	cr_assert_geq(fd, 0, "room again: %d", fd);
	for (int i = 1; i < 17; i++)
		td_sub_close(s[i]);
	td_ring_close(r);
	pair_down(&x);
}

/*
 * Two threads running their own loop on one handle (c; p publishes):
 * a kind of callback (events, GETs, a ring's) sees one item at a time,
 * in the order they came, and the thread that finds the other making
 * them does not spin while it waits for its turn.
 */
struct duo_get;
struct duo {
	struct td_client *c, *p;
	atomic_int inside;    /* callbacks running now */
	atomic_int overlaps;  /* a callback began while another ran */
	atomic_int disorder;  /* an item not after the one before */
	atomic_int calls;     /* callbacks made */
	atomic_int stop;
	atomic_int idle_calls; /* process calls made while a callback ran */
	atomic_int hold_ms;   /* how long the first callback sleeps */
	atomic_uint_fast64_t last; /* the item the callbacks saw last */
	struct duo_get *gets; /* feed_get's GETs */
};

/*
 * A duo's callback, on item seq (its place in the order the work came,
 * 0 when none): the first holds hold_ms, the others yield a little (the
 * window another thread has).
 */
static void duo_call(struct duo *k, uint64_t seq)
{
	int hold;

	if (atomic_fetch_add(&k->inside, 1) != 0)
		atomic_fetch_add(&k->overlaps, 1);
	if (seq) {
		if (seq <= atomic_load(&k->last))
			atomic_fetch_add(&k->disorder, 1);
		atomic_store(&k->last, seq);
	}
	hold = atomic_exchange(&k->hold_ms, 0);
	if (hold)
		usleep((useconds_t)hold * 1000);
	else
		for (int i = 0; i < 4; i++)
			sched_yield();
	atomic_fetch_add(&k->calls, 1);
	atomic_fetch_sub(&k->inside, 1);
}

static void duo_on_event(struct td_client *c, const struct td_event *ev,
			 void *ud)
{
	(void)c;
	duo_call(ud, ev->type == TD_EVENT_TYPE_PUBLISHED ? ev->version : 0);
}

static void *duo_loop(void *arg)
{
	struct duo *k = arg;
	struct pollfd pfd = {.fd = td_client_fd(k->c), .events = POLLIN};

	while (!atomic_load(&k->stop)) {
		if (poll(&pfd, 1, 20) <= 0)
			continue;
		if (atomic_load(&k->inside))
			atomic_fetch_add(&k->idle_calls, 1);
		if (td_client_process(k->c, NULL) < 0)
			break;
	}
	return NULL;
}

/* pair_down() without the mapping count: glibc keeps the threads'
 * stacks (fds and buffer mappings are still checked) */
static void duo_down(struct pair *x)
{
	td_client_close(x->p);
	td_client_close(x->c);
	tu_daemon_stop(&x->d, false);
}

/* Until a callback of the duo runs. */
static void duo_wait_inside(struct duo *k)
{
	for (int ms = 0; !atomic_load(&k->inside) && ms < HANG_MS; ms++)
		usleep(1000);
	cr_assert(atomic_load(&k->inside), "the first callback came");
}

/* The duo's work item i: a version of "duo" for its watch. */
static void feed_event(struct duo *k, int i)
{
	put(k->p, "duo", (uint8_t)i);
}

/*
 * Two loops on k->c while feed makes n callbacks' worth of work; with
 * hold_ms, the rest is fed once the first callback holds it.
 */
static void duo_run(struct duo *k, void (*feed)(struct duo *k, int i), int n,
		    int hold_ms)
{
	pthread_t th[2];

	atomic_store(&k->hold_ms, hold_ms);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, duo_loop, k), 0);
	for (int i = 0; i < n; i++) {
		feed(k, i);
		if (i == 0 && hold_ms)
			duo_wait_inside(k);
	}
	for (int ms = 0; atomic_load(&k->calls) < n && ms < HANG_MS; ms++)
		usleep(1000);
	atomic_store(&k->stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(atomic_load(&k->calls), n, "callbacks made: %d of %d",
		     atomic_load(&k->calls), n);
}

/* duo_run of n events to the handler */
static void duo_events(struct duo *k, int n, int hold_ms)
{
	uint64_t id;

	cr_assert_eq(td_client_watch(k->c, "duo", 0, &id, NULL), 0);
	cr_assert_eq(td_client_set_event_handler(k->c, duo_on_event, k), 0);
	duo_run(k, feed_event, n, hold_ms);
}

/* An asynchronous GET of a duo: its place in the order asked, its
 * callback's calls and the status it was given last. */
struct duo_get {
	struct duo *k;
	uint64_t seq;
	atomic_int calls, status;
};

static void duo_on_get(struct td_client *c, int status, struct td_tensor *t,
		       const struct td_error *err, void *ud)
{
	struct duo_get *g = ud;
	(void)c, (void)err;
	td_tensor_release(t);
	atomic_store(&g->status, status);
	atomic_fetch_add(&g->calls, 1);
	duo_call(g->k, g->seq);
}

/* The duo's work item i: a GET of "duo", answered at once. */
static void feed_get(struct duo *k, int i)
{
	struct duo_get *g = &k->gets[i];
	struct td_error e = {0};

	g->k = k;
	g->seq = (uint64_t)i + 1;
	cr_assert_eq(td_client_get_newer_async(k->c, "duo", 0, 0, duo_on_get,
					       g, &e),
		     0, "%s", e.reason);
}

/* duo_run of n GETs, each of whose callbacks is made once */
static void duo_gets(struct duo *k, int n, int hold_ms)
{
	k->gets = calloc((size_t)n, sizeof(*k->gets));
	cr_assert(k->gets);
	put(k->p, "duo", 1);
	duo_run(k, feed_get, n, hold_ms);
	for (int i = 0; i < n; i++) {
		cr_assert_eq(atomic_load(&k->gets[i].calls), 1,
			     "GET %d: %d calls", i,
			     atomic_load(&k->gets[i].calls));
		cr_assert_eq(atomic_load(&k->gets[i].status), 0);
	}
	free(k->gets);
}

/*
 * A duo of n items made by run, the first held hold_ms: one callback at
 * a time, in order, and with a hold the other loop does not spin.
 */
static void duo_test(void (*run)(struct duo *k, int n, int hold_ms), int n,
		     int hold_ms)
{
	struct pair x;
	pair_up(&x);
	struct duo k = {.c = x.c, .p = x.p};
	run(&k, n, hold_ms);
	cr_assert_eq(atomic_load(&k.overlaps), 0,
		     "two callbacks ran at once %d times",
		     atomic_load(&k.overlaps));
	cr_assert_eq(atomic_load(&k.disorder), 0,
		     "%d callbacks came after a later one's",
		     atomic_load(&k.disorder));
	if (hold_ms)
		cr_assert_leq(atomic_load(&k.idle_calls), 20,
			      "%d calls of td_client_process() while a "
			      "callback ran",
			      atomic_load(&k.idle_calls));
	duo_down(&x);
}

Test(loop, two_threads_processing_deliver_one_event_at_a_time_in_order)
{
	duo_test(duo_events, 300, 0);
}

/*
 * While one thread's handler holds the first event (300 ms), the other
 * thread's loop sleeps: td_client_fd() is quiet for the queue the first
 * thread is delivering. A loop that woke for it would call
 * td_client_process() tens of thousands of times meanwhile; the bound
 * below allows a wake-up per event that arrives.
 */
Test(loop, a_thread_waiting_for_anothers_handler_does_not_spin)
{
	duo_test(duo_events, 3, 300);
}

/* A ring subscription's handler on a duo. */
static void ring_duo_on_view(struct td_sub *s, int status,
			     const struct td_view *v, void *ud)
{
	(void)s;
	duo_call(ud, status == 0 ? v->version : 0);
}

/*
 * The same for a ring subscription's handler: while one thread's
 * handler holds a view, versions published meanwhile do not make the
 * other thread's loop spin (the walk under way is that thread's), and
 * the latest of them reaches the handler once it is done.
 */
Test(loop, a_thread_waiting_for_anothers_ring_handler_does_not_spin)
{
	struct pair x;
	pair_up(&x);
	uint64_t shape[1] = {64};
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = shape};
	struct td_ring *r;
	struct td_sub *s;
	struct duo k = {.c = x.c};
	pthread_t th[2];
	cr_assert_eq(td_ring_create(x.p, "duo/ring", &desc, &r, NULL), 0);
	cr_assert_eq(td_ring_subscribe(x.c, "duo/ring", 0, &s, NULL), 0);
	atomic_store(&k.hold_ms, 300);
	cr_assert_eq(td_sub_set_handler(s, ring_duo_on_view, &k), 0);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, duo_loop, &k), 0);
	ring_put(r, 1);
	duo_wait_inside(&k);
	for (int i = 2; i <= 4; i++)
		ring_put(r, (uint8_t)i);
	for (int ms = 0; atomic_load(&k.last) < 4 && ms < HANG_MS; ms++)
		usleep(1000);
	atomic_store(&k.stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(atomic_load(&k.last), 4, "the latest version came");
	cr_assert_leq(atomic_load(&k.idle_calls), 20,
		      "%d calls of td_client_process() while a handler ran",
		      atomic_load(&k.idle_calls));
	cr_assert_eq(atomic_load(&k.overlaps), 0);
	td_sub_close(s);
	td_ring_close(r);
	duo_down(&x);
}

/*
 * Asynchronous GETs' callbacks likewise: two threads looping on one
 * handle make them one at a time, in the order the replies came, and
 * each once.
 */
Test(loop, two_threads_processing_run_one_get_callback_at_a_time_in_order)
{
	duo_test(duo_gets, 300, 0);
}

/*
 * While one thread's GET callback runs (300 ms), replies that come for
 * others are left to it: the other thread's loop neither calls them nor
 * spins on td_client_fd() meanwhile.
 */
Test(loop, a_thread_waiting_for_anothers_get_callback_does_not_spin)
{
	duo_test(duo_gets, 4, 300);
}

struct get_nest {
	int calls, inner, depth, nested_rc;
};

static void nest_on_get(struct td_client *c, int status, struct td_tensor *t,
			const struct td_error *err, void *ud)
{
	struct get_nest *k = ud;
	(void)err;
	cr_assert_eq(status, 0);
	td_tensor_release(t);
	k->calls++;
	if (k->depth) {
		k->inner++;
		return;
	}
	k->depth++;
	k->nested_rc = td_client_process(c, NULL);
	k->depth--;
}

/*
 * A GET callback that calls td_client_process() itself, in its own
 * thread, gets the next finished GET's callback there: the turn that
 * keeps other threads out does not keep it waiting for itself.
 */
Test(loop, a_get_callback_that_processes_again_gets_the_next_one)
{
	struct tu_daemon d;
	tu_daemon_start(&d, "warn");
	struct td_client *c = tc_open(&d);
	struct get_nest k = {0};
	put(c, "gn", 1);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(td_client_get_newer_async(c, "gn", 0, 0,
						       nest_on_get, &k, NULL),
			     0);
	/* both replies precede this STAT's and are read aside */
	struct td_entry ent;
	cr_assert_eq(td_client_stat(c, "gn", &ent, NULL), 0);
	td_entry_fini(&ent);
	cr_assert_eq(td_client_process(c, NULL), 1);
	cr_assert_eq(k.calls, 2);
	cr_assert_eq(k.inner, 1, "the second came inside the first");
	cr_assert_eq(k.nested_rc, 1);
	cr_assert_eq(readable(c, 0), 0);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}
