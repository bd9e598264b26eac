"""The shared contracts every stage, maya_models and pipelines build on; nothing here imports a stage.

    hardware.py      the one table of GPU facts (datasheet figures, prices, the local CPU as a device)
    ops.py           the op signature shared by traces and measurements, op families, FLOP/byte counts
    roofline.py      the one analytical fallback (roofline kernels, alpha-beta collectives)
    predictor_io.py  the columns a predictor reads and returns
    settings.py      warehouse root, reference data, the MLflow store and model names
    files.py         atomic writes
    hostspeed.py     the host-speed workload (timed here and on GPU nodes)
    exitcodes.py     one exit-code table for every maya process
"""
