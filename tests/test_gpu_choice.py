"""The learner asks for a GPU when the cluster has one and uses CUDA when torch sees it.

No GPU can exist on this machine or in CI, so these tests MOCK one: they replace Ray's view of the
cluster's resources and torch's CUDA probe, and check the decisions made from them. A real GPU run
goes through `python -m benchmarks.bench_learner --device cuda` on a lent GPU machine."""

import numpy as np
import pytest
import torch

from levelray.contracts.config import RunConfig
from levelray.deploy.training import ray_backend
from levelray.learner.device import host_to_device, pick_device


def test_pick_device_prefers_cuda_when_torch_sees_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # mock: no GPU here
    assert pick_device("auto").type == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device("auto").type == "cpu"
    with pytest.raises(ValueError, match="CUDA is not available"):
        pick_device("cuda")


@pytest.mark.parametrize("gpus_in_cluster, expected", [(0, 0), (1, 1), (4, 1)])
def test_learner_actor_requests_a_gpu_only_when_the_cluster_has_one(monkeypatch, gpus_in_cluster, expected):
    import ray

    import levelray.learner.service as service

    asked = []

    class Recorder:  # stands in for the Ray actor class so nothing is scheduled on a GPU that is not there
        def remote(self, *args, **kwargs):
            return "learner-handle"

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0, "GPU": float(gpus_in_cluster)})
    monkeypatch.setattr(service, "learner_actor_class",
                        lambda num_gpus, resources=None: asked.append(num_gpus) or Recorder())
    job = ray_backend.RayJob.__new__(ray_backend.RayJob)
    job.cfg, job.level_service, job.replay_service = RunConfig(), None, None
    job.spec = type("Spec", (), {"to_dict": lambda self: {}})()
    assert job._start_learners(None) == ["learner-handle"]
    assert asked == [expected]


def test_a_restarted_learner_asks_again_for_what_the_cluster_has_now(monkeypatch, tmp_path):
    """The GPU node that held the learner is gone (that is often why it died): the restart must ask Ray for
    no GPU, or it would stay pending forever. Ray's resource view, the actor class and the actor calls are
    MOCKED (no GPU or second node here); the restart logic and the run directory are the real ones."""
    import ray

    import levelray.learner.service as service
    from levelray.contracts.config import RunConfig
    from levelray.deploy.rundir import RunDir

    resources = {"CPU": 8.0, "GPU": 1.0}
    asked = []

    class Recorder:
        def remote(self, *args, **kwargs):
            return f"learner-{len(asked)}"

    class Supervisor:
        class set_learner:  # noqa: N801 - mirrors an actor method
            @staticmethod
            def remote(handle):
                return handle

    monkeypatch.setattr(ray, "cluster_resources", lambda: dict(resources))
    monkeypatch.setattr(ray, "kill", lambda handle: None)
    monkeypatch.setattr(ray, "get", lambda ref, timeout=None: ref)
    monkeypatch.setattr(service, "learner_actor_class",
                        lambda num_gpus, resources=None: asked.append(num_gpus) or Recorder())
    job = ray_backend.RayJob.__new__(ray_backend.RayJob)
    job.cfg, job.cfg_dict, job.level_service, job.replay_service = RunConfig(), {}, None, None
    job.spec = type("Spec", (), {"to_dict": lambda self: {}})()
    job.run_dir, job.supervisor, job.learner_restarts, job.last_learner_stats = RunDir(tmp_path), Supervisor(), 0, None
    job.learners = job._start_learners(None)
    resources["GPU"] = 0.0  # the GPU node is lost with the learner
    job.restart_learner("RayActorError")
    assert asked == [1, 0] and job.learner == "learner-2" and job.learner_restarts == 1


def test_host_to_device_on_the_cpu_keeps_the_array_and_casts_on_request():
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, size=(3, 2, 4, 4, 3), dtype=np.uint8)
    t = host_to_device(obs, torch.device("cpu"))
    assert t.dtype == torch.uint8 and np.shares_memory(t.numpy(), obs)  # observations cross as uint8, no copy
    rewards = rng.normal(size=(3, 2))  # float64, as a NumPy sum would make them
    r = host_to_device(rewards, torch.device("cpu"), torch.float32)
    assert r.dtype == torch.float32 and np.array_equal(r.numpy(), rewards.astype(np.float32))
    strided = host_to_device(obs[:, :, ::2], torch.device("cpu"))  # not contiguous: copied, then used
    assert np.array_equal(strided.numpy(), obs[:, :, ::2])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none here or in CI)")
def test_host_to_device_on_a_gpu_copies_through_pinned_memory_and_casts_there():
    obs = np.arange(2 * 3 * 5, dtype=np.uint8).reshape(2, 3, 5)
    t = host_to_device(obs, torch.device("cuda"), torch.float32)
    assert t.is_cuda and t.dtype == torch.float32
    assert np.array_equal(t.cpu().numpy(), obs.astype(np.float32))
