"""`python -m pipelines.calibrate`: the whole chain for one partition, and refusal on the wrong machine."""






def test_an_unfinished_calibration_keeps_its_run_id_until_the_chain_completes(wh):
    from pipelines import launch

    first, resumed = launch.current_run_id(wh, "cpu")
    assert not resumed and first.startswith("cpu-")
    again, resumed = launch.current_run_id(wh, "cpu")  # e.g. after the process was killed
    assert again == first and resumed
    assert launch.current_run_id(wh, "h100")[0] != first  # per GPU
    launch.finish_run(wh, "cpu", first)
    assert launch.pending_run_id(wh, "cpu") is None
    assert launch.current_run_id(wh, "cpu")[0] != first
