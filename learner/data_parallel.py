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
- An auxiliary loss (`learner.auxiliary`) is a mean over a fixed number of items per rank: its gradient is a plain
  average. An update where only some ranks ran it (a loss whose batch comes from replay, which fills at a
  different time on each) leaves its term out on every rank: the ranks must take the same step.
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
                         aux_params: list[list[torch.nn.Parameter]], aux_grads: list[list | None], finite: bool
                         ) -> tuple[bool, list[list | None]]:
        """Combine the ranks' gradients in one all-reduce: the agent loss's (in `p.grad` of `agent_params`),
        weighted by `share` (this rank's fraction of the union's trained steps), and each auxiliary loss's
        (`aux_grads[k]`, aligned with `aux_params[k]`; None: that loss did not run on this rank) averaged. Writes
        the agent's result back to `p.grad` and returns `(finite on every rank, each auxiliary loss's gradient, or
        None where some rank did not run it)`. A gradient that is None here (a parameter the loss does not reach)
        stays None."""
        ran = [finite and g is not None for g in aux_grads]
        agent_present = [p.grad is not None for p in agent_params]
        parts = [p.grad * share if finite and p.grad is not None else torch.zeros_like(p) for p in agent_params]
        presents = []
        for params, grads, on in zip(aux_params, aux_grads, ran, strict=True):
            values = grads if on else [None] * len(params)
            parts += [g if g is not None else torch.zeros_like(p) for p, g in zip(params, values, strict=True)]
            presents.append([g is not None for g in values])
        flags = torch.tensor([0.0 if finite else 1.0, *(1.0 if on else 0.0 for on in ran)], device=parts[0].device)
        flat = torch.cat([t.reshape(-1).float() for t in parts] + [flags])
        dist.all_reduce(flat, group=self.group)
        nonfinite, *ranks_ran = flat[-len(flags):].tolist()
        if nonfinite > 0:
            return False, [None] * len(aux_grads)
        offset = 0
        for p, present in zip(agent_params, agent_present, strict=True):
            n = p.numel()
            p.grad = flat[offset:offset + n].view_as(p).to(p.dtype) if present else None
            offset += n
        reduced: list[list | None] = []
        for params, present, count in zip(aux_params, presents, ranks_ran, strict=True):
            grads = []
            for p, here in zip(params, present, strict=True):
                n = p.numel()
                grads.append(flat[offset:offset + n].view_as(p).div(self.world_size).to(p.dtype) if here else None)
                offset += n
            reduced.append(grads if count >= self.world_size else None)  # some ranks did not run it: no term
        return True, reduced
