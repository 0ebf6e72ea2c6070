/* SPDX-License-Identifier: MIT */
/*
 * The stock Hurray transports of <tensord/hrry.h> (specs/hurray.md
 * §17.2): a borrowed file descriptor (pread/write) and a memory span
 * (views: zero copy), optionally over a read-only mapping of a file.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensord/hrry.h"

/* ---- fd: the ctx is the fd itself, nothing to release ---- */

static int fd_read_at(void *ctx, uint64_t offset, void *buf, size_t len,
		      size_t *got)
{
	int fd = (int)(intptr_t)ctx;
	if (offset > INT64_MAX)
		return -EINVAL;
	for (;;) {
		ssize_t n = pread(fd, buf, len, (off_t)offset);
		if (n >= 0) {
			*got = (size_t)n;
			return 0;
		}
		if (errno != EINTR)
			return -errno;
	}
}

static int fd_write(void *ctx, const void *buf, size_t len, size_t *put)
{
	int fd = (int)(intptr_t)ctx;
	for (;;) {
		ssize_t n = write(fd, buf, len);
		if (n >= 0) {
			*put = (size_t)n;
			return 0;
		}
		if (errno != EINTR)
			return -errno;
	}
}

int td_hrry_transport_fd(int fd, struct td_hrry_transport *out)
{
	struct stat st;
	if (fd < 0 || !out)
		return -EINVAL;
	if (fstat(fd, &st) < 0)
		return -errno;
	*out = (struct td_hrry_transport){
		.ctx = (void *)(intptr_t)fd,
		.size = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0,
		.read_at = fd_read_at,
		.write = fd_write,
	};
	return 0;
}

/* ---- memory span ---- */

struct span {
	const uint8_t *base;
	uint64_t len;
	bool mapped; /* release munmaps */
};

static int span_read_at(void *ctx, uint64_t offset, void *buf, size_t len,
			size_t *got)
{
	const struct span *s = ctx;
	if (offset >= s->len) {
		*got = 0;
		return 0;
	}
	uint64_t n = s->len - offset;
	if (n > len)
		n = len;
	memcpy(buf, s->base + offset, (size_t)n);
	*got = (size_t)n;
	return 0;
}

static int span_view_at(void *ctx, uint64_t offset, size_t len,
			const void **view)
{
	const struct span *s = ctx;
	if (offset > s->len || len > s->len - offset)
		return -ENODATA;
	*view = s->base + offset;
	return 0;
}

static void span_release(void *ctx)
{
	struct span *s = ctx;
	if (s && s->mapped)
		munmap((void *)(uintptr_t)s->base, (size_t)s->len);
	free(s);
}

static int span_new(const void *base, uint64_t len, bool mapped,
		    struct td_hrry_transport *out)
{
	struct span *s = malloc(sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->base = base;
	s->len = len;
	s->mapped = mapped;
	*out = (struct td_hrry_transport){
		.ctx = s,
		.size = len,
		.read_at = span_read_at,
		.release = span_release,
		.view_at = span_view_at,
	};
	return 0;
}

int td_hrry_transport_mem(const void *base, uint64_t len,
			  struct td_hrry_transport *out)
{
	if (!out || (!base && len))
		return -EINVAL;
	return span_new(base, len, false, out);
}

int td_hrry_transport_map_fd(int fd, struct td_hrry_transport *out)
{
	struct stat st;
	if (fd < 0 || !out)
		return -EINVAL;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    (uint64_t)st.st_size > SIZE_MAX)
		return -EINVAL;
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	int rc = span_new(p, (uint64_t)st.st_size, true, out);
	if (rc)
		munmap(p, (size_t)st.st_size);
	return rc;
}
