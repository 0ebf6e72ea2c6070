/* SPDX-License-Identifier: MIT */
#include "scm.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

union ctl {
	char buf[CMSG_SPACE(sizeof(int) * TD_SCM_MAX_FDS)];
	struct cmsghdr align;
};

/* room for every fd one datagram may carry: the kernel drops none */
union ctl_rx {
	char buf[CMSG_SPACE(sizeof(int) * TD_SCM_RX_MAX_FDS)];
	struct cmsghdr align;
};

ssize_t td__scm_send(int sock, const void *buf, size_t len, const int *fds,
		     unsigned nfds, int flags)
{
	union ctl ctl;
	struct iovec iov = {(void *)buf, len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	ssize_t n;

	if (nfds > TD_SCM_MAX_FDS)
		return -E2BIG;
	if (nfds) {
		struct cmsghdr *cm;

		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
	}
	do
		n = sendmsg(sock, &mh, flags | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n;
}

ssize_t td__scm_recv(int sock, void *buf, size_t len, int flags,
		     struct td__scm_rx *rx)
{
	union ctl_rx ctl;
	struct iovec iov = {buf, len};
	struct msghdr mh = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = ctl.buf,
		.msg_controllen = sizeof(ctl.buf),
	};
	ssize_t n;

	rx->nfds = rx->dropped = 0;
	rx->msg_flags = 0;
	rx->foreign = false;
	do
		n = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm;
	     cm = CMSG_NXTHDR(&mh, cm)) {
		size_t k;

		if (cm->cmsg_level != SOL_SOCKET ||
		    cm->cmsg_type != SCM_RIGHTS) {
			rx->foreign = true;
			continue;
		}
		k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t j = 0; j < k; j++) {
			int fd;

			/* CMSG_DATA need not be int-aligned: copy */
			memcpy(&fd, CMSG_DATA(cm) + j * sizeof(int),
			       sizeof(fd));
			if (rx->nfds < rx->cap) {
				rx->fds[rx->nfds++] = fd;
			} else {
				close(fd);
				rx->dropped++;
			}
		}
	}
	rx->msg_flags = mh.msg_flags;
	return n;
}

void td__scm_close(const int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}
