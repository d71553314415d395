// The text of a store's CONFIG file, for the store tests that check it.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "format.h"
#include "lmc/store/env.h"

namespace lmc::store::testing {

// "" (and a test failure) if it cannot be read.
inline std::string ConfigOf(const std::string& store) {
  auto text = ReadFileToString(Env::Default(), store + "/" + fmt::kConfigName);
  EXPECT_TRUE(text.ok());
  return text.ok() ? *text : "";
}

}  // namespace lmc::store::testing
