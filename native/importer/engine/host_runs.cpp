// The run engine: the one entry of every session's run, whatever carried it (the Unix socket
// and its run page, the Windows pipe, HTTP interop runs, a streaming session's frames). A run is
// admitted (the session, its owner, its mode, the owner's runs in flight, shutdown, timeout),
// waited for, run, signalled, answered and counted here, so a frame costs the interpreter one
// call and the GIL only for the model's Python binding (onnxruntime releases it while the
// model runs). A RUN sent ahead of its input fence waits here too, with the GIL released
// (wait_late). Every refusal is worded here, once; a session whose body stays in Python (a
// CUDA session: onnxruntime's CUDA binding) is admitted here and then run by that body, the one
// place a run leaves native code (docs/architecture.md).
// On the Unix socket the connection's receive runs here too (serve_loop); the Windows pipe
// receives in Python and hands each frame to serve_bytes; Python callers call run().
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/typing.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
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
#include "shutdown.h"
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

// What the engine holds of a session for its runs, handed over once when the session is made:
// a host session's model, binding and fences (HostSession.runner), or the Python body of a
// session whose run stays in Python (SessionRunner.python).
class SessionRunner {
 public:
  SessionRunner(std::string owner, py::object run, py::object binding, py::object session,
             std::shared_ptr<HostFence> wait,
             std::shared_ptr<HostFence> signal, std::vector<std::shared_ptr<HostMemory>> unsealed,
             std::shared_ptr<RunSeries> series, bool streaming)
      : owner(std::move(owner)),
        run(std::move(run)),
        binding(std::move(binding)),
        session(std::move(session)),
        counts(this->session.is_none()
                   ? nullptr
                   : this->session.attr("counts").cast<std::shared_ptr<SessionCounts>>()),
        wait(std::move(wait)),
        signal(std::move(signal)),
        unsealed(std::move(unsealed)),
        series(std::move(series)),
        streaming(streaming) {}

  // A session whose run is `body(wait_value, signal_value or None, timeout_ns, cancel,
  // asynchronous)`, a Python callable that returns the run's RunResult and counts it.
  static std::shared_ptr<SessionRunner> python(std::string owner, py::object body,
                                            std::shared_ptr<RunSeries> series, bool streaming) {
    auto r = std::make_shared<SessionRunner>(std::move(owner), py::none(), py::none(), py::none(),
                                          nullptr, nullptr,
                                          std::vector<std::shared_ptr<HostMemory>>{},
                                          std::move(series), streaming);
    r->body = std::move(body);
    r->in_python = true;
    return r;
  }

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
  py::object session;  // the HostSession: its failure texts
  // Its counters (SessionCounts), recorded here without the interpreter (null for a Python
  // body, which records its own).
  std::shared_ptr<SessionCounts> counts;
  std::shared_ptr<HostFence> wait, signal;
  std::vector<std::shared_ptr<HostMemory>> unsealed;
  std::shared_ptr<RunSeries> series;  // the run metrics of its transport (null: none)
  // Its owner's runs in flight, over all the owner's sessions: one counter, shared by them
  // (RunTable::add), so a RUN's quota check is one atomic step, no lookup and no lock.
  std::shared_ptr<std::atomic<int>> inflight;
  // A streaming session: its frames come from its worker (RunTable::run's `stream`); a RUN of
  // a client is refused.
  const bool streaming;
  py::object body = py::none();  // the Python body (SessionRunner.python); None once removed
  bool in_python = false;        // run by `body`, not here
  std::mutex mu;  // held through a run, its fence wait included; close() takes it
  bool closed = false;
  // The input fence's spin rule (spin_rule.h) of the session, and its fence waits that
  // blocked at once (every spinner slot was taken); its budget set by RunTable::add. Read and
  // written with `mu` held. A streaming session's frames wait by their worker's rule instead.
  ReceiveSpin spin{0};

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

// The slice of a long fence wait (as fenceline.interop.host_fence.CANCEL_SLICE_NS, a renderer's):
// between slices the wait asks whether the client went away or the service stops.
constexpr std::int64_t kCancelSliceNs = 100000000;

// A wait with no timeout of its own (a streaming session's frame): 73 years, ended by its
// cancel.
constexpr std::int64_t kNoTimeoutNs = std::int64_t{1} << 61;

// The input fence's wait of a RUN sent ahead of it: the spin rule `spin` (the session's, or
// a streaming worker's) gives a budget, spun while a slot of `gate` is held; then the wait
// sleeps, in slices of kCancelSliceNs when `cancel` (a fenceline.waiting.Cancel, or any object
// with is_set(); None: none) is given, asking it between slices, with the GIL, whether the
// wait must end. Returns the FL_HTL_* result, or FL_HTL_TIMED_OUT with `cancelled` set to the
// Cancel's reason. Called with the GIL held and whatever guards `spin` (the runner's `mu`);
// the GIL is let go meanwhile. Throws Error when the fence's page is lost.
int wait_late(const HostFence &fence, ReceiveSpin &spin_rule, std::uint64_t value,
              std::int64_t timeout_ns, SpinGate &gate, const Shutdown &shutdown,
              const py::object &cancel, std::string &cancelled) {
  py::gil_scoped_release nogil;
  const std::int64_t t0 = fl_htl_now_ns();
  std::int64_t budget = spin_rule.budget_ns(t0);
  if (budget > 0) {
    int got = FL_HTL_TIMED_OUT;
    std::int64_t spin = 0;
    {
      SpinSlot slot(gate);  // given back before the wait sleeps
      if (!slot) {
        ++spin_rule.denied;
        budget = 0;
      } else {
        spin = std::min(budget, timeout_ns);
        got = fence.wait(value, spin, spin);  // spins, never sleeps
      }
    }
    if (budget > 0) {
      if (got != FL_HTL_TIMED_OUT) {
        spin_rule.observe(fl_htl_now_ns() - t0, budget);
        return got;
      }
      if (timeout_ns <= spin) return got;
      timeout_ns = std::max<std::int64_t>(0, timeout_ns - (fl_htl_now_ns() - t0));
    }
  }
  const bool slices = !cancel.is_none();
  int got = fence.wait(value, slices ? std::min(timeout_ns, kCancelSliceNs) : timeout_ns, 0);
  if (slices && timeout_ns > kCancelSliceNs) {
    for (std::int64_t left = timeout_ns - kCancelSliceNs; got == FL_HTL_TIMED_OUT && left > 0;
         left -= kCancelSliceNs) {
      if (shutdown.is_set()) {
        cancelled = "the service is shutting down";  // as Cancel.reason() says it
        return got;
      }
      {
        py::gil_scoped_acquire gil;
        if (cancel.attr("is_set")().cast<bool>()) {
          cancelled = py::hasattr(cancel, "reason") ? cancel.attr("reason")().cast<std::string>()
                                                    : "the wait was cancelled";
          return got;
        }
      }
      got = fence.wait(value, std::min(left, kCancelSliceNs), 0);
    }
  }
  // A timeout says how long nothing came, not how fast it comes: it teaches the rule nothing.
  if (got != FL_HTL_TIMED_OUT) spin_rule.observe(fl_htl_now_ns() - t0, budget);
  return got;
}

// What serve_run did with a RUN: what the connection's loop does next. kHalted: a streaming
// session's frame whose wait its worker ended (pause, stop, shutdown): nothing ran, nothing
// is counted.
enum Served : int { kNotMine = 0, kAnswered = 1, kFailed = 2, kHalted = 3 };

// A run served here: its reply, and what the metrics record once the reply is sent (the
// renderer waits for the reply, not for the bookkeeping). The session's own counters were
// recorded before (SessionRunner::counts), so a renderer that has its reply finds the run
// counted.
struct Answer {
  std::uint32_t request_id = 0;  // the reply's fields: the run page's, or the socket's frame
  FlWireRunReply body{};
  std::shared_ptr<RunSeries> series;
  std::int64_t end = 0, wait_ns = 0, infer_ns = 0, total_ns = 0;
  bool traced = false;  // the trace recorder was on: the reply's send is marked too
  std::uint64_t tag = 0, target = 0;
  void record() const {
    if (series) series->observe(total_ns / 1e9, wait_ns / 1e9, infer_ns / 1e9);
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
// fenceline.ipc.server on OPEN_RUN_PAGE with the slots the client asked for, handed to every
// serve_loop of the connection.
class RunPage {
 public:
  RunPage(int fd, std::uint32_t slots)
      : map_(RunPageMap::adopt(fd)),
        slots_(fl_run_page_slots(slots)),
        last_(fl_load_u32(&map_->page()->first.request_seq)) {}

  // The next RUN in order (the one after the last taken), if it is posted.
  bool take(FlRunPageRun &run) {
    return fl_run_page_take(map_->page(), slots_, &last_, &run) != 0;
  }
  // Answers a RUN in its slot: true when the client sleeps and must be nudged.
  bool answer(const FlRunPageReply &r) { return fl_run_page_answer(map_->page(), slots_, &r) != 0; }
  FlRunPage *page() const { return map_->page(); }
  std::uint32_t slots() const { return slots_; }

 private:
  std::unique_ptr<RunPageMap> map_;
  const std::uint32_t slots_;  // served: a power of two, FL_RUN_PAGE_SLOTS at most
  std::uint32_t last_;         // the last RUN taken
};

#endif

class RunTable {
 public:
  // The service's shutdown flag and the settings a RUN is checked against: the timeout limit,
  // the timeout of a RUN that names none, and the longest spin of a fence wait
  // (Settings.spin_ns).
  RunTable(std::shared_ptr<const Shutdown> shutdown, std::uint32_t max_timeout_ms,
           std::uint32_t default_timeout_ms, std::int64_t spin_ns, int max_inflight)
      : shutdown_(std::move(shutdown)),
        max_timeout_ms_(max_timeout_ms),
        default_timeout_ms_(default_timeout_ms),
        spin_ns_(spin_ns),
        max_inflight_(max_inflight) {}

  void add(const py::bytes &key, std::shared_ptr<SessionRunner> runner) {
    const Key k = to_key(key);
    runner->spin.set_max_spin_ns(spin_ns_);
    std::lock_guard<std::mutex> lock(mu_);
    std::weak_ptr<std::atomic<int>> &shared = owners_[runner->owner];
    runner->inflight = shared.lock();
    if (!runner->inflight) {
      runner->inflight = std::make_shared<std::atomic<int>>(0);
      shared = runner->inflight;
    }
    runners_[k] = std::move(runner);
  }

  // Forgets the session and waits for a run of it in flight; then nothing runs it here again.
  void remove(const py::bytes &key) {
    const Key k = to_key(key);
    std::shared_ptr<SessionRunner> r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = runners_.find(k);
      if (it == runners_.end()) return;
      r = std::move(it->second);
      runners_.erase(it);
      // Counters no session holds any more go (a run in flight holds its own till it ends).
      r->inflight.reset();
      for (auto o = owners_.begin(); o != owners_.end();)
        o = o->second.expired() ? owners_.erase(o) : std::next(o);
    }
    {
      py::gil_scoped_release nogil;  // the run in flight needs the GIL to finish
      std::lock_guard<std::mutex> hold(r->mu);
      r->closed = true;
    }
    // Drop the references back to the session (it holds this runner: no cycle is left).
    r->run = r->binding = r->single_run = r->single_binding = r->session = r->body = py::none();
  }

  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return runners_.size();
  }

  // What the engine did with the runs that entered it: answered (run and replied), failed (a
  // refusal or failure it worded, for the transport to answer), and, of them, those whose
  // input fence it waited for (sent ahead of it).
  py::typing::Dict<py::str, py::int_> counts() const {
    py::dict out;
    out["answered"] = answered_.load(std::memory_order_relaxed);
    out["failed"] = failed_.load(std::memory_order_relaxed);
    out["waited"] = waited_.load(std::memory_order_relaxed);
    return out;
  }

  // The entry for a caller in Python (HTTP interop runs, a streaming session's worker):
  // (signal_value, wait_ns, infer_ns, total_ns) of the run, or its FencelineError raised.
  // `session_id`: the id as the client gave it, or its 16 bytes (a caller that runs the
  // session often parses it once). `timeout_ms` None: the service's default. `stream`: a
  // streaming session's own frame (a GPU driver's), not a client's RUN; a host session's
  // frames enter through run_stream. `series`: the metrics to record it in (None: the
  // session's). `flags`: a RUN frame's.
  py::typing::Tuple<py::int_, py::int_, py::int_, py::int_> run(
      const std::string &owner, const py::object &session_id, const py::int_ &wait_value,
      const py::object &signal_value, const py::object &timeout_ms, SpinGate &gate,
      const py::object &cancel, const py::object &run_options, bool asynchronous, bool stream,
      const py::object &series, std::uint32_t flags) {
    const std::int64_t received = fl_htl_now_ns();
    py::object failure = py::none();
    Answer answer;
    const Waits waits{gate, cancel, run_options};
    Key key;
    try {
      key = PyBytes_Check(session_id.ptr())
                ? to_key(py::reinterpret_borrow<py::bytes>(session_id))
                : id_key(py::str(session_id));
    } catch (const Error &) {
      failed_.fetch_add(1, std::memory_order_relaxed);  // refused as an unknown session
      throw;
    }
    const Request req{owner,
                      key,
                      fence_value(wait_value, true),
                      signal_value.is_none() ? 0 : fence_value(signal_value, false),
                      timeout_value(timeout_ms),
                      flags,
                      asynchronous,
                      stream,
                      series.is_none() ? nullptr : series.cast<std::shared_ptr<RunSeries>>(),
                      nullptr,
                      0};
    if (enter(req, received, waits, failure, answer) != kAnswered) {
      PyErr_SetObject(reinterpret_cast<PyObject *>(Py_TYPE(failure.ptr())), failure.ptr());
      throw py::error_already_set();
    }
    answer.sent();  // handed to the transport
    answer.record();
    return py::make_tuple(answer.target, answer.wait_ns, answer.infer_ns, answer.total_ns);
  }

  // A host streaming session's frames, one after another, each entering as `run`'s stream
  // frame does (the worker's spin rule `spin`, `backlog`, `cancel`), the first waiting for
  // `wait_value` and each next one for the value after the one its predecessor signalled, with
  // no interpreter step between them. Returns (frames, skipped,
  // last_value, failure) once `cancel` ends a wait, a frame fails (`failure`: its
  // FencelineError, naming the frame in details['signal_value'] as `run` does; else None), or
  // `return_after_ns` has passed since the call at the end of a frame, so that the worker's
  // counters follow within that time. `skipped`: the values the policy passed over.
  py::typing::Tuple<py::int_, py::int_, py::int_, py::object> run_stream(
      const std::string &owner, const py::bytes &session_id, std::uint64_t wait_value,
      std::uint64_t backlog, SpinGate &gate, const py::object &cancel, ReceiveSpin &spin,
      std::int64_t return_after_ns) {
    if (backlog == 0) throw Error(Code::InvalidArgument, "a stream frame needs a backlog");
    const Key key = to_key(session_id);
    const py::object run_options = py::none();
    const Waits waits{gate, cancel, run_options};
    const std::int64_t timeout_ms = timeout_value(py::none());
    const std::int64_t until = fl_htl_now_ns() + return_after_ns;
    std::uint64_t frames = 0, skipped = 0, last = 0;
    py::object failure = py::none();
    for (;;) {
      Answer answer;
      const Request req{owner, key, wait_value, 0, timeout_ms, 0, false, true, nullptr, &spin,
                        backlog};
      if (enter(req, fl_htl_now_ns(), waits, failure, answer) != kAnswered) break;
      answer.sent();
      answer.record();
      ++frames;
      skipped += answer.target - wait_value;
      last = answer.target;
      wait_value = answer.target + 1;
      if (answer.end >= until) break;
    }
    return py::make_tuple(frames, skipped, last, failure);
  }

  // One received frame, for a transport that receives in Python (the Windows pipe): (sent,
  // None) when it was served here, its reply handed to `send` (the transport's: whether the
  // peer took it) and then counted, as serve_loop counts after its reply; (None, failure) when
  // its run failed here (the FencelineError to answer); (None, None) when it is no RUN this
  // engine can read (another kind, a malformed one): Python decodes it, untouched.
  // `reply_flags`: as serve_loop's.
  py::typing::Tuple<py::typing::Optional<bool>, py::object> serve_bytes(
      const py::bytes &frame, const std::string &owner, bool reply_flags, SpinGate &gate,
      const py::object &cancel, const py::typing::Callable<bool(py::bytes)> &send,
      const py::object &run_options) {
    py::object failure = py::none();
    Answer answer;
    const Waits waits{gate, cancel, run_options};
    if (serve(owner, reply_flags, frame.cast<std::string>(), fl_htl_now_ns(), waits, failure,
              answer) != kAnswered)
      return py::make_tuple(py::none(), failure);
    const auto reply = answer.frame();
    const bool sent =
        send(py::bytes(reinterpret_cast<const char *>(reply.data()), reply.size())).cast<bool>();
    answer.sent();
    answer.record();  // the counters and metrics come after the reply
    return py::make_tuple(sent, py::none());
  }

#ifndef _WIN32
  // The connection's loop (fenceline.ipc.server): receives frames, waiting as `spin` says
  // with the GIL released, and serves the RUNs it can until a frame needs Python. Returns
  // (data, fds, problem) for that frame, as _native.recv_message does; (None, [], None) once
  // the peer is gone: its end closed, its process (pidfd) exited, or a reply not taken within
  // send_timeout_ms.
  using Got = py::typing::Tuple<py::typing::Optional<py::bytes>, py::typing::List<py::int_>,
                                py::typing::Optional<py::str>>;
  //
  // A RUN the engine refused or whose run failed is answered here too, on the socket: its
  // ERROR frame is `refuse(request_id, failure)` (the connection's: it counts the error and
  // encodes it), sent in its turn.
  //
  // With a run page (`page`, docs/ipc.md "The run page"), the page's RUNs are served too, in
  // their order: a RUN answered here is answered in its slot; a refused or failed one is marked
  // "on the socket" there and its ERROR sent on the socket. A socket frame is served after the
  // page's RUNs posted before it was sent: the client posts on the page only while nothing of
  // its own is in flight on the socket, and may send on the socket while page RUNs are in
  // flight (its ring full, a RUN_ASYNC), so the page is looked at once more when a frame came,
  // and the frame waits while the page has RUNs. Its receive made every store the client did
  // before the send visible here, so no RUN posted before it is missed.
  //
  // `reply_flags` (as serve_bytes's): the connection's client said in HELLO that it reads the
  // RUN reply's flags (docs/ipc.md, "HELLO"); a reply to any other has flags 0. `run_options`:
  // onnxruntime's RunOptions for every model run of the connection (None: none), whose
  // terminate flag abandons the run in flight once the peer is gone (fenceline.ipc.abandon).
  Got serve_loop(int fd, const std::string &owner, SpinGate &gate, ReceiveSpin &spin,
                 const py::typing::Callable<py::bytes(int, py::object)> &refuse, int pidfd,
                 std::int64_t send_timeout_ms, const py::object &page_arg, bool reply_flags,
                 const py::object &run_options, const py::object &cancel) {
    RunPage *page = page_arg.is_none() ? nullptr : page_arg.cast<RunPage *>();
    const Waits waits{gate, cancel, run_options};
    const std::int64_t send_timeout_ns = send_timeout_ms < 0 ? -1 : send_timeout_ms * 1000000;
    const auto gone = [] { return py::make_tuple(py::none(), py::list(), py::none()); };
    // A refusal's ERROR on the socket: false when the peer is gone.
    const auto refused = [&](std::uint32_t request_id, const py::object &failure) {
      const py::bytes frame = refuse(request_id, failure);
      const std::string data = frame;
      return send_reply(fd, reinterpret_cast<const std::uint8_t *>(data.data()), data.size(),
                        pidfd, send_timeout_ns);
    };
    Message held;  // a socket frame that waits for the page's RUNs posted before it
    bool holding = false;
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
      } else if (holding) {
        m = std::move(held);
        holding = false;
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
      if (!on_page && page != nullptr && !m.eof && page->take(posted)) {
        if (!drop_nudge(m)) {
          held = std::move(m);  // sent after that RUN was posted: served after it
          holding = true;
        }
        on_page = true;
      }
      // A frame that was queued already may be one of many that a renderer left before it
      // died (its own end among them, so the socket never hangs up), and a page RUN one of a
      // full ring: the process is looked at before each such frame is served, one poll, and
      // what a dead renderer queued is dropped, not run. The waits above watch the process
      // themselves.
      if (queued && process_exited(pidfd)) {
        for (int f : m.fds) ::close(f);
        if (holding) for (int f : held.fds) ::close(f);
        return gone();
      }
      const std::int64_t received = fl_htl_now_ns();
      spin.observe(received - t0, budget);
      if (on_page) {
        py::object failure = py::none();
        Answer answer;
        if (posted.kind != FL_KIND_RUN && posted.kind != FL_KIND_RUN_ASYNC) {
          char hex[16];
          std::snprintf(hex, sizeof hex, "%04x", posted.kind);
          failure = error("InvalidRequest",
                          std::string("the run page carries RUN and RUN_ASYNC, not kind 0x") + hex);
        } else if (serve(owner, reply_flags, posted.kind, posted.request_id, page_run(posted),
                         received, waits, failure, answer) == kAnswered) {
          // A client asleep on the socket is nudged before the counters and metrics, as a
          // reply on the socket is sent before them.
          const FlRunPageReply r{posted.seq, FL_RUN_PAGE_ANSWERED, answer.request_id,
                                 answer.body};
          const bool sent = !page->answer(r) || send_reply(fd, nudge_frame().data(),
                                                           nudge_frame().size(), pidfd,
                                                           send_timeout_ns);
          answer.sent();
          answer.record();
          if (!sent) return gone();
          continue;
        }
        // Its ERROR comes on the socket; the client, told so by the page (or woken by the
        // frame itself), reads it there.
        page->answer(FlRunPageReply{posted.seq, FL_RUN_PAGE_ON_SOCKET, posted.request_id, {}});
        if (!refused(posted.request_id, failure)) return gone();
        continue;
      }
      if (m.eof) return gone();
      if (drop_nudge(m)) continue;
      if (m.problem.empty() && m.fds.empty()) {
        py::object failure = py::none();
        Answer answer;
        const int served =
            serve(owner, reply_flags, m.data, received, waits, failure, answer);
        if (served == kAnswered) {
          const auto reply = answer.frame();
          const bool sent = send_reply(fd, reply.data(), reply.size(), pidfd, send_timeout_ns);
          answer.sent();
          answer.record();  // the counters and metrics come after the reply
          if (!sent) return gone();
          continue;
        }
        if (served == kFailed) {
          if (!refused(answer.request_id, failure)) return gone();
          continue;
        }
      }
      py::object problem = py::none();
      if (!m.problem.empty()) problem = py::str(m.problem);
      return py::make_tuple(py::bytes(m.data), py::cast(m.fds), problem);
    }
  }
#endif

 private:
  // What a fence wait of a RUN sent ahead of its fence needs (wait_late).
  struct Waits {
    SpinGate &gate;
    const py::object &cancel;
    const py::object &run_options;  // onnxruntime's RunOptions for the model's run (None: none)
  };

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

#endif

  // One received frame: a RUN frame is served as enter says, any other is Python's.
  int serve(const std::string &owner, bool reply_flags, const std::string &data,
            std::int64_t received, const Waits &waits, py::object &failure, Answer &answer) {
    const auto *p = reinterpret_cast<const std::uint8_t *>(data.data());
    FlWireHeader h;
    if (data.size() != FL_WIRE_RUN_FRAME_SIZE || !fl_wire_header_ok(p, data.size(), &h))
      return kNotMine;
    FlWireRun run;
    fl_wire_get_run(p + FL_WIRE_HEADER_SIZE, &run);
    return serve(owner, reply_flags, h.kind, h.request_id, run, received, waits, failure,
                 answer);
  }

  // A received RUN (or RUN_ASYNC: `kind`; any other kind is Python's), through the entry.
  // `received`: when it came (fl_htl_now_ns), for the trace. `reply_flags`: the client reads
  // the reply's flags; for any other they are 0, as the reply's last word was before flags
  // were defined.
  int serve(const std::string &owner, bool reply_flags, std::uint32_t kind,
            std::uint32_t request_id, const FlWireRun &run, std::int64_t received,
            const Waits &waits, py::object &failure, Answer &answer) {
    if (kind != FL_KIND_RUN && kind != FL_KIND_RUN_ASYNC) return kNotMine;
    Key k;
    std::memcpy(k.data(), run.session_id, k.size());
    const Request req{owner, k, run.wait_value, run.signal_value,
                      run.timeout_ms == FL_WIRE_TIMEOUT_DEFAULT
                          ? -1
                          : static_cast<std::int64_t>(run.timeout_ms),
                      run.flags, kind == FL_KIND_RUN_ASYNC, false, nullptr, nullptr, 0};
    const int served = enter(req, received, waits, failure, answer);
    answer.request_id = request_id;
    if (!reply_flags) answer.body.flags = 0;
    return served;
  }

  // What a run asks: whose, of which session, its fence values (signal 0: the wait value),
  // its timeout (-1: the service's default), its flags (none are defined), whether it may
  // reply once its work is queued (a CUDA session's), whether it is a streaming session's own
  // frame, the metrics to record it in (null: the session's) and the spin rule of its fence
  // wait (null: the session's).
  // A host session's stream frame with a `backlog` (1 or more) has no signal value of its
  // own: it waits for wait_value with no timeout until its worker's cancel or the shutdown
  // ends the wait (kHalted), holding no lock meanwhile; then it runs the newest value the
  // input fence reached, unless that is `backlog` or more values past wait_value: it then
  // runs the value `backlog - 1` below it (the values between are the policy's to skip), and
  // sets the output fence's status live before it signals. A failure of that frame (the model
  // failed, the input fence reports an error) names the frame in its details'
  // `signal_value`, for the worker to signal it failed.
  struct Request {
    const std::string &owner;
    Key key;
    std::uint64_t wait_value, signal_value;
    std::int64_t timeout_ms;
    std::uint32_t flags;
    bool asynchronous, stream;
    std::shared_ptr<RunSeries> series;
    ReceiveSpin *spin;
    std::uint64_t backlog;
  };

  // The entry: run, with an unexpected failure answered "internal" (the log says what
  // happened), and counted. kAnswered (`answer` holds the reply to send) or kFailed
  // (`failure` is the FencelineError to answer).
  int enter(const Request &req, std::int64_t received, const Waits &waits, py::object &failure,
            Answer &answer) {
    int served = kFailed;
    try {
      served = run_one(req, received, waits, failure, answer);
    } catch (const Error &e) {
      failure = python_error(e);
    } catch (py::error_already_set &e) {
      failure = fenceline_error(e);
    } catch (const std::exception &e) {
      failure = internal_failure(e.what());
    }
    if (served != kHalted)
      (served == kAnswered ? answered_ : failed_).fetch_add(1, std::memory_order_relaxed);
    return served;
  }

  // The FencelineError a Python call raised, or "internal" for anything else.
  static py::object fenceline_error(py::error_already_set &e) {
    if (e.matches(py::module_::import("fenceline.errors").attr("FencelineError")))
      return e.value();
    return internal_failure(e.what());
  }

  // The owner's runs in flight (SessionRunner::inflight), counted from admission to the end
  // of the run.
  class InFlight {
   public:
    InFlight() = default;
    InFlight(const InFlight &) = delete;
    InFlight &operator=(const InFlight &) = delete;
    // Counts one more run unless `limit` are in flight already (false then).
    bool take(std::shared_ptr<std::atomic<int>> counter, int limit) {
      int n = counter->load(std::memory_order_relaxed);
      do {
        if (n >= limit) return false;
      } while (!counter->compare_exchange_weak(n, n + 1, std::memory_order_relaxed));
      counter_ = std::move(counter);
      return true;
    }
    ~InFlight() {
      if (counter_) counter_->fetch_sub(1, std::memory_order_relaxed);
    }

   private:
    std::shared_ptr<std::atomic<int>> counter_;
  };

  // The session's id as the refusals name it.
  static std::string id_text(const Key &k) {
    static const char digits[] = "0123456789abcdef";
    std::string out = "'";
    for (std::uint8_t b : k) {
      out += digits[b >> 4];
      out += digits[b & 15];
    }
    return out + "'";
  }

  // One run: admission and every refusal, in this order and these words, then the session's
  // run (host: run_host; a Python body: run_body).
  int run_one(const Request &req, std::int64_t received, const Waits &waits,
              py::object &failure, Answer &answer) {
    if (req.flags != 0) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "%x", req.flags);
      failure = error("InvalidRequest", std::string("unknown RUN flags 0x") + hex);
      return kFailed;
    }
    std::shared_ptr<SessionRunner> r;
    InFlight counted;
    enum { kAdmitted, kNoSession, kStreams, kQuota } admitted = kAdmitted;
    {
      // No Python is called with mu_ held: a collection could close a session, whose
      // remove() takes mu_.
      std::lock_guard<std::mutex> lock(mu_);
      auto it = runners_.find(req.key);
      if (it == runners_.end() || it->second->owner != req.owner) {
        admitted = kNoSession;
      } else if (!req.stream && it->second->streaming) {
        admitted = kStreams;
      } else if (!req.stream && !counted.take(it->second->inflight, max_inflight_)) {
        admitted = kQuota;
      }
      if (admitted == kAdmitted) r = it->second;
    }
    switch (admitted) {
      case kNoSession:
        failure = error("NotFound", "no session with id " + id_text(req.key));
        return kFailed;
      case kStreams:
        failure = error("Conflict",
                        "this session streams: it runs by itself when its input fence "
                        "advances; RUN is for sessions created with mode 'request'");
        return kFailed;
      case kQuota:
        failure = error("ResourceExhausted", "at most " + std::to_string(max_inflight_) +
                                                 " runs in flight per client");
        return kFailed;
      case kAdmitted:
        break;
    }
    // A streaming session's own frames are no client's RUNs: its worker stops at shutdown.
    if (!req.stream && shutdown_->is_set()) {
      failure = error("Unavailable", "the service is shutting down");
      return kFailed;
    }
    if (req.timeout_ms > static_cast<std::int64_t>(max_timeout_ms_) || req.timeout_ms < -1) {
      failure = error("InvalidArgument",
                      "timeout_ms must be within 0.." + std::to_string(max_timeout_ms_));
      return kFailed;
    }
    const std::int64_t ms = req.timeout_ms < 0 ? default_timeout_ms_ : req.timeout_ms;
    const std::int64_t timeout_ns = ms * 1000000;
    const std::shared_ptr<RunSeries> &series = req.series ? req.series : r->series;
    if (r->in_python)
      return run_body(*r, req, timeout_ns, waits, series, answer);
    return run_host(r, req, timeout_ns, received, waits, series, failure, answer);
  }

  // A session whose run stays in Python: its body runs it and counts it.
  static int run_body(const SessionRunner &r, const Request &req, std::int64_t timeout_ns,
                      const Waits &waits, const std::shared_ptr<RunSeries> &series,
                      Answer &answer) {
    const py::object body = r.body;  // held through the call: remove() lets go of r.body
    if (body.is_none()) throw Error(Code::Conflict, "the session is closed");  // removed
    py::object signal = py::none();
    if (req.signal_value != 0) signal = py::int_(req.signal_value);
    const py::tuple got =
        body(req.wait_value, signal, timeout_ns, waits.cancel, req.asynchronous);
    answer.target = got[0].cast<std::uint64_t>();
    answer.wait_ns = got[1].cast<std::int64_t>();
    answer.infer_ns = got[2].cast<std::int64_t>();
    answer.total_ns = got[3].cast<std::int64_t>();
    answer.end = fl_htl_now_ns();
    answer.series = series;
    answer.body = FlWireRunReply{answer.target, fl_wire_micros(answer.wait_ns),
                                 fl_wire_micros(answer.infer_ns),
                                 fl_wire_micros(answer.total_ns), 0u};
    return kAnswered;
  }

  // A host session's run: the signal value, the input fence (waited for here when the RUN
  // came ahead of it), the model, the signal.
  int run_host(const std::shared_ptr<SessionRunner> &rp, const Request &req,
               std::int64_t timeout_ns, std::int64_t received, const Waits &waits,
               const std::shared_ptr<RunSeries> &series, py::object &failure, Answer &answer) {
    SessionRunner &r = *rp;
    const std::uint64_t wait_value = req.wait_value;
    std::uint64_t target = req.signal_value ? req.signal_value : wait_value;
    const bool frame = req.stream && req.backlog > 0;  // a streaming worker's frame (Request)
    int reached = FL_HTL_TIMED_OUT;
    if (frame) {
      // Its worker sends its frames one at a time, so its wait holds no lock: closing the
      // session, or binding its one-thread session, never waits for an input that may not come.
      if (req.spin == nullptr) throw Error(Code::InvalidArgument, "a stream frame needs a spin");
      reached = r.wait->wait(wait_value, 0, 0);
      if (reached == FL_HTL_TIMED_OUT) {
        std::string cancelled;
        reached = wait_late(*r.wait, *req.spin, wait_value, kNoTimeoutNs, waits.gate, *shutdown_,
                            waits.cancel, cancelled);
        if (!cancelled.empty()) return kHalted;
        waited_.fetch_add(1, std::memory_order_relaxed);
      }
      const std::uint64_t at = r.wait->value();
      if (at > wait_value && at - wait_value >= req.backlog) target = at - (req.backlog - 1);
    }
    std::unique_lock<std::mutex> hold(r.mu, std::try_to_lock);
    if (!hold.owns_lock()) {
      py::gil_scoped_release nogil;  // the run in flight may need the GIL to finish
      hold.lock();
    }
    if (r.closed) {
      failure = error("Conflict", "the session is closed");
      return kFailed;
    }
    // A frame's time starts once its input came: the wait before it is the renderer's pace.
    const std::int64_t start = fl_htl_now_ns();
    const std::uint64_t current = r.signal->value();  // a lost page throws DeviceLost
    if (target <= current) {
      failure = error("Conflict", "signal_value " + std::to_string(target) +
                                      " is not above the output fence's value " +
                                      std::to_string(current));
      return kFailed;
    }
    if (frame) {
      if (reached != FL_HTL_REACHED) {
        failure = wait_failure(r, reached, wait_value, kNoTimeoutNs, target);
        if (reached == FL_HTL_ERRORED) name_frame(failure, target);
        return kFailed;
      }
    } else if ((reached = r.wait->wait(wait_value, 0, 0)) != FL_HTL_REACHED) {
      // Sent ahead of its input fence: waited for here.
      waited_.fetch_add(1, std::memory_order_relaxed);
      std::string cancelled;
      reached = wait_late(*r.wait, r.spin, wait_value, timeout_ns, waits.gate, *shutdown_,
                          waits.cancel, cancelled);
      if (!cancelled.empty()) {
        failure = error("Unavailable", cancelled);
        return kFailed;
      }
      if (reached != FL_HTL_REACHED) {
        failure = wait_failure(r, reached, wait_value, timeout_ns, target);
        return kFailed;
      }
    }
    const std::int64_t waited = fl_htl_now_ns();
    const bool traced = trace::on();
    std::uint64_t tag = 0;
    if (traced) {
      std::memcpy(&tag, req.key.data(), sizeof tag);
      trace::mark(trace::kReceived, tag, target, received);
      trace::mark(trace::kInputReached, tag, target, waited);
    }
    for (const auto &m : r.unsealed) m->mapping()->check_size();  // DeviceLost
    if (traced) trace::mark(trace::kModelStart, tag, target, fl_htl_now_ns());
    PyObject *ok;
    bool single;
    {
      // Counted as the session's: one identity, so its large frames keep their turn.
      const CpuRun counted(r.session.ptr(), r.frame_bytes, r.single_from);
      single = counted.single;
      const py::object &run_model = single ? r.single_run : r.run;
      const py::object &binding = single ? r.single_binding : r.binding;
      ok = PyObject_CallFunctionObjArgs(run_model.ptr(), binding.ptr(), waits.run_options.ptr(),
                                        nullptr);
    }
    if (ok == nullptr) {
      py::error_already_set e;
      // The message's one home is the Python session's (runtime/session.py).
      failure = r.session.attr("model_failed")(e.value());
      if (frame) name_frame(failure, target);
      return kFailed;
    }
    Py_DECREF(ok);
    const std::int64_t inferred = fl_htl_now_ns();
    for (const auto &m : r.unsealed)
      if (m->mapping()->lost()) {
        failure = r.session.attr("memory_shrank")();
        return kFailed;
      }
    // A frame after failed ones: live again before the value, so its waiters see live.
    if (frame && r.signal->status() != FL_HTL_STATUS_LIVE)
      r.signal->set_status(FL_HTL_STATUS_LIVE);
    r.signal->signal(target);
    const std::int64_t end = fl_htl_now_ns();
    if (r.counts)
      r.counts->record({end, target, waited - start, inferred - waited, end - start}, single);
    hold.unlock();
    if (traced) {
      trace::mark(trace::kModelEnd, tag, target, inferred);
      trace::mark(trace::kSignalled, tag, target, end);
    }

    answer.body = FlWireRunReply{target, fl_wire_micros(waited - start),
                                 fl_wire_micros(inferred - waited), fl_wire_micros(end - start),
                                 cpus_shared() ? FL_WIRE_REPLY_CPUS_SHARED : 0u};
    answer.series = series;
    answer.end = end;
    answer.wait_ns = waited - start;
    answer.infer_ns = inferred - waited;
    answer.total_ns = end - start;
    answer.traced = traced;
    answer.tag = tag;
    answer.target = target;
    return kAnswered;
  }

  // The failure of a run whose input-fence wait for `wait_value` ended with `reached` (an
  // FL_HTL_* other than reached): a timeout ran and signalled nothing, and says so (`queued`
  // false), as docs/ipc.md "When a run times out" says.
  static py::object wait_failure(const SessionRunner &r, int reached, std::uint64_t wait_value,
                                 std::int64_t timeout_ns, std::uint64_t target) {
    if (reached == FL_HTL_ABANDONED)
      return error("DeviceLost", "the input fence was abandoned by its signaller");
    const std::string at = std::to_string(r.wait->value());  // a lost page throws DeviceLost
    if (reached != FL_HTL_TIMED_OUT)
      return error("DeviceLost", "the input fence reports an error at value " + at);
    char ms[32];
    std::snprintf(ms, sizeof ms, "%g", static_cast<double>(timeout_ns) / 1e6);
    py::dict details;
    details["queued"] = false;
    details["wait_value"] = wait_value;
    details["signal_value"] = target;
    return py::module_::import("fenceline.errors")
        .attr("TimedOut")("fence did not reach " + std::to_string(wait_value) + " within " +
                              ms + " ms (it is at " + at +
                              "); nothing ran and nothing was signalled (not queued): send the "
                              "run again once the input is ready",
                          details);
  }

  // A stream frame's failure names the frame it failed (Request), for its worker to signal.
  static void name_frame(const py::object &failure, std::uint64_t target) {
    failure.attr("details")[py::str("signal_value")] = target;
  }

  // A session id given as text: its 16 bytes, or a key no session has (then the refusal
  // names it as given).
  Key id_key(const py::str &id) {
    const std::string text = id;
    Key k{};
    bool ok = text.size() == 2 * k.size();
    for (std::size_t i = 0; ok && i < text.size(); ++i) {
      const char c = text[i];
      const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (v < 0) ok = false;
      else k[i / 2] = static_cast<std::uint8_t>(k[i / 2] << 4 | v);
    }
    if (!ok) throw Error(Code::NotFound, "no session with id " + py::repr(id).cast<std::string>());
    return k;
  }

  // A fence value given by a Python caller: an unsigned 64-bit integer (a signal value above 0).
  static std::uint64_t fence_value(const py::handle &v, bool zero_ok) {
    const unsigned long long n = PyLong_AsUnsignedLongLong(v.ptr());
    if ((n == static_cast<unsigned long long>(-1) && PyErr_Occurred()) || (n == 0 && !zero_ok)) {
      PyErr_Clear();
      throw Error(Code::InvalidArgument, "fence values are unsigned 64-bit integers");
    }
    return n;
  }

  // A timeout given by a Python caller (None: the default, -1); out of range stays out of range.
  std::int64_t timeout_value(const py::object &ms) const {
    if (ms.is_none()) return -1;
    const long long n = PyLong_AsLongLong(ms.ptr());
    if (n == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return static_cast<std::int64_t>(max_timeout_ms_) + 1;
    }
    return n < 0 ? -2 : n;
  }

  // A fenceline.errors class's instance: a refusal, worded here once.
  static py::object error(const char *cls, const std::string &message) {
    return py::module_::import("fenceline.errors").attr(cls)(message);
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

  const std::shared_ptr<const Shutdown> shutdown_;
  const std::uint32_t max_timeout_ms_, default_timeout_ms_;
  const std::int64_t spin_ns_;
  const int max_inflight_;  // a client's runs in flight at once, over all its sessions
  // Each owner's counter of runs in flight (SessionRunner::inflight), while it has a session
  // here; guarded by mu_.
  std::map<std::string, std::weak_ptr<std::atomic<int>>> owners_;
  std::atomic<std::uint64_t> answered_{0}, failed_{0}, waited_{0};
  mutable std::mutex mu_;
  std::map<Key, std::shared_ptr<SessionRunner>> runners_;
};

}  // namespace

void bind_host_runs(py::module_ &mod) {
  py::class_<SessionRunner, std::shared_ptr<SessionRunner>>(
      mod, "SessionRunner",
      "What the run engine holds of one session: a host session's model, binding and fences, "
      "or the Python body of a session whose run stays in Python.")
      .def(py::init<std::string, py::object, py::object, py::object,
                    std::shared_ptr<HostFence>, std::shared_ptr<HostFence>,
                    std::vector<std::shared_ptr<HostMemory>>, std::shared_ptr<RunSeries>, bool>(),
           py::arg("owner"), py::arg("run"), py::arg("binding"), py::arg("session"),
           py::arg("wait_fence"), py::arg("signal_fence"),
           py::arg("unsealed"), py::arg("series"), py::arg("streaming") = false)
      .def_static("python", &SessionRunner::python, py::arg("owner"), py::arg("body"),
                  py::arg("series"), py::arg("streaming") = false,
                  "A session run by body(wait_value, signal_value or None, timeout_ns, cancel, "
                  "asynchronous) -> (signal_value, wait_ns, infer_ns, total_ns), which counts "
                  "the run itself; admitted by the engine first.")
      .def("set_single", &SessionRunner::set_single, py::arg("run"), py::arg("binding"),
           py::arg("single_from"), py::arg("frame_bytes"),
           "The model's one-thread session and its binding, taken by a run that starts while "
           "the runs on the CPU in flight, itself included, are single_from or more, unless "
           "its frame (frame_bytes) is large: it then takes the large frames' turn; after a "
           "run in flight.");
#ifndef _WIN32
  py::class_<RunPage>(mod, "RunPage",
                      "A connection's run page (docs/ipc.md): the client's sealed memfd, mapped.")
      .def(py::init<int, std::uint32_t>(), py::arg("fd"), py::arg("slots") = 1,
           "The page of fd, serving `slots` RUNs in flight as asked (fl_run_page_slots: a "
           "power of two, RUN_PAGE_SLOTS at most).")
      .def_property_readonly("slots", &RunPage::slots, "The RUNs in flight it serves.");
  mod.attr("RUN_PAGE_SIZE") = FL_RUN_PAGE_SIZE;
  mod.attr("RUN_PAGE_SLOTS") = FL_RUN_PAGE_SLOTS;
#endif
  py::class_<Shutdown, std::shared_ptr<Shutdown>>(
      mod, "Shutdown",
      "The service's one shutdown flag (Runtime.closing): set once, read by every transport "
      "and by the run engine without the GIL.")
      .def(py::init<>())
      .def("set", &Shutdown::set, "From now on every RUN is answered unavailable.")
      .def("is_set", &Shutdown::is_set);
  py::class_<RunTable, std::shared_ptr<RunTable>>(mod, "RunTable")
      .def(py::init<std::shared_ptr<const Shutdown>, std::uint32_t, std::uint32_t,
                    std::int64_t, int>(),
           py::arg("shutdown"), py::arg("max_timeout_ms"), py::arg("default_timeout_ms"),
           py::arg("spin_ns"), py::arg("max_inflight"))
      .def("run", &RunTable::run, py::arg("owner"), py::arg("session_id"),
           py::arg("wait_value"), py::arg("signal_value"), py::arg("timeout_ms"),
           py::arg("gate"), py::arg("cancel") = py::none(), py::arg("run_options") = py::none(),
           py::arg("asynchronous") = false, py::arg("stream") = false,
           py::arg("series") = py::none(), py::arg("flags") = 0,
           "The entry of a run: admission and every refusal, the input fence's wait (spinning "
           "as gate allows, ended early by cancel between slices), the model, the signal, the "
           "counters, metrics (series; None: the session's) and trace marks. Returns "
           "(signal_value, wait_ns, infer_ns, total_ns) or raises the FencelineError. "
           "session_id: the id as text, or its 16 bytes. timeout_ms None: the service's "
           "default. stream: a streaming session's own frame (a GPU driver's; a host session's "
           "frames enter through run_stream). flags: a RUN frame's (none are defined).")
      .def("run_stream", &RunTable::run_stream, py::arg("owner"), py::arg("session_id"),
           py::arg("wait_value"), py::arg("backlog"), py::arg("gate"), py::arg("cancel"),
           py::arg("spin"), py::arg("return_after_ns"),
           "A host streaming session's frames, one after another, each as run's stream frame "
           "(spin, backlog, cancel), the first waiting for wait_value and each next one for "
           "the value after the one before signalled. Returns (frames, skipped, last_value, "
           "failure) once cancel ends a wait, a frame fails (failure: its FencelineError, "
           "naming the frame in details['signal_value']; else None), or return_after_ns has "
           "passed since the call at the end of a frame. session_id: its 16 bytes.")
      .def("add", &RunTable::add, py::arg("key"), py::arg("runner"))
      .def("remove", &RunTable::remove, py::arg("key"),
           "Forgets a session, after its run in flight (the GIL is released while it waits).")
      .def("__len__", &RunTable::size)
      .def("counts", &RunTable::counts,
           "Runs answered, runs failed (the failure handed to the transport or raised), and of "
           "them those whose input fence was waited for.")
      .def("serve_bytes", &RunTable::serve_bytes, py::arg("frame"), py::arg("owner"),
           py::arg("reply_flags"), py::arg("gate"), py::arg("cancel"), py::arg("send"),
           py::arg("run_options") = py::none(),
           "Serves one received frame: (sent, None) when served here, its reply handed to "
           "send(reply) -> bool and then counted; (None, failure) when its run failed here; "
           "(None, None) when it is no RUN the engine can read (Python decodes it). "
           "reply_flags: the client reads the RUN reply's flags (else they are 0). A RUN sent "
           "ahead of its input fence waits here, spinning as gate allows, ended early by "
           "cancel (a fenceline.waiting.Cancel) between slices. "
           "run_options: onnxruntime's RunOptions for the model's run (None: none).")
#ifndef _WIN32
      .def("serve_loop", &RunTable::serve_loop, py::arg("fd"), py::arg("owner"), py::arg("gate"),
           py::arg("spin"), py::arg("refuse"), py::arg("pidfd") = -1,
           py::arg("send_timeout_ms") = -1, py::arg("page") = py::none(),
           py::arg("reply_flags") = false, py::arg("run_options") = py::none(),
           py::arg("cancel") = py::none(),
           "Receives and serves frames until one needs Python (no RUN it can read): (data, fds, "
           "problem) for it; (None, [], None) once the peer is gone: its end closed, the "
           "process behind pidfd (-1: none) exited, or a reply not taken within "
           "send_timeout_ms (-1: no limit). A RUN refused or failed here is answered here, on "
           "the socket, with refuse(request_id, failure) -> the ERROR frame. A frame "
           "queued already is served only while that process lives. Raises when the socket "
           "itself fails. With a run page, its RUNs are served too, in order, each answered in "
           "its slot (a refusal's ERROR on the socket). reply_flags: the client "
           "reads the RUN reply's flags (else they are 0). run_options: onnxruntime's "
           "RunOptions for every model run (None: none). A RUN sent ahead of its input fence "
           "waits here, ended early by cancel as serve_bytes says.")
#endif
      ;
}

}  // namespace fl
