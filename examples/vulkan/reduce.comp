#version 450
// The consumer's stage: a wrapping u32 sum and the xor of every u32 of the
// tensor (order-free, so the result is exact whatever the scheduling),
// reduced per workgroup in shared memory, then one atomic per workgroup.
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer In { uint v[]; } src;
layout(std430, set = 0, binding = 1) buffer Res { uint sum; uint xr; } res;
layout(push_constant) uniform P { uint count; uint per_item; uint frame; } p;

shared uint s_sum[256];
shared uint s_xor[256];

void main()
{
	uint l = gl_LocalInvocationID.x;
	uint base = gl_WorkGroupID.x * 256u * p.per_item;
	uint sum = 0u, xr = 0u;
	for (uint k = 0u; k < p.per_item; k++) {
		uint i = base + k * 256u + l;
		if (i < p.count) {
			uint x = src.v[i];
			sum += x;
			xr ^= x;
		}
	}
	s_sum[l] = sum;
	s_xor[l] = xr;
	barrier();
	for (uint w = 128u; w > 0u; w >>= 1) {
		if (l < w) {
			s_sum[l] += s_sum[l + w];
			s_xor[l] ^= s_xor[l + w];
		}
		barrier();
	}
	if (l == 0u) {
		atomicAdd(res.sum, s_sum[0]);
		atomicXor(res.xr, s_xor[0]);
	}
}
