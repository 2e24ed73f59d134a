"""Policy/value networks: the IMPALA ResNet for images, a small grid network for MiniGrid's symbolic view,
an MLP for vectors.

All map observations `[N, *obs_shape]` to `(dist_params [N, P], value [N])`: the action distribution's
parameters (`policy.distributions`; P is `EnvSpec.policy_params`) and the value. Images arrive as uint8
`[N, H, W, C]` and are scaled inside the model, so actors ship 1 byte per pixel.

Each network is a torso (`torso(obs) -> [N, latent_dim]`, also its `representation`) and heads
(`heads(x) -> (dist_params, value)`). With `lstm_size` N > 0 an LSTM core (`policy.recurrent.LSTMCore`, the
network's `core`) sits between them, the heads read its `[N]` output, and the network runs through
`policy.recurrent.unroll` with its state; its feed-forward calls (`forward`, `dist_params`) refuse. With 0,
`core` is None and the network is feed-forward.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn
from torch.nn import functional as F

from levelray.contracts.spec import MINIGRID_TABLE_SIZES, EnvSpec
from levelray.policy.recurrent import LSTMCore


class _ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(F.relu(self.conv0(F.relu(x))))


class _ConvSequence(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.res0 = _ResidualBlock(out_channels)
        self.res1 = _ResidualBlock(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(self.conv(x), kernel_size=3, stride=2, padding=1)
        return self.res1(self.res0(x))


def _feed_forward(model: nn.Module) -> None:
    """ValueError for a feed-forward call of a recurrent network: its outputs depend on its state."""
    if model.core is not None:
        raise ValueError(f"{type(model).__name__} has an LSTM core (learner.lstm_size {model.core.size}): run it "
                         f"with its state through policy.recurrent.unroll, not as a feed-forward network")


class _SharedTorso(nn.Module):
    """A network whose policy and value heads read one feature vector `_features(obs) [N, latent_dim]` (through
    the core, where there is one): that vector is also the representation the model loss (`learner.model_loss`)
    unrolls."""

    policy: nn.Module
    value: nn.Module
    core: LSTMCore | None

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _feed_forward(self)
        return self.heads(self._features(obs))

    def dist_params(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy head alone: what an actor needs to act."""
        _feed_forward(self)
        return self.policy(self._features(obs))

    def representation(self, obs: torch.Tensor) -> torch.Tensor:
        """The torso's features, `[N, latent_dim]` (before the core, where there is one)."""
        return self._features(obs)

    def torso(self, obs: torch.Tensor) -> torch.Tensor:
        return self._features(obs)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`(dist_params [N, P], value [N])` of what the heads read, `x [N, latent_dim or lstm_size]`."""
        return self.policy(x), self.value(x).squeeze(-1)


class ImpalaCNN(_SharedTorso):
    """Espeholt et al. 2018 (fig. 3, large network) as used for Procgen: depths 16/32/32, 256 units."""

    def __init__(self, spec: EnvSpec, depths: tuple[int, ...] = (16, 32, 32), hidden: int = 256, lstm_size: int = 0):
        super().__init__()
        h, w, c = spec.obs_shape
        seqs = []
        for depth in depths:
            seqs.append(_ConvSequence(c, depth))
            c, h, w = depth, (h + 1) // 2, (w + 1) // 2
        self.trunk = nn.Sequential(*seqs)
        self.fc = nn.Linear(c * h * w, hidden)
        self.core = LSTMCore(hidden, spec.core_input_size, lstm_size) if lstm_size else None
        heads_in = lstm_size or hidden
        self.policy = nn.Linear(heads_in, spec.policy_params)
        self.value = nn.Linear(heads_in, 1)
        nn.init.orthogonal_(self.policy.weight, gain=0.01)
        nn.init.zeros_(self.policy.bias)

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.permute(0, 3, 1, 2).float() * (1.0 / 255.0)
        x = F.relu(self.trunk(x)).flatten(1)
        return F.relu(self.fc(x))

    @property
    def latent_dim(self) -> int:
        return self.fc.out_features


def _hidden(tower: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """`tower[:-1](x)` without building a new Sequential per call (the model loss calls this every update)."""
    for layer in itertools.islice(tower, len(tower) - 1):
        x = layer(x)
    return x


class MLP(nn.Module):
    """Separate policy and value towers (tanh), orthogonal init as in most on-policy baselines.

    With an LSTM core, the towers' hidden layers are the torso (both read the observation, their last hidden
    layers concatenated, as `representation`), the core reads that, and each tower's output layer is a head on
    the core's output."""

    def __init__(self, spec: EnvSpec, hidden_sizes: tuple[int, ...] = (64, 64), lstm_size: int = 0):
        super().__init__()
        in_dim = int(math.prod(spec.obs_shape))
        self.discrete = spec.discrete
        self.latent_dim = 2 * (hidden_sizes[-1] if hidden_sizes else in_dim)

        def tower(out_dim: int, out_gain: float) -> nn.Sequential:
            layers, d = [], in_dim
            for size in hidden_sizes:
                lin = nn.Linear(d, size)
                nn.init.orthogonal_(lin.weight, gain=math.sqrt(2))
                nn.init.zeros_(lin.bias)
                layers += [lin, nn.Tanh()]
                d = size
            out = nn.Linear(lstm_size or d, out_dim)
            nn.init.orthogonal_(out.weight, gain=out_gain)
            nn.init.zeros_(out.bias)
            return nn.Sequential(*layers, out)

        policy_width = spec.num_actions if spec.discrete else spec.action_dim
        self.core = LSTMCore(self.latent_dim, spec.core_input_size, lstm_size) if lstm_size else None
        self.policy = tower(policy_width, 0.01)
        self.value = tower(1, 1.0)
        if not spec.discrete:
            self.log_std = nn.Parameter(torch.full((spec.action_dim,), -0.5))

    def dist_params(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy tower alone: actors never need the value tower."""
        _feed_forward(self)
        return self._with_log_std(self.policy(obs.flatten(1).float()))

    def _with_log_std(self, dist_params: torch.Tensor) -> torch.Tensor:
        if not self.discrete:
            dist_params = torch.cat([dist_params, self.log_std.expand_as(dist_params)], dim=-1)
        return dist_params

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.dist_params(obs), self.value(obs.flatten(1).float()).squeeze(-1)

    def representation(self, obs: torch.Tensor) -> torch.Tensor:
        """`[N, latent_dim]`: the last hidden layers of both towers, concatenated. The MLP has no shared
        torso, so the model loss (`learner.model_loss`) shapes both towers' features, policy and value."""
        x = obs.flatten(1).float()
        return torch.cat([_hidden(self.policy, x), _hidden(self.value, x)], dim=1)

    def torso(self, obs: torch.Tensor) -> torch.Tensor:
        return self.representation(obs)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The towers' output layers on the core's output `x [N, lstm_size]`."""
        return self._with_log_std(self.policy[-1](x)), self.value[-1](x).squeeze(-1)


class MiniGridNet(_SharedTorso):
    """For MiniGrid's symbolic view (`contracts.spec.MINIGRID_OBS`, uint8 `[V, V, 4]`: 7×7, or the maze's DCD
    view of 5×5).

    Each cell's object, colour and state index has a learned embedding (one table, offset per channel,
    `embed_dim` each, concatenated), then three 2×2 convolutions of 16, 32 and 64 channels with a 2×2
    max-pool after the first, as in the MiniGrid models of the PLR code (rl-starter-files' ACModel): a 7×7
    view ends as 64 features. A view smaller than 7×7 (`--maze-view dcd`), which that stack cannot take, gets
    DCD's torso instead (its `models/multigrid_models.py`): one 3×3 convolution of 16 channels, no padding, so a
    5×5 view ends as 3×3×16 = 144 features. The agent's direction (channel 3) has its own embedding,
    concatenated to them (DCD's one-hot direction through a linear layer is the same thing: a row per direction).
    Separate policy and value towers (`hidden` tanh units, then the output layer) read those features;
    `value` is a Sequential ending in `Linear(hidden, 1)`, what PopArt's `value_output_layer` expects.

    Indices beyond `MINIGRID_TABLE_SIZES` are clamped to the last row of their table.
    """

    def __init__(self, spec: EnvSpec, embed_dim: int = 8, hidden: int = 64, lstm_size: int = 0):
        super().__init__()
        if not spec.discrete:
            raise ValueError("model minigrid_cnn supports discrete actions only")
        if len(spec.obs_shape) != 3 or spec.obs_shape[2] != len(MINIGRID_TABLE_SIZES) or spec.obs_dtype != "uint8":
            raise ValueError(f"model minigrid_cnn needs MiniGrid's uint8 [H, W, 4] observations, got "
                             f"{spec.obs_dtype} {list(spec.obs_shape)}")
        h, w, _ = spec.obs_shape
        sizes = torch.tensor(MINIGRID_TABLE_SIZES)
        # not in the state dict: constants, and actors load exactly the learner's parameters
        self.register_buffer("offsets", torch.cumsum(sizes, 0) - sizes, persistent=False)
        self.register_buffer("max_index", sizes - 1, persistent=False)
        # the channel (object, colour, state) each row of `embed` below the direction's belongs to
        self.register_buffer("channel_of_row", torch.repeat_interleave(torch.arange(3), sizes[:3]), persistent=False)
        self.embed = nn.Embedding(int(sizes.sum()), embed_dim)
        if min(h, w) >= 7:
            self.conv = nn.Sequential(
                nn.Conv2d(3 * embed_dim, 16, 2), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(16, 32, 2), nn.ReLU(),
                nn.Conv2d(32, 64, 2), nn.ReLU(),
            )
        else:  # DCD's torso for its 5x5 view (see the class doc)
            self.conv = nn.Sequential(nn.Conv2d(3 * embed_dim, 16, 3), nn.ReLU())
        with torch.no_grad():
            try:
                conv_out = self.conv(torch.zeros(1, 3 * embed_dim, h, w)).numel()
            except RuntimeError:
                raise ValueError(f"model minigrid_cnn needs a view of at least 3×3 cells, got {h}×{w}") from None
        features = conv_out + embed_dim
        self.latent_dim = features
        self.core = LSTMCore(features, spec.core_input_size, lstm_size) if lstm_size else None

        def tower(out_dim: int, out_gain: float) -> nn.Sequential:
            out = nn.Linear(hidden, out_dim)
            nn.init.orthogonal_(out.weight, gain=out_gain)
            nn.init.zeros_(out.bias)
            return nn.Sequential(nn.Linear(lstm_size or features, hidden), nn.Tanh(), out)

        self.policy = tower(spec.num_actions, 0.01)
        self.value = tower(1, 1.0)

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        idx = torch.minimum(obs.long(), self.max_index) + self.offsets  # [N, H, W, 4] rows of `embed`
        cell_rows = idx[..., :3]
        if torch.is_grad_enabled():
            x = self._first_conv_of_one_hot(cell_rows)
        else:
            N, H, W, _ = idx.shape
            x = self.conv[0](self._lookup(cell_rows).view(N, H, W, -1).permute(0, 3, 1, 2))
        # the last ReLU after the flatten's copy out of channels-last: on the copy, its backward is 2x+ faster
        x = self.conv[-1](self.conv[1:-1](x).flatten(1))
        return torch.cat([x, self._lookup(idx[:, 0, 0, 3])], dim=1)

    def _first_conv_of_one_hot(self, cell_rows: torch.Tensor) -> torch.Tensor:
        """The first convolution over the cells' embeddings, `cell_rows [N, H, W, 3]` (rows of `embed`) ->
        `[N, C, H', W']`, computed as a convolution of the cells' one-hot rows (`[N, R, H, W]`, R = the object,
        colour and state rows) with the kernel `W'[o, r] = W[o, channel(r)] · embed[r]`.

        The same function of the same parameters as embedding then convolving (what `_features` does without
        gradients, faster there), and its gradients reach `embed` and the kernel through W' (a product of
        `[C, R, k, k]`), but the convolution's input is a constant: its backward computes no input gradient,
        which at a 5×5 or 7×7 view was most of the torso's time (a learner's torso forward and backward 2.6×
        faster on this CPU: benchmarks/RESULTS.md, "The learner at compiled speed (issue 57, third part)"). The
        one-hot stays channels-last, the layout oneDNN is fastest on here."""
        first, rows = self.conv[0], self.channel_of_row.numel()
        kernel = first.weight.view(first.out_channels, 3, -1, *first.kernel_size)[:, self.channel_of_row]
        kernel = torch.einsum("orekl,re->orkl", kernel, self.embed.weight[:rows])  # [C, R, k, k]
        one_hot = torch.zeros(*cell_rows.shape[:3], rows, dtype=kernel.dtype, device=cell_rows.device)
        one_hot.scatter_(3, cell_rows, 1.0)  # a cell's three rows lie in disjoint ranges
        return F.conv2d(one_hot.permute(0, 3, 1, 2), kernel, first.bias)

    def _lookup(self, idx: torch.Tensor) -> torch.Tensor:
        """`embed`'s rows for `idx [...]`, as `[idx.numel(), embed_dim]`: `index_select`, whose backward is one
        `index_add_`, where `nn.Embedding`'s dense backward took 3.5x as long on a CPU: the plain MiniGrid
        update is ~20% faster (benchmarks/RESULTS.md, "Fused Adam and the MiniGrid net's embedding")."""
        return self.embed.weight.index_select(0, idx.reshape(-1))


MODEL_KINDS = ("auto", "impala_cnn", "minigrid_cnn", "mlp")


def resolve_model_kind(spec: EnvSpec, kind: str = "auto") -> str:
    """The network `kind` names for `spec`: 'auto' is impala_cnn for uint8 images, minigrid_cnn for MiniGrid's
    symbolic view, mlp otherwise; any other kind is itself."""
    if kind == "auto":
        return "minigrid_cnn" if spec.is_minigrid else "impala_cnn" if spec.is_image else "mlp"
    return kind


def build_model(spec: EnvSpec, kind: str = "auto", hidden_sizes: tuple[int, ...] = (64, 64),
                lstm_size: int = 0) -> nn.Module:
    """`kind`: 'auto' (see `resolve_model_kind`), 'impala_cnn', 'minigrid_cnn' or 'mlp'. `hidden_sizes` is the
    MLP's alone. `lstm_size` > 0: an LSTM core of that many units between torso and heads."""
    if isinstance(lstm_size, bool) or not isinstance(lstm_size, int) or lstm_size < 0:
        raise ValueError(f"learner.lstm_size must be an integer >= 0 (0: no LSTM core), got {lstm_size!r}")
    kind = resolve_model_kind(spec, kind)
    if kind == "impala_cnn":
        if not spec.is_image:
            what = "MiniGrid's symbolic view (use minigrid_cnn)" if spec.is_minigrid else list(spec.obs_shape)
            raise ValueError(f"model impala_cnn needs uint8 [H, W, C] pixel observations, got {what}")
        if not spec.discrete:
            raise ValueError("model impala_cnn supports discrete actions only; use mlp for continuous control")
        return ImpalaCNN(spec, lstm_size=lstm_size)
    if kind == "minigrid_cnn":
        if not spec.is_minigrid:
            raise ValueError(f"model minigrid_cnn needs MiniGrid's symbolic observations (--env minigrid:<name> or "
                             f"maze:<W>x<H>), got {spec.obs_dtype} {list(spec.obs_shape)}")
        return MiniGridNet(spec, lstm_size=lstm_size)
    if kind == "mlp":
        return MLP(spec, tuple(hidden_sizes), lstm_size)
    raise ValueError(f"model must be one of {', '.join(MODEL_KINDS)}; got {kind!r}")
