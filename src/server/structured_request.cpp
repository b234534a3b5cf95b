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

}  // namespace cellm::server
