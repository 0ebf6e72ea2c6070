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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tensord/tensord.h"
#include "testutil.h"

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

static uint64_t daemon_requests(struct td_client *c, const char *ring)
{
	struct td_ring_stat st;
	struct td_error e = {0};

	cr_assert_eq(td_client_ring_stat(c, ring, &st, &e), 0, "%s",
		     e.reason);
	return st.daemon_requests;
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

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = conn(&d, import);
	cons = conn(&d, import);
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
			before = daemon_requests(prod, "fw/counter");
		}
	}
	/* one per handoff, and the RING_STAT that reads the count */
	cr_assert_eq(daemon_requests(prod, "fw/counter") - before, 101);
	cr_assert_eq(tu_fd_count(), fds);
	cr_assert_eq(tu_buf_map_count(), maps);
	td_follow_close(f);
	td_ring_close(r);
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
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

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = conn(&d, "pidfd");
	cons = conn(&d, "pidfd");
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
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
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

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = conn(&d, "scm");
	cons = conn(&d, "scm");
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
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
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

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = conn(&d, "pidfd");
	cons = conn(&d, "pidfd");
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
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
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

/*
 * A ping-pong between two processes that each follow the other's name
 * and always sleep at once (TENSORD_RING_SPIN_US=0): every round both
 * sides sleep, and only the daemon's wake-up at the other's PUBLISH
 * wakes them. A lost wake-up costs a follower its whole sleep slice
 * (1 s: it then looks at its connection and finds the version), so 500
 * rounds with wake-ups dropped take over 500 s and the test's timeout
 * fails them; every round must also see exactly its own version.
 */
Test(follow, no_wake_up_is_lost, .timeout = 120)
{
	const unsigned rounds = 500;
	struct tu_daemon d;
	struct td_client *c;
	struct td_follow *f;
	int status;
	pid_t pid;

	cr_assert_eq(setenv("TENSORD_RING_SPIN_US", "0", 1), 0);
	tu_daemon_start_args(&d, "warn", small_cap);
	c = conn(&d, "pidfd");
	f = follow(c, "fw/pong");
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		echo_run(&d, rounds);
	for (unsigned i = 1; i <= rounds; i++) {
		struct td_tensor *t;

		put(c, "fw/ping", 64, TD_ALLOC_STREAM, (uint8_t)i);
		t = next(f, -1);
		cr_assert(all_bytes(t, (uint8_t)i), "round %u", i);
		td_tensor_release(t);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the echo failed (status %d)", status);
	unsetenv("TENSORD_RING_SPIN_US");
	td_follow_close(f);
	td_client_close(c);
	tu_daemon_stop(&d, true);
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
	pid = fork();
	cr_assert_geq(pid, 0);
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
	for (int i = 0; i < 200; i++) {
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

/*
 * A followed name's current version is not evicted to make room (a
 * follower may be reading it); without the follow it is.
 */
Test(follow, a_followed_version_is_not_evicted)
{
	static const char *const cap[] = {"--max-bytes", "1M", NULL};
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_follow *f;
	struct td_alloc *a = NULL;
	struct td_error e = {0};
	uint64_t big = 700 * KIB;

	tu_daemon_start_args(&d, "warn", cap);
	prod = conn(&d, "pidfd");
	cons = conn(&d, "pidfd");
	put(prod, "fw/a", big, 0, 1);
	f = follow(cons, "fw/a");
	cr_assert_eq(td_client_alloc(prod, 1, &big, &a, &e), -ENOSPC,
		     "the followed version was evicted");
	td_follow_close(f);
	cr_assert_eq(td_client_alloc(prod, 1, &big, &a, &e), 0,
		     "unfollowed, it is evicted: %s", e.reason);
	td_alloc_free(a);
	td_client_close(cons);
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

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = conn(&d, "pidfd");
	cons = conn(&d, "pidfd");
	r = counter_ring(prod, "fw/ring");
	cr_assert_eq(td_client_follow(cons, "fw/ring", &f, &e), -EINVAL);
	cr_assert(strstr(e.reason, "ring"), "%s", e.reason);
	cr_assert_eq(td_client_follow(cons, "../x", &f, &e), -EINVAL, "%s",
		     e.reason);
	f = follow(cons, "fw/x");
	put(prod, "fw/x", 64, TD_ALLOC_STREAM, 9);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct td_tensor *ct = NULL;

		_exit(td_follow_next(f, 0, &ct, NULL) == -ECHILD ? 0 : 1);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "a child of fork() used the parent's follow");
	t = next(f, 0);
	cr_assert(all_bytes(t, 9), "the child did not take the parent's");
	td_tensor_release(t);
	td_follow_close(f);
	td_ring_close(r);
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
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
	pid = fork();
	cr_assert_geq(pid, 0);
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
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the follower did not hear the daemon go (status %d)",
		  status);
}
