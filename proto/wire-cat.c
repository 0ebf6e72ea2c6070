/* SPDX-License-Identifier: MIT */
/*
 * The catalogue's and the rings' messages (wire.h, docs/protocol.md §6.6
 * to §6.9 and §10): LIST, STAT, DELETE, WATCH, UNWATCH, NOTIFY and the
 * RING_* bodies, on the reader and writer of wire.c. Sans-I/O, with the
 * decoding rules of wire.c.
 */
#include "wire.h"

#include <errno.h>
#include <string.h>

#include "bytes.h"
#include "wire-int.h"

/* Smallest encoded entry: empty-name-free, so at least one name byte. */
#define ENTRY_MIN_LEN (2 + 1 + 8 + 4 + 4 + 8 + 4 + 4 + 4)

/* LIST/STAT request flags and entry flags this codec knows */
#define CAT_FLAGS (TD_WIRE_CAT_KINDS | TD_WIRE_CAT_RECYCLE)
#define ENT_FLAGS (TD_WIRE_PUB_PIN | TD_WIRE_ENT_RING | TD_WIRE_ENT_RECYCLE)

/* ---- LIST ---- */

int64_t td_wire_list_req_encode(const struct td_wire_list_req *m,
				uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (m->prefix.len > TD_WIRE_MAX_NAME ||
	    m->after.len > TD_WIRE_MAX_NAME || (m->flags & ~CAT_FLAGS))
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_str(&wr, m->prefix.ptr, m->prefix.len);
	td_wire_wr_str(&wr, m->after.ptr, m->after.len);
	td__wire_wr_opt_flags(&wr, m->flags);
	return td__wire_wr_done(&wr);
}

int td_wire_list_req_decode(const uint8_t *body, size_t len,
			    struct td_wire_list_req *m, struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->prefix = td__wire_rd_name(&rd, true, true, "prefix");
	m->after = td__wire_rd_name(&rd, false, true, "after");
	m->flags = td__wire_rd_opt_flags(&rd, CAT_FLAGS, "flags");
	return td_wire_rd_end(&rd);
}

static void wr_entry(struct td_wire_wr *wr, const struct td_wire_entry *e)
{
	td_wire_wr_str(wr, e->name.ptr, e->name.len);
	td_wire_wr_u64(wr, e->version);
	td_wire_wr_u32(wr, e->dtype);
	td_wire_wr_u32(wr, e->ndim);
	for (uint32_t i = 0; i < e->ndim; i++)
		td_wire_wr_u64(wr, e->shape[i]);
	td_wire_wr_u64(wr, e->bytes);
	td_wire_wr_u32(wr, e->lease_count);
	td_wire_wr_u32(wr, e->flags);
	td_wire_wr_bytes(wr, e->meta.ptr, e->meta.len);
}

static void rd_entry(struct td_wire_rd *rd, struct td_wire_entry *e)
{
	e->name = td__wire_rd_name(rd, false, false, "name");
	e->version = td_wire_rd_u64(rd, "version");
	e->dtype = td_wire_rd_u32(rd, "dtype");
	e->ndim = td__wire_rd_count(rd, TD_WIRE_MAX_DIMS, "ndim");
	for (uint32_t i = 0; i < e->ndim && !rd->rc; i++)
		e->shape[i] = td_wire_rd_u64(rd, "shape");
	e->bytes = td_wire_rd_u64(rd, "bytes");
	e->lease_count = td_wire_rd_u32(rd, "lease_count");
	e->flags = td__wire_rd_flags(rd, ENT_FLAGS, "flags");
	e->meta = td_wire_rd_bytes(rd, TD_WIRE_MAX_META, "meta");
}

static bool entry_ok(const struct td_wire_entry *e)
{
	return e->ndim <= TD_WIRE_MAX_DIMS && e->name.len <= TD_WIRE_MAX_NAME &&
	       e->meta.len <= TD_WIRE_MAX_META &&
	       !(e->flags & ~ENT_FLAGS);
}

int64_t td_wire_entry_encode(const struct td_wire_entry *m, uint8_t *buf,
			     size_t cap)
{
	struct td_wire_wr wr;

	if (!entry_ok(m))
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	wr_entry(&wr, m);
	return td__wire_wr_done(&wr);
}

int td_wire_entry_decode(const uint8_t *body, size_t len,
			 struct td_wire_entry *m, struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	rd_entry(&rd, m);
	return td_wire_rd_end(&rd);
}

int td_wire_list_rep_begin(struct td_wire_wr *wr)
{
	/* The counts live at the start of the body; finish() patches them. */
	if (wr->off != 0)
		return -EINVAL;
	td_wire_wr_u32(wr, 0);
	td_wire_wr_u32(wr, 0);
	return wr->overflow ? -ENOBUFS : 0;
}

int td_wire_entry_put(struct td_wire_wr *wr, const struct td_wire_entry *e)
{
	size_t mark = wr->off;

	if (wr->overflow)
		return -ENOBUFS;
	if (!entry_ok(e))
		return -EINVAL;
	wr_entry(wr, e);
	if (wr->overflow) {
		/* Roll back so the body stays valid without this entry. */
		wr->off = mark;
		wr->overflow = false;
		return -ENOBUFS;
	}
	return 0;
}

void td_wire_list_rep_finish(struct td_wire_wr *wr, uint32_t count,
			     uint32_t more)
{
	if (wr->cap < 8)
		return;
	td__put_le32(wr->p, count);
	td__put_le32(wr->p + 4, more ? 1 : 0);
}

int td_wire_list_rep_init(struct td_wire_list_rd *lr, const uint8_t *body,
			  size_t len, struct td_err *err)
{
	struct td_wire_rd *rd = &lr->rd;
	size_t at;

	td_wire_rd_init(rd, body, len, err);
	at = rd->off;
	lr->count = td_wire_rd_u32(rd, "count");
	/* Bound count by the bytes present so a forged one fails early. */
	if (!rd->rc && lr->count > (len - 8) / ENTRY_MIN_LEN)
		td__wire_rd_fail(rd, TD_ERR_FORGED_LENGTH, "count", lr->count,
				 at, "more entries than the body can hold");
	at = rd->off;
	lr->more = td_wire_rd_u32(rd, "more");
	td__wire_rd_enum(rd, lr->more, 0, 1, at, "more");
	lr->seen = 0;
	return rd->rc;
}

int td_wire_list_rep_next(struct td_wire_list_rd *lr, struct td_wire_entry *e)
{
	if (lr->rd.rc)
		return lr->rd.rc;
	if (lr->seen == lr->count)
		return td_wire_rd_end(&lr->rd);
	rd_entry(&lr->rd, e);
	if (lr->rd.rc)
		return lr->rd.rc;
	lr->seen++;
	return 1;
}

/* ---- STAT / DELETE ---- */

/* a name_req body is a DELETE's without its condition */
int64_t td_wire_name_req_encode(const struct td_wire_name_req *m,
				uint8_t *buf, size_t cap)
{
	struct td_wire_delete_req d = {m->name, 0};

	return td_wire_delete_req_encode(&d, buf, cap);
}

int td_wire_name_req_decode(const uint8_t *body, size_t len,
			    struct td_wire_name_req *m, struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->name = td__wire_rd_name(&rd, false, false, "name");
	return td_wire_rd_end(&rd);
}

int64_t td_wire_stat_req_encode(const struct td_wire_stat_req *m,
				uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (m->name.len > TD_WIRE_MAX_NAME || (m->flags & ~CAT_FLAGS))
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_str(&wr, m->name.ptr, m->name.len);
	td__wire_wr_opt_flags(&wr, m->flags);
	return td__wire_wr_done(&wr);
}

int td_wire_stat_req_decode(const uint8_t *body, size_t len,
			    struct td_wire_stat_req *m, struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->name = td__wire_rd_name(&rd, false, false, "name");
	m->flags = td__wire_rd_opt_flags(&rd, CAT_FLAGS, "flags");
	return td_wire_rd_end(&rd);
}

int64_t td_wire_delete_req_encode(const struct td_wire_delete_req *m,
				  uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (m->name.len > TD_WIRE_MAX_NAME)
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_str(&wr, m->name.ptr, m->name.len);
	if (m->version)
		td_wire_wr_u64(&wr, m->version);
	return td__wire_wr_done(&wr);
}

int td_wire_delete_req_decode(const uint8_t *body, size_t len,
			      struct td_wire_delete_req *m,
			      struct td_err *err)
{
	struct td_wire_rd rd;
	size_t at;

	td_wire_rd_init(&rd, body, len, err);
	m->name = td__wire_rd_name(&rd, false, false, "name");
	m->version = 0;
	at = rd.off;
	/* exactly 8 bytes more are the condition; other remainders are
	 * trailing bytes for td_wire_rd_end() */
	if (!rd.rc && rd.len - rd.off == 8) {
		m->version = td_wire_rd_u64(&rd, "version");
		if (!rd.rc && m->version == 0)
			td__wire_rd_fail(&rd, TD_ERR_MALFORMED, "version", 0,
					 at, "a DELETE for any version leaves "
					     "the version out");
	}
	return td_wire_rd_end(&rd);
}

TD__WIRE_U64_CODEC(delete_rep, version)

/* ---- WATCH / UNWATCH / NOTIFY ---- */

/* A body of a name and a u32 of flags: WATCH, RING_SUBSCRIBE, FOLLOW. */
static int64_t name_flags_encode(struct td_wire_str name, uint32_t flags,
				 uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (name.len > TD_WIRE_MAX_NAME)
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_str(&wr, name.ptr, name.len);
	td_wire_wr_u32(&wr, flags);
	return td__wire_wr_done(&wr);
}

int64_t td_wire_watch_req_encode(const struct td_wire_watch_req *m,
				 uint8_t *buf, size_t cap)
{
	return name_flags_encode(m->name, m->flags, buf, cap);
}

int td_wire_watch_req_decode(const uint8_t *body, size_t len,
			     struct td_wire_watch_req *m, struct td_err *err)
{
	struct td_wire_rd rd;
	const char *why;
	size_t at;

	td_wire_rd_init(&rd, body, len, err);
	at = rd.off;
	m->name = td_wire_rd_str(&rd, TD_WIRE_MAX_NAME, "name");
	m->flags = td__wire_rd_flags(&rd, TD_WIRE_WATCH_PREFIX, "flags");
	/* The flag says whether name is a prefix, so check after both. */
	if (!rd.rc && td_wire_name_check(m->name.ptr, m->name.len,
					 m->flags & TD_WIRE_WATCH_PREFIX,
					 &why) < 0)
		td__wire_rd_fail(&rd, TD_ERR_INVALID_ARGUMENT, "name",
				 m->name.len, at, why);
	return td_wire_rd_end(&rd);
}

TD__WIRE_U64_CODEC(watch_rep, watch_id)

TD__WIRE_U64_CODEC(unwatch_req, watch_id)

int64_t td_wire_notify_encode(const struct td_wire_notify *m, uint8_t *buf,
			      size_t cap)
{
	struct td_wire_wr wr;

	if (m->name.len > TD_WIRE_MAX_NAME)
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u64(&wr, m->watch_id);
	td_wire_wr_u32(&wr, m->event);
	td_wire_wr_u64(&wr, m->version);
	td_wire_wr_str(&wr, m->name.ptr, m->name.len);
	return td__wire_wr_done(&wr);
}

int td_wire_notify_decode(const uint8_t *body, size_t len,
			  struct td_wire_notify *m, struct td_err *err)
{
	struct td_wire_rd rd;
	size_t at;

	td_wire_rd_init(&rd, body, len, err);
	m->watch_id = td_wire_rd_u64(&rd, "watch_id");
	at = rd.off;
	m->event = td_wire_rd_u32(&rd, "event");
	td__wire_rd_enum(&rd, m->event, TD_EVENT_PUBLISHED, TD_EVENT_DELETED,
			 at, "event");
	m->version = td_wire_rd_u64(&rd, "version");
	m->name = td__wire_rd_name(&rd, false, false, "name");
	return td_wire_rd_end(&rd);
}

/* ---- rings (docs/protocol.md §10) ---- */

int64_t td_wire_ring_create_req_encode(const struct td_wire_ring_create_req *m,
				       uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (m->name.len > TD_WIRE_MAX_NAME || m->ndim > TD_WIRE_MAX_DIMS ||
	    m->plane_count > TD_WIRE_RING_MAX_PLANES)
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_str(&wr, m->name.ptr, m->name.len);
	td_wire_wr_u32(&wr, m->flags);
	td_wire_wr_u32(&wr, m->slot_count);
	td_wire_wr_u32(&wr, m->reader_count);
	td_wire_wr_u32(&wr, m->dtype);
	td_wire_wr_u32(&wr, m->ndim);
	for (uint32_t i = 0; i < m->ndim; i++)
		td_wire_wr_u64(&wr, m->shape[i]);
	td_wire_wr_u32(&wr, m->plane_count);
	for (uint32_t i = 0; i < m->plane_count; i++)
		td_wire_wr_u64(&wr, m->plane_sizes[i]);
	return td__wire_wr_done(&wr);
}

int td_wire_ring_create_req_decode(const uint8_t *body, size_t len,
				   struct td_wire_ring_create_req *m,
				   struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->name = td__wire_rd_name(&rd, false, false, "name");
	m->flags = td__wire_rd_flags(&rd,
				     TD_WIRE_REQ_SCM | TD_WIRE_RING_HUGE |
					     TD_WIRE_RING_ROW_WAKE |
					     TD_WIRE_RING_ROW_OWNER |
					     TD_WIRE_RING_RESERVE,
				     "flags");
	m->slot_count = td_wire_rd_u32(&rd, "slot_count");
	m->reader_count = td_wire_rd_u32(&rd, "reader_count");
	m->dtype = td_wire_rd_u32(&rd, "dtype");
	m->ndim = td__wire_rd_count(&rd, TD_WIRE_MAX_DIMS, "ndim");
	for (uint32_t i = 0; i < m->ndim && !rd.rc; i++)
		m->shape[i] = td_wire_rd_u64(&rd, "shape");
	m->plane_count =
		td__wire_rd_count(&rd, TD_WIRE_RING_MAX_PLANES, "plane_count");
	for (uint32_t i = 0; i < m->plane_count && !rd.rc; i++)
		m->plane_sizes[i] = td_wire_rd_u64(&rd, "plane_sizes");
	return td_wire_rd_end(&rd);
}

int64_t td_wire_ring_rep_encode(const struct td_wire_ring_rep *m,
				uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (m->ndim > TD_WIRE_MAX_DIMS ||
	    m->plane_count > TD_WIRE_RING_MAX_PLANES ||
	    m->fd_count > TD_WIRE_RING_FDS)
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u64(&wr, m->id);
	td_wire_wr_u32(&wr, m->flags);
	td_wire_wr_u32(&wr, m->row);
	td_wire_wr_u32(&wr, m->reader_count);
	td_wire_wr_u32(&wr, m->slot_count);
	td_wire_wr_u32(&wr, m->plane_count);
	for (uint32_t i = 0; i < m->plane_count; i++) {
		td_wire_wr_u64(&wr, m->plane_off[i]);
		td_wire_wr_u64(&wr, m->plane_size[i]);
	}
	td_wire_wr_u64(&wr, m->slot_stride);
	td_wire_wr_u64(&wr, m->data_len);
	td_wire_wr_u32(&wr, m->dtype);
	td_wire_wr_u32(&wr, m->ndim);
	for (uint32_t i = 0; i < m->ndim; i++)
		td_wire_wr_u64(&wr, m->shape[i]);
	td__wire_wr_fdents(&wr, m->fd_count, m->fds);
	return td__wire_wr_done(&wr);
}

int td_wire_ring_rep_decode(const uint8_t *body, size_t len,
			    struct td_wire_ring_rep *m, struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->id = td_wire_rd_u64(&rd, "id");
	m->flags = td__wire_rd_flags(
		&rd,
		TD_WIRE_RING_HUGETLB | TD_WIRE_RING_THP |
			TD_WIRE_RING_UNRESERVED,
		"flags");
	m->row = td_wire_rd_u32(&rd, "row");
	m->reader_count = td_wire_rd_u32(&rd, "reader_count");
	m->slot_count = td_wire_rd_u32(&rd, "slot_count");
	m->plane_count =
		td__wire_rd_count(&rd, TD_WIRE_RING_MAX_PLANES, "plane_count");
	for (uint32_t i = 0; i < m->plane_count && !rd.rc; i++) {
		m->plane_off[i] = td_wire_rd_u64(&rd, "plane_off");
		m->plane_size[i] = td_wire_rd_u64(&rd, "plane_size");
	}
	m->slot_stride = td_wire_rd_u64(&rd, "slot_stride");
	m->data_len = td_wire_rd_u64(&rd, "data_len");
	m->dtype = td_wire_rd_u32(&rd, "dtype");
	m->ndim = td__wire_rd_count(&rd, TD_WIRE_MAX_DIMS, "ndim");
	for (uint32_t i = 0; i < m->ndim && !rd.rc; i++)
		m->shape[i] = td_wire_rd_u64(&rd, "shape");
	m->fd_count = td__wire_rd_fdents(&rd, TD_WIRE_RING_FDS, m->fds);
	return td_wire_rd_end(&rd);
}

int64_t td_wire_ring_sub_req_encode(const struct td_wire_ring_sub_req *m,
				    uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (!(m->flags & TD_WIRE_RSUB_WAIT))
		return name_flags_encode(m->name, m->flags, buf, cap);
	if (m->name.len > TD_WIRE_MAX_NAME)
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_str(&wr, m->name.ptr, m->name.len);
	td_wire_wr_u32(&wr, m->flags);
	td_wire_wr_u32(&wr, m->timeout_ms);
	return td__wire_wr_done(&wr);
}

int td_wire_ring_sub_req_decode(const uint8_t *body, size_t len,
				struct td_wire_ring_sub_req *m,
				struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->name = td__wire_rd_name(&rd, false, false, "name");
	/* FOLLOW's spare flag; RING_SUBSCRIBE takes SCM alone (daemon) */
	m->flags = td__wire_rd_flags(&rd,
				     TD_WIRE_REQ_SCM | TD_WIRE_FOLLOW_SPARE |
					     TD_WIRE_RSUB_WAIT,
				     "flags");
	m->timeout_ms = m->flags & TD_WIRE_RSUB_WAIT
				? td_wire_rd_u32(&rd, "timeout_ms")
				: 0;
	return td_wire_rd_end(&rd);
}

TD__WIRE_U64_CODEC(ring_close_req, id)

int64_t td_wire_ring_stat_rep_encode(const struct td_wire_ring_stat_rep *m,
				     uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u64(&wr, m->id);
	td_wire_wr_u32(&wr, m->slot_count);
	td_wire_wr_u32(&wr, m->reader_count);
	td_wire_wr_u32(&wr, m->subscribers);
	td_wire_wr_u32(&wr, m->flags);
	td_wire_wr_u64(&wr, m->latest_version);
	td_wire_wr_u64(&wr, m->requests);
	return td__wire_wr_done(&wr);
}

int td_wire_ring_stat_rep_decode(const uint8_t *body, size_t len,
				 struct td_wire_ring_stat_rep *m,
				 struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->id = td_wire_rd_u64(&rd, "id");
	m->slot_count = td_wire_rd_u32(&rd, "slot_count");
	m->reader_count = td_wire_rd_u32(&rd, "reader_count");
	m->subscribers = td_wire_rd_u32(&rd, "subscribers");
	m->flags = td_wire_rd_u32(&rd, "flags");
	m->latest_version = td_wire_rd_u64(&rd, "latest_version");
	m->requests = td_wire_rd_u64(&rd, "requests");
	return td_wire_rd_end(&rd);
}
