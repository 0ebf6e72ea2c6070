/* SPDX-License-Identifier: MIT */
/*
 * tensord-parkbench: what GETs parked on other names cost a PUBLISH
 * (daemon/lease.c, docs/reliability.md "Per-client budgets").
 *
 * One daemon; a producer publishes a stream ("park/stream": alloc from
 * the loan, publish, one round trip each when warm), timing each
 * round trip, in two phases per round:
 *
 *   idle    nothing is parked;
 *   parked  --conns clients have each parked --per GET NEWER requests,
 *           every one on a name of its own that nobody publishes
 *           (td_client_get_newer_async), before the phase starts.
 *
 * With --ring, the producer has also made a ring ("park/ring") it never
 * publishes to, and in the parked phase one more GET NEWER waits on it:
 * the daemon retries a GET parked on a ring every millisecond (a ring's
 * producer publishes through shared memory, unseen by the daemon).
 *
 * Reported: the producer's round trip in each phase (median, p90, p99
 * over all rounds), the daemon's CPU time per publish in each phase
 * (/proc/PID/schedstat, everything it did while the phase ran: the
 * publishes and any timer), the daemon's CPU while everything is parked
 * and nothing is published (QUIET_MS a round; with --timed, while one
 * more client loops over GETs of 1 ms that time out, and then per such
 * GET: each timeout is the daemon's deadline timer firing), and
 * parked/idle of the
 * medians, the median of the per-round ratios. Nothing is asserted. A daemon that walks
 * every parked GET on every PUBLISH, or on every retry of a ring GET,
 * shows ratios that grow with conns x per; one that looks only at the
 * GETs of the published name (and the ring's), about 1.
 */
#include "bench.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tensord/tensord.h>

#define MAX_ROUNDS 32
#define MAX_CONNS 512
/* ms the daemon is watched with everything parked and nothing published */
#define QUIET_MS 500

enum { IDLE, PARKED, NPHASES };
static const char *const phase_name[NPHASES] = {"idle", "parked"};

static void die(const char *what, const char *why)
{
	fprintf(stderr, "tensord-parkbench: %s: %s\n", what, why);
	exit(1);
}

/* a parked GET that is answered: only at the end, the daemon cutting it */
static void on_get(struct td_client *c, int rc, struct td_tensor *t,
		   const struct td_error *e, void *ud)
{
	(void)c;
	(void)rc;
	(void)e;
	(void)ud;
	td_tensor_release(t);
}

/* n publishes of the stream, their round trips into ns[] */
static void publish_n(struct td_client *p, unsigned n, uint64_t *ns)
{
	uint64_t size = 64, shape[1] = {64}, v;
	struct td_error e = {0};

	for (unsigned i = 0; i < n; i++) {
		struct td_publish pub = {.name = "park/stream",
					 .dtype = TD_TENSOR_U8,
					 .ndim = 1,
					 .shape = shape};
		uint64_t t0 = bench_now_ns();
		struct td_alloc *a;

		if (td_client_alloc_ex(p, 1, &size, TD_ALLOC_STREAM, &a,
				       &e) < 0)
			die("alloc", e.reason);
		if (td_client_publish_alloc(p, a, &pub, &v, &e) < 0)
			die("publish", e.reason);
		ns[i] = bench_now_ns() - t0;
	}
}

/* GETs of 1 ms on a name nobody publishes, one after the other, for ms
 * milliseconds on a client of its own; how many */
static unsigned timed_gets(const char *sock, unsigned ms)
{
	uint64_t end = bench_now_ns() + (uint64_t)ms * 1000000;
	struct td_client *c;
	struct td_tensor *t;
	struct td_error e = {0};
	unsigned n = 0;

	if (td_client_connect(sock, &c, &e) < 0)
		die("timed: connect", e.reason);
	while (bench_now_ns() < end) {
		if (td_client_get_newer(c, "park/timed", 0, 1, &t, &e) !=
		    -ETIMEDOUT)
			die("timed GET", e.reason);
		n++;
	}
	td_client_close(c);
	return n;
}

static void usage(int status)
{
	fprintf(status ? stderr : stdout,
		"usage: tensord-parkbench [--conns N] [--per K] "
		"[--publishes P] [--rounds R] [--ring] [--timed] [--watches] "
		"[--tensord PATH]\n"
		"A producer's publish round trip with nothing parked and with "
		"N clients x K GETs parked on other names (default 16 x 256, "
		"the default per-uid limit of 4096 parked GETs), P publishes "
		"a phase (default 2000), R rounds (default 5); --ring: one more "
		"GET parked on a ring nobody publishes to; --timed: while all "
		"is parked, one more client loops over GETs of 1 ms; --watches: "
		"the clients watch their names instead of parking GETs.\n");
	exit(status);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"conns", required_argument, NULL, 'c'},
		{"per", required_argument, NULL, 'k'},
		{"publishes", required_argument, NULL, 'n'},
		{"rounds", required_argument, NULL, 'r'},
		{"tensord", required_argument, NULL, 't'},
		{"ring", no_argument, NULL, 'g'},
		{"timed", no_argument, NULL, 'm'},
		{"watches", no_argument, NULL, 'w'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}};
	struct bench_env env = {.tensord_path = TD_PARKBENCH_TENSORD_DEFAULT};
	unsigned conns = 16, per = 256, pubs = 2000, rounds = 5;
	bool ring = false, timed = false, watches = false;
	unsigned ntimed = 0;
	struct td_ring *rg = NULL;
	uint64_t cpu[NPHASES] = {0}, quiet = 0;
	static struct td_client *cs[MAX_CONNS + 1];
	double ratio[MAX_ROUNDS];
	char sock[300], why[BENCH_WHY_MAX];
	struct td_client *p;
	struct td_entry ent;
	struct td_error e = {0};
	uint64_t *ns[NPHASES];
	int pid, o;

	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (o == 'c')
			conns = (unsigned)atoi(optarg);
		else if (o == 'k')
			per = (unsigned)atoi(optarg);
		else if (o == 'n')
			pubs = (unsigned)atoi(optarg);
		else if (o == 'r')
			rounds = (unsigned)atoi(optarg);
		else if (o == 't')
			env.tensord_path = optarg;
		else if (o == 'g')
			ring = true;
		else if (o == 'm')
			timed = true;
		else if (o == 'w')
			watches = true;
		else if (o == 'h')
			usage(0);
		else
			usage(2);
	}
	/* the timed GETs are GET requests, not a follow (read at connect) */
	if (timed && setenv("TENSORD_GET_FOLLOW", "0", 1) < 0)
		die("setenv", strerror(errno));
	if (!conns || conns > MAX_CONNS || !per || per > 256 || pubs < 2 ||
	    !rounds || rounds > MAX_ROUNDS)
		usage(2);
	for (int ph = 0; ph < NPHASES; ph++) {
		ns[ph] = calloc((size_t)pubs * rounds, sizeof(uint64_t));
		if (!ns[ph])
			die("calloc", strerror(errno));
	}
	snprintf(env.tmpdir, sizeof(env.tmpdir), "/tmp/td-park-XXXXXX");
	if (!mkdtemp(env.tmpdir))
		die("mkdtemp", strerror(errno));
	if (bench_tensord_start(&env, "park", sock, sizeof(sock), &pid, why,
				sizeof(why)) < 0)
		die("tensord", why);
	if (td_client_connect(sock, &p, &e) < 0)
		die("producer: connect", e.reason);
	if (ring) {
		uint64_t shape[1] = {64};
		struct td_ring_desc d = {.dtype = TD_TENSOR_U8,
					 .ndim = 1,
					 .shape = shape};

		if (td_ring_create(p, "park/ring", &d, &rg, &e) < 0)
			die("ring", e.reason);
	}
	for (unsigned r = 0; r < rounds; r++) {
		uint64_t *at[NPHASES] = {ns[IDLE] + (size_t)r * pubs,
					 ns[PARKED] + (size_t)r * pubs};
		double med[NPHASES];
		uint64_t c0;

		c0 = bench_cpu_ns(pid);
		publish_n(p, pubs, at[IDLE]);
		cpu[IDLE] += bench_cpu_ns(pid) - c0;
		for (unsigned c = 0; c < conns; c++) {
			if (td_client_connect(sock, &cs[c], &e) < 0)
				die("parker: connect", e.reason);
			for (unsigned k = 0; k < per; k++) {
				char name[64];

				snprintf(name, sizeof(name), "park/%u/%u/%u", r,
					 c, k);
				if (watches) {
					uint64_t id;

					if (td_client_watch(cs[c], name, 0, &id,
							    &e) < 0)
						die("watch", e.reason);
				} else if (td_client_get_newer_async(
						   cs[c], name, 0, -1, on_get,
						   NULL, &e) < 0) {
					die("park", e.reason);
				}
			}
			/* a round trip after them: all are parked */
			if (td_client_stat(cs[c], "park/none", &ent, &e) !=
			    -ENOENT)
				die("parker: STAT", e.reason);
		}
		if (ring) {
			/* a connection of its own: the others are full */
			if (td_client_connect(sock, &cs[conns], &e) < 0)
				die("ring parker: connect", e.reason);
			if (td_client_get_newer_async(cs[conns], "park/ring",
						      0, -1, on_get, NULL,
						      &e) < 0 ||
			    td_client_stat(cs[conns], "park/none", &ent,
					   &e) != -ENOENT)
				die("park on the ring", e.reason);
		}
		c0 = bench_cpu_ns(pid);
		publish_n(p, pubs, at[PARKED]);
		cpu[PARKED] += bench_cpu_ns(pid) - c0;
		/* nothing published: what the parked GETs cost by themselves */
		c0 = bench_cpu_ns(pid);
		if (timed)
			ntimed += timed_gets(sock, QUIET_MS);
		else
			usleep(QUIET_MS * 1000);
		quiet += bench_cpu_ns(pid) - c0;
		for (unsigned c = 0; c < conns + ring; c++)
			td_client_close(cs[c]);
		for (int ph = 0; ph < NPHASES; ph++) {
			qsort(at[ph], pubs, sizeof(uint64_t), bench_cmp_u64);
			med[ph] = (double)bench_pct(at[ph], pubs, 0.5);
		}
		ratio[r] = med[PARKED] / med[IDLE];
	}
	if (rg)
		td_ring_close(rg);
	td_client_close(p);
	bench_reap(pid, 5000);
	unlink(sock);
	snprintf(why, sizeof(why), "%.200s/park.log", env.tmpdir);
	unlink(why);
	rmdir(env.tmpdir);

	printf("A producer's publish round trip in µs, nothing parked and "
	       "%u x %u GETs parked on other names%s (%u publishes a phase, "
	       "%u rounds)\n\n",
	       conns, per, ring ? " and one on a ring" : "", pubs, rounds);
	printf("| phase | publishes | median | p90 | p99 | daemon CPU µs "
	       "per publish |\n"
	       "|---|---|---|---|---|---|\n");
	for (int ph = 0; ph < NPHASES; ph++) {
		size_t n = (size_t)pubs * rounds;

		qsort(ns[ph], n, sizeof(uint64_t), bench_cmp_u64);
		printf("| %s | %zu | %.1f | %.1f | %.1f | %.1f |\n",
		       phase_name[ph], n,
		       (double)bench_pct(ns[ph], n, 0.5) / 1e3,
		       (double)bench_pct(ns[ph], n, 0.9) / 1e3,
		       (double)bench_pct(ns[ph], n, 0.99) / 1e3,
		       (double)cpu[ph] / 1e3 / (double)n);
		free(ns[ph]);
	}
	printf("\nThe daemon's CPU with everything parked and nothing "
	       "published for %u ms a round%s: %.2f%% of a CPU\n",
	       QUIET_MS, timed ? " (one client's GETs of 1 ms meanwhile)" : "",
	       (double)quiet / 1e4 / QUIET_MS / rounds);
	if (timed)
		printf("meanwhile one client's GETs of 1 ms: %u, the daemon's "
		       "CPU per GET %.1f µs\n",
		       ntimed, ntimed ? (double)quiet / 1e3 / ntimed : 0.0);
	printf("\nparked / idle, median round trip: %.2f× (median of %u "
	       "per-round ratios); daemon CPU per publish: %.2f×\n",
	       bench_median_d(ratio, rounds), rounds,
	       cpu[IDLE] ? (double)cpu[PARKED] / (double)cpu[IDLE] : 0.0);
	return 0;
}
