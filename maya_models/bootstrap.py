"""Default predictors on a fresh clone: `ensure_predictors("h100")` (what `make demo` calls).

If the registry has no champion for the GPU, the committed reference measurements are imported
into the warehouse and the kernel and collective predictors are trained, registered and promoted.
A GPU without reference measurements (e.g. h200) gets the cross-GPU models. Training is capped
(`BOOTSTRAP_ROWS_PER_FAMILY`) so this takes a minute or two on two cores; `python -m
maya_models.train --gpu G` trains on everything.

    python -m maya_models.bootstrap [--gpu h100]
"""

from __future__ import annotations

import argparse
import time

BOOTSTRAP_ROWS_PER_FAMILY = 20_000


def ensure_predictors(gpu: str = "h100", *, root=None, force: bool = False, log=print) -> dict:
    """Make sure `maya-kernels-<gpu>@champion` and `maya-collectives-<gpu>@champion` exist."""
    from emulator.core.hardware import get_gpu
    from maya_models.registry import champion_version
    from maya_models.train import publish, train_collective_predictor, train_kernel_predictor, training_rows
    from maya_models.warehouse import measurement_files

    gpu = get_gpu(gpu).key
    todo = [k for k in ("kernels", "collectives") if force or champion_version(k, gpu) is None]
    out = {"gpu": gpu, "trained": todo, "champions": {}}
    if todo:
        t0 = time.time()
        if not any("source=" in p.parent.name and "reference" in p.name for p in measurement_files(root)):
            from maya_models.reference import import_reference

            imp = import_reference(root)
            log(f"imported {imp['rows']} reference measurements into the warehouse")
        data = training_rows(root, include_sustained=True)
        for kind in todo:
            log(f"training {kind} predictor for {gpu} ...")
            if kind == "kernels":
                meta = train_kernel_predictor(gpu, root=root, data=data,
                                              max_rows_per_family=BOOTSTRAP_ROWS_PER_FAMILY)
            else:
                meta = train_collective_predictor(gpu, root=root, data=data)
            pub = publish(gpu, kind=kind, version=meta["version"], root=root, data=data)
            log(f"  {meta['model']} v{meta['version']}: score {meta['score']:.2f} (mean median APE, held-out "
                f"shapes); {'champion' if pub['promoted'] else 'not promoted: ' + pub['reason']}")
        out["seconds"] = round(time.time() - t0, 1)
    for kind in ("kernels", "collectives"):
        out["champions"][kind] = champion_version(kind, gpu)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m maya_models.bootstrap", description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default="h100")
    p.add_argument("--force", action="store_true", help="retrain even if a champion exists")
    a = p.parse_args(argv)
    r = ensure_predictors(a.gpu, force=a.force)
    print(f"{r['gpu']}: champions kernels v{r['champions']['kernels']}, collectives v{r['champions']['collectives']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
