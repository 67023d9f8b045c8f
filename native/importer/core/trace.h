// The per-frame trace recorder (docs/tracing.md): the moments of each frame (received, input
// fence reached, model start and end, output signalled, reply sent; on CUDA sessions the enqueue
// and the GPU's completion), kept in memory while a trace records and handed to
// fenceline.trace, which writes Chrome trace-event JSON.
//
// Off by default. Off, a moment costs one relaxed atomic load (trace::on()); callers read the
// clock for a moment only when it is on, unless they read it anyway.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace fl::trace {

// Append only: fenceline.trace.MOMENTS names them in this order.
enum Moment : std::uint8_t {
  kReceived = 0,    // the RUN frame is in the service's hands
  kInputReached,    // the input fence was seen at the wait value (the renderer's signal)
  kModelStart,      // onnxruntime's run called (on CUDA: its kernels being enqueued)
  kModelEnd,        // onnxruntime's run returned
  kSignalled,       // the output fence signalled (on CUDA: the signal enqueued)
  kReplySent,       // the reply handed to the socket
  kEnqueued,        // CUDA: wait, model and signal all enqueued on the session's stream
  kGpuDone,         // CUDA: the stream passed the signal (a host function after it ran)
  kMomentCount
};

struct Event {
  std::int64_t t_ns;         // CLOCK_MONOTONIC, Python's perf_counter_ns on Linux
  std::uint64_t session;     // the first 8 bytes of the session id, in memory order
  std::uint64_t frame;       // the value the frame signals
  std::uint32_t thread;      // the OS thread id that saw the moment
  std::uint8_t moment;
  std::atomic<std::uint8_t> ready;  // set last: a drain takes only written events
};

extern std::atomic<bool> g_on;

inline bool on() { return g_on.load(std::memory_order_relaxed); }
void record(Moment m, std::uint64_t session, std::uint64_t frame, std::int64_t t_ns);
inline void mark(Moment m, std::uint64_t session, std::uint64_t frame, std::int64_t t_ns) {
  if (on()) record(m, session, frame, t_ns);
}
std::int64_t now_ns();

// A moment as stop() hands it over; Python reads an array of them with kTakenFormat.
struct Taken {
  std::int64_t t_ns;
  std::uint64_t session, frame;
  std::uint32_t thread;
  std::uint8_t moment;
  std::uint8_t pad[3];
};
static_assert(sizeof(Taken) == 32, "kTakenFormat describes 32 bytes");
inline constexpr const char *kTakenFormat = "=qQQIB3x";

// Starts a recording of at most `capacity` moments and `max_frames` frames (frames counted by
// their kReceived) in a buffer of its own; false when one is already recording. Stops by itself when either is full.
bool start(std::size_t capacity, std::uint64_t max_frames);
// Stops the recording, frees its buffer and returns its moments (unordered) and how many were
// dropped for lack of room.
std::vector<Taken> stop(std::uint64_t *dropped);
// Whether the recording has stopped by itself (full or frames reached) since start().
bool filled();

}  // namespace fl::trace
