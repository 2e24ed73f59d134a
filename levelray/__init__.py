"""levelray: distributed actor-learner RL (IMPALA/V-trace) with Prioritized Level Replay on Ray.

The parts are sub-packages, each a folder at the repository root mapped into this namespace by
`pyproject.toml` (`package-dir`): `levelray.contracts`, `levelray.actors`, `levelray.learner`,
`levelray.level_service`, `levelray.replay_service`, `levelray.deploy`.
"""

__version__ = "0.1.0"
