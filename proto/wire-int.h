/* SPDX-License-Identifier: MIT */
/*
 * Field helpers the message codecs share (wire.c, wire-cat.c); not
 * installed. Each reader helper records the first error in rd and reads
 * nothing more after one (struct td_wire_rd).
 */
#ifndef TD_PROTO_WIRE_INT_H
#define TD_PROTO_WIRE_INT_H

#include "wire.h"

/* Record the first semantic error; later ones are ignored. */
void td__wire_rd_fail(struct td_wire_rd *rd, enum td_err_kind kind,
		      const char *field, uint64_t value, size_t off,
		      const char *reason);
/* The body's length, or -ENOBUFS when the writer overflowed. */
int64_t td__wire_wr_done(const struct td_wire_wr *wr);
/* A name field: bounded, then td_wire_name_check (-EINVAL + reason). */
struct td_wire_str td__wire_rd_name(struct td_wire_rd *rd, bool prefix,
				    bool empty_ok, const char *field);
/* An enum value: v must lie in [min, max]. */
void td__wire_rd_enum(struct td_wire_rd *rd, uint32_t v, uint32_t min,
		      uint32_t max, size_t at, const char *field);
/* A u32 of flags, no bits outside known. */
uint32_t td__wire_rd_flags(struct td_wire_rd *rd, uint32_t known,
			   const char *field);
/*
 * Flags appended to a body after version 1: absent (the body ends) = 0,
 * a present 0 refused (one encoding per body), exactly four bytes.
 */
uint32_t td__wire_rd_opt_flags(struct td_wire_rd *rd, uint32_t known,
			       const char *field);
void td__wire_wr_opt_flags(struct td_wire_wr *wr, uint32_t v);
/* A count bounded by its cap (the array it fills). */
uint32_t td__wire_rd_count(struct td_wire_rd *rd, uint32_t max,
			   const char *field);
/* u32 count, then (i32 fd, u64 buffer_id) per entry. */
void td__wire_wr_fdents(struct td_wire_wr *wr, uint32_t n,
			const struct td_wire_fdent *fds);
uint32_t td__wire_rd_fdents(struct td_wire_rd *rd, uint32_t max,
			    struct td_wire_fdent *fds);
/* A body that is one u64. */
int64_t td__wire_u64_encode(uint64_t v, uint8_t *buf, size_t cap);
int td__wire_u64_decode(const uint8_t *body, size_t len, uint64_t *v,
			const char *field, struct td_err *err);
/* The codec of struct td_wire_<type>, whose body is its one u64 field. */
#define TD__WIRE_U64_CODEC(type, field)                                       \
	int64_t td_wire_##type##_encode(const struct td_wire_##type *m,       \
					uint8_t *buf, size_t cap)             \
	{                                                                     \
		return td__wire_u64_encode(m->field, buf, cap);               \
	}                                                                     \
	int td_wire_##type##_decode(const uint8_t *body, size_t len,          \
				    struct td_wire_##type *m,                 \
				    struct td_err *err)                       \
	{                                                                     \
		return td__wire_u64_decode(body, len, &m->field, #field,      \
					   err);                              \
	}

#endif
