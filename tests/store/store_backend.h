// Store locations for tests that run on every backend: a POSIX directory,
// a POSIX directory with the index journaled (as a RADOS store is, without
// a cluster), and a RADOS store in the single-host cluster of
// scripts/ceph-dev.sh (CEPH_CONF; tests skip, saying why, without one).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "lmc/store/rados.h"
#include "store_test_util.h"

namespace lmc::store::testing {

enum class Backend { kPosix, kJournaled, kRados };

inline std::string BackendName(Backend b) {
  switch (b) {
    case Backend::kPosix:
      return "Posix";
    case Backend::kJournaled:
      return "Journaled";
    case Backend::kRados:
      return "Rados";
  }
  return "?";
}

// Why RADOS tests cannot run here ("" when they can): CEPH_CONF must name
// the configuration of a running cluster with a pool "lmcfs".
inline const std::string& RadosUnavailable() {
  static const std::string why = [] {
    const char* conf = std::getenv("CEPH_CONF");
    if (!conf || !*conf || !std::filesystem::exists(conf))
      return std::string(
          "no Ceph cluster: CEPH_CONF is unset or names no file (eval \"$(scripts/ceph-dev.sh start)\" runs "
          "one)");
    auto env = RadosEnv::Open("rados:lmcfs/probe", RadosOptions{});
    if (!env.ok()) return "no usable Ceph cluster: " + env.status().ToString();
    return std::string();
  }();
  return why;
}

// Removes every object of a RADOS store (its namespace).
inline void RemoveRadosStore(const std::string& spec) {
  auto env = RadosEnv::Open(spec, RadosOptions{});
  if (!env.ok()) return;
  std::function<void(const std::string&)> rm = [&](const std::string& dir) {
    auto names = (*env)->ListDir(dir);
    if (!names.ok()) return;
    for (const auto& n : *names) {
      const std::string p = dir + "/" + n;
      if (!(*env)->DeleteFile(p).ok()) rm(p);
    }
  };
  rm(spec);
}

// One store for a test: where it is, and the options to open it with.
class TestStore {
 public:
  explicit TestStore(Backend b) : backend_(b) {
    static std::atomic<int> counter{0};
    if (b == Backend::kRados) {
      spec_ = "rados:lmcfs/test-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" +
              std::to_string(std::random_device{}() % 100000);
    } else {
      spec_ = dir_.store();
    }
  }
  ~TestStore() {
    if (backend_ == Backend::kRados) RemoveRadosStore(spec_);
  }
  const std::string& spec() const { return spec_; }
  Backend backend() const { return backend_; }
  // The local directory of "node" n (each node its own local index).
  std::string local(int node = 0) const { return dir_.path() + "/node" + std::to_string(node); }
  // Options for node n; env: a wrapper (FaultEnv) over BaseEnv(), or nullptr.
  StoreOptions Options(Env* env = nullptr, int node = 0) const {
    StoreOptions o = TestOptions(env);
    if (backend_ != Backend::kPosix) {
      o.journal = true;
      o.local_dir = local(node);
    }
    o.rados.lease_seconds = 4;
    return o;
  }
  // The Env a FaultEnv wraps: POSIX, or a RADOS client of this store.
  Env* BaseEnv() {
    if (backend_ != Backend::kRados) return Env::Default();
    if (!rados_) {
      auto e = RadosEnv::Open(spec_, RadosOptions{});
      EXPECT_TRUE(e.ok()) << e.status().ToString();
      if (e.ok()) rados_ = std::move(e).value();
    }
    return rados_.get();
  }

 private:
  Backend backend_;
  TempDir dir_;
  std::string spec_;
  std::unique_ptr<RadosEnv> rados_;
};

// In a test body: skips a RADOS case where no cluster is reachable.
#define LMC_SKIP_WITHOUT_CLUSTER(backend)                        \
  do {                                                           \
    if ((backend) == ::lmc::store::testing::Backend::kRados &&   \
        !::lmc::store::testing::RadosUnavailable().empty())      \
      GTEST_SKIP() << ::lmc::store::testing::RadosUnavailable(); \
  } while (0)

}  // namespace lmc::store::testing
