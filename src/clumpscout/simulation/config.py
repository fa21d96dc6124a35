"""The ``simulate:`` config section of the simulated universe: every knob with its default,
its validation, the random streams, and small numerical helpers shared by the stages.

The generative model each knob belongs to is documented in :mod:`clumpscout.simulation.universe`.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import norm

from clumpscout import config as _schema
from clumpscout.errors import InputError

# --------------------------------------------------------------------------- constants

#: the samples of §2.1, in ``sample_counts`` order
SAMPLES = ("primary", "secondary", "simulated-clumps")
NATIVE_SCALE = 0.396  # arcsec per native SDSS pixel (decisions.md#cutout-side)
IMAGE_SIZE = 400  # subject image side after resizing (px)
MIN_SIDE = 40  # minimum cutout side (native px, decisions.md#cutout-side)
R90_FACTOR = 6.0  # cutout side = 6 R90 (decisions.md#cutout-side)
MIN_R90 = 3.0  # GZ2 sample selection: petroR90_r >= 3 arcsec
LAUNCH_DAYS = 7.0  # e-folding time of the launch burst of arrivals
EXPERT_USER_ID0 = 90000001  # experts' made-up user ids
#: number formats of galaxies.csv (R90 and PSF are stored rounded to 4 decimals)
GALAXY_FORMATS = {
    "ra": ".6f",
    "dec": ".6f",
    "z": ".5f",
    "petroR90_r": ".4f",
    "psffwhm_r": ".4f",
    "axis_ratio": ".4f",
    "position_angle": ".2f",
    "bulge_fraction": ".4f",
    "x_centre": ".3f",
    "y_centre": ".3f",
}

#: every knob of the ``simulate:`` config section with its default (from the config schema,
#: clumpscout.config; what each knob means: the clumpscout.simulation.universe docstring)
DEFAULTS: dict[str, Any] = _schema.defaults("simulate")
#: values of ``kind``
KINDS = ("galaxy", "counting")

#: keys whose value must lie in [0, 1]
_FRACTIONS = {
    "psf_tail_fraction",
    "bulge_visible_min",
    "clumpy_primary",
    "clumpy_secondary",
    "clumpy_simulated",
    "clump_outer_fraction",
    "unusual_fraction",
    "heavy_fraction",
    "heavy_max_fraction",
    "not_logged_in_fraction",
    "launch_fraction",
    "p_bulge_t0_mean",
    "p_bulge_t1_mean",
    "p_double_mean",
    "p_unusual_hit_mean",
    "p_unusual_false_mean",
    "p_star_mean",
    "p_skip_mean",
    "spammer_fraction",
    "spammer_hit_scale",
}
#: keys that may be negative
_SIGNED = {
    "threshold_mean",
    "expert_threshold",
    "expert_faint_boost",
    "unusual_radial_slope",
    "visibility_contrast_ref",
    "clump_contrast_mean",
    "faint_contrast_mean",
}

#: the random streams (one SeedSequence child each, so stages do not perturb each other)
_STREAMS = (
    "galaxies",
    "clumps",
    "distractors",
    "volunteers",
    "schedule",
    "clicks",
    "experts",
    "expert_clicks",
    "export",
    "spammers",
)

# --------------------------------------------------------------------------- config


#: every key of the ``simulate.counting`` section with its default (from the config schema)
COUNTING_DEFAULTS: dict[str, Any] = _schema.defaults("simulate")["counting"]
_COUNTING_FRACTIONS = {"group_fraction", "p_mark_mean", "p_empty_mean", "expert_p_mark"}
_COUNTING_POSITIVE = {"image_width", "image_height", "volunteers_min", "skill_concentration"}


def resolve_counting(cfg: dict | None, path: object = None) -> dict:
    """The ``simulate.counting`` section merged over :data:`COUNTING_DEFAULTS`, checked."""
    if cfg is None:
        cfg = {}
    if not isinstance(cfg, dict):
        raise InputError(f"simulate.counting must be a mapping, got {cfg!r}", path=path)
    unknown = sorted(set(cfg) - set(COUNTING_DEFAULTS))
    if unknown:
        raise InputError(f"unknown simulate.counting key(s): {', '.join(unknown)}", path=path)
    out = dict(COUNTING_DEFAULTS)
    for key, value in cfg.items():
        out[key] = _coerce_counting(key, value, path)
    _check_counting(out, path)
    return out


def _coerce_counting(key: str, value: Any, path: object) -> int | float:
    bad = InputError(f"simulate.counting.{key}: bad value {value!r}", path=path)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad
    if isinstance(COUNTING_DEFAULTS[key], int):
        if int(value) != value:
            raise bad
        return int(value)
    return float(value)


def _check_counting(c: dict, path: object) -> None:
    def fail(what: str) -> None:
        raise InputError(f"simulate.counting.{what}", path=path)

    for key, value in c.items():
        if value < 0:
            fail(f"{key} must be >= 0, got {value}")
        if key in _COUNTING_FRACTIONS and value > 1:
            fail(f"{key} must be in [0, 1], got {value}")
        if key in _COUNTING_POSITIVE and value <= 0:
            fail(f"{key} must be > 0")
    if c["objects_min"] > c["objects_max"]:
        fail("objects_min must be <= objects_max")
    if c["volunteers_min"] > c["volunteers_max"]:
        fail("volunteers_min must be <= volunteers_max")
    if 2 * c["edge_margin_px"] >= min(c["image_width"], c["image_height"]):
        fail("edge_margin_px leaves no room in the image")


def resolve_config(cfg: dict | None, path: object = None) -> dict:
    """The ``simulate:`` section merged over :data:`DEFAULTS`, type-checked.

    Unknown keys and out-of-range values raise :class:`InputError` naming ``path``.
    """
    cfg = dict(cfg or {})
    unknown = sorted(set(cfg) - set(DEFAULTS))
    if unknown:
        raise InputError(f"unknown simulate key(s): {', '.join(unknown)}", path=path)
    out = dict(DEFAULTS)
    for key, value in cfg.items():
        default = DEFAULTS[key]
        try:
            if isinstance(default, bool):
                if not isinstance(value, bool):
                    raise TypeError
            elif isinstance(default, int):
                if isinstance(value, bool) or int(value) != value:
                    raise TypeError
                value = int(value)
            elif isinstance(default, float):
                if isinstance(value, bool):
                    raise TypeError
                value = float(value)
            elif isinstance(default, list):
                value = [int(v) for v in value]
                if len(value) != 3 or min(value) < 0 or sum(value) <= 0:
                    raise ValueError
            elif isinstance(default, str):
                value = str(value)
            elif isinstance(default, dict):
                value = resolve_counting(value, path)
        except (TypeError, ValueError):
            raise InputError(f"simulate.{key}: bad value {value!r}", path=path) from None
        out[key] = value
    for key, value in out.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if key in _FRACTIONS and not 0.0 <= value <= 1.0:
            raise InputError(f"simulate.{key} must be in [0, 1], got {value}", path=path)
        if key not in _SIGNED and value < 0:
            raise InputError(f"simulate.{key} must be >= 0, got {value}", path=path)
    out["counting"] = dict(out["counting"])  # never share the defaults' mapping
    if out["kind"] not in KINDS:
        raise InputError(
            f"simulate.kind must be one of {', '.join(KINDS)}, got {out['kind']!r}", path=path
        )
    if out["n_subjects"] < 1:
        raise InputError("simulate.n_subjects must be >= 1", path=path)
    if out["volunteers_per_subject"] < 1:
        raise InputError("simulate.volunteers_per_subject must be >= 1", path=path)
    positive = (
        "psf_fwhm_px_median", "clumpy_fwhm_peak", "clumpy_fwhm_width", "duration_days", "z_median",
        "r90_kpc_median", "activity_median", "heavy_max_fraction", "clump_radius_shape",
        "clump_radius_scale", "visibility_softness", "seconds_per_classification",
        "skill_concentration", "faint_radius_shape", "faint_radius_scale",
    )  # fmt: skip
    for key in positive:
        if out[key] <= 0:
            raise InputError(f"simulate.{key} must be > 0", path=path)
    try:
        pd.Timestamp(out["start_date"])
    except ValueError:
        raise InputError(
            f"simulate.start_date: bad date {out['start_date']!r}", path=path
        ) from None
    return out


def stage_seed(master_seed: int, stage: str = "simulate") -> int:
    """The workflow's per-stage seed (same formula as ``seed_for`` in common.smk)."""
    h = hashlib.sha256(f"{master_seed}:{stage}".encode()).hexdigest()
    return int(h[:8], 16)


def random_streams(seed: int) -> dict[str, np.random.Generator]:
    children = np.random.SeedSequence(int(seed)).spawn(len(_STREAMS))
    return {name: np.random.default_rng(s) for name, s in zip(_STREAMS, children, strict=True)}


# --------------------------------------------------------------------------- small helpers


def trunc_lognormal(rng, n, median, sigma, lo, hi):
    """Lognormal(median, sigma) truncated to [lo, hi] by inverse-CDF sampling."""
    if sigma <= 0:
        return np.clip(np.full(n, float(median)), lo, hi)
    a, b = norm.cdf((np.log([lo, hi]) - np.log(median)) / sigma)
    u = rng.uniform(a, b, n)
    return np.exp(np.log(median) + sigma * norm.ppf(u))


def beta_draws(rng, mean, concentration, n):
    """Beta draws with the given mean and concentration a + b (degenerate at 0 or 1)."""
    if mean <= 0.0 or mean >= 1.0 or concentration <= 0:
        return np.full(n, float(mean))
    return rng.beta(mean * concentration, (1.0 - mean) * concentration, n)


def mag_to_nmgy(mag):
    """AB magnitude -> nanomaggies."""
    return 10.0 ** (-0.4 * (np.asarray(mag) - 22.5))


def largest_remainder(total: int, weights) -> np.ndarray:
    w = np.asarray(weights, dtype=float)
    raw = total * w / w.sum()
    out = np.floor(raw).astype(np.int64)
    rest = total - int(out.sum())
    order = np.argsort(-(raw - out), kind="stable")
    out[order[:rest]] += 1
    return out


def cutout_geometry(petro_r90_arcsec, psf_fwhm_arcsec):
    """Cutout side (native px), subject scale and FWHM in subject px (decisions.md#cutout-side, #psf-fwhm).

    ``side = max(ceil(6 R90 / 0.396"), 40)``; one subject pixel spans
    ``side / 400`` native pixels; ``FWHM_subject = FWHM" / 0.396 x 400 / side``.
    Returns (side, fwhm_subject, r90_subject).
    """
    r90 = np.asarray(petro_r90_arcsec, dtype=float)
    side = np.maximum(np.ceil(R90_FACTOR * r90 / NATIVE_SCALE), MIN_SIDE)
    per_native = IMAGE_SIZE / side
    fwhm_sub = np.asarray(psf_fwhm_arcsec, dtype=float) / NATIVE_SCALE * per_native
    return side.astype(np.int64), fwhm_sub, r90 / NATIVE_SCALE * per_native


def csr_offsets(counts: np.ndarray) -> np.ndarray:
    ptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr


def local_index(counts: np.ndarray) -> np.ndarray:
    """0..c-1 for each group of a CSR layout with group sizes ``counts``."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    starts = np.repeat(csr_offsets(counts)[:-1], counts)
    return np.arange(total, dtype=np.int64) - starts
