/* SPDX-License-Identifier: MIT */
/*
 * libtensord in an event loop: the pollable descriptor (an epoll fd over
 * the socket and an eventfd that is readable while work is queued),
 * asynchronous GETs and td_client_process(), which delivers to callbacks.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "client.h"

/* Messages one td_client_process() reads before it lets the loop run. */
#define LOOP_BATCH 64
/* TD_CLIENT_RECONNECT in a loop: the first wait after a failed try, and
 * the longest (it doubles in between) */
#define RECONNECT_FIRST_MS 10
#define RECONNECT_MAX_MS 1000

int td__loop_open(struct td_client *c)
{
	struct epoll_event ev = {.events = EPOLLIN};

	c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->efd < 0)
		return -errno;
	c->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (c->epfd < 0)
		return -errno;
	ev.data.fd = c->sock;
	if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->sock, &ev) < 0)
		return -errno;
	ev.data.fd = c->efd;
	if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->efd, &ev) < 0)
		return -errno;
	c->efd_on = false;
	td__loop_ready(c); /* HELLO's round trip may have queued nothing */
	return 0;
}

void td__loop_close(struct td_client *c)
{
	if (c->epfd >= 0)
		close(c->epfd);
	if (c->efd >= 0)
		close(c->efd);
	if (c->rfd >= 0)
		close(c->rfd);
	if (c->rsock >= 0)
		close(c->rsock); /* a reconnect under way */
	c->epfd = c->efd = c->rfd = c->rsock = -1;
	c->rstate = TD__RC_IDLE;
	c->efd_on = false;
}

void td__loop_ready(struct td_client *c)
{
	/* what another thread's turn was left is its (events: only those
	 * it hands to a handler) */
	bool evs = (c->ev_head || c->ev_lost) &&
		   !(td__turn_left(&c->ev_turn) && c->ev_fn);
	bool want = evs || (c->done && !td__turn_left(&c->get_turn)) ||
		    (c->sub_again && !c->sub_turn.depth);
	uint64_t v = 1;

	/* a child of fork() shares the eventfd: it is the parent's to set */
	if (c->efd < 0 || want == c->efd_on || td__client_foreign(c))
		return;
	/*
	 * An eventfd cannot fail these with a counter that only ever holds
	 * 0 or 1; EAGAIN would mean it is already in the wanted state.
	 */
	if (want)
		(void)!write(c->efd, &v, sizeof(v));
	else
		(void)!read(c->efd, &v, sizeof(v));
	c->efd_on = want;
}

static void done_push(struct td_client *c, struct td__async *a)
{
	a->next = NULL;
	if (c->done_tail)
		c->done_tail->next = a;
	else
		c->done = a;
	c->done_tail = a;
}

bool td__loop_reply(struct td_client *c, struct td__msg *m)
{
	struct td__async **pp = &c->asyncs, *a;
	int status = m->hdr.status;

	while (*pp && (*pp)->id != m->hdr.request_id)
		pp = &(*pp)->next;
	a = *pp;
	if (!a)
		return false;
	*pp = a->next;
	if (status < 0) {
		td__msg_close_fds(m);
		a->status = td__reply_error(m, status, &a->err);
	} else if (status > 0) {
		td__msg_close_fds(m);
		a->status = td__fail(&a->err, -EPROTO, "reply status %d > 0",
				     status);
	} else {
		/* inside a receive loop: the lease is not waited on */
		a->status = td__get_reply(c, m, true, &a->t, &a->err);
	}
	done_push(c, a);
	td__loop_ready(c);
	return true;
}

void td__loop_fail(struct td_client *c, int status)
{
	struct td__async *a;

	while ((a = c->asyncs)) {
		c->asyncs = a->next;
		a->status = td__fail(&a->err, status, "GET %s",
				     status == -ECANCELED
					     ? "cancelled: client closed"
					     : "lost: connection broken");
		done_push(c, a);
	}
	td__loop_ready(c);
}

void td__loop_fail_queued(struct td_client *c, int status,
			  const struct td_error *why)
{
	struct td__async *a;

	while ((a = c->queued)) {
		c->queued = a->next;
		a->status = td__fail(&a->err, status, "GET %s: reconnect: %s",
				     a->name,
				     why && why->code == status && *why->reason
					     ? why->reason
					     : strerror(-status));
		done_push(c, a);
	}
	c->queued_tail = NULL;
	td__loop_ready(c);
}

void td__loop_send_queued(struct td_client *c)
{
	struct td__async *a;
	int64_t len;
	int rc;

	while ((a = c->queued)) {
		c->queued = a->next;
		rc = c->dead;
		len = rc ? 0 : td__get_encode(c, a->name, TD_GET_NEWER, a->after,
					      a->timeout_ms);
		if (!rc && len < 0)
			rc = -EINVAL;
		if (!rc)
			rc = td__send(c, TD_OP_GET, (size_t)len, &a->id);
		if (rc < 0) {
			a->status = td__fail(&a->err, rc, "send GET %s: %s",
					     a->name, strerror(-rc));
			done_push(c, a);
		} else {
			a->next = c->asyncs;
			c->asyncs = a;
		}
	}
	c->queued_tail = NULL;
	td__loop_ready(c);
}

void td__loop_watch(struct td_client *c, int fd, bool on)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};

	/* EEXIST, ENOENT: it is where it should be */
	if (c->epfd >= 0 && fd >= 0)
		(void)epoll_ctl(c->epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, fd,
				&ev);
}

int td__loop_timer(struct td_client *c, int64_t at)
{
	struct itimerspec its = {0};

	if (at < 0) {
		if (c->rfd >= 0)
			timerfd_settime(c->rfd, 0, &its, NULL);
		return 0;
	}
	if (c->epfd < 0)
		return -ENOTCONN;
	if (c->rfd < 0) {
		struct epoll_event ev = {.events = EPOLLIN};

		c->rfd = timerfd_create(CLOCK_MONOTONIC,
					TFD_CLOEXEC | TFD_NONBLOCK);
		if (c->rfd < 0)
			return -errno;
		ev.data.fd = c->rfd;
		if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->rfd, &ev) < 0) {
			close(c->rfd);
			c->rfd = -1;
			return -errno;
		}
	}
	/* 0 would disarm it: a moment already past fires at once */
	if (at == 0)
		at = 1;
	its.it_value.tv_sec = at / 1000000000;
	its.it_value.tv_nsec = at % 1000000000;
	return timerfd_settime(c->rfd, TFD_TIMER_ABSTIME, &its, NULL) < 0
		       ? -errno
		       : 0;
}

/* One callback's worth of work, taken with the lock held. */
union job {
	struct {
		td_event_fn fn;
		void *ud;
		struct td_event ev;
	} ev;
	struct td__async *get;
};

/* The next watch event for the handler (due: within the call's batch). */
static bool take_event(struct td_client *c, union job *j, bool due)
{
	j->ev.fn = c->ev_fn;
	j->ev.ud = c->ev_ud;
	return due && j->ev.fn && c->sock >= 0 && td__event_take(c, &j->ev.ev);
}

static void call_event(struct td_client *c, union job *j)
{
	j->ev.fn(c, &j->ev.ev, j->ev.ud);
}

/*
 * The next finished GET. Once the handle is closing every one is due:
 * nothing calls td_client_process() after the close to deliver the rest,
 * and each fn is owed its one call.
 */
static bool take_get(struct td_client *c, union job *j, bool due)
{
	struct td__async *a = c->done;

	if (!a || !(due || c->closing))
		return false;
	c->done = a->next;
	if (!c->done)
		c->done_tail = NULL;
	j->get = a;
	return true;
}

static void call_get(struct td_client *c, union job *j)
{
	struct td__async *a = j->get;

	a->fn(c, a->status, a->t, &a->err, a->ud);
	free(a);
}

/*
 * Make the callbacks of one kind of queued work (take, call), at most
 * limit, taking each from the head of its queue only when its turn
 * comes. No lock held. So a callback that processes again (nested)
 * goes on with the next in arrival order; a handler that sets another
 * event handler, or none, has the rest go there; closing the handle ends
 * a batch of events (they went with the handle).
 *
 * One thread at a time (t): while a callback runs, another thread's call
 * leaves that queue alone (two threads taking turns at its head would
 * run two callbacks at once, and finish them in either order). It does
 * not wait: it goes back to its loop, and td_client_fd() stays quiet
 * for that queue until this turn is done; what is left then makes it
 * readable again.
 */
static int deliver(struct td_client *c, struct td__turn *t, size_t limit,
		   bool (*take)(struct td_client *c, union job *j, bool due),
		   void (*call)(struct td_client *c, union job *j))
{
	union job j;
	size_t n = 0;

	td__client_lock(c);
	if (td__turn_take(t, true)) {
		for (; take(c, &j, n < limit); n++) {
			pthread_mutex_unlock(&c->lock);
			call(c, &j);
			td__client_lock(c);
		}
		td__turn_give(t);
	}
	td__loop_ready(c);
	pthread_mutex_unlock(&c->lock);
	return (int)n;
}

void td__loop_cancel(struct td_client *c)
{
	td__client_lock(c);
	/* a callback below that asks again is refused: nothing would
	 * deliver its answer, nor free it */
	c->closing = true;
	td__loop_fail(c, -ECANCELED);
	td__loop_fail_queued(c, -ECANCELED, NULL);
	pthread_mutex_unlock(&c->lock);
	/* during another thread's turn (a close from some callback beside
	 * it), that thread delivers them all (take_get) */
	deliver(c, &c->get_turn, SIZE_MAX, take_get, call_get);
}

int td_client_set_event_handler(struct td_client *c, td_event_fn fn,
				void *ud)
{
	if (!c)
		return -EINVAL;
	td__client_lock(c);
	c->ev_fn = fn;
	c->ev_ud = ud;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/*
 * TD_CLIENT_RECONNECT in a loop (lock held, the connection broken): the
 * try under way goes on, or a new one begins when the last one's wait is
 * over (now: at once), else that one's -errno again. Nothing here
 * waits: the try's socket and the timer rfd wake the loop for its next
 * step (connect.c, ops->reconnect_step). 0: connected; -EINPROGRESS: the
 * try goes on. A failed try leaves the broken socket out of the loop's
 * set, whose hang-up would wake the loop at once for ever, and sets rfd
 * for the next try: the loop sleeps in between, as the header promises.
 */
static int reconnect_paced(struct td_client *c, bool now,
			   struct td_error *err)
{
	unsigned ms = RECONNECT_MAX_MS;
	uint64_t n;
	bool due = c->rfd >= 0 && read(c->rfd, &n, sizeof(n)) > 0;
	int rc;

	if (c->rstate == TD__RC_IDLE && c->rtries && !due && !now)
		return td__fail(err, c->dead, "connection broken: %s (the "
				"next reconnect is not due yet)",
				strerror(-c->dead));
	if (c->epfd < 0)
		return td__client_usable(c, err);
	rc = c->ops->reconnect_step(c, err);
	if (rc == 0 || rc == -EINPROGRESS)
		return rc;
	if (c->rtries < 7)
		ms = RECONNECT_FIRST_MS << c->rtries;
	if (ms > RECONNECT_MAX_MS)
		ms = RECONNECT_MAX_MS;
	c->rtries++;
	/* without a timer the hang-up wakes the loop, as before */
	td__loop_watch(c, c->sock,
		       td__loop_timer(c, td__now_ns() +
						 (int64_t)ms * 1000000) < 0);
	return rc;
}

int td_client_get_newer_async(struct td_client *c, const char *name,
			      uint64_t after, int timeout_ms, td_get_fn fn,
			      void *ud, struct td_error *err)
{
	uint32_t t = timeout_ms < 0 ? TD_WIRE_WAIT_FOREVER
				    : (uint32_t)timeout_ms;
	struct td__async *a;
	int64_t len;
	int rc;

	if (!c || !name || !fn)
		return td__fail(err, -EINVAL, "missing argument");
	a = calloc(1, sizeof(*a));
	if (!a)
		return td__fail(err, -ENOMEM, "out of memory");
	a->fn = fn;
	a->ud = ud;
	td__client_lock(c);
	if (c->closing) {
		rc = td__fail(err, -ENOTCONN, "client is closing");
		goto fail;
	}
	len = td__get_encode(c, name, TD_GET_NEWER, after, t);
	if (len < 0 || strlen(name) > TD_NAME_MAX) {
		rc = td__fail(err, -EINVAL, "bad tensor name");
		goto fail;
	}
	/*
	 * A broken connection first, as td__get_common: the held ids
	 * encoded below must be the new daemon's. With TD_CLIENT_RECONNECT
	 * it does not wait for the daemon: the GET waits for the try (begun
	 * here when none is under way) and goes once HELLO is answered.
	 */
	if (c->dead && c->reconnect && c->sock >= 0 && c->epfd >= 0 &&
	    !td__client_foreign(c)) {
		rc = c->rstate == TD__RC_IDLE ? reconnect_paced(c, true, err)
					      : -EINPROGRESS;
		if (rc == -EINPROGRESS) {
			memcpy(a->name, name, strlen(name) + 1);
			a->after = after;
			a->timeout_ms = t;
			if (c->queued_tail)
				c->queued_tail->next = a;
			else
				c->queued = a;
			c->queued_tail = a;
			pthread_mutex_unlock(&c->lock);
			return 0;
		}
		if (rc < 0)
			goto fail;
	} else if (c->dead) {
		rc = td__client_usable(c, err);
		if (rc < 0)
			goto fail;
	}
	len = td__get_encode(c, name, TD_GET_NEWER, after, t);
	rc = td__send(c, TD_OP_GET, (size_t)len, &a->id);
	if (rc < 0) {
		td__fail(err, rc, "send GET: %s", strerror(-rc));
		goto fail;
	}
	a->next = c->asyncs;
	c->asyncs = a;
	pthread_mutex_unlock(&c->lock);
	return 0;
fail:
	pthread_mutex_unlock(&c->lock);
	free(a);
	return rc;
}

/* Read what is there (lock held): 0, -EINPROGRESS while a reconnect is
 * under way, or the -errno that broke it (*err says why). */
static int read_ready(struct td_client *c, struct td_error *err)
{
	struct td__msg m;
	int rc = 0;

	if (c->sock < 0)
		return td__fail(err, -ENOTCONN, "client is closed");
	if (td__client_foreign(c))
		return td__fail(err, -ECHILD, "this connection belongs to "
				"process %d", (int)c->pid);
	/* broken: reconnects here with TD_CLIENT_RECONNECT, paced */
	if (c->dead)
		rc = c->reconnect ? reconnect_paced(c, false, err)
				  : td__client_usable(c, err);
	if (rc == -EINPROGRESS)
		return rc;
	for (int i = 0; rc == 0 && i < LOOP_BATCH; i++) {
		rc = td__msg_recv(c, &m, MSG_DONTWAIT);
		if (rc == -EAGAIN)
			return 0;
		if (rc == 0)
			td__msg_aside(c, &m);
		else
			td__fail(err, rc, "connection: %s", strerror(-rc));
	}
	if (rc < 0)
		td__loop_fail(c, rc);
	return rc;
}

int td_client_process(struct td_client *c, struct td_error *err)
{
	struct td_error why = {0};
	size_t gets = 0, evs = 0;
	bool open;
	int rc, n;

	if (!c)
		return td__fail(err, -EINVAL, "no client");
	td__client_lock(c);
	rc = read_ready(c, &why);
	/* what comes in during the callbacks waits for the next call */
	for (const struct td__async *a = c->done; a; a = a->next)
		gets++;
	for (const struct td__event *e = c->ev_head; e && c->ev_fn;
	     e = e->next)
		evs++;
	evs += c->ev_fn && c->ev_lost; /* the count of those dropped */
	td__loop_ready(c);
	/*
	 * A callback may close the handle: the struct stays until the
	 * callbacks are done. Finished GETs are still delivered (each fn is
	 * owed its one call); events and subscriptions end with the handle.
	 */
	td__client_ref(c);
	pthread_mutex_unlock(&c->lock);

	n = deliver(c, &c->get_turn, gets, take_get, call_get);
	td__client_lock(c);
	open = c->sock >= 0;
	pthread_mutex_unlock(&c->lock);
	if (rc == 0 && open)
		n += td__sub_deliver(c);
	n += deliver(c, &c->ev_turn, evs, take_event, call_event);
	td__client_unref(c);
	/* a reconnect under way is no failure: the loop waits for it */
	if (rc < 0 && rc != -EINPROGRESS) {
		if (why.code != rc || !*why.reason)
			return td__fail(err, rc, "connection: %s",
					strerror(-rc));
		if (err)
			*err = why;
		return rc;
	}
	return n;
}
