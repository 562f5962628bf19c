// JSON Schema to patterns (worker/constraint/json_schema.h): each keyword's language, checked
// on the automaton the patterns become, and every refusal naming its path.
#include "worker/constraint/json_schema.h"

#include <arpa/inet.h>

#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/constraint/regex_language.h"
#include "worker/constraint/byte_dfa.h"
#include "worker/constraint/byte_regex.h"
#include "worker/constraint/constraint.h"
#include "worker/constraint/pushdown.h"

namespace llm::constraint {
namespace {

using ::testing::HasSubstr;

// The automaton of a schema, and whether `text` is a complete output.
struct SchemaMatch : PatternsLanguage {
  explicit SchemaMatch(const std::string& schema)
      : PatternsLanguage(JsonSchemaToPatterns(schema)) {}
};

// A schema as deep as the compiler takes (objects 31 deep, 63 levels of JSON) around a number
// whose bounds have 31 and 16 digits after the point compiles, and its bounds hold there.
TEST(JsonSchemaTest, DeepSchemasWithLongBoundsCompile) {
  for (int depth : {1, 16, 31}) {
    std::string schema, open, close;
    for (int i = 0; i < depth; ++i) {
      schema += R"({"type":"object","properties":{"a":)";
      open += R"({"a":)";
      close += "}";
    }
    schema += R"({"type":"number","minimum":1.2345678901234568e-15,"maximum":0.9876543210987654})";
    for (int i = 0; i < depth; ++i) schema += R"(},"required":["a"],"additionalProperties":false})";
    const SchemaMatch m(schema);
    EXPECT_TRUE(m(open + "0.5" + close)) << depth;
    EXPECT_TRUE(m(open + "0.0000000000000012345678901234568" + close)) << depth;
    EXPECT_FALSE(m(open + "0.0000000000000012345678901234567" + close)) << depth;
    EXPECT_TRUE(m(open + "0.9876543210987654" + close)) << depth;
    EXPECT_FALSE(m(open + "0.98765432109876541" + close)) << depth;
    EXPECT_FALSE(m(open + "0" + close)) << depth;
  }
}

TEST(JsonSchemaTest, IntegerBoundsAreExact) {
  for (const auto& [lo, hi] : std::vector<std::pair<int, int>>{
           {0, 120}, {-5, 5}, {1000, 9999}, {-99, -7}, {7, 7}, {19, 201}, {-130, 0}}) {
    const SchemaMatch m(
        absl::StrCat(R"({"type":"integer","minimum":)", lo, R"(,"maximum":)", hi, "}"));
    for (int v = -300; v <= 10100; v += (v > 300 && v < 990) ? 37 : 1) {
      EXPECT_EQ(m(std::to_string(v)), v >= lo && v <= hi)
          << v << " in [" << lo << ", " << hi << "]";
    }
    EXPECT_FALSE(m("01"));
    EXPECT_FALSE(m("-0"));
  }
  const SchemaMatch open(R"({"type":"integer","exclusiveMinimum":41})");
  EXPECT_FALSE(open("41"));
  EXPECT_TRUE(open("42"));
  EXPECT_TRUE(open("123456789012"));
  EXPECT_FALSE(open("-1"));
}

// As a constraint (JsonSchemaToPatterns), a recursive reference is a call to the target's own
// pattern, matched with a stack: trees nest as deep as the output goes.
TEST(JsonSchemaTest, RecursiveSchemasNestAsDeepAsTheOutputGoes) {
  const char* kNode = R"({"$defs":{"Node":{"type":"object","properties":{"v":{"type":
      "integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/Node"}}},"required":["v",
      "kids"],"additionalProperties":false}},"$ref":"#/$defs/Node"})";
  auto rules = JsonSchemaToPatterns(kNode);
  ASSERT_TRUE(rules.ok()) << rules.status();
  ASSERT_TRUE(rules->calls);
  EXPECT_EQ(rules->names, (std::vector<std::string>{"$", "#/$defs/Node"}));
  auto pda = Pushdown::Build(*rules, kMaxDfaStates, "constraint.json_schema");
  ASSERT_TRUE(pda.ok()) << pda.status();
  std::string tree = R"({"v":9,"kids":[]})";
  for (int depth = 8; depth >= 1; --depth) {
    tree = absl::StrCat(R"({"v":)", depth, R"(,"kids":[)", tree, ",", tree, "]}");
  }
  EXPECT_TRUE(pda->Accepts(tree));  // 9 levels of nodes
  EXPECT_FALSE(pda->Accepts(tree.substr(0, tree.size() - 1)));
  EXPECT_FALSE(pda->Accepts(R"({"v":1,"kids":[{"v":2}]})"));  // kids required
  const SchemaMatch nested(
      R"({"$defs":{"n":{"type":"array","items":{"$ref":"#/$defs/n"}}},"$ref":"#/$defs/n"})");
  EXPECT_TRUE(nested("[[],[[[]]]]"));
  EXPECT_TRUE(nested("[[[[[[[[[[]]]]]]]]]]"));
  EXPECT_FALSE(nested("[[[[[]]]]"));
  // Without recursion or open values, one pattern.
  auto flat = JsonSchemaToPatterns(R"({"type":"array","items":{"type":"integer"}})");
  ASSERT_TRUE(flat.ok());
  EXPECT_FALSE(flat->calls);
  EXPECT_EQ(flat->patterns.size(), 1u);
  // A recursion that every value needs never ends: refused, the definition named.
  auto none = JsonSchemaToPatterns(R"({"$defs":{"r":{"type":"object","properties":{"next":
      {"$ref":"#/$defs/r"}},"required":["next"]}},"$ref":"#/$defs/r"})");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_THAT(Pushdown::Build(*none, kMaxDfaStates, "constraint.json_schema").status().message(),
              HasSubstr("rule '#/$defs/r' never ends"));
}

// A value the schema leaves open is any JSON value, nested as deep as it goes: one rule, called
// from wherever the schema leaves a value open.
TEST(JsonSchemaTest, OpenValuesNestAsDeepAsTheOutputGoes) {
  const char* kSchema = R"({"type":"object","properties":{"meta":{"type":"object"},
      "any":{},"list":{"type":"array"},"dict":{"type":"object","additionalProperties":true},
      "no":{"type":"integer"}},"required":["no"],"additionalProperties":false})";
  auto rules = JsonSchemaToPatterns(kSchema);
  ASSERT_TRUE(rules.ok()) << rules.status();
  EXPECT_EQ(rules->names, (std::vector<std::string>{"$", "(any JSON value)"}));
  const SchemaMatch m(kSchema);
  ASSERT_TRUE(m.pushdown());
  std::string deep = "1";
  for (int i = 0; i < 12; ++i)
    deep = i % 2 ? absl::StrCat("[", deep, ",null]") : "{\"k\":" + deep + "}";
  EXPECT_TRUE(m(R"({"meta":{"a":)" + deep + R"(},"no":1})"));
  EXPECT_TRUE(m(R"({"any":)" + deep + R"(,"no":1})"));
  EXPECT_TRUE(m(R"({"list":[)" + deep + "," + deep + R"(],"no":1})"));
  EXPECT_TRUE(m(R"({"dict":{"x":)" + deep + R"(},"no":1})"));
  EXPECT_TRUE(m(R"({"meta":{},"any":"s","list":[],"dict":{},"no":-3})"));
  EXPECT_FALSE(m(R"({"meta":[],"no":1})"));       // meta is an object
  EXPECT_FALSE(m(R"({"any":{"a":1,},"no":1})"));  // still JSON
  EXPECT_FALSE(m(R"({"any":{"a":[1}},"no":1})"));
  EXPECT_FALSE(m(R"({"meta":{}})"));  // no is required
}

// Strings of a string schema's language, by random walks of its automaton (the quotes taken
// off).
std::vector<std::string> RandomStrings(const std::string& schema, int count, uint32_t seed) {
  auto rules = JsonSchemaToPatterns(schema);
  EXPECT_TRUE(rules.ok() && !rules->calls) << schema;
  if (!rules.ok()) return {};
  auto nfa = ParseRegex(rules->patterns[0], "test", /*extensions=*/true);
  EXPECT_TRUE(nfa.ok()) << nfa.status();
  auto dfa = ByteDfa::Build(*nfa, kMaxDfaStates, "test");
  EXPECT_TRUE(dfa.ok()) << dfa.status();
  if (!dfa.ok()) return {};
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  while (static_cast<int>(out.size()) < count) {
    std::string text;
    for (int32_t s = dfa->start();;) {
      std::vector<uint8_t> next;
      for (int b = 0; b < 256; ++b) {
        if (dfa->Next(s, static_cast<uint8_t>(b)) != ByteDfa::kDead) next.push_back(b);
      }
      if (next.empty() || (dfa->accepting(s) && rng() % 8 == 0)) break;
      const uint8_t b = next[rng() % next.size()];
      text += static_cast<char>(b);
      s = dfa->Next(s, b);
    }
    out.push_back(text.substr(1, text.size() - 2));
  }
  return out;
}

// `text` is address/prefix as inet_pton reads the address, and with `strict` no bit past the
// prefix is set (Python's ip_network).
bool IsNetwork(const std::string& text, bool v6, bool strict) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return false;
  unsigned char bytes[16] = {};
  if (inet_pton(v6 ? AF_INET6 : AF_INET, text.substr(0, slash).c_str(), bytes) != 1) return false;
  const std::string length = text.substr(slash + 1);
  if (length.empty() || length.size() > 3 || (length.size() > 1 && length[0] == '0') ||
      length.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  const int n = std::stoi(length), bits = v6 ? 128 : 32;
  if (n > bits) return false;
  for (int i = n; strict && i < bits; ++i) {
    if (bytes[i / 8] & (0x80 >> (i % 8))) return false;
  }
  return true;
}

// Pydantic's IPv4Network, IPv6Network, IPvAnyNetwork, the interfaces, Base64Bytes and Path.
TEST(JsonSchemaTest, NetworksInterfacesAndEncodedBytes) {
  const auto schema = [](const char* format) {
    return absl::StrCat(R"({"type":"string","format":")", format, "\"}");
  };
  const auto quoted = [](const std::string& t) { return "\"" + t + "\""; };
  const SchemaMatch net4(schema("ipv4network")), net6(schema("ipv6network"));
  const SchemaMatch net(schema("ipvanynetwork")), if4(schema("ipv4interface"));
  const SchemaMatch if6(schema("ipv6interface")), iface(schema("ipvanyinterface"));
  for (const char* t : {"10.0.0.0/8", "192.168.4.0/22", "0.0.0.0/0", "255.255.255.255/32",
                        "172.16.0.0/12", "1.2.3.4/32"}) {
    EXPECT_TRUE(net4(quoted(t))) << t;
    EXPECT_TRUE(net(quoted(t))) << t;
    EXPECT_TRUE(if4(quoted(t))) << t;
    EXPECT_TRUE(IsNetwork(t, false, true)) << t;
  }
  for (const char* t : {"::/0", "2001:db8::/32", "fe80::/10", "2001:db8:0:0:0:0:0:0/128",
                        "1:2:3:4:5:6:7::/112", "fe80:0000:0000:0000:8000::/65"}) {
    EXPECT_TRUE(net6(quoted(t))) << t;
    EXPECT_TRUE(net(quoted(t))) << t;
    EXPECT_TRUE(if6(quoted(t))) << t;
    EXPECT_TRUE(IsNetwork(t, true, true)) << t;
  }
  // Host bits set, prefixes out of range or with a leading zero, no prefix.
  for (const char* t : {"10.0.0.1/8", "192.168.5.0/22", "10.0.0.0/33", "10.0.0.0/08", "10.0.0.0",
                        "fe80::1/64", "fe90::/10", "::/129", "::"}) {
    EXPECT_FALSE(net(quoted(t))) << t;
  }
  EXPECT_FALSE(net6(quoted("2001:0db8:0:0::/32")));  // another spelling of 2001:db8::/32
  EXPECT_TRUE(iface(quoted("10.0.0.1/8")));
  EXPECT_TRUE(iface(quoted("fe80::1/64")));
  for (const char* t : {"10.1.2.3/33", "fe80::1/129", "10.1.2.3", "fe80::1", "10.1.2.3/024"}) {
    EXPECT_FALSE(iface(quoted(t))) << t;
  }
  // Every string of the languages is what it says, by an independent reading.
  for (const auto& [format, v6, strict] :
       std::vector<std::tuple<const char*, bool, bool>>{{"ipv4network", false, true},
                                                        {"ipv6network", true, true},
                                                        {"ipv4interface", false, false},
                                                        {"ipv6interface", true, false}}) {
    for (const std::string& t : RandomStrings(schema(format), 400, 7)) {
      EXPECT_TRUE(IsNetwork(t, v6, strict)) << format << ": " << t;
    }
  }
  const SchemaMatch b64(schema("base64")), url(schema("base64url")), path(schema("path"));
  for (const char* t : {"", "YQ==", "YWI=", "YWJj", "YWJjZA==", "a+/b"}) {
    EXPECT_TRUE(b64(quoted(t))) << t;
  }
  for (const char* t : {"YQ", "Y===", "YQ=", "YQ==YQ==", "a-_b"}) EXPECT_FALSE(b64(quoted(t))) << t;
  EXPECT_TRUE(url(quoted("a-_b")));
  EXPECT_FALSE(url(quoted("a+/b")));
  EXPECT_TRUE(path(quoted("/tmp/a b\\\\c.txt")));  // an escaped backslash
}

// Pydantic's dict[str, X] (additionalProperties as a schema) and set[SomeEnum] (uniqueItems
// over finitely many values, written in the schema's order).
TEST(JsonSchemaTest, MapsAndSets) {
  const SchemaMatch counts(R"({"type":"object","additionalProperties":{"type":"integer"}})");
  for (const char* ok : {"{}", R"({"a":1})", R"({"a":1,"b c":-2,"":0})"}) {
    EXPECT_TRUE(counts(ok)) << ok;
  }
  for (const char* bad : {R"({"a":"1"})", R"({"a":1,"b":null})", R"({"a":1,})", "[]"}) {
    EXPECT_FALSE(counts(bad)) << bad;
  }
  const SchemaMatch untyped(R"({"additionalProperties":{"enum":["x"]}})");
  EXPECT_TRUE(untyped(R"({"k":"x"})"));
  EXPECT_FALSE(untyped(R"({"k":"y"})"));
  const SchemaMatch empty(R"({"type":"object","additionalProperties":false})");
  EXPECT_TRUE(empty("{}"));
  EXPECT_FALSE(empty(R"({"a":1})"));
  const SchemaMatch colors(R"({"$defs":{"C":{"enum":["red","green","blue"],"type":"string"}},
      "type":"array","items":{"$ref":"#/$defs/C"},"uniqueItems":true})");
  for (const char* ok : {"[]", R"(["red"])", R"(["green"])", R"(["red","blue"])",
                         R"(["red","green","blue"])", R"(["green","blue"])"}) {
    EXPECT_TRUE(colors(ok)) << ok;
  }
  for (const char* bad :
       {R"(["red","red"])", R"(["blue","red"])", R"(["red","green","blue","red"])", R"(["pink"])",
        R"([,"red"])", R"(["red",])"}) {
    EXPECT_FALSE(colors(bad)) << bad;
  }
  const SchemaMatch some(R"({"type":"array","items":{"anyOf":[{"const":1},{"type":"boolean"},
      {"enum":[1.0,"x"]}]},"uniqueItems":true,"minItems":1,"maxItems":9})");
  for (const char* ok : {"[1]", R"([1,false,true,"x"])", "[true]"}) EXPECT_TRUE(some(ok)) << ok;
  for (const char* bad : {"[]", "[1,1.0]", "[1.0]", "[true,false]"}) {
    EXPECT_FALSE(some(bad)) << bad;
  }
  // Pydantic's dict[Literal["a","b"], int], dict[constr(pattern=...), int] and a dict with
  // min_length and max_length.
  const SchemaMatch named(R"({"type":"object","additionalProperties":{"type":"integer"},
      "propertyNames":{"enum":["a","b"]}})");
  for (const char* ok : {"{}", R"({"a":1})", R"({"b":2})", R"({"a":1,"b":2})"}) {
    EXPECT_TRUE(named(ok)) << ok;
  }
  for (const char* bad : {R"({"c":1})", R"({"a":1,"a":2})", R"({"b":1,"a":2})", R"({"a":"x"})"}) {
    EXPECT_FALSE(named(bad)) << bad;
  }
  const SchemaMatch keyed(R"({"type":"object","patternProperties":{"^[a-z]+$":{"type":"boolean"}},
      "additionalProperties":false})");
  EXPECT_TRUE(keyed(R"({"ab":true,"c":false})"));
  for (const char* bad : {R"({"A":true})", R"({"":true})", R"({"a":1})"}) {
    EXPECT_FALSE(keyed(bad)) << bad;
  }
  const SchemaMatch sized(R"({"type":"object","additionalProperties":{"type":"null"},
      "propertyNames":{"type":"string","maxLength":2},"minProperties":1,"maxProperties":2})");
  for (const char* ok : {R"({"a":null})", R"({"ab":null,"":null})"}) EXPECT_TRUE(sized(ok)) << ok;
  for (const char* bad : {"{}", R"({"abc":null})", R"({"a":null,"b":null,"c":null})"}) {
    EXPECT_FALSE(sized(bad)) << bad;
  }
  // Objects whose keys differ only in order are one value.
  const SchemaMatch objects(R"({"type":"array","items":{"enum":[{"a":1,"b":2},{"b":2,"a":1},
      {"a":1}]},"uniqueItems":true})");
  EXPECT_TRUE(objects(R"([{"a":1,"b":2},{"a":1}])"));
  EXPECT_FALSE(objects(R"([{"a":1,"b":2},{"b":2,"a":1}])"));
  const SchemaMatch plain(R"({"type":"array","items":{"type":"integer"},"uniqueItems":false})");
  EXPECT_TRUE(plain("[1,1]"));
}

// Keywords beside anyOf or oneOf hold in each branch (an object's shared properties, each
// branch requiring its own), beside $ref and allOf in their target; a type beside enum or
// const keeps the values of that type. Pydantic's discriminator is an annotation; a branch left
// out by a bound leaves no rule behind.
TEST(JsonSchemaTest, KeywordsBesideCombinatorsHold) {
  const SchemaMatch either(R"({"type":"object","properties":{"a":{"type":"integer"},
      "b":{"type":"string"}},"additionalProperties":false,
      "anyOf":[{"required":["a"]},{"required":["b"]}]})");
  EXPECT_TRUE(either(R"({"a":1})"));
  EXPECT_TRUE(either(R"({"b":"x"})"));
  EXPECT_TRUE(either(R"({"a":1,"b":"x"})"));
  EXPECT_FALSE(either(R"({})"));
  EXPECT_FALSE(either(R"({"a":"x"})"));
  const SchemaMatch short_string(
      R"({"type":"string","oneOf":[{"maxLength":2},{"format":"date"}]})");
  EXPECT_TRUE(short_string(R"("ab")"));
  EXPECT_TRUE(short_string(R"("2024-02-29")"));
  EXPECT_FALSE(short_string("12"));  // before: the branches ignored the type
  EXPECT_FALSE(short_string(R"("abc")"));
  EXPECT_THAT(
      JsonSchemaToPatterns(R"({"type":"string","anyOf":[{"type":"integer"}]})").status().message(),
      HasSubstr("$.anyOf[0].type: no type beside it is also here"));
  const SchemaMatch tagged(R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"a"}},
      "required":["kind"]},{"type":"object","properties":{"kind":{"const":"b"},"n":
      {"type":"integer"}},"required":["kind","n"]}],"discriminator":{"propertyName":"kind",
      "mapping":{"a":"#/a","b":"#/b"}}})");
  EXPECT_TRUE(tagged(R"({"kind":"a"})"));
  EXPECT_TRUE(tagged(R"({"kind":"b","n":2})"));
  EXPECT_FALSE(tagged(R"({"kind":"b"})"));
  for (const char* none :
       {R"({"type":"array","items":{},"maxItems":0})", R"({"type":"object","maxProperties":0})"}) {
    auto rules = JsonSchemaToPatterns(none);
    ASSERT_TRUE(rules.ok()) << rules.status();
    EXPECT_FALSE(rules->calls) << none;
  }
  // Beside $ref and allOf too; a type beside enum or const keeps the values of that type.
  const SchemaMatch short_name(R"({"$defs":{"S":{"type":"string"}},"properties":{"n":
      {"$ref":"#/$defs/S","maxLength":2},"m":{"allOf":[{"$ref":"#/$defs/S"}],"minLength":1}},
      "required":["n","m"],"additionalProperties":false})");
  EXPECT_TRUE(short_name(R"({"n":"ab","m":"x"})"));
  EXPECT_FALSE(short_name(R"({"n":"abc","m":"x"})"));
  EXPECT_FALSE(short_name(R"({"n":"ab","m":""})"));
  const SchemaMatch strings(R"({"type":"string","enum":["a",1,"b",null]})");
  EXPECT_TRUE(strings(R"("a")"));
  EXPECT_FALSE(strings("1"));
  EXPECT_FALSE(strings("null"));
  const SchemaMatch literal(R"({"const":"x","type":"string","title":"X"})");  // Pydantic's
  EXPECT_TRUE(literal(R"("x")"));
  const SchemaMatch in_enum(R"({"const":"b","enum":["a","b"]})");
  EXPECT_TRUE(in_enum(R"("b")"));
  EXPECT_FALSE(in_enum(R"("a")"));
  for (const auto& [bad, why] : std::vector<std::pair<const char*, const char*>>{
           {R"({"type":"integer","enum":["a"]})", "$.type: no enum value is of it"},
           {R"({"enum":["a","bb"],"maxLength":1})", "$.maxLength: beside enum: not supported"},
           {R"({"const":"c","enum":["a","b"]})", "$.const: not a value the enum beside it"},
           {R"({"$defs":{"r":{"type":"array","items":{"$ref":"#/$defs/r","maxItems":1}}},
                "$ref":"#/$defs/r"})",
            "maxItems: beside a recursive $ref"},
           {R"({"$defs":{"S":{"type":"string"}},"$ref":"#/$defs/S","type":"integer"})",
            "#/$defs/S.type: no type beside it is also here"}}) {
    EXPECT_THAT(JsonSchemaToPatterns(bad).status().message(), HasSubstr(why)) << bad;
  }
  // Merged through nested combinators; a keyword repeated with the same value, `required` in
  // both (joined) and `type` in both (the common types) merge.
  const SchemaMatch nested_all(R"({"type":"string","anyOf":[{"allOf":[{"maxLength":2}]}]})");
  EXPECT_TRUE(nested_all(R"("ab")"));
  EXPECT_FALSE(nested_all("123"));
  const SchemaMatch all_beside(R"({"anyOf":[{"type":"string"}],"allOf":[{"maxLength":2}]})");
  EXPECT_TRUE(all_beside(R"("ab")"));
  EXPECT_FALSE(all_beside(R"("abc")"));
  EXPECT_FALSE(all_beside("{}"));
  const SchemaMatch with_id(R"({"type":"object","required":["id"],"oneOf":[{"$ref":"#/$defs/A"}],
      "$defs":{"A":{"type":"object","properties":{"id":{"type":"integer"},"x":{"type":"integer"}},
      "required":["x"],"additionalProperties":false}}})");
  EXPECT_TRUE(with_id(R"({"id":1,"x":2})"));
  EXPECT_FALSE(with_id(R"({"x":2})"));
  EXPECT_FALSE(with_id(R"({"id":1})"));
  const SchemaMatch repeated(R"({"type":"object","anyOf":[{"type":"object","properties":
      {"a":{"type":"integer"}},"additionalProperties":false}]})");
  EXPECT_TRUE(repeated(R"({"a":1})"));
  EXPECT_FALSE(repeated(R"({"a":"x"})"));
  const SchemaMatch numbers(R"({"type":"number","anyOf":[{"type":"integer","minimum":3}]})");
  EXPECT_TRUE(numbers("4"));
  EXPECT_FALSE(numbers("4.5"));
  // A branch that admits nothing once the keywords beside it hold is dropped; where every
  // branch is, the schema is refused.
  const SchemaMatch object_only(R"({"type":"object","anyOf":[{"type":"null"},{"properties":
      {"a":{"type":"integer"}},"required":["a"]},false]})");
  EXPECT_TRUE(object_only(R"({"a":1})"));
  EXPECT_FALSE(object_only("null"));
  EXPECT_FALSE(object_only("{}"));
  const SchemaMatch via_ref(R"({"$defs":{"N":{"type":"null"},"S":{"type":"string"}},
      "type":"string","anyOf":[{"$ref":"#/$defs/N"},{"$ref":"#/$defs/S","maxLength":2}]})");
  EXPECT_TRUE(via_ref(R"("ab")"));
  EXPECT_FALSE(via_ref("null"));
  // Two references deep (an alias of the contradicting target), and a cycle of aliases (left
  // for the compiler, which names it).
  const SchemaMatch via_alias(R"({"$defs":{"M":{"$ref":"#/$defs/N"},"N":{"type":"null"},
      "S":{"type":"string"}},"type":"string","anyOf":[{"$ref":"#/$defs/M"},{"$ref":"#/$defs/S"}]})");
  EXPECT_TRUE(via_alias(R"("abc")"));
  EXPECT_FALSE(via_alias("null"));
  const auto cycle = Compile({Kind::kJsonSchema,
                              R"({"$defs":{"A":{"$ref":"#/$defs/B"},
      "B":{"$ref":"#/$defs/A"}},"anyOf":[{"$ref":"#/$defs/A"},{"type":"null"}]})",
                              {}},
                             std::make_shared<TokenTable>(std::vector<std::string>{"", "null"}));
  EXPECT_EQ(cycle.status().code(), absl::StatusCode::kInvalidArgument) << cycle.status();
  EXPECT_THAT(cycle.status().message(), HasSubstr("never ends"));
  const SchemaMatch short_text(R"({"type":"string","oneOf":[{"const":1},{"enum":[2,"b"]},
      {"const":"c","enum":["a"]}]})");
  EXPECT_TRUE(short_text(R"("b")"));
  EXPECT_FALSE(short_text("1"));
  EXPECT_FALSE(short_text("2"));
  EXPECT_FALSE(short_text(R"("c")"));
  EXPECT_THAT(JsonSchemaToPatterns(R"({"type":"string","anyOf":[{"type":"null"},false]})")
                  .status()
                  .message(),
              HasSubstr("$.anyOf[1]: false admits no value (and every other branch of anyOf"));
  EXPECT_THAT(JsonSchemaToPatterns(R"({"type":"string","allOf":[{"const":1}]})").status().message(),
              HasSubstr("$.allOf[0].type: no const value is of it"));
  // additionalProperties judges the properties beside it, items the prefixItems: split between
  // a combinator and its branch, they would judge others.
  for (const char* split : {R"({"properties":{"a":{"type":"integer"}},
                                "oneOf":[{"additionalProperties":false}]})",
                            R"({"prefixItems":[{"type":"integer"}],"anyOf":[{"items":false}]})",
                            R"({"additionalProperties":false,"anyOf":[{"properties":{"a":{}},
                                "required":["a"]}]})"}) {
    EXPECT_THAT(JsonSchemaToPatterns(split).status().message(), HasSubstr("split between"))
        << split;
  }
  // A set's finitely many values are those the type beside them keeps.
  const SchemaMatch set(R"({"type":"array","uniqueItems":true,"items":{"type":"string",
      "enum":["a",1]}})");
  EXPECT_TRUE(set(R"(["a"])"));
  EXPECT_FALSE(set("[1]"));
  // Keys must be strings: propertyNames that could admit another value is refused.
  for (const char* keys : {R"({"type":"object","propertyNames":true})",
                           R"({"type":"object","propertyNames":{"type":"string",
                               "anyOf":[{"maxLength":3}]}})"}) {
    EXPECT_THAT(JsonSchemaToPatterns(keys).status().message(),
                HasSubstr("$.propertyNames: a string schema"))
        << keys;
  }
}

TEST(JsonSchemaTest, ObjectsArraysAndAlternatives) {
  const SchemaMatch person(R"({"type":"object","properties":{"name":{"type":"string",
      "maxLength":4},"age":{"type":"integer","minimum":0},"tags":{"type":"array","items":
      {"enum":["a","b"]},"maxItems":2}},"required":["name"],"additionalProperties":false})");
  EXPECT_TRUE(person(R"({"name":"Ann"})"));
  EXPECT_TRUE(person(R"({"name":"Ann","age":3,"tags":["a","b"]})"));
  EXPECT_TRUE(person(R"({"name":"Ann","tags":[]})"));
  EXPECT_FALSE(person(R"({"age":3})"));                            // name is required
  EXPECT_FALSE(person(R"({"name":"Annie"})"));                     // maxLength
  EXPECT_FALSE(person(R"({"name":"Ann","tags":["a","b","a"]})"));  // maxItems
  EXPECT_FALSE(person(R"({"name":"Ann","x":1})"));                 // no other property
  EXPECT_FALSE(person(R"({ "name":"Ann"})"));                      // compact only
  const SchemaMatch any_of(R"({"anyOf":[{"type":"null"},{"$ref":"#/$defs/p"}],
      "$defs":{"p":{"type":"object","properties":{"x":{"type":"boolean"}},"required":["x"]}}})");
  EXPECT_TRUE(any_of("null"));
  EXPECT_TRUE(any_of(R"({"x":false})"));
  EXPECT_FALSE(any_of(R"({"x":1})"));
  const SchemaMatch optional(R"({"type":"object","properties":{"a":{"type":"null"},
      "b":{"const":"k"}}})");
  for (const char* ok : {"{}", R"({"a":null})", R"({"b":"k"})", R"({"a":null,"b":"k"})"}) {
    EXPECT_TRUE(optional(ok)) << ok;
  }
  EXPECT_FALSE(optional(R"({,"b":"k"})"));
  const SchemaMatch at_least(R"({"type":"array","items":{"type":"integer"},"minItems":3})");
  EXPECT_FALSE(at_least("[1]"));
  EXPECT_FALSE(at_least("[1,2]"));
  EXPECT_TRUE(at_least("[1,2,3,4,5]"));
  const SchemaMatch formats(R"({"type":"array","prefixItems":[{"type":"string","format":"date"},
      {"type":"string","pattern":"^[A-Z]{2}[0-9]$"}],"items":false})");
  EXPECT_TRUE(formats(R"(["2026-11-27","AB7"])"));
  EXPECT_FALSE(formats(R"(["2026-13-27","AB7"])"));
  EXPECT_FALSE(formats(R"(["2026-11-27","ab7"])"));
  EXPECT_TRUE(formats(R"(["2026-11-27"])"));  // no minItems: a shorter array validates
  EXPECT_TRUE(formats("[]"));
  // A tuple as Pydantic writes it: no items, minItems and maxItems the prefix's length.
  const SchemaMatch pair(R"({"type":"array","prefixItems":[{"type":"integer"},
      {"type":"string"}],"minItems":2,"maxItems":2})");
  EXPECT_TRUE(pair(R"([1,"a"])"));
  for (const char* bad : {"[1]", R"([1,"a",2])", R"(["a",1])", "[]"}) {
    EXPECT_FALSE(pair(bad)) << bad;
  }
  const SchemaMatch one_of_three(R"({"type":"array","prefixItems":[{"type":"integer"},
      {"type":"integer"},{"type":"integer"}],"minItems":1,"maxItems":2})");
  for (const char* ok : {"[1]", "[1,2]"}) EXPECT_TRUE(one_of_three(ok)) << ok;
  for (const char* bad : {"[]", "[1,2,3]"}) EXPECT_FALSE(one_of_three(bad)) << bad;
  const SchemaMatch sized_date(R"({"type":"string","format":"date","maxLength":10})");
  EXPECT_TRUE(sized_date(R"("2026-11-28")"));
  // ISO 8601 durations as RFC 3339 writes them (Pydantic's timedelta).
  const SchemaMatch duration(R"({"type":"string","format":"duration"})");
  for (const char* ok : {"P1Y2M3D", "P4W", "PT5H6M7S", "P1DT2H", "PT30S", "P2M", "PT1M"}) {
    EXPECT_TRUE(duration(absl::StrCat("\"", ok, "\""))) << ok;
  }
  for (const char* bad : {"P", "PT", "P1H", "PT1H5S", "1D", "P1W2D", "P1DT"}) {
    EXPECT_FALSE(duration(absl::StrCat("\"", bad, "\""))) << bad;
  }
  // Numbers between integer bounds, fractions included, exactly.
  const SchemaMatch range(R"({"type":"number","minimum":-2,"maximum":3})");
  for (const char* ok : {"-2", "-2.0", "-1.99", "-0.5", "0", "0.25", "2.999", "3", "3.00"}) {
    EXPECT_TRUE(range(ok)) << ok;
  }
  for (const char* bad : {"-2.01", "-3", "3.01", "3.5", "4", "-0", "1e2", "01"}) {
    EXPECT_FALSE(range(bad)) << bad;
  }
  const SchemaMatch open_unit(R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})");
  for (const char* ok : {"0.5", "0.001", "0.999"}) EXPECT_TRUE(open_unit(ok)) << ok;
  for (const char* bad : {"0", "0.0", "1", "1.0", "-0.5"}) EXPECT_FALSE(open_unit(bad)) << bad;
  const SchemaMatch below(R"({"type":"number","exclusiveMaximum":-1})");
  for (const char* ok : {"-1.5", "-2", "-100.25"}) EXPECT_TRUE(below(ok)) << ok;
  for (const char* bad : {"-1", "-1.0", "-0.5", "0", "3"}) EXPECT_FALSE(below(bad)) << bad;
  const SchemaMatch one_up(R"({"type":"number","minimum":1})");
  for (const char* ok : {"1", "1.5", "100"}) EXPECT_TRUE(one_up(ok)) << ok;
  for (const char* bad : {"0.99", "0", "-1"}) EXPECT_FALSE(one_up(bad)) << bad;
  // Bounds between integers: exact in decimal, for numbers; rounded inwards, for integers.
  const SchemaMatch half(R"({"type":"number","exclusiveMinimum":-0.5,"maximum":0.25})");
  for (const char* ok : {"-0.4999", "0", "0.25", "0.2500", "0.1"}) EXPECT_TRUE(half(ok)) << ok;
  for (const char* bad : {"-0.5", "-0.50", "0.2501", "1", "-1"}) EXPECT_FALSE(half(bad)) << bad;
  const SchemaMatch rounded(R"({"type":"integer","minimum":-2.5,"exclusiveMaximum":3.5})");
  for (const char* ok : {"-2", "0", "3"}) EXPECT_TRUE(rounded(ok)) << ok;
  for (const char* bad : {"-3", "4", "2.5"}) EXPECT_FALSE(rounded(bad)) << bad;
  // multipleOf: cents, halves, and an integer step with one bound.
  const SchemaMatch price(R"({"type":"number","exclusiveMinimum":0,"multipleOf":0.01})");
  for (const char* ok : {"0.01", "19.99", "20", "20.50"}) EXPECT_TRUE(price(ok)) << ok;
  for (const char* bad : {"0", "19.995", "-1", "2e3"}) EXPECT_FALSE(price(bad)) << bad;
  const SchemaMatch halves(R"({"type":"number","minimum":-1,"maximum":1,"multipleOf":0.5})");
  for (const char* ok : {"-1", "-0.5", "0", "0.5", "1.0"}) EXPECT_TRUE(halves(ok)) << ok;
  for (const char* bad : {"-1.5", "0.25", "1.5"}) EXPECT_FALSE(halves(bad)) << bad;
  const SchemaMatch tens(R"({"type":"integer","minimum":-25,"multipleOf":10})");
  for (const char* ok : {"-20", "0", "10", "123450"}) EXPECT_TRUE(tens(ok)) << ok;
  for (const char* bad : {"-30", "5", "123451", "10.0"}) EXPECT_FALSE(tens(bad)) << bad;
  const SchemaMatch billions(R"({"type":"integer","multipleOf":1e9})");
  for (const char* ok : {"-3000000000", "0", "7000000000"}) EXPECT_TRUE(billions(ok)) << ok;
  for (const char* bad : {"100000000", "1000000001"}) EXPECT_FALSE(billions(bad)) << bad;
  const SchemaMatch tiny_step(R"({"type":"integer","multipleOf":1e-20})");
  for (const char* ok : {"-3", "0", "41"}) EXPECT_TRUE(tiny_step(ok)) << ok;
  EXPECT_FALSE(tiny_step("0.5"));
  const SchemaMatch point(R"({"type":"number","minimum":2,"maximum":2})");
  EXPECT_TRUE(point("2"));
  EXPECT_TRUE(point("2.000"));
  EXPECT_FALSE(point("2.001"));
  // Dates as a date parser takes them: each month's days, February 29 in leap years only.
  const SchemaMatch date(R"({"type":"string","format":"date"})");
  for (const char* ok : {"2024-02-29", "2000-02-29", "0004-02-29", "2023-01-31", "2023-04-30",
                         "0001-01-01", "9999-12-31"}) {
    EXPECT_TRUE(date(absl::StrCat("\"", ok, "\""))) << ok;
  }
  for (const char* bad : {"2023-02-29", "1900-02-29", "2023-09-31", "2023-02-30", "0000-01-01",
                          "2023-00-10", "2023-01-00"}) {
    EXPECT_FALSE(date(absl::StrCat("\"", bad, "\""))) << bad;
  }
}

// Lengths beside a pattern or a format (Pydantic's constr(pattern=..., min_length=...)) count
// characters through a length group; an unanchored pattern's free text then writes no escape.
TEST(JsonSchemaTest, LengthsBesideAPatternOrAFormat) {
  const SchemaMatch code(R"({"type":"string","pattern":"^[a-z]+$","minLength":2,"maxLength":4})");
  for (const char* ok : {"ab", "abcd"}) EXPECT_TRUE(code(absl::StrCat("\"", ok, "\""))) << ok;
  for (const char* bad : {"a", "abcde", "ab1"}) {
    EXPECT_FALSE(code(absl::StrCat("\"", bad, "\""))) << bad;
  }
  const SchemaMatch loose(R"({"type":"string","pattern":"x","maxLength":3})");
  for (const char* ok : {"x", "axb", "\xc3\xa9x\xc3\xa9"}) {
    EXPECT_TRUE(loose(absl::StrCat("\"", ok, "\""))) << ok;
  }
  for (const char* bad : {"abcx", "y", R"(\nx)", "ax\xc3\xa9\xc3\xa9"}) {
    EXPECT_FALSE(loose(absl::StrCat("\"", bad, "\""))) << bad;
  }
  EXPECT_TRUE(SchemaMatch(R"({"type":"string","pattern":"x"})")(R"("\nx")"));  // no lengths
  // A pattern's text never holds what JSON escapes: \s is a space there, [ -~] no quote.
  const SchemaMatch words(R"({"type":"string","pattern":"^[A-Za-z\\s]+$"})");
  EXPECT_TRUE(words(R"("Ann Lee")"));
  for (const char* bad : {R"("Ann\tLee")", "\"Ann\tLee\""}) EXPECT_FALSE(words(bad)) << bad;
  EXPECT_TRUE(SchemaMatch(R"({"type":"string","pattern":"^a.b$"})")(R"("a-b")"));
  const SchemaMatch printable(R"({"type":"string","pattern":"^[ -~]{2}$"})");
  EXPECT_TRUE(printable(R"("a~")"));
  for (const char* bad : {R"("a\"")", R"("\\a")", R"("\"a")"}) {
    EXPECT_FALSE(printable(bad)) << bad;
  }
  const SchemaMatch email(R"({"type":"string","format":"email","maxLength":8})");
  EXPECT_TRUE(email(R"("ab@c.de")"));
  EXPECT_FALSE(email(R"("abc@d.efg")"));
  const SchemaMatch time(R"({"type":"string","format":"time","minLength":12})");
  EXPECT_TRUE(time(R"("10:20:30.55Z")"));
  EXPECT_FALSE(time(R"("10:20:30.5Z")"));
}

// IP addresses as Pydantic writes them (IPv4Address, IPv6Address, IPvAnyAddress), each
// checked by Python's ipaddress when these lists were written; bytes and SecretStr (binary,
// password) are any string.
TEST(JsonSchemaTest, AddressesAndFreeFormats) {
  const std::vector<std::string> v4 = {"0.0.0.0", "10.1.2.3", "255.255.255.255", "192.168.0.99"};
  const std::vector<std::string> v6 = {"::",
                                       "::1",
                                       "1::",
                                       "1:2:3:4:5:6:7:8",
                                       "fe80::1",
                                       "ABCD:ef01::",
                                       "1:2:3:4:5:6:7::",
                                       "::2:3:4:5:6:7:8",
                                       "2001:db8::8a2e:370:7334"};
  const std::vector<std::string> neither = {"256.1.1.1",
                                            "1.2.3",
                                            "01.2.3.4",
                                            "1.2.3.4.5",
                                            "1:2:3:4:5:6:7:8:9",
                                            "1::2::3",
                                            ":1:2:3:4:5:6:7:8",
                                            "12345::",
                                            "::1:2:3:4:5:6:7:8",
                                            "g::1",
                                            "1:2:3:4:5:6:7",
                                            ":",
                                            ""};
  const SchemaMatch ipv4(R"({"type":"string","format":"ipv4"})");
  const SchemaMatch ipv6(R"({"type":"string","format":"ipv6"})");
  const SchemaMatch any(R"({"type":"string","format":"ipvanyaddress"})");
  const auto quoted = [](const std::string& t) { return "\"" + t + "\""; };
  for (const std::string& a : v4) {
    EXPECT_TRUE(ipv4(quoted(a))) << a;
    EXPECT_FALSE(ipv6(quoted(a))) << a;
    EXPECT_TRUE(any(quoted(a))) << a;
  }
  for (const std::string& a : v6) {
    EXPECT_FALSE(ipv4(quoted(a))) << a;
    EXPECT_TRUE(ipv6(quoted(a))) << a;
    EXPECT_TRUE(any(quoted(a))) << a;
  }
  for (const std::string& a : neither) EXPECT_FALSE(any(quoted(a))) << a;
  const SchemaMatch secret(
      R"({"type":"string","format":"password","writeOnly":true,"maxLength":3})");
  EXPECT_TRUE(secret(R"("a\"b")"));
  EXPECT_FALSE(secret(R"("abcd")"));
  EXPECT_TRUE(SchemaMatch(R"({"type":"string","format":"binary"})")(R"("\u0000x")"));
}

// format "uri": web URLs (Pydantic's AnyUrl and HttpUrl write it), bounded under a maxLength
// so that no URL of the language is longer.
TEST(JsonSchemaTest, UriFormatIsWebUrls) {
  const std::vector<std::string> good = {
      "http://a",
      "https://example.com",
      "https://www.example.co.uk/a/b/c.html",
      "http://localhost:8080/",
      "http://10.0.0.1:65535/x?y=1&z=%20#top",
      "https://api.example.com/v1/items?q=a+b&sort=-date#frag/ment?",
      "https://en.wikipedia.org/wiki/Bracket_(disambiguation)",
      "https://x.io/~user/@me:1;p=2!$&'*,"};
  const std::vector<std::string> bad = {
      "example.com", "https://", "ftp://example.com", "http://exa mple.com", "http://-a.com",
      "http://a.com:65536", "http://a.com:080", "http://a.com/%zz", "http://a.com/a b",
      "http://a.com/\\", "http://a.com/\"", "mailto:a@b.com", "http://a.com#x#y", "http://.a.com",
      "",
      // Hosts Pydantic's HttpUrl refuses: a number as the last label, a bad IPv4, Punycode.
      "http://a.1", "http://1.2.3.999", "http://1.2.3.4.5", "http://99999999999",
      "http://xn--a.com"};
  const std::string longest_path = "https://a.com/" + std::string(300, 'p');
  for (const char* schema :
       {R"({"type":"string","format":"uri"})", R"({"type":"string","format":"uri","minLength":1})",
        R"({"type":"string","format":"uri","minLength":1,"maxLength":2083})"}) {
    const SchemaMatch m(schema);
    for (const std::string& u : good) EXPECT_TRUE(m("\"" + u + "\"")) << u << " under " << schema;
    for (const std::string& u : bad) EXPECT_FALSE(m("\"" + u + "\"")) << u << " under " << schema;
    EXPECT_TRUE(m("\"" + longest_path + "\"")) << schema;
  }
  // Bounded: the longest host, port, path, query and fragment together stay within the bound.
  for (int max_length : {64, 100, 2083}) {
    const SchemaMatch m(
        absl::StrCat(R"({"type":"string","format":"uri","maxLength":)", max_length, "}"));
    EXPECT_TRUE(m(R"("https://ab.cd/e?f=g#h")")) << max_length;
    EXPECT_FALSE(m("\"https://a.com/" + std::string(max_length, 'p') + "\"")) << max_length;
    // Grow each part of a URL one unit at a time (a percent escape, the longest unit) while
    // the language holds it: the result is never longer than the bound.
    std::string url = "https://";
    const auto grow = [&](const std::string& unit, const std::string& opener) {
      if (m("\"" + url + opener + "\"")) url += opener;
      while (m("\"" + url + unit + "\"")) url += unit;
    };
    for (int label = 0; label < 6; ++label) grow("a", label == 0 ? "" : ".a");
    grow("5", ":6");
    grow("%20", "/");
    grow("%20", "?");
    grow("%20", "#");
    EXPECT_TRUE(m("\"" + url + "\"")) << url;
    EXPECT_LE(url.size(), static_cast<size_t>(max_length)) << url;
    EXPECT_GT(url.size(), static_cast<size_t>(max_length) * 3 / 4) << url;
  }
}

TEST(JsonSchemaTest, WhatIsNotSupportedNamesItsPath) {
  for (const auto& [schema, path] : std::vector<std::pair<std::string, std::string>>{
           {R"({"type":"object","properties":{"age":{"type":"number","minimum":1e-40}}})",
            "$.properties.age.minimum: '0.0000"},
           {R"({"type":"number","minimum":0.5,"exclusiveMaximum":0.5})", "$.maximum: no number"},
           {R"({"type":"integer","minimum":2.1,"maximum":2.9})", "$.maximum: no integer"},
           {R"({"type":"object","properties":{"a":{"type":"string","format":"hostname"}}})",
            "$.properties.a.format"},
           {R"({"type":"array","items":{"type":"integer"},"uniqueItems":true})",
            "$.uniqueItems: served where the items are a finite set"},
           {R"({"type":"array","items":{"enum":[1,2,3]},"uniqueItems":true,"maxItems":2})",
            "$.maxItems: where each of 3 values"},
           {R"({"type":"array","items":{"enum":[1,2,3]},"uniqueItems":true,"minItems":2})",
            "$.minItems: where each of 3 values"},
           {R"({"type":"array","items":{"enum":[]},"uniqueItems":true,"minItems":1})",
            "$.items.enum: a non-empty list"},
           {R"({"type":"array","items":{"enum":["a"],"not":{}},"uniqueItems":true})",
            "$.items.not: this keyword is not supported"},
           {R"({"type":"object","properties":{"a":{}},"minProperties":1})",
            "$.minProperties: supported on an object without properties"},
           {R"({"type":"object","propertyNames":{"type":"integer"}})",
            "$.propertyNames: a string schema"},
           {R"({"type":"object","propertyNames":{"enum":["a",1]}})", "$.propertyNames: 1 is not"},
           {R"({"type":"object","patternProperties":{"a":{},"b":{}}})",
            "$.patternProperties: one pattern"},
           {R"({"type":"object","additionalProperties":{"type":"widget"}})",
            "$.additionalProperties.type"},
           {R"({"type":"string","format":"uri","maxLength":40})",
            "$.maxLength: a maxLength of at least 64"},
           {R"({"type":"string","format":"uri","minLength":9})", "$.minLength: with format"},
           {R"({"type":"string","format":"date","pattern":"^2026"})",
            "$.pattern: a pattern together with a format"},
           {R"({"type":"array","items":{"type":"integer","multipleOf":7}})",
            "$.items.multipleOf: served for"},
           {R"({"type":"number","multipleOf":-0.5})", "$.multipleOf: a step above 0"},
           {R"({"type":"string","format":"date","minLength":11})",
            "$.minLength: no date is within the length bounds"},
           {R"({"type":"array","prefixItems":[{"type":"integer"}]})",
            "$.prefixItems: supported with items: false, or a maxItems"},
           {R"({"type":"array","prefixItems":[{"type":"integer"}],"items":false,"minItems":2})",
            "$.minItems: more than the prefixItems allow"},
           {R"({"type":"integer","minimum":1,"maximum":4,"multipleOf":5})",
            "$.multipleOf: no multiple"},
           {R"({"$ref":"#/$defs/missing"})", "$.$ref"},
           {[] {
              // A chain of 17 distinct definitions, each referring to the next.
              std::string defs;
              for (int i = 0; i < 17; ++i) {
                absl::StrAppend(&defs, i ? "," : "", "\"d", i, "\":{\"type\":\"array\",\"items\":",
                                i < 16 ? absl::StrCat("{\"$ref\":\"#/$defs/d", i + 1, "\"}")
                                       : std::string("{}"),
                                "}");
              }
              return absl::StrCat("{\"$defs\":{", defs, "},\"$ref\":\"#/$defs/d0\"}");
            }(),
            "references nest more than 16 deep"},
           {R"({"type":"widget"})", "$.type"},
           {"{not json", "not valid JSON"},
           {R"({"type":"string","pattern":"^\\\\[\"]$"})",
            "$.pattern: the pattern matches only text"},
           {R"({"type":"string","pattern":"^(?~a)$"})", "not supported here"},
           {R"({"type":"integer","exclusiveMaximum":-9223372036854775808})", "within +-10^15"},
           {R"({"type":"integer","maximum":18446744073709551615})", "within +-10^15"},
           {[] {
              // Under 1 KB, nesting 40 deep, but each array level doubles the pattern.
              std::string s;
              for (int i = 0; i < 40; ++i) s += R"({"type":"array","items":)";
              s += R"({"type":"integer"})";
              for (int i = 0; i < 40; ++i) s += "}";
              return s;
            }(),
            "more than 2 MiB"},
           {std::string(50000, '[') + std::string(50000, ']'), "nests deeper than 64"},
           {[] {
              std::string s;
              for (int i = 0; i < 5000; ++i) s += R"({"type":"array","items":)";
              s += "{}";
              for (int i = 0; i < 5000; ++i) s += "}";
              return s;
            }(),
            "nests deeper than 64"}}) {
    auto r = JsonSchemaToPatterns(schema);
    ASSERT_FALSE(r.ok()) << schema;
    EXPECT_THAT(r.status().message(), HasSubstr("constraint.json_schema: "));
    EXPECT_THAT(r.status().message(), HasSubstr(path)) << r.status();
  }
}

}  // namespace
}  // namespace llm::constraint
