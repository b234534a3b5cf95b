// Shared by `cellm run` and `cellm chat`: loading the engine with a progress
// line, the sampling options, and streaming one generation's text to a sink
// as it is produced.
//
// Thread-safety: the sink is called on the engine thread, one call at a time.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "app/engine.h"
#include "cellm/metrics.h"
#include "cellm/runner.h"
#include "cellm/sampling_defaults.h"
#include "model/quantize.h"

namespace cellm::cli {

// The help of --keep-quantized (run, chat, serve, bench step, bench serve).
inline constexpr const char* kKeepQuantizedHelp =
    "CUDA, experimental: keep a GGUF file's block-quantized projections and an FP8 checkpoint's "
    "codes quantized on the GPU instead of converting them to bf16 at load (--quantize fp8 "
    "implies it): a quarter to half the GPU memory; one-row decode is faster than bf16's, and "
    "so are prefill and batched decode of FP8 with one scale per row (Hopper), but other wide "
    "steps are slower";

// The help of --quantize (run, chat, serve, perplexity, bench step, bench serve).
inline constexpr const char* kQuantizeHelp =
    "store the projection weights as FP8 E4M3 with one scale per output row "
    "(bf16/f16/f32 checkpoints); the CUDA backend multiplies them in FP8 form, the CPU in float";

// Registers `--quantize NAME` on `cmd`, parsed into `out` (model::parse_quantize);
// an unknown name is a parse error naming the choices.
void add_quantize_option(CLI::App& cmd, model::Quantize& out);

// The help of --kv-dtype (run, chat, serve, perplexity, bench step, inspect).
inline constexpr const char* kKvDtypeHelp =
    "the KV cache's element type: bf16, or fp8 (CUDA: E4M3 codes with one fixed scale of 1 for "
    "every model, values beyond +-448 saturated; half the bytes a token, so the same memory "
    "holds twice the tokens and decode reads half the K/V bytes, for E4M3's 3 mantissa bits "
    "against bf16's 7). The CPU keeps f32 K/V (f32 names it) and refuses fp8";

// Registers `--kv-dtype NAME` on `cmd`, parsed into `out` (parse_kv_dtype); an
// unknown name is a parse error naming the accepted ones.
void add_kv_dtype_option(CLI::App& cmd, DType& out);

struct ModelArgs {
  std::string model;  // empty: $CELLM_MODEL, else smollm2 (see app/model_path.h)
  std::string backend = "auto";
  std::string cpu_program;  // empty: fast
  int threads = 0;          // 0: $CELLM_THREADS, else every core
  int max_sessions = 4;
  int max_session_tokens = 0;     // 0: the model's context
  std::string speculate = "off";  // app::EngineOptions::speculate
  int speculate_tokens = 4;
  std::string draft_model;                            // app::EngineOptions::draft_model
  bool keep_quantized = false;                        // program::ProgramOptions::keep_quantized
  model::Quantize quantize = model::Quantize::kNone;  // app::EngineOptions::quantize
  DType kv_dtype = DType::kBF16;                      // app::EngineOptions::kv_dtype
};

// Settings left unset on the command line take the model's own defaults
// (generation_config.json / GGUF general.sampling.*), else the values here.
struct SamplingArgs {
  int max_tokens = 256;
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  float repetition_penalty = 1.0f;
  std::optional<std::uint64_t> seed;
  // Stop strings (`cellm run --stop`): the engine ends the generation where
  // one appears; the text is cut there and the stop string is not printed.
  std::vector<std::string> stop;
  // Set by add_sampling_options: which settings the command line gave.
  const CLI::Option* temperature_option = nullptr;
  const CLI::Option* top_p_option = nullptr;
  const CLI::Option* top_k_option = nullptr;
  const CLI::Option* repetition_penalty_option = nullptr;

  SamplingGiven given() const;
};

void add_model_options(CLI::App& cmd, ModelArgs& args);
void add_sampling_options(CLI::App& cmd, SamplingArgs& args);

// The engine, or nullptr after printing one line that says what to do.
// `prefix_cache_entries`: prompt snapshots the runner keeps (0: none).
std::unique_ptr<app::Engine> load_engine(const ModelArgs& args, bool show_progress,
                                         std::int32_t prefix_cache_entries = 0);

struct StreamResult {
  std::vector<Token> tokens;  // every delivered token (the stop token included)
  std::string text;           // the streamed text (stop tokens not rendered)
  FinishReason reason = FinishReason::kFailed;
  std::string error;
  GenerationMetrics metrics;       // the engine's, for the prompt's generation
  std::int64_t cached_tokens = 0;  // prompt tokens the prefix cache held
};

// Submits `prompt` as one request to the engine's runner (Runner::submit,
// the path the server takes) and waits for it, calling `sink` on the engine
// thread with each piece of final text. Once `*cancel` turns true (it may be
// set from a signal handler) the request is cancelled: it ends kCancelled
// unless it had already ended.
StreamResult stream_generation(app::Engine& engine, std::vector<Token> prompt,
                               const SamplingArgs& sampling,
                               const std::function<void(std::string_view)>& sink,
                               const std::atomic<bool>* cancel = nullptr);

// The metrics as one JSON object (for --json).
std::string metrics_json(const StreamResult& result, const app::Engine& engine);

}  // namespace cellm::cli
