// The Jinja engine of chat templates, feature by feature. Every expected output in the tables
// below is what Python jinja2 3.1 prints with transformers' apply_chat_template environment
// (trim_blocks, lstrip_blocks, loopcontrols, its tojson); errors, limits and the globals follow.
// frontend.chat_template_agreement checks real templates byte for byte against jinja2 itself.
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/frontend/chat/jinja_template.h"

namespace llm::frontend::jinja {
namespace {

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

absl::Status Error(const std::string& source, const Json& context = Json::object(),
                   const RenderOptions& options = {}) {
  auto t = Template::Parse(source);
  if (!t.ok()) return t.status();
  return t->Render(context, options).status();
}

// trim_blocks, lstrip_blocks (also for comments, not with '{%+'), '-' markers, the final newline
// dropped, \r\n normalised, raw blocks.
TEST(JinjaTest, WhitespaceRules) {
  EXPECT_EQ(Render("a\n  {% if true %}\n  b\n  {% endif %}\nc\n"), "a\n  b\nc");
  EXPECT_EQ(Render("a\n  {%- if true %}\nb{% endif -%}\n\n  c"), "abc");
  EXPECT_EQ(Render("  {{ 'x' }}\n  {# comment #}\nafter\n    {#- c2 #} z"), "  x\nafter z");
  EXPECT_EQ(Render("x  {% if true %}y{% endif %}\n  {%+ if true %}z{% endif %}\n"), "x  y  z");
  EXPECT_EQ(Render("{% if true +%}\nkeep{% endif %}"), "\nkeep");
  EXPECT_EQ(Render("a {{- ' b ' -}} c\n{{ 'd' }}\n\n"), "a b c\nd\n");
  EXPECT_EQ(Render("a\r\nb\r\n{% if true %}\r\nc\r\n{% endif %}\r\n"), "a\nb\nc\n");
  EXPECT_EQ(Render("{% raw %}{{ x }}{% if %}{% endraw %}\n  {% raw -%}  y  {%- endraw %}"),
            "{{ x }}{% if %}y");
  EXPECT_EQ(Render("text {%- if true -%} \n\n x \n\n {%- endif -%} end"), "textxend");
  EXPECT_EQ(Render("  {% for x in [1,2] %}\n    {{ x }}\n  {% endfor %}\n"), "    1\n    2\n");
  EXPECT_EQ(Render("a{% generation %}\n  gen {{ 1 }}{% endgeneration %}b"), "a  gen 1b");
}

// printing, iterating, testing and defaulting an undefined value (jinja2's default Undefined).
TEST(JinjaTest, UndefinedIsLenientWhereJinja2IsLenient) {
  EXPECT_EQ(Render("[{{ x }}]{% for a in x %}{{ a }}{% endfor %}[{{ x|length }}][{{ x|default('d') "
                   "}}][{{ x ~ 'a' }}]"),
            "[][0][d][a]");
  EXPECT_EQ(Render("{{ x is defined }} {{ x is undefined }} {{ x is none }} {{ not x }} {{ x == y "
                   "}} {{ x == none }}"),
            "False True False True True False");
  EXPECT_EQ(Render("{{ d.missing }}|{{ d.missing is defined }}|{{ d.k is defined }}|{{ d.get('a', "
                   "5) }}|{{ (x or 'z') }}",
                   Json::parse(R"json({"d": {"k": null}})json")),
            "|False|True|5|z");
  EXPECT_EQ(
      Render(
          "{{ x|string }}|{{ x|upper }}|{{ x|trim }}|{{ x|first }}|{{ x|list }}|{{ x|join(',') }}"),
      "||||[]|");
  EXPECT_EQ(Render("{{ xs|map(attribute='zz')|list }}", Json::parse(R"json({"xs": [{}, {}]})json")),
            "[Undefined, Undefined]");
}

// loop variables, `for ... if ...` (loop.last and loop.length count kept items), else,
// break/continue, tuple targets, scoping.
TEST(JinjaTest, ForLoops) {
  EXPECT_EQ(Render("{% for x in xs if x > 1 %}{{ loop.index }}/{{ loop.length }}/{{ loop.last "
                   "}}/{{ loop.first }}/{{ loop.revindex }}/{{ loop.index0 }}/{{ loop.previtem "
                   "}}/{{ loop.nextitem }};{% endfor %}",
                   Json::parse(R"json({"xs": [1, 2, 0, 3, 4, 1]})json")),
            "1/3/False/True/3/0//3;2/3/False/False/2/1/2/4;3/3/True/False/1/2/3/;");
  EXPECT_EQ(Render("{% for x in [] %}a{% else %}empty{% endfor %}|{% for x in [1] if false %}a{% "
                   "else %}E{% endfor %}"),
            "empty|E");
  EXPECT_EQ(Render("{% for x in [1,2,3,4,5] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 "
                   "%}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "13");
  EXPECT_EQ(Render("{% for k in d %}{{ k }}={{ d[k] }};{% endfor %}|{% for a, b in d|items %}{{ a "
                   "}}:{{ b }},{% endfor %}|{% for a, b in d.items() %}{{ a }}{{ b }}{% endfor %}",
                   Json::parse(R"json({"d": {"x": 1, "y": [2]}})json")),
            "x=1;y=[2];|x:1,y:[2],|x1y[2]");
  EXPECT_EQ(Render("{% for x in 'héllo' %}{{ x }}{{ loop.index }}{% endfor %}"), "h1é2l3l4o5");
  EXPECT_EQ(Render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}|{% "
                   "if true %}{% set y = 5 %}{% endif %}{{ y }}"),
            "21|5");
  EXPECT_EQ(Render("{% for a in [[1,2],[3,4]] %}{% for b in a %}{{ loop.index }}{{ b }}{% endfor "
                   "%}{{ loop.index }}|{% endfor %}"),
            "11221|13242|");
  EXPECT_EQ(Render("{% for x in [1,2,3] %}{{ loop.cycle('a', 'b') }}{% endfor %}|{% for x in "
                   "range(3) %}{{ x }}{% endfor %}|{{ range(5, 0, -2)|list }}"),
            "aba|012|[5, 3, 1]");
  // Each iteration starts from the enclosing scope: a `set` in one is gone in the next (it was
  // carried over, so a value set under an `if` in one iteration showed in the later ones).
  EXPECT_EQ(Render("{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = 10 %}{{ x }}{% endfor "
                   "%}{{ x }}"),
            "1101101");
  EXPECT_EQ(Render("{% for i in [1,2,3] %}{% if i == 1 %}{% set x = 'first' %}{% endif %}{{ x "
                   "}};{% endfor %}"),
            "first;;;");
  EXPECT_EQ(Render("{% for i in [1,2] %}{% for j in [1,2] %}{% if j == 1 %}{% set y = i %}{% "
                   "endif %}[{{ y }}]{% endfor %}{% endfor %}"),
            "[1][][2][]");
}

// set (tuple, block form), namespace, macros with defaults, keyword arguments, varargs and
// recursion.
TEST(JinjaTest, SetNamespaceAndMacros) {
  EXPECT_EQ(
      Render("{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set c = (3, 4) %}{{ c }}|{% set x %}block {{ "
             "a }}{% endset %}[{{ x }}]|{% set y -%}  trim  {%- endset %}[{{ y }}]"),
      "12|(3, 4)|[block 1]|[trim]");
  EXPECT_EQ(Render("{% set ns = namespace(a=1, l=[]) %}{% for i in [1,2] %}{% set ns.a = ns.a + i "
                   "%}{% endfor %}{{ ns.a }}|{{ ns.l }}|{{ ns.zz }}|{{ ns }}"),
            "4|[]||<Namespace {'a': 4, 'l': []}>");
  EXPECT_EQ(Render("{% set ns = namespace(d={'a': 1}) %}{% set ns.d = dict(ns.d, b=2) %}{{ ns.d "
                   "}}|{{ dict(a=1, b='x') }}"),
            "{'a': 1, 'b': 2}|{'a': 1, 'b': 'x'}");
  EXPECT_EQ(Render("{% macro f(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }}|{{ f(1, b=3) "
                   "}}|{{ f(b=4, a=0) }}|{{ f() }}|{{ f(1)|length }}"),
            "1-2|1-3|0-4|-2|3");
  EXPECT_EQ(
      Render("{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, z=4) }}"),
      "1(2, 3){'z': 4}");
  EXPECT_EQ(Render("{% macro render(v) %}{% if v is mapping %}{{ '{' }}{% for k, x in v.items() "
                   "%}{{ k }}:{{ render(x) }},{% endfor %}{{ '}' }}{% elif v is iterable and v is "
                   "not string %}[{% for x in v %}{{ render(x) }}{% endfor %}]{% else %}{{ v }}{% "
                   "endif %}{% endmacro %}{{ render(d) }}",
                   Json::parse(R"json({"d": {"a": [1, {"b": "c"}], "e": null}})json")),
            "{a:[1{b:c,}],e:None,}");
}

// operators with Python semantics, literals, printing as str()/repr(), slicing by code point,
// string formatting.
TEST(JinjaTest, ExpressionsAndPythonValues) {
  EXPECT_EQ(Render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} "
                   "{{ 2 ** -1 }} {{ 'ab' * 3 }} {{ [0] * 2 }} {{ 'a' ~ 2 * 3 }}"),
            "3 -4 2 3.5 2.0 1024 0.5 ababab [0, 0] a6");
  EXPECT_EQ(Render("{{ 1.0 }} {{ 1e3 }} {{ 0.1 + 0.2 }} {{ 1.5e20 }} {{ 1e-5 }} {{ 7.5 // 2 }} {{ "
                   "1_000 }} {{ -1 ** 2 }}"),
            "1.0 1000.0 0.30000000000000004 1.5e+20 1e-05 3.0 1000 1");
  EXPECT_EQ(Render("{{ [1, 'a'] }} {{ {'a': 1, 'b': [true, none]} }} {{ ('a',) }} {{ (1, 2) }} {{ "
                   "['it\\'s', 'a\"b'] }} {{ none }} {{ true }}"),
            "[1, 'a'] {'a': 1, 'b': [True, None]} ('a',) (1, 2) [\"it's\", 'a\"b'] None True");
  EXPECT_EQ(Render("{{ '' or 'b' }}|{{ 'a' and 0 }}|{{ none or [] }}|{{ 1 if x else 2 }}|{{ 'y' if "
                   "false }}|{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ 1 == 1.0 }}|{{ 'x' not in 'y' "
                   "}}|{{ 'k' in {'k': 1} }}"),
            "b|0|[]|2||True|False|True|True|True");
  EXPECT_EQ(Render("{{ 'abcdef'[::-1] }}|{{ 'abcdef'[1:4] }}|{{ 'abcdef'[-2:] }}|{{ xs[::2] }}|{{ "
                   "xs[3:0:-1] }}|{{ xs[-1] }}|{{ 'héllo😀'[1:3] }}|{{ 'héllo😀'|length }}",
                   Json::parse(R"json({"xs": [1, 2, 3, 4]})json")),
            "fedcba|bcd|ef|[1, 3]|[4, 3, 2]|4|él|6");
  EXPECT_EQ(Render("{{ '%s-%d' % ('a', 3) }}|{{ '%05.2f' % 3.14159 }}|{{ '%(n)s!' % {'n': 'x'} "
                   "}}|{{ '{} {}'.format(1, 'a') }}|{{ '{0}-{name:>4}'.format(1, name='n') }}"),
            "a-3|03.14|x!|1 a|1-   n");
  EXPECT_EQ(Render("{{ 'a\\tb\\u00e9\\U0001F600' }}|{{ 'two\nlines' }}|{{ 'a' 'b' }}"),
            "a\tbé😀|two\nlines|ab");
}

// the str and dict methods templates call.
// A list or dict is printed with Python's repr, which escapes what is not printable: a template
// that prints a content list showed U+00A0 or U+200B raw where jinja2 shows \xa0, \u200b.
TEST(JinjaTest, ReprEscapesWhatPythonDoesNotPrint) {
  const Json x = {{"x",
                   {"a\u00a0b", "\u200b", "c\u2028d", "\u0085", "\U000e0001", "\ue000", "e\u0301",
                    "it's", "q\"'", "\x7f\x01"}}};
  EXPECT_EQ(Render("{{ x }}", x),
            R"(['a\xa0b', '\u200b', 'c\u2028d', '\x85', '\U000e0001', '\ue000', 'e)"
            "\u0301"
            R"(', "it's", 'q"\'', '\x7f\x01'])");
  EXPECT_EQ(Render("{{ d }}", {{"d", {{"k\u3000", "v\u00ad"}}}}), R"({'k\u3000': 'v\xad'})");
}

TEST(JinjaTest, StringAndDictMethods) {
  EXPECT_EQ(Render("{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) "
                   "}}|{{ 'a b c'.rsplit(' ', 1) }}"),
            "['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['a b', 'c']");
  EXPECT_EQ(Render("{{ 'xxhixx'.strip('x') }}|{{ '  hi  '.lstrip() }}|{{ '  hi  '.rstrip() }}|{{ "
                   "'abcba'.rstrip('ab') }}"),
            "hi|hi  |  hi|abc");
  EXPECT_EQ(Render("{{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.endswith('bc') }} {{ "
                   "'abc'.startswith('b', 1) }}"),
            "True True True");
  EXPECT_EQ(Render("{{ 'aXbX'.replace('X', '-', 1) }} {{ 'hello'.count('l') }} {{ "
                   "'hello'.find('l') }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ "
                   "', '.join(['a', 'b']) }} {{ 'MiX'.lower() }}{{ 'MiX'.upper() }}"),
            "a-bX 2 2 Hello World Hello a, b mixMIX");
  EXPECT_EQ(Render("{{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d.get('a') "
                   "}} {{ d.get('z', 'dflt') }} {{ d.get('z') }}",
                   Json::parse(R"json({"d": {"a": 1}})json")),
            "['a'] [1] [('a', 1)] 1 dflt None");
}

// jinja2 3.1's filters with their arguments, tojson as Hugging Face defines it.
TEST(JinjaTest, Filters) {
  EXPECT_EQ(Render("{{ '  a  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'hELLo woRld'|capitalize }}|{{ "
                   "'hello wORLD'|title }}|{{ 'Ab'|lower }}{{ 'Ab'|upper }}"),
            "a|a|Hello world|Hello World|abAB");
  EXPECT_EQ(Render("{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb\\n\\nc'|indent(2, true) }}|{{ "
                   "'a\\nb\\n\\nc'|indent(2, blank=true) }}|{{ 'a\\nb'|indent('> ') }}"),
            "a\n  b\n\n  c|  a\n  b\n\n  c|a\n  b\n  \n  c|a\n> b");
  EXPECT_EQ(Render("{{ ''|default('x') }}|{{ ''|default('x', true) }}|{{ none|default('x') }}|{{ "
                   "0|d(5, boolean=true) }}"),
            "|x|None|5");
  EXPECT_EQ(Render("{{ xs|map(attribute='name')|join(',') }}|{{ ['a','b']|map('upper')|list }}|{{ "
                   "xs|map(attribute='name', default='q')|list }}",
                   Json::parse(R"json({"xs": [{"name": "a"}, {"name": "b"}, {}]})json")),
            "a,b,|['A', 'B']|['a', 'b', 'q']");
  EXPECT_EQ(
      Render(
          "{{ xs|selectattr('role', 'equalto', 'user')|map(attribute='n')|list }}|{{ "
          "xs|selectattr('flag')|list|length }}|{{ xs|rejectattr('flag')|map(attribute='n')|list "
          "}}",
          Json::parse(
              R"json({"xs": [{"role": "user", "flag": true, "n": 1}, {"role": "sys", "n": 2}, {"role": "user", "flag": false, "n": 3}]})json")),
      "[1, 3]|1|[2, 3]");
  EXPECT_EQ(Render("{{ [1,2,3,4]|select('odd')|list }} {{ [1,none,2]|reject('none')|list }} {{ "
                   "[0,1,'',2]|select|list }} {{ [1,5,3]|select('gt', 2)|list }}"),
            "[1, 3] [1, 2] [1, 2] [5, 3]");
  EXPECT_EQ(
      Render("{{ ['b','A','c']|sort }} {{ [3,1,2]|sort(reverse=true) }} {{ "
             "xs|sort(attribute='n')|map(attribute='n')|list }} {{ ['a','A','b']|unique|list }}",
             Json::parse(R"json({"xs": [{"n": 2}, {"n": 1}]})json")),
      "['A', 'b', 'c'] [3, 2, 1] [1, 2] ['a', 'b']");
  // unique, min and max take the same key: the attribute (or the item), case-insensitive unless
  // case_sensitive.
  EXPECT_EQ(Render("{{ ['a','A','b']|unique(case_sensitive=true)|list }} {{ "
                   "xs|unique(attribute='r')|map(attribute='n')|list }} {{ ['B','a','c']|min }} {{ "
                   "['B','a','c']|min(case_sensitive=true) }} {{ ['B','a','c']|max }} {{ "
                   "(xs|max(attribute='n')).r }} {{ (xs|min(attribute='r')).n }}",
                   Json::parse(R"json({"xs": [{"r": "U", "n": 1}, {"r": "u", "n": 2},
                                         {"r": "s", "n": 3}]})json")),
            "['a', 'A', 'b'] [1, 3] a B c s 3");
  EXPECT_EQ(Render("{{ 'abc'|list }} {{ [1,2,3]|first }} {{ [1,2,3]|last }} {{ 'abc'|reverse }} {{ "
                   "[1,2]|reverse|list }} {{ d|items|list }} {{ d|length }} {{ 'é😀'|count }}",
                   Json::parse(R"json({"d": {"a": 1, "b": 2}})json")),
            "['a', 'b', 'c'] 1 3 cba [2, 1] [('a', 1), ('b', 2)] 2 2");
  EXPECT_EQ(Render("{{ '42'|int }} {{ '4.7'|int }} {{ 'abc'|int }} {{ ' 12 '|int }} {{ 4.7|int }} "
                   "{{ '3'|float }} {{ -3|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.567|round(2) "
                   "}} {{ 2.5|round(method='floor') }}"),
            "42 4 0 12 4 3.0 3 2.0 4.0 2.57 2.0");
  EXPECT_EQ(
      Render(
          "{{ [1,2,3]|join }} {{ [1,2]|join('-') }} {{ [1,2]|string }} {{ 'aXbX'|replace('X', 'y') "
          "}} {{ '<a href=\"x\">&\\''|e }} {{ '<b>'|safe }} {{ [1,2,3]|sum }} {{ [3,1]|min }}"),
      "123 1-2 [1, 2] ayby &lt;a href=&#34;x&#34;&gt;&amp;&#39; <b> 6 1");
  EXPECT_EQ(
      Render(
          "{{ d|tojson }}",
          Json::parse(
              R"json({"d": {"a": [1, 2.5, "x", null, true], "é": "ü😀</script>", "e": {}, "l": []}})json")),
      "{\"a\": [1, 2.5, \"x\", null, true], \"é\": \"ü😀</script>\", \"e\": {}, \"l\": []}");
  EXPECT_EQ(Render("{{ d|tojson(indent=2) }}",
                   Json::parse(R"json({"d": {"a": [1, {"b": []}], "c": {}, "d": "x"}})json")),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ],\n  \"c\": {},\n  \"d\": "
            "\"x\"\n}");
  EXPECT_EQ(Render("{{ d|tojson(sort_keys=true) }}|{{ d|tojson(ensure_ascii=true) }}|{{ "
                   "d|tojson(separators=(',', ':')) }}",
                   Json::parse(R"json({"d": {"b": "é", "a": [1, 2]}})json")),
            "{\"a\": [1, 2], \"b\": \"é\"}|{\"b\": \"\\u00e9\", \"a\": [1, "
            "2]}|{\"b\":\"é\",\"a\":[1,2]}");
}

// the `is` tests, with jinja2's notion of number, integer, sequence and iterable.
TEST(JinjaTest, Tests) {
  EXPECT_EQ(
      Render("{{ 'a' is string }}{{ d is mapping }}{{ xs is mapping }}{{ 'a' is iterable }}{{ 5 is "
             "iterable }}{{ d is sequence }}{{ xs is sequence }}{{ 5 is sequence }}",
             Json::parse(R"json({"d": {"a": 1}, "xs": [1]})json")),
      "TrueTrueFalseTrueFalseTrueTrueFalse");
  EXPECT_EQ(Render("{{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ "
                   "1.0 is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ 1 is boolean }}"),
            "TrueTrueTrueFalseFalseTrueTrueFalse");
  EXPECT_EQ(Render("{{ true is true }}{{ 1 is true }}{{ false is false }}{{ none is none }}{{ 3 is "
                   "eq 3 }}{{ 3 is equalto 3 }}{{ 3 is ne 3 }}{{ 3 is in [1,3] }}"),
            "TrueFalseTrueTrueTrueTrueFalseTrue");
  EXPECT_EQ(Render("{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ raise_exception is "
                   "callable }}{{ 'a' is callable }}{{ 'a' is not string }}{{ none is not none }}"),
            "TrueTrueTrueTrueFalseFalseFalse");
}
TEST(JinjaTest, ParseErrorsNameTheLineAndWhatWasExpected) {
  absl::Status st = Error("a\n{% if x %}\nb\n");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("chat template line 3"));
  EXPECT_THAT(st.message(), HasSubstr("'endif'"));
  EXPECT_THAT(Error("{% for x in y %}\n{% endif %}").message(), HasSubstr("chat template line 2"));
  EXPECT_THAT(Error("\n\n{% frobnicate %}").message(),
              HasSubstr("chat template line 3: unknown tag 'frobnicate'"));
  EXPECT_THAT(Error("x\n{{ 1 + }}").message(), HasSubstr("chat template line 2"));
  EXPECT_THAT(Error("{{ 'open }}").message(), HasSubstr("unterminated string"));
  EXPECT_THAT(Error("{% raw %}never closed").message(), HasSubstr("endraw"));
  EXPECT_THAT(Error("{{ x|nosuchfilter }}").message(), HasSubstr("no filter named 'nosuchfilter'"));
}

TEST(JinjaTest, RenderErrorsNameTheLine) {
  // jinja2's Undefined is lenient only when printed, iterated or tested: an attribute of it,
  // arithmetic on it and json.dumps of it raise.
  absl::Status st = Error("line 1\n{{ missing.attr }}");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("chat template line 2"));
  EXPECT_THAT(st.message(), HasSubstr("'missing' is undefined"));
  EXPECT_THAT(Error("\n\n{{ d.missing.foo }}", Json::parse(R"({"d": {}})")).message(),
              HasSubstr("chat template line 3"));
  EXPECT_FALSE(Error("{{ x + 1 }}").ok());
  EXPECT_FALSE(Error("{{ x[0] }}").ok());
  EXPECT_FALSE(Error("{{ x|tojson }}").ok());
  EXPECT_THAT(Error("\n{{ 1 + 'a' }}").message(),
              HasSubstr("chat template line 2: unsupported operand"));
  EXPECT_THAT(Error("{{ 1 // 0 }}").message(), HasSubstr("division by zero"));
  EXPECT_THAT(Error("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}").message(),
              HasSubstr("macro 'f' takes not more than 1 argument(s)"));
  EXPECT_THAT(Error("{% macro f(a) %}{% endmacro %}{{ f(z=2) }}").message(),
              HasSubstr("macro 'f' takes no keyword argument 'z'"));
  // The sandbox: lists cannot be mutated, and Python internals are not reachable.
  EXPECT_FALSE(Error("{% set xs = [1] %}{{ xs.append(2) }}").ok());
  EXPECT_EQ(Render("{{ ''.__class__ }}|{{ d.__class__ }}", Json::parse(R"({"d": {}})")), "|");
}

TEST(JinjaTest, RaiseExceptionCarriesTheTemplatesMessage) {
  const absl::Status st = Error(
      "{% if messages[0].role != 'user' %}\n"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') "
      "}}{% endif %}",
      Json::parse(R"({"messages": [{"role": "assistant"}]})"));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "chat template raised: Conversation roles must alternate "
            "user/assistant/user/assistant/...");
}

TEST(JinjaTest, StrftimeNowUsesThePinnedDate) {
  RenderOptions options;
  options.today = "2024-07-23";
  EXPECT_EQ(Render("{{ strftime_now('%d %m %Y %b %B %y %A') }}", Json::object(), options),
            "23 07 2024 Jul July 24 Tuesday");
  EXPECT_EQ(Render("{{ strftime_now('%d %b %Y') }}", Json::object(), options), "23 Jul 2024");
}

TEST(JinjaTest, LimitsEndRunawayTemplates) {
  RenderOptions small;
  small.max_loop_iterations = 1000;
  small.max_recursion_depth = 10;
  small.max_output_bytes = 4096;
  // Loop iterations are counted over the whole render, nested loops included.
  absl::Status st =
      Error("{% for i in range(40) %}{% for j in range(40) %}{% endfor %}{% endfor %}",
            Json::object(), small);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("more than 1000 loop iterations"));
  EXPECT_EQ(Render("{% for i in range(30) %}{% for j in range(30) %}{% endfor %}{% endfor %}ok",
                   Json::object(), small),
            "ok");
  st = Error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}\n{{ f(0) }}", Json::object(), small);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("nested more than 10 deep"));
  EXPECT_EQ(Render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{{ n }}{% endmacro %}"
                   "{{ f(9) }}",
                   Json::object(), small),
            "0123456789");
  st = Error("{% for i in range(900) %}{{ 'abcdefgh' }}{% endfor %}", Json::object(), small);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Error("{{ 'x' * 100000 }}", Json::object(), small).code(),
            absl::StatusCode::kResourceExhausted);
  // Values built by joining are bounded like the output (doubling a string or a list 40 times
  // took gigabytes; the output bound only saw the end).
  st = Error(
      "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s "
      "%}{% endfor %}",
      Json::object(), small);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("a string exceeds 4096 bytes"));
  st = Error(
      "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l "
      "%}{% endfor %}",
      Json::object(), small);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("a list exceeds 256 items"));
}

// Inside brackets, '}}' closes dicts, not the tag (as jinja2's lexer balances them): a dict
// ending in a dict failed to parse.
TEST(JinjaTest, ClosingBracesInsideBracketsAreNotTheEndOfTheTag) {
  EXPECT_EQ(Render(R"({{ {"a":{}} }}|{{ {"a":{"b":[1,{}]}} }}|{% set x = {"k":{}} %}{{ x }})"),
            "{'a': {}}|{'a': {'b': [1, {}]}}|{'k': {}}");
}

// Integers are 64 bits here (Python's have no bound): past them is an error, never a wrapped
// number (2 ** 64 gave 0, 10 ** 20 7766279631452241920).
TEST(JinjaTest, IntegerOverflowIsAnError) {
  EXPECT_EQ(Render("{{ 2 ** 62 }} {{ (-1) ** 5 }} {{ (-1) ** 4 }} {{ 0 ** 0 }} {{ 1 ** 100 }} {{ "
                   "3 ** 3 }} {{ -2 ** 2 }} {{ 9223372036854775807 - 1 }} {{ 7 // -2 }} {{ -7 % 3 "
                   "}}"),
            "4611686018427387904 -1 1 1 1 27 4 9223372036854775806 -4 2");
  for (const char* overflow :
       {"{{ 2 ** 64 }}", "{{ 10 ** 20 }}", "{{ 9223372036854775807 + 1 }}",
        "{{ -9223372036854775807 - 2 }}", "{{ 4611686018427387904 * 2 }}",
        "{{ (-9223372036854775807 - 1) // -1 }}", "{{ (-1) ** 1000000000000 + 2 ** 63 }}"}) {
    const absl::Status st = Error(overflow);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << overflow;
    EXPECT_THAT(st.message(), HasSubstr("integer overflow")) << overflow;
  }
}

// Parsing and rendering recurse over a template's nesting: it is bounded far above what jinja2
// itself parses (its recursion limit stops near 100 brackets), and a template past the bound is
// an error naming the line (100,000 nested '(' or '{% if %}' overflowed the stack).
TEST(JinjaTest, NestingIsBoundedNotAStackOverflow) {
  auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  EXPECT_EQ(Render("{{ " + repeat("(", 100) + "1" + repeat(")", 100) + " }}"), "1");
  for (const std::string& deep :
       {"{{ " + repeat("(", 100000) + "1" + repeat(")", 100000) + " }}",
        repeat("{% if true %}", 30000) + "x" + repeat("{% endif %}", 30000),
        "{{ " + repeat("[", 100000) + repeat("]", 100000) + " }}",
        "{{ " + repeat("not ", 100000) + "1 }}", "{{ " + repeat("-", 100000) + "1 }}"}) {
    const absl::Status st = Error(deep);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << deep.substr(0, 20);
    EXPECT_THAT(st.message(), HasSubstr("nested more than 512 levels deep")) << deep.substr(0, 20);
  }
  for (const std::string& chain :
       {"{{ 1" + repeat(" + 1", 100000) + " }}", "{{ 'x'" + repeat(" | string", 100000) + " }}",
        "{{ x" + repeat(".a", 100000) + " }}"}) {
    const absl::Status st = Error(chain);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << chain.substr(0, 20);
    EXPECT_THAT(st.message(), HasSubstr("expression nested more than 512 levels deep"))
        << chain.substr(0, 20);
  }
  EXPECT_EQ(Render("{{ 1" + repeat(" + 1", 500) + " }}"), "501");
  // Comparison chains hold each operand once (the middle ones were parsed twice, so nested
  // chains took exponential time: 20 levels, 4 s and 1.5 GB).
  EXPECT_EQ(Render("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 < 2 in [2] }} {{ 1 == 1 != 2 == 2 }} {{ "
                   "(1 < 2) < 3 }}"),
            "True False True True True");
  std::string chain = "a";
  for (int i = 0; i < 40; ++i) chain = "a < (" + chain + ") < a";
  EXPECT_EQ(Render("{{ " + chain + " }}", {{"a", 1}}), "False");
  // Rendering recursion is bounded where the parser's bounds multiply with macro calls (a 4-deep
  // macro of 500 nested loops and 1,000 filters overflowed the stack)...
  const std::string macro = "{% macro m(n) %}" + repeat("{% for i in [1] %}", 400) + "{{ 'x'" +
                            repeat(" | string", 400) +
                            " }}{% if n > 0 %}{{ m(n - 1) }}{% endif %}" +
                            repeat("{% endfor %}", 400) + "{% endmacro %}{{ m(4) }}";
  absl::Status st = Error(macro);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("rendering nests more than 1024 levels deep"));
  // ...and so is how deep the values a template builds nest (freeing a list wrapped 900,000
  // times overflowed the stack).
  st = Error(
      "{% set ns = namespace(x=1) %}{% for i in range(300) %}{% set ns.x = [ns.x] %}{% "
      "endfor %}");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("a value nests more than 256 lists or dicts deep"));
}

// What builtins build is bounded before it is built: a huge width or count was an allocation
// that aborted the process ('x'.zfill(10**15), [1, 2] * 2**62, whose size check wrapped).
TEST(JinjaTest, BuiltValuesAreBoundedBeforeTheyAreBuilt) {
  for (const char* huge :
       {"{{ 'x'.zfill(1000000000000000) }}", "{{ [1, 2] * 4611686018427387904 }}",
        "{{ 'abcd' * 4611686018427387904 }}", "{{ 'ab'.replace('', 'x' * 10000000) }}",
        "{{ 'a\nb' | indent(1000000000000) }}", "{{ '%1000000000000d' % 1 }}",
        "{{ '{:>1000000000000}'.format(1) }}",
        "{% set ns = namespace(s='x' * 1000000) %}{% for i in range(40) %}{% set ns.s = [ns.s, "
        "ns.s] | join %}{% endfor %}",
        "{% set ns = namespace(s='x' * 1000000) %}{% for i in range(40) %}{% set ns.s = ''.join"
        "([ns.s, ns.s]) %}{% endfor %}"}) {
    const absl::Status st = Error(huge);
    EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << huge << ": " << st;
  }
  // A field index past 64 bits is Python's ValueError (std::stoul threw out of the render).
  EXPECT_THAT(Error("{{ '{99999999999999999999999}'.format(1) }}").message(),
              HasSubstr("Too many decimal digits in format string"));
  // Below that bound an index is an index, leading zeros and all, as in Python.
  EXPECT_EQ(Render("{{ '{0000000000000000000000}'.format(1) }}"), "1");
  EXPECT_THAT(Error("{{ '{9223372036854775807}'.format(1) }}").message(),
              HasSubstr("no argument for"));
  EXPECT_THAT(Error("{{ '{9223372036854775808}'.format(1) }}").message(),
              HasSubstr("Too many decimal digits"));
  // Integers past 64 bits: a literal, and negating the least.
  EXPECT_THAT(Error("{{ 9223372036854775808 }}").message(), HasSubstr("does not fit in 64 bits"));
  EXPECT_THAT(Error("{{ -(-9223372036854775807 - 1) }}").message(), HasSubstr("integer overflow"));
  EXPECT_EQ(Render("{{ (-9223372036854775807 - 1) % -1 }}"), "0");
  // A namespace that holds itself prints as Python prints it (printing it overflowed the stack).
  EXPECT_EQ(Render("{% set ns = namespace(x=1) %}{% set ns.x = [ns] %}{{ ns.x }}|{{ ns }}"),
            "[<Namespace {'x': [...]}>]|<Namespace {'x': [<Namespace {...}>]}>");
}

}  // namespace
}  // namespace llm::frontend::jinja
