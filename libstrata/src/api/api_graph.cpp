// api_graph.cpp — C entry points for recording and replaying graphs.
//
// While a context records, kernels and fills/copies are stored by its backend
// and every buffer and slot set they touch is collected (call.h operand());
// the finished graph holds a reference on each so none can be destroyed
// while the graph lives.
#include <memory>

#include "call.h"
#include "export.h"

using namespace strata;

namespace {

strata_graph* use_graph(Call& call, strata_graph* graph) {
    if (!registry_contains(graph, HandleKind::Graph))
        invalid(graph == nullptr ? "graph is NULL" : "graph is not a live graph (destroyed or never created)");
    call.ctx = graph->ctx;
    refuse_in_chain(call);
    return graph;
}

// Leaves recording mode, discarding whatever was recorded.
void discard_recording(strata_context* ctx) {
    ctx->backend->capture_abort();
    ctx->recording = false;
    ctx->recording_failed = false;
    ctx->recorded_buffers.clear();
    ctx->recorded_slots.clear();
}

}  // namespace

STRATA_EXPORT int32_t strata_graph_begin(strata_context* ctx) {
    return guarded("strata_graph_begin", [&](Call& call) {
        use_context(call, ctx);
        if (ctx->recording)
            fail(STRATA_ERR_STATE, "the context is already recording a graph (nested recording is not allowed)");
        ctx->recorded_buffers.clear();
        ctx->recorded_slots.clear();
        ctx->recording_failed = false;
        ctx->recording_error.clear();
        ctx->backend->capture_begin();
        ctx->recording = true;
    });
}

STRATA_EXPORT int32_t strata_graph_end(strata_context* ctx, strata_graph** out_graph) {
    return guarded("strata_graph_end", [&](Call& call) {
        use_context(call, ctx);
        if (!ctx->recording) fail(STRATA_ERR_STATE, "the context is not recording (call strata_graph_begin first)");
        if (out_graph == nullptr) {
            discard_recording(ctx);
            invalid("out_graph is NULL; the recording was discarded");
        }
        if (ctx->recording_failed) {
            std::string why = ctx->recording_error;
            discard_recording(ctx);
            fail(STRATA_ERR_STATE, "the recording was discarded because a call failed while recording (" + why + ")");
        }
        auto graph = std::make_unique<strata_graph>();
        graph->buffers.assign(ctx->recorded_buffers.begin(), ctx->recorded_buffers.end());
        graph->slots.assign(ctx->recorded_slots.begin(), ctx->recorded_slots.end());
        ctx->recording = false;
        ctx->recorded_buffers.clear();
        ctx->recorded_slots.clear();
        try {
            graph->exec = ctx->backend->capture_end();
        } catch (...) {
            ctx->backend->capture_abort();
            throw;
        }
        graph->ctx = ctx;
        for (strata_buffer* b : graph->buffers) b->graph_refs++;
        for (strata_slots* s : graph->slots) s->graph_refs++;
        publish_handle(graph, HandleKind::Graph, &ctx->n_graphs, out_graph);
    });
}

STRATA_EXPORT int32_t strata_graph_launch(strata_graph* graph) {
    return guarded("strata_graph_launch", [&](Call& call) {
        use_graph(call, graph);
        require_eager(call, "launching a graph");
        graph->exec->launch();
    });
}

STRATA_EXPORT int32_t strata_graph_kernel_count(strata_graph* graph, int64_t* out_count) {
    return guarded("strata_graph_kernel_count", [&](Call& call) {
        use_graph(call, graph);
        if (out_count == nullptr) invalid("out_count is NULL");
        const int64_t n = graph->exec->kernel_count();
        if (n < 0) fail(STRATA_ERR_INTERNAL, "the graph's kernels could not be counted");
        *out_count = n;
    });
}

STRATA_EXPORT int32_t strata_graph_destroy(strata_graph* graph) {
    return guarded("strata_graph_destroy", [&](Call& call) {
        use_graph(call, graph);
        call.ctx = nullptr;  // destroying a graph never disturbs a recording in progress
        for (strata_buffer* b : graph->buffers) b->graph_refs--;
        for (strata_slots* s : graph->slots) s->graph_refs--;
        graph->buffers.clear();
        graph->slots.clear();
        graph->exec.reset();
        graph->ctx->n_graphs--;
        retire_handle(graph);
    });
}
