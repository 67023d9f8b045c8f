// The service's model runs on the CPU, counted across every host session and both run paths,
// and the turns that large frames take once those runs fill the CPUs (runtime/ort_options.py,
// "Large frames take turns").
#pragma once

#include <cstdint>

namespace fl {

// Bytes of the last-level cache that the first CPU shares with others (Linux: sysfs); 0 where
// unknown, and then no frame counts as large.
std::int64_t last_level_cache_bytes();

// A model run on the CPU, counted in for as long as it lives. A run whose frame is large (its
// session's bound inputs and outputs, `frame_bytes`, at least a quarter of the last-level
// cache) and that finds the runs in flight at `full` or more (the usable CPUs; 0: never) waits
// for the large frames' turn first: one such run at a time, on every core (its pool), and the
// turn kept for the same session's next frame, which finds its frame still in the cache.
// Waiting lets the GIL go where the caller holds it.
class CpuRun {
 public:
  CpuRun(const void *who, std::int64_t frame_bytes, int full);
  ~CpuRun();
  CpuRun(const CpuRun &) = delete;
  CpuRun &operator=(const CpuRun &) = delete;

  bool turn = false;   // this run holds the large frames' turn (it runs on the model's pool)
  bool single = false; // no turn, and the runs in flight are `full` or more: the run takes the
                       // model's one-thread session (runtime/ort_options.py)

 private:
  const void *who_;
};

// Whether the service's runs on the CPU share its cores with other renderers' runs: set by the
// service while its onnxruntime pools run at idle priority (runtime/ort_options.py,
// pool_yields), and said in every RUN reply to a client that asked for the reply's flags in
// HELLO (FL_WIRE_REPLY_CPUS_SHARED).
bool cpus_shared();

// Once a run that held the turn has ended: until when (fl_htl_now_ns) the turn is kept for
// its session's next frame, for the thread that ran it (0: not kept). Read once: it clears.
std::int64_t take_turn_kept_until();

}  // namespace fl
