/* SPDX-License-Identifier: MIT */
/*
 * One client connection: SOCK_SEQPACKET datagrams with SCM_RIGHTS, the
 * framing rules of docs/protocol.md, a resumable outgoing queue, HELLO and
 * import negotiation. Every descriptor that arrives is either handed up
 * (dispatch.c, which keeps or closes it) or closed here, on every path.
 */
#include "daemon.h"
#include "wire-status.h"
#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bytes.h"
#include "follow.h"
#include "scm.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

_Static_assert(TD_FOLLOW_TRIG_SLOTS == TD_WIRE_STAGE_SLOTS, "the words");

#define STR_(x) #x
#define STR(x) STR_(x)

/* A message that could not be sent at once. Its fds are our own dups. */
struct txmsg {
	struct td__list link;
	size_t len;
	unsigned nfds;
	int fds[TD_WIRE_MAX_FDS];
	uint8_t data[];
};

void td__close_fds(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (fds[i] >= 0) {
			td__close_peer_fd(fds[i]);
			fds[i] = -1;
		}
}

/*
 * A peer's connection: datagrams it sent that the daemon never read hold
 * their fds in flight inside the daemon's end, and its close(2) would be
 * their last close, on the loop (a unix socket whose own queue holds a
 * lingering TCP socket waits there for the linger time). So no datagram
 * may enter any more (shutdown, which the other end sees as the hang-up
 * at once), those waiting are read and their fds closed as any peer fd
 * (td__close_peer_fd: sockets and files on td-closer-peer), and the
 * empty socket is closed here. End of file and an empty datagram both
 * read as 0 bytes; with SO_PASSCRED every datagram comes with
 * SCM_CREDENTIALS and the end without, which tells them apart. A
 * datagram whose fds the daemon has no room for (MSG_CTRUNC: those left
 * out would be let go here) is seen first with MSG_PEEK, whose fds are
 * extra references (closed as the others: a FUSE file's every close
 * asks its server); then, as when anything fails, the socket with what
 * it still holds goes to td-closer-peer.
 */
#define DRAIN_MAX 4096 /* datagrams: the sender's buffer bounds them first */

/* 1 a datagram read (and its fds let go), 0 the end, -1 give up. */
static int drain_one(int fd)
{
	union {
		char buf[CMSG_SPACE(TD_SCM_RX_MAX_FDS * sizeof(int)) +
			 CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} ctl;

	for (int peek = 1; peek >= 0; peek--) {
		char byte;
		struct iovec iov = {&byte, 1};
		struct msghdr mh = {.msg_iov = &iov,
				    .msg_iovlen = 1,
				    .msg_control = ctl.buf,
				    .msg_controllen = sizeof(ctl.buf)};
		bool cred = false;
		ssize_t n;

		n = recvmsg(fd, &mh,
			    MSG_DONTWAIT | MSG_CMSG_CLOEXEC |
				    (peek ? MSG_PEEK : 0));
		if (n < 0)
			/* a pending error (ECONNRESET) is told once */
			return errno == EINTR || errno == ECONNRESET ? 1 : -1;
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm;
		     cm = CMSG_NXTHDR(&mh, cm)) {
			size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			if (cm->cmsg_level != SOL_SOCKET)
				continue;
			if (cm->cmsg_type == SCM_CREDENTIALS)
				cred = true;
			if (cm->cmsg_type != SCM_RIGHTS)
				continue;
			for (size_t j = 0; j < k; j++) {
				int r;

				memcpy(&r, CMSG_DATA(cm) + j * sizeof(int),
				       sizeof(r));
				/* a FUSE file's every close is a FLUSH */
				td__close_peer_fd(r);
			}
		}
		if (mh.msg_flags & MSG_CTRUNC)
			return -1;
		if (!cred)
			return n == 0 ? 0 : -1;
	}
	return 1;
}

static void close_sock(int fd)
{
	int one = 1;

	if (fd < 0)
		return;
	if (shutdown(fd, SHUT_RDWR) == 0 &&
	    setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) == 0)
		for (int i = 0; i < DRAIN_MAX; i++) {
			int rc = drain_one(fd);

			if (rc == 0) {
				close(fd);
				return;
			}
			if (rc < 0)
				break;
		}
	td__closer_foreign(fd);
}

static void txmsg_free(struct txmsg *m)
{
	td__close_fds(m->fds, m->nfds);
	free(m);
}

/* Take m off p's queue, give back what it held, free it. */
static void txq_drop(struct td__peer *p, struct txmsg *m)
{
	td__list_del(&m->link);
	p->txq_count--;
	p->txq_bytes -= m->len;
	p->txq_fds -= m->nfds;
	td__tenant_sub(p->uid, TD__LIM_QUEUED, m->len);
	td__tenant_sub(p->uid, TD__LIM_FDS, m->nfds);
	txmsg_free(m);
}

/* ---- lifetime ---- */

static const struct td__peer_handlers *handlers;

void td__peer_handlers_set(const struct td__peer_handlers *h)
{
	handlers = h;
}

static void on_closed(uv_handle_t *h)
{
	free(h->data);
}

/* ---- turns: a uid's share of the loop ---- */

/*
 * A connection is read TD__RX_BATCH datagrams a wake-up, so a uid with
 * many busy ones had that many shares of a loop turn. A uid's are read
 * TD__RX_UID_TURN a turn in all, or until their handling took
 * TD__RX_UID_TURN_NS (td__tenant_rx_take; a turn ends after each poll
 * for I/O). One cut short waits on DF.list, and so does any of its
 * uid's with something to read meanwhile, so a uid's
 * own connections take turns too. The list is read after each turn's
 * new events, in order, with what is left of each uid's share: a uid
 * with nothing waiting is read at the first turn that sees it. While
 * any waits, the loop does not sleep in epoll (docs/reliability.md,
 * "A uid's share of the loop").
 */
static struct {
	uv_check_t backlog; /* after each poll for I/O: those waiting */
	uv_idle_t awake;   /* active while some wait (n > 0) */
	struct td__list list;
	unsigned n;
	bool init;
} DF = {.list = {&DF.list, &DF.list}};

static void update_poll(struct td__peer *p);
static bool receive(struct td__peer *p);

static void awake(uv_idle_t *h)
{
	(void)h;
}

static void defer(struct td__peer *p)
{
	if (p->deferred)
		return;
	p->deferred = true;
	td__list_add_tail(&DF.list, &p->defer_link);
	DF.n++;
	td__tenant_rx_wait(p->uid, 1);
	td__d->stats.reads_deferred++;
	uv_idle_start(&DF.awake, awake);
}

static void undefer(struct td__peer *p)
{
	if (!p->deferred)
		return;
	p->deferred = false;
	td__list_del(&p->defer_link);
	if (!--DF.n)
		uv_idle_stop(&DF.awake); /* the loop may sleep again */
	td__tenant_rx_wait(p->uid, -1);
}

static void on_backlog(uv_check_t *h)
{
	unsigned n = DF.n;

	(void)h;
	while (n-- && DF.n) {
		struct td__peer *p = td__container_of(
			DF.list.next, struct td__peer, defer_link);

		undefer(p);
		if (!p->dead && td__list_empty(&p->txq) && !p->sealing)
			receive(p); /* may wait again, at the end */
		update_poll(p);
	}
	td__tenant_rx_turn(); /* the next turn: poll for I/O, then this */
}

static void turns_init(uv_loop_t *loop)
{
	if (DF.init)
		return;
	DF.init = true;
	uv_check_init(loop, &DF.backlog);
	uv_check_start(&DF.backlog, on_backlog);
	uv_unref((uv_handle_t *)&DF.backlog); /* keeps no loop running */
	uv_idle_init(loop, &DF.awake);
}

static void drop(struct td__peer *p)
{
	struct td__list *l;

	handlers->gone(p);
	undefer(p);
	while (!td__list_empty(&p->txq)) {
		l = p->txq.next;
		txq_drop(p, td__container_of(l, struct txmsg, link));
	}
	if (p->pidfd >= 0)
		close(p->pidfd);
	p->pidfd = -1;
	td__tenant_sub(p->uid, TD__LIM_CONNS, 1);
	td__tenant_sub(p->uid, TD__LIM_FDS, p->fds_held);
	td__list_del(&p->link);
	/*
	 * uv_close() stops and forgets the fd at once (epoll too), so the
	 * socket can be closed now, or handed to td-closer-peer when it still
	 * holds datagrams it could not read (close_sock); only the
	 * handle memory must wait for on_closed. Its shutdown here keeps
	 * "reply received" ordered after "old peer gone".
	 */
	uv_close((uv_handle_t *)&p->poll, on_closed);
	close_sock(p->fd);
	p->fd = -1;
}

static void on_reap(uv_idle_t *idle)
{
	struct td__daemon *d = idle->data;
	struct td__list *l, *n;

	for (l = d->peers.next; l != &d->peers; l = n) {
		struct td__peer *p = td__container_of(l, struct td__peer, link);

		n = l->next;
		if (p->dead)
			drop(p);
	}
	uv_idle_stop(idle);
	d->reaper_on = false;
}

void td__peer_kill(struct td__peer *p, const char *why)
{
	struct td__daemon *d = td__d;

	if (p->dead)
		return;
	/* an ordinary hang-up is not news; a protocol violation is */
	td__log(strcmp(why, "connection closed") && strcmp(why, "hangup")
			? TD_LOG_INFO
			: TD_LOG_DEBUG,
		"peer pid %d: disconnect: %s", (int)p->pid, why);
	p->dead = true;
	uv_poll_stop(&p->poll);
	/*
	 * Freed from an idle callback, never from inside a callback that may
	 * still be walking the store's lists (a NOTIFY fan-out can kill a
	 * slow watcher in the middle of a PUBLISH).
	 */
	if (!d->reaper_on) {
		uv_idle_start(&d->reaper, on_reap);
		d->reaper_on = true;
	}
}

void td__peer_drop_all(struct td__daemon *d)
{
	while (!td__list_empty(&d->peers)) {
		struct td__peer *p =
			td__container_of(d->peers.next, struct td__peer, link);

		p->dead = true;
		drop(p);
	}
}

/* ---- sending ---- */

static ssize_t send_raw(int fd, const uint8_t *buf, size_t len,
			const int *fds, unsigned nfds)
{
	return td__scm_send(fd, buf, len, fds, nfds, MSG_DONTWAIT);
}

/*
 * fds in flight to p. The kernel keeps no count we can read, but SIOCOUTQ
 * 0 (every datagram we sent was read or dropped) means there are none.
 */
static void inflight_refresh(struct td__peer *p)
{
	int q;

	if (p->fds_inflight && ioctl(p->fd, SIOCOUTQ, &q) == 0 && q == 0)
		p->fds_inflight = 0;
}

/* The live peer with the most fds in flight (refreshed first), or NULL. */
static struct td__peer *worst_holder(struct td__daemon *d)
{
	struct td__peer *w = NULL;

	for (struct td__list *l = d->peers.next; l != &d->peers; l = l->next) {
		struct td__peer *q = td__container_of(l, struct td__peer, link);

		if (q->dead)
			continue;
		inflight_refresh(q);
		if (q->fds_inflight &&
		    (!w || q->fds_inflight > w->fds_inflight))
			w = q;
	}
	return w;
}

/*
 * send_raw with the fds-in-flight budget: -EDQUOT when p would hold more
 * than TD__MAX_FDS_INFLIGHT unread fds (the caller cuts it).
 */
static ssize_t send_budget(struct td__peer *p, const uint8_t *buf, size_t len,
			   const int *fds, unsigned nfds)
{
	ssize_t n;

	if (nfds && p->fds_inflight + nfds > TD__MAX_FDS_INFLIGHT) {
		inflight_refresh(p);
		if (p->fds_inflight + nfds > TD__MAX_FDS_INFLIGHT)
			return -EDQUOT;
	}
	n = send_raw(p->fd, buf, len, fds, nfds);
	if (n == -ETOOMANYREFS) {
		/*
		 * Our uid is over RLIMIT_NOFILE in flight despite the budget
		 * (many stuck peers): cut the biggest holder so it stops
		 * growing. Its unread fds stay charged until it closes its
		 * end; that is the kernel's rule, not ours to change.
		 */
		struct td__peer *w = worst_holder(td__d);

		if (w && w != p)
			td__peer_kill(w, "holds the most unread fds while "
					 "the daemon's uid is over its "
					 "fds-in-flight limit");
	}
	if (n >= 0)
		p->fds_inflight += nfds;
	return n;
}

static const char *send_why(ssize_t n)
{
	if (n == -EDQUOT)
		return "more than " STR(TD__MAX_FDS_INFLIGHT) " fds in "
		       "flight: the client does not read its replies";
	if (n == -ETOOMANYREFS)
		return "send failed: too many fds in flight (ETOOMANYREFS)";
	return "send failed";
}

static int enqueue(struct td__peer *p, const uint8_t *buf, size_t len,
		   const int *fds, unsigned nfds)
{
	struct txmsg *m;

	char why[256];

	if (p->txq_count >= TD__TXQ_MAX_MSGS ||
	    p->txq_bytes + len > TD__TXQ_MAX_BYTES ||
	    p->txq_fds + p->fds_inflight + nfds > TD__MAX_FDS_INFLIGHT)
		return -ENOBUFS;
	/* the uid's queued bytes and descriptors, all its connections */
	if (td__tenant_check(p->uid, TD__LIM_QUEUED, len, why,
			     sizeof(why)) < 0 ||
	    td__tenant_check(p->uid, TD__LIM_FDS, nfds, why, sizeof(why)) <
		    0) {
		td__log(TD_LOG_INFO, "peer pid %d: cannot queue a reply: %s",
			(int)p->pid, why);
		return -EDQUOT;
	}
	m = malloc(sizeof(*m) + len);
	if (!m)
		return -ENOMEM;
	m->len = len;
	m->nfds = 0;
	memcpy(m->data, buf, len);
	/*
	 * Dup the fds: the version they belong to may be released (and its
	 * fds closed and reused) before the queue drains.
	 */
	for (unsigned i = 0; i < nfds; i++) {
		m->fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
		if (m->fds[i] < 0) {
			txmsg_free(m);
			return -errno;
		}
		m->nfds++;
	}
	if (td__tenant_add(p->uid, TD__LIM_QUEUED, len) < 0 ||
	    td__tenant_add(p->uid, TD__LIM_FDS, m->nfds) < 0) {
		td__tenant_sub(p->uid, TD__LIM_QUEUED, len);
		txmsg_free(m);
		return -ENOMEM;
	}
	td__list_add_tail(&p->txq, &m->link);
	p->txq_count++;
	p->txq_bytes += len;
	p->txq_fds += m->nfds;
	return 0;
}

void td__peer_send(struct td__peer *p, uint16_t op, uint32_t flags,
		   uint64_t request_id, int32_t status, size_t body_len,
		   const int *fds, unsigned nfds)
{
	struct td__daemon *d = td__d;
	struct td_wire_hdr h = {
		.magic = TD_WIRE_MAGIC,
		.version = TD_WIRE_VERSION,
		.opcode = op,
		.flags = flags,
		.fd_count = nfds,
		.request_id = request_id,
		.body_len = (uint32_t)body_len,
		.status = status,
	};
	size_t len = TD_WIRE_HDR_LEN + body_len;

	if (op < TD__STAT_OPS)
		d->stats.replies[op][status < 0]++;
	if (status == -EACCES)
		d->stats.refused_access++;
	else if (status == -ENOSPC)
		d->stats.refused_space++;
	else if (status == -EDQUOT)
		d->stats.refused_quota++;
	ssize_t n;
	int rc;

	if (p->dead)
		return;
	td_wire_hdr_encode(&h, d->tx);
	if (td__list_empty(&p->txq)) {
		n = send_budget(p, d->tx, len, fds, nfds);
		if (n >= 0)
			return; /* SEQPACKET: all or nothing */
		if (n != -EAGAIN) {
			td__peer_kill(p, send_why(n));
			return;
		}
	}
	rc = enqueue(p, d->tx, len, fds, nfds);
	if (rc < 0) {
		td__peer_kill(p, rc == -ENOBUFS  ? "outgoing queue over budget"
				 : rc == -EDQUOT ? "the uid's queued replies "
						   "are over its limit"
						 : "cannot queue a reply");
		return;
	}
	update_poll(p);
}

void td__peer_error(struct td__peer *p, uint16_t op, uint64_t request_id,
		    int status, const char *fmt, ...)
{
	struct td__daemon *d = td__d;
	struct td_wire_error e;
	va_list ap;
	int n;
	int64_t len;

	va_start(ap, fmt);
	n = vsnprintf(d->reason, sizeof(d->reason), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(d->reason))
		n = sizeof(d->reason) - 1;
	e.reason = (struct td_wire_str){d->reason, (uint16_t)n};
	td__log(TD_LOG_DEBUG, "peer pid %d: %s #%llu -> %d: %s", (int)p->pid,
		td_wire_op_name(op), (unsigned long long)request_id, status,
		d->reason);
	td__audit_refusal(p, op, status, d->reason);
	len = td_wire_error_encode(&e, TD__TX_BODY(d), TD__TX_CAP);
	if (len < 0)
		len = 0; /* cannot happen: a reason is far below the cap */
	td__peer_send(p, op, TD_WIRE_F_REPLY, request_id, status, (size_t)len,
		      NULL, 0);
}

void td__peer_done(struct td__peer *p, const struct td_wire_hdr *h)
{
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0, 0,
		      NULL, 0);
}

void td__peer_nomem(struct td__peer *p, const struct td_wire_hdr *h)
{
	td__peer_error(p, h->opcode, h->request_id, -ENOMEM, "out of memory");
}

bool td__peer_bad_body(struct td__peer *p, const struct td_wire_hdr *h,
		       int rc, const struct td_err *e)
{
	if (rc >= 0)
		return false;
	td__peer_error(p, h->opcode, h->request_id, rc, "%s: %s: %s",
		       td_wire_op_name(h->opcode), e->field ? e->field : "body",
		       e->reason ? e->reason : "invalid");
	return true;
}

/* Send what waits in the queue; stops at EAGAIN. */
static void flush(struct td__peer *p)
{
	while (!p->dead && !td__list_empty(&p->txq)) {
		struct txmsg *m =
			td__container_of(p->txq.next, struct txmsg, link);
		ssize_t n = send_budget(p, m->data, m->len, m->fds, m->nfds);

		if (n == -EAGAIN)
			return;
		if (n < 0) {
			td__peer_kill(p, send_why(n));
			return;
		}
		txq_drop(p, m);
	}
}

/* ---- HELLO ---- */

/*
 * Whether the daemon may import from p by pidfd, given the probe fd it
 * pulled: the process behind p->pidfd is the one holding this connection
 * (certain with SO_PEERPIDFD; otherwise the pulled probe must be the
 * other end of the connection, which a process that merely reused the
 * pid does not hold) and its credentials are still the connection's
 * (td__peer_pull_check). 0, or -errno with a reason in why.
 */
/*
 * Close a pulled HELLO probe. The client's own end of this connection
 * (what libtensord names) is closed here: only the daemon sends into it,
 * so its close cannot wait, and the descriptor is gone when the reply
 * leaves. Anything else the client named, which may be a lingering TCP
 * socket, goes where a peer's fds go (td__close_peer_fd).
 */
static void probe_close(struct td__peer *p, int fd)
{
	if (td__peer_is_other_end(p, fd) == 0)
		close(fd);
	else
		td__close_peer_fd(fd);
}

static int probe_trusted(struct td__peer *p, int fd, char *why, size_t cap)
{
	int rc;

	if (!p->pidfd_exact) {
		rc = td__peer_is_other_end(p, fd);
		if (rc < 0) {
			snprintf(why, cap,
				 rc == -ESRCH
					 ? "the probe fd is not this "
					   "connection's socket (pid reused?)"
					 : "without SO_PEERPIDFD the connected "
					   "process cannot be proved (no "
					   "unix_diag: %s)",
				 strerror(-rc));
			return -EPERM;
		}
	}
	return td__peer_pull_check(p, why, cap);
}

/* What this daemon serves beyond version 1 (docs/protocol.md §6.1). */
#define TD__FEATURES                                                          \
	(TD_WIRE_FEAT_CAT_KINDS | TD_WIRE_FEAT_CAT_RECYCLE |                  \
	 TD_WIRE_FEAT_ALLOC_RECYCLE | TD_WIRE_FEAT_GET_HELD |                 \
	 TD_WIRE_FEAT_STATUS | TD_WIRE_FEAT_RING_WAKE |                 \
	 TD_WIRE_FEAT_PUB_LOAN | TD_WIRE_FEAT_RELEASE_QUIET |              \
	 TD_WIRE_FEAT_DELETE_IF | TD_WIRE_FEAT_FOLLOW |                       \
	 TD_WIRE_FEAT_FOLLOW_SPARE | TD_WIRE_FEAT_WAKE_ROWS |                 \
	 TD_WIRE_FEAT_ROW_OWNER | TD_WIRE_FEAT_REWRITE |                    \
	 TD_WIRE_FEAT_RESERVE | TD_WIRE_FEAT_GET_CROWD |                    \
	 TD_WIRE_FEAT_ALLOC_NAME | TD_WIRE_FEAT_ALLOC_FREE |                  \
	 TD_WIRE_FEAT_STAGE | TD_WIRE_FEAT_STAGE_TAKEBACK |                  \
	 TD_WIRE_FEAT_SUB_WAIT | TD_WIRE_FEAT_FENCE_OWN |                     \
	 TD_WIRE_FEAT_STAGE_SLOT | TD_WIRE_FEAT_STAGE_WORD |                  \
	 TD_WIRE_FEAT_STATUS_RESERVE | TD_WIRE_FEAT_MANY | TD_WIRE_FEAT_PUB_IF | \
	 TD_WIRE_FEAT_MANY_WAIT | TD_WIRE_FEAT_STATUS_PINNED | \
	 TD_WIRE_FEAT_FOLLOW_END)

void td__peer_hello(struct td__peer *p, const struct td__req *rq)
{
	const struct td_wire_hdr *h = rq->h;
	const uint8_t *body = rq->body;
	struct td__daemon *d = td__d;
	const uint32_t forced = d->opts.import;
	struct td_wire_hello_req m;
	struct td_wire_hello_rep r;
	struct td_err e = {0};
	uint32_t in = TD_IMPORT_SCM;
	char why[192];
	int64_t len;
	int rc, fd;

	rc = td_wire_hello_req_decode(body, h->body_len, &m, &e);
	if (rc < 0) {
		td__peer_error(p, h->opcode, h->request_id, rc, "HELLO: %s: %s",
			       e.field ? e.field : "body", e.reason);
		return;
	}
	if (p->hello) {
		td__peer_error(p, h->opcode, h->request_id, -EPROTO,
			       "HELLO was already exchanged");
		return;
	}
	if (m.import_pref == TD_IMPORT_SCM || forced == TD_IMPORT_SCM) {
		if (forced == TD_IMPORT_PIDFD) {
			td__peer_error(p, h->opcode, h->request_id, -EPERM,
				       "this daemon imports only with pidfd "
				       "(--import pidfd)");
			return;
		}
		if (m.import_pref == TD_IMPORT_PIDFD) {
			td__peer_error(p, h->opcode, h->request_id, -EPERM,
				       "this daemon imports only with "
				       "SCM_RIGHTS (--import scm)");
			return;
		}
	} else {
		bool must = m.import_pref == TD_IMPORT_PIDFD ||
			    forced == TD_IMPORT_PIDFD;

		/*
		 * Only trying tells whether pulling works (uid, yama, LSMs,
		 * pid namespaces): pull the fd the client named and drop it.
		 */
		fd = m.probe_fd >= 0 ? td__pidfd_getfd(p->pidfd, m.probe_fd)
				     : -EBADF;
		if (fd >= 0) {
			rc = probe_trusted(p, fd, why, sizeof(why));
			probe_close(p, fd);
			if (rc == 0)
				in = TD_IMPORT_PIDFD;
			else if (must) {
				td__peer_error(p, h->opcode, h->request_id,
					       -EPERM,
					       "pidfd import required but "
					       "refused: %s",
					       why);
				return;
			} else {
				td__log(TD_LOG_DEBUG,
					"peer pid %d: importing by "
					"SCM_RIGHTS: %s",
					(int)p->pid, why);
			}
		} else if (must) {
			td__peer_error(p, h->opcode, h->request_id, -EPERM,
				       "pidfd import required but "
				       "pidfd_getfd(probe_fd %d) failed: %s",
				       m.probe_fd, strerror(-fd));
			return;
		}
	}
	p->hello = true;
	p->features = m.features;
	p->import_in = in;
	r = (struct td_wire_hello_rep){
		.daemon_pid = (uint32_t)d->pid,
		.import_in = in,
		.out_pidfd = forced != TD_IMPORT_SCM && d->pidfd >= 0,
		.probe_fd = -1,
		.max_msg = TD_WIRE_MAX_MSG,
		.max_fds = TD_WIRE_MAX_FDS,
		.max_name = TD_WIRE_MAX_NAME,
		.max_meta = TD_WIRE_MAX_META,
		.max_planes = TD_WIRE_MAX_PLANES,
		.max_bytes = d->opts.max_bytes,
		.ident = {"tensord " TD_VERSION,
			  (uint16_t)(sizeof("tensord " TD_VERSION) - 1)},
		/* only to a client that sent features: others cannot read it */
		.features = m.features ? TD__FEATURES & ~d->opts.hide_features
				       : 0,
	};
	if (r.out_pidfd)
		r.probe_fd = p->fd; /* the client may try to pull this one */
	len = td_wire_hello_rep_encode(&r, TD__TX_BODY(d), TD__TX_CAP);
	td__log(TD_LOG_DEBUG, "peer pid %d: HELLO %.*s, import %s", (int)p->pid,
		(int)m.client_name.len, m.client_name.ptr,
		in == TD_IMPORT_PIDFD ? "pidfd" : "scm");
	td__peer_send(p, h->opcode, TD_WIRE_F_REPLY, h->request_id, 0,
		      (size_t)len, &d->pidfd, r.out_pidfd ? 1 : 0);
}

/* ---- receiving ---- */

/*
 * Read up to TD__RX_BATCH datagrams; a busy peer cannot starve others.
 * True when it read them all and more may be read now (no reply waits,
 * no request parked).
 */
static bool receive(struct td__peer *p)
{
	struct td__daemon *d = td__d;

	for (int i = 0; i < TD__RX_BATCH && !p->dead && !p->sealing; i++) {
		/*
		 * Room for every fd a datagram can carry: the kernel lets
		 * none go inside recvmsg, td__scm_recv closes none on the
		 * loop; those past TD_WIRE_MAX_FDS are refused below,
		 * closed as any peer fd (td__close_fds).
		 */
		int fds[TD_SCM_RX_MAX_FDS];
		struct td__scm_rx rx = {.fds = fds,
					.cap = TD_SCM_RX_MAX_FDS};
		unsigned nfds;
		ssize_t n;
		uint64_t t0;

		if (!td__tenant_rx_take(p->uid)) {
			defer(p); /* its uid's share of this turn is spent */
			return false;
		}
		n = td__scm_recv(p->fd, d->rx, sizeof(d->rx), MSG_DONTWAIT,
				 &rx);
		if (n < 0) {
			if (n != -EAGAIN)
				td__peer_kill(p, "recvmsg failed");
			return false;
		}
		nfds = rx.nfds;
		/* more than a request may carry: truncated, as the kernel
		 * does past the buffer */
		if (rx.dropped || nfds > TD_WIRE_MAX_FDS)
			rx.msg_flags |= MSG_CTRUNC;
		if (n == 0) {
			td__close_fds(fds, nfds);
			td__peer_kill(p, "connection closed");
			return false;
		}
		if (rx.msg_flags & MSG_CTRUNC) {
			td__close_fds(fds, nfds);
			td__peer_error(p, 0, 0, -EPROTO,
				       "control data truncated: more than "
				       "%d fds",
				       TD_WIRE_MAX_FDS);
			td__peer_kill(p, "MSG_CTRUNC");
			return false;
		}
		if (rx.msg_flags & MSG_TRUNC) {
			uint16_t op;
			uint64_t id;

			td__close_fds(fds, nfds);
			td_wire_hdr_peek(d->rx, (size_t)n, &op, &id);
			td__peer_error(p, op, id, -EMSGSIZE,
				       "datagram larger than %d bytes",
				       TD_WIRE_MAX_MSG);
			td__peer_kill(p, "oversize datagram");
			return false;
		}
		if (rx.foreign) {
			td__close_fds(fds, nfds);
			td__peer_error(p, 0, 0, -EPROTO,
				       "control message other than "
				       "SCM_RIGHTS");
			td__peer_kill(p, "unexpected control message");
			return false;
		}
		td__d->requests++;
		p->requests++;
		t0 = uv_hrtime();
		handlers->datagram(p, (size_t)n, fds, nfds);
		td__tenant_rx_spent(p->uid, uv_hrtime() - t0);
		/* backpressure: no more requests while replies wait */
		if (!td__list_empty(&p->txq))
			return false;
	}
	return !p->dead && !p->sealing;
}

void td__peer_replay(struct td__peer *p, const uint8_t *msg, size_t len,
		     int *fds, unsigned nfds)
{
	if (p->dead || len > sizeof(td__d->rx)) {
		td__close_fds(fds, nfds);
		return;
	}
	memcpy(td__d->rx, msg, len);
	handlers->datagram(p, len, fds, nfds);
	update_poll(p); /* read again (or parked again) */
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct td__peer *p = h->data;

	if (status < 0) {
		td__peer_kill(p, uv_strerror(status));
		return;
	}
	if (events & UV_WRITABLE)
		flush(p);
	/* behind its uid's connections that wait for their turn */
	if ((events & (UV_READABLE | UV_DISCONNECT)) && !p->sealing &&
	    td__tenant_rx_waits(p->uid))
		defer(p);
	if ((events & UV_READABLE) && td__list_empty(&p->txq) &&
	    !p->sealing && !p->deferred)
		receive(p);
	if ((events & UV_DISCONNECT) && !p->dead && !p->sealing &&
	    !p->deferred) {
		/*
		 * Drain what is left before noticing the hangup: all of it, a
		 * batch at a time (nothing more can come: the peer's send
		 * buffer bounds it), up to its end, where receive ends p.
		 * Not past a reply that waits (read on once it is out), nor
		 * past a request read here that parks for its seals: it is
		 * answered when handled again, and the rest read after it.
		 */
		while (receive(p))
			;
		/* cut short for its uid's turn: drained at the next */
		if (!p->dead && !p->sealing && !p->deferred &&
		    td__list_empty(&p->txq))
			td__peer_kill(p, "hangup");
	}
	if (!p->dead)
		update_poll(p);
}

static void update_poll(struct td__peer *p)
{
	bool wait_w = !td__list_empty(&p->txq);

	if (p->dead)
		return;
	/* a request parked for its seals (sealer.c): nothing read, not
	 * even a hang-up, until it is handled again */
	if (p->sealing && !wait_w) {
		uv_poll_stop(&p->poll);
		return;
	}
	if (wait_w == p->writable_wait && uv_is_active((uv_handle_t *)&p->poll))
		return;
	p->writable_wait = wait_w;
	uv_poll_start(&p->poll,
		      wait_w ? UV_WRITABLE : UV_READABLE | UV_DISCONNECT,
		      on_poll);
}

/*
 * Supplementary groups for gid rules of the policy (SO_PEERGROUPS, Linux
 * 4.13). More than TD__MAX_GROUPS are cut: a rule naming a later group
 * then does not match, which refuses rather than grants.
 */
static void peer_groups(struct td__peer *p)
{
	gid_t *g = p->groups;
	socklen_t len = sizeof(p->groups);

	p->ngroups = 0;
	if (getsockopt(p->fd, SOL_SOCKET, SO_PEERGROUPS, g, &len) < 0) {
		/* ERANGE copies nothing but says how much: ask again */
		if (errno != ERANGE || len > 65536 * sizeof(gid_t))
			return;
		g = malloc(len);
		if (!g || getsockopt(p->fd, SOL_SOCKET, SO_PEERGROUPS, g,
				     &len) < 0) {
			free(g);
			return;
		}
		if (len > sizeof(p->groups))
			len = sizeof(p->groups);
		memcpy(p->groups, g, len);
		free(g);
	}
	p->ngroups = len / sizeof(gid_t);
}

/*
 * A connection over its uid's limits or into the daemon's reserve: one
 * error datagram that names the limit (the client library reads it as
 * the answer to its HELLO), then the socket is closed. Logged at most once
 * per interval, whatever the rate of attempts.
 */
static void refuse_conn(int fd, const struct ucred *cr, int status,
			const char *why)
{
	static struct td__ratelimit rl;
	uint8_t buf[TD_WIRE_HDR_LEN + TD_WIRE_MAX_REASON + 16];
	struct td_wire_error e = {{why, (uint16_t)strlen(why)}};
	int64_t len = td_wire_error_encode(&e, buf + TD_WIRE_HDR_LEN,
					   sizeof(buf) - TD_WIRE_HDR_LEN);
	struct td_wire_hdr h = {
		.magic = TD_WIRE_MAGIC,
		.version = TD_WIRE_VERSION,
		.opcode = TD_OP_HELLO,
		.flags = TD_WIRE_F_REPLY,
		.body_len = len < 0 ? 0 : (uint32_t)len,
		.status = status,
	};

	td_wire_hdr_encode(&h, buf);
	(void)!send(fd, buf, TD_WIRE_HDR_LEN + h.body_len,
		    MSG_DONTWAIT | MSG_NOSIGNAL);
	/*
	 * Read what it sent already (its HELLO): closing with unread data
	 * makes the client's next read fail with ECONNRESET before it sees
	 * the reason. Bounded; its fds are closed.
	 */
	for (int i = 0; i < 4; i++) {
		int fds[TD_SCM_RX_MAX_FDS];
		struct td__scm_rx rx = {.fds = fds,
					.cap = TD_SCM_RX_MAX_FDS};

		if (td__scm_recv(fd, buf, sizeof(buf), MSG_DONTWAIT, &rx) <= 0)
			break;
		td__close_fds(fds, rx.nfds);
	}
	close_sock(fd);
	if (td__ratelimit_ok(&rl, TD__LOG_INTERVAL_MS)) {
		td__log(TD_LOG_WARN,
			"refused a connection of pid %d uid %u: %s (%lu more "
			"refused since the last such line)",
			(int)cr->pid, (unsigned)cr->uid, why, rl.suppressed);
		rl.suppressed = 0;
	}
}

int td__peer_take_fd(struct td__daemon *d, int fd)
{
	static uint64_t serials;
	struct td__peer *p = calloc(1, sizeof(*p));
	struct ucred cred;
	socklen_t len = sizeof(cred);
	char why[256];
	int pfd = -1, rc;

	if (!p) {
		close_sock(fd);
		return -ENOMEM;
	}
	p->fd = fd;
	p->pidfd = -1;
	p->serial = ++serials;
	td__list_init(&p->link);
	td__list_init(&p->txq);
	td__list_init(&p->leases);
	td__list_init(&p->allocs);
	td__list_init(&p->rw_link);
	td__list_init(&p->watches);
	td__list_init(&p->waiters);
	td__list_init(&p->freebufs);
	td__list_init(&p->defer_link);
	turns_init(d->loop);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		rc = -errno;
		goto fail;
	}
	/* before anything else is made for it: 2 fds with its pidfd */
	rc = td__tenant_check(cred.uid, TD__LIM_CONNS, 1, why, sizeof(why));
	if (rc == 0)
		rc = td__tenant_check(cred.uid, TD__LIM_FDS, 2, why,
				      sizeof(why));
	if (rc < 0) {
		free(p);
		refuse_conn(fd, &cred, rc, why);
		return rc;
	}
	p->pid = cred.pid;
	p->uid = cred.uid;
	p->gid = cred.gid;
	peer_groups(p);
	/*
	 * SO_PEERPIDFD (Linux 6.5) names the process that connected. The
	 * fallback pidfd_open(pid) races: the client may have exited and its
	 * pid been reused in between, and the pidfd would then name another
	 * process. So without SO_PEERPIDFD HELLO imports by pidfd only once
	 * the probe fd pulled through it proves to be this connection's other
	 * end (probe_trusted).
	 */
	len = sizeof(pfd);
	if (!d->opts.no_peerpidfd &&
	    getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pfd, &len) == 0) {
		p->pidfd_exact = true;
	} else {
		pfd = td__pidfd_open(p->pid);
		if (pfd < 0)
			pfd = -1;
		else
			fcntl(pfd, F_SETFD, FD_CLOEXEC);
	}
	p->pidfd = pfd;
	p->fds_held = pfd >= 0 ? 2 : 1;
	rc = td__tenant_add(p->uid, TD__LIM_CONNS, 1);
	if (rc == 0)
		rc = td__tenant_add(p->uid, TD__LIM_FDS, p->fds_held);
	if (rc == 0)
		rc = uv_poll_init(d->loop, &p->poll, fd);
	if (rc < 0) {
		td__tenant_sub(p->uid, TD__LIM_CONNS, 1);
		td__tenant_sub(p->uid, TD__LIM_FDS, p->fds_held);
		goto fail;
	}
	p->poll.data = p;
	td__list_add_tail(&d->peers, &p->link);
	td__audit_peer_init(p);
	update_poll(p);
	td__log(TD_LOG_DEBUG, "peer pid %d uid %d connected", (int)p->pid,
		(int)p->uid);
	return 0;
fail:
	if (p->pidfd >= 0)
		close(p->pidfd);
	close_sock(fd);
	free(p);
	return rc;
}

/* ---- staged publishes' bookkeeping (follow.c stages and commits) ---- */

void td__peer_stage_add(struct td__peer *p, void *b, uint64_t id,
			uint32_t slot)
{
	p->stage[p->n_stages] = b;
	p->stage_slot[p->n_stages] = slot;
	p->stage_alloc[p->n_stages++] = id;
}

void td__peer_stage_drop(struct td__peer *p, const void *b)
{
	for (unsigned i = 0; i < p->n_stages; i++) {
		if (p->stage[i] != b)
			continue;
		p->n_stages--;
		p->stage[i] = p->stage[p->n_stages];
		p->stage_slot[i] = p->stage_slot[p->n_stages];
		p->stage_alloc[i] = p->stage_alloc[p->n_stages];
		return;
	}
}

void td__peer_fired_note(struct td__peer *p, uint64_t id, uint64_t version,
			 bool rewrite)
{
	struct td__fired *f = &p->fired[0];

	for (unsigned i = 0; i < TD__PEER_STAGES; i++)
		if (!p->fired[i].alloc) {
			f = &p->fired[i];
			break;
		}
	*f = (struct td__fired){id, version, rewrite};
}
