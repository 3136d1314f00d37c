#include "work.hpp"

#include <rdmacoll/errors.hpp>

namespace rdmacoll_torch {

std::exception_ptr to_torch_error(std::exception_ptr error) {
  if (!error) return error;
  try {
    std::rethrow_exception(error);
  } catch (const rdmacoll::InvalidArgument& e) {
    return compat::argument_error(std::string("rdmacoll: ") + e.what());
  } catch (const rdmacoll::Error& e) {
    return compat::communication_error(std::string("rdmacoll: ") + e.what());
  } catch (...) {
    return error;  // torch's own (a failed copy out of staging, say)
  }
}

WorkRdmacoll::WorkRdmacoll(int rank, c10d::OpType type, const char* title,
                           std::vector<at::Tensor> outputs, const std::vector<at::Tensor>& inputs)
    : c10d::Work(rank, type, title, inputs),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors())) {}

void WorkRdmacoll::arm(const rdmacoll::Work& work, std::vector<at::Tensor> keep_alive,
                       std::function<void()> after) {
  work_ = work;
  auto future = future_;
  auto outputs = outputs_;
  // The profiler's range ends with the collective, wherever that happens.
  std::function<void()> end_range = std::move(recordFunctionEndCallback_);
  recordFunctionEndCallback_ = nullptr;
  work_.on_completion([future, outputs, keep_alive = std::move(keep_alive),
                       after = std::move(after),
                       end_range = std::move(end_range)](std::exception_ptr error) mutable {
    if (!error && after) {
      try {
        after();
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (end_range) end_range();
    if (error) {
      future->setError(to_torch_error(error));
    } else {
      future->markCompleted(c10::IValue(outputs));
    }
    keep_alive.clear();  // the worker reads none of them any more
  });
}

int WorkRdmacoll::sourceRank() const {
  const int global = work_.source_rank();
  if (members_.empty() || global < 0) return global;
  for (size_t r = 0; r < members_.size(); ++r) {
    if (members_[r] == global) return static_cast<int>(r);
  }
  return -1;
}

bool WorkRdmacoll::isCompleted() {
  return future_->completed();
}

bool WorkRdmacoll::isSuccess() const {
  return future_->completed() && !future_->hasError();
}

std::exception_ptr WorkRdmacoll::exception() const {
  return future_->completed() && future_->hasError() ? future_->exception_ptr() : nullptr;
}

bool WorkRdmacoll::wait(std::chrono::milliseconds timeout) {
  try {
    if (timeout == kNoTimeout) {
      work_.wait();
    } else {
      work_.wait(timeout);
    }
  } catch (const rdmacoll::Timeout& e) {
    if (timeout != kNoTimeout && !work_.is_completed()) {
      std::rethrow_exception(to_torch_error(std::current_exception()));
    }
  } catch (...) {
    // The collective's own error: the future holds it, translated.
  }
  future_->wait();  // the callback that completes it may still be running
  if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
  return true;
}

}  // namespace rdmacoll_torch
