/* SPDX-License-Identifier: MIT */
/* .tgm messages read with pread (tgm-file.h). */
#include "tgm-file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bytes.h"
#include "output.h"
#include "tensorctl.h"

/* What one read of a search or a hash takes: memory stays this. */
#define CHUNK (1u << 20)
/* The most of a descriptor read (a real one is a few hundred bytes). */
#define DESC_MAX (16u << 20)

static int io_fail(struct tgm_src *s, int err)
{
	if (!s->io_err)
		s->io_err = err;
	return -EIO;
}

int tgm_src_read(struct tgm_src *s, uint64_t off, void *dst, uint64_t len)
{
	uint8_t *p = dst;

	if (s->fd < 0) {
		/* a buffer: its bytes are all there is */
		if (off < s->base || off > s->size || len > s->size - off)
			return io_fail(s, ENODATA);
		memcpy(p, s->buf + (off - s->base), len);
		return 0;
	}
	while (len) {
		size_t want = len > CHUNK ? CHUNK : (size_t)len;
		ssize_t r = pread(s->fd, p, want, (off_t)off);

		if (r < 0 && errno == EINTR && !tctl_interrupted())
			continue;
		if (r < 0)
			return io_fail(s, errno);
		if (r == 0) /* shorter than when it was opened */
			return io_fail(s, ENODATA);
		p += r;
		off += (uint64_t)r;
		len -= (uint64_t)r;
	}
	return 0;
}

int tgm_src_fail(const struct tgm_src *s)
{
	if (s->io_err == ENODATA)
		return tctl_fail(TCTL_REFUSED, "input", ENODATA,
		                 "%s: the file ended early (UnexpectedEof: cut "
		                 "short while it was read?)",
		                 s->path);
	return tctl_fail(TCTL_REFUSED, "io", s->io_err, "%s: %s", s->path,
	                 strerror(s->io_err));
}

/*
 * Give a windowed scan (proto's, which does the search) the bytes it asks
 * for: a buffer's own, or at most CHUNK of a file read into one buffer
 * (every scan's: a scan step starts with td_tgm_scan_window() of nothing).
 */
static int scan_feed(struct tgm_src *s, struct td_tgm_scanner *it)
{
	static uint8_t buf[CHUNK];
	uint64_t off = it->need_off, n = it->need_len;

	/* need_off + need_len <= it->len <= s->size */
	if (s->fd < 0 && off < s->base)
		return io_fail(s, ENODATA); /* not held: cannot be */
	if (s->fd < 0) {
		td_tgm_scan_window(it, s->buf + (off - s->base), off,
		                   (size_t)(s->size - off));
		return 0;
	}
	if (n > CHUNK)
		n = CHUNK;
	if (tgm_src_read(s, off, buf, n) < 0)
		return -EIO;
	td_tgm_scan_window(it, buf, off, (size_t)n);
	return 0;
}

void tgm_scan_init(struct tgm_scan *sc, struct tgm_src *s, uint64_t stop)
{
	sc->s = s;
	td_tgm_scan_begin(&sc->it, s->size, stop);
}

int tgm_scan_next(struct tgm_scan *sc, struct td_tgm_span *out)
{
	int rc;

	if (sc->s->fd >= 0) /* another scan may have refilled the buffer */
		td_tgm_scan_window(&sc->it, NULL, 0, 0);
	while ((rc = td_tgm_scan_next(&sc->it, out)) == -EAGAIN)
		if (scan_feed(sc->s, &sc->it) < 0)
			return -EIO;
	return rc;
}

int tgm_walk_open(struct tgm_walk *w, struct tgm_src *s, uint64_t base,
                  uint64_t avail, struct td_err *e)
{
	uint8_t pre[TD_TGM_PREAMBLE_LEN], post[TD_TGM_POSTAMBLE_LEN];
	size_t pl = avail < sizeof(pre) ? (size_t)avail : sizeof(pre);
	uint64_t stream_end = 0, at = UINT64_MAX;
	int rc;

	w->s = s;
	w->base = base;
	if (tgm_src_read(s, base, pre, pl) < 0)
		return -EIO;
	/* a streaming message ends at its first end magic (rule 3) */
	if (pl == sizeof(pre) && td__be64(pre + 16) == 0) {
		struct td_tgm_scanner sc;
		uint64_t end = s->size;

		/* the scan's search, over [base, base + avail) of the file */
		if (base < end && avail < end - base)
			end = base + avail;
		td_tgm_scan_begin(&sc, end, UINT64_MAX);
		while ((rc = td_tgm_scan_end_magic(
		                &sc, base + TD_TGM_PREAMBLE_LEN, &at)) ==
		       -EAGAIN)
			if (scan_feed(s, &sc) < 0)
				return -EIO;
		stream_end = at == UINT64_MAX ? 0 : at - base + 8;
	}
	rc = td_tgm_walk_begin(pre, pl, avail, stream_end, &w->it, e);
	if (rc < 0)
		return rc;
	if (tgm_src_read(s, base + w->it.length - sizeof(post), post,
	                 sizeof(post)) < 0)
		return -EIO;
	rc = td_tgm_walk_post(&w->it, post, e);
	if (rc < 0)
		return rc;
	td_tgm_walk_window(&w->it, w->win, 0, 0);
	return 0;
}

int tgm_walk_next(struct tgm_walk *w, struct td_tgm_frame *fr,
                  struct td_err *e)
{
	for (;;) {
		int rc = td_tgm_walk_next(&w->it, fr, e);
		uint64_t off = w->it.need_off, n;

		if (rc != -EAGAIN)
			return rc;
		/* need_off + need_len <= length: the walk asks for message
		 * bytes only, at most 20 of them */
		n = w->it.length - off;
		if (n > sizeof(w->win))
			n = sizeof(w->win);
		if (tgm_src_read(w->s, w->base + off, w->win, n) < 0)
			return -EIO;
		td_tgm_walk_window(&w->it, w->win, off, (size_t)n);
	}
}

int tgm_frame_hash_ok(struct tgm_src *s, uint64_t base,
                      const struct td_tgm_frame *fr)
{
	static uint8_t buf[CHUNK];
	XXH3_state_t st;
	uint64_t off = base + fr->offset + TD_TGM_FRAME_HEADER_LEN;
	uint64_t left = fr->payload_len;
	uint8_t slot[8];

	XXH3_64bits_reset(&st);
	while (left) {
		uint64_t n = left > CHUNK ? CHUNK : left;

		if (tgm_src_read(s, off, buf, n) < 0)
			return -EIO;
		XXH3_64bits_update(&st, buf, (size_t)n);
		off += n;
		left -= n;
	}
	/* every footer ends [hash u64][ENDF] (§6) */
	if (tgm_src_read(s, base + fr->offset + fr->length - 12, slot, 8) < 0)
		return -EIO;
	return XXH3_64bits_digest(&st) == td__be64(slot);
}

int tgm_frame_payload(struct tgm_src *s, uint64_t base,
                      const struct td_tgm_frame *fr, uint8_t **out)
{
	uint8_t *p = fr->payload_len < SIZE_MAX
	                     ? malloc(fr->payload_len ? fr->payload_len : 1)
	                     : NULL;

	*out = NULL;
	if (!p)
		return -ENOMEM;
	if (tgm_src_read(s, base + fr->offset + TD_TGM_FRAME_HEADER_LEN, p,
	                 fr->payload_len) < 0) {
		free(p);
		return -EIO;
	}
	*out = p;
	return 0;
}

int tgm_object_read(struct tgm_src *s, uint64_t base,
                    const struct td_tgm_frame *fr, struct td_tgm_object *o,
                    uint8_t **cbor, struct td_err *e)
{
	uint64_t at = fr->cbor_after_payload ? fr->cbor_offset
	                                     : TD_TGM_FRAME_HEADER_LEN, n;

	*cbor = NULL;
	if (fr->type != TD_TGM_NTENSOR_FRAME)
		return td_tgm_object_decode_at(fr, NULL, 0, o, e);
	/* the walk checked 16 <= cbor_offset <= length - 20 (F10) */
	n = fr->length - TD_TGM_NTENSOR_FOOTER_LEN - at;
	if (n > DESC_MAX && fr->cbor_after_payload) {
		memset(o, 0, sizeof(*o));
		*e = (struct td_err){.kind = TD_ERR_UNSUPPORTED_REQUIREMENT,
		                     .field = "descriptor",
		                     .reason = "descriptor larger than 16 MiB",
		                     .value = n,
		                     .has_value = true,
		                     .offset = fr->offset + at};
		return -ENOTSUP;
	}
	if (n > DESC_MAX) /* CBOR before the data: its first 16 MiB */
		n = DESC_MAX;
	*cbor = malloc(n ? n : 1);
	if (!*cbor)
		return -ENOMEM;
	if (tgm_src_read(s, base + fr->offset + at, *cbor, n) < 0)
		return -EIO;
	return td_tgm_object_decode_at(fr, *cbor, n, o, e);
}
