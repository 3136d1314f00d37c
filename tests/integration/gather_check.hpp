#pragma once
// Checked all-gathers shared by the host tests and the SoftRoCE (verbs) tests.

#include <gtest/gtest.h>

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "multirank.hpp"

namespace rdmacoll::testing {

// Small integers: exact in every dtype. Bool inputs alternate 0/1.
inline double input_value(int rank, int64_t i, int iter, DType dt) {
  const int64_t raw = (rank * 31 + i * 7 + iter * 13) % 100;
  return dt == DType::Bool ? static_cast<double>(raw % 2) : static_cast<double>(1 + raw);
}

inline double expected_value(int rank, int64_t i, int iter, DType in, DType out) {
  const double v = input_value(rank, i, iter, in);
  return out == DType::Bool ? (v != 0.0 ? 1.0 : 0.0) : v;
}

// One checked gather on `group`: the output starts with values that differ from every expected
// one, so a missing or misplaced write is caught.
inline void gather_and_check(const Group& group, int64_t n, DType in_dt, DType out_dt, bool stacked,
                             int iter = 0) {
  const int p = group.is_default() ? get_world_size() : group.size();
  const int me = group.is_default() ? get_rank() : group.rank();
  Tensor in = zeros({n}, in_dt);
  for (int64_t i = 0; i < n; ++i)
    in.set(i, input_value(me, i, iter, in_dt));
  Tensor out = stacked ? zeros({p, n}, out_dt) : zeros({p * n}, out_dt);
  for (int r = 0; r < p; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const double e = expected_value(r, i, iter, in_dt, out_dt);
      out.set(r * n + i, out_dt == DType::Bool ? 1.0 - e : e + 1);
    }
  }
  all_gather_into_tensor(out, in, group);
  for (int r = 0; r < p; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const double got = out.item(r * n + i);
      const double want = expected_value(r, i, iter, in_dt, out_dt);
      RANK_CHECK(got == want, "rank " << me << " of " << p << ", chunk " << r << " element " << i
                                      << " of " << n << " (" << dtype_name(in_dt) << " -> "
                                      << dtype_name(out_dt) << (stacked ? ", stacked" : ", flat")
                                      << ", iter " << iter << "): got " << got << ", want "
                                      << want);
    }
  }
}

inline void expect_all_ok(const std::vector<testing::RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].exit_code, 0) << "rank " << r << " failed; " << describe(results);
  }
}

template <typename E>
void expect_throw_with(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
  } catch (const E& e) {
    RANK_CHECK(std::string(e.what()).find(needle) != std::string::npos,
               "message '" << e.what() << "' lacks '" << needle << "'");
    return;
  } catch (const std::exception& e) {
    RANK_CHECK(false, "wrong exception type: " << e.what());
  }
  RANK_CHECK(false, "no exception; expected one mentioning '" << needle << "'");
}

// For a rank whose peer leaves the job while it waits: depending on which comes first, the
// transport notices the peer gone (PeerFailure) or the call's deadline passes (Timeout). Both
// are the error the rank must get; any other type, or no exception, fails the test.
inline void expect_peer_failure_or_timeout(const std::function<void()>& f) {
  try {
    f();
  } catch (const PeerFailure&) {
    return;
  } catch (const Timeout&) {
    return;
  } catch (const std::exception& e) {
    RANK_CHECK(false, "wrong exception type: " << e.what());
  }
  RANK_CHECK(false, "no exception; expected PeerFailure or Timeout");
}

// Fills `in` with rank `rank`'s values for iteration `iter`.
inline void fill_input(Tensor& in, int rank, int iter) {
  for (int64_t i = 0; i < in.numel(); ++i)
    in.set(i, input_value(rank, i, iter, in.dtype()));
}

// Checks every element of a flat output gathered from fill_input() of every rank.
inline void check_gathered(const Tensor& out, int world, int iter, DType in_dtype) {
  const int64_t n = out.numel() / world;
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      RANK_CHECK(out.item(r * n + i) == input_value(r, i, iter, in_dtype),
                 "iter " << iter << " chunk " << r << " element " << i);
    }
  }
}

// Runs `call` over and over; rank `victim` SIGKILLs itself before its `die_at`th call. Every
// other rank must raise PeerFailure or Timeout (then it exits 0), never hang or go on.
template <typename Call>
[[noreturn]] void call_until_a_peer_dies(int rank, int victim, int die_at, Call call) {
  for (int iter = 0; iter < 100000; ++iter) {
    if (rank == victim && iter == die_at) ::raise(SIGKILL);
    try {
      call();
    } catch (const PeerFailure& e) {
      std::fprintf(stderr, "[rank %d] as expected: %s\n", rank, e.what());
      std::_Exit(0);
    } catch (const Timeout& e) {
      std::fprintf(stderr, "[rank %d] as expected: %s\n", rank, e.what());
      std::_Exit(0);
    }
  }
  throw CheckFailure("rank " + std::to_string(rank) + " never noticed the dead peer");
}

// all_gather_into_tensor of n elements per rank until `victim` dies (call_until_a_peer_dies).
[[noreturn]] inline void gather_until_a_peer_dies(int rank, int world, int64_t n, int victim,
                                                  int die_at) {
  Tensor in = zeros({n});
  Tensor out = zeros({world * n});
  call_until_a_peer_dies(rank, victim, die_at, [&] { all_gather_into_tensor(out, in); });
}

}  // namespace rdmacoll::testing
