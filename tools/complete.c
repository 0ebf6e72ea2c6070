/* SPDX-License-Identifier: MIT */
/*
 * tensorctl __complete WORD...: the candidates for the last WORD of
 * `tensorctl WORD...` (the word being typed, "" for a new one), one a
 * line, for tools/tensorctl.bash. A line that starts with ':' says what
 * the script completes itself: ":files" (file names), ":dirs"
 * (directories), ":nospace" (no space after the candidates: a name cut
 * at a '/', as a shell cuts a path).
 *
 * A command's options are its own getopt table: the command is called as
 * for --help, tctl_getopt() handing the table over (tctl_getopt_grab),
 * so every option it takes is offered and none it refuses, whatever is
 * added later; it is asked again with the whole line, whose operands may
 * choose the command's form (load FILE.hrry), and an option the form
 * knows only to refuse (TCTL_OPT_NOT_HERE) is not offered. Names come from the daemon's LIST of the word typed so
 * far (--socket honoured); a daemon that is not there offers none, and
 * one that does not answer within COMPLETE_S seconds ends the completion
 * (SIGALRM), not the user's shell. Nothing is printed on stderr: it
 * would land in the middle of the command line being typed.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensord/blob.h"
#include "tensorctl.h"

#define COMPLETE_S 2

/*
 * A command's operands by position, a letter each: N a tensor name, F a
 * file, D a directory, S zarr's subcommand; a '*' repeats the letter
 * before it. "zarr SUB" has the operands after the subcommand.
 */
static const struct {
	const char *cmd;
	const char *operands;
} operand_kinds[] = {
	{"inspect", "F"},     {"put", "NF"},          {"get", "N"},
	{"ls", "N"},          {"stat", "N"},          {"rm", "N"},
	{"watch", "N"},       {"load", "F"},          {"save", "N*"},
	{"zarr", "S"},        {"zarr export", "DN*"}, {"zarr import", "D"},
};

/* What an option's value is: F a file, T a dtype, M the command's
 * --format choices (its synopsis names them); others: nothing offered. */
static const struct {
	const char *opt;
	char kind;
} value_kinds[] = {
	{"socket", 'F'}, {"output", 'F'}, {"from", 'F'},
	{"dtype", 'T'},  {"format", 'M'},
};

/* the command line up to the word being typed */
struct line {
	const char *cmd; /* the command, NULL while before it */
	const char *sub; /* zarr's subcommand */
	const struct option *opts;
	const char *so;            /* short options, getopt's form */
	const struct option *want; /* the next word is this option's value */
	int operands;              /* operands of cmd (sub) so far */
	bool dashdash;             /* after "--": operands only */
	bool from;                 /* zarr export --from: no NAMES */
};

static bool starts(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

static const struct option *long_opt(const struct option *o,
				     const char *name, size_t len)
{
	for (; o && o->name; o++)
		if (strlen(o->name) == len && !strncmp(o->name, name, len))
			return o;
	return NULL;
}

static const struct option *short_opt(const struct line *l, char c)
{
	for (const struct option *o = l->opts; o && o->name; o++)
		if (o->val == c)
			return o;
	return NULL;
}

/* The command's (or zarr subcommand's) getopt table, asked of it. */
static void grab(const struct tctl_cli *cli, struct line *l)
{
	static const struct option common[] = {TCTL_COMMON_OPTIONS};
	char *argv[3] = {(char *)l->cmd, (char *)l->sub, NULL};

	tctl_getopt_grab();
	for (size_t i = 0; i < cli->ncmds; i++)
		if (!strcmp(cli->cmds[i].name, l->cmd))
			cli->cmds[i].fn(l->sub ? 2 : 1, argv);
	l->opts = tctl_getopt_grabbed(&l->so);
	if (!l->opts) { /* zarr before its subcommand */
		l->opts = common;
		l->so = "";
	}
}

/* A --socket given on the line is where names come from; after
 * --from, zarr export takes no NAMES (it refuses them). */
static void value_seen(struct line *l, const struct option *o,
		       const char *v)
{
	if (!strcmp(o->name, "socket"))
		tctl_socket = v;
	else if (!strcmp(o->name, "from"))
		l->from = true;
}

/* An option word: the one whose value comes next, if any. */
static void option_word(struct line *l, const char *w)
{
	if (w[1] == '-') {
		const char *eq = strchr(w, '=');
		const struct option *o =
			long_opt(l->opts, w + 2,
				 eq ? (size_t)(eq - w - 2) : strlen(w + 2));

		if (o && eq)
			value_seen(l, o, eq + 1);
		else if (o && o->has_arg == required_argument)
			l->want = o;
		return;
	}
	for (const char *c = w + 1; *c; c++) {
		const char *at = strchr(l->so ? l->so : "", *c);

		if (!at || at[1] != ':')
			continue;
		if (!c[1])
			l->want = short_opt(l, *c);
		else if (short_opt(l, *c))
			value_seen(l, short_opt(l, *c), c + 1);
		return;
	}
}

static void word(const struct tctl_cli *cli, struct line *l, const char *w)
{
	if (l->want) {
		value_seen(l, l->want, w);
		l->want = NULL;
	} else if (l->cmd && !l->dashdash && !strcmp(w, "--")) {
		l->dashdash = true;
	} else if (!l->dashdash && w[0] == '-' && w[1]) {
		option_word(l, w);
	} else if (!l->cmd || (!strcmp(l->cmd, "zarr") && !l->sub)) {
		*(l->cmd ? &l->sub : &l->cmd) = w;
		grab(cli, l);
	} else {
		l->operands++;
	}
}

static void offer(const char *prefix, const char *cand, const char *cur)
{
	if (starts(cand, cur))
		printf("%s%s\n", prefix, cand);
}

/* --format's choices, from the synopsis: "--format raw|npy", of every
 * form ("load FILE.tgm ... [--format tgm] | load FILE.hrry ... [--format
 * hrry]"), each once */
static void format_choices(const char *cmd, const char *prefix,
			   const char *cur)
{
	const char *s = cmd ? tctl_synopsis(cmd) : NULL;
	char seen[64] = "|", choice[16];
	size_t n;

	for (const char *f = s ? strstr(s, "--format ") : NULL; f;
	     f = strstr(f + 9, "--format ")) {
		for (const char *at = f + 9;; at += n + 1) {
			n = strspn(at, "abcdefghijklmnopqrstuvwxyz");
			if (!n || n >= sizeof(choice))
				break;
			snprintf(choice, sizeof(choice), "|%.*s|", (int)n, at);
			if (!strstr(seen, choice) &&
			    strlen(seen) + n + 1 < sizeof(seen)) {
				strcat(seen, choice + 1);
				choice[n + 1] = 0;
				offer(prefix, choice + 1, cur);
			}
			if (at[n] != '|')
				break;
		}
	}
}

static void values(const struct line *l, const struct option *o,
		   const char *prefix, const char *cur)
{
	char kind = 0;

	for (size_t i = 0; i < sizeof(value_kinds) / sizeof(*value_kinds); i++)
		if (!strcmp(value_kinds[i].opt, o->name))
			kind = value_kinds[i].kind;
	if (kind == 'F') /* after --opt= too: the shell's word is after '=' */
		puts(":files");
	for (uint32_t d = 0; kind == 'T' && d < TD_DTYPE_COUNT_; d++)
		offer(prefix, td_dtype_name(d), cur);
	if (kind == 'M')
		format_choices(l->cmd, prefix, cur);
}

static void options(const struct line *l, const char *cur)
{
	for (const struct option *o = l->opts; o && o->name; o++)
		if (o->val != TCTL_OPT_NOT_HERE &&
		    starts(o->name, cur + (cur[1] == '-' ? 2 : 1)) &&
		    (!cur[1] || cur[1] == '-'))
			printf("--%s\n", o->name);
}

struct cut {
	const char *s;
	size_t len;
};

static int cut_cmp(const void *a, const void *b)
{
	const struct cut *x = a, *y = b;
	int c = strncmp(x->s, y->s, x->len < y->len ? x->len : y->len);

	return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* The names that start with cur, each cut after its next '/'. */
static void print_names(const struct td_entry *list, size_t n,
			const char *cur)
{
	struct cut *c = calloc(n ? n : 1, sizeof(*c));
	size_t k = 0, at = strlen(cur);
	bool dir = false;

	for (size_t i = 0; c && i < n; i++) {
		const char *s = list[i].name, *slash;

		if (!starts(s, cur))
			continue;
		slash = strchr(s + at, '/');
		c[k] = (struct cut){s, slash ? (size_t)(slash - s) + 1
					     : strlen(s)};
		dir |= slash != NULL;
		k++;
	}
	if (c)
		qsort(c, k, sizeof(*c), cut_cmp);
	if (dir)
		puts(":nospace");
	for (size_t i = 0; c && i < k; i++)
		if (!i || cut_cmp(&c[i - 1], &c[i]))
			printf("%.*s\n", (int)c[i].len, c[i].s);
	free(c);
}

static void names(const char *cur)
{
	struct td_error e = {0};
	struct td_entry *list;
	struct td_client *c;
	size_t n;

	if (tctl_connect(&c))
		return;
	if (!td_client_list(c, *cur ? cur : NULL, &list, &n, &e)) {
		print_names(list, n, cur);
		td_entry_list_free(list, n);
	}
	td_client_close(c);
}

static char operand_kind(const struct line *l)
{
	char key[32];
	const char *spec = NULL;
	int i = l->operands;
	size_t len;

	snprintf(key, sizeof(key), "%s%s%s", l->cmd, l->sub ? " " : "",
		 l->sub ? l->sub : "");
	if (l->from && !strcmp(key, "zarr export"))
		return i == 0 ? 'D' : 0;
	for (size_t k = 0; k < sizeof(operand_kinds) / sizeof(*operand_kinds);
	     k++)
		if (!strcmp(operand_kinds[k].cmd, key))
			spec = operand_kinds[k].operands;
	len = spec ? strlen(spec) : 0;
	if (len && spec[len - 1] == '*' && i >= (int)len - 2)
		return spec[len - 2];
	return i < (int)len ? spec[i] : 0;
}

static void operand(const struct tctl_cli *cli, const struct line *l,
		    const char *cur)
{
	switch (l->cmd ? operand_kind(l) : 'C') {
	case 'C':
		for (size_t i = 0; i < cli->ncmds; i++)
			offer("", cli->cmds[i].name, cur);
		break;
	case 'S':
		offer("", "export", cur);
		offer("", "import", cur);
		break;
	case 'N':
		names(cur);
		break;
	case 'F':
		puts(":files");
		break;
	case 'D':
		puts(":dirs");
		break;
	}
}

static void complete(const struct tctl_cli *cli, struct line *l,
		     const char *cur)
{
	const char *eq = strchr(cur, '=');
	const struct option *o;

	if (l->want) {
		values(l, l->want, "", cur);
	} else if (!l->dashdash && starts(cur, "--") && eq) {
		o = long_opt(l->opts, cur + 2, (size_t)(eq - cur - 2));
		if (o && o->has_arg == required_argument) {
			char prefix[64];

			snprintf(prefix, sizeof(prefix), "%.*s",
				 (int)(eq - cur + 1), cur);
			values(l, o, prefix, eq + 1);
		}
	} else if (!l->dashdash && cur[0] == '-') {
		options(l, cur);
	} else {
		operand(cli, l, cur);
	}
}

/*
 * The command's table once more, asked with the whole line before the
 * word being typed: a command whose form its operands choose hands over
 * that form's (load FILE.hrry: the Hurray load's, not the .tgm one's).
 */
static void regrab(const struct tctl_cli *cli, struct line *l, int argc,
		   char **words)
{
	char *argv[64];
	const char *so;
	const struct option *o;

	if (argc >= (int)(sizeof(argv) / sizeof(*argv)))
		return;
	memcpy(argv, words, (size_t)argc * sizeof(*argv));
	argv[argc] = NULL;
	tctl_getopt_grab();
	for (size_t i = 0; i < cli->ncmds; i++)
		if (!strcmp(cli->cmds[i].name, l->cmd))
			cli->cmds[i].fn(argc, argv);
	o = tctl_getopt_grabbed(&so);
	if (o) {
		l->opts = o;
		l->so = so;
	}
}

int tctl_complete(const struct tctl_cli *cli, int nwords, char **words)
{
	struct line l = {.opts = cli->global, .so = "h"};
	int null = open("/dev/null", O_WRONLY | O_CLOEXEC), at = -1;

	if (null >= 0) {
		dup2(null, 2);
		close(null);
	}
	alarm(COMPLETE_S);
	for (int i = 0; i + 1 < nwords; i++) {
		word(cli, &l, words[i]);
		if (l.cmd && at < 0)
			at = i;
	}
	if (l.cmd)
		regrab(cli, &l, nwords - 1 - at, words + at);
	complete(cli, &l, nwords > 0 ? words[nwords - 1] : "");
	return TCTL_OK;
}
