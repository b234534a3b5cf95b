#include "app/perplexity.h"

#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cellm::app {
namespace {

// One window's request and what its callbacks collect on the engine thread
// (read by the caller only after the handle reports done).
struct Window {
  std::vector<TokenLogprobs> scored_prompt;
  std::string error;
  RequestHandle handle;
};

}  // namespace

Result<PerplexityReport> measure_perplexity(Runner& runner, std::span<const Token> tokens,
                                            const PerplexityOptions& o) {
  if (o.context < 4 || o.max_windows < 0) {
    return invalid_argument(
        "perplexity: context {} (need at least 4) and max_windows {} (need >= 0)", o.context,
        o.max_windows);
  }
  // Text tokens a window holds: all of it, but for the BOS put first.
  const std::int64_t text_per_window = o.context - (o.bos ? 1 : 0);
  std::int64_t count = static_cast<std::int64_t>(tokens.size()) / text_per_window;
  if (count == 0) {
    return invalid_argument(
        "perplexity: the text is {} tokens; a window of context {} needs {} (give a longer text "
        "or a smaller --context)",
        tokens.size(), o.context, text_per_window);
  }
  if (o.max_windows > 0) count = std::min<std::int64_t>(count, o.max_windows);

  std::vector<std::unique_ptr<Window>> windows;
  for (std::int64_t w = 0; w < count; ++w) {
    Request request;
    if (o.bos) request.prompt.push_back(*o.bos);
    const auto first = tokens.begin() + w * text_per_window;
    request.prompt.insert(request.prompt.end(), first, first + text_per_window);
    request.config.max_new_tokens = 1;
    request.config.sampling.temperature = 0.0f;
    request.config.sampling.prompt_logprobs = true;
    // A cached prefix is not scored (SamplingParams::prompt_logprobs).
    request.use_prefix_cache = false;
    auto window = std::make_unique<Window>();
    Window* wp = window.get();
    RequestCallbacks callbacks;
    callbacks.on_update = [wp](std::int32_t, const GenerationUpdate& update) {
      if (!update.prompt_logprobs.empty()) wp->scored_prompt = update.prompt_logprobs;
      if (update.finish_reason && *update.finish_reason == FinishReason::kFailed) {
        wp->error = update.error_message.empty() ? "failed" : update.error_message;
      }
    };
    CELLM_ASSIGN_OR_RETURN(window->handle, runner.submit(std::move(request), std::move(callbacks)));
    windows.push_back(std::move(window));
  }

  // Entry i of a window scores its token i + 1; the second half starts at
  // token context / 2.
  const auto from = static_cast<std::size_t>(o.context / 2 - 1);
  const auto to = static_cast<std::size_t>(o.context - 1);
  double sum = 0.0, sum_sq = 0.0;
  std::int64_t scored = 0;
  for (std::size_t w = 0; w < windows.size(); ++w) {
    Window& win = *windows[w];
    win.handle.wait();
    if (!win.error.empty()) {
      return internal_error("perplexity: window {} failed: {}", w, win.error);
    }
    if (win.scored_prompt.size() != to) {
      return internal_error("perplexity: window {} came back with {} scored tokens, not {}", w,
                            win.scored_prompt.size(), to);
    }
    for (std::size_t i = from; i < to; ++i) {
      const double nll = -static_cast<double>(win.scored_prompt[i].logprob);
      sum += nll;
      sum_sq += nll * nll;
      ++scored;
    }
  }
  PerplexityReport r;
  r.windows = static_cast<std::int32_t>(windows.size());
  r.scored = scored;
  r.nll_mean = sum / static_cast<double>(scored);
  const double var = std::max(0.0, sum_sq / static_cast<double>(scored) - r.nll_mean * r.nll_mean);
  r.nll_stderr = scored > 1 ? std::sqrt(var / static_cast<double>(scored - 1)) : 0.0;
  r.perplexity = std::exp(r.nll_mean);
  return r;
}

}  // namespace cellm::app
