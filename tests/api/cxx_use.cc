// libcdl from C++ as an application uses it: objects held by unique_ptr
// with the library's destroy functions, a captureless lambda as a
// callback, std::string and std::vector around the C structs, and a
// training run whose numbers the program reads back. Compiled by
// tests/api/cxx.sh in every C++ standard the compiler knows (C++11 on).
#include <cdl/cdl.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

struct backend_del {
    void operator()(cdl_backend *b) const { cdl_backend_destroy(b); }
};
struct model_del {
    void operator()(cdl_model *m) const { cdl_model_destroy(m); }
};
using backend_ptr = std::unique_ptr<cdl_backend, backend_del>;
using model_ptr = std::unique_ptr<cdl_model, model_del>;

int fail(const std::string &what)
{
    std::fprintf(stderr, "cxx_use: %s: %s\n", what.c_str(), cdl_last_error());
    return 1;
}

}  // namespace

int main()
{
    // A model of its own, run forward once.
    backend_ptr be(cdl_backend_create("cpu", 1));
    if (!be)
        return fail("backend");
    cdl_shape shape = {1, 28, 28};
    cdl_model_spec spec;
    if (cdl_spec_builtin("lenet", shape, 10, &spec) != 0)
        return fail("spec");
    model_ptr m(cdl_model_create(&spec, shape, 4, be.get()));
    if (!m)
        return fail("model");
    cdl_model_init(m.get(), 1);
    std::vector<float> x(4 * 28 * 28, 0.5f);
    const float *logits = cdl_model_forward(m.get(), x.data(), 4, 0, 0);
    if (!logits || cdl_model_outputs(m.get()) != 10)
        return fail("forward");

    // cdl_train_run with a lambda for on_record.
    cdl_train_config cfg;
    cdl_train_defaults(&cfg);
    std::snprintf(cfg.model, sizeof cfg.model, "%s", "mlp");
    std::snprintf(cfg.dataset, sizeof cfg.dataset, "%s", "synthetic");
    std::snprintf(cfg.device, sizeof cfg.device, "%s", "cpu");
    cfg.synthetic_n = 256;
    cfg.epochs = 1;
    cfg.threads = 1;
    cfg.quiet = 1;
    cfg.backend = be.get();
    std::vector<long> steps;
    cfg.on_record_ctx = &steps;
    cfg.on_record = [](void *ctx, const cdl_train_record *rec) {
        if (rec->type == CDL_RECORD_EPOCH)
            static_cast<std::vector<long> *>(ctx)->push_back(rec->step);
    };
    cdl_train_result res;
    if (cdl_train_run(&cfg, &res) != 0)
        return fail("cdl_train_run");
    if (steps.size() != 1 || steps[0] != res.steps)
        return fail("on_record saw " + std::to_string(steps.size()) + " epoch records");
    std::printf("cxx_use: libcdl %s, %ld steps\n", cdl_version(), res.steps);
    return 0;
}
