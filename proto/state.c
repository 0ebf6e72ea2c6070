/* SPDX-License-Identifier: MIT */
/* The daemon's state image (state.h): checked decoder and its encoder. */
#include "state.h"

#include <errno.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bytes.h"

/* name len + flags + version + meta len + blob len + fd_count + one id
 * (format 1; format 2 allows no id) */
#define ENTRY_MIN (2 + 4 + 8 + 4 + 4 + 4 + 8)
#define ENTRY_MIN_NOFDS (ENTRY_MIN - 8)

/* The least bytes an entry takes in an image of format f (checked). */
static size_t entry_min(uint32_t f)
{
	return f == TD_STATE_FORMAT_NOFDS ? ENTRY_MIN_NOFDS : ENTRY_MIN;
}

static int name_cmp(struct td_wire_str a, struct td_wire_str b)
{
	int c = memcmp(a.ptr, b.ptr, a.len < b.len ? a.len : b.len);

	if (c)
		return c;
	return a.len < b.len ? -1 : a.len > b.len;
}

/* Length, magic and format: what is checked before the checksum. */
static int check_start(const uint8_t *buf, uint64_t len, struct td_err *err)
{
	if (len < TD_STATE_HDR_LEN + TD_STATE_SUM_LEN)
		return td__err_truncated(err,
					 TD_STATE_HDR_LEN + TD_STATE_SUM_LEN,
					 len, 0, "state image shorter than "
						 "its header and checksum");
	if (memcmp(buf, TD_STATE_MAGIC, 8) != 0)
		return td__err_set(err, TD_ERR_MALFORMED, "magic", false, 0, 0,
				   "not a tensord state image (bad magic)");
	if (td__le32(buf + 8) != TD_STATE_FORMAT &&
	    td__le32(buf + 8) != TD_STATE_FORMAT_NOFDS)
		return td__err_set(err, TD_ERR_UNSUPPORTED_REQUIREMENT,
				   "format", true, td__le32(buf + 8), 8,
				   "unknown state format version");
	return 0;
}

int td_state_check_len(const uint8_t *hdr, uint64_t len, struct td_err *err)
{
	uint64_t count, body;
	int rc = check_start(hdr, len, err);

	if (rc < 0)
		return rc;
	count = td__le32(hdr + 40);
	body = len - TD_STATE_HDR_LEN - TD_STATE_SUM_LEN;
	/* cannot overflow: count < 2^32, TD_STATE_ENTRY_MAX < 2^17 */
	if (body > count * TD_STATE_ENTRY_MAX)
		return td__err_set(err, TD_ERR_FORGED_LENGTH, "count", true,
				   count, 40,
				   "image longer than its entries can be");
	if (count > body / entry_min(td__le32(hdr + 8)))
		return td__err_set(err, TD_ERR_FORGED_LENGTH, "count", true,
				   count, 40,
				   "more entries than the image can hold");
	return 0;
}

int td_state_decode(const uint8_t *buf, size_t len, struct td_state_hdr *h,
		    struct td_state_rd *rd, struct td_err *err)
{
	size_t body;
	int rc = check_start(buf, len, err);

	if (rc < 0)
		return rc;
	/* checksum before anything else is believed */
	if (XXH3_64bits(buf, len - TD_STATE_SUM_LEN) !=
	    td__le64(buf + len - TD_STATE_SUM_LEN))
		return td__err_set(err, TD_ERR_MALFORMED, "checksum", false, 0,
				   len - TD_STATE_SUM_LEN,
				   "checksum mismatch (torn or corrupted "
				   "image)");
	if (td__le32(buf + 12) != 0 || td__le32(buf + 44) != 0)
		return td__err_set(err, TD_ERR_MALFORMED, "reserved", false, 0,
				   td__le32(buf + 12) ? 12 : 44,
				   "reserved field is not zero");
	h->generation = td__le64(buf + 16);
	h->next_version = td__le64(buf + 24);
	h->next_fd_id = td__le64(buf + 32);
	h->count = td__le32(buf + 40);
	/* both counters start at 1: 0 is no daemon's */
	if (h->next_version == 0 || h->next_fd_id == 0)
		return td__err_set(err, TD_ERR_MALFORMED,
				   h->next_version ? "next_fd_id"
						   : "next_version",
				   true, 0, h->next_version ? 32 : 24,
				   "counter is 0");
	body = len - TD_STATE_HDR_LEN - TD_STATE_SUM_LEN;
	/* a forged count must not make anyone size a table from it */
	if (h->count > body / entry_min(td__le32(buf + 8)))
		return td__err_set(err, TD_ERR_FORGED_LENGTH, "count", true,
				   h->count, 40,
				   "more entries than the image can hold");
	td_wire_rd_init(&rd->rd, buf + TD_STATE_HDR_LEN, body, err);
	rd->err = err;
	rd->left = h->count;
	rd->min_fds = td__le32(buf + 8) == TD_STATE_FORMAT_NOFDS ? 0 : 1;
	rd->next_version = h->next_version;
	rd->next_fd_id = h->next_fd_id;
	rd->prev = (struct td_wire_str){"", 0};
	return 0;
}

static int entry_fail(struct td_state_rd *rd, enum td_err_kind kind,
		      const char *field, uint64_t value, size_t off,
		      const char *reason)
{
	rd->rd.rc = td__err_set(rd->err, kind, field, true, value,
				TD_STATE_HDR_LEN + off, reason);
	return rd->rd.rc;
}

int td_state_next(struct td_state_rd *rd, struct td_state_entry *ent)
{
	struct td_wire_rd *r = &rd->rd;
	const char *why = NULL;
	size_t at;

	if (r->rc)
		return r->rc;
	if (rd->left == 0) {
		if (td_wire_rd_end(r) < 0 && rd->err)
			rd->err->offset += TD_STATE_HDR_LEN;
		return r->rc ? r->rc : 0;
	}
	rd->left--;
	at = r->off;
	ent->name = td_wire_rd_str(r, TD_WIRE_MAX_NAME, "name");
	ent->flags = td_wire_rd_u32(r, "flags");
	ent->version = td_wire_rd_u64(r, "version");
	ent->meta = td_wire_rd_bytes(r, TD_WIRE_MAX_META, "meta");
	ent->blob = td_wire_rd_bytes(r, TD_WIRE_MAX_BLOB, "blob");
	ent->fd_count = td_wire_rd_u32(r, "fd_count");
	if (r->rc) {
		if (rd->err)
			rd->err->offset += TD_STATE_HDR_LEN;
		return r->rc;
	}
	if (td_wire_name_check(ent->name.ptr, ent->name.len, false, &why) < 0)
		return entry_fail(rd, TD_ERR_INVALID_ARGUMENT, "name", 0, at,
				  why);
	if (rd->prev.len && name_cmp(rd->prev, ent->name) >= 0)
		return entry_fail(rd, TD_ERR_MALFORMED, "name", 0, at,
				  "names are not strictly ascending");
	rd->prev = ent->name;
	if (ent->flags & ~TD_STATE_FLAGS)
		return entry_fail(rd, TD_ERR_MALFORMED, "flags", ent->flags,
				  at, "unknown version flags");
	if (ent->version == 0 || ent->version >= rd->next_version)
		return entry_fail(rd, TD_ERR_MALFORMED, "version",
				  ent->version, at,
				  "version outside [1, next_version)");
	if (ent->fd_count < rd->min_fds || ent->fd_count > TD_STATE_MAX_FDS)
		return entry_fail(rd, ent->fd_count ? TD_ERR_FORGED_LENGTH
						    : TD_ERR_MALFORMED,
				  "fd_count", ent->fd_count, r->off - 4,
				  rd->min_fds ? "fd_count outside 1..9 "
						"(format 1)"
					      : "fd_count above 9");
	for (uint32_t i = 0; i < ent->fd_count; i++) {
		size_t o = r->off;

		ent->fd_ids[i] = td_wire_rd_u64(r, "fd_ids");
		if (r->rc) {
			if (rd->err)
				rd->err->offset += TD_STATE_HDR_LEN;
			return r->rc;
		}
		if (ent->fd_ids[i] == 0 || ent->fd_ids[i] >= rd->next_fd_id)
			return entry_fail(rd, TD_ERR_MALFORMED, "fd_ids",
					  ent->fd_ids[i], o,
					  "fd id outside [1, next_fd_id)");
		for (uint32_t j = 0; j < i; j++)
			if (ent->fd_ids[j] == ent->fd_ids[i])
				return entry_fail(rd, TD_ERR_MALFORMED,
						  "fd_ids", ent->fd_ids[i], o,
						  "fd id used twice in one "
						  "version");
	}
	return 1;
}

size_t td_state_entry_len(const struct td_state_entry *ent)
{
	return 2 + (size_t)ent->name.len + 4 + 8 + 4 + ent->meta.len + 4 +
	       ent->blob.len + 4 + 8 * (size_t)ent->fd_count;
}

int td_state_encode_begin(struct td_state_wr *w, uint8_t *buf, size_t cap,
			  const struct td_state_hdr *h)
{
	w->count = 0;
	w->nofds = false;
	w->rc = 0;
	w->prev = (struct td_wire_str){"", 0};
	if (cap < TD_STATE_HDR_LEN + TD_STATE_SUM_LEN)
		return w->rc = -ENOBUFS;
	if (h->next_version == 0 || h->next_fd_id == 0)
		return w->rc = -EINVAL;
	memset(buf, 0, TD_STATE_HDR_LEN);
	memcpy(buf, TD_STATE_MAGIC, 8);
	td__put_le32(buf + 8, TD_STATE_FORMAT);
	td__put_le64(buf + 16, h->generation);
	td__put_le64(buf + 24, h->next_version);
	td__put_le64(buf + 32, h->next_fd_id);
	/* the checksum's 8 bytes stay reserved at the end */
	td_wire_wr_init(&w->wr, buf + TD_STATE_HDR_LEN,
			cap - TD_STATE_HDR_LEN - TD_STATE_SUM_LEN);
	return 0;
}

int td_state_encode_entry(struct td_state_wr *w,
			  const struct td_state_entry *ent)
{
	const uint8_t *hdr;
	uint64_t nv, nf;
	size_t at;

	if (w->rc)
		return w->rc;
	hdr = w->wr.p - TD_STATE_HDR_LEN;
	nv = td__le64(hdr + 24);
	nf = td__le64(hdr + 32);
	if (td_wire_name_check(ent->name.ptr, ent->name.len, false, NULL) ||
	    (ent->flags & ~TD_STATE_FLAGS) || ent->version == 0 ||
	    ent->version >= nv || ent->meta.len > TD_WIRE_MAX_META ||
	    ent->blob.len > TD_WIRE_MAX_BLOB ||
	    ent->fd_count > TD_STATE_MAX_FDS ||
	    (w->count && name_cmp(w->prev, ent->name) >= 0))
		return w->rc = -EINVAL;
	for (uint32_t i = 0; i < ent->fd_count; i++) {
		if (ent->fd_ids[i] == 0 || ent->fd_ids[i] >= nf)
			return w->rc = -EINVAL;
		for (uint32_t j = 0; j < i; j++)
			if (ent->fd_ids[j] == ent->fd_ids[i])
				return w->rc = -EINVAL;
	}
	at = w->wr.off;
	td_wire_wr_str(&w->wr, ent->name.ptr, ent->name.len);
	td_wire_wr_u32(&w->wr, ent->flags);
	td_wire_wr_u64(&w->wr, ent->version);
	td_wire_wr_bytes(&w->wr, ent->meta.ptr, ent->meta.len);
	td_wire_wr_bytes(&w->wr, ent->blob.ptr, ent->blob.len);
	td_wire_wr_u32(&w->wr, ent->fd_count);
	for (uint32_t i = 0; i < ent->fd_count; i++)
		td_wire_wr_u64(&w->wr, ent->fd_ids[i]);
	if (w->wr.overflow)
		return w->rc = -ENOBUFS;
	/* the copy just written (2: its length): the caller's bytes may
	 * be gone by the next entry */
	w->prev = (struct td_wire_str){(const char *)w->wr.p + at + 2,
				       ent->name.len};
	w->nofds |= ent->fd_count == 0;
	w->count++;
	return 0;
}

void td_state_encode_raise(struct td_state_wr *w, uint64_t next_version,
			   uint64_t next_fd_id)
{
	uint8_t *hdr = w->wr.p - TD_STATE_HDR_LEN;

	if (w->rc)
		return;
	if (next_version > td__le64(hdr + 24))
		td__put_le64(hdr + 24, next_version);
	if (next_fd_id > td__le64(hdr + 32))
		td__put_le64(hdr + 32, next_fd_id);
}

int64_t td_state_encode_finish(struct td_state_wr *w)
{
	uint8_t *base;
	size_t len;

	if (w->rc)
		return w->rc;
	base = w->wr.p - TD_STATE_HDR_LEN;
	td__put_le32(base + 40, w->count);
	/* format 1 unless it must be 2: older readers read it (state.h) */
	td__put_le32(base + 8, w->nofds ? TD_STATE_FORMAT_NOFDS
					: TD_STATE_FORMAT);
	len = TD_STATE_HDR_LEN + w->wr.off;
	td__put_le64(base + len, XXH3_64bits(base, len));
	return (int64_t)(len + TD_STATE_SUM_LEN);
}
