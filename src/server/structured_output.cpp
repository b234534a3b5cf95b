#include "server/structured_output.h"

#include <list>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include "grammar/ebnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/token_grammar.h"

namespace cellm::server {
namespace {

using json = nlohmann::ordered_json;

// Compiled grammars by (vocabulary, key), least recently used out first.
class GrammarCache {
 public:
  static constexpr std::size_t kEntries = 64;

  std::shared_ptr<const grammar::TokenGrammar> find(const grammar::TokenVocabulary* vocab,
                                                    const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = index_.find(full_key(vocab, key));
    if (it == index_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  void put(const grammar::TokenVocabulary* vocab, const std::string& key,
           std::shared_ptr<const grammar::TokenGrammar> g) {
    std::lock_guard lock(mu_);
    std::string k = full_key(vocab, key);
    if (index_.contains(k)) return;
    lru_.emplace_front(k, std::move(g));
    index_.emplace(std::move(k), lru_.begin());
    while (lru_.size() > kEntries) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }

 private:
  static std::string full_key(const grammar::TokenVocabulary* vocab, const std::string& key) {
    return fmt::format("{}|{}", static_cast<const void*>(vocab), key);
  }
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const grammar::TokenGrammar>>> lru_;
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
};

GrammarCache& cache() {
  static GrammarCache c;
  return c;
}

// One forced call in `format`, for the tools selected (all, or `only`).
Result<std::shared_ptr<const grammar::Grammar>> tool_call_grammar(const json& tools,
                                                                  const std::string* only,
                                                                  ToolFormat format,
                                                                  std::string* param) {
  grammar::GrammarBuilder b;
  const grammar::RuleId root = b.add_rule("tool_call");
  grammar::JsonGrammarBuilder j(b);
  auto node = [&] { return b.node(root); };
  const grammar::NodeId start = b.start(root), body = node(), body_end = node(), end = node();
  b.set_final(end);
  switch (format) {
    case ToolFormat::kHermes:
      b.literal(start, "<tool_call>\n", body);
      b.literal(body_end, "\n</tool_call>", end);
      break;
    case ToolFormat::kMistral:
      b.literal(start, "[", body);
      b.literal(body_end, "]", end);
      break;
    case ToolFormat::kLlama3:
    case ToolFormat::kGemma:
    case ToolFormat::kNone:
      b.epsilon(start, body);
      b.epsilon(body_end, end);
      break;
  }
  const char* args_key = format == ToolFormat::kLlama3 ? "\"parameters\"" : "\"arguments\"";
  // Literal pieces joined by optional whitespace.
  auto chain = [&](grammar::NodeId from, std::initializer_list<std::string> pieces) {
    grammar::NodeId at = from;
    bool first = true;
    for (const std::string& piece : pieces) {
      if (!first) {
        const grammar::NodeId spaced = node();
        j.whitespace(at, spaced);
        at = spaced;
      }
      first = false;
      const grammar::NodeId next = node();
      b.literal(at, piece, next);
      at = next;
    }
    const grammar::NodeId spaced = node();
    j.whitespace(at, spaced);
    return spaced;
  };
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const json& fn = tools[i]["function"];
    const std::string name = fn["name"].get<std::string>();
    if (only != nullptr && name != *only) continue;
    const grammar::NodeId args =
        chain(body, {"{", "\"name\"", ":", json(name).dump(), ",", args_key, ":"});
    const grammar::NodeId args_end = node(), close = node();
    auto params = fn.find("parameters");
    if (params == fn.end() || params->is_null()) {
      j.any_object(args, args_end);
    } else if (Status s = j.value(*params, args, args_end); !s.is_ok()) {
      *param = fmt::format("tools[{}].function.parameters", i);
      return s;
    }
    j.whitespace(args_end, close);
    b.literal(close, "}", body_end);
  }
  return b.build(root);
}

// The grammar extension (parse_grammar has refused it beside JSON or a
// forced call).
StructuredOutput user_grammar_constraint(
    const GenerationRequest& r, const std::shared_ptr<const grammar::TokenVocabulary>& vocab) {
  StructuredOutput out;
  out.param = r.grammar_param;
  if (vocab == nullptr) {
    out.status = invalid_argument(
        "this server cannot constrain decoding (its model service offers no token vocabulary)");
    return out;
  }
  const bool regex = r.grammar_syntax == GrammarSyntax::kRegex;
  const std::string key = (regex ? "regex|" : "ebnf|") + r.grammar_text;
  if (auto hit = cache().find(vocab.get(), key)) {
    out.constraint = std::move(hit);
    out.param.clear();
    return out;
  }
  auto g = regex ? grammar::compile_regex(r.grammar_text) : grammar::compile_ebnf(r.grammar_text);
  if (!g.ok()) {
    out.status =
        invalid_argument("the {} in '{}' does not compile: {}", regex ? "regex" : "grammar",
                         r.grammar_param, g.status().message());
    return out;
  }
  auto tg = grammar::TokenGrammar::create(std::move(*g), vocab);
  cache().put(vocab.get(), key, tg);
  out.constraint = std::move(tg);
  out.param.clear();
  return out;
}

}  // namespace

StructuredOutput structured_constraint(
    const GenerationRequest& r, ToolFormat format,
    const std::shared_ptr<const grammar::TokenVocabulary>& vocab) {
  StructuredOutput out;
  const bool forced = r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed;
  if (r.grammar_syntax != GrammarSyntax::kNone) return user_grammar_constraint(r, vocab);
  if (!forced && r.response_format == ResponseFormat::kText) return out;
  if (forced && r.response_format != ResponseFormat::kText) {
    out.status = invalid_argument(
        "tool_choice \"required\" or a named function cannot be combined with a JSON "
        "response_format: the reply is a tool call");
    out.param = "response_format";
    return out;
  }
  const std::string param = forced ? "tool_choice" : "response_format";
  if (vocab == nullptr) {
    out.status = invalid_argument(
        "this server cannot constrain decoding (its model service offers no token vocabulary)");
    out.param = param;
    return out;
  }
  std::string key;
  if (forced) {
    key =
        fmt::format("tools|{}|{}|{}", static_cast<int>(format),
                    r.tool_choice == ToolChoice::kNamed ? r.tool_choice_name : "*", r.tools.dump());
  } else if (r.response_format == ResponseFormat::kJsonObject) {
    key = "json_object";
  } else {
    key = "schema|" + r.response_schema.dump();
  }
  if (forced) {
    // How the reply is read back: the bare JSON object form where the
    // family has no JSON convention of its own.
    out.tool_format =
        format == ToolFormat::kNone || format == ToolFormat::kGemma ? ToolFormat::kLlama3 : format;
  }
  if (auto hit = cache().find(vocab.get(), key)) {
    out.constraint = std::move(hit);
    return out;
  }
  Result<std::shared_ptr<const grammar::Grammar>> g = [&]() {
    if (forced) {
      std::string bad = "tools";
      auto compiled = tool_call_grammar(
          r.tools, r.tool_choice == ToolChoice::kNamed ? &r.tool_choice_name : nullptr,
          format == ToolFormat::kGemma ? ToolFormat::kNone : format, &bad);
      if (!compiled.ok()) out.param = bad;
      return compiled;
    }
    if (r.response_format == ResponseFormat::kJsonObject) return grammar::compile_json_object();
    auto compiled = grammar::compile_json_schema(r.response_schema);
    if (!compiled.ok()) out.param = "response_format.json_schema.schema";
    return compiled;
  }();
  if (!g.ok()) {
    out.status = invalid_argument("{}", g.status().message());
    if (out.param.empty()) out.param = param;
    return out;
  }
  auto tg = grammar::TokenGrammar::create(std::move(*g), vocab);
  cache().put(vocab.get(), key, tg);
  out.constraint = std::move(tg);
  return out;
}

}  // namespace cellm::server
