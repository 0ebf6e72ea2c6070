/* SPDX-License-Identifier: MIT */
/*
 * libtensord waiting, shared by rings (ring.c, ring-loop.c) and follows
 * (follow.c): deadlines, futex sleeps on shared words, how long a waiter
 * polls before it sleeps (pace.h plans it), and whether the connection a
 * subscription or a follow was made on is gone (docs/fastpath.md,
 * "Waiting").
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "client.h"
#include "os.h"
#include "pace.h"
#include "ring-int.h"

/* How long a waiter polls the control block before it sleeps (spin_ns()). */
#define DEFAULT_SPIN_US 20
/* Longest spin-only window once waits are known to be short (pace.h). */
#define DEFAULT_SPIN_MAX_US 200

int64_t td__deadline_of(int timeout_ms)
{
	return timeout_ms < 0 ? -1 : td__now_ns() + (int64_t)timeout_ms * 1000000;
}

int td__ms_left(int64_t deadline)
{
	int64_t ms;

	if (deadline < 0)
		return -1;
	ms = (deadline - td__now_ns()) / 1000000;
	return ms > 0 ? (int)ms : 0;
}

/*
 * Sleep while *w == val, until deadline (-1: none). Shared futex (no
 * PRIVATE flag): the word lives in a memfd mapped by other processes.
 * 0 woken (or the word had changed), -ETIMEDOUT.
 */
int td__futex_wait_until(_Atomic uint32_t *w, uint32_t val,
			  int64_t deadline)
{
	struct timespec ts, *tp = NULL;

	if (deadline >= 0) {
		int64_t left = deadline - td__now_ns();

		if (left <= 0)
			return -ETIMEDOUT;
		ts.tv_sec = left / 1000000000;
		ts.tv_nsec = left % 1000000000;
		tp = &ts;
	}
	return td__futex_wait((const uint32_t *)w, val, tp);
}

uint64_t td__env_u64(const char *name, uint64_t dflt, uint64_t max)
{
	const char *e = getenv(name);
	char *end;
	unsigned long long v;

	if (!e || !*e)
		return dflt;
	v = strtoull(e, &end, 10);
	return *end || v > max ? dflt : (uint64_t)v;
}

/* A microsecond count (at most a second) from the environment, in ns. */
static int64_t env_us(const char *name, int64_t dflt)
{
	return (int64_t)td__env_u64(name, (uint64_t)dflt, 1000000) * 1000;
}

/*
 * How a waiter waits (pace.h). A partner on another CPU often answers
 * within microseconds, while a futex sleep plus wake-up costs tens of
 * microseconds (more in VMs): a short bounded poll saves that (the
 * adaptive-mutex trade). $TENSORD_RING_SPIN_US sets the poll with no
 * history (0: always sleep at once, nothing adaptive);
 * $TENSORD_RING_SPIN_MAX_US the longest poll once waits are known short.
 */
void td__pace_init_env(struct td_pace *p)
{
	td_pace_init(p, env_us("TENSORD_RING_SPIN_US", DEFAULT_SPIN_US),
		     env_us("TENSORD_RING_SPIN_MAX_US", DEFAULT_SPIN_MAX_US));
	p->cpus = td__cpus();
}

/*
 * One step of a wait that found nothing: spin (true, after a pause), or
 * false with *until set to when to stop sleeping: the caller's deadline
 * (-1: none). The plan starts on the first call.
 */
bool td__pace_wait(const struct td_pace *p, struct td_pace_plan *w,
		   int64_t deadline, int64_t *until)
{
	int64_t now;

	if (w->start && ++w->polls < TD_PACE_POLLS_PER_CLOCK) {
		/* spinning (a plan that sleeps returns before this) */
		td__cpu_relax();
		return true;
	}
	w->polls = 0;
	now = td__now_ns();
	if (!w->start)
		td_pace_plan(p, now, w);
	switch (td_pace_step(w, now)) {
	case TD_PACE_SPIN:
		td__cpu_relax();
		return true;
	case TD_PACE_YIELD:
		sched_yield();
		return true;
	default:
		*until = deadline;
		return false;
	}
}

/* The caller's deadline (-1: none) has passed. */
bool td__past(int64_t deadline)
{
	return deadline >= 0 && td__now_ns() >= deadline;
}

/*
 * The connection made at `epoch` is gone (or going): closed, dead, a new
 * one made since, or the daemon hung up (POLLHUP, which the client sees
 * before it reads the end). Takes the client's lock and makes one poll:
 * for checks after a sleep, not per handoff.
 */
bool td__conn_gone(struct td_client *c, uint32_t epoch)
{
	struct pollfd p;
	bool gone;

	td__client_lock(c);
	gone = c->sock < 0 || c->dead || c->epoch != epoch;
	p = (struct pollfd){.fd = c->sock, .events = 0};
	pthread_mutex_unlock(&c->lock);
	return gone || (poll(&p, 1, 0) == 1 && (p.revents & POLLHUP));
}
