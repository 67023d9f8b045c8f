// The per-frame path of a host session, in native code: a RUN frame from a renderer's socket is
// decoded, checked, run, signalled, answered and counted here, so a frame costs the interpreter
// one call and the GIL only for the model's Python binding (onnxruntime releases it while the
// model runs). Anything this path would not answer exactly as the Python path does (a frame it
// cannot read, a session it does not hold, an input fence not yet reached, a shutdown) goes back
// to Python untouched: fenceline.ipc.server then serves it as before (docs/ipc.md, "The run
// path"). Linux only: the Windows pipe serves every frame in Python.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/typing.h>

#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../common/fenceline_wire.h"
#include "../common/host_timeline.h"
#include "adaptive_spin.h"
#include "errors.h"
#include "host_fence.h"
#include "host_memory.h"
#include "run_metrics.h"
#include "seqpacket.h"
#include "trace.h"

namespace py = pybind11;

namespace fl {
namespace {

using Key = std::array<std::uint8_t, FL_WIRE_SESSION_ID_BYTES>;

// perf_counter_ns's clock, so that the run records the status page reads line up with the
// Python path's.
std::int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

std::uint32_t u32(const std::uint8_t *p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}
std::uint16_t u16(const std::uint8_t *p) {
  return static_cast<std::uint16_t>(p[0] | p[1] << 8);
}
std::uint64_t u64(const std::uint8_t *p) {
  return static_cast<std::uint64_t>(u32(p)) | static_cast<std::uint64_t>(u32(p + 4)) << 32;
}
void put32(std::uint8_t *p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void put64(std::uint8_t *p, std::uint64_t v) {
  put32(p, static_cast<std::uint32_t>(v));
  put32(p + 4, static_cast<std::uint32_t>(v >> 32));
}
std::uint32_t micros(std::int64_t ns) {
  return static_cast<std::uint32_t>(std::min<std::int64_t>(ns / 1000, 0xFFFFFFFF));
}

// What the Python path's HostSession holds for a run, handed over once when the session is
// made (fenceline.runtime.host_session.HostSession.run_natively).
class HostRunner {
 public:
  HostRunner(std::string owner, py::object run, py::object binding, py::object session,
             py::object result_type, std::shared_ptr<HostFence> wait,
             std::shared_ptr<HostFence> signal, std::vector<std::shared_ptr<HostMemory>> unsealed,
             std::shared_ptr<RunSeries> series, std::string failed, std::string shrank)
      : owner(std::move(owner)),
        run(std::move(run)),
        binding(std::move(binding)),
        session(std::move(session)),
        result_type(std::move(result_type)),
        wait(std::move(wait)),
        signal(std::move(signal)),
        unsealed(std::move(unsealed)),
        series(std::move(series)),
        failed(std::move(failed)),
        shrank(std::move(shrank)) {}

  const std::string owner;
  // onnxruntime's InferenceSession.run_with_iobinding of the C++ session, and the IOBinding's
  // C++ object: the Python wrapper's checks hold for a binding made by this session.
  py::object run, binding;
  py::object session, result_type;  // the HostSession (its counters) and RunResult
  std::shared_ptr<HostFence> wait, signal;
  std::vector<std::shared_ptr<HostMemory>> unsealed;
  std::shared_ptr<RunSeries> series;
  const std::string failed, shrank;  // the Python path's messages: "model 'm' failed: ", ...
  std::mutex mu;                     // held through a run; close() takes it
  bool closed = false;
};

// What serve_frame did with a frame: what the connection's loop does next.
enum Served : int { kNotMine = 0, kAnswered = 1, kPeerGone = 2 };

class RunTable {
 public:
  explicit RunTable(std::uint32_t max_timeout_ms) : max_timeout_ms_(max_timeout_ms) {}

  void add(const py::bytes &key, std::shared_ptr<HostRunner> runner) {
    const Key k = to_key(key);
    std::lock_guard<std::mutex> lock(mu_);
    runners_[k] = std::move(runner);
  }

  // Forgets the session and waits for a run of it in flight; then nothing runs it here again.
  void remove(const py::bytes &key) {
    const Key k = to_key(key);
    std::shared_ptr<HostRunner> r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = runners_.find(k);
      if (it == runners_.end()) return;
      r = std::move(it->second);
      runners_.erase(it);
    }
    {
      py::gil_scoped_release nogil;  // the run in flight needs the GIL to finish
      std::lock_guard<std::mutex> hold(r->mu);
      r->closed = true;
    }
    // Drop the references back to the session (it holds this runner: no cycle is left).
    r->run = r->binding = r->session = r->result_type = py::none();
  }

  // Every RUN from now on goes to Python, which answers "the service is shutting down".
  void close() { closing_.store(true); }
  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return runners_.size();
  }

  // The connection's loop (fenceline.ipc.server): receives frames, waiting as `spin` says
  // with the GIL released, and serves the RUNs it can until a frame needs Python. Returns
  // (data, fds, problem, failure) for that frame, as _native.recv_message does plus the
  // FencelineError of a run that failed here (its reply is Python's to send); (None, [], None,
  // None) once the peer is gone: its end closed, its process (pidfd) exited, or a reply not
  // taken within send_timeout_ms.
  using Got = py::typing::Tuple<py::typing::Optional<py::bytes>, py::typing::List<py::int_>,
                                py::typing::Optional<py::str>, py::object>;
  Got serve_loop(int fd, const std::string &owner, SpinGate &gate, ReceiveSpin &spin, int pidfd,
                 std::int64_t send_timeout_ms) {
    const std::int64_t send_timeout_ns = send_timeout_ms < 0 ? -1 : send_timeout_ms * 1000000;
    for (;;) {
      Message m;
      const std::int64_t t0 = fl_htl_now_ns();
      const std::int64_t budget = spin.budget_ns(t0);
      std::int64_t spun = budget;
      // A frame already there is taken with the GIL held (as recv_message does).
      if (!try_recv_message(fd, FL_WIRE_MAX_FRAME, FL_WIRE_MAX_FDS, m)) {
        py::gil_scoped_release nogil;
        bool pending = true;
        if (budget > 0 && gate.try_enter()) {
          struct Leave {
            SpinGate &g;
            ~Leave() { g.leave(); }
          } leave{gate};
          m = recv_message(fd, FL_WIRE_MAX_FRAME, FL_WIRE_MAX_FDS, 0, budget, false);
          pending = m.pending;
        } else if (budget > 0) {
          ++spin.denied;
          spun = 0;
        }
        if (pending) m = recv_message(fd, FL_WIRE_MAX_FRAME, FL_WIRE_MAX_FDS, 0, 0, true, pidfd);
      }
      const std::int64_t received = fl_htl_now_ns();
      spin.observe(received - t0, spun);
      if (m.eof) return py::make_tuple(py::none(), py::list(), py::none(), py::none());
      py::object failure = py::none();
      if (m.problem.empty() && m.fds.empty()) {
        try {
          const int served =
              serve_frame(fd, owner, reinterpret_cast<const std::uint8_t *>(m.data.data()),
                          m.data.size(), received, pidfd, send_timeout_ns);
          if (served == kAnswered) continue;
          if (served == kPeerGone)
            return py::make_tuple(py::none(), py::list(), py::none(), py::none());
        } catch (const Error &e) {
          py::object errors = py::module_::import("fenceline.errors");
          py::object type = errors.attr("BY_IPC_CODE").attr("get")(
              static_cast<std::uint32_t>(e.code()), errors.attr("FencelineError"));
          failure = type(e.what());
        }
      }
      py::object problem = py::none();
      if (!m.problem.empty()) problem = py::str(m.problem);
      return py::make_tuple(py::bytes(m.data), py::cast(m.fds), problem, failure);
    }
  }

 private:
  int serve_frame(int fd, const std::string &owner, const std::uint8_t *p, std::size_t n,
                  std::int64_t received, int pidfd, std::int64_t send_timeout_ns) {
    if (n != FL_WIRE_HEADER_SIZE + sizeof(FlWireRun) || closing_.load(std::memory_order_relaxed))
      return kNotMine;
    const std::uint16_t kind = u16(p + 6);
    if (u32(p) != FL_WIRE_MAGIC || u16(p + 4) != FL_WIRE_VERSION ||
        (kind != FL_KIND_RUN && kind != FL_KIND_RUN_ASYNC) || u32(p + 12) != sizeof(FlWireRun))
      return kNotMine;
    const std::uint32_t request_id = u32(p + 8);
    const std::uint8_t *body = p + FL_WIRE_HEADER_SIZE;
    const std::uint64_t wait_value = u64(body + 16), signal_value = u64(body + 24);
    const std::uint32_t timeout_ms = u32(body + 32), flags = u32(body + 36);
    if (flags != 0 || (timeout_ms != FL_WIRE_TIMEOUT_DEFAULT && timeout_ms > max_timeout_ms_))
      return kNotMine;
    const std::uint64_t target = signal_value ? signal_value : wait_value;
    Key k;
    std::memcpy(k.data(), body, k.size());
    std::shared_ptr<HostRunner> r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = runners_.find(k);
      if (it == runners_.end()) return kNotMine;
      r = it->second;
    }
    if (r->owner != owner) return kNotMine;
    std::unique_lock<std::mutex> hold(r->mu, std::try_to_lock);
    if (!hold.owns_lock() || r->closed) return kNotMine;
    const std::int64_t start = now_ns();
    try {
      // The Python path answers a value not above the output fence's, and waits for the input
      // fence with its adaptive spin, its timeout and its cancellation.
      if (target <= r->signal->value()) return kNotMine;
      if (r->wait->wait(wait_value, 0, 0) != FL_HTL_REACHED) return kNotMine;
    } catch (const Error &) {
      return kNotMine;  // a lost page: the Python path says so
    }
    const std::int64_t waited = now_ns();
    const bool traced = trace::on();
    std::uint64_t tag = 0;
    if (traced) {
      std::memcpy(&tag, k.data(), sizeof tag);
      trace::mark(trace::kReceived, tag, target, received);
      trace::mark(trace::kInputReached, tag, target, waited);
    }
    for (const auto &m : r->unsealed) m->mapping()->check_size();  // DeviceLost, as in Python
    if (traced) trace::mark(trace::kModelStart, tag, target, now_ns());
    PyObject *ok = PyObject_CallFunctionObjArgs(r->run.ptr(), r->binding.ptr(), Py_None, nullptr);
    if (ok == nullptr) {
      py::error_already_set e;
      throw Error(Code::Model, r->failed + py::str(e.value()).cast<std::string>());
    }
    Py_DECREF(ok);
    const std::int64_t inferred = now_ns();
    for (const auto &m : r->unsealed)
      if (m->mapping()->lost()) throw Error(Code::DeviceLost, r->shrank);
    r->signal->signal(target);
    const std::int64_t end = now_ns();
    record(*r, end, target, waited - start, inferred - waited, end - start);
    hold.unlock();
    if (traced) {
      trace::mark(trace::kModelEnd, tag, target, inferred);
      trace::mark(trace::kSignalled, tag, target, end);
    }

    std::uint8_t reply[FL_WIRE_HEADER_SIZE + sizeof(FlWireRunReply)] = {};
    put32(reply, FL_WIRE_MAGIC);
    reply[4] = FL_WIRE_VERSION & 0xFF;
    reply[5] = FL_WIRE_VERSION >> 8;
    const std::uint16_t reply_kind = FL_KIND_RUN | FL_WIRE_REPLY_BIT;
    reply[6] = reply_kind & 0xFF;
    reply[7] = reply_kind >> 8;
    put32(reply + 8, request_id);
    put32(reply + 12, sizeof(FlWireRunReply));
    put64(reply + 16, target);
    put32(reply + 24, micros(waited - start));
    put32(reply + 28, micros(inferred - waited));
    put32(reply + 32, micros(end - start));
    // As _native.send_message: the GIL is let go only while the socket is full, and a reply
    // not taken in time, or whose reader's process has exited, ends the connection.
    int err = try_send_message(fd, reinterpret_cast<const char *>(reply), sizeof reply);
    if (err == EAGAIN) {
      py::gil_scoped_release nogil;
      err = send_waiting(fd, reinterpret_cast<const char *>(reply), sizeof reply, pidfd,
                         send_timeout_ns);
    }
    if (traced) trace::mark(trace::kReplySent, tag, target, now_ns());
    // The metrics come after the reply, as in the Python path (Runtime.run).
    r->series->observe((end - start) / 1e9, (waited - start) / 1e9, (inferred - waited) / 1e9);
    return err == 0 ? kAnswered : kPeerGone;
  }

  static Key to_key(const py::bytes &key) {
    char *data = nullptr;
    Py_ssize_t n = 0;
    if (PyBytes_AsStringAndSize(key.ptr(), &data, &n) != 0) throw py::error_already_set();
    if (n != FL_WIRE_SESSION_ID_BYTES) throw py::value_error("a session key is 16 bytes");
    Key k;
    std::memcpy(k.data(), data, k.size());
    return k;
  }

  // The session's counters and its recent runs, as HostSession.run keeps them.
  static void record(HostRunner &r, std::int64_t end, std::uint64_t target, std::int64_t wait_ns,
                     std::int64_t infer_ns, std::int64_t total_ns) {
    py::object s = r.session;
    s.attr("runs") = s.attr("runs").cast<std::uint64_t>() + 1;
    s.attr("last_signal_value") = py::int_(target);
    s.attr("recent").attr("append")(
        py::make_tuple(end, r.result_type(target, wait_ns, infer_ns, total_ns)));
  }

  const std::uint32_t max_timeout_ms_;
  std::atomic<bool> closing_{false};
  mutable std::mutex mu_;
  std::map<Key, std::shared_ptr<HostRunner>> runners_;
};

}  // namespace

void bind_host_runs(py::module_ &mod) {
  py::class_<HostRunner, std::shared_ptr<HostRunner>>(mod, "HostRunner")
      .def(py::init<std::string, py::object, py::object, py::object, py::object,
                    std::shared_ptr<HostFence>, std::shared_ptr<HostFence>,
                    std::vector<std::shared_ptr<HostMemory>>, std::shared_ptr<RunSeries>,
                    std::string, std::string>(),
           py::arg("owner"), py::arg("run"), py::arg("binding"), py::arg("session"),
           py::arg("result_type"), py::arg("wait_fence"), py::arg("signal_fence"),
           py::arg("unsealed"), py::arg("series"), py::arg("failed"), py::arg("shrank"));
  py::class_<RunTable, std::shared_ptr<RunTable>>(mod, "RunTable")
      .def(py::init<std::uint32_t>(), py::arg("max_timeout_ms"))
      .def("add", &RunTable::add, py::arg("key"), py::arg("runner"))
      .def("remove", &RunTable::remove, py::arg("key"),
           "Forgets a session, after its run in flight (the GIL is released while it waits).")
      .def("close", &RunTable::close, "From now on every frame goes back to Python.")
      .def("__len__", &RunTable::size)
      .def("serve_loop", &RunTable::serve_loop, py::arg("fd"), py::arg("owner"), py::arg("gate"),
           py::arg("spin"), py::arg("pidfd") = -1, py::arg("send_timeout_ms") = -1,
           "Receives and serves frames until one needs Python: (data, fds, problem, failure) "
           "for it, failure being the FencelineError of a run that failed here; (None, [], "
           "None, None) once the peer is gone: its end closed, the process behind pidfd (-1: "
           "none) exited, or a reply not taken within send_timeout_ms (-1: no limit). Raises "
           "when the socket itself fails.");
}

}  // namespace fl
