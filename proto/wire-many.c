/* SPDX-License-Identifier: MIT */
/*
 * PUBLISH_MANY and GET_MANY (wire.h, TD_WIRE_FEAT_MANY; docs/protocol.md
 * §6.10): bodies that hold several PUBLISH requests or GET replies.
 */
#include <errno.h>
#include <string.h>

#include "wire-int.h"

/* The element count: 1..TD_WIRE_MANY_MAX. */
static uint32_t rd_many(struct td_wire_rd *rd)
{
	size_t at = rd->off;
	uint32_t n = td__wire_rd_count(rd, TD_WIRE_MANY_MAX, "count");

	if (!rd->rc && n == 0)
		td__wire_rd_fail(rd, TD_ERR_MALFORMED, "count", 0, at,
				 "no elements");
	return n;
}

int64_t td_wire_publish_many_req_encode(
	const struct td_wire_publish_many_req *m, uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (m->count == 0 || m->count > TD_WIRE_MANY_MAX)
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u32(&wr, m->count);
	for (uint32_t i = 0; i < m->count; i++) {
		td_wire_wr_u32(&wr, m->el[i].attached);
		td_wire_wr_bytes(&wr, m->el[i].body.ptr, m->el[i].body.len);
	}
	return td__wire_wr_done(&wr);
}

int td_wire_publish_many_req_decode(const uint8_t *body, size_t len,
				    struct td_wire_publish_many_req *m,
				    struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->count = rd_many(&rd);
	for (uint32_t i = 0; i < m->count && !rd.rc; i++) {
		m->el[i].attached = td__wire_rd_count(
			&rd, TD_WIRE_MAX_PLANES + 1, "attached");
		m->el[i].body = td_wire_rd_bytes(&rd, TD_WIRE_MAX_MSG, "body");
	}
	return td_wire_rd_end(&rd);
}

int64_t td_wire_publish_many_rep_encode(
	const struct td_wire_publish_many_rep *m, uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (m->count == 0 || m->count > TD_WIRE_MANY_MAX)
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u32(&wr, m->count);
	for (uint32_t i = 0; i < m->count; i++)
		td_wire_wr_u64(&wr, m->versions[i]);
	return td__wire_wr_done(&wr);
}

int td_wire_publish_many_rep_decode(const uint8_t *body, size_t len,
				    struct td_wire_publish_many_rep *m,
				    struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->count = rd_many(&rd);
	for (uint32_t i = 0; i < m->count && !rd.rc; i++) {
		size_t at = rd.off;

		m->versions[i] = td_wire_rd_u64(&rd, "version");
		if (!rd.rc && m->versions[i] == 0)
			td__wire_rd_fail(&rd, TD_ERR_MALFORMED, "version", 0,
					 at, "version 0 is never published");
	}
	return td_wire_rd_end(&rd);
}

int64_t td_wire_get_many_req_encode(const struct td_wire_get_many_req *m,
				    uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (m->count == 0 || m->count > TD_WIRE_MANY_MAX ||
	    (m->flags & ~(TD_WIRE_REQ_SCM | TD_WIRE_MANY_NEWER)))
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u32(&wr, m->flags);
	td_wire_wr_u32(&wr, m->count);
	for (uint32_t i = 0; i < m->count; i++)
		td_wire_wr_str(&wr, m->names[i].ptr, m->names[i].len);
	if (m->flags & TD_WIRE_MANY_NEWER) {
		td_wire_wr_u64(&wr, m->version);
		td_wire_wr_u32(&wr, m->timeout_ms);
	}
	return td__wire_wr_done(&wr);
}

int td_wire_get_many_req_decode(const uint8_t *body, size_t len,
				struct td_wire_get_many_req *m,
				struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->flags = td__wire_rd_flags(&rd, TD_WIRE_REQ_SCM | TD_WIRE_MANY_NEWER,
				     "flags");
	m->version = 0;
	m->timeout_ms = 0;
	m->count = rd_many(&rd);
	for (uint32_t i = 0; i < m->count && !rd.rc; i++) {
		size_t at = rd.off;

		m->names[i] = td__wire_rd_name(&rd, false, false, "name");
		for (uint32_t j = 0; j < i && !rd.rc; j++)
			if (m->names[j].len == m->names[i].len &&
			    memcmp(m->names[j].ptr, m->names[i].ptr,
				   m->names[i].len) == 0)
				td__wire_rd_fail(&rd, TD_ERR_MALFORMED, "name",
						 j, at, "a name twice");
	}
	/* present exactly with the flag: one encoding per body */
	if (!rd.rc && (m->flags & TD_WIRE_MANY_NEWER)) {
		m->version = td_wire_rd_u64(&rd, "version");
		m->timeout_ms = td_wire_rd_u32(&rd, "timeout_ms");
	}
	return td_wire_rd_end(&rd);
}

int64_t td_wire_get_many_rep_encode(const struct td_wire_get_many_rep *m,
				    uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (m->count == 0 || m->count > TD_WIRE_MANY_MAX)
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u32(&wr, m->count);
	for (uint32_t i = 0; i < m->count; i++)
		td_wire_wr_bytes(&wr, m->reps[i].ptr, m->reps[i].len);
	return td__wire_wr_done(&wr);
}

int td_wire_get_many_rep_decode(const uint8_t *body, size_t len,
				struct td_wire_get_many_rep *m,
				struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->count = rd_many(&rd);
	for (uint32_t i = 0; i < m->count && !rd.rc; i++)
		m->reps[i] = td_wire_rd_bytes(&rd, TD_WIRE_MAX_MSG, "rep");
	return td_wire_rd_end(&rd);
}
