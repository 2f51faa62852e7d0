"""Hugging Face ``transformers.Trainer`` on a tiny causal language model, written the way
a Trainer user writes a script.

It imports nothing of ftbench: a GPT-2 configuration built in code (2 layers, 64-wide,
a 256-token vocabulary), randomly initialised, trained on a synthetic token dataset
(sequences that count up from a random start by a random stride, modulo the vocabulary,
so there is something to learn) with the stock ``Trainer``: DDP over gloo on CPUs with
an explicit ``ddp_timeout`` (given to the process group the script starts itself, since
the Trainer drops it on CPUs), a log line every ``--logging-steps`` steps, a checkpoint
every ``--save-steps`` steps in ``--output-dir``, and ``resume_from_checkpoint`` when
the output folder already holds one, as a restarted job does. Nothing is downloaded.

    torchrun --nproc-per-node 4 --max-restarts 3 examples/hf_trainer/train.py \
        --max-steps 300 --output-dir /tmp/hf-out
    accelerate launch --num-processes 4 --cpu examples/hf_trainer/train.py ...
"""

from __future__ import annotations

import argparse
import datetime
import os

import torch
import torch.distributed as dist
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, set_seed
from transformers.trainer_utils import get_last_checkpoint


class CountingTokens(torch.utils.data.Dataset):
    """``n`` sequences of ``length`` tokens: ``start + i * stride (mod vocab)``."""

    def __init__(self, n: int, length: int, vocab: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        start = torch.randint(0, vocab, (n, 1), generator=gen)
        stride = torch.randint(1, 8, (n, 1), generator=gen)
        self.ids = (start + stride * torch.arange(length)) % vocab

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", default="hf-out")
    parser.add_argument("--max-steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=8, help="per device")
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ddp-timeout", type=int, default=1800, help="seconds")
    parser.add_argument("--logging-steps", type=int, default=1)
    parser.add_argument("--save-steps", type=int, default=50)
    args = parser.parse_args()

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        # On CPUs, transformers (5.25) does not hand ddp_timeout to accelerate, which then
        # starts gloo with torch's 30-minute default: start the group with the timeout
        # here, and the Trainer uses it.
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.ddp_timeout))
    set_seed(args.seed)
    config = GPT2Config(
        vocab_size=args.vocab,
        n_positions=args.seq_len,
        n_embd=args.width,
        n_layer=args.layers,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = GPT2LMHeadModel(config)
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        logging_steps=args.logging_steps,
        save_strategy="steps",
        save_steps=args.save_steps,
        save_total_limit=2,
        seed=args.seed,
        use_cpu=True,
        ddp_backend="gloo",
        ddp_timeout=args.ddp_timeout,
        dataloader_num_workers=0,
        report_to="none",
    )
    data = CountingTokens(args.samples, args.seq_len, args.vocab, args.seed)
    trainer = Trainer(model=model, args=training_args, train_dataset=data)
    last = get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None
    trainer.train(resume_from_checkpoint=last)


if __name__ == "__main__":
    main()
