/* SPDX-License-Identifier: MIT */
/*
 * A peer's descriptor must never make the daemon wait on a filesystem
 * the peer serves. A file on a FUSE mount answers fstat() and fstatfs()
 * only when its server does; one that never answers would hold the
 * daemon's single loop (every tenant) for as long as the server lives.
 * Here the server answers this test and reports, without answering,
 * whatever the daemon asks; a report is the defect, seen at once.
 * Skipped where FUSE cannot be mounted (no /dev/fuse, not root). The
 * same for a TCP socket with SO_LINGER whose last close is the daemon's
 * (below): no server needed, any tenant can make one.
 */
#include "rawclient.h"
#include "testchild.h"

#include "blob.h"
#include "wire-status.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(stall, .timeout = TU_TEST_TIMEOUT_S);

static struct tu_daemon D;
static char mnt[96];
static pid_t server = -1;
static int report_rd = -1; /* (opcode, pid) of each request not answered */
static bool flushed;       /* a FLUSH came from another daemon thread */

static void reply(int fd, uint64_t unique, int error, const void *body,
		  size_t len)
{
	uint8_t buf[sizeof(struct fuse_out_header) + 256];
	struct fuse_out_header o = {
		.len = (uint32_t)(sizeof(o) + (error ? 0 : len)),
		.error = error,
		.unique = unique,
	};

	memcpy(buf, &o, sizeof(o));
	if (!error)
		memcpy(buf + sizeof(o), body, len);
	(void)!write(fd, buf, o.len);
}

static void attr_of(uint64_t node, struct fuse_attr *a)
{
	*a = (struct fuse_attr){.ino = node, .nlink = 1, .size = 4096,
				.blksize = 4096};
	a->mode = node == FUSE_ROOT_ID ? S_IFDIR | 0755 : S_IFREG | 0666;
}

/* The server: answers pid `asker`, reports and ignores everyone else. */
static void serve(int fd, pid_t asker, int report)
{
	static uint8_t buf[1 << 17];

	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		struct fuse_in_header *in = (void *)buf;
		void *arg = buf + sizeof(*in);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < (ssize_t)sizeof(*in))
			_exit(0); /* unmounted */
		if (in->opcode == FUSE_INTERRUPT || in->opcode == FUSE_FORGET ||
		    in->opcode == FUSE_BATCH_FORGET || in->opcode == FUSE_DESTROY)
			continue;
		if (in->opcode == FUSE_INIT) {
			struct fuse_init_in *ii = arg;
			struct fuse_init_out io = {
				.major = FUSE_KERNEL_VERSION,
				.minor = FUSE_KERNEL_MINOR_VERSION,
				.max_readahead = ii->max_readahead,
				.max_write = 4096,
			};

			reply(fd, in->unique, 0, &io, sizeof(io));
			continue;
		}
		if ((pid_t)in->pid != asker) {
			uint32_t r[2] = {in->opcode, in->pid};

			(void)!write(report, r, sizeof(r));
			continue;
		}
		if (in->opcode == FUSE_LOOKUP && !strcmp(arg, "f")) {
			struct fuse_entry_out e = {.nodeid = 2, .generation = 1};

			attr_of(2, &e.attr);
			reply(fd, in->unique, 0, &e, sizeof(e));
		} else if (in->opcode == FUSE_GETATTR) {
			struct fuse_attr_out a = {0};

			attr_of(in->nodeid, &a.attr);
			reply(fd, in->unique, 0, &a, sizeof(a));
		} else if (in->opcode == FUSE_OPEN) {
			struct fuse_open_out o = {.fh = 1};

			reply(fd, in->unique, 0, &o, sizeof(o));
		} else if (in->opcode == FUSE_FLUSH ||
			   in->opcode == FUSE_RELEASE) {
			reply(fd, in->unique, 0, NULL, 0);
		} else {
			reply(fd, in->unique, -ENOSYS, NULL, 0);
		}
	}
}

/* Mount the stalling filesystem; false where this machine cannot. */
static bool mount_stall(void)
{
	char opts[128];
	int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC), p[2];
	pid_t me = getpid();

	if (fd < 0)
		return false;
	snprintf(mnt, sizeof(mnt), "%s/fuse", D.dir);
	cr_assert_eq(mkdir(mnt, 0755), 0);
	snprintf(opts, sizeof(opts),
		 "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", fd);
	if (mount("stall", mnt, "fuse", MS_NOSUID | MS_NODEV, opts) < 0) {
		close(fd);
		rmdir(mnt);
		mnt[0] = 0;
		return false;
	}
	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	server = fork();
	cr_assert_geq(server, 0);
	if (server == 0) {
		close(p[0]);
		serve(fd, me, p[1]);
	}
	close(fd);
	close(p[1]);
	report_rd = p[0];
	return true;
}

static void start(void)
{
	tu_daemon_start(&D, "warn");
}

static void stop(void)
{
	/* a dead server aborts the connection: a stuck daemon gets ENOTCONN */
	if (mnt[0])
		umount2(mnt, MNT_DETACH);
	if (server > 0) {
		kill(server, SIGKILL);
		waitpid(server, NULL, 0);
		server = -1;
	}
	if (report_rd >= 0)
		close(report_rd);
	report_rd = -1;
	flushed = false;
	if (mnt[0])
		rmdir(mnt);
	mnt[0] = 0;
	tu_daemon_stop(&D, false);
}

/*
 * How many of the daemon's descriptors are links to target (its
 * /proc/PID/fd entry; readlink asks no filesystem). Not a count of all
 * of them: the daemon may still be closing the connection
 * tu_daemon_start() probed the socket with, a moment later under load.
 */
static int daemon_holds(const char *target)
{
	char path[64], link[4096];
	struct dirent *e;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)D.pid);
	dir = opendir(path);
	cr_assert(dir, "%s: %s", path, strerror(errno));
	while ((e = readdir(dir))) {
		char fd[320];
		ssize_t len;

		if (e->d_name[0] == '.')
			continue;
		snprintf(fd, sizeof(fd), "%s/%s", path, e->d_name);
		len = readlink(fd, link, sizeof(link) - 1);
		if (len <= 0)
			continue;
		link[len] = 0;
		n += !strcmp(link, target);
	}
	closedir(dir);
	return n;
}

/* The daemon's descriptors of the stalling filesystem's file. */
static int daemon_fuse_fds(void)
{
	char f[160];

	snprintf(f, sizeof(f), "%s/f", mnt);
	return daemon_holds(f);
}

/* One request the server did not answer: none may be the loop's. */
static void read_report(const char *what)
{
	uint32_t r[2];

	cr_assert_eq(read(report_rd, r, sizeof(r)), (ssize_t)sizeof(r));
	cr_assert_neq((pid_t)r[1], D.pid,
		      "%s: the daemon's loop (pid %d) asked the peer's FUSE "
		      "server (opcode %u) and waits for its answer",
		      what, (int)D.pid, r[0]);
	if (r[0] == FUSE_FLUSH)
		flushed = true;
}

/*
 * Wait for sock's reply. A request the daemon's loop (its thread of the
 * daemon's pid) sent the server first is the loop waiting on it: fail
 * naming it. Its other threads may wait (a close off the loop).
 */
static void await_reply_not_fuse(int sock, const char *what)
{
	for (;;) {
		struct pollfd pf[2] = {{report_rd, POLLIN, 0},
				       {sock, POLLIN, 0}};

		cr_assert_gt(poll(pf, 2, TU_WAIT_S * 1000), 0, "%s: no reply",
			     what);
		if (!(pf[0].revents & POLLIN))
			return;
		read_report(what);
	}
}

/*
 * The file was closed off the loop: its FLUSH is the close, sent once
 * the descriptor is out of the daemon's table (so counting the daemon's
 * descriptors after it is no race).
 */
static void await_closed(const char *what)
{
	while (!flushed) {
		tu_await_readable(report_rd, TU_WAIT_S, what);
		read_report(what);
	}
	flushed = false;
}

/* A file of the stalling filesystem, opened by this process. */
static int fuse_file(void)
{
	char path[160];
	int fd;

	snprintf(path, sizeof(path), "%s/f", mnt);
	fd = open(path, O_RDWR | O_CLOEXEC);
	cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
	return fd;
}

/*
 * PUBLISH a 4 KiB u8 tensor of one plane with fd attached (the plane,
 * or with alloc_id a copy of that alloc's plane); await the reply, which
 * must be the refusal -EINVAL without the fd kept.
 */
static void publish_refused(int sock, int fd, uint64_t alloc_id,
			    const char *what)
{
	uint8_t blob[256];
	int64_t bl = raw_blob_u8(4096, 0, blob, sizeof(blob));
	struct td_wire_publish_req m = {
		.name = {"stall", 5},
		.alloc_id = alloc_id,
		.meta = {(const uint8_t *)"m", 1},
		.blob = {blob, (uint32_t)bl},
		.fd_count = 1,
		.fds = {fd},
	};
	struct td_wire_hdr h = {TD_WIRE_MAGIC, TD_WIRE_VERSION, TD_OP_PUBLISH,
				0, 1, 2, 0, 0};
	struct rawrep r;
	int64_t n;

	cr_assert_gt(bl, 0);
	n = td_wire_publish_req_encode(&m, RAW_BODY, RAW_CAP);
	cr_assert_gt(n, 0);
	h.body_len = (uint32_t)n;
	td_wire_hdr_encode(&h, rawbuf);
	cr_assert_eq(td__scm_send(sock, rawbuf, TD_WIRE_HDR_LEN + (size_t)n,
				  &fd, 1, 0),
		     TD_WIRE_HDR_LEN + n);
	await_reply_not_fuse(sock, what);
	raw_recv(sock, &r);
	cr_assert_eq(r.h.status, -EINVAL, "%s: status %d", what, r.h.status);
	await_closed(what);
	cr_assert_eq(daemon_fuse_fds(), 0, "%s: the refused fd was kept", what);
}

Test(stall, a_fuse_file_as_a_plane_is_refused_without_asking_its_server,
     .init = start, .fini = stop)
{
	int sock, fd;

	if (!mount_stall())
		cr_skip_test("kernel feature missing: FUSE cannot be mounted "
			     "here (no /dev/fuse, or not root); a peer's FUSE "
			     "file was not tried");
	fd = fuse_file();
	sock = raw_scm_conn(&D);
	publish_refused(sock, fd, 0, "PUBLISH of a FUSE file");
	close(sock);
	close(fd);
}

Test(stall, a_fuse_file_as_an_alloc_planes_copy_is_refused_the_same,
     .init = start, .fini = stop)
{
	struct td_wire_alloc_req q = {.flags = TD_WIRE_REQ_SCM,
				      .plane_count = 1,
				      .sizes = {4096}};
	struct td_wire_alloc_rep ar;
	struct rawrep r;
	int sock, fd;
	int64_t n;

	if (!mount_stall())
		cr_skip_test("kernel feature missing: FUSE cannot be mounted "
			     "here (no /dev/fuse, or not root); a peer's FUSE "
			     "file was not tried");
	fd = fuse_file();
	sock = raw_scm_conn(&D);
	n = td_wire_alloc_req_encode(&q, RAW_BODY, RAW_CAP);
	cr_assert_eq(raw_call(sock, TD_OP_ALLOC, 3, n, &r), 0);
	cr_assert_eq(td_wire_alloc_rep_decode(RAW_BODY, r.h.body_len, &ar,
					      NULL),
		     0);
	td__scm_close(r.fds, r.nfds);
	publish_refused(sock, fd, ar.alloc_id,
			"PUBLISH of an alloc with a FUSE file as its plane");
	close(sock);
	close(fd);
}

Test(stall, a_fuse_file_as_the_hello_probe_is_not_asked_either,
     .init = start, .fini = stop)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct td_wire_hello_req hr = {TD_IMPORT_AUTO, -1, {"stall", 5}, 0};
	struct rawrep r;
	int sock, fd;
	int64_t n;

	if (!mount_stall())
		cr_skip_test("kernel feature missing: FUSE cannot be mounted "
			     "here (no /dev/fuse, or not root); a peer's FUSE "
			     "file was not tried");
	fd = fuse_file();
	sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	cr_assert_geq(sock, 0);
	memcpy(sa.sun_path, D.sock, sizeof(D.sock));
	cr_assert_eq(connect(sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
	/* a STATUS before HELLO is refused, and proves the peer accepted */
	raw_send(sock, TD_OP_STATUS, 9, 0);
	raw_recv(sock, &r);
	cr_assert_eq(r.h.status, -EPROTO);
	/* the daemon pulls the probe (pidfd_getfd) to see what it is */
	hr.probe_fd = fd;
	n = td_wire_hello_req_encode(&hr, RAW_BODY, RAW_CAP);
	cr_assert_gt(n, 0);
	raw_send(sock, TD_OP_HELLO, 1, (size_t)n);
	await_reply_not_fuse(sock, "HELLO probing a FUSE file");
	raw_recv(sock, &r);
	/* not the connection: imports by SCM_RIGHTS */
	cr_assert_eq(r.h.status, 0);
	td__scm_close(r.fds, r.nfds);
	await_closed("the pulled probe's close");
	cr_assert_eq(daemon_fuse_fds(), 0, "the pulled probe was kept");
	close(sock);
	close(fd);
}

/* Past the 16 fds a request may carry, a FUSE file is closed off the
 * loop too (the daemon refuses the message and drops the peer). */
Test(stall, a_fuse_file_past_the_fd_cap_is_not_asked_either, .init = start,
     .fini = stop)
{
	int fds[TD_WIRE_MAX_FDS + 1];
	struct rawrep r;
	int sock, ev0;

	if (!mount_stall())
		cr_skip_test("kernel feature missing: FUSE cannot be mounted "
			     "here (no /dev/fuse, or not root); a peer's FUSE "
			     "file was not tried");
	for (int i = 0; i < TD_WIRE_MAX_FDS; i++) {
		fds[i] = eventfd(0, EFD_CLOEXEC);
		cr_assert_geq(fds[i], 0);
	}
	fds[TD_WIRE_MAX_FDS] = fuse_file();
	sock = raw_scm_conn(&D);
	/* the daemon's own (libuv's wake-up), which the test's are not */
	ev0 = daemon_holds("anon_inode:[eventfd]");
	memset(rawbuf, 0, TD_WIRE_HDR_LEN);
	td_wire_hdr_encode(&(struct td_wire_hdr){TD_WIRE_MAGIC,
						 TD_WIRE_VERSION, TD_OP_STATUS,
						 0, TD_WIRE_MAX_FDS + 1, 4, 0,
						 0},
			   rawbuf);
	cr_assert_eq(td__scm_send(sock, rawbuf, TD_WIRE_HDR_LEN, fds,
				  TD_WIRE_MAX_FDS + 1, 0),
		     TD_WIRE_HDR_LEN);
	await_reply_not_fuse(sock, "a request with 17 fds, a FUSE file last");
	raw_recv(sock, &r);
	cr_assert_eq(r.h.status, -EPROTO);
	await_closed("the 17th fd's close");
	/* dropped: the peer's connection is gone, none of its fds kept */
	cr_assert_eq(recv(sock, rawbuf, 1, 0), 0);
	cr_assert_eq(daemon_fuse_fds(), 0, "the FUSE file was kept");
	cr_assert_eq(daemon_holds("anon_inode:[eventfd]"), ev0,
		     "eventfds kept: %d, before %d",
		     daemon_holds("anon_inode:[eventfd]"), ev0);
	close(sock);
	for (int i = 0; i <= TD_WIRE_MAX_FDS; i++)
		close(fds[i]);
}

/* ---- a TCP socket that lingers ---- */

/*
 * With SO_LINGER, the close of a TCP socket's last reference waits, up to
 * the linger time, for its FIN to be acknowledged; a FIN queued behind
 * bytes the other end never reads is never sent. Such a socket, held
 * only in flight inside a unix socket s2, makes the last close of s2 the
 * wait. The daemon must not make that close on its loop.
 */
static int tcp_l = -1, tcp_a = -1;

static bool held;

static void linger_stop(void)
{
	if (held)
		kill(D.pid, SIGCONT);
	held = false;
	/* the reader's close resets the connection: the close returns */
	if (tcp_a >= 0)
		close(tcp_a);
	if (tcp_l >= 0)
		close(tcp_l);
	tcp_a = tcp_l = -1;
	tu_daemon_stop(&D, false);
}

/*
 * The daemon is held (SIGSTOP) while a test queues what it will read:
 * the test's own close of s2 must come before the daemon's, or the test
 * makes the lingering close itself.
 */
static void hold(bool on)
{
	cr_assert_eq(kill(D.pid, on ? SIGSTOP : SIGCONT), 0);
	held = on;
}

/* A unix socket whose queue holds the only reference of a lingering TCP
 * socket with unsent bytes. */
static int lingering_chain(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct linger lg = {1, 3600};
	socklen_t sl = sizeof(sa);
	int small = 4096, c, sp[2], unsent = 0;
	static char junk[4096];

	tcp_l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(tcp_l, 0);
	cr_assert_eq(setsockopt(tcp_l, SOL_SOCKET, SO_RCVBUF, &small,
				sizeof(small)),
		     0);
	cr_assert_eq(bind(tcp_l, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(getsockname(tcp_l, (struct sockaddr *)&sa, &sl), 0);
	cr_assert_eq(listen(tcp_l, 1), 0);
	c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	cr_assert_geq(c, 0);
	cr_assert_eq(setsockopt(c, SOL_SOCKET, SO_SNDBUF, &small,
				sizeof(small)),
		     0);
	cr_assert(connect(c, (struct sockaddr *)&sa, sizeof(sa)) == 0 ||
		  errno == EINPROGRESS);
	tcp_a = accept4(tcp_l, NULL, NULL, SOCK_CLOEXEC);
	cr_assert_geq(tcp_a, 0);
	/* until bytes wait unsent: the reader's window is shut */
	while (unsent <= 0) {
		struct pollfd pf = {c, POLLOUT, 0};

		while (send(c, junk, sizeof(junk), MSG_NOSIGNAL) > 0)
			;
		cr_assert_eq(errno, EAGAIN);
		cr_assert_eq(ioctl(c, SIOCOUTQNSD, &unsent), 0);
		if (unsent <= 0)
			cr_assert_gt(poll(&pf, 1, TU_WAIT_S * 1000), 0);
	}
	cr_assert_eq(setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sp), 0);
	cr_assert_eq(td__scm_send(sp[0], "c", 1, &c, 1, 0), 1);
	close(c);
	close(sp[0]);
	return sp[1];
}

/* A STATUS request (id) carrying fd, sent on sock; this side's fd closed
 * (the daemon's copy, once read, is the last). */
static void send_status_with_fd(int sock, uint64_t id, int fd)
{
	struct td_wire_hdr h = {TD_WIRE_MAGIC, TD_WIRE_VERSION, TD_OP_STATUS,
				0, 1, id, 0, 0};

	td_wire_hdr_encode(&h, rawbuf);
	cr_assert_eq(td__scm_send(sock, rawbuf, TD_WIRE_HDR_LEN, &fd, 1, 0),
		     TD_WIRE_HDR_LEN);
	close(fd);
}

/*
 * Connect and HELLO, then send requests the daemon answers without
 * reading the answers until its reply to one cannot be sent: from then
 * on it reads nothing more of this connection until this side reads.
 */
static int stalled_conn(void)
{
	int sock = raw_scm_conn(&D);
	long qlen = 10;
	FILE *f = fopen("/proc/sys/net/unix/max_dgram_qlen", "r");

	if (f) {
		cr_assert_eq(fscanf(f, "%ld", &qlen), 1);
		fclose(f);
	}
	/* qlen + 1 answers fill this side's queue, one more waits */
	for (long i = 0; i < qlen + 2; i++)
		raw_send(sock, TD_OP_STATUS, 100 + (uint64_t)i, 0);
	return sock;
}

/* Read this side's replies until id's: the daemon reads again. */
static void drain_until(int sock, uint64_t id)
{
	struct rawrep r;

	do
		raw_recv(sock, &r);
	while (r.h.request_id != id);
}

/* Whether the daemon's loop waits in a socket's close (wait_woken). */
static bool loop_waits_in_close(void)
{
	char path[64], w[64] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/wchan", (int)D.pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	if (!fgets(w, sizeof(w), f))
		w[0] = 0;
	fclose(f);
	return !strcmp(w, "wait_woken");
}

/* Await sock's reply to id; the loop caught waiting in a close fails. */
static void await_not_lingering(int sock, uint64_t id, const char *what)
{
	struct rawrep r;

	for (int waited = 0;; waited += 10) {
		struct pollfd pf = {sock, POLLIN, 0};

		cr_assert(!loop_waits_in_close(),
			  "%s: the daemon's loop waits in the close of a "
			  "lingering socket",
			  what);
		cr_assert_lt(waited, TU_WAIT_S * 1000, "%s: no reply", what);
		if (poll(&pf, 1, 10) > 0)
			break;
	}
	do
		raw_recv(sock, &r);
	while (r.h.request_id != id);
}

Test(stall, a_lingering_socket_sent_with_a_request_is_closed_off_the_loop,
     .init = start, .fini = linger_stop)
{
	int s2 = lingering_chain();
	int sock = stalled_conn();
	int v = raw_scm_conn(&D);

	/* unread until the drain below: the daemon holds s2 alone then
	 * (a loaded daemon may still be reading the stalled requests) */
	hold(true);
	send_status_with_fd(sock, 7, s2);
	hold(false);
	/* the first answer read: the daemon reads on, the request too */
	drain_until(sock, 100);
	/* another client is answered: STATUS carries no fds, -EINVAL */
	raw_send(v, TD_OP_STATUS, 8, 0);
	await_not_lingering(v, 8, "after a request with a lingering socket");
	close(v);
	close(sock);
}

/*
 * The thread of the daemon, other than its loop when off_loop, whose
 * wchan starts with wchan, or 0 when none does.
 */
static pid_t thread_waiting_in(const char *wchan, bool off_loop)
{
	char path[96], w[64];
	pid_t found = 0;
	struct dirent *e;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)D.pid);
	dir = opendir(path);
	cr_assert(dir, "%s: %s", path, strerror(errno));
	while (!found && (e = readdir(dir))) {
		pid_t tid = (pid_t)atoi(e->d_name);
		FILE *f;

		if (tid <= 0 || (off_loop && tid == D.pid))
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%d/wchan",
			 (int)D.pid, (int)tid);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(w, sizeof(w), f) && !strncmp(w, wchan, strlen(wchan)))
			found = tid;
		fclose(f);
	}
	closedir(dir);
	return found;
}

/* ... in a lingering close (wait_woken) */
static pid_t thread_in_close(bool off_loop)
{
	return thread_waiting_in("wait_woken", off_loop);
}

/* Until some thread of the daemon waits in the lingering close. */
static pid_t await_lingering(const char *what)
{
	pid_t tid;

	for (int waited = 0; !(tid = thread_in_close(false)); waited += 10) {
		cr_assert_lt(waited, TU_WAIT_S * 1000,
			     "%s: the daemon never closed the lingering "
			     "socket",
			     what);
		poll(NULL, 0, 10);
	}
	return tid;
}


/* Until the daemon ends sock (after which it released what it held). */
static void await_hang_up(int sock, const char *what)
{
	char byte;

	for (;;) {
		ssize_t n;

		tu_await_readable(sock, TU_WAIT_S, what);
		n = recv(sock, &byte, 1, MSG_DONTWAIT);
		if (n == 0)
			return;
		cr_assert(n > 0 || errno == ECONNRESET, "%s: recv: %s", what,
			  strerror(errno));
	}
}

/* Once a close lingers: client v is answered, the close still waiting
 * off the loop. */
static void answered_while_lingering(int v, const char *what)
{
	await_lingering(what);
	raw_send(v, TD_OP_STATUS, 8, 0);
	await_not_lingering(v, 8, what);
	cr_assert_neq(thread_in_close(true), 0,
		      "%s: the lingering close ended before the answer", what);
}

/*
 * A lingering chain s2 (above) in a datagram the daemon never reads, on
 * a connection that ends first: the client hangs up after requests the
 * daemon has not read yet (it fails to answer the first and drops the
 * connection), or the empty datagram before it ends the connection (the
 * client still there). Both are queued while the daemon is held, so it
 * reads them in that order. The daemon's end of the connection then
 * holds s2's last reference; releasing it is the lingering close.
 * Another client must be answered while it lingers.
 */
static void unread_lingering_socket(bool hang_up, const char *what)
{
	int s2 = lingering_chain();
	int sock = raw_scm_conn(&D);
	int v = raw_scm_conn(&D);

	cr_assert_eq(thread_in_close(false), 0, "%s: a close waits already",
		     what);
	hold(true);
	if (hang_up)
		for (uint64_t i = 0; i < 4; i++)
			raw_send(sock, TD_OP_STATUS, 100 + i, 0);
	else
		cr_assert_eq(send(sock, "", 0, MSG_NOSIGNAL), 0);
	send_status_with_fd(sock, 7, s2);
	if (hang_up) {
		close(sock);
		sock = -1;
	}
	hold(false);
	/* the daemon's hang-up: after it, it released s2 */
	if (sock >= 0)
		await_hang_up(sock, what);
	/* the close of s2 lingers (3600 s) from now on */
	answered_while_lingering(v, what);
	close(v);
	if (sock >= 0)
		close(sock);
}

Test(stall, a_lingering_socket_unread_at_a_hang_up_is_closed_off_the_loop,
     .init = start, .fini = linger_stop)
{
	unread_lingering_socket(true, "a hang-up with a lingering socket "
				      "unread");
}

Test(stall, a_lingering_socket_unread_when_the_daemon_ends_a_connection_is_closed_off_the_loop,
     .init = start, .fini = linger_stop)
{
	unread_lingering_socket(false, "a connection the daemon ends with a "
				       "lingering socket unread");
}

static char policy[64];

/* root (this test) may hold two connections: a third is refused */
static void start_two_conns(void)
{
	static const char *extra[] = {"--policy", policy, NULL};
	FILE *f;

	snprintf(policy, sizeof(policy), "/tmp/td-stall-%d", (int)getpid());
	f = fopen(policy, "w");
	cr_assert(f);
	fputs("allow any r z/\nlimit uid=0 conns 2\n", f);
	fclose(f);
	tu_daemon_start_args(&D, "warn", extra);
}

static void stop_two_conns(void)
{
	linger_stop();
	unlink(policy);
}

Test(stall, a_lingering_socket_unread_in_a_refused_connection_is_closed_off_the_loop,
     .init = start_two_conns, .fini = stop_two_conns)
{
	const char *what = "a refused connection with a lingering socket "
			   "unread";
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int s2 = lingering_chain();
	int kept = raw_scm_conn(&D);
	int v = raw_scm_conn(&D);
	int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct td_wire_hdr h = {TD_WIRE_MAGIC, TD_WIRE_VERSION, TD_OP_STATUS,
				0, 1, 7, 0, 0};

	cr_assert_geq(sock, 0);
	memcpy(sa.sun_path, D.sock, sizeof(D.sock));
	/* all in its queue before the daemon accepts it: it is stopped */
	hold(true);
	cr_assert_eq(connect(sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
	td_wire_hdr_encode(&h, rawbuf);
	/* more than the refusal reads (its HELLO, a few more) */
	for (int i = 0; i < 8; i++)
		cr_assert_eq(send(sock, rawbuf, TD_WIRE_HDR_LEN, MSG_NOSIGNAL),
			     TD_WIRE_HDR_LEN);
	cr_assert_eq(td__scm_send(sock, rawbuf, TD_WIRE_HDR_LEN, &s2, 1, 0),
		     TD_WIRE_HDR_LEN);
	close(s2);
	hold(false);
	/* refused: the daemon released s2, whose close lingers (3600 s) */
	answered_while_lingering(v, what);
	close(sock);
	close(v);
	close(kept);
}

/*
 * A datagram may carry up to the kernel's SCM_MAX_FD (253) fds. Had the
 * daemon's control buffer room for fewer, the kernel would let those
 * left out go inside its recvmsg, on the loop: here the lingering chain
 * s2 rides 65th, past what a request may carry (16) and past the 64 the
 * buffer had room for. The request is refused and the connection ended;
 * s2's close must linger on a thread of its own.
 */
Test(stall, a_lingering_socket_past_a_datagrams_fd_room_is_closed_off_the_loop,
     .init = start, .fini = linger_stop)
{
	const char *what = "a lingering socket 65th in a datagram";
	enum { N = 65 };
	int s2 = lingering_chain();
	int sock = raw_scm_conn(&D);
	int v = raw_scm_conn(&D);
	struct td_wire_hdr h = {TD_WIRE_MAGIC, TD_WIRE_VERSION, TD_OP_STATUS,
				0, 1, 7, 0, 0};
	union {
		char buf[CMSG_SPACE(sizeof(int) * N)];
		struct cmsghdr align;
	} ctl;
	int fds[N];
	struct iovec iov = {rawbuf, TD_WIRE_HDR_LEN};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = ctl.buf,
			    .msg_controllen = sizeof(ctl.buf)};
	struct cmsghdr *cm;

	for (int i = 0; i < N - 1; i++) {
		fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		cr_assert_geq(fds[i], 0);
	}
	fds[N - 1] = s2;
	memset(&ctl, 0, sizeof(ctl));
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int) * N);
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	td_wire_hdr_encode(&h, rawbuf);
	hold(true);
	cr_assert_eq(sendmsg(sock, &mh, MSG_NOSIGNAL), TD_WIRE_HDR_LEN, "%s",
		     strerror(errno));
	for (int i = 0; i < N; i++)
		close(fds[i]);
	hold(false);
	/* refused (-EPROTO) and ended: after it, it released s2 */
	await_hang_up(sock, what);
	answered_while_lingering(v, what);
	close(v);
	close(sock);
}

/* The lowest descriptor number free in pid. */
static int lowest_free_fd(pid_t pid)
{
	char path[96];

	for (int fd = 0;; fd++) {
		snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
		if (access(path, F_OK) < 0)
			return fd;
	}
}

/*
 * A connection never accepted: the daemon is out of descriptors (its
 * RLIMIT_NOFILE lowered to its lowest free number, so accept4 fails with
 * EMFILE and it backs off) when a client connects and queues a lingering
 * chain. The stop's close of the listening socket ends that connection
 * and lets s2 go; that close must not hold the daemon's exit (the
 * linger time, 3600 s): tu_daemon_stop waits TU_WAIT_S for it.
 */
Test(stall, a_lingering_socket_in_a_connection_never_accepted_does_not_hold_the_stop,
     .init = start, .fini = linger_stop)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int s2 = lingering_chain();
	int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct rlimit rl;
	pid_t pid;
	int st;

	cr_assert_geq(sock, 0);
	hold(true);
	cr_assert_eq(prlimit(D.pid, RLIMIT_NOFILE, NULL, &rl), 0);
	rl.rlim_cur = (rlim_t)lowest_free_fd(D.pid);
	cr_assert_eq(prlimit(D.pid, RLIMIT_NOFILE, &rl, NULL), 0, "%s",
		     strerror(errno));
	memcpy(sa.sun_path, D.sock, sizeof(D.sock));
	cr_assert_eq(connect(sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
	send_status_with_fd(sock, 7, s2);
	hold(false);
	/* still not accepted: nothing came back */
	cr_assert_eq(recv(sock, rawbuf, 1, MSG_DONTWAIT), -1);
	cr_assert_eq(errno, EAGAIN);
	/* tu_daemon_stop's own checks would count this test's fds */
	pid = D.pid;
	D.pid = 0;
	cr_assert_eq(kill(pid, SIGTERM), 0);
	cr_assert(tu_reap_within(pid, TU_WAIT_S, &st),
		  "tensord did not exit within %d s of SIGTERM: its stop "
		  "waits in the lingering close (killed)",
		  TU_WAIT_S);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x", st);
	unlink(D.sock);
	rmdir(D.dir);
	close(sock);
}

/*
 * One close that never returns on td-closer-peer (here a lingering chain,
 * 3600 s) must not hold the closes queued after it: a socket the test
 * sends next, whose other end the test keeps, must be closed (its end
 * sees the hang-up) while the first still lingers.
 */
Test(stall, a_close_that_lingers_holds_no_other_peers_close,
     .init = start, .fini = linger_stop)
{
	const char *what = "a socket sent after a lingering one";
	int s2 = lingering_chain();
	int sock = raw_scm_conn(&D);
	struct pollfd pf = {.events = POLLIN};
	int sp[2];

	hold(true);
	send_status_with_fd(sock, 7, s2);
	hold(false);
	drain_until(sock, 7);
	/* s2's close lingers (3600 s) on a thread off the loop */
	await_lingering(what);
	cr_assert_neq(thread_in_close(true), 0, "%s", what);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp),
		     0);
	send_status_with_fd(sock, 8, sp[1]);
	drain_until(sock, 8);
	/* the daemon's reference was the last: its close is the hang-up */
	pf.fd = sp[0];
	cr_assert_gt(poll(&pf, 1, TU_WAIT_S * 1000), 0,
		     "%s: never closed (queued behind the lingering close)",
		     what);
	cr_assert(pf.revents & (POLLHUP | POLLIN), "%s: revents %#x", what,
		  pf.revents);
	cr_assert_eq(read(sp[0], rawbuf, 1), 0, "%s: not at its end", what);
	cr_assert_neq(thread_in_close(true), 0,
		      "%s: the lingering close ended first", what);
	close(sp[0]);
	close(sock);
}

/* ---- write seals a PUBLISH leaves to the daemon ---- */

/*
 * A 4 KiB plain loan on sock, its page written and then held by a pipe
 * it was vmspliced into (*pipe_rd, *pipe_wr), no mapping left: the
 * kernel's write seal of it waits about 150 ms and fails (EBUSY). Its
 * alloc id; the plane's fd in *fd.
 */
static uint64_t held_loan(int sock, uint64_t id, int *fd, int pp[2])
{
	struct td_wire_alloc_req q = {.flags = TD_WIRE_REQ_SCM,
				      .plane_count = 1, .sizes = {4096}};
	struct td_wire_alloc_rep rep;
	struct iovec iov;
	struct rawrep r;
	uint8_t *p;

	cr_assert_eq(raw_call(sock, TD_OP_ALLOC, id,
			      td_wire_alloc_req_encode(&q, RAW_BODY, RAW_CAP),
			      &r),
		     0);
	cr_assert_eq(td_wire_alloc_rep_decode(RAW_BODY, r.h.body_len, &rep,
					      NULL),
		     0);
	cr_assert_eq(r.nfds, 1);
	*fd = r.fds[0];
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	cr_assert(p != MAP_FAILED);
	memset(p, 0x5a, 4096);
	cr_assert_eq(pipe2(pp, O_CLOEXEC), 0);
	iov = (struct iovec){p, 4096};
	cr_assert_eq(vmsplice(pp[1], &iov, 1, 0), 4096, "vmsplice: %s",
		     strerror(errno));
	munmap(p, 4096);
	return rep.alloc_id;
}

/* The daemon's thread waiting in a memfd's write seal (memfd_fcntl) */
static pid_t thread_in_seal(bool off_loop)
{
	return thread_waiting_in("memfd", off_loop);
}

/*
 * Until sock has a reply, watching the daemon's threads: its loop must
 * never be the one waiting in the seal; true when another thread was
 * seen waiting in it, and client v, asked meanwhile, was answered.
 */
static bool sealed_off_loop(int sock, int v, const char *what)
{
	bool seen = false;

	for (int waited = 0;; waited++) {
		struct pollfd pf = {sock, POLLIN, 0};
		pid_t tid = thread_in_seal(false);

		cr_assert_neq(tid, D.pid,
			      "%s: the daemon's loop waits in a write seal",
			      what);
		if (tid && !seen) {
			seen = true;
			raw_send(v, TD_OP_STATUS, 8, 0);
			await_not_lingering(v, 8, what);
		}
		cr_assert_lt(waited, TU_WAIT_S * 1000, "%s: no reply", what);
		if (poll(&pf, 1, 1) > 0)
			return seen;
	}
}

/* The PUBLISH body of alloc as name (4 KiB, no fd attached) in rawbuf */
static size_t pub_body(const char *name, uint64_t alloc)
{
	int64_t n = raw_pub_body(name, alloc, 4096, 0, 0, RAW_BODY, RAW_CAP);

	cr_assert_gt(n, 0);
	return (size_t)n;
}

/*
 * A PUBLISH whose loan's pages something holds: the write seal waits
 * about 150 ms in the kernel, and not on the daemon's loop. A thread
 * makes it while other clients are served, and the connection's next
 * request (a STAT right behind it) is answered after it, as sent. The
 * pages let go, the same loan publishes, and the STAT behind it sees it.
 */
static char http_path[64];

/* the daemon serving /metrics on a unix socket at http_path too */
static void start_http(void)
{
	char arg[80];
	const char *const args[] = {"--http", arg, NULL};

	snprintf(http_path, sizeof(http_path), "/tmp/td-seal-%d.http",
		 (int)getpid());
	snprintf(arg, sizeof(arg), "unix:%s", http_path);
	tu_daemon_start_args(&D, "warn", args);
}

static void stop_http(void)
{
	stop();
	unlink(http_path);
}

Test(stall, a_seal_that_waits_for_held_pages_is_made_off_the_loop,
     .init = start_http, .fini = stop_http)
{
	const char *what = "a PUBLISH of held pages";
	int sock = raw_scm_conn(&D), v = raw_scm_conn(&D);
	struct td_wire_stat_req st = {.name = {"seal/held", 9}};
	char why[TD_WIRE_MAX_REASON + 1];
	struct rawrep r;
	bool seen = false;
	int fd, pp[2];
	uint64_t alloc = held_loan(sock, 2, &fd, pp);

	/* the wait is short (150 ms): tried again until it is caught */
	for (int i = 0; i < 20 && !seen; i++) {
		raw_send(sock, TD_OP_PUBLISH, 10, pub_body("seal/held", alloc));
		raw_send(sock, TD_OP_STAT, 11,
			 (size_t)td_wire_stat_req_encode(&st, RAW_BODY,
							 RAW_CAP));
		seen = sealed_off_loop(sock, v, what);
		raw_recv(sock, &r);
		raw_reason(&r, why, sizeof(why));
		cr_assert_eq(r.h.request_id, 10, "%s: answered after the "
			     "request behind it", what);
		cr_assert_eq(r.h.status, -EBUSY, "%s: %d %s", what,
			     r.h.status, why);
		cr_assert(strstr(why, "let go of its pages"), "%s", why);
		raw_recv(sock, &r);
		cr_assert_eq(r.h.request_id, 11);
		cr_assert_eq(r.h.status, -ENOENT);
	}
	cr_assert(seen, "%s: no thread of the daemon was seen waiting in "
		  "the seal", what);
	close(pp[0]);
	close(pp[1]);
	raw_send(sock, TD_OP_PUBLISH, 12, pub_body("seal/held", alloc));
	raw_send(sock, TD_OP_STAT, 13,
		 (size_t)td_wire_stat_req_encode(&st, RAW_BODY, RAW_CAP));
	raw_recv(sock, &r);
	cr_assert_eq(r.h.request_id, 12);
	cr_assert_eq(r.h.status, 0, "the pages let go: %d", r.h.status);
	raw_recv(sock, &r);
	cr_assert_eq(r.h.request_id, 13);
	cr_assert_eq(r.h.status, 0, "STAT after the PUBLISH: %d", r.h.status);
	td__scm_close(r.fds, r.nfds);
	cr_assert_eq(fcntl(fd, F_GET_SEALS) & F_SEAL_WRITE, F_SEAL_WRITE);
	/* the refused seals are not counted, the one made is */
	cr_assert_eq(tu_metric_unix(http_path, "tensord_seals_off_loop_total"),
		     1);
	cr_assert_eq(tu_metric_unix(http_path, "tensord_seals_waiting"), 0);
	close(fd);
	close(v);
	close(sock);
}

/*
 * The same for a PUBLISH_MANY, whose second loan's pages are held: the
 * refusal names that element and publishes nothing; let go, both go.
 */
Test(stall, a_publish_many_with_held_pages_is_sealed_off_the_loop,
     .init = start, .fini = stop)
{
	const char *what = "a PUBLISH_MANY of held pages";
	const char *names[2] = {"seal/a", "seal/b"};
	int sock = raw_scm_conn(&D), v = raw_scm_conn(&D);
	char why[TD_WIRE_MAX_REASON + 1];
	uint64_t allocs[2];
	bool seen = false;
	int fd, pp[2];

	allocs[0] = raw_alloc_one(sock, 2, 4096);
	allocs[1] = held_loan(sock, 3, &fd, pp);
	for (int i = 0; i < 20 && !seen; i++) {
		static uint8_t bodies[2][1024];
		struct td_wire_publish_many_req q = {.count = 2};
		struct rawrep r;

		for (int k = 0; k < 2; k++) {
			int64_t n = raw_pub_body(names[k], allocs[k], 4096, 0,
						 0, bodies[k], 1024);

			cr_assert_gt(n, 0);
			q.el[k].body = (struct td_wire_bytes){bodies[k],
							      (uint32_t)n};
		}
		raw_send(sock, TD_OP_PUBLISH_MANY, 10,
			 (size_t)td_wire_publish_many_req_encode(&q, RAW_BODY,
								 RAW_CAP));
		seen = sealed_off_loop(sock, v, what);
		raw_recv(sock, &r);
		raw_reason(&r, why, sizeof(why));
		cr_assert_eq(r.h.status, -EBUSY, "%s: %d %s", what,
			     r.h.status, why);
		cr_assert(strstr(why, "element 1") &&
			  strstr(why, "let go of its pages"), "%s", why);
	}
	cr_assert(seen, "%s: no thread of the daemon was seen waiting in "
		  "the seal", what);
	close(pp[0]);
	close(pp[1]);
	cr_assert_eq(raw_pub_many(sock, 4096, 11, 2, names, allocs, why,
				  sizeof(why)),
		     0, "the pages let go: %s", why);
	close(fd);
	close(v);
	close(sock);
}

/*
 * A connection that ends while its PUBLISH's seal waits: the daemon
 * lets go of everything it held for it (the loan's memfd among its
 * descriptors no more once the seal is done) and serves on.
 */
Test(stall, a_connection_gone_while_its_seal_waits_leaves_nothing,
     .init = start, .fini = stop)
{
	const char *memfd = "/memfd:tensord-plane (deleted)";
	int sock = raw_scm_conn(&D), v = raw_scm_conn(&D);
	int base = daemon_holds(memfd), fd, pp[2];
	struct rawrep r;
	bool caught = false;
	uint64_t alloc = held_loan(sock, 2, &fd, pp);

	cr_assert_gt(daemon_holds(memfd), base);
	/* the wait is short (150 ms): tried again until it is caught */
	for (int i = 0; i < 20 && !caught; i++) {
		raw_send(sock, TD_OP_PUBLISH, 10, pub_body("seal/gone", alloc));
		for (int waited = 0;; waited++) {
			struct pollfd pf = {sock, POLLIN, 0};

			cr_assert_lt(waited, TU_WAIT_S * 1000, "no reply");
			if ((caught = thread_in_seal(true) != 0))
				break;
			if (poll(&pf, 1, 1) > 0) {
				raw_recv(sock, &r);
				break;
			}
		}
	}
	cr_assert(caught, "the seal never waited off the loop");
	close(sock);
	close(fd);
	/* served meanwhile */
	cr_assert_eq(raw_call(v, TD_OP_STAT, 8,
			      td_wire_stat_req_encode(
				      &(struct td_wire_stat_req){
					      .name = {"seal/gone", 9}},
				      RAW_BODY, RAW_CAP),
			      &r),
		     -ENOENT);
	for (int waited = 0; daemon_holds(memfd) > base; waited += 10) {
		cr_assert_lt(waited, TU_WAIT_S * 1000, "the daemon keeps the "
			     "gone connection's memfd");
		poll(NULL, 0, 10);
	}
	close(pp[0]);
	close(pp[1]);
	close(v);
}

/*
 * Six connections' PUBLISHes of held pages at once: two seals wait on
 * the pool at a time (the rest of its threads are io.c's), the others
 * queue; two connections end while theirs wait or queue. Every other
 * one is answered (-EBUSY), another client is served meanwhile, nothing
 * is left waiting, and no memfd of the gone ones stays. Then six
 * unsealed loans, nothing holding them, publish at once: each sealed
 * off the loop, counted.
 */
Test(stall, seals_of_many_connections_queue_and_all_end,
     .init = start_http, .fini = stop_http)
{
	enum { N = 6 };
	const char *memfd = "/memfd:tensord-plane (deleted)";
	int sock[N], fd[N], pp[N][2], v = raw_scm_conn(&D);
	int base = daemon_holds(memfd);
	uint64_t alloc[N];
	struct rawrep r;
	char name[32], why[TD_WIRE_MAX_REASON + 1];

	for (int i = 0; i < N; i++) {
		sock[i] = raw_scm_conn(&D);
		alloc[i] = held_loan(sock[i], 2, &fd[i], pp[i]);
	}
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "q/%d", i);
		raw_send(sock[i], TD_OP_PUBLISH, 10, pub_body(name, alloc[i]));
	}
	/* one waiting or queued, one likely queued: both go */
	close(sock[1]);
	close(sock[N - 1]);
	sock[1] = sock[N - 1] = -1;
	cr_assert_eq(raw_call(v, TD_OP_STAT, 8,
			      td_wire_stat_req_encode(
				      &(struct td_wire_stat_req){
					      .name = {"q/0", 3}},
				      RAW_BODY, RAW_CAP),
			      &r),
		     -ENOENT);
	for (int i = 0; i < N; i++) {
		if (sock[i] < 0)
			continue;
		raw_recv(sock[i], &r);
		raw_reason(&r, why, sizeof(why));
		cr_assert_eq(r.h.status, -EBUSY, "connection %d: %d %s", i,
			     r.h.status, why);
	}
	/* the gone ones' requests were read: they run too, still held */
	for (int waited = 0;
	     tu_metric_unix(http_path, "tensord_seals_waiting") > 0;
	     waited += 10) {
		cr_assert_lt(waited, TU_WAIT_S * 1000, "seals still wait");
		poll(NULL, 0, 10);
	}
	cr_assert_eq(tu_metric_unix(http_path, "tensord_seals_off_loop_total"),
		     0);
	for (int i = 0; i < N; i++) {
		close(fd[i]);
		close(pp[i][0]);
		close(pp[i][1]);
	}
	/* the gone connections' loans: the daemon lets their memfds go */
	for (int waited = 0; daemon_holds(memfd) > base + N - 2;
	     waited += 10) {
		cr_assert_lt(waited, TU_WAIT_S * 1000, "the daemon keeps the "
			     "gone connections' memfds");
		poll(NULL, 0, 10);
	}
	/* nothing holds them now: all six seal, each off the loop */
	for (int i = 0; i < N; i++) {
		struct td_wire_alloc_req q = {.flags = TD_WIRE_REQ_SCM,
					      .plane_count = 1,
					      .sizes = {4096}};
		struct td_wire_alloc_rep rep;

		if (sock[i] < 0)
			sock[i] = raw_scm_conn(&D);
		cr_assert_eq(raw_call(sock[i], TD_OP_ALLOC, 20,
				      td_wire_alloc_req_encode(&q, RAW_BODY,
							       RAW_CAP),
				      &r),
			     0);
		cr_assert_eq(td_wire_alloc_rep_decode(RAW_BODY, r.h.body_len,
						      &rep, NULL),
			     0);
		td__scm_close(r.fds, r.nfds);
		alloc[i] = rep.alloc_id;
	}
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "q/%d", i);
		raw_send(sock[i], TD_OP_PUBLISH, 21, pub_body(name, alloc[i]));
	}
	for (int i = 0; i < N; i++) {
		raw_recv(sock[i], &r);
		cr_assert_eq(r.h.request_id, 21);
		cr_assert_eq(r.h.status, 0, "connection %d: %d", i,
			     r.h.status);
		close(sock[i]);
	}
	cr_assert_eq(tu_metric_unix(http_path, "tensord_seals_off_loop_total"),
		     N);
	cr_assert_eq(tu_metric_unix(http_path, "tensord_seals_waiting"), 0);
	close(v);
}

/* ---- what a parked PUBLISH holds counts as its uid's ---- */

#define NOBODY 65534

/*
 * As nobody: a plain loan of two planes, left to the daemon to seal
 * (TENSORD_SEAL=daemon), under --uid-limit fds=4: the connection (one
 * or two) and the two planes fit, the two descriptors the daemon keeps
 * while it seals them (dups, its uid's while the PUBLISH waits) do not:
 * -EDQUOT naming the fds limit, and the loan given back. The library
 * sealing the same loan itself asks the daemon for no descriptor more.
 */
static void fds_limit_child(const struct tu_daemon *d, void *arg)
{
	uint64_t sizes[2] = {4096, 4096}, shape[1] = {4096}, v = 0;
	struct td_publish p = {.name = "seal/quota", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape};
	struct td_error e = {0};
	struct td_client *c;
	struct td_alloc *a;

	(void)arg;
	CK(setgid(NOBODY) == 0);
	CK(setuid(NOBODY) == 0);
	CK(setenv("TENSORD_SEAL", "daemon", 1) == 0);
	c = open_client(d);
	CK(unsetenv("TENSORD_SEAL") == 0);
	CK_EQ(td_client_alloc(c, 2, sizes, &a, &e), 0);
	CK_EQ(td_client_publish_alloc(c, a, &p, &v, &e), -EDQUOT);
	CK(strstr(e.reason, "fds limit"));
	td_client_close(c);
	/* once the daemon has seen that connection go (its fds the uid's
	 * until then) */
	for (int i = 0;; i++) {
		int rc;

		c = open_client(d);
		rc = td_client_alloc(c, 2, sizes, &a, &e);
		if (rc == 0)
			break;
		CK_EQ(rc, -EDQUOT);
		CK(i < TU_WAIT_S * 100);
		td_client_close(c);
		usleep(10000);
	}
	CK_EQ(td_client_publish_alloc(c, a, &p, &v, &e), 0);
	CK(v > 0);
	td_client_close(c);
}

Test(stall, a_parked_publishes_descriptors_count_in_its_uids_fds_limit)
{
	static const char *const args[] = {"--socket-mode", "0666",
					   "--uid-limit", "fds=4", NULL};

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	tu_daemon_start_args(&D, "warn", args);
	cr_assert_eq(chmod(D.dir, 0755), 0);
	cr_assert_eq(reap(spawn(&D, fds_limit_child, NULL)), 0);
	tu_daemon_stop(&D, true);
}

/* ---- the sealing threads shared out by uid ---- */

/*
 * The daemon under tests/slow-seal.c: each write seal of its own plain
 * loans (memfds named tensord-plane) takes SLOW_MS more, so the order in
 * which the two sealing threads take the waiting requests shows in the
 * order of the replies, whatever the machine's speed. Its socket is
 * open to every uid, and it serves /metrics at http_path.
 */
#define SLOW_MS 200

static void start_shim(const char *prefix, int seal_ms, int get_ms)
{
	const char *shim = getenv("TD_SLOW_SEAL_SHIM");
	const char *pre = getenv("LD_PRELOAD"), *asan = getenv("ASAN_OPTIONS");
	char arg[80], preload[1024], asan_opts[512], ms[16], get[16];
	const char *const args[] = {"--http", arg, "--socket-mode", "0666",
				    NULL};

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	cr_assert(shim, "TD_SLOW_SEAL_SHIM is not set (run through meson "
		  "test)");
	snprintf(http_path, sizeof(http_path), "/tmp/td-seal-%d.http",
		 (int)getpid());
	snprintf(arg, sizeof(arg), "unix:%s", http_path);
	/* after TSan's own preload, if any; a sanitized daemon is told its
	 * runtime need not come first */
	snprintf(preload, sizeof(preload), "%s%s%s", pre ? pre : "",
		 pre ? " " : "", shim);
	snprintf(asan_opts, sizeof(asan_opts), "%s%sverify_asan_link_order=0",
		 asan ? asan : "", asan ? ":" : "");
	snprintf(ms, sizeof(ms), "%d", seal_ms);
	snprintf(get, sizeof(get), "%d", get_ms);
	cr_assert_eq(setenv("ASAN_OPTIONS", asan_opts, 1), 0);
	cr_assert_eq(setenv("LD_PRELOAD", preload, 1), 0);
	cr_assert_eq(setenv("TD_SLOW_SEAL", prefix, 1), 0);
	cr_assert_eq(setenv("TD_SLOW_SEAL_MS", ms, 1), 0);
	if (get_ms)
		cr_assert_eq(setenv("TD_SLOW_GET_SEALS_MS", get, 1), 0);
	tu_daemon_start_args(&D, "warn", args);
	if (pre)
		cr_assert_eq(setenv("LD_PRELOAD", pre, 1), 0);
	else
		unsetenv("LD_PRELOAD");
	if (asan)
		cr_assert_eq(setenv("ASAN_OPTIONS", asan, 1), 0);
	else
		unsetenv("ASAN_OPTIONS");
	unsetenv("TD_SLOW_SEAL");
	unsetenv("TD_SLOW_SEAL_MS");
	unsetenv("TD_SLOW_GET_SEALS_MS");
	cr_assert_eq(chmod(D.dir, 0755), 0);
}

static void start_slow(void)
{
	start_shim("tensord-plane", SLOW_MS, 0);
}

/* A connection of nobody's (SO_PEERCRED is the connecting euid's) */
static int nobody_conn(void)
{
	int sock;

	cr_assert_eq(seteuid(NOBODY), 0);
	sock = raw_scm_conn(&D);
	cr_assert_eq(seteuid(0), 0);
	return sock;
}

/* Until n requests wait for their seals */
static void await_seals_waiting(uint64_t n)
{
	for (int waited = 0;
	     tu_metric_unix(http_path, "tensord_seals_waiting") != n;
	     waited++) {
		cr_assert_lt(waited, TU_WAIT_S * 1000, "never %lld requests "
			     "waiting for seals", (long long)n);
		poll(NULL, 0, 1);
	}
}

/* How many of socks have no reply to read yet */
static int unanswered(const int *socks, int n)
{
	int k = 0;

	for (int i = 0; i < n; i++) {
		struct pollfd pf = {socks[i], POLLIN, 0};

		k += poll(&pf, 1, 0) == 0;
	}
	return k;
}

/*
 * Nobody's PUBLISH of a plain loan, left to the daemon to seal: the
 * daemon's alloc id on v (a connection of nobody's), sent.
 */
static void nobody_publish(int v, const char *name)
{
	uint64_t alloc;

	cr_assert_eq(seteuid(NOBODY), 0);
	alloc = raw_alloc_one(v, 2, 4096);
	cr_assert_eq(seteuid(0), 0);
	raw_send(v, TD_OP_PUBLISH, 3, pub_body(name, alloc));
}

/* v's reply, which must be the publish's success */
static void answered_ok(int v, const char *what)
{
	struct rawrep r;
	char why[TD_WIRE_MAX_REASON + 1];

	raw_recv(v, &r);
	raw_reason(&r, why, sizeof(why));
	cr_assert_eq(r.h.status, 0, "%s: %d %s", what, r.h.status, why);
	td__scm_close(r.fds, r.nfds);
}

/*
 * A PUBLISH_MANY (id 20) on sock of k fresh plain loans of 4 KiB each
 * (their seals left to the daemon), named prefix/i/0..k-1 (into names
 * when not NULL): sent, not awaited.
 */
static void send_loans_many(int sock, const char *prefix, int i, int k,
			    char (*names)[32])
{
	static uint8_t bodies[8][1024];
	struct td_wire_publish_many_req q = {.count = (uint32_t)k};
	char name[32];

	cr_assert_leq(k, 8);
	for (int j = 0; j < k; j++) {
		uint64_t alloc = raw_alloc_one(sock, 2 + (uint64_t)j, 4096);
		int64_t n;

		snprintf(name, sizeof(name), "%s/%d/%d", prefix, i, j);
		if (names)
			memcpy(names[j], name, sizeof(name));
		n = raw_pub_body(name, alloc, 4096, 0, 0, bodies[j],
				 sizeof(bodies[j]));
		cr_assert_gt(n, 0);
		q.el[j].body = (struct td_wire_bytes){bodies[j], (uint32_t)n};
	}
	raw_send(sock, TD_OP_PUBLISH_MANY, 20,
		 (size_t)td_wire_publish_many_req_encode(&q, RAW_BODY,
							 RAW_CAP));
}

/*
 * One uid's six connections each publish a plain loan, every seal slow
 * (SLOW_MS): two are sealed at a time, four wait. Nobody's PUBLISH comes
 * after all six, and is sealed at the first thread free, before the
 * root's four waiting ones: uids take turns, not requests. First come
 * first served, it was answered after every one of root's.
 */
Test(stall, a_uids_many_waiting_seals_hold_another_uid_back_one_turn,
     .init = start_slow, .fini = stop_http)
{
	enum { N = 6 };
	int sock[N], v = nobody_conn();
	char name[32];

	for (int i = 0; i < N; i++) {
		sock[i] = raw_scm_conn(&D);
		snprintf(name, sizeof(name), "turn/root/%d", i);
		raw_send(sock[i], TD_OP_PUBLISH, 10,
			 pub_body(name, raw_alloc_one(sock[i], 2, 4096)));
	}
	await_seals_waiting(N);
	nobody_publish(v, "turn/nobody");
	answered_ok(v, "nobody's publish");
	/* the last two of root's cannot have started before it ended */
	cr_assert_geq(unanswered(sock, N), 2, "nobody's seal waited for "
		      "root's: %d of root's 6 unanswered when it was answered",
		      unanswered(sock, N));
	for (int i = 0; i < N; i++) {
		answered_ok(sock[i], "root's publish");
		close(sock[i]);
	}
	cr_assert_eq(tu_metric_unix(http_path, "tensord_seals_off_loop_total"),
		     N + 1);
	cr_assert_eq(tu_metric_unix(http_path, "tensord_seals_waiting"), 0);
	close(v);
}

/*
 * Two PUBLISH_MANYs of root's, six loans each, every seal slow: both
 * threads are theirs for six seals. Nobody's PUBLISH, come meanwhile,
 * waits one seal, not six: the thread that makes its seal leaves the
 * rest of its request for its next turn, and both of root's are
 * answered after nobody's, each loan of both published and sealed. A
 * request made whole on its thread kept nobody waiting until one of
 * root's was answered.
 */
Test(stall, a_request_of_many_slow_seals_holds_another_uid_back_one_seal,
     .init = start_slow, .fini = stop_http)
{
	enum { N = 2, K = 6 };
	int sock[N], v = nobody_conn();
	static char names[N][K][32];

	for (int i = 0; i < N; i++) {
		sock[i] = raw_scm_conn(&D);
		send_loans_many(sock[i], "many", i, K, names[i]);
	}
	await_seals_waiting(N);
	nobody_publish(v, "many/nobody");
	answered_ok(v, "nobody's publish");
	cr_assert_eq(unanswered(sock, N), N, "nobody's seal waited for a "
		     "whole request of root's: %d of root's 2 unanswered when "
		     "it was answered", unanswered(sock, N));
	cr_assert_geq(tu_metric_unix(http_path, "tensord_seal_yields_total"),
		      1);
	for (int i = 0; i < N; i++) {
		answered_ok(sock[i], "root's PUBLISH_MANY");
		for (int k = 0; k < K; k++) {
			struct td_wire_stat_req st = {
				.name = {names[i][k],
					 (uint32_t)strlen(names[i][k])}};
			struct rawrep r;

			cr_assert_eq(raw_call(sock[i], TD_OP_STAT, 30,
					      td_wire_stat_req_encode(
						      &st, RAW_BODY, RAW_CAP),
					      &r),
				     0, "%s", names[i][k]);
			td__scm_close(r.fds, r.nfds);
		}
		close(sock[i]);
	}
	cr_assert_eq(tu_metric_unix(http_path, "tensord_seals_off_loop_total"),
		     N * K + 1);
	cr_assert_eq(tu_metric_unix(http_path, "tensord_seals_waiting"), 0);
	close(v);
}

/* As start_slow, each seal three times as long: room for the half-seal
 * offset below, whatever the scheduler does to it */
#define SLOWER_MS (3 * SLOW_MS)

static void start_slower(void)
{
	start_shim("tensord-plane", SLOWER_MS, 0);
}

/*
 * A job stops leaving its seals for another uid once that uid has its
 * thread (sealer.c, yield_update). Two PUBLISH_MANYs of root's, three
 * loans each, on the two threads half a seal apart; nobody's PUBLISH
 * comes: the job whose seal ends first leaves its rest for nobody's
 * turn, nobody's seal takes that thread, and the other job, no longer
 * keeping anyone waiting, makes all of its seals: one yield in all.
 * With the flag left set once another uid had waited, the other job
 * left its rest too (two yields), for nobody.
 */
Test(stall, a_job_keeps_its_thread_once_the_other_uid_has_one,
     .init = start_slower, .fini = stop_http)
{
	enum { N = 2, K = 3 };
	int sock[N], v = nobody_conn();

	for (int i = 0; i < N; i++) {
		sock[i] = raw_scm_conn(&D);
		send_loans_many(sock[i], "keep", i, K, NULL);
		await_seals_waiting((uint64_t)i + 1);
		if (i == 0)
			poll(NULL, 0, SLOWER_MS / 2);
	}
	nobody_publish(v, "keep/nobody");
	answered_ok(v, "nobody's publish");
	for (int i = 0; i < N; i++) {
		answered_ok(sock[i], "root's PUBLISH_MANY");
		close(sock[i]);
	}
	cr_assert_eq(tu_metric_unix(http_path, "tensord_seal_yields_total"),
		     1, "yields: %llu, not 1 (nobody's only)",
		     tu_metric_unix(http_path, "tensord_seal_yields_total"));
	cr_assert_eq(tu_metric_unix(http_path, "tensord_seals_off_loop_total"),
		     N * K + 1);
	close(v);
}

/*
 * A request parked for its seal while its client hangs up: the client
 * sent more than the daemon reads at one wake-up (TD__RX_BATCH, 32),
 * then a PUBLISH of a plain loan (its seal is made off the loop: it
 * parks), a STAT, and shut its end for writing, and waits for the
 * replies. The daemon reads the rest when it sees the hang-up, and the
 * PUBLISH it parked there is answered, and the STAT behind it, before
 * the connection ends; it was cut instead, the PUBLISH never made. The
 * daemon is stopped (SIGSTOP) while it is all sent, so that it sees the
 * whole of it at one wake-up.
 */
/* SIGSTOP to the daemon, and until its loop is stopped */
static void daemon_pause(void)
{
	char path[64], stat[256], *c;

	cr_assert_eq(kill(D.pid, SIGSTOP), 0);
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)D.pid);
	for (int waited = 0;; waited += 1) {
		FILE *f = fopen(path, "r");
		bool got;

		cr_assert(f, "%s: %s", path, strerror(errno));
		got = fgets(stat, sizeof(stat), f) != NULL;
		fclose(f);
		c = got ? strrchr(stat, ')') : NULL;
		if (c && c[1] == ' ' && c[2] == 'T')
			return;
		cr_assert_lt(waited, TU_WAIT_S * 1000, "the daemon never "
			     "stopped");
		poll(NULL, 0, 1);
	}
}

Test(stall, a_publish_parked_while_its_client_hangs_up_is_answered,
     .init = start, .fini = stop)
{
	enum { AHEAD = 40, TRIES = 4 };
	struct td_wire_stat_req st = {.name = {"seal/hup", 8}};

	/* a few times: the daemon does not always see the hang-up with
	 * the first datagrams */
	for (int k = 0; k < TRIES; k++) {
		int sock = raw_scm_conn(&D);
		uint64_t alloc = raw_alloc_one(sock, 2, 4096);
		struct rawrep r;
		char byte;

		daemon_pause();
		for (int i = 0; i < AHEAD; i++)
			raw_send(sock, TD_OP_STAT, 10 + (uint64_t)i,
				 (size_t)td_wire_stat_req_encode(&st, RAW_BODY,
								 RAW_CAP));
		raw_send(sock, TD_OP_PUBLISH, 100, pub_body("seal/hup", alloc));
		raw_send(sock, TD_OP_STAT, 101,
			 (size_t)td_wire_stat_req_encode(&st, RAW_BODY,
							 RAW_CAP));
		cr_assert_eq(shutdown(sock, SHUT_WR), 0);
		cr_assert_eq(kill(D.pid, SIGCONT), 0);
		for (int i = 0; i < AHEAD; i++) {
			raw_recv(sock, &r);
			cr_assert_eq(r.h.request_id, 10 + (uint64_t)i);
			cr_assert_eq(r.h.status, k ? 0 : -ENOENT);
			td__scm_close(r.fds, r.nfds);
		}
		raw_recv(sock, &r);
		cr_assert_eq(r.h.request_id, 100, "try %d", k);
		cr_assert_eq(r.h.status, 0, "the parked PUBLISH: %d",
			     r.h.status);
		raw_recv(sock, &r);
		cr_assert_eq(r.h.request_id, 101);
		cr_assert_eq(r.h.status, 0, "the STAT behind it: %d",
			     r.h.status);
		td__scm_close(r.fds, r.nfds);
		/* and then the end */
		tu_await_readable(sock, TU_WAIT_S, "the hang-up");
		cr_assert_eq(recv(sock, &byte, 1, 0), 0);
		close(sock);
	}
}

/* A memfd of the test's, 4 KiB written, its size sealed; held (vmspliced into pp, not
 * mapped: its write seal waits and fails) when pp is not NULL. */
static int own_memfd(const char *name, int pp[2])
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	struct iovec iov;
	uint8_t *p;

	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, 4096), 0);
	cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert(p != MAP_FAILED);
	memset(p, 0x3c, 4096);
	if (pp) {
		cr_assert_eq(pipe2(pp, O_CLOEXEC), 0);
		iov = (struct iovec){p, 4096};
		cr_assert_eq(vmsplice(pp[1], &iov, 1, 0), 4096);
	}
	munmap(p, 4096);
	return fd;
}

/* The PUBLISH body (in rawbuf) of the test's own memfd as name: fd
 * number fdnum, pulled by pidfd or attached (then fdnum is ignored). */
static size_t own_pub_body(const char *name, int fdnum)
{
	uint8_t blob[512];
	int64_t blen = raw_blob_u8(4096, 0, blob, sizeof(blob)), n;
	struct td_wire_publish_req q = {
		.name = {name, (uint16_t)strlen(name)},
		.meta = {(const uint8_t *)"", 0},
		.blob = {blob, (uint32_t)blen},
		.fd_count = 1,
		.fds = {fdnum},
	};

	cr_assert_gt(blen, 0);
	n = td_wire_publish_req_encode(&q, RAW_BODY, RAW_CAP);
	cr_assert_gt(n, 0);
	return (size_t)n;
}

/* raw_send with fds attached (SCM_RIGHTS) */
static void raw_send_fds(int sock, uint16_t op, uint64_t id, size_t len,
			 const int *fds, unsigned nfds)
{
	struct td_wire_hdr h = {TD_WIRE_MAGIC, TD_WIRE_VERSION, op, 0,
				(uint16_t)nfds, id, (uint32_t)len, 0};

	td_wire_hdr_encode(&h, rawbuf);
	cr_assert_eq(td__scm_send(sock, rawbuf, TD_WIRE_HDR_LEN + len, fds,
				  nfds, 0),
		     (ssize_t)(TD_WIRE_HDR_LEN + len));
}

/* A raw connection whose fds the daemon pulls (pidfd import) */
static int pidfd_conn(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct td_wire_hello_rep rep;
	struct rawrep r;
	int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct td_wire_hello_req hr = {TD_IMPORT_PIDFD, sock, {"liar", 4}, 0};

	cr_assert_geq(sock, 0);
	memcpy(sa.sun_path, D.sock, sizeof(D.sock));
	cr_assert_eq(connect(sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(raw_call(sock, TD_OP_HELLO, 1,
			      td_wire_hello_req_encode(&hr, RAW_BODY, RAW_CAP),
			      &r),
		     0);
	cr_assert_eq(td_wire_hello_rep_decode(RAW_BODY, r.h.body_len, &rep,
					      NULL),
		     0);
	td__scm_close(r.fds, r.nfds);
	if (rep.import_in != TD_IMPORT_PIDFD)
		cr_skip_test("pidfd import refused here (pidfd_getfd, "
			     "ptrace rules)");
	return sock;
}

/*
 * PUBLISH of the test's own memfd number fdnum (pulled, or attached:
 * attach), whose pages are held, until a thread of the daemon is seen
 * in its seal; then fdnum is made a copy of other (dup2). The reply;
 * false when the seal was never caught in 20 tries. pinned: the memfd,
 * put back at fdnum after every miss.
 */
static bool swapped_in_seal(int sock, int fdnum, int pinned, int other,
			    bool attach, struct rawrep *r)
{
	for (int i = 0; i < 20; i++) {
		bool swapped = false;
		size_t n = own_pub_body("seal/own", fdnum);

		cr_assert_eq(dup2(pinned, fdnum), fdnum);
		raw_send_fds(sock, TD_OP_PUBLISH, 10 + (uint64_t)i, n, &fdnum,
			     attach ? 1 : 0);
		for (int waited = 0;; waited++) {
			struct pollfd pf = {sock, POLLIN, 0};

			cr_assert_lt(waited, TU_WAIT_S * 1000, "no reply");
			if (thread_in_seal(true)) {
				cr_assert_eq(dup2(other, fdnum), fdnum);
				swapped = true;
				break;
			}
			if (poll(&pf, 1, 1) > 0)
				break;
		}
		raw_recv(sock, r);
		cr_assert_eq(r->h.request_id, 10 + (uint64_t)i);
		if (swapped && (attach || r->h.status != -EBUSY))
			return true;
		/* missed (or swapped too late: the replay was done) */
		cr_assert_eq(r->h.status, -EBUSY, "%d", r->h.status);
	}
	return false;
}

/* Until the daemon holds no descriptor of the memfd called name */
static void await_let_go(const char *name)
{
	char target[96];

	snprintf(target, sizeof(target), "/memfd:%s (deleted)", name);
	for (int waited = 0; daemon_holds(target); waited += 10) {
		cr_assert_lt(waited, TU_WAIT_S * 1000, "the daemon keeps %s",
			     target);
		poll(NULL, 0, 10);
	}
}

/*
 * A pidfd producer publishing its own memfd (no alloc; the daemon pulls
 * it by number) whose number names another memfd once the seal was
 * made: the request handled again pulls that other file, which is not
 * the one sealed, and the PUBLISH is refused -EAGAIN ("the file
 * changed"), nothing sealed, nothing kept. The connection goes on: the
 * pages let go, the number (the other memfd now) publishes, sealed.
 */
Test(stall, a_pulled_memfd_changed_while_its_seal_waits_is_refused,
     .init = start, .fini = stop)
{
	int sock = pidfd_conn(), pp[2];
	int pinned = own_memfd("seal-own", pp), other = own_memfd("seal-other",
								  NULL);
	int fdnum = dup(pinned);
	char why[TD_WIRE_MAX_REASON + 1];
	struct rawrep r;

	cr_assert_geq(fdnum, 0);
	cr_assert(swapped_in_seal(sock, fdnum, pinned, other, false, &r),
		  "the seal never waited off the loop");
	raw_reason(&r, why, sizeof(why));
	cr_assert_eq(r.h.status, -EAGAIN, "%d %s", r.h.status, why);
	cr_assert(strstr(why, "the file changed while its seal was being "
			      "made"),
		  "%s", why);
	cr_assert_eq(fcntl(other, F_GET_SEALS) & F_SEAL_WRITE, 0,
		     "the file not sealed off the loop was sealed");
	cr_assert_eq(fcntl(pinned, F_GET_SEALS) & F_SEAL_WRITE, 0);
	await_let_go("seal-own");
	await_let_go("seal-other");
	close(pp[0]);
	close(pp[1]);
	cr_assert_eq(raw_call(sock, TD_OP_PUBLISH, 40,
			      (int64_t)own_pub_body("seal/own", fdnum), &r),
		     0, "the connection goes on");
	cr_assert_eq(fcntl(other, F_GET_SEALS) & F_SEAL_WRITE, F_SEAL_WRITE);
	close(fdnum);
	close(other);
	close(pinned);
	close(sock);
}

/*
 * The same with the memfd attached (SCM_RIGHTS): the request keeps the
 * file it came with, whatever the number names since, and is refused
 * with its seal's own failure (its pages are pinned); nothing kept.
 */
Test(stall, an_attached_memfd_keeps_its_file_while_its_seal_waits,
     .init = start, .fini = stop)
{
	int sock = raw_scm_conn(&D), pp[2];
	int pinned = own_memfd("seal-own", pp), other = own_memfd("seal-other",
								  NULL);
	int fdnum = dup(pinned);
	char why[TD_WIRE_MAX_REASON + 1];
	struct rawrep r;

	cr_assert_geq(fdnum, 0);
	cr_assert(swapped_in_seal(sock, fdnum, pinned, other, true, &r),
		  "the seal never waited off the loop");
	raw_reason(&r, why, sizeof(why));
	cr_assert_eq(r.h.status, -EBUSY, "%d %s", r.h.status, why);
	cr_assert(strstr(why, "let go of its pages"), "%s", why);
	await_let_go("seal-own");
	close(pp[0]);
	close(pp[1]);
	raw_send_fds(sock, TD_OP_PUBLISH, 40, own_pub_body("seal/own", 0),
		     &pinned, 1);
	raw_recv(sock, &r);
	cr_assert_eq(r.h.status, 0, "the connection goes on: %d", r.h.status);
	cr_assert_eq(fcntl(pinned, F_GET_SEALS) & F_SEAL_WRITE, F_SEAL_WRITE);
	cr_assert_eq(fcntl(other, F_GET_SEALS) & F_SEAL_WRITE, 0);
	close(fdnum);
	close(other);
	close(pinned);
	close(sock);
}

/*
 * SIGTERM while seals wait on the pool and others queue behind them,
 * every connection still there: the daemon ends, status 0, promptly
 * (tu_reap_within's bound), and the test's descriptors are as before.
 */
Test(stall, the_daemon_stops_while_seals_wait_and_queue, .init = start,
     .fini = stop)
{
	enum { N = 5 };
	int sock[N], fd[N], pp[N][2], st;
	char name[32];
	pid_t pid = D.pid;
	bool caught = false;

	for (int i = 0; i < N; i++) {
		uint64_t alloc;

		sock[i] = raw_scm_conn(&D);
		alloc = held_loan(sock[i], 2, &fd[i], pp[i]);
		snprintf(name, sizeof(name), "stop/%d", i);
		raw_send(sock[i], TD_OP_PUBLISH, 10, pub_body(name, alloc));
	}
	for (int waited = 0; !(caught = thread_in_seal(true)); waited++) {
		cr_assert_lt(waited, TU_WAIT_S * 1000, "no seal waited");
		poll(NULL, 0, 1);
	}
	D.pid = 0;
	cr_assert_eq(kill(pid, SIGTERM), 0);
	cr_assert(tu_reap_within(pid, TU_WAIT_S, &st),
		  "tensord did not exit within %d s of SIGTERM", TU_WAIT_S);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x", st);
	for (int i = 0; i < N; i++) {
		close(sock[i]);
		close(fd[i]);
		close(pp[i][0]);
		close(pp[i][1]);
	}
	unlink(D.sock);
	rmdir(D.dir);
	cr_assert_eq(tu_fd_count(), D.fds0, "fd leak: %d -> %d", D.fds0,
		     tu_fd_count());
}

/*
 * More requests than the daemon reads in two wake-ups (TD__RX_BATCH is
 * 32), then the hang-up (SHUT_WR), all seen at once: every request is
 * handled and answered before the connection ends. The hang-up's drain
 * read one batch and cut the rest (the PUBLISH at the end never made).
 */
Test(stall, every_request_sent_before_a_hang_up_is_answered, .init = start,
     .fini = stop)
{
	enum { AHEAD = 100 };
	int sock = raw_scm_conn(&D);
	struct td_wire_stat_req st = {.name = {"hup/end", 7}};
	uint64_t alloc = raw_alloc_one(sock, 2, 4096);
	struct rawrep r;
	char byte;

	daemon_pause();
	for (int i = 0; i < AHEAD; i++)
		raw_send(sock, TD_OP_STAT, 10 + (uint64_t)i,
			 (size_t)td_wire_stat_req_encode(&st, RAW_BODY,
							 RAW_CAP));
	raw_send(sock, TD_OP_PUBLISH, 200, pub_body("hup/end", alloc));
	cr_assert_eq(shutdown(sock, SHUT_WR), 0);
	cr_assert_eq(kill(D.pid, SIGCONT), 0);
	for (int i = 0; i < AHEAD; i++) {
		raw_recv(sock, &r);
		cr_assert_eq(r.h.request_id, 10 + (uint64_t)i);
		cr_assert_eq(r.h.status, -ENOENT);
	}
	raw_recv(sock, &r);
	cr_assert_eq(r.h.request_id, 200);
	cr_assert_eq(r.h.status, 0, "the last request: %d", r.h.status);
	tu_await_readable(sock, TU_WAIT_S, "the hang-up");
	cr_assert_eq(recv(sock, &byte, 1, 0), 0);
	close(sock);
}

/* Until fd's file carries F_SEAL_WRITE (its seal made), or false when a
 * reply comes on sock first (the seal failed: its job ended). */
static bool await_sealed(int fd, int sock)
{
	for (int waited = 0;; waited++) {
		struct pollfd pf = {sock, POLLIN, 0};

		if (fcntl(fd, F_GET_SEALS) & F_SEAL_WRITE)
			return true;
		cr_assert_lt(waited, TU_WAIT_S * 1000, "no seal, no reply");
		if (poll(&pf, 1, 1) > 0)
			return false;
	}
}

/*
 * SIGTERM in the middle of a PUBLISH_MANY's seals, each of its loans
 * held by a pipe of its own: the first let go (sealed), the second
 * caught waiting, then the stop, and only then every other pipe let go.
 * The job makes the seal it is in and no more: the loans after it stay
 * unsealed, where the thread went on sealing them all (a stop waited a
 * whole PUBLISH_MANY's seals, 150 ms each at a hostile producer's will).
 */
Test(stall, a_stop_ends_a_publish_manys_seals_after_the_one_under_way,
     .init = start, .fini = stop)
{
	enum { N = 6 };
	const char *names[N] = {"sm/0", "sm/1", "sm/2", "sm/3", "sm/4", "sm/5"};
	static uint8_t bodies[N][1024];
	struct td_wire_publish_many_req q = {.count = N};
	int sock = 0, fd[N], pp[N][2], st;
	bool ok = false;
	pid_t pid;

	/* the first wait is short (150 ms): tried again until caught */
	for (int tries = 0; !ok && tries < 20; tries++) {
		if (tries) {
			struct rawrep r;

			raw_recv(sock, &r); /* the refusal of the try before */
			close(sock);
			for (int k = 0; k < N; k++) {
				close(fd[k]);
				close(pp[k][0]);
				close(pp[k][1]);
			}
		}
		sock = raw_scm_conn(&D);
		for (int k = 0; k < N; k++) {
			uint64_t alloc = held_loan(sock, 2 + (uint64_t)k,
						   &fd[k], pp[k]);
			int64_t n = raw_pub_body(names[k], alloc, 4096, 0, 0,
						 bodies[k], 1024);

			cr_assert_gt(n, 0);
			q.el[k].body = (struct td_wire_bytes){bodies[k],
							      (uint32_t)n};
		}
		raw_send(sock, TD_OP_PUBLISH_MANY, 20,
			 (size_t)td_wire_publish_many_req_encode(&q, RAW_BODY,
								 RAW_CAP));
		while (!thread_in_seal(true))
			poll(NULL, 0, 1);
		close(pp[0][0]); /* the first let go: it seals */
		close(pp[0][1]);
		pp[0][0] = pp[0][1] = -1;
		ok = await_sealed(fd[0], sock);
		/* the second's wait (150 ms), before its refusal comes */
		while (ok && !thread_in_seal(true)) {
			struct pollfd pf = {sock, POLLIN, 0};

			ok = poll(&pf, 1, 1) == 0;
		}
	}
	cr_assert(ok, "the second seal was never caught waiting");
	pid = D.pid;
	D.pid = 0;
	cr_assert_eq(kill(pid, SIGTERM), 0);
	/* the stop has begun once the socket is gone: peers go next */
	for (int waited = 0; !access(D.sock, F_OK); waited++) {
		cr_assert_lt(waited, TU_WAIT_S * 1000, "the daemon never "
			     "began its stop");
		poll(NULL, 0, 1);
	}
	poll(NULL, 0, 20);
	for (int k = 1; k < N; k++) {
		close(pp[k][0]);
		close(pp[k][1]);
	}
	cr_assert(tu_reap_within(pid, TU_WAIT_S, &st),
		  "tensord did not exit within %d s of SIGTERM", TU_WAIT_S);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x", st);
	for (int k = 2; k < N; k++)
		cr_assert_eq(fcntl(fd[k], F_GET_SEALS) & F_SEAL_WRITE, 0,
			     "loan %d sealed after the stop", k);
	for (int k = 0; k < N; k++)
		close(fd[k]);
	close(sock);
	unlink(D.sock);
	rmdir(D.dir);
}

/* ---- a uid's share of the loop ---- */

/* The daemon open to every uid (nobody's connections), /metrics at
 * http_path */
static void start_open(void)
{
	char arg[80];
	const char *const args[] = {"--http", arg, "--socket-mode", "0666",
				    "--uid-limit", "conns=64", NULL};

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	snprintf(http_path, sizeof(http_path), "/tmp/td-seal-%d.http",
		 (int)getpid());
	snprintf(arg, sizeof(arg), "unix:%s", http_path);
	tu_daemon_start_args(&D, "warn", args);
	cr_assert_eq(chmod(D.dir, 0755), 0);
}

/* r STATs of a name that is not there on sock (ids 100 on), not awaited */
static void queue_stats(int sock, int r)
{
	struct td_wire_stat_req st = {.name = {"nosuch", 6}};
	size_t len = (size_t)td_wire_stat_req_encode(&st, RAW_BODY, RAW_CAP);

	for (int k = 0; k < r; k++)
		raw_send(sock, TD_OP_STAT, 100 + (uint64_t)k, len);
}

/* The replies to queue_stats's r STATs on sock: each -ENOENT, in order */
static void stats_answered(int sock, int r)
{
	struct rawrep rep;

	for (int k = 0; k < r; k++) {
		raw_recv(sock, &rep);
		cr_assert_eq(rep.h.request_id, 100 + (uint64_t)k);
		cr_assert_eq(rep.h.status, -ENOENT);
	}
}

/* STATUS on sock, sent already (id): the datagrams the daemon had read
 * from every client when it handled it */
static uint64_t status_requests(int sock, uint64_t id)
{
	static struct td_wire_status_client rows[128];
	static struct td_wire_status_uid uids[16];
	struct td_wire_status_rep rep = {.clients = rows, .uids = uids};
	struct rawrep r;

	raw_recv(sock, &r);
	cr_assert_eq(r.h.request_id, id);
	cr_assert_eq(r.h.status, 0);
	cr_assert_eq(td_wire_status_rep_decode(RAW_BODY, r.h.body_len, &rep,
					       128, 16, NULL),
		     0);
	return rep.requests;
}

static void send_status(int sock, uint64_t id)
{
	struct td_wire_status_req q = {0};

	raw_send(sock, TD_OP_STATUS, id,
		 (size_t)td_wire_status_req_encode(&q, RAW_BODY, RAW_CAP));
}

/* A connection whose HELLO (id 1) is sent, its reply not read */
static int conn_unanswered(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct td_wire_hello_req hr = {TD_IMPORT_SCM, -1, {"liar", 4}, 0};
	int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	cr_assert_geq(sock, 0);
	memcpy(sa.sun_path, D.sock, sizeof(D.sock));
	cr_assert_eq(connect(sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
	raw_send(sock, TD_OP_HELLO, 1,
		 (size_t)td_wire_hello_req_encode(&hr, RAW_BODY, RAW_CAP));
	return sock;
}

/*
 * On conn_unanswered's sock with a STATUS (id) sent after its HELLO: the
 * HELLO's reply, then the datagrams read before the HELLO (STATUS's
 * count less the HELLO and the STATUS)
 */
static uint64_t status_after_hello(int sock, uint64_t id)
{
	struct rawrep r;

	raw_recv(sock, &r);
	cr_assert_eq(r.h.request_id, 1);
	cr_assert_eq(r.h.status, 0);
	td__scm_close(r.fds, r.nfds);
	return status_requests(sock, id) - 2;
}

/* r STATs on sock (ids 100...), each carrying fd: refused, -EINVAL */
static void queue_stats_fd(int sock, int r, int fd)
{
	struct td_wire_stat_req st = {.name = {"nosuch", 6}};
	size_t len = (size_t)td_wire_stat_req_encode(&st, RAW_BODY, RAW_CAP);

	for (int k = 0; k < r; k++) {
		struct td_wire_hdr h = {TD_WIRE_MAGIC, TD_WIRE_VERSION,
					TD_OP_STAT, 0, 1, 100 + (uint64_t)k,
					(uint32_t)len, 0};

		td_wire_hdr_encode(&h, rawbuf);
		cr_assert_eq(td__scm_send(sock, rawbuf, TD_WIRE_HDR_LEN + len,
					  &fd, 1, 0),
			     (ssize_t)(TD_WIRE_HDR_LEN + len));
	}
}

/*
 * Nobody's n connections (made here, into h) each get r STATs queued
 * (carrying fd unless it is -1) while the daemon is stopped; root
 * connects then and sends its HELLO and a STATUS, and the daemon goes
 * on: how many of nobody's requests it had read when it handled root's
 * STATUS (STATUS's count of the datagrams read, against one before).
 */
static uint64_t root_after_nobodys(int *h, int n, int r, int fd)
{
	int v0 = raw_scm_conn(&D), v;
	uint64_t before, at;

	for (int i = 0; i < n; i++)
		h[i] = nobody_conn();
	send_status(v0, 8);
	before = status_requests(v0, 8);
	daemon_pause();
	for (int i = 0; i < n; i++)
		if (fd < 0)
			queue_stats(h[i], r);
		else
			queue_stats_fd(h[i], r, fd);
	v = conn_unanswered();
	send_status(v, 9);
	cr_assert_eq(kill(D.pid, SIGCONT), 0);
	at = status_after_hello(v, 9);
	cr_log_info("root's STATUS handled after %llu of nobody's %d requests",
		    (unsigned long long)(at - before), n * r);
	close(v);
	close(v0);
	return at - before;
}

/*
 * Nobody's 16 connections each have 32 requests queued, all while the
 * daemon is stopped (SIGSTOP), so that it finds them all at one
 * wake-up; root connects then and sends its HELLO and a STATUS. The
 * daemon accepts root's connection at that wake-up and reads it at the
 * next, before nobody's connections that wait for their turn: after
 * one share of nobody's (64 datagrams a loop turn, its connections in
 * all; two at most), not after all 512 (each connection was read 32
 * datagrams a wake-up, however many its uid had): STATUS's count of
 * the datagrams read when it was handled says which. Nobody's requests
 * are then all answered, each connection's in order.
 */
Test(stall, a_uids_many_busy_connections_hold_another_uid_back_one_share,
     .init = start_open, .fini = stop_http)
{
	enum { H = 16, R = 32 };
	int h[H];
	uint64_t got = root_after_nobodys(h, H, R, -1);

	/* 64 a turn, nobody's share (TD__RX_UID_TURN), in each of the
	 * turns up to the one that reads root's connection */
	cr_assert_leq(got, 2 * 64, "root's STATUS was handled after %llu of "
		      "nobody's %d requests", (unsigned long long)got, H * R);
	for (int i = 0; i < H; i++) {
		stats_answered(h[i], R);
		close(h[i]);
	}
	cr_assert_gt(tu_metric_unix(http_path, "tensord_reads_deferred_total"),
		     0);
}

/*
 * The daemon under tests/slow-seal.c again, but what is slow is on its
 * loop: F_GET_SEALS of a memfd named SLOW_GET takes SLOW_GET_MS, which
 * the daemon asks when it closes such a memfd sent with a request that
 * carries none (td__close_peer_fd): a request as slow as the test says.
 */
#define SLOW_GET "tdslow-get"
#define SLOW_GET_MS 20

static void start_slow_get(void)
{
	start_shim(SLOW_GET, SLOW_MS, SLOW_GET_MS);
}

/*
 * A uid's share of a loop turn is one of time as well as of datagrams:
 * nobody's 4 connections each have 8 requests queued (while the daemon
 * is stopped), each SLOW_GET_MS long on the loop, 32 in all, fewer than
 * a turn's 64 datagrams; root's STATUS comes after them. The turn's
 * share of nobody's ends once its handling took TD__RX_UID_TURN_NS (1
 * ms): one request a turn, so root's STATUS is handled after a few of
 * nobody's, not after all 32 (640 ms), as when the share counted
 * datagrams alone.
 */
Test(stall, a_uids_slow_requests_hold_another_uid_back_one_share_of_time,
     .init = start_slow_get, .fini = stop_http)
{
	enum { H = 4, R = 8 };
	int h[H];
	int fd = memfd_create(SLOW_GET, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	uint64_t got;
	struct rawrep rep;

	cr_assert_geq(fd, 0);
	got = root_after_nobodys(h, H, R, fd);
	/* one a turn, in each of the turns up to the one that reads
	 * root's connection (two), and one more of slack */
	cr_assert_leq(got, 3, "root's STATUS was handled after %llu of "
		      "nobody's %d requests of %d ms each",
		      (unsigned long long)got, H * R, SLOW_GET_MS);
	for (int i = 0; i < H; i++) {
		for (int k = 0; k < R; k++) {
			raw_recv(h[i], &rep);
			cr_assert_eq(rep.h.request_id, 100 + (uint64_t)k);
			cr_assert_eq(rep.h.status, -EINVAL);
		}
		close(h[i]);
	}
	close(fd);
}

/* How many descriptors the daemon has open */
static int daemon_fds(void)
{
	return tu_pid_fd_count(D.pid);
}

/*
 * The daemon's descriptor count once it has n clients and the count held
 * still for 100 looks 1 ms apart: a close on its closer threads (a
 * HELLO's probe socket, td__close_peer_fd) may still be under way, and a
 * count taken then is one the daemon never comes back to.
 */
static int settled_fds(uint64_t n)
{
	int fds = -1, same = 0;

	for (int waited = 0; same < 100; waited++) {
		int now = daemon_fds();

		cr_assert_lt(waited, TU_WAIT_S * 1000, "the daemon's clients "
			     "and descriptors never held still");
		same = now == fds &&
				       tu_metric_unix(http_path,
						      "tensord_clients") == n
			       ? same + 1
			       : 0;
		fds = now;
		poll(NULL, 0, 1);
	}
	return fds;
}

/* Until the daemon has n clients and at most want descriptors open (one
 * more is a leak; fewer, a transient close that settled_fds missed) */
static void await_clients_fds(uint64_t n, int want)
{
	for (int waited = 0;
	     tu_metric_unix(http_path, "tensord_clients") != n ||
	     daemon_fds() > want;
	     waited++) {
		cr_assert_lt(waited, TU_WAIT_S * 1000, "never %llu clients and "
			     "at most %d fds: %llu clients, %d fds",
			     (unsigned long long)n,
			     want,
			     (unsigned long long)tu_metric_unix(
				     http_path, "tensord_clients"),
			     daemon_fds());
		poll(NULL, 0, 1);
	}
}

/*
 * Nobody's 16 connections each queue 96 requests and hang up, all while
 * the daemon is stopped: half shut their end for writing, half close
 * it. Most wait for their uid's turn when the daemon sees the hang-ups,
 * and the drain at a hang-up stops at the share too (64 datagrams: the
 * first drained has more than that). Each that shut for
 * writing gets all its replies, in order, and then the end; each
 * connection is let go, its descriptors with it (the daemon's count is
 * back where it was), and root's connection is still served.
 */
Test(stall, a_uids_waiting_connections_that_hang_up_are_answered_and_let_go,
     .init = start_open, .fini = stop_http)
{
	enum { H = 16, R = 96 };
	int h[H], v = raw_scm_conn(&D), base;
	uint64_t before;
	char byte;

	send_status(v, 8);
	before = status_requests(v, 8);
	base = settled_fds(1);
	for (int i = 0; i < H; i++)
		h[i] = nobody_conn();
	daemon_pause();
	for (int i = 0; i < H; i++) {
		queue_stats(h[i], R);
		if (i % 2)
			cr_assert_eq(close(h[i]), 0);
		else
			cr_assert_eq(shutdown(h[i], SHUT_WR), 0);
	}
	cr_assert_eq(kill(D.pid, SIGCONT), 0);
	for (int i = 0; i < H; i += 2) {
		stats_answered(h[i], R);
		tu_await_readable(h[i], TU_WAIT_S, "the hang-up");
		cr_assert_eq(recv(h[i], &byte, 1, 0), 0, "connection %d", i);
		close(h[i]);
	}
	await_clients_fds(1, base);
	/* and root's connection is still read */
	send_status(v, 9);
	cr_assert_geq(status_requests(v, 9) - before, (uint64_t)H / 2 * R,
		      "requests read");
	cr_assert_gt(tu_metric_unix(http_path, "tensord_reads_deferred_total"),
		     0);
	close(v);
}

/*
 * The daemon stopped (SIGTERM) while many of a uid's connections wait
 * for their turn: it ends cleanly (status 0), every connection ended.
 */
Test(stall, a_stop_while_a_uids_connections_wait_for_their_turn_is_clean,
     .init = start_open, .fini = stop_http)
{
	enum { H = 16, R = 32 };
	int h[H], st_;
	pid_t pid;
	char byte;

	for (int i = 0; i < H; i++)
		h[i] = nobody_conn();
	daemon_pause();
	for (int i = 0; i < H; i++)
		queue_stats(h[i], R);
	pid = D.pid;
	D.pid = 0;
	cr_assert_eq(kill(pid, SIGTERM), 0);
	cr_assert_eq(kill(pid, SIGCONT), 0);
	cr_assert(tu_reap_within(pid, TU_WAIT_S, &st_),
		  "tensord did not exit within %d s of SIGTERM", TU_WAIT_S);
	cr_assert(WIFEXITED(st_) && WEXITSTATUS(st_) == 0, "status %#x", st_);
	for (int i = 0; i < H; i++) {
		struct rawrep r;

		/* the replies it sent, then the end */
		while (recv(h[i], &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0)
			raw_recv(h[i], &r);
		cr_assert_eq(recv(h[i], &byte, 1, MSG_DONTWAIT), 0);
		close(h[i]);
	}
	unlink(D.sock);
	rmdir(D.dir);
}

/*
 * A uid's own connections take turns: nobody's three connections each
 * have 96 requests queued, then a fourth of nobody's a STATUS, all while
 * the daemon is stopped. The first two fill the uid's share of the
 * first turn; the third and the fourth wait, and the first two, busy
 * still, wait behind them at the next turn: the STATUS is handled after
 * one share of nobody's (64, two at most). Were the busy ones read
 * again ahead of those that wait, it waited until they were drained
 * (more than 192).
 */
Test(stall, a_uids_connection_that_waits_is_read_before_its_busy_ones_again,
     .init = start_open, .fini = stop_http)
{
	enum { H = 3, R = 96 };
	int h[H], v0 = raw_scm_conn(&D), y;
	uint64_t before, at;

	for (int i = 0; i < H; i++)
		h[i] = nobody_conn();
	y = nobody_conn();
	send_status(v0, 8);
	before = status_requests(v0, 8);
	daemon_pause();
	for (int i = 0; i < H; i++)
		queue_stats(h[i], R);
	send_status(y, 9);
	cr_assert_eq(kill(D.pid, SIGCONT), 0);
	at = status_requests(y, 9) - 1;
	cr_log_info("nobody's STATUS handled after %llu of its %d requests",
		    (unsigned long long)(at - before), H * R);
	cr_assert_leq(at - before, 2 * 64, "nobody's STATUS was handled "
		      "after %llu of its other connections' %d requests",
		      (unsigned long long)(at - before), H * R);
	for (int i = 0; i < H; i++) {
		stats_answered(h[i], R);
		close(h[i]);
	}
	close(y);
	close(v0);
}

/*
 * The daemon stopped (SIGTERM) while a request of many slow seals waits
 * for its next turn (it yielded to nobody's): the jobs whose connections
 * went end without their seals and the daemon exits with status 0.
 */
Test(stall, a_stop_while_a_yielded_seal_job_waits_its_turn_is_clean,
     .init = start_slow, .fini = stop_http)
{
	enum { N = 2, K = 6 };
	int sock[N], v = nobody_conn(), st_;
	pid_t pid;

	for (int i = 0; i < N; i++) {
		sock[i] = raw_scm_conn(&D);
		send_loans_many(sock[i], "stopy", i, K, NULL);
	}
	await_seals_waiting(N);
	nobody_publish(v, "stopy/nobody");
	answered_ok(v, "nobody's publish");
	cr_assert_geq(tu_metric_unix(http_path, "tensord_seal_yields_total"),
		      1);
	pid = D.pid;
	D.pid = 0;
	cr_assert_eq(kill(pid, SIGTERM), 0);
	cr_assert(tu_reap_within(pid, TU_WAIT_S, &st_),
		  "tensord did not exit within %d s of SIGTERM", TU_WAIT_S);
	cr_assert(WIFEXITED(st_) && WEXITSTATUS(st_) == 0, "status %#x", st_);
	for (int i = 0; i < N; i++)
		close(sock[i]);
	close(v);
	unlink(D.sock);
	rmdir(D.dir);
}

/* A connection of uid's */
static int conn_as(uid_t uid)
{
	int sock;

	cr_assert_eq(seteuid(uid), 0);
	sock = raw_scm_conn(&D);
	cr_assert_eq(seteuid(0), 0);
	return sock;
}

/*
 * Eight uids' four connections each have 48 requests queued while the
 * daemon is stopped, and root connects then: each uid is read its
 * share a turn (64), so root's STATUS is handled after two turns' of
 * theirs at most (1024 of the 1536), not after all of them (each
 * connection read 32 a wake-up: all of them before root's); each of
 * their requests is answered, each connection's in order, and every
 * uid's connections are let go (no client left but root's).
 */
Test(stall, many_uids_busy_at_once_each_take_their_share,
     .init = start_open, .fini = stop_http)
{
	enum { U = 8, C = 4, R = 48 };
	int h[U][C], v0 = raw_scm_conn(&D), v;
	uint64_t before, at;

	for (int u = 0; u < U; u++)
		for (int c = 0; c < C; c++)
			h[u][c] = conn_as((uid_t)(60000 + u));
	send_status(v0, 8);
	before = status_requests(v0, 8);
	daemon_pause();
	for (int u = 0; u < U; u++)
		for (int c = 0; c < C; c++)
			queue_stats(h[u][c], R);
	v = conn_unanswered();
	send_status(v, 9);
	cr_assert_eq(kill(D.pid, SIGCONT), 0);
	at = status_after_hello(v, 9);
	cr_log_info("root's STATUS handled after %llu of %d requests",
		    (unsigned long long)(at - before), U * C * R);
	cr_assert_leq(at - before, 2 * U * 64, "root's STATUS was handled "
		      "after %llu of the %d requests",
		      (unsigned long long)(at - before), U * C * R);
	for (int u = 0; u < U; u++)
		for (int c = 0; c < C; c++) {
			stats_answered(h[u][c], R);
			close(h[u][c]);
		}
	close(v0);
	for (int waited = 0; tu_metric_unix(http_path, "tensord_clients") != 1;
	     waited++) {
		cr_assert_lt(waited, TU_WAIT_S * 1000, "connections left");
		poll(NULL, 0, 1);
	}
	close(v);
}

/*
 * A connection of a uid whose others wait for their turn breaks the
 * protocol (an oversize datagram after 48 requests), all queued while
 * the daemon is stopped: it is read in its turns, answered up to the
 * violation, told (-EMSGSIZE) and cut; the uid's other connections are
 * still read, each answered in order, and nothing of the cut one is
 * left (the daemon's descriptors as before, no client but root's).
 */
Test(stall, a_waiting_connection_that_breaks_the_protocol_is_cut_and_its_uid_served,
     .init = start_open, .fini = stop_http)
{
	enum { H = 4, R = 48, BAD = H - 1 };
	static uint8_t big[TD_WIRE_MAX_MSG + 1];
	struct td_wire_hdr bh = {TD_WIRE_MAGIC, TD_WIRE_VERSION, TD_OP_STAT,
				 0, 0, 999, sizeof(big) - TD_WIRE_HDR_LEN, 0};
	int h[H], v = raw_scm_conn(&D), base, sz = 4 * TD_WIRE_MAX_MSG;
	struct rawrep r;
	char byte;

	send_status(v, 8);
	status_requests(v, 8);
	base = settled_fds(1);
	for (int i = 0; i < H; i++)
		h[i] = nobody_conn();
	cr_assert_eq(setsockopt(h[BAD], SOL_SOCKET, SO_SNDBUF, &sz,
				sizeof(sz)),
		     0);
	td_wire_hdr_encode(&bh, big);
	daemon_pause();
	for (int i = 0; i < H; i++)
		queue_stats(h[i], R);
	cr_assert_eq(td__scm_send(h[BAD], big, sizeof(big), NULL, 0, 0),
		     (ssize_t)sizeof(big));
	cr_assert_eq(kill(D.pid, SIGCONT), 0);
	for (int i = 0; i < H; i++) {
		stats_answered(h[i], R);
		if (i == BAD) {
			raw_recv(h[i], &r);
			cr_assert_eq(r.h.request_id, 999);
			cr_assert_eq(r.h.status, -EMSGSIZE);
			tu_await_readable(h[i], TU_WAIT_S, "the cut");
			cr_assert_eq(recv(h[i], &byte, 1, 0), 0);
		}
		close(h[i]);
	}
	await_clients_fds(1, base);
	cr_assert_gt(tu_metric_unix(http_path, "tensord_reads_deferred_total"),
		     0);
	close(v);
}
