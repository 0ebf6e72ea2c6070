/* SPDX-License-Identifier: MIT */
/*
 * The fds of a follow the daemon ended that its follower may still pull
 * (docs/protocol.md, "A follow the daemon ends").
 *
 * On the pidfd path a FOLLOW reply names the bell's and the row's fds by
 * their numbers in the daemon, and the client pulls them (pidfd_getfd)
 * once it reads the reply. A follow a policy reload ended before that
 * pull closed both, and by the pull the numbers could name other files:
 * another name's bell, mapped as this one's, or another follower's row,
 * mapped read-write (found by a probe, 2026-12-07). Such a follower's
 * two fds now stay open, their numbers taken, until its connection
 * sends its next request (libtensord pulls before it sends anything
 * more, under its client lock) or goes. The bell's read-only fd, shared
 * by its followers, closes with the last of them. Each row fd stays
 * counted in its uid's fds until then, so what lingers is bounded by
 * the uid's limit (two fds at most for each one counted).
 */
#include "follow-int.h"

#include <stdlib.h>
#include <unistd.h>

/* a bell's fd_ro, kept for refs lingering followers */
struct ended_bell {
	int fd;
	unsigned refs;
};

struct ended_fds {
	struct td__list link;
	struct td__peer *peer;
	int row_fd;
	struct ended_bell *bell;
};

static struct td__list lingers = {&lingers, &lingers};

/* f's peer may not have pulled what its FOLLOW's reply named */
static bool may_pull(const struct follower *f)
{
	return f->by_number && f->peer->requests == f->req_mark;
}

void td__follow_linger(struct bell *b)
{
	struct ended_bell *lb = NULL;
	int i;

	for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;) {
		struct follower *f = &b->rows[i];
		struct ended_fds *l;

		if (!may_pull(f))
			continue;
		if (!lb) {
			lb = malloc(sizeof(*lb));
			if (!lb)
				goto nomem;
			*lb = (struct ended_bell){b->fd_ro, 0};
			b->fd_ro = -1;
		}
		l = malloc(sizeof(*l));
		if (!l)
			goto nomem;
		*l = (struct ended_fds){.peer = f->peer, .row_fd = f->row_fd,
				     .bell = lb};
		f->row_fd = -1;
		lb->refs++;
		f->peer->lingering++;
		td__list_add_tail(&lingers, &l->link);
	}
	if (lb && !lb->refs) {
		b->fd_ro = lb->fd;
		free(lb);
	}
	return;
nomem:
	/* closed as before: a pull by that number may find another file */
	td__log(TD_LOG_WARN, "out of memory: an ended follow's fds close "
			     "before its follower may have pulled them");
	if (lb && !lb->refs) {
		b->fd_ro = lb->fd;
		free(lb);
	}
}

void td__follow_linger_end(struct td__peer *p)
{
	for (struct td__list *n, *l = lingers.next; p->lingering &&
						    l != &lingers; l = n) {
		struct ended_fds *g = td__container_of(l, struct ended_fds, link);

		n = l->next;
		if (g->peer != p)
			continue;
		td__list_del(&g->link);
		close(g->row_fd);
		td__tenant_sub(p->uid, TD__LIM_FDS, 1);
		if (!--g->bell->refs) {
			close(g->bell->fd);
			free(g->bell);
		}
		free(g);
		p->lingering--;
	}
}
