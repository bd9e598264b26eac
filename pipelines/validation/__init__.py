"""End-to-end validation of maya (`make validate`): predicted vs measured iteration time, with baselines.

holdout.py  published GPU measurements -> runnable cases    suites.py    which cases run and why
runner.py   drives the `maya` CLI per case (cached runs)     baselines.py roofline and llm-analysis
metrics.py  errors, MAPE                                      report.py    markdown/JSON/plots
validate.py the entry point used by __main__ and assets.py (Dagster asset `validation_report`)
"""
