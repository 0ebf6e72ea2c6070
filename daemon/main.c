/* SPDX-License-Identifier: MIT */
/*
 * tensord: options, logging, signals, start-up and clean shutdown.
 * Foreground only, no config file (docs/protocol.md, "The daemon").
 */
#include "daemon.h"
#include "http-hdr.h"
#include "bytes.h"
#include "os.h"
#include "sd.h"
#include "snapshot.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

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
		"                        K, M, G, T (powers of 1024)\n"
		"  -u, --uid-max-bytes N plane bytes one uid may hold "
		"(default quota;\n"
		"                        without it: half of --max-bytes for "
		"uids\n"
		"                        other than root and tensord's own)\n"
		"      --uid-limit KEY=N what one uid (not root or tensord's "
		"own) may\n"
		"                        make the daemon hold: KEY\n"
		"                        conns, fds, leases, pinned (bytes), "
		"watches,\n"
		"                        waiters, rings, queued (bytes); "
		"0 = none;\n"
		"                        repeatable (docs/policy.md)\n"
		"  -p, --policy FILE     who may read/write which names, "
		"quotas\n"
		"                        (docs/policy.md)\n"
		"      --check-policy FILE  parse FILE as --policy would, "
		"print its\n"
		"                        rules' count (status 0) or why it is\n"
		"                        refused (status 1), and exit\n"
		"      --own-fences-only a GET of a version fenced by an "
		"eventfd is\n"
		"                        refused to clients that cannot take "
		"a fence\n"
		"                        of their own (docs/fastpath.md, "
		"\"Fences\")\n"
		"      --socket-mode M   octal mode of the socket file "
		"(e.g. 0660)\n"
		"      --socket-group G  group (name or number) of the "
		"socket file\n"
		"      --http ADDR       serve tensors read-only over HTTP "
		"(Zarr v3, v2,\n"
		"                        /metrics) on 127.0.0.1:PORT, "
		"[::1]:PORT,\n"
		"                        unix:PATH or another numeric "
		"ADDRESS:PORT;\n"
		"                        no authentication (docs/zarr.md)\n"
		"      --http-prefix P   export the names under P (default: "
		"none;\n"
		"                        \"\" = every name)\n"
		"      --http-max-connections N  open HTTP connections "
		"(default 256)\n"
		"      --http-timeout S  HTTP connections idle, or with a "
		"request\n"
		"                        not whole, close after S seconds "
		"(default 30)\n"
		"      --http-cors ORIGINS  let pages of these origins read "
		"the store\n"
		"                        from a browser: * or "
		"scheme://host[:port],...\n"
		"                        (default: none, no CORS headers)\n"
		"      --snapshot FILE   keep every tensor in FILE (a Hurray "
		"file):\n"
		"                        restored at start, saved after "
		"changes\n"
		"                        and at a clean stop "
		"(docs/snapshot.md)\n"
		"      --snapshot-interval S  at most one save every S "
		"seconds\n"
		"                        (default 30; 0 = right after each "
		"change)\n"
		"      --snapshot-prefix P  keep only the names under P "
		"(repeatable;\n"
		"                        default: every name)\n"
		"      --snapshot-skip P  never keep the names under P "
		"(repeatable;\n"
		"                        wins over --snapshot-prefix)\n"
		"  -h, --help            show this help\n"
		"  -V, --version         show the version\n\n"
		"Runs in the foreground and logs to stderr. SIGINT/SIGTERM "
		"stop it\n"
		"cleanly (the socket file is removed).\n");
}

/* --uid-limit KEY=N (N[K|M|G|T] for the byte limits). 0 or -EINVAL. */
static int parse_limit(const char *s, struct td__opts *o)
{
	const char *eq = strchr(s, '=');

	if (!eq)
		return -EINVAL;
	for (int k = 0; k < TD__LIM_COUNT; k++) {
		if (strlen(td__lim_names[k]) != (size_t)(eq - s) ||
		    strncmp(s, td__lim_names[k], (size_t)(eq - s)))
			continue;
		if (td__policy_limit_value(k, eq + 1, strlen(eq + 1),
					   &o->uid_limit[k]) < 0)
			return -EINVAL;
		o->uid_limit_set |= 1u << k;
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
	d->stop_asked = true;
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
 * ALLOC (reserved up front, by the daemon or the client) take every page
 * of the machine, and the OOM killer then picks someone else. 0 still means unlimited, on request.
 */
static uint64_t default_max_bytes(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

	if (pages <= 0 || psz <= 0)
		return 1ull << 30;
	return (uint64_t)pages * (uint64_t)psz / 2;
}

static const struct option long_opts[] = {
	{"socket", required_argument, NULL, 's'},
	{"log-level", required_argument, NULL, 'l'},
	{"import", required_argument, NULL, 'i'},
	{"max-bytes", required_argument, NULL, 'm'},
	{"uid-max-bytes", required_argument, NULL, 'u'},
	{"policy", required_argument, NULL, 'p'},
	{"socket-mode", required_argument, NULL, 1},
	{"socket-group", required_argument, NULL, 2},
	{"snapshot", required_argument, NULL, 3},
	{"snapshot-interval", required_argument, NULL, 4},
	{"snapshot-prefix", required_argument, NULL, 8},
	{"snapshot-skip", required_argument, NULL, 9},
	{"uid-limit", required_argument, NULL, 5},
	{"own-fences-only", no_argument, NULL, 6},
	{"check-policy", required_argument, NULL, 7},
	{"http", required_argument, NULL, 20},
	{"http-prefix", required_argument, NULL, 21},
	{"http-max-connections", required_argument, NULL, 22},
	{"http-timeout", required_argument, NULL, 23},
	{"http-cors", required_argument, NULL, 24},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, 'V'},
	{NULL, 0, NULL, 0},
};

/*
 * --check-policy FILE: parse it as the start and a SIGHUP's reload do
 * and say so, then exit (-1: status 0; 1: refused, the reason with its
 * line on stderr), so an operator tries a file before the reload.
 */
static int check_policy(const char *path)
{
	struct td__policy pol = {0};
	int rc;

	td__log_level = TD_LOG_ERROR; /* the summary goes to stdout */
	rc = td__policy_load(path, &pol);
	if (rc >= 0)
		printf("policy %s: ok, %u allow rules, %u quotas, %u limits\n",
		       path, pol.nrules, pol.nquotas, pol.nlimits);
	td__policy_fini(&pol);
	return rc < 0 ? 1 : -1;
}

/*
 * --snapshot-prefix P (c 8) and --snapshot-skip P (c 9): a name prefix
 * as --http-prefix and a policy's PREFIX take (td_wire_name_check),
 * but not "": every name is what no --snapshot-prefix means, and
 * skipping every name is no snapshot. 0, or the exit status.
 */
static int parse_snapshot_prefix(int c, const char *arg, struct td__opts *o)
{
	const char *opt = c == 8 ? "--snapshot-prefix" : "--snapshot-skip";
	const char **to = c == 8 ? o->snapshot_keep : o->snapshot_skip;
	unsigned *n = c == 8 ? &o->snapshot_nkeep : &o->snapshot_nskip;
	const char *why = NULL;

	if (!*arg)
		why = c == 8 ? "empty (every name is kept without "
			       "--snapshot-prefix)"
			     : "empty (it would skip every name: leave "
			       "--snapshot out instead)";
	else
		td_wire_name_check(arg, strlen(arg), true, &why);
	if (why) {
		fprintf(stderr, "tensord: %s '%s': not a valid name prefix: "
				"%s\n",
			opt, arg, why);
		return 2;
	}
	if (*n == TD__SNAPSHOT_MAX_PREFIXES) {
		fprintf(stderr, "tensord: %s: at most %u of them\n", opt,
			TD__SNAPSHOT_MAX_PREFIXES);
		return 2;
	}
	to[(*n)++] = arg;
	return 0;
}

/* The --http options (docs/zarr.md). 0, or the exit status. */
static int parse_http_opt(int c, const char *arg, struct td__opts *o)
{
	char *end;
	long v;

	switch (c) {
	case 20: {
		const char *why = NULL;

		if (td__http_addr_check(arg, &why) < 0) {
			fprintf(stderr, "tensord: --http %s: %s\n", arg, why);
			return 2;
		}
		o->http_addr = arg;
		return 0;
	}
	case 21:
		if (*arg && td_wire_name_check(arg, strlen(arg), true, NULL) < 0) {
			fprintf(stderr, "tensord: --http-prefix: not a valid "
					"name prefix: %s\n",
				arg);
			return 2;
		}
		o->http_prefix = arg;
		return 0;
	case 24: {
		const char *why = NULL;

		if (td__http_cors_check(arg, &why) < 0) {
			fprintf(stderr, "tensord: --http-cors %s: %s\n", arg,
				why);
			return 2;
		}
		o->http_cors = arg;
		return 0;
	}
	default:
		/* digits only: strtol() also takes a sign and spaces */
		errno = 0;
		v = strtol(arg, &end, 10);
		if (errno || !isdigit((unsigned char)*arg) || *end || v < 1 ||
		    v > 65536) {
			fprintf(stderr, "tensord: --%s: want 1 to 65536\n",
				c == 22 ? "http-max-connections"
					: "http-timeout");
			return 2;
		}
		if (c == 22)
			o->http_max_connections = (unsigned)v;
		else
			o->http_timeout = (unsigned)v;
		return 0;
	}
}

/* --import MODE. 0, or the exit status after a message. */
static int parse_import(const char *arg, struct td__opts *o)
{
	if (!strcmp(arg, "auto"))
		o->import = TD_IMPORT_AUTO;
	else if (!strcmp(arg, "pidfd"))
		o->import = TD_IMPORT_PIDFD;
	else if (!strcmp(arg, "scm"))
		o->import = TD_IMPORT_SCM;
	else {
		fprintf(stderr, "tensord: --import: want auto, pidfd or scm\n");
		return 2;
	}
	return 0;
}

/* One option's value into o. 0, or the exit status after a message. */
static int parse_opt(int c, const char *arg, struct td__opts *o)
{
	unsigned long long secs;
	char *end;

	switch (c) {
	case 's':
		/* "": bind() of an empty path autobinds an abstract address
		 * no client can name; the daemon said "listening on " */
		if (!*arg) {
			fprintf(stderr, "tensord: --socket: want a path\n");
			return 2;
		}
		o->socket_path = arg; /* resolved by socket_path() */
		return 0;
	case 'l':
		c = td__log_level_parse(arg);
		if (c < 0) {
			fprintf(stderr, "tensord: --log-level: want error, "
					"warn, info or debug\n");
			return 2;
		}
		td__log_level = c;
		return 0;
	case 'i':
		return parse_import(arg, o);
	case 'm':
	case 'u':
		o->uid_max_bytes_set |= c == 'u';
		if (td__size_parse(arg, strlen(arg),
				   c == 'm' ? &o->max_bytes
					    : &o->uid_max_bytes) < 0) {
			fprintf(stderr, "tensord: --%s: not a byte count: %s\n",
				c == 'm' ? "max-bytes" : "uid-max-bytes", arg);
			return 2;
		}
		return 0;
	case 'p':
		o->policy_path = arg;
		return 0;
	case 5:
		if (parse_limit(arg, o) < 0) {
			fprintf(stderr,
				"tensord: --uid-limit: want KEY=N with KEY "
				"conns, fds, leases, pinned, watches, waiters, "
				"rings or queued: %s\n",
				arg);
			return 2;
		}
		return 0;
	case 1:
		errno = 0;
		o->socket_mode = (int)strtol(arg, &end, 8);
		if (errno || end == arg || *end || o->socket_mode < 0 ||
		    o->socket_mode > 0777) {
			fprintf(stderr, "tensord: --socket-mode: want an octal "
					"mode like 0660\n");
			return 2;
		}
		return 0;
	case 2:
		if (parse_group(arg, &o->socket_gid) < 0) {
			fprintf(stderr,
				"tensord: --socket-group: no such group: %s\n",
				arg);
			return 2;
		}
		return 0;
	case 3:
		/* "" (an unset variable in a unit) would lock ".lock" in the
		 * working folder and fail every save on rename("") */
		if (!*arg || arg[strlen(arg) - 1] == '/') {
			fprintf(stderr, "tensord: --snapshot: want a file "
					"path, not '%s'\n",
				arg);
			return 2;
		}
		o->snapshot_path = arg;
		return 0;
	case 4:
		errno = 0;
		secs = strtoull(arg, &end, 10);
		if (errno || end == arg || *end || *arg == '-' ||
		    secs > 86400 * 365) {
			fprintf(stderr, "tensord: --snapshot-interval: want "
					"whole seconds\n");
			return 2;
		}
		o->snapshot_interval_ms = secs * 1000;
		return 0;
	case 6:
		o->own_fences_only = true;
		return 0;
	case 8:
	case 9:
		return parse_snapshot_prefix(c, arg, o);
	case 7:
		return check_policy(arg);
	case 20:
	case 21:
	case 22:
	case 23:
	case 24:
		return parse_http_opt(c, arg, o);
	case 'h':
		usage(stdout);
		return -1;
	case 'V':
		printf("tensord %s\n", TD_VERSION);
		return -1;
	default: /* bad_option() said it: none comes here */
		return 2;
	}
}

/* An option getopt refused, said as getopt would, then the way to the
 * options. The exit status. */
static int bad_option(int c, const char *word)
{
	if (c == ':')
		fprintf(stderr, "tensord: option '%s' needs a value\n", word);
	else if (optopt && word[1] != '-')
		fprintf(stderr, "tensord: invalid option -- '%c'\n", optopt);
	else if (optopt) /* a known long option given =VALUE */
		fprintf(stderr, "tensord: option '%.*s' takes no value\n",
			(int)strcspn(word, "="), word);
	else
		fprintf(stderr, "tensord: unrecognized option '%s'\n", word);
	fprintf(stderr, "Try 'tensord --help' for the options.\n");
	return 2;
}

/*
 * The command line into o (socket_path: the option as given, NULL for
 * none; max_bytes: UINT64_MAX for the default). -1 to go on, else the
 * exit status.
 */
static int parse_args(int argc, char **argv, struct td__opts *o)
{
	static const char *const http_opt[] = {
		"--http-prefix", "--http-max-connections", "--http-timeout",
		"--http-cors"};
	const char *needs_http = NULL, *needs_snapshot = NULL;
	int c, rc;

	opterr = 0; /* said below as "tensord: ...", not by argv[0]'s path */
	while ((c = getopt_long(argc, argv, ":s:l:i:m:u:p:hV", long_opts,
				NULL)) != -1) {
		if (c == '?' || c == ':')
			return bad_option(c, argv[optind - 1]);
		rc = parse_opt(c, optarg, o);
		if (rc)
			return rc < 0 ? 0 : rc;
		if (c >= 21 && c <= 24)
			needs_http = http_opt[c - 21];
		if (c == 4)
			needs_snapshot = "--snapshot-interval";
		else if (c == 8 || c == 9)
			needs_snapshot = c == 8 ? "--snapshot-prefix"
						: "--snapshot-skip";
	}
	if (optind < argc) {
		fprintf(stderr, "tensord: unexpected argument: %s\n",
			argv[optind]);
		return 2;
	}
	/* an option that only tunes another one, given without it, would
	 * otherwise do nothing without a word (`--http-prefix cam/` and no
	 * HTTP store at all) */
	if (needs_http && !o->http_addr)
		td__log(TD_LOG_WARN, "%s has no effect without --http ADDR: "
				     "no HTTP store is started",
			needs_http);
	if (needs_snapshot && !o->snapshot_path)
		td__log(TD_LOG_WARN, "%s has no effect without --snapshot "
				     "FILE: no snapshot is kept",
			needs_snapshot);
	return -1;
}

/* The loop's handles and the daemon's parts, in order. 0 or -1. */
static int start(struct td__daemon *d, uv_signal_t *sigint,
		 uv_signal_t *sigterm)
{
	uint32_t import = d->opts.import;
	int rc;

	td__closer_start();
	td__fence_init(); /* its epoll set counts in the daemon's own fds */
	d->cpus = td__cpus();
	d->pidfd = import == TD_IMPORT_SCM ? -1 : td__pidfd_open(d->pid);
	if (d->pidfd < 0 && import != TD_IMPORT_SCM)
		td__log(TD_LOG_WARN, "pidfd_open(self): %s; clients receive "
				     "fds by SCM_RIGHTS",
			strerror(-d->pidfd));
	if (d->pidfd < 0)
		d->pidfd = -1;
	uv_idle_init(d->loop, &d->reaper);
	d->reaper.data = d;
	uv_signal_init(d->loop, sigint);
	uv_signal_init(d->loop, sigterm);
	sigint->data = sigterm->data = d;
	uv_signal_start(sigint, on_signal, SIGINT);
	uv_signal_start(sigterm, on_signal, SIGTERM);
	td__status_start(d);

	if (d->opts.policy_path) {
		d->policy = calloc(1, sizeof(*d->policy));
		if (!d->policy ||
		    td__policy_load(d->opts.policy_path, d->policy) < 0)
			return -1;
	}
	if (td__tenants_init(d, fds_open()) < 0)
		return -1;
	/*
	 * restore before listening: clients never see a half-filled store;
	 * the fd store, when it restored, is newer than any snapshot
	 */
	td__dispatch_init();
	if (td__sd_init(d, td__fdstore_passed) < 0 || td__store_new(d) < 0 ||
	    (rc = td__fdstore_restore(d)) < 0 ||
	    (d->opts.snapshot_path &&
	     td__snapshot_start(d, d->opts.snapshot_path,
				d->opts.snapshot_interval_ms, rc > 0) < 0) ||
	    td__http_start(d) < 0 ||
	    td__server_start(d) < 0)
		return -1;
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
		d->opts.max_bytes);
	return 0;
}

/* Everything start() made, gone, in the order that keeps it clean; -1
 * when the final snapshot save failed (logged there). */
static int stop(struct td__daemon *d)
{
	int rc;

	td__sd_stopping(d);
	/* order: stop accepting, drop peers (their leases), then the store */
	td__server_stop(d);
	td__http_stop(d);
	td__peer_drop_all(d);
	rc = td__snapshot_fini(); /* the final save, while the store is whole */
	td__fdstore_fini(); /* the final image, before the store lets go */
	td__store_free(d);
	td__fence_fini(); /* every version, so every watched fence, gone */
	td__fdstore_free();
	td__closer_stop(); /* after every plane's close */
	uv_walk(d->loop, close_walk, NULL);
	uv_run(d->loop, UV_RUN_DEFAULT);
	if (uv_loop_close(d->loop) < 0)
		td__log(TD_LOG_WARN, "loop closed with live handles");
	if (d->pidfd >= 0)
		close(d->pidfd);
	td__sd_fini();
	td__tenants_fini();
	td__policy_fini(d->policy);
	free(d->policy);
	return rc;
}

/*
 * A standard fd closed at exec (`2>&-`, a supervisor that closes them) is
 * the lowest free number: the loop's signal pipe took it, and the log
 * lines went into that pipe, which then aborted the daemon at SIGTERM.
 * Each closed one is held by /dev/null: logs to a closed stderr vanish.
 */
static void hold_closed_std_fds(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		int n;

		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		n = open("/dev/null", O_RDWR);
		if (n >= 0 && n != fd) {
			dup2(n, fd);
			close(n);
		}
	}
}

int main(int argc, char **argv)
{
	struct td__opts o = {.import = TD_IMPORT_AUTO,
			     .max_bytes = UINT64_MAX,
			     .socket_mode = -1,
			     .socket_gid = (gid_t)-1,
			     .http_max_connections = 256,
			     .http_timeout = 30,
			     .wake_gen_max = UINT32_MAX,
			     .trig_gen_max = UINT32_MAX,
			     .snapshot_interval_ms =
				     TD__SNAPSHOT_INTERVAL_S * 1000ull};
	char pathbuf[4096];
	struct td__daemon *d;
	uv_signal_t sigint, sigterm;
	uv_loop_t loop;
	const char *env;
	int rc, status = 1;

	/*
	 * SIGHUP's default action kills: one that came before the loop's
	 * handler (td__status_start) ended the daemon, and systemd counts a
	 * death by SIGHUP as clean, so Restart=on-failure left it dead (a
	 * deploy script's `kill -HUP` just after a restart). Until then it
	 * is ignored: the policy it would reload is read later anyway.
	 */
	signal(SIGHUP, SIG_IGN);
	hold_closed_std_fds();
	/* before any fd of ours exists (sd.h) */
	td__sd_claim();
	rc = parse_args(argc, argv, &o);
	if (rc >= 0)
		return rc;
	d = calloc(1, sizeof(*d));
	if (!d) {
		fprintf(stderr, "tensord: out of memory\n");
		return 1;
	}
	td__d = d;
	d->opts = o;
	d->opts.socket_path = socket_path(o.socket_path, pathbuf,
					  sizeof(pathbuf));
	if (o.max_bytes == UINT64_MAX)
		d->opts.max_bytes = default_max_bytes();
	d->opts.no_peerpidfd = getenv("TENSORD_TEST_NO_PEERPIDFD") != NULL;
	if ((env = getenv("TENSORD_TEST_HIDE_FEATURES")))
		d->opts.hide_features = (uint32_t)strtoul(env, NULL, 0);
	/* at least 2: one number could not differ from the one last sent */
	if ((env = getenv("TENSORD_TEST_RING_WAKE_GEN_MAX")) &&
	    strtoul(env, NULL, 0) >= 2)
		d->opts.wake_gen_max = (uint32_t)strtoul(env, NULL, 0);
	if ((env = getenv("TENSORD_TEST_TRIG_GEN_MAX")) &&
	    strtoul(env, NULL, 0) >= 1)
		d->opts.trig_gen_max = (uint32_t)strtoul(env, NULL, 0);
	if ((env = getenv("TENSORD_TEST_FIRST_VERSION")))
		d->opts.first_version = strtoull(env, NULL, 0);
	d->pid = getpid();
	td__list_init(&d->peers);
	raise_nofile();
	/* a peer that hangs up mid-send must not kill us (MSG_NOSIGNAL too) */
	signal(SIGPIPE, SIG_IGN);
	/*
	 * Under RLIMIT_FSIZE (systemd's LimitFSIZE=, a shell's ulimit -f),
	 * growing a file past it raises SIGXFSZ, whose default action kills
	 * us: a client's ALLOC (the memfd's ftruncate) or a snapshot save
	 * would. Ignored, the call fails with EFBIG, which ALLOC answers
	 * and a save logs, backing off.
	 */
	signal(SIGXFSZ, SIG_IGN);

	rc = uv_loop_init(&loop);
	if (rc < 0) {
		td__log(TD_LOG_ERROR, "uv_loop_init: %s", uv_strerror(rc));
		free(d);
		return 1;
	}
	d->loop = &loop;
	if (start(d, &sigint, &sigterm) == 0) {
		/* a signal taken by a nested run inside start() (the
		 * snapshot restore's) left no stop flag for this one */
		if (!d->stop_asked)
			uv_run(&loop, UV_RUN_DEFAULT);
		status = 0;
	}
	/*
	 * A failed final save lost what changed since the last one: exit 1,
	 * so systemd shows the unit failed (and Restart=on-failure restarts
	 * a daemon stopped by anyone else). systemd keeps the fd store of a
	 * failed unit while a job is queued for it (systemctl restart).
	 */
	if (stop(d) < 0 && status == 0) {
		td__log(TD_LOG_ERROR, "exit status 1: the final snapshot save "
				      "failed (above)");
		status = 1;
	}
	free(d);
	td__d = NULL;
	return status;
}
