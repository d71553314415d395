// Buffers for encoded frames, reused across batches. A frame is encoded on
// an encoder thread, held by a Batch until its commit writes it to a pack,
// then dropped: up to about a megabyte of fresh memory per chunk, whose
// pages the kernel must fault in and zero every time (9% of the daemon's
// samples in the profile of 31a84c8, docs/BENCHMARKS.md). Batch hands its frames' buffers back
// here when it is cleared or destroyed, and the encoders take them again,
// so the memory stays mapped. Process-wide and thread-safe; it keeps at
// most kFramePoolBytes of idle buffers and frees the rest.
#pragma once

#include <cstddef>
#include <string>

namespace lmc::store {

// Idle capacity the pool keeps at most.
inline constexpr size_t kFramePoolBytes = size_t{128} << 20;
// Buffers smaller than this are left to malloc.
inline constexpr size_t kFramePoolMinBytes = size_t{64} << 10;

// An empty string whose capacity is at least n: a pooled one when the pool
// has one large enough, else a new one (from kFramePoolMinBytes up,
// rounded up to a multiple of it).
std::string TakeFrameBuffer(size_t n);
// Gives s's buffer to the pool (or frees it); s is left empty.
void GiveFrameBuffer(std::string&& s);
// Idle bytes in the pool now (tests).
size_t FramePoolIdleBytes();

}  // namespace lmc::store
