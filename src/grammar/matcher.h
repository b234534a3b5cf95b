// Matcher: runs a Grammar as a pushdown automaton over bytes. Its state is a
// small set of items, each a node of the grammar plus the stack of return
// nodes below it (several items only where the grammar is ambiguous, e.g.
// anyOf branches that start alike). Stacks are interned in a FrameTable, so
// an item is two integers, equal stacks have equal ids and stepping never
// copies a stack. UTF-8 needs nothing special: the grammar spells multi-byte
// characters out byte by byte, so a token that ends inside a character leaves
// the matcher between its bytes.
//
// Thread-safety: a Matcher belongs to one thread (one generation); the
// Grammar it reads is shared and immutable.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grammar/grammar.h"

namespace cellm::grammar {

// Frame 0 is the empty stack (the root rule's caller).
using FrameId = std::uint32_t;

struct Item {
  NodeId node = 0;
  FrameId frame = 0;
  friend bool operator==(const Item&, const Item&) = default;
};

// Interned stacks: frame f is (return node, the frame below it).
class FrameTable {
 public:
  FrameTable() { frames_.push_back({0, 0}); }
  FrameId intern(NodeId ret, FrameId below);
  NodeId node(FrameId f) const { return frames_[f].node; }
  FrameId below(FrameId f) const { return frames_[f].below; }
  std::size_t depth(FrameId f) const { return frames_[f].depth; }
  std::size_t size() const { return frames_.size(); }

 private:
  struct Frame {
    NodeId node = 0;
    FrameId below = 0;
    std::uint32_t depth = 0;
  };
  std::vector<Frame> frames_;
  std::unordered_map<std::uint64_t, FrameId> index_;
};

// Appends items to a list unless already there: a linear scan while the list
// is short (the common case, and the cheapest), a hash index once it is long
// (an ambiguous grammar can keep thousands of items, and a scan per item
// would make each step quadratic).
class ItemIndex {
 public:
  // Whether `item` was new (then appended). `items` may only grow through
  // add() between clears.
  bool add(std::vector<Item>& items, Item item);

 private:
  static constexpr std::size_t kLinear = 16;
  std::unordered_set<std::uint64_t> index_;
};

class Matcher {
 public:
  // Deeper stacks are refused (a dead path): bounds the memory a model can
  // make the matcher use by nesting.
  static constexpr std::size_t kMaxDepth = 4096;
  // A byte that would leave more items than this is refused too: a very
  // ambiguous grammar (user EBNF with alternatives that recurse alike) could
  // otherwise multiply its items, and every step and mask costs their count.
  static constexpr std::size_t kMaxItems = 1024;

  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  const Grammar& grammar() const { return *grammar_; }
  const std::vector<Item>& items() const { return items_; }

  // Consumes one byte; false (state unchanged) when the grammar refuses it.
  bool advance(std::uint8_t byte);
  // Consumes every byte or none (state unchanged on refusal).
  bool advance(std::string_view bytes);
  // Whether what was consumed is a complete match.
  bool accepting() const { return accepting(items_); }
  // Whether some byte may still follow.
  bool can_continue() const;
  // Whether `text` is a complete match from the start (tests).
  static bool matches(std::shared_ptr<const Grammar> grammar, std::string_view text);

  // The primitives the token-mask walk uses on its own item sets.
  // `to` receives the items after `byte` from `from` (cleared first).
  void step(std::span<const Item> from, std::uint8_t byte, std::vector<Item>& to);
  bool accepting(std::span<const Item> items) const;
  // A key equal for equal states whatever their frame ids (each item's node
  // and its whole stack of return nodes, items sorted).
  std::string state_key() const;

 private:
  void step_item(NodeId n, FrameId frame, std::uint8_t byte, std::vector<Item>& out);
  bool can_finish(NodeId n, FrameId frame) const;

  std::shared_ptr<const Grammar> grammar_;
  FrameTable frames_;
  std::vector<Item> items_;
  std::vector<Item> scratch_;
  ItemIndex scratch_index_, out_index_;
};

}  // namespace cellm::grammar
