#version 450
// The producer's stage: every u32 of the tensor from its index and the
// frame number (vkx.h: vkx_value() is the same function on the CPU).
// Each invocation writes per_item words, 256 apart.
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) writeonly buffer Out { uint v[]; } o;
layout(push_constant) uniform P { uint count; uint per_item; uint frame; } p;

void main()
{
	uint base = gl_WorkGroupID.x * 256u * p.per_item + gl_LocalInvocationID.x;
	for (uint k = 0u; k < p.per_item; k++) {
		uint i = base + k * 256u;
		if (i < p.count)
			o.v[i] = (i * 2654435761u) ^ (p.frame * 40503u + 1u);
	}
}
