/* SPDX-License-Identifier: MIT */
/*
 * What the fd store's files share, included by them only: fdstore.c (the
 * fds pushed and removed, the restore) and fdstore-image.c (the state
 * image, written over loop turns). Not installed.
 */
#ifndef TD_DAEMON_FDSTORE_INT_H
#define TD_DAEMON_FDSTORE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "fdtab.h"
#include "state.h"

/* A removal waiting for an image that no longer names its fd: seq, the
 * order it came in (an image begun after it may let it go). */
struct td__fs_gone {
	uint64_t id;
	uint64_t seq;
};

struct passed {
	int fd;
	char *name;
};

/* A version the image named that did not come back. */
struct missed {
	uint64_t version;
	size_t len;
	char *name;
};

struct td__fdstore_state {
	bool on;     /* the fd store is in use */
	bool frozen; /* shutting down: what is stored stays stored */
	/*
	 * No image is written while the snapshot is read into the store
	 * (no image was restored, or not all it named): an image of part
	 * of it, the empty one of the start, or one without the versions
	 * missed, would be used at the next start after a crash meanwhile,
	 * and the rest of the snapshot would never be read.
	 * td__fdstore_release() ends it.
	 */
	bool held;
	struct td__fdtab tab;
	/*
	 * The image is encoded here, kept from one write to the next: a
	 * buffer of megabytes malloc'ed for each write came as fresh pages
	 * of mmap, a page fault each (tens of µs under nested
	 * virtualisation), every 100 ms while the store changes.
	 */
	uint8_t *img;
	size_t img_cap;
	/*
	 * An image being written over loop turns (fdstore-image.c): its
	 * encoder, the bytes of it written into the slot so far, the
	 * removals queued when it began (gone_seq then), whether the store
	 * changed again meanwhile (another image after it).
	 */
	struct td_state_wr walk;
	bool walking, again;
	size_t walk_sent;
	uint64_t walk_seq;
	uv_idle_t walker;
	bool walker_on;
	/* an entry of refs 0 is not in gone[] (no memory): purge */
	bool unlisted;
	uint64_t next_id;
	/*
	 * Removals to send: gone[0, nsend) are named by no image written
	 * any more and go out REMOVE_PER_TURN per loop turn (remover);
	 * gone[nsend, ngone) wait for the next image write.
	 */
	struct td__fs_gone *gone;
	size_t ngone, gone_cap, nsend;
	uint64_t gone_seq; /* the last one's seq */
	uv_idle_t remover;
	bool remover_on;
	int slot[2];
	int cur; /* slot of the newest image */
	uint64_t generation;
	struct passed *passed; /* from LISTEN_FDS, until restore */
	size_t npassed, passed_cap;
	uv_timer_t timer;
	bool timer_init, armed;
	uint64_t last_ms;
	unsigned failed; /* image writes failed in a row */
	/*
	 * No version number at or past it was handed out: the images say
	 * so (their next_version is at least this), for a restart after a
	 * crash that lost the last 100 ms (reserve()). 0 at the stop.
	 */
	uint64_t reserved;
	struct missed *missed; /* sorted by version once the restore ends */
	size_t nmissed;
};

extern struct td__fdstore_state td__fs;

/* ---- fdstore-image.c ---- */

/*
 * The image written now, whole, in this call (a restore, a block of
 * version numbers put on record, the stop): 0 or -errno (logged). A walk
 * going is dropped: this one names the store as it is now.
 */
int td__fs_image_now(void);
/*
 * An image begun, written over as many loop turns as the store needs
 * (td__fs_image_turn names a turn), clients served in between; one
 * going is marked to be followed by another. Returns at once.
 */
void td__fs_image_walk(void);
/* done: called once an image is written, with the removals it allows
 * (those queued at or before seq): fdstore.c's, handed down, as this
 * file sits below it */
void td__fs_image_init(uv_loop_t *loop, void (*done)(uint64_t seq));
void td__fs_image_fini(void); /* the walk dropped, its handle closed */
void td__fs_image_free(void);

#endif
