// The lmc tool, run in-process (LmcMain) on real files in a temp directory.
#include "cli.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "../fake_gpu_codec.h"
#include "lmc/gpu.h"
#include "test_util.h"

namespace lmc {
namespace {

namespace fs = std::filesystem;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lmc_cli_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string P(const std::string& name) { return (dir_ / name).string(); }
  static void Write(const std::string& p, const std::vector<uint8_t>& d) {
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(d.data()), d.size());
  }
  static std::vector<uint8_t> Read(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
  }
  fs::path dir_;
};

TEST_F(CliTest, CompressDecompressRoundTrip) {
  auto data = testing::Bf16Weights(400000, 5);
  Write(P("w.bin"), data);
  EXPECT_EQ(cli::LmcMain({"compress", "-q", P("w.bin")}), 0);
  ASSERT_TRUE(fs::exists(P("w.bin.lmc")));
  EXPECT_LT(fs::file_size(P("w.bin.lmc")), data.size());
  // Refuses to overwrite without -f, like gzip and zstd.
  EXPECT_EQ(cli::LmcMain({"decompress", "-q", P("w.bin.lmc")}), 1);
  EXPECT_EQ(cli::LmcMain({"decompress", "-q", "-f", P("w.bin.lmc")}), 0);
  EXPECT_EQ(Read(P("w.bin")), data);
  EXPECT_EQ(cli::LmcMain({"decompress", "-q", P("w.bin.lmc"), P("out.bin")}), 0);
  EXPECT_EQ(Read(P("out.bin")), data);
}

// The speed a run prints to a file is also given without the final fsync
// (gzip and zstd do not sync, so that is the figure that compares).
TEST_F(CliTest, SpeedIsAlsoGivenBeforeTheFinalFsync) {
  Write(P("w.bin"), testing::Bf16Weights(200000, 7));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::LmcMain({"compress", P("w.bin")}), 0);
  EXPECT_EQ(cli::LmcMain({"decompress", P("w.bin.lmc"), P("back.bin")}), 0);
  const std::string err = ::testing::internal::GetCapturedStderr();
  size_t at = 0, runs = 0;
  while ((at = err.find(" MB/s before the final fsync)", at)) != std::string::npos) ++runs, ++at;
  EXPECT_EQ(runs, 2u) << err;
}

TEST_F(CliTest, DamagedInputLeavesNoOutput) {
  auto data = testing::Bf16Weights(100000, 6);
  Write(P("w.bin"), data);
  ASSERT_EQ(cli::LmcMain({"compress", "-q", P("w.bin"), P("w.lmc")}), 0);
  auto c = Read(P("w.lmc"));
  c[c.size() / 2] ^= 0xff;
  Write(P("bad.lmc"), c);
  EXPECT_EQ(cli::LmcMain({"decompress", "-q", P("bad.lmc"), P("bad.out")}), 1);
  EXPECT_FALSE(fs::exists(P("bad.out")));
  for (auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "temporary file left behind";
}

TEST_F(CliTest, UsageErrorsAndMissingFiles) {
  EXPECT_EQ(cli::LmcMain({}), 2);
  EXPECT_EQ(cli::LmcMain({"frobnicate"}), 2);
  EXPECT_EQ(cli::LmcMain({"compress", P("does-not-exist")}), 1);
  EXPECT_EQ(cli::LmcMain({"decompress", P("no-suffix")}), 1);
  EXPECT_EQ(cli::LmcMain({"--help"}), 0);
}

TEST_F(CliTest, InfoAndBenchRun) {
  auto data = testing::Bf16Weights(50000, 7);
  Write(P("w.bin"), data);
  EXPECT_EQ(cli::LmcMain({"info", P("w.bin")}), 0);
  ASSERT_EQ(cli::LmcMain({"compress", "-q", P("w.bin")}), 0);
  EXPECT_EQ(cli::LmcMain({"info", P("w.bin.lmc")}), 0);
  EXPECT_EQ(cli::LmcMain({"bench", "-r", "1", "--no-zstd19", "--json", P("w.bin")}), 0);
}

// --gpu: without a usable GPU codec, a clear message, exit code 2 and no
// output; with one (a fake here), batches on it and the same files.
TEST_F(CliTest, GpuFlag) {
  auto data = testing::Bf16Weights(400000, 9);
  Write(P("w.bin"), data);
  if (!GpuCodec::Open().ok()) {
    for (const char* cmd : {"compress", "decompress", "bench"}) {
      ::testing::internal::CaptureStderr();
      EXPECT_EQ(cli::LmcMain({cmd, "--gpu", P("w.bin")}), 2) << cmd;
      const std::string err = ::testing::internal::GetCapturedStderr();
      EXPECT_NE(err.find("lmc: --gpu: the GPU codec cannot be used ("), std::string::npos) << err;
      EXPECT_NE(err.find("run without --gpu to use the CPU codec"), std::string::npos) << err;
    }
    EXPECT_FALSE(fs::exists(P("w.bin.lmc")));
  }
  int opened = 0;
  cli::GpuOpenFn open_fake = [&]() -> Result<std::unique_ptr<GpuCodec>> {
    opened++;
    return std::unique_ptr<GpuCodec>(std::make_unique<testing::FakeGpuCodec>());
  };
  ASSERT_EQ(cli::LmcMain({"compress", "-q", "--gpu", "-c", "65536", P("w.bin"), P("g.lmc")}, open_fake), 0);
  ASSERT_EQ(cli::LmcMain({"compress", "-q", "-c", "65536", P("w.bin"), P("c.lmc")}), 0);
  EXPECT_EQ(opened, 1);
  // Until the GPU profile lands, both write the same bytes; either way the
  // CPU reads what the GPU wrote and the other way round.
  ASSERT_EQ(cli::LmcMain({"decompress", "-q", P("g.lmc"), P("g.out")}), 0);
  EXPECT_EQ(Read(P("g.out")), data);
  ASSERT_EQ(cli::LmcMain({"decompress", "-q", "--gpu", P("c.lmc"), P("c.out")}, open_fake), 0);
  EXPECT_EQ(Read(P("c.out")), data);
  EXPECT_EQ(cli::LmcMain({"bench", "-r", "1", "--no-zstd19", "--gpu", P("w.bin")}, open_fake), 0);
  EXPECT_EQ(opened, 3);
  // info does not take --gpu.
  EXPECT_EQ(cli::LmcMain({"info", "--gpu", P("w.bin")}, open_fake), 2);
}

}  // namespace
}  // namespace lmc
