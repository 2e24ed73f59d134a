"""`learner.advantage_scale`: with PopArt, the policy-gradient advantages are divided by the spread of the value
targets (sigma, PopArt-IMPALA's rule) or by their root mean square (rms), against a float64 NumPy reference on random
targets and advantages; rms without PopArt is refused naming both flags."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from levelray.contracts.config import ConfigError, LearnerConfig, RunConfig, replace_paths
from levelray.contracts.spec import EnvSpec
from levelray.contracts.validate import validate
from levelray.learner.value_normalization import NormalisedHead, value_head
from levelray.policy.models import build_model

SPEC = EnvSpec(obs_shape=(4,), obs_dtype="float32", discrete=True, num_actions=2)


@pytest.mark.parametrize("scale", ["sigma", "rms"])
def test_advantages_are_divided_by_the_targets_spread_or_their_rms(scale):
    rng = np.random.default_rng(7)
    head = value_head(build_model(SPEC, "mlp"), LearnerConfig(advantage_scale=scale))
    assert isinstance(head, NormalisedHead) and head.advantage_scale == scale
    targets = rng.normal(95.0, 3.0, size=(20, 8))  # CartPole near its time limit: a large mean, a small spread
    advantages = rng.normal(0.0, 1.0, size=(20, 8))
    # the first move from fresh statistics takes the batch's moments whole (PopArt's debiased step is 1)
    head.update_statistics(torch.as_tensor(targets, dtype=torch.float32), torch.ones(20, 8), None)
    got = head.normalize_advantages(torch.as_tensor(advantages, dtype=torch.float32)).double().numpy()
    t = targets.astype(np.float32).astype(np.float64)
    scale_ref = np.sqrt(np.mean(t * t)) if scale == "rms" else np.sqrt(np.mean(t * t) - np.mean(t) ** 2)
    np.testing.assert_allclose(got, advantages / scale_ref, rtol=1e-5)
    assert (scale_ref > 90) == (scale == "rms")  # the RMS keeps the returns' scale, the spread does not


def test_rms_without_popart_is_refused_naming_both_flags():
    cfg = replace_paths(RunConfig(), {"learner.advantage_scale": "rms", "learner.value_normalization": False})
    with pytest.raises(ConfigError, match=r"--advantage-scale.*--value-normalization false"):
        validate(cfg)
    with pytest.raises(ConfigError, match="advantage_scale"):
        replace_paths(RunConfig(), {"learner.advantage_scale": "spread"})
