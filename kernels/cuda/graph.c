/* Whole training steps as CUDA graphs (API in cuda_backend.h).
 *
 * Small models like the seed CNN are launch-bound: ~40 kernels of a few
 * microseconds each. A graph launches them all with one call and lets the
 * GPU run them back to back.
 *
 * Capture: graph_begin starts stream capture. Every op then runs as usual
 * (captured instead of executed), records its signature (op and buffers),
 * and puts its per-step scalars in the next slot of the host scalar block;
 * its kernel reads them from the device block. graph_end instantiates the
 * graph, uploads the host block to the device block and launches.
 *
 * Replay: the caller issues the same ops; each only checks its signature
 * against the capture and writes its scalars into the same slot, then
 * graph_end uploads and launches. Upload and launch are in stream order,
 * so a graph reads the scalars of its own step. The host blocks form a
 * ring: a block is refilled only once its upload has finished (an event),
 * so the host runs ahead of the GPU without a sync per step.
 */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/impl.h"

/* FNV-1a over the op id and its 64-bit arguments. */
uint64_t cbe_sig(int op, const uint64_t *args, size_t nargs)
{
    uint64_t h = 0xcbf29ce484222325ull;
    uint64_t v = (uint64_t)op;
    for (size_t i = 0;; i++) {
        for (int b = 0; b < 8; b++) {
            h ^= (v >> (8 * b)) & 0xff;
            h *= 0x100000001b3ull;
        }
        if (i == nargs)
            break;
        v = args[i];
    }
    return h;
}

const char *cbe_graph_busy(const cbe *ci)
{
    switch (ci->graph.mode) {
    case GRAPH_CAPTURE: return "capture";
    case GRAPH_REPLAY: return "replay";
    default: return NULL;
    }
}

/* Next scalar slot (16-byte aligned); NULL with an error when full. */
static size_t take_slot(cbe *ci, size_t bytes, const char *name, int *ok)
{
    step_graph *g = &ci->graph;
    size_t off = (g->scalars_used + 15) & ~(size_t)15;
    *ok = off + bytes <= GRAPH_SCALAR_BYTES;
    if (!*ok) {
        cbe_fail(ci, "CUDA graph: the step's per-step scalars exceed %d bytes at op %s: the "
                 "step is too long to capture; run it without cuda_backend_graph_begin",
                 GRAPH_SCALAR_BYTES, name);
        return 0;
    }
    g->scalars_used = off + bytes;
    return off;
}

int cbe_graph_op(cbe *ci, const char *name, uint64_t sig, const void *sc, size_t sc_bytes,
                 const void **dyn)
{
    step_graph *g = &ci->graph;
    graph_slot *c = &g->slots[g->cur];
    *dyn = NULL;
    ci->recent[ci->ops++ % CBE_RECENT] = name;
    if (g->mode == GRAPH_OFF)
        return 0;
    int ok = 1;
    if (g->mode == GRAPH_CAPTURE) {
        if (c->nsigs >= GRAPH_MAX_OPS) {
            cbe_fail(ci, "CUDA graph: more than %d ops in one step (at %s): run the step "
                     "without cuda_backend_graph_begin", GRAPH_MAX_OPS, name);
            return 0;   /* let it be captured: end_capture reports the failure */
        }
        c->sigs[c->nsigs++] = sig;
        if (sc_bytes) {
            size_t off = take_slot(ci, sc_bytes, name, &ok);
            if (ok) {
                memcpy(g->host_scalars + off, sc, sc_bytes);
                *dyn = g->dev_scalars + off;
            }
        }
        return 0;
    }
    /* Replay: the graph holds the work; check and collect the scalars. */
    if (c->broken)
        return 1;
    if (g->pos >= c->nsigs || c->sigs[g->pos] != sig) {
        c->broken = 1;
        cbe_fail(ci, "CUDA graph: op %d of the step (%s) differs from the captured step (other "
                 "buffers, sizes or op order): a graph step must repeat the same ops on the same "
                 "buffers; use another key for another shape", g->pos + 1, name);
        return 1;
    }
    g->pos++;
    if (sc_bytes) {
        size_t off = take_slot(ci, sc_bytes, name, &ok);
        if (ok)
            memcpy(g->host_scalars + off, sc, sc_bytes);
        else
            c->broken = 1;
    }
    return 1;
}

static void drop_slot(cbe *ci, graph_slot *c)
{
    if (c->have) {
        CU_CHECK(ci, cudaGraphExecDestroy(c->exec));
        c->have = 0;
    }
}

static void drop_exec(cbe *ci)
{
    for (int i = 0; i < GRAPH_SLOTS; i++)
        drop_slot(ci, &ci->graph.slots[i]);
}

void cbe_graph_destroy(cbe *ci)
{
    step_graph *g = &ci->graph;
    if (ci->stream)
        (void)cudaStreamSynchronize(ci->stream);
    drop_exec(ci);
    for (int i = 0; i < GRAPH_RING; i++)
        if (g->uploaded[i])
            (void)cudaEventDestroy(g->uploaded[i]);
    if (g->ring)
        (void)cudaFreeHost(g->ring);
    if (g->dev_scalars)
        (void)cudaFree(g->dev_scalars);
    for (int i = 0; i < GRAPH_SLOTS; i++)
        cdl_free(g->slots[i].sigs);
    memset(g, 0, sizeof *g);
}

/* The buffers of the recorder, made on first use (outside any step). */
static int graph_setup(cbe *ci)
{
    step_graph *g = &ci->graph;
    if (g->ring)
        return 0;
    for (int i = 0; i < GRAPH_SLOTS; i++)
        if (!g->slots[i].sigs &&
            !(g->slots[i].sigs = cdl_calloc(GRAPH_MAX_OPS, sizeof *g->slots[i].sigs)))
            return -1;
    int failed = CU_CHECK(ci, cudaHostAlloc((void **)&g->ring,
                                            (size_t)GRAPH_RING * GRAPH_SCALAR_BYTES,
                                            cudaHostAllocPortable)) ||
                 CU_CHECK(ci, cudaMalloc((void **)&g->dev_scalars, GRAPH_SCALAR_BYTES));
    for (int i = 0; i < GRAPH_RING && !failed; i++)
        failed = CU_CHECK(ci, cudaEventCreateWithFlags(&g->uploaded[i], cudaEventDisableTiming));
    if (failed) {
        cbe_graph_destroy(ci);
        return -1;
    }
    memset(g->ring, 0, (size_t)GRAPH_RING * GRAPH_SCALAR_BYTES);
    g->host_scalars = g->ring;
    return 0;
}

int cuda_backend_graph_begin(cdl_backend *be, uint64_t key)
{
    if (!cuda_backend_is_cuda(be))
        return 0;
    cbe *ci = cbe_of(be);
    step_graph *g = &ci->graph;
    cbe_enter(ci);
    if (g->mode != GRAPH_OFF)
        return cbe_fail(ci, "cuda_backend_graph_begin: a graph step is already open (%s): call "
                        "cuda_backend_graph_end first", cbe_graph_busy(ci));
    if (ci->failed)
        return cbe_fail(ci, "cuda_backend_graph_begin: an earlier op failed: %s", ci->err);
    if (graph_setup(ci) != 0)
        return -1;
    /* This step's host block: the next in the ring, once its last upload
     * has left it. */
    g->slot = (g->slot + 1) % GRAPH_RING;
    if (g->recorded[g->slot] && CU_CHECK(ci, cudaEventSynchronize(g->uploaded[g->slot])))
        return -1;
    g->host_scalars = g->ring + (size_t)g->slot * GRAPH_SCALAR_BYTES;
    g->scalars_used = 0;
    g->pos = 0;
    /* The slot holding key, else an empty one, else the least recently
     * used one. */
    int pick = -1;
    for (int i = 0; i < GRAPH_SLOTS && pick < 0; i++)
        if (g->slots[i].have && g->slots[i].key == key)
            pick = i;
    for (int i = 0; i < GRAPH_SLOTS && pick < 0; i++)
        if (!g->slots[i].have)
            pick = i;
    if (pick < 0) {
        pick = 0;
        for (int i = 1; i < GRAPH_SLOTS; i++)
            if (g->slots[i].used < g->slots[pick].used)
                pick = i;
    }
    graph_slot *c = &g->slots[pick];
    g->cur = pick;
    c->used = ++g->clock;
    if (c->have && c->key == key && !c->broken) {
        g->mode = GRAPH_REPLAY;
        return 1;
    }
    drop_slot(ci, c);
    c->broken = 0;
    c->nsigs = 0;
    c->key = key;
    if (CU_CHECK(ci, cudaStreamBeginCapture(ci->stream, cudaStreamCaptureModeThreadLocal)))
        return -1;
    g->mode = GRAPH_CAPTURE;
    return 0;
}

/* This step's scalars to the device, then the graph, in stream order. */
static int launch(cbe *ci)
{
    step_graph *g = &ci->graph;
    if (g->scalars_used) {
        if (CU_CHECK(ci, cudaMemcpyAsync(g->dev_scalars, g->host_scalars, g->scalars_used,
                                         cudaMemcpyHostToDevice, ci->stream)) ||
            CU_CHECK(ci, cudaEventRecord(g->uploaded[g->slot], ci->stream)))
            return -1;
        g->recorded[g->slot] = 1;
    }
    return CU_CHECK(ci, cudaGraphLaunch(g->slots[g->cur].exec, ci->stream));
}

int cuda_backend_graph_end(cdl_backend *be)
{
    if (!cuda_backend_is_cuda(be))
        return 0;
    cbe *ci = cbe_of(be);
    step_graph *g = &ci->graph;
    graph_slot *c = &g->slots[g->cur];
    cbe_enter(ci);
    graph_mode mode = g->mode;
    g->mode = GRAPH_OFF;
    if (mode == GRAPH_OFF)
        return cbe_fail(ci, "cuda_backend_graph_end without cuda_backend_graph_begin");
    if (mode == GRAPH_REPLAY) {
        if (!c->broken && g->pos != c->nsigs) {
            c->broken = 1;
            cbe_fail(ci, "CUDA graph: the step issued %d ops but the captured one has %d: a "
                     "graph step must repeat the same ops", g->pos, c->nsigs);
        }
        if (c->broken) {
            /* Nothing of this step ran: the caller must redo it eagerly. */
            drop_slot(ci, c);
            return -1;
        }
        return launch(ci);
    }
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(ci->stream, &graph);
    if (e != cudaSuccess || ci->failed) {
        if (e != cudaSuccess)
            CU_CHECK(ci, e);
        if (graph)
            (void)cudaGraphDestroy(graph);
        c->broken = 1;
        return cbe_fail(ci, "CUDA graph capture of the step failed (nothing of it ran): %s",
                        ci->err);
    }
    e = cudaGraphInstantiate(&c->exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    if (CU_CHECK(ci, e))
        return -1;
    c->have = 1;
    return launch(ci);
}

void cuda_backend_graph_reset(cdl_backend *be)
{
    if (!cuda_backend_is_cuda(be))
        return;
    cbe *ci = cbe_of(be);
    cbe_enter(ci);
    if (ci->graph.mode != GRAPH_OFF)
        return;
    /* cudaGraphExecDestroy may be called while a launch runs: the launch
     * completes first. */
    drop_exec(ci);
}
