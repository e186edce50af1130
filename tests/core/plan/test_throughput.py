"""The throughput table (`configs/throughput.yaml`): every row says what it rests on, and a row for
named models wins over the rows by size."""

from __future__ import annotations

from pathlib import Path

import pytest

from legival_core.plan.throughput import ThroughputError, load_table


def test_the_shipped_table() -> None:
    t = load_table()
    assert t.row("SmolLM2-135M-Instruct-Q4_1-gguf", "cpu").basis == "measured"
    assert t.row("gemma-3-270m", "cpu").models == ("gemma-3-270m-Q4_K_M-gguf",)  # its own row, by any spelling
    for row in t.throughput:  # a GPU figure is a citation or an assumption, never an unlabelled number
        assert row.basis == "measured" or (row.spread > 1 and row.source), row
        if row.accelerator != "cpu":
            assert row.basis in ("published", "assumption")
            assert ("vLLM" in row.source or "Qwen" in row.source) if row.basis == "published" else "assumption" in row.source


def test_a_row_without_its_basis_or_with_a_guess_and_no_spread_is_refused(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[3] / "configs" / "throughput.yaml").read_text(encoding="utf-8")
    bad = tmp_path / "t.yaml"
    bad.write_text(text.replace("    basis: assumption\n    spread: 3\n", "    basis: assumption\n", 1), encoding="utf-8")
    with pytest.raises(ThroughputError, match=r"throughput\.\d+: Value error, a row whose basis is assumption needs a spread"):
        load_table(bad)
    bad.write_text(text.replace("    basis: measured\n", "", 1), encoding="utf-8")
    with pytest.raises(ThroughputError, match=r"throughput\.0\.basis: Field required"):
        load_table(bad)
