/* SPDX-License-Identifier: MIT */
/*
 * A policy reload that takes read of a name away ends what keeps showing
 * that name's new versions without a request (docs/policy.md,
 * "Reloading: SIGHUP"): the rings whose slots a connection of that uid
 * maps, and the follows of the name, whose bell shows every version's
 * reply. A reload that leaves the read ends nothing. Needs root to act
 * as another uid (nobody, through a child process).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tensord/ring.h"
#include "tensord/tensord.h"
#include "client.h"
#include "follow.h"
#include "policyfile.h"
#include "rawclient.h"
#include "testutil.h"
#include "wire-status.h"

TestSuite(revoke, .timeout = TU_TEST_TIMEOUT_S);

#define NOBODY 65534u
#define RING "rv/ring"
#define CAM "rv/cam"
#define SIZE 64u
#define KEEP "allow uid=65534 r rv/\nallow uid=65534 r other/\n"
#define TAKE "allow uid=65534 r other/\n"
#define GIVE "allow uid=65534 r rv/\n"
#define CAM_ONLY "allow uid=65534 r " CAM "\n"

static char policy[64];
static struct tu_daemon D;

/* ---- nobody, in a child: one step per command byte ---- */

struct result {
	int rc;
	uint64_t version;
	char reason[TD_WIRE_MAX_REASON + 1];
};

struct nobody {
	pid_t pid;
	int cmd, res; /* the parent's ends */
};

static void child_send(int fd, int rc, uint64_t v, const char *why)
{
	struct result r = {.rc = rc, .version = v};

	snprintf(r.reason, sizeof(r.reason), "%s", why ? why : "");
	if (write(fd, &r, sizeof(r)) != sizeof(r))
		_exit(3);
}

/* The trigger page CAM's follow names, mapped read-only (STAGE_PAGE
 * sent raw on c's socket, as libtensord does): 0 and *page, or the
 * reply's status. */
static int child_page(struct td_client *c,
		      const struct td_follow_trigger **page)
{
	struct td_wire_ring_sub_req q = {.name = {CAM, sizeof(CAM) - 1},
					 .flags = TD_WIRE_REQ_SCM};
	struct rawrep r;
	int rc = raw_call(c->sock, TD_OP_STAGE_PAGE, 1u << 30,
			  td_wire_ring_sub_req_encode(&q, RAW_BODY, RAW_CAP),
			  &r);
	void *m;

	if (rc == 0 && r.nfds == 1) {
		m = mmap(NULL, TD_FOLLOW_TRIG_LEN, PROT_READ, MAP_SHARED,
			 r.fds[0], 0);
		rc = m == MAP_FAILED ? -errno : 0;
		if (rc == 0)
			*page = m;
	}
	td__scm_close(r.fds, r.nfds);
	return rc;
}

/* The greatest version any word of page names (0 none), and each
 * version named into list ("12 15 ") */
static uint64_t page_newest(const struct td_follow_trigger *page,
			    char *list, size_t cap)
{
	uint64_t v = 0;
	size_t at = 0;

	list[0] = 0;
	for (unsigned i = 0; page && i < TD_FOLLOW_TRIG_SLOTS; i++) {
		uint32_t w = atomic_load(&page[i].word);
		int n;

		if (!w)
			continue;
		if (w >> 2 > v)
			v = w >> 2;
		n = snprintf(list + at, cap - at, "%u ", w >> 2);
		if (n > 0 && (size_t)n < cap - at)
			at += (size_t)n;
	}
	return v;
}

/* The step `op` of the child's client c: S subscribe RING, N the next
 * version of it, F follow CAM, T the next version of that, G get_newer
 * of CAM after the last one taken, P map CAM's trigger page, W the
 * newest version a word of that page names. */
static void child_step(struct td_client *c, char op, int out)
{
	static const struct td_follow_trigger *page;
	static struct td_sub *s;
	static struct td_follow *f;
	static uint64_t last;
	struct td_error e = {0};
	struct td_tensor *t = NULL;
	struct td_view view;
	char list[TD_WIRE_MAX_REASON + 1];
	int rc = -EINVAL;
	uint64_t v = 0;

	if (op == 'S') {
		td_sub_close(s);
		s = NULL;
		rc = td_ring_subscribe(c, RING, 5000, &s, &e);
	} else if (op == 'N') {
		rc = td_sub_next(s, 5000, &view);
		v = rc == 0 ? view.version : 0;
		if (rc == 0)
			td_sub_release(s);
	} else if (op == 'F') {
		td_follow_close(f);
		f = NULL;
		rc = td_client_follow(c, CAM, &f, &e);
	} else if (op == 'P') {
		rc = page ? -EEXIST : child_page(c, &page);
	} else if (op == 'W') {
		rc = page ? 0 : -ENOENT;
		v = page_newest(page, list, sizeof(list));
		child_send(out, rc, v, list);
		return;
	} else if (op == 'T' || op == 'G') {
		rc = op == 'T' ? td_follow_next(f, 5000, &t, &e)
			       : td_client_get_newer(c, CAM, last, 5000, &t,
						     &e);
		if (rc == 0) {
			v = last = td_tensor_version(t);
			td_tensor_release(t);
		}
	}
	child_send(out, rc, v, e.reason);
}

static void child(int in, int out)
{
	struct td_client *c = NULL;
	char op;

	if (tu_become(NOBODY, NOBODY) < 0)
		_exit(10);
	if (td_client_connect(D.sock, &c, NULL) < 0)
		_exit(11);
	child_send(out, 0, 0, "connected");
	while (read(in, &op, 1) == 1 && op != 'Q')
		child_step(c, op, out);
	td_client_close(c);
	_exit(0);
}

static void nobody_start(struct nobody *n)
{
	int to[2], from[2];
	struct result r;

	cr_assert_eq(pipe(to), 0);
	cr_assert_eq(pipe(from), 0);
	n->pid = tu_fork();
	if (n->pid == 0) {
		close(to[1]);
		close(from[0]);
		child(to[0], from[1]);
	}
	close(to[0]);
	close(from[1]);
	n->cmd = to[1];
	n->res = from[0];
	cr_assert_eq(read(n->res, &r, sizeof(r)), (ssize_t)sizeof(r),
		     "nobody did not connect");
}

/* nobody's step op: its result */
static struct result nobody_do(struct nobody *n, char op)
{
	struct result r;

	cr_assert_eq(write(n->cmd, &op, 1), 1);
	tu_await_readable(n->res, TU_WAIT_S, "nobody's step");
	cr_assert_eq(read(n->res, &r, sizeof(r)), (ssize_t)sizeof(r),
		     "nobody's step %c", op);
	return r;
}

static void nobody_stop(struct nobody *n)
{
	int st;

	cr_assert_eq(write(n->cmd, "Q", 1), 1);
	st = tu_wait_child(n->pid, 30, "nobody");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "nobody: %#x", st);
	close(n->cmd);
	close(n->res);
}

/* pid is gone, or a zombie nobody reaps yet */
static bool pid_gone(pid_t pid)
{
	char path[64], st[256];
	FILE *f;
	bool z = false;

	if (kill(pid, 0) < 0 && errno == ESRCH)
		return true;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return true;
	if (fgets(st, sizeof(st), f)) {
		const char *rp = strrchr(st, ')');

		z = rp && rp[1] == ' ' && rp[2] == 'Z';
	}
	fclose(f);
	return z;
}

/*
 * A child that becomes nobody (tu_become, as these tests' children do)
 * dies with its parent, as every tu_fork() child: the uid change clears
 * PR_SET_PDEATHSIG, which tu_become sets again. Before, the nobody child
 * of a test whose daemon died stayed behind after the suite.
 */
Test(revoke, a_child_that_became_nobody_dies_with_its_parent)
{
	pid_t mid, kid = 0;
	int p[2], st;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	cr_assert_eq(pipe(p), 0);
	mid = tu_fork();
	if (mid == 0) {
		pid_t k = fork();

		if (k == 0) {
			pid_t me = getpid();

			/* (its own parent, mid, exits once this is written) */
			if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 ||
			    tu_become(NOBODY, NOBODY) < 0 ||
			    write(p[1], &me, sizeof(me)) != sizeof(me))
				_exit(10);
			for (;;)
				pause();
		}
		/* once it is nobody: its pid for the test, and gone */
		if (k < 0 || read(p[0], &k, sizeof(k)) != sizeof(k) ||
		    write(p[1], &k, sizeof(k)) != sizeof(k))
			_exit(11);
		_exit(0);
	}
	close(p[1]);
	st = tu_wait_child(mid, 30, "the middle process");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "middle: %#x", st);
	cr_assert_eq(read(p[0], &kid, sizeof(kid)), (ssize_t)sizeof(kid));
	close(p[0]);
	for (int i = 0; i < 500 && !pid_gone(kid); i++)
		usleep(10000);
	if (!pid_gone(kid)) {
		kill(kid, SIGKILL);
		cr_assert_fail("the nobody child %d outlived its parent",
			       (int)kid);
	}
}

/* ---- the daemon and its policy ---- */

static void start(void)
{
	const char *args[] = {"--socket-mode", "0666", "--policy", policy,
			      NULL};

	tu_policy_file(policy, sizeof(policy), "revoke", "%s", GIVE);
	tu_daemon_start_args(&D, "info", args);
	cr_assert_eq(chmod(D.dir, 0755), 0);
}

/* The policy file becomes text, and the daemon has reloaded it. */
static void reload(struct td_client *c, const char *text)
{
	tu_policy_reload(c, D.pid, policy, text);
}

/* the daemon stopped; fds and buffer mappings counted, and every
 * mapping unless a thread ran (glibc keeps its stack and arena) */
static void stop_maps(bool every_map)
{
	tu_daemon_stop(&D, every_map);
	unlink(policy);
}

static void stop(void)
{
	stop_maps(true);
}

static struct td_client *root_conn(void)
{
	struct td_client *c = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_connect(D.sock, &c, &e), 0, "%s", e.reason);
	return c;
}

/* ---- rings ---- */

static int ring_put(struct td_ring *r, uint64_t *v)
{
	struct td_slot s;
	int rc = td_ring_acquire(r, 5000, &s);

	if (rc < 0)
		return rc;
	memset(s.planes[0], 0x5a, SIZE);
	return td_ring_publish(r, v);
}

/*
 * nobody subscribed to a ring while it could read its name: the slots it
 * maps would go on showing every version the producer writes after a
 * reload that took that read away. The ring ends instead: its producer
 * gets -EPIPE, the subscriber -EPIPE after what it had, and a new
 * subscription is refused. A reload that leaves the read ends nothing.
 */
Test(revoke, a_reload_that_takes_a_subscribers_read_ends_the_ring)
{
	uint64_t size = SIZE, v = 0;
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = &size, .slot_count = 4};
	struct td_ring *r = NULL;
	struct td_error e = {0};
	struct td_client *c;
	struct nobody n;
	struct result res;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	start();
	c = root_conn();
	cr_assert_eq(td_ring_create(c, RING, &desc, &r, &e), 0, "%s",
		     e.reason);
	nobody_start(&n);
	res = nobody_do(&n, 'S');
	cr_assert_eq(res.rc, 0, "subscribe: %s", res.reason);
	cr_assert_eq(ring_put(r, &v), 0);
	res = nobody_do(&n, 'N');
	cr_assert(res.rc == 0 && res.version == v, "%d %s", res.rc,
		  res.reason);

	reload(c, KEEP);
	cr_assert_eq(ring_put(r, &v), 0, "a reload that kept the read ended "
		     "the ring");
	res = nobody_do(&n, 'N');
	cr_assert(res.rc == 0 && res.version == v, "%d %s", res.rc,
		  res.reason);

	reload(c, TAKE);
	cr_assert_eq(ring_put(r, &v), -EPIPE,
		     "the producer goes on writing slots nobody maps");
	res = nobody_do(&n, 'N');
	cr_assert_eq(res.rc, -EPIPE, "the subscriber: %d (version %llu)",
		     res.rc, (unsigned long long)res.version);
	res = nobody_do(&n, 'S');
	cr_assert_eq(res.rc, -EACCES, "subscribe again: %d %s", res.rc,
		     res.reason);
	nobody_stop(&n);
	td_ring_close(r);
	td_client_close(c);
	stop();
}

/* ---- follows ---- */

/* A version of name whose bytes are all fill, from a stream loan (its
 * buffers recycled) */
static uint64_t name_fill(struct td_client *c, const char *name,
			  uint8_t fill)
{
	static const uint64_t shape[1] = {SIZE};
	uint64_t size = SIZE, v = 0;
	struct td_alloc *a = NULL;
	struct td_error e = {0};
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8, .ndim = 1,
			       .shape = shape, .fence_fd = -1};

	cr_assert_eq(td_client_alloc_named(c, name, 1, &size, TD_ALLOC_STREAM,
					   &a, &e),
		     0, "%s", e.reason);
	memset(td_alloc_data(a, 0), fill, SIZE);
	cr_assert_eq(td_client_publish_alloc(c, a, &p, &v, &e), 0, "%s",
		     e.reason);
	return v;
}

static uint64_t cam_fill(struct td_client *c, uint8_t fill)
{
	return name_fill(c, CAM, fill);
}

static uint64_t cam_put(struct td_client *c)
{
	return cam_fill(c, 0x33);
}

#define SECRET "rv/secret"

/* f's next version within 5 s, or -errno (*why the reason). */
static int64_t follow_take(struct td_follow *f, struct td_error *e)
{
	struct td_tensor *t = NULL;
	int rc = td_follow_next(f, 5000, &t, e);
	uint64_t v;

	if (rc < 0)
		return rc;
	v = td_tensor_version(t);
	td_tensor_release(t);
	return (int64_t)v;
}

/*
 * A daemon, root's client (returned) with CAM published (*v: its version,
 * unless NULL), and nobody following CAM.
 */
static struct td_client *cam_followed_by_nobody(struct nobody *n,
						uint64_t *v)
{
	struct td_client *c;
	struct result res;
	uint64_t ver;

	start();
	c = root_conn();
	ver = cam_put(c);
	if (v)
		*v = ver;
	nobody_start(n);
	res = nobody_do(n, 'F');
	cr_assert_eq(res.rc, 0, "follow: %s", res.reason);
	return c;
}

/* fd polls readable within timeout_ms */
static bool fd_readable(int fd, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	cr_assert_geq(fd, 0);
	return poll(&p, 1, timeout_ms) == 1;
}

/*
 * nobody follows CAM; so does root, on a follow of its own, on one in an
 * event loop (td_follow_fd) and through a get_newer loop (which follows
 * by itself). A reload that takes nobody's read of CAM away: the bell
 * goes on showing each version's reply to whoever maps it, so every
 * follow of CAM ends. nobody's with -EACCES; root's own is made anew by
 * td_follow_next on a new bell and goes on unbroken, as do its
 * get_newer and its event-loop follow, which keeps its fd (woken by the
 * end, then by the new follow's versions). Before, nobody's follow went
 * on taking the versions published after the reload, and the event-loop
 * follow said -ESTALE (follow again).
 */
Test(revoke, a_reload_that_takes_a_followers_read_ends_the_names_follows)
{
	struct td_client *c, *g;
	struct td_follow *rf = NULL, *ev = NULL;
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	struct nobody n;
	struct result res;
	uint64_t v;
	int efd;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	c = cam_followed_by_nobody(&n, &v);
	g = root_conn();
	res = nobody_do(&n, 'T');
	cr_assert(res.rc == 0 && res.version == v, "%d %s", res.rc,
		  res.reason);
	cr_assert_eq(td_client_follow(g, CAM, &rf, &e), 0, "%s", e.reason);
	cr_assert_eq(follow_take(rf, &e), (int64_t)v, "%s", e.reason);
	cr_assert_eq(td_client_follow(g, CAM, &ev, &e), 0, "%s", e.reason);
	efd = td_follow_fd(ev);
	cr_assert_geq(efd, 0);
	cr_assert_eq(td_follow_poll(ev, &t, &e), 0, "%s", e.reason);
	td_tensor_release(t);
	/* the first get_newer GETs, the second follows and waits */
	cr_assert_eq(td_client_get_newer(g, CAM, 0, 5000, &t, &e), 0, "%s",
		     e.reason);
	td_tensor_release(t);
	cr_assert_eq(td_client_get_newer(g, CAM, v, 0, &t, &e), -ETIMEDOUT,
		     "%s", e.reason);

	reload(c, KEEP);
	v = cam_put(c);
	res = nobody_do(&n, 'T');
	cr_assert(res.rc == 0 && res.version == v,
		  "a reload that kept the read: %d %s", res.rc, res.reason);
	cr_assert_eq(follow_take(rf, &e), (int64_t)v, "%s", e.reason);

	reload(c, TAKE);
	v = cam_put(c);
	res = nobody_do(&n, 'T');
	cr_assert_eq(res.rc, -EACCES, "nobody's follow after the reload: %d "
		     "(version %llu) %s", res.rc,
		     (unsigned long long)res.version, res.reason);
	cr_assert(strstr(res.reason, "policy reload"), "%s", res.reason);
	cr_assert_eq(follow_take(rf, &e), (int64_t)v, "root's follow: %s",
		     e.reason);
	cr_assert(fd_readable(td_follow_fd(ev), 5000),
		  "the event-loop follow's fd is woken by its end");
	cr_assert_eq(td_follow_poll(ev, &t, &e), 0,
		     "root's event-loop follow: %s", e.reason);
	cr_assert_eq(td_tensor_version(t), v);
	td_tensor_release(t);
	res = nobody_do(&n, 'G');
	cr_assert_eq(res.rc, -EACCES, "nobody's get_newer: %d %s", res.rc,
		     res.reason);
	cr_assert_eq(td_client_get_newer(g, CAM, v - 1, 5000, &t, &e), 0,
		     "root's get_newer: %s", e.reason);
	cr_assert_eq(td_tensor_version(t), v);
	td_tensor_release(t);
	cr_assert(!fd_readable(td_follow_fd(ev), 0));
	v = cam_put(c);
	cr_assert_eq(follow_take(rf, &e), (int64_t)v, "%s", e.reason);
	cr_assert_eq(td_client_get_newer(g, CAM, v - 1, 5000, &t, &e), 0,
		     "root's get_newer: %s", e.reason);
	cr_assert_eq(td_tensor_version(t), v);
	td_tensor_release(t);
	/* the same fd, the loop's registration, now the new follow's */
	cr_assert_eq(td_follow_fd(ev), efd);
	cr_assert(fd_readable(efd, 5000), "the new follow's version wakes the fd");
	cr_assert_eq(td_follow_poll(ev, &t, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_version(t), v);
	td_tensor_release(t);
	nobody_stop(&n);
	td_follow_close(ev);
	td_follow_close(rf);
	td_client_close(g);
	td_client_close(c);
	stop();
}

/*
 * A producer's names share its trigger page, and a follower of one of
 * them is handed the whole page (STAGE_PAGE): each name's word names
 * the version staged and fired there. nobody, who may read CAM only,
 * maps the page of root's producer of CAM and SECRET. The page shows it
 * no version of SECRET, which root also follows: a name is staged on a
 * page only while everyone handed the page may read it. A reload that
 * takes CAM from nobody too: the page stops showing CAM's versions,
 * which another follower goes on taking. Before, both went on showing.
 */
/* Seven versions of name through c (stream loans), each taken by f:
 * the first, and the last in *last. */
static uint64_t versions_taken(struct td_client *c, const char *name,
			       struct td_follow *f, uint64_t *last)
{
	struct td_error e = {0};
	uint64_t first = 0, v;

	for (int i = 0; i < 7; i++) {
		v = name_fill(c, name, (uint8_t)(0x50 + i));
		cr_assert_eq(follow_take(f, &e), (int64_t)v, "%s", e.reason);
		first = first ? first : v;
	}
	*last = v;
	return first;
}

/* The page nobody maps names no version from first on (name's first to
 * last were published since). */
static void page_names_none_from(struct nobody *n, uint64_t first,
				 uint64_t last, const char *name,
				 const char *when)
{
	struct result res = nobody_do(n, 'W');

	cr_assert(res.rc == 0 && res.version < first,
		  "the page nobody maps names version %llu%s (%s versions "
		  "%llu-%llu)", (unsigned long long)res.version, when, name,
		  (unsigned long long)first, (unsigned long long)last);
}

Test(revoke, a_trigger_page_shows_a_follower_only_names_it_may_read)
{
	struct td_client *c, *g;
	struct td_follow *sf = NULL, *cf = NULL;
	struct td_error e = {0};
	struct nobody n;
	struct result res;
	uint64_t v, first, first2;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	c = cam_followed_by_nobody(&n, NULL);
	reload(c, CAM_ONLY);
	g = root_conn();
	cr_assert_eq(td_client_follow(g, SECRET, &sf, &e), 0, "%s", e.reason);
	/* SECRET staged on c's page (root follows it): its words name
	 * versions from first on */
	first = versions_taken(c, SECRET, sf, &v);
	/* then CAM (versions from v on): nobody is handed the page */
	v = cam_put(c);
	cr_assert_gt(v, first, "CAM's version comes after SECRET's");
	cr_assert_eq(nobody_do(&n, 'T').version, v);
	first2 = cam_put(c);
	cr_assert_eq(nobody_do(&n, 'T').version, first2);
	res = nobody_do(&n, 'P');
	cr_assert_eq(res.rc, 0, "STAGE_PAGE: %d %s", res.rc, res.reason);
	res = nobody_do(&n, 'W');
	for (const char *w = res.reason; *w;) {
		char *end;
		unsigned long long x = strtoull(w, &end, 10);

		cr_assert(x < first || x >= v,
			  "the page handed to nobody names %llu, a version "
			  "of %s (%llu-%llu): %s", x, SECRET,
			  (unsigned long long)first,
			  (unsigned long long)v - 1, res.reason);
		w = end + (*end == ' ');
	}
	v = cam_put(c);
	cr_assert_eq(nobody_do(&n, 'T').version, v);
	res = nobody_do(&n, 'W');
	cr_assert(res.rc == 0 && res.version >= v,
		  "CAM is staged on the page: newest %llu, CAM %llu",
		  (unsigned long long)res.version, (unsigned long long)v);

	/* SECRET, once nobody has the page: staged no more */
	first = versions_taken(c, SECRET, sf, &v);
	page_names_none_from(&n, first, v, SECRET, "");

	/* nobody's follow of CAM ends; root's goes on, staged */
	reload(c, TAKE);
	cr_assert_eq(td_client_follow(g, CAM, &cf, &e), 0, "%s", e.reason);
	first = versions_taken(c, CAM, cf, &v);
	page_names_none_from(&n, first, v, CAM, " after the reload");
	nobody_stop(&n);
	td_follow_close(cf);
	td_follow_close(sf);
	td_client_close(g);
	td_client_close(c);
	stop();
}

/*
 * A follower handed a page whose words name what it may not read gets a
 * renewed page; when its producer's uid has no room left for the new
 * page's two fds (a reload lowered root's fds limit under what it
 * holds), there is none, and STAGE_PAGE says -ENOENT, to that follower
 * and the next. Once there is room the next one gets a page. Before, the
 * bell still named the producer whose page was gone, and the next
 * follower's STAGE_PAGE read that page through a NULL pointer: the
 * daemon died.
 */
Test(revoke, a_page_its_producer_had_no_room_to_renew_is_asked_again)
{
	struct td_client *c, *g;
	struct td_follow *sf = NULL;
	struct td_error e = {0};
	struct nobody n;
	struct result res;
	uint64_t v;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	c = cam_followed_by_nobody(&n, NULL);
	g = root_conn();
	cr_assert_eq(td_client_follow(g, SECRET, &sf, &e), 0, "%s", e.reason);
	/* CAM's bell names c's page; SECRET is staged on it too, which
	 * nobody may not read after the reload */
	for (int i = 0; i < 2; i++) {
		v = cam_put(c);
		cr_assert_eq(nobody_do(&n, 'T').version, v);
	}
	for (int i = 0; i < 4; i++) {
		v = name_fill(c, SECRET, 0x61);
		cr_assert_eq(follow_take(sf, &e), (int64_t)v, "%s", e.reason);
	}
	reload(c, CAM_ONLY "limit uid=0 fds 1\n");
	for (int i = 0; i < 2; i++) {
		res = nobody_do(&n, 'P');
		cr_assert_eq(res.rc, -ENOENT, "STAGE_PAGE %d: %d %s", i,
			     res.rc, res.reason);
	}
	reload(c, CAM_ONLY);
	res = nobody_do(&n, 'P');
	cr_assert_eq(res.rc, 0, "STAGE_PAGE: %d %s", res.rc, res.reason);
	v = cam_put(c);
	cr_assert_eq(nobody_do(&n, 'T').version, v);
	nobody_stop(&n);
	td_follow_close(sf);
	td_client_close(g);
	td_client_close(c);
	stop();
}

/* td_follow_next(f, timeout_ms) in a thread of its own */
struct next_waiter {
	struct td_follow *f;
	int timeout_ms, rc;
	atomic_bool done;
	char why[TD_WIRE_MAX_REASON + 1];
};

static void *next_wait(void *arg)
{
	struct next_waiter *w = arg;
	struct td_tensor *t = NULL;
	struct td_error e = {0};

	w->rc = td_follow_next(w->f, w->timeout_ms, &t, &e);
	td_tensor_release(t);
	snprintf(w->why, sizeof(w->why), "%s", e.reason);
	atomic_store(&w->done, true);
	return NULL;
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Reloads that end root's follow again and again while td_follow_next
 * waits on it (each takes nobody's read of CAM, gives it back, and
 * nobody follows anew) do not stretch the wait: the follow made anew
 * waits what is left of the call's timeout. Before, each one started
 * the whole timeout again, and the call went on while the reloads did.
 * The bound asserted is 20 times the timeout; each round of reloads
 * takes milliseconds.
 */
Test(revoke, reloads_that_keep_ending_a_follow_do_not_stretch_its_wait)
{
	struct next_waiter w = {.timeout_ms = 1000};
	struct td_client *c, *g;
	struct td_error e = {0};
	struct nobody n;
	struct result res;
	pthread_t th;
	uint64_t v;
	double t0;
	int ends = 0;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	c = cam_followed_by_nobody(&n, &v);
	g = root_conn();
	cr_assert_eq(td_client_follow(g, CAM, &w.f, &e), 0, "%s", e.reason);
	cr_assert_eq(follow_take(w.f, &e), (int64_t)v, "%s", e.reason);
	cr_assert_eq(pthread_create(&th, NULL, next_wait, &w), 0);
	t0 = mono_s();
	while (!atomic_load(&w.done) && mono_s() - t0 < 20.0) {
		reload(c, TAKE);
		ends++;
		reload(c, GIVE);
		res = nobody_do(&n, 'F');
		cr_assert_eq(res.rc, 0, "nobody follows anew: %s", res.reason);
	}
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert(atomic_load(&w.done), "unreachable: joined");
	cr_assert_eq(w.rc, -ETIMEDOUT, "td_follow_next: %d %s", w.rc, w.why);
	cr_assert_lt(mono_s() - t0, 20.0,
		     "td_follow_next(%d ms) waited while %d reloads ended "
		     "its follow, 20 s", w.timeout_ms, ends);
	cr_assert_geq(ends, 2, "the wait saw %d end(s) of its follow: the "
		      "reloads were too slow to test anything", ends);
	/* and the follow goes on */
	v = cam_put(c);
	cr_assert_eq(follow_take(w.f, &e), (int64_t)v, "%s", e.reason);
	nobody_stop(&n);
	td_follow_close(w.f);
	td_client_close(g);
	td_client_close(c);
	stop_maps(false);
}

/* A raw FOLLOW of CAM on a connection of root's that names features:
 * the reply's row fd, mapped (*row), the follow's id (*id) and bell
 * (*bell, mapped) unless NULL, and the socket. */
static int raw_follow(uint32_t features, struct td_follow_row **row,
		      uint64_t *id, const struct td_follow_hdr **bell)
{
	struct td_wire_ring_sub_req q = {.name = {CAM, sizeof(CAM) - 1},
					 .flags = TD_WIRE_REQ_SCM};
	int sock = raw_scm_conn_feat(&D, features);
	struct td_wire_follow_rep rep;
	struct rawrep r;
	void *p;

	cr_assert_eq(raw_call(sock, TD_OP_FOLLOW, 2,
			      td_wire_ring_sub_req_encode(&q, RAW_BODY,
							  RAW_CAP),
			      &r),
		     0);
	cr_assert_eq(r.nfds, TD_WIRE_FOLLOW_FDS);
	cr_assert_eq(td_wire_follow_rep_decode(RAW_BODY, r.h.body_len, &rep,
					       NULL),
		     0);
	if (id)
		*id = rep.id;
	p = mmap(NULL, TD_FOLLOW_ROW_LEN, PROT_READ, MAP_SHARED, r.fds[1], 0);
	cr_assert_neq(p, MAP_FAILED);
	*row = p;
	if (bell) {
		p = mmap(NULL, TD_FOLLOW_BELL_LEN, PROT_READ, MAP_SHARED,
			 r.fds[0], 0);
		cr_assert_neq(p, MAP_FAILED);
		*bell = p;
	}
	td__scm_close(r.fds, r.nfds);
	return sock;
}

/*
 * The row says why the daemon ended a follow (`ended`) to a library that
 * named TD_WIRE_FEAT_FOLLOW_END. One that did not cannot be told, and
 * would wait on a bell nobody writes: its connection is closed. The old
 * bell, which every follower maps, shows no version published after
 * the reload (its reply, blob and metadata, went on landing there).
 */
Test(revoke, a_follower_that_cannot_read_why_its_follow_ended_is_cut_off)
{
	const struct td_follow_hdr *bell;
	struct td_follow_row *told, *old;
	struct td_client *c;
	struct nobody n;
	struct result res;
	struct rawrep r;
	uint64_t told_id, v;
	int st, s_told, s_old;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	c = cam_followed_by_nobody(&n, NULL);
	s_told = raw_follow(TD_WIRE_FEAT_FOLLOW_END, &told, &told_id, &bell);
	s_old = raw_follow(0, &old, NULL, NULL);
	cr_assert_eq(atomic_load(&told->ended), 0);

	reload(c, TAKE);
	v = cam_put(c);
	cr_assert_lt(atomic_load(&bell->latest) >> 8, v,
		     "the bell shows a version published after the reload");
	cr_assert_eq(atomic_load(&told->ended), ESTALE);
	/* kept, and its follow is no more */
	cr_assert_eq(raw_call(s_told, TD_OP_FOLLOW_CLOSE, 3,
			      td_wire_ring_close_req_encode(
				      &(struct td_wire_ring_close_req){
					      .id = told_id},
				      RAW_BODY, RAW_CAP),
			      &r),
		     -ENOENT, "the connection that can be told is kept");
	tu_await_readable(s_old, TU_WAIT_S, "the old library's hang-up");
	st = (int)recv(s_old, &r, sizeof(r), MSG_DONTWAIT);
	cr_assert_eq(st, 0, "the old library's connection is not closed");
	res = nobody_do(&n, 'T');
	cr_assert_eq(res.rc, -EACCES, "%d %s", res.rc, res.reason);
	nobody_stop(&n);
	munmap((void *)bell, TD_FOLLOW_BELL_LEN);
	munmap(told, TD_FOLLOW_ROW_LEN);
	munmap(old, TD_FOLLOW_ROW_LEN);
	close(s_told);
	close(s_old);
	td_client_close(c);
	stop();
}

/* RING made by root's c, as *r (the old one, ended, closed first) */
static void ring_make(struct td_client *c, struct td_ring **r)
{
	uint64_t size = SIZE;
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = &size, .slot_count = 4};
	struct td_error e = {0};

	td_ring_close(*r);
	*r = NULL;
	cr_assert_eq(td_ring_create(c, RING, &desc, r, &e), 0, "%s",
		     e.reason);
}

/*
 * Read taken and given back, round after round, with a follower and a
 * subscriber of nobody's each time: each reload that takes it ends both,
 * each that gives it back lets nobody follow and subscribe anew, and the
 * daemon holds the same descriptors at the same point of every round
 * after the first (every bell, row and ring an end let go is gone).
 */
Test(revoke, read_taken_and_given_back_round_after_round_leaves_nothing)
{
	struct td_ring *r = NULL;
	struct td_client *c;
	struct nobody n;
	struct result res;
	uint64_t v;
	int fds = -1;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	start();
	c = root_conn();
	nobody_start(&n);
	for (int round = 0; round < 20; round++) {
		ring_make(c, &r);
		v = cam_put(c);
		res = nobody_do(&n, 'F');
		cr_assert_eq(res.rc, 0, "round %d follow: %s", round,
			     res.reason);
		res = nobody_do(&n, 'S');
		cr_assert_eq(res.rc, 0, "round %d subscribe: %s", round,
			     res.reason);
		/* from the second round on: the stream's buffers grew to
		 * what it keeps in the first */
		if (round == 1)
			fds = tu_pid_fd_count(D.pid);
		if (round >= 1)
			cr_assert_eq(tu_pid_fd_count(D.pid), fds, "round %d",
				     round);
		res = nobody_do(&n, 'T');
		cr_assert(res.rc == 0 && res.version == v, "round %d: %d %s",
			  round, res.rc, res.reason);
		cr_assert_eq(ring_put(r, &v), 0);
		res = nobody_do(&n, 'N');
		cr_assert(res.rc == 0 && res.version == v, "round %d: %d",
			  round, res.rc);

		reload(c, TAKE);
		(void)cam_put(c);
		res = nobody_do(&n, 'T');
		cr_assert_eq(res.rc, -EACCES, "round %d: %d %s", round, res.rc,
			     res.reason);
		cr_assert_eq(ring_put(r, &v), -EPIPE, "round %d", round);
		res = nobody_do(&n, 'N');
		cr_assert_eq(res.rc, -EPIPE, "round %d: %d", round, res.rc);
		reload(c, GIVE);
	}
	nobody_stop(&n);
	td_ring_close(r);
	td_client_close(c);
	stop();
}

/* t's first byte */
static uint8_t first_byte(const struct td_tensor *t)
{
	return ((const uint8_t *)td_tensor_plane_data(t, 0))[0];
}

/*
 * root follows CAM twice while nobody follows it too, and holds a tensor
 * from each follow when a reload ends them: a version gone from the name
 * (which the daemon held for the row) and the current one (which the row
 * holds). The ends let go of both, but root's tensors are not released:
 * their bytes stay as they were while CAM's stream goes on. Before, the
 * stream's next loans were made of those very buffers, and root's
 * tensors read what the producer wrote after the reload.
 */
Test(revoke, a_tensor_held_when_the_reload_ends_its_follow_keeps_its_bytes)
{
	struct td_client *c, *g;
	struct td_follow *f1 = NULL, *f2 = NULL;
	struct td_tensor *t1 = NULL, *t2 = NULL;
	struct td_error e = {0};
	struct nobody n;
	struct result res;
	uint64_t v;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	start();
	c = root_conn();
	g = root_conn();
	(void)cam_fill(c, 1);
	nobody_start(&n);
	res = nobody_do(&n, 'F');
	cr_assert_eq(res.rc, 0, "follow: %s", res.reason);
	cr_assert_eq(td_client_follow(g, CAM, &f1, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_follow(g, CAM, &f2, &e), 0, "%s", e.reason);
	/* every buffer of the stream mapped: taken with no GET after */
	for (int i = 0; i < 8; i++) {
		(void)cam_fill(c, (uint8_t)(2 + i));
		cr_assert_gt(follow_take(f1, &e), 0, "%s", e.reason);
		cr_assert_gt(follow_take(f2, &e), 0, "%s", e.reason);
	}
	(void)cam_fill(c, 0xa1);
	cr_assert_eq(td_follow_next(f1, 5000, &t1, &e), 0, "%s", e.reason);
	(void)cam_fill(c, 0xa2);
	cr_assert_eq(td_follow_next(f2, 5000, &t2, &e), 0, "%s", e.reason);
	cr_assert(first_byte(t1) == 0xa1 && first_byte(t2) == 0xa2);

	reload(c, TAKE);
	for (int i = 0; i < 8; i++)
		(void)cam_fill(c, (uint8_t)(0x10 + i));
	cr_expect_eq(first_byte(t1), 0xa1, "the tensor of the version gone "
		     "reads %#x", first_byte(t1));
	cr_expect_eq(first_byte(t2), 0xa2, "the tensor of the current "
		     "version reads %#x", first_byte(t2));
	td_tensor_release(t1);
	td_tensor_release(t2);
	/* made anew on the new bell, and on */
	v = cam_fill(c, 0x20);
	cr_assert_eq(follow_take(f1, &e), (int64_t)v, "%s", e.reason);
	cr_assert_eq(follow_take(f2, &e), (int64_t)v, "%s", e.reason);
	nobody_stop(&n);
	td_follow_close(f1);
	td_follow_close(f2);
	td_client_close(g);
	td_client_close(c);
	stop();
}

/*
 * A follower stores its hold of the version `latest` names, then looks
 * at `latest` again: unchanged, it reads that version. One that stores
 * it just after a reload ended its follow (it looked at `ended` just
 * before) must find `latest` moved, and look at `ended`, or it reads a
 * version whose hold nobody keeps: the end moves `latest` (to 0) before
 * it reads the rows' holds.
 */
Test(revoke, a_follows_end_moves_latest_for_a_hold_that_comes_after_it)
{
	const struct td_follow_hdr *bell;
	struct td_follow_row *row;
	struct td_client *c;
	struct nobody n;
	uint64_t latest;
	int s;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	c = cam_followed_by_nobody(&n, NULL);
	s = raw_follow(TD_WIRE_FEAT_FOLLOW_END, &row, NULL, &bell);
	latest = atomic_load(&bell->latest);
	cr_assert_neq(latest, 0);

	reload(c, TAKE);
	cr_assert_eq(atomic_load(&row->ended), ESTALE);
	cr_assert_neq(atomic_load(&bell->latest), latest,
		      "a hold stored now finds `latest` as it was");
	nobody_stop(&n);
	munmap((void *)bell, TD_FOLLOW_BELL_LEN);
	munmap(row, TD_FOLLOW_ROW_LEN);
	close(s);
	td_client_close(c);
	stop();
}

/* A raw connection of root's on the pidfd path (HELLO with a probe):
 * the socket; *pidfd the daemon's pidfd its reply carried. */
static int raw_pidfd_conn(int *pidfd)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct td_wire_hello_req hr = {TD_IMPORT_AUTO, -1, {"puller", 6},
				       TD_WIRE_FEAT_FOLLOW |
					       TD_WIRE_FEAT_FOLLOW_END};
	struct rawrep r;
	int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	cr_assert_geq(sock, 0);
	memcpy(sa.sun_path, D.sock, sizeof(D.sock));
	cr_assert_eq(connect(sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
	hr.probe_fd = sock;
	cr_assert_eq(raw_call(sock, TD_OP_HELLO, 1,
			      td_wire_hello_req_encode(&hr, RAW_BODY, RAW_CAP),
			      &r),
		     0);
	cr_assert_eq(r.nfds, 1, "no daemon pidfd in HELLO's reply");
	*pidfd = r.fds[0];
	return sock;
}

/* The inode of the daemon's fd number n now, 0 when it is closed. */
static ino_t daemon_fd_ino(int n)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)D.pid, n);
	return stat(path, &st) == 0 ? st.st_ino : 0;
}

/*
 * The fds root holds, as an ALLOC of one plane on c refused for root's
 * fds limit (which must be below them) says: "... N descriptors ...".
 */
static unsigned long long root_fds_held(struct td_client *c)
{
	uint64_t size = 64;
	struct td_alloc *a = NULL;
	struct td_error e = {0};
	unsigned long long n;
	const char *at;

	cr_assert_eq(td_client_alloc(c, 1, &size, &a, &e), -EDQUOT,
		     "an ALLOC past root's fds limit: %s", e.reason);
	at = strstr(e.reason, "fds limit: ");
	cr_assert(at && sscanf(at, "fds limit: %llu descriptors", &n) == 1,
		  "no count in \"%s\"", e.reason);
	return n;
}

/* On sock (root's, pidfd path) op, FOLLOW or STAGE_PAGE, of CAM by
 * number: its reply, which names the fds by their numbers in the daemon. */
static void cam_by_number(int sock, uint16_t op, uint64_t id,
			  struct td_wire_follow_rep *rep)
{
	struct td_wire_ring_sub_req q = {.name = {CAM, sizeof(CAM) - 1}};
	struct rawrep r;

	cr_assert_eq(raw_call(sock, op, id,
			      td_wire_ring_sub_req_encode(&q, RAW_BODY,
							  RAW_CAP),
			      &r),
		     0);
	cr_assert_eq(r.nfds, 0, "numbers, not fds");
	cr_assert_eq(td_wire_follow_rep_decode(RAW_BODY, r.h.body_len, rep,
					       NULL),
		     0);
}

/*
 * On the pidfd path a FOLLOW reply names the bell's and the row's fds by
 * their numbers in the daemon, which the client pulls (pidfd_getfd) once
 * it reads the reply. A reload that ended the follow before that pull
 * closed both, and by the pull the numbers named other files: another
 * name's bell, and no row or another follower's (found by a probe). The
 * two now stay open, the numbers theirs, until the connection's next
 * request, and a pull finds the ended follow's own row saying why. The
 * row's fd counts in root's fds until it closes.
 */
Test(revoke, an_ended_follows_fds_stay_until_its_follower_could_pull_them)
{
	struct td_wire_ring_close_req cq;
	struct td_wire_follow_rep rep;
	struct td_follow_row *row;
	struct td_follow *of = NULL;
	struct td_client *c, *g;
	struct td_error e = {0};
	struct nobody n;
	struct rawrep r;
	struct stat st;
	ino_t ino[TD_WIRE_FOLLOW_FDS];
	unsigned long long held;
	int sock, pidfd, fd;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	c = cam_followed_by_nobody(&n, NULL);
	g = root_conn();
	sock = raw_pidfd_conn(&pidfd);
	cam_by_number(sock, TD_OP_FOLLOW, 2, &rep);
	for (int i = 0; i < TD_WIRE_FOLLOW_FDS; i++) {
		ino[i] = daemon_fd_ino(rep.fds[i].fd);
		cr_assert_neq(ino[i], 0);
	}
	/* before the pull: the reload ends the follow, another name is
	 * followed (new descriptors in the daemon) */
	reload(c, TAKE);
	cr_assert_eq(td_client_follow(g, "other/x", &of, &e), 0, "%s",
		     e.reason);
	for (int i = 0; i < TD_WIRE_FOLLOW_FDS; i++) {
		fd = (int)syscall(SYS_pidfd_getfd, pidfd, rep.fds[i].fd, 0);
		cr_assert_geq(fd, 0, "the reply's fd %d: %s", rep.fds[i].fd,
			      strerror(errno));
		cr_assert_eq(fstat(fd, &st), 0);
		cr_assert_eq(st.st_ino, ino[i],
			     "the reply's fd %d names another file now",
			     rep.fds[i].fd);
		if (i == 1) {
			row = mmap(NULL, TD_FOLLOW_ROW_LEN, PROT_READ,
				   MAP_SHARED, fd, 0);
			cr_assert_neq(row, MAP_FAILED);
			cr_assert_eq(atomic_load(&row->ended), ESTALE);
			munmap(row, TD_FOLLOW_ROW_LEN);
		}
		close(fd);
	}
	/* meanwhile the row's fd counts in root's fds: a limit below what
	 * root holds makes every ALLOC say how many */
	reload(c, TAKE "limit uid=0 fds 1\n");
	held = root_fds_held(g);
	/* its next request: they close, and root holds one fd fewer */
	cq.id = rep.id;
	cr_assert_eq(raw_call(sock, TD_OP_FOLLOW_CLOSE, 3,
			      td_wire_ring_close_req_encode(&cq, RAW_BODY,
							    RAW_CAP),
			      &r),
		     -ENOENT);
	for (int i = 0; i < TD_WIRE_FOLLOW_FDS; i++)
		cr_assert_neq(daemon_fd_ino(rep.fds[i].fd), ino[i],
			      "fd %d still open after a request",
			      rep.fds[i].fd);
	cr_assert_eq(root_fds_held(g), held - 1,
		     "root held %llu fds with the ended row lingering, %llu "
		     "after", held, root_fds_held(g));
	close(pidfd);
	close(sock);
	nobody_stop(&n);
	td_follow_close(of);
	td_client_close(g);
	td_client_close(c);
	stop();
}

/* On sock (root's, pidfd path): STAGE_PAGE of CAM by number. The
 * number its reply names, whose inode in the daemon is *ino. */
static int page_number(int sock, ino_t *ino)
{
	struct td_wire_follow_rep rep;

	cam_by_number(sock, TD_OP_STAGE_PAGE, 4, &rep);
	*ino = daemon_fd_ino(rep.fds[0].fd);
	cr_assert_neq(*ino, 0);
	return rep.fds[0].fd;
}

/* The clients connected now, as c's STATUS says. */
static uint32_t clients_now(struct td_client *c)
{
	struct td_status *st = NULL;
	uint32_t n;

	cr_assert_eq(td_client_status(c, &st, NULL), 0);
	n = st->clients_total;
	td_status_free(st);
	return n;
}

/* The daemon's fd n pulled through pidfd is the file of inode ino. */
static void pulls_the_page(int pidfd, int n, ino_t ino, const char *when)
{
	struct stat st;
	int fd = (int)syscall(SYS_pidfd_getfd, pidfd, n, 0);

	cr_assert_geq(fd, 0, "the page's fd %d %s: %s", n, when,
		      strerror(errno));
	cr_assert_eq(fstat(fd, &st), 0);
	cr_assert_eq(st.st_ino, ino, "the page's fd %d names another file %s",
		     n, when);
	close(fd);
}

/*
 * A STAGE_PAGE reply names the page's fd by number on the pidfd path,
 * which the client pulls once it reads the reply. A renewal of the page
 * (a follower who may not read a name its words named asked for it) or
 * its producer's end closed the fd before that pull, and by the pull the
 * number named another file: the renewed page's, or anything the daemon
 * opened since. It now stays open, the number its own, until the
 * connection's next request, after either.
 */
Test(revoke, a_pages_fd_stays_until_its_stage_page_client_could_pull_it)
{
	struct td_wire_ring_sub_req q = {.name = {CAM, sizeof(CAM) - 1}};
	struct td_wire_follow_rep rep;
	struct td_client *c, *g, *prod;
	struct td_follow *sf = NULL;
	struct td_error e = {0};
	struct nobody n;
	struct rawrep r;
	struct result res;
	ino_t ino, ino2;
	uint64_t v;
	uint32_t clients;
	int sock, pidfd, num, num2, i;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	c = cam_followed_by_nobody(&n, NULL);
	g = root_conn();
	/* made after nobody's child, which would keep c's socket open */
	prod = root_conn();
	cr_assert_eq(td_client_follow(g, SECRET, &sf, &e), 0, "%s", e.reason);
	/* CAM's bell names prod's page; SECRET is staged on it too */
	for (i = 0; i < 2; i++) {
		v = cam_put(prod);
		cr_assert_eq(nobody_do(&n, 'T').version, v);
	}
	for (i = 0; i < 4; i++) {
		v = name_fill(prod, SECRET, 0x61);
		cr_assert_eq(follow_take(sf, &e), (int64_t)v, "%s", e.reason);
	}
	sock = raw_pidfd_conn(&pidfd);
	cam_by_number(sock, TD_OP_FOLLOW, 2, &rep);
	num = page_number(sock, &ino);
	/* before the pull: nobody, who may not read SECRET now, renews it */
	reload(c, CAM_ONLY);
	res = nobody_do(&n, 'P');
	cr_assert_eq(res.rc, 0, "STAGE_PAGE: %d %s", res.rc, res.reason);
	pulls_the_page(pidfd, num, ino, "after a renewal");
	/* the renewed page's, before the pull: its producer goes (STATUS
	 * counts one client fewer); the request closed the old one */
	num2 = page_number(sock, &ino2);
	cr_assert_neq(daemon_fd_ino(num), ino, "fd %d still open after a "
		      "request", num);
	clients = clients_now(g);
	td_client_close(prod);
	for (i = 0; clients_now(g) != clients - 1; i++) {
		cr_assert_lt(i, 5000, "the producer's end never seen");
		usleep(1000);
	}
	pulls_the_page(pidfd, num2, ino2, "after its producer's end");
	/* its next request: it closes */
	cr_assert_eq(raw_call(sock, TD_OP_STAGE_PAGE, 5,
			      td_wire_ring_sub_req_encode(&q, RAW_BODY,
							  RAW_CAP),
			      &r),
		     -ENOENT);
	cr_assert_neq(daemon_fd_ino(num2), ino2,
		      "fd %d still open after a request", num2);
	close(pidfd);
	close(sock);
	nobody_stop(&n);
	td_follow_close(sf);
	td_client_close(g);
	td_client_close(c);
	stop();
}
