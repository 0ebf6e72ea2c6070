/* SPDX-License-Identifier: MIT */
/*
 * tensord's fast path (docs/fastpath.md): two rings through the public
 * client API, against a daemon of its own the bench starts.
 *
 * Data: the producer owns ring "bench/data<run>" (2-3 slots of the payload
 * size), the consumer subscribes to it. Ack: the consumer owns ring
 * "bench/ack<run>" (2 slots of 16 bytes), the producer subscribes. A round
 * trip is therefore exactly the iceoryx-wait scheme with tensord rings:
 *
 *   producer: td_ring_acquire -> write -> td_ring_publish;
 *             td_sub_next(ack) -> check seq -> td_sub_release
 *   consumer: td_sub_next(data) -> check in place -> td_sub_release;
 *             td_ring_acquire(ack) -> write seq -> td_ring_publish
 *
 * Nothing of that reaches the daemon's socket (no fd, no mmap, no
 * message); a side that finds nothing new polls the control block
 * or naps as planned from its recent waits, then sleeps on its futex
 * (libclient/pace.c; TENSORD_RING_SPIN_US sets the base poll,
 * 0 = sleep at once). Slots are allocated and pre-faulted by the daemon
 * when the ring is created, and mapped with populated page tables on both
 * sides: no first-touch fault is timed.
 */
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tensord/tensord.h>

/* One daemon for both ring methods: refcounted start/stop. */
static int ring_daemon = -1;
static int ring_refs, ring_rc;
static char ring_why[BENCH_WHY_MAX];
static char ring_sock[300];

static int ring_start(const struct bench_env *env, char *why, size_t why_len)
{
	if (ring_refs++ == 0)
		ring_rc = bench_tensord_start(env, "tensord-ring", ring_sock,
					      sizeof(ring_sock), &ring_daemon,
					      ring_why, sizeof(ring_why));
	snprintf(why, why_len, "%s", ring_why);
	return ring_rc;
}

static void ring_stop(void)
{
	if (ring_refs > 0 && --ring_refs > 0)
		return;
	if (ring_daemon > 0)
		bench_reap(ring_daemon, 5000);
	ring_daemon = -1;
}

static int ring_service_pid(void)
{
	return ring_daemon;
}

static int ring_can_run(const struct bench_env *env, size_t size, char *why,
			size_t why_len)
{
	/* a slot holds at most 16 GiB (proto/ring.h) */
	if ((uint64_t)size > (16ull << 30)) {
		snprintf(why, why_len, "ring slots are capped at 16 GiB");
		return -EFBIG;
	}
	return 0;
}

struct ring_priv {
	struct td_client *c;
	struct td_ring *out; /* producer: data; consumer: ack */
	struct td_sub *in;   /* producer: ack; consumer: data */
	bool lockstep;       /* the ack is the consumer's release */
	/* tensord-stage-bound's producer: a named stream PUBLISH to the
	 * daemon per handoff, nobody waiting for it */
	struct td_alloc *stage;
	bool stage_bound;
	char stage_name[64];
};

/* The ring's own ack: a 16-byte ring back, unless the ack is the release. */
static int ring_acks(const struct bench_run *r)
{
	const struct ring_priv *x = r->priv;

	return bench_method_acks(r) && !x->lockstep;
}

static int ring_setup_as(struct bench_run *r, bool lockstep,
			 bool stage_bound)
{
	struct ring_priv *x = calloc(1, sizeof(*x));
	int prod = r->role == BENCH_PRODUCER;
	uint64_t size = prod ? r->size : 16;
	struct td_ring_desc desc = {
		.dtype = TD_TENSOR_U8,
		.ndim = 1,
		.shape = &size,
		/* ping-pong needs latest + one; a spare up to 64 MiB; a
		 * reader holds at most one: consumers + 2 never wait */
		.slot_count = prod && r->size <= (64u << 20) ? 3 : 2,
		.reader_count = r->consumers,
	};
	char out[64], in[64];
	struct td_error err;
	int rc;

	if (!x)
		return bench_fail(r, -ENOMEM, "out of memory");
	x->lockstep = lockstep;
	x->stage_bound = stage_bound && prod;
	snprintf(x->stage_name, sizeof(x->stage_name), "bench/stage%u",
		 r->run_id);
	r->priv = x;
	snprintf(out, sizeof(out), "bench/%s%u", prod ? "data" : "ack",
		 r->run_id);
	snprintf(in, sizeof(in), "bench/%s%u", prod ? "ack" : "data",
		 r->run_id);
	rc = td_client_connect(ring_sock, &x->c, &err);
	if (rc < 0)
		return bench_fail(r, rc, "td_client_connect: %.200s",
				  err.reason);
	if (r->consumers > 1)
		desc.slot_count = r->consumers + 2;
	/* without the ring's own ack (FANOUT, PACED, lock step): only the
	 * data ring */
	if (!ring_acks(r) && !prod)
		goto subscribe;
	rc = td_ring_create(x->c, out, &desc, &x->out, &err);
	if (rc < 0)
		return bench_fail(r, rc, "td_ring_create %s: %.200s", out,
				  err.reason);
	if (!ring_acks(r))
		return 0;
subscribe:
	rc = td_ring_subscribe(x->c, in, 30000, &x->in, &err);
	if (rc < 0)
		return bench_fail(r, rc, "td_ring_subscribe %s: %.200s", in,
				  err.reason);
	return 0;
}

static int ring_setup(struct bench_run *r)
{
	return ring_setup_as(r, false, false);
}

/* tensord-ring-lockstep: the producer waits for the release */
static int ring_setup_lockstep(struct bench_run *r)
{
	return ring_setup_as(r, true, false);
}

/* tensord-stage-bound: the ring, plus the daemon's side of a publish */
static int ring_setup_stage_bound(struct bench_run *r)
{
	return ring_setup_as(r, false, true);
}

/*
 * tensord-stage-bound, producer: the daemon's part of a staged publish
 * (docs/fastpath.md, "A followed publish without the daemon's hop"),
 * which the ring does not have: a PUBLISH of a named stream loan
 * nobody waits for, whose reply (the next loan) the next handoff's alloc
 * reads, as a staged producer would. 64 bytes: the daemon touches no
 * payload, so its work does not depend on the size.
 */
static int stage_alloc(struct bench_run *r)
{
	struct ring_priv *x = r->priv;
	uint64_t size = 64;
	struct td_error err;
	int rc;

	if (!x->stage_bound)
		return 0;
	rc = td_client_alloc_named(x->c, x->stage_name, 1, &size,
				   TD_ALLOC_STREAM, &x->stage, &err);
	return rc < 0 ? bench_fail(r, rc, "td_client_alloc_named: %.200s",
				   err.reason)
		      : 0;
}

static int stage_publish(struct bench_run *r)
{
	struct ring_priv *x = r->priv;
	uint64_t shape[1] = {64};
	struct td_publish pub;
	struct td_error err;
	int rc;

	if (!x->stage)
		return 0;
	memset(&pub, 0, sizeof(pub));
	pub.name = x->stage_name;
	pub.dtype = TD_TENSOR_U8;
	pub.ndim = 1;
	pub.shape = shape;
	rc = td_client_publish_alloc_nowait(x->c, x->stage, &pub, &err);
	x->stage = NULL; /* consumed, published or not */
	return rc < 0 ? bench_fail(r, rc,
				   "td_client_publish_alloc_nowait: %.200s",
				   err.reason)
		      : 0;
}

/* tensord-ring-sleep: TENSORD_RING_SPIN_US=0, every wait a futex sleep */
static int ring_setup_sleep(struct bench_run *r)
{
	if (setenv("TENSORD_RING_SPIN_US", "0", 1) < 0)
		return bench_fail(r, -errno, "setenv: %s", strerror(errno));
	return ring_setup(r);
}

static int ring_producer_step(struct bench_run *r, uint64_t seq)
{
	struct ring_priv *x = r->priv;
	struct td_slot s;
	struct td_view v;
	uint64_t got;
	int rc;

	rc = stage_alloc(r);
	if (rc < 0)
		return rc;
	rc = td_ring_acquire(x->out, -1, &s);
	if (rc < 0)
		return bench_fail(r, rc, "td_ring_acquire: %s", strerror(-rc));
	bench_payload_write(s.planes[0], r->size, seq, r->write);
	td_ring_publish(x->out, &got);
	rc = stage_publish(r);
	if (rc < 0)
		return rc;
	if (x->lockstep && bench_method_acks(r)) {
		rc = td_ring_wait_read(x->out, got, -1);
		return rc < 0 ? bench_fail(r, rc, "td_ring_wait_read: %s",
					   strerror(-rc))
			      : 0;
	}
	if (!bench_method_acks(r))
		return 0;
	rc = td_sub_next(x->in, -1, &v);
	if (rc < 0)
		return bench_fail(r, rc, "td_sub_next(ack): %s",
				  strerror(-rc));
	memcpy(&got, v.planes[0], sizeof(got));
	td_sub_release(x->in);
	if (got != seq)
		return bench_fail(r, -EBADMSG, "ack %" PRIu64 " for %" PRIu64,
				  got, seq);
	return 0;
}

static int ring_consumer_step(struct bench_run *r, uint64_t seq)
{
	struct ring_priv *x = r->priv;
	struct td_slot s;
	struct td_view v;
	int rc;

	rc = td_sub_next(x->in, -1, &v);
	if (rc < 0)
		return bench_fail(r, rc, "td_sub_next(data): %s",
				  strerror(-rc));
	if (v.sizes[0] != r->size)
		rc = bench_fail(r, -EPROTO, "slot of %" PRIu64 " bytes",
				v.sizes[0]);
	else if (bench_payload_check(v.planes[0], r->size, seq, r->write) < 0)
		rc = bench_fail(r, -EBADMSG, "payload %" PRIu64 " corrupt",
				seq);
	td_sub_release(x->in);
	if (rc < 0 || !ring_acks(r))
		return rc;
	rc = td_ring_acquire(x->out, -1, &s);
	if (rc < 0)
		return bench_fail(r, rc, "td_ring_acquire(ack): %s",
				  strerror(-rc));
	memcpy(s.planes[0], &seq, sizeof(seq));
	td_ring_publish(x->out, NULL);
	return 0;
}

static void ring_teardown(struct bench_run *r)
{
	struct ring_priv *x = r->priv;

	if (!x)
		return;
	td_alloc_free(x->stage);
	if (x->stage_bound)
		td_client_delete(x->c, x->stage_name, NULL, NULL);
	td_sub_close(x->in);
	td_ring_close(x->out);
	td_client_close(x->c);
	free(x);
	r->priv = NULL;
}

const struct bench_method bench_tensord_ring = {
	.name = "tensord-ring",
	.desc = "tensord fast path (public API, daemon started by the "
		"bench): td_ring_acquire/write/td_ring_publish, "
		"td_sub_next/check/td_sub_release; ack: a 16-byte ring the "
		"other way; no socket, fd or mmap per handoff",
	.start = ring_start,
	.stop = ring_stop,
	.can_run = ring_can_run,
	.setup = ring_setup,
	.producer_step = ring_producer_step,
	.consumer_step = ring_consumer_step,
	.teardown = ring_teardown,
	.service_pid = ring_service_pid,
	.kinds = BENCH_STREAMS,
};

const struct bench_method bench_tensord_ring_sleep = {
	.name = "tensord-ring-sleep",
	.desc = "as tensord-ring with TENSORD_RING_SPIN_US=0: no polling, "
		"every wait sleeps on the futex at once",
	.start = ring_start,
	.stop = ring_stop,
	.can_run = ring_can_run,
	.setup = ring_setup_sleep,
	.producer_step = ring_producer_step,
	.consumer_step = ring_consumer_step,
	.teardown = ring_teardown,
	.service_pid = ring_service_pid,
	.kinds = BENCH_STREAMS,
};

const struct bench_method bench_tensord_ring_lockstep = {
	.name = "tensord-ring-lockstep",
	.desc = "as tensord-ring, with the consumer's td_sub_release as the "
		"ack: the producer waits in td_ring_wait_read (ping-pong "
		"only; no ring back)",
	.start = ring_start,
	.stop = ring_stop,
	.can_run = ring_can_run,
	.setup = ring_setup_lockstep,
	.producer_step = ring_producer_step,
	.consumer_step = ring_consumer_step,
	.teardown = ring_teardown,
	.service_pid = ring_service_pid,
};

/* sizes the bound is measured at: those of the fan-out */
static int stage_bound_can_run(const struct bench_env *env, size_t size,
			       char *why, size_t why_len)
{
	(void)env;
	if (size > (64u << 20)) {
		snprintf(why, why_len, "a design's bound, measured up to "
			 "64 MiB");
		return -EFBIG;
	}
	return 0;
}

const struct bench_method bench_tensord_stage_bound = {
	.name = "tensord-stage-bound",
	.desc = "not a way to use tensord: the bound of a staged publish "
		"(docs/fastpath.md), tensord-ring with the producer also "
		"sending the daemon a PUBLISH of a named stream loan per "
		"handoff that nobody waits for",
	.start = ring_start,
	.stop = ring_stop,
	.can_run = stage_bound_can_run,
	.setup = ring_setup_stage_bound,
	.producer_step = ring_producer_step,
	.consumer_step = ring_consumer_step,
	.teardown = ring_teardown,
	.service_pid = ring_service_pid,
	.kinds = BENCH_KIND(BENCH_FANOUT),
};
