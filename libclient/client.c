/* SPDX-License-Identifier: MIT */
/*
 * libtensord connection: socket, HELLO and import negotiation, framing with
 * SCM_RIGHTS, request/reply pairing, the event queue, client lifetime.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "blob.h"
#include "client.h"
#include "os.h"
#include "scm.h"
#include "wire-status.h"


_Static_assert((int)TD_TENSOR_F64 == (int)TD_DTYPE_F64,
	       "dtype codes follow the blob");
_Static_assert((int)TD_CLIENT_PATH_PIDFD == (int)TD_IMPORT_PIDFD,
	       "paths follow wire");
_Static_assert((int)TD_CLIENT_PATH_SCM == (int)TD_IMPORT_SCM,
	       "paths follow wire");
_Static_assert((int)TD_REASON_MAX == (int)TD_WIRE_MAX_REASON,
	       "reason cap");
_Static_assert((int)TD_NAME_MAX == (int)TD_WIRE_MAX_NAME,
	       "name cap");
_Static_assert((int)TD_ENTRY_MAX_DIMS == (int)TD_WIRE_MAX_DIMS,
	       "dims cap");
_Static_assert((int)TD_PUBLISH_PIN == (int)TD_WIRE_PUB_PIN,
	       "pin flag");
_Static_assert((int)TD_ENTRY_RING == (int)TD_WIRE_ENT_RING, "entry flags");
_Static_assert((int)TD_ENTRY_RECYCLE == (int)TD_WIRE_ENT_RECYCLE,
	       "entry flags");
_Static_assert((int)TD_WATCH_PREFIX == (int)TD_WIRE_WATCH_PREFIX,
	       "watch flag");
_Static_assert((int)TD_EVENT_TYPE_PUBLISHED == (int)TD_EVENT_PUBLISHED,
	       "events");
_Static_assert((int)TD_EVENT_TYPE_DELETED == (int)TD_EVENT_DELETED,
	       "events");

int td__fail(struct td_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (err) {
		err->code = code;
		va_start(ap, fmt);
		vsnprintf(err->reason, sizeof(err->reason), fmt, ap);
		va_end(ap);
	}
	return code;
}

void td__str_copy(char *dst, size_t cap, struct td_wire_str s)
{
	size_t n = s.len < cap - 1 ? s.len : cap - 1;

	if (n)
		memcpy(dst, s.ptr, n);
	dst[n] = 0;
}

unsigned td_tensor_dtype_size(uint32_t dtype)
{
	return td_dtype_size(dtype);
}

const char *td_tensor_dtype_name(uint32_t dtype)
{
	return td_dtype_name(dtype);
}

int td_tensor_dtype_from_name(const char *name)
{
	int d = name ? td_dtype_from_name(name) : -1;

	return d < 0 ? -EINVAL : d;
}

/* ---- lifetime ---- */

void td__client_ref(struct td_client *c)
{
	c->refs++;
}

static void client_free(struct td_client *c)
{
	struct td__event *e;
	struct td__watchrec *w;

	while ((e = c->ev_head)) {
		c->ev_head = e->next;
		free(e);
	}
	while ((w = c->watches)) {
		c->watches = w->next;
		free(w);
	}
	td__loop_close(c);
	/* Every tensor is gone (refs == 0), so every map is idle. */
	td__maps_drop(c, true);
	td__next_loan_forget(c);
	td__stage_forget(c);
	td__loans_drop(c, true);
	if (c->sock >= 0)
		close(c->sock);
	if (c->daemon_pidfd >= 0)
		close(c->daemon_pidfd);
	pthread_mutex_destroy(&c->lock);
	free(c->rbuf);
	free(c->sbuf);
	free(c);
}

void td__client_unref(struct td_client *c)
{
	unsigned n;

	pthread_mutex_lock(&c->lock);
	n = --c->refs;
	pthread_mutex_unlock(&c->lock);
	if (n == 0)
		client_free(c);
}

void td_client_close(struct td_client *c)
{
	struct td__event *e;

	if (!c)
		return;
	/* asynchronous GETs still waiting are told, then forgotten */
	td__loop_cancel(c);
	td__gf_close_all(c);
	pthread_mutex_lock(&c->lock);
	/*
	 * Closing the socket ends the daemon's side at once (leases, watches,
	 * loans); tensors still held keep their mappings (refs) until
	 * released, and the rest of the struct lives until the last of them.
	 */
	if (c->sock >= 0) {
		close(c->sock);
		c->sock = -1;
	}
	if (c->daemon_pidfd >= 0) {
		close(c->daemon_pidfd);
		c->daemon_pidfd = -1;
	}
	while ((e = c->ev_head)) {
		c->ev_head = e->next;
		free(e);
	}
	c->ev_tail = NULL;
	td__loop_close(c);
	td__pub_forget(c, -ENOTCONN);
	td__maps_drop(c, false);
	td__loans_drop(c, false);
	pthread_mutex_unlock(&c->lock);
	td__client_unref(c);
}

int td_client_info(struct td_client *c, struct td_client_info *info)
{
	if (!c || !info)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	memset(info, 0, sizeof(*info));
	info->daemon_pid = c->hello.daemon_pid;
	info->path_in = c->path_in;
	info->path_out = c->path_out;
	info->max_bytes = c->hello.max_bytes;
	memcpy(info->ident, c->ident, sizeof(info->ident));
	pthread_mutex_unlock(&c->lock);
	return 0;
}

int td_client_fd(struct td_client *c)
{
	int fd;

	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	fd = c->sock >= 0 && c->epfd >= 0 ? c->epfd : -ENOTCONN;
	pthread_mutex_unlock(&c->lock);
	return fd;
}

/* ---- framing ---- */

void td__msg_close_fds(struct td__msg *m)
{
	for (unsigned i = 0; i < m->nfds; i++)
		if (m->fds[i] >= 0)
			close(m->fds[i]);
	m->nfds = 0;
}

/* Mark the connection unusable: later calls fail fast with code. */
static int conn_broken(struct td_client *c, int code)
{
	if (!c->dead)
		c->dead = code;
	/* nor the PUBLISH sent without waiting */
	td__pub_forget(c, code);
	/* GETs waiting for a reply will not get one on this connection */
	td__loop_fail(c, code);
	return code;
}

static int msg_send(struct td_client *c, uint16_t op, uint64_t id,
		    size_t body_len, const int *fds, unsigned nfds)
{
	struct td_wire_hdr h = {
		.magic = TD_WIRE_MAGIC,
		.version = TD_WIRE_VERSION,
		.opcode = op,
		.fd_count = nfds,
		.request_id = id,
		.body_len = (uint32_t)body_len,
	};
	ssize_t n;

	if (nfds > TD_WIRE_MAX_FDS)
		return -E2BIG;
	td_wire_hdr_encode(&h, c->sbuf);
	n = td__scm_send(c->sock, c->sbuf, TD_WIRE_HDR_LEN + body_len, fds,
			 nfds, 0);
	if (n < 0)
		return conn_broken(c, n == -EPIPE ? -ECONNRESET : (int)n);
	/* SOCK_SEQPACKET sends the whole datagram or fails. */
	return 0;
}

/*
 * Receive one datagram into c->rbuf. Every descriptor that arrived is
 * either handed back in m->fds or closed here: a truncated control message
 * (MSG_CTRUNC) or a count that disagrees with the header closes them all
 * and breaks the connection, as PipeWire's connection.c does.
 */
int td__msg_recv(struct td_client *c, struct td__msg *m, int flags)
{
	struct td__scm_rx rx = {.fds = m->fds, .cap = TD_WIRE_MAX_FDS};
	ssize_t n;
	int rc;

	m->nfds = 0;
	n = td__scm_recv(c->sock, c->rbuf, TD_WIRE_MAX_MSG, flags, &rx);
	if (n == -EAGAIN && (flags & MSG_DONTWAIT))
		return -EAGAIN;
	if (n < 0)
		return conn_broken(c, (int)n);
	m->nfds = rx.nfds;
	if (rx.dropped)
		rx.msg_flags |= MSG_CTRUNC; /* more than a message may carry */
	if (n == 0) {
		td__msg_close_fds(m);
		return conn_broken(c, -ECONNRESET);
	}
	if (rx.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) {
		td__msg_close_fds(m);
		return conn_broken(c, -EPROTO);
	}
	rc = td_wire_hdr_decode(c->rbuf, (size_t)n, &m->hdr, NULL);
	if (rc < 0 || m->hdr.fd_count != m->nfds) {
		td__msg_close_fds(m);
		return conn_broken(c, -EPROTO);
	}
	m->body = c->rbuf + TD_WIRE_HDR_LEN;
	m->body_len = m->hdr.body_len;
	return 0;
}

static void event_link(struct td_client *c, struct td__event *e)
{
	e->next = NULL;
	if (c->ev_tail)
		c->ev_tail->next = e;
	else
		c->ev_head = e;
	c->ev_tail = e;
}

/*
 * Events dropped so far into the OVERFLOWED event at the queue's tail,
 * made if need be (outside the limit); without memory they stay counted
 * in ev_lost, which td__event_take() gives when the queue is empty.
 */
static void overflow_note(struct td_client *c)
{
	struct td__event *o = c->ev_tail;

	if (!c->ev_lost)
		return;
	if (!o || o->ev.type != TD_EVENT_TYPE_OVERFLOWED) {
		if (!(o = calloc(1, sizeof(*o))))
			return;
		o->ev.type = TD_EVENT_TYPE_OVERFLOWED;
		event_link(c, o);
	}
	o->ev.version += c->ev_lost;
	c->ev_lost = 0;
}

/* Queue a watch event, or count it dropped (the limit, no memory). */
static void event_queue(struct td_client *c, const struct td_event *ev)
{
	struct td__event *e = NULL;

	overflow_note(c); /* earlier drops first, in their place */
	if ((c->ev_limit && c->ev_count >= c->ev_limit) ||
	    !(e = malloc(sizeof(*e)))) {
		c->ev_lost++;
		overflow_note(c);
	} else {
		e->ev = *ev;
		event_link(c, e);
		c->ev_count++;
	}
	td__loop_ready(c);
}

int td__event_take(struct td_client *c, struct td_event *ev)
{
	struct td__event *e = c->ev_head;

	if (!e && !c->ev_lost)
		return 0;
	if (!e) {
		*ev = (struct td_event){.type = TD_EVENT_TYPE_OVERFLOWED,
					.version = c->ev_lost};
		c->ev_lost = 0;
	} else {
		c->ev_head = e->next;
		if (!c->ev_head)
			c->ev_tail = NULL;
		c->ev_count -= e->ev.type != TD_EVENT_TYPE_OVERFLOWED;
		*ev = e->ev;
		free(e);
	}
	td__loop_ready(c);
	return 1;
}

int td_client_set_event_limit(struct td_client *c, unsigned max)
{
	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	c->ev_limit = max;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static void queue_notify(struct td_client *c, const struct td__msg *m)
{
	struct td_wire_notify n;
	struct td_event ev = {0};

	if (td_wire_notify_decode(m->body, m->body_len, &n, NULL) < 0)
		return; /* a bad event cannot be delivered; drop it */
	for (const struct td__watchrec *w = c->watches; w; w = w->next)
		if (w->daemon_id == n.watch_id)
			ev.watch_id = w->id;
	ev.type = n.event;
	ev.version = n.version;
	td__str_copy(ev.name, sizeof(ev.name), n.name);
	event_queue(c, &ev);
}

/* Handle a message that is not the reply being waited for. */
void td__msg_aside(struct td_client *c, struct td__msg *m)
{
	if ((m->hdr.flags & TD_WIRE_F_REPLY) && td__loop_reply(c, m))
		return;
	if ((m->hdr.flags & TD_WIRE_F_REPLY) && c->pub_id &&
	    m->hdr.request_id == c->pub_id) {
		td__pub_answered(c, m);
		return;
	}
	if (m->hdr.opcode == TD_OP_NOTIFY && (m->hdr.flags & TD_WIRE_F_NOTIFY))
		queue_notify(c, m);
	/* stray replies (none are expected) and their fds are dropped */
	td__msg_close_fds(m);
}

int td__reply_error(const struct td__msg *m, int status,
		    struct td_error *err)
{
	struct td_wire_error e;

	if (td_wire_error_decode(m->body, m->body_len, &e, NULL) == 0 &&
	    e.reason.len) {
		if (err) {
			err->code = status;
			td__str_copy(err->reason, sizeof(err->reason),
				     e.reason);
		}
		return status;
	}
	return td__fail(err, status, "daemon: %s", strerror(-status));
}

static int reconnect(struct td_client *c, struct td_error *err);
static int reconnect_now(struct td_client *c, struct td_error *err);

int64_t td__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/*
 * Before a blocking receive: poll the socket as planned from the recent
 * waits of this kind (docs/fastpath.md, "Waiting"), so that a reply that
 * comes within microseconds does not cost a sleep and a wake-up. Bounded
 * per wait; long waits (a paced stream's GET) sleep at once.
 */
static void reply_poll(struct td_client *c, struct td_pace *p,
		       struct td_pace_plan *w)
{
	int64_t now = td__now_ns();

	td_pace_plan(p, now, w);
	for (;;) {
		struct pollfd pf = {.fd = c->sock, .events = POLLIN};
		enum td_pace_step step = td_pace_step(w, now);

		if (step == TD_PACE_SLEEP || poll(&pf, 1, 0) != 0)
			return;
		if (step == TD_PACE_YIELD)
			sched_yield();
		else
			td__cpu_relax();
		now = td__now_ns();
	}
}

/* forks of this process so far, as its children count them */
unsigned td__fork_gen;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
	td__fork_gen++;
}

static void fork_watch(void)
{
	pthread_atfork(NULL, NULL, on_fork_child);
}

static int client_usable(struct td_client *c, struct td_error *err)
{
	if (c->sock < 0)
		return td__fail(err, -ENOTCONN, "client is closed");
	/* a child of fork() shares the parent's socket: its requests and
	 * releases would mix with the parent's (and end its leases) */
	if (td__client_foreign(c))
		return td__fail(err, -ECHILD,
				"this connection belongs to process %d; "
				"a child of fork() connects on its own",
				(int)c->pid);
	if (c->dead && c->reconnect)
		return reconnect(c, err);
	if (c->dead)
		return td__fail(err, c->dead, "connection broken: %s",
				strerror(-c->dead));
	return 0;
}

int td__client_usable(struct td_client *c, struct td_error *err)
{
	return client_usable(c, err);
}

/*
 * A connection the daemon refused at accept (a per-uid limit, or its
 * descriptor reserve) gets one error reply with request_id 0, then the
 * hang-up. Is that in rep (just received)?
 */
static bool refusal(const struct td__msg *rep)
{
	return (rep->hdr.flags & TD_WIRE_F_REPLY) &&
	       rep->hdr.request_id == 0 && rep->hdr.status < 0;
}

/* After a failed send: the refusal the daemon left before hanging up. */
static int pending_refusal(struct td_client *c, struct td__msg *rep)
{
	struct td__scm_rx rx = {.fds = rep->fds, .cap = TD_WIRE_MAX_FDS};
	ssize_t n = td__scm_recv(c->sock, c->rbuf, TD_WIRE_MAX_MSG,
				 MSG_DONTWAIT, &rx);

	rep->nfds = n < 0 ? 0 : rx.nfds;
	td__msg_close_fds(rep);
	if (n < TD_WIRE_HDR_LEN ||
	    td_wire_hdr_decode(c->rbuf, (size_t)n, &rep->hdr, NULL) < 0 ||
	    !refusal(rep))
		return -1;
	rep->body = c->rbuf + TD_WIRE_HDR_LEN;
	rep->body_len = rep->hdr.body_len;
	return 0;
}

int td__call(struct td_client *c, uint16_t op, size_t body_len,
	     const int *fds, unsigned nfds, struct td__msg *rep,
	     struct td_error *err)
{
	return td__call_paced(c, op, body_len, fds, nfds, NULL, rep, err);
}

int td__call_paced(struct td_client *c, uint16_t op, size_t body_len,
		   const int *fds, unsigned nfds, struct td_pace *pace,
		   struct td__msg *rep, struct td_error *err)
{
	uint64_t id;
	int rc = td__request(c, op, body_len, fds, nfds, &id, rep, err);

	return rc < 0 ? rc : td__reply(c, op, id, pace, rep, err);
}

int td__request(struct td_client *c, uint16_t op, size_t body_len,
		const int *fds, unsigned nfds, uint64_t *id,
		struct td__msg *rep, struct td_error *err)
{
	int rc;

	rep->nfds = 0;
	rc = client_usable(c, err);
	if (rc < 0)
		return rc;
	*id = ++c->next_id;
	rc = msg_send(c, op, *id, body_len, fds, nfds);
	if (rc < 0 && pending_refusal(c, rep) == 0)
		return td__reply_error(rep, rep->hdr.status, err);
	if (rc < 0)
		return td__fail(err, rc, "send %s: %s", td_wire_op_name(op),
				strerror(-rc));
	return 0;
}

static int reply_until(struct td_client *c, uint16_t op, uint64_t id,
		       struct td_pace *pace, int64_t by, struct td__msg *rep,
		       struct td_error *err);

int td__reply(struct td_client *c, uint16_t op, uint64_t id,
	      struct td_pace *pace, struct td__msg *rep, struct td_error *err)
{
	return reply_until(c, op, id, pace, -1, rep, err);
}

int td__call_by(struct td_client *c, uint16_t op, size_t body_len,
		int64_t by, struct td__msg *rep, struct td_error *err)
{
	uint64_t id;
	int rc = td__request(c, op, body_len, NULL, 0, &id, rep, err);

	return rc < 0 ? rc : reply_until(c, op, id, NULL, by, rep, err);
}

/* by: the CLOCK_MONOTONIC ns the reply is waited for until, -1 ever. */
static int reply_until(struct td_client *c, uint16_t op, uint64_t id,
		       struct td_pace *pace, int64_t by, struct td__msg *rep,
		       struct td_error *err)
{
	struct td_pace_plan plan;
	int rc;

	if (pace)
		reply_poll(c, pace, &plan);
	for (;;) {
		if (by >= 0) {
			struct pollfd p = {.fd = c->sock, .events = POLLIN};
			int64_t left = by - td__now_ns();

			if (left <= 0 ||
			    poll(&p, 1, (int)((left + 999999) / 1000000)) == 0)
				return td__fail(err, -ETIMEDOUT,
						"no %s reply in time",
						td_wire_op_name(op));
		}
		rc = td__msg_recv(c, rep, 0);
		/*
		 * A daemon that closes a socket with our request unread makes
		 * the first read fail (ECONNRESET) before the datagram it
		 * left: read that one too.
		 */
		if (rc == -ECONNRESET && pending_refusal(c, rep) == 0)
			return td__reply_error(rep, rep->hdr.status, err);
		if (rc < 0)
			return td__fail(err, rc, "receive %s reply: %s",
					td_wire_op_name(op), strerror(-rc));
		if ((rep->hdr.flags & TD_WIRE_F_REPLY) &&
		    (rep->hdr.request_id == id || refusal(rep)))
			break;
		td__msg_aside(c, rep);
	}
	if (pace) {
		td_pace_done(pace, &plan, td__now_ns());
		/* answered with a crowd: the next wait sleeps at once */
		pace->waiters = (rep->hdr.flags & TD_WIRE_F_CROWD) ? UINT32_MAX
								   : 0;
	}
	if (rep->hdr.status < 0) {
		rc = rep->hdr.status;
		td__msg_close_fds(rep);
		return td__reply_error(rep, rc, err);
	}
	if (rep->hdr.status > 0) {
		td__msg_close_fds(rep);
		return td__fail(err, -EPROTO, "reply status %d > 0",
				rep->hdr.status);
	}
	return 0;
}

int td__send(struct td_client *c, uint16_t op, size_t body_len,
	     uint64_t *id)
{
	uint64_t n;
	int rc = client_usable(c, NULL);

	if (rc < 0)
		return rc;
	n = ++c->next_id;
	rc = msg_send(c, op, n, body_len, NULL, 0);
	if (rc == 0 && id)
		*id = n;
	return rc;
}

/* ---- events ---- */

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int td_client_next_event(struct td_client *c, int timeout_ms,
			 struct td_event *ev, struct td_error *err)
{
	int64_t deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : -1;
	int rc = 0;

	if (!c || !ev)
		return td__fail(err, -EINVAL, "no client or event");
	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct pollfd pfd;
		struct td__msg m;
		int wait;

		if (td__event_take(c, ev)) {
			rc = 0;
			break;
		}
		rc = client_usable(c, err);
		if (rc < 0)
			break;
		/* a reconnect just now queued TD_EVENT_TYPE_RECONNECTED: give
		 * it, rather than wait on the new socket for something else */
		if (td__event_take(c, ev)) {
			rc = 0;
			break;
		}
		wait = -1;
		if (deadline >= 0) {
			int64_t left = deadline - now_ms();

			wait = left > 0 ? (left > INT32_MAX ? INT32_MAX
							    : (int)left)
					: 0;
		}
		pfd.fd = c->sock;
		pfd.events = POLLIN;
		rc = poll(&pfd, 1, wait);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0) {
			rc = td__fail(err, -errno, "poll: %s",
				strerror(errno));
			break;
		}
		if (rc == 0) {
			rc = td__fail(err, -ETIMEDOUT, "no event");
			break;
		}
		rc = td__msg_recv(c, &m, 0);
		if (rc < 0) {
			rc = td__fail(err, rc, "receive: %s", strerror(-rc));
			break;
		}
		td__msg_aside(c, &m);
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* ---- descriptors ---- */

int td__import_fd(struct td_client *c, int32_t remote, int *scm, int *fd)
{
	if (c->path_out == TD_IMPORT_SCM) {
		if (!scm || *scm < 0)
			return -EPROTO;
		*fd = *scm;
		*scm = -1;
		return 0;
	}
	if (remote < 0 || c->daemon_pidfd < 0)
		return -EPROTO;
	*fd = td__pidfd_getfd(c->daemon_pidfd, remote);
	return *fd < 0 ? *fd : 0;
}

int td__call_id(struct td_client *c, uint16_t op, uint64_t id,
		const int *fds, unsigned nfds)
{
	struct td_wire_ring_close_req q = {id};
	struct td__msg rep;
	int64_t len = td_wire_ring_close_req_encode(
		&q, c->sbuf + TD_WIRE_HDR_LEN, TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
	int rc;

	if (len < 0)
		return (int)len;
	rc = td__call(c, op, (size_t)len, fds, nfds, &rep, NULL);
	if (rc == 0)
		td__msg_close_fds(&rep);
	return rc;
}

int td__wake_fd(struct td_client *c, uint16_t op, uint64_t id, uint32_t epoch,
		uint32_t feature)
{
	int rc, fd;

	if (td__client_foreign(c))
		return -ECHILD;
	/* a timerfd, not an eventfd: firing it (td__timerfd_fire) cannot
	 * block the producer or the daemon, whatever its owner does */
	fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (fd < 0)
		return -errno;
	pthread_mutex_lock(&c->lock);
	rc = td__has(c, feature) ? 0 : -EOPNOTSUPP;
	if (rc == 0 && epoch != c->epoch)
		rc = -ECONNRESET; /* made on a connection that is gone */
	if (rc == 0)
		rc = td__call_id(c, op, id, &fd, 1);
	pthread_mutex_unlock(&c->lock);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

/* ---- connect ---- */

static int socket_path(const char *arg, struct sockaddr_un *sa,
		       socklen_t *len, struct td_error *err)
{
	char buf[sizeof(sa->sun_path) + 32];
	const char *p = arg, *rt;
	size_t n;

	if (!p || !*p)
		p = getenv("TENSORD_SOCKET");
	if (!p || !*p) {
		rt = getenv("XDG_RUNTIME_DIR");
		if (rt && *rt) {
			snprintf(buf, sizeof(buf), "%s/tensord.sock", rt);
			p = buf;
		}
	}
	if (!p || !*p)
		p = "/run/tensord/tensord.sock";
	n = strlen(p);
	if (n >= sizeof(sa->sun_path))
		return td__fail(err, -ENAMETOOLONG, "socket path too long: %s",
				p);
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	memcpy(sa->sun_path, p, n + 1);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
	return 0;
}

static int import_pref(uint32_t *pref, struct td_error *err)
{
	const char *e = getenv("TENSORD_IMPORT");

	if (!e || !*e || !strcmp(e, "auto"))
		*pref = TD_IMPORT_AUTO;
	else if (!strcmp(e, "pidfd"))
		*pref = TD_IMPORT_PIDFD;
	else if (!strcmp(e, "scm"))
		*pref = TD_IMPORT_SCM;
	else
		return td__fail(err, -EINVAL,
				"TENSORD_IMPORT=%s: want auto, pidfd or scm",
				e);
	return 0;
}

/* The optional features this client uses where the daemon serves them. */
#define TD__CLIENT_FEATURES                                                   \
	(TD_WIRE_FEAT_CAT_KINDS | TD_WIRE_FEAT_CAT_RECYCLE |                  \
	 TD_WIRE_FEAT_ALLOC_RECYCLE | TD_WIRE_FEAT_GET_HELD |                 \
	 TD_WIRE_FEAT_STATUS | TD_WIRE_FEAT_RING_WAKE |                 \
	 TD_WIRE_FEAT_PUB_LOAN | TD_WIRE_FEAT_RELEASE_QUIET |              \
	 TD_WIRE_FEAT_DELETE_IF | TD_WIRE_FEAT_WAKE_ROWS |                    \
	 TD_WIRE_FEAT_ROW_OWNER | TD_WIRE_FEAT_REWRITE |                    \
	 TD_WIRE_FEAT_RESERVE | TD_WIRE_FEAT_GET_CROWD |                   \
	 TD_WIRE_FEAT_ALLOC_NAME | TD_WIRE_FEAT_ALLOC_FREE |                  \
	 TD_WIRE_FEAT_STAGE | TD_WIRE_FEAT_STAGE_TAKEBACK |                  \
	 TD_WIRE_FEAT_SUB_WAIT | TD_WIRE_FEAT_FENCE_OWN)

static int hello(struct td_client *c, uint32_t pref, struct td_error *err)
{
	struct td_wire_hello_req req = {
		.import_pref = pref,
		.probe_fd = c->sock,
		.client_name = {program_invocation_short_name,
				(uint16_t)strnlen(program_invocation_short_name,
						  64)},
		.features = TD__CLIENT_FEATURES,
	};
	struct td_wire_hello_rep *rep = &c->hello;
	struct td__msg m;
	struct td_err e = {0};
	int64_t len;
	int rc, probe;

	len = td_wire_hello_req_encode(&req, c->sbuf + TD_WIRE_HDR_LEN,
				       TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
	if (len < 0)
		return td__fail(err, (int)len, "encode HELLO");
	rc = td__call(c, TD_OP_HELLO, (size_t)len, NULL, 0, &m, err);
	if (rc == -EBADMSG) {
		/*
		 * A daemon that predates feature bits refuses the word: say
		 * HELLO as before and use none of the optional features.
		 */
		if (err)
			memset(err, 0, sizeof(*err));
		req.features = 0;
		len = td_wire_hello_req_encode(&req, c->sbuf + TD_WIRE_HDR_LEN,
					       TD_WIRE_MAX_MSG -
						       TD_WIRE_HDR_LEN);
		rc = td__call(c, TD_OP_HELLO, (size_t)len, NULL, 0, &m, err);
	}
	if (rc < 0)
		return rc;
	rc = td_wire_hello_rep_decode(m.body, m.body_len, rep, &e);
	if (rc < 0 || m.nfds != (rep->out_pidfd ? 1u : 0u)) {
		td__msg_close_fds(&m);
		return td__fail(err, -EPROTO, "bad HELLO reply: %s",
				rc < 0 && e.reason ? e.reason
						   : "fd count");
	}
	td__str_copy(c->ident, sizeof(c->ident), rep->ident);
	rep->ident = (struct td_wire_str){NULL, 0}; /* borrowed c->rbuf */
	if (m.nfds)
		c->daemon_pidfd = m.fds[0];
	c->path_in = rep->import_in;
	if (c->path_in != TD_IMPORT_PIDFD && c->path_in != TD_IMPORT_SCM)
		return td__fail(err, -EPROTO, "HELLO: import_in %u",
				c->path_in);

	/*
	 * Can this client pull the daemon's fds? Only trying tells (uid,
	 * yama, LSMs all have a say), so pull the probe fd the daemon named
	 * and drop it again.
	 */
	c->path_out = TD_IMPORT_SCM;
	if (pref != TD_IMPORT_SCM && c->daemon_pidfd >= 0 &&
	    rep->probe_fd >= 0) {
		probe = td__pidfd_getfd(c->daemon_pidfd, rep->probe_fd);
		if (probe >= 0) {
			close(probe);
			c->path_out = TD_IMPORT_PIDFD;
		}
	}
	c->pidfd_forced = pref == TD_IMPORT_PIDFD;
	if (pref == TD_IMPORT_PIDFD &&
	    (c->path_out != TD_IMPORT_PIDFD || c->path_in != TD_IMPORT_PIDFD))
		return td__fail(err, -EPERM,
				"TENSORD_IMPORT=pidfd but the %s cannot "
				"pull descriptors with pidfd_getfd",
				c->path_in != TD_IMPORT_PIDFD ? "daemon"
							      : "client");
	if (c->path_out == TD_IMPORT_SCM && c->daemon_pidfd >= 0) {
		close(c->daemon_pidfd); /* not needed on this path */
		c->daemon_pidfd = -1;
	}
	return 0;
}

/* A connected socket to sa, or -errno with the reason in *err. */
static int sock_open(const struct sockaddr_un *sa, socklen_t salen,
		     struct td_error *err)
{
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (s < 0)
		return td__fail(err, -errno, "socket: %s", strerror(errno));
	if (connect(s, (const struct sockaddr *)sa, salen) < 0) {
		int rc = -errno;

		close(s);
		return td__fail(err, rc, "connect %s: %s", sa->sun_path,
				strerror(-rc));
	}
	return s;
}

/*
 * The old buffer and lease ids meant the old daemon's objects: forget the
 * cached ones (idle: dropped; in use: never matched again).
 */
static void forget_ids(struct td_client *c)
{
	td__next_loan_reset(c);
	/* nor did it stage anything: its alloc ids are not the old one's */
	td__stage_forget(c);
	td__maps_drop(c, false);
	td__loans_drop(c, false);
	for (struct td__map *m = c->maps; m; m = m->next)
		m->buffer_id = TD__BUF_STALE;
	for (struct td__loanbuf *b = c->loans; b; b = b->next)
		b->buffer_id = TD__BUF_STALE;
}

/*
 * TD_CLIENT_RECONNECT: a new connection to the same path replaces the
 * broken one (lock held). 0, or -errno with the client still broken.
 * The caller's request may already sit encoded in c->sbuf: HELLO and the
 * WATCHes go through it too, so it is put back afterwards.
 */
static int reconnect(struct td_client *c, struct td_error *err)
{
	uint8_t *saved = malloc(TD_WIRE_MAX_MSG);
	int rc;

	if (!saved)
		return td__fail(err, -ENOMEM, "out of memory");
	memcpy(saved, c->sbuf, TD_WIRE_MAX_MSG);
	rc = reconnect_now(c, err);
	memcpy(c->sbuf, saved, TD_WIRE_MAX_MSG);
	free(saved);
	return rc;
}

static int reconnect_now(struct td_client *c, struct td_error *err)
{
	struct sockaddr_un sa;
	socklen_t salen;
	struct epoll_event ev = {.events = EPOLLIN};
	unsigned restored = 0;
	int rc, s, old = c->sock;

	rc = socket_path(c->path, &sa, &salen, err);
	if (rc < 0)
		return rc;
	s = sock_open(&sa, salen, err);
	if (s < 0)
		return s;
	/* what waited on the old connection is lost with it */
	td__loop_fail(c, -ECONNRESET);
	forget_ids(c);
	c->epoch++;
	if (c->daemon_pidfd >= 0)
		close(c->daemon_pidfd);
	c->daemon_pidfd = -1;
	if (c->epfd >= 0) {
		epoll_ctl(c->epfd, EPOLL_CTL_DEL, old, NULL);
		ev.data.fd = s;
		epoll_ctl(c->epfd, EPOLL_CTL_ADD, s, &ev);
	}
	close(old);
	c->sock = s;
	c->dead = 0;
	memset(&c->hello, 0, sizeof(c->hello));
	rc = hello(c, c->pref, err);
	if (rc < 0) {
		c->dead = rc;
		return rc;
	}
	/* connected: the loop's retry timer (loop.c) has nothing to do */
	if (c->rfd >= 0)
		timerfd_settime(c->rfd, 0, &(struct itimerspec){0}, NULL);
	c->rtries = 0;
	for (struct td__watchrec *w = c->watches; w; w = w->next) {
		w->daemon_id = 0; /* no events until watched again */
		if (td__watch_send(c, w->name, w->flags, &w->daemon_id,
				   NULL) == 0)
			restored++;
	}
	event_queue(c, &(struct td_event){.type = TD_EVENT_TYPE_RECONNECTED,
					  .version = restored});
	return c->dead ? c->dead : 0;
}

int td_client_connect(const char *path, struct td_client **out,
		      struct td_error *err)
{
	const char *e = getenv("TENSORD_RECONNECT");

	return td_client_connect_ex(path,
				    e && !strcmp(e, "1") ? TD_CLIENT_RECONNECT
							 : 0,
				    out, err);
}

int td_client_connect_ex(const char *path, uint32_t flags,
			 struct td_client **out, struct td_error *err)
{
	struct sockaddr_un sa;
	struct td_client *c;
	socklen_t salen = 0;
	uint32_t pref = TD_IMPORT_AUTO;
	const char *gf;
	int rc;

	if (!out)
		return td__fail(err, -EINVAL, "no out pointer");
	*out = NULL;
	if (flags & ~TD_CLIENT_RECONNECT)
		return td__fail(err, -EINVAL, "unknown flags %#x", flags);
	rc = import_pref(&pref, err);
	if (rc < 0)
		return rc;
	rc = socket_path(path, &sa, &salen, err);
	if (rc < 0)
		return rc;
	c = calloc(1, sizeof(*c));
	if (!c)
		return td__fail(err, -ENOMEM, "out of memory");
	c->refs = 1;
	c->sock = -1;
	c->daemon_pidfd = -1;
	c->epfd = -1;
	c->efd = -1;
	c->rfd = -1;
	td__pace_init_env(&c->pace_get);
	pthread_mutex_init(&c->lock, NULL);
	c->rbuf = malloc(TD_WIRE_MAX_MSG);
	c->sbuf = malloc(TD_WIRE_MAX_MSG);
	if (!c->rbuf || !c->sbuf) {
		rc = td__fail(err, -ENOMEM, "out of memory");
		goto fail;
	}
	pthread_once(&fork_once, fork_watch);
	c->pid = getpid();
	c->fork_gen = td__fork_gen;
	c->reconnect = flags & TD_CLIENT_RECONNECT;
	c->gf_off = (gf = getenv("TENSORD_GET_FOLLOW")) && !strcmp(gf, "0");
	c->rows_off = (gf = getenv("TENSORD_WAKE_ROWS")) && !strcmp(gf, "0");
	c->stage_off = (gf = getenv("TENSORD_STAGE")) && !strcmp(gf, "0");
	td__produce_env(c);
	c->pref = pref;
	memcpy(c->path, sa.sun_path, sizeof(c->path));
	rc = sock_open(&sa, salen, err);
	if (rc < 0)
		goto fail;
	c->sock = rc;
	rc = hello(c, pref, err);
	if (rc < 0)
		goto fail;
	rc = td__loop_open(c);
	if (rc < 0) {
		rc = td__fail(err, rc, "epoll/eventfd: %s", strerror(-rc));
		goto fail;
	}
	*out = c;
	return 0;
fail:
	client_free(c);
	return rc;
}
