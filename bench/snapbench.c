/* SPDX-License-Identifier: MIT */
/*
 * tensord-snapbench: what a snapshot costs (issue 12).
 *
 * For each file I/O engine (TENSORD_IO=uring, sync):
 *
 *   1. start a private tensord with --snapshot DIR/snap.hrry and a save
 *      interval long enough for the fill; publish --size bytes in
 *      --tensor sized tensors (ALLOC + fill + PUBLISH);
 *   2. measure request latency with no save running (baseline), then
 *      while the first save writes everything: a client loops over
 *      PUBLISH of a 64-byte tensor + GET + RELEASE of it, one request at
 *      a time, timing each; "during" = requests that ended between the
 *      daemon's "saving" and "saved" log lines;
 *   3. restore: start a daemon on the snapshot, page cache warm, then
 *      cold (sync; echo 3 > /proc/sys/vm/drop_caches, when permitted),
 *      and read the restore time from its log line.
 *
 * The figures go to stdout as a markdown table; nothing is asserted.
 * Needs size x 3 of memory (the daemon's planes, the page cache, the
 * restoring daemon) and size of disk in DIR.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tensord/tensord.h"

struct opts {
	const char *daemon;
	const char *dir;
	uint64_t size, tensor;
	unsigned interval;
	const char *engines;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *fmt, const char *arg)
{
	fprintf(stderr, "tensord-snapbench: ");
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
	exit(1);
}

static uint64_t parse_size(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 10);

	if (*end == 'K' || *end == 'k')
		v <<= 10;
	else if (*end == 'M' || *end == 'm')
		v <<= 20;
	else if (*end == 'G' || *end == 'g')
		v <<= 30;
	return v;
}

struct daemon {
	pid_t pid;
	char sock[100], log[200], snap[200];
};

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *b = NULL;
	size_t cap = 0, len = 0, n;

	if (!f)
		return strdup("");
	do {
		if (len + 4096 + 1 > cap) {
			cap = cap ? cap * 2 : 65536;
			b = realloc(b, cap);
			if (!b)
				die("%s", "out of memory");
		}
		n = fread(b + len, 1, 4096, f);
		len += n;
	} while (n);
	fclose(f);
	b[len] = 0;
	return b;
}

/* The log line holding text, copied into out (false when none yet). */
static bool log_line(const struct daemon *d, const char *text, char *out,
		     size_t cap)
{
	char *l = slurp(d->log), *at = strstr(l, text);
	bool found = at != NULL;

	if (at && out) {
		char *nl = strchr(at, '\n');

		snprintf(out, cap, "%.*s",
			 (int)(nl ? (size_t)(nl - at) : strlen(at)), at);
	}
	free(l);
	return found;
}

static void start(struct daemon *d, const struct opts *o, const char *io,
		  unsigned interval)
{
	char iv[32];

	snprintf(iv, sizeof(iv), "%u", interval);
	d->pid = fork();
	if (d->pid < 0)
		die("fork: %s", strerror(errno));
	if (d->pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
			      0600);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd < 0 || dup2(fd, 2) < 0)
			_exit(126);
		setenv("TENSORD_IO", io, 1);
		execl(o->daemon, o->daemon, "--socket", d->sock, "--snapshot",
		      d->snap, "--snapshot-interval", iv, "--max-bytes", "0",
		      (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 60000; i++) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

		memcpy(sa.sun_path, d->sock, sizeof(d->sock));
		if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(s);
			return;
		}
		close(s);
		if (waitpid(d->pid, NULL, WNOHANG) == d->pid)
			die("tensord exited at start; see %s", d->log);
		usleep(10000);
	}
	die("tensord did not start; see %s", d->log);
}

static void stop(struct daemon *d, int sig)
{
	kill(d->pid, sig);
	waitpid(d->pid, NULL, 0);
	unlink(d->sock);
}

static struct td_client *conn(const struct daemon *d)
{
	struct td_client *c = NULL;
	struct td_error e = {0};

	if (td_client_connect(d->sock, &c, &e) < 0)
		die("connect: %s", e.reason);
	return c;
}

static void fill(struct td_client *c, const struct opts *o)
{
	uint64_t n = o->size / o->tensor;

	for (uint64_t i = 0; i < n; i++) {
		struct td_alloc *a;
		struct td_error e = {0};
		char name[64];
		uint64_t shape = o->tensor;
		struct td_publish p = {.name = name,
				       .dtype = TD_TENSOR_U8,
				       .ndim = 1,
				       .shape = &shape};

		snprintf(name, sizeof(name), "bench/t%04" PRIu64, i);
		if (td_client_alloc(c, 1, &o->tensor, &a, &e) < 0)
			die("alloc: %s", e.reason);
		memset(td_alloc_data(a, 0), (int)(i * 37 + 1),
		       (size_t)o->tensor);
		if (td_client_publish_alloc(c, a, &p, NULL, &e) < 0)
			die("publish: %s", e.reason);
	}
}

/* One request pair: PUBLISH 64 B, GET + RELEASE it; ns of each. */
static void ping(struct td_client *c, uint64_t *pub, uint64_t *get)
{
	static uint8_t b[64];
	static const uint64_t shape = 64;
	struct td_publish p = {.name = "bench/ping",
			       .dtype = TD_TENSOR_U8,
			       .ndim = 1,
			       .shape = &shape};
	struct td_error e = {0};
	struct td_tensor *t;
	uint64_t t0 = now_ns();

	if (td_client_put(c, &p, b, sizeof(b), NULL, &e) < 0)
		die("put: %s", e.reason);
	*pub = now_ns() - t0;
	t0 = now_ns();
	if (td_client_get(c, p.name, &t, &e) < 0)
		die("get: %s", e.reason);
	td_tensor_release(t);
	*get = now_ns() - t0;
}

struct lat {
	uint64_t n, max, sum;
	uint64_t *all;
	size_t cap;
};

static void lat_add(struct lat *l, uint64_t ns)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 4096;
		l->all = realloc(l->all, l->cap * sizeof(*l->all));
		if (!l->all)
			die("%s", "out of memory");
	}
	l->all[l->n++] = ns;
	l->sum += ns;
	if (ns > l->max)
		l->max = ns;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double p99_us(struct lat *l)
{
	if (!l->n)
		return 0;
	qsort(l->all, l->n, sizeof(*l->all), cmp_u64);
	return l->all[l->n * 99 / 100] / 1e3;
}

/* "restored N of N tensors from F in M ms": M, or -1. */
static long restore_ms(const struct daemon *d)
{
	char line[512], *in;

	if (!log_line(d, "snapshot: restored", line, sizeof(line)))
		return -1;
	in = strstr(line, " in ");
	return in ? strtol(in + 4, NULL, 10) : -1;
}

static bool drop_caches(void)
{
	int fd;
	bool ok;

	sync();
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ok = write(fd, "3", 1) == 1;
	close(fd);
	return ok;
}

static void run(const struct opts *o, const char *io)
{
	struct daemon d;
	struct td_client *c;
	struct lat base_pub = {0}, base_get = {0}, save_pub = {0},
		   save_get = {0};
	char line[512];
	bool saving = false;
	uint64_t t_fill, pub, get, save_ns = 0, t_save = 0;
	long warm, cold = -1;
	double gb = (double)o->size / 1e9;

	snprintf(d.sock, sizeof(d.sock), "%s/td.sock", o->dir);
	snprintf(d.log, sizeof(d.log), "%s/log-%s", o->dir, io);
	snprintf(d.snap, sizeof(d.snap), "%s/snap.hrry", o->dir);
	unlink(d.snap);
	start(&d, o, io, o->interval);
	if (!log_line(&d, "file I/O: ", line, sizeof(line)))
		die("%s", "no file I/O line in the log");
	fprintf(stderr, "%s: %s\n", io, line);
	c = conn(&d);
	t_fill = now_ns();
	fill(c, o);
	t_fill = now_ns() - t_fill;
	fprintf(stderr, "%s: filled %.2f GB in %.1f s\n", io, gb,
		(double)t_fill / 1e9);
	if (log_line(&d, "snapshot: saving", NULL, 0))
		die("%s", "the save began during the fill: raise --interval");
	/* baseline: no save running */
	for (int i = 0; i < 2000; i++) {
		ping(c, &pub, &get);
		lat_add(&base_pub, pub);
		lat_add(&base_get, get);
	}
	/* then until the save is done (it starts at the interval) */
	for (uint64_t i = 0;; i++) {
		ping(c, &pub, &get);
		if (saving) {
			lat_add(&save_pub, pub);
			lat_add(&save_get, get);
		}
		if (i % 16)
			continue;
		if (!saving && log_line(&d, "snapshot: saving", NULL, 0)) {
			saving = true;
			t_save = now_ns();
		}
		if (saving && log_line(&d, "snapshot: saved", line,
				       sizeof(line))) {
			save_ns = now_ns() - t_save;
			break;
		}
	}
	td_client_close(c);
	fprintf(stderr, "%s: %s\n", io, line);
	/* the snapshot on disk is whole; no final save needed */
	stop(&d, SIGKILL);

	start(&d, o, io, 3600);
	warm = restore_ms(&d);
	stop(&d, SIGTERM);
	if (drop_caches()) {
		start(&d, o, io, 3600);
		cold = restore_ms(&d);
		stop(&d, SIGTERM);
	}
	printf("| %s | %.2f | %.1f | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f "
	       "| %.0f / %.0f | %.2f | %s |\n",
	       io, gb, (double)save_ns / 1e9, p99_us(&base_pub),
	       base_pub.max / 1e3, p99_us(&base_get), base_get.max / 1e3,
	       p99_us(&save_pub), save_pub.max / 1e3, p99_us(&save_get),
	       save_get.max / 1e3, warm > 0 ? gb / (warm / 1e3) : 0.0,
	       cold > 0 ? (snprintf(line, sizeof(line), "%.2f",
				    gb / (cold / 1e3)),
			   line)
			: "n/a (cannot drop caches)");
	fflush(stdout);
	unlink(d.snap);
	free(base_pub.all);
	free(base_get.all);
	free(save_pub.all);
	free(save_get.all);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"tensord", required_argument, NULL, 'd'},
		{"daemon", required_argument, NULL, 'd'}, /* its old name */
		{"dir", required_argument, NULL, 'D'},
		{"size", required_argument, NULL, 's'},
		{"tensor", required_argument, NULL, 't'},
		{"interval", required_argument, NULL, 'i'},
		{"io", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct opts o = {.daemon = getenv("TD_TENSORD"),
			 .dir = "/var/tmp",
			 .size = 4ull << 30,
			 .tensor = 256ull << 20,
			 .interval = 15,
			 .engines = "uring,sync"};
	char dir[256], *eng, *save = NULL;
	int c;

#ifdef TD_SNAPBENCH_TENSORD_DEFAULT
	if (!o.daemon)
		o.daemon = TD_SNAPBENCH_TENSORD_DEFAULT;
#endif
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'd': o.daemon = optarg; break;
		case 'D': o.dir = optarg; break;
		case 's': o.size = parse_size(optarg); break;
		case 't': o.tensor = parse_size(optarg); break;
		case 'i': o.interval = (unsigned)atoi(optarg); break;
		case 'o': o.engines = optarg; break;
		case 'h':
		default:
			fprintf(c == 'h' ? stdout : stderr,
				"usage: tensord-snapbench [--size 4G] "
				"[--tensor 256M] [--dir /var/tmp] "
				"[--interval 15] [--io uring,sync] "
				"[--tensord PATH]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (!o.daemon)
		die("%s", "no daemon: --tensord PATH or $TD_TENSORD");
	if (!o.tensor || o.size < o.tensor)
		die("%s", "--size must be at least --tensor");
	snprintf(dir, sizeof(dir), "%s/td-snapbench-XXXXXX", o.dir);
	if (!mkdtemp(dir))
		die("mkdtemp: %s", strerror(errno));
	o.dir = dir;
	printf("| engine | GB | save s | baseline PUBLISH p99 / max us | "
	       "baseline GET p99 / max us | during save PUBLISH p99 / max us "
	       "| during save GET p99 / max us | restore warm GB/s | "
	       "restore cold GB/s |\n|---|---:|---:|---:|---:|---:|---:|---:|"
	       "---:|\n");
	eng = strdup(o.engines);
	for (char *io = strtok_r(eng, ",", &save); io;
	     io = strtok_r(NULL, ",", &save))
		run(&o, io);
	free(eng);
	{
		char p[300];

		snprintf(p, sizeof(p), "%s/log-uring", dir);
		unlink(p);
		snprintf(p, sizeof(p), "%s/log-sync", dir);
		unlink(p);
		snprintf(p, sizeof(p), "%s/snap.hrry.lock", dir);
		unlink(p);
		rmdir(dir);
	}
	return 0;
}
