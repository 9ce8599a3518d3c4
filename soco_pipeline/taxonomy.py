"""The SOCO concept taxonomy (assets/taxonomy.yaml, or a release's): categories, nodes, concepts, keypoints; a
keypoint defined at a node is inherited by every category below it, the basis of Cross-SOC."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"
DEFAULT_TAXONOMY_PATH = ASSETS_DIR / "taxonomy.yaml"
DEFAULT_PATTERN = "{node}_{part}_{where}_{at}"

# Words of a part's position that carry object-relative identity, grouped by axis.
IDENTITY_AXES: dict[str, tuple[str, ...]] = {
    "front_rear": ("front", "rear", "back"),
    "left_right": ("left", "right"),
    "top_bottom": ("top", "bottom", "upper", "lower"),
    "inner_outer": ("inner", "outer"),
}


# Columns of the taxonomy table (the `taxonomy` asset, SQL view `taxonomy`): see Taxonomy.to_table.
TAXONOMY_COLUMNS = (
    "category",
    "supercategory",
    "keypoint",
    "concept",
    "node",
    "lineage",
    "part",
    "where",
    "at",
    *IDENTITY_AXES,
    "noun",
    "template",
    "family",
    "category_order",
    "keypoint_order",
    "concept_order",
)


class TaxonomyError(ValueError):
    """The taxonomy file is malformed; the message names the entry and the fix."""


@dataclass(frozen=True)
class KeypointDef:
    """One keypoint of the taxonomy, with what descriptions and SOC need to know about it."""

    name: str
    node: str
    concept: str
    part: str
    where: str
    at: str
    identity: tuple[tuple[str, str], ...] = ()
    template: str = ""  # a description template of its own (a release's); "" = assets/descriptions.yaml

    @property
    def identity_dict(self) -> dict[str, str]:
        """The object-relative identity as {axis: value}, e.g. {'front_rear': 'front'}."""
        return dict(self.identity)


@dataclass(frozen=True)
class Node:
    """A taxonomy node; categories are the leaves (``is_category``)."""

    name: str
    parent: str | None
    supercategory: str
    is_category: bool
    family: str | None = None
    keypoints: tuple[str, ...] = ()  # defined here, not inherited


@dataclass
class Taxonomy:
    """The validated taxonomy with the queries the pipeline needs."""

    supercategories: tuple[str, ...]
    concepts: dict[str, dict]
    nodes: dict[str, Node]
    keypoints: dict[str, KeypointDef]
    source: str = "assets/taxonomy.yaml"
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def categories(self) -> list[str]:
        """All category names in file order."""
        return [n.name for n in self.nodes.values() if n.is_category]

    def category(self, name: str) -> Node:
        """The category node, or a clear error for an unknown category."""
        node = self.nodes.get(name)
        if node is None or not node.is_category:
            raise KeyError(
                f"unknown category {name!r}: not in the taxonomy ({self.source}); add it there or fix "
                f"the record's category"
            )
        return node

    def supercategory(self, category: str) -> str:
        """The super-category of a category."""
        return self.category(category).supercategory

    def family(self, category: str) -> str:
        """The hand-modelled shape family the generator builds the category from."""
        return self.category(category).family or category

    def ancestors(self, name: str) -> list[str]:
        """The node itself and its ancestors, nearest first."""
        out = []
        cur: str | None = name
        while cur is not None:
            out.append(cur)
            cur = self.nodes[cur].parent
        return out

    def inherited_keypoints(self, node: str) -> list[str]:
        """Keypoints a node has: those defined at it and at its ancestors (root's first)."""
        return [k for n in reversed(self.ancestors(node)) for k in self.nodes[n].keypoints]

    def category_keypoints(self, category: str) -> list[str]:
        """Keypoint names of a category, inherited ones included (root's first)."""
        key = ("kps", category)
        if key not in self._cache:
            self.category(category)
            self._cache[key] = self.inherited_keypoints(category)
        return list(self._cache[key])

    def lowest_common_ancestor(self, a: str, b: str) -> str | None:
        """The lowest taxonomy node shared by two categories (None if none below the super-category)."""
        anc_b = set(self.ancestors(b))
        return next((node for node in self.ancestors(a) if node in anc_b), None)

    def shared_keypoints(self, a: str, b: str) -> list[str]:
        """Keypoints both categories have: those defined at their common ancestors."""
        lca = self.lowest_common_ancestor(a, b)
        return [] if lca is None else self.inherited_keypoints(lca)

    def related_categories(self, category: str) -> list[str]:
        """Other categories sharing at least one keypoint with this one (cross pairs)."""
        return [c for c in self.categories if c != category and self.shared_keypoints(category, c)]

    def concept_of(self, keypoint: str) -> str:
        """The concept of a keypoint name."""
        try:
            return self.keypoints[keypoint].concept
        except KeyError:
            raise KeyError(f"unknown keypoint {keypoint!r}: not defined in {self.source}") from None

    def to_table(self) -> pd.DataFrame:
        """The taxonomy as a table (TAXONOMY_COLUMNS), one row per (category, keypoint), categories in
        order, with the lineage root first and '/'-joined; `from_table` inverts it."""
        key = ("table",)
        if key not in self._cache:
            kp_order = {k: i for i, k in enumerate(self.keypoints)}
            concept_order = {c: i for i, c in enumerate(self.concepts)}
            rows = []
            for ci, cat in enumerate(self.categories):
                lineage = "/".join(reversed(self.ancestors(cat)))
                family = self.nodes[cat].family or ""
                for kp in self.category_keypoints(cat):
                    d = self.keypoints[kp]
                    ident = d.identity_dict
                    noun = (self.concepts.get(d.concept) or {}).get("noun", "")
                    rows.append(
                        {
                            "category": cat,
                            "supercategory": self.supercategory(cat),
                            "keypoint": kp,
                            "concept": d.concept,
                            "node": d.node,
                            "lineage": lineage,
                            "part": d.part,
                            "where": d.where,
                            "at": d.at,
                            **{axis: ident.get(axis, "") for axis in IDENTITY_AXES},
                            "noun": str(noun or ""),
                            "template": d.template,
                            "family": family,
                            "category_order": ci,
                            "keypoint_order": kp_order[kp],
                            "concept_order": concept_order[d.concept],
                        }
                    )
            self._cache[key] = pd.DataFrame(rows, columns=list(TAXONOMY_COLUMNS))
        return self._cache[key].copy()

    @classmethod
    def from_table(cls, table: pd.DataFrame, source: str = "taxonomy table") -> Taxonomy:
        """A taxonomy from its table (`to_table`'s columns); TaxonomyError naming the rows at fault."""
        missing = [c for c in TAXONOMY_COLUMNS if c not in table.columns]
        if missing:
            raise TaxonomyError(f"{source}: lacks columns {missing}; build it with Taxonomy.to_table")
        t = table[list(TAXONOMY_COLUMNS)].copy()
        text = [c for c in TAXONOMY_COLUMNS if not c.endswith("_order")]
        t[text] = t[text].fillna("").astype(str)
        for col, keys in (
            ("concept", ["keypoint"]),
            ("node", ["keypoint"]),
            ("supercategory", ["category"]),
            ("lineage", ["category"]),
            ("noun", ["concept"]),
        ):
            n = t.groupby(keys)[col].nunique()
            if (n > 1).any():
                bad = list(n[n > 1].index[:5])
                raise TaxonomyError(f"{source}: {keys[0]}(s) {bad} have more than one {col}; give each one")
        lineages = t.drop_duplicates("category").sort_values("category_order")
        parents: dict[str, str | None] = {}
        for cat, lineage in zip(lineages["category"], lineages["lineage"], strict=True):
            chain = lineage.split("/")
            if chain[-1] != cat:
                raise TaxonomyError(
                    f"{source}: category {cat!r} has lineage {lineage!r}, which must end with it"
                )
            for parent, child in zip([None, *chain[:-1]], chain, strict=True):
                if parents.setdefault(child, parent) != parent:
                    raise TaxonomyError(
                        f"{source}: node {child!r} has parents {parents[child]!r} and {parent!r} in two lineages"
                    )
        off = t[
            [node not in lineage.split("/") for node, lineage in zip(t["node"], t["lineage"], strict=True)]
        ]
        if len(off):
            raise TaxonomyError(
                f"{source}: keypoints defined at a node outside their category's lineage:\n"
                f"{off[['category', 'keypoint', 'node', 'lineage']].head(5).to_string(index=False)}"
            )
        kps = t.drop_duplicates("keypoint").sort_values("keypoint_order")
        keypoints = {
            r.keypoint: KeypointDef(
                name=r.keypoint,
                node=r.node,
                concept=r.concept,
                part=r.part,
                where=r.where,
                at=r.at,
                identity=tuple((axis, getattr(r, axis)) for axis in IDENTITY_AXES if getattr(r, axis)),
                template=r.template,
            )
            for r in kps.itertuples(index=False)
        }
        concepts = {
            r.concept: ({"noun": r.noun} if r.noun else {})
            for r in t.drop_duplicates("concept").sort_values("concept_order").itertuples(index=False)
        }
        sup_of = dict(zip(lineages["category"], lineages["supercategory"], strict=True))
        below: dict[str, set[str]] = {}
        for cat, lineage in zip(lineages["category"], lineages["lineage"], strict=True):
            for node in lineage.split("/"):
                below.setdefault(node, set()).add(sup_of[cat])
        family = dict(zip(lineages["category"], lineages["family"], strict=True))
        defined: dict[str, list[str]] = {}
        for name, d in keypoints.items():
            defined.setdefault(d.node, []).append(name)
        nodes: dict[str, Node] = {}
        for name in [n for n in parents if n not in sup_of] + list(sup_of):
            sups = below[name]
            nodes[name] = Node(
                name=name,
                parent=parents[name],
                supercategory=sup_of.get(name) or (next(iter(sups)) if len(sups) == 1 else ""),
                is_category=name in sup_of,
                family=family.get(name) or None,
                keypoints=tuple(defined.get(name, ())),
            )
        supers = tuple(pd.unique(lineages["supercategory"]))
        return cls(supercategories=supers, concepts=concepts, nodes=nodes, keypoints=keypoints, source=source)


def identity_of(where: str) -> tuple[tuple[str, str], ...]:
    """Object-relative identity attributes read off a part's position, e.g. 'front left'."""
    words = where.split()
    found = ((axis, next((w for w in words if w in values), "")) for axis, values in IDENTITY_AXES.items())
    return tuple((axis, w) for axis, w in found if w)


def _expand_keypoints(node: str, specs: list, where_ctx: str) -> list[KeypointDef]:
    out = []
    for i, spec in enumerate(specs or []):
        ctx = f"{where_ctx}, keypoint entry {i + 1}"
        if not isinstance(spec, dict):
            raise TaxonomyError(f"{ctx}: expected a mapping with part/concept/where, got {spec!r}")
        for req in ("part", "concept"):
            if not spec.get(req):
                raise TaxonomyError(f"{ctx}: keypoint without `{req}`; every keypoint needs one")
        wheres, pattern = spec.get("where", [""]), spec.get("pattern", DEFAULT_PATTERN)
        part, concept, at = spec["part"], spec["concept"], spec.get("at", "")
        for where in [wheres] if isinstance(wheres, str) else wheres:
            raw = pattern.format(node=node, part=part.replace(" ", ""), where=where, at=at)
            name = "_".join(t for t in raw.replace(" ", "_").split("_") if t)
            out.append(KeypointDef(name, node, concept, part, where, at, identity_of(where)))
    return out


def parse_taxonomy(doc: dict, source: str = "taxonomy") -> Taxonomy:
    """Build and validate a taxonomy from its YAML document."""
    if not isinstance(doc, dict):
        raise TaxonomyError(f"{source}: expected a mapping at the top level")
    supers = tuple(doc.get("supercategories") or ())
    if not supers:
        raise TaxonomyError(f"{source}: `supercategories` is missing or empty")
    concepts = doc.get("concepts") or {}
    nodes: dict[str, Node] = {}
    keypoints: dict[str, KeypointDef] = {}

    def add(name: str, spec: dict, is_category: bool) -> None:
        section = "categories" if is_category else "nodes"
        ctx = f"{source}: {section}.{name}"
        spec = spec or {}
        if name in nodes:
            raise TaxonomyError(f"{ctx}: duplicate name {name!r}; node and category names must be unique")
        kps = _expand_keypoints(name, spec.get("keypoints"), ctx)
        for kp in kps:
            if kp.concept not in concepts:
                raise TaxonomyError(
                    f"{ctx}: keypoint {kp.name!r} has concept {kp.concept!r}, which is not under `concepts:`"
                )
            if kp.name in keypoints:
                raise TaxonomyError(f"{ctx}: duplicate keypoint name {kp.name!r}")
            keypoints[kp.name] = kp
        nodes[name] = Node(
            name=name,
            parent=spec.get("parent"),
            supercategory=spec.get("supercategory", ""),
            is_category=is_category,
            family=spec.get("family"),
            keypoints=tuple(k.name for k in kps),
        )

    for name, spec in (doc.get("nodes") or {}).items():
        add(name, spec, False)
    for name, spec in (doc.get("categories") or {}).items():
        add(name, spec, True)

    # Resolve parents and super-categories; reject unknown parents and cycles.
    resolved: dict[str, Node] = {}
    for name, node in nodes.items():
        section = "categories" if node.is_category else "nodes"
        if node.parent is not None and node.parent not in nodes:
            raise TaxonomyError(
                f"{source}: {section}.{name}: unknown parent {node.parent!r}; define it under `nodes:`"
            )
        seen = {name}
        cur = node
        while cur.parent is not None:
            if cur.parent in seen:
                raise TaxonomyError(f"{source}: {section}.{name}: parent links form a cycle")
            seen.add(cur.parent)
            cur = nodes[cur.parent]
        sup = cur.supercategory
        if sup not in supers:
            raise TaxonomyError(
                f"{source}: {section}.{name}: root {cur.name!r} has super-category {sup!r}, "
                f"expected one of {list(supers)}"
            )
        if node.parent is not None and node.supercategory and node.supercategory != sup:
            raise TaxonomyError(f"{source}: {section}.{name}: super-category differs from its root's")
        resolved[name] = dataclasses.replace(node, supercategory=sup)
    for name, node in resolved.items():
        if node.is_category and node.family and node.family not in resolved:
            raise TaxonomyError(f"{source}: categories.{name}: unknown family {node.family!r}")
        if not node.is_category and not any(n.parent == name for n in resolved.values()):
            raise TaxonomyError(f"{source}: nodes.{name}: node has no children; make it a category")
    return Taxonomy(supercategories=supers, concepts=concepts, nodes=resolved, keypoints=keypoints)


def load_taxonomy(path: str | Path | None = None) -> Taxonomy:
    """Load and validate the taxonomy (default: assets/taxonomy.yaml)."""
    path = Path(path) if path is not None else DEFAULT_TAXONOMY_PATH
    return _load_cached(str(path))


@functools.lru_cache(maxsize=8)
def _load_cached(path: str) -> Taxonomy:
    try:
        with open(path) as f:
            doc = yaml.safe_load(f)
    except FileNotFoundError:
        raise TaxonomyError(f"taxonomy file {path} does not exist") from None
    except yaml.YAMLError as e:
        raise TaxonomyError(f"{path}: not valid YAML: {e}") from None
    return parse_taxonomy(doc, source=path)
