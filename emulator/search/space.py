"""The search-space file (TOML): the knobs, how each reaches a run, and which configurations are allowed.

    [knobs]                          # int, choice or bool; the order of values matters for pruning
    tp = { values = [1, 2, 4, 8] }
    micro_batch = { values = [1, 2, 4], memory = "increasing" }
    checkpoint = { type = "bool", memory = "decreasing", time = "increasing" }
    nodes = { type = "int", min = 1, max = 8 }
    gpu = { values = ["a100-80gb", "h100"] }

    [constants]                      # fixed values the expressions and templates may use
    global_batch = 512

    [derived]                        # expressions over knobs, constants and earlier derived values
    gpus = "nodes * 8"
    dp = "gpus // (tp * pp)"

    [constraints]                    # every one must hold; the name is the reason shown when one fails
    layout = "gpus % (tp * pp) == 0"
    batch = "global_batch % (dp * micro_batch) == 0"

    [program]                        # appended to the program's own arguments; "{name}" is a template
    args = ["--tp", "{tp}", "--micro-batch", "{micro_batch}", { if = "checkpoint", args = ["--checkpoint"] }]
    env = { NCCL_ALGO = "Ring" }

    [cluster]                        # maya's own knobs: part, layout, and any cluster-file setting
    gpu = "{gpu}"
    nnodes = "{nodes}"
    nproc_per_node = 8
    price_per_gpu_hour = 2.5

    [predict]
    iterations = 2                   # emulated optimizer steps (the first is warm-up)
    tokens_per_iteration = "{tokens}"

    [search]                         # defaults for `maya search` flags
    objective = "cost-per-token"

`[[points]]` tables instead of a product: the space is exactly those knob settings.

`memory = "increasing"` says the memory a run needs never falls as the knob's value goes up (in
the order listed; false < true), `"decreasing"` the opposite; `time` says the same of iteration
time. Pruning (`emulator.search.prune`) relies on these and on nothing else.

Everything is checked when the file is read (`load_space`): an unknown section, key or name, a
template that names nothing the space defines, a knob that reaches no run, an empty domain, or
constraints no configuration meets raise SpaceError before any trial runs. `gpus` is the `--gpus`
of `maya search` unless the space defines it (then `--gpus` requires it to equal that number).
"""

from __future__ import annotations

import itertools
import math
import string
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from emulator.core.hardware import UnknownGPUError, get_gpu
from emulator.search.expr import EvalError, Expr, ExprError, parse
from emulator.simulate.cluster import CLUSTER_KEYS, is_number

SECTIONS = {"knobs", "constants", "derived", "constraints", "program", "cluster", "predict", "search", "points"}
KNOB_KEYS = {"type", "values", "min", "max", "step", "memory", "time", "help"}
DIRECTIONS = ("increasing", "decreasing")
LAYOUT_KEYS = {"gpu", "nnodes", "nproc_per_node", "gpus_per_node"}
PREDICT_KEYS = {"iterations", "tokens_per_iteration"}
SEARCH_KEYS = {"objective", "budget", "algorithm"}
OBJECTIVES = ("time", "cost", "cost-per-token")
MAX_POINTS = 2_000_000  # a product larger than this is not enumerated: narrow the knobs


class SpaceError(ValueError):
    """The space file is wrong; the message says where and how. Raised before any trial runs."""


@dataclass(frozen=True)
class Knob:
    name: str
    kind: str  # "int" | "choice" | "bool"
    values: tuple
    memory: str | None = None  # "increasing" | "decreasing": memory needed as the value goes up
    time: str | None = None  # the same for iteration time
    help: str = ""

    def index(self, value) -> int:
        """Position of `value` in the domain (the order monotone directions refer to)."""
        return self.values.index(value)

    @property
    def ordinal(self) -> bool:
        """Values with a meaningful order (numbers, booleans): a searcher may treat the index as a coordinate."""
        return self.kind in ("int", "bool") or all(isinstance(v, int | float) for v in self.values)


@dataclass(frozen=True)
class Template:
    """A string with `{name}` placeholders (a literal when it has none)."""

    text: str
    names: frozenset[str]

    def render(self, values: dict) -> str:
        return self.text.format_map(values)


@dataclass(frozen=True)
class Conditional:
    """`{ if = "expr", args = [...], else = [...] }` in program args: flags present only when expr holds."""

    test: Expr
    then: tuple[Template, ...]
    otherwise: tuple[Template, ...] = ()


@dataclass
class Plan:
    """What one configuration means for a run: the program's extra arguments and environment, and the cluster."""

    argv: list[str]
    env: dict[str, str]
    gpu: str
    nnodes: int
    nproc_per_node: int
    cluster: dict  # cluster-file settings (emulator.simulate.cluster keys other than the layout)
    iterations: int = 2
    tokens_per_iteration: float | None = None

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def to_json(self) -> dict:
        return dict(argv=list(self.argv), env=dict(self.env), gpu=self.gpu, nnodes=self.nnodes,
                    nproc_per_node=self.nproc_per_node, cluster=dict(self.cluster), iterations=self.iterations,
                    tokens_per_iteration=self.tokens_per_iteration)


class Infeasible(Exception):  # noqa: N818 - an answer, not an error: this configuration cannot run
    """A configuration the space rules out; `reason` names the constraint or the failing expression."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class Space:
    knobs: dict[str, Knob]
    constants: dict
    derived: dict[str, Expr]  # in evaluation order
    constraints: dict[str, Expr]
    args: list
    env: dict[str, Template]
    cluster: dict  # key -> Template or literal
    predict: dict
    defaults: dict  # [search]
    points: list[tuple] | None = None  # explicit knob settings, in knob order
    source: str = ""  # the file's text (part of a stored search)
    path: str = ""
    overrides: dict = field(default_factory=dict)  # `--set` constants
    _feasible: list | None = field(default=None, repr=False)

    # -- one configuration ----------------------------------------------------------------------
    def values(self, setting: dict) -> dict:
        """Knobs + constants + derived values of one knob setting; Infeasible when a derived value fails."""
        vals = dict(self.constants)
        vals.update(setting)
        for name, ex in self.derived.items():
            try:
                vals[name] = ex(vals)
            except EvalError as e:
                raise Infeasible(f"derived {name}: {e}") from None
        return vals

    def violated(self, vals: dict) -> list[str]:
        """Names of the constraints `vals` breaks (an expression that fails breaks its constraint)."""
        bad = []
        for name, ex in self.constraints.items():
            try:
                if not ex(vals):
                    bad.append(name)
            except EvalError:
                bad.append(name)
        return bad

    def check(self, setting: dict) -> dict:
        """All values of a knob setting, or Infeasible naming the first constraint it breaks."""
        for name, knob in self.knobs.items():
            if setting.get(name) not in knob.values:
                raise Infeasible(f"{name}={setting.get(name)!r} is outside the knob's values")
        if self.points is not None and self.key(setting) not in self._point_set():
            raise Infeasible("not one of the space's listed points")
        vals = self.values(setting)
        bad = self.violated(vals)
        if bad:
            raise Infeasible(f"constraint {bad[0]}: {self.constraints[bad[0]].text}")
        return vals

    def plan(self, vals: dict) -> Plan:
        """The run a configuration describes; Infeasible when the cluster it names cannot exist."""
        argv: list[str] = []
        for item in self.args:
            if isinstance(item, Conditional):
                try:
                    chosen = item.then if item.test(vals) else item.otherwise
                except EvalError as e:
                    raise Infeasible(f"program args condition: {e}") from None
                argv += [t.render(vals) for t in chosen]
            else:
                argv.append(item.render(vals))
        env = {k: t.render(vals) for k, t in self.env.items()}
        settings = {k: _number(v.render(vals)) if isinstance(v, Template) else v for k, v in self.cluster.items()}
        gpu = str(settings.pop("gpu", "h100"))
        try:
            spec = get_gpu(gpu)
        except UnknownGPUError as e:
            raise Infeasible(str(e)) from None
        npn = settings.pop("nproc_per_node", settings.pop("gpus_per_node", None))
        nn = settings.pop("nnodes", None)
        gpus = vals.get("gpus")
        nn, npn = _layout(gpus, nn, npn, spec.gpus_per_node)
        pred = {k: _number(v.render(vals)) if isinstance(v, Template) else v for k, v in self.predict.items()}
        tokens = pred.get("tokens_per_iteration")
        return Plan(argv=argv, env=env, gpu=spec.key, nnodes=nn, nproc_per_node=npn, cluster=settings,
                    iterations=int(pred.get("iterations", 2)),
                    tokens_per_iteration=float(tokens) if tokens is not None else None)

    def key(self, setting: dict) -> tuple:
        return tuple(setting[k] for k in self.knobs)

    def setting(self, key: tuple) -> dict:
        return dict(zip(self.knobs, key, strict=True))

    # -- all configurations ---------------------------------------------------------------------
    def candidates(self):
        """Every knob setting of the space before constraints (the product, or the listed points)."""
        if self.points is not None:
            return iter(self.points)
        return itertools.product(*(k.values for k in self.knobs.values()))

    def size(self) -> int:
        return len(self.points) if self.points is not None else math.prod(len(k.values) for k in self.knobs.values())

    def feasible(self) -> list[tuple]:
        """Knob settings (tuples in knob order) that meet every constraint and describe a possible cluster."""
        if self._feasible is None:
            self._feasible, _ = self._enumerate()
        return self._feasible

    def _enumerate(self) -> tuple[list[tuple], dict[str, int]]:
        if self.size() > MAX_POINTS:
            raise SpaceError(f"{self.path or 'space'}: {self.size():,} configurations before constraints; "
                             f"at most {MAX_POINTS:,} can be enumerated: narrow the knobs' values")
        ok, rejected = [], {}
        for key in self.candidates():
            try:
                vals = self.values(self.setting(key))
                bad = self.violated(vals)
                if not bad:
                    self.plan(vals)
            except Infeasible as e:
                bad = [e.reason]
            if bad:
                for b in bad:
                    rejected[b] = rejected.get(b, 0) + 1
            else:
                ok.append(key)
        return ok, rejected

    def _point_set(self) -> set:
        return set(self.points or ())


def _number(text: str):
    """A rendered template as the number it spells, else the string."""
    for cast in (int, float):
        try:
            return cast(text)
        except (TypeError, ValueError):
            pass
    if text in ("true", "True"):
        return True
    if text in ("false", "False"):
        return False
    return text


def _layout(gpus, nnodes, nproc_per_node, part_per_node: int) -> tuple[int, int]:
    """(nnodes, nproc_per_node) from whatever the space and `--gpus` give; Infeasible when they disagree."""
    def positive(name, v):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise Infeasible(f"cluster {name} must be a positive integer, got {v!r}")
        return v

    if nnodes is not None:
        nnodes = positive("nnodes", nnodes)
    if nproc_per_node is not None:
        nproc_per_node = positive("nproc_per_node", nproc_per_node)
    if gpus is not None:
        if isinstance(gpus, float) and gpus.is_integer():
            gpus = int(gpus)
        gpus = positive("gpus", gpus)
        if nproc_per_node is None and nnodes is None:
            nproc_per_node = min(gpus, part_per_node)
        if nproc_per_node is None:
            nproc_per_node = gpus // nnodes
        if nnodes is None:
            nnodes = gpus // nproc_per_node
        if nnodes * nproc_per_node != gpus:
            raise Infeasible(f"{gpus} GPUs do not make {nnodes} node(s) of {nproc_per_node}")
    if nnodes is None or nproc_per_node is None:
        raise Infeasible("the cluster's size is unknown: give --gpus, or cluster nnodes and nproc_per_node")
    return nnodes, nproc_per_node


# ----------------------------------------------------------------------------- reading the file
def load_space(path: Path | str, gpus: int | None = None, overrides: dict | None = None) -> Space:
    """Read and check a space file; `gpus` is `maya search --gpus`, `overrides` its `--set NAME=VALUE`
    (constants). Raises SpaceError."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise SpaceError(f"cannot read space file {path}: {e}") from None
    return parse_space(text, gpus=gpus, path=str(path), overrides=overrides)


def parse_overrides(items: list[str] | None) -> dict:
    """`--set NAME=VALUE` items as {name: value} (VALUE read as a TOML value, else as a string)."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip().isidentifier():
            raise SpaceError(f"--set expects NAME=VALUE, got {item!r}")
        try:
            out[name.strip()] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            out[name.strip()] = value
    return out


def parse_space(text: str, gpus: int | None = None, path: str = "space", overrides: dict | None = None) -> Space:
    """Check a space file's text (see the module docstring); raises SpaceError."""
    try:
        return _parse_space(text, gpus, path, overrides or {})
    except ExprError as e:
        raise SpaceError(str(e)) from None


def _parse_space(text: str, gpus: int | None, path: str, overrides: dict) -> Space:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpaceError(f"{path}: not valid TOML: {e}") from None
    unknown = sorted(set(data) - SECTIONS)
    if unknown:
        raise SpaceError(f"{path}: unknown section(s) {unknown}; known: {sorted(SECTIONS)}")
    knobs = {name: _knob(name, spec, path) for name, spec in _table(data, "knobs", path).items()}
    if not knobs:
        raise SpaceError(f"{path}: [knobs] is empty: a search needs at least one knob")
    constants = dict(_table(data, "constants", path))
    unknown = sorted(set(overrides) - set(constants))
    if unknown:
        raise SpaceError(f"{path}: --set {unknown}: only constants can be set, the space's are {sorted(constants)}")
    for name, value in overrides.items():  # a number stays a number: `--set layers=abc` is a typo, not a value
        was = constants[name]
        if is_number(was) and not is_number(value):
            raise SpaceError(f"{path}: --set {name}={value!r}: the file's {name} is a number ({was!r})")
    constants.update(overrides)
    clash = sorted(set(constants) & set(knobs))
    if clash:
        raise SpaceError(f"{path}: {clash} are both knobs and constants")
    derived_raw = _table(data, "derived", path)
    clash = sorted(set(derived_raw) & (set(knobs) | set(constants)))
    if clash:
        raise SpaceError(f"{path}: derived value(s) {clash} redefine a knob or constant")
    defines_gpus = "gpus" in knobs or "gpus" in constants or "gpus" in derived_raw
    if gpus is not None and not defines_gpus:
        constants["gpus"] = int(gpus)
    known = set(knobs) | set(constants) | set(derived_raw)
    derived = _order_derived({n: parse(v, f"{path} [derived] {n}") for n, v in derived_raw.items()}, known, path)
    constraints = {n: parse(v, f"{path} [constraints] {n}") for n, v in _table(data, "constraints", path).items()}
    if gpus is not None and defines_gpus:
        constraints["gpus"] = parse(f"gpus == {int(gpus)}", "--gpus")
    for n, ex in constraints.items():
        _known(ex.names, known, f"[constraints] {n}", path)
    program = _table(data, "program", path, {"args", "env"})
    args = [_arg(a, known, path, i) for i, a in enumerate(program.get("args", []))]
    env = {str(k): _template(v, known, f"[program] env {k}", path) for k, v in program.get("env", {}).items()}
    cluster = _templated(_table(data, "cluster", path, CLUSTER_KEYS | LAYOUT_KEYS), known, "cluster", path)
    predict = _templated(_table(data, "predict", path, PREDICT_KEYS), known, "predict", path)
    defaults = _table(data, "search", path, SEARCH_KEYS)
    if defaults.get("objective", "time") not in OBJECTIVES:
        raise SpaceError(f"{path}: [search] objective must be one of {list(OBJECTIVES)}, "
                         f"got {defaults['objective']!r}")
    points = _points(data.get("points"), knobs, path)
    space = Space(knobs=knobs, constants=constants, derived=derived, constraints=constraints, args=args, env=env,
                  cluster=cluster, predict=predict, defaults=defaults, points=points, source=text, path=path,
                  overrides=dict(overrides))
    _check_reach(space, path)
    feasible, rejected = space._enumerate()
    if not feasible:
        why = "; ".join(f"{name} rules out {n:,}" for name, n in sorted(rejected.items(), key=lambda kv: -kv[1]))
        raise SpaceError(f"{path}: no configuration of the {space.size():,} meets every constraint ({why})")
    space._feasible = feasible
    return space


def _table(data: dict, name: str, path: str, keys: set | None = None) -> dict:
    """Section `name` of the file (empty when absent); with `keys`, a key outside them is an error."""
    t = data.get(name, {})
    if not isinstance(t, dict):
        raise SpaceError(f"{path}: [{name}] must be a table")
    bad = sorted(set(t) - keys) if keys is not None else []
    if bad:
        raise SpaceError(f"{path}: unknown key(s) {bad} in [{name}]; known: {sorted(keys)}")
    return t


def _templated(table: dict, known: set, name: str, path: str) -> dict:
    """A section's values, strings read as templates over the space's names."""
    return {k: _template(v, known, f"[{name}] {k}", path) if isinstance(v, str) else v for k, v in table.items()}


def _knob(name: str, spec, path: str) -> Knob:
    where = f"{path} [knobs] {name}"
    if not name.isidentifier():
        raise SpaceError(f"{where}: a knob name must be an identifier (letters, digits, _)")
    if isinstance(spec, list):
        spec = {"values": spec}
    if not isinstance(spec, dict):
        raise SpaceError(f"{where}: expected a table such as {{ values = [1, 2, 4] }}, got {spec!r}")
    bad = sorted(set(spec) - KNOB_KEYS)
    if bad:
        raise SpaceError(f"{where}: unknown key(s) {bad}; known: {sorted(KNOB_KEYS)}")
    kind = spec.get("type") or ("choice" if "values" in spec else "int" if "min" in spec or "max" in spec else None)
    if kind == "bool":
        values = (False, True)
    elif kind == "int":
        lo, hi, step = spec.get("min"), spec.get("max"), spec.get("step", 1)
        if "values" in spec:
            values = tuple(spec["values"])
        elif not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi, step)) or step < 1:
            raise SpaceError(f"{where}: an int knob needs integer min and max (and step >= 1)")
        else:
            values = tuple(range(lo, hi + 1, step))
        if any(not isinstance(v, int) or isinstance(v, bool) for v in values):
            raise SpaceError(f"{where}: an int knob's values must be integers")
    elif kind == "choice":
        values = tuple(spec.get("values", ()))
    else:
        raise SpaceError(f"{where}: type must be 'int', 'choice' or 'bool' (or give values / min and max), "
                         f"got {spec.get('type')!r}")
    if not values:
        raise SpaceError(f"{where}: the knob has no values (an empty domain leaves nothing to search)")
    if len(set(map(repr, values))) != len(values):
        raise SpaceError(f"{where}: repeated values {list(values)}")
    for key in ("memory", "time"):
        if spec.get(key) is not None and spec[key] not in DIRECTIONS:
            raise SpaceError(f"{where}: {key} must be 'increasing' or 'decreasing', got {spec[key]!r}")
    return Knob(name=name, kind=kind, values=values, memory=spec.get("memory"), time=spec.get("time"),
                help=str(spec.get("help", "")))


def _order_derived(exprs: dict[str, Expr], known: set, path: str) -> dict[str, Expr]:
    """Derived values in an order where each reads only what is already known (cycles are an error)."""
    for n, ex in exprs.items():
        _known(ex.names, known, f"[derived] {n}", path)
    done: dict[str, Expr] = {}
    pending = dict(exprs)
    while pending:
        ready = [n for n, ex in pending.items() if not (ex.names & set(pending))]
        if not ready:
            raise SpaceError(f"{path}: [derived] {sorted(pending)} depend on each other in a cycle")
        for n in ready:
            done[n] = pending.pop(n)
    return done


def _known(names, known: set, where: str, path: str) -> None:
    unknown = sorted(set(names) - known)
    if unknown:
        raise SpaceError(f"{path} {where}: unknown knob(s) {unknown}; the space defines {sorted(known)}")


def _template(value, known: set, where: str, path: str) -> Template:
    if not isinstance(value, str | int | float | bool):
        raise SpaceError(f"{path} {where}: expected a string template or a number, got {value!r}")
    text = str(value)
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
    except ValueError as e:
        raise SpaceError(f"{path} {where}: {text!r} is not a template ({e}); write {{{{ for a literal brace") \
            from None
    names = set()
    for f in fields:
        if not f.isidentifier():
            raise SpaceError(f"{path} {where}: template {text!r} has {{{f}}}, which names no knob "
                             "(a placeholder is one name: put expressions in [derived])")
        names.add(f)
    unknown = sorted(names - known)
    if unknown:
        raise SpaceError(f"{path} {where}: template {text!r} names {unknown}, which the space does not define "
                         f"(knobs, constants, derived: {sorted(known)})")
    return Template(text=text, names=frozenset(names))


def _arg(item, known: set, path: str, i: int):
    where = f"[program] args[{i}]"
    if isinstance(item, dict):
        bad = sorted(set(item) - {"if", "args", "else"})
        if bad or "if" not in item:
            raise SpaceError(f"{path} {where}: a conditional is {{ if = \"expr\", args = [...], else = [...] }}, "
                             f"got keys {sorted(item)}")
        test = parse(item["if"], f"{path} {where} if")
        _known(test.names, known, f"{where} if", path)
        return Conditional(test=test, then=tuple(_template(a, known, where, path) for a in item.get("args", [])),
                           otherwise=tuple(_template(a, known, where, path) for a in item.get("else", [])))
    return _template(item, known, where, path)


def _points(raw, knobs: dict[str, Knob], path: str) -> list[tuple] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw:
        raise SpaceError(f"{path}: [[points]] must be a non-empty array of tables")
    out = []
    for i, p in enumerate(raw):
        if not isinstance(p, dict) or set(p) != set(knobs):
            raise SpaceError(f"{path}: point {i + 1} must set exactly the knobs {sorted(knobs)}, got "
                             f"{sorted(p) if isinstance(p, dict) else p!r}")
        for k, v in p.items():
            if v not in knobs[k].values:
                raise SpaceError(f"{path}: point {i + 1}: {k}={v!r} is not one of the knob's values")
        out.append(tuple(p[k] for k in knobs))
    return out


def _check_reach(space: Space, path: str) -> None:
    """Every knob must reach the run: through a template or condition, directly or via derived values."""
    used: set[str] = set()
    for item in space.args:
        if isinstance(item, Conditional):
            used |= item.test.names
            for t in (*item.then, *item.otherwise):
                used |= t.names
        else:
            used |= item.names
    for t in (*space.env.values(), *space.cluster.values(), *space.predict.values()):
        if isinstance(t, Template):
            used |= t.names
    if "gpus" in space.derived or "gpus" in space.knobs:
        used.add("gpus")  # the cluster's size
    frontier = set(used)
    while frontier:  # derived values pass on what they read
        name = frontier.pop()
        if name in space.derived:
            new = space.derived[name].names - used
            used |= new
            frontier |= new
    idle = [k for k in space.knobs if k not in used]
    if idle:
        raise SpaceError(f"{path}: knob(s) {idle} reach no run: no program argument, environment variable, "
                         "cluster or predict setting uses them (directly or through [derived])")
