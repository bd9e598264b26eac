"""torch.distributed.pipelining's start-up vote, decided the way the real job decides it.

Before the first step, the stages vote (as 4-byte tensors sent stage to stage) whether every stage
has complete static metadata; all "yes" means STATIC, otherwise DYNAMIC metadata inference runs a
forward on throw-away inputs. A recording process group moves no data, so the vote reads zeros
(a placeholder) and every emulated pipeline would take the DYNAMIC path, running an extra forward
outside the program's control: with DDP inside a stage that forward arms DDP's reducer outside
`no_sync`, which then counts every parameter twice and fails. Here the schedule's own vote still
runs (its sends and receives are recorded, as on the GPUs), and then the outcome the real vote
would reach replaces the placeholder's: each rank's stages vote locally and the votes are
exchanged as Python objects over the pipeline group (`emulator.distributed.objects`).
"""

from __future__ import annotations

import functools


def install() -> None:
    try:
        from torch.distributed.pipelining import schedules
        from torch.distributed.pipelining._utils import InferenceMode
        from torch.distributed.pipelining.stage import PipelineStage
    except ImportError:
        return
    for cls in (getattr(schedules, "PipelineScheduleSingle", None), getattr(schedules, "PipelineScheduleMulti", None)):
        original = getattr(cls, "_warmup_p2p", None)
        if original is None or getattr(original, "_maya", False):
            continue
        cls._warmup_p2p = _decided_like_the_real_job(original, PipelineStage, InferenceMode)


def _decided_like_the_real_job(original, stage_cls, modes):
    @functools.wraps(original)
    def _warmup_p2p(self, stages, has_backward, *args, **kwargs):
        out = original(self, stages, has_backward, *args, **kwargs)
        if stages and all(isinstance(s, stage_cls) for s in stages):
            import torch.distributed as dist

            local = all(not modes.needs_dynamic(s._user_meta, has_backward) for s in stages)
            group = stages[0].group
            votes: list = [None] * dist.get_world_size(group)
            dist.all_gather_object(votes, local, group=group)
            mode = modes.STATIC if all(votes) else modes.DYNAMIC
            for s in stages:
                s._inference_mode = mode
        return out

    _warmup_p2p._maya = True
    return _warmup_p2p
