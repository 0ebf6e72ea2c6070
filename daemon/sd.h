/* SPDX-License-Identifier: MIT */
/*
 * systemd integration (sd.c), the fd store and state image (fdstore.c),
 * and the store's side of persistence (store.c). Not installed. Kept out
 * of daemon.h so the service plumbing stays in one place.
 */
#ifndef TD_DAEMON_SD_H
#define TD_DAEMON_SD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon.h"
#include "state.h"

/* Every fd-store name of ours starts with this (FDNAME=, LISTEN_FDNAMES). */
#define TD__FDSTORE_PREFIX "td."

/* ---- sd.c ---- */

/*
 * Note which fds 3..3+$LISTEN_FDS are open and make them CLOEXEC. First
 * thing in main(), before the daemon opens any fd of its own: an fd it
 * opens later may take a number the passing process left unused, and
 * must not be mistaken for a passed one.
 */
void td__sd_claim(void);

/*
 * Read $NOTIFY_SOCKET, $WATCHDOG_USEC/$WATCHDOG_PID and the socket
 * activation variables (then unset them). Of the fds td__sd_claim()
 * found open, those named "td.*" go to passed (td__fdstore_passed:
 * ownership moves); the first listening AF_UNIX SOCK_SEQPACKET socket is
 * kept for td__sd_take_listen_fd(); others are closed. 0 or -errno.
 */
int td__sd_init(struct td__daemon *d,
		void (*passed)(int fd, const char *name));
/* The socket-activated listening socket (ownership moves), or -1. */
int td__sd_take_listen_fd(void);
/*
 * Without one, the first passed listening socket of another kind (a
 * socket unit's ListenStream=), described, or NULL: the daemon then
 * refuses to start rather than bind a socket of its own, which the
 * activated socket's clients would never reach.
 */
const char *td__sd_wrong_listener(void);
/* Should tensors go to the fd store? (a notify socket, FDSTORE not 0) */
bool td__sd_fdstore_on(void);
/*
 * Send one notify datagram (printf-style text, fds borrowed, at most 4).
 * 0 when sent or when there is no notify socket, else -errno (logged).
 */
int td__sd_notify(const int *fds, unsigned nfds, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* READY=1 with the first STATUS=; starts the watchdog/status timer. */
void td__sd_ready(struct td__daemon *d);
/* STATUS= again when tensors/bytes/clients changed. */
void td__sd_status(struct td__daemon *d);
/*
 * Around a SIGHUP's reload (sd_notify(3)): RELOADING=1 with
 * MONOTONIC_USEC= before it, READY=1 with the STATUS= after it, refused
 * or not (the daemon goes on either way), so that a manager waiting for
 * the reload (Type=notify-reload, systemctl reload) sees it end. Only
 * between td__sd_ready() and td__sd_stopping(): a SIGHUP while the daemon
 * starts (the snapshot restore's nested loop runs) or stops (the final
 * save's) reloads without a word to the manager, which waits for the
 * start's own READY=1 or for the exit.
 */
void td__sd_reloading(void);
void td__sd_reloaded(struct td__daemon *d);
/* STOPPING=1; stops the timer. */
void td__sd_stopping(struct td__daemon *d);
/* Close the notify socket (after the loop is closed). */
void td__sd_fini(void);

/* ---- fdstore.c ---- */

/* A passed fd named "td.*" (ownership moves). Before restore. */
void td__fdstore_passed(int fd, const char *name);
/*
 * Restore the store from the passed fds and set up the state images.
 * Never fails the start: anything unusable is logged and dropped.
 * 1 when a state image was used (it is newer than any snapshot), else 0.
 */
int td__fdstore_restore(struct td__daemon *d);
/*
 * A version was published holding fd (borrowed): store it unless its file
 * is stored already. Returns the fd-store id (keep it for drop), or 0 when
 * the fd store is off or the push failed.
 */
uint64_t td__fdstore_add(int fd, bool plane, dev_t dev, ino_t ino);
/* A restored version holds the stored fd id (no push). 0 or -ENOMEM. */
int td__fdstore_adopt(uint64_t id, int fd, bool plane, dev_t dev, ino_t ino);
/* A version holding id went away; removed after the next image. */
void td__fdstore_drop(uint64_t id);
/* The set of current versions changed (name's, len bytes): schedule an
 * image, and a snapshot save when the snapshot keeps the name. */
void td__fdstore_dirty(const char *name, size_t len);
/*
 * The versions the restored image named but that did not come back (a
 * stored fd missing, say, which systemd dropped past
 * FileDescriptorStoreMax): how many, and whether name at version is
 * one, for the snapshot to fill in (snapshot.c). Freed with
 * td__fdstore_missed_free(), after the snapshot's start.
 */
size_t td__fdstore_missed_count(void);
bool td__fdstore_missed(const char *name, size_t len, uint64_t version);
void td__fdstore_missed_free(void);
/*
 * The snapshot is read (snapshot.c): images, held back since
 * td__fdstore_restore() when it restored none, are written again, the
 * first one now. A start that fails before leaves the images as they
 * were, so the next start reads the snapshot again.
 */
void td__fdstore_release(void);
/*
 * fn (snapshot.c's td__snapshot_reserve, NULL: none) also puts version
 * numbers on record when a block is handed out; its bound counts too.
 */
void td__fdstore_also_reserve(uint64_t (*fn)(uint64_t next));
/* Shutdown: write the final image, then keep everything stored. */
void td__fdstore_fini(void);
/* Free the table and close the image memfds (after the store is gone). */
void td__fdstore_free(void);

/* ---- store.c: persistence ---- */

/*
 * What the store tells persistence (fdstore.c registers it, so the store
 * calls no file above it): a published version holds fd (borrowed; the
 * fd-store id, or 0), a restored one holds the stored id (0 or -errno),
 * a version holding id went away, and the set of current versions
 * changed. Without one registered the store keeps nothing.
 */
struct td__store_keeper {
	uint64_t (*fd_add)(int fd, bool plane, dev_t dev, ino_t ino);
	int (*fd_adopt)(uint64_t id, int fd, bool plane, dev_t dev,
			ino_t ino);
	void (*fd_drop)(uint64_t id);
	void (*changed)(const char *name, size_t len);
	/*
	 * Put version numbers from next on record, up to the returned
	 * first number not on record (UINT64_MAX: no record is kept).
	 */
	uint64_t (*reserve)(uint64_t next);
};
void td__store_keeper_set(const struct td__store_keeper *k);

struct td__store_info {
	size_t count;          /* current versions */
	uint64_t bytes;        /* accounted plane bytes */
	uint64_t next_version; /* the daemon-wide counter */
};

void td__store_info(struct td__store_info *si);
/*
 * Call fn for every current version in name order, as an image entry
 * (views valid during the call; fd ids 0 where an fd is not stored).
 * Stops at and returns the first negative return of fn, else 0.
 */
int td__store_each(int (*fn)(void *arg, const struct td_state_entry *ent),
		   void *arg);
/*
 * The same for at most max versions, from the first name after *after
 * (NULL: from the first), or up to one for which fn returns > 0: the
 * number called, or fn's first negative return; *end (unless NULL)
 * whether the last name was reached.
 */
int64_t td__store_each_after(const struct td_wire_str *after, size_t max,
			     int (*fn)(void *arg,
				       const struct td_state_entry *ent),
			     void *arg, bool *end);
/* Raise the version counter (restore); never lowers it. */
void td__store_set_next_version(uint64_t next);
/*
 * The number of a new version (PUBLISH, a staged follow entry): the
 * counter's, after putting the numbers from it on record when the last
 * block on record is used up (keeper->reserve: the fd store's image,
 * FILE.lock), so that a restart after a crash never numbers a version
 * as one handed out before.
 */
uint64_t td__store_take_version(void);
/*
 * Version numbers put on record at a time: a restart after a crash skips
 * at most this many, and the loop pays one synchronous write of the
 * record (an image, an fdatasync of FILE.lock) per block.
 */
#define TD__VERSION_BLOCK (UINT64_C(1) << 16)
/*
 * The highest version number a state image or a snapshot may bring
 * back: beyond it only a damaged file. A followed name's bell packs a
 * version as version << 8 | entry (proto/follow.h), so no version may
 * reach 2^56; from a counter restored at 2^55, counting ten million a
 * second takes 114 years to get there.
 */
#define TD__VERSION_MAX (UINT64_C(1) << 55)
/*
 * Likewise for fd-store ids (td.fd.N, an image's next_fd_id): past it
 * the counter would wrap to 0 ("not stored") and then onto ids that are
 * stored already, and no image could be encoded again.
 */
#define TD__FD_ID_MAX (UINT64_C(1) << 62)
/*
 * Put a version back from an image entry and its fds (fd-table order,
 * consumed on success and failure), checked like a PUBLISH from a peer.
 * 0, or -errno with the reason in why.
 */
int td__store_restore(const struct td_state_entry *ent, int *fds, char *why,
		      size_t cap);

#endif
