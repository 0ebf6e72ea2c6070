/* SPDX-License-Identifier: MIT */
/*
 * libtensord used by threads (and signals) the way a careless program
 * would, each test aimed at a descriptor NUMBER the library could use
 * after it was closed and taken by another open: the number a request
 * names for the daemon to pull after a signal abandoned that request,
 * and the timerfd of a subscription that another thread closes while a
 * td_client_process() walks the ring handlers. Each test plants a file
 * of its own at the number and checks that it is left alone.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <tensord/ring.h>
#include <tensord/tensord.h>

#include "testclient.h"
#include "testutil.h"

TestSuite(mt_hostile, .timeout = TU_TEST_TIMEOUT_S);

/* Hang guards only: nothing about speed is asserted. */
#define HANG_MS 20000

/* A memfd of n bytes, each b, written without a mapping, sealed as
 * PUBLISH asks (F_SEAL_SHRINK, F_SEAL_GROW). */
static int memfd_of(const char *name, size_t n, uint8_t b)
{
	uint8_t buf[4096];
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);

	cr_assert_geq(fd, 0);
	cr_assert_leq(n, sizeof(buf));
	memset(buf, b, n);
	cr_assert_eq(pwrite(fd, buf, n, 0), (ssize_t)n);
	/* what PUBLISH asks of a caller's memfd */
	cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	return fd;
}

/* ---- a PUBLISH abandoned to a signal (td_client_set_interrupt) ---- */

static int say_yes(void *ud)
{
	atomic_fetch_add((atomic_int *)ud, 1);
	return 1;
}

static void on_alarm(int sig)
{
	(void)sig;
}

/*
 * The daemon is stopped (SIGSTOP) with a PUBLISH of the caller's own
 * memfd in its socket; a signal abandons the wait (-EINTR), and the
 * caller closes the memfd, as it may: the call is over. Another file
 * takes the number. The daemon, resumed, still reads the queued request
 * before the hang-up: on the pidfd path it would pull that number then,
 * getting the other file, and publish bytes the caller never published
 * under that name. What it publishes, if anything, is the memfd that was
 * named when the call was made.
 */
Test(mt_hostile, a_publish_abandoned_to_a_signal_never_pulls_a_reused_fd)
{
	struct sigaction sa = {.sa_handler = on_alarm}, old;
	struct itimerval it = {.it_interval = {0, 50000},
			       .it_value = {0, 50000}}, off = {0};
	struct td_client_info info;
	struct tu_daemon d;
	struct td_client *c, *o;
	struct td_tensor *held, *t;
	struct td_entry ent = {0};
	struct td_error e = {0};
	uint64_t shape = 64;
	struct td_publish p = {.name = "mh/pub", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = &shape, .fd_count = 1};
	struct td_publish q = {.name = "mh/lease", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = &shape};
	uint8_t b[64] = {0};
	atomic_int asked = 0;
	int a, other, rc;

	tu_daemon_start(&d, "warn");
	c = tc_open(&d);
	o = tc_open(&d);
	cr_assert_eq(td_client_info(c, &info), 0);
	if (info.path_in != TD_CLIENT_PATH_PIDFD) {
		td_client_close(c);
		td_client_close(o);
		tu_daemon_stop(&d, false);
		cr_skip_test("the daemon cannot pull fds here (pidfd_getfd "
			     "refused): nothing is named by number");
	}
	/* a lease of c's, whose end tells that the daemon read c's end */
	cr_assert_eq(td_client_put(o, &q, b, sizeof(b), NULL, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_client_get(c, "mh/lease", &held, &e), 0, "%s",
		     e.reason);

	a = memfd_of("mh-mine", 64, 'A');
	p.fds = &a;
	cr_assert_eq(td_client_set_interrupt(c, say_yes, &asked), 0);
	sigemptyset(&sa.sa_mask); /* no SA_RESTART: the wait sees EINTR */
	cr_assert_eq(sigaction(SIGALRM, &sa, &old), 0);
	cr_assert_eq(kill(d.pid, SIGSTOP), 0);
	cr_assert_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	rc = td_client_publish(c, &p, NULL, &e);
	setitimer(ITIMER_REAL, &off, NULL);
	sigaction(SIGALRM, &old, NULL);
	cr_assert_eq(rc, -EINTR, "publish: %d %s", rc, e.reason);
	cr_assert_geq(atomic_load(&asked), 1);

	/* the call is over: the caller's number goes to another file */
	close(a);
	other = memfd_of("mh-other", 64, 'B');
	if (other != a) {
		cr_assert_eq(dup2(other, a), a);
		close(other);
	}

	cr_assert_eq(kill(d.pid, SIGCONT), 0);
	/* the request came before the hang-up: once the lease is gone, the
	 * daemon has handled it */
	for (int i = 0; i < HANG_MS / 10; i++) {
		cr_assert_eq(td_client_stat(o, "mh/lease", &ent, &e), 0, "%s",
			     e.reason);
		if (!ent.lease_count)
			break;
		td_entry_fini(&ent);
		usleep(10000);
	}
	cr_assert_eq(ent.lease_count, 0, "c's end was never read");
	td_entry_fini(&ent);

	rc = td_client_get(o, "mh/pub", &t, &e);
	if (rc == 0) {
		const uint8_t *x = td_tensor_plane_data(t, 0);

		cr_assert_eq(td_tensor_plane_size(t, 0), 64);
		cr_expect_eq(x[0], 'A', "the daemon published the file that "
			     "took the number after the call (byte %c), not "
			     "the one the call named",
			     x[0]);
		td_tensor_release(t);
	} else {
		cr_assert_eq(rc, -ENOENT, "get: %s", e.reason);
	}
	close(a);
	td_tensor_release(held);
	td_client_close(c);
	td_client_close(o);
	tu_daemon_stop(&d, false);
}

/* ---- a subscription closed while another thread walks handlers ---- */

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool in_handler; /* the first handler runs (the walk is under way) */
	bool closed;     /* the other thread's td_sub_close() returned */
	atomic_int calls[2];
} walk = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false,
	  false, {0, 0}};

/* How long the first handler waits for the close to return: with the
 * close waiting for the walk it never does (a hang guard). */
#define CLOSE_GUARD_S 3

static void first_handler(struct td_sub *s, int status,
			  const struct td_view *v, void *ud)
{
	struct timespec by;

	(void)s;
	(void)status;
	(void)v;
	(void)ud;
	if (atomic_fetch_add(&walk.calls[0], 1))
		return;
	clock_gettime(CLOCK_REALTIME, &by);
	by.tv_sec += CLOSE_GUARD_S;
	pthread_mutex_lock(&walk.mu);
	walk.in_handler = true;
	pthread_cond_broadcast(&walk.cv);
	while (!walk.closed &&
	       pthread_cond_timedwait(&walk.cv, &walk.mu, &by) == 0)
		;
	pthread_mutex_unlock(&walk.mu);
}

static void second_handler(struct td_sub *s, int status,
			   const struct td_view *v, void *ud)
{
	(void)s;
	(void)status;
	(void)v;
	(void)ud;
	atomic_fetch_add(&walk.calls[1], 1);
}

static void *process_once(void *arg)
{
	struct td_client *c = arg;

	(void)td_client_process(c, NULL);
	return NULL;
}

/*
 * Two subscriptions of one client with handlers; one thread's
 * td_client_process() is inside the first one's handler, the walk's
 * next stop being the second subscription, when another thread closes
 * that one and an eventfd of its own (count 5) takes the number of its
 * timerfd. The walk must neither touch the freed subscription nor read
 * the eventfd: td_sub_close() waits for the walk to be over.
 */
Test(mt_hostile, closing_a_subscription_while_another_thread_walks_them)
{
	struct tu_daemon d;
	struct td_client *c, *pc;
	struct td_ring *r;
	struct td_sub *s1, *s2;
	struct td_error e = {0};
	struct td_slot slot;
	uint64_t size = 64, v, n = 0;
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = &size};
	pthread_t th;
	int fd2, ev, rc;

	tu_daemon_start(&d, "warn");
	c = tc_open(&d);
	pc = tc_open(&d);
	cr_assert_eq(td_ring_create(pc, "mh/ring", &desc, &r, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_ring_subscribe(c, "mh/ring", HANG_MS, &s1, &e), 0,
		     "%s", e.reason);
	cr_assert_eq(td_ring_subscribe(c, "mh/ring", HANG_MS, &s2, &e), 0,
		     "%s", e.reason);
	/* this daemon serves RING_WAKE: -EOPNOTSUPP would be a failure */
	rc = td_sub_set_handler(s2, second_handler, NULL);
	cr_assert_eq(rc, 0, "set a handler: %s", strerror(-rc));
	/* the walk goes from the newest handler: s1, then s2 */
	cr_assert_eq(td_sub_set_handler(s1, first_handler, NULL), 0);
	fd2 = td_sub_fd(s2);
	cr_assert_geq(fd2, 0);
	cr_assert_eq(td_ring_acquire(r, HANG_MS, &slot), 0);
	memset(slot.planes[0], 7, size);
	cr_assert_eq(td_ring_publish(r, &v), 0);

	cr_assert_eq(pthread_create(&th, NULL, process_once, c), 0);
	pthread_mutex_lock(&walk.mu);
	while (!walk.in_handler)
		pthread_cond_wait(&walk.cv, &walk.mu);
	pthread_mutex_unlock(&walk.mu);

	td_sub_close(s2);
	/* the number is free now: an eventfd of ours takes it */
	ev = eventfd(5, EFD_CLOEXEC | EFD_NONBLOCK);
	cr_assert_geq(ev, 0);
	if (ev != fd2) {
		cr_assert_eq(dup2(ev, fd2), fd2);
		close(ev);
	}
	pthread_mutex_lock(&walk.mu);
	walk.closed = true;
	pthread_cond_broadcast(&walk.cv);
	pthread_mutex_unlock(&walk.mu);
	pthread_join(th, NULL);

	cr_expect_eq(read(fd2, &n, sizeof(n)), (ssize_t)sizeof(n),
		     "the walk read the eventfd that took a closed "
		     "subscription's timerfd number");
	cr_expect_eq(n, 5);
	cr_assert_eq(atomic_load(&walk.calls[0]), 1);
	close(fd2);
	td_sub_close(s1);
	td_ring_close(r);
	td_client_close(c);
	td_client_close(pc);
	tu_daemon_stop(&d, false);
}

/* ---- every kind of use at once on one shared client ---- */

#define MIX_ROUNDS 40

static atomic_bool mix_stop;
static atomic_int mix_gets, mix_views;

/* A tensor one thread got, released by whichever thread comes next. */
static struct {
	pthread_mutex_t mu;
	struct td_tensor *t;
} hand = {PTHREAD_MUTEX_INITIALIZER, NULL};

static void hand_over(struct td_tensor *t)
{
	struct td_tensor *old;

	pthread_mutex_lock(&hand.mu);
	old = hand.t;
	hand.t = t;
	pthread_mutex_unlock(&hand.mu);
	td_tensor_release(old);
}

static void on_get(struct td_client *c, int status, struct td_tensor *t,
		   const struct td_error *err, void *ud)
{
	(void)c;
	(void)err;
	(void)ud;
	if (status == 0) {
		atomic_fetch_add(&mix_gets, 1);
		hand_over(t);
	}
}

static void on_view(struct td_sub *s, int status, const struct td_view *v,
		    void *ud)
{
	(void)s;
	(void)v;
	(void)ud;
	if (status == 0)
		atomic_fetch_add(&mix_views, 1);
}

/* td_client_process() with asynchronous GETs, until told to stop. */
static void *mix_loop(void *arg)
{
	struct td_client *c = arg;
	struct pollfd p = {.fd = td_client_fd(c), .events = POLLIN};

	while (!atomic_load(&mix_stop)) {
		(void)td_client_get_newer_async(c, "mh/t", 0, 20, on_get,
						NULL, NULL);
		(void)poll(&p, 1, 10);
		(void)td_client_process(c, NULL);
	}
	return NULL;
}

/* Subscriptions made, given handlers and closed, round after round. */
static void *mix_subs(void *arg)
{
	struct td_client *c = arg;

	for (int k = 0; k < MIX_ROUNDS; k++) {
		struct td_sub *s[2] = {NULL, NULL};

		for (int i = 0; i < 2; i++) {
			if (td_ring_subscribe(c, "mh/mix", HANG_MS, &s[i],
					      NULL) < 0)
				continue;
			(void)td_sub_set_handler(s[i], on_view, NULL);
		}
		(void)td_client_process(c, NULL);
		if (k & 1)
			(void)td_sub_set_handler(s[0], NULL, NULL);
		td_sub_close(s[k & 1]);
		td_sub_close(s[!(k & 1)]);
	}
	return NULL;
}

/* Puts, gets and follows on the shared client; tensors handed over. */
static void *mix_calls(void *arg)
{
	struct td_client *c = arg;
	uint64_t shape = 256, v = 0;
	uint8_t b[256];
	struct td_publish p = {.name = "mh/t", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = &shape};

	for (int k = 0; k < MIX_ROUNDS; k++) {
		struct td_follow *f = NULL;
		struct td_tensor *t = NULL;
		uint64_t w;

		memset(b, k, sizeof(b));
		(void)td_client_put(c, &p, b, sizeof(b), &v, NULL);
		if (td_client_get(c, "mh/t", &t, NULL) == 0)
			hand_over(t);
		if (td_client_get_newer(c, "mh/t", 0, 0, &t, NULL) == 0)
			hand_over(t);
		if (td_client_watch(c, "mh/", TD_WATCH_PREFIX, &w, NULL) == 0)
			(void)td_client_unwatch(c, w, NULL);
		if (td_client_follow(c, "mh/t", &f, NULL) == 0) {
			if (td_follow_next(f, 0, &t, NULL) == 0)
				hand_over(t);
			td_follow_close(f);
		}
	}
	return NULL;
}

static void *mix_ring(void *arg)
{
	struct td_ring *r = arg;
	struct td_slot slot;

	while (!atomic_load(&mix_stop)) {
		if (td_ring_acquire(r, 10, &slot) == 0)
			(void)td_ring_publish(r, NULL);
		usleep(1000);
	}
	return NULL;
}

/*
 * One client shared by an event loop (asynchronous GETs, ring handlers),
 * a thread that subscribes, sets handlers and closes, and one that puts,
 * gets, watches and follows; tensors are released by whichever thread
 * comes next. Under ThreadSanitizer a race fails it; everywhere, every
 * descriptor and buffer mapping is back where it was once all is closed
 * (tu_daemon_stop checks).
 */
Test(mt_hostile, one_client_shared_by_a_loop_and_every_kind_of_call)
{
	struct tu_daemon d;
	struct td_client *c, *pc;
	struct td_ring *r;
	struct td_error e = {0};
	uint64_t size = 64;
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = &size, .reader_count = 8};
	pthread_t loop, subs, calls, ring;

	tu_daemon_start(&d, "warn");
	c = tc_open(&d);
	pc = tc_open(&d);
	cr_assert_eq(td_ring_create(pc, "mh/mix", &desc, &r, &e), 0, "%s",
		     e.reason);
	atomic_store(&mix_stop, false);
	cr_assert_eq(pthread_create(&ring, NULL, mix_ring, r), 0);
	cr_assert_eq(pthread_create(&loop, NULL, mix_loop, c), 0);
	cr_assert_eq(pthread_create(&subs, NULL, mix_subs, c), 0);
	cr_assert_eq(pthread_create(&calls, NULL, mix_calls, c), 0);
	pthread_join(subs, NULL);
	pthread_join(calls, NULL);
	atomic_store(&mix_stop, true);
	pthread_join(loop, NULL);
	pthread_join(ring, NULL);
	hand_over(NULL);
	td_client_close(c); /* with GETs outstanding: cancelled, told */
	td_ring_close(r);
	td_client_close(pc);
	cr_assert_gt(atomic_load(&mix_views) + atomic_load(&mix_gets), 0);
	/* fds and buffer mappings (the threads' cached stacks and malloc
	 * arenas stay mapped) */
	tu_daemon_stop(&d, false);
}

/* ---- what a closed client leaves, let go by other threads ---- */

#define LEFT 6

struct left {
	struct td_tensor *t[LEFT];
	struct td_alloc *a[LEFT];
	struct td_follow *f;
	struct td_sub *s;
	int half;
};

static void *let_go(void *arg)
{
	struct left *l = arg;

	for (int i = l->half; i < LEFT; i += 2) {
		td_tensor_release(l->t[i]);
		td_alloc_free(l->a[i]);
	}
	if (l->half) {
		td_follow_close(l->f);
		td_sub_close(l->s);
	}
	return NULL;
}

/*
 * Tensors (one held by a follow), loans plain and recyclable, a follow
 * and a subscription outlive td_client_close(), and two other threads
 * let them go at once: nothing is used after it is freed (ASan), and
 * every descriptor and buffer mapping of the client is gone after.
 */
Test(mt_hostile, what_a_closed_client_leaves_is_let_go_by_other_threads)
{
	struct tu_daemon d;
	struct td_client *c, *pc;
	struct td_ring *r;
	struct td_error e = {0};
	struct left l = {0}, l2;
	uint64_t shape = 4096, size = 64;
	uint8_t b[4096] = {1};
	struct td_publish p = {.name = "mh/left", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = &shape};
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = &size};
	pthread_t th[2];

	tu_daemon_start(&d, "warn");
	c = tc_open(&d);
	pc = tc_open(&d);
	cr_assert_eq(td_ring_create(pc, "mh/lring", &desc, &r, &e), 0, "%s",
		     e.reason);
	for (int i = 0; i < LEFT; i++) {
		b[0] = (uint8_t)i;
		cr_assert_eq(td_client_put(pc, &p, b, sizeof(b), NULL, &e), 0,
			     "%s", e.reason);
		cr_assert_eq(td_client_get(c, "mh/left", &l.t[i], &e), 0, "%s",
			     e.reason);
		cr_assert_eq(td_client_alloc_named(c, NULL, 1, &shape,
						   i & 1 ? TD_ALLOC_RECYCLE : 0,
						   &l.a[i], &e),
			     0, "%s", e.reason);
	}
	cr_assert_eq(td_client_follow(c, "mh/left", &l.f, &e), 0, "%s",
		     e.reason);
	td_tensor_release(l.t[0]);
	cr_assert_eq(td_follow_next(l.f, HANG_MS, &l.t[0], &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_ring_subscribe(c, "mh/lring", HANG_MS, &l.s, &e), 0,
		     "%s", e.reason);
	cr_assert_geq(td_sub_fd(l.s), 0);

	td_client_close(c);
	l2 = l;
	l2.half = 1;
	cr_assert_eq(pthread_create(&th[0], NULL, let_go, &l), 0);
	cr_assert_eq(pthread_create(&th[1], NULL, let_go, &l2), 0);
	pthread_join(th[0], NULL);
	pthread_join(th[1], NULL);
	td_ring_close(r);
	td_client_close(pc);
	tu_daemon_stop(&d, false); /* fds and buffer mappings */
}
