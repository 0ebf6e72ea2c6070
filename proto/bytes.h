/* SPDX-License-Identifier: MIT */
/*
 * Explicit-endian loads and stores and overflow-checked arithmetic shared by
 * every codec in proto/. Fields are always read one by one through these
 * helpers, never by casting a buffer to a struct, so the codecs work at any
 * alignment and on any host byte order.
 */
#ifndef TD_PROTO_BYTES_H
#define TD_PROTO_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t td__le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static inline uint32_t td__le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static inline uint64_t td__le64(const uint8_t *p)
{
	return (uint64_t)td__le32(p) | (uint64_t)td__le32(p + 4) << 32;
}

static inline uint16_t td__be16(const uint8_t *p)
{
	return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}

static inline uint32_t td__be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline uint64_t td__be64(const uint8_t *p)
{
	return (uint64_t)td__be32(p) << 32 | (uint64_t)td__be32(p + 4);
}

static inline void td__put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void td__put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void td__put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void td__put_be16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void td__put_be32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static inline void td__put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static inline float td__lef32(const uint8_t *p)
{
	uint32_t u = td__le32(p);
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline void td__put_lef32(uint8_t *p, float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	td__put_le32(p, u);
}

/* a + b into *out; true on overflow (then *out is unspecified). */
static inline bool td__add_ovf(uint64_t a, uint64_t b, uint64_t *out)
{
	return __builtin_add_overflow(a, b, out);
}

static inline bool td__mul_ovf(uint64_t a, uint64_t b, uint64_t *out)
{
	return __builtin_mul_overflow(a, b, out);
}

/* Smallest multiple of 8 >= x; true on overflow. */
static inline bool td__pad8_ovf(uint64_t x, uint64_t *out)
{
	if (x > UINT64_MAX - 7)
		return true;
	*out = (x + 7) & ~(uint64_t)7;
	return false;
}

/*
 * Strict UTF-8 (RFC 3629): no overlongs, no surrogates, nothing above
 * U+10FFFF. NUL bytes are valid UTF-8 and are allowed here; callers that
 * forbid them check separately.
 */
bool td__utf8_valid(const uint8_t *s, size_t len);

/*
 * A byte count as people write one (daemon options, the policy file):
 * decimal digits, then optionally K, M, G or T (either case) for 2^10,
 * 2^20, 2^30, 2^40. No sign, no spaces, nothing after; a value past 64
 * bits is refused. 0, or -EINVAL leaving *out alone.
 */
int td__size_parse(const char *p, size_t len, uint64_t *out);

#endif
