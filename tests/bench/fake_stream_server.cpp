// A fake OpenAI-compatible endpoint that streams canned completions at a
// fixed pace and does nothing else, to measure what `cellm bench serve --url`
// itself costs and sustains: with S streams of one token every G ms it should
// report about S * 1000 / G output tokens/s and an ITL median near G, and
// `time` shows the client's own CPU. Not a test (it times things); run by hand:
//   fake_stream_server PORT GAP_MS &
//   cellm bench serve --url http://127.0.0.1:PORT --num-prompts 1000
//     --max-concurrency 256 --input-len 512 --output-len 256 --warmup 0
// (one command line). PORT 0 picks a free port, printed on stdout.
// Chat completions stream two tokens a chunk (as a speculating server may)
// and report usage.prompt_tokens as 1000 + the messages sent, so that a test
// can tell the routes apart and see that output tokens come from usage;
// /metrics counts 5 draft tokens proposed and 4 accepted per finished stream.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include <httplib.h>
#include <nlohmann/json.hpp>

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: %s PORT GAP_MS [deep]\n", argv[0]);
    return 2;
  }
  // "deep": a listen backlog and keep-alive count that a burst of 256
  // connections fits in (cpp-httplib's defaults are 5 and 5).
  const bool deep = argc == 4 && std::string(argv[3]) == "deep";
  const int port = std::atoi(argv[1]);
  const int gap_ms = std::atoi(argv[2]);
  httplib::Server server;
  server.new_task_queue = [] { return new httplib::ThreadPool(600); };
  server.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"object":"list","data":[{"id":"fake","object":"model"}]})",
                    "application/json");
  });
  // Finished streams, for the speculation counters of /metrics.
  static std::atomic<long> finished{0};
  server.Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
    const long n = finished.load();
    res.set_content(
        "# TYPE fake:spec_decode_num_draft_tokens_total counter\n"
        "fake:spec_decode_num_draft_tokens_total{engine=\"0\"} " +
            std::to_string(5 * n) + "\nfake:spec_decode_num_accepted_tokens_total{engine=\"0\"} " +
            std::to_string(4 * n) + "\n",
        "text/plain");
  });
  server.Post("/v1/chat/completions", [gap_ms](const httplib::Request& req,
                                               httplib::Response& res) {
    const nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.contains("max_tokens") || !body.contains("messages") ||
        !body["messages"].is_array()) {
      res.status = 400;
      res.set_content(R"({"error":{"message":"bad chat body"}})", "application/json");
      return;
    }
    const int total = body["max_tokens"].get<int>();
    const std::size_t prompt = 1000 + body["messages"].size();
    auto sent = std::make_shared<int>(0);
    res.set_chunked_content_provider("text/event-stream", [total, prompt, sent, gap_ms](
                                                              std::size_t,
                                                              httplib::DataSink& sink) {
      std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
      std::string out;
      if (*sent < total) {
        *sent = std::min(total, *sent + 2);
        out =
            R"(data: {"id":"chat-1","object":"chat.completion.chunk","model":"fake","choices":[{"index":0,"delta":{"content":" two tok"},"finish_reason":)" +
            std::string(*sent == total ? "\"length\"" : "null") + "}]}\n\n";
        return sink.write(out.data(), out.size());
      }
      finished.fetch_add(1);
      out =
          R"(data: {"id":"chat-1","object":"chat.completion.chunk","model":"fake","choices":[],"usage":{"prompt_tokens":)" +
          std::to_string(prompt) + R"(,"completion_tokens":)" + std::to_string(total) +
          "}}\n\ndata: [DONE]\n\n";
      sink.write(out.data(), out.size());
      sink.done();
      return true;
    });
  });
  server.Post("/v1/completions", [gap_ms](const httplib::Request& req, httplib::Response& res) {
    const nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.contains("max_tokens")) {
      res.status = 400;
      res.set_content(R"({"error":{"message":"bad body"}})", "application/json");
      return;
    }
    const int total = body["max_tokens"].get<int>();
    const std::size_t prompt = body["prompt"].is_array() ? body["prompt"].size() : 1;
    auto sent = std::make_shared<int>(0);
    res.set_chunked_content_provider("text/event-stream", [total, prompt, sent, gap_ms](
                                                              std::size_t,
                                                              httplib::DataSink& sink) {
      std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
      std::string out;
      if (*sent < total) {
        ++*sent;
        out =
            R"(data: {"id":"cmpl-1","object":"text_completion","model":"fake","choices":[{"index":0,"text":" tok","finish_reason":)" +
            std::string(*sent == total ? "\"length\"" : "null") + "}]}\n\n";
      } else {
        finished.fetch_add(1);
        out =
            R"(data: {"id":"cmpl-1","object":"text_completion","model":"fake","choices":[],"usage":{"prompt_tokens":)" +
            std::to_string(prompt) + R"(,"completion_tokens":)" + std::to_string(total) +
            "}}\n\ndata: [DONE]\n\n";
        sink.write(out.data(), out.size());
        sink.done();
        return true;
      }
      return sink.write(out.data(), out.size());
    });
  });
  std::fprintf(stderr, "fake stream server on 127.0.0.1:%d, a token every %d ms%s\n", port, gap_ms,
               deep ? ", deep backlog" : "");
  int listen_fd = -1;
  server.set_socket_options([&listen_fd](int fd) {
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd = fd;
  });
  if (deep) server.set_keep_alive_max_count(100000);
  const int bound = port == 0 ? server.bind_to_any_port("127.0.0.1")
                              : (server.bind_to_port("127.0.0.1", port) ? port : -1);
  if (bound <= 0) return 1;
  if (deep) ::listen(listen_fd, 4096);  // listen again: only the backlog changes
  // For a test that started it with port 0: where it listens, and who to stop.
  std::printf("port %d pid %d\n", bound, static_cast<int>(::getpid()));
  std::fflush(stdout);
  return server.listen_after_bind() ? 0 : 1;
}
