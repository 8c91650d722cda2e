// DType names, sizes and the dtype flag parser.
#include "dptrain/comm/dtype.hpp"

#include <gtest/gtest.h>

#include "dptrain/core/error.hpp"

namespace dptrain {
namespace {

TEST(CommDType, NamesSizesAndParsing) {
  EXPECT_EQ(element_size(DType::bf16), 2u);
  EXPECT_EQ(element_size(DType::f32), 4u);
  EXPECT_EQ(dtype_name(DType::bf16), "bf16");
  EXPECT_EQ(dtype_name(DType::f32), "fp32");
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp32"), DType::f32);
  try {
    parse_dtype("fp16", "-d");
    FAIL() << "no UserError";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "-d: unknown dtype 'fp16' (expected bf16 or fp32)");
  }
}

}  // namespace
}  // namespace dptrain
