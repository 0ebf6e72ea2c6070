/* SPDX-License-Identifier: MIT */
/*
 * tensord-bench: the harness. Options, the run matrix, forking and
 * supervising the producer/consumer pair, statistics; report.c writes the
 * JSON, Markdown and plot.
 */
#include "bench.h"
#include "report.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>
#include <ftw.h>
#include <getopt.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TD_BENCH_TENSORD_DEFAULT
#define TD_BENCH_TENSORD_DEFAULT "tensord"
#endif
#ifndef TD_BENCH_ROUDI_DEFAULT
#define TD_BENCH_ROUDI_DEFAULT "/usr/bin/iox-roudi"
#endif

/* ---- methods that were not built ---- */

#ifndef TD_BENCH_HAVE_ICEORYX
static int iox_unbuilt(const struct bench_env *env, char *why, size_t len)
{
	snprintf(why, len, "not built: libiceoryx-binding-c-dev was not "
		 "found when meson configured the bench");
	return -ENOENT;
}
const struct bench_method bench_iceoryx_wait = {
	.name = "iceoryx-wait", .desc = "iceoryx 2.0, blocking wait-sets",
	.start = iox_unbuilt,
};
const struct bench_method bench_iceoryx_poll = {
	.name = "iceoryx-poll", .desc = "iceoryx 2.0, busy polling",
	.start = iox_unbuilt,
};
#endif

#ifndef TD_BENCH_HAVE_TENSORD
static int td_unbuilt(const struct bench_env *env, char *why, size_t len)
{
	snprintf(why, len, "not built: libtensord (libclient/) was not "
		 "available when meson configured the bench");
	return -ENOENT;
}
const struct bench_method bench_tensord = {
	.name = "tensord", .desc = "tensord public client API",
	.start = td_unbuilt,
};
const struct bench_method bench_tensord_ring = {
	.name = "tensord-ring", .desc = "tensord fast path (rings)",
	.start = td_unbuilt,
};
const struct bench_method bench_tensord_scm = {
	.name = "tensord-scm", .desc = "tensord public client API, SCM path",
	.start = td_unbuilt,
};
const struct bench_method bench_tensord_ring_sleep = {
	.name = "tensord-ring-sleep", .desc = "tensord rings, no polling",
	.start = td_unbuilt,
};
const struct bench_method bench_tensord_ring_lockstep = {
	.name = "tensord-ring-lockstep",
	.desc = "tensord rings, the release as the ack",
	.start = td_unbuilt,
};
const struct bench_method bench_tensord_stage_bound = {
	.name = "tensord-stage-bound",
	.desc = "the bound of a staged publish (rings and a PUBLISH)",
	.start = td_unbuilt,
};
const struct bench_method bench_tensord_follow = {
	.name = "tensord-follow", .desc = "tensord plain API, following",
	.start = td_unbuilt,
};
const struct bench_method bench_tensord_follow_scm = {
	.name = "tensord-follow-scm",
	.desc = "tensord plain API, following, SCM path",
	.start = td_unbuilt,
};
const struct bench_method bench_tensord_get = {
	.name = "tensord-get", .desc = "tensord plain API, GET path",
	.start = td_unbuilt,
};
const struct bench_method bench_tensord_nowait = {
	.name = "tensord-nowait",
	.desc = "tensord plain API, PUBLISH without waiting",
	.start = td_unbuilt,
};
const struct bench_method bench_tensord_names = {
	.name = "tensord-names",
	.desc = "tensord plain API, four names in turn",
	.start = td_unbuilt,
};
#endif

static const struct bench_method *const all_methods[] = {
	&bench_tensord,
	&bench_tensord_scm,
	&bench_tensord_nowait,
	&bench_tensord_names,
	&bench_tensord_get,
	&bench_tensord_follow,
	&bench_tensord_follow_scm,
	&bench_tensord_ring,
	&bench_tensord_ring_sleep,
	&bench_tensord_ring_lockstep,
	&bench_tensord_stage_bound,
	&bench_iceoryx_wait,
	&bench_iceoryx_poll,
	&bench_socket_copy,
	&bench_fd_pass,
	&bench_bare_futex,
	&bench_bare_spin,
};
#define METHOD_COUNT (sizeof(all_methods) / sizeof(all_methods[0]))
_Static_assert(METHOD_COUNT <= BENCH_MAX_METHODS,
	       "the report keeps BENCH_MAX_METHODS methods");

/* ---- process-wide state for the exit paths ---- */

static pid_t main_pid;
static volatile pid_t child_pids[1 + BENCH_MAX_CONSUMERS] = {-1, -1, -1, -1,
							     -1};
static int method_started[METHOD_COUNT];
static struct bench_env env;

static int rm_entry(const char *path, const struct stat *sb, int flag,
		    struct FTW *ftw)
{
	return remove(path);
}

/* Every exit path of the parent ends here: children killed, RouDi and the
 * daemon stopped, temp dir removed. Forked children inherit the atexit
 * registration, hence the pid check. */
static void cleanup(void)
{
	if (getpid() != main_pid)
		return;
	for (int i = 0; i < 1 + BENCH_MAX_CONSUMERS; i++) {
		if (child_pids[i] > 0) {
			kill(child_pids[i], SIGKILL);
			waitpid(child_pids[i], NULL, 0);
			child_pids[i] = -1;
		}
	}
	for (size_t i = 0; i < METHOD_COUNT; i++) {
		if (method_started[i] && all_methods[i]->stop)
			all_methods[i]->stop();
		method_started[i] = 0;
	}
	if (env.tmpdir[0]) {
		/* TD_BENCH_KEEP=1 keeps the logs (roudi.log, tensord.log) */
		const char *keep = getenv("TD_BENCH_KEEP");

		if (keep && *keep && strcmp(keep, "0") != 0)
			fprintf(stderr, "bench: kept %s\n", env.tmpdir);
		else
			nftw(env.tmpdir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
		env.tmpdir[0] = 0;
	}
}

static void on_signal(int sig)
{
	cleanup();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* ---- options ---- */

struct opts {
	char *methods;
	size_t sizes[32];
	size_t size_count;
	int modes; /* bit 0: nowrite, bit 1: write */
	long long iters, warmup;
	double scale;
	int rounds;
	int pin, cpu[2];
	int run_timeout;
	const char *json, *png, *markdown;
	int smoke;
	int settle; /* wait for an idle machine before each round */
	int tap;
	int kinds; /* bit 0 pingpong, 1 fanout, 2 paced */
	size_t paced_size;
	double rates[4]; /* paced, Hz */
	size_t rate_count;
};

/* Largest size of a fan-out run. */
#define FANOUT_MAX_SIZE (64u << 20)
/* Consumers of the paced runs: 1, then BENCH_MAX_CONSUMERS. */
#define PACED_PLANS 2
/* Rounds per run unless --rounds says otherwise. */
#define DEFAULT_ROUNDS 3
/* Fewest messages in a round of a paced run (per consumer): a p99 of
 * fewer latencies is the largest one or the one below it. */
#define PACED_ROUND_MIN 200
/* Fewest rounds of a paced run unless --rounds asks for fewer: its
 * verdicts pair them (the median of the per-round ratios). */
#define PACED_ROUNDS_MIN 3
_Static_assert(DEFAULT_ROUNDS <= BENCH_MAX_ROUNDS,
	       "a result keeps BENCH_MAX_ROUNDS round medians");

static int parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (end == s)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end == 'i')
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end || v < 16 || v % 8)
		return -EINVAL;
	*out = (size_t)v;
	return 0;
}

static int parse_sizes(const char *arg, struct opts *o)
{
	char *dup = strdup(arg), *save = NULL;

	o->size_count = 0;
	for (char *t = strtok_r(dup, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		if (o->size_count == 32 ||
		    parse_size(t, &o->sizes[o->size_count]) < 0) {
			fprintf(stderr, "bad size '%s' (multiple of 8, >= 16; "
				"K/M/G suffixes)\n", t);
			free(dup);
			return -EINVAL;
		}
		o->size_count++;
	}
	free(dup);
	return o->size_count ? 0 : -EINVAL;
}

/* A comma list of words into bits (words[i] -> 1 << i); -1 on an
 * unknown word. */
static int parse_words(const char *arg, const char *const *words,
		       size_t nwords)
{
	char *dup = strdup(arg), *save = NULL;
	int bits = 0;

	for (char *t = strtok_r(dup, ",", &save); t && bits >= 0;
	     t = strtok_r(NULL, ",", &save)) {
		size_t i = 0;

		while (i < nwords && strcmp(t, words[i]) != 0)
			i++;
		bits = i < nwords ? bits | (1 << i) : -1;
	}
	free(dup);
	return bits;
}

static int parse_modes(const char *arg)
{
	static const char *const w[] = {"nowrite", "write"};

	return parse_words(arg, w, 2);
}

static int parse_kinds(const char *arg)
{
	static const char *const w[] = {"pingpong", "fanout", "paced"};

	return parse_words(arg, w, 3);
}

/* --rates: a comma list of 1 to 4 rates in Hz, each 1-100000. */
static int parse_rates(const char *arg, struct opts *o)
{
	char *dup = strdup(arg), *save = NULL;
	int rc = 0;

	o->rate_count = 0;
	for (char *t = strtok_r(dup, ",", &save); t && rc == 0;
	     t = strtok_r(NULL, ",", &save)) {
		char *end;
		double hz = strtod(t, &end);

		if (end == t || *end || !(hz >= 1 && hz <= 100000) ||
		    o->rate_count == 4)
			rc = -EINVAL;
		else
			o->rates[o->rate_count++] = hz;
	}
	free(dup);
	return rc == 0 && o->rate_count ? 0 : -EINVAL;
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: tensord-bench [options]\n"
"Ping-pong handoff benchmark: producer publishes, consumer gets, checks,\n"
"releases and acks; the producer times the round trip.\n\n"
"  --methods LIST   comma list of: tensord tensord-scm tensord-nowait\n"
"                   tensord-names tensord-get tensord-follow\n"
"                   tensord-follow-scm\n"
"                   tensord-ring\n"
"                   tensord-ring-sleep tensord-ring-lockstep\n"
"                   tensord-stage-bound (a design's bound, not a way\n"
"                   to use tensord)\n"
"                   iceoryx-wait iceoryx-poll socket-copy fd-pass\n"
"                   bare-futex bare-spin (default: all)\n"
"  --sizes LIST     payload sizes, e.g. 64,4K,1M (default:\n"
"                   64,4K,1M,16M,64M,1G)\n"
"  --modes LIST     write (producer writes every byte, consumer checks\n"
"                   every byte), nowrite (16-byte stamps only); default both\n"
"  --iters N        measured iterations per run (default: by size, mode)\n"
"  --warmup N       excluded warm-up iterations per round (default: by\n"
"                   size, mode; paced: 100 above 100 Hz, else 5)\n"
"  --scale F        multiply the default iteration counts by F\n"
"  --rounds R       split each run into R rounds interleaved across the\n"
"                   methods (order rotating), each with its own setup and\n"
"                   warm-up (default %d, at most %d); ratios pair the\n"
"                   methods' rounds; a paced run gets at most one round\n"
"                   per %d messages\n"
"  --cpus A,B       pin producer to A, consumer to B (default: first two\n"
"                   allowed CPUs)\n"
"  --no-pin         do not pin\n"
"  --no-settle      start each round at once (default: wait, at most 3 s,\n"
"                   until the CPUs are idle: what the run before left\n"
"                   behind, e.g. the kernel freeing a GiB, is not this\n"
"                   run's; and halfway through the warm-up, as long as\n"
"                   the round had run, at most 0.3 s; --smoke never\n"
"                   waits)\n"
"  --timeout S      kill a run after S seconds (default 300)\n"
"  --json FILE      write every figure as JSON\n"
"  --png FILE       plot round trip vs size (gnuplot)\n"
"  --markdown FILE  ratio and median tables (for bench/README.md)\n"
"  --tensord PATH   daemon binary (default %s)\n"
"  --roudi PATH     iox-roudi binary (default %s)\n"
"  --kinds LIST     pingpong, fanout (1 -> 4 consumers, publish to the\n"
"                   last ack, sizes <= 64 MiB), paced (1 kHz and 30 Hz,\n"
"                   1 and 4 consumers, one-way latency); default all\n"
"  --paced-size N   payload of the paced runs (default 4K; nowrite)\n"
"  --rates LIST     rates of the paced runs in Hz (default 1000,30;\n"
"                   counts as for 1 kHz above 100 Hz, else as for 30 Hz)\n"
"  --smoke          seconds-long check: sizes 64,4K,64K, 30 iterations;\n"
"                   exit 1 unless every available method completed and\n"
"                   every payload was verified\n"
"  --tap            TAP on stdout (one test per run; n/a = SKIP), the\n"
"                   table on stderr\n"
"  -v, --verbose\n"
"Environment: TD_BENCH_TENSORD (daemon binary), TD_BENCH_KEEP=1 (keep the\n"
"temp dir with the RouDi and tensord logs), TD_BENCH_BARE_SLOTS=2 (the\n"
"bare ping-pong and fan-out alternate two payload slots, as a store that\n"
"keeps the last payload readable must).\n",
		DEFAULT_ROUNDS, BENCH_MAX_ROUNDS, PACED_ROUND_MIN,
		TD_BENCH_TENSORD_DEFAULT,
		TD_BENCH_ROUDI_DEFAULT);
}

/*
 * Default counts: the full default matrix (6 sizes, 2 modes, every method)
 * stays under 10 minutes on the 2-vCPU CI machine even when other work
 * shares it; tensord's 1 GiB write runs (a fresh GiB per handoff) are the
 * longest. --scale multiplies the measured counts.
 */
/*
 * Measured round trips per run. In nowrite mode a zero-copy handoff costs
 * the same at every size, and 4 samples of it (3 rounds, 1 warm-up each)
 * are mostly the first handoffs after a setup: cold caches, a partner not
 * yet spinning. Large sizes get more of them there; the copying methods
 * pay for that in run time, not in fairness (every method still gets the
 * same counts at a size and mode).
 */
static uint64_t default_iters(size_t size, int write)
{
	/* above 64 MiB nothing copies in nowrite mode (socket-copy stops at
	 * 64 MiB, fd-pass maps without touching): a handoff costs what it
	 * costs at 64 B, and the "1 GiB / 64 B" verdict needs about 100
	 * samples a round at --scale 0.5 with 5 rounds, not 6 */
	if (!write && size > (64u << 20))
		return 1000;
	if (!write && size > (1u << 20))
		return 200;
	if (size <= (4u << 10))
		return 10000;
	if (size <= (64u << 10))
		return 5000;
	if (size <= (1u << 20))
		return 1000;
	if (size <= (16u << 20))
		return 200;
	if (size <= (64u << 20))
		return 40;
	return 4;
}

/* Excluded warm-up round trips, per round. */
static uint64_t default_warmup(size_t size, int write)
{
	/*
	 * After a round that mapped and freed gigabytes, the kernel's own
	 * clean-up competes for this machine's two CPUs for a while: the
	 * first 10-30 handoffs of the next round are slower whatever the
	 * method. Large sizes warm up longer (cheap in nowrite mode, where
	 * no method copies above 64 MiB): 100, so that after the wait in
	 * the middle (settle_warm) 50 handoffs let the waiters relearn.
	 */
	if (!write && size > (1u << 20))
		return 100;
	if (write && size > (64u << 20))
		return 3;
	if (size <= (64u << 10))
		return 300;
	if (size <= (1u << 20))
		return 30;
	if (size <= (16u << 20))
		return 5;
	if (size <= (64u << 20))
		return 2;
	return 1;
}

/* ---- one run ---- */

#define BENCH_MAX_CHILDREN (1 + BENCH_MAX_CONSUMERS)

/* Shared by the parent and a run's children (one mapping per round). */
struct shared {
	int rc[BENCH_MAX_CHILDREN];
	char why[BENCH_MAX_CHILDREN][BENCH_WHY_MAX];
	uint64_t verified[BENCH_MAX_CONSUMERS];
	uint64_t loop_ns;
	/* CPU time (user + system, all threads) in the measured window:
	 * each child's own, and the method's helper process (tensord,
	 * RouDi) as the producer saw it */
	uint64_t cpu_ns[BENCH_MAX_CHILDREN];
	uint64_t svc_ns;
	int svc_pid;
	_Atomic uint32_t bar[2]; /* setup and end barriers: arrivals */
	_Atomic uint32_t abort;  /* a child failed before a barrier */
	_Atomic uint32_t acks;   /* FANOUT: consumer acks so far (futex) */
	uint64_t lat_count[BENCH_MAX_CONSUMERS]; /* PACED: samples each */
	uint64_t skipped[BENCH_MAX_CONSUMERS];   /* PACED: of those */
	/* PINGPONG, FANOUT: n round trips; PACED: n latencies per consumer */
	uint64_t samples[];
};

static long futex(_Atomic uint32_t *w, int op, uint32_t val,
		  const struct timespec *ts)
{
	return syscall(SYS_futex, w, op, val, ts, NULL, 0);
}

/*
 * Every child arrives and waits for all n, so nobody starts timing (or
 * tears down) before every peer is ready. A child that failed arrives
 * with abort set, so nobody waits for it; 120 s without the rest fails.
 */
static int barrier(struct bench_run *r, struct shared *sh, int which,
		   unsigned n, int failed, const char *what)
{
	_Atomic uint32_t *b = &sh->bar[which];
	uint64_t end = bench_now_ns() + 120000000000ull;
	uint32_t v;

	if (failed)
		atomic_store(&sh->abort, 1);
	if (atomic_fetch_add(b, 1) + 1 == n) {
		futex(b, FUTEX_WAKE, INT32_MAX, NULL);
	} else {
		while ((v = atomic_load(b)) < n && !atomic_load(&sh->abort)) {
			struct timespec ts = {0, 100000000};

			if (bench_now_ns() > end)
				return bench_fail(r, -ETIMEDOUT, "%s barrier: "
						  "peers silent for 120 s",
						  what);
			futex(b, FUTEX_WAIT, v, &ts);
		}
	}
	if (!failed && atomic_load(&sh->abort))
		return bench_fail(r, -EPIPE, "%s barrier: a peer failed",
				  what);
	return 0;
}

static void pin_to(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/* CPU time of this process (every thread), ns. */
static uint64_t cpu_self_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CPU time of process pid (every thread), ns; 0 when unknown. */
static uint64_t cpu_of_ns(int pid)
{
	struct timespec ts;
	clockid_t clk;

	if (pid <= 0 || clock_getcpuclockid(pid, &clk) != 0 ||
	    clock_gettime(clk, &ts) < 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Busy and total jiffies of every CPU so far (/proc/stat's first line). */
static int cpu_jiffies(uint64_t *busy, uint64_t *total)
{
	unsigned long long v[8] = {0};
	FILE *f = fopen("/proc/stat", "re");
	int n;

	if (!f)
		return -1;
	n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
		   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
	fclose(f);
	if (n != 8)
		return -1;
	*total = 0;
	for (int i = 0; i < 8; i++)
		*total += v[i];
	*busy = *total - v[3] - v[4]; /* less idle and iowait */
	return 0;
}

/*
 * Before a round: wait (at most 3 s) until the machine is idle: under a
 * tenth of the CPUs busy over 50 ms. The run before leaves work behind
 * that is not this run's handoff: a connection that ends with a lent
 * 1 GiB loan is freed in the daemon's loop after the children are gone,
 * and the kernel takes ~100 ms of CPU to free a GiB of pages, while a
 * 1 GiB round measures 100 handoffs of ~20 us (the 1 GiB target is
 * "handoff only").
 */
static void settle(void)
{
	const struct timespec win = {0, 50000000};

	for (int i = 0; i < 60; i++) {
		uint64_t b0, t0, b1, t1;

		if (cpu_jiffies(&b0, &t0) < 0)
			return;
		nanosleep(&win, NULL);
		if (cpu_jiffies(&b1, &t1) < 0 || t1 == t0 ||
		    (b1 - b0) * 10 < t1 - t0)
			return;
	}
}

/*
 * Halfway through a round's warm-up the producer waits as long as the
 * child had run until then (setup included), at most WARM_SETTLE_MAX_NS
 * (off with --no-settle and --smoke). A 1 GiB round's first handoffs
 * make two planes (~0.5 s of CPU reserving 2 GiB); for the next 60-300
 * ms the plain API's handoffs ran at 30-60 us, then at their 64 B figure,
 * 17-19 us (bench/README.md, "How each run is made"), and the 1 GiB
 * target is "handoff only". Halfway, not at the end: a waiter that just
 * waited that long sleeps through its next ~20 waits (libclient/pace.c
 * learns a moving average), and the second half of the warm-up is where
 * it relearns to poll. A 64 B round has run for a few ms by then, and
 * waits that long.
 */
#define WARM_SETTLE_MAX_NS 300000000ull
static int warm_settle;
/* in a child: when it started, before its method's setup */
static uint64_t t_child;

static void settle_warm(uint64_t warm_ns)
{
	uint64_t d = warm_ns < WARM_SETTLE_MAX_NS ? warm_ns : WARM_SETTLE_MAX_NS;
	struct timespec ts = {(time_t)(d / 1000000000u),
			      (long)(d % 1000000000u)};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* One knob per run that the harness, not the method, owns. */
struct run_plan {
	enum bench_kind kind;
	unsigned consumers;
	double rate_hz; /* PACED */
};

static void producer_loop(const struct bench_method *m, struct bench_run *r,
			  struct shared *sh, const struct run_plan *pl,
			  uint64_t warmup, uint64_t n, int *rcp)
{
	uint64_t total = warmup + n, t_start = 0, t_end = 0, cpu0 = 0,
		 svc0 = 0, t_first = bench_now_ns() + 1000000;
	uint64_t period = pl->kind == BENCH_PACED ?
		(uint64_t)(1e9 / pl->rate_hz) : 0;
	int rc = *rcp;

	for (uint64_t i = 0; rc == 0 && i < total; i++) {
		uint64_t t0, t1;

		if (i == warmup / 2 && warmup >= 2 && warm_settle && !period)
			settle_warm(bench_now_ns() - t_child);
		if (i == warmup) {
			cpu0 = cpu_self_ns();
			svc0 = cpu_of_ns(sh->svc_pid);
		}
		if (period) {
			uint64_t at = t_first + i * period;
			struct timespec ts = {(time_t)(at / 1000000000u),
					      (long)(at % 1000000000u)};

			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME,
					       &ts, NULL) == EINTR)
				;
		}
		t0 = bench_now_ns();
		rc = m->producer_step(r, i + 1);
		if (rc == 0 && pl->kind == BENCH_FANOUT) {
			/* until the last consumer's ack of this one */
			uint32_t want = (uint32_t)((i + 1) * pl->consumers), v;

			while ((v = atomic_load(&sh->acks)) < want)
				futex(&sh->acks, FUTEX_WAIT, v, NULL);
		}
		t1 = bench_now_ns();
		if (i == warmup)
			t_start = t0;
		if (i >= warmup && !period)
			sh->samples[i - warmup] = t1 - t0;
		t_end = t1;
	}
	if (rc == 0) {
		sh->cpu_ns[0] = cpu_self_ns() - cpu0;
		sh->svc_ns = cpu_of_ns(sh->svc_pid) - svc0;
		sh->loop_ns = t_end - t_start;
	}
	*rcp = rc;
}

/*
 * PACED: the latencies of a consumer that asked for seq and got
 * bench_seen_seq, measured ones only (past the warm-up). Every message
 * it skipped for a newer one (a latest-value channel; an iceoryx queue
 * that overflowed) counts too, with the latency of the one that replaced
 * it: published no later, it waited at least that long and was never
 * delivered. Dropping those instead left the latest-value methods' p50
 * and p99 without their latest messages, against iceoryx's queue that
 * delivers every late one.
 */
static void paced_sample(uint64_t *mine, uint64_t n, uint64_t *lat,
			 uint64_t *skip, uint64_t warmup, uint64_t seq)
{
	for (uint64_t s = seq > warmup ? seq : warmup + 1;
	     s <= bench_seen_seq && *lat < n; s++) {
		mine[(*lat)++] = bench_seen_lat_ns;
		*skip += s < bench_seen_seq;
	}
}

static void consumer_loop(const struct bench_method *m, struct bench_run *r,
			  struct shared *sh, const struct run_plan *pl,
			  uint64_t warmup, uint64_t n, int *rcp)
{
	uint64_t total = warmup + n, done = 0, cpu0 = 0, lat = 0, skip = 0;
	uint64_t *mine = sh->samples + (uint64_t)r->index * n;
	int rc = *rcp, measuring = 0;

	/* PACED: a consumer of a "latest" channel may skip; it goes on from
	 * what it got, and ends with the last message */
	for (uint64_t seq = 1; rc == 0 && seq <= total;) {
		if (!measuring && seq > warmup) {
			measuring = 1;
			cpu0 = cpu_self_ns();
		}
		rc = m->consumer_step(r, seq);
		if (rc < 0)
			break;
		done++;
		if (pl->kind != BENCH_PACED) {
			seq++;
		} else {
			paced_sample(mine, n, &lat, &skip, warmup, seq);
			seq = bench_seen_seq + 1;
		}
		if (pl->kind == BENCH_FANOUT &&
		    (atomic_fetch_add(&sh->acks, 1) + 1) % pl->consumers == 0)
			futex(&sh->acks, FUTEX_WAKE, 1, NULL);
	}
	if (rc == 0)
		sh->cpu_ns[1 + r->index] = measuring ? cpu_self_ns() - cpu0 : 0;
	sh->verified[r->index] = done;
	sh->lat_count[r->index] = lat;
	sh->skipped[r->index] = skip;
	*rcp = rc;
}

static void __attribute__((noreturn))
child_main(const struct bench_method *m, struct bench_run *r,
	   struct shared *sh, const struct run_plan *pl, uint64_t warmup,
	   uint64_t n, int cpu)
{
	unsigned slot = r->role == BENCH_PRODUCER ? 0 : 1 + r->index;
	unsigned nchild = 1 + pl->consumers;
	int rc;

	t_child = bench_now_ns();
	/* A child must not outlive the harness. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != main_pid)
		_exit(3);
	pin_to(cpu);
	bench_paced = pl->kind == BENCH_PACED;
	rc = m->setup(r);
	{
		int b = barrier(r, sh, 0, nchild, rc < 0, "setup");

		if (rc == 0)
			rc = b;
	}
	if (rc == 0 && r->role == BENCH_PRODUCER)
		producer_loop(m, r, sh, pl, warmup, n, &rc);
	else if (rc == 0)
		consumer_loop(m, r, sh, pl, warmup, n, &rc);
	{
		int b = barrier(r, sh, 1, nchild, rc < 0, "end");

		if (rc == 0)
			rc = b;
	}
	if (m->teardown)
		m->teardown(r);
	sh->rc[slot] = rc;
	memcpy(sh->why[slot], r->why, BENCH_WHY_MAX);
	/* exit(), not _exit(): iceoryx deregisters in static destructors. */
	exit(rc ? 1 : 0);
}

/* The median of n > 0 samples (the mean of the middle two when n is
 * even); sorts s. */
static double median_of(uint64_t *s, uint64_t n)
{
	qsort(s, n, sizeof(*s), bench_cmp_u64);
	return n % 2 ? (double)s[n / 2] :
		((double)s[n / 2 - 1] + (double)s[n / 2]) / 2;
}

/* The p99 of n > 0 sorted samples by nearest rank: the smallest sample
 * >= 99 % of all. */
static double p99_of(const uint64_t *s, uint64_t n)
{
	uint64_t k = (99 * n + 99) / 100;

	return (double)s[k ? k - 1 : 0];
}

static void stats(struct bench_result *res, uint64_t *s, uint64_t n)
{
	double sum = 0;

	if (!n)
		return;
	res->median_ns = median_of(s, n);
	for (uint64_t i = 0; i < n; i++)
		sum += (double)s[i];
	res->min_ns = (double)s[0];
	res->max_ns = (double)s[n - 1];
	res->mean_ns = sum / (double)n;
	res->p99_ns = p99_of(s, n);
}

/* Supervise the children until all exited: one failing leaves the rest
 * 3 s before they are killed (they may be blocked on it), the whole run
 * gets o->run_timeout seconds. Sleeps in poll() on pidfds so it does not
 * wake the pinned CPUs. */
static void supervise(struct bench_result *res, const struct opts *o,
		      unsigned nchild)
{
	int status, exited[BENCH_MAX_CHILDREN] = {0};
	int pidfd[BENCH_MAX_CHILDREN];
	uint64_t deadline, grace = 0;
	unsigned left = nchild;

	for (unsigned i = 0; i < nchild; i++)
		pidfd[i] = (int)syscall(SYS_pidfd_open, child_pids[i], 0);
	deadline = bench_now_ns() + (uint64_t)o->run_timeout * 1000000000u;
	while (left) {
		struct pollfd pf[BENCH_MAX_CHILDREN];
		uint64_t now, until;
		nfds_t npf = 0;
		int any = 0, ms;

		for (unsigned i = 0; i < nchild; i++) {
			if (exited[i])
				continue;
			if (waitpid(child_pids[i], &status, WNOHANG) ==
			    child_pids[i]) {
				exited[i] = 1;
				left--;
				child_pids[i] = -1;
				any = 1;
				if ((!WIFEXITED(status) ||
				     WEXITSTATUS(status) != 0) && !grace)
					grace = bench_now_ns() + 3000000000u;
			} else if (pidfd[i] >= 0) {
				pf[npf].fd = pidfd[i];
				pf[npf].events = POLLIN;
				npf++;
			}
		}
		if (any)
			continue;
		now = bench_now_ns();
		if (now > deadline || (grace && now > grace)) {
			for (unsigned i = 0; i < nchild; i++)
				if (!exited[i])
					kill(child_pids[i], SIGKILL);
			if (!grace) {
				res->status = BENCH_FAILED;
				snprintf(res->why, sizeof(res->why),
					 "timed out after %d s",
					 o->run_timeout);
			}
			grace = 0;
			deadline = UINT64_MAX;
			continue;
		}
		until = grace && grace < deadline ? grace : deadline;
		ms = until - now > 1000000000ull ? 1000 :
			(int)((until - now) / 1000000u) + 1;
		if (npf == (nfds_t)left)
			poll(pf, npf, ms); /* a pidfd polls readable on exit */
		else
			usleep(2000); /* no pidfd (old kernel): plain polling */
	}
	for (unsigned i = 0; i < nchild; i++)
		if (pidfd[i] >= 0)
			close(pidfd[i]);
}

/* The children's outcome into res; 0 when the round counts. */
static int collect(struct bench_result *res, const struct shared *sh,
		   const struct run_plan *pl, uint64_t warmup, uint64_t n)
{
	unsigned nchild = 1 + pl->consumers;

	for (unsigned i = 0; i < nchild; i++) {
		if (!sh->rc[i])
			continue;
		res->status = BENCH_FAILED;
		snprintf(res->why, sizeof(res->why), "%s%.0u: %.200s",
			 i ? "consumer " : "producer", i, sh->why[i]);
		return -1;
	}
	for (unsigned c = 0; c < pl->consumers; c++) {
		/* PACED: each consumer got the last one, maybe not all */
		if (pl->kind == BENCH_PACED ? sh->verified[c] > 0 :
		    sh->verified[c] == warmup + n)
			continue;
		res->status = BENCH_FAILED;
		snprintf(res->why, sizeof(res->why),
			 "consumer %u verified %llu of %llu payloads", c,
			 (unsigned long long)sh->verified[c],
			 (unsigned long long)(warmup + n));
		return -1;
	}
	return 0;
}

/*
 * One round of one method: fork the producer and the consumers, n
 * measured iterations after res->warmup excluded ones. On success the
 * samples go to out (PINGPONG, FANOUT: n round trips; PACED: the
 * latencies of every consumer, *outn of them) and the counters in res
 * grow; on failure res->status and res->why say so.
 */
static void run_one(const struct bench_method *m, struct bench_result *res,
		    const struct opts *o, const struct run_plan *pl,
		    unsigned run_id, uint64_t n, uint64_t *out, uint64_t *outn)
{
	uint64_t warmup = res->warmup;
	unsigned nchild = 1 + pl->consumers;
	size_t shlen = sizeof(struct shared) +
		       (size_t)pl->consumers * n * sizeof(uint64_t);
	struct shared *sh;
	struct bench_run r;

	*outn = 0;
	memset(&r, 0, sizeof(r));
	r.env = &env;
	r.size = res->size;
	r.write = res->write;
	r.run_id = run_id;
	r.kind = pl->kind;
	r.consumers = pl->consumers;
	r.fds[0] = r.fds[1] = -1;

	sh = mmap(NULL, shlen, PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		res->status = BENCH_FAILED;
		snprintf(res->why, sizeof(res->why), "mmap results: %s",
			 strerror(errno));
		return;
	}
	for (unsigned i = 0; i < nchild; i++) {
		sh->rc[i] = -EINTR;
		snprintf(sh->why[i], BENCH_WHY_MAX, "died");
	}
	sh->svc_pid = m->service_pid ? m->service_pid() : -1;
	if (o->settle && !o->smoke)
		settle();
	if (m->prepare && m->prepare(&r) < 0) {
		res->status = BENCH_FAILED;
		snprintf(res->why, sizeof(res->why), "prepare: %.200s", r.why);
		goto out;
	}
	fflush(stdout);
	fflush(stderr);
	for (unsigned k = nchild; k-- > 0;) {
		pid_t pid = fork();

		if (pid < 0) {
			res->status = BENCH_FAILED;
			snprintf(res->why, sizeof(res->why), "fork: %s",
				 strerror(errno));
			goto out;
		}
		if (pid == 0) {
			int cpu = -1;

			r.role = k ? BENCH_CONSUMER : BENCH_PRODUCER;
			r.index = k ? k - 1 : 0;
			/* one consumer: its own CPU; several: unpinned */
			if (o->pin && (k == 0 || pl->consumers == 1))
				cpu = o->cpu[k ? 1 : 0];
			child_main(m, &r, sh, pl, warmup, n, cpu);
		}
		child_pids[k] = pid;
	}
	supervise(res, o, nchild);
	if (res->status == BENCH_FAILED ||
	    collect(res, sh, pl, warmup, n) < 0)
		goto out;
	for (unsigned c = 0; c < pl->consumers; c++) {
		res->verified += sh->verified[c];
		res->cpu_cons_ns += sh->cpu_ns[1 + c];
	}
	res->loop_s += (double)sh->loop_ns / 1e9;
	res->cpu_prod_ns += sh->cpu_ns[0];
	res->cpu_svc_ns += sh->svc_ns;
	res->rounds++;
	if (pl->kind == BENCH_PACED) {
		for (unsigned c = 0; c < pl->consumers; c++) {
			memcpy(out + *outn, sh->samples + (uint64_t)c * n,
			       sh->lat_count[c] * sizeof(uint64_t));
			*outn += sh->lat_count[c];
			res->skipped += sh->skipped[c];
		}
	} else {
		memcpy(out, sh->samples, n * sizeof(uint64_t));
		*outn = n;
	}
out:
	for (unsigned i = 0; i < nchild; i++) {
		if (child_pids[i] > 0) {
			kill(child_pids[i], SIGKILL);
			waitpid(child_pids[i], NULL, 0);
			child_pids[i] = -1;
		}
	}
	if (m->unprepare)
		m->unprepare(&r);
	munmap(sh, shlen);
}

/* ---- main ---- */

static void tap_line(const struct bench_result *r, size_t n)
{
	char mode[48];

	if (r->kind == BENCH_PINGPONG)
		snprintf(mode, sizeof(mode), "%s", r->write ? "write" :
			 "nowrite");
	else if (r->kind == BENCH_FANOUT)
		snprintf(mode, sizeof(mode), "fan-out 1->%u %s", r->consumers,
			 r->write ? "write" : "nowrite");
	else
		snprintf(mode, sizeof(mode), "paced %.0f Hz 1->%u",
			 r->rate_hz, r->consumers);

	if (r->status == BENCH_OK)
		printf("ok %zu - %s %s %zu B: %llu payloads verified\n", n,
		       r->method->name, mode, r->size,
		       (unsigned long long)r->verified);
	else if (r->status == BENCH_NA)
		printf("ok %zu - %s %s %zu B # SKIP %s\n", n, r->method->name,
		       mode, r->size, r->why);
	else
		printf("not ok %zu - %s %s %zu B: %s\n", n, r->method->name,
		       mode, r->size, r->why);
}

static int pick_cpus(struct opts *o)
{
	cpu_set_t set;
	int found = 0;

	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return -errno;
	for (int c = 0; c < CPU_SETSIZE && found < 2; c++)
		if (CPU_ISSET(c, &set))
			o->cpu[found++] = c;
	return found == 2 ? 0 : -ENODEV;
}

static int want_method(const struct opts *o, const char *name)
{
	char *dup, *save = NULL;
	int yes = 0;

	if (!o->methods)
		return 1;
	dup = strdup(o->methods);
	for (char *t = strtok_r(dup, ",", &save); t && !yes;
	     t = strtok_r(NULL, ",", &save))
		yes = strcmp(t, name) == 0;
	free(dup);
	return yes;
}

/* The results the run matrix of o makes (main's loops, run_group's
 * slots, n/a ones included). */
static size_t matrix_results(const struct opts *o)
{
	size_t n = 0, modes = (size_t)((o->modes & 1) + (o->modes >> 1 & 1)),
	       fan = 0;

	for (size_t s = 0; s < o->size_count; s++)
		fan += o->sizes[s] <= FANOUT_MAX_SIZE;
	for (size_t i = 0; i < METHOD_COUNT; i++) {
		const struct bench_method *m = all_methods[i];

		if (!want_method(o, m->name))
			continue;
		if (o->kinds & 1)
			n += o->size_count * modes;
		if ((o->kinds & 2) && bench_method_runs(m, BENCH_FANOUT))
			n += fan * modes;
		if ((o->kinds & 4) && bench_method_runs(m, BENCH_PACED))
			n += o->rate_count * PACED_PLANS;
	}
	return n;
}

/* A result past the report's slots would be dropped unseen: false,
 * saying so, when the matrix has more. */
static bool matrix_fits(const struct opts *o)
{
	size_t n = matrix_results(o);

	if (n <= BENCH_MAX_RESULTS)
		return true;
	fprintf(stderr, "bench: %zu runs (methods x sizes x modes x kinds), "
		"at most %d: fewer --sizes or --methods\n", n,
		BENCH_MAX_RESULTS);
	return false;
}

/* Measured and warm-up counts of a run of plan pl (o's counts for
 * PINGPONG; --iters/--warmup/--scale apply to all). */
static void counts(const struct opts *o, const struct run_plan *pl,
		   size_t size, int write, uint64_t *n, uint64_t *w)
{
	if (pl->kind == BENCH_PACED) {
		/*
		 * 2 s at 1 kHz, 3 s at 30 Hz; smoke: a few messages. Never
		 * under PACED_ROUNDS_MIN rounds of PACED_ROUND_MIN messages
		 * (20 s at 30 Hz; fewer when --rounds asks for fewer),
		 * whatever --scale: a p99 of fewer than 200 is the largest
		 * sample or the one below, one hiccup of a shared machine,
		 * and a verdict from one such round a coin toss (the 30 Hz
		 * rows read one pooled round each before).
		 */
		const uint64_t floor = PACED_ROUND_MIN *
			(uint64_t)(o->rounds < PACED_ROUNDS_MIN ?
					   o->rounds : PACED_ROUNDS_MIN);

		*n = o->smoke ? (pl->rate_hz > 100 ? 30 : 4) :
			(uint64_t)((pl->rate_hz > 100 ? 2000 : 90) * o->scale);
		if (!o->smoke && *n < floor)
			*n = floor;
		*w = o->smoke ? 2 : (pl->rate_hz > 100 ? 100 : 5);
		if (o->iters > 0 && !o->smoke)
			*n = (uint64_t)o->iters;
		if (o->warmup >= 0 && !o->smoke)
			*w = (uint64_t)o->warmup;
		return;
	}
	*n = o->iters > 0 ? (uint64_t)o->iters :
		(uint64_t)((double)default_iters(size, write) * o->scale);
	*w = o->warmup >= 0 ? (uint64_t)o->warmup :
		default_warmup(size, write);
	/* four consumers check every byte: a quarter of the iterations */
	if (pl->kind == BENCH_FANOUT && o->iters <= 0 && *n >= 8)
		*n /= 4;
}

/*
 * Every method that runs plan pl at (size, write): rounds interleaved
 * across the methods, the order rotating, so load that comes and goes
 * on the machine is spread over all of them. Returns the failures.
 */
static int run_group(struct bench_report *rep, const struct opts *o,
		     const int *start_rc, char (*start_why)[BENCH_WHY_MAX],
		     FILE *table, const struct run_plan *pl, size_t size,
		     int write, unsigned *run_id)
{
	struct bench_result *group = rep->results + rep->result_count;
	uint64_t n, w, rounds, done = 0, *samples, *got;
	size_t gn = 0;
	int failed = 0;

	counts(o, pl, size, write, &n, &w);
	if (n < 1)
		n = 1;
	/* paced: a round needs PACED_ROUND_MIN messages for a p99 that is
	 * not just its largest latency */
	rounds = pl->kind == BENCH_PACED ? n / PACED_ROUND_MIN : n;
	if (rounds > (uint64_t)o->rounds)
		rounds = (uint64_t)o->rounds;
	if (rounds < 1)
		rounds = 1;
	for (size_t i = 0; i < METHOD_COUNT; i++) {
		const struct bench_method *m = all_methods[i];
		struct bench_result *res;

		if (!want_method(o, m->name) || !bench_method_runs(m, pl->kind))
			continue;
		if (rep->result_count == BENCH_MAX_RESULTS)
			break;
		res = &rep->results[rep->result_count++];
		gn++;
		memset(res, 0, sizeof(*res));
		res->method = m;
		res->size = size;
		res->write = write;
		res->kind = pl->kind;
		res->consumers = pl->consumers;
		res->rate_hz = pl->rate_hz;
		res->samples = n;
		res->warmup = w;
		res->status = BENCH_OK;
		if (start_rc[i] < 0) {
			res->status = start_rc[i] == -ENOENT ||
				start_rc[i] == -ENOSYS ? BENCH_NA :
				BENCH_FAILED;
			snprintf(res->why, sizeof(res->why), "%s",
				 start_why[i]);
		} else if (m->can_run &&
			   m->can_run(&env, size, res->why,
				      sizeof(res->why)) < 0) {
			res->status = BENCH_NA;
		}
	}
	if (!gn)
		return 0;
	samples = calloc(gn * n * pl->consumers, sizeof(uint64_t));
	got = calloc(gn, sizeof(uint64_t));
	if (!samples || !got) {
		perror("bench: samples");
		exit(1);
	}
	for (uint64_t rd = 0; rd < rounds; rd++) {
		uint64_t k = n / rounds + (rd < n % rounds);

		for (size_t j = 0; j < gn; j++) {
			size_t g = (j + rd) % gn;
			struct bench_result *res = &group[g];
			uint64_t outn = 0, *mine, cpu0;

			if (res->status != BENCH_OK)
				continue;
			mine = samples + g * n * pl->consumers + got[g];
			cpu0 = res->cpu_prod_ns + res->cpu_cons_ns +
			       res->cpu_svc_ns;
			run_one(res->method, res, o, pl, ++*run_id, k, mine,
				&outn);
			/* this round's own figures, for ratios paired round
			 * by round (rounds <= o->rounds <= the cap) */
			if (res->status == BENCH_OK && outn) {
				uint64_t rd1 = res->rounds - 1;

				res->round_median_ns[rd1] =
					median_of(mine, outn); /* sorts */
				res->round_p99_ns[rd1] = p99_of(mine, outn);
				res->round_cpu_ns[rd1] =
					(double)(res->cpu_prod_ns +
						 res->cpu_cons_ns +
						 res->cpu_svc_ns - cpu0) /
					(double)k;
			}
			got[g] += outn;
		}
		done += k;
	}
	for (size_t g = 0; g < gn; g++) {
		struct bench_result *res = &group[g];

		if (res->status == BENCH_OK) {
			stats(res, samples + g * n * pl->consumers, got[g]);
			res->delivered = got[g];
			res->handoffs_per_s =
				res->loop_s > 0 ? (double)n / res->loop_s : 0;
			res->gbytes_per_s =
				res->handoffs_per_s * (double)res->size / 1e9;
			res->cpu_ns = (double)(res->cpu_prod_ns +
					       res->cpu_cons_ns +
					       res->cpu_svc_ns) /
				      (double)n;
		}
		if (res->status == BENCH_FAILED)
			failed++;
		report_line(table, res);
		if (o->tap)
			tap_line(res, (size_t)(res - rep->results) + 1);
		fflush(table);
		fflush(stdout);
	}
	free(samples);
	free(got);
	return failed;
}

int main(int argc, char **argv)
{
	static size_t env_sizes[33]; /* o.sizes, and the paced runs' */
	static const struct option lo[] = {
		{ "methods", required_argument, NULL, 'm' },
		{ "sizes", required_argument, NULL, 's' },
		{ "modes", required_argument, NULL, 'M' },
		{ "iters", required_argument, NULL, 'n' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "scale", required_argument, NULL, 'S' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "cpus", required_argument, NULL, 'c' },
		{ "no-pin", no_argument, NULL, 'P' },
		{ "no-settle", no_argument, NULL, 1000 },
		{ "timeout", required_argument, NULL, 't' },
		{ "json", required_argument, NULL, 'j' },
		{ "png", required_argument, NULL, 'p' },
		{ "markdown", required_argument, NULL, 'k' },
		{ "tensord", required_argument, NULL, 'T' },
		{ "roudi", required_argument, NULL, 'R' },
		{ "smoke", no_argument, NULL, 'Z' },
		{ "kinds", required_argument, NULL, 'K' },
		{ "paced-size", required_argument, NULL, 'Q' },
		{ "rates", required_argument, NULL, 'H' },
		{ "tap", no_argument, NULL, 'A' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const size_t default_sizes[] = {
		64, 4u << 10, 1u << 20, 16u << 20, 64u << 20, 1u << 30,
	};
	struct opts o = {
		.modes = 3, .iters = -1, .warmup = -1, .scale = 1.0,
		.rounds = DEFAULT_ROUNDS, .pin = 1, .settle = 1, .cpu = { -1, -1 },
		.run_timeout = 300, .kinds = 7, .paced_size = 4096,
		.rates = {1000, 30}, .rate_count = 2,
	};
	static struct bench_report rep;
	char start_why[METHOD_COUNT][BENCH_WHY_MAX];
	int start_rc[METHOD_COUNT];
	int c, failed = 0, sizes_given = 0;
	FILE *table;
	unsigned run_id = 0;

	main_pid = getpid();
	rep.started_ns = bench_now_ns();
	report_loadavg(rep.load_start, sizeof(rep.load_start));
	env.tensord_path = getenv("TD_BENCH_TENSORD");
	if (!env.tensord_path)
		env.tensord_path = TD_BENCH_TENSORD_DEFAULT;
	env.roudi_path = TD_BENCH_ROUDI_DEFAULT;

	while ((c = getopt_long(argc, argv, "vh", lo, NULL)) != -1) {
		switch (c) {
		case 'm': o.methods = optarg; break;
		case 's':
			if (parse_sizes(optarg, &o) < 0)
				return 2;
			sizes_given = 1;
			break;
		case 'M':
			o.modes = parse_modes(optarg);
			if (o.modes <= 0) {
				fprintf(stderr, "bad --modes (write,nowrite)\n");
				return 2;
			}
			break;
		case 'n': o.iters = atoll(optarg); break;
		case 'w': o.warmup = atoll(optarg); break;
		case 'S': o.scale = atof(optarg); break;
		case 'r': o.rounds = atoi(optarg); break;
		case 'c':
			if (sscanf(optarg, "%d,%d", &o.cpu[0], &o.cpu[1]) != 2) {
				fprintf(stderr, "bad --cpus\n");
				return 2;
			}
			break;
		case 'P': o.pin = 0; break;
		case 1000: o.settle = 0; break;
		case 't': o.run_timeout = atoi(optarg); break;
		case 'j': o.json = optarg; break;
		case 'p': o.png = optarg; break;
		case 'k': o.markdown = optarg; break;
		case 'T': env.tensord_path = optarg; break;
		case 'R': env.roudi_path = optarg; break;
		case 'Z': o.smoke = 1; break;
		case 'K':
			o.kinds = parse_kinds(optarg);
			if (o.kinds <= 0) {
				fprintf(stderr, "bad --kinds (pingpong,fanout,"
					"paced)\n");
				return 2;
			}
			break;
		case 'Q':
			if (parse_size(optarg, &o.paced_size) < 0 ||
			    o.paced_size < 24) {
				fprintf(stderr, "bad --paced-size\n");
				return 2;
			}
			break;
		case 'H':
			if (parse_rates(optarg, &o) < 0) {
				fprintf(stderr, "bad --rates (1 to 4 rates in "
					"Hz, 1-100000)\n");
				return 2;
			}
			break;
		case 'A': o.tap = 1; break;
		case 'v': env.verbose = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	/* --rounds: at most the round medians a result keeps */
	if (optind != argc || o.iters == 0 || o.scale <= 0 || o.rounds < 1 ||
	    o.rounds > BENCH_MAX_ROUNDS || o.run_timeout <= 0) {
		usage(stderr);
		return 2;
	}
	if (o.smoke) {
		if (!sizes_given) {
			o.sizes[0] = 64;
			o.sizes[1] = 4u << 10;
			o.sizes[2] = 64u << 10;
			o.size_count = 3;
		}
		if (o.iters < 0)
			o.iters = 30;
		if (o.warmup < 0)
			o.warmup = 3;
		if (o.run_timeout == 300)
			o.run_timeout = 60;
	} else if (!sizes_given) {
		memcpy(o.sizes, default_sizes, sizeof(default_sizes));
		o.size_count = sizeof(default_sizes) / sizeof(size_t);
	}
	if (!matrix_fits(&o))
		return 2;
	if (o.pin && o.cpu[0] < 0 && pick_cpus(&o) < 0) {
		fprintf(stderr, "bench: fewer than 2 CPUs allowed, not "
			"pinning\n");
		o.pin = 0;
	}

	snprintf(env.tmpdir, sizeof(env.tmpdir), "%s/tdbench.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(env.tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	/* every size a run of this invocation hands over: the paced runs'
	 * too, which --sizes need not name (RouDi makes a mempool of each,
	 * and an iceoryx run of a size without one dies) */
	memcpy(env_sizes, o.sizes, o.size_count * sizeof(*env_sizes));
	env.sizes = env_sizes;
	env.size_count = o.size_count;
	if (o.kinds & 4)
		env_sizes[env.size_count++] = o.paced_size;
	atexit(cleanup);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	signal(SIGPIPE, SIG_IGN);

	rep.pinned = o.pin;
	rep.cpu[0] = o.cpu[0];
	rep.cpu[1] = o.cpu[1];
	rep.argc = argc;
	rep.argv = argv;
	rep.smoke = o.smoke;
	warm_settle = o.settle && !o.smoke;

	for (size_t i = 0; i < METHOD_COUNT; i++) {
		const struct bench_method *m = all_methods[i];

		start_rc[i] = 0;
		start_why[i][0] = 0;
		if (!want_method(&o, m->name))
			continue;
		rep.methods[rep.method_count++] = m;
		if (m->start) {
			method_started[i] = 1;
			start_rc[i] = m->start(&env, start_why[i],
					       BENCH_WHY_MAX);
		}
		if (!m->setup && start_rc[i] == 0) {
			start_rc[i] = -ENOSYS;
			snprintf(start_why[i], BENCH_WHY_MAX,
				 "method has no setup step");
		}
		if (start_rc[i] < 0)
			fprintf(stderr, "bench: %s: %s\n", m->name,
				start_why[i]);
	}
	if (!rep.method_count) {
		fprintf(stderr, "bench: no method selected\n");
		return 2;
	}

	table = o.tap ? stderr : stdout;
	fprintf(table, "%-13s %-7s %10s %12s %12s %8s %10s %9s\n", "method",
		"mode", "size", "median_us", "p99_us", "samples", "GB/s",
		"cpu_us");
	/* ping-pong: every method, every size and mode */
	for (size_t si = 0; (o.kinds & 1) && si < o.size_count; si++)
		for (int write = 1; write >= 0; write--)
			if (o.modes & (write ? 2 : 1))
				failed += run_group(&rep, &o, start_rc,
						    start_why, table,
						    &(struct run_plan){
							    BENCH_PINGPONG, 1,
							    0},
						    o.sizes[si], write,
						    &run_id);
	/* fan-out 1 -> 4: publish to the last consumer's ack */
	for (size_t si = 0; (o.kinds & 2) && si < o.size_count; si++)
		for (int write = 1; write >= 0; write--)
			if ((o.modes & (write ? 2 : 1)) &&
			    o.sizes[si] <= FANOUT_MAX_SIZE)
				failed += run_group(&rep, &o, start_rc,
						    start_why, table,
						    &(struct run_plan){
							    BENCH_FANOUT,
							    BENCH_MAX_CONSUMERS,
							    0},
						    o.sizes[si], write,
						    &run_id);
	/* paced streams: one-way latency and CPU per message */
	for (size_t ri = 0; (o.kinds & 4) && ri < o.rate_count; ri++)
		for (unsigned nc = 1; nc <= BENCH_MAX_CONSUMERS;
		     nc += BENCH_MAX_CONSUMERS - 1)
			failed += run_group(&rep, &o, start_rc, start_why,
					    table,
					    &(struct run_plan){
						    BENCH_PACED, nc,
						    o.rates[ri]},
					    o.paced_size, 0, &run_id);

	report_loadavg(rep.load_end, sizeof(rep.load_end));
	if (o.json && report_json(o.json, &rep, &env) < 0)
		failed++;
	if (o.markdown && report_markdown(o.markdown, &rep) < 0)
		failed++;
	if (o.png && report_plot(o.png, &rep, env.tmpdir) < 0)
		failed++;
	if (o.tap)
		printf("1..%zu\n", rep.result_count);
	if (o.smoke) {
		size_t ok = 0, na = 0;

		for (size_t i = 0; i < rep.result_count; i++) {
			ok += rep.results[i].status == BENCH_OK;
			na += rep.results[i].status == BENCH_NA;
		}
		fprintf(table, "smoke: %zu ok, %zu n/a, %d failed\n", ok, na,
			failed);
	}
	return failed ? 1 : 0;
}
