/* SPDX-License-Identifier: MIT */
/*
 * transport/: one datagram with its SCM_RIGHTS descriptors, sent or
 * received. The only socket code shared by the daemon, the client library
 * and the raw-socket tests; proto/ stays free of syscalls (DESIGN.md), so
 * this sits beside it rather than in it.
 */
#ifndef TD_TRANSPORT_SCM_H
#define TD_TRANSPORT_SCM_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Most fds one call attaches or collects (the kernel's SCM_MAX_FD is 253). */
#define TD_SCM_MAX_FDS 64
/*
 * Most fds one datagram can carry (the kernel's SCM_MAX_FD): the room
 * td__scm_recv's control buffer has, so that the kernel never leaves one
 * out. One left out is let go inside recvmsg, on the receiving thread:
 * a lingering socket's or a FUSE file's last close would wait there
 * (the daemon's loop). A caller that gives cap < TD_SCM_RX_MAX_FDS has
 * those past cap closed by td__scm_recv instead (rx->dropped).
 */
#define TD_SCM_RX_MAX_FDS 253

/*
 * Send buf[0, len) as one datagram with fds[0, nfds) attached (borrowed).
 * flags go to sendmsg (MSG_NOSIGNAL is always added). EINTR is retried.
 * Returns the bytes sent, -E2BIG for nfds > TD_SCM_MAX_FDS, or -errno.
 */
ssize_t td__scm_send(int sock, const void *buf, size_t len, const int *fds,
		     unsigned nfds, int flags);

/* What a td__scm_recv() collected besides the bytes. */
struct td__scm_rx {
	int *fds;          /* caller's array ... */
	unsigned cap;      /* ... of cap entries */
	unsigned nfds;     /* received fds stored in fds[] (CLOEXEC) */
	unsigned dropped;  /* received beyond cap: closed already */
	int msg_flags;     /* MSG_TRUNC, MSG_CTRUNC from recvmsg */
	bool foreign;      /* a control message other than SCM_RIGHTS */
};

/*
 * Receive one datagram into buf[0, len), MSG_CMSG_CLOEXEC always added to
 * flags; EINTR is retried. Returns its length (0 at end of stream) with
 * rx filled — the caller owns rx->fds[0, rx->nfds) and decides, from
 * rx->msg_flags/dropped/foreign, whether the datagram is acceptable — or
 * -errno with nothing received.
 */
ssize_t td__scm_recv(int sock, void *buf, size_t len, int flags,
		     struct td__scm_rx *rx);

/* Close fds[0, n) (ignoring -1 entries). */
void td__scm_close(const int *fds, unsigned n);

#endif
