// SPDX-License-Identifier: MIT
// module.cpp: the qg._qg extension module. Importing it touches no CUDA
// driver call, so `import qg` works on machines without a GPU.
#include "convert.h"

namespace qg::python {
void bind_ops(nb::module_& m);
void bind_fast_ops(nb::module_& m);
void bind_fast_int_ops(nb::module_& m);
void bind_runtime(nb::module_& m);
}  // namespace qg::python

NB_MODULE(_qg, m) {
  m.doc() = "qg core bindings (internal; use the qg package)";
  qg::python::bind_ops(m);
  qg::python::bind_fast_ops(m);
  qg::python::bind_fast_int_ops(m);
  qg::python::bind_runtime(m);
}
