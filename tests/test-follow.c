/* SPDX-License-Identifier: MIT */
/*
 * Following a name (docs/fastpath.md, "Following a name"): a consumer
 * takes each new version from the daemon's bell without a message; its
 * hold is a lease the daemon honours (a held version is never recycled,
 * never evicted); a version it cannot map from its cache comes by GET.
 * Producer and followers are separate clients of one test process (or
 * child processes where a death or fork() is the point), on the pidfd
 * and on the SCM_RIGHTS path. tu_daemon_stop() checks fds and memfd
 * mappings.
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
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tensord/tensord.h"
#include "client.h"
#include "follow.h"
#include "os.h"
#include "wire.h"
#include "testclient.h"
#include "testutil.h"

TestSuite(follow, .timeout = TU_TEST_TIMEOUT_S);

#define KIB 1024u

static const char *const small_cap[] = {"--max-bytes", "64M", NULL};

static struct td_client *conn(const struct tu_daemon *d, const char *import)
{
	struct td_client *c = NULL;
	struct td_error e = {0};

	cr_assert_eq(setenv("TENSORD_IMPORT", import, 1), 0);
	cr_assert_eq(td_client_connect(d->sock, &c, &e), 0, "%s", e.reason);
	return c;
}

/* A private daemon with cap (tensord arguments), a producer and a
 * consumer client, both on the import path named. */
static void pair_start(struct tu_daemon *d, const char *const *cap,
		       const char *import, struct td_client **prod,
		       struct td_client **cons)
{
	tu_daemon_start_args(d, "warn", cap);
	*prod = conn(d, import);
	*cons = conn(d, import);
}

/* Both clients closed, the daemon stopped (fds and mappings checked). */
static void pair_stop(struct tu_daemon *d, struct td_client *prod,
		      struct td_client *cons)
{
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(d, true);
}

static struct td_follow *follow(struct td_client *c, const char *name)
{
	struct td_follow *f = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_follow(c, name, &f, &e), 0, "%s", e.reason);
	return f;
}

/* Publish size bytes of b as name, from a loan made with flags. */
static uint64_t put(struct td_client *c, const char *name, uint64_t size,
		    uint32_t flags, uint8_t b)
{
	struct td_alloc *a = NULL;
	struct td_error e = {0};
	uint64_t shape[1] = {size}, v = 0;
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape};

	cr_assert_eq(td_client_alloc_ex(c, 1, &size, flags, &a, &e), 0, "%s",
		     e.reason);
	memset(td_alloc_data(a, 0), b, (size_t)size);
	cr_assert_eq(td_client_publish_alloc(c, a, &p, &v, &e), 0, "%s",
		     e.reason);
	return v;
}

static bool all_bytes(const struct td_tensor *t, uint8_t b)
{
	const uint8_t *p = td_tensor_plane_data(t, 0);
	uint64_t n = td_tensor_plane_size(t, 0);

	for (uint64_t i = 0; i < n; i++)
		if (p[i] != b)
			return false;
	return true;
}

static struct td_tensor *next(struct td_follow *f, int timeout_ms)
{
	struct td_tensor *t = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_follow_next(f, timeout_ms, &t, &e), 0, "%s",
		     e.reason);
	return t;
}

static struct td_ring *counter_ring(struct td_client *c, const char *name)
{
	uint64_t size = 64;
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = &size};
	struct td_ring *r = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_ring_create(c, name, &desc, &r, &e), 0, "%s",
		     e.reason);
	return r;
}

/*
 * Warm, a followed stream handoff is one request to the daemon: the
 * producer's PUBLISH (whose reply lends the next loan). The follower
 * sends nothing, receives no fd, makes no mapping; the bytes are right
 * every time. Counted by the daemon (RING_STAT counts every datagram).
 */
static void one_request(const char *import)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_follow *f;
	struct td_ring *r;
	uint64_t before = 0;
	int fds = 0, maps = 0;

	pair_start(&d, small_cap, import, &prod, &cons);
	r = counter_ring(prod, "fw/counter");
	f = follow(cons, "fw/x");
	for (unsigned i = 0; i < 104; i++) {
		uint8_t b = (uint8_t)(i * 5 + 1);
		uint64_t v = put(prod, "fw/x", 16 * KIB, TD_ALLOC_STREAM, b);
		struct td_tensor *t = next(f, 5000);

		cr_assert_eq(td_tensor_version(t), v);
		cr_assert(all_bytes(t, b), "handoff %u", i);
		td_tensor_release(t);
		if (i == 3) {
			fds = tu_fd_count();
			maps = tu_buf_map_count();
			before = tc_daemon_requests(prod, "fw/counter");
		}
	}
	/* one per handoff, and the RING_STAT that reads the count */
	cr_assert_eq(tc_daemon_requests(prod, "fw/counter") - before, 101);
	cr_assert_eq(tu_fd_count(), fds);
	cr_assert_eq(tu_buf_map_count(), maps);
	td_follow_close(f);
	td_ring_close(r);
	pair_stop(&d, prod, cons);
}

Test(follow, a_warm_followed_handoff_is_one_request_pidfd)
{
	one_request("pidfd");
}

Test(follow, a_warm_followed_handoff_is_one_request_scm)
{
	one_request("scm");
}

/*
 * A version a follower holds is never recycled: the producer's later
 * stream PUBLISHes get other buffers (the held bytes stay), and the
 * version stays reachable by GET EXACT until the follower lets go and
 * the daemon learns it (the next change of the name).
 */
Test(follow, a_held_version_is_never_recycled)
{
	struct tu_daemon d;
	struct td_client *prod, *cons, *other;
	struct td_follow *f;
	struct td_tensor *t, *u = NULL;
	struct td_error e = {0};
	uint64_t v1;

	pair_start(&d, small_cap, "pidfd", &prod, &cons);
	other = conn(&d, "pidfd");
	f = follow(cons, "fw/held");
	/* warm: the follower maps both buffers the stream alternates */
	for (unsigned i = 0; i < 4; i++) {
		put(prod, "fw/held", 8 * KIB, TD_ALLOC_STREAM, (uint8_t)i);
		td_tensor_release(next(f, 5000));
	}
	v1 = put(prod, "fw/held", 8 * KIB, TD_ALLOC_STREAM, 0xa1);
	t = next(f, 5000);
	cr_assert_eq(td_tensor_version(t), v1);
	/* while held: no next, and twenty newer versions go elsewhere */
	cr_assert_eq(td_follow_next(f, 0, &u, &e), -EBUSY);
	for (unsigned i = 0; i < 20; i++)
		put(prod, "fw/held", 8 * KIB, TD_ALLOC_STREAM,
		    (uint8_t)(0x10 + i));
	cr_assert(all_bytes(t, 0xa1), "a held version's bytes changed");
	cr_assert_eq(td_client_get_version(other, "fw/held", v1, &u, &e), 0,
		     "the held version is gone: %s", e.reason);
	cr_assert(all_bytes(u, 0xa1));
	td_tensor_release(u);
	td_tensor_release(t);
	/* let go, and the next change of the name drops the hold */
	put(prod, "fw/held", 8 * KIB, TD_ALLOC_STREAM, 0x77);
	cr_assert_eq(td_client_get_version(other, "fw/held", v1, &u, &e),
		     -ENOENT, "still kept after the follower let go");
	t = next(f, 5000);
	cr_assert(all_bytes(t, 0x77), "the newest version, skipping the rest");
	td_tensor_release(t);
	td_follow_close(f);
	td_client_close(other);
	pair_stop(&d, prod, cons);
}

/*
 * The follower gets the newest version (those in between are skipped),
 * the name's current version when it starts following, a version of a
 * plain producer (a fresh buffer each time, taken by GET), and follows a
 * deleted name on to its next version.
 */
Test(follow, newest_first_plain_versions_and_a_deleted_name)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_follow *f;
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	uint64_t v;

	pair_start(&d, small_cap, "scm", &prod, &cons);
	v = put(prod, "fw/n", 4 * KIB, 0, 1);
	f = follow(cons, "fw/n");
	t = next(f, 0);
	cr_assert_eq(td_tensor_version(t), v, "the current one first");
	cr_assert(all_bytes(t, 1));
	td_tensor_release(t);
	cr_assert_eq(td_follow_next(f, 0, &t, &e), -EAGAIN);
	cr_assert_null(t);
	put(prod, "fw/n", 4 * KIB, 0, 2);
	put(prod, "fw/n", 4 * KIB, TD_ALLOC_RECYCLE, 3);
	v = put(prod, "fw/n", 4 * KIB, 0, 4);
	t = next(f, 0);
	cr_assert_eq(td_tensor_version(t), v, "the newest");
	cr_assert(all_bytes(t, 4));
	td_tensor_release(t);
	cr_assert_eq(td_client_delete(prod, "fw/n", NULL, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_follow_next(f, 50, &t, &e), -ETIMEDOUT);
	v = put(prod, "fw/n", 4 * KIB, 0, 5);
	t = next(f, 5000);
	cr_assert_eq(td_tensor_version(t), v);
	cr_assert(all_bytes(t, 5));
	/* the tensor outlives the follow (its close waits for it) */
	td_follow_close(f);
	cr_assert(all_bytes(t, 5));
	td_tensor_release(t);
	pair_stop(&d, prod, cons);
}

/*
 * A version taken by GET (a plain producer's fresh buffer) is the
 * follow's tensor as much as one from the bell: the next call returns
 * -EBUSY until it is released, its release ends its lease, and
 * td_follow_close() waits for it.
 */
Test(follow, a_tensor_taken_by_get_is_held_as_the_follows)
{
	struct tu_daemon d;
	struct td_client *prod, *cons, *other;
	struct td_follow *f;
	struct td_tensor *t, *u = NULL;
	struct td_error e = {0};
	uint64_t v1, v2;

	pair_start(&d, small_cap, "pidfd", &prod, &cons);
	other = conn(&d, "pidfd");
	f = follow(cons, "fw/get");
	v1 = put(prod, "fw/get", 4 * KIB, 0, 1);
	t = next(f, 5000);
	cr_assert_eq(td_tensor_version(t), v1);
	v2 = put(prod, "fw/get", 4 * KIB, 0, 2);
	cr_assert_eq(td_follow_next(f, 0, &u, &e), -EBUSY,
		     "a second tensor while the first is held");
	cr_assert_null(u);
	td_tensor_release(t);
	cr_assert_eq(td_client_get_version(other, "fw/get", v1, &u, &e),
		     -ENOENT, "the lease outlived the release");
	u = next(f, 0);
	cr_assert_eq(td_tensor_version(u), v2);
	cr_assert(all_bytes(u, 2));
	td_follow_close(f);
	cr_assert(all_bytes(u, 2), "the tensor outlives the follow");
	td_tensor_release(u);
	td_client_close(other);
	pair_stop(&d, prod, cons);
}

/* ---- sleeping followers ---- */

/* The echo side of a ping-pong, in a child: follow ping, publish each
 * version's first byte to pong. Exits 0 after rounds. */
static void echo_run(const struct tu_daemon *d, unsigned rounds)
{
	struct td_client *c = NULL;
	struct td_follow *f = NULL;

	if (td_client_connect(d->sock, &c, NULL) < 0 ||
	    td_client_follow(c, "fw/ping", &f, NULL) < 0)
		_exit(1);
	for (unsigned i = 0; i < rounds; i++) {
		struct td_tensor *t = NULL;
		struct td_alloc *a = NULL;
		uint64_t size = 64, shape[1] = {64};
		struct td_publish p = {.name = "fw/pong",
				       .dtype = TD_TENSOR_U8, .ndim = 1,
				       .shape = shape};
		uint8_t b;

		if (td_follow_next(f, -1, &t, NULL) < 0)
			_exit(2);
		b = ((const uint8_t *)td_tensor_plane_data(t, 0))[0];
		td_tensor_release(t);
		if (td_client_alloc_ex(c, 1, &size, TD_ALLOC_STREAM, &a,
				       NULL) < 0)
			_exit(3);
		memset(td_alloc_data(a, 0), b, 64);
		if (td_client_publish_alloc(c, a, &p, NULL, NULL) < 0)
			_exit(4);
	}
	td_follow_close(f);
	td_client_close(c);
	_exit(0);
}

/* One side of a ping-pong: this process publishes ping and follows pong,
 * an echo process (echo_run) the other way round; both always sleep at
 * once (TENSORD_RING_SPIN_US=0). */
struct pingpong {
	struct tu_daemon d;
	struct td_client *c;
	struct td_follow *f;
	pid_t echo;
};

static void pingpong_start(struct pingpong *pp, const char *import,
			   unsigned rounds)
{
	cr_assert_eq(setenv("TENSORD_RING_SPIN_US", "0", 1), 0);
	tu_daemon_start_args(&pp->d, "warn", small_cap);
	pp->c = conn(&pp->d, import);
	pp->f = follow(pp->c, "fw/pong");
	pp->echo = tu_fork();
	if (pp->echo == 0)
		echo_run(&pp->d, rounds);
}

static void pingpong_end(struct pingpong *pp)
{
	int status = tu_wait_child(pp->echo, TU_WAIT_S, "the echo process");

	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the echo failed (status %d)", status);
	unsetenv("TENSORD_RING_SPIN_US");
	td_follow_close(pp->f);
	td_client_close(pp->c);
	tu_daemon_stop(&pp->d, true);
}

/*
 * A ping-pong between two processes that each follow the other's name
 * and always sleep at once: every round both sides sleep, and only the
 * daemon's wake-up at the other's PUBLISH wakes them. A lost wake-up
 * costs a follower its whole sleep slice (1 s: it then looks at its
 * connection and finds the version), so 500 rounds with wake-ups dropped
 * take over 500 s and the test's timeout fails them; every round must
 * also see exactly its own version.
 */
static void no_wake_up_lost(const char *wake_rows)
{
	const unsigned rounds = 500;
	struct pingpong pp;

	cr_assert_eq(setenv("TENSORD_WAKE_ROWS", wake_rows, 1), 0);
	pingpong_start(&pp, "pidfd", rounds);
	for (unsigned i = 1; i <= rounds; i++) {
		struct td_tensor *t;

		put(pp.c, "fw/ping", 64, TD_ALLOC_STREAM, (uint8_t)i);
		t = next(pp.f, -1);
		cr_assert(all_bytes(t, (uint8_t)i), "round %u", i);
		td_tensor_release(t);
	}
	pingpong_end(&pp);
	unsetenv("TENSORD_WAKE_ROWS");
}

/* Each follower asleep on its own row's word (the default) */
Test(follow, no_wake_up_is_lost, .timeout = 120)
{
	no_wake_up_lost("1");
}

/* ... and all on the bell's seq, as libtensord did before
 * TD_WIRE_FEAT_WAKE_ROWS (and does with TENSORD_WAKE_ROWS=0) */
Test(follow, no_wake_up_is_lost_on_the_shared_word, .timeout = 120)
{
	no_wake_up_lost("0");
}

struct sleeper {
	struct td_follow *f;
	int rc;
	uint64_t version;
};

static void *sleeper_run(void *arg)
{
	struct sleeper *z = arg;
	struct td_tensor *t = NULL;

	z->rc = td_follow_next(z->f, -1, &t, NULL);
	if (z->rc == 0) {
		z->version = td_tensor_version(t);
		td_tensor_release(t);
	}
	return NULL;
}

/*
 * A follower that sleeps says in its row on which word: its own row's
 * (TD_FOLLOW_WAIT_ROW), which the daemon swaps and wakes, or the bell's
 * seq shared by every follower of the name (TD_FOLLOW_WAIT_FUTEX, with
 * TENSORD_WAKE_ROWS=0). Either way the next version wakes it; that no
 * wake-up is ever lost is no_wake_up_is_lost's (here a lost one would
 * only cost the 1 s sleep slice).
 */
static void follower_sleeps_on(const char *wake_rows, bool old_daemon,
			       uint32_t asleep)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_follow_row *row;
	struct sleeper z = {.rc = 1};
	pthread_t th;
	uint64_t v;
	int k;

	cr_assert_eq(setenv("TENSORD_RING_SPIN_US", "0", 1), 0);
	cr_assert_eq(setenv("TENSORD_WAKE_ROWS", wake_rows, 1), 0);
	pair_start(&d, small_cap, "pidfd", &prod, &cons);
	/* as if the daemon's HELLO predated the feature: the daemon would
	 * not wake a row at 4, so the follower must not sleep there */
	if (old_daemon)
		cons->hello.features &= ~TD_WIRE_FEAT_WAKE_ROWS;
	put(prod, "fw/sleep", 64, TD_ALLOC_STREAM, 1);
	z.f = follow(cons, "fw/sleep");
	td_tensor_release(next(z.f, 0));
	row = tu_find_mapping("memfd:tensord-follow-row");
	cr_assert_eq(pthread_create(&th, NULL, sleeper_run, &z), 0);
	for (k = 0; k < 20000 && atomic_load(&row->waiting) != asleep; k++)
		usleep(1000);
	cr_assert_eq(atomic_load(&row->waiting), asleep);
	v = put(prod, "fw/sleep", 64, TD_ALLOC_STREAM, 2);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(z.rc, 0);
	cr_assert_eq(z.version, v);
	unsetenv("TENSORD_WAKE_ROWS");
	unsetenv("TENSORD_RING_SPIN_US");
	td_follow_close(z.f);
	/* fds and buffer mappings are counted; not every mapping: glibc
	 * keeps the thread's stack and arena */
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, false);
}

/* The bell's header, mapped read-only here: the one bell of this test. */
static const struct td_follow_hdr *bell_hdr(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	unsigned long lo = 0;

	cr_assert(f);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "memfd:tensord-follow (deleted)"))
			cr_assert_eq(sscanf(line, "%lx-", &lo), 1);
	fclose(f);
	cr_assert(lo, "no bell mapping");
	return (const struct td_follow_hdr *)lo;
}

/* The state letter of this process's thread tid (R, S, D, ...). */
static char task_state(pid_t tid)
{
	char path[64], line[512], *close;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return 0; /* the thread has ended */
	n = fread(line, 1, sizeof(line) - 1, f);
	fclose(f);
	line[n] = 0;
	close = strrchr(line, ')');
	return close && close[1] == ' ' ? close[2] : 0;
}

struct watched {
	void *(*fn)(void *);
	void *arg;
	_Atomic pid_t tid;
	_Atomic bool done;
};

static void *watched_run(void *arg)
{
	struct watched *w = arg;

	atomic_store(&w->tid, gettid());
	w->fn(w->arg);
	atomic_store(&w->done, true);
	return NULL;
}

/*
 * Whether fn(arg), run in a thread, was ever seen asleep (state S): a
 * wait that polls is running or runnable throughout (its polls, yields
 * and preemptions all read R), whatever the load; one that sleeps reads
 * S for as long as it sleeps. No CPU times (they shrink with load).
 */
static bool slept_in(void *(*fn)(void *), void *arg)
{
	struct watched w = {fn, arg, 0, false};
	bool slept = false;
	pthread_t th;

	cr_assert_eq(pthread_create(&th, NULL, watched_run, &w), 0);
	while (!atomic_load(&w.done)) {
		pid_t tid = atomic_load(&w.tid);

		slept |= tid && task_state(tid) == 'S' && !atomic_load(&w.done);
		usleep(1000);
	}
	cr_assert_eq(pthread_join(th, NULL), 0);
	return slept;
}

/* A follower's wait of 500 ms with nothing to take. */
static void *follow_timeout(void *arg)
{
	struct td_tensor *t = NULL;

	cr_assert_eq(td_follow_next(arg, 500, &t, NULL), -ETIMEDOUT);
	return NULL;
}

/*
 * The bell says how many follow the name, and as many followers as CPUs
 * ($TENSORD_CPUS here, 2) sleep at once instead of polling
 * (docs/fastpath.md, "Waiting"): four consumers of a fan-out on two CPUs
 * that poll take the CPU the producer and the daemon need. With a poll
 * longer than the wait ($TENSORD_RING_SPIN_US at its 1 s bound), a lone
 * follower never sleeps in its 500 ms wait, a crowded one sleeps in it.
 */
Test(follow, followers_as_many_as_the_cpus_sleep_at_once)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_follow *f1, *f2;
	const struct td_follow_hdr *h;

	cr_assert_eq(setenv("TENSORD_RING_SPIN_US", "1000000", 1), 0);
	cr_assert_eq(setenv("TENSORD_RING_SPIN_MAX_US", "1000000", 1), 0);
	cr_assert_eq(setenv("TENSORD_CPUS", "2", 1), 0);
	pair_start(&d, small_cap, "pidfd", &prod, &cons);
	put(prod, "fw/crowd", 64, TD_ALLOC_STREAM, 1);
	f1 = follow(cons, "fw/crowd");
	td_tensor_release(next(f1, 0));
	h = bell_hdr();
	cr_assert_eq(atomic_load(&h->followers), 1);
	cr_assert(!slept_in(follow_timeout, f1), "a lone follower slept");

	f2 = follow(cons, "fw/crowd");
	cr_assert_eq(atomic_load(&h->followers), 2);
	cr_assert(slept_in(follow_timeout, f1), "a crowded follower polled");
	/* the crowd is woken by the publish all the same */
	put(prod, "fw/crowd", 64, TD_ALLOC_STREAM, 2);
	td_tensor_release(next(f1, 5000));
	td_tensor_release(next(f2, 5000));

	td_follow_close(f2);
	cr_assert_eq(atomic_load(&h->followers), 1);
	cr_assert(!slept_in(follow_timeout, f1), "alone again, it slept");
	unsetenv("TENSORD_RING_SPIN_US");
	unsetenv("TENSORD_RING_SPIN_MAX_US");
	unsetenv("TENSORD_CPUS");
	td_follow_close(f1);
	/* fds and buffer mappings are counted; not every mapping: glibc
	 * keeps the threads' stacks */
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, false);
}

struct getter {
	struct td_client *c;
	uint64_t after;
	int timeout_ms;
	int rc;
};

static void *getter_run(void *arg)
{
	struct getter *g = arg;
	struct td_tensor *t = NULL;

	g->rc = td_client_get_newer(g->c, "fw/gets", g->after, g->timeout_ms,
				    &t, NULL);
	if (g->rc == 0)
		td_tensor_release(t);
	return NULL;
}

/* n getters' GETs, parked together, answered by one publish (v + 1). */
static void gets_answered(struct td_client *prod, struct getter *g, int n,
			  struct td_client *st, uint64_t v)
{
	pthread_t th[64];

	for (int i = 0; i < n; i++) {
		g[i].after = v;
		g[i].timeout_ms = 20000;
		cr_assert_eq(pthread_create(&th[i], NULL, getter_run, &g[i]),
			     0);
	}
	cr_assert_eq(tc_status_until(st, tc_waiters, (uint64_t)n),
		     (uint64_t)n);
	put(prod, "fw/gets", 64, TD_ALLOC_STREAM, (uint8_t)v);
	for (int i = 0; i < n; i++) {
		cr_assert_eq(pthread_join(th[i], NULL), 0);
		cr_assert_eq(g[i].rc, 0, "getter %d", i);
	}
}

/*
 * The GET path's crowd (TENSORD_GET_FOLLOW=0: get_newer parks GETs):
 * replies to as many parked GETs as the CPUs, answered by one publish,
 * say so (TD_WIRE_F_CROWD), and the next reply wait of each of those
 * clients sleeps at once. With a poll longer than the wait (1 s), a
 * 500 ms wait that times out sleeps after a crowd and never alone.
 */
Test(follow, get_replies_to_a_crowd_make_the_next_wait_sleep)
{
	struct tu_daemon d;
	struct td_client *prod, *st;
	struct getter g[64] = {0};
	int n = (int)td__cpus();
	uint64_t v;

	cr_assert(n > 0);
	if (n > 64) {
		n = 64;
		cr_assert_eq(setenv("TENSORD_CPUS", "64", 1), 0);
	}
	cr_assert_eq(setenv("TENSORD_RING_SPIN_US", "1000000", 1), 0);
	cr_assert_eq(setenv("TENSORD_RING_SPIN_MAX_US", "1000000", 1), 0);
	cr_assert_eq(setenv("TENSORD_GET_FOLLOW", "0", 1), 0);
	pair_start(&d, small_cap, "pidfd", &prod, &st);
	for (int i = 0; i < n; i++)
		g[i].c = conn(&d, "pidfd");
	unsetenv("TENSORD_GET_FOLLOW");
	v = put(prod, "fw/gets", 64, TD_ALLOC_STREAM, 1);

	gets_answered(prod, g, n, st, v++);
	for (int i = 0; i < n; i++)
		cr_assert_eq(g[i].c->pace_get.waiters, UINT32_MAX, "%d", i);
	g[0].after = v;
	g[0].timeout_ms = 500;
	cr_assert(slept_in(getter_run, &g[0]), "after a crowd, it polled");
	cr_assert_eq(g[0].rc, -ETIMEDOUT);
	/* answered alone: it polls again (a crowd of one CPU aside) */
	if (n > 1) {
		gets_answered(prod, g, 1, st, v++);
		cr_assert_eq(g[0].c->pace_get.waiters, 0);
		g[0].after = v;
		g[0].timeout_ms = 500;
		cr_assert(!slept_in(getter_run, &g[0]), "alone, it slept");
		cr_assert_eq(g[0].rc, -ETIMEDOUT);
	}
	unsetenv("TENSORD_RING_SPIN_US");
	unsetenv("TENSORD_RING_SPIN_MAX_US");
	unsetenv("TENSORD_CPUS");
	for (int i = 0; i < n; i++)
		td_client_close(g[i].c);
	/* fds and buffer mappings are counted; not every mapping: glibc
	 * keeps the threads' stacks */
	td_client_close(st);
	td_client_close(prod);
	tu_daemon_stop(&d, false);
}

Test(follow, a_sleeping_follower_sleeps_on_its_own_row)
{
	follower_sleeps_on("1", false, TD_FOLLOW_WAIT_ROW);
}

Test(follow, a_follower_of_an_older_daemon_sleeps_on_the_bell_word)
{
	follower_sleeps_on("1", true, TD_FOLLOW_WAIT_FUTEX);
}

Test(follow, followers_share_the_bell_word_when_row_wake_ups_are_off)
{
	follower_sleeps_on("0", false, TD_FOLLOW_WAIT_FUTEX);
}

/*
 * An event-loop follower (td_follow_fd, poll(2), td_follow_poll) in a
 * ping-pong with the echo process: each round's version arrives through
 * the timerfd the daemon fires; nothing else would wake the poll (no
 * timeout: a dropped wake-up hangs it, and the test's timeout fails it).
 */
Test(follow, an_event_loop_follower_is_woken_by_its_fd, .timeout = 120)
{
	const unsigned rounds = 300;
	struct pingpong pp;
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	int fd;

	pingpong_start(&pp, "scm", rounds);
	cr_assert_eq(td_follow_poll(pp.f, &t, &e), -EINVAL, "before the fd");
	fd = td_follow_fd(pp.f);
	cr_assert_geq(fd, 0, "%s", strerror(-fd));
	cr_assert_eq(td_follow_fd(pp.f), fd, "one timerfd per follow");
	cr_assert_eq(td_follow_poll(pp.f, &t, &e), -EAGAIN);
	for (unsigned i = 1; i <= rounds; i++) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int rc;

		put(pp.c, "fw/ping", 64, TD_ALLOC_STREAM, (uint8_t)i);
		do {
			cr_assert_eq(poll(&p, 1, -1), 1);
			rc = td_follow_poll(pp.f, &t, &e);
		} while (rc == -EAGAIN);
		cr_assert_eq(rc, 0, "%s", e.reason);
		cr_assert(all_bytes(t, (uint8_t)i), "round %u", i);
		td_tensor_release(t);
	}
	pingpong_end(&pp);
}

/*
 * A follower's wake-up fd is shared with the follower, which can make it
 * blocking and try to fill it (an eventfd's write would then wait for a
 * read that never comes). The daemon's wake-up never blocks on it: the
 * producer's PUBLISH is answered, later ones too, and the follower is
 * still woken.
 */
Test(follow, a_follower_cannot_block_the_daemon_on_its_wake_fd,
     .timeout = 60)
{
	const uint64_t full = 0xfffffffffffffffeull;
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_follow *f;
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	struct pollfd p;
	int fd;

	pair_start(&d, small_cap, "scm", &prod, &cons);
	f = follow(cons, "fw/wake");
	fd = td_follow_fd(f);
	cr_assert_geq(fd, 0, "%s", strerror(-fd));
	cr_assert_eq(td_follow_poll(f, &t, &e), -EAGAIN); /* waits by fd */
	/* hostile: blocking, and as full as it will go (an eventfd takes
	 * the write; a fd nobody but the owner can fill refuses it) */
	cr_assert_eq(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK), 0);
	(void)!write(fd, &full, sizeof(full));
	put(prod, "fw/wake", 64, TD_ALLOC_STREAM, 1);
	put(prod, "fw/wake", 64, TD_ALLOC_STREAM, 2);
	p = (struct pollfd){.fd = fd, .events = POLLIN};
	cr_assert_eq(poll(&p, 1, 5000), 1, "the follower was not woken");
	cr_assert_eq(td_follow_poll(f, &t, &e), 0, "%s", e.reason);
	cr_assert(all_bytes(t, 2));
	td_tensor_release(t);
	td_follow_close(f);
	pair_stop(&d, prod, cons);
}

/*
 * An event loop that polls td_client_fd() and a follow's td_follow_fd()
 * learns that the daemon went away from both: once td_client_process()
 * has found the connection gone, the follow's fd polls readable and
 * td_follow_poll() says -EPIPE, so the loop follows again (on the new
 * connection, with TD_CLIENT_RECONNECT). The fd used to stay quiet for
 * ever: a camera pipeline's event-loop consumer sat idle after a daemon
 * restart while the blocking followers went on.
 */
Test(follow, a_follow_fd_polls_readable_once_its_connection_is_gone)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_follow *f;
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	struct pollfd p[2];
	int fd, rc = 0;

	tu_daemon_start(&d, "warn");
	c = conn(&d, "pidfd");
	f = follow(c, "fw/gone");
	fd = td_follow_fd(f);
	cr_assert_geq(fd, 0, "%s", strerror(-fd));
	cr_assert_eq(td_follow_poll(f, &t, &e), -EAGAIN);
	tu_daemon_kill(&d);
	p[0] = (struct pollfd){.fd = td_client_fd(c), .events = POLLIN};
	cr_assert_eq(poll(p, 1, 5000), 1, "the hang-up did not wake the loop");
	for (int i = 0; i < 10 && rc == 0; i++)
		rc = td_client_process(c, &e);
	cr_assert_lt(rc, 0, "td_client_process did not see the hang-up");
	p[1] = (struct pollfd){.fd = fd, .events = POLLIN};
	cr_assert_eq(poll(&p[1], 1, 0), 1,
		     "the follow's fd stays quiet after its connection went");
	cr_assert_eq(td_follow_poll(f, &t, &e), -EPIPE, "%s", e.reason);
	td_follow_close(f);
	td_client_close(c);
}

/* ---- the daemon stays the authority ---- */

/*
 * A follower that dies holding a version pins nothing: its connection's
 * end drops the hold and the next PUBLISH recycles the buffer.
 */
Test(follow, a_dead_follower_pins_nothing)
{
	struct tu_daemon d;
	struct td_client *prod, *other;
	struct td_tensor *u = NULL;
	struct td_error e = {0};
	int pipefd[2];
	uint64_t v1;
	pid_t pid;
	char ok;

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = conn(&d, "pidfd");
	other = conn(&d, "pidfd");
	v1 = put(prod, "fw/dead", 8 * KIB, TD_ALLOC_STREAM, 0x42);
	cr_assert_eq(pipe(pipefd), 0);
	pid = tu_fork(); /* dies with a failed test: it would pause for ever */
	if (pid == 0) {
		struct td_client *c = NULL;
		struct td_follow *f = NULL;
		struct td_tensor *t = NULL;

		if (td_client_connect(d.sock, &c, NULL) < 0 ||
		    td_client_follow(c, "fw/dead", &f, NULL) < 0 ||
		    td_follow_next(f, 5000, &t, NULL) < 0 ||
		    td_tensor_version(t) != v1)
			_exit(1);
		(void)!write(pipefd[1], "k", 1);
		pause(); /* holding v1 until killed */
		_exit(0);
	}
	close(pipefd[1]);
	cr_assert_eq(read(pipefd[0], &ok, 1), 1, "the follower failed");
	close(pipefd[0]);
	put(prod, "fw/dead", 8 * KIB, TD_ALLOC_STREAM, 0x43);
	cr_assert_eq(td_client_get_version(other, "fw/dead", v1, &u, &e), 0,
		     "held by the follower: %s", e.reason);
	td_tensor_release(u);
	kill(pid, SIGKILL);
	cr_assert_eq(waitpid(pid, NULL, 0), pid);
	/* its disconnect is served before our next request is */
	for (int i = 0; i < 2000; i++) {
		if (td_client_get_version(other, "fw/dead", v1, &u, &e) < 0)
			break;
		td_tensor_release(u);
		usleep(10000);
	}
	cr_assert_eq(td_client_get_version(other, "fw/dead", v1, &u, &e),
		     -ENOENT, "the dead follower's hold was kept");
	td_client_close(other);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

/* ---- a commit walks the rows in use ---- */

/* tensord_follow_row_visits_total of the daemon serving HTTP at path */
static unsigned long long row_visits(const char *path)
{
	return tu_metric_unix(path, "tensord_follow_row_visits_total");
}

/*
 * A commit to a followed name visits the rows in use, not every row a
 * bell has room for (TD_FOLLOW_MAX_ROWS, 64): with one follower a
 * handoff's walks (sweep, entries, retire, charge, wake, the eviction's
 * look) come to a few rows, where a walk of the whole table came to
 * five times 64 and more. The rows change hands first (a follow ends, a
 * new one takes its row, another ends), so the masks are exact across
 * a give-back: the follower that is left gets every version.
 */
Test(follow, a_commit_visits_the_rows_in_use_not_all_of_them)
{
	enum { N = 100 };
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_follow *a, *b;
	char dir[] = "/tmp/td-rowvisits-XXXXXX", path[96], http[104];
	const char *const args[] = {"--http", http, NULL};
	unsigned long long before, after;

	cr_assert_not_null(tu_mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/http", dir);
	snprintf(http, sizeof(http), "unix:%s", path);
	pair_start(&d, args, "pidfd", &prod, &cons);
	put(prod, "rv/x", 64, TD_ALLOC_STREAM, 1);
	a = follow(cons, "rv/x");
	b = follow(cons, "rv/x");
	td_follow_close(a); /* row 0 given back ... */
	a = follow(cons, "rv/x"); /* ... and taken again */
	td_follow_close(b);
	before = row_visits(path);
	for (int i = 0; i < N; i++) {
		uint64_t v = put(prod, "rv/x", 64, TD_ALLOC_STREAM,
				 (uint8_t)(i + 2));
		struct td_tensor *t = next(a, 5000);

		cr_assert_eq(td_tensor_version(t), v);
		cr_assert(all_bytes(t, (uint8_t)(i + 2)));
		td_tensor_release(t);
	}
	after = row_visits(path);
	cr_log_info("%llu rows visited by %d followed handoffs",
		    after - before, N);
	/* each walk visits the one row (the entries' look, one per entry
	 * it tries: a couple), not 64 */
	cr_assert_leq(after - before, N * 16ull,
		      "%llu rows visited by %d handoffs with one follower",
		      after - before, N);
	cr_assert_geq(after - before, N, "a commit visits its row");
	td_follow_close(a);
	pair_stop(&d, prod, cons);
	unlink(path);
	rmdir(dir);
}

/* Publish fd (size bytes, the caller's memfd) as name: the version. */
static uint64_t put_fd_meta(struct td_client *c, const char *name, int fd,
			    uint64_t size, const void *meta, size_t meta_len)
{
	struct td_error e = {0};
	uint64_t shape[1] = {size}, v = 0;
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape, .fd_count = 1,
			       .fds = &fd, .fence_fd = -1, .meta = meta,
			       .meta_len = meta_len};

	cr_assert_eq(td_client_publish(c, &p, &v, &e), 0, "%s", e.reason);
	return v;
}

static uint64_t put_fd(struct td_client *c, const char *name, int fd,
		       uint64_t size)
{
	return put_fd_meta(c, name, fd, size, NULL, 0);
}

/* A sealed memfd of size bytes of b. */
static int sealed_memfd(uint64_t size, uint8_t b)
{
	int fd = memfd_create("fw-plane", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	uint8_t *p;

	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	p = mmap(NULL, (size_t)size, PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert_neq(p, MAP_FAILED);
	memset(p, b, (size_t)size);
	munmap(p, (size_t)size);
	cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	return fd;
}

/*
 * A followed name's current version that a follower holds is not evicted
 * to make room (the follower reads it); once the follower lets go it is,
 * followed or not, like any version nobody leases. The follower takes it
 * from shared memory (the producer publishes the same memfd again, which
 * the follower mapped when it took the first version by GET).
 */
Test(follow, a_held_current_version_is_not_evicted)
{
	static const char *const cap[] = {"--max-bytes", "1M", NULL};
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_follow *f;
	struct td_tensor *t;
	struct td_alloc *a = NULL;
	struct td_error e = {0};
	uint64_t small = 300 * KIB, big = 800 * KIB, v;
	int fd;

	pair_start(&d, cap, "pidfd", &prod, &cons);
	fd = sealed_memfd(small, 7);
	f = follow(cons, "fw/a");
	put_fd(prod, "fw/a", fd, small);
	td_tensor_release(next(f, 5000)); /* by GET: now mapped here */
	v = put_fd(prod, "fw/a", fd, small);
	t = next(f, 5000); /* from shared memory, held by the row */
	cr_assert_eq(td_tensor_version(t), v);
	cr_assert_eq(td_client_alloc(prod, 1, &big, &a, &e), -ENOSPC,
		     "the held version was evicted");
	td_tensor_release(t);
	cr_assert_eq(td_client_alloc(prod, 1, &big, &a, &e), 0,
		     "a followed version nobody holds stays: %s", e.reason);
	td_alloc_free(a);
	close(fd);
	td_follow_close(f);
	pair_stop(&d, prod, cons);
}

/*
 * The versions whose entry the bell cannot carry come by a GET of that
 * exact version (one more request, counted by the daemon), right: a
 * reply over 4080 bytes (16 KiB of metadata), a version with a fence,
 * and a version published while all 16 entries hold versions followers
 * keep. Otherwise a mapped
 * buffer's version comes from the bell with no request. (One sealed
 * memfd published again and again: mapped once, by the first GET.)
 */
Test(follow, versions_without_an_entry_come_by_get)
{
	static uint8_t meta[TD_WIRE_MAX_META];
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_follow *f[TD_FOLLOW_ENTRIES + 1];
	struct td_tensor *t[TD_FOLLOW_ENTRIES + 1];
	struct td_ring *r;
	const void *m;
	size_t mlen;
	uint64_t v, before;
	int fd;

	pair_start(&d, small_cap, "pidfd", &prod, &cons);
	r = counter_ring(prod, "fw/count");
	fd = sealed_memfd(4 * KIB, 0x5a);
	for (unsigned i = 0; i <= TD_FOLLOW_ENTRIES; i++)
		f[i] = follow(cons, "fw/e");
	put_fd(prod, "fw/e", fd, 4 * KIB);
	td_tensor_release(next(f[0], 5000)); /* by GET: now mapped here */
	/* a reply that does not fit an entry */
	memset(meta, 0xc3, sizeof(meta));
	v = put_fd_meta(prod, "fw/e", fd, 4 * KIB, meta, sizeof(meta));
	before = tc_daemon_requests(prod, "fw/count");
	t[0] = next(f[0], 5000);
	cr_assert_eq(tc_daemon_requests(prod, "fw/count") - before, 2,
		     "not taken by GET (and the count's own request)");
	cr_assert_eq(td_tensor_version(t[0]), v);
	m = td_tensor_meta(t[0], &mlen);
	cr_assert(mlen == sizeof(meta) && memcmp(m, meta, mlen) == 0);
	td_tensor_release(t[0]);
	/* a fence: an fd, which no entry carries */
	{
		int fence = td_fence_create();
		struct td_error e = {0};
		uint64_t shape[1] = {4 * KIB};
		struct td_publish p = {.name = "fw/e",
				       .flags = TD_PUBLISH_FENCE,
				       .dtype = TD_TENSOR_U8, .ndim = 1,
				       .shape = shape, .fd_count = 1,
				       .fds = &fd, .fence_fd = fence};

		cr_assert_geq(fence, 0);
		cr_assert_eq(td_fence_signal(fence, &e), 0, "%s", e.reason);
		cr_assert_eq(td_client_publish(prod, &p, &v, &e), 0, "%s",
			     e.reason);
		close(fence);
		before = tc_daemon_requests(prod, "fw/count");
		t[0] = next(f[0], 5000);
		cr_assert_eq(tc_daemon_requests(prod, "fw/count") - before, 2,
			     "a fenced version not taken by GET");
		cr_assert_eq(td_tensor_version(t[0]), v);
		cr_assert_geq(td_tensor_fence_fd(t[0]), 0, "its fence lost");
		cr_assert_eq(td_tensor_fence_wait(t[0], 0), 0);
		td_tensor_release(t[0]);
	}
	/* sixteen versions, each kept by a follow: from the bell */
	for (unsigned i = 0; i < TD_FOLLOW_ENTRIES; i++) {
		v = put_fd(prod, "fw/e", fd, 4 * KIB);
		before = tc_daemon_requests(prod, "fw/count");
		t[i] = next(f[i], 5000);
		cr_assert_eq(tc_daemon_requests(prod, "fw/count") - before, 1,
			     "version %u not from the bell", i);
		cr_assert_eq(td_tensor_version(t[i]), v);
	}
	/* every entry is a kept version's or the current one's: by GET */
	v = put_fd(prod, "fw/e", fd, 4 * KIB);
	before = tc_daemon_requests(prod, "fw/count");
	t[TD_FOLLOW_ENTRIES] = next(f[TD_FOLLOW_ENTRIES], 5000);
	cr_assert_eq(tc_daemon_requests(prod, "fw/count") - before, 2,
		     "an entry was rewritten under a kept version");
	cr_assert_eq(td_tensor_version(t[TD_FOLLOW_ENTRIES]), v);
	cr_assert(all_bytes(t[TD_FOLLOW_ENTRIES], 0x5a));
	for (unsigned i = 0; i <= TD_FOLLOW_ENTRIES; i++) {
		cr_assert(all_bytes(t[i], 0x5a));
		td_tensor_release(t[i]);
		td_follow_close(f[i]);
	}
	close(fd);
	td_ring_close(r);
	pair_stop(&d, prod, cons);
}

/*
 * A hold the follower let go is dropped at the daemon's next look, which
 * a search for room makes first: the room it finds counts what that
 * look freed. (One sealed memfd published again and again: the follower
 * maps it once, by GET, and takes the later versions from the bell.)
 */
Test(follow, the_room_an_alloc_finds_counts_the_holds_let_go)
{
	static const char *const cap[] = {"--max-bytes", "3M", NULL};
	/* more than evicting the current version alone makes room for */
	const uint64_t mib = 1024 * KIB, two = 2 * mib + mib / 2;
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_follow *f;
	struct td_tensor *t;
	struct td_alloc *a = NULL;
	struct td_error e = {0};
	uint64_t v;
	int fd;

	pair_start(&d, cap, "pidfd", &prod, &cons);
	fd = memfd_create("fw-room", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)mib), 0);
	cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	f = follow(cons, "fw/room");
	put_fd(prod, "fw/room", fd, mib);
	td_tensor_release(next(f, 5000)); /* by GET: now mapped here */
	v = put_fd(prod, "fw/room", fd, mib);
	t = next(f, 5000);
	cr_assert_eq(td_tensor_version(t), v);
	/* replaced while held: 2 MiB of versions; then let go */
	put_fd(prod, "fw/room", fd, mib);
	td_tensor_release(t);
	cr_assert_eq(td_client_alloc(prod, 1, &two, &a, &e), 0,
		     "the released hold still counted: %s", e.reason);
	td_alloc_free(a);
	close(fd);
	td_follow_close(f);
	pair_stop(&d, prod, cons);
}

/*
 * The client may be closed before its follow and the follow's tensor:
 * the tensor stays readable, the follow answers -EPIPE, and closing both
 * afterwards frees everything (tu_daemon_stop counts fds and mappings;
 * ASan the memory).
 */
Test(follow, a_client_closed_first_leaves_its_follow_and_tensor_usable)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_follow *f;
	struct td_tensor *t, *u = NULL;
	struct td_error e = {0};

	pair_start(&d, small_cap, "pidfd", &prod, &cons);
	f = follow(cons, "fw/cc");
	for (unsigned i = 0; i < 3; i++) {
		put(prod, "fw/cc", 4 * KIB, TD_ALLOC_STREAM, (uint8_t)i);
		td_tensor_release(next(f, 5000));
	}
	put(prod, "fw/cc", 4 * KIB, TD_ALLOC_STREAM, 0x33);
	t = next(f, 5000); /* from the bell, held through the row */
	td_client_close(cons);
	cr_assert(all_bytes(t, 0x33));
	td_tensor_release(t);
	cr_assert_eq(td_follow_next(f, 0, &u, &e), -EPIPE, "%s", e.reason);
	td_follow_close(f);
	/* the daemon ended that follow with the connection */
	put(prod, "fw/cc", 4 * KIB, TD_ALLOC_STREAM, 0x34);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

/* Refusals: a ring name, a bad name, a child of fork(). */
Test(follow, refusals)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_follow *f = NULL;
	struct td_tensor *t = NULL;
	struct td_ring *r;
	struct td_error e = {0};
	int status;
	pid_t pid;

	pair_start(&d, small_cap, "pidfd", &prod, &cons);
	r = counter_ring(prod, "fw/ring");
	cr_assert_eq(td_client_follow(cons, "fw/ring", &f, &e), -EINVAL);
	cr_assert(strstr(e.reason, "ring"), "%s", e.reason);
	cr_assert_eq(td_client_follow(cons, "../x", &f, &e), -EINVAL, "%s",
		     e.reason);
	f = follow(cons, "fw/x");
	put(prod, "fw/x", 64, TD_ALLOC_STREAM, 9);
	/* made before the fork: the child is refused it all the same (it
	 * got the parent's fd, which its td_follow_poll cannot clear) */
	cr_assert_geq(td_follow_fd(f), 0);
	pid = tu_fork();
	if (pid == 0) {
		struct td_tensor *ct = NULL;

		if (td_follow_next(f, 0, &ct, NULL) != -ECHILD)
			_exit(1);
		_exit(td_follow_fd(f) == -ECHILD ? 0 : 2);
	}
	status = tu_wait_child(pid, TU_WAIT_S, "the child of fork()");
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "a child of fork() used the parent's follow (%d)", status);
	t = next(f, 0);
	cr_assert(all_bytes(t, 9), "the child did not take the parent's");
	td_tensor_release(t);
	td_follow_close(f);
	td_ring_close(r);
	pair_stop(&d, prod, cons);
}

/*
 * A follower asleep with no deadline hears that the daemon is gone
 * (-EPIPE) instead of sleeping for ever: nobody writes its bell again.
 */
Test(follow, a_sleeping_follower_hears_the_daemon_go, .timeout = 60)
{
	struct tu_daemon d;
	int pipefd[2], status;
	pid_t pid;
	char ok;

	tu_daemon_start_args(&d, "warn", small_cap);
	cr_assert_eq(pipe(pipefd), 0);
	pid = tu_fork();
	if (pid == 0) {
		struct td_client *c = NULL;
		struct td_follow *f = NULL;
		struct td_tensor *t = NULL;

		close(pipefd[0]);
		if (td_client_connect(d.sock, &c, NULL) < 0 ||
		    td_client_follow(c, "fw/quiet", &f, NULL) < 0)
			_exit(1);
		(void)!write(pipefd[1], "k", 1);
		_exit(td_follow_next(f, -1, &t, NULL) == -EPIPE ? 0 : 2);
	}
	close(pipefd[1]);
	cr_assert_eq(read(pipefd[0], &ok, 1), 1, "the follower failed");
	close(pipefd[0]);
	tu_daemon_stop(&d, true);
	/* half the test's timeout: a follower deaf to the daemon's going
	 * fails with this message, not the timeout's */
	status = tu_wait_child(pid, 30, "the follower after the daemon went");
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the follower did not hear the daemon go (status %d)",
		  status);
}

/* ---- td_client_get_newer rides a follow ---- */

static struct td_tensor *newer(struct td_client *c, const char *name,
			       uint64_t after, int timeout_ms)
{
	struct td_tensor *t = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_get_newer(c, name, after, timeout_ms, &t, &e),
		     0, "%s", e.reason);
	return t;
}

/*
 * A name td_client_get_newer is asked for again, newer than what it gave
 * last, is followed (docs/fastpath.md, "get_newer rides a follow"), and
 * the call keeps its meaning: -ETIMEDOUT with nothing newer (at once and
 * after a wait, with no message to the daemon), the tensor got last may
 * still be held (a second follow, then the GET path), and once followed
 * any `after` gives the current version. The daemon's datagram count
 * shows which path served.
 */
Test(follow, get_newer_rides_a_follow_and_keeps_its_meaning)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_tensor *t, *held[3], *u = NULL;
	struct td_error e = {0};
	struct td_ring *r;
	uint64_t v[5], before;

	pair_start(&d, small_cap, "pidfd", &prod, &cons);
	r = counter_ring(prod, "gn/counter");
	v[1] = put(prod, "gn/x", 4 * KIB, TD_ALLOC_STREAM, 1);
	t = newer(cons, "gn/x", 0, 1000); /* a GET: the name is noted */
	cr_assert_eq(td_tensor_version(t), v[1]);
	td_tensor_release(t);
	before = tc_daemon_requests(prod, "gn/counter");
	cr_assert_eq(td_client_get_newer(cons, "gn/x", v[1], 0, &u, &e),
		     -ETIMEDOUT, "%s", e.reason);
	cr_assert(u == NULL && strstr(e.reason, "gn/x"), "%s", e.reason);
	cr_assert_eq(td_client_get_newer(cons, "gn/x", v[1], 30, &u, &e),
		     -ETIMEDOUT, "%s", e.reason);
	/* the FOLLOW the first made, and this RING_STAT: no GET */
	cr_assert_eq(tc_daemon_requests(prod, "gn/counter") - before, 2);
	for (unsigned i = 2; i <= 4; i++) {
		v[i] = put(prod, "gn/x", 4 * KIB, TD_ALLOC_STREAM,
			   (uint8_t)i);
		held[i - 2] = newer(cons, "gn/x", v[i - 1], 1000);
		cr_assert_eq(td_tensor_version(held[i - 2]), v[i]);
	}
	for (unsigned i = 2; i <= 4; i++) {
		cr_assert(all_bytes(held[i - 2], (uint8_t)i), "version %u", i);
		td_tensor_release(held[i - 2]);
	}
	t = newer(cons, "gn/x", 0, 0);
	cr_assert_eq(td_tensor_version(t), v[4]);
	cr_assert(all_bytes(t, 4));
	td_tensor_release(t);
	td_ring_close(r);
	pair_stop(&d, prod, cons);
}

/*
 * One more version of name, got by a get_newer newer than `after` that
 * rides its follow: no message to the daemon (counted on the producer's
 * ring "gn/counter": the RING_STAT that reads the count alone).
 */
static void followed_handoff(struct td_client *prod, struct td_client *cons,
			     const char *name, uint64_t after)
{
	struct td_tensor *t;
	uint64_t before;

	put(prod, name, 4 * KIB, TD_ALLOC_STREAM, 0x77);
	before = tc_daemon_requests(prod, "gn/counter");
	t = newer(cons, name, after, 1000);
	cr_assert(all_bytes(t, 0x77));
	td_tensor_release(t);
	cr_assert_eq(tc_daemon_requests(prod, "gn/counter") - before, 1);
}

/*
 * n names in turn, three rounds of get_newer loops of cons; then a warm
 * handoff of each of the first `followed` sends the daemon nothing.
 */
static void names_ride(unsigned n, unsigned followed)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_ring *r;
	char name[TD__GF_NAMES + 1][32];
	uint64_t v[TD__GF_NAMES + 1];

	cr_assert_leq(n, TD__GF_NAMES + 1);
	pair_start(&d, small_cap, "pidfd", &prod, &cons);
	r = counter_ring(prod, "gn/counter");
	for (unsigned round = 0; round < 3; round++)
		for (unsigned k = 0; k < n; k++) {
			struct td_tensor *t;
			uint64_t w;

			snprintf(name[k], sizeof(name[k]), "gn/cam%u", k);
			w = put(prod, name[k], 4 * KIB, TD_ALLOC_STREAM,
				(uint8_t)(round * n + k));
			t = newer(cons, name[k], round ? v[k] : 0, 1000);
			cr_assert_eq(td_tensor_version(t), w);
			td_tensor_release(t);
			v[k] = w;
		}
	for (unsigned k = 0; k < followed; k++)
		followed_handoff(prod, cons, name[k], v[k]);
	td_ring_close(r);
	pair_stop(&d, prod, cons);
}

/*
 * A consumer of sixteen streams through one client (the other end of a
 * producer of sixteen names, docs/fastpath.md "Several streams on one
 * connection") rides a follow for each: a warm handoff of any of them
 * sends the daemon nothing. With four names a handle (TD__GF_NAMES
 * before), the later ones stayed on the GET path; with eight, those past
 * the eighth.
 */
Test(follow, get_newer_rides_follows_for_sixteen_names)
{
	cr_assert_eq(TD__GF_NAMES, 16);
	names_ride(TD__GF_NAMES, TD__GF_NAMES);
}

/*
 * A loop over more names than a handle notes follows as many as it
 * notes; the rest go by GET. Before, the extra name took the slot of the
 * name noted longest ago, the one the loop asked for next, before it
 * could follow: every name was noted and dropped in turn, none followed.
 */
Test(follow, get_newer_of_seventeen_names_in_turn_follows_sixteen)
{
	names_ride(TD__GF_NAMES + 1, TD__GF_NAMES);
}

/*
 * Names asked for once or twice do not push out a followed name in use:
 * after TD__GF_NAMES + 4 other names (more than a handle notes), the followed one
 * is still served with no message (no GET, no FOLLOW made again).
 */
Test(follow, get_newer_keeps_a_busy_follow_when_other_names_come_and_go)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_tensor *t;
	struct td_ring *r;
	char name[32];
	uint64_t v;

	pair_start(&d, small_cap, "pidfd", &prod, &cons);
	r = counter_ring(prod, "gn/counter");
	v = put(prod, "gn/a", 4 * KIB, TD_ALLOC_STREAM, 1);
	td_tensor_release(newer(cons, "gn/a", 0, 1000));
	for (unsigned i = 2; i < 5; i++) {
		/* followed from the second; the buffers get mapped */
		uint64_t w = put(prod, "gn/a", 4 * KIB, TD_ALLOC_STREAM,
				 (uint8_t)i);

		t = newer(cons, "gn/a", v, 1000);
		cr_assert_eq(td_tensor_version(t), w);
		td_tensor_release(t);
		v = w;
	}
	for (unsigned i = 0; i < TD__GF_NAMES + 4; i++) {
		snprintf(name, sizeof(name), "gn/other%u", i);
		put(prod, name, 64, 0, (uint8_t)i);
		td_tensor_release(newer(cons, name, 0, 1000));
	}
	followed_handoff(prod, cons, "gn/a", v);
	td_ring_close(r);
	pair_stop(&d, prod, cons);
}

/*
 * Two threads share one handle and loop get_newer on one name while a
 * producer publishes: one rides the follows, the other finds them busy
 * and takes the GET path; each sees versions that only grow, each with
 * its own bytes (version v carries byte v - v0).
 */
struct gn_loop {
	struct td_client *c;
	uint64_t v0, last_v;
	unsigned got, bad;
};

static void *gn_loop_run(void *arg)
{
	struct gn_loop *l = arg;
	uint64_t after = 0;
	while (after < l->last_v) {
		struct td_tensor *t = NULL;
		const uint8_t *p;
		uint64_t v;

		if (td_client_get_newer(l->c, "gn/mt", after, 5000, &t,
					NULL) < 0) {
			l->bad++;
			break;
		}
		v = td_tensor_version(t);
		p = td_tensor_plane_data(t, 0);
		if (v <= after || p[0] != (uint8_t)(v - l->v0) ||
		    p[4095] != (uint8_t)(v - l->v0))
			l->bad++;
		after = v;
		l->got++;
		td_tensor_release(t);
	}
	return NULL;
}

Test(follow, two_threads_loop_get_newer_on_one_handle)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct gn_loop l[2];
	pthread_t th[2];
	uint64_t v0, v = 0;

	pair_start(&d, small_cap, "pidfd", &prod, &cons);
	v0 = put(prod, "gn/mt", 4 * KIB, TD_ALLOC_STREAM, 0);
	for (int i = 0; i < 2; i++) {
		l[i] = (struct gn_loop){cons, v0, v0 + 400, 0, 0};
		cr_assert_eq(pthread_create(&th[i], NULL, gn_loop_run, &l[i]),
			     0);
	}
	for (unsigned i = 1; i <= 400; i++) {
		v = put(prod, "gn/mt", 4 * KIB, TD_ALLOC_STREAM, (uint8_t)i);
		cr_assert_eq(v, v0 + i, "versions of one name count by one");
		if (i % 8 == 0)
			usleep(200);
	}
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(pthread_join(th[i], NULL), 0);
		cr_assert_eq(l[i].bad, 0, "thread %d: %u bad of %u", i,
			     l[i].bad, l[i].got);
		cr_assert_gt(l[i].got, 0);
	}
	/* fds and buffer mappings (bells, rows, planes) are counted; not
	 * every mapping: glibc keeps the threads' stacks and arenas */
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, false);
}

/*
 * The follows get_newer makes by itself are spare (TD_WIRE_FOLLOW_SPARE):
 * 40 consumer handles looping on one name take at most half of its 64
 * rows (the others stay on the GET path, with the same results), so 32
 * explicit follows of the name still find a row.
 */
Test(follow, get_newer_follows_leave_half_the_rows_to_explicit_follows)
{
	struct tu_daemon d;
	struct td_client *prod, *cons[40], *ex;
	struct td_follow *f[33];
	struct td_error e = {0};
	uint64_t v0, v1;

	pair_start(&d, small_cap, "pidfd", &prod, &ex);
	v0 = put(prod, "gn/many", 64, TD_ALLOC_STREAM, 1);
	for (unsigned i = 0; i < 40; i++) {
		cons[i] = conn(&d, "pidfd");
		td_tensor_release(newer(cons[i], "gn/many", 0, 1000));
	}
	v1 = put(prod, "gn/many", 64, TD_ALLOC_STREAM, 2);
	for (unsigned i = 0; i < 40; i++) {
		struct td_tensor *t = newer(cons[i], "gn/many", v0, 1000);

		cr_assert_eq(td_tensor_version(t), v1);
		cr_assert(all_bytes(t, 2), "consumer %u", i);
		td_tensor_release(t);
	}
	for (unsigned i = 0; i < 32; i++)
		cr_assert_eq(td_client_follow(ex, "gn/many", &f[i], &e), 0,
			     "explicit follow %u: %s", i, e.reason);
	/* now every row is in use */
	cr_assert_eq(td_client_follow(ex, "gn/many", &f[32], &e), -EBUSY,
		     "%s", e.reason);
	for (unsigned i = 0; i < 32; i++)
		td_follow_close(f[i]);
	for (unsigned i = 0; i < 40; i++)
		td_client_close(cons[i]);
	pair_stop(&d, prod, ex);
}

/*
 * A spare follow counts only the spare follows (the rows they hold, the
 * bells they made): explicit follows holding half of a name's rows used
 * to send every get_newer of the name back to the GET path. Here 32
 * explicit rows leave a get_newer its row, so the explicit follower
 * finds 31 more rows, not 32.
 */
Test(follow, explicit_follows_leave_the_spare_half_of_the_rows)
{
	struct tu_daemon d;
	struct td_client *prod, *cons, *ex;
	struct td_follow *f[64];
	struct td_error e = {0};
	struct td_tensor *t;
	uint64_t v0, v1;

	pair_start(&d, small_cap, "pidfd", &prod, &ex);
	v0 = put(prod, "gn/half", 64, TD_ALLOC_STREAM, 1);
	for (unsigned i = 0; i < 32; i++)
		cr_assert_eq(td_client_follow(ex, "gn/half", &f[i], &e), 0,
			     "explicit follow %u: %s", i, e.reason);
	cons = conn(&d, "pidfd");
	td_tensor_release(newer(cons, "gn/half", 0, 1000));
	v1 = put(prod, "gn/half", 64, TD_ALLOC_STREAM, 2);
	/* the second call for the name follows it: a spare row */
	t = newer(cons, "gn/half", v0, 1000);
	cr_assert_eq(td_tensor_version(t), v1);
	cr_assert(all_bytes(t, 2));
	td_tensor_release(t);
	for (unsigned i = 32; i < 63; i++)
		cr_assert_eq(td_client_follow(ex, "gn/half", &f[i], &e), 0,
			     "explicit follow %u: %s", i, e.reason);
	cr_assert_eq(td_client_follow(ex, "gn/half", &f[63], &e), -EBUSY,
		     "get_newer's follow holds no row: %s", e.reason);
	for (unsigned i = 0; i < 63; i++)
		td_follow_close(f[i]);
	td_client_close(cons);
	pair_stop(&d, prod, ex);
}

/*
 * The same for the daemon's bells: 128 names followed explicitly leave
 * a get_newer of another name its bell (a spare follow makes one only
 * while spare follows made fewer than 128), so explicit follows find
 * 127 more bells, not 128.
 */
Test(follow, explicit_follows_leave_the_spare_half_of_the_bells)
{
	struct tu_daemon d;
	struct td_client *prod, *cons, *ex[5];
	struct td_follow *f[256];
	struct td_error e = {0};
	struct td_tensor *t;
	uint64_t v0, v1;
	unsigned i = 0;
	char n[32];
	int rc = 0;

	pair_start(&d, small_cap, "pidfd", &prod, &ex[0]);
	for (unsigned k = 1; k < 5; k++)
		ex[k] = conn(&d, "pidfd");
	/* 64 follows a connection: 128 names over two */
	for (; i < 128; i++) {
		snprintf(n, sizeof(n), "gb/e%u", i);
		cr_assert_eq(td_client_follow(ex[i / 64], n, &f[i], &e), 0,
			     "explicit follow %u: %s", i, e.reason);
	}
	v0 = put(prod, "gb/spare", 64, TD_ALLOC_STREAM, 1);
	cons = conn(&d, "pidfd");
	td_tensor_release(newer(cons, "gb/spare", 0, 1000));
	v1 = put(prod, "gb/spare", 64, TD_ALLOC_STREAM, 2);
	t = newer(cons, "gb/spare", v0, 1000);
	cr_assert_eq(td_tensor_version(t), v1);
	td_tensor_release(t);
	for (; i < 256 && rc == 0; i++) {
		snprintf(n, sizeof(n), "gb/e%u", i);
		rc = td_client_follow(ex[i / 64], n, &f[i], &e);
	}
	cr_assert_eq(rc, -ENOBUFS, "%s", e.reason);
	cr_assert(strstr(e.reason, "too many followed names"), "%s",
		  e.reason);
	cr_assert_eq(i, 256, "get_newer's follow made no bell: %u", i);
	for (unsigned k = 0; k < i - 1; k++)
		td_follow_close(f[k]);
	td_client_close(cons);
	for (unsigned k = 1; k < 5; k++)
		td_client_close(ex[k]);
	pair_stop(&d, prod, ex[0]);
}

/*
 * A child: after 200 ms, delete name and make it a ring, then publish
 * 0x5a into it every 5 ms until killed.
 */
static void become_ring(const struct tu_daemon *d, const char *name)
{
	struct td_client *c = NULL;
	struct td_ring *r = NULL;
	uint64_t size = 64;
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = &size};

	usleep(200000);
	if (td_client_connect(d->sock, &c, NULL) < 0 ||
	    td_client_delete(c, name, NULL, NULL) < 0 ||
	    td_ring_create(c, name, &desc, &r, NULL) < 0)
		_exit(1);
	for (;;) {
		struct td_slot s;

		if (td_ring_acquire(r, 1000, &s) < 0)
			_exit(2);
		memset(s.planes[0], 0x5a, 64);
		td_ring_publish(r, NULL);
		usleep(5000);
	}
}

/*
 * A get_newer waiting on its follow when the name is deleted and made a
 * ring goes on as the GET it stands for: the daemon serves a parked GET
 * a ring's versions, which no bell names.
 */
Test(follow, a_get_newer_riding_a_follow_sees_its_name_become_a_ring)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_tensor *t, *u = NULL;
	struct td_error e = {0};
	uint64_t v1;
	int status;
	pid_t pid;

	pair_start(&d, small_cap, "pidfd", &prod, &cons);
	v1 = put(prod, "gn/r", 64, TD_ALLOC_STREAM, 1);
	td_tensor_release(newer(cons, "gn/r", 0, 1000));
	/* followed from here */
	cr_assert_eq(td_client_get_newer(cons, "gn/r", v1, 0, &u, &e),
		     -ETIMEDOUT, "%s", e.reason);
	pid = tu_fork();
	if (pid == 0)
		become_ring(&d, "gn/r");
	t = newer(cons, "gn/r", v1, 20000);
	cr_assert_gt(td_tensor_version(t), v1);
	cr_assert(all_bytes(t, 0x5a));
	td_tensor_release(t);
	kill(pid, SIGKILL);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status), "the ring's producer failed (%d)",
		  status);
	pair_stop(&d, prod, cons);
}

/*
 * A client closed while a tensor get_newer took through its follow is
 * held: the tensor stays readable until released, and nothing leaks
 * (tu_daemon_stop counts fds and buffer mappings).
 */
Test(follow, a_client_closed_with_a_get_newer_tensor_held)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_tensor *t;
	uint64_t v = 0;

	pair_start(&d, small_cap, "scm", &prod, &cons);
	for (unsigned i = 0; i < 4; i++) {
		uint64_t w = put(prod, "gn/c", 4 * KIB, TD_ALLOC_STREAM,
				 (uint8_t)(i + 1));

		t = newer(cons, "gn/c", v, 1000);
		cr_assert_eq(td_tensor_version(t), w);
		v = w;
		if (i < 3)
			td_tensor_release(t);
	}
	td_client_close(cons);
	cr_assert(all_bytes(t, 4));
	td_tensor_release(t);
	put(prod, "gn/c", 4 * KIB, TD_ALLOC_STREAM, 9);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

/*
 * The follows get_newer made count toward the daemon's limit of follows
 * on one connection (64), so they give way: a handle whose get_newer
 * loops follow four names, two follows each, can still make all 64
 * follows it could make before get_newer followed by itself. The names
 * go back to the GET path and keep their results.
 */
Test(follow, get_newer_follows_give_way_to_explicit_follows)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_follow *f[64];
	struct td_tensor *t, *held[4];
	char name[32];
	uint64_t v[4];

	pair_start(&d, small_cap, "pidfd", &prod, &cons);
	for (unsigned n = 0; n < 4; n++) {
		snprintf(name, sizeof(name), "gn/way%u", n);
		v[n] = put(prod, name, 64, 0, 1);
		td_tensor_release(newer(cons, name, 0, 1000));
		/* the first follow, held; then the second */
		put(prod, name, 64, 0, 2);
		held[n] = newer(cons, name, v[n], 1000);
		v[n] = td_tensor_version(held[n]);
		put(prod, name, 64, 0, 3);
		t = newer(cons, name, v[n], 1000);
		v[n] = td_tensor_version(t);
		td_tensor_release(t);
		td_tensor_release(held[n]);
	}
	for (unsigned i = 0; i < 64; i++)
		f[i] = follow(cons, "gn/wayx");
	for (unsigned n = 0; n < 4; n++) {
		snprintf(name, sizeof(name), "gn/way%u", n);
		put(prod, name, 64, 0, 4);
		t = newer(cons, name, v[n], 1000);
		cr_assert(td_tensor_version(t) > v[n] && all_bytes(t, 4));
		td_tensor_release(t);
	}
	for (unsigned i = 0; i < 64; i++)
		td_follow_close(f[i]);
	pair_stop(&d, prod, cons);
}

/*
 * TD_CLIENT_RECONNECT: the daemon a get_newer loop followed through goes
 * and another comes on the same path. The loop sees what the GET path
 * shows: the call that finds the daemon gone fails, also a poll with
 * timeout 0 (which found nothing newer on the bell nobody writes and
 * said -ETIMEDOUT, call after call, never reconnecting), and a later
 * one reconnects; it follows again on the new connection with the new
 * daemon's versions and bytes; the old follows leave no fd or mapping.
 */
static void get_newer_across_a_restart(const char *import)
{
	struct tu_daemon d1, d2;
	struct td_client *c, *p;
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	struct td_ring *r;
	char link[64];
	int fds0 = tu_fd_count(), maps0 = tu_buf_map_count(), st, rc;
	uint64_t v = 0;

	snprintf(link, sizeof(link), "/tmp/td-gn-restart-%d.sock",
		 (int)getpid());
	tu_daemon_start_args(&d1, "warn", small_cap);
	tu_link_to(link, d1.sock);
	cr_assert_eq(setenv("TENSORD_IMPORT", import, 1), 0);
	cr_assert_eq(td_client_connect_ex(link, TD_CLIENT_RECONNECT, &c, &e),
		     0, "%s", e.reason);
	p = conn(&d1, "pidfd");
	for (unsigned i = 1; i <= 3; i++) {
		uint64_t w = put(p, "gn/rs", 4 * KIB, TD_ALLOC_STREAM,
				 (uint8_t)i);

		t = newer(c, "gn/rs", v, 1000);
		cr_assert(td_tensor_version(t) == w && all_bytes(t, (uint8_t)i));
		td_tensor_release(t);
		v = w;
	}
	td_client_close(p);
	cr_assert_eq(kill(d1.pid, SIGKILL), 0);
	cr_assert_eq(waitpid(d1.pid, &st, 0), d1.pid);
	unlink(d1.sock);
	rmdir(d1.dir);
	rc = td_client_get_newer(c, "gn/rs", v, 0, &t, &e);
	cr_assert(rc == -ECONNRESET || rc == -EPIPE, "%d %s", rc, e.reason);

	tu_daemon_start_args(&d2, "warn", small_cap);
	tu_link_to(link, d2.sock);
	p = conn(&d2, "pidfd");
	v = 0;
	for (unsigned i = 1; i <= 4; i++) {
		uint64_t w = put(p, "gn/rs", 4 * KIB, TD_ALLOC_STREAM,
				 (uint8_t)(0x40 + i));

		t = newer(c, "gn/rs", v, 1000);
		cr_assert(td_tensor_version(t) == w &&
				  all_bytes(t, (uint8_t)(0x40 + i)),
			  "turn %u: version %llu", i,
			  (unsigned long long)td_tensor_version(t));
		td_tensor_release(t);
		v = w;
	}
	/* followed again: a handoff is the PUBLISH alone (and RING_STAT) */
	r = counter_ring(p, "gn/counter");
	followed_handoff(p, c, "gn/rs", v);
	td_ring_close(r);
	td_client_close(c);
	td_client_close(p);
	/* not tu_daemon_stop: c was open when d2 started */
	cr_assert_eq(kill(d2.pid, SIGTERM), 0);
	st = tu_wait_child(d2.pid, TU_WAIT_S, "tensord after SIGTERM");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
	unlink(d2.sock);
	rmdir(d2.dir);
	unlink(link);
	cr_assert_eq(tu_fd_count(), fds0);
	cr_assert_eq(tu_buf_map_count(), maps0);
}

Test(follow, a_get_newer_loop_goes_on_after_a_daemon_restart)
{
	get_newer_across_a_restart("auto");
}

/*
 * The same for a consumer on SCM_RIGHTS, whose GET names the buffers it
 * has mapped (held ids): the GET that reconnects names none of the old
 * daemon's, whose buffer ids the new daemon uses again for other
 * buffers (it left buffer 1 out, "which is not mapped here").
 */
Test(follow, a_get_newer_loop_goes_on_after_a_daemon_restart_scm)
{
	get_newer_across_a_restart("scm");
}
