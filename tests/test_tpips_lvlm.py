"""TPIPS LVLM baselines through the harness against a loopback server: a constant answer scores its exact share."""

from __future__ import annotations

import numpy as np
import pytest

from soco_pipeline.lvlm.backends import build_backend
from soco_pipeline.lvlm.cache import AnswerCache
from soco_pipeline.lvlm.server import serve
from soco_pipeline.tasks.tpips.afc import annotate_afc, generate_afc
from soco_pipeline.tasks.tpips.evaluate import score_rows
from soco_pipeline.tasks.tpips.images import write_images
from soco_pipeline.tasks.tpips.lvlm import afc_answers, ooo_answers, parse_choice, parse_score
from soco_pipeline.tasks.tpips.ooo import annotate_triplets
from soco_pipeline.tasks.tpips.triplets import generate_triplets
from tests.lvlm_helpers import openai_spec
from tests.tpips_helpers import tiny_config

pytestmark = pytest.mark.unit


def test_parsers():
    assert (
        parse_score("I'd say 7/10.", 10) == 7
        and parse_score("10", 10) == 10
        and np.isnan(parse_score("no", 10))
    )
    assert parse_choice("Image 3 is the odd one", 3) == 2 and parse_choice("none", 3) == -1


@pytest.mark.parametrize("answer, ooo_share, afc_share", [("1", "y_0", "y_0"), ("2", "y_1", "y_1")])
def test_constant_answer_server_scores_its_exact_share(tmp_path, answer, ooo_share, afc_share):
    cfg = tiny_config(6, 6)
    ts = generate_triplets(cfg)
    ooo, _ = annotate_triplets(ts, cfg)
    values, items = generate_afc(cfg)
    afc, _ = annotate_afc(values, items, cfg)
    imgs = write_images(ts.images._append(values, ignore_index=True), str(tmp_path / "data"), cfg)
    uris = dict(zip(imgs.image_id, imgs.uri, strict=True))
    with serve(lambda request, body: answer) as srv:
        spec = openai_spec(srv.base_url, name="constant")
        backend, cache = build_backend(spec), AnswerCache(str(tmp_path / "cache"))
        o = ooo_answers(ooo, uris, cfg.lvlm, spec, backend, cache)
        a = afc_answers(afc, uris, cfg.lvlm, spec, backend, cache)
        sent = srv.requests
        assert sent == 4 * len(ooo) + 3 * len(afc)
        ooo_answers(ooo, uris, cfg.lvlm, spec, backend, cache)  # all from the cache now
        assert srv.requests == sent
    assert o["parse_failures"] == 0 and a["parse_failures"] == 0
    trip = score_rows("constant", "triplet_oracle", True, ooo, o["triplet"], afc, a["triplet"])
    pair = score_rows("constant", "early_fusion", True, ooo, o["pairwise"], afc, a["pairwise"])
    top = lambda t, e: t[(t["eval"] == e) & (t.aspect == "all")].agreement.item()  # noqa: E731
    # triplet oracle: answer k picks option k-1; pairwise: every pair scores the same, so the first option
    assert top(trip, "ooo") == pytest.approx(100 * ooo[ooo_share].mean(), abs=1e-9)
    assert top(trip, "afc:all") == pytest.approx(100 * afc[afc_share].mean(), abs=1e-9)
    assert top(pair, "ooo") == pytest.approx(100 * ooo.y_0.mean(), abs=1e-9)
    assert top(pair, "afc:all") == pytest.approx(100 * afc.y_0.mean(), abs=1e-9)
    assert (trip.judgements == "simulated").all()
