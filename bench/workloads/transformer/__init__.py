"""``transformer``: a small decoder-only language model under DDP, FSDP2 or HSDP.

The jobs whose failures cost money train transformers, often with sharded state; a
sharded job recovers differently from a replicated one (a lost shard has no live copy
unless a replica group holds it). ``parallelism`` picks how the state is laid out, and
:func:`check` refuses the combinations of parallelism and recovery stack that cannot
recover it, with the reason, before anything is launched (docs/workloads.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from bench.scenario.config import ConfigError, bounded
from bench.scenario.faults import FAULTS
from bench.scenario.workload import WORKLOADS, Estimate, WorkloadPlugin

if TYPE_CHECKING:
    from bench.scenario.model import Scenario


@dataclass(frozen=True, kw_only=True, slots=True)
class TransformerParams:
    layers: int = bounded(2, ge=1, le=64)
    """Transformer blocks (causal self-attention + MLP, pre-norm)."""
    width: int = bounded(64, ge=8, le=8192)
    """Model width (embedding size); a multiple of ``heads``."""
    heads: int = bounded(4, ge=1, le=128)
    """Attention heads per block."""
    seq_len: int = bounded(32, ge=2, le=8192)
    """Tokens per sequence (the context length)."""
    vocab: int = bounded(256, ge=2, le=1 << 20)
    """Vocabulary size of the synthetic token streams."""
    tied: bool = True
    """Tie the output layer to the token embedding (one shared matrix)."""
    batch_per_rank: int = bounded(4, ge=1)
    """Sequences per rank per step in the full world; the global batch stays fixed after a
    shrink (survivors take bigger shares), so the loss curve stays comparable."""
    lr: float = bounded(1e-3, gt=0, le=10)
    """AdamW learning rate (its two moment buffers are optimizer state recovery carries)."""
    parallelism: Literal["ddp", "fsdp", "hsdp"] = "ddp"
    """``ddp``: every rank holds the whole model (DistributedDataParallel); ``fsdp``: FSDP2
    ``fully_shard`` per block and at the root, each rank holding 1/world of the state;
    ``hsdp``: a 2-D device mesh, ``replicas`` groups that each shard the state."""
    replicas: int = bounded(2, ge=1, le=256)
    """``hsdp`` only: replica groups (the mesh's replicate dimension); each shards the
    state over ``world_size / replicas`` ranks."""


#: Stacks that train a sharded transformer, and how each gets the lost shards back.
#: Anything else is refused with :data:`REFUSED`'s reason (or the generic one).
SHARDED_OK = {
    "failstop": "detection only: the job ends, nothing is restored",
    "torchft": "hsdp only: each replica group shards the model, and a lost group heals from a live replica",
}
TORCHFT_NEEDS_HSDP = (
    "torchft replicates across replica groups; a transformer replica group is a sharded (FSDP2) world, so "
    "a lost rank's shards come back from the same shard index of a live group. Under fsdp there is one "
    "group and no live copy; ddp replicas of the transformer are not built (torchft's own DDP loop trains "
    "the ddp workload)"
)
REFUSED = {
    "reinit": "a lost rank's shard has no live copy under fsdp (under hsdp a replica group holds one, "
    "but reinit would have to rebuild the 2-D mesh over the survivors and re-shard, which it does not), "
    "its restore broadcasts one peer's whole state, and FSDP's own collectives bypass its abortable "
    "layer, so a survivor behind a survivor would wait out pg_timeout_s",
    "torch-reconfigure": "torch's _reconfigure re-forms the default group in place, but FSDP2's device "
    "mesh and sharded parameters stay bound to the old group, and a lost shard has no live copy",
}
CHECKPOINTING = ("restart", "nvrx-launcher", "nvrx-inprocess")
"""Stacks that reload a checkpoint into the world that comes back: a sharded one needs
``torch.distributed.checkpoint`` (every rank writes its part), not rank 0's torch.save."""
DCP_DESIGNS = ("dcp", "dcp-async")


def check(scenario: Scenario, file: str) -> None:
    """Shapes that cannot be built, and stacks that cannot recover the parallelism."""
    p: TransformerParams = scenario.workload.params
    world = scenario.workload.world_size
    if p.width % p.heads:
        raise ConfigError(file, "workload.width", f"a multiple of workload.heads ({p.heads})", p.width)
    if p.parallelism == "hsdp" and (p.replicas < 2 or world % p.replicas or world // p.replicas < 2):
        raise ConfigError(
            file,
            "workload.replicas",
            f"a divisor of workload.world_size ({world}) of at least 2 that leaves at least 2 ranks per "
            "replica group (hsdp: replicate x shard)",
            p.replicas,
        )
    strategy = scenario.recovery.strategy
    if strategy == "torchft" and p.parallelism != "hsdp":
        raise ConfigError(
            file,
            "workload.parallelism",
            f"'hsdp' with strategy torchft: {TORCHFT_NEEDS_HSDP}",
            p.parallelism,
        )
    if p.parallelism == "ddp":
        return
    for i, f in enumerate(scenario.faults):
        if FAULTS[f.kind].rank_side:
            raise ConfigError(
                file,
                f"faults.{i}.kind",
                f"a fault that acts from outside the rank with workload.parallelism = {p.parallelism!r}: "
                "FSDP2's all-gathers and reduce-scatters are its own torch.distributed calls, which ftbench's "
                "rank-side hooks do not sit in (the fault would never act)",
                f.kind,
            )
    if strategy in SHARDED_OK:
        return
    design = getattr(scenario.recovery.params, "checkpoint", None)
    if strategy in CHECKPOINTING:
        if design in DCP_DESIGNS:
            return
        why = f"rank 0 saves the state it holds with torch.save, which under {p.parallelism} is one shard; " + (
            f'set recovery.{strategy}.checkpoint = "dcp" (torch.distributed.checkpoint)'
            if design is not None
            else "it needs a torch.distributed.checkpoint design (recovery.<strategy>.checkpoint, not in this build)"
        )
    else:
        why = REFUSED.get(strategy, "it has no way to restore a lost shard")
    raise ConfigError(file, "workload.parallelism", f"'ddp' with strategy {strategy}: {why}", p.parallelism)


def parameters(p: TransformerParams) -> tuple[int, int]:
    """(all parameters, those of the root: embedding, positions, final norm, untied head)."""
    root = p.vocab * p.width + p.seq_len * p.width + 2 * p.width + (0 if p.tied else p.vocab * p.width)
    block = 12 * p.width * p.width + 13 * p.width  # qkv, proj, 4x MLP up and down, two norms
    return root + p.layers * block, root


def memory(p: TransformerParams, world_size: int) -> Estimate:
    """fp32 weights, gradients and AdamW's two moments (16 bytes a parameter; under
    fsdp/hsdp each rank holds its share, plus the root's whole weights and gradient while
    gathered), and one rank's activations: per token each block keeps ~20 widths, the
    head 3 vocabularies, and attention a heads x seq_len score row per token."""
    total, root = parameters(p)
    sharded = p.parallelism != "ddp"
    shard = world_size // math.gcd(p.replicas, world_size) if p.parallelism == "hsdp" else world_size
    state = 16.0 * total / shard + 8.0 * root if sharded else 20.0 * total  # ddp: + its gradient buckets
    tokens = p.batch_per_rank * p.seq_len
    acts = 4.0 * tokens * (p.layers * 20 * p.width + 3 * p.vocab)
    scores = 8.0 * tokens * p.heads * p.seq_len * p.layers
    knob = "seq_len" if scores > max(state, acts) else ("vocab" if 2 * root > total else "width")
    return Estimate(knob=knob, parts={"weights and optimizer": state, "activations": acts, "attention": scores})


WORKLOADS.register(
    WorkloadPlugin(
        name="transformer",
        params=TransformerParams,
        impl="bench.workloads.transformer.impl:TransformerWorkload",
        summary="decoder-only LM on seeded token streams under DDP, FSDP2 or HSDP; tokens/s, data position",
        check=check,
        memory=memory,
    )
)
