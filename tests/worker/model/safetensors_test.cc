#include "worker/model/safetensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace llm::model {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

// Writes a safetensors file from a header object and raw data.
void WriteRaw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>(n >> (8 * i)));
  f << header << data;
}

std::string F32Bytes(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

std::string OpenError(const std::string& dir) {
  auto store = TensorStore::Open(dir);
  EXPECT_FALSE(store.ok());
  return store.ok() ? "" : std::string(store.status().message());
}

TEST(SafetensorsTest, WritesAndReadsBack) {
  const std::string dir = llm::testing::MakeTempDir("st");
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors",
                               {{"a", DType::kF32, {2, 2}, F32Bytes({1, 2, 3, 4})},
                                {"b", DType::kF32, {3}, F32Bytes({5, 6, 7})}})
                  .ok());
  auto store = TensorStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->size(), 2u);
  const TensorView* a = (*store)->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 2}));
  float got[4];
  std::memcpy(got, a->data, 16);
  EXPECT_EQ(got[3], 4.0f);
  EXPECT_THAT(std::string((*store)->Get("zzz").status().message()), HasSubstr("'zzz'"));
}

TEST(SafetensorsTest, TruncatedFile) {
  const std::string dir = llm::testing::MakeTempDir("st");
  std::ofstream(dir + "/model.safetensors") << "abc";
  const std::string err = OpenError(dir);
  EXPECT_THAT(err, HasSubstr("model.safetensors"));
  EXPECT_THAT(err, HasSubstr("truncated"));
}

TEST(SafetensorsTest, HeaderLengthBeyondFile) {
  const std::string dir = llm::testing::MakeTempDir("st");
  std::ofstream f(dir + "/model.safetensors", std::ios::binary);
  const uint64_t huge = 1ull << 40;
  f.write(reinterpret_cast<const char*>(&huge), 8);
  f << "{}";
  f.close();
  EXPECT_THAT(OpenError(dir), HasSubstr("corrupt header"));
}

TEST(SafetensorsTest, HeaderNotJson) {
  const std::string dir = llm::testing::MakeTempDir("st");
  WriteRaw(dir + "/model.safetensors", "{\"a\": [1, 2", "");
  EXPECT_THAT(OpenError(dir), HasSubstr("corrupt header"));
}

TEST(SafetensorsTest, OffsetsPastTheEnd) {
  const std::string dir = llm::testing::MakeTempDir("st");
  WriteRaw(dir + "/model.safetensors",
           R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", F32Bytes({1, 2}));
  const std::string err = OpenError(dir);
  EXPECT_THAT(err, HasSubstr("model.safetensors"));
  EXPECT_THAT(err, HasSubstr("'w'"));
  EXPECT_THAT(err, HasSubstr("past the end"));
}

TEST(SafetensorsTest, ShapeDisagreesWithOffsets) {
  const std::string dir = llm::testing::MakeTempDir("st");
  WriteRaw(dir + "/model.safetensors",
           R"({"w": {"dtype": "BF16", "shape": [3, 3], "data_offsets": [0, 8]}})",
           F32Bytes({1, 2}));
  const std::string err = OpenError(dir);
  EXPECT_THAT(err, HasSubstr("'w'"));
  EXPECT_THAT(err, HasSubstr("[3, 3]"));
  EXPECT_THAT(err, HasSubstr("needs 18 bytes"));
}

TEST(SafetensorsTest, UnknownDtype) {
  const std::string dir = llm::testing::MakeTempDir("st");
  WriteRaw(dir + "/model.safetensors",
           R"({"w": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 8]}})", F32Bytes({1, 2}));
  const std::string err = OpenError(dir);
  EXPECT_THAT(err, HasSubstr("'w'"));
  EXPECT_THAT(err, HasSubstr("unknown dtype 'Q4_K'"));
}

TEST(SafetensorsTest, OverlappingTensors) {
  const std::string dir = llm::testing::MakeTempDir("st");
  WriteRaw(dir + "/model.safetensors",
           R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
               "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
           F32Bytes({1, 2, 3}));
  EXPECT_THAT(OpenError(dir), HasSubstr("overlaps"));
}

TEST(SafetensorsTest, MissingCheckpoint) {
  const std::string dir = llm::testing::MakeTempDir("st");
  EXPECT_THAT(OpenError(dir), HasSubstr("no model.safetensors"));
}

TEST(SafetensorsTest, ShardedIndex) {
  const std::string dir = llm::testing::MakeTempDir("st");
  ASSERT_TRUE(
      WriteSafetensors(dir + "/part-1.safetensors", {{"a", DType::kF32, {1}, F32Bytes({1})}}).ok());
  ASSERT_TRUE(
      WriteSafetensors(dir + "/part-2.safetensors", {{"b", DType::kF32, {1}, F32Bytes({2})}}).ok());
  json index = {{"metadata", {{"total_size", 8}}},
                {"weight_map", {{"a", "part-1.safetensors"}, {"b", "part-2.safetensors"}}}};
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  auto store = TensorStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_NE((*store)->Find("a"), nullptr);
  EXPECT_NE((*store)->Find("b"), nullptr);
  EXPECT_THAT(*(*store)->Find("b")->file, HasSubstr("part-2"));

  // The index names a tensor its shard does not hold.
  index["weight_map"]["c"] = "part-2.safetensors";
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  const std::string err = OpenError(dir);
  EXPECT_THAT(err, HasSubstr("index.json"));
  EXPECT_THAT(err, HasSubstr("'c'"));

  // A shard path that escapes the directory.
  index["weight_map"] = {{"a", "../part-1.safetensors"}};
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  EXPECT_THAT(OpenError(dir), HasSubstr("bad file"));

  // A shard that is missing.
  index["weight_map"] = {{"a", "part-9.safetensors"}};
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  EXPECT_THAT(OpenError(dir), HasSubstr("part-9.safetensors"));
}

TEST(SafetensorsTest, TruncatedRealCheckpointNamesFileAndTensor) {
  LLM_REQUIRE_SHARED("models/tinystories-656k/model.safetensors");
  const std::string dir = llm::testing::MakeTempDir("st");
  const std::string src = llm::testing::SharedPath("models/tinystories-656k/model.safetensors");
  std::ifstream in(src, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(dir + "/model.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  const std::string err = OpenError(dir);
  EXPECT_THAT(err, HasSubstr(dir + "/model.safetensors"));
  EXPECT_THAT(err, HasSubstr("tensor 'model."));
  EXPECT_THAT(err, HasSubstr("past the end"));
}

}  // namespace
}  // namespace llm::model
