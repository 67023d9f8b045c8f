#include "run_metrics.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <tuple>

namespace py = pybind11;

namespace fl {

void RunSeries::observe(double run_s, double wait_s, double infer_s) {
  runs_.fetch_add(1, std::memory_order_relaxed);
  const auto &b = *bounds_;
  const double values[3] = {run_s, wait_s, infer_s};
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  std::lock_guard<std::mutex> lock(model_->mu);
  for (int h = 0; h < 3; ++h) {
    // Prometheus buckets: the first upper bound the value does not exceed, else +Inf.
    std::size_t i = 0;
    while (i < b.size() && values[h] > b[i]) ++i;
    ++model_->counts[h][i];
    model_->sums[h] += values[h];
  }
  model_->last_run_ms = static_cast<std::int64_t>(now_ms);
}

RunMetrics::RunMetrics(std::vector<double> bounds)
    : bounds_(std::make_shared<const std::vector<double>>(std::move(bounds))) {}

std::shared_ptr<RunSeries> RunMetrics::series(const std::string &model,
                                              const std::string &transport) {
  std::lock_guard<std::mutex> lock(mu_);
  auto &s = series_[{model, transport}];
  if (!s) {
    auto &m = models_[model];
    if (!m) {
      m = std::make_shared<ModelRuns>();
      for (auto &c : m->counts) c.assign(bounds_->size() + 1, 0);
    }
    s = std::make_shared<RunSeries>(m, bounds_);
  }
  return s;
}

std::vector<RunMetrics::Counted> RunMetrics::runs() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Counted> out;
  for (const auto &[key, s] : series_)
    if (s->runs() > 0) out.push_back({key.first, key.second, s->runs()});
  return out;
}

std::vector<RunMetrics::Histogram> RunMetrics::histograms(int which) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Histogram> out;
  for (const auto &[model, m] : models_) {
    std::lock_guard<std::mutex> hold(m->mu);
    std::uint64_t n = 0;
    for (auto c : m->counts[which]) n += c;
    if (n > 0) out.push_back({model, m->counts[which], m->sums[which]});
  }
  return out;
}

std::map<std::string, std::int64_t> RunMetrics::last_run_ms() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::int64_t> out;
  for (const auto &[model, m] : models_) {
    std::lock_guard<std::mutex> hold(m->mu);
    if (m->last_run_ms) out[model] = m->last_run_ms;
  }
  return out;
}

void SessionCounts::keep(const Run &r) {
  ring_[kept_ % kRecent] = r;
  ++kept_;
}

void SessionCounts::record(const Run &r, bool single_thread) {
  std::lock_guard<std::mutex> hold(mu_);
  ++runs_;
  if (single_thread) ++single_;
  last_ = r.signal_value;
  keep(r);
}

void SessionCounts::ran(std::uint64_t signal_value) {
  std::lock_guard<std::mutex> hold(mu_);
  ++runs_;
  last_ = signal_value;
}

void SessionCounts::note(const Run &r) {
  std::lock_guard<std::mutex> hold(mu_);
  keep(r);
}

void SessionCounts::signalled(std::uint64_t value) {
  std::lock_guard<std::mutex> hold(mu_);
  last_ = value;
}

std::uint64_t SessionCounts::runs() const {
  std::lock_guard<std::mutex> hold(mu_);
  return runs_;
}

std::uint64_t SessionCounts::single_thread_runs() const {
  std::lock_guard<std::mutex> hold(mu_);
  return single_;
}

std::uint64_t SessionCounts::last_signal_value() const {
  std::lock_guard<std::mutex> hold(mu_);
  return last_;
}

std::vector<SessionCounts::Run> SessionCounts::recent() const {
  std::lock_guard<std::mutex> hold(mu_);
  const std::size_t n = std::min(kept_, kRecent);
  std::vector<Run> out;
  out.reserve(n);
  for (std::size_t i = kept_ - n; i < kept_; ++i) out.push_back(ring_[i % kRecent]);
  return out;
}

void bind_run_metrics(py::module_ &mod) {
  using Run = SessionCounts::Run;
  auto run_of = [](std::int64_t end_ns, std::uint64_t signal_value, std::int64_t wait_ns,
                   std::int64_t infer_ns, std::int64_t total_ns) {
    return Run{end_ns, signal_value, wait_ns, infer_ns, total_ns};
  };
  py::class_<SessionCounts, std::shared_ptr<SessionCounts>>(mod, "SessionCounts")
      .def(py::init<>())
      .def(
          "record",
          [run_of](SessionCounts &c, std::int64_t end_ns, std::uint64_t signal_value,
                   std::int64_t wait_ns, std::int64_t infer_ns, std::int64_t total_ns,
                   bool single_thread) {
            c.record(run_of(end_ns, signal_value, wait_ns, infer_ns, total_ns), single_thread);
          },
          py::arg("end_ns"), py::arg("signal_value"), py::arg("wait_ns"), py::arg("infer_ns"),
          py::arg("total_ns"), py::arg("single_thread") = false,
          "A run that ended at end_ns (time.perf_counter_ns) having signalled signal_value: "
          "counted, and kept among the recent runs.")
      .def("ran", &SessionCounts::ran, py::arg("signal_value"),
           "A run counted once enqueued; its times are kept later by note.")
      .def(
          "note",
          [run_of](SessionCounts &c, std::int64_t end_ns, std::uint64_t signal_value,
                   std::int64_t wait_ns, std::int64_t infer_ns, std::int64_t total_ns) {
            c.note(run_of(end_ns, signal_value, wait_ns, infer_ns, total_ns));
          },
          py::arg("end_ns"), py::arg("signal_value"), py::arg("wait_ns"), py::arg("infer_ns"),
          py::arg("total_ns"), "Kept among the recent runs, not counted again.")
      .def("signalled", &SessionCounts::signalled, py::arg("value"),
           "A value signalled without a run (a failed frame's).")
      .def_property_readonly("runs", &SessionCounts::runs)
      .def_property_readonly("single_thread_runs", &SessionCounts::single_thread_runs)
      .def_property_readonly("last_signal_value", &SessionCounts::last_signal_value)
      .def(
          "recent",
          [](const SessionCounts &c) {
            std::vector<std::tuple<std::int64_t, std::uint64_t, std::int64_t, std::int64_t,
                                   std::int64_t>>
                out;
            for (const auto &r : c.recent())
              out.emplace_back(r.end_ns, r.signal_value, r.wait_ns, r.infer_ns, r.total_ns);
            return out;
          },
          "The last runs kept, oldest first, at most 128: (end_ns, signal_value, wait_ns, "
          "infer_ns, total_ns).")
      .def_property_readonly_static(
          "capacity", [](const py::object &) { return SessionCounts::kRecent; },
          "How many recent runs are kept.");

  py::class_<RunSeries, std::shared_ptr<RunSeries>>(mod, "RunSeries")
      .def("observe", &RunSeries::observe, py::arg("run_s"), py::arg("wait_s"),
           py::arg("infer_s"), "Records one run: the counter and the three histograms.")
      .def("count", &RunSeries::count, py::arg("n"),
           "Counts n runs whose times were not measured: the counter only.")
      .def_property_readonly("runs", &RunSeries::runs);
  py::class_<RunMetrics, std::shared_ptr<RunMetrics>>(mod, "RunMetrics")
      .def(py::init<std::vector<double>>(), py::arg("bounds"))
      .def("series", &RunMetrics::series, py::arg("model"), py::arg("transport"),
           "The recorder of one (model, transport), made on first use.")
      .def_property_readonly("bounds", &RunMetrics::bounds)
      .def(
          "runs",
          [](const RunMetrics &m) {
            std::vector<std::tuple<std::string, std::string, std::uint64_t>> out;
            for (auto &c : m.runs()) out.emplace_back(c.model, c.transport, c.runs);
            return out;
          },
          "(model, transport, runs) of every series that has run.")
      .def(
          "histograms",
          [](const RunMetrics &m, int which) {
            if (which < 0 || which > 2) throw py::value_error("which is 0 (run), 1 (wait), 2 (infer)");
            std::vector<std::tuple<std::string, std::vector<std::uint64_t>, double>> out;
            for (auto &h : m.histograms(which)) out.emplace_back(h.model, h.counts, h.sum);
            return out;
          },
          py::arg("which"),
          "(model, counts per bucket with +Inf last, not cumulative, sum) of one histogram "
          "(0 run, 1 wait, 2 infer) of every model that has run.")
      .def("last_run_ms", &RunMetrics::last_run_ms,
           "The wall-clock time of each model's last run, in ms since the epoch.");
}

}  // namespace fl
