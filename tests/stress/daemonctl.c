/* SPDX-License-Identifier: MIT */
#include "daemonctl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ARGS 64

void tdc_nap_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int tdc_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	int rc;

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		return fd;
	rc = -errno;
	close(fd);
	return rc;
}

int tdc_fd_count(pid_t pid)
{
	char path[64];
	struct dirent *e;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (!dir)
		return -errno;
	while ((e = readdir(dir)))
		if (e->d_name[0] != '.')
			n++;
	closedir(dir);
	return n;
}

long tdc_rss_kb(pid_t pid)
{
	char path[64], line[256];
	long kb = -ENOENT;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

unsigned tdc_log_count(const struct tdc_daemon *d, const char *needle)
{
	FILE *f = fopen(d->log, "re");
	char *buf = NULL;
	size_t cap = 0, len = 0;
	unsigned n = 0;

	if (!f)
		return 0;
	for (;;) {
		if (len + 4096 + 1 > cap) {
			char *b = realloc(buf, cap = 2 * cap + 8192);

			if (!b)
				break;
			buf = b;
		}
		size_t got = fread(buf + len, 1, cap - len - 1, f);

		if (!got)
			break;
		len += got;
	}
	fclose(f);
	if (!buf)
		return 0;
	buf[len] = 0;
	for (const char *s = buf; (s = strstr(s, needle)); s++)
		n++;
	free(buf);
	return n;
}

int tdc_fd_settle(pid_t pid, int want, int tries)
{
	int n = tdc_fd_count(pid);

	for (int i = 0; i < tries && n > want; i++) {
		tdc_nap_ms(10);
		n = tdc_fd_count(pid);
	}
	return n;
}

/* Split $TD_TENSORD_WRAP on spaces into argv (static storage). */
static int wrap_args(const char **argv, int n)
{
	static char buf[1024];
	const char *w = getenv("TD_TENSORD_WRAP");
	char *save = NULL, *tok;

	if (!w || !*w)
		return n;
	snprintf(buf, sizeof(buf), "%s", w);
	for (tok = strtok_r(buf, " ", &save); tok && n < MAX_ARGS - 16;
	     tok = strtok_r(NULL, " ", &save))
		argv[n++] = tok;
	return n;
}

static void child(const struct tdc_daemon *d, const char *const *argv,
		  const struct tdc_opts *o)
{
	int log = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
		       0644);

	if (log >= 0)
		dup2(log, 2);
	if (o && o->nofile) {
		struct rlimit rl = {o->nofile, o->nofile};

		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			_exit(126);
	}
	if (o && o->uid) {
		struct passwd *pw = getpwuid(o->uid);
		gid_t gid = pw ? pw->pw_gid : (gid_t)o->uid;

		if (setgroups(0, NULL) < 0 || setgid(gid) < 0 ||
		    setuid(o->uid) < 0)
			_exit(125);
	}
	/* never outlive a crashed test (after setuid, which clears it) */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	execvp(argv[0], (char *const *)argv);
	_exit(127);
}

int tdc_start(struct tdc_daemon *d, const char *bin,
	      const struct tdc_opts *o)
{
	const char *argv[MAX_ARGS];
	char buf[2048];
	int n = 0, fd = -1;

	if (!bin)
		bin = getenv("TD_TENSORD");
	if (!bin)
		return -ENOENT;
	memset(d, 0, sizeof(*d));
	d->ready = -1;
	snprintf(d->dir, sizeof(d->dir), "/tmp/td-rel-XXXXXX");
	if (!mkdtemp(d->dir))
		return -errno;
	/* other uids (consumers as nobody, the daemon itself) get in */
	chmod(d->dir, 0755);
	if (o && o->uid && chown(d->dir, o->uid, (gid_t)-1) < 0)
		return -errno;
	snprintf(d->sock, sizeof(d->sock), "%s/s.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/log", d->dir);
	n = wrap_args(argv, n);
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = d->sock;
	argv[n++] = "--log-level";
	argv[n++] = o && o->log_level ? o->log_level : "info";
	for (int i = 0; o && o->extra && o->extra[i] && n < MAX_ARGS - 1; i++)
		argv[n++] = o->extra[i];
	argv[n] = NULL;
	d->pid = fork();
	if (d->pid < 0)
		return -errno;
	if (d->pid == 0)
		child(d, argv, o);
	/* readiness: retry until it accepts (bounded; valgrind is slow) */
	for (int i = 0; i < 6000; i++) {
		int st;

		fd = tdc_connect(d->sock);
		if (fd >= 0)
			break;
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			return -ECHILD;
		}
		tdc_nap_ms(10);
	}
	if (fd < 0)
		return -ETIMEDOUT;
	/*
	 * connect() returns once the connection is in the backlog; a reply
	 * (to a 1-byte datagram: -ENODATA) proves the daemon accepted it,
	 * so fd counts taken from now on include it. The daemon logs this
	 * probe once, as any bad input: "refused input: pid P (td-stress
	 * or td-soak): ... datagram shorter than the header". That line in
	 * a kept log is this probe, not a client library's stray write.
	 */
	if (send(fd, "", 1, MSG_NOSIGNAL) != 1 ||
	    poll(&(struct pollfd){fd, POLLIN, 0}, 1, 60000) != 1 ||
	    recv(fd, buf, sizeof(buf), 0) <= 0) {
		close(fd);
		return -EPROTO;
	}
	d->ready = fd;
	return 0;
}

int tdc_stop(struct tdc_daemon *d, int keep_dir)
{
	char cmd[200];
	int st, rc;

	if (d->ready >= 0)
		close(d->ready);
	d->ready = -1;
	if (d->pid <= 0)
		return -ESRCH;
	if (kill(d->pid, SIGTERM) < 0)
		return -errno;
	/* bounded: a daemon that hangs on its way out is a failure to
	 * report, not a test or stress run that never ends */
	for (int i = 0; (rc = (int)waitpid(d->pid, &st, WNOHANG)) == 0; i++) {
		if (i == TDC_STOP_S * 100) {
			kill(d->pid, SIGKILL);
			waitpid(d->pid, &st, 0);
			d->pid = 0;
			return -ETIMEDOUT;
		}
		tdc_nap_ms(10);
	}
	if (rc != d->pid)
		return -errno;
	d->pid = 0;
	rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	if (!keep_dir && rc == 0) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
		if (system(cmd) != 0)
			return -EIO;
	}
	return rc;
}
