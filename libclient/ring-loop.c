/* SPDX-License-Identifier: MIT */
/*
 * libtensord ring subscriptions in an event loop: a timerfd per
 * subscription (RING_WAKE, docs/protocol.md §12) that the producer fires
 * while the subscription waits by fd, td_sub_poll(), and the handlers
 * td_client_process() calls.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "os.h"
#include "ring-int.h"
#include "wire-status.h"

int td_sub_fd(struct td_sub *s)
{
	int fd;

	if (!s)
		return -EINVAL;
	/* the parent's fd, whose polls are the parent's (td_client_connect) */
	if (td__client_foreign(s->c))
		return -ECHILD;
	if (s->efd >= 0)
		return s->efd;
	fd = td__wake_fd(s->c, TD_OP_RING_WAKE, s->id, s->epoch,
			 TD_WIRE_FEAT_RING_WAKE);
	if (fd >= 0)
		s->efd = fd;
	return fd;
}

/*
 * Is there a version newer than the last one taken that a hold would
 * get, or the end (of the ring, or of our row: the daemon freed it or
 * gave it away), or a corrupt `latest` (td_sub_next says -EBADMSG)?
 * `latest` naming a newer version whose slot no longer holds it is not
 * news: the producer is rewriting that slot (the latest one, after every
 * other reader took it) or a corrupt one left it so, and a hold would
 * fail; its publish, or the put-back of the version, fires our timerfd
 * as it fires any armed reader's (the flag is stored before this look).
 * Calling that news fired the timerfd at once on every arm: an event
 * loop that spun a CPU until the producer published.
 */
static bool sub_news(const struct td_sub *s)
{
	const struct td_ring_hdr *h = s->m.hdr;
	uint64_t v;
	uint32_t slot;
	int rc;

	if (s->gone || (atomic_load(&h->flags) & TD_RING_CLOSED) ||
	    (s->tok && atomic_load(&s->row->held) >> TD_RING_TOKEN_SHIFT !=
			       s->tok))
		return true;
	rc = td_ring_latest_unpack(td_ring_latest_recheck(h),
				   s->m.g.slot_count, &slot, &v);
	if (rc < 0)
		return true;
	return rc > 0 && v > s->last_version &&
	       atomic_load(&h->slots[slot].version) == v;
}

/*
 * Wait by fd from now: announce it, then look once more (the producer
 * publishes, then looks for waiters), and make the fd readable at once
 * when something is already there to take.
 */
static void sub_arm(struct td_sub *s)
{
	if (!td__sub_row_set(s, &s->row->waiting, TD_RING_WAIT_FD, NULL) ||
	    sub_news(s))
		(void)td__timerfd_fire(s->efd);
}

/*
 * Disarm our timerfd after a wake-up that found nothing. Only one-shot
 * fires are anyone's due (td__timerfd_fire: ours, the producer's, the
 * daemon's), but the producer holds the fd and could arm it periodic:
 * readable for ever, and the loop spinning a CPU on nothing. Whatever
 * fired before the disarm is seen by the caller's next look (the
 * timerfd's lock orders the firer's stores before that look).
 */
static void sub_quiet(const struct td_sub *s)
{
	static const struct itimerspec off;

	(void)timerfd_settime(s->efd, 0, &off, NULL);
}

int td_sub_poll(struct td_sub *s, struct td_view *view)
{
	uint64_t n;
	int rc;

	if (!s || !view || s->efd < 0)
		return -EINVAL;
	if (td__client_foreign(s->c))
		return -ECHILD;
	(void)!read(s->efd, &n, sizeof(n)); /* EAGAIN: nothing pending */
	(void)td__sub_row_set(s, &s->row->waiting, 0, NULL);
	rc = td_sub_next(s, 0, view);
	if (rc == -ETIMEDOUT) {
		sub_quiet(s);
		sub_arm(s);
		return -EAGAIN;
	}
	/* still armed while the view is read: the next version wakes */
	if (rc == 0)
		sub_arm(s);
	return rc;
}

int td_sub_set_handler(struct td_sub *s, td_sub_fn fn, void *ud)
{
	struct epoll_event ev = {.events = EPOLLIN};
	struct td_client *c;
	int rc;

	if (!s)
		return -EINVAL;
	c = s->c;
	/* a child of fork() shares the parent's epoll set (and row) */
	if (td__client_foreign(c))
		return -ECHILD;
	if (fn) {
		rc = td_sub_fd(s);
		if (rc < 0)
			return rc;
	}
	td__client_lock(c);
	/* the old fn is called no more once this returns */
	td__sub_walk_wait(c);
	td__sub_unlink(s);
	s->fn = fn;
	s->ud = ud;
	rc = 0;
	if (fn && c->epfd >= 0) {
		ev.data.fd = s->efd;
		if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, s->efd, &ev) < 0)
			rc = -errno;
	} else if (fn) {
		rc = -ENOTCONN;
	}
	if (rc == 0 && fn) {
		/* a version already there is delivered too; armed before
		 * another thread's walk can take s up (td_sub_poll) */
		sub_arm(s);
		s->lnext = c->subs;
		c->subs = s;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int td__sub_deliver(struct td_client *c)
{
	struct td_sub *s, *next;
	struct td_view view;
	td_sub_fn fn;
	void *ud;
	int n = 0, rc;
	bool woken, again;

	/*
	 * One walk of the list at a time: a handler that processes again
	 * (or another thread's td_client_process) would walk it under this
	 * one, and a handler there may close its own subscription, the one
	 * this walk goes to next. The walk under way delivers it: a call
	 * that finds it clears the fds (or its loop would spin on them until
	 * the walk ends) and leaves it a walk of every subscription more,
	 * as if each had been woken, for what the fds said.
	 */
	td__client_lock(c);
	if (!td__turn_take(&c->sub_turn, false)) {
		for (s = c->subs; s; s = s->lnext)
			if (!s->ended)
				(void)!read(s->efd, &(uint64_t){0},
					    sizeof(uint64_t));
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	again = c->sub_again;
	c->sub_again = false;
	s = c->subs;
	if (!s) {
		td__turn_give(&c->sub_turn); /* no walk */
		pthread_cond_broadcast(&c->sub_walked);
	}
	c->ops->ready(c);
	pthread_mutex_unlock(&c->lock);
	if (!s)
		return 0;
	/*
	 * Another thread's td_sub_close() waits for the walk to end
	 * (sub_walked): s and next stay until then. Its handler is taken
	 * with the lock: another thread may set another one, or none.
	 */
	for (; s; s = next) {
		td__client_lock(c);
		next = s->lnext;
		fn = s->fn;
		ud = s->ud;
		pthread_mutex_unlock(&c->lock);
		if (s->ended || !fn)
			continue;
		/*
		 * Clear the fd, but leave the view held alone unless there is
		 * something newer (or the end): process() also runs for the
		 * client's other work.
		 */
		woken = read(s->efd, &(uint64_t){0}, sizeof(uint64_t)) > 0 ||
			again;
		if (!sub_news(s)) {
			if (!woken)
				continue;
			/* woken for nothing: no periodic timer (then look
			 * again, for a fire the disarm took) */
			sub_quiet(s);
			if (!sub_news(s))
				continue;
		}
		rc = td_sub_poll(s, &view);
		if (rc == -EAGAIN)
			continue;
		if (rc < 0) {
			/*
			 * Told once: its timerfd leaves the client's fd set,
			 * since nothing reads it again and the producer may
			 * still fire it (or keep it armed) for as long as
			 * the program keeps the subscription open.
			 */
			s->ended = true;
			td__client_lock(c);
			if (c->epfd >= 0 && !td__client_foreign(c))
				epoll_ctl(c->epfd, EPOLL_CTL_DEL, s->efd, NULL);
			pthread_mutex_unlock(&c->lock);
		}
		n++;
		fn(s, rc, rc == 0 ? &view : NULL, ud);
		/* the callback may have closed s (and only s) */
	}
	td__client_lock(c);
	c->sub_again = td__turn_give(&c->sub_turn);
	pthread_cond_broadcast(&c->sub_walked);
	c->ops->ready(c);
	pthread_mutex_unlock(&c->lock);
	return n;
}
