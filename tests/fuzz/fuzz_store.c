/* libFuzzer target: the TCP store's server side (lib/dist/store_server.c)
 * reading what a client sends: the handshake, request headers with their
 * announced lengths, keys, values and every operation, from a stranger or
 * from a rank.
 *
 * Each input is one client connection to a fresh server (world 2, token
 * "fuzz-token", on a loopback socket made once). Its first byte says who
 * speaks: bit 0 clear, a stranger (the rest is sent as it is); bit 0 set, a
 * client that first completes the handshake (store_proto.h: the server's
 * nonce is random, so fuzzed bytes could never prove the token) claiming
 * rank (byte >> 1) & 3 of 2 (2 and 3 are refused), then sends the rest. The
 * client's side is then shut down, the replies are read until EOF or a
 * short deadline (requests may wait), and the server is stopped. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "lib/dist/contract.h"
#include "lib/dist/hmac.h"
#include "lib/dist/store_proto.h"
#include "lib/dist/util.h"
#include "tests/fuzz/fuzz.h"

static int lfd = -1, port;

static void listen_once(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 64) ||
        getsockname(lfd, (struct sockaddr *)&a, &l)) {
        perror("fuzz_store: listen");
        abort();
    }
    port = ntohs(a.sin_port);
}

/* The client's half of the handshake; the server's answer is not checked
 * (the fuzzer is after the server). */
static void handshake(int fd, int rank)
{
    char cn[STORE_NONCE_HEX + 1], answer[STORE_NONCE_HEX + STORE_PROOF_HEX];
    char proof[STORE_PROOF_HEX + 1];
    store_rep r;
    double deadline = dist_now() + 1;
    memset(cn, '7', STORE_NONCE_HEX);
    cn[STORE_NONCE_HEX] = '\0';
    store_req h = {STORE_MAGIC, STORE_CHALLENGE, STORE_NONCE_HEX, -1, 0, 2ull << 32 | (unsigned)rank};
    if (store_send_all(fd, &h, sizeof h) || store_send_all(fd, cn, STORE_NONCE_HEX) ||
        store_recv_all(fd, &r, sizeof r, deadline) || r.status || r.vlen != sizeof answer ||
        store_recv_all(fd, answer, sizeof answer, deadline))
        return;
    store_proof("fuzz-token", "client", 2, rank, cn, answer, proof);
    store_req p = {STORE_MAGIC, STORE_PROVE, STORE_PROOF_HEX, -1, 0, 0};
    if (store_send_all(fd, &p, sizeof p) || store_send_all(fd, proof, STORE_PROOF_HEX))
        return;
    (void)store_recv_all(fd, &r, sizeof r, deadline);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536)
        return 0;
    int mode = data[0];
    data++;
    size--;
    if (lfd < 0)
        listen_once();
    /* The server adopts (and closes) a listening socket: a copy each time. */
    char fdtext[16];
    snprintf(fdtext, sizeof fdtext, "%d", dup(lfd));
    setenv(CDL_ENV_STORE_FD, fdtext, 1);
    cdl_rank_info info;
    memset(&info, 0, sizeof info);
    info.world = 2;
    info.master_port = port;
    snprintf(info.job_id, sizeof info.job_id, "fuzz");
    store_server *srv = store_server_start(&info, "fuzz-token", 1);
    if (!srv) {
        fprintf(stderr, "fuzz_store: %s\n", cdl_last_error());
        abort();
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        if (mode & 1)
            handshake(fd, (mode >> 1) & 3);
        (void)store_send_all(fd, data, size);   /* the server may drop us early */
        shutdown(fd, SHUT_WR);
        char buf[4096];
        double deadline = dist_now() + 0.02;
        for (;;) {
            double left = deadline - dist_now();
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0 ||
                recv(fd, buf, sizeof buf, 0) <= 0)
                break;
        }
    }
    if (fd >= 0)
        close(fd);
    store_server_stop(srv, 0);
    return 0;
}
