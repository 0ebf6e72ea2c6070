/* SPDX-License-Identifier: MIT */
/*
 * A peer's descriptor must never make the daemon wait on a filesystem
 * the peer serves. A file on a FUSE mount answers fstat() and fstatfs()
 * only when its server does; one that never answers would hold the
 * daemon's single loop (every tenant) for as long as the server lives.
 * Here the server answers this test and reports, without answering,
 * whatever the daemon asks; a report is the defect, seen at once.
 * Skipped where FUSE cannot be mounted (no /dev/fuse, not root).
 */
#include "rawclient.h"

#include "blob.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/stat.h>
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

static int daemon_fds(void)
{
	return tu_pid_fd_count(D.pid);
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
	uint64_t shape[1] = {4096};
	int64_t strides[1] = {1};
	struct td_blob_plane pl = {.stride = 4096, .size = 4096, .used = 4096};
	struct td_blob_desc bd = {
		.storage_kind = TD_STORAGE_SHM, .pid = (uint32_t)getpid(),
		.fence_fd = -1, .dtype = TD_DTYPE_U8,
		.quant_axis = TD_QUANT_NONE, .ndim = 1, .shape = shape,
		.strides_len = 1, .strides = strides, .plane_count = 1,
		.planes = &pl,
	};
	int64_t bl = td_blob_encode(&bd, blob, sizeof(blob), NULL);
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
	int base = daemon_fds();
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
	cr_assert_eq(daemon_fds(), base, "%s: the refused fd was kept", what);
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
	int sock, fd, base;
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
	base = daemon_fds();
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
	cr_assert_eq(daemon_fds(), base, "the pulled probe was kept");
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
	int sock, base;

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
	base = daemon_fds();
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
	cr_assert_leq(daemon_fds(), base - 1, "fds kept: %d, before %d",
		      daemon_fds(), base);
	close(sock);
	for (int i = 0; i <= TD_WIRE_MAX_FDS; i++)
		close(fds[i]);
}
