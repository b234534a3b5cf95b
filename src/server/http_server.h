// Server: the OpenAI-compatible HTTP front end. Routes /v1/completions,
// /v1/chat/completions (JSON or server-sent events), /v1/models,
// /v1/models/{id}, /health, /metrics, /tokenize, /detokenize and a chat page
// at /. It can listen before the model is loaded (health answers 503 until
// set_service()), admits generations through a bounded queue (429 when full)
// and drains on stop(). With API keys every route but /, /health (and
// /metrics when metrics_open) needs "Authorization: Bearer KEY" (401
// otherwise); with CORS origins it answers preflights and adds
// Access-Control-Allow-Origin for those origins only. It refuses a port that
// another process listens on (no SO_REUSEPORT).
//
// Thread-safety: bind() and serve() belong to one thread; set_service(),
// set_load_failed(), stop() and the accessors may be called from any thread.
// stop() may run while serve() blocks in another thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cellm/status.h"
#include "server/generation_service.h"
#include "server/openai_request.h"

namespace cellm::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                    // 0: any free port (see Server::port())
  std::int32_t max_queue = 256;       // requests waiting for capacity before 429
  std::size_t body_limit = 8u << 20;  // request bytes before 413
  std::int32_t max_running = 0;       // sequences at once; 0: the service's max_sequences()
  std::int32_t threads = 0;           // HTTP worker threads; 0: max_queue + 128
  std::chrono::milliseconds drain_timeout{30000};  // stop(): wait this long before cancelling
  std::string model_name;                          // served name; empty: the service's
  RequestLimits limits;
  // Accepted bearer keys; empty: no key needed. Validated by the caller
  // (validate_api_key in access_control.h).
  std::vector<std::string> api_keys;
  bool metrics_open = false;  // with api_keys: /metrics answers without a key
  // Origins allowed to call from a browser (normalize_cors_origin), "*" for
  // any; empty: no CORS headers at all.
  std::vector<std::string> cors_origins;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Opens the listening socket. InvalidArgument naming host:port and what to
  // do on failure; a port another process listens on is refused.
  Status bind();
  // The bound port (useful with port 0); -1 before bind().
  int port() const;
  // Serves until stop(); binds first when bind() was not called.
  Status serve();
  // Refuses new generations (503), wakes queued ones (503), lets running ones
  // finish for drain_timeout, cancels the rest (finish_reason "abort"), then
  // closes the listener so serve() returns. Idempotent.
  void stop();

  // The model is ready: generations are admitted from now on.
  void set_service(std::shared_ptr<GenerationService> service);
  // Loading failed: /health answers 500 with `message`, generations 503.
  void set_load_failed(std::string message);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cellm::server
