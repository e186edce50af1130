"""The Goodhart watch's files (`legival reward report --out DIR`): the table as CSV, the figure (reward,
correctness, transfer and the watch student over steps, each with its bootstrap band) and a page that
shows both. Written into a new folder that `legival_core.outputs.replaced_whole` swaps in."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import TYPE_CHECKING

from legival_core.rl.watch import SERIES

if TYPE_CHECKING:
    import polars as pl

CSV = "reward_watch.csv"
PNG = "reward_watch.png"
PAGE = "index.html"


def write_watch_files(table: pl.DataFrame, folder: Path) -> list[str]:
    from legival_core.safe_csv import write_csv

    write_csv(table, folder / CSV)
    _figure(table, folder / PNG)
    (folder / PAGE).write_text(_page(table, (folder / PNG).read_bytes()), encoding="utf-8")
    return [CSV, PNG, PAGE]


def _figure(table: pl.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    x = [(a + b) / 2 for a, b in zip(table["step_from"].to_list(), table["step_to"].to_list(), strict=True)]
    for name in ("reward", "correct", "transfer", "watch"):
        y = table[name].to_list()
        ax.plot(x, y, marker="o", label=name)
        lo, hi = table[f"{name}_low"].to_list(), table[f"{name}_high"].to_list()
        pts = [(xi, a, b) for xi, a, b in zip(x, lo, hi, strict=True) if a is not None and b is not None]
        if pts:
            ax.fill_between([p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts], alpha=0.15)
    ax.set_xlabel("training step")
    ax.set_ylabel("mean (95% bootstrap band)")
    ax.set_title("reward vs the watch student (transfer and watch: correct completions)")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _page(table: pl.DataFrame, png: bytes) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ("steps", "n", *SERIES))
    rows = []
    for r in table.iter_rows(named=True):
        cells = [f"{r['step_from']}-{r['step_to']}", str(r["n"])]
        cells += ["-" if r[s] is None else f"{r[s]:.3f}" for s in SERIES]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    image = base64.b64encode(png).decode("ascii")
    return ("<!doctype html><html lang=en><meta charset=utf-8><title>Legi-Val: the Goodhart watch</title>"
            "<h1>The Goodhart watch</h1><p>Reward, correctness, transfer (the reward's student) and the watch "
            "student over training steps (docs/reward.md). A widening gap between transfer and watch means the "
            f"policy learns the reward student, not legibility.</p><img alt='reward vs watch' src='data:image/png;base64,{image}'>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></html>\n")
