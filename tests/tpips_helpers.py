"""Small TPIPS configs and data for the tests (tiny scale, CPU)."""

from __future__ import annotations

from soco_pipeline.tasks.tpips.config import TpipsConfig, load_config


def tiny_config(n_triplets: int = 12, n_afc: int = 8, **sections) -> TpipsConfig:
    """The shipped config shrunk to a few triplets and 2AFC items (and any other section updates)."""
    cfg = load_config()
    return cfg.with_updates(triplets={"n": n_triplets}, afc={"n": n_afc}, **sections)


def tiny_clip_folder(path, kind: str = "clip_text_model", seed: int = 0):
    """Write a seeded random-init tiny CLIP (`clip`: text and vision towers with projections) or CLIP text tower
    (`clip_text_model`) with a byte-level CLIP tokenizer to `path`, as transformers saves them; returns path."""
    import torch
    from tokenizers import pre_tokenizers
    from transformers import CLIPConfig, CLIPModel, CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    chars = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    vocab.update({ch: len(vocab) + i for i, ch in enumerate(chars)})
    vocab.update({ch + "</w>": len(vocab) + i for i, ch in enumerate(chars)})
    tok = CLIPTokenizer(vocab=vocab, merges=[])
    text = dict(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=32,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    if kind == "clip":
        vision = dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=16,
        )
        model = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=24))
    else:
        model = CLIPTextModel(CLIPTextConfig(**text))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


# Foreign names on purpose: folders and files in other scripts, spaces, accents (an official release's names are
# kept as they are written).
OFFICIAL_NAMES = ("Bilder/Äpfel rot {i}.png", "图像/猫 {i}.png", "imágenes/ñandú-{i}.jpg")


def write_official_fixture(folder, seed: int = 0) -> dict:
    """Write a small TPIPS set in the official layout (docs/tpips.md "Real data") to `folder`: ooo.jsonl (8
    triplets over train/val/test, aspects colour / pose / overall, one line with 3 "cannot tell"), afc.jsonl (3
    items, one tied line), and seeded images of two sizes under foreign names. Returns the expected counts."""
    import json

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    names = []

    def image(i: int) -> str:
        rel = OFFICIAL_NAMES[i % 3].format(i=i)
        size = (48, 48) if i % 2 else (40, 56)
        pixels = (rng.random((size[1], size[0], 3)) * 64 + rng.integers(0, 192, 3)).astype(np.uint8)
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(folder / rel)
        names.append(rel)
        return rel

    splits = ["train"] * 4 + ["val"] * 2 + ["test"] * 2
    ooo = []
    for t, split in enumerate(splits):
        imgs = [image(3 * t + k) for k in range(3)]
        for aspect in ("colour", "pose", "overall"):
            votes = rng.multinomial(5, rng.dirichlet([1, 1, 1])).tolist()
            ooo.append(
                {"triplet_id": f"flux-reason/{t:04d}-α", "images": imgs, "aspect": aspect, "votes": votes}
                | {"cannot_tell": 0, "split": split}
            )
    ooo[4] |= {"votes": [1, 1, 0], "cannot_tell": 3}  # pruned (published: >= 3 "cannot tell")
    afc = []
    for i, (source, aspect) in enumerate(
        [("editing", "colour"), ("novel_view", "pose"), ("editing", "lighting")]
    ):
        ref, x0, x1 = (image(100 + 3 * i + k) for k in range(3))
        afc.append(
            {"item_id": f"gedit/{i}", "ref": ref, "x0": x0, "x1": x1, "aspect": aspect, "votes": [4, 1]}
            | {"source": source, "cannot_tell": 0}
        )
    afc[1] |= {"votes": [2, 2], "cannot_tell": 1}  # a tie: removed (published)
    (folder / "ooo.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in ooo) + "\n")
    (folder / "afc.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in afc) + "\n")
    return {"images": names, "ooo_kept": len(ooo) - 1, "afc_kept": len(afc) - 1}


def write_release_fixture(folder, seed: int = 0) -> dict:
    """Write a small odd-one-out set in TPIPS's released format (docs/tpips.md "The released format") to
    `folder`: `release/ooo_test.jsonl` (one triplet per line: p0_path / p1_path / p2_path and factors with
    name, label, probs) and its images under the image root `release/Bild-Wurzel`, in nested folders with
    foreign names. 1 to 4 factors per triplet, factor names as a release writes them (not our aspects), labels
    that are missing or not p0/p1/p2 (skipped), shares that do not sum to 1 (normalised), one triplet without a
    usable factor (dropped). Returns the file, the image root and what the format keeps, worked out here from
    its definition: the rows (line, name, y), the images of the kept triplets and the counts."""
    import json

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    root = folder / "release" / "Bild-Wurzel"
    names = ("Äpfel/rot/apfel {i}.png", "图像/动物/猫 {i}.png", "imágenes/aves/ñandú-{i}.jpg")

    def image(i: int) -> str:
        rel = names[i % 3].format(i=i)
        size = (48, 48) if i % 2 else (40, 56)
        pixels = (rng.random((size[1], size[0], 3)) * 64 + rng.integers(0, 192, 3)).astype(np.uint8)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(root / rel)
        return rel

    def factor(name, label, probs):
        f = {"name": name, "probs": probs}
        return f if label is ... else f | {"label": label}

    # (factor name, label (... = no label field), probs) per triplet; 1-4 factors each
    plan = [
        [("Farbton", "p0", [0.6, 0.2, 0.2]), ("pose", "p2", [0.0, 0.2, 0.8])],
        [("姿势", "p1", [0.2, 0.6, 0.2]), ("overall", "p1", [0.25, 0.5, 0.25]), ("texture", ..., [1, 0, 0])],
        [("lighting warmth", "p2", [0.2, 0.2, 0.6]), ("colour", "P0", [0.8, 0.2, 0.0])]
        + [("size", None, [0.2, 0.4, 0.4]), ("scene geometry", "p0", [2, 1, 1])],
        [("colour", "p3", [0.4, 0.4, 0.2]), ("pose", 1, [0.2, 0.8, 0.0])],  # no usable factor: dropped
        [("Farbton", "p1", [0.0, 1.0, 0.0])],
        [
            ("overall", "p0", [0.4, 0.2, 0.4]),
            ("姿势", "p2", [0.2, 0.2, 0.6]),
            ("colour", "p1", [0.2, 0.8, 0.0]),
        ]
        + [("surface texture", "p0", [0.8, 0.0, 0.2])],
        [("pose", "p2", [0.0, 0.0, 1.0]), ("Farbton", "", [0.5, 0.5, 0.0])],
        [("overall", "p1", [0.1, 0.7, 0.2]), ("lighting warmth", "p0", [0.5, 0.3, 0.2])],
    ]
    lines, rows, images, skipped, dropped = [], [], [], 0, []
    for t, factors in enumerate(plan):
        paths = [image(3 * t + k) for k in range(3)]
        line = {f"p{k}_path": p for k, p in enumerate(paths)}
        lines.append(line | {"factors": [factor(*f) for f in factors]})
        usable = [(n, p) for n, lab, p in factors if lab in ("p0", "p1", "p2")]
        skipped += len(factors) - len(usable)
        if not usable:
            dropped.append(t + 1)
            continue
        images += paths
        rows += [(t + 1, n, [v / sum(p) for v in p], paths) for n, p in usable]
    path = folder / "release" / "ooo_test.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in lines) + "\n")
    return {
        "file": path,
        "image_root": root,
        "rows": rows,
        "images": images,
        "lines": len(plan),
        "factors": sum(map(len, plan)),
        "skipped": skipped,
        "dropped_lines": dropped,
        "renormalised": 1,
    }
