"""What one C++ kernel Inductor generated for a CPU does, read from its source.

A generated kernel's tensor arguments say little about its work: a fused embedding-and-norm kernel takes the whole
embedding table and gathers a few of its rows, a norm's backward reads its input in two passes over each row, and
an in-place kernel re-reads the buffer it writes. With static shapes Inductor writes every loop bound as a literal
(`for(int64_t x1=static_cast<int64_t>(0L); x1<static_cast<int64_t>(256L); x1+=static_cast<int64_t>(8L))`), so the
elements each load, store, arithmetic step and transcendental call touches over the whole call can be counted: each
access weighs the product of its enclosing loops' trip counts, times the innermost loop's step when it is a vector
access (a vector loop steps by its width). These element counts are what the roofline and the predictor's features
read for a `cpp::` row (`emulator.core.ops.flops_and_bytes`); they count every access, cache hits included, so they
bound the DRAM traffic from above where the per-argument sizes could miss or double it.

A loop whose bounds are not literals (dynamic shapes: `x0<static_cast<int64_t>(ks0)`) makes the counts unknown:
`kernel_work` then returns no element counts and the row falls back to its arguments' sizes.
"""

from __future__ import annotations

import math
import re

_NUM = r"(?:static_cast<int64_t>\()?(-?\d+)L?\)?"
_LOOP = re.compile(rf"\bfor\s*\(\s*(?:int64_t|long|int)\s+(\w+)\s*=\s*{_NUM}\s*;\s*\1\s*<\s*{_NUM}\s*;\s*"
                   rf"(?:\1\s*\+=\s*{_NUM}|\1\s*\+\+|\+\+\s*\1)\s*\)")
_ANY_LOOP = re.compile(r"\bfor\s*\(")
_POINTER = r"(?:in_out_ptr|in_ptr|out_ptr)\d+"
_VECTOR_LOAD = re.compile(rf"\bloadu\(\s*({_POINTER})\b")
_VECTOR_STORE = re.compile(rf"\.store\(\s*({_POINTER})\b")
_SCALAR_STORE = re.compile(rf"\b({_POINTER})\[[^\]]*\]\s*=(?!=)")
_SCALAR_ACCESS = re.compile(rf"\b({_POINTER})\[")
_TILE_LOAD = re.compile(rf"\btranspose_mxn<[\w:]+,\s*{_NUM},\s*{_NUM}[^>]*>\(\s*({_POINTER})\b")
_PARAMETER = re.compile(r"(?:const\s+)?([\w:]+)\s*\*\s*(\w+)\s*[,)]")
_ALIAS = re.compile(rf"\bauto\s+({_POINTER})\s*=\s*({_POINTER})\s*;")
_TYPE_BYTES = {"double": 8, "int64_t": 8, "float": 4, "int32_t": 4, "int": 4, "bfloat16": 2, "half": 2,
               "int16_t": 2, "bool": 1, "uint8_t": 1, "int8_t": 1}
_STEP = re.compile(r"\bauto\s+tmp\d+\s*=|\btmp_acc\d+(?:_vec)?\s*=")
TRANSCENDENTAL = re.compile(r"\b(?:exp|expm1|log|log1p|sqrt|rsqrt|tanh|erf|erfc|sin|cos|sigmoid|pow)\w*\(")


def kernel_kind(src: str) -> str:
    """`reduction` when the kernel accumulates across a loop (an OpenMP or vectorised reduction, Inductor's
    `tmp_acc` accumulators, a Welford mean/variance), else `pointwise`."""
    return "reduction" if re.search(r"\btmp_acc\d|reduction\(|welford", src) else "pointwise"


def body_counts(src: str) -> dict[str, int]:
    """Load, store and transcendental sites in the source, each counted once (the kernel's shape-free body)."""
    return {"loads": len(re.findall(r"\bin_ptr\d+\[", src)) + len(re.findall(r"loadu\(in_ptr\d+", src)),
            "stores": len(re.findall(r"\bout_ptr\d+\[", src)) + len(re.findall(r"store\(out_ptr\d+", src)),
            "transcendental": len(TRANSCENDENTAL.findall(src))}


def pointer_bytes(src: str) -> dict[str, int]:
    """Bytes of one element behind each pointer of the kernel's signature (`const bfloat16* in_ptr0` -> 2), its
    aliases included (`auto out_ptr0 = in_out_ptr0;`); a type not known here counts 4."""
    head = re.search(r"\bkernel\s*\((.*?)\)\s*\{", src, re.S)
    sizes = {name: _TYPE_BYTES.get(t.rsplit("::", 1)[-1], 4)
             for t, name in _PARAMETER.findall(head.group(1) + ")" if head else "")}
    for alias, target in _ALIAS.findall(src):
        sizes.setdefault(alias, sizes.get(target, 4))
    return sizes


def kernel_work(src: str) -> dict[str, int]:
    """Bytes read and written, elements computed and elements passed through transcendental calls over one call of
    the kernel (`read_bytes`, `write_bytes`, `step_elems`, `transcendental_elems`); {} when a loop's bounds are not
    literal."""
    sizes = pointer_bytes(src)
    totals = {"read_bytes": 0, "write_bytes": 0, "step_elems": 0, "transcendental_elems": 0}
    loops: list[tuple[int, int, int]] = []  # (brace depth of the loop's body, trip count, step)
    depth, pending = 0, None
    for line in src.splitlines():
        code = line.split("//", 1)[0]
        if _ANY_LOOP.search(code):
            m = _LOOP.search(code)
            if m is None:
                return {}
            start, stop, step = int(m.group(2)), int(m.group(3)), int(m.group(4) or 1)
            pending = (max(math.ceil((stop - start) / step), 0), step)
        if pending is None:
            _count(code, loops, sizes, totals)
        for ch in code:
            if ch == "{":
                depth += 1
                if pending is not None:
                    loops.append((depth, *pending))
                    pending = None
            elif ch == "}":
                while loops and loops[-1][0] >= depth:
                    loops.pop()
                depth -= 1
    return totals


def _count(code: str, loops: list[tuple[int, int, int]], sizes: dict[str, int], totals: dict[str, int]) -> None:
    scalar = math.prod(trips for _, trips, _ in loops)
    # a vector access covers the vector's width: the largest step among its loops, the one Inductor vectorised (not
    # always the innermost: a column sum vectorises its outer loop)
    vector = scalar * max((step for _, _, step in loops), default=1)
    stores = _SCALAR_STORE.findall(code)
    loads = _SCALAR_ACCESS.findall(code)
    for name in stores:
        loads.remove(name)
    totals["read_bytes"] += sum(sizes.get(p, 4) * vector for p in _VECTOR_LOAD.findall(code)) + \
        sum(sizes.get(p, 4) * scalar for p in loads) + \
        sum(sizes.get(p, 4) * scalar * int(m) * int(n) for m, n, p in _TILE_LOAD.findall(code))
    totals["write_bytes"] += sum(sizes.get(p, 4) * vector for p in _VECTOR_STORE.findall(code)) + \
        sum(sizes.get(p, 4) * scalar for p in stores)
    totals["step_elems"] += len(_STEP.findall(code)) * vector  # a vector loop's arithmetic is on its vectors
    totals["transcendental_elems"] += len(TRANSCENDENTAL.findall(code)) * vector
