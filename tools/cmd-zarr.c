/* SPDX-License-Identifier: MIT */
/*
 * tensorctl zarr export / import: a Zarr v3 directory hierarchy of tensors
 * (../shared/specs/zarr.md, tensogram.md §18). Here export's command line
 * and its sources on disk or a stream: a .tgm message, a Hurray file; the
 * daemon's tensors in zarr-daemon.c; the hierarchy written (whole or not
 * at all) in zarr-write.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "bytes.h"
#include "hrry.h"
#include "input.h"
#include "output.h"
#include "td-json.h"
#include "td-zarr.h"
#include "tensorctl.h"
#include "tgm-load.h"
#include "zarr-export.h"

static void add_str(struct json_object *o, const char *k, const char *v)
{
	if (v && *v)
		json_object_object_add(o, k, json_object_new_string(v));
}

/* ---- from a .tgm file ---- */

static int tgm_object(struct load *l, size_t i, const char *name_key,
                      struct zsrc *s)
{
	struct obj *ob = &l->objs[i];
	const struct td_tgm_desc *d = &ob->o.desc;
	struct json_object *params = NULL;
	struct td_err e = {0};
	char raw[1024];
	int rc;

	if (td_tgm_desc_check_plain(d, ob->o.data_len, &e) < 0)
		return tctl_tgm_refuse(l, (long)i, "%s%s%s%s: %s", e.field,
		                       e.field ? " " : "",
		                       !e.field             ? ""
		                       : !strcmp(e.field, "dtype") ? d->dtype_name
		                       : !strcmp(e.field, "encoding") ? d->encoding
		                       : !strcmp(e.field, "filter") ? d->filter
		                       : !strcmp(e.field, "compression")
		                               ? d->compression
		                               : "",
		                       "", e.reason);
	s->a.type = td_zarr_type_by_tgm(d->dtype);
	if (!s->a.type || d->shape_count > TD_ZARR_MAX_DIMS)
		return tctl_tgm_refuse(l, (long)i, "dtype %s is not supported",
		                       d->dtype_name);
	s->a.ndim = d->shape_count;
	memcpy(s->a.shape, d->shape, s->a.ndim * sizeof(uint64_t));
	/* copied from the source when the chunk is written (copy_in) */
	s->in_file = true;
	s->src = l->src;
	s->off = ob->data_off;
	s->len = ob->o.data_len;
	if (s->a.type->size > 1 && d->byte_order != TD_TGM_ORDER_NATIVE &&
	    (d->byte_order == TD_TGM_ORDER_BIG) !=
	            (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__))
		/* complex: each component separately */
		s->swap = s->a.type->kind == 'c' ? s->a.type->size / 2
		                                 : s->a.type->size;
	rc = tctl_tgm_obj_name(l, i, name_key, raw, sizeof(raw));
	if (rc)
		return rc;
	td_tgm_node_name(raw, s->a.name, TD_ZARR_NAME_MAX + 1);
	if (td_json_tgm_zarr_attrs(ob->meta, ob->meta_index, &s->a.attrs, &e) <
	            0 ||
	    td_json_tgm_params_obj(ob->o.cbor, ob->o.cbor_len, &params, &e) <
	            0)
		return tctl_tgm_refuse(l, (long)i, "metadata: %s", e.reason);
	if (params)
		json_object_object_add(s->a.attrs, "_tensogram_params", params);
	add_str(s->a.attrs, "_tensogram_encoding", d->encoding);
	add_str(s->a.attrs, "_tensogram_filter", d->filter);
	add_str(s->a.attrs, "_tensogram_compression", d->compression);
	/* a _tensogram_params holding an integer below -2^63: as text in
	 * _tensord_json, which import reads (docs/zarr.md) */
	if (td_zarr_keep_unreadable(s->a.attrs) < 0)
		return tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
	return TCTL_OK;
}

static int from_tgm(struct load *l, const char *name_key, struct zset *z)
{
	struct json_object *vars = json_object_new_array();
	struct td_err e = {0};
	int rc = TCTL_OK;

	if (td_json_tgm_extra_obj(l->header ? l->header : l->footer,
	                          &z->gattrs, &e) < 0)
		return tctl_tgm_refuse(l, -1, "metadata: %s", e.reason);
	/* an _extra_ key holding an integer below -2^63: the same */
	if (td_zarr_keep_unreadable(z->gattrs) < 0 || tctl_zset_grow(z, l->count) < 0)
		return tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
	for (size_t i = 0; !rc && i < l->count; i++) {
		rc = tgm_object(l, i, name_key, &z->s[i]);
		z->n++;
	}
	if (!rc && tctl_zset_unique_names(z) < 0)
		rc = tctl_fail(TCTL_REFUSED, "input", ENAMETOOLONG,
		               "names do not fit with their suffixes");
	for (size_t i = 0; !rc && i < z->n; i++)
		json_object_array_add(vars,
		                      json_object_new_string(z->s[i].a.name));
	json_object_object_add(z->gattrs, "_tensogram_variables", vars);
	json_object_object_add(z->gattrs, "_tensogram_wire_version",
	                       json_object_new_int(3));
	return rc;
}

static int export_hrry_from(const char *dir, const char *path,
                            const struct td_hrry_transport *t, int fd,
                            const uint8_t *mem);

/*
 * A Hurray file on a stream (a file's magic chose before): read whole, up
 * to --max-bytes (its index is found by its trailer: nothing decodes
 * before the end), into st's spool (mapped, not the heap); the .tgm
 * options refused as for a file.
 */
static int export_hrry_stream(const char *dir, const char *path,
                              struct tgm_stream *st, bool tgm_opts)
{
	struct td_hrry_transport t;
	const uint8_t *buf = NULL;
	size_t len;
	int rc = tgm_stream_rest(st, &buf, &len);

	if (!rc && tgm_opts)
		rc = tctl_usage("zarr", "--name-key and --message are for "
		                        ".tgm files");
	else if (!rc)
		rc = td_hrry_transport_mem(buf, len, &t) < 0
		             ? tctl_fail(TCTL_REFUSED, "io", ENOMEM,
		                         "out of memory")
		             : export_hrry_from(dir, path, &t, -1, buf);
	return rc;
}

/*
 * Message `message` of a .tgm input as a hierarchy in dir. A file is read
 * with pread, each chunk when it is written; a stream (stdin, a pipe) a
 * message at a time (tgm_stream): those before it let go as they pass,
 * it held while the hierarchy is written, nothing read after it (as of a
 * file): tensorctl holds one message (up to --max-bytes), not the
 * stream, in a spool file in $TMPDIR, mapped (tgm_stream_spool()).
 * tgm_opts: --message or --name-key was given (refused for a Hurray
 * file on stdin, whatever their value).
 */
static int export_tgm(const char *dir, const char *path, uint64_t message,
                      const char *name_key, bool tgm_opts, uint64_t max_bytes)
{
	struct tgm_src src;
	struct tgm_scan sc;
	struct tgm_stream st;
	struct tctl_in in;
	struct td_tgm_span sp;
	struct load l = {.path = path, .msg_index = message, .src = &src};
	struct zset z = {.from = path};
	uint64_t idx = 0, len;
	int found = 0, more = 0, rc = tctl_in_open(&in, path);
	bool stream = !in.regular || in.is_stdin;

	if (rc)
		return rc;
	if (stream) {
		tgm_stream_init(&st, &in, max_bytes);
		rc = tgm_stream_head(&st, 8);
		/* held in a mapped spool, not on the heap (as load -) */
		if (!rc)
			rc = tgm_stream_spool(&st);
		if (!rc && inspect_hrry_sniff(st.buf, (size_t)st.have)) {
			rc = export_hrry_stream(dir, path, &st, tgm_opts);
			goto out;
		}
	} else {
		src = (struct tgm_src){.path = in.path, .fd = in.fd,
		                       .size = in.size};
		tgm_scan_init(&sc, &src, UINT64_MAX);
	}
	while (!rc && (more = stream ? tgm_stream_next(&st, &sp, &src)
	                             : tgm_scan_next(&sc, &sp)) == 1) {
		if (idx++ != message)
			continue;
		found = 1;
		rc = tctl_tgm_collect(&l, &src, &sp);
		if (!rc)
			rc = from_tgm(&l, name_key, &z);
		break;
	}
	/* the scan's read failed (a stream's is said, EFBIG too) */
	if (!rc && more < 0)
		rc = stream ? -more : tgm_src_fail(&src);
	len = stream ? tgm_stream_total(&st) : src.size;
	if (rc || found) {
	} else if (idx) {
		rc = tctl_fail(TCTL_REFUSED, "input", ERANGE,
		               "%s: no message %" PRIu64 " (the file has %" PRIu64
		               ")",
		               path, message, idx);
	} else if (len) {
		/* bytes, but no whole message: junk, or a cut or damaged
		 * one (load refuses it alike), not an empty group; a .npy
		 * file is told where it goes, as load tells it */
		bool npy = !stream && tctl_file_kind(path) == TCTL_KIND_NPY;

		rc = tctl_fail(TCTL_REFUSED, "input", ENOENT,
		               "%s: no complete .tgm message found%s%s%s",
		               path, npy ? " (" : "",
		               npy ? tctl_kind_what(TCTL_KIND_NPY) : "",
		               npy ? ")" : "");
	} else {
		/* no message at all: an empty group (tensogram.md §18) */
		z.gattrs = json_object_new_object();
	}
	if (!rc)
		rc = tctl_zarr_write(dir, &z);
	if (!rc)
		rc = tctl_zarr_print(dir, &z);
	tctl_zset_fini(&z);
	tctl_tgm_load_fini(&l);
out:
	if (stream)
		tgm_stream_fini(&st);
	tctl_in_close(&in);
	return rc;
}

/* ---- from a Hurray file ---- */

/*
 * Every tensor of a Hurray file: composite heads own no data and give no
 * array (their members are tensors of their own); an unsupported tensor
 * is refused, naming its kind. The chunks are not read here: each is
 * copied from the file (fd) with pread when it is written, so the file is
 * never mapped (one cut short meanwhile would kill tensorctl with
 * SIGBUS) and never held in memory whole.
 */
static int from_hrry(const char *path, struct td_hrry_file_reader *r,
                     int fd, const uint8_t *mem, uint64_t n, struct zset *z)
{
	struct td_hrry_desc *d = malloc(sizeof(*d));
	struct json_object *kv;
	char *name = NULL;
	int rc = TCTL_OK;

	if (!d || tctl_zset_grow(z, n) < 0) {
		free(d);
		return tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
	}
	for (uint64_t i = 0; !rc && i < n; i++) {
		struct td_hrry_err e = {0};
		struct td_hrry_entry en;
		struct zsrc *s = &z->s[z->n];

		td_hrry_file_reader_entry(r, i, &en);
		/* the whole name, for _tensord_name (a Hurray name may be
		 * 65535 bytes); the node name is cut to a file name's */
		free(name);
		name = strndup(en.name, en.name_len);
		if (!name) {
			rc = tctl_fail(TCTL_REFUSED, "io", ENOMEM,
			               "out of memory");
			break;
		}
		/* check_supported: the support check and the dense bytes
		 * inside buffer 0, as read_tensor checks them */
		if (td_hrry_file_reader_read_descriptor(r, en.name, en.name_len,
		                                        d, &e) < 0 ||
		    td_hrry_rcore_check_supported(&en, d, &e) < 0) {
			rc = tctl_fail(TCTL_REFUSED, "input", -e.code,
			               "%s: %s: cannot be exported: %s (%s)",
			               path, name, e.reason,
			               td_hrry_error_name(e.kind));
			break;
		}
		if (d->layout_tag == TD_HRRY_LAYOUT_COMPOSITE)
			continue; /* its members carry the data */
		s->a.type = td_zarr_type_by_blob(
		        (uint32_t)td_hrry_type_to_dtype(d->type_tag));
		if (!s->a.type || d->rank > TD_ZARR_MAX_DIMS) {
			rc = tctl_fail(TCTL_REFUSED, "input", ENOTSUP,
			               "%s: %s: cannot be exported: %s", path,
			               name,
			               !s->a.type ? "its type has no Zarr type"
			                          : "too many dimensions");
			break;
		}
		s->a.ndim = d->rank;
		memcpy(s->a.shape, d->shape, d->rank * sizeof(uint64_t));
		/* the dense elements: from byte_offset in buffer 0, which
		 * starts at the entry's data_offset (<tensord/hrry.h>) */
		s->off = en.data_offset + d->byte_offset;
		td_hrry_dense_size(d, &s->len);
		if (mem) /* stdin read already; inside it (check_desc) */
			s->data = mem + s->off;
		s->in_file = !mem;
		s->fd = fd;
		td_tgm_node_name(name, s->a.name, TD_ZARR_NAME_MAX + 1);
		/* the tensor's metadata (what save keeps in the KV), as
		 * the daemon's tensors give theirs */
		struct td_zarr_tensor zt = {.name = name, .quant_axis = -2};
		zt.meta = tctl_hrry_meta(r, &en, &zt.meta_len);
		s->a.attrs = td_zarr_tensor_attrs(&zt);
		z->n++;
		/* Hurray data is little-endian, as the chunk is */
		uint64_t want;
		if (td_zarr_chunk_bytes(&s->a, &want) < 0 || want != s->len) {
			rc = tctl_fail(TCTL_REFUSED, "input", EBADMSG,
			               "%s: %s: data length differs from its "
			               "shape",
			               path, name);
			break;
		}
	}
	free(d);
	free(name);
	if (!rc && tctl_zset_unique_names(z) < 0)
		rc = tctl_fail(TCTL_REFUSED, "input", ENAMETOOLONG,
		               "names do not fit with their suffixes");
	if (!rc)
		rc = tctl_zset_group(z);
	if (!rc) {
		kv = tctl_hrry_kv_json(r);
		if (kv)
			json_object_object_add(z->gattrs, "_tensord_hurray_kv",
			                       kv);
	}
	return rc;
}

/* Every tensor of the Hurray file behind t (fd: its file, or mem: its
 * bytes) as a hierarchy in dir. */
static int export_hrry_from(const char *dir, const char *path,
                            const struct td_hrry_transport *t, int fd,
                            const uint8_t *mem)
{
	struct td_hrry_file_reader *r = NULL;
	struct td_hrry_err e = {0};
	struct zset z = {.from = path};
	uint64_t n = 0;
	int rc = td_hrry_file_reader_new(t, &r, &e);

	if (rc < 0)
		return tctl_fail(TCTL_REFUSED, "input", -rc, "%s: %s (%s)",
		                 path, e.reason, td_hrry_error_name(e.kind));
	td_hrry_file_reader_tensor_count(r, &n);
	rc = from_hrry(path, r, fd, mem, n, &z);
	if (!rc)
		rc = tctl_zarr_write(dir, &z);
	if (!rc)
		rc = tctl_zarr_print(dir, &z);
	tctl_zset_fini(&z);
	td_hrry_file_reader_free(&r);
	return rc;
}

static int export_hrry(const char *dir, const char *path)
{
	struct td_hrry_transport t;
	int fd, rc = tctl_hrry_transport(path, &t, &fd);

	if (rc)
		return rc;
	rc = export_hrry_from(dir, path, &t, fd, NULL);
	close(fd);
	return rc;
}

/*
 * Whether path is a Hurray file to read in place: a regular file named
 * .hrry or with the magic. Anything else (stdin "-", a FIFO, a pipe, a
 * device) is a stream export_tgm() sniffs as it reads it: reading its
 * magic here would take those 8 bytes from the stream.
 */
static bool is_hrry(const char *path)
{
	size_t n = strlen(path);
	uint8_t magic[8];
	struct stat st;
	int fd;
	bool yes;

	if (!strcmp(path, "-") || stat(path, &st) < 0 || !S_ISREG(st.st_mode))
		return false;
	if (n >= 5 && !strcmp(path + n - 5, ".hrry"))
		return true;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	yes = read(fd, magic, 8) == 8 && inspect_hrry_sniff(magic, 8);
	close(fd);
	return yes;
}

/* The last --from's value as getopt_long() takes it (--from X, --from=X,
 * --fr X), NULL if none: its file chooses the options export takes (and
 * the completion offers, docs/tensorctl.md) before the line is parsed. */
static const char *from_on_line(int argc, char **argv,
                                const struct option *opts)
{
	const char *from = NULL;

	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
		const char *a = argv[i], *eq = strchr(a, '=');
		const struct option *hit = NULL;
		int hits = 0;
		size_t n;

		if (strncmp(a, "--", 2) || a[2] == '=' || !a[2])
			continue;
		n = eq ? (size_t)(eq - a) - 2 : strlen(a) - 2;
		for (const struct option *o = opts; o->name; o++) {
			if (strncmp(o->name, a + 2, n))
				continue;
			if (strlen(o->name) == n) { /* exact: it wins */
				hit = o, hits = 1;
				break;
			}
			hit = o, hits++;
		}
		if (hits != 1)
			continue;
		if (!strcmp(hit->name, "from"))
			from = eq ? eq + 1 : i + 1 < argc ? argv[i + 1] : NULL;
		if (!eq && hit->has_arg == required_argument)
			i++;
	}
	return from;
}

static int cmd_export(int argc, char **argv)
{
	enum {
		O_FROM = TCTL_OPT_FIRST_OWN,
		O_MESSAGE,
		O_NAME_KEY,
		O_MAX_BYTES,
	};
	static const struct option opts[] = {
	        {"from", required_argument, NULL, O_FROM},
	        {"message", required_argument, NULL, O_MESSAGE},
	        {"name-key", required_argument, NULL, O_NAME_KEY},
	        {"max-bytes", required_argument, NULL, O_MAX_BYTES},
	        TCTL_COMMON_OPTIONS};
	/* a Hurray file's form: the .tgm options known only to refuse them
	 * (and so never offered by the completion) */
	static const struct option hrry_opts[] = {
	        {"from", required_argument, NULL, O_FROM},
	        {"message", required_argument, NULL, TCTL_OPT_NOT_HERE},
	        {"name-key", required_argument, NULL, TCTL_OPT_NOT_HERE},
	        {"max-bytes", required_argument, NULL, O_MAX_BYTES},
	        TCTL_COMMON_OPTIONS};
	const char *from = from_on_line(argc, argv, opts), *name_key = NULL;
	const struct option *table = from && is_hrry(from) ? hrry_opts : opts;
	uint64_t message = 0, max_bytes = TCTL_STREAM_MAX;
	bool message_set = false;
	int rc, o;

	while ((o = tctl_getopt(argc, argv, "", table, &rc)) != -1) {
		switch (o) {
		case O_FROM:
			from = optarg;
			break;
		case TCTL_OPT_NOT_HERE:
			return tctl_usage("zarr", "--name-key and --message "
			                          "are for .tgm files");
		case O_MESSAGE:
			if (tctl_opt_number("zarr", "--message", optarg, false,
			                    0, UINT64_MAX, "", &message))
				return TCTL_USAGE;
			message_set = true;
			break;
		case O_NAME_KEY:
			name_key = optarg;
			break;
		case O_MAX_BYTES:
			if (tctl_opt_number("zarr", "--max-bytes", optarg,
			                    true, 0, UINT64_MAX, "bytes",
			                    &max_bytes))
				return TCTL_USAGE;
			break;
		default:
			return rc;
		}
	}
	if (optind >= argc)
		return tctl_usage("zarr", "export needs DIR");
	if (!*argv[optind]) /* `"$D"` of an unset D */
		return tctl_usage("zarr", "export: an empty DIR path");
	if (from && optind + 1 != argc)
		return tctl_usage("zarr", "export --from takes no NAMES");
	if (!from && (name_key || message_set))
		return tctl_usage("zarr", "--name-key and --message need "
		                          "--from FILE.tgm");
	if (from && is_hrry(from)) {
		if (name_key || message_set)
			return tctl_usage("zarr", "--name-key and --message "
			                          "are for .tgm files");
		return export_hrry(argv[optind], from);
	}
	if (from)
		return export_tgm(argv[optind], from, message, name_key,
		                  name_key || message_set, max_bytes);
	return tctl_zarr_export_daemon(argv[optind], argv + optind + 1,
	                     (size_t)(argc - optind - 1));
}

/*
 * Where zarr's subcommand is in argv: past the options every command
 * takes (docs/tensorctl.md: --socket, --json and --bytes before the
 * subcommand too, `zarr --json export DIR`), or argc when there is none.
 */
static int subcommand_at(int argc, char **argv)
{
	int i = 1;

	while (i < argc && (!strcmp(argv[i], "--json") ||
	                    !strcmp(argv[i], "--bytes") ||
	                    !strncmp(argv[i], "--socket=", 9) ||
	                    !strcmp(argv[i], "--socket")))
		i += !strcmp(argv[i], "--socket") ? 2 : 1;
	return i < argc ? i : argc;
}

int cmd_zarr(int argc, char **argv)
{
	int at = subcommand_at(argc, argv);
	const char *sub = at < argc ? argv[at] : NULL;
	int (*run)(int, char **) = NULL;

	if (sub && !strcmp(sub, "export"))
		run = cmd_export;
	else if (sub && !strcmp(sub, "import"))
		run = cmd_zarr_import;
	if (run) {
		/* the subcommand's argv starts with "zarr" for messages and
		 * help, the options before the subcommand kept */
		memmove(argv + 2, argv + 1, (size_t)(at - 1) * sizeof(*argv));
		argv[1] = argv[0];
		return run(argc - 1, argv + 1);
	}
	if (sub && (!strcmp(sub, "--help") || !strcmp(sub, "-h"))) {
		tctl_help("zarr", stdout);
		return TCTL_OK;
	}
	if (sub && sub[0] == '-')
		return tctl_usage("zarr", "unknown option '%s'", sub);
	if (sub)
		return tctl_usage("zarr", "unknown subcommand '%s' (valid: "
		                          "export, import)", sub);
	return tctl_usage("zarr", "needs export or import");
}
