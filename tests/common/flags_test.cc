#include "common/flags.h"

#include "gtest/gtest.h"

namespace llm {
namespace {

TEST(FlagsTest, ParsesValuesBoolsAndRepeats) {
  FlagSet f;
  f.Value("model", "m").Value("n", "n", "5").Value("stop", "s").Bool("ids", "i");
  ASSERT_TRUE(f.Parse({"--model", "dir", "--stop=a", "--ids", "--stop", "b", "pos"}).ok());
  EXPECT_EQ(f.GetString("model"), "dir");
  EXPECT_EQ(*f.GetInt("n"), 5);
  EXPECT_TRUE(f.GetBool("ids"));
  EXPECT_EQ(f.GetAll("stop"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f.positional(), (std::vector<std::string>{"pos"}));
}

TEST(FlagsTest, ErrorsNameTheFlag) {
  FlagSet f;
  f.Value("n", "n");
  auto st = f.Parse({"--bogus", "1"});
  EXPECT_NE(st.message().find("--bogus"), std::string::npos);
  FlagSet g;
  g.Value("n", "n");
  st = g.Parse({"--n"});
  EXPECT_NE(st.message().find("--n"), std::string::npos);
  FlagSet h;
  h.Value("n", "n");
  ASSERT_TRUE(h.Parse({"--n", "x"}).ok());
  EXPECT_NE(h.GetInt("n").status().message().find("--n"), std::string::npos);
  EXPECT_NE(h.Require({"m"}).message().find("--m"), std::string::npos);
}

}  // namespace
}  // namespace llm
