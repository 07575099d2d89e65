/* Blocking socket I/O with deadlines, shared by the store's client and server. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <cdl/cdl.h>

#include "hmac.h"
#include "store_proto.h"
#include "util.h"

void store_proof(const char *token, const char *side, int world, int rank, const char *cnonce,
                 const char *snonce, char *out)
{
    char msg[64 + 2 * STORE_NONCE_HEX];
    unsigned char mac[DIST_HMAC_LEN];
    int n = snprintf(msg, sizeof msg, "cdl-store|%s|%d|%d|%.*s|%.*s", side, world, rank,
                     STORE_NONCE_HEX, cnonce, STORE_NONCE_HEX, snonce);
    dist_hmac_sha256(token, strlen(token), msg, n > 0 && (size_t)n < sizeof msg ? (size_t)n : 0,
                     mac);
    dist_hex(mac, sizeof mac, out);
}

int store_alt_ports(const char *token, int port, int out[STORE_ALT_PORTS])
{
    const char *resv = getenv("SLURM_STEP_RESV_PORTS");
    if (resv && *resv)
        return 0;
    int n = 0;
    for (unsigned i = 0; n < STORE_ALT_PORTS && i < 64; i++) {
        char msg[64];
        unsigned char mac[DIST_HMAC_LEN];
        int len = snprintf(msg, sizeof msg, "cdl-store-port|%d|%u", port, i);
        dist_hmac_sha256(token, strlen(token), msg, (size_t)len, mac);
        uint32_t v = (uint32_t)mac[0] << 24 | (uint32_t)mac[1] << 16 | (uint32_t)mac[2] << 8 |
                     mac[3];
        int off = 1 + (int)(v % STORE_ALT_SPAN), p = port + off <= 65535 ? port + off : port - off;
        int dup = p < 1;
        for (int j = 0; j < n && !dup; j++)
            dup = out[j] == p;
        if (!dup)
            out[n++] = p;
    }
    return n == STORE_ALT_PORTS ? n : 0;
}

int store_nonce(char *out)
{
    unsigned char rnd[STORE_NONCE_HEX / 2];
    if (dist_random(rnd, sizeof rnd))
        return -1;
    dist_hex(rnd, sizeof rnd, out);
    return 0;
}

int store_send_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int store_recv_all(int fd, void *buf, size_t n, double deadline)
{
    return store_recv_stop(fd, buf, n, deadline, NULL);
}

int store_recv_stop(int fd, void *buf, size_t n, double deadline, int (*stop)(void))
{
    char *p = buf;
    while (n) {
        if (stop && stop()) {
            errno = ECANCELED;
            return -1;
        }
        if (deadline > 0 || stop) {
            double left = deadline > 0 ? deadline - dist_now() : 1e9;
            if (left <= 0) {
                errno = ETIMEDOUT;
                return -1;
            }
            /* A signal's handler may run in another thread: this poll is
             * not always interrupted, so a stop is looked for in slices. */
            if (stop && left > STORE_STOP_POLL_S)
                left = STORE_STOP_POLL_S;
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            int ms = left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
            int r = poll(&pfd, 1, ms);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0)
                return -1;
            if (r == 0)
                continue;   /* re-check the deadline */
        }
        ssize_t k = recv(fd, p, n, 0);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (k == 0) {
            errno = EPIPE;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}
