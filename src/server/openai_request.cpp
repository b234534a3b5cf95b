#include "server/openai_request.h"

#include "server/structured_request.h"
#include "server/tool_request.h"

#include <cmath>
#include <limits>
#include <set>

#include "cellm/types.h"

namespace cellm::server {
namespace {

using json = nlohmann::ordered_json;

// Parsing state: the first error wins and names its field.
class Parser {
 public:
  Parser(const json& body, RequestError* error) : body_(body), error_(error) {}

  bool failed() const { return failed_; }

  bool fail(std::string param, Status status) {
    if (!failed_) {
      failed_ = true;
      error_->param = std::move(param);
      error_->status = std::move(status);
    }
    return false;
  }

  const json* field(const char* name) const {
    auto it = body_.find(name);
    if (it == body_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  bool read_bool(const char* name, bool* out) {
    const json* v = field(name);
    if (v == nullptr) return true;
    if (!v->is_boolean()) return fail(name, invalid_argument("'{}' must be a boolean", name));
    *out = v->get<bool>();
    return true;
  }

  bool read_int(const char* name, std::int64_t lo, std::int64_t hi,
                std::optional<std::int64_t>* out) {
    const json* v = field(name);
    if (v == nullptr) return true;
    if (!v->is_number_integer()) {
      return fail(name, invalid_argument("'{}' must be an integer", name));
    }
    // Unsigned values above INT64_MAX are out of range too.
    if (v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) {
      return fail(name, invalid_argument("'{}' must be between {} and {}", name, lo, hi));
    }
    const std::int64_t x = v->get<std::int64_t>();
    if (x < lo || x > hi) {
      return fail(name,
                  invalid_argument("'{}' must be between {} and {}, got {}", name, lo, hi, x));
    }
    *out = x;
    return true;
  }

  bool read_float(const char* name, double lo, double hi, float* out) {
    const json* v = field(name);
    if (v == nullptr) return true;
    if (!v->is_number()) return fail(name, invalid_argument("'{}' must be a number", name));
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) {
      return fail(name,
                  invalid_argument("'{}' must be between {} and {}, got {}", name, lo, hi, x));
    }
    *out = static_cast<float>(x);
    return true;
  }

  bool read_string(const char* name, std::string* out) {
    const json* v = field(name);
    if (v == nullptr) return true;
    if (!v->is_string()) return fail(name, invalid_argument("'{}' must be a string", name));
    *out = v->get<std::string>();
    return true;
  }

 private:
  const json& body_;
  RequestError* error_;
  bool failed_ = false;
};

// Fields an OpenAI client may send that cellm accepts only at their neutral
// value (so a client that spells out a default still works).
bool is_neutral(const std::string& key, const json& v) {
  if (v.is_null()) return true;
  if (key == "echo") return v.is_boolean() && !v.get<bool>();
  if (key == "best_of") return v.is_number_integer() && v.get<std::int64_t>() == 1;
  if (key == "parallel_tool_calls" || key == "store") return v.is_boolean();
  return false;
}

const std::set<std::string>& supported_fields(RequestKind kind) {
  static const std::set<std::string> common = [] {
    std::set<std::string> s = {
        "model", "max_tokens", "temperature", "top_p",  "top_k",          "seed", "stop",
        "n",     "ignore_eos", "min_tokens",  "stream", "stream_options", "user"};
    // The rest of the sampling set.
    s.insert({"presence_penalty", "frequency_penalty", "repetition_penalty", "min_p", "logit_bias",
              "stop_token_ids", "logprobs"});
    // Structured outputs (constrained decoding).
    s.insert("response_format");
    // The grammar extension and its vLLM spellings.
    s.insert({"grammar", "guided_grammar", "guided_regex"});
    return s;
  }();
  static const std::set<std::string> completion = [] {
    auto s = common;
    s.insert({"prompt", "echo"});
    return s;
  }();
  static const std::set<std::string> chat = [] {
    auto s = common;
    s.insert({"messages", "max_completion_tokens", "tools", "tool_choice", "chat_template_kwargs",
              "add_generation_prompt", "top_logprobs"});
    return s;
  }();
  return kind == RequestKind::kChat ? chat : completion;
}

bool parse_prompt(Parser& p, const json& v, GenerationRequest* req) {
  if (v.is_string()) {
    req->prompt_text = v.get<std::string>();
    return true;
  }
  if (v.is_array() && !v.empty() && v[0].is_number_integer()) {
    std::vector<std::int64_t> ids;
    ids.reserve(v.size());
    for (const json& t : v) {
      if (!t.is_number_integer() || t.get<std::int64_t>() < 0) {
        return p.fail("prompt",
                      invalid_argument("'prompt' token ids must be non-negative integers"));
      }
      ids.push_back(t.get<std::int64_t>());
    }
    req->prompt_tokens = std::move(ids);
    return true;
  }
  if (v.is_array() && v.size() == 1 && v[0].is_string()) {
    req->prompt_text = v[0].get<std::string>();
    return true;
  }
  if (v.is_array() && v.size() > 1) {
    return p.fail("prompt", not_supported("batched prompts are not supported: send one prompt per "
                                          "request (a string or a list of token ids)"));
  }
  return p.fail("prompt", invalid_argument("'prompt' must be a non-empty string or a list of "
                                           "token ids"));
}

bool parse_content(Parser& p, const json& content, std::size_t index, std::string* out) {
  if (content.is_string()) {
    *out = content.get<std::string>();
    return true;
  }
  if (content.is_array()) {
    for (const json& part : content) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
          !part["text"].is_string()) {
        return p.fail(fmt::format("messages[{}].content", index),
                      not_supported("only text content parts are supported"));
      }
      *out += part["text"].get<std::string>();
    }
    return true;
  }
  if (content.is_null()) return true;  // e.g. an assistant turn holding only tool_calls
  return p.fail(fmt::format("messages[{}].content", index),
                invalid_argument("message content must be a string or a list of text parts"));
}

bool parse_messages(Parser& p, const json& v, GenerationRequest* req) {
  if (!v.is_array() || v.empty()) {
    return p.fail("messages", invalid_argument("'messages' must be a non-empty list"));
  }
  static const std::set<std::string> roles = {"system", "user", "assistant", "tool", "developer"};
  for (std::size_t i = 0; i < v.size(); ++i) {
    const json& m = v[i];
    if (!m.is_object()) {
      return p.fail(fmt::format("messages[{}]", i),
                    invalid_argument("each message must be an object"));
    }
    ChatMessage msg;
    auto role = m.find("role");
    if (role == m.end() || !role->is_string() || !roles.contains(role->get<std::string>())) {
      return p.fail(
          fmt::format("messages[{}].role", i),
          invalid_argument("role must be one of system, user, assistant, tool, developer"));
    }
    msg.role = role->get<std::string>();
    auto content = m.find("content");
    if (content != m.end() && !parse_content(p, *content, i, &msg.content)) return false;
    msg.extra = json::object();
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (it.key() != "role" && it.key() != "content") msg.extra[it.key()] = it.value();
    }
    if (msg.extra.contains("tool_calls") && !msg.extra["tool_calls"].is_null()) {
      if (msg.role != "assistant") {
        return p.fail(fmt::format("messages[{}].tool_calls", i),
                      invalid_argument("only assistant messages carry 'tool_calls'"));
      }
      RequestError e;
      if (!parse_tool_calls(msg.extra["tool_calls"], i, &e)) return p.fail(e.param, e.status);
    }
    req->messages.push_back(std::move(msg));
  }
  return true;
}

bool parse_stop(Parser& p, const json& v, const RequestLimits& limits, GenerationRequest* req) {
  std::vector<std::string> stops;
  if (v.is_string()) {
    stops.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (const json& s : v) {
      if (!s.is_string()) return p.fail("stop", invalid_argument("'stop' entries must be strings"));
      stops.push_back(s.get<std::string>());
    }
  } else {
    return p.fail("stop", invalid_argument("'stop' must be a string or a list of strings"));
  }
  if (stops.size() > static_cast<std::size_t>(limits.max_stop_strings)) {
    return p.fail("stop",
                  invalid_argument("at most {} stop strings are allowed", limits.max_stop_strings));
  }
  for (const std::string& s : stops) {
    if (s.empty() || s.size() > limits.max_stop_length) {
      return p.fail(
          "stop", invalid_argument("stop strings must hold 1 to {} bytes", limits.max_stop_length));
    }
  }
  req->stop = std::move(stops);
  return true;
}

// OpenAI's form: {"<token id>": bias, ...}.
bool parse_logit_bias(Parser& p, const json& v, GenerationRequest* req) {
  const char* name = "logit_bias";
  if (!v.is_object()) {
    return p.fail(name, invalid_argument("'logit_bias' must be an object mapping token ids (as "
                                         "strings) to biases"));
  }
  if (v.size() > kMaxLogitBias) {
    return p.fail(name, invalid_argument("'logit_bias' has {} entries; at most {} are allowed",
                                         v.size(), kMaxLogitBias));
  }
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& key = it.key();
    std::int64_t id = 0;
    bool digits = !key.empty() && key.size() <= 10;
    for (char c : key) {
      if (c < '0' || c > '9') {
        digits = false;
        break;
      }
      id = id * 10 + (c - '0');
    }
    if (!digits || id > std::numeric_limits<std::int32_t>::max()) {
      return p.fail(name, invalid_argument("'logit_bias' key '{}' is not a token id (a "
                                           "non-negative decimal integer)",
                                           key));
    }
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < -100.0 ||
        it->get<double>() > 100.0) {
      return p.fail(name, invalid_argument("'logit_bias' of token {} must be a number between "
                                           "-100 and 100",
                                           key));
    }
    req->logit_bias.emplace_back(id, static_cast<float>(it->get<double>()));
  }
  return true;
}

bool parse_stop_token_ids(Parser& p, const json& v, const RequestLimits& limits,
                          GenerationRequest* req) {
  const char* name = "stop_token_ids";
  if (!v.is_array()) {
    return p.fail(name, invalid_argument("'stop_token_ids' must be a list of token ids"));
  }
  if (v.size() > static_cast<std::size_t>(limits.max_stop_token_ids)) {
    return p.fail(name, invalid_argument("'stop_token_ids' has {} ids; at most {} are allowed",
                                         v.size(), limits.max_stop_token_ids));
  }
  for (const json& t : v) {
    if (!t.is_number_integer() || (!t.is_number_unsigned() && t.get<std::int64_t>() < 0) ||
        (t.is_number_unsigned() &&
         t.get<std::uint64_t>() >
             static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max()))) {
      return p.fail(name, invalid_argument("'stop_token_ids' entries must be non-negative "
                                           "integer token ids"));
    }
    req->stop_token_ids.push_back(t.get<std::int64_t>());
  }
  return true;
}

// Completions: `logprobs` is the number of top alternatives (false: none,
// as clients that spell out the default send). Chat: `logprobs` is a boolean
// and `top_logprobs` the count, which needs `logprobs: true` (OpenAI's rule).
bool parse_logprobs(Parser& p, RequestKind kind, GenerationRequest* req) {
  const std::int64_t top = kMaxTopLogprobs;
  std::optional<std::int64_t> count;
  if (kind == RequestKind::kCompletion) {
    const json* v = p.field("logprobs");
    if (v == nullptr || (v->is_boolean() && !v->get<bool>())) return true;
    if (!v->is_number_integer()) {
      return p.fail("logprobs", invalid_argument("'logprobs' must be an integer between 0 and {} "
                                                 "(the number of top alternatives per token)",
                                                 top));
    }
    if (!p.read_int("logprobs", 0, top, &count)) return false;
    req->logprobs = static_cast<std::int32_t>(*count);
    return true;
  }
  bool wanted = false;
  if (!p.read_bool("logprobs", &wanted)) return false;
  if (!p.read_int("top_logprobs", 0, top, &count)) return false;
  if (count && !wanted) {
    return p.fail("top_logprobs",
                  invalid_argument("'top_logprobs' needs 'logprobs': true; set it or drop "
                                   "'top_logprobs'"));
  }
  if (wanted) req->logprobs = count ? static_cast<std::int32_t>(*count) : 0;
  return true;
}

}  // namespace

std::optional<GenerationRequest> parse_request(RequestKind kind, std::string_view body,
                                               const RequestLimits& limits, RequestError* error) {
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    error->param.clear();
    error->status = invalid_argument("the request body is not valid JSON");
    return std::nullopt;
  }
  if (!doc.is_object()) {
    error->param.clear();
    error->status = invalid_argument("the request body must be a JSON object");
    return std::nullopt;
  }
  Parser p(doc, error);
  const auto& supported = supported_fields(kind);
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (!supported.contains(it.key()) && !is_neutral(it.key(), it.value())) {
      p.fail(it.key(), invalid_argument("unsupported field '{}': cellm does not implement it; "
                                        "remove it from the request",
                                        it.key()));
      return std::nullopt;
    }
  }

  GenerationRequest req;
  req.kind = kind;
  std::optional<std::int64_t> i;
  p.read_string("model", &req.model);
  if (kind == RequestKind::kCompletion) {
    const json* prompt = p.field("prompt");
    if (prompt == nullptr) {
      p.fail("prompt", invalid_argument("'prompt' is required"));
    } else {
      parse_prompt(p, *prompt, &req);
    }
  } else {
    const json* messages = p.field("messages");
    if (messages == nullptr) {
      p.fail("messages", invalid_argument("'messages' is required"));
    } else {
      parse_messages(p, *messages, &req);
    }
    RequestError e;
    if (const json* tools = p.field("tools")) {
      if (!parse_tools(*tools, &e)) {
        p.fail(e.param, e.status);
      } else if (!tools->empty()) {
        req.tools = *tools;
      }
    }
    if (const json* choice = p.field("tool_choice")) {
      if (!parse_tool_choice(*choice, &req, &e)) p.fail(e.param, e.status);
    }
    req.chat_template_kwargs = json::object();
    if (const json* kw = p.field("chat_template_kwargs")) {
      if (!kw->is_object()) {
        p.fail("chat_template_kwargs",
               invalid_argument("'chat_template_kwargs' must be an object"));
      } else {
        req.chat_template_kwargs = *kw;
      }
    }
    p.read_bool("add_generation_prompt", &req.add_generation_prompt);
  }
  const std::int64_t int32_max = std::numeric_limits<std::int32_t>::max();
  i.reset();
  if (kind == RequestKind::kCompletion) p.read_bool("echo", &req.echo);
  // 0 is the prompt alone, which only echo shows.
  p.read_int("max_tokens", req.echo ? 0 : 1, int32_max, &i);
  if (kind == RequestKind::kChat) p.read_int("max_completion_tokens", 1, int32_max, &i);
  if (i) req.max_tokens = static_cast<std::int32_t>(*i);
  p.read_float("temperature", 0.0, 2.0, &req.temperature);
  p.read_float("top_p", 0.0, 1.0, &req.top_p);
  if (p.field("top_p") != nullptr && req.top_p <= 0.0f) {
    p.fail("top_p", invalid_argument("'top_p' must be greater than 0"));
  }
  i.reset();
  p.read_int("top_k", -1, int32_max, &i);
  if (i) req.top_k = static_cast<std::int32_t>(*i < 0 ? 0 : *i);
  req.given.temperature = p.field("temperature") != nullptr;
  req.given.top_p = p.field("top_p") != nullptr;
  req.given.top_k = p.field("top_k") != nullptr;
  req.given.repetition_penalty = p.field("repetition_penalty") != nullptr;
  i.reset();
  if (const json* seed = p.field("seed")) {
    if (!seed->is_number_integer()) {
      p.fail("seed", invalid_argument("'seed' must be an integer"));
    } else {
      req.seed = seed->is_number_unsigned() ? seed->get<std::uint64_t>()
                                            : static_cast<std::uint64_t>(seed->get<std::int64_t>());
    }
  }
  if (const json* stop = p.field("stop")) parse_stop(p, *stop, limits, &req);
  i.reset();
  p.read_int("n", 1, limits.max_n, &i);
  if (i) req.n = static_cast<std::int32_t>(*i);
  p.read_bool("ignore_eos", &req.ignore_eos);
  i.reset();
  p.read_int("min_tokens", 0, int32_max, &i);
  if (i) req.min_tokens = static_cast<std::int32_t>(*i);
  p.read_float("presence_penalty", -2.0, 2.0, &req.presence_penalty);
  p.read_float("frequency_penalty", -2.0, 2.0, &req.frequency_penalty);
  p.read_float("repetition_penalty", 0.0, 1e6, &req.repetition_penalty);
  if (p.field("repetition_penalty") != nullptr && !(req.repetition_penalty > 0.0f)) {
    p.fail("repetition_penalty", invalid_argument("'repetition_penalty' must be greater than 0"));
  }
  p.read_float("min_p", 0.0, 1.0, &req.min_p);
  if (const json* bias = p.field("logit_bias")) parse_logit_bias(p, *bias, &req);
  if (const json* ids = p.field("stop_token_ids")) parse_stop_token_ids(p, *ids, limits, &req);
  if (const json* rf = p.field("response_format")) {
    RequestError e;
    if (!parse_response_format(*rf, &req, &e)) p.fail(e.param, e.status);
  }
  // After response_format and tool_choice: a grammar excludes both.
  if (RequestError e; !p.failed() && !parse_grammar(p.field("grammar"), p.field("guided_grammar"),
                                                    p.field("guided_regex"), &req, &e)) {
    p.fail(e.param, e.status);
  }
  parse_logprobs(p, kind, &req);
  p.read_bool("stream", &req.stream);
  if (const json* so = p.field("stream_options")) {
    if (!so->is_object()) {
      p.fail("stream_options", invalid_argument("'stream_options' must be an object"));
    } else {
      for (auto it = so->begin(); it != so->end(); ++it) {
        if (it.key() != "include_usage" && it.key() != "continuous_usage_stats") {
          p.fail("stream_options." + it.key(),
                 invalid_argument("unsupported field 'stream_options.{}'", it.key()));
        } else if (!it->is_boolean()) {
          p.fail("stream_options." + it.key(), invalid_argument("must be a boolean"));
        } else if (it.key() == "include_usage") {
          req.include_usage = it->get<bool>();
        } else if (it->get<bool>()) {
          p.fail("stream_options.continuous_usage_stats", not_supported("not supported"));
        }
      }
      if (!req.stream && !p.failed()) {
        p.fail("stream_options", invalid_argument("'stream_options' needs 'stream': true"));
      }
    }
  }
  p.read_string("user", &req.user);
  if (req.max_tokens && req.min_tokens > *req.max_tokens) {
    p.fail("min_tokens", invalid_argument("'min_tokens' ({}) exceeds 'max_tokens' ({})",
                                          req.min_tokens, *req.max_tokens));
  }
  if (p.failed()) return std::nullopt;
  return req;
}

}  // namespace cellm::server
