/* SPDX-License-Identifier: MIT */
/*
 * The physical limits, no library: a shared anonymous mapping (made by
 * the parent before fork, so every child has it) holds the 32-bit words
 * and the payload. The producer writes the payload, stores seq in the
 * data word and hands over; a consumer waits for that word, checks the
 * payload in place, and (ping-pong) stores seq in the ack word.
 *
 *   bare-futex: every wait is FUTEX_WAIT and every handoff a FUTEX_WAKE
 *               (the partner is always asleep): one blocking wake-up
 *               per direction, what any sleeping waiter pays.
 *   bare-spin:  both sides spin on the words (with the CPU's pause
 *               hint): one cache line moving between the two CPUs per
 *               direction, what any polling design pays at best; it
 *               keeps both CPUs busy.
 *
 * Every other method reads as a ratio to these in the same run.
 *
 * bare-futex also runs the multi-consumer kinds, as their floor; the
 * harness acks there (bench_method_acks() is false). Every consumer has
 * a data word of its own, on its own line, which the producer stores and
 * wakes in turn: one wake per sleeper, as iceoryx posts one semaphore per
 * subscriber, and as tensord's readers sleep since they were measured
 * waking later from one word shared by all (docs/fastpath.md, "One futex
 * word per sleeper"):
 *
 *   fan-out: one payload; the harness waits for every consumer's ack
 *            before the next step, so nothing is rewritten under a
 *            reader.
 *   paced:   nobody waits for the consumers, and one may fall behind
 *            and take the newest seq (latest value). Two payload slots
 *            alternate by seq parity, and a seqlock keeps a reader from
 *            accepting a torn one: the producer stores seq in the
 *            writing word before it writes slot seq & 1, and in the data
 *            word after. A reader takes the data word d, checks slot
 *            d & 1 and re-reads the writing word: once that reached
 *            d + 2 the slot may have been rewritten under it, and it
 *            reads again. It sleeps in FUTEX_WAIT while nothing newer
 *            than what it asks for is there.
 *
 * bare-spin stays ping-pong only: four spinning consumers and a spinning
 * producer on this machine's two CPUs would measure the scheduler, not a
 * limit.
 */
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define BARE_HDR 4096 /* the words' page; the payload slots follow */

struct bare_line {
	_Atomic uint32_t w;
	char pad[60];
};

struct bare_words {
	/* seq of the last handoff, one word per consumer (ping-pong: [0]) */
	struct bare_line data[BENCH_MAX_CONSUMERS];
	_Atomic uint32_t writing; /* PACED: seq whose slot is being written */
	char pad[60];             /* the ack word on its own line */
	_Atomic uint32_t ack;     /* seq the consumer acknowledged */
};

static int bare_can_run(const struct bench_env *env, size_t size, char *why,
			size_t why_len)
{
	/* the limits are what small handoffs read against; above 64 MiB a
	 * round would spend its time faulting in a fresh shared mapping */
	if (size > (64u << 20)) {
		snprintf(why, why_len, "the bare limits run up to 64 MiB");
		return -EFBIG;
	}
	return 0;
}

/*
 * PACED: two slots (see the top); else one, or two that alternate by
 * seq parity with TD_BENCH_BARE_SLOTS=2: the floor of a design that
 * keeps the last payload readable while the next one is written (the
 * plain API's current version), twice the working set of one reused
 * buffer (bench/README.md, "The plain API's 16 MiB write"). The ack
 * comes before the next write either way, so nothing is rewritten
 * under a reader.
 */
static unsigned bare_slots(const struct bench_run *r)
{
	/* read once (by bare_prepare, before the fork), not per handoff */
	static int two = -1;

	if (two < 0) {
		const char *e = getenv("TD_BENCH_BARE_SLOTS");

		two = e && strcmp(e, "2") == 0;
	}
	return r->kind == BENCH_PACED || two ? 2 : 1;
}

/* The payload slot of seq. */
static char *bare_slot(const struct bench_run *r, uint64_t seq)
{
	return (char *)r->shm + BARE_HDR + (seq % bare_slots(r)) * r->size;
}

static int bare_prepare(struct bench_run *r)
{
	size_t len = BARE_HDR + bare_slots(r) * r->size;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return bench_fail(r, -errno, "mmap %zu: %s", len,
				  strerror(errno));
	r->shm = p;
	r->shm_len = len;
	return 0;
}

static void bare_unprepare(struct bench_run *r)
{
	if (r->shm)
		munmap(r->shm, r->shm_len);
	r->shm = NULL;
}

static int bare_setup(struct bench_run *r)
{
	/* every side's page-table entries, before anything is timed */
	bench_prefault(r->shm, r->shm_len);
	return 0;
}

static void futex_wait(_Atomic uint32_t *w, uint32_t val)
{
	syscall(SYS_futex, w, FUTEX_WAIT, val, NULL, NULL, 0);
}

/* Wake the one sleeper of w: a consumer, or the producer. */
static void futex_wake(_Atomic uint32_t *w)
{
	syscall(SYS_futex, w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Until *w == want: spinning, or asleep on the futex. */
static void bare_wait(_Atomic uint32_t *w, uint32_t want, int spin)
{
	uint32_t v;

	while ((v = atomic_load_explicit(w, memory_order_acquire)) != want) {
		if (spin)
			bench_cpu_relax();
		else
			futex_wait(w, v);
	}
}

static void bare_post(_Atomic uint32_t *w, uint32_t val, int spin)
{
	atomic_store_explicit(w, val, memory_order_release);
	if (!spin)
		futex_wake(w);
}

static int bare_producer(struct bench_run *r, uint64_t seq, int spin)
{
	struct bare_words *w = r->shm;

	if (r->kind == BENCH_PACED) {
		/* a reader of slot seq & 1 (seq - 2) sees this before any
		 * byte of seq there */
		atomic_store_explicit(&w->writing, (uint32_t)seq,
				      memory_order_relaxed);
		atomic_thread_fence(memory_order_release);
	}
	bench_payload_write(bare_slot(r, seq), r->size, seq, r->write);
	for (unsigned i = 0; i < r->consumers; i++)
		bare_post(&w->data[i].w, (uint32_t)seq, spin);
	if (bench_method_acks(r))
		bare_wait(&w->ack, (uint32_t)seq, spin);
	return 0;
}

/*
 * PACED: the newest seq >= want, asleep until there is one; a slot the
 * producer began to rewrite while it was checked is read again.
 */
static int bare_latest(struct bench_run *r, uint64_t want)
{
	struct bare_words *w = r->shm;
	_Atomic uint32_t *mine = &w->data[r->index].w;

	for (;;) {
		uint32_t d = atomic_load_explicit(mine, memory_order_acquire);
		int rc;

		if ((int32_t)(d - (uint32_t)want) < 0) {
			futex_wait(mine, d);
			continue;
		}
		rc = bench_payload_check(bare_slot(r, d), r->size, want,
					 r->write);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&w->writing, memory_order_relaxed) -
		    d >= 2)
			continue;
		/* what the slot holds must be the seq the word named */
		if (rc < 0 || (uint32_t)bench_seen_seq != d)
			return bench_fail(r, -EBADMSG, "payload %" PRIu32
					  " corrupt", d);
		return 0;
	}
}

static int bare_consumer(struct bench_run *r, uint64_t seq, int spin)
{
	struct bare_words *w = r->shm;

	if (r->kind == BENCH_PACED)
		return bare_latest(r, seq);
	bare_wait(&w->data[r->index].w, (uint32_t)seq, spin);
	if (bench_payload_check(bare_slot(r, seq), r->size, seq,
				r->write) < 0)
		return bench_fail(r, -EBADMSG, "payload %" PRIu64 " corrupt",
				  seq);
	if (bench_method_acks(r))
		bare_post(&w->ack, (uint32_t)seq, spin);
	return 0;
}

static int futex_producer(struct bench_run *r, uint64_t seq)
{
	return bare_producer(r, seq, 0);
}

static int futex_consumer(struct bench_run *r, uint64_t seq)
{
	return bare_consumer(r, seq, 0);
}

static int spin_producer(struct bench_run *r, uint64_t seq)
{
	return bare_producer(r, seq, 1);
}

static int spin_consumer(struct bench_run *r, uint64_t seq)
{
	return bare_consumer(r, seq, 1);
}

const struct bench_method bench_bare_futex = {
	.name = "bare-futex",
	.desc = "limit: shared memory, a futex wait and wake per direction, "
		"no library (fan-out, paced: a word per consumer, stored "
		"and woken in turn)",
	.can_run = bare_can_run,
	.prepare = bare_prepare,
	.unprepare = bare_unprepare,
	.setup = bare_setup,
	.producer_step = futex_producer,
	.consumer_step = futex_consumer,
	.kinds = BENCH_STREAMS,
};

/* ping-pong only (see the top) */
const struct bench_method bench_bare_spin = {
	.name = "bare-spin",
	.desc = "limit: shared memory, both sides spin on a word per "
		"direction, no library (burns both CPUs)",
	.can_run = bare_can_run,
	.prepare = bare_prepare,
	.unprepare = bare_unprepare,
	.setup = bare_setup,
	.producer_step = spin_producer,
	.consumer_step = spin_consumer,
};
