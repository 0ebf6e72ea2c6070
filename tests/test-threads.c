/* SPDX-License-Identifier: MIT */
/*
 * What tensord.h and ring.h promise about threads, exercised at once:
 * one td_client shared by threads making every kind of call (put,
 * alloc/publish, get, get_newer, follow, stat, list, watch, events),
 * tensors released by another thread than the one that got them, a
 * ring whose producer, subscribers and catalog calls share one client,
 * a fence signalled by another thread while the producer waits for a
 * slot, and a client closed by another thread while its ring's producer
 * waits in td_ring_acquire(). Each test checks the bytes it reads (a
 * torn or foreign tensor fails it); built with -Db_sanitize=thread the
 * suite is the data-race check of libtensord (docs/reliability.md,
 * "Under ThreadSanitizer").
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <tensord/ring.h>
#include <tensord/tensord.h>

#include "testclient.h"
#include "testutil.h"

TestSuite(threads, .timeout = TU_TEST_TIMEOUT_S);

#define THREADS 4
#define ROUNDS 60
#define BYTES 512
/* Hang guard only: nothing about speed is asserted. */
#define HANG_MS 20000

/* Every byte of p[0..n) is b. */
static bool uniform(const void *p, size_t n, uint8_t b)
{
	const uint8_t *q = p;

	for (size_t i = 0; i < n; i++)
		if (q[i] != b)
			return false;
	return true;
}

/* The byte round k of thread i writes. */
static uint8_t fill_of(int i, int k)
{
	return (uint8_t)(1 + i * 61 + k * 7);
}

/*
 * Tensors handed between the threads: each one a thread got is
 * released by whichever thread takes it next ("used and released from
 * any thread").
 */
static struct {
	pthread_mutex_t mu;
	struct td_tensor *t[THREADS * 4];
	unsigned n;
} pool = {PTHREAD_MUTEX_INITIALIZER, {0}, 0};

static void pool_swap(struct td_tensor *t)
{
	struct td_tensor *old = NULL;

	pthread_mutex_lock(&pool.mu);
	if (pool.n == sizeof(pool.t) / sizeof(pool.t[0]))
		old = pool.t[--pool.n];
	else if (pool.n && (pool.n & 1))
		old = pool.t[--pool.n];
	if (t)
		pool.t[pool.n++] = t;
	pthread_mutex_unlock(&pool.mu);
	td_tensor_release(old);
}

static void pool_drain(void)
{
	while (pool.n)
		td_tensor_release(pool.t[--pool.n]);
}

struct mixed {
	struct td_client *c;
	int i;
	char fail[1280];
};

/* The first failure a thread saw, into buf (threads share some). */
static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;
#define FAIL(m, ...)                                                       \
	do {                                                               \
		pthread_mutex_lock(&fail_mu);                              \
		if (!(m)->fail[0])                                         \
			snprintf((m)->fail, sizeof((m)->fail),             \
				 __VA_ARGS__);                             \
		pthread_mutex_unlock(&fail_mu);                            \
		return NULL;                                               \
	} while (0)

static bool failed(const char *fail)
{
	bool f;

	pthread_mutex_lock(&fail_mu);
	f = fail[0] != 0;
	pthread_mutex_unlock(&fail_mu);
	return f;
}

static int put_round(struct td_client *c, const char *name, int i, int k,
		     struct td_error *e)
{
	uint64_t shape[1] = {BYTES};
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape};
	uint8_t buf[BYTES];
	struct td_alloc *a;
	int rc;

	if (k % 2 == 0) {
		memset(buf, fill_of(i, k), sizeof(buf));
		return td_client_put(c, &p, buf, sizeof(buf), NULL, e);
	}
	/* a stream loan of the name: recycled buffers, lent loans */
	rc = td_client_alloc_named(c, name, 1, (uint64_t[]){BYTES},
				   TD_ALLOC_STREAM, &a, e);
	if (rc)
		return rc;
	memset(td_alloc_data(a, 0), fill_of(i, k), BYTES);
	return td_client_publish_alloc(c, a, &p, NULL, e);
}

/* A tensor of thread j's name: BYTES bytes, all one of j's fills. */
static bool plausible(const struct td_tensor *t, int j)
{
	const uint8_t *d = td_tensor_plane_data(t, 0);

	if (td_tensor_plane_size(t, 0) != BYTES || !d)
		return false;
	for (int k = 0; k < ROUNDS; k++)
		if (d[0] == fill_of(j, k))
			return uniform(d, BYTES, d[0]);
	return false;
}

static void *mixed_main(void *arg)
{
	struct mixed *m = arg;
	char own[32], other[32];
	int j = (m->i + 1) % THREADS;
	struct td_follow *f = NULL;
	uint64_t last = 0, wid = 0;
	int rc;

	snprintf(own, sizeof(own), "mt/%d", m->i);
	snprintf(other, sizeof(other), "mt/%d", j);
	for (int k = 0; k < ROUNDS; k++) {
		struct td_error e = {0};
		struct td_tensor *t = NULL;
		struct td_entry ent = {0}, *list = NULL;
		struct td_event ev;
		size_t n = 0;

		if ((rc = put_round(m->c, own, m->i, k, &e)))
			FAIL(m, "put %s round %d: %d %s", own, k, rc, e.reason);
		rc = td_client_get(m->c, other, &t, &e);
		if (rc == 0 && !plausible(t, j))
			FAIL(m, "get %s: foreign bytes", other);
		if (rc && rc != -ENOENT)
			FAIL(m, "get %s: %d %s", other, rc, e.reason);
		pool_swap(t);
		/* a name asked for again: get_newer rides a follow */
		t = NULL;
		rc = td_client_get_newer(m->c, other, last, 0, &t, &e);
		if (rc == 0) {
			if (!plausible(t, j) || td_tensor_version(t) <= last)
				FAIL(m, "get_newer %s: wrong tensor", other);
			last = td_tensor_version(t);
			pool_swap(t);
		} else if (rc != -ETIMEDOUT && rc != -ENOENT &&
			   rc != -EAGAIN) {
			FAIL(m, "get_newer %s: %d %s", other, rc, e.reason);
		}
		if (!f && (rc = td_client_follow(m->c, other, &f, &e)))
			FAIL(m, "follow %s: %d %s", other, rc, e.reason);
		t = NULL;
		rc = td_follow_next(f, 0, &t, &e);
		if (rc == 0 && !plausible(t, j))
			FAIL(m, "follow %s: foreign bytes", other);
		if (rc && rc != -EAGAIN && rc != -ETIMEDOUT)
			FAIL(m, "follow_next %s: %d %s", other, rc, e.reason);
		/* the follow's tensor goes back before its next call */
		td_tensor_release(t);
		if ((rc = td_client_stat(m->c, own, &ent, &e)))
			FAIL(m, "stat %s: %d %s", own, rc, e.reason);
		td_entry_fini(&ent);
		if ((rc = td_client_list(m->c, "mt/", &list, &n, &e)))
			FAIL(m, "list: %d %s", rc, e.reason);
		td_entry_list_free(list, n);
		if (k % 8 == 0) {
			if (wid && (rc = td_client_unwatch(m->c, wid, &e)))
				FAIL(m, "unwatch: %d %s", rc, e.reason);
			if ((rc = td_client_watch(m->c, own, 0, &wid, &e)))
				FAIL(m, "watch: %d %s", rc, e.reason);
		}
		rc = td_client_next_event(m->c, 0, &ev, &e);
		if (rc && rc != -ETIMEDOUT)
			FAIL(m, "next_event: %d %s", rc, e.reason);
	}
	td_follow_close(f);
	return NULL;
}

Test(threads, one_client_shared_by_threads_making_every_kind_of_call)
{
	struct mixed m[THREADS];
	pthread_t tid[THREADS];
	struct td_client *c;
	struct tu_daemon d;

	tu_daemon_start(&d, "warn");
	c = tc_open(&d);
	for (int i = 0; i < THREADS; i++) {
		m[i] = (struct mixed){.c = c, .i = i};
		cr_assert_eq(pthread_create(&tid[i], NULL, mixed_main, &m[i]),
			     0);
	}
	for (int i = 0; i < THREADS; i++)
		cr_assert_eq(pthread_join(tid[i], NULL), 0);
	for (int i = 0; i < THREADS; i++)
		cr_expect_str_empty(m[i].fail, "thread %d: %s", i, m[i].fail);
	pool_drain();
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

/* ---- a ring whose producer and subscribers share one client ---- */

#define RING_VERSIONS 300
#define RING_BYTES 4096
#define READERS 2

struct ringrun {
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *s[READERS];
	bool fenced;
	/* the version the producer asks the signaller to signal (0: none),
	 * and the one it signalled last */
	_Atomic uint64_t to_signal;
	_Atomic bool done;
	char fail[1280];
	unsigned got[READERS];
};

static void *produce(struct ringrun *x)
{

	for (int k = 0; k < RING_VERSIONS; k++) {
		struct td_slot slot;
		uint64_t v;
		int rc = td_ring_acquire(x->r, HANG_MS, &slot);

		if (rc)
			FAIL(x, "acquire %d: %d", k, rc);
		/* version k+1 is what this slot becomes */
		memset(slot.planes[0], (uint8_t)(k + 1), RING_BYTES);
		rc = x->fenced ? td_ring_publish_fenced(x->r, &v)
			       : td_ring_publish(x->r, &v);
		if (rc || v != (uint64_t)k + 1)
			FAIL(x, "publish %d: %d v %llu", k, rc,
			     (unsigned long long)v);
		if (x->fenced)
			atomic_store(&x->to_signal, v);
	}
	return NULL;
}

static void *ring_producer(void *arg)
{
	struct ringrun *x = arg;

	produce(x);
	atomic_store(&x->done, true);
	return NULL;
}

/* Signals each fenced version from another thread than the producer's
 * (ring.h: td_ring_fence_signal() ends the producer's wait). */
static void *ring_signaller(void *arg)
{
	struct ringrun *x = arg;
	uint64_t last = 0;

	while (!atomic_load(&x->done) || atomic_load(&x->to_signal) != last) {
		uint64_t v = atomic_load(&x->to_signal);

		if (v == last) {
			sched_yield();
			continue;
		}
		/* every version up to v (some may be rewritten already) */
		for (uint64_t w = last + 1; w <= v; w++) {
			int rc = td_ring_fence_signal(x->r, w);

			if (rc && rc != -ENOENT && rc != -EALREADY)
				FAIL(x, "signal %llu: %d",
				     (unsigned long long)w, rc);
		}
		last = v;
	}
	return NULL;
}

struct reader {
	struct ringrun *x;
	int i;
};

static void *ring_reader(void *arg)
{
	struct reader *rd = arg;
	struct ringrun *x = rd->x;
	uint64_t last = 0;

	for (;;) {
		struct td_view v;
		int rc = td_sub_next(x->s[rd->i], HANG_MS, &v);

		if (rc == -EPIPE)
			break;
		if (rc)
			FAIL(x, "reader %d next: %d", rd->i, rc);
		if (v.version <= last)
			FAIL(x, "reader %d: version %llu after %llu", rd->i,
			     (unsigned long long)v.version,
			     (unsigned long long)last);
		last = v.version;
		if (x->fenced && (rc = td_sub_fence_wait(x->s[rd->i],
							  HANG_MS)))
			FAIL(x, "reader %d fence: %d", rd->i, rc);
		if (!uniform(v.planes[0], RING_BYTES, (uint8_t)v.version))
			FAIL(x, "reader %d: torn version %llu", rd->i,
			     (unsigned long long)v.version);
		x->got[rd->i]++;
		td_sub_release(x->s[rd->i]);
	}
	return NULL;
}

static void ring_run(bool fenced)
{
	struct ringrun *x = calloc(1, sizeof(*x));
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = (uint64_t[]){RING_BYTES},
				    .slot_count = 3, .reader_count = READERS};
	pthread_t prod, sig, rt[READERS];
	struct reader rd[READERS];
	struct td_error e = {0};
	struct tu_daemon d;

	cr_assert_not_null(x);
	x->fenced = fenced;
	tu_daemon_start(&d, "warn");
	x->c = tc_open(&d);
	cr_assert_eq(td_ring_create(x->c, "mt/ring", &desc, &x->r, &e), 0,
		     "%s", e.reason);
	for (int i = 0; i < READERS; i++)
		cr_assert_eq(td_ring_subscribe(x->c, "mt/ring", 0, &x->s[i],
					       &e), 0, "%s", e.reason);
	for (int i = 0; i < READERS; i++) {
		rd[i] = (struct reader){x, i};
		cr_assert_eq(pthread_create(&rt[i], NULL, ring_reader, &rd[i]),
			     0);
	}
	cr_assert_eq(pthread_create(&prod, NULL, ring_producer, x), 0);
	if (fenced)
		cr_assert_eq(pthread_create(&sig, NULL, ring_signaller, x), 0);
	/* catalog calls on the same client meanwhile */
	while (!atomic_load(&x->done) && !failed(x->fail)) {
		struct td_ring_stat st;

		cr_assert_eq(td_client_ring_stat(x->c, "mt/ring", &st, &e), 0,
			     "%s", e.reason);
	}
	cr_assert_eq(pthread_join(prod, NULL), 0);
	if (fenced)
		cr_assert_eq(pthread_join(sig, NULL), 0);
	/* the readers end at the ring's end (-EPIPE) */
	td_ring_close(x->r);
	for (int i = 0; i < READERS; i++)
		cr_assert_eq(pthread_join(rt[i], NULL), 0);
	cr_expect_str_empty(x->fail, "%s", x->fail);
	for (int i = 0; i < READERS; i++) {
		cr_expect_gt(x->got[i], 0, "reader %d read nothing", i);
		td_sub_close(x->s[i]);
	}
	td_client_close(x->c);
	tu_daemon_stop(&d, false);
	free(x);
}

Test(threads, a_ring_producer_and_its_readers_share_one_client)
{
	ring_run(false);
}

Test(threads, a_fenced_ring_signalled_from_another_thread)
{
	ring_run(true);
}

/* ---- td_client_close() by another thread ends a producer's wait ---- */

struct waiter {
	struct td_ring *r;
	_Atomic int rc;
	_Atomic bool in;
};

static void *acquire_forever(void *arg)
{
	struct waiter *w = arg;
	struct td_slot slot;

	atomic_store(&w->in, true);
	atomic_store(&w->rc, td_ring_acquire(w->r, HANG_MS, &slot));
	return NULL;
}

/*
 * A 2-slot ring of c's with one subscriber on another client; ready()
 * publishes to where the producer must wait, then wait() is run by a
 * thread while this one closes c: it must end with -ENOTCONN, and so
 * must after() at once.
 */
static void close_ends(const char *name, void (*ready)(struct waiter *w,
						       struct td_sub *s),
		       void *(*wait)(void *), int (*after)(struct waiter *w))
{
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = (uint64_t[]){64},
				    .slot_count = 2, .reader_count = 1};
	struct waiter w = {.rc = 1};
	struct td_client *c, *rc;
	struct td_error e = {0};
	struct td_sub *s;
	struct tu_daemon d;
	pthread_t t;

	tu_daemon_start(&d, "warn");
	c = tc_open(&d);
	rc = tc_open(&d);
	cr_assert_eq(td_ring_create(c, name, &desc, &w.r, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_ring_subscribe(rc, name, 0, &s, &e), 0, "%s",
		     e.reason);
	ready(&w, s);
	cr_assert_eq(pthread_create(&t, NULL, wait, &w), 0);
	while (!atomic_load(&w.in))
		sched_yield();
	td_client_close(c);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_expect_eq(atomic_load(&w.rc), -ENOTCONN);
	cr_expect_eq(after(&w), -ENOTCONN);
	td_ring_close(w.r);
	td_sub_close(s);
	td_client_close(rc);
	tu_daemon_stop(&d, false);
}

/* v1 held by the reader, v2 the latest it has not taken: both slots are
 * in use and the next acquire waits */
static void both_slots_used(struct waiter *w, struct td_sub *s)
{
	struct td_slot slot;
	struct td_view v;

	for (int k = 0; k < 2; k++) {
		cr_assert_eq(td_ring_acquire(w->r, 0, &slot), 0);
		cr_assert_eq(td_ring_publish(w->r, NULL), 0);
		if (k == 0)
			cr_assert_eq(td_sub_next(s, 0, &v), 0);
	}
	cr_assert_eq(td_ring_acquire(w->r, 0, &slot), -ETIMEDOUT);
}

static int acquire_now(struct waiter *w)
{
	struct td_slot slot;

	return td_ring_acquire(w->r, HANG_MS, &slot);
}

Test(threads, closing_the_client_from_another_thread_ends_acquire)
{
	close_ends("mt/close", both_slots_used, acquire_forever, acquire_now);
}

static void *wait_read_forever(void *arg)
{
	struct waiter *w = arg;

	atomic_store(&w->in, true);
	atomic_store(&w->rc, td_ring_wait_read(w->r, 1, HANG_MS));
	return NULL;
}

/* v1 published, which the subscriber has not read */
static void one_unread(struct waiter *w, struct td_sub *s)
{
	struct td_slot slot;

	(void)s;
	cr_assert_eq(td_ring_acquire(w->r, 0, &slot), 0);
	cr_assert_eq(td_ring_publish(w->r, NULL), 0);
	cr_assert_eq(td_ring_wait_read(w->r, 1, 0), -ETIMEDOUT);
}

static int wait_read_now(struct waiter *w)
{
	return td_ring_wait_read(w->r, 1, HANG_MS);
}

/* The same for td_ring_wait_read(): a subscriber that never reads held
 * it until its timeout (-ETIMEDOUT after HANG_MS) or for ever with -1. */
Test(threads, closing_the_client_from_another_thread_ends_wait_read)
{
	close_ends("mt/wr", one_unread, wait_read_forever, wait_read_now);
}

/* ---- asynchronous GETs and td_client_process() from several threads ---- */

#define ASYNC_ROUNDS 100

struct asyncrun {
	struct td_client *c;
	_Atomic unsigned asked, answered, bad;
	char fail[1280];
};

/* One callback per GET, whichever thread's td_client_process() makes it
 * (tensord.h: one thread at a time). */
static void on_get(struct td_client *c, int status, struct td_tensor *t,
		   const struct td_error *err, void *ud)
{
	struct asyncrun *x = ud;

	(void)c;
	(void)err;
	if (status == 0 && !plausible(t, 0))
		atomic_fetch_add(&x->bad, 1);
	else if (status && status != -ETIMEDOUT && status != -ENOENT)
		atomic_fetch_add(&x->bad, 1);
	td_tensor_release(t);
	atomic_fetch_add(&x->answered, 1);
}

static void *async_main(void *arg)
{
	struct asyncrun *x = arg;

	for (int k = 0; k < ASYNC_ROUNDS; k++) {
		struct td_error e = {0};
		int rc = td_client_get_newer_async(x->c, "mt/0", 0, 0, on_get,
						   x, &e);

		if (rc)
			FAIL(x, "get_newer_async: %d %s", rc, e.reason);
		atomic_fetch_add(&x->asked, 1);
		if ((rc = td_client_process(x->c, &e)) < 0)
			FAIL(x, "process: %d %s", rc, e.reason);
	}
	return NULL;
}

Test(threads, asynchronous_gets_processed_by_several_threads_each_answer_once)
{
	struct asyncrun *x = calloc(1, sizeof(*x));
	pthread_t tid[THREADS];
	struct td_error e = {0};
	struct td_client *p;
	struct tu_daemon d;

	cr_assert_not_null(x);
	tu_daemon_start(&d, "warn");
	x->c = tc_open(&d);
	p = tc_open(&d);
	for (int i = 0; i < THREADS; i++)
		cr_assert_eq(pthread_create(&tid[i], NULL, async_main, x), 0);
	/* versions come meanwhile, from another connection */
	for (int k = 0; k < ROUNDS; k++)
		cr_assert_eq(put_round(p, "mt/0", 0, k, &e), 0, "%s", e.reason);
	for (int i = 0; i < THREADS; i++)
		cr_assert_eq(pthread_join(tid[i], NULL), 0);
	cr_expect_str_empty(x->fail, "%s", x->fail);
	/* what is left is answered by the next calls (bounded: hang guard) */
	for (int i = 0; i < HANG_MS && atomic_load(&x->answered) <
					   atomic_load(&x->asked); i++) {
		cr_assert_geq(td_client_process(x->c, &e), 0, "%s", e.reason);
		usleep(1000);
	}
	cr_expect_eq(atomic_load(&x->answered), atomic_load(&x->asked));
	cr_expect_eq(atomic_load(&x->bad), 0);
	td_client_close(x->c);
	td_client_close(p);
	tu_daemon_stop(&d, false);
	free(x);
}

/* ---- a signal during the wait for a reply ---- */

static atomic_int intr_asked;

static int intr_fn(void *ud)
{
	atomic_fetch_add(&intr_asked, 1);
	return *(int *)ud;
}

static void on_alarm(int sig)
{
	(void)sig;
}

/* Resumes the stopped daemon once fn was asked (SIGALRM blocked here,
 * so that it interrupts the waiting thread). */
static void *resume_when_asked(void *arg)
{
	for (int i = 0; i < HANG_MS && !atomic_load(&intr_asked); i++)
		usleep(1000);
	kill(*(pid_t *)arg, SIGCONT);
	return NULL;
}

/* SIGSTOP the daemon; a thread (SIGALRM blocked in it) goes on with it
 * once fn was asked, or after HANG_MS. */
static void stop_until_asked(pid_t *pid, pthread_t *th)
{
	sigset_t alrm;

	cr_assert_eq(kill(*pid, SIGSTOP), 0);
	sigemptyset(&alrm);
	sigaddset(&alrm, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &alrm, NULL);
	cr_assert_eq(pthread_create(th, NULL, resume_when_asked, pid), 0);
	pthread_sigmask(SIG_UNBLOCK, &alrm, NULL);
}

/*
 * A daemon stopped with SIGSTOP never answers: with
 * td_client_set_interrupt() a signal that interrupts the wait asks fn; a
 * fn that says no keeps the call waiting, and it gets its reply once the
 * daemon goes on; one that says yes ends the call (-EINTR) and abandons
 * the connection (-ECONNABORTED for every later call; the daemon, resumed,
 * reads the hang-up and ends that connection's lease).
 */
Test(threads, a_signal_ends_the_wait_for_a_stopped_daemons_reply)
{
	struct sigaction sa = {.sa_handler = on_alarm}, old;
	struct itimerval it = {.it_interval = {0, 100000},
			       .it_value = {0, 100000}}, off = {0};
	struct tu_daemon d;
	struct td_client *c, *o;
	struct td_tensor *t;
	struct td_entry ent = {0};
	struct td_error e = {0};
	uint8_t b[8] = {7};
	uint64_t shape = 8, v;
	struct td_publish p = {.name = "si/a", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = &shape};
	pthread_t th;
	int yes = 1, no = 0;

	tu_daemon_start(&d, "warn");
	c = tc_open(&d);
	o = tc_open(&d);
	cr_assert_eq(td_client_put(c, &p, b, 8, &v, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_get(c, "si/a", &t, &e), 0, "%s", e.reason);
	sigemptyset(&sa.sa_mask); /* no SA_RESTART: the wait sees EINTR */
	cr_assert_eq(sigaction(SIGALRM, &sa, &old), 0);

	/* fn says no: the wait goes on until the daemon answers */
	cr_assert_eq(td_client_set_interrupt(o, intr_fn, &no), 0);
	stop_until_asked(&d.pid, &th);
	cr_assert_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	cr_assert_eq(td_client_stat(o, "si/a", &ent, &e), 0, "%s", e.reason);
	setitimer(ITIMER_REAL, &off, NULL);
	pthread_join(th, NULL);
	cr_assert_geq(atomic_load(&intr_asked), 1, "fn was not asked");
	td_entry_fini(&ent);

	/* fn says yes: the call ends, the connection is abandoned */
	atomic_store(&intr_asked, 0);
	cr_assert_eq(td_client_set_interrupt(c, intr_fn, &yes), 0);
	cr_assert_eq(kill(d.pid, SIGSTOP), 0);
	cr_assert_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	cr_assert_eq(td_client_stat(c, "si/a", &ent, &e), -EINTR);
	setitimer(ITIMER_REAL, &off, NULL);
	cr_assert(strstr(e.reason, "abandoned"), "%s", e.reason);
	cr_assert_eq(atomic_load(&intr_asked), 1);
	cr_assert_eq(kill(d.pid, SIGCONT), 0);
	cr_assert_eq(td_client_stat(c, "si/a", &ent, &e), -ECONNABORTED);
	/* the daemon ends the abandoned connection's lease */
	for (int i = 0; i < HANG_MS / 10; i++) {
		cr_assert_eq(td_client_stat(o, "si/a", &ent, &e), 0, "%s",
			     e.reason);
		if (!ent.lease_count)
			break;
		td_entry_fini(&ent);
		usleep(10000);
	}
	cr_assert_eq(ent.lease_count, 0, "the lease outlived the connection");
	td_entry_fini(&ent);
	td_tensor_release(t);
	td_client_close(c);
	td_client_close(o);
	sigaction(SIGALRM, &old, NULL);
	tu_daemon_stop(&d, false); /* (a thread's cached stack stays mapped) */
}

/* ---- a signal during a send the socket's full buffer holds up ---- */

#define SEND_FILL 3000 /* releases sent without waiting: a full buffer */

static atomic_int alarms;

static void count_alarm(int sig)
{
	(void)sig;
	atomic_fetch_add(&alarms, 1);
}

/* Resumes the stopped daemon after 5 signals (or HANG_MS). */
static void *resume_after_alarms(void *arg)
{
	for (int i = 0; i < HANG_MS && atomic_load(&alarms) < 5; i++)
		usleep(1000);
	kill(*(pid_t *)arg, SIGCONT);
	return NULL;
}

/* SEND_FILL leases of name on c, each a send to come */
static void lease_many(struct td_client *c, const char *name,
		       struct td_tensor **t)
{
	struct td_error e = {0};

	for (int i = 0; i < SEND_FILL; i++)
		cr_assert_eq(td_client_get(c, name, &t[i], &e), 0, "%d: %s", i,
			     e.reason);
}

static void release_all(struct td_tensor **t)
{
	for (int i = 0; i < SEND_FILL; i++)
		td_tensor_release_nowait(t[i]);
}

/*
 * Releases sent without waiting to a daemon stopped with SIGSTOP fill
 * the socket's buffer, and the next send waits for room. With
 * td_client_set_interrupt_ex(TD_INTR_SEND) a signal asks fn there too,
 * even from a handler with SA_RESTART (which restarts a blocking
 * sendmsg() unseen): yes gives the send up and abandons the connection
 * (-ECONNABORTED after; the daemon ends its leases), no leaves it
 * waiting until the daemon reads. Without the flag fn is not asked
 * there (td_client_set_interrupt() as before): the send waits through
 * the signals.
 */
Test(threads, a_signal_asks_fn_in_a_send_the_full_buffer_holds)
{
	struct sigaction sa = {.sa_handler = count_alarm,
			       .sa_flags = SA_RESTART}, old;
	struct itimerval it = {.it_interval = {0, 50000},
			       .it_value = {0, 50000}}, off = {0};
	static struct td_tensor *t[SEND_FILL];
	struct td_client *c, *o;
	struct tu_daemon d;
	struct td_entry ent = {0};
	struct td_error e = {0};
	uint8_t b[8] = {7};
	uint64_t shape = 8, v;
	struct td_publish p = {.name = "si/s", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = &shape};
	sigset_t alrm;
	pthread_t th;
	int yes = 1, no = 0;

	tu_daemon_start(&d, "warn");
	c = tc_open(&d);
	o = tc_open(&d);
	cr_assert_eq(td_client_put(o, &p, b, 8, &v, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_set_interrupt_ex(c, intr_fn, &yes, 0x80),
		     -EINVAL);
	sigemptyset(&sa.sa_mask);
	cr_assert_eq(sigaction(SIGALRM, &sa, &old), 0);

	/* fn says yes: the send ends, the connection is abandoned */
	cr_assert_eq(td_client_set_interrupt_ex(c, intr_fn, &yes,
						TD_INTR_SEND), 0);
	lease_many(c, "si/s", t);
	atomic_store(&intr_asked, 0);
	stop_until_asked(&d.pid, &th);
	cr_assert_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	release_all(t);
	setitimer(ITIMER_REAL, &off, NULL);
	cr_assert_eq(atomic_load(&intr_asked), 1, "fn was not asked once");
	pthread_join(th, NULL);
	cr_assert_eq(td_client_stat(c, "si/s", &ent, &e), -ECONNABORTED);
	td_client_close(c);
	for (int i = 0; i < HANG_MS / 10; i++) {
		cr_assert_eq(td_client_stat(o, "si/s", &ent, &e), 0, "%s",
			     e.reason);
		if (!ent.lease_count)
			break;
		td_entry_fini(&ent);
		usleep(10000);
	}
	cr_assert_eq(ent.lease_count, 0, "leases outlived the connection");
	td_entry_fini(&ent);

	/* fn says no: the send waits for room, every release is sent */
	c = tc_open(&d);
	cr_assert_eq(td_client_set_interrupt_ex(c, intr_fn, &no,
						TD_INTR_SEND), 0);
	lease_many(c, "si/s", t);
	atomic_store(&intr_asked, 0);
	stop_until_asked(&d.pid, &th);
	cr_assert_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	release_all(t);
	setitimer(ITIMER_REAL, &off, NULL);
	pthread_join(th, NULL);
	cr_assert_geq(atomic_load(&intr_asked), 1, "fn was not asked");
	cr_assert_eq(td_client_stat(c, "si/s", &ent, &e), 0, "%s", e.reason);
	cr_assert_eq(ent.lease_count, 0, "a release was not sent");
	td_entry_fini(&ent);

	/* no flag: fn is not asked in the send, which waits them out */
	cr_assert_eq(td_client_set_interrupt(c, intr_fn, &yes), 0);
	lease_many(c, "si/s", t);
	atomic_store(&intr_asked, 0);
	atomic_store(&alarms, 0);
	cr_assert_eq(kill(d.pid, SIGSTOP), 0);
	sigemptyset(&alrm); /* the signals are this thread's */
	sigaddset(&alrm, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &alrm, NULL);
	cr_assert_eq(pthread_create(&th, NULL, resume_after_alarms, &d.pid),
		     0);
	pthread_sigmask(SIG_UNBLOCK, &alrm, NULL);
	cr_assert_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	release_all(t);
	setitimer(ITIMER_REAL, &off, NULL);
	pthread_join(th, NULL);
	cr_assert_eq(atomic_load(&intr_asked), 0, "fn was asked in a send");
	cr_assert_eq(td_client_stat(c, "si/s", &ent, &e), 0, "%s", e.reason);
	cr_assert_eq(ent.lease_count, 0, "a release was not sent");
	td_entry_fini(&ent);
	td_client_close(c);
	td_client_close(o);
	sigaction(SIGALRM, &old, NULL);
	tu_daemon_stop(&d, false);
}

/*
 * The HELLO of td_client_connect_intr() waits as a call's reply does: a
 * daemon stopped with SIGSTOP still accepts the connection, never says
 * HELLO; a fn that says no keeps the connect waiting (it connects once
 * the daemon goes on), one that says yes ends it (-EINTR, no handle).
 */
Test(threads, a_signal_ends_the_wait_for_a_stopped_daemons_hello)
{
	struct sigaction sa = {.sa_handler = on_alarm}, old;
	struct itimerval it = {.it_interval = {0, 100000},
			       .it_value = {0, 100000}}, off = {0};
	struct tu_daemon d;
	struct td_client *c = NULL;
	struct td_entry ent = {0};
	struct td_error e = {0};
	pthread_t th;
	int yes = 1, no = 0;

	tu_daemon_start(&d, "warn");
	sigemptyset(&sa.sa_mask); /* no SA_RESTART: the wait sees EINTR */
	cr_assert_eq(sigaction(SIGALRM, &sa, &old), 0);

	/* fn says yes: no handle (the daemon goes on once fn was asked, or
	 * after HANG_MS: a HELLO deaf to fn connects, and the test fails) */
	atomic_store(&intr_asked, 0);
	stop_until_asked(&d.pid, &th);
	cr_assert_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	cr_assert_eq(td_client_connect_intr(d.sock, 0, intr_fn, &yes, &c, &e),
		     -EINTR, "%s", e.reason);
	setitimer(ITIMER_REAL, &off, NULL);
	pthread_join(th, NULL);
	cr_assert_null(c);
	cr_assert_eq(atomic_load(&intr_asked), 1);

	/* fn says no: connected once the daemon goes on */
	atomic_store(&intr_asked, 0);
	stop_until_asked(&d.pid, &th);
	cr_assert_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	cr_assert_eq(td_client_connect_intr(d.sock, 0, intr_fn, &no, &c, &e),
		     0, "%s", e.reason);
	setitimer(ITIMER_REAL, &off, NULL);
	pthread_join(th, NULL);
	cr_assert_geq(atomic_load(&intr_asked), 1, "fn was not asked");
	cr_assert_eq(td_client_stat(c, "si/none", &ent, &e), -ENOENT, "%s",
		     e.reason);
	td_client_close(c);
	sigaction(SIGALRM, &old, NULL);
	tu_daemon_stop(&d, false);
}

/*
 * A listener whose queue is full (a stopped daemon that many clients
 * tried) holds connect() itself: a signal there asks fn too. One that
 * says yes ends the connect (-EINTR, no handle, no fd left); one that
 * says no waits on to the connect deadline. The timer repeats until the
 * call returns: a single signal that came before the connect began to
 * wait (a loaded machine, 50 ms) was lost, and the connect ran to its
 * deadline.
 */
Test(threads, a_signal_ends_a_connect_that_a_full_queue_holds)
{
	struct sigaction sa = {.sa_handler = on_alarm}, old;
	struct itimerval it = {.it_interval = {0, 50000},
			       .it_value = {0, 50000}}, off = {0};
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	struct td_client *c = NULL;
	struct td_error e = {0};
	int fds = tu_fd_count(), ls, first, yes = 1, no = 0;

	snprintf(un.sun_path, sizeof(un.sun_path), "/tmp/td-fullq-%d.sock",
		 (int)getpid());
	ls = tu_full_listener(un.sun_path, &first);
	sigemptyset(&sa.sa_mask); /* no SA_RESTART, as Python's handlers */
	cr_assert_eq(sigaction(SIGALRM, &sa, &old), 0);
	setenv("TENSORD_CONNECT_TIMEOUT_MS", "400", 1);
	atomic_store(&intr_asked, 0);
	cr_assert_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	cr_assert_eq(td_client_connect_intr(un.sun_path, 0, intr_fn, &yes, &c,
					    &e),
		     -EINTR, "%s", e.reason);
	setitimer(ITIMER_REAL, &off, NULL);
	cr_assert_null(c);
	cr_assert_eq(atomic_load(&intr_asked), 1);
	cr_assert(strstr(e.reason, "interrupted the connect"), "%s", e.reason);
	atomic_store(&intr_asked, 0);
	cr_assert_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	cr_assert_eq(td_client_connect_intr(un.sun_path, 0, intr_fn, &no, &c,
					    &e),
		     -ETIMEDOUT, "%s", e.reason);
	setitimer(ITIMER_REAL, &off, NULL);
	cr_assert_null(c);
	cr_assert_geq(atomic_load(&intr_asked), 1, "fn was not asked");
	unsetenv("TENSORD_CONNECT_TIMEOUT_MS");
	sigaction(SIGALRM, &old, NULL);
	close(first);
	close(ls);
	unlink(un.sun_path);
	cr_assert_eq(tu_fd_count(), fds);
}

/*
 * Signals while a daemon answers in time (a timer's, every millisecond,
 * a handler that carries on) interrupt many a wait for a reply, yet
 * none is given up: fn is asked only once a reply is late (100 ms).
 */
Test(threads, signals_during_replies_in_time_abandon_nothing)
{
	struct sigaction sa = {.sa_handler = on_alarm}, old;
	struct itimerval it = {.it_interval = {0, 1000},
			       .it_value = {0, 1000}}, off = {0};
	struct tu_daemon d;
	struct td_client *c;
	struct td_entry ent = {0};
	struct td_error e = {0};
	uint8_t b[8] = {7};
	uint64_t shape = 8, v;
	struct td_publish p = {.name = "si/b", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = &shape};
	int yes = 1;

	tu_daemon_start(&d, "warn");
	c = tc_open(&d);
	cr_assert_eq(td_client_set_interrupt(c, intr_fn, &yes), 0);
	cr_assert_eq(td_client_put(c, &p, b, 8, &v, &e), 0, "%s", e.reason);
	sigemptyset(&sa.sa_mask); /* no SA_RESTART: the waits see EINTR */
	cr_assert_eq(sigaction(SIGALRM, &sa, &old), 0);
	atomic_store(&intr_asked, 0);
	cr_assert_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	for (int i = 0; i < 3000; i++) {
		cr_assert_eq(td_client_stat(c, "si/b", &ent, &e), 0,
			     "call %d: %s", i, e.reason);
		td_entry_fini(&ent);
	}
	setitimer(ITIMER_REAL, &off, NULL);
	sigaction(SIGALRM, &old, NULL);
	cr_assert_eq(atomic_load(&intr_asked), 0);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* Publishes "si/h" once the waiting thread's GET has been held a while
 * (SIGALRM blocked here: the timer's signals go to the waiter). */
static void *publish_later(void *arg)
{
	struct td_client *c = arg;
	struct td_error e = {0};
	uint8_t b[8] = {9};
	uint64_t shape = 8, v;
	struct td_publish p = {.name = "si/h", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = &shape};

	usleep(300000);
	return td_client_put(c, &p, b, 8, &v, &e) == 0 ? (void *)1 : NULL;
}

/*
 * With TD_INTR_PARKED, a GET (RING_SUBSCRIBE) that the daemon parks is
 * held for its timeout: signals all along it (a timer's, every
 * millisecond, fn saying yes) give up no reply, which is not late until
 * that time passed (then 100 ms). The daemon's answers come: the version
 * published meanwhile, -ETIMEDOUT, and the connection is whole. (Before,
 * fn was asked 100 ms into the park and the connection abandoned, which
 * is still what a handle without the flag does: Ctrl-C ends a C
 * program's long GET.)
 */
Test(threads, a_signal_while_the_daemon_holds_a_get_gives_nothing_up)
{
	struct sigaction sa = {.sa_handler = on_alarm}, old;
	struct itimerval it = {.it_interval = {0, 1000},
			       .it_value = {0, 1000}}, off = {0};
	struct tu_daemon d;
	struct td_client *c, *o;
	struct td_tensor *t = NULL;
	struct td_sub *s = NULL;
	struct td_entry ent = {0};
	struct td_error e = {0};
	uint8_t b[8] = {7};
	uint64_t shape = 8, v;
	struct td_publish p = {.name = "si/h", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = &shape};
	sigset_t alrm;
	pthread_t th;
	void *put_ok;
	int yes = 1;

	tu_daemon_start(&d, "warn");
	c = tc_open(&d);
	o = tc_open(&d);
	cr_assert_eq(td_client_put(c, &p, b, 8, &v, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_set_interrupt_ex(o, intr_fn, &yes,
						TD_INTR_PARKED),
		     0);
	sigemptyset(&sa.sa_mask); /* no SA_RESTART: the waits see EINTR */
	cr_assert_eq(sigaction(SIGALRM, &sa, &old), 0);
	sigemptyset(&alrm);
	sigaddset(&alrm, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &alrm, NULL);
	cr_assert_eq(pthread_create(&th, NULL, publish_later, c), 0);
	pthread_sigmask(SIG_UNBLOCK, &alrm, NULL);
	atomic_store(&intr_asked, 0);
	cr_assert_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	/* (a name this handle never got: the GET, no follow) */
	cr_assert_eq(td_client_get_newer(o, "si/h", v, HANG_MS, &t, &e), 0,
		     "%s", e.reason);
	cr_assert_gt(td_tensor_version(t), v);
	td_tensor_release(t);
	cr_assert_eq(td_client_get_newer(o, "si/none", 0, 300, &t, &e),
		     -ETIMEDOUT, "%s", e.reason);
	cr_assert_eq(td_ring_subscribe(o, "si/ring", 300, &s, &e),
		     -ETIMEDOUT, "%s", e.reason);
	setitimer(ITIMER_REAL, &off, NULL);
	sigaction(SIGALRM, &old, NULL);
	pthread_join(th, &put_ok);
	cr_assert_not_null(put_ok, "the later put failed");
	cr_assert_eq(atomic_load(&intr_asked), 0);
	cr_assert_eq(td_client_stat(o, "si/h", &ent, &e), 0, "%s", e.reason);
	td_entry_fini(&ent);
	/* without the flag: the held GET is late at 100 ms, fn says yes,
	 * the call ends (-EINTR) and the connection is abandoned */
	cr_assert_eq(td_client_set_interrupt(o, intr_fn, &yes), 0);
	cr_assert_eq(sigaction(SIGALRM, &sa, &old), 0);
	cr_assert_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	cr_assert_eq(td_client_get_newer(o, "si/none", 0, HANG_MS, &t, &e),
		     -EINTR, "%s", e.reason);
	setitimer(ITIMER_REAL, &off, NULL);
	sigaction(SIGALRM, &old, NULL);
	cr_assert_eq(atomic_load(&intr_asked), 1);
	cr_assert_eq(td_client_stat(o, "si/h", &ent, &e), -ECONNABORTED, "%s",
		     e.reason);
	td_client_close(c);
	td_client_close(o);
	tu_daemon_stop(&d, false); /* (the thread's cached stack stays mapped) */
}
