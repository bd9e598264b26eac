"""Training a small GPT with Lightning's Trainer and `strategy="fsdp"`, the way Lightning's docs write it: a
LightningModule with `training_step` and `configure_optimizers`, a DataLoader, `trainer.fit`."""
import argparse

import lightning as L
import torch
from gpt import GPT, Block
from lightning.pytorch.strategies import FSDPStrategy
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--devices", type=int, default=2)
p.add_argument("--steps", type=int, default=3)
args = p.parse_args()


class LitGPT(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = GPT()

    def training_step(self, batch, batch_idx):
        (x,) = batch
        loss = self.model(x, x)
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-4)


tokens = torch.randint(0, 1024, (8 * args.steps * args.devices, 128))
loader = DataLoader(TensorDataset(tokens), batch_size=8)
trainer = L.Trainer(accelerator="cuda", devices=args.devices, strategy=FSDPStrategy(auto_wrap_policy={Block}),
                    precision="bf16-mixed", max_steps=args.steps, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(LitGPT(), loader)
print(f"trained {trainer.global_step} steps on {trainer.strategy.root_device}")
