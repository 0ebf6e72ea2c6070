/* SPDX-License-Identifier: MIT */
/*
 * What kind of fence an fd is: shared by the daemon (which accepts only
 * an eventfd or a sync_file at PUBLISH) and libtensord (which waits on
 * all three).
 */
#ifndef TD_TRANSPORT_FENCE_H
#define TD_TRANSPORT_FENCE_H

enum td__fence_kind {
	TD__FENCE_EVENTFD = 1,   /* signalled by a write (POLLIN: count > 0) */
	TD__FENCE_SYNC_FILE = 2, /* a kernel dma_fence: signalled by a driver */
	/*
	 * a consumer's own copy of an eventfd fence, which the daemon fires
	 * when the producer's signals (TD_WIRE_FEAT_FENCE_OWN): POLLIN once
	 * expired, armed (timerfd_gettime) while it is about to
	 */
	TD__FENCE_TIMERFD = 3,
};

/*
 * The kind of fd, or -EBADF (not open), -EINVAL (none of the kinds),
 * -errno, with a static reason in *why.
 */
int td__fence_kind(int fd, const char **why);
/*
 * td__fence_kind() of a fence to publish: an eventfd or a sync_file. A
 * timerfd (a consumer's own copy of a fence, from a GET) is -EINVAL: a
 * stage that passes a fence on publishes one of its own and signals it
 * once its input's has.
 */
int td__fence_publishable(int fd, const char **why);

#endif
