// The emulated GPU's memory: the caching allocator in C++, and storages that free themselves.
//
// Why C++: every device storage the emulated program creates goes through the allocator model,
// ~1,850 per GPT-2-small step. In Python a malloc and its free cost 10-14 us (0.5-1 us here), plus
// a weak reference per storage to see it die: memory accounting was 55-60 ms of a ~235 ms step
// (measured by switching it off on alternate steps of one emulated run).
//
// The policy is emulator/memory/allocator.py's, line for line (that module documents it and
// stays the reference model; tests/emulator/programs/allocator_twin.py drives both with the
// same random requests and compares every figure).
//
// Storages free themselves: `own` allocates a block for a fake tensor's (meta) storage and
// gives the storage a DataPtr whose deleter returns the block to the allocator and whose pointer
// is the block's emulated address (see point_at_block). A storage dies
// exactly when the real one would release its block (its last tensor or view is gone), on
// whichever thread drops it, so the allocator is guarded by a mutex. `resize` follows
// `UntypedStorage.resize_` (FSDP2 frees and re-grows unsharded parameters that way).
//
// Allocators are never destroyed: a storage may outlive the Python object that made its
// allocator, and its deleter still needs it (one allocator per emulated rank process).

#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>

#include "../device/builtins.h"

#include <c10/core/StorageImpl.h>

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

namespace maya_device_memory {

constexpr int64_t kMinBlock = 512;
constexpr int64_t kSmallSize = 1 << 20;
constexpr int64_t kSmallBuffer = 2 << 20;
constexpr int64_t kLargeBuffer = 20 << 20;
constexpr int64_t kMinLargeAlloc = 10 << 20;
constexpr int64_t kRoundLarge = 2 << 20;
constexpr int kSmall = 0, kLarge = 1;

// stat rows, in emulator/memory/allocator.py's _STAT_NAMES order; each row is 12 counters:
// [current, peak, allocated, freed] for all pools, then for the small (4) and the large pool (8)
enum Stat { kAllocatedBytes, kReservedBytes, kRequestedBytes, kInactiveSplitBytes, kAllocation, kSegment,
            kInactiveSplit, kNumStats };
constexpr int kOffset[2] = {4, 8};

int64_t round_size(int64_t n) { return n < kMinBlock ? kMinBlock : (n + kMinBlock - 1) / kMinBlock * kMinBlock; }

int64_t segment_size(int64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

struct Block {
  int64_t addr, size, requested = 0;
  int stream, pool;
  Block* prev = nullptr;
  Block* next = nullptr;
  bool allocated = false;
  Block(int64_t a, int64_t s, int st, int p) : addr(a), size(s), stream(st), pool(p) {}
};

using Key = std::tuple<int, int64_t, int64_t>;  // (stream, size, address): best fit is a lower_bound

// Stream keys from here on are CUDA-graph private pools (allocator.py PRIVATE_POOL_STREAMS): their free
// segments stay reserved through empty_cache and the out-of-memory retry, as a live graph's pool does.
constexpr int64_t kPrivatePoolStreams = int64_t(1) << 40;

struct OutOfMemory {
  int64_t segment;  // the cudaMalloc that could not be made
};

class Allocator {
 public:
  explicit Allocator(int64_t capacity) : capacity(capacity) {}

  std::mutex mu;
  int64_t capacity;
  int64_t allocated = 0, reserved = 0, peak_allocated = 0, peak_reserved = 0;
  int64_t num_alloc_retries = 0, num_ooms = 0, num_device_alloc = 0, num_device_free = 0;
  std::array<std::array<int64_t, 12>, kNumStats> stats{};

  // 0 with `handle` set (0 for a zero-byte request), or the size of the segment that did not fit
  // (nothing else changes then, as in `malloc`)
  int64_t try_malloc(int64_t nbytes, int64_t stream, int64_t& handle) {
    try {
      handle = malloc(nbytes, stream);
      return 0;
    } catch (const OutOfMemory& e) {
      return e.segment;
    }
  }

  // throws OutOfMemory; returns 0 for a zero-byte request
  int64_t malloc(int64_t nbytes, int64_t stream) {
    if (nbytes <= 0) return 0;
    auto found = streams_.find(stream);
    int sidx = found != streams_.end() ? found->second : (streams_[stream] = static_cast<int>(streams_.size()));
    if (sidx == static_cast<int>(private_.size())) private_.push_back(stream >= kPrivatePoolStreams);
    const int64_t size = round_size(nbytes);
    const int pool = size <= kSmallSize ? kSmall : kLarge;
    const int off = kOffset[pool];
    Block* block = take_free(pool, sidx, size);
    if (block == nullptr) {
      block = new_segment(pool, sidx, size);
    } else if (block->prev != nullptr || block->next != nullptr) {  // a cached split block becomes active
      dec(kInactiveSplitBytes, off, block->size);
      dec(kInactiveSplit, off, 1);
    }
    const int64_t remaining = block->size - size;
    if (pool == kSmall ? remaining >= kMinBlock : remaining > kSmallSize) split(block, size);
    block->allocated = true;
    block->requested = nbytes;
    const int64_t handle = next_handle_++;
    live_[handle] = block;
    inc(kAllocatedBytes, off, block->size);
    inc(kRequestedBytes, off, nbytes);
    inc(kAllocation, off, 1);
    allocated += block->size;
    if (allocated > peak_allocated) peak_allocated = allocated;
    return handle;
  }

  // false for an unknown handle
  bool free(int64_t handle) {
    if (handle == 0) return true;
    auto it = live_.find(handle);
    if (it == live_.end()) return false;
    Block* block = it->second;
    live_.erase(it);
    block->allocated = false;
    const int off = kOffset[block->pool];
    dec(kAllocatedBytes, off, block->size);
    dec(kRequestedBytes, off, block->requested);
    dec(kAllocation, off, 1);
    allocated -= block->size;
    release_block(block);
    return true;
  }

  // the emulated device address of a live block (0 for handle 0: nothing allocated)
  int64_t address(int64_t handle) const {
    auto it = live_.find(handle);
    return it == live_.end() ? 0 : it->second->addr;
  }

  void empty_cache() {
    for (int pool : {kSmall, kLarge}) {
      for (auto it = free_[pool].begin(); it != free_[pool].end();) {
        Block* block = it->second;
        ++it;  // dropping erases the current entry only
        if (block->prev == nullptr && block->next == nullptr && !private_[block->stream]) drop_segment(block);
      }
    }
  }

  void reset_peak() {
    peak_allocated = allocated;
    peak_reserved = reserved;
    for (auto& v : stats) {
      v[1] = v[0];
      v[5] = v[4];
      v[9] = v[8];
    }
  }

 private:
  std::map<Key, Block*> free_[2];
  std::unordered_map<int64_t, Block*> live_;
  std::unordered_map<int64_t, int> streams_;
  std::vector<bool> private_;  // by stream index: a CUDA-graph private pool (kPrivatePoolStreams)
  int64_t next_addr_ = 1 << 21;
  int64_t next_handle_ = 1;

  void inc(Stat s, int off, int64_t n) {
    auto& v = stats[s];
    v[0] += n;
    v[2] += n;
    if (v[0] > v[1]) v[1] = v[0];
    v[off] += n;
    v[off + 2] += n;
    if (v[off] > v[off + 1]) v[off + 1] = v[off];
  }

  void dec(Stat s, int off, int64_t n) {
    auto& v = stats[s];
    v[0] -= n;
    v[3] += n;
    v[off] -= n;
    v[off + 3] += n;
  }

  void insert_free(Block* b) { free_[b->pool][Key(b->stream, b->size, b->addr)] = b; }
  void remove_free(Block* b) { free_[b->pool].erase(Key(b->stream, b->size, b->addr)); }

  Block* take_free(int pool, int sidx, int64_t size) {
    auto it = free_[pool].lower_bound(Key(sidx, size, 0));
    if (it == free_[pool].end() || std::get<0>(it->first) != sidx) return nullptr;
    Block* b = it->second;
    free_[pool].erase(it);
    return b;
  }

  Block* new_segment(int pool, int sidx, int64_t size) {
    const int64_t seg = segment_size(size);
    if (reserved + seg > capacity) {
      // cudaMalloc would fail: release every fully free cached segment and retry once
      empty_cache();
      ++num_alloc_retries;
      if (reserved + seg > capacity) {
        ++num_ooms;
        throw OutOfMemory{seg};
      }
    }
    Block* b = new Block(next_addr_, seg, sidx, pool);
    next_addr_ += (seg + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
    reserved += seg;
    if (reserved > peak_reserved) peak_reserved = reserved;
    ++num_device_alloc;
    inc(kReservedBytes, kOffset[pool], seg);
    inc(kSegment, kOffset[pool], 1);
    return b;
  }

  void split(Block* block, int64_t size) {
    Block* rest = new Block(block->addr + size, block->size - size, block->stream, block->pool);
    rest->prev = block;
    rest->next = block->next;
    if (block->next != nullptr) block->next->prev = rest;
    block->next = rest;
    block->size = size;
    insert_free(rest);
    inc(kInactiveSplitBytes, kOffset[block->pool], rest->size);
    inc(kInactiveSplit, kOffset[block->pool], 1);
  }

  // merge a just-freed block with its free neighbours and cache it
  void release_block(Block* block) {
    const int off = kOffset[block->pool];
    for (Block* nb : {block->prev, block->next}) {
      if (nb == nullptr || nb->allocated) continue;
      remove_free(nb);
      dec(kInactiveSplitBytes, off, nb->size);
      dec(kInactiveSplit, off, 1);
      if (nb == block->prev) {
        block->addr = nb->addr;
        block->prev = nb->prev;
        if (nb->prev != nullptr) nb->prev->next = block;
      } else {
        block->next = nb->next;
        if (nb->next != nullptr) nb->next->prev = block;
      }
      block->size += nb->size;
      delete nb;
    }
    if (block->prev != nullptr || block->next != nullptr) {
      inc(kInactiveSplitBytes, off, block->size);
      inc(kInactiveSplit, off, 1);
    }
    insert_free(block);
  }

  void drop_segment(Block* block) {
    remove_free(block);
    reserved -= block->size;
    ++num_device_free;
    dec(kReservedBytes, kOffset[block->pool], block->size);
    dec(kSegment, kOffset[block->pool], 1);
    delete block;
  }
};

// ------------------------------------------------------------------ storages that free themselves
struct Owned {
  Allocator* allocator;
  int64_t handle;
};

void release_owned(void* ctx) {
  auto* owned = static_cast<Owned*>(ctx);
  {
    std::lock_guard<std::mutex> guard(owned->allocator->mu);
    owned->allocator->free(owned->handle);
  }
  delete owned;
}

Owned* owner_of(c10::StorageImpl* s) {
  const c10::DataPtr& p = s->data_ptr();
  return p.get_deleter() == &release_owned ? static_cast<Owned*>(p.get_context()) : nullptr;
}

// Point an owned storage at its block's emulated address (caller holds the allocator's lock).
// Why an address and not nullptr: libraries read `untyped_storage().data_ptr()` to tell whether
// a storage is allocated (FSDP1's `_data_ptr_allocated` after it re-grows an unsharded flat
// parameter, SHARD_GRAD_OP's writeback assert) and whether two tensors share memory
// (`_same_storage`); on a GPU a live block has a distinct non-null address and a storage resized
// to 0 has none. Nothing reads through the pointer: the storage stays a meta storage.
void point_at_block(c10::StorageImpl* s, Owned* owned) {
  void* ptr = reinterpret_cast<void*>(owned->allocator->address(owned->handle));
  c10::DataPtr& old = s->_mutable_data_ptr_no_checks();
  if (old.get_context() == owned) old.release_context();  // re-pointing: the deleter must not run
  s->set_data_ptr_noswap(c10::DataPtr(ptr, owned, &release_owned, s->device()));
}

// ------------------------------------------------------------------ Python builtins
// An allocator travels as a capsule; the functions take it first. Out of memory is not an
// exception here: the call returns the size of the segment that could not be made (> 0) and the
// caller raises torch.cuda.OutOfMemoryError with the real allocator's message.

Allocator* unwrap(PyObject* capsule) {
  return static_cast<Allocator*>(PyCapsule_GetPointer(capsule, "maya.Allocator"));
}

using maya_builtins::check_args;

// fn(allocator) under its lock, for the builtins whose only argument is the allocator
template <typename Fn>
PyObject* locked(PyObject* const* args, Py_ssize_t nargs, const char* usage, Fn fn) {
  if (!check_args(nargs, 1, usage)) return nullptr;
  Allocator* a = unwrap(args[0]);
  if (a == nullptr) return nullptr;
  std::lock_guard<std::mutex> guard(a->mu);
  return fn(*a);
}

PyObject* new_allocator(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!check_args(nargs, 1, "new_allocator(capacity_bytes)")) return nullptr;
  long long capacity = PyLong_AsLongLong(args[0]);
  if (capacity == -1 && PyErr_Occurred()) return nullptr;
  return PyCapsule_New(new Allocator(capacity), "maya.Allocator", nullptr);  // never freed, see above
}

// malloc(alloc, nbytes, stream) -> (handle, 0) or (0, segment bytes that did not fit)
PyObject* malloc_(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!check_args(nargs, 3, "malloc(allocator, nbytes, stream)")) return nullptr;
  Allocator* a = unwrap(args[0]);
  long long nbytes = PyLong_AsLongLong(args[1]);
  long long stream = PyLong_AsLongLong(args[2]);
  if (a == nullptr || PyErr_Occurred()) return nullptr;
  std::lock_guard<std::mutex> guard(a->mu);
  int64_t handle = 0;
  const int64_t failed = a->try_malloc(nbytes, stream, handle);
  return Py_BuildValue("(LL)", static_cast<long long>(handle), static_cast<long long>(failed));
}

PyObject* free_(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!check_args(nargs, 2, "free(allocator, handle)")) return nullptr;
  Allocator* a = unwrap(args[0]);
  long long handle = PyLong_AsLongLong(args[1]);
  if (a == nullptr || PyErr_Occurred()) return nullptr;
  bool known;
  {
    std::lock_guard<std::mutex> guard(a->mu);
    known = a->free(handle);
  }
  if (!known) {
    PyErr_Format(PyExc_ValueError, "free of unknown or already freed handle %lld", handle);
    return nullptr;
  }
  Py_RETURN_NONE;
}

// The storage behind a Python tensor, or nullptr for a tensor without one (sparse, nested).
c10::StorageImpl* storage_of(PyObject* tensor) {
  const at::Tensor& t = THPVariable_Unpack(tensor);
  return t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
}

PyObject* own_storage(Allocator* a, c10::StorageImpl* s, long long nbytes, long long stream) {
  if (s == nullptr || owner_of(s) != nullptr) return PyLong_FromLong(0);
  int64_t handle = 0, failed;
  std::lock_guard<std::mutex> guard(a->mu);
  failed = a->try_malloc(nbytes, stream, handle);
  if (failed) return PyLong_FromLongLong(failed);
  point_at_block(s, new Owned{a, handle});
  return PyLong_FromLong(0);
}

// own(alloc, fake_tensor, nbytes, stream) -> 0, or the segment bytes that did not fit. A storage
// owned already (a view's, an input returned as output) is left as it is, and so is a tensor
// without a storage.
PyObject* own(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!check_args(nargs, 4, "own(allocator, tensor, nbytes, stream)")) return nullptr;
  Allocator* a = unwrap(args[0]);
  long long nbytes = PyLong_AsLongLong(args[2]);
  long long stream = PyLong_AsLongLong(args[3]);
  if (a == nullptr || PyErr_Occurred()) return nullptr;
  return own_storage(a, storage_of(args[1]), nbytes, stream);
}

// see(alloc, fake_tensor, stream) -> as `own`, with the storage's own size
PyObject* see(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!check_args(nargs, 3, "see(allocator, tensor, stream)")) return nullptr;
  Allocator* a = unwrap(args[0]);
  long long stream = PyLong_AsLongLong(args[2]);
  if (a == nullptr || PyErr_Occurred()) return nullptr;
  c10::StorageImpl* s = storage_of(args[1]);
  return own_storage(a, s, s != nullptr ? static_cast<long long>(s->nbytes()) : 0, stream);
}

// resize(alloc, storage_cdata, new_nbytes, stream) -> -1 if the storage is not this emulator's,
// else as `own`: its block goes back and one of the new size is taken (none for 0 bytes)
PyObject* resize(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!check_args(nargs, 4, "resize(allocator, storage_cdata, nbytes, stream)")) return nullptr;
  Allocator* a = unwrap(args[0]);
  void* cdata = PyLong_AsVoidPtr(args[1]);
  long long nbytes = PyLong_AsLongLong(args[2]);
  long long stream = PyLong_AsLongLong(args[3]);
  if (a == nullptr || PyErr_Occurred()) return nullptr;
  Owned* owned = owner_of(static_cast<c10::StorageImpl*>(cdata));
  if (owned == nullptr || owned->allocator != a) return PyLong_FromLong(-1);
  std::lock_guard<std::mutex> guard(a->mu);
  a->free(owned->handle);
  owned->handle = 0;
  const int64_t failed = a->try_malloc(nbytes, stream, owned->handle);
  point_at_block(static_cast<c10::StorageImpl*>(cdata), owned);
  return PyLong_FromLongLong(failed);
}

// figures(alloc) -> (allocated, reserved, peak_allocated, peak_reserved)
PyObject* figures(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return locked(args, nargs, "figures(allocator)", [](Allocator& a) {
    return Py_BuildValue("(LLLL)", static_cast<long long>(a.allocated), static_cast<long long>(a.reserved),
                         static_cast<long long>(a.peak_allocated), static_cast<long long>(a.peak_reserved));
  });
}

// set_peaks(alloc, peak_allocated, peak_reserved): put back peaks the emulator's own tensors raised
PyObject* set_peaks(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!check_args(nargs, 3, "set_peaks(allocator, peak_allocated, peak_reserved)")) return nullptr;
  Allocator* a = unwrap(args[0]);
  long long pa = PyLong_AsLongLong(args[1]);
  long long pr = PyLong_AsLongLong(args[2]);
  if (a == nullptr || PyErr_Occurred()) return nullptr;
  std::lock_guard<std::mutex> guard(a->mu);
  a->peak_allocated = pa;
  a->peak_reserved = pr;
  Py_RETURN_NONE;
}

// stats(alloc) -> (7 stat rows of 12, (retries, ooms, device allocs, device frees))
PyObject* stats(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return locked(args, nargs, "stats(allocator)", [](Allocator& a) {
    PyObject* rows = PyTuple_New(kNumStats);
    for (int s = 0; s < kNumStats; ++s) {
      PyObject* row = PyList_New(12);
      for (int i = 0; i < 12; ++i) PyList_SET_ITEM(row, i, PyLong_FromLongLong(a.stats[s][i]));
      PyTuple_SET_ITEM(rows, s, row);
    }
    return Py_BuildValue("(N(LLLL))", rows, static_cast<long long>(a.num_alloc_retries),
                         static_cast<long long>(a.num_ooms), static_cast<long long>(a.num_device_alloc),
                         static_cast<long long>(a.num_device_free));
  });
}

PyObject* empty_cache(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return locked(args, nargs, "empty_cache(allocator)", [](Allocator& a) {
    a.empty_cache();
    Py_RETURN_NONE;
  });
}

PyObject* reset_peak(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return locked(args, nargs, "reset_peak(allocator)", [](Allocator& a) {
    a.reset_peak();
    Py_RETURN_NONE;
  });
}

PyMethodDef g_methods[] = {
    MAYA_FASTCALL("new_allocator", new_allocator, "a caching allocator of this capacity"),
    MAYA_FASTCALL("malloc", malloc_, "(handle, 0) or (0, segment bytes that did not fit)"),
    MAYA_FASTCALL("free", free_, "return a block to the cache"),
    MAYA_FASTCALL("own", own, "allocate a fake tensor's storage; it frees itself when it dies"),
    MAYA_FASTCALL("see", see, "own, with the storage's size"),
    MAYA_FASTCALL("resize", resize, "UntypedStorage.resize_ of an owned storage"),
    MAYA_FASTCALL("figures", figures, "(allocated, reserved, peak allocated, peak reserved)"),
    MAYA_FASTCALL("set_peaks", set_peaks, "put back the peaks"),
    MAYA_FASTCALL("stats", stats, "raw stat rows and counters"),
    MAYA_FASTCALL("empty_cache", empty_cache, "release every fully free segment"),
    MAYA_FASTCALL("reset_peak", reset_peak, "peaks restart from the current values"),
};

}  // namespace maya_device_memory

extern "C" {
// {name: builtin} for emulator/memory/accounting.py (see emulator.device.boot.memory_functions)
PyObject* maya_memory_functions() { return maya_builtins::as_dict(maya_device_memory::g_methods); }
}
