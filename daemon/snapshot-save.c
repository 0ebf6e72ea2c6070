/* SPDX-License-Identifier: MIT */
/*
 * Saving a snapshot (docs/snapshot.md): every current version in one
 * HRRYFILE, and when that happens (after changes, at most once per
 * interval; once more at the stop).
 *
 * A save drives the Hurray writer core (proto/hrry.h) step by step from
 * the loop. Every byte goes through the bounce buffers of
 * snapshot-buf.c: small slices (header, descriptors, padding, KV, index,
 * trailer) are gathered into one, tensor bytes are read from the plane
 * into one and written from it, all through io.c (io_uring, or bounded
 * pread/pwrite steps), so clients are served while gigabytes go out. The
 * writer core advances only as far as a free buffer takes it, which is
 * also the back-pressure. Every saved version is referenced like a lease
 * until the save ends, so its bytes stay intact while clients keep
 * publishing, replacing and deleting.
 *
 * Crash safety: the file is written as FILE.tmp in the same folder,
 * fsync'ed, renamed over FILE, and the folder fsync'ed. A SIGKILL at any
 * point leaves FILE as it was before (or already the new one); a stale
 * FILE.tmp is removed at the next start (snapshot.c).
 */
#include "snapshot-int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bytes.h"
#include "sd.h"

/* ---- one save ---- */

/*
 * One held version. Holding is cheap (a reference, taken for every
 * version at once: the save's consistent cut); the rest (fstat, fence,
 * blob copy, keys, checksum room) is its preparation, done when its
 * record comes (item_prep): a few at a time between loop turns, not all
 * n in the turn that starts the save.
 */
struct item {
	bool prepped;
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
	uint8_t *crcs; /* "#crc": filled as the planes are copied */
	uint64_t crcs_len;
	uint64_t crc_off[TD_STATE_MAX_FDS]; /* each plane's first in crcs */
};

enum phase { PH_WRITE, PH_DRAIN, PH_FSYNC, PH_DIRSYNC, PH_DONE };

struct save {
	/*
	 * What the save holds: refs, taken at its start (8 bytes each);
	 * items, each filled when its record comes (item_prep), a fresh
	 * allocation whose pages are first touched then, not at the start
	 * (a page fault costs tens of us under nested virtualisation: the
	 * 5000 items of 1.1 KiB each, filled at once, took 180 ms).
	 */
	void **refs; /* NULL where dropped (a version not saved) */
	struct item *items;
	size_t n, cap;
	size_t records; /* at most: their fd-table entries */
	size_t rec_item; /* the next record: items[rec_item].fds[rec_fd] */
	uint32_t rec_fd;
	bool finishing; /* begin_finish done */
	int fd, dfd;
	struct td_hrry_wcore w;
	struct td_hrry_wentry *ents;
	size_t nents;
	/* built as the versions are prepared: room for 2 + 6 n entries */
	struct td_hrry_kv_entry *kv;
	size_t nkv;
	uint32_t *kv_order; /* nkv: the writer core's duplicate-key check */
	/* this pump()'s work so far: versions prepared, bytes staged */
	unsigned prepped_now;
	uint64_t staged_now;
	uint64_t off; /* file offset of the core's next byte */
	struct slot *stage; /* small slices gathered here, or NULL */
	size_t stage_len;
	uint64_t stage_off;
	int plane; /* the current record's plane fd (borrowed) */
	uint8_t *plane_crcs; /* its checksums, one per CHUNK */
	unsigned inflight; /* slots submitted */
	int err;
	char why[200];
	enum phase phase;
	bool abort, again;
	uint64_t t0, tensors, bytes;
	struct td__io_op sync_op;
};

/* the save in progress, or NULL */
static struct save *cur;

/*
 * Tests kill the daemon at every step of a save (tests/test-snapshot.c):
 * a step is a finished write, the fsync, the rename, the folder fsync.
 */
static void step(void)
{
	if (td__snap.kill_at && ++td__snap.steps == td__snap.kill_at)
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
	free(it->blob);
	free(it->keys);
	free(it->crcs);
	for (uint32_t i = 0; i < TD_STATE_MAX_FDS; i++)
		free(it->names[i]);
}

static void arm(void);

/* The pause before the next save after one that failed or left a
 * fenced version out (td__snap.backoff_ms). */
#define SNAP_BACKOFF_MS 1000u
#define SNAP_BACKOFF_MAX_MS 60000u

static void backoff_more(void)
{
	uint64_t b = td__snap.backoff_ms * 2;

	td__snap.backoff_ms = !b ? SNAP_BACKOFF_MS
				 : b > SNAP_BACKOFF_MAX_MS ? SNAP_BACKOFF_MAX_MS
							   : b;
}

/* What a failed save left as FILE. */
static const char *kept(const struct save *sv)
{
	/* the folder's fsync failed after the rename */
	return sv->phase == PH_DIRSYNC ? "the new one is in place, but its "
					 "name may not survive a power loss"
				       : "the previous one is kept";
}

/* The end of a save, good or bad: nothing of it is in flight any more. */
static void save_end(struct save *sv)
{
	uint64_t ms = td__snap_now_ms() - sv->t0;
	/* a save abandoned for a newer one is not a failure */
	bool failed = sv->phase != PH_DONE && !(sv->abort && !sv->err);

	if (sv->fd >= 0)
		close(sv->fd);
	if (sv->dfd >= 0)
		close(sv->dfd);
	if (failed || sv->again)
		backoff_more();
	else if (sv->phase == PH_DONE)
		td__snap.backoff_ms = 0;
	td__snap.saves_failed += failed;
	if (sv->phase != PH_DONE) {
		unlink(td__snap.tmp);
		if (!failed)
			td__log(TD_LOG_DEBUG, "snapshot: save abandoned for a "
					      "newer one");
		else if (td__snap.final) {
			/* no later save: what changed since the last one
			 * is not in the snapshot (unless only the folder's
			 * fsync failed: the new one is FILE, the stop lost
			 * nothing) */
			td__snap.final_failed = sv->phase != PH_DIRSYNC;
			td__log(TD_LOG_ERROR, "snapshot: final save to %s "
					      "failed: %s (%s); %s; not "
					      "retried: the daemon is stopping",
				td__snap.path, sv->why, strerror(-sv->err),
				kept(sv));
		} else
			td__log(TD_LOG_ERROR, "snapshot: saving %s failed: "
					      "%s (%s); %s; retried in %" PRIu64
					      " s at the earliest",
				td__snap.path, sv->why, strerror(-sv->err),
				kept(sv), td__snap.backoff_ms / 1000);
		td__snap.dirty = true;
	} else {
		struct timespec now;

		clock_gettime(CLOCK_REALTIME, &now);
		td__snap.saves_ok++;
		td__snap.last_end_ms = (uint64_t)now.tv_sec * 1000 +
				       (uint64_t)now.tv_nsec / 1000000;
		td__snap.last_tensors = sv->tensors;
		td__snap.last_bytes = sv->bytes;
		td__snap.last_took_ms = ms;
		td__log(TD_LOG_INFO, "snapshot: saved %" PRIu64 " tensors (%"
				     PRIu64 " bytes) to %s in %" PRIu64
				     " ms (%s)",
			sv->tensors, sv->bytes, td__snap.path, ms,
			td__io_name());
	}
	if (sv->again)
		td__snap.dirty = true; /* a version skipped for its fence */
	if (sv->stage)
		td__snap_slot_put(sv->stage);
	for (size_t i = 0; i < sv->n; i++) {
		if (sv->refs[i])
			td__store_snap_unref(sv->refs[i]);
		if (sv->items && sv->items[i].prepped)
			item_fini(&sv->items[i]);
	}
	free(sv->refs);
	free(sv->items);
	free(sv->ents);
	free(sv->kv);
	free(sv->kv_order);
	free(sv);
	cur = NULL;
	if (td__snap.dirty)
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
			  sv->phase == PH_FSYNC ? td__snap.tmp : td__snap.dir);
		save_end(sv);
		return;
	}
	step();
	if (sv->phase == PH_FSYNC) {
		/* the file is on disk: make it the snapshot */
		if (rename(td__snap.tmp, td__snap.path) < 0) {
			save_fail(sv, -errno, "rename to %s", td__snap.path);
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

/*
 * One pump() does at most about this much before it lets the loop serve
 * clients: versions prepared (item_prep), bytes gathered into the stage
 * (descriptors, padding, and at the end KV and index: 1.5 MB in 180 000
 * slices for 5000 versions, 56 ms in one turn before).
 */
#define PREP_PER_PUMP 16
#define STAGE_PER_PUMP (256u << 10)

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
	else if (sl->crc_at)
		td__put_le32(sl->crc_at, sl->crc);
	sv->inflight--;
	td__snap_slot_put(sl);
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
	td__snap_slot_write(sv->stage, sv->fd, sv->stage_off, sv->stage_len,
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
			sv->stage = td__snap_slot_get();
			if (!sv->stage)
				break;
			sv->stage_off = sv->off + done;
		}
		n = CHUNK - sv->stage_len;
		if (n > len - done)
			n = (size_t)(len - done);
		sv->staged_now += n;
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
			struct slot *sl;
			uint64_t n = s->len - done > CHUNK ? CHUNK
							   : s->len - done;

			/* a checksum per CHUNK of the plane: only whole
			 * CHUNKs are taken, so every copy starts one */
			if ((s->skip + done) % CHUNK) {
				save_fail(sv, -EPROTO, "a plane's slice at %"
					  PRIu64 " is not CHUNK-aligned",
					  s->skip + done);
				break;
			}
			sl = td__snap_slot_get();
			if (!sl)
				break;
			sv->inflight++;
			/* skip: where in the buffer this slice starts */
			td__snap_slot_copy(sl, sv->plane, s->skip + done,
					   sv->fd, sv->off + done, (size_t)n,
					   sv->plane_crcs +
						   (s->skip + done) / CHUNK * 4,
					   on_written, sv);
			done += n;
		}
	}
	sv->off += done;
	td_hrry_wcore_advance(&sv->w, done);
	return done;
}

static int item_prep(struct save *sv, struct item *it, void **ref);

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
		if (!it->prepped) {
			sv->prepped_now++;
			rc = item_prep(sv, it, &sv->refs[sv->rec_item]);
			if (rc < 0) {
				save_fail(sv, rc, "out of memory");
				return rc;
			}
			if (rc == 0) { /* not saved */
				sv->rec_item++;
				continue;
			}
		}
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
	sv->plane_crcs = it->crcs + it->crc_off[i];
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

	sv->prepped_now = 0;
	sv->staged_now = 0;
	while (!sv->err && !sv->abort && sv->phase == PH_WRITE) {
		/*
		 * Enough for one call: the rest once the writes in flight
		 * (the stage's included) come back, so a save of many small
		 * versions takes many short loop turns, each serving
		 * clients, not one long one.
		 */
		if (sv->prepped_now >= PREP_PER_PUMP ||
		    sv->staged_now >= STAGE_PER_PUMP) {
			stage_flush(sv);
			if (sv->inflight)
				break;
		}
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
		/* the KV holds the planes' checksums: every copy first */
		if (sv->inflight)
			return;
		rc = td_hrry_wcore_begin_finish(&sv->w, sv->kv, sv->nkv,
						sv->kv_order, sv->ents,
						sv->nents, NULL, &e);
		if (rc < 0)
			save_fail(sv, rc, "KV, index: %s: %s",
				  td_hrry_error_name(e.kind), e.reason);
		sv->finishing = true;
	}
	if ((sv->err || sv->abort) && sv->stage) {
		/* nothing more is started: the file is dropped anyway */
		td__snap_slot_put(sv->stage);
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
			      td__snap_field_names[f]) +
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

/*
 * Hold a version for the save: its reference, nothing more yet. One of
 * a name the snapshot does not keep is let go at once.
 */
static int hold_ref(void *arg, const struct td__snap_ver *v)
{
	struct save *sv = arg;

	if (!td__snapshot_keeps(v->ent.name.ptr, v->ent.name.len)) {
		td__store_snap_unref(v->ref);
		return 0;
	}
	if (sv->n == sv->cap) {
		size_t cap = sv->cap ? sv->cap * 2 : 64;
		void **n = realloc(sv->refs, cap * sizeof(*n));

		if (!n) {
			td__store_snap_unref(v->ref);
			return -ENOMEM;
		}
		sv->refs = n;
		sv->cap = cap;
	}
	sv->refs[sv->n++] = v->ref;
	sv->records += v->ent.fd_count;
	return 0;
}

/* Its KV entries, after the ones before (5, or 6 with metadata). */
static void kv_add(struct save *sv, struct item *it)
{
	for (int f = 0; f < F_COUNT_; f++) {
		struct td_hrry_kv_entry *k = &sv->kv[sv->nkv];

		if (f == F_META && !it->ent.meta.len)
			continue;
		k->key = item_key(it, (enum field)f);
		k->key_len = strlen(k->key);
		if (f == F_VERSION || f == F_FLAGS) {
			k->value.kind = TD_HRRY_KV_UINT64;
			k->value.u64_value = f == F_VERSION ? it->ent.version
							    : it->ent.flags;
		} else if (f == F_FILES) {
			k->value.kind = TD_HRRY_KV_ARRAY;
			k->value.item_kind = TD_HRRY_KV_UINT64;
			k->value.items = it->files;
			k->value.item_count = it->ent.fd_count;
		} else if (f == F_CRC) {
			k->value.kind = TD_HRRY_KV_BYTES;
			k->value.data = it->crcs;
			k->value.data_len = it->crcs_len;
		} else {
			k->value.kind = TD_HRRY_KV_BYTES;
			k->value.data = f == F_BLOB ? it->blob
						    : it->ent.meta.ptr;
			k->value.data_len = f == F_BLOB ? it->ent.blob.len
							: it->ent.meta.len;
		}
		sv->nkv++;
	}
}

/*
 * Why a held version is not saved (NULL: it is), its fd table's file
 * sizes in it->fsize meanwhile.
 */
static const char *item_skip(struct save *sv, struct item *it,
			     struct td_blob_view *bv)
{
	struct td_err e = {0};

	if (td_blob_decode(it->ent.blob.ptr, it->ent.blob.len, bv, &e) < 0)
		return "its blob does not decode";
	if (bv->storage_kind == TD_STORAGE_DMABUF)
		return "dma-buf planes are device memory";
	it->first_plane = -1;
	for (uint32_t i = 0; i < it->ent.fd_count; i++) {
		struct stat st = {0};

		if ((int32_t)i == bv->fence_fd) {
			struct pollfd p = {.fd = it->fds[i], .events = POLLIN};

			/* a producer still writing: saved once it is done */
			it->fsize[i] = FENCE_FILE;
			if (poll(&p, 1, 0) != 1) {
				sv->again = true;
				return "its fence is not signalled yet";
			}
			continue;
		}
		if (fstat(it->fds[i], &st) < 0 || !S_ISREG(st.st_mode))
			return "a plane is not a regular file";
		it->fsize[i] = (uint64_t)st.st_size;
		if (it->first_plane < 0)
			it->first_plane = (int)i;
	}
	return NULL;
}

/*
 * Prepare a held version when its record comes: 1 ready (its KV entries
 * added), 0 not saved (its reference dropped), -ENOMEM (the save
 * fails; save_end frees what it has).
 */
static int item_prep(struct save *sv, struct item *it, void **ref)
{
	struct td_blob_view bv;
	struct td__snap_ver v;
	const char *skip;
	uint32_t n;

	td__store_snap_view(*ref, &v);
	it->ent = v.ent;
	memcpy(it->fds, v.fds, sizeof(it->fds));
	n = it->ent.fd_count;
	skip = item_skip(sv, it, &bv);
	it->prepped = true;
	if (skip) {
		/* at the stop no later save picks it up: the name is not in
		 * the file the next start reads, its older saved version
		 * neither; say so */
		bool lost = td__snap.final &&
			    !strcmp(skip, "its fence is not signalled yet");

		td__log(lost ? TD_LOG_WARN : TD_LOG_DEBUG,
			"snapshot: not saving \"%.*s\": %s%s",
			(int)it->ent.name.len, it->ent.name.ptr, skip,
			lost ? "; the final save goes without it, and the "
			       "next start will not have this name"
			     : "");
		td__store_snap_unref(*ref);
		*ref = NULL;
		return 0;
	}
	it->typed_fd = td__snap_dense(&bv, it->fsize, &it->type, &it->ndim,
				      it->shape);
	it->blob = malloc(it->ent.blob.len);
	if (!it->blob || item_keys(it) < 0)
		return -ENOMEM;
	memcpy(it->blob, it->ent.blob.ptr, it->ent.blob.len);
	/* the pid is the saving daemon's; a restore writes its own */
	td__put_le32(it->blob + TD_BLOB_PID_OFFSET, 0);
	it->crcs_len = td__snap_crc_len(it->fsize, n);
	it->crcs = malloc((size_t)it->crcs_len);
	if (!it->crcs)
		return -ENOMEM;
	td__put_le32(it->crcs,
		     td__snap_meta_crc(it->ent.name.ptr, it->ent.name.len,
				       it->ent.version, it->ent.flags, it->blob,
				       it->ent.blob.len,
				       (const uint8_t *)it->ent.meta.ptr,
				       it->ent.meta.len, it->fsize, n));
	for (uint64_t i = 0, at = 4; i < n; i++) {
		it->crc_off[i] = at;
		if (it->fsize[i] != FENCE_FILE)
			at += td__snap_plane_crcs(it->fsize[i]);
	}
	for (uint32_t i = 0; i < n; i++) {
		it->files[i] = (struct td_hrry_kv_value){
			.kind = TD_HRRY_KV_UINT64, .u64_value = it->fsize[i]};
		if (it->fsize[i] == FENCE_FILE || (int)i == it->first_plane)
			continue;
		it->names[i] = malloc(it->ent.name.len + 8);
		if (!it->names[i])
			return -ENOMEM;
		snprintf(it->names[i], it->ent.name.len + 8, "%.*s#%u",
			 (int)it->ent.name.len, it->ent.name.ptr, i);
	}
	kv_add(sv, it);
	return 1;
}

/*
 * Room for the whole KV section (the two file keys, then at most 6 per
 * version), filled as the versions are prepared; the two file keys now.
 */
static int kv_init(struct save *sv, uint64_t next_version)
{
	size_t n = 2 + (size_t)F_COUNT_ * sv->n;

	sv->kv = calloc(n, sizeof(*sv->kv));
	sv->kv_order = calloc(n, sizeof(*sv->kv_order));
	if (!sv->kv || !sv->kv_order)
		return -ENOMEM;
	sv->kv[0] = (struct td_hrry_kv_entry){
		KV_FORMAT, strlen(KV_FORMAT),
		{.kind = TD_HRRY_KV_UINT64, .u64_value = SNAP_FORMAT}};
	sv->kv[1] = (struct td_hrry_kv_entry){
		KV_NEXT, strlen(KV_NEXT),
		{.kind = TD_HRRY_KV_UINT64, .u64_value = next_version}};
	sv->nkv = 2;
	return 0;
}

static void save_start(void)
{
	struct td__store_info si = {0};
	struct td_hrry_err e = {0};
	struct save *sv;
	int rc;

	sv = calloc(1, sizeof(*sv));
	if (!sv) {
		td__log(TD_LOG_ERROR, "snapshot: out of memory");
		return;
	}
	cur = sv;
	td__snap.dirty = false;
	td__snap.last_ms = uv_now(td__snap.d->loop);
	sv->t0 = td__snap_now_ms();
	sv->fd = sv->dfd = -1;
	td__store_info(&si);
	rc = td__store_snap_hold(hold_ref, sv);
	if (rc < 0) {
		save_fail(sv, rc, "holding the versions");
		goto fail;
	}
	/* items: zeroed, their pages touched only as each is prepared */
	sv->items = calloc(sv->n ? sv->n : 1, sizeof(*sv->items));
	sv->ents = calloc(sv->records ? sv->records : 1, sizeof(*sv->ents));
	if (!sv->items || !sv->ents || kv_init(sv, si.next_version) < 0) {
		save_fail(sv, -ENOMEM, "out of memory");
		goto fail;
	}
	/* made anew: never written through a link, a FIFO or a file
	 * someone left there (a folder there fails with EEXIST) */
	if (unlink(td__snap.tmp) < 0 && errno != ENOENT)
		td__log(TD_LOG_DEBUG, "snapshot: unlink %s: %s", td__snap.tmp,
			strerror(errno));
	sv->fd = open(td__snap.tmp,
		      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		      0600);
	if (sv->fd < 0) {
		save_fail(sv, -errno, "cannot create %s", td__snap.tmp);
		goto fail;
	}
	sv->dfd = open(td__snap.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sv->dfd < 0) {
		save_fail(sv, -errno, "cannot open the folder %s",
			  td__snap.dir);
		goto fail;
	}
	td__log(TD_LOG_INFO, "snapshot: saving %zu tensors to %s (%s)",
		sv->n, td__snap.path, td__io_name());
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
	td__snap.timer_on = false;
	if (td__snap.dirty && !cur)
		save_start();
}

static void arm(void)
{
	uint64_t now, at;

	if (!td__snap.on || td__snap.final || td__snap.timer_on || cur)
		return;
	now = uv_now(td__snap.d->loop);
	at = td__snap.last_ms + (td__snap.interval_ms > td__snap.backoff_ms
					 ? td__snap.interval_ms
					 : td__snap.backoff_ms);
	td__snap.timer_on = true;
	uv_timer_start(&td__snap.timer, on_timer, at > now ? at - now : 0, 0);
}

void td__snapshot_dirty(const char *name, size_t len)
{
	/* a name the snapshot leaves out changes nothing in it: a stream
	 * of frames under --snapshot-skip makes no save */
	if (!td__snap.on || (name && !td__snapshot_keeps(name, len)))
		return;
	td__snap.dirty = true;
	arm();
}

void td__snapshot_metrics(FILE *f)
{
	if (!td__snap.on)
		return;
	fprintf(f,
		"# HELP tensord_snapshot_saves_total Snapshot saves by "
		"result.\n# TYPE tensord_snapshot_saves_total counter\n"
		"tensord_snapshot_saves_total{result=\"ok\"} %" PRIu64 "\n"
		"tensord_snapshot_saves_total{result=\"failed\"} %" PRIu64
		"\n# HELP tensord_snapshot_last_save_timestamp_seconds When "
		"the last whole save ended (0: none yet).\n"
		"# TYPE tensord_snapshot_last_save_timestamp_seconds gauge\n"
		"tensord_snapshot_last_save_timestamp_seconds %" PRIu64
		".%03u\n",
		td__snap.saves_ok, td__snap.saves_failed,
		td__snap.last_end_ms / 1000,
		(unsigned)(td__snap.last_end_ms % 1000));
	fprintf(f,
		"# HELP tensord_snapshot_last_save_tensors Tensors the last "
		"whole save wrote.\n"
		"# TYPE tensord_snapshot_last_save_tensors gauge\n"
		"tensord_snapshot_last_save_tensors %" PRIu64 "\n"
		"# HELP tensord_snapshot_last_save_bytes Plane bytes the last "
		"whole save wrote.\n"
		"# TYPE tensord_snapshot_last_save_bytes gauge\n"
		"tensord_snapshot_last_save_bytes %" PRIu64 "\n"
		"# HELP tensord_snapshot_last_save_duration_seconds How long "
		"the last whole save took.\n"
		"# TYPE tensord_snapshot_last_save_duration_seconds gauge\n"
		"tensord_snapshot_last_save_duration_seconds %" PRIu64
		".%03u\n"
		"# HELP tensord_snapshot_unsaved 1 while the store holds a "
		"change of a kept name the snapshot file does not.\n"
		"# TYPE tensord_snapshot_unsaved gauge\n"
		"tensord_snapshot_unsaved %d\n",
		td__snap.last_tensors, td__snap.last_bytes,
		td__snap.last_took_ms / 1000,
		(unsigned)(td__snap.last_took_ms % 1000),
		td__snap.dirty || cur);
}

static bool save_busy(void *arg)
{
	(void)arg;
	return cur != NULL;
}

void td__snap_save_final(void)
{
	td__snap.final = true; /* no more timed saves */
	if (td__snap.timer_on)
		uv_timer_stop(&td__snap.timer);
	td__snap.timer_on = false;
	/* a save of an older state gives way to the final one */
	if (cur && td__snap.dirty && cur->phase == PH_WRITE)
		cur->abort = true;
	td__snap_run_while(save_busy, NULL);
	if (td__snap.dirty) {
		td__log(TD_LOG_INFO, "snapshot: final save to %s",
			td__snap.path);
		save_start();
		td__snap_run_while(save_busy, NULL);
	}
}
