// The chat-template Jinja engine, feature by feature (each expected output is what Python
// jinja2 with trim_blocks and lstrip_blocks prints), its limits and errors, and how a model's
// template is found. The byte-for-byte agreement on real templates is
// frontend.chat_template_agreement.
#include "worker/frontend/chat/chat_template.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "worker/frontend/chat/jinja_template.h"

namespace llm::frontend {
namespace {

using jinja::RenderOptions;
using jinja::Template;
using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

std::string Render(const std::string& source, const Json& context = Json::object(),
                   const RenderOptions& options = {}) {
  auto t = Template::Parse(source);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return "<parse error>";
  auto r = t->Render(context, options);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : "<render error>";
}

absl::Status RenderError(const std::string& source, const Json& context = Json::object(),
                         const RenderOptions& options = {}) {
  auto t = Template::Parse(source);
  if (!t.ok()) return t.status();
  return t->Render(context, options).status();
}

TEST(JinjaTest, TrimAndLstripBlocksAndWhitespaceControl) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(Render("a\n  {% if true %}\n    b\n  {% endif %}\nc"), "a\n    b\nc");
  EXPECT_EQ(Render("x  {{- ' y ' -}}  z"), "x y z");
  EXPECT_EQ(Render("a {%- if true -%} b {%- endif %} c"), "ab c");
  EXPECT_EQ(Render("a\n{# comment #}\nb"), "a\nb");
  EXPECT_EQ(Render("a   {%+ if true %}b{% endif %}"), "a   b");  // '+': no lstrip
  EXPECT_EQ(Render("{{ 'x' }}\n{{ 'y' }}"), "x\ny");             // no trim after }}
}

TEST(JinjaTest, LoopsWithFiltersAndLoopVariables) {
  const Json ctx = {{"xs", {1, 2, 3, 4, 5}}};
  EXPECT_EQ(
      Render("{% for x in xs if x is odd %}{{ x }}{{ ',' if not loop.last }}{% endfor %}", ctx),
      "1,3,5");
  EXPECT_EQ(Render("{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}"
                   "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %} {% endfor %}",
                   {{"xs", {7, 8}}}),
            "1/0/2F 2/1/1L ");
  EXPECT_EQ(Render("{% for x in xs %}{{ loop.previtem }}>{{ x }}>{{ loop.nextitem }};{% endfor %}",
                   {{"xs", {1, 2, 3}}}),
            ">1>2;1>2>3;2>3>;");
  EXPECT_EQ(Render("{% for x in xs %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}"
                   "{% continue %}{% endif %}{{ x }}{% endfor %}",
                   ctx),
            "2");
  EXPECT_EQ(Render("{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}",
                   {{"d", {{"b", 1}, {"a", 2}}}}),
            "b=1;a=2;");  // insertion order
  EXPECT_EQ(Render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
}

TEST(JinjaTest, ScopesNamespacesAndMacros) {
  // A set inside a loop stays in the loop; a namespace carries state out.
  EXPECT_EQ(Render("{% set n = 0 %}{% for x in [1,2] %}{% set n = n + x %}{% endfor %}{{ n }}"),
            "0");
  EXPECT_EQ(Render("{% set ns = namespace(n=0) %}{% for x in [1,2] %}{% set ns.n = ns.n + x %}"
                   "{% endfor %}{{ ns.n }}"),
            "3");
  EXPECT_EQ(Render("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n }}*{{ fact(n - 1) }}"
                   "{% endif %}{% endmacro %}{{ fact(4) }}"),
            "4*3*2*1");
  EXPECT_EQ(Render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('a') }} {{ greet(name='b', punct='?') }}"),
            "Hi a! Hi b?");
  EXPECT_EQ(Render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(Render("{% set block %}x{{ 1 + 1 }}{% endset %}[{{ block }}]"), "[x2]");
}

TEST(JinjaTest, ExpressionsFiltersTestsAndMethods) {
  EXPECT_EQ(Render("{{ 'abcdef'[::-1] }} {{ [1,2,3,4][1:3] }} {{ 'héllo'[-2:] }} {{ xs[-1] }}",
                   {{"xs", {1, 2}}}),
            "fedcba [2, 3] lo 2");
  EXPECT_EQ(Render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }}"),
            "3 -4 1 2 1024 3.5");
  EXPECT_EQ(Render("{{ 'a' ~ 1 ~ none }} {{ 'x' + 'y' }} {{ [1] + [2] }} {{ 'ab' * 2 }}"),
            "a1None xy [1, 2] abab");
  EXPECT_EQ(Render("{{ 'b' in 'abc' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': 1} }}"),
            "True True True");
  EXPECT_EQ(Render("{{ 'yes' if x else 'no' }}{{ 'z' if false }}", {{"x", 0}}), "no");
  EXPECT_EQ(Render("{{ x is defined }} {{ y is not defined }} {{ none is none }} "
                   "{{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 1 is number }}",
                   {{"x", 1}}),
            "True True True True True True True");
  EXPECT_EQ(Render("{{ '  a b  '|trim }}|{{ 'xxaxx'.strip('x') }}|{{ ' a'.lstrip() }}|"
                   "{{ 'a,b,,c'.split(',') }}|{{ 'a b  c'.split() }}"),
            "a b|a|a|['a', 'b', '', 'c']|['a', 'b', 'c']");
  EXPECT_EQ(Render("{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} "
                   "{{ 'a-b'.replace('-', '+') }} {{ '{} and {name}'.format(1, name='n') }}"),
            "True True a+b 1 and n");
  EXPECT_EQ(
      Render("{{ xs|length }} {{ 'héllo'|length }} {{ xs|join('-') }} {{ xs|first }}"
             "{{ xs|last }} {{ xs|reverse|list }} {{ [3,1,2]|sort }} {{ [1,1,2]|unique|list }}",
             {{"xs", {1, 2, 3}}}),
      "3 5 1-2-3 13 [3, 2, 1] [1, 2, 3] [1, 2]");
  const Json msgs = {{"messages",
                      {{{"role", "user"}, {"content", "a"}},
                       {{"role", "assistant"}, {"content", "b"}},
                       {{"role", "user"}, {"content", "c"}}}}};
  EXPECT_EQ(Render("{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')"
                   "|join }} {{ ['a', 'b']|reject('equalto', 'a')|list }}",
                   msgs),
            "ac ['b']");
  EXPECT_EQ(Render("{{ 'a\\nb'|indent(2) }}|{{ 'a\\nb'|indent(2, first=true) }}"),
            "a\n  b|  a\n  b");
  EXPECT_EQ(Render("{{ x|default('d') }} {{ ''|default('e', true) }} {{ 1|string ~ 'x' }}"),
            "d e 1x");
  EXPECT_EQ(Render("{{ {'a': 'é', 'b': [1, 2.5, none, true]}|tojson }}"),
            R"({"a": "é", "b": [1, 2.5, null, true]})");
  EXPECT_EQ(Render("{{ {'a': [1]}|tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(Render("{{ d }} {{ [1.0, 'it\\'s'] }}", {{"d", {{"k", "v"}}}}),
            "{'k': 'v'} [1.0, \"it's\"]");
  RenderOptions pinned;
  pinned.today = "2024-07-23";
  EXPECT_EQ(Render("{{ strftime_now('%d %b %Y') }}", Json::object(), pinned), "23 Jul 2024");
}

TEST(JinjaTest, UndefinedValuesAreLenientUntilUsed) {
  EXPECT_EQ(Render("[{{ missing }}]{% for x in missing %}x{% endfor %}{{ m.content if m }}",
                   {{"m", nullptr}}),
            "[]");
  EXPECT_EQ(
      Render("{{ d.nope }}|{{ d['nope'] }}|{{ (d.nope is defined) }}", {{"d", Json::object()}}),
      "||False");
  // Attribute access on an undefined value fails, naming the line and the value.
  const absl::Status st = RenderError("line1\n{{ missing.attr }}");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("chat template line 2"));
  EXPECT_THAT(st.message(), HasSubstr("'missing' is undefined"));
}

TEST(JinjaTest, ErrorsNameTheLine) {
  // jinja2 drops the template's final newline, so the end is on line 3.
  auto st = Template::Parse("a\n{% if x %}\nb\n").status();
  EXPECT_THAT(st.message(), HasSubstr("chat template line 3"));
  EXPECT_THAT(st.message(), HasSubstr("endif"));
  st = Template::Parse("{{ x|nosuchfilter }}").status();
  EXPECT_THAT(st.message(), HasSubstr("no filter named 'nosuchfilter'"));
  st = Template::Parse("\n\n{% frobnicate %}").status();
  EXPECT_THAT(st.message(), HasSubstr("chat template line 3: unknown tag 'frobnicate'"));
  st = Template::Parse("{{ 'unterminated }}").status();
  EXPECT_THAT(st.message(), HasSubstr("unterminated string"));
  st = RenderError("{{ raise_exception('Roles must alternate') }}");
  EXPECT_EQ(st.message(), "chat template raised: Roles must alternate");
  st = RenderError("\n{{ 1 + 'a' }}");
  EXPECT_THAT(st.message(), HasSubstr("chat template line 2: unsupported operand"));
}

TEST(JinjaTest, LimitsEndRunawayTemplates) {
  RenderOptions small;
  small.max_loop_iterations = 1000;
  small.max_recursion_depth = 10;
  small.max_output_bytes = 4096;
  auto st =
      RenderError("{% for i in range(10) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
                  Json::object(), small);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("loop iterations"));
  st = RenderError("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", Json::object(), small);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("nested more than 10"));
  st = RenderError("{% for i in range(100) %}{{ 'x' * 100 }}{% endfor %}", Json::object(), small);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("exceeds 4096 bytes"));
}

TEST(ChatTemplateTest, FindsTheTemplateLikeTransformers) {
  const std::string dir = llm::testing::MakeTempDir("chat-template");
  const Json msgs = Json::array({{{"role", "user"}, {"content", "hi"}}});
  std::ofstream(dir + "/tokenizer_config.json") << R"({
    "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
    "chat_template": [
      {"name": "default", "template": "D{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"},
      {"name": "tool_use", "template": "T{{ tools|length }}"}]})";
  auto c = ChatTemplate::Load(dir, "");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c->Apply(msgs, nullptr, true, Json::object()), "D<s>hi</s>");
  EXPECT_EQ(*c->Apply(msgs, Json::array({Json::object()}), true, Json::object()), "T1");
  // chat_template.jinja beside it wins; an explicit file wins over both.
  std::ofstream(dir + "/chat_template.jinja") << "J{{ add_generation_prompt }}{{ tools }}";
  c = ChatTemplate::Load(dir, "");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c->Apply(msgs, nullptr, false, Json::object()), "JFalseNone");
  std::ofstream(dir + "/other.jinja") << "O{{ enable_thinking }}";
  c = ChatTemplate::Load(dir, dir + "/other.jinja");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c->Apply(msgs, nullptr, true, Json{{"enable_thinking", false}}), "OFalse");
  // None at all: NOT_FOUND saying what to set; a broken one names the file and line.
  const std::string empty = llm::testing::MakeTempDir("chat-template-none");
  EXPECT_EQ(ChatTemplate::Load(empty, "").status().code(), absl::StatusCode::kNotFound);
  std::ofstream(empty + "/bad.jinja") << "ok\n{% if %}";
  const absl::Status st = ChatTemplate::Load(empty, empty + "/bad.jinja").status();
  EXPECT_THAT(st.message(), HasSubstr("bad.jinja"));
  EXPECT_THAT(st.message(), HasSubstr("line 2"));
}

// Values nested deeper than any chat needs are refused before anything recurses over them (the
// copy into the template's context overflowed the stack at 20,000 levels).
TEST(ChatTemplateTest, DeepNestingIsRefusedNotACrash) {
  const std::string dir = llm::testing::MakeTempDir("chat-template-deep");
  std::ofstream(dir + "/t.jinja") << "{{ messages|length }}";
  auto c = ChatTemplate::Load(dir, dir + "/t.jinja");
  ASSERT_TRUE(c.ok()) << c.status();
  Json deep = "x";
  for (int i = 0; i < 20000; ++i) deep = Json::array({std::move(deep)});
  const Json msgs = Json::array({{{"role", "user"}, {"content", std::move(deep)}}});
  auto r = c->Apply(msgs, nullptr, true, Json::object());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("messages: nested more than 66 deep"));
  Json tools = Json::array();
  for (int i = 0; i < 100; ++i) tools = Json::array({std::move(tools)});
  r = c->Apply(Json::array(), tools, true, Json::object());
  EXPECT_THAT(r.status().message(), HasSubstr("tools: nested more than 64 deep"));
}

// A prefill (llm.v1.Chat.continue_final_message): the conversation rendered up to the
// assistant's header, then the assistant's text, and nothing after it (no end-of-turn), on
// real templates: ChatML (Qwen 2.5), Llama 3.1 and Mistral (whose assistant turn has no header).
TEST(ChatTemplateTest, ContinuingEndsOnTheLastMessagesText) {
  const Json question = Json::array({{{"role", "user"}, {"content", "Capital of France?"}}});
  Json prefilled = question;
  prefilled.push_back({{"role", "assistant"}, {"content", "The capital is"}});
  for (const char* name : {"qwen25", "llama31", "mistral_v03"}) {
    const std::string file = absl::StrCat("chat-templates/templates/", name, ".jinja");
    LLM_REQUIRE_SHARED(file);
    auto c = ChatTemplate::Load("", llm::testing::SharedPath(file));
    ASSERT_TRUE(c.ok()) << name << ": " << c.status();
    c->DefaultSpecialTokens("<s>", "</s>");
    auto asked = c->Apply(question, nullptr, /*add_generation_prompt=*/true, Json::object());
    auto continued = c->ApplyContinuing(prefilled, nullptr, Json::object());
    ASSERT_TRUE(asked.ok() && continued.ok()) << name << ": " << continued.status();
    EXPECT_TRUE(continued->ends_with("The capital is")) << name << ": " << *continued;
    // Everything before the text is the question's prompt (Mistral: its turn, then the text).
    EXPECT_TRUE(continued->starts_with(std::string(absl::StripSuffix(*asked, "</s>")))) << name;
  }
}

// The cut is where the template writes the last message, whatever the text: Llama 3.1 trims
// it, and the same words stand in an earlier turn.
TEST(ChatTemplateTest, ContinuingCutsAtTheLastMessageNotAnEarlierCopy) {
  const std::string file = "chat-templates/templates/llama31.jinja";
  LLM_REQUIRE_SHARED(file);
  auto c = ChatTemplate::Load("", llm::testing::SharedPath(file));
  ASSERT_TRUE(c.ok()) << c.status();
  const Json question = Json::array({{{"role", "user"}, {"content", "Is it Paris?"}}});
  Json prefilled = question;
  prefilled.push_back({{"role", "assistant"}, {"content", " Paris"}});
  auto asked = c->Apply(question, nullptr, /*add_generation_prompt=*/true, Json::object());
  auto continued = c->ApplyContinuing(prefilled, nullptr, Json::object());
  ASSERT_TRUE(asked.ok() && continued.ok()) << continued.status();
  EXPECT_EQ(*continued, *asked + " Paris");
}

TEST(ChatTemplateTest, ContinuingNeedsTextTheTemplateWrites) {
  auto c = ChatTemplate::FromSource(
      "{% for m in messages %}[{{ m.role }}]{{ m.content | upper }}{% endfor %}", std::nullopt,
      std::nullopt);
  ASSERT_TRUE(c.ok()) << c.status();
  const Json written = Json::array({{{"role", "assistant"}, {"content", "ok"}}});
  auto r = c->ApplyContinuing(written, nullptr, Json::object());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("chat.continue_final_message"));
  EXPECT_THAT(r.status().message(), HasSubstr("does not write the last message's text"));
  const Json empty = Json::array({{{"role", "assistant"}, {"content", "  "}}});
  EXPECT_THAT(c->ApplyContinuing(empty, nullptr, Json::object()).status().message(),
              HasSubstr("no text to continue"));
}

}  // namespace
}  // namespace llm::frontend
