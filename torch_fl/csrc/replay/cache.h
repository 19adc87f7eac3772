// The Programs of one operator by signature, bounded (replay/README.md).
#pragma once

#include "replay/program.h"
#include "replay/signature.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace torch_fl {
namespace replay {

// What a cache holds for a signature: a Program, or the reason the call stays
// on the Python function (an index into the owner's reasons).
struct Entry {
  std::shared_ptr<const Program> program;
  int32_t reason = -1;    // stays on the Python function, for this reason
  int32_t attempts = 0;   // recordings voided so far (autotuning ran during them)
};

// Programs by signature, bounded: the oldest signature goes first when full.
class Cache {
 public:
  // The entry of `sig`, if any (copied under the lock: another thread may evict it).
  std::optional<Entry> find(const Signature& sig) const;
  // Stores `e` under `sig`; returns the number of signatures evicted.
  int64_t store(const Signature& sig, Entry e);
  void clear();
  size_t size() const;
  size_t programs() const;
  void set_capacity(size_t n);
  size_t capacity() const;

 private:
  struct Bucket {
    std::vector<std::pair<Signature, Entry>> items;
  };
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Bucket> buckets_;
  std::deque<Signature> order_;  // insertion order, for eviction
  size_t size_ = 0;
  size_t programs_ = 0;
  size_t capacity_ = 1024;
};

}  // namespace replay
}  // namespace torch_fl
