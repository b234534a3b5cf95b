// Renders a parsed template against a context: Jinja's scoping (a for loop
// body and a macro are scopes, an if is not), undefined semantics of Jinja's
// default Undefined, loop objects, macros and namespaces. Every error names
// the line:column of the construct that failed; raise_exception() ends the
// render with exactly the template's message.
//
// Thread-safety: a Renderer is one render on one thread; the template tree it
// walks is shared read-only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/ast.h"
#include "chat/value.h"

namespace cellm::chat {

// Bounds on one render, so that a hostile template cannot run forever or
// exhaust memory.
struct RenderLimits {
  std::size_t max_output_bytes = std::size_t{64} << 20;  // also caps any one string or list
  std::uint64_t max_steps = 100'000'000;                 // statements + expression nodes
  int max_call_depth = 64;                               // nested macro calls
};

class Renderer {
 public:
  Renderer(const RenderLimits& limits, std::vector<std::pair<std::string, Value>> context);

  Result<std::string> render(const Body& body);

  // Used by builtins.
  Result<Value> call(const Value& callee, CallArgs& args);
  Result<Value> call_macro(const Stmt& macro, CallArgs& args);
  // Refuses a string or list of `size` bytes/items past the output limit.
  Status check_size(std::size_t size) const;
  // raise_exception(): the render ends with exactly this message.
  Status raise(std::string message);
  const RenderLimits& limits() const { return limits_; }

 private:
  enum class Flow : std::uint8_t { kNormal, kBreak, kContinue };

  struct Frame {
    Frame* parent = nullptr;
    std::vector<std::pair<std::string, Value>> vars;
    const Value* find(std::string_view name) const;
    void set(std::string name, Value value);
  };

  Result<Flow> exec_body(const Body& body, Frame& frame, std::string& out);
  Result<Flow> exec(const Stmt& s, Frame& frame, std::string& out);
  Result<Flow> exec_for(const Stmt& s, Frame& frame, std::string& out);
  Status assign(const Stmt& s, const std::vector<std::string>& targets, Value v, Frame& frame);
  Status append(std::string& out, std::string_view text) const;

  Result<Value> eval(const Expr& e, Frame& frame);
  Result<Value> eval_node(const Expr& e, Frame& frame);
  Result<Value> eval_call(const Expr& e, Frame& frame);
  Result<CallArgs> eval_args(const Expr& e, std::size_t first, Frame& frame);
  Result<Value> lookup(const std::string& name, const Frame& frame) const;
  // Adds the position to errors raised by builtins (not to raise_exception's).
  Status at(SourcePos pos, const Status& s) const;

  RenderLimits limits_;
  Frame root_;
  std::uint64_t steps_ = 0;
  int call_depth_ = 0;
  bool raised_ = false;
  const Value* filter_block_input_ = nullptr;
};

// Binary operators (+ - * / // % ** ~) and comparisons (== != < > <= >= in,
// "not in") with Python semantics; errors carry no position.
Result<Value> binary_op(Renderer& r, std::string_view op, const Value& a, const Value& b);
Result<bool> compare_op(std::string_view op, const Value& a, const Value& b);
// obj.name / obj[key] with Jinja's lookup order.
Result<Value> get_attr(const Value& obj, const std::string& name);
Result<Value> get_item(const Value& obj, const Value& key);

}  // namespace cellm::chat
