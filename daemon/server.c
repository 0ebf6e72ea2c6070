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
};

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

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN)
				td__log(TD_LOG_WARN, "accept4: %s",
					strerror(errno));
			return;
		}
		if (td__peer_take_fd(d, fd) < 0)
			td__log(TD_LOG_WARN, "cannot set up a connection");
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
	rc = uv_poll_init(d->loop, &s->poll, s->fd);
	if (rc < 0)
		return rc;
	s->polling = true;
	s->poll.data = d;
	uv_poll_start(&s->poll, UV_READABLE, on_accept);
	td__log(TD_LOG_INFO, "listening on the socket-activated fd %d", fd);
	return 0;
}

int td__server_start(struct td__daemon *d)
{
	struct td__server *s = calloc(1, sizeof(*s));
	const char *path = d->opts.socket_path;
	int rc;

	if (!s)
		return -ENOMEM;
	s->fd = -1;
	d->server = s;
	rc = td__sd_take_listen_fd();
	if (rc >= 0)
		return adopt(d, s, rc);
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
	rc = uv_poll_init(d->loop, &s->poll, s->fd);
	if (rc < 0)
		return rc;
	s->polling = true;
	s->poll.data = d;
	uv_poll_start(&s->poll, UV_READABLE, on_accept);
	td__log(TD_LOG_INFO, "listening on %s", path);
	return 0;
}

static void on_closed(uv_handle_t *h)
{
	struct td__server *s = td__container_of(h, struct td__server, poll);

	close(s->fd);
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
	if (s->polling) {
		uv_close((uv_handle_t *)&s->poll, on_closed);
		return;
	}
	if (s->fd >= 0)
		close(s->fd);
	free(s);
}
