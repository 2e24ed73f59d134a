"""Reward prediction (UNREAL's auxiliary task, as a regression): a linear head reads the torso's latent of x_t and
the action taken, and predicts r_t, so the representation learns what the reward depends on."""

import torch
from torch import nn
from torch.nn import functional as F

from levelray.learner.auxiliary import AuxiliaryInputs, AuxiliaryLoss, AuxiliaryOutput, AuxiliarySetup


class RewardPrediction(AuxiliaryLoss):
    name = "reward_prediction"  # its metrics' and checkpoint key's stem
    weight = 0.5  # in the learner's loss: IMPALA's + 0.5 x this one (one optimiser: the learner's)

    def __init__(self, setup: AuxiliarySetup):
        if not setup.spec.discrete:
            raise ValueError("reward_prediction takes a discrete action (one-hot)")
        self.num_actions = setup.spec.num_actions
        self.head = nn.Linear(setup.model.latent_dim + self.num_actions, 1)
        self.modules = (self.head,)  # trained, all-reduced and checkpointed with the policy network

    def loss(self, model: nn.Module, inputs: AuxiliaryInputs) -> AuxiliaryOutput:
        obs = inputs.tensor(inputs.batch["obs"][:-1])  # [T, B, ...] x_t of every step (x_T has no reward)
        T, B = obs.shape[:2]
        latent = model.representation(obs.reshape(T * B, *obs.shape[2:]))  # [T B, D], with gradient
        action = F.one_hot(inputs.forward.actions.reshape(T * B).long(), self.num_actions).to(latent.dtype)
        predicted = self.head(torch.cat([latent, action], dim=1)).view(T, B)
        rewards = inputs.tensor(inputs.batch["rewards"], torch.float32)
        w = inputs.weights  # [T, B] the steps the RL loss trains on, with their replay importance weights
        loss = (w * (predicted - rewards) ** 2).sum() / w.sum().clamp(min=1e-8)
        return AuxiliaryOutput(loss, {"reward_prediction_loss": float(loss.detach())})
