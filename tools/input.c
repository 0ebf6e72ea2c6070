/* SPDX-License-Identifier: MIT */
/* Size-capped inputs for tensorctl (input.h). */
#include "input.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensorctl.h"

#define CHUNK (8u << 20)
/* What the spool copies at a time (heap, freed at its end). */
#define SPOOL_PIECE ((size_t)1 << 20)

static int fail(const struct tctl_in *in, int err)
{
	return tctl_fail(TCTL_REFUSED, "io", err, "%s: %s", in->path,
			 strerror(err));
}

int tctl_file_kind(const char *path)
{
	uint8_t m[8];
	struct stat st;
	int fd, n = 0;

	if (stat(path, &st) < 0)
		return TCTL_KIND_NONE;
	if (S_ISDIR(st.st_mode)) {
		fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		n = fd >= 0 && (!faccessat(fd, "zarr.json", F_OK, 0) ||
				!faccessat(fd, ".zgroup", F_OK, 0));
		if (fd >= 0)
			close(fd);
		return n ? TCTL_KIND_ZARR : TCTL_KIND_NONE;
	}
	if (!S_ISREG(st.st_mode))
		return TCTL_KIND_NONE;
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd >= 0) {
		n = (int)pread(fd, m, sizeof(m), 0);
		close(fd);
	}
	if (n != (int)sizeof(m))
		return TCTL_KIND_NONE;
	/* the magics by hand: hrry.c and npy.c sit above this file */
	if (!memcmp(m, "TENSOGRM", 8))
		return TCTL_KIND_TGM;
	if (!memcmp(m, "HRRYFILE", 8))
		return TCTL_KIND_HRRY;
	return !memcmp(m, "\x93NUMPY", 6) ? TCTL_KIND_NPY : TCTL_KIND_NONE;
}

const char *tctl_kind_what(int kind)
{
	switch (kind) {
	case TCTL_KIND_TGM:
		return "a .tgm file: tensorctl load FILE publishes it";
	case TCTL_KIND_HRRY:
		return "a Hurray file: tensorctl load FILE publishes it";
	case TCTL_KIND_NPY:
		return "a NumPy .npy file: tensorctl put NAME FILE publishes it";
	case TCTL_KIND_ZARR:
		return "a Zarr folder: tensorctl zarr import DIR publishes it";
	}
	return NULL;
}

int tctl_fail_kind(int err, const char *kind_s, const char *path, int kind)
{
	const char *what = tctl_kind_what(kind);

	return tctl_fail(TCTL_REFUSED, kind_s, err, "%s: %s%s%s%s", path,
			 strerror(err), what ? " (" : "", what ? what : "",
			 what ? ")" : "");
}

int tctl_in_open_failed(const char *path, int err)
{
	struct stat st;

	/* open(2) of a socket (a tensord's --socket given as FILE) is
	 * ENXIO, which said only "No such device or address" */
	if (err == ENXIO && stat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		return tctl_fail(TCTL_REFUSED, "io", ENXIO,
				 "%s: %s (a socket, which is no file to read: "
				 "give its bytes on stdin, -)",
				 path, strerror(ENXIO));
	return tctl_fail(TCTL_REFUSED, "io", err, "%s: %s", path,
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
		return tctl_in_open_failed(in->path, errno);
	if (fstat(in->fd, &st) < 0) {
		int err = errno;

		tctl_in_close(in);
		return fail(in, err);
	}
	if (S_ISDIR(st.st_mode)) {
		tctl_in_close(in);
		/* `load out.zarr` said only "Is a directory" */
		return tctl_fail_kind(EISDIR, "io", in->path,
				      tctl_file_kind(path));
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

/* Where the spool goes: $TMPDIR as given, /tmp without one. */
static const char *spool_dir(void)
{
	const char *t = getenv("TMPDIR");

	return t && *t ? t : "/tmp";
}

static int spool_fail(const struct tctl_in *in, const char *dir, int err)
{
	if (err == ENOMEM) /* the mapping of one, not the directory */
		return fail(in, err);
	return tctl_fail(TCTL_REFUSED, "io", err,
			 "%s: cannot spool it to TMPDIR %s: %s (it is held "
			 "there, unnamed, while it is read: set TMPDIR to a "
			 "writable directory with room for it)",
			 in->path, dir, strerror(err));
}

/* An unnamed file in dir: *fd, or -errno. */
static int spool_open(const char *dir, int *fd)
{
	char path[4096];
	int n;

	/* O_EXCL: it can never be given a name (linkat) */
	*fd = open(dir, O_TMPFILE | O_RDWR | O_EXCL | O_CLOEXEC, 0600);
	if (*fd >= 0)
		return 0;
	/* a filesystem (or kernel) without O_TMPFILE says one of these;
	 * anything else (EACCES, ENOENT, EROFS, ENOTDIR) is the dir's */
	if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
		return -errno;
	n = snprintf(path, sizeof(path), "%s/.tensorctl-spool-XXXXXX", dir);
	if (n < 0 || (size_t)n >= sizeof(path))
		return -ENAMETOOLONG;
	*fd = mkostemp(path, O_CLOEXEC);
	if (*fd < 0)
		return -errno;
	/* unnamed from here on: gone with the last fd, whatever happens */
	if (unlink(path) < 0) {
		int err = errno;

		close(*fd);
		*fd = -1;
		return -err;
	}
	return 0;
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int tctl_in_spool(struct tctl_in *in, const uint8_t *head, size_t head_len,
		  uint64_t max, int *out)
{
	const char *dir = spool_dir();
	uint64_t total = head_len, got;
	uint8_t *piece = NULL;
	int fd = -1, rc, err;

	*out = -1;
	/* over RLIMIT_FSIZE the write fails with EFBIG, said below, instead
	 * of a kill (the file is unnamed: nothing would be left, but
	 * nothing would be said either) */
	signal(SIGXFSZ, SIG_IGN);
	err = spool_open(dir, &fd);
	if (err < 0)
		return spool_fail(in, dir, -err);
	piece = malloc(SPOOL_PIECE);
	if (!piece) {
		rc = fail(in, ENOMEM);
		goto out;
	}
	err = write_all(fd, head, head_len);
	rc = TCTL_OK;
	/* one byte over the cap tells "more" from "exactly the cap" */
	while (!err && total <= max) {
		uint64_t want = max - total + 1;

		rc = tctl_in_read(in, piece,
				  want < SPOOL_PIECE ? want : SPOOL_PIECE,
				  &got);
		if (rc || !got)
			break;
		total += got;
		err = write_all(fd, piece, (size_t)got);
	}
	if (!rc && err < 0) {
		rc = spool_fail(in, dir, -err);
	} else if (!rc && total > max) {
		char s[32];

		rc = tctl_fail(TCTL_REFUSED, "input", EFBIG,
			       "%s: more than %s (a stream is read up to "
			       "--max-bytes)",
			       in->path, tctl_size(s, max));
	}
out:
	free(piece);
	if (rc) {
		close(fd);
		return rc;
	}
	*out = fd;
	return TCTL_OK;
}

int tctl_spool_open(const struct tctl_in *in, int *fd)
{
	int err;

	signal(SIGXFSZ, SIG_IGN); /* as tctl_in_spool() */
	err = spool_open(spool_dir(), fd);
	return err < 0 ? spool_fail(in, spool_dir(), -err) : TCTL_OK;
}

int tctl_spool_fail(const struct tctl_in *in, int err)
{
	return spool_fail(in, spool_dir(), err);
}
