/* SPDX-License-Identifier: MIT */
/*
 * What kind of fence an fd is: shared by the daemon (which accepts only
 * these two kinds at PUBLISH) and libtensord (which waits on them).
 */
#ifndef TD_TRANSPORT_FENCE_H
#define TD_TRANSPORT_FENCE_H

enum td__fence_kind {
	TD__FENCE_EVENTFD = 1,   /* signalled by a write (POLLIN: count > 0) */
	TD__FENCE_SYNC_FILE = 2, /* a kernel dma_fence: signalled by a driver */
};

/*
 * The kind of fd, or -EBADF (not open), -EINVAL (neither kind), -errno,
 * with a static reason in *why.
 */
int td__fence_kind(int fd, const char **why);

#endif
