"""Run by tests/test_data_parallel.py in a child process: one rank of a gloo process group (a `FileStore`
rendezvous, no port) training a `Learner` with `DataParallel` on its share of the inputs the test pickled.

    python tests/data_parallel_rank.py INPUTS RANK WORLD STORE OUT

INPUTS holds `spec`, `learner` (its config), `model_loss` (or None) and `batches`: per update, one batch per rank
(`stack_unrolls` dicts) and optionally `model_batches` likewise. OUT receives the parameters, the metrics and the
gloo threads still running once the group is destroyed."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from levelray.learner.data_parallel import DataParallel, init_group
from levelray.learner.learner import Learner
from levelray.learner.model_loss import model_losses


def gloo_threads() -> list[str]:
    """The names of this process's gloo threads (worker loops, the transport's event loop) now."""
    tasks = Path("/proc/self/task")
    return [name for name in ((t / "comm").read_text().strip() for t in tasks.iterdir()) if "gloo" in name]


def main(inputs: str, rank: int, world: int, store_path: str, out: str) -> None:
    torch.set_num_threads(1)
    with open(inputs, "rb") as f:
        data = pickle.load(f)
    init_group(rank, world, dist.FileStore(store_path, world))
    try:
        learner = Learner(data["spec"], data["learner"], seed=rank, auxiliary=model_losses(data["model_loss"]),
                          data_parallel=DataParallel())  # seeds differ: the broadcast makes the model one
        metrics = []
        for k, per_rank in enumerate(data["batches"]):
            model_batch = data["model_batches"][k][rank] if data.get("model_batches") else None
            metrics.append(learner.update(per_rank[rank], model_batch).metrics)
        state = {name: p.detach().clone() for name, p in learner.model.named_parameters()}
        for aux in learner.auxiliary:  # the model loss's modules
            state.update({f"model_loss.{name}": p.detach().clone()
                          for module in aux.modules for name, p in module.named_parameters()})
        result = {"params": state, "metrics": metrics, "version": learner.version,
                  "samples_trained": learner.samples_trained,
                  "popart": learner.value_norm.state_dict() if learner.value_norm else None}
    finally:
        dist.destroy_process_group()
    result["gloo_threads_after_destroy"] = gloo_threads()  # any left run on into the interpreter's exit
    with open(out, "wb") as f:
        pickle.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
