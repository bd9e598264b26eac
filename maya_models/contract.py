"""What a registered model accepts: the rows of a trace exactly as `OUT/trace` stores them.

A consumer loads `models:/maya-kernels-<gpu>@champion` or `models:/maya-collectives-<gpu>@champion` and
calls `predict(rows, params={...})` on a pandas frame read from `OUT/trace` (or built by hand with the
same columns). The model derives what it needs and refuses, naming the column, what it cannot:

- `kind` and `op` are required on every row;
- kernel rows: `shapes`, `dtypes` (lists, numpy arrays or JSON strings); `strides`, `args`, `out_shapes`,
  `out_dtypes` when known; FLOPs and bytes are recomputed from the signature;
- collective and p2p rows: `coll_bytes` (nccl-tests convention) and the group: `group_size`, or
  `group_ranks` (its length); p2p rows are pairs. The collective comes from `op` unless a `collective`
  column says it. Where the group sits is `nnodes` (nodes the group spans) and `gpus_per_node`,
  from columns or from `params`; without either the group is inside one node.

Output: `duration_s` (seconds), `source` (`learned` | `fallback`), `adjustment_s` (seconds of
`duration_s` the sustained-clock adjustment added; kernel rows).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from emulator.core.ops import as_list, as_number, collective_name

COMM_KINDS = ("collective", "p2p")
PARAMS = {"nnodes": 1, "gpus_per_node": 0}  # 0: the group's size (the group fills its node)


class ContractError(ValueError):
    """Rows the model cannot interpret; the message names the column or value."""


def prepare_rows(df: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
    """`df` (trace rows or predictor rows) as the predictor's frame, or ContractError."""
    params = {**PARAMS, **{k: v for k, v in (params or {}).items() if v is not None}}
    missing = [c for c in ("kind", "op") if c not in df.columns]
    if missing:
        raise ContractError(f"rows lack required column(s) {missing}; give trace rows (OUT/trace) or the "
                            "predictor's columns (see maya_models.contract)")
    df = df.reset_index(drop=True).copy()
    kinds = df["kind"].astype(str)
    comm = kinds.isin(COMM_KINDS).to_numpy()
    if comm.any():
        _prepare_comm(df, comm, params)
    if (~comm).any() and "shapes" not in df.columns:
        raise ContractError("kernel rows need 'shapes' (and 'dtypes'): the input shapes of the op's tensors")
    return df


def _prepare_comm(df: pd.DataFrame, comm: np.ndarray, params: dict) -> None:
    if "coll_bytes" not in df.columns:
        raise ContractError("collective/p2p rows need 'coll_bytes' (bytes in the nccl-tests convention)")
    if "collective" not in df.columns:
        df["collective"] = None
    df.loc[comm, "collective"] = [c if isinstance(c, str) and c else collective_name(str(o))
                                  for c, o in zip(df.loc[comm, "collective"], df.loc[comm, "op"], strict=True)]
    sizes = df["group_size"].tolist() if "group_size" in df.columns else [None] * len(df)
    ranks = df["group_ranks"].tolist() if "group_ranks" in df.columns else [None] * len(df)
    kinds = df["kind"].astype(str).tolist()
    out = []
    for i, (is_comm, size, members, kind) in enumerate(zip(comm, sizes, ranks, kinds, strict=True)):
        n = as_number(size, 0.0)
        if is_comm and n <= 0:
            n = len(as_list(members)) or (2 if kind == "p2p" else 0)
            if n <= 0:
                raise ContractError(f"row {i}: a {kind} row needs 'group_size' or 'group_ranks' (the members "
                                    f"of its process group); op {df['op'].iloc[i]!r}")
        out.append(int(n) if n else None)
    df["group_size"] = out
    for col in ("nnodes", "gpus_per_node"):
        if col not in df.columns:
            df[col] = None
    df["nnodes"] = [int(as_number(v, params["nnodes"])) or 1 for v in df["nnodes"]]
    gpn = int(params["gpus_per_node"] or 0)
    df["gpus_per_node"] = [int(as_number(v, 0)) or gpn or max((g or 1) // max(nn, 1), 1)
                           for v, g, nn in zip(df["gpus_per_node"], out, df["nnodes"], strict=True)]
