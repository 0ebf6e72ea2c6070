/* SPDX-License-Identifier: MIT */
/*
 * Timeouts of the C API: 0 does not wait, a negative one waits for ever
 * as poll(2)'s does (-1, -2, INT_MIN alike; tensord.h "Conventions").
 * Each wait below is given a negative timeout other than -1 and must be
 * woken by what another thread does meanwhile: refused (-EINVAL) or
 * taken as 0 (-ETIMEDOUT, -EAGAIN) it fails. The other thread acts after
 * a pause so that the wait has most likely begun; a wait that has not
 * yet begun finds the answer there all the same (no wall-clock bound).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <tensord/ring.h>
#include <tensord/tensord.h>

#include "testclient.h"
#include "testutil.h"

TestSuite(timeout, .timeout = TU_TEST_TIMEOUT_S);

#define PAUSE_US 100000

static const uint64_t shape[1] = {16};

/* Put one version of `name` on a client of its own, after a pause. */
struct later_put {
	const struct tu_daemon *d;
	const char *name;
	int rc;
};

static void *put_later(void *arg)
{
	struct later_put *p = arg;
	struct td_client *c = tc_open(p->d);
	uint8_t bytes[16] = {7};
	struct td_publish pub = {.name = p->name, .dtype = TD_TENSOR_U8,
				 .ndim = 1, .shape = shape};

	usleep(PAUSE_US);
	p->rc = td_client_put(c, &pub, bytes, sizeof(bytes), NULL, NULL);
	td_client_close(c);
	return NULL;
}

static void start_put(struct later_put *p, pthread_t *t)
{
	cr_assert_eq(pthread_create(t, NULL, put_later, p), 0);
}

static void end_put(struct later_put *p, pthread_t t)
{
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(p->rc, 0);
}

Test(timeout, get_newer_with_minus_2_waits_for_the_next_version)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	struct later_put p;
	pthread_t th;

	tu_daemon_start(&d, "warn");
	c = tc_open(&d);
	p = (struct later_put){&d, "to/get", -1};
	start_put(&p, &th);
	cr_assert_eq(td_client_get_newer(c, "to/get", 0, -2, &t, &e), 0,
		     "%s", e.reason);
	cr_assert_eq(td_tensor_version(t), 1);
	td_tensor_release(t);
	end_put(&p, th);
	td_client_close(c);
	tu_daemon_stop(&d, false); /* glibc keeps the put thread's stack */
}

Test(timeout, follow_next_and_next_event_with_int_min_wait)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_follow *f = NULL;
	struct td_tensor *t = NULL;
	struct td_event ev;
	struct td_error e = {0};
	struct later_put p;
	pthread_t th;

	tu_daemon_start(&d, "warn");
	c = tc_open(&d);
	cr_assert_eq(td_client_follow(c, "to/follow", &f, &e), 0, "%s",
		     e.reason);
	p = (struct later_put){&d, "to/follow", -1};
	start_put(&p, &th);
	cr_assert_eq(td_follow_next(f, INT_MIN, &t, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_version(t), 1);
	td_tensor_release(t);
	end_put(&p, th);
	td_follow_close(f);

	cr_assert_eq(td_client_watch(c, "to/watch", 0, NULL, &e), 0, "%s",
		     e.reason);
	p = (struct later_put){&d, "to/watch", -1};
	start_put(&p, &th);
	cr_assert_eq(td_client_next_event(c, -2, &ev, &e), 0, "%s",
		     e.reason);
	cr_assert_str_eq(ev.name, "to/watch");
	end_put(&p, th);
	td_client_close(c);
	tu_daemon_stop(&d, false); /* glibc keeps the put thread's stack */
}

/* Create the ring "to/ring", after a pause publish one slot, keep it. */
struct later_ring {
	const struct tu_daemon *d;
	struct td_client *c;
	struct td_ring *r;
	int rc;
};

static void *ring_later(void *arg)
{
	struct later_ring *l = arg;
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = shape, .slot_count = 2,
				    .reader_count = 1};
	struct td_slot s;

	usleep(PAUSE_US);
	l->c = tc_open(l->d);
	l->rc = td_ring_create(l->c, "to/ring", &desc, &l->r, NULL);
	if (l->rc == 0) {
		usleep(PAUSE_US);
		l->rc = td_ring_acquire(l->r, 0, &s);
	}
	if (l->rc == 0)
		l->rc = td_ring_publish(l->r, NULL);
	return NULL;
}

Test(timeout, subscribe_and_sub_next_with_minus_2_wait)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_sub *s = NULL;
	struct td_view v;
	struct td_error e = {0};
	struct later_ring l;
	pthread_t th;

	tu_daemon_start(&d, "warn");
	c = tc_open(&d);
	l = (struct later_ring){.d = &d, .rc = -1};
	cr_assert_eq(pthread_create(&th, NULL, ring_later, &l), 0);
	/* waits for the ring to be made, then for its first version */
	cr_assert_eq(td_ring_subscribe(c, "to/ring", -2, &s, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_sub_next(s, -2, &v), 0);
	cr_assert_eq(v.version, 1);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(l.rc, 0);
	td_sub_close(s);
	td_ring_close(l.r);
	td_client_close(l.c);
	td_client_close(c);
	tu_daemon_stop(&d, false); /* glibc keeps the put thread's stack */
}

/* ---- a wait of INT_MAX ms: 24.8 days, not for ever, not at once ---- */

static atomic_int intr_asked;

static int intr_no(void *ud)
{
	(void)ud;
	atomic_fetch_add(&intr_asked, 1);
	return 0;
}

static void on_usr1(int sig)
{
	(void)sig;
}

struct long_get {
	struct td_client *c;
	atomic_int tid;
	atomic_bool done;
	int rc;
	uint64_t version;
};

static void *get_long(void *arg)
{
	struct long_get *g = arg;
	struct td_tensor *t = NULL;
	struct td_error e = {0};

	atomic_store(&g->tid, (int)syscall(SYS_gettid));
	g->rc = td_client_get_newer(g->c, "to/never", 0, INT_MAX, &t, &e);
	if (g->rc == 0) {
		g->version = td_tensor_version(t);
		td_tensor_release(t);
	}
	atomic_store(&g->done, true);
	return NULL;
}

/*
 * The milliseconds task tid's poll(2) or ppoll(2) waits now: -1 for
 * ever, -2 not in one (running, or in another system call). ppoll's
 * timespec is read where it lies, in this process.
 */
static int64_t poll_wait_ms(pid_t tid)
{
	char path[64], buf[256];
	long nr = -1;
	unsigned long a[3] = {0};
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
	f = fopen(path, "r");
	cr_assert(f, "%s", path);
	if (fgets(buf, sizeof(buf), f) &&
	    sscanf(buf, "%ld %lx %lx %lx", &nr, &a[0], &a[1], &a[2]) != 4)
		nr = -1;
	fclose(f);
#ifdef SYS_poll
	if (nr == SYS_poll)
		return (int)a[2] < 0 ? -1 : (int)a[2];
#endif
	if (nr == SYS_ppoll) {
		const struct timespec *ts = (const struct timespec *)a[2];

		return ts ? ts->tv_sec * 1000LL + ts->tv_nsec / 1000000 : -1;
	}
	return -2;
}

/* A field of /proc/self/task/TID/status: its number, or the letter of
 * "State:"; -1 when it is not there. */
/*
 * td_client_get_newer() with timeout_ms INT_MAX (24.8 days) for a name
 * nobody publishes: the daemon parks it for that long and the library
 * waits for the reply. With td_client_set_interrupt_ex(TD_INTR_PARKED)
 * a signal asks fn only once the park time and 100 ms have passed, so
 * the wait after the signal is poll()ed for that long; as an int of
 * milliseconds that was past INT_MAX and came out negative, a poll() for
 * ever (and fn, due after 24.8 days, asked only at some later signal).
 * The wait must stay bounded and asleep: in poll for INT_MAX ms or just
 * under, the thread asleep ('S') with few context switches, the request
 * still parked in the daemon (a later publish answers it), fn not asked.
 */
Test(timeout, a_get_of_int_max_ms_waits_in_bounded_polls)
{
	struct sigaction sa = {.sa_handler = on_usr1}, old;
	struct tu_daemon d;
	struct long_get g = {0};
	struct td_client *p;
	uint8_t bytes[16] = {7};
	struct td_publish pub = {.name = "to/never", .dtype = TD_TENSOR_U8,
				 .ndim = 1, .shape = shape};
	int64_t ms = -2;
	uint64_t v = 0;
	long sw0, sw1;
	pthread_t th;
	pid_t tid;
	int i;

	tu_daemon_start(&d, "warn");
	/* the GET path itself (not a follow of the name) */
	cr_assert_eq(setenv("TENSORD_GET_FOLLOW", "0", 1), 0);
	g.c = tc_open(&d);
	cr_assert_eq(unsetenv("TENSORD_GET_FOLLOW"), 0);
	cr_assert_eq(td_client_set_interrupt_ex(g.c, intr_no, NULL,
						TD_INTR_PARKED),
		     0);
	sigemptyset(&sa.sa_mask); /* no SA_RESTART: the poll sees EINTR */
	cr_assert_eq(sigaction(SIGUSR1, &sa, &old), 0);
	cr_assert_eq(pthread_create(&th, NULL, get_long, &g), 0);
	while (!(tid = atomic_load(&g.tid)))
		usleep(1000);
	/* asleep for the reply, for ever: no deadline of its own */
	for (i = 0; i < TU_WAIT_S * 1000 && (ms = poll_wait_ms(tid)) != -1;
	     i++)
		usleep(1000);
	cr_assert_eq(ms, -1, "the GET never waited for its reply");
	cr_assert_eq(pthread_kill(th, SIGUSR1), 0);
	/* then for the park time: bounded, and not at once */
	for (i = 0; i < TU_WAIT_S * 1000 && (ms = poll_wait_ms(tid)) < 0;
	     i++)
		usleep(1000);
	cr_assert_geq(ms, 0, "after the signal the wait is %s",
		      ms == -1 ? "for ever (a negative int of ms)"
			       : "not in poll");
	cr_assert_leq(ms, INT_MAX);
	cr_assert_geq(ms, INT_MAX - TU_WAIT_S * 1000LL,
		      "a wait of %lld ms", (long long)ms);
	/* asleep, not spinning */
	sw0 = tu_task_field(tid, "voluntary_ctxt_switches:");
	usleep(200 * 1000);
	sw1 = tu_task_field(tid, "voluntary_ctxt_switches:");
	cr_assert_eq(tu_task_field(tid, "State:"), 'S');
	cr_assert_leq(sw1 - sw0, 2, "%ld wake-ups", sw1 - sw0);
	cr_assert_not(atomic_load(&g.done), "the GET returned %d", g.rc);
	cr_assert_eq(atomic_load(&intr_asked), 0);
	/* still parked in the daemon: a publish answers it */
	p = tc_open(&d);
	cr_assert_eq(td_client_put(p, &pub, bytes, sizeof(bytes), &v, NULL),
		     0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(g.rc, 0, "%d", g.rc);
	cr_assert_eq(g.version, v);
	td_client_close(p);
	td_client_close(g.c);
	sigaction(SIGUSR1, &old, NULL);
	tu_daemon_stop(&d, false); /* (a thread's cached stack stays mapped) */
}
