// POST /v1/messages: the Anthropic Messages API over the chat path. The body
// is translated (anthropic_request.h) and handed to handle_generation, which
// validates, renders, admits and runs it exactly like /v1/chat/completions
// and shapes the answer with anthropic_response.h.
#include "server/anthropic_response.h"
#include "server/server_impl.h"

namespace cellm::server {

void Server::Impl::handle_messages(const httplib::Request& req, httplib::Response& res) {
  // Refusals before the chat path run are counted as chat requests too.
  auto refuse = [&](const Status& s, std::string_view param) {
    auto [status, body] = anthropic_error(s, param);
    reply_json(res, status, body);
  };
  {
    std::lock_guard lock(state_mu);
    if (!ready) {
      metrics.record_request(Endpoint::kChat, Outcome::kUnavailable);
      if (!load_error.empty()) {
        return refuse(internal_error("the model failed to load: {}", load_error), {});
      }
      return refuse(unavailable("the model is still loading; retry when GET /health answers 200"),
                    {});
    }
  }
  RequestError error;
  std::optional<AnthropicRequest> translated = parse_anthropic_request(req.body, &error);
  if (!translated) {
    metrics.record_request(Endpoint::kChat, Outcome::kInvalid);
    return refuse(error.status, error.param);
  }
  handle_generation(RequestKind::kChat, req, res, &*translated);
}

}  // namespace cellm::server
