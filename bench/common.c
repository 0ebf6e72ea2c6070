/* SPDX-License-Identifier: MIT */
/* Helpers shared by every method: payload stamps, I/O, helper processes. */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int bench_fail(struct bench_run *r, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->why, sizeof(r->why), fmt, ap);
	va_end(ap);
	return rc;
}

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t bench_cpu_ns(int pid)
{
	char path[64];
	unsigned long long ns = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/schedstat", pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%llu", &ns) != 1)
		ns = 0;
	fclose(f);
	return ns;
}

/* One byte per seq, different for consecutive seqs, never 0 (fresh pages). */
static uint8_t pattern(uint64_t seq)
{
	return (uint8_t)((seq % 255u) + 1u);
}

int bench_paced;
uint64_t bench_seen_seq, bench_seen_lat_ns;

void bench_payload_write(void *buf, size_t size, uint64_t seq, int write)
{
	uint8_t *p = buf;
	uint64_t tail = ~seq;

	if (write)
		memset(p, pattern(seq), size);
	memcpy(p, &seq, 8);
	memcpy(p + size - 8, &tail, 8);
	if (bench_paced && size >= 24) {
		uint64_t now = bench_now_ns();

		memcpy(p + 8, &now, 8);
	}
}

int bench_payload_check(const void *buf, size_t size, uint64_t seq,
			int write)
{
	const uint8_t *p = buf;
	uint64_t head, tail;

	if (bench_paced && size >= 24) {
		uint64_t now = bench_now_ns(), stamp;

		memcpy(&stamp, p + 8, 8);
		memcpy(&head, p, 8);
		memcpy(&tail, p + size - 8, 8);
		if (head < seq || tail != ~head || stamp > now)
			return -EBADMSG;
		bench_seen_seq = head;
		bench_seen_lat_ns = now - stamp;
		return 0;
	}
	memcpy(&head, p, 8);
	memcpy(&tail, p + size - 8, 8);
	if (head != seq || tail != ~seq)
		return -EBADMSG;
	if (write) {
		/* OR of differences, no early exit: the compiler vectorises
		 * it, so checking reads at memory bandwidth. size is a
		 * multiple of 8 (checked by main). */
		uint64_t want = 0x0101010101010101ull * pattern(seq);
		uint64_t diff = 0;

		for (size_t i = 8; i + 8 <= size - 8; i += 8) {
			uint64_t w;

			memcpy(&w, p + i, 8);
			diff |= w ^ want;
		}
		if (diff)
			return -EBADMSG;
	}
	return 0;
}

void bench_prefault(void *buf, size_t size)
{
	volatile uint8_t *p = buf;
	long pg = sysconf(_SC_PAGESIZE);
	size_t step = pg > 0 ? (size_t)pg : 4096;

	for (size_t i = 0; i < size; i += step)
		p[i] = 0;
	if (size)
		p[size - 1] = 0;
}

int bench_write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int bench_read_all(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = recv(fd, p, len, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int bench_ack_send(int fd, uint64_t seq)
{
	return bench_write_all(fd, &seq, sizeof(seq));
}

int bench_ack_recv(int fd, uint64_t seq)
{
	uint64_t got;
	int rc = bench_read_all(fd, &got, sizeof(got));

	if (rc < 0)
		return rc;
	return got == seq ? 0 : -EBADMSG;
}

void *bench_map_anon(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	bench_prefault(p, size);
	return p;
}

int bench_spawn(const char *const argv[], const char *log_path,
		int (*pre_exec)(void *arg), void *arg)
{
	pid_t parent = getpid();
	int logfd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
			 0644);
	int st[2], err = 0;
	ssize_t n;
	pid_t pid;

	if (logfd < 0)
		return -errno;
	/* The child reports a failed hook or exec through this pipe; a
	 * successful exec closes it (CLOEXEC) with nothing written. */
	if (pipe2(st, O_CLOEXEC) < 0) {
		err = -errno;
		close(logfd);
		return err;
	}
	pid = fork();
	if (pid < 0) {
		err = -errno;
		close(logfd);
		close(st[0]);
		close(st[1]);
		return err;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);

		close(st[0]);
		/* The helper must not outlive the bench, whatever kills it. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(127);
		if (null >= 0)
			dup2(null, 0);
		dup2(logfd, 1);
		dup2(logfd, 2);
		/* Own process group: a terminal's ^C reaches the bench, which
		 * then stops the helper in order (not both at once). */
		setpgid(0, 0);
		err = pre_exec ? pre_exec(arg) : 0;
		if (err == 0) {
			execv(argv[0], (char *const *)argv);
			err = -errno;
		}
		if (write(st[1], &err, sizeof(err)) < 0)
			_exit(127);
		_exit(127);
	}
	close(logfd);
	close(st[1]);
	do
		n = read(st[0], &err, sizeof(err));
	while (n < 0 && errno == EINTR);
	close(st[0]);
	if (n == (ssize_t)sizeof(err) && err < 0) {
		waitpid(pid, NULL, 0);
		return err;
	}
	return pid;
}

void bench_reap(int pid, int grace_ms)
{
	int status;

	if (pid <= 0)
		return;
	if (waitpid(pid, &status, WNOHANG) == pid)
		return;
	kill(pid, SIGTERM);
	for (int t = 0; t < grace_ms; t += 10) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return;
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
}

static int file_contains(const char *path, const char *needle)
{
	char buf[65536];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	return strstr(buf, needle) != NULL;
}

int bench_wait_log(int pid, const char *log_path, const char *needle,
		   int timeout_ms)
{
	uint64_t end = bench_now_ns() + (uint64_t)timeout_ms * 1000000u;

	for (;;) {
		int status;

		if (file_contains(log_path, needle))
			return 0;
		if (waitpid(pid, &status, WNOHANG) == pid)
			return -ECHILD;
		if (bench_now_ns() > end)
			return -ETIMEDOUT;
		usleep(20000);
	}
}

/* Copy one log line into buf: colour codes dropped, quotes softened. */
static void clean_line(const char *s, const char *end, char *buf, size_t len)
{
	size_t o = 0;

	for (; s < end && *s && o + 1 < len; s++) {
		if (*s == 0x1b) { /* ESC [ ... m */
			while (s < end && *s && *s != 'm')
				s++;
			if (s == end || !*s)
				break;
			continue;
		}
		buf[o++] = (*s == '"' || *s == '\\') ? '\'' : *s;
	}
	buf[o] = 0;
}

void bench_log_tail(const char *log_path, char *buf, size_t len)
{
	static const char *const marks[] = { "Fatal", "Error", "error" };
	char tmp[16384];
	int fd = open(log_path, O_RDONLY | O_CLOEXEC);
	off_t end;
	ssize_t n;
	char *s;

	buf[0] = 0;
	if (fd < 0)
		return;
	end = lseek(fd, 0, SEEK_END);
	if (end > (off_t)sizeof(tmp) - 1)
		lseek(fd, end - (off_t)sizeof(tmp) + 1, SEEK_SET);
	else
		lseek(fd, 0, SEEK_SET);
	n = read(fd, tmp, sizeof(tmp) - 1);
	close(fd);
	if (n <= 0)
		return;
	tmp[n] = 0;
	/* the first line that says what went wrong, else the last line */
	for (size_t m = 0; m < sizeof(marks) / sizeof(marks[0]); m++) {
		char *hit = strstr(tmp, marks[m]), *b, *e;

		if (!hit)
			continue;
		for (b = hit; b > tmp && b[-1] != '\n'; b--)
			;
		e = strchr(hit, '\n');
		clean_line(b, e ? e : tmp + n, buf, len);
		return;
	}
	while (n > 0 && (tmp[n - 1] == '\n' || tmp[n - 1] == '\r'))
		tmp[--n] = 0;
	s = strrchr(tmp, '\n');
	s = s ? s + 1 : tmp;
	clean_line(s, tmp + n, buf, len);
}

/* A connect() succeeds: the daemon listens. 0 or -errno. */
static int try_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int s, rc;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	rc = connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? 0 : -errno;
	close(s);
	return rc;
}

int bench_tensord_start(const struct bench_env *env, const char *tag,
			char *sock, size_t sock_len, int *pid, char *why,
			size_t why_len)
{
	char logp[300];
	uint64_t end;
	int rc;

	*pid = -1;
	if (access(env->tensord_path, X_OK) != 0) {
		snprintf(why, why_len, "daemon binary %.200s not found",
			 env->tensord_path);
		return -ENOENT;
	}
	snprintf(sock, sock_len, "%.200s/%s.sock", env->tmpdir, tag);
	snprintf(logp, sizeof(logp), "%.200s/%s.log", env->tmpdir, tag);
	{
		const char *argv[] = { env->tensord_path, "--socket", sock,
				       "--log-level", "warn", NULL };

		rc = bench_spawn(argv, logp, NULL, NULL);
	}
	if (rc < 0) {
		snprintf(why, why_len, "cannot start tensord: %s",
			 strerror(-rc));
		return rc;
	}
	*pid = rc;
	/* ready once a connect succeeds; 20 s for one that never comes up */
	end = bench_now_ns() + 20000000000ull;
	for (;;) {
		int status;

		if (try_connect(sock) == 0)
			break;
		if (waitpid(*pid, &status, WNOHANG) == *pid ||
		    bench_now_ns() > end) {
			char tail[200];

			bench_log_tail(logp, tail, sizeof(tail));
			snprintf(why, why_len, "tensord did not come up: %s",
				 tail[0] ? tail : "(no output)");
			bench_reap(*pid, 2000);
			*pid = -1;
			return -EIO;
		}
		usleep(5000);
	}
	if (env->verbose)
		fprintf(stderr, "bench: tensord pid %d on %s\n", *pid, sock);
	return 0;
}

int bench_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

uint64_t bench_pct(const uint64_t *s, size_t n, double q)
{
	size_t i = (size_t)(q * (double)(n - 1) + 0.5);

	return n ? s[i] : 0;
}

double bench_median_d(double *v, unsigned n)
{
	for (unsigned i = 1; i < n; i++)
		for (unsigned j = i; j > 0 && v[j - 1] > v[j]; j--) {
			double t = v[j];

			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
