#include "grammar/grammar.h"

#include <algorithm>
#include <functional>

#include <fmt/format.h>

namespace cellm::grammar {

RuleId GrammarBuilder::add_rule(std::string name) {
  const auto id = static_cast<RuleId>(rules_.size());
  rules_.push_back(RawRule{std::move(name), 0});
  rules_.back().start = node(id);
  return id;
}

NodeId GrammarBuilder::node(RuleId rule) {
  edges_.emplace_back();
  node_rule_.push_back(rule);
  return static_cast<NodeId>(edges_.size() - 1);
}

void GrammarBuilder::epsilon(NodeId from, NodeId to) {
  if (from != to) edges_[from].eps.push_back(to);
}

void GrammarBuilder::bytes(NodeId from, std::uint8_t lo, std::uint8_t hi, NodeId to) {
  edges_[from].bytes.push_back(ByteEdge{lo, hi, to});
}

void GrammarBuilder::literal(NodeId from, std::string_view text, NodeId to) {
  if (text.empty()) return epsilon(from, to);
  NodeId at = from;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const NodeId next = i + 1 == text.size() ? to : node(node_rule_[from]);
    byte(at, text[i], next);
    at = next;
  }
}

void GrammarBuilder::call(NodeId from, RuleId rule, NodeId to) {
  edges_[from].calls.push_back(CallEdge{rule, to});
}

void GrammarBuilder::set_final(NodeId n) {
  edges_[n].final = true;
}

Result<std::shared_ptr<const Grammar>> GrammarBuilder::build(RuleId root) const {
  const std::size_t n = edges_.size();
  // 1. Epsilon closures: every node takes the edges of what it reaches
  // without consuming anything.
  std::vector<Node> closed(n);
  std::vector<std::uint32_t> seen(n, 0);
  std::uint32_t mark = 0;
  std::vector<NodeId> todo;
  std::size_t closed_edges = 0;
  for (NodeId a = 0; a < n; ++a) {
    ++mark;
    todo.assign(1, a);
    seen[a] = mark;
    Node& out = closed[a];
    while (!todo.empty()) {
      const NodeId b = todo.back();
      todo.pop_back();
      const RawNode& raw = edges_[b];
      out.final = out.final || raw.final;
      out.bytes.insert(out.bytes.end(), raw.bytes.begin(), raw.bytes.end());
      out.calls.insert(out.calls.end(), raw.calls.begin(), raw.calls.end());
      closed_edges += raw.bytes.size() + raw.calls.size();
      if (closed_edges > kMaxClosedEdges) {
        return invalid_argument(
            "the grammar needs more than {} automaton edges (long runs of optional or "
            "repeated pieces that may match nothing multiply them); simplify the schema or "
            "grammar, e.g. write x{{0,n}} rather than (x?){{n}}",
            kMaxClosedEdges);
      }
      for (NodeId c : raw.eps) {
        if (seen[c] != mark) {
          seen[c] = mark;
          todo.push_back(c);
        }
      }
    }
  }
  // 2. Keep what the root reaches, renumbered in discovery order.
  constexpr NodeId kUnset = ~NodeId{0};
  std::vector<NodeId> renum(n, kUnset);
  std::vector<NodeId> order;
  std::vector<RuleId> rule_renum(rules_.size(), kUnset);
  std::vector<RuleId> rule_order;
  auto visit_rule = [&](RuleId r) {
    if (rule_renum[r] != kUnset) return;
    rule_renum[r] = static_cast<RuleId>(rule_order.size());
    rule_order.push_back(r);
    const NodeId s = rules_[r].start;
    if (renum[s] == kUnset) {
      renum[s] = static_cast<NodeId>(order.size());
      order.push_back(s);
    }
  };
  visit_rule(root);
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (order.size() > kMaxNodes) {
      return invalid_argument(
          "the grammar needs more than {} automaton nodes; simplify the schema or grammar "
          "(fewer properties, alternatives, repetition or length bounds)",
          kMaxNodes);
    }
    const Node& node = closed[order[i]];
    auto add = [&](NodeId t) {
      if (renum[t] == kUnset) {
        renum[t] = static_cast<NodeId>(order.size());
        order.push_back(t);
      }
    };
    for (const ByteEdge& e : node.bytes) add(e.target);
    for (const CallEdge& c : node.calls) {
      add(c.ret);
      visit_rule(c.rule);
    }
  }
  auto g = std::shared_ptr<Grammar>(new Grammar());
  g->nodes_.resize(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    Node node = closed[order[i]];
    for (ByteEdge& e : node.bytes) e.target = renum[e.target];
    for (CallEdge& c : node.calls) {
      c.rule = rule_renum[c.rule];
      c.ret = renum[c.ret];
    }
    std::sort(node.bytes.begin(), node.bytes.end(), [](const ByteEdge& a, const ByteEdge& b) {
      return std::tie(a.lo, a.hi, a.target) < std::tie(b.lo, b.hi, b.target);
    });
    node.bytes.erase(std::unique(node.bytes.begin(), node.bytes.end(),
                                 [](const ByteEdge& a, const ByteEdge& b) {
                                   return a.lo == b.lo && a.hi == b.hi && a.target == b.target;
                                 }),
                     node.bytes.end());
    std::sort(node.calls.begin(), node.calls.end(), [](const CallEdge& a, const CallEdge& b) {
      return std::tie(a.rule, a.ret) < std::tie(b.rule, b.ret);
    });
    node.calls.erase(std::unique(node.calls.begin(), node.calls.end(),
                                 [](const CallEdge& a, const CallEdge& b) {
                                   return a.rule == b.rule && a.ret == b.ret;
                                 }),
                     node.calls.end());
    g->nodes_[i] = std::move(node);
  }
  for (RuleId r : rule_order) {
    g->rule_starts_.push_back(renum[rules_[r].start]);
    g->rule_names_.push_back(rules_[r].name);
  }
  g->root_ = 0;
  std::vector<Node>& nodes = g->nodes_;

  // 3. Which nodes can end their rule without consuming a byte.
  for (Node& node : nodes) node.can_end = node.final;
  for (bool changed = true; changed;) {
    changed = false;
    for (Node& node : nodes) {
      if (node.can_end) continue;
      for (const CallEdge& c : node.calls) {
        if (nodes[g->rule_starts_[c.rule]].can_end && nodes[c.ret].can_end) {
          node.can_end = true;
          changed = true;
          break;
        }
      }
    }
  }

  // 4. Left recursion: rule A reaches a call of rule B before consuming.
  const std::size_t rules = g->rule_starts_.size();
  std::vector<std::vector<RuleId>> calls_first(rules);
  std::vector<std::uint32_t> node_seen(nodes.size(), 0);
  for (RuleId a = 0; a < rules; ++a) {
    ++mark;
    todo.assign(1, g->rule_starts_[a]);
    node_seen[todo[0]] = mark;
    while (!todo.empty()) {
      const NodeId x = todo.back();
      todo.pop_back();
      for (const CallEdge& c : nodes[x].calls) {
        calls_first[a].push_back(c.rule);
        if (nodes[g->rule_starts_[c.rule]].can_end && node_seen[c.ret] != mark) {
          node_seen[c.ret] = mark;
          todo.push_back(c.ret);
        }
      }
    }
  }
  std::vector<std::uint8_t> state(rules, 0);  // 0 new, 1 on the path, 2 done
  std::optional<RuleId> cyclic;
  std::function<void(RuleId)> dfs = [&](RuleId r) {
    state[r] = 1;
    for (RuleId s : calls_first[r]) {
      if (cyclic) return;
      if (state[s] == 1) {
        cyclic = s;
        return;
      }
      if (state[s] == 0) dfs(s);
    }
    state[r] = 2;
  };
  for (RuleId r = 0; r < rules && !cyclic; ++r) {
    if (state[r] == 0) dfs(r);
  }
  if (cyclic) {
    return invalid_argument(
        "'{}' refers back to itself before any text is produced (a $ref cycle through anyOf/oneOf "
        "without an object or array in between); such a schema matches nothing finite",
        g->rule_names_[*cyclic]);
  }

  // 5. The matcher's fast path.
  g->next_.assign(nodes.size() * 256, kNoByte);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    Node& node = nodes[i];
    node.simple = node.calls.empty() && !node.final;
    std::int32_t* row = g->next_.data() + i * 256;
    for (const ByteEdge& e : node.bytes) {
      for (int b = e.lo; b <= e.hi; ++b) {
        row[b] = row[b] == kNoByte || row[b] == static_cast<std::int32_t>(e.target)
                     ? static_cast<std::int32_t>(e.target)
                     : kManyBytes;
      }
    }
  }
  return std::shared_ptr<const Grammar>(std::move(g));
}

std::size_t Grammar::memory_bytes() const {
  std::size_t total = next_.size() * sizeof(std::int32_t) + nodes_.size() * sizeof(Node);
  for (const Node& n : nodes_) {
    total += n.bytes.size() * sizeof(ByteEdge) + n.calls.size() * sizeof(CallEdge);
  }
  return total;
}

std::string Grammar::describe() const {
  std::string out;
  for (std::size_t r = 0; r < rule_starts_.size(); ++r) {
    out += fmt::format("rule {} '{}' starts at {}\n", r, rule_names_[r], rule_starts_[r]);
  }
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    out += fmt::format("{}{}:", i, n.final ? "*" : "");
    for (const ByteEdge& e : n.bytes)
      out += fmt::format(" [{:02x}-{:02x}]->{}", e.lo, e.hi, e.target);
    for (const CallEdge& c : n.calls) out += fmt::format(" call {}->{}", c.rule, c.ret);
    out += '\n';
  }
  return out;
}

}  // namespace cellm::grammar
