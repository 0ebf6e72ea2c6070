/* SPDX-License-Identifier: MIT */
/* pidfd, futex and memfd wrappers (os.h). */
#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/dma-buf.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <string.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

uint32_t td__cpus(void)
{
	static _Atomic uint32_t online;
	const char *e = getenv("TENSORD_CPUS");
	uint32_t v;
	long got;

	if (e && *e) {
		char *end;
		unsigned long n = strtoul(e, &end, 10);

		if (!*end && n > 0 && n < UINT32_MAX)
			return (uint32_t)n;
	}
	v = atomic_load_explicit(&online, memory_order_relaxed);
	if (v)
		return v;
	got = sysconf(_SC_NPROCESSORS_ONLN);
	v = got > 0 && got < UINT32_MAX ? (uint32_t)got : 0;
	atomic_store_explicit(&online, v, memory_order_relaxed);
	return v;
}

int td__pidfd_open(pid_t pid)
{
	long fd = syscall(SYS_pidfd_open, pid, 0);

	return fd < 0 ? -errno : (int)fd;
}

int td__pidfd_getfd(int pidfd, int fd)
{
	long r;

	if (pidfd < 0)
		return -ESRCH;
	/* The new fd is always O_CLOEXEC (pidfd_getfd(2)). */
	r = syscall(SYS_pidfd_getfd, pidfd, fd, 0);
	return r < 0 ? -errno : (int)r;
}

int td__futex_wait(const uint32_t *w, uint32_t val,
		   const struct timespec *rel)
{
	if (syscall(SYS_futex, w, FUTEX_WAIT, val, rel, NULL, 0) < 0 &&
	    errno == ETIMEDOUT)
		return -ETIMEDOUT;
	return 0; /* EAGAIN (changed), EINTR, woken: the caller re-checks */
}

int td__futex_wait2(const uint32_t *w1, uint32_t v1, const uint32_t *w2,
		    uint32_t v2, const struct timespec *abs)
{
#ifdef __NR_futex_waitv
	/* shared futexes: no FUTEX_PRIVATE_FLAG */
	struct futex_waitv fw[2] = {
		{.val = v1, .uaddr = (uintptr_t)w1, .flags = FUTEX_32},
		{.val = v2, .uaddr = (uintptr_t)w2, .flags = FUTEX_32},
	};

	if (syscall(__NR_futex_waitv, fw, 2, 0, abs, CLOCK_MONOTONIC) >= 0)
		return 0;
	if (errno == ETIMEDOUT)
		return -ETIMEDOUT;
	/* a kernel before 5.16, or a seccomp filter that refuses it */
	if (errno == ENOSYS || errno == EPERM)
		return -ENOSYS;
	return 0; /* EAGAIN (changed), EINTR: the caller re-checks */
#else
	(void)w1, (void)v1, (void)w2, (void)v2, (void)abs;
	return -ENOSYS;
#endif
}

void td__futex_wake(const uint32_t *w, int n)
{
	syscall(SYS_futex, w, FUTEX_WAKE, n, NULL, NULL, 0);
}

bool td__futex_wake_word(_Atomic uint32_t *w, uint32_t asleep)
{
	uint32_t v = asleep;

	/* the high bits (a ring row's owner token) stay */
	if (!atomic_compare_exchange_strong(w, &v, asleep & ~0xffu))
		return false;
	td__futex_wake((const uint32_t *)w, INT_MAX);
	return true;
}

uint32_t td__futex_unwait_word(_Atomic uint32_t *w, uint32_t to,
			       uint32_t asleep)
{
	uint32_t was = atomic_exchange(w, to);

	if ((was & 0xffu) == asleep)
		td__futex_wake((const uint32_t *)w, INT_MAX);
	return was;
}

int td__memfd_seal_size(int fd)
{
	return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0 ? -errno
								       : 0;
}

#define PUBLISH_SEALS (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

int td__memfd_seal_check(int fd, const char **why)
{
	int seals = fcntl(fd, F_GET_SEALS);

	if (seals < 0) {
		*why = "cannot read the memfd seals";
		return -errno;
	}
	if ((seals & PUBLISH_SEALS) == PUBLISH_SEALS)
		return 0;
	if (seals & F_SEAL_SEAL) {
		*why = "memfd carries F_SEAL_SEAL without F_SEAL_WRITE; it "
		       "cannot be made immutable";
		return -EPERM;
	}
	return 1;
}

int td__memfd_seal_publish(int fd, const char **why)
{
	int rc = td__memfd_seal_check(fd, why);

	if (rc <= 0)
		return rc;
	/* the seals there already are added again: a no-op */
	if (fcntl(fd, F_ADD_SEALS, PUBLISH_SEALS) < 0) {
		int e = errno;

		/*
		 * The kernel refuses F_SEAL_WRITE while writable maps exist,
		 * and after waiting about 150 ms (inside this call) while
		 * anything else holds its pages: a pipe they were vmspliced
		 * into, O_DIRECT or io_uring I/O, a device
		 * (docs/reliability.md, "Pages held at a publish"). The
		 * daemon calls it off its loop (daemon/sealer.c).
		 */
		*why = e == EBUSY ? "unmap writable mappings before publishing, "
				    "and let go of its pages (vmsplice, "
				    "O_DIRECT or io_uring I/O, a device)"
				  : "cannot seal the memfd";
		return -e;
	}
	return 0;
}

int td__memfd_new(const char *name, uint64_t size, unsigned flags,
		  const char **why)
{
	unsigned mfd = MFD_CLOEXEC;
	int fd, rc;

	if (size > (uint64_t)INT64_MAX) {
		*why = "size does not fit off_t";
		return -EFBIG;
	}
	if (flags & TD__MEMFD_SEALABLE)
		mfd |= MFD_ALLOW_SEALING;
	if (flags & TD__MEMFD_HUGETLB)
		mfd |= MFD_HUGETLB;
	fd = memfd_create(name, mfd);
	if (fd < 0) {
		*why = "memfd_create failed";
		return -errno;
	}
	if (ftruncate(fd, (off_t)size) < 0) {
		rc = -errno;
		*why = "cannot size the memfd";
		goto fail;
	}
	/*
	 * tmpfs is allocated lazily: a writer touching a hole when memory is
	 * short would get SIGBUS instead of an error now.
	 */
	if ((flags & TD__MEMFD_RESERVE) && size &&
	    fallocate(fd, 0, 0, (off_t)size) < 0) {
		rc = -errno;
		*why = "cannot reserve memory for the memfd";
		goto fail;
	}
	if ((flags & TD__MEMFD_SEAL_SIZE) && (rc = td__memfd_seal_size(fd))) {
		*why = "cannot seal the memfd size";
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return rc;
}

int td__reopen_ro(int fd)
{
	char path[64];
	int ro;

	/*
	 * memfds are made mode 0777: whoever is handed the read-only
	 * description could open /proc/self/fd/N again read-write. 0444
	 * stops that for every uid but root (open descriptors keep their
	 * access). Only the owner or root may chmod: EPERM leaves the mode
	 * of a file that is someone else's (a producer's own memfd).
	 */
	if (fchmod(fd, 0444) < 0 && errno != EPERM)
		return -errno;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	return ro < 0 ? -errno : ro;
}

bool td__is_timerfd(int fd)
{
	char path[64], link[64];
	ssize_t n;

	/* anonymous inodes tell their kind in /proc only */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n < 0)
		return false;
	link[n] = 0;
	return strcmp(link, "anon_inode:[timerfd]") == 0;
}

int td__timerfd_fire(int fd)
{
	/* relative, one nanosecond: expired at once, never repeated */
	static const struct itimerspec now = {.it_value = {0, 1}};

	return timerfd_settime(fd, 0, &now, NULL) < 0 ? -errno : 0;
}

int td__dmabuf_sync(int fd, bool start)
{
	struct dma_buf_sync s = {
		.flags = DMA_BUF_SYNC_READ |
			 (start ? DMA_BUF_SYNC_START : DMA_BUF_SYNC_END),
	};
	int rc;

	do
		rc = ioctl(fd, DMA_BUF_IOCTL_SYNC, &s);
	while (rc < 0 && (errno == EINTR || errno == EAGAIN));
	return rc < 0 ? -errno : 0;
}
