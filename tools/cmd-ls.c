/* SPDX-License-Identifier: MIT */
/* tensorctl ls, stat, rm: the daemon's catalogue (tensors and rings). */
#include <stdio.h>
#include <string.h>

#include "tensorctl.h"

/* NAME [--json] [--socket PATH]; returns 0, or -1 on a usage error. */
static int one_arg(int argc, char **argv, const char **arg, int *json,
		   int arg_required)
{
	*arg = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json") && json)
			*json = 1;
		else if (!strcmp(argv[i], "--socket") && i + 1 < argc)
			tctl_socket = argv[++i];
		else if (argv[i][0] == '-' || *arg)
			return -1;
		else
			*arg = argv[i];
	}
	return arg_required && !*arg ? -1 : 0;
}

int cmd_ls(int argc, char **argv)
{
	struct td_error e = {0};
	struct td_entry *list;
	struct td_client *c;
	const char *prefix;
	size_t n;
	int rc, json = 0;

	if (one_arg(argc, argv, &prefix, &json, 0) < 0) {
		fputs("usage: tensorctl ls [PREFIX] [--json]\n", stderr);
		return TCTL_USAGE;
	}
	rc = tctl_connect(&c);
	if (rc)
		return rc;
	rc = td_client_list(c, prefix, &list, &n, &e);
	td_client_close(c);
	if (rc < 0)
		return tctl_refused("ls", rc, &e);
	if (json)
		putchar('[');
	for (size_t i = 0; i < n; i++) {
		if (json && i)
			putchar(',');
		tctl_print_entry(&list[i], json, NULL);
	}
	if (json)
		puts("]");
	td_entry_list_free(list, n);
	return TCTL_OK;
}

int cmd_stat(int argc, char **argv)
{
	struct td_error e = {0};
	struct td_ring_stat rs;
	struct td_entry ent;
	struct td_client *c;
	const char *name;
	int rc, json = 0, have_rs = 0;

	if (one_arg(argc, argv, &name, &json, 1) < 0) {
		fputs("usage: tensorctl stat NAME [--json]\n", stderr);
		return TCTL_USAGE;
	}
	rc = tctl_connect(&c);
	if (rc)
		return rc;
	rc = td_client_stat(c, name, &ent, &e);
	/* a ring: its slots and subscribers too (gone meanwhile: without) */
	if (rc == 0 && (ent.flags & TD_ENTRY_RING))
		have_rs = td_client_ring_stat(c, name, &rs, NULL) == 0;
	td_client_close(c);
	if (rc < 0)
		return tctl_refused(name, rc, &e);
	tctl_print_entry(&ent, json, have_rs ? &rs : NULL);
	if (json)
		putchar('\n');
	td_entry_fini(&ent);
	return TCTL_OK;
}

int cmd_rm(int argc, char **argv)
{
	struct td_error e = {0};
	struct td_client *c;
	const char *name;
	uint64_t version = 0;
	int rc;

	if (one_arg(argc, argv, &name, NULL, 1) < 0) {
		fputs("usage: tensorctl rm NAME\n", stderr);
		return TCTL_USAGE;
	}
	rc = tctl_connect(&c);
	if (rc)
		return rc;
	rc = td_client_delete(c, name, &version, &e);
	td_client_close(c);
	if (rc < 0)
		return tctl_refused(name, rc, &e);
	printf("removed %s version %llu\n", name,
	       (unsigned long long)version);
	return TCTL_OK;
}
