/* SPDX-License-Identifier: MIT */
#include "testutil.h"
#include "malloc-count.h"

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stdarg.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/*
 * Temporary files (testutil.h): the runner's list of what its tests
 * noted, one line "suite/test<TAB>path" each, at a path of its own pid,
 * passed to the workers it forks through the environment (a test's own
 * children note into it too).
 */
#define TU_TMP_ENV "TU_TMP_LIST"
#define TU_TMP_PREFIX "/tmp/td-"

static char tmp_list[64]; /* the runner's: set by its PRE_ALL hook */

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
	(void)set;
	snprintf(tmp_list, sizeof(tmp_list), "/tmp/td-tmplist-%d",
		 (int)getpid());
	setenv(TU_TMP_ENV, tmp_list, 1);
}

void tu_tmp_note(const char *path)
{
	const char *list = getenv(TU_TMP_ENV);
	const struct criterion_test *t = criterion_current_test;
	char line[512];
	int fd, n;

	if (!list || !t || !path ||
	    strncmp(path, TU_TMP_PREFIX, strlen(TU_TMP_PREFIX)) ||
	    strchr(path, '\n'))
		return;
	n = snprintf(line, sizeof(line), "%s/%s\t%s\n", t->category, t->name,
		     path);
	if (n <= 0 || (size_t)n >= sizeof(line))
		return;
	/* one write of the whole line with O_APPEND: the runner never reads
	 * half of one, and parallel workers never interleave theirs */
	fd = open(list, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	(void)!write(fd, line, (size_t)n);
	close(fd);
}

char *tu_mkdtemp(char *tmpl)
{
	char *d = mkdtemp(tmpl);

	if (d)
		tu_tmp_note(d);
	return d;
}

int tu_mkstemp(char *tmpl)
{
	int fd = mkstemp(tmpl);

	if (fd >= 0)
		tu_tmp_note(tmpl);
	return fd;
}

static int tmp_remove(const char *p, const struct stat *sb, int flag,
		      struct FTW *f)
{
	(void)sb;
	(void)flag;
	(void)f;
	(void)remove(p);
	return 0;
}

/* Whether a file system is mounted at or under path (/proc/self/mounts:
 * a walk into one could hang on a FUSE server that stalls on purpose,
 * test-stall.c's, and what is there is not the test's anyway). */
static bool tmp_mounted_under(const char *path)
{
	FILE *f = fopen("/proc/self/mounts", "re");
	char line[4096], at[4096];
	size_t n = strlen(path);
	bool under = false;

	if (!f)
		return true;
	while (!under && fgets(line, sizeof(line), f))
		under = sscanf(line, "%*s %4095s", at) == 1 &&
			!strncmp(at, path, n) && (at[n] == '/' || !at[n]);
	fclose(f);
	return under;
}

/* "suite/test\n" of each test that failed in this runner, one after
 * another (a parameterized test's cases share theirs) */
static char *tmp_failed;
static size_t tmp_failed_len;

static bool tmp_key_failed(const char *key, size_t k)
{
	for (size_t o = 0; o < tmp_failed_len;) {
		const char *nl = memchr(tmp_failed + o, '\n',
					tmp_failed_len - o);
		size_t l = (size_t)(nl - (tmp_failed + o));

		if (l == k && !memcmp(tmp_failed + o, key, k))
			return true;
		o += l + 1;
	}
	return false;
}

/* In the runner: a test that failed keeps what it noted. */
ReportHook(POST_TEST)(struct criterion_test_stats *st)
{
	char key[320];
	int n;
	char *b;

	if (st->test_status != CR_STATUS_FAILED)
		return;
	n = snprintf(key, sizeof(key), "%s/%s\n", st->test->category,
		     st->test->name);
	if (n <= 0 || (size_t)n >= sizeof(key))
		return;
	b = realloc(tmp_failed, tmp_failed_len + (size_t)n);
	if (!b)
		return;
	memcpy(b + tmp_failed_len, key, (size_t)n);
	tmp_failed = b;
	tmp_failed_len += (size_t)n;
}

/*
 * In the runner, once every test ended (none is still using its files:
 * the cases of a parameterized test share a name, so a test's own end
 * cannot tell whether another case of it still runs): what the tests
 * that did not fail noted goes, folders with what is in them.
 */
ReportHook(POST_ALL)(struct criterion_global_stats *st)
{
	char line[512];
	FILE *f;

	(void)st;
	if (!tmp_list[0])
		return;
	f = fopen(tmp_list, "re");
	while (f && fgets(line, sizeof(line), f)) {
		char *tab = strchr(line, '\t'), *path = tab ? tab + 1 : NULL;

		line[strcspn(line, "\n")] = '\0';
		if (!path || tmp_key_failed(line, (size_t)(tab - line)) ||
		    strncmp(path, TU_TMP_PREFIX, strlen(TU_TMP_PREFIX)) ||
		    tmp_mounted_under(path))
			continue;
		/* depth first, no symlink followed, no other file system */
		(void)nftw(path, tmp_remove, 16,
			   FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
	}
	if (f)
		fclose(f);
	unlink(tmp_list);
	free(tmp_failed);
	tmp_failed = NULL;
	tmp_failed_len = 0;
}

uint8_t *tu_try_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long n;

	if (!f)
		return NULL;
	cr_assert(fseek(f, 0, SEEK_END) == 0);
	n = ftell(f);
	cr_assert(n >= 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	cr_assert(buf);
	cr_assert(fread(buf, 1, (size_t)n, f) == (size_t)n, "read %s", path);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

uint8_t *tu_read_file(const char *path, size_t *len)
{
	uint8_t *buf = tu_try_read_file(path, len);
	cr_assert(buf, "cannot read %s: %s", path, strerror(errno));
	return buf;
}

const char *tu_data_path(const char *rel)
{
	static char path[4096];
	const char *dir = getenv("TD_TEST_DATA");

	cr_assert(dir, "TD_TEST_DATA is not set (run through meson test)");
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	return path;
}

const char *tu_vectors_path(const char *sub)
{
	static char path[4096];
	const char *dir = getenv("TD_VECTORS_DIR");
	struct stat st;

	if (!dir)
		return NULL;
	snprintf(path, sizeof(path), "%s/%s", dir, sub);
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return NULL;
	return path;
}

char *tu_slurp(const char *path)
{
	size_t len;
	uint8_t *b = tu_try_read_file(path, &len);
	char *s = calloc(1, len + 1);

	cr_assert_not_null(s);
	if (b)
		memcpy(s, b, len);
	free(b);
	return s;
}

/* Install f (n instructions); 0 or -errno. */
static int seccomp_install(struct sock_filter *f, unsigned short n)
{
	struct sock_fprog prog = {n, f};

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
		return -errno;
	return 0;
}

int tu_deny_syscall(long nr, int err)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 1),
		BPF_STMT(BPF_RET | BPF_K,
			 SECCOMP_RET_ERRNO | ((uint32_t)err & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};

	return seccomp_install(f, sizeof(f) / sizeof(f[0]));
}

int tu_deny_syscall_arg(long nr, unsigned argi, uint32_t value, int err)
{
	/* the low half of a 64-bit argument comes first (little-endian) */
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 (uint32_t)(offsetof(struct seccomp_data, args) +
				    argi * sizeof(uint64_t))),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 0, 1),
		BPF_STMT(BPF_RET | BPF_K,
			 SECCOMP_RET_ERRNO | ((uint32_t)err & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};

	if (argi > 5)
		return -EINVAL;
	return seccomp_install(f, sizeof(f) / sizeof(f[0]));
}

/* The entries of a /proc/PID/fd folder. */
static int fd_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	cr_assert(d, "%s", path);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

volatile struct td_malloc_counts *tu_counts_map(char *path)
{
	void *p;
	int fd = tu_mkstemp(path);

	cr_assert_geq(fd, 0, "mkstemp %s", path);
	cr_assert_eq(ftruncate(fd, 4096), 0);
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert_neq(p, MAP_FAILED);
	close(fd);
	return p;
}

/* The /metrics response of the daemon serving HTTP at unix path. */
static const char *metrics_unix(const char *path)
{
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: t\r\n"
				  "Connection: close\r\n\r\n";
	static char buf[1 << 17];
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	size_t n = 0;
	ssize_t r;

	cr_assert_geq(fd, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = errno;
		char dir[sizeof(sa.sun_path)];
		char *slash;
		struct stat st;

		/* a socket file gone: its daemon left (it unlinks it on
		 * its way out), or its folder was removed under it */
		snprintf(dir, sizeof(dir), "%s", path);
		slash = strrchr(dir, '/');
		if (slash && slash != dir)
			*slash = '\0';
		cr_assert_fail("%s: %s (its folder %s %s)", path,
			       strerror(err), dir,
			       stat(dir, &st) == 0 ? "is there"
						   : "is gone");
	}
	cr_assert_eq(write(fd, req, sizeof(req) - 1),
		     (ssize_t)sizeof(req) - 1);
	while (n < sizeof(buf) - 1 &&
	       (r = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0)
		n += (size_t)r;
	close(fd);
	buf[n] = 0;
	return buf;
}

unsigned long long tu_metric_unix(const char *path, const char *name)
{
	const char *body = metrics_unix(path), *p;
	char key[128];

	snprintf(key, sizeof(key), "\n%s ", name);
	p = strstr(body, key);
	cr_assert_not_null(p, "no %s in:\n%s", name, body);
	return strtoull(p + strlen(key), NULL, 10);
}

bool tu_metrics_has(const char *path, const char *text)
{
	return strstr(metrics_unix(path), text) != NULL;
}

long tu_task_field(pid_t tid, const char *key)
{
	char path[64], line[256];
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key))) {
			const char *p = line + strlen(key);

			while (*p == ' ' || *p == '\t')
				p++;
			v = *key == 'S' ? (long)*p : strtol(p, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

int tu_fd_count(void)
{
	return fd_entries("/proc/self/fd") - 1; /* the DIR's own fd */
}

int tu_pid_fd_count(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	return fd_entries(path);
}

static int count_maps(bool buffers_only)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096];
	int n = 0;

	cr_assert(f);
	while (fgets(line, sizeof(line), f))
		if (!buffers_only || strstr(line, "memfd:") ||
		    strstr(line, "dmabuf"))
			n++;
	fclose(f);
	return n;
}

int tu_map_count(void)
{
	return count_maps(false);
}

int tu_buf_map_count(void)
{
	return count_maps(true);
}

void *tu_find_mapping(const char *memfd_name)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	void *at = NULL;

	cr_assert(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perms[8];

		if (!strstr(line, memfd_name))
			continue;
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 &&
		    perms[1] == 'w')
			at = (void *)lo;
	}
	fclose(f);
	cr_assert(at, "no writable %s mapping", memfd_name);
	return at;
}

bool tu_in_child;

pid_t tu_fork(void)
{
	pid_t parent = getpid(), pid;

	fflush(NULL);
	pid = fork();
	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		tu_in_child = true;
		/* a parent gone before the prctl: no signal would come */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
			_exit(125);
	}
	return pid;
}

int tu_become(uid_t uid, gid_t gid)
{
	pid_t parent = getppid();

	if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 ||
	    setresuid(uid, uid, uid) < 0 ||
	    prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		return -errno;
	/* a parent gone before the prctl: no signal would come */
	return getppid() == parent ? 0 : -ESRCH;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * SIGKILL pid, and its process group when it leads one (run_capture's:
 * what a shell started would live on, holding the suite's output). A
 * group of that number exists only when pid made it.
 */
static void kill_hard(pid_t pid)
{
	kill(-pid, SIGKILL);
	kill(pid, SIGKILL);
}

/* tu_reap_within() by the deadline `end` (now_ms()). */
static bool reap_by(pid_t pid, int64_t end, int *st)
{
	pid_t got;

	/* WNOHANG and a short nap: nothing here can wait past `end` */
	while ((got = waitpid(pid, st, WNOHANG)) == 0 ||
	       (got < 0 && errno == EINTR)) {
		if (now_ms() >= end) {
			kill_hard(pid);
			cr_assert_eq(waitpid(pid, st, 0), pid);
			return false;
		}
		usleep(10000);
	}
	cr_assert_eq(got, pid, "waitpid(%d): %s", (int)pid, strerror(errno));
	return true;
}

bool tu_reap_within(pid_t pid, int secs, int *st)
{
	return reap_by(pid, now_ms() + (int64_t)secs * 1000, st);
}

int tu_wait_child(pid_t pid, int secs, const char *what)
{
	int st;

	cr_assert(tu_reap_within(pid, secs, &st),
		  "%s: still running after %d s (killed)", what, secs);
	return st;
}

void tu_await_readable(int fd, int secs, const char *what)
{
	int64_t end = now_ms() + (int64_t)secs * 1000, left;
	struct pollfd p = {fd, POLLIN, 0};
	int n;

	do {
		left = end - now_ms();
		n = poll(&p, 1, left > 0 ? (int)left : 0);
	} while (n < 0 && errno == EINTR);
	cr_assert_geq(n, 0, "poll: %s", strerror(errno));
	cr_assert_eq(n, 1, "%s: nothing within %d s", what, secs);
}

struct sink {
	char *buf;
	size_t len, cap;
};

/* One read from fd into s; false at its end (or an error). */
static bool sink_read(struct sink *s, int fd)
{
	ssize_t got;

	if (s->len + 1 >= s->cap) {
		s->cap *= 2;
		s->buf = realloc(s->buf, s->cap);
		cr_assert(s->buf);
	}
	do
		got = read(fd, s->buf + s->len, s->cap - s->len - 1);
	while (got < 0 && errno == EINTR);
	if (got <= 0)
		return false;
	s->len += (size_t)got;
	return true;
}

int tu_collect(pid_t pid, int n, const int *fds, char **out, int secs,
	       const char *what)
{
	int64_t end = now_ms() + (int64_t)secs * 1000, left;
	struct sink s[4];
	struct pollfd pf[4];
	int live = n, st = 0, k;

	cr_assert(n > 0 && n <= 4);
	for (k = 0; k < n; k++) {
		s[k] = (struct sink){malloc(4096), 0, 4096};
		cr_assert(s[k].buf);
		pf[k] = (struct pollfd){fds[k], POLLIN, 0};
	}
	while (live && (left = end - now_ms()) > 0) {
		if (poll(pf, (nfds_t)n, (int)left) < 0) {
			cr_assert_eq(errno, EINTR, "poll: %s", strerror(errno));
			continue;
		}
		for (k = 0; k < n; k++) {
			if (pf[k].fd < 0 || !pf[k].revents ||
			    sink_read(&s[k], pf[k].fd))
				continue;
			close(pf[k].fd);
			pf[k].fd = -1; /* poll skips it from now on */
			live--;
		}
	}
	for (k = 0; k < n; k++) {
		if (pf[k].fd >= 0)
			close(pf[k].fd);
		s[k].buf[s[k].len] = 0;
		out[k] = s[k].buf;
	}
	/* the output ended: a second more for the exit that follows */
	if (live || !reap_by(pid, end + 1000, &st)) {
		if (live) {
			kill_hard(pid);
			cr_assert_eq(waitpid(pid, &st, 0), pid);
		}
		for (k = 0; k < n; k++) {
			fprintf(stderr, "%s: its output so far: %.4000s\n",
				what, out[k]);
			free(out[k]);
		}
		cr_assert_fail("%s: not done after %d s (killed)", what, secs);
	}
	return st;
}

/* argv as a shell would show it, for a message (a static buffer) */
static const char *shown(char *const argv[])
{
	static char b[512];
	size_t o = 0;

	b[0] = 0;
	for (; *argv && o < sizeof(b) - 1; argv++)
		o += (size_t)snprintf(b + o, sizeof(b) - o, "%s%s",
				      o ? " " : "", *argv);
	return b;
}

static int run_capture(char *const argv[], char **out, bool with_stderr,
		       int secs)
{
	int p[2], status;
	pid_t pid;

	cr_assert(pipe2(p, O_CLOEXEC) == 0);
	pid = tu_fork();
	if (pid == 0) {
		setpgid(0, 0); /* its own group, for kill_hard() */
		dup2(p[1], 1);
		if (with_stderr)
			dup2(p[1], 2);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	status = tu_collect(pid, 1, &p[0], out, secs, shown(argv));
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + WTERMSIG(status);
}

int tu_run_capture(char *const argv[], char **out)
{
	return run_capture(argv, out, false, TU_WAIT_S);
}

int tu_run_capture_all(char *const argv[], char **out)
{
	return run_capture(argv, out, true, TU_WAIT_S);
}

int tu_run_capture_in(char *const argv[], char **out, int secs)
{
	return run_capture(argv, out, false, secs);
}

pid_t tu_spawn_stdout(char *const argv[], FILE **out)
{
	int p[2];
	pid_t pid;

	cr_assert(pipe2(p, O_CLOEXEC) == 0);
	pid = tu_fork();
	if (pid == 0) {
		dup2(p[1], 1);
		/* kept across exec: a program that hangs ends, and with it
		 * the output its reader waits on */
		alarm(TU_WAIT_S);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	*out = fdopen(p[0], "r");
	cr_assert(*out);
	return pid;
}

uint64_t tu_rand(uint64_t *s)
{
	uint64_t x = *s ? *s : 0x9E3779B97F4A7C15ull;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

void tu_daemon_start(struct tu_daemon *d, const char *log_level)
{
	tu_daemon_start_args(d, log_level, NULL);
}

void tu_daemon_start_args(struct tu_daemon *d, const char *log_level,
			  const char *const *extra)
{
	tu_daemon_start_log(d, log_level, extra, NULL, NULL);
}

void tu_daemon_start_log(struct tu_daemon *d, const char *log_level,
			 const char *const *extra, const char *log,
			 void (*child)(void))
{
	const char *bin = getenv("TD_TENSORD");
	const char *argv[32] = {bin, "--socket", d->sock, "--log-level",
				log_level};
	unsigned argc = 5;

	cr_assert(bin, "TD_TENSORD is not set (run through meson test)");
	d->fds0 = tu_fd_count();
	d->maps0 = tu_map_count();
	d->bufmaps0 = tu_buf_map_count();
	snprintf(d->dir, sizeof(d->dir), "/tmp/td-test-XXXXXX");
	cr_assert(tu_mkdtemp(d->dir));
	snprintf(d->sock, sizeof(d->sock), "%s/tensord.sock", d->dir);
	for (; extra && *extra; extra++) {
		cr_assert(argc < sizeof(argv) / sizeof(argv[0]) - 1);
		argv[argc++] = *extra;
	}
	d->pid = tu_fork();
	if (d->pid == 0) {
		if (log) {
			int fd = open(log, O_WRONLY | O_CREAT | O_APPEND |
						      O_CLOEXEC,
				      0600);

			if (fd < 0 || dup2(fd, 2) < 0)
				_exit(126);
		}
		if (child)
			child();
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	for (int i = 0; i < 2000; i++) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		int st;

		memcpy(sa.sun_path, d->sock, sizeof(d->sock));
		cr_assert(s >= 0);
		if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(s);
			return;
		}
		close(s);
		cr_assert(waitpid(d->pid, &st, WNOHANG) == 0,
			  "tensord exited during start-up");
		usleep(10000);
	}
	cr_assert_fail("tensord did not open %s", d->sock);
}

void tu_daemon_kill(struct tu_daemon *d)
{
	int st;

	cr_assert_eq(kill(d->pid, SIGKILL), 0);
	cr_assert_eq(waitpid(d->pid, &st, 0), d->pid);
	unlink(d->sock);
	rmdir(d->dir);
}

void tu_daemon_stop(struct tu_daemon *d, bool check_maps)
{
	tu_daemon_stop_status(d, check_maps, 0);
}

void tu_daemon_stop_status(struct tu_daemon *d, bool check_maps, int want)
{
	pid_t pid = d->pid;
	int st;

	/* stopped already: a test body stops it (checked) and its .fini,
	 * whose asserts criterion does not count, only cleans up after a
	 * body that failed first */
	if (pid <= 0)
		return;
	d->pid = 0;
	cr_assert(kill(pid, SIGTERM) == 0);
	/* bounded: a daemon that hangs on its way out fails this test, not
	 * the whole suite by its timeout */
	cr_assert(tu_reap_within(pid, TU_WAIT_S, &st),
		  "tensord did not exit within %d s of SIGTERM (killed)",
		  TU_WAIT_S);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == want,
		  "tensord did not exit with status %d (status %#x)", want,
		  st);
	unlink(d->sock);
	rmdir(d->dir);
	cr_assert_eq(tu_fd_count(), d->fds0, "fd leak: %d -> %d", d->fds0,
		     tu_fd_count());
	cr_assert_eq(tu_buf_map_count(), d->bufmaps0,
		     "buffer mapping leak: %d -> %d", d->bufmaps0,
		     tu_buf_map_count());
	if (check_maps && TU_CHECK_ALL_MAPS)
		cr_assert_eq(tu_map_count(), d->maps0,
			     "mapping leak: %d -> %d", d->maps0,
			     tu_map_count());
}

int tu_tensorctl(const struct tu_daemon *d, char **out, ...)
{
	const char *bin = getenv("TD_TENSORCTL");
	char cmd[4096];
	char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	char *buf = NULL;
	size_t o;
	va_list ap;
	const char *a;
	int rc;

	cr_assert(bin, "TD_TENSORCTL is not set");
	o = (size_t)snprintf(cmd, sizeof(cmd), "exec '%s' --socket '%s'", bin,
			     d->sock);
	va_start(ap, out);
	while ((a = va_arg(ap, const char *)) && o < sizeof(cmd))
		o += (size_t)snprintf(cmd + o, sizeof(cmd) - o, " '%s'", a);
	va_end(ap);
	cr_assert_lt(o, sizeof(cmd) - 8);
	snprintf(cmd + o, sizeof(cmd) - o, " 2>&1");
	rc = tu_run_capture(argv, &buf);
	if (out)
		*out = buf;
	else
		free(buf);
	return rc;
}

const char *tu_vectors_or_skip(const char *sub, const char *what)
{
	static char dir[4096];
	const char *p = tu_vectors_path(sub);

	if (!p)
		cr_skip_test("upstream vectors folder %s/%s absent: %s "
			     "conformance not run",
			     getenv("TD_VECTORS_DIR") ? getenv("TD_VECTORS_DIR")
						      : "(unset)",
			     sub, what);
	snprintf(dir, sizeof(dir), "%s", p);
	return dir;
}

void tu_shim_on(const char *var, const char *value)
{
	const char *shim = getenv("TD_RAISE_BEFORE_OPEN_SHIM");

	cr_assert(shim, "TD_RAISE_BEFORE_OPEN_SHIM is not set (run through "
			"meson test)");
	cr_assert_eq(setenv("LD_PRELOAD", shim, 1), 0);
	cr_assert_eq(setenv(var, value, 1), 0);
	cr_assert_eq(setenv("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:"
					    "verify_asan_link_order=0", 1),
		     0);
}

void tu_shim_off(const char *var)
{
	unsetenv("LD_PRELOAD");
	unsetenv(var);
}

int tu_mute_listener(const char *path, int backlog)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int ls = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	cr_assert_geq(ls, 0);
	cr_assert_lt(strlen(path), sizeof(sa.sun_path));
	strcpy(sa.sun_path, path);
	unlink(path);
	cr_assert_eq(bind(ls, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s: %s",
		     path, strerror(errno));
	cr_assert_eq(listen(ls, backlog), 0);
	return ls;
}

int tu_full_listener(const char *path, int *first)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int ls = tu_mute_listener(path, 0);

	strcpy(sa.sun_path, path);
	*first = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	cr_assert_geq(*first, 0);
	cr_assert_eq(connect(*first, (struct sockaddr *)&sa, sizeof(sa)), 0,
		     "%s: %s", path, strerror(errno));
	return ls;
}

void tu_link_to(const char *link, const char *target)
{
	char tmp[128];

	snprintf(tmp, sizeof(tmp), "%s.new", link);
	unlink(tmp);
	cr_assert_eq(symlink(target, tmp), 0);
	cr_assert_eq(rename(tmp, link), 0);
}

int tu_ctl_run(const char *sock, struct tu_ctl_how h, uint64_t *peak,
	       ...)
{
	const char *bin = getenv("TD_TENSORCTL");
	char *argv[24] = {(char *)bin, "--socket", (char *)sock};
	struct rusage ru;
	size_t n = 3;
	va_list ap;
	pid_t pid;
	int st;

	cr_assert(bin, "TD_TENSORCTL is not set");
	va_start(ap, peak);
	for (char *a; (a = va_arg(ap, char *)) != NULL;) {
		cr_assert_lt(n, sizeof(argv) / sizeof(argv[0]) - 1);
		argv[n++] = a;
	}
	va_end(ap);
	pid = tu_fork();
	if (pid == 0) {
		int i = open(h.in ? h.in : "/dev/null", O_RDONLY);
		int e = open(h.err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int o = strcmp(h.out, h.err)
				? open(h.out, O_WRONLY | O_CREAT | O_TRUNC,
				       0644)
				: e;

		if (i < 0 || o < 0 || e < 0 || dup2(i, 0) < 0 ||
		    dup2(o, 1) < 0 || dup2(e, 2) < 0)
			_exit(126);
		if (h.uid && (setgid(h.uid) < 0 || setuid(h.uid) < 0))
			_exit(125);
		execv(bin, argv);
		_exit(127);
	}
	cr_assert_eq(wait4(pid, &st, 0, &ru), pid, "wait4: %s",
		     strerror(errno));
	if (peak)
		*peak = (uint64_t)ru.ru_maxrss * 1024;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int tu_private_tmpfs(const char *mnt, const char *opts)
{
	if (unshare(CLONE_NEWNS) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", mnt, "tmpfs", 0, opts) < 0)
		return -errno;
	return 0;
}
