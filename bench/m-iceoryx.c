/* SPDX-License-Identifier: MIT */
/*
 * Baseline: iceoryx 2.0 (Debian's libiceoryx-binding-c), true zero-copy
 * through RouDi-managed shared memory.
 *
 * The bench starts its own RouDi (iox-roudi) with a TOML config written to
 * its temp dir: one mempool per payload size of this invocation (plus a
 * small pool for the acks), so every requested size has chunks. RouDi adds
 * the 40-byte chunk header to each pool's size itself. RouDi is stopped by
 * the bench's exit path (atexit and signal handlers in main.c) and, should
 * the bench be killed outright, by PR_SET_PDEATHSIG.
 *
 * Data: producer loans a chunk of the payload size, writes it, publishes;
 * the consumer takes it, checks it, releases it and publishes an 8-byte ack
 * chunk on a second topic. Two variants share the code: "wait" blocks in
 * iox_ws_wait() on a wait-set (subscriber state HAS_DATA, so no wake-up
 * can be lost), "poll" spins on iox_sub_take_chunk() (reference line: burns
 * both pinned CPUs).
 *
 * Pre-faulting: the producer loans every chunk of its pool in setup,
 * touches each page and releases them; the consumer's own page-table
 * entries for the chunks are filled during the (excluded) warm-up
 * iterations, because iceoryx hands it only chunks that were published.
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

/* The binding's headers are C++-first: `f()` prototypes and a few
 * extensions; keep their warnings out of this file's own. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#pragma GCC diagnostic ignored "-Wpedantic"
#include <iceoryx_binding_c/chunk.h>
#include <iceoryx_binding_c/log.h>
#include <iceoryx_binding_c/publisher.h>
#include <iceoryx_binding_c/runtime.h>
#include <iceoryx_binding_c/subscriber.h>
#include <iceoryx_binding_c/wait_set.h>
#pragma GCC diagnostic pop

#define ACK_POOL_SIZE 16u
#define ACK_POOL_COUNT 64u
#define SETUP_TIMEOUT_NS (30ull * 1000000000ull)

/* RouDi is shared by both variants: refcounted start/stop. */
static int roudi_pid = -1;
static int roudi_refs;
static int roudi_rc;
static char roudi_why[BENCH_WHY_MAX];

/* Chunks per pool: enough for a ping-pong in flight plus slack, bounded
 * so the segment stays near 1.5 GiB with the default sizes. */
static unsigned pool_count(size_t size)
{
	if (size <= (1u << 20))
		return 16;
	if (size <= (64u << 20))
		return 4;
	return 1;
}

static int cmp_size(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;

	return x < y ? -1 : x > y;
}

static int write_config(const struct bench_env *env, const char *path,
			char *why, size_t why_len)
{
	size_t n = 0, *s = calloc(env->size_count + 1, sizeof(*s));
	FILE *f;

	if (!s)
		return -ENOMEM;
	s[n++] = ACK_POOL_SIZE;
	for (size_t i = 0; i < env->size_count; i++)
		if (env->sizes[i] <= UINT32_MAX - 4096u)
			s[n++] = env->sizes[i];
	qsort(s, n, sizeof(*s), cmp_size);
	f = fopen(path, "we");
	if (!f) {
		int e = errno;

		free(s);
		snprintf(why, why_len, "cannot write %.150s: %s", path,
			 strerror(e));
		return -e;
	}
	fprintf(f, "# written by tensord-bench\n[general]\nversion = 1\n\n"
		   "[[segment]]\n");
	for (size_t i = 0; i < n; i++) {
		if (i && s[i] == s[i - 1])
			continue;
		fprintf(f, "\n[[segment.mempool]]\nsize = %zu\ncount = %u\n",
			s[i], s[i] == ACK_POOL_SIZE ? ACK_POOL_COUNT :
			pool_count(s[i]));
	}
	free(s);
	if (fclose(f) != 0) {
		snprintf(why, why_len, "cannot write %.150s", path);
		return -EIO;
	}
	return 0;
}

/*
 * RouDi's names are fixed (/tmp/iox-unique-roudi.lock, the /tmp/roudi
 * socket, /dev/shm/iceoryx_mgmt, ...): one RouDi per mount namespace. When
 * it may (root), the bench gives its RouDi a private one: /tmp bound to a
 * folder of the bench's temp dir and a fresh tmpfs on /dev/shm; the iceoryx
 * children join it with setns() before iox_runtime_init(). Another RouDi
 * (a second bench, a test suite running in parallel) then neither blocks
 * ours nor sees it. Without the privilege RouDi runs in the shared
 * namespace and a running RouDi makes the iceoryx runs fail, saying so.
 */
static int roudi_private;

static int enter_private_ns(void *arg)
{
	const char *tmp = arg;

	if (unshare(CLONE_NEWNS) < 0)
		return -errno;
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tdbench-shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
		  "mode=1777") < 0 ||
	    mount(tmp, "/tmp", NULL, MS_BIND, NULL) < 0)
		return -errno;
	return 0;
}

static int join_roudi_ns(struct bench_run *r)
{
	char path[64];
	int fd, rc = 0;

	if (!roudi_private)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/ns/mnt", roudi_pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNS) < 0)
		rc = bench_fail(r, -errno, "joining RouDi's namespace: %s",
				strerror(errno));
	if (fd >= 0)
		close(fd);
	return rc;
}

static int iox_start(const struct bench_env *env, char *why, size_t why_len)
{
	char dir[400], cfg[512], logp[512];
	int rc;

	if (roudi_refs++ > 0) {
		snprintf(why, why_len, "%s", roudi_why);
		return roudi_rc;
	}
	snprintf(dir, sizeof(dir), "%.300s/iox-tmp", env->tmpdir);
	snprintf(cfg, sizeof(cfg), "%s/roudi.toml", dir);
	snprintf(logp, sizeof(logp), "%.300s/roudi.log", env->tmpdir);
	if (access(env->roudi_path, X_OK) != 0) {
		snprintf(roudi_why, sizeof(roudi_why),
			 "%s not found (Debian package iceoryx)",
			 env->roudi_path);
		rc = -ENOENT;
		goto out;
	}
	if (mkdir(dir, 0700) < 0) {
		rc = -errno;
		snprintf(roudi_why, sizeof(roudi_why), "mkdir %.200s: %s", dir,
			 strerror(errno));
		goto out;
	}
	rc = write_config(env, cfg, roudi_why, sizeof(roudi_why));
	if (rc < 0)
		goto out;
	/*
	 * -m off: no process monitoring. The harness supervises its own
	 * children; RouDi's monitor, on a loaded 2-CPU machine, declared
	 * starved apps (keep-alive thread behind a busy-polling main thread)
	 * dead and dropped their ports mid-run, which loses samples.
	 */
	{
		/* inside the private namespace dir is /tmp */
		const char *argv[] = { env->roudi_path, "-c", "/tmp/roudi.toml",
				       "-l", "info", "-m", "off", NULL };

		rc = bench_spawn(argv, logp, enter_private_ns, dir);
		roudi_private = rc > 0;
	}
	if (rc < 0) {
		const char *argv[] = { env->roudi_path, "-c", cfg, "-l", "info",
				       "-m", "off", NULL };

		if (env->verbose)
			fprintf(stderr, "bench: no private namespace for "
				"RouDi (%s); using the shared one\n",
				strerror(-rc));
		rc = bench_spawn(argv, logp, NULL, NULL);
	}
	if (rc < 0) {
		snprintf(roudi_why, sizeof(roudi_why), "cannot start %s: %s",
			 env->roudi_path, strerror(-rc));
		goto out;
	}
	roudi_pid = rc;
	/* Reserving (and RouDi's touching) the segment takes seconds per
	 * GiB; give it a minute. */
	rc = bench_wait_log(roudi_pid, logp, "RouDi is ready for clients",
			    60000);
	if (rc < 0) {
		char tail[200];

		bench_log_tail(logp, tail, sizeof(tail));
		snprintf(roudi_why, sizeof(roudi_why),
			 "iox-roudi %s: %s",
			 rc == -ECHILD ? "exited" : "not ready after 60 s",
			 tail[0] ? tail : "(no output)");
		bench_reap(roudi_pid, 3000);
		roudi_pid = -1;
		goto out;
	}
	if (env->verbose)
		fprintf(stderr, "bench: iox-roudi pid %d ready (%s, %s mount "
			"namespace)\n", roudi_pid, cfg,
			roudi_private ? "private" : "shared");
	rc = 0;
out:
	roudi_rc = rc;
	if (rc < 0)
		snprintf(why, why_len, "%s", roudi_why);
	return rc;
}

static void iox_stop(void)
{
	if (roudi_pid > 0)
		bench_reap(roudi_pid, 5000);
	roudi_pid = -1;
}

static int iox_can_run(const struct bench_env *env, size_t size, char *why,
		       size_t why_len)
{
	/* iox_pub_loan_chunk() takes a uint32_t payload size and mempool
	 * chunk sizes are 32-bit: nothing of 4 GiB or more fits. */
	if (size > UINT32_MAX - 4096u) {
		snprintf(why, why_len, "iceoryx 2.0 chunk sizes are 32-bit "
			 "(uint32_t userPayloadSize)");
		return -EFBIG;
	}
	return 0;
}

static int iox_service_pid(void)
{
	return roudi_pid;
}

struct iox_priv {
	int poll;
	iox_pub_storage_t pub_st;
	iox_sub_storage_t sub_st;
	iox_ws_storage_t ws_st;
	iox_pub_t pub; /* producer: data; consumer: ack */
	iox_sub_t sub; /* producer: ack; consumer: data */
	iox_ws_t ws;
};

static int iox_setup(struct bench_run *r, int poll)
{
	struct iox_priv *x = calloc(1, sizeof(*x));
	int prod = r->role == BENCH_PRODUCER;
	char app[64], inst[32];
	iox_pub_options_t po;
	iox_sub_options_t so;
	uint64_t end;

	if (!x)
		return bench_fail(r, -ENOMEM, "out of memory");
	r->priv = x;
	x->poll = poll;
	snprintf(app, sizeof(app), "tdbench-%c-%d", prod ? 'p' : 'c',
		 (int)getpid());
	snprintf(inst, sizeof(inst), "run%u", r->run_id);
	if (join_roudi_ns(r) < 0)
		return -EPERM;
	/* the runtime logs every registration at debug level otherwise */
	iox_set_loglevel(r->env->verbose ? Iceoryx_LogLevel_Info :
			 Iceoryx_LogLevel_Warn);
	iox_runtime_init(app);

	iox_pub_options_init(&po);
	po.historyCapacity = 0;
	iox_sub_options_init(&so);
	so.queueCapacity = 4;
	so.historyRequest = 0;
	/* FANOUT, PACED: data only (the harness acks), to every consumer */
	if (prod || bench_method_acks(r))
		x->pub = iox_pub_init(&x->pub_st, "tdbench",
				      prod ? "data" : "ack", inst, &po);
	if (!prod || bench_method_acks(r))
		x->sub = iox_sub_init(&x->sub_st, "tdbench",
				      prod ? "ack" : "data", inst, &so);
	if ((!x->pub && (prod || bench_method_acks(r))) ||
	    (!x->sub && (!prod || bench_method_acks(r))))
		return bench_fail(r, -EIO, "iceoryx publisher/subscriber");
	if (!poll && x->sub) {
		x->ws = iox_ws_init(&x->ws_st);
		if (!x->ws ||
		    iox_ws_attach_subscriber_state(x->ws, x->sub,
			    SubscriberState_HAS_DATA, 0, NULL) !=
		    WaitSetResult_SUCCESS)
			return bench_fail(r, -EIO, "iceoryx wait-set attach");
	}

	if (prod) {
		/* Loan every chunk of the pool, touch each page, give them
		 * back: no first-touch fault on the producer side is timed. */
		void *held[16];
		unsigned n = 0, want = pool_count(r->size);

		while (n < want && n < 16) {
			void *p;

			if (iox_pub_loan_chunk(x->pub, &p,
					       (uint32_t)r->size) !=
			    AllocationResult_SUCCESS)
				break;
			bench_prefault(p, r->size);
			held[n++] = p;
		}
		if (n == 0)
			return bench_fail(r, -ENOMEM,
					  "iceoryx: no chunk of %zu bytes "
					  "(RouDi mempools)", r->size);
		while (n)
			iox_pub_release_chunk(x->pub, held[--n]);
	}

	/* Both directions connected before anything is published (with
	 * historyCapacity 0 an early sample would be lost). */
	end = bench_now_ns() + SETUP_TIMEOUT_NS;
	while ((x->pub && !iox_pub_has_subscribers(x->pub)) ||
	       (x->sub && iox_sub_get_subscription_state(x->sub) !=
				  SubscribeState_SUBSCRIBED)) {
		if (bench_now_ns() > end)
			return bench_fail(r, -ETIMEDOUT,
					  "iceoryx: peer not connected "
					  "after 30 s");
		usleep(1000);
	}
	return 0;
}

static int iox_setup_wait(struct bench_run *r)
{
	return iox_setup(r, 0);
}

static int iox_setup_poll(struct bench_run *r)
{
	return iox_setup(r, 1);
}

/* Next chunk on x->sub: blocking on the wait-set or spinning. */
static int take(struct bench_run *r, struct iox_priv *x, const void **out)
{
	for (;;) {
		enum iox_ChunkReceiveResult res = iox_sub_take_chunk(x->sub,
								     out);

		if (res == ChunkReceiveResult_SUCCESS)
			return 0;
		if (res != ChunkReceiveResult_NO_CHUNK_AVAILABLE)
			return bench_fail(r, -EIO, "iox_sub_take_chunk: %d",
					  (int)res);
		if (!x->poll) {
			iox_notification_info_t info[2];
			uint64_t missed = 0;

			iox_ws_wait(x->ws, info, 2, &missed);
		} else {
			/* spin politely: an SMT sibling (or the other vCPU
			 * of a shared core) keeps its execution slots */
			bench_cpu_relax();
		}
	}
}

static int iox_producer_step(struct bench_run *r, uint64_t seq)
{
	struct iox_priv *x = r->priv;
	const void *ack;
	uint64_t got;
	void *p;
	enum iox_AllocationResult res;
	int rc;

	res = iox_pub_loan_chunk(x->pub, &p, (uint32_t)r->size);
	if (res != AllocationResult_SUCCESS)
		return bench_fail(r, -ENOMEM, "iox_pub_loan_chunk(%zu): %d",
				  r->size, (int)res);
	bench_payload_write(p, r->size, seq, r->write);
	iox_pub_publish_chunk(x->pub, p);
	if (!bench_method_acks(r))
		return 0;
	rc = take(r, x, &ack);
	if (rc < 0)
		return rc;
	memcpy(&got, ack, sizeof(got));
	iox_sub_release_chunk(x->sub, ack);
	if (got != seq)
		return bench_fail(r, -EBADMSG, "ack %" PRIu64 " for %" PRIu64,
				  got, seq);
	return 0;
}

static int iox_consumer_step(struct bench_run *r, uint64_t seq)
{
	struct iox_priv *x = r->priv;
	const void *p;
	void *ack;
	int rc = take(r, x, &p);

	if (rc < 0)
		return rc;
	rc = bench_payload_check(p, r->size, seq, r->write);
	iox_sub_release_chunk(x->sub, p);
	if (rc < 0)
		return bench_fail(r, rc, "payload %" PRIu64 " corrupt", seq);
	if (!bench_method_acks(r))
		return 0;
	if (iox_pub_loan_chunk(x->pub, &ack, sizeof(seq)) !=
	    AllocationResult_SUCCESS)
		return bench_fail(r, -ENOMEM, "iceoryx: no ack chunk");
	memcpy(ack, &seq, sizeof(seq));
	iox_pub_publish_chunk(x->pub, ack);
	return 0;
}

static void iox_teardown(struct bench_run *r)
{
	struct iox_priv *x = r->priv;

	if (!x)
		return;
	if (x->ws) {
		if (x->sub)
			iox_ws_detach_subscriber_state(x->ws, x->sub,
				SubscriberState_HAS_DATA);
		iox_ws_deinit(x->ws);
	}
	if (x->sub)
		iox_sub_deinit(x->sub);
	if (x->pub)
		iox_pub_deinit(x->pub);
	/*
	 * No iox_runtime_shutdown() here: the runtime's destructor at exit()
	 * deregisters anyway, and after an explicit shutdown RouDi sometimes
	 * had already removed the app when the destructor asked to prepare
	 * termination; it never answered an unknown app and exit() hung.
	 */
	free(x);
	r->priv = NULL;
}

const struct bench_method bench_iceoryx_wait = {
	.name = "iceoryx-wait",
	.desc = "iceoryx 2.0 C binding, RouDi started by the bench; loan/"
		"publish/take/release, blocking iox_ws_wait() wait-sets; "
		"ack: 8-byte chunk on a second topic",
	.start = iox_start,
	.stop = iox_stop,
	.can_run = iox_can_run,
	.setup = iox_setup_wait,
	.producer_step = iox_producer_step,
	.consumer_step = iox_consumer_step,
	.teardown = iox_teardown,
	.service_pid = iox_service_pid,
	.kinds = BENCH_STREAMS,
};

const struct bench_method bench_iceoryx_poll = {
	.name = "iceoryx-poll",
	.desc = "as iceoryx-wait but both sides busy-poll "
		"iox_sub_take_chunk() (reference line; burns both CPUs)",
	.start = iox_start,
	.stop = iox_stop,
	.can_run = iox_can_run,
	.setup = iox_setup_poll,
	.producer_step = iox_producer_step,
	.consumer_step = iox_consumer_step,
	.teardown = iox_teardown,
	.service_pid = iox_service_pid,
};
