"""A GPT trained with megatron-core and its local (PyTorch) layer specs, the way megatron-core's quickstart
writes it: `initialize_model_parallel`, `GPTModel` with `get_gpt_layer_local_spec()`, megatron's DDP and
optimizer, and the pipeline schedule from `get_forward_backward_func()` (no Transformer Engine)."""
import argparse
import os

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

p = argparse.ArgumentParser()
p.add_argument("--tp", type=int, default=1)
p.add_argument("--pp", type=int, default=1)
p.add_argument("--vpp", type=int, default=None, help="model chunks per pipeline stage (interleaved 1F1B)")
p.add_argument("--sequence-parallel", action="store_true")
p.add_argument("--distributed-optimizer", action="store_true")
p.add_argument("--layers", type=int, default=4)
p.add_argument("--micro-batches", type=int, default=4)
p.add_argument("--micro-batch-size", type=int, default=2)
p.add_argument("--seq", type=int, default=128)
p.add_argument("--steps", type=int, default=3)
args = p.parse_args()

torch.distributed.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
parallel_state.initialize_model_parallel(tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp,
                                         virtual_pipeline_model_parallel_size=args.vpp)
model_parallel_cuda_manual_seed(123)

config = TransformerConfig(
    num_layers=args.layers, hidden_size=256, num_attention_heads=4, use_cpu_initialization=True, bf16=True,
    params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16, tensor_model_parallel_size=args.tp,
    pipeline_model_parallel_size=args.pp, virtual_pipeline_model_parallel_size=args.vpp,
    sequence_parallel=args.sequence_parallel)


def build(vp_stage=None):
    return GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=1024,
                    max_sequence_length=args.seq, vp_stage=vp_stage,
                    pre_process=parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage),
                    post_process=parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage))


chunks = [build(i) for i in range(args.vpp)] if args.vpp else [build()]
ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True,
                                           use_distributed_optimizer=args.distributed_optimizer)
# bf16 training as Megatron-LM's get_model does it: the model in bf16 (Float16Module), megatron's DDP around it
model = [DistributedDataParallel(config=config, ddp_config=ddp_config, module=Float16Module(config, m.cuda()))
         for m in chunks]
optimizer = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=3e-4, bf16=True, clip_grad=1.0,
                                                   use_distributed_optimizer=args.distributed_optimizer), model)
config.finalize_model_grads_func = finalize_model_grads


def batches():
    while True:
        tokens = torch.randint(0, 1024, (args.micro_batch_size, args.seq), device="cuda")
        yield tokens, torch.roll(tokens, -1, dims=1)


def forward_step(data_iterator, model):
    tokens, labels = next(data_iterator)
    positions = torch.arange(args.seq, device="cuda").unsqueeze(0).expand_as(tokens)
    output = model(tokens, positions, None, labels=labels)

    def loss_func(output_tensor):
        loss = output_tensor.float().mean()
        return loss, {"lm loss": loss}

    return output, loss_func


forward_backward = get_forward_backward_func()
data = batches()
for step in range(args.steps):
    for m in model:
        m.zero_grad_buffer()
    optimizer.zero_grad()
    losses = forward_backward(forward_step_func=forward_step, data_iterator=[data] * len(model), model=model,
                              num_microbatches=args.micro_batches, seq_length=args.seq,
                              micro_batch_size=args.micro_batch_size, forward_only=False)
    ok, grad_norm, _ = optimizer.step()
    if torch.distributed.get_rank() == 0:
        print(f"step {step} ok={ok} grad_norm={grad_norm}", flush=True)
