/* SPDX-License-Identifier: MIT */
/*
 * libclient/pace: how a ring waiter waits (docs/fastpath.md, "Waiting").
 * Pure arithmetic on nanosecond timestamps, no syscalls: the ring code
 * asks for a plan when a wait starts and reports how long it took when it
 * ends; tests drive it with made-up clocks.
 *
 * A wait has up to two phases:
 *   spin   poll the control block (the partner answers within it);
 *   sleep  futex sleep until woken (the partner is late, idle, or its
 *          waits are long: there polling would cost more CPU than the
 *          wake-up it saves).
 * The expected wait is a moving average of the recent waits of this ring
 * or subscription. Spinning never exceeds `cap`, so the CPU a waiter
 * burns is bounded per wait.
 */
#ifndef TD_LIBCLIENT_PACE_H
#define TD_LIBCLIENT_PACE_H

#include <stdbool.h>
#include <stdint.h>

struct td_pace {
	int64_t base; /* ns: spin this long with no history; 0 = never */
	int64_t cap;  /* ns: longest spin-only window */
	int64_t avg;  /* ns: moving average of recent waits; 0 = none yet */
	/*
	 * Waiters of the same handoff, the caller's count before a wait (a
	 * bell's followers), 0 unknown; and the machine's CPUs, 0 unknown.
	 * As many waiters as CPUs sleep at once: a poll could then only
	 * take a CPU from the producer (and the daemon) they wait for.
	 */
	uint32_t waiters;
	uint32_t cpus;
};

/*
 * A spinning waiter gives its CPU away (sched_yield) after this long and
 * then this often: a partner answering within microseconds never sees it,
 * and waiters that outnumber the CPUs (four consumers of a fan-out on two)
 * let the ones they wait for run instead of spinning them off the CPU.
 */
#define TD_PACE_YIELD_NS 5000ll /* 5 us */

/* Waits expected longer than this are not predicted (idle partner). */
#define TD_PACE_PREDICT_MAX 100000000ll /* 100 ms */

struct td_pace_plan {
	int64_t start;      /* when the wait began */
	int64_t spin_until; /* spin while now < this, then sleep */
	int64_t yield_at;   /* next sched_yield while spinning */
	uint32_t polls;     /* polls since the clock was last read */
	/* the last clock read the plan was given (td_pace_plan,
	 * td_pace_step), 0 once a step said sleep or yield */
	int64_t last;
};

/*
 * A spinning waiter reads the clock once every this many polls: a poll is
 * a few loads and a pause, the clock read as long as several of them, and
 * the partner's store is seen that much later. Overshoots a plan's
 * deadlines by a few polls at most (well under a microsecond).
 */
#define TD_PACE_POLLS_PER_CLOCK 8u

enum td_pace_step { TD_PACE_SPIN, TD_PACE_YIELD, TD_PACE_SLEEP };

void td_pace_init(struct td_pace *p, int64_t base_ns, int64_t cap_ns);
/* Whether p's waiters are as many as the CPUs (see struct td_pace). */
bool td_pace_crowded(const struct td_pace *p);
/* The plan for a wait that starts now (nothing was there). */
void td_pace_plan(const struct td_pace *p, int64_t now,
		  struct td_pace_plan *w);
/* What to do at `now` (still nothing there): spin once (a pause), spin
 * giving the CPU away once (sched_yield), or sleep. */
enum td_pace_step td_pace_step(struct td_pace_plan *w, int64_t now);
/* The wait ended at `now` with something to take: learn from it. */
void td_pace_done(struct td_pace *p, const struct td_pace_plan *w,
		  int64_t now);
/*
 * The wait ended with something to take: td_pace_done at its last clock
 * read if it ended polling (at most TD_PACE_POLLS_PER_CLOCK polls early,
 * well under a microsecond, so no clock read stands between the
 * partner's store and the caller), at clock() if it slept or gave its
 * CPU away since that read (either may last far longer). Nothing for a
 * plan never started (start 0: found at the first look).
 */
void td_pace_end(struct td_pace *p, const struct td_pace_plan *w,
		 int64_t (*clock)(void));

#endif
