// The POSIX Env's pack appends (File::AppendV): large appends go through
// O_DIRECT with a staging buffer (aligned blocks, the last partial block
// carried or read back, zero padding cut off), small ones through
// pwritev. Either way the file must hold exactly the concatenation.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "lmc/store/env.h"

namespace lmc::store {
namespace {

class EnvPosix : public ::testing::Test {
 protected:
  void SetUp() override {
    // On the disk (/tmp may be tmpfs): O_DIRECT is the point.
    dir_ = "/var/tmp/lmc_env_" + std::to_string(getpid());
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "pack").string();
    auto f = Env::Default()->OpenFile(path_, Env::OpenMode::kCreate);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    file_ = std::move(f).value();
  }
  void TearDown() override {
    file_.reset();
    std::filesystem::remove_all(dir_);
  }
  // Appends `sizes` pieces of random bytes to the file and to the model.
  void AppendPieces(const std::vector<size_t>& sizes) {
    std::vector<std::string> bufs;
    std::vector<std::span<const uint8_t>> pieces;
    for (size_t n : sizes) {
      std::string b(n, '\0');
      for (auto& c : b) c = static_cast<char>(rng_());
      bufs.push_back(std::move(b));
    }
    for (const auto& b : bufs) {
      pieces.emplace_back(reinterpret_cast<const uint8_t*>(b.data()), b.size());
      model_ += b;
    }
    Status st = file_->AppendV(pieces);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(file_->Size(), model_.size());
  }
  void ExpectFileIsModel() {
    struct stat st;
    ASSERT_EQ(::stat(path_.c_str(), &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), model_.size());  // no padding left
    std::string got(model_.size(), '\0');
    auto r = file_->ReadAt(0, got.size(), reinterpret_cast<uint8_t*>(got.data()));
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(*r, model_.size());
    EXPECT_TRUE(got == model_);
  }

  std::filesystem::path dir_;
  std::string path_;
  std::unique_ptr<File> file_;
  std::string model_;
  std::mt19937 rng_{5};
};

TEST_F(EnvPosix, AppendVWritesExactlyTheConcatenation) {
  ASSERT_TRUE(file_->Append(reinterpret_cast<const uint8_t*>("PACKHDR!"), 8).ok());  // unaligned start
  model_ = "PACKHDR!";
  AppendPieces({56, 300000, 0, 12345});                     // direct, from an unaligned offset
  AppendPieces({1000, 2000});                               // small: buffered
  AppendPieces({(9 << 20) + 17, 64, 0, (3 << 20) + 4093});  // direct, over the staging size
  AppendPieces({512 << 10});                                // direct, right after a direct one
  ExpectFileIsModel();
  // Cut back (a rolled-back commit) and append again over the cut.
  ASSERT_TRUE(file_->Truncate(model_.size() - 777).ok());
  model_.resize(model_.size() - 777);
  AppendPieces({400000, 3});
  ExpectFileIsModel();
  // Many pieces (more than IOV_MAX) on both paths.
  AppendPieces(std::vector<size_t>(1500, 100));
  AppendPieces(std::vector<size_t>(1500, 300));
  ExpectFileIsModel();
}

}  // namespace
}  // namespace lmc::store
