#pragma once
// Every error rdmacoll raises derives from rdmacoll::Error, so callers can catch one type.
// Messages say what failed, where (rank, peer, operation) and expected vs got.

#include <stdexcept>
#include <string>

#include "rdmacoll/export.hpp"

namespace rdmacoll {

class RDMACOLL_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad arguments: shapes, dtypes, group membership, mismatches across ranks.
class RDMACOLL_API InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A wait passed its deadline (peer never arrived, collective did not complete).
class RDMACOLL_API Timeout : public Error {
 public:
  using Error::Error;
};

// A peer process died or its connection broke.
class RDMACOLL_API PeerFailure : public Error {
 public:
  using Error::Error;
};

// The transport (UCX, verbs) reported an error that is not attributable to a peer.
class RDMACOLL_API TransportError : public Error {
 public:
  using Error::Error;
};

}  // namespace rdmacoll
