"""torchrun's launcher flags on `maya emulate|predict|profile`: replacing `torchrun` by `maya predict --gpu X`
works on the same command line.

The rule: everything before the script (or `-m module`) is maya's or torchrun's; everything after it
belongs to the program, unchanged. torchrun's flags that size the job (`--nproc-per-node`, `--nnodes`)
are honoured; the ones about rendezvous, restarts, logging and process management mean nothing to an
emulation: they are accepted (their values consumed), listed in `--help`, and named in one note line.
`--no-python` cannot be honoured (maya runs Python programs) and is refused.

`TorchrunCommand` is the click command class that takes those flags out of a typer command's arguments
before click parses them, and lists them in its `--help`.
"""

from __future__ import annotations

import typer
import typer.core

IGNORED_HELP = "torchrun flag, accepted and ignored"

# (spellings, takes a value, help); the first spelling is how the note names the flag.
IGNORED_FLAGS: tuple[tuple[tuple[str, ...], bool, str], ...] = (
    (("--standalone",), False, "torchrun flag (single-node rendezvous), accepted and ignored"),
    (("--node-rank", "--node_rank"), True, IGNORED_HELP + ": maya emulates every node"),
    (("--master-addr", "--master_addr"), True, IGNORED_HELP),
    (("--master-port", "--master_port"), True, IGNORED_HELP),
    (("--rdzv-backend", "--rdzv_backend"), True, IGNORED_HELP),
    (("--rdzv-endpoint", "--rdzv_endpoint"), True, IGNORED_HELP),
    (("--rdzv-id", "--rdzv_id"), True, IGNORED_HELP),
    (("--rdzv-conf", "--rdzv_conf"), True, IGNORED_HELP),
    (("--max-restarts", "--max_restarts"), True, IGNORED_HELP),
    (("--monitor-interval", "--monitor_interval"), True, IGNORED_HELP),
    (("--start-method", "--start_method"), True, IGNORED_HELP),
    (("--event-log-handler", "--event_log_handler"), True, IGNORED_HELP),
    (("--role",), True, IGNORED_HELP),
    (("--run-path", "--run_path"), False, IGNORED_HELP + " (maya runs the script as __main__ anyway)"),
    (("--log-dir", "--log_dir"), True, IGNORED_HELP),
    (("-r", "--redirects"), True, IGNORED_HELP),
    (("-t", "--tee"), True, IGNORED_HELP),
    (("--local-ranks-filter", "--local_ranks_filter"), True, IGNORED_HELP),
    (("--duplicate-stdout-filters", "--duplicate_stdout_filters"), True, IGNORED_HELP),
    (("--duplicate-stderr-filters", "--duplicate_stderr_filters"), True, IGNORED_HELP),
    (("--local-addr", "--local_addr"), True, IGNORED_HELP),
    (("--logs-specs", "--logs_specs"), True, IGNORED_HELP),
    (("--numa-binding", "--numa_binding"), True, IGNORED_HELP),
    (("--signals-to-handle", "--signals_to_handle"), True, IGNORED_HELP),
    (("--shutdown-timeout", "--shutdown_timeout"), True, IGNORED_HELP),
)
NO_PYTHON = ("--no-python", "--no_python")

NPROC_HELP = ("processes (GPUs) per node, as torchrun: a number, or gpu / auto for the target part's GPUs "
              "per node")
NNODES_HELP = "nodes, as torchrun: a number, or MIN:MAX (elastic; maya takes MAX)"


_FLAGS = {spelling: (spellings, takes_value) for spellings, takes_value, _ in IGNORED_FLAGS for spelling in spellings}


def split_launcher_flags(args: list[str], value_options: set[str],
                         module_options: set[str]) -> tuple[list[str], list[str], bool]:
    """(`args` without torchrun's ignored flags and their values, those flags' names, whether --no-python was
    given). Only the part before the script is looked at: a token that is not an option (or the value of
    one of `value_options`), `--`, or `-m MODULE`'s module ends it; the rest is the program's, untouched
    (after a module, behind a `--` that click consumes, so none of it is parsed as maya's options)."""
    kept, ignored, no_python = [], [], False
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--" or not a.startswith("-") or a == "-":
            break
        name, eq, _ = a.partition("=")
        if name in _FLAGS:
            spellings, takes_value = _FLAGS[name]
            flag = next(s for s in spellings if s.startswith("--"))
            if flag not in ignored:
                ignored.append(flag)
            i += 1 + (1 if takes_value and not eq else 0)
            continue
        if name in NO_PYTHON:
            no_python = True
            i += 1
            continue
        kept.append(a)
        i += 1
        if name in module_options:  # -m MODULE: the module, then the program's arguments
            if not eq:
                kept.extend(args[i:i + 1])
                i += 1
            # `--` keeps click from reading the program's own options as maya's (`-m torchtitan.train
            # --module llama3`: the second --module is torchtitan's); the program sees what python gives it
            return kept + (["--"] if args[i:] else []) + args[i:], ignored, no_python
        if name in value_options and not eq:
            kept.extend(args[i:i + 1])
            i += 1
    return kept + args[i:], ignored, no_python


HELP_INTRO = ("Replace `torchrun` by `maya predict --gpu X`: maya's and torchrun's flags go before the script "
              "(or -m MODULE), the program's own after it. --nproc-per-node and --nnodes are honoured; these "
              "torchrun flags are accepted and ignored (their values consumed; one note line names them):")


def help_rows() -> list[tuple[str, str]]:
    """(flag spellings, help) for each torchrun flag that `--help` lists after the options."""
    rows = [(", ".join(sp) + (" VALUE" if takes_value else ""), help_) for sp, takes_value, help_ in IGNORED_FLAGS]
    return [*rows, (", ".join(NO_PYTHON), "torchrun flag; refused: maya runs Python programs only")]


class TorchrunCommand(typer.core.TyperCommand):
    """A typer command that also accepts torchrun's launcher flags before the script: they are removed
    before click parses, and what was given ends up in `ctx.meta["torchrun_ignored"]` (the flags' names)
    and `ctx.meta["torchrun_no_python"]`. `--help` lists them after the options."""

    def parse_args(self, ctx, args):
        value_opts, module_opts = set(), set()
        for p in self.params:
            if getattr(p, "param_type_name", "") != "option":
                continue
            names = set(p.opts) | set(p.secondary_opts)
            if p.name == "module":
                module_opts |= names
            elif not p.is_flag:
                value_opts |= names
        args, ignored, no_python = split_launcher_flags(list(args), value_opts, module_opts)
        ctx.meta["torchrun_ignored"] = ignored
        ctx.meta["torchrun_no_python"] = no_python
        return super().parse_args(ctx, args)

    def format_epilog(self, ctx, formatter):
        with formatter.section("torchrun compatibility"):
            formatter.write_text(HELP_INTRO)
            formatter.write_paragraph()
            formatter.write_dl(help_rows())
        super().format_epilog(ctx, formatter)


class LauncherFlagError(ValueError):
    """A torchrun flag's value maya cannot use."""


def nproc_per_node(value: str | int, gpus_per_node: int | None) -> int:
    """`--nproc-per-node`'s value as a count: a number, or gpu/auto (the part's GPUs per node; `cpu` too)."""
    v = str(value).strip().lower()
    if v in ("gpu", "auto", "cpu"):
        if not gpus_per_node:
            raise LauncherFlagError(f"--nproc-per-node {v}: no GPU count per node is known here; give a number")
        return int(gpus_per_node)
    try:
        n = int(v)
    except ValueError:
        raise LauncherFlagError(f"--nproc-per-node {value!r}: expected a number, gpu or auto") from None
    if n < 1:
        raise LauncherFlagError(f"--nproc-per-node {value!r}: must be at least 1")
    return n


def nnodes(value: str | int) -> tuple[int, str | None]:
    """`--nnodes`'s value as (count, a note or None): `4`, or an elastic `1:4` (the maximum, with a note)."""
    v = str(value).strip()
    lo, sep, hi = v.partition(":")
    try:
        low, high = int(lo), int(hi if sep else lo)
    except ValueError:
        raise LauncherFlagError(f"--nnodes {value!r}: expected N or MIN:MAX") from None
    if low < 1 or high < low:
        raise LauncherFlagError(f"--nnodes {value!r}: expected 1 <= MIN <= MAX")
    note = (f"note: --nnodes {v} is an elastic range; maya emulates the maximum, {high} node(s)"
            if sep and low != high else None)
    return high, note


def ignored_note(flags: list[str]) -> str | None:
    """The one line naming the torchrun flags that were accepted and ignored (None when there are none)."""
    if not flags:
        return None
    return f"note: torchrun flag(s) accepted and ignored (they mean nothing to an emulation): {', '.join(flags)}"


def unknown_flag_message(arg: str) -> str:
    return (f"unknown option {arg.split('=', 1)[0]!r} before the script: maya's and torchrun's flags go before "
            "the script, the program's own after it (see --help)")
