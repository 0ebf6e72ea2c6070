/* SPDX-License-Identifier: MIT */
/*
 * tensord: options, logging, signals, start-up and clean shutdown.
 * Foreground only, no config file (docs/protocol.md, "The daemon").
 */
#include "daemon.h"
#include "sd.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

int td__log_level = TD_LOG_INFO;
struct td__daemon *td__d;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void td__log(int level, const char *fmt, ...)
{
	va_list ap;

	if (level > td__log_level)
		return;
	fprintf(stderr, "tensord: %s: ", level_names[level]);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

bool td__ratelimit_ok(struct td__ratelimit *r, unsigned interval_ms)
{
	struct timespec ts;
	uint64_t now;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	if (r->next_ms && now < r->next_ms) {
		r->suppressed++;
		return false;
	}
	r->next_ms = now + interval_ms;
	return true;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: tensord [OPTION]...\n"
		"Hold named tensors in shared memory and hand them between "
		"processes.\n\n"
		"  -s, --socket PATH     listen on PATH (default: "
		"$TENSORD_SOCKET,\n"
		"                        else $XDG_RUNTIME_DIR/tensord.sock, "
		"else\n"
		"                        /run/tensord/tensord.sock)\n"
		"  -l, --log-level LVL   error, warn, info (default) or debug\n"
		"  -i, --import MODE     how fds reach the daemon: auto "
		"(default),\n"
		"                        pidfd or scm (forced)\n"
		"  -m, --max-bytes N     total plane bytes held (default: "
		"half of\n"
		"                        physical memory; 0 = unlimited); "
		"suffixes\n"
		"                        K, M, G (powers of 1024)\n"
		"  -u, --uid-max-bytes N plane bytes one uid may hold "
		"(default quota;\n"
		"                        without it: half of --max-bytes for "
		"uids\n"
		"                        other than root and tensord's own)\n"
		"      --uid-limit KEY=N what one uid may make the daemon "
		"hold: KEY\n"
		"                        conns, fds, leases, pinned (bytes), "
		"watches,\n"
		"                        waiters, rings, queued (bytes); "
		"0 = none;\n"
		"                        repeatable (docs/policy.md)\n"
		"  -p, --policy FILE     who may read/write which names, "
		"quotas\n"
		"                        (docs/policy.md)\n"
		"      --socket-mode M   octal mode of the socket file "
		"(e.g. 0660)\n"
		"      --socket-group G  group (name or number) of the "
		"socket file\n"
		"  -h, --help            show this help\n"
		"  -V, --version         show the version\n\n"
		"Runs in the foreground and logs to stderr. SIGINT/SIGTERM "
		"stop it\n"
		"cleanly (the socket file is removed).\n");
}

static int parse_bytes(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	errno = 0;
	if (*s == '-')
		return -EINVAL;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 'K': case 'k': shift = 10; end++; break;
	case 'M': case 'm': shift = 20; end++; break;
	case 'G': case 'g': shift = 30; end++; break;
	default: break;
	}
	if (*end || (shift && v > (UINT64_MAX >> shift)))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

/* --uid-limit KEY=N (N[K|M|G] for the byte limits). 0 or -EINVAL. */
static int parse_limit(const char *s, uint64_t *lim, unsigned *set)
{
	const char *eq = strchr(s, '=');

	if (!eq)
		return -EINVAL;
	for (int k = 0; k < TD__LIM_COUNT; k++) {
		if (strlen(td__lim_names[k]) != (size_t)(eq - s) ||
		    strncmp(s, td__lim_names[k], (size_t)(eq - s)))
			continue;
		if (k != TD__LIM_PINNED && k != TD__LIM_QUEUED &&
		    strpbrk(eq + 1, "KkMmGg"))
			return -EINVAL;
		if (parse_bytes(eq + 1, &lim[k]) < 0)
			return -EINVAL;
		*set |= 1u << k;
		return 0;
	}
	return -EINVAL;
}

/* The daemon's open descriptors now (its own: log, loop, signals...). */
static unsigned fds_open(void)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *e;
	unsigned n = 0;

	if (!dir)
		return 32;
	while ((e = readdir(dir)))
		if (e->d_name[0] != '.')
			n++;
	closedir(dir);
	return n; /* the DIR's own fd is one more than will stay: slack */
}

/* --socket-group: a group name or number. 0 or -EINVAL. */
static int parse_group(const char *s, gid_t *out)
{
	struct group *g = getgrnam(s);
	char *end;
	unsigned long v;

	if (g) {
		*out = g->gr_gid;
		return 0;
	}
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v >= (gid_t)-1)
		return -EINVAL;
	*out = (gid_t)v;
	return 0;
}

/* The socket path, into buf; precedence as in usage(). */
static const char *socket_path(const char *opt, char *buf, size_t cap)
{
	const char *env = getenv("TENSORD_SOCKET");
	const char *xdg = getenv("XDG_RUNTIME_DIR");

	if (opt)
		return opt;
	if (env && *env)
		return env;
	if (xdg && *xdg) {
		snprintf(buf, cap, "%s/tensord.sock", xdg);
		return buf;
	}
	return "/run/tensord/tensord.sock";
}

static void on_signal(uv_signal_t *sig, int signum)
{
	struct td__daemon *d = sig->data;

	td__log(TD_LOG_INFO, "signal %d: shutting down", signum);
	uv_stop(d->loop);
}

/* fds are the daemon's working set (up to 9 per version): lift the cap. */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static void close_walk(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

/*
 * Without --max-bytes, half of physical memory. Planes live in tmpfs,
 * which has no limit of its own: an unbounded daemon lets one client's
 * ALLOC (fallocate'd up front) take every page of the machine, and the
 * OOM killer then picks someone else. 0 still means unlimited, on request.
 */
static uint64_t default_max_bytes(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

	if (pages <= 0 || psz <= 0)
		return 1ull << 30;
	return (uint64_t)pages * (uint64_t)psz / 2;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},
		{"log-level", required_argument, NULL, 'l'},
		{"import", required_argument, NULL, 'i'},
		{"max-bytes", required_argument, NULL, 'm'},
		{"uid-max-bytes", required_argument, NULL, 'u'},
		{"policy", required_argument, NULL, 'p'},
		{"socket-mode", required_argument, NULL, 1},
		{"socket-group", required_argument, NULL, 2},
		{"uid-limit", required_argument, NULL, 3},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	char pathbuf[4096];
	const char *sock_opt = NULL;
	struct td__daemon *d;
	uv_signal_t sigint, sigterm;
	uv_loop_t loop;
	uint32_t import = TD_IMPORT_AUTO;
	uint64_t max_bytes = UINT64_MAX, uid_max_bytes = 0;
	uint64_t uid_limit[TD__LIM_COUNT] = {0};
	unsigned uid_limit_set = 0;
	bool uid_max_bytes_set = false;
	const char *policy_path = NULL;
	int socket_mode = -1;
	gid_t socket_gid = (gid_t)-1;
	char *end;
	int c, rc, status = 1;

	while ((c = getopt_long(argc, argv, "s:l:i:m:u:p:hV", opts, NULL)) !=
	       -1) {
		switch (c) {
		case 's':
			sock_opt = optarg;
			break;
		case 'l':
			for (c = 0; c < 4; c++)
				if (!strcmp(optarg, level_names[c]))
					break;
			if (c == 4) {
				fprintf(stderr,
					"tensord: --log-level: want error, "
					"warn, info or debug\n");
				return 2;
			}
			td__log_level = c;
			break;
		case 'i':
			if (!strcmp(optarg, "auto"))
				import = TD_IMPORT_AUTO;
			else if (!strcmp(optarg, "pidfd"))
				import = TD_IMPORT_PIDFD;
			else if (!strcmp(optarg, "scm"))
				import = TD_IMPORT_SCM;
			else {
				fprintf(stderr, "tensord: --import: want auto, "
						"pidfd or scm\n");
				return 2;
			}
			break;
		case 'm':
			if (parse_bytes(optarg, &max_bytes) < 0) {
				fprintf(stderr, "tensord: --max-bytes: not a "
						"byte count: %s\n",
					optarg);
				return 2;
			}
			break;
		case 'u':
			uid_max_bytes_set = true;
			if (parse_bytes(optarg, &uid_max_bytes) < 0) {
				fprintf(stderr, "tensord: --uid-max-bytes: "
						"not a byte count: %s\n",
					optarg);
				return 2;
			}
			break;
		case 'p':
			policy_path = optarg;
			break;
		case 1:
			errno = 0;
			socket_mode = (int)strtol(optarg, &end, 8);
			if (errno || end == optarg || *end ||
			    socket_mode < 0 || socket_mode > 0777) {
				fprintf(stderr, "tensord: --socket-mode: want "
						"an octal mode like 0660\n");
				return 2;
			}
			break;
		case 3:
			if (parse_limit(optarg, uid_limit, &uid_limit_set) <
			    0) {
				fprintf(stderr,
					"tensord: --uid-limit: want KEY=N with "
					"KEY conns, fds, leases, pinned, "
					"watches, waiters, rings or queued: "
					"%s\n",
					optarg);
				return 2;
			}
			break;
		case 2:
			if (parse_group(optarg, &socket_gid) < 0) {
				fprintf(stderr, "tensord: --socket-group: no "
						"such group: %s\n",
					optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("tensord %s\n", TD_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "tensord: unexpected argument: %s\n",
			argv[optind]);
		return 2;
	}

	d = calloc(1, sizeof(*d));
	if (!d) {
		fprintf(stderr, "tensord: out of memory\n");
		return 1;
	}
	td__d = d;
	d->opts.socket_path = socket_path(sock_opt, pathbuf, sizeof(pathbuf));
	d->opts.import = import;
	if (max_bytes == UINT64_MAX)
		max_bytes = default_max_bytes();
	d->opts.max_bytes = max_bytes;
	d->opts.uid_max_bytes = uid_max_bytes;
	d->opts.uid_max_bytes_set = uid_max_bytes_set;
	memcpy(d->opts.uid_limit, uid_limit, sizeof(uid_limit));
	d->opts.uid_limit_set = uid_limit_set;
	d->opts.policy_path = policy_path;
	d->opts.socket_mode = socket_mode;
	d->opts.socket_gid = socket_gid;
	d->opts.no_peerpidfd = getenv("TENSORD_TEST_NO_PEERPIDFD") != NULL;
	d->pid = getpid();
	td__list_init(&d->peers);
	raise_nofile();
	/* a peer that hangs up mid-send must not kill us (MSG_NOSIGNAL too) */
	signal(SIGPIPE, SIG_IGN);

	rc = uv_loop_init(&loop);
	if (rc < 0) {
		td__log(TD_LOG_ERROR, "uv_loop_init: %s", uv_strerror(rc));
		free(d);
		return 1;
	}
	d->loop = &loop;
	d->pidfd = import == TD_IMPORT_SCM ? -1 : td__pidfd_open(d->pid);
	if (d->pidfd < 0 && import != TD_IMPORT_SCM)
		td__log(TD_LOG_WARN, "pidfd_open(self): %s; clients receive "
				     "fds by SCM_RIGHTS",
			strerror(-d->pidfd));
	if (d->pidfd < 0)
		d->pidfd = -1;
	uv_idle_init(&loop, &d->reaper);
	d->reaper.data = d;
	uv_signal_init(&loop, &sigint);
	uv_signal_init(&loop, &sigterm);
	sigint.data = sigterm.data = d;
	uv_signal_start(&sigint, on_signal, SIGINT);
	uv_signal_start(&sigterm, on_signal, SIGTERM);

	if (policy_path) {
		d->policy = calloc(1, sizeof(*d->policy));
		if (!d->policy ||
		    td__policy_load(policy_path, d->policy) < 0)
			goto out;
	}
	td__tenants_init(d, fds_open());
	/* restore before listening: clients never see a half-filled store */
	if (td__sd_init(d) < 0 || td__store_new(d) < 0 ||
	    td__fdstore_restore(d) < 0 || td__server_start(d) < 0)
		goto out;
	td__sd_ready(d);
	/*
	 * Root pulls fds with root's privileges and holds every tenant's
	 * memory; the checks in cred.c keep pidfd import from being turned
	 * against a third process, but a dedicated user is the first line.
	 */
	if (geteuid() == 0)
		td__log(TD_LOG_WARN,
			"running as root: run tensord as a dedicated user "
			"(the systemd unit's User=tensord); see "
			"docs/reliability.md, \"Trust model\"");
	td__log(TD_LOG_INFO, "pid %d, import %s, max-bytes %" PRIu64,
		(int)d->pid,
		import == TD_IMPORT_AUTO    ? "auto"
		: import == TD_IMPORT_PIDFD ? "pidfd"
					    : "scm",
		max_bytes);
	uv_run(&loop, UV_RUN_DEFAULT);
	status = 0;
out:
	td__sd_stopping(d);
	/* order: stop accepting, drop peers (their leases), then the store */
	td__server_stop(d);
	td__peer_drop_all(d);
	td__fdstore_fini(); /* the final image, before the store lets go */
	td__store_free(d);
	td__fdstore_free();
	uv_walk(&loop, close_walk, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	if (uv_loop_close(&loop) < 0)
		td__log(TD_LOG_WARN, "loop closed with live handles");
	if (d->pidfd >= 0)
		close(d->pidfd);
	td__sd_fini();
	td__tenants_fini();
	td__policy_fini(d->policy);
	free(d->policy);
	free(d);
	td__d = NULL;
	return status;
}
