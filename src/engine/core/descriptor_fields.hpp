#pragma once
// The call descriptor's fields (call_descriptor.hpp), listed once: the serialized header, its
// serializer and parser (call_descriptor.cpp) and the mailbox's record (mailbox.cpp) are
// generated from these lists, so a field added here travels everywhere, and a descriptor with a
// field the record does not carry never travels as a record.
//
// RDMACOLL_DESCRIPTOR_HEADER(FIELD, LENGTH), in wire order after the magic word:
//   FIELD(member, wire type, kind)  CallDescriptor::member, carried as `wire type` (enums and
//     bools by static_cast). kind Call: says which call of which group and who sends it (a
//     record's reader knows it from the slot and its own group); kind Data: what the sender
//     says of its call (a record carries it only if RDMACOLL_DESCRIPTOR_RECORD lists it, else
//     the descriptor must hold its default to travel as a record).
//   LENGTH(member)  the uint32 length of the variable part `member`.
// RDMACOLL_DESCRIPTOR_PARTS(PART): the variable parts, in the order they follow the header.
// RDMACOLL_DESCRIPTOR_RECORD(RECORD): the record's fields, in its layout (packed into the
// mailbox's header line, mailbox.hpp); inline_data rides beside it.

#include <cstddef>
#include <cstdint>

// clang-format off
#define RDMACOLL_DESCRIPTOR_HEADER(FIELD, LENGTH) \
  FIELD(group, uint32_t, Call)                    \
  FIELD(seq, uint64_t, Call)                      \
  FIELD(rank, int32_t, Call)                      \
  FIELD(collective, uint8_t, Data)                \
  FIELD(ok, uint8_t, Data)                        \
  FIELD(in_dtype, uint8_t, Data)                  \
  FIELD(out_dtype, uint8_t, Data)                 \
  FIELD(in_numel, uint64_t, Data)                 \
  FIELD(out_numel, uint64_t, Data)                \
  FIELD(out_addr, uint64_t, Data)                 \
  FIELD(out_bytes, uint64_t, Data)                \
  LENGTH(key)                                     \
  LENGTH(error)                                   \
  LENGTH(inline_data)                             \
  LENGTH(slot_key)                                \
  FIELD(slot_addr, uint64_t, Data)                \
  FIELD(slots_mapped, uint8_t, Data)              \
  FIELD(reduce_op, uint8_t, Data)                 \
  FIELD(refused, uint8_t, Data)                   \
  FIELD(group_broken, uint8_t, Data)              \
  FIELD(slot_capacity, uint32_t, Data)            \
  FIELD(total_numel, uint64_t, Data)              \
  FIELD(root, int32_t, Data)                      \
  FIELD(group_size, uint32_t, Call)               \
  FIELD(group_creation, uint64_t, Call)           \
  FIELD(group_digest, uint64_t, Call)             \
  FIELD(global_rank, int32_t, Call)               \
  LENGTH(splits)                                  \
  FIELD(signal_token, uint64_t, Call)             \
  FIELD(window, uint64_t, Data)                   \
  FIELD(window_offset, uint64_t, Data)            \
  FIELD(source_addr, uint64_t, Data)              \
  FIELD(peers_readable, uint64_t, Data)

#define RDMACOLL_DESCRIPTOR_PARTS(PART) \
  PART(key)                             \
  PART(error)                           \
  PART(slot_key)                        \
  PART(splits)                          \
  PART(inline_data)

#define RDMACOLL_DESCRIPTOR_RECORD(RECORD) \
  RECORD(collective)                       \
  RECORD(in_dtype)                         \
  RECORD(out_dtype)                        \
  RECORD(reduce_op)                        \
  RECORD(root)                             \
  RECORD(in_numel)                         \
  RECORD(out_numel)                        \
  RECORD(total_numel)
// clang-format on

namespace rdmacoll::engine {

enum class FieldKind { Call, Data };

// The serialized header: the magic word, then every FIELD and LENGTH above, in order.
struct DescriptorHeader {
  uint32_t magic;
#define RDMACOLL_FIELD(member, wire, kind) wire member;
#define RDMACOLL_LENGTH(member) uint32_t member##_len;
  RDMACOLL_DESCRIPTOR_HEADER(RDMACOLL_FIELD, RDMACOLL_LENGTH)
#undef RDMACOLL_FIELD
#undef RDMACOLL_LENGTH
};

// Today's wire layout, and no padding: every byte that travels was written.
#define RDMACOLL_FIELD(member, wire, kind) +sizeof(wire)
#define RDMACOLL_LENGTH(member) +sizeof(uint32_t)
static_assert(sizeof(DescriptorHeader) ==
              sizeof(uint32_t) RDMACOLL_DESCRIPTOR_HEADER(RDMACOLL_FIELD, RDMACOLL_LENGTH));
#undef RDMACOLL_FIELD
#undef RDMACOLL_LENGTH
static_assert(sizeof(DescriptorHeader) == 168 && offsetof(DescriptorHeader, slot_addr) == 72 &&
              offsetof(DescriptorHeader, total_numel) == 88 &&
              offsetof(DescriptorHeader, global_rank) == 120 &&
              offsetof(DescriptorHeader, window_offset) == 144);

}  // namespace rdmacoll::engine
