#include "run_metrics.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>

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

void bind_run_metrics(py::module_ &mod) {
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
