#version 450
// The consumer's stage: a wrapping u32 sum and the xor of every u32 of the
// tensor (order-free, so the result is exact whatever the scheduling).
// Each invocation folds per_item words, 256 apart, then adds its part with
// two atomics: no shared memory and no barrier, which a CPU driver
// (lavapipe) runs far faster than a tree reduction.
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer In { uint v[]; } src;
layout(std430, set = 0, binding = 1) buffer Res { uint sum; uint xr; } res;
layout(push_constant) uniform P { uint count; uint per_item; uint frame; } p;

void main()
{
	uint base = gl_WorkGroupID.x * 256u * p.per_item + gl_LocalInvocationID.x;
	uint sum = 0u, xr = 0u;
	for (uint k = 0u; k < p.per_item; k++) {
		uint i = base + k * 256u;
		if (i < p.count) {
			uint x = src.v[i];
			sum += x;
			xr ^= x;
		}
	}
	atomicAdd(res.sum, sum);
	atomicXor(res.xr, xr);
}
