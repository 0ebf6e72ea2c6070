/* SPDX-License-Identifier: MIT */
/*
 * Every program in examples/ runs against a private daemon exactly as a
 * user would run it (socket from $TENSORD_SOCKET), and its output says
 * it did what its comment promises.
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

TestSuite(examples, .timeout = TU_TEST_TIMEOUT_S);

static char *example(const char *name)
{
	static char path[4096];
	const char *root = getenv("TD_BUILD_ROOT");
	cr_assert(root, "TD_BUILD_ROOT is set by meson");
	snprintf(path, sizeof(path), "%s/examples/example-%s", root, name);
	cr_assert(access(path, X_OK) == 0, "%s is built", path);
	return path;
}

/*
 * README's "Examples" names each run as `example-NAME ARGS`, "each run
 * by the test suite exactly as below": argv (example()'s path first) is
 * one of them, word for word, so the page and the runs cannot drift.
 */
static void readme_runs(char *const argv[])
{
	char path[4096], want[512];
	const char *root = getenv("TD_SOURCE_ROOT");
	const char *base = strrchr(argv[0], '/');
	size_t len, o;
	char *text, *sec, *end;

	cr_assert(root, "TD_SOURCE_ROOT is set by meson");
	snprintf(path, sizeof(path), "%s/README.md", root);
	text = (char *)tu_read_file(path, &len);
	text[len] = 0;
	sec = strstr(text, "\n## Examples\n");
	cr_assert(sec, "README has an Examples section");
	end = strstr(sec + 1, "\n## ");
	if (end)
		*end = 0;
	o = (size_t)snprintf(want, sizeof(want), "`%s", base ? base + 1
							     : argv[0]);
	for (char *const *a = argv + 1; *a && o < sizeof(want); a++)
		o += (size_t)snprintf(want + o, sizeof(want) - o, " %s", *a);
	cr_assert(o + 1 < sizeof(want));
	strcat(want, "`");
	/* the text wraps lines: a run may be cut by a newline and indent */
	char *flat = malloc(strlen(sec) + 1), *f = flat;
	cr_assert_not_null(flat);
	for (const char *c = sec; *c; c++)
		if (*c == '\n') {
			*f++ = ' ';
			while (c[1] == ' ')
				c++;
		} else {
			*f++ = *c;
		}
	*f = 0;
	cr_expect(strstr(flat, want), "README's Examples names %s", want);
	free(flat);
	free(text);
}

/* Every `example-...` run README's Examples names is one a test here
 * checks with readme_runs(): one more in the page needs its test. */
Test(examples, readme_names_only_the_runs_tested_here)
{
	char path[4096];
	const char *root = getenv("TD_SOURCE_ROOT");
	size_t len;
	int n = 0;
	char *text, *sec, *end;

	cr_assert(root, "TD_SOURCE_ROOT is set by meson");
	snprintf(path, sizeof(path), "%s/README.md", root);
	text = (char *)tu_read_file(path, &len);
	text[len] = 0;
	sec = strstr(text, "\n## Examples\n");
	cr_assert(sec);
	end = strstr(sec + 1, "\n## ");
	if (end)
		*end = 0;
	for (char *p = strstr(sec, "`example-"); p;
	     p = strstr(p + 1, "`example-"))
		n++;
	cr_expect_eq(n, 8, "README's Examples names %d runs; the tests "
		     "here check 8 (readme_runs)", n);
	free(text);
}

static void daemon_up(struct tu_daemon *d)
{
	tu_daemon_start(d, "warn");
	cr_assert(setenv("TENSORD_SOCKET", d->sock, 1) == 0);
}

Test(examples, producer_then_consumer_reads_the_producers_values)
{
	struct tu_daemon d;
	char *out;
	daemon_up(&d);

	char *prod[] = {example("producer"), "demo/m", "3", NULL};
	readme_runs(prod);
	cr_assert_eq(tu_run_capture(prod, &out), 0, "%s", out);
	cr_assert(strstr(out, "published demo/m version 3 (frame=2)"), "%s",
		  out);
	free(out);

	/* Newer than version 2: version 3, frame 2: sum of 200..211. */
	char *cons[] = {example("consumer"), "demo/m", "2", "2000", NULL};
	readme_runs(cons);
	cr_assert_eq(tu_run_capture(cons, &out), 0, "%s", out);
	cr_assert(strstr(out, "demo/m version 3 dtype f32 shape 3x4 "
			      "meta 'frame=2' sum 2466.0"),
		  "%s", out);
	free(out);

	/* Nothing newer than 3 comes: the consumer says so and fails. */
	char *late[] = {example("consumer"), "demo/m", "3", "100", NULL};
	cr_assert_eq(tu_run_capture(late, &out), 1);
	free(out);
	tu_daemon_stop(&d, true);
}

Test(examples, ring_pipeline_streams_whole_frames_to_the_end)
{
	struct tu_daemon d;
	char *out;
	daemon_up(&d);
	char *argv[] = {example("ring-pipeline"), "cam/ring", "200", NULL};
	readme_runs(argv);
	cr_assert_eq(tu_run_capture(argv, &out), 0, "%s", out);
	cr_assert(strstr(out, "producer: 200 frames written"), "%s", out);
	/* Frames may be skipped, never torn; the last one always arrives. */
	cr_assert(strstr(out, "last frame 199, all whole (end: Broken pipe)"),
		  "%s", out);
	free(out);
	tu_daemon_stop(&d, true);
}

Test(examples, ring_pipeline_in_lock_step_delivers_every_frame)
{
	struct tu_daemon d;
	char *out;
	daemon_up(&d);
	char *argv[] = {example("ring-pipeline"), "cam/ring", "200",
			"lockstep", NULL};
	readme_runs(argv);
	cr_assert_eq(tu_run_capture(argv, &out), 0, "%s", out);
	cr_assert(strstr(out, "producer: 200 frames written"), "%s", out);
	/* the producer waited for each frame: none skipped */
	cr_assert(strstr(out, "subscriber: 200 frames read, last frame 199, "
			      "all whole (end: Broken pipe)"),
		  "%s", out);
	free(out);
	tu_daemon_stop(&d, true);
}

Test(examples, follow_pipeline_streams_whole_frames_to_the_end)
{
	struct tu_daemon d;
	char *out;
	daemon_up(&d);
	char *argv[] = {example("follow-pipeline"), "cam/follow", "200",
			NULL};
	readme_runs(argv);
	cr_assert_eq(tu_run_capture(argv, &out), 0, "%s", out);
	cr_assert(strstr(out, "producer: 200 frames written"), "%s", out);
	/* Frames may be skipped, never torn; the last one always arrives. */
	cr_assert(strstr(out, "last frame 199, all whole"), "%s", out);
	free(out);
	tu_daemon_stop(&d, true);
}

Test(examples, watcher_sees_each_publish_and_the_delete)
{
	struct tu_daemon d;
	daemon_up(&d);

	char *watch[] = {example("watcher"), "cam/", "3", "10000", NULL};
	readme_runs(watch);
	FILE *f;
	pid_t pid = tu_spawn_stdout(watch, &f);
	char line[256];
	cr_assert(fgets(line, sizeof(line), f));
	cr_assert_str_eq(line, "watching cam/*\n");

	char *out;
	char *prod[] = {example("producer"), "cam/left", "2", NULL};
	cr_assert_eq(tu_run_capture(prod, &out), 0, "%s", out);
	free(out);
	char *other[] = {example("producer"), "mic/raw", "1", NULL};
	cr_assert_eq(tu_run_capture(other, &out), 0, "%s", out);
	free(out);
	char *rm[] = {getenv("TD_TENSORCTL"), "--socket", d.sock, "rm",
		      "cam/left", NULL};
	cr_assert_eq(tu_run_capture(rm, &out), 0, "%s", out);
	free(out);

	const char *want[] = {"published cam/left version 1\n",
			      "published cam/left version 2\n",
			      "deleted cam/left version 2\n"};
	for (int i = 0; i < 3; i++) {
		cr_assert(fgets(line, sizeof(line), f), "event %d", i);
		cr_assert_str_eq(line, want[i]);
	}
	cr_assert_null(fgets(line, sizeof(line), f), "mic/ is not watched");
	fclose(f);
	int status = tu_wait_child(pid, TU_WAIT_S, "the example");
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "status %#x (SIGALRM: it ran past tu_spawn_stdout's bound)",
		  status);
	tu_daemon_stop(&d, true);
}

Test(examples, event_loop_serves_watch_and_async_gets_in_one_loop)
{
	struct tu_daemon d;
	daemon_up(&d);

	char *loop[] = {example("event-loop"), "demo/e", "3", NULL};
	readme_runs(loop);
	FILE *f;
	pid_t pid = tu_spawn_stdout(loop, &f);
	char line[256];
	cr_assert(fgets(line, sizeof(line), f));
	cr_assert_str_eq(line, "waiting for demo/e\n");

	char *out;
	char *prod[] = {example("producer"), "demo/e", "3", NULL};
	readme_runs(prod);
	cr_assert_eq(tu_run_capture(prod, &out), 0, "%s", out);
	free(out);

	/* Every publish is an event; GETs may skip versions, not the last. */
	int events = 0, got_last = 0;
	while (fgets(line, sizeof(line), f)) {
		char want[64];
		if (!strncmp(line, "event: ", 7)) {
			snprintf(want, sizeof(want),
				 "event: published demo/e version %d\n",
				 events + 1);
			cr_assert_str_eq(line, want);
			events++;
		} else {
			cr_assert(!strncmp(line, "got demo/e version ", 19),
				  "%s", line);
			got_last = !strcmp(line, "got demo/e version 3, "
						 "48 bytes\n");
		}
	}
	cr_assert_eq(events, 3);
	cr_assert(got_last, "the last line read version 3");
	fclose(f);
	int status = tu_wait_child(pid, TU_WAIT_S, "the example");
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "status %#x (SIGALRM: it ran past tu_spawn_stdout's bound)",
		  status);
	tu_daemon_stop(&d, true);
}
