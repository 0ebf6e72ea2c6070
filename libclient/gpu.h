/* SPDX-License-Identifier: MIT */
/* libtensord internals for GPU stages: aligned mappings, dma-buf sync. */
#ifndef TD_LIBCLIENT_GPU_H
#define TD_LIBCLIENT_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Largest alignment td__mmap_natural() gives: a huge page. */
#define TD__NATURAL_ALIGN_MAX (2u << 20)

/*
 * mmap(NULL, len, prot, flags, fd, off) at an address aligned to the
 * largest power of two that divides len, at most 2 MiB (a plain mmap when
 * that is a page or less). So a buffer whose size is a multiple of A
 * starts at an A-aligned address, which is what host-pointer imports
 * (VK_EXT_external_memory_host) need. The mapping is exactly [p, p+len):
 * munmap(p, len) ends it. MAP_FAILED with errno on failure.
 */
void *td__mmap_natural(size_t len, int prot, int flags, int fd, off_t off);

/* TD_PLANE_* of an open buffer fd (fstatfs), 0 when unknown. */
int td__plane_kind(int fd);

struct td_client;
struct td_error;

/*
 * td_fence_wait() for a fence leased on c's connection of epoch: a
 * consumer's own fence (a timerfd) is fired only by that connection's
 * daemon, so once the connection is gone (the daemon exited, the client
 * was closed or reconnected) and it has not fired, -ECONNRESET rather
 * than a wait for what nothing will do.
 */
int td__fence_wait_leased(int fence_fd, struct td_client *c, uint32_t epoch,
			  int timeout_ms, struct td_error *err);

#endif
