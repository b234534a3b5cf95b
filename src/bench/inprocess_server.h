// The server `cellm bench serve` measures when no --url is given: cellm's own
// HTTP server (server::Server, the one `cellm serve` runs) on 127.0.0.1 at a
// free port, in this process, serving either
//  - a model path, through app::Engine and server::make_engine_service,
//    exactly as `cellm serve` assembles it; or
//  - a named shape (model/shapes.h) over random weights, through the same
//    RunnerService with a numeric text side: such a model has no tokenizer,
//    so a token's text is its decimal id after a space (" 1234"), a text
//    prompt is a list of decimal ids, and chat is refused. Prompts as token
//    ids work as for any model.
// Sessions and context are sized for the load (concurrency x longest request;
// for --dataset, a bound from the file's text). A model path gets the
// speculative decoding asked for (--speculate), as `cellm serve` does.
//
// Thread-safety: start() and the destructor on one thread; the server runs on
// a thread of its own and its handlers on the server's pool.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "bench/load_plan.h"
#include "cellm/status.h"

namespace cellm::bench {

class InProcessServer {
 public:
  static Result<std::unique_ptr<InProcessServer>> start(const HttpBenchOptions& options);
  // Stops the server (running requests are cancelled after a short drain) and
  // frees the model.
  ~InProcessServer();
  InProcessServer(const InProcessServer&) = delete;
  InProcessServer& operator=(const InProcessServer&) = delete;

  std::string url() const;  // "http://127.0.0.1:PORT"
  const std::string& model_name() const;
  const std::string& backend() const;  // "cpu" or "cuda"
  const std::string& device() const;   // GPU name or "cpu"
  std::int32_t vocab_size() const;

  struct Impl;

 private:
  explicit InProcessServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cellm::bench
