// The run metrics of the service (runs per model and transport; run, wait and infer time
// histograms per model), kept here so that the native run path (host_runs.cpp) records a run
// without the interpreter and the Python transports record theirs with one call.
// fenceline.metrics exposes them to Prometheus at scrape time.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace fl {

// One model's histograms: counts per bucket (not cumulative; the last is +Inf) and sums.
struct ModelRuns {
  static constexpr int kRun = 0, kWait = 1, kInfer = 2;
  std::mutex mu;
  std::array<std::vector<std::uint64_t>, 3> counts;
  std::array<double, 3> sums{};
  std::int64_t last_run_ms = 0;  // wall clock, for Triton's statistics extension
};

// Where one (model, transport) records: its run counter and its model's histograms.
class RunSeries {
 public:
  RunSeries(std::shared_ptr<ModelRuns> model, std::shared_ptr<const std::vector<double>> bounds)
      : model_(std::move(model)), bounds_(std::move(bounds)) {}
  void observe(double run_s, double wait_s, double infer_s);
  // Runs whose times nobody measured (a GPU streaming session's frames): the counter only.
  void count(std::uint64_t n) { runs_.fetch_add(n, std::memory_order_relaxed); }
  std::uint64_t runs() const { return runs_.load(std::memory_order_relaxed); }

 private:
  std::shared_ptr<ModelRuns> model_;
  std::shared_ptr<const std::vector<double>> bounds_;
  std::atomic<std::uint64_t> runs_{0};
};

class RunMetrics {
 public:
  // `bounds`: the buckets' upper bounds in seconds, ascending (+Inf is implied).
  explicit RunMetrics(std::vector<double> bounds);
  // The series of (model, transport), made on first use.
  std::shared_ptr<RunSeries> series(const std::string &model, const std::string &transport);
  const std::vector<double> &bounds() const { return *bounds_; }

  struct Counted {
    std::string model, transport;
    std::uint64_t runs;
  };
  struct Histogram {
    std::string model;
    std::vector<std::uint64_t> counts;
    double sum;
  };
  // The series that have run at least once, and the histogram `which` (ModelRuns::kRun..) of
  // every model that has.
  std::vector<Counted> runs() const;
  std::vector<Histogram> histograms(int which) const;
  std::map<std::string, std::int64_t> last_run_ms() const;

 private:
  std::shared_ptr<const std::vector<double>> bounds_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<RunSeries>> series_;
  std::map<std::string, std::shared_ptr<ModelRuns>> models_;
};

}  // namespace fl
