/* SPDX-License-Identifier: MIT */
/*
 * libtensord's client: connect (socket path, HELLO and import
 * negotiation), reconnect, close and the client's end, above every other
 * file of libclient/; the connection core it stands on is conn.c.
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
#include <sys/stat.h>
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
	pthread_cond_destroy(&c->sub_walked);
	free(c->rbuf);
	free(c->sbuf);
	free(c);
}


/* ---- what conn.c hands up (struct td__client_ops) ---- */

static int reconnect(struct td_client *c, struct td_error *err);
static int reconnect_step(struct td_client *c, struct td_error *err);

static void on_broken(struct td_client *c, int code)
{
	td__pub_forget(c, code);
	td__loop_fail(c, code);
	td__follow_conn_gone(c);
	/* the WATCHes of a loop's reconnect will get no reply */
	for (struct td__watchrec *w = c->watches; w; w = w->next)
		w->pending = 0;
	c->rw_left = 0;
}

/* A reply nobody waits for in conn.c: an asynchronous GET's (loop.c),
 * or the one PUBLISH sent without waiting (produce.c). */
static bool on_reply(struct td_client *c, struct td__msg *m)
{
	if (td__loop_reply(c, m) || td__rewatch_reply(c, m))
		return true;
	if (c->pub_id && m->hdr.request_id == c->pub_id) {
		td__pub_answered(c, m);
		return true;
	}
	return false;
}

static const struct td__client_ops ops = {
	.free = client_free,
	.reconnect = reconnect,
	.reconnect_step = reconnect_step,
	.broken = on_broken,
	.reply = on_reply,
	.ready = td__loop_ready,
};

void td_client_close(struct td_client *c)
{
	struct td__event *e;

	if (!c)
		return;
	/* asynchronous GETs still waiting are told, then forgotten */
	td__loop_cancel(c);
	td__gf_close_all(c);
	td__client_lock(c);
	atomic_store(&c->closed, true);
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
	c->ev_tail = c->ev_recon = NULL;
	td__loop_close(c);
	td__pub_forget(c, -ENOTCONN);
	td__maps_drop(c, false);
	td__loans_drop(c, false);
	pthread_mutex_unlock(&c->lock);
	td__client_unref(c);
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

/*
 * How long a connect may wait for the daemon: $TENSORD_CONNECT_TIMEOUT_MS,
 * 0 for no limit. A socket that accepts and never answers HELLO (another
 * program's, a tensord that is stopped or wedged) would otherwise hold
 * every client for ever. 20 s: a daemon serving 512 busy threads on two
 * cores answered a new client in up to 6.5 s (docs/reliability.md); a
 * deadline it could miss would fail healthy clients under load.
 */
#define TD__CONNECT_TIMEOUT_MS 20000u
#define TD__CONNECT_TIMEOUT_MAX 3600000u

static int connect_timeout(uint32_t *ms, struct td_error *err)
{
	const char *e = getenv("TENSORD_CONNECT_TIMEOUT_MS");
	unsigned long long v;
	char *end;

	*ms = TD__CONNECT_TIMEOUT_MS;
	if (!e || !*e)
		return 0;
	errno = 0;
	v = strtoull(e, &end, 10);
	if (*e < '0' || *e > '9' || *end || errno ||
	    v > TD__CONNECT_TIMEOUT_MAX)
		return td__fail(err, -EINVAL,
				"TENSORD_CONNECT_TIMEOUT_MS=%s: want 0 (no "
				"limit) to %u milliseconds",
				e, TD__CONNECT_TIMEOUT_MAX);
	*ms = (uint32_t)v;
	return 0;
}

/* The CLOCK_MONOTONIC ns a connect waits until, -1 for ever. */
static int64_t connect_by(const struct td_client *c)
{
	return c->hello_ms ? td__now_ns() + (int64_t)c->hello_ms * 1000000
			   : -1;
}

/* HELLO's call, bounded by the connect deadline. */
static int hello_call(struct td_client *c, size_t len, int64_t by,
		      struct td__msg *m, struct td_error *err)
{
	int rc = td__call_by(c, TD_OP_HELLO, len, by, m, err);

	if (rc == -ETIMEDOUT)
		return td__fail(err, rc,
				"%s did not answer HELLO within %u ms: is it "
				"a tensord? ($TENSORD_CONNECT_TIMEOUT_MS sets "
				"the wait)",
				c->path, c->hello_ms);
	return rc;
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
	 TD_WIRE_FEAT_SUB_WAIT | TD_WIRE_FEAT_FENCE_OWN |                     \
	 TD_WIRE_FEAT_STAGE_SLOT | TD_WIRE_FEAT_STAGE_WORD |                  \
	 TD_WIRE_FEAT_STATUS_RESERVE | TD_WIRE_FEAT_MANY | TD_WIRE_FEAT_PUB_IF | \
	 TD_WIRE_FEAT_MANY_WAIT | TD_WIRE_FEAT_STATUS_PINNED | \
	 TD_WIRE_FEAT_FOLLOW_END)

/* HELLO's body into c->sbuf: its length, or -errno. probe_fd: the
 * socket's number here, which the daemon pulls to probe pidfd_getfd. */
static int64_t hello_encode(struct td_client *c, uint32_t pref,
			    uint32_t features, int probe_fd)
{
	struct td_wire_hello_req req = {
		.import_pref = pref,
		.probe_fd = probe_fd,
		.client_name = {program_invocation_short_name,
				(uint16_t)strnlen(program_invocation_short_name,
						  64)},
		.features = features,
	};

	return td_wire_hello_req_encode(&req, c->sbuf + TD_WIRE_HDR_LEN,
					TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
}

/* The HELLO reply m (status 0) taken into c: the import paths. */
static int hello_take(struct td_client *c, uint32_t pref, struct td__msg *m,
		      struct td_error *err)
{
	struct td_wire_hello_rep *rep = &c->hello;
	struct td_err e = {0};
	int rc, probe;

	rc = td_wire_hello_rep_decode(m->body, m->body_len, rep, &e);
	if (rc < 0 || m->nfds != (rep->out_pidfd ? 1u : 0u)) {
		td__msg_close_fds(m);
		return td__fail(err, -EPROTO, "bad HELLO reply: %s",
				rc < 0 && e.reason ? e.reason
						   : "fd count");
	}
	td__str_copy(c->ident, sizeof(c->ident), rep->ident);
	rep->ident = (struct td_wire_str){NULL, 0}; /* borrowed c->rbuf */
	if (m->nfds)
		c->daemon_pidfd = m->fds[0];
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

static int hello(struct td_client *c, uint32_t pref, struct td_error *err)
{
	struct td__msg m;
	int64_t len, by = connect_by(c);
	int rc;

	len = hello_encode(c, pref, TD__CLIENT_FEATURES, c->sock);
	if (len < 0)
		return td__fail(err, (int)len, "encode HELLO");
	rc = hello_call(c, (size_t)len, by, &m, err);
	if (rc == -EBADMSG) {
		/*
		 * A daemon that predates feature bits refuses the word: say
		 * HELLO as before and use none of the optional features.
		 */
		if (err)
			memset(err, 0, sizeof(*err));
		len = hello_encode(c, pref, 0, c->sock);
		rc = hello_call(c, (size_t)len, by, &m, err);
	}
	if (rc < 0)
		return rc;
	return hello_take(c, pref, &m, err);
}

/*
 * What path is when it is no socket ("a regular file", ...), else NULL:
 * connect(2) says ECONNREFUSED for a file or a folder, as for a socket
 * nobody listens on, and "no daemon" sent the user to start one when a
 * log or a folder was named for the socket.
 */
static const char *not_a_socket(const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0 || S_ISSOCK(st.st_mode))
		return NULL;
	return S_ISREG(st.st_mode)   ? "a regular file"
	       : S_ISDIR(st.st_mode) ? "a directory"
	       : S_ISFIFO(st.st_mode) ? "a FIFO"
	                              : "a device or special file";
}

/*
 * A connected socket to sa, or -errno with the reason in *err. A listener
 * whose queue is full (a stopped daemon's) holds connect() itself: ms
 * bounds that wait too (SO_SNDTIMEO, which a unix connect obeys). With a
 * timeout the kernel never restarts an interrupted connect, not even for
 * a handler with SA_RESTART (a SIGCHLD, a profiler's SIGPROF, a Go
 * runtime's SIGURG): it is tried again here, for the time left, as the
 * kernel restarted it when it waited for ever (ms 0 still does; a
 * handler without SA_RESTART is waited through the same way). A signal
 * asks c->intr_fn (td_client_connect_intr, td_client_set_interrupt)
 * whether it ends the wait (-EINTR), as a reply's wait does. A unix
 * connect that was interrupted left the socket unconnected, so it can be
 * tried again.
 */
static int sock_open(struct td_client *c, const struct sockaddr_un *sa,
		     socklen_t salen, struct td_error *err)
{
	uint32_t ms = c->hello_ms;
	int64_t by = ms ? td__now_ns() + (int64_t)ms * 1000000 : -1, left;
	struct timeval tv;
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), rc;

	if (s < 0)
		return td__fail(err, -errno, "socket: %s", strerror(errno));
	for (;;) {
		if (ms) {
			/* what is left, at least 1 us: 0 would be no limit */
			left = (by - td__now_ns() + 999) / 1000;
			if (left < 1)
				left = 1;
			tv = (struct timeval){.tv_sec = left / 1000000,
					      .tv_usec = left % 1000000};
			setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		}
		if (connect(s, (const struct sockaddr *)sa, salen) == 0)
			break;
		rc = -errno;
		/* a signal: td_client_connect_intr()'s fn may end the wait
		 * (Python's Ctrl-C), else it goes on while time is left */
		if (rc == -EINTR && c->intr_fn && c->intr_fn(c->intr_ud)) {
			close(s);
			return td__fail(err, -EINTR, "a signal interrupted "
					"the connect to %s", sa->sun_path);
		}
		if (rc == -EINTR && (!ms || td__now_ns() < by))
			continue;
		close(s);
		if ((rc == -EAGAIN || rc == -EINTR) && ms)
			return td__fail(err, -ETIMEDOUT,
					"connect %s: nobody took the "
					"connection within %u ms: is it a "
					"tensord, and running? "
					"($TENSORD_CONNECT_TIMEOUT_MS sets "
					"the wait)",
					sa->sun_path, ms);
		if (rc == -ECONNREFUSED && not_a_socket(sa->sun_path))
			return td__fail(err, rc, "connect %s: %s (%s is %s, "
					"not a socket)", sa->sun_path,
					strerror(-rc), sa->sun_path,
					not_a_socket(sa->sun_path));
		return td__fail(err, rc, "connect %s: %s", sa->sun_path,
				strerror(-rc));
	}
	/* later sends wait for the daemon as long as it takes: back-pressure
	 * is no failure */
	tv = (struct timeval){0};
	if (ms)
		setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
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
 * A new connection s to the same path replaces the broken one (lock
 * held): what waited on the old one is lost with it, its ids are
 * forgotten, s takes its place in the loop's set. HELLO comes next.
 */
static void reconnect_swap(struct td_client *c, int s)
{
	int old = c->sock;

	td__loop_fail(c, -ECONNRESET);
	forget_ids(c);
	c->epoch++;
	if (c->daemon_pidfd >= 0)
		close(c->daemon_pidfd);
	c->daemon_pidfd = -1;
	td__loop_watch(c, old, false);
	td__loop_watch(c, s, true);
	close(old);
	c->sock = s;
	c->dead = 0;
	memset(&c->hello, 0, sizeof(c->hello));
}

/*
 * HELLO answered on the new connection (lock held): watch again, tell
 * the application, send the GETs that waited. wait: the WATCHes are
 * round trips, and the application is told now (a blocking call's
 * reconnect); else they are sent without waiting and it is told once
 * their replies are in (the loop's, catalog.c). 0, or the -errno that
 * broke the new connection meanwhile.
 */
static int reconnect_done(struct td_client *c, bool wait)
{
	unsigned restored = 0;

	/* connected: the loop's retry timer (loop.c) has nothing to do */
	td__loop_timer(c, -1);
	c->rtries = 0;
	if (!wait) {
		td__rewatch_send(c);
		td__loop_send_queued(c);
		return c->dead ? c->dead : 0;
	}
	c->rw_left = 0;
	for (struct td__watchrec *w = c->watches; w; w = w->next) {
		w->daemon_id = 0; /* no events until watched again */
		w->pending = 0;
		/* a new connection that broke meanwhile watches nothing:
		 * the next reconnect makes them all again */
		if (!c->dead && td__watch_send(c, w->name, w->flags,
					       &w->daemon_id, NULL) == 0)
			restored++;
	}
	td__event_reconnected(c, restored);
	td__loop_send_queued(c);
	return c->dead ? c->dead : 0;
}

/* The asynchronous try under way (reconnect_step) ends: its socket
 * goes, nothing else. */
static void try_end(struct td_client *c)
{
	if (c->rsock >= 0) {
		td__loop_watch(c, c->rsock, false);
		close(c->rsock);
	}
	c->rsock = -1;
	c->rstate = TD__RC_IDLE;
}

/*
 * TD_CLIENT_RECONNECT from a blocking call: connect and say HELLO here
 * and now (lock held). 0, or -errno with the client still broken. An
 * asynchronous try under way (td_client_process) is dropped for it; the
 * GETs it queued go with this one. The caller's request may already sit
 * encoded in c->sbuf: HELLO and the WATCHes go through it too, so it is
 * put back afterwards.
 */
static int reconnect_now(struct td_client *c, struct td_error *err);

static int reconnect(struct td_client *c, struct td_error *err)
{
	uint8_t *saved = malloc(TD_WIRE_MAX_MSG);
	struct td_error e = {0};
	int rc;

	if (!saved)
		return td__fail(err, -ENOMEM, "out of memory");
	if (c->rstate != TD__RC_IDLE) {
		try_end(c);
		/* the old socket wakes the loop again (its hang-up) */
		td__loop_watch(c, c->sock, true);
	}
	memcpy(saved, c->sbuf, TD_WIRE_MAX_MSG);
	rc = reconnect_now(c, &e);
	memcpy(c->sbuf, saved, TD_WIRE_MAX_MSG);
	free(saved);
	if (rc < 0)
		td__loop_fail_queued(c, rc, &e);
	if (err && rc < 0)
		*err = e;
	return rc;
}

static int reconnect_now(struct td_client *c, struct td_error *err)
{
	struct sockaddr_un sa;
	socklen_t salen;
	int rc, s;

	rc = socket_path(c->path, &sa, &salen, err);
	if (rc < 0)
		return rc;
	s = sock_open(c, &sa, salen, err);
	if (s < 0)
		return s;
	reconnect_swap(c, s);
	rc = hello(c, c->pref, err);
	if (rc < 0) {
		c->dead = rc;
		return rc;
	}
	return reconnect_done(c, true);
}

/* ---- the asynchronous reconnect (td_client_process) ---- */

/* connect() again on a full listen queue: first after, at most after */
#define RETRY_FIRST_MS 5
#define RETRY_MAX_MS 100

/* The try failed with rc (reason in *err, which may not be NULL). */
static int try_fail(struct td_client *c, int rc, struct td_error *err)
{
	try_end(c);
	td__loop_fail_queued(c, rc, err);
	return rc;
}

/* HELLO (with the optional features, or without) on the new socket, not
 * waiting; its reply wakes the loop through rsock, the deadline through
 * the timer. */
static int try_hello(struct td_client *c, uint32_t features,
		     struct td_error *err)
{
	struct td_wire_hdr h = {.magic = TD_WIRE_MAGIC,
				.version = TD_WIRE_VERSION,
				.opcode = TD_OP_HELLO};
	int64_t len = hello_encode(c, c->pref, features, c->rsock);
	ssize_t n;

	if (len < 0)
		return try_fail(c, td__fail(err, (int)len, "encode HELLO"),
				err);
	h.request_id = c->rhello_id = ++c->next_id;
	h.body_len = (uint32_t)len;
	td_wire_hdr_encode(&h, c->sbuf);
	/* the first datagram of a new connection: room for it is there */
	n = td__scm_send(c->rsock, c->sbuf, TD_WIRE_HDR_LEN + (size_t)len,
			 NULL, 0, MSG_DONTWAIT);
	if (n < 0)
		return try_fail(c, td__fail(err, (int)n, "send HELLO to %s: %s",
					    c->path, strerror((int)-n)),
				err);
	c->rstate = features ? TD__RC_HELLO : TD__RC_HELLO_OLD;
	td__loop_watch(c, c->rsock, true);
	/* nothing else would end a wait for a peer that never answers */
	if (td__loop_timer(c, c->rby) < 0)
		return try_fail(c, td__fail(err, -ENOMEM, "no timerfd for "
					    "the reconnect's deadline"),
				err);
	return -EINPROGRESS;
}

/*
 * connect() without waiting. A unix socket never connects in the
 * background: a full listen queue refuses at once (EAGAIN), so it is
 * tried again on the timer (RETRY_FIRST_MS, doubling up to RETRY_MAX_MS)
 * until the deadline.
 */
static int try_connect(struct td_client *c, struct td_error *err)
{
	struct sockaddr_un sa;
	socklen_t salen;
	int64_t at;
	int rc = socket_path(c->path, &sa, &salen, err);

	if (rc < 0)
		return try_fail(c, rc, err);
	if (connect(c->rsock, (const struct sockaddr *)&sa, salen) == 0 ||
	    errno == EISCONN)
		return try_hello(c, TD__CLIENT_FEATURES, err);
	rc = -errno;
	if (rc != -EAGAIN && rc != -EINPROGRESS && rc != -EALREADY &&
	    rc != -EINTR)
		return try_fail(c, td__fail(err, rc, "connect %s: %s",
					    sa.sun_path, strerror(-rc)),
				err);
	at = td__now_ns() + (int64_t)c->rretry_ms * 1000000;
	if (c->rby >= 0 && at > c->rby)
		at = c->rby;
	c->rretry_ms = c->rretry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS
						       : c->rretry_ms * 2;
	if (td__loop_timer(c, at) < 0)
		return try_fail(c, td__fail(err, -ENOMEM, "no timerfd for "
					    "the reconnect"),
				err);
	return -EINPROGRESS;
}

/* A new try: a non-blocking socket, its deadline, the first connect(). */
static int try_start(struct td_client *c, struct td_error *err)
{
	c->rsock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC |
					   SOCK_NONBLOCK,
			  0);
	if (c->rsock < 0)
		return try_fail(c, td__fail(err, -errno, "socket: %s",
					    strerror(errno)),
				err);
	c->rstate = TD__RC_CONNECTING;
	c->rby = connect_by(c);
	c->rretry_ms = RETRY_FIRST_MS;
	/* the broken socket's hang-up would wake the loop at once, for ever:
	 * the try's socket and timer wake it now */
	td__loop_watch(c, c->sock, false);
	return try_connect(c, err);
}

/* One datagram of the try's socket into *m: 0, -EAGAIN, or -errno. */
static int try_recv(struct td_client *c, struct td__msg *m)
{
	struct td__scm_rx rx = {.fds = m->fds, .cap = TD_WIRE_MAX_FDS};
	ssize_t n = td__scm_recv(c->rsock, c->rbuf, TD_WIRE_MAX_MSG,
				 MSG_DONTWAIT, &rx);

	/* a daemon that refused at accept and closed with our HELLO unread:
	 * the reset comes before the datagram it left */
	if (n == -ECONNRESET)
		n = td__scm_recv(c->rsock, c->rbuf, TD_WIRE_MAX_MSG,
				 MSG_DONTWAIT, &rx);
	m->nfds = n > 0 ? rx.nfds : 0;
	if (n == -EAGAIN)
		return -EAGAIN;
	if (n <= 0)
		return n < 0 && n != -EAGAIN ? (int)n : -ECONNRESET;
	if (rx.dropped || (rx.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) ||
	    td_wire_hdr_decode(c->rbuf, (size_t)n, &m->hdr, NULL) < 0 ||
	    m->hdr.fd_count != m->nfds) {
		td__msg_close_fds(m);
		return -EPROTO;
	}
	m->body = c->rbuf + TD_WIRE_HDR_LEN;
	m->body_len = m->hdr.body_len;
	return 0;
}

/* HELLO answered (status 0): the new connection replaces the old one. */
static int try_commit(struct td_client *c, struct td__msg *m,
		      struct td_error *err)
{
	int s = c->rsock, rc, fl = fcntl(s, F_GETFL);

	c->rsock = -1;
	c->rstate = TD__RC_IDLE;
	/* a blocking socket from now on, as every connection's (the calls
	 * that wait for their reply; td_client_process reads DONTWAIT) */
	if (fl < 0 || fcntl(s, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		rc = td__fail(err, -errno, "fcntl: %s", strerror(errno));
		close(s);
		td__loop_fail_queued(c, rc, err);
		return rc;
	}
	reconnect_swap(c, s);
	rc = hello_take(c, c->pref, m, err);
	if (rc < 0) {
		c->dead = rc;
		td__loop_fail_queued(c, rc, err);
		return rc;
	}
	return reconnect_done(c, false);
}

/* What the try's socket holds: the HELLO reply, or nothing yet. */
static int try_read(struct td_client *c, struct td_error *err)
{
	struct td__msg m;
	int rc, st;

	for (;;) {
		rc = try_recv(c, &m);
		if (rc == -EAGAIN)
			return -EINPROGRESS;
		if (rc < 0)
			return try_fail(c, td__fail(err, rc, "%s: HELLO: %s",
						    c->path, strerror(-rc)),
					err);
		st = m.hdr.status;
		/* a reply to the HELLO, or the refusal sent at accept */
		if (!(m.hdr.flags & TD_WIRE_F_REPLY) ||
		    (m.hdr.request_id != c->rhello_id &&
		     !(m.hdr.request_id == 0 && st < 0))) {
			td__msg_close_fds(&m);
			continue;
		}
		if (st < 0)
			td__msg_close_fds(&m);
		/* a daemon that predates feature bits: HELLO as before */
		if (st == -EBADMSG && c->rstate == TD__RC_HELLO)
			return try_hello(c, 0, err);
		if (st < 0)
			return try_fail(c, td__reply_error(&m, st, err), err);
		if (st > 0) {
			td__msg_close_fds(&m);
			return try_fail(c, td__fail(err, -EPROTO,
						    "reply status %d > 0", st),
					err);
		}
		return try_commit(c, &m, err);
	}
}

static int reconnect_step(struct td_client *c, struct td_error *err)
{
	struct td_error e = {0};
	int rc;

	if (!err)
		err = &e;
	if (c->rstate == TD__RC_IDLE)
		return try_start(c, err);
	rc = c->rstate == TD__RC_CONNECTING ? try_connect(c, err)
					    : try_read(c, err);
	if (rc != -EINPROGRESS || c->rby < 0 || td__now_ns() < c->rby)
		return rc;
	if (c->rstate == TD__RC_CONNECTING)
		rc = td__fail(err, -ETIMEDOUT,
			      "connect %s: nobody took the connection within "
			      "%u ms: is it a tensord, and running? "
			      "($TENSORD_CONNECT_TIMEOUT_MS sets the wait)",
			      c->path, c->hello_ms);
	else
		rc = td__fail(err, -ETIMEDOUT,
			      "%s did not answer HELLO within %u ms: is it a "
			      "tensord? ($TENSORD_CONNECT_TIMEOUT_MS sets the "
			      "wait)",
			      c->path, c->hello_ms);
	return try_fail(c, rc, err);
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
	return td_client_connect_intr(path, flags, NULL, NULL, out, err);
}

int td_client_connect_intr(const char *path, uint32_t flags,
			   int (*fn)(void *ud), void *ud,
			   struct td_client **out, struct td_error *err)
{
	struct sockaddr_un sa;
	struct td_client *c;
	socklen_t salen = 0;
	uint32_t pref = TD_IMPORT_AUTO, ms;
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
	rc = connect_timeout(&ms, err);
	if (rc < 0)
		return rc;
	rc = socket_path(path, &sa, &salen, err);
	if (rc < 0)
		return rc;
	c = calloc(1, sizeof(*c));
	if (!c)
		return td__fail(err, -ENOMEM, "out of memory");
	c->ops = &ops;
	c->refs = 1;
	c->sock = -1;
	c->daemon_pidfd = -1;
	c->epfd = -1;
	c->efd = -1;
	c->rfd = -1;
	c->rsock = -1;
	c->rby = -1;
	td__pace_init_env(&c->pace_get);
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->sub_walked, NULL);
	c->rbuf = malloc(TD_WIRE_MAX_MSG);
	c->sbuf = malloc(TD_WIRE_MAX_MSG);
	if (!c->rbuf || !c->sbuf) {
		rc = td__fail(err, -ENOMEM, "out of memory");
		goto fail;
	}
	td__fork_watch();
	c->pid = getpid();
	c->fork_gen = c->lock_gen = td__fork_gen;
	c->reconnect = flags & TD_CLIENT_RECONNECT;
	c->gf_off = (gf = getenv("TENSORD_GET_FOLLOW")) && !strcmp(gf, "0");
	c->rows_off = (gf = getenv("TENSORD_WAKE_ROWS")) && !strcmp(gf, "0");
	c->stage_off = (gf = getenv("TENSORD_STAGE")) && !strcmp(gf, "0");
	td__produce_env(c);
	c->pref = pref;
	c->hello_ms = ms;
	/* td_client_set_interrupt()'s, for the HELLO too */
	c->intr_fn = fn;
	c->intr_ud = ud;
	memcpy(c->path, sa.sun_path, sizeof(c->path));
	rc = sock_open(c, &sa, salen, err);
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
