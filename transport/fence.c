/* SPDX-License-Identifier: MIT */
#include "fence.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int td__fence_kind(int fd, const char **why)
{
	char path[64], link[64];
	ssize_t n;
	int fl;

	if (fd < 0 || (fl = fcntl(fd, F_GETFL)) < 0) {
		*why = "fence fd is not an open descriptor";
		return -EBADF;
	}
	/*
	 * An O_PATH descriptor (open("/proc/self/fd/N", O_PATH) of an
	 * eventfd) has the eventfd's /proc link, but poll(2) and epoll
	 * refuse it (POLLNVAL, EBADF) and it cannot be written: published,
	 * every reader's GET failed watching it.
	 */
	if (fl & O_PATH) {
		*why = "fence fd is an O_PATH descriptor (a reference "
		       "without access), not an eventfd or sync_file";
		return -EINVAL;
	}
	/*
	 * eventfds, sync_files and timerfds are anonymous inodes that fstat
	 * cannot tell apart; their /proc link names the kind
	 * ("anon_inode:[eventfd]", "anon_inode:sync_file",
	 * "anon_inode:[timerfd]").
	 */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n < 0) {
		*why = "cannot inspect the fence fd (/proc/self/fd)";
		return -errno;
	}
	link[n] = 0;
	if (strcmp(link, "anon_inode:[eventfd]") == 0)
		return TD__FENCE_EVENTFD;
	if (strcmp(link, "anon_inode:sync_file") == 0)
		return TD__FENCE_SYNC_FILE;
	if (strcmp(link, "anon_inode:[timerfd]") == 0)
		return TD__FENCE_TIMERFD;
	*why = "fence fd is not an eventfd or sync_file";
	return -EINVAL;
}

int td__fence_publishable(int fd, const char **why)
{
	int kind = td__fence_kind(fd, why);

	if (kind == TD__FENCE_TIMERFD) {
		*why = "fence fd is a timerfd (a consumer's own copy of a "
		       "fence), not an eventfd or sync_file";
		return -EINVAL;
	}
	return kind;
}
