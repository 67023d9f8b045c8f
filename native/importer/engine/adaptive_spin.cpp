#include "adaptive_spin.h"

#include <pybind11/pybind11.h>

#include "common/host_timeline.h"

namespace py = pybind11;

namespace fl {

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
      .def_readwrite("denied", &ReceiveSpin::denied);
  // The rule's constants, which fenceline.waiting reads rather than copies.
  mod.attr("SPIN_WINDOW_SHIFT") = FL_SPIN_WINDOW_SHIFT;
  mod.attr("SPIN_WINDOWS_PER_PERIOD") = FL_SPIN_WINDOWS_PER_PERIOD;
  mod.attr("SPIN_SLACK_NS") = FL_SPIN_SLACK_NS;
  mod.attr("SPIN_OUTLIER") = FL_SPIN_OUTLIER;
}

}  // namespace fl
