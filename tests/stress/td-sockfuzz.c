/* SPDX-License-Identifier: MIT */
/*
 * td-sockfuzz: hostile input at tensord's socket (issue 4,
 * docs/reliability.md). Bounded in datagrams and time.
 *
 * Many connections send, in random order: random datagrams (sometimes
 * over 64 KiB), valid requests of every opcode built with proto/wire, and
 * those requests mutated (bit flips, overwritten header fields, cut or
 * extended bodies), each with 0..4 random descriptors attached (pipes, a
 * regular file, sockets, unsealed / shrink-sealed / fully sealed memfds,
 * eventfds, /dev/null, a directory) and now and then more than 16. Replies
 * are drained as they come; a connection the daemon cuts is reopened.
 *
 * Afterwards the daemon must still be the same process, answer a normal
 * client (put, get with every byte checked, list), and, once the names the
 * fuzz published are deleted and all connections closed, be back at its
 * baseline fd count. Exit 0 only then.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <tensord/tensord.h>

#include "blob.h"
#include "daemonctl.h"
#include "scm.h"
#include "wire.h"

#define MAX_CONNS 256
#define POOL 12

static struct {
	unsigned conns;
	uint64_t count;
	double seconds;
	uint64_t seed;
	const char *tensord;
} C = {16, 20000, 20, 1, NULL};

static struct tdc_daemon D;
static int pool[POOL];
static const char *const pool_kind[POOL] = {
	"pipe r", "pipe w", "regular file", "socketpair", "memfd unsealed",
	"memfd shrink-sealed", "memfd fully sealed", "eventfd", "/dev/null",
	"directory", "memfd 1 MiB sealed", "socketpair peer"};
static uint64_t n_sent, n_fds, n_replies, n_cut, n_valid, n_mutated,
	n_random;
static uint64_t S;

static uint64_t rnd(void);

/* What a HELLO names: nothing, a reader's own fences, or every bit. */
static uint32_t some_features(void)
{
	uint32_t k = (uint32_t)(rnd() % 3);

	return k == 0 ? 0 : k == 1 ? TD_WIRE_FEAT_FENCE_OWN : 0xFFFFFFFFu;
}

static uint64_t rnd(void)
{
	S ^= S >> 12;
	S ^= S << 25;
	S ^= S >> 27;
	return S * 2685821657736338717ULL;
}

static int memfd(size_t len, int seals)
{
	int fd = memfd_create("fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0 || ftruncate(fd, (off_t)len) < 0)
		return -1;
	if (seals)
		fcntl(fd, F_ADD_SEALS, seals);
	return fd;
}

static int make_pool(void)
{
	int p[2], sp[2];
	char tmpl[] = "/tmp/td-sockfuzz-XXXXXX";

	if (pipe2(p, O_CLOEXEC) < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
		return -errno;
	pool[0] = p[0];
	pool[1] = p[1];
	pool[2] = mkostemp(tmpl, O_CLOEXEC);
	unlink(tmpl);
	pool[3] = sp[0];
	pool[4] = memfd(4096, 0);
	pool[5] = memfd(4096, F_SEAL_SHRINK);
	pool[6] = memfd(4096, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE |
				      F_SEAL_SEAL);
	pool[7] = eventfd(0, EFD_CLOEXEC);
	pool[8] = open("/dev/null", O_RDWR | O_CLOEXEC);
	pool[9] = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	pool[10] = memfd(1 << 20, F_SEAL_SHRINK);
	pool[11] = sp[1];
	for (int i = 0; i < POOL; i++)
		if (pool[i] < 0) {
			fprintf(stderr, "td-sockfuzz: cannot make a %s\n",
				pool_kind[i]);
			return -EIO;
		}
	return 0;
}

/* ---- messages ---- */

static uint8_t msg[TD_WIRE_MAX_MSG + 8192];

static size_t with_hdr(uint16_t op, int64_t body_len, unsigned nfds)
{
	struct td_wire_hdr h = {.magic = TD_WIRE_MAGIC,
				.version = TD_WIRE_VERSION,
				.opcode = op,
				.fd_count = nfds,
				.request_id = rnd() % 1000,
				.body_len = (uint32_t)(body_len < 0 ? 0
								    : body_len)};

	td_wire_hdr_encode(&h, msg);
	return TD_WIRE_HDR_LEN + h.body_len;
}

static const char *const names[] = {"f/a", "f/b", "f/c/d", "f/e"};

static struct td_wire_str a_name(void)
{
	const char *n = names[rnd() % 4];

	return (struct td_wire_str){n, (uint16_t)strlen(n)};
}

/* A valid request of a random opcode into msg; its length. */
static size_t valid(unsigned nfds)
{
	uint8_t *b = msg + TD_WIRE_HDR_LEN;
	size_t cap = TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN;
	int64_t n = 0;
	/* the version-1 requests, and FOLLOW, FOLLOW_CLOSE, FOLLOW_WAKE,
	 * RING_SUBSCRIBE (parked: no ring is ever made here) */
	uint16_t op = (uint16_t)(rnd() % 4	 ? 1 + rnd() % 10
				 : rnd() % 4 ? TD_OP_FOLLOW + rnd() % 3
					     : TD_OP_RING_SUBSCRIBE);

	switch (op) {
	case TD_OP_HELLO: {
		struct td_wire_hello_req r = {(uint32_t)(rnd() % 3),
					      (int)(rnd() % 8) - 1,
					      {"fuzz", 4}, some_features()};
		n = td_wire_hello_req_encode(&r, b, cap);
		break;
	}
	case TD_OP_ALLOC: {
		struct td_wire_alloc_req r = {.flags = (uint32_t)(rnd() & 1),
					      .plane_count = 1,
					      .sizes = {1 + rnd() % 65536}};
		n = td_wire_alloc_req_encode(&r, b, cap);
		break;
	}
	case TD_OP_PUBLISH: {
		static uint8_t blob[1024];
		uint64_t len = 1 + rnd() % 4096;
		uint64_t shape[1] = {len};
		struct td_blob_plane pl = {.handle = 0, .size = len,
					   .stride = len, .used = len};
		/* now and then a fence: entry 1 (an eventfd of the pool
		 * when the draw attaches one there) */
		int32_t fence = rnd() % 4 ? -1 : 1;
		struct td_blob_desc d = {
			.storage_kind = TD_STORAGE_SHM,
			.pid = (uint32_t)getpid(),
			.fence_fd = fence,
			.dtype = TD_DTYPE_U8,
			.quant_axis = TD_QUANT_NONE,
			.ndim = 1,
			.shape = shape,
			.plane_count = 1,
			.planes = &pl,
		};
		int64_t bl = td_blob_encode(&d, blob, sizeof(blob), NULL);
		struct td_wire_publish_req r = {
			.name = a_name(),
			.flags = (uint32_t)(rnd() & 1),
			.alloc_id = rnd() % 3,
			.meta = {(const uint8_t *)"m", 1},
			.blob = {blob, (uint32_t)(bl < 0 ? 0 : bl)},
			.fd_count = nfds ? nfds : fence < 0 ? 1 : 2,
			.fds = {(int)(rnd() % 16), (int)(rnd() % 16)},
		};
		n = td_wire_publish_req_encode(&r, b, cap);
		break;
	}
	case TD_OP_GET: {
		struct td_wire_get_req r = {a_name(), (uint32_t)(rnd() % 3),
					    (uint32_t)(rnd() & 1), rnd() % 50,
					    (uint32_t)(rnd() % 4 ? 0 : 20), 0,
					    {0}};
		n = td_wire_get_req_encode(&r, b, cap);
		break;
	}
	case TD_OP_RELEASE: {
		struct td_wire_release_req r = {.lease_id = rnd() % 64};
		n = td_wire_release_req_encode(&r, b, cap);
		break;
	}
	case TD_OP_LIST: {
		struct td_wire_list_req r = {{"f/", 2}, {"", 0}, 0};
		n = td_wire_list_req_encode(&r, b, cap);
		break;
	}
	case TD_OP_STAT:
	case TD_OP_DELETE: {
		struct td_wire_name_req r = {a_name()};
		n = td_wire_name_req_encode(&r, b, cap);
		break;
	}
	case TD_OP_WATCH: {
		struct td_wire_watch_req r = {a_name(), (uint32_t)(rnd() & 1)};
		n = td_wire_watch_req_encode(&r, b, cap);
		break;
	}
	case TD_OP_FOLLOW: {
		struct td_wire_ring_sub_req r = {a_name(),
						 (uint32_t)(rnd() & 1), 0};
		n = td_wire_ring_sub_req_encode(&r, b, cap);
		break;
	}
	case TD_OP_RING_SUBSCRIBE: {
		struct td_wire_ring_sub_req r = {
			a_name(), (uint32_t)(rnd() & 1) | TD_WIRE_RSUB_WAIT,
			rnd() % 4 ? (uint32_t)(rnd() % 30) : TD_WIRE_WAIT_FOREVER};
		n = td_wire_ring_sub_req_encode(&r, b, cap);
		break;
	}
	case TD_OP_FOLLOW_CLOSE:
	case TD_OP_FOLLOW_WAKE: {
		struct td_wire_ring_close_req r = {rnd() % 16};
		n = td_wire_ring_close_req_encode(&r, b, cap);
		break;
	}
	default: {
		struct td_wire_unwatch_req r = {rnd() % 16};
		n = td_wire_unwatch_req_encode(&r, b, cap);
		break;
	}
	}
	return with_hdr(op, n, nfds);
}

/* Damage a valid message in one of several ways. */
static size_t mutate(size_t len)
{
	switch (rnd() % 7) {
	case 0: /* bit flips */
		for (unsigned k = 1 + rnd() % 8; k; k--) {
			size_t at = rnd() % len;

			msg[at] ^= (uint8_t)(1u << (rnd() % 8));
		}
		return len;
	case 1: /* a header field overwritten */ {
		static const size_t off[] = {0, 4, 6, 8, 12, 24, 28};
		size_t at = off[rnd() % 7];
		uint32_t v = (uint32_t)rnd();

		if (rnd() & 1)
			v &= 0xff;
		memcpy(msg + at, &v, at == 4 || at == 6 ? 2 : 4);
		return len;
	}
	case 2: /* cut */
		return rnd() % (len + 1);
	case 3: /* extended with junk (body_len then disagrees) */ {
		size_t add = 1 + rnd() % 512;

		for (size_t i = 0; i < add; i++)
			msg[len + i] = (uint8_t)rnd();
		return len + add;
	}
	case 4: /* body_len fixed up after the extension: trailing bytes */ {
		size_t add = 1 + rnd() % 64;
		uint32_t bl;

		memset(msg + len, 0xA5, add);
		bl = (uint32_t)(len + add - TD_WIRE_HDR_LEN);
		memcpy(msg + 24, &bl, 4);
		return len + add;
	}
	case 5: /* a random opcode, rings and notify included */ {
		uint16_t op = (uint16_t)(rnd() % 3 ? rnd() % 20 : 0x100);

		memcpy(msg + 6, &op, 2);
		return len;
	}
	default: /* bytes of the body set to extremes */
		for (unsigned k = 1 + rnd() % 4; k; k--)
			msg[TD_WIRE_HDR_LEN + rnd() % (len - TD_WIRE_HDR_LEN + 1)] =
				rnd() & 1 ? 0xff : 0;
		return len;
	}
}

static size_t random_dgram(void)
{
	size_t len = rnd() % 8 ? rnd() % 256 : rnd() % (TD_WIRE_MAX_MSG + 4096);

	for (size_t i = 0; i < len; i++)
		msg[i] = (uint8_t)rnd();
	/* often a plausible header so the body decoders are reached */
	if (len >= TD_WIRE_HDR_LEN && rnd() % 2) {
		uint32_t bl = (uint32_t)(len - TD_WIRE_HDR_LEN), z = 0;
		uint16_t v = 1, op = (uint16_t)(rnd() % 20);

		memcpy(msg, "TDW1", 4);
		memcpy(msg + 4, &v, 2);
		memcpy(msg + 6, &op, 2);
		memcpy(msg + 8, &z, 4);
		memcpy(msg + 12, &z, 4);
		memcpy(msg + 24, &bl, 4);
	}
	return len;
}

/* ---- connections ---- */

struct conn {
	int fd;
};

static int conn_open(struct conn *c)
{
	c->fd = tdc_connect(D.sock);
	if (c->fd < 0)
		return c->fd;
	/* most connections say HELLO first, to reach the deeper handlers */
	if (rnd() % 8) {
		struct td_wire_hello_req r = {(uint32_t)(rnd() % 3), -1,
					      {"fuzz", 4}, some_features()};
		int64_t n = td_wire_hello_req_encode(&r, msg + TD_WIRE_HDR_LEN,
						     1024);
		size_t len = with_hdr(TD_OP_HELLO, n, 0);

		send(c->fd, msg, len, MSG_NOSIGNAL);
	}
	return 0;
}

/* Read what is there; -1 when the daemon hung up. */
static int drain(struct conn *c, int wait_ms)
{
	static uint8_t buf[TD_WIRE_MAX_MSG];

	for (;;) {
		int fds[32];
		struct td__scm_rx rx = {.fds = fds, .cap = 32};
		ssize_t n;

		if (wait_ms) {
			struct timespec ts = {0, wait_ms * 1000000L};

			nanosleep(&ts, NULL);
			wait_ms = 0;
		}
		n = td__scm_recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT, &rx);
		if (n < 0)
			return n == -EAGAIN ? 0 : -1;
		td__scm_close(fds, rx.nfds);
		if (n == 0)
			return -1;
		n_replies++;
	}
}

static void send_one(struct conn *c)
{
	int fds[24];
	unsigned nfds = 0;
	size_t len;
	unsigned pick = (unsigned)(rnd() % 10);

	/* 0..4 fds usually, sometimes more than the daemon's 16 */
	nfds = rnd() % 3 ? 0 : 1 + (unsigned)(rnd() % 4);
	if (rnd() % 64 == 0)
		nfds = 17 + (unsigned)(rnd() % 7);
	for (unsigned i = 0; i < nfds; i++)
		fds[i] = pool[rnd() % POOL];
	if (pick < 3) {
		len = valid(nfds);
		n_valid++;
	} else if (pick < 8) {
		len = mutate(valid(nfds));
		n_mutated++;
	} else {
		len = random_dgram();
		n_random++;
	}
	if (td__scm_send(c->fd, msg, len, fds, nfds, MSG_DONTWAIT) >= 0) {
		n_sent++;
		n_fds += nfds;
	}
	/* early on (or halfway, for a short run): the pool's eventfd
	 * signals, so fences published with it until then are relayed to
	 * their readers' own (docs/fastpath.md, "Fences") and later ones
	 * are signalled at once */
	if (n_sent == (C.count / 2 < 5000 ? C.count / 2 : 5000))
		(void)!write(pool[7], &(uint64_t){1}, sizeof(uint64_t));
}

/* ---- the check afterwards ---- */

static int normal_client(void)
{
	struct td_client *c = NULL;
	struct td_tensor *t;
	struct td_entry *list;
	struct td_error e = {0};
	static uint8_t buf[65536];
	uint64_t shape[1] = {sizeof(buf)};
	struct td_publish p = {.name = "after/fuzz", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape};
	size_t count;
	int rc;

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 31 + 7);
	rc = td_client_connect(D.sock, &c, &e);
	if (rc == 0)
		rc = td_client_put(c, &p, buf, sizeof(buf), NULL, &e);
	if (rc == 0)
		rc = td_client_get(c, "after/fuzz", &t, &e);
	if (rc == 0) {
		rc = memcmp(td_tensor_plane_data(t, 0), buf, sizeof(buf)) ? -EILSEQ
									 : 0;
		td_tensor_release(t);
	}
	/* every name the fuzz managed to publish goes, so fds can settle */
	if (rc == 0)
		rc = td_client_list(c, "", &list, &count, &e);
	if (rc == 0) {
		for (size_t i = 0; i < count; i++)
			td_client_delete(c, list[i].name, NULL, &e);
		td_entry_list_free(list, count);
	}
	if (rc < 0)
		fprintf(stderr, "td-sockfuzz: normal client: %s (%s)\n",
			strerror(-rc), e.reason);
	td_client_close(c);
	return rc;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	static const struct option o[] = {
		{"conns", 1, NULL, 'c'},   {"count", 1, NULL, 'n'},
		{"seconds", 1, NULL, 's'}, {"seed", 1, NULL, 'x'},
		{"tensord", 1, NULL, 'd'}, {NULL, 0, NULL, 0},
	};
	/*
	 * A bounded daemon: mutated ALLOC and RING_CREATE sizes are
	 * arbitrary, and what the cap admits is fallocate'd for real.
	 */
	static const char *const extra[] = {"--max-bytes", "256M", NULL};
	struct tdc_opts opts = {.log_level = "error", .extra = extra};
	struct conn conns[MAX_CONNS];
	double t0, t_end;
	pid_t pid;
	int ch, fd0, fd1, rc, status;

	C.tensord = getenv("TD_TENSORD");
	while ((ch = getopt_long(argc, argv, "", o, NULL)) != -1) {
		switch (ch) {
		case 'c': C.conns = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'n': C.count = strtoull(optarg, NULL, 0); break;
		case 's': C.seconds = strtod(optarg, NULL); break;
		case 'x': C.seed = strtoull(optarg, NULL, 0); break;
		case 'd': C.tensord = optarg; break;
		default:
			fprintf(stderr, "usage: td-sockfuzz [--conns N] "
					"[--count DGRAMS] [--seconds S] "
					"[--seed X] [--tensord PATH]\n");
			return 2;
		}
	}
	if (!C.conns || C.conns > MAX_CONNS)
		return 2;
	S = C.seed * 0x9E3779B97F4A7C15ULL | 1;
	signal(SIGPIPE, SIG_IGN);
	rc = tdc_start(&D, C.tensord, &opts);
	if (rc < 0 || make_pool() < 0) {
		fprintf(stderr, "td-sockfuzz: set-up failed: %s\n",
			strerror(-rc));
		return 1;
	}
	pid = D.pid;
	fd0 = tdc_fd_count(pid);
	for (unsigned i = 0; i < C.conns; i++)
		if (conn_open(&conns[i]) < 0)
			return 1;
	t0 = now_s();
	t_end = t0 + C.seconds;
	for (uint64_t k = 0; k < C.count && now_s() < t_end; k++) {
		struct conn *c = &conns[rnd() % C.conns];

		send_one(c);
		if (drain(c, 0) < 0 || rnd() % 512 == 0) {
			/* cut by the daemon (or dropped by us): start over */
			close(c->fd);
			n_cut++;
			if (conn_open(c) < 0) {
				fprintf(stderr, "td-sockfuzz: cannot "
						"reconnect\n");
				break;
			}
		}
	}
	t_end = now_s();
	for (unsigned i = 0; i < C.conns; i++) {
		drain(&conns[i], 0);
		close(conns[i].fd);
	}
	rc = waitpid(pid, &status, WNOHANG);
	if (rc != 0) {
		fprintf(stderr, "td-sockfuzz: tensord died (status %d)\n",
			status);
		return 1;
	}
	rc = normal_client();
	fd1 = tdc_fd_settle(pid, fd0, 3000);
	status = tdc_stop(&D, 1);
	printf("td-sockfuzz: %" PRIu64 " datagrams in %.1f s over %u "
	       "connections (seed %" PRIu64 ")\n",
	       n_sent, t_end - t0, C.conns, C.seed);
	printf("  valid %" PRIu64 ", mutated %" PRIu64 ", random %" PRIu64
	       "; %" PRIu64 " fds attached\n",
	       n_valid, n_mutated, n_random, n_fds);
	printf("  replies %" PRIu64 ", connections cut/reopened %" PRIu64
	       "\n",
	       n_replies, n_cut);
	printf("  afterwards: normal client %s, daemon fds %d before, %d "
	       "after, exit %d (log %s)\n",
	       rc == 0 ? "ok" : "FAILED", fd0, fd1, status, D.log);
	if (rc < 0 || fd1 != fd0 || status != 0)
		return 1;
	{
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", D.dir);
		if (system(cmd) != 0)
			return 1;
	}
	return 0;
}
