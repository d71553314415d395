// Buffers for encoded frames, reused across batches. A frame is encoded on
// an encoder thread, held by a Batch until its commit writes it to a pack,
// then dropped: about one fresh megabyte per chunk, whose pages the kernel
// must fault in and zero every time (a fifth of the daemon's samples on a
// first save, docs/BENCHMARKS.md). Batch hands its frames' buffers back
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

// An empty string whose capacity is at least n (a pooled one when the
// pool has one large enough).
std::string TakeFrameBuffer(size_t n);
// Gives s's buffer to the pool (or frees it); s is left empty.
void GiveFrameBuffer(std::string&& s);
// Idle bytes in the pool now (tests).
size_t FramePoolIdleBytes();

}  // namespace lmc::store
