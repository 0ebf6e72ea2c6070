/* SPDX-License-Identifier: MIT */
/* JSON, Markdown and gnuplot output of a bench invocation. */
#include "report.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "td-json.h"

static const char *status_name(enum bench_status s)
{
	switch (s) {
	case BENCH_OK: return "ok";
	case BENCH_NA: return "n/a";
	default: return "failed";
	}
}

static const char *mode_name(int write)
{
	return write ? "write" : "nowrite";
}

/* "64 B", "4 KiB", "1 GiB"; exact multiples only, else bytes. */
static const char *size_label(size_t size, char *buf, size_t len)
{
	static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int u = 0;

	while (u < 4 && size >= 1024 && size % 1024 == 0) {
		size /= 1024;
		u++;
	}
	snprintf(buf, len, "%zu %s", size, unit[u]);
	return buf;
}

void report_loadavg(char *buf, size_t len)
{
	FILE *f = fopen("/proc/loadavg", "re");

	buf[0] = 0;
	if (!f)
		return;
	if (!fgets(buf, (int)len, f))
		buf[0] = 0;
	buf[strcspn(buf, "\n")] = 0;
	fclose(f);
}

/* "write", "nowrite", "fan4-write", "1000Hz-x4": what a run measured. */
static const char *run_label(const struct bench_result *r, char *buf,
			     size_t len)
{
	if (r->kind == BENCH_PINGPONG)
		snprintf(buf, len, "%s", mode_name(r->write));
	else if (r->kind == BENCH_FANOUT)
		snprintf(buf, len, "fan%u-%s", r->consumers,
			 mode_name(r->write));
	else
		snprintf(buf, len, "%.0fHz-x%u", r->rate_hz, r->consumers);
	return buf;
}

void report_line(FILE *f, const struct bench_result *r)
{
	char sz[32], lb[32];

	size_label(r->size, sz, sizeof(sz));
	run_label(r, lb, sizeof(lb));
	if (r->status != BENCH_OK) {
		fprintf(f, "%-13s %-7s %10s  %s: %s\n", r->method->name, lb,
			sz, status_name(r->status), r->why);
		return;
	}
	fprintf(f, "%-13s %-7s %10s %12.2f %12.2f %8llu %10.3f %9.2f\n",
		r->method->name, lb, sz, r->median_ns / 1e3, r->p99_ns / 1e3,
		(unsigned long long)r->delivered, r->gbytes_per_s,
		r->cpu_ns / 1e3);
}

/* First "key<sep>value" line of a /proc file, value trimmed. */
static void proc_field(const char *path, const char *key, char *out,
		       size_t len)
{
	char line[512];
	FILE *f = fopen(path, "re");
	size_t kl = strlen(key);

	out[0] = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *v;

		if (strncmp(line, key, kl) != 0)
			continue;
		v = strchr(line + kl, ':');
		if (!v)
			continue;
		v++;
		while (*v == ' ' || *v == '\t')
			v++;
		v[strcspn(v, "\n")] = 0;
		snprintf(out, len, "%s", v);
		break;
	}
	fclose(f);
}

/* "name": [each round's figure], (%.17g: what the ratios divided) */
static void json_rounds(FILE *f, const char *name, const double *v,
			uint64_t rounds)
{
	fprintf(f, "\"%s\": [", name);
	for (uint64_t k = 0; k < rounds && k < BENCH_MAX_ROUNDS; k++)
		fprintf(f, "%s%.17g", k ? ", " : "", v[k]);
	fprintf(f, "], ");
}

/* One element of "results". */
static void json_result(FILE *f, const struct bench_result *r)
{
	fprintf(f, "\n    {\"method\": ");
	td_json_cstr(f, r->method->name);
	fprintf(f, ", \"kind\": \"%s\", \"consumers\": %u",
		r->kind == BENCH_PINGPONG ? "pingpong" :
		r->kind == BENCH_FANOUT ? "fanout" : "paced",
		r->consumers);
	if (r->kind == BENCH_PACED)
		fprintf(f, ", \"rate_hz\": %.0f", r->rate_hz);
	fprintf(f, ", \"mode\": \"%s\", \"size\": %zu, "
		   "\"status\": \"%s\"",
		mode_name(r->write), r->size, status_name(r->status));
	if (r->status != BENCH_OK) {
		fprintf(f, ", \"reason\": ");
		td_json_cstr(f, r->why);
		fprintf(f, "}");
		return;
	}
	fprintf(f, ", \"rounds\": %llu, ", (unsigned long long)r->rounds);
	json_rounds(f, "round_median_ns", r->round_median_ns, r->rounds);
	if (r->kind == BENCH_PACED) {
		json_rounds(f, "round_p99_ns", r->round_p99_ns, r->rounds);
		json_rounds(f, "round_cpu_ns", r->round_cpu_ns, r->rounds);
		fprintf(f, "\"skipped\": %llu, ",
			(unsigned long long)r->skipped);
	}
	fprintf(f, "\"warmup_per_round\": %llu, "
		   "\"samples\": %llu, \"verified\": %llu,\n     "
		   "\"%s\": "
		   "{\"median\": %.0f, \"p99\": %.0f, \"mean\": %.0f, "
		   "\"min\": %.0f, \"max\": %.0f, \"count\": %llu},"
		   "\n     "
		   "\"loop_s\": %.6f, \"handoffs_per_s\": %.1f, "
		   "\"gbytes_per_s\": %.4f,\n     \"cpu_ns\": "
		   "{\"per_handoff\": %.0f, \"producer\": %llu, "
		   "\"consumers\": %llu, \"service\": %llu}}",
		(unsigned long long)r->warmup,
		(unsigned long long)r->samples,
		(unsigned long long)r->verified,
		r->kind == BENCH_PACED ? "one_way_ns" : "rtt_ns",
		r->median_ns, r->p99_ns, r->mean_ns, r->min_ns,
		r->max_ns, (unsigned long long)r->delivered,
		r->loop_s, r->handoffs_per_s, r->gbytes_per_s,
		r->cpu_ns, (unsigned long long)r->cpu_prod_ns,
		(unsigned long long)r->cpu_cons_ns,
		(unsigned long long)r->cpu_svc_ns);
}

int report_json(const char *path, const struct bench_report *rep,
		const struct bench_env *env)
{
	FILE *f = fopen(path, "we");
	char model[256], mem[64], date[64];
	struct utsname u;
	time_t now = time(NULL);
	struct tm tm;

	if (!f) {
		fprintf(stderr, "bench: %s: %s\n", path, strerror(errno));
		return -errno;
	}
	uname(&u);
	proc_field("/proc/cpuinfo", "model name", model, sizeof(model));
	proc_field("/proc/meminfo", "MemTotal", mem, sizeof(mem));
	gmtime_r(&now, &tm);
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tm);

	fprintf(f, "{\n  \"bench\": \"tensord-bench\",\n  \"date\": ");
	td_json_cstr(f, date);
	fprintf(f, ",\n  \"command\": \"");
	for (int i = 0; i < rep->argc; i++) {
		/* argv joined by spaces, escaped piecewise */
		for (const char *s = rep->argv[i]; *s; s++) {
			if (*s == '"' || *s == '\\')
				fputc('\\', f);
			fputc(*s, f);
		}
		if (i + 1 < rep->argc)
			fputc(' ', f);
	}
	fprintf(f, "\",\n  \"machine\": {\n    \"kernel\": ");
	{
		char k[600];

		snprintf(k, sizeof(k), "%s %s %s %s", u.sysname, u.release,
			 u.version, u.machine);
		td_json_cstr(f, k);
	}
	fprintf(f, ",\n    \"cpu_model\": ");
	td_json_cstr(f, model);
	fprintf(f, ",\n    \"cpus_online\": %ld,\n    \"mem_total\": ",
		sysconf(_SC_NPROCESSORS_ONLN));
	td_json_cstr(f, mem);
	fprintf(f, ",\n    \"loadavg_start\": ");
	td_json_cstr(f, rep->load_start);
	fprintf(f, ",\n    \"loadavg_end\": ");
	td_json_cstr(f, rep->load_end);
	fprintf(f, "\n  },\n");
	fprintf(f, "  \"pinning\": ");
	if (rep->pinned)
		fprintf(f, "{\"producer_cpu\": %d, \"consumer_cpu\": %d}",
			rep->cpu[0], rep->cpu[1]);
	else
		fprintf(f, "null");
	fprintf(f, ",\n  \"units\": {\"round_trip\": \"ns, CLOCK_MONOTONIC, "
		   "producer side, one publish + consumer ack (fanout: "
		   "the last of the consumers' acks)\", "
		   "\"one_way\": \"ns, paced runs: consumer's "
		   "CLOCK_MONOTONIC on wake - producer's stamp in the "
		   "payload, every consumer's every message; a message it "
		   "skipped for a newer one counts with the newer one's\", "
		   "\"skipped\": \"paced: messages the consumers skipped "
		   "(latest value, or a queue that overflowed), counted in "
		   "one_way as above\", "
		   "\"cpu_ns\": \"user+system CPU of producer, consumers "
		   "and service (tensord or RouDi) over the measured "
		   "windows; per_handoff = their sum / samples (per message "
		   "when paced)\", "
		   "\"round_median_ns\": \"each round's own median of "
		   "rtt_ns (paced: its p50 of one_way_ns), rounds of them; "
		   "ratios of two runs of a group pair their rounds\", "
		   "\"round_p99_ns\": \"paced: each round's p99 of "
		   "one_way_ns (nearest rank), paired like round_median_ns\", "
		   "\"round_cpu_ns\": \"paced: each round's CPU per "
		   "message (producer + consumers + service), paired like "
		   "round_median_ns\", "
		   "\"gbytes_per_s\": \"1e9 bytes per second delivered\"},\n");
	fprintf(f, "  \"modes\": {\"write\": \"producer writes every "
		   "payload byte, consumer checks every byte\", "
		   "\"nowrite\": \"producer writes and consumer checks only "
		   "a seq stamp in the first and last 8 bytes\"},\n");
	fprintf(f, "  \"methods\": {");
	for (size_t i = 0; i < rep->method_count; i++) {
		fprintf(f, "%s\n    ", i ? "," : "");
		td_json_cstr(f, rep->methods[i]->name);
		fprintf(f, ": ");
		td_json_cstr(f, rep->methods[i]->desc);
	}
	fprintf(f, "\n  },\n  \"duration_s\": %.1f,\n  \"results\": [",
		(double)(bench_now_ns() - rep->started_ns) / 1e9);
	for (size_t i = 0; i < rep->result_count; i++) {
		fprintf(f, "%s", i ? "," : "");
		json_result(f, &rep->results[i]);
	}
	fprintf(f, "\n  ]\n}\n");
	if (fclose(f) != 0) {
		fprintf(stderr, "bench: %s: write failed\n", path);
		return -EIO;
	}
	return 0;
}

/* The run of method of that kind (PACED: at rate, size ignored). */
static const struct bench_result *
find_k(const struct bench_report *rep, const char *method, size_t size,
       int write, enum bench_kind kind, unsigned consumers, double rate)
{
	for (size_t i = 0; i < rep->result_count; i++) {
		const struct bench_result *r = &rep->results[i];

		if (r->kind != kind || strcmp(r->method->name, method) != 0)
			continue;
		if (kind == BENCH_PACED ? r->consumers == consumers &&
						  r->rate_hz == rate
					: r->size == size && r->write == write)
			return r;
	}
	return NULL;
}

/* A ping-pong run. */
static const struct bench_result *find(const struct bench_report *rep,
				       const char *method, size_t size,
				       int write)
{
	return find_k(rep, method, size, write, BENCH_PINGPONG, 1, 0);
}

/* Sizes of the ping-pong and fan-out runs, smallest first whatever
 * order --sizes gave them in: "largest / smallest" rows divide the last
 * by the first (a paced run's size is --paced-size, no size of the
 * matrix). */
static size_t sizes_of(const struct bench_report *rep, size_t *out,
		       size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < rep->result_count; i++) {
		size_t j, v = rep->results[i].size;

		if (rep->results[i].kind == BENCH_PACED)
			continue;
		for (j = 0; j < n && out[j] < v; j++)
			;
		if ((j < n && out[j] == v) || n == max)
			continue;
		memmove(out + j + 1, out + j, (n - j) * sizeof(*out));
		out[j] = v;
		n++;
	}
	return n;
}

/*
 * A ratio a / b of one figure of two runs (their medians; paced runs
 * also their p99s or CPU per message); med < 0: not measured.
 * Paired (rounds >= 2): a and b ran in the same group (kind, size, mode,
 * consumers, rate), where round k of every method runs next to round k
 * of the others under the same machine state; med is the median over the
 * rounds of a's round-k figure / b's, lo and hi the least and greatest
 * of those per-round ratios, so drift between rounds cancels. Otherwise
 * (one round, different groups such as two sizes) the ratio of the
 * pooled figures: rounds 0, lo = hi = med.
 */
struct ratio {
	double med, lo, hi;
	unsigned rounds;
};

enum figure { FIG_MEDIAN, FIG_P99, FIG_CPU };

/* The figure g of r over all its rounds (pooled). */
static double pooled_of(const struct bench_result *r, enum figure g)
{
	return g == FIG_P99 ? r->p99_ns : g == FIG_CPU ? r->cpu_ns :
							 r->median_ns;
}

/* The figure g of each of r's rounds. */
static const double *rounds_of(const struct bench_result *r, enum figure g)
{
	return g == FIG_P99 ? r->round_p99_ns :
	       g == FIG_CPU ? r->round_cpu_ns : r->round_median_ns;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static bool paired(const struct bench_result *a, const struct bench_result *b,
		   enum figure g)
{
	const double *qa = rounds_of(a, g), *qb = rounds_of(b, g);

	if (a->kind != b->kind || a->size != b->size ||
	    a->write != b->write || a->consumers != b->consumers ||
	    a->rate_hz != b->rate_hz || a->rounds != b->rounds ||
	    a->rounds < 2 || a->rounds > BENCH_MAX_ROUNDS)
		return false;
	for (uint64_t k = 0; k < a->rounds; k++)
		if (qa[k] <= 0 || qb[k] <= 0)
			return false;
	return true;
}

static struct ratio ratio_fig(const struct bench_result *a,
			      const struct bench_result *b, enum figure g)
{
	struct ratio v = {-1, -1, -1, 0};
	double q[BENCH_MAX_ROUNDS];
	const double *qa, *qb;
	unsigned n;

	if (!a || !b || a->status != BENCH_OK || b->status != BENCH_OK ||
	    pooled_of(b, g) <= 0)
		return v;
	if (!paired(a, b, g)) {
		v.med = v.lo = v.hi = pooled_of(a, g) / pooled_of(b, g);
		return v;
	}
	n = (unsigned)a->rounds;
	qa = rounds_of(a, g);
	qb = rounds_of(b, g);
	for (unsigned k = 0; k < n; k++)
		q[k] = qa[k] / qb[k];
	qsort(q, n, sizeof(q[0]), cmp_double);
	v.rounds = n;
	v.lo = q[0];
	v.hi = q[n - 1];
	v.med = n % 2 ? q[n / 2] : (q[n / 2 - 1] + q[n / 2]) / 2;
	return v;
}

/* The ratio of two runs' median round trips (latencies). */
static struct ratio ratio_of(const struct bench_result *a,
			     const struct bench_result *b)
{
	return ratio_fig(a, b, FIG_MEDIAN);
}

/* The range of v straddles limit: some rounds on each side of it. */
static bool within_noise(struct ratio v, double limit)
{
	return v.rounds && v.lo <= limit && v.hi > limit;
}

/* "1.03× (0.91–1.12 over 5 rounds)" or "2.60× (pooled)"; prec digits;
 * at (may be NULL) names where: "1.03× at 1 MiB (...)". */
static const char *ratio_text(struct ratio v, int prec, const char *at,
			      char *buf, size_t len)
{
	int n = snprintf(buf, len, "%.*f×%s%s", prec, v.med, at ? " at " : "",
			 at ? at : "");

	if (n < 0 || (size_t)n >= len)
		return buf;
	if (v.rounds)
		snprintf(buf + n, len - (size_t)n, " (%.*f–%.*f over %u "
			 "rounds)", prec, v.lo, prec, v.hi, v.rounds);
	else
		snprintf(buf + n, len - (size_t)n, " (pooled)");
	return buf;
}

/* The verdict of "v <= limit" (at_least: "v >= limit") by the median
 * ratio; "within noise" notes a per-round range across the limit. */
static void verdict(FILE *f, struct ratio v, double limit, bool at_least,
		    const char *missed)
{
	bool met = at_least ? v.med >= limit : v.med <= limit;
	bool noise = v.rounds && (at_least ? v.lo < limit && v.hi >= limit
				  : within_noise(v, limit));

	fprintf(f, "%s%s", met ? "met" : missed,
		noise ? " (within noise)" : "");
}

/*
 * The verdict of several ratios against one limit ("≤"), each named
 * (a size, a figure): those over it, missed, "(within noise)" where
 * their rounds straddle the limit, and those met whose rounds do.
 */
struct tally {
	char over[512], near[512];
	unsigned nover, nnear;
};

/* with_value: the name followed by the median ratio ("4 KiB 1.20") */
static void tally_add(struct tally *t, const char *name, struct ratio v,
		      double limit, bool with_value)
{
	bool over = v.med > limit, noise = within_noise(v, limit);
	char *list = over ? t->over : t->near;
	size_t n = strlen(list), len = sizeof(t->over);
	unsigned *count = over ? &t->nover : &t->nnear;
	int k;

	if (!over && !noise)
		return;
	k = snprintf(list + n, len - n, "%s%s", (*count)++ ? ", " : "", name);
	if (k < 0 || (size_t)k >= len - n)
		return;
	n += (size_t)k;
	if (with_value) {
		k = snprintf(list + n, len - n, " %.2f", v.med);
		if (k < 0 || (size_t)k >= len - n)
			return;
		n += (size_t)k;
	}
	if (over && noise)
		snprintf(list + n, len - n, " (within noise)");
}

/* "met", "**missed**: 4 KiB 1.20", then "; within noise: 64 B 1.00" */
static void tally_print(FILE *f, const struct tally *t)
{
	fprintf(f, "%s%s%s%s", t->nover ? "**missed**: " : "met", t->over,
		t->nnear ? "; within noise: " : "", t->near);
}

static void ratio_cell(FILE *f, const struct bench_result *a,
		       const struct bench_result *b)
{
	struct ratio v = ratio_of(a, b);

	if (v.med < 0)
		fprintf(f, " n/a |");
	else /* two decimals, but never rounded to 0.00 below 1 */
		fprintf(f, v.med >= 1 ? " %.2f%s |" : " %.2g%s |", v.med,
			v.rounds ? "" : " †");
}

/* The ratio tables of one tensord method (name) against the baselines. */
static void ratio_tables(FILE *f, const struct bench_report *rep,
			 const char *name, const size_t *sizes, size_t ns)
{
	static const char *const base[] = {
		"iceoryx-wait", "iceoryx-poll", "socket-copy", "fd-pass",
	};
	const struct bench_result *any = NULL;
	char sz[32];

	for (size_t i = 0; i < rep->result_count; i++) {
		if (strcmp(rep->results[i].method->name, name) == 0) {
			any = &rep->results[i];
			if (any->status == BENCH_OK)
				break;
		}
	}
	fprintf(f, "### %s: ratios of median round trips (< 1: %s is "
		   "faster)\n\nEach cell: the median over rounds of the "
		   "per-round ratio; †: the ratio of the pooled medians "
		   "(runs not paired round by round).\n\n", name, name);
	if (!any || any->status != BENCH_OK)
		fprintf(f, "The %s column is not filled yet: %s.\n\n", name,
			any ? any->why : "the method was not part of this run");
	fprintf(f, "| size | mode |");
	for (size_t b = 0; b < sizeof(base) / sizeof(base[0]); b++)
		fprintf(f, " %s / %s |", name, base[b]);
	fprintf(f, "\n|---|---|---|---|---|---|\n");
	for (size_t s = 0; s < ns; s++) {
		for (int w = 1; w >= 0; w--) {
			const struct bench_result *td = find(rep, name,
							     sizes[s], w);

			if (!td)
				continue;
			fprintf(f, "| %s | %s |",
				size_label(sizes[s], sz, sizeof(sz)),
				mode_name(w));
			for (size_t b = 0; b < sizeof(base) / sizeof(base[0]);
			     b++)
				ratio_cell(f, td, find(rep, base[b], sizes[s],
						       w));
			fputc('\n', f);
		}
	}
	fprintf(f, "\n| %s largest / smallest size | write | nowrite |\n"
		   "|---|---|---|\n", name);
	if (ns >= 2) {
		char a[32], b[32];

		fprintf(f, "| %s / %s |",
			size_label(sizes[ns - 1], a, sizeof(a)),
			size_label(sizes[0], b, sizeof(b)));
		for (int w = 1; w >= 0; w--)
			ratio_cell(f, find(rep, name, sizes[ns - 1], w),
				   find(rep, name, sizes[0], w));
		fputc('\n', f);
	}
	fputc('\n', f);
}

/*
 * One target row "name / base ≤ 1.0× at every size up to 64 MiB" of
 * runs of kind in mode w: the worst median ratio with its per-round
 * range, each size over 1.0, and the sizes whose rounds fall on both
 * sides of it.
 */
static void worst_row(FILE *f, const struct bench_report *rep,
		      const char *target, const char *name, const char *base,
		      enum bench_kind kind, int w, const size_t *sizes,
		      size_t ns)
{
	const size_t cap = 64u << 20;
	struct ratio worst = {-1, -1, -1, 0};
	size_t worst_size = 0, missing = 0;
	struct tally tl = {.nover = 0};
	char a[32], t[96];

	for (size_t s = 0; s < ns; s++) {
		unsigned nc = kind == BENCH_FANOUT ? BENCH_MAX_CONSUMERS : 1;
		struct ratio v;

		if (sizes[s] > cap)
			continue;
		v = ratio_of(find_k(rep, name, sizes[s], w, kind, nc, 0),
			     find_k(rep, base, sizes[s], w, kind, nc, 0));
		if (v.med < 0) {
			missing++;
			continue;
		}
		if (v.med > worst.med) {
			worst = v;
			worst_size = sizes[s];
		}
		tally_add(&tl, size_label(sizes[s], a, sizeof(a)), v, 1.0,
			  true);
	}
	if (worst.med < 0) {
		fprintf(f, "| %s | %s | n/a | not measured |\n", target,
			mode_name(w));
		return;
	}
	fprintf(f, "| %s | %s | worst %s | ", target, mode_name(w),
		ratio_text(worst, 2, size_label(worst_size, a, sizeof(a)), t,
			   sizeof(t)));
	tally_print(f, &tl);
	fprintf(f, "%s |\n", missing ? "; some sizes not measured" : "");
}

/* A target row "a / b ≤ limit" of two runs in mode w. */
static void limit_row(FILE *f, const char *target,
		      const struct bench_result *a,
		      const struct bench_result *b, int w, double limit)
{
	struct ratio v = ratio_of(a, b);
	char t[96];

	fprintf(f, "| %s | %s | ", target, mode_name(w));
	if (v.med < 0) {
		fprintf(f, "n/a | not measured |\n");
		return;
	}
	fprintf(f, "%s | ", ratio_text(v, 2, NULL, t, sizeof(t)));
	verdict(f, v, limit, false, "**missed**");
	fprintf(f, " |\n");
}

/*
 * The issue-5 targets for one tensord method, computed from this run's
 * medians (nothing here is typed in by hand): at most 1.0x iceoryx-wait
 * at every size up to 64 MiB, the largest size at most 1.5x the smallest
 * (handoff only: nowrite), at least 100x faster than socket-copy at
 * 64 MiB.
 */
static void targets_table(FILE *f, const struct bench_report *rep,
			  const char *name, const size_t *sizes, size_t ns)
{
	const size_t cap = 64u << 20;
	char a[32], b[32], t[96];

	fprintf(f, "### %s against the issue-5 targets (this run)\n\n"
		   "| target | mode | measured | verdict |\n"
		   "|---|---|---|---|\n", name);
	for (int w = 1; w >= 0; w--)
		worst_row(f, rep, "≤ 1.0× iceoryx-wait, 64 B-64 MiB", name,
			  "iceoryx-wait", BENCH_PINGPONG, w, sizes, ns);
	if (ns >= 2) {
		snprintf(t, sizeof(t), "%s ≤ 1.5× %s (handoff only)",
			 size_label(sizes[ns - 1], a, sizeof(a)),
			 size_label(sizes[0], b, sizeof(b)));
		limit_row(f, t, find(rep, name, sizes[ns - 1], 0),
			  find(rep, name, sizes[0], 0), 0, 1.5);
	}
	for (int w = 0; w <= 1; w++) {
		struct ratio v = ratio_of(find(rep, "socket-copy", cap, w),
					  find(rep, name, cap, w));

		fprintf(f, "| ≥ 100× faster than socket-copy at 64 MiB | %s | ",
			mode_name(w));
		if (v.med < 0) {
			fprintf(f, "n/a | not measured |\n");
			continue;
		}
		fprintf(f, "%s | ", ratio_text(v, 1, NULL, t, sizeof(t)));
		verdict(f, v, 100, true, w ? "missed (both write and read "
				     "every byte)" : "**missed**");
		fprintf(f, " |\n");
	}
	fputc('\n', f);
}

enum cell { CELL_MEDIAN, CELL_GBPS, CELL_CPU, CELL_CPU_SPLIT };

/* One process role's share of r's CPU per handoff, in µs: the role's
 * total over the measured windows scaled as the sum is (cpu_ns). */
static double cpu_part_us(const struct bench_result *r, uint64_t role_ns)
{
	uint64_t sum = r->cpu_prod_ns + r->cpu_cons_ns + r->cpu_svc_ns;

	return sum ? (double)role_ns * r->cpu_ns / (double)sum / 1e3 : 0;
}

/*
 * Every method's median (p99) in µs, its delivered GB/s or its CPU per
 * handoff in µs (in all, or by process), per size, for runs of kind (only
 * the methods that ran one get a column).
 */
static void value_table(FILE *f, const struct bench_report *rep,
			const size_t *sizes, size_t ns, int w, enum cell what,
			enum bench_kind kind)
{
	static const char *const title[] = {
		"Median round trip in µs (p99)",
		"Delivered GB/s (1e9 bytes/s)",
		"CPU per handoff in µs (producer + consumers + tensord or "
		"RouDi, user + system)",
		"CPU per handoff by process in µs: producer / consumers "
		"(all) / tensord or RouDi",
	};
	unsigned nc = kind == BENCH_FANOUT ? BENCH_MAX_CONSUMERS : 1;
	bool col[BENCH_MAX_METHODS] = {false};
	char sz[32];

	for (size_t m = 0; m < rep->method_count; m++)
		for (size_t s = 0; s < ns && !col[m]; s++)
			col[m] = find_k(rep, rep->methods[m]->name, sizes[s], w,
					kind, nc, 0) != NULL;
	fprintf(f, "\n### %s%s, mode %s\n\n",
		kind == BENCH_FANOUT ? "Fan-out 1→4: " : "", title[what],
		mode_name(w));
	fprintf(f, "| size |");
	for (size_t m = 0; m < rep->method_count; m++)
		if (col[m])
			fprintf(f, " %s |", rep->methods[m]->name);
	fprintf(f, "\n|---|");
	for (size_t m = 0; m < rep->method_count; m++)
		if (col[m])
			fprintf(f, "---|");
	fputc('\n', f);
	for (size_t s = 0; s < ns; s++) {
		bool any = false;

		for (size_t m = 0; m < rep->method_count && !any; m++)
			any = find_k(rep, rep->methods[m]->name, sizes[s], w,
				     kind, nc, 0) != NULL;
		if (!any)
			continue;
		fprintf(f, "| %s |", size_label(sizes[s], sz, sizeof(sz)));
		for (size_t m = 0; m < rep->method_count; m++) {
			const struct bench_result *r = find_k(
				rep, rep->methods[m]->name, sizes[s], w, kind,
				nc, 0);

			if (!col[m])
				continue;
			if (!r)
				fprintf(f, " |");
			else if (r->status != BENCH_OK)
				fprintf(f, " %s |", status_name(r->status));
			else if (what == CELL_MEDIAN)
				fprintf(f, " %.1f (%.1f) |", r->median_ns / 1e3,
					r->p99_ns / 1e3);
			else if (what == CELL_GBPS)
				fprintf(f, " %.4f |", r->gbytes_per_s);
			else if (what == CELL_CPU)
				fprintf(f, " %.1f |", r->cpu_ns / 1e3);
			else
				fprintf(f, " %.1f / %.1f / %.1f |",
					cpu_part_us(r, r->cpu_prod_ns),
					cpu_part_us(r, r->cpu_cons_ns),
					cpu_part_us(r, r->cpu_svc_ns));
		}
		fputc('\n', f);
	}
}

/* Paced streams: one-way latency and CPU per message, every method. */
static void paced_table(FILE *f, const struct bench_report *rep)
{
	fprintf(f, "\n### Paced streams: one-way latency in µs, CPU per "
		   "message in µs\n\n"
		   "| rate | consumers | method | p50 | p99 | max | CPU/msg "
		   "| latencies (skipped) |\n"
		   "|---|---|---|---|---|---|---|---|\n");
	for (size_t i = 0; i < rep->result_count; i++) {
		const struct bench_result *r = &rep->results[i];

		if (r->kind != BENCH_PACED)
			continue;
		fprintf(f, "| %.0f Hz | %u | %s |", r->rate_hz, r->consumers,
			r->method->name);
		if (r->status != BENCH_OK)
			fprintf(f, " %s | | | | |\n", status_name(r->status));
		else
			fprintf(f, " %.1f | %.1f | %.1f | %.1f | %llu (%llu) "
				   "|\n",
				r->median_ns / 1e3, r->p99_ns / 1e3,
				r->max_ns / 1e3, r->cpu_ns / 1e3,
				(unsigned long long)r->delivered,
				(unsigned long long)r->skipped);
	}
}

/*
 * The paced target at rate hz to nc consumers: the ring's p50, p99 and
 * CPU per message each at most iceoryx-wait's, every one a ratio paired
 * round by round like the others (the pooled µs beside them), or with
 * one round the pooled figures.
 */
static void paced_row(FILE *f, const struct bench_report *rep, double hz,
		      unsigned nc)
{
	static const struct {
		const char *name;
		enum figure g;
	} fig[] = {{"p50", FIG_MEDIAN}, {"p99", FIG_P99}, {"CPU", FIG_CPU}};
	const struct bench_result *a = find_k(rep, "tensord-ring", 0, 0,
					      BENCH_PACED, nc, hz);
	const struct bench_result *b = find_k(rep, "iceoryx-wait", 0, 0,
					      BENCH_PACED, nc, hz);
	struct ratio v[3];
	struct tally tl = {.nover = 0};
	bool any_paired = false;
	char t[96];

	fprintf(f, "| paced %.0f Hz 1→%u: ring p50, p99 ≤ iceoryx-wait's and "
		   "CPU/msg ≤ 1.0× | nowrite | ", hz, nc);
	for (size_t i = 0; i < 3; i++) {
		v[i] = ratio_fig(a, b, fig[i].g);
		if (v[i].med < 0) {
			fprintf(f, "n/a | not measured |\n");
			return;
		}
		any_paired |= v[i].rounds > 0;
		tally_add(&tl, fig[i].name, v[i], 1.0, false);
	}
	if (any_paired) {
		for (size_t i = 0; i < 3; i++)
			fprintf(f, "%s%s %s", i ? ", " : "", fig[i].name,
				ratio_text(v[i], 2, NULL, t, sizeof(t)));
		fprintf(f, "; pooled p50 %.1f/%.1f µs, p99 %.1f/%.1f µs, "
			   "CPU %.1f/%.1f µs | ",
			a->median_ns / 1e3, b->median_ns / 1e3,
			a->p99_ns / 1e3, b->p99_ns / 1e3, a->cpu_ns / 1e3,
			b->cpu_ns / 1e3);
	} else {
		fprintf(f, "%s: p50 %.1f/%.1f µs, p99 %.1f/%.1f µs, CPU "
			   "%.2f× | ",
			a->rounds == 1 ? "one pooled round" : "pooled",
			a->median_ns / 1e3, b->median_ns / 1e3,
			a->p99_ns / 1e3, b->p99_ns / 1e3, v[2].med);
	}
	tally_print(f, &tl);
	fprintf(f, " |\n");
}

/*
 * The issue-16 targets, computed from this run: the plain API against
 * iceoryx-wait on both import paths, fan-out, paced streams (latency
 * AND CPU), the ring against the bare limits.
 */
static void targets16_table(FILE *f, const struct bench_report *rep,
			    const size_t *sizes, size_t ns)
{
	static const struct {
		const char *name, *what;
		enum bench_kind kind;
	} rows[] = {
		{"tensord", "plain API", BENCH_PINGPONG},
		{"tensord-scm", "plain API", BENCH_PINGPONG},
		{"tensord-get", "plain API, GET path", BENCH_PINGPONG},
		{"tensord-follow", "plain API, following", BENCH_PINGPONG},
		{"tensord-follow-scm", "plain API, following", BENCH_PINGPONG},
		{"tensord-ring", "fan-out 1→4", BENCH_FANOUT},
		{"tensord", "fan-out 1→4", BENCH_FANOUT},
		{"tensord-nowait", "fan-out 1→4, publish without waiting",
		 BENCH_FANOUT},
		{"tensord-get", "fan-out 1→4, GET path", BENCH_FANOUT},
		{"tensord-follow", "fan-out 1→4, following", BENCH_FANOUT},
	};
	char t[160];

	fprintf(f, "### Issue-16 targets (this run)\n\n"
		   "| target | mode | measured | verdict |\n"
		   "|---|---|---|---|\n");
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		for (int w = 1; w >= 0; w--) {
			snprintf(t, sizeof(t), "%s `%s` ≤ 1.0× iceoryx-wait%s, "
				 "64 B-64 MiB", rows[i].what, rows[i].name,
				 rows[i].kind == BENCH_FANOUT ? "'s 1→4" : "");
			worst_row(f, rep, t, rows[i].name, "iceoryx-wait",
				  rows[i].kind, w, sizes, ns);
		}
	for (int ri = 0; ri < 2; ri++)
		for (unsigned nc = 1; nc <= BENCH_MAX_CONSUMERS; nc += 3)
			paced_row(f, rep, ri ? 30 : 1000, nc);
	limit_row(f, "ring ≤ 2× bare-spin at 64 B",
		  find(rep, "tensord-ring", 64, 0),
		  find(rep, "bare-spin", 64, 0), 0, 2.0);
	/* the same shape as the bare spin: one handoff, and an answer
	 * without bytes (the release; docs/fastpath.md, "Lock step") */
	limit_row(f, "ring in lock step (`tensord-ring-lockstep`) ≤ 2× "
		     "bare-spin at 64 B",
		  find(rep, "tensord-ring-lockstep", 64, 0),
		  find(rep, "bare-spin", 64, 0), 0, 2.0);
	limit_row(f, "ring, TENSORD_RING_SPIN_US=0, ≤ 1.2× bare-futex at 64 B",
		  find(rep, "tensord-ring-sleep", 64, 0),
		  find(rep, "bare-futex", 64, 0), 0, 1.2);
	fputc('\n', f);
}

/* The methods that get their own target and ratio tables. */
static bool is_tensord(const char *name)
{
	return strcmp(name, "tensord") == 0 ||
	       strcmp(name, "tensord-scm") == 0 ||
	       strcmp(name, "tensord-get") == 0 ||
	       strcmp(name, "tensord-nowait") == 0 ||
	       strcmp(name, "tensord-follow") == 0 ||
	       strcmp(name, "tensord-follow-scm") == 0 ||
	       strcmp(name, "tensord-ring") == 0;
}

int report_markdown(const char *path, const struct bench_report *rep)
{
	FILE *f = fopen(path, "we");
	size_t sizes[64], ns = sizes_of(rep, sizes, 64);
	char sz[32], lb[32];

	if (!f) {
		fprintf(stderr, "bench: %s: %s\n", path, strerror(errno));
		return -errno;
	}
	fprintf(f, "Ratios and verdicts: the ratio of two runs of the same "
		   "kind, size and mode is the median over the rounds of the "
		   "per-round ratio (round k of every method ran back to "
		   "back), shown with the least and greatest per-round ratio, "
		   "e.g. `1.03× (0.91–1.12 over 5 rounds)`; with a single "
		   "round, or across sizes, it is the ratio of the two pooled "
		   "medians, `(pooled)`. A verdict goes by the median ratio; "
		   "*within noise* marks a ratio whose rounds fall on both "
		   "sides of the limit. Paced rows pair the rounds the same "
		   "way for p50, p99 and CPU per message, each against 1.0× "
		   "(a paced run has one round per 200 messages at most; "
		   "with one, `one pooled round`).\n\n");
	/* the targets, then one set of ratio tables per tensord method
	 * (API on both import paths, fast path) */
	targets16_table(f, rep, sizes, ns);
	for (size_t m = 0; m < rep->method_count; m++)
		if (is_tensord(rep->methods[m]->name))
			targets_table(f, rep, rep->methods[m]->name, sizes,
				      ns);
	for (size_t m = 0; m < rep->method_count; m++)
		if (is_tensord(rep->methods[m]->name))
			ratio_tables(f, rep, rep->methods[m]->name, sizes, ns);

	for (int w = 1; w >= 0; w--) {
		value_table(f, rep, sizes, ns, w, CELL_MEDIAN, BENCH_PINGPONG);
		value_table(f, rep, sizes, ns, w, CELL_CPU, BENCH_PINGPONG);
		value_table(f, rep, sizes, ns, w, CELL_GBPS, BENCH_PINGPONG);
	}
	for (int w = 1; w >= 0; w--) {
		value_table(f, rep, sizes, ns, w, CELL_MEDIAN, BENCH_FANOUT);
		value_table(f, rep, sizes, ns, w, CELL_CPU, BENCH_FANOUT);
		/* where it goes: a daemon's hop is its own column */
		value_table(f, rep, sizes, ns, w, CELL_CPU_SPLIT,
			    BENCH_FANOUT);
	}
	paced_table(f, rep);

	fprintf(f, "\n### Not measured\n\n");
	{
		int none = 1;

		for (size_t i = 0; i < rep->result_count; i++) {
			const struct bench_result *r = &rep->results[i];
			int dup = 0;

			if (r->status == BENCH_OK)
				continue;
			/* one line per method and reason */
			for (size_t j = 0; j < i && !dup; j++)
				dup = rep->results[j].method == r->method &&
				      rep->results[j].status == r->status &&
				      strcmp(rep->results[j].why, r->why) == 0;
			if (dup)
				continue;
			fprintf(f, "- %s (%s, from %s %s): %s\n",
				r->method->name, status_name(r->status),
				size_label(r->size, sz, sizeof(sz)),
				run_label(r, lb, sizeof(lb)), r->why);
			none = 0;
		}
		if (none)
			fprintf(f, "Everything ran.\n");
	}
	if (fclose(f) != 0)
		return -EIO;
	return 0;
}

int report_plot(const char *png, const struct bench_report *rep,
		const char *tmpdir)
{
	char gp[512], sz[32];
	size_t sizes[64], ns = sizes_of(rep, sizes, 64);
	FILE *f;
	pid_t pid;
	int status;

	snprintf(gp, sizeof(gp), "%s/plot.gp", tmpdir);
	f = fopen(gp, "we");
	if (!f)
		return -errno;
	for (int w = 1; w >= 0; w--) {
		for (size_t m = 0; m < rep->method_count; m++) {
			fprintf(f, "$d%d_%zu << EOD\n", w, m);
			for (size_t s = 0; s < ns; s++) {
				const struct bench_result *r = find(rep,
					rep->methods[m]->name, sizes[s], w);

				if (r && r->status == BENCH_OK)
					fprintf(f, "%zu %.3f %.3f\n", sizes[s],
						r->median_ns / 1e3,
						r->p99_ns / 1e3);
			}
			fprintf(f, "EOD\n");
		}
	}
	fprintf(f, "set terminal pngcairo size 1600,700 font 'sans,11'\n"
		   "set output '%s'\n"
		   "set multiplot layout 1,2 title 'tensord-bench: ping-pong "
		   "round trip (median; p99 dashed) vs payload size%s'\n"
		   "set logscale xy\nset grid xtics ytics mytics\n"
		   "set xlabel 'payload size'\n"
		   "set ylabel 'round trip (µs)'\n"
		   "set key top left\nset format y '10^{%%T}'\n"
		   "set offsets graph 0.04, graph 0.04, 0, 0\n"
		   "set xtics rotate by -30 offset -1,0\nset xtics (",
		png, rep->pinned ? ", producer and consumer pinned to "
		"different CPUs" : "");
	for (size_t s = 0; s < ns; s++)
		fprintf(f, "%s'%s' %zu", s ? ", " : "",
			size_label(sizes[s], sz, sizeof(sz)), sizes[s]);
	fprintf(f, ")\n");
	for (int w = 1; w >= 0; w--) {
		int first = 1;

		fprintf(f, "set title '%s'\nplot ", w ?
			"producer writes every byte, consumer checks every byte" :
			"stamps only (first/last 8 bytes)");
		for (size_t m = 0; m < rep->method_count; m++) {
			int has = 0;

			for (size_t s = 0; s < ns; s++) {
				const struct bench_result *r = find(rep,
					rep->methods[m]->name, sizes[s], w);

				has |= r && r->status == BENCH_OK;
			}
			if (!has)
				continue;
			fprintf(f, "%s$d%d_%zu using 1:2 with linespoints "
				   "lt %zu lw 2 pt 7 title '%s', "
				   "$d%d_%zu using 1:3 with lines lt %zu dt 2 "
				   "notitle",
				first ? "" : ", \\\n  ", w, m, m + 1,
				rep->methods[m]->name, w, m, m + 1);
			first = 0;
		}
		if (first)
			fprintf(f, "NaN title 'no data'");
		fprintf(f, "\n");
	}
	fprintf(f, "unset multiplot\n");
	if (fclose(f) != 0)
		return -EIO;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		execlp("gnuplot", "gnuplot", gp, (char *)NULL);
		fprintf(stderr, "bench: gnuplot: %s (Debian: gnuplot-nox)\n",
			strerror(errno));
		_exit(127);
	}
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0) {
		fprintf(stderr, "bench: gnuplot failed; no %s\n", png);
		return -EIO;
	}
	return 0;
}
