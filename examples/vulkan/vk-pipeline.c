/* SPDX-License-Identifier: MIT */
/*
 * vk-pipeline: two GPU stages, a producer shader and a consumer shader,
 * joined by a tensord ring; and, to compare, the same two stages in one
 * process with a memcpy between them. Both run lock-step (the producer
 * starts frame f+1 when the consumer has reduced frame f), so a frame's
 * latency is the time from the producer taking a slot to the consumer's
 * result, and frames per second is its inverse.
 *
 *   vk-pipeline ring NAME BYTES FRAMES
 *   vk-pipeline copy BYTES FRAMES
 *
 * ring: the producer imports each ring slot into Vulkan once, the first
 * time it gets it (slots are stable memory: no per-frame import), writes
 * it with the fill shader, publishes it with the slot's fence pending
 * (td_ring_publish_fenced) and signals the fence after vkWaitForFences.
 * A subscriber process imports each slot read-only once, waits on the
 * slot's fence (td_sub_fence_wait) and reduces it with the reduction
 * shader. No byte of the tensor is copied: both stages' imported host
 * pointers are mappings of the same memfd pages, which both print
 * (inode and file offset of each slot, from /proc/self/maps).
 * copy: fill shader into one host-visible Vulkan buffer, memcpy into the
 * consumer's, reduction shader.
 *
 * Every frame's GPU result is checked, after the timed loop, against the
 * fill formula; the last line says whether all matched.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <tensord/tensord.h>

#include "vkx.h"

#define SLOTS 3
#define MAX_FRAMES 100000

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Where p lies: "ino N off O" of the file mapped there (/proc/self/maps). */
static void where(const void *p, char *out, size_t cap)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];

	snprintf(out, cap, "not in a file mapping");
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, off, ino;
		char dev[32];

		if (sscanf(line, "%lx-%lx %*s %lx %31s %lu", &lo, &hi, &off,
			   dev, &ino) != 5)
			continue;
		if ((uintptr_t)p >= lo && (uintptr_t)p < hi) {
			snprintf(out, cap, "ino %lu off %lu", ino,
				 off + ((uintptr_t)p - lo));
			break;
		}
	}
	if (f)
		fclose(f);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Median of n values (sorts them). */
static double median(double *x, long n)
{
	qsort(x, (size_t)n, sizeof(*x), cmp_double);
	return x[n / 2];
}

static void report(const char *mode, uint64_t bytes, long frames,
		   double *lat, double total_us, uint64_t copied)
{
	qsort(lat, (size_t)frames, sizeof(*lat), cmp_double);
	printf("%s: %" PRIu64 " bytes x %ld frames: %.1f fps, latency "
	       "median %.0f us p90 %.0f us, bytes copied %" PRIu64 "\n",
	       mode, bytes, frames, frames / (total_us / 1e6),
	       lat[frames / 2], lat[frames * 9 / 10], copied);
}

/* Check results[f] (sum, xor) against the formula for every frame. */
static long verify(const uint32_t (*res)[2], long frames, uint64_t bytes)
{
	long bad = 0;

	for (long f = 0; f < frames; f++) {
		uint32_t s, x;

		vkx_expect(bytes / 4, (uint32_t)f, &s, &x);
		bad += res[f][0] != s || res[f][1] != x;
	}
	return bad;
}

/* ---- one process, memcpy between the stages ---- */

static int run_copy(uint64_t bytes, long frames)
{
	struct vkx v;
	struct vkx_prog prod, red;
	struct vkx_buf a, b, res;
	double *lat = calloc((size_t)frames, sizeof(double));
	double *t_prod = calloc((size_t)frames, sizeof(double));
	double *t_copy = calloc((size_t)frames, sizeof(double));
	double *t_red = calloc((size_t)frames, sizeof(double));
	uint32_t (*out)[2] = calloc((size_t)frames, sizeof(*out));
	uint64_t copied = 0;
	int rc = vkx_init(&v);

	if (rc < 0)
		return rc == -2 ? 77 : 1;
	if (!lat || !out || !t_prod || !t_copy || !t_red || vkx_prog_init(&v, VKX_PRODUCE, &prod) < 0 ||
	    vkx_prog_init(&v, VKX_REDUCE, &red) < 0 ||
	    vkx_alloc(&v, bytes, &a) < 0 || vkx_alloc(&v, bytes, &b) < 0 ||
	    vkx_alloc(&v, 8, &res) < 0)
		return 1;
	double t0 = now_us();
	for (long f = 0; f < frames; f++) {
		double s = now_us(), m, r;

		if (vkx_produce(&v, &prod, &a, (uint32_t)(bytes / 4),
				(uint32_t)f) < 0 ||
		    vkx_wait(&v, &prod) < 0)
			return 1;
		m = now_us();
		memcpy(b.host, a.host, bytes); /* the handoff */
		copied += bytes;
		r = now_us();
		if (vkx_reduce(&v, &red, &b, (uint32_t)(bytes / 4), &res) < 0 ||
		    vkx_wait(&v, &red) < 0)
			return 1;
		memcpy(out[f], res.host, sizeof(out[f]));
		lat[f] = now_us() - s;
		t_prod[f] = m - s;
		t_copy[f] = r - m;
		t_red[f] = now_us() - r;
	}
	double total = now_us() - t0;
	long bad = verify((const uint32_t(*)[2])out, frames, bytes);
	report("copy", bytes, frames, lat, total, copied);
	printf("copy: median produce %.0f us, memcpy %.0f us, reduce %.0f us\n",
	       median(t_prod, frames), median(t_copy, frames),
	       median(t_red, frames));
	free(t_prod);
	free(t_copy);
	free(t_red);
	printf("copy: %ld of %ld frames match the formula\n", frames - bad,
	       frames);
	vkx_buf_free(&v, &a);
	vkx_buf_free(&v, &b);
	vkx_buf_free(&v, &res);
	vkx_prog_fini(&v, &prod);
	vkx_prog_fini(&v, &red);
	vkx_fini(&v);
	free(lat);
	free(out);
	return bad ? 1 : 0;
}

/* ---- two processes through a ring ---- */

/* The subscriber: reduce every version, ack each on `ack`. */
static int consumer(const char *name, uint64_t bytes, long frames, int ack)
{
	struct td_error err;
	struct td_client *c;
	struct td_sub *s;
	struct vkx v;
	struct vkx_prog red;
	struct vkx_buf slot[SLOTS] = {0}, res;
	uint32_t (*out)[2] = calloc((size_t)frames, sizeof(*out));
	double *t_red = calloc((size_t)frames, sizeof(double));
	long imports = 0, got = 0;
	int rc = vkx_init(&v);

	if (rc < 0)
		return rc == -2 ? 77 : 1;
	if (!out || !t_red || vkx_prog_init(&v, VKX_REDUCE, &red) < 0 ||
	    vkx_alloc(&v, 8, &res) < 0)
		return 1;
	if (td_client_connect(NULL, &c, &err) < 0 ||
	    td_ring_subscribe(c, name, 10000, &s, &err) < 0) {
		fprintf(stderr, "consumer: %s\n", err.reason);
		return 1;
	}
	(void)!write(ack, "R", 1);
	while (got < frames) {
		struct td_view view;

		rc = td_sub_next(s, 10000, &view);
		if (rc == 0)
			rc = td_sub_fence_wait(s, 10000);
		if (rc < 0) {
			fprintf(stderr, "consumer: %s\n", strerror(-rc));
			return 1;
		}
		struct vkx_buf *b = &slot[view.slot % SLOTS];
		if (!b->buf) {
			char w[64];

			/* once per slot: the mapping never moves */
			if (vkx_import(&v, (void *)view.planes[0], bytes, b) < 0)
				return 1;
			imports++;
			where(view.planes[0], w, sizeof(w));
			printf("consumer: slot %u imported at %p == mapped "
			       "%p, %s\n",
			       view.slot, b->host, view.planes[0], w);
		}
		double r = now_us();
		if (vkx_reduce(&v, &red, b, (uint32_t)(bytes / 4), &res) < 0 ||
		    vkx_wait(&v, &red) < 0)
			return 1;
		t_red[got] = now_us() - r;
		uint64_t f = view.version - 1; /* lock-step: none skipped */
		if (f < (uint64_t)frames)
			memcpy(out[f], res.host, sizeof(out[f]));
		td_sub_release(s);
		got++;
		(void)!write(ack, "A", 1);
	}
	long bad = verify((const uint32_t(*)[2])out, frames, bytes);
	printf("consumer: %ld of %ld frames match the formula, %ld slot "
	       "imports for %ld frames, median reduce %.0f us\n",
	       frames - bad, frames, imports, got, median(t_red, got));
	free(t_red);
	fflush(stdout);
	for (int i = 0; i < SLOTS; i++)
		vkx_buf_free(&v, &slot[i]);
	vkx_buf_free(&v, &res);
	vkx_prog_fini(&v, &red);
	vkx_fini(&v);
	td_sub_close(s);
	td_client_close(c);
	free(out);
	return bad ? 1 : 0;
}

/*
 * The producer stops at frame f: say why (a bare exit 1 left the user to
 * guess). The consumer's end is told by its status: it printed its own
 * reason, or was killed.
 */
static int stopped(long f, const char *why, pid_t consumer)
{
	int st;

	if (!consumer) {
		fprintf(stderr, "producer: stopped at frame %ld: %s\n", f, why);
		return 1;
	}
	if (waitpid(consumer, &st, 0) != consumer)
		fprintf(stderr, "producer: stopped at frame %ld: %s\n", f, why);
	else if (WIFEXITED(st))
		fprintf(stderr, "producer: stopped at frame %ld: %s (it exited "
			"with status %d)\n", f, why, WEXITSTATUS(st));
	else
		fprintf(stderr, "producer: stopped at frame %ld: %s (killed by "
			"signal %d)\n", f, why, WTERMSIG(st));
	return 1;
}

static int run_ring(const char *name, uint64_t bytes, long frames)
{
	int ack[2];
	char b;

	if (pipe(ack) < 0)
		return 1;
	fflush(NULL);
	/* fork before any Vulkan or tensord handle: each side makes its own */
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(ack[0]);
		_exit(consumer(name, bytes, frames, ack[1]));
	}
	close(ack[1]);

	struct td_error err;
	struct td_client *c;
	struct td_ring *r;
	struct vkx v;
	struct vkx_prog prod;
	struct vkx_buf slot[SLOTS] = {0};
	double *lat = calloc((size_t)frames, sizeof(double));
	double *t_prod = calloc((size_t)frames, sizeof(double));
	long imports = 0;
	const uint64_t shape[1] = {bytes / 4};
	struct td_ring_desc desc = {
		.dtype = TD_TENSOR_U32, .ndim = 1, .shape = shape,
		.slot_count = SLOTS, .reader_count = 1,
	};
	int rc = vkx_init(&v);

	if (rc < 0)
		return rc == -2 ? 77 : 1;
	if (!lat || !t_prod || vkx_prog_init(&v, VKX_PRODUCE, &prod) < 0)
		return 1;
	if (td_client_connect(NULL, &c, &err) < 0 ||
	    td_ring_create(c, name, &desc, &r, &err) < 0) {
		fprintf(stderr, "producer: %s\n", err.reason);
		return 1;
	}
	if (read(ack[0], &b, 1) != 1) /* subscribed */
		return stopped(0, "the consumer ended before it subscribed",
			       pid);
	double t0 = now_us();
	for (long f = 0; f < frames; f++) {
		double s = now_us();
		struct td_slot sl;
		uint64_t version;

		rc = td_ring_acquire(r, -1, &sl);
		if (rc < 0) {
			char why[128];

			snprintf(why, sizeof(why), "td_ring_acquire: %s",
				 strerror(-rc));
			return stopped(f, why, 0);
		}
		struct vkx_buf *vb = &slot[sl.index % SLOTS];
		if (!vb->buf) {
			char w[64];

			if (vkx_import(&v, sl.planes[0], bytes, vb) < 0)
				return 1;
			imports++;
			where(sl.planes[0], w, sizeof(w));
			printf("producer: slot %u imported at %p, %s\n",
			       sl.index, vb->host, w);
			fflush(stdout); /* in order with stderr's lines */
		}
		double p = now_us();
		if (vkx_produce(&v, &prod, vb, (uint32_t)(bytes / 4),
				(uint32_t)f) < 0)
			return 1;
		/* out before the GPU is done: the slot's fence says when */
		rc = td_ring_publish_fenced(r, &version);
		if (rc < 0) {
			fprintf(stderr, "producer: publish: %s\n",
				strerror(-rc));
			return 1;
		}
		if (vkx_wait(&v, &prod) < 0)
			return 1; /* vkx said why */
		rc = td_ring_fence_signal(r, version);
		if (rc < 0) {
			char why[128];

			snprintf(why, sizeof(why), "td_ring_fence_signal: %s",
				 strerror(-rc));
			return stopped(f, why, 0);
		}
		t_prod[f] = now_us() - p;
		if (read(ack[0], &b, 1) != 1)
			return stopped(f, "the consumer ended", pid);
		lat[f] = now_us() - s;
	}
	double total = now_us() - t0;
	close(ack[0]);
	int st;
	waitpid(pid, &st, 0);
	report("ring", bytes, frames, lat, total, 0);
	printf("producer: %ld slot imports for %ld frames, median produce "
	       "%.0f us\n", imports, frames, median(t_prod, frames));
	free(t_prod);
	for (int i = 0; i < SLOTS; i++)
		vkx_buf_free(&v, &slot[i]);
	vkx_prog_fini(&v, &prod);
	vkx_fini(&v);
	td_ring_close(r);
	td_client_close(c);
	free(lat);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

int main(int argc, char **argv)
{
	int ring = argc == 5 && strcmp(argv[1], "ring") == 0;
	int copy = argc == 4 && strcmp(argv[1], "copy") == 0;

	if (!ring && !copy) {
		fprintf(stderr, "usage: %s ring NAME BYTES FRAMES\n"
				"       %s copy BYTES FRAMES\n",
			argv[0], argv[0]);
		return 2;
	}
	uint64_t bytes = strtoull(argv[ring ? 3 : 2], NULL, 10);
	long frames = strtol(argv[ring ? 4 : 3], NULL, 10);
	if (bytes == 0 || bytes % 4096 || bytes / 4 > UINT32_MAX ||
	    frames < 1 || frames > MAX_FRAMES) {
		fprintf(stderr, "BYTES: a multiple of 4096; FRAMES 1..%d\n",
			MAX_FRAMES);
		return 2;
	}
	fflush(stdout);
	return ring ? run_ring(argv[2], bytes, frames)
		    : run_copy(bytes, frames);
}
