/* SPDX-License-Identifier: MIT */
/*
 * dma-buf planes with a DRM format modifier (blob spec §6.1: "an
 * unrecognised non-zero modifier must be refused, never read as
 * linear"). A producer publishes one with TD_PUBLISH_MODIFIERS; a GPU
 * consumer reads it with td_tensor_plane_modifier() to import it; no CPU
 * reader (tensorctl save/get --format npy/zarr export, the daemon's HTTP
 * Zarr store) takes its tiled bytes for rows.
 *
 * This machine has no dma-buf exporter (/dev/udmabuf), so the whole suite
 * runs under tests/fake-dmabuf.c (LD_PRELOAD, set by tests/meson.build
 * for this suite only): memfds named "td-fake-dmabuf..." are dma-bufs to
 * this process, the daemon and tensorctl alike. Each test first checks
 * the shim took (the daemon and this process see a dma-buf), so that a
 * test run without it fails instead of passing on memfds.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tensord/tensord.h>

#include "policyfile.h"
#include "testutil.h"

#define SIDE 64
#define LEN (SIDE * SIDE)
/* I915_FORMAT_MOD_X_TILED (drm_fourcc.h): a real tiled layout's code */
#define X_TILED 0x0100000000000001ull

static struct tu_daemon d;
static char http_sock[100];
static struct td_error e_;

static void start(void)
{
	char addr[160];
	const char *args[] = {"--http", addr, "--http-prefix", "", NULL};

	cr_assert(getenv("TD_FAKE_DMABUF"),
	          "TD_FAKE_DMABUF is not set (run through meson test, which "
	          "preloads tests/fake-dmabuf.c for this suite)");
	snprintf(http_sock, sizeof(http_sock), "/tmp/td-dmabuf-%d.http",
	         (int)getpid());
	unlink(http_sock);
	snprintf(addr, sizeof(addr), "unix:%s", http_sock);
	tu_daemon_start_args(&d, "warn", args);
}

static void stop(void)
{
	tu_daemon_stop(&d, true);
	unlink(http_sock);
}

static struct td_client *client(void)
{
	struct td_client *c = NULL;

	cr_assert_eq(td_client_connect(d.sock, &c, &e_), 0, "%s", e_.reason);
	return c;
}

/* A fake dma-buf of LEN bytes, byte i = i * 7 + seed. */
static int fake_dmabuf(uint8_t seed)
{
	int fd = memfd_create("td-fake-dmabuf", MFD_ALLOW_SEALING |
	                                                MFD_CLOEXEC);
	uint8_t *p;

	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, LEN), 0);
	p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert_neq(p, MAP_FAILED);
	for (unsigned i = 0; i < LEN; i++)
		p[i] = (uint8_t)(i * 7 + seed);
	munmap(p, LEN);
	cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
	return fd;
}

/* Publish a SIDE x SIDE u8 image on a fake dma-buf as name, its one
 * plane with modifier mod (0: linear, without TD_PUBLISH_MODIFIERS). */
static void publish(struct td_client *c, const char *name, uint64_t mod,
                    uint8_t seed)
{
	uint64_t shape[2] = {SIDE, SIDE};
	int fd = fake_dmabuf(seed);
	struct td_publish p = {.name = name,
	                       .dtype = TD_TENSOR_U8,
	                       .ndim = 2,
	                       .shape = shape,
	                       .fd_count = 1,
	                       .fds = &fd,
	                       .flags = mod ? TD_PUBLISH_MODIFIERS : 0,
	                       .modifiers = mod ? &mod : NULL};

	cr_assert_eq(td_client_publish(c, &p, NULL, &e_), 0, "%s: %s", name,
	             e_.reason);
	close(fd);
}

/* One HTTP request over the store's unix socket: the status code, and
 * the body's first byte into *first (when there is one). */
static int http_get(const char *path, int *first)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timeval tv = {TU_WAIT_S, 0};
	char req[256], resp[LEN + 1024];
	size_t len = 0;
	ssize_t r;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), code = 0;
	const char *body;

	cr_assert_geq(fd, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", http_sock);
	cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)),
	             0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0,
	             "%s: %s", http_sock, strerror(errno));
	snprintf(req, sizeof(req),
	         "GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
	         path);
	cr_assert_eq(send(fd, req, strlen(req), MSG_NOSIGNAL),
	             (ssize_t)strlen(req));
	while (len < sizeof(resp) - 1 &&
	       (r = recv(fd, resp + len, sizeof(resp) - 1 - len, 0)) > 0)
		len += (size_t)r;
	close(fd);
	resp[len] = 0;
	cr_assert_eq(sscanf(resp, "HTTP/1.1 %d", &code), 1, "%s", resp);
	body = strstr(resp, "\r\n\r\n");
	*first = body && body + 4 < resp + len ? (uint8_t)body[4] : -1;
	return code;
}

Test(dmabuf, a_tiled_plane_reaches_a_consumer_with_its_modifier,
     .init = start, .fini = stop)
{
	struct td_client *c = client();
	struct td_tensor *t;
	const char *why = NULL;

	publish(c, "lin", 0, 1);
	publish(c, "tiled", X_TILED, 2);

	cr_assert_eq(td_client_get(c, "lin", &t, &e_), 0, "%s", e_.reason);
	/* the shim took: this process sees a dma-buf (so does the daemon,
	 * or it had refused the storage kind the blob says) */
	cr_assert_eq(td_tensor_plane_kind(t, 0), TD_PLANE_DMABUF);
	cr_assert_eq(td_tensor_plane_modifier(t, 0), 0);
	cr_assert_eq(td_tensor_linear(t, &why), 0);
	td_tensor_release(t);

	cr_assert_eq(td_client_get(c, "tiled", &t, &e_), 0, "%s", e_.reason);
	cr_assert_eq(td_tensor_plane_kind(t, 0), TD_PLANE_DMABUF);
	cr_assert_eq(td_tensor_plane_modifier(t, 0), X_TILED);
	cr_assert_eq(td_tensor_plane_modifier(t, 1), 0, "out of range: 0");
	cr_assert_eq(td_tensor_linear(t, &why), -ENOTSUP);
	cr_assert(why && strstr(why, "DRM format modifier"), "%s", why);
	/* its fd goes to the consumer's GPU import as it is */
	cr_assert_geq(td_tensor_plane_fd(t, 0), 0);
	td_tensor_release(t);
	td_client_close(c);
}

Test(dmabuf, no_cpu_reader_reads_a_tiled_plane_as_rows, .init = start,
     .fini = stop)
{
	static const char *const cmds[][6] = {
	        {"save", "-o", "OUT.hrry", "NAME", NULL},
	        {"save", "-o", "OUT.tgm", "NAME", NULL},
	        {"get", "NAME", "--format", "npy", "-o", "OUT.npy"},
	        {"zarr", "export", "OUT.zarr", "NAME", NULL},
	};
	struct td_client *c = client();
	char out[160], arg[6][160];
	char *text;
	int first;

	publish(c, "lin", 0, 1);
	publish(c, "tiled", X_TILED, 2);
	for (size_t k = 0; k < sizeof(cmds) / sizeof(cmds[0]); k++) {
		for (int which = 0; which < 2; which++) {
			const char *name = which ? "tiled" : "lin";
			const char *a[7] = {0};
			int rc;

			for (int i = 0; i < 6 && cmds[k][i]; i++) {
				snprintf(arg[i], sizeof(arg[i]), "%s",
				         cmds[k][i]);
				if (!strcmp(arg[i], "NAME"))
					snprintf(arg[i], sizeof(arg[i]), "%s",
					         name);
				else if (!strncmp(arg[i], "OUT", 3))
					snprintf(arg[i], sizeof(arg[i]),
					         "%s/%s%s", d.dir, name,
					         cmds[k][i] + 3);
				a[i] = arg[i];
			}
			snprintf(out, sizeof(out), "%s", a[2]);
			rc = tu_tensorctl(&d, &text, a[0], a[1], a[2], a[3],
			                  a[4], a[5], NULL);
			if (!which) {
				/* the same command on the linear one works:
				 * what refuses the tiled one is its modifier */
				cr_expect_eq(rc, 0, "%s lin: %s", a[0], text);
			} else {
				cr_expect_neq(rc, 0, "%s tiled: %s", a[0],
				              text);
				cr_expect(strstr(text, "tiled") &&
				                  strstr(text, "DRM format "
				                               "modifier"),
				          "%s tiled: %s", a[0], text);
			}
			free(text);
		}
	}
	/* get --json tells the plane's kind and modifier */
	cr_expect_eq(tu_tensorctl(&d, &text, "--json", "get", "tiled", "-o",
	                          "/dev/null", NULL),
	             0, "%s", text);
	cr_expect(strstr(text, "\"kind\":\"dma-buf\",\"modifier\":"
	                       "72057594037927937}"),
	          "%s", text);
	free(text);
	/* the HTTP store serves the linear one and not the tiled one */
	cr_expect_eq(http_get("/zarr/lin/zarr.json", &first), 200);
	cr_expect_eq(http_get("/zarr/lin/c/0/0", &first), 200);
	cr_expect_eq(first, 1, "byte 0 of lin");
	cr_expect_eq(http_get("/zarr/tiled/zarr.json", &first), 404);
	cr_expect_eq(http_get("/zarr/tiled/c/0/0", &first), 404);
	td_client_close(c);
}

/* A one-buffer loan of LEN bytes (a publish consumes it, either way). */
static struct td_alloc *loan(struct td_client *c)
{
	uint64_t size = LEN;
	struct td_alloc *a = NULL;

	cr_assert_eq(td_client_alloc(c, 1, &size, &a, &e_), 0, "%s",
	             e_.reason);
	return a;
}

Test(dmabuf, a_memfd_plane_cannot_carry_a_modifier, .init = start,
     .fini = stop)
{
	struct td_client *c = client();
	uint64_t shape[1] = {LEN}, mod = X_TILED;
	struct td_publish p = {.name = "m",
	                       .dtype = TD_TENSOR_U8,
	                       .ndim = 1,
	                       .shape = shape,
	                       .flags = TD_PUBLISH_MODIFIERS};

	/* the flag without its array */
	cr_assert_eq(td_client_publish_alloc(c, loan(c), &p, NULL, &e_),
	             -EINVAL);
	cr_assert(strstr(e_.reason, "without modifiers"), "%s", e_.reason);
	/* a modifier reaches the daemon, which refuses it on a memfd */
	p.modifiers = &mod;
	cr_assert_eq(td_client_publish_alloc(c, loan(c), &p, NULL, &e_),
	             -EINVAL);
	cr_assert(strstr(e_.reason, "a memfd plane is linear"), "%s",
	          e_.reason);
	/* a zero one is linear: published */
	mod = 0;
	cr_assert_eq(td_client_publish_alloc(c, loan(c), &p, NULL, &e_), 0,
	             "%s", e_.reason);
	td_client_close(c);
}

#define NOBODY 65534u

/*
 * As uid NOBODY: publish a fake dma-buf as name (dmabuf) or a memfd loan
 * (!dmabuf) and write the status and reason to out.
 */
static void publish_as_nobody(const char *sock, const char *name,
                              bool dmabuf, int out)
{
	uint64_t shape[1] = {LEN}, size = LEN;
	struct td_client *c = NULL;
	struct td_alloc *a = NULL;
	struct td_error e = {0};
	int rc, fd = -1;

	if (tu_become(NOBODY, NOBODY) < 0)
		_exit(10);
	if (td_client_connect(sock, &c, &e) < 0)
		_exit(11);
	struct td_publish p = {.name = name,
	                       .dtype = TD_TENSOR_U8,
	                       .ndim = 1,
	                       .shape = shape,
	                       .fd_count = 1,
	                       .fds = &fd};
	if (dmabuf) {
		fd = memfd_create("td-fake-dmabuf", MFD_ALLOW_SEALING |
		                                            MFD_CLOEXEC);
		if (fd < 0 || ftruncate(fd, LEN) < 0 ||
		    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0)
			_exit(12);
		rc = td_client_publish(c, &p, NULL, &e);
	} else if ((rc = td_client_alloc(c, 1, &size, &a, &e)) == 0) {
		p.fd_count = 0;
		p.fds = NULL;
		rc = td_client_publish_alloc(c, a, &p, NULL, &e);
	}
	dprintf(out, "%d %s", rc, rc < 0 ? e.reason : "");
	td_client_close(c);
	_exit(0);
}

/* publish_as_nobody() in a child: its status, its reason into why. */
static int nobody_publishes(const char *name, bool dmabuf, char *why,
                            size_t cap)
{
	int pfd[2], rc = 0;
	ssize_t n;

	cr_assert_eq(pipe2(pfd, O_CLOEXEC), 0);
	pid_t pid = tu_fork();
	if (pid == 0) {
		close(pfd[0]);
		publish_as_nobody(d.sock, name, dmabuf, pfd[1]);
	}
	close(pfd[1]);
	n = read(pfd[0], why, cap - 1);
	close(pfd[0]);
	cr_assert_eq(tu_wait_child(pid, TU_WAIT_S, "the publisher"), 0);
	cr_assert_gt(n, 0, "the publisher said nothing");
	why[n] = 0;
	cr_assert_eq(sscanf(why, "%d", &rc), 1, "%s", why);
	return rc;
}

/*
 * Under a policy, a dma-buf plane (which consumers may be able to map
 * writable: docs/reliability.md, "dma-buf planes") is published only
 * under a prefix the uid has `dmabuf` on; `rw` alone lets it publish
 * memfds there, not dma-bufs. Only the policy's parsing and matching
 * were tested before, never a PUBLISH it refuses.
 */
Test(dmabuf, a_dmabuf_plane_needs_the_policys_dmabuf_permission)
{
	char policy[64], why[512];
	const char *args[] = {"--socket-mode", "0666", "--policy", policy,
	                      NULL};
	struct td_entry en;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another uid");
	tu_policy_file(policy, sizeof(policy), "dmabuf-pol",
	               "allow uid=%u rw cam/\nallow uid=%u dmabuf cam/gpu/\n",
	               NOBODY, NOBODY);
	tu_daemon_start_args(&d, "error", args);
	cr_assert_eq(chmod(d.dir, 0755), 0);
	struct td_client *c = client();

	cr_assert_eq(nobody_publishes("cam/raw", true, why, sizeof(why)),
	             -EACCES, "%s", why);
	cr_assert(strstr(why, "uid 65534 may not publish dma-buf planes as "
	                      "\"cam/raw\""),
	          "%s", why);
	cr_assert_eq(td_client_stat(c, "cam/raw", &en, &e_), -ENOENT);
	/* the same uid and name with a memfd: rw is all it takes */
	cr_assert_eq(nobody_publishes("cam/raw", false, why, sizeof(why)), 0,
	             "%s", why);
	/* and a dma-buf under the prefix it has dmabuf on */
	cr_assert_eq(nobody_publishes("cam/gpu/0", true, why, sizeof(why)),
	             0, "%s", why);
	cr_assert_eq(td_client_stat(c, "cam/gpu/0", &en, &e_), 0, "%s",
	             e_.reason);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	unlink(policy);
}

/*
 * The blob has one storage kind per tensor, so a tensor's buffers are all
 * memfds or all dma-bufs. A mix reached the daemon, whose refusal named
 * a storage_kind the caller never chose ("fd table entry 0 is a memfd
 * but the blob says storage_kind dmabuf"); it is refused before sending,
 * naming both buffers, and nothing is published.
 */
Test(dmabuf, a_tensor_of_memfd_and_dmabuf_buffers_is_refused_saying_so,
     .init = start, .fini = stop)
{
	struct td_client *c = client();
	uint64_t shape[1] = {2 * LEN};
	int mem = memfd_create("plain", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	int dma = fake_dmabuf(1);
	struct td_plane pl[2] = {{.buffer = 0, .size = LEN},
	                         {.buffer = 1, .size = LEN}};
	int fds[2] = {mem, dma};
	struct td_publish p = {.name = "mix",
	                       .dtype = TD_TENSOR_U8,
	                       .ndim = 1,
	                       .shape = shape,
	                       .plane_count = 2,
	                       .planes = pl,
	                       .fd_count = 2,
	                       .fds = fds};
	struct td_entry en;

	cr_assert_geq(mem, 0);
	cr_assert_eq(ftruncate(mem, LEN), 0);
	cr_assert_eq(fcntl(mem, F_ADD_SEALS, F_SEAL_SHRINK), 0);
	for (int order = 0; order < 2; order++) {
		cr_assert_eq(td_client_publish(c, &p, NULL, &e_), -EINVAL);
		cr_assert(strstr(e_.reason, "is a dma-buf but buffer"), "%s",
		          e_.reason);
		cr_assert(strstr(e_.reason, "all memfds or all dma-bufs"),
		          "%s", e_.reason);
		fds[0] = dma;
		fds[1] = mem;
	}
	cr_assert_eq(td_client_stat(c, "mix", &en, &e_), -ENOENT);
	close(mem);
	close(dma);
	td_client_close(c);
}
