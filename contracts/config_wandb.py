"""The `wandb` section of the run config (`WandbConfig`): logging a run to Weights & Biases. Imported from
`contracts.config` like every section; the logging itself is `deploy.monitoring.wandb_run`."""

from __future__ import annotations

from dataclasses import dataclass, field

from levelray.contracts.config_values import Section as _Section
from levelray.contracts.config_values import flag as _flag

WANDB_MODES = ("online", "offline", "disabled")
# W&B refuses these in a project or entity name (the name is part of the run's URL)
_FORBIDDEN = set("/\\#?%:")
MAX_NAME_CHARS = 128  # W&B's limit on project and group names
MAX_TAG_CHARS = 64  # and on a tag


def _check_name(name: str | None) -> None:
    """A project, entity or group: W&B puts it in the run's URL, so it is checked here, before a run starts, not
    when W&B refuses it minutes into one."""
    if name is None:
        return
    bad = sorted(_FORBIDDEN & set(name))
    if not name.strip() or bad or len(name) > MAX_NAME_CHARS:
        raise ValueError(f"expected a name of 1 to {MAX_NAME_CHARS} characters without any of / \\ # ? % : "
                         f"(e.g. levelray-plr), got {name!r}")


def _check_tags(tags: list[str] | None) -> None:
    for tag in tags or ():
        if not tag.strip() or len(tag) > MAX_TAG_CHARS:
            raise ValueError(f"expected comma-separated tags of 1 to {MAX_TAG_CHARS} characters each "
                             f"(e.g. plr,procgen), got {tag!r}")


@dataclass(frozen=True)
class WandbConfig(_Section):
    """Weights & Biases (`--wandb`, the optional extra `pip install 'levelray[wandb]'`): the run's config, every
    `metrics.jsonl` record (against env steps, with the trained steps beside them), the held-out evaluations, their
    videos and the final checkpoint's path go to one W&B run, whose local files are in `RUN_DIR/wandb/`. A resumed
    run continues the same W&B run. Mode `online` without W&B credentials (`WANDB_API_KEY` or `wandb login`) logs
    offline instead and says so at the start: `wandb sync RUN_DIR/wandb/offline-run-*` uploads it later."""

    enabled: bool = field(
        default=False,
        metadata=_flag("--wandb", "log the run to Weights & Biases (needs the wandb extra: pip install "
                       "'levelray[wandb]')", resumable=True),
    )
    project: str = field(
        default="levelray", metadata=_flag("--wandb-project", "W&B project", check=_check_name, resumable=True)
    )
    entity: str | None = field(
        default=None,
        metadata=_flag("--wandb-entity", "W&B user or team that owns the project (none: the account's default)",
                       check=_check_name, resumable=True),
    )
    group: str | None = field(
        default=None,
        metadata=_flag("--wandb-group", "W&B group of the run (a sweep groups its trials by the sweep)",
                       check=_check_name, resumable=True),
    )
    tags: list[str] | None = field(
        default=None, metadata=_flag("--wandb-tags", "W&B tags, comma-separated", check=_check_tags, resumable=True)
    )
    mode: str = field(
        default="online",
        metadata=_flag("--wandb-mode", "online (offline, saying so, where no W&B credentials are configured), "
                       "offline (files in RUN_DIR/wandb/ only: wandb sync uploads them) or disabled (W&B does "
                       "nothing)", choices=WANDB_MODES, resumable=True),
    )
