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

/* The markdown of rep, as one string (freed by the caller). */
static char *markdown(void)
{
	char path[] = "/tmp/td-test-report-XXXXXX";
	int fd = mkstemp(path);
	FILE *f;
	char *buf;
	long len;

	cr_assert(fd >= 0);
	close(fd);
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
