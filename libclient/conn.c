/* SPDX-License-Identifier: MIT */
/*
 * libtensord's connection core, below every other file of libclient/:
 * framing with SCM_RIGHTS, request/reply pairing, the watch-event queue,
 * errors, references. What it must hand up (a client's last reference
 * gone, a broken connection, a reply nobody here waits for, events ready,
 * a reconnect) goes through the client's ops (client.h), which connect.c
 * sets at connect: no call of this file leads back up.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "blob.h"
#include "client.h"
#include "os.h"
#include "scm.h"
#include "wire-status.h"

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
	/* numpy's names too: what Python, Zarr and HDF5 users type */
	static const char *const numpy[TD_DTYPE_COUNT_] = {
		[TD_DTYPE_U8] = "uint8",     [TD_DTYPE_I8] = "int8",
		[TD_DTYPE_U16] = "uint16",   [TD_DTYPE_I16] = "int16",
		[TD_DTYPE_U32] = "uint32",   [TD_DTYPE_I32] = "int32",
		[TD_DTYPE_U64] = "uint64",   [TD_DTYPE_I64] = "int64",
		[TD_DTYPE_F16] = "float16",  [TD_DTYPE_F32] = "float32",
		[TD_DTYPE_F64] = "float64",
	};
	int d = name ? td_dtype_from_name(name) : -1;

	for (int i = 0; d < 0 && name && i < TD_DTYPE_COUNT_; i++)
		if (!strcmp(name, numpy[i]))
			d = i;
	return d < 0 ? -EINVAL : d;
}

/* ---- lifetime ---- */

void td__client_ref(struct td_client *c)
{
	c->refs++;
}

void td__client_unref(struct td_client *c)
{
	unsigned n;

	td__client_lock(c);
	n = --c->refs;
	pthread_mutex_unlock(&c->lock);
	if (n == 0)
		c->ops->free(c);
}

int td_client_info(struct td_client *c, struct td_client_info *info)
{
	if (!c || !info)
		return -EINVAL;
	td__client_lock(c);
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
	td__client_lock(c);
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
	/* nor the PUBLISH sent without waiting, nor the GETs waiting for a
	 * reply on this connection */
	c->ops->broken(c, code);
	return code;
}

static int send_wait(struct td_client *c, size_t len, const int *fds,
		     unsigned nfds);

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
	if (c->intr_fn && (c->intr_flags & TD_INTR_SEND))
		n = send_wait(c, TD_WIRE_HDR_LEN + body_len, fds, nfds);
	else
		n = td__scm_send(c->sock, c->sbuf, TD_WIRE_HDR_LEN + body_len,
				 fds, nfds, 0);
	if (n == -EINTR) { /* send_wait: fn said the send ends */
		conn_broken(c, -ECONNABORTED);
		return -EINTR;
	}
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
void td__event_queue(struct td_client *c, const struct td_event *ev)
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
	c->ops->ready(c);
}

/* Lock held: e (queued) out of the queue. */
static void event_unlink(struct td_client *c, struct td__event *e)
{
	struct td__event **pp = &c->ev_head, *prev = NULL;

	while (*pp && *pp != e) {
		prev = *pp;
		pp = &prev->next;
	}
	if (!*pp)
		return;
	*pp = e->next;
	if (c->ev_tail == e)
		c->ev_tail = prev;
}

/*
 * A reconnect, with the watches it made again: told outside the bound
 * (no watch event; a full queue must not drop it), and one at most
 * waits, at the place of the latest reconnect, so that reconnects
 * nobody takes cannot grow the queue. Without memory it is counted
 * with the dropped events.
 */
void td__event_reconnected(struct td_client *c, uint64_t restored)
{
	struct td__event *e = c->ev_recon;

	overflow_note(c);
	if (e) {
		event_unlink(c, e);
		event_link(c, e);
	} else if ((e = calloc(1, sizeof(*e)))) {
		e->ev.type = TD_EVENT_TYPE_RECONNECTED;
		event_link(c, e);
		c->ev_recon = e;
	} else {
		c->ev_lost++;
		overflow_note(c);
	}
	if (e)
		e->ev.version = restored;
	c->ops->ready(c);
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
		c->ev_count -= e->ev.type != TD_EVENT_TYPE_OVERFLOWED &&
			       e != c->ev_recon;
		if (e == c->ev_recon)
			c->ev_recon = NULL;
		*ev = e->ev;
		free(e);
	}
	c->ops->ready(c);
	return 1;
}

int td_client_set_event_limit(struct td_client *c, unsigned max)
{
	if (!c)
		return -EINVAL;
	td__client_lock(c);
	c->ev_limit = max;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

int td_client_set_interrupt_ex(struct td_client *c, int (*fn)(void *ud),
			       void *ud, uint32_t flags)
{
	if (!c || (flags & ~(TD_INTR_SEND | TD_INTR_PARKED)))
		return -EINVAL;
	td__client_lock(c);
	c->intr_fn = fn;
	c->intr_ud = ud;
	c->intr_flags = fn ? flags : 0;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

int td_client_set_interrupt(struct td_client *c, int (*fn)(void *ud),
			    void *ud)
{
	return td_client_set_interrupt_ex(c, fn, ud, 0);
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
	td__event_queue(c, &ev);
}

/* Handle a message that is not the reply being waited for. */
void td__msg_aside(struct td_client *c, struct td__msg *m)
{
	if ((m->hdr.flags & TD_WIRE_F_REPLY) && c->ops->reply(c, m))
		return;
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
/* held while an inherited handle's lock and turns are made anew (made
 * anew itself in each child: a thread of the parent may have held it) */
static pthread_mutex_t relock_mu = PTHREAD_MUTEX_INITIALIZER;

/* the thread that called fork(), the child's only one at first */
static pthread_t fork_thread;

static void on_fork_child(void)
{
	td__fork_gen++;
	fork_thread = pthread_self();
	pthread_mutex_init(&relock_mu, NULL);
}

/* In a child of fork(): a turn of a thread that is not here is nobody's;
 * the thread that forked (inside a callback) keeps its own, to give back. */
static void turn_forked(struct td__turn *t)
{
	if (t->depth && !pthread_equal(t->by, fork_thread))
		*t = (struct td__turn){0};
}

void td__client_lock(struct td_client *c)
{
	if (td__client_foreign(c)) {
		pthread_mutex_lock(&relock_mu);
		if (c->lock_gen != td__fork_gen) {
			pthread_mutex_init(&c->lock, NULL);
			pthread_cond_init(&c->sub_walked, NULL);
			/* so too the turns (loop.c's deliveries): a thread of
			 * the parent in a callback held one for good here */
			turn_forked(&c->ev_turn);
			turn_forked(&c->get_turn);
			turn_forked(&c->sub_turn);
			c->lock_gen = td__fork_gen;
		}
		pthread_mutex_unlock(&relock_mu);
	}
	pthread_mutex_lock(&c->lock);
}

static void fork_watch_once(void)
{
	pthread_atfork(NULL, NULL, on_fork_child);
}

void td__fork_watch(void)
{
	pthread_once(&fork_once, fork_watch_once);
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
		return c->ops->reconnect(c, err);
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
	if (rc == -EINTR) /* send_wait: fn said the send ends */
		return td__fail(err, rc, "a signal interrupted the send of the "
				"%s request (none of it sent): this connection "
				"is abandoned (connect again)",
				td_wire_op_name(op));
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

/*
 * A signal asks td_client_set_interrupt()'s fn only once the reply has
 * been waited for this long: a daemon that answers in time never costs
 * the connection to a signal whose handler carries on (a SIGCHLD, an
 * event loop's wake-up); the fn is asked when it has passed. With
 * TD_INTR_PARKED, a request the daemon may hold (a GET or RING_SUBSCRIBE
 * that parks: c->park_ms) is late only this long past that time: a
 * signal while a running daemon holds it never gives up a reply that is
 * still to come in time (a caller that slices its waits, Python's).
 */
#define INTR_GRACE_NS (100 * 1000000LL)

/*
 * poll(2)'s int of milliseconds for a wait of ns, rounded up and at most
 * INT_MAX (24.8 days; a longer wait is asked again when that passed),
 * never negative: a GET parked for INT_MAX ms has a grace of that and
 * 100 ms (reply_wait), a connect timeout may be 49 days (hello_ms), and
 * a plain conversion made those negative, a poll() for ever.
 */
static int poll_ms(int64_t ns)
{
	int64_t ms = ns / 1000000 + (ns % 1000000 > 0);

	return ms <= 0 ? 0 : ms >= INT_MAX ? INT_MAX : (int)ms;
}

/*
 * Until the socket is readable (0), by passed (-ETIMEDOUT) or, with
 * td_client_set_interrupt(), a signal that its fn says ends the call:
 * the request stays unanswered, so the connection is abandoned, shut
 * down for the daemon to end what it holds (-EINTR). t0: when the wait
 * for the reply began (the request sent; the same across the messages
 * read aside meanwhile, which make no reply less late).
 */
static int reply_wait(struct td_client *c, uint16_t op, int64_t by,
		      int64_t t0, struct td_error *err)
{
	/* (the HELLO of a reconnect inside that call is not held) */
	bool parks = (c->intr_flags & TD_INTR_PARKED) &&
		     (op == TD_OP_GET || op == TD_OP_RING_SUBSCRIBE ||
		      op == TD_OP_GET_MANY);
	int64_t late = t0 + INTR_GRACE_NS +
		       (parks ? (int64_t)c->park_ms * 1000000 : 0);
	bool signalled = false;

	for (;;) {
		struct pollfd p = {.fd = c->sock, .events = POLLIN};
		int64_t now = td__now_ns(), left = by - now;
		int64_t grace = late - now;
		int ms = by < 0 ? -1 : poll_ms(left), n;

		if (by >= 0 && left <= 0)
			return td__fail(err, -ETIMEDOUT, "no %s reply in time",
					td_wire_op_name(op));
		if (signalled && grace <= 0) {
			signalled = false;
			if (c->intr_fn(c->intr_ud)) {
				shutdown(c->sock, SHUT_RDWR);
				conn_broken(c, -ECONNABORTED);
				return td__fail(err, -EINTR, "a signal "
						"interrupted the wait for the "
						"%s reply: this connection is "
						"abandoned (connect again)",
						td_wire_op_name(op));
			}
		}
		if (signalled && (ms < 0 || ms > poll_ms(grace)))
			ms = poll_ms(grace);
		n = poll(&p, 1, ms);
		if (n > 0 || (n < 0 && errno != EINTR))
			return 0; /* the receive says what is there */
		if (n < 0 && c->intr_fn)
			signalled = true;
	}
}

/*
 * TD_INTR_SEND: c->sbuf[0, len) sent as msg_send() would, but a send the
 * socket's full buffer holds up (a daemon stopped, or one that reads
 * slower than a stream of releases comes) waits in poll() for room, not
 * in sendmsg(), whose wait a handler with SA_RESTART restarts unseen: a
 * signal asks fn as in reply_wait (past INTR_GRACE_NS). A unix
 * SOCK_SEQPACKET datagram is queued whole or not at all (the kernel
 * takes the room for all of it before it queues any), so a send that
 * gives up sent none of it; the connection is abandoned all the same
 * (its callers, a release's, take a failed send for a lost connection):
 * shut down, -EINTR. The bytes sent, or -errno.
 */
static int send_wait(struct td_client *c, size_t len, const int *fds,
		     unsigned nfds)
{
	int64_t t0 = td__now_ns();
	bool signalled = false;

	for (;;) {
		struct pollfd p = {.fd = c->sock, .events = POLLOUT};
		ssize_t n = td__scm_send(c->sock, c->sbuf, len, fds, nfds,
					 MSG_DONTWAIT);
		int64_t grace = t0 + INTR_GRACE_NS - td__now_ns();

		if (n != -EAGAIN)
			return n < 0 ? (int)n : 0;
		if (signalled && grace <= 0) {
			signalled = false;
			if (c->intr_fn(c->intr_ud)) {
				shutdown(c->sock, SHUT_RDWR);
				return -EINTR;
			}
		}
		/* writable again once the daemon read a quarter of the
		 * buffer back: as soon as a blocking send would wake */
		n = poll(&p, 1, signalled ? poll_ms(grace) : -1);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n < 0)
			signalled = true;
	}
}

/* by: the CLOCK_MONOTONIC ns the reply is waited for until, -1 ever. */
static int reply_until(struct td_client *c, uint16_t op, uint64_t id,
		       struct td_pace *pace, int64_t by, struct td__msg *rep,
		       struct td_error *err)
{
	struct td_pace_plan plan;
	int64_t t0 = td__now_ns();
	int rc;

	if (pace)
		reply_poll(c, pace, &plan);
	for (;;) {
		if (by >= 0 || c->intr_fn) {
			rc = reply_wait(c, op, by, t0, err);
			if (rc < 0)
				return rc;
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
	td__client_lock(c);
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

int td__wake_attach(struct td_client *c, uint16_t op, uint64_t id,
		    uint32_t epoch, uint32_t feature, int fd)
{
	int rc;

	if (td__client_foreign(c))
		return -ECHILD;
	td__client_lock(c);
	rc = td__has(c, feature) ? 0 : -EOPNOTSUPP;
	if (rc == 0 && epoch != c->epoch)
		rc = -ECONNRESET; /* made on a connection that is gone */
	if (rc == 0)
		rc = td__call_id(c, op, id, &fd, 1);
	pthread_mutex_unlock(&c->lock);
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
	rc = td__wake_attach(c, op, id, epoch, feature, fd);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}
