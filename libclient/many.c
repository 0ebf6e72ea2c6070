/* SPDX-License-Identifier: MIT */
/*
 * Several names in one step of the daemon (docs/protocol.md §6.10):
 * td_client_publish_many() sends the PUBLISH of every loan in one
 * PUBLISH_MANY, td_client_get_many() leases the latest version of every
 * name in one GET_MANY. All or none, both.
 */
#include "client.h"
#include "alloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Loans that cannot be sent: given up as a failed publish gives them. */
static void loans_drop(struct td_client *c, uint32_t n,
		       struct td_alloc *const *allocs, bool locked)
{
	for (uint32_t i = 0; i < n; i++) {
		bool twice = false;

		for (uint32_t j = 0; j < i; j++)
			twice = twice || allocs[j] == allocs[i];
		if (twice)
			continue;
		if (!allocs[i] || allocs[i]->c != c) {
			if (allocs[i] && !locked)
				td_alloc_free(allocs[i]);
			continue;
		}
		if (!locked) {
			td_alloc_free(allocs[i]);
			continue;
		}
		td__alloc_give_back(c, allocs[i]);
		td__alloc_free_locked(allocs[i]);
		c->refs--; /* the loan's; the caller's handle keeps one */
	}
}

/* What the library can tell before it asks: 0 or -EINVAL. */
static int many_args(struct td_client *c, uint32_t n,
		     struct td_alloc *const *allocs,
		     const struct td_publish *pubs, struct td_error *err)
{
	if (!c || !allocs || !pubs)
		return td__fail(err, -EINVAL, "missing argument");
	if (n == 0 || n > TD_MANY_MAX)
		return td__fail(err, -EINVAL, "count %u: 1..%d", n,
				TD_MANY_MAX);
	for (uint32_t i = 0; i < n; i++) {
		const struct td_alloc *a = allocs[i];
		const char *name = pubs[i].name;

		if (!a || !name)
			return td__fail(err, -EINVAL, "element %u: missing "
					"loan or name", i);
		if (a->c != c)
			return td__fail(err, -EINVAL, "element %u: the loan "
					"was made on another connection", i);
		if (a->name_len && (strlen(name) != a->name_len ||
				    memcmp(name, a->name, a->name_len)))
			return td__fail(err, -EINVAL, "element %u: the loan "
					"is for \"%s\", not \"%s\"", i,
					a->name, name);
		for (uint32_t j = 0; j < i; j++)
			if (allocs[j] == a || !strcmp(pubs[j].name, name))
				return td__fail(err, -EINVAL, "element %u: "
						"the same %s as element %u", i,
						allocs[j] == a ? "loan"
							       : "name", j);
	}
	return 0;
}

/* The PUBLISH_MANY of n loans, sent and answered (lock held). */
static int many_send(struct td_client *c, uint32_t n,
		     struct td_alloc *const *allocs,
		     const struct td_publish *pubs, uint64_t *versions,
		     struct td_error *err)
{
	struct td_wire_publish_many_req *req = calloc(1, sizeof(*req));
	uint8_t *bodies = malloc(TD_WIRE_MAX_MSG);
	int fds[TD_WIRE_MAX_FDS];
	struct td_wire_publish_many_rep rep;
	struct td__msg m = {0};
	unsigned nfds = 0;
	size_t off = 0;
	int64_t len;
	int rc = 0;

	if (!req || !bodies)
		rc = td__fail(err, -ENOMEM, "out of memory");
	if (req)
		req->count = n;
	for (uint32_t i = 0; i < n && rc == 0; i++) {
		int tab[TD_WIRE_MAX_PLANES + 1];
		uint32_t na = 0;

		len = td__publish_body(c, allocs[i], &pubs[i], bodies + off,
				       TD_WIRE_MAX_MSG - off, tab, &na, err);
		if (len >= 0 && nfds + na > TD_WIRE_MAX_FDS)
			len = td__fail(err, -E2BIG, "the elements attach more "
				       "than %d fds", TD_WIRE_MAX_FDS);
		if (len < 0) {
			rc = (int)len;
			break;
		}
		req->el[i] = (struct td_wire_pub_elem){
			na, {bodies + off, (uint32_t)len}};
		memcpy(fds + nfds, tab, na * sizeof(*tab));
		nfds += na;
		off += (size_t)len;
	}
	if (rc == 0) {
		len = td_wire_publish_many_req_encode(
			req, c->sbuf + TD_WIRE_HDR_LEN,
			TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
		rc = len < 0 ? td__fail(err, -EMSGSIZE, "the PUBLISH_MANY "
					"request does not fit one message")
			     : td__call(c, TD_OP_PUBLISH_MANY, (size_t)len,
					fds, nfds, &m, err);
	}
	if (rc == 0 &&
	    (td_wire_publish_many_rep_decode(m.body, m.body_len, &rep,
					     NULL) < 0 ||
	     rep.count != n))
		rc = td__fail(err, -EPROTO, "bad PUBLISH_MANY reply");
	for (uint32_t i = 0; rc == 0 && versions && i < n; i++)
		versions[i] = rep.versions[i];
	td__msg_close_fds(&m);
	free(bodies);
	free(req);
	return rc;
}

int td_client_publish_many(struct td_client *c, uint32_t count,
			   struct td_alloc *const *allocs,
			   const struct td_publish *pubs, uint64_t *versions,
			   struct td_error *err)
{
	int rc = many_args(c, count, allocs, pubs, err);
	bool sent = false;

	if (rc < 0) {
		if (allocs)
			loans_drop(c, count, allocs, false);
		return rc;
	}
	td__client_lock(c);
	/* the failure of an earlier PUBLISH sent without waiting first */
	rc = td__pub_settle(c, err);
	if (rc == 0)
		rc = td__client_usable(c, err);
	if (rc == 0 && !td__has(c, TD_WIRE_FEAT_MANY))
		rc = td__fail(err, -EOPNOTSUPP, "the daemon does not serve "
			      "PUBLISH_MANY (TD_WIRE_FEAT_MANY)");
	for (uint32_t i = 0; rc == 0 && i < count; i++)
		if (allocs[i]->epoch != c->epoch)
			rc = td__fail(err, -ECONNRESET, "element %u: the loan "
				      "was made before the client "
				      "reconnected", i);
	if (rc == 0) {
		/* write-sealed here (plain loans): no writable mapping */
		for (uint32_t i = 0; i < count; i++)
			td__alloc_unmap(allocs[i]);
		for (uint32_t i = 0; rc == 0 && i < count; i++)
			rc = td__alloc_seal(allocs[i], (int)i, err);
		sent = rc == 0;
		if (sent)
			rc = many_send(c, count, allocs, pubs, versions, err);
	}
	/*
	 * The daemon refuses to pull (-EPERM) from a process that no longer
	 * has the credentials it connected with (its answer to this request,
	 * not a seal's or an earlier PUBLISH's): nothing was published, so
	 * the same request goes again with the fds attached, and they are
	 * attached from now on (the daemon switched too), as for PUBLISH.
	 */
	if (sent && rc == -EPERM && c->path_in == TD_IMPORT_PIDFD &&
	    !c->pidfd_forced) {
		c->path_in = TD_IMPORT_SCM;
		rc = many_send(c, count, allocs, pubs, versions, err);
	}
	if (rc < 0) {
		loans_drop(c, count, allocs, true);
	} else {
		for (uint32_t i = 0; i < count; i++) {
			/* no next loan is lent: a stream's next ALLOC asks */
			td__published_idle(c, allocs[i]);
			td__alloc_free_locked(allocs[i]);
			c->refs--; /* the loan's */
		}
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* GET_MANY; with newer (TD_WIRE_MANY_NEWER) it waits, as the daemon
 * parks it, for names[0] newer than after. */
static int get_many(struct td_client *c, uint32_t count,
		    const char *const *names, bool newer, uint64_t after,
		    int timeout_ms, struct td_tensor **out,
		    struct td_error *err)
{
	struct td_wire_get_many_req req = {
		.count = count,
		.version = after,
		.timeout_ms = timeout_ms < 0 ? TD_WIRE_WAIT_FOREVER
					     : (uint32_t)timeout_ms,
	};
	struct td__msg m = {0};
	int64_t len;
	int rc;

	if (!c || !names || !out)
		return td__fail(err, -EINVAL, "missing argument");
	if (count == 0 || count > TD_MANY_MAX)
		return td__fail(err, -EINVAL, "count %u: 1..%d", count,
				TD_MANY_MAX);
	for (uint32_t i = 0; i < count; i++) {
		out[i] = NULL;
		if (!names[i])
			return td__fail(err, -EINVAL, "name %u missing", i);
		for (uint32_t j = 0; j < i; j++)
			if (!strcmp(names[j], names[i]))
				return td__fail(err, -EINVAL, "name %u is "
						"name %u too", i, j);
		req.names[i] = (struct td_wire_str){
			names[i], (uint16_t)strnlen(names[i], 256)};
	}
	td__client_lock(c);
	rc = c->dead ? td__client_usable(c, err) : 0;
	if (rc == 0 && !td__has(c, TD_WIRE_FEAT_MANY))
		rc = td__fail(err, -EOPNOTSUPP, "the daemon does not serve "
			      "GET_MANY (TD_WIRE_FEAT_MANY)");
	if (rc == 0 && newer && !td__has(c, TD_WIRE_FEAT_MANY_WAIT))
		rc = td__fail(err, -EOPNOTSUPP, "the daemon does not serve "
			      "a GET_MANY that waits "
			      "(TD_WIRE_FEAT_MANY_WAIT)");
	if (rc == 0) {
		if (c->path_out == TD_IMPORT_SCM)
			req.flags = TD_WIRE_REQ_SCM;
		if (newer)
			req.flags |= TD_WIRE_MANY_NEWER;
		len = td_wire_get_many_req_encode(
			&req, c->sbuf + TD_WIRE_HDR_LEN,
			TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
		/* a GET_MANY that may park waits for another client's
		 * PUBLISH: no late reply until that time passed */
		c->park_ms = newer ? (timeout_ms < 0 ? 0 : (uint32_t)timeout_ms)
				   : 0;
		rc = len < 0 ? td__fail(err, -EINVAL, "bad tensor name")
			     : td__call(c, TD_OP_GET_MANY, (size_t)len, NULL,
					0, &m, err);
		c->park_ms = 0;
	}
	/* a bad reply too: what it granted goes back */
	if (rc == 0)
		rc = td__tensors_many(c, &m, count, out, err);
	td__msg_close_fds(&m);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int td_client_get_many(struct td_client *c, uint32_t count,
		       const char *const *names, struct td_tensor **out,
		       struct td_error *err)
{
	return get_many(c, count, names, false, 0, 0, out, err);
}

int td_client_get_many_newer(struct td_client *c, uint32_t count,
			     const char *const *names, uint64_t after,
			     int timeout_ms, struct td_tensor **out,
			     struct td_error *err)
{
	return get_many(c, count, names, true, after, timeout_ms, out, err);
}
