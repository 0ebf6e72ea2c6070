/* SPDX-License-Identifier: MIT */
/*
 * Several names in one step of the daemon (docs/protocol.md §6.10):
 * td_client_publish_many() commits all its loans or none, in one step,
 * and td_client_get_many() leases the current versions of its names at
 * one instant, so a reader never pairs an image with the label of
 * another step. A raw client sends what libtensord refuses before it
 * asks (a name twice, an alloc of no one's). td_client_get_many_newer()
 * waits for the next such step (TD_WIRE_FEAT_MANY_WAIT). tu_daemon_stop()
 * checks that this process's fds and memfd mappings are back.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "blob.h"
#include "client.h"
#include "rawclient.h"
#include "tensord/ring.h"
#include "tensord/tensord.h"
#include "testchild.h"
#include "testclient.h"
#include "policyfile.h"
#include "testutil.h"
#include "wire.h"

TestSuite(atomic, .timeout = TU_TEST_TIMEOUT_S);

#define SIZE 64u
#define NOBODY 65534

static struct td_client *connect_to(const struct tu_daemon *d)
{
	struct td_client *c = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_connect(d->sock, &c, &e), 0, "%s", e.reason);
	return c;
}

/* A loan of SIZE bytes, each byte `fill`, recyclable with `flags`. */
static struct td_alloc *loan(struct td_client *c, uint32_t flags,
			     uint8_t fill)
{
	uint64_t size = SIZE;
	struct td_alloc *a = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_alloc_ex(c, 1, &size, flags, &a, &e), 0, "%s",
		     e.reason);
	memset(td_alloc_data(a, 0), fill, SIZE);
	return a;
}

static struct td_publish desc(const char *name)
{
	static const uint64_t shape[1] = {SIZE};

	return (struct td_publish){.name = name, .dtype = TD_DTYPE_U8,
				   .ndim = 1, .shape = shape};
}

/* The byte every byte of t is (asserted alike). */
static uint8_t byte_of(const struct td_tensor *t)
{
	const uint8_t *p = td_tensor_plane_data(t, 0);

	cr_assert_not_null(p);
	cr_assert_eq(td_tensor_plane_size(t, 0), SIZE);
	for (uint32_t i = 1; i < SIZE; i++)
		cr_assert_eq(p[i], p[0], "byte %u of the tensor", i);
	return p[0];
}

Test(atomic, publish_many_commits_every_loan_and_get_many_reads_them)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_alloc *a[3];
	struct td_publish p[3] = {desc("cam/image"), desc("cam/label"),
				  desc("cam/depth")};
	const char *names[3] = {"cam/image", "cam/label", "cam/depth"};
	struct td_tensor *t[3];
	struct td_error e = {0};
	uint64_t v[3];

	tu_daemon_start(&d, "warn");
	c = connect_to(&d);
	/* a plain loan, a recyclable one and a stream's */
	a[0] = loan(c, 0, 1);
	a[1] = loan(c, TD_ALLOC_RECYCLE, 2);
	a[2] = loan(c, TD_ALLOC_STREAM, 3);
	cr_assert_eq(td_client_publish_many(c, 3, a, p, v, &e), 0, "%s",
		     e.reason);
	cr_assert(v[0] < v[1] && v[1] < v[2], "versions %llu %llu %llu",
		  (unsigned long long)v[0], (unsigned long long)v[1],
		  (unsigned long long)v[2]);
	cr_assert_eq(td_client_get_many(c, 3, names, t, &e), 0, "%s",
		     e.reason);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(td_tensor_version(t[i]), v[i]);
		cr_assert_eq(byte_of(t[i]), i + 1);
		td_tensor_release(t[i]);
	}
	/* the stream's next loan: no lent one, an ALLOC as ever */
	a[0] = loan(c, TD_ALLOC_STREAM, 4);
	cr_assert_eq(td_client_publish_alloc(c, a[0], &p[2], &v[0], &e), 0,
		     "%s", e.reason);
	cr_assert_gt(v[0], v[2]);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/*
 * Over SCM_RIGHTS both ways: an element with a fence attaches its fd
 * table (the loan's plane and the fence), the other none; GET_MANY's
 * reply attaches both elements' fd tables, the fence's in its place.
 */
Test(atomic, publish_many_and_get_many_over_scm_with_a_fence)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_alloc *a[2];
	struct td_publish p[2] = {desc("scm/fenced"), desc("scm/plain")};
	const char *names[2] = {"scm/fenced", "scm/plain"};
	struct td_client_info info;
	struct td_tensor *t[2];
	struct td_error e = {0};
	uint64_t one = 1, v[2];
	int efd;

	cr_assert_eq(setenv("TENSORD_IMPORT", "scm", 1), 0);
	tu_daemon_start(&d, "warn");
	efd = eventfd(0, EFD_CLOEXEC);
	cr_assert_geq(efd, 0);
	c = connect_to(&d);
	cr_assert_eq(td_client_info(c, &info), 0);
	cr_assert_eq(info.path_in, TD_CLIENT_PATH_SCM);
	p[0].flags = TD_PUBLISH_FENCE;
	p[0].fence_fd = efd;
	a[0] = loan(c, 0, 5);
	a[1] = loan(c, TD_ALLOC_RECYCLE, 6);
	cr_assert_eq(td_client_publish_many(c, 2, a, p, v, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(write(efd, &one, sizeof(one)), (ssize_t)sizeof(one));
	cr_assert_eq(td_client_get_many(c, 2, names, t, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_tensor_has_fence(t[0]), 1);
	cr_assert_eq(td_tensor_fence_wait(t[0], TU_WAIT_S * 1000), 0);
	cr_assert_eq(td_tensor_has_fence(t[1]), 0);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(td_tensor_version(t[i]), v[i]);
		cr_assert_eq(byte_of(t[i]), 5 + i);
		td_tensor_release(t[i]);
	}
	close(efd);
	td_client_close(c);
	unsetenv("TENSORD_IMPORT");
	tu_daemon_stop(&d, true);
}

Test(atomic, get_many_of_a_missing_name_leases_nothing)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_alloc *a;
	struct td_publish p = desc("gm/here");
	const char *names[2] = {"gm/here", "gm/gone"};
	struct td_tensor *t[2] = {(void *)1, (void *)1};
	struct td_status *st = NULL;
	struct td_error e = {0};

	tu_daemon_start(&d, "warn");
	c = connect_to(&d);
	a = loan(c, 0, 7);
	cr_assert_eq(td_client_publish_alloc(c, a, &p, NULL, &e), 0);
	cr_assert_eq(td_client_get_many(c, 2, names, t, &e), -ENOENT);
	cr_assert(strstr(e.reason, "element 1 (\"gm/gone\")"), "%s",
		  e.reason);
	cr_assert_null(t[0]);
	cr_assert_null(t[1]);
	/* no lease was left on gm/here */
	cr_assert_eq(td_client_status(c, &st, NULL), 0);
	for (size_t k = 0; k < st->client_count; k++)
		cr_assert_eq(st->clients[k].leases, 0);
	td_status_free(st);
	/* a name twice is the library's refusal before it asks */
	names[1] = "gm/here";
	cr_assert_eq(td_client_get_many(c, 2, names, t, &e), -EINVAL);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* ---- refusals: nothing published, every alloc still the caller's ---- */

Test(atomic, a_bad_element_publishes_nothing_and_keeps_the_allocs)
{
	struct tu_daemon d;
	struct td_client *c;
	const char *names[2] = {"raw/a", "raw/b"};
	uint64_t allocs[2];
	char why[TD_WIRE_MAX_REASON + 1];
	int sock;

	tu_daemon_start(&d, "warn");
	c = connect_to(&d);
	sock = raw_scm_conn_feat(&d, TD_WIRE_FEAT_MANY);
	allocs[0] = raw_alloc_one(sock, 2, SIZE);
	allocs[1] = allocs[0] + 1000; /* no alloc of this connection */
	cr_assert_eq(raw_pub_many(sock, SIZE, 3, 2, names, allocs, why,
				  sizeof(why)),
		     -ENOENT, "%s", why);
	cr_assert(strstr(why, "element 1 (\"raw/b\")"), "%s", why);
	tc_assert_absent(c, "raw/a");
	/* the same name twice */
	allocs[1] = raw_alloc_one(sock, 4, SIZE);
	names[1] = "raw/a";
	cr_assert_eq(raw_pub_many(sock, SIZE, 5, 2, names, allocs, why,
				  sizeof(why)),
		     -EINVAL, "%s", why);
	cr_assert(strstr(why, "element 1 (\"raw/a\")"), "%s", why);
	/* the same alloc twice */
	names[1] = "raw/b";
	allocs[1] = allocs[0];
	cr_assert_eq(raw_pub_many(sock, SIZE, 6, 2, names, allocs, why,
				  sizeof(why)),
		     -EINVAL, "%s", why);
	cr_assert(strstr(why, "alloc"), "%s", why);
	tc_assert_absent(c, "raw/a");
	tc_assert_absent(c, "raw/b");
	/* both allocs are still the connection's: published now */
	allocs[1] = allocs[0] + 1;
	cr_assert_eq(raw_pub_many(sock, SIZE, 7, 2, names, allocs, why,
				  sizeof(why)),
		     0, "%s", why);
	close(sock);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

Test(atomic, a_publish_many_past_the_byte_cap_publishes_nothing)
{
	const char *args[] = {"--max-bytes", "24K", NULL};
	static char meta[16 * 1024];
	struct tu_daemon d;
	struct td_client *c;
	struct td_alloc *a[2];
	struct td_publish p[2] = {desc("q/a"), desc("q/b")};
	struct td_error e = {0};
	int fds0;

	tu_daemon_start_args(&d, "warn", args);
	c = connect_to(&d);
	fds0 = tu_fd_count();
	/* 16 KiB of metadata each, charged as plane bytes: one fits the
	 * cap, both do not */
	memset(meta, 'm', sizeof(meta));
	for (int i = 0; i < 2; i++) {
		p[i].meta = meta;
		p[i].meta_len = 15 * 1024;
	}
	a[0] = loan(c, 0, 1);
	a[1] = loan(c, 0, 2);
	{
		int rc = td_client_publish_many(c, 2, a, p, NULL, &e);

		cr_assert_eq(rc, -ENOSPC, "%d %s", rc, e.reason);
	}
	cr_assert(strstr(e.reason, "nothing published"), "%s", e.reason);
	tc_assert_absent(c, "q/a");
	tc_assert_absent(c, "q/b");
	/* the loans were consumed, their fds and mappings with them */
	cr_assert_eq(tu_fd_count(), fds0);
	/* one alone fits */
	a[0] = loan(c, 0, 1);
	cr_assert_eq(td_client_publish_many(c, 1, a, p, NULL, &e), 0, "%s",
		     e.reason);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* As user nobody, allowed pol/ok/ only: one refused name of two. */
static void refused_child(const struct tu_daemon *d, void *arg)
{
	struct td_alloc *a[2];
	struct td_publish p[2] = {desc("pol/ok/a"), desc("pol/no/b")};
	const char *names[2] = {"pol/ok/a", "pol/no/b"};
	struct td_tensor *t[2];
	struct td_error e = {0};
	struct td_client *c;
	uint64_t size = SIZE;

	(void)arg;
	CK(setgid(NOBODY) == 0);
	CK(setuid(NOBODY) == 0);
	c = open_client(d);
	for (int i = 0; i < 2; i++)
		CK(td_client_alloc_ex(c, 1, &size, 0, &a[i], NULL) == 0);
	CK_EQ(td_client_publish_many(c, 2, a, p, NULL, &e), -EACCES);
	CK(strstr(e.reason, "element 1 (\"pol/no/b\")"));
	CK_EQ(td_client_get(c, "pol/ok/a", &t[0], NULL), -ENOENT);
	CK_EQ(td_client_get_many(c, 2, names, t, &e), -EACCES);
	CK(strstr(e.reason, "element 1"));
	td_client_close(c);
}

Test(atomic, a_name_the_policy_refuses_publishes_nothing)
{
	char policy[64];
	const char *args[] = {"--socket-mode", "0666", "--policy", policy,
			      NULL};
	struct tu_daemon d;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	tu_policy_file(policy, sizeof(policy), "atomic",
		       "allow uid=%u rw pol/ok/\n", NOBODY);
	tu_daemon_start_args(&d, "warn", args);
	cr_assert_eq(chmod(d.dir, 0755), 0);
	cr_assert_eq(reap(spawn(&d, refused_child, NULL)), 0);
	tu_daemon_stop(&d, true);
	unlink(policy);
}

/* ---- a reader of pairs never sees two steps mixed ---- */

#define STEPS 1500

struct pair_run {
	const struct tu_daemon *d;
	atomic_bool done;
	unsigned reads, mixed, steps_seen;
};

static void *pair_writer(void *arg)
{
	struct pair_run *r = arg;
	struct td_client *c = connect_to(r->d);
	struct td_publish p[2] = {desc("pair/image"), desc("pair/label")};
	struct td_error e = {0};

	for (unsigned s = 1; s <= STEPS; s++) {
		struct td_alloc *a[2];

		/* both carry the step number (mod 256) */
		a[0] = loan(c, TD_ALLOC_RECYCLE, (uint8_t)s);
		a[1] = loan(c, TD_ALLOC_RECYCLE, (uint8_t)s);
		cr_assert_eq(td_client_publish_many(c, 2, a, p, NULL, &e), 0,
			     "%s", e.reason);
	}
	atomic_store(&r->done, true);
	td_client_close(c);
	return NULL;
}

Test(atomic, get_many_never_pairs_versions_of_two_publish_manys)
{
	const char *names[2] = {"pair/image", "pair/label"};
	struct pair_run r = {0};
	struct tu_daemon d;
	struct td_client *c;
	struct td_error e = {0};
	pthread_t th;
	int last = -1;

	tu_daemon_start(&d, "warn");
	r.d = &d;
	c = connect_to(&d);
	cr_assert_eq(pthread_create(&th, NULL, pair_writer, &r), 0);
	while (!atomic_load(&r.done)) {
		struct td_tensor *t[2];
		int rc = td_client_get_many(c, 2, names, t, &e);

		if (rc == -ENOENT)
			continue; /* before the first step */
		cr_assert_eq(rc, 0, "%s", e.reason);
		r.reads++;
		if (byte_of(t[0]) != byte_of(t[1]))
			r.mixed++;
		if (byte_of(t[0]) != last)
			r.steps_seen++;
		last = byte_of(t[0]);
		td_tensor_release(t[0]);
		td_tensor_release(t[1]);
	}
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(r.mixed, 0, "%u of %u reads paired two steps", r.mixed,
		     r.reads);
	/* the reads did overlap the writes: more than one step was seen */
	cr_assert_gt(r.steps_seen, 1, "%u reads saw %u steps", r.reads,
		     r.steps_seen);
	td_client_close(c);
	/* (the writer thread's cached stack stays mapped; its memfd
	 * mappings are checked all the same) */
	tu_daemon_stop(&d, false);
}

Test(atomic, watchers_get_every_event_of_a_publish_many_in_order)
{
	struct tu_daemon d;
	struct td_client *c, *w;
	struct td_alloc *a[3];
	struct td_publish p[3] = {desc("ev/x"), desc("ev/y"), desc("ev/z")};
	struct td_error e = {0};
	uint64_t v[3];

	tu_daemon_start(&d, "warn");
	c = connect_to(&d);
	w = connect_to(&d);
	cr_assert_eq(td_client_watch(w, "ev/", TD_WATCH_PREFIX, NULL, &e), 0);
	for (int i = 0; i < 3; i++)
		a[i] = loan(c, 0, (uint8_t)i);
	cr_assert_eq(td_client_publish_many(c, 3, a, p, v, &e), 0, "%s",
		     e.reason);
	for (int i = 0; i < 3; i++) {
		struct td_event ev;

		cr_assert_eq(td_client_next_event(w, TU_WAIT_S * 1000, &ev,
						  &e),
			     0, "%s", e.reason);
		cr_assert_eq(ev.type, TD_EVENT_TYPE_PUBLISHED);
		cr_assert_str_eq(ev.name, p[i].name);
		cr_assert_eq(ev.version, v[i]);
	}
	td_client_close(w);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

Test(atomic, a_daemon_without_the_feature_bit_gets_eopnotsupp)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_alloc *a[1];
	struct td_publish p[1] = {desc("old/a")};
	const char *names[1] = {"old/a"};
	struct td_tensor *t[1];
	struct td_error e = {0};
	int fds0;

	tu_daemon_start(&d, "warn");
	c = connect_to(&d);
	/* as if the daemon's HELLO predated TD_WIRE_FEAT_MANY */
	c->hello.features &= ~TD_WIRE_FEAT_MANY;
	fds0 = tu_fd_count();
	a[0] = loan(c, 0, 1);
	cr_assert_eq(td_client_publish_many(c, 1, a, p, NULL, &e),
		     -EOPNOTSUPP);
	cr_assert_eq(tu_fd_count(), fds0, "the loan was not consumed");
	cr_assert_eq(td_client_get_many(c, 1, names, t, &e), -EOPNOTSUPP);
	cr_assert_null(t[0]);
	tc_assert_absent(c, "old/a");
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* ---- a process that gained privileges: the pull refused, then SCM ---- */

/*
 * As user nobody with its capabilities kept, connected (the daemon may
 * pull from it), then root again, as after a setuid exec: the daemon
 * refuses to pull the fence of a PUBLISH_MANY element (-EPERM, nothing
 * published), and the library sends the request again with the fds
 * attached, as it does a PUBLISH's (test-hostile.c).
 */
static void gained_child(const struct tu_daemon *d, void *arg)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct cap[2];
	struct td_alloc *a[2];
	struct td_publish p[2] = {desc("gain/fenced"), desc("gain/plain")};
	const char *names[2] = {"gain/fenced", "gain/plain"};
	struct td_tensor *t[2];
	struct td_error e = {0};
	struct td_client *c;
	uint64_t size = SIZE, v[2];
	int efd;

	(void)arg;
	CK(prctl(PR_SET_KEEPCAPS, 1) == 0);
	CK(setgroups(0, NULL) == 0);
	CK(setresgid(NOBODY, NOBODY, NOBODY) == 0);
	CK(setresuid(NOBODY, NOBODY, NOBODY) == 0);
	CK(prctl(PR_SET_DUMPABLE, 1) == 0);
	c = open_client(d);
	CK_EQ(c->path_in, TD_IMPORT_PIDFD);
	for (int i = 0; i < 2; i++) {
		CK(td_client_alloc_ex(c, 1, &size, 0, &a[i], NULL) == 0);
		memset(td_alloc_data(a[i], 0), 0x40 + i, SIZE);
	}
	/* root again, through the kept capabilities */
	CK(syscall(SYS_capget, &h, cap) == 0);
	cap[0].effective = cap[0].permitted;
	cap[1].effective = cap[1].permitted;
	CK(syscall(SYS_capset, &h, cap) == 0);
	CK(setresgid(0, 0, 0) == 0);
	CK(setresuid(0, 0, 0) == 0);
	efd = eventfd(1, EFD_CLOEXEC); /* signalled */
	CK(efd >= 0);
	p[0].flags = TD_PUBLISH_FENCE;
	p[0].fence_fd = efd;
	CK_EQ(td_client_publish_many(c, 2, a, p, v, &e), 0);
	CK_EQ(c->path_in, TD_IMPORT_SCM);
	CK_EQ(td_client_get_many(c, 2, names, t, &e), 0);
	for (int i = 0; i < 2; i++) {
		CK_EQ(td_tensor_version(t[i]), v[i]);
		CK_EQ(((const uint8_t *)td_tensor_plane_data(t[i], 0))[0],
		      0x40 + i);
		td_tensor_release(t[i]);
	}
	close(efd);
	td_client_close(c);
}

Test(atomic, a_refused_pull_is_sent_again_with_the_fds_attached)
{
	const char *args[] = {"--socket-mode", "0666", NULL};
	struct tu_daemon d;

	if (geteuid() != 0)
		cr_skip_test("needs root to change credentials in a child");
	tu_daemon_start_args(&d, "warn", args);
	cr_assert_eq(chmod(d.dir, 0755), 0);
	cr_assert_eq(reap(spawn(&d, gained_child, NULL)), 0);
	tu_daemon_stop(&d, true);
}

/* ---- hostile many requests: the daemon's fds and counts come back ---- */

static uint64_t clients_total(const struct td_status *st)
{
	return st->clients_total;
}

/* The daemon's descriptor count once it is at most want: a bounded wait
 * (a hang guard), since the daemon closes big buffers and a gone peer's
 * descriptors on its closer thread (docs/architecture.md, "Threads"),
 * after the hang-up is served. The last count seen. A baseline may hold
 * one fd more than the daemon's rest: the probe fd its closer thread
 * pulled from a client's HELLO, closed a moment later. */
static int daemon_fds_until(pid_t pid, int want)
{
	int n = tu_pid_fd_count(pid);

	for (int i = 0; i < TU_WAIT_S * 200 && n > want; i++) {
		usleep(5000);
		n = tu_pid_fd_count(pid);
	}
	return n;
}

/* Once c is the daemon's only client (the others' hang-ups served: a
 * bounded wait), the tensors it holds. */
static int tensors_when_alone(struct td_client *c)
{
	struct td_status *st = NULL;
	int tensors;

	cr_assert_eq(tc_status_until(c, clients_total, 1), 1,
		     "the other clients are still there");
	cr_assert_eq(td_client_status(c, &st, NULL), 0);
	tensors = (int)st->tensors;
	td_status_free(st);
	return tensors;
}

/* The leases of the client rows of pid (STATUS as root: every row). */
static uint32_t leases_of(struct td_client *c, pid_t pid)
{
	struct td_status *st = NULL;
	uint32_t n = 0;

	cr_assert_eq(td_client_status(c, &st, NULL), 0);
	for (size_t k = 0; k < st->client_count; k++)
		if (st->clients[k].pid == (uint32_t)pid)
			n += st->clients[k].leases;
	td_status_free(st);
	return n;
}

/* GET_MANY of names[0..n) with flags: the reply's status (its fds closed) */
static int32_t raw_get_many(int sock, uint64_t id, uint32_t flags, uint32_t n,
			    const char *const *names)
{
	struct td_wire_get_many_req q = {.flags = flags, .count = n};
	struct rawrep r;
	int32_t st;

	for (uint32_t i = 0; i < n; i++)
		q.names[i] = (struct td_wire_str){names[i], strlen(names[i])};
	st = raw_call(sock, TD_OP_GET_MANY, id,
		      td_wire_get_many_req_encode(&q, RAW_BODY, RAW_CAP), &r);
	td__scm_close(r.fds, r.nfds);
	return st;
}

#define NMANY TD_WIRE_MANY_MAX
/* leases one connection may hold (docs/protocol.md §4) */
#define LEASE_CAP 4096

static char many_names[NMANY][16];
static const char *many_ptrs[NMANY];

/* NMANY names published by c in one step */
static void publish_many_names(struct td_client *c, const char *fmt)
{
	struct td_alloc *a[NMANY];
	struct td_publish p[NMANY];
	struct td_error e = {0};

	for (int i = 0; i < NMANY; i++) {
		snprintf(many_names[i], sizeof(many_names[i]), fmt, i);
		many_ptrs[i] = many_names[i];
		p[i] = desc(many_names[i]);
		a[i] = loan(c, 0, (uint8_t)i);
	}
	cr_assert_eq(td_client_publish_many(c, NMANY, a, p, NULL, &e), 0,
		     "%s", e.reason);
}

Test(atomic, get_many_up_to_the_connection_lease_cap_is_all_or_none)
{
	struct tu_daemon d;
	struct td_client *c;
	uint64_t id = 10;
	int sock, fds0;

	tu_daemon_start(&d, "warn");
	c = connect_to(&d);
	publish_many_names(c, "cap/%d");
	sock = raw_scm_conn_feat(&d, TD_WIRE_FEAT_MANY);
	fds0 = tu_pid_fd_count(d.pid);
	/* 4096 leases: 64 GET_MANYs of 64 */
	for (int k = 0; k < LEASE_CAP / NMANY; k++)
		cr_assert_eq(raw_get_many(sock, id++, 0, NMANY, many_ptrs), 0);
	cr_assert_eq(leases_of(c, getpid()), LEASE_CAP);
	cr_assert_eq(raw_get_many(sock, id++, 0, 1, many_ptrs), -ENOBUFS);
	cr_assert_eq(raw_get_many(sock, id++, TD_WIRE_REQ_SCM, 2, many_ptrs),
		     -ENOBUFS);
	cr_assert_eq(leases_of(c, getpid()), LEASE_CAP);
	close(sock);
	/* every lease goes with the connection */
	for (int k = 0; leases_of(c, getpid()) && k < TU_WAIT_S * 1000; k++)
		usleep(1000);
	cr_assert_eq(leases_of(c, getpid()), 0);
	cr_assert_leq(tu_pid_fd_count(d.pid), fds0);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* A PUBLISH_MANY of n elements with bodies[i] and fds attached (att[i]
 * each, in order): the reply's status, its reason in why. */
static int32_t raw_pub_many_fds(int sock, uint64_t id, uint32_t n,
				uint8_t (*bodies)[1024], const int64_t *lens,
				const uint32_t *att, const int *fds,
				unsigned nfds, char *why, size_t cap)
{
	struct td_wire_publish_many_req q = {.count = n};
	struct rawrep r;
	int64_t len;

	for (uint32_t i = 0; i < n; i++) {
		cr_assert_gt(lens[i], 0);
		q.el[i].attached = att[i];
		q.el[i].body = (struct td_wire_bytes){bodies[i],
						      (uint32_t)lens[i]};
	}
	len = td_wire_publish_many_req_encode(&q, RAW_BODY, RAW_CAP);
	cr_assert_gt(len, 0);
	{
		struct td_wire_hdr h = {TD_WIRE_MAGIC, TD_WIRE_VERSION,
					TD_OP_PUBLISH_MANY, 0, nfds, id,
					(uint32_t)len, 0};

		td_wire_hdr_encode(&h, rawbuf);
		cr_assert_eq(td__scm_send(sock, rawbuf,
					  TD_WIRE_HDR_LEN + (size_t)len, fds,
					  nfds, 0),
			     (ssize_t)(TD_WIRE_HDR_LEN + len));
	}
	raw_recv(sock, &r);
	cr_assert_eq(r.h.request_id, id);
	raw_reason(&r, why, cap);
	return r.h.status;
}

static int memfd_of(uint64_t size, bool sealed)
{
	int fd = memfd_create("td-atomic", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	if (sealed)
		cr_assert_eq(fcntl(fd, F_ADD_SEALS,
				   F_SEAL_SHRINK | F_SEAL_GROW),
			     0);
	return fd;
}

/*
 * Elements whose own fds (no alloc) are of the wrong kind: a pipe, a
 * socket, a memfd too small for its plane. Each is refused, nothing is
 * published, the allocs of the other elements stay the connection's
 * and the daemon holds no descriptor more than before.
 */
Test(atomic, elements_with_fds_of_the_wrong_kind_publish_nothing)
{
	static uint8_t bodies[NMANY][1024];
	int64_t lens[NMANY];
	uint32_t att[NMANY] = {0};
	char why[TD_WIRE_MAX_REASON + 1];
	char names[NMANY][16];
	uint64_t allocs[NMANY - 1];
	struct tu_daemon d;
	struct td_client *c;
	int sock, fds0, pfd[2], sp[2];
	int bad[4];
	uint64_t id = 100;

	tu_daemon_start(&d, "warn");
	c = connect_to(&d);
	sock = raw_scm_conn_feat(&d, TD_WIRE_FEAT_MANY);
	for (int i = 0; i < NMANY - 1; i++) {
		snprintf(names[i], sizeof(names[i]), "bad/%d", i);
		allocs[i] = raw_alloc_one(sock, id++, SIZE);
		lens[i] = raw_pub_body(names[i], allocs[i], SIZE, 0, 0,
				       bodies[i], sizeof(bodies[i]));
	}
	snprintf(names[NMANY - 1], sizeof(names[0]), "bad/own");
	lens[NMANY - 1] = raw_pub_body(names[NMANY - 1], 0, SIZE, 0, 0,
				       bodies[NMANY - 1], sizeof(bodies[0]));
	att[NMANY - 1] = 1;
	cr_assert_eq(pipe2(pfd, O_CLOEXEC), 0);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp),
		     0);
	bad[0] = pfd[0];
	bad[1] = sp[0];
	bad[2] = memfd_of(SIZE / 2, true);
	bad[3] = memfd_of(SIZE / 2, false);
	fds0 = tu_pid_fd_count(d.pid);
	for (int k = 0; k < 4; k++) {
		cr_assert_lt(raw_pub_many_fds(sock, id++, NMANY, bodies, lens,
					      att, &bad[k], 1, why,
					      sizeof(why)),
			     0, "fd kind %d", k);
		cr_assert(strstr(why, "element 63 (\"bad/own\")"), "%s", why);
		cr_assert(strstr(why, "nothing published"), "%s", why);
		/* a socket is closed on a thread of its own (closer.c): a
		 * peer's lingering socket must not stop the loop */
		cr_assert_leq(daemon_fds_until(d.pid, fds0), fds0,
			      "fd kind %d: %s", k, why);
	}
	tc_assert_absent(c, "bad/0");
	/* the good memfd: all 64 published, the allocs were still there */
	close(bad[2]);
	bad[2] = memfd_of(SIZE, true);
	cr_assert_eq(raw_pub_many_fds(sock, id++, NMANY, bodies, lens, att,
				      &bad[2], 1, why, sizeof(why)),
		     0, "%s", why);
	cr_assert_eq(raw_get_many(sock, id++, 0, 2,
				  (const char *[]){"bad/0", "bad/own"}),
		     0);
	for (int k = 0; k < 4; k++)
		close(bad[k]);
	close(pfd[1]);
	close(sp[1]);
	close(sock);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/*
 * A connection that sends PUBLISH_MANYs with 16 fds attached and hangs
 * up without reading a reply: the daemon ends up holding no descriptor
 * of them (the ones it took and the ones its queue held).
 */
Test(atomic, a_hang_up_with_fds_in_flight_leaves_no_fd_in_the_daemon)
{
	static uint8_t bodies[NMANY][1024];
	int64_t lens[16];
	uint32_t att[16];
	char names[16][16];
	struct tu_daemon d;
	struct td_client *c;
	int fds[16], fds0, tensors, want;

	tu_daemon_start(&d, "warn");
	/* counted with c connected and served once: whatever a client
	 * costs the daemon is in fds0, and so may be the probe fd its HELLO
	 * pulled, whose close is the closer thread's (at most: the 2048
	 * descriptors sent below would leak far more) */
	c = connect_to(&d);
	cr_assert_eq(tensors_when_alone(c), 0);
	fds0 = tu_pid_fd_count(d.pid);
	for (int i = 0; i < 16; i++) {
		snprintf(names[i], sizeof(names[i]), "fly/%d", i);
		lens[i] = raw_pub_body(names[i], 0, SIZE, 0, 0, bodies[i],
				       sizeof(bodies[i]));
		att[i] = 1;
		fds[i] = memfd_of(SIZE, true);
	}
	for (int k = 0; k < 32; k++) {
		int sock = raw_scm_conn_feat(&d, TD_WIRE_FEAT_MANY);
		struct td_wire_publish_many_req q = {.count = 16};
		int64_t len;

		for (uint32_t i = 0; i < 16; i++) {
			q.el[i].attached = att[i];
			q.el[i].body = (struct td_wire_bytes){
				bodies[i], (uint32_t)lens[i]};
		}
		len = td_wire_publish_many_req_encode(&q, RAW_BODY, RAW_CAP);
		cr_assert_gt(len, 0);
		for (int m = 0; m < 4; m++) {
			struct td_wire_hdr h = {TD_WIRE_MAGIC, TD_WIRE_VERSION,
						TD_OP_PUBLISH_MANY, 0, 16,
						(uint64_t)(m + 2),
						(uint32_t)len, 0};

			td_wire_hdr_encode(&h, rawbuf);
			cr_assert_eq(td__scm_send(sock, rawbuf,
						  TD_WIRE_HDR_LEN + (size_t)len,
						  fds, 16, 0),
				     (ssize_t)(TD_WIRE_HDR_LEN + len));
		}
		close(sock);
	}
	for (int i = 0; i < 16; i++)
		close(fds[i]);
	/* once c is alone again, the versions the daemon published keep
	 * one fd each, and nothing else is left */
	tensors = tensors_when_alone(c);
	want = fds0 + tensors;
	cr_assert_leq(daemon_fds_until(d.pid, want), want,
		     "daemon fds %d, %d before, %d tensors",
		     tu_pid_fd_count(d.pid), fds0, tensors);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* As nobody under leases=100, or pinned bytes of 100 of root's
 * versions: GET_MANYs up to the limit. */
static void quota_child(const struct tu_daemon *d, void *arg)
{
	struct td_tensor *t[NMANY];
	struct td_error e = {0};
	struct td_client *c;
	struct td_status *st = NULL;
	unsigned held = 0;

	(void)arg;
	CK(setgid(NOBODY) == 0);
	CK(setuid(NOBODY) == 0);
	c = open_client(d);
	/* leases=100: 6 x 16 + 4, no more, counted exactly (16 names a
	 * request: the daemon sends this uid's fds, 16 a reply) */
	for (int k = 0; k < 6; k++) {
		CK_EQ(td_client_get_many(c, 16, many_ptrs + 16 * (k % 4), t,
					 &e),
		      0);
		held += 16;
	}
	CK_EQ(td_client_get_many(c, 16, many_ptrs, t, &e), -EDQUOT);
	CK(strstr(e.reason, "nothing leased"));
	CK_EQ(td_client_get_many(c, 4, many_ptrs, t, &e), 0);
	held += 4;
	CK_EQ(td_client_get_many(c, 1, many_ptrs, t, &e), -EDQUOT);
	CK_EQ(td_client_status(c, &st, NULL), 0);
	for (size_t k = 0; k < st->client_count; k++)
		if (st->clients[k].pid == (uint32_t)getpid())
			CK_EQ(st->clients[k].leases, held);
	td_status_free(st);
	td_client_close(c);
	/* and back to none with the connection: 100 again */
	c = open_client(d);
	for (int k = 0; k < 6; k++)
		CK_EQ(td_client_get_many(c, 16, many_ptrs, t, &e), 0);
	CK_EQ(td_client_get_many(c, 4, many_ptrs, t, &e), 0);
	CK_EQ(td_client_get_many(c, 1, many_ptrs, t, &e), -EDQUOT);
	td_client_close(c);
}

static void uid_limit_run(const char *limit)
{
	const char *args[] = {"--socket-mode", "0666", "--uid-limit", limit,
			      NULL};
	struct tu_daemon d;
	struct td_client *c;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	tu_daemon_start_args(&d, "warn", args);
	cr_assert_eq(chmod(d.dir, 0755), 0);
	c = connect_to(&d);
	publish_many_names(c, "uq/%d");
	cr_assert_eq(reap(spawn(&d, quota_child, NULL)), 0);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

Test(atomic, get_many_at_a_uid_lease_limit_is_all_or_none)
{
	uid_limit_run("leases=100");
}

/* root's versions of SIZE bytes each: 100 of them pinned at most */
Test(atomic, get_many_at_a_uid_pinned_limit_is_all_or_none)
{
	char limit[32];

	snprintf(limit, sizeof(limit), "pinned=%u", 100 * SIZE);
	uid_limit_run(limit);
}

/* ---- two writers of the same names and a deleter, racing ---- */

#define RACE_NAMES 8
#define RACE_STEPS 300

static const char *race_names[RACE_NAMES] = {
	"race/0", "race/1", "race/2", "race/3",
	"race/4", "race/5", "race/6", "race/7"};

struct race {
	const struct tu_daemon *d;
	atomic_int writers;
	struct td_client *w; /* the watcher, read by race_watcher */
	unsigned run;        /* events of a PUBLISH_MANY still to come */
	uint64_t last;       /* the version of the event before */
	/*
	 * PUBLISH_MANYs done and event runs the watcher read: the writers
	 * stay at most RACE_AHEAD ahead, so that a watcher short of CPU is
	 * not cut for its backlog (1024 messages, docs/protocol.md §4)
	 */
	atomic_uint sent, seen;
};

#define RACE_AHEAD 32

/* Until the watcher is close enough behind (or gone: no writer then). */
static void race_pace(struct race *r, unsigned ahead)
{
	while (atomic_load(&r->sent) - atomic_load(&r->seen) > ahead)
		sched_yield();
}

static void *race_writer(void *arg)
{
	struct race *r = arg;
	struct td_client *c = connect_to(r->d);
	struct td_publish p[RACE_NAMES];
	struct td_error e = {0};
	static atomic_int who;
	int me = atomic_fetch_add(&who, 1);

	for (int i = 0; i < RACE_NAMES; i++)
		p[i] = desc(race_names[i]);
	for (int s = 0; s < RACE_STEPS; s++) {
		struct td_alloc *a[RACE_NAMES];
		/* writer 0 writes even bytes, writer 1 odd ones */
		uint8_t b = (uint8_t)(2 * (s % 100) + me);

		for (int i = 0; i < RACE_NAMES; i++)
			/* the last step plain: one fd a version (a
			 * recyclable one keeps its writable fd too) */
			a[i] = loan(c, s % 2 ? 0 : TD_ALLOC_RECYCLE, b);
		race_pace(r, RACE_AHEAD);
		cr_assert_eq(td_client_publish_many(c, RACE_NAMES, a, p, NULL,
						    &e),
			     0, "%s", e.reason);
		atomic_fetch_add(&r->sent, 1);
	}
	atomic_fetch_sub(&r->writers, 1);
	td_client_close(c);
	return NULL;
}

static void *race_deleter(void *arg)
{
	struct race *r = arg;
	struct td_client *c = connect_to(r->d);

	/* a DELETE a step, in turn (one DELETED event at most a step) */
	for (unsigned k = 0; atomic_load(&r->writers); k++) {
		unsigned at = atomic_load(&r->sent);
		int rc = td_client_delete(c, race_names[k % RACE_NAMES], NULL,
					  NULL);

		cr_assert(rc == 0 || rc == -ENOENT, "delete: %d", rc);
		while (atomic_load(&r->writers) && atomic_load(&r->sent) == at)
			sched_yield();
	}
	td_client_close(c);
	return NULL;
}

/*
 * The events of the watcher within wait_ms: each PUBLISHED of race/0
 * starts a run of eight, race/1..7 at versions one higher each. The
 * watch is never cut; -ETIMEDOUT once none came.
 */
static void race_events(struct race *r, int wait_ms)
{
	struct td_error e = {0};
	struct td_event ev;
	int rc;

	while ((rc = td_client_next_event(r->w, wait_ms, &ev, &e)) == 0) {
		if (ev.type != TD_EVENT_TYPE_PUBLISHED)
			continue;
		if (r->run) {
			cr_assert_str_eq(ev.name,
					 race_names[RACE_NAMES - r->run]);
			cr_assert_eq(ev.version, r->last + 1);
			if (--r->run == 0)
				atomic_fetch_add(&r->seen, 1);
		} else {
			cr_assert_str_eq(ev.name, race_names[0]);
			r->run = RACE_NAMES - 1;
		}
		r->last = ev.version;
	}
	cr_assert_eq(rc, -ETIMEDOUT, "%s", e.reason);
}

/* The watcher reads while the writers write: a reader that lags far
 * behind its events is cut (docs/protocol.md §4) */
static void *race_watcher(void *arg)
{
	struct race *r = arg;

	while (atomic_load(&r->writers))
		race_events(r, 100);
	return NULL;
}

/*
 * Two connections PUBLISH_MANY the same eight names while a third
 * deletes them one by one: a GET_MANY never mixes two steps, and a
 * watcher gets each PUBLISH_MANY's eight events together, in element
 * order, with consecutive versions.
 */
Test(atomic, racing_publish_manys_and_deletes_never_mix_steps)
{
	struct race r = {0};
	struct tu_daemon d;
	struct td_client *c, *w;
	struct td_error e = {0};
	pthread_t th[4];
	unsigned reads = 0;
	int fds0;

	tu_daemon_start(&d, "warn");
	r.d = &d;
	atomic_store(&r.writers, 2);
	c = connect_to(&d);
	w = r.w = connect_to(&d);
	cr_assert_eq(td_client_watch(w, "race/", TD_WATCH_PREFIX, NULL, &e),
		     0);
	fds0 = tu_pid_fd_count(d.pid);
	cr_assert_eq(pthread_create(&th[0], NULL, race_writer, &r), 0);
	cr_assert_eq(pthread_create(&th[1], NULL, race_writer, &r), 0);
	cr_assert_eq(pthread_create(&th[2], NULL, race_deleter, &r), 0);
	cr_assert_eq(pthread_create(&th[3], NULL, race_watcher, &r), 0);
	while (atomic_load(&r.writers)) {
		struct td_tensor *t[RACE_NAMES];
		int rc = td_client_get_many(c, RACE_NAMES, race_names, t, &e);

		cr_assert(rc == 0 || rc == -ENOENT, "%d %s", rc, e.reason);
		if (rc == 0) {
			reads++;
			for (int i = 1; i < RACE_NAMES; i++)
				cr_assert_eq(byte_of(t[i]), byte_of(t[0]),
					     "name %d of a read", i);
			for (int i = 0; i < RACE_NAMES; i++)
				td_tensor_release(t[i]);
		}
	}
	for (int i = 0; i < 4; i++)
		cr_assert_eq(pthread_join(th[i], NULL), 0);
	/* every event is in before a round trip's reply */
	{
		struct td_status *st = NULL;

		cr_assert_eq(td_client_status(w, &st, NULL), 0);
		td_status_free(st);
	}
	race_events(&r, 0);
	cr_assert_eq(r.run, 0);
	(void)reads;
	td_client_close(w);
	td_client_close(c);
	/* the daemon holds a descriptor per current version, no more */
	{
		struct td_client *k = connect_to(&d);
		/* once the other connections' hang-ups are served */
		int tensors = tensors_when_alone(k);

		/* at most: fds0 may hold a HELLO's probe fd still to be
		 * closed by the closer thread */
		cr_assert_leq(daemon_fds_until(d.pid, fds0 - 2 + tensors),
			      fds0 - 2 + tensors,
			     "daemon fds %d, %d before with c and w, %d tensors",
			     tu_pid_fd_count(d.pid), fds0, tensors);
		td_client_close(k);
	}
	tu_daemon_stop(&d, false);
}

/*
 * As nobody (the daemon pulls its fds) under fds=130: its connection
 * (2), 64 loans and 64 fences are 130, so PUBLISH_MANY of 64 fenced
 * elements fits once nothing else is held and not with one more fd:
 * every element's pulled descriptors count against the limit
 * together, and a refusal keeps none of them.
 */
static void fenced_child(const struct tu_daemon *d, void *arg)
{
	struct td_alloc *a[NMANY];
	struct td_publish p[NMANY];
	struct td_tensor *t[NMANY];
	struct td_error e = {0};
	struct td_client *c;
	uint64_t size = SIZE;
	int efd[NMANY], rc;

	(void)arg;
	CK(setgroups(0, NULL) == 0);
	CK(setresgid(NOBODY, NOBODY, NOBODY) == 0);
	CK(setresuid(NOBODY, NOBODY, NOBODY) == 0);
	CK(prctl(PR_SET_DUMPABLE, 1) == 0);
	c = open_client(d);
	CK_EQ(c->path_in, TD_IMPORT_PIDFD);
	for (int i = 0; i < NMANY; i++) {
		efd[i] = eventfd(1, EFD_CLOEXEC);
		CK(efd[i] >= 0);
	}
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < NMANY; i++) {
			CK(td_client_alloc_ex(c, 1, &size, 0, &a[i], NULL) ==
			   0);
			memset(td_alloc_data(a[i], 0), round * NMANY + i, SIZE);
			p[i] = desc(many_names[i]);
			p[i].flags = TD_PUBLISH_FENCE;
			p[i].fence_fd = efd[i];
		}
		/* round 1: fen/0's version (its plane and fence) is
		 * still held: 2 + 2 + 64 + 62 fit, the 63rd fence not */
		if (round == 1) {
			rc = td_client_publish_many(c, NMANY, a, p, NULL, &e);
			CK_EQ(rc, -EDQUOT);
			CK(strstr(e.reason, "element 62 ("));
			CK(strstr(e.reason, "nothing published"));
			CK_EQ(td_client_get_many(c, 1, &many_ptrs[1], t, &e),
			      -ENOENT);
			/* now all fit again */
			CK_EQ(td_client_delete(c, many_ptrs[0], NULL, NULL),
			      0);
			continue;
		}
		rc = td_client_publish_many(c, NMANY, a, p, NULL, &e);
		if (rc < 0)
			fprintf(stderr, "round %d: %s\n", round, e.reason);
		CK_EQ(rc, 0);
		for (int i = 1; round == 0 && i < NMANY; i++)
			CK_EQ(td_client_delete(c, many_ptrs[i], NULL, NULL), 0);
	}
	/* a lease of a fenced version takes a timerfd: 64 go first */
	for (int i = 16; i < NMANY; i++)
		CK_EQ(td_client_delete(c, many_ptrs[i], NULL, NULL), 0);
	/* 8 names: a plane and a fence each, 16 fds a reply */
	CK_EQ(td_client_get_many(c, 8, many_ptrs, t, &e), 0);
	for (int i = 0; i < 8; i++) {
		CK_EQ(td_tensor_has_fence(t[i]), 1);
		CK_EQ(((const uint8_t *)td_tensor_plane_data(t[i], 0))[1],
		      (uint8_t)(2 * NMANY + i));
		td_tensor_release(t[i]);
	}
	for (int i = 0; i < NMANY; i++)
		close(efd[i]);
	td_client_close(c);
}

Test(atomic, sixty_four_fenced_elements_count_against_the_fds_limit_together)
{
	const char *args[] = {"--socket-mode", "0666", "--uid-limit",
			      "fds=130", NULL};
	struct tu_daemon d;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	for (int i = 0; i < NMANY; i++) {
		snprintf(many_names[i], sizeof(many_names[i]), "fen/%d", i);
		many_ptrs[i] = many_names[i];
	}
	tu_daemon_start_args(&d, "warn", args);
	cr_assert_eq(chmod(d.dir, 0755), 0);
	cr_assert_eq(reap(spawn(&d, fenced_child, NULL)), 0);
	tu_daemon_stop(&d, true);
}

/*
 * A reader that sends GET_MANYs with SCM_RIGHTS and reads no reply: the
 * daemon cuts it at its fds-in-flight budget (docs/protocol.md §4), and
 * every lease and queued descriptor goes with it.
 */
Test(atomic, a_reader_of_no_get_many_reply_is_cut_and_holds_nothing)
{
	struct tu_daemon d;
	struct td_client *c;
	int sock, fds0;
	uint64_t id = 10;
	bool cut = false;

	tu_daemon_start(&d, "warn");
	c = connect_to(&d);
	publish_many_names(c, "unread/%d");
	fds0 = tu_pid_fd_count(d.pid);
	sock = raw_scm_conn_feat(&d, TD_WIRE_FEAT_MANY);
	for (int k = 0; k < 64 && !cut; k++) {
		struct td_wire_get_many_req q = {.flags = TD_WIRE_REQ_SCM,
						 .count = 16};
		struct td_wire_hdr h = {TD_WIRE_MAGIC, TD_WIRE_VERSION,
					TD_OP_GET_MANY, 0, 0, id++, 0, 0};
		int64_t len;

		for (uint32_t i = 0; i < 16; i++)
			q.names[i] = (struct td_wire_str){
				many_ptrs[16 * (k % 4) + i],
				strlen(many_ptrs[16 * (k % 4) + i])};
		len = td_wire_get_many_req_encode(&q, RAW_BODY, RAW_CAP);
		cr_assert_gt(len, 0);
		h.body_len = (uint32_t)len;
		td_wire_hdr_encode(&h, rawbuf);
		cut = td__scm_send(sock, rawbuf, TD_WIRE_HDR_LEN + (size_t)len,
				   NULL, 0, MSG_NOSIGNAL) < 0;
		/* the daemon reads it (a round trip of another client) */
		leases_of(c, getpid());
	}
	cr_assert_eq(tc_status_until(c, clients_total, 1), 1,
		     "the reader was not cut");
	cr_assert_eq(leases_of(c, getpid()), 0);
	/* at most: fds0 may hold a HELLO's probe fd still to be closed */
	cr_assert_leq(daemon_fds_until(d.pid, fds0), fds0, "%d fds, %d before",
		     tu_pid_fd_count(d.pid), fds0);
	close(sock);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/*
 * Names GET_MANY does not lease: a ring (-EINVAL), one whose latest
 * version its producer took back to rewrite (-EAGAIN); a reply past one
 * datagram (-EMSGSIZE). Each leases nothing; PUBLISH_MANY of a ring's
 * name publishes nothing.
 */
Test(atomic, get_many_of_a_ring_a_rewrite_or_too_much_leases_nothing)
{
	static char meta[16 * 1024];
	uint64_t rsize = SIZE;
	struct td_ring_desc rd = {.dtype = TD_TENSOR_U8, .ndim = 1,
				  .shape = &rsize, .slot_count = 2};
	struct tu_daemon d;
	struct td_client *c, *prod;
	struct td_ring *ring = NULL;
	struct td_alloc *a[4];
	struct td_publish p[4] = {desc("big/0"), desc("big/1"), desc("big/2"),
				  desc("big/3")};
	const char *names[4] = {"big/0", "big/1", "big/2", "big/3"};
	struct td_tensor *t[4];
	struct td_error e = {0};
	uint64_t size = 64 * 1024;
	int sock, fds0;

	tu_daemon_start(&d, "warn");
	c = connect_to(&d);
	sock = raw_scm_conn_feat(&d, TD_WIRE_FEAT_MANY);
	cr_assert_eq(td_ring_create(c, "gm/ring", &rd, &ring, &e), 0, "%s",
		     e.reason);
	memset(meta, 'm', sizeof(meta));
	for (int i = 0; i < 4; i++) {
		p[i].meta = meta;
		p[i].meta_len = sizeof(meta) - 64;
		a[i] = loan(c, 0, (uint8_t)i);
	}
	/* two a request: four do not fit one message */
	for (int i = 0; i < 4; i += 2)
		cr_assert_eq(td_client_publish_many(c, 2, a + i, p + i, NULL,
						    &e),
			     0, "%s", e.reason);
	fds0 = tu_pid_fd_count(d.pid);
	cr_assert_eq(raw_get_many(sock, 2, 0, 2,
				  (const char *[]){"big/0", "gm/ring"}),
		     -EINVAL);
	cr_assert_eq(td_client_get_many(c, 4, names, t, &e), -EMSGSIZE, "%s",
		     e.reason);
	cr_assert(strstr(e.reason, "nothing leased"), "%s", e.reason);
	/* a rewrite: the producer takes its latest version back */
	cr_assert_eq(setenv("TENSORD_REWRITE_MIN", "0", 1), 0);
	cr_assert_eq(setenv("TENSORD_REWRITE_FILL_US", "0", 1), 0);
	prod = connect_to(&d);
	for (int k = 0; k < 2; k++) {
		struct td_alloc *w = NULL;
		struct td_publish q = desc("gm/rw");

		cr_assert_eq(td_client_alloc_ex(prod, 1, &size,
						TD_ALLOC_REWRITE, &w, &e),
			     0, "%s", e.reason);
		cr_assert_eq(td_client_alloc_ex(prod, 1, &size, 0, &a[0], &e),
			     0);
		if (k == 0) {
			q.shape = &size;
			cr_assert_eq(td_client_publish_alloc(prod, w, &q, NULL,
							     &e),
				     0, "%s", e.reason);
			td_alloc_free(a[0]);
		} else {
			/* the take-back: gm/rw has no version now */
			cr_assert_eq(raw_get_many(sock, 3, 0, 2,
						  (const char *[]){"big/0",
								   "gm/rw"}),
				     -EAGAIN);
			/* with a ring's name in a PUBLISH_MANY: nothing */
			p[0] = desc("gm/rw");
			p[0].shape = &size;
			p[1] = desc("gm/ring");
			p[1].shape = &size;
			a[1] = a[0];
			a[0] = w;
			cr_assert_eq(td_client_publish_many(prod, 2, a, p, NULL,
							    &e),
				     -EEXIST, "%s", e.reason);
			/* the library gave its loans up, the take-back
			 * with them: as a DELETE */
			cr_assert_eq(raw_get_many(sock, 4, 0, 1,
						  (const char *[]){"gm/rw"}),
				     -ENOENT);
		}
	}
	unsetenv("TENSORD_REWRITE_MIN");
	unsetenv("TENSORD_REWRITE_FILL_US");
	cr_assert_eq(leases_of(c, getpid()), 0);
	cr_assert_eq(tu_pid_fd_count(d.pid), fds0 + 2 /* prod's connection */,
		     "%d fds, %d before", tu_pid_fd_count(d.pid), fds0);
	close(sock);
	td_client_close(prod);
	td_ring_close(ring);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/*
 * As nobody under a byte quota of 72 versions: rounds of PUBLISH_MANY of
 * 64 names, their loans making room by evicting the uid's own older
 * versions, and a round refused past the quota with a lease held. The
 * uid's bytes are always those of its current versions and loans.
 */
static void bytes_child(const struct tu_daemon *d, void *arg)
{
	struct td_client *c;
	struct td_tensor *t[16];
	struct td_error e = {0};
	uint64_t size = SIZE;

	(void)arg;
	CK(setgid(NOBODY) == 0);
	CK(setuid(NOBODY) == 0);
	c = open_client(d);
	for (int round = 0; round < 6; round++) {
		struct td_alloc *a[NMANY];
		struct td_publish p[NMANY];
		struct td_status *st = NULL;
		uint64_t bytes = 0, tensors;
		int rc = 0, n = 0;

		for (int i = 0; i < NMANY && rc == 0; i++, n++) {
			rc = td_client_alloc_ex(c, 1, &size, 0, &a[i], &e);
			if (rc == 0)
				memset(td_alloc_data(a[i], 0), round, SIZE);
			p[i] = desc(many_names[i]);
		}
		if (round == 3) {
			/* 16 leased versions cannot go: 64 loans do not
			 * fit beside them */
			CK_EQ(rc, -EDQUOT);
			for (int i = 0; i < n - 1; i++)
				td_alloc_free(a[i]);
			for (int i = 0; i < 16; i++)
				td_tensor_release(t[i]);
		} else {
			CK_EQ(rc, 0);
			CK_EQ(td_client_publish_many(c, NMANY, a, p, NULL, &e),
			      0);
		}
		if (round == 2)
			CK_EQ(td_client_get_many(c, 16, many_ptrs, t, &e), 0);
		CK_EQ(td_client_status(c, &st, NULL), 0);
		tensors = st->tensors;
		for (size_t k = 0; k < st->uid_count; k++)
			if (st->uids[k].uid == NOBODY)
				bytes = st->uids[k].bytes;
		td_status_free(st);
		/* only nobody publishes; no loan is left */
		CK_EQ(bytes, tensors * SIZE);
	}
	td_client_close(c);
}

Test(atomic, publish_many_rounds_at_a_byte_quota_keep_the_count_exact)
{
	char policy[64];
	const char *args[] = {"--socket-mode", "0666", "--policy", policy,
			      NULL};
	struct tu_daemon d;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	for (int i = 0; i < NMANY; i++) {
		snprintf(many_names[i], sizeof(many_names[i]), "bq/%d", i);
		many_ptrs[i] = many_names[i];
	}
	tu_policy_file(policy, sizeof(policy), "atomic-q",
		       "allow uid=%u rw bq/\nquota uid=%u %u\n", NOBODY, NOBODY,
		       72 * SIZE);
	tu_daemon_start_args(&d, "warn", args);
	cr_assert_eq(chmod(d.dir, 0755), 0);
	cr_assert_eq(reap(spawn(&d, bytes_child, NULL)), 0);
	tu_daemon_stop(&d, true);
	unlink(policy);
}

/* ---- a GET_MANY that waits for the next step (TD_WIRE_FEAT_MANY_WAIT) ---- */

/* One step: a loan per name (each byte `fill`) published together. */
static void step(struct td_client *c, uint32_t n, const char *const *names,
		 uint8_t fill, uint64_t *v)
{
	struct td_alloc *a[4];
	struct td_publish p[4];
	struct td_error e = {0};

	for (uint32_t i = 0; i < n; i++) {
		a[i] = loan(c, 0, fill);
		p[i] = desc(names[i]);
	}
	cr_assert_eq(td_client_publish_many(c, n, a, p, v, &e), 0, "%s",
		     e.reason);
}

/* Leases the daemon holds, every client's (a tc_status_until field). */
static uint64_t all_leases(const struct td_status *st)
{
	uint64_t n = 0;

	for (size_t k = 0; k < st->client_count; k++)
		n += st->clients[k].leases;
	return n;
}

/* A td_client_get_many_newer() on a connection of its own, in a thread:
 * what it got (asserted by the test's thread). */
struct many_wait {
	const struct tu_daemon *d;
	const char *const *names;
	uint32_t n;
	uint64_t after;
	int timeout_ms;
	int rc;
	uint64_t ver[4];
	int byte[4];
	struct td_error e;
};

static void *many_waiter(void *arg)
{
	struct many_wait *w = arg;
	struct td_tensor *t[4] = {0};
	struct td_client *c = NULL;

	w->rc = td_client_connect(w->d->sock, &c, &w->e);
	if (w->rc < 0)
		return NULL;
	w->rc = td_client_get_many_newer(c, w->n, w->names, w->after,
					 w->timeout_ms, t, &w->e);
	for (uint32_t i = 0; w->rc == 0 && i < w->n; i++) {
		const uint8_t *b = td_tensor_plane_data(t[i], 0);

		w->ver[i] = td_tensor_version(t[i]);
		w->byte[i] = b ? b[0] : -1;
		td_tensor_release(t[i]);
	}
	td_client_close(c);
	return NULL;
}

/* Start w in th and wait until the daemon holds it parked: `parked`
 * requests parked in all. */
static void park_waiter(struct td_client *c, pthread_t *th,
			struct many_wait *w, uint64_t parked)
{
	cr_assert_eq(pthread_create(th, NULL, many_waiter, w), 0);
	cr_assert_eq(tc_status_until(c, tc_waiters, parked), parked);
}

/* w, parked in th, has ended with rc, its reason holding why; the
 * daemon then holds no parked request. */
static void waiter_ends(struct td_client *c, pthread_t th,
			const struct many_wait *w, int rc, const char *why)
{
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(w->rc, rc, "%d %s", w->rc, w->e.reason);
	cr_assert(strstr(w->e.reason, why), "%s", w->e.reason);
	cr_assert_eq(tc_status_until(c, tc_waiters, 0), 0);
}

/* d started under a policy at path (cap bytes) that lets any uid read
 * and write lim/ and this one park one request (`waiters 1`), and a
 * client of it that published names[0, 2) in one step (bytes 1): their
 * versions in v. */
static struct td_client *waiters_one(struct tu_daemon *d, char *path,
				     size_t cap, const char *const *names,
				     uint64_t *v)
{
	const char *args[] = {"--policy", path, NULL};
	struct td_client *c;
	FILE *f;

	snprintf(path, cap, "/tmp/td-atomic-wait-%d", (int)getpid());
	f = fopen(path, "w");
	cr_assert(f);
	fprintf(f, "allow any rw lim/\nlimit uid=%u waiters 1\n",
		(unsigned)geteuid());
	fclose(f);
	tu_daemon_start_args(d, "warn", args);
	c = connect_to(d);
	step(c, 2, names, 1, v);
	return c;
}

/* d started and a client of it that published names[0, n) in one step
 * (bytes 1): their versions in v. */
static struct td_client *stepped(struct tu_daemon *d, uint32_t n,
				 const char *const *names, uint64_t *v)
{
	struct td_client *c;

	tu_daemon_start(d, "warn");
	c = connect_to(d);
	step(c, n, names, 1, v);
	return c;
}

/*
 * Parked on its first name, the request holds nothing; the PUBLISH_MANY
 * that commits the first name before the second wakes it only once
 * both are in: it gets the new pair of that one step, never the new
 * image with the old label.
 */
Test(atomic, a_waiting_get_many_gets_the_next_step_whole)
{
	const char *names[2] = {"wait/image", "wait/label"};
	struct many_wait w = {.names = names, .n = 2,
			      .timeout_ms = TU_WAIT_S * 1000};
	struct td_tensor *t[2];
	struct td_error e = {0};
	struct tu_daemon d;
	struct td_client *c;
	uint64_t v1[2], v2[2];
	pthread_t th;

	c = stepped(&d, 2, names, v1);
	w.d = &d;
	/* a version newer than `after` is there: answered at once */
	cr_assert_eq(td_client_get_many_newer(c, 2, names, v1[0] - 1, 0, t,
					      &e),
		     0, "%s", e.reason);
	cr_assert_eq(td_tensor_version(t[0]), v1[0]);
	cr_assert_eq(td_tensor_version(t[1]), v1[1]);
	td_tensor_release(t[0]);
	td_tensor_release(t[1]);
	w.after = v1[0];
	park_waiter(c, &th, &w, 1);
	cr_assert_eq(tc_status_until(c, all_leases, 0), 0,
		     "a parked GET_MANY holds leases");
	step(c, 2, names, 2, v2);
	waiter_ends(c, th, &w, 0, "");
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(w.ver[i], v2[i], "element %d: version %llu, "
			     "not the step's %llu", i,
			     (unsigned long long)w.ver[i],
			     (unsigned long long)v2[i]);
		cr_assert_eq(w.byte[i], 2, "element %d", i);
	}
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

Test(atomic, a_get_many_that_waits_in_vain_times_out_holding_nothing)
{
	const char *names[2] = {"to/image", "to/label"};
	struct td_tensor *t[2] = {0};
	struct td_error e = {0};
	struct tu_daemon d;
	struct td_client *c;
	uint64_t v[2];

	c = stepped(&d, 2, names, v);
	cr_assert_eq(td_client_get_many_newer(c, 2, names, v[0], 0, t, &e),
		     -ETIMEDOUT);
	cr_assert(strstr(e.reason, "no version of \"to/image\" newer than"),
		  "%s", e.reason);
	cr_assert_eq(td_client_get_many_newer(c, 2, names, v[0], 20, t, &e),
		     -ETIMEDOUT);
	cr_assert(strstr(e.reason, "within 20 ms: nothing leased"), "%s",
		  e.reason);
	cr_assert_null(t[0]);
	cr_assert_null(t[1]);
	cr_assert_eq(tc_status_until(c, tc_waiters, 0), 0);
	cr_assert_eq(tc_status_until(c, all_leases, 0), 0);
	/* the handle goes on */
	cr_assert_eq(td_client_get_many(c, 2, names, t, &e), 0, "%s",
		     e.reason);
	td_tensor_release(t[0]);
	td_tensor_release(t[1]);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

Test(atomic, a_name_deleted_under_a_waiting_get_many_ends_it)
{
	const char *names[2] = {"del/image", "del/label"};
	struct many_wait w = {.names = names, .n = 2,
			      .timeout_ms = TU_WAIT_S * 1000};
	struct td_error e = {0};
	struct tu_daemon d;
	struct td_client *c;
	uint64_t v[2];
	pthread_t th;

	c = stepped(&d, 2, names, v);
	w.d = &d;
	w.after = v[0];
	park_waiter(c, &th, &w, 1);
	cr_assert_eq(td_client_delete(c, "del/label", NULL, &e), 0, "%s",
		     e.reason);
	waiter_ends(c, th, &w, -ENOENT,
		    "element 1 (\"del/label\"): deleted while the request "
		    "waited");
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

/* A ring made under the first name of a waiting GET_MANY ends it: a
 * GET_MANY leases tensors, never a ring's slot, so it would never be
 * answered (this path had no test). */
Test(atomic, a_ring_made_under_a_waiting_get_many_ends_it)
{
	const char *names[2] = {"rw/image", "rw/label"};
	struct many_wait w = {.names = names, .n = 2,
			      .timeout_ms = TU_WAIT_S * 1000};
	uint64_t size = 64;
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8,
				    .ndim = 1,
				    .shape = &size,
				    .slot_count = 2};
	struct td_ring *r = NULL;
	struct td_error e = {0};
	struct tu_daemon d;
	struct td_client *c;
	pthread_t th;

	tu_daemon_start(&d, "warn");
	c = connect_to(&d);
	w.d = &d;
	/* no version of either yet: it waits for any */
	park_waiter(c, &th, &w, 1);
	cr_assert_eq(td_ring_create(c, "rw/image", &desc, &r, &e), 0, "%s",
		     e.reason);
	waiter_ends(c, th, &w, -EINVAL,
		    "a ring of that name was made while it waited");
	td_ring_close(r);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

/*
 * A waiting GET_MANY with a live ring among its other names can never
 * lease them all: it is refused at once (-EINVAL, "no ring names"), as
 * one with a ring as its first name is. It used to be parked, holding
 * one of the uid's waiters until the first name's next version, and
 * with timeout 0 said -ETIMEDOUT, a reason about the first name.
 */
Test(atomic, a_waiting_get_many_of_a_ring_is_refused_at_once)
{
	const char *names[2] = {"rn/image", "rn/label"};
	uint64_t size = 64, v[1];
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8,
				    .ndim = 1,
				    .shape = &size,
				    .slot_count = 2};
	struct td_tensor *t[2] = {0};
	struct td_ring *r = NULL;
	struct td_error e = {0};
	struct tu_daemon d;
	struct td_client *c;
	int rc;

	tu_daemon_start(&d, "warn");
	c = connect_to(&d);
	step(c, 1, names, 1, v);
	cr_assert_eq(td_ring_create(c, "rn/label", &desc, &r, &e), 0, "%s",
		     e.reason);
	for (int i = 0; i < 2; i++) {
		/* 0: answered at once; then a wait the refusal must not
		 * take (its timeout the hang guard) */
		e = (struct td_error){0};
		rc = td_client_get_many_newer(c, 2, names, v[0],
					      i ? TU_WAIT_S * 1000 : 0, t, &e);
		cr_assert_eq(rc, -EINVAL, "timeout %d: %d %s", i, rc,
			     e.reason);
		cr_assert(strstr(e.reason, "element 1 (\"rn/label\"): a "
					   "ring"),
			  "%s", e.reason);
		cr_assert_null(t[0]);
		cr_assert_eq(tc_status_until(c, tc_waiters, 0), 0);
	}
	td_ring_close(r);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

/* A client gone while its GET_MANY waits leaves nothing in the daemon:
 * no waiter, no descriptor; the publish that would have woken it is
 * served as any. */
Test(atomic, a_client_gone_while_its_get_many_waits_leaves_nothing)
{
	const char *names[2] = {"gone/image", "gone/label"};
	struct td_wire_get_many_req q = {
		.flags = TD_WIRE_REQ_SCM | TD_WIRE_MANY_NEWER,
		.count = 2,
		.names = {{"gone/image", 10}, {"gone/label", 10}},
		.timeout_ms = TD_WIRE_WAIT_FOREVER,
	};
	struct tu_daemon d;
	struct td_client *c;
	uint64_t v[2], clients;
	int fds0, sock;

	c = stepped(&d, 2, names, v);
	clients = tc_status_until(c, clients_total, 1);
	fds0 = tu_pid_fd_count(d.pid);
	sock = raw_scm_conn_feat(&d, TD_WIRE_FEAT_MANY_WAIT);
	q.version = v[0];
	raw_send(sock, TD_OP_GET_MANY, 2,
		 (size_t)td_wire_get_many_req_encode(&q, RAW_BODY, RAW_CAP));
	cr_assert_eq(tc_status_until(c, tc_waiters, 1), 1);
	close(sock);
	cr_assert_eq(tc_status_until(c, tc_waiters, 0), 0);
	cr_assert_eq(tc_status_until(c, clients_total, clients), clients);
	cr_assert_leq(daemon_fds_until(d.pid, fds0), fds0,
		      "the daemon's descriptors after the client left");
	step(c, 2, names, 2, v);
	cr_assert_eq(tc_status_until(c, all_leases, 0), 0);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* A connection parks at most TD__MAX_WAITERS (256) requests, GET_MANYs
 * among them: the one past the cap is refused with -EAGAIN and a reason
 * that names it, and the others stay parked until their peer goes. */
Test(atomic, a_connection_parks_at_most_256_requests_get_many_included)
{
	const char *names[2] = {"cap/image", "cap/label"};
	struct td_wire_get_many_req q = {
		.flags = TD_WIRE_REQ_SCM | TD_WIRE_MANY_NEWER,
		.count = 2,
		.names = {{"cap/image", 9}, {"cap/label", 9}},
		.timeout_ms = TD_WIRE_WAIT_FOREVER,
	};
	char why[TD_WIRE_MAX_REASON + 1];
	struct tu_daemon d;
	struct td_client *c;
	struct rawrep r;
	uint64_t v[2];
	int64_t n;
	int sock;

	tu_daemon_start(&d, "warn");
	c = connect_to(&d);
	step(c, 2, names, 1, v);
	sock = raw_scm_conn_feat(&d, TD_WIRE_FEAT_MANY_WAIT);
	q.version = v[0];
	n = td_wire_get_many_req_encode(&q, RAW_BODY, RAW_CAP);
	for (uint64_t id = 2; id < 2 + 256; id++)
		raw_send(sock, TD_OP_GET_MANY, id, (size_t)n);
	cr_assert_eq(tc_status_until(c, tc_waiters, 256), 256);
	cr_assert_eq(raw_call(sock, TD_OP_GET_MANY, 900, n, &r), -EAGAIN);
	raw_reason(&r, why, sizeof(why));
	cr_assert(strstr(why, "GET_MANY cannot wait: too many parked requests"),
		  "%s", why);
	cr_assert(strstr(why, "(max 256)"), "%s", why);
	cr_assert_eq(tc_status_until(c, tc_waiters, 256), 256);
	close(sock);
	cr_assert_eq(tc_status_until(c, tc_waiters, 0), 0);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* A parked GET_MANY counts in its uid's `waiters` (docs/policy.md) and
 * gives its place back when it is answered. */
Test(atomic, a_waiting_get_many_counts_in_the_uids_waiters)
{
	const char *names[2] = {"lim/image", "lim/label"};
	struct many_wait w = {.names = names, .n = 2,
			      .timeout_ms = TU_WAIT_S * 1000};
	struct td_tensor *t[2] = {0};
	struct td_error e = {0};
	char path[128];
	struct tu_daemon d;
	struct td_client *c;
	uint64_t v[2];
	pthread_t th;

	c = waiters_one(&d, path, sizeof(path), names, v);
	w.d = &d;
	w.after = v[0];
	park_waiter(c, &th, &w, 1);
	cr_assert_eq(td_client_get_many_newer(c, 2, names, v[0], 1000, t,
					      &e),
		     -EDQUOT, "%s", e.reason);
	cr_assert(strstr(e.reason, "GET_MANY cannot wait"), "%s", e.reason);
	cr_assert(strstr(e.reason, "waiters limit"), "%s", e.reason);
	cr_assert_null(t[0]);
	step(c, 2, names, 2, v);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(w.rc, 0, "%s", w.e.reason);
	/* its place is back: the next one may park (and times out) */
	cr_assert_eq(td_client_get_many_newer(c, 2, names, v[0], 10, t, &e),
		     -ETIMEDOUT, "%s", e.reason);
	td_client_close(c);
	tu_daemon_stop(&d, false);
	unlink(path);
}

/*
 * A GET refused at the uid's `waiters` limit while only a GET_MANY is
 * parked says that a GET_MANY counts: it spoke of parked GETs and
 * RING_SUBSCRIBEs alone, which the uid did not have.
 */
Test(atomic, a_get_refused_at_the_waiters_limit_says_get_manys_count)
{
	struct td_wire_get_many_req q = {
		.flags = TD_WIRE_REQ_SCM | TD_WIRE_MANY_NEWER,
		.count = 2,
		.names = {{"lim/image", 9}, {"lim/label", 9}},
		.timeout_ms = TD_WIRE_WAIT_FOREVER,
	};
	struct td_wire_get_req g = {
		.name = {"lim/image", 9},
		.mode = TD_GET_NEWER,
		.flags = TD_WIRE_REQ_SCM,
		.timeout_ms = TD_WIRE_WAIT_FOREVER,
	};
	const char *names[2] = {"lim/image", "lim/label"};
	char path[128], why[TD_WIRE_MAX_REASON + 1];
	struct tu_daemon d;
	struct td_client *c;
	struct rawrep r;
	uint64_t v[2];
	int sock;

	c = waiters_one(&d, path, sizeof(path), names, v);
	sock = raw_scm_conn_feat(&d, TD_WIRE_FEAT_MANY_WAIT);
	q.version = v[0];
	raw_send(sock, TD_OP_GET_MANY, 2,
		 (size_t)td_wire_get_many_req_encode(&q, RAW_BODY, RAW_CAP));
	cr_assert_eq(tc_status_until(c, tc_waiters, 1), 1);
	g.version = v[0];
	cr_assert_eq(raw_call(sock, TD_OP_GET, 3,
			      td_wire_get_req_encode(&g, RAW_BODY, RAW_CAP),
			      &r),
		     -EDQUOT);
	raw_reason(&r, why, sizeof(why));
	cr_assert(strstr(why, "GET cannot wait: uid"), "%s", why);
	cr_assert(strstr(why, "waiters limit: 1 parked GETs, GET_MANYs "
			      "waiting for a newer version and "
			      "RING_SUBSCRIBEs held"),
		  "%s", why);
	close(sock);
	cr_assert_eq(tc_status_until(c, tc_waiters, 0), 0);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	unlink(path);
}

Test(atomic, a_daemon_without_the_wait_bit_gets_eopnotsupp)
{
	const char *names[1] = {"oldw/a"};
	struct td_tensor *t[1];
	struct td_error e = {0};
	struct tu_daemon d;
	struct td_client *c;
	uint64_t v[1];

	c = stepped(&d, 1, names, v);
	/* as if the daemon's HELLO predated TD_WIRE_FEAT_MANY_WAIT */
	c->hello.features &= ~TD_WIRE_FEAT_MANY_WAIT;
	cr_assert_eq(td_client_get_many_newer(c, 1, names, 0, 0, t, &e),
		     -EOPNOTSUPP);
	cr_assert(strstr(e.reason, "TD_WIRE_FEAT_MANY_WAIT"), "%s", e.reason);
	cr_assert_null(t[0]);
	/* GET_MANY without waiting is served as before */
	cr_assert_eq(td_client_get_many(c, 1, names, t, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_tensor_version(t[0]), v[0]);
	td_tensor_release(t[0]);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}
