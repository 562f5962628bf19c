// JSON Schema to the patterns of a pushdown automaton (byte_regex.h, pushdown.h), for
// `response_format: json_schema` and a tool call's arguments: the outputs it admits are compact
// JSON (no whitespace between tokens) that validates against the schema. Pure logic.
//
// Supported (OpenAI's strict mode and a little more):
//   type (a name or a list of names), object `properties` (emitted in the schema's order;
//   those not in `required` may be left out) and `additionalProperties` (beside `properties`
//   no other property is generated, whatever it says; without them: any object where absent
//   or true, none where false, any keys with values under it where it is a schema, as
//   Pydantic writes dict[str, X]), and on an object without `properties` (Pydantic's
//   dicts) `propertyNames` (a string schema, or finitely many strings, then each at most once
//   in the order listed), `patternProperties` of one pattern, `minProperties` and
//   `maxProperties` (0 or 1, and none or at least their number, for finitely many keys), array
//   `items`, `minItems`, `maxItems`, `prefixItems` (closed by `items: false` or by a maxItems
//   within it, as Pydantic writes a tuple), `uniqueItems` where the items have finitely many values
//   (enum, const, boolean, null, and $ref and anyOf of those: Pydantic's set[SomeEnum]), each then
//   written at most once and in the order the schema lists them, with minItems 0 or 1 and no
//   maxItems below their count; string `minLength`, `maxLength` (beside a pattern or a format too,
//   through a length group; an unanchored pattern's free text then writes no escape), `pattern`
//   (matched against the string's content as written, without the bytes JSON escapes: a
//   quote, a backslash, control characters; a pattern that needs one is refused), `format` (date,
//   time, date-time, uuid, email, duration, uri: uri.h, ipv4, ipv6 (no embedded IPv4, no zone),
//   ipvanyaddress; ipv4network, ipv6network, ipvanynetwork and the three interfaces:
//   ip_networks.h; base64 and base64url, padded; binary, password and path, Pydantic's bytes,
//   SecretStr and Path, are any string; not beside a pattern); integer and number `minimum`,
//   `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (number_range.h: exact in decimal, 0.5
//   and 2.999 included; an integer's bound between integers is rounded inwards; no exponent is
//   written where one could leave the bounds); `multipleOf` (number_range.h lists the steps served;
//   others are an error); boolean, null; `enum`, `const` (a `type` beside
//   them keeps the values of its types; another keyword is refused); `anyOf` and `oneOf` (as
//   alternatives, the keywords beside them holding in each branch, which repeats one only with
//   the same value, `required` (joined) or `type` (the common types), and keeps
//   additionalProperties with the properties it judges, items with prefixItems; a branch that
//   then admits no value, as a type outside the one beside it, is dropped, and the schema
//   refused only where every branch is; a value valid under two branches of a oneOf is not
//   excluded); `allOf` of one schema (keywords
//   beside it, and beside a `$ref` that is not recursive, hold in the target too); `$ref` to
//   `#/$defs/...` or `#/definitions/...` (expanded in place; a recursive one, Pydantic's trees, a
//   call to the target's own rule). A value the schema leaves open (`{}`, `true`, an object without
//   properties, an array without items) is any JSON value, nested as deep as it goes (a call to
//   one rule for them all). Annotations
//   (title, description, default, examples, $schema, $id, $comment, strict, readOnly,
//   writeOnly, deprecated, and discriminator: Pydantic's tagged unions, whose branches' tags
//   say the same) are ignored.
// Anything else that constrains a value is an error naming its path, as
// "constraint.json_schema: $.properties.age.minimum: ...".
#ifndef LLM_WORKER_CONSTRAINT_JSON_SCHEMA_H_
#define LLM_WORKER_CONSTRAINT_JSON_SCHEMA_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "worker/constraint/json_values.h"
#include "worker/constraint/pushdown.h"

namespace llm::constraint {

// References nest at most this deep (a chain of distinct definitions).
inline constexpr int kMaxRefDepth = 16;
// The name of the rule of any JSON value, which calls only itself.
inline constexpr char kAnyJsonValueRule[] = "(any JSON value)";

// The patterns of `schema` (a JSON document): a reference to a definition being expanded is a
// call to that definition's own pattern (named by its reference, "#/$defs/Node"), and an open
// value a call to kAnyJsonValueRule's, so trees nest as deep as the output goes. One pattern
// without calls when neither occurs.
absl::StatusOr<RulePatterns> JsonSchemaToPatterns(std::string_view schema);

}  // namespace llm::constraint

#endif  // LLM_WORKER_CONSTRAINT_JSON_SCHEMA_H_
