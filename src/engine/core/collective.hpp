#pragma once
// What the core and the exchange know of a collective: its row of the registry
// (collectives/registry.hpp). They carry its code in the descriptors and apply its rules, and
// name it only through its row: adding a collective adds a row there and nothing here.

#include <cstdint>
#include <span>
#include <string>

namespace rdmacoll::engine {

struct Collective {
  uint8_t code = 0;       // its byte in the descriptor: how a peer's call is told from ours
  const char* name = "";  // the user's call, as errors title it
  // The agreement's rules (control/agreement.cpp):
  // every member passes the same input and output lengths (all_to_all's splits differ by rank)
  bool same_lengths = true;
  // at or under the eager limit every member sends its chunk inline, so a member that did not
  // has another RDMACOLL_EAGER_LIMIT (a rooted call inlines on some members only)
  bool every_rank_inlines = false;
};

// The rows a group's calls may name (its world's registry): a peer's code looked up.
class CollectiveTable {
 public:
  CollectiveTable() = default;
  explicit CollectiveTable(std::span<const Collective* const> rows) : rows_(rows) {}

  const Collective* find(uint8_t code) const {
    for (const Collective* c : rows_) {
      if (c->code == code) return c;
    }
    return nullptr;
  }
  // "all_gather_into_tensor", or "collective #N" for a code no row has (a peer of another build)
  std::string name(uint8_t code) const {
    const Collective* c = find(code);
    return c ? c->name : "collective #" + std::to_string(code);
  }

 private:
  std::span<const Collective* const> rows_;
};

}  // namespace rdmacoll::engine
