"""Boot the fake CUDA device: build the C++ shim once, load it before `import torch`.

Why before: `at::detail::getCUDAHooks()` caches the first hooks object it finds, and the CUDA
device guard must be registered before any tensor touches `cuda`. So `boot()` must run in a
fresh process before torch is imported; the worker calls it first thing.

The shim is built with torch's cpp_extension (g++ + ninja) in a *subprocess* (building needs
`import torch`, which would be too early here) and cached per torch version and source hash
under `$MAYA_CACHE_DIR/ext/` (default `~/.cache/maya/ext/`). Concurrent workers wait on a file
lock, so a cold start of N ranks builds once.

CUDA builds of torch (e.g. the default PyPI wheel) bring their own guard, hooks and SDPA chooser
in libtorch_cuda; with no GPU (or with GPUs hidden, as the worker does) those call the driver and
fail ("CUDA driver version is insufficient", "hasPrimaryContext expects a valid device index") as
soon as a tensor moves to `cuda` or autograd runs. There the same shim is loaded the same way:
preloading torch's libraries pulls in libtorch_cuda, whose static registrations run first; ours
run next and replace them (the guard and SDPA slots are overwritten, the hooks are registered at a
higher priority), still before anything asked for the hooks. Either way the process never touches
a real GPU, and the Python layer (`emulator.device.cuda_shim`) answers the `torch.cuda` API.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

# the library's sources: the device itself, and its memory (the allocator, storages that free themselves)
_HERE = Path(__file__).resolve().parent
SOURCES = (_HERE / "fake_cuda.cpp", _HERE.parent / "memory" / "device_memory.cpp")
_BUILD_INPUTS = (*SOURCES, _HERE / "builtins.h")  # what the cached build depends on
LIB_NAME = "maya_fake_cuda"

_loaded: ctypes.CDLL | None = None


class DeviceBootError(RuntimeError):
    """The fake CUDA device could not be built or loaded (the message says why and what to do)."""


def cache_dir() -> Path:
    """Where built extensions live: $MAYA_CACHE_DIR/ext/<torch version>-<source hash>."""
    root = Path(os.environ.get("MAYA_CACHE_DIR") or Path.home() / ".cache" / "maya")
    digest = hashlib.sha256(b"".join(src.read_bytes() for src in _BUILD_INPUTS)).hexdigest()[:12]
    return root / "ext" / f"torch-{importlib.metadata.version('torch')}-{digest}"


def torch_lib_dir() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise DeviceBootError("torch is not installed in this Python environment")
    return Path(list(spec.submodule_search_locations)[0]) / "lib"


def library_path() -> Path:
    return cache_dir() / f"{LIB_NAME}.so"


def build(verbose: bool = False) -> Path:
    """Build the shim in a subprocess if it is not cached; returns the .so path."""
    lib = library_path()
    if lib.exists():
        return lib
    out = cache_dir()
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if lib.exists():  # another worker built it while we waited
            return lib
        cmd = [sys.executable, "-m", "emulator.device.build_ext", str(out)]
        proc = subprocess.run(cmd, capture_output=not verbose, text=True)
        if proc.returncode != 0 or not lib.exists():
            tail = ((proc.stdout or "") + (proc.stderr or ""))[-3000:]
            raise DeviceBootError(
                f"building the fake CUDA device ({', '.join(src.name for src in SOURCES)}) failed; it needs g++ and "
                f"ninja.\n{tail}")
    return lib


def boot(device_count: int, capability: tuple[int, int]) -> None:
    """Load the fake CUDA device into this process. Must run before `import torch`."""
    global _loaded
    if _loaded is not None:
        _loaded.maya_set_target(int(device_count), int(capability[0]), int(capability[1]))
        return
    if "torch" in sys.modules:
        raise DeviceBootError("emulator.device.boot.boot() must run before `import torch`")
    lib = build()
    libdir = torch_lib_dir()
    # on a CUDA build libtorch.so pulls in libtorch_cuda here, so its registrations precede ours
    for dep in ("libc10.so", "libtorch_cpu.so", "libtorch.so", "libtorch_python.so"):
        if (libdir / dep).exists():
            ctypes.CDLL(str(libdir / dep), mode=ctypes.RTLD_GLOBAL)
    _loaded = ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
    _loaded.maya_set_target(int(device_count), int(capability[0]), int(capability[1]))


def is_booted() -> bool:
    return _loaded is not None


def device_functions() -> dict | None:
    """{name: builtin} of the library's fake-tensor helpers (`device_in_cpp`, `device_in_python`,
    `meta_empty`, `meta_view`, `seal`; see fake_cuda.cpp and emulator.capture.fastpath.install);
    None before `boot`."""
    if _loaded is None:
        return None
    return _python_entry("maya_device_functions")


def memory_functions() -> dict | None:
    """{name: builtin} of the library's device memory (see device_memory.cpp and
    emulator.memory.accounting); None before `boot`."""
    if _loaded is None:
        return None
    return _python_entry("maya_memory_functions")


def _python_entry(name: str):
    # PyDLL: the call keeps the GIL (it builds Python objects)
    fn = getattr(ctypes.PyDLL(_loaded._name, handle=_loaded._handle), name)
    fn.argtypes, fn.restype = [], ctypes.py_object
    return fn()
