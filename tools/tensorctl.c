/* SPDX-License-Identifier: MIT */
/* tensorctl: the command line over the tensord client API and proto/. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "output.h"
#include "tensorctl.h"

#ifndef TD_VERSION
#define TD_VERSION "unknown"
#endif

/* Each command's entry; its synopsis and options are in help.c. */
static const struct tctl_cmd cmds[] = {
	{"inspect", cmd_inspect}, {"put", cmd_put},     {"get", cmd_get},
	{"ls", cmd_ls},           {"stat", cmd_stat},   {"rm", cmd_rm},
	{"watch", cmd_watch},     {"load", cmd_load},   {"status", cmd_status},
	{"save", cmd_save},       {"zarr", cmd_zarr},
};

static const struct tctl_cmd *find(const char *name)
{
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(cmds[i].name, name))
			return &cmds[i];
	return NULL;
}

/*
 * What went to stdout through stdio (a table, JSON, --help) reached it?
 * A full disk or /dev/full there made every command exit 0 with nothing
 * written. Returns rc, or TCTL_REFUSED when it did not (said on stderr:
 * stdout is what failed, even under --json).
 */
static int stdout_written(int rc)
{
	int err = tctl_stdout_error();

	if (!err)
		return rc;
	fprintf(stderr, "tensorctl: standard output: %s\n", strerror(err));
	return rc ? rc : TCTL_REFUSED;
}

static int run(int argc, char **argv);

/*
 * A standard fd closed at exec (`>&-`, `<&-`) is the lowest free number:
 * the daemon's socket or a file tensorctl opens took it, and stdio then
 * wrote the tensor's bytes (get -o -) or an event line (watch) into the
 * daemon's socket, or an error message into an output file. Hold each
 * closed one with /dev/null opened the other way, so that using it fails
 * with EBADF as the closed fd did (a closed stdout: status 1).
 */
static void hold_closed_std_fds(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		int n;

		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		n = open("/dev/null", fd ? O_RDONLY : O_WRONLY);
		if (n >= 0 && n != fd) { /* not the lowest: should not be */
			dup2(n, fd);
			close(n);
		}
	}
}

int main(int argc, char **argv)
{
	hold_closed_std_fds();
	return stdout_written(run(argc, argv));
}

/* the options before the command */
static const struct option global_opts[] = {
	{"version", no_argument, NULL, 'V'}, TCTL_COMMON_OPTIONS};

static int run(int argc, char **argv)
{
	static const struct tctl_cli cli = {
		cmds, sizeof(cmds) / sizeof(cmds[0]), global_opts};
	const struct option *opts = global_opts;
	const struct tctl_cmd *cmd;
	char names[256];
	int c, rc, sig;

	if (argc > 1 && !strcmp(argv[1], TCTL_COMPLETE))
		return tctl_complete(&cli, argc - 2, argv + 2);
	/* --json anywhere: even a usage error is reported as JSON (results
	 * are JSON once getopt takes it as an option: it set results as
	 * JSON when it was an option's value, `--meta --json`, or a name
	 * after "--") */
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--json"))
			tctl_json_errors = 1;
	opterr = 0;
	/* global options come before the command ('+': stop there; ':' a
	 * value missing, `tensorctl --socket`, told apart from a value
	 * given to a flag, which it was said to be) */
	while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		switch (c) {
		case TCTL_OPT_SOCKET:
			if (!*optarg)
				return tctl_usage(NULL, TCTL_EMPTY_SOCKET);
			tctl_socket = optarg;
			break;
		case TCTL_OPT_JSON:
			tctl_json = 1;
			break;
		case TCTL_OPT_BYTES:
			tctl_raw_bytes = 1;
			break;
		case 'h':
		case TCTL_OPT_HELP:
			tctl_help_all(stdout);
			return TCTL_OK;
		case 'V':
			printf("tensorctl %s\n", TD_VERSION);
			return TCTL_OK;
		case ':':
			return tctl_usage(NULL, "option '%s' needs a value",
					  argv[optind - 1]);
		default:
			/* `--json=1`: a value given to an option without */
			if (optopt && !strncmp(argv[optind - 1], "--", 2))
				return tctl_usage(
					NULL, "option '%.*s' takes no value",
					(int)strcspn(argv[optind - 1], "="),
					argv[optind - 1]);
			return tctl_usage(NULL, "unknown or incomplete option "
					  "'%s' (tensorctl --help lists them)",
					  argv[optind - 1]);
		}
	}
	if (optind >= argc) {
		if (!tctl_json_errors)
			tctl_help_all(stderr);
		return tctl_usage(NULL, "no command given");
	}
	cmd = find(argv[optind]);
	if (!cmd) {
		tctl_commands(names, sizeof(names));
		return tctl_usage(NULL, "unknown command '%s' (valid: %s)",
				  argv[optind], names);
	}
	tctl_signals_init();
	rc = cmd->fn(argc - optind, argv + optind);
	tctl_json_held_print();
	/* a write stopped by a signal: end as that signal would have */
	sig = tctl_interrupted();
	if (sig) {
		fflush(NULL);
		signal(sig, SIG_DFL);
		raise(sig);
	}
	return rc;
}
