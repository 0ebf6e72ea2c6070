/* SPDX-License-Identifier: MIT */
/* The STATUS request and reply, the RING_WAKE reply (wire-status.h). */
#include <errno.h>

#include "wire-int.h"
#include "wire-status.h"

int64_t td_wire_status_req_encode(const struct td_wire_status_req *m,
				  uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u32(&wr, m->flags);
	return td__wire_wr_done(&wr);
}

int td_wire_status_req_decode(const uint8_t *body, size_t len,
			      struct td_wire_status_req *m, struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->flags = td__wire_rd_flags(&rd, 0, "flags");
	return td_wire_rd_end(&rd);
}

int64_t td_wire_status_rep_encode(const struct td_wire_status_rep *m,
				  uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_str(&wr, m->ident.ptr, m->ident.len);
	td_wire_wr_u32(&wr, m->scope);
	td_wire_wr_u32(&wr, m->daemon_uid);
	td_wire_wr_u64(&wr, m->uptime_ms);
	td_wire_wr_u32(&wr, m->import_opt);
	td_wire_wr_u32(&wr, m->rings);
	td_wire_wr_u64(&wr, m->tensors);
	td_wire_wr_u64(&wr, m->bytes);
	td_wire_wr_u64(&wr, m->max_bytes);
	td_wire_wr_u64(&wr, m->requests);
	td_wire_wr_u64(&wr, m->evictions);
	for (int k = 0; k < TD_REFUSED_KINDS; k++)
		td_wire_wr_u64(&wr, m->refused[k]);
	td_wire_wr_u64(&wr, m->log_suppressed);
	td_wire_wr_u64(&wr, m->policy_reloads);
	td_wire_wr_u32(&wr, m->clients_total);
	td_wire_wr_u32(&wr, m->client_count);
	for (uint32_t i = 0; i < m->client_count; i++) {
		const struct td_wire_status_client *c = &m->clients[i];

		td_wire_wr_u32(&wr, c->pid);
		td_wire_wr_u32(&wr, c->uid);
		td_wire_wr_u32(&wr, c->import_in);
		td_wire_wr_u32(&wr, c->leases);
		td_wire_wr_u32(&wr, c->allocs);
		td_wire_wr_u32(&wr, c->watches);
		td_wire_wr_u32(&wr, c->waiters);
		td_wire_wr_u64(&wr, c->bytes_held);
		td_wire_wr_u64(&wr, c->requests);
		td_wire_wr_u64(&wr, c->refusals);
		td_wire_wr_u64(&wr, c->age_ms);
		td_wire_wr_str(&wr, c->comm.ptr, c->comm.len);
	}
	td_wire_wr_u32(&wr, m->uid_count);
	for (uint32_t i = 0; i < m->uid_count; i++) {
		const struct td_wire_status_uid *u = &m->uids[i];

		td_wire_wr_u32(&wr, u->uid);
		td_wire_wr_u64(&wr, u->bytes);
		td_wire_wr_u64(&wr, u->quota);
		td_wire_wr_u64(&wr, u->pinned);
		if (m->has_pinned) {
			td_wire_wr_u64(&wr, u->pinned_use);
			td_wire_wr_u64(&wr, u->pinned_limit);
		}
	}
	if (m->has_reserve)
		td_wire_wr_u64(&wr, m->byte_reserve);
	return td__wire_wr_done(&wr);
}

/*
 * Row i's uid in no row before it: a client adds the figures up by uid,
 * so a repeated row would count a uid twice. -EBADMSG at its offset.
 * At most TD_WIRE_STATUS_MAX_UIDS rows: 32640 compares at worst.
 */
static void uid_once(struct td_wire_rd *rd,
		     const struct td_wire_status_uid *u, uint32_t i)
{
	for (uint32_t j = 0; j < i; j++)
		if (u[j].uid == u[i].uid) {
			/* the row is 44 bytes; rd->off is past it */
			td__wire_rd_fail(rd, TD_ERR_MALFORMED, "uid",
					 u[i].uid, rd->off - 44,
					 "a uid row repeated");
			return;
		}
}

int td_wire_status_rep_decode(const uint8_t *body, size_t len,
			      struct td_wire_status_rep *m,
			      uint32_t client_cap, uint32_t uid_cap,
			      struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->ident = td_wire_rd_str(&rd, 64, "ident");
	m->scope = td_wire_rd_u32(&rd, "scope");
	td__wire_rd_enum(&rd, m->scope, TD_WIRE_STATUS_ALL,
			 TD_WIRE_STATUS_UID, rd.off - 4, "scope");
	m->daemon_uid = td_wire_rd_u32(&rd, "daemon_uid");
	m->uptime_ms = td_wire_rd_u64(&rd, "uptime_ms");
	m->import_opt = td_wire_rd_u32(&rd, "import_opt");
	td__wire_rd_enum(&rd, m->import_opt, TD_IMPORT_AUTO, TD_IMPORT_SCM,
			 rd.off - 4, "import_opt");
	m->rings = td_wire_rd_u32(&rd, "rings");
	m->tensors = td_wire_rd_u64(&rd, "tensors");
	m->bytes = td_wire_rd_u64(&rd, "bytes");
	m->max_bytes = td_wire_rd_u64(&rd, "max_bytes");
	m->requests = td_wire_rd_u64(&rd, "requests");
	m->evictions = td_wire_rd_u64(&rd, "evictions");
	for (int k = 0; k < TD_REFUSED_KINDS; k++)
		m->refused[k] = td_wire_rd_u64(&rd, "refused");
	m->log_suppressed = td_wire_rd_u64(&rd, "log_suppressed");
	m->policy_reloads = td_wire_rd_u64(&rd, "policy_reloads");
	m->clients_total = td_wire_rd_u32(&rd, "clients_total");
	m->client_count = td__wire_rd_count(&rd, client_cap, "client_count");
	for (uint32_t i = 0; rd.rc == 0 && i < m->client_count; i++) {
		struct td_wire_status_client *c = &m->clients[i];

		c->pid = td_wire_rd_u32(&rd, "pid");
		c->uid = td_wire_rd_u32(&rd, "uid");
		c->import_in = td_wire_rd_u32(&rd, "import_in");
		c->leases = td_wire_rd_u32(&rd, "leases");
		c->allocs = td_wire_rd_u32(&rd, "allocs");
		c->watches = td_wire_rd_u32(&rd, "watches");
		c->waiters = td_wire_rd_u32(&rd, "waiters");
		c->bytes_held = td_wire_rd_u64(&rd, "bytes_held");
		c->requests = td_wire_rd_u64(&rd, "requests");
		c->refusals = td_wire_rd_u64(&rd, "refusals");
		c->age_ms = td_wire_rd_u64(&rd, "age_ms");
		c->comm = td_wire_rd_str(&rd, TD_WIRE_STATUS_MAX_COMM,
					 "comm");
	}
	m->uid_count = td__wire_rd_count(&rd, uid_cap, "uid_count");
	for (uint32_t i = 0; rd.rc == 0 && i < m->uid_count; i++) {
		struct td_wire_status_uid *u = &m->uids[i];

		u->uid = td_wire_rd_u32(&rd, "uid");
		u->bytes = td_wire_rd_u64(&rd, "bytes");
		u->quota = td_wire_rd_u64(&rd, "quota");
		u->pinned = td_wire_rd_u64(&rd, "pinned");
		u->pinned_use = m->has_pinned
					? td_wire_rd_u64(&rd, "pinned_use")
					: 0;
		u->pinned_limit = m->has_pinned
					  ? td_wire_rd_u64(&rd, "pinned_limit")
					  : 0;
		if (m->has_pinned && rd.rc == 0)
			uid_once(&rd, m->uids, i);
	}
	m->byte_reserve =
		m->has_reserve ? td_wire_rd_u64(&rd, "byte_reserve") : 0;
	if (rd.rc) {
		m->client_count = 0; /* nothing half-read is handed out */
		m->uid_count = 0;
	}
	return td_wire_rd_end(&rd);
}

int64_t td_wire_ring_wake_rep_encode(const struct td_wire_ring_wake_rep *m,
				     uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (m->count > TD_WIRE_MAX_FDS)
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u32(&wr, m->count);
	for (uint32_t i = 0; i < m->count; i++) {
		td_wire_wr_u32(&wr, m->ents[i].row);
		td_wire_wr_u32(&wr, m->ents[i].gen);
	}
	return td__wire_wr_done(&wr);
}

int td_wire_ring_wake_rep_decode(const uint8_t *body, size_t len,
				 struct td_wire_ring_wake_rep *m,
				 struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->count = td__wire_rd_count(&rd, TD_WIRE_MAX_FDS, "count");
	for (uint32_t i = 0; rd.rc == 0 && i < m->count; i++) {
		m->ents[i].row = td_wire_rd_u32(&rd, "row");
		m->ents[i].gen = td_wire_rd_u32(&rd, "gen");
	}
	return td_wire_rd_end(&rd);
}

int64_t td_wire_follow_rep_encode(const struct td_wire_follow_rep *m,
				  uint8_t *buf, size_t cap)
{
	struct td_wire_wr wr;

	if (m->fd_count > TD_WIRE_FOLLOW_FDS)
		return -EINVAL;
	td_wire_wr_init(&wr, buf, cap);
	td_wire_wr_u64(&wr, m->id);
	td_wire_wr_u32(&wr, m->entry_count);
	td_wire_wr_u32(&wr, m->layout);
	td__wire_wr_fdents(&wr, m->fd_count, m->fds);
	return td__wire_wr_done(&wr);
}

int td_wire_follow_rep_decode(const uint8_t *body, size_t len,
			      struct td_wire_follow_rep *m,
			      struct td_err *err)
{
	struct td_wire_rd rd;

	td_wire_rd_init(&rd, body, len, err);
	m->id = td_wire_rd_u64(&rd, "id");
	m->entry_count = td_wire_rd_u32(&rd, "entry_count");
	m->layout = td_wire_rd_u32(&rd, "layout");
	m->fd_count = td__wire_rd_fdents(&rd, TD_WIRE_FOLLOW_FDS, m->fds);
	return td_wire_rd_end(&rd);
}

const char *td_wire_refusal_name(uint32_t kind)
{
	static const char *const names[TD_REFUSED_KINDS] = {
		"permission", "quota", "input"};

	return kind < TD_REFUSED_KINDS ? names[kind] : NULL;
}
