"""The taxonomy of an official SOCO release, built from the release itself (docs/official-data.md)."""

from __future__ import annotations

import string
import warnings

import pandas as pd

from soco_pipeline.taxonomy import IDENTITY_AXES, TAXONOMY_COLUMNS, Taxonomy, identity_of

UNKNOWN_SUPERCATEGORY = "unknown"
TEMPLATE_FIELDS = ("a_category", "category", "part", "where", "at", "noun")
# One row per keypoint entry of a keypoint or pair file.
ENTRY_COLUMNS = ["file", "image_id", "category", "keypoint", "id", "concept", "concept_id"]


class ReleaseWarning(UserWarning):
    """A SOCO release lacks something the import can do without; the message names the file and the fallback."""


def _warn(message: str) -> None:
    warnings.warn(message, ReleaseWarning, stacklevel=3)


def check_keypoint_concepts(entries: pd.DataFrame) -> None:
    """ValueError naming two files that give one keypoint name two different concepts."""
    first = entries.drop_duplicates(["keypoint", "concept"])
    dup = first[first.duplicated("keypoint", keep=False)]
    if len(dup):
        a, b = dup.iloc[0], dup[dup.keypoint == dup.iloc[0].keypoint].iloc[1]
        raise ValueError(
            f"{b.file}: keypoint {b.keypoint!r} has concept {b.concept!r}, but {a.file} gives it concept "
            f"{a.concept!r}; a keypoint name has one concept across the release: fix one of the two files"
        )


def _laminar(sets: set[frozenset]) -> tuple[set[frozenset], dict[frozenset, frozenset]]:
    """Merge overlapping sets until any two are nested or disjoint; also the map old set -> its merged set."""
    merged = {s: s for s in sets}
    current = set(sets)
    changed = True
    while changed:
        changed = False
        for a in sorted(current, key=sorted):
            for b in sorted(current, key=sorted):
                if a is not b and a & b and not (a <= b or b <= a):
                    union = a | b
                    _warn(
                        f"keypoints shared by {sorted(a)} and by {sorted(b)} overlap without nesting; "
                        f"the import treats {sorted(union)} as one taxonomy node"
                    )
                    current -= {a, b}
                    current.add(union)
                    for k, v in merged.items():
                        if v in (a, b):
                            merged[k] = union
                    changed = True
                    break
            if changed:
                break
    return current, merged


def _metadata_part(meta: dict | None, path: str, part: str, fallback: str) -> dict:
    if meta is None:
        return {}
    value = meta.get(part)
    if isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v for v in value):
        value = {str(v["name"]): v for v in value}  # a list of named entries reads as a mapping
    if not isinstance(value, dict):
        what = "has no" if value is None else f"has a {type(value).__name__} as its"
        _warn(f"{path} {what} `{part}` mapping; {fallback}")
        return {}
    return value


def _template(kp: str, concept: str, at: str, own: object, templates: dict) -> str:
    """The keypoint's description template: its own, its concept's or its `at` value's, else from its name."""
    by_concept = templates.get("concepts") if isinstance(templates.get("concepts"), dict) else {}
    by_at = templates.get("at") if isinstance(templates.get("at"), dict) else {}
    for t in (own, by_concept.get(concept), by_at.get(at)):
        if isinstance(t, str) and t:
            try:
                used = {f for _, f, _, _ in string.Formatter().parse(t) if f}
            except ValueError:
                continue
            if used <= set(TEMPLATE_FIELDS):
                return t
    words = kp.replace("_", " ").replace("{", "{{").replace("}", "}}")
    return f"the {words} of {{a_category}}"


def build_release_taxonomy(
    entries: pd.DataFrame, cross: pd.DataFrame, meta: dict | None, meta_path: str, source: str
) -> Taxonomy:
    """The taxonomy of a release from its keypoint entries, its cross pairs and its parsed Metadata."""
    check_keypoint_concepts(entries)
    if meta is None:
        _warn(
            f"{meta_path} does not exist: super-categories are {UNKNOWN_SUPERCATEGORY!r} and descriptions are "
            "made of the keypoint names"
        )
    meta_cats = _metadata_part(
        meta, meta_path, "categories", f"super-categories are {UNKNOWN_SUPERCATEGORY!r}"
    )
    meta_kps = _metadata_part(meta, meta_path, "keypoints", "descriptions use the keypoint names")
    meta_concepts = _metadata_part(meta, meta_path, "concepts", "concept nouns are the concept names")
    templates = _metadata_part(meta, meta_path, "templates", "descriptions are made of the keypoint names")

    kp_info = (
        entries.assign(
            id=pd.to_numeric(entries["id"], errors="coerce"),
            concept_id=pd.to_numeric(entries["concept_id"], errors="coerce"),
        )
        .groupby("keypoint")
        .agg(concept=("concept", "first"), id=("id", "min"), concept_id=("concept_id", "min"))
    )
    cats_of = entries.groupby("keypoint")["category"].agg(lambda c: frozenset(c))
    categories = sorted(entries["category"].unique())
    shared, merged = _laminar({s for s in cats_of if len(s) >= 2})
    cats_of = cats_of.map(lambda s: merged.get(s, s))

    def lca_set(a: str, b: str) -> frozenset | None:
        holding = [s for s in shared if a in s and b in s]
        return min(holding, key=len) if holding else None

    # Node names: the cross pairs' ancestor, the Metadata's node, the categories.
    names: dict[frozenset, str] = {}
    taken = set(categories)
    votes: dict[frozenset, set] = {}
    cross = cross[["src_category", "trg_category", "ancestor"]].astype(object).drop_duplicates()
    for a, b, anc in cross.itertuples(index=False):
        s = lca_set(a, b)
        if s is not None and isinstance(anc, str) and anc:
            votes.setdefault(s, set()).add(anc)
    for s in sorted(shared, key=lambda s: (-len(s), sorted(s))):
        meta_nodes = {
            str(meta_kps[k]["node"])
            for k, held_by in cats_of.items()
            if held_by == s
            if isinstance(meta_kps.get(k), dict) and meta_kps[k].get("node")
        }
        for candidate in (votes.get(s, set()), meta_nodes):
            if len(candidate) == 1 and (name := next(iter(candidate))) not in taken and "/" not in name:
                break
        else:
            name = "+".join(sorted(s))
        names[s] = name
        taken.add(name)

    def lineage(cat: str) -> str:
        chain = sorted((s for s in shared if cat in s), key=len, reverse=True)
        return "/".join([names[s] for s in chain] + [cat])

    sup = {}
    missing_sup = []
    for c in categories:
        v = meta_cats.get(c)
        if isinstance(v, dict) and isinstance(v.get("supercategory"), str) and v["supercategory"]:
            sup[c] = v["supercategory"]
        else:
            sup[c] = UNKNOWN_SUPERCATEGORY
            missing_sup.append(c)
    if meta_cats and missing_sup:
        _warn(
            f"{meta_path} gives no super-category for categories {missing_sup[:10]}; they get "
            f"{UNKNOWN_SUPERCATEGORY!r}"
        )

    kp_order = kp_info.reset_index().sort_values(["id", "keypoint"], na_position="last")["keypoint"]
    kp_pos = {k: i for i, k in enumerate(kp_order)}
    concepts = kp_info.groupby("concept")["concept_id"].min().reset_index()
    concept_pos = {
        c: i
        for i, c in enumerate(concepts.sort_values(["concept_id", "concept"], na_position="last")["concept"])
    }
    pairs = entries.drop_duplicates(["category", "keypoint"])[["category", "keypoint"]]
    rows = []
    for cat, kp in pairs.itertuples(index=False):
        concept = kp_info.at[kp, "concept"]
        m = meta_kps.get(kp) if isinstance(meta_kps.get(kp), dict) else {}
        part, where, at = (str(m.get(f) or "") for f in ("part", "where", "at"))
        noun = (
            (meta_concepts.get(concept) or {}).get("noun")
            if isinstance(meta_concepts.get(concept), dict)
            else None
        )
        s = cats_of[kp]
        ident = dict(identity_of(where))
        rows.append(
            {
                "category": cat,
                "supercategory": sup[cat],
                "keypoint": kp,
                "concept": concept,
                "node": names[s] if len(s) >= 2 else cat,
                "lineage": lineage(cat),
                "part": part,
                "where": where,
                "at": at,
                **{axis: ident.get(axis, "") for axis in IDENTITY_AXES},
                "noun": str(noun) if isinstance(noun, str) else concept.replace("_", " "),
                "template": _template(kp, concept, at, m.get("template"), templates),
                "family": "",
                "category_order": categories.index(cat),
                "keypoint_order": kp_pos[kp],
                "concept_order": concept_pos[concept],
            }
        )
    table = pd.DataFrame(rows, columns=list(TAXONOMY_COLUMNS))
    return Taxonomy.from_table(table, source=source)
