"""Ranks forked from the fork server (emulator.launch.forkserver) against ranks started as new processes:
the same recorded work, each rank its own process with its own environment and its own copy of the program."""

import os

from emulator.launch.emulate import run_emulation
from emulator.launch.forkserver import ENV
from emulator.trace.io import read_rank_summary
from tests.programs.harness import PROGRAMS

WORLD = 2


def emulate(tmp_path, monkeypatch, forked: bool, gpu: str = "h100"):
    monkeypatch.setenv(ENV, "1" if forked else "0")
    monkeypatch.setenv("WHOAMI_MARKER", "from-the-launcher")
    out = tmp_path / ("forked" if forked else "plain")
    s = run_emulation(script=str(PROGRAMS / "whoami.py"), module=None, argv=[], gpu=gpu, nproc_per_node=WORLD,
                      out=out, dedup=False, jobs=2)
    assert s.ok and s.complete, s.error
    printed = []
    for r in range(WORLD):
        text = (out / "logs" / f"rank={r}.log").read_text()
        printed.append(dict(line.split("=", 1) for line in text.splitlines() if "=" in line and " " not in line))
    return out, s, printed


def test_forked_ranks_record_what_new_processes_record_each_in_a_process_of_its_own(tmp_path, monkeypatch):
    plain_out, plain, plain_printed = emulate(tmp_path, monkeypatch, forked=False)
    out, forked, printed = emulate(tmp_path, monkeypatch, forked=True)
    for r in range(WORLD):
        assert read_rank_summary(out, r).work_hash == read_rank_summary(plain_out, r).work_hash
        assert read_rank_summary(out, r).n_events == read_rank_summary(plain_out, r).n_events
        assert printed[r]["rank"] == printed[r]["local_rank"] == str(r)
        assert printed[r]["runs"] == "1"  # the program ran in this process only, once
        assert printed[r]["marker"] == "from-the-launcher"
    assert len({p["pid"] for p in printed}) == WORLD
    # a plain rank is the launcher's child; a forked one the server's, which the launcher started
    assert {p["parent"] for p in plain_printed} == {str(os.getpid())}
    servers = {p["parent"] for p in printed}
    assert len(servers) == 1 and servers != {str(os.getpid())}
    assert forked.work_hash == plain.work_hash


def test_the_cpu_target_runs_plain_processes(tmp_path, monkeypatch):
    _, s, printed = emulate(tmp_path, monkeypatch, forked=True, gpu="cpu")
    assert {p["parent"] for p in printed} == {str(os.getpid())}


def _wait_for(path, text: str, timeout: float = 120.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} never said {text!r}")


def test_ranks_that_outlive_a_killed_server_report_how_they_ended(tmp_path):
    """The server killed mid-job (by hand, by the OOM killer): its ranks run on, and the launcher still
    learns each one's own exit code instead of calling them all killed."""
    import signal

    from emulator.launch.forkserver import ForkServer
    from emulator.launch.job import WORKER
    from tests.programs.harness import _cmd, _env

    server = ForkServer.start(WORKER[0], "h100", None, 1, _env(), tmp_path / "server.log")
    assert server is not None
    ranks = {}
    for name, program, args in (("done", "waits.py", ["--sleep", "3"]), ("raises", "fails.py", []),
                                ("killed", "waits.py", ["--sleep", "120"])):
        cmd = _cmd(program, tmp_path / name, 0, 1, "h100", [], args)
        ranks[name] = server.spawn(cmd[len(WORKER):], _env(), tmp_path / f"{name}.log")
    _wait_for(tmp_path / "killed.log", "ready pid=")
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()
    ranks["killed"].kill()
    try:
        assert ranks["done"].wait(timeout=120) == 0
        assert ranks["raises"].wait(timeout=120) == 1
        assert ranks["killed"].wait(timeout=30) == -signal.SIGKILL
    finally:
        for r in ranks.values():
            r.kill()
        server.close()
