// Reading and checking a --dataset file (dataset.h).
#include "bench/dataset.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace cellm::bench {
namespace {

// What a chat template may add: a default system prompt (SmolLM2 has one of
// about 20 tokens), the generation prompt, and role markers per message.
constexpr int kTemplateTokens = 256;
constexpr int kTokensPerMessage = 32;

constexpr std::string_view kFormat =
    R"(one JSON object a line: {"messages": [{"role": "user", "content": "..."}], "max_tokens": N} )"
    R"(or {"prompt": "...", "max_tokens": N})";

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

// Checks one parsed line; `where` is "FILE line N".
Result<DatasetRequest> request_of(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) {
    return invalid_argument("{}: a request is a JSON object, got {} ({})", where, j.type_name(),
                            kFormat);
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "messages" && key != "prompt" && key != "max_tokens" && key != "stop") {
      return invalid_argument(
          "{}: unknown key \"{}\"; a request holds \"messages\" or \"prompt\", "
          "\"max_tokens\" and optionally \"stop\" (sampling is set for the whole run by bench "
          "serve's options)",
          where, key);
    }
  }
  const bool has_messages = j.contains("messages");
  const bool has_prompt = j.contains("prompt");
  if (has_messages == has_prompt) {
    return invalid_argument(
        "{}: give either \"messages\" (chat completions) or \"prompt\" (completions), {}", where,
        has_messages ? "not both" : "found neither");
  }
  DatasetRequest r;
  if (has_messages) {
    r.chat = true;
    const nlohmann::json& m = j["messages"];
    if (!m.is_array() || m.empty()) {
      return invalid_argument(
          "{}: \"messages\" must be a non-empty array of {{\"role\", "
          "\"content\"}} objects",
          where);
    }
    for (std::size_t i = 0; i < m.size(); ++i) {
      const nlohmann::json& msg = m[i];
      if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string() ||
          !msg.contains("content") || !msg["content"].is_string()) {
        return invalid_argument(
            "{}: message {} must be an object with string \"role\" and \"content\"", where, i);
      }
      r.text_bytes += msg["content"].get_ref<const std::string&>().size();
    }
    r.messages = m;
  } else {
    const nlohmann::json& p = j["prompt"];
    if (!p.is_string() || p.get_ref<const std::string&>().empty()) {
      return invalid_argument("{}: \"prompt\" must be a non-empty string", where);
    }
    r.prompt = p.get<std::string>();
    r.text_bytes = r.prompt.size();
  }
  const auto max_tokens = j.find("max_tokens");
  if (max_tokens == j.end()) {
    return invalid_argument("{}: \"max_tokens\" is missing (the most tokens to generate)", where);
  }
  if (!max_tokens->is_number_integer() || max_tokens->get<std::int64_t>() < 1 ||
      max_tokens->get<std::int64_t>() > (1 << 20)) {
    return invalid_argument("{}: \"max_tokens\" must be an integer in 1..{}, got {}", where,
                            1 << 20, max_tokens->dump());
  }
  r.max_tokens = max_tokens->get<int>();
  if (const auto stop = j.find("stop"); stop != j.end()) {
    const nlohmann::json list = stop->is_string() ? nlohmann::json::array({*stop}) : *stop;
    const bool ok = list.is_array() && !list.empty() &&
                    std::all_of(list.begin(), list.end(), [](const nlohmann::json& s) {
                      return s.is_string() && !s.get_ref<const std::string&>().empty();
                    });
    if (!ok) {
      return invalid_argument(
          "{}: \"stop\" must be a non-empty string or a non-empty list of them, got {}", where,
          stop->dump());
    }
    r.stop = list;
  }
  return r;
}

}  // namespace

Result<std::vector<DatasetRequest>> parse_dataset(std::string_view text, const std::string& name) {
  std::vector<DatasetRequest> requests;
  int line_no = 0;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (blank(line)) continue;
    const std::string where = fmt::format("{} line {}", name, line_no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      // e.what() says where in the line ("at line 1, column 17: ...").
      return invalid_argument("{} is not valid JSON: {} ({})", where, e.what(), kFormat);
    }
    CELLM_ASSIGN_OR_RETURN(DatasetRequest r, request_of(j, where));
    r.line = line_no;
    requests.push_back(std::move(r));
  }
  if (requests.empty()) {
    return invalid_argument("{} holds no requests: write {}", name, kFormat);
  }
  return requests;
}

Result<std::vector<DatasetRequest>> read_dataset(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return not_found(
        "--dataset {}: cannot read the file (give a JSONL file, e.g. "
        "bench/datasets/text_edit.jsonl)",
        path);
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_dataset(text.str(), "--dataset " + path);
}

std::vector<DatasetRequest> cycle_requests(const std::vector<DatasetRequest>& file, int count) {
  std::vector<DatasetRequest> out;
  if (file.empty() || count <= 0) return out;
  out.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) out.push_back(file[static_cast<std::size_t>(i) % file.size()]);
  return out;
}

int dataset_session_tokens(const std::vector<DatasetRequest>& requests) {
  std::int64_t most = 0;
  for (const DatasetRequest& r : requests) {
    const std::int64_t messages = r.chat ? static_cast<std::int64_t>(r.messages.size()) : 0;
    most = std::max<std::int64_t>(most, static_cast<std::int64_t>(r.text_bytes) + kTemplateTokens +
                                            messages * kTokensPerMessage + r.max_tokens);
  }
  return static_cast<int>(std::min<std::int64_t>(most, std::int64_t{1} << 30));
}

Status check_dataset_options(const std::vector<std::string>& given) {
  struct Refused {
    std::string_view name;  // as the CLI passes it (an option's first name)
    std::string_view shown;
    bool random_only;  // else: token-id prompts only
  };
  static constexpr std::array<Refused, 6> kRefused = {{
      {"--input-len", "--input-len (--random-input-len)", true},
      {"--output-len", "--output-len (--random-output-len)", true},
      {"--range-ratio", "--range-ratio (--random-range-ratio)", true},
      {"--prefix-len", "--prefix-len", true},
      {"--prompt-format", "--prompt-format", false},
      {"--vocab-size", "--vocab-size", false},
  }};
  for (const std::string& g : given) {
    for (const Refused& r : kRefused) {
      if (g != r.name) continue;
      if (r.random_only) {
        return invalid_argument(
            "{} shapes random prompts; with --dataset the prompts and max_tokens come from the "
            "file: drop it",
            r.shown);
      }
      return invalid_argument(
          "{} applies to random token prompts; a --dataset request is sent as the text its line "
          "holds: drop it",
          r.shown);
    }
  }
  return Status::ok();
}

}  // namespace cellm::bench
