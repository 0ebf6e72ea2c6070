/* SPDX-License-Identifier: MIT */
/*
 * What the snapshot files share (docs/snapshot.md), included by them
 * only: snapshot.c (start, stop), snapshot-save.c (a save and when it
 * runs), snapshot-restore.c (reading a snapshot back at start), on top of
 * snapshot-buf.c (the settings and state, the bounce buffers, reading and
 * copying through them from the loop) and snapshot-map.c (how a version
 * maps to Hurray tensors and KV keys). Not installed.
 */
#ifndef TD_DAEMON_SNAPSHOT_INT_H
#define TD_DAEMON_SNAPSHOT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "blob.h"
#include "hrry.h"
#include "io.h"
#include "snapshot.h"

#define CHUNK (1u << 20) /* bytes per read/write request, per buffer */
#define SLOTS 16          /* bounce buffers: what can be in flight */
#define EXTEND_USEC 30000000ull /* start/stop timeout extension */

/* KV keys (docs/snapshot.md) */
#define KV_FORMAT "tensord.snapshot"
#define KV_NEXT "tensord.next_version"
#define KEY_PREFIX "tensord:"
/*
 * 2: every version has "#crc" (its KV values' CRC-32C, then one per MiB
 * of each plane). 1 (before them) is still read, unchecked.
 */
#define SNAP_FORMAT 2
#define SNAP_FORMAT_OLD 1
#define FENCE_FILE UINT64_MAX /* "#files" value of the fence's entry */

/* ---- snapshot-map.c: a version as Hurray tensors and KV keys ---- */

enum field { F_VERSION, F_FLAGS, F_BLOB, F_META, F_FILES, F_CRC, F_COUNT_ };
extern const char *const td__snap_field_names[F_COUNT_];

/*
 * "#crc" (docs/snapshot.md, "Checksums"): 4 bytes (u32 LE) for the
 * version's KV values, then 4 per CHUNK of each plane's file in fd-table
 * order (the fence has none). td__snap_crc_len: its length for these
 * file sizes; td__snap_meta_crc: the first value.
 */
uint64_t td__snap_crc_len(const uint64_t *fsize, uint32_t n);
/* The bytes of "#crc" one plane of size bytes takes: 4 per CHUNK. */
static inline uint64_t td__snap_plane_crcs(uint64_t size)
{
	return 4 * ((size + CHUNK - 1) / CHUNK);
}
uint32_t td__snap_meta_crc(const char *name, size_t name_len,
			   uint64_t version, uint64_t flags,
			   const uint8_t *blob, uint32_t blob_len,
			   const uint8_t *meta, uint32_t meta_len,
			   const uint64_t *fsize, uint32_t n);

/* Which version and field a key names: F_COUNT_ when not ours. */
enum field td__snap_key_field(const struct td_hrry_kv_entry *k,
			      const char **name, size_t *name_len);
/*
 * Would this version's planes (fsize: each fd-table entry's file size)
 * be the bytes of one dense tensor? Returns the fd-table entry to write
 * with dtype and shape (*type, *ndim, shape filled), or -1.
 */
int td__snap_dense(const struct td_blob_view *bv, const uint64_t *fsize,
		   uint8_t *type, uint32_t *ndim, uint64_t *shape);

/* ---- snapshot-buf.c: settings, state, bounce buffers ---- */

struct td__snap_state {
	bool on;
	struct td__daemon *d;
	char *path, *tmp, *dir;
	int lock_fd; /* FILE.lock, flock'ed: one daemon per snapshot */
	/*
	 * FILE.lock's second line, "next_version N": no version number
	 * at or past N was handed out (td__snapshot_reserve). reserved:
	 * N as the last daemon left it.
	 */
	uint64_t reserved;
	uint64_t interval_ms;
	uv_timer_t timer;
	bool timer_on;
	bool dirty;
	uint64_t last_ms; /* when the last save started */
	/*
	 * After a save that failed, or that left a version out for its
	 * fence: the next waits this long at least (1 s, doubled each time
	 * up to SNAP_BACKOFF_MAX_MS; 0 after a whole save), so a disk that
	 * refuses, or a fence that never signals, is not hammered, even
	 * with --snapshot-interval 0.
	 */
	uint64_t backoff_ms;
	uint64_t kill_at, steps; /* test knob, TD_TEST_SNAPSHOT_KILL_AT */
	/* test knob, TD_TEST_SNAPSHOT_RESTORE_KILL_AT: SIGKILL once this
	 * many versions are restored (a crash during a restore) */
	uint64_t restore_kill_at;
	bool stop_asked; /* SIGTERM/SIGINT while restoring */
	/*
	 * The fd store restored, but not every version its image named
	 * (a stored fd missing: over FileDescriptorStoreMax, say): only
	 * those are read from the snapshot (td__fdstore_missed).
	 */
	bool only_missed;
	/*
	 * Versions the restore brought back of names the snapshot no
	 * longer keeps (--snapshot-prefix, --snapshot-skip changed since
	 * the save): said once; the next save leaves them out.
	 */
	unsigned unkept;
	/* for /metrics (td__snapshot_metrics): saves whole and failed;
	 * the last whole one's end (CLOCK_REALTIME, ms; 0: none yet),
	 * tensors, plane bytes and time taken */
	uint64_t saves_ok, saves_failed;
	uint64_t last_end_ms, last_tensors, last_bytes, last_took_ms;
	bool final;      /* stopping: only the final save */
	bool final_failed; /* ... and it failed: the exit status says so */
};
extern struct td__snap_state td__snap;

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
	/*
	 * A copy with crc_at set: crc is the CRC-32C of the bytes read,
	 * taken between its read and its write; crc_at is the caller's
	 * (where the save stores it, where the restore finds the expected).
	 */
	uint8_t *crc_at;
	uint32_t crc;
	void (*done)(struct slot *sl, int64_t res);
	void *arg;
};

int td__snap_pool_init(void);
void td__snap_pool_fini(void);
/* A free buffer, or NULL when all SLOTS are in flight. */
struct slot *td__snap_slot_get(void);
void td__snap_slot_put(struct slot *sl);
/* Write sl's len bytes to fd at off; done(sl, bytes or -errno) later. */
void td__snap_slot_write(struct slot *sl, int fd, uint64_t off, size_t len,
			 void (*done)(struct slot *, int64_t), void *arg);
/*
 * Copy len (<= CHUNK) bytes from src at soff to dst at doff through sl;
 * crc_at: see struct slot (NULL: no checksum).
 */
void td__snap_slot_copy(struct slot *sl, int src, uint64_t soff, int dst,
			uint64_t doff, size_t len, uint8_t *crc_at,
			void (*done)(struct slot *, int64_t), void *arg);
uint64_t td__snap_now_ms(void);
/*
 * Run the loop while busy(arg) (restore, final save), telling systemd
 * every second that we are still at it.
 */
void td__snap_run_while(bool (*busy)(void *), void *arg);
/*
 * Read [off, off + len) of fd into buf through the I/O engine, CHUNK
 * bytes per request, all queued at once. 0, -ENODATA (short) or -errno.
 */
int td__snap_read_range(int fd, void *buf, uint64_t len, uint64_t off);
/*
 * Copy [off, off + len) of src to dst at dst_off through the buffers,
 * all of them in flight. crcs, when not NULL: the CRC-32C (u32 LE) of
 * each CHUNK of the range, checked as it goes. 0, -ENODATA (short),
 * -EBADMSG (a checksum differs; *bad_at: the range's byte where that
 * CHUNK starts) or -errno; *src_failed (when not NULL): whether that
 * -errno came from reading src (not from writing dst).
 */
int td__snap_copy_range(int src, uint64_t off, int dst, uint64_t dst_off,
			uint64_t len, const uint8_t *crcs, uint64_t *bad_at,
			bool *src_failed);

/* ---- snapshot-save.c ---- */

/*
 * The stop: no more timed saves, a save of an older state abandoned,
 * then the final save when anything changed (the loop runs until it is
 * on disk).
 */
void td__snap_save_final(void);

/* ---- snapshot-restore.c ---- */

/* Read the snapshot back into the store (before the server starts). */
/* The snapshot back (snapshot-restore.c): 0, or -errno when the file is
 * there but cannot be read (the daemon does not start then). */
int td__snap_restore(void);

#endif
