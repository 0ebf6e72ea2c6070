/* SPDX-License-Identifier: MIT */
/* libtensord: STATUS, the daemon's figures and its clients. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "wire-status.h"

_Static_assert((int)TD_REFUSAL_INPUT == (int)TD_REFUSED_INPUT &&
		       (int)TD_REFUSAL_QUOTA == (int)TD_REFUSED_QUOTA &&
		       (int)TD_REFUSAL_PERMISSION ==
			       (int)TD_REFUSED_PERMISSION,
	       "refusal kinds follow wire");

/*
 * What td_client_status() hands out: the public struct first (the
 * pointer the caller gets and td_status_free() takes), then what
 * <tensord/status.h> reads, where td_status may not grow rows (an
 * application built against it indexes uids[] by its size).
 */
struct status_full {
	struct td_status s;
	struct td_status_pinned *pins; /* uid_count of them, or NULL */
};

/* Copy the decoded reply (which borrows c->rbuf) into a new td_status. */
static int status_copy(const struct td_wire_status_rep *m,
		       struct td_status **out)
{
	struct status_full *full = calloc(1, sizeof(*full));
	struct td_status *s = full ? &full->s : NULL;

	if (!s)
		return -ENOMEM;
	if (m->has_pinned) {
		full->pins = calloc(m->uid_count ? m->uid_count : 1,
				    sizeof(*full->pins));
		if (!full->pins) {
			free(full);
			return -ENOMEM;
		}
	}
	s->clients = calloc(m->client_count ? m->client_count : 1,
			    sizeof(*s->clients));
	s->uids = calloc(m->uid_count ? m->uid_count : 1, sizeof(*s->uids));
	if (!s->clients || !s->uids) {
		td_status_free(s);
		return -ENOMEM;
	}
	td__str_copy(s->ident, sizeof(s->ident), m->ident);
	s->scope = m->scope;
	s->daemon_uid = m->daemon_uid;
	s->uptime_ms = m->uptime_ms;
	s->import_forced = m->import_opt;
	s->rings = m->rings;
	s->tensors = m->tensors;
	s->bytes = m->bytes;
	s->max_bytes = m->max_bytes;
	s->requests = m->requests;
	s->evictions = m->evictions;
	memcpy(s->refused, m->refused, sizeof(s->refused));
	s->log_suppressed = m->log_suppressed;
	s->policy_reloads = m->policy_reloads;
	s->byte_reserve = m->has_reserve ? m->byte_reserve : UINT64_MAX;
	s->clients_total = m->clients_total;
	s->client_count = m->client_count;
	for (uint32_t i = 0; i < m->client_count; i++) {
		const struct td_wire_status_client *w = &m->clients[i];
		struct td_status_client *o = &s->clients[i];

		*o = (struct td_status_client){
			.pid = w->pid, .uid = w->uid,
			.path_in = w->import_in, .leases = w->leases,
			.allocs = w->allocs, .watches = w->watches,
			.waiters = w->waiters, .bytes_held = w->bytes_held,
			.requests = w->requests, .refusals = w->refusals,
			.age_ms = w->age_ms,
		};
		td__str_copy(o->comm, sizeof(o->comm), w->comm);
	}
	s->uid_count = m->uid_count;
	for (uint32_t i = 0; i < m->uid_count; i++)
		s->uids[i] = (struct td_status_uid){
			m->uids[i].uid, m->uids[i].bytes, m->uids[i].quota,
			m->uids[i].pinned};
	for (uint32_t i = 0; full->pins && i < m->uid_count; i++)
		full->pins[i] = (struct td_status_pinned){
			m->uids[i].pinned_use, m->uids[i].pinned_limit};
	*out = s;
	return 0;
}

int td_client_status(struct td_client *c, struct td_status **out,
		     struct td_error *err)
{
	struct td_wire_status_req req = {0};
	struct td_wire_status_rep m = {0};
	struct td_err e = {0};
	struct td__msg rep;
	int64_t len;
	int rc;

	if (!c || !out)
		return td__fail(err, -EINVAL, "missing argument");
	*out = NULL;
	m.clients = calloc(TD_WIRE_STATUS_MAX_CLIENTS, sizeof(*m.clients));
	m.uids = calloc(TD_WIRE_STATUS_MAX_UIDS, sizeof(*m.uids));
	if (!m.clients || !m.uids) {
		rc = td__fail(err, -ENOMEM, "out of memory");
		goto out_free;
	}
	td__client_lock(c);
	if (!td__has(c, TD_WIRE_FEAT_STATUS)) {
		rc = td__fail(err, -EOPNOTSUPP,
			      "this daemon does not serve STATUS");
		goto out;
	}
	len = td_wire_status_req_encode(&req, c->sbuf + TD_WIRE_HDR_LEN,
					TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
	rc = td__call(c, TD_OP_STATUS, (size_t)len, NULL, 0, &rep, err);
	if (rc < 0)
		goto out;
	td__msg_close_fds(&rep);
	m.has_reserve = td__has(c, TD_WIRE_FEAT_STATUS_RESERVE);
	m.has_pinned = td__has(c, TD_WIRE_FEAT_STATUS_PINNED);
	rc = td_wire_status_rep_decode(rep.body, rep.body_len, &m,
				       TD_WIRE_STATUS_MAX_CLIENTS,
				       TD_WIRE_STATUS_MAX_UIDS, &e);
	if (rc < 0) {
		rc = td__fail(err, -EPROTO, "bad STATUS reply: %s",
			      e.reason ? e.reason : "");
		goto out;
	}
	rc = status_copy(&m, out);
	if (rc < 0)
		td__fail(err, rc, "out of memory");
out:
	pthread_mutex_unlock(&c->lock);
out_free:
	free(m.clients);
	free(m.uids);
	return rc;
}

int td_status_uid_pinned(const struct td_status *s, size_t i,
			 struct td_status_pinned *out)
{
	const struct status_full *full = (const struct status_full *)s;

	if (!s || !out || i >= s->uid_count)
		return -EINVAL;
	if (!full->pins) {
		*out = (struct td_status_pinned){0, 0};
		return -EOPNOTSUPP;
	}
	*out = full->pins[i];
	return 0;
}

void td_status_free(struct td_status *s)
{
	if (!s)
		return;
	free(s->clients);
	free(s->uids);
	free(((struct status_full *)s)->pins);
	free(s);
}
