/* SPDX-License-Identifier: MIT */
/*
 * Descriptor policy: which fds the daemon accepts as planes and fences,
 * how it seals them, and how it creates planes for ALLOC. Every fd that
 * arrives from a peer (SCM_RIGHTS or pidfd_getfd) is checked here before
 * anything else touches it; the daemon never maps, reads or waits on them.
 */
#include "daemon.h"
#include "fence.h"
#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#ifndef DMA_BUF_MAGIC
#define DMA_BUF_MAGIC 0x444d4142
#endif
#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif


/*
 * Whether fd is a file of a filesystem (a path: ext4, NFS, FUSE...), as
 * opposed to shared memory, a dma-buf or a kernel object (pipe, socket,
 * eventfd, timerfd, sync_file). Only the first kind can make fstat(2),
 * fstatfs(2) or close(2) wait: a FUSE file sends its server GETATTR,
 * STATFS and FLUSH and waits for the answer, so a peer that serves one
 * and never answers would hold the loop for as long as it likes. Told
 * apart without asking the filesystem: F_GET_SEALS answers for
 * tmpfs/hugetlbfs files only, and /proc/self/fd names pseudo files
 * without a leading '/' (or "/dmabuf:", which /proc/self/fdinfo
 * confirms: only a dma-buf shows its exporter there).
 */
bool td__fd_foreign(int fd)
{
	char path[64], link[64], info[512];
	ssize_t n;
	int f;

	if (fcntl(fd, F_GET_SEALS) >= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n <= 0)
		return true; /* cannot tell: treated as the worst case */
	link[n] = 0;
	if (link[0] != '/')
		return false;
	if (strncmp(link, "/dmabuf:", 8))
		return true;
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return true;
	n = read(f, info, sizeof(info) - 1);
	close(f);
	if (n <= 0)
		return true;
	info[n] = 0;
	return !strstr(info, "\nexp_name:");
}

/*
 * Only memory (tmpfs, hugetlbfs), kernel objects and pipes are closed
 * here: their close cannot wait. Anything else goes to td-closer-peer: a
 * file (a FUSE FLUSH), a TCP socket whose last reference this is (with
 * SO_LINGER, close(2) waits up to its linger time, "for ever" as far as
 * the kernel's cap goes, while its peer does not read), a dma-buf.
 */
void td__close_peer_fd(int fd)
{
	char path[64], link[16];
	ssize_t n;

	if (fd < 0)
		return;
	if (fcntl(fd, F_GET_SEALS) >= 0) {
		close(fd);
		return;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n > 0) {
		link[n] = 0;
		if (!strncmp(link, "anon_inode:", 11) ||
		    !strncmp(link, "pipe:", 5)) {
			close(fd);
			return;
		}
	}
	td__closer_foreign(fd);
}

int td__plane_probe(int fd, struct td__plane_info *pi, const char **why)
{
	struct statfs sfs;
	struct stat st;
	int seals;

	/* fstat and fstatfs of a file a peer serves could wait for ever */
	if (td__fd_foreign(fd)) {
		*why = "plane fd is a file (a regular file, directory or "
		       "device outside tmpfs/hugetlbfs), not a memfd or "
		       "dma-buf";
		return -EINVAL;
	}
	if (fstat(fd, &st) < 0 || fstatfs(fd, &sfs) < 0) {
		*why = "cannot stat the plane fd";
		return -errno;
	}
	pi->dev = st.st_dev;
	pi->ino = st.st_ino;
	if ((unsigned long)sfs.f_type == DMA_BUF_MAGIC) {
		off_t end;

		/* dma-bufs report their size in i_size; older ones via lseek */
		pi->type = TD__PLANE_DMABUF;
		if (st.st_size > 0) {
			pi->size = (uint64_t)st.st_size;
			return 0;
		}
		end = lseek(fd, 0, SEEK_END);
		if (end < 0) {
			*why = "cannot size the dma-buf";
			return -errno;
		}
		pi->size = (uint64_t)end;
		return 0;
	}
	if (S_ISFIFO(st.st_mode)) {
		*why = "plane fd is a pipe, not a memfd or dma-buf";
		return -EINVAL;
	}
	if (S_ISSOCK(st.st_mode)) {
		*why = "plane fd is a socket, not a memfd or dma-buf";
		return -EINVAL;
	}
	if (!S_ISREG(st.st_mode)) {
		*why = "plane fd is not a memfd or dma-buf";
		return -EINVAL;
	}
	if ((unsigned long)sfs.f_type != TMPFS_MAGIC &&
	    (unsigned long)sfs.f_type != HUGETLBFS_MAGIC) {
		*why = "plane fd is a regular file outside tmpfs/hugetlbfs, "
		       "not shared memory";
		return -EINVAL;
	}
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0) {
		*why = "plane fd does not support seals (not a memfd)";
		return -EINVAL;
	}
	/* Without SHRINK the size checked below could change under us. */
	if (!(seals & F_SEAL_SHRINK)) {
		*why = "memfd is not sealed with F_SEAL_SHRINK";
		return -EINVAL;
	}
	pi->type = TD__PLANE_MEMFD;
	pi->size = (uint64_t)st.st_size;
	return 0;
}

int td__fence_check(int fd, const char **why)
{
	int rc = td__fence_publishable(fd, why);

	return rc < 0 ? rc : 0;
}

int td__plane_create(uint64_t size, bool reserve, int *out_fd,
		     const char **why)
{
	int fd = td__memfd_new("tensord-plane", size,
			       TD__MEMFD_SEALABLE | TD__MEMFD_SEAL_SIZE |
				       (reserve ? TD__MEMFD_RESERVE : 0),
			       why);

	if (fd < 0)
		return fd;
	*out_fd = fd;
	return 0;
}

int td__plane_readonly(int fd, int *out_fd, const char **why)
{
	int ro;

	/*
	 * memfds are created mode 0777, so anyone handed the fd could
	 * re-open /proc/self/fd/N read-write. 0444 stops that for other
	 * uids (the seals already stop every write, this closes the door).
	 * Only the file's owner or root may chmod: a producer's own memfd
	 * under a daemon of another uid keeps its mode, and its seals.
	 */
	if (fchmod(fd, 0444) < 0 && errno != EPERM) {
		*why = "cannot make the plane read-only (fchmod)";
		return -errno;
	}
	/* A new, read-only open file description for the consumers. */
	ro = td__reopen_ro(fd);
	if (ro < 0) {
		*why = "cannot re-open the plane read-only (/proc/self/fd)";
		return ro;
	}
	*out_fd = ro;
	return 0;
}

/*
 * Fault every page of a tmpfs memfd in through a mapping advised
 * MADV_HUGEPAGE: fallocate() alone allocates small pages unless
 * shmem_enabled is "always", while a fault in an advised mapping may take
 * a huge one. What the kernel gives is its choice; this only asks.
 */
static int populate_thp(int fd, uint64_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int rc = 0;

	if (p == MAP_FAILED)
		return -errno;
	madvise(p, len, MADV_HUGEPAGE);
	if (madvise(p, len, MADV_POPULATE_WRITE) < 0)
		rc = -errno;
	munmap(p, len);
	return rc;
}

/*
 * A ring's slots: pre-allocated before any handoff, so that neither side
 * ever takes a first-touch allocation (or a SIGBUS under memory
 * pressure) while handing off; here (reserve), or by the producer right
 * after the reply (TD_WIRE_RING_RESERVE: *flags has _UNRESERVED).
 */
int td__plane_create_ring(uint64_t len, bool huge, bool reserve,
			  uint32_t *flags, int *out, const char **why)
{
	/*
	 * SHRINK: nobody can cut pages from under a mapping (SIGBUS in the
	 * others). Not WRITE: the producer rewrites slots for ever.
	 */
	const unsigned seal = TD__MEMFD_SEALABLE | TD__MEMFD_SEAL_SIZE;
	int fd, rc;

	*flags = 0;
	/* hugetlbfs pages, if the machine has that many reserved */
	fd = huge ? td__memfd_new("tensord-ring-data", len,
				  seal | TD__MEMFD_HUGETLB | TD__MEMFD_RESERVE,
				  why)
		  : -1;
	if (fd >= 0) {
		*flags = TD_WIRE_RING_HUGETLB;
		goto done;
	}
	fd = td__memfd_new("tensord-ring-data", len, TD__MEMFD_SEALABLE, why);
	if (fd < 0)
		return fd;
	if (!reserve)
		/* the producer's mapping advises and populates (§10) */
		*flags = TD_WIRE_RING_UNRESERVED |
			 (huge ? TD_WIRE_RING_THP : 0);
	else if (huge && populate_thp(fd, len) == 0)
		*flags = TD_WIRE_RING_THP;
	else if (fallocate(fd, 0, 0, (off_t)len) < 0) {
		rc = -errno;
		*why = "cannot reserve memory for the ring";
		close(fd);
		return rc;
	}
	if ((rc = td__memfd_seal_size(fd)) < 0) {
		*why = "cannot seal the memfd size";
		close(fd);
		return rc;
	}
done:
	*out = fd;
	return 0;
}
