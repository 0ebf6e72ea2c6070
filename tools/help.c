/* SPDX-License-Identifier: MIT */
/*
 * What tensorctl says of its commands: synopsis and options of each, the
 * usage errors, and tctl_getopt() over a command's argv. Below every
 * command (they call it for their usage errors), above none of them:
 * tensorctl.c dispatches by the same names.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorctl.h"
#include "wire.h"

static const struct cmd {
	const char *name;
	const char *synopsis;
	const char *help; /* its own options, one per line */
} cmds[] = {
	{"inspect", "inspect [--max-bytes N] FILE|-",
	 "Decode a tensor blob, a .tgm, a Hurray .hrry or a NumPy .npy file\n"
	 "(recognised by its magic) and print every field; a .tgm file its\n"
	 "frames, descriptors and metadata (as JSON), a .hrry file a status\n"
	 "per tensor (ok, unsupported, invalid), a .npy file whether its data\n"
	 "is whole. A refused file exits with status 1.\n"
	 "  --max-bytes N   hold a stream (stdin, FIFO, device) up to N bytes\n"
	 "                  at once, a .tgm stream a message at a time (K, M,\n"
	 "                  G, T suffixes; default 1G), of a .npy stream\n"
	 "                  its header (the data is counted, not held);\n"
	 "                  held in a spool file in $TMPDIR (/tmp); a\n"
	 "                  regular file is read by its size\n"},
	{"put",
	 "put NAME --dtype T --shape D,D.. [--meta STR] [--pin] FILE|- | "
	 "put NAME [--dtype T] [--shape D,D..] [--meta STR] [--pin] "
	 "FILE.npy|- [--format raw|npy]",
	 "Publish the bytes of FILE (- = stdin) as tensor NAME. The input must\n"
	 "hold exactly the bytes the shape and dtype need.\n"
	 "A NumPy .npy file (by its .npy name, or --format npy) brings its\n"
	 "dtype and shape in its header (--dtype and --shape, if given, must\n"
	 "match it); big-endian data is byte-swapped to host order. C order\n"
	 "only (fortran_order is refused), and the dtypes below.\n"
	 "  --dtype T       element type: u8 i8 u16 i16 u32 i32 u64 i64 f16\n"
	 "                  f32 f64, or numpy's names (uint8 ... float64)\n"
	 "  --shape D,D..   dimensions, outermost first (2,3 or 2x3, or as\n"
	 "                  ls and Python print one: (2,3) (2, 3) [2,3];\n"
	 "                  \"\" or () is a 0-d scalar)\n"
	 "  --format F      raw or npy (default: npy for a .npy name)\n"
	 "  --meta STR      opaque metadata stored with the tensor\n"
	 "  --pin           the daemon never evicts this version\n"},
	{"get",
	 "get NAME [--version N | --newer N] [--timeout MS] [-o FILE|-] "
	 "[--format raw|npy]",
	 "Write a tensor's raw bytes (its planes in order) to FILE, or with\n"
	 "--json print its description instead. Without -o the bytes go to\n"
	 "stdout, which must not be a terminal (-o - writes there anyway).\n"
	 "With -o FILE.npy or --format npy: a NumPy .npy file (np.save's\n"
	 "header, then the bytes); a tensor it cannot hold (several planes,\n"
	 "quantized, strided) is refused.\n"
	 "  --version N     exactly version N\n"
	 "  --newer N       the current version if newer than N, else wait\n"
	 "                  for the next one (versions in between are skipped)\n"
	 "  --timeout MS    give up waiting after MS milliseconds (without\n"
	 "                  it, wait for ever): with --newer for the version,\n"
	 "                  and always again for its fence, if it has one\n"
	 "  -o, --output F  where to write (- = stdout); see OUTPUTS\n"
	 "  --format F      raw or npy (default: npy for a .npy name)\n"},
	{"ls", "ls [PREFIX]",
	 "List tensors and rings whose name starts with PREFIX.\n"},
	{"stat", "stat NAME", "Describe the latest version of NAME, and its "
			      "metadata (escaped text, or hex).\n"},
	{"rm", "rm NAME", "Remove NAME (leased versions live on).\n"},
	{"watch", "watch NAME|PREFIX [--prefix] [--count N]",
	 "One line per event: published NAME VERSION, deleted NAME VERSION.\n"
	 "With TENSORD_RECONNECT=1 it waits out a daemon restart and says\n"
	 "'reconnected  1'.\n"
	 "  --prefix        NAME is a prefix\n"
	 "  --count N       stop after N events\n"},
	{"load",
	 "load FILE.tgm|- [--message N] [--prefix P] [--variable-key K] "
	 "[--partial] [--no-replace] [--max-bytes N] [--format tgm] | "
	 "load FILE.hrry|- [--prefix P] [--partial] [--no-replace] "
	 "[--max-bytes N] [--format hrry]",
	 "Publish every data object of every message of a .tgm file. All or\n"
	 "nothing: everything is checked first, and when the daemon refuses an\n"
	 "object the versions already published are deleted again and the\n"
	 "versions they replaced put back (as new versions).\n"
	 "A Hurray file (by its .hrry name, --format hrry, or its magic, on\n"
	 "stdin too) publishes every\n"
	 "tensor tensord supports (composite members under their own names)\n"
	 "and lists each one it refused with the reason.\n"
	 "  --message N     only message N (0 = the first)\n"
	 "  --prefix P      put P before every name (e.g. run1/)\n"
	 "  --variable-key K  dotted metadata path tried first for names\n"
	 "                  (--name-key K, as zarr export calls it, too)\n"
	 "  --partial       keep what was published before a refusal\n"
	 "  --no-replace    publish only names that have no version; one\n"
	 "                  that has (even one published meanwhile) is left\n"
	 "                  alone, said on stderr, and the exit status is 3\n"
	 "  --max-bytes N   hold a stream up to N bytes at once, a .tgm\n"
	 "                  stream a message at a time (default 1G), held\n"
	 "                  in a spool file in $TMPDIR (/tmp); a Hurray\n"
	 "                  stream is spooled there whole, up to N bytes\n"
	 "  --format F      tgm or hrry (default: by the name or magic)\n"},
	{"status", "status",
	 "The daemon's version, uptime, tensors, bytes, rings, refusal and\n"
	 "eviction counters, its clients (pid, uid, command, leases, bytes\n"
	 "held, requests) and per-uid bytes, quota and pinned bytes. Root and\n"
	 "the daemon's uid see every client; others see their own uid's.\n"},
	{"save",
	 "save -o FILE.tgm|- [NAME...] [--format tgm] [--skip-unsavable] | "
	 "save -o FILE.hrry|- [NAME...] [--format hrry] "
	 "[--skip-unsavable]",
	 "Write tensors as one hashed Tensogram message (one per batch past\n"
	 "the lease caps), or as a Hurray file\n"
	 "when -o ends in .hrry or --format hrry is given (one forward pass).\n"
	 "Without NAME: every tensor but rings (one deleted meanwhile is\n"
	 "left out, said on stderr); NAME/ is every one under NAME/, as ls\n"
	 "lists them. A tensor the file cannot\n"
	 "hold (several planes, quantized, strided) fails the save.\n"
	 "  -o, --output F      where to write (- = stdout); see OUTPUTS\n"
	 "  --format F          tgm or hrry (default: by the -o name)\n"
	 "  --skip-unsavable    leave out, said on stderr, a tensor the file\n"
	 "                      cannot hold, instead of failing the save\n"},
	{"zarr",
	 "zarr export DIR [NAMES...] | zarr export DIR --from FILE.tgm|- "
	 "[--message N] [--name-key K] [--max-bytes N] | "
	 "zarr export DIR --from FILE.hrry | "
	 "zarr import DIR [--prefix P] [--partial] [--no-replace]",
	 "Write tensors (NAMES, NAME/ for every one under it, or every\n"
	 "tensor), the objects of one .tgm\n"
	 "message or the tensors of a Hurray file as a Zarr v3 hierarchy in\n"
	 "DIR (one group, one single-chunk array per tensor), or publish\n"
	 "every array of such a hierarchy (all or nothing: a refusal\n"
	 "deletes what was published and puts back what it replaced,\n"
	 "unless --partial).\n"
	 "DIR must not exist or be empty; it appears whole or not at all.\n"
	 "  --from FILE     export a .tgm message or a .hrry file (no daemon\n"
	 "                  needed; Hurray by name or magic)\n"
	 "  --message N     which message of FILE (default 0)\n"
	 "  --name-key K    dotted metadata path tried first for names\n"
	 "  --max-bytes N   hold a stream up to N bytes at once, a .tgm\n"
	 "                  stream a message at a time (default 1G), held\n"
	 "                  in a spool file in $TMPDIR (/tmp)\n"
	 "  --prefix P      import: put P before every name\n"
	 "  --partial       import: keep what was published before a refusal\n"
	 "  --no-replace    import: publish only names that have no version;\n"
	 "                  the others are said on stderr, exit status 3\n"},
};

#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

static const char common_help[] =
	"\ncommon options:\n"
	"  --socket PATH   the daemon's socket (default: $TENSORD_SOCKET, else\n"
	"                  $XDG_RUNTIME_DIR/tensord.sock, else\n"
	"                  /run/tensord/tensord.sock)\n"
	"  --json          results and errors as JSON on stdout (an error is\n"
	"                  {\"error\":{\"kind\":...,\"errno\":...,\"reason\":...}})\n"
	"  --bytes         sizes in bytes instead of KiB, MiB, ...\n"
	"  -h, --help      this help\n"
	"\nexit status: 0 done, 1 refused or failed, 2 bad command line, 3\n"
	"done but names left alone (load, zarr import --no-replace)\n";

static const char outputs_help[] =
	"\nOUTPUTS: a regular file is replaced atomically, keeping its mode and\n"
	"owner; a file with several hard links is rewritten in place; a symlink\n"
	"is followed (as cp does); a device, FIFO or socket is written where it\n"
	"is; a directory is refused. A failed or interrupted write leaves the\n"
	"old file as it was.\n";

static const struct cmd *find(const char *name)
{
	for (size_t i = 0; i < NCMDS; i++)
		if (!strcmp(cmds[i].name, name))
			return &cmds[i];
	return NULL;
}

void tctl_help(const char *name, FILE *f)
{
	const struct cmd *c = find(name);

	if (!c)
		return;
	fprintf(f, "usage: tensorctl %s\n\n%s%s", c->synopsis, c->help,
		common_help);
	if (strstr(c->help, "OUTPUTS"))
		fputs(outputs_help, f);
}

void tctl_commands(char *buf, size_t len)
{
	size_t o = 0;

	buf[0] = 0;
	for (size_t i = 0; i < NCMDS && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "",
				      cmds[i].name);
}

void tctl_help_all(FILE *f)
{
	fprintf(f, "usage: tensorctl [--socket PATH] [--json] [--bytes] "
		   "COMMAND [ARGS]\n\ncommands:\n");
	for (size_t i = 0; i < NCMDS; i++)
		fprintf(f, "  tensorctl %s\n", cmds[i].synopsis);
	fprintf(f, "\n  tensorctl --help | --version\n"
		   "  tensorctl COMMAND --help   a command's options\n");
	fputs(common_help, f);
}

int tctl_usage(const char *cmd, const char *fmt, ...)
{
	char reason[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	tctl_fail(TCTL_USAGE, "usage", 22 /* EINVAL */, "%s%s%s",
		  cmd ? cmd : "", cmd ? ": " : "", reason);
	if (!tctl_json && !tctl_json_errors && cmd && find(cmd))
		fprintf(stderr, "usage: tensorctl %s\n"
				"Try 'tensorctl %s --help'.\n",
			find(cmd)->synopsis, cmd);
	return TCTL_USAGE;
}

int tctl_opt_number(const char *cmd, const char *opt, const char *arg,
		    bool size, uint64_t min, uint64_t max, const char *unit,
		    uint64_t *v)
{
	size_t digits = strspn(arg, "0123456789");
	const char *rest = arg + digits;
	uint64_t x = 0;
	bool over = false;

	if (size && (!digits || (*rest && (!strchr("KMGT", *rest) ||
					   rest[1]))))
		return tctl_usage(cmd, "bad %s '%s' (digits, then K, M, G or "
				  "T at most)",
				  opt, arg);
	if (!digits || (!size && *rest))
		return tctl_usage(cmd, "bad %s '%s' (digits only: %" PRIu64
				  " to %" PRIu64 "%s%s)",
				  opt, arg, min, max, *unit ? " " : "", unit);
	/* digits, so tctl_parse_*() fails only of a value past 2^64-1 */
	over = size ? tctl_parse_size(arg, &x) < 0
		    : tctl_parse_u64(arg, &x) < 0;
	if (over || x > max)
		return tctl_usage(cmd, "bad %s '%s' (more than %" PRIu64
				  "%s%s)",
				  opt, arg, max, *unit ? " " : "", unit);
	if (x < min)
		return tctl_usage(cmd, "bad %s '%s' (less than %" PRIu64
				  "%s%s)",
				  opt, arg, min, *unit ? " " : "", unit);
	*v = x;
	return TCTL_OK;
}

int tctl_check_prefix(const char *cmd, const char *prefix, size_t max)
{
	size_t len = strlen(prefix);
	const char *why = NULL;

	if (!len)
		return TCTL_OK;
	if (len > max)
		return tctl_usage(cmd, "bad --prefix '%s' (longer than %zu "
				  "bytes)",
				  prefix, max);
	if (td_wire_name_check(prefix, len, true, &why) < 0)
		return tctl_usage(cmd, "bad --prefix '%s' (%s)", prefix, why);
	return TCTL_OK;
}

/* tensorctl __complete: a command's getopt table, handed over (complete.c) */
static struct {
	bool on;
	const char *shortopts;
	const struct option *longopts;
} grab;

void tctl_getopt_grab(void)
{
	grab = (typeof(grab)){.on = true};
}

const struct option *tctl_getopt_grabbed(const char **shortopts)
{
	*shortopts = grab.shortopts;
	return grab.longopts;
}

const char *tctl_synopsis(const char *cmd)
{
	const struct cmd *c = find(cmd);

	return c ? c->synopsis : NULL;
}

/* The command line as it was typed (getopt_long permutes argv) and the
 * options it was parsed with, for tctl_operands(). */
static struct {
	char **argv;
	int argc;
	const struct option *longopts;
} typed;

static void keep_typed(int argc, char **argv, const struct option *longopts)
{
	free(typed.argv);
	typed.argv = malloc(sizeof(*argv) * (size_t)(argc + 1));
	typed.argc = typed.argv ? argc : 0;
	if (typed.argv)
		memcpy(typed.argv, argv, sizeof(*argv) * (size_t)argc);
	typed.longopts = longopts;
}

/* A long option that takes a value: "--shape" (len: up to an '='). */
static bool takes_value(const char *o, size_t len)
{
	for (const struct option *l = typed.longopts; l && l->name; l++)
		if (strlen(l->name) == len && !strncmp(l->name, o, len))
			return l->has_arg == required_argument;
	return false;
}

/* The typed word at i is all digits and comes right after the value of
 * a long option: `--shape 2 3`, `--shape=2 3`. */
static bool after_a_value(int i)
{
	const char *w = typed.argv[i], *v = i >= 1 ? typed.argv[i - 1] : "",
		   *o = i >= 2 ? typed.argv[i - 2] : "", *eq = strchr(v, '=');

	if (!*w || w[strspn(w, "0123456789")])
		return false;
	if (!strncmp(v, "--", 2) && eq)
		return takes_value(v + 2, (size_t)(eq - v - 2));
	return !strncmp(o, "--", 2) && !strchr(o, '=') &&
	       takes_value(o + 2, strlen(o + 2));
}

int tctl_operands(const char *cmd, int argc, char **argv, int want,
		   const char *need)
{
	/* name the operand too many: the digits after a value (`--shape 2
	 * 3` for 2,3, a value with a space not quoted) wherever the other
	 * operands are, else the first past those the command takes (a
	 * second FILE) */
	if (argc - optind <= want)
		return tctl_usage(cmd, "%s", need);
	for (int i = 0; i < typed.argc; i++)
		for (int k = optind; k < argc; k++)
			if (argv[k] == typed.argv[i] && after_a_value(i))
				return tctl_usage(cmd, "%s; unexpected "
						  "operand '%s'", need,
						  argv[k]);
	return tctl_usage(cmd, "%s; unexpected operand '%s'", need,
			  argv[optind + want]);
}

int tctl_getopt(int argc, char **argv, const char *shortopts,
		const struct option *longopts, int *status)
{
	static char **seen;
	char so[64];
	int c;

	if (grab.on) {
		/* as for --help: the command returns before it does a thing */
		grab.shortopts = shortopts;
		grab.longopts = longopts;
		*status = TCTL_OK;
		return TCTL_OPT_DONE;
	}
	if (seen != argv) {
		/* a new command line: start getopt afresh */
		seen = argv;
		optind = 0;
		keep_typed(argc, argv, longopts);
	}
	opterr = 0;
	snprintf(so, sizeof(so), ":h%s", shortopts);
	c = getopt_long(argc, argv, so, longopts, NULL);
	switch (c) {
	case TCTL_OPT_SOCKET:
		if (!*optarg) {
			*status = tctl_usage(argv[0], TCTL_EMPTY_SOCKET);
			return TCTL_OPT_DONE;
		}
		tctl_socket = optarg;
		return tctl_getopt(argc, argv, shortopts, longopts, status);
	case TCTL_OPT_JSON:
		tctl_json = 1;
		return tctl_getopt(argc, argv, shortopts, longopts, status);
	case TCTL_OPT_BYTES:
		tctl_raw_bytes = 1;
		return tctl_getopt(argc, argv, shortopts, longopts, status);
	case 'h':
	case TCTL_OPT_HELP:
		tctl_help(argv[0], stdout);
		*status = TCTL_OK;
		return TCTL_OPT_DONE;
	case ':':
		*status = tctl_usage(argv[0], "option '%s' needs a value",
				     argv[optind - 1]);
		return TCTL_OPT_DONE;
	case '?':
		/* `--json=1`: getopt says so with the option's value in
		 * optopt, which is no letter (0x101), and the message was
		 * "unknown option '-\x01'" */
		if (optopt && !strncmp(argv[optind - 1], "--", 2))
			*status = tctl_usage(
				argv[0], "option '%.*s' takes no value",
				(int)strcspn(argv[optind - 1], "="),
				argv[optind - 1]);
		else if (optopt)
			*status = tctl_usage(argv[0], "unknown option '-%c'",
					     optopt);
		else
			*status = tctl_usage(argv[0], "unknown option '%s'",
					     argv[optind - 1]);
		return TCTL_OPT_DONE;
	default:
		return c;
	}
}
