/* SPDX-License-Identifier: MIT */
#include "bytes.h"

#include <errno.h>

int td__size_parse(const char *p, size_t len, uint64_t *out)
{
	unsigned shift = 0;
	uint64_t v = 0;

	if (len) {
		switch (p[len - 1] | 0x20) {
		case 'k': shift = 10; break;
		case 'm': shift = 20; break;
		case 'g': shift = 30; break;
		case 't': shift = 40; break;
		default: break;
		}
		if (shift)
			len--;
	}
	if (len == 0)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		uint64_t d = (uint64_t)(p[i] - '0');

		if (p[i] < '0' || p[i] > '9' || v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	if (v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = v << shift;
	return 0;
}
