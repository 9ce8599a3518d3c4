"""The published visual prompts (CoLVA `chat_with_colva.py`; docs/mmvm.md, "Marks and question"), in RGB (the
reference draws on BGR), font scale and thickness quirks included."""

from __future__ import annotations

import colorsys
from dataclasses import dataclass

import cv2
import numpy as np

QUERY_BGR = (255, 255, 0)
QUERY_RGB = QUERY_BGR[::-1]
THICKNESS = 2
FONT = cv2.FONT_HERSHEY_SIMPLEX
LABEL_TEXT_RGB = (255, 255, 255)


@dataclass(frozen=True)
class Label:
    """Where one ID label was drawn: its text, colour and box (x0, y0, x1, y1)."""

    object_id: int
    text: str
    colour: tuple[int, int, int]
    box: tuple[int, int, int, int]


def candidate_colours(n: int) -> list[tuple[int, int, int]]:
    """n distinct saturated RGB colours, evenly spaced hues, none near the query's cyan."""
    hues = np.linspace(0, 1, n + 1, endpoint=False)
    hues = [h for h in hues if abs(h - 0.5) > 0.5 / (n + 1) * 0.99][:n]  # drop the one closest to cyan (0.5)
    while len(hues) < n:
        hues.append((hues[-1] + 0.37) % 1.0)
    out = []
    for i, h in enumerate(hues):
        v = 0.95 if i % 2 == 0 else 0.75
        r, g, b = colorsys.hsv_to_rgb(float(h), 0.9, v)
        out.append((int(r * 255), int(g * 255), int(b * 255)))
    return out


def _contours(mask: np.ndarray):
    contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_TREE, cv2.CHAIN_APPROX_SIMPLE)
    return contours


def draw_query(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """A copy of frame 1 with the query's cyan contour."""
    out = np.ascontiguousarray(image.copy())
    cv2.drawContours(out, _contours(mask), -1, QUERY_RGB, THICKNESS)
    return out


def _label_anchor(contours) -> tuple[tuple[int, int], tuple[int, int]]:
    """(centroid, box size) of the largest contour (the reference's choice)."""
    areas = [cv2.contourArea(c) for c in contours]
    c = contours[int(np.argmax(areas))] if len(contours) > 1 else contours[0]
    m = cv2.moments(c)
    x, y, w, h = cv2.boundingRect(c)
    if m["m00"] > 0:
        return (int(m["m10"] / m["m00"]), int(m["m01"] / m["m00"])), (w, h)
    return (int(x + w / 2), int(y + h / 2)), (w, h)


def draw_candidates(
    image: np.ndarray,
    masks: list[np.ndarray],
    ids: list[int],
    colours: list[tuple[int, int, int]] | None = None,
) -> tuple[np.ndarray, list[Label]]:
    """A copy of frame 2 with every candidate's contour and ID label, and where each label went."""
    out = np.ascontiguousarray(image.copy())
    colours = colours or candidate_colours(len(masks))
    anchors, scales, thicks = [], [], []
    for mask, colour, oid in zip(masks, colours, ids, strict=True):
        contours = _contours(mask)
        if not contours:
            anchors.append(None)
            continue
        cv2.drawContours(out, contours, -1, colour, THICKNESS)
        centre, (bw, bh) = _label_anchor(contours)
        thick = 1 if max(bw, bh) < 25 else 2
        scale = 0.5
        for s in range(59, 4, -1):
            (tw, th), _ = cv2.getTextSize(str(oid), FONT, s / 10, thick)
            if th / max(bh, 1) <= 0.15 and tw / max(bw, 1) <= 0.15:
                scale = s / 10
                break
        anchors.append((centre, thick))
        scales.append(scale)
        thicks.append(thick)
    scale = min(scales) if scales else 0.5
    # Quirk kept: the reference draws every label with the text thickness of the last candidate.
    thick_all = thicks[-1] if thicks else 2
    labels = []
    for anchor, colour, oid in zip(anchors, colours, ids, strict=True):
        if anchor is None:
            continue
        (cx, cy), _ = anchor
        thick = thick_all
        (tw, th), bottom = cv2.getTextSize(str(oid), FONT, scale, thick)
        org = (int(cx - tw / 2), int(cy + (th + bottom) / 2))
        box = (org[0], int(org[1] - th - bottom / 2), org[0] + tw, int(org[1] + bottom / 2))
        cv2.rectangle(out, box[:2], box[2:], colour, -1, 8)
        cv2.putText(out, str(oid), org, FONT, scale, LABEL_TEXT_RGB, thick)
        labels.append(Label(int(oid), str(oid), tuple(colour), box))
    return out, labels
