"""The emulated GPU's memory: the C++ caching allocator agrees with the reference model, and device
memory follows the program's storages (views, deaths, FSDP2-style storage resizes)."""

from tests.programs.harness import run_worker

MiB = 1 << 20


def test_the_cpp_allocator_gives_the_reference_models_figures(tmp_path):
    run = run_worker("allocator_twin.py", tmp_path / "out", "7", "3000")
    assert run.rc == 0 and run.summary["ok"], run.summary.get("error")
    printed = run.printed()
    assert printed["twin_steps"] == "3000"
    assert int(printed["twin_ooms"]) > 10  # the out-of-memory path was compared too


def test_memory_follows_storages_through_views_deaths_and_resizes(tmp_path):
    run = run_worker("storage_lifetimes.py", tmp_path / "out")
    assert run.rc == 0 and run.summary["ok"], run.summary.get("error")
    got = {k: int(v) for k, v in run.printed().items()}
    assert got["one"] == 4 * MiB
    assert got["view_alive"] == 4 * MiB  # the view keeps the whole storage
    assert got["view_dead"] == 0
    assert got["param"] == 8 * MiB
    assert got["resized_to_0"] == 0  # FSDP2's free_storage
    assert got["regrown"] == 8 * MiB  # and alloc_storage
    assert got["host_resized"] == 8 * MiB
    assert got["all_dead"] == 0
    assert got["peak"] == 8 * MiB
    assert run.summary["peak_allocated"] == 8 * MiB
