// A call's signature: the key under which a recorded Program is stored
// (replay/README.md).
//
// It holds everything of a call that the recording may have depended on
// besides tensor contents: dtypes, shapes, strides, storage offsets, 16-byte
// alignment, which tensors share a storage, scalar arguments, the default
// dtype and the current device. A call whose arguments cannot be keyed (a
// host tensor, a generator, a complex or symbolic number) is never replayed.
#pragma once

#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cstdint>

namespace torch_fl {
namespace replay {

// A flat list of integers (tags and values) and its hash.
struct Signature {
  c10::SmallVector<int64_t, 48> words;
  uint64_t hash = 0;
  bool operator==(const Signature& o) const {
    return hash == o.hash && words.size() == o.words.size() &&
           std::equal(words.begin(), words.end(), o.words.begin());
  }
};

// The signature of the `nargs` arguments on top of `stack` (flagos tensors,
// before they are unwrapped); false where a call cannot be keyed.
bool signature_of(const torch::jit::Stack& stack, size_t nargs, Signature* out);

}  // namespace replay
}  // namespace torch_fl
