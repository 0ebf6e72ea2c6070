/* SPDX-License-Identifier: MIT */
/*
 * tensord-policybench: what a large access policy costs a LIST
 * (bench/README.md, "Policies"). A daemon (as root, the bench's uid) runs
 * with --policy; the bench publishes --names tensors under n/ as root,
 * then a child as nobody LISTs them all --lists times per round. Rounds
 * alternate two policies through SIGHUP: "small", the one line that
 * lets nobody read n/, and "large", --rules lines (the same line last,
 * the others other uids' and gids' on overlapping prefixes). Reported:
 * the median LIST and the daemon's CPU per LIST in each, large / small.
 * Nothing is asserted; the suite's run only fails if a request does.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tensord/tensord.h>

#include "bench.h"

#define NOBODY 65534
#define MAX_ROUNDS 16

static void die(const char *what, const char *why)
{
	fprintf(stderr, "policybench: %s: %s\n", what, why);
	exit(1);
}

static void write_policy(const char *path, unsigned rules)
{
	FILE *f = fopen(path, "w");

	if (!f)
		die(path, strerror(errno));
	for (unsigned i = 1; i < rules; i++)
		fprintf(f, "allow %s=%u %s n/%u\n", i % 2 ? "uid" : "gid",
			1000 + i, i % 3 ? "r" : "rw", i % 100);
	fprintf(f, "allow uid=%u r n/\n", NOBODY);
	fclose(f);
}

/* Descriptors for every plane: raise the hard limit where root may
 * (CAP_SYS_RESOURCE); else --names must fit the limit there is. */
static int more_fds(void *arg)
{
	struct rlimit rl = {.rlim_cur = 1 << 20, .rlim_max = 1 << 20};

	(void)arg;
	(void)setrlimit(RLIMIT_NOFILE, &rl);
	return 0;
}

static unsigned log_count(const char *path, const char *needle)
{
	char line[512];
	unsigned n = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

/* In a child as nobody: lists LISTs of everything; the median ns back
 * through fd, or 0 when a LIST fails or sees the wrong count. */
static void lister(const char *sock, unsigned lists, size_t want, int fd)
{
	uint64_t ns[64], med = 0;
	struct td_client *c;
	struct td_error e = {0};

	if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
		_exit(2);
	if (td_client_connect(sock, &c, &e) == 0) {
		unsigned i;

		for (i = 0; i < lists; i++) {
			struct td_entry *l;
			size_t count;
			uint64_t t0 = bench_now_ns();

			if (td_client_list(c, "", &l, &count, &e) < 0 ||
			    count != want)
				break;
			ns[i] = bench_now_ns() - t0;
			td_entry_list_free(l, count);
		}
		if (i == lists) {
			qsort(ns, lists, sizeof(ns[0]), bench_cmp_u64);
			med = ns[lists / 2];
		}
		td_client_close(c);
	}
	if (write(fd, &med, sizeof(med)) != sizeof(med))
		_exit(3);
	_exit(med ? 0 : 1);
}

static uint64_t run_lists(const char *sock, unsigned lists, size_t want,
			  int dpid, uint64_t *cpu)
{
	int pfd[2], st;
	uint64_t med = 0, c0 = bench_cpu_ns(dpid);
	pid_t pid;

	if (pipe(pfd) < 0)
		die("pipe", strerror(errno));
	pid = fork();
	if (pid == 0) {
		close(pfd[0]);
		lister(sock, lists, want, pfd[1]);
	}
	close(pfd[1]);
	if (read(pfd[0], &med, sizeof(med)) != sizeof(med))
		med = 0;
	close(pfd[0]);
	waitpid(pid, &st, 0);
	*cpu = (bench_cpu_ns(dpid) - c0) / lists;
	if (!med)
		die("LIST", "a LIST as nobody failed or listed the wrong "
			    "count");
	return med;
}

static void usage(int status)
{
	fprintf(status ? stderr : stdout, "usage: tensord-policybench [--names 15000] "
			"[--rules 1024] [--lists 5] [--rounds 3] "
			"[--tensord PATH]\n");
	exit(status);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"names", required_argument, NULL, 'n'},
		{"rules", required_argument, NULL, 'r'},
		{"lists", required_argument, NULL, 'l'},
		{"rounds", required_argument, NULL, 'k'},
		{"tensord", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}};
	const char *tensord = TD_POLICYBENCH_TENSORD_DEFAULT;
	unsigned names = 15000, rules = 1024, lists = 5, rounds = 3;
	unsigned reloads = 0;
	char dir[64], sock[128], logp[128], pol[128], small[128], large[128];
	double med[2][MAX_ROUNDS], cpu[2][MAX_ROUNDS], ratio[MAX_ROUNDS];
	struct td_client *c;
	struct td_error e = {0};
	int pid, o;

	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (o == 'n')
			names = (unsigned)atoi(optarg);
		else if (o == 'r')
			rules = (unsigned)atoi(optarg);
		else if (o == 'l')
			lists = (unsigned)atoi(optarg);
		else if (o == 'k')
			rounds = (unsigned)atoi(optarg);
		else if (o == 't')
			tensord = optarg;
		else if (o == 'h')
			usage(0);
		else
			usage(2);
	}
	if (!names || !rules || rules > 1024 || !lists || lists > 64 ||
	    !rounds || rounds > MAX_ROUNDS)
		usage(2);
	if (geteuid() != 0) {
		printf("policybench: needs root to list as a second uid; "
		       "skipped\n");
		return 0;
	}
	snprintf(dir, sizeof(dir), "/tmp/td-policy-XXXXXX");
	if (!mkdtemp(dir) || chmod(dir, 0755) < 0)
		die("mkdtemp", strerror(errno));
	snprintf(sock, sizeof(sock), "%s/d.sock", dir);
	snprintf(logp, sizeof(logp), "%s/d.log", dir);
	snprintf(pol, sizeof(pol), "%s/policy", dir);
	snprintf(small, sizeof(small), "%s/small", dir);
	snprintf(large, sizeof(large), "%s/large", dir);
	write_policy(small, 1);
	write_policy(large, rules);
	write_policy(pol, 1);
	{
		const char *av[] = {tensord, "--socket", sock, "--policy", pol,
				    "--socket-mode", "0666", "--log-level",
				    "warn", "--max-bytes", "0", NULL};

		pid = bench_spawn(av, logp, more_fds, NULL);
		if (pid < 0)
			die("tensord", strerror(-pid));
	}
	for (int i = 0; td_client_connect(sock, &c, &e) < 0; i++) {
		if (i > 2000)
			die("connect", e.reason);
		usleep(10000);
	}
	for (unsigned i = 0; i < names; i++) {
		char name[32];
		uint64_t v = i, shape[1] = {sizeof(v)};
		struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
				       .ndim = 1, .shape = shape};

		snprintf(name, sizeof(name), "n/%u/%07u", i % 100, i);
		if (td_client_put(c, &p, &v, sizeof(v), NULL, &e) < 0)
			die("put", e.reason);
	}
	for (unsigned r = 0; r < rounds; r++) {
		for (int ph = 0; ph < 2; ph++) {
			uint64_t cp;

			if (rename(ph ? large : small, pol) < 0)
				die("rename", strerror(errno));
			write_policy(ph ? large : small, ph ? rules : 1);
			kill(pid, SIGHUP);
			reloads++;
			while (log_count(logp, "reloaded") < reloads)
				usleep(10000);
			med[ph][r] = (double)run_lists(sock, lists, names, pid,
						       &cp);
			cpu[ph][r] = (double)cp;
		}
		ratio[r] = med[1][r] / med[0][r];
	}
	printf("%u names, LIST as nobody, %u LISTs a round, %u rounds\n",
	       names, lists, rounds);
	printf("| policy | rules | LIST median (ms) | daemon CPU per LIST "
	       "(ms) |\n|---|---:|---:|---:|\n");
	for (int ph = 0; ph < 2; ph++)
		printf("| %s | %u | %.2f | %.2f |\n", ph ? "large" : "small",
		       ph ? rules : 1, bench_median_d(med[ph], rounds) / 1e6,
		       bench_median_d(cpu[ph], rounds) / 1e6);
	printf("large / small, median of the per-round ratios: %.2fx\n",
	       bench_median_d(ratio, rounds));
	td_client_close(c);
	bench_reap(pid, 5000);
	unlink(small);
	unlink(large);
	unlink(pol);
	unlink(logp);
	rmdir(dir);
	return 0;
}
