/* SPDX-License-Identifier: MIT */
/*
 * tensord-fencebench: what a consumer's own fence costs against the
 * producer's eventfd it replaced (docs/fastpath.md, "Fences").
 *
 * One daemon, a producer and a consumer connection. Each handoff: the
 * producer publishes a 64-byte tensor with a new, unsignalled eventfd
 * fence, the consumer GETs it, a waiter thread blocks in td_fence_wait()
 * on a fence, and the producer signals its eventfd, timing the signal
 * to the waiter's return:
 *
 *   own     the fence the GET handed the consumer: a timerfd the daemon
 *           fires when it sees the producer's eventfd signal (the relay);
 *   shared  a dup of the producer's eventfd itself, what every consumer
 *           was handed before (and an older client still is).
 *
 * Rounds alternate the two (--rounds of --handoffs each); reported per
 * mode: median, p90 and p99 of the signal-to-wake time, the daemon's CPU
 * per handoff (/proc/PID/schedstat over the round: the PUBLISH, GET and
 * RELEASE, plus the relay for `own`), and own/shared of the medians, the
 * median of the per-round ratios. Nothing is asserted.
 */
#include "bench.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tensord/tensord.h>

#define MAX_ROUNDS 32
/* µs the signaller leaves the waiter to block before it signals */
#define SETTLE_US 200

enum { OWN, SHARED, NMODES };
static const char *const mode_name[NMODES] = {"own", "shared"};

static void die(const char *what, const char *why)
{
	fprintf(stderr, "tensord-fencebench: %s: %s\n", what, why);
	exit(1);
}

/* The waiter: a fence fd arrives on go[0], its wake time goes to done[1]. */
static int go[2], done[2];

static void *waiter(void *arg)
{
	int fd;

	(void)arg;
	while (read(go[0], &fd, sizeof(fd)) == (ssize_t)sizeof(fd)) {
		struct td_error e = {0};
		uint64_t t1;

		if (td_fence_wait(fd, 10000, &e) < 0)
			die("wait", e.reason);
		t1 = bench_now_ns();
		if (write(done[1], &t1, sizeof(t1)) != (ssize_t)sizeof(t1))
			die("waiter", strerror(errno));
	}
	return NULL;
}

/* One handoff in mode m: signal-to-wake ns. */
static uint64_t handoff(struct td_client *p, struct td_client *c, int m)
{
	const uint64_t shape[1] = {64};
	uint8_t bytes[64] = {0};
	struct td_error e = {0};
	struct td_tensor *t;
	uint64_t t0, t1;
	int efd = td_fence_create(), fd;

	if (efd < 0)
		die("td_fence_create", strerror(-efd));
	struct td_publish pub = {.name = "fence/x", .flags = TD_PUBLISH_FENCE,
				 .dtype = TD_TENSOR_U8, .ndim = 1,
				 .shape = shape, .fence_fd = efd};
	if (td_client_put(p, &pub, bytes, sizeof(bytes), NULL, &e) < 0)
		die("put", e.reason);
	if (td_client_get(c, "fence/x", &t, &e) < 0)
		die("get", e.reason);
	fd = m == OWN ? td_tensor_fence_fd(t) : dup(efd);
	if (fd < 0)
		die("fence fd", "none");
	if (write(go[1], &fd, sizeof(fd)) != (ssize_t)sizeof(fd))
		die("go", strerror(errno));
	usleep(SETTLE_US);
	t0 = bench_now_ns();
	if (td_fence_signal(efd, &e) < 0)
		die("signal", e.reason);
	if (read(done[0], &t1, sizeof(t1)) != (ssize_t)sizeof(t1))
		die("done", strerror(errno));
	if (m == SHARED)
		close(fd);
	td_tensor_release(t);
	close(efd);
	return t1 - t0;
}

static void usage(int status)
{
	fprintf(status ? stderr : stdout, "usage: tensord-fencebench [--handoffs N] "
			"[--rounds R] [--tensord PATH]\n");
	exit(status);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"handoffs", required_argument, NULL, 'n'},
		{"rounds", required_argument, NULL, 'r'},
		{"tensord", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}};
	struct bench_env env = {.tensord_path = TD_FENCEBENCH_TENSORD_DEFAULT};
	unsigned n = 500, rounds = 5;
	char sock[256], why[BENCH_WHY_MAX];
	struct td_client *p, *c;
	struct td_error e = {0};
	double med[NMODES][MAX_ROUNDS], ratio[MAX_ROUNDS];
	uint64_t *ns[NMODES], cpu[NMODES] = {0};
	pthread_t th;
	int pid, o;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (o == 'n')
			n = (unsigned)strtoul(optarg, NULL, 10);
		else if (o == 'r')
			rounds = (unsigned)strtoul(optarg, NULL, 10);
		else if (o == 't')
			env.tensord_path = optarg;
		else if (o == 'h')
			usage(0);
		else
			usage(2);
	}
	if (n < 2 || !rounds || rounds > MAX_ROUNDS)
		usage(2);
	for (int m = 0; m < NMODES; m++)
		if (!(ns[m] = calloc((size_t)n * rounds, sizeof(uint64_t))))
			die("calloc", strerror(errno));
	snprintf(env.tmpdir, sizeof(env.tmpdir), "/tmp/td-fence-XXXXXX");
	if (!mkdtemp(env.tmpdir))
		die("mkdtemp", strerror(errno));
	if (bench_tensord_start(&env, "fence", sock, sizeof(sock), &pid, why,
				sizeof(why)) < 0)
		die("tensord", why);
	if (td_client_connect(sock, &p, &e) < 0 ||
	    td_client_connect(sock, &c, &e) < 0)
		die("connect", e.reason);
	if (pipe(go) < 0 || pipe(done) < 0 ||
	    pthread_create(&th, NULL, waiter, NULL) != 0)
		die("waiter", strerror(errno));
	for (unsigned r = 0; r < rounds; r++) {
		for (int m = 0; m < NMODES; m++) {
			uint64_t *at = ns[m] + (size_t)r * n, c0;

			c0 = bench_cpu_ns(pid);
			for (unsigned i = 0; i < n; i++)
				at[i] = handoff(p, c, m);
			cpu[m] += bench_cpu_ns(pid) - c0;
			qsort(at, n, sizeof(*at), bench_cmp_u64);
			med[m][r] = (double)bench_pct(at, n, 0.5);
		}
		ratio[r] = med[OWN][r] / med[SHARED][r];
	}
	close(go[1]);
	pthread_join(th, NULL);
	td_client_close(c);
	td_client_close(p);
	bench_reap(pid, 5000);
	unlink(sock);
	snprintf(why, sizeof(why), "%.200s/fence.log", env.tmpdir);
	unlink(why);
	rmdir(env.tmpdir);

	printf("| fence | handoffs | median µs | p90 µs | p99 µs | daemon CPU "
	       "µs/handoff |\n|---|---|---|---|---|---|\n");
	for (int m = 0; m < NMODES; m++) {
		size_t all = (size_t)n * rounds;

		qsort(ns[m], all, sizeof(uint64_t), bench_cmp_u64);
		printf("| %s | %zu | %.1f | %.1f | %.1f | %.1f |\n",
		       mode_name[m], all, bench_pct(ns[m], all, 0.5) / 1e3,
		       bench_pct(ns[m], all, 0.9) / 1e3,
		       bench_pct(ns[m], all, 0.99) / 1e3,
		       (double)cpu[m] / (double)all / 1e3);
		free(ns[m]);
	}
	printf("\nown/shared, signal to wake: %.2f× (median of %u rounds)\n",
	       bench_median_d(ratio, rounds), rounds);
	return 0;
}
