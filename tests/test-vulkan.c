/* SPDX-License-Identifier: MIT */
/*
 * The Vulkan examples (examples/vulkan/) against a private daemon, on
 * whatever Vulkan device is there: lavapipe (Mesa's CPU driver) on
 * machines without a GPU. A program exits 77 when no Vulkan driver is
 * installed at all; the tests then skip and say so.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

TestSuite(vulkan, .timeout = TU_TEST_TIMEOUT_S);

#define NO_DRIVER 77

static char *example(const char *name)
{
	static char path[4][4096];
	static int n;
	const char *root = getenv("TD_BUILD_ROOT");
	char *p = path[n++ % 4];

	cr_assert(root, "TD_BUILD_ROOT is set by meson");
	snprintf(p, sizeof(path[0]), "%s/examples/vulkan/example-%s", root,
		 name);
	cr_assert(access(p, X_OK) == 0, "%s is built", p);
	return p;
}

static void daemon_up(struct tu_daemon *d)
{
	tu_daemon_start(d, "warn");
	cr_assert(setenv("TENSORD_SOCKET", d->sock, 1) == 0);
}

/* Run argv, stdout and stderr into *out; skip when there is no driver. */
static int run(struct tu_daemon *d, char **argv, char **out)
{
	int rc = tu_run_capture_all(argv, out);

	if (rc == NO_DRIVER) {
		tu_daemon_stop(d, true);
		cr_skip_test("no Vulkan driver on this machine (install "
			     "mesa-vulkan-drivers for lavapipe): %s", *out);
	}
	return rc;
}

/* The consumer imported the mapped plane itself: the two pointers agree. */
static void assert_same_pages(const char *out)
{
	const char *at = strstr(out, "imported ");
	void *imp = NULL, *map = NULL;

	cr_assert(at, "%s", out);
	cr_assert_eq(sscanf(at, "imported %p == mapped plane %p", &imp, &map),
		     2, "%s", out);
	cr_assert_eq(imp, map, "%s", out);
}

Test(vulkan, the_consumer_shader_reduces_what_the_producer_shader_wrote)
{
	struct tu_daemon d;
	char *out;

	daemon_up(&d);
	char *prod[] = {example("vk-producer"), "gpu/t", "3", "1048576", NULL};
	cr_assert_eq(run(&d, prod, &out), 0, "%s", out);
	cr_assert(strstr(out, "published gpu/t version 3 frame 2"), "%s", out);
	free(out);
	/* GPU result == CPU reduction of the same pages == the formula */
	char *cons[] = {example("vk-consumer"), "gpu/t", "2", "2000", NULL};
	cr_assert_eq(run(&d, cons, &out), 0, "%s", out);
	cr_assert(strstr(out, "gpu/t version 3 frame 2 on "), "%s", out);
	cr_assert(strstr(out, ": match\n"), "%s", out);
	assert_same_pages(out);
	free(out);
	tu_daemon_stop(&d, true);
}

/*
 * A tensor the consumer cannot import is refused with a reason, not a
 * crash: a u32 tensor of no elements (with a frame's metadata, as a
 * careless producer makes it) has no mapping, and importing its NULL,
 * zero-byte plane made lavapipe crash (SIGSEGV in vkAllocateMemory).
 */
Test(vulkan, a_consumer_given_an_empty_tensor_says_so)
{
	struct tu_daemon d;
	char *out;

	daemon_up(&d);
	cr_assert_eq(tu_tensorctl(&d, &out, "put", "gpu/empty", "--dtype",
				  "u32", "--shape", "0", "--meta", "frame=0",
				  "/dev/null", NULL),
		     0, "%s", out);
	free(out);
	char *cons[] = {example("vk-consumer"), "gpu/empty", "0", "2000",
			NULL};
	cr_assert_eq(run(&d, cons, &out), 1, "%s", out);
	cr_assert(strstr(out, "nothing to import (0 bytes"), "%s", out);
	free(out);
	tu_daemon_stop(&d, true);
}

/*
 * A plane that is not a memfd (a dma-buf, here tensord's memfd made one
 * to the consumer by tests/fake-dmabuf.c) is not imported as host pages:
 * the consumer used to exit 1 saying nothing; it says why.
 */
Test(vulkan, a_consumer_given_a_dmabuf_plane_says_it_does_not_import_it)
{
	const char *shim = getenv("TD_FAKE_DMABUF_SHIM");
	struct tu_daemon d;
	char *out;

	cr_assert(shim, "TD_FAKE_DMABUF_SHIM is not set (run through meson "
			"test)");
	daemon_up(&d);
	char path[] = "/tmp/td-vk-zeros-XXXXXX";
	int fd = tu_mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, 4096), 0);
	close(fd);
	cr_assert_eq(tu_tensorctl(&d, &out, "put", "gpu/dmabuf", "--dtype",
				  "u32", "--shape", "1024", "--meta",
				  "frame=0", path, NULL),
		     0, "%s", out);
	free(out);
	unlink(path);
	/* the consumer alone sees tensord's planes as dma-bufs */
	cr_assert_eq(setenv("LD_PRELOAD", shim, 1), 0);
	cr_assert_eq(setenv("TD_FAKE_DMABUF", "tensord-plane", 1), 0);
	cr_assert_eq(setenv("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:"
					    "verify_asan_link_order=0", 1),
		     0);
	char *cons[] = {example("vk-consumer"), "gpu/dmabuf", "0", "2000",
			NULL};
	int rc = run(&d, cons, &out);
	unsetenv("LD_PRELOAD");
	unsetenv("TD_FAKE_DMABUF");
	cr_assert_eq(rc, 1, "%s", out);
	cr_assert(strstr(out, "its plane is not a memfd (a dma-buf"), "%s",
		  out);
	free(out);
	tu_daemon_stop(&d, true);
}

static int reap_status(pid_t pid)
{
	int st = tu_wait_child(pid, TU_WAIT_S, "the Vulkan producer");

	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Wait for "published NAME version 1" from the producer; skip w/o driver */
static void await_publish(struct tu_daemon *d, pid_t pid, FILE *f)
{
	char line[256];

	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "published ", 10) == 0)
			return;
	fclose(f);
	int rc = reap_status(pid);
	if (rc == NO_DRIVER) {
		tu_daemon_stop(d, true);
		cr_skip_test("no Vulkan driver on this machine (install "
			     "mesa-vulkan-drivers for lavapipe)");
	}
	cr_assert_fail("the producer ended (status %d) without publishing",
		       rc);
}

Test(vulkan, the_consumer_waits_for_a_fence_the_producer_delays)
{
	struct tu_daemon d;
	FILE *f;
	char *out;

	daemon_up(&d);
	/* published at once, GPU work only after 400 ms, then signalled:
	 * until then the buffer holds zeros, not the frame */
	char *prod[] = {example("vk-producer"), "gpu/slow", "1", "1048576",
			"400", NULL};
	pid_t pid = tu_spawn_stdout(prod, &f);
	await_publish(&d, pid, f);
	/* a consumer that will not wait long enough reads nothing */
	char *impatient[] = {example("vk-consumer"), "gpu/slow", "0", "2000",
			     "20", NULL};
	cr_assert_eq(run(&d, impatient, &out), 1, "%s", out);
	cr_assert(strstr(out, "gpu/slow version 1: fence fd"), "%s", out);
	cr_assert(strstr(out, "did not signal within 20 ms"), "%s", out);
	cr_assert_null(strstr(out, "gpu sum"), "%s", out);
	free(out);
	/* one that waits sees the whole frame (an early read: sum 0) */
	char *cons[] = {example("vk-consumer"), "gpu/slow", "0", "2000", NULL};
	cr_assert_eq(run(&d, cons, &out), 0, "%s", out);
	cr_assert(strstr(out, ": match\n"), "%s", out);
	assert_same_pages(out);
	free(out);
	fclose(f);
	cr_assert_eq(reap_status(pid), 0);
	tu_daemon_stop(&d, true);
}

Test(vulkan, a_producer_that_dies_before_signalling_times_consumers_out)
{
	struct tu_daemon d;
	char *out;

	daemon_up(&d);
	char *prod[] = {example("vk-producer"), "gpu/dead", "1", "65536", "0",
			"die", NULL};
	cr_assert_eq(run(&d, prod, &out), 3, "%s", out);
	cr_assert(strstr(out, "dying before signalling frame 0"), "%s", out);
	free(out);
	/* the version is published, its fence will never signal */
	char *cons[] = {example("vk-consumer"), "gpu/dead", "0", "2000", "200",
			NULL};
	cr_assert_eq(run(&d, cons, &out), 1, "%s", out);
	cr_assert(strstr(out, "gpu/dead version 1: fence fd"), "%s", out);
	cr_assert(strstr(out, "did not signal within 200 ms"), "%s", out);
	free(out);
	tu_daemon_stop(&d, true);
}

/* Start argv with stdout and stderr on one pipe, its read end in *fd. */
static pid_t spawn_all(char *const argv[], int *fd)
{
	int p[2];
	pid_t pid;

	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	*fd = p[0];
	return pid;
}

/* Read fd until what it has said ends with line (which must come). */
static void await_line(int fd, const char *line)
{
	char got[512];
	size_t n = 0, len = strlen(line);

	while (n < len || memcmp(got + n - len, line, len) != 0) {
		tu_await_readable(fd, TU_WAIT_S, line);
		cr_assert_lt(n, sizeof(got) - 1);
		cr_assert_eq(read(fd, got + n, 1), 1, "ended before \"%s\"",
			     line);
		n++;
	}
}

/*
 * A consumer's fence is its own, fired by the daemon of the connection
 * that leased it: with that daemon gone it can never signal, however the
 * producer does. vk-consumer waited on the bare fd (td_fence_wait), so
 * with no FENCE_MS it waited forever after a daemon crash; it waits with
 * td_tensor_fence_wait now, which says so, and exits.
 */
Test(vulkan, a_consumer_waiting_when_tensord_dies_says_its_fence_is_gone)
{
	struct tu_daemon d;
	FILE *f;
	char *out;
	int fd, st;

	daemon_up(&d);
	/* published at once, its GPU work and signal a minute later */
	char *prod[] = {example("vk-producer"), "gpu/orphan", "1", "65536",
			"60000", NULL};
	pid_t pid = tu_spawn_stdout(prod, &f);
	await_publish(&d, pid, f);
	/* no FENCE_MS: it waits for the fence as long as it takes */
	char *cons[] = {example("vk-consumer"), "gpu/orphan", "0", "2000",
			NULL};
	pid_t cpid = spawn_all(cons, &fd);
	/* it has the version (its fds imported), and waits */
	await_line(fd, "gpu/orphan version 1: waiting for its fence\n");
	cr_assert_eq(kill(d.pid, SIGKILL), 0);
	cr_assert(tu_reap_within(d.pid, TU_WAIT_S, &st));
	st = tu_collect(cpid, 1, &fd, &out, TU_WAIT_S, "vk-consumer");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %#x: %s", st,
		  out);
	cr_assert(strstr(out, "gpu/orphan version 1: fence fd"), "%s", out);
	cr_assert(strstr(out, "cannot signal any more: the connection that "
			 "leased it is gone"),
		  "%s", out);
	cr_assert_null(strstr(out, "gpu sum"), "%s", out);
	free(out);
	kill(pid, SIGKILL);
	fclose(f);
	reap_status(pid);
	unlink(d.sock);
	rmdir(d.dir);
}

/* "<who>: slot N imported at ADDR..., ino I off O" -> "ino I off O" */
static int slot_places(const char *out, const char *who, char where[][64],
		       int max)
{
	char key[64];
	int n = 0;

	snprintf(key, sizeof(key), "%s: slot ", who);
	for (const char *p = strstr(out, key); p; p = strstr(p + 1, key)) {
		unsigned slot;
		const char *ino = strstr(p, "ino ");

		cr_assert(ino && sscanf(p + strlen(key), "%u", &slot) == 1);
		cr_assert_lt(slot, (unsigned)max);
		sscanf(ino, "%63[^\n]", where[slot]);
		n++;
	}
	return n;
}

Test(vulkan, a_ring_joins_two_shaders_with_slots_imported_once)
{
	struct tu_daemon d;
	char *out;
	char prod_at[3][64] = {{0}}, cons_at[3][64] = {{0}};

	daemon_up(&d);
	char *argv[] = {example("vk-pipeline"), "ring", "gpu/ring", "1048576",
			"12", NULL};
	cr_assert_eq(run(&d, argv, &out), 0, "%s", out);
	cr_assert(strstr(out, "consumer: 12 of 12 frames match the formula"),
		  "%s", out);
	cr_assert(strstr(out, "bytes copied 0\n"), "%s", out);
	/* every slot used is imported once by each side, at most 3 */
	int np = slot_places(out, "producer", prod_at, 3);
	int nc = slot_places(out, "consumer", cons_at, 3);
	cr_assert(np >= 1 && np <= 3 && nc >= 1 && nc <= 3, "%s", out);
	char line[64];
	snprintf(line, sizeof(line), "producer: %d slot imports for 12 frames,",
		 np);
	cr_assert(strstr(out, line), "%s", out);
	/* both stages' imported pointers are the same memfd pages */
	for (int i = 0; i < 3; i++)
		if (cons_at[i][0])
			cr_assert_str_eq(cons_at[i], prod_at[i], "slot %d: %s", i,
					 out);
	free(out);

	/* the in-process baseline computes the same and copies every byte */
	char *copy[] = {example("vk-pipeline"), "copy", "65536", "3", NULL};
	cr_assert_eq(run(&d, copy, &out), 0, "%s", out);
	cr_assert(strstr(out, "copy: 3 of 3 frames match the formula"), "%s",
		  out);
	cr_assert(strstr(out, "bytes copied 196608\n"), "%s", out);
	free(out);
	tu_daemon_stop(&d, true);
}

/*
 * vk-pipeline's producer exited 1 without a word when its consumer
 * ended: with tensord killed mid-run the consumer's next wait finds its
 * connection gone (EPIPE) and ends, and the producer now says it stopped
 * and why, with the consumer's status.
 */
Test(vulkan, a_ring_producer_says_why_it_stops_when_tensord_dies)
{
	struct tu_daemon d;
	char *out;
	int fd, st;

	daemon_up(&d);
	/* skips here when there is no Vulkan driver */
	char *copy[] = {example("vk-pipeline"), "copy", "4096", "1", NULL};
	cr_assert_eq(run(&d, copy, &out), 0, "%s", out);
	free(out);
	/* more frames than it gets through before the consumer notices */
	char *argv[] = {example("vk-pipeline"), "ring", "gpu/cut", "65536",
			"100000", NULL};
	pid_t pid = spawn_all(argv, &fd);
	await_line(fd, " imported at ");
	cr_assert_eq(kill(d.pid, SIGKILL), 0);
	cr_assert(tu_reap_within(d.pid, TU_WAIT_S, &st));
	st = tu_collect(pid, 1, &fd, &out, TU_WAIT_S, "vk-pipeline");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %#x: %s", st,
		  out);
	cr_assert(strstr(out, "producer: stopped at frame "), "%s", out);
	cr_assert(strstr(out, "the consumer ended (it exited with status 1)"),
		  "%s", out);
	cr_assert_null(strstr(out, "frames match the formula"), "%s", out);
	free(out);
	unlink(d.sock);
	rmdir(d.dir);
}
