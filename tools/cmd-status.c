/* SPDX-License-Identifier: MIT */
/* tensorctl status: the daemon's figures, its clients and uids. */
#include <stdio.h>

#include <json-c/json.h>

#include "progress.h"
#include "tensorctl.h"

static const char *path_name(uint32_t path)
{
	return path == TD_CLIENT_PATH_PIDFD ? "pidfd"
	       : path == TD_CLIENT_PATH_SCM ? "scm"
					    : "auto";
}

static const char *const refusal_names[3] = {"permission", "quota",
					     "input"};

#define JU64(o, k, v) json_object_object_add(o, k, json_object_new_uint64(v))

static struct json_object *client_json(const struct td_status_client *c)
{
	struct json_object *o = json_object_new_object();

	JU64(o, "pid", c->pid);
	JU64(o, "uid", c->uid);
	json_object_object_add(o, "comm", json_object_new_string(c->comm));
	json_object_object_add(o, "import",
			       json_object_new_string(path_name(c->path_in)));
	JU64(o, "leases", c->leases);
	JU64(o, "allocs", c->allocs);
	JU64(o, "watches", c->watches);
	JU64(o, "waiters", c->waiters);
	JU64(o, "bytes_held", c->bytes_held);
	JU64(o, "requests", c->requests);
	JU64(o, "refusals", c->refusals);
	JU64(o, "age_ms", c->age_ms);
	return o;
}

static int status_json(const struct td_status *s)
{
	struct json_object *o = json_object_new_object();
	struct json_object *ref = json_object_new_object();
	struct json_object *modes = json_object_new_object();
	struct json_object *cl = json_object_new_array();
	struct json_object *ui = json_object_new_array();
	struct td_status_pinned pl;
	uint64_t n_pidfd = 0, n_scm = 0;

	json_object_object_add(o, "version",
			       json_object_new_string(s->ident));
	JU64(o, "uptime_ms", s->uptime_ms);
	JU64(o, "daemon_uid", s->daemon_uid);
	json_object_object_add(o, "scope",
			       json_object_new_string(
				       s->scope == TD_STATUS_SCOPE_ALL
					       ? "all"
					       : "uid"));
	json_object_object_add(o, "import", json_object_new_string(path_name(
						    s->import_forced)));
	JU64(o, "tensors", s->tensors);
	JU64(o, "bytes", s->bytes);
	JU64(o, "max_bytes", s->max_bytes);
	if (s->byte_reserve != UINT64_MAX)
		JU64(o, "byte_reserve", s->byte_reserve);
	JU64(o, "rings", s->rings);
	JU64(o, "requests", s->requests);
	JU64(o, "evictions", s->evictions);
	for (int k = 0; k < 3; k++)
		JU64(ref, refusal_names[k], s->refused[k]);
	json_object_object_add(o, "refused", ref);
	JU64(o, "log_suppressed", s->log_suppressed);
	JU64(o, "policy_reloads", s->policy_reloads);
	JU64(o, "clients_total", s->clients_total);
	for (size_t i = 0; i < s->client_count; i++) {
		n_pidfd += s->clients[i].path_in == TD_CLIENT_PATH_PIDFD;
		n_scm += s->clients[i].path_in == TD_CLIENT_PATH_SCM;
		json_object_array_add(cl, client_json(&s->clients[i]));
	}
	JU64(modes, "pidfd", n_pidfd);
	JU64(modes, "scm", n_scm);
	json_object_object_add(o, "imports_in_use", modes);
	json_object_object_add(o, "clients", cl);
	for (size_t i = 0; i < s->uid_count; i++) {
		struct json_object *u = json_object_new_object();

		JU64(u, "uid", s->uids[i].uid);
		JU64(u, "bytes", s->uids[i].bytes);
		JU64(u, "quota", s->uids[i].quota);
		JU64(u, "pinned", s->uids[i].pinned);
		/* the `pinned` limit's figures, from a daemon that says */
		if (td_status_uid_pinned(s, i, &pl) == 0) {
			JU64(u, "pinned_use", pl.use);
			JU64(u, "pinned_limit", pl.limit);
		}
		json_object_array_add(ui, u);
	}
	json_object_object_add(o, "uids", ui);
	return tctl_json_print(o);
}

/* A limit: its size, or "none" for 0. */
static const char *limit(char buf[32], uint64_t v)
{
	return v ? tctl_size(buf, v) : "none";
}

static void status_text(const struct td_status *s)
{
	char a[32], b[32], c[32];
	uint64_t up = s->uptime_ms / 1000;
	struct td_status_pinned pl;
	bool pins;

	printf("%s, up %llud %02llu:%02llu:%02llu, daemon uid %u, import %s\n",
	       s->ident, (unsigned long long)(up / 86400),
	       (unsigned long long)(up / 3600 % 24),
	       (unsigned long long)(up / 60 % 60),
	       (unsigned long long)(up % 60), s->daemon_uid,
	       path_name(s->import_forced));
	printf("tensors %llu, %s of %s", (unsigned long long)s->tensors,
	       tctl_size(a, s->bytes), limit(b, s->max_bytes));
	if (s->byte_reserve && s->byte_reserve != UINT64_MAX)
		printf(" (%s of it for root and the daemon's uid only)",
		       tctl_size(c, s->byte_reserve));
	printf(", rings %u, requests %llu, evictions %llu\n", s->rings,
	       (unsigned long long)s->requests,
	       (unsigned long long)s->evictions);
	printf("refused: permission %llu, quota %llu, input %llu; audit "
	       "lines suppressed %llu; policy reloads %llu\n",
	       (unsigned long long)s->refused[0],
	       (unsigned long long)s->refused[1],
	       (unsigned long long)s->refused[2],
	       (unsigned long long)s->log_suppressed,
	       (unsigned long long)s->policy_reloads);
	printf("clients: %u connected%s\n", s->clients_total,
	       s->scope == TD_STATUS_SCOPE_ALL ? "" : " (your uid's shown)");
	printf("  %7s %6s %-16s %-5s %6s %10s %9s %7s\n", "PID", "UID",
	       "COMMAND", "PATH", "LEASES", "HELD", "REQUESTS", "REFUSED");
	for (size_t i = 0; i < s->client_count; i++) {
		const struct td_status_client *k = &s->clients[i];

		printf("  %7u %6u %-16s %-5s %6u %10s %9llu %7llu\n", k->pid,
		       k->uid, k->comm, path_name(k->path_in), k->leases,
		       tctl_size(a, k->bytes_held),
		       (unsigned long long)k->requests,
		       (unsigned long long)k->refusals);
	}
	/*
	 * PIN-FLAGGED: its own versions published with the PIN flag;
	 * PINNED-USE of PINNED-LIMIT: other uids' bytes it holds, what the
	 * `pinned` limit is checked against (docs/policy.md §5). Two
	 * figures, named apart.
	 */
	pins = s->uid_count && td_status_uid_pinned(s, 0, &pl) == 0;
	printf("uids:\n  %6s %10s %10s %11s", "UID", "BYTES", "QUOTA",
	       "PIN-FLAGGED");
	printf(pins ? " %10s %12s\n" : "\n", "PINNED-USE", "PINNED-LIMIT");
	for (size_t i = 0; i < s->uid_count; i++) {
		printf("  %6u %10s %10s %11s", s->uids[i].uid,
		       tctl_size(a, s->uids[i].bytes),
		       limit(b, s->uids[i].quota),
		       tctl_size(c, s->uids[i].pinned));
		if (pins && td_status_uid_pinned(s, i, &pl) == 0)
			printf(" %10s %12s", tctl_size(a, pl.use),
			       limit(b, pl.limit));
		putchar('\n');
	}
}

int cmd_status(int argc, char **argv)
{
	static const struct option opts[] = {TCTL_COMMON_OPTIONS};
	struct td_error e = {0};
	struct td_status *s;
	struct td_client *c;
	int rc, o;

	while ((o = tctl_getopt(argc, argv, "", opts, &rc)) != -1)
		return rc;
	if (optind < argc)
		return tctl_usage(argv[0], "takes no operand");
	rc = tctl_connect(&c);
	if (rc)
		return rc;
	rc = td_client_status(c, &s, &e);
	td_client_close(c);
	if (rc < 0)
		return tctl_refused("status", rc, &e);
	if (tctl_json)
		rc = status_json(s);
	else
		status_text(s);
	td_status_free(s);
	return tctl_json ? rc : TCTL_OK;
}
