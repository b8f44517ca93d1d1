#include "base/base64.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace gantry {
namespace {

TEST(Base64, EncodesAsRfc4648AndDecodesBackEveryByte) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("a\nb\n"), "YQpiCg==");
  std::mt19937 rng(7);
  for (size_t size : {0u, 1u, 2u, 3u, 4u, 5u, 64u, 1000u, 65537u}) {
    std::string bytes(size, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    const std::optional<std::string> back = Base64Decode(Base64Encode(bytes));
    ASSERT_TRUE(back) << size;
    EXPECT_EQ(*back, bytes) << size;
  }
  EXPECT_EQ(Base64Decode("Zm9v\nYmFy\n"), "foobar") << "line breaks skipped, as in PEM";
}

TEST(Base64, RefusesWhatIsNotBase64) {
  // '=' is padding only: one or two at the end (OpenSSL's decoder alone reads it as zero
  // bits anywhere).
  for (const char* bad : {"Zg=", "Z", "Zm9v!", "****", "Zg==Zg=", "\xff\xfe\xfd\xfc", "Zg==Zg==",
                          "A=AA", "====", "A===", "Zm9v====", "Zm9v----", "\tZm9", "Zm9v\t\t\t\t"})
    EXPECT_FALSE(Base64Decode(bad)) << bad;
}

}  // namespace
}  // namespace gantry
