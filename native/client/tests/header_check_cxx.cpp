// The public header also compiles as C++ (engines and plugins are mostly C++), and so does the
// C++ wrapper, every member of it instantiated here (compiled, never run).
#include "fenceline/fenceline_client.h"
#include "fenceline/fenceline_client.hpp"

int fl_header_check_cxx() {
  FlRunResult result = {};
  const FlApi *api = FlGetApi(FL_API_VERSION);
  return api == nullptr ? 1 : static_cast<int>(result.reserved);
}

int fl_header_check_wrapper(const char *socket) {
  try {
    fenceline::Client client(socket, "check");
    fenceline::ServerInfo info = client.server_info();
    fenceline::ModelMetadata meta = client.model_metadata("m");
    std::vector<fenceline::TensorInfo> in = meta.inputs(), out = meta.outputs();
    fenceline::Frame frame(in[0].size_bytes() + out[0].size_bytes());
    fenceline::Fence ready, done;
    fenceline::MemoryImport memory = client.import_frame(frame);
    fenceline::FenceImport r = client.import_fence(ready), d = client.import_fence(done);
    fenceline::View x = {in[0].name, &memory, 0, in[0].datatype, in[0].shape};
    fenceline::Session session = client.create_session(meta.name(), {x}, {x}, r, d);
    ready.signal(1);
    FlRunResult res = session.run(1);
    res = session.run_async(2, 2, 10);
    done.wait(1, 0);
    done.set_status(FL_FENCE_ABANDONED);
    fenceline::Session moved = std::move(session);
    moved.reset();
    return static_cast<int>(res.signal_value + frame.size() + done.value()) +
           (info.can_import_memory("host_fd") && info.can_import_fence("host_timeline")) +
           static_cast<int>(info.protocol() + info.version().size() +
                            info.capability_reason("x").size() + memory.id().size() +
                            r.id().size() + moved.id().size()) +
           (frame.data() != nullptr);
  } catch (const fenceline::Error &e) {
    return static_cast<int>(e.code()) + static_cast<int>(e.code_name().size());
  }
}
