#include "bootstrap/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::bootstrap {

std::vector<uint8_t> random_bytes(size_t n) {
  std::vector<uint8_t> out(n);
  if (n && RAND_bytes(out.data(), static_cast<int>(n)) != 1) {
    throw Error("libcrypto could not produce random bytes (RAND_bytes failed)");
  }
  return out;
}

std::string random_hex(size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : random_bytes(n)) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

std::vector<uint8_t> store_proof(const std::string& token, const std::vector<uint8_t>& nonce,
                                 const std::string& job_id) {
  std::vector<uint8_t> message(nonce);
  message.insert(message.end(), job_id.begin(), job_id.end());
  std::vector<uint8_t> mac(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), message.data(),
            message.size(), mac.data(), &len)) {
    throw Error("libcrypto could not compute the store's HMAC-SHA256");
  }
  mac.resize(len);
  return mac;
}

std::vector<uint8_t> server_proof(const std::string& token, const std::vector<uint8_t>& nonce,
                                  const std::string& job_id) {
  // Sized once and filled by copies: GCC 12's -O3 -Warray-bounds misreads an insert here.
  constexpr char kTag[] = "server";
  std::vector<uint8_t> tagged(sizeof kTag - 1 + nonce.size());
  std::memcpy(tagged.data(), kTag, sizeof kTag - 1);
  if (!nonce.empty()) std::memcpy(tagged.data() + sizeof kTag - 1, nonce.data(), nonce.size());
  return store_proof(token, tagged, job_id);
}

bool same_proof(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace rdmacoll::bootstrap
