"""`maya`: the command line. Thin: each command parses flags and calls one function.

torchrun's command line works (`emulator.cli_args`): `--nproc-per-node`, `--nnodes` size the job, its other
launcher flags are accepted and ignored, and `-m module` works like python's.
Calibration lives in `pipelines` (Dagster); it runs in its own process so the emulator never
imports the orchestrator.

Every subcommand that runs or reads a job exits with one code of `emulator.core.exitcodes`
(listed in `--help`): 0 only when the prediction (or emulation) is valid.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from emulator import cli_args
from emulator.cli_args import NNODES_HELP, NPROC_HELP, TorchrunCommand
from emulator.core.exitcodes import Exit, outcome
from emulator.core.exitcodes import table as exit_table

if TYPE_CHECKING:
    from emulator.report.prediction import Prediction

EXIT_CODES = "Exit codes:\n\n\b\n" + exit_table()  # \b: click keeps the lines as they are

app = typer.Typer(add_completion=True, no_args_is_help=True, rich_markup_mode=None, epilog=EXIT_CODES,
                  help="Predict time, memory and cost of a PyTorch training job on a GPU cluster, without the GPUs.")


def _version(value: bool) -> None:
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    def v(dist: str) -> str:
        try:
            return version(dist)
        except PackageNotFoundError:
            return "not installed"

    print(f"maya {v('maya')} (torch {v('torch')})")
    raise typer.Exit(0)


@app.callback()
def _app(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="print maya's and torch's versions and exit")):
    """Predict time, memory and cost of a PyTorch training job on a GPU cluster, without the GPUs."""


def _console(stderr: bool = False) -> Console:
    """A console sized to the terminal, at least 120 columns so tables don't fold when piped."""
    c = Console(stderr=stderr)
    return Console(stderr=stderr, width=max(c.width, 120)) if not c.is_terminal else c


_PASSTHROUGH = {"ignore_unknown_options": True, "allow_interspersed_args": False, "allow_extra_args": True}


def _program(script: str | None, module: str | None,
             args: list[str] | None) -> tuple[str | None, str | None, list[str]]:
    if script and not module and script.startswith("-") and script != "-":
        _refuse(cli_args.unknown_flag_message(script))
    if bool(script) == bool(module):
        if module and script:  # `-m mod arg1 ...`: typer put the first program arg into SCRIPT
            return None, module, [script, *(args or [])]
        raise typer.BadParameter("give a SCRIPT or -m MODULE (exactly one)")
    return script, module, list(args or [])


def _launcher(ctx: typer.Context, nproc_per_node: str, nnodes: str, gpus_per_node) -> tuple[int, int]:
    """torchrun's launcher flags: (processes per node, nodes), after one note line for the ignored flags and
    one for an elastic --nnodes range; `gpus_per_node` (a count, or a function giving it) sizes gpu/auto."""
    if ctx.meta.get("torchrun_no_python"):
        _refuse("--no-python cannot be honoured: maya emulates Python programs (give a script or -m module)")
    try:
        if str(nproc_per_node).strip().lower() in ("gpu", "auto", "cpu") and callable(gpus_per_node):
            gpus_per_node = gpus_per_node()
        nproc = cli_args.nproc_per_node(nproc_per_node, None if callable(gpus_per_node) else gpus_per_node)
        nodes, elastic = cli_args.nnodes(nnodes)
    except cli_args.LauncherFlagError as e:
        _refuse(str(e))
    err = _console(stderr=True)
    for line in (cli_args.ignored_note(ctx.meta.get("torchrun_ignored") or []), elastic):
        if line:
            err.print(line, highlight=False, markup=False, soft_wrap=True)
    return nproc, nodes


def _local_gpus() -> int:
    """GPUs of this machine for `maya profile --nproc-per-node gpu|auto` (1 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 1


def _routing(spec: str | None) -> str | None:
    """The routing policy's canonical form (a trace file's absolute path), or exit naming the problem."""
    from emulator.core.routing import RoutingPolicy, RoutingPolicyError

    if spec is None:
        return None
    try:
        return RoutingPolicy.parse(spec).spec
    except RoutingPolicyError as e:
        _console().print(f"[red]{e}[/red]")
        raise typer.Exit(2) from None


_ROUTING_HELP = ("expert choices where the device cannot know them: balanced (default), zipf:S (skewed loads), "
                 "trace:FILE (measured per-layer loads)")


_UNSUPPORTED_HELP = ("an op the emulator cannot size or run: record a best-guess output timed by the roofline "
                     "and count it, instead of stopping")


def _gpu(key: str):
    from emulator.core.hardware import UnknownGPUError, get_gpu

    try:
        return get_gpu(key)
    except UnknownGPUError as e:
        _refuse(str(e))


def _target(gpu: str, gpu_spec: Path | None = None, cluster: Path | None = None):
    """The part to emulate: the variant of `--gpu-spec FILE`, else the `[gpu]` variant table of the
    cluster file, else `--gpu` (a cluster file that only names a part does not override `--gpu`)."""
    from emulator.core.variants import GPUVariantError, read_gpu_spec_file
    from emulator.simulate.cluster import ClusterFileError, read_cluster_file

    try:
        if gpu_spec is not None:
            return read_gpu_spec_file(gpu_spec)
        if cluster is not None:
            named = read_cluster_file(cluster).get("gpu")
            spec = _gpu(named) if named else None
            if spec is not None and spec.variant_table is not None:
                return spec
    except (GPUVariantError, ClusterFileError) as e:
        _refuse(str(e))
    return _gpu(gpu)


def _refuse(message: str, code: Exit = Exit.BAD_INPUT):
    """One line on stderr saying what is wrong, and the exit code for it."""
    _console(stderr=True).print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _run_job(run, **kwargs):
    """Run a job (emulation or profile); a job that cannot run as given is one line and BAD_INPUT."""
    from emulator.launch.job import BadJob

    try:
        return run(**kwargs)
    except BadJob as e:
        _refuse(str(e))


BOOTSTRAP_MINUTES = 2  # `python -m maya_models.bootstrap` on two cores (its rows per family are capped)


def _check_predictors(spec, roofline_only: bool, bootstrap: bool = True) -> None:
    """Before a long emulation: make sure the target has predictors to time it. On first use of a GPU part
    they are trained from the committed reference data (`maya_models.bootstrap`, in its own process): the
    part's own measurements, else the cross-GPU model from the other parts'. Refuse, naming the fix, with
    `--no-bootstrap`, for the CPU (no reference data of it), or when bootstrapping does not produce them."""
    if roofline_only:
        return
    from emulator.estimate.registry import predictors_available, reference_parts

    problem = predictors_available(spec)
    if not problem:
        return
    part = spec.model_key
    fix = f"\n  - or train them from the committed reference data: `maya models bootstrap --gpu {part}`"
    if not bootstrap or spec.is_cpu:
        _refuse(problem + ("" if spec.is_cpu else fix + " (or drop --no-bootstrap)"))
    err = _console(stderr=True)
    if part in reference_parts():
        err.print(f"training predictors for {part} from the committed reference data (first use, "
                  f"~{BOOTSTRAP_MINUTES} min) ...", highlight=False, markup=False)
    else:
        err.print(f"no reference measurements of {part}: training the cross-GPU predictors for it from the other "
                  f"parts' committed reference data (first use, ~{BOOTSTRAP_MINUTES} min); the prediction will "
                  "use the cross-GPU model ...", highlight=False, markup=False, soft_wrap=True)
    rc = _stream([sys.executable, "-m", "maya_models.bootstrap", "--gpu", part], err)
    problem = predictors_available(spec)
    if rc != 0 or problem:
        _refuse(f"bootstrapping the predictors for {part} failed (exit {rc})" + (f": {problem}" if problem else ""))


def _stream(cmd: list[str], console: Console) -> int:
    """Run `cmd`, its output line by line on `console` (stderr: stdout stays the answer's); its exit code."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            console.print("  " + line.rstrip(), highlight=False, markup=False, soft_wrap=True)
        return proc.wait()


def _trace_gpu(trace_dir: Path) -> str | None:
    """The GPU a saved emulation targeted (None when its emulation.json cannot say)."""
    import json

    from emulator.trace.layout import EMULATION_JSON

    try:
        return json.loads((trace_dir / EMULATION_JSON).read_text()).get("gpu")
    except (OSError, ValueError, AttributeError):
        return None


_SCRIPT = typer.Argument(None, help="training script (or use -m MODULE); what follows it is the program's")
_ARGS = typer.Argument(None, help="arguments passed to the program, unchanged")
_MODULE = typer.Option(None, "-m", "--module", help="run a module, like python -m")
_NPROC = typer.Option("1", "--nproc-per-node", "--nproc_per_node", help=NPROC_HELP)
_NNODES = typer.Option("1", "--nnodes", help=NNODES_HELP)
_GPU = typer.Option("h100", "--gpu", help="target GPU part (see `maya gpus`)")
_GPU_SPEC = typer.Option(None, "--gpu-spec",
                         help="TOML/JSON file with a [gpu] table: a known part plus what differs (memory, HBM "
                              "bandwidth, power limit / sustained clock, NVLink, price); overrides --gpu")
_ITERATIONS = typer.Option(None, "--iterations", help="stop cleanly after K optimizer steps (default: run to the end)")
_DEDUP = typer.Option(True, "--dedup/--no-dedup", help="emulate ranks with identical work once")
_JOBS = typer.Option(None, "--jobs", min=1, help="ranks emulated in parallel (default: cores)")
_ROUTING = typer.Option(None, "--routing", help=_ROUTING_HELP)
_ALLOW_UNSUPPORTED = typer.Option(False, "--allow-unsupported", help=_UNSUPPORTED_HELP)


@app.command(cls=TorchrunCommand, context_settings=_PASSTHROUGH, epilog=EXIT_CODES)
def emulate(
    ctx: typer.Context,
    script: str = _SCRIPT,
    args: list[str] = _ARGS,
    module: str = _MODULE,
    gpu: str = _GPU,
    gpu_spec: Path = _GPU_SPEC,
    nproc_per_node: str = _NPROC,
    nnodes: str = _NNODES,
    iterations: int = _ITERATIONS,
    out: Path = typer.Option(Path("out"), "--out", help="output folder for the trace"),
    dedup: bool = _DEDUP,
    jobs: int = _JOBS,
    routing: str = _ROUTING,
    allow_unsupported: bool = _ALLOW_UNSUPPORTED,
):
    """Run the program on an emulated GPU cluster and write a trace per rank."""
    from emulator.launch.emulate import run_emulation

    spec = _target(gpu, gpu_spec)
    script, module, argv = _program(script, module, args)
    nproc_per_node, nnodes = _launcher(ctx, nproc_per_node, nnodes, spec.gpus_per_node)
    summary = _run_job(run_emulation, script=script, module=module, argv=argv, gpu=spec.key,
                       nproc_per_node=nproc_per_node, nnodes=nnodes, iterations=iterations, out=out, dedup=dedup,
                       jobs=jobs, routing=_routing(routing), allow_unsupported=allow_unsupported)
    raise typer.Exit(summary.outcome())


@app.command(cls=TorchrunCommand, context_settings=_PASSTHROUGH, epilog=EXIT_CODES)
def profile(
    ctx: typer.Context,
    script: str = _SCRIPT,
    args: list[str] = _ARGS,
    module: str = _MODULE,
    nproc_per_node: str = typer.Option("1", "--nproc-per-node", "--nproc_per_node",
                                       help="processes per node, as torchrun: a number, or gpu / auto for this "
                                            "machine's GPUs"),
    nnodes: str = typer.Option("1", "--nnodes", help="as torchrun; profiling runs on this machine only: must be 1"),
    iterations: int = _ITERATIONS,
    out: Path = typer.Option(Path("out-profile"), "--out", help="output folder for the measured trace"),
    timing_only: bool = typer.Option(False, "--timing-only",
                                     help="record nothing; only each iteration's wall time (the program's own speed)"),
):
    """Run the program for real on the local device and write the same trace with measured durations."""
    from emulator.launch.profile import run_profile

    script, module, argv = _program(script, module, args)
    nproc_per_node, nodes = _launcher(ctx, nproc_per_node, nnodes, _local_gpus)
    if nodes != 1:
        _refuse(f"--nnodes {nnodes}: `maya profile` runs on this machine only (use `maya emulate` for a cluster)")
    summary = _run_job(run_profile, script=script, module=module, argv=argv, nproc_per_node=nproc_per_node,
                       iterations=iterations, out=out, timing_only=timing_only)
    raise typer.Exit(summary.outcome())


def run_simulation(trace_dir: Path, console: Console | None = None, debug: bool = False, as_json: bool = False,
                   **options) -> tuple[Prediction | None, Exit]:
    """`maya simulate` (and the simulate half of `maya predict`): (the prediction, printed, and its exit
    code), or (None, code) after one line saying why the folder cannot be simulated (`debug`: the
    traceback instead)."""
    from emulator.pipeline import EXPECTED_ERRORS, predict_from_trace
    from emulator.report.table import print_prediction
    from emulator.trace.summaries import InterruptedEmulation

    c = console or _console(stderr=as_json)
    try:
        pred = predict_from_trace(trace_dir, **options)
    except EXPECTED_ERRORS as e:
        if debug:
            raise
        (console or _console(stderr=True)).print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
        return None, Exit.INTERRUPTED if isinstance(e, InterruptedEmulation) else Exit.BAD_INPUT
    print_prediction(pred, c, out_dir=trace_dir)
    if as_json:
        _print_json(trace_dir, pred)
    return pred, outcome(oom=pred.oom, failed=pred.emulation_failed is not None, hang=pred.hang is not None)


def _print_json(trace_dir: Path, pred: Prediction) -> None:
    """prediction.json as written (the prediction's JSON when no file was written), alone on stdout."""
    import json

    from emulator.trace.layout import PREDICTION_JSON

    f = trace_dir / PREDICTION_JSON
    sys.stdout.write(f.read_text() if f.exists() else json.dumps(pred.to_json(), indent=1, default=str))
    sys.stdout.write("\n")
    sys.stdout.flush()


def simulate_command(trace_dir: Path, console: Console | None = None, **options) -> Prediction | None:
    """The prediction of `run_simulation`, or None when the folder cannot be simulated."""
    return run_simulation(trace_dir, console, **options)[0]


def _simulate_options(gpu, nnodes, nproc_per_node, cluster, price_per_gpu_hour, tokens_per_iteration, timeline,
                      roofline_only=False):
    return dict(gpu=gpu, nnodes=nnodes, nproc_per_node=nproc_per_node, cluster=cluster,
                price_per_gpu_hour=price_per_gpu_hour, tokens_per_iteration=tokens_per_iteration,
                timeline=timeline, roofline_only=roofline_only)


_NO_BOOTSTRAP = typer.Option(False, "--no-bootstrap",
                             help="without predictors for the part, refuse instead of training them from the "
                                  "committed reference data (first use)")
_JSON = typer.Option(False, "--json", help="print prediction.json to stdout (only JSON there; the table goes to "
                                          "stderr); exit codes unchanged")
_DEBUG = typer.Option(False, "--debug", help="on an unreadable folder, show the traceback, not one line")
_CLUSTER = typer.Option(None, "--cluster", help="cluster description (JSON/TOML): part, nodes, links, price")
_PRICE = typer.Option(None, "--price-per-gpu-hour", min=0,
                      help="USD per GPU-hour for the cost (default: the cluster file's, else the part's price)")
_TOKENS = typer.Option(None, "--tokens-per-iteration", min=1,
                       help="tokens one optimizer step consumes, for tokens/s and cost per token (default: "
                            "inferred from the input batch)")
_TIMELINE = typer.Option(True, "--timeline/--no-timeline",
                         help="write OUT/timeline.json (Perfetto); --no-timeline simulates rank classes only, faster")
_ROOFLINE = typer.Option(False, "--roofline-only",
                         help="time every op with the labelled analytical fallback (no predictors)")


@app.command(epilog=EXIT_CODES)
def simulate(
    trace_dir: Path = typer.Argument(..., help="an emulation output folder"),
    gpu: str = typer.Option(None, help="re-target another GPU (default: the emulated one)"),
    gpu_spec: Path = typer.Option(None, "--gpu-spec",
                                  help="re-target a GPU variant: TOML/JSON file with a [gpu] table (overrides --gpu)"),
    nnodes: int = typer.Option(None, "--nnodes", min=1, help="re-shape: nodes (default: the emulated job's)"),
    nproc_per_node: int = typer.Option(None, "--nproc-per-node", "--nproc_per_node", min=1,
                                       help="re-shape: GPUs per node (default: the emulated job's)"),
    cluster: Path = _CLUSTER,
    price_per_gpu_hour: float = _PRICE,
    tokens_per_iteration: int = _TOKENS,
    timeline: bool = _TIMELINE,
    roofline_only: bool = _ROOFLINE,
    debug: bool = _DEBUG,
    as_json: bool = _JSON,
    no_bootstrap: bool = _NO_BOOTSTRAP,
):
    """Estimate and simulate a saved trace: iteration time, memory, MFU, cost."""
    if gpu_spec is not None:
        gpu = _target(gpu, gpu_spec).key
    elif gpu:
        gpu = _gpu(gpu).key
    target = gpu or _trace_gpu(trace_dir)
    if target:
        from emulator.core.hardware import UnknownGPUError, get_gpu

        try:
            _check_predictors(get_gpu(target), roofline_only, bootstrap=not no_bootstrap)
        except UnknownGPUError:
            pass  # a variant part or an unreadable folder: predict_from_trace says what is wrong
    raise typer.Exit(run_simulation(trace_dir, debug=debug, as_json=as_json, **_simulate_options(
        gpu, nnodes, nproc_per_node, cluster, price_per_gpu_hour, tokens_per_iteration, timeline, roofline_only))[1])


@app.command(cls=TorchrunCommand, context_settings=_PASSTHROUGH, epilog=EXIT_CODES)
def predict(
    ctx: typer.Context,
    script: str = _SCRIPT,
    args: list[str] = _ARGS,
    module: str = _MODULE,
    gpu: str = _GPU,
    gpu_spec: Path = _GPU_SPEC,
    nproc_per_node: str = _NPROC,
    nnodes: str = _NNODES,
    iterations: int = _ITERATIONS,
    out: Path = typer.Option(Path("out"), "--out", help="output folder: the traces, prediction.json, timeline.json"),
    dedup: bool = _DEDUP,
    jobs: int = _JOBS,
    cluster: Path = _CLUSTER,
    price_per_gpu_hour: float = _PRICE,
    tokens_per_iteration: int = _TOKENS,
    timeline: bool = _TIMELINE,
    roofline_only: bool = _ROOFLINE,
    debug: bool = _DEBUG,
    routing: str = _ROUTING,
    allow_unsupported: bool = _ALLOW_UNSUPPORTED,
    as_json: bool = _JSON,
    no_bootstrap: bool = _NO_BOOTSTRAP,
):
    """Emulate, then simulate: the whole answer for one program and cluster."""
    from emulator.launch.emulate import run_emulation

    spec = _target(gpu, gpu_spec, cluster)
    script, module, argv = _program(script, module, args)
    nproc_per_node, nnodes = _launcher(ctx, nproc_per_node, nnodes, spec.gpus_per_node)
    _check_predictors(spec, roofline_only, bootstrap=not no_bootstrap)
    summary = _run_job(run_emulation, script=script, module=module, argv=argv, gpu=spec.key,
                       nproc_per_node=nproc_per_node, nnodes=nnodes, iterations=iterations, out=out, dedup=dedup,
                       jobs=jobs, routing=_routing(routing), allow_unsupported=allow_unsupported,
                       **({"console": _console(stderr=True)} if as_json else {}))
    if summary.outcome() not in (Exit.OK, Exit.OOM):  # an OOM run is still simulated: its memory is the answer
        raise typer.Exit(summary.outcome())
    raise typer.Exit(run_simulation(out, debug=debug, as_json=as_json, **_simulate_options(
        spec.key, nnodes, nproc_per_node, cluster, price_per_gpu_hour, tokens_per_iteration, timeline,
        roofline_only))[1])


@app.command(context_settings=_PASSTHROUGH)
def search(
    script: str = _SCRIPT,
    args: list[str] = _ARGS,
    module: str = _MODULE,
    space: Path = typer.Option(..., "--space", help="search-space file (TOML; format in the README)"),
    gpus: int = typer.Option(None, "--gpus", min=1, help="GPUs of the job (the space's `gpus`)"),
    objective: str = typer.Option(None, "--objective",
                                  help="time | cost | cost-per-token (default: the space file's, else time)"),
    budget: int = typer.Option(None, "--budget", help="configurations to evaluate (executed + cached; default 300)"),
    algorithm: str = typer.Option(None, "--algorithm", help="grid | random | cmaes (default cmaes)"),
    seed: int = typer.Option(0, "--seed", min=0, help="random seed of the search algorithm"),
    workers: int = typer.Option(1, "--workers", help="trials at once, each on its own share of the cores"),
    engine: str = typer.Option("ray", "--engine", help="ray (Ray Tune) | inline (trials one by one, no Ray)"),
    ray_address: str = typer.Option(None, "--ray-address", help="run trials on this Ray cluster"),
    roofline_only: bool = _ROOFLINE,
    out: Path = typer.Option(Path("out/search"), "--out", help="folder for the Pareto plot and search.json"),
    top: int = typer.Option(15, "--top", min=0, help="rows of the ranked table"),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON instead of the table"),
    name: str = typer.Option(None, "--name", help="save the search under this name (the Dagster schedule reruns it)"),
    set_: list[str] = typer.Option(None, "--set", help="NAME=VALUE: override a constant of the space file"),
):
    """Find the best configuration of a program by emulating its candidates (Ray Tune, CMA-ES)."""
    import json as json_module

    from emulator.core.exitcodes import Exit
    from emulator.estimate.base import NoPredictorError
    from emulator.search import Options, Program, SpaceError, load_space, parse_overrides, run_search
    from emulator.search.report import print_report, to_json, write_pareto

    c = _console()
    script, module, argv = _program(script, module, args)
    try:
        sp = load_space(space, gpus=gpus, overrides=parse_overrides(set_))
        opts = Options(objective=objective or sp.defaults.get("objective", "time"),
                       budget=budget if budget is not None else int(sp.defaults.get("budget", 300)),
                       algorithm=algorithm or sp.defaults.get("algorithm", "cmaes"), seed=seed, gpus=gpus,
                       roofline_only=roofline_only, workers=workers, engine=engine, ray_address=ray_address)
        opts.check(script)
        result = run_search(sp, Program.of(script, module, argv), opts)
    except (SpaceError, NoPredictorError) as e:
        c.print(f"error: {e}", highlight=False, markup=False, soft_wrap=True, style="red")
        raise typer.Exit(Exit.BAD_INPUT) from None
    if name:
        from emulator.search import Store

        Store().save(name, result.search_id)
    files = write_pareto(result, out / result.search_id)
    if as_json:
        print(json_module.dumps(to_json(result, files), indent=1, default=str))
    else:
        print_report(result, c, top=top, files=files)
    if result.interrupted:
        raise typer.Exit(Exit.INTERRUPTED)
    raise typer.Exit(Exit.OK if result.best is not None else Exit.PROGRAM_FAILED)


def _call(module: str, *args: str, **options) -> int:
    """Run `python -m module ARGS --option VALUE ...` (True: a bare flag; None/False: left out) in its
    own process, as the layering wants; its exit code."""
    cmd = [sys.executable, "-m", module, *args]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            cmd.append(flag)
        elif isinstance(value, list | tuple):
            cmd += [flag, *map(str, value)] if value else []
        elif value not in (None, False):
            cmd += [flag, str(value)]
    return subprocess.call(cmd)


@app.command()
def calibrate(
    gpu: str = typer.Option(..., help="the part to calibrate; must be the local device (or 'cpu')"),
    budget_s: float = typer.Option(None, "--budget-s", help="time budget of the kernel sweep (seconds)"),
    collective_budget_s: float = typer.Option(None, "--collective-budget-s",
                                              help="time budget of the collective sweep (seconds)"),
    in_training_budget_s: float = typer.Option(
        None, "--in-training-budget-s",
        help="CPU: seconds of in-training profiles (real training steps, every op timed; default 600)"),
    traces: list[Path] = typer.Option(None, "--traces",
                                      help="an emulation output folder whose ops are benchmarked first (repeatable)"),
    skip_predictors: bool = typer.Option(False, "--skip-predictors", help="measure only; do not train/publish"),
):
    """Measure the local device, train and publish its predictors (the Dagster chain)."""
    for flag, value in (("--budget-s", budget_s), ("--collective-budget-s", collective_budget_s),
                        ("--in-training-budget-s", in_training_budget_s)):
        if value is not None and not value > 0:
            _refuse(f"{flag} must be a number of seconds > 0, got {value}")
    raise typer.Exit(_call("pipelines.calibrate", gpu=_gpu(gpu).key, budget_s=budget_s,
                           collective_budget_s=collective_budget_s, in_training_budget_s=in_training_budget_s,
                           traces=list(traces or []), skip_predictors=skip_predictors))


models = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                     help="The predictors in maya's MLflow registry: list, train, promote, roll back, bootstrap.")
app.add_typer(models, name="models")

_KIND = typer.Option(None, "--kind", help="kernels | collectives (default: both)")


def _kind(kind: str | None) -> str | None:
    if kind not in (None, "kernels", "collectives"):
        _refuse(f"--kind {kind!r}: expected kernels or collectives")
    return kind


@models.command("list")
def models_list(gpu: str = typer.Option(None, "--gpu", help="only this part's models (default: every part)")):
    """Registered versions, aliases and scores."""
    raise typer.Exit(_call("maya_models.registry", "list", gpu=gpu and _gpu(gpu).key))


@models.command("train")
def models_train(
    gpu: str = typer.Option(..., "--gpu", help="the part to train predictors for"),
    cross_gpu: bool = typer.Option(False, "--cross-gpu", help="train only on the other GPUs' measurements"),
    kind: str = _KIND,
    no_publish: bool = typer.Option(False, "--no-publish", help="register without running the champion gate"),
    as_json: bool = typer.Option(False, "--json", help="print the metadata as JSON"),
):
    """Train the part's predictors on the warehouse's measurements, register them and gate the champion."""
    raise typer.Exit(_call("maya_models.train", gpu=_gpu(gpu).key, cross_gpu=cross_gpu, kind=_kind(kind),
                           no_publish=no_publish, json=as_json))


@models.command("promote")
def models_promote(
    gpu: str = typer.Option(..., "--gpu", help="the part whose champion to set"),
    kind: str = _KIND,
    version: str = typer.Option(None, "--version", help="force this version (skips the gate); default: gate the "
                                                        "latest"),
):
    """Make a registered version the champion (through the gate, unless --version forces one)."""
    raise typer.Exit(_call("maya_models.registry", "promote", gpu=_gpu(gpu).key, kind=_kind(kind), version=version))


@models.command("rollback")
def models_rollback(
    gpu: str = typer.Option(..., "--gpu", help="the part whose champion to roll back"),
    kind: str = _KIND,
):
    """Move the champion back to the version that held it before."""
    raise typer.Exit(_call("maya_models.registry", "rollback", gpu=_gpu(gpu).key, kind=_kind(kind)))


@models.command("bootstrap")
def models_bootstrap(
    gpu: str = typer.Option("h100", "--gpu", help="the part to get default predictors for"),
    force: bool = typer.Option(False, "--force", help="retrain even if a champion exists"),
):
    """Train default predictors from the committed reference data (what `make demo` and first use run)."""
    raise typer.Exit(_call("maya_models.bootstrap", gpu=_gpu(gpu).key, force=force))


@app.command()
def gpus():
    """List the GPU parts maya knows."""
    from emulator.core.hardware import GPUS

    t = Table(title="GPUs maya knows")
    for col in ("key", "name", "memory GiB", "SMs", "bf16 TFLOP/s", "HBM TB/s", "NVLink GB/s", "NVLink joins", "$/h"):
        t.add_column(col)
    for key in sorted(GPUS):
        s = GPUS[key]
        joins = "-" if s.nvlink_bandwidth <= 0 else ("node" if s.nvlink_domain is None else f"{s.nvlink_domain} GPUs")
        t.add_row(key, s.name, f"{s.memory_bytes / 2**30:.0f}", str(s.sm_count),
                  f"{s.peak_flops.get('bfloat16', 0) / 1e12:.0f}", f"{s.hbm_bandwidth / 1e12:.2f}",
                  f"{s.nvlink_bandwidth / 1e9:.0f}", joins, f"{s.price_per_hour:.2f}")
    _console().print(t)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
