/* SPDX-License-Identifier: MIT */
/* tensorctl ls, stat, rm: the daemon's catalogue (tensors and rings). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "tensorctl.h"

/*
 * The common options and at most one operand (required or not) of cmd.
 * Returns -1 to go on, or a status to return.
 */
static int one_arg(int argc, char **argv, const char **arg, int required)
{
	static const struct option opts[] = {TCTL_COMMON_OPTIONS};
	int rc, o;

	while ((o = tctl_getopt(argc, argv, "", opts, &rc)) != -1)
		return rc;
	*arg = optind < argc ? argv[optind] : NULL;
	if (argc - optind > 1 || (required && !*arg))
		return tctl_operands(argv[0], argc, argv, 1,
				     required ? "needs one NAME"
					      : "takes one PREFIX at most");
	return -1;
}

int cmd_ls(int argc, char **argv)
{
	struct td_error e = {0};
	struct td_entry *list;
	struct td_client *c;
	const char *prefix;
	size_t n;
	int rc = one_arg(argc, argv, &prefix, 0), json;

	if (rc >= 0)
		return rc;
	json = tctl_json;
	rc = tctl_connect(&c);
	if (rc)
		return rc;
	rc = td_client_list(c, prefix, &list, &n, &e);
	td_client_close(c);
	if (rc < 0)
		return tctl_refused_glob("ls", "ls", prefix, rc, &e,
					 "ls takes a PREFIX, not a pattern: "
					 "ls cam/ lists every name under cam/",
					 NULL);
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
	int rc = one_arg(argc, argv, &name, 1), json, have_rs = 0;

	if (rc >= 0)
		return rc;
	json = tctl_json;
	rc = tctl_connect(&c);
	if (rc)
		return rc;
	rc = td_client_stat(c, name, &ent, &e);
	/* a ring: its slots and subscribers too (gone meanwhile: without) */
	if (rc == 0 && (ent.flags & TD_ENTRY_RING))
		have_rs = td_client_ring_stat(c, name, &rs, NULL) == 0;
	td_client_close(c);
	if (rc < 0)
		return tctl_refused_glob("stat", name, name, rc, &e,
					 "stat takes one NAME, not a pattern: "
					 "tensorctl ls PREFIX lists the names",
					 "");
	tctl_print_entry(&ent, json, have_rs ? &rs : NULL);
	if (json)
		putchar('\n');
	else
		tctl_text_meta(stdout, ent.meta, ent.meta_len);
	td_entry_fini(&ent);
	return TCTL_OK;
}

int cmd_rm(int argc, char **argv)
{
	struct td_error e = {0};
	struct td_client *c;
	const char *name;
	uint64_t version = 0;
	int rc = one_arg(argc, argv, &name, 1);

	if (rc >= 0)
		return rc;
	rc = tctl_connect(&c);
	if (rc)
		return rc;
	rc = td_client_delete(c, name, &version, &e);
	td_client_close(c);
	if (rc < 0)
		return tctl_refused_glob("rm", name, name, rc, &e,
					 "rm takes one NAME, not a pattern: "
					 "tensorctl ls PREFIX lists the names "
					 "to remove one by one",
					 " to remove one by one");
	if (tctl_json) {
		struct json_object *j = json_object_new_object();

		json_object_object_add(j, "removed",
				       json_object_new_string(name));
		json_object_object_add(j, "version",
				       json_object_new_uint64(version));
		return tctl_json_print(j);
	}
	printf("removed %s version %llu\n", name,
	       (unsigned long long)version);
	return TCTL_OK;
}
