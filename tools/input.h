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
 * All of path into a malloc'ed *buf, up to max bytes (more is refused,
 * naming --max-bytes, EFBIG): a stream read until then, a regular file
 * (or "-" being one, < FILE) refused by its size before a byte is read
 * or allocated. TCTL_OK or a reported status.
 */
int tctl_read_input(const char *path, uint64_t max, uint8_t **buf,
		    size_t *len);
/* The same on an open input (the caller closes it). */
int tctl_in_slurp(struct tctl_in *in, uint64_t max, uint8_t **buf,
		  size_t *len);

#endif
