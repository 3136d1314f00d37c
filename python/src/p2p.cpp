// send, recv and recvAnysource in the torch backend: the bytes of one tensor each, matched by
// (sender, tag) in issue order. A mistake here raises at once: only the two ranks take part.

#include "backend.hpp"
#include "tensors.hpp"
#include "work.hpp"

namespace rdmacoll_torch {

namespace {

using c10d::OpType;

[[noreturn]] void refuse_p2p(const char* title, const std::string& why) {
  std::rethrow_exception(compat::argument_error(std::string("rdmacoll: ") + title + ": " + why));
}

}  // namespace

c10::intrusive_ptr<c10d::Work> RdmacollBackend::send(std::vector<at::Tensor>& tensors, int dst_rank,
                                                     int tag) {
  const Issue call{OpType::SEND, "rdmacoll:send", rdmacoll::Collective::Barrier};
  if (tensors.size() != 1) refuse_p2p(call.title, tensor_count("send", tensors.size(), "1"));
  if (auto why = unusable(tensors[0], "the tensor")) refuse_p2p(call.title, *why);
  if (dst_rank < 0 || dst_rank >= size_) {
    refuse_p2p(call.title, "destination rank " + std::to_string(dst_rank) +
                               " is not a rank of this group of " + std::to_string(size_));
  }
  const Staged in = stage_input(tensors[0], true);
  rdmacoll::Tensor v = in.view;
  const int dst = global_rank(dst_rank);
  return issue(call, {}, tensors, {in.dense},
               [&] { return rdmacoll::send(v, dst, group_, tag, true); });
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::receive(std::vector<at::Tensor>& tensors,
                                                        int src_rank, int tag) {
  const Issue call{OpType::RECV, src_rank < 0 ? "rdmacoll:recvAnySource" : "rdmacoll:recv",
                   rdmacoll::Collective::Barrier};
  if (tensors.size() != 1) refuse_p2p(call.title, tensor_count("recv", tensors.size(), "1"));
  if (auto why = unusable(tensors[0], "the tensor")) refuse_p2p(call.title, *why);
  if (src_rank >= size_) {
    refuse_p2p(call.title, "source rank " + std::to_string(src_rank) +
                               " is not a rank of this group of " + std::to_string(size_));
  }
  const Staged out = stage_output(tensors[0], true);
  rdmacoll::Tensor v = out.view;
  const int src = src_rank < 0 ? rdmacoll::kAnySource : global_rank(src_rank);
  auto work = issue(
      call, tensors, {}, {out.dense}, [&] { return rdmacoll::recv(v, src, group_, tag, true); },
      [out] { copy_back(out); });
  if (!group_.is_default()) {
    static_cast<WorkRdmacoll&>(*work).set_members(group_.ranks());
  }
  return work;
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::recv(std::vector<at::Tensor>& tensors, int src_rank,
                                                     int tag) {
  if (src_rank < 0) {
    refuse_p2p("rdmacoll:recv",
               "source rank " + std::to_string(src_rank) + " is not a rank of this group");
  }
  return receive(tensors, src_rank, tag);
}

c10::intrusive_ptr<c10d::Work> RdmacollBackend::recvAnysource(std::vector<at::Tensor>& tensors,
                                                              int tag) {
  return receive(tensors, -1, tag);
}

}  // namespace rdmacoll_torch
