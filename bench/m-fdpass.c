/* SPDX-License-Identifier: MIT */
/*
 * Baseline: an fd passed and mapped on every handoff. The producer owns one
 * memfd of the payload size, mapped and pre-faulted in setup; each step it
 * writes the payload there and sends the memfd with SCM_RIGHTS (plus the
 * seq) over an AF_UNIX SOCK_SEQPACKET socketpair. The consumer receives a
 * new fd, mmap()s it read-only, checks, munmap()s, closes and acks on the
 * same socket. Reusing one memfd is safe because of the ping-pong: the
 * producer rewrites it only after the ack.
 */
#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

struct fdp_priv {
	int sock;
	int memfd;
	void *map;
};

static int fdp_prepare(struct bench_run *r)
{
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, r->fds) < 0)
		return bench_fail(r, -errno, "socketpair: %s",
				  strerror(errno));
	return 0;
}

static void fdp_unprepare(struct bench_run *r)
{
	for (int i = 0; i < 2; i++) {
		if (r->fds[i] >= 0)
			close(r->fds[i]);
		r->fds[i] = -1;
	}
}

static int fdp_setup(struct bench_run *r)
{
	struct fdp_priv *f = calloc(1, sizeof(*f));
	int mine = r->role == BENCH_PRODUCER ? 0 : 1;

	if (!f)
		return bench_fail(r, -ENOMEM, "out of memory");
	f->memfd = -1;
	r->priv = f;
	f->sock = r->fds[mine];
	close(r->fds[!mine]);
	r->fds[0] = r->fds[1] = -1;
	if (r->role == BENCH_CONSUMER)
		return 0;
	f->memfd = memfd_create("tdbench-fdpass", MFD_CLOEXEC);
	if (f->memfd < 0)
		return bench_fail(r, -errno, "memfd_create: %s",
				  strerror(errno));
	if (ftruncate(f->memfd, (off_t)r->size) < 0)
		return bench_fail(r, -errno, "ftruncate: %s", strerror(errno));
	f->map = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED,
		      f->memfd, 0);
	if (f->map == MAP_FAILED) {
		f->map = NULL;
		return bench_fail(r, -errno, "mmap: %s", strerror(errno));
	}
	bench_prefault(f->map, r->size);
	return 0;
}

static int fdp_producer_step(struct bench_run *r, uint64_t seq)
{
	struct fdp_priv *f = r->priv;
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = &seq, .iov_len = sizeof(seq) };
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = u.buf,
		.msg_controllen = sizeof(u.buf),
	};
	struct cmsghdr *c;
	int rc;

	bench_payload_write(f->map, r->size, seq, r->write);
	memset(&u, 0, sizeof(u));
	c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &f->memfd, sizeof(int));
	while (sendmsg(f->sock, &msg, MSG_NOSIGNAL) < 0) {
		if (errno != EINTR)
			return bench_fail(r, -errno, "sendmsg: %s",
					  strerror(errno));
	}
	rc = bench_ack_recv(f->sock, seq);
	if (rc < 0)
		return bench_fail(r, rc, "ack %llu: %s",
				  (unsigned long long)seq, strerror(-rc));
	return 0;
}

static int fdp_consumer_step(struct bench_run *r, uint64_t seq)
{
	struct fdp_priv *f = r->priv;
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	uint64_t got = 0;
	struct iovec iov = { .iov_base = &got, .iov_len = sizeof(got) };
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = u.buf,
		.msg_controllen = sizeof(u.buf),
	};
	struct cmsghdr *c;
	ssize_t n;
	int fd = -1, rc;
	void *map;

	while ((n = recvmsg(f->sock, &msg, MSG_CMSG_CLOEXEC)) < 0) {
		if (errno != EINTR)
			return bench_fail(r, -errno, "recvmsg: %s",
					  strerror(errno));
	}
	if (n == 0)
		return bench_fail(r, -EPIPE, "producer closed the socket");
	c = CMSG_FIRSTHDR(&msg);
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
	    c->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(&fd, CMSG_DATA(c), sizeof(int));
	if (fd < 0 || (msg.msg_flags & MSG_CTRUNC) || got != seq) {
		if (fd >= 0)
			close(fd);
		return bench_fail(r, -EPROTO, "bad handoff %llu (fd %d)",
				  (unsigned long long)got, fd);
	}
	map = mmap(NULL, r->size, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		rc = -errno;
		close(fd);
		return bench_fail(r, rc, "mmap: %s", strerror(-rc));
	}
	rc = bench_payload_check(map, r->size, seq, r->write);
	munmap(map, r->size);
	close(fd);
	if (rc < 0)
		return bench_fail(r, rc, "payload %llu corrupt",
				  (unsigned long long)seq);
	rc = bench_ack_send(f->sock, seq);
	if (rc < 0)
		return bench_fail(r, rc, "ack send: %s", strerror(-rc));
	return 0;
}

static void fdp_teardown(struct bench_run *r)
{
	struct fdp_priv *f = r->priv;

	if (!f)
		return;
	if (f->map)
		munmap(f->map, r->size);
	if (f->memfd >= 0)
		close(f->memfd);
	if (f->sock >= 0)
		close(f->sock);
	free(f);
	r->priv = NULL;
}

const struct bench_method bench_fd_pass = {
	.name = "fd-pass",
	.desc = "one memfd sent with SCM_RIGHTS over AF_UNIX SOCK_SEQPACKET "
		"each handoff, consumer mmap()s/munmap()s it every time; "
		"ack: 8 bytes back on the same socket",
	.prepare = fdp_prepare,
	.unprepare = fdp_unprepare,
	.setup = fdp_setup,
	.producer_step = fdp_producer_step,
	.consumer_step = fdp_consumer_step,
	.teardown = fdp_teardown,
};
