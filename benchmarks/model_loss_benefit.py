"""Does the model loss help? `benchmarks.learning_ab` with the arms `--model-loss none` and `muzero`.

    python -m benchmarks.model_loss_benefit [--quick] [--seeds 5] [--families minigrid,cartpole]
                                            [--parallel 1] [--out-dir DIR] [--json PATH]
                                            [-- extra levelray train flags for both arms]

is `python -m benchmarks.learning_ab --flag=--model-loss --arms none,muzero --group-by model_loss.loss` (see there),
writing benchmarks/out/model_loss_benefit.json.
"""

from __future__ import annotations

import sys

from benchmarks.learning_ab import main as learning_ab

DEFAULTS = {"flag": "--model-loss", "arms": "none,muzero", "group_by": "model_loss.loss", "name": "model_loss_benefit"}


def main(argv: list[str] | None = None) -> int:
    return learning_ab(argv, DEFAULTS)


if __name__ == "__main__":
    sys.exit(main())
