// The run metrics of the service (runs per model and transport; run, wait and infer time
// histograms per model), kept here so that the native run path (host_runs.cpp) records a run
// without the interpreter and the Python transports record theirs with one call.
// fenceline.metrics exposes them to Prometheus at scrape time. And each session's own counters
// (SessionCounts), which the status page reads.
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

// One session's counters, every kind's (runtime/session.py's SessionBase holds one): its runs
// (of them, on the model's one-thread session), the last value it signalled, and its last
// kRecent runs for the status page. The engine records a host session's run here without the
// interpreter, before the reply goes out, so a renderer that has its reply finds the run
// counted; a Python body (a CUDA session's) records its own with one call.
class SessionCounts {
 public:
  static constexpr std::size_t kRecent = 128;
  struct Run {  // end: CLOCK_MONOTONIC ns (Python's time.perf_counter_ns on Linux)
    std::int64_t end_ns = 0;
    std::uint64_t signal_value = 0;
    std::int64_t wait_ns = 0, infer_ns = 0, total_ns = 0;
  };
  // A run that ran and signalled: counted, and kept among the recent ones.
  void record(const Run &r, bool single_thread);
  // A run counted once enqueued, its times kept later by note (a CUDA session's).
  void ran(std::uint64_t signal_value);
  // Kept among the recent ones, not counted again.
  void note(const Run &r);
  // A value signalled without a run (a failed frame's).
  void signalled(std::uint64_t value);

  std::uint64_t runs() const;
  std::uint64_t single_thread_runs() const;
  std::uint64_t last_signal_value() const;
  std::vector<Run> recent() const;  // oldest first

 private:
  void keep(const Run &r);  // with mu_ held
  mutable std::mutex mu_;
  std::uint64_t runs_ = 0, single_ = 0, last_ = 0;
  std::array<Run, kRecent> ring_{};
  std::size_t kept_ = 0;  // runs kept so far: the newest is ring_[(kept_ - 1) % kRecent]
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
