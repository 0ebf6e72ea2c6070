/* SPDX-License-Identifier: MIT */
/* tensorctl: the command line over the tensord client API and proto/. */
#include <stdio.h>
#include <string.h>

#include "tensorctl.h"

#ifndef TD_VERSION
#define TD_VERSION "unknown"
#endif

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *usage;
} cmds[] = {
	{"inspect", cmd_inspect, "inspect [--json] FILE"},
	{"put", cmd_put,
	 "put NAME --dtype T --shape D,D.. [--meta STR] [--pin] FILE|-"},
	{"get", cmd_get,
	 "get NAME [--version N | --newer N [--timeout MS]] [-o FILE] "
	 "[--json]"},
	{"ls", cmd_ls, "ls [PREFIX] [--json]"},
	{"stat", cmd_stat, "stat NAME [--json]"},
	{"rm", cmd_rm, "rm NAME"},
	{"watch", cmd_watch,
	 "watch NAME|PREFIX [--prefix] [--count N] [--json]"},
	{"load", cmd_load,
	 "load FILE.tgm [--message N] [--variable-key DOT.PATH] | "
	 "load FILE.hrry [--prefix P]"},
	{"save", cmd_save,
	 "save NAME... -o FILE.tgm | save -o FILE.hrry [NAMES...] "
	 "[--format tgm|hrry]"},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: tensorctl COMMAND [ARGS]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(f, "  tensorctl %s\n", cmds[i].usage);
	fprintf(f, "\n  tensorctl --help | --version\n"
		   "\n  --socket PATH (before the command, or in it) names the "
		   "daemon socket\n");
}

int main(int argc, char **argv)
{
	/* global options come before the command */
	while (argc >= 3 && !strcmp(argv[1], "--socket")) {
		tctl_socket = argv[2];
		argc -= 2;
		argv += 2;
	}
	if (argc < 2) {
		usage(stderr);
		return TCTL_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return TCTL_OK;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("tensorctl %s\n", TD_VERSION);
		return TCTL_OK;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "tensorctl: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return TCTL_USAGE;
}
