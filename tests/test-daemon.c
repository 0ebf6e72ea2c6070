/* SPDX-License-Identifier: MIT */
/*
 * tensord end to end over raw proto/wire messages (no client library):
 * each test starts its own daemon ($TD_TENSORD) on a socket in a tu_mkdtemp()
 * folder and stops it with SIGTERM, which must exit 0 and remove the
 * socket. Bad input must get its specific error reply and leave the daemon
 * serving, with its fd count back at the baseline.
 *
 * TD_TENSORD_VALGRIND=1 runs every daemon under valgrind (leaks and
 * errors turn the exit status non-zero, which the teardown checks).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "blob.h"
#include "os.h"
#include "bytes.h"
#include "scm.h"
#include "testutil.h"
#include "wire.h"
#include "wire-status.h"

#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

/* ---- daemon process ---- */

struct daemon {
	pid_t pid;
	/*
	 * The connection that proved readiness stays open until the stop:
	 * closing it would leave a hang-up in flight that the daemon handles
	 * in some later loop turn, moving fd baselines under the tests.
	 */
	int ready;
	char dir[64];
	char sock[96]; /* fits sun_path */
	char log[128];
};

static void nap_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

static int try_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	cr_assert(fd >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		return fd;
	close(fd);
	return -1;
}

/* The bound on waits for the daemon: longer under valgrind, which is
 * slow (TU_WAIT_S is for what takes well under a second). */
static int wait_s(void)
{
	return getenv("TD_TENSORD_VALGRIND") ? 4 * TU_WAIT_S : TU_WAIT_S;
}

static pid_t spawn(struct daemon *d, const char *const *extra)
{
	const char *bin = getenv("TD_TENSORD");
	const char *argv[24];
	int n = 0;
	pid_t pid;

	cr_assert(bin, "TD_TENSORD is not set (run through meson test)");
	if (getenv("TD_TENSORD_VALGRIND")) {
		argv[n++] = "valgrind";
		argv[n++] = "-q";
		argv[n++] = "--leak-check=full";
		argv[n++] = "--show-leak-kinds=all";
		argv[n++] = "--errors-for-leak-kinds=all";
		argv[n++] = "--error-exitcode=99";
		argv[n++] = "--track-fds=no";
	}
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = d->sock;
	argv[n++] = "--log-level";
	argv[n++] = "debug";
	for (int i = 0; extra && extra[i]; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	pid = tu_fork(); /* never outlives a crashed test */
	if (pid == 0) {
		int log = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		if (log >= 0)
			dup2(log, 2);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

static void daemon_start(struct daemon *d, const char *const *extra)
{
	int fd = -1;

	snprintf(d->dir, sizeof(d->dir), "/tmp/td-test-XXXXXX");
	cr_assert(tu_mkdtemp(d->dir));
	snprintf(d->sock, sizeof(d->sock), "%s/s.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/log", d->dir);
	d->pid = spawn(d, extra);
	/* readiness: retry until it accepts (bounded; valgrind is slow) */
	for (int i = 0; i < 6000 && fd < 0; i++) {
		int st;

		fd = try_connect(d->sock);
		if (fd >= 0)
			break;
		cr_assert_eq(waitpid(d->pid, &st, WNOHANG), 0,
			     "tensord exited during start-up");
		nap_ms(10);
	}
	cr_assert(fd >= 0, "tensord did not start listening");
	d->ready = fd;
}

/* SIGTERM: must exit 0 and remove its socket. Returns the exit status. */
static void daemon_stop(struct daemon *d)
{
	pid_t pid = d->pid;
	int st;
	char cmd[200];

	if (d->ready >= 0)
		close(d->ready);
	d->ready = -1;
	/* stopped already by the test body (teardown below) */
	if (pid <= 0)
		return;
	d->pid = 0;
	cr_assert_eq(kill(pid, SIGTERM), 0);
	/* bounded: a daemon that hangs on its way out fails the test */
	cr_assert(tu_reap_within(pid, wait_s(), &st),
		  "tensord did not exit within %d s of SIGTERM (killed; log "
		  "%s)",
		  wait_s(), d->log);
	cr_assert(WIFEXITED(st), "tensord died of signal %d",
		  WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	cr_assert_eq(WEXITSTATUS(st), 0, "tensord exit status %d (log %s)",
		     WEXITSTATUS(st), d->log);
	cr_assert(access(d->sock, F_OK) != 0 && errno == ENOENT,
		  "socket file left behind");
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
	cr_assert_eq(system(cmd), 0);
}

static int daemon_fd_count(const struct daemon *d)
{
	return tu_pid_fd_count(d->pid);
}

/*
 * valgrind (3.19) does not know pidfd_getfd: under it the daemon's probe
 * fails and every connection imports by SCM_RIGHTS. Tests of the pull path
 * are skipped there; the others send their fds.
 */
static bool pulls(void)
{
	return !getenv("TD_TENSORD_VALGRIND");
}

/* ---- raw messages ---- */

struct msg {
	struct td_wire_hdr h;
	uint8_t buf[TD_WIRE_MAX_MSG + 64];
	size_t n;
	const uint8_t *body;
	int fds[TD_WIRE_MAX_FDS + 4];
	unsigned nfds;
	char reason[TD_WIRE_MAX_REASON + 1];
};

static uint8_t txbuf[TD_WIRE_MAX_MSG * 2];

static void send_dgram(int sock, const void *buf, size_t len, const int *fds,
		       unsigned nfds)
{
	cr_assert_eq(td__scm_send(sock, buf, len, fds, nfds, 0), (ssize_t)len,
		     "sendmsg: %s", strerror(errno));
}

/* Header + body already at txbuf + 32 (body_len bytes). */
static void send_req(int sock, uint16_t op, uint64_t id, size_t body_len,
		     const int *fds, unsigned nfds)
{
	struct td_wire_hdr h = {
		.magic = TD_WIRE_MAGIC,
		.version = TD_WIRE_VERSION,
		.opcode = op,
		.fd_count = nfds,
		.request_id = id,
		.body_len = (uint32_t)body_len,
	};

	td_wire_hdr_encode(&h, txbuf);
	send_dgram(sock, txbuf, TD_WIRE_HDR_LEN + body_len, fds, nfds);
}

#define BODY (txbuf + TD_WIRE_HDR_LEN)
#define BODY_CAP (TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN)

/* 0 and *m, or -ECONNRESET at end of stream. Blocks, bounded. */
static int recv_msg(int sock, struct msg *m)
{
	struct td__scm_rx rx = {.fds = m->fds, .cap = TD_WIRE_MAX_FDS};
	ssize_t n;

	m->nfds = 0;
	m->reason[0] = 0;
	/* a reply or notice the daemon never sends fails the test */
	tu_await_readable(sock, wait_s(), "a message from tensord");
	n = td__scm_recv(sock, m->buf, sizeof(m->buf), 0, &rx);
	cr_assert(n >= 0, "recvmsg: %s", strerror((int)-n));
	cr_assert(!rx.foreign && !rx.dropped);
	m->nfds = rx.nfds;
	if (n == 0)
		return -ECONNRESET;
	cr_assert_eq(rx.msg_flags & (MSG_TRUNC | MSG_CTRUNC), 0);
	m->n = (size_t)n;
	cr_assert_eq(td_wire_hdr_decode(m->buf, m->n, &m->h, NULL), 0,
		     "daemon sent a bad header");
	cr_assert_eq(m->h.fd_count, m->nfds);
	m->body = m->buf + TD_WIRE_HDR_LEN;
	if (m->h.status < 0) {
		struct td_wire_error e;

		cr_assert_eq(td_wire_error_decode(m->body, m->h.body_len, &e,
						  NULL),
			     0);
		cr_assert_gt(e.reason.len, 0, "a failure carries a reason");
		memcpy(m->reason, e.reason.ptr, e.reason.len);
		m->reason[e.reason.len] = 0;
	}
	return 0;
}

static void close_msg_fds(struct msg *m)
{
	for (unsigned i = 0; i < m->nfds; i++)
		close(m->fds[i]);
	m->nfds = 0;
}

static struct msg *M; /* one big reply buffer per test process */

/* Receive the reply to (op, id); skips nothing: the next message must be it. */
static struct msg *reply(int sock, uint16_t op, uint64_t id)
{
	cr_assert_eq(recv_msg(sock, M), 0, "connection closed");
	cr_assert(M->h.flags & TD_WIRE_F_REPLY);
	cr_assert_eq(M->h.opcode, op, "opcode %u, want %u", M->h.opcode, op);
	cr_assert_eq(M->h.request_id, id);
	return M;
}

/* Send the request whose body is in BODY and take its reply, a success. */
static struct msg *call_ok(int sock, uint16_t op, uint64_t id, int64_t n)
{
	struct msg *m;

	cr_assert_gt(n, 0, "encode");
	send_req(sock, op, id, (size_t)n, NULL, 0);
	m = reply(sock, op, id);
	cr_assert_eq(m->h.status, 0, "%s", m->reason);
	return m;
}

static void expect_error(int sock, uint16_t op, uint64_t id, int status,
			 const char *needle)
{
	struct msg *m = reply(sock, op, id);

	cr_assert_eq(m->h.status, status, "status %d (%s), want %d",
		     m->h.status, m->reason, status);
	cr_assert_eq(m->nfds, 0);
	if (needle)
		cr_assert(strstr(m->reason, needle), "reason '%s' lacks '%s'",
			  m->reason, needle);
}

static void expect_hangup(int sock)
{
	cr_assert_eq(recv_msg(sock, M), -ECONNRESET, "peer not dropped");
	close_msg_fds(M);
}

static int conn(const struct daemon *d)
{
	int fd = try_connect(d->sock);

	cr_assert(fd >= 0);
	return fd;
}

/* HELLO naming these feature bits (0: none, a version-1 body). */
static struct td_wire_hello_rep hello_feat(int sock, uint32_t pref,
					   int probe, uint32_t features,
					   int *daemon_pidfd)
{
	struct td_wire_hello_req r = {pref, probe, {"test-daemon", 11},
				      features};
	struct td_wire_hello_rep rep;
	int64_t n = td_wire_hello_req_encode(&r, BODY, BODY_CAP);
	struct msg *m;

	send_req(sock, TD_OP_HELLO, 1, (size_t)n, NULL, 0);
	m = reply(sock, TD_OP_HELLO, 1);
	cr_assert_eq(m->h.status, 0, "HELLO: %s", m->reason);
	cr_assert_eq(td_wire_hello_rep_decode(m->body, m->h.body_len, &rep,
					      NULL),
		     0);
	cr_assert_eq(m->nfds, rep.out_pidfd);
	if (daemon_pidfd)
		*daemon_pidfd = m->nfds ? m->fds[0] : -1;
	else
		close_msg_fds(m);
	return rep;
}

static struct td_wire_hello_rep hello_pref(int sock, uint32_t pref,
					   int probe, int *daemon_pidfd)
{
	return hello_feat(sock, pref, probe, 0, daemon_pidfd);
}

/* A connection after HELLO (import as the daemon decides). */
static int conn_hello(const struct daemon *d, uint32_t pref)
{
	int sock = conn(d);

	hello_pref(sock, pref, sock, NULL);
	return sock;
}

/* ---- tensors ---- */

/* A memfd of len bytes filled with byte, sealed against shrinking. */
static int shm_plane(size_t len, uint8_t byte, bool seal)
{
	int fd = memfd_create("test-plane", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *p;

	cr_assert(fd >= 0);
	cr_assert_eq(ftruncate(fd, (off_t)len), 0);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert(p != MAP_FAILED);
	memset(p, byte, len);
	munmap(p, len);
	if (seal)
		cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
	return fd;
}

/* A reference-mode u8 [len] blob with one plane (fd index 0). */
static size_t ref_blob(uint8_t *out, size_t cap, uint64_t len, uint64_t off,
		       uint32_t pid, int32_t fence)
{
	uint64_t shape[1] = {len};
	int64_t strides[1] = {1};
	struct td_blob_plane pl = {.handle = 0, .offset = off, .stride = len,
				   .size = len, .used = len};
	struct td_blob_desc d = {
		.storage_kind = TD_STORAGE_SHM, .pid = pid, .fence_fd = fence,
		.dtype = TD_DTYPE_U8, .quant_axis = TD_QUANT_NONE, .ndim = 1,
		.shape = shape, .strides_len = 1, .strides = strides,
		.plane_count = 1, .planes = &pl,
	};
	int64_t n = td_blob_encode(&d, out, cap, NULL);

	cr_assert(n > 0);
	return (size_t)n;
}

static uint8_t blobbuf[TD_WIRE_MAX_BLOB];

/*
 * PUBLISH name with a blob (blob_len bytes of blobbuf) and fd table
 * table[0..n). scm: attach them; otherwise the daemon pulls by number.
 */
static void publish_raw(int sock, uint64_t id, const char *name,
			size_t blob_len, const int *table, unsigned n,
			bool scm, uint64_t alloc_id)
{
	struct td_wire_publish_req r = {
		.name = {name, (uint16_t)strlen(name)},
		.alloc_id = alloc_id,
		.meta = {(const uint8_t *)"meta", 4},
		.blob = {blobbuf, (uint32_t)blob_len},
		.fd_count = n,
	};
	int64_t len;

	if (!pulls())
		scm = true;
	for (unsigned i = 0; i < n; i++)
		r.fds[i] = table[i];
	len = td_wire_publish_req_encode(&r, BODY, BODY_CAP);
	cr_assert(len > 0);
	send_req(sock, TD_OP_PUBLISH, id, (size_t)len, table, scm ? n : 0);
}

/* Publish a fresh len-byte memfd full of byte; returns the version. */
static uint64_t publish_bytes(int sock, const char *name, size_t len,
			      uint8_t byte, bool scm)
{
	int fd = shm_plane(len, byte, true);
	size_t bl = ref_blob(blobbuf, sizeof(blobbuf), len, 0,
			     (uint32_t)getpid(), -1);
	struct td_wire_publish_rep rep;
	struct msg *m;

	publish_raw(sock, 7, name, bl, &fd, 1, scm, 0);
	m = reply(sock, TD_OP_PUBLISH, 7);
	cr_assert_eq(m->h.status, 0, "PUBLISH: %s", m->reason);
	cr_assert_eq(td_wire_publish_rep_decode(m->body, m->h.body_len, &rep,
						NULL),
		     0);
	close(fd);
	return rep.version;
}

static void get_req(int sock, uint64_t id, const char *name, uint32_t mode,
		    uint64_t version, uint32_t timeout_ms, uint32_t flags)
{
	struct td_wire_get_req r = {{name, (uint16_t)strlen(name)}, mode, flags,
				    version, timeout_ms, 0, {0}};
	int64_t n = td_wire_get_req_encode(&r, BODY, BODY_CAP);

	send_req(sock, TD_OP_GET, id, (size_t)n, NULL, 0);
}

static void name_req(int sock, uint16_t op, uint64_t id, const char *name,
		     size_t len)
{
	struct td_wire_wr wr;

	td_wire_wr_init(&wr, BODY, BODY_CAP);
	td_wire_wr_str(&wr, name, len);
	send_req(sock, op, id, wr.off, NULL, 0);
}

/* ---- fixture ---- */

static struct daemon D;

static void setup(void)
{
	M = malloc(sizeof(*M));
	cr_assert(M);
	daemon_start(&D, NULL);
}

static void setup_scm(void)
{
	static const char *const extra[] = {"--import", "scm", NULL};

	M = malloc(sizeof(*M));
	cr_assert(M);
	daemon_start(&D, extra);
}

static void setup_quota(void)
{
	/* two 4 KiB versions and their 4 bytes of metadata ("meta") each */
	static const char *const extra[] = {"--max-bytes", "8200", NULL};

	M = malloc(sizeof(*M));
	cr_assert(M);
	daemon_start(&D, extra);
}

static void teardown(void)
{
	daemon_stop(&D);
	free(M);
	M = NULL;
}

TestSuite(daemon, .timeout = 120);

/*
 * Every test runs against its own daemon, stopped and checked (a clean
 * exit, no sanitizer report, the socket file gone) at the end of its
 * body: criterion does not count asserts that fail in a .fini, which
 * only cleans up after a body that failed before its end.
 */
#define DTest(name)                                                           \
	static void name##_body(void);                                        \
	Test(daemon, name, .init = setup, .fini = teardown)                   \
	{                                                                     \
		name##_body();                                                \
		teardown();                                                   \
	}                                                                     \
	static void name##_body(void)

/* ---- HELLO ---- */

DTest(hello_negotiates_pidfd_when_the_probe_succeeds)
{
	int sock = conn(&D), pidfd;
	struct td_wire_hello_rep r = hello_pref(sock, TD_IMPORT_AUTO, sock,
						&pidfd);
	char path[64], link[64] = "";
	int pulled;

	if (!pulls()) {
		cr_assert_eq(r.import_in, TD_IMPORT_SCM, "probe fallback");
		close(pidfd);
		close(sock);
		return;
	}
	cr_assert_eq(r.import_in, TD_IMPORT_PIDFD);
	cr_assert_eq(r.daemon_pid, (uint32_t)D.pid);
	cr_assert_eq(r.out_pidfd, 1);
	cr_assert_eq(r.max_msg, TD_WIRE_MAX_MSG);
	cr_assert_eq(r.max_fds, TD_WIRE_MAX_FDS);
	cr_assert(pidfd >= 0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", pidfd);
	cr_assert(readlink(path, link, sizeof(link) - 1) > 0);
	cr_assert(strstr(link, "pidfd"), "attached fd is %s", link);
	/* the probe fd the daemon names can really be pulled */
	cr_assert_geq(r.probe_fd, 0);
	pulled = (int)syscall(SYS_pidfd_getfd, pidfd, r.probe_fd, 0);
	cr_assert(pulled >= 0, "pidfd_getfd: %s", strerror(errno));
	close(pulled);
	close(pidfd);
	close(sock);
}

DTest(hello_with_scm_preference_skips_the_probe)
{
	int sock = conn(&D);
	/* an invalid probe fd proves no probe happened */
	struct td_wire_hello_rep r = hello_pref(sock, TD_IMPORT_SCM, -1, NULL);

	cr_assert_eq(r.import_in, TD_IMPORT_SCM);
	close(sock);
}

DTest(hello_forced_pidfd_with_a_bad_probe_is_eperm)
{
	int sock = conn(&D);
	struct td_wire_hello_req r = {TD_IMPORT_PIDFD, 987, {"t", 1}, 0};
	int64_t n = td_wire_hello_req_encode(&r, BODY, BODY_CAP);

	send_req(sock, TD_OP_HELLO, 5, (size_t)n, NULL, 0);
	expect_error(sock, TD_OP_HELLO, 5, -EPERM, "pidfd_getfd");
	/* still usable: a proper HELLO goes through */
	hello_pref(sock, TD_IMPORT_AUTO, sock, NULL);
	close(sock);
}

/*
 * A HELLO of every client before feature bits (no features word) gets the
 * reply it always got: no word after ident, so its decoder, which refuses
 * trailing bytes, still reads it. One that sends the word gets the
 * daemon's bits.
 */
DTest(hello_without_feature_bits_gets_the_version_1_reply)
{
	int sock = conn(&D);
	struct td_wire_hello_req q = {TD_IMPORT_SCM, -1, {"v1", 2}, 0};
	struct td_wire_hello_rep r;
	int64_t n = td_wire_hello_req_encode(&q, BODY, BODY_CAP);
	struct msg *m;
	size_t v1_len;

	cr_assert_eq(n, 4 + 4 + 2 + 2, "no features word sent");
	send_req(sock, TD_OP_HELLO, 1, (size_t)n, NULL, 0);
	m = reply(sock, TD_OP_HELLO, 1);
	cr_assert_eq(m->h.status, 0, "HELLO: %s", m->reason);
	cr_assert_eq(td_wire_hello_rep_decode(m->body, m->h.body_len, &r,
					      NULL),
		     0);
	cr_assert_eq(r.features, 0);
	v1_len = 4 * 9 + 8 + 2 + r.ident.len;
	cr_assert_eq(m->h.body_len, v1_len, "nothing after ident");
	close_msg_fds(m);
	close(sock);

	sock = conn(&D);
	q.features = TD_WIRE_FEAT_GET_HELD | 0x40000000u; /* one unknown */
	n = td_wire_hello_req_encode(&q, BODY, BODY_CAP);
	send_req(sock, TD_OP_HELLO, 2, (size_t)n, NULL, 0);
	m = reply(sock, TD_OP_HELLO, 2);
	cr_assert_eq(m->h.status, 0, "HELLO: %s", m->reason);
	cr_assert_eq(td_wire_hello_rep_decode(m->body, m->h.body_len, &r,
					      NULL),
		     0);
	cr_assert_eq(m->h.body_len, v1_len + 4);
	cr_assert_eq(r.features,
		     TD_WIRE_FEAT_CAT_KINDS | TD_WIRE_FEAT_CAT_RECYCLE |
			     TD_WIRE_FEAT_ALLOC_RECYCLE |
			     TD_WIRE_FEAT_GET_HELD | TD_WIRE_FEAT_STATUS |
			     TD_WIRE_FEAT_RING_WAKE | TD_WIRE_FEAT_PUB_LOAN |
			     TD_WIRE_FEAT_RELEASE_QUIET |
			     TD_WIRE_FEAT_DELETE_IF | TD_WIRE_FEAT_FOLLOW |
			     TD_WIRE_FEAT_FOLLOW_SPARE |
			     TD_WIRE_FEAT_WAKE_ROWS | TD_WIRE_FEAT_ROW_OWNER |
			     TD_WIRE_FEAT_REWRITE | TD_WIRE_FEAT_RESERVE |
			     TD_WIRE_FEAT_GET_CROWD | TD_WIRE_FEAT_ALLOC_NAME |
			     TD_WIRE_FEAT_ALLOC_FREE | TD_WIRE_FEAT_STAGE |
			     TD_WIRE_FEAT_STAGE_TAKEBACK |
			     TD_WIRE_FEAT_SUB_WAIT | TD_WIRE_FEAT_FENCE_OWN |
			     TD_WIRE_FEAT_STAGE_SLOT |
			     TD_WIRE_FEAT_STAGE_WORD |
			     TD_WIRE_FEAT_STATUS_RESERVE | TD_WIRE_FEAT_MANY |
			     TD_WIRE_FEAT_PUB_IF | TD_WIRE_FEAT_MANY_WAIT |
			     TD_WIRE_FEAT_STATUS_PINNED |
			     TD_WIRE_FEAT_FOLLOW_END);
	close_msg_fds(m);
	close(sock);
}

DTest(hello_auto_without_a_probe_falls_back_to_scm)
{
	int sock = conn(&D);
	struct td_wire_hello_rep r = hello_pref(sock, TD_IMPORT_AUTO, 987,
						NULL);

	cr_assert_eq(r.import_in, TD_IMPORT_SCM);
	close(sock);
}

Test(daemon, daemon_forced_scm_sends_no_pidfd, .init = setup_scm,
     .fini = teardown)
{
	int sock;
	struct td_wire_hello_rep r;

	sock = conn(&D);
	r = hello_pref(sock, TD_IMPORT_AUTO, sock, NULL);
	cr_assert_eq(r.import_in, TD_IMPORT_SCM);
	cr_assert_eq(r.out_pidfd, 0);
	cr_assert_eq(r.probe_fd, -1);
	close(sock);
	teardown(); /* checked here: criterion ignores a .fini's asserts */
}

DTest(requests_before_hello_are_eproto)
{
	int sock = conn(&D);

	name_req(sock, TD_OP_STAT, 3, "a", 1);
	expect_error(sock, TD_OP_STAT, 3, -EPROTO, "HELLO");
	close(sock);
}

/* ---- framing ---- */

/* The daemon still answers a fresh connection. */
static void assert_serving(void)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);

	name_req(sock, TD_OP_STAT, 77, "nothing/here", 12);
	expect_error(sock, TD_OP_STAT, 77, -ENOENT, "no tensor");
	close(sock);
}

DTest(truncated_datagram_gets_enodata_and_the_connection_lives)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);
	uint8_t b[31];

	memset(b, 0, sizeof(b));
	td_wire_hdr_encode(&(struct td_wire_hdr){.magic = TD_WIRE_MAGIC,
						 .version = 1,
						 .opcode = TD_OP_STAT,
						 .request_id = 42},
			   txbuf);
	memcpy(b, txbuf, sizeof(b));
	send_dgram(sock, b, sizeof(b), NULL, 0);
	expect_error(sock, TD_OP_STAT, 42, -ENODATA, "shorter");
	name_req(sock, TD_OP_STAT, 43, "x", 1);
	expect_error(sock, TD_OP_STAT, 43, -ENOENT, NULL);
	close(sock);
	assert_serving();
}

DTest(oversize_datagram_gets_emsgsize_and_the_peer_is_dropped)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);
	int sz = 4 * TD_WIRE_MAX_MSG;

	cr_assert_eq(setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz)),
		     0);
	memset(BODY, 0, TD_WIRE_MAX_MSG + 1 - TD_WIRE_HDR_LEN);
	send_req(sock, TD_OP_STAT, 9, TD_WIRE_MAX_MSG + 1 - TD_WIRE_HDR_LEN,
		 NULL, 0);
	expect_error(sock, TD_OP_STAT, 9, -EMSGSIZE, "larger");
	expect_hangup(sock);
	close(sock);
	assert_serving();
}

static void raw_header_case(void (*edit)(struct td_wire_hdr *), int want,
			    const char *needle)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);
	struct td_wire_hdr h = {
		.magic = TD_WIRE_MAGIC, .version = TD_WIRE_VERSION,
		.opcode = TD_OP_STAT, .request_id = 11, .body_len = 3,
	};

	edit(&h);
	td_wire_hdr_encode(&h, txbuf);
	td__put_le16(txbuf + TD_WIRE_HDR_LEN, 1);
	txbuf[TD_WIRE_HDR_LEN + 2] = 'a';
	send_dgram(sock, txbuf, TD_WIRE_HDR_LEN + 3, NULL, 0);
	expect_error(sock, h.opcode, 11, want, needle);
	/* the same connection goes on */
	name_req(sock, TD_OP_STAT, 12, "a", 1);
	expect_error(sock, TD_OP_STAT, 12, -ENOENT, NULL);
	close(sock);
	assert_serving();
}

static void op_99(struct td_wire_hdr *h)
{
	h->opcode = 99;
}
static void version_2(struct td_wire_hdr *h)
{
	h->version = 2;
}
static void magic_bad(struct td_wire_hdr *h)
{
	h->magic ^= 0x100;
}
static void body_len_off(struct td_wire_hdr *h)
{
	h->body_len = 4;
}
static void reply_flag(struct td_wire_hdr *h)
{
	h->flags = TD_WIRE_F_REPLY;
}

DTest(unknown_opcode_is_eopnotsupp)
{
	raw_header_case(op_99, -EOPNOTSUPP, "unknown opcode 99");
}

DTest(wrong_version_is_eprotonosupport)
{
	raw_header_case(version_2, -EPROTONOSUPPORT, "version");
}

DTest(bad_magic_is_ebadmsg)
{
	raw_header_case(magic_bad, -EBADMSG, "magic");
}

DTest(body_len_mismatch_is_ebadmsg)
{
	raw_header_case(body_len_off, -EBADMSG, "body_len");
}

DTest(requests_with_reply_flags_are_ebadmsg)
{
	raw_header_case(reply_flag, -EBADMSG, "flags");
}

DTest(fd_count_mismatch_drops_the_peer_and_closes_the_fds)
{
	int keep = conn_hello(&D, TD_IMPORT_AUTO);
	int base = daemon_fd_count(&D), mine = tu_fd_count();
	int sock = conn_hello(&D, TD_IMPORT_SCM);
	int fd = shm_plane(64, 1, true);
	struct td_wire_hdr h = {
		.magic = TD_WIRE_MAGIC, .version = TD_WIRE_VERSION,
		.opcode = TD_OP_STAT, .request_id = 13, .fd_count = 2,
		.body_len = 3,
	};

	td_wire_hdr_encode(&h, txbuf);
	td__put_le16(txbuf + TD_WIRE_HDR_LEN, 1);
	txbuf[TD_WIRE_HDR_LEN + 2] = 'a';
	send_dgram(sock, txbuf, TD_WIRE_HDR_LEN + 3, &fd, 1);
	expect_error(sock, TD_OP_STAT, 13, -EPROTO, "fd_count");
	expect_hangup(sock);
	close(sock);
	close(fd);
	/* the hang-up is handled in some later loop turn: poll with requests */
	for (int i = 0; i < 2000 && daemon_fd_count(&D) != base; i++) {
		name_req(keep, TD_OP_STAT, 14, "a", 1);
		expect_error(keep, TD_OP_STAT, 14, -ENOENT, NULL);
	}
	cr_assert_eq(daemon_fd_count(&D), base);
	cr_assert_eq(tu_fd_count(), mine);
	close(keep);
}

DTest(more_fds_than_the_cap_drop_the_peer)
{
	int keep = conn_hello(&D, TD_IMPORT_AUTO);
	int base = daemon_fd_count(&D), mine = tu_fd_count();
	int sock = conn_hello(&D, TD_IMPORT_SCM);
	int fds[TD_WIRE_MAX_FDS + 1];
	struct td_wire_hdr h = {
		.magic = TD_WIRE_MAGIC, .version = TD_WIRE_VERSION,
		.opcode = TD_OP_PUBLISH, .request_id = 15,
		.fd_count = TD_WIRE_MAX_FDS + 1,
	};

	for (int i = 0; i <= TD_WIRE_MAX_FDS; i++)
		fds[i] = eventfd(0, EFD_CLOEXEC);
	td_wire_hdr_encode(&h, txbuf);
	send_dgram(sock, txbuf, TD_WIRE_HDR_LEN, fds, TD_WIRE_MAX_FDS + 1);
	expect_error(sock, 0, 0, -EPROTO, "truncated");
	expect_hangup(sock);
	close(sock);
	for (int i = 0; i <= TD_WIRE_MAX_FDS; i++)
		close(fds[i]);
	for (int i = 0; i < 2000 && daemon_fd_count(&D) != base; i++) {
		name_req(keep, TD_OP_STAT, 16, "a", 1);
		expect_error(keep, TD_OP_STAT, 16, -ENOENT, NULL);
	}
	cr_assert_eq(daemon_fd_count(&D), base);
	cr_assert_eq(tu_fd_count(), mine);
	close(keep);
}

/* ---- PUBLISH refusals ---- */

DTest(every_negative_blob_vector_is_refused_naming_its_error)
{
	static const struct {
		const char *file;
		const char *kind;
	} v[] = {
		{"n01_truncated_71_bytes.bin", "TRUNCATED"},
		{"n02_short_read_size_exceeds_buffer.bin", "TRUNCATED"},
		{"n03_required_mask_bit63.bin", "UNSUPPORTED_REQUIREMENT"},
		{"n04_reserved_word_nonzero.bin", "MALFORMED"},
		{"n05_size_below_header.bin", "FORGED_LENGTH"},
		{"n06_strides_len_partial.bin", "FORGED_LENGTH"},
		{"n07_ndim_huge.bin", "FORGED_LENGTH"},
		{"n08_strings_bytes_unpadded.bin", "MALFORMED"},
		{"n09_plane_count_exceeds_planes_bytes.bin", "FORGED_LENGTH"},
		{"n10_planes_bytes_past_size.bin", "FORGED_LENGTH"},
		{"n11_format_invalid_utf8.bin", "INVALID_UTF8"},
		{"n12_format_length_forged.bin", "FORGED_LENGTH"},
		{"n13_plane_data_len_forged.bin", "FORGED_LENGTH"},
		{"n14_plane_handle_bytes_len_forged.bin", "FORGED_LENGTH"},
		{"n15_inline_size_mismatch.bin", "INVALID_ARGUMENT"},
		{"n16_inline_modifier_nonzero.bin", "INVALID_ARGUMENT"},
		{"n17_mixed_transport_modes.bin", "INVALID_ARGUMENT"},
		{"n18_reference_plane_with_data.bin", "INVALID_ARGUMENT"},
	};
	int sock = conn_hello(&D, TD_IMPORT_AUTO);

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		char rel[128], want[64];
		size_t len;
		uint8_t *b;
		int kind = -1;

		snprintf(rel, sizeof(rel), "blob/negative/%s", v[i].file);
		b = tu_read_file(tu_data_path(rel), &len);
		cr_assert(len <= sizeof(blobbuf));
		memcpy(blobbuf, b, len);
		free(b);
		publish_raw(sock, 100 + i, "neg", len, NULL, 0, false, 0);
		for (int k = TD_ERR_TRUNCATED; k <= TD_ERR_IO; k++)
			if (!strcmp(td_err_kind_name(k), v[i].kind))
				kind = k;
		snprintf(want, sizeof(want), "blob: %s", v[i].kind);
		expect_error(sock, TD_OP_PUBLISH, 100 + i,
			     td_err_kind_errno(kind), want);
	}
	close(sock);
	assert_serving();
}

/* PUBLISH "bad" with plane fd (SCM or pidfd), expecting (status, needle). */
static void publish_refused(int sock, bool scm, int fd, size_t blob_len,
			    int status, const char *needle)
{
	publish_raw(sock, 21, "bad", blob_len, &fd, 1, scm, 0);
	expect_error(sock, TD_OP_PUBLISH, 21, status, needle);
}

DTest(non_shared_memory_plane_fds_are_refused_and_closed)
{
	int scm = conn_hello(&D, TD_IMPORT_SCM);
	int pull = conn_hello(&D, TD_IMPORT_AUTO);
	int base = daemon_fd_count(&D), mine = tu_fd_count();
	size_t bl = ref_blob(blobbuf, sizeof(blobbuf), 64, 0,
			     (uint32_t)getpid(), -1);
	int p[2], sp[2], reg;
	char path[160];

	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	snprintf(path, sizeof(path), "%s/regular", D.dir);
	reg = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	cr_assert(reg >= 0);
	cr_assert_eq(ftruncate(reg, 4096), 0);
	for (int k = 0; k < 2; k++) {
		int s = k ? pull : scm;

		publish_refused(s, !k, p[0], bl, -EINVAL, "pipe");
		publish_refused(s, !k, sp[0], bl, -EINVAL, "socket");
		publish_refused(s, !k, reg, bl, -EINVAL, "regular file");
	}
	/* an fd number the producer does not have */
	if (pulls())
		publish_refused(pull, false, 999, bl, -EBADF, "pidfd_getfd");
	/* a socket or a file is closed by td-closer-peer (its close may
	 * wait: SO_LINGER, a FUSE FLUSH), not by the loop: bounded wait */
	for (int i = 0; i < 2000 && daemon_fd_count(&D) != base; i++)
		usleep(1000);
	cr_assert_eq(daemon_fd_count(&D), base, "refused fds were kept");
	close(p[0]);
	close(p[1]);
	close(sp[0]);
	close(sp[1]);
	close(reg);
	cr_assert_eq(tu_fd_count(), mine);
	close(scm);
	close(pull);
	assert_serving();
}

DTest(unsealed_memfd_is_refused)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);
	int base = daemon_fd_count(&D);
	int fd = shm_plane(64, 1, false);
	size_t bl = ref_blob(blobbuf, sizeof(blobbuf), 64, 0,
			     (uint32_t)getpid(), -1);

	publish_refused(sock, true, fd, bl, -EINVAL, "F_SEAL_SHRINK");
	publish_refused(sock, false, fd, bl, -EINVAL, "F_SEAL_SHRINK");
	cr_assert_eq(daemon_fd_count(&D), base, "daemon fds %d, base %d",
		     daemon_fd_count(&D), base);
	close(fd);
	close(sock);
}

DTest(plane_past_the_end_of_its_buffer_is_refused)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);
	int base = daemon_fd_count(&D);
	int fd = shm_plane(64, 1, true);
	size_t bl = ref_blob(blobbuf, sizeof(blobbuf), 64, 8,
			     (uint32_t)getpid(), -1);

	publish_refused(sock, true, fd, bl, -EINVAL, "past the end");
	bl = ref_blob(blobbuf, sizeof(blobbuf), 65, 0, (uint32_t)getpid(), -1);
	publish_refused(sock, false, fd, bl, -EINVAL, "past the end");
	cr_assert_eq(daemon_fd_count(&D), base, "daemon fds %d, base %d",
		     daemon_fd_count(&D), base);
	close(fd);
	close(sock);
}

DTest(blob_pid_of_another_process_is_eperm)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);
	int base = daemon_fd_count(&D);
	int fd = shm_plane(64, 1, true);
	size_t bl = ref_blob(blobbuf, sizeof(blobbuf), 64, 0, 1, -1);

	publish_refused(sock, true, fd, bl, -EPERM, "pid");
	publish_refused(sock, false, fd, bl, -EPERM, "pid");
	cr_assert_eq(daemon_fd_count(&D), base, "daemon fds %d, base %d",
		     daemon_fd_count(&D), base);
	close(fd);
	close(sock);
}

DTest(inline_blobs_are_refused)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);
	size_t len;
	uint8_t *b = tu_read_file(tu_data_path("blob/v1_inline_f32_2x3.bin"),
				  &len);

	memcpy(blobbuf, b, len);
	free(b);
	publish_raw(sock, 22, "inl", len, NULL, 0, false, 0);
	expect_error(sock, TD_OP_PUBLISH, 22, -EINVAL, "reference mode");
	close(sock);
}

DTest(fence_must_be_an_eventfd)
{
	int sock = conn_hello(&D, TD_IMPORT_SCM);
	int base = daemon_fd_count(&D);
	int plane = shm_plane(64, 3, true), p[2], tab[2];
	size_t bl = ref_blob(blobbuf, sizeof(blobbuf), 64, 0,
			     (uint32_t)getpid(), 1);
	struct msg *m;

	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	tab[0] = plane;
	tab[1] = p[0];
	publish_raw(sock, 23, "fenced", bl, tab, 2, true, 0);
	expect_error(sock, TD_OP_PUBLISH, 23, -EINVAL, "eventfd");
	cr_assert_eq(daemon_fd_count(&D), base);
	tab[1] = eventfd(0, EFD_CLOEXEC);
	publish_raw(sock, 24, "fenced", bl, tab, 2, true, 0);
	m = reply(sock, TD_OP_PUBLISH, 24);
	cr_assert_eq(m->h.status, 0, "%s", m->reason);
	close(tab[1]);
	close(p[0]);
	close(p[1]);
	close(plane);
	close(sock);
}

DTest(bad_names_get_specific_errors)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);
	char big[256];

	memset(big, 'n', sizeof(big));
	name_req(sock, TD_OP_STAT, 31, "", 0);
	expect_error(sock, TD_OP_STAT, 31, -EINVAL, "empty");
	name_req(sock, TD_OP_STAT, 32, big, 256);
	expect_error(sock, TD_OP_STAT, 32, -EOVERFLOW, "name");
	name_req(sock, TD_OP_STAT, 33, "cam/../x", 8);
	expect_error(sock, TD_OP_STAT, 33, -EINVAL, "..");
	name_req(sock, TD_OP_STAT, 34, "a\x01z", 3);
	expect_error(sock, TD_OP_STAT, 34, -EINVAL, "outside");
	name_req(sock, TD_OP_DELETE, 35, "/abs", 4);
	expect_error(sock, TD_OP_DELETE, 35, -EINVAL, "'/'");
	get_req(sock, 36, "a//b", TD_GET_LATEST, 0, 0, 0);
	expect_error(sock, TD_OP_GET, 36, -EINVAL, "//");
	close(sock);
}

/* ---- GET, leases ---- */

DTest(get_of_a_missing_name_is_enoent)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);

	get_req(sock, 40, "no/such", TD_GET_LATEST, 0, 0, 0);
	expect_error(sock, TD_OP_GET, 40, -ENOENT, "no tensor");
	get_req(sock, 41, "no/such", TD_GET_EXACT, 3, 0, 0);
	expect_error(sock, TD_OP_GET, 41, -ENOENT, NULL);
	close(sock);
}

DTest(release_of_an_unknown_lease_is_enoent)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);
	struct td_wire_release_req r = {.lease_id = 12345};
	int64_t n = td_wire_release_req_encode(&r, BODY, BODY_CAP);

	send_req(sock, TD_OP_RELEASE, 42, (size_t)n, NULL, 0);
	expect_error(sock, TD_OP_RELEASE, 42, -ENOENT, "no lease 12345");
	close(sock);
}

DTest(get_newer_times_out_with_etimedout)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);
	uint64_t v = publish_bytes(sock, "t/o", 64, 1, false);

	get_req(sock, 43, "t/o", TD_GET_NEWER, v, 0, 0);
	expect_error(sock, TD_OP_GET, 43, -ETIMEDOUT, "newer");
	get_req(sock, 44, "t/o", TD_GET_NEWER, v, 30, 0);
	expect_error(sock, TD_OP_GET, 44, -ETIMEDOUT, "within 30 ms");
	close(sock);
}

/* A receive that fails after 10 s instead of hanging the test. */
static void recv_timeout(int sock)
{
	struct timeval tv = {10, 0};

	cr_assert_eq(setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)),
		     0);
}

/* The reply to GET id on sock, a success: its version (fds closed). */
static uint64_t get_version_ok(int sock, uint64_t id, const char *what)
{
	struct td_wire_get_rep rep;
	struct msg *m = reply(sock, TD_OP_GET, id);

	cr_assert_eq(m->h.status, 0, "%s: %s", what, m->reason);
	cr_assert_eq(td_wire_get_rep_decode(m->body, m->h.body_len, &rep, NULL),
		     0);
	close_msg_fds(m);
	return rep.version;
}

/*
 * Parked GETs are found by the hash of their name (daemon/lease.c): 1280
 * of them on 1280 names, more than the 1024 buckets, so names share
 * buckets whatever the daemon's seed. Each publish answers its own name's
 * GET and no other, in publish order on each connection.
 */
DTest(parked_gets_on_many_names_each_wake_for_their_own_name)
{
	enum { CONNS = 5, PER = 256 };
	int prod = conn_hello(&D, TD_IMPORT_SCM), cons[CONNS];
	char name[32];

	for (int c = 0; c < CONNS; c++) {
		cons[c] = conn_hello(&D, TD_IMPORT_AUTO);
		recv_timeout(cons[c]);
		for (int k = 0; k < PER; k++) {
			snprintf(name, sizeof(name), "bk/%d", c * PER + k);
			get_req(cons[c], 1000 + (uint64_t)k, name,
				TD_GET_NEWER, 0, 60000, 0);
		}
	}
	/* every GET is parked before the first publish: a STAT on each
	 * connection is answered after them */
	for (int c = 0; c < CONNS; c++) {
		name_req(cons[c], TD_OP_STAT, 9, "bk/none", 7);
		cr_assert_eq(reply(cons[c], TD_OP_STAT, 9)->h.status, -ENOENT);
	}
	/* the connections' GETs interleaved: bucket neighbours of other
	 * connections come and go between them */
	for (int k = 0; k < PER; k++)
		for (int c = 0; c < CONNS; c++) {
			uint64_t v;

			snprintf(name, sizeof(name), "bk/%d", c * PER + k);
			v = publish_bytes(prod, name, 64, (uint8_t)k, true);
			cr_assert_eq(get_version_ok(cons[c],
						    1000 + (uint64_t)k, name),
				     v, "%s", name);
		}
	for (int c = 0; c < CONNS; c++)
		close(cons[c]);
	close(prod);
}

/* A connection whose HELLO names the features given. */
static int conn_features(const struct daemon *d, uint32_t features)
{
	int sock = conn(d);

	cr_assert(hello_feat(sock, TD_IMPORT_SCM, -1, features, NULL).features &
		  TD_WIRE_FEAT_GET_CROWD);
	recv_timeout(sock);
	return sock;
}

/* The header flags of the (successful) reply to GET id on sock. */
static uint32_t get_flags(int sock, uint64_t id)
{
	struct msg *m = reply(sock, TD_OP_GET, id);

	cr_assert_eq(m->h.status, 0, "GET: %s", m->reason);
	close_msg_fds(m);
	return m->h.flags;
}

/*
 * One change that answers as many parked GETs as the host has CPUs, or
 * more, marks each reply TD_WIRE_F_CROWD (its clients then sleep at once
 * for their next reply, docs/fastpath.md "Waiting"), but only to
 * connections whose HELLO named TD_WIRE_FEAT_GET_CROWD: an older client
 * refuses header flags it does not know. Fewer parked GETs, or a GET
 * answered at once: no mark.
 */
DTest(gets_answered_together_by_as_many_as_the_cpus_are_a_crowd)
{
	int n = (int)td__cpus(), prod = conn_hello(&D, TD_IMPORT_SCM);
	int old = conn_hello(&D, TD_IMPORT_SCM), *cons = calloc(n, sizeof(int));
	uint64_t v;

	cr_assert(n > 0 && cons);
	recv_timeout(old);
	v = publish_bytes(prod, "cw/x", 64, 1, true);
	for (int i = 0; i < n; i++)
		cons[i] = conn_features(&D, TD_WIRE_FEAT_GET_CROWD);
	/* n that name the feature and one that does not: a crowd */
	for (int i = 0; i <= n; i++) {
		get_req(i < n ? cons[i] : old, 10, "cw/x", TD_GET_NEWER, v,
			60000, 0);
		/* parked before the publish: the STAT is answered after */
		name_req(i < n ? cons[i] : old, TD_OP_STAT, 11, "cw/none", 7);
		cr_assert_eq(reply(i < n ? cons[i] : old, TD_OP_STAT, 11)
				     ->h.status,
			     -ENOENT);
	}
	v = publish_bytes(prod, "cw/x", 64, 2, true);
	for (int i = 0; i < n; i++)
		cr_assert(get_flags(cons[i], 10) & TD_WIRE_F_CROWD,
			  "consumer %d of %d", i, n);
	cr_assert_eq(get_flags(old, 10), TD_WIRE_F_REPLY,
		     "a client without the feature");
	/* exactly n parked are a crowd, n - 1 (where n > 1) are not */
	for (int k = 0; k < 2; k++) {
		for (int i = k; i < n; i++) {
			get_req(cons[i], 12, "cw/x", TD_GET_NEWER, v, 60000, 0);
			name_req(cons[i], TD_OP_STAT, 13, "cw/none", 7);
			cr_assert_eq(reply(cons[i], TD_OP_STAT, 13)->h.status,
				     -ENOENT);
		}
		v = publish_bytes(prod, "cw/x", 64, (uint8_t)(3 + k), true);
		for (int i = k; i < n; i++)
			cr_assert_eq(get_flags(cons[i], 12),
				     TD_WIRE_F_REPLY |
					     (k ? 0 : TD_WIRE_F_CROWD),
				     "%d of %d parked", n - k, n);
	}
	/* nor one answered at once */
	get_req(cons[0], 14, "cw/x", TD_GET_NEWER, 0, 60000, 0);
	cr_assert_eq(get_flags(cons[0], 14), TD_WIRE_F_REPLY);
	for (int i = 0; i < n; i++)
		close(cons[i]);
	free(cons);
	close(old);
	close(prod);
}

/*
 * The deadline timer is not rearmed when a GET is served (a PUBLISH must
 * not walk every parked GET): it may fire for a GET that is gone, and
 * must then still find the next deadline. And a shorter deadline parked
 * after a longer one moves it earlier.
 */
DTest(parked_get_deadlines_hold_when_other_gets_are_served)
{
	int prod = conn_hello(&D, TD_IMPORT_SCM);
	int cons = conn_hello(&D, TD_IMPORT_AUTO);
	uint64_t v;

	recv_timeout(cons);
	/* armed for 100 ms, served, then 300 ms must still time out */
	get_req(cons, 70, "dl/a", TD_GET_NEWER, 0, 100, 0);
	get_req(cons, 71, "dl/b", TD_GET_NEWER, 0, 300, 0);
	name_req(cons, TD_OP_STAT, 9, "dl/none", 7); /* both parked now */
	cr_assert_eq(reply(cons, TD_OP_STAT, 9)->h.status, -ENOENT);
	v = publish_bytes(prod, "dl/a", 64, 1, true);
	cr_assert_eq(get_version_ok(cons, 70, "dl/a"), v);
	expect_error(cons, TD_OP_GET, 71, -ETIMEDOUT, "within 300 ms");
	/* armed for a minute, then for 50 ms: the 50 ms one times out
	 * first, the other is still parked and answered by a publish */
	get_req(cons, 72, "dl/c", TD_GET_NEWER, 0, 60000, 0);
	get_req(cons, 73, "dl/d", TD_GET_NEWER, 0, 50, 0);
	expect_error(cons, TD_OP_GET, 73, -ETIMEDOUT, "within 50 ms");
	v = publish_bytes(prod, "dl/c", 64, 2, true);
	cr_assert_eq(get_version_ok(cons, 72, "dl/c"), v);
	close(cons);
	close(prod);
}

/*
 * The deadlines are a heap (daemon/lease.c): GETs parked in any order
 * time out in the order of their deadlines, and GETs leaving it from the
 * middle (their connection closed, or served by a publish) leave the rest
 * in order. Another connection parks 48 GETs of a minute, then cons 48
 * whose timeouts are 60 + 25 * perm[k] ms (perm: a shuffle of 0..47),
 * which climb above them, and 16 that wait forever; the other connection
 * closes, so its GETs leave from all over the heap with cons's shorter
 * ones moved into their places, and the 8 of cons with the longest
 * timeouts are served by publishes. Every other one must time out,
 * timeouts in increasing order (25 ms apart, more than the daemon takes
 * to park them all), and the forever ones stay parked.
 */
DTest(parked_get_deadlines_expire_in_order_around_removals)
{
	enum { N = 48, FOREVER = 16, SERVED = 8, STEP = 25 };
	int prod = conn_hello(&D, TD_IMPORT_SCM);
	int cons = conn_hello(&D, TD_IMPORT_AUTO);
	int other = conn_hello(&D, TD_IMPORT_AUTO);
	unsigned perm[N], seen = 0, last = 0;
	bool done[N] = {0};
	char name[32];

	recv_timeout(cons);
	for (unsigned k = 0; k < N; k++)
		perm[k] = k;
	for (unsigned k = N - 1; k > 0; k--) { /* a fixed shuffle */
		unsigned j = (k * 2654435761u + 12345u) % (k + 1), t = perm[k];

		perm[k] = perm[j];
		perm[j] = t;
	}
	for (unsigned k = 0; k < N; k++) {
		snprintf(name, sizeof(name), "hp/o%u", k);
		get_req(other, 4000 + k, name, TD_GET_NEWER, 0, 60000 + k, 0);
	}
	name_req(other, TD_OP_STAT, 9, "hp/none", 7);
	cr_assert_eq(reply(other, TD_OP_STAT, 9)->h.status, -ENOENT);
	for (unsigned k = 0; k < N; k++) {
		snprintf(name, sizeof(name), "hp/%u", k);
		get_req(cons, 3000 + k, name, TD_GET_NEWER, 0,
			60 + STEP * perm[k], 0);
		if (k < FOREVER) {
			snprintf(name, sizeof(name), "hp/f%u", k);
			get_req(cons, 5000 + k, name, TD_GET_NEWER, 0,
				TD_WIRE_WAIT_FOREVER, 0);
		}
	}
	name_req(cons, TD_OP_STAT, 9, "hp/none", 7);
	cr_assert_eq(reply(cons, TD_OP_STAT, 9)->h.status, -ENOENT);
	close(other); /* its 48 leave the heap from wherever they are */
	for (unsigned k = 0; k < N; k++)
		if (perm[k] >= N - SERVED) {
			snprintf(name, sizeof(name), "hp/%u", k);
			publish_bytes(prod, name, 64, 1, true);
		}
	while (seen < N) {
		unsigned k;

		cr_assert_eq(recv_msg(cons, M), 0, "a GET is lost");
		cr_assert_eq(M->h.opcode, TD_OP_GET);
		k = (unsigned)(M->h.request_id - 3000);
		cr_assert_lt(k, N, "GET #%llu answered",
			     (unsigned long long)M->h.request_id);
		cr_assert(!done[k], "GET %u answered twice", k);
		done[k] = true;
		seen++;
		if (perm[k] >= N - SERVED) {
			cr_assert_eq(M->h.status, 0, "%u: %s", k, M->reason);
			close_msg_fds(M);
			continue;
		}
		cr_assert_eq(M->h.status, -ETIMEDOUT, "%u: %s", k, M->reason);
		cr_assert_geq(perm[k], last,
			      "a %u ms GET timed out after a %u ms one",
			      60 + STEP * perm[k], 60 + STEP * last);
		last = perm[k];
	}
	/* the forever ones are still parked: each answered by its publish */
	for (unsigned k = 0; k < FOREVER; k++) {
		uint64_t v;

		snprintf(name, sizeof(name), "hp/f%u", k);
		v = publish_bytes(prod, name, 64, 2, true);
		cr_assert_eq(get_version_ok(cons, 5000 + k, name), v);
	}
	close(cons);
	close(prod);
}

/* Map fd read-only and check every byte. */
static void assert_bytes(int fd, size_t len, uint8_t byte)
{
	uint8_t *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);

	cr_assert(p != MAP_FAILED);
	for (size_t i = 0; i < len; i++)
		cr_assert_eq(p[i], byte, "byte %zu", i);
	munmap(p, len);
}

/* Decode a GET reply; returns the plane fd (SCM or pulled). */
static int get_plane(struct msg *m, int daemon_pidfd,
		     struct td_wire_get_rep *rep)
{
	struct td_blob_view v;
	int fd;

	cr_assert_eq(m->h.status, 0, "GET: %s", m->reason);
	cr_assert_eq(td_wire_get_rep_decode(m->body, m->h.body_len, rep, NULL),
		     0);
	cr_assert_eq(td_blob_decode(rep->blob.ptr, rep->blob.len, &v, NULL), 0);
	cr_assert_eq(td_blob_check(&v, rep->fd_count, NULL), 0);
	cr_assert_eq(v.pid, (uint32_t)D.pid, "blob rewritten for the daemon");
	cr_assert_eq(rep->meta.len, 4);
	if (daemon_pidfd < 0) {
		cr_assert_eq(m->nfds, rep->fd_count);
		fd = m->fds[0];
		for (unsigned i = 1; i < m->nfds; i++)
			close(m->fds[i]);
		m->nfds = 0;
		return fd;
	}
	cr_assert_eq(m->nfds, 0);
	fd = (int)syscall(SYS_pidfd_getfd, daemon_pidfd, rep->fds[0].fd, 0);
	cr_assert(fd >= 0, "pull daemon fd %d: %s", rep->fds[0].fd,
		  strerror(errno));
	return fd;
}

DTest(get_newer_is_woken_by_a_publish_and_shares_the_pages)
{
	int cons = conn_hello(&D, TD_IMPORT_AUTO);
	int prod = conn_hello(&D, TD_IMPORT_SCM);
	struct td_wire_get_rep rep;
	uint64_t v1 = publish_bytes(prod, "cam/frame", 4096, 0x11, true), v2;
	int fd, seals;

	get_req(cons, 50, "cam/frame", TD_GET_NEWER, v1, TD_WIRE_WAIT_FOREVER,
		TD_WIRE_REQ_SCM);
	/* the GET is parked: a STAT on the same connection answers first */
	name_req(cons, TD_OP_STAT, 51, "cam/frame", 9);
	cr_assert_eq(reply(cons, TD_OP_STAT, 51)->h.status, 0);
	v2 = publish_bytes(prod, "cam/frame", 4096, 0x22, true);
	cr_assert_gt(v2, v1);
	fd = get_plane(reply(cons, TD_OP_GET, 50), -1, &rep);
	cr_assert_eq(rep.version, v2);
	assert_bytes(fd, 4096, 0x22);
	seals = fcntl(fd, F_GET_SEALS);
	cr_assert(seals & F_SEAL_WRITE, "published planes are write-sealed");
	close(fd);
	close(cons);
	close(prod);
}

DTest(consumer_pulls_planes_by_pidfd)
{
	int pidfd, cons = conn(&D);
	int prod = conn_hello(&D, TD_IMPORT_AUTO);
	struct td_wire_get_rep rep;
	int fd;

	if (!pulls())
		cr_skip_test("pidfd_getfd is not available under valgrind");
	hello_pref(cons, TD_IMPORT_AUTO, cons, &pidfd);
	publish_bytes(prod, "p/x", 8192, 0x5a, false);
	get_req(cons, 52, "p/x", TD_GET_LATEST, 0, 0, 0);
	fd = get_plane(reply(cons, TD_OP_GET, 52), pidfd, &rep);
	assert_bytes(fd, 8192, 0x5a);
	close(fd);
	close(pidfd);
	close(cons);
	close(prod);
}

DTest(a_leased_version_outlives_delete_and_its_producer)
{
	int keep = conn_hello(&D, TD_IMPORT_AUTO);
	int base = daemon_fd_count(&D);
	int cons = conn_hello(&D, TD_IMPORT_AUTO);
	int prod = conn_hello(&D, TD_IMPORT_AUTO);
	struct td_wire_release_req rel = {0};
	struct td_wire_get_rep rep;
	int fd;
	int64_t n;

	publish_bytes(prod, "keep/me", 4096, 0x77, false);
	get_req(cons, 60, "keep/me", TD_GET_LATEST, 0, 0, TD_WIRE_REQ_SCM);
	fd = get_plane(reply(cons, TD_OP_GET, 60), -1, &rep);
	close(prod);
	name_req(cons, TD_OP_DELETE, 61, "keep/me", 7);
	cr_assert_eq(reply(cons, TD_OP_DELETE, 61)->h.status, 0);
	name_req(cons, TD_OP_STAT, 62, "keep/me", 7);
	expect_error(cons, TD_OP_STAT, 62, -ENOENT, NULL);
	/* still leased: the daemon holds the plane, a new GET is refused */
	cr_assert_gt(daemon_fd_count(&D), base);
	assert_bytes(fd, 4096, 0x77);
	rel.lease_id = rep.lease_id;
	n = td_wire_release_req_encode(&rel, BODY, BODY_CAP);
	send_req(cons, TD_OP_RELEASE, 63, (size_t)n, NULL, 0);
	cr_assert_eq(reply(cons, TD_OP_RELEASE, 63)->h.status, 0);
	send_req(cons, TD_OP_RELEASE, 64, (size_t)n, NULL, 0);
	expect_error(cons, TD_OP_RELEASE, 64, -ENOENT, NULL);
	close(cons);
	close(fd);
	for (int i = 0; i < 2000 && daemon_fd_count(&D) != base; i++) {
		name_req(keep, TD_OP_STAT, 65, "a", 1);
		expect_error(keep, TD_OP_STAT, 65, -ENOENT, NULL);
	}
	cr_assert_eq(daemon_fd_count(&D), base, "last release frees");
	close(keep);
}

DTest(disconnect_ends_the_leases)
{
	int keep = conn_hello(&D, TD_IMPORT_AUTO);
	int prod = conn_hello(&D, TD_IMPORT_AUTO);
	int cons = conn_hello(&D, TD_IMPORT_AUTO);
	struct td_wire_entry e;
	struct msg *m;

	publish_bytes(prod, "l/c", 64, 1, false);
	for (int i = 0; i < 3; i++) {
		get_req(cons, 70 + i, "l/c", TD_GET_LATEST, 0, 0, 0);
		cr_assert_eq(reply(cons, TD_OP_GET, 70 + i)->h.status, 0);
	}
	name_req(keep, TD_OP_STAT, 80, "l/c", 3);
	m = reply(keep, TD_OP_STAT, 80);
	cr_assert_eq(td_wire_entry_decode(m->body, m->h.body_len, &e, NULL), 0);
	cr_assert_eq(e.lease_count, 3);
	close(cons);
	for (int i = 0; i < 2000 && e.lease_count; i++) {
		name_req(keep, TD_OP_STAT, 81, "l/c", 3);
		m = reply(keep, TD_OP_STAT, 81);
		cr_assert_eq(td_wire_entry_decode(m->body, m->h.body_len, &e,
						  NULL),
			     0);
	}
	cr_assert_eq(e.lease_count, 0);
	close(prod);
	close(keep);
}

/* ---- ALLOC ---- */

/* An ALLOC of one 4096-byte plane over SCM (request id): its fd. */
static int alloc_4k(int sock, uint64_t id, struct td_wire_alloc_rep *rep)
{
	struct td_wire_alloc_req ar = {
		.flags = TD_WIRE_REQ_SCM, .plane_count = 1, .sizes = {4096}};
	int64_t n = td_wire_alloc_req_encode(&ar, BODY, BODY_CAP);
	struct msg *m;
	int fd;

	send_req(sock, TD_OP_ALLOC, id, (size_t)n, NULL, 0);
	m = reply(sock, TD_OP_ALLOC, id);
	cr_assert_eq(m->h.status, 0, "%s", m->reason);
	cr_assert_eq(td_wire_alloc_rep_decode(m->body, m->h.body_len, rep,
					      NULL),
		     0);
	cr_assert_eq(m->nfds, 1);
	fd = m->fds[0];
	m->nfds = 0;
	return fd;
}

DTest(alloc_then_publish_uses_the_daemon_planes)
{
	int sock = conn_hello(&D, TD_IMPORT_SCM);
	struct td_wire_alloc_rep rep;
	struct td_wire_get_rep grep;
	struct msg *m;
	uint8_t *p;
	size_t bl;
	int fd, got;

	{
		struct td_wire_alloc_req z = {
			.plane_count = 2, .sizes = {4096, 0}};
		int64_t zn = td_wire_alloc_req_encode(&z, BODY, BODY_CAP);

		/* an empty plane is valid: its memfd is simply empty */
		send_req(sock, TD_OP_ALLOC, 89, (size_t)zn, NULL, 0);
		m = reply(sock, TD_OP_ALLOC, 89);
		cr_assert_eq(m->h.status, 0, "%s", m->reason);
		struct td_wire_alloc_rep zr;
		cr_assert_eq(td_wire_alloc_rep_decode(m->body, m->h.body_len,
						      &zr, NULL),
			     0);
		cr_assert_eq(zr.fd_count, 2);
		close_msg_fds(m);
	}
	fd = alloc_4k(sock, 90, &rep);
	cr_assert(fcntl(fd, F_GET_SEALS) & F_SEAL_SHRINK);
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert(p != MAP_FAILED);
	memset(p, 0x42, 4096);
	bl = ref_blob(blobbuf, sizeof(blobbuf), 4096, 0, (uint32_t)getpid(),
		      -1);
	/* a writable mapping still exists: the write seal is refused */
	publish_raw(sock, 91, "al/x", bl, NULL, 0, false, rep.alloc_id);
	expect_error(sock, TD_OP_PUBLISH, 91, -EBUSY, "unmap");
	munmap(p, 4096);
	publish_raw(sock, 92, "al/x", bl, NULL, 0, false, rep.alloc_id);
	cr_assert_eq(reply(sock, TD_OP_PUBLISH, 92)->h.status, 0);
	/* consumed: a second publish of the same alloc fails */
	publish_raw(sock, 93, "al/y", bl, NULL, 0, false, rep.alloc_id);
	expect_error(sock, TD_OP_PUBLISH, 93, -ENOENT, "no alloc");
	get_req(sock, 94, "al/x", TD_GET_LATEST, 0, 0, TD_WIRE_REQ_SCM);
	got = get_plane(reply(sock, TD_OP_GET, 94), -1, &grep);
	cr_assert_eq(grep.fds[0].buffer_id, rep.fds[0].buffer_id,
		     "same file, same buffer_id");
	assert_bytes(got, 4096, 0x42);
	close(got);
	close(fd);
	close(sock);
}

/*
 * Pages of a loan that something still holds (here a pipe they were
 * vmspliced into), with no mapping left: the write seal is refused too,
 * and the reason names what to let go of, not only mappings. Let go, the
 * same loan publishes.
 */
DTest(a_loan_whose_pages_are_held_is_refused_naming_them)
{
	int sock = conn_hello(&D, TD_IMPORT_SCM);
	struct td_wire_alloc_rep rep;
	struct msg *m;
	struct iovec iov;
	uint8_t *p;
	size_t bl;
	int fd, pp[2];

	fd = alloc_4k(sock, 96, &rep);
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert(p != MAP_FAILED);
	memset(p, 0x5a, 4096);
	cr_assert_eq(pipe(pp), 0);
	iov = (struct iovec){p, 4096};
	cr_assert_eq(vmsplice(pp[1], &iov, 1, 0), 4096, "vmsplice: %s",
		     strerror(errno));
	munmap(p, 4096); /* no mapping left: the pipe holds the page */
	bl = ref_blob(blobbuf, sizeof(blobbuf), 4096, 0, (uint32_t)getpid(),
		      -1);
	publish_raw(sock, 97, "al/held", bl, NULL, 0, false, rep.alloc_id);
	expect_error(sock, TD_OP_PUBLISH, 97, -EBUSY, "let go of its pages");
	close(pp[0]);
	close(pp[1]);
	publish_raw(sock, 98, "al/held", bl, NULL, 0, false, rep.alloc_id);
	m = reply(sock, TD_OP_PUBLISH, 98);
	cr_assert_eq(m->h.status, 0, "%s", m->reason);
	close(fd);
	close(sock);
}

Test(daemon, max_bytes_refuses_over_quota_with_enospc,
     .init = setup_quota, .fini = teardown)
{
	struct td_wire_alloc_req ar = {.plane_count = 1,
					.sizes = {16384}};
	int sock;
	int64_t n;

	sock = conn_hello(&D, TD_IMPORT_AUTO);
	n = td_wire_alloc_req_encode(&ar, BODY, BODY_CAP);
	send_req(sock, TD_OP_ALLOC, 95, (size_t)n, NULL, 0);
	expect_error(sock, TD_OP_ALLOC, 95, -ENOSPC, "max-bytes");
	publish_bytes(sock, "q/1", 4096, 1, false);
	publish_bytes(sock, "q/2", 4096, 1, false);
	/* both leased: eviction (LRU of unleased versions) has nothing */
	uint64_t lease[2];
	for (int i = 0; i < 2; i++) {
		struct td_wire_get_rep rep;
		struct msg *m;

		get_req(sock, 90 + i, i ? "q/2" : "q/1", TD_GET_LATEST, 0, 0,
			0);
		m = reply(sock, TD_OP_GET, 90 + i);
		cr_assert_eq(m->h.status, 0, "GET: %s", m->reason);
		cr_assert_eq(td_wire_get_rep_decode(m->body, m->h.body_len,
						    &rep, NULL),
			     0);
		close_msg_fds(m);
		lease[i] = rep.lease_id;
	}
	{
		int fd = shm_plane(4096, 1, true);
		size_t bl = ref_blob(blobbuf, sizeof(blobbuf), 4096, 0,
				     (uint32_t)getpid(), -1);

		publish_raw(sock, 96, "q/3", bl, &fd, 1, false, 0);
		expect_error(sock, TD_OP_PUBLISH, 96, -ENOSPC, "max-bytes");
		close(fd);
	}
	for (int i = 0; i < 2; i++) {
		struct td_wire_release_req rel = {.lease_id = lease[i]};

		n = td_wire_release_req_encode(&rel, BODY, BODY_CAP);
		send_req(sock, TD_OP_RELEASE, 97, (size_t)n, NULL, 0);
		cr_assert_eq(reply(sock, TD_OP_RELEASE, 97)->h.status, 0);
	}
	/* replacing an unleased version frees its bytes first */
	publish_bytes(sock, "q/2", 4096, 2, false);
	close(sock);
	teardown(); /* checked here: criterion ignores a .fini's asserts */
}

/* ---- LIST, WATCH ---- */

DTest(list_pages_with_more_and_after)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);
	static uint8_t meta[TD_WIRE_MAX_META];
	char names[6][8];
	unsigned seen = 0;
	char after[16] = "";
	int pages = 0;

	memset(meta, 'm', sizeof(meta));
	/* five 16 KiB-meta tensors cannot fit one 64 KiB reply */
	for (int i = 0; i < 5; i++) {
		int fd = shm_plane(64, 1, true);
		size_t bl = ref_blob(blobbuf, sizeof(blobbuf), 64, 0,
				     (uint32_t)getpid(), -1);
		struct td_wire_publish_req r = {
			.name = {names[i], 5},
			.meta = {meta, sizeof(meta)},
			.blob = {blobbuf, (uint32_t)bl},
			.fd_count = 1,
			.fds = {fd},
		};
		int64_t n;

		snprintf(names[i], sizeof(names[i]), "l/%03d", i);
		n = td_wire_publish_req_encode(&r, BODY, BODY_CAP);
		cr_assert(n > 0);
		send_req(sock, TD_OP_PUBLISH, 200 + i, (size_t)n, &fd, 1);
		cr_assert_eq(reply(sock, TD_OP_PUBLISH, 200 + i)->h.status, 0,
			     "%s", M->reason);
		close(fd);
	}
	publish_bytes(sock, "other", 64, 1, false);
	for (;;) {
		struct td_wire_list_req r = {{"l/", 2},
					     {after, (uint16_t)strlen(after)},
					     0};
		int64_t n = td_wire_list_req_encode(&r, BODY, BODY_CAP);
		struct td_wire_list_rd lr;
		struct td_wire_entry e;
		struct msg *m;
		int rc;

		send_req(sock, TD_OP_LIST, 300, (size_t)n, NULL, 0);
		m = reply(sock, TD_OP_LIST, 300);
		cr_assert_eq(m->h.status, 0);
		cr_assert_eq(td_wire_list_rep_init(&lr, m->body, m->h.body_len,
						   NULL),
			     0);
		pages++;
		while ((rc = td_wire_list_rep_next(&lr, &e)) == 1) {
			cr_assert_eq(e.name.len, 5);
			cr_assert(memcmp(e.name.ptr, names[seen], 5) == 0);
			cr_assert_eq(e.meta.len, sizeof(meta));
			memcpy(after, e.name.ptr, 5);
			after[5] = 0;
			seen++;
		}
		cr_assert_eq(rc, 0);
		if (!lr.more)
			break;
		cr_assert_gt(lr.count, 0);
	}
	cr_assert_eq(seen, 5, "every name once, 'other' filtered out");
	cr_assert_gt(pages, 1);
	close(sock);
}

DTest(watch_notifies_publish_and_delete)
{
	int w = conn_hello(&D, TD_IMPORT_AUTO);
	int prod = conn_hello(&D, TD_IMPORT_AUTO);
	struct td_wire_watch_req r = {{"cam/", 4}, TD_WIRE_WATCH_PREFIX};
	struct td_wire_watch_rep wr;
	struct td_wire_notify nt;
	struct td_wire_unwatch_req u;
	uint64_t v;
	int64_t n = td_wire_watch_req_encode(&r, BODY, BODY_CAP);
	struct msg *m;

	send_req(w, TD_OP_WATCH, 400, (size_t)n, NULL, 0);
	m = reply(w, TD_OP_WATCH, 400);
	cr_assert_eq(td_wire_watch_rep_decode(m->body, m->h.body_len, &wr,
					      NULL),
		     0);
	publish_bytes(prod, "dog/0", 64, 1, false); /* not watched */
	v = publish_bytes(prod, "cam/0", 64, 1, false);
	cr_assert_eq(recv_msg(w, M), 0);
	cr_assert_eq(M->h.opcode, TD_OP_NOTIFY);
	cr_assert_eq(M->h.flags, TD_WIRE_F_NOTIFY);
	cr_assert_eq(M->h.request_id, 0);
	cr_assert_eq(td_wire_notify_decode(M->body, M->h.body_len, &nt, NULL),
		     0);
	cr_assert_eq(nt.watch_id, wr.watch_id);
	cr_assert_eq(nt.event, TD_EVENT_PUBLISHED);
	cr_assert_eq(nt.version, v);
	cr_assert_eq(nt.name.len, 5);
	name_req(prod, TD_OP_DELETE, 401, "cam/0", 5);
	cr_assert_eq(reply(prod, TD_OP_DELETE, 401)->h.status, 0);
	cr_assert_eq(recv_msg(w, M), 0);
	cr_assert_eq(td_wire_notify_decode(M->body, M->h.body_len, &nt, NULL),
		     0);
	cr_assert_eq(nt.event, TD_EVENT_DELETED);
	u.watch_id = wr.watch_id;
	n = td_wire_unwatch_req_encode(&u, BODY, BODY_CAP);
	send_req(w, TD_OP_UNWATCH, 402, (size_t)n, NULL, 0);
	cr_assert_eq(reply(w, TD_OP_UNWATCH, 402)->h.status, 0);
	send_req(w, TD_OP_UNWATCH, 403, (size_t)n, NULL, 0);
	expect_error(w, TD_OP_UNWATCH, 403, -ENOENT, NULL);
	close(w);
	close(prod);
}

/* ---- process ---- */

DTest(a_live_socket_is_not_stolen_and_a_stale_one_is_replaced)
{
	struct daemon d2 = D;
	int st;
	pid_t pid;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd;

	/* a second daemon on the same live path refuses to start */
	snprintf(d2.log, sizeof(d2.log), "%s/log2", D.dir);
	pid = spawn(&d2, NULL);
	/* bounded: one that took the socket over would serve for ever */
	st = tu_wait_child(pid, wait_s(), "a second tensord on a live socket");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0);
	assert_serving();

	/* a socket file nobody listens on is taken over */
	daemon_stop(&D);
	cr_assert(tu_mkdtemp(strcpy(D.dir, "/tmp/td-test-XXXXXX")));
	snprintf(D.sock, sizeof(D.sock), "%s/s.sock", D.dir);
	snprintf(D.log, sizeof(D.log), "%s/log", D.dir);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", D.sock);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	cr_assert_eq(access(D.sock, F_OK), 0);
	D.pid = spawn(&D, NULL);
	fd = -1;
	for (int i = 0; i < 6000 && fd < 0; i++) {
		fd = try_connect(D.sock);
		if (fd < 0)
			nap_ms(10);
	}
	cr_assert(fd >= 0, "stale socket was not replaced");
	D.ready = fd;
	assert_serving();
}

DTest(sigterm_exits_zero_and_removes_the_socket)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);

	/* with a tensor, a lease and a parked GET outstanding */
	publish_bytes(sock, "s/t", 4096, 9, false);
	get_req(sock, 500, "s/t", TD_GET_LATEST, 0, 0, 0);
	cr_assert_eq(reply(sock, TD_OP_GET, 500)->h.status, 0);
	get_req(sock, 501, "s/t", TD_GET_NEWER, 100, TD_WIRE_WAIT_FOREVER, 0);
	/* teardown sends SIGTERM and checks exit 0 and the socket file */
	close(sock);
}

/* ---- RING_WAKE ---- */

DTest(ring_wake_refuses_foreign_ids_and_bad_bodies_and_keeps_no_fd)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);
	int base = daemon_fd_count(&D);
	int efd = eventfd(0, EFD_CLOEXEC);
	struct td_wire_ring_close_req q = {.id = 4242};
	int64_t n = td_wire_ring_close_req_encode(&q, BODY, BODY_CAP);

	cr_assert(efd >= 0);
	/* an id that is no ring or subscription of this connection */
	send_req(sock, TD_OP_RING_WAKE, 1, (size_t)n, &efd, 1);
	expect_error(sock, TD_OP_RING_WAKE, 1, -ENOENT, "RING_WAKE");
	send_req(sock, TD_OP_RING_WAKE, 2, (size_t)n, NULL, 0);
	expect_error(sock, TD_OP_RING_WAKE, 2, -ENOENT, NULL);
	/* a body cut short */
	send_req(sock, TD_OP_RING_WAKE, 3, 4, &efd, 1);
	expect_error(sock, TD_OP_RING_WAKE, 3, -ENODATA, NULL);
	/* every attached fd was closed again */
	for (int i = 0; i < 2000 && daemon_fd_count(&D) != base; i++)
		nap_ms(10);
	cr_assert_eq(daemon_fd_count(&D), base);
	close(efd);
	close(sock);
	assert_serving();
}

/* ---- FOLLOW_WAKE ---- */

/* RING_SUBSCRIBE shares FOLLOW's body but not its spare flag. */
DTest(ring_subscribe_refuses_follows_spare_flag)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);
	struct td_wire_ring_sub_req f = {.name = {"rs/x", 4},
					 .flags = TD_WIRE_FOLLOW_SPARE};
	int64_t n = td_wire_ring_sub_req_encode(&f, BODY, BODY_CAP);

	send_req(sock, TD_OP_RING_SUBSCRIBE, 1, (size_t)n, NULL, 0);
	expect_error(sock, TD_OP_RING_SUBSCRIBE, 1, -EBADMSG, "flags");
	close(sock);
	assert_serving();
}

/*
 * A follow's wake-up fd is a timerfd: an eventfd is refused, because its
 * sender could make it blocking and fill it, and the daemon's write would
 * block (follow::a_follower_cannot_block_the_daemon_on_its_wake_fd). No
 * fd is kept for a refusal.
 */
DTest(follow_wake_takes_a_timerfd_and_refuses_an_eventfd)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);
	int base = daemon_fd_count(&D);
	int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	struct td_wire_ring_sub_req f = {.name = {"fw/raw", 6},
					 .flags = TD_WIRE_REQ_SCM};
	struct td_wire_follow_rep r;
	struct td_wire_ring_close_req q;
	struct msg *m;
	int64_t n = td_wire_ring_sub_req_encode(&f, BODY, BODY_CAP);

	cr_assert(efd >= 0 && tfd >= 0);
	send_req(sock, TD_OP_FOLLOW, 1, (size_t)n, NULL, 0);
	m = reply(sock, TD_OP_FOLLOW, 1);
	cr_assert_eq(m->h.status, 0, "FOLLOW: %s", m->reason);
	cr_assert_eq(td_wire_follow_rep_decode(m->body, m->h.body_len, &r,
					       NULL),
		     0);
	close_msg_fds(m);
	q.id = r.id;
	n = td_wire_ring_close_req_encode(&q, BODY, BODY_CAP);
	send_req(sock, TD_OP_FOLLOW_WAKE, 2, (size_t)n, &efd, 1);
	expect_error(sock, TD_OP_FOLLOW_WAKE, 2, -EINVAL, "timerfd");
	send_req(sock, TD_OP_FOLLOW_WAKE, 3, (size_t)n, &tfd, 1);
	m = reply(sock, TD_OP_FOLLOW_WAKE, 3);
	cr_assert_eq(m->h.status, 0, "FOLLOW_WAKE: %s", m->reason);
	close_msg_fds(m);
	/* the follow's end closes the kept timerfd, bell and row too */
	send_req(sock, TD_OP_FOLLOW_CLOSE, 4, (size_t)n, NULL, 0);
	m = reply(sock, TD_OP_FOLLOW_CLOSE, 4);
	cr_assert_eq(m->h.status, 0, "FOLLOW_CLOSE: %s", m->reason);
	close_msg_fds(m);
	for (int i = 0; i < 2000 && daemon_fd_count(&D) != base; i++)
		nap_ms(10);
	cr_assert_eq(daemon_fd_count(&D), base);
	close(efd);
	close(tfd);
	close(sock);
	assert_serving();
}

/*
 * TD_WIRE_ALLOC_RESERVE (§6.2): the new planes' memory is left to the
 * client and the reply names them; without it the daemon reserves them.
 * A plane of 0 bytes has nothing to reserve.
 */
DTest(alloc_leaves_new_planes_to_a_client_that_reserves_them)
{
	int sock = conn_hello(&D, TD_IMPORT_SCM);
	struct td_wire_alloc_req ar = {.plane_count = 2, .sizes = {1 << 20, 0}};
	struct td_wire_alloc_rep rep;
	struct stat st;
	struct msg *m;

	for (int self = 1; self >= 0; self--) {
		ar.flags = TD_WIRE_REQ_SCM | (self ? TD_WIRE_ALLOC_RESERVE : 0);
		m = call_ok(sock, TD_OP_ALLOC, 95 + self,
			    td_wire_alloc_req_encode(&ar, BODY, BODY_CAP));
		cr_assert_eq(td_wire_alloc_rep_decode(m->body, m->h.body_len,
						      &rep, NULL),
			     0);
		cr_assert_eq(rep.unreserved, self ? 0x1u : 0u);
		cr_assert_eq(m->nfds, 2);
		cr_assert_eq(fstat(m->fds[0], &st), 0);
		if (self)
			cr_assert_eq(st.st_blocks, 0, "the daemon reserved it");
		else
			cr_assert_geq((uint64_t)st.st_blocks * 512, 1u << 20);
		close_msg_fds(m);
	}
	close(sock);
	assert_serving();
}

/*
 * The same for a ring's slots (§10): TD_WIRE_RING_RESERVE leaves their
 * memory to the producer and the reply says so; without it the daemon
 * allocates it before it answers.
 */
DTest(ring_create_leaves_the_slots_to_a_producer_that_reserves_them)
{
	int sock = conn_hello(&D, TD_IMPORT_SCM);
	struct td_wire_ring_create_req q = {
		.dtype = 0, .ndim = 1, .shape = {1 << 20}, .slot_count = 2,
		.reader_count = 1, .plane_count = 1, .plane_sizes = {1 << 20}};
	struct td_wire_ring_rep rep;
	struct stat st;
	struct msg *m;

	for (int self = 1; self >= 0; self--) {
		q.name = self ? (struct td_wire_str){"rr/self", 7}
			      : (struct td_wire_str){"rr/daemon", 9};
		q.flags = TD_WIRE_REQ_SCM | (self ? TD_WIRE_RING_RESERVE : 0);
		m = call_ok(sock, TD_OP_RING_CREATE, 97 + self,
			    td_wire_ring_create_req_encode(&q, BODY, BODY_CAP));
		cr_assert_eq(td_wire_ring_rep_decode(m->body, m->h.body_len,
						     &rep, NULL),
			     0);
		cr_assert_eq(!!(rep.flags & TD_WIRE_RING_UNRESERVED), self);
		cr_assert_eq(m->nfds, 3);
		cr_assert_eq(fstat(m->fds[2], &st), 0);
		if (self)
			cr_assert_eq(st.st_blocks, 0, "the daemon reserved it");
		else
			cr_assert_geq((uint64_t)st.st_blocks * 512,
				      rep.data_len);
		close_msg_fds(m);
	}
	close(sock);
	assert_serving();
}

/* ---- fewer round trips: PUBLISH lends the next loan, quiet RELEASE ---- */

/* A RECYCLE ALLOC of one 4096-byte plane (fds attached, closed here). */
static struct td_wire_alloc_rep alloc_recycle(int sock, uint64_t id,
					      uint32_t flags)
{
	struct td_wire_alloc_req ar = {
		.flags = TD_WIRE_REQ_SCM | TD_WIRE_ALLOC_RECYCLE | flags,
		.plane_count = 1, .sizes = {4096}};
	struct td_wire_alloc_rep rep;
	int64_t n = td_wire_alloc_req_encode(&ar, BODY, BODY_CAP);
	struct msg *m;

	send_req(sock, TD_OP_ALLOC, id, (size_t)n, NULL, 0);
	m = reply(sock, TD_OP_ALLOC, id);
	cr_assert_eq(m->h.status, 0, "ALLOC: %s", m->reason);
	cr_assert_eq(td_wire_alloc_rep_decode(m->body, m->h.body_len, &rep,
					      NULL),
		     0);
	close_msg_fds(m);
	return rep;
}

/*
 * PUBLISH alloc_id as name with flags (TD_WIRE_PUB_LOAN...) and held
 * ids; the reply decoded into *rep, its attached fd count returned.
 */
static unsigned publish_loan(int sock, uint64_t id, uint64_t alloc_id,
			     uint32_t flags, uint64_t held,
			     struct td_wire_publish_rep *rep, size_t *body_len)
{
	size_t bl = ref_blob(blobbuf, sizeof(blobbuf), 4096, 0,
			     (uint32_t)getpid(), -1);
	struct td_wire_publish_req r = {
		.name = {"loan/x", 6},
		.flags = flags,
		.alloc_id = alloc_id,
		.blob = {blobbuf, (uint32_t)bl},
		.held_count = held ? 1 : 0,
		.held = {held},
	};
	int64_t len = td_wire_publish_req_encode(&r, BODY, BODY_CAP);
	unsigned nfds;
	struct msg *m;

	cr_assert(len > 0);
	send_req(sock, TD_OP_PUBLISH, id, (size_t)len, NULL, 0);
	m = reply(sock, TD_OP_PUBLISH, id);
	cr_assert_eq(m->h.status, 0, "PUBLISH: %s", m->reason);
	cr_assert_eq(td_wire_publish_rep_decode(m->body, m->h.body_len, rep,
						NULL),
		     0);
	*body_len = m->h.body_len;
	nfds = m->nfds;
	close_msg_fds(m);
	return nfds;
}

DTest(publish_lends_the_next_loan_only_from_the_free_list)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);
	const uint32_t lf = TD_WIRE_PUB_LOAN | TD_WIRE_PUB_LOAN_SCM;
	struct td_wire_publish_rep rep;
	struct td_wire_alloc_rep a1, a2, a3;
	size_t bl;

	/* v1: nothing retired yet, so no loan (never a new plane) */
	a1 = alloc_recycle(sock, 100, 0);
	cr_assert_eq(publish_loan(sock, 101, a1.alloc_id, lf, 0, &rep, &bl),
		     0);
	cr_assert(rep.has_loan);
	cr_assert_eq(rep.loan.alloc_id, 0);
	/* v2 retires v1, unleased: its buffer is lent, with its fd */
	a2 = alloc_recycle(sock, 102, 0);
	cr_assert_eq(publish_loan(sock, 103, a2.alloc_id, lf, 0, &rep, &bl),
		     1);
	cr_assert_neq(rep.loan.alloc_id, 0);
	cr_assert_eq(rep.loan.fd_count, 1);
	cr_assert_geq(rep.loan.fds[0].fd, 0);
	cr_assert_eq(rep.loan.fds[0].buffer_id, a1.fds[0].buffer_id);
	/* publishing the loan lends v2's buffer; held: no fd for it */
	cr_assert_eq(publish_loan(sock, 104, rep.loan.alloc_id, lf,
				  a2.fds[0].buffer_id, &rep, &bl),
		     0);
	cr_assert_eq(rep.loan.fd_count, 1);
	cr_assert_eq(rep.loan.fds[0].fd, -1);
	cr_assert_eq(rep.loan.fds[0].buffer_id, a2.fds[0].buffer_id);
	/* UNLOAN: that loan goes back to the free list, and this ALLOC
	 * gets the very buffer */
	a3 = alloc_recycle(sock, 105, TD_WIRE_ALLOC_UNLOAN);
	cr_assert_eq(a3.fds[0].buffer_id, a2.fds[0].buffer_id);
	/* a client that does not ask (every version-1 client) gets the
	 * version-1 reply: the version alone */
	cr_assert_eq(publish_loan(sock, 106, a3.alloc_id, 0, 0, &rep, &bl),
		     0);
	cr_assert_eq(bl, 8);
	cr_assert_not(rep.has_loan);
	/* LOAN_SCM alone, held ids without LOAN: malformed */
	{
		uint8_t b[64];
		struct td_wire_publish_req r = {.name = {"loan/x", 6},
						.flags = TD_WIRE_PUB_LOAN_SCM};

		cr_assert_eq(td_wire_publish_req_encode(&r, b, sizeof(b)),
			     -EINVAL);
	}
	close(sock);
}

DTest(a_quiet_release_is_not_answered_unless_it_fails)
{
	int sock = conn_hello(&D, TD_IMPORT_AUTO);
	struct td_wire_release_req rel = {.flags = TD_WIRE_REL_QUIET};
	struct td_wire_get_rep rep;
	int64_t n;

	publish_bytes(sock, "quiet/t", 4096, 3, false);
	get_req(sock, 110, "quiet/t", TD_GET_LATEST, 0, 0, TD_WIRE_REQ_SCM);
	close(get_plane(reply(sock, TD_OP_GET, 110), -1, &rep));
	rel.lease_id = rep.lease_id;
	n = td_wire_release_req_encode(&rel, BODY, BODY_CAP);
	cr_assert_eq(n, 12);
	send_req(sock, TD_OP_RELEASE, 111, (size_t)n, NULL, 0);
	/* the next message is the answer to the next request: none for 111,
	 * and the lease is gone (the same id again is unknown) */
	send_req(sock, TD_OP_RELEASE, 112, (size_t)n, NULL, 0);
	expect_error(sock, TD_OP_RELEASE, 112, -ENOENT, "no lease");
	/* a present flags word of 0 is a second encoding: refused */
	td__put_le32(BODY + 8, 0);
	send_req(sock, TD_OP_RELEASE, 113, 12, NULL, 0);
	expect_error(sock, TD_OP_RELEASE, 113, -EBADMSG, NULL);
	close(sock);
}

/* A mistyped option is named with a pointer to --help, not buried under
 * the whole help (which it printed to stderr); --help goes to stdout. */
/* --check-policy FILE: the counts on stdout (0) or the reason on
 * stderr (1); no daemon, no socket */
Test(daemon, check_policy_says_ok_or_why_and_starts_nothing)
{
	char dir[] = "/tmp/td-checkpol-XXXXXX", good[64], bad[64], sock[64];
	char *argv[] = {getenv("TD_TENSORD"), "--check-policy", good, NULL};
	char *out;
	FILE *f;

	cr_assert(tu_mkdtemp(dir));
	snprintf(good, sizeof(good), "%s/good", dir);
	snprintf(bad, sizeof(bad), "%s/bad", dir);
	snprintf(sock, sizeof(sock), "%s/tensord.sock", dir);
	setenv("TENSORD_SOCKET", sock, 1);
	f = fopen(good, "w");
	cr_assert(f && fputs("allow any rw t/\nallow uid=7 r u/\n"
			     "quota uid=7 1M\n", f) >= 0 && !fclose(f));
	f = fopen(bad, "w");
	cr_assert(f && fputs("allow any rw t/\nallow any rw\n", f) >= 0 &&
		  !fclose(f));
	cr_assert_eq(tu_run_capture_all(argv, &out), 0, "%s", out);
	cr_expect(strstr(out, ": ok, 2 allow rules, 1 quotas, 0 limits\n"),
		  "%s", out);
	free(out);
	argv[2] = bad;
	cr_assert_eq(tu_run_capture_all(argv, &out), 1, "%s", out);
	cr_expect(strstr(out, "/bad:2: "), "no line named: %s", out);
	cr_expect(!strstr(out, ": ok"), "%s", out);
	free(out);
	argv[2] = "/nonexistent/policy";
	cr_assert_eq(tu_run_capture_all(argv, &out), 1, "%s", out);
	free(out);
	cr_assert_neq(access(sock, F_OK), 0, "a socket was made");
	unsetenv("TENSORD_SOCKET");
	unlink(good);
	unlink(bad);
	rmdir(dir);
}

Test(daemon, a_bad_option_is_named_without_the_whole_help)
{
	char *bad[] = {getenv("TD_TENSORD"), "--sokcet", "/tmp/x", NULL};
	char *help[] = {getenv("TD_TENSORD"), "--help", NULL};
	char *out;

	cr_assert_eq(tu_run_capture_all(bad, &out), 2, "%s", out);
	/* as its other messages are: "tensord: ", not argv[0]'s path */
	cr_expect(!strncmp(out, "tensord: unrecognized option '--sokcet'\n",
			   40), "%s", out);
	cr_expect(strstr(out, "Try 'tensord --help' for the options."), "%s",
	          out);
	cr_expect(!strstr(out, "Usage:"), "%s", out);
	cr_expect_lt(strlen(out), 200, "%s", out);
	free(out);
	cr_assert_eq(tu_run_capture(help, &out), 0);
	cr_expect(strstr(out, "Usage: tensord [OPTION]..."), "%s", out);
	free(out);
	bad[1] = "--socket";
	bad[2] = NULL;
	cr_assert_eq(tu_run_capture_all(bad, &out), 2, "%s", out);
	cr_expect(!strncmp(out, "tensord: option '--socket' needs a value\n",
			   41), "%s", out);
	free(out);
	bad[1] = "-x";
	cr_assert_eq(tu_run_capture_all(bad, &out), 2, "%s", out);
	cr_expect(!strncmp(out, "tensord: invalid option -- 'x'\n", 31), "%s",
		  out);
	free(out);
	bad[1] = "--help=3";
	cr_assert_eq(tu_run_capture_all(bad, &out), 2, "%s", out);
	cr_expect(!strncmp(out, "tensord: option '--help' takes no value\n",
			   40), "%s", out);
	free(out);
}
