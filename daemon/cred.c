/* SPDX-License-Identifier: MIT */
/*
 * Whom the daemon may pull descriptors from (docs/reliability.md, "Trust
 * model"). pidfd import makes the daemon reach into a client's process
 * with its own privileges; run as root it could reach into any process.
 * So it pulls only from the process that connected, and only while that
 * process could have pulled from itself by the rules the kernel applies
 * to the connection's uid (ptrace_may_access with
 * PTRACE_MODE_ATTACH_REALCREDS): its real, effective and saved uid and
 * gid all equal SO_PEERCRED's, and it is dumpable. A setuid or setgid
 * exec, a setresuid/setresgid, or an exec that gains file capabilities
 * (which leaves the process non-dumpable) breaks that, and the daemon
 * then asks for the fds by SCM_RIGHTS instead.
 */
#include "daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

/* "Uid:\tR\tE\tS\tFS" (or Gid:) from a /proc status text; 0 or -1. */
static int ids_of(const char *text, const char *key, unsigned ids[3])
{
	const char *l = strstr(text, key);

	if (!l || sscanf(l + strlen(key), "%u %u %u", &ids[0], &ids[1],
			 &ids[2]) != 3)
		return -1;
	return 0;
}

int td__peer_pull_check(const struct td__peer *p, char *why, size_t cap)
{
	char path[32], text[4096];
	unsigned uid[3], gid[3];
	struct stat st;
	ssize_t n;
	int dir, fd, rc = 0;

	if (p->pidfd < 0) {
		snprintf(why, cap, "no pidfd of the connected process");
		return -ESRCH;
	}
	snprintf(path, sizeof(path), "/proc/%d", (int)p->pid);
	dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0) {
		snprintf(why, cap, "process %d is gone", (int)p->pid);
		return -ESRCH;
	}
	/*
	 * The /proc entry was opened by number. If the pidfd's process is
	 * alive now, it was alive then, so the number was still its own and
	 * the entry is that process's (a pid is reused only after its
	 * process is reaped). EPERM: alive, we may only not signal it.
	 */
	if (syscall(SYS_pidfd_send_signal, p->pidfd, 0, NULL, 0) < 0 &&
	    errno == ESRCH) {
		snprintf(why, cap, "process %d is gone", (int)p->pid);
		rc = -ESRCH;
		goto out;
	}
	fd = openat(dir, "status", O_RDONLY | O_CLOEXEC);
	n = fd < 0 || fstat(fd, &st) < 0 ? -1
					  : read(fd, text, sizeof(text) - 1);
	if (fd >= 0)
		close(fd);
	if (n <= 0) {
		snprintf(why, cap, "cannot read the credentials of process %d",
			 (int)p->pid);
		rc = -EPERM;
		goto out;
	}
	text[n] = 0;
	if (ids_of(text, "\nUid:", uid) < 0 ||
	    ids_of(text, "\nGid:", gid) < 0) {
		snprintf(why, cap, "cannot parse the credentials of process %d",
			 (int)p->pid);
		rc = -EPERM;
		goto out;
	}
	if (uid[0] != p->uid || uid[1] != p->uid || uid[2] != p->uid ||
	    gid[0] != p->gid || gid[1] != p->gid || gid[2] != p->gid) {
		snprintf(why, cap,
			 "process %d now has uid %u/%u/%u gid %u/%u/%u "
			 "(real/effective/saved), not the connection's uid %u "
			 "gid %u",
			 (int)p->pid, uid[0], uid[1], uid[2], gid[0], gid[1],
			 gid[2], (unsigned)p->uid, (unsigned)p->gid);
		rc = -EPERM;
		goto out;
	}
	/*
	 * /proc/PID/status belongs to the process's euid/egid while it is
	 * dumpable and to root otherwise (task_dump_owner, applied when the
	 * file is looked up; /proc/PID itself always shows the euid).
	 */
	if (st.st_uid != p->uid || st.st_gid != p->gid) {
		snprintf(why, cap,
			 "process %d is not dumpable (it gained privileges "
			 "by exec, or protects itself with PR_SET_DUMPABLE)",
			 (int)p->pid);
		rc = -EPERM;
	}
out:
	close(dir);
	return rc;
}

/*
 * The inode of the socket at the other end of our AF_UNIX socket fd
 * (sock_diag, UNIX_DIAG_PEER), or -errno (-ENOENT: the kernel lacks
 * unix_diag or has no peer).
 */
static long peer_ino(int fd)
{
	struct stat st;
	struct {
		struct nlmsghdr nh;
		struct unix_diag_req req;
	} q;
	struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
	union {
		struct nlmsghdr nh;
		uint8_t b[8192];
	} rep;
	long ino = -ENOENT;
	ssize_t n;
	int nl;

	if (fstat(fd, &st) < 0)
		return -errno;
	nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return -errno;
	memset(&q, 0, sizeof(q));
	q.nh.nlmsg_len = sizeof(q);
	q.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	q.nh.nlmsg_flags = NLM_F_REQUEST;
	q.req.sdiag_family = AF_UNIX;
	q.req.udiag_states = ~0u;
	q.req.udiag_ino = (uint32_t)st.st_ino;
	q.req.udiag_show = UDIAG_SHOW_PEER;
	q.req.udiag_cookie[0] = q.req.udiag_cookie[1] = ~0u;
	if (sendto(nl, &q, sizeof(q), 0, (struct sockaddr *)&sa,
		   sizeof(sa)) < 0) {
		ino = -errno;
		goto out;
	}
	n = recv(nl, &rep, sizeof(rep), 0);
	if (n < 0) {
		ino = -errno;
		goto out;
	}
	for (struct nlmsghdr *h = &rep.nh; NLMSG_OK(h, (size_t)n);
	     h = NLMSG_NEXT(h, n)) {
		struct unix_diag_msg *m = NLMSG_DATA(h);
		struct rtattr *a;
		unsigned len;

		if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
		    h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)))
			break;
		len = h->nlmsg_len - NLMSG_LENGTH(sizeof(*m));
		for (a = (struct rtattr *)(m + 1); RTA_OK(a, len);
		     a = RTA_NEXT(a, len))
			if (a->rta_type == UNIX_DIAG_PEER &&
			    RTA_PAYLOAD(a) >= sizeof(uint32_t))
				ino = *(uint32_t *)RTA_DATA(a);
		break;
	}
out:
	close(nl);
	return ino;
}

int td__peer_is_other_end(const struct td__peer *p, int fd)
{
	char path[64], link[32];
	struct stat st;
	ssize_t n;
	long ino;

	/* a socket by its /proc link first: fstat of a file a peer's FUSE
	 * server serves would wait for that server */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n < 8 || strncmp(link, "socket:[", 8))
		return -ESRCH;
	ino = peer_ino(p->fd);
	if (ino < 0)
		return (int)ino;
	if (fstat(fd, &st) < 0)
		return -errno;
	return S_ISSOCK(st.st_mode) && (unsigned long)st.st_ino ==
					       (unsigned long)ino
		       ? 0
		       : -ESRCH;
}
