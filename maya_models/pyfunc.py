"""The MLflow pyfunc face of a predictor: what the emulator, and any other tool, loads from the registry.

    model = mlflow.pyfunc.load_model("models:/maya-collectives-h100@champion")
    model.predict(pandas.read_parquet("OUT/trace"), params={"nnodes": 1, "gpus_per_node": 8})
      ->  DataFrame[duration_s: float64, source: str ("learned" | "fallback"), adjustment_s: float64]

The contract (`maya_models.contract`): the rows of a trace exactly as `OUT/trace` stores them; the
model derives the collective, the group size and the node layout it needs, or raises naming the
missing column. Every row it accepts gets a positive duration: unknown families and unmeasured
collectives come from the analytical roofline, labelled `fallback`. The model carries its code
(`code_paths`: emulator, maya_models) and declares its requirements, so a consumer needs only
mlflow and those.
"""

from __future__ import annotations

import mlflow.pyfunc
import pandas as pd

from maya_models.contract import PARAMS, prepare_rows

INPUT_COLUMNS = ("kind", "op")  # required; the rest optional, see maya_models.contract
OPTIONAL_COLUMNS = ("shapes", "dtypes", "strides", "args", "out_shapes", "out_dtypes", "flops", "bytes", "collective",
                    "coll_bytes", "group_size", "group_ranks", "nnodes", "gpus_per_node", "timing", "implementation")
UNITS = {"duration_s": "seconds", "adjustment_s": "seconds", "coll_bytes": "bytes (nccl-tests convention)",
         "flops": "floating-point operations", "bytes": "bytes of DRAM traffic"}


def model_signature():
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import AnyType, ColSpec, ParamSchema, ParamSpec, Schema

    # the optional columns are AnyType: a trace read with pandas holds numpy arrays in its list columns and
    # int64 or float64-with-NaN numbers; maya_models.contract reads them all and names what is missing
    inputs = [ColSpec("string", c) for c in INPUT_COLUMNS]
    inputs += [ColSpec(AnyType(), c, required=False) for c in OPTIONAL_COLUMNS]
    outputs = [ColSpec("double", "duration_s"), ColSpec("string", "source"), ColSpec("double", "adjustment_s")]
    params = ParamSchema([ParamSpec(name, "long", default) for name, default in PARAMS.items()])
    return ModelSignature(inputs=Schema(inputs), outputs=Schema(outputs), params=params)


class MayaPredictorModel(mlflow.pyfunc.PythonModel):
    """Wraps a KernelPredictor or CollectivePredictor saved as a folder artifact."""

    def load_context(self, context):
        import json
        from pathlib import Path

        path = Path(context.artifacts["predictor"])
        kind = json.loads((path / "predictor.json").read_text())["type"]
        if kind == "kernels":
            from maya_models.kernels import KernelPredictor

            self.predictor = KernelPredictor.load(path)
        else:
            from maya_models.collectives import CollectivePredictor

            self.predictor = CollectivePredictor.load(path)

    def predict(self, context, model_input, params=None):
        df = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        out = self.predictor.predict(prepare_rows(df, params))
        if "adjustment_s" not in out.columns:
            out["adjustment_s"] = 0.0
        return out
