"""After a caught OOM the emulated allocator is where CUDA's caching allocator would be.

The program (tests/programs/oom_retry.py) halves its batch until a step fits; the reference
model (emulator.memory.allocator) replays the same requests and frees, and every figure the
program printed, and the batch it settled on, must be the model's."""

import json
import subprocess
import sys

from emulator.core.hardware import get_gpu
from emulator.memory.accounting import CUDA_CONTEXT_BYTES
from emulator.memory.allocator import CachingAllocator, OutOfMemory
from tests.programs.harness import PROGRAMS, ROOT

D = 8192


def model_run() -> list[str]:
    """The lines oom_retry.py prints, from the reference allocator's arithmetic."""
    a = CachingAllocator(get_gpu("h100").memory_bytes - CUDA_CONTEXT_BYTES)
    lines = []
    w = a.malloc(D * D * 4)  # noqa: F841 - lives to the end
    batch = 1 << 20
    while True:
        held = []
        try:
            for _ in range(3):  # x, x @ w, y * 2
                held.append(a.malloc(batch * D * 4))
            break
        except OutOfMemory:  # the failed request took nothing; the program drops what it had
            for h in held:
                a.free(h)
            lines.append(f"oom={batch} allocated={a.allocated} reserved={a.reserved}")
            batch //= 2
    lines.append(f"settled={batch} allocated={a.allocated} reserved={a.reserved}")
    for h in held:
        a.free(h)
    a.empty_cache()
    lines.append(f"emptied allocated={a.allocated} reserved={a.reserved}")
    return lines


def test_a_retry_on_oom_loop_settles_where_the_caching_allocator_would(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "emulator.cli", "predict", "--roofline-only", "--out", str(out),
                           str(PROGRAMS / "oom_retry.py")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    printed = [line for line in (out / "logs" / "rank=0.log").read_text().splitlines()
               if line.startswith(("oom=", "settled=", "emptied"))]
    expected = model_run()
    assert printed == expected
    assert expected[-2].startswith("settled=524288")  # halved once: the model's own answer, for the reader
    # the program recovered: a valid prediction (exit 0), no OOM, the caught one as a note
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    pred = json.loads((out / "prediction.json").read_text())
    assert pred["oom"] is False and pred["oom_reason"] is None
    assert any("caught 1 torch.cuda.OutOfMemoryError" in n for n in pred["notes"])
    assert json.loads((out / "emulation.json").read_text())["ooms_caught"] == {"0": 1}
