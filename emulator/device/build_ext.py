"""`python -m emulator.device.build_ext DIR`: compile the fake device library into DIR/maya_fake_cuda.so.

Run as its own process by `emulator.device.boot.build` because compiling needs `import torch`,
and the process that will emulate must not import torch before loading the result.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from torch.utils.cpp_extension import load

from emulator.device.boot import LIB_NAME, SOURCES


def main(out: str) -> None:
    out_dir = Path(out)
    build_dir = out_dir / "build"
    build_dir.mkdir(parents=True, exist_ok=True)
    path = load(name=LIB_NAME, sources=[str(src) for src in SOURCES], build_directory=str(build_dir),
                extra_cflags=["-O1", "-w"], is_python_module=False, verbose=False)
    built = Path(path) if path else build_dir / f"{LIB_NAME}.so"
    tmp = out_dir / f".{LIB_NAME}.so.tmp"
    shutil.copyfile(built, tmp)
    tmp.replace(out_dir / f"{LIB_NAME}.so")


if __name__ == "__main__":
    main(sys.argv[1])
