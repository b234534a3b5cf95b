#include "chat/renderer.h"

#include <algorithm>

#include "chat/builtins.h"
#include "chat/utf8.h"

namespace cellm::chat {
namespace {

constexpr std::string_view kPrefix = "chat template ";

Status error_at(SourcePos pos, std::string_view message) {
  return invalid_argument("{}", located(pos, message));
}

}  // namespace

const Value* Renderer::Frame::find(std::string_view name) const {
  for (const Frame* f = this; f != nullptr; f = f->parent) {
    for (const auto& [k, v] : f->vars) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Renderer::Frame::set(std::string name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(std::move(name), std::move(value));
}

Renderer::Renderer(const RenderLimits& limits, std::vector<std::pair<std::string, Value>> context)
    : limits_(limits) {
  root_.vars = std::move(context);
}

Result<std::string> Renderer::render(const Body& body) {
  std::string out;
  auto flow = exec_body(body, root_, out);
  if (!flow.ok()) return flow.status();
  return out;
}

Status Renderer::check_size(std::size_t size) const {
  if (size > limits_.max_output_bytes) {
    return out_of_resources(
        "the render would build a string or list of {} elements, over the "
        "limit of {}",
        size, limits_.max_output_bytes);
  }
  return Status::ok();
}

Status Renderer::raise(std::string message) {
  raised_ = true;
  return invalid_argument("{}", message);
}

Status Renderer::at(SourcePos pos, const Status& s) const {
  if (s.is_ok() || raised_ || s.message().substr(0, kPrefix.size()) == kPrefix) return s;
  return Status(s.code(), located(pos, s.message()));
}

Status Renderer::append(std::string& out, std::string_view text) const {
  if (out.size() + text.size() > limits_.max_output_bytes) {
    return out_of_resources("the rendered text exceeds {} bytes", limits_.max_output_bytes);
  }
  out.append(text);
  return Status::ok();
}

Result<Renderer::Flow> Renderer::exec_body(const Body& body, Frame& frame, std::string& out) {
  for (const StmtPtr& s : body) {
    CELLM_ASSIGN_OR_RETURN(Flow flow, exec(*s, frame, out));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Status Renderer::assign(const Stmt& s, const std::vector<std::string>& targets, Value v,
                        Frame& frame) {
  if (targets.size() == 1) {
    frame.set(targets[0], std::move(v));
    return Status::ok();
  }
  auto items = iterate(v);
  if (!items.ok()) return at(s.pos, items.status());
  if (items->size() != targets.size()) {
    return error_at(
        s.pos, fmt::format("cannot unpack {} values into {} names", items->size(), targets.size()));
  }
  for (std::size_t i = 0; i < targets.size(); ++i) frame.set(targets[i], std::move((*items)[i]));
  return Status::ok();
}

Result<Renderer::Flow> Renderer::exec(const Stmt& s, Frame& frame, std::string& out) {
  if (++steps_ > limits_.max_steps) {
    return at(s.pos, out_of_resources("the render exceeded {} steps", limits_.max_steps));
  }
  switch (s.kind) {
    case StmtKind::kText:
      CELLM_RETURN_IF_ERROR(at(s.pos, append(out, s.text)));
      return Flow::kNormal;
    case StmtKind::kOutput: {
      CELLM_ASSIGN_OR_RETURN(Value v, eval(*s.expr, frame));
      CELLM_RETURN_IF_ERROR(at(s.pos, append(out, to_display_string(v))));
      return Flow::kNormal;
    }
    case StmtKind::kIf:
      for (std::size_t i = 0; i < s.conditions.size(); ++i) {
        CELLM_ASSIGN_OR_RETURN(Value c, eval(*s.conditions[i], frame));
        if (truthy(c)) return exec_body(s.bodies[i], frame, out);
      }
      return exec_body(s.else_body, frame, out);
    case StmtKind::kFor: return exec_for(s, frame, out);
    case StmtKind::kSet: {
      CELLM_ASSIGN_OR_RETURN(Value v, eval(*s.expr, frame));
      CELLM_RETURN_IF_ERROR(assign(s, s.targets, std::move(v), frame));
      return Flow::kNormal;
    }
    case StmtKind::kSetAttr: {
      const Value* target = frame.find(s.targets[0]);
      if (target == nullptr || !target->is_namespace()) {
        return error_at(s.pos, fmt::format("cannot assign attribute '{}' of '{}': it is not a "
                                           "namespace (use namespace(...))",
                                           s.attribute, s.targets[0]));
      }
      if (!s.attribute.empty() && s.attribute[0] == '_') {
        return error_at(
            s.pos, fmt::format("namespace attributes may not start with '_' ('{}')", s.attribute));
      }
      const Value ns = *target;
      CELLM_ASSIGN_OR_RETURN(Value v, eval(*s.expr, frame));
      if (contains_namespace(v)) {
        return error_at(s.pos, "a namespace cannot be stored inside a namespace");
      }
      ns.as_namespace().set(s.attribute, std::move(v));
      return Flow::kNormal;
    }
    case StmtKind::kSetBlock: {
      std::string captured;
      CELLM_ASSIGN_OR_RETURN(Flow flow, exec_body(s.body, frame, captured));
      (void)flow;
      frame.set(s.targets[0], Value::string(std::move(captured)));
      return Flow::kNormal;
    }
    case StmtKind::kMacro: {
      const Stmt* macro = &s;
      frame.set(s.text, Value::function(s.text, [macro](Renderer& r, CallArgs& args) {
                  return r.call_macro(*macro, args);
                }));
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      std::string captured;
      CELLM_ASSIGN_OR_RETURN(Flow flow, exec_body(s.body, frame, captured));
      (void)flow;
      const Value input = Value::string(std::move(captured));
      const Value* saved = filter_block_input_;
      filter_block_input_ = &input;
      auto v = eval(*s.expr, frame);
      filter_block_input_ = saved;
      if (!v.ok()) return v.status();
      CELLM_RETURN_IF_ERROR(at(s.pos, append(out, to_display_string(*v))));
      return Flow::kNormal;
    }
    case StmtKind::kWith: {
      Frame inner;
      inner.parent = &frame;
      for (const auto& [name, expr] : s.assignments) {
        CELLM_ASSIGN_OR_RETURN(Value v, eval(*expr, inner));
        inner.set(name, std::move(v));
      }
      return exec_body(s.body, inner, out);
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
    case StmtKind::kGeneration: return exec_body(s.body, frame, out);
  }
  return Flow::kNormal;
}

Result<Renderer::Flow> Renderer::exec_for(const Stmt& s, Frame& frame, std::string& out) {
  CELLM_ASSIGN_OR_RETURN(Value iterable, eval(*s.expr, frame));
  auto listed = iterate(iterable);
  if (!listed.ok()) return at(s.expr->pos, listed.status());
  std::vector<Value> items = std::move(listed).value();
  if (s.condition) {
    std::vector<Value> kept;
    for (Value& item : items) {
      if (++steps_ > limits_.max_steps) {
        return at(s.pos, out_of_resources("the render exceeded {} steps", limits_.max_steps));
      }
      Frame probe;
      probe.parent = &frame;
      CELLM_RETURN_IF_ERROR(assign(s, s.targets, item, probe));
      CELLM_ASSIGN_OR_RETURN(Value c, eval(*s.condition, probe));
      if (truthy(c)) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    Frame inner;
    inner.parent = &frame;
    return exec_body(s.else_body, inner, out);  // break/continue here belong to an outer loop
  }
  const auto n = static_cast<std::int64_t>(items.size());
  for (std::int64_t i = 0; i < n; ++i) {
    if (++steps_ > limits_.max_steps) {  // an empty body still costs a step per item
      return at(s.pos, out_of_resources("the render exceeded {} steps", limits_.max_steps));
    }
    Frame inner;
    inner.parent = &frame;
    std::vector<std::pair<std::string, Value>> loop;
    loop.reserve(12);
    loop.emplace_back("index0", Value::integer(i));
    loop.emplace_back("index", Value::integer(i + 1));
    loop.emplace_back("revindex0", Value::integer(n - i - 1));
    loop.emplace_back("revindex", Value::integer(n - i));
    loop.emplace_back("first", Value::boolean(i == 0));
    loop.emplace_back("last", Value::boolean(i == n - 1));
    loop.emplace_back("length", Value::integer(n));
    loop.emplace_back("depth", Value::integer(1));
    loop.emplace_back("depth0", Value::integer(0));
    loop.emplace_back("previtem", i > 0 ? items[static_cast<std::size_t>(i - 1)]
                                        : Value::undefined("there is no previous item"));
    loop.emplace_back("nextitem", i + 1 < n ? items[static_cast<std::size_t>(i + 1)]
                                            : Value::undefined("there is no next item"));
    loop.emplace_back(
        "cycle", Value::function("loop.cycle", [i](Renderer&, CallArgs& args) -> Result<Value> {
          if (args.positional.empty()) {
            return invalid_argument("loop.cycle() needs at least one value");
          }
          return args.positional[static_cast<std::size_t>(i) % args.positional.size()];
        }));
    inner.vars.emplace_back("loop", Value::object(std::move(loop)));
    CELLM_RETURN_IF_ERROR(assign(s, s.targets, items[static_cast<std::size_t>(i)], inner));
    CELLM_ASSIGN_OR_RETURN(Flow flow, exec_body(s.body, inner, out));
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Result<Value> Renderer::lookup(const std::string& name, const Frame& frame) const {
  if (name.empty() && filter_block_input_ != nullptr) return *filter_block_input_;
  if (const Value* v = frame.find(name)) return *v;
  if (auto g = find_global(name)) return *g;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

Result<Value> Renderer::eval(const Expr& e, Frame& frame) {
  if (++steps_ > limits_.max_steps) {
    return at(e.pos, out_of_resources("the render exceeded {} steps", limits_.max_steps));
  }
  CELLM_ASSIGN_OR_RETURN(Value v, eval_node(e, frame));
  if (v.depth() > kMaxValueDepth) {
    return error_at(e.pos, fmt::format("value nests deeper than {} levels", kMaxValueDepth));
  }
  return v;
}

Result<CallArgs> Renderer::eval_args(const Expr& e, std::size_t first, Frame& frame) {
  CallArgs args;
  for (std::size_t i = first; i < e.args.size(); ++i) {
    CELLM_ASSIGN_OR_RETURN(Value v, eval(*e.args[i], frame));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [k, expr] : e.kwargs) {
    CELLM_ASSIGN_OR_RETURN(Value v, eval(*expr, frame));
    args.keyword.emplace_back(k, std::move(v));
  }
  return args;
}

Result<Value> Renderer::call(const Value& callee, CallArgs& args) {
  if (callee.is_function()) return callee.as_function().fn(*this, args);
  if (callee.is_undefined()) return invalid_argument("{}", callee.undefined_hint());
  return invalid_argument("'{}' object is not callable", type_name(callee));
}

Result<Value> Renderer::call_macro(const Stmt& macro, CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth) {
    return error_at(macro.pos, fmt::format("macro calls nest deeper than {} levels (recursion?)",
                                           limits_.max_call_depth));
  }
  Frame frame;
  frame.parent = &root_;
  const std::size_t n = macro.params.size();
  if (args.positional.size() > n && !macro.uses_varargs) {
    return invalid_argument("macro '{}' takes at most {} argument(s), got {}", macro.text, n,
                            args.positional.size());
  }
  std::vector<bool> bound(n, false);
  for (std::size_t i = 0; i < n && i < args.positional.size(); ++i) {
    frame.set(macro.params[i].name, args.positional[i]);
    bound[i] = true;
  }
  std::vector<std::pair<std::string, Value>> extra_kwargs;
  for (auto& [k, v] : args.keyword) {
    // A named copy: clang before 16 cannot capture a structured binding.
    const std::string& key = k;
    auto it = std::find_if(macro.params.begin(), macro.params.end(),
                           [&](const MacroParam& p) { return p.name == key; });
    if (it == macro.params.end()) {
      if (!macro.uses_kwargs) {
        return invalid_argument("macro '{}' has no parameter named '{}'", macro.text, k);
      }
      extra_kwargs.emplace_back(k, v);
      continue;
    }
    const auto idx = static_cast<std::size_t>(it - macro.params.begin());
    if (bound[idx]) return invalid_argument("macro '{}' got '{}' twice", macro.text, k);
    frame.set(k, v);
    bound[idx] = true;
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (bound[i]) continue;
    if (macro.params[i].default_value) {
      CELLM_ASSIGN_OR_RETURN(Value v, eval(*macro.params[i].default_value, frame));
      frame.set(macro.params[i].name, std::move(v));
    } else {
      frame.set(
          macro.params[i].name,
          Value::undefined(fmt::format("parameter '{}' was not provided", macro.params[i].name)));
    }
  }
  if (macro.uses_varargs) {
    std::vector<Value> rest;
    for (std::size_t i = n; i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
    frame.set("varargs", Value::array(std::move(rest), true));
  }
  if (macro.uses_kwargs) frame.set("kwargs", Value::object(std::move(extra_kwargs)));
  ++call_depth_;
  std::string out;
  auto flow = exec_body(macro.body, frame, out);
  --call_depth_;
  if (!flow.ok()) return flow.status();
  return Value::string(std::move(out));
}

Result<Value> Renderer::eval_call(const Expr& e, Frame& frame) {
  CELLM_ASSIGN_OR_RETURN(Value callee, eval(*e.args[0], frame));
  CELLM_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1, frame));
  auto r = call(callee, args);
  if (!r.ok()) return at(e.pos, r.status());
  return r;
}

Result<Value> Renderer::eval_node(const Expr& e, Frame& frame) {
  switch (e.kind) {
    case ExprKind::kLiteral: return e.literal;
    case ExprKind::kName: return lookup(e.name, frame);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) {
        CELLM_ASSIGN_OR_RETURN(Value v, eval(*a, frame));
        items.push_back(std::move(v));
      }
      return Value::array(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      std::vector<std::pair<std::string, Value>> entries;
      for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
        CELLM_ASSIGN_OR_RETURN(Value k, eval(*e.args[i], frame));
        if (!k.is_string()) {
          return at(e.args[i]->pos,
                    not_supported("dict keys must be strings, got '{}'", type_name(k)));
        }
        CELLM_ASSIGN_OR_RETURN(Value v, eval(*e.args[i + 1], frame));
        auto it = std::find_if(entries.begin(), entries.end(),
                               [&](const auto& kv) { return kv.first == k.as_string(); });
        if (it != entries.end()) {
          it->second = std::move(v);
        } else {
          entries.emplace_back(k.as_string(), std::move(v));
        }
      }
      return Value::object(std::move(entries));
    }
    case ExprKind::kAttr: {
      CELLM_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0], frame));
      auto r = get_attr(obj, e.name);
      if (!r.ok()) return at(e.pos, r.status());
      return r;
    }
    case ExprKind::kItem: {
      CELLM_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0], frame));
      CELLM_ASSIGN_OR_RETURN(Value key, eval(*e.args[1], frame));
      auto r = get_item(obj, key);
      if (!r.ok()) return at(e.pos, r.status());
      return r;
    }
    case ExprKind::kSlice: {
      CELLM_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0], frame));
      Value parts[3] = {Value::none(), Value::none(), Value::none()};
      for (int i = 0; i < 3; ++i) {
        if (e.args[static_cast<std::size_t>(i + 1)]) {
          CELLM_ASSIGN_OR_RETURN(parts[i], eval(*e.args[static_cast<std::size_t>(i + 1)], frame));
        }
      }
      if (obj.is_undefined()) return error_at(e.pos, obj.undefined_hint());
      if (obj.is_string()) {
        const std::string& s = obj.as_string();
        const auto bounds = utf8::boundaries(s);
        auto idx = slice_indices(static_cast<std::int64_t>(bounds.size() - 1), parts[0], parts[1],
                                 parts[2]);
        if (!idx.ok()) return at(e.pos, idx.status());
        std::string out;
        for (std::int64_t i : *idx) {
          const auto u = static_cast<std::size_t>(i);
          out.append(s, bounds[u], bounds[u + 1] - bounds[u]);
        }
        return Value::string(std::move(out));
      }
      if (obj.is_array()) {
        const auto& items = obj.as_array().items;
        auto idx =
            slice_indices(static_cast<std::int64_t>(items.size()), parts[0], parts[1], parts[2]);
        if (!idx.ok()) return at(e.pos, idx.status());
        std::vector<Value> out;
        out.reserve(idx->size());
        for (std::int64_t i : *idx) out.push_back(items[static_cast<std::size_t>(i)]);
        return Value::array(std::move(out), obj.as_array().is_tuple);
      }
      return error_at(e.pos, fmt::format("'{}' object cannot be sliced", type_name(obj)));
    }
    case ExprKind::kCall: return eval_call(e, frame);
    case ExprKind::kFilter: {
      CELLM_ASSIGN_OR_RETURN(Value input, eval(*e.args[0], frame));
      CELLM_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1, frame));
      auto r = apply_filter(*this, e.name, input, args);
      if (!r.ok()) return at(e.pos, r.status().with_context(fmt::format("filter '{}'", e.name)));
      return r;
    }
    case ExprKind::kTest: {
      CELLM_ASSIGN_OR_RETURN(Value input, eval(*e.args[0], frame));
      CELLM_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, 1, frame));
      auto r = apply_test(*this, e.name, input, args);
      if (!r.ok()) return at(e.pos, r.status().with_context(fmt::format("test '{}'", e.name)));
      return Value::boolean(*r != e.negated);
    }
    case ExprKind::kUnary: {
      CELLM_ASSIGN_OR_RETURN(Value v, eval(*e.args[0], frame));
      if (e.name == "not") return Value::boolean(!truthy(v));
      if (v.is_undefined()) return error_at(e.pos, v.undefined_hint());
      if (v.is_float()) return Value::number(e.name == "-" ? -v.as_float() : v.as_float());
      if (v.is_int() || v.is_bool()) {
        const std::int64_t i = v.is_bool() ? v.as_bool() : v.as_int();
        if (e.name == "+") return Value::integer(i);
        if (i == INT64_MIN) return error_at(e.pos, "integer overflow");
        return Value::integer(-i);
      }
      return error_at(e.pos,
                      fmt::format("bad operand type for unary {}: '{}'", e.name, type_name(v)));
    }
    case ExprKind::kBinary: {
      CELLM_ASSIGN_OR_RETURN(Value a, eval(*e.args[0], frame));
      if (e.name == "and") return truthy(a) ? eval(*e.args[1], frame) : Result<Value>(a);
      if (e.name == "or") return truthy(a) ? Result<Value>(a) : eval(*e.args[1], frame);
      CELLM_ASSIGN_OR_RETURN(Value b, eval(*e.args[1], frame));
      auto r = binary_op(*this, e.name, a, b);
      if (!r.ok()) return at(e.pos, r.status());
      return r;
    }
    case ExprKind::kCompare: {
      CELLM_ASSIGN_OR_RETURN(Value left, eval(*e.args[0], frame));
      for (std::size_t i = 0; i < e.ops.size(); ++i) {
        CELLM_ASSIGN_OR_RETURN(Value right, eval(*e.args[i + 1], frame));
        auto r = compare_op(e.ops[i], left, right);
        if (!r.ok()) return at(e.pos, r.status());
        if (!*r) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::kCondition: {
      CELLM_ASSIGN_OR_RETURN(Value c, eval(*e.args[0], frame));
      if (truthy(c)) return eval(*e.args[1], frame);
      if (e.args[2]) return eval(*e.args[2], frame);
      return Value::undefined("the inline if-expression was false and has no else");
    }
  }
  return internal_error("unknown expression kind");
}

}  // namespace cellm::chat
