/* SPDX-License-Identifier: MIT */
/*
 * What tensorctl says when it fails, as a demanding user reads it: the
 * names, paths and values typed on the line come back escaped (a control
 * byte cannot drive the terminal), and a failure names what failed.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

TestSuite(ctl_messages, .timeout = TU_TEST_TIMEOUT_S);

static void write_file(const char *path, const void *b, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(write(fd, b, n), (ssize_t)n);
	close(fd);
}

/* A daemon in d with tensor "t" (u8 [6]) published from d's six.bin,
 * whose path goes into six (cap bytes). */
static void start_with_six(struct tu_daemon *d, char *six, size_t cap)
{
	char *out;

	tu_daemon_start(d, "error");
	snprintf(six, cap, "%s/six.bin", d->dir);
	write_file(six, "abcdef", 6);
	cr_assert_eq(tu_tensorctl(d, &out, "put", "t", "--dtype", "u8",
				  "--shape", "6", six, NULL),
		     0, "%s", out);
	free(out);
}

/* The first control byte of s that is not a line's end, or 0. */
static int control_byte(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if ((*p < 0x20 && *p != '\n') || *p == 0x7f)
			return *p;
	return 0;
}

/* Lines in s (each ends with '\n'). */
static int lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/*
 * `tensorctl ARGS` fails (status want) saying shown, the typed operand
 * escaped, and no control byte reaches the terminal.
 */
#define EXPECT_ESCAPED(d, want, shown, ...)                                    \
	do {                                                                   \
		char *out_;                                                    \
		int rc_ = tu_tensorctl(d, &out_, __VA_ARGS__, NULL);           \
                                                                               \
		cr_expect_eq(rc_, want, "status %d: %s", rc_, out_);           \
		cr_expect(strstr(out_, shown), "'%s' not in: %s", shown,       \
			  out_);                                               \
		cr_expect_eq(control_byte(out_), 0,                            \
			     "control byte 0x%02x reached the terminal: %s",   \
			     control_byte(out_), out_);                        \
		free(out_);                                                    \
	} while (0)

/*
 * A name typed with a control byte or an escape sequence was echoed raw
 * in the error (`tensorctl rm $'x\x01y'`, a name pasted from a log with
 * `\e]0;...\a` that retitles the terminal, `\n` faking a line), while
 * names from the daemon or a file were escaped (docs/tensorctl.md):
 * every message on stderr now goes through one escaping helper.
 */
Test(ctl_messages, typed_operands_are_escaped_in_error_messages)
{
	struct tu_daemon d;
	char six[160], dir[200], *out;

	start_with_six(&d, six, sizeof(six));
	/* names the daemon refuses: the name as typed, escaped */
	EXPECT_ESCAPED(&d, 1, "x\\x01y: DELETE", "rm", "x\001y");
	EXPECT_ESCAPED(&d, 1, "q\\x1b]0;title\\x07: GET", "get",
		       "q\033]0;title\007", "-o", "/dev/null");
	EXPECT_ESCAPED(&d, 1, "n\\x1b[1m: tensor name", "put", "n\033[1m",
		       "--dtype", "u8", "--shape", "6", six);
	EXPECT_ESCAPED(&d, 1, "c\\u009b", "watch", "c\302\233",
		       "--count", "1");
	/* a newline in a name fakes no line: one line said */
	cr_expect_eq(tu_tensorctl(&d, &out, "stat", "a\nb", NULL), 1);
	cr_expect(strstr(out, "a\\nb: STAT"), "%s", out);
	cr_expect_eq(lines(out), 1, "%s", out);
	free(out);
	/* a typed backslash is told apart from an escape */
	EXPECT_ESCAPED(&d, 1, "a\\\\x1b: No such file", "inspect",
		       "a\\x1b");
	/* option values and files: usage errors and local failures */
	EXPECT_ESCAPED(&d, 2, "unknown dtype 'f\\x1b[5m'", "put", "n",
		       "--dtype", "f\033[5m", "--shape", "6", six);
	EXPECT_ESCAPED(&d, 2, "bad shape '6\\x1b'", "put", "n", "--dtype",
		       "u8", "--shape", "6\033", six);
	EXPECT_ESCAPED(&d, 1, "nofile\\x1b[3m: No such file", "put", "n",
		       "--dtype", "u8", "--shape", "6", "nofile\033[3m");
	EXPECT_ESCAPED(&d, 1, "f\\x1b[2J.tgm: No such file", "load",
		       "f\033[2J.tgm");
	EXPECT_ESCAPED(&d, 2, "bad --prefix '\\x1b[1m'", "load", six,
		       "--prefix", "\033[1m");
	EXPECT_ESCAPED(&d, 2, "unexpected operand 'b\\x1b'", "ls", "a",
		       "b\033");
	EXPECT_ESCAPED(&d, 2, "unknown command 'x\\x1b[2J'", "x\033[2J");
	EXPECT_ESCAPED(&d, 1, "connect /nowhere\\x1b[31m", "--socket",
		       "/nowhere\033[31m", "ls");
	snprintf(dir, sizeof(dir), "%s/no\033[7mdir/z", d.dir);
	EXPECT_ESCAPED(&d, 1, "no\\x1b[7mdir", "zarr", "export", dir, "t");
	/* --json keeps the name as it is: JSON escapes it itself */
	cr_expect_eq(tu_tensorctl(&d, &out, "--json", "rm", "x\001y", NULL),
		     1);
	cr_expect(strstr(out, "\"reason\":\"x\\u0001y: DELETE"), "%s", out);
	free(out);
	unlink(six);
	tu_daemon_stop(&d, false);
}

/* Entries of dir but "." and ".." (a temporary folder left over). */
static int entries(const char *dir)
{
	char cmd[300], *out;
	char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	int n;

	snprintf(cmd, sizeof(cmd), "ls -A '%s' | wc -l", dir);
	cr_assert_eq(tu_run_capture(argv, &out), 0);
	n = atoi(out);
	free(out);
	return n;
}

/*
 * zarr export on a full disk said "DIR: No space left on device", not
 * which of its files, folders, syncs or the rename failed; a read-only
 * folder "DIR: PARENT: Read-only file system", not what it was doing
 * there; and DIR under a file (`six.bin/out`) "exists and is not a
 * folder", of a DIR that does not exist. Each now names the step and
 * the path.
 */
Test(ctl_messages, zarr_export_failures_name_what_failed_and_where)
{
	struct tu_daemon d;
	char data[160], full[160], ro[160], dir[200], want[800], *out;
	static uint8_t zeros[200000];

	tu_daemon_start(&d, "error");
	snprintf(data, sizeof(data), "%s/big.bin", d.dir);
	write_file(data, zeros, sizeof(zeros));
	cr_assert_eq(tu_tensorctl(&d, &out, "put", "big", "--dtype", "u8",
				  "--shape", "200000", data, NULL),
		     0, "%s", out);
	free(out);
	/* a folder where DIR's parent should be is a file */
	snprintf(dir, sizeof(dir), "%s/out", data);
	cr_expect_eq(tu_tensorctl(&d, &out, "zarr", "export", dir, "big",
				  NULL),
		     1);
	snprintf(want, sizeof(want),
		 "tensorctl: %s: %s is not a folder (export makes out in "
		 "it)\n",
		 dir, data);
	cr_expect_str_eq(out, want);
	free(out);

	snprintf(full, sizeof(full), "%s/full", d.dir);
	snprintf(ro, sizeof(ro), "%s/ro", d.dir);
	cr_assert_eq(mkdir(full, 0755), 0);
	cr_assert_eq(mkdir(ro, 0755), 0);
	if (unshare(CLONE_NEWNS) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", full, "tmpfs", 0, "size=64k") < 0 ||
	    mount("tmpfs", ro, "tmpfs", 0, "size=64k") < 0 ||
	    mount(NULL, ro, NULL, MS_REMOUNT | MS_RDONLY, NULL) < 0) {
		int e = errno;

		umount(full);
		umount(ro);
		rmdir(full);
		rmdir(ro);
		unlink(data);
		tu_daemon_stop(&d, false);
		cr_skip_test("kernel feature missing: a mount namespace with "
			     "tmpfs mounts (unshare/mount: %s; root needed): "
			     "ENOSPC and EROFS not checked",
			     strerror(e));
	}
	/* a full disk: the chunk it was writing, and nothing left */
	snprintf(dir, sizeof(dir), "%s/z", full);
	cr_expect_eq(tu_tensorctl(&d, &out, "zarr", "export", dir, "big",
				  NULL),
		     1);
	snprintf(want, sizeof(want),
		 "tensorctl: %s: writing big/c/0: %s; nothing written\n", dir,
		 strerror(ENOSPC));
	cr_expect_str_eq(out, want);
	free(out);
	cr_expect_eq(entries(full), 0, "a temporary folder was left");
	/* --json names it too */
	cr_expect_eq(tu_tensorctl(&d, &out, "--json", "zarr", "export", dir,
				  "big", NULL),
		     1);
	cr_expect(strstr(out, "\"errno\":28,\"reason\":\"") &&
			  strstr(out, ": writing big/c/0: "),
		  "%s", out);
	free(out);
	/* a read-only folder: what it was making there */
	snprintf(dir, sizeof(dir), "%s/z", ro);
	cr_expect_eq(tu_tensorctl(&d, &out, "zarr", "export", dir, "big",
				  NULL),
		     1);
	snprintf(want, sizeof(want),
		 "tensorctl: %s: making a new folder in %s: %s\n", dir, ro,
		 strerror(EROFS));
	cr_expect_str_eq(out, want);
	free(out);
	umount(full);
	umount(ro);
	rmdir(full);
	rmdir(ro);
	unlink(data);
	tu_daemon_stop(&d, false);
}

/*
 * inspect of a file of no format it knows (empty, a few bytes, a PNG)
 * reads it as a tensor blob, and said only "refused: TRUNCATED (need 72,
 * have 0) at offset 0: buffer shorter than the blob header": not which
 * file, nor that it was taken for a blob for want of a magic.
 */
Test(ctl_messages, inspect_refusal_names_the_file_and_what_it_was_read_as)
{
	struct tu_daemon d;
	char path[160], want[400], *out;

	tu_daemon_start(&d, "error");
	snprintf(path, sizeof(path), "%s/empty.bin", d.dir);
	write_file(path, "", 0);
	cr_expect_eq(tu_tensorctl(&d, &out, "inspect", path, NULL), 1);
	snprintf(want, sizeof(want),
		 "tensorctl: refused: TRUNCATED (need 72, have 0) at offset "
		 "0: buffer shorter than the blob header (%s, read as a "
		 "tensor blob: no .tgm, Hurray or .npy magic)\n",
		 path);
	cr_expect_str_eq(out, want);
	free(out);
	/* --json keeps the decoder's object as it was */
	cr_expect_eq(tu_tensorctl(&d, &out, "--json", "inspect", path, NULL),
		     1);
	cr_expect(!strncmp(out, "{\"error\":{\"kind\":\"TRUNCATED\"", 28),
		  "%s", out);
	free(out);
	unlink(path);
	tu_daemon_stop(&d, false);
}

/* `tensorctl ARGS` is a usage error (status 2) saying why. */
static void expect_usage(const char *why, const char *const *args)
{
	/* no daemon: a usage error comes before a connect */
	struct tu_daemon d = {.sock = "/nonexistent/td.sock"};
	char *out;
	int rc;

	rc = tu_tensorctl(&d, &out, args[0], args[1], args[2], args[3],
			  args[4], NULL);
	cr_expect_eq(rc, 2, "%s: status %d: %s", args[0], rc, out);
	cr_expect(strstr(out, why), "want \"%s\": %s", why, out);
	free(out);
}

#define USAGE(why, ...)                                                        \
	expect_usage(why, (const char *const[]){__VA_ARGS__, NULL, NULL,       \
						NULL, NULL, NULL})

/*
 * A numeric option's bad value said nothing of why: a count past 2^64-1
 * was "bad --count '...' (1 or more)", a timeout past 2^31-1 "(milliseconds)",
 * a --max-bytes past 16 EiB "(bytes, or with K, M, G, T)", a --message
 * nothing at all. Each now says what is wrong and the range.
 */
Test(ctl_messages, number_options_say_what_is_wrong_with_a_value)
{
	USAGE("bad --count '99999999999999999999' (more than "
	      "18446744073709551615)",
	      "watch", "x", "--count", "99999999999999999999");
	USAGE("bad --count '0' (less than 1)", "watch", "x", "--count", "0");
	USAGE("bad --timeout '99999999999' (more than 2147483647 "
	      "milliseconds)",
	      "get", "x", "--newer", "1", "--timeout=99999999999");
	USAGE("bad --timeout '-1' (digits only: 0 to 2147483647 "
	      "milliseconds)",
	      "get", "x", "--newer", "1", "--timeout=-1");
	USAGE("bad --version '18446744073709551616' (more than "
	      "18446744073709551615)",
	      "get", "x", "--version", "18446744073709551616");
	USAGE("bad --max-bytes '16777216T' (more than 18446744073709551615 "
	      "bytes)",
	      "inspect", "--max-bytes", "16777216T", "-");
	USAGE("bad --max-bytes '1KB' (digits, then K, M, G or T at most)",
	      "inspect", "--max-bytes", "1KB", "-");
	USAGE("bad --message '-1' (digits only: 0 to 18446744073709551615)",
	      "load", "-", "--message", "-1");
	USAGE("bad --max-bytes '99999999999999999999' (more than "
	      "18446744073709551615 bytes)",
	      "zarr", "export", "d", "--max-bytes", "99999999999999999999");
}

/*
 * put --shape with a 17th dimension, or one past 2^64-1, was said "bad
 * shape (dimensions as 2,3 or 2x3, at most 16)", as if its form were
 * wrong.
 */
Test(ctl_messages, a_shape_too_deep_or_too_large_says_so)
{
	USAGE("bad shape '18446744073709551616' (a dimension more than "
	      "18446744073709551615)",
	      "put", "x", "--dtype=u8", "--shape=18446744073709551616", "-");
	USAGE("bad shape '1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1' (more than 16 "
	      "dimensions)",
	      "put", "x", "--dtype=u8",
	      "--shape=1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1", "-");
	USAGE("bad shape '2,-1' (dimensions as 2,3, 2x3 or (2, 3), at most "
	      "16)",
	      "put", "x", "--dtype=u8", "--shape=2,-1", "-");
}

/*
 * The --format values of the form of cmd that starts with `form` ("load
 * FILE.hrry") in `tensorctl cmd --help`'s synopsis into buf ("" when it
 * lists none).
 */
static void help_formats(const char *cmd, const char *form, char *buf,
			 size_t n)
{
	struct tu_daemon d = {.sock = "/nonexistent/td.sock"};
	char *out, *f, *end, *fmt, next[32];

	cr_assert_eq(tu_tensorctl(&d, &out, cmd, "--help", NULL), 0);
	*strchr(out, '\n') = 0; /* the synopsis line */
	f = strstr(out, form);
	cr_assert(f, "%s --help has no form '%s': %s", cmd, form, out);
	/* the next form (a '|' inside [...] is no form's end) */
	snprintf(next, sizeof(next), " | %s ", cmd);
	end = strstr(f, next);
	if (end)
		*end = 0;
	fmt = strstr(f, "[--format ");
	snprintf(buf, n, "%.*s", fmt ? (int)strcspn(fmt + 10, "]") : 0,
		 fmt ? fmt + 10 : "");
	free(out);
}

/* The same of tensorctl.1's entry that starts with `entry`, its scd
 * markup taken out ("*--format* *tgm*" is "tgm"). */
static void man_formats(const char *entry, char *buf, size_t n)
{
	char path[512], *page, *e, *fmt, *p;
	size_t o = 0;

	snprintf(path, sizeof(path), "%s/docs/man/tensorctl.1.scd",
		 getenv("TD_SOURCE_ROOT"));
	page = tu_slurp(path);
	e = strstr(page, entry);
	cr_assert(e, "tensorctl.1 has no entry '%s'", entry);
	*strchr(e, '\n') = 0;
	fmt = strstr(e, "[*--format* ");
	for (p = fmt ? fmt + 12 : ""; *p && *p != ']' && o + 1 < n; p++)
		if (*p != '*')
			buf[o++] = *p;
	buf[o] = 0;
	free(page);
}

/*
 * `load --help` gave its Hurray form `[--format tgm|hrry]`, where --format
 * tgm makes it the .tgm form, and the .tgm form no --format at all, while
 * tensorctl.1 and the code said `--format hrry` and `--format tgm`; save
 * alike. Each form's --format values now agree in both.
 */
Test(ctl_messages, help_and_man_page_give_each_form_its_own_format)
{
	static const struct {
		const char *cmd, *form, *entry;
	} forms[] = {
		{"load", "load FILE.tgm", "*load* _FILE.tgm_"},
		{"load", "load FILE.hrry", "*load* _FILE.hrry_"},
		{"save", "save -o FILE.tgm", "*save* *-o* _FILE.tgm_"},
		{"save", "save -o FILE.hrry", "*save* *-o* _FILE.hrry_"},
		{"put", "put NAME [--dtype T]", "*put* _NAME_ [*--dtype*"},
		{"get", "get NAME", "*get* _NAME_"},
	};

	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		char help[64], man[64];

		help_formats(forms[i].cmd, forms[i].form, help, sizeof(help));
		man_formats(forms[i].entry, man, sizeof(man));
		cr_expect_str_eq(help, man, "%s: --help says [--format %s], "
			       "tensorctl.1 [--format %s]",
			       forms[i].form, help, man);
		cr_expect_neq(help[0], 0, "%s: no --format", forms[i].form);
	}
}

/*
 * An empty FILE or DIR (`"$F"` of an unset F) said ": No such file or
 * directory", status 1, naming nothing; -o "" was a usage error already.
 */
Test(ctl_messages, an_empty_input_path_is_a_bad_command_line)
{
	USAGE("an empty input path (- is stdin)", "inspect", "");
	USAGE("an empty input path (- is stdin)", "load", "");
	USAGE("an empty input path (- is stdin)", "load", "", "--format",
	      "hrry");
	USAGE("an empty input path (- is stdin)", "put", "x", "--dtype=u8",
	      "--shape=6", "");
	USAGE("an empty input path (- is stdin)", "zarr", "export", "d",
	      "--from", "");
	USAGE("zarr: export: an empty DIR path", "zarr", "export", "");
	USAGE("zarr: import: an empty DIR path", "zarr", "import", "");
}

/*
 * A --prefix no name can start with: the Hurray load took it and refused
 * every tensor one by one ("refused x: InvalidArgument: name has a byte
 * outside ..."), exit status 0 with nothing published; zarr import said
 * "bad --prefix 'a b'" with no reason. Each is now refused up front,
 * saying why, as the .tgm load did.
 */
Test(ctl_messages, a_bad_prefix_is_refused_up_front_saying_why)
{
	char lng[400];

	USAGE("load: bad --prefix 'a b' (name has a byte outside",
	      "load", "x.hrry", "--prefix", "a b");
	USAGE("load: bad --prefix 'a b' (name has a byte outside",
	      "load", "x.tgm", "--prefix", "a b");
	USAGE("zarr: bad --prefix 'a b' (name has a byte outside",
	      "zarr", "import", "d", "--prefix", "a b");
	memset(lng, 'p', 300);
	lng[300] = 0;
	USAGE("(longer than", "load", "x.hrry", "--prefix", lng);
	USAGE("(longer than", "zarr", "import", "d", "--prefix", lng);
}

/*
 * A value given to an option that takes none (`ls --json=1`): getopt
 * tells it with the option's code in optopt, not a letter, and the
 * message was "ls: unknown option '-\x01'" (a raw control byte before
 * the escaping); before the command, "unknown or incomplete option".
 */
Test(ctl_messages, a_value_given_to_a_flag_is_said_so)
{
	USAGE("ls: option '--json' takes no value", "ls", "--json=1");
	USAGE("watch: option '--prefix' takes no value", "watch", "x",
	      "--prefix=1");
	USAGE("save: option '--skip-unsavable' takes no value", "save", "-o",
	      "x.tgm", "--skip-unsavable=yes");
	USAGE("option '--bytes' takes no value", "--bytes=2", "ls");
	/* a letter that is no option is still named */
	USAGE("ls: unknown option '-Z'", "ls", "-Z");
}

/*
 * `tensorctl --socket` with its PATH forgotten (the last word, as a
 * variable left unquoted and unset makes it) said "option '--socket'
 * takes no value", the opposite of the truth: before the command a
 * missing value was read as a value given to a flag. After the command
 * it was right ("ls: option '--socket' needs a value").
 */
Test(ctl_messages, a_missing_value_before_the_command_is_said_so)
{
	USAGE("tensorctl: option '--socket' needs a value", "--socket");
	USAGE("\"reason\":\"option '--socket' needs a value\"", "--json",
	      "--socket");
	USAGE("ls: option '--socket' needs a value", "ls", "--socket");
}

/*
 * An empty NAME (`stat "$N"` of an unset N) was said ": STAT: name: name
 * is empty", naming nothing; `watch ''` did not say that --prefix
 * watches every name.
 */
Test(ctl_messages, an_empty_name_is_named_and_watch_says_how_to_see_all)
{
	struct tu_daemon d;
	char *out;

	tu_daemon_start(&d, "error");
	cr_expect_eq(tu_tensorctl(&d, &out, "stat", "", NULL), 1);
	cr_expect(!strncmp(out, "tensorctl: '': STAT: ", 21), "%s", out);
	free(out);
	cr_expect_eq(tu_tensorctl(&d, &out, "rm", "", NULL), 1);
	cr_expect(!strncmp(out, "tensorctl: '': DELETE: ", 23), "%s", out);
	free(out);
	cr_expect_eq(tu_tensorctl(&d, &out, "watch", "", NULL), 1);
	cr_expect(!strncmp(out, "tensorctl: '': ", 15) &&
			  strstr(out, "(to watch every name, add --prefix)"),
		  "%s", out);
	free(out);
	tu_daemon_stop(&d, false);
}

/*
 * A tensor bigger than --max-bytes itself was refused as "ALLOC of N
 * bytes exceeds --max-bytes (0 in use of L) and nothing more can be
 * evicted (what is held is leased, pinned or not yet published)": the
 * user went looking for leases that were not there.
 */
Test(ctl_messages, a_tensor_over_the_limit_itself_says_so)
{
	static const char *const extra[] = {"--max-bytes", "1M", NULL};
	static uint8_t zeros[800000];
	struct tu_daemon d;
	char path[160], *out;

	tu_daemon_start_args(&d, "error", extra);
	cr_expect_eq(tu_tensorctl(&d, &out, "put", "big", "--dtype", "u8",
				  "--shape", "2000000", "/dev/zero", NULL),
		     1);
	cr_expect(strstr(out, "big: ALLOC of 2000000 bytes is more than "
			      "--max-bytes itself (1048576)"),
		  "%s", out);
	free(out);
	/* one that would fit but for what is pinned keeps its reason */
	snprintf(path, sizeof(path), "%s/z.bin", d.dir);
	write_file(path, zeros, sizeof(zeros));
	cr_expect_eq(tu_tensorctl(&d, &out, "put", "p", "--dtype", "u8",
				  "--shape", "800000", "--pin", path, NULL),
		     0, "%s", out);
	free(out);
	cr_expect_eq(tu_tensorctl(&d, &out, "put", "q", "--dtype", "u8",
				  "--shape", "800000", path, NULL),
		     1);
	cr_expect(strstr(out, "q: ALLOC of 800000 bytes exceeds --max-bytes "
			      "(") &&
			  strstr(out, "nothing more can be evicted"),
		  "%s", out);
	free(out);
	unlink(path);
	tu_daemon_stop(&d, false);
}

/*
 * `tensorctl ls --socket PATH` where PATH is a socket that accepts and
 * never answers (another program's, a stopped tensord) never returned:
 * it now fails as a refusal (exit 1) naming the socket and what to check.
 * tu_tensorctl() fails the test, rather than hang, if it does not end.
 */
Test(ctl_messages, a_socket_that_never_answers_is_a_named_refusal)
{
	struct tu_daemon d = {0};
	char *out;
	int ls, rc;

	snprintf(d.sock, sizeof(d.sock), "/tmp/td-ctlmute-%d.sock",
		 (int)getpid());
	ls = tu_mute_listener(d.sock, 4);
	setenv("TENSORD_CONNECT_TIMEOUT_MS", "300", 1);
	rc = tu_tensorctl(&d, &out, "ls", NULL);
	unsetenv("TENSORD_CONNECT_TIMEOUT_MS");
	cr_expect_eq(rc, 1, "status %d: %s", rc, out);
	cr_expect(strstr(out, d.sock), "%s", out);
	cr_expect(strstr(out, "did not answer HELLO within 300 ms"), "%s", out);
	cr_expect(strstr(out, "does not answer"), "no hint: %s", out);
	cr_expect_eq(lines(out), 1, "%s", out);
	free(out);
	close(ls);
	unlink(d.sock);
}

/* `tensorctl ARGS` fails with status 1 saying shown (one line). */
static void expect_refusal(const struct tu_daemon *d, const char *shown,
			   const char *const *args)
{
	char *out;
	int rc = tu_tensorctl(d, &out, args[0], args[1], args[2], args[3],
			      args[4], args[5], args[6], args[7], NULL);

	cr_expect_eq(rc, 1, "%s: status %d: %s", args[0], rc, out);
	cr_expect(strstr(out, shown), "%s: '%s' not in: %s", args[0], shown,
		  out);
	cr_expect_eq(lines(out), 1, "%s", out);
	free(out);
}

#define REFUSED(d, shown, ...)                                                 \
	expect_refusal(d, shown, (const char *const[]){__VA_ARGS__, NULL,      \
						       NULL, NULL, NULL, NULL, \
						       NULL, NULL, NULL})

/*
 * The daemon's own socket typed where a file goes (a user mixing up the
 * --socket PATH with FILE, or -o): reading it said only "No such device
 * or address" (open(2)'s ENXIO of a socket), writing it only "connect:
 * Protocol wrong type for socket" (-o connects as a stream, the daemon
 * listens SOCK_SEQPACKET). Each now says what the path is.
 */
Test(ctl_messages, a_socket_given_as_a_file_is_said_to_be_one)
{
	static const char read_hint[] = "No such device or address (a "
					"socket, which is no file to read";
	static const char write_hint[] = "Protocol wrong type for socket (a "
					 "datagram or SOCK_SEQPACKET socket";
	struct tu_daemon d;
	char six[160], zdir[160], *out;

	start_with_six(&d, six, sizeof(six));
	snprintf(zdir, sizeof(zdir), "%s/z", d.dir);
	REFUSED(&d, read_hint, "put", "x", "--dtype", "u8", "--shape", "6",
		d.sock);
	REFUSED(&d, read_hint, "put", "x", "--format", "npy", d.sock);
	REFUSED(&d, read_hint, "inspect", d.sock);
	REFUSED(&d, read_hint, "load", d.sock);
	REFUSED(&d, read_hint, "load", d.sock, "--format", "hrry");
	REFUSED(&d, read_hint, "zarr", "export", zdir, "--from", d.sock);
	REFUSED(&d, write_hint, "get", "t", "-o", d.sock);
	REFUSED(&d, write_hint, "save", "-o", d.sock, "t");
	/* nothing was made, and the daemon still serves its socket */
	cr_expect_eq(access(zdir, F_OK), -1);
	cr_expect_eq(tu_tensorctl(&d, &out, "stat", "t", NULL), 0, "%s",
		     out);
	free(out);
	unlink(six);
	tu_daemon_stop(&d, false);
}

/* `tensorctl put x FILE` without --dtype and --shape: status 2 saying
 * shown (the hint, after the usage error). */
static void expect_put_usage(const struct tu_daemon *d, const char *file,
			     const char *shown)
{
	char *out;
	int rc = tu_tensorctl(d, &out, "put", "x", file, NULL);

	cr_expect_eq(rc, 2, "put %s: status %d: %s", file, rc, out);
	cr_expect(strstr(out, "--dtype and --shape are required"), "%s", out);
	cr_expect(strstr(out, shown), "put %s: '%s' not in: %s", file, shown,
		  out);
	free(out);
}

/*
 * A file handed to the command of another format: `zarr import run.tgm`
 * said only "Not a directory", `load out.zarr` and `inspect out.zarr`
 * only "Is a directory", `put x run.tgm` only that --dtype and --shape
 * are required, `zarr export D --from a.npy` only "no complete .tgm
 * message found" (where `load a.npy` named put). Each now names the
 * command that takes it; a file of no known kind is said as before.
 */
Test(ctl_messages, a_file_of_another_commands_kind_names_that_command)
{
	static const char tgm_hint[] = "a .tgm file: tensorctl load FILE";
	static const char hrry_hint[] = "a Hurray file: tensorctl load FILE";
	static const char npy_hint[] = "a NumPy .npy file: tensorctl put "
				       "NAME FILE";
	static const char zarr_hint[] = "a Zarr folder: tensorctl zarr "
					"import DIR";
	struct tu_daemon d;
	char six[160], tgm[160], hrry[160], npy[160], npyraw[160], zarr[160];
	char z2[160], *out;
	/* np.save of np.arange(2, dtype=np.uint8) (numpy 1.24): version
	 * 1.0, a header of 118 bytes padded with spaces, then 0 and 1 */
	static const char dict[] = "{'descr': '|u1', 'fortran_order': "
				   "False, 'shape': (2,), }";
	char npyb[130];

	memcpy(npyb, "\x93NUMPY\x01\x00\x76\x00", 10);
	memset(npyb + 10, ' ', 118);
	memcpy(npyb + 10, dict, strlen(dict));
	npyb[127] = '\n';
	npyb[128] = 0;
	npyb[129] = 1;
	start_with_six(&d, six, sizeof(six));
	snprintf(tgm, sizeof(tgm), "%s/run.tgm", d.dir);
	snprintf(hrry, sizeof(hrry), "%s/run.hrry", d.dir);
	snprintf(npy, sizeof(npy), "%s/a.npy", d.dir);
	snprintf(npyraw, sizeof(npyraw), "%s/a.bin", d.dir);
	snprintf(zarr, sizeof(zarr), "%s/out.zarr", d.dir);
	snprintf(z2, sizeof(z2), "%s/z2", d.dir);
	write_file(npy, npyb, sizeof(npyb));
	write_file(npyraw, npyb, sizeof(npyb));
	cr_assert_eq(tu_tensorctl(&d, &out, "put", "n", npy, NULL), 0, "%s",
		     out);
	free(out);
	cr_assert_eq(tu_tensorctl(&d, &out, "save", "-o", tgm, "t", NULL), 0,
		     "%s", out);
	free(out);
	cr_assert_eq(tu_tensorctl(&d, &out, "save", "-o", hrry, "t", NULL), 0,
		     "%s", out);
	free(out);
	cr_assert_eq(tu_tensorctl(&d, &out, "zarr", "export", zarr, "t",
				  NULL),
		     0, "%s", out);
	free(out);
	REFUSED(&d, "Not a directory (a .tgm file: tensorctl load FILE",
		"zarr", "import", tgm);
	REFUSED(&d, hrry_hint, "zarr", "import", hrry);
	REFUSED(&d, npy_hint, "zarr", "import", npy);
	REFUSED(&d, "Is a directory (a Zarr folder: tensorctl zarr import",
		"load", zarr);
	REFUSED(&d, zarr_hint, "inspect", zarr);
	REFUSED(&d, zarr_hint, "zarr", "export", z2, "--from", zarr);
	REFUSED(&d, "no complete .tgm message found (a NumPy .npy file: "
		    "tensorctl put NAME FILE",
		"zarr", "export", z2, "--from", npy);
	expect_put_usage(&d, tgm, tgm_hint);
	expect_put_usage(&d, hrry, hrry_hint);
	expect_put_usage(&d, zarr, zarr_hint);
	expect_put_usage(&d, npyraw, "; this is one: add --format npy");
	/* no known kind: said as before, no hint */
	REFUSED(&d, "six.bin: Not a directory\n", "zarr", "import", six);
	REFUSED(&d, "Is a directory\n", "load", d.dir);
	expect_put_usage(&d, six, "(but for a .npy file)\n");
	cr_expect_eq(access(z2, F_OK), -1);
	unlink(six);
	unlink(tgm);
	unlink(hrry);
	unlink(npy);
	unlink(npyraw);
	tu_daemon_stop(&d, false); /* the runner removes out.zarr */
}
