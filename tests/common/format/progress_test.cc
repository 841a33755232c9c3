#include "common/format/progress.h"

#include <gtest/gtest.h>

#include <cmath>

namespace nightshift::format {
namespace {

TEST(ProgressTest, RoundTrip) {
  ProgressRecord r;
  r.event = "step";
  r.numbers["step"] = 120;
  r.numbers["loss"] = 0.123456789;
  r.numbers["tokens_per_second"] = 6202.5;
  r.numbers["bad"] = std::nan("");
  r.strings["path"] = "/tmp/a \"b\"\n\\c";
  std::string line = FormatProgressLine(r);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  ProgressRecord back;
  ASSERT_EQ(ParseProgressLine(line, &back), "");
  EXPECT_EQ(back.event, "step");
  EXPECT_EQ(back.Number("step"), 120);
  EXPECT_NEAR(back.Number("loss"), 0.123456789, 1e-9);
  EXPECT_EQ(back.Number("tokens_per_second"), 6202.5);
  EXPECT_TRUE(std::isnan(back.Number("bad")));
  EXPECT_EQ(back.String("path"), "/tmp/a \"b\"\n\\c");
}

TEST(ProgressTest, BadLinesAreErrorsNotCrashes) {
  ProgressRecord r;
  for (const char* bad : {"", "{", "}", "{\"event\"", "{\"event\":}", "{\"step\":1}", "[1,2]",
                          "{\"event\":\"x\",\"a\":1e}", "{\"event\":\"x\"} trailing",
                          "{\"event\":\"x\",\"s\":\"unterminated}", "{\"event\":\"\\u12\"}"}) {
    EXPECT_NE(ParseProgressLine(bad, &r), "") << bad;
  }
  EXPECT_EQ(ParseProgressLine(" {\"event\" : \"eval\" , \"val_accuracy\" : 0.97 } ", &r), "");
  EXPECT_EQ(r.Number("val_accuracy"), 0.97);
}

}  // namespace
}  // namespace nightshift::format
