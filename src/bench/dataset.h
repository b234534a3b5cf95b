// `cellm bench serve --dataset FILE`: a load of real requests instead of
// random token prompts. The file is JSON Lines, one request a line, either
//   {"messages": [{"role": "user", "content": "..."}], "max_tokens": N}
// (sent to /v1/chat/completions, so the model's chat template applies) or
//   {"prompt": "...", "max_tokens": N}
// (sent to /v1/completions), with an optional "stop" (a string or a list of
// strings, sent as the request's stop: a base model's prompt needs one to end
// where the task does). Blank lines are skipped; any other key is an error,
// so that a field the bench would silently drop (temperature, say) is
// noticed. The run takes the lines in order and starts over from the
// first when it needs more requests than the file holds.
//
// Thread-safety: pure functions (read_dataset reads the file once).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cellm/status.h"

namespace cellm::bench {

struct DatasetRequest {
  bool chat = false;        // "messages" (chat completions) or "prompt" (completions)
  nlohmann::json messages;  // chat: the array as written
  std::string prompt;       // completions
  int max_tokens = 0;
  nlohmann::json stop;  // null, or a non-empty array of non-empty strings
  int line = 0;         // 1-based line of the file, for messages
  // Bytes of prompt text (every message's content, or the prompt).
  std::size_t text_bytes = 0;
};

// Parses JSONL text; `name` (the file's path) heads every error, which names
// the line and what is wrong with it. Refuses a text without any request.
Result<std::vector<DatasetRequest>> parse_dataset(std::string_view text, const std::string& name);

// Reads and parses `path` (NotFound when it cannot be read).
Result<std::vector<DatasetRequest>> read_dataset(const std::string& path);

// Request i of a run of `count` over the file's requests: i modulo their number.
std::vector<DatasetRequest> cycle_requests(const std::vector<DatasetRequest>& file, int count);

// An upper bound on the tokens a session of this load holds: the longest
// prompt text counted as a token a byte (no tokenizer this project supports
// gives a byte more than one token), plus what a chat template adds around the
// messages, plus max_tokens. Sizes the in-process server before any tokenizer
// has been loaded.
int dataset_session_tokens(const std::vector<DatasetRequest>& requests);

// The options that shape random prompts, which a dataset replaces: refused
// with --dataset, naming the first of `given` (the option names on the
// command line) found among them.
Status check_dataset_options(const std::vector<std::string>& given);

}  // namespace cellm::bench
