/* SPDX-License-Identifier: MIT */
/*
 * .tgm messages of a stream, one at a time (tgm-file.h): proto's windowed
 * scan (§12) fed from a buffer that holds the bytes from the end of the
 * last message found on, read as the scan asks for them.
 *
 * The scan needs the input's length (step 3: a message must fit; the
 * loop: 48 bytes must be left), which a stream tells only at its end.
 * Until then the scan is told a length it never reaches: a decision it
 * makes that way is the one it makes knowing the length, unless it asks
 * for bytes past the end (found then) or finds a message within 48 bytes
 * of it (checked before the message is given out). Once the end is
 * known, the scan starts again where the last message ended, told the
 * length: its decisions from one offset on depend on the bytes from
 * there on only, which the buffer still holds.
 */
#include "tgm-file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "input.h"
#include "output.h"
#include "tensorctl.h"

/* What the scan is told a stream's length is until its end is read. */
#define UNKNOWN_LEN ((uint64_t)1 << 62)
/* The most of a search's bytes read before it looks again. */
#define STEP ((uint64_t)1 << 20)

void tgm_stream_init(struct tgm_stream *st, struct tctl_in *in, uint64_t max)
{
	memset(st, 0, sizeof(*st));
	st->in = in;
	st->max = max;
	st->spool = -1;
	td_tgm_scan_begin(&st->sc, UNKNOWN_LEN, UINT64_MAX);
}

void tgm_stream_fini(struct tgm_stream *st)
{
	if (st->spool < 0) {
		free(st->buf);
	} else {
		if (st->buf)
			munmap(st->buf, (size_t)st->cap);
		close(st->spool);
		st->spool = -1;
	}
	st->buf = NULL;
	st->cap = 0;
}

/* The buffer made want bytes (> cap) long: TCTL_OK or reported. */
static int grow(struct tgm_stream *st, uint64_t want)
{
	void *nb;
	int err;

	if (want > SIZE_MAX)
		return tctl_fail(TCTL_REFUSED, "io", ENOMEM,
		                 "%s: out of memory", st->in->path);
	if (st->spool < 0) {
		nb = realloc(st->buf, (size_t)want);
		if (!nb)
			return tctl_fail(TCTL_REFUSED, "io", ENOMEM,
			                 "%s: out of memory", st->in->path);
		st->buf = nb;
		st->cap = want;
		return TCTL_OK;
	}
	/* the room first: a page of a sparse file written through the
	 * mapping on a full disk is a SIGBUS, an fallocate an ENOSPC */
	err = posix_fallocate(st->spool, (off_t)st->cap,
	                      (off_t)(want - st->cap));
	if (err)
		return tctl_spool_fail(st->in, err);
	nb = st->buf ? mremap(st->buf, (size_t)st->cap, (size_t)want,
	                      MREMAP_MAYMOVE)
	             : mmap(NULL, (size_t)want, PROT_READ | PROT_WRITE,
	                    MAP_SHARED, st->spool, 0);
	if (nb == MAP_FAILED)
		return tctl_spool_fail(st->in, errno);
	st->buf = nb;
	st->cap = want;
	return TCTL_OK;
}

int tgm_stream_spool(struct tgm_stream *st)
{
	uint8_t *held = st->buf;
	uint64_t have = st->have;
	int rc;

	if (st->spool >= 0)
		return TCTL_OK;
	rc = tctl_spool_open(st->in, &st->spool);
	if (rc)
		return rc;
	st->buf = NULL;
	st->cap = 0;
	rc = grow(st, have > STEP ? have : STEP);
	if (!rc)
		memcpy(st->buf, held, (size_t)have);
	else
		st->have = 0; /* nothing is held any more */
	free(held);
	return rc;
}

/*
 * The stream held up to its offset end, or to its end: TCTL_OK or
 * reported. More than max bytes held at once (from the end of the last
 * message found on) is refused.
 */
static int fill_to(struct tgm_stream *st, uint64_t end)
{
	while (!st->eof && st->off + st->have < end) {
		uint64_t want = end - st->off, got;
		int rc;

		/* one byte over the cap tells "more" from "exactly it" */
		if (want > st->max)
			want = st->max < UINT64_MAX ? st->max + 1 : UINT64_MAX;
		/* the buffer doubles at most, for a read to the end */
		if (want - st->have > (st->have > STEP ? st->have : STEP))
			want = st->have + (st->have > STEP ? st->have : STEP);
		if (want > st->cap && (rc = grow(st, want)) != TCTL_OK)
			return rc;
		rc = tctl_in_read(st->in, st->buf + st->have, want - st->have,
		                  &got);
		if (rc)
			return rc;
		st->eof = got < want - st->have;
		st->have += got;
		if (st->have > st->max) {
			char s[32];

			return tctl_fail(TCTL_REFUSED, "input", EFBIG,
			                 "%s: more than %s (a stream is read up "
			                 "to --max-bytes%s)",
			                 st->in->path, tctl_size(s, st->max),
			                 st->found ? ", from the end of one "
			                             "message to the end of "
			                             "the next"
			                           : "");
		}
	}
	return TCTL_OK;
}

int tgm_stream_head(struct tgm_stream *st, uint64_t n)
{
	return fill_to(st, n);
}

/* The end is read: scan again from the last message's end, knowing. */
static void restart(struct tgm_stream *st)
{
	st->exact = true;
	st->vbase = st->done;
	td_tgm_scan_begin(&st->sc, st->off + st->have - st->done, UINT64_MAX);
}

int tgm_stream_next(struct tgm_stream *st, struct td_tgm_span *sp,
                    struct tgm_src *src)
{
	/* what the last message took is done with: the bytes from its
	 * end on go to the buffer's start */
	if (st->done > st->off) {
		uint64_t drop = st->done - st->off;

		memmove(st->buf, st->buf + drop, (size_t)(st->have - drop));
		st->have -= drop;
		st->off = st->done;
	}
	for (;;) {
		struct td_tgm_span v;
		int rc;

		/* the window: every byte held (st->off >= st->vbase) */
		td_tgm_scan_window(&st->sc, st->buf, st->off - st->vbase,
		                   (size_t)st->have);
		rc = td_tgm_scan_next(&st->sc, &v);
		if (rc == -EAGAIN) {
			uint64_t at = st->sc.need_off + st->vbase;
			uint64_t need = st->sc.need_len;
			/* what it must see: the first 24 of them (a
			 * preamble; a search's next 8); what it may: a
			 * search's next STEP, within the cap */
			uint64_t must = at + (need < 24 ? need : 24);
			uint64_t may = at + (need < STEP ? need : STEP);
			uint64_t held = st->have;

			if (st->max < UINT64_MAX - st->off &&
			    may > st->off + st->max)
				may = st->off + st->max;
			rc = fill_to(st, may > must ? may : must);
			if (rc)
				return -rc;
			if (st->eof && !st->exact)
				restart(st);
			else if (st->have == held) /* cannot be: a hang guard */
				return -tctl_fail(TCTL_REFUSED, "input", EIO,
				                  "%s: the scan asked for bytes "
				                  "past the end",
				                  st->in->path);
			continue;
		}
		if (rc == 0 && st->exact)
			return 0;
		if (rc == 0) { /* not before a length it never reaches */
			if ((rc = fill_to(st, UINT64_MAX)) != 0)
				return -rc;
			restart(st);
			continue;
		}
		v.offset += st->vbase;
		if (!st->exact) {
			/* the loop's 48 bytes left from the message on */
			if ((rc = fill_to(st, v.offset +
			                              TD_TGM_MIN_MESSAGE_LEN)) != 0)
				return -rc;
			if (st->eof) {
				restart(st);
				continue;
			}
		}
		*sp = v;
		st->done = v.offset + v.length;
		st->found = true;
		*src = (struct tgm_src){.path = st->in->path,
		                        .fd = -1,
		                        .buf = st->buf,
		                        .base = st->off,
		                        .size = st->off + st->have};
		return 1;
	}
}

uint64_t tgm_stream_total(const struct tgm_stream *st)
{
	return st->off + st->have;
}

int tgm_stream_rest(struct tgm_stream *st, const uint8_t **buf, size_t *len)
{
	int rc;

	/* nothing was dropped: nothing past the first message was asked
	 * for; what is refused past max is then the stream, whole */
	st->found = false;
	rc = fill_to(st, UINT64_MAX);
	if (rc)
		return rc;
	/* the buffer itself (a spool's mapping, or the heap's), lent */
	*buf = st->buf ? st->buf : (const uint8_t *)"";
	*len = (size_t)st->have;
	return TCTL_OK;
}
