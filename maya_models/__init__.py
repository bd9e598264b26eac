"""maya_models: the measurement warehouse and the predictors trained on it.

    warehouse.py     atomic Parquet chunks (hive-partitioned by gpu/source), DuckDB views, corrupt-file scan
    reference/       the committed public measurements (curate.py builds them) and their import
    features.py      ONE feature function for trace rows and measurement rows (+ collective features)
    metrics.py       held-out shape-group split, APE statistics, plots
    kernels.py       per-family XGBoost around the roofline, labelled fallback
    collectives.py   fitted alpha-beta prior per collective and topology level + XGBoost residual
    pyfunc.py        the MLflow pyfunc model the emulator loads (input/output contract)
    registry.py      MLflow runs, registered versions, the champion gate, promote/rollback CLI
    train.py         train_* / publish (what the Dagster assets call) and `python -m maya_models.train`
    bootstrap.py     ensure_predictors(gpu): default predictors on a fresh clone
    evaluate.py      `make evaluate`: accuracy per GPU and family beside the roofline baseline, unseen H200
"""
