/* SPDX-License-Identifier: MIT */
/*
 * What operators see and do: STATUS (the daemon's figures, its clients
 * and uids) and SIGHUP's policy reload. The audit log of refusals is
 * audit.c's, below peer.c.
 *
 * Who sees what: the daemon's own uid and root see every client and
 * uid; any other uid sees the figures of the whole daemon (counts and
 * totals, as LIST already shows sizes) but only its own uid's clients
 * and its own uid's row (docs/protocol.md §11).
 */
#include "sd.h"
#include "store.h"
#include "wire-status.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- STATUS ---- */

static uint64_t lease_bytes(const struct td__lease *l)
{
	struct td_wire_entry e;

	if (l->v)
		return l->v->bytes;
	td__ring_entry(l->ring, false, &e);
	return e.bytes;
}

static void client_row(const struct td__peer *p, uint64_t now,
		       struct td_wire_status_client *c)
{
	uint64_t held = 0;
	uint32_t holds = 0;

	for (const struct td__list *l = p->leases.next; l != &p->leases;
	     l = l->next)
		held += lease_bytes(
			td__container_of(l, const struct td__lease, link));
	/* a follower's hold of a version left behind is a lease too */
	td__follow_peer_held(p, &holds, &held);
	*c = (struct td_wire_status_client){
		.pid = (uint32_t)p->pid,
		.uid = (uint32_t)p->uid,
		.import_in = p->import_in,
		.leases = p->n_leases + holds,
		.allocs = p->n_allocs,
		.watches = p->n_watches,
		.waiters = p->n_waiters,
		.bytes_held = held,
		.requests = p->requests,
		.refusals = p->refusals,
		.age_ms = now - p->since_ms,
		.comm = {p->comm, (uint16_t)strlen(p->comm)},
	};
}

/* uid's row, bytes charged to it, when the asker may see it. */
static void uid_row(struct td_wire_status_rep *m, bool all, uid_t asker,
		    uid_t uid, uint64_t bytes)
{
	if ((!all && uid != asker) || m->uid_count == TD_WIRE_STATUS_MAX_UIDS)
		return;
	m->uids[m->uid_count++] = (struct td_wire_status_uid){
		.uid = (uint32_t)uid,
		.bytes = bytes,
		/* the one the allocations are checked against */
		.quota = td__tenant_quota(uid),
		/* kept as versions come and go (td__acct_pin): summed
		 * over every name for each row, it cost STATUS the names
		 * times the uids */
		.pinned = td__acct_pinned(td__d->store, uid),
		/* the one GET, FOLLOW and RING_SUBSCRIBE are checked
		 * against (tenant.c): not the PIN versions above */
		.pinned_use = td__tenant_held(uid, TD__LIM_PINNED),
		.pinned_limit = td__tenant_limit(uid, TD__LIM_PINNED),
	};
}

/*
 * Whether uid, charged no bytes, has a row of pinned figures to show:
 * bytes against its pinned limit, a `limit uid=N pinned` line of its
 * own (what it may hold, set for it), or it is the asker (who sees its
 * own limit). Every other connected uid would show 0 of the limit all
 * have, and crowd out the uids that pin within the rows' cap.
 */
static bool pinned_row(uid_t uid, uid_t asker)
{
	uint64_t v;

	return uid == asker || td__tenant_held(uid, TD__LIM_PINNED) ||
	       td__policy_limit(td__d->policy, uid, TD__LIM_PINNED, &v);
}

static void status_fill(struct td__peer *asker, bool all,
			struct td_wire_status_rep *m)
{
	struct td__daemon *d = td__d;
	struct td__store *s = d->store;
	struct td__ring *rings[TD__MAX_RINGS];
	uint64_t now = uv_now(d->loop);

	m->ident = (struct td_wire_str){"tensord " TD_VERSION,
					(uint16_t)(sizeof("tensord "
							  TD_VERSION) - 1)};
	m->scope = all ? TD_WIRE_STATUS_ALL : TD_WIRE_STATUS_UID;
	m->daemon_uid = (uint32_t)geteuid();
	m->uptime_ms = now - d->stats.started_ms;
	m->import_opt = d->opts.import;
	m->rings = td__ring_list((struct td_wire_str){"", 0},
				 (struct td_wire_str){"", 0}, rings);
	m->tensors = s->count;
	m->bytes = s->total;
	m->max_bytes = d->opts.max_bytes;
	m->requests = d->requests;
	m->evictions = d->stats.evictions;
	memcpy(m->refused, d->stats.refused, sizeof(m->refused));
	m->log_suppressed = d->stats.log_suppressed;
	m->policy_reloads = d->stats.policy_reloads;
	m->has_reserve = asker->features & TD_WIRE_FEAT_STATUS_RESERVE;
	m->byte_reserve = td__byte_reserve(d->opts.max_bytes);
	for (const struct td__list *l = d->peers.next; l != &d->peers;
	     l = l->next) {
		const struct td__peer *p =
			td__container_of(l, const struct td__peer, link);

		if (p->dead)
			continue;
		m->clients_total++;
		if ((!all && p->uid != asker->uid) ||
		    m->client_count == TD_WIRE_STATUS_MAX_CLIENTS)
			continue;
		client_row(p, now, &m->clients[m->client_count++]);
	}
	m->has_pinned = asker->features & TD_WIRE_FEAT_STATUS_PINNED;
	for (size_t i = 0; i < s->nuids; i++)
		uid_row(m, all, asker->uid, s->uids[i].uid, s->uids[i].bytes);
	/* a client that knows the pinned figures gets a row for each other
	 * uid the daemon counts that has one to show: a reader that
	 * published nothing has one; a uid that is only connected, with
	 * the limit every uid has, takes none of the rows (docs/protocol.md
	 * §11) */
	for (size_t i = 0; m->has_pinned && i < td__tenant_count(); i++) {
		uid_t uid = td__tenant_uid(i);
		bool seen = !pinned_row(uid, asker->uid);

		for (size_t j = 0; j < s->nuids && !seen; j++)
			seen = s->uids[j].uid == uid;
		if (!seen)
			uid_row(m, all, asker->uid, uid, 0);
	}
}

void td__status(struct td__peer *p, const struct td__req *rq)
{
	/* static: single-threaded, and too big for the stack (~64 KiB) */
	static struct td_wire_status_client clients[TD_WIRE_STATUS_MAX_CLIENTS];
	static struct td_wire_status_uid uids[TD_WIRE_STATUS_MAX_UIDS];
	const struct td_wire_hdr *h = rq->h;
	struct td_wire_status_rep m = {.clients = clients, .uids = uids};
	struct td_wire_status_req req;
	struct td_err e = {0};
	int64_t len;
	int rc;

	rc = td_wire_status_req_decode(rq->body, h->body_len, &req, &e);
	if (td__peer_bad_body(p, h, rc, &e))
		return;
	status_fill(p, p->uid == 0 || p->uid == geteuid(), &m);
	len = td_wire_status_rep_encode(&m, TD__TX_BODY(td__d), TD__TX_CAP);
	if (len < 0) {
		/* the caps keep it below TD_WIRE_MAX_MSG; say so if not */
		td__peer_error(p, h->opcode, h->request_id, -EMSGSIZE,
			       "STATUS reply does not fit a datagram");
		return;
	}
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
		      (size_t)len, NULL, 0);
}

/* ---- SIGHUP: reload the policy ---- */

int td__policy_reload(struct td__daemon *d)
{
	struct td__policy *pol;
	int rc;

	if (!d->opts.policy_path) {
		td__log(TD_LOG_WARN, "SIGHUP: no --policy file to reload");
		return -ENOENT;
	}
	pol = calloc(1, sizeof(*pol));
	if (!pol)
		return -ENOMEM;
	/* td__policy_load logs why a file is refused */
	rc = td__policy_load(d->opts.policy_path, pol);
	if (rc < 0) {
		free(pol);
		td__log(TD_LOG_ERROR, "SIGHUP: policy %s refused, the "
				      "previous policy stays in force",
			d->opts.policy_path);
		return rc;
	}
	/* staged publishes were checked against the old policy: settled */
	td__store_settle(NULL, 0);
	/* one loop thread: no request sees half of either policy */
	td__policy_fini(d->policy);
	free(d->policy);
	d->policy = pol;
	d->stats.policy_reloads++;
	/* limit lines: a uid connected now has its limits already resolved */
	td__tenants_resolve();
	td__lease_policy_changed();
	td__ring_policy_changed();
	td__follow_policy_changed();
	td__log(TD_LOG_WARN, "SIGHUP: policy %s reloaded (%u allow rules, "
			     "%u quotas, %u limits)",
		d->opts.policy_path, pol->nrules, pol->nquotas, pol->nlimits);
	return 0;
}

static void on_hup(uv_signal_t *sig, int signum)
{
	(void)signum;
	td__sd_reloading();
	td__policy_reload(sig->data);
	td__sd_reloaded(sig->data);
}

void td__status_start(struct td__daemon *d)
{
	d->stats.started_ms = uv_now(d->loop);
	uv_signal_init(d->loop, &d->sighup);
	d->sighup.data = d;
	uv_signal_start(&d->sighup, on_hup, SIGHUP);
}
