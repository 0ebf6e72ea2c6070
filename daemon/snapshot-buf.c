/* SPDX-License-Identifier: MIT */
/*
 * What a snapshot's save and restore share: the settings and state
 * (td__snap), a small pool of bounce buffers (SLOTS x CHUNK, touched once
 * at start) through which every byte of a snapshot goes, and reading or
 * copying through them from the loop (io.c: io_uring, or bounded
 * pread/pwrite steps). No plane is ever mapped: a fresh mapping costs a
 * page fault per 4 KiB (far more under nested virtualisation), which the
 * kernel would take inside io_uring_enter, on the loop's thread.
 */
#include "snapshot-int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bytes.h"
#include "sd.h"

struct td__snap_state td__snap = {.lock_fd = -1};

/* ---- bounce buffers ---- */

static struct {
	uint8_t *mem;
	struct slot s[SLOTS];
	struct slot *free;
	unsigned nfree;
} pool;

int td__snap_pool_init(void)
{
	pool.mem = mmap(NULL, (size_t)SLOTS * CHUNK, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (pool.mem == MAP_FAILED) {
		pool.mem = NULL;
		return -errno;
	}
	/* every page touched now, never again at a save's expense */
	memset(pool.mem, 0, (size_t)SLOTS * CHUNK);
	for (unsigned i = 0; i < SLOTS; i++) {
		pool.s[i].p = pool.mem + (size_t)i * CHUNK;
		pool.s[i].next_free = pool.free;
		pool.free = &pool.s[i];
	}
	pool.nfree = SLOTS;
	return 0;
}

void td__snap_pool_fini(void)
{
	if (pool.mem)
		munmap(pool.mem, (size_t)SLOTS * CHUNK);
	memset(&pool, 0, sizeof(pool));
}

struct slot *td__snap_slot_get(void)
{
	struct slot *sl = pool.free;

	if (sl) {
		pool.free = sl->next_free;
		pool.nfree--;
	}
	return sl;
}

void td__snap_slot_put(struct slot *sl)
{
	sl->next_free = pool.free;
	pool.free = sl;
	pool.nfree++;
}

static void on_slot(struct td__io_op *op, int64_t res)
{
	struct slot *sl = td__container_of(op, struct slot, op);

	if (sl->copying && res == (int64_t)op->len) {
		/* the read half is in: its checksum, then the write half */
		if (sl->crc_at)
			sl->crc = td_hrry_crc32c(0, sl->p, op->len);
		sl->copying = false;
		op->kind = TD__IO_WRITE;
		op->fd = sl->dst;
		op->off = sl->dst_off;
		td__io_submit(op);
		return;
	}
	if (sl->copying && res >= 0)
		res = -ENODATA; /* a short read: the source ended early */
	sl->done(sl, res);
}

void td__snap_slot_write(struct slot *sl, int fd, uint64_t off, size_t len,
			 void (*done)(struct slot *, int64_t), void *arg)
{
	sl->op = (struct td__io_op){.kind = TD__IO_WRITE,
				    .fd = fd,
				    .buf = sl->p,
				    .len = len,
				    .off = off,
				    .done = on_slot};
	sl->copying = false;
	sl->crc_at = NULL;
	sl->done = done;
	sl->arg = arg;
	td__io_submit(&sl->op);
}

void td__snap_slot_copy(struct slot *sl, int src, uint64_t soff, int dst,
			uint64_t doff, size_t len, uint8_t *crc_at,
			void (*done)(struct slot *, int64_t), void *arg)
{
	sl->op = (struct td__io_op){.kind = TD__IO_READ,
				    .fd = src,
				    .buf = sl->p,
				    .len = len,
				    .off = soff,
				    .done = on_slot};
	sl->copying = true;
	sl->crc_at = crc_at;
	sl->dst = dst;
	sl->dst_off = doff;
	sl->done = done;
	sl->arg = arg;
	td__io_submit(&sl->op);
}

/* ---- the loop ---- */

uint64_t td__snap_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void td__snap_run_while(bool (*busy)(void *), void *arg)
{
	uint64_t last = td__snap_now_ms();

	while (busy(arg)) {
		uv_run(td__snap.d->loop, UV_RUN_ONCE);
		if (td__snap_now_ms() - last >= 1000) {
			last = td__snap_now_ms();
			td__sd_notify(NULL, 0, "EXTEND_TIMEOUT_USEC=%llu",
				      (unsigned long long)EXTEND_USEC);
		}
	}
}

static bool count_busy(void *arg)
{
	return *(unsigned *)arg != 0;
}

/* ---- reading and copying through the buffers ---- */

struct rd {
	unsigned busy;
	int err;
	struct td__io_op *ops;
	size_t nops;
};

static void on_read(struct td__io_op *op, int64_t res)
{
	struct rd *r = op->arg;

	if (res != (int64_t)op->len && !r->err)
		r->err = res < 0 ? (int)res : -ENODATA;
	r->busy--;
}

int td__snap_read_range(int fd, void *buf, uint64_t len, uint64_t off)
{
	struct rd r = {0};
	size_t n = (size_t)((len + CHUNK - 1) / CHUNK);

	if (!len)
		return 0;
	r.ops = calloc(n, sizeof(*r.ops));
	if (!r.ops)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		uint64_t at = (uint64_t)i * CHUNK;

		r.ops[i] = (struct td__io_op){
			.kind = TD__IO_READ,
			.fd = fd,
			.buf = (uint8_t *)buf + at,
			.len = (size_t)(len - at > CHUNK ? CHUNK : len - at),
			.off = off + at,
			.done = on_read,
			.arg = &r};
		r.busy++;
		td__io_submit(&r.ops[i]);
	}
	td__snap_run_while(count_busy, &r.busy);
	free(r.ops);
	return r.err;
}

struct copy {
	unsigned busy;
	int err;
	int src, dst;
	uint64_t start, at, end; /* the first source byte, the next one,
				  * the last one + 1 */
	int64_t shift;    /* destination offset - source offset */
	const uint8_t *crcs; /* expected, one per CHUNK; or NULL */
	uint64_t bad_at;     /* where the first mismatch's CHUNK starts */
	bool src_failed;     /* err came from a read of src */
};

static void copy_fill(struct copy *c);

static void on_copied(struct slot *sl, int64_t res)
{
	struct copy *c = sl->arg;

	if (res != (int64_t)sl->op.len && !c->err) {
		c->err = res < 0 ? (int)res : -ENODATA;
		c->src_failed = sl->copying; /* its read half never ended */
	}
	if (!c->err && sl->crc_at && td__le32(sl->crc_at) != sl->crc) {
		c->err = -EBADMSG;
		c->bad_at = (uint64_t)(sl->crc_at - c->crcs) / 4 * CHUNK;
	}
	td__snap_slot_put(sl);
	c->busy--;
	copy_fill(c);
}

static void copy_fill(struct copy *c)
{
	struct slot *sl;

	while (!c->err && c->at < c->end && (sl = td__snap_slot_get())) {
		uint64_t n = c->end - c->at > CHUNK ? CHUNK : c->end - c->at;

		c->busy++;
		/* the range starts each CHUNK the save's checksum covers */
		td__snap_slot_copy(sl, c->src, c->at, c->dst,
				   (uint64_t)((int64_t)c->at + c->shift),
				   (size_t)n,
				   c->crcs ? (uint8_t *)(uintptr_t)c->crcs +
						     (c->at - c->start) /
							     CHUNK * 4
					   : NULL,
				   on_copied, c);
		c->at += n;
	}
}

int td__snap_copy_range(int src, uint64_t off, int dst, uint64_t dst_off,
			uint64_t len, const uint8_t *crcs, uint64_t *bad_at,
			bool *src_failed)
{
	struct copy c = {.src = src,
			 .dst = dst,
			 .start = off,
			 .at = off,
			 .end = off + len,
			 .shift = (int64_t)(dst_off - off),
			 .crcs = crcs};

	copy_fill(&c);
	td__snap_run_while(count_busy, &c.busy);
	if (c.err == -EBADMSG && bad_at)
		*bad_at = c.bad_at;
	if (src_failed)
		*src_failed = c.err < 0 && c.src_failed;
	return c.err;
}
