/* SPDX-License-Identifier: MIT */
/*
 * tensorctl's shell completion: `tensorctl __complete WORD...`
 * (tools/complete.c) offers the commands, every option each command
 * takes and no other, --dtype and --format values, files where a
 * command takes a file, names from the daemon cut at their next '/';
 * it runs no command, writes nothing on stderr and does not hang on a
 * daemon that does not answer. tools/tensorctl.bash hands its answers
 * to bash, names with ':' included.
 */
#include <criterion/criterion.h>
#include <regex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensord/tensord.h"
#include "testutil.h"

TestSuite(complete, .timeout = TU_TEST_TIMEOUT_S);

static const char *ctl(void)
{
	const char *bin = getenv("TD_TENSORCTL");

	cr_assert(bin, "TD_TENSORCTL is not set");
	return bin;
}

/* tensorctl __complete ARGS (NULL-ended): stdout and stderr together
 * in *out (stderr must stay empty); the exit status */
static int complete_v(char **out, const char *const *args)
{
	char *argv[32] = {(char *)ctl(), "__complete"};
	int n = 2;

	for (; *args; args++) {
		cr_assert_lt(n, 30);
		argv[n++] = (char *)*args;
	}
	argv[n] = NULL;
	return tu_run_capture_all(argv, out);
}

#define COMPLETE(out, ...)                                                     \
	complete_v(out, (const char *const[]){__VA_ARGS__, NULL})

/* The completion of ARGS is exactly want, status 0. */
static void expect_v(const char *want, const char *const *args)
{
	char *out;

	cr_assert_eq(complete_v(&out, args), 0, "%s", out);
	cr_assert_str_eq(out, want, "completing '%s' ... '%s'", args[0],
			 args[1] ? args[1] : "");
	free(out);
}

#define EXPECT(want, ...) expect_v(want, (const char *const[]){__VA_ARGS__, NULL})

static char *help_of(const char *cmd)
{
	char *argv[] = {(char *)ctl(), (char *)cmd, "--help", NULL};
	char *out;

	cr_assert_eq(tu_run_capture(argv, &out), 0);
	return out;
}

static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = text; (p = strstr(p, line)); p += n)
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return true;
	return false;
}

Test(complete, commands_are_those_tensorctl_help_lists)
{
	char *argv[] = {(char *)ctl(), "--help", NULL}, *help, *out;
	regmatch_t m[3];
	regex_t rx;
	int n = 0, lines = 0;

	cr_assert_eq(tu_run_capture(argv, &help), 0);
	cr_assert_eq(COMPLETE(&out, ""), 0);
	cr_assert(!regcomp(&rx, "^  tensorctl ([a-z]+)( |$)", REG_EXTENDED | REG_NEWLINE));
	for (const char *p = help; !regexec(&rx, p, 3, m, 0); p += m[0].rm_eo) {
		char cmd[32];

		snprintf(cmd, sizeof(cmd), "%.*s", (int)(m[1].rm_eo - m[1].rm_so),
			 p + m[1].rm_so);
		cr_expect(has_line(out, cmd), "command %s not offered: %s",
			  cmd, out);
		n++;
	}
	for (const char *p = out; (p = strchr(p, '\n')); p++)
		lines++;
	cr_assert_eq(n, 11, "%s", help);
	cr_assert_eq(lines, n, "offered: %s", out);
	EXPECT("get\n", "g");
	EXPECT("stat\nstatus\nsave\n", "s");
	EXPECT("--version\n--socket\n--json\n--bytes\n--help\n", "-");
	regfree(&rx);
	free(help);
	free(out);
}

/* Every option offered for words is in help; with all_in_help, every
 * option help lists at the start of a line is offered (zarr's help lists
 * both subcommands'). */
static void options_match_help(const char *const *words, const char *help,
			       bool all_in_help)
{
	regmatch_t m[3];
	regex_t rx;
	char *out;

	cr_assert_eq(complete_v(&out, words), 0);
	for (char *l = out, *e; *l; l = e + 1) {
		e = strchr(l, '\n');
		cr_assert(e && !strncmp(l, "--", 2), "not an option: %s", l);
		*e = 0;
		cr_expect(strstr(help, l), "%s %s not in its --help", words[0],
			  l);
		*e = '\n';
	}
	cr_assert(!regcomp(&rx, "^  (-[a-z], )?--([a-z-]+)",
			   REG_EXTENDED | REG_NEWLINE));
	for (const char *p = help; !regexec(&rx, p, 3, m, 0); p += m[0].rm_eo) {
		char opt[48];

		snprintf(opt, sizeof(opt), "--%.*s",
			 (int)(m[2].rm_eo - m[2].rm_so), p + m[2].rm_so);
		cr_expect(!all_in_help || has_line(out, opt),
			  "%s: %s is in --help, not offered", words[0], opt);
	}
	regfree(&rx);
	free(out);
}

Test(complete, each_command_offers_the_options_it_takes_and_documents)
{
	static const char *cmds[] = {"inspect", "put", "get",  "ls",
				     "stat",    "rm",  "watch", "load",
				     "status",  "save"};
	char *zarr = help_of("zarr");

	for (size_t i = 0; i < sizeof(cmds) / sizeof(*cmds); i++) {
		char *help = help_of(cmds[i]);

		options_match_help((const char *const[]){cmds[i], "--", NULL},
				   help, true);
		free(help);
	}
	options_match_help((const char *const[]){"zarr", "export", "--", NULL},
			   zarr, false);
	options_match_help((const char *const[]){"zarr", "import", "--", NULL},
			   zarr, false);
	/* a command's own options, not only the common ones */
	EXPECT("--newer\n", "get", "--ne");
	EXPECT("--from\n", "zarr", "export", "--fr");
	EXPECT("", "zarr", "import", "--fr");
	EXPECT("--skip-unsavable\n--socket\n", "save", "--s");
	free(zarr);
}

/*
 * load's form is chosen by its FILE (a .hrry name, --format hrry): a
 * Hurray load's options, without the three .tgm ones it refuses
 * (--message, --variable-key, --name-key), which were offered for any
 * FILE since the table was asked without the line's operands.
 */
Test(complete, a_hurray_load_offers_only_the_options_it_takes)
{
	EXPECT("--prefix\n--partial\n--no-replace\n--format\n--max-bytes\n"
	       "--socket\n"
	       "--json\n--bytes\n--help\n",
	       "load", "run.hrry", "--");
	EXPECT("--max-bytes\n", "load", "run.hrry", "--m");
	EXPECT("", "load", "--format", "hrry", "-", "--na");
	EXPECT("", "load", "--format=hrry", "run.bin", "--var");
	/* a .tgm load takes them */
	EXPECT("--message\n--max-bytes\n", "load", "run.tgm", "--m");
	EXPECT("--name-key\n", "load", "-", "--na");
	/* both forms, and zarr import, take --no-replace */
	EXPECT("--no-replace\n", "load", "run.hrry", "--no");
	EXPECT("--no-replace\n", "load", "run.tgm", "--no");
	EXPECT("--no-replace\n", "zarr", "import", "--no");
}

/*
 * zarr export's form is chosen by --from's file, as load's by its FILE: a
 * Hurray file's export refuses --message and --name-key ("are for .tgm
 * files"), so they are not offered for it; they were, as for a .tgm
 * (docs/tensorctl.md: the options it takes and none it refuses).
 */
Test(complete, a_hurray_export_offers_only_the_options_it_takes)
{
	char *h = strdup(tu_data_path("hrry-seeds/plain-kv-sorted.hrry"));
	char *eq;

	cr_assert_not_null(h);
	cr_assert_gt(asprintf(&eq, "--from=%s", h), 0);
	EXPECT("--from\n--max-bytes\n--socket\n--json\n--bytes\n--help\n",
	       "zarr", "export", "d", "--from", h, "--");
	EXPECT("--max-bytes\n", "zarr", "export", "d", "--from", h, "--m");
	EXPECT("", "zarr", "export", "--fr", h, "d", "--na");
	EXPECT("", "zarr", "export", eq, "d", "--mes");
	/* a .tgm's export takes them, and so does one with no --from yet */
	EXPECT("--message\n--max-bytes\n", "zarr", "export", "d", "--from",
	       "run.tgm", "--m");
	EXPECT("--name-key\n", "zarr", "export", "d", "--na");
	free(eq);
	free(h);
}

Test(complete, option_values)
{
	EXPECT("u8\ni8\nu16\ni16\nu32\ni32\nu64\ni64\nf16\nf32\nf64\n", "put",
	       "x", "--dtype", "");
	EXPECT("f16\nf32\nf64\n", "put", "--dtype", "f");
	EXPECT("--format=raw\n--format=npy\n", "get", "--format=");
	EXPECT("--format=npy\n", "put", "x", "--format=n");
	EXPECT("tgm\nhrry\n", "load", "--format", "");
	EXPECT("hrry\n", "save", "-o", "x", "--format", "h");
	EXPECT(":files\n", "get", "t", "-o", "");
	EXPECT(":files\n", "get", "--output=/tm");
	EXPECT(":files\n", "--socket", "");
	EXPECT(":files\n", "zarr", "export", "--from", "");
	/* values nothing is offered for */
	EXPECT("", "get", "--version", "");
	EXPECT("", "put", "x", "--shape", "");
}

Test(complete, operands_by_position)
{
	setenv("TENSORD_SOCKET", "/nonexistent/tensord.sock", 1);
	EXPECT(":files\n", "inspect", "");
	EXPECT(":files\n", "put", "x", "");
	EXPECT(":files\n", "load", "--prefix", "p/", "");
	EXPECT("export\nimport\n", "zarr", "");
	EXPECT("import\n", "--json", "zarr", "i");
	EXPECT(":dirs\n", "zarr", "export", "");
	EXPECT(":dirs\n", "zarr", "import", "");
	EXPECT("", "zarr", "import", "d", "");
	EXPECT("", "get", "x", "");
	EXPECT("", "status", "");
	/* a name, but no daemon there: nothing, and nothing on stderr */
	EXPECT("", "get", "");
	EXPECT("", "unknown-command", "");
	unsetenv("TENSORD_SOCKET");
}

static void put_names(struct tu_daemon *d)
{
	static const char *names[] = {"cam/left/0", "cam/left/1", "cam/right",
				      "cams", "other:x@1"};
	struct td_error e = {0};
	struct td_client *c;
	uint64_t n = 4;

	cr_assert_eq(td_client_connect(d->sock, &c, NULL), 0);
	for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++) {
		struct td_publish p = {.name = names[i],
				       .dtype = TD_TENSOR_U8,
				       .ndim = 1,
				       .shape = &n};

		cr_assert_eq(td_client_put(c, &p, "abcd", 4, NULL, &e), 0,
			     "%s", e.reason);
	}
	td_client_close(c);
}

Test(complete, names_from_the_daemon_cut_after_their_next_slash)
{
	char sock_eq[160];
	struct tu_daemon d;

	tu_daemon_start(&d, "error");
	put_names(&d);
	EXPECT(":nospace\ncam/\ncams\nother:x@1\n", "--socket", d.sock, "get",
	       "");
	EXPECT(":nospace\ncam/left/\ncam/right\n", "get", "--socket", d.sock,
	       "cam/");
	snprintf(sock_eq, sizeof(sock_eq), "--socket=%s", d.sock);
	EXPECT("cam/left/0\ncam/left/1\n", sock_eq, "zarr", "export", "dir",
	       "cam/left/");
	EXPECT("cam/left/0\ncam/left/1\n", "zarr", "export", sock_eq, "dir",
	       "cam/left/");
	/* an option's value is no operand; after "--" all are operands */
	EXPECT("cams\n", "get", "--socket", d.sock, "--format", "raw", "cams");
	EXPECT("cam/right\n", "get", "--socket", d.sock, "-o", "f", "cam/r");
	EXPECT("cam/right\n", "get", "--socket", d.sock, "-of", "cam/r");
	EXPECT("other:x@1\n", "rm", "--socket", d.sock, "--", "o");
	/* save takes names, as many as given */
	setenv("TENSORD_SOCKET", d.sock, 1);
	EXPECT("other:x@1\n", "save", "-o", "x.tgm", "cams", "cam/right", "o");
	/* zarr export --from FILE takes no NAMES: none offered (they were,
	 * and the export refused them: "export --from takes no NAMES") */
	EXPECT("cams\n", "zarr", "export", "dir", "cams");
	EXPECT("", "zarr", "export", "dir", "--from", "f.tgm", "cams");
	EXPECT("", "zarr", "export", "dir", "--from=f.hrry", "");
	EXPECT(":dirs\n", "zarr", "export", "--from", "f.tgm", "");
	EXPECT("", "get", "nothing-like-it");
	unsetenv("TENSORD_SOCKET");
	tu_daemon_stop(&d, true);
}

static bool exists(const struct tu_daemon *d, const char *name)
{
	struct td_entry ent;
	struct td_error e = {0};
	struct td_client *c;
	int rc;

	cr_assert_eq(td_client_connect(d->sock, &c, NULL), 0);
	rc = td_client_stat(c, name, &ent, &e);
	if (!rc)
		td_entry_fini(&ent);
	td_client_close(c);
	return rc == 0;
}

Test(complete, completing_runs_no_command)
{
	struct tu_daemon d;
	char file[128];
	FILE *f;

	tu_daemon_start(&d, "error");
	put_names(&d);
	snprintf(file, sizeof(file), "%s/four", d.dir);
	f = fopen(file, "w");
	cr_assert(f && fwrite("abcd", 1, 4, f) == 4 && !fclose(f));
	EXPECT("", "--socket", d.sock, "rm", "cams", "");
	EXPECT("cams\n", "--socket", d.sock, "rm", "cams");
	EXPECT("", "--socket", d.sock, "put", "new", "--dtype", "u8",
	       "--shape", "4", file, "");
	EXPECT(":files\n", "--socket", d.sock, "put", "new", "--dtype", "u8",
	       "--shape", "4", file);
	EXPECT("", "--socket", d.sock, "zarr", "import", d.dir, "");
	cr_assert(exists(&d, "cams"), "completing rm removed the name");
	cr_assert(!exists(&d, "new"), "completing put published");
	tu_daemon_stop(&d, true);
}

Test(complete, a_daemon_that_does_not_answer_ends_it_without_names)
{
	struct tu_daemon d;
	char *out;
	int rc;

	tu_daemon_start(&d, "error");
	put_names(&d);
	cr_assert_eq(kill(d.pid, SIGSTOP), 0);
	rc = COMPLETE(&out, "--socket", d.sock, "get", "");
	kill(d.pid, SIGCONT);
	cr_assert_eq(rc, 128 + SIGALRM, "status %d: %s", rc, out);
	cr_assert_str_eq(out, "");
	free(out);
	tu_daemon_stop(&d, true);
}

/* tools/tensorctl.bash in bash: each case sets the line as bash would
 * split it (COMP_WORDS at ':' and '=') and prints COMPREPLY */
static const char bash_cases[] =
	"source \"$TD_SOURCE_ROOT/tools/tensorctl.bash\"\n"
	"T=$TD_TENSORCTL\n"
	"t() {\n"
	"  COMP_LINE=$1; COMP_POINT=${#1}; shift\n"
	"  COMP_WORDS=(\"$@\"); COMP_CWORD=$(($# - 1)); COMPREPLY=()\n"
	"  _tensorctl; printf '[%s]' \"${COMPREPLY[@]}\"; echo\n"
	"}\n"
	"t \"$T get oth\" $T get oth\n"
	"t \"$T get other:\" $T get other :\n"
	"t \"$T get other:x\" $T get other : x\n"
	"t \"$T get cam/l\" $T get cam/l\n"
	"t \"$T get --format=n\" $T get --format = n\n"
	"t \"$T put x --dtype f3\" $T put x --dtype f3\n"
	"t \"$T st\" $T st\n"
	"t \"$T inspect $D/fo\" $T inspect $D/fo\n"
	"t \"$T get t -o $D/fo\" $T get t -o $D/fo\n"
	"t \"$T get --output=$D/fo\" $T get --output = $D/fo\n";

Test(complete, the_bash_script_hands_the_answers_to_bash)
{
	char *argv[] = {"/bin/bash", "-c", (char *)bash_cases, NULL}, *out;
	char want[1024];
	struct tu_daemon d;
	FILE *f;

	tu_daemon_start(&d, "error");
	put_names(&d);
	setenv("TENSORD_SOCKET", d.sock, 1);
	setenv("D", d.dir, 1);
	snprintf(want, sizeof(want), "%s/four", d.dir);
	f = fopen(want, "w");
	cr_assert(f && !fclose(f));
	cr_assert_eq(tu_run_capture_all(argv, &out), 0, "%s", out);
	snprintf(want, sizeof(want),
		 "[other:x@1]\n[x@1]\n[x@1]\n[cam/left/]\n[npy]\n[f32]\n"
		 "[stat][status]\n[%s/four]\n[%s/four]\n[%s/four]\n",
		 d.dir, d.dir, d.dir);
	cr_assert_str_eq(out, want);
	free(out);
	unsetenv("TENSORD_SOCKET");
	tu_daemon_stop(&d, true);
}
