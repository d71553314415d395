// PoolSpaceOf: what `df` on a mount of a store in RADOS shows, from the
// monitors' answers to `df` and `osd pool get-quota` (JSON as Ceph 16
// writes it). Unit tests: no cluster needed; RadosFullPool.* checks the
// same against a real one.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "lmc/store/rados.h"

namespace lmc::store {
namespace {

// `ceph df -f json` with pools NAME (stored, max_avail) and, beside it, a
// pool whose name NAME begins ("NAME2").
std::string Df(const std::string& name, uint64_t stored, uint64_t max_avail) {
  auto pool = [](const std::string& n, int id, uint64_t s, uint64_t a) {
    return R"({"name":")" + n + R"(","id":)" + std::to_string(id) + R"(,"stats":{"stored":)" +
           std::to_string(s) + R"(,"objects":19,"kb_used":)" + std::to_string(3 * s / 1024) +
           R"(,"bytes_used":)" + std::to_string(3 * s) + R"(,"percent_used":0.0057,"max_avail":)" +
           std::to_string(a) + "}}";
  };
  return R"({"stats":{"total_bytes":17179869184,"total_avail_bytes":16875548672,"total_used_bytes":304320512,)"
         R"("num_osds":1},"stats_by_class":{},"pools":[)" +
         pool(name + "2", 1, 5000000000, 999) + "," + pool(name, 2, stored, max_avail) + "]}";
}

std::string Quota(const std::string& name, uint64_t max_bytes, uint64_t current) {
  return R"({"pool_name":")" + name +
         R"(","pool_id":2,"quota_max_objects":0,"current_num_objects":19,)"
         R"("quota_max_bytes":)" +
         std::to_string(max_bytes) + R"(,"current_num_bytes":)" + std::to_string(current) + "}";
}

TEST(PoolSpace, WithoutAQuotaThePoolHoldsWhatItStoresAndWhatItCanStillTake) {
  auto s = PoolSpaceOf(Df("ckpt", 300 << 20, 16016555008), Quota("ckpt", 0, 300 << 20), "ckpt");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->avail, 16016555008u);  // max_avail: replicas and full ratio already counted
  EXPECT_EQ(s->total, 16016555008u + (300u << 20));
}

TEST(PoolSpace, AQuotaBelowWhatTheClusterCouldTakeBoundsBoth) {
  auto s = PoolSpaceOf(Df("ckpt", 20 << 20, 16016555008), Quota("ckpt", 64 << 20, 20 << 20), "ckpt");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->total, 64u << 20);
  EXPECT_EQ(s->avail, 44u << 20);
  // Past the quota (it is enforced a few seconds late): nothing left.
  s = PoolSpaceOf(Df("ckpt", 88 << 20, 16016555008), Quota("ckpt", 64 << 20, 88 << 20), "ckpt");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->avail, 0u);
  EXPECT_EQ(s->total, 88u << 20);
  // A quota above what the cluster can take leaves the cluster's figure.
  s = PoolSpaceOf(Df("ckpt", 1 << 20, 50 << 20), Quota("ckpt", 1 << 30, 1 << 20), "ckpt");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->avail, 50u << 20);
}

TEST(PoolSpace, OnlyThePoolOfThatNameCounts) {
  auto s = PoolSpaceOf(Df("ckpt", 7, 100), Quota("ckpt", 0, 7), "ckpt");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->total, 107u);  // not ckpt2's 5 GB
  EXPECT_TRUE(PoolSpaceOf(Df("ckpt", 7, 100), Quota("ckp", 0, 0), "ckp").status().IsNotFound());
}

TEST(PoolSpace, UnknownWithoutAManagersFiguresUnlessAQuotaSaysIt) {
  const std::string no_manager =
      R"({"stats":{"total_bytes":0,"total_avail_bytes":0,"total_used_bytes":0,"num_osds":0},)"
      R"("stats_by_class":{},"pools":[]})";
  auto s = PoolSpaceOf(no_manager, Quota("ckpt", 0, 0), "ckpt");
  ASSERT_TRUE(s.status().IsNotFound());
  EXPECT_NE(s.status().ToString().find("manager"), std::string::npos) << s.status().ToString();
  s = PoolSpaceOf(no_manager, Quota("ckpt", 64 << 20, 0), "ckpt");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->total, 64u << 20);
  EXPECT_EQ(s->avail, 64u << 20);
}

TEST(PoolSpace, OlderCephsBytesUsedStandsForStored) {
  const std::string df = R"({"pools":[{"name":"ckpt","id":1,"stats":{"kb_used":2,"bytes_used":2048,)"
                         R"("max_avail":1000,"objects":1}}]})";
  auto s = PoolSpaceOf(df, Quota("ckpt", 0, 0), "ckpt");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->total, 3048u);
}

TEST(PoolSpace, AnswersThatAreNotJsonAreCorruption) {
  EXPECT_TRUE(PoolSpaceOf("Error EINVAL: x", Quota("ckpt", 0, 0), "ckpt").status().IsCorruption());
  EXPECT_TRUE(PoolSpaceOf(Df("ckpt", 1, 2), "", "ckpt").status().IsCorruption());
  EXPECT_TRUE(PoolSpaceOf("[1,2]", Quota("ckpt", 0, 0), "ckpt").status().IsCorruption());
}

}  // namespace
}  // namespace lmc::store
