"""The 4-choice protocol for a feature backbone: the option most similar to the source descriptor wins, under
each of the four rotations (circular accuracy)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from soco_pipeline.evaluation.matching import (
    FeatureStoreLike,
    MatchingError,
    group_slices,
    image_sizes,
    load_stored_maps,
    sample_descriptors,
    source_descriptors,
    stored_tensor,
    to_unit,
    visible_keypoint_xy,
)
from soco_pipeline.evaluation.protocol import ProtocolConfig

_OPTIONS = ["option_a", "option_b", "option_c", "option_d"]


def rotation_picks(sims: np.ndarray) -> np.ndarray:
    """The option picked under each rotation of (n x 4) similarities; ties go to the first shown."""
    sims = np.asarray(sims, dtype=np.float64)
    picks = np.empty((len(sims), 4), dtype=np.int64)
    for r in range(4):
        order = (np.arange(4) + r) % 4
        picks[:, r] = order[np.argmax(sims[:, order], axis=1)]
    return picks


def predict_four_choice(
    four_choice: pd.DataFrame,
    keypoints: pd.DataFrame,
    images: pd.DataFrame,
    store: FeatureStoreLike,
    protocol: ProtocolConfig,
    backbone_name: str,
    device: str | torch.device = "cpu",
    image_pairs: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Each option's similarity to the source descriptor and the pick under each rotation."""
    device = torch.device(device)
    items = four_choice.reset_index(drop=True)
    if not {"src_image", "trg_image"} <= set(items.columns):
        if image_pairs is None:
            raise MatchingError("predict_four_choice needs image_pairs (or src_image/trg_image columns)")
        items = items.merge(image_pairs[["pair_id", "src_image", "trg_image"]], on="pair_id", how="left")
        if items["src_image"].isna().any():
            bad = items.loc[items["src_image"].isna(), "pair_id"].iloc[0]
            raise MatchingError(f"4-choice item pair {bad!r} is not in image_pairs: rebuild four_choice")
    cols = ["backbone", "pair_id", "src_keypoint", "sim_a", "sim_b", "sim_c", "sim_d", "answer"]
    if items.empty:
        return pd.DataFrame(columns=cols + [f"pick_{r}" for r in range(4)])
    desc, qsrc = source_descriptors(items, keypoints, images, store, protocol, backbone_name, device)
    n = len(items)
    trg = items["trg_image"].to_numpy()
    opt_names = items[_OPTIONS].to_numpy().reshape(-1)
    opt_xy = visible_keypoint_xy(keypoints, np.repeat(trg, 4), opt_names, "4-choice option").reshape(n, 4, 2)
    sizes = image_sizes(images, trg)
    sims = np.zeros((n, 4))
    for image_id, rows in group_slices(trg):
        arr, size = load_stored_maps(store, image_id, backbone_name)
        fmap = arr if device.type == "cpu" else stored_tensor(arr, device)  # numpy: corners read where it is
        uv = to_unit(opt_xy[rows].reshape(-1, 2), np.repeat(sizes[rows], 4, axis=0), size, protocol)
        opt_desc = sample_descriptors(fmap, uv).reshape(len(rows), 4, -1)
        src = desc[torch.as_tensor(qsrc[rows], device=device)].float()
        sims[rows] = torch.einsum("nc,noc->no", src, opt_desc).cpu().numpy()
    picks = rotation_picks(sims)
    return pd.DataFrame(
        {
            "backbone": backbone_name,
            "pair_id": items["pair_id"].to_numpy(),
            "src_keypoint": items["src_keypoint"].to_numpy(),
            **{f"sim_{k}": sims[:, i] for i, k in enumerate("abcd")},
            "answer": items["answer"].to_numpy().astype(np.int64),
            **{f"pick_{r}": picks[:, r] for r in range(4)},
        }
    )
