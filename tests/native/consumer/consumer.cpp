// One add_64x64 frame through an installed C client's C++ wrapper, laid out from the model's
// metadata (no offsets by hand). Prints "ok <ABI>.<API> <server version>" on success.
#include <cstdio>
#include <vector>

#include <fenceline/fenceline_client.hpp>

int main(int argc, char **argv) {
  try {
    fenceline::Client client(argc > 1 ? argv[1] : nullptr, "consumer-c++");
    fenceline::ModelMetadata meta = client.model_metadata("add_64x64");
    std::vector<fenceline::TensorInfo> ins = meta.inputs(), outs = meta.outputs();
    const fenceline::TensorInfo &x = ins.at(0), &y = outs.at(0);
    fenceline::Frame frame(x.size_bytes() + y.size_bytes());
    fenceline::Fence ready, done;
    fenceline::MemoryImport memory = client.import_frame(frame);
    fenceline::Session session = client.create_session(
        meta.name(), {{x.name, &memory, 0, x.datatype, x.shape}},
        {{y.name, &memory, x.size_bytes(), y.datatype, y.shape}}, client.import_fence(ready),
        client.import_fence(done));
    float *in = static_cast<float *>(frame.data());
    const float *out = in + x.size_bytes() / sizeof(float);
    const size_t n = x.size_bytes() / sizeof(float);
    for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i);
    ready.signal(1);
    FlRunResult r = session.run(1);
    for (size_t i = 0; i < n; ++i)
      if (out[i] != in[i] + 1.0f) {
        std::fprintf(stderr, "y[%zu] = %g\n", i, static_cast<double>(out[i]));
        return 1;
      }
    // A mistake is an exception with the service's stable code.
    try {
      client.model_metadata("no_such_model");
      return 1;
    } catch (const fenceline::Error &e) {
      if (e.code() != FL_ERROR_NOT_FOUND) return 1;
    }
    std::printf("ok %u.%u %s signal %llu\n", FL_ABI_VERSION, FL_API_VERSION,
                client.server_info().version().c_str(),
                static_cast<unsigned long long>(r.signal_value));
    return 0;
  } catch (const fenceline::Error &e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
