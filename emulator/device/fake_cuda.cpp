// maya's fake CUDA device for CPU-only builds of PyTorch, and for CUDA builds without a GPU.
//
// Why this exists: a CPU build of torch has no CUDA DeviceGuardImpl and no CUDAHooks, so
// `x.to("cuda")`, autograd on a fake CUDA tensor (which aborts the process in C++) and
// `torch.accelerator` all fail, and the SDPA backend choice for CUDA silently falls back to
// the math path. This library registers, at load time (static initialisers):
//   1. a DeviceGuardImpl for CUDA that only tracks the current device and per-device stream ids;
//   2. CUDAHooks that say "built and available" with the target's device count;
//   3. pinned host memory (tracked CPU memory) and a host-clock DDP timer for CUDA;
//   4. a CUDA `_fused_sdp_choice` kernel that picks flash / mem-efficient / math like the
//      target's compute capability would (and honours `torch.backends.cuda.sdp_kernel` toggles);
//   5. a CUDA `record_stream` kernel that does nothing (see `fake_record_stream`), and a CUDA
//      `_local_scalar_dense` that reads the documented placeholder (see `fake_local_scalar_dense`).
// It must be loaded before `import torch` (getCUDAHooks() caches the first answer). On a CUDA
// build, boot.py preloads libtorch (and with it libtorch_cuda, whose real guard and SDPA chooser
// would call the CUDA driver) first; our registrations come after and replace them. See
// emulator/device/boot.py. The target is set through
// the C functions at the bottom.

#include <Python.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/SDPBackend.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>
#include <torch/library.h>

#include "builtins.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace maya_fake_cuda {

constexpr c10::DeviceIndex kMaxDevices = 64;

std::atomic<int> g_device_count{8};
std::atomic<int> g_cap_major{9};
std::atomic<int> g_cap_minor{0};

thread_local c10::DeviceIndex t_current_device = 0;
thread_local std::array<c10::StreamId, kMaxDevices> t_streams{};

// A guard that remembers the current device and stream per thread; nothing touches hardware.
struct FakeCUDAGuard final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::CUDA; }

  static void check(c10::Device d) {
    TORCH_CHECK(d.type() == c10::DeviceType::CUDA, "maya fake CUDA guard got device ", d);
    TORCH_CHECK(d.index() < kMaxDevices, "maya: device index ", static_cast<int>(d.index()),
                " out of range (at most ", static_cast<int>(kMaxDevices), " emulated devices)");
  }
  c10::Device exchangeDevice(c10::Device d) const override {
    check(d);
    c10::Device old = getDevice();
    if (d.index() >= 0) t_current_device = d.index();
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(c10::DeviceType::CUDA, t_current_device); }
  void setDevice(c10::Device d) const override {
    check(d);
    if (d.index() >= 0) t_current_device = d.index();
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < kMaxDevices) t_current_device = d.index();
  }
  c10::Stream getStream(c10::Device d) const override {
    auto i = d.index() < 0 ? t_current_device : d.index();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::CUDA, i), t_streams[i]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    auto i = s.device_index() < 0 ? t_current_device : s.device_index();
    auto old = t_streams[i];
    t_streams[i] = s.id();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::CUDA, i), old);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(g_device_count.load());
  }
  void record(void** /*event*/, const c10::Stream& /*stream*/, const c10::DeviceIndex /*device_index*/,
              const c10::EventFlag /*flag*/) const override {}
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override { return true; }
  void destroyEvent(void* /*event*/, const c10::DeviceIndex /*device_index*/) const noexcept override {}
  void synchronizeDevice(const c10::DeviceIndex /*device_index*/) const override {}
};

// "Pinned" host memory: ordinary CPU memory whose address ranges are remembered, so that
// `is_pinned()` is true exactly for tensors allocated pinned (DDP's reducer asserts this for its
// host-side used-parameter map when find_unused_parameters=True).
std::mutex g_pinned_mu;
std::map<std::uintptr_t, size_t> g_pinned;  // start address -> size

void pinned_delete(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    g_pinned.erase(reinterpret_cast<std::uintptr_t>(ptr));
  }
  c10::free_cpu(ptr);
}

bool is_pinned(const void* data) {
  const auto p = reinterpret_cast<std::uintptr_t>(data);
  std::lock_guard<std::mutex> lock(g_pinned_mu);
  auto it = g_pinned.upper_bound(p);
  if (it == g_pinned.begin()) return false;
  --it;
  return p < it->first + std::max<size_t>(it->second, 1);
}

struct FakePinnedAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* ptr = c10::alloc_cpu(n);
    if (ptr != nullptr) {
      std::lock_guard<std::mutex> lock(g_pinned_mu);
      g_pinned[reinterpret_cast<std::uintptr_t>(ptr)] = n;
    }
    return {ptr, ptr, &pinned_delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &pinned_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

FakePinnedAllocator g_pinned_allocator;

// DDP's reducer times each iteration with a per-device-type Timer; a CUDA build's CudaTimer
// records CUDA events (driver calls). This one reads the host clock, like the CPU timer.
struct FakeCUDATimer final : public c10d::Timer {
  explicit FakeCUDATimer(c10::Device /*device*/) {}
  std::optional<int64_t> measureDifference(Event start, Event end) override {
    const int64_t t0 = getTimeRef(start), t1 = getTimeRef(end);
    if (t0 == c10d::kUnsetTime || t1 == c10d::kUnsetTime || t1 < t0) return std::nullopt;
    return t1 - t0;
  }
};

struct FakeCUDAHooks final : public at::CUDAHooksInterface {
  explicit FakeCUDAHooks(at::CUDAHooksArgs) {}
  void init() const override {}
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasCUDA() const override { return true; }
  bool hasCUDART() const override { return true; }
  bool hasCuBLASLt() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex /*device_index*/) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(g_device_count.load()); }
  int getNumGPUs() const override { return g_device_count.load(); }
  c10::DeviceIndex current_device() const override { return t_current_device; }
  void setCurrentDevice(c10::DeviceIndex device) const override { t_current_device = device; }
  c10::DeviceIndex getCurrentDevice() const override { return t_current_device; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto old = t_current_device;
    if (device >= 0) t_current_device = device;
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override { return exchangeDevice(device); }
  bool isPinnedPtr(const void* data) const override { return is_pinned(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  void deviceSynchronize(c10::DeviceIndex /*device_index*/) const override {}
  // Fake tensors draw no random numbers; a CPU generator keeps seeding/state APIs working.
  const at::Generator& getDefaultGenerator(c10::DeviceIndex /*device_index*/) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  at::Generator getNewGenerator(c10::DeviceIndex /*device_index*/) const override {
    return at::detail::createCPUGenerator();
  }
  long versionCUDART() const override { return 12080; }
  std::string showConfig() const override { return "maya fake CUDA device (emulation, no GPU)\n"; }
};

// Writes TensorImpl's protected device field (no public setter exists; see maya_device_functions).
struct DeviceAccess : c10::TensorImpl {
  static void set(c10::TensorImpl* t, c10::Device d) { static_cast<DeviceAccess*>(t)->device_opt_ = d; }
};

// device_in_cpp(fake_tensor, index): device() answers cuda:index from the TensorImpl.
PyObject* device_in_cpp(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!maya_builtins::check_args(nargs, 2, "device_in_cpp(tensor, index)")) return nullptr;
  long index = PyLong_AsLong(args[1]);
  if (index == -1 && PyErr_Occurred()) return nullptr;
  c10::TensorImpl* impl = THPVariable_Unpack(args[0]).unsafeGetTensorImpl();
  DeviceAccess::set(impl, c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index)));
  impl->set_python_custom_device(false);
  Py_RETURN_NONE;
}

// device_in_python(fake_tensor): back to FakeTensor's own arrangement (meta, asked in Python).
PyObject* device_in_python(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!maya_builtins::check_args(nargs, 1, "device_in_python(tensor)")) return nullptr;
  c10::TensorImpl* impl = THPVariable_Unpack(args[0]).unsafeGetTensorImpl();
  DeviceAccess::set(impl, c10::Device(c10::DeviceType::Meta));
  impl->set_python_custom_device(true);
  Py_RETURN_NONE;
}

// python_dispatch(tensor, on): give a tensor FakeTensor's dispatch arrangement (Python keys on,
// device asked in Python) or take it away. `real.data = fake` (FSDP1's and DeepSpeed's move to the
// device) copies the fake's storage, sizes and backend keys but keeps the destination's (absent)
// Python keys, leaving a plain tensor on "meta" that no fake kernel sees; with this the emulator
// turns it into a fake tensor in place (emulator.device.fake_mode), keeping its autograd state.
PyObject* python_dispatch(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!maya_builtins::check_args(nargs, 2, "python_dispatch(tensor, on)")) return nullptr;
  const int on = PyObject_IsTrue(args[1]);
  if (on < 0) return nullptr;
  c10::TensorImpl* impl = THPVariable_Unpack(args[0]).unsafeGetTensorImpl();
  impl->set_python_dispatch(on != 0);
  impl->set_python_custom_device(on != 0);
  Py_RETURN_NONE;
}

// ---- the signature cache's output rebuilding (emulator/capture/fastpath.py, `rebuild`), one call
// each instead of two or three torch calls through Python's argument parser and the dispatcher

bool int_tuple(PyObject* obj, std::vector<int64_t>& out) {
  if (!PyTuple_Check(obj)) {
    PyErr_SetString(PyExc_TypeError, "expected a tuple of ints");
    return false;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(obj);
  out.resize(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    out[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(obj, i));
    if (out[i] == -1 && PyErr_Occurred()) return false;
  }
  return true;
}

bool scalar_type(PyObject* obj, at::ScalarType& out) {
  if (!THPDtype_Check(obj)) {
    PyErr_SetString(PyExc_TypeError, "expected a torch.dtype");
    return false;
  }
  out = reinterpret_cast<THPDtype*>(obj)->scalar_type;
  return true;
}

// meta_empty(shape, stride, dtype): torch.empty_strided(shape, stride, dtype=dtype, device="meta")
PyObject* meta_empty(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!maya_builtins::check_args(nargs, 3, "meta_empty(shape, stride, dtype)")) return nullptr;
  std::vector<int64_t> shape, stride;
  at::ScalarType dtype;
  if (!int_tuple(args[0], shape) || !int_tuple(args[1], stride) || !scalar_type(args[2], dtype)) return nullptr;
  try {
    return THPVariable_Wrap(at::detail::empty_strided_meta(shape, stride, dtype));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

// meta_view(base, shape, stride, offset, dtype): a meta tensor over base's storage, like
// torch.empty(0, dtype=dtype, device="meta").set_(base.untyped_storage(), offset, shape, stride)
PyObject* meta_view(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!maya_builtins::check_args(nargs, 5, "meta_view(base, shape, stride, offset, dtype)")) return nullptr;
  std::vector<int64_t> shape, stride;
  at::ScalarType dtype;
  if (!int_tuple(args[1], shape) || !int_tuple(args[2], stride) || !scalar_type(args[4], dtype)) return nullptr;
  const long long offset = PyLong_AsLongLong(args[3]);
  if (offset == -1 && PyErr_Occurred()) return nullptr;
  try {
    auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(THPVariable_Unpack(args[0]).storage()),
                                                     c10::DispatchKeySet(c10::DispatchKey::Meta),
                                                     c10::scalarTypeToTypeMeta(dtype));
    impl->set_sizes_and_strides(shape, stride, offset);
    return THPVariable_Wrap(at::Tensor(std::move(impl)));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

// seal(fake_tensor, device_index, throw): what FakeTensor's constructor does to a new fake tensor's
// storage (writing through data_ptr raises if `throw`, else warns), and for index >= 0
// device_in_cpp as well
PyObject* seal(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!maya_builtins::check_args(nargs, 3, "seal(tensor, index, throw)")) return nullptr;
  long index = PyLong_AsLong(args[1]);
  if (index == -1 && PyErr_Occurred()) return nullptr;
  c10::TensorImpl* impl = THPVariable_Unpack(args[0]).unsafeGetTensorImpl();
  if (impl->has_storage()) {
    c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
    if (PyObject_IsTrue(args[2])) {
      storage->set_throw_on_mutable_data_ptr();
    } else {
      storage->set_warn_deprecated_on_mutable_data_ptr();
    }
  }
  if (index >= 0) {
    DeviceAccess::set(impl, c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index)));
    impl->set_python_custom_device(false);
  }
  Py_RETURN_NONE;
}

PyObject* scalar_placeholders(PyObject*, PyObject* const* args, Py_ssize_t nargs);  // below, with its kernel

PyMethodDef g_device_methods[] = {
    MAYA_FASTCALL("device_in_cpp", device_in_cpp, "device() of this fake tensor answered in C++"),
    MAYA_FASTCALL("device_in_python", device_in_python, "device() of this fake tensor asked in Python again"),
    MAYA_FASTCALL("meta_empty", meta_empty, "torch.empty_strided(shape, stride, dtype=dtype, device='meta')"),
    MAYA_FASTCALL("meta_view", meta_view, "a meta tensor over base's storage"),
    MAYA_FASTCALL("seal", seal, "a new fake tensor's storage guards data_ptr writes; device in C++ for index >= 0"),
    MAYA_FASTCALL("python_dispatch", python_dispatch, "FakeTensor's dispatch arrangement on (True) or off"),
    MAYA_FASTCALL("scalar_placeholders", scalar_placeholders, "device scalars read in C++ as the placeholder"),
};

// The SDPA backend a real GPU of the target capability would choose (sm80+ flash first, then
// memory-efficient, then math), following torch's sdp_utils constraints in simplified form.
int64_t fake_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                        std::optional<double> scale, bool enable_gqa) {
  (void)dropout_p; (void)scale; (void)is_causal;
  auto& ctx = at::globalContext();
  const int major = g_cap_major.load();
  const auto dt = q.scalar_type();
  const bool half = dt == at::kHalf || dt == at::kBFloat16;
  const bool four_d = q.dim() == 4 && k.dim() == 4 && v.dim() == 4;
  const int64_t hd = q.size(-1);
  const bool same_hd = k.size(-1) == hd && v.size(-1) == hd;
  const bool gqa = four_d && q.size(1) != k.size(1);
  bool flash = ctx.userEnabledFlashSDP() && major >= 8 && half && four_d && !attn_mask.has_value() &&
               hd % 8 == 0 && hd <= 256 && same_hd && (!gqa || enable_gqa);
  if (dt == at::kBFloat16 && major < 8) flash = false;
  if (flash) return static_cast<int64_t>(at::SDPBackend::flash_attention);
  const bool eff_dtype = half || dt == at::kFloat;
  const int64_t align = half ? 8 : 4;
  bool eff = ctx.userEnabledMemEfficientSDP() && major >= 5 && eff_dtype && four_d && hd % align == 0 &&
             v.size(-1) % align == 0 && !gqa;
  if (dt == at::kBFloat16 && major < 8) eff = false;
  if (eff) return static_cast<int64_t>(at::SDPBackend::efficient_attention);
  if (ctx.userEnabledMathSDP()) return static_cast<int64_t>(at::SDPBackend::math);
  TORCH_CHECK(false, "No available kernel for scaled_dot_product_attention on the emulated GPU (sm",
              major, g_cap_minor.load(), ") with the enabled backends");
}

// `tensor.record_stream(s)` under `no_dispatch()` (FSDP1 calls it so for every unsharded and
// low-precision parameter and gradient): the Python keys are off, so a fake tensor reaches its
// backend kernel, which a CPU build lacks ("Could not run 'aten::record_stream' with arguments
// from the 'CUDA' backend"). On a GPU it launches nothing: it tells the caching allocator to hold
// the block until the stream's work is done. The emulated allocator does not model that (see
// emulator/memory/allocator.py) and the recorder lists it among the calls that are no event
// (emulator/ops.py), so the kernel does nothing. On a CUDA build it replaces the real kernel,
// which would hand a fake storage to the CUDA caching allocator.
void fake_record_stream(at::Tensor& /*self*/, at::Stream /*stream*/) {}

// `.item()` of a device scalar with Python dispatch off, so the recorder never sees it: `torch.tensor`
// of a list of device scalars reads each in C++ below the Python keys (megatron-core's local
// multi-tensor l2 norm: `torch.tensor([torch.norm(t) for t in ...])`), and a CPU build has no CUDA
// kernel for it. A fake tensor has no value: the documented placeholder (0 / 0.0 / False, see
// emulator/device/fake_mode.py), counted (`scalar_placeholders`).
std::atomic<int64_t> g_scalar_placeholders{0};

at::Scalar fake_local_scalar_dense(const at::Tensor& self) {
  g_scalar_placeholders.fetch_add(1);
  const auto type = self.scalar_type();
  if (type == at::kBool) return at::Scalar(false);
  if (at::isFloatingType(type) || at::isComplexType(type)) return at::Scalar(0.0);
  return at::Scalar(static_cast<int64_t>(0));
}

PyObject* scalar_placeholders(PyObject*, PyObject* const* /*args*/, Py_ssize_t nargs) {
  if (!maya_builtins::check_args(nargs, 0, "scalar_placeholders()")) return nullptr;
  return PyLong_FromLongLong(g_scalar_placeholders.load());
}

TORCH_LIBRARY_IMPL(aten, CUDA, m) {
  m.impl("record_stream", &fake_record_stream);
  m.impl("_local_scalar_dense", &fake_local_scalar_dense);
}

C10_REGISTER_GUARD_IMPL(CUDA, FakeCUDAGuard);

}  // namespace maya_fake_cuda

namespace c10d {
C10_REGISTER_TYPED_CLASS_WITH_PRIORITY(TimerRegistry, c10::kCUDA, c10::REGISTRY_PREFERRED,
                                       maya_fake_cuda::FakeCUDATimer)
}  // namespace c10d

namespace at {
// Preferred priority: on a CUDA build libtorch_cuda has registered its own "CUDAHooks" at default
// priority already, and an equal-priority duplicate makes c10::Registry call exit(1).
C10_REGISTER_TYPED_CLASS_WITH_PRIORITY(CUDAHooksRegistry, "CUDAHooks", c10::REGISTRY_PREFERRED,
                                       maya_fake_cuda::FakeCUDAHooks)
namespace native {
REGISTER_CUDA_DISPATCH(_fused_sdp_choice_stub, &maya_fake_cuda::fake_sdp_choice)
}  // namespace native
}  // namespace at

extern "C" {
// Called by emulator/device/boot.py (ctypes) right after loading, before any CUDA use.
void maya_set_target(int device_count, int cap_major, int cap_minor) {
  maya_fake_cuda::g_device_count = device_count < 1 ? 1 : (device_count > 64 ? 64 : device_count);
  maya_fake_cuda::g_cap_major = cap_major;
  maya_fake_cuda::g_cap_minor = cap_minor;
}
int maya_fake_cuda_loaded() { return 1; }

// Builtins for emulator/capture/fastpath.py (see its `install`), as {name: builtin}.
// Where a fake tensor's device() is answered: FakeTensor makes C++ ask Python for its device (~8
// questions per recorded op: autograd's input metadata, autocast's eligibility checks, the
// engine's output validation), because inside a fake kernel the same tensor must say "meta".
// Between fake kernels the answer is always the fake CUDA device, so the emulator lets C++ read it
// from the TensorImpl and turns Python back on before the tensor enters a fake kernel. And the
// pieces of a rebuilt output (meta_empty, meta_view, seal). This library is loaded before torch,
// so the functions are handed over as objects: one call costs what a builtin costs.
// Callers pass fake tensors only (no type check on tensors).
PyObject* maya_device_functions() { return maya_builtins::as_dict(maya_fake_cuda::g_device_methods); }
}
