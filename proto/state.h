/* SPDX-License-Identifier: MIT */
/*
 * The daemon's state image: the store's index (names, versions, blobs,
 * pins, metadata and which fd-store entries hold each fd-table slot), as
 * kept in a memfd in systemd's fd store so tensors survive a restart.
 *
 * Sans-I/O like the rest of proto/: bytes in, views out. The image comes
 * back from outside the process (a previous daemon, through PID 1), so it
 * is decoded exactly like peer input: every length bounded by a named cap
 * and by the bytes present, the whole image covered by an XXH3-64.
 *
 * Layout (little-endian, packed):
 *
 *   0   8  magic "TDSTATE\0"
 *   8   4  format version (1 or 2; below)
 *   12  4  reserved, 0
 *   16  8  generation (which of two images is newer)
 *   24  8  next_version (the daemon-wide version counter)
 *   32  8  next_fd_id (fd-store ids handed out so far + 1)
 *   40  4  entry count
 *   44  4  reserved, 0
 *   48  .. entries, names strictly ascending
 *   end-8  8  XXH3-64 of every byte before it
 *
 * entry: str name (u16 len, <= 255), u32 flags (PIN), u64 version,
 *        bytes meta (u32 len, <= 16384), bytes blob (u32 len, <= 48128),
 *        u32 fd_count (1..9), u64 fd_ids[fd_count]
 *
 * Format 2 is format 1 where fd_count may also be 0: a version whose fds
 * are not in the fd store (a recyclable version, whose bytes are not
 * sealed, or one whose push failed), named so that the next start reads
 * it from the snapshot (docs/snapshot.md). The encoder writes format 1
 * when every entry has fds, so an image without such a version is read
 * by a tensord of format 1 as before; one that knows only format 1
 * refuses a format-2 image whole (-ENOTSUP), as any newer format.
 */
#ifndef TD_PROTO_STATE_H
#define TD_PROTO_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "wire.h"

#define TD_STATE_MAGIC "TDSTATE"    /* 8 bytes with the NUL */
#define TD_STATE_FORMAT 1     /* every entry with fds */
#define TD_STATE_FORMAT_NOFDS 2 /* entries without fds too (above) */
#define TD_STATE_HDR_LEN 48
#define TD_STATE_SUM_LEN 8
#define TD_STATE_MAX_FDS (TD_WIRE_MAX_PLANES + 1) /* planes + fence */
#define TD_STATE_FLAGS 0x1u /* PIN: the only flag a version carries */

struct td_state_hdr {
	uint64_t generation;
	uint64_t next_version; /* every entry's version is below it */
	uint64_t next_fd_id;   /* every fd id is in [1, next_fd_id) */
	uint32_t count;
};

struct td_state_entry {
	struct td_wire_str name;
	uint32_t flags;
	uint64_t version;
	struct td_wire_bytes meta;
	struct td_wire_bytes blob;
	uint32_t fd_count; /* 0: none stored (format 2 only) */
	uint64_t fd_ids[TD_STATE_MAX_FDS];
};

/* Entry cursor over a checked image (borrows it). */
struct td_state_rd {
	struct td_wire_rd rd;
	struct td_err *err;
	uint32_t left;
	uint32_t min_fds; /* 1 in format 1, 0 in format 2 */
	uint64_t next_version, next_fd_id;
	struct td_wire_str prev; /* last name, for the ordering check */
};

/* The most bytes one entry can take: every field at its cap. */
#define TD_STATE_ENTRY_MAX                                                  \
	(2 + TD_WIRE_MAX_NAME + 4 + 8 + 4 + TD_WIRE_MAX_META + 4 +          \
	 TD_WIRE_MAX_BLOB + 4 + 8 * TD_STATE_MAX_FDS)

/*
 * Before an image of len bytes is read whole: its first TD_STATE_HDR_LEN
 * bytes (hdr) checked for magic (-EBADMSG) and format (-ENOTSUP: not 1
 * or 2), and len
 * against the entry count they state: an image longer than that many
 * entries at their caps, or shorter than that many at their least, is
 * refused (-EOVERFLOW). Nothing here is believed (the checksum covers the
 * whole image): it only refuses early, before a reader allocates len
 * bytes, what td_state_decode() and td_state_next() would refuse later.
 */
int td_state_check_len(const uint8_t *hdr, uint64_t len, struct td_err *err);

/*
 * Check an image of len bytes: length, magic (-EBADMSG), format
 * (-ENOTSUP), reserved fields, the checksum (-EBADMSG), and that count
 * entries can fit (-EOVERFLOW). Fills *h and a cursor for
 * td_state_next(). 0 or -errno with *err (offsets from the image start).
 * Both formats are read; which one decides whether fd_count may be 0.
 */
int td_state_decode(const uint8_t *buf, size_t len, struct td_state_hdr *h,
		    struct td_state_rd *rd, struct td_err *err);
/*
 * The next entry into *ent (views into the image). 1 for an entry, 0
 * after the last one (trailing bytes refused), -errno otherwise: names
 * checked like peer input and strictly ascending, flags, version in
 * [1, next_version), caps on meta/blob/fd_count (0 refused in format 1),
 * fd ids distinct and in [1, next_fd_id). The blob itself is the caller's to check (td_blob_*).
 */
int td_state_next(struct td_state_rd *rd, struct td_state_entry *ent);

/* Bytes one entry takes in an image (for sizing the buffer). */
size_t td_state_entry_len(const struct td_state_entry *ent);

/*
 * Writing: begin (header), add entries in ascending name order, finish
 * (count, format and checksum). Encoders refuse what the decoder would
 * (-EINVAL) and a buffer that is too small (-ENOBUFS); finish returns the
 * image length or the first error. An entry with fd_count 0 makes the
 * image format 2, else it is format 1. An image may be written over
 * time (the daemon's, a few names a loop turn): the entries are copied,
 * nothing of them is kept (the last name is compared from the output),
 * and td_state_encode_raise() lifts the header's bounds for entries
 * newer than the ones begin gave.
 */
struct td_state_wr {
	struct td_wire_wr wr;
	uint32_t count;
	bool nofds; /* an entry without fds was written */
	int rc;
	struct td_wire_str prev; /* the last name, in the output */
};

int td_state_encode_begin(struct td_state_wr *w, uint8_t *buf, size_t cap,
			  const struct td_state_hdr *h);
int td_state_encode_entry(struct td_state_wr *w,
			  const struct td_state_entry *ent);
/* The header's next_version and next_fd_id raised to these where they
 * are larger (never lowered: every entry written stays below them). */
void td_state_encode_raise(struct td_state_wr *w, uint64_t next_version,
			   uint64_t next_fd_id);
int64_t td_state_encode_finish(struct td_state_wr *w);

#endif
