/* SPDX-License-Identifier: MIT */
/*
 * libtensord for GPU stages (docs/fastpath.md, "GPU stages"): eventfd
 * fences a producer signals, a fence wait for eventfds and sync_files,
 * mappings aligned for host-pointer imports, and the DMA_BUF_IOCTL_SYNC
 * bracket around CPU reads of dma-buf planes.
 */
#include "gpu.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/dma-buf.h>
#include <linux/sync_file.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/timerfd.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "fence.h"

#ifndef DMA_BUF_MAGIC
#define DMA_BUF_MAGIC 0x444d4142
#endif
#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif
#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif

/* ---- aligned mappings ---- */

void *td__mmap_natural(size_t len, int prot, int flags, int fd, off_t off)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), align;
	uint8_t *res, *p;
	void *m;

	align = len ? len & -len : page; /* lowest set bit */
	if (align > TD__NATURAL_ALIGN_MAX)
		align = TD__NATURAL_ALIGN_MAX;
	if (align <= page)
		return mmap(NULL, len, prot, flags, fd, off);
	/* reserve len + align of address space, then map inside it */
	res = mmap(NULL, len + align, PROT_NONE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (res == MAP_FAILED)
		return MAP_FAILED;
	p = (uint8_t *)(((uintptr_t)res + align - 1) & ~(uintptr_t)(align - 1));
	m = mmap(p, len, prot, flags | MAP_FIXED, fd, off);
	if (m == MAP_FAILED) {
		int e = errno;

		munmap(res, len + align);
		errno = e;
		return MAP_FAILED;
	}
	/* give back the reservation around it */
	if (p > res)
		munmap(res, (size_t)(p - res));
	if (res + len + align > p + len)
		munmap(p + len, (size_t)(res + len + align - (p + len)));
	return p;
}

/* ---- planes ---- */

int td__plane_kind(int fd)
{
	struct statfs sfs;

	if (fstatfs(fd, &sfs) < 0)
		return 0;
	switch ((unsigned long)sfs.f_type) {
	case DMA_BUF_MAGIC:
		return TD_PLANE_DMABUF;
	case TMPFS_MAGIC:
	case HUGETLBFS_MAGIC:
		return TD_PLANE_MEMFD;
	default:
		return 0;
	}
}

/* ---- fences ---- */

int td_fence_create(void)
{
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

	return fd < 0 ? -errno : fd;
}

int td_fence_signal(int fence_fd, struct td_error *err)
{
	struct pollfd pfd = {.fd = fence_fd, .events = POLLIN};
	const char *why = NULL;
	uint64_t one = 1;
	int kind = td__fence_kind(fence_fd, &why);

	if (kind < 0)
		return td__fail(err, kind, "fence fd %d: %s", fence_fd, why);
	if (kind == TD__FENCE_SYNC_FILE)
		return td__fail(err, -EINVAL, "fence fd %d is a sync_file: "
				"its driver signals it, not a write", fence_fd);
	if (kind == TD__FENCE_TIMERFD)
		return td__fail(err, -EINVAL, "fence fd %d is a consumer's "
				"own fence (a timerfd), which tensord fires "
				"when its producer signals the fence it "
				"published", fence_fd);
	/*
	 * A count above 0 is signalled already, so write only to a count
	 * of 0, which cannot block: the caller's eventfd may be blocking
	 * (not from td_fence_create), and at its largest count a write
	 * would wait for a reader that never comes. EAGAIN: a non-blocking
	 * one filled meanwhile, so signalled.
	 */
	if (poll(&pfd, 1, 0) > 0 && (pfd.revents & POLLIN))
		return 0;
	if (write(fence_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		return td__fail(err, -errno, "signal fence fd %d: %s",
				fence_fd, strerror(errno));
	return 0;
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *kind_name(int kind)
{
	return kind == TD__FENCE_EVENTFD     ? "eventfd"
	       : kind == TD__FENCE_SYNC_FILE ? "sync_file"
					     : "eventfd, relayed by tensord";
}

/*
 * A consumer's own fence (TD_WIRE_FEAT_FENCE_OWN) is a timerfd tensord
 * fires with a one-nanosecond expiry, which the kernel's timer interrupt
 * makes readable a moment later: armed counts as signalled, so a check
 * right after the signal does not miss it. Never armed otherwise (the
 * daemon disarms it before reuse).
 */
static bool timer_armed(int fd)
{
	struct itimerspec cur;

	return timerfd_gettime(fd, &cur) == 0 &&
	       (cur.it_value.tv_sec || cur.it_value.tv_nsec);
}

/*
 * A dup of the socket of c's connection of epoch, which a wait polls for
 * its hang-up: -1 when that connection is gone, -2 when it cannot tell.
 */
static int conn_dup(struct td_client *c, uint32_t epoch)
{
	int fd = -1;

	td__client_lock(c);
	if (c->epoch == epoch && c->sock >= 0) {
		fd = fcntl(c->sock, F_DUPFD_CLOEXEC, 0);
		fd = fd < 0 ? -2 : fd;
	}
	pthread_mutex_unlock(&c->lock);
	return fd;
}

/*
 * The connection that leased an own fence is gone: nothing fires it now,
 * unless tensord did just before it went (the hang-up can come first,
 * while the timer is armed: look again, armed or expired since).
 * 0 or -ECONNRESET.
 */
static int conn_gone(int fence_fd, int kind, struct td_error *err)
{
	struct pollfd pfd = {.fd = fence_fd, .events = POLLIN};

	if (kind == TD__FENCE_TIMERFD &&
	    (timer_armed(fence_fd) ||
	     (poll(&pfd, 1, 0) > 0 && (pfd.revents & POLLIN))))
		return 0;
	return td__fail(err, -ECONNRESET, "fence fd %d (%s) cannot signal "
			"any more: the connection that leased it is gone "
			"(tensord exited, or the client was closed or "
			"reconnected)", fence_fd, kind_name(kind));
}

static int fence_wait(int fence_fd, struct td_client *c, uint32_t epoch,
		      int timeout_ms, struct td_error *err)
{
	struct pollfd pfd[2] = {{.fd = fence_fd, .events = POLLIN},
				{.fd = -1}};
	int64_t deadline = timeout_ms < 0 ? -1 : mono_ms() + timeout_ms;
	const char *why = NULL;
	int kind = td__fence_kind(fence_fd, &why), rc, conn = -2;

	if (kind < 0)
		return td__fail(err, kind, "fence fd %d: %s", fence_fd, why);
	/* armed: tensord fired it (one nanosecond), it is about to expire */
	if (kind == TD__FENCE_TIMERFD && timer_armed(fence_fd))
		return 0;
	/* only the connection that leased it fires it: watch that one */
	if (kind == TD__FENCE_TIMERFD && c)
		conn = conn_dup(c, epoch);
	pfd[1].fd = conn; /* events 0: its hang-up or error only */
	for (;;) {
		int left = -1;

		if (deadline >= 0) {
			int64_t l = deadline - mono_ms();

			left = l < 0 ? 0 : l > INT32_MAX ? INT32_MAX : (int)l;
		}
		rc = poll(pfd, conn >= 0 ? 2 : 1, conn == -1 ? 0 : left);
		if (rc >= 0 || errno != EINTR)
			break;
	}
	if (conn >= 0)
		close(conn);
	if (rc < 0)
		return td__fail(err, -errno, "poll fence fd %d: %s", fence_fd,
				strerror(errno));
	if ((rc == 0 && conn == -1) || (rc > 0 && !pfd[0].revents))
		return conn_gone(fence_fd, kind, err);
	if (rc == 0)
		return td__fail(err, -ETIMEDOUT, "fence fd %d (%s) did not "
				"signal within %d ms", fence_fd,
				kind_name(kind),
				timeout_ms);
	if (pfd[0].revents & POLLNVAL) /* closed since it was checked */
		return td__fail(err, -EBADF, "fence fd %d is not open",
				fence_fd);
	if (pfd[0].revents & POLLERR)
		return td__fail(err, -EIO, "fence fd %d polls an error",
				fence_fd);
	if (kind == TD__FENCE_SYNC_FILE) {
		struct sync_file_info info;

		/* a dma_fence can signal with an error (a GPU fault) */
		memset(&info, 0, sizeof(info));
		if (ioctl(fence_fd, SYNC_IOC_FILE_INFO, &info) == 0 &&
		    info.status < 0)
			return td__fail(err, -EIO, "sync_file fd %d signalled "
					"an error (status %d)", fence_fd,
					info.status);
	}
	return 0;
}

int td_fence_wait(int fence_fd, int timeout_ms, struct td_error *err)
{
	return fence_wait(fence_fd, NULL, 0, timeout_ms, err);
}

int td__fence_wait_leased(int fence_fd, struct td_client *c, uint32_t epoch,
			  int timeout_ms, struct td_error *err)
{
	return fence_wait(fence_fd, c, epoch, timeout_ms, err);
}
