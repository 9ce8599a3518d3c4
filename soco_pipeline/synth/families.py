"""The 16 hand-modelled shape families; object frame: +x front, +y LEFT, +z up, ground at z = 0."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import yaml

from ..taxonomy import ASSETS_DIR
from .model import Builder
from .primitives import box, ellipsoid, limb, rot_y

FR = (("front", 1.0), ("rear", -1.0))
LR = (("left", 1.0), ("right", -1.0))
BLACK = np.array([0.08, 0.08, 0.09])
GLASS = np.array([0.16, 0.22, 0.3])
CHROME = np.array([0.75, 0.76, 0.78])

# Default shape parameters per family (lengths in metres, angles in degrees): data, in the assets folder.
FAMILY_PARAMS: dict[str, dict[str, float]] = yaml.safe_load((ASSETS_DIR / "synth_families.yaml").read_text())


def _vehicle_wheels(
    b: Builder, xs: dict[str, float], rs: dict[str, float], half_track: dict[str, float], width: float, col
) -> None:
    for fr, _ in FR:
        for side, s in LR:
            x, r, tr = xs[fr], rs[fr], half_track[fr]
            w = width * (1.35 if (fr == "rear" and rs["rear"] > rs["front"] * 1.3) else 1.0)
            tire = limb(
                f"wheel_{fr}_{side}",
                (x, s * (tr - w), r),
                (x, s * (tr + w), r),
                r,
                r,
                BLACK,
                texture=("hub", {"color2": col["rim"], "hub": 0.6}),
            )
            b.add(tire)
            b.kp(f"vehicle_wheel_{fr}_{side}_center", tire, (x, s * tr, r), (0, s, 0))


def _lights(
    b: Builder,
    x_front: float,
    x_rear: float,
    y: float,
    z_front: float,
    z_rear: float,
    size: float,
    rear_y: float | None = None,
) -> None:
    d = size * 0.25
    for side, s in LR:
        head = b.add(
            box(
                f"headlight_front_{side}",
                (x_front + d, s * y, z_front),
                (d, size, size * 0.6),
                (0.97, 0.95, 0.8),
            )
        )
        b.kp(f"vehicle_headlight_front_{side}", head, (x_front, s * y, z_front), (1, 0, 0))
        ry = y if rear_y is None else rear_y
        tail = b.add(
            box(
                f"taillight_rear_{side}",
                (x_rear - d, s * ry, z_rear),
                (d, size * 0.7, size * 0.6),
                (0.8, 0.06, 0.05),
            )
        )
        b.kp(f"vehicle_taillight_rear_{side}", tail, (x_rear, s * ry, z_rear), (-1, 0, 0))


def _roof(b: Builder, x: float, hx: float, hy: float, z_top: float, col) -> None:
    t = 0.03 + 0.01 * hx
    roof = b.add(box("roof", (x, 0, z_top + t), (hx, hy, t), col["main"] * 0.9))
    for fr, sx in FR:
        for side, sy in LR:
            b.kp(
                f"road_vehicle_roof_{fr}_{side}_corner",
                roof,
                (x + sx * 0.86 * hx, sy * 0.86 * hy, z_top),
                (0, 0, 1),
            )


def _mirrors(b: Builder, x: float, y: float, z: float, s: float, col) -> None:
    for side, sy in LR:
        m = b.add(box(f"side_mirror_{side}", (x, sy * (y + s), z), (0.4 * s, s, 0.6 * s), col["main"]))
        b.kp(f"road_vehicle_sidemirror_{side}", m, (x, sy * y, z), (0, sy, 0))


def _cabin(b: Builder, x: float, hx: float, hy: float, z0: float, h: float, col, glass: tuple) -> None:
    tex = ("band", {"axis": 2, "lo": glass[0], "hi": glass[1], "color2": GLASS})
    b.add(box("cabin", (x, 0, z0 + h / 2), (hx, hy, h / 2), col["main"], texture=tex))


def build_road_vehicle(b: Builder, p: dict, col: dict, want: set[str], style: str) -> None:
    """Car, bus and ambulance/van: body, cabin (or box), roof, four wheels, lights, mirrors."""
    length, width, clr = p["length"], p["width"], p["clearance"]
    hl, hw = length / 2, width / 2
    body_top = clr + p["body_h"]
    body_tex = ("noise", {"color2": col["main"] * 0.8, "freq": 3.0})
    if style == "bus":
        body_tex = ("band", {"axis": 2, "lo": 0.15, "hi": 0.75, "color2": GLASS, "pillars": 3.5})
    b.add(
        box("body", (0, 0, clr + p["body_h"] / 2), (hl, hw, p["body_h"] / 2), col["main"], texture=body_tex)
    )
    rw, ww = p["wheel_r"], p["wheel_w"]
    wb = p["wheelbase"] * length / 2
    xs = {"front": wb + (0.06 * length if style == "bus" else 0.0), "rear": -wb}
    rs = {"front": rw * p["front_wheel_r"], "rear": rw}
    track = {k: hw - 0.6 * ww for k in xs}
    _vehicle_wheels(b, xs, rs, track, ww, col)
    light = 0.09 * width / 1.8 * (1.3 if style == "bus" else 1.0)
    z_light = clr + 0.55 * p["body_h"] if style != "bus" else clr + 0.12 * p["body_h"]
    _lights(b, hl, -hl, hw - 1.6 * light, z_light, z_light, light)
    if style == "bus":
        z_roof = body_top
        _roof(b, 0.0, hl * 0.97, hw * 0.95, z_roof, col)
        _mirrors(b, hl - 0.25, hw, body_top - 0.35, 0.12, col)
        return
    if style == "car":
        cl = p["cabin_len"] * length / 2
        cx = p["cabin_off"] * length
        cw = p["cabin_w"] * hw
        _cabin(b, cx, cl, cw, body_top, p["cabin_h"], col, (-0.85, 0.78))
        _roof(b, cx, cl * 0.96, cw * 0.96, body_top + p["cabin_h"], col)
        _mirrors(b, cx + cl - 0.12, cw, body_top + 0.07, 0.07, col)
        if "car_doorhandle_front_left" in want:
            for side, sy in LR:
                h = b.add(
                    box(
                        f"door_handle_front_{side}",
                        (0.04 * length, sy * (hw + 0.015), body_top - 0.12),
                        (0.08, 0.015, 0.022),
                        CHROME,
                    )
                )
                b.kp(f"car_doorhandle_front_{side}", h, (0.04 * length, sy * hw, body_top - 0.12), (0, sy, 0))
        return
    # Van / ambulance: a cab at the front, a tall box behind it.
    cab_l = p["cabin_len"] * length / 2
    cab_x = hl - cab_l
    cw = p["cabin_w"] * hw
    _cabin(b, cab_x, cab_l, cw, body_top, p["cabin_h"], col, (-0.6, 0.8))
    box_l = p["box_len"] * length / 2
    box_x = -hl + box_l
    b.add(
        box(
            "cargo_box",
            (box_x, 0, body_top + p["box_h"] / 2),
            (box_l, hw, p["box_h"] / 2),
            col["main"],
            texture=("band", {"axis": 2, "lo": -0.35, "hi": -0.1, "color2": col["accent"]}),
        )
    )
    _roof(b, box_x, box_l * 0.97, hw * 0.95, body_top + p["box_h"], col)
    _mirrors(b, hl - 0.3, cw, body_top + 0.1, 0.08, col)
    if "ambulance_siren_left" in want:
        top = body_top + p["cabin_h"]
        for side, sy in LR:
            s = b.add(
                limb(
                    f"siren_{side}",
                    (cab_x - 0.2 * cab_l, sy * 0.45 * hw, top),
                    (cab_x - 0.2 * cab_l, sy * 0.45 * hw, top + 0.12),
                    0.08,
                    0.07,
                    (0.9, 0.1, 0.1) if side == "left" else (0.15, 0.3, 0.95),
                )
            )
            b.kp(
                f"ambulance_siren_{side}",
                s,
                (cab_x - 0.2 * cab_l, sy * 0.45 * hw, top + 0.06),
                (0, 0, 1),
                slack=0.08,
            )


def build_tractor(b: Builder, p: dict, col: dict, want: set[str]) -> None:
    """A tractor: big rear wheels, small front wheels, hood, cabin, exhaust pipe."""
    length, hw = p["length"], p["width"] / 2
    rr, fr_r, ww = p["rear_r"], p["front_r"], p["wheel_w"]
    x_rear, x_front = -0.22 * length, 0.33 * length
    hood_w = p["hood_w"] / 2
    z0 = 0.55 * fr_r + 0.25
    b.add(box("chassis", (0.05 * length, 0, z0), (0.38 * length, hood_w * 0.9, 0.18), BLACK * 2))
    hood_x0, hood_x1 = -0.02 * length, 0.45 * length
    hz0, hz1 = z0 + 0.1, z0 + 0.1 + p["hood_h"]
    b.add(
        box(
            "hood",
            ((hood_x0 + hood_x1) / 2, 0, (hz0 + hz1) / 2),
            ((hood_x1 - hood_x0) / 2, hood_w, (hz1 - hz0) / 2),
            col["main"],
            texture=("noise", {"color2": col["main"] * 0.7, "freq": 5.0}),
        )
    )
    cab_x0, cab_x1 = x_rear - 0.3 * rr, x_rear + 0.55 * rr
    cz0, cz1 = z0 + 0.1, z0 + 0.1 + p["cabin_h"] + 0.4
    cab_hw = 0.62 * hw
    b.add(
        box(
            "cabin",
            ((cab_x0 + cab_x1) / 2, 0, (cz0 + cz1) / 2),
            ((cab_x1 - cab_x0) / 2, cab_hw, (cz1 - cz0) / 2),
            col["main"],
            texture=("band", {"axis": 2, "lo": 0.05, "hi": 0.85, "color2": GLASS}),
        )
    )
    b.add(
        box(
            "cabin_roof",
            ((cab_x0 + cab_x1) / 2, 0, cz1 + 0.04),
            ((cab_x1 - cab_x0) / 2 + 0.08, cab_hw + 0.08, 0.04),
            col["second"],
        )
    )
    xs = {"front": x_front, "rear": x_rear}
    rs = {"front": fr_r, "rear": rr}
    track = {"front": hood_w + ww * 1.4, "rear": cab_hw + ww * 1.6}
    _vehicle_wheels(b, xs, rs, track, ww, col)
    light = 0.07
    _lights(b, hood_x1, cab_x0, 0.6 * hood_w, hz0 + 0.65 * (hz1 - hz0), cz0 + 0.3, light, rear_y=0.7 * cab_hw)
    ex, ey = hood_x0 + 0.75 * (hood_x1 - hood_x0), 0.45 * hood_w
    r = p["exhaust_r"]
    pipe = b.add(
        limb("exhaust_pipe", (ex, ey, hz1 - 0.05), (ex, ey, hz1 + p["exhaust_h"]), r, r * 0.9, BLACK * 1.5)
    )
    b.kp("farm_vehicle_exhaustpipe_top_tip", pipe, (ex, ey, hz1 + p["exhaust_h"]), (0, 0, 1), slack=1.5 * r)


def build_vessel(b: Builder, p: dict, col: dict, want: set[str]) -> None:
    """Mug, teapot, kettle, pitcher: body, rim ring, base ring, rear handle, optional front spout and lid."""
    r, h = p["radius"], p["height"]
    base_h, rim_h = 0.05 * h, 0.07 * h
    r_top = r * p["taper"]
    main = col["main"]
    tex = ("band", {"axis": 2, "lo": col["band"][0], "hi": col["band"][1], "color2": col["second"]})
    r_base = r * (0.62 if p["bulge"] > 0 else 1.02)
    base = b.add(limb("base", (0, 0, 0), (0, 0, base_h), r_base, r_base, main * 0.8))
    if p["bulge"] > 0:
        zc = 0.5 * h
        b.add(ellipsoid("body", (0, 0, zc), (r, r, 0.5 * h), main, texture=tex))
        r_rim = r_top * 0.6
        z_rim = zc + 0.5 * h * np.sqrt(max(1 - (r_rim / r) ** 2, 0.05)) - 0.3 * rim_h
    else:
        b.add(limb("body", (0, 0, base_h), (0, 0, h - rim_h), r, r_top, main, texture=tex))
        r_rim = r_top * 1.04
        z_rim = h - rim_h
    rim = b.add(
        limb(
            "rim",
            (0, 0, z_rim),
            (0, 0, z_rim + rim_h),
            r_rim,
            r_rim,
            main * 0.9,
            texture=("hub", {"color2": main * 0.25, "hub": 0.9}),
        )
    )
    zr = z_rim + rim_h / 2
    zb = base_h / 2
    for name, d in (("front", (1, 0, 0)), ("rear", (-1, 0, 0)), ("left", (0, 1, 0)), ("right", (0, -1, 0))):
        b.kp(f"vessel_rim_{name}", rim, (0, 0, zr), d)
        b.kp(f"vessel_base_{name}", base, (0, 0, zb), d)
    # Handle at the rear (-x): two arms and an outer bar.
    hr = p["handle_r"]
    z_hi = min(0.78 * h, z_rim - hr)
    z_lo = max(z_hi - p["handle_h"], 0.15 * h)

    def surface_x(z: float) -> float:
        if p["bulge"] > 0:
            return r * np.sqrt(max(1 - ((z - 0.5 * h) / (0.5 * h)) ** 2, 0.0))
        return r + (r_top - r) * (z - base_h) / (h - rim_h - base_h)

    x_in_hi, x_in_lo = -surface_x(z_hi) + hr, -surface_x(z_lo) + hr
    x_out = -max(surface_x(z_hi), surface_x(z_lo)) - p["handle_out"]
    hc = col["handle"]
    b.add(limb("handle", (x_in_hi, 0, z_hi), (x_out, 0, z_hi), hr, hr, hc))
    b.add(limb("handle", (x_in_lo, 0, z_lo), (x_out, 0, z_lo), hr, hr, hc))
    bar = b.add(limb("handle", (x_out, 0, z_hi + hr), (x_out, 0, z_lo - hr), hr * 1.1, hr * 1.1, hc))
    b.kp("vessel_handle_top", bar, (x_out, 0, z_hi - hr), (-1, 0, 0), slack=1.2 * hr)
    b.kp("vessel_handle_bottom", bar, (x_out, 0, z_lo + hr), (-1, 0, 0), slack=1.2 * hr)
    if "pourer_spout_front_tip" in want:
        rise = np.radians(p["spout_rise"])
        # Long spouts leave the body low; a pitcher's lip sits below the rim, clear of its front point.
        z0 = 0.35 * h if p["bulge"] > 0 or p["spout_len"] > 0.3 else z_rim - 0.22 * h
        x0 = surface_x(z0) * 0.8
        p0 = np.array([x0, 0, z0])
        p1 = p0 + p["spout_len"] * np.array([np.cos(rise), 0, np.sin(rise)])
        rs = max(0.16 * r, 0.05)
        spout = b.add(limb("spout", p0, p1, rs, rs * 0.55, main))
        b.kp("pourer_spout_front_tip", spout, p1, p1 - p0, slack=rs * 0.6)
    if "pourer_lid_top_knob" in want:
        lid_z = z_rim + rim_h
        b.add(ellipsoid("lid", (0, 0, lid_z), (r_rim * 0.95, r_rim * 0.95, 0.12 * h), col["second"]))
        kr = 0.06 * h
        z0 = lid_z + 0.1 * h
        knob = b.add(limb("lid_knob", (0, 0, z0), (0, 0, z0 + 1.4 * kr), kr * 0.6, kr, hc))
        b.kp("pourer_lid_top_knob", knob, (0, 0, z0), (0, 0, 1))


def build_furniture(b: Builder, p: dict, col: dict, want: set[str]) -> None:
    """Chair, bench, stool, table: a top (seat or tabletop), four legs, an optional backrest."""
    hw, hd, zs, t = p["seat_w"] / 2, p["seat_d"] / 2, p["seat_h"], p["seat_t"]
    table = "table_tabletop_front_left_corner" in want
    top_part = "tabletop" if table else "seat"
    wood = ("stripes", {"axis": 0, "freq": 60.0, "duty": 0.6, "color2": col["main"] * 0.82})
    top = b.add(box(top_part, (0, 0, zs - t / 2), (hd, hw, t / 2), col["main"], texture=wood))
    prefix = "table_tabletop" if table else "seat_seat"
    for fr, sx in FR:
        for side, sy in LR:
            b.kp(f"{prefix}_{fr}_{side}_corner", top, (sx * 0.88 * hd, sy * 0.88 * hw, zs), (0, 0, 1))
    lr_ = p["leg_r"]
    inset = 2.2 * lr_
    for fr, sx in FR:
        for side, sy in LR:
            top_pt = (sx * (hd - inset), sy * (hw - inset), zs - t)
            foot = (sx * (hd - inset + p["splay"]), sy * (hw - inset + p["splay"]), 0.0)
            leg = b.add(limb(f"leg_{fr}_{side}", foot, top_pt, lr_ * 0.8, lr_, col["leg"]))
            b.kp(f"furniture_leg_{fr}_{side}_bottom", leg, foot, (0, 0, -1), slack=1.6 * lr_)
    if "chair_backrest_left_top" in want:
        bt = p["back_t"]
        xb = -hd - bt
        top_z = zs + p["back_h"]
        for _, sy in LR:
            b.add(
                limb(
                    "backrest",
                    (xb, sy * (hw - inset), zs - t),
                    (xb, sy * (hw - inset), top_z - 0.1),
                    lr_,
                    lr_,
                    col["leg"],
                )
            )
        panel = b.add(box("backrest", (xb, 0, top_z - 0.1), (bt, hw, 0.1), col["main"], texture=wood))
        for side, sy in LR:
            b.kp(f"chair_backrest_{side}_top", panel, (xb, sy * 0.86 * hw, top_z), (0, 0, 1), slack=bt)


def build_quadruped(b: Builder, p: dict, col: dict, want: set[str]) -> None:
    """Dog, horse, cow, elephant: torso, legs (thigh, shin, paw), neck, head, muzzle, ears, eyes, tail."""
    bl, bw, bh, ll = p["body_len"], p["body_w"], p["body_h"], p["leg_len"]
    fur, tex = col["main"], col["texture"]
    zt = ll + 0.25 * bh
    torso = b.add(ellipsoid("torso", (0, 0, zt), (bl / 2, bw / 2, bh / 2), fur, texture=tex))
    for side, sy in LR:
        b.kp(f"animal_{side}_shoulder", torso, (0.3 * bl, 0, zt + 0.12 * bh), (0, sy, 0))
    lr_ = p["leg_r"]
    for fb, sx in (("front", 1.0), ("back", -1.0)):
        for side, sy in LR:
            x, y = sx * 0.34 * bl, sy * 0.3 * bw
            hip = np.array([x, y, ll + 0.1 * bh])
            knee = np.array([x + (0.03 if fb == "front" else -0.06) * ll, y, 0.45 * ll])
            ankle = np.array([x, y, 0.07 * ll])
            up = b.add(limb(f"upper_leg_{fb}_{side}", hip, knee, lr_ * 1.35, lr_ * 0.95, fur, texture=tex))
            lo = b.add(limb(f"lower_leg_{fb}_{side}", knee, ankle, lr_ * 0.95, lr_ * 0.75, fur, texture=tex))
            paw_c = np.array([x + 0.25 * lr_, y, 0.6 * lr_])
            paw = b.add(ellipsoid(f"paw_{fb}_{side}", paw_c, (lr_ * 1.35, lr_ * 1.0, lr_ * 0.6), col["paw"]))
            thigh_pt = hip + 0.72 * (knee - hip)
            b.kp(f"animal_{side}_{fb}_thigh", up, thigh_pt, (0, sy, 0), slack=lr_)
            b.kp(f"animal_{side}_{fb}_knee", lo, knee + 0.1 * (ankle - knee), (0, sy, 0), slack=lr_)
            b.kp(f"animal_{side}_{fb}_paw", paw, paw_c, (0.5, sy, 0.3), slack=0.5 * lr_)
    na = np.radians(p["neck_angle"])
    n0 = np.array([0.4 * bl, 0, zt + 0.15 * bh])
    n1 = n0 + p["neck_len"] * np.array([np.cos(na), 0, np.sin(na)])
    nr = p["neck_r"]
    neck = b.add(limb("neck", n0, n1, nr, nr * 0.8, fur, texture=tex))
    b.kp("animal_neck", neck, n0 + 0.55 * (n1 - n0), (-np.sin(na), 0, np.cos(na)), slack=0.3 * nr)
    hl_, hw_, hh = p["head_len"], p["head_w"], p["head_h"]
    pitch = np.radians(p["head_pitch"])
    fwd = np.array([np.cos(pitch), 0, -np.sin(pitch)])
    upv = np.array([np.sin(pitch), 0, np.cos(pitch)])
    head_rot = rot_y(pitch)
    hc = n1 + 0.55 * hl_ * fwd + 0.2 * hh * upv
    b.add(ellipsoid("head", hc, (hl_, hw_, hh), fur, rot=head_rot, texture=tex))
    sl, sr = p["snout_len"], p["snout_r"]
    sc = hc + (0.8 * hl_ + 0.6 * sl) * fwd - 0.3 * hh * upv
    muzzle = b.add(ellipsoid("muzzle", sc, (sl + 0.3 * sr, sr, sr * 0.85), col["muzzle"], rot=head_rot))
    tip = sc + (sl + 0.3 * sr) * fwd
    if p["trunk"] > 0:  # the trunk covers the muzzle's front: the mouth opens below it
        b.kp("animal_mouth_mid", muzzle, sc, -upv)
    else:
        b.kp("animal_mouth_mid", muzzle, sc + 0.75 * (sl + 0.3 * sr) * fwd, -upv + 0.6 * fwd)
    for side, sy in LR:
        b.kp(f"animal_{side}_mouth", muzzle, sc + 0.3 * (sl + 0.3 * sr) * fwd - 0.35 * sr * upv, (0, sy, 0))
    if p["trunk"] > 0:
        t0 = tip - 0.15 * sl * fwd + 0.45 * sr * upv
        t1 = np.array([t0[0] + 0.25 * p["trunk"], 0, max(t0[2] - p["trunk"], 0.15 * ll)])
        nose = b.add(limb("nose", t0, t1, 0.8 * sr, 0.45 * sr, fur, texture=tex))
        b.kp("animal_nose", nose, t1, t1 - t0, slack=0.55 * sr)
    else:
        nr_ = 0.38 * sr
        nc = tip - 0.2 * nr_ * fwd + 0.45 * sr * upv
        nose = b.add(ellipsoid("nose", nc, (nr_, nr_ * 1.3, nr_ * 0.8), BLACK * 1.5, rot=head_rot))
        b.kp("animal_nose", nose, nc, fwd + 0.6 * upv)
    er = 0.16 * hw_
    for side, sy in LR:
        u = np.array([0.55, sy * 0.62, 0.4])
        on_local = u / np.sqrt(((u / np.array([hl_, hw_, hh])) ** 2).sum())
        on_head = hc + head_rot @ on_local
        d = head_rot @ (on_local / np.array([hl_, hw_, hh]) ** 2)
        eye = b.add(ellipsoid(f"eye_{side}", on_head, (er, er, er), BLACK))
        b.kp(f"animal_{side}_eye", eye, on_head, d)
        # Ears: upright (dog, horse), sideways (cow) or flat plates (elephant).
        el, ew = p["ear_len"], p["ear_w"]
        if p["ear_up"] > 0:
            base_pt = hc + head_rot @ np.array([-0.35 * hl_, sy * 0.55 * hw_, 0.8 * hh])
            axis = upv + np.array([0, sy * 0.35, 0]) - 0.2 * fwd
        elif p["ear_up"] == 0:
            base_pt = hc + head_rot @ np.array([-0.4 * hl_, sy * 0.85 * hw_, 0.4 * hh])
            axis = np.array([0, sy, 0]) + 0.15 * upv - 0.2 * fwd
        else:
            base_pt = hc + head_rot @ np.array([-0.55 * hl_, sy * 0.8 * hw_, 0.1 * hh])
            axis = np.array([-0.55, sy * 0.75, -0.1])
        axis = axis / np.linalg.norm(axis)
        ear_c = base_pt + 0.5 * el * axis
        thick = 0.25 * ew if p["ear_up"] >= 0 else 0.07 * ew
        lateral = np.cross(axis, [1.0, 0, 0]) if p["ear_up"] < 0 else np.cross(axis, fwd)
        if np.linalg.norm(lateral) < 1e-6:
            lateral = np.array([0, 0, 1.0])
        lateral /= np.linalg.norm(lateral)
        third = np.cross(axis, lateral)
        if p["ear_up"] < 0:
            rot = np.column_stack([lateral, third, axis])
            axes = (ew, thick, el / 2)
        else:
            rot = np.column_stack([third, lateral, axis])
            axes = (thick, ew, el / 2)
        ear = b.add(ellipsoid(f"ear_{side}", ear_c, axes, col["ear"], rot=rot, texture=tex))
        b.kp(
            f"animal_{side}_ear",
            ear,
            ear_c + 0.75 * (el / 2) * axis,
            third if p["ear_up"] >= 0 else -third,
            slack=thick * 1.2,
        )
        if p["horns"] > 0:
            h0 = hc + head_rot @ np.array([-0.2 * hl_, sy * 0.5 * hw_, 0.85 * hh])
            h1 = h0 + 0.9 * hw_ * np.array([0.1, sy * 0.8, 0.6])
            b.add(limb(f"horn_{side}", h0, h1, 0.18 * hw_, 0.05 * hw_, (0.92, 0.9, 0.82)))
        if p["tusks"] > 0:
            t0 = sc + sy * np.array([0, 0.6 * sr, 0])
            t1 = t0 + np.array([0.9 * sr * 3, sy * 0.3 * sr, -0.6 * sr])
            b.add(limb(f"tusk_{side}", t0, t1, 0.3 * sr, 0.1 * sr, (0.95, 0.93, 0.85)))
    # Tail: a straight tapered limb from the rump.
    ta = np.radians(p["tail_angle"])
    t0 = np.array([-0.47 * bl, 0, zt + 0.12 * bh])
    tdir = np.array([-np.cos(ta), 0, np.sin(ta)])
    t1 = t0 + p["tail_len"] * tdir
    t1[2] = max(t1[2], 0.12 * ll)
    tr = p["tail_r"]
    tail = b.add(limb("tail", t0, t1, tr, tr * 0.5, col["tail"], texture=tex))
    perp = np.array([np.sin(ta), 0, np.cos(ta)])  # the tail's upper/outer side
    base_frac = _first_outside(torso, t0, t1)
    b.kp("animal_tail_base", tail, t0 + base_frac * (t1 - t0), perp, slack=tr)
    b.kp("animal_tail_mid", tail, t0 + 0.55 * (t1 - t0), perp, slack=tr)
    b.kp("animal_tail_end", tail, t1, t1 - t0, slack=0.5 * tr)


def _first_outside(prim, a: np.ndarray, bpt: np.ndarray) -> float:
    """The first fraction along segment a->b (plus a small margin) that is outside `prim`."""
    fr = np.linspace(0, 1, 101)
    pts = a + fr[:, None] * (bpt - a)
    out = ~prim.inside(pts)
    idx = int(np.argmax(out)) if out.any() else 50
    return float(min(fr[idx] + 0.08, 0.4))


BUILDERS: dict[str, Callable[[Builder, dict, dict, set[str]], None]] = {
    "car": partial(build_road_vehicle, style="car"),
    "bus": partial(build_road_vehicle, style="bus"),
    "ambulance": partial(build_road_vehicle, style="van"),  # a van with a tall box
    "tractor": build_tractor,
    "mug": build_vessel,
    "teapot": build_vessel,
    "kettle": build_vessel,
    "pitcher": build_vessel,
    "chair": build_furniture,
    "bench": build_furniture,
    "stool": build_furniture,
    "dining_table": build_furniture,
    "dog": build_quadruped,
    "horse": build_quadruped,
    "cow": build_quadruped,
    "elephant": build_quadruped,
}
