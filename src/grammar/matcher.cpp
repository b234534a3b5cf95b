#include "grammar/matcher.h"

#include <algorithm>

namespace cellm::grammar {

FrameId FrameTable::intern(NodeId ret, FrameId below) {
  const std::uint64_t key = (static_cast<std::uint64_t>(ret) << 32) | below;
  auto [it, fresh] = index_.try_emplace(key, static_cast<FrameId>(frames_.size()));
  if (fresh) frames_.push_back({ret, below, frames_[below].depth + 1});
  return it->second;
}

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  items_.push_back(Item{grammar_->rule_start(grammar_->root()), 0});
}

bool ItemIndex::add(std::vector<Item>& items, Item item) {
  const auto key = (static_cast<std::uint64_t>(item.node) << 32) | item.frame;
  if (items.size() < kLinear) {
    if (std::find(items.begin(), items.end(), item) != items.end()) return false;
    items.push_back(item);
    if (items.size() == kLinear) {
      index_.clear();
      for (const Item& it : items)
        index_.insert((static_cast<std::uint64_t>(it.node) << 32) | it.frame);
    }
    return true;
  }
  if (!index_.insert(key).second) return false;
  items.push_back(item);
  return true;
}

void Matcher::step_item(NodeId n, FrameId frame, std::uint8_t byte, std::vector<Item>& out) {
  // An expansion that comes back to an item it is already expanding (a call
  // of a rule that can end empty, returning where it started) adds nothing.
  if (!scratch_index_.add(scratch_, Item{n, frame})) return;
  const Grammar& g = *grammar_;
  const Node& node = g.node(n);
  const std::int32_t t = g.next(n, byte);
  if (t >= 0) {
    out_index_.add(out, Item{static_cast<NodeId>(t), frame});
  } else if (t == kManyBytes) {
    for (const ByteEdge& e : node.bytes) {
      if (e.lo <= byte && byte <= e.hi) out_index_.add(out, Item{e.target, frame});
    }
  }
  for (const CallEdge& c : node.calls) {
    if (frames_.depth(frame) >= kMaxDepth) break;
    step_item(g.rule_start(c.rule), frames_.intern(c.ret, frame), byte, out);
  }
  if (node.final && frame != 0) step_item(frames_.node(frame), frames_.below(frame), byte, out);
}

void Matcher::step(std::span<const Item> from, std::uint8_t byte, std::vector<Item>& to) {
  to.clear();
  if (from.size() == 1) {
    const Item it = from[0];
    if (grammar_->node(it.node).simple) {
      const std::int32_t t = grammar_->next(it.node, byte);
      if (t >= 0) {
        to.push_back(Item{static_cast<NodeId>(t), it.frame});
        return;
      }
      if (t == kNoByte) return;
    }
  }
  for (const Item& it : from) {
    scratch_.clear();
    step_item(it.node, it.frame, byte, to);
    if (to.size() > kMaxItems) {
      to.clear();
      return;
    }
  }
}

bool Matcher::can_finish(NodeId n, FrameId frame) const {
  while (true) {
    if (!grammar_->node(n).can_end) return false;
    if (frame == 0) return true;
    n = frames_.node(frame);
    frame = frames_.below(frame);
  }
}

bool Matcher::accepting(std::span<const Item> items) const {
  return std::any_of(items.begin(), items.end(),
                     [this](const Item& it) { return can_finish(it.node, it.frame); });
}

bool Matcher::advance(std::uint8_t byte) {
  std::vector<Item> next;
  step(items_, byte, next);
  if (next.empty()) return false;
  items_ = std::move(next);
  return true;
}

bool Matcher::advance(std::string_view bytes) {
  std::vector<Item> cur = items_, next;
  for (char c : bytes) {
    step(cur, static_cast<std::uint8_t>(c), next);
    if (next.empty()) return false;
    cur.swap(next);
  }
  items_ = std::move(cur);
  return true;
}

bool Matcher::can_continue() const {
  // Stepping is not const (it interns frames), so probe a copy's table.
  Matcher probe = *this;
  std::vector<Item> next;
  for (int b = 0; b < 256; ++b) {
    probe.step(items_, static_cast<std::uint8_t>(b), next);
    if (!next.empty()) return true;
  }
  return false;
}

bool Matcher::matches(std::shared_ptr<const Grammar> grammar, std::string_view text) {
  Matcher m(std::move(grammar));
  return m.advance(text) && m.accepting();
}

std::string Matcher::state_key() const {
  std::vector<std::vector<NodeId>> stacks;
  for (const Item& it : items_) {
    std::vector<NodeId> s{it.node};
    for (FrameId f = it.frame; f != 0; f = frames_.below(f)) s.push_back(frames_.node(f));
    stacks.push_back(std::move(s));
  }
  std::sort(stacks.begin(), stacks.end());
  std::string key;
  for (const auto& s : stacks) {
    for (NodeId n : s) key.append(reinterpret_cast<const char*>(&n), sizeof n);
    const NodeId sep = ~NodeId{0};
    key.append(reinterpret_cast<const char*>(&sep), sizeof sep);
  }
  return key;
}

}  // namespace cellm::grammar
