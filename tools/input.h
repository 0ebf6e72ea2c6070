/* SPDX-License-Identifier: MIT */
/*
 * Where tensorctl reads: a regular file by its size (what it holds when
 * opened, never more), anything else ("-" = stdin, a pipe, a FIFO, a
 * device such as /dev/zero) up to a cap, refused beyond it with a reason
 * naming the option that raises it.
 */
#ifndef TD_TOOLS_INPUT_H
#define TD_TOOLS_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "progress.h"

/* What a stream may bring by default (--max-bytes changes it). */
#define TCTL_STREAM_MAX (1ull << 30)

struct tctl_in {
	const char *path; /* as given ("-": "standard input") */
	int fd;
	int regular;   /* a regular file: size is what it holds */
	int is_stdin;  /* "-": capped like a stream even when regular */
	uint64_t size; /* regular files only */
	struct tctl_progress progress;
};

/* TCTL_OK, or a reported status. */
int tctl_in_open(struct tctl_in *in, const char *path);
/* Read until EOF or cap bytes into buf; *got. TCTL_OK or reported. */
int tctl_in_read(struct tctl_in *in, void *buf, uint64_t cap, uint64_t *got);
void tctl_in_close(struct tctl_in *in);
/*
 * What path is, for a command given a file of another command's kind: a
 * .tgm, Hurray or .npy file by its first 8 bytes (a regular file, never
 * waited on), a Zarr folder by its zarr.json or .zgroup; else NONE.
 */
enum {
	TCTL_KIND_NONE,
	TCTL_KIND_TGM,
	TCTL_KIND_HRRY,
	TCTL_KIND_NPY,
	TCTL_KIND_ZARR
};
int tctl_file_kind(const char *path);
/* "a .tgm file: tensorctl load FILE publishes it", the same for the
 * other kinds (a .npy file: put; a Zarr folder: zarr import); NULL for
 * none. */
const char *tctl_kind_what(int kind);
/* tctl_fail() "PATH: strerror(err) (what kind is)" of kind_s ("io"). */
int tctl_fail_kind(int err, const char *kind_s, const char *path, int kind);
/* Report open(path) failing with err (a socket is said to be one). */
int tctl_in_open_failed(const char *path, int err);

/*
 * All of an open input into a malloc'ed *buf, up to max bytes (more is
 * refused, naming --max-bytes, EFBIG): a stream read until then, a
 * regular file (or "-" being one, < FILE) refused by its size before a
 * byte is read or allocated. For inspect's blob file only: streams are
 * held in a spool (tgm_stream_spool(), tctl_in_spool()), not here.
 * TCTL_OK or a reported status.
 */
int tctl_in_slurp(struct tctl_in *in, uint64_t max, uint8_t **buf,
		  size_t *len);

/*
 * head[0..head_len) (what was read of in already, may be 0 bytes) and the
 * rest of in to its end, up to max bytes in all (more is refused, naming
 * --max-bytes, EFBIG), into an unnamed temporary file in $TMPDIR (/tmp
 * when it is unset or empty): O_TMPFILE, or mkstemp and unlink at once
 * where the filesystem has no O_TMPFILE, so no name is ever left behind.
 * For inputs that decode only from their end (a Hurray stream, found by
 * its trailer): they are then read with pread like a file on disk, in
 * that path's bounded memory, instead of held whole. *fd: the file, read
 * and write, CLOEXEC, owned by the caller. A spool that cannot be made or
 * written (TMPDIR missing or not writable, ENOSPC, EDQUOT, EFBIG past
 * RLIMIT_FSIZE) is refused naming TMPDIR. TCTL_OK or a reported status.
 */
int tctl_in_spool(struct tctl_in *in, const uint8_t *head, size_t head_len,
		  uint64_t max, int *fd);
/* The unnamed file alone (tgm-stream.c maps one): *fd, TCTL_OK or
 * reported naming TMPDIR. */
int tctl_spool_open(const struct tctl_in *in, int *fd);
/* A spool's write or room failing with err (ENOSPC...): reported. */
int tctl_spool_fail(const struct tctl_in *in, int err);

#endif
