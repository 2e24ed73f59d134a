"""Objects lost with a node's object store: an env actor that holds a reference to weights whose owner is gone
(`OwnerDiedError`, an `ObjectLostError`) does not hang: it asks the learner for its weights again and goes on.
The loss is made to happen for real: the weights are put by a Ray actor that is then killed."""

from __future__ import annotations

import pytest

from levelray.actors.env_actor import EnvActor
from levelray.actors.envs import env_spec
from levelray.learner.learner import Learner
from tests import support
from tests.support import wait_for


@pytest.mark.timeout(120)
def test_an_actor_whose_weights_were_lost_fetches_them_again_and_trains_on(ray_session, tmp_path):
    ray = ray_session
    cfg = support.cartpole_config(tmp_path, actors__envs_per_actor=4, env__num_levels=0)
    weights = Learner(env_spec(cfg.env), cfg.learner).get_weights()[1]

    @ray.remote
    class Owner:  # owns the first weights, as a learner on a node that is about to be lost
        def put(self, w):
            return [ray.put(w)]  # boxed: the caller gets the reference, not the value

    @ray.remote
    class Learner1:  # answers as a learner does; its first receipt names the lost weights
        def __init__(self, lost_box, w):
            self.lost_box, self.w = lost_box, w

        def latest_weights(self):
            if self.lost_box is not None:
                box, self.lost_box = self.lost_box, None
                return 1, box
            return 1, [ray.put(self.w)]

        def submit_batch(self, unrolls):
            return 1, []

    owner = Owner.remote()
    lost_box = ray.get(owner.put.remote(weights))
    ray.kill(owner)
    wait_for(lambda: _owner_gone(ray, lost_box[0]), 30, "the owner's death seen")
    actor = EnvActor(0, cfg, Learner1.remote(lost_box, weights))
    assert actor.run(max_unrolls=2) == 2  # did not hang, did not give up on the (alive) learner
    assert actor.weights_lost == 1 and actor.weight_fetches == 1 and not actor.learner_lost
    assert actor.worker.policy_version == 1


def _owner_gone(ray, ref) -> bool:
    try:
        ray.get(ref, timeout=5)
    except ray.exceptions.ObjectLostError:
        return True
    return False
