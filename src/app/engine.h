// Engine: everything needed to serve one model, assembled from a path —
// the loaded model, its tokenizer and chat template, a program on the best
// available backend (CUDA when built and a device is present, else CPU), the
// CudaExecutor over it, a Runner with a DecodeFirstScheduler sized from the
// executor, and a Runner keeping a prefix cache. The CLI and the server build
// on this; nothing above it touches kernels or the cache.
//
// Thread-safety: load() on any thread. Afterwards the accessors are safe from
// any thread; runner() follows the Runner's own contract. Destruction shuts
// the runner down first (ending live generations), then frees the executor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/generation_defaults.h"
#include "app/sizing.h"
#include "cellm/runner.h"
#include "cellm/status.h"
#include "model/model_spec.h"
#include "model/quantize.h"
#include "program/program_options.h"

namespace cellm::text {
class Tokenizer;
}

namespace cellm::app {

struct EngineOptions {
  std::filesystem::path model;   // Hugging Face folder or .gguf file
  std::string backend = "auto";  // "auto", "cpu" or "cuda"
  std::string cpu_program;       // "fast", "reference"; empty: see CudaExecutorConfig
  std::int32_t threads = 0;      // the fast CPU program's threads; 0: every core
  // Sessions generating at once (requests and their extra choices); 0: 64,
  // or as many as the KV memory holds at the context. Prefix-cache snapshots
  // get sessions of their own beyond these (see app/sizing.h).
  std::int32_t max_sessions = 0;
  std::int32_t max_session_tokens = 0;     // 0: the model's context (as memory allows)
  std::int32_t prefix_cache_entries = 16;  // 0 disables automatic prefix caching
  // Tokens a step holds; 0: decodes plus two prefill chunks. A value with no
  // room for a chunk beside the decodes is refused (app/step_budget.h).
  std::int32_t max_batch_tokens = 0;
  // Prompt tokens a session prefills per engine step (0: 256), capped by the
  // executor's widest step. Larger chunks raise throughput under load at the
  // cost of inter-token latency for the sessions decoding beside them.
  std::int32_t prefill_chunk = 0;
  std::int32_t max_decode_sequences = 0;  // 0: max_sessions
  // Speculative decoding for small decode batches: "off" or a proposer
  // ("ngram": prompt lookup; "draft": the model at draft_model, which must
  // share the target's vocabulary), with up to speculate_tokens drafts (1..16).
  std::string speculate = "off";
  std::int32_t speculate_tokens = 4;
  std::filesystem::path draft_model;  // only with speculate "draft"
  program::ProgramOptions program;
  // `--kv-dtype`: CudaExecutorConfig::kv_dtype (bf16; fp8 on CUDA only).
  DType kv_dtype = DType::kBF16;
  // model::LoadOptions::quantize (`--quantize fp8`): the projections rounded
  // to FP8 E4M3 with per-row scales on load.
  model::Quantize quantize = model::Quantize::kNone;
};

struct LoadProgress {
  std::string stage;  // "reading model", "building program", "capturing graphs", ...
  double fraction = 0.0;
};
using ProgressCallback = std::function<void(const LoadProgress&)>;

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> load(const EngineOptions& options,
                                              const ProgressCallback& progress = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Runner& runner();
  const text::Tokenizer& tokenizer() const;
  // Each token's bytes in generated text (RunnerOptions::token_bytes).
  const TokenBytesTable& token_bytes() const;

  // Renders `messages` (OpenAI-style list) through the model's chat template.
  // `extra` holds template variables (tools, enable_thinking, ...). NotFound
  // when the model ships no template.
  // Ordered JSON keeps key order as the client sent it, which `tojson` in a
  // template exposes (tool schemas, arguments).
  Result<std::string> render_chat(
      const nlohmann::ordered_json& messages, bool add_generation_prompt,
      const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;
  bool has_chat_template() const;
  // The Jinja source of the usable chat template; empty when there is none.
  const std::string& chat_template_source() const;
  // Token ids that end a generation (the model's EOS set).
  const std::vector<Token>& stop_tokens() const;
  // Prompt text to token ids, adding BOS the way the model expects.
  Result<std::vector<Token>> encode(std::string_view text, bool add_special) const;

  const model::ModelSpec& spec() const;
  const std::string& model_name() const;    // file or folder name
  const std::string& backend_name() const;  // "cpu" or "cuda"
  std::int32_t max_session_tokens() const;  // the per-session position limit
  // Sessions that generate at once (the admission limit), and the sessions
  // held beyond them for prefix-cache snapshots (the runner's cache entries
  // plus the one a request takes before the oldest is evicted).
  std::int32_t max_sessions() const;
  std::int32_t snapshot_sessions() const;
  std::int32_t prefix_cache_entries() const;  // 0 without a cache
  // How the context and sessions were chosen, as logged at load.
  const Sizing& sizing() const;
  std::string sizing_summary() const;
  // Sampling defaults the model ships (generation_config.json or GGUF
  // general.sampling.*); every field unset when it ships none.
  const SamplingDefaults& generation_defaults() const;
  // The scheduler's limits as resolved at load.
  std::int32_t prefill_chunk() const;
  std::int32_t max_batch_tokens() const;
  // KV cells holding tokens and cells in the pool (scratch excluded), as of
  // the engine thread's last step, open, clone or close. Any thread.
  struct KvCells {
    std::int64_t used = 0;
    std::int64_t total = 0;
  };
  KvCells kv_cells() const;
  // Speculative decoding's totals since load (drafts verified and kept);
  // nullopt when it is off. Any thread.
  struct SpeculationTotals {
    std::int64_t drafted = 0;
    std::int64_t accepted = 0;
  };
  std::optional<SpeculationTotals> speculation() const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cellm::app
