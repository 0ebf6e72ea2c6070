/* SPDX-License-Identifier: MIT */
#ifndef TD_TOOLS_TENSORCTL_H
#define TD_TOOLS_TENSORCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <getopt.h>
#include <stdio.h>

#include "err.h"
#include "tensord/tensord.h"

/* Exit statuses shared by every subcommand. */
enum {
	TCTL_OK = 0,
	TCTL_REFUSED = 1, /* the daemon, the input or a local file failed */
	TCTL_USAGE = 2,   /* bad command line */
	/* done, but --no-replace left names alone that exist (load, zarr
	 * import): what was not published is said on stderr */
	TCTL_SKIPPED = 3,
};

/* --json: results and errors as JSON on stdout */
extern int tctl_json;
/* --json anywhere on the line (before "--"), an option's value too: errors
 * are JSON even when the command line fails before --json is parsed;
 * results only with tctl_json (`put x --meta --json F` is no --json) */
extern int tctl_json_errors;
/* --bytes: sizes as raw byte counts instead of KiB, MiB, ... */
extern int tctl_raw_bytes;

/*
 * Report a failure and return status: "tensorctl: REASON" on stderr, or
 * with --json {"error":{"kind":KIND,"errno":ERR,"reason":REASON}} on
 * stdout. err is a positive errno (0: none).
 */
int tctl_fail(int status, const char *kind, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * Room for one more element of size bytes in the array at *pp holding n
 * of *cap (first: the capacity of the first allocation, doubled after):
 * 0, or tctl_fail()'s status for out of memory (*pp and *cap kept).
 */
int tctl_room(void *pp, size_t n, size_t *cap, size_t size, size_t first);

/*
 * "tensorctl: TEXT" and a newline on stderr, TEXT escaped as
 * tctl_text_escaped() escapes it. Every message tensorctl writes on
 * stderr goes through it (tctl_fail() and tctl_usage() too), so a name,
 * path or option value the user typed, or a daemon's reason quoting one
 * (`stat $'a\e[2Jb'`), cannot drive the terminal or fake a line, as the
 * names a file or the daemon gives cannot.
 */
void tctl_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Under --json a failure's object is the whole answer, but a command that
 * keeps what it did before the failure (--partial) must say what that was:
 * after tctl_json_hold() the next tctl_fail() keeps its object back,
 * tctl_json_held_add(KEY, VAL) adds KEY: VAL beside its "error" (VAL is
 * taken; dropped when no error is held), and run() prints it when the
 * command returns (tctl_json_held_print()). No-ops without --json.
 */
struct json_object;
void tctl_json_hold(void);
void tctl_json_held_add(const char *key, struct json_object *val);
void tctl_json_held_print(void);

/* Options every subcommand takes (tctl_getopt() handles them). */
enum {
	TCTL_OPT_SOCKET = 0x100,
	TCTL_OPT_JSON,
	TCTL_OPT_BYTES,
	TCTL_OPT_HELP,
	TCTL_OPT_FIRST_OWN, /* a command's own long-only options from here */
	/* an option a command knows only to refuse it with a reason (another
	 * form's: load FILE.hrry --message): never offered by completion */
	TCTL_OPT_NOT_HERE = 0x1ff,
	TCTL_OPT_DONE = -2, /* tctl_getopt(): return *status now */
};
/*
 * --socket "" (an unset shell variable) would fall back to the default
 * socket, another daemon than the one meant: refused, as tensord refuses
 * it.
 */
#define TCTL_EMPTY_SOCKET                                                     \
	"--socket needs a PATH (to use the default socket, leave --socket "  \
	"out)"
#define TCTL_COMMON_OPTIONS                                                   \
	{"socket", required_argument, NULL, TCTL_OPT_SOCKET},                 \
	{"json", no_argument, NULL, TCTL_OPT_JSON},                           \
	{"bytes", no_argument, NULL, TCTL_OPT_BYTES},                         \
	{"help", no_argument, NULL, TCTL_OPT_HELP}, {NULL, 0, NULL, 0}

/*
 * getopt_long() over a subcommand's argv (argv[0] its name; --opt=value
 * and --opt value alike, options anywhere). Handles the common options;
 * returns a command option, -1 at the end (operands from optind on), or
 * TCTL_OPT_DONE with *status: 0 after --help (full usage on stdout), or a
 * reported usage error.
 */
int tctl_getopt(int argc, char **argv, const char *shortopts,
		const struct option *longopts, int *status);
/*
 * tensorctl __complete (complete.c): from now on tctl_getopt() parses
 * nothing; it keeps the table it is given and returns TCTL_OPT_DONE with
 * status 0, as after --help, so that a command called then stops before
 * it does anything. tctl_getopt_grabbed() returns that table (NULL if
 * none came) and its short options.
 */
void tctl_getopt_grab(void);
const struct option *tctl_getopt_grabbed(const char **shortopts);
/* cmd's synopsis (help.c), NULL for no such command */
const char *tctl_synopsis(const char *cmd);
/* A usage error of cmd: the reason, then its usage, on stderr (or JSON). */
int tctl_usage(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/*
 * --opt's value arg (opt as "--count") as a decimal, with size one with
 * an optional K, M, G or T (powers of 1024), in [min, max], into *v:
 * TCTL_OK, or cmd's usage error saying what is wrong with it: "bad
 * --count 'x' (digits only: 1 to 18446744073709551615)", "bad --timeout '99999999999'
 * (more than 2147483647 milliseconds)", "bad --count '0' (less than 1)"
 * (unit: "" for none). A value past 2^64-1 was said "bad --count '...'
 * (1 or more)", or nothing of why.
 */
int tctl_opt_number(const char *cmd, const char *opt, const char *arg,
		    bool size, uint64_t min, uint64_t max, const char *unit,
		    uint64_t *v);
/*
 * --prefix P of cmd ("" for none): TCTL_OK, or cmd's usage error saying
 * why no name could start with it (a byte no name holds, "..", longer
 * than max bytes). One check for load (.tgm and Hurray) and zarr import:
 * a Hurray load took any prefix and refused every tensor one by one,
 * status 0, and zarr import said no reason.
 */
int tctl_check_prefix(const char *cmd, const char *prefix, size_t max);
/* The usage error of argv's operands (from optind) not being want:
 * need, and the first one too many when there are more. */
int tctl_operands(const char *cmd, int argc, char **argv, int want,
		  const char *need);
/* cmd's full usage on f. */
void tctl_help(const char *cmd, FILE *f);
/* Every command's synopsis and the common options (tensorctl --help). */
void tctl_help_all(FILE *f);
/* The command names, ", "-separated, into buf. */
void tctl_commands(char *buf, size_t len);
/* "1.5 GiB", "24 B" into buf; raw bytes with --bytes. Returns buf. */
char *tctl_size(char buf[32], uint64_t bytes);
/* Parse a size: digits with an optional K, M, G or T (powers of 1024). */
int tctl_parse_size(const char *s, uint64_t *v);

/* A command: its name and entry (tensorctl.c dispatches, complete.c asks). */
struct tctl_cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
};
struct tctl_cli {
	const struct tctl_cmd *cmds;
	size_t ncmds;
	const struct option *global; /* the options before the command */
};
/*
 * tensorctl __complete WORD...: what may stand at the last WORD (the one
 * being typed, "" for a new one) of `tensorctl WORD...`, one candidate a
 * line, for the shell's completion (tools/tensorctl.bash). Always 0.
 */
#define TCTL_COMPLETE "__complete"
int tctl_complete(const struct tctl_cli *cli, int nwords, char **words);

int cmd_inspect(int argc, char **argv);
/* daemon commands (cmd-*.c), over the public client API only */
int cmd_put(int argc, char **argv);
int cmd_get(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_watch(int argc, char **argv);
int cmd_load(int argc, char **argv);
int cmd_save(int argc, char **argv);
int cmd_zarr(int argc, char **argv);
/* zarr import (cmd-zarr-import.c); argv[0] is "zarr" */
int cmd_zarr_import(int argc, char **argv);
/* zarr-into.c: export into an existing empty mount point, or an empty
 * folder whose parent this user may not write (cmd-zarr.c) */
bool tctl_zarr_is_mount_root(const char *dir);
bool tctl_zarr_parent_is_closed(const char *dir);
int tctl_zarr_move_up(const char *dir, const char *tmp,
                      const char *const *names, size_t n, char *step,
                      size_t cap);
int cmd_status(int argc, char **argv);

/* --socket PATH (global or per command); NULL = the library's default */
extern const char *tctl_socket;
/* Connect; TCTL_OK or TCTL_REFUSED with the reason printed. */
int tctl_connect(struct td_client **c);
/* Report "what: reason" of a daemon refusal; TCTL_REFUSED. */
int tctl_refused(const char *what, int rc, const struct td_error *e);
/*
 * The daemon's refusal of arg (a NAME or PREFIX typed) for cmd, told as
 * tctl_refused(who); a glob (`rm 'cam/?'`, a shell habit) gets hint
 * beside it, since the daemon only says '?' is no name byte. With
 * prefix_tail (commands of one NAME: rm, stat) a NAME ending in '/' is
 * told that `ls` lists the names under it, then prefix_tail: the daemon
 * only says a name does not end with '/'.
 */
int tctl_refused_glob(const char *cmd, const char *who, const char *arg,
		      int rc, const struct td_error *e, const char *hint,
		      const char *prefix_tail);
/* Decimal u64 (no sign); 0 or -EINVAL. */
int tctl_parse_u64(const char *s, uint64_t *v);
/* "2,3" or "2x3" (also "(2,3)", "[2,3]", "(2, 3)", "(6,)": as ls,
 * --json and Python print a shape) into shape[TD_ENTRY_MAX_DIMS]; 0,
 * -E2BIG (more dimensions), -ERANGE (one past 2^64-1) or -EINVAL. */
int tctl_parse_shape(const char *s, uint64_t *shape, uint32_t *ndim);
/* (2,3) for humans, [2,3] for JSON */
void tctl_print_shape(FILE *f, const uint64_t *shape, uint32_t ndim,
		      int json);
/* "meta":"..." when UTF-8, else "meta_hex":"..." */
void tctl_json_meta(FILE *f, const void *meta, size_t len);
/*
 * One LIST/STAT entry: a line, or a JSON object (no newline). rs: a
 * ring's RING_STAT (slots, subscribers) to add, or NULL.
 */
/* stat's metadata line ("  metadata (N B): text", escaped; hex when it
 * is not UTF-8); nothing when there is none. */
void tctl_text_meta(FILE *f, const void *meta, size_t len);
/* text[0, len) for a terminal: '\\', \n, \t, other control bytes as
 * \xNN, C1 controls as \u00NN; the rest as it is */
void tctl_text_escaped(FILE *f, const void *text, size_t len);
void tctl_print_entry(const struct td_entry *e, int json,
		      const struct td_ring_stat *rs);

/* inspect back ends, chosen by magic; return a TCTL_ status */
/* path: the file as typed, named in a refusal's line */
int inspect_blob(const char *path, const uint8_t *buf, size_t len, int json);
struct tgm_src;
/* a .tgm file read with pread, or a stream read whole (tgm-file.h) */
int inspect_tgm(struct tgm_src *s, int json);
struct tgm_stream;
struct td_tgm_span;
/* the same of a stream, a message at a time (the first, sp in s, found
 * already by tgm_stream_next()) */
int inspect_tgm_stream(struct tgm_stream *st, struct td_tgm_span *sp,
		       struct tgm_src *s, int json);
/* 1 when s is a .tgm file: TENSOGRM magic, or a message after junk; a
 * file is read only its first few KiB far */
int inspect_tgm_sniff_src(struct tgm_src *s);

/* Hurray files (hrry.c): inspect back end, load and save. inspect_hrry
 * of buf, or (buf NULL) of the file at path, read with pread. */
int inspect_hrry(const char *path, const uint8_t *buf, size_t len, int json);
/* 1 when buf starts with the HRRYFILE magic */
int inspect_hrry_sniff(const uint8_t *buf, size_t len);
/* 1 when a load/save command line names a Hurray file (--format hrry,
 * a .hrry name, or with by_magic an existing file with the magic);
 * opts: the command's option table, whose values are no file */
int tctl_hrry_wanted(int argc, char **argv, int by_magic,
		     const struct option *opts);
int cmd_load_hrry(int argc, char **argv);
/* The metadata save keeps for the Hurray tensor e (KV
 * "tensord:NAME#meta", bytes; a snapshot's key too), or NULL with *len 0. */
struct td_hrry_file_reader;
struct td_hrry_entry;
const void *tctl_hrry_meta(struct td_hrry_file_reader *r,
			   const struct td_hrry_entry *e, size_t *len);
/* load -: stdin, whose magic the .tgm load read, is a Hurray file, spooled
 * (tctl_in_spool()) to the file spool, which this takes (closes). */
int tctl_load_hrry_stdin(int argc, char **argv, int spool);
/*
 * A reader transport over path (read by pread, never mapped: tools/hrry.c
 * says why) in *t, the file's descriptor in *fd: close it after the
 * reader is freed (the transport borrows it). TCTL_OK or reported.
 */
struct td_hrry_transport;
int tctl_hrry_transport(const char *path, struct td_hrry_transport *t,
			int *fd);
/*
 * --no-replace (load, zarr import): tctl_no_replace() makes p a publish
 * the daemon refuses when the name has a version (TD_PUBLISH_IF, 0), so
 * a name a producer publishes after any look of ours is never replaced.
 * tctl_pub_refused(): such a refusal (-EEXIST) is said on stderr as
 * "NAME: skipped: REASON (--no-replace)" and is TCTL_SKIPPED, the name
 * added to the --json "skipped" array sk (may be NULL); anything else is
 * tctl_refused(). A daemon without the condition fails the publish
 * (-EOPNOTSUPP), so nothing is published unconditionally.
 */
void tctl_no_replace(struct td_publish *p);
int tctl_pub_refused(const char *name, int rc, const struct td_error *e,
		     bool no_replace, struct json_object *sk);
/* Delete name if STAT still shows version (a failed load's roll back);
 * 1 when removed, else says why on stderr (cmd-load.c). */
int tctl_roll_back_one(struct td_client *c, const char *name,
		       uint64_t version);
int cmd_save_hrry(int argc, char **argv);

/* save-common.c: NULL when t is one dense C-order unquantized plane,
 * else why it cannot be saved */
/* Wait for t's fence (no fence: at once): TCTL_OK, or TCTL_REFUSED with
 * libtensord's reason printed, naming name. */
int tctl_fence_wait(const char *name, const struct td_tensor *t,
                    int timeout_ms);
/* Why the CPU cannot read t's bytes as its layout says (a plane with a
 * DRM format modifier, or one not mapped), or NULL. */
const char *tctl_cpu_unreadable(const struct td_tensor *t);
const char *tctl_dense_unsavable(const struct td_tensor *t);
/* Whether name's GET, which failed with rc, is left out of a command over
 * every tensor (listed: the names came from a LIST): a tensor deleted
 * since (-ENOENT) is, and said so on stderr; anything else fails it. */
bool tctl_gone_since_list(const char *cmd, const char *name, int rc,
                          bool listed);
/*
 * The latest version of each of names[0..n) leased at one instant
 * (td_client_get_many) into out[0..n): whether they were, for 2 to
 * TD_MANY_MAX names, so that a save of pairs (a trainer's image and
 * label) holds one step. Anything else (more names, one name, a daemon
 * without TD_WIRE_FEAT_MANY, a name missing, refused or a ring) leaves
 * every out[i] NULL, and the caller reads each name on its own, whose
 * failures it reports as ever.
 */
bool tctl_get_together(struct td_client *c, const char *const *names,
                       size_t n, struct td_tensor **out);
/*
 * The NAMES of an export (save, zarr export), in order: each as given,
 * except one ending in '/', which stands for every tensor whose name
 * starts with it, in name order, as `ls PREFIX` lists them (the library's
 * LIST; rings left out unless rings). listed[i]: v[i] came from a LIST
 * (tctl_gone_since_list()). A prefix nothing has is an error, as a
 * missing name is. Each name comes once, where it first stands (given
 * and under a NAME/, or given twice); listed only when every one of it
 * was. TCTL_OK or a status; tctl_names_fini() either way.
 */
struct tctl_names {
	char **v;
	bool *listed;
	size_t n;
};
int tctl_names_expand(struct td_client *c, const char *cmd,
                      char *const *args, size_t nargs, bool rings,
                      struct tctl_names *out);
void tctl_names_fini(struct tctl_names *names);
/* Whether a tensor save cannot hold (why) is left out: with
 * --skip-unsavable (skip) it is, said on stderr; else it fails the save. */
bool tctl_unsavable_left_out(const char *name, const char *why, bool skip);

/* zarr-hrry-kv.c: the KV of a Hurray file as one JSON object (bytes as
 * hex, non-finite floats as sentinels) for _tensord_hurray_kv; NULL when
 * it has none. */
struct json_object;
struct td_hrry_file_reader;
struct json_object *tctl_hrry_kv_json(const struct td_hrry_file_reader *r);

/* npy.c: NumPy .npy files for put and get. *npy = 1 when format
 * ("raw", "npy" or NULL: by path's .npy ending) is npy; TCTL_OK or a
 * usage error of cmd. */
int tctl_npy_format(const char *cmd, const char *format, const char *path,
		    int *npy);
/* Read and decode the .npy header at the start of in (a regular file's
 * size becomes what follows it: the data). TCTL_OK or reported. */
struct tctl_in;
struct td_npy_header;
int tctl_npy_read_header(struct tctl_in *in, struct td_npy_header *h);
/* t (called name in messages) as a .npy file at out (output.h): one dense
 * unquantized plane, else refused. TCTL_OK or reported. */
/* Whether buf (len bytes) starts with the .npy magic. */
bool tctl_npy_sniff(const uint8_t *buf, size_t len);
/* tensorctl inspect of a .npy file: a regular file at path (buf NULL:
 * only its header is read) or a stream read whole into buf; its header
 * and whether the data is whole (TCTL_REFUSED when not). */
int tctl_npy_inspect(const char *path, const uint8_t *buf, size_t len);
/* The same of a stream whose first hl bytes were read into head: its
 * header read, the rest counted a fixed piece at a time, never held. */
int tctl_npy_inspect_stream(const char *path, struct tctl_in *in,
			    const uint8_t *head, size_t hl);
int tctl_npy_write(const struct td_tensor *t, const char *name,
		   const char *out);

/* Print a blob decoder's refusal of path: JSON on stdout, or one line on
 * stderr that names path and what it was read as. */
void tctl_print_td_err(const struct td_err *e, int json, const char *path);

/* Print a json-c object on stdout (one line) and drop it; TCTL_OK. */
struct json_object;
int tctl_json_print(struct json_object *o);
/*
 * Flush stdout: 0, or the errno its writes failed with (the first one,
 * remembered: a later flush with nothing left to write cannot clear it).
 */
int tctl_stdout_error(void);

#endif
