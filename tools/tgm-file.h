/* SPDX-License-Identifier: MIT */
/*
 * Where tensorctl reads .tgm messages from (inspect, load, zarr export):
 * a regular file, read with pread, never whole and never mapped, or
 * bytes held: one message of a stream at a time (struct tgm_stream:
 * load, inspect and zarr export of stdin, up to --max-bytes held at
 * once, in a mapped spool file in $TMPDIR, not on the heap). The same scan
 * (../shared/specs/tensogram.md §12) and frame walk (§13) as proto/tgm.c,
 * which does the checks; here only the reading: a file of any size costs
 * what the printed or loaded parts cost (a hash is checked by streaming
 * its frame's payload through XXH3, a fixed buffer at a time).
 *
 * A file cut short while it is read (someone truncating it) is an error
 * (src->io_err = ENODATA, said as UnexpectedEof), never a SIGBUS.
 */
#ifndef TD_TOOLS_TGM_FILE_H
#define TD_TOOLS_TGM_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tgm-desc.h"
#include "tgm.h"

struct tgm_src {
	const char *path;   /* for messages */
	int fd;             /* a regular file (borrowed), or -1 */
	const uint8_t *buf; /* bytes held, when fd < 0: input [base, size) */
	uint64_t base;      /* the input offset of buf[0] (0: read whole) */
	uint64_t size;      /* the file's size when opened, or buf's end */
	int io_err;         /* the first read error (ENODATA: cut short) */
};

/*
 * Read len bytes at off into dst. 0, or -EIO with src->io_err set (the
 * first error is kept): ENODATA when the file ends before off + len.
 */
int tgm_src_read(struct tgm_src *s, uint64_t off, void *dst, uint64_t len);
/* tctl_fail() for src->io_err: TCTL_REFUSED. */
int tgm_src_fail(const struct tgm_src *s);

/* The scan (§12) of a source (proto's windowed scan); caller's storage. */
struct tgm_scan {
	struct tgm_src *s;
	struct td_tgm_scanner it;
};

/* stop: no message starting beyond it is looked for (UINT64_MAX: none). */
void tgm_scan_init(struct tgm_scan *sc, struct tgm_src *s, uint64_t stop);
/* 1 with *out, 0 at the end, -EIO for a read error (s->io_err). */
int tgm_scan_next(struct tgm_scan *sc, struct td_tgm_span *out);

/* The frame walk of one message; caller's storage. */
struct tgm_walk {
	struct td_tgm_walk it;
	struct tgm_src *s;
	uint64_t base; /* the message's offset in the source */
	uint8_t win[4096];
};

/*
 * The envelope of the message at base, avail bytes of input from it on
 * (a scan span: its length). 0, a walk error (-errno, *e), or -EIO
 * (s->io_err).
 */
int tgm_walk_open(struct tgm_walk *w, struct tgm_src *s, uint64_t base,
                  uint64_t avail, struct td_err *e);
/* td_tgm_walk_next() reading what it needs; -EIO for a read error. */
int tgm_walk_next(struct tgm_walk *w, struct td_tgm_frame *fr,
                  struct td_err *e);
/* A walked frame's hash (it has one): 1 ok, 0 mismatch, -EIO. */
int tgm_frame_hash_ok(struct tgm_src *s, uint64_t base,
                      const struct td_tgm_frame *fr);
/*
 * The most of a metadata frame's payload inspect prints and load reads
 * (whole: it is one CBOR item): a tensor's metadata is at most 16 KiB in
 * the daemon (TD_WIRE_MAX_META), so this holds a thousand objects' worth.
 */
#define TGM_META_MAX (16u << 20)

static inline int tgm_is_meta_frame(unsigned type)
{
	return type == TD_TGM_HEADER_METADATA_FRAME ||
	       type == TD_TGM_FOOTER_METADATA_FRAME ||
	       type == TD_TGM_PRECEDER_METADATA_FRAME;
}

/* A frame's payload into a new buffer (*out, malloc'ed). 0, -ENOMEM, -EIO. */
int tgm_frame_payload(struct tgm_src *s, uint64_t base,
                      const struct td_tgm_frame *fr, uint8_t **out);
/*
 * A type-9 frame's descriptor (td_tgm_object_decode_at()): its bytes
 * read into *cbor (malloc'ed, the caller frees it, also on failure; at
 * most 16 MiB of a CBOR-before payload). 0, a descriptor error (*e),
 * -ENOMEM, -EIO.
 */
int tgm_object_read(struct tgm_src *s, uint64_t base,
                    const struct td_tgm_frame *fr, struct td_tgm_object *o,
                    uint8_t **cbor, struct td_err *e);

/*
 * The messages of a stream (stdin), one at a time (tgm-stream.c): the
 * scan's spans, found as the file's scan finds them, each with a source
 * that holds it (input offsets, as in a file). What is held at once is
 * the bytes from the end of the last message found to the end of the
 * next (junk between them included), refused past max (EFBIG, naming
 * --max-bytes); before the first message the buffer holds the stream
 * from its start, so that what is no .tgm stream can be read whole
 * (tgm_stream_rest()).
 */
struct tctl_in;
struct tgm_stream {
	struct tctl_in *in;
	uint64_t max;
	uint8_t *buf;
	uint64_t cap, have; /* buf holds input [off, off + have) */
	uint64_t off;
	uint64_t done;  /* the end of the last message given out */
	uint64_t vbase; /* the input offset of the scan's offset 0 */
	bool eof, exact, found;
	int spool; /* -1: buf is malloc'ed; else buf maps this file */
	struct td_tgm_scanner sc;
};

void tgm_stream_init(struct tgm_stream *st, struct tctl_in *in, uint64_t max);
void tgm_stream_fini(struct tgm_stream *st);
/* The first n bytes held (fewer at the end): st->buf, st->have. TCTL_OK
 * or reported (a read error, more than max). */
int tgm_stream_head(struct tgm_stream *st, uint64_t n);
/*
 * The next message: 1 with *sp and *src (valid until the next call), 0
 * at the end, or -status (reported: a read error, EFBIG).
 */
int tgm_stream_next(struct tgm_stream *st, struct td_tgm_span *sp,
                    struct tgm_src *src);
/*
 * From now on hold what is read in an unnamed file in $TMPDIR, mapped
 * (MAP_SHARED, its room reserved with posix_fallocate before a page of
 * it is written, so a full disk is ENOSPC, never SIGBUS), not on the
 * heap: a message's bytes are then page cache the kernel may write back
 * and drop, not tensorctl's memory beside the daemon's copy of them.
 * TCTL_OK or reported, naming TMPDIR.
 */
int tgm_stream_spool(struct tgm_stream *st);
/* How many bytes were read (at the end: the stream's length). */
uint64_t tgm_stream_total(const struct tgm_stream *st);
/* Before any message was given out: the whole stream, read to its end
 * (up to max): *buf is st's buffer (in the spool once tgm_stream_spool()
 * was called, the heap's otherwise), valid until tgm_stream_fini().
 * TCTL_OK or reported. */
int tgm_stream_rest(struct tgm_stream *st, const uint8_t **buf,
                    size_t *len);

#endif
