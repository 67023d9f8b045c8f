// The trace recorder (trace.h). One buffer for the process, allocated when a recording starts;
// writers take a slot with one fetch_add and publish it with a release store.
#include "trace.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/typing.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <thread>

#ifdef _WIN32
#include <windows.h>
#else
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "common/host_timeline.h"

namespace py = pybind11;

namespace fl::trace {

std::atomic<bool> g_on{false};

namespace {

// The buffer of the recording in progress, freed when it stops: stop() first waits until no
// writer is inside record() (g_writers), and a writer that enters later sees `on` false.
struct Buffer {
  std::unique_ptr<Event[]> events;
  std::size_t capacity;
};
std::mutex g_control;  // start and stop
std::unique_ptr<Buffer> g_owned;  // under g_control
std::atomic<Buffer *> g_buffer{nullptr};
std::atomic<int> g_writers{0};  // threads inside record()
std::atomic<std::size_t> g_next{0};  // the next slot
std::atomic<std::uint64_t> g_frames{0}, g_dropped{0};
std::atomic<std::uint64_t> g_max_frames{0};
std::atomic<bool> g_filled{false};

std::uint32_t thread_id() {
  thread_local const std::uint32_t id = [] {
#ifdef _WIN32
    return static_cast<std::uint32_t>(GetCurrentThreadId());
#else
    return static_cast<std::uint32_t>(syscall(SYS_gettid));
#endif
  }();
  return id;
}

void full() {
  g_filled.store(true, std::memory_order_relaxed);
  g_on.store(false, std::memory_order_relaxed);
}

}  // namespace

std::int64_t now_ns() { return fl_htl_now_ns(); }

void record(Moment m, std::uint64_t session, std::uint64_t frame, std::int64_t t_ns) {
  // Counted in before `on` is read again (both sequentially consistent): stop() clears `on`,
  // then waits for the count to be 0, so no writer still holds the buffer it frees.
  g_writers.fetch_add(1);
  struct Out {
    ~Out() { g_writers.fetch_sub(1); }
  } out;
  if (!g_on.load()) return;
  if (m == kReceived &&
      g_frames.fetch_add(1, std::memory_order_relaxed) >=
          g_max_frames.load(std::memory_order_relaxed)) {
    full();
    return;
  }
  Buffer *b = g_buffer.load(std::memory_order_acquire);
  const std::size_t i = g_next.fetch_add(1, std::memory_order_relaxed);
  if (b == nullptr || i >= b->capacity) {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
    full();
    return;
  }
  Event &e = b->events[i];
  e.t_ns = t_ns;
  e.session = session;
  e.frame = frame;
  e.thread = thread_id();
  e.moment = static_cast<std::uint8_t>(m);
  e.ready.store(1, std::memory_order_release);
}

bool start(std::size_t capacity, std::uint64_t max_frames) {
  std::lock_guard<std::mutex> lock(g_control);
  if (g_on.load() || g_owned) return false;
  // Zeroed: every slot's `ready` is 0 until a writer publishes it.
  g_owned.reset(new Buffer{std::unique_ptr<Event[]>(new Event[capacity]()), capacity});
  g_next.store(0);
  g_frames.store(0);
  g_dropped.store(0);
  g_max_frames.store(max_frames);
  g_filled.store(false);
  g_buffer.store(g_owned.get());
  g_on.store(true);
  return true;
}

std::vector<Taken> stop(std::uint64_t *dropped) {
  std::lock_guard<std::mutex> lock(g_control);
  g_on.store(false);
  while (g_writers.load() != 0) std::this_thread::yield();
  std::vector<Taken> out;
  Buffer *b = g_buffer.exchange(nullptr);
  if (dropped) *dropped = g_dropped.load();
  if (b == nullptr) return out;
  const std::size_t n = std::min(g_next.load(), b->capacity);
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const Event &e = b->events[i];
    if (!e.ready.load(std::memory_order_acquire)) continue;  // never published: dropped
    out.push_back(Taken{e.t_ns, e.session, e.frame, e.thread, e.moment, {}});
  }
  g_owned.reset();
  return out;
}

bool filled() { return g_filled.load(std::memory_order_relaxed); }

}  // namespace fl::trace

namespace fl {

void bind_trace(py::module_ &mod) {
  mod.attr("TRACE_MOMENTS") = static_cast<int>(trace::kMomentCount);
  mod.def("trace_start", &trace::start, py::arg("capacity"), py::arg("max_frames"),
          py::call_guard<py::gil_scoped_release>(),
          "Starts recording moments (at most capacity, and those of at most max_frames frames); "
          "False when a recording is already on.");
  mod.attr("TRACE_EVENT_FORMAT") = trace::kTakenFormat;
  mod.def(
      "trace_stop",
      []() -> py::typing::Tuple<py::bytes, py::int_> {
        std::uint64_t dropped = 0;
        std::vector<trace::Taken> got;
        {
          py::gil_scoped_release unlocked;
          got = trace::stop(&dropped);
        }
        // One copy into a bytes object (a memcpy, whatever the size): fenceline.trace reads
        // the records one at a time, never building a list of every moment at once.
        py::bytes data(reinterpret_cast<const char *>(got.data()),
                       got.size() * sizeof(trace::Taken));
        return py::make_tuple(data, dropped);
      },
      "Stops the recording and frees its buffer: (records, dropped); records are "
      "TRACE_EVENT_FORMAT structs (t_ns, session, frame, thread, moment).");
  mod.def("trace_on", &trace::on, "Whether a trace is recording now.");
  mod.def("trace_filled", &trace::filled,
          "Whether the recording stopped by itself (its frames or its room reached).");
  mod.def(
      "trace_mark",
      [](int moment, std::uint64_t session, std::uint64_t frame, std::int64_t t_ns) {
        if (moment < 0 || moment >= trace::kMomentCount) throw py::value_error("no such moment");
        trace::mark(static_cast<trace::Moment>(moment), session, frame,
                    t_ns ? t_ns : trace::now_ns());
      },
      py::arg("moment"), py::arg("session"), py::arg("frame"), py::arg("t_ns") = 0,
      "Records one moment while a trace is on (t_ns 0: now).");
}

}  // namespace fl
