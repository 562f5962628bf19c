// The keywords a JSON Schema writes beside a combinator (anyOf, oneOf, allOf, $ref) hold in
// each of its branches: these merge them into a branch, and say why a merged schema admits no
// value. Pure logic, for json_schema.cc.
#ifndef LLM_WORKER_CONSTRAINT_SCHEMA_MERGE_H_
#define LLM_WORKER_CONSTRAINT_SCHEMA_MERGE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace llm::constraint::schema {

// Ordered: properties are emitted in the order the schema lists them.
using json = nlohmann::ordered_json;

// Keywords that say nothing of the value (title, description, $defs, discriminator, ...).
bool Annotation(const std::string& key);

// `s`'s keywords but `combinator` and annotations: what holds beside the combinator.
json Beside(const json& s, const std::string& combinator);

// `branch` with `beside`'s keywords added: the intersection where a keyword is in one of them,
// or equal in both (`required`: both lists; `type`: the types in both, an integer being a
// number, perhaps none, which Contradiction names). Another keyword in both, or
// additionalProperties or patternProperties apart from the properties they judge (items from
// prefixItems), is INVALID_ARGUMENT naming `path`, the branch's. A branch that is not an
// object (or true) comes back as it is.
absl::StatusOr<json> Merged(const json& branch, const json& beside, const std::string& path,
                            const std::string& combinator);

// Why `s` (perhaps merged) admits no value though each keyword alone would: false, no type in
// common, a const outside the enum beside it, or no enum or const value of the type beside
// them; INVALID_ARGUMENT naming `path`'s keyword. OK where none of these holds (a malformed
// keyword is the compiler's to name).
absl::Status Contradiction(const json& s, const std::string& path);

// `v` is of a type `types` (a name or a list of names) names.
bool OfTypes(const json& v, const json& types);

}  // namespace llm::constraint::schema

#endif  // LLM_WORKER_CONSTRAINT_SCHEMA_MERGE_H_
