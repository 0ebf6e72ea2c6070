/* SPDX-License-Identifier: MIT */
/*
 * td-stress: load and soak for tensord (issue 4, docs/reliability.md).
 *
 * Starts a private daemon, then N producer and M consumer threads, each
 * with its own connection. Producers publish random sizes (log-uniform,
 * 1 B .. --max-size) under random names with the xxh3 of the bytes in
 * the metadata; consumers get random names and verify every byte. An
 * optional chaos thread forks short-lived clients and SIGKILLs them at
 * random points. Mid-run, `tensorctl ls` must answer. It stops after
 * --handoffs verified handoffs or --seconds, whichever comes first, then
 * deletes everything and checks that the daemon's fd count is back at
 * its baseline (and reports RSS). Exit 0 only with zero errors.
 *
 * --rings R adds R ring producers and R ring consumers (the fast path,
 * docs/fastpath.md): producers create rings of random geometry, publish
 * a few hundred versions each with the xxh3 of the payload in the slot's
 * first 8 bytes, close and start over; consumers subscribe to random
 * rings, verify every version they take, and unsubscribe, or GET a
 * ring's name (a daemon lease on its latest slot) and verify that. That churns
 * the daemon's ring lifecycle (create, rows, close, the memory of rings
 * outliving their producer) under the same chaos, fd and RSS checks.
 *
 * --follows F adds F followers (docs/fastpath.md, "Following a name"):
 * each follows a random name, verifies every version it takes (from the
 * daemon's bell or by GET), holds some a while, sometimes deletes the
 * name, and after a few versions closes the follow (sometimes with the
 * tensor still out) and follows another; chaos clients follow too, and
 * die holding. A held version recycled under a follower is a mismatch.
 *
 * Half the loans are recyclable (TD_ALLOC_RECYCLE, docs/fastpath.md
 * "Recycled loans"; half of those named for their tensor, "Across
 * names"), of power-of-two sizes so that buffers come back:
 * a buffer recycled while a consumer still leases its version would show
 * up as a digest mismatch.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include <tensord/tensord.h>

#include "daemonctl.h"

struct cfg {
	unsigned producers, consumers, names;
	uint64_t max_size, max_bytes, handoffs;
	double seconds;
	unsigned chaos; /* kills, 0 = none */
	uint64_t seed;
	uint64_t rss_slack_kb;
	const char *tensord, *tensorctl;
	const char *victim_sock; /* --victim: be a chaos victim of this */
	uint64_t victim_seed;
	bool keep_cache; /* keep libtensord's mapping cache (see consume) */
	unsigned rings;  /* ring producers, and as many ring consumers */
	unsigned follows; /* followers */
};

static struct cfg C = {
	.producers = 64,
	.consumers = 448,
	.names = 4,
	.max_size = 64u << 20,
	.max_bytes = 2ull << 30,
	.handoffs = 20000,
	.seconds = 60,
	.chaos = 0,
	.seed = 1,
	.rss_slack_kb = 16384,
};

static struct tdc_daemon D;
static atomic_bool stop_now;
static atomic_uint_fast64_t n_pub, n_pub_bytes, n_full, n_got, n_bytes,
	n_miss, n_err, n_kills, n_conn, n_empty, n_rings, n_ring_pub,
	n_ring_got, n_ring_gets, n_ring_miss, n_follow_got, n_follow_del,
	n_fenced_pub, n_fenced_got, n_fence_late;

/*
 * A quarter of the plain publishes carry an eventfd fence (docs/
 * fastpath.md, "Fences"); half of those are signalled at once, the rest
 * at the producer's next publish, so consumers meet fences pending and
 * signalled, and a SIGKILLed victim leaves one that never signals.
 */
static __thread int pending_fence = -1;
/* How long a consumer waits for a fence before it counts it late. */
#define FENCE_WAIT_MS 1000

static void fence_settle(void)
{
	if (pending_fence < 0)
		return;
	(void)td_fence_signal(pending_fence, NULL);
	close(pending_fence);
	pending_fence = -1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ULL;
}

/*
 * Log-uniform in [1, max] (many small tensors, some big ones), and now
 * and then 0: empty tensors are valid and take the no-mapping path.
 */
static uint64_t rnd_size(uint64_t *s)
{
	unsigned bits = 0;
	uint64_t top;

	if (rnd(s) % 32 == 0)
		return 0;
	while ((C.max_size >> bits) > 1)
		bits++;
	top = 1ull << (rnd(s) % (bits + 1));
	return 1 + rnd(s) % (top < C.max_size ? top : C.max_size);
}

static void fill(uint8_t *p, uint64_t n, uint64_t seed)
{
	uint64_t x = seed | 1, i = 0;

	for (; i + 8 <= n; i += 8) {
		x = rnd(&x);
		memcpy(p + i, &x, 8);
	}
	for (x = rnd(&x); i < n; i++, x >>= 8)
		p[i] = (uint8_t)x;
}

static void err(const char *who, int rc, const struct td_error *e)
{
	atomic_fetch_add(&n_err, 1);
	fprintf(stderr, "td-stress: %s: %s (%s)\n", who, strerror(-rc),
		e ? e->reason : "");
}

static void pname(char *buf, size_t cap, unsigned p, unsigned k)
{
	snprintf(buf, cap, "stress/p%u/n%u", p, k);
}

static int produce(struct td_client *c, unsigned self, uint64_t *s)
{
	uint64_t size = rnd_size(s), digest;
	uint64_t shape[1] = {size};
	struct td_publish p = {.dtype = TD_TENSOR_U8, .ndim = 1,
			       .shape = shape};
	struct td_error e = {0};
	struct td_alloc *a;
	char name[64];
	bool recycle;
	int rc;

	pname(name, sizeof(name), self, (unsigned)(rnd(s) % C.names));
	p.name = name;
	if (size == 0) {
		/* 0 bytes: an empty memfd, published like any other */
		digest = XXH3_64bits(NULL, 0);
		p.meta = &digest;
		p.meta_len = sizeof(digest);
		rc = td_client_put(c, &p, NULL, 0, NULL, &e);
		if (rc < 0 && rc != -ENOSPC && rc != -EDQUOT) {
			fprintf(stderr, "td-stress: put %s (empty): %s\n",
				name, e.reason);
			return rc;
		}
		atomic_fetch_add(&n_empty, 1);
		return 0;
	}
	recycle = rnd(s) & 1;
	if (recycle) {
		/* sizes that repeat, so that free buffers are taken again */
		while (size & (size - 1))
			size &= size - 1;
		shape[0] = size;
	}
	/* half the recyclable ones named for their tensor ("Across names") */
	rc = td_client_alloc_named(c, recycle && (rnd(s) & 1) ? name : NULL, 1,
				   &size, recycle ? TD_ALLOC_RECYCLE : 0, &a,
				   &e);
	if (rc == -ENOSPC || rc == -EDQUOT) {
		/* everything is leased right now: back-pressure, not a bug */
		atomic_fetch_add(&n_full, 1);
		return 0;
	}
	if (rc < 0) {
		fprintf(stderr, "td-stress: alloc %" PRIu64 ": %s\n", size,
			e.reason);
		return rc;
	}
	fill(td_alloc_data(a, 0), size, rnd(s));
	digest = XXH3_64bits(td_alloc_data(a, 0), size);
	p.meta = &digest;
	p.meta_len = sizeof(digest);
	fence_settle();
	if (rnd(s) % 4 == 0 && (p.fence_fd = td_fence_create()) >= 0)
		p.flags |= TD_PUBLISH_FENCE;
	rc = td_client_publish_alloc(c, a, &p, NULL, &e);
	if (p.flags & TD_PUBLISH_FENCE) {
		if (rc == 0 && rnd(s) & 1)
			pending_fence = p.fence_fd;
		else
			(void)td_fence_signal(p.fence_fd, NULL);
		if (pending_fence < 0)
			close(p.fence_fd);
		atomic_fetch_add(&n_fenced_pub, rc == 0);
	}
	if (rc < 0) {
		fprintf(stderr, "td-stress: publish %s: %s\n", name, e.reason);
		return rc;
	}
	atomic_fetch_add(&n_pub, 1);
	atomic_fetch_add(&n_pub_bytes, size);
	return 0;
}

/* Every byte of t against the xxh3 its producer put in the metadata. */
static int verify(const struct td_tensor *t, const char *name)
{
	const void *meta;
	uint64_t want, got;
	size_t mlen;

	meta = td_tensor_meta(t, &mlen);
	if (mlen != sizeof(want)) {
		fprintf(stderr, "td-stress: %s: %zu bytes of metadata\n", name,
			mlen);
		return -EBADMSG;
	}
	memcpy(&want, meta, sizeof(want));
	got = XXH3_64bits(td_tensor_plane_data(t, 0),
			  td_tensor_plane_size(t, 0));
	if (got != want) {
		fprintf(stderr, "td-stress: %s: digest mismatch\n", name);
		return -EILSEQ;
	}
	return 0;
}

static int consume(struct td_client *c, uint64_t *s)
{
	struct td_tensor *t;
	struct td_error e = {0};
	char name[64];
	int rc;

	pname(name, sizeof(name), (unsigned)(rnd(s) % C.producers),
	      (unsigned)(rnd(s) % C.names));
	rc = td_client_get(c, name, &t, &e);
	if (rc == -ENOENT) {
		atomic_fetch_add(&n_miss, 1);
		return 0;
	}
	if (rc < 0)
		return rc;
	if (td_tensor_has_fence(t)) {
		/* its producer may be gone (a victim) before it signalled */
		rc = td_tensor_fence_wait(t, FENCE_WAIT_MS);
		if (rc == -ETIMEDOUT) {
			atomic_fetch_add(&n_fence_late, 1);
			td_tensor_release(t);
			return 0;
		}
		if (rc < 0) {
			fprintf(stderr, "td-stress: fence of %s: %s\n", name,
				strerror(-rc));
			td_tensor_release(t);
			return rc;
		}
		atomic_fetch_add(&n_fenced_got, 1);
	}
	rc = verify(t, name);
	if (rc == 0)
		atomic_fetch_add(&n_bytes, td_tensor_plane_size(t, 0));
	td_tensor_release(t);
	/*
	 * Each client caches up to 64 unused mappings, and a cached mapping
	 * keeps its buffer alive after the daemon replaced it, outside the
	 * daemon's --max-bytes: 448 consumers x 64 buffers of up to 64 MiB
	 * is more fds than RLIMIT_NOFILE and more memory than the machine.
	 * So by default drop it now; --keep-cache for small runs.
	 */
	if (!C.keep_cache)
		td_client_trim(c);
	if (rc < 0)
		return rc;
	if (atomic_fetch_add(&n_got, 1) + 1 >= C.handoffs)
		atomic_store(&stop_now, true);
	return 0;
}

/* ---- followers ---- */

/* Follow a random name for a few versions; 0 or -errno. */
static int follow_consume(struct td_client *c, uint64_t *s)
{
	unsigned takes = 1 + (unsigned)(rnd(s) % 32);
	struct td_follow *f = NULL;
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	char name[64];
	int rc;

	pname(name, sizeof(name), (unsigned)(rnd(s) % C.producers),
	      (unsigned)(rnd(s) % C.names));
	rc = td_client_follow(c, name, &f, &e);
	if (rc == -ENOBUFS || rc == -EBUSY)
		return 0; /* the daemon's caps on follows: not a bug */
	if (rc < 0) {
		fprintf(stderr, "td-stress: follow %s: %s\n", name, e.reason);
		return rc;
	}
	for (unsigned i = 0; i < takes && !atomic_load(&stop_now); i++) {
		rc = td_follow_next(f, 20, &t, &e);
		if (rc == -ETIMEDOUT || rc == -ENOSPC || rc == -EDQUOT)
			continue; /* a quiet name; or a GET with no room */
		if (rc < 0) {
			fprintf(stderr, "td-stress: follow next %s: %s\n",
				name, e.reason);
			break;
		}
		rc = verify(t, name);
		if (rc < 0)
			break;
		atomic_fetch_add(&n_follow_got, 1);
		if ((rnd(s) & 7) == 0) /* held while producers go on */
			tdc_nap_ms((long)(rnd(s) % 3));
		if ((rnd(s) & 15) == 0 &&
		    td_client_delete(c, name, NULL, NULL) == 0)
			atomic_fetch_add(&n_follow_del, 1);
		if (i + 1 == takes && (rnd(s) & 1))
			break; /* closed with the tensor out */
		td_tensor_release(t);
		t = NULL;
	}
	td_follow_close(f);
	td_tensor_release(t);
	return rc == -ETIMEDOUT || rc == -ENOSPC || rc == -EDQUOT ? 0 : rc;
}

/* ---- rings ---- */

static void rname(char *buf, size_t cap, unsigned r)
{
	snprintf(buf, cap, "stress/ring%u", r);
}

/* One ring's life: create, publish a few hundred versions, close. */
static int ring_produce(struct td_client *c, unsigned self, uint64_t *s)
{
	uint64_t size = 8 + rnd_size(s) / 4;
	struct td_ring_desc d = {
		.dtype = TD_TENSOR_U8, .ndim = 1, .shape = &size,
		.slot_count = 2 + (uint32_t)(rnd(s) % 3),
		.reader_count = 1 + (uint32_t)(rnd(s) % 4),
	};
	struct td_error e = {0};
	struct td_ring *r;
	char name[64];
	unsigned n = 50 + (unsigned)(rnd(s) % 300);
	int rc;

	rname(name, sizeof(name), self);
	rc = td_ring_create(c, name, &d, &r, &e);
	if (rc == -ENOSPC || rc == -EDQUOT || rc == -EEXIST) {
		/* no room, or a chaos client took the name for a while */
		atomic_fetch_add(&n_full, 1);
		tdc_nap_ms(5);
		return 0;
	}
	if (rc < 0) {
		fprintf(stderr, "td-stress: ring create %s: %s\n", name,
			e.reason);
		return rc;
	}
	atomic_fetch_add(&n_rings, 1);
	for (unsigned i = 0; i < n && !atomic_load(&stop_now); i++) {
		struct td_slot sl;
		uint64_t digest;
		uint8_t *p;

		/* every slot can be held by a slow reader: wait, bounded */
		rc = td_ring_acquire(r, 200, &sl);
		if (rc == -ETIMEDOUT)
			continue;
		if (rc < 0)
			break;
		p = sl.planes[0];
		fill(p + 8, size - 8, rnd(s));
		digest = XXH3_64bits(p + 8, size - 8);
		memcpy(p, &digest, 8);
		td_ring_publish(r, NULL);
		atomic_fetch_add(&n_ring_pub, 1);
	}
	td_ring_close(r);
	return rc == -ETIMEDOUT ? 0 : rc;
}

/* A plain GET of a ring's name: a daemon lease on its latest slot. */
static int ring_get(struct td_client *c, const char *name)
{
	struct td_error e = {0};
	struct td_tensor *t;
	const uint8_t *p;
	uint64_t want, size;
	int rc = td_client_get(c, name, &t, &e);

	if (rc == -ENOENT || rc == -ETIMEDOUT) {
		/* between two lives, or nothing published yet */
		atomic_fetch_add(&n_ring_miss, 1);
		return 0;
	}
	if (rc < 0) {
		fprintf(stderr, "td-stress: get %s: %s\n", name, e.reason);
		return rc;
	}
	p = td_tensor_plane_data(t, 0);
	size = td_tensor_plane_size(t, 0);
	memcpy(&want, p, 8);
	if (size < 8 || XXH3_64bits(p + 8, size - 8) != want) {
		fprintf(stderr, "td-stress: get %s v%" PRIu64
				": digest mismatch\n",
			name, td_tensor_version(t));
		rc = -EILSEQ;
	} else {
		atomic_fetch_add(&n_ring_gets, 1);
	}
	td_tensor_release(t);
	if (!C.keep_cache)
		td_client_trim(c);
	return rc;
}

/*
 * After the load: one GET of a ring name that must succeed, so the path
 * is checked in every run, not only when chance let a random GET land
 * between a ring's first publish and its close.
 */
static int final_ring_get(void)
{
	uint64_t size = 4096, digest;
	struct td_ring_desc d = {
		.dtype = TD_TENSOR_U8, .ndim = 1, .shape = &size,
		.slot_count = 2, .reader_count = 1,
	};
	struct td_error e = {0};
	struct td_client *c = NULL;
	struct td_ring *r = NULL;
	struct td_slot sl;
	uint64_t before = atomic_load(&n_ring_gets);
	int rc = td_client_connect(D.sock, &c, &e);

	if (rc < 0)
		c = NULL;

	if (rc == 0)
		rc = td_ring_create(c, "stress/final", &d, &r, &e);
	if (rc == 0)
		rc = td_ring_acquire(r, 1000, &sl);
	if (rc == 0) {
		uint8_t *p = sl.planes[0];

		fill(p + 8, size - 8, 42);
		digest = XXH3_64bits(p + 8, size - 8);
		memcpy(p, &digest, 8);
		rc = td_ring_publish(r, NULL);
	}
	if (rc == 0)
		rc = ring_get(c, "stress/final");
	if (rc == 0 && atomic_load(&n_ring_gets) == before)
		rc = -ENOENT; /* counted as a miss: the GET found nothing */
	if (rc < 0)
		fprintf(stderr, "td-stress: final ring GET: %s (%s)\n",
			strerror(-rc), e.reason);
	td_ring_close(r);
	td_client_close(c);
	return rc;
}

/* Subscribe to a random ring, verify what comes, leave. */
static int ring_consume(struct td_client *c, uint64_t *s)
{
	struct td_error e = {0};
	struct td_sub *sub;
	struct td_view v;
	char name[64];
	unsigned n = 1 + (unsigned)(rnd(s) % 100);
	int rc;

	rname(name, sizeof(name), (unsigned)(rnd(s) % C.rings));
	if (rnd(s) % 4 == 0)
		return ring_get(c, name);
	rc = td_ring_subscribe(c, name, 50, &sub, &e);
	if (rc == -ETIMEDOUT || rc == -ENOENT || rc == -EBUSY) {
		/* not there (between two lives) or all rows taken */
		atomic_fetch_add(&n_ring_miss, 1);
		return 0;
	}
	if (rc < 0) {
		fprintf(stderr, "td-stress: subscribe %s: %s\n", name,
			e.reason);
		return rc;
	}
	for (unsigned i = 0; i < n && !atomic_load(&stop_now); i++) {
		uint64_t want;

		rc = td_sub_next(sub, 200, &v);
		if (rc == -EPIPE || rc == -ETIMEDOUT) {
			rc = 0; /* the producer closed, or is slow */
			break;
		}
		if (rc < 0)
			break;
		memcpy(&want, v.planes[0], 8);
		if (XXH3_64bits((const uint8_t *)v.planes[0] + 8,
				v.sizes[0] - 8) != want) {
			fprintf(stderr, "td-stress: %s v%" PRIu64
					": digest mismatch\n",
				name, v.version);
			rc = -EILSEQ;
			break;
		}
		atomic_fetch_add(&n_ring_got, 1);
		/* now and then hold it a while: the producer must cope */
		if (rnd(s) % 16 == 0)
			tdc_nap_ms(1);
		td_sub_release(sub);
	}
	td_sub_close(sub);
	return rc;
}

enum role { PRODUCER, CONSUMER, RING_PRODUCER, RING_CONSUMER, FOLLOWER };

struct worker {
	pthread_t th;
	unsigned index;
	enum role role;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	uint64_t s = C.seed * 0x9E3779B97F4A7C15ULL + w->role * 4099ull +
		     w->index + 1;
	struct td_client *c = NULL;
	struct td_error e = {0};
	int rc = td_client_connect(D.sock, &c, &e);

	if (rc < 0) {
		err("connect", rc, &e);
		return NULL;
	}
	atomic_fetch_add(&n_conn, 1);
	static const char *const what[] = {"produce", "consume",
					   "ring produce", "ring consume",
					   "follow"};

	while (!atomic_load(&stop_now)) {
		switch (w->role) {
		case PRODUCER: rc = produce(c, w->index, &s); break;
		case CONSUMER: rc = consume(c, &s); break;
		case RING_PRODUCER: rc = ring_produce(c, w->index, &s); break;
		case FOLLOWER: rc = follow_consume(c, &s); break;
		default: rc = ring_consume(c, &s); break;
		}
		if (rc < 0) {
			err(what[w->role], rc, NULL);
			break;
		}
	}
	fence_settle();
	/* hold the connection until all are up, then close together */
	td_client_close(c);
	return NULL;
}

/* A chaos client: publishes or reads until it is killed. */
static int victim(void)
{
	struct td_client *c = NULL;
	struct td_error e = {0};
	uint64_t s = C.victim_seed | 2;

	if (td_client_connect(C.victim_sock, &c, &e) < 0)
		return 0;
	for (;;) {
		if (C.follows && (s & 24) == 24)
			follow_consume(c, &s);
		else if (C.rings && (s & 6) == 6)
			ring_produce(c, (unsigned)(rnd(&s) % C.rings), &s);
		else if (C.rings && (s & 6) == 4)
			ring_consume(c, &s);
		else if (s & 1)
			produce(c, (unsigned)(rnd(&s) % C.producers), &s);
		else
			consume(c, &s);
	}
}

/*
 * Victims are spawned (vfork + exec), not forked: a fork() child inherits
 * the producer threads' writable MAP_SHARED mappings of their allocs, and
 * while it lives the daemon's F_SEAL_WRITE on those memfds fails with
 * EBUSY (found by this tool: see docs/reliability.md).
 */
static void *chaos(void *arg)
{
	uint64_t s = C.seed ^ 0xC4A05;
	char seed[24], np[16], nn[16], ms[24], nr[16], nf[16];
	char *argv[] = {"td-stress", "--victim", seed, "--socket", D.sock,
			"--producers", np, "--names", nn, "--max-size", ms,
			"--rings", nr, "--follows", nf, NULL};
	extern char **environ;

	(void)arg;
	snprintf(np, sizeof(np), "%u", C.producers);
	snprintf(nn, sizeof(nn), "%u", C.names);
	snprintf(ms, sizeof(ms), "%" PRIu64, C.max_size);
	snprintf(nr, sizeof(nr), "%u", C.rings);
	snprintf(nf, sizeof(nf), "%u", C.follows);
	for (unsigned i = 0; i < C.chaos && !atomic_load(&stop_now); i++) {
		pid_t pid;

		snprintf(seed, sizeof(seed), "%" PRIu64, rnd(&s));
		if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv,
				environ) != 0) {
			err("spawn a chaos client", -EAGAIN, NULL);
			break;
		}
		tdc_nap_ms((long)(rnd(&s) % 50));
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		atomic_fetch_add(&n_kills, 1);
	}
	return NULL;
}

/* How long ls_answers() waits for tensorctl: a hang guard, far above
 * any answer under load (valgrind included). */
#define LS_WAIT_S 60

/* `tensorctl --socket S ls` answers (exit 0); its wall time in *ms. */
static int ls_answers(double *ms)
{
	double t0 = now_s();
	char *argv[] = {(char *)C.tensorctl, "--socket", D.sock, "ls",
			"stress/", NULL};
	posix_spawn_file_actions_t fa;
	extern char **environ;
	pid_t pid;
	int st, rc;

	if (!C.tensorctl)
		return -ENOENT;
	/* spawned, not forked: see chaos() */
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	rc = posix_spawn(&pid, C.tensorctl, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0)
		return -rc;
	/* bounded: a daemon that stopped answering is this check's failure,
	 * not a stress run that never ends */
	while ((rc = (int)waitpid(pid, &st, WNOHANG)) == 0) {
		if (now_s() - t0 > LS_WAIT_S) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -ETIMEDOUT;
		}
		tdc_nap_ms(10);
	}
	if (rc != pid)
		return -errno;
	*ms = (now_s() - t0) * 1e3;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

/*
 * Verify, then delete, every stress/ name: whatever is listed after the
 * chaos must be whole (no half-published tensor of a killed producer).
 * The number deleted or -errno.
 */
static int clean(void)
{
	struct td_client *c = NULL;
	struct td_error e = {0};
	struct td_entry *list;
	struct td_tensor *t;
	size_t count;
	int rc = td_client_connect(D.sock, &c, &e);

	if (rc < 0)
		return rc;
	rc = td_client_list(c, "stress/", &list, &count, &e);
	if (rc == 0) {
		for (size_t i = 0; i < count; i++) {
			int v = td_client_get(c, list[i].name, &t, &e);

			if (v == 0) {
				v = verify(t, list[i].name);
				td_tensor_release(t);
			}
			if (v < 0)
				err("verify after the run", v, &e);
			td_client_delete(c, list[i].name, NULL, &e);
		}
		td_entry_list_free(list, count);
		rc = (int)count;
	}
	td_client_close(c);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: td-stress [--producers N] [--consumers M] "
		"[--names K]\n"
		"                 [--max-size BYTES] [--max-bytes BYTES] "
		"[--handoffs H]\n"
		"                 [--seconds S] [--chaos KILLS] [--seed X]\n"
		"                 [--tensord PATH] [--tensorctl PATH] "
		"[--rss-slack BYTES]\n"
		"                 [--keep-cache] [--rings R] [--follows F]\n"
		"defaults: 64 producers, 448 consumers, 4 names each, 64 MiB, "
		"--max-bytes 2G,\n"
		"20000 handoffs or 60 s. $TD_TENSORD_WRAP wraps the daemon "
		"(valgrind).\n"
		"Fails unless the daemon ends at its baseline fd count and "
		"within --rss-slack\n(default 16M) of its baseline RSS. "
		"Consumers drop their cached mappings\nafter each get "
		"(stale buffers stay alive outside --max-bytes) unless\n"
		"--keep-cache. --rings R: R ring producers and R ring "
		"consumers besides.\n--follows F: F followers besides.\n");
}

/* N[K|M|G] */
static uint64_t size_arg(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 0);

	switch (*end | 0x20) {
	case 'k': return v << 10;
	case 'm': return v << 20;
	case 'g': return v << 30;
	default: return v;
	}
}

static int parse(int argc, char **argv)
{
	static const struct option o[] = {
		{"producers", 1, NULL, 'p'}, {"consumers", 1, NULL, 'c'},
		{"names", 1, NULL, 'n'},     {"max-size", 1, NULL, 's'},
		{"max-bytes", 1, NULL, 'm'}, {"handoffs", 1, NULL, 'H'},
		{"seconds", 1, NULL, 'S'},   {"chaos", 1, NULL, 'k'},
		{"seed", 1, NULL, 'x'},      {"tensord", 1, NULL, 'd'},
		{"tensorctl", 1, NULL, 't'}, {"help", 0, NULL, 'h'},
		{"rss-slack", 1, NULL, 'r'}, {"victim", 1, NULL, 'V'},
		{"socket", 1, NULL, 'o'},    {"keep-cache", 0, NULL, 'K'},
		{"rings", 1, NULL, 'R'},     {"follows", 1, NULL, 'F'},
		{NULL, 0, NULL, 0},
	};
	int ch;

	C.tensord = getenv("TD_TENSORD");
	C.tensorctl = getenv("TD_TENSORCTL");
	while ((ch = getopt_long(argc, argv, "h", o, NULL)) != -1) {
		switch (ch) {
		case 'p': C.producers = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'c': C.consumers = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'n': C.names = (unsigned)strtoul(optarg, NULL, 0); break;
		case 's': C.max_size = size_arg(optarg); break;
		case 'm': C.max_bytes = size_arg(optarg); break;
		case 'H': C.handoffs = strtoull(optarg, NULL, 0); break;
		case 'S': C.seconds = strtod(optarg, NULL); break;
		case 'k': C.chaos = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'x': C.seed = strtoull(optarg, NULL, 0); break;
		case 'd': C.tensord = optarg; break;
		case 't': C.tensorctl = optarg; break;
		case 'r': C.rss_slack_kb = size_arg(optarg) >> 10; break;
		case 'V': C.victim_seed = strtoull(optarg, NULL, 0); break;
		case 'o': C.victim_sock = optarg; break;
		case 'K': C.keep_cache = true; break;
		case 'R': C.rings = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'F': C.follows = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -EINVAL;
		}
	}
	if (!C.producers || !C.consumers || !C.names || !C.max_size ||
	    C.producers + C.consumers + 2 * C.rings + C.follows > 4096 ||
	    C.rings > 256 || C.seconds <= 0) {
		usage(stderr);
		return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	char maxb[32];
	const char *extra[] = {"--max-bytes", maxb, NULL};
	struct tdc_opts o = {.extra = extra, .log_level = "warn"};
	unsigned nw;
	struct worker *w;
	pthread_t chaos_th;
	pthread_attr_t attr;
	double t0, t_end, ls_ms = -1, ls_max = 0;
	unsigned ls_n = 0;
	int rc, fd0, fd1, deleted, status;
	long rss0, rss1, rss_peak = 0;

	if (parse(argc, argv) < 0)
		return 2;
	if (C.victim_sock)
		return victim();
	snprintf(maxb, sizeof(maxb), "%" PRIu64, C.max_bytes);
	signal(SIGPIPE, SIG_IGN);
	rc = tdc_start(&D, C.tensord, &o);
	if (rc < 0) {
		fprintf(stderr, "td-stress: cannot start tensord: %s\n",
			strerror(-rc));
		return 1;
	}
	fd0 = tdc_fd_count(D.pid);
	rss0 = tdc_rss_kb(D.pid);
	nw = C.producers + C.consumers + 2 * C.rings + C.follows;
	w = calloc(nw, sizeof(*w));
	if (!w)
		return 1;
	pthread_attr_init(&attr);
	/* 512 threads on a small machine: stacks of 256 KiB are plenty */
	pthread_attr_setstacksize(&attr, 256u << 10);
	t0 = now_s();
	t_end = t0 + C.seconds;
	for (unsigned i = 0; i < nw; i++) {
		unsigned pc = C.producers + C.consumers;

		w[i].role = i < C.producers ? PRODUCER
			    : i < pc	      ? CONSUMER
			    : i < pc + C.rings ? RING_PRODUCER
			    : i < pc + 2 * C.rings ? RING_CONSUMER
						   : FOLLOWER;
		w[i].index = w[i].role == PRODUCER	 ? i
			     : w[i].role == CONSUMER	 ? i - C.producers
			     : w[i].role == RING_PRODUCER ? i - pc
			     : w[i].role == RING_CONSUMER ? i - pc - C.rings
							  : i - pc - 2 * C.rings;
		if (pthread_create(&w[i].th, &attr, work, &w[i]) != 0) {
			fprintf(stderr, "td-stress: pthread_create failed\n");
			atomic_store(&stop_now, true);
			nw = i;
			break;
		}
	}
	if (C.chaos)
		pthread_create(&chaos_th, &attr, chaos, NULL);
	/* watch: the daemon must keep answering a fresh client meanwhile */
	while (!atomic_load(&stop_now) && now_s() < t_end) {
		long rss = tdc_rss_kb(D.pid);

		if (rss > rss_peak)
			rss_peak = rss;
		if (C.tensorctl) {
			if (ls_answers(&ls_ms) < 0) {
				fprintf(stderr, "td-stress: tensorctl ls "
						"failed during the load\n");
				atomic_fetch_add(&n_err, 1);
			} else {
				ls_n++;
				if (ls_ms > ls_max)
					ls_max = ls_ms;
			}
		}
		tdc_nap_ms(200);
	}
	atomic_store(&stop_now, true);
	for (unsigned i = 0; i < nw; i++)
		pthread_join(w[i].th, NULL);
	if (C.chaos)
		pthread_join(chaos_th, NULL);
	t_end = now_s();
	if (C.rings && final_ring_get() < 0)
		atomic_fetch_add(&n_err, 1);
	deleted = clean();
	fd1 = tdc_fd_settle(D.pid, fd0, 3000);
	rss1 = tdc_rss_kb(D.pid);
	status = tdc_stop(&D, 1);

	printf("td-stress: %u producers + %u consumers = %" PRIuFAST64
	       " connections held, %.1f s\n",
	       C.producers, C.consumers, atomic_load(&n_conn), t_end - t0);
	printf("  published   %" PRIuFAST64 " (%.1f MiB), refused for room "
	       "%" PRIuFAST64 "\n",
	       atomic_load(&n_pub), (double)atomic_load(&n_pub_bytes) / 1048576,
	       atomic_load(&n_full));
	printf("  empty       %" PRIuFAST64 " 0-byte tensors published\n",
	       atomic_load(&n_empty));
	printf("  handoffs    %" PRIuFAST64 " verified (%.1f MiB, xxh3), "
	       "misses %" PRIuFAST64 "\n",
	       atomic_load(&n_got), (double)atomic_load(&n_bytes) / 1048576,
	       atomic_load(&n_miss));
	if (C.rings)
		printf("  rings       %" PRIuFAST64 " created, %" PRIuFAST64
		       " versions published, %" PRIuFAST64
		       " verified by subscribers, %" PRIuFAST64
		       " by GETs, %" PRIuFAST64 " misses\n",
		       atomic_load(&n_rings), atomic_load(&n_ring_pub),
		       atomic_load(&n_ring_got), atomic_load(&n_ring_gets),
		       atomic_load(&n_ring_miss));
	if (C.follows)
		printf("  follows     %" PRIuFAST64 " versions verified by "
		       "followers, %" PRIuFAST64 " names deleted by them\n",
		       atomic_load(&n_follow_got), atomic_load(&n_follow_del));
	printf("  fences      %" PRIuFAST64 " fenced versions published, "
	       "%" PRIuFAST64 " handoffs waited for their fence, %" PRIuFAST64
	       " late (over %d ms)\n",
	       atomic_load(&n_fenced_pub), atomic_load(&n_fenced_got),
	       atomic_load(&n_fence_late), FENCE_WAIT_MS);
	printf("  chaos       %" PRIuFAST64 " clients SIGKILLed\n",
	       atomic_load(&n_kills));
	printf("  tensorctl ls answered %u times during the load (slowest "
	       "%.1f ms)\n",
	       ls_n, ls_max);
	printf("  daemon fds  %d before, %d after (%d names deleted)\n", fd0,
	       fd1, deleted);
	printf("  daemon RSS  %ld KiB before, %ld peak, %ld after\n", rss0,
	       rss_peak, rss1);
	printf("  errors      %" PRIuFAST64 ", daemon exit %d (log %s)\n",
	       atomic_load(&n_err), status, D.log);
	if (!ls_n)
		fprintf(stderr, "td-stress: tensorctl ls never ran ($TD_TENSORCTL "
				"or --tensorctl)\n");
	if (rss1 < 0 || rss1 > rss0 + (long)C.rss_slack_kb)
		fprintf(stderr, "td-stress: daemon RSS %ld KiB after, more "
				"than %" PRIu64 " KiB over its baseline\n",
			rss1, C.rss_slack_kb);
	if (atomic_load(&n_err) || fd1 != fd0 || status != 0 ||
	    atomic_load(&n_got) == 0 || deleted < 0 || !ls_n || rss1 < 0 ||
	    (C.rings && (atomic_load(&n_ring_got) == 0 ||
			 atomic_load(&n_ring_gets) == 0)) ||
	    (C.follows && atomic_load(&n_follow_got) == 0) ||
	    (atomic_load(&n_fenced_pub) > 100 &&
	     atomic_load(&n_fenced_got) == 0) ||
	    rss1 > rss0 + (long)C.rss_slack_kb)
		return 1;
	/* the log is kept only when something went wrong */
	{
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", D.dir);
		if (system(cmd) != 0)
			return 1;
	}
	free(w);
	return 0;
}
