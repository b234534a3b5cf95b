#include "cache/bit_tree.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>

namespace cellm::cache {
namespace {

TEST(BitTreeTest, EmptyTreeHasNoMembers) {
  for (std::int32_t size : {0, 1, 63, 64, 65, 4097}) {
    BitTree tree(size);
    EXPECT_EQ(tree.size(), size);
    EXPECT_FALSE(tree.lowest().has_value()) << size;
    EXPECT_FALSE(tree.highest().has_value()) << size;
    EXPECT_FALSE(tree.contains(0));
    EXPECT_FALSE(tree.contains(-1));
    EXPECT_FALSE(tree.contains(size));
  }
}

TEST(BitTreeTest, FillCoversExactlyTheRange) {
  for (std::int32_t size : {1, 2, 63, 64, 65, 128, 129, 4096, 4097, 300000}) {
    BitTree tree(size);
    tree.fill(true);
    EXPECT_EQ(tree.lowest(), 0) << size;
    EXPECT_EQ(tree.highest(), size - 1) << size;
    EXPECT_TRUE(tree.contains(size - 1));
    EXPECT_FALSE(tree.contains(size));
    tree.fill(false);
    EXPECT_FALSE(tree.lowest().has_value()) << size;
  }
}

TEST(BitTreeTest, LowestAndHighestFollowInsertAndErase) {
  BitTree tree(10000);
  tree.insert(4097);
  tree.insert(70);
  tree.insert(9999);
  EXPECT_EQ(tree.lowest(), 70);
  EXPECT_EQ(tree.highest(), 9999);
  tree.erase(70);
  EXPECT_EQ(tree.lowest(), 4097);
  tree.erase(9999);
  EXPECT_EQ(tree.highest(), 4097);
  tree.insert(4097);  // idempotent
  tree.erase(4097);
  EXPECT_FALSE(tree.lowest().has_value());
  tree.erase(4097);  // idempotent
  EXPECT_FALSE(tree.highest().has_value());
}

TEST(BitTreeTest, PopLowestDrainsInOrderAcrossLevels) {
  BitTree tree(300000);
  const std::int32_t members[] = {5, 63, 64, 4095, 4096, 262143, 262144, 299999};
  for (std::int32_t i : members) tree.insert(i);
  for (std::int32_t i : members) {
    EXPECT_EQ(tree.highest(), 299999);
    EXPECT_EQ(tree.pop_lowest(), i);
    EXPECT_FALSE(tree.contains(i));
  }
  EXPECT_FALSE(tree.pop_lowest().has_value());
  EXPECT_FALSE(tree.highest().has_value());
  tree.fill(true);
  for (std::int32_t i = 0; i < 300000; ++i) ASSERT_EQ(tree.pop_lowest(), i);
  EXPECT_FALSE(tree.lowest().has_value());
}

TEST(BitTreeTest, AgreesWithStdSetUnderRandomOps) {
  for (std::int32_t size : {5, 64, 200, 5000, 70000}) {
    std::mt19937 rng(static_cast<unsigned>(size));
    std::uniform_int_distribution<std::int32_t> pick(0, size - 1);
    BitTree tree(size);
    std::set<std::int32_t> ref;
    for (int op = 0; op < 4000; ++op) {
      const std::int32_t i = pick(rng);
      const unsigned choice = rng() % 5;
      if (choice < 2) {
        tree.insert(i);
        ref.insert(i);
      } else if (choice == 2) {
        const auto popped = tree.pop_lowest();
        if (ref.empty()) {
          ASSERT_FALSE(popped.has_value());
        } else {
          ASSERT_EQ(popped, *ref.begin());
          ref.erase(ref.begin());
        }
      } else {
        tree.erase(i);
        ref.erase(i);
      }
      ASSERT_EQ(tree.contains(i), ref.count(i) == 1);
      if (ref.empty()) {
        ASSERT_FALSE(tree.lowest().has_value());
        ASSERT_FALSE(tree.highest().has_value());
      } else {
        ASSERT_EQ(tree.lowest(), *ref.begin()) << "size " << size << " op " << op;
        ASSERT_EQ(tree.highest(), *ref.rbegin()) << "size " << size << " op " << op;
      }
    }
  }
}

}  // namespace
}  // namespace cellm::cache
