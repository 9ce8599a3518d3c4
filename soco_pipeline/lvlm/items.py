"""SOCO-LVLM items: one row per (setting, item, rotation); letter j marks option (j + r) % 4 in rotation r."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from soco_pipeline.lvlm.protocol import LvlmProtocol
from soco_pipeline.lvlm.render import render_marked
from soco_pipeline.lvlm.specs import SETTINGS

LETTERS = "ABCD"
OPTION_COLUMNS = ["option_a", "option_b", "option_c", "option_d"]
_STREAM_LVLM_ITEMS = 11
# What names an item (and its answer) in every LVLM table.
ITEM_KEYS = [
    "setting",
    "index",
    "g_index",
    "qid",
    "rotation",
    "pair_id",
    "level",
    "pair_group",
    "supercategory",
    "src_keypoint",
]
ITEM_COLUMNS = [
    *ITEM_KEYS,
    "src_image",
    "trg_image",
    "description",
    "question",
    *LETTERS,
    "answer",
    "answer_option",
    "src_render",
    "trg_render",
]


class LvlmItemsError(ValueError):
    """Inputs of the LVLM items disagree; the message names the record and the fix."""


def sample_items(
    four_choice: pd.DataFrame, image_pairs: pd.DataFrame, protocol: LvlmProtocol, seed: int
) -> pd.DataFrame:
    """The four-choice items asked: a seeded `items_per_group` per pair group, levels filtered, sorted."""
    cols = ["pair_id", "level", "pair_group", "src_image", "trg_image", "src_category", "trg_category"]
    items = four_choice.merge(image_pairs[cols], on="pair_id", how="left", validate="many_to_one")
    if items["level"].isna().any():
        bad = items.loc[items["level"].isna(), "pair_id"].iloc[0]
        raise LvlmItemsError(f"four-choice item of pair {bad!r} is not in image_pairs: rebuild four_choice")
    items = items[items["level"].isin(protocol.levels)]
    items = items.sort_values(["pair_id", "src_keypoint"], ignore_index=True)
    if protocol.items_per_group:
        rng = np.random.default_rng([seed, _STREAM_LVLM_ITEMS])
        key = pd.Series(rng.random(len(items)), index=items.index)
        rank = key.groupby(items["pair_group"]).rank(method="first")
        items = items[rank <= protocol.items_per_group].reset_index(drop=True)
    return items


def _xy(keypoints: pd.DataFrame, image: pd.Series, keypoint: pd.Series, what: str) -> np.ndarray:
    """(n, 2) pixel coordinates of visible (image, keypoint) pairs; a clear error when one is missing."""
    vis = keypoints.loc[keypoints["visible"].astype(bool), ["image_id", "keypoint", "x", "y"]]
    idx = pd.MultiIndex.from_frame(vis[["image_id", "keypoint"]])
    pos = idx.get_indexer(pd.MultiIndex.from_arrays([image.to_numpy(), keypoint.to_numpy()]))
    if (pos < 0).any():
        i = int(np.flatnonzero(pos < 0)[0])
        raise LvlmItemsError(
            f"{what} keypoint {keypoint.iloc[i]!r} of image {image.iloc[i]!r} is not a visible keypoint: "
            f"rebuild four_choice from the current keypoints"
        )
    return vis[["x", "y"]].to_numpy(np.float64)[pos]


def _render_all(jobs: pd.DataFrame, protocol: LvlmProtocol, root: str, workers: int) -> list[str]:
    """Render every job (uri, points, letters) once; the paths in job order."""

    def one(job) -> str:
        return render_marked(job.uri, job.points, protocol, root, job.letters)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, jobs.itertuples(index=False)))


def build_items(
    four_choice: pd.DataFrame,
    image_pairs: pd.DataFrame,
    keypoints: pd.DataFrame,
    descriptions: pd.DataFrame,
    images: pd.DataFrame,
    protocol: LvlmProtocol,
    image_root: str,
    seed: int,
    workers: int = 4,
) -> pd.DataFrame:
    """The LVLM item table (ITEM_COLUMNS) for every setting, marked images rendered under image_root."""
    items = sample_items(four_choice, image_pairs, protocol, seed)
    n = len(items)
    if n == 0:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in ITEM_COLUMNS})
    uri = images.set_index("image_id")["uri"]
    sup = images.set_index("category")["supercategory"]
    sup = sup[~sup.index.duplicated()]
    for col in ("src_image", "trg_image"):
        missing = ~items[col].isin(uri.index)
        if missing.any():
            raise LvlmItemsError(
                f"image {items.loc[missing, col].iloc[0]!r} is not in image_set: rebuild the pairs"
            )
    desc = descriptions.set_index(["category", "keypoint"])["description"]
    d_pos = desc.index.get_indexer(pd.MultiIndex.from_frame(items[["src_category", "src_keypoint"]]))
    if (d_pos < 0).any():
        i = int(np.flatnonzero(d_pos < 0)[0])
        raise LvlmItemsError(
            f"no description for keypoint {items.src_keypoint.iloc[i]!r} of {items.src_category.iloc[i]!r}: "
            f"rebuild descriptions from the current taxonomy"
        )
    description = desc.to_numpy()[d_pos]
    src_xy = _xy(keypoints, items["src_image"], items["src_keypoint"], "source")
    opt_names = items[OPTION_COLUMNS].to_numpy()
    opt_xy = _xy(
        keypoints,
        pd.Series(np.repeat(items["trg_image"].to_numpy(), 4)),
        pd.Series(opt_names.reshape(-1)),
        "option",
    ).reshape(n, 4, 2)
    answer = items["answer"].to_numpy(np.int64)

    # Renders: one marked source per item, one marked target per (item, rotation).
    rot = np.arange(4)
    shown = (rot[None, :, None] + rot[None, None, :]) % 4  # [1, r, j]: option shown as letter j
    trg_points = opt_xy[np.arange(n)[:, None, None], np.broadcast_to(shown, (n, 4, 4))]  # n, r, j, 2
    src_jobs = pd.DataFrame(
        {
            "uri": uri.loc[items["src_image"]].to_numpy(),
            "points": [[tuple(p)] for p in src_xy],
            "letters": None,
        }
    )
    trg_jobs = pd.DataFrame(
        {
            "uri": np.repeat(uri.loc[items["trg_image"]].to_numpy(), 4),
            "points": [[tuple(p) for p in pts] for pts in trg_points.reshape(n * 4, 4, 2)],
            "letters": [tuple(LETTERS)] * (n * 4),
        }
    )
    src_paths = np.asarray(_render_all(src_jobs, protocol, image_root, workers), dtype=object)
    trg_paths = np.asarray(_render_all(trg_jobs, protocol, image_root, workers), dtype=object).reshape(n, 4)

    g_index = np.arange(n)
    base = pd.DataFrame(
        {
            "g_index": np.repeat(g_index, 4),
            "qid": np.repeat((items["pair_id"] + "|" + items["src_keypoint"]).to_numpy(), 4),
            "rotation": np.tile(rot, n),
            **{
                c: np.repeat(items[c].to_numpy(), 4)
                for c in ["pair_id", "level", "pair_group", "src_keypoint", "src_image", "trg_image"]
            },
            "supercategory": np.repeat(sup.reindex(items["pair_group"]).to_numpy(), 4),
            "description": np.repeat(description, 4),
            "answer": np.asarray(list(LETTERS))[((answer[:, None] - rot[None, :]) % 4).reshape(-1)],
            "answer_option": np.repeat(answer, 4),
        }
    )
    for letter in LETTERS:
        base[letter] = protocol.option_text.format(letter=letter)
    src_rep, trg_flat = np.repeat(src_paths, 4), trg_paths.reshape(-1)
    frames = []
    for k, setting in enumerate(SETTINGS):
        f = base.copy()
        f.insert(0, "setting", setting)
        f.insert(1, "index", np.arange(k * 4 * n, (k + 1) * 4 * n))
        head, sep, tail = protocol.questions[setting].partition("{description}")
        f["question"] = (head + f["description"] + tail) if sep else head
        f["src_render"] = None if setting == "desc" else src_rep
        f["trg_render"] = trg_flat
        frames.append(f)
    return pd.concat(frames, ignore_index=True)[ITEM_COLUMNS]
