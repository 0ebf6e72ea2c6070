/* SPDX-License-Identifier: MIT */
/*
 * Snapshots (snapshot.c and the snapshot-*.c files under it): every
 * current version in a HRRYFILE, written from the loop without stalling
 * it and read back at start (docs/snapshot.md). Not installed.
 */
#ifndef TD_DAEMON_SNAPSHOT_H
#define TD_DAEMON_SNAPSHOT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "daemon.h"
#include "state.h"

/* ---- snapshot.c, snapshot-save.c ---- */

#define TD__SNAPSHOT_INTERVAL_S 30 /* --snapshot-interval default */

/*
 * Use path as the snapshot: pick the file I/O engine (io.h), restore
 * from it unless the fd store already restored (fdstore_used: the fd
 * store is newer; then only the versions its image named and did not
 * bring back), let the fd store write images again
 * (td__fdstore_release), and save after changes at most every
 * interval_ms. Before the server starts. -errno for what the operator
 * must fix (a folder that does not exist, a bad TENSORD_IO, a snapshot
 * that cannot be opened or read, or of a newer format); a corrupt
 * snapshot is logged, moved aside and the daemon starts empty.
 */
int td__snapshot_start(struct td__daemon *d, const char *path,
		       uint64_t interval_ms, bool fdstore_used);
/*
 * The set of current versions changed, by a change of name (len bytes;
 * NULL: of any name): a save is due when the snapshot keeps that name
 * (a no-op without --snapshot, or for a name it does not keep).
 */
void td__snapshot_dirty(const char *name, size_t len);
/*
 * Whether a snapshot keeps name (len bytes): under a --snapshot-prefix
 * (or none given) and under no --snapshot-skip (docs/snapshot.md,
 * "Which names"). Also without --snapshot, by the options alone.
 */
bool td__snapshot_keeps(const char *name, size_t len);
/*
 * The snapshot's lines of /metrics into f (docs/zarr.md, "/metrics"):
 * saves by result, when the last whole one ended and what it wrote,
 * whether the store holds changes the file does not. Nothing without
 * --snapshot.
 */
void td__snapshot_metrics(FILE *f);
/*
 * Put on record, in FILE.lock, that version numbers up to a block
 * beyond next may be handed out, before any is: a restart after a
 * SIGKILL or a power loss counts on from there, not from the last
 * save's counter, so no number is handed out twice
 * (docs/snapshot.md, "Version numbers"). Returns the first number not
 * on record (UINT64_MAX: no record is kept, never asked again).
 */
uint64_t td__snapshot_reserve(uint64_t next);
/*
 * Clean stop, after the peers are gone and before the store is freed:
 * the final save when anything changed since the last one (the loop runs
 * until it is on disk), then the I/O engine is closed. Idempotent.
 * Returns -1 when that final save failed (logged; the daemon's exit
 * status is then 1: docs/snapshot.md, "Crash safety"), else 0.
 */
int td__snapshot_fini(void);

/* ---- store.c: what a save holds ---- */

/* One current version held for a snapshot. */
struct td__snap_ver {
	struct td_state_entry ent; /* views valid while held; no fd ids */
	int fds[TD_STATE_MAX_FDS]; /* borrowed, valid while held */
	void *ref;                 /* for td__store_snap_unref(), once */
};

/*
 * Call fn for every current version in name order, each referenced like a
 * lease first (kept intact, never evicted or recycled) - fn owns that
 * reference and drops it with td__store_snap_unref(). Stops at and
 * returns the first negative return of fn, else 0.
 */
int td__store_snap_hold(int (*fn)(void *arg, const struct td__snap_ver *sv),
			void *arg);
void td__store_snap_unref(void *ref);
/* A held version's view again (valid while it is held). */
void td__store_snap_view(void *ref, struct td__snap_ver *sv);

#endif
