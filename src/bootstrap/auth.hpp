#pragma once
// The store's proof of membership: HMAC-SHA256 of the server's nonce and the job id under the
// job's secret (RDMACOLL_AUTH_TOKEN), and random numbers, from OpenSSL's libcrypto. The only
// file that includes OpenSSL.

#include <cstdint>
#include <string>
#include <vector>

namespace rdmacoll::bootstrap {

inline constexpr size_t kNonceBytes = 32;

// Cryptographically random bytes; throws Error when libcrypto cannot provide them.
std::vector<uint8_t> random_bytes(size_t n);
// Lower-case hex of n random bytes (tokens and job ids the launcher makes).
std::string random_hex(size_t n);

// HMAC-SHA256(token, nonce || job_id): the client's proof, on the server's nonce.
std::vector<uint8_t> store_proof(const std::string& token, const std::vector<uint8_t>& nonce,
                                 const std::string& job_id);
// The server's proof, on the client's nonce: HMAC-SHA256(token, "server" || nonce || job_id).
// A client checks it, so a process that took the port first cannot pose as the job's store.
std::vector<uint8_t> server_proof(const std::string& token, const std::vector<uint8_t>& nonce,
                                  const std::string& job_id);
// Constant-time comparison.
bool same_proof(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);

}  // namespace rdmacoll::bootstrap
