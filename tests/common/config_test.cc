#include "common/config/config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llm::config {
namespace {

using ::testing::HasSubstr;

ConfigSchema Schema() {
  ConfigSchema s;
  s.RequiredString("model.path", "checkpoint")
      .Int("engine.max_slots", 32, 1, 4096, "slots")
      .Double("server.grace", 30, 0, 100, "grace")
      .Bool("log.requests", false, "log prompts")
      .String("server.listen", "0.0.0.0:1", "address");
  return s;
}

std::string Error(const std::string& yaml, const std::vector<std::string>& args) {
  auto v = Schema().LoadText(yaml, "w.yaml", args);
  return v.ok() ? "" : std::string(v.status().message());
}

TEST(ConfigTest, YamlThenFlags) {
  auto v =
      Schema().LoadText("model:\n  path: /m\nengine:\n  max_slots: 8\nlog:\n  requests: true\n",
                        "w.yaml", {"--engine.max_slots", "16", "--server.grace=2.5"});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->String("model.path"), "/m");
  EXPECT_EQ(v->Int("engine.max_slots"), 16);
  EXPECT_EQ(v->Source("engine.max_slots"), "flag");
  EXPECT_EQ(v->Source("model.path"), "w.yaml:2");
  EXPECT_DOUBLE_EQ(v->Double("server.grace"), 2.5);
  EXPECT_TRUE(v->Bool("log.requests"));
  EXPECT_EQ(v->String("server.listen"), "0.0.0.0:1");
}

TEST(ConfigTest, ErrorsNameTheKeyAndWhere) {
  EXPECT_THAT(Error("", {}), HasSubstr("model.path: required"));
  EXPECT_THAT(Error("model:\n  path: /m\n  paht: /x\n", {}),
              HasSubstr("w.yaml:3: unknown key 'model.paht'"));
  EXPECT_THAT(Error("model: {path: /m}\nengine:\n  max_slots: lots\n", {}),
              HasSubstr("w.yaml:3: engine.max_slots: 'lots' is not an integer"));
  EXPECT_THAT(Error("model: {path: /m}\n", {"--engine.max_slots", "0"}),
              HasSubstr("flag --engine.max_slots: engine.max_slots: '0' is outside [1, 4096]"));
  EXPECT_THAT(Error("model: {path: /m}\n", {"--log.requests=maybe"}), HasSubstr("true or false"));
  EXPECT_THAT(Error("model: {path: /m}\n", {"--nope", "1"}), HasSubstr("unknown key 'nope'"));
  EXPECT_THAT(Error("model: [1, 2\n", {}), HasSubstr("w.yaml:"));
  EXPECT_THAT(Error("- a\n- b\n", {}), HasSubstr("mapping"));
  EXPECT_THAT(Error("model:\n  path: [1, 2]\n", {}), HasSubstr("model.path: expected a value"));
}

TEST(ConfigTest, DefaultsYamlLoadsBackToTheDefaults) {
  const std::string yaml = Schema().DefaultsYaml("/models/x");
  auto v = Schema().LoadText(yaml, "defaults", {});
  ASSERT_TRUE(v.ok()) << v.status() << "\n" << yaml;
  EXPECT_EQ(v->String("model.path"), "/models/x");
  EXPECT_EQ(v->Int("engine.max_slots"), 32);
  EXPECT_FALSE(v->Bool("log.requests"));
}

}  // namespace
}  // namespace llm::config
