"""Several learners training one policy (data parallelism, as DDP): each rank computes the gradient of its own
batch, the ranks' gradients are combined by one all-reduce, and every rank applies the same step, so the model,
the optimisers' moments and PopArt's statistics stay identical on every rank.

What "the same step as one learner on the union of the batches" takes, and why each piece is here:
- IMPALA's loss is a mean over a batch's trained steps (`losses.impala_losses`: the steps with mask > 0). With
  Robust PLR's masks the ranks train different numbers of steps, so a plain average of their gradients would
  weigh a step of a rank with few trained steps above one of a rank with many. Each rank's gradient is therefore
  weighted by its share of the union's trained steps, `n_r / sum(n)`, and the weighted gradients summed: the
  gradient of the mean over the union. `union_count` gives `sum(n)` (and whether any rank trains at all: a
  batch wholly masked on every rank is no update, on every rank alike).
- PopArt moves its moments on the union's targets: `sum` reduces the ranks' sums, sums of squares and counts.
- The model loss is a mean over a fixed number of sequences per rank: a plain average. An update where only some
  ranks have a model batch (replay fills at a different time on each) leaves the model term out on every rank:
  the ranks must take the same step.
- A non-finite loss or gradient on any rank skips the update on every rank (`learner.NonFiniteUpdate`).

The all-reduce sums every rank's tensors in one buffer: the ranks get the same bits back, and every later step
(norms, clipping, the optimisers) is deterministic on identical inputs, so the ranks' parameters stay
bit-identical (tests/test_data_parallel.py). On gloo (CPU) or NCCL (CUDA) through `torch.distributed`; the
group is made by the caller (`init_group`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def init_group(rank: int, world_size: int, store: dist.Store, backend: str = "gloo") -> None:
    """Join the default process group as `rank` of `world_size`, meeting the others through `store` (a
    `FileStore` or `TCPStore`: no fixed port).

    `torch.distributed.nn` is imported first. Its functions take `group.WORLD` as a default argument, bound when
    the module is imported, and torch imports it lazily (the first optimiser, through `torch._dynamo`). Imported
    after the group exists, those defaults keep the group alive through `destroy_process_group`: gloo's worker
    threads then outlive `main`, and one that drops a collective's tensor while the interpreter finalises aborts
    the process ("terminate called without an active exception")."""
    import torch.distributed.nn  # noqa: F401

    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size)


class DataParallel:
    """The learner's handle on the process group: the sums its update needs, and the gradient reduction."""

    def __init__(self, group: dist.ProcessGroup | None = None):
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """`values` summed over the ranks (float64 in, float64 out; the input is not changed)."""
        out = values.detach().to(torch.float64).clone()
        dist.all_reduce(out, group=self.group)
        return out

    def union_count(self, trained: int) -> int:
        """The trained steps of all ranks' batches together."""
        return int(self.sum(torch.tensor([float(trained)]))[0])

    @torch.no_grad()
    def broadcast_parameters(self, params: list[torch.nn.Parameter]) -> None:
        """Rank 0's values into every rank's `params` (the ranks start from one model)."""
        for p in params:
            dist.broadcast(p.data, src=0, group=self.group)

    @torch.no_grad()
    def reduce_gradients(self, agent_params: list[torch.nn.Parameter], share: float,
                         model_params: list[torch.nn.Parameter], model_grads: list | None, finite: bool
                         ) -> tuple[bool, list | None]:
        """Combine the ranks' gradients in one all-reduce: the agent loss's (in `p.grad` of `agent_params`),
        weighted by `share` (this rank's fraction of the union's trained steps), and the model loss's
        (`model_grads`, aligned with `model_params`; None: no model term on this rank) averaged. Writes the
        agent's result back to `p.grad` and returns `(finite on every rank, the model's gradient or None)`.
        A gradient that is None here (a parameter the loss does not reach) stays None."""
        has_model = finite and model_grads is not None
        agent_present = [p.grad is not None for p in agent_params]
        model_present = [g is not None for g in model_grads] if has_model else [False] * len(model_params)
        parts = [p.grad * share if finite and p.grad is not None else torch.zeros_like(p) for p in agent_params]
        parts += [g if present else torch.zeros_like(p)
                  for p, g, present in zip(model_params, model_grads or [None] * len(model_params), model_present,
                                           strict=True)]
        flags = torch.tensor([0.0 if finite else 1.0, 1.0 if has_model else 0.0], device=parts[0].device)
        flat = torch.cat([t.reshape(-1).float() for t in parts] + [flags])
        dist.all_reduce(flat, group=self.group)
        if flat[-2].item() > 0:
            return False, None
        offset = 0
        for p, present in zip(agent_params, agent_present, strict=True):
            n = p.numel()
            p.grad = flat[offset:offset + n].view_as(p).to(p.dtype) if present else None
            offset += n
        ranks_with_model = int(flat[-1].item())
        if ranks_with_model < self.world_size:  # some ranks had no model batch: no model term anywhere
            return True, None
        reduced = []
        for p, present in zip(model_params, model_present, strict=True):
            n = p.numel()
            reduced.append(flat[offset:offset + n].view_as(p).div(self.world_size).to(p.dtype) if present else None)
            offset += n
        return True, reduced
