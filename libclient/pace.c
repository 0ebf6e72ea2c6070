/* SPDX-License-Identifier: MIT */
/* libclient/pace: wait planning for ring waiters (see pace.h). */
#include "pace.h"

static int64_t clamp(int64_t v, int64_t lo, int64_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

void td_pace_init(struct td_pace *p, int64_t base_ns, int64_t cap_ns)
{
	p->base = base_ns > 0 ? base_ns : 0;
	p->cap = cap_ns > p->base ? cap_ns : p->base;
	p->avg = 0;
	p->waiters = 0;
	p->cpus = 0;
}

bool td_pace_crowded(const struct td_pace *p)
{
	return p->cpus && p->waiters >= p->cpus;
}

void td_pace_plan(const struct td_pace *p, int64_t now,
		  struct td_pace_plan *w)
{
	int64_t e = p->avg;

	w->start = now;
	w->last = now;
	w->yield_at = now + TD_PACE_YIELD_NS;
	w->polls = 0;
	if (p->base == 0) {
		/* spinning is off: sleep at once, no prediction either */
		w->spin_until = now;
	} else if (td_pace_crowded(p)) {
		/*
		 * As many waiters as CPUs (four followers of a fan-out on
		 * two): who polls takes the CPU the producer and the
		 * daemon need to make the handoff, yielding or not. The
		 * waits still teach the average (td_pace_done), for when
		 * the crowd thins.
		 */
		w->spin_until = now;
	} else if (e == 0 || e > TD_PACE_PREDICT_MAX) {
		/* no history, or an idle partner: the short bounded poll */
		w->spin_until = now + p->base;
	} else if (e + e / 2 <= p->cap) {
		/* the partner answers within the cap: outwait it spinning
		 * (1.5x the usual wait covers its jitter) */
		w->spin_until = now + clamp(e + e / 2, p->base, p->cap);
	} else {
		/*
		 * Long, regular waits (a paced stream, a big frame being
		 * written): sleep at once, the partner's publish wakes us.
		 * Napping until just before the expected arrival and
		 * polling across it won the wake-up latency, but cost the
		 * arrival's jitter in polling per wait (up to 500 us, ten
		 * times the futex wake it saved on the VM of
		 * bench/README.md): a stream's CPU per message matters as
		 * much as its latency.
		 */
		w->spin_until = now;
	}
}

enum td_pace_step td_pace_step(struct td_pace_plan *w, int64_t now)
{
	w->last = now < w->spin_until ? now : 0;
	if (now < w->spin_until && now >= w->yield_at) {
		w->yield_at = now + TD_PACE_YIELD_NS;
		/* the CPU given away may come back much later: a wait
		 * that ends after this is dated by a fresh read */
		w->last = 0;
		return TD_PACE_YIELD;
	}
	if (now < w->spin_until)
		return TD_PACE_SPIN;
	return TD_PACE_SLEEP;
}

void td_pace_done(struct td_pace *p, const struct td_pace_plan *w,
		  int64_t now)
{
	int64_t d = now - w->start;

	if (p->base == 0 || d < 0)
		return;
	/* 1/4 weight: a few waits to adapt, one outlier moves it little */
	p->avg = p->avg ? p->avg + (d - p->avg) / 4 : (d > 0 ? d : 1);
}

void td_pace_end(struct td_pace *p, const struct td_pace_plan *w,
		 int64_t (*clock)(void))
{
	if (w->start)
		td_pace_done(p, w, w->last ? w->last : clock());
}
