"""The MLflow pyfunc face of a predictor: what the emulator loads from the registry.

    model = mlflow.pyfunc.load_model("models:/maya-kernels-h100@champion")
    model.predict(trace_rows)  ->  DataFrame[duration_s: float64, source: str ("learned" | "fallback")]

Input contract (the MLflow signature): columns `kind, op, shapes, dtypes, strides, args, out_shapes,
out_dtypes` (list columns as JSON strings), `flops, bytes`, and for collectives `collective,
coll_bytes, group_size, nnodes, gpus_per_node` (optional for kernel rows). Any other trace columns
are ignored. Every row gets a positive duration: unknown families and unmeasured collectives come
from the analytical roofline, labelled `fallback`.
"""

from __future__ import annotations

import mlflow.pyfunc
import pandas as pd

from emulator.core.predictor_io import COMM_NUMERIC_COLUMNS, COMM_STRING_COLUMNS, NUMERIC_COLUMNS, STRING_COLUMNS


def model_signature():
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import AnyType, ColSpec, Schema

    # numbers are AnyType: trace columns are int64 for collectives and float64-with-NaN for kernels,
    # and MLflow refuses either conversion under a fixed numeric type; predictors coerce them.
    inputs = [ColSpec("string", c) for c in STRING_COLUMNS]
    inputs += [ColSpec(AnyType(), c, required=False) for c in NUMERIC_COLUMNS]
    inputs += [ColSpec("string", c, required=False) for c in COMM_STRING_COLUMNS]
    inputs += [ColSpec(AnyType(), c, required=False) for c in COMM_NUMERIC_COLUMNS]
    outputs = [ColSpec("double", "duration_s"), ColSpec("string", "source")]
    return ModelSignature(inputs=Schema(inputs), outputs=Schema(outputs))


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
        return self.predictor.predict(df)
