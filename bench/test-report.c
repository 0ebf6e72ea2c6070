/* SPDX-License-Identifier: MIT */
/*
 * The bench report's ratios and verdicts on made-up runs (no timing):
 * two runs of one group are compared round by round (median of the
 * per-round ratios, with their range), a single round or a ratio across
 * sizes by the pooled medians, verdicts by the median, "within noise"
 * where the rounds fall on both sides of the limit.
 */
#include "report.h"

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct bench_method ring = {.name = "tensord-ring"};
static const struct bench_method iox = {.name = "iceoryx-wait"};
static const struct bench_method spin = {.name = "bare-spin"};
static const struct bench_method sock = {.name = "socket-copy"};

static struct bench_report rep;

/* A ping-pong result with a pooled median and round medians. */
static void add(const struct bench_method *m, size_t size, int write,
		double pooled, unsigned rounds, const double *rm)
{
	struct bench_result *r = &rep.results[rep.result_count++];

	memset(r, 0, sizeof(*r));
	r->method = m;
	r->size = size;
	r->write = write;
	r->kind = BENCH_PINGPONG;
	r->consumers = 1;
	r->status = BENCH_OK;
	r->rounds = rounds;
	r->median_ns = r->p99_ns = r->mean_ns = r->min_ns = r->max_ns = pooled;
	for (unsigned k = 0; k < rounds; k++)
		r->round_median_ns[k] = rm[k];
}

/* Pooled figures of a paced run (ns) and each round's: p50, p99, CPU
 * per message. */
struct figs {
	double p50, p99, cpu;
};

static void add_paced(const struct bench_method *m, double hz, unsigned nc,
		      struct figs pooled, unsigned rounds, const double *p50,
		      const double *p99, const double *cpu)
{
	struct bench_result *r = &rep.results[rep.result_count++];

	memset(r, 0, sizeof(*r));
	r->method = m;
	r->size = 4096;
	r->kind = BENCH_PACED;
	r->consumers = nc;
	r->rate_hz = hz;
	r->status = BENCH_OK;
	r->rounds = rounds;
	r->median_ns = r->mean_ns = r->min_ns = pooled.p50;
	r->p99_ns = r->max_ns = pooled.p99;
	r->cpu_ns = pooled.cpu;
	for (unsigned k = 0; k < rounds; k++) {
		r->round_median_ns[k] = p50[k];
		r->round_p99_ns[k] = p99[k];
		r->round_cpu_ns[k] = cpu[k];
	}
}

/* What report_markdown (json: report_json) wrote of rep, as one string
 * (freed by the caller). */
static char *written(bool json)
{
	char path[] = "/tmp/td-test-report-XXXXXX";
	int fd = mkstemp(path);
	FILE *f;
	char *buf;
	long len;

	cr_assert(fd >= 0);
	close(fd);
	if (json)
		cr_assert_eq(report_json(path, &rep, NULL), 0);
	else
		cr_assert_eq(report_markdown(path, &rep), 0);
	f = fopen(path, "re");
	cr_assert(f);
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	buf = calloc(1, (size_t)len + 1);
	cr_assert(buf && fread(buf, 1, (size_t)len, f) == (size_t)len);
	fclose(f);
	unlink(path);
	return buf;
}

static char *markdown(void)
{
	return written(false);
}

static void setup(void)
{
	static const double r100[] = {100, 100, 100};

	memset(&rep, 0, sizeof(rep));
	rep.methods[0] = &ring;
	rep.methods[1] = &iox;
	rep.methods[2] = &spin;
	rep.methods[3] = &sock;
	rep.method_count = 4;
	/* 64 B nowrite: per round 0.9, 1.0, 1.1 against iceoryx-wait and
	 * 2.25, 2.0, 2.2 against bare-spin; pooled medians say 1.0, 2.0 */
	add(&ring, 64, 0, 100, 3, (const double[]){90, 100, 110});
	add(&iox, 64, 0, 100, 3, r100);
	add(&spin, 64, 0, 50, 3, (const double[]){40, 50, 50});
	/* 4 KiB nowrite: 1.2, 0.8, 1.3 (pooled: 0.9) */
	add(&ring, 4096, 0, 90, 3, (const double[]){120, 80, 130});
	add(&iox, 4096, 0, 100, 3, r100);
	/* 64 MiB nowrite: socket-copy 90, 110, 100 times slower */
	add(&ring, 64u << 20, 0, 100, 3, r100);
	add(&sock, 64u << 20, 0, 10000, 3, (const double[]){9000, 11000,
							    10000});
	/* 64 B write: one round each, its round medians not the pooled
	 * ones: the ratio must come from the pooled 150 / 100 */
	add(&ring, 64, 1, 150, 1, (const double[]){1});
	add(&iox, 64, 1, 100, 1, (const double[]){1000});
	/* 4 KiB write: rounds differ (a run cut short): pooled, 0.8 */
	add(&ring, 4096, 1, 80, 2, (const double[]){1, 1});
	add(&iox, 4096, 1, 100, 3, (const double[]){1000, 1000, 1000});

	/* paced 1 kHz 1->1, met: per round p50 0.5, 0.6, 0.45; p99 0.25,
	 * 0.5, 0.4; CPU 0.8, 0.9, 1.0 (at the limit, not over it) */
	add_paced(&ring, 1000, 1, (struct figs){52000, 150000, 9000}, 3,
		  (const double[]){50000, 60000, 45000},
		  (const double[]){100000, 200000, 160000},
		  (const double[]){8000, 9000, 10000});
	add_paced(&iox, 1000, 1, (struct figs){100000, 400000, 10000}, 3,
		  (const double[]){100000, 100000, 100000},
		  (const double[]){400000, 400000, 400000},
		  (const double[]){10000, 10000, 10000});
	/* paced 1 kHz 1->4, missed by p99: 1.2, 1.1, 1.2 per round, where
	 * the pooled p99s (280 against 300 µs) would call it met */
	add_paced(&ring, 1000, 4, (struct figs){45000, 280000, 6000}, 3,
		  (const double[]){40000, 45000, 50000},
		  (const double[]){300000, 330000, 360000},
		  (const double[]){5000, 6000, 7000});
	add_paced(&iox, 1000, 4, (struct figs){50000, 300000, 10000}, 3,
		  (const double[]){50000, 50000, 50000},
		  (const double[]){250000, 300000, 300000},
		  (const double[]){10000, 10000, 10000});
	/* paced 30 Hz 1->1, five rounds: p50 0.9, 1.1, 0.95, 1.05, 1.2
	 * (median 1.05: missed, within noise; pooled 98/100 µs would say
	 * met), p99 0.9, 1.1, 0.95, 1.05, 1.0 (median 1.0: met, within
	 * noise), CPU 0.5 every round */
	add_paced(&ring, 30, 1, (struct figs){98000, 200000, 5000}, 5,
		  (const double[]){90000, 110000, 95000, 105000, 120000},
		  (const double[]){180000, 220000, 190000, 210000, 200000},
		  (const double[]){5000, 5000, 5000, 5000, 5000});
	add_paced(&iox, 30, 1, (struct figs){100000, 200000, 10000}, 5,
		  (const double[]){100000, 100000, 100000, 100000, 100000},
		  (const double[]){200000, 200000, 200000, 200000, 200000},
		  (const double[]){10000, 10000, 10000, 10000, 10000});
	/* paced 30 Hz 1->4, one round: the pooled figures, whatever the
	 * round's say */
	add_paced(&ring, 30, 4, (struct figs){120000, 150000, 4000}, 1,
		  (const double[]){1}, (const double[]){1},
		  (const double[]){1});
	add_paced(&iox, 30, 4, (struct figs){100000, 300000, 10000}, 1,
		  (const double[]){1000}, (const double[]){1000},
		  (const double[]){1000});
}

TestSuite(report, .init = setup);

Test(report, paired_worst_row_with_spread_and_noise)
{
	char *md = markdown();

	/* 4 KiB: median 1.2 > 1 missed, rounds on both sides of 1.0;
	 * 64 B: median 1.0 met, but one round over it; pooled medians
	 * (0.9 and 1.0) would have called it met at every size */
	cr_expect(strstr(md, "| ≤ 1.0× iceoryx-wait, 64 B-64 MiB | nowrite | "
			 "worst 1.20× at 4 KiB (0.80–1.30 over 3 rounds) | "
			 "**missed**: 4 KiB 1.20 (within noise); within "
			 "noise: 64 B 1.00; some sizes not measured |"),
		  "%s", md);
	free(md);
}

Test(report, pooled_when_not_paired)
{
	char *md = markdown();

	/* one round (64 B) and unequal rounds (4 KiB): pooled medians */
	cr_expect(strstr(md, "| ≤ 1.0× iceoryx-wait, 64 B-64 MiB | write | "
			 "worst 1.50× at 64 B (pooled) | **missed**: 64 B "
			 "1.50; some sizes not measured |"),
		  "%s", md);
	/* across sizes: always pooled (the rounds did not run together) */
	cr_expect(strstr(md, "| 64 MiB ≤ 1.5× 64 B (handoff only) | nowrite | "
			 "1.00× (pooled) | met |"),
		  "%s", md);
	/* the ratio tables mark pooled cells */
	cr_expect(strstr(md, "| 64 B | write | 1.50 † |"), "%s", md);
	cr_expect(strstr(md, "| 4 KiB | nowrite | 1.20 |"), "%s", md);
	free(md);
}

Test(report, limit_rows_by_the_median)
{
	char *md = markdown();

	/* 2.25, 2.0, 2.2: median 2.2 over the 2x limit; one round at it */
	cr_expect(strstr(md, "| ring ≤ 2× bare-spin at 64 B | nowrite | "
			 "2.20× (2.00–2.25 over 3 rounds) | **missed** "
			 "(within noise) |"),
		  "%s", md);
	/* at least 100x: median 100 met, one round at 90 */
	cr_expect(strstr(md, "| ≥ 100× faster than socket-copy at 64 MiB | "
			 "nowrite | 100.0× (90.0–110.0 over 3 rounds) | met "
			 "(within noise) |"),
		  "%s", md);
	free(md);
}

Test(report, paced_rows_pair_p50_p99_and_cpu)
{
	char *md = markdown();

	cr_expect(strstr(md, "| paced 1000 Hz 1→1: ring p50, p99 ≤ "
			 "iceoryx-wait's and CPU/msg ≤ 1.0× | nowrite | "
			 "p50 0.50× (0.45–0.60 over 3 rounds), "
			 "p99 0.40× (0.25–0.50 over 3 rounds), "
			 "CPU 0.90× (0.80–1.00 over 3 rounds); "
			 "pooled p50 52.0/100.0 µs, p99 150.0/400.0 µs, "
			 "CPU 9.0/10.0 µs | met |\n"),
		  "%s", md);
	/* the per-round p99s miss where the pooled ones would not */
	cr_expect(strstr(md, "| paced 1000 Hz 1→4: ring p50, p99 ≤ "
			 "iceoryx-wait's and CPU/msg ≤ 1.0× | nowrite | "
			 "p50 0.90× (0.80–1.00 over 3 rounds), "
			 "p99 1.20× (1.10–1.20 over 3 rounds), "
			 "CPU 0.60× (0.50–0.70 over 3 rounds); "
			 "pooled p50 45.0/50.0 µs, p99 280.0/300.0 µs, "
			 "CPU 6.0/10.0 µs | **missed**: p99 |\n"),
		  "%s", md);
	free(md);
}

Test(report, paced_rows_within_noise)
{
	char *md = markdown();

	cr_expect(strstr(md, "| paced 30 Hz 1→1: ring p50, p99 ≤ "
			 "iceoryx-wait's and CPU/msg ≤ 1.0× | nowrite | "
			 "p50 1.05× (0.90–1.20 over 5 rounds), "
			 "p99 1.00× (0.90–1.10 over 5 rounds), "
			 "CPU 0.50× (0.50–0.50 over 5 rounds); "
			 "pooled p50 98.0/100.0 µs, p99 200.0/200.0 µs, "
			 "CPU 5.0/10.0 µs | **missed**: p50 (within noise); "
			 "within noise: p99 |\n"),
		  "%s", md);
	free(md);
}

Test(report, paced_row_of_one_round_is_pooled)
{
	char *md = markdown();

	cr_expect(strstr(md, "| paced 30 Hz 1→4: ring p50, p99 ≤ "
			 "iceoryx-wait's and CPU/msg ≤ 1.0× | nowrite | "
			 "one pooled round: p50 120.0/100.0 µs, p99 "
			 "150.0/300.0 µs, CPU 0.40× | **missed**: p50 |\n"),
		  "%s", md);
	free(md);
}

Test(report, paced_row_not_measured)
{
	char *md;

	/* iceoryx-wait's 30 Hz 1->4 run n/a: no ratio at all */
	rep.results[rep.result_count - 1].status = BENCH_NA;
	md = markdown();
	cr_expect(strstr(md, "| paced 30 Hz 1→4: ring p50, p99 ≤ "
			 "iceoryx-wait's and CPU/msg ≤ 1.0× | nowrite | n/a | "
			 "not measured |\n"),
		  "%s", md);
	free(md);
}

Test(report, paced_json_keeps_every_round)
{
	char *js = written(true);

	cr_expect(strstr(js, "\"round_median_ns\": [40000, 45000, 50000], "
			 "\"round_p99_ns\": [300000, 330000, 360000], "
			 "\"round_cpu_ns\": [5000, 6000, 7000], "),
		  "%s", js);
	/* ping-pong runs keep their round medians only */
	cr_expect(strstr(js, "\"round_median_ns\": [90, 100, 110], "
			 "\"warmup_per_round\""),
		  "%s", js);
	free(js);
}

Test(report, sizes_in_order_whatever_the_command_line)
{
	char *md;

	/* --sizes 64M,4K,64: the runs come largest first, and the target
	 * "largest ≤ 1.5× smallest" must still divide 64 MiB by 64 B */
	memset(&rep, 0, sizeof(rep));
	rep.methods[0] = &ring;
	rep.method_count = 1;
	add(&ring, 64u << 20, 0, 300, 3, (const double[]){300, 300, 300});
	add(&ring, 4096, 0, 150, 3, (const double[]){150, 150, 150});
	add(&ring, 64, 0, 100, 3, (const double[]){100, 100, 100});
	md = markdown();
	cr_expect(strstr(md, "| 64 MiB ≤ 1.5× 64 B (handoff only) | nowrite | "
			 "3.00× (pooled) | **missed** |"),
		  "%s", md);
	cr_expect(strstr(md, "| 64 MiB / 64 B | n/a | 3.00 † |"), "%s", md);
	/* the value tables list the sizes smallest first */
	cr_expect(strstr(md, "| 64 B | 0.1 (0.1) |\n| 4 KiB | 0.1 (0.1) |\n"
			 "| 64 MiB | 0.3 (0.3) |"),
		  "%s", md);
	free(md);
}
