// Perplexity of a model over a token sequence, measured through the request
// path `cellm serve` takes (Runner::submit with prompt log-probabilities), the
// way llama.cpp's perplexity tool measures it: the tokens are cut into
// windows of `context` tokens (each starting with the model's BOS when it has
// one), every window is one request, and only the tokens of a window's
// second half are scored, so each scored token has at least context / 2
// tokens before it. All windows are submitted at once: the engine batches
// them as it batches users.
//
// Thread-safety: measure_perplexity blocks the calling thread (never the
// engine thread) until every window is done.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "cellm/runner.h"
#include "cellm/status.h"

namespace cellm::app {

struct PerplexityOptions {
  std::int32_t context = 512;    // tokens a window, >= 4
  std::int32_t max_windows = 0;  // 0: every whole window the text holds
  std::optional<Token> bos;      // put first in every window (it replaces no text token)
};

struct PerplexityReport {
  double perplexity = 0.0;  // exp(mean negative log-likelihood)
  double nll_mean = 0.0;    // nats per scored token
  double nll_stderr = 0.0;  // standard error of nll_mean
  std::int64_t scored = 0;  // tokens scored
  std::int32_t windows = 0;
};

// InvalidArgument when the tokens do not fill one window (saying how many are
// needed) or the options are out of range; the first failed window's error
// otherwise.
Result<PerplexityReport> measure_perplexity(Runner& runner, std::span<const Token> tokens,
                                            const PerplexityOptions& options);

}  // namespace cellm::app
