"""Rank processes forked from one that has already booted the fake device and imported torch.

Why: a rank must be a process of its own (emulator.launch.pool), and a fresh one spends seconds
importing torch, Dynamo and the emulator before the program's first line: most of a small
program's emulation, and a search's trials pay it per rank. The fork server pays it once per job:
`python -m emulator.launch.forkserver --gpu G --local-world-size N` boots the device for the job's
target, imports what every rank imports, then forks one child
per rank asked for. The child is the worker (emulator.launch.worker.main) in a process of its own,
with its own environment, working directory and log; the program is imported in the child only,
so ranks share no program state.

Protocol (JSON lines): the launcher writes {"argv", "env", "cwd", "log", "stderr", "status"} per rank to
the server's stdin; the server answers {"ready": true} once, then {"pid"} per fork and {"exit": pid, "rc"}
as each child ends (rc as subprocess reports it: negative for a signal). End of stdin ends the server.
A child also writes its exit code to the request's `status` file as it ends: if the server dies first
(killed by hand, by the OOM killer), its ranks run on as orphans the server can no longer report, and
the launcher reads how each ended from that file instead of calling every one killed.

Only the emulate policy forks: a profile touches a real device (a CUDA context does not survive a
fork) and the cpu target keeps the plain process. MAYA_FORKSERVER=0 turns it off; a server that
fails to start makes the launcher start plain worker processes instead.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ENV = "MAYA_FORKSERVER"  # 0: every rank a fresh `python -m emulator.launch.worker`
READY_TIMEOUT_S = 300  # booting may build the device library first (emulator.device.boot)
_POLL_S = 0.05


def wanted() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


# ---------------------------------------------------------------------------------------------- server

def serve(argv: list[str]) -> int:
    """`python -m emulator.launch.forkserver --gpu G [--gpu-spec JSON] --local-world-size N`."""
    p = argparse.ArgumentParser(prog="python -m emulator.launch.forkserver", description=__doc__.splitlines()[0])
    p.add_argument("--gpu", required=True)
    p.add_argument("--gpu-spec", default=None)
    p.add_argument("--local-world-size", type=int, required=True)
    ns = p.parse_args(argv)
    # Ctrl-C on a terminal reaches the whole process group: the ranks stop (writing what they recorded)
    # and the server lives on to report how each ended
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not _preload(ns):
        _send({"ready": False})
        return 0
    gc.freeze()  # what is loaded stays put: the collector does not touch (and so copy) it in every child
    _send({"ready": True})
    buffered = b""
    stdin = sys.stdin.fileno()
    while True:
        readable, _, _ = select.select([stdin], [], [], _POLL_S)
        if readable:
            chunk = os.read(stdin, 65536)
            if not chunk:  # the launcher is done (or gone)
                break
            buffered += chunk
            while b"\n" in buffered:
                line, buffered = buffered.split(b"\n", 1)
                _send({"pid": _fork_rank(json.loads(line))})
        _reap()
    return 0


def _preload(ns) -> bool:
    """Boot the job's device and import what a rank imports; False where this target keeps plain processes."""
    from emulator.core.hardware import get_gpu
    from emulator.core.variants import variant_from_table

    try:
        if ns.gpu_spec:
            variant_from_table(json.loads(ns.gpu_spec), "--gpu-spec")
        spec = get_gpu(ns.gpu)
        if spec.is_cpu:
            return False
        from emulator.device.boot import boot

        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # as the worker does: never the machine's own GPUs
        boot(ns.local_world_size, spec.capability)
    except Exception as e:  # noqa: BLE001 - the worker, run plainly, reports the same problem properly
        print(f"maya fork server: not forking ({e})", file=sys.stderr)
        return False
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401 - FakeTensorMode's constructor imports Dynamo: seconds a rank
    import torch._subclasses.fake_tensor  # noqa: F401
    import torch.fx.experimental.symbolic_shapes  # noqa: F401 - what building the fake mode imports

    import emulator.capture.session  # noqa: F401
    return True


def _fork_rank(req: dict) -> int:
    pid = os.fork()
    if pid:
        return pid
    rc = 1
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        streams = {req["log"]: (1, 2)} if not req.get("stderr") else {req["log"]: (1,), req["stderr"]: (2,)}
        for path, fds in streams.items():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            for target in fds:
                os.dup2(fd, target)
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        from emulator.launch import worker

        sys.argv = ["-m", *req["argv"]]
        rc = worker.main(req["argv"])
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - whatever it was, the log says it and the launcher sees exit 1
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110
                pass
        _write_status(req.get("status"), rc)
        os._exit(rc)
    return 0  # not reached


def _write_status(path: str | None, rc: int) -> None:
    """The exit code where the launcher finds it if this server is gone by then (written whole, then renamed)."""
    if not path:
        return
    try:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as fh:
            fh.write(str(rc))
        os.replace(tmp, path)
    except OSError:
        pass


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send({"exit": pid, "rc": os.waitstatus_to_exitcode(status)})


def _send(msg: dict) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------- client

class ForkServer:
    """The launcher's end: `spawn` a rank (a Popen-like RankProcess), `close` when the job is done.
    `ForkServer.start` returns None where the server cannot serve this job (the caller starts plain
    processes)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.exits: dict[int, int] = {}
        self._buffer = b""
        self._statuses = Path(tempfile.mkdtemp(prefix="maya-forkserver-"))  # each rank's exit code, in spawn order
        self._spawned = 0
        os.set_blocking(proc.stdout.fileno(), False)

    @classmethod
    def start(cls, python: str, gpu: str, gpu_table: dict | None, local_world_size: int, env: dict,
              log: Path) -> ForkServer | None:
        args = ["--gpu", gpu, "--local-world-size", str(local_world_size)]
        if gpu_table is not None:
            args += ["--gpu-spec", json.dumps(gpu_table)]
        with open(log, "wb") as fh:
            proc = subprocess.Popen([python, "-m", "emulator.launch.forkserver", *args],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=fh, env=env)
        server = cls(proc)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            msg = server._next()
            if msg is not None:
                if msg.get("ready"):
                    return server
                break
            if proc.poll() is not None:
                break
            select.select([proc.stdout], [], [], _POLL_S)
        server.close()
        return None

    def spawn(self, worker_args: list[str], env: dict, log: Path, stderr: Path | None = None,
              cwd: Path | None = None) -> RankProcess:
        """Fork a rank: its output to `log` (its error stream too, unless `stderr` names a file of its own)."""
        status = self._statuses / f"{self._spawned}.rc"
        self._spawned += 1
        req = {"argv": worker_args, "env": env, "cwd": str(cwd or os.getcwd()), "log": str(log),
               "stderr": str(stderr) if stderr else None, "status": str(status)}
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()
        while True:
            msg = self._next()
            if msg is not None and "pid" in msg:
                return RankProcess(self, msg["pid"], status)
            if msg is None:
                if self.proc.poll() is not None:
                    raise RuntimeError("maya fork server ended before forking a rank")
                select.select([self.proc.stdout], [], [], _POLL_S)

    def pump(self) -> None:
        while self._next() is not None:
            pass

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self._statuses, ignore_errors=True)

    def _next(self) -> dict | None:
        """The next message from the server (exits are filed as they come), None if none is waiting."""
        while b"\n" not in self._buffer:
            try:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
            except BlockingIOError:
                return None
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        msg = json.loads(line)
        if "exit" in msg:
            self.exits[msg["exit"]] = msg["rc"]
        return msg

    def alive(self) -> bool:
        return self.proc.poll() is None


class RankProcess:
    """A forked rank with the part of subprocess.Popen the pool uses: poll, wait, terminate, kill."""

    def __init__(self, server: ForkServer, pid: int, status: Path):
        self.server, self.pid, self.status = server, pid, status
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server.pump()
            if self.pid in self.server.exits:
                self.returncode = self.server.exits.pop(self.pid)
            elif not self.server.alive() and not _running(self.pid):
                self.returncode = self._orphan_exit_code()
        return self.returncode

    def _orphan_exit_code(self) -> int:
        """How a rank that outlived its server ended: the code it wrote, or killed where it wrote none
        (a signal ended it before it could)."""
        try:
            return int(self.status.read_text())
        except (OSError, ValueError):
            return -signal.SIGKILL

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"rank process {self.pid}", timeout)
            time.sleep(_POLL_S / 2)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _running(pid: int) -> bool:
    """Whether `pid` still runs: an orphan that ended is a zombie until whoever adopted it reaps it (in a
    container, an init that never reaps), and a zombie still answers signal 0."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: signal 0 is all there is
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
