/* The fake GPU of tests/fakegpu: what its CUDA runtime offers its cuBLAS,
 * cuDNN and NCCL.
 *
 * Device memory is host memory that the fake runtime handed out; a stream
 * is a queue of closures that runs when the host waits for it (see
 * fake_runtime.cc), so the same deferred execution that a GPU has is what
 * the host code under test sees. Everything here takes the one lock of the
 * fake; the closures run under it too.
 */
#ifndef CDL_TESTS_FAKEGPU_FAKE_H
#define CDL_TESTS_FAKEGPU_FAKE_H

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <mutex>

namespace fakegpu {

std::recursive_mutex &lock();

/* Queues fn on s (or records it into the graph that s is capturing).
 * Returns cudaErrorInvalidResourceHandle for a stream that does not exist. */
cudaError_t enqueue(cudaStream_t s, std::function<void()> fn);
/* The same for work that may wait for another process (NCCL): fn(poll)
 * returns whether it is done; when the host only polls (poll true) it may
 * return false, and it is called again at the next wait. A blocking wait
 * calls it with poll false, and then it must finish (or fail). */
cudaError_t enqueue_pollable(cudaStream_t s, std::function<bool(bool)> fn);

bool stream_ok(cudaStream_t s);

/* Whether [p, p + bytes) lies inside one live device allocation; if not,
 * says why into why. */
bool device_range(const void *p, size_t bytes, char *why, size_t len);

/* A misuse the real library would reject or crash on: printed on stderr,
 * with the caller's name, so that a failing test says what was wrong. */
void complain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* What the GPU's tensor cores do to an FP32 operand under TF32: the
 * mantissa rounded to 10 bits (nearest, ties away). Callers use it only
 * when tf32_allowed(): NVIDIA_TF32_OVERRIDE=0 forbids TF32 for the process. */
float tf32_round(float x);
bool tf32_allowed();

int device_count();
/* The physical device behind visible device `device` (CUDA_VISIBLE_DEVICES
 * maps one to the other); -1 for none. Devices are told apart by it. */
int physical_device(int device);

} // namespace fakegpu

#endif
