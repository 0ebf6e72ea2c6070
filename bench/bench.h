/* SPDX-License-Identifier: MIT */
/*
 * tensord-bench: ping-pong handoff benchmark (issue 5).
 *
 * One *run* is (method, payload size, mode). The harness forks two
 * processes, a producer and a consumer, pins them to different CPUs, and
 * drives a method through a table of function pointers:
 *
 *   parent:   prepare()                      (fds both children inherit)
 *   children: setup() -> barrier -> N x step -> barrier -> teardown()
 *   parent:   unprepare()
 *
 * producer_step(seq) obtains a buffer, writes the payload (or only the
 * stamps, see payload.c), hands it over and returns once the consumer has
 * acknowledged seq. consumer_step(seq) waits for the handoff, verifies
 * the bytes, releases the buffer and acknowledges. The producer times each
 * whole step with CLOCK_MONOTONIC: that is the round trip.
 *
 * A method that cannot run at all (not built, daemon missing) or at one
 * size (no iceoryx mempool) says why; the run is reported "n/a" with that
 * reason rather than silently dropped.
 */
#ifndef TD_BENCH_H
#define TD_BENCH_H

#include <stddef.h>
#include <stdint.h>

#define BENCH_WHY_MAX 256

enum bench_role {
	BENCH_PRODUCER = 0,
	BENCH_CONSUMER = 1,
};

/* What the whole invocation knows; built once by main(). */
struct bench_env {
	char tmpdir[256];       /* private temp dir, removed at exit */
	const char *roudi_path; /* iox-roudi binary */
	const char *tensord_path; /* tensord daemon binary */
	const size_t *sizes;    /* every size this invocation will run */
	size_t size_count;
	int verbose;
};

/*
 * What a run measures (main.c):
 *   PINGPONG: one consumer; the method acks, the producer times each
 *             round trip (the original bench).
 *   FANOUT:   `consumers` consumers; the method only hands over, the
 *             harness acks (a shared counter, futex), the producer times
 *             publish to the last consumer's ack.
 *   PACED:    `consumers` consumers; the producer publishes at a fixed
 *             rate with a CLOCK_MONOTONIC stamp in the payload, nobody
 *             acks, each consumer times stamp to wake (one-way latency).
 */
enum bench_kind {
	BENCH_PINGPONG = 0,
	BENCH_FANOUT = 1,
	BENCH_PACED = 2,
};

#define BENCH_MAX_CONSUMERS 4

/* One run, as the children (and prepare/unprepare in the parent) see it. */
struct bench_run {
	const struct bench_env *env;
	size_t size;        /* payload bytes: a multiple of 8, >= 16 */
	int write;          /* 1: producer writes every byte, consumer checks all */
	enum bench_role role;
	enum bench_kind kind;
	unsigned consumers; /* consumers of this run (1 for PINGPONG) */
	unsigned index;     /* a consumer's index, 0..consumers-1 */
	unsigned run_id;    /* unique within this invocation */
	int fds[2];         /* method's pre-fork pair; -1 when unused */
	void *shm;          /* method's pre-fork shared mapping, or NULL */
	size_t shm_len;
	void *priv;         /* method state inside one child */
	char why[BENCH_WHY_MAX]; /* reason of the last failure */
};

/* The method acks itself only in PINGPONG runs (FANOUT: the harness). */
static inline int bench_method_acks(const struct bench_run *r)
{
	return r->kind == BENCH_PINGPONG;
}

struct bench_method {
	const char *name; /* short, used on the command line and in JSON */
	const char *desc; /* one line: what is measured, how the ack travels */
	/*
	 * Parent, once before the first run (start the broker/daemon).
	 * Returns 0, or -errno with a reason: every run is then "n/a".
	 * NULL: nothing to start.
	 */
	int (*start)(const struct bench_env *env, char *why, size_t why_len);
	/* Parent, at exit (also on signals): stop what start() started. */
	void (*stop)(void);
	/* Parent: 0 when size can run, else -errno and a reason ("n/a"). */
	int (*can_run)(const struct bench_env *env, size_t size, char *why,
		       size_t why_len);
	/* Parent, before fork: create what both children inherit. */
	int (*prepare)(struct bench_run *r);
	/* Parent, after both children exited: close what prepare() made. */
	void (*unprepare)(struct bench_run *r);
	/* Child: set up (buffers pre-faulted); for r->role. */
	int (*setup)(struct bench_run *r);
	int (*producer_step)(struct bench_run *r, uint64_t seq);
	int (*consumer_step)(struct bench_run *r, uint64_t seq);
	/* Child: tear down what setup() made; also after a failed setup. */
	void (*teardown)(struct bench_run *r);
	/*
	 * Parent: the pid of the helper process this method's handoffs go
	 * through (tensord, RouDi), whose CPU time counts with the run's;
	 * -1 (or NULL) when there is none.
	 */
	int (*service_pid)(void);
	/*
	 * The kinds it runs besides PINGPONG (which every method runs), as
	 * BENCH_KIND() bits: FANOUT and PACED have several consumers and no
	 * ack of the method's own. 0: ping-pong only.
	 */
	unsigned kinds;
};

/* A kind's bit in bench_method.kinds. */
#define BENCH_KIND(k) (1u << (k))
/* Both multi-consumer kinds. */
#define BENCH_STREAMS (BENCH_KIND(BENCH_FANOUT) | BENCH_KIND(BENCH_PACED))

static inline int bench_method_runs(const struct bench_method *m,
				    enum bench_kind kind)
{
	return kind == BENCH_PINGPONG || (m->kinds & BENCH_KIND(kind)) != 0;
}

extern const struct bench_method bench_socket_copy;
extern const struct bench_method bench_fd_pass;
extern const struct bench_method bench_iceoryx_wait;
extern const struct bench_method bench_iceoryx_poll;
extern const struct bench_method bench_tensord;
extern const struct bench_method bench_tensord_ring; /* m-ring.c */
extern const struct bench_method bench_tensord_scm;  /* m-tensord.c */
extern const struct bench_method bench_tensord_follow;     /* m-tensord.c */
extern const struct bench_method bench_tensord_follow_scm; /* m-tensord.c */
extern const struct bench_method bench_tensord_get; /* m-tensord.c */
extern const struct bench_method bench_tensord_nowait; /* m-tensord.c */
extern const struct bench_method bench_tensord_names; /* m-tensord.c */
extern const struct bench_method bench_tensord_ring_sleep; /* m-ring.c */
extern const struct bench_method bench_tensord_ring_lockstep; /* m-ring.c */
extern const struct bench_method bench_tensord_stage_bound; /* m-ring.c */
extern const struct bench_method bench_bare_futex;   /* m-bare.c */
extern const struct bench_method bench_bare_spin;

/* ---- helpers shared by the methods (common.c) ---- */

/* The spin-wait hint of the CPU (PAUSE, YIELD); nothing elsewhere. */
static inline void bench_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

/* Record a reason in r->why (printf style); returns rc for chaining. */
int bench_fail(struct bench_run *r, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

uint64_t bench_now_ns(void);
/* ns process pid has run on a CPU (/proc/PID/schedstat), 0 if unknown */
uint64_t bench_cpu_ns(int pid);
/* qsort order of uint64_t; the q-quantile of n sorted samples by nearest
 * rank (0 when n is 0); the median of n doubles (sorts v) */
int bench_cmp_u64(const void *a, const void *b);
uint64_t bench_pct(const uint64_t *s, size_t n, double q);
double bench_median_d(double *v, unsigned n);

/*
 * Payload contract (all methods): the first 8 bytes hold seq, the last 8
 * hold ~seq. With write=1 every byte in between is pattern(seq); with
 * write=0 only the two stamps are written (the rest is whatever the buffer
 * held) and only the stamps are checked.
 */
void bench_payload_write(void *buf, size_t size, uint64_t seq, int write);
/* 0 when buf carries seq as written above, -EBADMSG otherwise. */
int bench_payload_check(const void *buf, size_t size, uint64_t seq,
			int write);
/*
 * PACED runs (main.c sets bench_paced in the children; nowrite only):
 * bench_payload_write also stores its CLOCK_MONOTONIC time at offset 8,
 * last, just before the handoff; bench_payload_check accepts any seq >=
 * the one asked (a consumer of a "latest" channel may skip), and records
 * the seq it found and now - that stamp, read first thing on wake.
 */
extern int bench_paced;
extern uint64_t bench_seen_seq, bench_seen_lat_ns;
/* Touch every page for writing so no first-touch fault is timed. */
void bench_prefault(void *buf, size_t size);

/* Full-length blocking I/O on a stream socket; 0 or -errno (-EPIPE: EOF). */
int bench_write_all(int fd, const void *buf, size_t len);
int bench_read_all(int fd, void *buf, size_t len);
/* An 8-byte acknowledgement carrying seq; recv checks it matches. */
int bench_ack_send(int fd, uint64_t seq);
int bench_ack_recv(int fd, uint64_t seq);

/* Anonymous private mapping of size bytes, pre-faulted; NULL on failure. */
void *bench_map_anon(size_t size);

/*
 * Start a helper program (daemon, broker) with stdout+stderr to log_path;
 * it gets SIGTERM if the bench dies. pre_exec (may be NULL) runs in the
 * child just before exec and returns 0 or -errno. Returns the pid once the
 * exec succeeded, or -errno of the hook or the exec (the child reaped).
 */
int bench_spawn(const char *const argv[], const char *log_path,
		int (*pre_exec)(void *arg), void *arg);
/* SIGTERM, wait up to grace_ms, then SIGKILL; reaps. Accepts pid <= 0. */
void bench_reap(int pid, int grace_ms);
/* Wait until log_path contains needle or the pid exits or timeout_ms
 * passes. 0 found, -ECHILD exited, -ETIMEDOUT. */
int bench_wait_log(int pid, const char *log_path, const char *needle,
		   int timeout_ms);
/* The line of a log file that names the error (Fatal/Error), else its
 * last line, into buf (for reasons); "" when none. */
void bench_log_tail(const char *log_path, char *buf, size_t len);
/*
 * Start a private tensord in env->tmpdir (socket and log named after tag)
 * and wait until it accepts. 0 with *pid and sock filled, or -errno with
 * a reason in why (the daemon, if it started, is reaped).
 */
int bench_tensord_start(const struct bench_env *env, const char *tag,
			char *sock, size_t sock_len, int *pid, char *why,
			size_t why_len);

#endif
