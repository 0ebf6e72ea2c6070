/* SPDX-License-Identifier: MIT */
/*
 * File I/O from the loop: io_uring, or bounded synchronous steps where
 * io_uring is not available (io.h).
 *
 * Why there is a fallback at all: io_uring is often forbidden on purpose
 * - systemd's @system-service filter leaves it out (our unit answers
 * EPERM), container runtimes' default seccomp profiles block it,
 * kernel.io_uring_disabled=1/2 turns it off host-wide, and kernels before
 * 5.6 lack the READ/WRITE opcodes. Snapshots must work there too; they
 * just move their bytes with pread/pwrite, a budget per loop iteration.
 */
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

static struct {
	bool on;    /* td__io_init() succeeded */
	bool uring; /* else the synchronous steps */
	uv_loop_t *loop;
	struct io_uring ring;
	int efd; /* registered with the ring, watched by poll */
	uv_poll_t poll;
	uv_prepare_t prep; /* io_uring_submit() once per loop iteration */
	uv_idle_t idle;    /* the synchronous steps */
	bool poll_on, prep_on, idle_on;
	struct td__list queue; /* not in the kernel yet / not done yet */
	unsigned inflight;     /* SQEs prepared and not completed */
	unsigned unsubmitted;  /* SQEs prepared and not submitted */
	unsigned pending;      /* every op not done */
} io = {.efd = -1};

static void finish(struct td__io_op *op, int64_t res)
{
	io.pending--;
	op->done(op, res);
}

/*
 * One step of op moved res bytes (or failed): 1 when op is finished (its
 * done() called), 0 when more of it is left.
 */
static int step_done(struct td__io_op *op, int64_t res)
{
	if (res < 0) {
		finish(op, res);
		return 1;
	}
	if (op->kind == TD__IO_FSYNC) {
		finish(op, 0);
		return 1;
	}
	op->moved += (size_t)res;
	if (res == 0) {
		/* a read that met the end of the file; a write cannot */
		finish(op, op->kind == TD__IO_READ ? (int64_t)op->moved
						   : -EIO);
		return 1;
	}
	if (op->moved < op->len)
		return 0;
	finish(op, (int64_t)op->moved);
	return 1;
}

/* ---- io_uring ---- */

static void on_poll(uv_poll_t *h, int status, int events);
static void on_prepare(uv_prepare_t *h);

static void fill_sqes(void)
{
	while (!td__list_empty(&io.queue) &&
	       io.inflight < TD__IO_URING_DEPTH) {
		struct td__io_op *op = td__container_of(
			io.queue.next, struct td__io_op, link);
		struct io_uring_sqe *sqe = io_uring_get_sqe(&io.ring);
		char *b = (char *)op->buf + op->moved;
		unsigned n = op->len - op->moved > (1u << 30)
				     ? 1u << 30
				     : (unsigned)(op->len - op->moved);

		if (!sqe)
			break;
		if (op->kind == TD__IO_READ)
			io_uring_prep_read(sqe, op->fd, b, n,
					   op->off + op->moved);
		else if (op->kind == TD__IO_WRITE)
			io_uring_prep_write(sqe, op->fd, b, n,
					    op->off + op->moved);
		else
			io_uring_prep_fsync(sqe, op->fd, 0);
		io_uring_sqe_set_data(sqe, op);
		td__list_del(&op->link);
		io.inflight++;
		io.unsubmitted++;
	}
	if (io.unsubmitted && !io.prep_on) {
		uv_prepare_start(&io.prep, on_prepare);
		io.prep_on = true;
	}
	if (io.inflight && !io.poll_on) {
		uv_poll_start(&io.poll, UV_READABLE, on_poll);
		io.poll_on = true;
	}
}

static void on_prepare(uv_prepare_t *h)
{
	int rc;

	(void)h;
	/* everything queued during this loop iteration, in one syscall */
	rc = io_uring_submit(&io.ring);
	if (rc >= 0)
		io.unsubmitted -= (unsigned)rc < io.unsubmitted
					  ? (unsigned)rc
					  : io.unsubmitted;
	else if (rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
		td__log(TD_LOG_ERROR, "io_uring_submit: %s", strerror(-rc));
	/* EAGAIN/EBUSY: completions first; the next iteration retries */
	if (!io.unsubmitted) {
		uv_prepare_stop(&io.prep);
		io.prep_on = false;
	}
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct io_uring_cqe *cqe;
	uint64_t n;

	(void)h;
	(void)status;
	(void)events;
	while (read(io.efd, &n, sizeof(n)) < 0 && errno == EINTR)
		;
	while (io_uring_peek_cqe(&io.ring, &cqe) == 0) {
		struct td__io_op *op = io_uring_cqe_get_data(cqe);
		int res = cqe->res;

		io_uring_cqe_seen(&io.ring, cqe);
		io.inflight--;
		if (res == -EINTR || res == -EAGAIN) {
			td__list_add_tail(&io.queue, &op->link);
			continue;
		}
		if (step_done(op, res) == 0)
			td__list_add_tail(&io.queue, &op->link);
	}
	fill_sqes();
	if (!io.inflight && io.poll_on) {
		uv_poll_stop(&io.poll);
		io.poll_on = false;
	}
}

/* 0, or -errno with the reason (static) in *why. */
static int uring_setup(uv_loop_t *loop, const char **why)
{
	struct io_uring_probe *probe;
	int rc;

	rc = io_uring_queue_init(TD__IO_URING_DEPTH, &io.ring, 0);
	if (rc < 0) {
		char v = 0;
		int fd = open("/proc/sys/kernel/io_uring_disabled",
			      O_RDONLY | O_CLOEXEC);

		if (fd >= 0) {
			if (read(fd, &v, 1) != 1)
				v = 0;
			close(fd);
		}
		if (rc == -ENOSYS)
			*why = "the kernel has no io_uring (before 5.1, built "
			       "without it, or a seccomp filter answers "
			       "ENOSYS)";
		else if (rc == -EPERM && v == '2')
			*why = "kernel.io_uring_disabled=2";
		else if (rc == -EPERM && v == '1')
			*why = "kernel.io_uring_disabled=1 and this process "
			       "is not in kernel.io_uring_group";
		else if (rc == -EPERM)
			*why = "io_uring_setup is forbidden (a seccomp filter "
			       "such as systemd's SystemCallFilter= or a "
			       "container profile, or an LSM)";
		else if (rc == -ENOMEM)
			*why = "no memory for the ring (before 5.12 it counts "
			       "against RLIMIT_MEMLOCK)";
		else
			*why = "io_uring_queue_init failed";
		return rc;
	}
	probe = io_uring_get_probe_ring(&io.ring);
	if (!probe || !io_uring_opcode_supported(probe, IORING_OP_READ) ||
	    !io_uring_opcode_supported(probe, IORING_OP_WRITE) ||
	    !io_uring_opcode_supported(probe, IORING_OP_FSYNC)) {
		*why = "the kernel lacks the READ/WRITE opcodes (before 5.6)";
		rc = -ENOTSUP;
		goto fail;
	}
	io_uring_free_probe(probe);
	probe = NULL;
	io.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (io.efd < 0) {
		rc = -errno;
		*why = "eventfd failed";
		goto fail;
	}
	rc = io_uring_register_eventfd(&io.ring, io.efd);
	if (rc < 0) {
		*why = "io_uring_register_eventfd failed";
		goto fail;
	}
	rc = uv_poll_init(loop, &io.poll, io.efd);
	if (rc < 0) {
		*why = "uv_poll_init on the eventfd failed";
		goto fail;
	}
	uv_prepare_init(loop, &io.prep);
	return 0;
fail:
	if (probe)
		io_uring_free_probe(probe);
	if (io.efd >= 0)
		close(io.efd);
	io.efd = -1;
	io_uring_queue_exit(&io.ring);
	return rc;
}

/* ---- the synchronous steps ---- */

/* An fsync of the fallback, on libuv's thread pool. */
struct fsync_req {
	uv_fs_t req;
	struct td__io_op *op;
};

static void on_fsync(uv_fs_t *req)
{
	struct fsync_req *f = td__container_of(req, struct fsync_req, req);
	int64_t res = req->result;

	uv_fs_req_cleanup(req);
	step_done(f->op, res);
	free(f);
}

/*
 * The fallback's fsync: a whole file's writeback, 50-110 ms for a
 * snapshot on the VM of bench/README.md and more on a slow disk, that
 * the loop waited for, every client with it. It goes to libuv's thread
 * pool (uv_fs_fsync); done() runs from the loop when it is over. 0, or
 * -1 when it could not be queued (then the loop does it, as before).
 */
static int fsync_off_loop(struct td__io_op *op)
{
	struct fsync_req *f = malloc(sizeof(*f));

	if (!f)
		return -1;
	f->op = op;
	if (uv_fs_fsync(io.loop, &f->req, op->fd, on_fsync) < 0) {
		free(f);
		return -1;
	}
	return 0;
}

static void on_idle(uv_idle_t *h)
{
	size_t budget = TD__IO_SYNC_BUDGET;

	(void)h;
	while (!td__list_empty(&io.queue) && budget) {
		struct td__io_op *op = td__container_of(
			io.queue.next, struct td__io_op, link);
		size_t n = op->len - op->moved;
		char *b = (char *)op->buf + op->moved;
		off_t at = (off_t)(op->off + op->moved);
		ssize_t res;

		if (n > budget)
			n = budget;
		if (op->kind == TD__IO_FSYNC) {
			td__list_del(&op->link);
			if (fsync_off_loop(op) < 0)
				step_done(op, fsync(op->fd) < 0 ? -errno : 0);
			budget = budget > (64u << 10) ? budget - (64u << 10)
						     : 0;
			continue;
		}
		if (op->kind == TD__IO_READ)
			res = pread(op->fd, b, n, at);
		else
			res = pwrite(op->fd, b, n, at);
		if (res < 0 && errno == EINTR)
			continue;
		if (res < 0)
			res = -errno;
		if (op->kind == TD__IO_WRITE && res > 0)
			/*
			 * Start writeback of what was just written, so the
			 * final fsync has little left to wait for; this only
			 * queues the pages (no wait).
			 */
			sync_file_range(op->fd, at, res,
					SYNC_FILE_RANGE_WRITE);
		if (res > 0) {
			/* a system call is not free: 4 KiB at least */
			size_t cost = (size_t)res > TD__IO_SYNC_OP_MIN
					      ? (size_t)res
					      : TD__IO_SYNC_OP_MIN;

			budget -= cost < budget ? cost : budget;
		} else {
			budget = budget > (64u << 10) ? budget - (64u << 10)
						     : 0;
		}
		td__list_del(&op->link);
		if (step_done(op, res) == 0)
			td__list_add_tail(&io.queue, &op->link);
	}
	if (td__list_empty(&io.queue) && io.idle_on) {
		uv_idle_stop(&io.idle);
		io.idle_on = false;
	}
}

/* ---- the interface ---- */

int td__io_init(uv_loop_t *loop)
{
	const char *env = getenv("TENSORD_IO"), *why = NULL;
	enum td__io_mode mode = TD__IO_AUTO;
	int rc;

	if (io.on)
		return 0;
	if (env && *env && strcmp(env, "auto")) {
		if (!strcmp(env, "uring"))
			mode = TD__IO_URING;
		else if (!strcmp(env, "sync"))
			mode = TD__IO_SYNC;
		else {
			td__log(TD_LOG_ERROR, "TENSORD_IO=%s: want uring, "
					      "sync or auto",
				env);
			return -EINVAL;
		}
	}
	io.loop = loop;
	td__list_init(&io.queue);
	uv_idle_init(loop, &io.idle);
	io.on = true;
	if (mode == TD__IO_SYNC) {
		td__log(TD_LOG_INFO, "file I/O: sync (pread/pwrite), as "
				     "TENSORD_IO=sync asks");
		return 0;
	}
	rc = uring_setup(loop, &why);
	if (rc == 0) {
		io.uring = true;
		td__log(TD_LOG_INFO, "file I/O: io_uring (%s)",
			mode == TD__IO_URING ? "TENSORD_IO=uring"
					     : "available");
		return 0;
	}
	td__log(mode == TD__IO_URING ? TD_LOG_WARN : TD_LOG_INFO,
		"file I/O: sync (pread/pwrite): io_uring unavailable: %s "
		"(%s)%s",
		why, strerror(-rc),
		mode == TD__IO_URING ? "; TENSORD_IO=uring cannot be honoured"
				     : "");
	return 0;
}

const char *td__io_name(void)
{
	return io.uring ? "io_uring" : "sync";
}

void td__io_submit(struct td__io_op *op)
{
	op->moved = 0;
	io.pending++;
	td__list_add_tail(&io.queue, &op->link);
	if (io.uring) {
		fill_sqes();
	} else if (!io.idle_on) {
		uv_idle_start(&io.idle, on_idle);
		io.idle_on = true;
	}
}

unsigned td__io_pending(void)
{
	return io.pending;
}

void td__io_fini(void)
{
	if (!io.on)
		return;
	uv_close((uv_handle_t *)&io.idle, NULL);
	if (io.uring) {
		/* uv_close stops the watch now; the fd may go after it */
		uv_close((uv_handle_t *)&io.poll, NULL);
		uv_close((uv_handle_t *)&io.prep, NULL);
		io_uring_queue_exit(&io.ring);
		close(io.efd);
		io.efd = -1;
	}
	io.on = io.uring = io.poll_on = io.prep_on = io.idle_on = false;
}
