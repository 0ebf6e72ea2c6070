/* SPDX-License-Identifier: MIT */
/*
 * Hostile tenants (issue 18): clients the policy lets in that try to turn
 * the daemon against others. pidfd import as a confused deputy (a client
 * whose process changes credentials after it connected), fd exhaustion
 * through many connections and zero-byte planes, readers pinning memory,
 * one uid's allocations evicting another's, and the accept path at the
 * daemon's fd limit. Each attack runs as user nobody in a forked child
 * (the suite runs as root, like CI) and each test shows the victim still
 * works and the daemon's fds, memory and log stay bounded. Bounds are
 * counts (fds, bytes, log lines), never times.
 *
 * Tests that need a second uid are skipped when not run as root.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tensord/tensord.h>

#include "daemonctl.h"
#include "scm.h"
#include "testutil.h"
#include "blob.h"
#include "wire.h"

#define NOBODY 65534

static struct tdc_daemon D;

/* extra: more tensord arguments after --socket-mode 0666, NULL-ended */
static void start(const char *const *extra)
{
	const char *args[32] = {"--socket-mode", "0666"};
	struct tdc_opts o = {.extra = args, .log_level = "debug"};
	int rc, n = 2;

	for (int i = 0; extra && extra[i] && n < 31; i++)
		args[n++] = extra[i];
	rc = tdc_start(&D, NULL, &o);
	cr_assert_eq(rc, 0, "tensord did not start: %s (log %s)",
		     strerror(-rc), D.log);
}

static void stop(void)
{
	int rc = tdc_stop(&D, 0);

	cr_assert_eq(rc, 0, "tensord exit status %d (log %s)", rc, D.log);
}

static bool root(void)
{
	return geteuid() == 0;
}

/* How many times needle is in the daemon's log. */
static unsigned log_count(const char *needle)
{
	size_t len;
	uint8_t *buf = tu_try_read_file(D.log, &len);
	unsigned n = 0;

	if (!buf)
		return 0;
	buf[len] = 0;
	for (char *s = (char *)buf; (s = strstr(s, needle)); s++)
		n++;
	free(buf);
	return n;
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

/* Run fn(arg) in a forked child; assert it exits 0. */
static void in_child(void (*fn)(void *), void *arg)
{
	pid_t pid;
	int st;

	fflush(NULL);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		fn(arg);
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "child failed (status %d); see stderr", st);
}

/*
 * Become nobody (real, effective and saved uid and gid) but keep the
 * capabilities to come back (PR_SET_KEEPCAPS), and stay dumpable: a
 * process that can later gain privileges the way a setuid exec does,
 * without a setuid binary.
 */
static void become_nobody_keepcaps(void)
{
	CK(prctl(PR_SET_KEEPCAPS, 1) == 0);
	CK(setgroups(0, NULL) == 0);
	CK(setresgid(NOBODY, NOBODY, NOBODY) == 0);
	CK(setresuid(NOBODY, NOBODY, NOBODY) == 0);
	/* a uid change made it non-dumpable; an ordinary process is */
	CK(prctl(PR_SET_DUMPABLE, 1) == 0);
}

/* Back to root through the kept capabilities: what a setuid exec does. */
static void regain_root(void)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct c[2];

	CK(syscall(SYS_capget, &h, c) == 0);
	c[0].effective = c[0].permitted;
	c[1].effective = c[1].permitted;
	CK(syscall(SYS_capset, &h, c) == 0);
	CK(setresgid(0, 0, 0) == 0);
	CK(setresuid(0, 0, 0) == 0);
}

/* A 4 KiB memfd filled with byte b, size-sealed: publishable as is. */
static int own_memfd(uint8_t b)
{
	uint8_t buf[4096];
	int fd = memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	CK(fd >= 0);
	memset(buf, b, sizeof(buf));
	CK(write(fd, buf, sizeof(buf)) == (ssize_t)sizeof(buf));
	CK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
	return fd;
}

static int publish_fd(struct td_client *c, const char *name, int fd,
		      struct td_error *e)
{
	uint64_t shape[1] = {4096};
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape, .fd_count = 1,
			       .fds = &fd, .fence_fd = -1};

	return td_client_publish(c, &p, NULL, e);
}

/* GET name and check that its first byte is b. */
static int first_byte(struct td_client *c, const char *name, uint8_t b)
{
	struct td_tensor *t;
	struct td_error e = {0};
	int rc = td_client_get(c, name, &t, &e);

	if (rc < 0)
		return rc;
	rc = ((const uint8_t *)td_tensor_plane_data(t, 0))[0] == b ? 0
								    : -EILSEQ;
	td_tensor_release(t);
	return rc;
}

static uint32_t path_in(struct td_client *c)
{
	struct td_client_info info;

	CK(td_client_info(c, &info) == 0);
	return info.path_in;
}

TestSuite(hostile, .timeout = 120);

/* ---- pidfd import is never a confused deputy ---- */

static uint32_t raw_body_len; /* of the last raw_call reply */

/* Send a request (body in buf after the header); its reply's status. */
static int raw_call(int sock, uint16_t op, uint8_t *buf, size_t body_len,
		    char *reason, size_t cap)
{
	int fds[TD_WIRE_MAX_FDS];
	struct td__scm_rx rx = {.fds = fds, .cap = TD_WIRE_MAX_FDS};
	struct td_wire_hdr h = {.magic = TD_WIRE_MAGIC,
				.version = TD_WIRE_VERSION,
				.opcode = op,
				.request_id = 1,
				.body_len = (uint32_t)body_len};
	struct td_wire_error err;
	ssize_t got;

	td_wire_hdr_encode(&h, buf);
	CK(send(sock, buf, TD_WIRE_HDR_LEN + body_len, 0) ==
	   (ssize_t)(TD_WIRE_HDR_LEN + body_len));
	got = td__scm_recv(sock, buf, TD_WIRE_MAX_MSG, 0, &rx);
	CK(got >= TD_WIRE_HDR_LEN);
	td__scm_close(fds, rx.nfds);
	CK(td_wire_hdr_decode(buf, (size_t)got, &h, NULL) == 0);
	raw_body_len = h.body_len;
	reason[0] = 0;
	if (h.status < 0 &&
	    td_wire_error_decode(buf + TD_WIRE_HDR_LEN, h.body_len, &err,
				 NULL) == 0)
		snprintf(reason, cap, "%.*s", (int)err.reason.len,
			 err.reason.ptr);
	return h.status;
}

/* A raw HELLO (import_pref pref, probe_fd); the reply's status. */
static int raw_hello(int sock, uint32_t pref, int probe_fd, char *reason,
		     size_t cap, uint32_t *import_in)
{
	static uint8_t buf[TD_WIRE_MAX_MSG];
	struct td_wire_hello_req r = {pref, probe_fd, {"hostile", 7}};
	struct td_wire_hello_rep rep;
	int64_t n = td_wire_hello_req_encode(&r, buf + TD_WIRE_HDR_LEN,
					     sizeof(buf) - TD_WIRE_HDR_LEN);
	int rc;

	CK(n > 0);
	rc = raw_call(sock, TD_OP_HELLO, buf, (size_t)n, reason, cap);
	if (rc == 0 && import_in) {
		CK(td_wire_hello_rep_decode(buf + TD_WIRE_HDR_LEN,
					    raw_body_len, &rep, NULL) == 0);
		*import_in = rep.import_in;
	}
	return rc;
}

/*
 * A raw PUBLISH of name: one 4 KiB u8 plane that the daemon is to pull
 * from process pid by fd number fdnum. The reply's status.
 */
static int raw_publish_pull(int sock, const char *name, pid_t pid, int fdnum,
			    char *reason, size_t cap)
{
	static uint8_t buf[TD_WIRE_MAX_MSG], blob[TD_WIRE_MAX_BLOB];
	uint64_t shape[1] = {4096};
	int64_t strides[1] = {1};
	struct td_blob_plane pl = {.handle = 0, .stride = 4096, .size = 4096,
				   .used = 4096};
	struct td_blob_desc d = {
		.storage_kind = TD_STORAGE_SHM, .pid = (uint32_t)pid,
		.fence_fd = -1, .dtype = TD_DTYPE_U8,
		.quant_axis = TD_QUANT_NONE, .ndim = 1, .shape = shape,
		.strides_len = 1, .strides = strides, .plane_count = 1,
		.planes = &pl,
	};
	int64_t blen = td_blob_encode(&d, blob, sizeof(blob), NULL);
	struct td_wire_publish_req r = {
		.name = {name, (uint16_t)strlen(name)},
		.blob = {blob, (uint32_t)blen},
		.fd_count = 1,
	};
	int64_t n;

	CK(blen > 0);
	r.fds[0] = fdnum;
	n = td_wire_publish_req_encode(&r, buf + TD_WIRE_HDR_LEN,
				       sizeof(buf) - TD_WIRE_HDR_LEN);
	CK(n > 0);
	return raw_call(sock, TD_OP_PUBLISH, buf, (size_t)n, reason, cap);
}

/*
 * The attack of the issue, step by step: process P connects as an
 * ordinary user (nobody) and says HELLO, so the daemon may pull from it;
 * a helper H it forks keeps the socket; P then gains root (as a setuid
 * exec would) and holds a root-only memfd; H names that memfd's number in
 * a PUBLISH that claims P as the producer.
 */
static void deputy_child(void *arg)
{
	int go[2], done[2], sock, fd;
	char why[512];
	uint32_t in = 0;
	pid_t h, me = getpid();

	(void)arg;
	become_nobody_keepcaps();
	sock = tdc_connect(D.sock);
	CK(sock >= 0);
	CK(raw_hello(sock, TD_IMPORT_AUTO, sock, why, sizeof(why), &in) == 0);
	/* the check passes for what nobody could pull by itself */
	CK(in == TD_IMPORT_PIDFD);
	CK(pipe(go) == 0 && pipe(done) == 0);
	h = fork();
	CK(h >= 0);
	if (h == 0) {
		char b;
		int rc;

		CK(read(go[0], &fd, sizeof(fd)) == sizeof(fd));
		rc = raw_publish_pull(sock, "cd/stolen", me, fd, why,
				      sizeof(why));
		CK(rc == -EPERM);
		CK(strstr(why, "pidfd import refused"));
		CK(strstr(why, "not the connection's uid 65534"));
		CK(strstr(why, "SCM_RIGHTS"));
		/* and the connection stays refused (it imports by SCM now) */
		rc = raw_publish_pull(sock, "cd/stolen", me, fd, why,
				      sizeof(why));
		CK(rc == -EINVAL && strstr(why, "attach the"));
		b = 1;
		CK(write(done[1], &b, 1) == 1);
		_exit(0);
	}
	regain_root();
	fd = own_memfd(0x22);
	CK(fchmod(fd, 0600) == 0); /* root's, and only root's */
	CK(write(go[1], &fd, sizeof(fd)) == sizeof(fd));
	{
		char b;
		int st;

		CK(read(done[0], &b, 1) == 1);
		CK(waitpid(h, &st, 0) == h && WIFEXITED(st) &&
		   WEXITSTATUS(st) == 0);
	}
	/* the victim's memfd was not sealed by the attempt */
	CK((fcntl(fd, F_GET_SEALS) & F_SEAL_WRITE) == 0);
	close(fd);
	close(sock);
}

/*
 * What an honest client in the same position sees: the library sends the
 * refused PUBLISH again with its fds attached, and attaches them from then
 * on; the tensor is what this process handed over itself.
 */
static void fallback_lib_child(void *arg)
{
	struct td_client *c = NULL;
	struct td_error e = {0};
	int fd, rc;

	(void)arg;
	become_nobody_keepcaps();
	rc = td_client_connect(D.sock, &c, &e);
	if (rc < 0)
		fprintf(stderr, "connect: %d %s\n", rc, e.reason);
	CK(rc == 0);
	CK(path_in(c) == TD_IMPORT_PIDFD);
	fd = own_memfd(0x11);
	CK(publish_fd(c, "cd/mine", fd, &e) == 0);
	close(fd);
	regain_root();
	fd = own_memfd(0x22);
	CK(publish_fd(c, "cd/root", fd, &e) == 0);
	CK(path_in(c) == TD_IMPORT_SCM);
	close(fd);
	CK(first_byte(c, "cd/root", 0x22) == 0);
	CK(first_byte(c, "cd/mine", 0x11) == 0);
	td_client_close(c);
}

Test(hostile, pidfd_import_refuses_a_process_that_gained_privileges)
{
	struct td_client *c;
	struct td_error e = {0};

	if (!root())
		cr_skip_test("needs root to change credentials in a child");
	start(NULL);
	cr_assert_eq(log_count("running as root"), 1);
	in_child(deputy_child, NULL);
	in_child(fallback_lib_child, NULL);
	/* each refusal is an error reply; warnings: one per 10 s */
	cr_assert_eq(log_count("-> -1: pidfd import refused: process"), 2,
		     "log %s", D.log);
	cr_assert_eq(log_count("warn: peer pid"), 1, "log %s", D.log);
	cr_assert_eq(td_client_connect(D.sock, &c, &e), 0);
	cr_assert_eq(first_byte(c, "cd/stolen", 0x22), -ENOENT);
	td_client_close(c);
	stop();
}

/*
 * A process that makes itself non-dumpable (an exec that gains file
 * capabilities does; so does ssh-agent) is off limits to its own uid's
 * pidfd_getfd, so the daemon does not pull from it either.
 */
static void undumpable_child(void *arg)
{
	struct td_client *c = NULL;
	struct td_error e = {0};
	char why[512];
	int sock, fd, rc;

	(void)arg;
	become_nobody_keepcaps();
	sock = tdc_connect(D.sock);
	CK(sock >= 0);
	CK(raw_hello(sock, TD_IMPORT_AUTO, sock, why, sizeof(why), NULL) == 0);
	CK(prctl(PR_SET_DUMPABLE, 0) == 0);
	fd = own_memfd(0x33);
	rc = raw_publish_pull(sock, "cd/undumpable", getpid(), fd, why,
			      sizeof(why));
	CK(rc == -EPERM);
	CK(strstr(why, "not dumpable"));
	close(sock);
	/* a new connection of it is not offered the pidfd path at all */
	sock = tdc_connect(D.sock);
	CK(sock >= 0);
	CK(raw_hello(sock, TD_IMPORT_PIDFD, sock, why, sizeof(why), NULL) ==
	   -EPERM);
	CK(strstr(why, "not dumpable"));
	close(sock);
	CK(td_client_connect(D.sock, &c, &e) == 0);
	CK(path_in(c) == TD_IMPORT_SCM);
	CK(publish_fd(c, "cd/undumpable", fd, &e) == 0);
	close(fd);
	CK(first_byte(c, "cd/undumpable", 0x33) == 0);
	td_client_close(c);
}

Test(hostile, pidfd_import_refuses_a_process_that_is_not_dumpable)
{
	if (!root())
		cr_skip_test("needs root to change credentials in a child");
	start(NULL);
	in_child(undumpable_child, NULL);
	stop();
}

/*
 * Without SO_PEERPIDFD the daemon holds a pidfd it opened by number, which
 * a reused pid could fool; it imports by pidfd only once the probe fd
 * proves to be the other end of this very connection.
 */
static void fallback_child(void *arg)
{
	struct td_client *c = NULL;
	struct td_error e = {0};
	char why[256];
	int sock, other, fd;

	(void)arg;
	become_nobody_keepcaps();
	CK(td_client_connect(D.sock, &c, &e) == 0);
	CK(path_in(c) == TD_IMPORT_PIDFD);
	fd = own_memfd(0x44);
	CK(publish_fd(c, "cd/fallback", fd, &e) == 0);
	close(fd);
	CK(first_byte(c, "cd/fallback", 0x44) == 0);
	td_client_close(c);
	/* a probe fd that is a socket, but not this connection's */
	sock = tdc_connect(D.sock);
	other = tdc_connect(D.sock);
	CK(sock >= 0 && other >= 0);
	CK(raw_hello(sock, TD_IMPORT_PIDFD, other, why, sizeof(why), NULL) ==
	   -EPERM);
	CK(strstr(why, "not this connection's socket"));
	CK(raw_hello(other, TD_IMPORT_PIDFD, other, why, sizeof(why), NULL) ==
	   0);
	close(sock);
	close(other);
}

Test(hostile, without_so_peerpidfd_the_probe_must_be_the_connection)
{
	if (!root())
		cr_skip_test("needs root to change credentials in a child");
	setenv("TENSORD_TEST_NO_PEERPIDFD", "1", 1);
	start(NULL);
	unsetenv("TENSORD_TEST_NO_PEERPIDFD");
	in_child(fallback_child, NULL);
	stop();
}
