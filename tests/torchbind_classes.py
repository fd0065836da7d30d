"""TorchBind classes for the tests (custom objects): compiled from C++ with
torch.utils.cpp_extension.load_inline, the build cached in the temp directory (only the
first run compiles), and a fake class registered in Python
(`torch._library.register_fake_class`) for one of them. `tests/conftest.py` gives them to
tests as the `torchbind_classes` fixture (skipped where nothing can be compiled).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile

import pytest
import torch

NS = "gp_custom_objects_test"
CPP = r'''
#include <torch/custom_class.h>
#include <torch/library.h>
#include <ATen/ATen.h>

// Multiplies by a scale and counts its calls (state the real object keeps).
struct Scaler : torch::CustomClassHolder {
  double scale;
  int64_t calls = 0;
  explicit Scaler(double s) : scale(s) {}
  at::Tensor apply(at::Tensor x) { calls += 1; return x * scale; }
  int64_t count() { return calls; }
  std::tuple<std::tuple<std::string, double>, std::tuple<std::string, int64_t>> __obj_flatten__() {
    return std::make_tuple(std::make_tuple(std::string("scale"), scale), std::make_tuple(std::string("calls"), calls));
  }
};

// The same, with no fake class registered for it.
struct Unfaked : torch::CustomClassHolder {
  at::Tensor apply(at::Tensor x) { return x + 1; }
  std::tuple<std::tuple<std::string, int64_t>> __obj_flatten__() {
    return std::make_tuple(std::make_tuple(std::string("unused"), int64_t(0)));
  }
};

at::Tensor scaled_add(c10::intrusive_ptr<Scaler> s, at::Tensor x, at::Tensor y) { return s->apply(x) + y; }

TORCH_LIBRARY(gp_custom_objects_test, m) {
  m.class_<Scaler>("Scaler")
    .def(torch::init<double>())
    .def("apply", &Scaler::apply)
    .def("count", &Scaler::count)
    .def("__obj_flatten__", &Scaler::__obj_flatten__)
    .def_pickle(
      [](const c10::intrusive_ptr<Scaler>& self) -> std::tuple<double, int64_t> {
        return std::make_tuple(self->scale, self->calls); },
      [](std::tuple<double, int64_t> state) {
        auto s = c10::make_intrusive<Scaler>(std::get<0>(state)); s->calls = std::get<1>(state); return s; });
  m.class_<Unfaked>("Unfaked")
    .def(torch::init<>())
    .def("apply", &Unfaked::apply)
    .def("__obj_flatten__", &Unfaked::__obj_flatten__);
  m.def("scaled_add(__torch__.torch.classes.gp_custom_objects_test.Scaler s, Tensor x, Tensor y) -> Tensor");
}
TORCH_LIBRARY_IMPL(gp_custom_objects_test, CompositeExplicitAutograd, m) { m.impl("scaled_add", scaled_add); }
'''


@contextlib.contextmanager
def compiled_classes():
    """The compiled library (built once per machine), with the Python fake class and the
    custom op's fake kernel registered while the context lasts."""
    if not hasattr(torch.classes, NS) or not _loaded():
        from torch.utils.cpp_extension import load_inline
        build = os.path.join(tempfile.gettempdir(), "graphport-torchbind-" + hashlib.sha1(CPP.encode()).hexdigest()[:12])
        os.makedirs(build, exist_ok=True)
        try:
            load_inline(NS, cpp_sources=CPP, is_python_module=False, build_directory=build)
        except (RuntimeError, OSError, ImportError) as e:   # no compiler or no headers: nothing to test with
            pytest.skip(f"cannot compile the TorchBind test classes: {e}")

    @torch._library.register_fake_class(f"{NS}::Scaler")
    class FakeScaler:
        def __init__(self, scale, calls):
            self.scale, self.calls = scale, calls

        @classmethod
        def __obj_unflatten__(cls, flat):
            return cls(**dict(flat))

        def apply(self, x):
            self.calls += 1   # as the real object counts
            return x * self.scale

        def count(self):
            return self.calls

    lib = torch.library.Library(NS, "FRAGMENT")
    torch.library.register_fake(f"{NS}::scaled_add", lambda s, x, y: s.apply(x) + y, lib=lib)
    try:
        yield getattr(torch.classes, NS)
    finally:
        lib._destroy()
        torch._library.fake_class_registry.deregister_fake_class(f"{NS}::Scaler")


def _loaded() -> bool:
    try:
        getattr(torch.classes, NS).Scaler
        return True
    except (AttributeError, RuntimeError):
        return False


class Model(torch.nn.Module):
    """A method call and a custom op taking the object, between ordinary layers."""

    def __init__(self, classes):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.scaler = classes.Scaler(3.0)
        self.spare = classes.Scaler(5.0)     # never used: not lifted

    def forward(self, x, y):
        h = self.scaler.apply(self.lin(x))
        return torch.ops.gp_custom_objects_test.scaled_add(self.scaler, h, y).relu()


def inputs(n):
    return torch.randn(n, 4), torch.randn(n, 4)


