/* SPDX-License-Identifier: MIT */
/*
 * End-to-end hand-off: a real tensord on a temporary socket, producers and
 * consumers as separate processes (fork) calling libtensord, tensorctl as
 * a separate program. Children report failure through their exit status
 * (CK), the test process through criterion. Every test checks that the
 * test process ends with the fds and mappings it started with.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/udmabuf.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/vfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bytes.h"
#include "tensord/tensord.h"
#include "testutil.h"
#include "wire.h"

TestSuite(handoff, .timeout = TU_TEST_TIMEOUT_S);

/* ---- child-side checks: print and exit, criterion is not there ---- */

#define CK(cond)                                                               \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "child %d: %s:%d: %s\n", getpid(),     \
				__FILE__, __LINE__, #cond);                    \
			_exit(10);                                             \
		}                                                              \
	} while (0)

#define CK_RC(call)                                                            \
	do {                                                                   \
		struct td_error e_ = {0};                                      \
		int rc_ = (call);                                              \
		if (rc_ < 0) {                                                 \
			fprintf(stderr, "child %d: %s:%d: %s = %d (%s)\n",     \
				getpid(), __FILE__, __LINE__, #call, rc_,      \
				e_.reason);                                    \
			_exit(11);                                             \
		}                                                              \
	} while (0)

/* ---- the daemon under test ---- */

struct daemon {
	pid_t pid;
	char dir[64];
	char sock[108]; /* sizeof(sockaddr_un.sun_path) */
	int fds0, maps0, shm0; /* the test process before the test */
};


static void daemon_start_env(struct daemon *d, const char *import)
{
	const char *bin = getenv("TD_TENSORD");

	d->fds0 = tu_fd_count();
	d->maps0 = tu_map_count();
	d->shm0 = tu_buf_map_count();
	cr_assert(bin, "TD_TENSORD is not set (run through meson test)");
	snprintf(d->dir, sizeof(d->dir), "/tmp/td-handoff-XXXXXX");
	cr_assert(tu_mkdtemp(d->dir));
	/* a consumer that drops to nobody must reach the socket */
	cr_assert(chmod(d->dir, 0777) == 0);
	snprintf(d->sock, sizeof(d->sock), "%s/tensord.sock", d->dir);
	/* a test that fails half-way must not leave a daemon behind */
	d->pid = tu_fork();
	if (d->pid == 0) {
		execl(bin, bin, "--socket", d->sock, "--import", import,
		      "--log-level", "warn", (char *)NULL);
		_exit(127);
	}
	/*
	 * Ready once a connect succeeds. This bounds start-up at 20 s for a
	 * daemon that never comes up; it asserts nothing about speed.
	 */
	for (int i = 0; i < 2000; i++) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		int st;

		memcpy(sa.sun_path, d->sock, sizeof(d->sock));
		cr_assert(s >= 0);
		if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(s);
			cr_assert(chmod(d->sock, 0777) == 0);
			return;
		}
		close(s);
		cr_assert(waitpid(d->pid, &st, WNOHANG) == 0,
			  "tensord exited during start-up");
		usleep(10000);
	}
	cr_assert_fail("tensord did not open %s", d->sock);
}

static void daemon_start(struct daemon *d)
{
	daemon_start_env(d, "auto");
}

/* Stop the daemon and check the test process leaked nothing. */
static void daemon_stop(struct daemon *d)
{
	int st;

	cr_assert(kill(d->pid, SIGTERM) == 0);
	cr_assert(tu_reap_within(d->pid, TU_WAIT_S, &st),
		  "tensord did not exit within %d s of SIGTERM (killed)",
		  TU_WAIT_S);
	unlink(d->sock);
	rmdir(d->dir);
	cr_assert_eq(tu_fd_count(), d->fds0, "fd leak: %d -> %d", d->fds0,
		     tu_fd_count());
	cr_assert_eq(tu_buf_map_count(), d->shm0, "memfd mapping leak: %d -> %d",
		     d->shm0, tu_buf_map_count());
	if (TU_CHECK_ALL_MAPS)
		cr_assert_eq(tu_map_count(), d->maps0,
			     "mapping leak: %d -> %d", d->maps0,
			     tu_map_count());
}

static struct td_client *client_open(const struct daemon *d)
{
	struct td_client *c = NULL;
	struct td_error e = {0};
	int rc = td_client_connect(d->sock, &c, &e);

	cr_assert(rc == 0, "connect: %d %s", rc, e.reason);
	return c;
}

/* In a child: connect or exit. import: NULL keeps the environment's. */
static struct td_client *child_open(const struct daemon *d, const char *import)
{
	struct td_client *c = NULL;
	struct td_error e = {0};
	int rc;

	if (import)
		setenv("TENSORD_IMPORT", import, 1);
	rc = td_client_connect(d->sock, &c, &e);
	if (rc < 0) {
		fprintf(stderr, "child connect: %d %s\n", rc, e.reason);
		_exit(12);
	}
	return c;
}

typedef void (*child_fn)(const struct daemon *d, void *arg);

/* fn(d, arg) in a child that dies with this process; its pid. */
static pid_t spawn(const struct daemon *d, child_fn fn, void *arg)
{
	pid_t pid = tu_fork();

	if (pid == 0) {
		fn(d, arg);
#ifdef __SANITIZE_ADDRESS__
		/* _exit skips LeakSanitizer's atexit check: run it here */
		extern void __lsan_do_leak_check(void);
		__lsan_do_leak_check();
#endif
		_exit(0);
	}
	return pid;
}

/* The child's exit status (or 128 + signal); one still running after
 * secs is killed and fails the test. */
static int reap_in(pid_t pid, int secs)
{
	int st = tu_wait_child(pid, secs, "a child of the test");

	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	return 128 + WTERMSIG(st);
}

static int reap(pid_t pid)
{
	return reap_in(pid, TU_WAIT_S);
}

static void run_child_in(const struct daemon *d, child_fn fn, void *arg,
			 int secs)
{
	int rc = reap_in(spawn(d, fn, arg), secs);

	cr_assert_eq(rc, 0, "child failed with status %d", rc);
}

static void run_child(const struct daemon *d, child_fn fn, void *arg)
{
	run_child_in(d, fn, arg, TU_WAIT_S);
}

/* ---- pipes between the processes of one test ---- */

static void ch_put(int fd, const void *p, size_t n)
{
	CK(write(fd, p, n) == (ssize_t)n);
}

static void ch_get(int fd, void *p, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r;

		/* the test holds the write end too: a child that died first
		 * would never end the read (testchild.h's hear()) */
		if (!tu_in_child)
			tu_await_readable(fd, TU_WAIT_S, "a child's word");
		r = read(fd, (char *)p + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (!tu_in_child)
			cr_assert_gt(r, 0, "the pipe ended before the word");
		CK(r > 0);
		got += (size_t)r;
	}
}

/* ---- test data ---- */

/* Byte i of a tensor seeded with seed: cheap to regenerate anywhere. */
static uint8_t pat(uint64_t seed, uint64_t i)
{
	uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;

	return (uint8_t)(x >> 29 ^ x >> 7);
}

static void fill(uint8_t *p, uint64_t n, uint64_t seed)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] = pat(seed, i);
}

static int same(const uint8_t *p, uint64_t n, uint64_t seed)
{
	for (uint64_t i = 0; i < n; i++)
		if (p[i] != pat(seed, i))
			return 0;
	return 1;
}

struct tcase {
	const char *name;
	uint32_t dtype;
	uint32_t ndim;
	uint64_t shape[4];
	uint64_t seed;
	const char *import; /* TENSORD_IMPORT of both children, NULL auto */
	uint32_t want_path; /* 0: do not check */
};

static uint64_t tcase_bytes(const struct tcase *t)
{
	uint64_t n = td_tensor_dtype_size(t->dtype);

	for (uint32_t i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

static void check_path(struct td_client *c, uint32_t want)
{
	struct td_client_info info;

	CK(td_client_info(c, &info) == 0);
	if (want) {
		CK(info.path_in == want);
		CK(info.path_out == want);
	}
}

static void put_child(const struct daemon *d, void *arg)
{
	const struct tcase *t = arg;
	struct td_client *c = child_open(d, t->import);
	uint64_t n = tcase_bytes(t), v = 0;
	struct td_publish p = {
		.name = t->name,
		.dtype = t->dtype,
		.ndim = t->ndim,
		.shape = t->shape,
		.meta = "producer-meta",
		.meta_len = 13,
	};
	uint8_t *buf = malloc(n ? n : 1);

	check_path(c, t->want_path);
	CK(buf);
	fill(buf, n, t->seed);
	CK_RC(td_client_put(c, &p, buf, n, &v, &e_));
	CK(v >= 1);
	free(buf);
	td_client_close(c);
}

static void get_child(const struct daemon *d, void *arg)
{
	const struct tcase *t = arg;
	struct td_client *c = child_open(d, t->import);
	struct td_tensor *x = NULL;
	uint64_t n = tcase_bytes(t);
	uint32_t nst;
	const int64_t *st;
	size_t mlen;
	const void *meta;

	check_path(c, t->want_path);
	CK_RC(td_client_get(c, t->name, &x, &e_));
	CK(td_tensor_dtype(x) == t->dtype);
	CK(td_tensor_ndim(x) == t->ndim);
	for (uint32_t i = 0; i < t->ndim; i++)
		CK(td_tensor_shape(x)[i] == t->shape[i]);
	/* the exporter writes dense C-order strides explicitly */
	st = td_tensor_strides(x, &nst);
	CK(nst == t->ndim);
	if (t->ndim) {
		CK(st[t->ndim - 1] == (int64_t)td_tensor_dtype_size(t->dtype));
	}
	CK(td_tensor_plane_count(x) == 1);
	CK(td_tensor_plane_size(x, 0) == n);
	CK(td_tensor_bytes(x) == n);
	CK(same(td_tensor_plane_data(x, 0), n, t->seed));
	meta = td_tensor_meta(x, &mlen);
	CK(mlen == 13 && !memcmp(meta, "producer-meta", 13));
	CK(!td_tensor_has_fence(x));
	td_tensor_release(x);
	td_client_close(c);
}

/* Producer runs to completion (and exits) before the consumer starts. */
static void roundtrip(const struct daemon *d, const struct tcase *t)
{
	run_child(d, put_child, (void *)t);
	run_child(d, get_child, (void *)t);
}

/* ---- round trips ---- */

Test(handoff, bytes_round_trip_for_several_dtypes_and_shapes)
{
	static const struct tcase cases[] = {
		{"rt/u8-1", TD_TENSOR_U8, 1, {1}, 1, NULL, 0},
		{"rt/f32-2x3", TD_TENSOR_F32, 2, {2, 3}, 2, NULL, 0},
		{"rt/f32-4k", TD_TENSOR_F32, 1, {1024}, 3, NULL, 0},
		{"rt/i16-3d", TD_TENSOR_I16, 3, {3, 5, 7}, 4, NULL, 0},
		{"rt/u16-1m", TD_TENSOR_U16, 2, {512, 1024}, 5, NULL, 0},
		{"rt/f64-4d", TD_TENSOR_F64, 4, {2, 3, 4, 5}, 6, NULL, 0},
		{"rt/i8-scalar", TD_TENSOR_I8, 0, {0}, 7, NULL, 0},
	};
	struct daemon d;

	daemon_start(&d);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		roundtrip(&d, &cases[i]);
	daemon_stop(&d);
}

Test(handoff, a_256_mib_tensor_round_trips, .timeout = 240)
{
	static const struct tcase t = {
		"rt/big", TD_TENSOR_U8, 2, {16384, 16384}, 8, NULL, 0};
	struct daemon d;

	daemon_start(&d);
	/* 256 MiB written and checked byte by byte: slow under ASan; each
	 * child bounded well within the test's own timeout */
	run_child_in(&d, put_child, (void *)&t, 100);
	run_child_in(&d, get_child, (void *)&t, 100);
	daemon_stop(&d);
}

static void empty_producer(const struct daemon *d, void *arg)
{
	struct td_client *c = child_open(d, NULL);
	uint64_t shape[2] = {0, 4};
	struct td_publish p = {.name = "rt/empty",
			       .dtype = TD_TENSOR_U8,
			       .ndim = 2,
			       .shape = shape};
	struct td_error e = {0};

	(void)arg;
	CK(td_client_put(c, &p, NULL, 0, NULL, &e) == 0);
	td_client_close(c);
}

static void empty_consumer(const struct daemon *d, void *arg)
{
	struct td_client *c = child_open(d, NULL);
	struct td_tensor *t;
	struct td_error e = {0};

	(void)arg;
	CK(td_client_get(c, "rt/empty", &t, &e) == 0);
	CK(td_tensor_ndim(t) == 2);
	CK(td_tensor_shape(t)[0] == 0 && td_tensor_shape(t)[1] == 4);
	CK(td_tensor_bytes(t) == 0);
	CK(td_tensor_plane_count(t) == 1);
	CK(td_tensor_plane_size(t, 0) == 0);
	td_tensor_release(t);
	td_client_close(c);
}

Test(handoff, an_empty_tensor_round_trips)
{
	struct daemon d;

	daemon_start(&d);
	run_child(&d, empty_producer, NULL);
	run_child(&d, empty_consumer, NULL);
	daemon_stop(&d);
}

/*
 * No element, but its outer dimension's C-order stride (4 << 62) is past
 * an i64: the blob carries the shape (u64 dims) with that stride written
 * 0, which addresses nothing, so a loan publishes it and a reader gets the
 * shape back (numpy holds no such array: the binding refuses it and says
 * why, python/tests/test_bad_input.py).
 */
static void huge_empty_producer(const struct daemon *d, void *arg)
{
	struct td_client *c = child_open(d, NULL);
	uint64_t size = 0, shape[2] = {0, 1ull << 62};
	struct td_publish p = {.name = "rt/huge-empty",
			       .dtype = TD_TENSOR_F32,
			       .ndim = 2,
			       .shape = shape};
	struct td_alloc *a = NULL;

	(void)arg;
	CK_RC(td_client_alloc(c, 1, &size, &a, &e_));
	CK_RC(td_client_publish_alloc(c, a, &p, NULL, &e_));
	td_client_close(c);
}

static void huge_empty_consumer(const struct daemon *d, void *arg)
{
	struct td_client *c = child_open(d, NULL);
	struct td_tensor *t;
	uint32_t n = 0;
	const int64_t *st;

	(void)arg;
	CK_RC(td_client_get(c, "rt/huge-empty", &t, &e_));
	CK(td_tensor_ndim(t) == 2);
	CK(td_tensor_shape(t)[0] == 0 &&
	   td_tensor_shape(t)[1] == 1ull << 62);
	CK(td_tensor_bytes(t) == 0);
	st = td_tensor_strides(t, &n);
	CK(n == 2 && st[1] == 4);
	td_tensor_release(t);
	td_client_close(c);
}

Test(handoff, an_empty_tensor_with_a_dimension_of_2_62_round_trips)
{
	struct daemon d;

	daemon_start(&d);
	run_child(&d, huge_empty_producer, NULL);
	run_child(&d, huge_empty_consumer, NULL);
	daemon_stop(&d);
}

/* ---- caller-owned buffers, several planes ---- */

#define NV_W  64
#define NV_H  48
#define NV_Y  (NV_W * NV_H)
#define NV_UV (NV_W * NV_H / 2)

static int memfd_with(uint64_t size, uint64_t seed, uint64_t skip)
{
	int fd = memfd_create("td-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	uint8_t *buf = malloc(size);

	CK(fd >= 0 && buf);
	/* pattern as if the buffer started `skip` bytes earlier */
	for (uint64_t i = 0; i < size; i++)
		buf[i] = pat(seed, i + skip);
	/* written with pwrite: no writable mapping may exist at publish */
	CK(pwrite(fd, buf, size, 0) == (ssize_t)size);
	/* the daemon accepts only memfds whose size cannot shrink */
	CK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
	free(buf);
	return fd;
}

struct nv12 {
	int two_buffers;
	const char *import; /* TENSORD_IMPORT of both children, NULL auto */
};

static void nv12_producer(const struct daemon *d, void *arg)
{
	const struct nv12 *a = arg;
	struct td_client *c = child_open(d, a->import);
	uint64_t shape[2] = {NV_H, NV_W};
	struct td_plane planes[2] = {
		{0, 0, NV_W, NV_Y},
		{0, NV_Y, NV_W, NV_UV},
	};
	int fds[2];
	struct td_publish p = {
		.name = "cam/nv12",
		.dtype = TD_TENSOR_U8,
		.ndim = 2,
		.shape = shape,
		.format = "NV12",
		.color_space = "bt709",
		.color_range = "limited",
		.plane_count = 2,
		.planes = planes,
		.fds = fds,
	};

	if (a->two_buffers) {
		fds[0] = memfd_with(NV_Y, 77, 0);
		fds[1] = memfd_with(NV_UV, 77, NV_Y);
		planes[1] = (struct td_plane){1, 0, NV_W, NV_UV};
		p.fd_count = 2;
	} else {
		fds[0] = memfd_with(NV_Y + NV_UV, 77, 0);
		p.fd_count = 1;
	}
	CK_RC(td_client_publish(c, &p, NULL, &e_));
	for (uint32_t i = 0; i < p.fd_count; i++)
		close(fds[i]);
	td_client_close(c);
}

static void nv12_consumer(const struct daemon *d, void *arg)
{
	const struct nv12 *a = arg;
	struct td_client *c = child_open(d, a->import);
	struct td_tensor *x = NULL;
	const uint8_t *y, *uv;

	CK_RC(td_client_get(c, "cam/nv12", &x, &e_));
	CK(td_tensor_plane_count(x) == 2);
	CK(!strcmp(td_tensor_string(x, TD_TENSOR_FORMAT), "NV12"));
	CK(!strcmp(td_tensor_string(x, TD_TENSOR_COLOR_SPACE), "bt709"));
	CK(!strcmp(td_tensor_string(x, TD_TENSOR_COLOR_RANGE), "limited"));
	CK(!strcmp(td_tensor_string(x, TD_TENSOR_COLOR_TRANSFER), ""));
	CK(td_tensor_plane_size(x, 0) == NV_Y);
	CK(td_tensor_plane_size(x, 1) == NV_UV);
	CK(td_tensor_plane_stride(x, 1) == NV_W);
	y = td_tensor_plane_data(x, 0);
	uv = td_tensor_plane_data(x, 1);
	for (uint64_t i = 0; i < NV_Y; i++)
		CK(y[i] == pat(77, i));
	for (uint64_t i = 0; i < NV_UV; i++)
		CK(uv[i] == pat(77, NV_Y + i));
	/* one buffer is imported (and mapped) once, two buffers twice */
	if (a->two_buffers)
		CK(td_tensor_plane_fd(x, 0) != td_tensor_plane_fd(x, 1));
	else
		CK(td_tensor_plane_fd(x, 0) == td_tensor_plane_fd(x, 1) &&
		   uv == y + NV_Y);
	td_tensor_release(x);
	td_client_close(c);
}

Test(handoff, nv12_two_planes_in_one_memfd)
{
	struct nv12 a = {.two_buffers = 0};
	struct daemon d;

	daemon_start(&d);
	run_child(&d, nv12_producer, &a);
	run_child(&d, nv12_consumer, &a);
	daemon_stop(&d);
}

Test(handoff, own_memfds_cross_by_scm_rights_when_forced)
{
	struct nv12 a = {.two_buffers = 1, .import = "scm"};
	struct daemon d;

	daemon_start(&d);
	run_child(&d, nv12_producer, &a);
	run_child(&d, nv12_consumer, &a);
	daemon_stop(&d);
}

Test(handoff, nv12_two_planes_in_two_memfds)
{
	struct nv12 a = {.two_buffers = 1};
	struct daemon d;

	daemon_start(&d);
	run_child(&d, nv12_producer, &a);
	run_child(&d, nv12_consumer, &a);
	daemon_stop(&d);
}

/* ---- dma-buf planes (udmabuf: a dma-buf over memfd pages) ---- */

#define DB_LEN 65536

static void dmabuf_producer(const struct daemon *d, void *arg)
{
	struct td_client *c = child_open(d, NULL);
	struct udmabuf_create cr = {.flags = UDMABUF_FLAGS_CLOEXEC,
				    .size = DB_LEN};
	uint64_t shape[1] = {DB_LEN};
	int mfd, dev, dbuf;
	uint8_t *p;

	(void)arg;
	mfd = memfd_create("td-test-udmabuf", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	CK(mfd >= 0 && ftruncate(mfd, DB_LEN) == 0);
	p = mmap(NULL, DB_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	CK(p != MAP_FAILED);
	for (uint64_t i = 0; i < DB_LEN; i++)
		p[i] = pat(91, i);
	munmap(p, DB_LEN);
	/* udmabuf wants the memfd shrink-sealed (pages must stay) */
	CK(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
	dev = open("/dev/udmabuf", O_RDWR | O_CLOEXEC);
	CK(dev >= 0);
	cr.memfd = (uint32_t)mfd;
	dbuf = ioctl(dev, UDMABUF_CREATE, &cr);
	CK(dbuf >= 0);
	struct td_publish pub = {.name = "db/t", .dtype = TD_TENSOR_U8,
				 .ndim = 1, .shape = shape, .fd_count = 1,
				 .fds = &dbuf};
	CK_RC(td_client_publish(c, &pub, NULL, &e_));
	close(dbuf);
	close(dev);
	close(mfd);
	td_client_close(c);
}

static void dmabuf_consumer(const struct daemon *d, void *arg)
{
	struct td_client *c = child_open(d, NULL);
	struct td_tensor *t;
	struct statfs sfs;
	const uint8_t *p;

	(void)arg;
	CK_RC(td_client_get(c, "db/t", &t, &e_));
	CK(td_tensor_plane_size(t, 0) == DB_LEN);
	/* the consumer holds the same dma-buf, not a copy in a memfd */
	CK(fstatfs(td_tensor_plane_fd(t, 0), &sfs) == 0);
	CK((unsigned long)sfs.f_type == 0x444d4142ul); /* DMA_BUF_MAGIC */
	/* told so, to import it; its CPU mapping was opened for reading
	 * with DMA_BUF_IOCTL_SYNC (a failing ioctl fails the GET) */
	CK(td_tensor_plane_kind(t, 0) == TD_PLANE_DMABUF);
	p = td_tensor_plane_data(t, 0);
	for (uint64_t i = 0; i < DB_LEN; i++)
		CK(p[i] == pat(91, i));
	td_tensor_release(t);
	td_client_close(c);
}

Test(handoff, a_dmabuf_plane_is_shared_as_is)
{
	struct daemon d;

	if (access("/dev/udmabuf", R_OK | W_OK) != 0)
		cr_skip_test("kernel feature missing: /dev/udmabuf (the "
			     "udmabuf driver) is absent, so no dma-buf can be "
			     "made here; dma-buf planes not exercised");
	daemon_start(&d);
	run_child(&d, dmabuf_producer, NULL);
	run_child(&d, dmabuf_consumer, NULL);
	daemon_stop(&d);
}

/* ---- zero copy ---- */

/* RssAnon of this process in kB (/proc/self/status). */
static long rss_anon_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;

	CK(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "RssAnon: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

#define ZC_BYTES (64u << 20)

struct zc {
	int rd; /* the producer's ino and dev arrive here */
};

static void zc_producer_alloc(const struct daemon *d, void *arg)
{
	int wr = *(int *)arg;
	struct td_client *c = child_open(d, NULL);
	uint64_t size = ZC_BYTES, shape[1] = {ZC_BYTES};
	struct td_publish p = {.name = "zc/t",
			       .dtype = TD_TENSOR_U8,
			       .ndim = 1,
			       .shape = shape};
	struct td_alloc *a = NULL;
	struct stat st;

	CK_RC(td_client_alloc(c, 1, &size, &a, &e_));
	fill(td_alloc_data(a, 0), size, 99);
	CK(fstat(td_alloc_fd(a, 0), &st) == 0);
	CK_RC(td_client_publish_alloc(c, a, &p, NULL, &e_));
	ch_put(wr, &st.st_ino, sizeof(st.st_ino));
	ch_put(wr, &st.st_dev, sizeof(st.st_dev));
	td_client_close(c);
}

static void zc_producer_memfd(const struct daemon *d, void *arg)
{
	int wr = *(int *)arg;
	struct td_client *c = child_open(d, NULL);
	uint64_t shape[1] = {ZC_BYTES};
	int fd = memfd_with(ZC_BYTES, 99, 0);
	struct td_publish p = {.name = "zc/t",
			       .dtype = TD_TENSOR_U8,
			       .ndim = 1,
			       .shape = shape,
			       .fd_count = 1,
			       .fds = &fd};
	struct stat st;

	CK(fstat(fd, &st) == 0);
	CK_RC(td_client_publish(c, &p, NULL, &e_));
	close(fd);
	ch_put(wr, &st.st_ino, sizeof(st.st_ino));
	ch_put(wr, &st.st_dev, sizeof(st.st_dev));
	td_client_close(c);
}

static void zc_consumer(const struct daemon *d, void *arg)
{
	const struct zc *z = arg;
	struct td_client *c = child_open(d, NULL);
	struct td_tensor *x = NULL;
	ino_t ino;
	dev_t dev;
	struct stat st;
	long before, after;
	const uint8_t *p;
	uint64_t n;

	ch_get(z->rd, &ino, sizeof(ino));
	ch_get(z->rd, &dev, sizeof(dev));
	before = rss_anon_kb();
	CK_RC(td_client_get(c, "zc/t", &x, &e_));
	n = td_tensor_plane_size(x, 0);
	p = td_tensor_plane_data(x, 0);
	CK(fstat(td_tensor_plane_fd(x, 0), &st) == 0);
	/* the very buffer the producer wrote, not a copy of it */
	CK(st.st_ino == ino && st.st_dev == dev);
	CK(n == ZC_BYTES && same(p, n, 99));
	after = rss_anon_kb();
	CK(before > 0 && after > 0);
	/*
	 * Reading every byte faulted in shared pages, not anonymous ones: a
	 * copy would add n. (ASan's shadow of the mapping alone adds n/8;
	 * TSan's, twice n: there the inode check above stands alone.)
	 */
#ifndef __SANITIZE_THREAD__
	CK((uint64_t)(after - before) * 1024 < n / 4);
#endif
	td_tensor_release(x);
	td_client_close(c);
}

/* A zero-copy producer (fn) and zc_consumer, told apart by a pipe. */
static void zc_run(child_fn producer)
{
	struct daemon d;
	struct zc z;
	int p[2];
	pid_t prod, cons;

	daemon_start(&d);
	cr_assert(pipe2(p, O_CLOEXEC) == 0);
	z.rd = p[0];
	prod = spawn(&d, producer, &p[1]);
	cons = spawn(&d, zc_consumer, &z);
	cr_assert_eq(reap(prod), 0);
	cr_assert_eq(reap(cons), 0);
	close(p[0]);
	close(p[1]);
	daemon_stop(&d);
}

Test(handoff, zero_copy_consumer_maps_the_producers_alloc_pages)
{
	zc_run(zc_producer_alloc);
}

Test(handoff, zero_copy_consumer_maps_the_producers_own_memfd)
{
	zc_run(zc_producer_memfd);
}

/* ---- import paths ---- */

Test(handoff, forced_pidfd_import_path_round_trips)
{
	static const struct tcase t = {
		"imp/pidfd", TD_TENSOR_F32, 2, {16, 16}, 11, "pidfd",
		TD_CLIENT_PATH_PIDFD};
	struct daemon d;

	daemon_start(&d);
	roundtrip(&d, &t);
	daemon_stop(&d);
}

Test(handoff, forced_scm_import_path_round_trips)
{
	static const struct tcase t = {
		"imp/scm", TD_TENSOR_F32, 2, {16, 16}, 12, "scm",
		TD_CLIENT_PATH_SCM};
	struct daemon d;

	daemon_start(&d);
	roundtrip(&d, &t);
	daemon_stop(&d);
}

static void become_nobody(void)
{
	CK(setgroups(0, NULL) == 0);
	CK(setgid(65534) == 0);
	CK(setuid(65534) == 0);
	/* a credential change clears the parent-death signal: again */
	CK(prctl(PR_SET_PDEATHSIG, SIGKILL) == 0);
}

static void nobody_consumer(const struct daemon *d, void *arg)
{
	const struct tcase *t = arg;
	struct td_client_info info;
	struct td_client *c;

	become_nobody();
	c = child_open(d, "auto");
	CK(td_client_info(c, &info) == 0);
	/* nobody may not pidfd_getfd() from root's daemon: SCM instead */
	CK(info.path_out == TD_CLIENT_PATH_SCM);
	td_client_close(c);
	get_child(d, arg);
	(void)t;
}

static void nobody_forced_pidfd(const struct daemon *d, void *arg)
{
	struct td_client *c = NULL;
	struct td_error e = {0};

	become_nobody();
	setenv("TENSORD_IMPORT", "pidfd", 1);
	CK(td_client_connect(d->sock, &c, &e) == -EPERM);
	CK(c == NULL && e.reason[0]);
}

Test(handoff, refused_pidfd_falls_back_to_scm_automatically)
{
	static const struct tcase t = {
		"imp/fallback", TD_TENSOR_U8, 1, {4096}, 13, "auto", 0};
	struct daemon d;

	if (geteuid() != 0)
		cr_skip_test("needs root to setuid() a consumer to nobody");
	daemon_start(&d);
	run_child(&d, put_child, (void *)&t);
	run_child(&d, nobody_consumer, (void *)&t);
	run_child(&d, nobody_forced_pidfd, NULL);
	daemon_stop(&d);
}

/* ---- fences ---- */

struct fence_pipes {
	int to_cons[2]; /* producer -> consumer: published */
	int to_prod[2]; /* consumer -> producer: I am waiting */
	int wrote[2];   /* producer -> consumer: signalled */
};

static void fence_producer(const struct daemon *d, void *arg)
{
	struct fence_pipes *fp = arg;
	struct td_client *c = child_open(d, NULL);
	int efd = eventfd(0, EFD_CLOEXEC);
	int mfd = memfd_with(4096, 5, 0);
	uint64_t shape[1] = {4096}, one = 1;
	struct td_publish p = {
		.name = "fence/t",
		.flags = TD_PUBLISH_FENCE,
		.dtype = TD_TENSOR_U8,
		.ndim = 1,
		.shape = shape,
		.fd_count = 1,
		.fds = &mfd,
		.fence_fd = efd,
	};
	char m;

	CK(efd >= 0);
	CK_RC(td_client_publish(c, &p, NULL, &e_));
	ch_put(fp->to_cons[1], "P", 1);
	ch_get(fp->to_prod[0], &m, 1);
	CK(m == 'W');
	/* mark first, then signal: the consumer sees the mark after waking */
	ch_put(fp->wrote[1], "S", 1);
	CK(write(efd, &one, sizeof(one)) == sizeof(one));
	close(efd);
	close(mfd);
	td_client_close(c);
}

static void fence_consumer(const struct daemon *d, void *arg)
{
	struct fence_pipes *fp = arg;
	struct td_client *c = child_open(d, NULL);
	struct td_tensor *x = NULL;
	struct pollfd pfd = {.fd = fp->wrote[0], .events = POLLIN};
	char m;

	ch_get(fp->to_cons[0], &m, 1);
	CK_RC(td_client_get(c, "fence/t", &x, &e_));
	CK(td_tensor_has_fence(x));
	/* not signalled: the producer is blocked on our message */
	CK(td_tensor_fence_wait(x, 0) == -ETIMEDOUT);
	CK(poll(&pfd, 1, 0) == 0);
	ch_put(fp->to_prod[1], "W", 1);
	CK(td_tensor_fence_wait(x, -1) == 0);
	/* it returned because the producer signalled, never before */
	CK(poll(&pfd, 1, 0) == 1);
	CK(same(td_tensor_plane_data(x, 0), 4096, 5));
	td_tensor_release(x);
	td_client_close(c);
}

Test(handoff, fence_wait_blocks_until_the_producer_signals)
{
	struct fence_pipes fp;
	struct daemon d;
	pid_t prod, cons;

	daemon_start(&d);
	cr_assert(pipe2(fp.to_cons, O_CLOEXEC) == 0);
	cr_assert(pipe2(fp.to_prod, O_CLOEXEC) == 0);
	cr_assert(pipe2(fp.wrote, O_CLOEXEC) == 0);
	prod = spawn(&d, fence_producer, &fp);
	cons = spawn(&d, fence_consumer, &fp);
	cr_assert_eq(reap(cons), 0);
	cr_assert_eq(reap(prod), 0);
	for (int i = 0; i < 2; i++) {
		close(fp.to_cons[i]);
		close(fp.to_prod[i]);
		close(fp.wrote[i]);
	}
	daemon_stop(&d);
}

/* ---- leases ---- */

struct lease_pipes {
	int to_parent[2];
	int to_child[2];
	const char *name;
	uint64_t seed;
	uint64_t len;
};

/* Get name, tell the parent, wait for its go, check the bytes held. */
static void lease_holder(const struct daemon *d, void *arg)
{
	struct lease_pipes *lp = arg;
	struct td_client *c = child_open(d, NULL);
	struct td_tensor *x = NULL;
	char m;

	CK_RC(td_client_get(c, lp->name, &x, &e_));
	CK(same(td_tensor_plane_data(x, 0), lp->len, lp->seed));
	ch_put(lp->to_parent[1], "G", 1);
	ch_get(lp->to_child[0], &m, 1);
	if (m == 'K')
		pause(); /* to be killed holding the lease */
	CK(td_tensor_plane_size(x, 0) == lp->len);
	CK(same(td_tensor_plane_data(x, 0), lp->len, lp->seed));
	td_tensor_release(x);
	td_client_close(c);
}

static void parent_put(struct td_client *c, const char *name, uint64_t len,
		       uint64_t seed)
{
	uint64_t shape[1] = {len};
	struct td_publish p = {
		.name = name, .dtype = TD_TENSOR_U8, .ndim = 1, .shape = shape};
	struct td_error e = {0};
	uint8_t *buf = malloc(len);
	int rc;

	cr_assert(buf);
	fill(buf, len, seed);
	rc = td_client_put(c, &p, buf, len, NULL, &e);
	free(buf);
	cr_assert(rc == 0, "put %s: %d %s", name, rc, e.reason);
}

static void lease_pipes_open(struct lease_pipes *lp)
{
	cr_assert(pipe2(lp->to_parent, O_CLOEXEC) == 0);
	cr_assert(pipe2(lp->to_child, O_CLOEXEC) == 0);
}

static void lease_pipes_close(struct lease_pipes *lp)
{
	for (int i = 0; i < 2; i++) {
		close(lp->to_parent[i]);
		close(lp->to_child[i]);
	}
}

static uint32_t lease_count(struct td_client *c, const char *name)
{
	struct td_entry e;
	struct td_error err = {0};
	uint32_t n;
	int rc = td_client_stat(c, name, &e, &err);

	cr_assert(rc == 0, "stat %s: %d %s", name, rc, err.reason);
	n = e.lease_count;
	td_entry_fini(&e);
	return n;
}

Test(handoff, delete_and_replace_while_leased_keep_the_bytes)
{
	struct lease_pipes lp = {.name = "lease/a", .seed = 21, .len = 8192};
	struct td_error e = {0};
	struct td_entry ent;
	struct td_client *c;
	struct daemon d;
	pid_t holder;
	char m;

	daemon_start(&d);
	c = client_open(&d);
	lease_pipes_open(&lp);

	/* replace: a new version under the name, v1 still leased */
	parent_put(c, lp.name, lp.len, lp.seed);
	holder = spawn(&d, lease_holder, &lp);
	ch_get(lp.to_parent[0], &m, 1);
	cr_assert_eq(lease_count(c, lp.name), 1);
	parent_put(c, lp.name, lp.len, lp.seed + 1);
	cr_assert_eq(lease_count(c, lp.name), 0, "the lease is on v1");
	ch_put(lp.to_child[1], "C", 1);
	cr_assert_eq(reap(holder), 0);

	/* delete: the name is gone, the leased bytes are not */
	lp.seed++;
	holder = spawn(&d, lease_holder, &lp);
	ch_get(lp.to_parent[0], &m, 1);
	cr_assert_eq(td_client_delete(c, lp.name, NULL, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_stat(c, lp.name, &ent, &e), -ENOENT);
	cr_assert(e.reason[0], "a refusal carries a reason");
	ch_put(lp.to_child[1], "C", 1);
	cr_assert_eq(reap(holder), 0);

	lease_pipes_close(&lp);
	td_client_close(c);
	daemon_stop(&d);
}

/* The undo of one's own publish never removes someone else's newer one */
Test(handoff, delete_of_a_version_only_while_it_is_current)
{
	struct td_error e = {0};
	struct td_entry ent = {0};
	struct td_client *c;
	struct daemon d;
	uint64_t v1, gone = 0;

	daemon_start(&d);
	c = client_open(&d);
	parent_put(c, "undo/a", 64, 1);
	cr_assert_eq(td_client_stat(c, "undo/a", &ent, &e), 0);
	v1 = ent.version;
	td_entry_fini(&ent);
	parent_put(c, "undo/a", 64, 2); /* "someone else" replaces it */

	cr_assert_eq(td_client_delete_version(c, "undo/a", v1, &e), -ESTALE);
	cr_assert(strstr(e.reason, "kept"), "%s", e.reason);
	cr_assert_eq(td_client_stat(c, "undo/a", &ent, &e), 0,
		     "the newer version stays");
	cr_assert_eq(ent.version, v1 + 1);
	cr_assert_eq(td_client_delete_version(c, "undo/a", ent.version, &e),
		     0, "%s", e.reason);
	td_entry_fini(&ent);
	cr_assert_eq(td_client_stat(c, "undo/a", &ent, &e), -ENOENT);
	cr_assert_eq(td_client_delete_version(c, "undo/a", v1 + 1, &e),
		     -ENOENT);
	cr_assert_eq(td_client_delete_version(c, "undo/a", 0, &e), -EINVAL);
	/* the unconditional DELETE of version 1 is unchanged */
	parent_put(c, "undo/b", 64, 3);
	cr_assert_eq(td_client_delete(c, "undo/b", &gone, &e), 0);
	cr_assert(gone > 0);

	td_client_close(c);
	daemon_stop(&d);
}

Test(handoff, sigkill_of_a_consumer_releases_its_leases)
{
	struct lease_pipes lp = {.name = "lease/k", .seed = 31, .len = 4096};
	struct td_client *c;
	struct daemon d;
	pid_t holder;
	uint32_t n = 1;
	char m;

	daemon_start(&d);
	c = client_open(&d);
	lease_pipes_open(&lp);
	parent_put(c, lp.name, lp.len, lp.seed);
	holder = spawn(&d, lease_holder, &lp);
	ch_get(lp.to_parent[0], &m, 1);
	cr_assert_eq(lease_count(c, lp.name), 1);
	ch_put(lp.to_child[1], "K", 1);
	cr_assert(kill(holder, SIGKILL) == 0);
	cr_assert_eq(reap(holder), 128 + SIGKILL);
	/*
	 * The daemon learns of the hang-up on its own schedule; poll until
	 * it has (bounded at 20 s for a daemon that never notices).
	 */
	for (int i = 0; i < 2000 && (n = lease_count(c, lp.name)); i++)
		usleep(10000);
	cr_assert_eq(n, 0, "lease of a killed consumer still counted");
	lease_pipes_close(&lp);
	td_client_close(c);
	daemon_stop(&d);
}

Test(handoff, tensor_stays_readable_after_its_producer_exits)
{
	struct nv12 a = {.two_buffers = 1};
	struct daemon d;
	pid_t prod;

	daemon_start(&d);
	prod = spawn(&d, nv12_producer, &a);
	cr_assert_eq(reap(prod), 0);
	/* the producer process and all its fds are gone now */
	cr_assert(kill(prod, 0) < 0 && errno == ESRCH);
	run_child(&d, nv12_consumer, &a);
	daemon_stop(&d);
}

/* ---- watch ---- */

struct watch_pipes {
	int ready[2];
	int done[2];
};

static void watcher(const struct daemon *d, void *arg)
{
	struct watch_pipes *wp = arg;
	struct td_client *c = child_open(d, NULL);
	struct td_entry ent;
	uint64_t id = 0, last = 0;
	char m;

	CK_RC(td_client_watch(c, "w/", TD_WATCH_PREFIX, &id, &e_));
	ch_put(wp->ready[1], "R", 1);
	ch_get(wp->done[0], &m, 1);
	/* events that arrive while STAT waits for its reply are queued */
	CK_RC(td_client_stat(c, "w/x", &ent, &e_));
	CK(ent.version == 5);
	td_entry_fini(&ent);
	for (int i = 0; i < 5; i++) {
		struct td_event ev;

		CK_RC(td_client_next_event(c, 0, &ev, &e_));
		CK(ev.watch_id == id);
		CK(ev.type == TD_EVENT_TYPE_PUBLISHED);
		CK(!strcmp(ev.name, "w/x"));
		CK(ev.version == last + 1);
		last = ev.version;
	}
	{
		struct td_event ev;
		struct td_error e = {0};

		CK(td_client_next_event(c, 0, &ev, &e) == -ETIMEDOUT);
	}
	td_client_close(c);
}

static void five_versions(const struct daemon *d, void *arg)
{
	struct td_client *c = child_open(d, NULL);
	uint64_t shape[1] = {64}, v = 0;
	struct td_publish p = {.name = "w/x",
			       .dtype = TD_TENSOR_U8,
			       .ndim = 1,
			       .shape = shape};
	uint8_t buf[64];

	for (int i = 0; i < 5; i++) {
		fill(buf, sizeof(buf), (uint64_t)i);
		CK_RC(td_client_put(c, &p, buf, sizeof(buf), &v, &e_));
		CK(v == (uint64_t)i + 1);
	}
	/* a publish outside the prefix is not delivered */
	p.name = "other/x";
	CK_RC(td_client_put(c, &p, buf, sizeof(buf), NULL, &e_));
	td_client_close(c);
	(void)arg;
}

Test(handoff, watch_delivers_every_new_version_in_order)
{
	struct watch_pipes wp;
	struct daemon d;
	pid_t w;
	char m;

	daemon_start(&d);
	cr_assert(pipe2(wp.ready, O_CLOEXEC) == 0);
	cr_assert(pipe2(wp.done, O_CLOEXEC) == 0);
	w = spawn(&d, watcher, &wp);
	ch_get(wp.ready[0], &m, 1);
	run_child(&d, five_versions, NULL);
	ch_put(wp.done[1], "D", 1);
	cr_assert_eq(reap(w), 0);
	for (int i = 0; i < 2; i++) {
		close(wp.ready[i]);
		close(wp.done[i]);
	}
	daemon_stop(&d);
}

Test(handoff, client_fd_polls_readable_when_a_watch_event_arrives)
{
	struct td_error e = {0};
	struct td_client *c;
	struct td_event ev;
	struct pollfd pfd;
	struct daemon d;
	uint64_t id = 0;

	daemon_start(&d);
	c = client_open(&d);
	cr_assert_eq(td_client_fd(NULL), -EINVAL);
	pfd.fd = td_client_fd(c);
	pfd.events = POLLIN;
	cr_assert_geq(pfd.fd, 0);
	cr_assert_eq(td_client_watch(c, "w/", TD_WATCH_PREFIX, &id, &e), 0,
		     "%s", e.reason);
	cr_assert_eq(poll(&pfd, 1, 0), 0, "readable before any event");
	run_child(&d, five_versions, NULL);
	cr_assert_eq(poll(&pfd, 1, 10000), 1);
	cr_assert(pfd.revents & POLLIN);
	for (uint64_t i = 1; i <= 5; i++) {
		cr_assert_eq(td_client_next_event(c, 10000, &ev, &e), 0, "%s",
			     e.reason);
		cr_assert_eq(ev.version, i);
	}
	cr_assert_eq(td_client_next_event(c, 0, &ev, &e), -ETIMEDOUT);
	cr_assert_eq(poll(&pfd, 1, 0), 0, "still readable once drained");
	td_client_close(c);
	daemon_stop(&d);
}

/* ---- mapping cache ---- */

static void cache_check(const char *import)
{
	static const struct tcase t = {"cache/t", TD_TENSOR_U8, 1, {1 << 20},
				       41, NULL, 0};
	struct td_tensor *x = NULL, *y = NULL;
	struct td_error e = {0};
	struct td_client *c;
	struct daemon d;
	const void *p1;
	int fds, maps, shm;

	daemon_start(&d);
	run_child(&d, put_child, (void *)&t);
	/* on the SCM path the daemon attaches the fd again: it is dropped */
	if (import)
		setenv("TENSORD_IMPORT", import, 1);
	c = client_open(&d);
	unsetenv("TENSORD_IMPORT");
	cr_assert_eq(td_client_get(c, t.name, &x, &e), 0, "%s", e.reason);
	p1 = td_tensor_plane_data(x, 0);
	td_tensor_release(x);
	fds = tu_fd_count();
	maps = tu_map_count();
	shm = tu_buf_map_count();

	/* released, then got again: the cached import serves it */
	cr_assert_eq(td_client_get(c, t.name, &x, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_plane_data(x, 0), p1);
	cr_assert_eq(tu_fd_count(), fds);
	cr_assert_eq(tu_buf_map_count(), shm);
	if (TU_CHECK_ALL_MAPS)
		cr_assert_eq(tu_map_count(), maps);
	/* held twice at once: still one import */
	cr_assert_eq(td_client_get(c, t.name, &y, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_plane_data(y, 0), p1);
	cr_assert_eq(tu_fd_count(), fds);
	cr_assert_eq(tu_buf_map_count(), shm);
	if (TU_CHECK_ALL_MAPS)
		cr_assert_eq(tu_map_count(), maps);
	cr_assert(same(td_tensor_plane_data(y, 0), 1 << 20, 41));
	td_tensor_release(x);
	td_tensor_release(y);
	cr_assert_eq(td_client_trim(c), 1);
	cr_assert_eq(tu_buf_map_count(), shm - 1);
	td_client_close(c);
	daemon_stop(&d);
}

Test(handoff, re_getting_a_buffer_reuses_its_fd_and_mapping)
{
	cache_check(NULL);
}

Test(handoff, re_getting_over_scm_reuses_the_mapping_and_closes_the_dup)
{
	cache_check("scm");
}

/* ---- threads ---- */

#define THREADS 4
#define ROUNDS  200

struct thr {
	struct td_client *c;
	int failures;
};

static void *thread_warm(void *arg)
{
	free(malloc(64)); /* this thread's malloc arena now exists */
	return arg;
}

static void *thread_main(void *arg)
{
	struct thr *t = arg;

	for (int i = 0; i < ROUNDS; i++) {
		struct td_tensor *x = NULL;
		struct td_error e = {0};

		if (td_client_get(t->c, "thr/t", &x, &e) < 0) {
			t->failures++;
			continue;
		}
		if (td_tensor_plane_size(x, 0) != 4096 ||
		    !same(td_tensor_plane_data(x, 0), 4096, 51))
			t->failures++;
		td_tensor_release(x);
	}
	return NULL;
}

Test(handoff, one_client_shared_by_threads_gets_and_releases_safely)
{
	static const struct tcase t = {"thr/t", TD_TENSOR_U8, 1, {4096},
				       51, NULL, 0};
	struct thr thr[THREADS];
	pthread_t tid[THREADS];
	struct td_client *c;
	struct daemon d;

	/*
	 * glibc keeps the stacks and malloc arenas of joined threads mapped
	 * for reuse, and makes more arenas under contention: one arena, and
	 * the stacks created before the leak baseline is taken.
	 */
	mallopt(M_ARENA_MAX, 1);
	for (int i = 0; i < THREADS; i++)
		cr_assert(pthread_create(&tid[i], NULL, thread_warm, NULL) ==
			  0);
	for (int i = 0; i < THREADS; i++)
		cr_assert(pthread_join(tid[i], NULL) == 0);
	daemon_start(&d);
	run_child(&d, put_child, (void *)&t);
	c = client_open(&d);
	for (int i = 0; i < THREADS; i++) {
		thr[i] = (struct thr){c, 0};
		cr_assert(pthread_create(&tid[i], NULL, thread_main, &thr[i]) ==
			  0);
	}
	for (int i = 0; i < THREADS; i++) {
		cr_assert(pthread_join(tid[i], NULL) == 0);
		cr_assert_eq(thr[i].failures, 0, "thread %d", i);
	}
	/* every lease was handed back */
	cr_assert_eq(lease_count(c, t.name), 0);
	td_client_close(c);
	daemon_stop(&d);
}

/* ---- waiting for versions ---- */

struct newer_pipes {
	int got[2];  /* consumer -> parent: holds v1, about to wait */
	uint64_t v1; /* the version the consumer starts from */
};

static void newer_consumer(const struct daemon *d, void *arg)
{
	struct newer_pipes *np = arg;
	struct td_client *c = child_open(d, NULL);
	struct td_tensor *x = NULL, *y = NULL, *z = NULL;
	struct td_error e = {0};

	CK_RC(td_client_get_version(c, "nw/t", np->v1, &x, &e_));
	CK(td_tensor_version(x) == np->v1);
	/* nothing newer yet and no wait: refused at once */
	CK(td_client_get_newer(c, "nw/t", np->v1, 0, &y, &e) == -ETIMEDOUT);
	CK(y == NULL && e.reason[0]);
	ch_put(np->got[1], "G", 1);
	/* parked until the parent publishes the next version */
	CK_RC(td_client_get_newer(c, "nw/t", np->v1, -1, &y, &e_));
	CK(td_tensor_version(y) > np->v1);
	CK(same(td_tensor_plane_data(y, 0), 256, 72));
	/* v1 is replaced but still leased: EXACT reaches it, same bytes */
	CK_RC(td_client_get_version(c, "nw/t", np->v1, &z, &e_));
	CK(td_tensor_version(z) == np->v1);
	CK(same(td_tensor_plane_data(z, 0), 256, 71));
	td_tensor_release(z);
	/* once the last lease on v1 is gone, so is v1 */
	td_tensor_release(x);
	CK(td_client_get_version(c, "nw/t", np->v1, &x, &e) == -ENOENT);
	td_tensor_release(y);
	td_client_close(c);
}

Test(handoff, get_newer_waits_for_the_next_version)
{
	struct newer_pipes np;
	struct td_client *c;
	struct td_entry ent;
	struct td_error e = {0};
	struct daemon d;
	pid_t cons;
	char m;

	daemon_start(&d);
	c = client_open(&d);
	parent_put(c, "nw/t", 256, 71);
	cr_assert_eq(td_client_stat(c, "nw/t", &ent, &e), 0, "%s", e.reason);
	np.v1 = ent.version;
	td_entry_fini(&ent);
	cr_assert(pipe2(np.got, O_CLOEXEC) == 0);
	cons = spawn(&d, newer_consumer, &np);
	ch_get(np.got[0], &m, 1);
	parent_put(c, "nw/t", 256, 72);
	cr_assert_eq(reap(cons), 0);
	close(np.got[0]);
	close(np.got[1]);
	td_client_close(c);
	daemon_stop(&d);
}

/* ---- a misbehaving daemon (a fake one in a child) ---- */

enum fake_kind {
	FAKE_TOO_MANY_FDS, /* more fds than the client has room for */
	FAKE_FD_COUNT_LIE, /* an fd the header does not announce */
};

struct fake {
	char dir[64];
	char sock[108];
	enum fake_kind kind;
};

/* Answer one HELLO the wrong way, then wait for the client to hang up. */
static void fake_serve(int ls, enum fake_kind kind)
{
	uint8_t in[TD_WIRE_MAX_MSG], out[512];
	struct td_wire_hello_rep rep = {
		.daemon_pid = (uint32_t)getpid(),
		.import_in = TD_IMPORT_SCM,
		.probe_fd = -1,
		.ident = {"fake", 4},
	};
	struct td_wire_hdr h = {0};
	union {
		char buf[CMSG_SPACE(sizeof(int) * 20)];
		struct cmsghdr align;
	} ctl;
	int fds[20], nfds = kind == FAKE_TOO_MANY_FDS ? 20 : 1;
	struct iovec iov;
	struct msghdr mh = {0};
	struct cmsghdr *cm;
	int64_t blen;
	int s = accept4(ls, NULL, NULL, SOCK_CLOEXEC);

	CK(s >= 0);
	CK(recv(s, in, sizeof(in), 0) >= TD_WIRE_HDR_LEN);
	CK(td_wire_hdr_decode(in, TD_WIRE_HDR_LEN + td__le32(in + 24), &h,
			      NULL) == 0);
	blen = td_wire_hello_rep_encode(&rep, out + TD_WIRE_HDR_LEN,
					sizeof(out) - TD_WIRE_HDR_LEN);
	CK(blen > 0);
	h.flags = TD_WIRE_F_REPLY;
	h.body_len = (uint32_t)blen;
	/* FD_COUNT_LIE: one fd attached, none announced */
	h.fd_count = kind == FAKE_TOO_MANY_FDS ? 16 : 0;
	td_wire_hdr_encode(&h, out);
	for (int i = 0; i < nfds; i++)
		CK((fds[i] = eventfd(0, EFD_CLOEXEC)) >= 0);
	iov = (struct iovec){out, TD_WIRE_HDR_LEN + (size_t)blen};
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = ctl.buf;
	mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
	memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	CK(sendmsg(s, &mh, MSG_NOSIGNAL) > 0);
	/* the client closes; recv then sees the end */
	while (recv(s, in, sizeof(in), 0) > 0)
		;
}

static void fake_child(const struct daemon *unused, void *arg)
{
	struct fake *f = arg;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int ls = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/tmp", f->dir);
	CK(ls >= 0);
	CK(bind(ls, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	CK(listen(ls, 1) == 0);
	/* appear under the real name only once listening: no refused race */
	CK(rename(sa.sun_path, f->sock) == 0);
	fake_serve(ls, f->kind);
	(void)unused;
}

static void fake_check(enum fake_kind kind)
{
	struct fake f = {.kind = kind};
	struct td_client *c = NULL;
	struct td_error e = {0};
	struct stat st;
	int fds = tu_fd_count(), rc;
	pid_t pid;

	snprintf(f.dir, sizeof(f.dir), "/tmp/td-fake-XXXXXX");
	cr_assert(tu_mkdtemp(f.dir));
	snprintf(f.sock, sizeof(f.sock), "%s/s", f.dir);
	pid = spawn(NULL, fake_child, &f);
	/* listening once the name exists (bounded: a fake that failed
	 * before never makes it) */
	for (int i = 0; i < TU_WAIT_S * 1000 && stat(f.sock, &st) < 0; i++)
		usleep(1000);
	cr_assert_eq(stat(f.sock, &st), 0, "the fake daemon never listened");
	rc = td_client_connect(f.sock, &c, &e);
	cr_assert_eq(rc, -EPROTO, "%d %s", rc, e.reason);
	cr_assert_null(c);
	/* every descriptor that arrived was closed again */
	cr_assert_eq(tu_fd_count(), fds);
	cr_assert_eq(reap(pid), 0);
	unlink(f.sock);
	rmdir(f.dir);
}

Test(handoff, truncated_control_data_closes_every_fd_and_fails)
{
	fake_check(FAKE_TOO_MANY_FDS);
}

Test(handoff, fds_the_header_does_not_announce_are_closed)
{
	fake_check(FAKE_FD_COUNT_LIE);
}

/* ---- a socket that accepts and never answers ---- */

struct mute {
	int ls;
	ssize_t got; /* the first datagram's size (HELLO) */
	bool hung_up; /* the client closed its end */
};

/* Accept one connection, read what comes until the client hangs up. */
static void *mute_serve(void *arg)
{
	struct mute *m = arg;
	uint8_t buf[TD_WIRE_MAX_MSG];
	int a = accept4(m->ls, NULL, NULL, SOCK_CLOEXEC);
	ssize_t n;

	if (a < 0)
		return NULL;
	m->got = recv(a, buf, sizeof(buf), 0);
	while ((n = recv(a, buf, sizeof(buf), 0)) > 0)
		;
	m->hung_up = n == 0;
	close(a);
	return NULL;
}

/*
 * A socket that accepts and never answers HELLO (another program's, a
 * tensord that is stopped or wedged) held td_client_connect(), and so
 * `tensorctl ls` and Python's Client(), for ever: now it fails after
 * $TENSORD_CONNECT_TIMEOUT_MS with ETIMEDOUT and a reason naming the
 * socket, and closes what it opened.
 */
Test(handoff, a_socket_that_never_answers_hello_times_out_naming_it,
     .timeout = TU_WAIT_S)
{
	struct mute m = {0};
	struct td_client *c = (struct td_client *)1;
	struct td_error e = {0};
	char path[64];
	pthread_t th;
	int fds = tu_fd_count(), rc;

	snprintf(path, sizeof(path), "/tmp/td-mute-%d.sock", (int)getpid());
	m.ls = tu_mute_listener(path, 4);
	cr_assert_eq(pthread_create(&th, NULL, mute_serve, &m), 0);
	setenv("TENSORD_CONNECT_TIMEOUT_MS", "200", 1);
	rc = td_client_connect(path, &c, &e);
	cr_assert_eq(rc, -ETIMEDOUT, "%d %s", rc, e.reason);
	cr_assert_eq(e.code, -ETIMEDOUT);
	cr_assert_null(c);
	cr_assert(strstr(e.reason, path), "%s", e.reason);
	cr_assert(strstr(e.reason, "did not answer HELLO within 200 ms"), "%s",
		  e.reason);
	/* the HELLO was sent, then the client hung up: its socket closed */
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_gt(m.got, 0, "no HELLO came");
	cr_assert(m.hung_up, "the client kept its socket open");
	/* a value that is no number of milliseconds is refused, named */
	setenv("TENSORD_CONNECT_TIMEOUT_MS", "5s", 1);
	cr_assert_eq(td_client_connect(path, &c, &e), -EINVAL);
	cr_assert(strstr(e.reason, "TENSORD_CONNECT_TIMEOUT_MS=5s"), "%s",
		  e.reason);
	unsetenv("TENSORD_CONNECT_TIMEOUT_MS");
	close(m.ls);
	unlink(path);
	cr_assert_eq(tu_fd_count(), fds);
}

/*
 * A listener whose queue is full (a stopped daemon that many clients
 * tried) holds connect() itself: the same deadline bounds it.
 */
Test(handoff, a_listener_that_never_accepts_times_out_at_connect,
     .timeout = TU_WAIT_S)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct td_client *c = (struct td_client *)1;
	struct td_error e = {0};
	int fds = tu_fd_count(), ls, first, rc;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "/tmp/td-full-%d.sock",
		 (int)getpid());
	ls = tu_full_listener(sa.sun_path, &first);
	setenv("TENSORD_CONNECT_TIMEOUT_MS", "200", 1);
	rc = td_client_connect(sa.sun_path, &c, &e);
	unsetenv("TENSORD_CONNECT_TIMEOUT_MS");
	cr_assert_eq(rc, -ETIMEDOUT, "%d %s", rc, e.reason);
	cr_assert_null(c);
	cr_assert(strstr(e.reason, sa.sun_path), "%s", e.reason);
	cr_assert(strstr(e.reason, "within 200 ms"), "%s", e.reason);
	close(first);
	close(ls);
	unlink(sa.sun_path);
	cr_assert_eq(tu_fd_count(), fds);
}

static volatile sig_atomic_t ticks;

static void on_tick(int sig)
{
	(void)sig;
	ticks++;
}

/*
 * A signal whose handler has SA_RESTART (a SIGCHLD, a profiler's
 * SIGPROF, a Go runtime's SIGURG) while connect() waits on a full queue:
 * with SO_SNDTIMEO the kernel does not restart it, and the client failed
 * with EINTR, "connect: Interrupted system call", although it was never
 * interrupted before the deadline existed. It waits out the deadline.
 */
Test(handoff, a_restarting_signal_does_not_cut_the_connect_wait,
     .timeout = TU_WAIT_S)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct sigaction act = {.sa_handler = on_tick, .sa_flags = SA_RESTART};
	struct itimerval every = {{0, 5000}, {0, 5000}}, off = {{0, 0}, {0, 0}};
	struct td_client *c = (struct td_client *)1;
	struct td_error e = {0};
	int fds = tu_fd_count(), ls, first, rc;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "/tmp/td-intr-%d.sock",
		 (int)getpid());
	ls = tu_full_listener(sa.sun_path, &first);
	sigemptyset(&act.sa_mask);
	cr_assert_eq(sigaction(SIGALRM, &act, NULL), 0);
	setenv("TENSORD_CONNECT_TIMEOUT_MS", "300", 1);
	ticks = 0;
	cr_assert_eq(setitimer(ITIMER_REAL, &every, NULL), 0);
	rc = td_client_connect(sa.sun_path, &c, &e);
	cr_assert_eq(setitimer(ITIMER_REAL, &off, NULL), 0);
	unsetenv("TENSORD_CONNECT_TIMEOUT_MS");
	cr_assert_gt(ticks, 0, "no signal came during the wait");
	cr_assert_eq(rc, -ETIMEDOUT, "%d %s", rc, e.reason);
	cr_assert_null(c);
	cr_assert(strstr(e.reason, "within 300 ms"), "%s", e.reason);
	close(first);
	close(ls);
	unlink(sa.sun_path);
	cr_assert_eq(tu_fd_count(), fds);
}

/* ---- client-only behaviour ---- */

Test(handoff, connect_without_a_daemon_fails_with_a_reason)
{
	struct td_client *c = (struct td_client *)1;
	struct td_error e = {0};
	int fds = tu_fd_count();

	cr_assert_eq(td_client_connect("/nonexistent/tensord.sock", &c, &e),
		     -ENOENT);
	cr_assert_null(c);
	cr_assert(strstr(e.reason, "/nonexistent/tensord.sock"));
	setenv("TENSORD_IMPORT", "bogus", 1);
	cr_assert_eq(td_client_connect("/nonexistent/x", &c, &e), -EINVAL);
	unsetenv("TENSORD_IMPORT");
	cr_assert_eq(tu_fd_count(), fds);
}

Test(handoff, connect_names_a_socket_path_too_long_and_takes_empty_as_null)
{
	struct td_client *c = (struct td_client *)1;
	struct td_error e = {0};
	char path[200];
	int fds = tu_fd_count();

	memset(path, 'p', sizeof(path) - 1);
	path[sizeof(path) - 1] = '\0';
	cr_assert_eq(td_client_connect(path, &c, &e), -ENAMETOOLONG);
	cr_assert_eq(e.code, -ENAMETOOLONG);
	cr_assert(strstr(e.reason, "socket path too long"), "%s", e.reason);
	cr_assert_null(c);
	/* "" is NULL: $TENSORD_SOCKET is taken */
	setenv("TENSORD_SOCKET", "/nonexistent/env.sock", 1);
	cr_assert_eq(td_client_connect("", &c, &e), -ENOENT);
	cr_assert(strstr(e.reason, "/nonexistent/env.sock"), "%s", e.reason);
	unsetenv("TENSORD_SOCKET");
	cr_assert_eq(tu_fd_count(), fds);
}

/*
 * Missing arguments are named as such: a NULL handle or array is not
 * reported as a plane or fd count out of range.
 */
Test(handoff, a_missing_argument_is_named_not_blamed_on_a_count)
{
	struct td_publish p = {.name = "x"};
	struct td_alloc *a = NULL;
	struct td_error e = {0};
	struct td_client *c;
	struct daemon d;
	uint64_t sz = 64;
	int fd = 0;

	daemon_start(&d);
	c = client_open(&d);
	cr_assert_eq(td_client_alloc(NULL, 1, &sz, &a, &e), -EINVAL);
	cr_assert_str_eq(e.reason, "missing argument");
	cr_assert_eq(td_client_alloc(c, 1, NULL, &a, &e), -EINVAL);
	cr_assert_str_eq(e.reason, "missing argument");
	cr_assert_eq(td_client_alloc(c, 1, &sz, NULL, &e), -EINVAL);
	cr_assert_str_eq(e.reason, "missing argument");
	a = (struct td_alloc *)1;
	cr_assert_eq(td_client_alloc(c, 9, &sz, &a, &e), -EINVAL);
	cr_assert(strstr(e.reason, "plane count"), "%s", e.reason);
	cr_assert_null(a, "*out is NULL on every failure");
	a = (struct td_alloc *)1;
	cr_assert_eq(td_client_alloc_named(c, "bad name", 1, &sz, 0, &a, &e),
		     -EINVAL);
	cr_assert_null(a);
	p.fds = &fd;
	p.fd_count = 1;
	cr_assert_eq(td_client_publish(NULL, &p, NULL, &e), -EINVAL);
	cr_assert_str_eq(e.reason, "missing argument");
	cr_assert_eq(td_client_publish(c, NULL, NULL, &e), -EINVAL);
	cr_assert_str_eq(e.reason, "missing argument");
	p.fds = NULL;
	cr_assert_eq(td_client_publish(c, &p, NULL, &e), -EINVAL);
	cr_assert_str_eq(e.reason, "missing argument");
	p.fd_count = 0;
	cr_assert_eq(td_client_publish(c, &p, NULL, &e), -EINVAL);
	cr_assert(strstr(e.reason, "fd count"), "%s", e.reason);
	td_client_close(c);
	daemon_stop(&d);
}

/* Flags a caller may set but the library does not know are refused,
 * as td_client_alloc_ex() and td_client_connect_ex() refuse theirs. */
Test(handoff, unknown_watch_and_ring_flags_are_refused)
{
	uint64_t shape[1] = {64}, id = 0;
	struct td_ring_desc rd = {.dtype = TD_TENSOR_U8,
				  .ndim = 1,
				  .shape = shape,
				  .flags = 0x80};
	struct td_ring *r = (struct td_ring *)1;
	struct td_error e = {0};
	struct td_entry ent;
	struct td_client *c;
	struct daemon d;

	daemon_start(&d);
	c = client_open(&d);
	cr_assert_eq(td_client_watch(c, "w", TD_WATCH_PREFIX | 0x80, &id, &e),
		     -EINVAL);
	cr_assert(strstr(e.reason, "unknown watch flags 0x80"), "%s",
		  e.reason);
	cr_assert_eq(id, 0);
	cr_assert_eq(td_ring_create(c, "r", &rd, &r, &e), -EINVAL);
	cr_assert(strstr(e.reason, "unknown ring flags 0x80"), "%s", e.reason);
	cr_assert_null(r);
	cr_assert_eq(td_client_stat(c, "r", &ent, &e), -ENOENT,
		     "no ring was made");
	td_client_close(c);
	daemon_stop(&d);
}

/*
 * A struct td_publish whose count says there is an array behind a NULL
 * pointer (planes, meta), or with flags this library does not know, is
 * refused with -EINVAL and a reason, and nothing is published: no crash
 * in the encoder, no flag dropped.
 */
/*
 * The tensor accessors given NULL (the tensor of a get that failed,
 * passed along): a tensor of nothing, -EINVAL from those returning an
 * int, never a crash.
 */
Test(handoff, tensor_accessors_take_null)
{
	const float *scales = (const float *)1;
	const int32_t *zps = (const int32_t *)1;
	uint32_t n = 7, zn = 7;
	size_t len = 7;
	const char *why = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_tensor_version(NULL), 0);
	cr_assert_eq(td_tensor_dtype_size(td_tensor_dtype(NULL)), 0);
	cr_assert_eq(td_tensor_ndim(NULL), 0);
	cr_assert_null(td_tensor_shape(NULL));
	cr_assert_null(td_tensor_strides(NULL, &n));
	cr_assert_eq(n, 0);
	cr_assert_eq(td_tensor_quant(NULL, &scales, &n, &zps, &zn), -2);
	cr_assert(!scales && !zps && n == 0 && zn == 0);
	cr_assert_str_eq(td_tensor_string(NULL, TD_TENSOR_FORMAT), "");
	cr_assert_null(td_tensor_meta(NULL, &len));
	cr_assert_eq(len, 0);
	cr_assert_eq(td_tensor_plane_count(NULL), 0);
	cr_assert_null(td_tensor_plane_data(NULL, 0));
	cr_assert_eq(td_tensor_plane_size(NULL, 0), 0);
	cr_assert_eq(td_tensor_plane_stride(NULL, 0), 0);
	cr_assert_eq(td_tensor_plane_fd(NULL, 0), -1);
	cr_assert_eq(td_tensor_plane_offset(NULL, 0), 0);
	cr_assert_eq(td_tensor_plane_kind(NULL, 0), 0);
	cr_assert_eq(td_tensor_plane_modifier(NULL, 0), 0);
	cr_assert_eq(td_tensor_bytes(NULL), 0);
	cr_assert_eq(td_tensor_has_fence(NULL), 0);
	cr_assert_eq(td_tensor_fence_fd(NULL), -1);
	cr_assert_eq(td_tensor_fence_wait(NULL, 0), -EINVAL);
	cr_assert_eq(td_tensor_fence_wait_err(NULL, 0, &e), -EINVAL);
	cr_assert_eq(e.code, -EINVAL);
	cr_assert_str_eq(e.reason, "no tensor");
	cr_assert_eq(td_tensor_linear(NULL, &why), -EINVAL);
	cr_assert_str_eq(why, "no tensor");
}

Test(handoff, publish_refuses_null_arrays_and_unknown_flags)
{
	uint64_t shape[1] = {64};
	int fd = -1;
	struct td_publish p = {.name = "pub/x",
			       .dtype = TD_TENSOR_U8,
			       .ndim = 1,
			       .shape = shape,
			       .fd_count = 1,
			       .fds = &fd};
	struct td_error e = {0};
	struct td_entry ent;
	struct td_client *c;
	struct daemon d;

	daemon_start(&d);
	c = client_open(&d);
	fd = memfd_with(64, 1, 0);
	p.plane_count = 1;
	cr_assert_eq(td_client_publish(c, &p, NULL, &e), -EINVAL);
	cr_assert(strstr(e.reason, "plane_count 1 without planes"), "%s",
		  e.reason);
	p.plane_count = 0;
	p.meta_len = 10;
	cr_assert_eq(td_client_publish(c, &p, NULL, &e), -EINVAL);
	cr_assert(strstr(e.reason, "meta_len 10 without meta"), "%s",
		  e.reason);
	p.meta_len = 0;
	p.flags = TD_PUBLISH_PIN | 0x100;
	cr_assert_eq(td_client_publish(c, &p, NULL, &e), -EINVAL);
	cr_assert(strstr(e.reason, "unknown publish flags 0x100"), "%s",
		  e.reason);
	cr_assert_eq(td_client_put(c, &p, "x", 1, NULL, &e), -EINVAL);
	cr_assert_eq(td_client_stat(c, "pub/x", &ent, &e), -ENOENT);
	p.flags = TD_PUBLISH_PIN;
	cr_assert_eq(td_client_publish(c, &p, NULL, &e), 0, "%s", e.reason);
	td_client_close(c);
	close(fd);
	daemon_stop(&d);
}

/*
 * An image published without planes (plane_count 0: one plane per buffer
 * covering all of it) or with a plane whose stride is 0 has its rows
 * packed: a camera's rgb8 frame needs no td_plane of its own. The plane's
 * stride used to default to the plane's size ("not an image"), which the
 * daemon then took as the row pitch: a 1080-row frame was refused as
 * needing 1079 frames' bytes ("plane 0 holds 6220800 bytes but its layout
 * needs 6712248960"), from C and from Python's alloc(format="rgb8").
 */
Test(handoff, an_image_without_a_row_pitch_has_its_rows_packed)
{
	uint64_t shape[3] = {4, 5, 3}, size = 4 * 5 * 3, nv_shape[2] = {4, 6};
	uint64_t nv_sizes[2] = {24, 12};
	struct td_plane pl = {0, 0, 0, size};
	struct td_publish p = {.name = "img/rgb", .dtype = TD_TENSOR_U8,
			       .ndim = 3, .shape = shape, .format = "rgb8"};
	struct td_error e = {0};
	struct td_tensor *t;
	struct td_client *c;
	struct td_alloc *a;
	struct daemon d;
	uint8_t *w;

	daemon_start(&d);
	c = client_open(&d);
	cr_assert_eq(td_client_alloc(c, 1, &size, &a, &e), 0, "%s", e.reason);
	w = td_alloc_data(a, 0);
	for (uint64_t i = 0; i < size; i++)
		w[i] = (uint8_t)i;
	cr_assert_eq(td_client_publish_alloc(c, a, &p, NULL, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_client_get(c, "img/rgb", &t, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_plane_stride(t, 0), 5 * 3);
	cr_assert_eq(((const uint8_t *)td_tensor_plane_data(t, 0))[59], 59);
	td_tensor_release(t);
	/* a plane given with stride 0 is packed rows too */
	p.plane_count = 1;
	p.planes = &pl;
	cr_assert_eq(td_client_alloc(c, 1, &size, &a, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_publish_alloc(c, a, &p, NULL, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_client_get(c, "img/rgb", &t, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_plane_stride(t, 0), 5 * 3);
	td_tensor_release(t);
	/* NV12 in two buffers, no planes: Y rows of 6, UV rows of 6 */
	p = (struct td_publish){.name = "img/nv12", .dtype = TD_TENSOR_U8,
				.ndim = 2, .shape = nv_shape, .format = "NV12"};
	cr_assert_eq(td_client_alloc(c, 2, nv_sizes, &a, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_client_publish_alloc(c, a, &p, NULL, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_client_get(c, "img/nv12", &t, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_plane_stride(t, 0), 6);
	cr_assert_eq(td_tensor_plane_stride(t, 1), 6);
	td_tensor_release(t);
	td_client_close(c);
	daemon_stop(&d);
}

/* ---- tensorctl ---- */

/* Run tensorctl --socket SOCK ARGS... (NULL-terminated); its exit status. */
static int ctl(const struct daemon *d, char **out, ...)
{
	const char *bin = getenv("TD_TENSORCTL");
	char *argv[16] = {(char *)bin, "--socket", (char *)d->sock};
	char *buf = NULL;
	va_list ap;
	int rc, n = 3;

	cr_assert(bin, "TD_TENSORCTL is not set");
	va_start(ap, out);
	while (n < 15 && (argv[n] = va_arg(ap, char *)))
		n++;
	va_end(ap);
	argv[n] = NULL;
	rc = tu_run_capture(argv, &buf);
	if (out)
		*out = buf;
	else
		free(buf);
	return rc;
}

Test(handoff, tensorctl_put_get_ls_stat_rm_end_to_end)
{
	char in[128], outp[128], *out = NULL;
	uint8_t data[24];
	uint8_t *back;
	size_t len;
	struct daemon d;
	FILE *f;

	daemon_start(&d);
	fill(data, sizeof(data), 61);
	snprintf(in, sizeof(in), "%s/in.bin", d.dir);
	snprintf(outp, sizeof(outp), "%s/out.bin", d.dir);
	f = fopen(in, "wb");
	cr_assert(f && fwrite(data, 1, sizeof(data), f) == sizeof(data));
	fclose(f);

	cr_assert_eq(ctl(&d, &out, "put", "ctl/t", "--dtype", "f32", "--shape",
			 "2,3", "--meta", "hello", NULL),
		     2, "no FILE: usage");
	free(out);
	cr_assert_eq(ctl(&d, NULL, "put", "ctl/t", "--dtype", "f32", "--shape",
			 "2,4", in, NULL),
		     1, "24 bytes are not f32 2x4");
	/* an empty dimension, a sign or a blank is a bad shape, not 6 */
	static const char *const bad[] = {",6", "6,", "2,,3", "+6", " 6",
					  "-6", "2x", "x3", "(2,3", "(2,3]",
					  "( 2,3)", "(2,  3)", "(,)", "(2,3),",
					  "(2 ,3)", "((2,3))"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		cr_assert_eq(ctl(&d, &out, "put", "ctl/t", "--dtype", "u8",
				 "--shape", bad[i], in, NULL),
			     2, "shape '%s'", bad[i]);
		free(out);
	}
	cr_assert_eq(ctl(&d, &out, "put", "ctl/t", "--dtype", "f32", "--shape",
			 "2,3", "--meta", "hello", in, NULL),
		     0);
	cr_assert(strstr(out, "version 1"), "%s", out);
	free(out);
	/* the forms ls, --json and Python print a shape in: f32 (2,3) and
	 * (6) are 24 bytes too; each replaced by the next */
	static const char *const good[][2] = {
		{"(2,3)", "(2,3)"}, {"[2,3]", "(2,3)"}, {"(2, 3)", "(2,3)"},
		{"(6,)", "(6)"},    {"[6]", "(6)"},     {"2x3", "(2,3)"}};
	for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++) {
		cr_assert_eq(ctl(&d, &out, "put", "ctl/s", "--dtype", "f32",
				 "--shape", good[i][0], in, NULL),
			     0, "shape '%s': %s", good[i][0], out);
		free(out);
		cr_assert_eq(ctl(&d, &out, "stat", "ctl/s", NULL), 0);
		cr_assert(strstr(out, good[i][1]), "shape '%s' is not %s: %s",
			  good[i][0], good[i][1], out);
		free(out);
	}
	cr_assert_eq(ctl(&d, NULL, "rm", "ctl/s", NULL), 0);
	/* a /proc file says it has 0 bytes: its 6 are read ("Linux\n");
	 * it said "has 0 bytes" */
	cr_assert_eq(ctl(&d, &out, "put", "ctl/p", "--dtype", "u8", "--shape",
			 "6", "/proc/sys/kernel/ostype", NULL),
		     0, "%s", out);
	free(out);
	cr_assert_eq(ctl(&d, NULL, "get", "ctl/p", "-o", outp, NULL), 0);
	back = tu_read_file(outp, &len);
	cr_assert(len == 6 && !memcmp(back, "Linux\n", 6));
	free(back);
	cr_assert_eq(ctl(&d, NULL, "rm", "ctl/p", NULL), 0);

	/* another process reads it back */
	cr_assert_eq(ctl(&d, NULL, "get", "ctl/t", "-o", outp, NULL), 0);
	back = tu_read_file(outp, &len);
	cr_assert_eq(len, sizeof(data));
	cr_assert(!memcmp(back, data, len));
	free(back);

	cr_assert_eq(ctl(&d, &out, "get", "ctl/t", "--json", NULL), 0);
	cr_assert(strstr(out, "\"dtype\":\"f32\""), "%s", out);
	cr_assert(strstr(out, "\"shape\":[2,3]"), "%s", out);
	cr_assert(strstr(out, "\"strides\":[12,4]"), "%s", out);
	cr_assert(strstr(out, "\"meta\":\"hello\""), "%s", out);
	free(out);

	cr_assert_eq(ctl(&d, &out, "ls", "--json", NULL), 0);
	cr_assert(out[0] == '[' && strstr(out, "\"name\":\"ctl/t\""), "%s",
		  out);
	free(out);
	cr_assert_eq(ctl(&d, &out, "stat", "ctl/t", "--json", NULL), 0);
	cr_assert(strstr(out, "\"version\":1"), "%s", out);
	cr_assert(strstr(out, "\"bytes\":24"), "%s", out);
	cr_assert(strstr(out, "\"lease_count\":0"), "%s", out);
	free(out);

	cr_assert_eq(ctl(&d, NULL, "rm", "ctl/t", NULL), 0);
	cr_assert_eq(ctl(&d, NULL, "stat", "ctl/t", NULL), 1,
		     "gone: refused by the daemon");
	cr_assert_eq(ctl(&d, NULL, "rm", NULL), 2);
	unlink(in);
	unlink(outp);
	daemon_stop(&d);
}

/*
 * A child of fork() inherits the parent's connection: a request of its
 * would share the parent's socket (its reply may reach either process),
 * and its release of an inherited tensor would end the parent's lease
 * while the parent reads it. The connection belongs to the process that
 * made it: in the child every call fails (-ECHILD) and a release sends
 * nothing.
 */
Test(handoff, a_forked_child_cannot_use_or_end_the_parents_connection)
{
	struct td_error e = {0};
	struct td_entry ent = {0};
	struct td_tensor *t;
	struct td_client *c;
	struct daemon d;
	int status;
	pid_t pid;

	daemon_start(&d);
	c = client_open(&d);
	parent_put(c, "fork/a", 64, 1);
	cr_assert_eq(td_client_get(c, "fork/a", &t, &e), 0, "%s", e.reason);
	pid = tu_fork();
	if (pid == 0) {
		struct td_entry ce = {0};
		int ok = td_client_stat(c, "fork/a", &ce, NULL) == -ECHILD;

		td_tensor_release(t); /* must not end the parent's lease */
		_exit(ok ? 0 : 1);
	}
	/* bounded: a child let on the shared socket could wait for ever
	 * for a reply that reaches the parent */
	status = tu_wait_child(pid, TU_WAIT_S, "the child of fork()");
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the child's call was not refused with -ECHILD");
	cr_assert_eq(td_client_stat(c, "fork/a", &ent, &e), 0, "%s", e.reason);
	cr_assert_eq(ent.lease_count, 1, "the child ended the parent's lease");
	td_entry_fini(&ent);
	td_tensor_release(t);
	cr_assert_eq(td_client_stat(c, "fork/a", &ent, &e), 0, "%s", e.reason);
	cr_assert_eq(ent.lease_count, 0);
	td_entry_fini(&ent);
	td_client_close(c);
	daemon_stop(&d);
}

/* Rings are shared memory: a child must not take or give back the
 * parent's slots, nor close the parent's ring or subscription */
Test(handoff, a_forked_child_cannot_use_the_parents_ring)
{
	uint64_t shape[1] = {64};
	struct td_ring_desc rd = {.dtype = TD_TENSOR_U8, .ndim = 1,
				  .shape = shape, .slot_count = 3,
				  .reader_count = 1};
	struct td_error e = {0};
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *sub;
	struct td_slot slot;
	struct td_view v, v2;
	struct daemon d;
	int status;
	pid_t pid;

	daemon_start(&d);
	c = client_open(&d);
	cr_assert_eq(td_ring_create(c, "fork/r", &rd, &r, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_ring_subscribe(c, "fork/r", 5000, &sub, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_ring_acquire(r, -1, &slot), 0);
	memset(slot.planes[0], 5, 64);
	cr_assert_eq(td_ring_publish(r, NULL), 0);
	cr_assert_eq(td_sub_next(sub, 5000, &v), 0);
	pid = tu_fork();
	if (pid == 0) {
		struct td_slot cs;
		struct td_view cv;
		int ok = td_ring_acquire(r, 0, &cs) == -ECHILD &&
			 td_ring_wait_read(r, 1, 0) == -ECHILD &&
			 td_sub_next(sub, 0, &cv) == -ECHILD &&
			 td_sub_release(sub) == -ECHILD;

		td_sub_close(sub); /* frees the child's copy only */
		td_ring_close(r);
		_exit(ok ? 0 : 1);
	}
	status = tu_wait_child(pid, TU_WAIT_S, "the child of fork()");
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the child's ring calls were not refused with -ECHILD");
	/* the parent's hold is still in the ring: however often the
	 * producer publishes, it never rewrites the held slot */
	for (int i = 0; i < 8; i++) {
		cr_assert_eq(td_ring_acquire(r, 5000, &slot), 0);
		memset(slot.planes[0], 6, 64);
		cr_assert_eq(td_ring_publish(r, NULL), 0);
	}
	cr_assert_eq(((const uint8_t *)v.planes[0])[63], 5,
		     "the child gave the parent's hold back");
	cr_assert_eq(td_sub_next(sub, 5000, &v2), 0,
		     "the child closed the subscription");
	cr_assert_eq(((const uint8_t *)v2.planes[0])[0], 6);
	td_sub_close(sub);
	td_ring_close(r);
	td_client_close(c);
	daemon_stop(&d);
}
