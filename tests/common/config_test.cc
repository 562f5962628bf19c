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

// Mistakes that once crashed the process (a key that is not plain text) or were silently
// ignored (a section or key given twice, an empty mapping under an unknown name or under a
// key, --config naming a directory or nothing).
TEST(ConfigTest, MalformedFilesAreErrorsNotCrashesOrSilence) {
  EXPECT_THAT(Error("model:\n  path: {{ MODEL_PATH }}\n", {}),
              HasSubstr("w.yaml:2: model.path: expected a value"));
  EXPECT_THAT(Error("{{ MODEL_PATH }}: 1\n", {}), HasSubstr("w.yaml:1: keys must be plain names"));
  EXPECT_THAT(Error("? [a, b]\n: 1\n", {}), HasSubstr("w.yaml:1: keys must be plain names"));
  EXPECT_THAT(Error("engine:\n  max_slots: 8\nengine:\n  max_slots: 9\n", {}),
              HasSubstr("w.yaml:3: 'engine' is given twice (first at w.yaml:1)"));
  EXPECT_THAT(Error("engine:\n  max_slots: 8\n  max_slots: 9\n", {}),
              HasSubstr("'engine.max_slots' is given twice"));
  EXPECT_THAT(Error("not_a_section: {}\n", {}), HasSubstr("unknown key 'not_a_section'"));
  EXPECT_THAT(Error("engine:\n  not_a_key: {}\n", {}), HasSubstr("unknown key 'engine.not_a_key'"));
  EXPECT_THAT(Error("engine:\n  max_slots: {}\n", {}),
              HasSubstr("engine.max_slots: expected a value"));
  EXPECT_EQ(Error("engine: {}\nmodel:\n  path: /m\n", {}), "");  // an empty known section
  const std::string dir = ::testing::TempDir();
  auto v = Schema().Load({"--config", dir});
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("is a directory"));
  v = Schema().Load({"--config="});
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("--config: needs a file"));
}

TEST(ConfigTest, AddressesNeedAPortInRange) {
  for (const char* ok : {"0.0.0.0:50051", ":8000", "[::1]:0", "localhost:65535", "h:1"}) {
    EXPECT_TRUE(CheckHostPort("k", ok, false, 0).ok()) << ok;
  }
  EXPECT_TRUE(CheckHostPort("k", "", true, 0).ok());
  for (const char* bad : {"127.0.0.1:99999", ":65536", "host", "host:", "h:abc", "[::1]", "h:-1",
                          "h:0x10", "h:123456"}) {
    const absl::Status st = CheckHostPort("server.listen", bad, true, 0);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_THAT(std::string(st.message()), HasSubstr("server.listen")) << bad;
  }
  EXPECT_FALSE(CheckHostPort("discovery.dns", "workers:0", true, 1).ok());
  EXPECT_FALSE(CheckHostPort("router.listen", "", false, 0).ok());
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
