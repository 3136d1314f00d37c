// rdmacoll_torch._C: the backend's Python face. rdmacoll_torch/__init__.py registers it with
// torch.distributed.

#include <pybind11/chrono.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/utils/pybind.h>

#include <rdmacoll/rdmacoll.hpp>

#include "backend.hpp"
#include "torch_store.hpp"

PYBIND11_MODULE(_C, m) {
  using rdmacoll_torch::RdmacollBackend;
  // torch's c10d types must be registered before a class names one as its base.
  py::module_::import(rdmacoll_torch::compat::kPyBaseModule);
  py::enum_<RdmacollBackend::Kind>(m, "Kind")
      .value("WORLD", RdmacollBackend::Kind::World)
      .value("MEMBER", RdmacollBackend::Kind::Member)
      .value("STANDALONE", RdmacollBackend::Kind::Standalone);
  py::class_<RdmacollBackend, rdmacoll_torch::compat::Base, c10::intrusive_ptr<RdmacollBackend>>(
      m, "RdmacollBackend")
      // (store, group rank, group size, timeout, kind): rdmacoll_torch's creator decides the
      // kind from torch's backend options.
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, RdmacollBackend::Kind kind) {
             return c10::make_intrusive<RdmacollBackend>(store, rank, size, timeout, kind);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("kind"),
           py::call_guard<py::gil_scoped_release>())
      .def("_release", &RdmacollBackend::release, py::arg("abort") = false,
           py::call_guard<py::gil_scoped_release>())
      .def(
          "_empty",
          [](RdmacollBackend& self, const std::vector<int64_t>& sizes, const py::object& dtype) {
            if (!THPDtype_Check(dtype.ptr())) throw py::type_error("dtype must be a torch.dtype");
            const at::ScalarType type = reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
            py::gil_scoped_release release;
            return self.empty_symmetric(sizes, type);
          },
          py::arg("sizes"), py::arg("dtype"));
  // For tests: the store adapter's get(), against a real torch store.
  m.def(
      "_store_get",
      [](const c10::intrusive_ptr<c10d::Store>& store, const std::string& key,
         std::chrono::milliseconds timeout) {
        std::vector<uint8_t> v;
        {
          py::gil_scoped_release release;
          v = rdmacoll_torch::TorchStore(store).get(key, timeout);
        }
        return py::bytes(reinterpret_cast<const char*>(v.data()), v.size());
      },
      py::arg("store"), py::arg("key"), py::arg("timeout"));
  m.def("transport_name", [] { return rdmacoll::transport_name(); });
  m.def("is_initialized", [] { return rdmacoll::is_initialized(); });
  m.def("torch_version_built", [] { return std::string(TORCH_VERSION); });
  m.def("leave_at_exit", &rdmacoll_torch::leave_at_exit);
}
