// `lmc bound`: the incremental-snapshot size bound (tools/lmc/bound.cc).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "cli.h"

namespace lmc::cli {
namespace {

// Runs `lmc bound args...`; returns the summary row's fields.
std::vector<std::string> Summary(const std::vector<std::string>& args, int* rc) {
  std::vector<std::string> a = {"bound"};
  a.insert(a.end(), args.begin(), args.end());
  ::testing::internal::CaptureStdout();
  *rc = LmcMain(a);
  std::string out = ::testing::internal::GetCapturedStdout();
  std::string last;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) last = line;
  std::vector<std::string> f;
  std::istringstream row(last);
  for (std::string x; std::getline(row, x, '\t');) f.push_back(x);
  return f;
}

const std::string kModel = std::string(LMC_TEST_DATA_DIR) + "/model.safetensors";

TEST(BoundTest, StandaloneOnlyWithoutPredecessor) {
  int rc = -1;
  auto f = Summary({kModel}, &rc);
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(f.size(), 7u);
  EXPECT_EQ(f[3], "0");   // matched
  EXPECT_EQ(f[5], f[6]);  // min bound = standalone bound
  EXPECT_GT(std::stod(f[5]), 0.0);
  EXPECT_LT(std::stod(f[5]), std::stod(f[1]));  // below logical size
}

TEST(BoundTest, IdenticalPredecessorBoundsTheTensorsAtZero) {
  int rc = -1;
  auto alone = Summary({kModel}, &rc);
  ASSERT_EQ(rc, 0);
  auto f = Summary({kModel, kModel}, &rc);
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(f.size(), 7u);
  EXPECT_EQ(f[3], f[2]);            // every chunk has a predecessor
  EXPECT_EQ(std::stod(f[6]), 0.0);  // XOR with itself: all zeros
  EXPECT_EQ(f[5], alone[5]);
}

TEST(BoundTest, MissingFileFails) {
  int rc = -1;
  Summary({"/nonexistent/x.safetensors"}, &rc);
  EXPECT_EQ(rc, 1);
}

}  // namespace
}  // namespace lmc::cli
