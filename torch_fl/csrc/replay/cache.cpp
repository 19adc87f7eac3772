// The bounded cache of Programs by signature (replay/cache.h).
#include "replay/cache.h"

namespace torch_fl {
namespace replay {

std::optional<Entry> Cache::find(const Signature& sig) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buckets_.find(sig.hash);
  if (it == buckets_.end()) {
    return std::nullopt;
  }
  for (const auto& [s, e] : it->second.items) {
    if (s == sig) {
      return e;
    }
  }
  return std::nullopt;
}

int64_t Cache::store(const Signature& sig, Entry e) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& bucket = buckets_[sig.hash];
  for (auto& [s, old] : bucket.items) {
    if (s == sig) {
      programs_ += (e.program != nullptr) - (old.program != nullptr);
      old = std::move(e);
      return 0;
    }
  }
  int64_t evicted = 0;
  while (size_ >= capacity_ && !order_.empty()) {
    const Signature oldest = std::move(order_.front());
    order_.pop_front();
    auto b = buckets_.find(oldest.hash);
    if (b != buckets_.end()) {
      auto& items = b->second.items;
      for (auto i = items.begin(); i != items.end(); ++i) {
        if (i->first == oldest) {
          programs_ -= i->second.program != nullptr;
          items.erase(i);
          --size_;
          ++evicted;
          break;
        }
      }
      if (items.empty()) {
        buckets_.erase(b);
      }
    }
  }
  if (capacity_ == 0) {
    return evicted;
  }
  programs_ += e.program != nullptr;
  buckets_[sig.hash].items.emplace_back(sig, std::move(e));
  order_.push_back(sig);
  ++size_;
  return evicted;
}

void Cache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  buckets_.clear();
  order_.clear();
  size_ = 0;
  programs_ = 0;
}

size_t Cache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return size_;
}

size_t Cache::programs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return programs_;
}

void Cache::set_capacity(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_ = n;
}

size_t Cache::capacity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return capacity_;
}

}  // namespace replay
}  // namespace torch_fl
