/* SPDX-License-Identifier: MIT */
/*
 * The fd store's state image (proto/state.h; fdstore.c says what it is
 * for and when it is written), encoded into a buffer kept from one image
 * to the next and written into the older of the two slots.
 *
 * After a change it is written over loop turns: IMAGE_TURN names, or
 * IMAGE_TURN_BYTES of image, a turn, each turn's bytes written into the
 * slot as they are encoded, clients served in between (it was one turn
 * of 3.4 ms at 16 000 names, every 100 ms while the store changed). Each
 * entry is its name as the walk found it: a change behind the walk is
 * the next image's (the change arms it), and a removal queued while the
 * walk goes waits for that next image too, since the walk may have
 * named the fd before its version went (fdstore.c's image_done). The
 * header (count, format, bounds) and the checksum are written last: a
 * slot caught half written fails its checksum, and the other, the
 * newest image, is read, as for a torn write.
 *
 * Written whole, in one call, where the next start must find exactly
 * the store as it is (the stop), or must find it at once (a restore, a
 * block of version numbers put on record).
 */
#include "fdstore-int.h"
#include "sd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IMAGE_TURN 1024
#define IMAGE_TURN_BYTES (256u << 10)

#define W (&td__fs.walk)

/* the fd store's state, fdstore.c's and this file's (fdstore-int.h) */
struct td__fdstore_state td__fs = {.slot = {-1, -1}, .next_id = 1};

static void (*image_done)(uint64_t seq); /* fdstore.c's */

/* names a turn: IMAGE_TURN, or $TENSORD_TEST_IMAGE_TURN (tests: many
 * turns from a small store) */
static size_t turn_names(void)
{
	static size_t n;
	const char *e;

	if (!n) {
		e = getenv("TENSORD_TEST_IMAGE_TURN");
		n = e && atoi(e) > 0 ? (size_t)atoi(e) : IMAGE_TURN;
	}
	return n;
}

/*
 * A version with an fd not stored (a recyclable version, whose bytes are
 * not sealed, or a push that failed) is named without fds (format 2): the
 * next start reads it from the snapshot, which held it at the last save.
 * Left out, it was not read from there, and the next save dropped it
 * from the snapshot too (a stream's latest version was lost across
 * `systemctl restart`, though the final save at the stop held it).
 */
static const struct td_state_entry *entry_bare(const struct td_state_entry *e,
					       struct td_state_entry *bare)
{
	for (uint32_t i = 0; i < e->fd_count; i++)
		if (e->fd_ids[i] == 0) {
			*bare = *e;
			bare->fd_count = 0;
			return bare;
		}
	return e;
}

static int size_entry(void *arg, const struct td_state_entry *ent)
{
	struct td_state_entry bare;

	*(size_t *)arg += td_state_entry_len(entry_bare(ent, &bare));
	return 0;
}

/* one entry of the walk; > 0 once the turn's bytes are spent */
static int walk_entry(void *arg, const struct td_state_entry *ent)
{
	struct td_state_entry bare;
	int rc = td_state_encode_entry(W, entry_bare(ent, &bare));

	if (rc < 0)
		return rc;
	return W->wr.off >= *(size_t *)arg;
}

/*
 * A failed image write is logged once until one succeeds again: a store
 * that keeps changing retries every 100 ms (a full tmpfs or memory
 * cgroup, RLIMIT_FSIZE), and a line each time would flood the journal.
 */
static int image_failed(const char *what, int rc)
{
	if (td__fs.failed++ == 0)
		td__log(TD_LOG_ERROR, "state image: %s: %s (retried at each "
				      "change; said again once one is written)",
			what, strerror(-rc));
	return rc;
}

static uint64_t next_version(void)
{
	struct td__store_info si = {0};

	td__store_info(&si);
	return si.next_version > td__fs.reserved ? si.next_version
						 : td__fs.reserved;
}

/* The kept buffer sized for the store as it is, with room to grow. */
static int size_buffer(void)
{
	size_t cap = TD_STATE_HDR_LEN + TD_STATE_SUM_LEN;
	uint8_t *buf;

	td__store_each(size_entry, &cap);
	cap += cap / 4;
	buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	free(td__fs.img);
	td__fs.img = buf;
	td__fs.img_cap = cap;
	return 0;
}

/* The walk (re)started from the first name, into the kept buffer. */
static int begin(void)
{
	struct td_state_hdr h = {td__fs.generation + 1, next_version(),
				 td__fs.next_id, 0};
	int rc = -ENOBUFS;

	if (td__fs.slot[td__fs.cur ^ 1] < 0)
		return -EBADF;
	if (td__fs.img)
		rc = td_state_encode_begin(W, td__fs.img, td__fs.img_cap, &h);
	if (rc == -ENOBUFS) {
		rc = size_buffer();
		if (rc == 0)
			rc = td_state_encode_begin(W, td__fs.img,
						   td__fs.img_cap, &h);
	}
	if (rc < 0)
		return image_failed("encode", rc);
	td__fs.walking = true;
	td__fs.walk_sent = TD_STATE_HDR_LEN; /* the header goes last */
	td__fs.walk_seq = td__fs.gone_seq;
	return 0;
}

/* bytes [from, to) of the image into the slot being written */
static int put(size_t from, size_t to)
{
	int fd = td__fs.slot[td__fs.cur ^ 1];

	while (from < to) {
		ssize_t n = pwrite(fd, td__fs.img + from, to - from,
				   (off_t)from);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return image_failed("write", n < 0 ? -errno : -EIO);
		from += (size_t)n;
	}
	return 0;
}

/* The rest, the header and the checksum: the slot is the newest. */
static int finish(void)
{
	int fd = td__fs.slot[td__fs.cur ^ 1];
	int64_t len;
	int rc;

	td_state_encode_raise(W, next_version(), td__fs.next_id);
	len = td_state_encode_finish(W);
	if (len < 0)
		return image_failed("encode", (int)len);
	rc = put(td__fs.walk_sent, (size_t)len);
	if (rc == 0)
		rc = put(0, TD_STATE_HDR_LEN);
	if (rc < 0)
		return rc;
	if (ftruncate(fd, (off_t)len) < 0)
		return image_failed("truncate", -errno);
	td__fs.generation++;
	td__fs.cur ^= 1;
	td__fs.walking = false;
	td__d->stats.state_images++;
	if (td__fs.failed)
		td__log(TD_LOG_INFO, "state image written again, after %u "
				     "failed attempts",
			td__fs.failed);
	td__fs.failed = 0;
	if (td__fs.img_cap > (1u << 20) && td__fs.img_cap / 4 > (size_t)len) {
		/* the store shrank: the next image sizes a buffer anew */
		free(td__fs.img);
		td__fs.img = NULL;
		td__fs.img_cap = 0;
	}
	image_done(td__fs.walk_seq);
	return 1;
}

static void drop(void)
{
	td__fs.walking = false;
	if (td__fs.walker_on) {
		uv_idle_stop(&td__fs.walker);
		td__fs.walker_on = false;
	}
}

/*
 * One turn of the walk, of up to max names: 1 when the image is written,
 * 0 when more turns are needed, -errno (logged, the walk dropped).
 */
static int step(size_t max)
{
	size_t stop = max == SIZE_MAX ? SIZE_MAX : W->wr.off + IMAGE_TURN_BYTES;
	bool end = false;
	int64_t n;
	int rc;

	td__d->stats.state_image_turns++;
	/* versions and fds made since the walk began are below these */
	td_state_encode_raise(W, next_version(), td__fs.next_id);
	n = td__store_each_after(W->count ? &W->prev : NULL, max, walk_entry,
				 &stop, &end);
	if (n == -ENOBUFS) {
		/* the store outgrew the kept buffer meanwhile: sized
		 * again, from the first name */
		free(td__fs.img);
		td__fs.img = NULL;
		td__fs.img_cap = 0;
		rc = begin();
	} else if (n < 0) {
		rc = image_failed("encode", (int)n);
	} else {
		rc = put(td__fs.walk_sent, TD_STATE_HDR_LEN + W->wr.off);
		if (rc == 0)
			td__fs.walk_sent = TD_STATE_HDR_LEN + W->wr.off;
		if (rc == 0 && end)
			rc = finish();
	}
	if (rc < 0)
		drop();
	return rc;
}

int td__fs_image_now(void)
{
	int rc;

	drop();
	td__fs.again = false; /* this one names every change so far */
	rc = begin();
	while (rc == 0)
		rc = step(SIZE_MAX);
	return rc < 0 ? rc : 0;
}

static void on_walker(uv_idle_t *h)
{
	(void)h;
	if (step(turn_names()) == 0)
		return;
	drop();
	if (td__fs.again) {
		/* the store changed FLUSH_MS or more after this one began */
		td__fs.again = false;
		td__fs_image_walk();
	}
}

void td__fs_image_walk(void)
{
	if (td__fs.walking) {
		td__fs.again = true;
		return;
	}
	if (begin() < 0 || step(turn_names()) != 0)
		return;
	uv_idle_start(&td__fs.walker, on_walker);
	td__fs.walker_on = true;
}

void td__fs_image_init(uv_loop_t *loop, void (*done)(uint64_t seq))
{
	image_done = done;
	uv_idle_init(loop, &td__fs.walker);
}

void td__fs_image_fini(void)
{
	drop();
	uv_close((uv_handle_t *)&td__fs.walker, NULL);
}

void td__fs_image_free(void)
{
	td__fs.walking = false;
	free(td__fs.img);
	td__fs.img = NULL;
	td__fs.img_cap = 0;
}
