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
};

static void usage(FILE *f)
{
	fprintf(f, "usage: tensorctl COMMAND [ARGS]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(f, "  tensorctl %s\n", cmds[i].usage);
	fprintf(f, "\n  tensorctl --help | --version\n");
}

int main(int argc, char **argv)
{
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
