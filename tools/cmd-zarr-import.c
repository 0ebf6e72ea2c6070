/* SPDX-License-Identifier: MIT */
/*
 * tensorctl zarr import: every array of a Zarr v3 group as a published
 * tensor (docs/zarr.md §2). Everything is checked (strict JSON, one
 * regular chunk, the bytes codec only, each chunk's size) before anything
 * is published; each chunk is read when it is published, into the
 * daemon's buffer; big-endian arrays are swapped. All or nothing, as load:
 * a daemon refusal part-way deletes what was published, unless --partial.
 */
#include <dirent.h>
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

#include "input.h"
#include "output.h"
#include "td-zarr.h"
#include "keep.h"
#include "tensorctl.h"
#include "wire.h"

struct imp {
	struct td_zarr_array a;
	char tensor[TD_NAME_MAX + 1];
	const char *folder; /* the array's folder under DIR */
	bool named;         /* tensor is P + its _tensord_name */
	char note[160];     /* why a _tensord_name was not used, or "" */
	char chunk[TD_ZARR_NAME_MAX + 64]; /* its path under DIR */
	uint64_t len;  /* the chunk's bytes (checked against its file) */
	unsigned swap; /* element width to reverse (big-endian), or 0 */
	char *meta;
	size_t meta_len; /* metadata may hold NUL bytes */
};

/*
 * path under the store's folder top, opened to read, or -errno. Its first
 * folder (the array's) may be a symbolic link; no name after it may be
 * one (-ELOOP), the folders in a chunk's key ("c" of "c/0") included: a
 * link there made the import read a file outside the store as the chunk
 * (O_NOFOLLOW looks at the last name only). Non-blocking: a FIFO is
 * refused by the caller, not waited on.
 */
static int open_in_store(int top, const char *path)
{
	const char *slash = strchr(path, '/');
	char part[TD_ZARR_NAME_MAX + 64];
	int dir = -1, fd;

	while (slash) {
		size_t n = (size_t)(slash - path);
		int next;

		if (n >= sizeof(part)) {
			fd = -ENAMETOOLONG;
			goto out;
		}
		memcpy(part, path, n);
		part[n] = 0;
		next = openat(dir < 0 ? top : dir, part,
		              O_RDONLY | O_CLOEXEC | O_DIRECTORY |
		                      (dir < 0 ? 0 : O_NOFOLLOW));
		if (next < 0) {
			struct stat st;

			/* with O_DIRECTORY a link is ENOTDIR: say ELOOP */
			fd = -errno;
			if (fd == -ENOTDIR && dir >= 0 &&
			    !fstatat(dir, part, &st, AT_SYMLINK_NOFOLLOW) &&
			    S_ISLNK(st.st_mode))
				fd = -ELOOP;
			goto out;
		}
		if (dir >= 0)
			close(dir);
		dir = next;
		path = slash + 1;
		slash = strchr(path, '/');
	}
	fd = openat(dir < 0 ? top : dir, path,
	            O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		fd = -errno;
out:
	if (dir >= 0)
		close(dir);
	return fd;
}

/* All of dirfd/path, at most max bytes (more: -EFBIG); with out NULL only
 * its size, in *len. */
static int read_at(int dirfd, const char *path, uint64_t max, uint8_t **out,
                   uint64_t *len)
{
	int fd = open_in_store(dirfd, path);
	struct stat st = {0};
	uint8_t *b;
	uint64_t got = 0;

	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	}
	if ((uint64_t)st.st_size > max || !out) {
		close(fd);
		*len = (uint64_t)st.st_size;
		return (uint64_t)st.st_size > max ? -EFBIG : 0;
	}
	b = malloc((size_t)st.st_size + 1);
	while (b && got < (uint64_t)st.st_size) {
		ssize_t r = read(fd, b + got, (size_t)st.st_size - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (uint64_t)r;
	}
	close(fd);
	if (!b)
		return -ENOMEM;
	if (got != (uint64_t)st.st_size) {
		free(b);
		return -EIO;
	}
	b[got] = 0;
	*out = b;
	*len = got;
	return 0;
}

static int read_json_at(int dirfd, const char *path, struct json_object **o,
                        char *why, size_t cap)
{
	uint8_t *b;
	uint64_t len;
	const char *w;
	int rc = read_at(dirfd, path, 16u << 20, &b, &len);

	if (rc < 0) {
		snprintf(why, cap, "%s: %s", path, strerror(-rc));
		return rc;
	}
	rc = td_zarr_json_parse((const char *)b, len, o, &w);
	if (rc < 0)
		snprintf(why, cap, "%s: not strict JSON: %s", path, w);
	free(b);
	return rc;
}

/* The value of attribute key when it is a string, else NULL. */
static const char *attr_str(const struct imp *m, const char *key,
                            size_t *len)
{
	struct json_object *v =
	        m->a.attrs ? json_object_object_get(m->a.attrs, key) : NULL;

	if (!json_object_is_type(v, json_type_string))
		return NULL;
	*len = (size_t)json_object_get_string_len(v);
	return json_object_get_string(v);
}

static int hex_digit(char c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
	                              : -1;
}

/* Metadata kept whole by export: the `_tensord_meta` text (NUL bytes
 * and all), else the bytes `_tensord_meta_hex` spells. 1 when there was
 * one, 0 when none, -errno with why. */
static int kept_meta(struct imp *m, char *why, size_t cap)
{
	size_t n = 0;
	const char *t = attr_str(m, "_tensord_meta", &n);
	bool hex = !t;

	if (hex && !(t = attr_str(m, "_tensord_meta_hex", &n)))
		return 0;
	if (hex && n % 2) {
		snprintf(why, cap, "attribute _tensord_meta_hex has an odd "
		                   "number of digits");
		return -EBADMSG;
	}
	m->meta_len = hex ? n / 2 : n;
	m->meta = malloc(m->meta_len + 1);
	if (!m->meta)
		return -ENOMEM;
	for (size_t i = 0; hex && i < m->meta_len; i++) {
		int hi = hex_digit(t[2 * i]), lo = hex_digit(t[2 * i + 1]);

		if (hi < 0 || lo < 0) {
			snprintf(why, cap, "attribute _tensord_meta_hex is "
			                   "not hex digits");
			return -EBADMSG;
		}
		m->meta[i] = (char)(hi << 4 | lo);
	}
	if (!hex)
		memcpy(m->meta, t, n);
	m->meta[m->meta_len] = 0;
	return 1;
}

/* Attributes without tensord's and tensogram's own keys, as tensor
 * metadata: what export kept whole (`_tensord_meta`, `_tensord_meta_hex`),
 * else a JSON object, else none. 0 or -errno with why. */
static int import_meta(struct imp *m, char *why, size_t cap)
{
	struct json_object *o;
	const char *t;
	int rc = kept_meta(m, why, cap);

	if (rc)
		return rc < 0 ? rc : 0;
	o = json_object_new_object();
	if (m->a.attrs) {
		const char *k;
		struct json_object *val;

		TD_JSON_EACH(m->a.attrs, k, val)
			if (strncmp(k, "_tensord_", 9) &&
			    strncmp(k, "_tensogram_", 11))
				json_object_object_add(o, k,
				                       json_object_get(val));
	}
	if (json_object_object_length(o)) {
		t = json_object_to_json_string_ext(
		        o, JSON_C_TO_STRING_PLAIN |
		                   JSON_C_TO_STRING_NOSLASHESCAPE);
		m->meta = t ? strdup(t) : NULL;
		m->meta_len = m->meta ? strlen(m->meta) : 0;
		json_object_put(o);
		return m->meta ? 0 : -ENOMEM;
	}
	json_object_put(o);
	return 0;
}

/*
 * The tensor's whole name that export keeps in _tensord_name (docs/zarr.md
 * §1), after prefix, as the tensor's name: 1 when there is one, else 0.
 * The store may be anyone's: a value that is not a string making a valid
 * tensor name (a Hurray name with a space, say) is not used; m->note
 * says why (its bytes are not echoed), and the folder names the tensor.
 */
static int kept_name(struct imp *m, const char *prefix)
{
	char *why = m->note;
	size_t cap = sizeof(m->note);
	struct json_object *v;
	size_t pl = strlen(prefix), n;
	const char *w;

	if (!m->a.attrs ||
	    !json_object_object_get_ex(m->a.attrs, "_tensord_name", &v))
		return 0;
	if (!json_object_is_type(v, json_type_string)) {
		snprintf(why, cap, "attribute _tensord_name is not a string");
		return 0;
	}
	n = (size_t)json_object_get_string_len(v);
	if (pl + n > TD_NAME_MAX) {
		snprintf(why, cap,
		         "attribute _tensord_name%s makes a tensor name of "
		         "%zu bytes, more than %d",
		         pl ? " after --prefix" : "", pl + n, TD_NAME_MAX);
		return 0;
	}
	memcpy(m->tensor, prefix, pl);
	memcpy(m->tensor + pl, json_object_get_string(v), n);
	m->tensor[pl + n] = 0;
	if (td_wire_name_check(m->tensor, pl + n, false, &w) < 0) {
		m->tensor[0] = 0;
		snprintf(why, cap,
		         "attribute _tensord_name is not a valid tensor name: %s",
		         w);
		return 0;
	}
	m->named = true;
	return 1;
}

/* One array folder: metadata, chunk, checks. 1 done, 0 skipped, -errno. */
static int import_array(int top, const char *name, const char *prefix,
                        struct imp *m, char *why, size_t cap)
{
	char path[TD_ZARR_NAME_MAX + 64], key[2 + 2 * TD_ZARR_MAX_DIMS + 1];
	struct json_object *meta = NULL;
	uint64_t want;
	bool big;
	char sep;
	int rc;

	snprintf(path, sizeof(path), "%s/zarr.json", name);
	rc = read_json_at(top, path, &meta, why, cap);
	if (rc < 0)
		return rc;
	rc = td_zarr_array_read(meta, &m->a, &big, &sep, why, cap);
	json_object_put(meta);
	if (rc < 0)
		return rc;
	if (m->a.type->blob < 0) {
		snprintf(why, cap, "data_type %s has no tensord dtype",
		         m->a.type->name);
		return -ENOTSUP;
	}
	if (td_zarr_chunk_bytes(&m->a, &want) < 0) {
		snprintf(why, cap, "its size overflows");
		return -EOVERFLOW;
	}
	m->folder = name;
	if (!kept_name(m, prefix)) {
		snprintf(m->tensor, sizeof(m->tensor), "%s", prefix);
		td_tgm_name_sanitize(name, m->tensor + strlen(prefix),
		                     sizeof(m->tensor) - strlen(prefix));
	}
	rc = import_meta(m, why, cap);
	if (rc < 0)
		return rc;
	rc = td_zarr_chunk_key(&m->a, false, key, sizeof(key));
	if (rc == 0)
		return 1; /* zero-size: no chunk, nothing to read */
	for (char *p = key; *p; p++)
		if (*p == '/')
			*p = sep;
	snprintf(path, sizeof(path), "%s/%s", name, key);
	rc = read_at(top, path, want, NULL, &m->len);
	if ((rc == -ENOENT || rc == -EISDIR) && m->a.ndim == 0) {
		/* upstream's 0-d form (zarr.md §7) */
		snprintf(path, sizeof(path), "%s/c%c0", name, sep);
		rc = read_at(top, path, want, NULL, &m->len);
	}
	if (rc == -ENOENT)
		return 0;
	if (rc == -EFBIG || (!rc && m->len != want)) {
		snprintf(why, cap,
		         "expected %" PRIu64 " bytes (%" PRIu64
		         " elements x %u bytes/element), got %" PRIu64,
		         want, want / m->a.type->size, m->a.type->size, m->len);
		return -EBADMSG;
	}
	if (rc < 0) {
		snprintf(why, cap, "%s: %s", path, strerror(-rc));
		return rc;
	}
	/* read when published, straight into the daemon's buffer */
	snprintf(m->chunk, sizeof(m->chunk), "%s", path);
	m->swap = big ? m->a.type->size : 0;
	return 1;
}

/*
 * m's chunk (checked by import_array) into dst: m->len bytes, each
 * big-endian element reversed. A file changed since is an error.
 */
static int read_chunk(int top, const struct imp *m, uint8_t *dst)
{
	int fd = open_in_store(top, m->chunk);
	uint64_t got = 0;
	uint8_t extra;
	int rc = 0;

	if (fd < 0)
		return fd;
	while (!rc && got < m->len) {
		ssize_t r = read(fd, dst + got, m->len - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			rc = r < 0 ? -errno : -ENODATA;
		else
			got += (uint64_t)r;
	}
	if (!rc && read(fd, &extra, 1) != 0)
		rc = -EFBIG; /* grew since it was checked */
	close(fd);
	for (uint64_t i = 0; !rc && m->swap && i < m->len; i += m->swap)
		for (unsigned k = 0, w = m->swap; k < w / 2; k++) {
			uint8_t t = dst[i + k];

			dst[i + k] = dst[i + w - 1 - k];
			dst[i + w - 1 - k] = t;
		}
	return rc;
}

/* By tensor name, then folder (an error names the pair in one order). */
static int imp_cmp(const void *a, const void *b)
{
	const struct imp *x = *(const struct imp *const *)a;
	const struct imp *y = *(const struct imp *const *)b;
	int c = strcmp(x->tensor, y->tensor);

	return c ? c : strcmp(x->folder, y->folder);
}

/*
 * Distinct tensor names for the arrays read (skipped ones have none):
 * folders that become the same name ("a b", "a_b") get _1, _2, ... in
 * sorted order, as load makes a file's names distinct, instead of the
 * later ones replacing the earlier. A name from _tensord_name is kept as
 * it is: two arrays that would still publish one name (a _tensord_name
 * twice, or one that is another array's name) are refused, before
 * anything is published, rather than one replacing the other. 0, or
 * -errno with why.
 */
static int unique_tensors(struct imp *ims, size_t n, char *why, size_t cap)
{
	char **v = calloc(n ? n : 1, sizeof(*v));
	struct imp **by = calloc(n ? n : 1, sizeof(*by));
	size_t k = 0;
	int rc = v && by ? 0 : -ENOMEM;

	for (size_t i = 0; !rc && i < n; i++)
		if (ims[i].tensor[0] && !ims[i].named)
			v[k++] = ims[i].tensor;
	if (!rc)
		rc = td_tgm_names_unique(v, k, sizeof(ims->tensor));
	k = 0;
	for (size_t i = 0; !rc && i < n; i++)
		if (ims[i].tensor[0])
			by[k++] = &ims[i];
	if (k)
		qsort(by, k, sizeof(*by), imp_cmp);
	for (size_t i = 1; !rc && i < k; i++)
		if (!strcmp(by[i - 1]->tensor, by[i]->tensor)) {
			snprintf(why, cap,
			         "arrays %s and %s would both be published as "
			         "%s",
			         by[i - 1]->folder, by[i]->folder, by[i]->tensor);
			rc = -EEXIST;
		}
	free(v);
	free(by);
	if (rc == -ENAMETOOLONG)
		snprintf(why, cap, "tensor names do not fit with the suffixes "
		                   "that make them distinct");
	else if (rc < 0 && rc != -EEXIST)
		snprintf(why, cap, "%s", strerror(-rc));
	return rc;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * Child folders of the group holding a zarr.json, sorted. The zarr.json
 * is looked at, not followed: one that is a link (a loop, a dangling one)
 * or cannot be looked at is listed, for import_array to refuse with its
 * reason; it was dropped silently, and the import went on without that
 * array. Only a name with no zarr.json under it (ENOENT, ENOTDIR: a
 * file, another folder) is no array.
 */
static int list_arrays(const char *dir, char ***out, size_t *n)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **v = NULL;
	size_t cap = 0;

	*n = 0;
	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		struct stat st;
		char p[PATH_MAX];

		if (e->d_name[0] == '.' && (!e->d_name[1] ||
		                            (e->d_name[1] == '.' && !e->d_name[2])))
			continue;
		snprintf(p, sizeof(p), "%s/%s/zarr.json", dir, e->d_name);
		if (lstat(p, &st) < 0 && (errno == ENOENT || errno == ENOTDIR))
			continue;
		if (*n == cap) {
			char **nv = realloc(v, (cap = cap ? 2 * cap : 16) *
			                               sizeof(*v));
			if (!nv)
				goto nomem;
			v = nv;
		}
		if (!(v[*n] = strdup(e->d_name)))
			goto nomem;
		(*n)++;
	}
	closedir(d);
	if (*n)
		qsort(v, *n, sizeof(*v), name_cmp);
	*out = v;
	return 0;
nomem:
	/* not a shorter list: an import of part of the store said nothing
	 * of the arrays it left out */
	closedir(d);
	while (*n)
		free(v[--*n]);
	free(v);
	return -ENOMEM;
}

/*
 * The blob strings export keeps as _tensord_format and _tensord_color_*
 * (docs/zarr.md, "Attributes"), given back to the tensor: an image stays
 * an image (its rows packed, as the chunk holds them). A string with a
 * NUL in it is no blob string and stays out.
 */
static void blob_strings(const struct imp *m, struct td_publish *p)
{
	static const char *const key[] = {
	        "_tensord_format", "_tensord_color_space",
	        "_tensord_color_transfer", "_tensord_color_encoding",
	        "_tensord_color_range"};
	const char **dst[] = {&p->format, &p->color_space, &p->color_transfer,
	                      &p->color_encoding, &p->color_range};

	for (size_t i = 0; i < sizeof(key) / sizeof(*key); i++) {
		size_t len;
		const char *v = attr_str(m, key[i], &len);

		if (v && strlen(v) == len)
			*dst[i] = v;
	}
}

static int publish_imp(struct td_client *c, int top, struct imp *m,
                       struct tctl_keep *k, struct json_object *sk,
                       uint64_t *version)
{
	struct td_publish p;
	struct td_error e;
	struct td_alloc *a;
	uint64_t size;
	int rc;

	do { /* again while the name changes under the import (keep.h) */
		p = (struct td_publish){.name = m->tensor};
		e = (struct td_error){0};
		size = m->len;
		rc = tctl_keep_before(k, c, &p);
		if (rc)
			return rc;
		rc = td_client_alloc(c, 1, &size, &a, &e);
		if (rc < 0)
			return tctl_refused(m->tensor, rc, &e);
		rc = m->len ? read_chunk(top, m, td_alloc_data(a, 0)) : 0;
		if (rc < 0) {
			td_alloc_free(a);
			return tctl_fail(TCTL_REFUSED, "input", -rc,
			                 "%s: %s (changed since it was "
			                 "checked?)",
			                 m->chunk, strerror(-rc));
		}
		p.dtype = (uint32_t)m->a.type->blob;
		p.ndim = m->a.ndim;
		p.shape = m->a.shape;
		p.meta = m->meta;
		p.meta_len = m->meta_len;
		blob_strings(m, &p);
		rc = td_client_publish_alloc(c, a, &p, version, &e);
		rc = tctl_keep_after(k, c, m->tensor, rc, &e, *version, sk);
	} while (rc == TCTL_KEEP_AGAIN);
	return rc;
}

static void print_imp(const struct imp *m, uint64_t version)
{
	printf("%s version %" PRIu64 " %s ", m->tensor, version,
	       td_tensor_dtype_name((uint32_t)m->a.type->blob));
	tctl_print_shape(stdout, m->a.shape, m->a.ndim, 0);
	printf("\n");
}

/* Publish every read array in order; all or nothing unless partial: a
 * refusal deletes what was published again, newest first, as load does,
 * and puts back what it replaced (keep.h). With no_replace an array whose name exists is
 * skipped (version 0), said, and the status is TCTL_SKIPPED when all else
 * went. TCTL_ status. */
static int publish_all(struct td_client *c, int top, struct imp *ims,
                       size_t n, bool partial, bool no_replace,
                       const char *dir)
{
	struct json_object *out = json_object_new_array();
	struct json_object *sk = no_replace ? json_object_new_array() : NULL;
	uint64_t *versions = calloc(n ? n : 1, sizeof(*versions));
	size_t done = 0, removed = 0, i, skipped = 0;
	struct tctl_keep keep;
	int rc = versions ? TCTL_OK
	                  : tctl_fail(TCTL_REFUSED, "io", ENOMEM,
	                              "out of memory");

	/* the error says what was kept, or put back */
	tctl_json_hold();
	tctl_keep_init(&keep, partial, no_replace);
	/* Ctrl-C: stop between two arrays and roll back (cmd-load.c) */
	tctl_publish_guard(1);
	for (i = 0; !rc && !(rc = tctl_publish_check(dir)) && i < n; i++) {
		if (!ims[i].tensor[0])
			continue;
		rc = publish_imp(c, top, &ims[i], &keep, sk, &versions[i]);
		if (rc == TCTL_SKIPPED) {
			versions[i] = 0;
			skipped++;
			rc = TCTL_OK;
			continue;
		}
		if (rc)
			break;
		done++;
		if (tctl_json) {
			struct json_object *j = json_object_new_object();

			json_object_object_add(
			        j, "name", json_object_new_string(ims[i].tensor));
			json_object_object_add(
			        j, "version", json_object_new_uint64(versions[i]));
			json_object_array_add(out, j);
		}
	}
	if (rc && done && partial) {
		tctl_say("%zu array(s) published before this failure, kept "
		         "(--partial)",
		         done);
	} else if (rc && done) {
		removed = tctl_keep_roll_back(&keep, c);
		tctl_say("%zu array(s) published before this failure; %zu "
		         "deleted again",
		         done, removed);
	}
	/* under --json the error object is the whole answer */
	for (i = 0; (!rc || partial) && !tctl_json && i < n; i++)
		if (ims[i].tensor[0] && versions[i])
			print_imp(&ims[i], versions[i]);
	if (!rc && tctl_json) {
		struct json_object *j = json_object_new_object();

		json_object_object_add(j, "published", json_object_get(out));
		if (sk)
			json_object_object_add(j, "skipped",
			                       json_object_get(sk));
		rc = tctl_json_print(j);
	} else if (partial) {
		tctl_json_held_add("published", json_object_get(out));
		if (sk)
			tctl_json_held_add("skipped", json_object_get(sk));
	}
	if (!rc && skipped)
		rc = TCTL_SKIPPED;
	tctl_publish_guard(0);
	tctl_keep_fini(&keep);
	json_object_put(out);
	json_object_put(sk);
	free(versions);
	return rc;
}

int cmd_zarr_import(int argc, char **argv)
{
	enum { O_PREFIX = TCTL_OPT_FIRST_OWN, O_PARTIAL, O_NO_REPLACE };
	static const struct option opts[] = {
	        {"prefix", required_argument, NULL, O_PREFIX},
	        {"partial", no_argument, NULL, O_PARTIAL},
	        {"no-replace", no_argument, NULL, O_NO_REPLACE},
	        TCTL_COMMON_OPTIONS};
	bool partial = false, no_replace = false;
	const char *prefix = "", *dir;
	struct json_object *root = NULL;
	struct imp *ims = NULL;
	char **names = NULL, why[512];
	size_t n = 0;
	struct td_client *c = NULL;
	int top = -1, rc, o;

	while ((o = tctl_getopt(argc, argv, "", opts, &rc)) != -1) {
		if (o == O_PARTIAL)
			partial = true;
		else if (o == O_NO_REPLACE)
			no_replace = true;
		else if (o == O_PREFIX)
			prefix = optarg;
		else
			return rc;
	}
	if (argc - optind != 1)
		return tctl_operands("zarr", argc, argv, 1,
				     "import needs one DIR");
	if (tctl_check_prefix("zarr", prefix, TD_NAME_MAX - 16))
		return TCTL_USAGE;
	dir = argv[optind];
	if (!*dir) /* `"$D"` of an unset D */
		return tctl_usage("zarr", "import: an empty DIR path");
	top = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (top < 0) { /* `zarr import run.tgm` said only "Not a directory" */
		int err = errno;

		return tctl_fail_kind(err, "io", dir,
		                      err == ENOTDIR ? tctl_file_kind(dir)
		                                     : TCTL_KIND_NONE);
	}
	rc = read_json_at(top, "zarr.json", &root, why, sizeof(why));
	if (!rc && (!json_object_is_type(root, json_type_object) ||
	            !json_object_is_type(json_object_object_get(root,
	                                                        "node_type"),
	                                 json_type_string) ||
	            strcmp(json_object_get_string(
	                           json_object_object_get(root, "node_type")),
	                   "group"))) {
		snprintf(why, sizeof(why), "zarr.json: the root is not a group");
		rc = -EBADMSG;
	}
	if (rc < 0) {
		rc = tctl_fail(TCTL_REFUSED, "input", -rc, "%s: %s", dir, why);
		goto done;
	}
	if (list_arrays(dir, &names, &n) < 0 ||
	    !(ims = calloc(n ? n : 1, sizeof(*ims)))) {
		rc = tctl_fail(TCTL_REFUSED, "io", ENOMEM, "%s: cannot list",
		               dir);
		goto done;
	}
	/* everything is read and checked before anything is published */
	for (size_t i = 0; i < n; i++) {
		int r = import_array(top, names[i], prefix, &ims[i], why,
		                     sizeof(why));

		if (r < 0) {
			rc = tctl_fail(TCTL_REFUSED, "input", -r, "%s/%s: %s",
			               dir, names[i], why);
			goto done;
		}
		if (ims[i].note[0])
			tctl_say("%s/%s: %s: named by its folder", dir,
			         names[i], ims[i].note);
		if (r == 0) {
			tctl_say("%s/%s: no chunk, skipped", dir, names[i]);
			ims[i].tensor[0] = 0;
		}
	}
	rc = unique_tensors(ims, n, why, sizeof(why));
	if (rc < 0) {
		rc = tctl_fail(TCTL_REFUSED, "input", -rc, "%s: %s", dir, why);
		goto done;
	}
	rc = tctl_connect(&c);
	if (!rc)
		rc = publish_all(c, top, ims, n, partial, no_replace, dir);
done:
	json_object_put(root);
	for (size_t i = 0; i < n; i++) {
		free(names[i]);
		if (ims) {
			td_zarr_array_fini(&ims[i].a);
			free(ims[i].meta);
		}
	}
	free(names);
	free(ims);
	td_client_close(c);
	close(top);
	return rc;
}

