/* SPDX-License-Identifier: MIT */
/*
 * A fence of each consumer's own (docs/fastpath.md, "Fences").
 *
 * A producer without a sync_file publishes an eventfd as its acquire
 * fence and writes it when its GPU is done. Handing that eventfd to every
 * consumer lets any one of them read it (un-signalling it for all) or
 * write it (signalling it early for all): no kernel call makes an eventfd
 * read-only. So a client that names TD_WIRE_FEAT_FENCE_OWN gets, per
 * lease, a timerfd instead, which only the daemon arms: the daemon
 * watches the producer's eventfd (one epoll set on its loop, the
 * versions pending in it) and fires every waiting lease's timerfd when
 * it signals. A timerfd, not an eventfd: a consumer shares the file
 * description of what it is sent, and could make an eventfd blocking
 * with a full count, so the daemon's write would block; firing a timerfd
 * (timerfd_settime) never blocks and cannot be refused. Reading it
 * un-signals that consumer's copy only; it has no write().
 *
 * The timerfds of a connection's released leases are kept, disarmed
 * (which clears their expirations), for its next fenced GETs: a stream of
 * fenced versions costs no descriptor per handoff once warm. A kept one
 * is only ever handed to the same connection again.
 */
#include "store.h"

#include "fence.h"
#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

enum {
	STATE_NEW = 0,  /* not looked at yet */
	STATE_PENDING,  /* in the watched set, leases on fence_waits */
	STATE_SIGNALLED /* seen signalled: later leases fire at once */
};

#define EVENTS_PER_WAKE 64

static struct {
	/* the watched eventfds: made at start (td__fence_init), else at
	 * the first need; -2 when libuv refused to poll it */
	int ep;
	uv_poll_t poll;
} F = {.ep = -1};

static int fence_fd(const struct td__version *v)
{
	return v->fds[v->fence_ix].fd;
}

static void fire_waits(struct td__version *v)
{
	while (!td__list_empty(&v->fence_waits)) {
		struct td__lease *l = td__container_of(
			v->fence_waits.next, struct td__lease, fence_link);

		td__list_del(&l->fence_link); /* linked to itself again */
		(void)td__timerfd_fire(l->tfd);
	}
}

static void on_fences(uv_poll_t *h, int status, int events)
{
	struct epoll_event ev[EVENTS_PER_WAKE];
	int n;

	(void)h;
	(void)status;
	(void)events;
	n = epoll_wait(F.ep, ev, EVENTS_PER_WAKE, 0);
	for (int i = 0; i < n; i++) {
		struct td__version *v = ev[i].data.ptr;

		(void)epoll_ctl(F.ep, EPOLL_CTL_DEL, fence_fd(v), NULL);
		v->fence_state = STATE_SIGNALLED;
		fire_waits(v);
	}
}

static int watch_start(char *why, size_t cap)
{
	int rc;

	if (F.ep >= 0)
		return 0;
	if (F.ep == -2) {
		snprintf(why, cap, "cannot watch fences (failed before)");
		return -ENOMEM;
	}
	F.ep = epoll_create1(EPOLL_CLOEXEC);
	if (F.ep < 0) {
		rc = -errno;
		F.ep = -1;
		snprintf(why, cap, "cannot watch fences: epoll_create1: %s",
			 strerror(-rc));
		return rc;
	}
	rc = uv_poll_init(td__d->loop, &F.poll, F.ep);
	if (rc < 0) {
		close(F.ep);
		F.ep = -1;
	} else if ((rc = uv_poll_start(&F.poll, UV_READABLE, on_fences)) <
		   0) {
		/* the handle closes on the next turn: never made again */
		uv_close((uv_handle_t *)&F.poll, NULL);
		close(F.ep);
		F.ep = -2;
	}
	if (rc < 0) {
		snprintf(why, cap, "cannot watch fences: %s", uv_strerror(rc));
		return -ENOMEM;
	}
	return 0;
}

static uint8_t kind_of(struct td__version *v)
{
	const char *w;
	int rc;

	if (!v->fence_kind) {
		rc = td__fence_kind(fence_fd(v), &w);
		v->fence_kind = rc < 0 ? 0xff : (uint8_t)rc;
	}
	return v->fence_kind;
}

/* Look at v's eventfd fence once: signalled already, or watched now. */
static int fence_look(struct td__version *v, char *why, size_t cap)
{
	struct pollfd pfd = {.fd = fence_fd(v), .events = POLLIN};
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = v};
	int rc;

	if (v->fence_state != STATE_NEW)
		return 0;
	if (poll(&pfd, 1, 0) > 0 && (pfd.revents & POLLIN)) {
		v->fence_state = STATE_SIGNALLED;
		return 0;
	}
	rc = watch_start(why, cap);
	if (rc < 0)
		return rc;
	if (epoll_ctl(F.ep, EPOLL_CTL_ADD, fence_fd(v), &ev) < 0) {
		rc = -errno;
		snprintf(why, cap, "cannot watch the fence of \"%.*s\": "
			 "epoll_ctl: %s", (int)v->name_len, v->name,
			 strerror(-rc));
		return rc;
	}
	td__list_init(&v->fence_waits);
	v->fence_state = STATE_PENDING;
	return 0;
}

/* A timerfd for p: one it kept, disarmed, else a new one (p's uid pays). */
static int tfd_take(struct td__peer *p, char *why, size_t cap)
{
	char lim[160];
	int fd, rc;

	if (p->n_tfd_pool)
		return p->tfd_pool[--p->n_tfd_pool];
	rc = td__tenant_check(p->uid, TD__LIM_FDS, 1, lim, sizeof(lim));
	if (rc < 0) {
		snprintf(why, cap, "no descriptor for its own fence: %s", lim);
		return rc;
	}
	fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (fd < 0) {
		rc = -errno;
		snprintf(why, cap, "no descriptor for its own fence: "
			 "timerfd_create: %s", strerror(-rc));
		return rc;
	}
	if (td__tenant_add(p->uid, TD__LIM_FDS, 1) < 0) {
		close(fd);
		snprintf(why, cap, "no descriptor for its own fence: out of "
			 "memory");
		return -ENOMEM;
	}
	return fd;
}

int td__fence_lease(struct td__peer *p, struct td__version *v,
		    struct td__lease *l, char *why, size_t cap)
{
	int rc;

	/* a sync_file: only its driver signals it, shared as it is */
	if (v->fence_ix < 0 || kind_of(v) != TD__FENCE_EVENTFD)
		return 0;
	if (!(p->features & TD_WIRE_FEAT_FENCE_OWN)) {
		if (!td__d->opts.own_fences_only)
			return 0; /* the producer's eventfd, as before */
		snprintf(why, cap, "its fence is an eventfd, which this daemon "
			 "hands only as a reader's own (--own-fences-only), "
			 "and this client takes none (a libtensord before "
			 "TD_WIRE_FEAT_FENCE_OWN)");
		return -EPROTONOSUPPORT;
	}
	rc = fence_look(v, why, cap);
	if (rc < 0)
		return rc;
	rc = tfd_take(p, why, cap);
	if (rc < 0)
		return rc;
	l->tfd = rc;
	if (v->fence_state == STATE_SIGNALLED) {
		td__list_init(&l->fence_link);
		(void)td__timerfd_fire(l->tfd);
	} else {
		td__list_add_tail(&v->fence_waits, &l->fence_link);
	}
	return 1;
}

void td__fence_unlease(struct td__peer *p, struct td__lease *l)
{
	static const struct itimerspec off = {{0, 0}, {0, 0}};

	if (l->tfd < 0)
		return;
	td__list_del(&l->fence_link);
	/* disarming clears the expirations: the next lease starts unsignalled */
	if (!p->dead && p->n_tfd_pool < TD__TFD_POOL &&
	    timerfd_settime(l->tfd, 0, &off, NULL) == 0) {
		p->tfd_pool[p->n_tfd_pool++] = l->tfd;
	} else {
		close(l->tfd);
		td__tenant_sub(p->uid, TD__LIM_FDS, 1);
	}
	l->tfd = -1;
}

void td__fence_peer_gone(struct td__peer *p)
{
	while (p->n_tfd_pool) {
		close(p->tfd_pool[--p->n_tfd_pool]);
		td__tenant_sub(p->uid, TD__LIM_FDS, 1);
	}
}

void td__fence_forget(struct td__version *v)
{
	if (v->fence_state == STATE_PENDING)
		(void)epoll_ctl(F.ep, EPOLL_CTL_DEL, fence_fd(v), NULL);
	v->fence_state = STATE_NEW;
}

/* Whether a fence descriptor polls signalled: either kind polls
 * readable then (a sync_file with an error too: its device is done with
 * the buffers). */
static bool fence_fd_done(int fd)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};

	return poll(&pfd, 1, 0) > 0 && (pfd.revents & POLLIN);
}

int td__fence_hold(const struct td__version *v, uid_t uid)
{
	int fd;

	if (v->fence_ix < 0 || v->fence_state == STATE_SIGNALLED ||
	    fence_fd_done(fence_fd(v)))
		return -1;
	fd = fcntl(fence_fd(v), F_DUPFD_CLOEXEC, 3);
	if (fd < 0 || td__tenant_add(uid, TD__LIM_FDS, 1) < 0) {
		if (fd >= 0)
			close(fd);
		return -2;
	}
	return fd;
}

bool td__fence_let_go(int *fd, uid_t uid)
{
	if (*fd >= 0 && !fence_fd_done(*fd))
		return false;
	td__fence_drop(fd, uid);
	return true;
}

void td__fence_drop(int *fd, uid_t uid)
{
	if (*fd < 0)
		return;
	close(*fd);
	td__tenant_sub(uid, TD__LIM_FDS, 1);
	*fd = -1;
}

void td__fence_init(void)
{
	char why[160];

	if (watch_start(why, sizeof(why)) < 0)
		td__log(TD_LOG_WARN, "%s; tried again at the first fenced GET",
			why);
}

void td__fence_fini(void)
{
	if (F.ep < 0)
		return; /* -2: closed when it failed */
	uv_close((uv_handle_t *)&F.poll, NULL);
	close(F.ep);
	F.ep = -1;
}
