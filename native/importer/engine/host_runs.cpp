// The native runner of a host session's RUN: a frame is decoded, checked, run, signalled,
// answered and counted here, so a frame costs the interpreter one call and the GIL only for the
// model's Python binding (onnxruntime releases it while the model runs). Anything this path would
// not answer exactly as the Python path does (a frame it cannot read, a session it does not hold,
// an input fence not yet reached, a shutdown) goes back to Python untouched: fenceline.ipc.server
// then serves it as before (docs/ipc.md, "The run path"). On the Unix socket the connection's
// receive runs here too (serve_loop); the Windows pipe receives in Python and hands each frame to
// serve_bytes.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/typing.h>

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

#include "common/fenceline_wire_io.h"
#include "common/host_timeline.h"
#include "adaptive_spin.h"
#include "cpu_runs.h"
#include "core/errors.h"
#include "core/py_errors.h"
#include "interop/host/host_fence.h"
#include "interop/host/host_memory.h"
#include "run_metrics.h"
#ifndef _WIN32
#include <unistd.h>

#include "transport/posix/run_page_map.h"
#include "transport/posix/seqpacket.h"
#endif
#include "core/trace.h"

namespace py = pybind11;

namespace fl {
namespace {

using Key = std::array<std::uint8_t, FL_WIRE_SESSION_ID_BYTES>;

// What the Python path's HostSession holds for a run, handed over once when the session is
// made (fenceline.runtime.host_session.HostSession.run_natively).
class HostRunner {
 public:
  HostRunner(std::string owner, py::object run, py::object binding, py::object session,
             std::shared_ptr<HostFence> wait,
             std::shared_ptr<HostFence> signal, std::vector<std::shared_ptr<HostMemory>> unsealed,
             std::shared_ptr<RunSeries> series)
      : owner(std::move(owner)),
        run(std::move(run)),
        binding(std::move(binding)),
        session(std::move(session)),
        wait(std::move(wait)),
        signal(std::move(signal)),
        unsealed(std::move(unsealed)),
        series(std::move(series)) {}

  const std::string owner;
  // onnxruntime's InferenceSession.run_with_iobinding of the C++ session, and the IOBinding's
  // C++ object: the Python wrapper's checks hold for a binding made by this session.
  py::object run, binding;
  // The same for the model's one-thread session (None: not bound), and the runs on the CPU in
  // flight, this one included, from which a run takes it (0: never), or takes the large
  // frames' turn instead (cpu_runs.h) if its frame, `frame_bytes`, is large. Set by set_single.
  py::object single_run = py::none(), single_binding = py::none();
  int single_from = 0;
  std::int64_t frame_bytes = 0;
  py::object session;  // the HostSession: its counters (record_run) and failure texts
  std::shared_ptr<HostFence> wait, signal;
  std::vector<std::shared_ptr<HostMemory>> unsealed;
  std::shared_ptr<RunSeries> series;
  std::mutex mu;                     // held through a run; close() takes it
  bool closed = false;

  // Binds the model's one-thread session (HostSession.use_single_thread), after a run in
  // flight: the GIL is let go while it waits for one.
  void set_single(py::object run_single, py::object binding_single, int from,
                  std::int64_t bytes) {
    std::unique_lock<std::mutex> hold(mu, std::defer_lock);
    {
      py::gil_scoped_release nogil;  // the run in flight needs the GIL to finish
      hold.lock();
    }
    single_run = std::move(run_single);
    single_binding = std::move(binding_single);
    single_from = from;
    frame_bytes = bytes;
  }
};

// What serve_run did with a RUN: what the connection's loop does next.
enum Served : int { kNotMine = 0, kAnswered = 1, kFailed = 2 };

// A run served here: its reply, and what the session's counters and the metrics record once
// the reply is sent (the renderer waits for the reply, not for the bookkeeping).
struct Answer {
  std::uint32_t request_id = 0;  // the reply's fields: the run page's, or the socket's frame
  FlWireRunReply body{};
  std::shared_ptr<RunSeries> series;
  // The HostSession, held here so that a remove() meanwhile (which lets go of the runner's
  // reference) cannot take it away before its record_run.
  py::object session;
  std::int64_t end = 0, wait_ns = 0, infer_ns = 0, total_ns = 0;
  bool single = false;  // the model ran on one thread (HostRunner::single_run)
  bool traced = false;  // the trace recorder was on: the reply's send is marked too
  std::uint64_t tag = 0, target = 0;
  // The session's counters have one home: its record_run (runtime/session.py); then the
  // metrics. Called with the GIL held, after the send: another of the service's threads takes
  // the GIL only after both, so none sees the reply's run uncounted (unless the send had to
  // wait for room in the socket, with the GIL released).
  void record() const {
    try {
      session.attr("record_run")(end, target, wait_ns, infer_ns, total_ns, single);
    } catch (py::error_already_set &e) {
      e.discard_as_unraisable("fenceline: recording a native run");  // its reply is sent
    }
    series->observe(total_ns / 1e9, wait_ns / 1e9, infer_ns / 1e9);
  }
  void sent() const {
    if (traced) trace::mark(trace::kReplySent, tag, target, fl_htl_now_ns());
  }
  // The reply as a socket frame.
  std::array<std::uint8_t, FL_WIRE_RUN_REPLY_FRAME_SIZE> frame() const {
    std::array<std::uint8_t, FL_WIRE_RUN_REPLY_FRAME_SIZE> out{};
    fl_wire_put_header(out.data(), FL_KIND_RUN | FL_WIRE_REPLY_BIT, request_id,
                       sizeof(FlWireRunReply));
    fl_wire_put_run_reply(out.data() + FL_WIRE_HEADER_SIZE, &body);
    return out;
  }
};

#ifndef _WIN32
// A connection's run page, as the service holds it (../common/run_page.h, docs/ipc.md): made by
// fenceline.ipc.server on OPEN_RUN_PAGE, handed to every serve_loop of the connection.
class RunPage {
 public:
  explicit RunPage(int fd)
      : map_(RunPageMap::adopt(fd)), last_(fl_load_u32(&map_->page()->request_seq)) {}

  // The RUN posted since the last one taken, if any.
  bool take(FlRunPageRun &run) { return fl_run_page_take(map_->page(), &last_, &run) != 0; }
  FlRunPage *page() const { return map_->page(); }

 private:
  std::unique_ptr<RunPageMap> map_;
  std::uint32_t last_;
};

#endif

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
    r->run = r->binding = r->single_run = r->single_binding = r->session = py::none();
  }

  // Every RUN from now on goes to Python, which answers "the service is shutting down".
  void close() { closing_.store(true); }
  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return runners_.size();
  }

  // One received frame, for a transport that receives in Python (the Windows pipe): (reply,
  // None) when it was served here (the metrics are recorded already: the caller sends the
  // reply), (None, failure) when its run failed here (the FencelineError to answer), (None,
  // None) when Python must serve it, untouched.
  py::typing::Tuple<py::typing::Optional<py::bytes>, py::object> serve_bytes(
      const py::bytes &frame, const std::string &owner, bool reply_flags,
      const py::object &run_options) {
    py::object failure = py::none();
    Answer answer;
    if (serve(owner, reply_flags, frame.cast<std::string>(), fl_htl_now_ns(), run_options,
              failure, answer) != kAnswered)
      return py::make_tuple(py::none(), failure);
    answer.record();
    const auto reply = answer.frame();
    return py::make_tuple(py::bytes(reinterpret_cast<const char *>(reply.data()), reply.size()),
                          py::none());
  }

#ifndef _WIN32
  // The connection's loop (fenceline.ipc.server): receives frames, waiting as `spin` says
  // with the GIL released, and serves the RUNs it can until a frame needs Python. Returns
  // (data, fds, problem, failure) for that frame, as _native.recv_message does plus the
  // FencelineError of a run that failed here (its reply is Python's to send); (None, [], None,
  // None) once the peer is gone: its end closed, its process (pidfd) exited, or a reply not
  // taken within send_timeout_ms.
  using Got = py::typing::Tuple<py::typing::Optional<py::bytes>, py::typing::List<py::int_>,
                                py::typing::Optional<py::str>, py::object>;
  //
  // With a run page (`page`, docs/ipc.md "The run page"), the page's RUNs are served too: a RUN
  // answered here is answered on the page; any other is marked "on the socket" there and
  // handed to Python as if it had come on the socket, and Python answers it there.
  //
  // `reply_flags` (as serve_bytes's): the connection's client said in HELLO that it reads the
  // RUN reply's flags (docs/ipc.md, "HELLO"); a reply to any other has flags 0. `run_options`:
  // onnxruntime's RunOptions for every model run of the connection (None: none), whose
  // terminate flag abandons the run in flight once the peer is gone (fenceline.ipc.abandon).
  Got serve_loop(int fd, const std::string &owner, SpinGate &gate, ReceiveSpin &spin, int pidfd,
                 std::int64_t send_timeout_ms, const py::object &page_arg, bool reply_flags,
                 const py::object &run_options) {
    RunPage *page = page_arg.is_none() ? nullptr : page_arg.cast<RunPage *>();
    const std::int64_t send_timeout_ns = send_timeout_ms < 0 ? -1 : send_timeout_ms * 1000000;
    const auto gone = [] { return py::make_tuple(py::none(), py::list(), py::none(), py::none()); };
    for (;;) {
      Message m;
      FlRunPageRun posted;
      bool on_page = false;
      const std::int64_t t0 = fl_htl_now_ns();
      std::int64_t budget = spin.budget_ns(t0);
      const std::int64_t kept = take_turn_kept_until() - t0;
      // What is there already is taken with the GIL held (as recv_message does).
      bool queued = true;
      if (page != nullptr && page->take(posted)) {
        on_page = true;
      } else if (!try_recv_message(fd, FL_WIRE_MAX_FRAME, FL_WIRE_MAX_FDS, m)) {
        queued = false;
        py::gil_scoped_release nogil;
        if (page == nullptr) {
          m = wait_frame(fd, gate, spin, budget, pidfd);
        } else {
          const auto news = [](void *arg) {
            auto *w = static_cast<std::pair<RunPage *, FlRunPageRun *> *>(arg);
            return w->first->take(*w->second);
          };
          std::pair<RunPage *, FlRunPageRun *> w{page, &posted};
          // The large frames' turn kept for this session (cpu_runs.h): its next RUN is looked
          // for with the core given to any thread that wants it (the renderer, on a full
          // machine, sending that RUN), not slept for, so no core idles meanwhile.
          const int got = kept > 0 ? spin_page(fd, kept, news, &w, m, true) : -1;
          on_page = got >= 0 ? got == 1
                             : wait_page(fd, gate, spin, budget, pidfd,
                                         &page->page()->service_sleeping, news, &w, m);
        }
      }
      // A frame that was queued already may be one of many that a renderer left before it
      // died (its own end among them, so the socket never hangs up): the process is looked at
      // before each such frame is served, one poll, and what a dead renderer queued is
      // dropped, not run. The waits above watch the process themselves.
      if (queued && process_exited(pidfd)) {
        for (int f : m.fds) ::close(f);
        return gone();
      }
      const std::int64_t received = fl_htl_now_ns();
      spin.observe(received - t0, budget);
      if (on_page) {
        py::object failure = py::none();
        Answer answer;
        if (serve(owner, reply_flags, posted.kind, posted.request_id, page_run(posted),
                  received, run_options, failure, answer) == kAnswered) {
          // A client asleep on the socket is nudged before the counters and metrics, as a
          // reply on the socket is sent before them.
          const FlRunPageReply r{posted.seq, FL_RUN_PAGE_ANSWERED, answer.request_id,
                                 answer.body};
          const bool sent = !fl_run_page_answer(page->page(), &r) ||
                            send_reply(fd, nudge_frame().data(), nudge_frame().size(), pidfd,
                                       send_timeout_ns);
          answer.sent();
          answer.record();
          if (!sent) return gone();
          continue;
        }
        // Python answers it on the socket; the client, told so by the page, reads it there.
        const FlRunPageReply diverted{posted.seq, FL_RUN_PAGE_ON_SOCKET, posted.request_id, {}};
        fl_run_page_answer(page->page(), &diverted);
        return py::make_tuple(py::bytes(page_frame(posted)), py::list(), py::none(), failure);
      }
      if (m.eof) return gone();
      if (drop_nudge(m)) continue;
      py::object failure = py::none();
      if (m.problem.empty() && m.fds.empty()) {
        Answer answer;
        if (serve(owner, reply_flags, m.data, received, run_options, failure, answer) ==
            kAnswered) {
          const auto reply = answer.frame();
          const bool sent = send_reply(fd, reply.data(), reply.size(), pidfd, send_timeout_ns);
          answer.sent();
          answer.record();  // the counters and metrics come after the reply
          if (!sent) return gone();
          continue;
        }
      }
      py::object problem = py::none();
      if (!m.problem.empty()) problem = py::str(m.problem);
      return py::make_tuple(py::bytes(m.data), py::cast(m.fds), problem, failure);
    }
  }
#endif

 private:
#ifndef _WIN32
  // Sends a reply as _native.send_message does: the GIL is let go only while the socket is
  // full, and a reply not taken in time, or whose reader's process has exited, ends the
  // connection (false: the peer is gone).
  static bool send_reply(int fd, const std::uint8_t *reply, std::size_t n, int pidfd,
                         std::int64_t send_timeout_ns) {
    const char *data = reinterpret_cast<const char *>(reply);
    int err = try_send_message(fd, data, n);
    if (err == EAGAIN) {
      py::gil_scoped_release nogil;
      err = send_waiting(fd, data, n, pidfd, send_timeout_ns);
    }
    return err == 0;
  }
#endif

#ifndef _WIN32
  // A page's RUN as the body the socket would have carried.
  static FlWireRun page_run(const FlRunPageRun &posted) {
    FlWireRun run;
    std::memcpy(run.session_id, posted.session_id, sizeof run.session_id);
    run.wait_value = posted.wait_value;
    run.signal_value = posted.signal_value;
    run.timeout_ms = posted.timeout_ms;
    run.flags = 0;
    return run;
  }

  // A page's RUN as the frame the socket would have carried, for Python to serve.
  static std::string page_frame(const FlRunPageRun &posted) {
    std::string data(FL_WIRE_RUN_FRAME_SIZE, '\0');
    auto *p = reinterpret_cast<std::uint8_t *>(&data[0]);
    const FlWireRun run = page_run(posted);
    fl_wire_put_header(p, static_cast<std::uint16_t>(posted.kind), posted.request_id,
                       sizeof(FlWireRun));
    fl_wire_put_run(p + FL_WIRE_HEADER_SIZE, &run);
    return data;
  }
#endif

  // One received frame: a RUN frame is served as serve_run says, any other is Python's.
  int serve(const std::string &owner, bool reply_flags, const std::string &data,
            std::int64_t received, const py::object &run_options, py::object &failure,
            Answer &answer) {
    const auto *p = reinterpret_cast<const std::uint8_t *>(data.data());
    FlWireHeader h;
    if (data.size() != FL_WIRE_RUN_FRAME_SIZE || !fl_wire_header_ok(p, data.size(), &h))
      return kNotMine;
    FlWireRun run;
    fl_wire_get_run(p + FL_WIRE_HEADER_SIZE, &run);
    return serve(owner, reply_flags, h.kind, h.request_id, run, received, run_options, failure,
                 answer);
  }

  // serve_run, with an unexpected failure answered as the Python path answers it.
  // `received`: when the RUN came (fl_htl_now_ns), for the trace. `reply_flags`: the client
  // reads the reply's flags; for any other they are 0, as the reply's last word was before
  // flags were defined.
  int serve(const std::string &owner, bool reply_flags, std::uint32_t kind,
            std::uint32_t request_id, const FlWireRun &run, std::int64_t received,
            const py::object &run_options, py::object &failure, Answer &answer) {
    try {
      const int served =
          serve_run(owner, kind, request_id, run, received, run_options, failure, answer);
      if (!reply_flags) answer.body.flags = 0;
      return served;
    } catch (const Error &e) {
      failure = python_error(e);
    } catch (const py::error_already_set &e) {
      failure = internal_failure(e.what());
    } catch (const std::exception &e) {
      // As the Python path: the client gets "internal", the log says what happened.
      failure = internal_failure(e.what());
    }
    return kFailed;
  }

  // Serves one RUN (or RUN_ASYNC: `kind`): kAnswered (`answer` holds the reply to send),
  // kFailed (`failure` is the FencelineError to answer), or kNotMine (Python serves it,
  // untouched).
  int serve_run(const std::string &owner, std::uint32_t kind, std::uint32_t request_id,
                const FlWireRun &run, std::int64_t received, const py::object &run_options,
                py::object &failure, Answer &answer) {
    if (closing_.load(std::memory_order_relaxed) ||
        (kind != FL_KIND_RUN && kind != FL_KIND_RUN_ASYNC))
      return kNotMine;
    if (run.flags != 0 ||
        (run.timeout_ms != FL_WIRE_TIMEOUT_DEFAULT && run.timeout_ms > max_timeout_ms_))
      return kNotMine;
    const std::uint64_t wait_value = run.wait_value;
    const std::uint64_t target = run.signal_value ? run.signal_value : wait_value;
    Key k;
    std::memcpy(k.data(), run.session_id, k.size());
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
    const std::int64_t start = fl_htl_now_ns();
    try {
      // The Python path answers a value not above the output fence's, and waits for the input
      // fence with its adaptive spin, its timeout and its cancellation.
      if (target <= r->signal->value()) return kNotMine;
      if (r->wait->wait(wait_value, 0, 0) != FL_HTL_REACHED) return kNotMine;
    } catch (const Error &) {
      return kNotMine;  // a lost page: the Python path says so
    }
    const std::int64_t waited = fl_htl_now_ns();
    const bool traced = trace::on();
    std::uint64_t tag = 0;
    if (traced) {
      std::memcpy(&tag, k.data(), sizeof tag);
      trace::mark(trace::kReceived, tag, target, received);
      trace::mark(trace::kInputReached, tag, target, waited);
    }
    for (const auto &m : r->unsealed) m->mapping()->check_size();  // DeviceLost, as in Python
    if (traced) trace::mark(trace::kModelStart, tag, target, fl_htl_now_ns());
    PyObject *ok;
    bool single;
    {
      const CpuRun counted(r.get(), r->frame_bytes, r->single_from);
      single = counted.single;
      const py::object &run_model = single ? r->single_run : r->run;
      const py::object &binding = single ? r->single_binding : r->binding;
      ok = PyObject_CallFunctionObjArgs(run_model.ptr(), binding.ptr(), run_options.ptr(),
                                        nullptr);
    }
    if (ok == nullptr) {
      py::error_already_set e;
      // The message's one home is the Python session's (runtime/session.py).
      failure = r->session.attr("model_failed")(e.value());
      return kFailed;
    }
    Py_DECREF(ok);
    const std::int64_t inferred = fl_htl_now_ns();
    for (const auto &m : r->unsealed)
      if (m->mapping()->lost()) {
        failure = r->session.attr("memory_shrank")();
        return kFailed;
      }
    r->signal->signal(target);
    const std::int64_t end = fl_htl_now_ns();
    answer.session = r->session;  // recorded once the reply is sent (Answer::record)
    hold.unlock();
    if (traced) {
      trace::mark(trace::kModelEnd, tag, target, inferred);
      trace::mark(trace::kSignalled, tag, target, end);
    }

    const FlWireRunReply body{target, fl_wire_micros(waited - start),
                              fl_wire_micros(inferred - waited), fl_wire_micros(end - start),
                              cpus_shared() ? FL_WIRE_REPLY_CPUS_SHARED : 0u};
    answer.request_id = request_id;
    answer.body = body;
    answer.series = r->series;
    answer.end = end;
    answer.wait_ns = waited - start;
    answer.infer_ns = inferred - waited;
    answer.total_ns = end - start;
    answer.single = single;
    answer.traced = traced;
    answer.tag = tag;
    answer.target = target;
    return kAnswered;
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

  const std::uint32_t max_timeout_ms_;
  std::atomic<bool> closing_{false};
  mutable std::mutex mu_;
  std::map<Key, std::shared_ptr<HostRunner>> runners_;
};

}  // namespace

void bind_host_runs(py::module_ &mod) {
  py::class_<HostRunner, std::shared_ptr<HostRunner>>(mod, "HostRunner")
      .def(py::init<std::string, py::object, py::object, py::object,
                    std::shared_ptr<HostFence>, std::shared_ptr<HostFence>,
                    std::vector<std::shared_ptr<HostMemory>>, std::shared_ptr<RunSeries>>(),
           py::arg("owner"), py::arg("run"), py::arg("binding"), py::arg("session"),
           py::arg("wait_fence"), py::arg("signal_fence"),
           py::arg("unsealed"), py::arg("series"))
      .def("set_single", &HostRunner::set_single, py::arg("run"), py::arg("binding"),
           py::arg("single_from"), py::arg("frame_bytes"),
           "The model's one-thread session and its binding, taken by a run that starts while "
           "the runs on the CPU in flight, itself included, are single_from or more, unless "
           "its frame (frame_bytes) is large: it then takes the large frames' turn; after a "
           "run in flight.");
#ifndef _WIN32
  py::class_<RunPage>(mod, "RunPage",
                      "A connection's run page (docs/ipc.md): the client's sealed memfd, mapped.")
      .def(py::init<int>(), py::arg("fd"));
  mod.attr("RUN_PAGE_SIZE") = FL_RUN_PAGE_SIZE;
#endif
  py::class_<RunTable, std::shared_ptr<RunTable>>(mod, "RunTable")
      .def(py::init<std::uint32_t>(), py::arg("max_timeout_ms"))
      .def("add", &RunTable::add, py::arg("key"), py::arg("runner"))
      .def("remove", &RunTable::remove, py::arg("key"),
           "Forgets a session, after its run in flight (the GIL is released while it waits).")
      .def("close", &RunTable::close, "From now on every frame goes back to Python.")
      .def("__len__", &RunTable::size)
      .def("serve_bytes", &RunTable::serve_bytes, py::arg("frame"), py::arg("owner"),
           py::arg("reply_flags") = false, py::arg("run_options") = py::none(),
           "Serves one received frame: (reply, None) when served here (send the reply), "
           "(None, failure) when its run failed here, (None, None) when Python serves it. "
           "reply_flags: the client reads the RUN reply's flags (else they are 0). "
           "run_options: onnxruntime's RunOptions for the model's run (None: none).")
#ifndef _WIN32
      .def("serve_loop", &RunTable::serve_loop, py::arg("fd"), py::arg("owner"), py::arg("gate"),
           py::arg("spin"), py::arg("pidfd") = -1, py::arg("send_timeout_ms") = -1,
           py::arg("page") = py::none(), py::arg("reply_flags") = false,
           py::arg("run_options") = py::none(),
           "Receives and serves frames until one needs Python: (data, fds, problem, failure) "
           "for it, failure being the FencelineError of a run that failed here; (None, [], "
           "None, None) once the peer is gone: its end closed, the process behind pidfd (-1: "
           "none) exited, or a reply not taken within send_timeout_ms (-1: no limit). A frame "
           "queued already is served only while that process lives. Raises when the socket "
           "itself fails. With a run page, its RUNs are served too. reply_flags: the client "
           "reads the RUN reply's flags (else they are 0). run_options: onnxruntime's "
           "RunOptions for every model run (None: none).")
#endif
      ;
}

}  // namespace fl
