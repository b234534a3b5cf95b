#include "server/structured_request.h"

namespace cellm::server {
namespace {

using json = nlohmann::ordered_json;

bool fail(RequestError* error, std::string param, Status status) {
  error->param = std::move(param);
  error->status = std::move(status);
  return false;
}

}  // namespace

bool parse_response_format(const json& value, GenerationRequest* req, RequestError* error) {
  if (!value.is_object()) {
    return fail(error, "response_format",
                invalid_argument("'response_format' must be an object such as "
                                 "{{\"type\": \"json_object\"}}"));
  }
  auto type = value.find("type");
  if (type == value.end() || !type->is_string()) {
    return fail(error, "response_format.type",
                invalid_argument("'response_format.type' must be \"text\", \"json_object\" or "
                                 "\"json_schema\""));
  }
  const std::string t = type->get<std::string>();
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (it.key() != "type" && !(t == "json_schema" && it.key() == "json_schema")) {
      return fail(
          error, "response_format." + it.key(),
          invalid_argument("unsupported field 'response_format.{}' for type \"{}\"", it.key(), t));
    }
  }
  if (t == "text") {
    req->response_format = ResponseFormat::kText;
    return true;
  }
  if (t == "json_object") {
    req->response_format = ResponseFormat::kJsonObject;
    return true;
  }
  if (t != "json_schema") {
    return fail(error, "response_format.type",
                invalid_argument("'response_format.type' \"{}\" is not supported: use \"text\", "
                                 "\"json_object\" or \"json_schema\"",
                                 t));
  }
  auto spec = value.find("json_schema");
  if (spec == value.end() || !spec->is_object()) {
    return fail(error, "response_format.json_schema",
                invalid_argument("'response_format.json_schema' must be an object with a "
                                 "'name' and a 'schema'"));
  }
  for (auto it = spec->begin(); it != spec->end(); ++it) {
    const std::string& k = it.key();
    if (k != "name" && k != "schema" && k != "strict" && k != "description") {
      return fail(error, "response_format.json_schema." + k,
                  invalid_argument("unsupported field 'response_format.json_schema.{}'", k));
    }
  }
  auto name = spec->find("name");
  if (name == spec->end() || !name->is_string() || name->get<std::string>().empty()) {
    return fail(error, "response_format.json_schema.name",
                invalid_argument("'response_format.json_schema.name' must be a non-empty string"));
  }
  if (auto strict = spec->find("strict");
      strict != spec->end() && !strict->is_null() && !strict->is_boolean()) {
    return fail(error, "response_format.json_schema.strict",
                invalid_argument("'response_format.json_schema.strict' must be a boolean"));
  }
  auto schema = spec->find("schema");
  if (schema == spec->end() || !(schema->is_object() || schema->is_boolean())) {
    return fail(error, "response_format.json_schema.schema",
                invalid_argument("'response_format.json_schema.schema' must be a JSON Schema "
                                 "object"));
  }
  // strict or not, the output is constrained to the schema: strict only
  // promises what cellm always does.
  req->response_format = ResponseFormat::kJsonSchema;
  req->response_schema = *schema;
  return true;
}

bool parse_grammar(const json* grammar, const json* guided_grammar, const json* guided_regex,
                   GenerationRequest* req, RequestError* error) {
  std::vector<const char*> given;
  if (grammar != nullptr) given.push_back("grammar");
  if (guided_grammar != nullptr) given.push_back("guided_grammar");
  if (guided_regex != nullptr) given.push_back("guided_regex");
  if (given.empty()) return true;
  if (given.size() > 1) {
    return fail(error, given[1],
                invalid_argument("'{}' and '{}' both constrain the output; send one of them",
                                 given[0], given[1]));
  }
  const std::string field = given[0];
  std::string param = field;
  GrammarSyntax syntax = GrammarSyntax::kEbnf;
  const json* text = grammar != nullptr ? grammar : guided_grammar;
  if (guided_regex != nullptr) {
    syntax = GrammarSyntax::kRegex;
    text = guided_regex;
  } else if (grammar != nullptr && grammar->is_object()) {
    for (auto it = grammar->begin(); it != grammar->end(); ++it) {
      if (it.key() != "type" && it.key() != "value") {
        return fail(error, "grammar." + it.key(),
                    invalid_argument("unsupported field 'grammar.{}' (use \"type\" and "
                                     "\"value\")",
                                     it.key()));
      }
    }
    auto type = grammar->find("type");
    const std::string t =
        type != grammar->end() && type->is_string() ? type->get<std::string>() : "";
    if (t != "ebnf" && t != "regex") {
      return fail(error, "grammar.type",
                  invalid_argument(R"('grammar.type' must be "ebnf" or "regex")"));
    }
    syntax = t == "regex" ? GrammarSyntax::kRegex : GrammarSyntax::kEbnf;
    auto value = grammar->find("value");
    text = value == grammar->end() ? nullptr : &*value;
    param = "grammar.value";
  } else if (grammar != nullptr && !grammar->is_string()) {
    return fail(error, "grammar",
                invalid_argument("'grammar' must be an object {{\"type\": \"ebnf\" or "
                                 "\"regex\", \"value\": \"...\"}} or a string of EBNF"));
  }
  if (text == nullptr || !text->is_string() || text->get<std::string>().empty()) {
    return fail(error, param,
                invalid_argument("'{}' must be a non-empty string holding the {}", param,
                                 syntax == GrammarSyntax::kRegex ? "regex" : "EBNF grammar"));
  }
  // One constraint at a time: the grammar cannot also be JSON or a tool call.
  if (req->response_format != ResponseFormat::kText) {
    return fail(error, field,
                invalid_argument("'{}' cannot be combined with a JSON 'response_format': both "
                                 "constrain the output; send one of them",
                                 field));
  }
  if (req->tool_choice == ToolChoice::kRequired || req->tool_choice == ToolChoice::kNamed) {
    return fail(error, field,
                invalid_argument("'{}' cannot be combined with 'tool_choice' \"required\" or a "
                                 "named function: a forced tool call has its own grammar",
                                 field));
  }
  req->grammar_syntax = syntax;
  req->grammar_text = text->get<std::string>();
  req->grammar_param = param;
  return true;
}

}  // namespace cellm::server
