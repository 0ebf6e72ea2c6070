/* SPDX-License-Identifier: MIT */
/* libtensord catalogue and watches: LIST, STAT, DELETE, WATCH, UNWATCH. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

static size_t name_len(const char *s)
{
	/* one past the cap so the codec refuses what is too long */
	return s ? strnlen(s, TD_WIRE_MAX_NAME + 1) : 0;
}

void td_entry_fini(struct td_entry *e)
{
	if (!e)
		return;
	free(e->name);
	free(e->meta);
	e->name = NULL;
	e->meta = NULL;
	e->meta_len = 0;
}

void td_entry_list_free(struct td_entry *list, size_t count)
{
	if (!list)
		return;
	for (size_t i = 0; i < count; i++)
		td_entry_fini(&list[i]);
	free(list);
}

/* Copy a decoded entry (borrowing c->rbuf) into an owned one. */
static int entry_copy(struct td_entry *dst, const struct td_wire_entry *src)
{
	memset(dst, 0, sizeof(*dst));
	dst->name = malloc((size_t)src->name.len + 1);
	if (!dst->name)
		return -ENOMEM;
	td__str_copy(dst->name, (size_t)src->name.len + 1, src->name);
	dst->version = src->version;
	dst->dtype = src->dtype;
	dst->ndim = src->ndim;
	for (uint32_t i = 0; i < src->ndim && i < TD_ENTRY_MAX_DIMS; i++)
		dst->shape[i] = src->shape[i];
	dst->bytes = src->bytes;
	dst->lease_count = src->lease_count;
	dst->flags = src->flags;
	if (src->meta.len) {
		dst->meta = malloc(src->meta.len);
		if (!dst->meta) {
			td_entry_fini(dst);
			return -ENOMEM;
		}
		memcpy(dst->meta, src->meta.ptr, src->meta.len);
		dst->meta_len = src->meta.len;
	}
	return 0;
}

/* The LIST/STAT flags to send: the entry kinds this daemon marks. */
static uint32_t cat_flags(const struct td_client *c)
{
	return (td__has(c, TD_WIRE_FEAT_CAT_KINDS) ? TD_WIRE_CAT_KINDS : 0) |
	       (td__has(c, TD_WIRE_FEAT_CAT_RECYCLE) ? TD_WIRE_CAT_RECYCLE
						     : 0);
}

/* A STAT body into c->sbuf, with cat_flags(). Length or -EINVAL. */
static int64_t stat_req(struct td_client *c, const char *name)
{
	struct td_wire_stat_req req = {
		.name = {name, (uint16_t)name_len(name)},
		.flags = cat_flags(c),
	};

	return td_wire_stat_req_encode(&req, c->sbuf + TD_WIRE_HDR_LEN,
				       TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
}

int td_client_stat(struct td_client *c, const char *name, struct td_entry *e,
		   struct td_error *err)
{
	struct td_wire_entry we;
	struct td__msg m = {0};
	int64_t len;
	int rc;

	if (!c || !name || !e)
		return td__fail(err, -EINVAL, "missing argument");
	memset(e, 0, sizeof(*e));
	td__client_lock(c);
	len = stat_req(c, name);
	if (len < 0) {
		rc = td__fail(err, -EINVAL, "bad tensor name");
		goto out;
	}
	rc = td__call(c, TD_OP_STAT, (size_t)len, NULL, 0, &m, err);
	if (rc < 0)
		goto out;
	if (td_wire_entry_decode(m.body, m.body_len, &we, NULL) < 0) {
		rc = td__fail(err, -EPROTO, "bad STAT reply");
		goto out;
	}
	rc = entry_copy(e, &we);
	if (rc < 0)
		td__fail(err, rc, "out of memory");
out:
	td__msg_close_fds(&m);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* One LIST page appended to *list. more: whether the daemon has more. */
static int list_page(struct td_client *c, const char *prefix,
		     const char *after, struct td_entry **list, size_t *count,
		     size_t *cap, bool *more, struct td_error *err)
{
	struct td_wire_list_req req = {
		.prefix = {prefix, (uint16_t)name_len(prefix)},
		.after = {after, (uint16_t)name_len(after)},
		.flags = cat_flags(c),
	};
	struct td_wire_list_rd lr;
	struct td_wire_entry we;
	struct td__msg m = {0};
	int64_t len;
	int rc;

	len = td_wire_list_req_encode(&req, c->sbuf + TD_WIRE_HDR_LEN,
				      TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
	if (len < 0)
		return td__fail(err, -EINVAL, "bad prefix");
	rc = td__call(c, TD_OP_LIST, (size_t)len, NULL, 0, &m, err);
	if (rc < 0)
		return rc;
	td__msg_close_fds(&m);
	rc = td_wire_list_rep_init(&lr, m.body, m.body_len, NULL);
	if (rc < 0)
		return td__fail(err, -EPROTO, "bad LIST reply");
	while ((rc = td_wire_list_rep_next(&lr, &we)) > 0) {
		if (*count == *cap) {
			size_t ncap = *cap ? *cap * 2 : 16;
			struct td_entry *nl =
				realloc(*list, ncap * sizeof(**list));

			if (!nl)
				return td__fail(err, -ENOMEM, "out of memory");
			*list = nl;
			*cap = ncap;
		}
		rc = entry_copy(&(*list)[*count], &we);
		if (rc < 0)
			return td__fail(err, rc, "out of memory");
		(*count)++;
	}
	if (rc < 0)
		return td__fail(err, -EPROTO, "bad LIST reply");
	*more = lr.more != 0;
	return 0;
}

int td_client_list(struct td_client *c, const char *prefix,
		   struct td_entry **out, size_t *out_count,
		   struct td_error *err)
{
	struct td_entry *list = NULL;
	size_t count = 0, cap = 0;
	char after[TD_WIRE_MAX_NAME + 1] = "";
	bool more = true;
	int rc = 0;

	if (!c || !out || !out_count)
		return td__fail(err, -EINVAL, "missing argument");
	*out = NULL;
	*out_count = 0;
	td__client_lock(c);
	while (more) {
		size_t before = count;

		rc = list_page(c, prefix ? prefix : "", after, &list, &count,
			       &cap, &more, err);
		if (rc < 0)
			break;
		if (count == before)
			break; /* "more" with an empty page would loop */
		snprintf(after, sizeof(after), "%s", list[count - 1].name);
	}
	pthread_mutex_unlock(&c->lock);
	if (rc < 0) {
		td_entry_list_free(list, count);
		return rc;
	}
	*out = list;
	*out_count = count;
	return 0;
}

/* DELETE; if_version 0: whatever is current (the request of version 1) */
static int delete_name(struct td_client *c, const char *name,
		       uint64_t if_version, uint64_t *version,
		       struct td_error *err)
{
	struct td_wire_delete_req req = {
		.name = {name, (uint16_t)name_len(name)},
		.version = if_version,
	};
	struct td_wire_delete_rep rep;
	struct td__msg m = {0};
	int64_t len;
	int rc;

	td__client_lock(c);
	if (if_version && !td__has(c, TD_WIRE_FEAT_DELETE_IF)) {
		rc = td__fail(err, -EOPNOTSUPP,
			      "this daemon cannot delete a version only "
			      "while it is current");
		goto out;
	}
	len = td_wire_delete_req_encode(&req, c->sbuf + TD_WIRE_HDR_LEN,
					TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
	if (len < 0) {
		rc = td__fail(err, -EINVAL, "bad tensor name");
		goto out;
	}
	rc = td__call(c, TD_OP_DELETE, (size_t)len, NULL, 0, &m, err);
	if (rc < 0)
		goto out;
	if (td_wire_delete_rep_decode(m.body, m.body_len, &rep, NULL) < 0) {
		rc = td__fail(err, -EPROTO, "bad DELETE reply");
		goto out;
	}
	if (version)
		*version = rep.version;
out:
	td__msg_close_fds(&m);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int td_client_delete(struct td_client *c, const char *name, uint64_t *version,
		     struct td_error *err)
{
	if (!c || !name)
		return td__fail(err, -EINVAL, "missing argument");
	return delete_name(c, name, 0, version, err);
}

int td_client_delete_version(struct td_client *c, const char *name,
			     uint64_t version, struct td_error *err)
{
	if (!c || !name || !version)
		return td__fail(err, -EINVAL, "missing argument");
	return delete_name(c, name, version, NULL, err);
}

static int64_t watch_encode(struct td_client *c, const char *name,
			    uint32_t flags)
{
	struct td_wire_watch_req req = {
		.name = {name, (uint16_t)name_len(name)},
		.flags = flags & TD_WIRE_WATCH_PREFIX,
	};

	return td_wire_watch_req_encode(&req, c->sbuf + TD_WIRE_HDR_LEN,
					TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
}

int td__watch_send(struct td_client *c, const char *name, uint32_t flags,
		   uint64_t *daemon_id, struct td_error *err)
{
	struct td_wire_watch_rep rep;
	struct td__msg m = {0};
	int64_t len;
	int rc;

	len = watch_encode(c, name, flags);
	if (len < 0)
		return td__fail(err, -EINVAL, "bad name or prefix");
	rc = td__call(c, TD_OP_WATCH, (size_t)len, NULL, 0, &m, err);
	if (rc < 0)
		return rc;
	td__msg_close_fds(&m);
	if (td_wire_watch_rep_decode(m.body, m.body_len, &rep, NULL) < 0)
		return td__fail(err, -EPROTO, "bad WATCH reply");
	*daemon_id = rep.watch_id;
	return 0;
}

void td__rewatch_send(struct td_client *c)
{
	int64_t len;

	c->rw_left = c->rw_ok = 0;
	for (struct td__watchrec *w = c->watches; w; w = w->next) {
		w->daemon_id = 0; /* no events until watched again */
		w->pending = 0;
		/* a new connection that broke meanwhile watches nothing: the
		 * next reconnect makes them all again */
		if (c->dead)
			continue;
		len = watch_encode(c, w->name, w->flags);
		if (len >= 0 &&
		    td__send(c, TD_OP_WATCH, (size_t)len, &w->pending) == 0)
			c->rw_left++;
	}
	if (c->dead)
		c->rw_left = 0; /* the replies will not come */
	else if (!c->rw_left)
		td__event_reconnected(c, 0);
}

/* The reply to w's WATCH (m, or NULL: refused) is in. */
static void rewatch_took(struct td_client *c, struct td__watchrec *w,
			 const struct td__msg *m)
{
	struct td_wire_watch_rep rep;

	w->pending = 0;
	if (m && m->hdr.status == 0 &&
	    td_wire_watch_rep_decode(m->body, m->body_len, &rep, NULL) == 0) {
		w->daemon_id = rep.watch_id;
		c->rw_ok++;
	}
	if (c->rw_left && --c->rw_left == 0)
		td__event_reconnected(c, c->rw_ok);
}

bool td__rewatch_reply(struct td_client *c, struct td__msg *m)
{
	for (struct td__watchrec *w = c->watches; w; w = w->next)
		if (w->pending && w->pending == m->hdr.request_id) {
			rewatch_took(c, w, m);
			td__msg_close_fds(m);
			return true;
		}
	return false;
}

int td_client_watch(struct td_client *c, const char *name, uint32_t flags,
		    uint64_t *watch_id, struct td_error *err)
{
	struct td__watchrec *w;
	int rc;

	if (!c || !name)
		return td__fail(err, -EINVAL, "missing argument");
	if (flags & ~TD_WATCH_PREFIX)
		return td__fail(err, -EINVAL, "unknown watch flags %#x",
				flags & ~TD_WATCH_PREFIX);
	/* kept, so that a reconnect can watch again under the same id */
	w = calloc(1, sizeof(*w));
	if (!w)
		return td__fail(err, -ENOMEM, "out of memory");
	snprintf(w->name, sizeof(w->name), "%s", name);
	w->flags = flags;
	td__client_lock(c);
	rc = td__watch_send(c, name, flags, &w->daemon_id, err);
	if (rc == 0) {
		w->id = ++c->next_watch;
		w->next = c->watches;
		c->watches = w;
		if (watch_id)
			*watch_id = w->id;
		w = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	free(w);
	return rc;
}

int td_client_unwatch(struct td_client *c, uint64_t watch_id,
		      struct td_error *err)
{
	struct td_wire_unwatch_req req = {.watch_id = 0};
	struct td__watchrec **pp, *w = NULL;
	struct td__msg m = {0};
	int64_t len;
	int rc;

	if (!c)
		return td__fail(err, -EINVAL, "missing argument");
	td__client_lock(c);
	for (pp = &c->watches; *pp; pp = &(*pp)->next)
		if ((*pp)->id == watch_id) {
			w = *pp;
			break;
		}
	if (!w) {
		rc = td__fail(err, -ENOENT, "no watch %llu on this client",
			      (unsigned long long)watch_id);
		goto out;
	}
	/*
	 * Reconnect first, if that is due: the new daemon made the watch
	 * again under an id of its own, which may be another watch's id on
	 * the old connection.
	 */
	rc = td__client_usable(c, err);
	/* made again by a loop's reconnect, its reply not read yet: the
	 * daemon's id for it comes with that reply */
	if (rc == 0 && w->pending) {
		uint64_t id = w->pending;

		rc = td__reply(c, TD_OP_WATCH, id, NULL, &m, err);
		if (w->pending == id) /* else the connection broke */
			rewatch_took(c, w, rc == 0 ? &m : NULL);
		td__msg_close_fds(&m);
		if (rc < 0 && !c->dead)
			rc = 0; /* refused: the UNWATCH below says so */
	}
	req.watch_id = w->daemon_id;
	len = td_wire_unwatch_req_encode(&req, c->sbuf + TD_WIRE_HDR_LEN,
					 TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
	if (rc == 0)
		rc = len < 0 ? td__fail(err, (int)len, "encode UNWATCH")
			     : td__call(c, TD_OP_UNWATCH, (size_t)len, NULL,
					0, &m, err);
	td__msg_close_fds(&m);
	/* gone here whatever the daemon said: it ends with the connection */
	*pp = w->next;
	free(w);
out:
	pthread_mutex_unlock(&c->lock);
	return rc;
}
