#include "adaptive_spin.h"

#include <pybind11/pybind11.h>

#include <algorithm>

#include "../common/host_timeline.h"

namespace py = pybind11;

namespace fl {

namespace {
// fenceline.waiting's constants: keep them equal (tests/unit/test_nap.py checks).
constexpr int kWindowShift = 21;
constexpr std::int64_t kWindowsPerPeriod = 16;
constexpr double kSpinSlackNs = 10000.0;
constexpr double kOutlier = 4.0;

double ema(const std::optional<double> &avg, double sample) {
  if (!avg) return sample;
  return *avg + (std::min(sample, kOutlier * *avg) - *avg) * 0.125;
}
}  // namespace

bool ReceiveSpin::window(std::int64_t now_ns) {
  const bool explore = (now_ns >> kWindowShift) % kWindowsPerPeriod == 0;
  if (exploring_ && !explore) decide();
  exploring_ = explore;
  return explore;
}

std::int64_t ReceiveSpin::budget_ns(std::int64_t now_ns) {
  if (max_spin_ns_ == 0) return 0;
  const bool explore = window(now_ns);
  if (spinning_ == explore) return 0;
  if (!spin_avg_) return max_spin_ns_;
  return static_cast<std::int64_t>(
      std::min(static_cast<double>(max_spin_ns_), 4 * *spin_avg_ + kSpinSlackNs));
}

void ReceiveSpin::observe(std::int64_t waited_ns, std::int64_t budget_ns) {
  if (budget_ns)
    spin_avg_ = ema(spin_avg_, static_cast<double>(waited_ns));
  else
    block_avg_ = ema(block_avg_, static_cast<double>(waited_ns));
  if (!exploring_) decide();
}

void ReceiveSpin::decide() {
  if (spin_avg_ && *spin_avg_ > static_cast<double>(max_spin_ns_))
    spinning_ = false;  // the event comes later than any spin: sleep at once
  else if (spin_avg_ && block_avg_)
    spinning_ = *spin_avg_ < *block_avg_ * (spinning_ ? 1.1 : 0.9);
}

void bind_adaptive_spin(py::module_ &mod) {
  py::class_<SpinGate, std::shared_ptr<SpinGate>>(mod, "SpinGate")
      .def(py::init<int>(), py::arg("slots"))
      .def("try_enter", &SpinGate::try_enter, "Takes a slot if one is free; never waits.")
      .def("leave", &SpinGate::leave, "Gives back a slot taken by try_enter.")
      .def_property_readonly("slots", &SpinGate::slots)
      .def_property_readonly("spinning", &SpinGate::spinning);
  py::class_<ReceiveSpin, std::shared_ptr<ReceiveSpin>>(mod, "ReceiveSpin")
      .def(py::init<std::int64_t>(), py::arg("max_spin_ns"))
      .def(
          "budget_ns",
          [](ReceiveSpin &s, std::int64_t now_ns) {
            return s.budget_ns(now_ns < 0 ? fl_htl_now_ns() : now_ns);
          },
          py::arg("now_ns") = -1, "The next wait's spin budget (now_ns < 0: the clock's now).")
      .def("observe", &ReceiveSpin::observe, py::arg("waited_ns"), py::arg("budget_ns"))
      .def_property_readonly("spinning", &ReceiveSpin::spinning)
      .def_property_readonly("average_wait_ns", &ReceiveSpin::average_wait_ns)
      .def_property_readonly("max_spin_ns", &ReceiveSpin::max_spin_ns)
      .def_readonly("denied", &ReceiveSpin::denied);
}

}  // namespace fl
