// RocksDB's file system over the store's Env (StoreOptions::index_on_env):
// every file RocksDB writes, syncs, renames or deletes goes through the same
// lmc::store::Env as the pack files, so that the crash tests' fault Env
// counts RocksDB's operations among its crash points and drops what RocksDB
// had not synced at a simulated power loss (issue 16, "Fault runs", 2).
// Reads, locks and the info log go to the owner-only file system on the
// same paths. Not used by the mount: it serves tests.
#pragma once

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <memory>

#include "lmc/store/env.h"

namespace lmc::store {

// A RocksDB Env whose file system writes through `env` (not owned; must
// outlive the returned Env).
std::unique_ptr<rocksdb::Env> NewRocksEnvOverStoreEnv(Env* env);

}  // namespace lmc::store
