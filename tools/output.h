/* SPDX-License-Identifier: MIT */
/*
 * Where tensorctl writes: one module for every command that writes a file
 * (get -o, save -o). What happens depends on what PATH is:
 *
 *  - missing or a regular file: replaced atomically (a temporary file in
 *    the same folder, fsync, rename, fsync of the folder), keeping the old
 *    file's mode and owner; a failed or interrupted write leaves the old
 *    file as it was and no temporary file behind;
 *  - a regular file with more than one hard link: rewritten in place, so
 *    every name sees the new bytes (as cp does), after the room is
 *    reserved and the file size limit checked; an output of a size
 *    unknown at the start (TCTL_OUT_UNSIZED: a Hurray save) is written
 *    to a temporary file first and copied in once whole (staged), so
 *    a full disk fails it before a byte of the file changes;
 *  - a symlink: followed to its target as cp does, never replaced; as
 *    root, not followed where the kernel's protected_symlinks rule would
 *    refuse it, nor into a file the link's owner could not write;
 *  - a device node, FIFO or socket: written directly, never replaced;
 *  - a directory: refused;
 *  - "-" (or no path): standard output.
 *
 * Binary outputs refuse a terminal unless "-" was given explicitly.
 */
#ifndef TD_TOOLS_OUTPUT_H
#define TD_TOOLS_OUTPUT_H

#include <limits.h>
#include <stdint.h>
#include <sys/stat.h>

#include "progress.h"

enum tctl_out_mode {
	TCTL_OUT_STDOUT,
	TCTL_OUT_REPLACE, /* temp file + rename */
	TCTL_OUT_INPLACE, /* hard-linked regular file */
	TCTL_OUT_DIRECT,  /* device, FIFO, socket */
};

struct tctl_out {
	const char *path; /* as given, for messages */
	enum tctl_out_mode mode;
	int fd;
	int dirfd;              /* REPLACE: the target's folder */
	char target[PATH_MAX];  /* REPLACE: the file renamed over */
	char tmp[PATH_MAX];     /* REPLACE: the temporary file, "" none */
	int created;            /* REPLACE: no file was at target before */
	int staged;             /* a hard-linked target, written via tmp */
	uint64_t size;          /* bytes announced, for INPLACE */
	uint64_t written;
	struct tctl_progress progress;
};

/* The bytes are binary: refuse a terminal unless PATH is "-". */
#define TCTL_OUT_BINARY 0x1u
/* The size is not known at the start (size 0 then means unknown). */
#define TCTL_OUT_UNSIZED 0x2u

/*
 * Open path (NULL: standard output) for size bytes. Returns TCTL_OK, or a
 * TCTL_ status with the reason reported. After TCTL_OK, end with
 * tctl_out_commit() or tctl_out_abort().
 */
int tctl_out_open(struct tctl_out *o, const char *path, unsigned flags,
		  uint64_t size);
/* Write all of p; TCTL_OK or a reported status (then abort). */
int tctl_out_write(struct tctl_out *o, const void *p, uint64_t len);
/* Make it durable and visible (rename); TCTL_OK or a reported status. */
int tctl_out_commit(struct tctl_out *o);
/* Drop a failed write: the temporary file goes, the old file stays. */
void tctl_out_abort(struct tctl_out *o);
/*
 * Remove what writers of this uid that died (SIGKILL) left in dir: their
 * temporary files and zarr export folders (".tensorctl-PID-...", once no
 * process has that pid).
 */
void tctl_remove_stale(const char *dir);

/*
 * Whether path writes to stdout: "-", or a pipe, socket, terminal or
 * regular file that is stdout's own (/dev/stdout, /proc/self/fd/1, or
 * the file stdout was sent to), where nothing but the output may go (no
 * summary, no --json document after it).
 */
int tctl_out_is_stdout(const char *path);

/*
 * SIGINT, SIGTERM, SIGHUP, SIGPIPE: a write in progress stops (a FIFO
 * nobody reads included), its temporary file is removed and the command
 * ends as usual (leases released); main() then dies of the signal.
 * Outside a write the signal kills at once (the kernel closes the
 * connection, which releases every lease). SIGALRM is taken too: once
 * such a signal is caught it comes each second, so that a call begun
 * just after the last look at the flag does not wait for ever. Installed
 * once by main().
 */
void tctl_signals_init(void);
/* The signal that interrupted a write, 0 when none. */
int tctl_interrupted(void);
/*
 * A write of its own (zarr export's folder) under the same signal rule:
 * between tctl_write_guard(1) and (0) the signals above only set
 * tctl_interrupted() and end blocking calls with EINTR; the writer stops,
 * removes what it made and returns.
 */
void tctl_write_guard(int on);
/*
 * A loop that publishes (load, zarr import: all or nothing) under the
 * same rule: between tctl_publish_guard(1) and (0) the first signal only
 * sets tctl_interrupted() (tctl_publish_check() stops the loop between
 * two tensors, which then deletes what it published, and main() dies of
 * the signal); a second one kills at once.
 */
void tctl_publish_guard(int on);
/* In a loop under tctl_publish_guard(1), before each publish and after
 * the last: TCTL_OK, or once a signal came the interruption reported
 * (kind "interrupted", naming path), for the loop to stop and roll back. */
int tctl_publish_check(const char *path);

#endif
