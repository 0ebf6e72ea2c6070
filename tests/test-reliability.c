/* SPDX-License-Identifier: MIT */
/*
 * One misbehaving client must not hurt the others, lose data or reach what
 * it may not (issue 4): clients that stop reading, fds in flight against
 * RLIMIT_NOFILE, SIGKILL at random points, quotas and LRU eviction, the
 * access policy (and its parser), read-only handout to other uids, the
 * socket's mode and group.
 *
 * Each test starts its own tensord (tests/stress/daemonctl.c). Tests that
 * need a second uid (nobody, 65534) or a daemon running as one are skipped
 * when not run as root. Waits are bounded retries of a condition, never a
 * timing threshold.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/sockios.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <tensord/tensord.h>

#include "daemon.h" /* the policy parser and the caps under test */
#include "daemonctl.h"
#include "scm.h"
#include "testutil.h"
#include "wire.h"

#define NOBODY 65534

/* policy.c logs through these; the tests have no daemon loop */
int td__log_level = TD_LOG_ERROR;
struct td__daemon *td__d;

void td__log(int level, const char *fmt, ...)
{
	(void)level;
	(void)fmt;
}

static struct tdc_daemon D;

static void start(const char *const *extra, uid_t uid, unsigned long nofile)
{
	struct tdc_opts o = {.extra = extra, .uid = uid, .nofile = nofile,
			     .log_level = "debug"};
	int rc = tdc_start(&D, NULL, &o);

	cr_assert_eq(rc, 0, "tensord did not start: %s (log %s)",
		     strerror(-rc), D.log);
}

static void stop(void)
{
	int rc = tdc_stop(&D, 0);

	cr_assert_neq(rc, -ETIMEDOUT, "tensord did not exit within %d s of "
				      "SIGTERM (killed; log %s)",
		      TDC_STOP_S, D.log);
	cr_assert_eq(rc, 0, "tensord exit status %d (log %s)", rc, D.log);
}

static bool root(void)
{
	return geteuid() == 0;
}

static bool log_has(const char *needle)
{
	return tdc_log_count(&D, needle) > 0;
}

/* ---- client helpers (work in forked children too: no cr_assert) ---- */

static struct td_client *cli_try(int *rc)
{
	struct td_client *c = NULL;
	struct td_error e = {0};

	*rc = td_client_connect(D.sock, &c, &e);
	return *rc < 0 ? NULL : c;
}

static struct td_client *cli(void)
{
	int rc;
	struct td_client *c = cli_try(&rc);

	cr_assert(c, "connect: %s", strerror(-rc));
	return c;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		p[i] = (uint8_t)seed;
	}
}

/*
 * Publish len bytes from seed under name, with their xxh3 in the
 * metadata. flags TD_PUBLISH_*; fence_fd used with TD_PUBLISH_FENCE.
 */
static int put_ex(struct td_client *c, const char *name, size_t len,
		  uint64_t seed, uint32_t flags, int fence_fd,
		  struct td_error *e)
{
	uint64_t shape[1] = {len};
	uint8_t *buf = malloc(len ? len : 1);
	uint64_t digest;
	struct td_publish p = {.name = name, .flags = flags,
			       .dtype = TD_TENSOR_U8, .ndim = 1,
			       .shape = shape, .fence_fd = fence_fd};
	int rc;

	if (!buf)
		return -ENOMEM;
	fill(buf, len, seed | 1);
	digest = XXH3_64bits(buf, len);
	p.meta = &digest;
	p.meta_len = sizeof(digest);
	rc = td_client_put(c, &p, buf, len, NULL, e);
	free(buf);
	return rc;
}

static int put(struct td_client *c, const char *name, size_t len,
	       uint32_t flags)
{
	struct td_error e = {0};

	return put_ex(c, name, len, (uint64_t)len * 7919 + 1, flags, -1, &e);
}

/* Get name, check its bytes against the digest, release. 0 or -errno. */
static int verify(struct td_client *c, const char *name)
{
	struct td_tensor *t;
	struct td_error e = {0};
	const void *meta;
	uint64_t want;
	size_t mlen;
	int rc = td_client_get(c, name, &t, &e);

	if (rc < 0)
		return rc;
	meta = td_tensor_meta(t, &mlen);
	if (mlen != sizeof(want)) {
		td_tensor_release(t);
		return -EBADMSG;
	}
	memcpy(&want, meta, sizeof(want));
	rc = XXH3_64bits(td_tensor_plane_data(t, 0),
			 td_tensor_plane_size(t, 0)) == want
		     ? 0
		     : -EILSEQ;
	td_tensor_release(t);
	return rc;
}

static int stat_rc(struct td_client *c, const char *name,
		   struct td_entry *out)
{
	struct td_entry e;
	struct td_error err = {0};
	int rc = td_client_stat(c, name, &e, &err);

	if (rc == 0 && out)
		*out = e;
	else if (rc == 0)
		td_entry_fini(&e);
	return rc;
}

/* In a forked child: report the failing line through the exit status. */
#define CK(x)                                                                 \
	do {                                                                  \
		if (!(x)) {                                                   \
			fprintf(stderr, "child %s:%d: %s\n", __FILE__,        \
				__LINE__, #x);                                \
			_exit(1);                                             \
		}                                                             \
	} while (0)

/* Run fn in a child as nobody; assert it exits 0. */
static void as_nobody(void (*fn)(void *), void *arg)
{
	pid_t pid = tu_fork();
	int st;

	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 ||
		    setuid(NOBODY) < 0)
			_exit(2);
		/* the uid change cleared the parent-death signal: again */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		fn(arg);
		_exit(0);
	}
	st = tu_wait_child(pid, TU_WAIT_S, "a child as nobody");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "child as nobody failed (status %d); see stderr", st);
}

/* ---- raw wire, for the client that never reads ---- */

/* 0, or -errno once the daemon has cut the connection. */
static int raw_send(int sock, uint16_t op, uint64_t id, const uint8_t *body,
		    size_t len)
{
	uint8_t buf[TD_WIRE_MAX_MSG];
	struct td_wire_hdr h = {.magic = TD_WIRE_MAGIC,
				.version = TD_WIRE_VERSION,
				.opcode = op,
				.request_id = id,
				.body_len = (uint32_t)len};

	ssize_t n;

	td_wire_hdr_encode(&h, buf);
	memcpy(buf + TD_WIRE_HDR_LEN, body, len);
	n = send(sock, buf, TD_WIRE_HDR_LEN + len, MSG_NOSIGNAL);
	if (n < 0 && (errno == ECONNRESET || errno == EPIPE))
		return -errno;
	cr_assert_eq(n, (ssize_t)(TD_WIRE_HDR_LEN + len), "send: %s",
		     strerror(errno));
	return 0;
}

/*
 * What a daemon that neither answers sock nor hangs up is doing: its
 * state and wait channel, the bytes sock sent it that it has not read
 * (SIOCOUTQ: requests it stopped reading) and has to read, and each
 * client's requests and leases as STATUS counts them (a raw client's
 * leases: the GETs it answered). Seen once under load (helper-178).
 */
static void daemon_stuck(int sock, char *out, size_t cap)
{
	char path[64], wchan[64] = "?", stat[256] = "?";
	struct td_status *st = NULL;
	struct td_client *c;
	int outq = -1, inq = -1, rc;
	size_t o;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/wchan", (int)D.pid);
	if ((f = fopen(path, "re"))) {
		if (!fgets(wchan, sizeof(wchan), f))
			wchan[0] = 0;
		fclose(f);
	}
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)D.pid);
	if ((f = fopen(path, "re"))) {
		if (!fgets(stat, sizeof(stat), f))
			stat[0] = 0;
		fclose(f);
	}
	(void)ioctl(sock, SIOCOUTQ, &outq);
	(void)ioctl(sock, SIOCINQ, &inq);
	o = (size_t)snprintf(out, cap, "daemon wchan %s, stat %.60s; this "
			     "socket: %d bytes unread by the daemon, %d to "
			     "read; clients:", wchan, stat, outq, inq);
	/* only from a loop that waits for events: one stuck elsewhere
	 * would not answer STATUS either */
	if (strcmp(wchan, "do_epoll_wait")) {
		snprintf(out + o, cap - o, " (not asked: the loop is not "
			 "waiting for events)");
		return;
	}
	c = cli_try(&rc);
	if (c && td_client_status(c, &st, NULL) == 0)
		for (size_t i = 0; i < st->client_count && o < cap; i++)
			o += (size_t)snprintf(
				out + o, cap - o,
				" [%s requests %llu leases %u]",
				st->clients[i].comm,
				(unsigned long long)st->clients[i].requests,
				st->clients[i].leases);
	td_status_free(st);
	td_client_close(c);
}

/* One datagram: its length (0 at hang-up) and fds closed; <0 on error. */
static ssize_t raw_recv(int sock, struct td_wire_hdr *h)
{
	uint8_t buf[TD_WIRE_MAX_MSG];
	int fds[TD_WIRE_MAX_FDS];
	struct td__scm_rx rx = {.fds = fds, .cap = TD_WIRE_MAX_FDS};
	struct pollfd pf = {sock, POLLIN, 0};
	char why[2048];
	ssize_t n;

	/* a daemon that neither answers nor hangs up fails the test, and
	 * says what it was doing */
	if (poll(&pf, 1, TU_WAIT_S * 1000) == 0) {
		daemon_stuck(sock, why, sizeof(why));
		cr_assert_fail("a message or hang-up of tensord: nothing "
			       "within %d s; %s (log %s)", TU_WAIT_S, why,
			       D.log);
	}
	n = td__scm_recv(sock, buf, sizeof(buf), 0, &rx);
	if (n < 0)
		return n;
	td__scm_close(fds, rx.nfds);
	if (n > 0)
		cr_assert_eq(td_wire_hdr_decode(buf, (size_t)n, h, NULL), 0);
	return n;
}

/* A raw connection after HELLO, asking for fds by SCM_RIGHTS. */
static int raw_hello_scm(void)
{
	struct td_wire_hello_req r = {TD_IMPORT_SCM, -1, {"never-reads", 11}, 0};
	uint8_t body[512];
	struct td_wire_hdr h;
	int64_t n = td_wire_hello_req_encode(&r, body, sizeof(body));
	int sock = tdc_connect(D.sock);

	cr_assert(sock >= 0 && n > 0);
	cr_assert_eq(raw_send(sock, TD_OP_HELLO, 1, body, (size_t)n), 0);
	cr_assert_gt(raw_recv(sock, &h), 0);
	cr_assert_eq(h.status, 0);
	return sock;
}

/* count GETs of name with TD_WIRE_REQ_SCM, none of the replies read. */
static void raw_gets(int sock, const char *name, unsigned count)
{
	struct td_wire_get_req r = {{name, (uint16_t)strlen(name)},
				    TD_GET_LATEST, TD_WIRE_REQ_SCM, 0, 0, 0, {0}};
	uint8_t body[512];
	int64_t n = td_wire_get_req_encode(&r, body, sizeof(body));

	cr_assert_gt(n, 0);
	/* the daemon may cut it before all are sent */
	for (unsigned i = 0; i < count; i++)
		if (raw_send(sock, TD_OP_GET, 100 + i, body, (size_t)n) < 0)
			break;
}

/* Read until the daemon hangs up; the number of replies that came. */
static unsigned raw_drain(int sock)
{
	struct td_wire_hdr h;
	unsigned replies = 0;
	ssize_t n;

	while ((n = raw_recv(sock, &h)) > 0)
		replies++;
	cr_assert(n == 0 || n == -ECONNRESET, "recv: %s", strerror(-(int)n));
	return replies;
}

/* A 4 KiB tensor with an eventfd fence: every SCM GET carries 2 fds. */
static void put_fenced(struct td_client *c, const char *name)
{
	struct td_error e = {0};
	int efd = eventfd(1, EFD_CLOEXEC);
	int rc;

	cr_assert(efd >= 0);
	rc = put_ex(c, name, 4096, 5, TD_PUBLISH_FENCE, efd, &e);
	cr_assert_eq(rc, 0, "put %s: %s", name, e.reason);
	close(efd);
}

static uint32_t lease_count(struct td_client *c, const char *name)
{
	struct td_entry e;
	uint32_t n;

	cr_assert_eq(stat_rc(c, name, &e), 0);
	n = e.lease_count;
	td_entry_fini(&e);
	return n;
}

TestSuite(reliability, .timeout = 120);

/* ---- slow and stuck clients ---- */

Test(reliability, a_client_that_never_reads_is_cut_and_its_leases_released)
{
	struct td_client *c;
	unsigned got;
	int sock;

	start(NULL, 0, 0);
	c = cli();
	put_fenced(c, "slow/t");
	sock = raw_hello_scm();
	/* 100 replies x 2 fds would be 200 fds in flight: over budget */
	raw_gets(sock, "slow/t", 100);
	/* the others are served meanwhile */
	for (int i = 0; i < 20; i++)
		cr_assert_eq(verify(c, "slow/t"), 0);
	got = raw_drain(sock);
	close(sock);
	cr_assert_lt(got, 100, "the daemon answered all %u GETs", got);
	cr_assert_leq(got * 2, TD__MAX_FDS_INFLIGHT);
	cr_assert(log_has("does not read its replies"));
	/* its leases go with it (the hang-up is handled asynchronously) */
	for (int i = 0; i < 1000 && lease_count(c, "slow/t"); i++)
		tdc_nap_ms(10);
	cr_assert_eq(lease_count(c, "slow/t"), 0);
	cr_assert_eq(verify(c, "slow/t"), 0);
	td_client_close(c);
	stop();
}

Test(reliability, fds_in_flight_of_a_stuck_client_do_not_starve_others)
{
	static const char *const extra[] = {"--socket-mode", "0666", NULL};
	struct td_client *c;
	unsigned got;
	int sock;

	if (!root())
		cr_skip_test("needs root to run the daemon as nobody");
	/*
	 * As nobody with RLIMIT_NOFILE 200 the kernel refuses the daemon's
	 * sendmsg with ETOOMANYREFS once 200 of its fds are in flight (root
	 * would be exempt). Without the per-client budget the stuck client
	 * gets there and then every client with fds to receive is cut.
	 */
	start(extra, NOBODY, 200);
	setenv("TENSORD_IMPORT", "scm", 1);
	c = cli();
	unsetenv("TENSORD_IMPORT");
	put_fenced(c, "slow/t");
	sock = raw_hello_scm();
	raw_gets(sock, "slow/t", 300);
	for (int i = 0; i < 300; i++)
		cr_assert_eq(verify(c, "slow/t"), 0, "GET %d failed", i);
	got = raw_drain(sock);
	close(sock);
	cr_assert_leq(got * 2, TD__MAX_FDS_INFLIGHT);
	cr_assert(!log_has("ETOOMANYREFS"));
	td_client_close(c);
	stop();
}

/* ---- SIGKILL at random points ---- */

#define KILL_NAMES 6

static void victim(int role, uint64_t seed, int bad_fd)
{
	struct td_client *c;
	char name[32];
	int rc;

	c = cli_try(&rc);
	if (!c)
		_exit(0); /* killed daemon side is not this test's subject */
	for (;;) {
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		snprintf(name, sizeof(name), "kill/%d",
			 (int)((seed >> 33) % KILL_NAMES));
		if (role == 0) {
			/* producer: dies during ALLOC, fill or PUBLISH */
			size_t len = 1 + (size_t)((seed >> 20) % (1u << 20));
			struct td_error e = {0};

			put_ex(c, name, len, seed, 0, -1, &e);
		} else if (role == 1) {
			/* consumer: dies holding leases, mid-check */
			struct td_tensor *t[3];
			struct td_error e = {0};
			int n = 0;

			rc = verify(c, name);
			if (rc == -EILSEQ || rc == -EBADMSG)
				(void)!write(bad_fd, "X", 1);
			while (n < 3 && td_client_get(c, name, &t[n], &e) == 0)
				n++;
			if (seed & 1)
				while (n)
					td_tensor_release(t[--n]);
		} else {
			/* watcher: dies mid-watch, parked GETs pending */
			struct td_event ev;
			struct td_tensor *t;
			struct td_error e = {0};
			uint64_t id;

			td_client_watch(c, "kill/", TD_WATCH_PREFIX, &id, &e);
			td_client_next_event(c, 5, &ev, &e);
			if (td_client_get_newer(c, name, UINT64_MAX - 1, 5, &t,
						&e) == 0)
				td_tensor_release(t);
		}
	}
}

Test(reliability, sigkill_at_random_points_leaks_nothing_and_shows_no_half_tensor)
{
	static const char *const extra[] = {"--max-bytes", "256M", NULL};
	uint64_t seed = 0x5eed;
	int bad[2], base, now;
	struct td_client *c;
	struct td_entry *list;
	size_t count;
	struct td_error e = {0};
	char x;

	start(extra, 0, 0);
	base = tdc_fd_count(D.pid);
	cr_assert(pipe2(bad, O_CLOEXEC | O_NONBLOCK) == 0);
	for (int round = 0; round < 36; round++) {
		pid_t kids[3];

		for (int r = 0; r < 3; r++) {
			seed = tu_rand(&seed) | 1;
			/* victims loop until killed: none may outlive a
			 * test that fails or times out */
			kids[r] = tu_fork();
			if (kids[r] == 0)
				victim(r, seed, bad[1]);
		}
		/* a random point: somewhere in their loops */
		tdc_nap_ms((long)(tu_rand(&seed) % 40));
		for (int r = 0; r < 3; r++) {
			kill(kids[r], SIGKILL);
			waitpid(kids[r], NULL, 0);
		}
	}
	cr_assert_eq(read(bad[0], &x, 1), -1, "a consumer saw wrong bytes");
	close(bad[0]);
	close(bad[1]);
	/* every tensor that is visible is whole */
	c = cli();
	cr_assert_eq(td_client_list(c, "kill/", &list, &count, &e), 0);
	for (size_t i = 0; i < count; i++)
		cr_assert_eq(verify(c, list[i].name), 0, "%s", list[i].name);
	for (size_t i = 0; i < count; i++)
		cr_assert_eq(td_client_delete(c, list[i].name, NULL, &e), 0);
	td_entry_list_free(list, count);
	td_client_close(c);
	/* no plane, alloc, lease or connection fd left behind */
	now = tdc_fd_settle(D.pid, base, 1000);
	if (now != base) {
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "ls -l /proc/%d/fd >&2", (int)D.pid);
		(void)!system(cmd);
	}
	cr_assert_eq(now, base, "daemon fds %d, baseline %d", now, base);
	stop();
}

/* ---- admission, quotas and eviction ---- */

/* Bytes of memory the file of fd holds now (its allocated blocks). */
static uint64_t held_bytes(int fd)
{
	struct stat st;

	cr_assert_eq(fstat(fd, &st), 0);
	return (uint64_t)st.st_blocks * 512;
}

/*
 * Every page is there before the producer writes: reserved by libtensord
 * (the daemon leaves a new plane's memory to the client that asks for it,
 * test-daemon.c), and only what a plane needs.
 */
Test(reliability, alloc_planes_are_backed_up_front)
{
	const uint64_t sizes[3] = {8u << 20, 0, 3 * 4096 + 1};
	struct td_client *c;
	struct td_alloc *a;
	struct td_error e = {0};

	start(NULL, 0, 0);
	c = cli();
	cr_assert_eq(td_client_alloc(c, 3, sizes, &a, &e), 0, "%s", e.reason);
	cr_assert_geq(held_bytes(td_alloc_fd(a, 0)), sizes[0]);
	cr_assert_eq(held_bytes(td_alloc_fd(a, 1)), 0);
	cr_assert_geq(held_bytes(td_alloc_fd(a, 2)), sizes[2]);
	td_alloc_free(a);
	cr_assert_eq(td_client_alloc_ex(c, 1, sizes, TD_ALLOC_STREAM, &a, &e),
		     0, "%s", e.reason);
	cr_assert_geq(held_bytes(td_alloc_fd(a, 0)), sizes[0]);
	td_alloc_free(a);
	td_client_close(c);
	stop();
}

/*
 * A machine short of memory (here a seccomp filter answers ENOSPC to
 * fallocate): the ALLOC fails with the reason, nothing stays open or
 * mapped here, and the connection goes on. $TENSORD_ALLOC_RESERVE=daemon
 * leaves the reservation to the daemon, which the filter does not reach.
 */
Test(reliability, an_alloc_whose_memory_cannot_be_reserved_fails_cleanly)
{
	const uint64_t big = 4u << 20, none = 0;
	struct td_client *c;
	struct td_alloc *a = NULL;
	struct td_error e = {0};
	int fds, maps, rc;

	start(NULL, 0, 0);
	c = cli();
	fds = tu_fd_count();
	maps = tu_buf_map_count();
	rc = tu_deny_syscall(__NR_fallocate, ENOSPC);
	if (rc < 0) {
		td_client_close(c);
		stop();
		cr_skip_test("the kernel refuses seccomp filters: %s",
			     strerror(-rc));
	}
	rc = td_client_alloc(c, 1, &big, &a, &e);
	cr_assert_eq(rc, -ENOSPC, "%d %s", rc, e.reason);
	cr_assert_null(a);
	cr_assert_str_eq(e.reason, "reserve 4194304 bytes for plane 0: No "
				   "space left on device");
	cr_assert_eq(tu_fd_count(), fds);
	cr_assert_eq(tu_buf_map_count(), maps);
	cr_assert_eq(td_client_alloc(c, 1, &none, &a, &e), 0, "%s", e.reason);
	td_alloc_free(a);
	td_client_close(c);
	/* a client that leaves it to the daemon (not under the filter) */
	cr_assert_eq(setenv("TENSORD_ALLOC_RESERVE", "daemon", 1), 0);
	c = cli();
	cr_assert_eq(td_client_alloc(c, 1, &big, &a, &e), 0, "%s", e.reason);
	cr_assert_geq(held_bytes(td_alloc_fd(a, 0)), big);
	td_alloc_free(a);
	td_client_close(c);
	unsetenv("TENSORD_ALLOC_RESERVE");
	stop();
}

/*
 * CPU time (user + system, clock ticks) of the thread of process pid
 * whose name is name; -1 when it has none.
 */
static long thread_ticks(pid_t pid, const char *name)
{
	char path[320], line[1024];
	struct dirent *t;
	long ticks = -1;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	cr_assert(dir, "%s: %s", path, strerror(errno));
	while ((t = readdir(dir)) && ticks < 0) {
		unsigned long ut, st;
		const char *end;
		FILE *f;

		if (t->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid,
			 t->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (!fgets(line, sizeof(line), f))
			line[0] = 0;
		fclose(f);
		/* "tid (comm) state ...": utime and stime are fields 14, 15 */
		end = strrchr(line, ')');
		if (!end || strncmp(strchr(line, '(') + 1, name, strlen(name)) ||
		    strchr(line, '(') + 1 + strlen(name) != end)
			continue;
		if (sscanf(end + 2,
			   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
			   &ut, &st) == 2)
			ticks = (long)(ut + st);
	}
	closedir(dir);
	return ticks;
}

/*
 * The daemon is back at fds0 descriptors, and its td-closer thread has
 * spent CPU time since it had t0 ticks: it freed what (the pages go
 * after the descriptor, so this waits for them; not a measurement).
 */
static void closer_freed(int fds0, long t0, const char *what)
{
	cr_assert_eq(tdc_fd_settle(D.pid, fds0, 20000), fds0);
	for (int i = 0; i < 1000 && thread_ticks(D.pid, "td-closer") <= t0;
	     i++)
		usleep(10000);
	cr_assert_gt(thread_ticks(D.pid, "td-closer"), t0,
		     "freeing %s took the closer thread no CPU time", what);
}

/*
 * The close that frees a big plane's memory (the daemon held its last
 * reference) is the closer thread's, not the loop's (daemon/closer.c):
 * that thread's CPU time grows by the kernel's freeing of 512 MiB, and
 * the daemon's descriptors come back to where they were.
 */
Test(reliability, a_big_planes_last_close_is_the_closer_threads)
{
	const uint64_t size = 512ull << 20, shape[1] = {size};
	struct td_client *c;
	struct td_alloc *a;
	struct td_error e = {0};
	struct td_publish p = {.name = "big/x", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape};
	long t0;
	int fds0;

	start(NULL, 0, 0);
	c = cli();
	t0 = thread_ticks(D.pid, "td-closer");
	cr_assert_geq(t0, 0, "the daemon has no td-closer thread");
	fds0 = tdc_fd_count(D.pid);
	cr_assert_eq(td_client_alloc(c, 1, &size, &a, &e), 0, "%s", e.reason);
	memset(td_alloc_data(a, 0), 0x5a, 4096);
	cr_assert_eq(td_client_publish_alloc(c, a, &p, NULL, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_client_delete(c, "big/x", NULL, &e), 0, "%s",
		     e.reason);
	closer_freed(fds0, t0, "a 512 MiB plane");
	td_client_close(c);
	stop();
}

/* A memfd of len bytes, all allocated. */
static int full_memfd(uint64_t len)
{
	int fd = memfd_create("closer-test", MFD_CLOEXEC);

	cr_assert_geq(fd, 0);
	cr_assert_eq(fallocate(fd, 0, 0, (off_t)len), 0, "%s",
		     strerror(errno));
	return fd;
}

/*
 * daemon/closer.c, linked in: the thread's queue holds half of
 * --max-bytes at most (the store has uncharged what waits there). With
 * 1 GiB, a 256 MiB memfd goes to the thread, and a 768 MiB one right
 * after is past the cap: td__closer_close closes it itself, so it is
 * gone when the call returns (while the thread is still freeing the
 * first); small ones never wait either.
 */
Test(reliability, the_closers_queue_is_bounded_by_half_of_max_bytes)
{
	struct td__daemon dd = {0};
	int first, big, small;

	dd.opts.max_bytes = 1ull << 30;
	td__d = &dd;
	td__closer_start();
	first = full_memfd(256ull << 20);
	big = full_memfd(768ull << 20);
	small = full_memfd(1u << 20);
	td__closer_close(first, 256ull << 20);
	td__closer_close(big, 768ull << 20);
	cr_assert_eq(fcntl(big, F_GETFD), -1, "the 768 MiB one was queued");
	cr_assert_eq(errno, EBADF);
	td__closer_close(small, 1u << 20);
	cr_assert_eq(fcntl(small, F_GETFD), -1);
	td__closer_stop(); /* joins: the first is closed by now */
	cr_assert_eq(fcntl(first, F_GETFD), -1);
	td__d = NULL;
}

/*
 * Room for three of put()'s 4 KiB versions: with their 8 bytes of
 * metadata each (the digest), which are charged too (docs/policy.md §4).
 */
static const char *const max12k[] = {"--max-bytes", "12312", NULL};

Test(reliability, lru_eviction_makes_room_for_a_new_version)
{
	struct td_client *c;

	start(max12k, 0, 0);
	c = cli();
	cr_assert_eq(put(c, "e/a", 4096, 0), 0);
	cr_assert_eq(put(c, "e/b", 4096, 0), 0);
	cr_assert_eq(put(c, "e/c", 4096, 0), 0);
	cr_assert_eq(verify(c, "e/a"), 0); /* a is now used more recently */
	cr_assert_eq(put(c, "e/d", 4096, 0), 0);
	cr_assert_eq(stat_rc(c, "e/b", NULL), -ENOENT, "b was the LRU");
	cr_assert_eq(verify(c, "e/a"), 0);
	cr_assert_eq(verify(c, "e/c"), 0);
	cr_assert_eq(verify(c, "e/d"), 0);
	cr_assert(log_has("evicted e/b"));
	td_client_close(c);
	stop();
}

Test(reliability, pinned_versions_are_never_evicted)
{
	struct td_client *c;
	struct td_entry ent;
	char name[16];

	start(max12k, 0, 0);
	c = cli();
	cr_assert_eq(put(c, "p/pinned", 4096, TD_PUBLISH_PIN), 0);
	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof(name), "p/%d", i);
		cr_assert_eq(put(c, name, 4096, 0), 0, "%s", name);
	}
	cr_assert_eq(stat_rc(c, "p/pinned", &ent), 0);
	cr_assert_eq(ent.flags & TD_PUBLISH_PIN, TD_PUBLISH_PIN);
	td_entry_fini(&ent);
	cr_assert_eq(verify(c, "p/pinned"), 0);
	cr_assert_eq(stat_rc(c, "p/0", NULL), -ENOENT);
	td_client_close(c);
	stop();
}

Test(reliability, leased_versions_are_never_evicted)
{
	struct td_client *c;
	struct td_tensor *t;
	struct td_error e = {0};
	char name[16];

	start(max12k, 0, 0);
	c = cli();
	cr_assert_eq(put(c, "l/held", 4096, 0), 0);
	cr_assert_eq(td_client_get(c, "l/held", &t, &e), 0);
	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof(name), "l/%d", i);
		cr_assert_eq(put(c, name, 4096, 0), 0, "%s", name);
	}
	cr_assert_eq(stat_rc(c, "l/held", NULL), 0);
	td_tensor_release(t);
	/* released, it is the least recently used now */
	cr_assert_eq(put(c, "l/next", 4096, 0), 0);
	cr_assert_eq(stat_rc(c, "l/held", NULL), -ENOENT);
	td_client_close(c);
	stop();
}

Test(reliability, nothing_evictable_is_an_explicit_enospc)
{
	/* two 4 KiB versions and their 8 bytes of metadata each */
	static const char *const extra[] = {"--max-bytes", "8208", NULL};
	struct td_client *c;
	struct td_error e = {0};

	start(extra, 0, 0);
	c = cli();
	cr_assert_eq(put(c, "n/a", 4096, TD_PUBLISH_PIN), 0);
	cr_assert_eq(put(c, "n/b", 4096, TD_PUBLISH_PIN), 0);
	cr_assert_eq(put_ex(c, "n/c", 4096, 1, 0, -1, &e), -ENOSPC);
	cr_assert(strstr(e.reason, "nothing more can be evicted"), "%s",
		  e.reason);
	cr_assert(strstr(e.reason, "--max-bytes"), "%s", e.reason);
	cr_assert_eq(verify(c, "n/a"), 0);
	cr_assert_eq(verify(c, "n/b"), 0);
	td_client_close(c);
	stop();
}

static void quota_child(void *arg)
{
	struct td_client *c;
	struct td_error e = {0};
	int rc;

	(void)arg;
	c = cli_try(&rc);
	CK(c);
	CK(put(c, "q/n1", 4096, 0) == 0);
	CK(put(c, "q/n2", 4096, 0) == 0);
	/* over its quota: its own least recently used goes, nobody else's */
	CK(put(c, "q/n3", 4096, 0) == 0);
	CK(stat_rc(c, "q/n1", NULL) == -ENOENT);
	CK(put(c, "q/n2", 4096, TD_PUBLISH_PIN) == 0);
	CK(put(c, "q/n3", 4096, TD_PUBLISH_PIN) == 0);
	rc = put_ex(c, "q/n4", 4096, 1, 0, -1, &e);
	CK(rc == -EDQUOT);
	CK(strstr(e.reason, "uid quota"));
	td_client_close(c);
}

Test(reliability, a_uid_quota_evicts_only_that_uids_versions_then_edquot)
{
	/* two 4 KiB versions and their 8 bytes of metadata each */
	static const char *const extra[] = {"--uid-max-bytes", "8208",
					    "--socket-mode", "0666", NULL};
	struct td_client *c;

	if (!root())
		cr_skip_test("needs root to act as a second uid");
	start(extra, 0, 0);
	c = cli();
	cr_assert_eq(put(c, "q/r1", 4096, 0), 0);
	cr_assert_eq(put(c, "q/r2", 4096, 0), 0);
	as_nobody(quota_child, NULL);
	cr_assert_eq(verify(c, "q/r1"), 0);
	cr_assert_eq(verify(c, "q/r2"), 0);
	cr_assert_eq(verify(c, "q/n2"), 0);
	cr_assert_eq(verify(c, "q/n3"), 0);
	td_client_close(c);
	stop();
}

/* ---- access control ---- */

static char policy_path[128];

static const char *const *with_policy(const char *text)
{
	static const char *extra[] = {"--policy", policy_path,
				      "--socket-mode", "0666", NULL};
	FILE *f;

	snprintf(policy_path, sizeof(policy_path), "/tmp/td-policy-%d",
		 (int)getpid());
	f = fopen(policy_path, "w");
	cr_assert(f);
	fputs(text, f);
	fclose(f);
	return extra;
}

static void policy_child(void *arg)
{
	struct td_client *c;
	struct td_entry *list;
	struct td_error e = {0};
	size_t count;
	int rc;

	(void)arg;
	c = cli_try(&rc);
	CK(c);
	CK(verify(c, "pub/x") == 0);
	CK(verify(c, "grp/z") == 0); /* by its gid */
	rc = verify(c, "secret/y");
	CK(rc == -EACCES);
	CK(stat_rc(c, "secret/y", NULL) == -EACCES);
	/* refused the same whether the name exists or not */
	CK(stat_rc(c, "secret/none", NULL) == -EACCES);
	CK(td_client_list(c, "", &list, &count, &e) == 0);
	for (size_t i = 0; i < count; i++)
		CK(strncmp(list[i].name, "secret/", 7) != 0);
	CK(count == 3);
	td_entry_list_free(list, count);
	rc = put_ex(c, "pub/w", 64, 1, 0, -1, &e);
	CK(rc == -EACCES);
	CK(strstr(e.reason, "may not write"));
	CK(put(c, "nobody/a", 64, 0) == 0);
	CK(td_client_delete(c, "nobody/old", NULL, &e) == 0);
	CK(td_client_delete(c, "pub/x", NULL, &e) == -EACCES);
	td_client_close(c);
}

Test(reliability, the_policy_grants_by_uid_gid_and_prefix_and_refuses_the_rest)
{
	struct td_client *c;

	if (!root())
		cr_skip_test("needs root to act as a second uid");
	start(with_policy("# readers and writers\n"
			  "allow uid=65534 r pub/\n"
			  "allow uid=65534 rw nobody/   # its own\n"
			  "\n"
			  "allow gid=65534 r grp/\n"),
	      0, 0);
	c = cli(); /* the daemon's own uid: its operator, always allowed */
	cr_assert_eq(put(c, "pub/x", 64, 0), 0);
	cr_assert_eq(put(c, "secret/y", 64, 0), 0);
	cr_assert_eq(put(c, "grp/z", 64, 0), 0);
	cr_assert_eq(put(c, "nobody/old", 64, 0), 0);
	as_nobody(policy_child, NULL);
	cr_assert_eq(verify(c, "nobody/a"), 0);
	cr_assert_eq(stat_rc(c, "nobody/old", NULL), -ENOENT);
	cr_assert_eq(verify(c, "pub/x"), 0);
	td_client_close(c);
	stop();
	unlink(policy_path);
}

static void reader_child(void *arg)
{
	struct td_client *c;
	struct td_alloc *a;
	struct td_error e = {0};
	uint64_t size = 4096;
	int rc;

	(void)arg;
	c = cli_try(&rc);
	CK(c);
	CK(td_client_alloc(c, 1, &size, &a, &e) == -EACCES);
	td_client_close(c);
}

/* The names of the large-policy LIST test, and which nobody may read. */
#define BIG_NAMES 300

static void big_name(unsigned i, char *out, size_t len)
{
	static const char *const dirs[] = {"n/", "m/", "w/", "d/", "h/", "x/"};

	snprintf(out, len, "%s%u", dirs[i % 6], i / 6);
}

static bool big_readable(const char *name)
{
	/* uid=65534 r n/1, gid=65534 r m/; w/ write only, d/ dmabuf only,
	 * h/ http only, x/ other uids' */
	return strncmp(name, "n/1", 3) == 0 || strncmp(name, "m/", 2) == 0;
}

static void big_list_child(void *arg)
{
	struct td_client *c;
	struct td_entry *list;
	struct td_error e = {0};
	size_t count, want = 0, k = 0;
	int rc;

	(void)arg;
	for (unsigned i = 0; i < BIG_NAMES; i++) {
		char name[32];

		big_name(i, name, sizeof(name));
		want += big_readable(name);
	}
	c = cli_try(&rc);
	CK(c);
	CK(td_client_list(c, "", &list, &count, &e) == 0);
	CK(count == want);
	for (size_t i = 0; i < count; i++)
		k += big_readable(list[i].name);
	CK(k == want);
	td_entry_list_free(list, count);
	/* a prefix LIST goes through the same check */
	CK(td_client_list(c, "n/", &list, &count, &e) == 0);
	for (size_t i = 0; i < count; i++)
		CK(strncmp(list[i].name, "n/1", 3) == 0);
	CK(count > 0);
	td_entry_list_free(list, count);
	td_client_close(c);
}

/*
 * A LIST under a policy of TD__POLICY_MAX_RULES lines, most of them other
 * uids' on overlapping prefixes (the matcher is a trie of them, policy.c),
 * shows exactly the names the few lines naming nobody let it read.
 */
Test(reliability, a_list_under_a_thousand_rules_shows_exactly_the_readable)
{
	static char text[TD__POLICY_MAX_RULES * 48];
	static const char *const perms[] = {"r", "w", "rw", "dmabuf"};
	size_t off = 0;
	struct td_client *c;

	if (!root())
		cr_skip_test("needs root to act as a second uid");
	off += (size_t)snprintf(text + off, sizeof(text) - off,
				"allow uid=65534 r n/1\n"
				"allow gid=65534 r m/\n"
				"allow uid=65534 w w/\n"
				"allow any dmabuf d/\n"
				"allow http r h/\n");
	for (unsigned i = 5; i < TD__POLICY_MAX_RULES; i++)
		off += (size_t)snprintf(
			text + off, sizeof(text) - off, "allow %s=%u %s %s\n",
			i % 2 ? "uid" : "gid", 1000 + i % 50, perms[i % 4],
			i % 7 == 0 ? "*" : i % 3 ? "x/" : "n/");
	start(with_policy(text), 0, 0);
	c = cli();
	for (unsigned i = 0; i < BIG_NAMES; i++) {
		char name[32];

		big_name(i, name, sizeof(name));
		cr_assert_eq(put(c, name, 8, 0), 0, "%s", name);
	}
	as_nobody(big_list_child, NULL);
	td_client_close(c);
	stop();
	unlink(policy_path);
}

Test(reliability, a_uid_without_any_write_rule_cannot_alloc)
{
	if (!root())
		cr_skip_test("needs root to act as a second uid");
	start(with_policy("allow uid=65534 r pub/\n"), 0, 0);
	as_nobody(reader_child, NULL);
	stop();
	unlink(policy_path);
}

Test(reliability, a_bad_policy_file_stops_the_daemon_at_start)
{
	struct tdc_daemon d;
	struct tdc_opts o = {.extra = with_policy("allow uid=1 rwx a/\n")};

	char cmd[128];

	cr_assert_eq(tdc_start(&d, NULL, &o), -ECHILD);
	unlink(policy_path);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d.dir);
	cr_assert_eq(system(cmd), 0);
}

static void upgrade_child(void *arg)
{
	struct td_client *c;
	struct td_tensor *t;
	struct td_error e = {0};
	char path[64];
	void *p;
	int rc, fd;

	(void)arg;
	c = cli_try(&rc);
	CK(c);
	CK(td_client_get(c, "ro/t", &t, &e) == 0);
	fd = td_tensor_plane_fd(t, 0);
	CK(fd >= 0);
	/* the fd it was handed is read-only ... */
	CK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY);
	CK(write(fd, "x", 1) < 0 && errno == EBADF);
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CK(p == MAP_FAILED);
	/* ... and cannot be re-opened read-write, or chmod'ed to allow it */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	CK(open(path, O_RDWR) < 0 && errno == EACCES);
	CK(open(path, O_WRONLY) < 0 && errno == EACCES);
	CK(fchmod(fd, 0666) < 0 && errno == EPERM);
	CK(ftruncate(fd, 0) < 0);
	CK(fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL) < 0);
	CK(verify(c, "ro/t") == 0);
	td_tensor_release(t);
	td_client_close(c);
}

Test(reliability, a_consumer_of_another_uid_cannot_upgrade_to_write)
{
	static const char *const extra[] = {"--socket-mode", "0666", NULL};
	struct td_client *c;
	struct td_tensor *t;
	struct td_error e = {0};
	char path[64];
	int fd;

	if (!root())
		cr_skip_test("needs root to act as a second uid");
	start(extra, 0, 0);
	c = cli();
	cr_assert_eq(put(c, "ro/t", 4096, 0), 0);
	as_nobody(upgrade_child, NULL);
	/* root may re-open it read-write, but the seals still stop writes */
	cr_assert_eq(td_client_get(c, "ro/t", &t, &e), 0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d",
		 td_tensor_plane_fd(t, 0));
	fd = open(path, O_RDWR | O_CLOEXEC);
	cr_assert(fd >= 0);
	cr_assert(write(fd, "x", 1) < 0 && errno == EPERM);
	close(fd);
	td_tensor_release(t);
	cr_assert_eq(verify(c, "ro/t"), 0);
	td_client_close(c);
	stop();
}

static void refused_child(void *arg)
{
	int fd = tdc_connect(arg);

	CK(fd == -EACCES);
}

Test(reliability, the_socket_mode_and_group_are_applied)
{
	static const char *const extra[] = {"--socket-mode", "0660",
					    "--socket-group", "0", NULL};
	struct stat st;

	start(extra, 0, 0);
	cr_assert_eq(stat(D.sock, &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0660);
	cr_assert_eq(st.st_gid, 0);
	if (root())
		as_nobody(refused_child, D.sock);
	stop();
}

/* ---- the policy parser ---- */

static int parse(const char *text, struct td__policy *pol, unsigned *line,
		 const char **why)
{
	return td__policy_parse(text, strlen(text), pol, line, why);
}

/* td__policy_covers: may a reader read every name a writer may write? */
static bool covers(const char *text, const struct td__cred *r,
		   const struct td__cred *w, bool w_all)
{
	struct td__policy pol;
	const char *why = NULL;
	unsigned line;
	bool yes;

	cr_assert_eq(parse(text, &pol, &line, &why), 0, "line %u: %s", line,
		     why);
	yes = td__policy_covers(&pol, r, w, w_all);
	td__policy_fini(&pol);
	return yes;
}

Test(reliability, a_reader_covers_a_writer_only_under_a_shorter_prefix)
{
	struct td__cred u1 = {1, 1, NULL, 0}, u2 = {2, 2, NULL, 0};

	cr_assert(covers("allow uid=1 rw cam/\n", &u1, &u1, false));
	cr_assert(covers("allow uid=1 r cam/\nallow uid=1 w cam/x/\n", &u1,
			 &u1, false));
	cr_assert(!covers("allow uid=1 r cam/x/\nallow uid=1 w cam/\n", &u1,
			  &u1, false));
	/* a write-only grant */
	cr_assert(!covers("allow uid=1 rw cam/\nallow uid=1 w priv/\n", &u1,
			  &u1, false));
	/* another uid's writes, and `any` counts for the writer */
	cr_assert(covers("allow uid=2 r cam/\nallow uid=1 w cam/\n", &u2,
			 &u1, false));
	cr_assert(!covers("allow uid=2 r cam/\nallow uid=1 w cam/\n"
			  "allow any w priv/\n",
			  &u2, &u1, false));
	/* a writer of every name (the daemon's uid): only `r *` covers */
	cr_assert(!covers("allow uid=2 r cam/\n", &u2, &u1, true));
	cr_assert(covers("allow uid=2 r *\n", &u2, &u1, true));
	/* a writer that may write nothing is covered by anyone */
	cr_assert(covers("allow uid=2 r cam/\n", &u2, &u1, false));
}

Test(reliability, the_policy_parser_reads_rules_quotas_and_comments)
{
	struct td__policy pol;
	const char *why = NULL;
	unsigned line;
	gid_t groups[1] = {44};
	struct td__cred u1000 = {1000, 1000, groups, 1};
	struct td__cred u7 = {7, 7, NULL, 0};

	cr_assert_eq(parse("# comment\n\n"
			   "allow uid=1000 rw cam/\r\n"
			   "  allow\tgid=44 r video/ # trailing\n"
			   "allow any r public/\n"
			   "allow uid=7 w *\n"
			   "quota uid=1000 1G\n"
			   "quota uid=7 4096",
			   &pol, &line, &why),
		     0, "line %u: %s", line, why);
	cr_assert_eq(pol.nrules, 4);
	cr_assert_eq(pol.nquotas, 2);
	cr_assert(td__policy_allows(&pol, &u1000, TD__PERM_READ |
						  TD__PERM_WRITE,
				    "cam/0", 5));
	cr_assert(!td__policy_allows(&pol, &u1000, TD__PERM_WRITE,
				     "video/0", 7));
	cr_assert(td__policy_allows(&pol, &u1000, TD__PERM_READ, "video/0",
				    7));
	cr_assert(td__policy_allows(&pol, &u7, TD__PERM_READ, "public/a", 8));
	cr_assert(!td__policy_allows(&pol, &u7, TD__PERM_READ, "cam/0", 5));
	cr_assert(td__policy_allows(&pol, &u7, TD__PERM_WRITE, "any/name",
				    8));
	cr_assert(td__policy_any(&pol, &u1000, TD__PERM_WRITE));
	cr_assert_eq(td__policy_quota(&pol, 1000, 5), 1ull << 30);
	cr_assert_eq(td__policy_quota(&pol, 7, 5), 4096);
	cr_assert_eq(td__policy_quota(&pol, 8, 5), 5);
	td__policy_fini(&pol);
	td__policy_fini(&pol); /* idempotent */
}

Test(reliability, the_policy_parser_reads_limits_and_the_dmabuf_permission)
{
	struct td__policy pol;
	const char *why = NULL;
	unsigned line;
	uint64_t v = 0;
	struct td__cred u1001 = {1001, 1001, NULL, 0};
	struct td__cred u7 = {7, 7, NULL, 0};

	cr_assert_eq(parse("allow uid=1001 rw cam/\n"
			   "allow uid=1001 dmabuf cam/gpu/\n"
			   "limit uid=7 conns 4\n"
			   "limit uid=7 fds 100   # planes too\n"
			   "limit uid=7 pinned 64M\n"
			   "limit uid=7 queued 1k\n"
			   "limit uid=1001 leases 0\n",
			   &pol, &line, &why),
		     0, "line %u: %s", line, why);
	cr_assert_eq(pol.nrules, 2);
	cr_assert_eq(pol.nlimits, 5);
	/* dmabuf is its own permission: rw does not grant it */
	cr_assert(td__policy_allows(&pol, &u1001, TD__PERM_DMABUF,
				    "cam/gpu/0", 9));
	cr_assert(!td__policy_allows(&pol, &u1001, TD__PERM_DMABUF,
				     "cam/0", 5));
	cr_assert(td__policy_allows(&pol, &u1001, TD__PERM_WRITE,
				    "cam/gpu/x", 9));
	cr_assert(!td__policy_allows(&pol, &u7, TD__PERM_DMABUF, "cam/gpu/0",
				     9));
	cr_assert(td__policy_limit(&pol, 7, TD__LIM_CONNS, &v) && v == 4);
	cr_assert(td__policy_limit(&pol, 7, TD__LIM_FDS, &v) && v == 100);
	cr_assert(td__policy_limit(&pol, 7, TD__LIM_PINNED, &v) &&
		  v == 64ull << 20);
	cr_assert(td__policy_limit(&pol, 7, TD__LIM_QUEUED, &v) && v == 1024);
	cr_assert(td__policy_limit(&pol, 1001, TD__LIM_LEASES, &v) && v == 0);
	cr_assert(!td__policy_limit(&pol, 7, TD__LIM_LEASES, &v));
	cr_assert(!td__policy_limit(&pol, 8, TD__LIM_CONNS, &v));
	cr_assert(!td__policy_limit(NULL, 7, TD__LIM_CONNS, &v));
	td__policy_fini(&pol);
}

Test(reliability, the_policy_parser_refuses_each_bad_line_naming_it)
{
	static const struct {
		const char *text;
		int rc;
		unsigned line;
		const char *why;
	} bad[] = {
		{"allow uid=1 rwx a/\n", -EINVAL, 1, "PERM"},
		{"\n\nallow uid=x r a/\n", -EINVAL, 3, "WHO"},
		{"allow uid=4294967295 r a/", -EINVAL, 1, "WHO"},
		{"allow uid=99999999999 r a/", -EINVAL, 1, "WHO"},
		{"allow uid= r a/", -EINVAL, 1, "WHO"},
		{"allow user=1 r a/", -EINVAL, 1, "WHO"},
		{"allow uid=1 r", -EINVAL, 1, "want"},
		{"allow uid=1 r a/ b c", -EINVAL, 1, "too many words"},
		{"allow uid=1 r ../x", -EINVAL, 1, "PREFIX"},
		{"allow uid=1 r /abs", -EINVAL, 1, "PREFIX"},
		{"allow uid=1 r a\x01b", -EINVAL, 1, "control"},
		{"deny uid=1 r a/", -EINVAL, 1, "keyword"},
		{"quota gid=1 1G", -EINVAL, 1, "per uid"},
		{"quota uid=1 1X", -EINVAL, 1, "BYTES"},
		{"quota uid=1 99999999999999999999", -EINVAL, 1, "BYTES"},
		{"quota uid=1 99999999999G", -EINVAL, 1, "BYTES"},
		{"quota uid=1 1G\nquota uid=1 2G", -EINVAL, 2, "second"},
		{"allow uid=1 rwdmabuf a/", -EINVAL, 1, "PERM"},
		{"limit uid=1 conns", -EINVAL, 1, "want: limit"},
		{"limit gid=1 conns 4", -EINVAL, 1, "per uid"},
		{"limit any fds 4", -EINVAL, 1, "per uid"},
		{"limit uid=1 bytes 4", -EINVAL, 1, "KEY must be"},
		{"limit uid=1 conns 4K", -EINVAL, 1, "a number"},
		{"limit uid=1 fds -1", -EINVAL, 1, "a number"},
		{"limit uid=1 pinned 1X", -EINVAL, 1, "N[K|M|G|T]"},
		{"limit uid=1 fds 1\nlimit uid=1 fds 2", -EINVAL, 2,
		 "second limit"},
	};
	struct td__policy pol;
	const char *why;
	unsigned line;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why = NULL;
		cr_assert_eq(parse(bad[i].text, &pol, &line, &why), bad[i].rc,
			     "case %zu", i);
		cr_assert_eq(line, bad[i].line, "case %zu: line %u", i, line);
		cr_assert(why && strstr(why, bad[i].why), "case %zu: %s", i,
			  why);
		cr_assert_null(pol.rules, "case %zu left rules behind", i);
	}
}

Test(reliability, the_policy_parser_bounds_lines_rules_and_size)
{
	struct td__policy pol;
	const char *why;
	unsigned line;
	size_t cap = TD__POLICY_MAX_BYTES + 2, n = 0;
	char *buf = malloc(cap);

	cr_assert(buf);
	/* one line over 1024 bytes */
	memset(buf, ' ', 2000);
	buf[2000] = 0;
	cr_assert_eq(parse(buf, &pol, &line, &why), -EOVERFLOW);
	/* one rule too many */
	for (int i = 0; i <= TD__POLICY_MAX_RULES; i++)
		n += (size_t)snprintf(buf + n, cap - n, "allow any r a%d/\n",
				      i);
	cr_assert_eq(parse(buf, &pol, &line, &why), -E2BIG);
	cr_assert_eq(line, TD__POLICY_MAX_RULES + 1);
	/* a file over the cap, refused before it is read */
	memset(buf, '#', cap);
	cr_assert_eq(td__policy_parse(buf, cap - 1, &pol, &line, &why),
		     -EFBIG);
	/* NUL inside a line */
	cr_assert_eq(td__policy_parse("allow any r a\0/", 15, &pol, &line,
				      &why),
		     -EINVAL);
	free(buf);
}

/* ---- rings: the same policy and the same memory accounting ---- */

static int ring_make(struct td_client *c, const char *name, uint64_t bytes,
		     struct td_ring **out, struct td_error *e)
{
	uint64_t shape[1] = {bytes};
	struct td_ring_desc d = {.dtype = TD_TENSOR_U8, .ndim = 1,
				 .shape = shape, .slot_count = 2};

	return td_ring_create(c, name, &d, out, e);
}

/*
 * A ring's slots too, when the ring ends (daemon/ring.c, ring_free) with
 * nobody mapping them: its producer, in a child, makes it and exits
 * without closing it (a producer that closes it first still maps the
 * slots when the daemon lets go, and frees them itself at its munmap).
 */
Test(reliability, a_big_rings_slots_are_freed_by_the_closer_thread)
{
	long t0;
	int fds0, st;
	pid_t pid;

	start(NULL, 0, 0);
	t0 = thread_ticks(D.pid, "td-closer");
	cr_assert_geq(t0, 0, "the daemon has no td-closer thread");
	fds0 = tdc_fd_count(D.pid);
	pid = tu_fork();
	if (pid == 0) {
		int rc;
		struct td_client *c = cli_try(&rc);
		struct td_ring *r;
		struct td_error e = {0};

		_exit(c && ring_make(c, "big/ring", 256u << 20, &r, &e) == 0
			      ? 0
			      : 1);
	}
	st = tu_wait_child(pid, TU_WAIT_S, "the ring's producer");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the producer failed");
	closer_freed(fds0, t0, "a ring's 512 MiB of slots");
	stop();
}

/* Bytes allocated to the daemon's memfd named name (the first found). */
static uint64_t daemon_memfd_bytes(const char *name)
{
	char dir[64], path[384], link[256];
	struct dirent *t;
	struct stat st;
	uint64_t bytes = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)D.pid);
	d = opendir(dir);
	cr_assert(d, "%s: %s", dir, strerror(errno));
	while ((t = readdir(d)) && !bytes) {
		ssize_t n;

		snprintf(path, sizeof(path), "%s/%s", dir, t->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = 0;
		if (strstr(link, name) && stat(path, &st) == 0)
			bytes = (uint64_t)st.st_blocks * 512;
	}
	closedir(d);
	return bytes;
}

/*
 * The producer reserves its ring's slots (TD_WIRE_RING_RESERVE): small
 * pages by fallocate on its descriptor, huge ones through its advised
 * mapping (MADV_POPULATE_WRITE); they are all allocated once
 * td_ring_create returns, as the daemon's descriptor of them shows. When
 * that fails (here seccomp filters answer ENOSPC to fallocate and ENOMEM
 * to MADV_POPULATE_WRITE), the create fails with the reason, nothing
 * stays open or mapped here, and the daemon ends the ring; with
 * $TENSORD_ALLOC_RESERVE=daemon the daemon reserves them.
 */
Test(reliability, a_producer_reserves_its_rings_slots_or_fails_cleanly)
{
	uint64_t shape[1] = {1u << 20};
	struct td_ring_desc huge = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = shape, .slot_count = 2,
				    .flags = TD_RING_HUGE_PAGES};
	struct td_client *c;
	struct td_ring *r;
	struct td_error e = {0};
	int fds, maps, dfds, rc;

	start(NULL, 0, 0);
	c = cli();
	cr_assert_eq(ring_make(c, "res/a", 1u << 20, &r, &e), 0, "%s",
		     e.reason);
	cr_assert_geq(daemon_memfd_bytes("tensord-ring-data"), 2u << 20);
	td_ring_close(r);
	fds = tu_fd_count();
	maps = tu_buf_map_count();
	dfds = tdc_fd_count(D.pid);
	rc = tu_deny_syscall(__NR_fallocate, ENOSPC);
	if (rc == 0)
		rc = tu_deny_syscall_arg(__NR_madvise, 2, MADV_POPULATE_WRITE,
					 ENOMEM);
	if (rc < 0) {
		td_client_close(c);
		stop();
		cr_skip_test("the kernel refuses seccomp filters: %s",
			     strerror(-rc));
	}
	rc = ring_make(c, "res/b", 1u << 20, &r, &e);
	cr_assert_eq(rc, -ENOSPC, "%d %s", rc, e.reason);
	cr_assert(strstr(e.reason, "reserve the ring's 2097152 bytes of "
				   "slots: No space left on device"),
		  "%s", e.reason);
	rc = td_ring_create(c, "res/c", &huge, &r, &e);
	/* hugetlbfs pages, where the machine has some, are the daemon's */
	if (rc == 0) {
		cr_assert_eq(td_ring_backing(r), TD_RING_BACKING_HUGETLB);
		td_ring_close(r);
	} else {
		cr_assert_eq(rc, -ENOMEM, "%d %s", rc, e.reason);
		cr_assert(strstr(e.reason, "Cannot allocate memory"), "%s",
			  e.reason);
	}
	cr_assert_eq(tu_fd_count(), fds);
	cr_assert_eq(tu_buf_map_count(), maps);
	cr_assert_eq(tdc_fd_settle(D.pid, dfds, 20000), dfds);
	td_client_close(c);
	cr_assert_eq(setenv("TENSORD_ALLOC_RESERVE", "daemon", 1), 0);
	c = cli();
	cr_assert_eq(ring_make(c, "res/b", 1u << 20, &r, &e), 0, "%s",
		     e.reason);
	td_ring_close(r);
	td_client_close(c);
	unsetenv("TENSORD_ALLOC_RESERVE");
	stop();
}

static void ring_policy_child(void *arg)
{
	struct td_client *c;
	struct td_ring *r;
	struct td_sub *sub;
	struct td_ring_stat st;
	struct td_error e = {0};
	int rc;

	(void)arg;
	c = cli_try(&rc);
	CK(c);
	CK(ring_make(c, "secret/ring", 4096, &r, &e) == -EACCES);
	CK(strstr(e.reason, "may not write"));
	CK(td_ring_subscribe(c, "secret/cam", 0, &sub, &e) == -EACCES);
	CK(strstr(e.reason, "may not read"));
	/* nor learn about it through RING_STAT */
	CK(td_client_ring_stat(c, "secret/cam", &st, &e) == -EACCES);
	CK(strstr(e.reason, "may not read"));
	CK(ring_make(c, "nobody/ring", 4096, &r, &e) == 0);
	CK(td_client_ring_stat(c, "nobody/ring", &st, &e) == 0);
	td_ring_close(r);
	td_client_close(c);
}

Test(reliability, the_policy_gates_ring_create_subscribe_and_stat)
{
	struct td_client *c;
	struct td_ring *r;
	struct td_error e = {0};

	if (!root())
		cr_skip_test("needs root to act as a second uid");
	start(with_policy("allow uid=65534 rw nobody/\n"), 0, 0);
	c = cli();
	cr_assert_eq(ring_make(c, "secret/cam", 4096, &r, &e), 0, "%s",
		     e.reason);
	as_nobody(ring_policy_child, NULL);
	td_ring_close(r);
	td_client_close(c);
	stop();
	unlink(policy_path);
}

Test(reliability, ring_memory_counts_against_max_bytes)
{
	static const char *const extra[] = {"--max-bytes", "16M", NULL};
	struct td_client *c;
	struct td_ring *r1, *r2;
	struct td_error e = {0};

	start(extra, 0, 0);
	c = cli();
	/* 2 slots of 6 MiB: 12 MiB plus the control pages fit in 16 MiB */
	cr_assert_eq(ring_make(c, "ring/a", 6 << 20, &r1, &e), 0, "%s",
		     e.reason);
	/* a second one does not, and nothing is evictable */
	cr_assert_eq(ring_make(c, "ring/b", 6 << 20, &r2, &e), -ENOSPC);
	cr_assert(strstr(e.reason, "--max-bytes"), "%s", e.reason);
	/* a plain ALLOC sees the ring's bytes as used too */
	cr_assert_eq(put(c, "t/x", 8 << 20, 0), -ENOSPC);
	/* closing the ring gives its bytes back */
	td_ring_close(r1);
	cr_assert_eq(ring_make(c, "ring/b", 6 << 20, &r2, &e), 0, "%s",
		     e.reason);
	td_ring_close(r2);
	td_client_close(c);
	stop();
}

Test(reliability, without_max_bytes_the_daemon_caps_at_half_of_ram)
{
	struct td_client *c;
	struct td_client_info info;
	struct td_alloc *a;
	struct td_error e = {0};
	uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) *
			(uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t huge = phys; /* more than the cap: refused before fallocate */

	start(NULL, 0, 0);
	c = cli();
	cr_assert_eq(td_client_info(c, &info), 0);
	cr_assert_eq(info.max_bytes, phys / 2);
	cr_assert_eq(td_client_alloc(c, 1, &huge, &a, &e), -ENOSPC);
	cr_assert(strstr(e.reason, "--max-bytes"), "%s", e.reason);
	td_client_close(c);
	stop();
}

/* ---- a log nobody reads ---- */

static int log_end = -1; /* the daemon's stderr at the next start */

static void stderr_to_log_end(void)
{
	if (dup2(log_end, 2) < 0)
		_exit(125);
}

/* Everything readable on fd now (non-blocking), appended to *buf. */
static void drain(int fd, char **buf, size_t *len)
{
	char chunk[65536];
	ssize_t n;

	while ((n = read(fd, chunk, sizeof(chunk))) > 0) {
		*buf = realloc(*buf, *len + (size_t)n + 1);
		cr_assert_not_null(*buf);
		memcpy(*buf + *len, chunk, (size_t)n);
		*len += (size_t)n;
		(*buf)[*len] = '\0';
	}
}

/*
 * The daemon's stderr a stream socket (journald's) or a pipe that stops
 * being read: once full, every log line waited, the event loop with it,
 * and the daemon answered nobody. Lines that do not fit are dropped and
 * counted now; the reader, back, finds whole lines, and a line saying how
 * many went.
 */
static void a_log_nobody_reads(bool sock)
{
	struct tu_daemon d;
	char *log = NULL;
	size_t len = 0;
	int sv[2], rd, st;
	pid_t pid;

	if (sock)
		cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
					sv),
			     0);
	else
		cr_assert_eq(pipe2(sv, O_CLOEXEC), 0);
	rd = sv[0];
	log_end = sv[1];
	tu_daemon_start_log(&d, "debug", NULL, NULL, stderr_to_log_end);
	close(sv[1]); /* the daemon's now: not ours to count at the stop */
	d.fds0--;
	cr_assert_eq(fcntl(rd, F_SETFL, O_NONBLOCK), 0);
	/* two debug lines per connection: MiBs, far past any buffer */
	pid = tu_fork();
	if (pid == 0) {
		for (int i = 0; i < 20000; i++) {
			struct td_client *c;

			if (td_client_connect(d.sock, &c, NULL) < 0)
				_exit(1);
			td_client_close(c);
		}
		_exit(0);
	}
	cr_assert(tu_reap_within(pid, TU_WAIT_S, &st),
		  "the daemon stopped answering while its log was full");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x", st);
	/* the reader is back: one more line brings the count with it */
	drain(rd, &log, &len);
	for (int i = 0; i < 100 && !(log && strstr(log, "lines dropped"));
	     i++) {
		struct td_client *c;

		cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
		td_client_close(c);
		tu_await_readable(rd, TU_WAIT_S, "the daemon's next log line");
		drain(rd, &log, &len);
	}
	cr_assert_not_null(log);
	cr_assert_not_null(strstr(log, " log lines dropped: stderr was not "
				       "read\n"),
			   "%.2000s", log);
	/* whole lines only, none cut */
	cr_assert_eq(log[len - 1], '\n');
	for (char *p = log; *p; p = strchr(p, '\n') + 1)
		cr_assert_eq(strncmp(p, "tensord: ", 9), 0, "%.200s", p);
	free(log);
	tu_daemon_stop(&d, false);
	close(rd);
}

Test(reliability, a_journal_socket_nobody_reads_does_not_stop_the_daemon)
{
	a_log_nobody_reads(true);
}

Test(reliability, a_log_pipe_nobody_reads_does_not_stop_the_daemon)
{
	a_log_nobody_reads(false);
}

static void close_std_fds(void)
{
	close(0);
	close(1);
	close(2);
}

/*
 * A daemon started with its standard fds closed (`<&- >&- 2>&-`, a
 * supervisor that closes them): the loop's signal pipe took fds 1 and 2,
 * every log line went into it, and SIGTERM then aborted the daemon
 * (status 134) instead of stopping it cleanly. tu_daemon_stop() asserts
 * the clean exit.
 */
Test(reliability, a_daemon_started_without_std_fds_stops_cleanly)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_error e = {0};

	tu_daemon_start_log(&d, "debug", NULL, NULL, close_std_fds);
	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	cr_assert_eq(put(c, "std/t", 4096, 0), 0);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}
