#include "lmc/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace lmc {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd");
  return x / 2;
}

Status Quarter(int x, int* out) {
  LMC_ASSIGN_OR_RETURN(int h, Half(x));
  LMC_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::Ok();
}

TEST(StatusTest, PropagatesErrorsAndValues) {
  int q = 0;
  EXPECT_TRUE(Quarter(8, &q).ok());
  EXPECT_EQ(q, 2);
  Status s = Quarter(6, &q);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "Invalid argument: odd");
}

TEST(StatusTest, ErrnoMapsNoSpace) {
  EXPECT_TRUE(Status::FromErrno(ENOSPC, "write pack").IsNoSpace());
  EXPECT_EQ(Status::FromErrno(EIO, "read").code(), Code::kIOError);
  EXPECT_NE(Status::FromErrno(EIO, "read pack 3").message().find("read pack 3"), std::string::npos);
}

}  // namespace
}  // namespace lmc
