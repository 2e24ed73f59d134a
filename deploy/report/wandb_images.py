"""The images a run's W&B run gets when it ends (`levelray train --wandb`): its level galleries, drawn as
`levelray report` draws them (`deploy.report.gallery`) into `RUN_DIR/wandb/level_gallery/`. The training driver
cannot import the report (the layer rule), so the command line, the Python API and a sweep's trials hand it this
function (`deploy.training.reporting.WandbExtras`)."""

from __future__ import annotations

from pathlib import Path

from levelray.deploy.report.gallery import gallery_figure
from levelray.deploy.report.runs import label_runs, load_run

GALLERY_DIR = "wandb/level_gallery"


def level_galleries(run_dir: Path) -> dict[str, list[Path]]:
    """`{"level_gallery": [PNG paths]}`: the end-of-run gallery and up to 3 earlier ones of a run with scored levels
    (a PLR strategy over a set, or a level buffer); no paths for any other run."""
    run = load_run(run_dir)
    label_runs([run])
    out = Path(run_dir) / GALLERY_DIR
    out.mkdir(parents=True, exist_ok=True)
    return {"level_gallery": [Path(p) for p in gallery_figure([run], out).get("paths", [])]}
