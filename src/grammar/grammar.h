// Grammar: a set of rules, each a small automaton over bytes whose edges
// either consume a byte range or call another rule (and continue at a return
// node once the callee ends). Together with a stack of return nodes this is a
// pushdown automaton over bytes (matcher.h runs it). Rules recurse through
// calls, so nested JSON and $ref cycles need no unrolling, while loops inside
// a rule (string bodies, repetitions) cost no stack.
//
// GrammarBuilder assembles rules with epsilon edges for convenience; build()
// removes them (each node takes the edges of its epsilon closure), checks
// that no rule can call itself without consuming a byte (left recursion would
// make the matcher loop) and precomputes a 256-entry next-node table per node
// for the matcher's fast path.
//
// Thread-safety: a built Grammar is immutable and may be shared by any number
// of threads; a GrammarBuilder belongs to one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cellm/status.h"

namespace cellm::grammar {

using NodeId = std::uint32_t;
using RuleId = std::uint32_t;

struct ByteEdge {
  std::uint8_t lo = 0;
  std::uint8_t hi = 0;  // inclusive
  NodeId target = 0;
};

struct CallEdge {
  RuleId rule = 0;
  NodeId ret = 0;  // where the caller continues once the callee ends
};

struct Node {
  std::vector<ByteEdge> bytes;
  std::vector<CallEdge> calls;
  bool final = false;  // the node's rule may end here
  // The rule can end from here without consuming a byte (final, or through
  // calls of rules that can end empty).
  bool can_end = false;
  // No calls and not final: the next-node table alone decides a byte.
  bool simple = false;
};

// next_table entries besides a node id.
inline constexpr std::int32_t kNoByte = -1;     // no byte edge takes the byte
inline constexpr std::int32_t kManyBytes = -2;  // several do (nondeterministic)

class Grammar {
 public:
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(NodeId n) const { return nodes_[n]; }
  NodeId rule_start(RuleId r) const { return rule_starts_[r]; }
  const std::string& rule_name(RuleId r) const { return rule_names_[r]; }
  std::size_t rule_count() const { return rule_starts_.size(); }
  RuleId root() const { return root_; }
  // The byte's target from `n` when exactly one byte edge takes it, else
  // kNoByte / kManyBytes.
  std::int32_t next(NodeId n, std::uint8_t byte) const {
    return next_[static_cast<std::size_t>(n) * 256 + byte];
  }
  // Bytes of memory the grammar holds (reporting, limits).
  std::size_t memory_bytes() const;
  // A readable dump of every rule (tests and debugging).
  std::string describe() const;

 private:
  friend class GrammarBuilder;
  std::vector<Node> nodes_;
  std::vector<NodeId> rule_starts_;
  std::vector<std::string> rule_names_;
  std::vector<std::int32_t> next_;
  RuleId root_ = 0;
};

class GrammarBuilder {
 public:
  // A new rule with its start node; its body is built with the edge calls.
  RuleId add_rule(std::string name);
  NodeId start(RuleId rule) const { return rules_[rule].start; }
  // A new node of `rule`.
  NodeId node(RuleId rule);
  void epsilon(NodeId from, NodeId to);
  void bytes(NodeId from, std::uint8_t lo, std::uint8_t hi, NodeId to);
  void byte(NodeId from, char c, NodeId to) {
    const auto b = static_cast<std::uint8_t>(c);
    bytes(from, b, b, to);
  }
  // `text` as a chain of single-byte edges from `from` to `to`.
  void literal(NodeId from, std::string_view text, NodeId to);
  void call(NodeId from, RuleId rule, NodeId to);
  void set_final(NodeId n);
  RuleId rule_of(NodeId n) const { return node_rule_[n]; }
  std::size_t node_count() const { return edges_.size(); }

  // At most this many nodes after epsilon removal (each costs a 1 KiB
  // next-node table, so 20 MiB at most); a schema too large is refused.
  static constexpr std::size_t kMaxNodes = 20000;
  // At most this many edges after epsilon removal, counted as it runs (a
  // long chain of optional pieces gives each node the edges of the rest:
  // quadratic), so such a grammar is refused quickly.
  static constexpr std::size_t kMaxClosedEdges = 2000000;

  // InvalidArgument for left recursion (naming the rule) or a grammar past
  // kMaxNodes or kMaxClosedEdges.
  Result<std::shared_ptr<const Grammar>> build(RuleId root) const;

 private:
  struct RawNode {
    std::vector<NodeId> eps;
    std::vector<ByteEdge> bytes;
    std::vector<CallEdge> calls;
    bool final = false;
  };
  struct RawRule {
    std::string name;
    NodeId start = 0;
  };
  std::vector<RawNode> edges_;
  std::vector<RuleId> node_rule_;
  std::vector<RawRule> rules_;
};

}  // namespace cellm::grammar
