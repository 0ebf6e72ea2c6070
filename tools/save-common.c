/* SPDX-License-Identifier: MIT */
/* What `tensorctl save` shares between its formats (.tgm, .hrry). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensorctl.h"

const char *tctl_dense_unsavable(const struct td_tensor *t)
{
	uint64_t want = td_tensor_dtype_size(td_tensor_dtype(t));
	const uint64_t *shape = td_tensor_shape(t);
	const int64_t *st;
	uint32_t n, ndim = td_tensor_ndim(t);

	if (td_tensor_quant(t, NULL, NULL, NULL, NULL) != -2)
		return "it is quantized (the file has no place for the "
		       "scales)";
	st = td_tensor_strides(t, &n);
	for (uint32_t k = ndim; k-- > 0;) {
		if (st && (uint64_t)st[k] != want)
			return "its strides are not dense C order";
		if (__builtin_mul_overflow(want, shape[k], &want))
			return "its size overflows";
	}
	if (td_tensor_plane_count(t) > 1)
		return "it has more than one plane";
	if (td_tensor_bytes(t) != want)
		return "its bytes do not match its shape";
	return NULL;
}

int tctl_atomic_begin(const char *path, char **tmp_out)
{
	size_t pl = strlen(path);
	char *tmp = malloc(pl + 16);
	int fd;

	if (!tmp)
		return -ENOMEM;
	snprintf(tmp, pl + 16, "%s.tmp-XXXXXX", path);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		int rc = -errno;
		free(tmp);
		return rc;
	}
	*tmp_out = tmp;
	return fd;
}

int tctl_atomic_end(int fd, const char *tmp, const char *path, int rc)
{
	mode_t mask;

	/* mkostemp() made it 0600: give it what open(0666) would */
	mask = umask(0);
	umask(mask);
	if (!rc && fchmod(fd, 0666 & ~mask) < 0)
		rc = -errno;
	if (!rc && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path) < 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
	return rc;
}
