/* SPDX-License-Identifier: MIT */
/*
 * tensorctl and Hurray files (specs/hurray.md): `inspect FILE.hrry`
 * (recognised by its magic), `load FILE.hrry [--prefix P]` and
 * `save -o FILE.hrry [NAMES...]`, all over <tensord/hrry.h>.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "hrry.h"
#include "input.h"
#include "output.h"
#include "td-json.h"
#include "keep.h"
#include "tensorctl.h"
#include "wire.h"

int inspect_hrry_sniff(const uint8_t *buf, size_t len)
{
	return len >= 8 && !memcmp(buf, "HRRYFILE", 8);
}

/* Whether a (a word of argv) is a long option of opts whose value is the
 * next word: "--prefix P", or an abbreviation getopt_long takes. */
static int value_follows(const char *a, const struct option *opts)
{
	const struct option *hit = NULL;
	size_t n;

	if (!opts || strncmp(a, "--", 2) || !a[2] || strchr(a, '='))
		return 0;
	n = strlen(a + 2);
	for (; opts->name; opts++) {
		if (!strcmp(a + 2, opts->name))
			return opts->has_arg == required_argument;
		if (!strncmp(a + 2, opts->name, n))
			hit = opts; /* an ambiguous one getopt refuses */
	}
	return hit && hit->has_arg == required_argument;
}

/* Does argv name a Hurray file (by --format, extension or, for load,
 * the magic of the existing file)? opts: the command's options, so that
 * an option's value ("--prefix P/") is not taken for the file. */
int tctl_hrry_wanted(int argc, char **argv, int by_magic,
		     const struct option *opts)
{
	const char *file = NULL, *format = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
		if (!strcmp(a, "--format"))
			format = v;
		else if (!strncmp(a, "--format=", 9))
			format = a + 9;
		else if (!strcmp(a, "-o") || !strcmp(a, "--output"))
			file = v;
		else if (!strncmp(a, "--output=", 9))
			file = a + 9;
		else if (!strncmp(a, "-o", 2))
			file = a + 2;
		else
			continue;
		if (format)
			return !strcmp(format, "hrry");
	}
	for (int i = 1; !file && i < argc; i++) {
		if (!strcmp(argv[i], "--")) { /* operands only after it */
			file = i + 1 < argc ? argv[i + 1] : NULL;
			break;
		}
		if (value_follows(argv[i], opts))
			i++;
		else if (argv[i][0] != '-')
			file = argv[i];
	}
	if (!file)
		return 0;
	size_t n = strlen(file);
	if (n >= 5 && !strcmp(file + n - 5, ".hrry"))
		return 1;
	if (!by_magic)
		return 0;
	/* load of an existing file: its magic decides */
	uint8_t magic[8];
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t got = pread(fd, magic, sizeof(magic), 0);
	close(fd);
	return got == 8 && inspect_hrry_sniff(magic, 8);
}

/* ---- inspect ---- */

static void hex(FILE *f, const uint8_t *p, size_t n)
{
	fputc('"', f);
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%02x", p[i]);
	fputc('"', f);
}

/* JSON numbers are exact only up to 2^53: larger ones as strings */
static void json_u64(FILE *f, uint64_t v)
{
	if (v > (UINT64_C(1) << 53))
		fprintf(f, "\"%" PRIu64 "\"", v);
	else
		fprintf(f, "%" PRIu64, v);
}

static void json_i64(FILE *f, int64_t v)
{
	if (v > (INT64_C(1) << 53) || v < -(INT64_C(1) << 53))
		fprintf(f, "\"%" PRId64 "\"", v);
	else
		fprintf(f, "%" PRId64, v);
}

static const char *kv_kind_name(enum td_hrry_kv_kind k)
{
	static const char *const names[] = {
		NULL,    "string", "int64", "uint64",
		"float64", "bool", "bytes", "array"};
	return (unsigned)k < 8 ? names[k] : "unknown";
}

static void kv_value(FILE *f, const struct td_hrry_kv_value *v, int json)
{
	switch (v->kind) {
	case TD_HRRY_KV_STRING:
		if (json) {
			td_json_str(f, (const char *)v->data, v->data_len);
			break;
		}
		fputc('"', f);
		tctl_text_escaped(f, v->data, v->data_len);
		fputc('"', f);
		break;
	case TD_HRRY_KV_INT64:
		if (json)
			json_i64(f, v->i64_value);
		else
			fprintf(f, "%" PRId64, v->i64_value);
		break;
	case TD_HRRY_KV_UINT64:
		if (json)
			json_u64(f, v->u64_value);
		else
			fprintf(f, "%" PRIu64, v->u64_value);
		break;
	case TD_HRRY_KV_FLOAT64:
		if (json)
			td_json_double(f, v->f64_value);
		else
			fprintf(f, "%.17g", v->f64_value);
		break;
	case TD_HRRY_KV_BOOL:
		fputs(v->bool_value ? "true" : "false", f);
		break;
	case TD_HRRY_KV_BYTES:
		hex(f, v->data, v->data_len);
		break;
	case TD_HRRY_KV_ARRAY:
		fputc('[', f);
		for (size_t k = 0; k < v->item_count; k++) {
			if (k)
				fputc(',', f);
			kv_value(f, &v->items[k], json);
		}
		fputc(']', f);
		break;
	}
}

static void type_name(FILE *f, uint8_t tag, int json)
{
	const char *n = td_hrry_type_name(tag);
	if (n)
		fprintf(f, json ? "\"%s\"" : "%s", n);
	else
		fprintf(f, json ? "\"0x%02x\"" : "0x%02x", tag);
}

/* One index entry: its status, from the checks of §13 steps 7-11. */
static void inspect_entry(struct td_hrry_file_reader *r, uint64_t i,
			  int json)
{
	struct td_hrry_entry e;
	struct td_hrry_desc *d = malloc(sizeof(*d));
	struct td_hrry_err err = {0};
	const char *status = "ok";
	int rc;

	td_hrry_file_reader_entry(r, i, &e);
	rc = d ? td_hrry_file_reader_read_descriptor(r, e.name, e.name_len, d,
						     &err) :
		 -ENOMEM;
	bool decoded = rc == 0;
	if (rc == 0)
		rc = td_hrry_rcore_check_supported(&e, d, &err);
	if (rc == -ENOTSUP)
		status = "unsupported";
	else if (rc)
		status = "invalid";
	if (json) {
		printf("%s{\"name\":", i ? "," : "");
		td_json_str(stdout, e.name, e.name_len);
		printf(",\"status\":\"%s\",\"dtype\":", status);
		if (decoded)
			type_name(stdout, d->type_tag, 1);
		else
			printf("null");
		printf(",\"shape\":");
		if (decoded) {
			printf("[");
			for (uint32_t k = 0; k < d->rank; k++) {
				if (k)
					printf(",");
				json_u64(stdout, d->shape[k]);
			}
			printf("]");
		} else {
			printf("null");
		}
		printf(",\"data_offset\":%" PRIu64 ",\"data_length\":%" PRIu64,
		       e.data_offset, e.data_length);
		if (rc) {
			printf(",\"error\":{\"kind\":\"%s\",\"reason\":",
			       td_hrry_error_name(err.kind));
			td_json_cstr(stdout, err.reason);
			printf("}");
		} else {
			printf(",\"error\":null");
		}
		printf("}");
	} else {
		printf("  ");
		tctl_text_escaped(stdout, e.name, e.name_len);
		printf(": ");
		if (decoded) {
			type_name(stdout, d->type_tag, 0);
			printf(" [");
			for (uint32_t k = 0; k < d->rank; k++)
				printf("%s%" PRIu64, k ? "," : "", d->shape[k]);
			printf("] %s", td_hrry_layout_name(d->layout_tag) ?
					       td_hrry_layout_name(d->layout_tag) :
					       "?");
			if (d->layout_tag == TD_HRRY_LAYOUT_COMPOSITE)
				printf(" rule %u, %u member(s)", d->rule,
				       d->member_count);
		}
		printf(", descriptor @%" PRIu64 "+%u, data @%" PRIu64
		       "+%" PRIu64 ": %s",
		       e.descriptor_offset, e.descriptor_length, e.data_offset,
		       e.data_length, status);
		if (rc)
			printf(" (%s: %s)", td_hrry_error_name(err.kind),
			       err.reason);
		printf("\n");
	}
	free(d);
}

static int open_failed(const struct td_hrry_err *e, int json, const char *what)
{
	if (json) {
		printf("{\"error\":{\"kind\":\"%s\",\"offset\":%" PRIu64
		       ",\"reason\":",
		       td_hrry_error_name(e->kind), e->offset);
		td_json_cstr(stdout, e->reason);
		printf("}}\n");
	} else {
		tctl_say("%s: refused: %s at offset %" PRIu64 ": %s", what,
			 td_hrry_error_name(e->kind), e->offset,
			 e->reason ? e->reason : "");
	}
	return TCTL_REFUSED;
}

int inspect_hrry(const char *path, const uint8_t *buf, size_t len, int json)
{
	struct td_hrry_transport t;
	struct td_hrry_file_reader *r;
	struct td_hrry_err e = {0};
	uint64_t n, io, il;
	uint32_t crc;
	int fd = -1, rc;

	if (!buf) {
		rc = tctl_hrry_transport(path, &t, &fd);
		if (rc)
			return rc;
	} else if (td_hrry_transport_mem(buf, len, &t) < 0) {
		tctl_say("out of memory");
		return TCTL_USAGE;
	}
	if (td_hrry_file_reader_new(&t, &r, &e) < 0) {
		if (fd >= 0)
			close(fd);
		return open_failed(&e, json, path);
	}
	td_hrry_file_reader_index(r, &io, &il, &crc);
	uint32_t a = td_hrry_file_reader_alignment(r);
	uint32_t flags = td_hrry_file_reader_flags(r);
	if (json)
		printf("{\"kind\":\"hrry\",\"alignment\":%u,\"flags\":%u,"
		       "\"index\":{\"offset\":%" PRIu64 ",\"length\":%" PRIu64
		       ",\"crc32c\":%u},\"kv\":[",
		       a, flags, io, il, crc);
	else
		printf("HRRYFILE 1.x: alignment %u, flags 0x%x, index @%" PRIu64
		       "+%" PRIu64 " crc32c 0x%08x\n",
		       a, flags, io, il, crc);
	td_hrry_file_reader_kv_count(r, &n);
	if (!json)
		printf("kv: %" PRIu64 " entr%s\n", n, n == 1 ? "y" : "ies");
	for (uint64_t i = 0; i < n; i++) {
		struct td_hrry_kv_entry kv;
		if (td_hrry_file_reader_kv_entry(r, i, &kv) < 0)
			continue; /* array items: out of memory, or over
				   * TD_HRRY_MAX_KV_ITEMS */
		if (json) {
			printf("%s{\"key\":", i ? "," : "");
			td_json_str(stdout, kv.key, kv.key_len);
			printf(",\"type\":\"%s\",\"value\":",
			       kv_kind_name(kv.value.kind));
			kv_value(stdout, &kv.value, 1);
			printf("}");
		} else {
			printf("  ");
			tctl_text_escaped(stdout, kv.key, kv.key_len);
			printf(" (%s) = ", kv_kind_name(kv.value.kind));
			kv_value(stdout, &kv.value, 0);
			printf("\n");
		}
	}
	td_hrry_file_reader_tensor_count(r, &n);
	if (json)
		printf("],\"tensors\":[");
	else
		printf("tensors: %" PRIu64 "\n", n);
	for (uint64_t i = 0; i < n; i++)
		inspect_entry(r, i, json);
	if (json)
		printf("]}\n");
	td_hrry_file_reader_free(&r);
	if (fd >= 0)
		close(fd);
	return TCTL_OK;
}

/* ---- load ---- */

struct loaded {
	struct td_client *c;
	struct json_object *published, *refused; /* --json */
	struct json_object *skipped; /* --no-replace, else NULL */
	uint64_t count, refusals;
	struct tctl_keep keep; /* what was published, and replaced */
};

/* Results are gathered and printed at the end, so a load rolled back
 * reports nothing as loaded. */
static void refused(struct loaded *l, const char *name, size_t len,
		    const char *kind, const char *reason)
{
	struct json_object *j = json_object_new_object();
	l->refusals++;
	json_object_object_add(j, "name",
			       json_object_new_string_len(name, (int)len));
	json_object_object_add(j, "kind", json_object_new_string(kind));
	json_object_object_add(j, "reason", json_object_new_string(reason));
	json_object_array_add(l->refused, j);
}

static void published(struct loaded *l, const char *name, uint64_t version,
		      const struct td_hrry_desc *d, uint32_t dtype)
{
	struct json_object *j = json_object_new_object(),
			   *shape = json_object_new_array();
	for (uint32_t k = 0; k < d->rank; k++)
		json_object_array_add(shape,
				      json_object_new_uint64(d->shape[k]));
	json_object_object_add(j, "name", json_object_new_string(name));
	json_object_object_add(j, "version", json_object_new_uint64(version));
	json_object_object_add(j, "dtype",
			       json_object_new_string(
				       td_tensor_dtype_name(dtype)));
	json_object_object_add(j, "shape", shape);
	json_object_array_add(l->published, j);
}

static const char *jstr(struct json_object *o, const char *key)
{
	struct json_object *v = NULL;
	json_object_object_get_ex(o, key, &v);
	return json_object_get_string(v);
}

static void print_loaded(const struct loaded *l, const char *path)
{
	for (size_t i = 0; i < json_object_array_length(l->published); i++) {
		struct json_object *j =
			json_object_array_get_idx(l->published, i), *v, *sh;
		json_object_object_get_ex(j, "version", &v);
		json_object_object_get_ex(j, "shape", &sh);
		printf("%s version %" PRIu64 " %s(", jstr(j, "name"),
		       json_object_get_uint64(v), jstr(j, "dtype"));
		for (size_t k = 0; k < json_object_array_length(sh); k++)
			printf("%s%" PRIu64, k ? "," : "",
			       json_object_get_uint64(
				       json_object_array_get_idx(sh, k)));
		printf(")\n");
	}
	for (size_t i = 0; i < json_object_array_length(l->refused); i++) {
		struct json_object *j = json_object_array_get_idx(l->refused, i);
		struct json_object *n = NULL;

		/* a name the file gave and tensord refused: any bytes */
		json_object_object_get_ex(j, "name", &n);
		printf("refused ");
		tctl_text_escaped(stdout, json_object_get_string(n),
				  (size_t)json_object_get_string_len(n));
		printf(": %s: %s\n", jstr(j, "kind"), jstr(j, "reason"));
	}
	printf("%s: %" PRIu64 " published, %" PRIu64 " refused", path,
	       l->count, l->refusals);
	if (l->skipped)
		printf(", %zu skipped (--no-replace)",
		       json_object_array_length(l->skipped));
	printf("\n");
}

/* prefix + e's name is a tensor name tensord takes (else *why). */
static bool name_ok(const char *prefix, const struct td_hrry_entry *e,
		    const char **why)
{
	char name[TD_NAME_MAX + 1];
	int n = snprintf(name, sizeof(name), "%s%.*s", prefix,
			 (int)e->name_len, e->name);

	return td_wire_name_check(name, (size_t)n, false, why) == 0;
}

/*
 * The metadata `save` keeps for the tensor of Hurray name e (KV
 * "tensord:NAME#meta", bytes; a tensord snapshot uses the same key), or
 * NULL with *len 0.
 */
const void *tctl_hrry_meta(struct td_hrry_file_reader *r,
			   const struct td_hrry_entry *e, size_t *len)
{
	static const char pre[] = "tensord:", post[] = "#meta";
	size_t klen = sizeof(pre) - 1 + e->name_len + sizeof(post) - 1;
	uint64_t n = 0;

	*len = 0;
	if (td_hrry_file_reader_kv_count(r, &n) < 0)
		return NULL;
	for (uint64_t i = 0; i < n; i++) {
		struct td_hrry_kv_entry kv;

		if (td_hrry_file_reader_kv_entry(r, i, &kv) < 0 ||
		    kv.key_len != klen ||
		    kv.value.kind != TD_HRRY_KV_BYTES ||
		    memcmp(kv.key, pre, sizeof(pre) - 1) ||
		    memcmp(kv.key + sizeof(pre) - 1, e->name, e->name_len) ||
		    memcmp(kv.key + klen - (sizeof(post) - 1), post,
			   sizeof(post) - 1))
			continue;
		*len = kv.value.data_len;
		return kv.value.data;
	}
	return NULL;
}

/* Publish one supported, non-head tensor; TCTL_ status. */
static int load_one(struct loaded *l, struct td_hrry_file_reader *r,
		    const struct td_hrry_entry *e,
		    const struct td_hrry_desc *d, const char *prefix)
{
	char name[TD_NAME_MAX + 1];
	struct td_error err = {0};
	struct td_hrry_err he = {0};
	struct td_alloc *a;
	uint64_t size, version = 0;
	int rc;

	snprintf(name, sizeof(name), "%s%.*s", prefix, (int)e->name_len,
		 e->name);
	td_hrry_dense_size(d, &size); /* checked by the support check */
	uint32_t dtype = (uint32_t)td_hrry_type_to_dtype(d->type_tag);
	do { /* again while the name changes under the load (keep.h) */
		struct td_publish p = {
			.name = name, .dtype = dtype, .ndim = d->rank,
			.shape = d->shape};

		err = (struct td_error){0};
		he = (struct td_hrry_err){0};
		rc = tctl_keep_before(&l->keep, l->c, &p);
		if (rc)
			return rc;
		rc = td_client_alloc(l->c, 1, &size, &a, &err);
		if (rc < 0)
			return tctl_refused(name, rc, &err);
		/* straight from the file into the shared buffer: one copy */
		rc = td_hrry_file_reader_read_tensor_into(
			r, e->name, e->name_len, td_alloc_data(a, 0), size,
			NULL, &he);
		if (rc < 0) {
			td_alloc_free(a);
			return tctl_fail(TCTL_REFUSED, "input", -rc,
					 "%s: %s: %s", name,
					 td_hrry_error_name(he.kind),
					 he.reason);
		}
		p.meta = tctl_hrry_meta(r, e, &p.meta_len);
		rc = td_client_publish_alloc(l->c, a, &p, &version, &err);
		rc = tctl_keep_after(&l->keep, l->c, name, rc, &err, version,
				     l->skipped);
	} while (rc == TCTL_KEEP_AGAIN);
	if (rc)
		return rc;
	l->count++; /* kept in l->keep, for a roll back */
	published(l, name, version, d, dtype);
	return TCTL_OK;
}

/* A load done: what it published and refused, as a table or JSON. */
static int loaded_done(struct loaded *l, const char *path)
{
	struct json_object *j;

	if (!tctl_json) {
		print_loaded(l, path);
		return TCTL_OK;
	}
	j = json_object_new_object();
	json_object_object_add(j, "published", l->published);
	json_object_object_add(j, "refused", l->refused);
	if (l->skipped)
		json_object_object_add(j, "skipped",
				       json_object_get(l->skipped));
	l->published = l->refused = NULL;
	return tctl_json_print(j);
}

/* All or nothing (as for .tgm): a failure deletes what was published,
 * newest first. */
static void unpublish(struct loaded *l)
{
	uint64_t removed = tctl_keep_roll_back(&l->keep, l->c);

	tctl_say("%" PRIu64 " tensor(s) published before the failure, %" PRIu64
		 " removed again (--partial keeps them)",
		 l->count, removed);
}

/* A failure part-way: what was published goes again (all or nothing),
 * or with --partial stays and is said, as on success (under --json
 * beside the error). */
static void load_failed(struct loaded *l, const char *path, bool partial)
{
	if (!partial) {
		unpublish(l);
		return;
	}
	if (l->count)
		tctl_say("%" PRIu64 " tensor(s) published before the "
			 "failure, kept (--partial)",
			 l->count);
	if (!tctl_json) {
		print_loaded(l, path);
		return;
	}
	tctl_json_held_add("published", json_object_get(l->published));
	tctl_json_held_add("refused", json_object_get(l->refused));
	if (l->skipped)
		tctl_json_held_add("skipped", json_object_get(l->skipped));
}

/* path opened as *fd and read mapped (map; pread where it cannot be)
 * or with pread. */
/*
 * A Hurray file is read with pread, never mapped: a mapping's reader dies
 * of SIGBUS when the file is cut short while it is read (someone
 * truncating it): load after publishing what it had and before the all
 * or nothing rule could delete it, zarr export --from while parsing the
 * descriptors (or its write of a mapped chunk failed with EFAULT). pread
 * meets the end and the reader says UnexpectedEof. Tensor bytes go
 * straight into the daemon's buffer (read_tensor_into) or the chunk file.
 */
int tctl_hrry_transport(const char *path, struct td_hrry_transport *t,
			int *fd)
{
	int rc;

	*fd = -1;
	if (!*path)
		return tctl_fail(TCTL_USAGE, "usage", EINVAL,
				 "an empty input path (- is stdin)");
	*fd = open(path, O_RDONLY | O_CLOEXEC);
	if (*fd < 0)
		return tctl_in_open_failed(path, errno);
	rc = td_hrry_transport_fd(*fd, t);
	if (rc < 0) {
		close(*fd);
		*fd = -1;
		return tctl_fail(TCTL_REFUSED, "io", -rc, "%s: %s", path,
				 strerror(-rc));
	}
	return TCTL_OK;
}

/*
 * The transport of what load reads, read with pread whatever it is: the
 * file at path; stdin ("-") spooled first to an unnamed file in $TMPDIR,
 * up to max_bytes (tctl_in_spool(): a Hurray stream decodes only from its
 * trailer, at its end, and was held whole in memory); or spool, stdin
 * spooled already (cmd-load.c, which read its magic), taken. *fd: the
 * file's, or -1.
 */
static int load_input(const char *path, uint64_t max_bytes, int spool,
		      struct td_hrry_transport *t, int *fd)
{
	struct tctl_in in;
	int rc;

	*fd = spool;
	if (spool < 0 && !strcmp(path, "-")) {
		rc = tctl_in_open(&in, path);
		if (!rc)
			rc = tctl_in_spool(&in, NULL, 0, max_bytes, fd);
		tctl_in_close(&in);
		if (rc)
			return rc;
	}
	if (*fd < 0)
		return tctl_hrry_transport(path, t, fd);
	rc = td_hrry_transport_fd(*fd, t);
	if (rc < 0) {
		close(*fd);
		*fd = -1;
		return tctl_fail(TCTL_REFUSED, "io", -rc, "%s: %s", path,
				 strerror(-rc));
	}
	return TCTL_OK;
}

/* load's options (of a Hurray file): -1, or the status to exit with. */
static int load_opts(int argc, char **argv, const char **prefix,
		     bool *partial, bool *no_replace, uint64_t *max_bytes)
{
	enum { O_PREFIX = TCTL_OPT_FIRST_OWN, O_PARTIAL, O_FORMAT, O_MAXB,
	       O_NOREP };
	static const struct option opts[] = {
		{"prefix", required_argument, NULL, O_PREFIX},
		{"partial", no_argument, NULL, O_PARTIAL},
		{"no-replace", no_argument, NULL, O_NOREP},
		{"format", required_argument, NULL, O_FORMAT},
		{"max-bytes", required_argument, NULL, O_MAXB},
		/* known, so that the error says why, not "unknown option" */
		{"message", required_argument, NULL, TCTL_OPT_NOT_HERE},
		{"variable-key", required_argument, NULL, TCTL_OPT_NOT_HERE},
		{"name-key", required_argument, NULL, TCTL_OPT_NOT_HERE},
		TCTL_COMMON_OPTIONS};
	int rc, o;

	while ((o = tctl_getopt(argc, argv, "", opts, &rc)) != -1) {
		if (o == TCTL_OPT_NOT_HERE)
			return tctl_usage("load", "--message and --variable-key "
					  "(--name-key) are for .tgm files, "
					  "not a Hurray file");
		if (o == O_PREFIX)
			*prefix = optarg;
		else if (o == O_PARTIAL)
			*partial = true;
		else if (o == O_NOREP)
			*no_replace = true;
		else if (o == O_FORMAT && strcmp(optarg, "hrry"))
			return tctl_usage("load", "--format hrry, for a "
					  "Hurray file");
		else if (o == O_MAXB &&
			 tctl_opt_number("load", "--max-bytes", optarg, true,
					 0, UINT64_MAX, "bytes", max_bytes))
			return TCTL_USAGE;
		else if (o != O_FORMAT && o != O_MAXB)
			return rc;
	}
	return -1;
}

/*
 * load of a Hurray file: by its path, or from stdin ("-": spooled to an
 * unnamed file up to --max-bytes, then read as a file is; spool: stdin
 * spooled already by cmd-load.c, which found it to be one, taken).
 */
static int load_hrry(int argc, char **argv, int spool)
{
	uint64_t max_bytes = TCTL_STREAM_MAX;
	const char *path, *prefix = "";
	bool partial = false, no_replace = false;
	struct td_hrry_transport t;
	struct td_hrry_file_reader *r = NULL;
	struct td_hrry_err e = {0};
	struct td_hrry_desc *d = NULL;
	struct loaded l = {0};
	uint64_t n;
	const char *why;
	int fd, rc;

	rc = load_opts(argc, argv, &prefix, &partial, &no_replace,
		       &max_bytes);
	if (rc < 0 && argc - optind != 1)
		rc = tctl_operands("load", argc, argv, 1,
				   "needs one FILE.hrry (- for stdin)");
	path = rc < 0 ? argv[optind] : NULL;
	if (rc < 0 && tctl_check_prefix("load", prefix, TD_NAME_MAX - 1))
		rc = TCTL_USAGE;
	if (rc >= 0) {
		if (spool >= 0)
			close(spool);
		return rc;
	}
	rc = load_input(path, max_bytes, spool, &t, &fd);
	if (rc)
		return rc;
	if (td_hrry_file_reader_new(&t, &r, &e) < 0) {
		if (fd >= 0)
			close(fd);
		return open_failed(&e, tctl_json, path);
	}
	td_hrry_file_reader_tensor_count(r, &n);
	d = malloc(sizeof(*d));
	if (!d) {
		rc = tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
		goto out;
	}
	rc = tctl_connect(&l.c);
	if (rc)
		goto out;
	l.published = json_object_new_array();
	l.refused = json_object_new_array();
	l.skipped = no_replace ? json_object_new_array() : NULL;
	/* the error says what was kept, or put back */
	tctl_json_hold();
	tctl_keep_init(&l.keep, partial, no_replace);
	tctl_publish_guard(1); /* Ctrl-C: roll back too (cmd-load.c) */
	/* a signal: looked for before each tensor and after the last */
	for (uint64_t i = 0; !(rc = tctl_publish_check(path)) && i < n; i++) {
		struct td_hrry_entry en;
		td_hrry_file_reader_entry(r, i, &en);
		memset(&e, 0, sizeof(e));
		int r2 = td_hrry_file_reader_read_descriptor(r, en.name,
							     en.name_len, d,
							     &e);
		if (!r2)
			r2 = td_hrry_rcore_check_supported(&en, d, &e);
		/* the file failing (cut short meanwhile, a read error) is
		 * no tensor to skip: the whole load fails */
		if (r2 && (e.kind == TD_HRRY_E_IO ||
			   e.kind == TD_HRRY_E_UNEXPECTED_EOF)) {
			rc = tctl_fail(TCTL_REFUSED, "io", -r2, "%s: %.*s: %s: %s",
				       path, (int)en.name_len, en.name,
				       td_hrry_error_name(e.kind), e.reason);
			break;
		}
		if (r2) {
			refused(&l, en.name, en.name_len,
				td_hrry_error_name(e.kind), e.reason);
			continue;
		}
		if (d->layout_tag == TD_HRRY_LAYOUT_COMPOSITE)
			continue; /* its members carry the data */
		if (strlen(prefix) + en.name_len > TD_NAME_MAX ||
		    memchr(en.name, 0, en.name_len)) {
			refused(&l, en.name, en.name_len, "InvalidArgument",
				"name too long for tensord or holds a NUL");
			continue;
		}
		/* checked here, not left to the daemon, whose refusal
		 * would roll the whole load back (a tensord snapshot's
		 * extra planes, "N#1", are such names) */
		if (!name_ok(prefix, &en, &why)) {
			refused(&l, en.name, en.name_len, "InvalidArgument",
				why);
			continue;
		}
		rc = load_one(&l, r, &en, d, prefix);
		if (rc == TCTL_SKIPPED)
			rc = TCTL_OK; /* said; the status says it at the end */
		if (rc)
			break;
	}
	if (rc) { /* what was published goes again, unless --partial */
		load_failed(&l, path, partial);
		goto out;
	}
	rc = loaded_done(&l, path);
	if (!rc && l.skipped && json_object_array_length(l.skipped))
		rc = TCTL_SKIPPED;
out:
	tctl_publish_guard(0);
	tctl_keep_fini(&l.keep);
	json_object_put(l.published);
	json_object_put(l.refused);
	json_object_put(l.skipped);
	free(d);
	td_hrry_file_reader_free(&r);
	if (fd >= 0)
		close(fd);
	td_client_close(l.c);
	return rc;
}

int cmd_load_hrry(int argc, char **argv)
{
	return load_hrry(argc, argv, -1);
}

int tctl_load_hrry_stdin(int argc, char **argv, int spool)
{
	optind = 0; /* the command line once more, with these options */
	return load_hrry(argc, argv, spool);
}

/* ---- save ---- */

struct save {
	struct td_client *c;
	struct td_hrry_file_writer *w;
	struct td_hrry_desc *d;
	struct tctl_out out;
	bool out_failed; /* tctl_out_write reported it already */
	bool skip;       /* --skip-unsavable */
	size_t count;
	/* the tensors' metadata, for the KV section (keys and values
	 * owned: one allocation each entry, key then value) */
	struct td_hrry_kv_entry *kv;
	size_t nkv;
};

/* Keep t's metadata, if any, as KV "tensord:NAME#meta". 0 or -ENOMEM. */
static int keep_meta(struct save *s, const char *name,
		     const struct td_tensor *t)
{
	size_t mlen = 0, nlen = strlen(name);
	const void *meta = td_tensor_meta(t, &mlen);
	struct td_hrry_kv_entry *kv;
	char *b;

	if (!mlen)
		return 0;
	kv = realloc(s->kv, (s->nkv + 1) * sizeof(*kv));
	if (!kv)
		return -ENOMEM;
	s->kv = kv;
	b = malloc(8 + nlen + 5 + mlen);
	if (!b)
		return -ENOMEM;
	memcpy(b, "tensord:", 8);
	memcpy(b + 8, name, nlen);
	memcpy(b + 8 + nlen, "#meta", 5);
	memcpy(b + 8 + nlen + 5, meta, mlen);
	kv[s->nkv++] = (struct td_hrry_kv_entry){
		.key = b, .key_len = 8 + nlen + 5,
		.value = {.kind = TD_HRRY_KV_BYTES,
			  .data = (const uint8_t *)b + 8 + nlen + 5,
			  .data_len = mlen}};
	return 0;
}

/* The writer's transport: the shared output rules (output.h). */
static int out_write(void *ctx, const void *buf, size_t len, size_t *put)
{
	struct save *s = ctx;
	if (tctl_out_write(&s->out, buf, len)) {
		s->out_failed = true;
		return -EIO;
	}
	*put = len;
	return 0;
}

static int writer_failed(struct save *s, const char *what,
			 const struct td_hrry_err *he)
{
	if (s->out_failed)
		return TCTL_REFUSED;
	return tctl_fail(TCTL_REFUSED, "input", -he->code, "%s: %s: %s", what,
			 td_hrry_error_name(he->kind), he->reason);
}

/* Fetch name (pre: leased already), write it, release it (listed: a
 * name of the LIST of every tensor, left out when deleted since). */
static int save_one(struct save *s, const char *name, bool listed,
		    struct td_tensor *pre)
{
	struct td_error e = {0};
	struct td_hrry_err he = {0};
	struct td_tensor *t = pre; /* leased with the others, or NULL */
	const char *why;
	int rc = pre ? 0 : td_client_get(s->c, name, &t, &e);

	if (rc < 0)
		return tctl_gone_since_list("save", name, rc, listed)
		               ? TCTL_OK
		               : tctl_refused(name, rc, &e);
	/* in slices: the output is open, so a signal only sets the flag,
	 * and the wait (which goes on after EINTR) would not end for a
	 * fence that never signals */
	do
		rc = td_tensor_fence_wait_err(t, 1000, &e);
	while (rc == -ETIMEDOUT && !tctl_interrupted());
	if (rc == -ETIMEDOUT) {
		td_tensor_release(t);
		return tctl_fail(TCTL_REFUSED, "interrupted", EINTR,
				 "%s: interrupted by signal %d while waiting "
				 "for its fence",
				 name, tctl_interrupted());
	}
	why = rc < 0 ? e.reason : tctl_dense_unsavable(t);
	if (!why && td_tensor_ndim(t) > TD_HRRY_MAX_RANK)
		why = "it has more than 64 dimensions";
	if (!why &&
	    td_hrry_desc_init_dense(s->d,
				    td_hrry_type_from_dtype(td_tensor_dtype(t)),
				    td_tensor_ndim(t), td_tensor_shape(t)))
		why = "its dtype has no Hurray type";
	if (why) {
		td_tensor_release(t);
		return tctl_unsavable_left_out(name, why, s->skip)
		               ? TCTL_OK
		               : tctl_fail(TCTL_REFUSED, "input", EINVAL,
		                           "%s: cannot be saved: %s", name,
		                           why);
	}
	const void *bufs[1] = {td_tensor_plane_data(t, 0)};
	rc = td_hrry_file_writer_write_tensor(s->w, name, strlen(name), s->d,
					      bufs, &he);
	if (rc < 0) {
		td_tensor_release(t);
		return writer_failed(s, name, &he);
	}
	rc = keep_meta(s, name, t);
	td_tensor_release(t);
	if (rc < 0)
		return tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
	s->count++;
	return TCTL_OK;
}

/* The names save_hrry writes (given, or the LIST's but rings), leased
 * at one instant into pre (tctl_get_together) when they are few enough;
 * else pre all NULL. */
static void together(struct save *s, const struct tctl_names *given,
		     const struct td_entry *list, size_t list_n,
		     struct td_tensor **pre)
{
	const char *names[TD_MANY_MAX];
	size_t n = 0;

	memset(pre, 0, TD_MANY_MAX * sizeof(*pre));
	for (size_t i = 0; i < given->n && n <= TD_MANY_MAX; i++, n++)
		if (n < TD_MANY_MAX)
			names[n] = given->v[i];
	for (size_t i = 0; i < list_n && n <= TD_MANY_MAX; i++)
		if (!(list[i].flags & TD_ENTRY_RING)) {
			if (n < TD_MANY_MAX)
				names[n] = list[i].name;
			n++;
		}
	if (n <= TD_MANY_MAX)
		tctl_get_together(s->c, names, n, pre);
}

/* The next name's lease of together()'s, handed over (NULL: none). */
static struct td_tensor *take(struct td_tensor **pre, size_t *k)
{
	struct td_tensor *t = *k < TD_MANY_MAX ? pre[*k] : NULL;

	if (*k < TD_MANY_MAX)
		pre[*k] = NULL;
	(*k)++;
	return t;
}

int cmd_save_hrry(int argc, char **argv)
{
	static const struct option opts[] = {
		{"output", required_argument, NULL, 'o'},
		{"format", required_argument, NULL, 'f'},
		{"skip-unsavable", no_argument, NULL, 'k'},
		TCTL_COMMON_OPTIONS};
	const char *path = NULL;
	struct save s = {0};
	struct td_entry *list = NULL;
	struct tctl_names given = {0};
	size_t list_n = 0;
	struct td_hrry_err he = {0};
	struct td_tensor *pre[TD_MANY_MAX] = {0};
	size_t k = 0;
	int rc, o, opened = 0;

	while ((o = tctl_getopt(argc, argv, "o:", opts, &rc)) != -1) {
		if (o == 'o')
			path = optarg;
		else if (o == 'k')
			s.skip = true;
		else if (o != 'f')
			return rc;
	}
	if (!path)
		return tctl_usage("save", "needs -o FILE (- for stdout)");
	if (tctl_json && tctl_out_is_stdout(path))
		return tctl_usage("save", "--json and -o %s both write to stdout",
				  path);
	s.d = malloc(sizeof(*s.d));
	if (!s.d)
		return tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
	rc = tctl_connect(&s.c);
	if (rc)
		goto out;
	if (optind == argc) {
		struct td_error e = {0};
		int r = td_client_list(s.c, NULL, &list, &list_n, &e);
		if (r < 0) {
			rc = tctl_refused("list", r, &e);
			goto out;
		}
	} else { /* NAME/ stands for every tensor under it */
		rc = tctl_names_expand(s.c, "save", argv + optind,
				       (size_t)(argc - optind), false, &given);
		if (rc)
			goto out;
	}
	rc = tctl_out_open(&s.out, path, TCTL_OUT_BINARY | TCTL_OUT_UNSIZED,
			   0);
	if (rc)
		goto out;
	opened = 1;
	struct td_hrry_transport t = {.ctx = &s, .write = out_write};
	if (td_hrry_file_writer_new(&t, NULL, &s.w, &he) < 0) {
		rc = writer_failed(&s, path, &he);
		goto out;
	}
	/* one forward pass: each tensor is fetched, written, released; up
	 * to TD_MANY_MAX names leased at one instant first */
	together(&s, &given, list, list_n, pre);
	for (size_t i = 0; i < given.n && !rc; i++)
		rc = save_one(&s, given.v[i], given.listed[i], take(pre, &k));
	for (size_t i = 0; i < list_n && !rc; i++)
		if (!(list[i].flags & TD_ENTRY_RING))
			rc = save_one(&s, list[i].name, true, take(pre, &k));
	if (rc)
		goto out;
	if (td_hrry_file_writer_finish(s.w, s.kv, s.nkv, &he) < 0) {
		rc = writer_failed(&s, path, &he);
		goto out;
	}
	uint64_t bytes = s.out.written;
	opened = 0;
	rc = tctl_out_commit(&s.out);
	/* with -o - the file is the output: nothing else on stdout */
	if (!rc && !tctl_out_is_stdout(path)) {
		if (tctl_json) {
			struct json_object *j = json_object_new_object();
			json_object_object_add(j, "path",
					       json_object_new_string(path));
			json_object_object_add(j, "tensors",
					       json_object_new_uint64(s.count));
			json_object_object_add(j, "bytes",
					       json_object_new_uint64(bytes));
			rc = tctl_json_print(j);
		} else {
			char size[32];

			printf("%s: %zu tensor(s), %s\n", path, s.count,
			       tctl_size(size, bytes));
		}
	}
out:
	for (size_t i = 0; i < TD_MANY_MAX; i++)
		td_tensor_release(pre[i]);
	td_hrry_file_writer_free(&s.w);
	if (opened)
		tctl_out_abort(&s.out);
	td_entry_list_free(list, list_n);
	tctl_names_fini(&given);
	td_client_close(s.c);
	free(s.d);
	for (size_t i = 0; i < s.nkv; i++)
		free((void *)s.kv[i].key);
	free(s.kv);
	return rc;
}
