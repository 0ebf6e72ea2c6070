/* SPDX-License-Identifier: MIT */
/*
 * Recyclable loans (docs/fastpath.md, "Recycled loans"): TD_ALLOC_RECYCLE
 * buffers come back to their producer once their version is retired and
 * unleased, without an fd or a mapping; consumers only ever get read-only
 * descriptors; a leased version is never recycled; free buffers count in
 * the memory accounting, go first under --max-bytes and go with their
 * connection. Producer and consumers are separate clients of one test
 * process (the daemon tells them apart by connection), on the pidfd and
 * on the SCM_RIGHTS path. tu_daemon_stop() checks fds and memfd mappings.
 * Also here: an SCM consumer's GET that advertises its cached buffers
 * receives no fd for them (and a lie gets nothing it can map), and the
 * daemon makes no heap call per warm handoff (tests/malloc-count.c),
 * and a plain loan is write-sealed by its producer before its PUBLISH.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "blob.h"
#include "bytes.h"
#include "client.h"
#include "malloc-count.h"
#include "rawclient.h"
#include "scm.h"
#include "tensord/tensord.h"
#include "testchild.h"
#include "testclient.h"
#include "testutil.h"
#include "wire.h"

TestSuite(recycle, .timeout = TU_TEST_TIMEOUT_S);

/*
 * SCM_RIGHTS descriptors this process has received. recvmsg is
 * interposed (this executable's definition comes first for libtensord's
 * calls too) and counts the fds of every SCM_RIGHTS control message, so a
 * test can say that a handoff installed no fd at all, which fd counts
 * cannot: libtensord closes a duplicate it does not need at once.
 */
static unsigned long scm_fds_in;

ssize_t recvmsg(int sock, struct msghdr *msg, int flags);
ssize_t recvmsg(int sock, struct msghdr *msg, int flags)
{
	static ssize_t (*real)(int, struct msghdr *, int);
	ssize_t n;

	if (!real) {
		void *sym = dlsym(RTLD_NEXT, "recvmsg");

		/* POSIX dlsym: object and function pointers share a size */
		memcpy(&real, &sym, sizeof(real));
	}
	n = real(sock, msg, flags);
	if (n < 0 || !msg->msg_control)
		return n;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c;
	     c = CMSG_NXTHDR(msg, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			__atomic_add_fetch(&scm_fds_in,
					   (c->cmsg_len - CMSG_LEN(0)) /
						   sizeof(int),
					   __ATOMIC_RELAXED);
	return n;
}

#define KIB 1024u

static const char *const small_cap[] = {"--max-bytes", "64M", NULL};

static struct td_client *conn(const struct tu_daemon *d, const char *import)
{
	struct td_client *c = NULL;
	struct td_client_info info;
	struct td_error e = {0};

	cr_assert_eq(setenv("TENSORD_IMPORT", import, 1), 0);
	cr_assert_eq(td_client_connect(d->sock, &c, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_info(c, &info), 0);
	cr_assert_eq(info.path_out, strcmp(import, "scm") == 0
					    ? TD_CLIENT_PATH_SCM
					    : TD_CLIENT_PATH_PIDFD);
	return c;
}

/* A recyclable (or plain) loan of one plane of size bytes. */
static struct td_alloc *loan(struct td_client *c, uint64_t size,
			     uint32_t flags)
{
	struct td_alloc *a = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_alloc_ex(c, 1, &size, flags, &a, &e), 0, "%s",
		     e.reason);
	return a;
}

static ino_t ino_of_at(int fd, int line)
{
	struct stat st;

	cr_assert_eq(fstat(fd, &st), 0, "fd %d (line %d)", fd, line);
	return st.st_ino;
}
#define ino_of(fd) ino_of_at(fd, __LINE__)

/* Fill the loan with byte b and publish it as name (u8, one dimension). */
static uint64_t publish(struct td_client *c, struct td_alloc *a,
			const char *name, uint8_t b)
{
	uint64_t shape[1] = {td_alloc_size(a, 0)}, v = 0;
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape};
	struct td_error e = {0};

	memset(td_alloc_data(a, 0), b, (size_t)shape[0]);
	cr_assert_eq(td_client_publish_alloc(c, a, &p, &v, &e), 0, "%s",
		     e.reason);
	return v;
}

static struct td_tensor *get(struct td_client *c, const char *name)
{
	struct td_tensor *t = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_get(c, name, &t, &e), 0, "%s", e.reason);
	return t;
}

static bool all_bytes(const void *p, size_t n, uint8_t b)
{
	const uint8_t *q = p;

	for (size_t i = 0; i < n; i++)
		if (q[i] != b)
			return false;
	return true;
}

/* Open fds of the daemon, after its loop has settled (at most 10 s). */
static int daemon_fds(pid_t pid, int want)
{
	char path[64];
	int n = -1;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	for (int i = 0; i < 1000; i++) {
		DIR *dir = opendir(path);
		struct dirent *de;

		cr_assert(dir);
		n = 0;
		while ((de = readdir(dir)))
			n += de->d_name[0] != '.';
		closedir(dir);
		if (n == want || want < 0)
			break;
		usleep(10000);
	}
	return n;
}

/*
 * The daemon's fds once they stop changing (three equal reads 100 ms
 * apart): tu_daemon_start()'s readiness probe is a connection the daemon
 * may still be closing when a test starts.
 */
static int daemon_fds_settled(pid_t pid)
{
	int last = daemon_fds(pid, -1), same = 0;

	for (int i = 0; i < 100 && same < 3; i++) {
		int n;

		usleep(100000);
		n = daemon_fds(pid, -1);
		same = n == last ? same + 1 : 0;
		last = n;
	}
	return last;
}

/* ---- the buffer comes back without an fd or a mapping ---- */

static void comes_back(const char *import)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_alloc *a1, *a2, *a3;
	struct td_tensor *t;
	struct td_entry ent;
	struct td_error e = {0};
	const void *seen;
	void *addr1;
	ino_t ino1;
	int fd1, fds, maps;

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = conn(&d, import);
	cons = conn(&d, import);

	a1 = loan(prod, 64 * KIB, TD_ALLOC_RECYCLE);
	addr1 = td_alloc_data(a1, 0);
	fd1 = td_alloc_fd(a1, 0);
	ino1 = ino_of(fd1);
	publish(prod, a1, "rec/x", 1);
	cr_assert_eq(td_client_stat(cons, "rec/x", &ent, &e), 0);
	cr_assert(ent.flags & TD_ENTRY_RECYCLE, "flags %#x", ent.flags);
	td_entry_fini(&ent);
	t = get(cons, "rec/x");
	seen = td_tensor_plane_data(t, 0);
	cr_assert(all_bytes(seen, 64 * KIB, 1));
	td_tensor_release(t);

	/* v1 is current: the next loan is a new buffer */
	a2 = loan(prod, 64 * KIB, TD_ALLOC_RECYCLE);
	cr_assert_neq(ino_of(td_alloc_fd(a2, 0)), ino1);
	publish(prod, a2, "rec/x", 2); /* v1 retired, unleased */

	/* v1's buffer comes back: same fd, same address, nothing new */
	fds = tu_fd_count();
	maps = tu_buf_map_count();
	a3 = loan(prod, 64 * KIB, TD_ALLOC_RECYCLE);
	cr_assert_eq(td_alloc_fd(a3, 0), fd1);
	cr_assert_eq(ino_of(td_alloc_fd(a3, 0)), ino1);
	cr_assert_eq(td_alloc_data(a3, 0), addr1);
	cr_assert_eq(tu_fd_count(), fds);
	cr_assert_eq(tu_buf_map_count(), maps);
	/* it holds what it carried last, not zeros */
	cr_assert(all_bytes(td_alloc_data(a3, 0), 64 * KIB, 1));
	publish(prod, a3, "rec/x", 3);

	/*
	 * The consumer's mapping cache hits: the same address as its first
	 * GET, no new mapping (and on the pidfd path no new fd either; on
	 * SCM the attached duplicate is closed again).
	 */
	fds = tu_fd_count();
	t = get(cons, "rec/x");
	cr_assert_eq(td_tensor_plane_data(t, 0), seen);
	cr_assert(all_bytes(seen, 64 * KIB, 3));
	cr_assert_eq(tu_buf_map_count(), maps);
	cr_assert_eq(tu_fd_count(), fds);
	td_tensor_release(t);

	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

/* A loan published on a connection it was not made on is refused, the
 * reason saying so ("missing argument" told nobody what was wrong). */
Test(recycle, a_loan_published_on_another_connection_is_refused_saying_why)
{
	struct tu_daemon d;
	struct td_client *a, *b;
	struct td_alloc *l = NULL;
	struct td_error e = {0};
	uint64_t size = 64, shape[1] = {64};
	struct td_publish p = {.name = "x/y",
			       .dtype = TD_TENSOR_U8,
			       .ndim = 1,
			       .shape = shape};

	tu_daemon_start(&d, "warn");
	a = conn(&d, "scm");
	b = conn(&d, "scm");
	cr_assert_eq(td_client_alloc(a, 1, &size, &l, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_publish_alloc(b, l, &p, NULL, &e), -EINVAL);
	cr_assert(strstr(e.reason, "made on another connection"), "%s",
		  e.reason);
	td_client_close(a);
	td_client_close(b);
	tu_daemon_stop(&d, false);
}

Test(recycle, a_retired_buffer_comes_back_without_fd_or_mapping_pidfd)
{
	comes_back("pidfd");
}

Test(recycle, a_retired_buffer_comes_back_without_fd_or_mapping_scm)
{
	comes_back("scm");
}

/* ---- a leased version is never recycled ---- */

static void leased_kept(const char *import)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_alloc *a;
	struct td_tensor *t1;
	ino_t ino1, ino2;

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = conn(&d, import);
	cons = conn(&d, import);

	a = loan(prod, 16 * KIB, TD_ALLOC_RECYCLE);
	ino1 = ino_of(td_alloc_fd(a, 0));
	publish(prod, a, "rec/l", 0x11);
	t1 = get(cons, "rec/l"); /* held throughout */

	a = loan(prod, 16 * KIB, TD_ALLOC_RECYCLE);
	ino2 = ino_of(td_alloc_fd(a, 0));
	publish(prod, a, "rec/l", 0x22); /* v1 retired but leased */

	/* not v1's buffer: a fresh one, which the producer scribbles on */
	a = loan(prod, 16 * KIB, TD_ALLOC_RECYCLE);
	cr_assert_neq(ino_of(td_alloc_fd(a, 0)), ino1);
	cr_assert_neq(ino_of(td_alloc_fd(a, 0)), ino2);
	publish(prod, a, "rec/l", 0x33); /* v2 retired, unleased */
	a = loan(prod, 16 * KIB, TD_ALLOC_RECYCLE);
	cr_assert_eq(ino_of(td_alloc_fd(a, 0)), ino2);
	memset(td_alloc_data(a, 0), 0x44, 16 * KIB);
	td_alloc_free(a);

	/* the held version's bytes are intact */
	cr_assert(all_bytes(td_tensor_plane_data(t1, 0), 16 * KIB, 0x11));
	td_tensor_release(t1);
	/* released, and retired: now it comes back */
	a = loan(prod, 16 * KIB, TD_ALLOC_RECYCLE);
	cr_assert_eq(ino_of(td_alloc_fd(a, 0)), ino1);
	td_alloc_free(a);

	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

Test(recycle, a_leased_version_is_never_recycled_pidfd)
{
	leased_kept("pidfd");
}

Test(recycle, a_leased_version_is_never_recycled_scm)
{
	leased_kept("scm");
}

/* ---- consumers get read-only descriptors ---- */

static void read_only(const char *import)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_alloc *a;
	struct td_tensor *t;
	long page = sysconf(_SC_PAGESIZE);
	void *p;
	int fd, seals;

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = conn(&d, import);
	cons = conn(&d, import);
	a = loan(prod, 8 * KIB, TD_ALLOC_RECYCLE);
	/* the producer's memfd keeps its size seals, not a write seal */
	seals = fcntl(td_alloc_fd(a, 0), F_GET_SEALS);
	cr_assert(seals & F_SEAL_SHRINK);
	publish(prod, a, "rec/ro", 7);

	t = get(cons, "rec/ro");
	fd = td_tensor_plane_fd(t, 0);
	cr_assert_geq(fd, 0);
	seals = fcntl(fd, F_GET_SEALS);
	cr_assert(seals & F_SEAL_SHRINK && seals & F_SEAL_GROW);
	cr_assert_not(seals & F_SEAL_WRITE, "a recyclable buffer is not "
		      "write-sealed (seals %#x)", seals);
	cr_assert_eq(fcntl(fd, F_GETFL) & O_ACCMODE, O_RDONLY);
	/* sealing needs a writable description */
	cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
	cr_assert_eq(errno, EPERM);
	cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL), -1);
	/* the mapping cannot be made writable, nor a new writable one */
	p = (void *)((uintptr_t)td_tensor_plane_data(t, 0) &
		     ~(uintptr_t)(page - 1));
	cr_assert_eq(mprotect(p, (size_t)page, PROT_READ | PROT_WRITE), -1);
	cr_assert_eq(errno, EACCES);
	cr_assert_eq(mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE,
			  MAP_SHARED, fd, 0),
		     MAP_FAILED);
	cr_assert(all_bytes(td_tensor_plane_data(t, 0), 8 * KIB, 7));
	td_tensor_release(t);

	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

Test(recycle, consumers_get_a_read_only_descriptor_pidfd)
{
	read_only("pidfd");
}

Test(recycle, consumers_get_a_read_only_descriptor_scm)
{
	read_only("scm");
}

/* ---- plain loans are unchanged ---- */

Test(recycle, plain_loans_are_still_write_sealed_and_never_recycled)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_alloc *a;
	struct td_tensor *t;
	struct td_entry ent;
	struct td_error e = {0};
	ino_t ino1;

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = conn(&d, "auto");
	cons = conn(&d, "auto");
	a = loan(prod, 8 * KIB, 0);
	ino1 = ino_of(td_alloc_fd(a, 0));
	publish(prod, a, "rec/plain", 5);
	cr_assert_eq(td_client_stat(cons, "rec/plain", &ent, &e), 0);
	cr_assert_not(ent.flags & TD_ENTRY_RECYCLE);
	td_entry_fini(&ent);
	t = get(cons, "rec/plain");
	cr_assert(fcntl(td_tensor_plane_fd(t, 0), F_GET_SEALS) &
		  F_SEAL_WRITE);
	td_tensor_release(t);
	a = loan(prod, 8 * KIB, 0);
	publish(prod, a, "rec/plain", 6); /* v1 retired, unleased, freed */
	/* even a recyclable loan cannot get a plain version's buffer */
	a = loan(prod, 8 * KIB, TD_ALLOC_RECYCLE);
	cr_assert_neq(ino_of(td_alloc_fd(a, 0)), ino1);
	td_alloc_free(a);
	/* unknown flags */
	{
		uint64_t size = 8 * KIB;

		cr_assert_eq(td_client_alloc_ex(prod, 1, &size, 0x8, &a, &e),
			     -EINVAL);
	}

	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

/* ---- memory: counted, dropped first, dropped with the producer ---- */

/*
 * An evicted recyclable version's buffers are closed, not put back on
 * its producer's free list: there they would be charged again, and the
 * eviction would have made no room.
 */
Test(recycle, evicting_a_recyclable_version_makes_room)
{
	static const char *const cap[] = {"--max-bytes", "1M", NULL};
	static const char *const names[] = {"rec/a", "rec/b", "rec/c"};
	struct tu_daemon d;
	struct td_client *prod, *other;
	struct td_alloc *big = NULL;
	struct td_status *st = NULL;
	struct td_error e = {0};
	uint64_t size = 512 * KIB;

	tu_daemon_start_args(&d, "warn", cap);
	prod = conn(&d, "auto");
	other = conn(&d, "auto");
	/* 768 KiB of current versions, nothing free */
	for (int i = 0; i < 3; i++)
		publish(prod, loan(prod, 256 * KIB, TD_ALLOC_RECYCLE),
			names[i], (uint8_t)i);
	/* 512 KiB fit once one version (the oldest) is evicted */
	cr_assert_eq(td_client_alloc(other, 1, &size, &big, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_client_stat(other, "rec/a", &(struct td_entry){0},
				    &e),
		     -ENOENT);
	/* and the daemon holds no more than its limit */
	cr_assert_eq(td_client_status(other, &st, &e), 0, "%s", e.reason);
	cr_assert_leq(st->bytes, st->max_bytes, "%llu bytes held",
		      (unsigned long long)st->bytes);
	td_status_free(st);
	td_alloc_free(big);
	td_client_close(other);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

Test(recycle, free_buffers_count_and_go_first_under_max_bytes)
{
	static const char *const cap[] = {"--max-bytes", "1M", NULL};
	struct tu_daemon d;
	struct td_client *prod, *other;
	struct td_alloc *a, *big;
	struct td_entry ent;
	struct td_error e = {0};
	ino_t ino1;
	int before;

	tu_daemon_start_args(&d, "warn", cap);
	prod = conn(&d, "auto");
	other = conn(&d, "auto");
	a = loan(prod, 256 * KIB, TD_ALLOC_RECYCLE);
	ino1 = ino_of(td_alloc_fd(a, 0));
	publish(prod, a, "rec/m", 1);
	a = loan(prod, 256 * KIB, TD_ALLOC_RECYCLE);
	publish(prod, a, "rec/m", 2);
	/* v2 (256 KiB) + v1's buffer on the free list (256 KiB) */
	before = daemon_fds_settled(d.pid);
	/*
	 * 640 KiB fit only if one of the two goes: the free buffer goes,
	 * not the current version (its writable and read-only fds close,
	 * the new plane opens one).
	 */
	big = loan(other, 640 * KIB, 0);
	cr_assert_eq(daemon_fds(d.pid, before - 1), before - 1);
	cr_assert_eq(td_client_stat(other, "rec/m", &ent, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(ent.version, 2);
	td_entry_fini(&ent);
	td_alloc_free(big);
	td_client_close(other); /* its unpublished alloc goes with it */
	/* and the producer does not get it back: it is gone */
	a = loan(prod, 256 * KIB, TD_ALLOC_RECYCLE);
	cr_assert_neq(ino_of(td_alloc_fd(a, 0)), ino1);
	td_alloc_free(a);

	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

Test(recycle, free_buffers_go_when_their_producer_disconnects)
{
	struct tu_daemon d;
	struct td_client *prod, *other;
	struct td_alloc *a;
	struct td_error e = {0};
	uint64_t v = 0;
	int base, connected, n;

	tu_daemon_start_args(&d, "warn", small_cap);
	other = conn(&d, "auto");
	base = daemon_fds_settled(d.pid);
	prod = conn(&d, "auto");
	connected = daemon_fds(d.pid, -1);
	for (uint8_t i = 1; i <= 4; i++) {
		a = loan(prod, 32 * KIB, TD_ALLOC_RECYCLE);
		publish(prod, a, "rec/d", i);
	}
	/* v4 (2 fds) and one free buffer (2 fds): two buffers in turn */
	cr_assert_eq(daemon_fds(d.pid, -1), connected + 2 + 2);
	td_client_close(prod);
	/* the free buffer goes with the connection; the version stays */
	n = daemon_fds(d.pid, base + 2);
	cr_assert_eq(n, base + 2, "daemon fds %d, base %d, connected %d", n,
		     base, connected);
	cr_assert_eq(td_client_delete(other, "rec/d", &v, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(v, 4);
	/* and once deleted its buffer is closed, not kept for anyone */
	cr_assert_eq(daemon_fds(d.pid, base), base);

	td_client_close(other);
	tu_daemon_stop(&d, true);
}

/* ---- SCM consumers: GET leaves out the buffers they hold ---- */

/*
 * Steady state of a recycled stream on the SCM path: the producer's
 * ALLOC and the consumer's GET both advertise what they hold, so a whole
 * handoff (ALLOC, write, PUBLISH, GET, read, RELEASE) installs no fd in
 * either and maps nothing new. consumer: the consumer's import path.
 */
static void scm_steady(const char *producer, const char *consumer)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_tensor *t;
	unsigned long in0, cold;
	int fds = 0, maps = 0;

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = conn(&d, producer);
	cons = conn(&d, consumer);
	/* warm: both buffers of the alternation mapped on both sides */
	in0 = scm_fds_in;
	for (uint8_t i = 1; i <= 6; i++) {
		publish(prod, loan(prod, 32 * KIB, TD_ALLOC_RECYCLE), "rec/s",
			i);
		t = get(cons, "rec/s");
		cr_assert(all_bytes(td_tensor_plane_data(t, 0), 32 * KIB, i));
		td_tensor_release(t);
	}
	cold = scm_fds_in - in0;
	/* the counter sees SCM fds at all (else the test proves nothing) */
	if (strcmp(consumer, "scm") == 0)
		cr_assert_geq(cold, 2, "SCM fds while warming up: %lu", cold);
	fds = tu_fd_count();
	maps = tu_buf_map_count();
	in0 = scm_fds_in;
	for (unsigned i = 0; i < 50; i++) {
		uint8_t b = (uint8_t)(0x40 + i);

		publish(prod, loan(prod, 32 * KIB, TD_ALLOC_RECYCLE), "rec/s",
			b);
		t = get(cons, "rec/s");
		cr_assert(all_bytes(td_tensor_plane_data(t, 0), 32 * KIB, b),
			  "handoff %u", i);
		cr_assert_eq(tu_fd_count(), fds, "handoff %u", i);
		cr_assert_eq(tu_buf_map_count(), maps, "handoff %u", i);
		td_tensor_release(t);
	}
	cr_assert_eq(scm_fds_in - in0, 0,
		     "%lu fds received in 50 warm handoffs",
		     scm_fds_in - in0);

	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

Test(recycle, an_scm_consumer_gets_a_recycled_buffer_without_any_fd)
{
	scm_steady("scm", "scm");
}

Test(recycle, a_pidfd_consumer_is_unchanged_and_receives_no_fd)
{
	scm_steady("pidfd", "pidfd");
}

Test(recycle, an_scm_consumer_of_a_pidfd_producer_receives_no_fd)
{
	scm_steady("pidfd", "scm");
}

/* ---- a raw SCM client (rawclient.h), to send held ids libtensord would not ---- */

/* A raw GET LATEST of name with held ids; the reply decoded into *g. */
static void raw_get(int sock, uint64_t id, const char *name, uint32_t flags,
		    uint32_t held_count, const uint64_t *held,
		    struct rawrep *r, struct td_wire_get_rep *g)
{
	struct td_wire_get_req q = {.name = {name, (uint16_t)strlen(name)},
				    .mode = TD_GET_LATEST,
				    .flags = flags,
				    .held_count = held_count};
	struct td_wire_error er;
	int64_t n;

	if (held_count)
		memcpy(q.held, held, held_count * sizeof(*held));
	n = td_wire_get_req_encode(&q, rawbuf + TD_WIRE_HDR_LEN,
				   sizeof(rawbuf) - TD_WIRE_HDR_LEN);
	if (n < 0) { /* a request the encoder refuses: forge it */
		q.held_count = 0;
		n = td_wire_get_req_encode(&q, rawbuf + TD_WIRE_HDR_LEN,
					   sizeof(rawbuf) - TD_WIRE_HDR_LEN);
		cr_assert_gt(n, 0);
		td__put_le32(rawbuf + TD_WIRE_HDR_LEN + n, held_count);
		n += 4;
		for (uint32_t i = 0; i < held_count; i++, n += 8)
			td__put_le64(rawbuf + TD_WIRE_HDR_LEN + n, held[i]);
	}
	raw_send(sock, TD_OP_GET, id, (size_t)n);
	raw_recv(sock, r);
	cr_assert_eq(r->h.request_id, id);
	if (r->h.status < 0) {
		cr_assert_eq(td_wire_error_decode(rawbuf + TD_WIRE_HDR_LEN,
						  r->h.body_len, &er, NULL),
			     0);
		cr_log_info("GET refused: %.*s", (int)er.reason.len,
			    er.reason.ptr);
		return;
	}
	cr_assert_eq(td_wire_get_rep_decode(rawbuf + TD_WIRE_HDR_LEN,
					    r->h.body_len, g, NULL),
		     0);
}

/* What fd is, as /proc names it (static buffer). */
static const char *fd_kind(int fd)
{
	static char l[64];
	char path[64];
	ssize_t k;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	k = readlink(path, l, sizeof(l) - 1);
	cr_assert_gt(k, 0);
	l[k] = 0;
	return l;
}

/* Release lease id on a raw connection; asserts the empty reply. */
static void raw_release(int sock, uint64_t id, uint64_t lease)
{
	struct td_wire_release_req q = {.lease_id = lease};
	struct rawrep r;
	int64_t n = td_wire_release_req_encode(&q, rawbuf + TD_WIRE_HDR_LEN,
					       sizeof(rawbuf) -
						       TD_WIRE_HDR_LEN);

	raw_send(sock, TD_OP_RELEASE, id, (size_t)n);
	raw_recv(sock, &r);
	cr_assert_eq(r.h.status, 0);
}

Test(recycle, a_consumer_that_claims_a_buffer_it_lacks_gets_no_fd_for_it)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_alloc *a;
	struct td_tensor *t;
	struct td_error e = {0};
	struct td_wire_get_rep g;
	struct rawrep r;
	uint64_t shape[1] = {16 * KIB}, v = 0, held[3];
	struct td_publish p = {.name = "rec/liar", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape,
			       .flags = TD_PUBLISH_FENCE};
	int sock, efd;

	tu_daemon_start_args(&d, "warn", small_cap);
	efd = eventfd(1, EFD_CLOEXEC);
	prod = conn(&d, "auto");
	a = loan(prod, 16 * KIB, TD_ALLOC_RECYCLE);
	memset(td_alloc_data(a, 0), 9, 16 * KIB);
	cr_assert_geq(efd, 0);
	p.fence_fd = efd;
	cr_assert_eq(td_client_publish_alloc(prod, a, &p, &v, &e), 0, "%s",
		     e.reason);
	close(efd);

	sock = raw_scm_conn(&d);
	/* an honest first GET: plane and fence attached */
	raw_get(sock, 2, "rec/liar", TD_WIRE_REQ_SCM, 0, NULL, &r, &g);
	cr_assert_eq(r.h.status, 0);
	cr_assert_eq(g.fd_count, 2);
	cr_assert_eq(r.nfds, 2);
	held[0] = g.fds[0].buffer_id; /* the plane */
	held[1] = g.fds[1].buffer_id; /* the fence: never left out */
	held[2] = 123456789;          /* a buffer the daemon never had */
	td__scm_close(r.fds, r.nfds);
	raw_release(sock, 3, g.lease_id);
	close(sock);

	/*
	 * A new connection that holds nothing claims the plane: the reply
	 * leaves exactly that fd out (-1, nothing attached) and attaches
	 * the fence; the unknown id changes nothing. The client is left
	 * with a tensor it cannot map - its problem, nobody else's.
	 */
	sock = raw_scm_conn(&d);
	raw_get(sock, 2, "rec/liar", TD_WIRE_REQ_SCM, 3, held, &r, &g);
	cr_assert_eq(r.h.status, 0);
	cr_assert_eq(g.fd_count, 2);
	cr_assert_eq(g.fds[0].fd, -1);
	cr_assert_eq(g.fds[0].buffer_id, held[0]);
	cr_assert_geq(g.fds[1].fd, 0, "the fence is always attached");
	cr_assert_eq(r.nfds, 1);
	cr_assert_str_eq(fd_kind(r.fds[0]), "anon_inode:[eventfd]");
	td__scm_close(r.fds, r.nfds);
	raw_release(sock, 3, g.lease_id);
	/* held ids only ever change what this reply attaches */
	raw_get(sock, 4, "rec/liar", TD_WIRE_REQ_SCM, 1, &held[2], &r, &g);
	cr_assert_eq(r.h.status, 0);
	cr_assert_eq(r.nfds, 2);
	cr_assert_geq(g.fds[0].fd, 0);
	td__scm_close(r.fds, r.nfds);
	raw_release(sock, 5, g.lease_id);
	/* held ids on a pidfd-path GET are refused, with the reason */
	raw_get(sock, 6, "rec/liar", 0, 1, held, &r, &g);
	cr_assert_eq(r.h.status, -EBADMSG);
	cr_assert_eq(r.nfds, 0);
	close(sock);

	/* the daemon serves everyone else as before */
	cons = conn(&d, "scm");
	t = get(cons, "rec/liar");
	cr_assert(all_bytes(td_tensor_plane_data(t, 0), 16 * KIB, 9));
	cr_assert(td_tensor_has_fence(t));
	td_tensor_release(t);

	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

/*
 * A client that takes no fence of its own (a HELLO without
 * TD_WIRE_FEAT_FENCE_OWN, as every libtensord before it) is handed the
 * producer's eventfd, with which it could signal or un-signal every
 * other reader's fence. With --own-fences-only the daemon refuses it
 * such a GET, saying why, and attaches nothing; versions without a fence
 * and libtensord's readers are served as ever.
 */
Test(recycle, own_fences_only_refuses_an_eventfd_to_a_client_that_takes_none)
{
	static const char *const strict[] = {"--own-fences-only", NULL};
	struct tu_daemon d;
	struct td_client *c;
	struct td_tensor *t;
	struct td_error e = {0};
	struct td_wire_get_rep g;
	struct rawrep r;
	uint64_t shape[1] = {4};
	const uint8_t bytes[4] = {1, 2, 3, 4};
	struct td_publish p = {.name = "rec/fenced", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape,
			       .flags = TD_PUBLISH_FENCE};
	int sock, efd;

	tu_daemon_start_args(&d, "warn", strict);
	efd = eventfd(0, EFD_CLOEXEC);
	cr_assert_geq(efd, 0);
	c = conn(&d, "auto");
	p.fence_fd = efd;
	cr_assert_eq(td_client_put(c, &p, bytes, 4, NULL, &e), 0, "%s",
		     e.reason);
	p.name = "rec/plain";
	p.flags = 0;
	cr_assert_eq(td_client_put(c, &p, bytes, 4, NULL, &e), 0, "%s",
		     e.reason);
	sock = raw_scm_conn(&d);
	raw_get(sock, 2, "rec/fenced", TD_WIRE_REQ_SCM, 0, NULL, &r, &g);
	cr_assert_eq(r.h.status, -EPROTONOSUPPORT);
	cr_assert_eq(r.nfds, 0, "nothing attached to a refusal");
	struct td_wire_error er;
	cr_assert_eq(td_wire_error_decode(rawbuf + TD_WIRE_HDR_LEN,
					  r.h.body_len, &er, NULL),
		     0);
	cr_assert(memmem(er.reason.ptr, er.reason.len, "--own-fences-only",
			 17),
		  "%.*s", (int)er.reason.len, er.reason.ptr);
	raw_get(sock, 3, "rec/plain", TD_WIRE_REQ_SCM, 0, NULL, &r, &g);
	cr_assert_eq(r.h.status, 0, "no fence, no refusal");
	td__scm_close(r.fds, r.nfds);
	raw_release(sock, 4, g.lease_id);
	close(sock);
	/* libtensord takes a fence of its own: served */
	cr_assert_eq(td_client_get(c, "rec/fenced", &t, &e), 0, "%s",
		     e.reason);
	cr_assert_str_eq(fd_kind(td_tensor_fence_fd(t)),
			 "anon_inode:[timerfd]");
	td_tensor_release(t);
	td_client_close(c);
	close(efd);
	tu_daemon_stop(&d, true);
}

/* A parked SCM GET (NEWER, waiting) keeps its held ids until it is served. */
Test(recycle, a_parked_scm_get_leaves_out_held_buffers_when_served)
{
	struct tu_daemon d;
	struct td_client *prod;
	struct td_wire_get_rep g;
	struct td_wire_get_req q = {.name = {"rec/park", 8},
				    .mode = TD_GET_NEWER,
				    .flags = TD_WIRE_REQ_SCM,
				    .timeout_ms = 10000,
				    .held_count = 1};
	struct rawrep r;
	struct td_alloc *a;
	uint64_t v2;
	int64_t n;
	int sock;

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = conn(&d, "auto");
	sock = raw_scm_conn(&d);
	publish(prod, loan(prod, 8 * KIB, TD_ALLOC_RECYCLE), "rec/park", 1);
	/* learn v1's buffer id, as a consumer that maps it would */
	raw_get(sock, 2, "rec/park", TD_WIRE_REQ_SCM, 0, NULL, &r, &g);
	cr_assert_eq(r.h.status, 0);
	q.held[0] = g.fds[0].buffer_id;
	td__scm_close(r.fds, r.nfds);
	raw_release(sock, 3, g.lease_id);
	v2 = publish(prod, loan(prod, 8 * KIB, TD_ALLOC_RECYCLE), "rec/park",
		     2); /* v1 retired and unleased: its buffer is free */
	/* parked until v3, which reuses v1's buffer */
	q.version = v2;
	n = td_wire_get_req_encode(&q, rawbuf + TD_WIRE_HDR_LEN,
				   sizeof(rawbuf) - TD_WIRE_HDR_LEN);
	cr_assert_gt(n, 0);
	raw_send(sock, TD_OP_GET, 4, (size_t)n);
	a = loan(prod, 8 * KIB, TD_ALLOC_RECYCLE);
	publish(prod, a, "rec/park", 3);
	raw_recv(sock, &r);
	cr_assert_eq(r.h.request_id, 4);
	cr_assert_eq(r.h.status, 0);
	cr_assert_eq(td_wire_get_rep_decode(rawbuf + TD_WIRE_HDR_LEN,
					    r.h.body_len, &g, NULL),
		     0);
	cr_assert_eq(g.version, v2 + 1);
	cr_assert_eq(g.fds[0].buffer_id, q.held[0], "v3 reuses v1's buffer");
	cr_assert_eq(g.fds[0].fd, -1);
	cr_assert_eq(r.nfds, 0);
	raw_release(sock, 5, g.lease_id);
	close(sock);

	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

/*
 * A fake daemon (a child process) for the client's side of a lie: it
 * answers HELLO (SCM both ways) and every GET with a reply that leaves
 * out buffer 77, which the client never mapped - what a client that
 * advertised an id it does not hold gets from the real daemon. Exits 0
 * when the client hangs up, 1 on anything unexpected. pre_features: a
 * daemon from before HELLO feature bits, which refuses the features word
 * (-EBADMSG) and wants the HELLO of version 1 after it (else exits 2).
 */
static int fake_daemon(int lsock, bool pre_features)
{
	unsigned hellos = 0;
	static uint8_t blob[1024], out[TD_WIRE_MAX_MSG];
	int64_t blen = raw_blob_u8(4096, 0, blob, sizeof(blob));
	int sock = accept4(lsock, NULL, NULL, SOCK_CLOEXEC);
	uint64_t lease = 1;

	if (blen <= 0 || sock < 0)
		return 1;
	for (;;) {
		int fds[TD_WIRE_MAX_FDS];
		struct td__scm_rx rx = {.fds = fds, .cap = TD_WIRE_MAX_FDS};
		ssize_t n = td__scm_recv(sock, rawbuf, sizeof(rawbuf), 0, &rx);
		struct td_wire_hdr h, rh = {TD_WIRE_MAGIC, TD_WIRE_VERSION, 0,
					    TD_WIRE_F_REPLY, 0, 0, 0, 0};
		int64_t len = 0;

		if (n == 0)
			return 0;
		if (n < 0 || rx.nfds ||
		    td_wire_hdr_decode(rawbuf, (size_t)n, &h, NULL) < 0)
			return 1;
		if (h.opcode == TD_OP_HELLO && pre_features && hellos++ == 0) {
			struct td_wire_hello_req q;
			struct td_wire_error er = {{"HELLO: trailing bytes", 21}};

			if (td_wire_hello_req_decode(rawbuf + TD_WIRE_HDR_LEN,
						     h.body_len, &q, NULL) ||
			    !q.features)
				return 2;
			len = td_wire_error_encode(&er, out + TD_WIRE_HDR_LEN,
						   sizeof(out) -
							   TD_WIRE_HDR_LEN);
			rh.status = -EBADMSG;
		} else if (h.opcode == TD_OP_HELLO) {
			struct td_wire_hello_req q;
			struct td_wire_hello_rep r = {
				(uint32_t)getpid(), TD_IMPORT_SCM, 0, -1,
				TD_WIRE_MAX_MSG, TD_WIRE_MAX_FDS,
				TD_WIRE_MAX_NAME, TD_WIRE_MAX_META,
				TD_WIRE_MAX_PLANES, 0, {"fake", 4}, 0};

			if (pre_features &&
			    (td_wire_hello_req_decode(rawbuf + TD_WIRE_HDR_LEN,
						      h.body_len, &q, NULL) ||
			     q.features))
				return 2;
			len = td_wire_hello_rep_encode(
				&r, out + TD_WIRE_HDR_LEN,
				sizeof(out) - TD_WIRE_HDR_LEN);
		} else if (h.opcode == TD_OP_GET) {
			struct td_wire_get_rep r = {
				.version = 1,
				.lease_id = lease++,
				.meta = {(const uint8_t *)"", 0},
				.blob = {blob, (uint32_t)blen},
				.fd_count = 1,
				.fds = {{-1, 77}},
			};

			len = td_wire_get_rep_encode(
				&r, out + TD_WIRE_HDR_LEN,
				sizeof(out) - TD_WIRE_HDR_LEN);
		} else if (h.opcode != TD_OP_RELEASE) {
			return 1;
		}
		if (len < 0)
			return 1;
		rh.opcode = h.opcode;
		rh.request_id = h.request_id;
		rh.body_len = (uint32_t)len;
		td_wire_hdr_encode(&rh, out);
		if (td__scm_send(sock, out, TD_WIRE_HDR_LEN + (size_t)len,
				 NULL, 0, 0) < 0)
			return 1;
	}
}

static void liar_get(bool pre_features)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char dir[] = "/tmp/td-fake-XXXXXX";
	struct td_client *c = NULL;
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	int lsock, st, fds0 = tu_fd_count();
	pid_t pid;

	cr_assert(tu_mkdtemp(dir));
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/fake.sock", dir);
	lsock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	cr_assert_geq(lsock, 0);
	cr_assert_eq(bind(lsock, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(lsock, 1), 0);
	pid = tu_fork();
	if (pid == 0)
		_exit(fake_daemon(lsock, pre_features));
	close(lsock);

	cr_assert_eq(setenv("TENSORD_IMPORT", "scm", 1), 0);
	cr_assert_eq(td_client_connect(sa.sun_path, &c, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_client_get(c, "rec/liar", &t, &e), -EPROTO);
	cr_assert_null(t);
	cr_assert(strstr(e.reason, "left out buffer 0 (id 77), which is not "
				   "mapped here"),
		  "reason: %s", e.reason);
	/* and again: nothing half-imported stayed behind */
	cr_assert_eq(td_client_get(c, "rec/liar", &t, &e), -EPROTO);
	td_client_close(c);
	st = tu_wait_child(pid, TU_WAIT_S, "the fake daemon");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "fake daemon status %#x", st);
	unlink(sa.sun_path);
	rmdir(dir);
	cr_assert_eq(tu_fd_count(), fds0);
}

Test(recycle, a_get_reply_that_leaves_out_an_unmapped_buffer_is_a_clean_error)
{
	liar_get(false);
}

/*
 * A daemon from before HELLO feature bits refuses the features word; the
 * client says HELLO again without it (the fake exits 2 otherwise) and
 * works on, with none of the optional features.
 */
Test(recycle, a_daemon_without_feature_bits_is_still_reached)
{
	liar_get(true);
}

/* ---- streams: one round trip per tensor on each side ---- */


/*
 * One stream handoff: TD_ALLOC_STREAM loan (lent by the last PUBLISH
 * reply once warm), write, PUBLISH; GET NEWER, check, release (nowait:
 * td_tensor_release_nowait).
 */
static uint64_t stream_handoff(struct td_client *prod, struct td_client *cons,
			       uint64_t last, uint8_t b, bool nowait)
{
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	uint64_t v;

	publish(prod, loan(prod, 16 * KIB, TD_ALLOC_STREAM), "st/x", b);
	cr_assert_eq(td_client_get_newer(cons, "st/x", last, 1000, &t, &e), 0,
		     "%s", e.reason);
	cr_assert(all_bytes(td_tensor_plane_data(t, 0), 16 * KIB, b));
	v = td_tensor_version(t);
	if (nowait)
		td_tensor_release_nowait(t);
	else
		td_tensor_release(t);
	return v;
}

/*
 * Warm, a stream handoff on the GET path (TENSORD_GET_FOLLOW=0) is three
 * requests to the daemon (PUBLISH, GET, RELEASE): no ALLOC, because each PUBLISH reply lent the next loan, from
 * the buffer of the version it replaced; and no fd and no mapping on
 * either side. Counted by the daemon itself (RING_STAT counts every
 * datagram it received). The release waits here, so that the daemon has
 * ended the lease before the next PUBLISH, which then finds the buffer
 * free: with td_tensor_release_nowait the two connections race, and a
 * PUBLISH that wins lends nothing (the next call makes an ALLOC).
 */
/*
 * The cast of the request counts below: a daemon, a producer and a
 * consumer on import path `import` (the consumer's get_newer riding a
 * follow when ride), and a ring named counter, whose RING_STAT counts
 * every datagram the daemon received.
 */
static void counted_start(struct tu_daemon *d, const char *import, bool ride,
			  const char *counter, struct td_client **prod,
			  struct td_client **cons, struct td_ring **r)
{
	uint64_t size = 64;
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = &size};
	struct td_error e = {0};

	tu_daemon_start_args(d, "warn", small_cap);
	*prod = conn(d, import);
	cr_assert_eq(setenv("TENSORD_GET_FOLLOW", ride ? "1" : "0", 1), 0);
	*cons = conn(d, import);
	cr_assert_eq(td_ring_create(*prod, counter, &desc, r, &e), 0, "%s",
		     e.reason);
}

static void stream_trips(const char *import, bool ride)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_ring *r = NULL;
	uint64_t last = 0, before;
	int fds = 0, maps = 0;

	counted_start(&d, import, ride, "st/counter", &prod, &cons, &r);
	for (unsigned i = 0; i < 4; i++)
		last = stream_handoff(prod, cons, last, (uint8_t)(i + 1),
				      false);
	fds = tu_fd_count();
	maps = tu_buf_map_count();
	before = tc_daemon_requests(prod, "st/counter");
	for (unsigned i = 0; i < 100; i++)
		last = stream_handoff(prod, cons, last, (uint8_t)(i + 9),
				      false);
	/*
	 * 3 per handoff on the GET path, and the RING_STAT that reads the
	 * count; riding a follow (docs/fastpath.md, "get_newer rides a
	 * follow"), the PUBLISH alone
	 */
	cr_assert_eq(tc_daemon_requests(prod, "st/counter") - before,
		     ride ? 101 : 301);
	cr_assert_eq(tu_fd_count(), fds);
	cr_assert_eq(tu_buf_map_count(), maps);
	/* nowait: the same bytes, whatever the race lends */
	for (unsigned i = 0; i < 100; i++)
		last = stream_handoff(prod, cons, last, (uint8_t)(i + 3),
				      true);
	/* other sizes: the lent loan goes back (UNLOAN) and is lent again */
	td_alloc_free(loan(prod, 8 * KIB, TD_ALLOC_STREAM));
	last = stream_handoff(prod, cons, last, 77, false);
	td_ring_close(r);
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

Test(recycle, a_warm_stream_handoff_is_three_requests_pidfd)
{
	stream_trips("pidfd", false);
}

Test(recycle, a_warm_stream_handoff_is_three_requests_scm)
{
	stream_trips("scm", false);
}

Test(recycle, a_warm_get_newer_handoff_is_one_request_pidfd)
{
	stream_trips("pidfd", true);
}

Test(recycle, a_warm_get_newer_handoff_is_one_request_scm)
{
	stream_trips("scm", true);
}

/*
 * td_client_put_ex(TD_ALLOC_STREAM): a loop of puts copies into the
 * name's stream loan, so warm, each version is one request (the PUBLISH:
 * its reply lent the next loan) and no fd or mapping on either side,
 * where td_client_put is an ALLOC and a PUBLISH of a new buffer a
 * version, which its follower maps anew.
 */
static uint64_t put_handoff(struct td_client *prod, struct td_client *cons,
			    uint64_t last, uint8_t b, uint32_t flags)
{
	static uint8_t buf[16 * KIB];
	uint64_t n = sizeof(buf), v;
	struct td_publish p = {.name = "pt/x", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = &n};
	struct td_tensor *t = NULL;
	struct td_error e = {0};

	memset(buf, b, sizeof(buf));
	cr_assert_eq(td_client_put_ex(prod, &p, buf, sizeof(buf), flags, &v,
				      &e),
		     0, "%s", e.reason);
	cr_assert_eq(td_client_get_newer(cons, "pt/x", last, 1000, &t, &e), 0,
		     "%s", e.reason);
	cr_assert_eq(td_tensor_version(t), v);
	cr_assert(all_bytes(td_tensor_plane_data(t, 0), sizeof(buf), b));
	td_tensor_release(t);
	return v;
}

/* Whether the current version of pt/x is recyclable (not sealed). */
static bool put_recyclable(struct td_client *c)
{
	struct td_entry en;
	bool r;

	cr_assert_eq(td_client_stat(c, "pt/x", &en, NULL), 0);
	r = en.flags & TD_ENTRY_RECYCLE;
	td_entry_fini(&en);
	return r;
}

static void put_trips(const char *import)
{
	uint64_t n = 4, last = 0, before, imports;
	struct td_publish p = {.name = "pt/x", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = &n};
	struct td_error e = {0};
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_ring *r = NULL;
	int fds, maps;

	counted_start(&d, import, true, "pt/counter", &prod, &cons, &r);
	cr_assert_eq(td_client_put_ex(prod, &p, "abcd", 4, TD_ALLOC_REWRITE,
				      NULL, &e),
		     -EINVAL);
	for (unsigned i = 0; i < 4; i++)
		last = put_handoff(prod, cons, last, (uint8_t)(i + 1), 0);
	before = tc_daemon_requests(prod, "pt/counter");
	for (unsigned i = 0; i < 20; i++)
		last = put_handoff(prod, cons, last, (uint8_t)(i + 5), 0);
	/* plain: an ALLOC and a PUBLISH a version, and the RING_STAT */
	cr_assert_geq(tc_daemon_requests(prod, "pt/counter") - before, 41);
	cr_assert(!put_recyclable(prod), "a plain put is write-sealed");
	for (unsigned i = 0; i < 4; i++)
		last = put_handoff(prod, cons, last, (uint8_t)(i + 30),
				   TD_ALLOC_STREAM);
	fds = tu_fd_count();
	maps = tu_buf_map_count();
	imports = prod->loan_imports;
	before = tc_daemon_requests(prod, "pt/counter");
	for (unsigned i = 0; i < 100; i++)
		last = put_handoff(prod, cons, last, (uint8_t)(i + 40),
				   TD_ALLOC_STREAM);
	cr_assert_eq(tc_daemon_requests(prod, "pt/counter") - before, 101);
	cr_assert_eq(prod->loan_imports, imports);
	cr_assert_eq(tu_fd_count(), fds);
	cr_assert_eq(tu_buf_map_count(), maps);
	cr_assert(put_recyclable(prod));
	td_ring_close(r);
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

Test(recycle, a_warm_stream_put_is_one_request_pidfd)
{
	put_trips("pidfd");
}

Test(recycle, a_warm_stream_put_is_one_request_scm)
{
	put_trips("scm");
}

/* A stream loan of one plane of size bytes, named name. */
static struct td_alloc *stream_loan(struct td_client *c, const char *name,
				    uint64_t size)
{
	struct td_alloc *a = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_alloc_named(c, name, 1, &size, TD_ALLOC_STREAM,
					   &a, &e),
		     0, "%s", e.reason);
	return a;
}

/* Publish name's next tensor (size bytes of b); cons gets it newer than
 * *last (riding a follow), bytes checked. */
static void named_handoff(struct td_client *prod, struct td_client *cons,
			  const char *name, uint64_t size, uint64_t *last,
			  uint8_t b)
{
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	uint64_t v = publish(prod, stream_loan(prod, name, size), name, b);

	cr_assert_eq(td_client_get_newer(cons, name, *last, 1000, &t, &e), 0,
		     "%s: %s", name, e.reason);
	cr_assert_eq(td_tensor_version(t), v, "%s", name);
	cr_assert(all_bytes(td_tensor_plane_data(t, 0), size, b), "%s", name);
	*last = v;
	td_tensor_release(t);
}

/*
 * A producer of several named streams on one connection (two cameras
 * through one client) gets each name's next loan in that name's PUBLISH
 * reply: warm, a tensor is its PUBLISH alone, whichever name came
 * before, and no fd or mapping is made. With one lent loan per
 * connection, each alloc found the other name's loan, gave it back and
 * made an ALLOC: two requests per tensor. A name whose sizes change
 * gives back its own loan only; a name past TD__LENT_MAX pushes the
 * oldest name's out, given back by id; every version keeps its own
 * bytes throughout.
 */
static void streams_trips(const char *import)
{
	enum { N = TD__LENT_MAX + 1 };
	char name_buf[N][8];
	const char *names[N];
	const uint64_t sizes[3] = {16 * KIB, 16 * KIB, 32 * KIB};
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_ring *r = NULL;
	uint64_t last[N] = {0}, before;
	int fds, maps;

	for (unsigned n = 0; n < N; n++) {
		snprintf(name_buf[n], sizeof(name_buf[n]), "ms/%c", 'a' + n);
		names[n] = name_buf[n];
	}
	counted_start(&d, import, true, "ms/counter", &prod, &cons, &r);
	for (unsigned i = 0; i < 4; i++)
		for (unsigned n = 0; n < 3; n++)
			named_handoff(prod, cons, names[n], sizes[n], &last[n],
				      (uint8_t)(i * 3 + n + 1));
	fds = tu_fd_count();
	maps = tu_buf_map_count();
	before = tc_daemon_requests(prod, "ms/counter");
	for (unsigned i = 0; i < 100; i++)
		for (unsigned n = 0; n < 3; n++)
			named_handoff(prod, cons, names[n], sizes[n], &last[n],
				      (uint8_t)(i + n + 20));
	/* the PUBLISHes, and the RING_STAT that reads the count */
	cr_assert_eq(tc_daemon_requests(prod, "ms/counter") - before, 301);
	cr_assert_eq(tu_fd_count(), fds);
	cr_assert_eq(tu_buf_map_count(), maps);
	/* ms/a's sizes change: its loan goes back, the others stay lent */
	named_handoff(prod, cons, names[0], 8 * KIB, &last[0], 0xa1);
	named_handoff(prod, cons, names[1], sizes[1], &last[1], 0xb1);
	named_handoff(prod, cons, names[0], 8 * KIB, &last[0], 0xa2);
	/* one name more than lent loans, in turn: TD__LENT_MAX of them keep
	 * theirs, the last one goes by ALLOC (and its consumer by GET: a
	 * handle follows TD__GF_NAMES); giving back the oldest name's loan
	 * gave back, every time, the one the next alloc wanted */
	for (unsigned i = 0; i < 13; i++) {
		if (i == 3)
			before = tc_daemon_requests(prod, "ms/counter");
		for (unsigned n = 0; n < N; n++)
			named_handoff(prod, cons, names[n], 4 * KIB, &last[n],
				      (uint8_t)(0x40 + i + n));
	}
	/* a round: TD__LENT_MAX PUBLISHes, and the last name's ALLOC,
	 * PUBLISH, GET and RELEASE; and the RING_STAT that reads the count */
	before = tc_daemon_requests(prod, "ms/counter") - before;
	cr_assert_eq(before, 10 * (TD__LENT_MAX + 4) + 1, "%llu requests",
		     (unsigned long long)before);
	for (unsigned i = 0; i < 6; i++)
		for (unsigned n = 0; n < N; n++) {
			struct td_tensor *t;
			uint64_t v = publish(prod,
					     stream_loan(prod, names[n],
							 4 * KIB),
					     names[n], (uint8_t)(0x40 + i + n));

			t = get(cons, names[n]);
			cr_assert_eq(td_tensor_version(t), v);
			cr_assert(all_bytes(td_tensor_plane_data(t, 0), 4 * KIB,
					    (uint8_t)(0x40 + i + n)));
			td_tensor_release(t);
		}
	cr_assert_leq(prod->n_lent, TD__LENT_MAX);
	unsetenv("TENSORD_GET_FOLLOW");
	td_ring_close(r);
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

Test(recycle, a_producer_of_several_streams_makes_one_request_a_tensor_pidfd)
{
	streams_trips("pidfd");
}

Test(recycle, a_producer_of_several_streams_makes_one_request_a_tensor_scm)
{
	streams_trips("scm");
}

/*
 * Many planar streams through one connection (a rig of cameras whose
 * frames have three planes each): sixteen names, 48 buffers a version,
 * more than a request can name as held (TD_WIRE_MAX_HELD). Warm, each
 * name's next loan is a version before, which the producer maps
 * already: no loan comes with an fd, on either import path, whether the
 * consumer lets each frame go before the next publish or keeps it until
 * it has the next (keep: the name's buffer is free only after its next
 * publish, so the producer keeps two versions a name idle, and the
 * daemon's free list holds one a name between publishes). Before, the
 * producer kept 16 idle buffers (the least recently published went,
 * which in a loop over names is the next one lent) and named the first
 * 16 it found as held, and the free list kept 16 a connection: every
 * loan came with its fds (48 a round).
 */
static void planar_streams(const char *import, bool keep)
{
	enum { N = TD__LENT_MAX, P = 3, SZ = 4096, WARM = 8, ROUNDS = 12 };
	const uint64_t sizes[P] = {SZ, SZ, SZ}, shape[3] = {P, 64, 64};
	const struct td_plane planes[P] = {{0, 0, 64, SZ}, {1, 0, 64, SZ},
					   {2, 0, 64, SZ}};
	char name[N][16];
	uint64_t last[N] = {0}, imports = 0;
	struct td_tensor *kept[N] = {NULL};
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_ring *r = NULL;

	counted_start(&d, import, true, "pl/counter", &prod, &cons, &r);
	for (unsigned i = 0; i < ROUNDS; i++) {
		if (i == WARM)
			imports = prod->loan_imports;
		for (unsigned n = 0; n < N; n++) {
			struct td_publish p = {.dtype = TD_TENSOR_U8,
					       .ndim = 3, .shape = shape,
					       .format = "rgb8_planar",
					       .plane_count = P,
					       .planes = planes};
			struct td_alloc *a = NULL;
			struct td_tensor *t = NULL;
			struct td_error e = {0};
			uint8_t b = (uint8_t)(i * N + n + 1);

			snprintf(name[n], sizeof(name[n]), "pl/cam%u", n);
			p.name = name[n];
			cr_assert_eq(td_client_alloc_named(prod, name[n], P,
							   sizes,
							   TD_ALLOC_STREAM, &a,
							   &e),
				     0, "%s", e.reason);
			for (unsigned k = 0; k < P; k++)
				memset(td_alloc_data(a, k), b + k, SZ);
			cr_assert_eq(td_client_publish_alloc(prod, a, &p,
							     NULL, &e),
				     0, "%s", e.reason);
			cr_assert_eq(td_client_get_newer(cons, name[n],
							 last[n], 1000, &t,
							 &e),
				     0, "%s", e.reason);
			for (unsigned k = 0; k < P; k++)
				cr_assert(all_bytes(td_tensor_plane_data(t, k),
						    SZ, (uint8_t)(b + k)),
					  "%s plane %u", name[n], k);
			last[n] = td_tensor_version(t);
			/* keep: the one before goes once this one is in hand */
			if (kept[n])
				td_tensor_release(kept[n]);
			kept[n] = keep ? t : NULL;
			if (!keep)
				td_tensor_release(t);
		}
	}
	for (unsigned n = 0; n < N; n++)
		if (kept[n])
			td_tensor_release(kept[n]);
	imports = prod->loan_imports - imports;
	cr_assert_eq(imports, 0u, "%llu loan buffers imported in %u rounds",
		     (unsigned long long)imports, ROUNDS - WARM);
	unsetenv("TENSORD_GET_FOLLOW");
	td_ring_close(r);
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

Test(recycle, many_planar_streams_take_their_loans_without_an_fd_pidfd)
{
	planar_streams("pidfd", false);
}

Test(recycle, many_planar_streams_take_their_loans_without_an_fd_scm)
{
	planar_streams("scm", false);
}

Test(recycle, many_planar_streams_kept_a_frame_long_take_loans_without_an_fd)
{
	planar_streams("pidfd", true);
}

/* ---- a PUBLISH nobody waits for (td_client_publish_alloc_nowait) ---- */

/* Fill a loan with byte b and publish it without waiting for the reply. */
static void publish_nowait(struct td_client *c, struct td_alloc *a,
			   const char *name, uint8_t b)
{
	uint64_t shape[1] = {td_alloc_size(a, 0)};
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape};
	struct td_error e = {0};

	memset(td_alloc_data(a, 0), b, (size_t)shape[0]);
	cr_assert_eq(td_client_publish_alloc_nowait(c, a, &p, &e), 0, "%s",
		     e.reason);
}

/*
 * A stream producer that never waits for its PUBLISH replies still gets
 * the next loan from each (read at its next td_client_alloc_ex): warm,
 * a handoff to a consumer riding a follow is the PUBLISH alone, no ALLOC,
 * no fd, no mapping; every version carries its own bytes, and
 * td_client_publish_wait() names the version the consumer got last. A
 * lent loan lost with the reply would show as an ALLOC per handoff.
 */
static void nowait_trips(const char *import)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_ring *r = NULL;
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	uint64_t last = 0, before = 0, v = 0;
	int fds = 0, maps = 0;

	counted_start(&d, import, true, "nw/counter", &prod, &cons, &r);
	for (unsigned i = 0; i < 104; i++) {
		if (i == 4) {
			fds = tu_fd_count();
			maps = tu_buf_map_count();
			before = tc_daemon_requests(prod, "nw/counter");
		}
		publish_nowait(prod, loan(prod, 16 * KIB, TD_ALLOC_STREAM),
			       "nw/x", (uint8_t)(i + 1));
		cr_assert_eq(td_client_get_newer(cons, "nw/x", last, -1, &t,
						 &e),
			     0, "%s", e.reason);
		cr_assert(all_bytes(td_tensor_plane_data(t, 0), 16 * KIB,
				    (uint8_t)(i + 1)),
			  "handoff %u", i);
		last = td_tensor_version(t);
		td_tensor_release(t);
	}
	/* the PUBLISHes and the RING_STAT that reads the count */
	cr_assert_eq(tc_daemon_requests(prod, "nw/counter") - before, 101);
	cr_assert_eq(tu_fd_count(), fds);
	cr_assert_eq(tu_buf_map_count(), maps);
	cr_assert_eq(td_client_publish_wait(prod, &v, &e), 0, "%s", e.reason);
	cr_assert_eq(v, last);
	td_ring_close(r);
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

Test(recycle, a_stream_published_without_waiting_is_one_request_pidfd)
{
	nowait_trips("pidfd");
}

Test(recycle, a_stream_published_without_waiting_is_one_request_scm)
{
	nowait_trips("scm");
}

/*
 * A daemon, a pidfd client of it and a ring of that name in *r: a
 * PUBLISH of the name is refused (-EEXIST); its RING_STAT counts the
 * daemon's requests (tc_daemon_requests).
 */
static struct td_client *ring_named(struct tu_daemon *d, const char *name,
				    struct td_ring **r)
{
	uint64_t size = 64;
	struct td_ring_desc desc = {.dtype = TD_TENSOR_U8, .ndim = 1,
				    .shape = &size};
	struct td_error e = {0};
	struct td_client *c;

	tu_daemon_start(d, "warn");
	c = conn(d, "pidfd");
	cr_assert_eq(td_ring_create(c, name, &desc, r, &e), 0, "%s",
		     e.reason);
	return c;
}

/*
 * A PUBLISH the daemon refuses (a ring has the name) fails the next
 * producing call, once, with the daemon's reason; nothing else is lost:
 * the call after works. Here the reply is read by a STAT in between
 * (set aside while it waits for its own), and the failure waits for the
 * alloc all the same.
 */
Test(recycle, a_refused_publish_sent_without_waiting_fails_the_next_call)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r = NULL;
	struct td_alloc *a = NULL;
	struct td_entry ent = {0};
	struct td_error e = {0};
	uint64_t size = 64, v = 1;

	c = ring_named(&d, "nw/ring", &r);
	publish_nowait(c, loan(c, 4 * KIB, TD_ALLOC_STREAM), "nw/ring", 1);
	cr_assert_eq(td_client_stat(c, "nw/ring", &ent, &e), 0, "%s",
		     e.reason);
	td_entry_fini(&ent);
	cr_assert_eq(td_client_alloc_ex(c, 1, &size, TD_ALLOC_STREAM, &a, &e),
		     -EEXIST);
	cr_assert_null(a);
	cr_assert(strstr(e.reason, "without waiting") &&
		  strstr(e.reason, "ring"), "%s", e.reason);
	/* returned once: the rest goes on */
	cr_assert_eq(td_client_publish_wait(c, &v, &e), 0, "%s", e.reason);
	cr_assert_eq(v, 0, "no PUBLISH without waiting got through");
	publish_nowait(c, loan(c, 4 * KIB, TD_ALLOC_STREAM), "nw/plain", 7);
	cr_assert_eq(td_client_publish_wait(c, &v, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_stat(c, "nw/plain", &ent, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(ent.version, v);
	td_entry_fini(&ent);
	td_ring_close(r);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* The daemon's end, without tu_daemon_stop's clean-exit check. */
static void daemon_kill(struct tu_daemon *d)
{
	cr_assert_eq(kill(d->pid, SIGKILL), 0);
	cr_assert_eq(waitpid(d->pid, NULL, 0), d->pid);
	unlink(d->sock);
	rmdir(d->dir);
}

/*
 * The reply a STAT set aside is the answer: the daemon may be gone
 * afterwards and td_client_publish_wait() still has the version.
 */
Test(recycle, a_publish_answer_read_by_another_call_is_kept)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_entry ent = {0};
	struct td_error e = {0};
	uint64_t v = 0;

	tu_daemon_start(&d, "warn");
	c = conn(&d, "pidfd");
	publish_nowait(c, loan(c, 4 * KIB, TD_ALLOC_STREAM), "nw/kept", 3);
	cr_assert_eq(td_client_stat(c, "nw/kept", &ent, &e), 0, "%s",
		     e.reason);
	daemon_kill(&d);
	cr_assert_eq(td_client_publish_wait(c, &v, &e), 0, "%s", e.reason);
	cr_assert_eq(v, ent.version);
	td_entry_fini(&ent);
	td_client_close(c);
	cr_assert_eq(tu_fd_count(), d.fds0);
	cr_assert_eq(tu_buf_map_count(), d.bufmaps0);
}

/*
 * A daemon that ends before it answers (stopped, then killed, so it
 * never read the request): the next call says so, the loan kept for
 * the answer is freed (no fd, no mapping left).
 */
Test(recycle, a_publish_the_daemon_never_answered_is_reported_and_freed)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_alloc *a;
	struct td_error e = {0};
	uint64_t v = 0;

	tu_daemon_start(&d, "warn");
	c = conn(&d, "pidfd");
	a = loan(c, 4 * KIB, TD_ALLOC_STREAM);
	cr_assert_eq(kill(d.pid, SIGSTOP), 0);
	publish_nowait(c, a, "nw/lost", 5);
	daemon_kill(&d);
	cr_assert_lt(td_client_publish_wait(c, &v, &e), 0);
	cr_assert(strstr(e.reason, "may or may not"), "%s", e.reason);
	/* once */
	cr_assert_eq(td_client_publish_wait(c, &v, &e), 0, "%s", e.reason);
	td_client_close(c);
	cr_assert_eq(tu_fd_count(), d.fds0);
	cr_assert_eq(tu_buf_map_count(), d.bufmaps0);
}

/*
 * A child of fork() shares the socket: its alloc must not read the
 * parent's answer (-ECHILD before the socket is touched). Were the
 * child to take it, the parent's wait would never end: the timeout
 * fails the test then.
 */
Test(recycle, a_child_of_fork_leaves_the_parents_publish_answer, .timeout = 60)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_alloc *a;
	struct td_entry ent = {0};
	struct td_error e = {0};
	uint64_t v = 0, size = 64;
	int st;
	pid_t pid;

	tu_daemon_start(&d, "warn");
	c = conn(&d, "pidfd");
	a = loan(c, 4 * KIB, TD_ALLOC_STREAM);
	cr_assert_eq(kill(d.pid, SIGSTOP), 0);
	publish_nowait(c, a, "nw/forked", 9);
	pid = tu_fork();
	if (pid == 0) {
		struct td_alloc *b = NULL;

		kill(d.pid, SIGCONT);
		_exit(td_client_alloc_ex(c, 1, &size, TD_ALLOC_STREAM, &b,
					 NULL) == -ECHILD
			      ? 0
			      : 1);
	}
	st = tu_wait_child(pid, TU_WAIT_S, "the child of fork()");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %#x", st);
	cr_assert_eq(kill(d.pid, SIGCONT), 0);
	cr_assert_eq(td_client_publish_wait(c, &v, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_stat(c, "nw/forked", &ent, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(ent.version, v);
	td_entry_fini(&ent);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/*
 * The version td_client_publish_wait() gives is the last PUBLISH sent
 * without waiting's: after one the daemon refused (its failure returned
 * by the alloc that read it), 0, not the version an earlier one made.
 */
Test(recycle, a_refused_publish_sent_without_waiting_has_no_version)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r = NULL;
	struct td_alloc *a = NULL;
	struct td_error e = {0};
	uint64_t size = 64, v = 0;

	c = ring_named(&d, "nw/ring", &r);
	publish_nowait(c, loan(c, 4 * KIB, TD_ALLOC_STREAM), "nw/made", 1);
	cr_assert_eq(td_client_publish_wait(c, &v, &e), 0, "%s", e.reason);
	cr_assert_neq(v, 0);
	publish_nowait(c, loan(c, 4 * KIB, TD_ALLOC_STREAM), "nw/ring", 2);
	cr_assert_eq(td_client_alloc_ex(c, 1, &size, 0, &a, &e), -EEXIST);
	cr_assert_eq(td_client_publish_wait(c, &v, &e), 0, "%s", e.reason);
	cr_assert_eq(v, 0, "the refused PUBLISH made no version, got %llu",
		     (unsigned long long)v);
	td_ring_close(r);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/*
 * td_client_trim() while a PUBLISH sent without waiting is unanswered
 * must leave the loan buffers that PUBLISH told the daemon are held
 * here: its reply lends them back without an fd. Were they dropped, the
 * lent loan could not be taken and every tensor would cost an ALLOC
 * (and fds and mappings) again.
 */
Test(recycle, a_trim_before_the_publish_answer_keeps_the_lent_loan)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r = NULL;
	struct td_error e = {0};
	uint64_t before = 0, v = 0;
	int fds = 0, maps = 0;

	c = ring_named(&d, "nw/counter", &r);
	for (unsigned i = 0; i < 24; i++) {
		if (i == 4) {
			fds = tu_fd_count();
			maps = tu_buf_map_count();
			before = tc_daemon_requests(c, "nw/counter");
		}
		publish_nowait(c, loan(c, 16 * KIB, TD_ALLOC_STREAM), "nw/t",
			       (uint8_t)(i + 1));
		td_client_trim(c);
	}
	/* the PUBLISHes and the RING_STAT that reads the count */
	cr_assert_eq(tc_daemon_requests(c, "nw/counter") - before, 21);
	cr_assert_eq(tu_fd_count(), fds);
	cr_assert_eq(tu_buf_map_count(), maps);
	cr_assert_eq(td_client_publish_wait(c, &v, &e), 0, "%s", e.reason);
	td_ring_close(r);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/*
 * TD_CLIENT_RECONNECT: the daemon goes before it answers a PUBLISH sent
 * without waiting, and a STAT notices. After the restart the next
 * producing call, here the PUBLISH of a loan the old daemon made, is the
 * one that says so (the loan consumed); the alloc after it works on the
 * new connection, and nothing of the lost loans is left.
 */
Test(recycle, a_publish_answer_lost_to_a_reconnect_fails_the_first_call_only)
{
	char link[64];
	struct tu_daemon d1, d2;
	struct td_client *c;
	struct td_alloc *a, *b;
	struct td_entry ent = {0};
	struct td_error e = {0};
	uint64_t shape[1] = {4 * KIB}, v = 0;
	struct td_publish p = {.name = "nw/again", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape};
	int fds0 = tu_fd_count(), bufmaps0 = tu_buf_map_count();

	snprintf(link, sizeof(link), "/tmp/td-nw-reconnect-%d.sock",
		 (int)getpid());
	tu_daemon_start(&d1, "warn");
	tu_link_to(link, d1.sock);
	cr_assert_eq(setenv("TENSORD_IMPORT", "pidfd", 1), 0);
	cr_assert_eq(td_client_connect_ex(link, TD_CLIENT_RECONNECT, &c, &e),
		     0, "%s", e.reason);
	a = loan(c, 4 * KIB, TD_ALLOC_STREAM);
	b = loan(c, 4 * KIB, TD_ALLOC_STREAM);
	cr_assert_eq(kill(d1.pid, SIGSTOP), 0);
	publish_nowait(c, a, "nw/again", 1);
	daemon_kill(&d1);
	cr_assert_lt(td_client_stat(c, "nw/again", &ent, NULL), 0);
	tu_daemon_start(&d2, "warn");
	tu_link_to(link, d2.sock);
	cr_assert_lt(td_client_publish_alloc_nowait(c, b, &p, &e), 0);
	cr_assert(strstr(e.reason, "may or may not"), "%s", e.reason);
	/* said once: the rest goes on */
	publish_nowait(c, loan(c, 4 * KIB, TD_ALLOC_STREAM), "nw/again", 2);
	cr_assert_eq(td_client_publish_wait(c, &v, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_stat(c, "nw/again", &ent, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(ent.version, v);
	td_entry_fini(&ent);
	td_client_close(c);
	daemon_kill(&d2);
	unlink(link);
	cr_assert_eq(tu_fd_count(), fds0);
	cr_assert_eq(tu_buf_map_count(), bufmaps0);
}

/*
 * TD_CLIENT_RECONNECT: the loan the last PUBLISH reply lent named an
 * alloc of the old daemon. After the restart the next stream alloc must
 * ask the new daemon, not hand that one out (its PUBLISH would fail with
 * -ECONNRESET); nothing is left to give back either.
 */
Test(recycle, a_lent_loan_of_the_old_daemon_is_not_handed_out_after_a_reconnect)
{
	char link[64];
	struct tu_daemon d1, d2;
	struct td_client *c;
	struct td_entry ent = {0};
	struct td_error e = {0};
	int fds0 = tu_fd_count(), bufmaps0 = tu_buf_map_count();

	snprintf(link, sizeof(link), "/tmp/td-nl-reconnect-%d.sock",
		 (int)getpid());
	tu_daemon_start(&d1, "warn");
	tu_link_to(link, d1.sock);
	cr_assert_eq(setenv("TENSORD_IMPORT", "pidfd", 1), 0);
	cr_assert_eq(td_client_connect_ex(link, TD_CLIENT_RECONNECT, &c, &e),
		     0, "%s", e.reason);
	/* two versions: the second PUBLISH lends the first one's buffer */
	publish(c, loan(c, 4 * KIB, TD_ALLOC_STREAM), "nl/x", 1);
	publish(c, loan(c, 4 * KIB, TD_ALLOC_STREAM), "nl/x", 2);
	daemon_kill(&d1);
	tu_daemon_start(&d2, "warn");
	tu_link_to(link, d2.sock);
	/* the STAT notices the old connection is gone and makes a new one */
	cr_assert_lt(td_client_stat(c, "nl/x", &ent, NULL), 0);
	cr_assert_eq(publish(c, loan(c, 4 * KIB, TD_ALLOC_STREAM), "nl/x", 3),
		     1, "the new daemon's first version");
	td_client_close(c);
	daemon_kill(&d2);
	unlink(link);
	cr_assert_eq(tu_fd_count(), fds0);
	cr_assert_eq(tu_buf_map_count(), bufmaps0);
}

/*
 * The refusal of the parent's PUBLISH, read (by a STAT) before fork()
 * and not returned yet, is the parent's: the child's alloc fails with
 * -ECHILD, as every call of the child on that connection, and the
 * parent's next producing call still gets it.
 */
Test(recycle, a_child_of_fork_is_not_given_the_parents_publish_failure)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *r = NULL;
	struct td_alloc *a = NULL;
	struct td_entry ent = {0};
	struct td_error e = {0};
	uint64_t size = 64;
	int st;
	pid_t pid;

	c = ring_named(&d, "nw/ring", &r);
	publish_nowait(c, loan(c, 4 * KIB, TD_ALLOC_STREAM), "nw/ring", 1);
	cr_assert_eq(td_client_stat(c, "nw/ring", &ent, &e), 0, "%s",
		     e.reason);
	td_entry_fini(&ent);
	pid = tu_fork();
	if (pid == 0) {
		struct td_alloc *b = NULL;

		_exit(td_client_alloc_ex(c, 1, &size, TD_ALLOC_STREAM, &b,
					 NULL) == -ECHILD
			      ? 0
			      : 1);
	}
	st = tu_wait_child(pid, TU_WAIT_S, "the child of fork()");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %#x", st);
	cr_assert_eq(td_client_alloc_ex(c, 1, &size, TD_ALLOC_STREAM, &a, &e),
		     -EEXIST, "%s", e.reason);
	td_ring_close(r);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* This client's allocs as the daemon counts them (STATUS). */
static uint32_t daemon_allocs(struct td_client *c)
{
	struct td_status *st = NULL;
	struct td_error e = {0};
	uint32_t n = UINT32_MAX;

	cr_assert_eq(td_client_status(c, &st, &e), 0, "%s", e.reason);
	for (size_t i = 0; i < st->client_count; i++)
		if (st->clients[i].pid == (uint32_t)getpid())
			n = st->clients[i].allocs;
	td_status_free(st);
	cr_assert_neq(n, UINT32_MAX, "this client is not in STATUS");
	return n;
}

/*
 * A lent loan the client could not take (the buffer it was lent by id
 * left its loan cache in between: here the cache's eviction, as the
 * publish's own buffer goes idle) is to be given back by the next
 * ALLOC. A PUBLISH in between must not ask for another: the daemon
 * keeps one lent loan per connection, so the first would stay an
 * unpublished alloc until the connection ends, and the give-back would
 * then return the second, which the client may be writing into.
 */
Test(recycle, a_loan_not_taken_is_given_back_before_another_is_asked_for)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_alloc *a, *b, *x;
	char name[16];

	tu_daemon_start(&d, "warn");
	c = conn(&d, "pidfd");
	/* a full loan cache, ev/0's buffer the oldest */
	for (unsigned i = 0; i < 16; i++) {
		snprintf(name, sizeof(name), "ev/%u", i);
		publish(c, loan(c, 4 * KIB, TD_ALLOC_RECYCLE), name,
			(uint8_t)i);
	}
	a = loan(c, 4 * KIB, TD_ALLOC_STREAM);
	b = loan(c, 4 * KIB, TD_ALLOC_STREAM);
	/* ev/0's buffer goes to the free list: what the next PUBLISH lends,
	 * by id, as the client says it maps it */
	cr_assert_eq(td_client_delete(c, "ev/0", NULL, NULL), 0);
	publish(c, a, "ev/a", 1); /* a's buffer idle: ev/0's evicted */
	cr_assert_eq(daemon_allocs(c), 2, "b and the loan not taken");
	publish(c, b, "ev/b", 2);
	x = loan(c, 4 * KIB, TD_ALLOC_STREAM);
	cr_assert_eq(daemon_allocs(c), 1,
		     "the loan not taken was given back: only x is left");
	td_alloc_free(x);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/*
 * An alloc the client gives up unpublished (td_alloc_free, or a publish
 * of it that fails) is given back (RELEASE TD_WIRE_REL_ALLOC): the
 * daemon used to keep it, counted against the connection's 64, until
 * the connection ended, so a long-lived producer that ever dropped 64
 * allocs could alloc nothing more (-ENOBUFS).
 */
Test(recycle, allocs_given_up_unpublished_are_given_back, .timeout = 60)
{
	static const uint32_t kinds[] = {0, TD_ALLOC_RECYCLE,
					 TD_ALLOC_STREAM, TD_ALLOC_REWRITE};
	uint64_t shape[2] = {64, 128};
	struct td_publish bad = {.name = "gb/bad", .dtype = TD_TENSOR_U8,
				 .ndim = 2, .shape = shape};
	struct tu_daemon d;
	struct td_client *c;
	struct td_error e = {0};

	tu_daemon_start(&d, "warn");
	c = conn(&d, "pidfd");
	for (unsigned k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		for (unsigned i = 0; i < 100; i++)
			td_alloc_free(loan(c, 4 * KIB, kinds[k]));
		cr_assert_eq(daemon_allocs(c), 0, "kind %u", k);
	}
	/* a publish refused (8 KiB of shape in a 4 KiB plane) */
	for (unsigned i = 0; i < 100; i++)
		cr_assert_lt(td_client_publish_alloc(c, loan(c, 4 * KIB, 0),
						     &bad, NULL, &e),
			     0);
	cr_assert_eq(daemon_allocs(c), 0);
	/* and the connection allocs and publishes as ever */
	cr_assert_gt(publish(c, loan(c, 4 * KIB, TD_ALLOC_STREAM), "gb/x", 7),
		     0);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* The daemon's side: only this connection's unpublished allocs. */
Test(recycle, a_given_back_alloc_is_this_connections_and_unpublished)
{
	struct td_wire_alloc_req q = {.flags = TD_WIRE_REQ_SCM,
				      .plane_count = 1, .sizes = {4 * KIB}};
	struct td_wire_release_req rel = {.flags = TD_WIRE_REL_ALLOC};
	struct tu_daemon d;
	struct rawrep r;
	int a, b;

	tu_daemon_start(&d, "warn");
	a = raw_scm_conn(&d);
	b = raw_scm_conn(&d);
	rel.lease_id = raw_alloc_req(a, 2, &q);
	/* another connection cannot give it up */
	cr_assert_eq(raw_call(b, TD_OP_RELEASE, 2,
			      td_wire_release_req_encode(&rel, RAW_BODY,
							 RAW_CAP),
			      &r),
		     -ENOENT);
	/* its own can, once */
	cr_assert_eq(raw_call(a, TD_OP_RELEASE, 3,
			      td_wire_release_req_encode(&rel, RAW_BODY,
							 RAW_CAP),
			      &r),
		     0);
	cr_assert_eq(raw_call(a, TD_OP_RELEASE, 4,
			      td_wire_release_req_encode(&rel, RAW_BODY,
							 RAW_CAP),
			      &r),
		     -ENOENT);
	close(a);
	close(b);
	tu_daemon_stop(&d, true);
}

/* ---- rewriting the latest version (TD_ALLOC_REWRITE) ---- */

/*
 * Clients of d whose TD_ALLOC_REWRITE applies at every size and fill
 * time (the defaults, 8 MiB and 200 us between alloc and publish, would
 * make these tests map 8 MiB buffers and sleep for nothing).
 */
static struct td_client *rw_conn(const struct tu_daemon *d,
				 const char *import)
{
	struct td_client *c;

	cr_assert_eq(setenv("TENSORD_REWRITE_MIN", "0", 1), 0);
	cr_assert_eq(setenv("TENSORD_REWRITE_FILL_US", "0", 1), 0);
	c = conn(d, import);
	unsetenv("TENSORD_REWRITE_MIN");
	unsetenv("TENSORD_REWRITE_FILL_US");
	return c;
}

/* name's current version by STAT, or the STAT's -errno. */
static int64_t current_of(struct td_client *c, const char *name)
{
	struct td_entry ent = {0};
	struct td_error e = {0};
	int rc = td_client_stat(c, name, &ent, &e);
	int64_t v = rc < 0 ? rc : (int64_t)ent.version;

	if (rc == 0)
		td_entry_fini(&ent);
	return v;
}

static void rewrite_takes_back(const char *import)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_alloc *a1, *a2;
	struct td_tensor *t;
	struct td_error e = {0};
	const void *seen;
	void *addr1;
	uint64_t v1, v2;
	int fd1, fds, maps, rc;

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = rw_conn(&d, import);
	cons = conn(&d, import);

	a1 = loan(prod, 64 * KIB, TD_ALLOC_REWRITE);
	addr1 = td_alloc_data(a1, 0);
	fd1 = td_alloc_fd(a1, 0);
	v1 = publish(prod, a1, "rw/x", 1);
	t = get(cons, "rw/x");
	seen = td_tensor_plane_data(t, 0);
	cr_assert(all_bytes(seen, 64 * KIB, 1));
	td_tensor_release(t);

	/* nobody holds v1: the next loan is v1's own buffer, no new fd,
	 * no new mapping, and v1 is no longer current */
	fds = tu_fd_count();
	maps = tu_buf_map_count();
	a2 = loan(prod, 64 * KIB, TD_ALLOC_REWRITE);
	cr_assert_eq(td_alloc_fd(a2, 0), fd1);
	cr_assert_eq(td_alloc_data(a2, 0), addr1);
	cr_assert_eq(tu_fd_count(), fds);
	cr_assert_eq(tu_buf_map_count(), maps);
	cr_assert_eq(current_of(cons, "rw/x"), -ENOENT);
	cr_assert_eq(td_client_get_version(cons, "rw/x", v1, &t, &e),
		     -ENOENT);
	/* a GET of the name waits for the next version, as for a ring
	 * being rewritten: here nothing comes within its second */
	e = (struct td_error){0};
	rc = td_client_get(cons, "rw/x", &t, &e);
	cr_assert_eq(rc, -ETIMEDOUT, "%d %s", rc, e.reason);
	cr_assert(strstr(e.reason, "started rewriting"), "%s", e.reason);

	v2 = publish(prod, a2, "rw/x", 2);
	cr_assert_gt(v2, v1);
	cr_assert_eq(current_of(cons, "rw/x"), (int64_t)v2);
	/* the consumer's cached mapping of the same buffer */
	t = get(cons, "rw/x");
	cr_assert_eq(td_tensor_plane_data(t, 0), seen);
	cr_assert(all_bytes(seen, 64 * KIB, 2));
	td_tensor_release(t);

	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

Test(recycle, a_rewrite_takes_back_the_latest_version_pidfd, .timeout = 30)
{
	rewrite_takes_back("pidfd");
}

Test(recycle, a_rewrite_takes_back_the_latest_version_scm, .timeout = 30)
{
	rewrite_takes_back("scm");
}

/*
 * Nor before the producer spent $TENSORD_REWRITE_FILL_US (default
 * 200 us) between the alloc and the publish of its last such loan: a
 * producer that does not fill its tensors gains nothing. Here 100 ms,
 * so that "at once" stays at once on a loaded machine under ASan (CI
 * once took more than 200 us between a loan and its publish).
 */
Test(recycle, a_rewrite_waits_for_a_producer_that_fills_its_tensors)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_alloc *a;
	uint64_t v;
	int fd_a, fd_b;

	tu_daemon_start_args(&d, "warn", small_cap);
	cr_assert_eq(setenv("TENSORD_REWRITE_MIN", "0", 1), 0);
	cr_assert_eq(setenv("TENSORD_REWRITE_FILL_US", "100000", 1), 0);
	prod = conn(&d, "pidfd");
	unsetenv("TENSORD_REWRITE_MIN");
	unsetenv("TENSORD_REWRITE_FILL_US");
	cons = conn(&d, "pidfd");
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	fd_a = td_alloc_fd(a, 0);
	publish(prod, a, "rw/x", 1);
	/* filled at once: not taken back (v1 unleased, but nothing asks),
	 * a new buffer */
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	fd_b = td_alloc_fd(a, 0);
	cr_assert_neq(fd_b, fd_a);
	/* filled at once: the PUBLISH lends v1's buffer, the next alloc
	 * takes it with no message, and v2 stays current */
	v = publish(prod, a, "rw/x", 2);
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	cr_assert_eq(td_alloc_fd(a, 0), fd_a, "the lent loan");
	cr_assert_eq(current_of(cons, "rw/x"), (int64_t)v);
	/* held well past 100 ms before its publish: the next alloc asks
	 * for the take-back, and gets the buffer it just published */
	usleep(150000);
	publish(prod, a, "rw/x", 3);
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	cr_assert_eq(td_alloc_fd(a, 0), fd_a, "taken back");
	cr_assert_eq(current_of(cons, "rw/x"), -ENOENT);
	td_alloc_free(a);
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

/*
 * A producer of two names in turn, each loan TD_ALLOC_REWRITE and named:
 * the daemon takes back only the version this connection published last,
 * of the other name here, so asking it for the take-back was refused at
 * every loan, an ALLOC round trip each, whose buffers came from the free
 * list or new (8 MiB over four names: 8x the time of one name,
 * bench/README.md). The library asks it only for the name it published
 * last; otherwise each name's loan is the one its last PUBLISH lent: two
 * ALLOCs per name at the start, whatever the rounds.
 */
Test(recycle, a_rewrite_loan_of_another_name_is_its_lent_loan)
{
	enum { ROUNDS = 20 };
	const char *names[2] = {"rw/a", "rw/b"};
	char http[96], addr[110];
	const char *args[] = {"--max-bytes", "64M", "--http", addr, NULL};
	struct tu_daemon d;
	struct td_client *prod;
	struct td_alloc *a;
	struct td_error e = {0};
	uint64_t size = 16 * KIB;
	unsigned long long allocs;

	snprintf(http, sizeof(http), "/tmp/td-rw-http-%d", (int)getpid());
	tu_tmp_note(http);
	snprintf(addr, sizeof(addr), "unix:%s", http);
	tu_daemon_start_args(&d, "warn", args);
	prod = rw_conn(&d, "pidfd");
	for (int r = 0; r < ROUNDS; r++)
		for (int i = 0; i < 2; i++) {
			cr_assert_eq(td_client_alloc_named(prod, names[i], 1,
							   &size,
							   TD_ALLOC_REWRITE,
							   &a, &e),
				     0, "%s", e.reason);
			publish(prod, a, names[i], (uint8_t)r);
		}
	allocs = tu_metric_unix(http, "tensord_requests_total{op=\"ALLOC\","
				      "result=\"ok\"}");
	/* two a name at the start (a PUBLISH lends a free buffer: the
	 * first version's, once the second replaced it), none after */
	cr_assert_leq(allocs, 4, "%llu ALLOCs for %d loans of 2 names",
		      allocs, 2 * ROUNDS);
	/* the same name again: its last version is taken back */
	cr_assert_eq(td_client_alloc_named(prod, "rw/b", 1, &size,
					   TD_ALLOC_REWRITE, &a, &e),
		     0, "%s", e.reason);
	cr_assert_eq(current_of(prod, "rw/b"), -ENOENT, "not taken back");
	td_alloc_free(a);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
	unlink(http);
}

static uint64_t clients_of(const struct td_status *st)
{
	return st->client_count;
}

/*
 * A child that GETs within a rewrite's second: connected before the
 * take-back (a fork and a connect are no part of that second on a loaded
 * machine), it says so on ready and GETs when it hears go.
 */
struct rw_getter {
	int ready[2], go[2];
	uint64_t version; /* the one its GET must get */
};

static pid_t rw_getter_start(const struct tu_daemon *d, child_fn fn,
			     struct rw_getter *g)
{
	pid_t pid;
	char b;

	cr_assert_eq(pipe2(g->ready, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(g->go, O_CLOEXEC), 0);
	pid = spawn(d, fn, g);
	close(g->ready[1]);
	close(g->go[0]);
	cr_assert_eq(read(g->ready[0], &b, 1), 1, "the child died");
	return pid;
}

/* After the take-back: the child's GET goes now. */
static void rw_getter_go(struct rw_getter *g)
{
	char b = 1;

	cr_assert_eq(write(g->go[1], &b, 1), 1);
	close(g->go[1]);
	close(g->ready[0]);
}

static struct td_client *rw_getter_ready(const struct tu_daemon *d,
					 struct rw_getter *g)
{
	struct td_client *c = open_client(d);

	say(g->ready[1]);
	hear(g->go[0]);
	return c;
}

/* A child's GET of rw/x: the byte 9 of version g->version. */
static void parked_get_child(const struct tu_daemon *d, void *arg)
{
	struct rw_getter *g = arg;
	struct td_client *c = rw_getter_ready(d, g);
	struct td_tensor *t = NULL;
	struct td_error e = {0};

	CK_EQ(td_client_get(c, "rw/x", &t, &e), 0);
	CK_EQ(td_tensor_version(t), g->version);
	CK_EQ(*(const uint8_t *)td_tensor_plane_data(t, 0), 9);
	td_tensor_release(t);
	td_client_close(c);
}

/* A GET during the rewrite is answered by the publish that ends it. */
Test(recycle, a_get_during_a_rewrite_gets_the_next_version, .timeout = 30)
{
	struct tu_daemon d;
	struct td_client *prod;
	struct td_alloc *a;
	struct rw_getter g;
	uint64_t v1;
	pid_t child;

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = rw_conn(&d, "pidfd");
	v1 = publish(prod, loan(prod, 16 * KIB, TD_ALLOC_REWRITE), "rw/x", 1);
	g.version = v1 + 1; /* the daemon numbers versions in publish order */
	child = rw_getter_start(&d, parked_get_child, &g);
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	cr_assert_eq(current_of(prod, "rw/x"), -ENOENT, "taken back");
	rw_getter_go(&g);
	/* the child's GET is parked in the daemon before the publish */
	cr_assert_eq(tc_status_until(prod, tc_waiters, 1), 1);
	cr_assert_eq(publish(prod, a, "rw/x", 9), g.version);
	cr_assert_eq(reap(child), 0);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

/* A child's GET of rw/x answered -ENOENT by the end of the rewrite. */
static void abandoned_get_child(const struct tu_daemon *d, void *arg)
{
	struct td_client *c = rw_getter_ready(d, arg);
	struct td_tensor *t = NULL;
	struct td_error e = {0};

	CK_EQ(td_client_get(c, "rw/x", &t, &e), -ENOENT);
	CK(strstr(e.reason, "stopped rewriting it without a publish"));
	td_client_close(c);
}

/* A GET parked on a rewrite that ends without a publish (the loan is
 * dropped, the producer's next REWRITE alloc) is answered then. */
Test(recycle, a_get_parked_on_an_abandoned_rewrite_is_answered, .timeout = 30)
{
	struct tu_daemon d;
	struct td_client *prod;
	struct td_alloc *a;
	struct rw_getter g;
	pid_t child;

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = rw_conn(&d, "pidfd");
	publish(prod, loan(prod, 16 * KIB, TD_ALLOC_REWRITE), "rw/x", 1);
	child = rw_getter_start(&d, abandoned_get_child, &g);
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	/* a GET that would wait up to the rewrite's second: its end
	 * answers it at once, as the GET would have been without it */
	rw_getter_go(&g);
	cr_assert_eq(tc_status_until(prod, tc_waiters, 1), 1);
	td_alloc_free(a);
	a = loan(prod, 32 * KIB, TD_ALLOC_REWRITE);
	cr_assert_eq(reap(child), 0);
	td_alloc_free(a);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

/*
 * What keeps a version from being taken back: a lease, a follower's
 * hold, and a version that is not this connection's latest any more
 * (another producer replaced it). Each time the loan is another buffer
 * and the current version stays readable with its bytes.
 */
Test(recycle, a_held_or_replaced_version_is_not_rewritten)
{
	struct tu_daemon d;
	struct td_client *prod, *other, *cons;
	struct td_follow *f = NULL;
	struct td_alloc *a;
	struct td_tensor *t;
	struct td_error e = {0};
	uint64_t v;
	int fd1;

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = rw_conn(&d, "pidfd");
	other = conn(&d, "pidfd");
	cons = conn(&d, "scm");

	/* leased */
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	fd1 = td_alloc_fd(a, 0);
	v = publish(prod, a, "rw/x", 1);
	t = get(cons, "rw/x");
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	cr_assert_neq(td_alloc_fd(a, 0), fd1);
	cr_assert_eq(current_of(cons, "rw/x"), (int64_t)v);
	memset(td_alloc_data(a, 0), 5, 16 * KIB);
	cr_assert(all_bytes(td_tensor_plane_data(t, 0), 16 * KIB, 1));
	td_tensor_release(t);

	/* held by a follower's row (no lease) */
	fd1 = td_alloc_fd(a, 0);
	v = publish(prod, a, "rw/x", 2);
	cr_assert_eq(td_client_follow(cons, "rw/x", &f, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_follow_next(f, 5000, &t, &e), 0, "%s", e.reason);
	cr_assert_eq(td_tensor_version(t), v);
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	cr_assert_neq(td_alloc_fd(a, 0), fd1);
	cr_assert_eq(current_of(cons, "rw/x"), (int64_t)v);
	memset(td_alloc_data(a, 0), 6, 16 * KIB);
	cr_assert(all_bytes(td_tensor_plane_data(t, 0), 16 * KIB, 2));
	td_tensor_release(t);
	td_follow_close(f);

	/* replaced by another connection's version: that one stays */
	publish(prod, a, "rw/x", 3);
	v = publish(other, loan(other, 16 * KIB, TD_ALLOC_RECYCLE), "rw/x",
		    4);
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	cr_assert_eq(current_of(cons, "rw/x"), (int64_t)v);
	t = get(cons, "rw/x");
	cr_assert(all_bytes(td_tensor_plane_data(t, 0), 16 * KIB, 4));
	td_tensor_release(t);
	td_alloc_free(a);

	td_client_close(cons);
	td_client_close(other);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

/*
 * A rewrite ends with its connection, or when its alloc is dropped and
 * the next REWRITE alloc comes: a GET then answers at once (the name
 * has no version until the producer publishes one again) instead of
 * waiting for a publish that will not come.
 */
Test(recycle, a_rewrite_ends_with_its_producer, .timeout = 30)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_alloc *a;
	struct td_tensor *t = NULL;
	struct td_error e = {0};

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = rw_conn(&d, "pidfd");
	cons = conn(&d, "pidfd");
	publish(prod, loan(prod, 16 * KIB, TD_ALLOC_REWRITE), "rw/x", 1);
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	cr_assert_eq(current_of(cons, "rw/x"), -ENOENT);
	td_alloc_free(a);
	/* another alloc: the dropped one's rewrite is over */
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	cr_assert_eq(td_client_get(cons, "rw/x", &t, &e), -ENOENT, "%s",
		     e.reason);
	publish(prod, a, "rw/x", 2);
	t = get(cons, "rw/x");
	cr_assert(all_bytes(td_tensor_plane_data(t, 0), 16 * KIB, 2));
	td_tensor_release(t);

	/* taken back, then the producer goes */
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	cr_assert_eq(current_of(cons, "rw/x"), -ENOENT);
	td_alloc_free(a);
	td_client_close(prod);
	/* the daemon reads the hang-up on another socket than the GET */
	cr_assert_eq(tc_status_until(cons, clients_of, 1), 1);
	e = (struct td_error){0};
	cr_assert_eq(td_client_get(cons, "rw/x", &t, &e), -ENOENT, "%s",
		     e.reason);
	td_client_close(cons);
	tu_daemon_stop(&d, true);
}

/* The next event of w: type and version, of name. */
static void event_is(struct td_client *w, uint32_t type, const char *name,
		     uint64_t version)
{
	struct td_event ev;
	struct td_error e = {0};

	cr_assert_eq(td_client_next_event(w, 5000, &ev, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(ev.type, type, "%s version %llu: event %u", ev.name,
		     (unsigned long long)ev.version, ev.type);
	cr_assert_str_eq(ev.name, name);
	cr_assert_eq(ev.version, version);
}

/*
 * A take-back tells watchers nothing: the next version is on its way.
 * When it does not come (the producer publishes the loan under another
 * name, drops it, or goes), the version taken back was deleted, and the
 * watchers hear so - else they would believe it current for ever.
 */
Test(recycle, a_rewrite_that_ends_unpublished_is_a_delete, .timeout = 30)
{
	struct tu_daemon d;
	struct td_client *prod, *w;
	struct td_alloc *a;
	uint64_t id, v1, v2, v3;

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = rw_conn(&d, "pidfd");
	w = conn(&d, "pidfd");
	cr_assert_eq(td_client_watch(w, "rw/", TD_WATCH_PREFIX, &id, NULL),
		     0);

	/* taken back and published again: only PUBLISHED events */
	v1 = publish(prod, loan(prod, 16 * KIB, TD_ALLOC_REWRITE), "rw/x", 1);
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	v2 = publish(prod, a, "rw/x", 2);
	event_is(w, TD_EVENT_TYPE_PUBLISHED, "rw/x", v1);
	event_is(w, TD_EVENT_TYPE_PUBLISHED, "rw/x", v2);

	/* taken back, published under another name */
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	v3 = publish(prod, a, "rw/y", 3);
	event_is(w, TD_EVENT_TYPE_DELETED, "rw/x", v2);
	event_is(w, TD_EVENT_TYPE_PUBLISHED, "rw/y", v3);

	/* taken back, given up: the name ends */
	td_alloc_free(loan(prod, 16 * KIB, TD_ALLOC_REWRITE));
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	event_is(w, TD_EVENT_TYPE_DELETED, "rw/y", v3);
	v1 = publish(prod, a, "rw/x", 4);
	event_is(w, TD_EVENT_TYPE_PUBLISHED, "rw/x", v1);

	/* taken back, then another producer's version and its delete,
	 * then given up: the name's end is that one's, told once */
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	v2 = publish(w, loan(w, 16 * KIB, TD_ALLOC_RECYCLE), "rw/x", 5);
	cr_assert_eq(td_client_delete(w, "rw/x", NULL, NULL), 0);
	td_alloc_free(a);
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	v3 = publish(prod, a, "rw/z", 6);
	event_is(w, TD_EVENT_TYPE_PUBLISHED, "rw/x", v2);
	event_is(w, TD_EVENT_TYPE_DELETED, "rw/x", v2);
	event_is(w, TD_EVENT_TYPE_PUBLISHED, "rw/z", v3);

	/* taken back, then the producer goes */
	td_alloc_free(loan(prod, 16 * KIB, TD_ALLOC_REWRITE));
	td_client_close(prod);
	event_is(w, TD_EVENT_TYPE_DELETED, "rw/z", v3);

	td_client_close(w);
	tu_daemon_stop(&d, true);
}

/*
 * A REWRITE loan kept unpublished on a connection that stays and makes
 * no other REWRITE alloc holds its name up no longer than a ring's
 * rewrite (a second). After that a GET of the name answers as for any
 * name with no version instead of waiting a second for a publish that
 * is not coming. One given up (td_alloc_free tells the daemon) holds it
 * up not at all.
 */
Test(recycle, a_dropped_rewrite_holds_its_name_a_second_at_most,
     .timeout = 30)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_tensor *t = NULL;
	struct td_alloc *a;
	struct td_error e = {0};
	int rc;

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = rw_conn(&d, "pidfd");
	cons = conn(&d, "pidfd");
	publish(prod, loan(prod, 16 * KIB, TD_ALLOC_REWRITE), "rw/x", 1);
	a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
	cr_assert_eq(current_of(cons, "rw/x"), -ENOENT);
	/* within the second: the GET waits for the publish (none comes) */
	rc = td_client_get(cons, "rw/x", &t, &e);
	cr_assert_eq(rc, -ETIMEDOUT, "%d %s", rc, e.reason);
	/* that GET took the second: the name is not being rewritten now */
	usleep(100 * 1000);
	e = (struct td_error){0};
	rc = td_client_get(cons, "rw/x", &t, &e);
	cr_assert_eq(rc, -ENOENT, "%d %s", rc, e.reason);
	td_alloc_free(a);
	/* given up at once: no wait at all */
	publish(prod, loan(prod, 16 * KIB, TD_ALLOC_REWRITE), "rw/x", 2);
	td_alloc_free(loan(prod, 16 * KIB, TD_ALLOC_REWRITE));
	e = (struct td_error){0};
	rc = td_client_get(cons, "rw/x", &t, &e);
	cr_assert_eq(rc, -ENOENT, "%d %s", rc, e.reason);
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

/* prod's TD_ALLOC_REWRITE loans of size are a stream's: the next one is
 * another buffer, and the version published stays current. */
static void rewrite_is_a_stream(struct td_client *prod,
				struct td_client *cons, uint64_t size)
{
	struct td_alloc *a = loan(prod, size, TD_ALLOC_REWRITE);
	int fd1 = td_alloc_fd(a, 0);
	uint64_t v = publish(prod, a, "rw/x", 1);

	a = loan(prod, size, TD_ALLOC_REWRITE);
	cr_assert_neq(td_alloc_fd(a, 0), fd1);
	cr_assert_eq(current_of(cons, "rw/x"), (int64_t)v);
	td_alloc_free(a);
}

/* Against a daemon whose HELLO predates the flag: a stream loan. */
Test(recycle, a_rewrite_of_an_older_daemon_is_a_stream_loan)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;

	tu_daemon_start_args(&d, "warn", small_cap);
	prod = rw_conn(&d, "pidfd");
	cons = conn(&d, "pidfd");
	prod->hello.features &= ~TD_WIRE_FEAT_REWRITE;
	rewrite_is_a_stream(prod, cons, 16 * KIB);
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

/* Below $TENSORD_REWRITE_MIN the flag is TD_ALLOC_STREAM. */
Test(recycle, a_rewrite_below_its_floor_is_a_stream_loan)
{
	struct tu_daemon d;
	struct td_client *prod, *cons;
	struct td_alloc *a;
	int fd1;

	tu_daemon_start_args(&d, "warn", small_cap);
	cr_assert_eq(setenv("TENSORD_REWRITE_MIN", "65536", 1), 0);
	cr_assert_eq(setenv("TENSORD_REWRITE_FILL_US", "0", 1), 0);
	prod = conn(&d, "pidfd");
	unsetenv("TENSORD_REWRITE_MIN");
	unsetenv("TENSORD_REWRITE_FILL_US");
	cons = conn(&d, "pidfd");
	rewrite_is_a_stream(prod, cons, 16 * KIB);
	/* at the floor it rewrites */
	a = loan(prod, 64 * KIB, TD_ALLOC_REWRITE);
	fd1 = td_alloc_fd(a, 0);
	publish(prod, a, "rw/y", 1);
	a = loan(prod, 64 * KIB, TD_ALLOC_REWRITE);
	cr_assert_eq(td_alloc_fd(a, 0), fd1);
	cr_assert_eq(current_of(cons, "rw/y"), -ENOENT);
	td_alloc_free(a);
	td_client_close(cons);
	td_client_close(prod);
	tu_daemon_stop(&d, true);
}

/* ---- no per-handoff allocation in the daemon ---- */

/*
 * The daemon runs under tests/malloc-count.c (LD_PRELOAD), which counts
 * every heap call of the process - ours, libuv's and glibc's - into a
 * file mapping this test reads. ASan replaces malloc itself, so the shim
 * cannot be loaded there: these tests are not built into a sanitized
 * binary at all (rather than skipped, which is kept for missing kernel
 * features); the plain build, CI's first stage, runs them.
 */
#ifndef __SANITIZE_ADDRESS__
struct heap {
	volatile struct td_malloc_counts *n;
	char path[32];
};

static uint64_t heap_allocs(const struct heap *h)
{
	return h->n->malloc + h->n->calloc + h->n->realloc + h->n->memalign;
}

static void heap_daemon_start(struct tu_daemon *d, struct heap *h)
{
	const char *shim = getenv("TD_MALLOC_COUNT");

	cr_assert(shim, "TD_MALLOC_COUNT is not set (run through meson test)");
	snprintf(h->path, sizeof(h->path), "/tmp/td-heap-XXXXXX");
	h->n = tu_counts_map(h->path);
	/* only the daemon's environment: it is exec'ed with ours */
	cr_assert_eq(setenv("LD_PRELOAD", shim, 1), 0);
	cr_assert_eq(setenv("TD_MALLOC_COUNT_FILE", h->path, 1), 0);
	tu_daemon_start_args(d, "warn", small_cap);
	unsetenv("LD_PRELOAD");
	unsetenv("TD_MALLOC_COUNT_FILE");
	/* the shim is loaded and counting (start-up allocates) */
	cr_assert_gt(heap_allocs(h), 0, "the daemon ran without the shim");
}

static void heap_daemon_stop(struct tu_daemon *d, struct heap *h)
{
	uint64_t allocs = heap_allocs(h), frees = h->n->free;

	tu_daemon_stop(d, false);
	/* and it counted the exit too: everything freed went through it */
	cr_assert_gt(h->n->free, frees);
	cr_log_info("daemon heap calls: %llu allocations, %llu frees at "
		    "exit", (unsigned long long)allocs,
		    (unsigned long long)h->n->free);
	munmap((void *)h->n, 4096);
	unlink(h->path);
}

/* loans named for heap/x (staged publishes, when followed) */
static bool heap_named;

/* n handoffs: ALLOC, write, PUBLISH; GET (or, with f, the follow's
 * next), read, RELEASE. */
static void handoffs(struct td_client *prod, struct td_client *cons,
		     struct td_follow *f, unsigned n, uint32_t flags)
{
	for (unsigned i = 0; i < n; i++) {
		uint8_t b = (uint8_t)(i * 7 + 1);
		struct td_error e = {0};
		struct td_tensor *t = NULL;
		uint64_t size = 16 * KIB;
		struct td_alloc *a = NULL;

		if (heap_named)
			cr_assert_eq(td_client_alloc_named(prod, "heap/x", 1,
							   &size, flags, &a,
							   &e),
				     0, "%s", e.reason);
		else
			a = loan(prod, size, flags);
		publish(prod, a, "heap/x", b);
		if (f)
			cr_assert_eq(td_follow_next(f, 5000, &t, &e), 0, "%s",
				     e.reason);
		else
			t = get(cons, "heap/x");
		cr_assert(all_bytes(td_tensor_plane_data(t, 0), 16 * KIB, b));
		/* a stream's consumer does not wait for RELEASE */
		if (flags & TD_ALLOC_STREAM)
			td_tensor_release_nowait(t);
		else
			td_tensor_release(t);
	}
}

/*
 * Warm up with 100 handoffs (every record kind reaches its working
 * count, every table its capacity), then 1000 more must not make the
 * daemon call malloc, calloc, realloc, memalign or free once. The window
 * is clean because each of those handoffs is a fixed sequence of four
 * requests whose records (alloc, version, free-list entry, lease) come
 * from the store's spare lists, whose tables (names, buffer ids, uid
 * accounting) stay at the size the warm-up gave them, and whose replies
 * go out at once: libuv allocates nothing for a poll handle that only
 * toggles between the same events (uv__io_start grows its watcher array
 * only for a new fd), and the daemon's outgoing queue (peer.c txmsg, a
 * malloc per queued reply) is used only when a client does not read its
 * replies, which these clients always do before the next request. The
 * counts are read after a reply, so the daemon is idle in epoll_wait.
 */
static void no_heap_calls_as(const char *producer, const char *consumer,
			     uint32_t flags, bool follow)
{
	struct tu_daemon d;
	struct heap h;
	struct td_client *prod, *cons;
	struct td_follow *f = NULL;
	struct td_error e = {0};
	uint64_t allocs, frees;

	heap_daemon_start(&d, &h);
	prod = conn(&d, producer);
	cons = conn(&d, consumer);
	if (follow)
		cr_assert_eq(td_client_follow(cons, "heap/x", &f, &e), 0,
			     "%s", e.reason);
	handoffs(prod, cons, f, 100, flags);
	allocs = heap_allocs(&h);
	frees = h.n->free;
	handoffs(prod, cons, f, 1000, flags);
	cr_assert_eq(heap_allocs(&h) - allocs, 0,
		     "%llu heap allocations in 1000 warm handoffs",
		     (unsigned long long)(heap_allocs(&h) - allocs));
	cr_assert_eq(h.n->free - frees, 0,
		     "%llu frees in 1000 warm handoffs",
		     (unsigned long long)(h.n->free - frees));
	/* a named followed stream is staged: a stream's next loan by the
	 * PUBLISH (the producer has a stage now), a take-back by its ALLOC */
	if ((flags & TD_ALLOC_REWRITE) && heap_named && follow) {
		struct td_alloc *a = NULL;
		uint64_t size = 16 * KIB;

		cr_assert_eq(td_client_alloc_named(prod, "heap/x", 1, &size,
						   flags, &a, &e),
			     0, "%s", e.reason);
		cr_assert_neq(prod->st_alloc, 0u, "the take-back not staged");
		td_alloc_free(a);
	} else {
		cr_assert_eq(!!prod->st_alloc, heap_named && follow);
	}
	td_follow_close(f);
	td_client_close(cons);
	td_client_close(prod);
	heap_daemon_stop(&d, &h);
}

static void no_heap_calls(const char *producer, const char *consumer,
			  uint32_t flags)
{
	no_heap_calls_as(producer, consumer, flags, false);
}

Test(recycle, the_daemon_allocates_nothing_per_recycled_handoff_pidfd)
{
	no_heap_calls("pidfd", "pidfd", TD_ALLOC_RECYCLE);
}

Test(recycle, the_daemon_allocates_nothing_per_recycled_handoff_scm)
{
	no_heap_calls("scm", "scm", TD_ALLOC_RECYCLE);
}

Test(recycle, the_daemon_allocates_nothing_per_stream_handoff_pidfd)
{
	no_heap_calls("pidfd", "pidfd", TD_ALLOC_STREAM);
}

Test(recycle, the_daemon_allocates_nothing_per_stream_handoff_scm)
{
	no_heap_calls("scm", "scm", TD_ALLOC_STREAM);
}

Test(recycle, the_daemon_allocates_nothing_per_plain_handoff)
{
	no_heap_calls("pidfd", "pidfd", 0);
}

/*
 * Rewriting (TD_ALLOC_REWRITE, every size): each ALLOC takes the version
 * before back (the waiting RELEASE ended its lease first), so the
 * withdrawal from the names, the bell and the free list run 1000 times.
 */
Test(recycle, the_daemon_allocates_nothing_per_rewrite_handoff)
{
	struct td_client *prod;
	struct td_alloc *a;
	int fd;

	cr_assert_eq(setenv("TENSORD_REWRITE_MIN", "0", 1), 0);
	cr_assert_eq(setenv("TENSORD_REWRITE_FILL_US", "0", 1), 0);
	no_heap_calls("pidfd", "scm", TD_ALLOC_REWRITE);
	/* and it rewrote: the same buffer twice in a row */
	{
		struct tu_daemon d;

		tu_daemon_start_args(&d, "warn", small_cap);
		prod = conn(&d, "pidfd");
		unsetenv("TENSORD_REWRITE_MIN");
		unsetenv("TENSORD_REWRITE_FILL_US");
		a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
		fd = td_alloc_fd(a, 0);
		publish(prod, a, "heap/x", 1);
		a = loan(prod, 16 * KIB, TD_ALLOC_REWRITE);
		cr_assert_eq(td_alloc_fd(a, 0), fd);
		td_alloc_free(a);
		td_client_close(prod);
		tu_daemon_stop(&d, true);
	}
}

/* A follower's handoff (docs/fastpath.md, "Following a name"): the
 * bell's entry, latest, the row scan, all in memory made at FOLLOW. */
Test(recycle, the_daemon_allocates_nothing_per_followed_handoff)
{
	no_heap_calls_as("pidfd", "scm", TD_ALLOC_STREAM, true);
}

/* Staged (docs/fastpath.md, "A followed publish without the daemon's
 * hop"): each handoff stages the next loan (a version record from the
 * spare list, the bell's entry) and commits it at the notice. */
Test(recycle, the_daemon_allocates_nothing_per_staged_handoff)
{
	heap_named = true;
	no_heap_calls_as("pidfd", "pidfd", TD_ALLOC_STREAM, true);
}

/* A staged take-back (a followed name's TD_ALLOC_REWRITE, every size):
 * each ALLOC takes the version back and stages its buffers (a version
 * record from the spare list, the descriptor copied, the bell's entry),
 * and the notice commits it. */
Test(recycle, the_daemon_allocates_nothing_per_staged_take_back)
{
	cr_assert_eq(setenv("TENSORD_REWRITE_MIN", "0", 1), 0);
	cr_assert_eq(setenv("TENSORD_REWRITE_FILL_US", "0", 1), 0);
	heap_named = true;
	no_heap_calls_as("pidfd", "pidfd", TD_ALLOC_REWRITE, true);
}

/* A trainer's loop of td_client_get_many_newer(), in a thread: each
 * call parks on "heap/a" until the next step, checks the pair's bytes
 * and releases it. */
struct step_loop {
	unsigned steps;
	unsigned done;
	struct td_error e;
	/* closed by the test once it has read the counts: a connection's
	 * end frees its records */
	struct td_client *c;
};

static void *step_loop(void *arg)
{
	static const char *const names[2] = {"heap/a", "heap/b"};
	struct step_loop *s = arg;
	struct td_client *c = s->c;
	uint64_t after = 0;

	for (; s->done < s->steps; s->done++) {
		struct td_tensor *t[2] = {0};
		uint8_t b = (uint8_t)(s->done * 7 + 1);

		if (td_client_get_many_newer(c, 2, names, after, 10000, t,
					     &s->e) < 0)
			break;
		after = td_tensor_version(t[0]);
		if (!all_bytes(td_tensor_plane_data(t[0], 0), 4 * KIB, b) ||
		    !all_bytes(td_tensor_plane_data(t[1], 0), 4 * KIB, b)) {
			snprintf(s->e.reason, sizeof(s->e.reason),
				 "step %u: the pair is not that step's",
				 s->done);
			td_tensor_release(t[0]);
			td_tensor_release(t[1]);
			break;
		}
		td_tensor_release(t[0]);
		td_tensor_release(t[1]);
	}
	return NULL;
}

/* steps [from, to) of step_loop: each waits until the loop's request is
 * parked in the daemon, then publishes "heap/b" and "heap/a" (the name
 * it waits on last, so the pair is whole when it wakes) */
static void steps(struct td_client *prod, unsigned from, unsigned to)
{
	for (unsigned i = from; i < to; i++) {
		uint8_t b = (uint8_t)(i * 7 + 1);

		cr_assert_eq(tc_status_until(prod, tc_waiters, 1), 1,
			     "step %u: the GET_MANY is not parked", i);
		publish(prod, loan(prod, 4 * KIB, 0), "heap/b", b);
		publish(prod, loan(prod, 4 * KIB, 0), "heap/a", b);
	}
}

/*
 * A GET_MANY that waits for the next step (TD_WIRE_MANY_NEWER) parks
 * with a copy of its request. The copy comes from a spare kept by its
 * capacity (struct td__body): warm, a step is a park, two publishes and
 * a wake-up, and the daemon calls the heap for none of them (it did one
 * malloc and one free per park before). STATUS, which the test polls to
 * see the request parked, is answered from static tables.
 */
Test(recycle, the_daemon_allocates_nothing_per_parked_get_many)
{
	struct step_loop s = {.steps = 300};
	struct tu_daemon d;
	struct heap h;
	struct td_client *prod;
	uint64_t allocs, frees;
	pthread_t th;

	heap_daemon_start(&d, &h);
	s.c = conn(&d, "pidfd");
	prod = conn(&d, "pidfd");
	cr_assert_eq(pthread_create(&th, NULL, step_loop, &s), 0);
	steps(prod, 0, 50);
	/* step 50's request parked: the window starts with the daemon idle */
	cr_assert_eq(tc_status_until(prod, tc_waiters, 1), 1);
	allocs = heap_allocs(&h);
	frees = h.n->free;
	steps(prod, 50, s.steps);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(s.done, s.steps, "%s", s.e.reason);
	cr_assert_eq(heap_allocs(&h) - allocs, 0,
		     "%llu heap allocations in 250 warm parked steps",
		     (unsigned long long)(heap_allocs(&h) - allocs));
	cr_assert_eq(h.n->free - frees, 0, "%llu frees in 250 warm steps",
		     (unsigned long long)(h.n->free - frees));
	td_client_close(s.c);
	td_client_close(prod);
	heap_daemon_stop(&d, &h);
}
#endif /* !__SANITIZE_ADDRESS__ */

/*
 * A process that forks while it fills a loan (a subprocess started from
 * another thread, a worker pool): the child kept a writable shared
 * mapping of the loan until it exec'ed or exited, and the publish's
 * write seal failed meanwhile ("unmap writable mappings before
 * publishing", EBUSY). The loan's mapping is not passed to a child now.
 */
Test(recycle, a_child_of_fork_does_not_hold_up_the_publish_of_a_loan)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_alloc *a, *b;
	struct td_error e = {0};
	int gate[2], st;
	pid_t pid;
	char x;

	tu_daemon_start(&d, "warn");
	cr_assert_eq(td_client_connect(d.sock, &c, &e), 0, "%s", e.reason);
	a = loan(c, 4 * KIB, 0);
	b = loan(c, 4 * KIB, TD_ALLOC_STREAM);
	cr_assert_eq(pipe(gate), 0);
	pid = tu_fork();
	if (pid == 0) {
		/* alive, not exec'ed, until the parent has published */
		close(gate[1]);
		_exit(read(gate[0], &x, 1) == 0 ? 0 : 1);
	}
	close(gate[0]);
	cr_assert_gt(publish(c, a, "fk/plain", 1), 0);
	cr_assert_gt(publish(c, b, "fk/stream", 2), 0);
	close(gate[1]);
	st = tu_wait_child(pid, 30, "the forked child");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: %#x", st);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* ---- a plain loan is write-sealed by its producer ---- */

#define PUBLISH_SEALS (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

/* A daemon serving /metrics at http (dir/http; dir a mkdtemp template). */
static void http_daemon(struct tu_daemon *d, char *dir, char *http)
{
	char arg[112];
	const char *const args[] = {"--http", arg, NULL};

	cr_assert_not_null(tu_mkdtemp(dir));
	snprintf(http, 96, "%s/http", dir);
	snprintf(arg, sizeof(arg), "unix:%s", http);
	tu_daemon_start_args(d, "warn", args);
}

/* PUBLISH and PUBLISH_MANY refusals the daemon has replied (/metrics) */
static unsigned long long publish_errors(const char *http)
{
	return tu_metric_unix(http, "tensord_requests_total{op=\"PUBLISH\","
				    "result=\"error\"}") +
	       tu_metric_unix(http, "tensord_requests_total{op=\"PUBLISH_"
				    "MANY\",result=\"error\"}");
}

/*
 * A plain loan whose page a pipe holds (vmspliced into it, then
 * unmapped): the kernel refuses its write seal (-EBUSY, after waiting
 * for the page inside the call). The seal is the producer's, before its
 * PUBLISH is sent, so the wait is the producer's and the daemon, whose
 * loop used to wait for it, never sees the request: its count of
 * PUBLISH refusals stays. The loans are given up as a refused publish
 * gives them (the daemon told, no fd or mapping kept).
 */
static void held_pages(bool many)
{
	char dir[] = "/tmp/td-held-XXXXXX", http[96];
	const char *names[2] = {"hp/free", "hp/held"};
	uint64_t shape[1] = {4 * KIB}, v[2] = {0};
	struct td_publish p[2];
	struct tu_daemon d;
	struct td_client *c;
	struct td_alloc *a[2];
	struct td_error e = {0};
	unsigned long long refused;
	struct iovec iov;
	int pp[2], rc, fds;

	http_daemon(&d, dir, http);
	c = conn(&d, "auto");
	for (int i = 0; i < 2; i++) {
		a[i] = loan(c, 4 * KIB, 0);
		memset(td_alloc_data(a[i], 0), i + 1, 4 * KIB);
		p[i] = (struct td_publish){.name = names[i],
					   .dtype = TD_TENSOR_U8,
					   .ndim = 1,
					   .shape = shape};
	}
	cr_assert_eq(pipe2(pp, O_CLOEXEC), 0);
	iov = (struct iovec){td_alloc_data(a[1], 0), 4 * KIB};
	cr_assert_eq(vmsplice(pp[1], &iov, 1, 0), 4 * KIB, "vmsplice: %s",
		     strerror(errno));
	refused = publish_errors(http);
	cr_assert_eq(daemon_allocs(c), 2);
	fds = tu_fd_count();
	if (many)
		rc = td_client_publish_many(c, 2, a, p, v, &e);
	else
		rc = td_client_publish_alloc(c, a[1], &p[1], &v[1], &e);
	cr_assert_eq(rc, -EBUSY, "%d: %s", rc, e.reason);
	cr_assert_eq(publish_errors(http), refused,
		     "the daemon was sent the PUBLISH of a loan its "
		     "producer could not seal");
	cr_assert_not_null(strstr(e.reason, many ? "element 1, buffer 0: "
						   "unmap writable mappings"
						 : "buffer 0: unmap writable "
						   "mappings"),
			   "%s", e.reason);
	cr_assert_not_null(strstr(e.reason, "let go of its pages"), "%s",
			   e.reason);
	tc_assert_absent(c, names[1]);
	/* the loans' fds closed, and the daemon keeps none of them */
	cr_assert_eq(tu_fd_count(), fds - (many ? 2 : 1));
	cr_assert_eq(daemon_allocs(c), many ? 0 : 1);
	if (many)
		tc_assert_absent(c, names[0]);
	else
		td_alloc_free(a[0]);
	close(pp[0]);
	close(pp[1]);
	/* the pages let go of: a loan publishes */
	a[1] = loan(c, 4 * KIB, 0);
	cr_assert_eq(td_client_publish_alloc(c, a[1], &p[1], &v[1], &e), 0,
		     "%s", e.reason);
	cr_assert_eq(publish_errors(http), refused);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	unlink(http);
	rmdir(dir);
}

Test(recycle, a_plain_loan_whose_pages_are_held_is_refused_by_its_producer)
{
	held_pages(false);
}

Test(recycle, a_publish_many_of_a_loan_whose_pages_are_held_is_refused_here)
{
	held_pages(true);
}

struct many_arg {
	struct td_client *c;
	struct td_alloc *a;
};

static void *publish_many_thread(void *arg)
{
	struct many_arg *m = arg;
	uint64_t shape[1] = {td_alloc_size(m->a, 0)}, v = 0;
	struct td_publish p = {.name = "ps/many", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = shape};

	return (void *)(intptr_t)td_client_publish_many(m->c, 1, &m->a, &p,
							&v, NULL);
}

/*
 * With the daemon stopped (SIGSTOP), the memfd of a plain loan whose
 * PUBLISH (or PUBLISH_MANY) is sent carries every publish seal: its
 * producer added them (a dup kept here shows them), and the daemon finds
 * them present when it runs again.
 */
Test(recycle, a_plain_loan_is_write_sealed_by_its_producer_before_publish)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_alloc *a;
	struct td_error e = {0};
	struct many_arg m;
	uint64_t v = 0;
	pthread_t th;
	void *ret;
	int fd[2], seals;

	tu_daemon_start(&d, "warn");
	c = conn(&d, "auto");
	a = loan(c, 4 * KIB, 0);
	fd[0] = fcntl(td_alloc_fd(a, 0), F_DUPFD_CLOEXEC, 0);
	cr_assert_geq(fd[0], 0);
	seals = fcntl(fd[0], F_GET_SEALS);
	cr_assert_eq(seals & PUBLISH_SEALS, F_SEAL_SHRINK | F_SEAL_GROW,
		     "a loan is lent size-sealed only (%#x)", seals);
	cr_assert_eq(kill(d.pid, SIGSTOP), 0);
	publish_nowait(c, a, "ps/one", 3);
	seals = fcntl(fd[0], F_GET_SEALS);
	cr_assert_eq(seals & PUBLISH_SEALS, PUBLISH_SEALS,
		     "sent, unsealed (%#x)", seals);

	cr_assert_eq(kill(d.pid, SIGCONT), 0);
	cr_assert_eq(td_client_publish_wait(c, &v, &e), 0, "%s", e.reason);
	cr_assert_gt(v, 0);
	a = loan(c, 4 * KIB, 0);
	memset(td_alloc_data(a, 0), 4, 4 * KIB);
	fd[1] = fcntl(td_alloc_fd(a, 0), F_DUPFD_CLOEXEC, 0);
	cr_assert_geq(fd[1], 0);
	cr_assert_eq(kill(d.pid, SIGSTOP), 0);
	m = (struct many_arg){c, a};
	cr_assert_eq(pthread_create(&th, NULL, publish_many_thread, &m), 0);
	/* a hang guard: the daemon, stopped, cannot be the one */
	for (int i = 0; i < 2000; i++) {
		seals = fcntl(fd[1], F_GET_SEALS);
		if ((seals & PUBLISH_SEALS) == PUBLISH_SEALS)
			break;
		usleep(5000);
	}
	cr_assert_eq(kill(d.pid, SIGCONT), 0);
	cr_assert_eq(pthread_join(th, &ret), 0);
	cr_assert_eq((intptr_t)ret, 0, "PUBLISH_MANY: %d", (int)(intptr_t)ret);
	cr_assert_eq(seals & PUBLISH_SEALS, PUBLISH_SEALS,
		     "PUBLISH_MANY sent, unsealed (%#x)", seals);
	close(fd[0]);
	close(fd[1]);
	td_client_close(c);
	/* fds checked; of the mappings the buffers' (glibc keeps the
	 * thread's stack for the next thread) */
	tu_daemon_stop(&d, false);
	cr_assert_eq(tu_buf_map_count(), d.bufmaps0);
}

/*
 * $TENSORD_SEAL=daemon (read at connect): the library leaves a plain
 * loan's write seal to the daemon, as older libraries did. Sent with the
 * daemon stopped, the loan carries its size seals only; the daemon then
 * seals it off its loop (counted) and the version is published.
 */
Test(recycle, a_plain_loan_left_to_the_daemon_is_sealed_off_its_loop)
{
	char dir[] = "/tmp/td-sealdm-XXXXXX", http[96];
	struct tu_daemon d;
	struct td_client *c;
	struct td_alloc *a;
	struct td_error e = {0};
	uint64_t v = 0;
	int fd, seals;

	http_daemon(&d, dir, http);
	cr_assert_eq(setenv("TENSORD_SEAL", "daemon", 1), 0);
	c = conn(&d, "auto");
	cr_assert_eq(unsetenv("TENSORD_SEAL"), 0);
	a = loan(c, 4 * KIB, 0);
	fd = fcntl(td_alloc_fd(a, 0), F_DUPFD_CLOEXEC, 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(kill(d.pid, SIGSTOP), 0);
	publish_nowait(c, a, "ps/daemon", 5);
	seals = fcntl(fd, F_GET_SEALS);
	cr_assert_eq(seals & PUBLISH_SEALS, F_SEAL_SHRINK | F_SEAL_GROW,
		     "sent, sealed by the library (%#x)", seals);
	cr_assert_eq(kill(d.pid, SIGCONT), 0);
	cr_assert_eq(td_client_publish_wait(c, &v, &e), 0, "%s", e.reason);
	cr_assert_gt(v, 0);
	seals = fcntl(fd, F_GET_SEALS);
	cr_assert_eq(seals & PUBLISH_SEALS, PUBLISH_SEALS,
		     "published, unsealed (%#x)", seals);
	cr_assert_eq(tu_metric_unix(http, "tensord_seals_off_loop_total"), 1);
	close(fd);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	unlink(http);
	rmdir(dir);
}
