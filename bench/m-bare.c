/* SPDX-License-Identifier: MIT */
/*
 * The physical limits, no library: a shared anonymous mapping (made by
 * the parent before fork, so both children have it) holds two 32-bit
 * words and the payload. The producer writes the payload, stores seq in
 * the data word and hands over; the consumer waits for that word,
 * checks the payload in place, and stores seq in the ack word.
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
 */
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define BARE_HDR 4096 /* the words' page; the payload follows */

struct bare_words {
	_Atomic uint32_t data; /* seq of the last handoff */
	char pad[60];          /* the two words on their own lines */
	_Atomic uint32_t ack;  /* seq the consumer acknowledged */
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

static int bare_prepare(struct bench_run *r)
{
	size_t len = BARE_HDR + r->size;
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
	/* both sides' page-table entries, before anything is timed */
	bench_prefault(r->shm, r->shm_len);
	return 0;
}

static void futex_wait(_Atomic uint32_t *w, uint32_t val)
{
	syscall(SYS_futex, w, FUTEX_WAIT, val, NULL, NULL, 0);
}

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

	bench_payload_write((char *)r->shm + BARE_HDR, r->size, seq,
			    r->write);
	bare_post(&w->data, (uint32_t)seq, spin);
	bare_wait(&w->ack, (uint32_t)seq, spin);
	return 0;
}

static int bare_consumer(struct bench_run *r, uint64_t seq, int spin)
{
	struct bare_words *w = r->shm;

	bare_wait(&w->data, (uint32_t)seq, spin);
	if (bench_payload_check((char *)r->shm + BARE_HDR, r->size, seq,
				r->write) < 0)
		return bench_fail(r, -EBADMSG, "payload %" PRIu64 " corrupt",
				  seq);
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
		"no library",
	.can_run = bare_can_run,
	.prepare = bare_prepare,
	.unprepare = bare_unprepare,
	.setup = bare_setup,
	.producer_step = futex_producer,
	.consumer_step = futex_consumer,
};

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
