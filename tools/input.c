/* SPDX-License-Identifier: MIT */
/* Size-capped inputs for tensorctl (input.h). */
#include "input.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensorctl.h"

#define CHUNK (8u << 20)

static int fail(const struct tctl_in *in, int err)
{
	return tctl_fail(TCTL_REFUSED, "io", err, "%s: %s", in->path,
			 strerror(err));
}

int tctl_in_open(struct tctl_in *in, const char *path)
{
	struct stat st;

	memset(in, 0, sizeof(*in));
	/* `"$F"` of an unset F: it said ": No such file or directory" */
	if (!*path)
		return tctl_fail(TCTL_USAGE, "usage", EINVAL,
				 "an empty input path (- is stdin)");
	in->path = strcmp(path, "-") ? path : "standard input";
	in->is_stdin = !strcmp(path, "-");
	in->fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)
				   : STDIN_FILENO;
	if (in->fd < 0)
		return fail(in, errno);
	if (fstat(in->fd, &st) < 0) {
		int err = errno;

		tctl_in_close(in);
		return fail(in, err);
	}
	if (S_ISDIR(st.st_mode)) {
		tctl_in_close(in);
		return fail(in, EISDIR);
	}
	in->regular = S_ISREG(st.st_mode);
	in->size = in->regular ? (uint64_t)st.st_size : 0;
	tctl_progress_start(&in->progress, in->path, in->size);
	return TCTL_OK;
}

int tctl_in_read(struct tctl_in *in, void *buf, uint64_t cap, uint64_t *got)
{
	uint8_t *p = buf;

	*got = 0;
	while (*got < cap) {
		uint64_t want = cap - *got;
		ssize_t n = read(in->fd, p + *got, want > CHUNK ? CHUNK : want);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return fail(in, errno);
		if (n == 0)
			break;
		*got += (uint64_t)n;
		tctl_progress_add(&in->progress, (uint64_t)n);
	}
	return TCTL_OK;
}

void tctl_in_close(struct tctl_in *in)
{
	tctl_progress_end(&in->progress);
	if (in->fd > STDIN_FILENO)
		close(in->fd);
	in->fd = -1;
}

/* Read a stream, growing the buffer up to cap bytes. */
static int read_growing(struct tctl_in *in, uint64_t cap, uint8_t **out,
			uint64_t *len)
{
	uint64_t size = 1 << 16, got;
	uint8_t *buf = NULL;
	int rc;

	*len = 0;
	for (;;) {
		uint8_t *nb;

		if (size > cap)
			size = cap;
		nb = size > SIZE_MAX ? NULL : realloc(buf, size ? size : 1);
		if (!nb) {
			free(buf);
			return fail(in, ENOMEM);
		}
		buf = nb;
		rc = tctl_in_read(in, buf + *len, size - *len, &got);
		*len += got;
		if (rc || *len < size || size == cap)
			break;
		size *= 2;
	}
	if (rc)
		free(buf);
	else
		*out = buf;
	return rc;
}

int tctl_in_slurp(struct tctl_in *in, uint64_t max, uint8_t **out,
		  size_t *out_len)
{
	uint64_t got = 0;
	uint8_t *buf = NULL;
	int rc;

	/* a regular file: what it holds now; a stream: one byte over the
	 * cap tells "more" from "exactly the cap". Everything slurped is
	 * held whole, so the cap holds for a file too, checked by its size
	 * before anything is allocated: a sparse file has any size */
	if (in->regular && in->size > max) {
		got = in->size;
		rc = TCTL_OK;
	} else if (in->regular) {
		buf = in->size < SIZE_MAX ? malloc(in->size ? in->size : 1)
					  : NULL;
		rc = buf ? tctl_in_read(in, buf, in->size, &got)
			 : fail(in, ENOMEM);
	} else {
		rc = read_growing(in, max + 1, &buf, &got);
	}
	if (!rc && got > max) {
		char s[32];

		rc = tctl_fail(TCTL_REFUSED, "input", EFBIG,
			       "%s: more than %s (%s is read up to "
			       "--max-bytes)",
			       in->path, tctl_size(s, max),
			       in->regular && !in->is_stdin
				       ? "a file read whole, such as a blob,"
				       : "a stream");
	}
	if (rc) {
		free(buf);
		return rc;
	}
	*out = buf;
	*out_len = (size_t)got;
	return TCTL_OK;
}

int tctl_read_input(const char *path, uint64_t max, uint8_t **out,
		    size_t *out_len)
{
	struct tctl_in in;
	int rc = tctl_in_open(&in, path);

	if (rc)
		return rc;
	rc = tctl_in_slurp(&in, max, out, out_len);
	tctl_in_close(&in);
	return rc;
}
