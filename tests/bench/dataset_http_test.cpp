// The HTTP side of --dataset and --speculate: request bodies and routes,
// chat stream events, option checks, the speculation counters of a /metrics
// page, tallying without exact lengths, and the JSON line's fields.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/http_client.h"
#include "bench/http_report.h"
#include "bench/load_plan.h"

namespace cellm::bench {
namespace {

bool has(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

DatasetRequest chat_request() {
  auto r = parse_dataset(
      R"({"messages": [{"role": "user", "content": "Rewrite: the cat sat."}], "max_tokens": 9})",
      "t");
  EXPECT_TRUE(r.ok());
  return (*r)[0];
}

// A file standing for a model path: the checks only ask that it exists and
// can be read (nothing loads it).
std::string smollm2() {
  const std::string path = ::testing::TempDir() + "/dataset_http_test_model.gguf";
  std::ofstream(path) << "GGUF";
  return path;
}

TEST(BenchDatasetBodyTest, ChatGoesToChatCompletionsWithItsMessagesAndNoIgnoreEos) {
  HttpBenchOptions o;
  o.ignore_eos = false;  // what the CLI sets for a dataset
  const DatasetRequest chat = chat_request();
  EXPECT_STREQ(dataset_route(chat), "chat/completions");
  const nlohmann::json j = nlohmann::json::parse(dataset_body(o, "m", chat, 5));
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["messages"],
            nlohmann::json::parse(R"([{"role": "user", "content": "Rewrite: the cat sat."}])"));
  EXPECT_FALSE(j.contains("prompt"));
  EXPECT_EQ(j["max_tokens"], 9);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"]["include_usage"], true);
  EXPECT_FALSE(j.contains("ignore_eos"));
  EXPECT_FALSE(j.contains("stop"));
  // The warm-up caps the output.
  EXPECT_EQ(nlohmann::json::parse(dataset_body(o, "m", chat, 5, 4))["max_tokens"], 4);

  auto completion = parse_dataset(R"({"prompt": "Once", "max_tokens": 2, "stop": "."})", "t");
  ASSERT_TRUE(completion.ok());
  EXPECT_STREQ(dataset_route((*completion)[0]), "completions");
  o.ignore_eos = true;
  o.load.temperature = 0.7f;
  const nlohmann::json c = nlohmann::json::parse(dataset_body(o, "m", (*completion)[0], 11));
  EXPECT_EQ(c["prompt"], "Once");
  EXPECT_FALSE(c.contains("messages"));
  EXPECT_EQ(c["stop"], nlohmann::json::array({"."}));
  EXPECT_EQ(c["ignore_eos"], true);
  EXPECT_EQ(c["seed"], 11);
}

TEST(BenchDatasetBodyTest, AChatDeltaCarriesText) {
  StreamEvent e = interpret_event(
      R"({"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]})");
  EXPECT_EQ(e.kind, StreamEvent::Kind::kChunk);
  EXPECT_TRUE(e.has_text);
  e = interpret_event(R"({"choices":[{"index":0,"delta":{"role":"assistant"}}]})");
  EXPECT_FALSE(e.has_text);  // the opening role chunk is not a token
  e = interpret_event(R"({"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]})");
  EXPECT_FALSE(e.has_text);
  EXPECT_EQ(e.finish_reason, "stop");
  e = interpret_event(R"({"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]})");
  EXPECT_TRUE(e.has_text);
}

TEST(BenchDatasetOptionsTest, RefusalsNameTheOptionAndWhatToDo) {
  auto message = [](const HttpBenchOptions& o) { return std::string(validate(o).message()); };
  HttpBenchOptions o;
  o.load.model = smollm2();
  o.dataset = {chat_request()};
  o.dataset_path = "d.jsonl";
  EXPECT_TRUE(validate(o).is_ok()) << validate(o).to_string();

  HttpBenchOptions shape = o;
  shape.load.model = "smollm2-135m";
  EXPECT_TRUE(has(message(shape), "--dataset needs a model with a tokenizer")) << message(shape);
  EXPECT_TRUE(has(message(shape), "models/")) << message(shape);
  shape.url = "http://127.0.0.1:9";  // a --url server tokenizes for itself
  EXPECT_TRUE(validate(shape).is_ok()) << message(shape);

  HttpBenchOptions inproc = o;
  inproc.compare_inprocess = true;
  EXPECT_TRUE(has(message(inproc), "--inprocess with --dataset")) << message(inproc);

  HttpBenchOptions spec = o;
  spec.speculate = "draft";
  EXPECT_TRUE(has(message(spec), "--draft-model")) << message(spec);
  spec.draft_model = o.load.model;
  EXPECT_TRUE(validate(spec).is_ok()) << message(spec);
  spec.draft_model = "/no/such/draft.gguf";
  EXPECT_TRUE(has(message(spec), "/no/such/draft.gguf")) << message(spec);
  spec.speculate = "ngram";
  spec.draft_model = o.load.model;
  EXPECT_TRUE(has(message(spec), "only used with --speculate draft")) << message(spec);
  spec.draft_model.clear();
  spec.speculate_tokens = 0;
  EXPECT_TRUE(has(message(spec), "--speculate-tokens")) << message(spec);
  spec.speculate_tokens = 17;
  EXPECT_TRUE(has(message(spec), "--speculate-tokens")) << message(spec);
  spec.speculate_tokens = 16;
  EXPECT_TRUE(validate(spec).is_ok()) << message(spec);
  spec.speculate = "medusa";
  EXPECT_TRUE(has(message(spec), "off, ngram or draft")) << message(spec);

  HttpBenchOptions url = o;
  url.speculate = "ngram";
  url.url = "http://127.0.0.1:9";
  EXPECT_TRUE(has(message(url), "--speculate configures the server")) << message(url);
  HttpBenchOptions random_shape;  // no dataset: a shape cannot speculate either
  random_shape.load.model = "smollm2-135m";
  random_shape.speculate = "ngram";
  EXPECT_TRUE(has(message(random_shape), "--speculate needs a model path"))
      << message(random_shape);
  HttpBenchOptions ratio = o;
  ratio.dataset.clear();
  ratio.dataset_path.clear();
  ratio.speculate = "ngram";
  ratio.compare_inprocess = true;
  EXPECT_TRUE(has(message(ratio), "--inprocess with --speculate")) << message(ratio);
}

TEST(BenchSpecCountersTest, SumsCellmAndVllmCountersAndIgnoresTheRest) {
  EXPECT_FALSE(parse_spec_counters("").has_value());
  EXPECT_FALSE(parse_spec_counters("# HELP x\ncellm:requests_total 4\n").has_value());
  const auto cellm = parse_spec_counters(
      "# HELP cellm:spec_decode_num_draft_tokens_total Draft tokens.\n"
      "# TYPE cellm:spec_decode_num_draft_tokens_total counter\n"
      "cellm:spec_decode_num_draft_tokens_total 120\n"
      "cellm:spec_decode_num_accepted_tokens_total 1.02e+02\n"
      "cellm:model_ready 1\n");
  ASSERT_TRUE(cellm.has_value());
  EXPECT_EQ(cellm->proposed, 120);
  EXPECT_EQ(cellm->accepted, 102);
  EXPECT_DOUBLE_EQ(cellm->acceptance(), 102.0 / 120.0);
  // vLLM: one sample per engine, labels, and a per-position counter that
  // must not be mistaken for the total.
  const auto vllm = parse_spec_counters(
      "vllm:spec_decode_num_draft_tokens_total{engine=\"0\",model_name=\"m\"} 40.0\n"
      "vllm:spec_decode_num_draft_tokens_total{engine=\"1\",model_name=\"m\"} 60.0\n"
      "vllm:spec_decode_num_accepted_tokens_total{engine=\"0\",model_name=\"m\"} 30.0\n"
      "vllm:spec_decode_num_accepted_tokens_total{engine=\"1\",model_name=\"m\"} 45.0\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 99.0\n");
  ASSERT_TRUE(vllm.has_value());
  EXPECT_EQ(vllm->proposed, 100);
  EXPECT_EQ(vllm->accepted, 75);
  HttpBenchReport::Speculation none;
  EXPECT_EQ(none.acceptance(), 0.0);  // nothing proposed: no division
}

TEST(BenchDatasetTallyTest, EndingAtEosIsNoMismatchAndMissingUsageIsCounted) {
  std::vector<RequestSpec> reqs(2);
  reqs[0].output_len = 8;
  reqs[1].output_len = 8;
  std::vector<RequestRecord> recs(2);
  for (RequestRecord& rec : recs) {
    rec.ok = true;
    rec.ttft_ms = 10;
    rec.e2e_ms = 40;
    rec.text_chunks = 3;
    rec.itl_ms = {15, 15};
  }
  recs[0].completion_tokens = 5;  // stopped at EOS
  recs[0].prompt_tokens = 20;
  HttpBenchReport r;
  tally_http(reqs, recs, r, /*exact_lengths=*/false);
  EXPECT_EQ(r.completed, 2);
  EXPECT_EQ(r.length_mismatches, 0);
  EXPECT_EQ(r.usage_missing, 1);
  EXPECT_EQ(r.output_tokens, 5 + 3);  // usage, then the chunks of the one without
  EXPECT_EQ(r.input_tokens, 20);      // a dataset's prompt ids are unknown here
  HttpBenchReport exact;
  tally_http(reqs, recs, exact);
  EXPECT_EQ(exact.length_mismatches, 2);
}

TEST(BenchDatasetJsonTest, RecordsTheDatasetTheSpeculationAndItsCounters) {
  HttpBenchOptions o;
  o.load.model = "models/x.gguf";
  o.dataset_path = "bench/datasets/text_edit.jsonl";
  o.dataset = {chat_request(), chat_request(), chat_request()};
  o.ignore_eos = false;
  o.speculate = "draft";
  o.draft_model = "models/x.gguf";
  o.speculate_tokens = 6;
  HttpBenchReport r;
  r.target = "in-process";
  r.completed = 3;
  r.speculation = HttpBenchReport::Speculation{40, 30};
  const nlohmann::json j = http_report_json(o, r, "abc");
  EXPECT_EQ(j["dataset"], "bench/datasets/text_edit.jsonl");
  EXPECT_EQ(j["dataset_requests"], 3);
  EXPECT_EQ(j["prompt_format"], "dataset");
  EXPECT_EQ(j["ignore_eos"], false);
  for (const char* random_only : {"input_len", "output_len", "range_ratio", "prefix_len"}) {
    EXPECT_FALSE(j.contains(random_only)) << random_only;
  }
  EXPECT_EQ(j["speculate"], "draft");
  EXPECT_EQ(j["speculate_tokens"], 6);
  EXPECT_EQ(j["draft_model"], "models/x.gguf");
  EXPECT_EQ(j["spec_proposed_tokens"], 40);
  EXPECT_EQ(j["spec_accepted_tokens"], 30);
  EXPECT_DOUBLE_EQ(j["spec_acceptance_rate"].get<double>(), 0.75);
  EXPECT_EQ(j["usage_missing"], 0);

  // Plain decoding: the settings are recorded, no counters are made up.
  HttpBenchOptions plain;
  HttpBenchReport pr;
  pr.target = "in-process";
  const nlohmann::json p = http_report_json(plain, pr, "abc");
  EXPECT_EQ(p["speculate"], "off");
  EXPECT_TRUE(p["speculate_tokens"].is_null());
  EXPECT_TRUE(p["draft_model"].is_null());
  EXPECT_FALSE(p.contains("spec_proposed_tokens"));
  EXPECT_FALSE(p.contains("dataset"));
  EXPECT_EQ(p["input_len"], plain.load.input_len);
  // A --url server's settings are unknown; its counters, when it has them, are not.
  HttpBenchReport remote;
  remote.target = "http://gpu:8000";
  remote.speculation = HttpBenchReport::Speculation{10, 0};
  const nlohmann::json u = http_report_json(plain, remote, "abc");
  EXPECT_FALSE(u.contains("speculate"));
  EXPECT_EQ(u["spec_proposed_tokens"], 10);
  EXPECT_DOUBLE_EQ(u["spec_acceptance_rate"].get<double>(), 0.0);
  const std::string table = format_http_report(o, r);
  EXPECT_TRUE(has(table, "| draft tokens proposed / accepted | 40 / 30 (acceptance 0.750) |"))
      << table;
  EXPECT_TRUE(has(table, "draft (models/x.gguf), up to 6 drafts a step")) << table;
  EXPECT_TRUE(has(table, "bench/datasets/text_edit.jsonl (3 requests in the file")) << table;
}

}  // namespace
}  // namespace cellm::bench
