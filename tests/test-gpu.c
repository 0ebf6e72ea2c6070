/* SPDX-License-Identifier: MIT */
/*
 * What GPU stages need from libtensord, without a GPU (docs/fastpath.md,
 * "GPU stages"): eventfd fences a producer signals, td_fence_wait() on
 * good and bad fences, fences that are waited for (the consumer never
 * reads early), producers that die before signalling, per-slot ring
 * fences, and loans and slots aligned for host-pointer imports.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "rawclient.h"
#include "tensord/tensord.h"
#include "testchild.h"
#include "testclient.h"
#include "testutil.h"

TestSuite(gpu, .timeout = TU_TEST_TIMEOUT_S);

#define BYTES (64u * 1024)

static struct td_client *connect_to(const struct tu_daemon *d)
{
	struct td_client *c = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_connect(d->sock, &c, &e), 0, "%s", e.reason);
	return c;
}

/* ---- td_fence_* on their own ---- */

Test(gpu, an_eventfd_fence_waits_until_signalled_and_stays_signalled)
{
	struct td_error e = {0};
	int fd = td_fence_create();

	cr_assert_geq(fd, 0);
	cr_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	cr_assert_eq(td_fence_wait(fd, 0, &e), -ETIMEDOUT);
	cr_assert_eq(td_fence_wait(fd, 30, &e), -ETIMEDOUT);
	cr_assert(strstr(e.reason, "did not signal within 30 ms"), "%s",
		  e.reason);
	cr_assert_eq(td_fence_signal(fd, &e), 0, "%s", e.reason);
	/* waiting never consumes the signal: every reader sees it */
	for (int i = 0; i < 3; i++)
		cr_assert_eq(td_fence_wait(fd, 0, &e), 0, "%s", e.reason);
	cr_assert_eq(td_fence_wait(fd, -1, &e), 0, "%s", e.reason);
	close(fd);
}

Test(gpu, bad_fences_are_refused_with_a_reason)
{
	struct td_error e = {0};
	char path[] = "/tmp/td-fence-XXXXXX";
	int file = tu_mkstemp(path), p[2];

	cr_assert_geq(file, 0);
	unlink(path);
	/* a plain file polls readable at once: it must not pass as signalled */
	cr_assert_eq(td_fence_wait(file, -1, &e), -EINVAL);
	cr_assert(strstr(e.reason, "not an eventfd or sync_file"), "%s",
		  e.reason);
	cr_assert_eq(td_fence_signal(file, &e), -EINVAL);
	cr_assert(pipe(p) == 0);
	cr_assert_eq(td_fence_wait(p[0], 0, &e), -EINVAL, "%s", e.reason);
	close(p[0]);
	close(p[1]);
	/* a closed descriptor */
	close(file);
	cr_assert_eq(td_fence_wait(file, -1, &e), -EBADF);
	cr_assert(strstr(e.reason, "not an open descriptor"), "%s", e.reason);
	cr_assert_eq(td_fence_signal(file, &e), -EBADF);
	cr_assert_eq(td_fence_wait(-1, -1, &e), -EBADF);
}

/*
 * A producer's own eventfd need not be non-blocking (eventfd(0, 0)); at
 * its largest count (2^64 - 2) a write of 1 blocks until someone reads.
 * Signalling such a fence must return at once: it is signalled already.
 * Without the fix the write blocks and the suite's timeout fails this.
 */
Test(gpu, signalling_a_blocking_eventfd_at_its_largest_count_returns)
{
	struct td_error e = {0};
	uint64_t most = UINT64_MAX - 1, count = 0;
	int fd = eventfd(0, EFD_CLOEXEC);

	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, &most, sizeof(most)), sizeof(most));
	cr_assert_eq(td_fence_signal(fd, &e), 0, "%s", e.reason);
	cr_assert_eq(td_fence_wait(fd, 0, &e), 0, "%s", e.reason);
	/* signalling a signalled fence leaves its count alone */
	cr_assert_eq(read(fd, &count, sizeof(count)), sizeof(count));
	cr_assert_eq(count, most);
	/* and an unsignalled blocking one is signalled by one write */
	cr_assert_eq(td_fence_signal(fd, &e), 0, "%s", e.reason);
	cr_assert_eq(read(fd, &count, sizeof(count)), sizeof(count));
	cr_assert_eq(count, 1);
	close(fd);
}

/*
 * A real sync_file without a GPU: the kernel's sw_sync timeline (debugfs,
 * CONFIG_SW_SYNC). Its ioctls are not in the uapi headers.
 */
struct sw_sync_create_fence_data {
	uint32_t value;
	char name[32];
	int32_t fence;
};
#define SW_SYNC_IOC_CREATE_FENCE _IOWR('W', 0, struct sw_sync_create_fence_data)
#define SW_SYNC_IOC_INC _IOW('W', 1, uint32_t)
#define SW_SYNC_PATH "/sys/kernel/debug/sync/sw_sync"

Test(gpu, a_sync_file_fence_is_waited_published_and_signalled_by_its_timeline)
{
	struct tu_daemon d;
	struct td_error e = {0};
	struct td_tensor *t;
	const uint64_t shape[1] = {4};
	const uint8_t bytes[4] = {1, 2, 3, 4};

	if (access(SW_SYNC_PATH, R_OK | W_OK) != 0)
		cr_skip_test("kernel feature missing: " SW_SYNC_PATH " (sw_sync, "
			     "CONFIG_SW_SYNC with debugfs) is absent, so no "
			     "sync_file can be made without a GPU driver");
	tu_daemon_start(&d, "warn");
	int tl = open(SW_SYNC_PATH, O_RDWR | O_CLOEXEC);
	cr_assert_geq(tl, 0);
	struct sw_sync_create_fence_data f = {.value = 1, .name = "td"};
	cr_assert_eq(ioctl(tl, SW_SYNC_IOC_CREATE_FENCE, &f), 0);
	cr_assert_eq(td_fence_wait(f.fence, 20, &e), -ETIMEDOUT);
	cr_assert(strstr(e.reason, "(sync_file) did not signal within 20 ms"),
		  "%s", e.reason);
	cr_assert_eq(td_fence_signal(f.fence, &e), -EINVAL);
	cr_assert(strstr(e.reason, "its driver signals it"), "%s", e.reason);
	struct td_client *c = connect_to(&d);
	struct td_publish p = {.name = "gpu/sync", .flags = TD_PUBLISH_FENCE,
			       .dtype = TD_TENSOR_U8, .ndim = 1,
			       .shape = shape, .fence_fd = f.fence};
	cr_assert_eq(td_client_put(c, &p, bytes, 4, NULL, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_client_get(c, "gpu/sync", &t, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_fence_wait(t, 0), -ETIMEDOUT);
	uint32_t one = 1;
	cr_assert_eq(ioctl(tl, SW_SYNC_IOC_INC, &one), 0);
	cr_assert_eq(td_tensor_fence_wait(t, -1), 0);
	cr_assert_eq(td_fence_wait(f.fence, 0, &e), 0, "%s", e.reason);
	td_tensor_release(t);
	td_client_close(c);
	close(f.fence);
	close(tl);
	tu_daemon_stop(&d, true);
}

/* ---- fences through the daemon ---- */

struct fenced {
	int go[2];   /* parent -> producer: signal now */
	int ready[2]; /* producer -> parent: published */
	bool signal; /* false: die without signalling */
};

/*
 * Producer: a recyclable loan (its mapping stays after publish, like a
 * GPU's imported memory), published with an eventfd fence BEFORE the
 * bytes are written; writes them and signals only when told (or dies).
 */
static void fenced_producer(const struct tu_daemon *d, void *arg)
{
	struct fenced *f = arg;
	struct td_client *c = open_client(d);
	struct td_alloc *a;
	const uint64_t size = BYTES, shape[1] = {BYTES / 4};
	struct td_error e = {0};
	int fence = td_fence_create();
	uint32_t *w;

	CK(fence >= 0);
	CK(td_client_alloc_ex(c, 1, &size, TD_ALLOC_RECYCLE, &a, &e) == 0);
	w = td_alloc_data(a, 0);
	struct td_publish p = {.name = "gpu/fenced", .flags = TD_PUBLISH_FENCE,
			       .dtype = TD_TENSOR_U32, .ndim = 1,
			       .shape = shape, .fence_fd = fence};
	CK(td_client_publish_alloc(c, a, &p, NULL, &e) == 0);
	say(f->ready[1]);
	hear(f->go[0]);
	if (!f->signal)
		_exit(0); /* dies: the daemon still holds the fence */
	/* the "device" finishes only now */
	for (uint32_t i = 0; i < BYTES / 4; i++)
		w[i] = 0xC0DE0000u + i;
	CK(td_fence_signal(fence, &e) == 0);
	close(fence);
	say(f->ready[1]);
	hear(f->go[0]); /* keep the version until the parent read it */
	td_client_close(c);
}

/* A daemon and a fenced producer that has published; its pid. */
static pid_t start_fenced(struct tu_daemon *d, struct fenced *f, bool signal)
{
	pid_t pid;

	tu_daemon_start(d, "warn");
	cr_assert(pipe(f->go) == 0 && pipe(f->ready) == 0);
	f->signal = signal;
	pid = spawn(d, fenced_producer, f);
	hear(f->ready[0]);
	return pid;
}

static void fenced_done(struct fenced *f)
{
	close(f->go[0]);
	close(f->go[1]);
	close(f->ready[0]);
	close(f->ready[1]);
}

Test(gpu, a_consumer_waits_for_a_delayed_fence_and_reads_the_final_bytes)
{
	struct tu_daemon d;
	struct td_tensor *t;
	struct td_error e = {0};
	struct fenced f;
	pid_t pid = start_fenced(&d, &f, true);
	struct td_client *c = connect_to(&d);

	cr_assert_eq(td_client_get(c, "gpu/fenced", &t, &e), 0, "%s",
		     e.reason);
	cr_assert(td_tensor_has_fence(t));
	cr_assert_geq(td_tensor_fence_fd(t), 0);
	cr_assert_eq(td_tensor_plane_kind(t, 0), TD_PLANE_MEMFD);
	cr_assert_eq(td_tensor_plane_kind(t, 1), 0);
	/* published, not written: the fence holds the consumer back */
	cr_assert_eq(td_tensor_fence_wait(t, 0), -ETIMEDOUT);
	cr_assert_eq(td_tensor_fence_wait(t, 50), -ETIMEDOUT);
	const uint32_t *w = td_tensor_plane_data(t, 0);
	cr_assert_eq(w[1], 0, "nothing written before the signal");
	say(f.go[1]); /* now the producer writes and signals */
	/* bounded: a producer that died first never signals */
	cr_assert_eq(td_tensor_fence_wait(t, TU_WAIT_S * 1000), 0,
		     "the producer never signalled");
	/* whatever the timing, a wait that returned 0 means all is there */
	for (uint32_t i = 0; i < BYTES / 4; i++)
		cr_assert_eq(w[i], 0xC0DE0000u + i, "word %u", i);
	hear(f.ready[0]);
	td_tensor_release(t);
	td_client_close(c);
	say(f.go[1]);
	cr_assert_eq(reap(pid), 0);
	fenced_done(&f);
	tu_daemon_stop(&d, true);
}

Test(gpu, a_fence_whose_producer_died_unsignalled_times_out_clearly)
{
	struct tu_daemon d;
	struct td_tensor *t;
	struct td_error e = {0};
	struct fenced f;
	pid_t pid = start_fenced(&d, &f, false);

	say(f.go[1]);
	cr_assert_eq(reap(pid), 0); /* gone without signalling */
	struct td_client *c = connect_to(&d);
	/* the version stays (it was published) with its never-signalled
	 * fence: the consumer's bounded wait says so */
	cr_assert_eq(td_client_get(c, "gpu/fenced", &t, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_fence_wait(td_tensor_fence_fd(t), 100, &e),
		     -ETIMEDOUT);
	cr_assert(strstr(e.reason, "(eventfd, relayed by tensord) did not "
			 "signal within 100 ms"),
		  "%s", e.reason);
	td_tensor_release(t);
	td_client_close(c);
	fenced_done(&f);
	tu_daemon_stop(&d, true);
}

/* ---- a fence of each consumer's own (docs/fastpath.md, "Fences") ---- */

static struct td_client *connect_import(const struct tu_daemon *d,
					const char *import)
{
	cr_assert_eq(setenv("TENSORD_IMPORT", import, 1), 0);
	struct td_client *c = connect_to(d);
	cr_assert_eq(unsetenv("TENSORD_IMPORT"), 0);
	return c;
}

/* A version of name with an unsignalled eventfd fence: that eventfd. */
static int put_fenced(struct td_client *c, const char *name, uint8_t val)
{
	struct td_error e = {0};
	const uint64_t shape[1] = {4};
	const uint8_t bytes[4] = {val, val, val, val};
	int efd = td_fence_create();

	cr_assert_geq(efd, 0);
	struct td_publish p = {.name = name, .flags = TD_PUBLISH_FENCE,
			       .dtype = TD_TENSOR_U8, .ndim = 1,
			       .shape = shape, .fence_fd = efd};
	cr_assert_eq(td_client_put(c, &p, bytes, 4, NULL, &e), 0, "%s",
		     e.reason);
	return efd;
}

static struct td_tensor *get_of(struct td_client *c, const char *name)
{
	struct td_tensor *t = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_get(c, name, &t, &e), 0, "%s", e.reason);
	cr_assert(td_tensor_has_fence(t));
	return t;
}

static const char *fd_link(int fd)
{
	static char link[64];
	char path[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	link[n < 0 ? 0 : n] = 0;
	return link;
}

/*
 * Every consumer used to get the producer's eventfd itself: one that
 * wrote it signalled the fence early for all, one that read it
 * un-signalled it for all (their waits timed out). Now each gets a
 * timerfd of its own, on both import paths, which only tensord fires.
 */
Test(gpu, a_consumer_that_reads_or_writes_its_fence_leaves_the_others_alone)
{
	struct tu_daemon d;
	struct td_error e = {0};
	uint64_t one = 1, ticks;

	tu_daemon_start(&d, "warn");
	struct td_client *prod = connect_to(&d);
	struct td_client *a = connect_import(&d, "auto");
	struct td_client *b = connect_import(&d, "scm");
	int efd = put_fenced(prod, "gpu/shared", 7);
	struct td_tensor *ta = get_of(a, "gpu/shared");
	struct td_tensor *tb = get_of(b, "gpu/shared");
	int fa = td_tensor_fence_fd(ta), fb = td_tensor_fence_fd(tb);

	cr_assert_str_eq(fd_link(fa), "anon_inode:[timerfd]");
	cr_assert_str_eq(fd_link(fb), "anon_inode:[timerfd]");
	/* a consumer cannot signal the fence early, for itself or others */
	cr_assert_eq(write(fa, &one, sizeof(one)), -1);
	cr_assert_eq(td_fence_signal(fa, &e), -EINVAL);
	cr_assert(strstr(e.reason, "a consumer's own fence"), "%s", e.reason);
	cr_assert_eq(td_tensor_fence_wait(ta, 0), -ETIMEDOUT);
	cr_assert_eq(td_tensor_fence_wait(tb, 50), -ETIMEDOUT);
	/* the producer signals: both see it */
	cr_assert_eq(td_fence_signal(efd, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_fence_wait(ta, TU_WAIT_S * 1000), 0);
	/* one that consumes its copy un-signals that copy only */
	tu_await_readable(fa, TU_WAIT_S, "a's fence");
	cr_assert_eq(read(fa, &ticks, sizeof(ticks)), (ssize_t)sizeof(ticks));
	cr_assert_eq(td_tensor_fence_wait(ta, 0), -ETIMEDOUT);
	cr_assert_eq(td_tensor_fence_wait(tb, TU_WAIT_S * 1000), 0,
		     "a's read un-signalled b's fence");
	cr_assert_eq(td_fence_wait(efd, 0, &e), 0, "the producer's is intact");
	/* one that comes after the signal finds its fence signalled */
	struct td_client *c = connect_import(&d, "scm");
	struct td_tensor *tc = get_of(c, "gpu/shared");
	cr_assert_eq(td_tensor_fence_wait(tc, 0), 0);
	td_tensor_release(tc);
	td_tensor_release(tb);
	td_tensor_release(ta);
	td_client_close(c);
	td_client_close(b);
	td_client_close(a);
	close(efd);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

/*
 * A connection's released timerfds are kept for its next fenced GETs:
 * one that came back must be unsignalled again (disarming clears its
 * expirations), and a stream of fenced versions grows no descriptor in
 * the daemon.
 */
Test(gpu, a_reused_fence_of_ones_own_starts_unsignalled_and_costs_no_fd)
{
	struct tu_daemon d;
	struct td_error e = {0};
	struct td_entry en;
	int before = -1;

	tu_daemon_start(&d, "warn");
	struct td_client *prod = connect_to(&d);
	struct td_client *cons = connect_to(&d);

	for (int i = 0; i < 40; i++) {
		int efd = put_fenced(prod, "gpu/stream", (uint8_t)i);
		struct td_tensor *t = get_of(cons, "gpu/stream");

		cr_assert_eq(td_tensor_fence_wait(t, 0), -ETIMEDOUT,
			     "round %d: its fence came signalled", i);
		cr_assert_eq(td_fence_signal(efd, &e), 0, "%s", e.reason);
		cr_assert_eq(td_tensor_fence_wait(t, TU_WAIT_S * 1000), 0,
			     "round %d", i);
		td_tensor_release(t);
		close(efd);
		/* a round trip: the release is done */
		cr_assert_eq(td_client_stat(cons, "gpu/stream", &en, &e), 0);
		if (i == 4)
			before = tu_pid_fd_count(d.pid);
	}
	cr_assert_eq(tu_pid_fd_count(d.pid), before);
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

/*
 * The daemon watches a pending eventfd while its version lives: a version
 * freed unsignalled leaves the watched set (a later signal of the
 * producer's eventfd touches nothing, not even the version record reused
 * next), and one kept only by a lease still relays its signal.
 */
Test(gpu, a_fence_outliving_its_version_touches_nothing)
{
	struct tu_daemon d;
	struct td_error e = {0};
	struct td_entry en;

	tu_daemon_start(&d, "warn");
	struct td_client *prod = connect_to(&d);
	struct td_client *cons = connect_to(&d);
	int e1 = put_fenced(prod, "gpu/gone", 1);
	struct td_tensor *t = get_of(cons, "gpu/gone");

	td_tensor_release(t);
	/* version 1 is freed watched and unsignalled; version 3 is likely
	 * made in its record, and watched */
	int e2 = put_fenced(prod, "gpu/gone", 2);
	int e3 = put_fenced(prod, "gpu/gone", 3);
	t = get_of(cons, "gpu/gone");
	cr_assert_eq(td_fence_signal(e1, &e), 0, "%s", e.reason);
	cr_assert_eq(td_fence_signal(e2, &e), 0, "%s", e.reason);
	for (int i = 0; i < 2; i++) /* the loop has seen the signals */
		cr_assert_eq(td_client_stat(cons, "gpu/gone", &en, &e), 0);
	cr_assert_eq(td_tensor_fence_wait(t, 50), -ETIMEDOUT,
		     "another version's signal fired this fence");
	/* deleted while leased: the lease keeps it and its fence relayed */
	cr_assert_eq(td_client_delete(prod, "gpu/gone", NULL, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_fence_signal(e3, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_fence_wait(t, TU_WAIT_S * 1000), 0);
	td_tensor_release(t);
	close(e1);
	close(e2);
	close(e3);
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

/* A loan of name, one plane of BYTES, as the daemon lends it. */
static struct td_alloc *loan_of(struct td_client *c, const char *name,
				uint32_t flags)
{
	struct td_error e = {0};
	struct td_alloc *a = NULL;
	const uint64_t size = BYTES;

	cr_assert_eq(td_client_alloc_named(c, name, 1, &size, flags, &a, &e),
		     0, "%s", e.reason);
	return a;
}

/* Fill a with val, publish it as name with the eventfd fence (-1: none). */
static uint64_t publish_loan(struct td_client *c, struct td_alloc *a,
			     const char *name, uint8_t val, int fence)
{
	struct td_error e = {0};
	const uint64_t shape[1] = {BYTES};
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape};
	uint64_t v = 0;

	memset(td_alloc_data(a, 0), val, BYTES);
	if (fence >= 0) {
		p.flags = TD_PUBLISH_FENCE;
		p.fence_fd = fence;
	}
	cr_assert_eq(td_client_publish_alloc(c, a, &p, &v, &e), 0, "%s",
		     e.reason);
	return v;
}

/*
 * A producer may publish a TD_ALLOC_RECYCLE loan with a fence while its
 * device still writes it (docs/fastpath.md, "Which loans"). Its buffer
 * used to come back as the producer's next loan as soon as a newer
 * version replaced it, fence pending or not, so the next frame's writes
 * (the CPU's, another queue's) raced the device's. A version that goes
 * with its fence pending waits on the free list until the fence
 * signalled, lent to nobody before; one whose fence signalled is
 * recycled as before (a recycled buffer holds its bytes, a new one
 * zeros). Each round on a connection of its own: the free list
 * is the connection's.
 */
/* connected clients (a tc_status_until field) */
static uint64_t clients_of(const struct td_status *st)
{
	return st->client_count;
}

Test(gpu, a_buffer_whose_fence_is_pending_is_not_recycled)
{
	struct tu_daemon d;
	struct td_error e = {0};

	tu_daemon_start(&d, "warn");
	for (int signalled = 0; signalled < 2; signalled++) {
		struct td_client *prod = connect_to(&d);
		int f = td_fence_create();
		struct td_alloc *a;

		cr_assert_geq(f, 0);
		publish_loan(prod, loan_of(prod, "gpu/busy", TD_ALLOC_RECYCLE),
			     "gpu/busy", 0xab, f);
		if (signalled)
			cr_assert_eq(td_fence_signal(f, &e), 0, "%s",
				     e.reason);
		/* replaced, unleased: the fenced version goes */
		publish_loan(prod, loan_of(prod, "gpu/busy", TD_ALLOC_RECYCLE),
			     "gpu/busy", 0xcd, -1);
		a = loan_of(prod, "gpu/busy", TD_ALLOC_RECYCLE);
		if (signalled)
			cr_assert_eq(*(uint8_t *)td_alloc_data(a, 0), 0xab,
				     "a signalled buffer was not recycled");
		else
			cr_assert_eq(*(uint8_t *)td_alloc_data(a, 0), 0,
				     "lent again with its fence pending");
		if (!signalled) {
			/* kept, not closed: once its fence signalled it is
			 * lent again (a pipelined producer gets no new
			 * buffer, fd and mapping per frame) */
			struct td_alloc *b;

			cr_assert_eq(td_fence_signal(f, &e), 0, "%s",
				     e.reason);
			b = loan_of(prod, "gpu/busy", TD_ALLOC_RECYCLE);
			cr_assert_eq(*(uint8_t *)td_alloc_data(b, 0), 0xab,
				     "not lent again once its fence "
				     "signalled");
			td_alloc_free(b);
		}
		td_alloc_free(a);
		close(f);
		td_client_close(prod);
	}
	/* a buffer waiting for its fence goes with its producer, and the
	 * descriptor of the fence it kept with it (counted while only the
	 * watching client w is connected: the daemon reads hang-ups on its
	 * own time) */
	{
		struct td_client *w = connect_to(&d), *prod;
		int f = td_fence_create(), base;

		cr_assert_geq(f, 0);
		cr_assert_eq(tc_status_until(w, clients_of, 1), 1);
		base = tu_pid_fd_count(d.pid);
		prod = connect_to(&d);
		publish_loan(prod, loan_of(prod, "gpu/gone", TD_ALLOC_RECYCLE),
			     "gpu/gone", 0xab, f);
		publish_loan(prod, loan_of(prod, "gpu/gone", TD_ALLOC_RECYCLE),
			     "gpu/gone", 0xcd, -1);
		cr_assert_eq(td_client_delete(prod, "gpu/gone", NULL, &e), 0,
			     "%s", e.reason);
		cr_assert_gt(tu_pid_fd_count(d.pid), base,
			     "the buffers wait on the free list");
		td_client_close(prod);
		close(f);
		cr_assert_eq(tc_status_until(w, clients_of, 1), 1);
		cr_assert_eq(tu_pid_fd_count(d.pid), base,
			     "the daemon kept descriptors of a gone producer: "
			     "%d, %d before",
			     tu_pid_fd_count(d.pid), base);
		td_client_close(w);
	}
	tu_daemon_stop(&d, true);
}

/*
 * A consumer's own fence is fired by the daemon of the connection that
 * leased it, and by nothing else: once that connection is gone (the
 * client closed while it holds the tensor, the daemon killed), a wait
 * says so (-ECONNRESET) instead of waiting out its timeout, or forever,
 * for a signal the producer may well have given. One fired before
 * stays signalled.
 */
Test(gpu, a_fence_of_ones_own_whose_connection_is_gone_says_so)
{
	struct tu_daemon d;
	struct td_error e = {0};
	int st;

	tu_daemon_start(&d, "warn");
	struct td_client *prod = connect_to(&d);
	struct td_client *a = connect_import(&d, "scm");
	struct td_client *b = connect_import(&d, "auto");
	int e1 = put_fenced(prod, "gpu/orphan", 1);
	struct td_tensor *ta = get_of(a, "gpu/orphan");
	struct td_tensor *tb = get_of(b, "gpu/orphan");
	int e2 = put_fenced(prod, "gpu/fired", 2);
	struct td_tensor *tf = get_of(b, "gpu/fired");

	cr_assert_eq(td_fence_signal(e2, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_fence_wait(tf, TU_WAIT_S * 1000), 0);
	/* a's client closed: its lease, so its relay, ended with it */
	td_client_close(a);
	cr_assert_eq(td_tensor_fence_wait(ta, TU_WAIT_S * 1000), -ECONNRESET);
	td_tensor_release(ta);
	/* the daemon gone: the producer's signal reaches nobody's own */
	cr_assert_eq(kill(d.pid, SIGKILL), 0);
	cr_assert(tu_reap_within(d.pid, TU_WAIT_S, &st));
	cr_assert_eq(td_fence_signal(e1, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_fence_wait(tb, TU_WAIT_S * 1000), -ECONNRESET);
	cr_assert_eq(td_fence_wait(td_tensor_fence_fd(tb), 0, &e), -ETIMEDOUT);
	cr_assert_eq(td_tensor_fence_wait(tf, 0), 0, "fired before: kept");
	td_tensor_release(tf);
	td_tensor_release(tb);
	td_client_close(b);
	td_client_close(prod);
	close(e1);
	close(e2);
	unlink(d.sock);
	rmdir(d.dir);
}

/* A thread in td_tensor_fence_wait(t, -1): its result, its task id. */
struct fence_waiter {
	struct td_tensor *t;
	_Atomic pid_t tid;
	int rc;
};

static void *wait_fence(void *arg)
{
	struct fence_waiter *w = arg;

	atomic_store(&w->tid, (pid_t)syscall(SYS_gettid));
	w->rc = td_tensor_fence_wait(w->t, -1);
	return NULL;
}

/* Until task tid sleeps in system call nr or nr2 (-1: none), what. */
static void await_in(pid_t tid, long nr, long nr2, const char *what)
{
	char path[64], buf[64];

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
	for (int tries = 0;; tries++) {
		FILE *f = fopen(path, "r");
		long now = -1;

		cr_assert(f, "%s", path);
		if (fgets(buf, sizeof(buf), f))
			now = strtol(buf, NULL, 10);
		fclose(f);
		if (now == nr || (nr2 >= 0 && now == nr2))
			return;
		cr_assert_lt(tries, TU_WAIT_S * 1000, "never waited in %s",
			     what);
		usleep(1000);
	}
}

/* Until task tid sleeps in poll(2) or ppoll(2). */
static void await_in_poll(pid_t tid)
{
#ifdef SYS_poll
	await_in(tid, SYS_poll, SYS_ppoll, "poll");
#else
	await_in(tid, SYS_ppoll, -1, "poll");
#endif
}

/*
 * tensord fires a consumer's own fence with a one-nanosecond timer, and
 * the library counts it signalled while armed. If tensord then went at
 * once, a wait asleep on both fence and connection could see the hang-up
 * before the expiry and said -ECONNRESET for a fence that had fired.
 * Here the fence is armed (as by tensord, but with a long expiry, so the
 * moment lasts) while the wait sleeps, then the daemon is killed: the
 * wait says signalled.
 */
Test(gpu, a_fence_fired_just_before_its_daemon_went_is_signalled)
{
	struct tu_daemon d;
	struct fence_waiter w = {0};
	const struct itimerspec later = {{0, 0}, {3600, 0}};
	pthread_t th;
	int st;

	tu_daemon_start(&d, "warn");
	struct td_client *prod = connect_to(&d);
	struct td_client *cons = connect_to(&d);
	int efd = put_fenced(prod, "gpu/last", 1);

	w.t = get_of(cons, "gpu/last");
	cr_assert_eq(pthread_create(&th, NULL, wait_fence, &w), 0);
	while (!atomic_load(&w.tid))
		usleep(1000);
	await_in_poll(atomic_load(&w.tid));
	cr_assert_eq(timerfd_settime(td_tensor_fence_fd(w.t), 0, &later,
				     NULL),
		     0);
	cr_assert_eq(kill(d.pid, SIGKILL), 0);
	cr_assert(tu_reap_within(d.pid, TU_WAIT_S, &st));
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(w.rc, 0, "fired, yet %d", w.rc);
	td_tensor_release(w.t);
	td_client_close(cons);
	td_client_close(prod);
	close(efd);
	unlink(d.sock);
	rmdir(d.dir);
}

Test(gpu, publishing_a_bad_fence_is_refused_with_a_reason)
{
	struct tu_daemon d;
	struct td_error e = {0};
	char path[] = "/tmp/td-fence-XXXXXX";
	const uint64_t shape[1] = {4};
	const uint8_t bytes[4] = {1, 2, 3, 4};

	tu_daemon_start(&d, "warn");
	int file = tu_mkstemp(path);
	cr_assert_geq(file, 0);
	unlink(path);
	struct td_client *c = connect_to(&d);
	struct td_publish p = {.name = "gpu/bad", .flags = TD_PUBLISH_FENCE,
			       .dtype = TD_TENSOR_U8, .ndim = 1,
			       .shape = shape, .fence_fd = file};
	cr_assert_eq(td_client_put(c, &p, bytes, 4, NULL, &e), -EINVAL);
	cr_assert(strstr(e.reason, "fence fd is not an eventfd or sync_file"),
		  "%s", e.reason);
	/* a closed fd (a high number nothing reuses meanwhile) */
	cr_assert_eq(dup2(file, 900), 900);
	close(900);
	close(file);
	p.fence_fd = 900;
	int rc = td_client_put(c, &p, bytes, 4, NULL, &e);
	cr_assert_eq(rc, -EBADF, "%d %s", rc, e.reason);
	cr_assert(strstr(e.reason, "fence fd 900: fence fd is not an open "
			 "descriptor"), "%s", e.reason);
	/* a consumer's own fence (a GET's timerfd) is no fence to publish */
	p.fence_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
	cr_assert_geq(p.fence_fd, 0);
	cr_assert_eq(td_client_put(c, &p, bytes, 4, NULL, &e), -EINVAL);
	cr_assert(strstr(e.reason, "is a timerfd (a consumer's own copy"),
		  "%s", e.reason);
	close(p.fence_fd);
	/* nothing was published; the daemon is fine */
	struct td_entry en;
	cr_assert_eq(td_client_stat(c, "gpu/bad", &en, &e), -ENOENT);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/*
 * Buffers a producer brings that are no memfd or dma-buf: refused here,
 * -EINVAL saying what the fd is (a pipe once came back -ESPIPE "Illegal
 * seek", an eventfd passed as a dma-buf to the daemon), nothing sent.
 */
/*
 * Until the daemon holds no more than n descriptors (bounded): a peer's
 * socket or file is closed on td-closer-peer, after the refusal's reply
 * (and the start's probe connection may close meanwhile: fewer).
 */
static void await_daemon_fds(pid_t pid, int n, const char *what)
{
	for (int waited = 0; tu_pid_fd_count(pid) > n; waited += 10) {
		cr_assert_lt(waited, TU_WAIT_S * 1000,
			     "%s: the daemon holds %d descriptors, %d before",
			     what, tu_pid_fd_count(pid), n);
		poll(NULL, 0, 10);
	}
}

Test(gpu, publishing_a_buffer_that_is_no_memfd_or_dmabuf_says_what_it_is)
{
	struct tu_daemon d;
	struct td_error e = {0};
	const uint64_t shape[1] = {16};
	int p[2], sv[2];

	tu_daemon_start(&d, "warn");
	cr_assert(pipe2(p, O_CLOEXEC) == 0);
	cr_assert(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	int zero = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	int ev = eventfd(0, EFD_CLOEXEC);
	const int fds[4] = {p[0], sv[0], zero, ev};
	const char *what[4] = {"is a pipe", "is a socket",
			       "is a character device",
			       "is an fd of another kind"};
	struct td_client *c = connect_to(&d);
	int dfds = tu_pid_fd_count(d.pid);

	cr_assert_geq(zero, 0);
	for (int i = 0; i < 4; i++) {
		struct td_publish pb = {.name = "gpu/nb", .dtype = TD_TENSOR_U8,
					.ndim = 1, .shape = shape,
					.fd_count = 1, .fds = &fds[i]};

		cr_assert_eq(td_client_publish(c, &pb, NULL, &e), -EINVAL,
			     "%d: %s", i, e.reason);
		cr_assert(strstr(e.reason, what[i]), "%s", e.reason);
		cr_assert(strstr(e.reason, "not a memfd or dma-buf"), "%s",
			  e.reason);
	}
	await_daemon_fds(d.pid, dfds, "refused buffers");
	struct td_entry en;
	cr_assert_eq(td_client_stat(c, "gpu/nb", &en, &e), -ENOENT);
	for (int i = 0; i < 4; i++)
		close(fds[i]);
	close(p[1]);
	close(sv[1]);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/*
 * A raw PUBLISH (SCM_RIGHTS, past libtensord's own checks) of one sealed
 * memfd plane of 4 KiB and fence as fd-table entry 1: the reply's status,
 * its reason into why.
 */
static int32_t raw_publish_fenced(int sock, const char *name, int plane,
				  int fence, char *why, size_t cap)
{
	const uint64_t shape[1] = {4096};
	static const int64_t strides[1] = {1};
	struct td_blob_plane pl = {.handle = 0, .stride = 4096, .size = 4096,
				   .used = 4096};
	struct td_blob_desc bd = {
		.storage_kind = TD_STORAGE_SHM, .pid = (uint32_t)getpid(),
		.fence_fd = 1, .dtype = TD_DTYPE_U8,
		.quant_axis = TD_QUANT_NONE, .ndim = 1, .shape = shape,
		.strides_len = 1, .strides = strides, .plane_count = 1,
		.planes = &pl,
	};
	uint8_t blob[512];
	int64_t blen = td_blob_encode(&bd, blob, sizeof(blob), NULL);
	const int fds[2] = {plane, fence};
	struct rawrep r;

	cr_assert_gt(blen, 0);
	struct td_wire_publish_req q = {
		.name = {name, (uint16_t)strlen(name)},
		.meta = {(const uint8_t *)"", 0},
		.blob = {blob, (uint32_t)blen}, .fd_count = 2,
		.fds = {plane, fence},
	};
	int64_t n = td_wire_publish_req_encode(&q, RAW_BODY, RAW_CAP);
	struct td_wire_hdr h = {.magic = TD_WIRE_MAGIC,
				.version = TD_WIRE_VERSION,
				.opcode = TD_OP_PUBLISH, .fd_count = 2,
				.request_id = 7, .body_len = (uint32_t)n};

	cr_assert_gt(n, 0);
	td_wire_hdr_encode(&h, rawbuf);
	cr_assert_eq(td__scm_send(sock, rawbuf, TD_WIRE_HDR_LEN + (size_t)n,
				  fds, 2, 0),
		     (ssize_t)(TD_WIRE_HDR_LEN + (size_t)n));
	raw_recv(sock, &r);
	raw_reason(&r, why, cap);
	td__scm_close(r.fds, r.nfds);
	return r.h.status;
}

/*
 * open("/proc/self/fd/N", O_PATH) of an eventfd has the eventfd's /proc
 * link ("anon_inode:[eventfd]"), which is all the kind check looked at,
 * but poll(2) says POLLNVAL for it and epoll refuses it: the daemon took
 * it as a fence and every libtensord reader's GET of that version then
 * failed (-EBADF "cannot watch the fence ...: epoll_ctl"). It is no
 * fence: refused by the library and, sent raw, by the daemon, which
 * keeps none of the descriptors.
 */
Test(gpu, an_o_path_descriptor_of_an_eventfd_is_no_fence)
{
	struct tu_daemon d;
	struct td_error e = {0};
	const uint64_t shape[1] = {4};
	const uint8_t bytes[4] = {1, 2, 3, 4};
	char path[64], why[256];
	int ev, opath;

	tu_daemon_start(&d, "error");
	ev = td_fence_create();
	cr_assert_geq(ev, 0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", ev);
	opath = open(path, O_PATH | O_CLOEXEC);
	cr_assert_geq(opath, 0, "O_PATH open of an eventfd: %s",
		      strerror(errno));
	cr_assert_str_eq(fd_link(opath), "anon_inode:[eventfd]");
	cr_assert_eq(td_fence_wait(opath, 0, &e), -EINVAL, "%s", e.reason);
	cr_assert(strstr(e.reason, "is an O_PATH descriptor"), "%s",
		  e.reason);
	cr_assert_eq(td_fence_signal(opath, &e), -EINVAL, "%s", e.reason);

	struct td_client *c = connect_to(&d);
	struct td_publish p = {.name = "gpu/opath", .flags = TD_PUBLISH_FENCE,
			       .dtype = TD_TENSOR_U8, .ndim = 1,
			       .shape = shape, .fence_fd = opath};
	cr_assert_eq(td_client_put(c, &p, bytes, 4, NULL, &e), -EINVAL, "%s",
		     e.reason);
	cr_assert(strstr(e.reason, "is an O_PATH descriptor"), "%s",
		  e.reason);

	/* the daemon's own check, for a peer that skips the library's */
	int plane = memfd_create("gpu-opath", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	cr_assert_geq(plane, 0);
	cr_assert_eq(ftruncate(plane, 4096), 0);
	cr_assert_eq(fcntl(plane, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW),
		     0);
	int sock = raw_scm_conn(&d), dfds = tu_pid_fd_count(d.pid);
	int32_t st = raw_publish_fenced(sock, "gpu/opath", plane, opath, why,
					sizeof(why));
	cr_assert_eq(st, -EINVAL, "%d %s", st, why);
	cr_assert(strstr(why, "fd table entry 1: fence fd is an O_PATH "
			 "descriptor"), "%s", why);
	await_daemon_fds(d.pid, dfds, "a refused O_PATH fence");
	struct td_entry en;
	cr_assert_eq(td_client_stat(c, "gpu/opath", &en, &e), -ENOENT);
	/* the eventfd itself is a fence, and readers can wait on it */
	cr_assert_eq(raw_publish_fenced(sock, "gpu/opath", plane, ev, why,
					sizeof(why)),
		     0, "%s", why);
	struct td_tensor *t = get_of(c, "gpu/opath");
	cr_assert_eq(td_tensor_fence_wait(t, 0), -ETIMEDOUT);
	cr_assert_eq(td_fence_signal(ev, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_fence_wait(t, TU_WAIT_S * 1000), 0);
	td_tensor_release(t);
	close(sock);
	close(plane);
	close(opath);
	close(ev);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

static void alloc_and_die(const struct tu_daemon *d, void *arg)
{
	struct td_client *c = open_client(d);
	const uint64_t size = 96 * 1024;
	struct td_alloc *a;

	(void)arg;
	CK(td_client_alloc(c, 1, &size, &a, NULL) == 0);
	memset(td_alloc_data(a, 0), 7, size);
	_exit(0); /* dies before publishing (or signalling anything) */
}

Test(gpu, a_producer_that_dies_before_publishing_leaves_nothing_held)
{
	static const char *const extra[] = {"--max-bytes", "128K", NULL};
	struct tu_daemon d;
	struct td_alloc *a;
	struct td_error e = {0};
	const uint64_t size = 96 * 1024;

	tu_daemon_start_args(&d, "warn", extra);
	cr_assert_eq(reap(spawn(&d, alloc_and_die, NULL)), 0);
	/* 96 KiB of a 128 KiB budget again: only if the loan was dropped
	 * (the daemon notices the hang-up before our next request) */
	struct td_client *c = connect_to(&d);
	int rc = -1;
	for (int i = 0; i < 2000 && rc != 0; i++) {
		rc = td_client_alloc(c, 1, &size, &a, &e);
		if (rc)
			usleep(10000);
	}
	cr_assert_eq(rc, 0, "%s", e.reason);
	td_alloc_free(a);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* ---- ring fences ---- */

struct ringf {
	int go[2], ready[2];
	bool signal;
};

static void ring_fenced_producer(const struct tu_daemon *d, void *arg)
{
	struct ringf *f = arg;
	struct td_client *c = open_client(d);
	const uint64_t shape[1] = {BYTES / 4};
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U32, .ndim = 1,
				    .shape = shape, .slot_count = 3,
				    .reader_count = 1};
	struct td_ring *r;
	struct td_slot s;
	uint64_t v;

	CK(td_ring_create(c, "gpu/ring", &desc, &r, NULL) == 0);
	say(f->ready[1]);
	hear(f->go[0]); /* subscribed */
	CK(td_ring_acquire(r, -1, &s) == 0);
	CK(td_ring_publish_fenced(r, &v) == 0);
	CK_EQ(td_ring_fence_signal(r, v + 1), -ENOENT);
	say(f->ready[1]);
	hear(f->go[0]);
	if (!f->signal)
		_exit(0); /* dies with the fence pending */
	uint32_t *w = s.planes[0];
	for (uint32_t i = 0; i < BYTES / 4; i++)
		w[i] = (uint32_t)v * 1000003u + i;
	CK(td_ring_fence_signal(r, v) == 0);
	CK_EQ(td_ring_fence_signal(r, v), -EALREADY);
	hear(f->go[0]);
	td_ring_close(r);
	td_client_close(c);
}

/*
 * A daemon d started, ring_fenced_producer spawned with f (its pipes
 * made here) and its ring "gpu/ring" made, and a client of d (into *c)
 * subscribed to it (into *s). The producer's pid.
 */
static pid_t ringf_start(struct tu_daemon *d, struct ringf *f,
			 struct td_client **c, struct td_sub **s)
{
	struct td_error e = {0};
	pid_t pid;

	tu_daemon_start(d, "warn");
	cr_assert(pipe(f->go) == 0 && pipe(f->ready) == 0);
	pid = spawn(d, ring_fenced_producer, f);
	hear(f->ready[0]);
	*c = connect_to(d);
	cr_assert_eq(td_ring_subscribe(*c, "gpu/ring", 5000, s, &e), 0, "%s",
		     e.reason);
	return pid;
}

/* ringf_start's subscription, client and f's pipes closed. */
static void ringf_close(struct ringf *f, struct td_client *c,
			struct td_sub *s)
{
	td_sub_close(s);
	td_client_close(c);
	close(f->go[0]);
	close(f->go[1]);
	close(f->ready[0]);
	close(f->ready[1]);
}

static void ring_fenced(bool signal)
{
	struct tu_daemon d;
	struct td_sub *s;
	struct td_view v;
	struct td_error e = {0};
	struct ringf f = {.signal = signal};
	struct td_client *c;
	pid_t pid = ringf_start(&d, &f, &c, &s);

	cr_assert_eq(td_sub_fence_wait(s, 0), -EINVAL, "no view held");
	say(f.go[1]);
	hear(f.ready[0]); /* published, fence pending */
	cr_assert_eq(td_sub_next(s, 5000, &v), 0);
	cr_assert_eq(td_sub_fence_wait(s, 0), -ETIMEDOUT);
	cr_assert_eq(td_sub_fence_wait(s, 30), -ETIMEDOUT);
	/* a plain GET is not answered with an unsignalled version */
	struct td_tensor *t;
	cr_assert_eq(td_client_get_version(c, "gpu/ring", v.version, &t, &e),
		     -EAGAIN);
	cr_assert(strstr(e.reason, "fence has not signalled"), "%s",
		  e.reason);
	/* nor a LATEST one, at once with timeout 0 (not after the 1 s a
	 * slot being rewritten is waited for) */
	cr_assert_eq(td_client_get(c, "gpu/ring", &t, &e), -EAGAIN);
	cr_assert(strstr(e.reason, "fence has not signalled"), "%s",
		  e.reason);
	/* a waiting GET waits for the fence, and its timeout says so */
	cr_assert_eq(td_client_get_newer(c, "gpu/ring", v.version - 1, 50, &t,
					 &e),
		     -ETIMEDOUT);
	cr_assert(strstr(e.reason, "fence did not signal within 50 ms"),
		  "%s", e.reason);
	say(f.go[1]);
	if (signal) {
		cr_assert_eq(td_sub_fence_wait(s, -1), 0);
		const uint32_t *w = v.planes[0];
		for (uint32_t i = 0; i < BYTES / 4; i++)
			cr_assert_eq(w[i], (uint32_t)v.version * 1000003u + i);
		cr_assert_eq(td_client_get_version(c, "gpu/ring", v.version,
						   &t, &e),
			     0, "%s", e.reason);
		td_tensor_release(t);
		say(f.go[1]);
	} else {
		/* waits forever only until the daemon closes the ring */
		cr_assert_eq(td_sub_fence_wait(s, -1), -EPIPE);
	}
	cr_assert_eq(reap(pid), 0);
	ringf_close(&f, c, s);
	tu_daemon_stop(&d, true);
}

/* A thread in td_ring_acquire(r, -1): its result and slot, its task. */
struct slot_waiter {
	struct td_ring *r;
	struct td_slot sl;
	_Atomic pid_t tid;
	int rc;
};

static void *acquire_slot(void *arg)
{
	struct slot_waiter *w = arg;

	atomic_store(&w->tid, (pid_t)syscall(SYS_gettid));
	w->rc = td_ring_acquire(w->r, -1, &w->sl);
	return NULL;
}

/*
 * A pipelined GPU producer publishes a slot with its fence pending while
 * its queue still writes it, and acquires the next. td_ring_acquire()
 * handed that very slot back once no reader held it (the latest, which
 * is rewritten when every reader had it, here with none at all), so the
 * next frame's writes raced the device's: the producer cannot choose its
 * slot, so only the library can keep it off one still being written. A
 * slot whose fence is pending is taken back only once it is signalled,
 * and a producer thread asleep for a slot wakes at that signal.
 */
Test(gpu, a_ring_slot_whose_fence_is_pending_is_not_taken_back)
{
	const uint64_t shape[1] = {4096};
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = shape, .slot_count = 2,
				    .reader_count = 1};
	struct slot_waiter w = {0};
	struct td_error e = {0};
	struct tu_daemon d;
	struct td_slot a, b;
	pthread_t th;
	uint64_t v;

	tu_daemon_start(&d, "warn");
	struct td_client *c = connect_to(&d);
	cr_assert_eq(td_ring_create(c, "gpu/pipe", &desc, &w.r, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_ring_acquire(w.r, 0, &a), 0);
	cr_assert_eq(td_ring_publish_fenced(w.r, &v), 0);
	cr_assert_eq(v, 1);
	cr_assert_eq(td_ring_acquire(w.r, 0, &b), 0);
	cr_assert_neq(b.index, a.index,
		      "the slot its device still writes, handed back");
	cr_assert_eq(td_ring_publish_fenced(w.r, &v), 0);
	cr_assert_eq(td_ring_acquire(w.r, 0, &b), -ETIMEDOUT,
		     "every slot's fence pending: none to take");
	/* a thread asleep for a slot gets the one whose fence signals */
	cr_assert_eq(pthread_create(&th, NULL, acquire_slot, &w), 0);
	while (!atomic_load(&w.tid))
		usleep(1000);
	await_in(atomic_load(&w.tid), SYS_futex, -1, "futex");
	cr_assert_eq(td_ring_fence_signal(w.r, 1), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(w.rc, 0);
	cr_assert_eq(w.sl.index, a.index);
	cr_assert_eq(td_ring_publish_fenced(w.r, &v), 0);
	cr_assert_eq(v, 3);
	cr_assert_eq(td_ring_acquire(w.r, 0, &b), -ETIMEDOUT);
	/* signalled, the slot of version 2 is lent again */
	cr_assert_eq(td_ring_fence_signal(w.r, 2), 0);
	cr_assert_eq(td_ring_acquire(w.r, 0, &b), 0);
	cr_assert_neq(b.index, a.index);
	td_ring_close(w.r);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

Test(gpu, a_ring_slot_fence_is_waited_then_its_bytes_are_whole)
{
	ring_fenced(true);
}

Test(gpu, a_ring_producer_that_dies_with_a_pending_fence_unblocks_readers)
{
	ring_fenced(false);
}

/*
 * The daemon marks a pending slot fence ABANDONED when the ring's
 * producer dies, which ends a subscriber's wait (-EPIPE). Once the
 * daemon itself is gone nothing will: a producer that died after it
 * (or never signals) left td_sub_fence_wait() waiting out its timeout,
 * for ever with -1, while td_sub_next() says -EPIPE within a second of
 * the daemon's end. The wait now looks at the connection as
 * td_sub_next() does: -EPIPE, and a signalled fence still waits no more.
 */
Test(gpu, a_ring_fence_wait_ends_when_tensord_is_gone)
{
	struct tu_daemon d;
	struct td_sub *s;
	struct td_view v;
	struct ringf f = {.signal = false};
	struct td_client *c;
	pid_t pid = ringf_start(&d, &f, &c, &s);

	say(f.go[1]);
	hear(f.ready[0]); /* published, fence pending */
	cr_assert_eq(td_sub_next(s, 5000, &v), 0);
	cr_assert_eq(td_sub_fence_wait(s, 0), -ETIMEDOUT);
	tu_daemon_kill(&d);
	say(f.go[1]); /* the producer dies, its fence pending */
	cr_assert_eq(reap(pid), 0);
	/* the timeout is a hang guard: it ended at the hang-up before */
	cr_assert_eq(td_sub_fence_wait(s, TU_WAIT_S * 1000), -EPIPE);
	cr_assert_eq(td_sub_fence_wait(s, 0), -EPIPE);
	cr_assert_eq(td_sub_next(s, 0, &v), -EPIPE);
	ringf_close(&f, c, s);
}

/* ---- alignment for host-pointer imports ---- */

Test(gpu, loans_and_ring_slots_are_aligned_to_their_size)
{
	struct tu_daemon d;
	struct td_error e = {0};
	struct td_alloc *a;
	const uint64_t sizes[3] = {64 * 1024, 3 * 256 * 1024, 4u << 20};

	tu_daemon_start(&d, "warn");
	struct td_client *c = connect_to(&d);
	/* a size that is a multiple of A (<= 2 MiB) maps A-aligned */
	cr_assert_eq(td_client_alloc(c, 3, sizes, &a, &e), 0, "%s", e.reason);
	cr_assert_eq((uintptr_t)td_alloc_data(a, 0) % (64 * 1024), 0);
	cr_assert_eq((uintptr_t)td_alloc_data(a, 1) % (256 * 1024), 0);
	cr_assert_eq((uintptr_t)td_alloc_data(a, 2) % (2u << 20), 0);
	memset(td_alloc_data(a, 2), 1, 4u << 20); /* all of it is mapped */
	td_alloc_free(a);

	const uint64_t shape[1] = {2 * 512 * 1024 / 4};
	const uint64_t planes[2] = {512 * 1024, 512 * 1024};
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U32, .ndim = 1,
				    .shape = shape, .plane_count = 2,
				    .plane_sizes = planes, .slot_count = 3,
				    .reader_count = 1};
	struct td_ring *r;
	struct td_sub *s;
	struct td_slot sl;
	struct td_view v;
	cr_assert_eq(td_ring_create(c, "gpu/al", &desc, &r, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_ring_subscribe(c, "gpu/al", 0, &s, &e), 0, "%s",
		     e.reason);
	for (int k = 0; k < 5; k++) {
		cr_assert_eq(td_ring_acquire(r, 0, &sl), 0);
		for (uint32_t i = 0; i < 2; i++)
			cr_assert_eq((uintptr_t)sl.planes[i] % (512 * 1024), 0,
				     "slot %u plane %u", sl.index, i);
		cr_assert_eq(td_ring_publish(r, NULL), 0);
		cr_assert_eq(td_sub_next(s, 0, &v), 0);
		cr_assert_eq(td_sub_fence_wait(s, 0), 0, "unfenced: no wait");
		for (uint32_t i = 0; i < 2; i++)
			cr_assert_eq((uintptr_t)v.planes[i] % (512 * 1024), 0);
	}
	td_sub_close(s);
	td_ring_close(r);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/*
 * Planes of different sizes: A-aligned in every slot when EVERY plane's
 * size is a multiple of A (offsets are sums of the sizes before, the
 * stride their total rounded to pages). One plane's size alone promises
 * nothing: {64 KiB, 4 KiB} puts slot 1 at 68 KiB.
 */
Test(gpu, ring_planes_of_mixed_sizes_align_to_what_all_sizes_share)
{
	struct tu_daemon d;
	struct td_error e = {0};
	const uint64_t shapes[2][1] = {{(64 + 192) * 1024}, {68 * 1024}};
	const uint64_t mixed[2][2] = {{64 * 1024, 192 * 1024},
				      {64 * 1024, 4 * 1024}};
	const uint64_t shared[2] = {64 * 1024, 4 * 1024};

	tu_daemon_start(&d, "warn");
	struct td_client *c = connect_to(&d);
	for (int k = 0; k < 2; k++) {
		const char *name = k ? "gpu/m1" : "gpu/m0";
		struct td_ring_desc desc = {
			.dtype = TD_TENSOR_U8, .ndim = 1, .shape = shapes[k],
			.plane_count = 2, .plane_sizes = mixed[k],
			.slot_count = 3, .reader_count = 1};
		struct td_ring *r;
		struct td_sub *sub;
		struct td_slot sl[2];
		struct td_view v;
		uintptr_t a0, a1;

		cr_assert_eq(td_ring_create(c, name, &desc, &r, &e), 0, "%s",
			     e.reason);
		cr_assert_eq(td_ring_subscribe(c, name, 0, &sub, &e), 0, "%s",
			     e.reason);
		/*
		 * Two different slots: the reader holds the first, so the
		 * producer cannot take it again (without the hold it may
		 * rewrite its latest slot, and every slot seen could be 0).
		 */
		for (int n = 0; n < 2; n++) {
			cr_assert_eq(td_ring_acquire(r, 0, &sl[n]), 0);
			for (uint32_t i = 0; i < 2; i++)
				cr_assert_eq((uintptr_t)sl[n].planes[i] %
						     shared[k],
					     0, "slot %u plane %u",
					     sl[n].index, i);
			cr_assert_eq(td_ring_publish(r, NULL), 0);
			if (n == 0)
				cr_assert_eq(td_sub_next(sub, 1000, &v), 0);
		}
		cr_assert_neq(sl[0].index, sl[1].index);
		/* the slots' stride: a multiple of what all sizes share,
		 * padded to 64 KiB only where every size is one */
		a0 = (uintptr_t)sl[0].planes[0];
		a1 = (uintptr_t)sl[1].planes[0];
		uint64_t stride = (a1 > a0 ? a1 - a0 : a0 - a1) /
				  (uint64_t)abs((int)sl[1].index -
						(int)sl[0].index);
		cr_assert_eq(stride % shared[k], 0, "ring %d: stride %llu", k,
			     (unsigned long long)stride);
		cr_assert_eq(stride % (64 * 1024) == 0, k == 0,
			     "ring %d: stride %llu", k,
			     (unsigned long long)stride);
		cr_assert_eq(td_sub_release(sub), 0);
		td_sub_close(sub);
		td_ring_close(r);
	}
	td_client_close(c);
	tu_daemon_stop(&d, true);
}
