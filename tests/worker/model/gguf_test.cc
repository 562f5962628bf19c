#include "worker/model/gguf.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "worker/model/dtype.h"
#include "worker/model/gguf_quant.h"

namespace llm::model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

uint32_t Id(GgufType t) { return static_cast<uint32_t>(t); }

std::string F32Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

template <typename T>
void Poke(std::string* bytes, size_t pos, T v) {
  ASSERT_LE(pos + sizeof(T), bytes->size());
  std::memcpy(bytes->data() + pos, &v, sizeof(T));
}

void PutF16(std::string* block, size_t pos, float v) { Poke(block, pos, F32ToF16(v)); }

// Dequantises whole blocks of `type`.
std::vector<float> Dequant(GgufType type, const std::string& blocks) {
  const int64_t count =
      static_cast<int64_t>(blocks.size()) / GgufTypeSize(Id(type)) * GgufBlockSize(Id(type));
  std::vector<float> out(static_cast<size_t>(count));
  const absl::Status s = DequantizeGguf(Id(type), reinterpret_cast<const std::byte*>(blocks.data()),
                                        count, out.data());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// ---- Writing and reading back ------------------------------------------------------------------

std::vector<std::pair<std::string, GgufValue>> SampleMetadata() {
  return {
      {"general.architecture", GgufValue::String("llama")},
      {"general.alignment", GgufValue::Uint32(64)},
      {"llama.block_count", GgufValue::Uint32(30)},
      {"test.i8", GgufValue::Int8(-5)},
      {"test.u16", GgufValue::Uint16(65535)},
      {"test.i64", GgufValue::Int64(-(int64_t{1} << 40))},
      {"test.u64_big", GgufValue::Uint64(~uint64_t{0})},
      {"test.f32", GgufValue::Float32(0.1f)},
      {"test.f64", GgufValue::Float64(1e-300)},
      {"test.bool", GgufValue::Bool(true)},
      {"tokenizer.ggml.tokens",
       GgufValue::Array(GgufValueType::kString, {GgufValue::String("<s>"), GgufValue::String(""),
                                                 GgufValue::String("h\xC3\xA9llo")})},
      {"test.i32s",
       GgufValue::Array(GgufValueType::kInt32, {GgufValue::Int32(-1), GgufValue::Int32(7)})},
      {"test.f32s", GgufValue::Array(GgufValueType::kFloat32,
                                     {GgufValue::Float32(1.5f), GgufValue::Float32(-2.0f)})},
      {"test.nested",
       GgufValue::Array(GgufValueType::kArray,
                        {GgufValue::Array(GgufValueType::kUint8, {GgufValue::Uint8(1)}),
                         GgufValue::Array(GgufValueType::kUint8, {})})},
  };
}

std::string Q8_0Blocks() {
  std::string b(2 * 34, '\0');
  for (int k = 0; k < 2; ++k) {
    PutF16(&b, 34 * k, 0.5f * static_cast<float>(k + 1));
    for (int j = 0; j < 32; ++j) b[34 * k + 2 + j] = static_cast<char>(j - 16);
  }
  return b;
}

std::vector<GgufTensorData> SampleTensors() {
  std::string f16(8, '\0');
  const float halves[] = {1.0f, -2.5f, 65504.0f, 0.0f};
  for (int i = 0; i < 4; ++i) PutF16(&f16, 2 * i, halves[i]);
  return {
      {"a.f32", Id(GgufType::kF32), {3, 2}, F32Bytes({1, 2, 3, 4, 5, 6})},
      {"b.f16", Id(GgufType::kF16), {4}, f16},
      {"c.q8_0", Id(GgufType::kQ8_0), {32, 2}, Q8_0Blocks()},
  };
}

TEST(GgufFileTest, WritesAndReadsBack) {
  const std::string path = llm::testing::MakeTempDir("gguf") + "/m.gguf";
  ASSERT_TRUE(WriteGguf(path, SampleMetadata(), SampleTensors()).ok());
  auto opened = GgufFile::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const GgufFile& f = **opened;
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  ASSERT_EQ(f.Keys().size(), SampleMetadata().size());
  for (const auto& [key, value] : SampleMetadata()) {
    ASSERT_NE(f.Find(key), nullptr) << key;
    EXPECT_EQ(*f.Find(key), value) << key;
  }
  EXPECT_EQ(f.Keys().front(), "general.architecture");
  EXPECT_EQ(f.Find("absent"), nullptr);

  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetInt("llama.block_count"), 30);
  EXPECT_EQ(*f.GetInt("test.i8"), -5);
  EXPECT_EQ(*f.GetInt("test.u16"), 65535);
  EXPECT_EQ(*f.GetInt("test.i64"), -(int64_t{1} << 40));
  EXPECT_EQ(*f.GetFloat("test.f32"), static_cast<double>(0.1f));
  EXPECT_EQ(*f.GetFloat("test.f64"), 1e-300);
  EXPECT_TRUE(*f.GetBool("test.bool"));
  EXPECT_THAT(*f.GetStringArray("tokenizer.ggml.tokens"), ElementsAre("<s>", "", "h\xC3\xA9llo"));
  EXPECT_THAT(*f.GetIntArray("test.i32s"), ElementsAre(-1, 7));
  EXPECT_THAT(*f.GetFloatArray("test.f32s"), ElementsAre(1.5, -2.0));
  EXPECT_EQ(f.Find("test.nested")->elements()[0].elements()[0].AsInt(), 1);
}

TEST(GgufFileTest, TensorsAndDequantisation) {
  const std::string path = llm::testing::MakeTempDir("gguf") + "/m.gguf";
  ASSERT_TRUE(WriteGguf(path, SampleMetadata(), SampleTensors()).ok());
  auto opened = GgufFile::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const GgufFile& f = **opened;
  ASSERT_EQ(f.tensors().size(), 3u);
  const GgufTensor* a = f.FindTensor("a.f32");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->type, Id(GgufType::kF32));
  EXPECT_THAT(a->dims, ElementsAre(3, 2));
  EXPECT_THAT(a->RowMajorShape(), ElementsAre(2, 3));
  EXPECT_EQ(a->num_elements(), 6);
  EXPECT_EQ(a->num_bytes, 24u);
  EXPECT_EQ(f.FindTensor("zzz"), nullptr);
  for (const GgufTensor& t : f.tensors()) {
    EXPECT_EQ((t.data - f.tensors()[0].data) % 64, 0) << t.name << " is not 64-byte aligned";
  }

  std::string bytes;
  ASSERT_TRUE(DequantizeTensor(*a, DType::kF32, &bytes).ok());
  EXPECT_EQ(bytes, F32Bytes({1, 2, 3, 4, 5, 6}));
  ASSERT_TRUE(DequantizeTensor(*f.FindTensor("b.f16"), DType::kF32, &bytes).ok());
  EXPECT_EQ(bytes, F32Bytes({1.0f, -2.5f, 65504.0f, 0.0f}));

  const GgufTensor* q = f.FindTensor("c.q8_0");
  ASSERT_TRUE(DequantizeTensor(*q, DType::kF32, &bytes).ok());
  ASSERT_EQ(bytes.size(), 64u * 4);
  std::vector<float> got(64);
  std::memcpy(got.data(), bytes.data(), bytes.size());
  EXPECT_EQ(got[0], -8.0f);   // (0 - 16) * 0.5
  EXPECT_EQ(got[63], 15.0f);  // (31 - 16) * 1.0
  ASSERT_TRUE(DequantizeTensor(*q, DType::kBF16, &bytes).ok());
  ASSERT_EQ(bytes.size(), 64u * 2);
  for (int i = 0; i < 64; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    EXPECT_EQ(Bf16ToF32(h), got[static_cast<size_t>(i)]) << i;  // all exact in bf16
  }
  EXPECT_FALSE(DequantizeTensor(*q, DType::kF16, &bytes).ok());
}

TEST(GgufFileTest, GetterErrorsNameFileAndKey) {
  const std::string path = llm::testing::MakeTempDir("gguf") + "/m.gguf";
  ASSERT_TRUE(WriteGguf(path, SampleMetadata(), {}).ok());
  auto opened = GgufFile::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const GgufFile& f = **opened;
  EXPECT_TRUE(f.tensors().empty());
  const auto absent = f.GetInt("llama.nope");
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(absent.status().message(), HasSubstr(path));
  EXPECT_THAT(absent.status().message(), HasSubstr("'llama.nope'"));
  const auto wrong = f.GetInt("general.architecture");
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(), HasSubstr(path));
  EXPECT_THAT(wrong.status().message(), HasSubstr("'general.architecture' is STRING"));
  EXPECT_THAT(f.GetInt("test.u64_big").status().message(), HasSubstr("does not fit int64"));
  EXPECT_FALSE(f.GetFloat("llama.block_count").ok());
  EXPECT_FALSE(f.GetBool("llama.block_count").ok());
  EXPECT_FALSE(f.GetString("test.bool").ok());
  EXPECT_THAT(f.GetIntArray("tokenizer.ggml.tokens").status().message(),
              HasSubstr("ARRAY of STRING"));
  EXPECT_FALSE(f.GetStringArray("test.i32s").ok());
  EXPECT_FALSE(f.GetFloatArray("test.i32s").ok());
}

TEST(GgufFileTest, WriterRejectsBadInput) {
  const std::string path = llm::testing::MakeTempDir("gguf") + "/m.gguf";
  EXPECT_FALSE(
      WriteGguf(path, {{"k", GgufValue::Array(GgufValueType::kInt32, {GgufValue::Uint8(1)})}}, {})
          .ok());
  const auto s = WriteGguf(path, {}, {{"t", Id(GgufType::kQ8_0), {32}, std::string(33, '\0')}});
  EXPECT_THAT(s.message(), HasSubstr("'t'"));
  EXPECT_FALSE(WriteGguf(path, {}, {{"t", 99, {1}, "x"}}).ok());
  EXPECT_FALSE(WriteGguf(path, {}, {{"t", Id(GgufType::kQ8_0), {16}, std::string(17, 0)}}).ok());
}

TEST(GgufFileTest, UnsupportedTypeNamesTensorAndType) {
  const std::string path = llm::testing::MakeTempDir("gguf") + "/m.gguf";
  const int64_t bytes = GgufTypeSize(Id(GgufType::kIQ2_XXS));
  ASSERT_TRUE(
      WriteGguf(path, {},
                {{"blk.0.ffn_up.weight", Id(GgufType::kIQ2_XXS), {256}, std::string(bytes, 0)}})
          .ok());
  auto opened = GgufFile::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::string out;
  const absl::Status s = DequantizeTensor((*opened)->tensors()[0], DType::kF32, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'blk.0.ffn_up.weight'"));
  EXPECT_THAT(s.message(), HasSubstr("IQ2_XXS"));
}

// ---- Corrupt files -----------------------------------------------------------------------------

class GgufCorruptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = llm::testing::MakeTempDir("gguf");
    good_path_ = dir_ + "/good.gguf";
    // The last tensor's 64 bytes fill its alignment, so the file ends where its data does.
    ASSERT_TRUE(
        WriteGguf(
            good_path_,
            {{"kkkk.string", GgufValue::String("value")},
             {"aaaa.array", GgufValue::Array(GgufValueType::kUint32, {GgufValue::Uint32(1)})}},
            {{"tttt.first", Id(GgufType::kF32), {4}, F32Bytes({1, 2, 3, 4})},
             {"tttt.second", Id(GgufType::kF32), {16}, F32Bytes(std::vector<float>(16))}})
            .ok());
    good_ = ReadAll(good_path_);
  }

  // Writes `bytes` and returns the error of opening them (empty when Open succeeds).
  std::string OpenError(const std::string& bytes) {
    const std::string path = dir_ + "/bad.gguf";
    WriteAll(path, bytes);
    auto f = GgufFile::Open(path);
    if (f.ok()) return "";
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
    EXPECT_THAT(f.status().message(), HasSubstr(path));
    return std::string(f.status().message());
  }

  // Offset of the field `after` bytes past the end of the string `s` (a key or tensor name).
  size_t After(const std::string& s, size_t after) const {
    const size_t pos = good_.find(s);
    EXPECT_NE(pos, std::string::npos);
    return pos + s.size() + after;
  }

  std::string dir_;
  std::string good_path_;
  std::string good_;
};

TEST_F(GgufCorruptTest, GoodFileOpens) { EXPECT_EQ(OpenError(good_), ""); }

TEST_F(GgufCorruptTest, MissingFile) {
  auto f = GgufFile::Open(dir_ + "/none.gguf");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(f.status().message(), HasSubstr("none.gguf"));
}

TEST_F(GgufCorruptTest, BadMagicAndVersion) {
  std::string bad = good_;
  bad[3] = 'X';
  EXPECT_THAT(OpenError(bad), HasSubstr("magic"));
  for (uint32_t version : {1u, 4u, 0x03000000u}) {
    bad = good_;
    Poke(&bad, 4, version);
    EXPECT_THAT(OpenError(bad), HasSubstr("version"));
  }
  bad = good_;
  Poke<uint32_t>(&bad, 4, 2);
  EXPECT_EQ(OpenError(bad), "");  // version 2 has the same layout
}

TEST_F(GgufCorruptTest, EveryTruncationFails) {
  for (size_t size = 0; size < good_.size(); ++size) {
    EXPECT_NE(OpenError(good_.substr(0, size)), "") << "truncated to " << size;
  }
}

TEST_F(GgufCorruptTest, HugeCountsAndLengths) {
  std::string bad = good_;
  Poke<uint64_t>(&bad, 8, uint64_t{1} << 60);
  EXPECT_THAT(OpenError(bad), HasSubstr("tensors cannot fit"));
  bad = good_;
  Poke<uint64_t>(&bad, 16, ~uint64_t{0});
  EXPECT_THAT(OpenError(bad), HasSubstr("metadata entries cannot fit"));
  bad = good_;
  Poke<uint64_t>(&bad, After("kkkk.string", 4), uint64_t{1} << 62);
  EXPECT_THAT(OpenError(bad), HasSubstr("'kkkk.string' has length"));
  bad = good_;
  Poke<uint64_t>(&bad, After("aaaa.array", 8), uint64_t{1} << 61);
  EXPECT_THAT(OpenError(bad), HasSubstr("'aaaa.array'"));
  bad = good_;
  Poke<uint64_t>(&bad, 24, 1 << 30);  // the first key's own length
  EXPECT_NE(OpenError(bad), "");
}

TEST_F(GgufCorruptTest, BadTypes) {
  std::string bad = good_;
  Poke<uint32_t>(&bad, After("kkkk.string", 0), 13);
  EXPECT_THAT(OpenError(bad), HasSubstr("'kkkk.string': unknown value type 13"));
  bad = good_;
  Poke<uint32_t>(&bad, After("aaaa.array", 4), 77);
  EXPECT_THAT(OpenError(bad), HasSubstr("unknown array element type 77"));
  bad = good_;
  Poke<uint32_t>(&bad, After("tttt.first", 4 + 8), 99);
  EXPECT_THAT(OpenError(bad), HasSubstr("tensor 'tttt.first': unknown type 99"));
  bad = good_;
  Poke<uint32_t>(&bad, After("tttt.first", 0), 5);
  EXPECT_THAT(OpenError(bad), HasSubstr("tensor 'tttt.first': 5 dims"));
  bad = good_;
  Poke<uint32_t>(&bad, After("tttt.first", 4 + 8), Id(GgufType::kQ8_0));
  EXPECT_THAT(OpenError(bad), HasSubstr("not a multiple of the Q8_0 block size"));
}

TEST_F(GgufCorruptTest, BadTensorOffsets) {
  const size_t second_offset = After("tttt.second", 4 + 8 + 4);
  std::string bad = good_;
  Poke<uint64_t>(&bad, second_offset, 1 << 20);
  EXPECT_THAT(OpenError(bad), HasSubstr("tensor 'tttt.second': data"));
  bad = good_;
  Poke<uint64_t>(&bad, second_offset, ~uint64_t{0} - 31);
  EXPECT_THAT(OpenError(bad), HasSubstr("runs past the end"));
  bad = good_;
  Poke<uint64_t>(&bad, second_offset, 0);
  EXPECT_THAT(OpenError(bad), HasSubstr("overlaps tensor 'tttt.first'"));  // ties keep file order
  bad = good_;
  Poke<uint64_t>(&bad, second_offset, 33);
  EXPECT_THAT(OpenError(bad), HasSubstr("not a multiple of the alignment"));
  bad = good_;
  Poke<uint64_t>(&bad, After("tttt.second", 4), uint64_t{1} << 40);  // dims[0]
  EXPECT_THAT(OpenError(bad), HasSubstr("'tttt.second'"));
}

TEST_F(GgufCorruptTest, BadAlignmentAndDuplicates) {
  const std::string path = dir_ + "/m.gguf";
  ASSERT_TRUE(WriteGguf(path, {{"general.alignment", GgufValue::Uint32(48)}}, {}).ok());
  EXPECT_THAT(OpenError(ReadAll(path)), HasSubstr("'general.alignment'"));
  ASSERT_TRUE(WriteGguf(path, {{"general.alignment", GgufValue::Int32(32)}}, {}).ok());
  EXPECT_THAT(OpenError(ReadAll(path)), HasSubstr("UINT32"));
  ASSERT_TRUE(
      WriteGguf(path, {{"k", GgufValue::Bool(true)}, {"k", GgufValue::Bool(false)}}, {}).ok());
  EXPECT_THAT(OpenError(ReadAll(path)), HasSubstr("key 'k' appears twice"));
  const std::string x = F32Bytes({1});
  ASSERT_TRUE(WriteGguf(path, {}, {{"t", 0, {1}, x}, {"t", 0, {1}, x}}).ok());
  EXPECT_THAT(OpenError(ReadAll(path)), HasSubstr("tensor 't' appears twice"));
}

TEST_F(GgufCorruptTest, DeeplyNestedArrays) {
  GgufValue v = GgufValue::Array(GgufValueType::kUint8, {});
  for (int i = 0; i < 20; ++i) v = GgufValue::Array(GgufValueType::kArray, {v});
  const std::string path = dir_ + "/m.gguf";
  ASSERT_TRUE(WriteGguf(path, {{"deep", v}}, {}).ok());
  EXPECT_THAT(OpenError(ReadAll(path)), HasSubstr("nested deeper"));
}

// Random byte changes in the header never crash Open; what it accepts can be dequantised.
TEST_F(GgufCorruptTest, RandomCorruptionNeverCrashes) {
  std::mt19937 rng(1234);
  const size_t header = good_.size() - 96;  // the data section is 16 + 16 (padding) + 64 bytes
  const std::string path = dir_ + "/fuzz.gguf";
  int opened = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bad = good_;
    for (int k = 0; k < 1 + trial % 4; ++k) {
      bad[rng() % header] = static_cast<char>(rng() % 4 == 0 ? 0xFF : rng() & 0xFF);
    }
    WriteAll(path, bad);
    auto f = GgufFile::Open(path);
    if (!f.ok()) {
      ASSERT_THAT(f.status().message(), HasSubstr(path));
      continue;
    }
    ++opened;
    for (const GgufTensor& t : (*f)->tensors()) {
      std::string out;
      if (GgufTypeSupported(t.type)) {
        ASSERT_TRUE(DequantizeTensor(t, DType::kF32, &out).ok());
      }
    }
  }
  EXPECT_GT(opened, 0);  // some changes (to string contents) leave a valid file
}

// ---- Block formats -----------------------------------------------------------------------------

TEST(GgufQuantTest, TypeTable) {
  EXPECT_EQ(GgufTypeName(Id(GgufType::kQ4_K)), "Q4_K");
  EXPECT_EQ(GgufTypeName(99), "unknown type 99");
  EXPECT_EQ(GgufBlockSize(Id(GgufType::kQ4_K)), 256);
  EXPECT_EQ(GgufTypeSize(Id(GgufType::kQ4_K)), 144);
  EXPECT_EQ(GgufTypeSize(Id(GgufType::kQ5_K)), 176);
  EXPECT_EQ(GgufTypeSize(Id(GgufType::kQ6_K)), 210);
  EXPECT_EQ(GgufTypeSize(Id(GgufType::kQ2_K)), 84);
  EXPECT_EQ(GgufTypeSize(Id(GgufType::kQ3_K)), 110);
  EXPECT_EQ(GgufTypeSize(Id(GgufType::kQ4_0)), 18);
  EXPECT_EQ(GgufTypeSize(Id(GgufType::kQ5_1)), 24);
  EXPECT_EQ(GgufTypeSize(Id(GgufType::kBF16)), 2);
  EXPECT_EQ(GgufBlockSize(99), 0);
  EXPECT_TRUE(GgufTypeSupported(Id(GgufType::kQ6_K)));
  EXPECT_FALSE(GgufTypeSupported(Id(GgufType::kIQ4_XS)));
  EXPECT_FALSE(GgufTypeSupported(Id(GgufType::kQ8_1)));
  EXPECT_FALSE(GgufTypeSupported(99));
}

TEST(GgufQuantTest, Errors) {
  float out[32];
  const std::string block(34, '\0');
  const auto* src = reinterpret_cast<const std::byte*>(block.data());
  EXPECT_THAT(DequantizeGguf(Id(GgufType::kQ8_0), src, 16, out).message(),
              HasSubstr("whole number"));
  EXPECT_THAT(DequantizeGguf(Id(GgufType::kIQ1_S), src, 256, nullptr).message(),
              HasSubstr("IQ1_S"));
  EXPECT_THAT(DequantizeGguf(12345, src, 0, out).message(), HasSubstr("unknown type 12345"));
  EXPECT_TRUE(DequantizeGguf(Id(GgufType::kQ8_0), src, 0, out).ok());
}

TEST(GgufQuantTest, FloatTypes) {
  EXPECT_THAT(Dequant(GgufType::kF32, F32Bytes({1.5f, -0.0f})), ElementsAre(1.5f, -0.0f));
  std::string f16(4, '\0');
  Poke<uint16_t>(&f16, 0, 0x3C00);  // 1.0
  Poke<uint16_t>(&f16, 2, 0x0001);  // smallest subnormal, 2^-24
  EXPECT_THAT(Dequant(GgufType::kF16, f16), ElementsAre(1.0f, std::ldexp(1.0f, -24)));
  std::string bf16(4, '\0');
  Poke<uint16_t>(&bf16, 0, 0x3FC0);  // 1.5
  Poke<uint16_t>(&bf16, 2, 0xC000);  // -2
  EXPECT_THAT(Dequant(GgufType::kBF16, bf16), ElementsAre(1.5f, -2.0f));
}

TEST(GgufQuantTest, Q4_0) {
  std::string b(18, '\0');
  Poke<uint16_t>(&b, 0, 0x3800);  // d = 0.5
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<char>(j | (15 - j) << 4);
  const std::vector<float> y = Dequant(GgufType::kQ4_0, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * static_cast<float>(j - 8)) << j;
    EXPECT_EQ(y[j + 16], 0.5f * static_cast<float>(7 - j)) << j;
  }
  EXPECT_EQ(y[0], -4.0f);
  EXPECT_EQ(y[31], -4.0f);
}

TEST(GgufQuantTest, Q4_1) {
  std::string b(20, '\0');
  Poke<uint16_t>(&b, 0, 0x3400);  // d = 0.25
  Poke<uint16_t>(&b, 2, 0xBC00);  // m = -1
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<char>(j | (15 - j) << 4);
  const std::vector<float> y = Dequant(GgufType::kQ4_1, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * static_cast<float>(j) - 1.0f) << j;
    EXPECT_EQ(y[j + 16], 0.25f * static_cast<float>(15 - j) - 1.0f) << j;
  }
  EXPECT_EQ(y[16], 2.75f);
}

TEST(GgufQuantTest, Q5_0) {
  std::string b(22, '\0');
  Poke<uint16_t>(&b, 0, 0x3C00);       // d = 1
  Poke<uint32_t>(&b, 2, 0xAAAAAAAAu);  // odd elements have the fifth bit
  for (int j = 0; j < 16; ++j) b[6 + j] = static_cast<char>(j | j << 4);
  const std::vector<float> y = Dequant(GgufType::kQ5_0, b);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], static_cast<float>(e % 16 + 16 * (e % 2) - 16)) << e;
  EXPECT_EQ(y[0], -16.0f);
  EXPECT_EQ(y[31], 15.0f);
}

TEST(GgufQuantTest, Q5_1) {
  std::string b(24, '\0');
  Poke<uint16_t>(&b, 0, 0x4000);       // d = 2
  Poke<uint16_t>(&b, 2, 0x3800);       // m = 0.5
  Poke<uint32_t>(&b, 4, 0x0000FFFFu);  // elements 0..15 have the fifth bit
  for (int j = 0; j < 16; ++j) b[8 + j] = static_cast<char>(j | j << 4);
  const std::vector<float> y = Dequant(GgufType::kQ5_1, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * static_cast<float>(j + 16) + 0.5f) << j;
    EXPECT_EQ(y[j + 16], 2.0f * static_cast<float>(j) + 0.5f) << j;
  }
}

TEST(GgufQuantTest, Q8_0) {
  const std::vector<float> y = Dequant(GgufType::kQ8_0, Q8_0Blocks());
  ASSERT_EQ(y.size(), 64u);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(y[j], 0.5f * static_cast<float>(j - 16));
    EXPECT_EQ(y[32 + j], 1.0f * static_cast<float>(j - 16));
  }
}

TEST(GgufQuantTest, Q2_K) {
  std::string b(84, '\0');
  for (int sub = 0; sub < 16; ++sub) b[sub] = static_cast<char>(sub | 1 << 4);  // scale sub, min 1
  for (int i = 0; i < 64; ++i) b[16 + i] = static_cast<char>(0xE4);  // 2-bit groups 0,1,2,3
  Poke<uint16_t>(&b, 80, 0x3C00);                                    // d = 1
  Poke<uint16_t>(&b, 82, 0x3800);                                    // dmin = 0.5
  const std::vector<float> y = Dequant(GgufType::kQ2_K, b);
  // Element e is in sub-block e/16 and reads the 2-bit group (e/32)%4 of its byte.
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[e], static_cast<float>((e / 16) * ((e / 32) % 4)) - 0.5f) << e;
  }
  EXPECT_EQ(y[40], 1.5f);    // sub-block 2, q 1
  EXPECT_EQ(y[255], 44.5f);  // sub-block 15, q 3
}

TEST(GgufQuantTest, Q3_K) {
  std::string b(110, '\0');
  for (int l = 0; l < 32; ++l) b[l] = 0x0F;  // hmask: elements 0..127 have the high bit
  for (int i = 0; i < 64; ++i) b[32 + i] = static_cast<char>(0xE4);
  // Scale of sub-block i: i - 8, stored as i + 24 in 6 bits (4 low, 2 high).
  for (int i = 0; i < 16; ++i) {
    const int raw = i + 24;
    b[96 + i % 8] = static_cast<char>(b[96 + i % 8] | (raw & 0xF) << (4 * (i / 8)));
    b[104 + i % 4] = static_cast<char>(b[104 + i % 4] | (raw >> 4) << (2 * (i / 4)));
  }
  Poke<uint16_t>(&b, 108, 0x3C00);  // d = 1
  const std::vector<float> y = Dequant(GgufType::kQ3_K, b);
  for (int e = 0; e < 256; ++e) {
    const int q = (e / 32) % 4 - (e < 128 ? 0 : 4);
    EXPECT_EQ(y[e], static_cast<float>((e / 16 - 8) * q)) << e;
  }
  EXPECT_EQ(y[255], 7.0f * -1.0f);
}

// Sub-block scales {1, 2, 3, 4, 40, 50, 60, 63} and mins {0, 1, 2, 3, 33, 44, 55, 62}, packed
// by hand as ggml's get_scale_min_k4 reads them.
constexpr uint8_t kScalesK4[12] = {129, 194, 195, 196, 128, 129, 194, 195, 24, 194, 124, 239};
constexpr int kSc[8] = {1, 2, 3, 4, 40, 50, 60, 63};
constexpr int kMin[8] = {0, 1, 2, 3, 33, 44, 55, 62};

TEST(GgufQuantTest, Q4_K) {
  std::string b(144, '\0');
  Poke<uint16_t>(&b, 0, 0x3C00);  // d = 1
  Poke<uint16_t>(&b, 2, 0x3800);  // dmin = 0.5
  std::memcpy(b.data() + 4, kScalesK4, 12);
  for (int i = 0; i < 128; ++i) b[16 + i] = static_cast<char>(i % 16 | (15 - i % 16) << 4);
  const std::vector<float> y = Dequant(GgufType::kQ4_K, b);
  for (int sub = 0; sub < 8; ++sub) {
    for (int l = 0; l < 32; ++l) {
      const int q = sub % 2 == 0 ? l % 16 : 15 - l % 16;  // low nibbles, then high
      EXPECT_EQ(y[32 * sub + l], static_cast<float>(kSc[sub] * q) - 0.5f * kMin[sub])
          << sub << " " << l;
    }
  }
  EXPECT_EQ(y[255], 63.0f * 0 - 31.0f);
  EXPECT_EQ(y[128 + 1], 40.0f * 1 - 16.5f);
}

TEST(GgufQuantTest, Q5_K) {
  std::string b(176, '\0');
  Poke<uint16_t>(&b, 0, 0x3C00);  // d = 1
  Poke<uint16_t>(&b, 2, 0x3800);  // dmin = 0.5
  std::memcpy(b.data() + 4, kScalesK4, 12);
  for (int l = 0; l < 32; ++l) b[16 + l] = static_cast<char>(0xAA);  // odd sub-blocks: bit 4
  for (int i = 0; i < 128; ++i) b[48 + i] = static_cast<char>(i % 16 | (15 - i % 16) << 4);
  const std::vector<float> y = Dequant(GgufType::kQ5_K, b);
  for (int sub = 0; sub < 8; ++sub) {
    for (int l = 0; l < 32; ++l) {
      const int q = sub % 2 == 0 ? l % 16 : 15 - l % 16 + 16;
      EXPECT_EQ(y[32 * sub + l], static_cast<float>(kSc[sub] * q) - 0.5f * kMin[sub])
          << sub << " " << l;
    }
  }
}

TEST(GgufQuantTest, Q6_K) {
  std::string b(210, '\0');
  // ql: bytes 0..31 and 64..95 hold nibbles (3, 7), bytes 32..63 and 96..127 (1, 5); qh groups
  // 0,1,2,3. So element e = h*128 + s*32 + l has q = {3, 1, 7, 5}[s] | s << 4.
  for (int i = 0; i < 128; ++i) b[i] = static_cast<char>(i % 64 < 32 ? 0x73 : 0x51);
  for (int i = 0; i < 64; ++i) b[128 + i] = static_cast<char>(0xE4);
  for (int sub = 0; sub < 16; ++sub) b[192 + sub] = static_cast<char>(sub - 8);
  Poke<uint16_t>(&b, 208, 0x3800);  // d = 0.5
  const std::vector<float> y = Dequant(GgufType::kQ6_K, b);
  const int low[4] = {3, 1, 7, 5};
  for (int e = 0; e < 256; ++e) {
    const int s = (e / 32) % 4;
    const int q = (low[s] | s << 4) - 32;
    EXPECT_EQ(y[e], 0.5f * static_cast<float>(e / 16 - 8) * static_cast<float>(q)) << e;
  }
  EXPECT_EQ(y[0], 116.0f);  // 0.5 * -8 * (3 - 32)
}

// Several blocks in a row read each block at its own stride.
TEST(GgufQuantTest, BlocksAreIndependent) {
  std::mt19937 rng(7);
  for (GgufType type :
       {GgufType::kQ4_0, GgufType::kQ4_1, GgufType::kQ5_0, GgufType::kQ5_1, GgufType::kQ8_0,
        GgufType::kQ2_K, GgufType::kQ3_K, GgufType::kQ4_K, GgufType::kQ5_K, GgufType::kQ6_K}) {
    const int64_t size = GgufTypeSize(Id(type));
    const int64_t block = GgufBlockSize(Id(type));
    std::string blocks(static_cast<size_t>(3 * size), '\0');
    for (char& c : blocks) c = static_cast<char>(rng() & 0x3F);  // keeps f16 fields finite
    const std::vector<float> all = Dequant(type, blocks);
    for (int k = 0; k < 3; ++k) {
      const std::vector<float> one = Dequant(type, blocks.substr(k * size, size));
      for (int64_t i = 0; i < block; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(all[k * block + i]), std::bit_cast<uint32_t>(one[i]))
            << GgufTypeName(Id(type)) << " block " << k << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace llm::model
