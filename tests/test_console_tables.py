"""The terminal printer (soco_pipeline/report/console.py): every line of the demo's screen fits 120 columns,
no `nan` is printed, wide text is printed once, and the summary (one row per model, one headline column per
family) is the last table; p-values read as `< 0.001`."""

import numpy as np
import pandas as pd
import pytest

from soco_pipeline.report.console import (
    console_table,
    format_p,
    headline_columns,
    headline_metrics,
    model_card,
    summary_frame,
    summary_text,
)

pytestmark = pytest.mark.unit

SOURCE = (
    "simulated: procedural objects with seeded cues (generator v3), not the published MMVMBench images " * 2
)


def mmvm_board() -> pd.DataFrame:
    """A board in mmvm_leaderboard's shape: a long data_source in every row, reasons, many wide columns."""
    n = 6
    board = pd.DataFrame(
        {
            "data_source": [SOURCE] * n,
            "model": [f"efficientnet_lite0_input_{224 + 32 * i}" for i in range(n)],
            "kind": ["backbone"] * n,
            "method": ["zero_shot_cosine_similarity"] * n,
            "status": ["ok"] * (n - 1) + ["not_applicable"],
            "reason": [""] * (n - 1) + ["<script>this kind has no pixels</script>: dense maps only"],
            "accuracy": [61.23456, 55.5, 48.0, 33.3333, 25.0, np.nan],
            "random_expected": [25.0] * n,
            "n_items": [400] * n,
        }
    )
    for k in range(30):  # the per-cue / per-count columns that made the board 596 columns wide
        board[f"cue:very_long_matching_cue_name_{k}"] = np.linspace(10, 90, n)
    return board


def headlines() -> pd.DataFrame:
    rows = []
    for fam, metric, sim in (
        ("soco", "soc", False),
        ("mmvm", "accuracy", True),
        ("fgbmk", "top1_subclass", True),
        ("tpips", "ooo", True),
    ):
        for i, model in enumerate(
            ["dinov2_vitb14_registers_reference", "efficientnet_lite0", "random_vit_small"]
        ):
            if fam == "tpips" and i == 2:
                continue  # no TPIPS row for this model: n/a in the summary
            v = 70.0 - 20 * i + len(fam)
            rows.append(
                (
                    model,
                    fam,
                    metric,
                    v,
                    v - 3.25,
                    v + 2.75,
                    400,
                    sim,
                    pd.Timestamp("2026-12-02 01:00", tz="UTC"),
                )
            )
    cols = ["model", "family", "metric", "value", "ci_low", "ci_high", "n", "simulated", "materialized_at"]
    return pd.DataFrame(rows, columns=cols)


def test_a_wide_board_fits_120_columns_with_its_text_once():
    text = console_table(mmvm_board(), "mmvm", full="soco leaderboard --family mmvm")
    lines = text.splitlines()
    assert max(map(len, lines)) <= 120, max(lines, key=len)
    assert "nan" not in text.lower().replace("not_applicable", "")
    assert (
        text.count("data_source") == 1 and text.count("generator v3") == 2
    )  # once above the table (the text says it twice)
    assert "data_source: simulated" in lines[2]
    # the row without a value says n/a, and why, once
    assert sum("n/a" in line for line in lines if line.startswith("|")) == 1
    assert "[1] reason: <script>this kind has no pixels</script>: dense maps only" in text
    assert "efficientnet_lite0_input_384 [1]" in text
    # the columns left out are named with where the full board is
    assert "not shown (too wide): " in text and "soco leaderboard --family mmvm" in text
    assert " 61.2 |" in text and " 33.3 |" in text  # one decimal on 0-100 scores


def test_headline_columns_only_and_fractions_get_three_decimals():
    board = mmvm_board()
    cols = headline_columns("mmvm", board)
    assert cols[:6] == ["model", "method", "status", "accuracy", "random_expected", "n_items"]
    text = console_table(board, "mmvm", columns=cols)
    assert "cue:" not in text and "not shown" not in text
    frac = console_table(pd.DataFrame({"model": ["a", "b"], "consensus": [0.61234, 0.5]}))
    assert " 0.612 |" in frac and " 0.500 |" in frac


def test_p_values_read_as_less_than():
    assert format_p(0.0) == "< 0.001"
    assert format_p(0.0004) == "< 0.001"
    assert format_p(0.0123) == "0.012"
    assert format_p(float("nan")) == "n/a"
    text = console_table(
        pd.DataFrame({"metric": ["soc", "cc"], "delta": [3.2, -0.4], "p_sign": [1e-9, 0.41]})
    )
    assert "< 0.001" in text and "0.410" in text and "0.00 " not in text


def test_summary_is_one_row_per_model_one_column_per_family():
    wide = summary_frame(headlines())
    assert list(wide["model"]) == [
        "dinov2_vitb14_registers_reference",
        "efficientnet_lite0",
        "random_vit_small",
    ]
    assert list(wide.columns[1:]) == ["soco", "fgbmk", "mmvm", "tpips"]
    assert wide.loc[0, "soco"] == "74.0 [70.8, 76.8]"
    assert wide.loc[2, "tpips"] == "n/a"
    assert headline_metrics(headlines()) == "soco = soc; fgbmk = top1_subclass; mmvm = accuracy; tpips = ooo"


def test_the_demo_screen_fits_and_ends_with_the_summary():
    """The whole first screen as the demo prints it: boards, then the summary as the last table."""
    screen = [
        console_table(mmvm_board(), "mmvm", columns=headline_columns("mmvm", mmvm_board())),
        console_table(mmvm_board(), "mmvm (every column)"),
        summary_text(
            headlines(), where=["full tables: soco leaderboard --family F; storage/report/index.html"]
        ),
    ]
    text = "\n".join(screen)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 120, max(lines, key=len)
    assert "nan" not in text.lower().replace("not_applicable", "")
    table_lines = [i for i, line in enumerate(lines) if line.startswith("|")]
    summary_header = next(
        i for i, line in enumerate(lines) if line.startswith("| model ") and "| soco " in line
    )
    assert table_lines[-1] > summary_header
    assert all(i < summary_header for i in table_lines if "cue" in lines[i] or "zero_shot" in lines[i])
    assert "simulated data (generated here, not the published sets): fgbmk, mmvm, tpips" in text
    assert lines[-1].startswith("full tables:")
    assert "n/a: the family has no result for this model" in text


def test_model_card_ranks_the_model_in_each_family():
    card = model_card(headlines(), "efficientnet_lite0")
    assert (
        "| soco   | soc " in card and "| no             |" in card and "2 of 3" in card and "2 of 2" in card
    )  # tpips ranks two models
    assert max(map(len, card.splitlines())) <= 120


def checks_and_methods() -> pd.DataFrame:
    """TPIPS headlines of five models whose best methods differ, a pixel-oracle ceiling above them, and a
    SOCO oracle above every model."""
    rows = [
        ("dense_sift", "tpips", "TPIPS ooo [cosine]", 41.0, "model"),
        ("efficientnet_lite0", "tpips", "TPIPS ooo [mid]", 47.0, "model"),
        ("efficientnet_lite1", "tpips", "TPIPS ooo [late]", 45.0, "model"),
        ("vit_small_random", "tpips", "TPIPS ooo [cosine]", 36.0, "model"),
        ("oracle_part", "tpips", "TPIPS ooo [mid]", 38.0, "ceiling"),
        ("pixels", "tpips", "TPIPS ooo [oracle]", 92.0, "ceiling"),
        ("dense_sift", "soco", "soc", 20.0, "model"),
        ("efficientnet_lite0", "soco", "soc", 35.0, "model"),
        ("oracle_part", "soco", "soc", 99.0, "ceiling"),
        ("loopback_random", "soco_lvlm", "vis", 25.0, "control"),
    ]
    h = pd.DataFrame(rows, columns=["model", "family", "metric", "value", "role"])
    return h.assign(ci_low=h.value - 2, ci_high=h.value + 2, n=pd.NA, simulated=True, materialized_at=pd.NaT)


def test_the_card_ranks_among_every_model_of_the_family_whatever_its_method():
    h = checks_and_methods()
    assert "| 2 of 4 " in model_card(h, "efficientnet_lite1")  # TPIPS: four models, methods late/mid/cosine
    assert "| 1 of 4 " in model_card(h, "efficientnet_lite0") and "| 1 of 2 " in model_card(
        h, "efficientnet_lite0"
    )
    card = model_card(h, "pixels")
    assert "ceiling, not ranked" in card and " of " not in card


def test_the_summary_lists_models_first_and_marks_controls_and_ceilings():
    h = checks_and_methods()
    wide = summary_frame(h)
    assert list(wide["model"]) == [
        "efficientnet_lite0",
        "dense_sift",
        "efficientnet_lite1",
        "vit_small_random",
        "loopback_random (control)",
        "oracle_part (ceiling)",
        "pixels (ceiling)",
    ]
    text = summary_text(h)
    assert "(ceiling): an oracle that reads the answer" in text and max(map(len, text.splitlines())) <= 120
    assert "| oracle_part (ceiling) " in text
    old = summary_frame(h.drop(columns="role"))  # a table stored before roles: every row a model
    assert "oracle_part" in list(old["model"]) and list(old["model"])[0] == "oracle_part"
