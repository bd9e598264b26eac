"""The validation GPT trained with megatron-core itself: the same command line as `megatron_gpt.py`.

`megatron_gpt.py` imitates Megatron in plain PyTorch. This program builds the same model and run with
megatron-core (pip `megatron-core`, its local PyTorch layer specs, no Transformer Engine), the way
Megatron-LM's `pretrain_gpt.py` does, so `make search-eval --program megatron-core` can compare the two
against vTrain's measured Megatron runs:

    torchrun --nproc-per-node 8 megatron_core_gpt.py --layers 24 --hidden 2048 --heads 16 \
        --tp 2 --pp 2 --micro-batch 4 --global-batch 32 --dtype fp16 --half-params --checkpoint

- TP, PP and DP from `parallel_state.initialize_model_parallel` (TP innermost, as Megatron lays ranks);
- PP with megatron-core's own schedule (`get_forward_backward_func`: 1F1B, warm-up and cool-down
  forwards and backwards, p2p of activations and gradients), the embedding tied between the first
  and last stage and its gradient all-reduced by `finalize_model_grads`;
- DP with megatron-core's DDP (gradients in a contiguous buffer, all-reduced in buckets);
- `--half-params` with fp16/bf16: Megatron's `--fp16`/`--bf16` (a `Float16Module`, fp32 main weights
  in the optimizer, dynamic loss scaling for fp16); without it the model trains in fp32 (megatron-core
  has no autocast path);
- `--checkpoint`: Megatron-LM's `--checkpoint-activations` (full recomputation, uniform, one layer);
- `--attention eager` is megatron-core's own attention (baddbmm, Megatron's fused causal softmax,
  bmm); `sdpa` is not available in megatron-core's local spec and is refused;
- Megatron-LM's default fusions (masked softmax, bias + GeLU, bias + dropout + add) are on;
- `--adam fused`: megatron-core's Adam is Apex's or Transformer Engine's `FusedAdam` (one multi-tensor
  kernel a step) where either is installed, as on a GPU machine that trains Megatron, and torch's
  foreach AdamW where neither is; without them (this CPU build) torch's fused AdamW, the same single
  pass, stands in. `--adam torch` keeps the fallback megatron-core chose.
It needs CUDA (megatron-core's p2p and DDP assume it): run it on GPUs or under `maya`.
"""

from __future__ import annotations

import os
import sys
import time

import torch
from megatron.core import parallel_state
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron_gpt import parse_args as validation_args


def parse_args(argv=None):
    """`megatron_gpt.py`'s command line, less what megatron-core has no path for."""
    a = validation_args(argv, attention=("eager",), description=__doc__.split("\n\n")[0])
    if a.dtype != "fp32" and not a.half_params:
        sys.exit("megatron_core_gpt.py: error: megatron-core trains in half precision only as Megatron's "
                 "--fp16/--bf16: add --half-params")
    return a


def fused_adam(params, adam_w_mode: bool = True, **kw) -> torch.optim.Optimizer:
    """Apex's `FusedAdam(params, adam_w_mode=..., **kw)` call, answered by torch's fused Adam / AdamW."""
    return (torch.optim.AdamW if adam_w_mode else torch.optim.Adam)(params, fused=True, **kw)


def use_fused_adam() -> None:
    """`--adam fused` where megatron-core found neither Apex nor Transformer Engine (it then builds torch's
    foreach AdamW): give it a fused Adam with Apex's signature, as if Apex were installed."""
    import megatron.core.optimizer as mcore_optimizer

    if mcore_optimizer.USING_PYTORCH_OPTIMIZER:
        mcore_optimizer.USING_PYTORCH_OPTIMIZER = False
        mcore_optimizer.Adam = fused_adam


def transformer_config(a) -> TransformerConfig:
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.dtype, torch.float32)
    recompute = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1) \
        if a.checkpoint else {}
    return TransformerConfig(
        num_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads, ffn_hidden_size=a.ffn,
        hidden_dropout=a.dropout, attention_dropout=a.dropout, init_method_std=0.02,
        fp16=a.dtype == "fp16", bf16=a.dtype == "bf16", params_dtype=half, pipeline_dtype=half,
        tensor_model_parallel_size=a.tp, pipeline_model_parallel_size=a.pp,
        masked_softmax_fusion=True, bias_activation_fusion=True, bias_dropout_fusion=True,
        use_cpu_initialization=False, **recompute)


def main(argv=None):
    a = parse_args(argv)
    torch.distributed.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    world = torch.distributed.get_world_size()
    assert world % (a.tp * a.pp) == 0, f"world size {world} is not a multiple of TP x PP = {a.tp * a.pp}"
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=a.tp, pipeline_model_parallel_size=a.pp)
    model_parallel_cuda_manual_seed(1234)
    dp = parallel_state.get_data_parallel_world_size()
    a.global_batch = a.global_batch or a.micro_batch * dp
    n_micro = a.global_batch // (a.micro_batch * dp)
    assert n_micro * a.micro_batch * dp == a.global_batch, "global batch must be micro-batch x DP x microbatches"

    config = transformer_config(a)
    model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=a.vocab,
                     max_sequence_length=a.seq, pre_process=parallel_state.is_pipeline_first_stage(),
                     post_process=parallel_state.is_pipeline_last_stage())
    model = model.cuda()
    if a.half_params:
        model = Float16Module(config, model)
    model = DistributedDataParallel(config=config, ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True),
                                    module=model)
    if a.adam == "fused":
        use_fused_adam()
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=a.lr, weight_decay=0.01, fp16=a.dtype == "fp16",
                        bf16=a.dtype == "bf16", clip_grad=a.clip_grad, initial_loss_scale=2.0 ** 16), [model])
    config.finalize_model_grads_func = finalize_model_grads

    g = torch.Generator(device="cpu").manual_seed(parallel_state.get_data_parallel_rank())
    positions = torch.arange(a.seq, device="cuda").unsqueeze(0).expand(a.micro_batch, a.seq)

    def micro_batches():
        batch = torch.randint(0, a.vocab, (n_micro * a.micro_batch, a.seq + 1), generator=g).cuda()
        for m in batch.chunk(n_micro):
            yield m[:, :-1].contiguous(), m[:, 1:].contiguous()

    def forward_step(data_iterator, model):
        tokens, labels = next(data_iterator)
        output = model(tokens, positions, None, labels=labels)

        def loss_func(per_token):
            loss = per_token.float().mean()
            return loss, {"lm loss": loss.detach()}

        return output, loss_func

    forward_backward = get_forward_backward_func()
    model.train()
    for step in range(a.steps):
        t0 = time.perf_counter()
        model.zero_grad_buffer()
        optimizer.zero_grad()
        losses = forward_backward(forward_step_func=forward_step, data_iterator=micro_batches(), model=[model],
                                  num_microbatches=n_micro, seq_length=a.seq, micro_batch_size=a.micro_batch,
                                  forward_only=False)
        ok, grad_norm, _ = optimizer.step()
        torch.cuda.synchronize()
        if parallel_state.is_pipeline_last_stage() and parallel_state.get_tensor_model_parallel_rank() == 0 \
                and parallel_state.get_data_parallel_rank() == 0:
            loss = sum(float(d["lm loss"]) for d in losses) / max(len(losses), 1)
            print(f"step {step} loss {loss:.4f} ok {ok} time {time.perf_counter() - t0:.3f}s", flush=True)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
