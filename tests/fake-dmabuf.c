/* SPDX-License-Identifier: MIT */
/*
 * LD_PRELOAD shim for tests: a memfd whose name starts with
 * $TD_FAKE_DMABUF (memfd_create's name, as /proc/self/fd shows it) is a
 * dma-buf to the process: fstatfs(2) reports DMA_BUF_MAGIC for it and
 * DMA_BUF_IOCTL_SYNC on it succeeds. This machine has no /dev/udmabuf
 * (nor any other dma-buf exporter), so what tensord does with dma-buf
 * planes that is not about the kernel's own dma-buf code (which planes
 * readers must not read as linear: tests/test-dmabuf.c) is tested
 * through it. The producer, the daemon and the readers each run with
 * the shim (each treats the plane as the dma-buf it stands for).
 *
 * The real calls are the next definitions (dlsym RTLD_NEXT).
 */
#undef _FILE_OFFSET_BITS
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <linux/dma-buf.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/statfs.h>
#include <unistd.h>

#define DMA_BUF_MAGIC_FAKE 0x444d4142 /* DMA_BUF_MAGIC, linux/magic.h */

/* Whether fd is a memfd named $TD_FAKE_DMABUF... */
static int fake(int fd)
{
	const char *prefix = getenv("TD_FAKE_DMABUF");
	char link[64], path[512];
	ssize_t len;

	if (!prefix || !prefix[0])
		return 0;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	len = readlink(link, path, sizeof(path) - 1);
	if (len <= 0)
		return 0;
	path[len] = 0;
	return !strncmp(path, "/memfd:", 7) &&
	       !strncmp(path + 7, prefix, strlen(prefix));
}

int fstatfs(int fd, struct statfs *buf)
{
	static int (*real)(int, struct statfs *);
	int rc;

	if (!real) /* POSIX's way past ISO C's pointer rule */
		*(void **)&real = dlsym(RTLD_NEXT, "fstatfs");
	rc = real(fd, buf);
	if (rc == 0 && fake(fd))
		buf->f_type = DMA_BUF_MAGIC_FAKE;
	return rc;
}

int fstatfs64(int fd, struct statfs64 *buf)
{
	static int (*real)(int, struct statfs64 *);
	int rc;

	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "fstatfs64");
	rc = real(fd, buf);
	if (rc == 0 && fake(fd))
		buf->f_type = DMA_BUF_MAGIC_FAKE;
	return rc;
}

int ioctl(int fd, unsigned long req, ...)
{
	static int (*real)(int, unsigned long, ...);
	va_list ap;
	void *arg;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "ioctl");
	if (req == DMA_BUF_IOCTL_SYNC && fake(fd))
		return 0; /* a memfd's pages are coherent already */
	return real(fd, req, arg);
}
