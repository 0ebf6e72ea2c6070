/* SPDX-License-Identifier: MIT */
/*
 * What operators see and do: STATUS (the daemon's figures, its clients
 * and uids), the audit log of refusals, and SIGHUP's policy reload.
 *
 * Who sees what: the daemon's own uid and root see every client and
 * uid; any other uid sees the figures of the whole daemon (counts and
 * totals, as LIST already shows sizes) but only its own uid's clients
 * and its own uid's row (docs/protocol.md §11).
 */
#include "store.h"
#include "wire-status.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Audit log rate limit, across all peers: a burst of AUDIT_BURST lines,
 * then AUDIT_PER_S a second. Per peer each kind is logged once anyway;
 * this bounds a client that reconnects to refresh that.
 */
#define AUDIT_BURST 20.0
#define AUDIT_PER_S 5.0

void td__status_peer_init(struct td__peer *p)
{
	char path[64];
	ssize_t n = 0;
	int fd;

	p->since_ms = uv_now(td__d->loop);
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)p->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, p->comm, sizeof(p->comm) - 1);
		close(fd);
	}
	if (n < 0)
		n = 0;
	/* the kernel ends it with a newline; keep printable bytes only */
	p->comm[n] = 0;
	for (ssize_t i = 0; i < n; i++)
		if (p->comm[i] == '\n')
			p->comm[i] = 0;
		else if ((unsigned char)p->comm[i] < 0x20 ||
			 (unsigned char)p->comm[i] >= 0x7f)
			p->comm[i] = '?';
}

/* Which refusal an error status is; -1 for answers that are no refusal
 * (no such name, timed out, out of memory, busy). */
static int refusal_kind(int status)
{
	switch (-status) {
	case EACCES:
	case EPERM:
		return TD_REFUSED_PERMISSION;
	case EDQUOT:
	case ENOSPC:
	case ENOBUFS:
		return TD_REFUSED_QUOTA;
	case EINVAL:
	case EBADMSG:
	case EPROTO:
	case EOVERFLOW:
	case ENODATA:
	case EMSGSIZE:
	case E2BIG:
	case EOPNOTSUPP:
	case EILSEQ:
	case ENAMETOOLONG:
	case EPROTONOSUPPORT:
	case EBADF:
		return TD_REFUSED_INPUT;
	default:
		return -1;
	}
}

/* May one more audit line be written now? */
static bool audit_token(struct td__stats *st)
{
	uint64_t now = uv_now(td__d->loop);

	if (st->audit_ms == 0 && st->audit_tokens == 0)
		st->audit_tokens = AUDIT_BURST;
	st->audit_tokens += (double)(now - st->audit_ms) * AUDIT_PER_S / 1000;
	if (st->audit_tokens > AUDIT_BURST)
		st->audit_tokens = AUDIT_BURST;
	st->audit_ms = now;
	if (st->audit_tokens < 1) {
		st->log_suppressed++;
		return false;
	}
	st->audit_tokens -= 1;
	return true;
}

void td__audit_refusal(struct td__peer *p, uint16_t op, int status,
		       const char *reason)
{
	struct td__stats *st = &td__d->stats;
	int k = refusal_kind(status);

	if (k < 0)
		return;
	st->refused[k]++;
	p->refusals++;
	if (p->refusals_logged & (1u << k))
		return;
	p->refusals_logged |= (uint8_t)(1u << k);
	if (!audit_token(st))
		return;
	td__log(TD_LOG_WARN,
		"refused %s: pid %d uid %u (%s): %s: %s (%s) [further %s "
		"refusals of this client are counted, not logged]",
		td_wire_refusal_name((uint32_t)k), (int)p->pid,
		(unsigned)p->uid, p->comm, td_wire_op_name(op), reason,
		strerror(-status), td_wire_refusal_name((uint32_t)k));
}

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

	for (const struct td__list *l = p->leases.next; l != &p->leases;
	     l = l->next)
		held += lease_bytes(
			td__container_of(l, const struct td__lease, link));
	*c = (struct td_wire_status_client){
		.pid = (uint32_t)p->pid,
		.uid = (uint32_t)p->uid,
		.import_in = p->import_in,
		.leases = p->n_leases,
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

/* Pinned bytes of uid's current versions. */
static uint64_t pinned_bytes(const struct td__store *s, uid_t uid)
{
	uint64_t n = 0;

	for (size_t i = 0; i < s->count; i++)
		if (s->names[i]->uid == uid &&
		    (s->names[i]->flags & TD_WIRE_PUB_PIN))
			n += s->names[i]->acct;
	return n;
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
	for (size_t i = 0; i < s->nuids; i++) {
		uid_t uid = s->uids[i].uid;

		if ((!all && uid != asker->uid) ||
		    m->uid_count == TD_WIRE_STATUS_MAX_UIDS)
			continue;
		m->uids[m->uid_count++] = (struct td_wire_status_uid){
			.uid = (uint32_t)uid,
			.bytes = s->uids[i].bytes,
			.quota = td__policy_quota(d->policy, uid,
						  d->opts.uid_max_bytes),
			.pinned = pinned_bytes(s, uid),
		};
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
	/* one loop thread: no request sees half of either policy */
	td__policy_fini(d->policy);
	free(d->policy);
	d->policy = pol;
	d->stats.policy_reloads++;
	td__log(TD_LOG_WARN, "SIGHUP: policy %s reloaded (%u allow rules, "
			     "%u quotas)",
		d->opts.policy_path, pol->nrules, pol->nquotas);
	return 0;
}

static void on_hup(uv_signal_t *sig, int signum)
{
	(void)signum;
	td__policy_reload(sig->data);
}

void td__status_start(struct td__daemon *d)
{
	d->stats.started_ms = uv_now(d->loop);
	uv_signal_init(d->loop, &d->sighup);
	d->sighup.data = d;
	uv_signal_start(&d->sighup, on_hup, SIGHUP);
}
