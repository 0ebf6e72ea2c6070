/* SPDX-License-Identifier: MIT */
/* Results of a bench invocation and the files made from them. */
#ifndef TD_BENCH_REPORT_H
#define TD_BENCH_REPORT_H

#include "bench.h"

#include <stdio.h>

enum bench_status {
	BENCH_OK = 0,
	BENCH_NA = 1,     /* method or size not available; why says why */
	BENCH_FAILED = 2, /* ran and failed; why says why */
};

/* Most rounds a run may be split into (--rounds; round_median_ns). */
#define BENCH_MAX_ROUNDS 32

struct bench_result {
	const struct bench_method *method;
	size_t size;
	int write;
	enum bench_status status;
	char why[BENCH_WHY_MAX];
	uint64_t samples;  /* measured round trips */
	uint64_t warmup;   /* excluded round trips before them, per round */
	uint64_t rounds;   /* rounds the samples were taken in */
	uint64_t verified; /* payloads the consumer checked (warm-ups too) */
	/* round trip, nanoseconds */
	double median_ns, p99_ns, mean_ns, min_ns, max_ns;
	/* each round's own median, rounds of them (PACED: the round's p50
	 * of every consumer's latencies): the ratios of two runs of one
	 * group pair them round by round (report.c, ratio_of) */
	double round_median_ns[BENCH_MAX_ROUNDS];
	/* PACED: each round's p99 of the latencies and its CPU per
	 * message (all processes), paired like round_median_ns */
	double round_p99_ns[BENCH_MAX_ROUNDS];
	double round_cpu_ns[BENCH_MAX_ROUNDS];
	enum bench_kind kind;
	unsigned consumers;
	double rate_hz;     /* PACED */
	uint64_t delivered; /* samples taken (PACED: latencies, all consumers) */
	uint64_t skipped;   /* PACED: of those, messages a consumer skipped
			     * (counted with the latency of the newer one) */
	/* CPU time (user + system) in the measured windows, summed over the
	 * rounds: producer, consumers, the helper process (tensord, RouDi) */
	uint64_t cpu_prod_ns, cpu_cons_ns, cpu_svc_ns;
	double cpu_ns;         /* all three per measured handoff or message */
	double loop_s;         /* wall time of the measured iterations, summed */
	double handoffs_per_s; /* samples / loop_s */
	double gbytes_per_s;   /* handoffs_per_s * size / 1e9 */
};

#define BENCH_MAX_RESULTS 512
#define BENCH_MAX_METHODS 20

struct bench_report {
	const struct bench_method *methods[BENCH_MAX_METHODS];
	size_t method_count;
	struct bench_result results[BENCH_MAX_RESULTS];
	size_t result_count;
	int pinned, cpu[2];
	int argc;
	char **argv;
	int smoke;
	uint64_t started_ns; /* CLOCK_MONOTONIC at start, for duration */
	/* /proc/loadavg before and after: other load on the machine */
	char load_start[64], load_end[64];
};

/* First line of /proc/loadavg into buf ("" when unreadable). */
void report_loadavg(char *buf, size_t len);
/* One human-readable line per run. */
void report_line(FILE *f, const struct bench_result *r);
/* Each returns 0 or -errno (and says why on stderr). */
int report_json(const char *path, const struct bench_report *rep,
		const struct bench_env *env);
int report_markdown(const char *path, const struct bench_report *rep);
int report_plot(const char *png, const struct bench_report *rep,
		const char *tmpdir);

#endif
