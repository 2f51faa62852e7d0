"""PyTorch Lightning DDP training, written the way a Lightning user writes it.

It imports nothing of ftbench: a ``LightningModule`` (a small MLP regressing a random
linear teacher), a synthetic dataset built from ``--seed``, and a ``Trainer`` with the
``ddp`` strategy on CPUs (gloo, with an explicit process-group timeout). A
``ModelCheckpoint`` saves every ``--ckpt-every`` steps and keeps ``last.ckpt``; every
start calls ``fit(ckpt_path="last")``, so a restarted job resumes from its last
checkpoint (the first start finds none and trains from scratch). The progress bar is
Lightning's tqdm bar (``Epoch E: ... | B/N [..., train_loss=...]``), refreshed every
``--log-every`` batches, as jobs whose output goes to a file configure it (Lightning's
default, a rich bar where ``rich`` is installed, draws nothing into a pipe before the end).

    torchrun --nproc-per-node 4 --max-restarts 3 examples/lightning/train.py \
        --devices 4 --steps 300 --ckpt-dir /tmp/lightning-ckpt

Under torchrun (or any launcher that sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``)
Lightning joins the launcher's world; run with plain ``python`` it starts the other
``--devices - 1`` processes itself.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.strategies import DDPStrategy
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self, in_features: int = 64, hidden: int = 256, lr: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(in_features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
        )

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def synthetic_data(seed: int, samples: int, in_features: int) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    teacher = torch.randn(in_features, 1, generator=gen)
    x = torch.randn(samples, in_features, generator=gen)
    y = x @ teacher + 0.1 * torch.randn(samples, 1, generator=gen)
    return TensorDataset(x, y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--in-features", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pg-timeout-s", type=float, default=1800.0)
    parser.add_argument("--ckpt-dir", type=Path, default=Path("lightning-ckpt"))
    parser.add_argument("--ckpt-every", type=int, default=50)
    parser.add_argument("--log-every", type=int, default=1, help="progress bar refresh, in batches")
    args = parser.parse_args()

    L.seed_everything(args.seed)
    data = synthetic_data(args.seed, args.samples, args.in_features)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True)
    model = Regressor(args.in_features, args.hidden, args.lr)
    checkpoint = ModelCheckpoint(
        dirpath=args.ckpt_dir / "checkpoints",
        filename="{epoch}-{step}",
        every_n_train_steps=args.ckpt_every,
        save_top_k=-1,
        save_last=True,
    )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=args.devices,
        num_nodes=args.num_nodes,
        strategy=DDPStrategy(process_group_backend="gloo", timeout=datetime.timedelta(seconds=args.pg_timeout_s)),
        max_steps=args.steps,
        callbacks=[checkpoint, TQDMProgressBar(refresh_rate=args.log_every)],
        default_root_dir=args.ckpt_dir,
        log_every_n_steps=1,
        enable_model_summary=False,
    )
    trainer.fit(model, loader, ckpt_path="last")


if __name__ == "__main__":
    main()
