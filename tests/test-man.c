/* SPDX-License-Identifier: MIT */
/*
 * The man pages say what the programs do: every option tensord --help
 * lists, every command tensorctl --help lists and every option of each
 * (in docs/tensorctl.md too) has its entry and every option their
 * synopses name is one the command takes, every policy keyword the
 * parser knows is described, every td_ function the library page names
 * exists in the header, every environment variable the code reads is on
 * the page of the program that reads it (the Python binding's in
 * docs/python.md), and every page was rendered. And the documents
 * against the code: tensorctl's --json error kinds, the /metrics
 * table, the bench programs, the ThreadSanitizer run CI makes, every
 * test and source path they cite.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

TestSuite(man, .timeout = TU_TEST_TIMEOUT_S);

static char *source(const char *rel)
{
	char path[4096];
	const char *root = getenv("TD_SOURCE_ROOT");
	cr_assert(root, "TD_SOURCE_ROOT is set by meson");
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	size_t len;
	char *text = (char *)tu_read_file(path, &len);
	text[len] = 0; /* tu_read_file allocates one byte more */
	return text;
}

/* Every match of group `g` of `re` in `text`, passed to `fn`. */
static int each_group(const char *text, const char *re, int g,
		      void (*fn)(const char *word, void *arg), void *arg)
{
	regex_t rx;
	regmatch_t m[4];
	int n = 0;
	cr_assert(g >= 1 && g < 4);
	cr_assert(regcomp(&rx, re, REG_EXTENDED | REG_NEWLINE) == 0);
	for (const char *p = text; regexec(&rx, p, 4, m, 0) == 0;
	     p += m[0].rm_eo, n++) {
		char word[256];
		int len = (int)(m[g].rm_eo - m[g].rm_so);
		cr_assert(len > 0 && len < (int)sizeof(word));
		memcpy(word, p + m[g].rm_so, (size_t)len);
		word[len] = 0;
		fn(word, arg);
	}
	regfree(&rx);
	return n;
}

/* Every match of group 1 of `re` in `text`, passed to `fn`. */
static int each_match(const char *text, const char *re,
		      void (*fn)(const char *word, void *arg), void *arg)
{
	return each_group(text, re, 1, fn, arg);
}

/* `needle` occurs in `hay` followed by a byte that cannot continue it. */
static int has_word(const char *hay, const char *needle)
{
	size_t n = strlen(needle);
	for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
		if (!strchr("abcdefghijklmnopqrstuvwxyz-_", p[n]))
			return 1;
	return 0;
}

static void page_has_option(const char *opt, void *page)
{
	cr_expect(has_word(page, opt), "tensord.8 describes %s", opt);
}

Test(man, tensord_page_describes_every_option_of_help)
{
	char *out, *page = source("docs/man/tensord.8.scd");
	char *argv[] = {getenv("TD_TENSORD"), "--help", NULL};
	cr_assert_eq(tu_run_capture(argv, &out), 0);
	int n = each_match(out, "(--[a-z][a-z-]+)", page_has_option, page);
	cr_assert_geq(n, 8, "tensord --help lists its options: %s", out);
	free(out);
	free(page);
}

static void page_has_command(const char *cmd, void *page)
{
	char entry[160];
	snprintf(entry, sizeof(entry), "\n*%s*", cmd);
	cr_expect(strstr(page, entry), "tensorctl.1 has an entry for %s", cmd);
}

Test(man, tensorctl_page_describes_every_command_of_help)
{
	char *out, *page = source("docs/man/tensorctl.1.scd");
	char *argv[] = {getenv("TD_TENSORCTL"), "--help", NULL};
	cr_assert_eq(tu_run_capture(argv, &out), 0);
	int n = each_match(out, "^ +tensorctl ([a-z]+)", page_has_command,
			   page);
	cr_assert_geq(n, 9, "tensorctl --help lists its commands: %s", out);
	free(out);
	free(page);
}

/* An option of a command: "*--opt*" in the page, a word in the doc. */
struct opt_pages {
	const char *cmd, *page, *doc;
};

static void pages_have_option(const char *opt, void *arg)
{
	const struct opt_pages *p = arg;
	char entry[160];
	snprintf(entry, sizeof(entry), "*%s*", opt);
	cr_expect(strstr(p->page, entry), "tensorctl.1 describes %s's %s",
		  p->cmd, opt);
	cr_expect(has_word(p->doc, opt), "docs/tensorctl.md describes %s's %s",
		  p->cmd, opt);
}

/* The options a command line takes, as completion finds them in the
 * command's own getopt table: `tensorctl __complete WORDS... --`. */
static int each_option_of(char *const words[], struct opt_pages *p)
{
	char *argv[8] = {getenv("TD_TENSORCTL"), "__complete"}, *out;
	size_t n = 2;
	for (; *words; words++)
		argv[n++] = *words;
	argv[n++] = "--";
	argv[n] = NULL;
	cr_assert_eq(tu_run_capture(argv, &out), 0);
	int found = each_match(out, "^(--[a-z][a-z-]*)$", pages_have_option, p);
	free(out);
	return found;
}

static void command_options(const char *cmd, void *arg)
{
	struct opt_pages *p = arg;
	p->cmd = cmd;
	if (strcmp(cmd, "zarr")) {
		char *w[] = {(char *)cmd, NULL};
		cr_expect_geq(each_option_of(w, p), 4, "%s has options", cmd);
		return;
	}
	char *ex[] = {"zarr", "export", "x", NULL};
	char *im[] = {"zarr", "import", "x", NULL};
	cr_expect_geq(each_option_of(ex, p), 5, "zarr export has options");
	cr_expect_geq(each_option_of(im, p), 5, "zarr import has options");
}

/*
 * Every option each command takes (its getopt table, long names: -o is
 * --output too) is in the man page and in docs/tensorctl.md: an option
 * added to a command and left out of them fails here.
 */
Test(man, tensorctl_pages_describe_every_option_of_every_command)
{
	struct opt_pages p = {.page = source("docs/man/tensorctl.1.scd"),
			      .doc = source("docs/tensorctl.md")};
	char *out, *argv[] = {getenv("TD_TENSORCTL"), "--help", NULL};
	cr_assert_eq(tu_run_capture(argv, &out), 0);
	int n = each_match(out, "^ +tensorctl ([a-z]+)", command_options, &p);
	cr_assert_geq(n, 9, "tensorctl --help lists its commands: %s", out);
	free(out);
	free((char *)p.page);
	free((char *)p.doc);
}

/*
 * A synopsis form's operands as completion is asked them: a FILE.hrry,
 * FILE.npy or FILE.tgm word becomes a name of that kind (the form it
 * picks), another upper-case word "x", the rest (command, subcommand,
 * -o, --from) stays; "|-" and what follows a '|' inside a word go.
 */
static void form_word(const char *w, char *out, size_t cap)
{
	static const char *const kinds[] = {".hrry", ".npy", ".tgm"};
	size_t n = strcspn(w, "|");

	snprintf(out, cap, "%.*s", (int)n, w);
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (strstr(out, kinds[i])) {
			snprintf(out, cap, "x%s", kinds[i]);
			return;
		}
	if (out[0] >= 'A' && out[0] <= 'Z')
		snprintf(out, cap, "x");
}

/*
 * One form of a command's synopsis, markup gone ("load FILE.hrry|-
 * [--prefix P] ..."): every --option it names is one the command takes
 * in that form, as `tensorctl __complete WORDS... --` finds it in the
 * command's getopt table (the words: the form's, outside brackets).
 */
static void form_options_exist(char *form, const char *src)
{
	char *argv[16] = {getenv("TD_TENSORCTL"), "__complete"};
	char words[12][64], *out, *save = NULL, *copy = strdup(form);
	size_t n = 2;
	int depth = 0;
	regex_t rx;
	regmatch_t m[1];

	cr_assert_not_null(copy);
	for (char *w = strtok_r(copy, " ", &save); w;
	     w = strtok_r(NULL, " ", &save)) {
		int here = depth;

		for (const char *c = w; *c; c++)
			depth += (*c == '[') - (*c == ']');
		if (here || w[0] == '[' || n >= 2 + 12)
			continue;
		form_word(w, words[n - 2], sizeof(words[0]));
		argv[n] = words[n - 2];
		n++;
	}
	argv[n++] = "--";
	argv[n] = NULL;
	cr_assert_eq(tu_run_capture(argv, &out), 0);
	cr_assert(regcomp(&rx, "--[a-z][a-z-]*", REG_EXTENDED) == 0);
	for (const char *p = form; regexec(&rx, p, 1, m, 0) == 0;
	     p += m[0].rm_eo) {
		char opt[64], line[80];
		int len = (int)(m[0].rm_eo - m[0].rm_so);

		cr_assert(len < (int)sizeof(opt));
		snprintf(opt, sizeof(opt), "%.*s", len, p + m[0].rm_so);
		snprintf(line, sizeof(line), "\n%s\n", opt);
		if (!strcmp(opt, "--socket") || !strcmp(opt, "--json") ||
		    !strcmp(opt, "--bytes") || !strcmp(opt, "--help"))
			continue; /* every command's */
		char *all = malloc(strlen(out) + 2);
		cr_assert_not_null(all);
		all[0] = '\n';
		strcpy(all + 1, out);
		cr_expect(strstr(all, line), "%s: \"%s\" names %s, which "
			  "`tensorctl %s` does not take", src, form, opt,
			  argv[2]);
		free(all);
	}
	regfree(&rx);
	free(out);
	free(copy);
}

/* A synopsis of several forms ("a | b", '|' outside brackets), each
 * checked; "zarr" goes before a form that starts with its subcommand. */
static int forms_options_exist(char *syn, const char *src)
{
	int depth = 0, forms = 0;
	char *start = syn;

	for (char *c = syn;; c++) {
		if (*c && (depth || strncmp(c, " | ", 3))) {
			depth += (*c == '[') - (*c == ']');
			continue;
		}
		char form[600], end = *c;

		*c = 0;
		snprintf(form, sizeof(form), "%s%s",
			 strncmp(start, "export ", 7) &&
					 strncmp(start, "import ", 7)
				 ? ""
				 : "zarr ",
			 start);
		form_options_exist(form, src);
		forms++;
		if (!end)
			return forms;
		start = c + 3;
		c += 2;
	}
}

/*
 * The other way round: every option the synopses of tensorctl.1
 * (COMMANDS) and docs/tensorctl.md (the commands' table) name for a
 * command is one that command takes in that form: an option renamed or
 * dropped in the code, or misspelt in a page, fails here.
 */
Test(man, tensorctl_pages_name_only_options_their_command_takes)
{
	char *page = source("docs/man/tensorctl.1.scd");
	char *doc = source("docs/tensorctl.md");
	char *p = strstr(page, "\n# COMMANDS\n"), *end, *save = NULL;
	int forms = 0;

	cr_assert(p, "tensorctl.1 has a COMMANDS section");
	end = strstr(p + 1, "\n# ");
	cr_assert(end);
	*end = 0;
	for (char *l = strtok_r(p, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save)) {
		char syn[600];
		size_t o = 0;

		/* an entry starts its line; its text is indented */
		if (l[0] != '*')
			continue;
		for (const char *c = l; *c && o + 1 < sizeof(syn); c++)
			if (!strchr("*_\\", *c))
				syn[o++] = *c;
		syn[o] = 0;
		forms += forms_options_exist(syn, "tensorctl.1");
	}
	save = NULL;
	for (char *l = strtok_r(doc, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save)) {
		char *cell_end = strstr(l, "` | ");

		if (strncmp(l, "| `", 3) || !cell_end)
			continue;
		cell_end[1] = 0; /* the first cell: one or more `spans` */
		for (char *s = strchr(l, '`'); s; s = strchr(s + 1, '`')) {
			char syn[600], *e = strchr(s + 1, '`');
			size_t o = 0;

			if (!e)
				break;
			if (s[1] < 'a' || s[1] > 'z') { /* not a command */
				s = e;
				continue;
			}
			for (const char *c = s + 1;
			     c < e && o + 1 < sizeof(syn); c++)
				if (*c != '\\')
					syn[o++] = *c;
			syn[o] = 0;
			forms += forms_options_exist(syn, "docs/tensorctl.md");
			s = e;
		}
	}
	cr_assert_geq(forms, 20, "the synopses were found");
	free(page);
	free(doc);
}

/* A directive's entry starts a line: "*allow* WHO" or "*quota uid=*N". */
static void page_has_keyword(const char *kw, void *page)
{
	char entry[160];
	snprintf(entry, sizeof(entry), "\n*%s", kw);
	const char *p = strstr(page, entry);
	while (p && !strchr("* ", p[strlen(entry)]))
		p = strstr(p + 1, entry);
	cr_expect(p, "tensord-policy.5 describes '%s'", kw);
}

Test(man, policy_page_describes_every_keyword_the_parser_knows)
{
	char *src = source("daemon/policy.c");
	char *page = source("docs/man/tensord-policy.5.scd");
	int n = each_match(src, "tok_is\\(&t\\[0\\], \"([a-z-]+)\"\\)",
			   page_has_keyword, page);
	cr_assert_geq(n, 2, "the parser's keywords were found");
	free(src);
	free(page);
}

static void header_has_function(const char *fn, void *header)
{
	char decl[160];
	snprintf(decl, sizeof(decl), "%s(", fn);
	cr_expect(strstr(header, decl), "libtensord.3 names %s, which the "
		  "header declares", fn);
}

Test(man, library_page_names_only_functions_that_exist)
{
	char *page = source("docs/man/libtensord.3.scd");
	/* the installed headers: the client's (its rings' in ring.h, its
	 * STATUS pinned figures' in status.h) and the Hurray files' */
	static const char *const hs[] = {"libclient/include/tensord/tensord.h",
					 "libclient/include/tensord/ring.h",
					 "libclient/include/tensord/status.h",
					 "libclient/include/tensord/hrry.h"};
	char *header = NULL;
	size_t len = 0;
	for (size_t i = 0; i < sizeof(hs) / sizeof(*hs); i++) {
		char *h = source(hs[i]);
		size_t hl = strlen(h);
		header = realloc(header, len + hl + 1);
		cr_assert_not_null(header);
		memcpy(header + len, h, hl + 1);
		len += hl;
		free(h);
	}
	int n = each_match(page, "\\*(td_[a-z_]+)\\*", header_has_function,
			   header);
	cr_assert_geq(n, 20);
	free(page);
	free(header);
}

static void page_names_function(const char *fn, void *page)
{
	char entry[160];
	snprintf(entry, sizeof(entry), "*%s*(", fn);
	cr_expect(strstr(page, entry), "the page describes %s", fn);
}

/*
 * The format pages describe every function their headers export, and
 * name none the headers lack.
 */
static void format_page(const char *page_rel, const char *header_rel,
			int min)
{
	char *page = source(page_rel);
	char *header = source(header_rel);
	char *err = source("libclient/include/tensord/err.h");
	size_t hl = strlen(header), el = strlen(err);
	char *both = malloc(hl + el + 1);
	cr_assert(both);
	memcpy(both, header, hl);
	memcpy(both + hl, err, el + 1);
	int n = each_match(header,
			   "^TD_FORMAT_API [^(]*[ *](td_[a-z0-9_]+)\\(",
			   page_names_function, page);
	cr_assert_geq(n, min, "%s exports were found", header_rel);
	each_match(page, "\\*(td_[a-z0-9_]+)\\*\\(", header_has_function,
		   both);
	free(both);
	free(err);
	free(header);
	free(page);
}

Test(man, blob_page_describes_every_function_of_the_header)
{
	format_page("docs/man/tensord-blob.3.scd",
		    "libclient/include/tensord/blob.h", 15);
}

Test(man, tgm_page_describes_every_function_of_the_header)
{
	format_page("docs/man/tensord-tgm.3.scd",
		    "libclient/include/tensord/tgm.h", 10);
}

Test(man, every_page_is_rendered_as_roff)
{
	const char *pages[] = {"tensord.8", "tensorctl.1", "libtensord.3",
			       "tensord-policy.5", "tensord-blob.3",
			       "tensord-tgm.3"};
	for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++) {
		char path[4096];
		size_t len;
		snprintf(path, sizeof(path), "%s/docs/man/%s",
			 getenv("TD_BUILD_ROOT"), pages[i]);
		char *roff = (char *)tu_read_file(path, &len);
		cr_expect(strstr(roff, ".TH "), "%s is a man page", path);
		free(roff);
	}
}

static bool ends_with(const char *name, size_t len, const char *end)
{
	size_t le = strlen(end);

	return len > le && !strcmp(name + len - le, end);
}

/* fn(rel, text, arg) for every file of `dir` (below the source root)
 * whose name starts with `start` and ends with `end` (or with `end2`
 * unless NULL); the sum of what fn returns. */
static int each_file(const char *dir, const char *start, const char *end,
		     const char *end2,
		     int (*fn)(const char *rel, const char *text, void *arg),
		     void *arg)
{
	const char *root = getenv("TD_SOURCE_ROOT");
	char path[4096];
	struct dirent *de;
	int n = 0;
	DIR *d;

	cr_assert(root, "TD_SOURCE_ROOT is set by meson");
	snprintf(path, sizeof(path), "%s/%s", root, dir);
	d = opendir(path);
	cr_assert_not_null(d, "%s", path);
	while ((de = readdir(d))) {
		const char *name = de->d_name;
		size_t len = strlen(name), ls = strlen(start);
		char rel[512], *text;

		if (len <= ls || strncmp(name, start, ls) ||
		    (!ends_with(name, len, end) &&
		     (!end2 || !ends_with(name, len, end2))))
			continue;
		snprintf(rel, sizeof(rel), "%s/%s", dir, name);
		text = source(rel);
		n += fn(rel, text, arg);
		free(text);
	}
	closedir(d);
	return n;
}

struct env_check {
	const char *page_rel;
	const char *page;
	const char *file;
};

static void page_names_env(const char *var, void *arg)
{
	const struct env_check *c = arg;

	/* fault-injection hooks of the suite (docs/reliability.md) */
	if (!strncmp(var, "TD_TEST_", 8))
		return;
	cr_expect(has_word(c->page, var), "%s reads $%s, which %s does not "
		  "name", c->file, var, c->page_rel);
}

/* One file's reads for page_names_every_env. */
static int env_reads_named(const char *rel, const char *text, void *arg)
{
	struct env_check *c = arg;

	c->file = rel;
	return each_match(text,
			  "[a-z_]*env[a-z0-9_]*\\(\"([A-Z][A-Z0-9_]*)\"",
			  page_names_env, c);
}

/* Every variable the .c files of `dirs` read (getenv() and the env_*()
 * helpers over it) is named on `page_rel`; the count of reads found. */
static int page_names_every_env(const char *page_rel,
				const char *const *dirs, size_t ndirs)
{
	struct env_check c = {.page_rel = page_rel};
	char *page = source(page_rel);
	int n = 0;

	c.page = page;
	for (size_t i = 0; i < ndirs; i++)
		n += each_file(dirs[i], "", ".c", NULL, env_reads_named, &c);
	free(page);
	return n;
}

Test(man, every_environment_variable_is_on_the_page_of_who_reads_it)
{
	static const char *const daemon[] = {"daemon", "transport"};
	static const char *const lib[] = {"libclient", "transport"};
	static const char *const ctl[] = {"tools"};
	static const char *const py[] = {"python"};

	cr_assert_geq(page_names_every_env("docs/man/tensord.8.scd", daemon,
					   2),
		      10, "the daemon's reads were found");
	cr_assert_geq(page_names_every_env("docs/man/libtensord.3.scd", lib,
					   2),
		      10, "libtensord's reads were found");
	cr_assert_geq(page_names_every_env("docs/man/tensorctl.1.scd", ctl,
					   1),
		      1, "tensorctl's reads were found");
	/* the binding's own reads, beside libtensord's: its guide */
	cr_assert_geq(page_names_every_env("docs/python.md", py, 1), 1,
		      "the binding's reads were found");
}

struct source_match {
	const char *re;
	void (*fn)(const char *word, void *arg);
	void *arg;
};

static int source_matches(const char *rel, const char *text, void *arg)
{
	const struct source_match *m = arg;

	(void)rel;
	return each_match(text, m->re, m->fn, m->arg);
}

/* `fn` for every match of group 1 of `re` in the .c files of `dir`; the
 * count of matches. */
static int each_source_match(const char *dir, const char *re,
			     void (*fn)(const char *word, void *arg),
			     void *arg)
{
	struct source_match m = {re, fn, arg};

	return each_file(dir, "", ".c", NULL, source_matches, &m);
}

/* The part of `text` after `from` up to `to` (or its end), a copy. */
static char *section(const char *text, const char *from, const char *to)
{
	const char *a = strstr(text, from), *b;
	char *s;

	cr_assert_not_null(a, "the text has \"%s\"", from);
	a += strlen(from);
	b = strstr(a, to);
	if (!b)
		b = a + strlen(a);
	s = strndup(a, (size_t)(b - a));
	cr_assert_not_null(s);
	return s;
}

struct kinds {
	const char *page, *doc; /* the sentences that list the kinds */
	const char *code;       /* "\n"-separated kinds tools/ reports */
};

static void kind_is_listed(const char *kind, void *arg)
{
	const struct kinds *k = arg;
	char entry[64];

	snprintf(entry, sizeof(entry), "*%s*", kind);
	cr_expect(strstr(k->page, entry), "tensorctl.1 (EXIT STATUS) does not "
		  "list the --json error kind \"%s\" tools/ reports", kind);
	snprintf(entry, sizeof(entry), "`%s`", kind);
	cr_expect(strstr(k->doc, entry), "docs/tensorctl.md (--json) does not "
		  "list the error kind \"%s\" tools/ reports", kind);
}

static void kind_is_reported(const char *kind, void *arg)
{
	const struct kinds *k = arg;
	char line[64];

	snprintf(line, sizeof(line), "\n%s\n", kind);
	cr_expect(strstr(k->code, line), "tensorctl.1 lists the --json error "
		  "kind \"%s\", which no tctl_fail() of tools/ reports", kind);
}

static void kind_collect(const char *kind, void *arg)
{
	char **all = arg;
	size_t len = strlen(*all);

	*all = realloc(*all, len + strlen(kind) + 2);
	cr_assert_not_null(*all);
	sprintf(*all + len, "%s\n", kind);
}

/*
 * Every kind a --json error of tensorctl can have (the second argument
 * of every tctl_fail() in tools/) is in the list of kinds tensorctl.1
 * and docs/tensorctl.md give, and the page lists no kind that none
 * reports: a script that switches on the kind is told them all ("keep",
 * a load that cannot hold what it would replace, was left out of the
 * page).
 */
Test(man, tensorctl_pages_list_every_json_error_kind)
{
	char *page = source("docs/man/tensorctl.1.scd");
	char *doc = source("docs/tensorctl.md");
	const char *re = "tctl_fail\\([A-Z_]+,[[:space:]]*\"([a-z]+)\"";
	struct kinds k = {
		.page = section(page, "its *kind* is", ".\n"),
		.doc = section(doc, "where `kind` is", "\n* "),
	};
	char *code = strdup("\n"), *outer;
	size_t o = 0;
	int depth = 0;

	cr_assert_not_null(code);
	cr_assert_geq(each_source_match("tools", re, kind_collect, &code), 50,
		      "tools/'s tctl_fail() calls were found");
	k.code = code;
	each_source_match("tools", re, kind_is_listed, &k);
	/* the kinds, not what the parentheses say of them */
	outer = strdup(k.page);
	cr_assert_not_null(outer);
	for (const char *c = k.page; *c; c++) {
		depth += *c == '(';
		if (!depth)
			outer[o++] = *c;
		depth -= depth && *c == ')';
	}
	outer[o] = 0;
	cr_assert_geq(each_match(outer, "\\*([a-z]+)\\*", kind_is_reported,
				 &k),
		      7, "the page's kinds were found: %s", k.page);
	free(outer);
	free(code);
	free((char *)k.page);
	free((char *)k.doc);
	free(page);
	free(doc);
}

/* ---- the tests and files the documents name ---- */

/* Appends "\nSUITE::NAME" for every criterion test of a file. */
static void collect_c_tests(const char *text, char **all)
{
	/* Test(suite, name and test-daemon.c's DTest(name), in "daemon" */
	static const char *const res[] = {
		"(^|[^A-Za-z])Test\\(([a-z_]+),[[:space:]]*([a-z0-9_]+)",
		"^DTest\\(()()([a-z0-9_]+)\\)"};
	for (size_t i = 0; i < 2; i++) {
		regex_t rx;
		regmatch_t m[4];

		cr_assert(regcomp(&rx, res[i], REG_EXTENDED | REG_NEWLINE) ==
			  0);
		for (const char *p = text; regexec(&rx, p, 4, m, 0) == 0;
		     p += m[0].rm_eo) {
			size_t len = strlen(*all);
			int ls = (int)(m[2].rm_eo - m[2].rm_so);
			int ln = (int)(m[3].rm_eo - m[3].rm_so);

			*all = realloc(*all, len + (size_t)(ls + ln) + 16);
			cr_assert_not_null(*all);
			sprintf(*all + len, "\n%.*s::%.*s", i ? 6 : ls,
				i ? "daemon" : p + m[2].rm_so, ln,
				p + m[3].rm_so);
		}
		regfree(&rx);
	}
}

/* Appends "\npy::NAME" for every pytest function and "\npy::FILE" for
 * every test file (without .py) of python/tests. */
static void collect_py_tests(const char *file, const char *text, char **all)
{
	regex_t rx;
	regmatch_t m[3];
	size_t len = strlen(*all);

	*all = realloc(*all, len + strlen(file) + 8);
	cr_assert_not_null(*all);
	sprintf(*all + len, "\npy::%.*s", (int)strlen(file) - 3, file);
	cr_assert(regcomp(&rx, "^(async )?def (test_[a-z0-9_]+)",
			  REG_EXTENDED | REG_NEWLINE) == 0);
	for (const char *p = text; regexec(&rx, p, 3, m, 0) == 0;
	     p += m[0].rm_eo) {
		int n = (int)(m[2].rm_eo - m[2].rm_so);

		len = strlen(*all);
		*all = realloc(*all, len + (size_t)n + 8);
		cr_assert_not_null(*all);
		sprintf(*all + len, "\npy::%.*s", n, p + m[2].rm_so);
	}
	regfree(&rx);
}

static int c_tests(const char *rel, const char *text, void *all)
{
	(void)rel;
	collect_c_tests(text, all);
	return 0;
}

static int py_tests(const char *rel, const char *text, void *all)
{
	collect_py_tests(strrchr(rel, '/') + 1, text, all);
	return 0;
}

/* Every test of the suite: "\nSUITE::NAME" lines, "py" for pytest's. */
static char *all_tests(void)
{
	char *all = strdup("");

	cr_assert(all);
	each_file("tests", "test", ".c", NULL, c_tests, &all);
	each_file("python/tests", "test", ".py", NULL, py_tests, &all);
	strcat(all = realloc(all, strlen(all) + 2), "\n");
	return all;
}

struct cited {
	const char *doc, *tests;
	int refs, paths; /* test names and paths found */
};

/* "SUITE::NAME" (a trailing "*": any test whose name starts so) is a
 * test; a C++ or torch name (std::, at::) is none of ours. */
static void cited_test_exists(const char *ref, void *arg)
{
	const struct cited *c = arg;
	char want[160];
	size_t n = strcspn(ref, "*");

	if (!strncmp(ref, "std::", 5) || !strncmp(ref, "at::", 4))
		return;
	/* "name_*", "name_{pidfd,scm}", "name_...": names that start so */
	snprintf(want, sizeof(want), "\n%.*s%s", (int)n, ref,
		 ref[n] || ref[n - 1] == '_' ? "" : "\n");
	cr_expect(strstr(c->tests, want), "%s names the test %s, which "
		  "tests/ and python/tests/ lack", c->doc, ref);
}

/* A pytest name alone ("test_planes.py", "test_x_does_y") is one. */
static void cited_pytest_exists(const char *ref, void *arg)
{
	char buf[160];

	snprintf(buf, sizeof(buf), "py::%s", ref);
	cited_test_exists(buf, arg);
}

static void cited_path_exists(const char *rel, void *arg)
{
	const struct cited *c = arg;
	char path[4096];

	if (strchr(rel, '*'))
		return;
	snprintf(path, sizeof(path), "%s/%s", getenv("TD_SOURCE_ROOT"), rel);
	cr_expect(access(path, F_OK) == 0, "%s names %s, which the source "
		  "tree lacks", c->doc, rel);
}

/*
 * Every test a document cites as its evidence (`suite::name`,
 * `test_file.py::test_name`, `test_name`) is one the suite runs, and
 * every source path it names in backquotes is in the tree: a test
 * renamed or dropped, or a file moved, leaves no claim pointing at
 * nothing.
 */
/* One document's cited tests and paths, counted in c. */
static int cites_exist(const char *rel, const char *text, void *arg)
{
	struct cited *c = arg;

	c->doc = rel;
	c->refs += each_group(text,
			      "(^|[^A-Za-z0-9_.])([a-z_]+::[a-z0-9_]"
			      "[a-z0-9_*]*)",
			      2, cited_test_exists, c);
	c->refs += each_group(text, "(^|[^A-Za-z0-9_:])(test_[a-z0-9_]+)",
			      2, cited_pytest_exists, c);
	c->paths += each_match(text,
			       "`((tests|examples|tools|daemon|"
			       "libclient|proto|transport|python|"
			       "json|scripts|bench|systemd)/"
			       "[A-Za-z0-9_./*-]+)`",
			       cited_path_exists, c);
	return 0;
}

Test(man, documents_name_only_tests_and_files_that_exist)
{
	static const char *const fixed[] = {"README.md", "bench/README.md"};
	struct cited c = {.tests = all_tests()};

	for (int i = 0; i < 2; i++) {
		char *text = source(fixed[i]);

		cites_exist(fixed[i], text, &c);
		free(text);
	}
	each_file("docs", "", ".md", ".scd", cites_exist, &c);
	each_file("docs/man", "", ".md", ".scd", cites_exist, &c);
	cr_assert_geq(c.refs, 250, "the documents' test names were found: %d",
		      c.refs);
	cr_assert_geq(c.paths, 200, "the documents' paths were found: %d",
		      c.paths);
	free((char *)c.tests);
}

/* ---- docs/zarr.md's /metrics table against daemon/http.c ---- */

/* "NAME TYPE\n" for every match of `re` (groups 1 and 2) in `text`,
 * appended to *out; the count. */
static int metric_pairs(const char *text, const char *re, char **out)
{
	regex_t rx;
	regmatch_t m[3];
	int n = 0;

	cr_assert(regcomp(&rx, re, REG_EXTENDED | REG_NEWLINE) == 0);
	for (const char *p = text; regexec(&rx, p, 3, m, 0) == 0;
	     p += m[0].rm_eo, n++) {
		int a = (int)(m[1].rm_eo - m[1].rm_so);
		int b = (int)(m[2].rm_eo - m[2].rm_so);
		size_t len = strlen(*out);

		*out = realloc(*out, len + (size_t)(a + b) + 3);
		cr_assert_not_null(*out);
		sprintf(*out + len, "%.*s %.*s\n", a, p + m[1].rm_so, b,
			p + m[2].rm_so);
	}
	regfree(&rx);
	return n;
}

/*
 * Every metric /metrics serves (daemon/http.c: metric() and the labelled
 * ones' "# TYPE" lines; daemon/snapshot-save.c's "# TYPE" lines, with
 * --snapshot) is a row of docs/zarr.md's table with its type, and every
 * row is one it serves: a metric added, renamed or retyped on one side
 * only fails here.
 */
Test(man, metrics_table_lists_every_metric_the_store_serves)
{
	char *src = source("daemon/http.c"), *doc = source("docs/zarr.md");
	char *snap = source("daemon/snapshot-save.c");
	char *served = strdup("\n"), *listed = strdup("\n");
	int ns, nl;

	cr_assert(served && listed);
	ns = metric_pairs(src, "metric\\(f, \"(tensord_[a-z_]+)\", "
			       "\"([a-z]+)\"", &served);
	ns += metric_pairs(src, "# TYPE (tensord_[a-z_]+) ([a-z]+)\\\\n",
			   &served);
	ns += metric_pairs(snap, "# TYPE (tensord_[a-z_]+) ([a-z]+)\\\\n",
			   &served);
	nl = metric_pairs(doc, "^\\| `(tensord_[a-z_]+)[{a-z,}]*` \\| "
			       "([a-z]+) \\|", &listed);
	cr_assert_geq(ns, 15, "daemon/http.c's metrics were found");
	cr_expect_eq(ns, nl, "daemon/http.c serves %d metrics, docs/zarr.md "
		     "lists %d:\n%s---\n%s", ns, nl, served, listed);
	for (char *l = served + 1; *l; l = strchr(l, '\n') + 1) {
		char want[160];

		snprintf(want, sizeof(want), "\n%.*s\n",
			 (int)strcspn(l, "\n"), l);
		cr_expect(strstr(listed, want), "docs/zarr.md's /metrics "
			  "table lacks \"%.*s\"", (int)strcspn(l, "\n"), l);
	}
	for (char *l = listed + 1; *l; l = strchr(l, '\n') + 1) {
		char want[160];

		snprintf(want, sizeof(want), "\n%.*s\n",
			 (int)strcspn(l, "\n"), l);
		cr_expect(strstr(served, want), "docs/zarr.md lists \"%.*s\", "
			  "which /metrics does not serve",
			  (int)strcspn(l, "\n"), l);
	}
	free(served);
	free(listed);
	free(src);
	free(snap);
	free(doc);
}

/* ---- the ThreadSanitizer run the documents give and CI's ---- */

/*
 * The suites named after "meson test -C build-tsan" in `text`, up to the
 * end of the command (a backquote; with `lines`, also a line end not
 * escaped by '\'), as " a b c " sorted; options and their numbers left
 * out.
 */
static char *tsan_suites(const char *text, const char *rel, bool lines)
{
	const char *key = "meson test -C build-tsan", *p = strstr(text, key);
	char *words[32], *out, *copy, *save = NULL;
	size_t n = 0, len = 1;

	cr_assert_not_null(p, "%s has \"%s\"", rel, key);
	p += strlen(key);
	copy = strndup(p, 400);
	cr_assert_not_null(copy);
	for (char *c = copy; *c; c++)
		if (*c == '`' || (lines && *c == '\n' && c[-1] != '\\')) {
			*c = 0;
			break;
		}
	for (char *w = strtok_r(copy, " \t\n\\", &save); w && n < 32;
	     w = strtok_r(NULL, " \t\n\\", &save))
		if (w[0] != '-' && (w[0] < '0' || w[0] > '9'))
			words[n++] = w;
	for (size_t i = 1; i < n; i++) /* a handful: insertion sort */
		for (size_t j = i; j && strcmp(words[j - 1], words[j]) > 0;
		     j--) {
			char *t = words[j];
			words[j] = words[j - 1];
			words[j - 1] = t;
		}
	for (size_t i = 0; i < n; i++)
		len += strlen(words[i]) + 1;
	out = malloc(len + 1);
	cr_assert_not_null(out);
	strcpy(out, " ");
	for (size_t i = 0; i < n; i++) {
		strcat(out, words[i]);
		strcat(out, " ");
	}
	free(copy);
	return out;
}

/*
 * The ThreadSanitizer command of README.md and docs/reliability.md runs
 * the suites CI's does (.ci/run): README's left out loop and atomic
 * after CI took them in.
 */
Test(man, tsan_commands_run_the_suites_ci_runs)
{
	char *ci_text = source(".ci/run"), *readme = source("README.md");
	char *rel = source("docs/reliability.md");
	char *ci = tsan_suites(ci_text, ".ci/run", true);
	char *a = tsan_suites(readme, "README.md", false);
	char *b = tsan_suites(rel, "docs/reliability.md", true);

	cr_assert(strstr(ci, " threads "), ".ci/run's suites: %s", ci);
	cr_expect_str_eq(a, ci, "README.md runs%s under TSan, .ci/run%s", a,
			 ci);
	cr_expect_str_eq(b, ci, "docs/reliability.md runs%s under TSan, "
			 ".ci/run%s", b, ci);
	free(a);
	free(b);
	free(ci);
	free(rel);
	free(readme);
	free(ci_text);
}

struct bench_docs {
	const char *row, *readme;
};

static void bench_is_named(const char *prog, void *arg)
{
	const struct bench_docs *b = arg;
	char word[80];

	snprintf(word, sizeof(word), "`%s`", prog);
	cr_expect(strstr(b->row, word), "README.md's layout row for bench/ "
		  "does not name %s, which bench/meson.build builds", prog);
	cr_expect(has_word(b->readme, prog), "bench/README.md does not "
		  "describe %s, which bench/meson.build builds", prog);
}

/* Every program bench/ builds is in README's layout table and has its
 * section in bench/README.md: the table named four of the six. */
Test(man, readme_layout_names_every_bench_program)
{
	char *build = source("bench/meson.build"), *readme = source("README.md");
	struct bench_docs b = {.row = section(readme, "\n| `bench/` |", "\n"),
			       .readme = source("bench/README.md")};

	cr_assert_geq(each_match(build, "executable\\('(tensord-[a-z]+)'",
				 bench_is_named, &b),
		      6, "bench/meson.build's programs were found");
	free((char *)b.row);
	free((char *)b.readme);
	free(readme);
	free(build);
}

/* ---- the bench programs' synopses against their --help ---- */

struct synopsis {
	int n;
	char opt[24][32], val[24][32];
};

/* The "[--opt]" and "[--opt VALUE]" groups of one synopsis line. */
static void synopsis_parse(const char *line, struct synopsis *s)
{
	regex_t rx;
	regmatch_t m[4];

	s->n = 0;
	cr_assert(regcomp(&rx, "\\[(--[a-z][a-z-]*)( ([^]]*))?\\]",
			  REG_EXTENDED) == 0);
	for (const char *p = line; s->n < 24 && regexec(&rx, p, 4, m, 0) == 0;
	     p += m[0].rm_eo, s->n++) {
		snprintf(s->opt[s->n], sizeof(s->opt[0]), "%.*s",
			 (int)(m[1].rm_eo - m[1].rm_so), p + m[1].rm_so);
		snprintf(s->val[s->n], sizeof(s->val[0]), "%.*s",
			 m[3].rm_so < 0 ? 0 : (int)(m[3].rm_eo - m[3].rm_so),
			 m[3].rm_so < 0 ? "" : p + m[3].rm_so);
	}
	regfree(&rx);
}

/* One synopsis of bench/README.md ("    build/bench/PROG [...]", a line
 * ending in '\' continued) against `PROG --help`'s usage line. */
static void synopsis_is_the_programs(const char *at)
{
	char prog[64], line[1024], path[4096], *out, *u;
	struct synopsis doc, help;
	size_t n = 0;

	at += strlen("\n    build/bench/");
	snprintf(prog, sizeof(prog), "%.*s", (int)strcspn(at, " \n"), at);
	while (n + 1 < sizeof(line) && *at && *at != '\n') {
		if (at[0] == '\\' && at[1] == '\n')
			at += 2; /* the line goes on */
		else
			line[n++] = *at++;
	}
	line[n] = 0;
	snprintf(path, sizeof(path), "%s/bench/%s", getenv("TD_BUILD_ROOT"),
		 prog);
	char *argv[] = {path, "--help", NULL};
	cr_expect_eq(tu_run_capture(argv, &out), 0,
		     "%s --help exits 0 (bench/README.md runs it as %s)", prog,
		     line);
	char want[80];
	snprintf(want, sizeof(want), "usage: %s ", prog);
	u = strstr(out, want);
	cr_expect_not_null(u, "%s --help prints its usage on stdout: %s", prog,
			   out);
	synopsis_parse(line, &doc);
	synopsis_parse(u ? u : "", &help);
	cr_expect_geq(doc.n, 1, "the synopsis of %s was read: %s", prog, line);
	for (int i = 0; i < doc.n || i < help.n; i++) {
		const char *d = i < doc.n ? doc.opt[i] : "(none)";
		const char *h = i < help.n ? help.opt[i] : "(none)";
		cr_expect_str_eq(d, h, "bench/README.md gives %s the option %s "
				 "where its --help has %s", prog, d, h);
		/* a default the document gives is the program's */
		if (i < doc.n && i < help.n && !strcmp(d, h) &&
		    strchr("0123456789", doc.val[i][0]) && doc.val[i][0] &&
		    strchr("0123456789", help.val[i][0]) && help.val[i][0])
			cr_expect_str_eq(doc.val[i], help.val[i],
					 "bench/README.md gives %s %s %s, its "
					 "--help %s", prog, d, doc.val[i],
					 help.val[i]);
	}
	free(out);
}

/*
 * Every bench program bench/README.md gives a synopsis of answers
 * --help with a usage line that names the very options of that
 * synopsis, in its order, with the same defaults: tensord-snapbench
 * took --daemon where every other took --tensord, and none but
 * tensord-bench knew --help.
 */
Test(man, bench_synopses_are_the_options_each_program_takes)
{
	char *readme = source("bench/README.md");
	int n = 0;

	for (const char *p = strstr(readme, "\n    build/bench/tensord-"); p;
	     p = strstr(p + 1, "\n    build/bench/tensord-"), n++)
		synopsis_is_the_programs(p);
	cr_assert_geq(n, 5, "bench/README.md's synopses were found: %d", n);
	free(readme);
}

/* ---- the scripts the documents run ---- */

static void script_is_executable(const char *rel, void *arg)
{
	char path[4096];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", getenv("TD_SOURCE_ROOT"), rel);
	cr_expect(stat(path, &st) == 0, "%s runs %s, which the source tree "
		  "lacks", (const char *)arg, rel);
	cr_expect(st.st_mode & S_IXUSR, "%s runs %s as a command, which is "
		  "not executable (Permission denied)", (const char *)arg, rel);
}

static int scripts_run(const char *rel, const char *text, void *arg)
{
	(void)arg;
	/* a command line (a block's line, or backquoted with arguments):
	 * VAR=value ... then the script itself */
	return each_group(text,
			  "(^ {0,4}|`)([A-Z_]+=[^ `]* )*((scripts|bench|tests|"
			  "examples)/[A-Za-z0-9_./-]+\\.(sh|py))( |$)",
			  3, script_is_executable, (void *)rel);
}

/*
 * A script a document runs by its path (`bench/python_bench.py --socket
 * ...`, `scripts/run.sh`) is executable, as a newcomer who copies the
 * line needs: bench/python_bench.py was not.
 */
Test(man, documents_run_only_executable_scripts)
{
	static const char *const fixed[] = {"README.md", "bench/README.md"};
	int n = 0;

	for (int i = 0; i < 2; i++) {
		char *text = source(fixed[i]);

		n += scripts_run(fixed[i], text, NULL);
		free(text);
	}
	n += each_file("docs", "", ".md", ".scd", scripts_run, NULL);
	cr_assert_geq(n, 10, "the documents' command lines were found: %d", n);
}

/* ---- the size check the documents give and the suite's ---- */

/* The words of `s` up to `end` (quotes, commas and brackets dropped) as
 * " a b c " sorted. */
static void sorted_words(const char *s, const char *end, char *out, size_t cap)
{
	char words[32][32];
	int n = 0;

	while (s < end && n < 32) {
		s += strspn(s, " \t\n',[");
		size_t len = strcspn(s, " \t\n',[]");
		if (!len || s >= end)
			break;
		snprintf(words[n++], sizeof(words[0]), "%.*s", (int)len, s);
		s += len;
	}
	qsort(words, (size_t)n, sizeof(words[0]),
	      (int (*)(const void *, const void *))strcmp);
	snprintf(out, cap, " ");
	for (int i = 0; i < n; i++)
		snprintf(out + strlen(out), cap - strlen(out), "%s ", words[i]);
}

/*
 * The size check docs/architecture.md gives checks the folders the
 * suite's size-limits test checks: it had left out json/.
 */
Test(man, size_check_command_checks_the_suites_folders)
{
	char *doc = source("docs/architecture.md");
	char *build = source("tests/meson.build");
	char d[512], s[512];
	const char *p = strstr(doc, "python3 scripts/size-limits.py ");
	const char *q = strstr(build, "args: [size_limits] + [");

	cr_assert_not_null(p, "docs/architecture.md gives the size check");
	cr_assert_not_null(q, "tests/meson.build runs size-limits");
	p += strlen("python3 scripts/size-limits.py ");
	q += strlen("args: [size_limits] + [");
	sorted_words(p, p + strcspn(p, "\n`"), d, sizeof(d));
	sorted_words(q, q + strcspn(q, "]"), s, sizeof(s));
	cr_expect_str_eq(d, s, "docs/architecture.md checks:%s; the suite:%s", d,
			 s);
	free(build);
	free(doc);
}

/* ---- docs/reliability.md's policy summary against the parser ---- */

/* The words of a list ("a, b, c or d", "a | b | c", "a b c") up to
 * `end`, as " a b c d " in their order. */
static void list_words(const char *s, const char *end, char *out, size_t cap)
{
	snprintf(out, cap, " ");
	while (s < end) {
		s += strspn(s, " ,|");
		if (!strncmp(s, "or ", 3))
			s += 3;
		size_t len = strcspn(s, " ,|;\n\"");
		if (!len || s + len > end)
			break;
		snprintf(out + strlen(out), cap - strlen(out), "%.*s ",
			 (int)len, s);
		s += len;
	}
}

/*
 * The short form of the policy file docs/reliability.md gives names
 * every WHO, PERM and limit KEY the parser takes, and none it refuses
 * (the parser's own "X must be ..." reasons list them): `http`, a WHO
 * since the HTTP store, was missing.
 */
Test(man, reliability_policy_summary_names_what_the_parser_takes)
{
	static const char *const what[] = {"WHO", "PERM", "KEY"};
	char *src = source("daemon/policy.c"), *doc = source("docs/reliability.md");
	char *flat = calloc(1, strlen(src) + 1), *o = flat;
	const char *block = strstr(doc, "\nallow WHO PERM PREFIX ");

	cr_assert_not_null(flat);
	cr_assert_not_null(block, "docs/reliability.md gives the short form");
	/* C string literals joined: "a, "\n\t\t "b" is "a, b" */
	for (const char *p = src; *p; p++) {
		size_t gap = p[0] == '"' ? strspn(p + 1, " \t\n") : 0;
		if (gap && p[1 + gap] == '"') {
			p += 1 + gap;
			continue;
		}
		*o++ = *p;
	}
	for (int i = 0; i < 3; i++) {
		char key[32], parser[256], summary[256];
		const char *p, *d;

		snprintf(key, sizeof(key), "\"%s must be ", what[i]);
		p = strstr(flat, key);
		cr_assert_not_null(p, "daemon/policy.c's %s reason", what[i]);
		p += strlen(key);
		list_words(p, p + strcspn(p, "\""), parser, sizeof(parser));
		snprintf(key, sizeof(key), " %s: ", what[i]);
		d = strstr(block, key);
		cr_assert_not_null(d, "the short form explains %s", what[i]);
		d += strlen(key);
		list_words(d, d + strcspn(d, ";\n"), summary, sizeof(summary));
		cr_expect_str_eq(summary, parser, "docs/reliability.md: %s:%s; "
				 "the parser takes%s", what[i], summary,
				 parser);
	}
	free(flat);
	free(doc);
	free(src);
}

/* ---- docs/protocol.md against proto/'s headers ---- */

/*
 * For every match of `re` in `text` (groups 1 and 2), the string `fmt`
 * makes of them (printf with positional arguments: %1$s, %2$s) is in
 * `other`, which `other_rel` names; the count of matches.
 */
static int each_pair_is_in(const char *text, const char *re, const char *fmt,
			   const char *other, const char *other_rel)
{
	regex_t rx;
	regmatch_t m[3];
	int n = 0;

	cr_assert(regcomp(&rx, re, REG_EXTENDED | REG_NEWLINE) == 0);
	for (const char *p = text; regexec(&rx, p, 3, m, 0) == 0;
	     p += m[0].rm_eo, n++) {
		char a[128], b[128], want[300];
		int la = (int)(m[1].rm_eo - m[1].rm_so);
		int lb = (int)(m[2].rm_eo - m[2].rm_so);

		cr_assert(la > 0 && la < (int)sizeof(a) && lb > 0 &&
			  lb < (int)sizeof(b));
		memcpy(a, p + m[1].rm_so, (size_t)la);
		a[la] = 0;
		memcpy(b, p + m[2].rm_so, (size_t)lb);
		b[lb] = 0;
		snprintf(want, sizeof(want), fmt, a, b);
		cr_expect(strstr(other, want), "%s does not say \"%s\"",
			  other_rel, want);
	}
	regfree(&rx);
	return n;
}

/*
 * Every opcode and HELLO feature bit of proto/wire.h and
 * proto/wire-status.h is in docs/protocol.md's tables with its value,
 * and every row of those tables names one the headers define, with that
 * value: a bit added, renumbered or renamed on one side only fails here.
 * So does a flag or bit the text gives a value of beside its name
 * (§6.3's `TD_WIRE_FEAT_PUB_IF`, `0x4000000`).
 */
Test(man, protocol_page_lists_every_opcode_and_feature_bit_with_its_value)
{
	char *doc = source("docs/protocol.md");
	char *wire = source("proto/wire.h");
	char *status = source("proto/wire-status.h");
	char *hdrs = malloc(strlen(wire) + strlen(status) + 2);

	cr_assert_not_null(hdrs);
	strcpy(hdrs, wire);
	strcat(hdrs, "\n");
	strcat(hdrs, status);
	/* opcodes: `TD_OP_X = N,` and the rows `| N | X |` (§3, §10) */
	cr_assert_geq(each_pair_is_in(hdrs,
				      "TD_OP_([A-Z_]+) = (0x[0-9a-f]+|[0-9]+),",
				      "| %2$s | %1$s |", doc,
				      "docs/protocol.md"),
		      21, "the opcodes of wire.h were found");
	cr_assert_geq(each_pair_is_in(doc,
				      "^\\| (0x[0-9a-f]+|[0-9]+) \\| ([A-Z_]+) "
				      "\\|",
				      "TD_OP_%2$s = %1$s,", hdrs,
				      "proto/wire.h"),
		      21, "the opcode rows were found");
	/* feature bits: `#define TD_WIRE_FEAT_X 0xNu` and `| 0xN | X |` */
	cr_assert_geq(each_pair_is_in(hdrs,
				      "#define (TD_WIRE_FEAT_[A-Z0-9_]+) "
				      "(0x[0-9a-f]+)u",
				      "| `%2$s` | `%1$s` |", doc,
				      "docs/protocol.md"),
		      24, "the feature bits of the headers were found");
	cr_assert_geq(each_pair_is_in(doc,
				      "^\\| `(0x[0-9a-f]+)` \\| "
				      "`(TD_WIRE_FEAT_[A-Z0-9_]+)` \\|",
				      "#define %2$s %1$su", hdrs,
				      "proto/wire.h or proto/wire-status.h"),
		      24, "the feature rows were found");
	/* and where the text gives a flag or bit its value: "`TD_WIRE_X`,
	 * `0xN`", "`TD_WIRE_X` (`0xN`)" (not "`0xN` = `TD_WIRE_Y`", the
	 * value of the name after it) and "`0xN` = `TD_WIRE_X`" */
	cr_assert_geq(each_pair_is_in(doc,
				      "`(TD_WIRE_[A-Z0-9_]+)`,?[[:space:]]\\(?"
				      "`(0x[0-9a-f]+)`([^[:space:]]|"
				      "[[:space:]][^=])",
				      "#define %1$s %2$su", hdrs,
				      "proto/wire.h or proto/wire-status.h"),
		      20, "the values in the text were found");
	cr_assert_geq(each_pair_is_in(doc,
				      "`(0x[0-9a-f]+)` =[[:space:]]+"
				      "`(TD_WIRE_[A-Z0-9_]+)`",
				      "#define %2$s %1$su", hdrs,
				      "proto/wire.h or proto/wire-status.h"),
		      7, "the values in the text were found");
	free(hdrs);
	free(status);
	free(wire);
	free(doc);
}
