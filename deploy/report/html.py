"""The report's one page, `DIR/index.html`: everything `levelray report` wrote, readable in any browser offline.

Sections: the summary tables (with the groups' 95% intervals under `--group-by`), the runs' configs side by side
(the leaves that differ, and each run's full `config.yaml` folded), every figure, the level gallery, and the
episode videos found in the run directories (`RUN_DIR/videos/*.mp4` from `levelray train --video-interval`, and
any other MP4 under the run directory but W&B's copies, e.g. from `levelray evaluate --video`). The page has no
external CSS, JS or fonts: figures and gallery images are the PNGs beside it in DIR (where the report writes them
all), videos are copied into `DIR/videos/`, and every reference is relative, so the directory can be moved or
zipped whole.

Everything that comes from files (labels, paths, config values, skip reasons) is HTML-escaped. A short inline
script records in the page whether each image and video loaded: `data-loaded="ok"` or `"error"` on each `<img>`
and `<video>` (and `data-frame="decoded"` on a video whose first frame decoded), the totals on `<body>`
(`data-load-ok`, `data-load-error`, `data-load-total`) and in one line at the top, so a reader (or a headless
browser) sees broken references at once. Debian's Chromium decodes the H.264 MP4s headless (measured: the first
frame's pixels come back), so the page offers the MP4 alone, with no WebM copy.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

# figures that are not one image in the figures section: the gallery has its own, the others are not images
_NOT_FIGURES = ("level_gallery", "summary", "page")

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1d2330;
       max-width: 1400px; margin: 1.5em auto; padding: 0 1.5em; line-height: 1.4; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccd; padding-bottom: 0.2em; margin-top: 1.8em; }
nav a { margin-right: 1em; }
.meta, .note, .skipped, figcaption { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; font-size: 0.88em; margin: 0.6em 0; }
th, td { border: 1px solid #ccd; padding: 0.25em 0.55em; text-align: left; vertical-align: top; }
th { background: #eef0f6; } tr:nth-child(even) td { background: #f8f9fc; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #dde; }
pre { background: #f5f6fa; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
details { margin: 0.4em 0; } summary { cursor: pointer; }
.videos { display: flex; flex-wrap: wrap; gap: 1em; } .videos figure { margin: 0; max-width: 420px; }
video { width: 400px; max-width: 100%; background: #000; }
#load-status.bad { color: #b00020; font-weight: bold; }
"""

# Marks each <img> and <video> with data-loaded="ok" or "error" (a video is ok once its metadata loaded, and
# gets data-frame="decoded" once its first frame is decoded) and keeps the totals on <body> and in
# #load-status. With several <source>s a video fails only when its last source does.
_SCRIPT = """
(function () {
  var imgs = Array.prototype.slice.call(document.images);
  var videos = Array.prototype.slice.call(document.querySelectorAll("video"));
  var status = document.getElementById("load-status");
  function update() {
    var ok = document.querySelectorAll("[data-loaded=ok]").length;
    var bad = document.querySelectorAll("[data-loaded=error]").length;
    var total = imgs.length + videos.length;
    document.body.dataset.loadOk = ok; document.body.dataset.loadError = bad; document.body.dataset.loadTotal = total;
    status.textContent = ok + " of " + total + " images and videos loaded" + (bad ? ", " + bad + " failed" : "");
    status.className = bad ? "bad" : "";
  }
  function mark(el, outcome) { if (!el.dataset.loaded) { el.dataset.loaded = outcome; update(); } }
  imgs.forEach(function (img) {
    function check() { mark(img, img.complete && img.naturalWidth > 0 ? "ok" : "error"); }
    if (img.complete) { check(); } else { img.addEventListener("load", check); img.addEventListener("error", check); }
  });
  videos.forEach(function (v) {
    if (v.readyState >= 1) { mark(v, "ok"); }
    v.addEventListener("loadedmetadata", function () { mark(v, "ok"); });
    v.addEventListener("loadeddata", function () { v.dataset.frame = "decoded"; });
    v.addEventListener("error", function () { mark(v, "error"); });
    var sources = v.querySelectorAll("source");
    if (sources.length) {
      sources[sources.length - 1].addEventListener("error", function () { mark(v, "error"); });
    }
  });
  update();
})();
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _href(relative: str) -> str:
    """An attribute-safe relative URL for a file name under DIR."""
    return _e(quote(relative))


def _note(text: str) -> str:
    """A Markdown-ish note (from the summary) as escaped HTML, its `code` spans as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _e(text))


def _table(columns: list[str], cells: list[list[str]]) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_e(v)}</td>" for v in row) + "</tr>" for row in cells)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def flatten_config(config: dict, prefix: str = "") -> dict[str, Any]:
    """{dotted key: leaf value} of a nested config dict (`config.yaml` as loaded)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten_config(value, path + "."))
        else:
            out[path] = value
    return out


def _leaf_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def config_differences(runs: list[dict]) -> list[tuple[str, list[str]]]:
    """(dotted key, one value per run) for every config leaf whose value is not the same in all runs; a run
    without the key shows "(absent)". Keys in the order the first run lists them, then the others'."""
    flat = [flatten_config(r["config"]) for r in runs]
    keys = list(dict.fromkeys(k for f in flat for k in f))
    rows = []
    for key in keys:
        values = [_leaf_text(f[key]) if key in f else "(absent)" for f in flat]
        if len(set(values)) > 1:
            rows.append((key, values))
    return rows


def _configs_section(runs: list[dict]) -> str:
    parts = ['<section id="configs"><h2>Runs and their configs</h2>']
    labels = [r["label"] for r in runs]
    if len(runs) == 1:
        parts.append('<p class="note">One run: nothing to compare. Its full config is below.</p>')
    else:
        diff = config_differences(runs)
        if diff:
            parts.append(f'<p class="note">The {len(diff)} config value(s) that differ between the runs:</p>')
            parts.append(_table(["config key", *labels], [[k, *v] for k, v in diff]))
        else:
            parts.append('<p class="note">The runs have the same config.</p>')
    for run in runs:
        path = run["path"] / "config.yaml"
        text = path.read_text() if path.exists() else "(no config.yaml in this run directory)"
        parts.append(f"<details><summary>{_e(run['label'])}: full config ({_e(path)})</summary>"
                     f"<pre>{_e(text)}</pre></details>")
    parts.append("</section>")
    return "\n".join(parts)


def _summary_section(tables: list[tuple[str, str, list[str], list[list[str]]]]) -> str:
    parts = ['<section id="summary"><h2>Summary</h2>']
    for title, note, columns, cells in tables:
        parts += [f"<h3>{_e(title)}</h3>", _table(columns, cells), f'<p class="note">{_note(note)}</p>']
    parts.append("</section>")
    return "\n".join(parts)


def _figures_section(figures: dict[str, dict]) -> str:
    parts = ['<section id="figures"><h2>Figures</h2>']
    skipped = []
    for name, fig in figures.items():
        if name in _NOT_FIGURES:
            continue
        if not fig.get("path"):
            skipped.append(f"<li>{_e(name)}: {_e(fig.get('skipped'))}</li>")
            continue
        parts.append(f'<figure id="fig-{_e(name)}"><img src="{_href(Path(fig["path"]).name)}" alt="{_e(name)}">'
                     f"<figcaption>{_e(name)}: {_e(', '.join(fig.get('series', [])))}</figcaption></figure>")
    if skipped:
        parts += ['<p class="skipped">Skipped (no data):</p>', f'<ul class="skipped">{"".join(skipped)}</ul>']
    parts.append("</section>")
    return "\n".join(parts)


def _levels_table(point: dict) -> str:
    cells = [[side, str(lv["seed"]), f"{lv['score']:.4g}", str(lv["staleness"]), f"{100 * lv['p']:.4g}%"]
             for side, levels in (("most likely", point["most"]), ("least likely", point["least"]))
             for lv in levels]
    return ("<details><summary>these levels as a table</summary>"
            + _table(["", "seed", "score", "staleness", "replay probability P"], cells) + "</details>")


def _gallery_section(fig: dict) -> str:
    parts = ['<section id="levels"><h2>Level gallery</h2>',
             '<p class="note">The first frame of the 16 most and the 16 least likely levels (among the levels '
             "scored so far) under the PLR replay distribution, at the end of each run and at earlier "
             "checkpoints; captions give seed, score, staleness and replay probability P.</p>"]
    for gallery in fig.get("galleries", []):
        parts.append(f"<h3>{_e(gallery['label'])}</h3>")
        if gallery.get("skipped"):
            parts.append(f'<p class="skipped">Skipped: {_e(gallery["skipped"])}</p>')
        for point in gallery.get("points", []):
            when = "end of run" if point["env_steps"] is None else f"{point['env_steps']:,} env steps"
            src = _href(Path(point["path"]).name)
            held = (f"{point['num_seen']} levels buffered, capacity {point['num_levels']}" if point.get("buffered")
                    else f"{point['num_seen']} of {point['num_levels']} levels seen")
            parts.append(f"<h4>{_e(when)} ({_e(point['source'])}; {held})</h4>"
                         f'<figure><img src="{src}" alt="levels at {_e(when)}"></figure>' + _levels_table(point))
    if not fig.get("galleries"):
        parts.append(f'<p class="skipped">Skipped: {_e(fig.get("skipped"))}</p>')
    parts.append("</section>")
    return "\n".join(parts)


def _in_report_dir(path: Path, root: Path) -> bool:
    """True when `path` lies in an earlier report's directory under `root` (its copies are not new videos)."""
    for parent in path.parents:
        if parent == root:
            return False
        if (parent / "index.html").exists() and (parent / "summary.md").exists():
            return True
    return False


def collect_videos(runs: list[dict], out_dir: Path) -> list[dict[str, str]]:
    """Copy every MP4 under the run directories (not those under `out_dir`, an earlier report's directory, or
    `RUN_DIR/wandb/`, where W&B keeps its own copies of the run's videos) into `out_dir/videos/`; returns
    [{label, source (path in its run dir), file (relative to out_dir)}]."""
    out_dir = out_dir.resolve()
    videos, used = [], set()
    for i, run in enumerate(runs, start=1):
        root = Path(run["path"]).resolve()
        found = sorted(p for p in root.rglob("*") if p.suffix.lower() == ".mp4" and p.is_file())
        for src in found:
            if src.is_relative_to(out_dir) or src.is_relative_to(root / "wandb") or _in_report_dir(src, root):
                continue
            rel = src.relative_to(root)
            name = re.sub(r"[^A-Za-z0-9._-]", "_", f"run{i}-" + "-".join(rel.parts))
            while name in used:
                name = "x" + name
            used.add(name)
            (out_dir / "videos").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, out_dir / "videos" / name)
            videos.append({"label": run["label"], "source": rel.as_posix(), "file": f"videos/{name}"})
    return videos


def _videos_section(videos: list[dict[str, str]]) -> str:
    parts = ['<section id="videos"><h2>Videos</h2>']
    if not videos:
        parts.append('<p class="note">No MP4 in the run directories (record some with <code>levelray train '
                     "--video-interval N</code> or <code>levelray evaluate RUN --video DIR</code>).</p>")
    labels = list(dict.fromkeys(v["label"] for v in videos))
    for label in labels:
        parts.append(f'<h3>{_e(label)}</h3><div class="videos">')
        for v in (v for v in videos if v["label"] == label):
            parts.append(f'<figure><video controls preload="metadata"><source src="{_href(v["file"])}" '
                         f'type="video/mp4"></video><figcaption>{_e(v["source"])}</figcaption></figure>')
        parts.append("</div>")
    parts.append("</section>")
    return "\n".join(parts)


def write_page(runs: list[dict], figures: dict[str, dict], tables: list[tuple[str, str, list[str], list[list[str]]]],
               out_dir: Path) -> Path:
    """Write `out_dir/index.html` (and copy the runs' videos into `out_dir/videos/`); returns its path.
    `figures`: `make_report`'s dict (PNG paths under `out_dir`); `tables`: (title, note, columns, cells)."""
    out_dir = Path(out_dir)
    videos = collect_videos(runs, out_dir)
    title = f"levelray report: {', '.join(r['label'] for r in runs)}"
    body = [
        "<h1>levelray report</h1>",
        f'<p class="meta">{len(runs)} run(s), written {_e(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))}. '
        '<span id="load-status">images and videos: not checked (scripts off)</span></p>',
        '<nav><a href="#summary">Summary</a><a href="#configs">Configs</a><a href="#figures">Figures</a>'
        '<a href="#levels">Level gallery</a><a href="#videos">Videos</a></nav>',
        _summary_section(tables),
        _configs_section(runs),
        _figures_section(figures),
        _gallery_section(figures.get("level_gallery") or {}),
        _videos_section(videos),
    ]
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(title)}</title><style>{_CSS}</style></head>\n<body>\n" + "\n".join(body)
            + f"\n<script>{_SCRIPT}</script>\n</body></html>\n")
    path = out_dir / "index.html"
    path.write_text(page, encoding="utf-8")
    return path
