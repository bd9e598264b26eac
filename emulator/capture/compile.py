"""torch.compile for the emulated GPU: Inductor's CUDA partitioning and fusion, each generated kernel one row.

What a compiled model runs on a GPU is Inductor's plan for the target: extern kernels (mm,
addmm, SDPA: aten ops) and generated Triton kernels that fuse the rest. This runs that plan:
Dynamo traces the program's function with the recorder off (it does not trace under a dispatch
mode), AOT autograd and Inductor compile the graphs with the program's fake tensors as example
inputs, and the compiled code runs under the recorder, so its buffers are fake tensors of the
emulated allocator and its extern kernels are recorded as aten ops. Each Triton kernel launch
becomes one kernel row (`Recorder.record_launch`):

    op       `triton::<kind>`: pointwise, reduction, persistent_reduction, template, split_scan, ...
             (Inductor's heuristic type; family `generated` of `emulator.core.ops`: a pointwise kernel
             that loads each buffer once is timed by the learned elementwise family, the others by
             the roofline, labelled fallback: `emulator.core.ops.timing_family`)
    shapes   the tensor arguments' (dtypes, strides likewise)
    args     {"kernel": its name, "numel": x elements, "rnumel": reduction elements, and features of
             its body counted in the generated source: "loads", "stores", "reductions", "arith"
             (binary arithmetic), "transcendental" (exp, log, sqrt, erf, tanh, sigmoid, ...)}
    bytes    Inductor's own estimate of the kernel's traffic (`kernel_num_gb`, which counts sliced
             inputs by their slices); without it the sizes of the tensor arguments (an upper bound);
             plus, for a looped reduction that reads a buffer in several passes over its rows (a
             softmax or norm too wide for one block), each pass after the first (`reread_pointers`;
             args "passes" counts the loops, "reread_bytes" the bytes added)
    flops    Inductor's estimate (`kernel_flop`, given for templates); else one per element
             (numel x rnumel), as an eager elementwise row counts its outputs

Nothing is compiled to device code and nothing is autotuned (no device to time configs on): a
kernel's first config stands, and GEMMs stay extern kernels under `mode="max-autotune"` (the choice
needs benchmarks). `mode="reduce-overhead"` and `"max-autotune"` capture CUDA graphs, as on a GPU:
each compiled graph (forward, backward) is warmed up, captured into the emulated `CUDAGraph` and
replayed, so its kernels carry one launch (`graph_replay`) instead of a host gap each. Inductor's
one-graph path does the capturing (the trees need the caching allocator's pool checkpoints); it is
brought to the trees' behaviour where that changes the kernels or memory (`_install_graph_managed_inputs`).

`available()` is False without Triton (Inductor generates no GPU code then); the session falls
back to running compiled functions eagerly and counts them under `eager_fallbacks`.
`MAYA_COMPILE=eager` asks for that fallback.

The cpu target and `maya profile` on a CPU (`install_cpu`) run no emulated device: Inductor compiles the
program's graphs for this CPU and its C++ kernels run for real, each call one `cpp::pointwise` or
`cpp::reduction` row (the same dispatch-mode handling around the compiled call; the kernel's own time is kept
out of the host gaps and, when profiling, is the row's duration).

Why each patch exists (torch 2.13 CPU build, triton 3.9):
- every FakeTensorMode avoids device init, not only the emulator's: AOT autograd's and Inductor's
  own fake modes otherwise run constant computations for real on "cuda", which a CPU build cannot
  (Inductor's SDPA pattern tracing: "Could not run 'aten::empty_strided' with arguments from the
  'CUDA' backend");
- `joint_graph_constant_folding` off: that pass evaluates graph nodes on real device tensors;
- `shape_padding` off: Inductor's pad_mm pass times a misaligned GEMM padded and unpadded on real device
  tensors to choose ("Could not run 'aten::empty.memory_format' ... 'CUDA' backend"); with nothing to time,
  the unpadded plan stands, as a kernel's first config does;
- Dynamo's `CudaInterface` bound torch.cuda's functions when first imported, before the shim;
- Triton's active driver loads libcuda: a CudaDriver that only names the target (sm_XY) stands in,
  and Triton kernels neither compile (`precompile`) nor launch (`run` records a row);
- the generated code allocates and reinterprets buffers with C++ helpers that bypass the
  dispatcher (`_empty_strided_cuda`, `_reinterpret_tensor`): torch's API instead, so they are fake;
  `_cuda_getCurrentRawStream` is the emulated current stream's id.
The emulator's module hooks are paused while Dynamo traces (it would trace them too); rows of a
compiled region carry the module that called it.

Dispatch modes: Dynamo does not trace under the recorder, so the recorder leaves the stack while a
compiled function is called and goes back in its place for the compiled graph. The program's own
modes that Dynamo traces under on a GPU (`ignore_compile_internals`: selective activation
checkpointing's) stay on, as they do there, so its policy is asked about a region wrapped as one
`inductor_compiled_code` op (torchtitan's compiled FlexAttention; its runs here record the same trace
with or without these modes, so no test shows a difference yet); the recorder runs such a region's
compiled code (`Recorder._run_compiled_region`). Under any other mode of the program Dynamo
skips the frame on a GPU too, and the function runs eagerly (counted as "eager under a dispatch mode").

The program's own Triton kernels (`kernel[grid](...)`, `@triton.autotune`) are `install_user_kernels`'s.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
from collections import Counter

import torch
from torch.utils._python_dispatch import (
    _disable_current_modes,
    _get_current_dispatch_mode_stack,
    _pop_mode,
    _push_mode,
)

from emulator.capture import cpp_kernels
from emulator.core.ops import flops_and_bytes

# benchmark_kernel: Inductor writes its byte and FLOP estimates into each kernel's metadata (and a
# benchmark harness into the generated module, which nothing runs); shape_padding: Inductor pads a GEMM whose
# dimensions the tensor-core alignment does not divide only when timing both on the device says so (pad_mm)
_INDUCTOR_CONFIG = {"compile_threads": 1, "max_autotune": False, "max_autotune_gemm": False,
                    "max_autotune_pointwise": False, "coordinate_descent_tuning": False,
                    "joint_graph_constant_folding": False, "benchmark_kernel": True, "shape_padding": False,
                    "triton.cudagraphs": False, "triton.cudagraph_trees": False}
# the modes whose Inductor plan captures CUDA graphs on a GPU (torch's `list_mode_options`)
CUDAGRAPH_MODES = frozenset({"reduce-overhead", "max-autotune"})
_TRANSCENDENTAL = re.compile(r"\b(?:libdevice\.\w+|tl\.(?:exp|exp2|log|log2|sqrt|rsqrt|sin|cos|sigmoid|erf|"
                             r"tanh|fdiv)|tl_math\.\w+|math\.\w+)\s*\(")
_ARITH = re.compile(r"(?<=[\w)\]])\s*[-+*/%]\s*(?=[\w(])")
# a reduction along a block axis (sum, max, argmax, Welford, online softmax, scans); triton_helpers' elementwise
# helpers (maximum, minimum, promote_to_tensor, the loops' running combines) are not reductions
_REDUCTION_CALL = re.compile(r"\btl\.(?:sum|max|min|reduce|argmax|argmin|associative_scan|cumsum|cumprod)\("
                             r"|\btriton_helpers\.(?:max2|min2|prod|max_with_index|min_with_index|welford|any|"
                             r"online_softmax_reduce|exclusive_scan_decoupled_lookback(?:_64)?|sort_with_index)\(")
# a looped reduction's pass over the reduction dimension (`for r0_offset in tl.range(...)`; `roffset` before
# torch 2.6), a load's or store's pointer, and an index that moves with the reduction dimension (r0_1, r0_index, rindex)
_REDUCTION_LOOP = re.compile(r"^(\s*)for r\d*_?offset in ")
_ACCESS = re.compile(r"tl\.(load|store)\((\w+) \+ ")
_REDUCTION_INDEX = re.compile(r"\br\d+_\w+|\brindex\b|\broffset\b")


EAGER_BACKENDS = frozenset({"eager", "aot_eager"})
# the dispatch-mode stack of the compiled function being called (this thread's), for the compiled graph
_modes = threading.local()


def _runs_eagerly(backend) -> bool:
    """A compile whose backend runs the traced graph as it is: an eager backend by name, or torch compiling
    its own higher-order-op wrapper (FlexAttention's `torch.compile(wrapper, backend=<eager backend>)`)."""
    if isinstance(backend, str):
        return backend in EAGER_BACKENDS
    from torch._higher_order_ops import utils as hop_utils

    return bool(getattr(getattr(hop_utils, "_hop_compile_tls", None), "in_hop_compile", False))


def eager_asked() -> bool:
    """The user asked for compiled functions to run eagerly (`MAYA_COMPILE=eager`)."""
    return os.environ.get("MAYA_COMPILE", "inductor") == "eager"


def available() -> bool:
    """Inductor can plan CUDA kernels here (Triton is installed) and the user did not ask for eager."""
    if eager_asked():
        return False
    try:
        import triton  # noqa: F401
        from triton.backends.nvidia.driver import CudaDriver  # noqa: F401
    except ImportError:
        return False
    return True


def install(rec, counts: Counter) -> None:
    """Replace torch.compile by an Inductor compile whose kernels `rec` records; `counts` gets one entry per
    compiled function (`torch.compile`) and per mode asked for (`mode=<mode>`)."""
    from torch._inductor import config
    from torch._subclasses.fake_tensor import FakeTensorMode

    FakeTensorMode.avoid_device_init = property(lambda self: True)
    # Inductor's compile workers are other processes, where Triton finds no GPU driver (the emulated one is
    # this process's): every compile here, whichever backend asks for it, stays in-process
    config.compile_threads = 1
    _refresh_dynamo_device_interface()
    _install_triton_stand_ins(rec)
    _install_compile_wrapper(rec, counts, _inductor_recorded)


def install_cpu(rec, counts: Counter, eager: Counter) -> None:
    """torch.compile for the cpu target and `maya profile` on this CPU: Inductor compiles and runs its C++
    kernels for real (what the program runs here), and each generated kernel call is one kernel row
    (`cpp::<kind>`, family `generated`), its tensors' sizes as bytes, timed by `maya profile`. Without this the
    compiled program ran eagerly and its trace held the unfused ops: another program than the one timed.
    Inductor is set up at the program's first torch.compile call (`_cpu_inductor_ready`): importing it costs a
    rank seconds, which a program that compiles nothing never pays; without a C++ compiler there, that call and
    every later one run eagerly, counted in `eager`."""
    _install_compile_wrapper(rec, counts, _inductor_cpu_recorded,
                             ready=functools.partial(_cpu_inductor_ready, rec), eager=eager)


@functools.cache
def _cpu_inductor_ready(rec) -> bool:
    """Inductor finds a C++ compiler here (its own search: `cpp_builder.get_cpp_compiler`); if so, its kernels
    load in this process (one compile thread) and each loaded kernel is wrapped to record its calls."""
    from torch._inductor import config, exc
    from torch._inductor.async_compile import AsyncCompile
    from torch._inductor.cpp_builder import get_cpp_compiler

    try:
        get_cpp_compiler()
    except exc.InvalidCxxCompiler:
        return False
    config.compile_threads = 1
    original = AsyncCompile.cpp_pybinding

    def cpp_pybinding(self, argtypes, source_code):
        return _recorded_cpp_kernel(rec, original(self, argtypes, source_code), source_code)

    AsyncCompile.cpp_pybinding = cpp_pybinding
    return True


def _recorded_cpp_kernel(rec, kernel, src: str):
    """The loaded kernel, wrapped to record each call as one `cpp::<kind>` row whose arguments carry the body's
    counts and the elements the call touches (`emulator.capture.cpp_kernels`)."""
    op = f"cpp::{cpp_kernels.kernel_kind(src)}"
    launch = {**cpp_kernels.body_counts(src), **cpp_kernels.kernel_work(src)}
    # the row's FLOPs and bytes by the one rule that reads the loops' counts (worked out once per kernel); a kernel
    # whose loop bounds are not literal has none: its arguments' sizes stand in, per call
    counted = flops_and_bytes(op, [], [], args=launch) if "read_bytes" in launch else None

    def call(*args):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        numel = max((t.numel() for t in tensors), default=0)
        flops, nbytes = counted or (float(numel), None)
        return rec.record_launch(op, tensors, {**launch, "numel": numel}, flops, nbytes, writes=True,
                                 run=lambda: kernel(*args))

    return call


def _install_compile_wrapper(rec, counts: Counter, compile_graph, ready=None, eager: Counter | None = None) -> None:
    """torch.compile -> Dynamo, each graph compiled by `compile_graph(rec, options, gm, example_inputs)` and
    called with the dispatch modes the recorder needs (below); where `ready()` says Inductor cannot compile
    here, the function runs eagerly and is counted in `eager`."""
    original = torch.compile

    def compile_for_emulation(model=None, *, backend="inductor", mode=None, options=None, **kwargs):
        if model is None:  # used as @torch.compile(...)
            return lambda fn: compile_for_emulation(fn, backend=backend, mode=mode, options=options, **kwargs)
        if _runs_eagerly(backend):  # running the function is the same work, and Dynamo cannot trace the recorder
            return model
        if backend != "inductor":
            return original(model, backend=backend, mode=mode, options=options, **kwargs)
        if ready is not None and not ready():
            eager["torch.compile"] += 1
            return model
        counts["torch.compile"] += 1
        if mode is not None:
            counts[f"mode={mode}"] += 1
        target = model.forward if isinstance(model, torch.nn.Module) else model
        options = dict(options or {})
        if mode in CUDAGRAPH_MODES:
            options.setdefault("triton.cudagraphs", True)
        compiled = original(target, backend=functools.partial(compile_graph, rec, options), **kwargs)

        @functools.wraps(target)
        def call(*args, **kw):
            with rec.own_work():  # this wrapper's work is the emulator's, not the program's host time
                stack = _get_current_dispatch_mode_stack()
                program = [m for m in stack if m is not rec]
                eager = any(not (m.is_infra_mode() or m.ignore_compile_internals()) for m in program)
                if not eager:
                    rec.tracker.pause()
                    outer = getattr(_modes, "stack", None)
                    _modes.stack = stack  # `run` puts the recorder back where it was
            if eager:
                # under such a mode of the program Dynamo skips the frame on a GPU too: the function runs eagerly
                counts["eager under a dispatch mode"] += 1
                return target(*args, **kw)
            try:
                # Dynamo does not trace under the recorder; the program's modes that let it (selective
                # activation checkpointing's) stay, as on a GPU
                with only_these_modes(rec, program):
                    return compiled(*args, **kw)
            finally:
                with rec.own_work():
                    _modes.stack = outer
                    rec.tracker.resume()

        if isinstance(model, torch.nn.Module):
            model.forward = call  # a module stays a module (state_dict, parameters, .train())
            return model
        return call

    compile_for_emulation.__wrapped__ = original
    torch.compile = compile_for_emulation


@contextlib.contextmanager
def only_these_modes(rec, modes: list):
    """Run the body under `modes` alone (every other dispatch mode off), and restore the stack after.

    Swapping the mode stacks around a compiled call is the emulator's work, which a GPU run does not do: it is
    the recorder's own time (`Recorder.own_work`), so that only the compiled function's own work (Dynamo's
    guards, AOTAutograd's wrappers, Inductor's wrapper code) reaches the program's host gaps."""
    with contextlib.ExitStack() as outside:
        with rec.own_work():
            outside.enter_context(_disable_current_modes())
            for mode in modes:
                _push_mode(mode)
        try:
            yield
        finally:
            with rec.own_work():
                for _ in modes:
                    _pop_mode()
                outside.close()  # the program's modes back


def _inductor_recorded(rec, options: dict, gm, example_inputs):
    # importing compile_fx costs a rank seconds; a program that compiles nothing never pays it
    _install_graph_managed_inputs()
    from torch._inductor.compile_fx import compile_fx

    # the program's options, except what needs a GPU; with `triton.cudagraphs` Inductor's one-graph path
    # (`cudagraphify_impl`: static input copies, a warm-up on a side stream, capture, replays) drives the
    # emulated torch.cuda.CUDAGraph: the trees need the caching allocator's private-pool checkpoints,
    # which the emulated allocator does not have
    patches = {**options, **_INDUCTOR_CONFIG, "triton.cudagraphs": bool(options.get("triton.cudagraphs"))}
    # as config_patches, not a `with config.patch`: AOTAutograd compiles the backward graph at the first
    # backward call, after this returns, and Inductor re-applies config_patches there
    return _in_callers_place(rec, compile_fx(gm, example_inputs, config_patches=patches))


def _inductor_cpu_recorded(rec, options: dict, gm, example_inputs):
    """Inductor's plan for this CPU (`_cpu_inductor_ready` set it up)."""
    from torch._inductor.compile_fx import compile_fx

    return _in_callers_place(rec, compile_fx(gm, example_inputs, config_patches=options))


def _in_callers_place(rec, compiled):
    """The compiled graph, run under the recorder (the caller took it off the stack) in its place."""
    def run(*args):
        with only_these_modes(rec, getattr(_modes, "stack", None) or [rec]):
            return compiled(*args)

    return run


def _install_graph_managed_inputs() -> None:
    """Inductor's one-graph path copies every input that is not a parameter into a static buffer before each
    replay. Under `reduce-overhead` a GPU runs CUDA-graph trees instead, where an input that another graph
    of the tree produced (the forward's saved activations, read by the backward) already lives in the
    tree's pool and is not copied; only the program's own inputs are (the batch). So an input whose
    storage is a captured graph's static output counts as static here too: no copy kernel, no buffer.
    And a tree returns each replay's outputs as new tensors over its pool, so autograd takes a gradient
    output as the parameter's `.grad` (the one-graph path returns the same tensors every replay, which
    autograd must clone: one copy kernel per parameter); each output here is a new alias likewise. The
    graphs of a device share one memory pool, as a tree's do (the one-graph path gives each its own)."""
    from torch._inductor import compile_fx as cfx

    if getattr(cfx.cudagraphify_impl, "_maya", False):
        return
    original = cfx.cudagraphify_impl
    outputs: set[int] = set()  # storages of graphs' static outputs (private pools are never released)
    pools: dict[int, tuple] = {}  # device -> the one memory pool its graphs share, as a tree's do

    def _ptr(t) -> int | None:
        return t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) and t.device.type == "cuda" else None

    def cudagraphify_impl(model, inputs, static_input_idxs=()):
        managed = [i for i, x in enumerate(inputs) if (p := _ptr(x)) is not None and p in outputs]
        graph = torch.cuda.graph
        torch.cuda.graph = functools.partial(graph, pool=_tree_pool(pools))
        try:
            run = original(model, inputs, tuple(sorted({*static_input_idxs, *managed})))
        finally:
            torch.cuda.graph = graph

        def replay(new_inputs):
            out = run(new_inputs)
            many = isinstance(out, (list, tuple))
            fresh = []
            for t in out if many else (out,):
                if (p := _ptr(t)) is not None:
                    outputs.add(p)
                    t = torch.ops.aten.alias.default(t)  # a new tensor over the static output, as a tree hands out
                fresh.append(t)
            return type(out)(fresh) if many else fresh[0]

        return replay

    cudagraphify_impl._maya = True
    cfx.cudagraphify_impl = cudagraphify_impl


def _tree_pool(pools: dict) -> tuple:
    device = torch.cuda.current_device()
    if device not in pools:
        pools[device] = torch.cuda.graph_pool_handle()
    return pools[device]


def _refresh_dynamo_device_interface() -> None:
    from torch._dynamo.device_interface import CudaInterface

    cuda = torch.cuda
    for name in ("device", "Event", "Stream"):
        setattr(CudaInterface, name, getattr(cuda, name))
    for name, src in (("current_device", "current_device"), ("set_device", "set_device"),
                      ("device_count", "device_count"), ("stream", "stream"), ("current_stream", "current_stream"),
                      ("set_stream", "set_stream"), ("synchronize", "synchronize"),
                      ("get_device_properties", "get_device_properties"), ("exchange_device", "_exchange_device"),
                      ("maybe_exchange_device", "_maybe_exchange_device"), ("memory_allocated", "memory_allocated"),
                      ("is_bf16_supported", "is_bf16_supported"), ("is_available", "is_available")):
        setattr(CudaInterface, name, staticmethod(getattr(cuda, src)))


def kernel_features(src: str) -> dict[str, int]:
    """Counts over a generated Triton kernel's body: loads, stores, reductions, binary arithmetic and
    transcendental calls (the features Maya's appendix uses for Triton kernels). Index arithmetic
    counts too: a lower bound of neither, a consistent feature of both."""
    body = [line.strip() for line in src.splitlines() if line.strip() and not line.strip().startswith(("#", "@"))]
    text = "\n".join(body)
    return {"loads": text.count("tl.load("), "stores": text.count("tl.store("),
            "reductions": len(_REDUCTION_CALL.findall(text)),
            "arith": len(_ARITH.findall(text)), "transcendental": len(_TRANSCENDENTAL.findall(text)),
            "passes": sum(1 for line in body if _REDUCTION_LOOP.match(line))}


def reread_pointers(src: str) -> dict[str, int]:
    """Buffers a looped reduction reads or writes in more passes over its reduction dimension than
    Inductor's byte count (`kernel_num_gb`: each buffer once, an in-place one twice) includes: {argument
    name: the accesses beyond it}. A softmax or a norm whose rows do not fit one block loops over the row once
    to reduce (max, sum, mean, variance) and again to normalise, loading the row each time; a kernel may also
    store a row in one pass and load it back in the next. An access counts for a pass when its index moves
    with the reduction dimension (a per-row value loaded before the loops is read once)."""
    accesses: dict[str, set[tuple[int, str]]] = {}
    loop, indent = -1, None
    for line in src.splitlines():
        if not line.strip():
            continue
        start = _REDUCTION_LOOP.match(line)
        if start:
            loop, indent = loop + 1, len(start.group(1))
            continue
        if indent is not None and len(line) - len(line.lstrip()) <= indent:
            indent = None  # the loop's body ended
        if indent is None:
            continue
        for m in _ACCESS.finditer(line):
            if _REDUCTION_INDEX.search(_parenthesised(line, m.end())):
                accesses.setdefault(m.group(2), set()).add((loop, m.group(1)))
    counted = {name: 2 if name.startswith("in_out_ptr") else 1 for name in accesses}
    return {name: len(a) - counted[name] for name, a in accesses.items() if len(a) > counted[name]}


def _parenthesised(text: str, at: int) -> str:
    """The balanced parenthesised expression starting at `text[at]` (a load's index), or '' if none."""
    if at >= len(text) or text[at] != "(":
        return ""
    depth = 0
    for i in range(at, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[at:i + 1]
    return text[at:]


def describe_kernel(autotuner) -> tuple[str, dict, float | None, float | None, dict[str, int]]:
    """(op, static args, flops, bytes, pointers read again: `reread_pointers`) of one generated kernel,
    worked out once per kernel."""
    cached = getattr(autotuner, "_maya_kernel", None)
    if cached is not None:
        return cached
    fn = getattr(autotuner, "fn", None)
    name = getattr(fn, "__name__", None) or getattr(getattr(fn, "fn", None), "__name__", "kernel")
    kind = getattr(getattr(autotuner, "heuristic_type", None), "name", "generated").lower()
    src = getattr(fn, "src", "") or ""
    meta = getattr(autotuner, "inductor_meta", None) or {}
    num_gb = meta.get("kernel_num_gb")
    flop = meta.get("kernel_flop")
    args = {"kernel": name, **kernel_features(src)}
    cached = (f"triton::{kind}", args, float(flop) if flop else None, float(num_gb) * 1e9 if num_gb else None,
              reread_pointers(src))
    autotuner._maya_kernel = cached
    return cached


def _install_triton_stand_ins(rec) -> None:
    import torch._inductor.runtime.triton_heuristics as heuristics
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.driver import CudaDriver
    from triton.runtime import driver

    class EmulatedDriver(CudaDriver):
        """The emulated GPU as Triton sees it: a target to generate code for, no libcuda (a CudaDriver,
        so that Inductor's set_driver_to_gpu keeps it)."""

        def __init__(self):  # CudaDriver's loads libcuda
            major, minor = torch.cuda.get_device_capability()
            self.target = GPUTarget("cuda", major * 10 + minor, 32)

        def is_active(self):
            return True

        def get_current_target(self):
            return self.target

        def get_current_device(self):
            return torch.cuda.current_device()

        def set_current_device(self, device):
            torch.cuda.set_device(device)

        def get_current_stream(self, device=None):
            return torch.cuda.current_stream().stream_id

        def get_active_torch_device(self):
            return torch.device("cuda", torch.cuda.current_device())

        def get_device_interface(self):
            return torch.cuda

    driver.set_active(EmulatedDriver())

    def precompile(self, *args, **kwargs):
        self.compile_results = []  # no device code for a device that does not exist

    def run(self, *args, stream=None, **kwargs):
        op, static, flops, nbytes, reread = describe_kernel(self)
        names = list(getattr(self.fn, "arg_names", []) or [])
        ints = {n: a for n, a in zip(names, args, strict=False) if isinstance(a, int) and n.endswith("numel")}
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        numel = int(ints.get("xnumel", 1)) * int(ints.get("ynumel", 1))
        rnumel = int(ints.get("r0_numel", ints.get("rnumel", 1))) * int(ints.get("r1_numel", 1))
        if flops is None:
            flops = float(numel * rnumel)
        launch = {**static, "numel": numel, "rnumel": rnumel}
        again = 0.0
        if reread:  # a looped reduction's later passes move these buffers again
            again = float(sum(reread.get(n, 0) * a.numel() * a.element_size()
                              for n, a in zip(names, args, strict=False) if isinstance(a, torch.Tensor)))
        if again:
            launch["reread_bytes"] = again
        rec.record_launch(op, tensors, launch, flops, nbytes, extra_bytes=again)

    heuristics.CachingAutotuner.precompile = precompile
    heuristics.CachingAutotuner.run = run
    torch._C._cuda_getCurrentRawStream = lambda device: torch.cuda.current_stream().stream_id
    guards = torch._C._dynamo.guards
    guards._empty_strided_cuda = lambda size, stride, dtype: torch.empty_strided(size, stride, dtype=dtype,
                                                                                 device="cuda")
    guards._reinterpret_tensor = lambda t, size, stride, offset=0: t.as_strided(size, stride,
                                                                                t.storage_offset() + offset)


def install_user_kernels(rec) -> bool:
    """Triton kernels the program launches itself (`kernel[grid](...)`, torchtitan's MoE index kernel):
    one kernel row each, `triton::user`, neither compiled nor run (there is no device). False without Triton.

    The row: the tensor arguments' shapes, dtypes and strides, `args` {"kernel": its name, "grid": the
    launch grid, and the body counts of `kernel_features`}; no FLOP count (a hand-written kernel says
    nothing of its work: the roofline times it by its bytes), bytes the tensor arguments' sizes (an
    upper bound). A kernel may store through any pointer it gets, so the tensor arguments' host values
    (emulator.capture.shadows) are dropped. `@triton.autotune` has no device to time its configs on:
    they all tie and the first stands, as for Inductor's kernels."""
    try:
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.jit import JITFunction
    except ImportError:
        return False

    def run(self, *args, grid, warmup, **kwargs):
        if warmup:  # compiles ahead of a launch; nothing runs on the device
            return None
        bound = {**dict(zip(self.arg_names, args, strict=False)), **kwargs}
        launch = grid(bound) if callable(grid) else grid
        launch = [int(g) for g in (launch if isinstance(launch, (tuple, list)) else (launch,))]
        tensors = [a for a in bound.values() if isinstance(a, torch.Tensor)]
        static = {"kernel": getattr(self, "__name__", None) or getattr(self.fn, "__name__", "kernel"),
                  "grid": launch, **kernel_features(getattr(self, "src", "") or "")}
        rec.record_launch("triton::user", tensors, static, None, None, writes=True)
        return None

    def bench(self, *args, config, **meta):
        return [0.0, 0.0, 0.0]  # triton's (median, 20th, 80th percentile) of the run times

    JITFunction.run = run
    Autotuner._bench = bench
    return True

