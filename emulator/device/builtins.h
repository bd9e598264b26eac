// Python builtins of the fake device library: how its functions are declared and handed over.
// The library is loaded (ctypes) before torch, so it is not a Python module: each source file
// keeps a PyMethodDef table and an extern "C" entry point returns it as {name: builtin}
// (emulator/device/boot.py reads them).
#pragma once

#include <Python.h>

#define MAYA_FASTCALL(name, fn, doc) \
  {name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fn)), METH_FASTCALL, doc}

namespace maya_builtins {

// {name: builtin} for a method table
template <size_t N>
PyObject* as_dict(PyMethodDef (&methods)[N]) {
  PyObject* out = PyDict_New();
  for (PyMethodDef& m : methods) {
    PyObject* fn = PyCFunction_New(&m, nullptr);
    PyDict_SetItemString(out, m.ml_name, fn);
    Py_DECREF(fn);
  }
  return out;
}

// false (a TypeError set) unless the call has `want` arguments
inline bool check_args(Py_ssize_t nargs, Py_ssize_t want, const char* usage) {
  if (nargs == want) return true;
  PyErr_SetString(PyExc_TypeError, usage);
  return false;
}

}  // namespace maya_builtins
