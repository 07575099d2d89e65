/* HMAC-SHA256 (FIPS 180-4, RFC 2104) for the store's handshake: each end
 * proves it knows the run's secret without sending it (store_proto.h). A
 * small implementation of its own keeps libcdl free of a crypto library
 * dependency; it is checked against the RFC 4231 vectors (test_dist_store). */
#ifndef CDL_DIST_HMAC_H
#define CDL_DIST_HMAC_H

#include <stddef.h>

#define DIST_HMAC_LEN 32

/* out[32] = HMAC-SHA256(key[klen], msg[mlen]). */
void dist_hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen,
                      unsigned char out[DIST_HMAC_LEN]);

/* out (2 * n + 1 bytes) = the lowercase hex of bytes[n]. */
void dist_hex(const unsigned char *bytes, size_t n, char *out);

/* 1 when a[n] and b[n] are equal; the time taken does not depend on where
 * they differ. */
int dist_equal_ct(const void *a, const void *b, size_t n);

#endif
