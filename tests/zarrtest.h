/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the Zarr suites: a scratch folder per test, tensorctl and
 * shell commands with their output, the strict structure checker
 * (scripts/zarr-check.py) and zarrita (tests/zarr/zarrita-read.mjs) as
 * subprocesses, and the expectations file zarrita compares against.
 * Header-only, like testchild.h.
 */
#ifndef TD_ZARRTEST_H
#define TD_ZARRTEST_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "testutil.h"

static char zt_dir[64];
static char zt_sock[128];

static inline void zt_setup(const struct tu_daemon *d)
{
	snprintf(zt_dir, sizeof(zt_dir), "/tmp/td-zarr-XXXXXX");
	cr_assert(tu_mkdtemp(zt_dir));
	snprintf(zt_sock, sizeof(zt_sock), "%s", d ? d->sock : "");
}

/*
 * The bound on node and python3 (zarrita, dask, zarr-check.py): they
 * start slowly and read whole stores; within the longest such test's
 * timeout (240 s). Other commands have TU_WAIT_S.
 */
#define ZT_INTERP_S 180

/* /bin/sh -c CMD 2>&1 within secs: exit status, output in *out
 * (malloc'ed). */
static inline int zt_vsh(char **out, int secs, const char *fmt, va_list ap)
{
	char cmd[8192];
	char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	int n = vsnprintf(cmd, sizeof(cmd) - 8, fmt, ap);

	cr_assert(n > 0 && (size_t)n < sizeof(cmd) - 8);
	strcat(cmd, " 2>&1");
	return tu_run_capture_in(argv, out, secs);
}

static inline __attribute__((format(printf, 2, 3))) int
zt_sh(char **out, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = zt_vsh(out, TU_WAIT_S, fmt, ap);
	va_end(ap);
	return rc;
}

/* zt_sh() for node and python3 (ZT_INTERP_S). */
static inline __attribute__((format(printf, 2, 3))) int
zt_interp(char **out, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = zt_vsh(out, ZT_INTERP_S, fmt, ap);
	va_end(ap);
	return rc;
}

static inline __attribute__((format(printf, 1, 2))) void
zt_ok_sh(const char *fmt, ...)
{
	char *out = NULL;
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = zt_vsh(&out, TU_WAIT_S, fmt, ap);
	va_end(ap);
	cr_assert_eq(rc, 0, "%s: %s", fmt, out);
	free(out);
}

/* tensorctl --socket SOCK ARGS (a format); its status and output. */
static inline __attribute__((format(printf, 2, 3))) int
zt_ctl(char **out, const char *fmt, ...)
{
	const char *bin = getenv("TD_TENSORCTL");
	char args[6000];
	va_list ap;

	cr_assert(bin, "TD_TENSORCTL is not set");
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	return zt_sh(out, "'%s' --socket '%s' %s", bin, zt_sock, args);
}

#define zt_ok(...)                                                            \
	do {                                                                  \
		char *o_ = NULL;                                              \
		int r_ = zt_ctl(&o_, __VA_ARGS__);                            \
		cr_assert_eq(r_, 0, "tensorctl %s: %s", #__VA_ARGS__, o_);    \
		free(o_);                                                     \
	} while (0)

static inline void zt_teardown(void)
{
	char *out = NULL;

	if (zt_dir[0])
		zt_sh(&out, "rm -rf '%s'", zt_dir);
	free(out);
}

/* zt_dir/raw/NAME.bin (its folder made); malloc'ed. */
static inline char *zt_path(const char *name)
{
	char *p = NULL;

	cr_assert(asprintf(&p, "%s/raw/%s.bin", zt_dir, name) > 0);
	zt_ok_sh("mkdir -p \"$(dirname '%s')\"", p);
	return p;
}

static inline char *zt_path2(const char *a, const char *b, const char *c)
{
	char *p = NULL;

	cr_assert(asprintf(&p, "%s/%s/%s/%s", zt_dir, a, b, c) > 0);
	return p;
}

static inline void zt_put_file(const char *path, const void *p, size_t len)
{
	FILE *f = fopen(path, "wb");

	cr_assert(f, "%s", path);
	if (len) /* p may be NULL for an empty file */
		cr_assert_eq(fwrite(p, 1, len, f), len);
	cr_assert_eq(fclose(f), 0);
}

/* The element bytes of NAME into zt_path(NAME); that path. */
static inline char *zt_write_raw(const char *name, const void *p, size_t len)
{
	char *path = zt_path(name);

	zt_put_file(path, p, len);
	return path;
}

/* zt_dir/REL, NUL-terminated, malloc'ed. */
static inline char *zt_file(const char *rel)
{
	char path[512];
	size_t len;

	uint8_t *b;
	char *t;

	snprintf(path, sizeof(path), "%s/%s", zt_dir, rel);
	b = tu_read_file(path, &len);
	t = malloc(len + 1);
	cr_assert(t);
	memcpy(t, b, len);
	t[len] = 0;
	free(b);
	return t;
}

/* A tensor's bytes through tensorctl get. */
static inline char *zt_get(const char *name, size_t *len)
{
	char path[512];
	char *out = NULL;
	int rc;

	snprintf(path, sizeof(path), "%s/got.bin", zt_dir);
	rc = zt_ctl(&out, "get '%s' -o %s", name, path);
	cr_assert_eq(rc, 0, "get %s: %s", name, out);
	free(out);
	return (char *)tu_read_file(path, len);
}

/* The strict structure check of zarr.md §12.3 over zt_dir/REL or a URL. */
static inline void zt_check(const char *target)
{
	const char *src = getenv("TD_SOURCE_ROOT");
	char *out = NULL;
	int rc;

	cr_assert(src, "TD_SOURCE_ROOT is not set");
	rc = zt_interp(&out, "/usr/bin/python3 '%s/scripts/zarr-check.py' "
	                     "'%s'",
	               src, target);
	cr_assert_eq(rc, 0, "zarr-check %s:\n%s", target, out);
	free(out);
}

static inline void zt_check_dir(const char *rel)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", zt_dir, rel);
	zt_check(path);
}

/* zarrita 0.7.5 reads STORE (zt_dir/REL or a URL) and compares with EXP. */
static inline void zt_zarrita(const char *store, const char *exp)
{
	const char *src = getenv("TD_SOURCE_ROOT");
	char mod[4200], loc[512];
	char *out = NULL;
	struct stat st;
	int rc;

	cr_assert(src, "TD_SOURCE_ROOT is not set");
	snprintf(mod, sizeof(mod), "%s/tests/zarr/node_modules/zarrita",
	         src);
	cr_assert(stat(mod, &st) == 0,
	          "zarrita 0.7.5 is missing (%s): run scripts/deps.sh, which "
	          "installs it with npm ci from tests/zarr/package-lock.json",
	          mod);
	if (!strncmp(store, "http", 4))
		snprintf(loc, sizeof(loc), "%s", store);
	else
		snprintf(loc, sizeof(loc), "%s/%s", zt_dir, store);
	rc = zt_interp(&out, "node '%s/tests/zarr/zarrita-read.mjs' '%s' '%s'",
	               src, loc, exp);
	cr_assert_eq(rc, 0, "zarrita %s:\n%s", loc, out);
	free(out);
}

/* What zarrita must find: {"group_attrs":..., "arrays":{...}}. */
struct zt_expect {
	struct json_object *arrays;
};

static inline struct zt_expect *zt_expect_new(void)
{
	struct zt_expect *x = calloc(1, sizeof(*x));

	cr_assert(x);
	x->arrays = json_object_new_object();
	return x;
}

/* Array NODE of type TYPE and shape, values in zt_path(RAW), attributes
 * (JSON text, NULL: not compared). */
static inline void zt_expect_array(struct zt_expect *x, const char *node,
                                   const char *type, uint32_t ndim,
                                   const uint64_t *shape, const char *raw,
                                   const char *attrs)
{
	struct json_object *a = json_object_new_object();
	struct json_object *s = json_object_new_array();
	char *p = zt_path(raw);

	for (uint32_t k = 0; k < ndim; k++)
		json_object_array_add(s, json_object_new_uint64(shape[k]));
	json_object_object_add(a, "dtype", json_object_new_string(type));
	json_object_object_add(a, "shape", s);
	json_object_object_add(a, "raw", json_object_new_string(p));
	if (attrs)
		json_object_object_add(a, "attrs",
		                       json_tokener_parse(attrs));
	json_object_object_add(x->arrays, node, a);
	free(p);
}

/* Write the file (group attributes as JSON text, NULL: not compared);
 * its path, malloc'ed. */
static inline char *zt_expect_done(struct zt_expect *x, const char *gattrs)
{
	static int seq;
	struct json_object *o = json_object_new_object();
	const char *t;
	char *path = NULL;

	json_object_object_add(o, "arrays", x->arrays);
	if (gattrs)
		json_object_object_add(o, "group_attrs",
		                       json_tokener_parse(gattrs));
	t = json_object_to_json_string(o);
	cr_assert(asprintf(&path, "%s/expect-%d.json", zt_dir, seq++) > 0);
	zt_put_file(path, t, strlen(t));
	json_object_put(o);
	free(x);
	return path;
}

#endif
