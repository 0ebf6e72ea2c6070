/* SPDX-License-Identifier: MIT */
/* What the daemon-facing tensorctl commands share: connection, printing. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "bytes.h"
#include "td-json.h"
#include "progress.h"
#include "tensorctl.h"

const char *tctl_socket;
int tctl_json;
int tctl_json_errors;
int tctl_raw_bytes;

char *tctl_size(char buf[32], uint64_t bytes)
{
	static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB",
					   "PiB", "EiB"};
	double v = (double)bytes;
	unsigned u = 0;

	if (tctl_raw_bytes || bytes < 1024) {
		snprintf(buf, 32, "%" PRIu64 " B", bytes);
		return buf;
	}
	v /= 1024;
	while (v >= 1024 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
		v /= 1024;
		u++;
	}
	snprintf(buf, 32, "%.1f %s", v, unit[u]);
	return buf;
}

int tctl_stdout_error(void)
{
	static int err;

	if (fflush(stdout) != 0 && !err)
		err = errno ? errno : EIO;
	if (!err && ferror(stdout))
		err = EIO;
	return err;
}

int tctl_json_print(struct json_object *o)
{
	fflush(stdout);
	printf("%s\n", json_object_to_json_string_ext(
				o, JSON_C_TO_STRING_PLAIN |
					   JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
	return TCTL_OK;
}

void tctl_say(const char *fmt, ...)
{
	char line[TD_REASON_MAX + 1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* what stdout printed before comes first, as it happened */
	fflush(stdout);
	fputs("tensorctl: ", stderr);
	tctl_text_escaped(stderr, line, strlen(line));
	fputc('\n', stderr);
}

int tctl_room(void *pp, size_t n, size_t *cap, size_t size, size_t first)
{
	void **p = pp;
	size_t c = *cap ? 2 * *cap : first;
	void *np;

	if (n < *cap)
		return 0;
	np = realloc(*p, c * size);
	if (!np)
		return tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
	*p = np;
	*cap = c;
	return 0;
}

/* tctl_json_hold(): the next error object waits for tctl_json_held() */
static int json_hold;
static struct json_object *json_held;

int tctl_fail(int status, const char *kind, int err, const char *fmt, ...)
{
	char reason[TD_REASON_MAX + 512];
	struct json_object *e, *o;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	if (!tctl_json && !tctl_json_errors) {
		tctl_say("%s", reason);
		return status;
	}
	e = json_object_new_object();
	o = json_object_new_object();
	json_object_object_add(e, "kind", json_object_new_string(kind));
	json_object_object_add(e, "errno", json_object_new_int(err));
	json_object_object_add(e, "reason", json_object_new_string(reason));
	json_object_object_add(o, "error", e);
	if (json_hold && !json_held) {
		json_held = o;
		return status;
	}
	tctl_json_print(o);
	return status;
}

void tctl_json_hold(void)
{
	json_hold = tctl_json || tctl_json_errors;
}

void tctl_json_held_add(const char *key, struct json_object *val)
{
	if (json_held)
		json_object_object_add(json_held, key, val);
	else
		json_object_put(val);
}

void tctl_json_held_print(void)
{
	struct json_object *o = json_held;

	json_hold = 0;
	json_held = NULL;
	if (o)
		tctl_json_print(o);
}

int tctl_refused(const char *what, int rc, const struct td_error *e)
{
	/* an empty NAME (`stat ""`) was said ": STAT: name: ..." */
	if (!*what)
		what = "''";
	/* the connection lost part-way (libtensord says ECONNRESET): the
	 * daemon stopped, restarted or crashed; it refused nothing, and a
	 * script tells the two apart by the kind, as for a connect */
	if (rc == -ECONNRESET)
		return tctl_fail(TCTL_REFUSED, "connect", -rc,
				 "%s: %s (the daemon closed the connection: "
				 "it stopped, restarted or crashed)",
				 what, e->reason[0] ? e->reason
						    : strerror(-rc));
	return tctl_fail(TCTL_REFUSED, "daemon", -rc, "%s: %s", what,
			 e->reason[0] ? e->reason : strerror(-rc));
}

int tctl_parse_size(const char *s, uint64_t *v)
{
	static const char suffix[] = "KMGT";
	const char *p;
	uint64_t x;
	char *end;

	/* digits first: strtoull would also take blanks, '+' and a '-'
	 * after a blank (" -1", a wrapped 16 EiB, read as no limit) */
	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	x = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	if (*end) {
		p = strchr(suffix, *end);
		if (!p || end[1])
			return -EINVAL;
		for (long i = 0; i <= p - suffix; i++)
			if (__builtin_mul_overflow(x, 1024, &x))
				return -EINVAL;
	}
	*v = x;
	return 0;
}

int tctl_connect(struct td_client **c)
{
	struct td_error e = {0};
	int rc = td_client_connect(tctl_socket, c, &e);
	/* nobody there: most often a daemon started on another socket
	 * (README: scripts/run.sh --socket /tmp/td.sock); a file there
	 * that is no socket (libtensord says which) was named by mistake */
	const char *hint = rc == -ECONNREFUSED &&
				   strstr(e.reason, ", not a socket)")
				   ? " (name tensord's socket with --socket "
				     "PATH or $TENSORD_SOCKET)"
			   : rc == -ENOENT || rc == -ECONNREFUSED
				   ? " (no tensord listens there: start one, "
				     "or name its socket with --socket PATH "
				     "or $TENSORD_SOCKET)"
			   : rc == -ETIMEDOUT
				   ? " (something holds that socket but does "
				     "not answer: a stopped or wedged tensord, "
				     "or another program's socket; name "
				     "tensord's with --socket PATH or "
				     "$TENSORD_SOCKET)"
			   : rc == -EACCES
				   ? " (the socket's mode and group decide who "
				     "may connect: tensord --socket-mode and "
				     "--socket-group, or the unit's "
				     "SocketMode=/SocketGroup=)"
				   : "";

	/* no connection is not a refusal: scripts tell "start the daemon"
	 * from "the daemon said no" by the kind */
	if (rc >= 0)
		return TCTL_OK;
	if (e.reason[0])
		return tctl_fail(TCTL_REFUSED, "connect", -rc, "%s%s",
				 e.reason, hint);
	return tctl_fail(TCTL_REFUSED, "connect", -rc, "connect %s: %s%s",
			 tctl_socket ? tctl_socket : "(default socket)",
			 strerror(-rc), hint);
}

int tctl_refused_glob(const char *cmd, const char *who, const char *arg,
		      int rc, const struct td_error *e, const char *hint,
		      const char *prefix_tail)
{
	size_t len = arg ? strlen(arg) : 0;
	const char *why = e->reason[0] ? e->reason : strerror(EINVAL);

	if (rc == -EINVAL && len && arg[strcspn(arg, "*?[")])
		return tctl_fail(TCTL_REFUSED, "daemon", EINVAL, "%s: %s (%s)",
				 cmd, why, hint);
	if (rc == -EINVAL && prefix_tail && len && arg[len - 1] == '/')
		return tctl_fail(TCTL_REFUSED, "daemon", EINVAL,
				 "%s: %s: %s (%s takes one NAME, not a "
				 "PREFIX: tensorctl ls %s lists the names%s)",
				 cmd, arg, why, cmd, arg, prefix_tail);
	return tctl_refused(who, rc, e);
}

int tctl_parse_u64(const char *s, uint64_t *v)
{
	char *end;
	unsigned long long x;

	/* digits only: strtoull would also take blanks, '+' and '-' */
	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	x = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*v = x;
	return 0;
}

/* "" is a scalar; else dimensions split by ',' or 'x', none empty (",6",
 * "6,", "6,,2" are refused, not read as 6 or 6x2). */
/*
 * A shape as tensorctl and Python print one, into buf: "(2,3)" (ls,
 * stat), "[2,3]" (--json), "(2, 3)" and "(6,)" (a numpy array's
 * .shape): the brackets off, one blank after each comma and a comma at
 * the end dropped. s itself when it is not in brackets; NULL when it
 * is, but does not fit buf (longer than any shape).
 */
static const char *shape_unbracket(const char *s, char *buf, size_t cap)
{
	size_t len = strlen(s), o = 0;

	if (len < 2 || !((s[0] == '(' && s[len - 1] == ')') ||
			 (s[0] == '[' && s[len - 1] == ']')))
		return s;
	if (len - 2 >= cap)
		return NULL;
	for (size_t i = 1; i + 1 < len; i++)
		if (!(s[i] == ' ' && s[i - 1] == ','))
			buf[o++] = s[i];
	if (o >= 2 && buf[o - 1] == ',')
		o--;
	buf[o] = 0;
	return buf;
}

int tctl_parse_shape(const char *s, uint64_t *shape, uint32_t *ndim)
{
	char buf[TD_ENTRY_MAX_DIMS * 24];
	uint32_t n = 0;

	if (s)
		s = shape_unbracket(s, buf, sizeof(buf));
	if (!s)
		return -EINVAL;
	for (const char *p = s; *s;) {
		size_t len = strcspn(p, ",x");
		char tok[32];

		if (!len)
			return -EINVAL;
		if (n == TD_ENTRY_MAX_DIMS)
			return -E2BIG;
		/* digits, and too many of them for 64 bits */
		if (len >= sizeof(tok))
			return strspn(p, "0123456789") >= len ? -ERANGE
							       : -EINVAL;
		memcpy(tok, p, len);
		tok[len] = 0;
		if (tctl_parse_u64(tok, &shape[n++]))
			return strspn(tok, "0123456789") == len ? -ERANGE
								: -EINVAL;
		if (!p[len])
			break;
		p += len + 1;
	}
	*ndim = n;
	return 0;
}

void tctl_print_shape(FILE *f, const uint64_t *shape, uint32_t ndim,
		      int json)
{
	fputc(json ? '[' : '(', f);
	for (uint32_t i = 0; i < ndim; i++)
		fprintf(f, "%s%llu", i ? "," : "",
			(unsigned long long)shape[i]);
	fputc(json ? ']' : ')', f);
}

void tctl_json_meta(FILE *f, const void *meta, size_t len)
{
	const uint8_t *p = meta;

	if (td__utf8_valid(p, len)) {
		fputs("\"meta\":", f);
		td_json_str(f, meta, len);
		return;
	}
	/* JSON strings cannot carry arbitrary bytes: hex them */
	fputs("\"meta_hex\":\"", f);
	for (size_t i = 0; i < len; i++)
		fprintf(f, "%02x", p[i]);
	fputc('"', f);
}

void tctl_text_meta(FILE *f, const void *meta, size_t len)
{
	const uint8_t *p = meta;

	if (!len)
		return;
	fprintf(f, "  metadata (%zu B", len);
	if (!td__utf8_valid(p, len)) {
		fputs(", not UTF-8, hex): ", f);
		for (size_t i = 0; i < len; i++)
			fprintf(f, "%02x", p[i]);
		fputc('\n', f);
		return;
	}
	fputs("): ", f);
	tctl_text_escaped(f, p, len);
	fputc('\n', f);
}

void tctl_text_escaped(FILE *f, const void *text, size_t len)
{
	const uint8_t *p = text;

	/* on one line: a control byte or a backslash escaped, so text from
	 * a tenant or a file cannot move the terminal's cursor or fake a
	 * line of this output */
	for (size_t i = 0; i < len; i++) {
		if (p[i] == '\\')
			fputs("\\\\", f);
		else if (p[i] == '\n')
			fputs("\\n", f);
		else if (p[i] == '\t')
			fputs("\\t", f);
		else if (p[i] < 0x20 || p[i] == 0x7f)
			fprintf(f, "\\x%02x", p[i]);
		else if (p[i] == 0xc2 && i + 1 < len && p[i + 1] >= 0x80 &&
			 p[i + 1] < 0xa0) /* C1 controls: 8-bit CSI and co. */
			fprintf(f, "\\u%04x", p[++i]);
		else
			fputc(p[i], f);
	}
}

void tctl_print_entry(const struct td_entry *e, int json,
		      const struct td_ring_stat *rs)
{
	const char *dt = td_tensor_dtype_name(e->dtype);
	int ring = !!(e->flags & TD_ENTRY_RING);
	/* not write-sealed: it trusts its producer (docs/fastpath.md) */
	int recycle = !!(e->flags & TD_ENTRY_RECYCLE);
	char size[32];

	if (!json) {
		printf("%-32s v%-6llu %-4s ", e->name,
		       (unsigned long long)e->version, dt ? dt : "?");
		tctl_print_shape(stdout, e->shape, e->ndim, 0);
		printf(" %s, %u lease%s%s%s%s", tctl_size(size, e->bytes),
		       e->lease_count,
		       e->lease_count == 1 ? "" : "s",
		       (e->flags & TD_PUBLISH_PIN) ? ", pinned" : "",
		       ring ? ", ring" : "",
		       recycle ? ", recyclable (not write-sealed)" : "");
		if (rs)
			printf(" (%u slots, %u of %u subscribers)",
			       rs->slot_count, rs->subscribers,
			       rs->reader_count);
		putchar('\n');
		return;
	}
	printf("{\"name\":");
	td_json_cstr(stdout, e->name);
	printf(",\"version\":%llu,\"dtype\":", (unsigned long long)e->version);
	td_json_cstr(stdout, dt);
	printf(",\"shape\":");
	tctl_print_shape(stdout, e->shape, e->ndim, 1);
	printf(",\"bytes\":%llu,\"lease_count\":%u,\"pinned\":%s,"
	       "\"ring\":%s,\"recyclable\":%s,",
	       (unsigned long long)e->bytes, e->lease_count,
	       (e->flags & TD_PUBLISH_PIN) ? "true" : "false",
	       ring ? "true" : "false", recycle ? "true" : "false");
	if (rs)
		printf("\"slots\":%u,\"subscribers\":%u,\"readers\":%u,",
		       rs->slot_count, rs->subscribers, rs->reader_count);
	tctl_json_meta(stdout, e->meta, e->meta_len);
	printf("}");
}

/*
 * Undo one publish: delete the version only while it is the name's
 * current one, in one request, so a newer version someone else published
 * meanwhile stays. 1 when it was removed.
 */
void tctl_no_replace(struct td_publish *p)
{
	p->flags |= TD_PUBLISH_IF;
	p->if_version = 0;
}

int tctl_pub_refused(const char *name, int rc, const struct td_error *e,
		     bool no_replace, struct json_object *sk)
{
	if (!no_replace || rc != -EEXIST)
		return tctl_refused(name, rc, e);
	tctl_say("%s: skipped: %s (--no-replace)", name,
		 e->reason[0] ? e->reason : strerror(-rc));
	if (sk)
		json_object_array_add(sk, json_object_new_string(name));
	return TCTL_SKIPPED;
}

int tctl_roll_back_one(struct td_client *c, const char *name,
		       uint64_t version)
{
	struct td_error e = {0};
	int rc = td_client_delete_version(c, name, version, &e);

	if (rc == 0)
		return 1;
	tctl_say("%s version %" PRIu64 " not rolled back (%s)", name, version,
		rc == -ENOENT ? "gone already"
		: rc == -ESTALE ? "replaced since"
				: e.reason);
	return 0;
}

/* A decoder's refusal (proto/err.h), as text on stderr or JSON. */
void tctl_print_td_err(const struct td_err *e, int json, const char *path)
{
	if (!json) {
		char value[32] = "", need[64] = "";

		if (e->has_value)
			snprintf(value, sizeof(value), " value %llu",
				 (unsigned long long)e->value);
		if (e->kind == TD_ERR_TRUNCATED)
			snprintf(need, sizeof(need), " (need %llu, have %llu)",
				 (unsigned long long)e->need,
				 (unsigned long long)e->have);
		/* the file, and what it was taken for: a file of no known
		 * format (an empty one, a PNG) is read as a blob, and its
		 * refusal said only "buffer shorter than the blob header" */
		tctl_say("refused: %s%s%s%s%s at offset %llu: %s (%s, read as "
			 "a tensor blob: no .tgm, Hurray or .npy magic)",
			 td_err_kind_name(e->kind), e->field ? " field " : "",
			 e->field ? e->field : "", value, need,
			 (unsigned long long)e->offset,
			 e->reason ? e->reason : "",
			 strcmp(path, "-") ? path : "standard input");
		return;
	}
	printf("{\"error\":{\"kind\":");
	td_json_cstr(stdout, td_err_kind_name(e->kind));
	printf(",\"field\":");
	td_json_cstr(stdout, e->field);
	if (e->has_value)
		printf(",\"value\":%llu", (unsigned long long)e->value);
	else
		printf(",\"value\":null");
	printf(",\"offset\":%llu", (unsigned long long)e->offset);
	if (e->kind == TD_ERR_TRUNCATED)
		printf(",\"need\":%llu,\"have\":%llu",
		       (unsigned long long)e->need,
		       (unsigned long long)e->have);
	printf(",\"message\":");
	td_json_cstr(stdout, e->reason);
	/* what every tensorctl error carries, after the decoder's detail */
	printf(",\"errno\":%d,\"reason\":", -td_err_kind_errno(e->kind));
	td_json_cstr(stdout, e->reason);
	printf("}}\n");
}
