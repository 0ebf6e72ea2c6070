/* SPDX-License-Identifier: MIT */
/*
 * Snapshots: every current version in one HRRYFILE (docs/snapshot.md for
 * the mapping), so tensors survive a stop, a reboot or a run without
 * systemd.
 *
 * Saving drives the Hurray writer core (proto/hrry.h) step by step from
 * the loop. Every byte goes through a small pool of bounce buffers
 * (SLOTS x CHUNK, touched once at start): small slices (header,
 * descriptors, padding, KV, index, trailer) are gathered into one, tensor
 * bytes are read from the plane into one and written from it, all through
 * io.c (io_uring, or bounded pread/pwrite steps), so clients are served
 * while gigabytes go out. No plane is mapped: a fresh mapping costs a
 * page fault per 4 KiB (far more under nested virtualisation), which the
 * kernel would take inside io_uring_enter, on the loop's thread. The
 * writer core advances only as far as a free buffer takes it, which is
 * also the back-pressure. Every saved version is referenced like a lease
 * until the save ends, so its bytes stay intact while clients keep
 * publishing, replacing and deleting.
 *
 * Crash safety: the file is written as FILE.tmp in the same folder,
 * fsync'ed, renamed over FILE, and the folder fsync'ed. A SIGKILL at any
 * point leaves FILE as it was before (or already the new one); a stale
 * FILE.tmp is removed at the next start.
 *
 * Restoring drives the reader core the same way, before the server
 * starts: header, trailer, index and KV are validated (§13) before any
 * tensor is read, each tensor's bytes are copied through the same
 * buffers into a fresh memfd, and
 * each version goes through the PUBLISH checks (td__store_restore), like
 * the fd store's restore. A file that does not open is moved aside.
 */
#include "snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "blob.h"
#include "bytes.h"
#include "hrry.h"
#include "io.h"
#include "sd.h"

#define CHUNK (1u << 20) /* bytes per read/write request, per buffer */
#define SLOTS 16          /* bounce buffers: what can be in flight */
#define EXTEND_USEC 30000000ull /* start/stop timeout extension */

/* KV keys (docs/snapshot.md) */
#define KV_FORMAT "tensord.snapshot"
#define KV_NEXT "tensord.next_version"
#define KEY_PREFIX "tensord:"
#define SNAP_FORMAT 1
#define FENCE_FILE UINT64_MAX /* "#files" value of the fence's entry */

enum field { F_VERSION, F_FLAGS, F_BLOB, F_META, F_FILES, F_COUNT_ };
static const char *const field_names[F_COUNT_] = {"version", "flags", "blob",
						  "meta", "files"};

/* ---- bounce buffers ---- */

/*
 * One buffer and its request: a write of its bytes, or a copy (read
 * src into it, then write it to dst).
 */
struct slot {
	struct td__io_op op;
	uint8_t *p;
	struct slot *next_free;
	int dst;
	uint64_t dst_off;
	bool copying; /* the read half of a copy is running */
	void (*done)(struct slot *sl, int64_t res);
	void *arg;
};

static struct {
	uint8_t *mem;
	struct slot s[SLOTS];
	struct slot *free;
	unsigned nfree;
} pool;

static int pool_init(void)
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

static void pool_fini(void)
{
	if (pool.mem)
		munmap(pool.mem, (size_t)SLOTS * CHUNK);
	memset(&pool, 0, sizeof(pool));
}

static struct slot *slot_get(void)
{
	struct slot *sl = pool.free;

	if (sl) {
		pool.free = sl->next_free;
		pool.nfree--;
	}
	return sl;
}

static void slot_put(struct slot *sl)
{
	sl->next_free = pool.free;
	pool.free = sl;
	pool.nfree++;
}

static void on_slot(struct td__io_op *op, int64_t res)
{
	struct slot *sl = td__container_of(op, struct slot, op);

	if (sl->copying && res == (int64_t)op->len) {
		/* the read half is in: now the write half */
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

/* Write sl's len bytes to fd at off; done(sl, bytes or -errno) later. */
static void slot_write(struct slot *sl, int fd, uint64_t off, size_t len,
		       void (*done)(struct slot *, int64_t), void *arg)
{
	sl->op = (struct td__io_op){.kind = TD__IO_WRITE,
				    .fd = fd,
				    .buf = sl->p,
				    .len = len,
				    .off = off,
				    .done = on_slot};
	sl->copying = false;
	sl->done = done;
	sl->arg = arg;
	td__io_submit(&sl->op);
}

/* Copy len (<= CHUNK) bytes from src at soff to dst at doff through sl. */
static void slot_copy(struct slot *sl, int src, uint64_t soff, int dst,
		      uint64_t doff, size_t len,
		      void (*done)(struct slot *, int64_t), void *arg)
{
	sl->op = (struct td__io_op){.kind = TD__IO_READ,
				    .fd = src,
				    .buf = sl->p,
				    .len = len,
				    .off = soff,
				    .done = on_slot};
	sl->copying = true;
	sl->dst = dst;
	sl->dst_off = doff;
	sl->done = done;
	sl->arg = arg;
	td__io_submit(&sl->op);
}

/* ---- one save ---- */

struct item { /* one held version */
	void *ref;
	struct td_state_entry ent;
	int fds[TD_STATE_MAX_FDS];
	uint64_t fsize[TD_STATE_MAX_FDS]; /* FENCE_FILE for the fence */
	int first_plane;
	int typed_fd; /* the fd entry written with dtype and shape, or -1 */
	uint8_t type;
	uint32_t ndim;
	uint64_t shape[TD_WIRE_MAX_DIMS];
	uint8_t *blob;                 /* copy with pid 0 */
	char *names[TD_STATE_MAX_FDS]; /* "name#i" of the other planes */
	char *keys;                    /* the KV keys, back to back */
	struct td_hrry_kv_value files[TD_STATE_MAX_FDS];
};

enum phase { PH_WRITE, PH_DRAIN, PH_FSYNC, PH_DIRSYNC, PH_DONE };

struct save {
	struct item *items;
	size_t n, cap;
	size_t rec_item; /* the next record: items[rec_item].fds[rec_fd] */
	uint32_t rec_fd;
	bool finishing; /* begin_finish done */
	int fd, dfd;
	struct td_hrry_wcore w;
	struct td_hrry_wentry *ents;
	size_t nents;
	struct td_hrry_kv_entry *kv;
	size_t nkv;
	uint64_t off; /* file offset of the core's next byte */
	struct slot *stage; /* small slices gathered here, or NULL */
	size_t stage_len;
	uint64_t stage_off;
	int plane; /* the current record's plane fd (borrowed) */
	unsigned inflight; /* slots submitted */
	int err;
	char why[200];
	enum phase phase;
	bool abort, again;
	uint64_t t0, tensors, bytes;
	struct td__io_op sync_op;
};

static struct {
	bool on;
	struct td__daemon *d;
	char *path, *tmp, *dir;
	uint64_t interval_ms;
	uv_timer_t timer;
	bool timer_on;
	bool dirty;
	uint64_t last_ms; /* when the last save started */
	struct save *cur;
	uint64_t kill_at, steps; /* test knob, TD_TEST_SNAPSHOT_KILL_AT */
	bool stop_asked; /* SIGTERM/SIGINT while restoring */
	bool final;      /* stopping: only the final save */
} sn;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * Tests kill the daemon at every step of a save (tests/test-snapshot.c):
 * a step is a finished write, the fsync, the rename, the folder fsync.
 */
static void step(void)
{
	if (sn.kill_at && ++sn.steps == sn.kill_at)
		raise(SIGKILL);
}

static void save_fail(struct save *sv, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void save_fail(struct save *sv, int rc, const char *fmt, ...)
{
	va_list ap;

	if (sv->err)
		return;
	sv->err = rc < 0 ? rc : -EIO;
	va_start(ap, fmt);
	vsnprintf(sv->why, sizeof(sv->why), fmt, ap);
	va_end(ap);
}

static void item_fini(struct item *it)
{
	td__store_snap_unref(it->ref);
	free(it->blob);
	free(it->keys);
	for (uint32_t i = 0; i < TD_STATE_MAX_FDS; i++)
		free(it->names[i]);
}

static void arm(void);

/* The end of a save, good or bad: nothing of it is in flight any more. */
static void save_end(struct save *sv)
{
	uint64_t ms = now_ms() - sv->t0;

	if (sv->fd >= 0)
		close(sv->fd);
	if (sv->dfd >= 0)
		close(sv->dfd);
	if (sv->phase != PH_DONE) {
		unlink(sn.tmp);
		if (sv->abort && !sv->err)
			td__log(TD_LOG_DEBUG, "snapshot: save abandoned for a "
					      "newer one");
		else
			td__log(TD_LOG_ERROR, "snapshot: saving %s failed: "
					      "%s (%s); the previous one is "
					      "kept; retried after the "
					      "interval",
				sn.path, sv->why, strerror(-sv->err));
		sn.dirty = true;
	} else {
		td__log(TD_LOG_INFO, "snapshot: saved %" PRIu64 " tensors (%"
				     PRIu64 " bytes) to %s in %" PRIu64
				     " ms (%s)",
			sv->tensors, sv->bytes, sn.path, ms, td__io_name());
	}
	if (sv->again)
		sn.dirty = true; /* a version skipped for its fence */
	if (sv->stage)
		slot_put(sv->stage);
	for (size_t i = 0; i < sv->n; i++)
		item_fini(&sv->items[i]);
	free(sv->items);
	free(sv->ents);
	free(sv->kv);
	free(sv);
	sn.cur = NULL;
	if (sn.dirty)
		arm();
}

static void on_sync(struct td__io_op *op, int64_t res);

static void start_fsync(struct save *sv, int fd, enum phase ph)
{
	sv->phase = ph;
	sv->sync_op = (struct td__io_op){.kind = TD__IO_FSYNC,
					 .fd = fd,
					 .done = on_sync,
					 .arg = sv};
	td__io_submit(&sv->sync_op);
}

static void on_sync(struct td__io_op *op, int64_t res)
{
	struct save *sv = op->arg;

	if (res < 0) {
		save_fail(sv, (int)res, "fsync of %s",
			  sv->phase == PH_FSYNC ? sn.tmp : sn.dir);
		save_end(sv);
		return;
	}
	step();
	if (sv->phase == PH_FSYNC) {
		/* the file is on disk: make it the snapshot */
		if (rename(sn.tmp, sn.path) < 0) {
			save_fail(sv, -errno, "rename to %s", sn.path);
			save_end(sv);
			return;
		}
		step();
		start_fsync(sv, sv->dfd, PH_DIRSYNC);
		return;
	}
	sv->phase = PH_DONE; /* the rename is durable too */
	save_end(sv);
}

static void pump(struct save *sv);

/* Every write is done: fsync, or clean up after a failure. */
static void drained(struct save *sv)
{
	if (sv->err || sv->abort)
		save_end(sv);
	else
		start_fsync(sv, sv->fd, PH_FSYNC);
}

/* A write (or a copy) of the save is done. */
static void on_written(struct slot *sl, int64_t res)
{
	struct save *sv = sl->arg;

	if (res != (int64_t)sl->op.len)
		save_fail(sv, res < 0 ? (int)res : -EIO,
			  "%s of %zu bytes at %" PRIu64,
			  sl->op.kind == TD__IO_READ ? "reading a plane"
						     : "write",
			  sl->op.len, sl->op.off);
	sv->inflight--;
	slot_put(sl);
	step();
	if (sv->phase == PH_WRITE && !sv->err && !sv->abort)
		pump(sv);
	else if (sv->inflight == 0)
		drained(sv);
}

static void stage_flush(struct save *sv)
{
	if (!sv->stage || !sv->stage_len)
		return;
	sv->inflight++;
	slot_write(sv->stage, sv->fd, sv->stage_off, sv->stage_len,
		   on_written, sv);
	sv->stage = NULL;
	sv->stage_len = 0;
}

/*
 * Gather up to len bytes (ptr NULL: zeros) that go at file offset
 * sv->off; returns how many fit (0: no free buffer, wait).
 */
static uint64_t stage_add(struct save *sv, const uint8_t *ptr, uint64_t len)
{
	uint64_t done = 0;

	while (done < len) {
		size_t n;

		if (!sv->stage) {
			sv->stage = slot_get();
			if (!sv->stage)
				break;
			sv->stage_off = sv->off + done;
		}
		n = CHUNK - sv->stage_len;
		if (n > len - done)
			n = (size_t)(len - done);
		if (ptr)
			memcpy(sv->stage->p + sv->stage_len, ptr + done, n);
		else
			memset(sv->stage->p + sv->stage_len, 0, n);
		sv->stage_len += n;
		done += n;
		if (sv->stage_len == CHUNK)
			stage_flush(sv);
	}
	return done;
}

/*
 * As much of one writer-core slice as free buffers take: bytes (copied
 * into the stage) or the plane's own (copied plane -> buffer -> file).
 * Returns the bytes emitted; 0 means wait for a buffer.
 */
static uint64_t emit(struct save *sv, const struct td_hrry_slice *s)
{
	uint64_t done = 0;

	if (s->kind != TD_HRRY_SLICE_BUFFER) {
		done = stage_add(sv, s->kind == TD_HRRY_SLICE_BYTES ? s->ptr
								    : NULL,
				 s->len);
	} else {
		stage_flush(sv);
		while (done < s->len) {
			struct slot *sl = slot_get();
			uint64_t n = s->len - done > CHUNK ? CHUNK
							   : s->len - done;

			if (!sl)
				break;
			sv->inflight++;
			/* skip: where in the buffer this slice starts */
			slot_copy(sl, sv->plane, s->skip + done, sv->fd,
				  sv->off + done, (size_t)n, on_written, sv);
			done += n;
		}
	}
	sv->off += done;
	td_hrry_wcore_advance(&sv->w, done);
	return done;
}

/* Start the next record: 1 started, 0 none left, <0 failed. */
static int next_record(struct save *sv)
{
	struct td_hrry_desc d;
	struct td_hrry_err e = {0};
	struct item *it;
	const char *name;
	size_t name_len;
	uint32_t i;
	int rc;

	for (;;) {
		if (sv->rec_item == sv->n)
			return 0;
		it = &sv->items[sv->rec_item];
		i = sv->rec_fd++;
		if (i == it->ent.fd_count) {
			sv->rec_item++;
			sv->rec_fd = 0;
			sv->tensors++;
			continue;
		}
		if (it->fsize[i] != FENCE_FILE)
			break;
	}
	if ((int)i == it->typed_fd)
		rc = td_hrry_desc_init_dense(&d, it->type, it->ndim, it->shape);
	else
		rc = td_hrry_desc_init_dense(&d, TD_HRRY_TYPE_UINT8, 1,
					     &it->fsize[i]);
	if (rc < 0) {
		save_fail(sv, rc, "\"%.*s\": no Hurray descriptor",
			  (int)it->ent.name.len, it->ent.name.ptr);
		return rc;
	}
	name = it->names[i] ? it->names[i] : it->ent.name.ptr;
	name_len = it->names[i] ? strlen(it->names[i]) : it->ent.name.len;
	rc = td_hrry_wcore_begin_tensor(&sv->w, name, name_len, &d,
					&sv->ents[sv->nents], &e);
	if (rc < 0) {
		save_fail(sv, rc, "\"%.*s\": %s: %s", (int)name_len, name,
			  td_hrry_error_name(e.kind), e.reason);
		return rc;
	}
	sv->nents++;
	sv->plane = it->fds[i];
	sv->bytes += it->fsize[i];
	return 1;
}

/*
 * Drive the writer core until it waits for a free buffer (the
 * completions call back in) or the file is complete.
 */
static void pump(struct save *sv)
{
	struct td_hrry_slice s;
	struct td_hrry_err e = {0};
	int rc;

	while (!sv->err && !sv->abort && sv->phase == PH_WRITE) {
		if (td_hrry_wcore_next(&sv->w, &s) == TD_HRRY_STEP_NEED) {
			if (s.len && emit(sv, &s) == 0)
				return;
			if (!s.len)
				td_hrry_wcore_advance(&sv->w, 0);
			continue;
		}
		if (sv->finishing) {
			stage_flush(sv);
			sv->phase = PH_DRAIN;
			break;
		}
		rc = next_record(sv);
		if (rc > 0 || rc < 0)
			continue;
		rc = td_hrry_wcore_begin_finish(&sv->w, sv->kv, sv->nkv,
						sv->ents, sv->nents, NULL, &e);
		if (rc < 0)
			save_fail(sv, rc, "KV, index: %s: %s",
				  td_hrry_error_name(e.kind), e.reason);
		sv->finishing = true;
	}
	if ((sv->err || sv->abort) && sv->stage) {
		/* nothing more is started: the file is dropped anyway */
		slot_put(sv->stage);
		sv->stage = NULL;
		sv->stage_len = 0;
	}
	if (sv->inflight == 0)
		drained(sv);
}

/* ---- what a save holds ---- */

static int item_keys(struct item *it)
{
	size_t one = strlen(KEY_PREFIX) + it->ent.name.len + 1 + 8;
	char *p;

	it->keys = malloc(one * F_COUNT_);
	if (!it->keys)
		return -ENOMEM;
	p = it->keys;
	for (int f = 0; f < F_COUNT_; f++) {
		p += snprintf(p, one, KEY_PREFIX "%.*s#%s",
			      (int)it->ent.name.len, it->ent.name.ptr,
			      field_names[f]) +
		     1;
	}
	return 0;
}

static const char *item_key(const struct item *it, enum field f)
{
	const char *p = it->keys;

	while (f--)
		p += strlen(p) + 1;
	return p;
}

/* Would this version's planes be the bytes of one dense tensor? */
static void item_typed(struct item *it, const struct td_blob_view *bv)
{
	struct td_blob_plane pl;
	uint64_t need = td_dtype_size(bv->dtype);

	it->typed_fd = -1;
	if (bv->plane_count != 1 || bv->strings[TD_BLOB_FORMAT].len ||
	    bv->ndim > TD_WIRE_MAX_DIMS || td_blob_plane_get(bv, 0, &pl) < 0 ||
	    pl.offset || !need)
		return;
	/* strides, when written (exporters do), must be dense C order */
	for (uint32_t k = bv->ndim; k-- > 0;) {
		it->shape[k] = td_blob_shape(bv, k);
		if (bv->strides_len && td_blob_stride(bv, k) != (int64_t)need)
			return;
		if (td__mul_ovf(need, it->shape[k], &need) ||
		    need > INT64_MAX)
			return;
	}
	if (need != it->fsize[pl.handle])
		return;
	it->type = td_hrry_type_from_dtype(bv->dtype);
	it->ndim = bv->ndim;
	if (it->type)
		it->typed_fd = (int)pl.handle;
}

static int hold_one(void *arg, const struct td__snap_ver *v)
{
	struct save *sv = arg;
	struct td_blob_view bv;
	struct td_err e = {0};
	struct item it = {.ref = v->ref, .ent = v->ent, .first_plane = -1};
	const char *skip = NULL;

	memcpy(it.fds, v->fds, sizeof(it.fds));
	if (td_blob_decode(v->ent.blob.ptr, v->ent.blob.len, &bv, &e) < 0)
		skip = "its blob does not decode";
	else if (bv.storage_kind == TD_STORAGE_DMABUF)
		skip = "dma-buf planes are device memory";
	for (uint32_t i = 0; !skip && i < v->ent.fd_count; i++) {
		struct stat st = {0};

		if ((int32_t)i == bv.fence_fd) {
			struct pollfd p = {.fd = v->fds[i], .events = POLLIN};

			/* a producer still writing: saved once it is done */
			if (poll(&p, 1, 0) != 1) {
				skip = "its fence is not signalled yet";
				sv->again = true;
			}
			it.fsize[i] = FENCE_FILE;
			continue;
		}
		if (fstat(v->fds[i], &st) < 0 || !S_ISREG(st.st_mode))
			skip = "a plane is not a regular file";
		it.fsize[i] = (uint64_t)st.st_size;
		if (it.first_plane < 0)
			it.first_plane = (int)i;
	}
	if (skip) {
		td__log(TD_LOG_DEBUG, "snapshot: not saving \"%.*s\": %s",
			(int)v->ent.name.len, v->ent.name.ptr, skip);
		td__store_snap_unref(v->ref);
		return 0;
	}
	item_typed(&it, &bv);
	if (sv->n == sv->cap) {
		size_t cap = sv->cap ? sv->cap * 2 : 64;
		struct item *n = realloc(sv->items, cap * sizeof(*n));

		if (!n)
			goto nomem;
		sv->items = n;
		sv->cap = cap;
	}
	it.blob = malloc(v->ent.blob.len);
	if (!it.blob || item_keys(&it) < 0)
		goto nomem;
	memcpy(it.blob, v->ent.blob.ptr, v->ent.blob.len);
	/* the pid is the saving daemon's; a restore writes its own */
	td__put_le32(it.blob + TD_BLOB_PID_OFFSET, 0);
	for (uint32_t i = 0; i < v->ent.fd_count; i++) {
		it.files[i] = (struct td_hrry_kv_value){
			.kind = TD_HRRY_KV_UINT64, .u64_value = it.fsize[i]};
		if (it.fsize[i] == FENCE_FILE || (int)i == it.first_plane)
			continue;
		it.names[i] = malloc(it.ent.name.len + 8);
		if (!it.names[i])
			goto nomem;
		snprintf(it.names[i], it.ent.name.len + 8, "%.*s#%u",
			 (int)it.ent.name.len, it.ent.name.ptr, i);
	}
	sv->items[sv->n++] = it;
	return 0;
nomem:
	item_fini(&it);
	return -ENOMEM;
}

/* The KV section: the two file keys, then 4 or 5 keys per version. */
static int build_kv(struct save *sv, uint64_t next_version)
{
	size_t n = 2;
	struct td_hrry_kv_entry *kv;

	for (size_t i = 0; i < sv->n; i++)
		n += sv->items[i].ent.meta.len ? 5 : 4;
	kv = calloc(n, sizeof(*kv));
	if (!kv)
		return -ENOMEM;
	sv->kv = kv;
	kv[0] = (struct td_hrry_kv_entry){
		KV_FORMAT, strlen(KV_FORMAT),
		{.kind = TD_HRRY_KV_UINT64, .u64_value = SNAP_FORMAT}};
	kv[1] = (struct td_hrry_kv_entry){
		KV_NEXT, strlen(KV_NEXT),
		{.kind = TD_HRRY_KV_UINT64, .u64_value = next_version}};
	n = 2;
	for (size_t i = 0; i < sv->n; i++) {
		struct item *it = &sv->items[i];

		for (int f = 0; f < F_COUNT_; f++) {
			struct td_hrry_kv_entry *k = &kv[n];

			if (f == F_META && !it->ent.meta.len)
				continue;
			k->key = item_key(it, (enum field)f);
			k->key_len = strlen(k->key);
			if (f == F_VERSION || f == F_FLAGS) {
				k->value.kind = TD_HRRY_KV_UINT64;
				k->value.u64_value = f == F_VERSION
							     ? it->ent.version
							     : it->ent.flags;
			} else if (f == F_FILES) {
				k->value.kind = TD_HRRY_KV_ARRAY;
				k->value.item_kind = TD_HRRY_KV_UINT64;
				k->value.items = it->files;
				k->value.item_count = it->ent.fd_count;
			} else {
				k->value.kind = TD_HRRY_KV_BYTES;
				k->value.data = f == F_BLOB ? it->blob
							    : it->ent.meta.ptr;
				k->value.data_len = f == F_BLOB
							    ? it->ent.blob.len
							    : it->ent.meta.len;
			}
			n++;
		}
	}
	sv->nkv = n;
	return 0;
}

static void save_start(void)
{
	struct td__store_info si = {0};
	struct td_hrry_err e = {0};
	struct save *sv;
	size_t records = 0;
	int rc;

	sv = calloc(1, sizeof(*sv));
	if (!sv) {
		td__log(TD_LOG_ERROR, "snapshot: out of memory");
		return;
	}
	sn.cur = sv;
	sn.dirty = false;
	sn.last_ms = uv_now(sn.d->loop);
	sv->t0 = now_ms();
	sv->fd = sv->dfd = -1;
	td__store_info(&si);
	rc = td__store_snap_hold(hold_one, sv);
	if (rc < 0) {
		save_fail(sv, rc, "holding the versions");
		goto fail;
	}
	for (size_t i = 0; i < sv->n; i++)
		for (uint32_t j = 0; j < sv->items[i].ent.fd_count; j++)
			records += sv->items[i].fsize[j] != FENCE_FILE;
	sv->ents = calloc(records ? records : 1, sizeof(*sv->ents));
	if (!sv->ents || build_kv(sv, si.next_version) < 0) {
		save_fail(sv, -ENOMEM, "out of memory");
		goto fail;
	}
	sv->fd = open(sn.tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (sv->fd < 0) {
		save_fail(sv, -errno, "cannot create %s", sn.tmp);
		goto fail;
	}
	sv->dfd = open(sn.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sv->dfd < 0) {
		save_fail(sv, -errno, "cannot open the folder %s", sn.dir);
		goto fail;
	}
	td__log(TD_LOG_INFO, "snapshot: saving %zu tensors to %s (%s)",
		sv->n, sn.path, td__io_name());
	rc = td_hrry_wcore_init(&sv->w, NULL, &e);
	if (rc < 0) {
		save_fail(sv, rc, "%s", e.reason);
		goto fail;
	}
	pump(sv);
	return;
fail:
	save_end(sv);
}

/* ---- scheduling ---- */

static void on_timer(uv_timer_t *t)
{
	(void)t;
	sn.timer_on = false;
	if (sn.dirty && !sn.cur)
		save_start();
}

static void arm(void)
{
	uint64_t now, at;

	if (!sn.on || sn.final || sn.timer_on || sn.cur)
		return;
	now = uv_now(sn.d->loop);
	at = sn.last_ms + sn.interval_ms;
	sn.timer_on = true;
	uv_timer_start(&sn.timer, on_timer, at > now ? at - now : 0, 0);
}

void td__snapshot_dirty(void)
{
	if (!sn.on)
		return;
	sn.dirty = true;
	arm();
}

/* ---- restore ---- */

/*
 * Run the loop while busy(arg) (restore, final save), telling systemd
 * every second that we are still at it.
 */
static void run_while(bool (*busy)(void *), void *arg)
{
	uint64_t last = now_ms();

	while (busy(arg)) {
		uv_run(sn.d->loop, UV_RUN_ONCE);
		if (now_ms() - last >= 1000) {
			last = now_ms();
			td__sd_notify(NULL, 0, "EXTEND_TIMEOUT_USEC=%llu",
				      (unsigned long long)EXTEND_USEC);
		}
	}
}

static bool count_busy(void *arg)
{
	return *(unsigned *)arg != 0;
}

static bool save_busy(void *arg)
{
	(void)arg;
	return sn.cur != NULL;
}

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

/*
 * Read [off, off + len) of fd into buf through the I/O engine, CHUNK
 * bytes per request, all queued at once. 0, -ENODATA (short) or -errno.
 */
static int read_range(int fd, void *buf, uint64_t len, uint64_t off)
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
	run_while(count_busy, &r.busy);
	free(r.ops);
	return r.err;
}

struct copy {
	unsigned busy;
	int err;
	int src, dst;
	uint64_t at, end; /* the next source byte, the last one + 1 */
	int64_t shift;    /* destination offset - source offset */
};

static void copy_fill(struct copy *c);

static void on_copied(struct slot *sl, int64_t res)
{
	struct copy *c = sl->arg;

	if (res != (int64_t)sl->op.len && !c->err)
		c->err = res < 0 ? (int)res : -ENODATA;
	slot_put(sl);
	c->busy--;
	copy_fill(c);
}

static void copy_fill(struct copy *c)
{
	struct slot *sl;

	while (!c->err && c->at < c->end && (sl = slot_get())) {
		uint64_t n = c->end - c->at > CHUNK ? CHUNK : c->end - c->at;

		c->busy++;
		slot_copy(sl, c->src, c->at, c->dst,
			  (uint64_t)((int64_t)c->at + c->shift), (size_t)n,
			  on_copied, c);
		c->at += n;
	}
}

/*
 * Copy [off, off + len) of src to dst at dst_off through the buffers,
 * all of them in flight. 0, -ENODATA (short) or -errno.
 */
static int copy_range(int src, uint64_t off, int dst, uint64_t dst_off,
		      uint64_t len)
{
	struct copy c = {.src = src,
			 .dst = dst,
			 .at = off,
			 .end = off + len,
			 .shift = (int64_t)(dst_off - off)};

	copy_fill(&c);
	run_while(count_busy, &c.busy);
	return c.err;
}

struct reader {
	int fd;
	struct td_hrry_rcore c;
	void **bufs; /* what the core borrows */
	size_t nbufs;
};

static void *reader_keep(struct reader *rd, uint64_t len)
{
	void **b = realloc(rd->bufs, (rd->nbufs + 1) * sizeof(*b));
	void *p;

	if (!b)
		return NULL;
	rd->bufs = b;
	p = malloc(len ? (size_t)len : 1);
	if (p)
		rd->bufs[rd->nbufs++] = p;
	return p;
}

static void reader_fini(struct reader *rd)
{
	for (size_t i = 0; i < rd->nbufs; i++)
		free(rd->bufs[i]);
	free(rd->bufs);
	if (rd->fd >= 0)
		close(rd->fd);
}

/* Open: header, trailer, index, KV (§13 steps 1-5). 0 or -errno. */
static int reader_open(struct reader *rd, uint64_t size,
		       struct td_hrry_err *e)
{
	struct td_hrry_need need;
	int rc;

	td_hrry_rcore_init(&rd->c, size);
	while ((rc = td_hrry_rcore_step(&rd->c, &need, e)) ==
	       TD_HRRY_STEP_NEED) {
		void *buf;

		if (need.len > SIZE_MAX)
			return td__hrry_fail(e, TD_HRRY_E_NO_MEMORY, 0,
					     "too large for memory");
		buf = reader_keep(rd, need.len);
		if (!buf)
			return td__hrry_fail(e, TD_HRRY_E_NO_MEMORY, 0,
					     "out of memory");
		if (need.kind == TD_HRRY_NEED_READ) {
			rc = read_range(rd->fd, buf, need.len, need.offset);
			if (rc < 0) {
				bool eof = rc == -ENODATA;

				*e = (struct td_hrry_err){
					eof ? TD_HRRY_E_UNEXPECTED_EOF
					    : TD_HRRY_E_IO,
					rc, need.offset, "read failed"};
				return rc;
			}
		}
		rc = td_hrry_rcore_supply(&rd->c, buf, need.len, e);
		if (rc < 0)
			return rc;
	}
	return rc;
}

/* The fields of one version, gathered from its KV keys. */
struct rec {
	const char *name;
	size_t name_len;
	bool have[F_COUNT_];
	struct td_hrry_kv_value v[F_COUNT_];
};

/* Which version and field a key names: F_COUNT_ when not ours. */
static enum field key_field(const struct td_hrry_kv_entry *k,
			    const char **name, size_t *name_len)
{
	size_t pl = strlen(KEY_PREFIX);
	const char *hash;

	if (k->key_len <= pl || memcmp(k->key, KEY_PREFIX, pl))
		return F_COUNT_;
	hash = memrchr(k->key, '#', k->key_len);
	if (!hash || hash < k->key + pl)
		return F_COUNT_;
	*name = k->key + pl;
	*name_len = (size_t)(hash - *name);
	for (int f = 0; f < F_COUNT_; f++)
		if (strlen(field_names[f]) ==
			    k->key_len - (size_t)(hash + 1 - k->key) &&
		    !memcmp(hash + 1, field_names[f], strlen(field_names[f])))
			return (enum field)f;
	return F_COUNT_;
}

static void close_all(int *fds, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

/*
 * One plane back: the Hurray tensor `hname` (checked by the core) into a
 * new sealed memfd of exactly `size` bytes; its read-only reopen in *out.
 */
static int restore_plane(struct reader *rd, const char *hname, size_t hlen,
			 uint64_t size, int *out, char *why, size_t cap)
{
	struct td_hrry_err e = {0};
	struct td_hrry_entry ent;
	struct td_hrry_desc d;
	uint8_t *dbuf = NULL;
	uint64_t idx, off, len;
	const char *pwhy = NULL;
	int fd = -1, rc;

	rc = td_hrry_rcore_find(&rd->c, hname, hlen, &idx, &e);
	if (rc < 0)
		goto herr;
	td_hrry_rcore_entry(&rd->c, idx, &ent);
	dbuf = malloc(ent.descriptor_length);
	if (!dbuf) {
		rc = -ENOMEM;
		goto err;
	}
	rc = read_range(rd->fd, dbuf, ent.descriptor_length,
			ent.descriptor_offset);
	if (rc < 0) {
		snprintf(why, cap, "reading the descriptor of \"%.*s\": %s",
			 (int)hlen, hname, strerror(-rc));
		goto out;
	}
	rc = td_hrry_rcore_check_desc(&rd->c, &ent, dbuf, &d, &e);
	if (rc == 0)
		rc = td_hrry_rcore_check_supported(&ent, &d, &e);
	if (rc < 0)
		goto herr;
	if (d.buffer_count != 1 || d.buffers[0].byte_size != size) {
		rc = -EINVAL;
		snprintf(why, cap, "Hurray tensor \"%.*s\" holds %" PRIu64
				   " bytes, the fd table says %" PRIu64,
			 (int)hlen, hname,
			 d.buffer_count ? d.buffers[0].byte_size : 0, size);
		goto out;
	}
	td_hrry_buffer_range(&ent, &d, rd->c.alignment, 0, &off, &len);
	rc = td__plane_create(size, &fd, &pwhy);
	if (rc < 0)
		goto perr;
	/* never mapped here: written through the bounce buffers */
	rc = copy_range(rd->fd, off, fd, 0, len);
	if (rc < 0) {
		snprintf(why, cap, "reading \"%.*s\": %s", (int)hlen, hname,
			 strerror(-rc));
		goto out;
	}
	rc = td__plane_seal(fd, &pwhy);
	if (rc == 0)
		rc = td__plane_readonly(fd, out, &pwhy);
	if (rc < 0)
		goto perr;
	goto out;
herr:
	snprintf(why, cap, "Hurray tensor \"%.*s\": %s at byte %" PRIu64
			   ": %s",
		 (int)hlen, hname, td_hrry_error_name(e.kind), e.offset,
		 e.reason ? e.reason : "invalid");
	goto out;
perr:
	snprintf(why, cap, "\"%.*s\": %s", (int)hlen, hname, pwhy);
	goto out;
err:
	snprintf(why, cap, "%s", strerror(-rc));
out:
	free(dbuf);
	if (fd >= 0)
		close(fd);
	return rc;
}

/* Put one version back. 0, or -errno with the reason in why. */
static int restore_rec(struct reader *rd, const struct rec *r, char *why,
		       size_t cap)
{
	struct td_state_entry ent = {0};
	struct td_blob_view bv;
	struct td_err be = {0};
	const char *nwhy = NULL;
	int fds[TD_STATE_MAX_FDS];
	uint32_t n, first = UINT32_MAX;
	int rc;

	for (int f = 0; f < F_COUNT_; f++) {
		static const enum td_hrry_kv_kind want[F_COUNT_] = {
			TD_HRRY_KV_UINT64, TD_HRRY_KV_UINT64,
			TD_HRRY_KV_BYTES, TD_HRRY_KV_BYTES, TD_HRRY_KV_ARRAY};

		if (!r->have[f] && f == F_META)
			continue;
		if (!r->have[f] || r->v[f].kind != want[f]) {
			snprintf(why, cap, "KV key #%s %s", field_names[f],
				 r->have[f] ? "has the wrong kind"
					    : "is missing");
			return -EINVAL;
		}
	}
	if (td_wire_name_check(r->name, r->name_len, false, &nwhy) < 0) {
		snprintf(why, cap, "bad name: %s", nwhy);
		return -EINVAL;
	}
	n = (uint32_t)r->v[F_FILES].item_count;
	if (r->v[F_VERSION].u64_value == 0 ||
	    (r->v[F_FLAGS].u64_value & ~(uint64_t)TD_STATE_FLAGS) ||
	    r->v[F_BLOB].data_len > TD_WIRE_MAX_BLOB ||
	    (r->have[F_META] && r->v[F_META].data_len > TD_WIRE_MAX_META) ||
	    r->v[F_FILES].item_kind != TD_HRRY_KV_UINT64 ||
	    r->v[F_FILES].item_count == 0 ||
	    r->v[F_FILES].item_count > TD_STATE_MAX_FDS) {
		snprintf(why, cap, "version 0, unknown flags, or a blob, "
				   "metadata or fd table over its limit");
		return -EINVAL;
	}
	if (td_blob_decode(r->v[F_BLOB].data, r->v[F_BLOB].data_len, &bv,
			   &be) < 0) {
		snprintf(why, cap, "blob: %s", be.reason ? be.reason : "bad");
		return -EINVAL;
	}
	for (uint32_t i = 0; i < TD_STATE_MAX_FDS; i++)
		fds[i] = -1;
	for (uint32_t i = 0; i < n; i++) {
		struct td_hrry_kv_value it;
		char hname[TD_WIRE_MAX_NAME + 16];
		bool fence = (int32_t)i == bv.fence_fd;
		int hlen;

		td_hrry_kv_item(&r->v[F_FILES], i, &it);
		if ((it.u64_value == FENCE_FILE) != fence) {
			snprintf(why, cap, "fd table entry %u: the fence is "
					   "entry %d",
				 i, bv.fence_fd);
			rc = -EINVAL;
			goto fail;
		}
		if (it.u64_value == FENCE_FILE) {
			/* saved only once signalled: signalled again */
			fds[i] = eventfd(1, EFD_CLOEXEC);
			if (fds[i] < 0) {
				rc = -errno;
				snprintf(why, cap, "eventfd: %s",
					 strerror(errno));
				goto fail;
			}
			continue;
		}
		if (first == UINT32_MAX) {
			first = i;
			hlen = snprintf(hname, sizeof(hname), "%.*s",
					(int)r->name_len, r->name);
		} else {
			hlen = snprintf(hname, sizeof(hname), "%.*s#%u",
					(int)r->name_len, r->name, i);
		}
		rc = restore_plane(rd, hname, (size_t)hlen, it.u64_value,
				   &fds[i], why, cap);
		if (rc < 0)
			goto fail;
	}
	ent.name = (struct td_wire_str){r->name, (uint16_t)r->name_len};
	ent.flags = (uint32_t)r->v[F_FLAGS].u64_value;
	ent.version = r->v[F_VERSION].u64_value;
	if (r->have[F_META])
		ent.meta = (struct td_wire_bytes){r->v[F_META].data,
						  (uint32_t)r->v[F_META]
							  .data_len};
	ent.blob = (struct td_wire_bytes){r->v[F_BLOB].data,
					  (uint32_t)r->v[F_BLOB].data_len};
	ent.fd_count = n;
	/* fd ids 0: not from the fd store (pushed there if it is on) */
	return td__store_restore(&ent, fds, why, cap);
fail:
	close_all(fds, n);
	return rc;
}

/* Move a snapshot that cannot be read out of the way, keeping it. */
static void move_aside(const char *reason)
{
	char to[4200], stamp[32];
	time_t t = time(NULL);
	struct tm tm;
	int rc = -1;

	gmtime_r(&t, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	/* never over an earlier one of the same second */
	for (unsigned i = 0; i < 100 && rc < 0; i++) {
		int n = snprintf(to, sizeof(to), "%s.corrupt-%s", sn.path,
				 stamp);

		if (i)
			snprintf(to + n, sizeof(to) - (size_t)n, ".%u", i);
		rc = renameat2(AT_FDCWD, sn.path, AT_FDCWD, to,
			       RENAME_NOREPLACE);
		if (rc < 0 && errno != EEXIST)
			break;
	}
	if (rc == 0)
		td__log(TD_LOG_WARN, "snapshot %s: %s; moved aside to %s; "
				     "starting empty",
			sn.path, reason, to);
	else
		td__log(TD_LOG_ERROR, "snapshot %s: %s; moving it aside "
				      "failed (%s); starting empty",
			sn.path, reason, strerror(errno));
}

static void on_stop_signal(uv_signal_t *h, int signum)
{
	(void)h;
	(void)signum;
	sn.stop_asked = true;
}

static void restore(void)
{
	struct reader rd = {.fd = -1};
	struct td_hrry_err e = {0};
	struct rec r = {0};
	struct stat st;
	char reason[300], why[TD_WIRE_MAX_REASON];
	unsigned done = 0, total = 0;
	uint64_t t0 = now_ms(), last = t0, count = 0;
	uv_signal_t sig[2];
	int rc;

	rd.fd = open(sn.path, O_RDONLY | O_CLOEXEC);
	if (rd.fd < 0) {
		if (errno == ENOENT)
			td__log(TD_LOG_INFO, "snapshot %s does not exist yet; "
					     "starting empty",
				sn.path);
		else {
			snprintf(reason, sizeof(reason), "cannot open: %s",
				 strerror(errno));
			move_aside(reason);
		}
		return;
	}
	if (fstat(rd.fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		reader_fini(&rd);
		move_aside("not a regular file");
		return;
	}
	td__sd_notify(NULL, 0, "EXTEND_TIMEOUT_USEC=%llu\nSTATUS=restoring "
			       "snapshot %s",
		      (unsigned long long)EXTEND_USEC, sn.path);
	/* a stop asked for during a long restore is honoured after it */
	for (int i = 0; i < 2; i++) {
		uv_signal_init(sn.d->loop, &sig[i]);
		uv_signal_start(&sig[i], on_stop_signal, i ? SIGINT : SIGTERM);
	}
	rc = reader_open(&rd, (uint64_t)st.st_size, &e);
	if (rc == 0) {
		struct td_hrry_kv_entry k;
		bool ours = false;

		for (uint32_t i = 0; i < rd.c.kv_count; i++) {
			td_hrry_rcore_kv(&rd.c, i, &k);
			if (k.key_len == strlen(KV_FORMAT) &&
			    !memcmp(k.key, KV_FORMAT, k.key_len))
				ours = k.value.kind == TD_HRRY_KV_UINT64 &&
				       k.value.u64_value == SNAP_FORMAT;
			if (k.key_len == strlen(KV_NEXT) &&
			    !memcmp(k.key, KV_NEXT, k.key_len) &&
			    k.value.kind == TD_HRRY_KV_UINT64)
				td__store_set_next_version(k.value.u64_value);
		}
		if (!ours) {
			snprintf(reason, sizeof(reason),
				 "a Hurray file, but not a tensord snapshot "
				 "(no KV %s = %d)",
				 KV_FORMAT, SNAP_FORMAT);
			rc = -EINVAL;
		}
	} else {
		snprintf(reason, sizeof(reason), "%s at byte %" PRIu64 ": %s",
			 td_hrry_error_name(e.kind), e.offset,
			 e.reason ? e.reason : strerror(-rc));
	}
	if (rc < 0) {
		reader_fini(&rd);
		move_aside(reason);
		goto out;
	}
	/*
	 * The fields of a version are consecutive keys, #version first. A
	 * stop asked for meanwhile waits for the whole restore: the fd store
	 * (when on) must not keep a partial state, which would win over the
	 * snapshot at the next start.
	 */
	for (uint32_t i = 0; i <= rd.c.kv_count; i++) {
		struct td_hrry_kv_entry k;
		const char *name = NULL;
		size_t name_len = 0;
		enum field f = F_COUNT_;

		if (i < rd.c.kv_count) {
			td_hrry_rcore_kv(&rd.c, i, &k);
			f = key_field(&k, &name, &name_len);
			if (f == F_COUNT_)
				continue;
		}
		if (r.name && (i == rd.c.kv_count || f == F_VERSION ||
			       name_len != r.name_len ||
			       memcmp(name, r.name, name_len))) {
			total++;
			if (restore_rec(&rd, &r, why, sizeof(why)) == 0) {
				done++;
				count++;
			} else {
				td__log(TD_LOG_WARN, "snapshot: not restoring "
						     "\"%.*s\": %s",
					(int)r.name_len, r.name, why);
			}
			r = (struct rec){0};
		}
		if (i == rd.c.kv_count)
			break;
		if (f != F_VERSION && !r.name) {
			td__log(TD_LOG_WARN, "snapshot: KV key \"%.*s\" "
					     "belongs to no version; ignored",
				(int)k.key_len, k.key);
			continue;
		}
		r.name = name;
		r.name_len = name_len;
		r.have[f] = true;
		r.v[f] = k.value;
		if (now_ms() - last >= 1000) {
			last = now_ms();
			td__sd_notify(NULL, 0, "EXTEND_TIMEOUT_USEC=%llu\n"
					       "STATUS=restoring snapshot: %"
					       PRIu64 " tensors",
				      (unsigned long long)EXTEND_USEC, count);
		}
	}
	td__log(TD_LOG_INFO, "snapshot: restored %u of %u tensors from %s "
			     "in %" PRIu64 " ms (%s)%s",
		done, total, sn.path, now_ms() - t0, td__io_name(),
		sn.stop_asked ? "; now stopping as asked" : "");
	reader_fini(&rd);
out:
	for (int i = 0; i < 2; i++)
		uv_close((uv_handle_t *)&sig[i], NULL);
	if (sn.stop_asked)
		uv_stop(sn.d->loop); /* main's uv_run returns at once */
}

/* ---- start and stop ---- */

int td__snapshot_start(struct td__daemon *d, const char *path,
		       uint64_t interval_ms, bool fdstore_used)
{
	const char *knob = getenv("TD_TEST_SNAPSHOT_KILL_AT");
	char *slash;
	struct stat st;
	int rc;

	sn.d = d;
	sn.interval_ms = interval_ms;
	sn.path = strdup(path);
	sn.tmp = malloc(strlen(path) + 5);
	sn.dir = strdup(path);
	if (!sn.path || !sn.tmp || !sn.dir) {
		rc = -ENOMEM;
		goto fail;
	}
	sprintf(sn.tmp, "%s.tmp", path);
	slash = strrchr(sn.dir, '/');
	if (!slash)
		strcpy(sn.dir, ".");
	else if (slash == sn.dir)
		slash[1] = 0;
	else
		*slash = 0;
	if (stat(sn.dir, &st) < 0 || !S_ISDIR(st.st_mode) ||
	    access(sn.dir, W_OK) < 0) {
		rc = -errno ? -errno : -ENOTDIR;
		td__log(TD_LOG_ERROR, "--snapshot %s: the folder %s is not a "
				      "writable folder",
			path, sn.dir);
		goto fail;
	}
	if (knob)
		sn.kill_at = strtoull(knob, NULL, 10);
	rc = td__io_init(d->loop);
	if (rc == 0)
		rc = pool_init();
	if (rc < 0)
		goto fail;
	uv_timer_init(d->loop, &sn.timer);
	sn.on = true;
	/* a save a SIGKILL cut short */
	if (unlink(sn.tmp) == 0)
		td__log(TD_LOG_INFO, "snapshot: removed %s, left by a save "
				     "that did not finish",
			sn.tmp);
	if (!fdstore_used)
		restore();
	uv_update_time(d->loop);
	sn.last_ms = uv_now(d->loop);
	if (fdstore_used) {
		/* the fd store is newer; the snapshot catches up */
		td__log(TD_LOG_INFO, "snapshot %s not read: the fd store's "
				     "state (newer) was restored",
			path);
		td__snapshot_dirty();
	}
	return 0;
fail:
	free(sn.path);
	free(sn.tmp);
	free(sn.dir);
	sn.path = sn.tmp = sn.dir = NULL;
	return rc;
}

void td__snapshot_fini(void)
{
	if (!sn.on)
		return;
	sn.final = true; /* no more timed saves */
	if (sn.timer_on)
		uv_timer_stop(&sn.timer);
	sn.timer_on = false;
	/* a save of an older state gives way to the final one */
	if (sn.cur && sn.dirty && sn.cur->phase == PH_WRITE)
		sn.cur->abort = true;
	run_while(save_busy, NULL);
	if (sn.dirty) {
		td__log(TD_LOG_INFO, "snapshot: final save to %s", sn.path);
		save_start();
		run_while(save_busy, NULL);
	}
	sn.on = false;
	uv_close((uv_handle_t *)&sn.timer, NULL);
	td__io_fini();
	pool_fini();
	free(sn.path);
	free(sn.tmp);
	free(sn.dir);
	sn.path = sn.tmp = sn.dir = NULL;
}
