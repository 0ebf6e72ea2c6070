/* SPDX-License-Identifier: MIT */
/*
 * The listening socket: AF_UNIX SOCK_SEQPACKET at the resolved path. A
 * socket file nobody listens on (a crashed daemon's) is replaced; a live
 * one makes the daemon refuse to start rather than steal the name.
 */
#include "daemon.h"
#include "sd.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

struct td__server {
	uv_poll_t poll;
	int fd;
	bool bound;   /* we created the socket file (remove it on stop) */
	bool polling; /* poll is initialised (close through libuv) */
	struct sockaddr_un sa;
	/*
	 * Out of descriptors (EMFILE/ENFILE) or memory at accept: the
	 * listening socket stays readable, so polling it would spin. It is
	 * not polled for backoff_ms (doubling up to BACKOFF_MAX_MS while it
	 * keeps failing), and the failure is logged once per interval.
	 */
	uv_timer_t backoff;
	bool backoff_ready;
	unsigned backoff_ms;
	struct td__ratelimit rl;
	uint64_t accepts, refused, backoffs; /* logged at stop */
	unsigned closing; /* handles whose close callback is due */
};

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 1000

static void on_accept(uv_poll_t *h, int status, int events);

static void on_backoff(uv_timer_t *t)
{
	struct td__server *s = t->data;

	uv_poll_start(&s->poll, UV_READABLE, on_accept);
}

/* Stop polling the listening socket for a while after err. */
static void back_off(struct td__daemon *d, struct td__server *s, int err)
{
	s->backoffs++;
	if (!s->backoff_ready) {
		uv_timer_init(d->loop, &s->backoff);
		s->backoff.data = s;
		s->backoff_ready = true;
	}
	if (td__ratelimit_ok(&s->rl, TD__LOG_INTERVAL_MS)) {
		td__log(TD_LOG_WARN,
			"accept4: %s: not accepting for %u ms (%lu more such "
			"pauses since the last line; clients hold %llu fds)",
			strerror(err), s->backoff_ms, s->rl.suppressed,
			(unsigned long long)td__tenant_fds());
		s->rl.suppressed = 0;
	}
	uv_poll_stop(&s->poll);
	uv_timer_start(&s->backoff, on_backoff, s->backoff_ms, 0);
	s->backoff_ms = s->backoff_ms * 2 > BACKOFF_MAX_MS
				? BACKOFF_MAX_MS
				: s->backoff_ms * 2;
}

static void on_accept(uv_poll_t *h, int status, int events)
{
	struct td__daemon *d = h->data;
	struct td__server *s = d->server;

	if (status < 0) {
		td__log(TD_LOG_WARN, "listening socket: %s",
			uv_strerror(status));
		return;
	}
	/* bounded, like the per-peer reads: other work gets its turn */
	for (int i = 0; i < TD__RX_BATCH; i++) {
		int fd = accept4(s->fd, NULL, NULL,
				 SOCK_CLOEXEC | SOCK_NONBLOCK);

		s->accepts++;
		if (fd < 0) {
			int e = errno;

			if (e == EINTR || e == ECONNABORTED)
				continue;
			if (e == EMFILE || e == ENFILE || e == ENOBUFS ||
			    e == ENOMEM) {
				back_off(d, s, e);
				return;
			}
			if (e != EAGAIN)
				td__log(TD_LOG_WARN, "accept4: %s",
					strerror(e));
			return;
		}
		s->backoff_ms = BACKOFF_MIN_MS;
		if (td__peer_take_fd(d, fd) < 0)
			s->refused++; /* logged there, rate-limited */
	}
	(void)events;
}

/* mkdir the socket's folder when it is missing (one level). */
static int make_parent(const char *path)
{
	char buf[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char *dir;

	snprintf(buf, sizeof(buf), "%s", path);
	dir = dirname(buf);
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		td__log(TD_LOG_ERROR, "cannot create %s: %s", dir,
			strerror(errno));
		return -errno;
	}
	return 0;
}

/*
 * Is somebody listening at sa? 1 yes, 0 no (stale or absent), -errno when
 * the path is something else than a socket.
 */
static int probe_live(const struct sockaddr_un *sa)
{
	struct stat st;
	int fd, rc;

	if (lstat(sa->sun_path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode))
		return -EEXIST;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	rc = connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
	close(fd);
	if (rc == 0)
		return 1;
	/* ECONNREFUSED: a socket file with no listener behind it */
	return errno == ECONNREFUSED ? 0 : 1;
}

/* The listening socket s->fd joins the loop: connections are accepted. */
static int accept_from(struct td__daemon *d, struct td__server *s,
		       const char *what, int fd)
{
	int rc = uv_poll_init(d->loop, &s->poll, s->fd);

	if (rc < 0)
		return rc;
	s->polling = true;
	s->poll.data = d;
	uv_poll_start(&s->poll, UV_READABLE, on_accept);
	if (fd >= 0)
		td__log(TD_LOG_INFO, "listening on %s %d", what, fd);
	else
		td__log(TD_LOG_INFO, "listening on %s", what);
	return 0;
}

/*
 * Socket activation: systemd made, bound and owns the socket (its mode and
 * group come from tensord.socket), so we neither probe nor unlink it.
 */
static int adopt(struct td__daemon *d, struct td__server *s, int fd)
{
	int fl = fcntl(fd, F_GETFL), rc;

	s->fd = fd;
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		rc = -errno;
		td__log(TD_LOG_ERROR, "activated socket: %s", strerror(errno));
		return rc;
	}
	return accept_from(d, s, "the socket-activated fd", fd);
}

int td__server_start(struct td__daemon *d)
{
	struct td__server *s = calloc(1, sizeof(*s));
	const char *path = d->opts.socket_path;
	int rc;

	if (!s)
		return -ENOMEM;
	s->fd = -1;
	s->backoff_ms = BACKOFF_MIN_MS;
	d->server = s;
	rc = td__sd_take_listen_fd();
	if (rc >= 0)
		return adopt(d, s, rc);
	if (td__sd_wrong_listener()) {
		td__log(TD_LOG_ERROR, "socket activation passed %s, and no "
				      "listening AF_UNIX SOCK_SEQPACKET "
				      "socket (the socket unit wants "
				      "ListenSequentialPacket=, "
				      "systemd-socket-activate --seqpacket); "
				      "not starting",
			td__sd_wrong_listener());
		return -EPROTOTYPE;
	}
	if (strlen(path) >= sizeof(s->sa.sun_path)) {
		td__log(TD_LOG_ERROR, "socket path too long (max %zu): %s",
			sizeof(s->sa.sun_path) - 1, path);
		return -ENAMETOOLONG;
	}
	s->sa.sun_family = AF_UNIX;
	strcpy(s->sa.sun_path, path);
	rc = make_parent(path);
	if (rc < 0)
		return rc;
	rc = probe_live(&s->sa);
	if (rc == 1) {
		td__log(TD_LOG_ERROR,
			"another tensord is listening on %s; not starting",
			path);
		return -EADDRINUSE;
	}
	if (rc < 0) {
		td__log(TD_LOG_ERROR, "%s exists and is not a socket: %s", path,
			strerror(-rc));
		return rc;
	}
	if (unlink(path) == 0)
		td__log(TD_LOG_INFO, "replaced stale socket %s", path);
	s->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK,
		       0);
	if (s->fd < 0) {
		rc = -errno;
		td__log(TD_LOG_ERROR, "socket: %s", strerror(errno));
		return rc;
	}
	if (bind(s->fd, (struct sockaddr *)&s->sa, sizeof(s->sa)) < 0) {
		rc = -errno;
		td__log(TD_LOG_ERROR, "bind %s: %s", path, strerror(errno));
		return rc;
	}
	s->bound = true;
	/*
	 * Mode and group before listen(): nobody can connect yet, so there
	 * is no window in which the umask's looser mode is in force.
	 */
	if (d->opts.socket_gid != (gid_t)-1 &&
	    chown(path, (uid_t)-1, d->opts.socket_gid) < 0) {
		rc = -errno;
		td__log(TD_LOG_ERROR, "chown %s to gid %u: %s", path,
			(unsigned)d->opts.socket_gid, strerror(errno));
		return rc;
	}
	if (d->opts.socket_mode >= 0 &&
	    chmod(path, (mode_t)d->opts.socket_mode) < 0) {
		rc = -errno;
		td__log(TD_LOG_ERROR, "chmod %s to %04o: %s", path,
			(unsigned)d->opts.socket_mode, strerror(errno));
		return rc;
	}
	if (listen(s->fd, 128) < 0) {
		rc = -errno;
		td__log(TD_LOG_ERROR, "listen %s: %s", path, strerror(errno));
		return rc;
	}
	return accept_from(d, s, path, -1);
}

/*
 * The listening socket's last close also ends the connections never
 * accepted (its backlog), and with them what their queues hold: a peer's
 * lingering socket or FUSE file, whose close would then hold the stop
 * on the loop's thread (for the linger time: systemd's stop timeout
 * kills the daemon first). It goes to td-closer-peer, as a peer's fds
 * do; a close still waiting there ends with the process.
 */
static void close_listener(int fd)
{
	td__closer_foreign(fd);
}

static void on_closed(uv_handle_t *h)
{
	struct td__server *s = h->data;

	/* the last of the (one or two) handles frees the server */
	if (--s->closing)
		return;
	close_listener(s->fd);
	free(s);
}

void td__server_stop(struct td__daemon *d)
{
	struct td__server *s = d->server;

	if (!s)
		return;
	d->server = NULL;
	if (s->bound)
		unlink(s->sa.sun_path);
	td__log(TD_LOG_INFO,
		"accept4 calls %llu, connections refused for limits %llu, "
		"pauses for lack of descriptors %llu",
		(unsigned long long)s->accepts, (unsigned long long)s->refused,
		(unsigned long long)s->backoffs);
	if (s->polling) {
		s->poll.data = s;
		s->closing = s->backoff_ready ? 2 : 1;
		uv_close((uv_handle_t *)&s->poll, on_closed);
		if (s->backoff_ready)
			uv_close((uv_handle_t *)&s->backoff, on_closed);
		return;
	}
	if (s->fd >= 0)
		close_listener(s->fd);
	free(s);
}
