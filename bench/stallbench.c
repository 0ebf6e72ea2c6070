/* SPDX-License-Identifier: MIT */
/*
 * tensord-stallbench: what one client's big ALLOCs cost every other
 * client of the daemon (docs/protocol.md §6.2, "Who reserves").
 *
 * One daemon; a client B sends one small request at a time (STAT of a
 * name that does not exist: one round trip, nothing else), timing each,
 * while a client A, in its own process:
 *
 *   alloc    makes --planes fresh planes of --mib MiB (td_client_alloc,
 *            each a new memfd whose memory must be reserved), keeping
 *            them unpublished; with --ring, one ring of --planes slots;
 *   free     then exits: the kernel unmaps them, then closes A's
 *            socket; the daemon closes its descriptors of them, the last
 *            reference to their memory, and the kernel frees it.
 *
 * Two daemons of this build: one as it runs by default, one with
 * $TENSORD_CLOSER=0 (planes closed on its loop). Each round runs A and B
 * against both, back to back in rotating order: "now", the default
 * daemon with A's library reserving new planes itself
 * (TD_WIRE_ALLOC_RESERVE); "before", the other daemon with
 * $TENSORD_ALLOC_RESERVE=daemon in A (the daemon reserves, and closes on
 * its loop: what tensord did before both). The alloc phase shows the
 * reservation, the free phase the close. Reported: B's request latency
 * in each phase (median, p99, max, count) and the time A's allocs took,
 * and the ratio now/before of B's p99 and max per phase, the median of
 * the per-round ratios. Nothing is asserted.
 *
 * --seal: A also publishes every plane once it has them all (the
 * publish phase), with $TENSORD_SEAL=daemon, so the daemon makes each
 * write seal (docs/architecture.md, "Threads"): "now" the default
 * daemon (the seals on libuv's pool), "before" one with
 * $TENSORD_SEALER=0 (the seals on its loop); --held holds a page of
 * each plane in a pipe, so every seal waits about 150 ms and fails.
 *
 * --flood: A, as another uid (nobody: the bench runs as root), opens
 * FLOOD_CONNS connections and keeps FLOOD_DEPTH STATs in flight on each
 * for FLOOD_NS (the flood phase, then "after" once it stopped): "now"
 * the default daemon (a uid's connections read 64 datagrams a loop turn
 * in all, docs/reliability.md "A uid's share of the loop"), "before"
 * one with $TENSORD_UID_TURN=0 (each connection read 32 a wake-up,
 * however many its uid has). A's column is then the requests it had
 * answered in the flood.
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tensord/tensord.h>

#include "scm.h"
#include "wire.h"

#define MAX_ROUNDS 32
#define MAX_SAMPLES 200000
/* B goes on measuring this long after A has gone (its planes' free) */
#define FREE_TAIL_NS 300000000ull

enum { MODE_NOW, MODE_BEFORE, NMODES };
enum { PH_ALLOC, PH_FREE, NPHASES };
static const char *const mode_name[NMODES] = {"now", "before"};
static const char *phase_name[NPHASES] = {"alloc", "free"};

struct phase {
	uint64_t *ns;
	size_t n;
};

struct cell {
	struct phase ph[NPHASES];
	uint64_t alloc_ns; /* A's allocs, from its own clock */
};

static struct cell cells[MAX_ROUNDS][NMODES];

static void die(const char *what, const char *why)
{
	fprintf(stderr, "tensord-stallbench: %s: %s\n", what, why);
	exit(1);
}

static void put_u64(int fd, uint64_t v)
{
	if (bench_write_all(fd, &v, sizeof(v)) < 0)
		_exit(3);
}

static bool ring_mode; /* --ring: A makes one ring instead */
/* --seal: A publishes its planes too, leaving their write seals to the
 * daemon ($TENSORD_SEAL=daemon); --held: a page of each held by a pipe */
static bool seal_mode, held_mode;
/* --flood: A floods the daemon with requests from many connections */
static bool flood_mode;
#define FLOOD_CONNS 16
#define FLOOD_DEPTH 32
#define FLOOD_NS 1000000000ull
#define NOBODY 65534

/*
 * A's planes written, and with --held the first page of each vmspliced
 * into a pipe kept open (pp): the daemon's seal of each waits about
 * 150 ms for it, then fails with EBUSY, which is what is measured.
 */
static void fill_buffers(uint64_t size, unsigned planes, struct td_alloc **a,
			 int pp[2])
{
	if (held_mode && pipe(pp) < 0)
		_exit(2);
	for (unsigned i = 0; i < planes; i++) {
		uint8_t *d = td_alloc_data(a[i], 0);
		struct iovec iov = {d, 4096};

		memset(d, (int)i + 1, size);
		if (held_mode && vmsplice(pp[1], &iov, 1, 0) < 0)
			_exit(2);
	}
}

/* A's PUBLISH of each plane (refused with EBUSY where --held). */
static void publish_buffers(struct td_client *c, uint64_t size,
			    unsigned planes, struct td_alloc **a)
{
	uint64_t shape[1] = {size};
	struct td_publish p = {.name = "stall/seal", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape};
	struct td_error e = {0};

	for (unsigned i = 0; i < planes; i++) {
		int rc = td_client_publish_alloc(c, a[i], &p, NULL, &e);

		if (rc < 0 && !(held_mode && rc == -EBUSY)) {
			fprintf(stderr, "A: publish: %s\n", e.reason);
			_exit(2);
		}
	}
}

/* A's buffers: planes allocs, or one ring of planes slots. */
static void make_buffers(struct td_client *c, uint64_t size, unsigned planes,
			 struct td_alloc **a)
{
	uint64_t shape[1] = {size};
	struct td_ring_desc d = {.dtype = TD_TENSOR_U8, .ndim = 1,
				 .shape = shape, .slot_count = planes};
	struct td_ring *r;
	struct td_error e = {0};

	if (ring_mode && td_ring_create(c, "stall/ring", &d, &r, &e) < 0) {
		fprintf(stderr, "A: ring: %s\n", e.reason);
		_exit(2);
	}
	for (unsigned i = 0; !ring_mode && i < planes; i++)
		if (td_client_alloc(c, 1, &size, &a[i], &e) < 0) {
			fprintf(stderr, "A: alloc: %s\n", e.reason);
			_exit(2);
		}
}

/* A raw request of A's flood: STAT of a name that is not there */
static void flood_send(int fd, uint16_t op, uint64_t id)
{
	static uint8_t msg[TD_WIRE_HDR_LEN + 512];
	struct td_wire_stat_req st = {.name = {"flood/none", 10}};
	struct td_wire_hello_req hr = {TD_IMPORT_SCM, -1, {"flood", 5}, 0};
	int64_t n = op == TD_OP_HELLO
			    ? td_wire_hello_req_encode(&hr, msg + TD_WIRE_HDR_LEN,
						       512)
			    : td_wire_stat_req_encode(&st, msg + TD_WIRE_HDR_LEN,
						      512);
	struct td_wire_hdr h = {TD_WIRE_MAGIC, TD_WIRE_VERSION, op, 0, 0, id,
				(uint32_t)n, 0};

	if (n < 0)
		die("A: encode", strerror((int)-n));
	td_wire_hdr_encode(&h, msg);
	if (send(fd, msg, TD_WIRE_HDR_LEN + (size_t)n, MSG_NOSIGNAL) < 0)
		die("A: send", strerror(errno));
}

/* A's replies waiting on fd, each answered by a new request: how many */
static uint64_t flood_answer(int fd)
{
	uint8_t buf[TD_WIRE_MAX_MSG];
	uint64_t n = 0;
	ssize_t len;

	while ((len = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
		flood_send(fd, TD_OP_STAT, 2);
		n++;
	}
	if (len == 0 || (len < 0 && errno != EAGAIN))
		die("A: recv", len ? strerror(errno) : "the daemon hung up");
	return n;
}

/*
 * A, --flood: its connections made as nobody (the uid the daemon sees
 * is the connecting one's), HELLO on each, then FLOOD_DEPTH STATs in
 * flight on each for FLOOD_NS after 'go'; reports the replies it had.
 */
static void flood_a(const char *sock, int rd, int wr)
{
	struct pollfd pf[FLOOD_CONNS];
	uint64_t go, answered = 0, end;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (seteuid(NOBODY) < 0)
		die("A: seteuid", strerror(errno));
	for (int i = 0; i < FLOOD_CONNS; i++) {
		uint8_t buf[TD_WIRE_MAX_MSG];

		pf[i].fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		pf[i].events = POLLIN;
		if (pf[i].fd < 0 ||
		    connect(pf[i].fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			die("A: connect", strerror(errno));
		flood_send(pf[i].fd, TD_OP_HELLO, 1);
		if (recv(pf[i].fd, buf, sizeof(buf), 0) <= 0)
			die("A: HELLO", "no reply");
	}
	put_u64(wr, 0);
	if (bench_read_all(rd, &go, sizeof(go)) < 0)
		_exit(3);
	for (int i = 0; i < FLOOD_CONNS; i++)
		for (int k = 0; k < FLOOD_DEPTH; k++)
			flood_send(pf[i].fd, TD_OP_STAT, 2);
	end = bench_now_ns() + FLOOD_NS;
	while (bench_now_ns() < end)
		if (poll(pf, FLOOD_CONNS, 10) > 0)
			for (int i = 0; i < FLOOD_CONNS; i++)
				if (pf[i].revents & POLLIN)
					answered += flood_answer(pf[i].fd);
	put_u64(wr, answered);
	if (bench_read_all(rd, &go, sizeof(go)) < 0)
		_exit(3);
	_exit(0);
}

/*
 * A: connect, say so, make its buffers on 'go', report, wait, and exit
 * without a word: the kernel unmaps A's buffers before it closes A's
 * socket, so the daemon's close of them is the last reference.
 */
static void client_a(const char *sock, int mode, uint64_t size,
		     unsigned planes, int rd, int wr)
{
	struct td_alloc *a[64];
	struct td_client *c;
	struct td_error e = {0};
	uint64_t t0, go;
	int pp[2] = {-1, -1};

	if (flood_mode)
		flood_a(sock, rd, wr);
	if (mode == MODE_BEFORE && !seal_mode)
		setenv("TENSORD_ALLOC_RESERVE", "daemon", 1);
	else
		unsetenv("TENSORD_ALLOC_RESERVE");
	if (seal_mode)
		setenv("TENSORD_SEAL", "daemon", 1);
	if (td_client_connect(sock, &c, &e) < 0) {
		fprintf(stderr, "A: connect: %s\n", e.reason);
		_exit(2);
	}
	put_u64(wr, 0);
	if (bench_read_all(rd, &go, sizeof(go)) < 0)
		_exit(3);
	if (seal_mode) {
		make_buffers(c, size, planes, a);
		fill_buffers(size, planes, a, pp);
	}
	t0 = bench_now_ns();
	if (seal_mode)
		publish_buffers(c, size, planes, a);
	else
		make_buffers(c, size, planes, a);
	put_u64(wr, bench_now_ns() - t0);
	if (bench_read_all(rd, &go, sizeof(go)) < 0)
		_exit(3);
	_exit(0); /* the pipe (--held) goes with A */
}

/* One request of B, timed. */
static uint64_t probe(struct td_client *b)
{
	struct td_entry ent;
	struct td_error e = {0};
	uint64_t t0 = bench_now_ns();
	int rc = td_client_stat(b, "stall/none", &ent, &e);

	if (rc != -ENOENT)
		die("B: STAT", rc < 0 ? e.reason : "the name exists");
	return bench_now_ns() - t0;
}

static void sample(struct phase *p, uint64_t ns)
{
	if (!p->ns)
		p->ns = calloc(MAX_SAMPLES, sizeof(*p->ns));
	if (!p->ns)
		die("B", "out of memory");
	if (p->n < MAX_SAMPLES)
		p->ns[p->n++] = ns;
}

static bool readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, 0) == 1;
}

static void one_run(const char *sock, struct td_client *b, int mode,
		    uint64_t size, unsigned planes, struct cell *cell)
{
	int to_a[2], from_a[2], st; /* socketpairs: bench_*_all send/recv */
	uint64_t v = 0, gone = 0;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, to_a) < 0 ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, from_a) < 0)
		die("socketpair", strerror(errno));
	pid = fork();
	if (pid < 0)
		die("fork", strerror(errno));
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(to_a[1]);
		close(from_a[0]);
		client_a(sock, mode, size, planes, to_a[0], from_a[1]);
	}
	close(to_a[0]);
	close(from_a[1]);
	if (bench_read_all(from_a[0], &v, sizeof(v)) < 0)
		die("A", "did not connect");
	bench_write_all(to_a[1], &v, sizeof(v));
	/* the alloc phase: until A says its allocs are done */
	while (!readable(from_a[0]))
		sample(&cell->ph[PH_ALLOC], probe(b));
	if (bench_read_all(from_a[0], &cell->alloc_ns, sizeof(uint64_t)) < 0)
		die("A", "failed its allocs");
	/* the free phase: from A's drop until well after it has gone */
	bench_write_all(to_a[1], &v, sizeof(v));
	for (;;) {
		sample(&cell->ph[PH_FREE], probe(b));
		if (!gone && waitpid(pid, &st, WNOHANG) == pid) {
			if (!WIFEXITED(st) || WEXITSTATUS(st))
				die("A", "exited with an error");
			gone = bench_now_ns();
		}
		if (gone && bench_now_ns() - gone > FREE_TAIL_NS)
			break;
	}
	close(to_a[1]);
	close(from_a[0]);
}

static void usage(int status)
{
	fprintf(status ? stderr : stdout,
		"usage: tensord-stallbench [--mib M] [--planes N] [--ring] "
		"[--seal [--held] | --flood] [--rounds R] [--tensord PATH]\n"
		"B's request latency while A makes N fresh planes of M MiB "
		"(default 256 x 4; --ring: one ring of N slots), then exits; "
		"the daemon as it runs now against it as before (the daemon "
		"reserving and freeing on its loop), R rounds (default 5).\n"
		"--seal: A also publishes its planes, their write seals left "
		"to the daemon (TENSORD_SEAL=daemon), now against the daemon "
		"sealing on its loop (TENSORD_SEALER=0); --held: a page of "
		"each held by a pipe (every seal waits, then fails).\n"
		"--flood: A, as nobody (run it as root), keeps 32 requests in "
		"flight on each of 16 connections for 1 s instead, now "
		"against the daemon without a uid's share of the loop "
		"(TENSORD_UID_TURN=0).\n");
	exit(status);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"mib", required_argument, NULL, 's'},
		{"planes", required_argument, NULL, 'p'},
		{"rounds", required_argument, NULL, 'r'},
		{"tensord", required_argument, NULL, 't'},
		{"ring", no_argument, NULL, 'R'},
		{"seal", no_argument, NULL, 'S'},
		{"held", no_argument, NULL, 'H'},
		{"flood", no_argument, NULL, 'F'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}};
	struct bench_env env = {.tensord_path = TD_STALLBENCH_TENSORD_DEFAULT};
	static const char *const tag[NMODES] = {"now", "before"};
	uint64_t size = 256ull << 20;
	unsigned planes = 4, rounds = 5;
	char sock[NMODES][300], why[BENCH_WHY_MAX];
	struct td_client *b[NMODES];
	struct td_error e = {0};
	double ratio[NPHASES][2][MAX_ROUNDS];
	int pid[NMODES], o;

	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (o == 's')
			size = strtoull(optarg, NULL, 10) << 20;
		else if (o == 'p')
			planes = (unsigned)atoi(optarg);
		else if (o == 'r')
			rounds = (unsigned)atoi(optarg);
		else if (o == 't')
			env.tensord_path = optarg;
		else if (o == 'R')
			ring_mode = true;
		else if (o == 'S')
			seal_mode = true;
		else if (o == 'H')
			seal_mode = held_mode = true;
		else if (o == 'F')
			flood_mode = true;
		else if (o == 'h')
			usage(0);
		else
			usage(2);
	}
	if (!size || !planes || planes > 64 || !rounds ||
	    rounds > MAX_ROUNDS || (ring_mode && planes < 2) ||
	    (ring_mode && seal_mode) || (flood_mode && (ring_mode || seal_mode)))
		usage(2);
	if (flood_mode && geteuid() != 0) {
		/* 77: a skip to meson */
		fprintf(stderr, "tensord-stallbench: --flood needs root, to "
				"make A's connections as another uid\n");
		return 77;
	}
	if (seal_mode)
		phase_name[PH_ALLOC] = "publish";
	if (flood_mode) {
		phase_name[PH_ALLOC] = "flood";
		phase_name[PH_FREE] = "after";
	}
	snprintf(env.tmpdir, sizeof(env.tmpdir), "/tmp/td-stall-XXXXXX");
	if (!mkdtemp(env.tmpdir))
		die("mkdtemp", strerror(errno));
	for (int m = 0; m < NMODES; m++) {
		if (m == MODE_BEFORE)
			setenv(flood_mode  ? "TENSORD_UID_TURN"
			       : seal_mode ? "TENSORD_SEALER"
					   : "TENSORD_CLOSER",
			       "0", 1);
		if (bench_tensord_start(&env, tag[m], sock[m], sizeof(sock[m]),
					&pid[m], why, sizeof(why)) < 0)
			die("tensord", why);
		unsetenv("TENSORD_CLOSER");
		unsetenv("TENSORD_SEALER");
		unsetenv("TENSORD_UID_TURN");
		/* A's connections are nobody's */
		if (flood_mode && (chmod(env.tmpdir, 0711) < 0 ||
				   chmod(sock[m], 0666) < 0))
			die("chmod", strerror(errno));
		if (td_client_connect(sock[m], &b[m], &e) < 0)
			die("B: connect", e.reason);
	}
	for (unsigned r = 0; r < rounds; r++)
		for (int k = 0; k < NMODES; k++) {
			int m = (int)((r + (unsigned)k) % NMODES);

			one_run(sock[m], b[m], m, size, planes, &cells[r][m]);
		}
	for (int m = 0; m < NMODES; m++) {
		td_client_close(b[m]);
		bench_reap(pid[m], 5000);
		unlink(sock[m]);
		snprintf(why, sizeof(why), "%.200s/%s.log", env.tmpdir, tag[m]);
		unlink(why);
	}
	rmdir(env.tmpdir);

	if (flood_mode)
		printf("B's STAT round trip in µs while A, another uid, keeps "
		       "%d requests in flight on each of %d connections for "
		       "%.1f s, then stops (%u rounds; now: the default "
		       "daemon; before: TENSORD_UID_TURN=0)\n\n",
		       FLOOD_DEPTH, FLOOD_CONNS, (double)FLOOD_NS / 1e9,
		       rounds);
	else if (seal_mode)
		printf("B's STAT round trip in µs while A publishes %u plain "
		       "loans of %" PRIu64 " MiB%s, their seals left to the "
		       "daemon, then exits (%u rounds; now: the default "
		       "daemon; before: TENSORD_SEALER=0; A with "
		       "TENSORD_SEAL=daemon in both)\n\n",
		       planes, size >> 20,
		       held_mode ? ", a page of each held by a pipe" : "",
		       rounds);
	else
		printf("B's STAT round trip in µs while A makes %u %s of %"
		       PRIu64 " MiB, then exits (%u rounds; now: the default "
		       "daemon, A reserving; before: TENSORD_CLOSER=0, "
		       "TENSORD_ALLOC_RESERVE=daemon)\n\n",
		       planes, ring_mode ? "ring slots" : "planes",
		       size >> 20, rounds);
	printf("| daemon | phase | requests | median | p99 | max | A's %s "
	       "|\n|---|---|---|---|---|---|---|\n",
	       flood_mode  ? "requests answered (median)"
	       : seal_mode ? "publishes (ms, median)"
			   : "allocs (ms, median)");
	for (int m = 0; m < NMODES; m++)
		for (int ph = 0; ph < NPHASES; ph++) {
			struct phase all = {0};
			double am[MAX_ROUNDS];

			for (unsigned r = 0; r < rounds; r++) {
				struct phase *p = &cells[r][m].ph[ph];

				for (size_t i = 0; i < p->n; i++)
					sample(&all, p->ns[i]);
				am[r] = (double)cells[r][m].alloc_ns /
					(flood_mode ? 1 : 1e6);
			}
			qsort(all.ns, all.n, sizeof(*all.ns), bench_cmp_u64);
			printf("| %s | %s | %zu | %.1f | %.1f | %.1f | %.1f |\n",
			       mode_name[m], phase_name[ph], all.n,
			       (double)bench_pct(all.ns, all.n, 0.5) / 1e3,
			       (double)bench_pct(all.ns, all.n, 0.99) / 1e3,
			       (double)bench_pct(all.ns, all.n, 1.0) / 1e3,
			       bench_median_d(am, rounds));
			free(all.ns);
		}
	for (unsigned r = 0; r < rounds; r++)
		for (int ph = 0; ph < NPHASES; ph++) {
			uint64_t q[NMODES][2];

			for (int m = 0; m < NMODES; m++) {
				struct phase *p = &cells[r][m].ph[ph];

				qsort(p->ns, p->n, sizeof(*p->ns), bench_cmp_u64);
				q[m][0] = bench_pct(p->ns, p->n, 0.99);
				q[m][1] = bench_pct(p->ns, p->n, 1.0);
			}
			for (int k = 0; k < 2; k++)
				ratio[ph][k][r] = (double)q[MODE_NOW][k] /
						  (double)q[MODE_BEFORE][k];
		}
	printf("\nnow / before, median of %u paired rounds:", rounds);
	for (int ph = 0; ph < NPHASES; ph++)
		printf(" %s phase p99 %.3fx, max %.3fx%s", phase_name[ph],
		       bench_median_d(ratio[ph][0], rounds),
		       bench_median_d(ratio[ph][1], rounds),
		       ph + 1 < NPHASES ? ";" : "\n");
	return 0;
}
