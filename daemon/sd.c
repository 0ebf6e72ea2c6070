/* SPDX-License-Identifier: MIT */
/*
 * systemd integration without libsystemd: the notify protocol (READY,
 * STATUS, WATCHDOG, STOPPING, EXTEND_TIMEOUT_USEC, FDSTORE), socket
 * activation (LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES) and the watchdog
 * timer. These are small, documented, stable interfaces
 * (sd_notify(3), sd_listen_fds(3)); implementing them here keeps the
 * daemon's dependencies to libuv and lets the notify messages run on our
 * own loop timers. Everything is a no-op when $NOTIFY_SOCKET is unset, so
 * the daemon behaves the same in the foreground.
 */
#include "sd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define SD_LISTEN_FDS_START 3
#define STATUS_MS 2000 /* STATUS refresh, at least this often */

static struct {
	int fd; /* AF_UNIX SOCK_DGRAM towards $NOTIFY_SOCKET, -1 */
	int listen_fd; /* socket activation, until the server takes it */
	struct sockaddr_un sa;
	socklen_t salen;
	uint64_t watchdog_usec; /* 0: no watchdog */
	bool fdstore;           /* FDSTORE=1 messages are wanted */
	uv_timer_t tick;
	bool tick_on;
	/*
	 * Between READY=1 and STOPPING=1: a SIGHUP's RELOADING=1/READY=1
	 * are said only then. One taken by the restore's nested loop runs
	 * said READY=1 before the restore ended (the start done for
	 * systemd, the store still empty), one during the final save said
	 * READY=1 after STOPPING=1.
	 */
	bool running;
	char status[160]; /* last STATUS= sent */
	int last_err;     /* of the last failed send, to log it once */
	/*
	 * The manager left a send waiting SEND_WAIT_S: it does not read its
	 * socket (PID 1 always does; a stuck supervisor does not). Until a
	 * send goes through again, sends do not wait, and what does not fit
	 * is dropped: serving clients beats telling a deaf manager.
	 */
	bool stalled;
	/*
	 * The first passed listening socket not of our kind ("fd 3
	 * (tensord.socket): AF_UNIX SOCK_STREAM"), "" for none: a socket
	 * unit with ListenStream=, or systemd-socket-activate without
	 * --seqpacket.
	 */
	char wrong_listener[128];
} sd = {.fd = -1, .listen_fd = -1};

#define SEND_WAIT_S 1

/* ---- environment ---- */

static int env_u64(const char *name, uint64_t *out)
{
	const char *s = getenv(name);
	char *end;
	unsigned long long v;

	if (!s || !*s)
		return -ENOENT;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || *s == '-')
		return -EINVAL;
	*out = v;
	return 0;
}

static int open_notify(void)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct timeval tv = {.tv_sec = SEND_WAIT_S};
	size_t len;

	if (!path || !*path)
		return 0;
	len = strlen(path);
	/* a path, or "@name" for the abstract namespace */
	if ((path[0] != '/' && path[0] != '@') ||
	    len >= sizeof(sd.sa.sun_path)) {
		td__log(TD_LOG_WARN, "NOTIFY_SOCKET=%s: not a usable socket "
				     "address; not notifying systemd",
			path);
		return 0;
	}
	sd.sa.sun_family = AF_UNIX;
	memcpy(sd.sa.sun_path, path, len);
	if (path[0] == '@')
		sd.sa.sun_path[0] = '\0';
	sd.salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
			       (path[0] == '/'));
	sd.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sd.fd < 0) {
		int rc = -errno;

		td__log(TD_LOG_ERROR, "notify socket: %s", strerror(errno));
		return rc;
	}
	/* a send waits for room at most this long (then: sd.stalled) */
	if (setsockopt(sd.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		td__log(TD_LOG_WARN, "notify socket: SO_SNDTIMEO: %s",
			strerror(errno));
	return 0;
}

/* A listening AF_UNIX SOCK_SEQPACKET socket? */
static bool is_seqpacket_listener(int fd)
{
	int v = 0;
	socklen_t l = sizeof(v);

	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) < 0 || v != AF_UNIX)
		return false;
	l = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &l) < 0 ||
	    v != SOCK_SEQPACKET)
		return false;
	l = sizeof(v);
	return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) == 0 && v;
}

/* A listening socket of another kind than ours: describe it into sd. */
static void note_wrong_listener(int fd, const char *name)
{
	int dom = 0, type = 0, acc = 0;
	socklen_t l = sizeof(acc);

	if (sd.wrong_listener[0] ||
	    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l) < 0 || !acc)
		return;
	l = sizeof(dom);
	getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l);
	l = sizeof(type);
	getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l);
	snprintf(sd.wrong_listener, sizeof(sd.wrong_listener),
		 "fd %d (%.40s): a listening %s %s socket", fd, name,
		 dom == AF_UNIX    ? "AF_UNIX"
		 : dom == AF_INET  ? "AF_INET"
		 : dom == AF_INET6 ? "AF_INET6"
				   : "other",
		 type == SOCK_STREAM  ? "SOCK_STREAM"
		 : type == SOCK_DGRAM ? "SOCK_DGRAM"
		 : type == SOCK_SEQPACKET ? "SOCK_SEQPACKET"
					  : "other");
}

/*
 * The fds passed to us, as they were at exec time (td__sd_claim): by the
 * time td__sd_init() runs, the daemon has opened fds of its own (the
 * loop's epoll and signal pipes, the closer thread, a pidfd), and those
 * land in any hole of 3..3+LISTEN_FDS that the passing process left.
 * Taking them for passed fds would close the loop under itself.
 */
static struct {
	int *fd;       /* open passed fds, ascending */
	size_t n;
	uint64_t want; /* LISTEN_FDS */
	char *names;   /* LISTEN_FDNAMES, or NULL */
	int rc;        /* an error to report from td__sd_init() */
} claim;

static int claim_add(int fd)
{
	int *p;

	if ((claim.n & 63) == 0) {
		p = realloc(claim.fd, (claim.n + 64) * sizeof(*p));
		if (!p)
			return -ENOMEM;
		claim.fd = p;
	}
	claim.fd[claim.n++] = fd;
	return 0;
}

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

/*
 * The open fds in 3..3+want, from /proc/self/fd: only as many syscalls as
 * there are open fds, however large a LISTEN_FDS comes in. Without /proc,
 * every fd in the range up to the fd limit is asked instead.
 */
static int claim_scan(void)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *e;
	uint64_t end = SD_LISTEN_FDS_START + claim.want;
	int rc = 0;

	if (!dir) {
		long max = sysconf(_SC_OPEN_MAX);

		for (uint64_t fd = SD_LISTEN_FDS_START;
		     rc == 0 && fd < end && (max < 0 || fd < (uint64_t)max);
		     fd++)
			if (fcntl((int)fd, F_GETFD) >= 0)
				rc = claim_add((int)fd);
		return rc;
	}
	while (rc == 0 && (e = readdir(dir))) {
		char *x;
		unsigned long fd = strtoul(e->d_name, &x, 10);

		/* the listing's own fd may sit in a hole of the range */
		if (*x || e->d_name[0] == '.' || (int)fd == dirfd(dir) ||
		    fd < SD_LISTEN_FDS_START || fd >= end)
			continue;
		rc = claim_add((int)fd);
	}
	closedir(dir);
	if (claim.n)
		qsort(claim.fd, claim.n, sizeof(*claim.fd), cmp_int);
	return rc;
}

void td__sd_claim(void)
{
	uint64_t pid;
	const char *names = getenv("LISTEN_FDNAMES");

	if (env_u64("LISTEN_PID", &pid) < 0 || pid != (uint64_t)getpid())
		return; /* not for us (inherited by accident) */
	if (env_u64("LISTEN_FDS", &claim.want) < 0 || claim.want == 0)
		return;
	if (claim.want > INT32_MAX - SD_LISTEN_FDS_START) {
		claim.rc = -EINVAL;
		return;
	}
	if (names && !(claim.names = strdup(names))) {
		claim.rc = -ENOMEM;
		return;
	}
	claim.rc = claim_scan();
	/* the passed fds are not CLOEXEC; nothing we run needs them */
	for (size_t i = 0; i < claim.n; i++)
		fcntl(claim.fd[i], F_SETFD, FD_CLOEXEC);
}

/*
 * The name of passed fd number i (0-based), "unknown" past the names.
 * Every ':' ends a name, empty ones included (sd_listen_fds_with_names()
 * splits the same way): strtok() would skip an empty field and give
 * every later fd the name of its neighbour, a stored plane another's.
 */
static const char *claim_name(uint64_t i, uint64_t *at, char **tok,
			      char **rest)
{
	while (*tok && *at < i) {
		*tok = strsep(rest, ":");
		(*at)++;
	}
	return *tok ? *tok : "unknown";
}

/*
 * Sort what systemd (or systemd-socket-activate, or a test) passed: fds
 * named "td.*" are our own fd-store entries (they follow the listening
 * sockets, named by FDNAME=); anything else must be the listening socket.
 * Whatever fits neither is closed, so it cannot leak into the store.
 */
static int take_listen_fds(void (*passed)(int fd, const char *name))
{
	char *rest = claim.names, *tok;
	uint64_t at = 0;
	int rc = claim.rc;

	if (rc == -EINVAL)
		td__log(TD_LOG_ERROR, "LISTEN_FDS=%" PRIu64 ": too many",
			claim.want);
	if (rc < 0 || !claim.want)
		goto out;
	if (claim.n < claim.want)
		td__log(TD_LOG_WARN, "LISTEN_FDS=%" PRIu64 " but %zu of fds "
				     "%d..%" PRIu64 " were open; the others "
				     "are not ours to take",
			claim.want, claim.n, SD_LISTEN_FDS_START,
			SD_LISTEN_FDS_START + claim.want - 1);
	if (claim.names) {
		uint64_t named = 1;

		for (const char *c = claim.names; *c; c++)
			named += *c == ':';
		/* fewer names: the rest are "unknown", and say so below */
		if (named > claim.want)
			td__log(TD_LOG_WARN, "LISTEN_FDNAMES names %" PRIu64
					     " fds but LISTEN_FDS=%" PRIu64
					     "; the fds past %" PRIu64
					     " are not taken (nor closed: "
					     "not ours by the protocol)",
				named, claim.want,
				SD_LISTEN_FDS_START + claim.want - 1);
	}
	tok = rest ? strsep(&rest, ":") : NULL;
	for (size_t i = 0; i < claim.n; i++) {
		int fd = claim.fd[i];
		const char *name = claim_name(
			(uint64_t)(fd - SD_LISTEN_FDS_START), &at, &tok, &rest);

		if (!strncmp(name, TD__FDSTORE_PREFIX,
			     strlen(TD__FDSTORE_PREFIX))) {
			passed(fd, name);
		} else if (sd.listen_fd < 0 && is_seqpacket_listener(fd)) {
			sd.listen_fd = fd;
		} else {
			td__log(TD_LOG_WARN, "passed fd %d (%s) is neither a "
					     "listening SOCK_SEQPACKET socket "
					     "nor ours; closed",
				fd, name);
			note_wrong_listener(fd, name);
			close(fd);
		}
	}
out:
	free(claim.names);
	free(claim.fd);
	claim.names = NULL;
	claim.fd = NULL;
	claim.n = 0;
	/* not inherited by anything we might start */
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	return rc;
}

/*
 * $WATCHDOG_USEC and $WATCHDOG_PID as sd_watchdog_enabled(3) takes them:
 * 0 or infinity (USEC_INFINITY, UINT64_MAX) is no watchdog, and so is a
 * value that does not parse, in either (whom a garbled pid names is
 * unknown); said once, not pinged for.
 */
static void watchdog_env(const struct td__daemon *d)
{
	uint64_t wpid;
	int rc = env_u64("WATCHDOG_USEC", &sd.watchdog_usec);

	if (rc == -ENOENT)
		return;
	if (rc < 0 || sd.watchdog_usec == UINT64_MAX) {
		td__log(TD_LOG_WARN, "WATCHDOG_USEC=%s: %s; no watchdog pings",
			getenv("WATCHDOG_USEC"),
			rc < 0 ? "not a number of microseconds" : "infinity");
		sd.watchdog_usec = 0;
		return;
	}
	rc = env_u64("WATCHDOG_PID", &wpid);
	if (rc == -EINVAL) {
		td__log(TD_LOG_WARN, "WATCHDOG_PID=%s: not a pid; no watchdog "
				     "pings",
			getenv("WATCHDOG_PID"));
		sd.watchdog_usec = 0;
	} else if (rc == 0 && wpid != (uint64_t)d->pid) {
		sd.watchdog_usec = 0; /* meant for another process */
	}
}

int td__sd_init(struct td__daemon *d,
		void (*passed)(int fd, const char *name))
{
	uint64_t fdmax;
	int rc;

	rc = open_notify();
	if (rc < 0)
		return rc;
	if (sd.fd >= 0)
		watchdog_env(d);
	/* systemd >= 254 says FDSTORE=<FileDescriptorStoreMax>; 0 = none */
	sd.fdstore = sd.fd >= 0 &&
		     !(env_u64("FDSTORE", &fdmax) == 0 && fdmax == 0);
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
	if (sd.watchdog_usec)
		td__log(TD_LOG_DEBUG, "watchdog every %" PRIu64 " us",
			sd.watchdog_usec);
	return take_listen_fds(passed);
}

int td__sd_take_listen_fd(void)
{
	int fd = sd.listen_fd;

	sd.listen_fd = -1;
	return fd;
}

const char *td__sd_wrong_listener(void)
{
	return sd.wrong_listener[0] ? sd.wrong_listener : NULL;
}

bool td__sd_fdstore_on(void)
{
	return sd.fdstore;
}

/* ---- sending ---- */

int td__sd_notify(const int *fds, unsigned nfds, const char *fmt, ...)
{
	char buf[512];
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * 4)];
	} cb;
	struct iovec iov;
	struct msghdr mh = {0};
	va_list ap;
	int n;

	if (sd.fd < 0)
		return 0;
	if (nfds > 4)
		return -EINVAL;
	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(buf))
		return -EMSGSIZE;
	iov.iov_base = buf;
	iov.iov_len = (size_t)n;
	mh.msg_name = &sd.sa;
	mh.msg_namelen = sd.salen;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (nfds) {
		struct cmsghdr *c;

		memset(&cb, 0, sizeof(cb));
		mh.msg_control = cb.b;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	/*
	 * Waiting for room, like sd_notify(): PID 1 drains its socket, and a
	 * dropped FDSTORE message would lose a tensor at the next restart.
	 * But SEND_WAIT_S at most, and not at all while the manager is
	 * stalled: a manager that never reads must not stop the daemon.
	 */
	while (sendmsg(sd.fd, &mh,
		       MSG_NOSIGNAL | (sd.stalled ? MSG_DONTWAIT : 0)) < 0) {
		if (errno == EINTR)
			continue;
		n = -errno;
		if ((n == -EAGAIN || n == -EWOULDBLOCK) && !sd.stalled) {
			sd.stalled = true;
			sd.last_err = n;
			td__log(TD_LOG_ERROR,
				"notify socket %s: full for %d s, the "
				"service manager does not read it; "
				"notifications are dropped until it does "
				"(fd store: tensors published meanwhile do "
				"not survive a restart)",
				sd.sa.sun_path[0] ? sd.sa.sun_path : "@...",
				SEND_WAIT_S);
			return n;
		}
		/* once per kind of failure, not once per watchdog tick */
		td__log(n == sd.last_err ? TD_LOG_DEBUG : TD_LOG_WARN,
			"notify \"%.*s\": %s", (int)strcspn(buf, "\n"), buf,
			strerror(errno));
		sd.last_err = n;
		return n;
	}
	if (sd.stalled)
		td__log(TD_LOG_WARN, "notify socket: the service manager "
				     "reads it again");
	sd.stalled = false;
	sd.last_err = 0;
	return 0;
}

/* "N tensors, B bytes, C clients" */
static void status_text(struct td__daemon *d, char *buf, size_t cap)
{
	struct td__store_info si = {0};
	unsigned clients = 0;

	td__store_info(&si);
	for (struct td__list *l = d->peers.next; l != &d->peers; l = l->next)
		clients++;
	snprintf(buf, cap, "%zu tensors, %" PRIu64 " bytes, %u clients",
		 si.count, si.bytes, clients);
}

void td__sd_status(struct td__daemon *d)
{
	char now[sizeof(sd.status)];

	if (sd.fd < 0 || !sd.tick_on)
		return;
	status_text(d, now, sizeof(now));
	if (strcmp(now, sd.status) == 0)
		return;
	if (td__sd_notify(NULL, 0, "STATUS=%s", now) == 0)
		memcpy(sd.status, now, sizeof(now));
}

static void on_tick(uv_timer_t *t)
{
	struct td__daemon *d = t->data;
	char now[sizeof(sd.status)];

	if (!sd.watchdog_usec) {
		td__sd_status(d);
		return;
	}
	/* one datagram: the ping, and the status when it changed */
	status_text(d, now, sizeof(now));
	if (strcmp(now, sd.status) == 0) {
		td__sd_notify(NULL, 0, "WATCHDOG=1");
		return;
	}
	if (td__sd_notify(NULL, 0, "WATCHDOG=1\nSTATUS=%s", now) == 0)
		memcpy(sd.status, now, sizeof(now));
}

void td__sd_ready(struct td__daemon *d)
{
	uint64_t ms;

	if (sd.fd < 0)
		return;
	status_text(d, sd.status, sizeof(sd.status));
	td__sd_notify(NULL, 0, "READY=1\nSTATUS=%s", sd.status);
	/*
	 * Half the interval, as sd_watchdog_enabled(3) advises: a ping that
	 * is late by one loop iteration still arrives in time. STATUS_MS at
	 * most: the tick also refreshes STATUS=, which a WatchdogSec=1h left
	 * half an hour old (the clients' count: nothing else says it).
	 */
	ms = sd.watchdog_usec ? sd.watchdog_usec / 2000 : STATUS_MS;
	if (ms > STATUS_MS)
		ms = STATUS_MS;
	if (ms == 0)
		ms = 1;
	uv_timer_init(d->loop, &sd.tick);
	sd.tick.data = d;
	uv_timer_start(&sd.tick, on_tick, ms, ms);
	sd.tick_on = true;
	sd.running = true;
}

void td__sd_reloading(void)
{
	struct timespec now;

	if (sd.fd < 0 || !sd.running)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	td__sd_notify(NULL, 0, "RELOADING=1\nMONOTONIC_USEC=%llu",
		      (unsigned long long)now.tv_sec * 1000000ULL +
			      (unsigned long long)now.tv_nsec / 1000);
}

void td__sd_reloaded(struct td__daemon *d)
{
	if (sd.fd < 0 || !sd.running)
		return;
	status_text(d, sd.status, sizeof(sd.status));
	td__sd_notify(NULL, 0, "READY=1\nSTATUS=%s", sd.status);
}

void td__sd_stopping(struct td__daemon *d)
{
	(void)d;
	sd.running = false;
	if (sd.fd < 0)
		return;
	if (sd.tick_on) {
		uv_timer_stop(&sd.tick);
		uv_close((uv_handle_t *)&sd.tick, NULL);
		sd.tick_on = false;
	}
	td__sd_notify(NULL, 0, "STOPPING=1\nSTATUS=stopping");
}

void td__sd_fini(void)
{
	if (sd.listen_fd >= 0)
		close(sd.listen_fd);
	sd.listen_fd = -1;
	if (sd.fd >= 0)
		close(sd.fd);
	sd.fd = -1;
}
