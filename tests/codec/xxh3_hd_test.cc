// codec/src/hd/xxh3.h against libxxhash's XXH3_64bits: every short length,
// lengths around the long path's block boundaries, large inputs, several
// data shapes, unaligned starts, and the block-parallel decomposition done
// by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "hd/xxh3.h"
#include "xxhash_reference.h"

namespace lmc::hd {
namespace {

using Bytes = std::vector<uint8_t>;

enum class Shape { kRandom, kZeros, kOnes, kSequence, kSparse };

const Shape kShapes[] = {Shape::kRandom, Shape::kZeros, Shape::kOnes, Shape::kSequence, Shape::kSparse};

Bytes Make(Shape shape, size_t n, uint32_t seed) {
  Bytes v(n);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; ++i) {
    switch (shape) {
      case Shape::kRandom:
        v[i] = static_cast<uint8_t>(rng());
        break;
      case Shape::kZeros:
        v[i] = 0;
        break;
      case Shape::kOnes:
        v[i] = 0xff;
        break;
      case Shape::kSequence:
        v[i] = static_cast<uint8_t>(i * 7 + (i >> 8));
        break;
      case Shape::kSparse:
        v[i] = rng() % 61 == 0 ? static_cast<uint8_t>(rng()) : 0;
        break;
    }
  }
  return v;
}

// Hashes v[off, off + n) (v must hold off + n bytes) both ways.
void ExpectSame(const Bytes& v, size_t off, size_t n, const std::string& what) {
  ASSERT_LE(off + n, v.size());
  const uint8_t* p = v.data() + off;
  ASSERT_EQ(Xxh3_64(p, n), XXH3_64bits(p, n)) << what << " n=" << n << " off=" << off;
}

// The decomposition of the long path as a GPU would run it: block deltas
// in any order (here in reverse), then the sequential chain, then the end.
uint64_t Decomposed(const uint8_t* p, size_t n) {
  const size_t nb = Xxh3FullBlocks(n);
  std::vector<uint64_t> deltas(nb * 8, 0xdeadbeefdeadbeefull);  // overwritten by Xxh3BlockDelta
  for (size_t k = nb; k-- > 0;) Xxh3BlockDelta(p + k * kXxh3BlockLen, &deltas[k * 8]);
  uint64_t acc[8];
  Xxh3InitAcc(acc);
  for (size_t k = 0; k < nb; ++k) {
    for (int i = 0; i < 8; ++i) acc[i] += deltas[k * 8 + i];
    Xxh3Scramble(acc);
  }
  return Xxh3FinishLong(acc, p, n);
}

TEST(Xxh3Hd, EveryLengthTo2100) {
  for (Shape shape : kShapes) {
    const Bytes v = Make(shape, 2100 + 3, 1 + static_cast<uint32_t>(shape));
    for (size_t n = 0; n <= 2100; ++n) {
      ExpectSame(v, 0, n, "shape=" + std::to_string(static_cast<int>(shape)));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(Xxh3Hd, EveryLengthUnaligned) {
  const Bytes v = Make(Shape::kRandom, 2100 + 3, 42);
  for (size_t off : {size_t{1}, size_t{3}}) {
    for (size_t n = 0; n <= 2100; ++n) {
      ExpectSame(v, off, n, "unaligned");
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(Xxh3Hd, AroundBlockBoundaries) {
  const size_t max = 20 * 1024 + 65;
  for (Shape shape : kShapes) {
    const Bytes v = Make(shape, max + 3, 100 + static_cast<uint32_t>(shape));
    for (size_t k = 1; k <= 20; ++k) {
      for (long d : {-65L, -64L, -63L, -1L, 0L, 1L, 63L, 64L, 65L}) {
        const size_t n = static_cast<size_t>(static_cast<long>(k * 1024) + d);
        for (size_t off : {size_t{0}, size_t{1}, size_t{3}}) {
          ExpectSame(v, off, n, "boundary k=" + std::to_string(k) + " d=" + std::to_string(d));
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(Xxh3Hd, LargeRandomSizes) {
  const size_t max = 3u << 20;
  const Bytes v = Make(Shape::kRandom, max + 3, 7);
  std::mt19937 rng(2024);
  std::vector<size_t> sizes = {max, max - 1, 1u << 20, (1u << 20) + 1, 65536, 1000003};
  for (int i = 0; i < 6; ++i) sizes.push_back(1 + rng() % max);
  for (size_t n : sizes) {
    ExpectSame(v, 0, n, "large");
    ExpectSame(v, 3, n, "large");
  }
  const Bytes z = Make(Shape::kZeros, max, 0);
  ExpectSame(z, 0, max, "large zeros");
  const Bytes f = Make(Shape::kOnes, max, 0);
  ExpectSame(f, 0, max, "large ones");
}

TEST(Xxh3Hd, FullBlocks) {
  EXPECT_EQ(Xxh3FullBlocks(0), 0u);
  EXPECT_EQ(Xxh3FullBlocks(241), 0u);
  EXPECT_EQ(Xxh3FullBlocks(1024), 0u);  // the only block is finished by Xxh3FinishLong
  EXPECT_EQ(Xxh3FullBlocks(1025), 1u);
  EXPECT_EQ(Xxh3FullBlocks(2048), 1u);
  EXPECT_EQ(Xxh3FullBlocks(2049), 2u);
  EXPECT_EQ(Xxh3FullBlocks(5 * 1024), 4u);
  EXPECT_EQ(Xxh3FullBlocks(5 * 1024 + 1), 5u);
}

TEST(Xxh3Hd, DecompositionByHand) {
  const size_t max = (1u << 20) + 3;
  const Bytes v = Make(Shape::kRandom, max + 1, 99);
  std::vector<size_t> sizes;
  for (size_t n = 241; n <= 4200; n += 37) sizes.push_back(n);
  for (size_t k = 1; k <= 8; ++k) {
    for (long d : {-65L, -64L, -1L, 0L, 1L, 63L, 64L, 65L}) {
      sizes.push_back(static_cast<size_t>(static_cast<long>(k * 1024) + d));
    }
  }
  sizes.push_back(max);
  for (size_t n : sizes) {
    for (size_t off : {size_t{0}, size_t{1}}) {
      const uint8_t* p = v.data() + off;
      ASSERT_EQ(Decomposed(p, n), XXH3_64bits(p, n)) << "n=" << n << " off=" << off;
    }
  }
}

// Xxh3FinishLong reads only the input from the last (non-scrambled) block
// on, or the last 64 bytes when that block is shorter: everything before
// reaches the hash through the deltas alone.
TEST(Xxh3Hd, FinishReadsOnlyTheTail) {
  for (size_t n : {size_t{241}, size_t{1024}, size_t{1025}, size_t{1087}, size_t{1088}, size_t{3000},
                   size_t{4096}, size_t{4097}, size_t{4160}}) {
    Bytes v = Make(Shape::kRandom, n, static_cast<uint32_t>(n));
    const uint64_t want = XXH3_64bits(v.data(), n);
    const size_t nb = Xxh3FullBlocks(n);
    uint64_t acc[8];
    Xxh3InitAcc(acc);
    for (size_t k = 0; k < nb; ++k) {
      uint64_t d[8];
      Xxh3BlockDelta(v.data() + k * kXxh3BlockLen, d);
      for (int i = 0; i < 8; ++i) acc[i] += d[i];
      Xxh3Scramble(acc);
    }
    const size_t tail = std::min(nb * kXxh3BlockLen, n - kXxh3StripeLen);
    for (size_t i = 0; i < tail; ++i) v[i] ^= 0x5a;  // clobber what Finish must not read
    EXPECT_EQ(Xxh3FinishLong(acc, v.data(), n), want) << "n=" << n;
  }
}

}  // namespace
}  // namespace lmc::hd
