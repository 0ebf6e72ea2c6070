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
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include <tensord/ring.h>
#include <tensord/tensord.h>

#include "testutil.h"

TestSuite(timeout, .timeout = TU_TEST_TIMEOUT_S);

#define PAUSE_US 100000

static const uint64_t shape[1] = {16};

static struct td_client *open_client(const struct tu_daemon *d)
{
	struct td_client *c = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_connect(d->sock, &c, &e), 0, "%s", e.reason);
	return c;
}

/* Put one version of `name` on a client of its own, after a pause. */
struct later_put {
	const struct tu_daemon *d;
	const char *name;
	int rc;
};

static void *put_later(void *arg)
{
	struct later_put *p = arg;
	struct td_client *c = open_client(p->d);
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
	c = open_client(&d);
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
	c = open_client(&d);
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
	l->c = open_client(l->d);
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
	c = open_client(&d);
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
