/* SPDX-License-Identifier: MIT */
/*
 * The one dispatcher: a received datagram's header is checked here, then
 * its opcode's row of the table below says who handles it, the
 * permission it needs on the name it names, whether it may carry fds and
 * whether it may be parked. peer.c and ring.c call back up through the
 * handlers this file registers, so no daemon file calls one above it
 * (docs/architecture.md).
 */
#include "daemon.h"

#include <errno.h>

#define R TD__PERM_READ
#define W TD__PERM_WRITE

static const struct td__op ops[] = {
	{TD_OP_HELLO, 0, TD__OP_EARLY, td__peer_hello},
	{TD_OP_ALLOC, W, 0, td__loan_alloc},
	{TD_OP_PUBLISH, W, TD__OP_FDS, td__publish},
	{TD_OP_GET, R, TD__OP_PARKS, td__lease_get},
	{TD_OP_RELEASE, 0, 0, td__lease_release},
	{TD_OP_LIST, R, 0, td__catalog_list},
	{TD_OP_STAT, R, 0, td__catalog_stat},
	{TD_OP_DELETE, W, 0, td__catalog_delete},
	{TD_OP_WATCH, R, 0, td__catalog_watch},
	{TD_OP_UNWATCH, 0, 0, td__catalog_unwatch},
	{TD_OP_RING_CREATE, W, 0, td__ring_create},
	{TD_OP_RING_SUBSCRIBE, R, TD__OP_PARKS, td__ring_subscribe},
	{TD_OP_RING_CLOSE, 0, 0, td__ring_close},
	{TD_OP_RING_STAT, R, 0, td__ring_stat},
	{TD_OP_STATUS, 0, 0, td__status},
	{TD_OP_RING_WAKE, 0, TD__OP_FDS, td__ring_wake},
	{TD_OP_FOLLOW, R, 0, td__follow},
	{TD_OP_FOLLOW_CLOSE, 0, 0, td__follow_close},
	{TD_OP_FOLLOW_WAKE, 0, TD__OP_FDS, td__follow_wake},
	{TD_OP_STAGE_PAGE, 0, 0, td__stage_page},
	{TD_OP_PUBLISH_MANY, W, TD__OP_FDS, td__publish_many},
	{TD_OP_GET_MANY, R, TD__OP_PARKS, td__lease_get_many},
};

#undef R
#undef W

static const struct td__op *op_find(uint16_t opcode)
{
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		if (ops[i].opcode == opcode)
			return &ops[i];
	return NULL;
}

/* One datagram of n bytes in td__d->rx with nfds descriptors (owned). */
static void dispatch(struct td__peer *p, size_t n, int *fds, unsigned nfds)
{
	struct td__daemon *d = td__d;
	struct td_wire_hdr h;
	struct td_err e = {0};
	const struct td__op *op;
	struct td__req rq;
	int rc = td_wire_hdr_decode(d->rx, n, &h, &e);

	if (rc < 0) {
		/* echo what can be read so the client can match the reply */
		td_wire_hdr_peek(d->rx, n, &h.opcode, &h.request_id);
		td__close_fds(fds, nfds);
		td__peer_error(p, h.opcode, h.request_id, rc, "header: %s",
			       e.reason);
		return;
	}
	if (h.fd_count != nfds) {
		td__close_fds(fds, nfds);
		td__peer_error(p, h.opcode, h.request_id, -EPROTO,
			       "header fd_count %u but %u fds attached",
			       h.fd_count, nfds);
		td__peer_kill(p, "fd_count mismatch");
		return;
	}
	if (h.flags) {
		td__close_fds(fds, nfds);
		td__peer_error(p, h.opcode, h.request_id, -EBADMSG,
			       "requests carry no header flags");
		return;
	}
	op = op_find(h.opcode);
	if (!op) {
		td__close_fds(fds, nfds);
		td__peer_error(p, h.opcode, h.request_id, -EOPNOTSUPP,
			       "unknown opcode %u", h.opcode);
		return;
	}
	if (!(op->flags & TD__OP_EARLY) && !p->hello) {
		td__close_fds(fds, nfds);
		td__peer_error(p, h.opcode, h.request_id, -EPROTO,
			       "%s before HELLO", td_wire_op_name(h.opcode));
		return;
	}
	if (nfds && !(op->flags & TD__OP_FDS)) {
		td__close_fds(fds, nfds);
		nfds = 0;
		/* HELLO has always ignored stray fds; the rest refuse them */
		if (op->opcode != TD_OP_HELLO) {
			td__peer_error(p, h.opcode, h.request_id, -EINVAL,
				       "%s carries no fds",
				       td_wire_op_name(h.opcode));
			return;
		}
	}
	rq = (struct td__req){&h, d->rx + TD_WIRE_HDR_LEN, fds, nfds, op};
	/* a stage this peer fired is a publish that comes first */
	if (p->n_stages)
		td__stage_owner(p, false);
	/* it pulled what its ended follows' replies named, if anything */
	if (p->lingering)
		td__follow_linger_end(p);
	op->fn(p, &rq);
	td__store_trim(0); /* after a burst of RELEASEs, memory goes back */
}

/* A peer about to be freed: what it holds, one file at a time. */
static void peer_gone(struct td__peer *p)
{
	unsigned spares = td__store_lease_spares(), now;

	/* a stage it fired is committed, else cancelled, before its loans go */
	if (p->n_stages)
		td__stage_owner(p, true);
	td__sealer_peer_gone(p); /* a request parked for its seals */
	td__lease_peer_gone(p);
	td__fence_peer_gone(p); /* the timerfds its leases gave back */
	td__loan_peer_gone(p);
	td__catalog_peer_gone(p);
	td__store_peer_gone(p);
	td__ring_peer_gone(p);
	td__follow_peer_gone(p);
	td__follow_linger_end(p);
	/* a connection is a few records itself (peer, poll, queue); and it
	 * takes no lease again: the spares its leases became count as freed
	 * ones, else the end of a burst of connections leaves up to 1024 of
	 * them spread over the heap, each keeping its page */
	now = td__store_lease_spares();
	td__store_trim(4 + (now > spares ? now - spares : 0));
}

void td__dispatch_init(void)
{
	static const struct td__peer_handlers handlers = {dispatch,
							  peer_gone};

	td__peer_handlers_set(&handlers);
	td__lease_init();
	td__follow_init();
}
