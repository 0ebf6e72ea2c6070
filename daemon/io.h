/* SPDX-License-Identifier: MIT */
/*
 * File I/O from the daemon's loop (io.c): io_uring when the kernel and
 * the sandbox allow it, else plain pread/pwrite in bounded steps and
 * fsync on libuv's thread pool.
 * Used by the snapshots (snapshot-*.c); not installed.
 *
 * The loop never waits on a file: with io_uring the requests queued in
 * one loop iteration go to the kernel in one io_uring_submit() (a
 * uv_prepare handle, just before the loop polls) and their completions
 * come back through an eventfd registered with the ring and watched by a
 * uv_poll_t; no thread is started. The fallback does the same requests
 * itself from a uv_idle handle, at most TD__IO_SYNC_BUDGET bytes per
 * loop iteration, so clients are served between two slices; an fsync,
 * one call that waits for a whole file's writeback, goes to libuv's
 * thread pool (uv_fs_fsync) instead, and done() runs from the loop.
 */
#ifndef TD_DAEMON_IO_H
#define TD_DAEMON_IO_H

#include <stddef.h>
#include <stdint.h>

#include "daemon.h"

enum td__io_kind {
	TD__IO_READ = 1,
	TD__IO_WRITE = 2,
	TD__IO_FSYNC = 3, /* fsync(fd): data and metadata */
};

/* What TENSORD_IO asks for (auto: io_uring when it works). */
enum td__io_mode {
	TD__IO_AUTO = 0,
	TD__IO_URING = 1,
	TD__IO_SYNC = 2,
};

/*
 * Bytes the fallback moves per loop iteration (well under a ms), each
 * request counted as at least TD__IO_SYNC_OP_MIN: a save of thousands of
 * small tensors is thousands of 64-byte requests, and a budget of bytes
 * alone let one iteration make 4000 system calls.
 */
#define TD__IO_SYNC_BUDGET (256u << 10)
#define TD__IO_SYNC_OP_MIN (4u << 10)
/* Requests in the kernel at once with io_uring (ring size). */
#define TD__IO_URING_DEPTH 64

/*
 * One request, in the caller's memory until done() runs. Short reads and
 * writes are continued by the engine: done() gets len (everything moved),
 * fewer bytes for a read that met the end of the file, or -errno.
 */
struct td__io_op {
	enum td__io_kind kind;
	int fd;
	void *buf;
	size_t len;
	uint64_t off;
	void (*done)(struct td__io_op *op, int64_t res);
	void *arg;
	/* the engine's */
	struct td__list link;
	size_t moved;
};

/*
 * Pick the engine: TENSORD_IO=uring|sync|auto (default auto). auto and
 * uring try io_uring (ring, the opcodes, the eventfd) and say once in the
 * log which engine is used and why; uring forced but unavailable falls
 * back all the same (logged as a warning). 0 or -errno (bad TENSORD_IO).
 */
int td__io_init(uv_loop_t *loop);
/* "io_uring" or "sync". */
const char *td__io_name(void);
/* Queue op; its done() runs later from the loop, never from inside. */
void td__io_submit(struct td__io_op *op);
/* Requests queued or in the kernel. */
unsigned td__io_pending(void);
/*
 * Shutdown, after every request is done (callers wait with the loop):
 * close the handles, the ring and the eventfd. Idempotent.
 */
void td__io_fini(void);

#endif
