/* SPDX-License-Identifier: MIT */
/*
 * Writing a zarr export's hierarchy (zarr-export.h): one group, one
 * single-chunk, little-endian, uncompressed array per tensor; metadata
 * from json/td-zarr.h. Export writes a new folder beside DIR and renames
 * it into place, so DIR appears whole or not at all; into an empty mount
 * point it builds the folder inside DIR and moves its entries up, the
 * root zarr.json last (zarr-into.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "output.h"
#include "td-zarr.h"
#include "tensorctl.h"
#include "tgm-desc.h"
#include "tgm-load.h"
#include "zarr-export.h"

void tctl_zset_fini(struct zset *z)
{
	for (size_t i = 0; i < z->n; i++) {
		td_zarr_array_fini(&z->s[i].a);
		free(z->s[i].owned);
	}
	free(z->s);
	json_object_put(z->gattrs);
}

/* The arrays' metadata side by side (borrowing attrs; free() it), for the
 * group; NULL. */
static struct td_zarr_array *zset_arrays(const struct zset *z)
{
	struct td_zarr_array *arrs = calloc(z->n ? z->n : 1, sizeof(*arrs));

	for (size_t i = 0; arrs && i < z->n; i++)
		arrs[i] = z->s[i].a;
	return arrs;
}

int tctl_zset_group(struct zset *z)
{
	struct td_zarr_array *arrs = zset_arrays(z);

	if (!arrs)
		return tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
	z->gattrs = td_zarr_tensor_group(arrs, z->n);
	free(arrs);
	return TCTL_OK;
}

/* ---- writing a hierarchy ---- */

/*
 * What the export was doing, for its error message: the step and the
 * path under DIR ("writing cam/c/0/0"). A full disk said only "DIR: No
 * space left on device", whichever file, folder, sync or rename failed.
 * zfrom: the file the chunks are read from (z->from), for a read error.
 */
static char zstep[PATH_MAX + 64];
static const char *zfrom;

static void zstep_set(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static void zstep_set(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(zstep, sizeof(zstep), fmt, ap);
	va_end(ap);
}

static int write_all(int fd, const uint8_t *p, uint64_t len)
{
	while (len) {
		ssize_t w = write(fd, p, len > (1u << 30) ? (1u << 30) : len);

		if (tctl_interrupted())
			return -EINTR;
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		len -= (uint64_t)w;
	}
	return 0;
}

/*
 * len bytes of s's file (s->fd, or its .tgm source) at off into fd,
 * read with pread, never mapped, each element byte-swapped when s->swap:
 * a file cut short meanwhile (truncated by someone else) is -ENODATA,
 * not a SIGBUS or a write's EFAULT.
 */
static int copy_in(int fd, const struct zsrc *s, uint64_t off, uint64_t len)
{
	static uint8_t buf[1 << 20];
	/* whole elements per read, so a swap never straddles two */
	uint64_t step = sizeof(buf) - (s->swap ? sizeof(buf) % s->swap : 0);
	int rc = 0;

	while (!rc && len) {
		uint64_t want = len < step ? len : step;
		ssize_t r = (ssize_t)want;

		if (s->src && tgm_src_read(s->src, off, buf, want) < 0) {
			zstep_set("reading %s's bytes from %s", s->a.name,
			     zfrom ? zfrom : "its file");
			return -s->src->io_err;
		}
		if (!s->src)
			r = pread(s->fd, buf, want, (off_t)off);
		if (r < 0 && errno == EINTR && !tctl_interrupted())
			continue;
		if (r <= 0) {
			rc = r < 0 ? -errno : -ENODATA;
			zstep_set("reading %s's bytes from %s", s->a.name,
			     zfrom ? zfrom : "its file");
			return rc;
		}
		if (s->swap && (uint64_t)r % s->swap)
			return -ENODATA; /* only at the file's end */
		if (s->swap)
			tctl_swap_in_place(buf, (uint64_t)r, s->swap);
		rc = write_all(fd, buf, (uint64_t)r);
		off += (uint64_t)r;
		len -= (uint64_t)r;
	}
	return rc;
}

/* A new file at dirfd/name holding s's bytes (swapped per element). */
static int write_file(int dirfd, const char *name, const struct zsrc *s)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
	                0644);
	const uint8_t *p = s->data;
	uint64_t len = s->len;
	unsigned swap = s->swap;
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (s->in_file) {
		rc = copy_in(fd, s, s->off, len);
	} else if (!swap) {
		rc = write_all(fd, p, len);
	} else {
		static uint8_t buf[1 << 20];
		uint64_t step = sizeof(buf) - sizeof(buf) % swap;

		for (uint64_t o = 0; !rc && o < len; o += step) {
			uint64_t n = len - o < step ? len - o : step;

			tctl_copy_swapped(buf, p + o, n, swap);
			rc = write_all(fd, buf, n);
		}
	}
	/* not synced here: write_tree syncs the whole tree once */
	if (close(fd) < 0 && !rc)
		rc = -errno;
	return rc;
}

static int write_json(int dirfd, const char *name, struct json_object *o)
{
	size_t len;
	char *t = td_zarr_text(o, &len);
	struct zsrc s = {.data = (const uint8_t *)t, .len = len};
	int rc = t ? write_file(dirfd, name, &s) : -ENOMEM;

	free(t);
	json_object_put(o);
	return rc;
}

/* mkdir + open as a folder; fd or -errno. */
static int subdir(int dirfd, const char *name)
{
	int fd;

	if (mkdirat(dirfd, name, 0755) < 0 && errno != EEXIST)
		return -errno;
	fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* The chunk file under the array folder adir: c/0/…/0 (c for 0-d). */
static int write_chunk(int adir, const struct zsrc *s)
{
	char key[2 + 2 * TD_ZARR_MAX_DIMS + 1];
	int rc = td_zarr_chunk_key(&s->a, false, key, sizeof(key));
	int fd = adir, next;
	char *seg, *save = NULL, *last = NULL;

	if (rc <= 0)
		return rc; /* no chunk for a zero-size array */
	zstep_set("writing %s/%s", s->a.name, key);
	rc = 0;
	for (seg = strtok_r(key, "/", &save); seg;
	     seg = strtok_r(NULL, "/", &save)) {
		if (last) {
			next = subdir(fd, last);
			if (fd != adir)
				close(fd);
			if (next < 0)
				return next;
			fd = next;
		}
		last = seg;
	}
	rc = write_file(fd, last, s);
	if (fd != adir)
		close(fd);
	return rc;
}

static int rm_entry(const char *p, const struct stat *st, int flag,
                    struct FTW *f)
{
	(void)st;
	(void)f;
	return (flag == FTW_DP ? rmdir(p) : unlink(p)) < 0 ? -1 : 0;
}

/* The array folders of z from o->written on (each its zarr.json and its
 * chunk) in the new folder: 0 or -errno (zstep says where). */
static int write_arrays(struct zout *o, const struct zset *z)
{
	int rc = 0;

	zfrom = z->from;
	for (; !rc && o->written < z->n; o->written++) {
		const struct zsrc *s = &z->s[o->written];
		int adir;

		zstep_set("making the folder %s", s->a.name);
		adir = tctl_interrupted() ? -EINTR : subdir(o->top, s->a.name);
		if (adir < 0)
			return adir;
		zstep_set("writing %s/zarr.json", s->a.name);
		rc = write_json(adir, "zarr.json", td_zarr_v3_array(&s->a));
		if (!rc)
			rc = write_chunk(adir, s);
		close(adir);
	}
	return rc;
}

/* The root group, with every array's metadata inline, then all made
 * durable before they become DIR: one syncfs(2), not an fsync a file
 * (12 ms an array); it reports write-back errors since the folder was
 * opened (Linux 5.8). 0 or -errno. */
static int write_root(int top, const struct zset *z)
{
	struct td_zarr_array *arrs = zset_arrays(z);
	int rc;

	if (!arrs)
		return -ENOMEM;
	zstep_set("writing zarr.json");
	rc = write_json(top, "zarr.json",
	                td_zarr_v3_group(z->gattrs, arrs, z->n));
	free(arrs);
	if (!rc)
		zstep_set("syncing the new folder");
	if (!rc && syncfs(top) < 0)
		rc = -errno;
	return rc;
}

/*
 * DIR (dl bytes, without its trailing '/') must not exist, or be an empty
 * folder (rename replaces it): 0, -EEXIST when it is no folder, -ENOTDIR
 * when a folder on its path is no folder (`six.bin/out`: that was "exists
 * and is not a folder", of a DIR that does not exist), else -errno.
 */
static int check_target(const char *dir, size_t dl)
{
	char path[PATH_MAX];
	struct stat st;
	DIR *d;
	struct dirent *e;
	int n = 0;

	if (snprintf(path, sizeof(path), "%.*s", (int)dl, dir) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return -EEXIST;
	d = opendir(dir);
	if (!d)
		return -errno;
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n ? -ENOTEMPTY : 0;
}

/* The tree in tmp made DIR: renamed over it, or (into an empty mount
 * point, which rename refuses with EBUSY, or an empty folder in a parent
 * closed to this user) moved up from tmp inside it. */
static int put_in_place(const char *tmp, const char *dir, bool into,
                        const struct zset *z)
{
	const char **names;
	int rc;

	if (!into) {
		zstep_set("setting the mode of the new folder %s", tmp);
		if (chmod(tmp, 0755) < 0)
			return -errno;
		zstep_set("renaming the new folder %s to it", tmp);
		return rename(tmp, dir) < 0 ? -errno : 0;
	}
	names = calloc(z->n ? z->n : 1, sizeof(*names));
	if (!names)
		return -ENOMEM;
	for (size_t i = 0; i < z->n; i++)
		names[i] = z->s[i].a.name;
	rc = tctl_zarr_move_up(dir, tmp, names, z->n, zstep, sizeof(zstep));
	free(names);
	return rc;
}

int tctl_zarr_open(struct zout *o, const char *dir)
{
	char base[PATH_MAX];
	size_t dl = strlen(dir);
	const char *slash;
	int rc;

	o->dir = dir;
	o->top = -1;
	o->written = 0;
	while (dl > 1 && dir[dl - 1] == '/')
		dl--;
	/* the folders of an export killed before it was done: beside DIR,
	 * or inside it (an export into an empty mount point), where DIR
	 * was then never empty again for the next one */
	snprintf(o->parent, sizeof(o->parent), "%.*s", (int)dl, dir);
	tctl_remove_stale(o->parent);
	slash = strrchr(o->parent, '/');
	if (slash)
		o->parent[slash == o->parent ? 1 : slash - o->parent] = 0;
	tctl_remove_stale(slash ? o->parent : ".");
	rc = check_target(dir, dl);
	/* an existing empty mount point, or an existing empty folder in a
	 * parent this user may not write: built inside it, on its file
	 * system, and moved up (put_in_place) */
	o->into = !rc && (tctl_zarr_is_mount_root(dir) ||
	                  tctl_zarr_parent_is_closed(dir));
	/* the temporary folder: hidden, beside DIR, named like output.c's
	 * temporary files */
	snprintf(o->parent, sizeof(o->parent), "%.*s", (int)dl, dir);
	slash = strrchr(o->parent, '/');
	snprintf(base, sizeof(base), "%s", slash ? slash + 1 : o->parent);
	if (o->into)
		snprintf(o->parent, sizeof(o->parent), "%.*s/", (int)dl, dir);
	else if (slash)
		o->parent[slash - o->parent + 1] = 0;
	else
		o->parent[0] = 0;
	if (rc == -EEXIST || rc == -ENOTEMPTY)
		return tctl_fail(TCTL_REFUSED, "io", rc == -EEXIST ? ENOTDIR : -rc,
		                 "%s: %s (export writes a new folder)", dir,
		                 rc == -EEXIST ? "exists and is not a folder"
		                               : "is not empty");
	if (rc == -ENOTDIR)
		return tctl_fail(TCTL_REFUSED, "io", ENOTDIR,
		                 "%s: %.*s is not a folder (export makes %s "
		                 "in it)",
		                 dir, (int)(strlen(o->parent) - 1), o->parent,
		                 base);
	if (rc < 0 ||
	    snprintf(o->tmp, sizeof(o->tmp), "%s.tensorctl-%d-%s-XXXXXX",
	             o->parent, (int)getpid(), base) >= (int)sizeof(o->tmp))
		return tctl_fail(TCTL_REFUSED, "io", rc ? -rc : ENAMETOOLONG,
		                 "%s: %s", dir,
		                 strerror(rc ? -rc : ENAMETOOLONG));
	tctl_write_guard(1);
	if (!mkdtemp(o->tmp)) {
		int err = errno;
		size_t pl = strlen(o->parent);

		tctl_write_guard(0);
		/* DIR as typed and the folder that refused the temporary
		 * one (its name is ours, not the user's), as -o says it */
		return tctl_fail(TCTL_REFUSED, "io", err,
		                 "%s: making a new folder in %.*s: %s", dir,
		                 pl ? (int)(pl > 1 ? pl - 1 : pl) : 1,
		                 pl ? o->parent : ".", strerror(err));
	}
	zstep_set("opening the new folder %s", o->tmp);
	o->top = open(o->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (o->top < 0)
		return tctl_zarr_close(o, NULL, -errno);
	return TCTL_OK;
}

int tctl_zarr_put(struct zout *o, const struct zset *z)
{
	return write_arrays(o, z);
}

int tctl_zarr_close(struct zout *o, const struct zset *z, int rc)
{
	int pfd;

	if (!rc)
		rc = write_arrays(o, z);
	if (!rc)
		rc = write_root(o->top, z);
	if (o->top >= 0)
		close(o->top);
	o->top = -1;
	if (!rc && tctl_interrupted())
		rc = -EINTR;
	if (!rc)
		rc = put_in_place(o->tmp, o->dir, o->into, z);
	tctl_write_guard(0);
	if (rc) {
		nftw(o->tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
		if (rc > 0) /* said by the caller */
			return rc;
		if (rc == -EINTR && tctl_interrupted())
			return tctl_fail(TCTL_REFUSED, "interrupted", EINTR,
			                 "%s: interrupted by signal %d, nothing "
			                 "written",
			                 o->dir, tctl_interrupted());
		if (rc == -ENODATA && z && z->from)
			return tctl_fail(TCTL_REFUSED, "input", ENODATA,
			                 "%s: the file ended early (cut short "
			                 "while it was read?), %s not written",
			                 z->from, o->dir);
		/* what failed, and where: the files are written in the
		 * new folder, named here as they would be under DIR */
		return tctl_fail(TCTL_REFUSED, "io", -rc,
		                 "%s: %s: %s; nothing written", o->dir, zstep,
		                 strerror(-rc));
	}
	pfd = open(*o->parent ? o->parent : ".",
	           O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (pfd >= 0) {
		fsync(pfd);
		close(pfd);
	}
	return TCTL_OK;
}

int tctl_zarr_write(const char *dir, const struct zset *z)
{
	struct zout o;
	int rc = tctl_zarr_open(&o, dir);

	return rc ? rc : tctl_zarr_close(&o, z, 0);
}

int tctl_zarr_print(const char *dir, const struct zset *z)
{
	if (tctl_json) {
		struct json_object *j = json_object_new_object();
		struct json_object *arr = json_object_new_array();

		for (size_t i = 0; i < z->n; i++)
			json_object_array_add(
			        arr, json_object_new_string(z->s[i].a.name));
		json_object_object_add(j, "path", json_object_new_string(dir));
		json_object_object_add(j, "arrays", arr);
		return tctl_json_print(j);
	}
	printf("%s: %zu array(s)\n", dir, z->n);
	for (size_t i = 0; i < z->n; i++) {
		/* a node name keeps C1 controls (tensogram.md §18) */
		printf("  ");
		tctl_text_escaped(stdout, z->s[i].a.name,
				  strlen(z->s[i].a.name));
		printf("\n");
	}
	return TCTL_OK;
}

/* ---- names ---- */

/* Distinct node names in order (tensogram.md §18 suffixes). */
int tctl_zset_unique_names(struct zset *z)
{
	char **names = calloc(z->n ? z->n : 1, sizeof(*names));
	int rc;

	if (!names)
		return -ENOMEM;
	for (size_t i = 0; i < z->n; i++)
		names[i] = z->s[i].a.name;
	/* a file name's 255 bytes, suffix included (the base is cut) */
	rc = td_tgm_names_unique(names, z->n, TD_ZARR_NAME_MAX + 1);
	free(names);
	return rc;
}

int tctl_zset_grow(struct zset *z, size_t n)
{
	z->s = calloc(n ? n : 1, sizeof(*z->s));
	return z->s ? 0 : -ENOMEM;
}
