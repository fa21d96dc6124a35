"""A seeded, simulated Galaxy Zoo: Clump Scout universe, written as a Zooniverse export.

``clumpscout simulate --config FILE --out DIR [--seed N]`` and
:func:`simulate_universe` draw galaxies, their true clumps and distractors, a
volunteer cohort with heavy-tailed activity and individual skills, the order in
which the Zooniverse front end serves subjects to volunteers, every click, and
three experts; they write (contract 1 of the team brief)

* ``classifications.csv``: a Zooniverse classification export (workflow 11803
  "Clump Scout", version 64.136; task T0 = bulge, T1 = clumps with tool 0
  "Normal clump" and tool 1 "Unusual clump"), same columns and JSON shapes as a
  real export (see :mod:`clumpscout.simulation.export`);
* ``subjects_export.csv``: the matching Zooniverse subject export;
* ``expert_classifications.csv``: the experts' classifications, same format,
  ``expert`` column = ``expert``;
* ``galaxies.csv``: the catalogue (subject_id, ra, dec, z, petroR90_r [arcsec],
  psffwhm_r [arcsec], sample) plus galaxy shape/flux columns;
* ``truth_clumps.csv`` (real clumps only), ``truth_distractors.csv`` (faint
  features, foreground stars, the bulge: things volunteers may mark in T1);
* ``truth_objects.csv``: every real object a volunteer may mark in T1, one row
  each (subject_id, object = index within the subject, kind = clump |
  faint_feature | star | bulge, x, y, unusual, clump / distractor = its index
  in the two tables above or -1, flux_g/r/i, n_viewers = volunteer
  classifications of the subject, n_marked = those that clicked the object), so
  that labels can be scored against the clumps and against any real object;
* ``volunteers_truth.csv``: every volunteer's (and expert's) skills and activity;
* ``truth_clicks.parquet`` (``write_click_truth``): the origin of every click;
* ``simulate_report.json``: realised totals and every count of things dropped.

The same config and seed give byte-identical files. ``kind: counting`` draws a
point-marking project without galaxies instead, written as the same files
(:mod:`clumpscout.simulation.counting`). All sizes are in subject
pixels of the 400 x 400 subject image (x right, y down, origin at the top-left
corner) unless said otherwise; magnitudes are AB, fluxes nanomaggies
(``flux = 10 ** (-0.4 (m - 22.5))``).

Generative model (every number below is a key of the ``simulate:`` config
section, default in brackets; config.yaml comments each key)
---------------------------------------------------------------------------

**Galaxies** (paper §2.1-2.2). ``n_subjects`` [1500] galaxies split between the
samples primary / secondary / simulated-clumps in the proportions
``sample_counts`` [53,613 / 4,937 / 26,736] (largest-remainder rounding, so the
paper-scale run has exactly the paper's numbers). Redshift: primary and
simulated-clumps lognormal, median ``z_median`` [0.07], log-width ``z_sigma``
[0.35], truncated to 0.02-0.25; secondary p(z) ~ z^2 on 0.02-0.075 (the
paper's ranges). Physical R90 lognormal, median ``r90_kpc_median`` [8.6 kpc],
log-width ``r90_kpc_sigma`` [0.25], redrawn until petroR90_r = R90 / D_A(z) is
at least 3" (the GZ2 sample limit; flat LambdaCDM, H0 = 70, Om0 = 0.3). PSF
FWHM in native 0.396" pixels: a lognormal core (median ``psf_fwhm_px_median``
[2.8], log-width ``psf_fwhm_px_sigma`` [0.22]) truncated to 1.5-7.5 px, except
``psf_tail_fraction`` [1%] of galaxies log-uniform between 7.5 px and
``psf_tail_max_px`` [18] (§2.2: 1.5-7.5 px for 99%, median ~2.8, a 1% tail to
~18); psffwhm_r = FWHM_px x 0.396". With the cutout side max(ceil(6 R90 /
0.396"), 40) native px (decisions.md#cutout-side) the subject-pixel FWHM F (decisions.md#psf-fwhm) has median
~11.3 and range ~1.6 to ~140 at paper scale (§2.2: ~1 to ~70, median ~11; the
few above 70 are tail-PSF galaxies near the 3" limit). Sky positions uniform on
the sphere in 110 < ra < 260, -5 < dec < 70. Galaxy r magnitude from Euclidean
counts (p ~ 10^(0.6 m)) on 13-17.7; g-r, r-i normal (redder for the
secondary sample); axis ratio q = sqrt(0.96 cos^2 i + 0.04) for random
orientations (secondary: uniform 0.5-1); position angle uniform; bulge-to-total
Beta(1.5, 4) (secondary Beta(5, 2.5)); the bulge is visible when B/T >=
``bulge_visible_min`` [0.08]. Galaxies are centred in their cutouts (to ~0.5 px).
Extra columns of galaxies.csv: galaxy flux_g/r/i, axis_ratio, position_angle
(deg), bulge_fraction, bulge_visible, x_centre, y_centre (subject px).

**True clumps.** A galaxy has clumps with probability ``clumpy_<sample>``
[primary 1.0, secondary 0.15, simulated-clumps 1.0] x a resolution window
exp(-(ln(F / ``clumpy_fwhm_peak``) / ``clumpy_fwhm_width``)^2 / 2) [6.6 px,
0.43] x an inclination factor clip((q - 0.2) / 0.2, 0, 1). The window is what
the consensus boxes demand: their sides 2F run ~7-32 px with median ~16.6
while all subjects have median 2F ~ 22, i.e. clumps are found in
well-resolved galaxies; it makes ~35% of galaxies clumpy (the paper's 52% of
galaxies with an aggregated clump include false positives). A clumpy galaxy has
1 + NB clumps, negative binomial with mean ``clumps_extra_mean`` x
(F / ``clumpy_fwhm_peak``)^-``clumps_resolution_slope`` [1.6, 0.7] and shape
``clumps_dispersion`` [20], at most ``clumps_max`` [12] (consensus: 1-9 per
clumpy subject, median 2, mean 2.3, falling from 2.9 to 1.9 from the best- to
the worst-resolved fifth). Positions: disc radius u R90 with u ~
Gamma(``clump_radius_shape``, ``clump_radius_scale``) [10, 0.097] (a fraction
``clump_outer_fraction`` [3%] uniform in u = 1.3-2.6), random azimuth,
projected with the galaxy's axis ratio and position angle; R90 in subject px =
R90 / 0.396" x 400 / side (~67 px). A clump closer than
``clump_min_separation`` [1.0] F to another clump or to the visible bulge, or
outside the image, is redrawn (20 rounds, then dropped and counted). Unusual
with probability ``unusual_fraction`` + ``unusual_radial_slope`` (u - 1)
[0.28, 0.12] (odd clumps are more frequent in the outskirts, as in the
consensus boxes). Brightness: Delta ~ N(``clump_contrast_mean``,
``clump_contrast_sd``) [4.5, 0.9] mag fainter than the galaxy (unusual 0.4 mag
brighter); g-r ~ N(0.25, 0.2), r-i ~ N(0.05, 0.1) (blue star-forming
clumps), unusual g-r ~ N(0.7, 0.25), r-i ~ N(0.3, 0.15).

**Distractors** (``truth_distractors.csv``, kind = faint_feature | star |
bulge): faint features, Poisson mean ``faint_features_mean`` [0.5] per primary /
simulated-clumps galaxy and ``faint_features_secondary`` [0.15] per secondary one
(x 1.5 in clumpy galaxies), placed like clumps but wider (u ~ Gamma(4, 0.3)),
Delta ~ N(``faint_contrast_mean``, ``faint_contrast_sd``) [7.3, 0.5] (~10x
fainter than clumps: the paper's empirical false positives are 5-10x fainter,
§6.3) and blue (g-r ~ N(0.0, 0.15)); foreground stars, Poisson
``stars_mean`` [0.4] per subject, uniform over the image, r = 14-21.5, red
(g-r ~ N(0.9, 0.35)); the visible bulge (at the centre, flux = B/T x galaxy).

**Visibility.** A clump or faint feature has v = (``visibility_contrast_ref`` -
Delta) + ``visibility_colour_weight`` (0.3 - (g - r)) [4.5, 0.8]: brighter
relative to its galaxy and bluer is easier to see (§6.3: empirically true
clumps are brighter and bluer). Volunteer j marks it with probability
expit((v - theta_j [+ phi_j for a faint feature]) / ``visibility_softness``)
[0.35]: theta_j is their detection threshold, phi_j their tendency to take
faint blue features for clumps. With the defaults a volunteer marks ~79% of
real clumps and ~69% of faint features; 96% of clumps and 99.9% of faint
features get 5 or more marks from 20 volunteers (89% / 93%: 10 or more).

*Calibration (why volunteers agree so much).* §6.3's story is that the
volunteers' consensus disagrees with the experts mainly on faint blue features
that many volunteers marked and experts did not (paper at n = 20: completeness
≈ 0.97 and purity ≈ 0.35 against the experts), not on random clicks. The
paper's priors (p0_fp = 0.1) say the same: about one box in ten is spurious.
An earlier calibration filled the same click total with random spurious
clicks (31% of clump clicks) and faint features marked by ~6% of volunteers;
about half of all boxes then belonged to no consensus feature, the volunteers'
learned p_fp rose towards 0.5 and, once the committed volunteers' counts
outweigh the nβ_fp = 500 prior (paper scale), the model's likelihood preferred
putting every box on the dummy facility (1,857 label clumps for 85,286
subjects). With the defaults above (spurious median 0.05, faint boost 2.8 mag,
0.5 faint features per galaxy, threshold -1.0, scatter 0.12 FWHM) the
paper-scale universe has 3.67M clicks (paper 3.56M) and the paper's priors give
~109k label clumps at n = 20 (paper 128,100), ~0.96 / 0.54 completeness /
purity against the experts.

**Volunteers.** Subjects per volunteer: casual volunteers ceil(X), X lognormal
with median ``activity_median`` [2.6] and log-width ``activity_sigma`` [0.65];
a fraction ``heavy_fraction`` [1.56%] of committed volunteers with
p(n) ~ n^-(1 + ``heavy_alpha``) [0: log-uniform] between ``heavy_min`` [10] and
``heavy_max_fraction`` [0.5] x the number of subjects. The cohort size is the
number of classification slots / the model's mean (so it scales with the
project), and committed volunteers' counts are rescaled so that the plan fills
the slots exactly. At paper scale: ~20.9k volunteers, median 3, ~95.5% below
10, ~210 above 200 (the paper: 20,999, median 3, 19,859 below 10, 176 above 200).
Volunteers who are not logged in bring ``not_logged_in_fraction`` [20%] of the
classifications (systematic sampling over activity ranks, so the share holds
at any scale); each is a distinct "not-logged-in-<ip hash>" with no user_id.
Skills, independent per volunteer: theta_j ~ N(``threshold_mean``,
``threshold_sd``) [-1.0, 0.5]; phi_j ~ Gamma(``faint_boost_shape``,
``faint_boost_mean`` / shape) [2, 2.8 mag]; spurious clicks ~ Poisson(lambda_j)
per classification, lambda_j lognormal (median ``spurious_median`` [0.05],
log-width ``spurious_sigma`` [0.8], at most 5), 70% on the galaxy, 30%
anywhere; positional scatter per axis sqrt((s_j F)^2 +
``scatter_floor_px``^2), s_j lognormal (median ``scatter_median`` [0.12 FWHM],
log-width ``scatter_sigma`` [0.4]); and Beta-distributed probabilities (mean as
given, a + b = ``skill_concentration`` [15]): marking the bulge in T0
``p_bulge_t0_mean`` [0.96] (without a visible bulge 0.3 x that, 3x less
precise), also marking it as a clump in T1 ``p_bulge_t1_mean`` [0.07], doubling
a click ``p_double_mean`` [0.03] (a second click 0.1-1.5 F away, i.e. within
2 FWHM, same tool, right after the first), the unusual tool for an unusual
clump ``p_unusual_hit_mean`` [0.6] and for anything else
``p_unusual_false_mean`` [0.08] (stars 0.5), marking a foreground star
``p_star_mean`` [0.04], marking nothing in T1 ``p_skip_mean`` [0.05].

*Spammers* (off by default). A share ``spammer_fraction`` [0] of the cohort
are spammers, the same share at every activity level (so some of the most
active volunteers too; see :func:`assign_spammers`): they make
Poisson(``spammer_spurious_mean``) [4] spurious clicks per classification and
mark each real object with ``spammer_hit_scale`` [0.5] x their usual
probability, so ~90% of their clump clicks are spurious. Late volunteers and
experts are never spammers. volunteers_truth.csv then has the columns
``spammer`` and ``hit_scale``.

**Who sees what, and when.** Each subject needs ``volunteers_per_subject`` +
Poisson(``extra_classifications_mean``) classifications [20, 0.4] (paper:
1,739,259 / 85,286 = 20.39). The project runs ``duration_days`` [420] from
``start_date`` [2019-10-01]. A volunteer arrives at a uniform time (a fraction
``launch_fraction`` [0.3] in an exponential launch burst of 7 days) and
classifies in sessions of 1 + Poisson(``session_mean`` - 1) [25] subjects,
lognormal gaps of median ``seconds_per_classification`` [30 s]; later sessions
start uniformly within a span of Beta(2, 1) x the rest of the project, but at
least n / (half the rate at which subjects flow through the project) (nobody
can see distinct subjects faster than they arrive; the arrival moves earlier if
needed). The Zooniverse front end is then replayed in time order (a numba
kernel): ``active_subjects`` [1000] unretired subjects are served; each
classification takes a random active subject the volunteer has not seen; a
subject retires when it has its classifications and the next subject of a
random permutation takes its place. A planned classification that finds no
unseen subject does not happen (counted); newly arriving casual volunteers
(``late`` in volunteers_truth.csv) then finish the subjects still short, in the
3 days after the last planned classification. No volunteer classifies a subject
twice. Within a classification: the T0 bulge click first, then the T1 clicks in
random order. Classification ids increase with time; created_at is the end of
the classification, metadata started_at its start.

**Experts.** ``n_experts`` [3] experts (user_name expert_1..3) classify the
same ``n_expert_subjects`` [150] random subjects (the paper: 1,000) in the last
40% of the project, with the click model above and fixed skills: threshold
``expert_threshold`` [-0.5] (+-0.1 between experts; they find ~69% of the true clumps),
faint boost ``expert_faint_boost`` [-1.0] (they ignore faint blue features,
§6.3), scatter ``expert_scatter`` [0.08 FWHM]; no spurious, double, star or T1
bulge clicks and no skipping; unusual tool 0.85 / 0.05; a visible bulge always.

**Totals.** The paper's 3,561,454 "click locations" for 1,739,259
classifications are taken to be all clicks of the export, the T0 bulge clicks
included: 2.05 per classification, i.e. ~0.9 bulge click plus ~1.15 clump
clicks. (Clump clicks alone would need 2.05 T1 clicks per classification, or
~40 per subject, more than the 128,100 clumps found in 85,286 subjects can
carry.) resources/paper_scale.yaml realises ~1.74M classifications and, with
the workflow's seed, 3.67M clicks (2.11 per classification: 0.87 bulge click,
0.68 on true clumps, 0.40 on faint features, 0.15 on bulges, stars and
spurious spots; 3% above the paper); see simulate_report.json.

Random streams: one ``numpy.random.SeedSequence(seed)`` child per stage
(galaxies, clumps, distractors, volunteers, schedule, clicks, experts, expert
clicks, export, spammers), so changing one stage's knobs does not reshuffle the
others.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import math
from pathlib import Path
from typing import Any

import numba
import numpy as np
import pandas as pd
from scipy.special import expit
from scipy.stats import norm

from clumpscout.errors import InputError
from clumpscout.logs import timed
from clumpscout.simulation.counting import COUNTING_DEFAULTS, resolve_counting

log = logging.getLogger("clumpscout.simulation.universe")

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

#: every knob of the ``simulate:`` config section with its default
DEFAULTS: dict[str, Any] = {
    "n_subjects": 1500,
    "sample_counts": [53613, 4937, 26736],
    "n_experts": 3,
    "n_expert_subjects": 150,
    "volunteers_per_subject": 20,
    "extra_classifications_mean": 0.4,
    # galaxies
    "z_median": 0.07,
    "z_sigma": 0.35,
    "r90_kpc_median": 8.6,
    "r90_kpc_sigma": 0.25,
    "psf_fwhm_px_median": 2.8,
    "psf_fwhm_px_sigma": 0.22,
    "psf_tail_fraction": 0.01,
    "psf_tail_max_px": 18.0,
    "bulge_visible_min": 0.08,
    # clumps
    "clumpy_primary": 1.0,
    "clumpy_secondary": 0.15,
    "clumpy_simulated": 1.0,
    "clumpy_fwhm_peak": 6.6,
    "clumpy_fwhm_width": 0.43,
    "clumps_extra_mean": 1.6,
    "clumps_dispersion": 20.0,
    "clumps_resolution_slope": 0.7,
    "clumps_max": 12,
    "clump_radius_shape": 10.0,
    "clump_radius_scale": 0.097,
    "clump_outer_fraction": 0.03,
    "clump_min_separation": 1.0,
    "unusual_fraction": 0.28,
    "unusual_radial_slope": 0.12,
    "clump_contrast_mean": 4.5,
    "clump_contrast_sd": 0.9,
    # distractors
    "faint_features_mean": 0.5,
    "faint_features_secondary": 0.15,
    "faint_follow_resolution": True,
    "faint_radius_shape": 4.0,
    "faint_radius_scale": 0.3,
    "faint_contrast_mean": 7.3,
    "faint_contrast_sd": 0.5,
    "stars_mean": 0.4,
    # visibility
    "visibility_contrast_ref": 4.5,
    "visibility_colour_weight": 0.8,
    "visibility_softness": 0.35,
    # volunteer activity
    "activity_median": 2.6,
    "activity_sigma": 0.65,
    "heavy_fraction": 0.0156,
    "heavy_alpha": 0.0,
    "heavy_min": 10,
    "heavy_max_fraction": 0.5,
    "not_logged_in_fraction": 0.2,
    # volunteer skills
    "threshold_mean": -1.0,
    "threshold_sd": 0.5,
    "faint_boost_mean": 2.8,
    "faint_boost_shape": 2.0,
    "spurious_median": 0.05,
    "spurious_sigma": 0.8,
    "scatter_median": 0.12,
    "scatter_sigma": 0.4,
    "scatter_floor_px": 0.7,
    "skill_concentration": 15.0,
    "p_bulge_t0_mean": 0.96,
    "p_bulge_t1_mean": 0.07,
    "p_double_mean": 0.03,
    "p_unusual_hit_mean": 0.6,
    "p_unusual_false_mean": 0.08,
    "p_star_mean": 0.04,
    "p_skip_mean": 0.05,
    # experts
    "expert_threshold": -0.5,
    "expert_faint_boost": -1.0,
    "expert_scatter": 0.08,
    # time line and subject queue
    "start_date": "2019-10-01",
    "duration_days": 420.0,
    "launch_fraction": 0.3,
    "session_mean": 25.0,
    "seconds_per_classification": 30.0,
    "active_subjects": 1000,
    # output
    "write_click_truth": True,
    # spammers (0 = none)
    "spammer_fraction": 0.0,
    "spammer_spurious_mean": 4.0,
    "spammer_hit_scale": 0.5,
    # what kind of project: galaxy (Clump Scout) | counting (clumpscout.simulation.counting)
    "kind": "galaxy",
    "counting": COUNTING_DEFAULTS,
}
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


def _streams(seed: int) -> dict[str, np.random.Generator]:
    children = np.random.SeedSequence(int(seed)).spawn(len(_STREAMS))
    return {name: np.random.default_rng(s) for name, s in zip(_STREAMS, children, strict=True)}


# --------------------------------------------------------------------------- small helpers


def _trunc_lognormal(rng, n, median, sigma, lo, hi):
    """Lognormal(median, sigma) truncated to [lo, hi] by inverse-CDF sampling."""
    if sigma <= 0:
        return np.clip(np.full(n, float(median)), lo, hi)
    a, b = norm.cdf((np.log([lo, hi]) - np.log(median)) / sigma)
    u = rng.uniform(a, b, n)
    return np.exp(np.log(median) + sigma * norm.ppf(u))


def _beta(rng, mean, concentration, n):
    """Beta draws with the given mean and concentration a + b (degenerate at 0 or 1)."""
    if mean <= 0.0 or mean >= 1.0 or concentration <= 0:
        return np.full(n, float(mean))
    return rng.beta(mean * concentration, (1.0 - mean) * concentration, n)


def _flux(mag):
    """AB magnitude -> nanomaggies."""
    return 10.0 ** (-0.4 * (np.asarray(mag) - 22.5))


def _largest_remainder(total: int, weights) -> np.ndarray:
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


def _csr(counts: np.ndarray) -> np.ndarray:
    ptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr


def _local_index(counts: np.ndarray) -> np.ndarray:
    """0..c-1 for each group of a CSR layout with group sizes ``counts``."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    starts = np.repeat(_csr(counts)[:-1], counts)
    return np.arange(total, dtype=np.int64) - starts


# --------------------------------------------------------------------------- galaxies


def angular_diameter_distance_kpc(z, h0: float = 70.0, om0: float = 0.3) -> np.ndarray:
    """Angular diameter distance (kpc) in a flat LambdaCDM cosmology (no radiation).

    D_A = c / H0 / (1 + z) * int_0^z dz' / sqrt(Om0 (1 + z')^3 + 1 - Om0), by the
    trapezoidal rule on a fine grid (agrees with astropy's FlatLambdaCDM to 1e-6).
    """
    from scipy.integrate import cumulative_trapezoid

    z = np.asarray(z, dtype=float)
    grid = np.linspace(0.0, max(float(z.max(initial=0.0)), 1e-6), 4001)
    inv_e = 1.0 / np.sqrt(om0 * (1.0 + grid) ** 3 + 1.0 - om0)
    dc = cumulative_trapezoid(inv_e, grid, initial=0.0) * 299792.458 / h0 * 1000.0
    return np.interp(z, grid, dc) / (1.0 + z)


def make_galaxies(p: dict, rng: np.random.Generator) -> pd.DataFrame:
    """The galaxy catalogue (§2.1-2.2); see the module docstring for the model."""
    n = p["n_subjects"]
    counts = _largest_remainder(n, p["sample_counts"])
    sample_idx = np.repeat(np.arange(3), counts)
    secondary = sample_idx == 1

    z = _trunc_lognormal(rng, n, p["z_median"], p["z_sigma"], 0.02, 0.25)
    n2 = int(secondary.sum())
    a3, b3 = 0.02**3, 0.075**3
    z[secondary] = np.cbrt(a3 + rng.random(n2) * (b3 - a3))

    zg = np.linspace(0.0, 0.26, 1041)
    da_kpc = angular_diameter_distance_kpc(zg)
    kpc_per_arcsec = np.interp(z, zg, da_kpc) / 206264.806
    r90 = np.zeros(n)
    todo = np.arange(n)
    for _ in range(100):  # GZ2 selection: petroR90_r >= 3" (redraw the physical size)
        r_kpc = np.exp(
            np.log(p["r90_kpc_median"]) + p["r90_kpc_sigma"] * rng.standard_normal(len(todo))
        )
        r90[todo] = r_kpc / kpc_per_arcsec[todo]
        todo = todo[r90[todo] < MIN_R90]
        if len(todo) == 0:
            break
    r90 = np.round(np.maximum(r90, MIN_R90), 4)

    psf_px = _trunc_lognormal(rng, n, p["psf_fwhm_px_median"], p["psf_fwhm_px_sigma"], 1.5, 7.5)
    tail = rng.random(n) < p["psf_tail_fraction"]
    hi = max(p["psf_tail_max_px"], 7.5)
    psf_px[tail] = np.exp(rng.uniform(np.log(7.5), np.log(hi), int(tail.sum())))
    psf = np.round(psf_px * NATIVE_SCALE, 4)

    ra = rng.uniform(110.0, 260.0, n)
    s0, s1 = np.sin(np.radians([-5.0, 70.0]))
    dec = np.degrees(np.arcsin(rng.uniform(s0, s1, n)))

    # r magnitude from Euclidean counts on [13, 17.7]
    e0, e1 = 10 ** (0.6 * 13.0), 10 ** (0.6 * 17.7)
    mag_r = np.log10(e0 + rng.random(n) * (e1 - e0)) / 0.6
    g_r = np.where(
        secondary, 0.75 + 0.08 * rng.standard_normal(n), 0.55 + 0.15 * rng.standard_normal(n)
    )
    r_i = np.where(
        secondary, 0.40 + 0.05 * rng.standard_normal(n), 0.30 + 0.08 * rng.standard_normal(n)
    )
    cos_i = rng.random(n)
    q = np.sqrt((1 - 0.2**2) * cos_i**2 + 0.2**2)
    q[secondary] = rng.uniform(0.5, 1.0, n2)
    pa = rng.uniform(0.0, 180.0, n)
    bt = rng.beta(1.5, 4.0, n)
    bt[secondary] = rng.beta(5.0, 2.5, n2)
    xc = IMAGE_SIZE / 2 + 0.5 * rng.standard_normal(n)
    yc = IMAGE_SIZE / 2 + 0.5 * rng.standard_normal(n)

    side, fwhm_sub, r90_sub = cutout_geometry(r90, psf)
    flux_r = _flux(mag_r)
    return pd.DataFrame(
        {
            "ra": np.round(ra, 6),
            "dec": np.round(dec, 6),
            "z": np.round(z, 5),
            "petroR90_r": r90,
            "psffwhm_r": psf,
            "sample": np.asarray(SAMPLES, dtype=object)[sample_idx],
            "mag_r": mag_r,
            "flux_g": flux_r * 10 ** (-0.4 * g_r),
            "flux_r": flux_r,
            "flux_i": flux_r * 10 ** (0.4 * r_i),
            "axis_ratio": q,
            "position_angle": pa,
            "bulge_fraction": bt,
            "bulge_visible": bt >= p["bulge_visible_min"],
            "x_centre": xc,
            "y_centre": yc,
            # derived (not written): subject-frame geometry
            "_sample": sample_idx,
            "_side": side,
            "_fwhm": fwhm_sub,
            "_r90": r90_sub,
        }
    )


# --------------------------------------------------------------------------- clumps


def _disc_positions(gal_idx, u, gal, rng):
    """Subject-pixel positions of points at disc radius ``u`` R90 (random azimuth)."""
    phi = rng.uniform(0.0, 2 * np.pi, len(u))
    q = gal["axis_ratio"].to_numpy()[gal_idx]
    pa = np.radians(gal["position_angle"].to_numpy()[gal_idx])
    r90 = gal["_r90"].to_numpy()[gal_idx]
    dx, dy = u * np.cos(phi) * r90, q * u * np.sin(phi) * r90
    c, s = np.cos(pa), np.sin(pa)
    x = gal["x_centre"].to_numpy()[gal_idx] + c * dx - s * dy
    y = gal["y_centre"].to_numpy()[gal_idx] + s * dx + c * dy
    return x, y


def _clump_radii(n, p, rng):
    u = rng.gamma(p["clump_radius_shape"], p["clump_radius_scale"], n)
    outer = rng.random(n) < p["clump_outer_fraction"]
    u[outer] = rng.uniform(1.3, 2.6, int(outer.sum()))
    return u


def _pairs_within(ptr: np.ndarray):
    """All index pairs (a, b), a < b, inside each CSR group."""
    counts = np.diff(ptr)
    aa, bb = [], []
    for m in np.unique(counts[counts > 1]):
        starts = ptr[:-1][counts == m]
        ia, ib = np.triu_indices(int(m), 1)
        aa.append((starts[:, None] + ia[None, :]).ravel())
        bb.append((starts[:, None] + ib[None, :]).ravel())
    if not aa:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(aa), np.concatenate(bb)


def resolution_factors(fwhm, q, p: dict):
    """How a galaxy's resolution and inclination set what can be seen in it.

    Returns (window, incl, richness) per galaxy: ``window`` = exp(-(ln(F /
    ``clumpy_fwhm_peak``) / ``clumpy_fwhm_width``)^2 / 2), the resolution window in the
    subject-pixel FWHM F; ``incl`` = clip((q - 0.2) / 0.2, 0, 1), which hides the disc of a
    nearly edge-on galaxy; ``richness`` = (F / ``clumpy_fwhm_peak``)^-``clumps_resolution_slope``,
    how many separate knots a galaxy shows relative to one at the peak. Clumps and (with
    ``faint_follow_resolution``) faint features use the same three factors.
    """
    fwhm = np.asarray(fwhm, dtype=float)
    window = np.exp(-0.5 * (np.log(fwhm / p["clumpy_fwhm_peak"]) / p["clumpy_fwhm_width"]) ** 2)
    incl = np.clip((np.asarray(q, dtype=float) - 0.2) / 0.2, 0.0, 1.0)
    richness = (fwhm / p["clumpy_fwhm_peak"]) ** (-p["clumps_resolution_slope"])
    return window, incl, richness


def make_clumps(gal: pd.DataFrame, p: dict, rng: np.random.Generator):
    """True clumps: counts, positions, unusual flags, fluxes. Returns (df, n_dropped)."""
    n = len(gal)
    fwhm = gal["_fwhm"].to_numpy()
    q = gal["axis_ratio"].to_numpy()
    p_sample = np.array([p["clumpy_primary"], p["clumpy_secondary"], p["clumpy_simulated"]])
    window, incl, richness = resolution_factors(fwhm, q, p)
    clumpy = rng.random(n) < p_sample[gal["_sample"].to_numpy()] * window * incl
    mu = p["clumps_extra_mean"] * richness
    k = p["clumps_dispersion"]
    extra = rng.negative_binomial(k, k / (k + mu)) if k > 0 else rng.poisson(mu)
    n_cl = np.where(clumpy, np.minimum(1 + extra, max(p["clumps_max"], 1)), 0)

    gidx = np.repeat(np.arange(n), n_cl)
    m = len(gidx)
    u = _clump_radii(m, p, rng)
    x, y = _disc_positions(gidx, u, gal, rng)
    ptr = _csr(n_cl)
    pa_, pb_ = _pairs_within(ptr)
    sep = p["clump_min_separation"] * fwhm[gidx]
    bulge = gal["bulge_visible"].to_numpy()[gidx]
    xc, yc = gal["x_centre"].to_numpy()[gidx], gal["y_centre"].to_numpy()[gidx]

    def misplaced():
        bad = (x < 1) | (x > IMAGE_SIZE - 1) | (y < 1) | (y > IMAGE_SIZE - 1)
        bad |= bulge & (np.hypot(x - xc, y - yc) < sep)
        if len(pa_):
            close = np.hypot(x[pa_] - x[pb_], y[pa_] - y[pb_]) < sep[pb_]
            bad[pb_[close]] = True
        return bad

    for _ in range(20):
        bad = misplaced()
        if not bad.any():
            break
        idx = np.flatnonzero(bad)
        u[idx] = _clump_radii(len(idx), p, rng)
        x[idx], y[idx] = _disc_positions(gidx[idx], u[idx], gal, rng)
    # still misplaced after 20 redraws: drop (a later clump of a too-close pair goes)
    ok = ~misplaced()
    n_dropped = int((~ok).sum())
    gidx, u, x, y = gidx[ok], u[ok], x[ok], y[ok]
    m = len(gidx)

    p_unusual = np.clip(p["unusual_fraction"] + p["unusual_radial_slope"] * (u - 1.0), 0.0, 1.0)
    unusual = rng.random(m) < p_unusual
    delta = (
        p["clump_contrast_mean"] - 0.4 * unusual + p["clump_contrast_sd"] * rng.standard_normal(m)
    )
    g_r = np.where(
        unusual, 0.7 + 0.25 * rng.standard_normal(m), 0.25 + 0.2 * rng.standard_normal(m)
    )
    r_i = np.where(
        unusual, 0.3 + 0.15 * rng.standard_normal(m), 0.05 + 0.1 * rng.standard_normal(m)
    )
    df = _object_table(gal, gidx, x, y, delta, g_r, r_i)
    df["unusual"] = unusual
    df["clump"] = _local_index(np.bincount(gidx, minlength=n))
    return df, n_dropped


def _object_table(gal, gidx, x, y, delta, g_r, r_i) -> pd.DataFrame:
    mag = gal["mag_r"].to_numpy()[gidx] + delta
    flux_r = _flux(mag)
    return pd.DataFrame(
        {
            "_gal": gidx,
            "x": x,
            "y": y,
            "flux_g": flux_r * 10 ** (-0.4 * g_r),
            "flux_r": flux_r,
            "flux_i": flux_r * 10 ** (0.4 * r_i),
            "_delta": delta,
            "_g_r": g_r,
        }
    )


def make_distractors(gal: pd.DataFrame, clumpy: np.ndarray, p: dict, rng) -> pd.DataFrame:
    """Faint features, foreground stars and visible bulges (``truth_distractors.csv``)."""
    n = len(gal)
    sample = gal["_sample"].to_numpy()
    lam = np.where(sample == 1, p["faint_features_secondary"], p["faint_features_mean"])
    lam = lam * np.where(clumpy, 1.5, 1.0)
    if p["faint_follow_resolution"]:
        window, incl, richness = resolution_factors(
            gal["_fwhm"].to_numpy(), gal["axis_ratio"].to_numpy(), p
        )
        lam = lam * window * incl * richness
    n_ff = rng.poisson(lam)
    g_ff = np.repeat(np.arange(n), n_ff)
    m = len(g_ff)
    u = rng.gamma(p["faint_radius_shape"], p["faint_radius_scale"], m)
    x, y = _disc_positions(g_ff, u, gal, rng)
    x, y = np.clip(x, 1.0, IMAGE_SIZE - 1.0), np.clip(y, 1.0, IMAGE_SIZE - 1.0)
    delta = p["faint_contrast_mean"] + p["faint_contrast_sd"] * rng.standard_normal(m)
    ff = _object_table(
        gal,
        g_ff,
        x,
        y,
        delta,
        0.0 + 0.15 * rng.standard_normal(m),
        -0.1 + 0.1 * rng.standard_normal(m),
    )
    ff["kind"] = "faint_feature"

    n_st = rng.poisson(p["stars_mean"], n)
    g_st = np.repeat(np.arange(n), n_st)
    m = len(g_st)
    mag = rng.uniform(14.0, 21.5, m)
    st = _object_table(
        gal,
        g_st,
        rng.uniform(8.0, IMAGE_SIZE - 8.0, m),
        rng.uniform(8.0, IMAGE_SIZE - 8.0, m),
        mag - gal["mag_r"].to_numpy()[g_st],
        0.9 + 0.35 * rng.standard_normal(m),
        0.35 + 0.15 * rng.standard_normal(m),
    )
    st["kind"] = "star"

    g_b = np.flatnonzero(gal["bulge_visible"].to_numpy())
    bt = gal["bulge_fraction"].to_numpy()[g_b]
    gr_gal = -2.5 * np.log10(gal["flux_g"].to_numpy()[g_b] / gal["flux_r"].to_numpy()[g_b])
    ri_gal = 2.5 * np.log10(gal["flux_i"].to_numpy()[g_b] / gal["flux_r"].to_numpy()[g_b])
    bu = _object_table(
        gal,
        g_b,
        gal["x_centre"].to_numpy()[g_b],
        gal["y_centre"].to_numpy()[g_b],
        -2.5 * np.log10(bt),
        gr_gal + 0.1,
        ri_gal + 0.05,
    )
    bu["kind"] = "bulge"
    df = pd.concat([ff, st, bu], ignore_index=True)
    df = df.sort_values(["_gal", "kind"], kind="stable", ignore_index=True)
    df["distractor"] = _local_index(np.bincount(df["_gal"].to_numpy(), minlength=n))
    return df


# --------------------------------------------------------------------------- volunteers


def _activity(n_vol, n_subjects, p, rng, heavy_fraction=None):
    """Subjects per volunteer: casual lognormal + committed power-law tail (see docstring)."""
    cap = max(1, int(p["heavy_max_fraction"] * n_subjects))
    casual = np.ceil(rng.lognormal(np.log(p["activity_median"]), p["activity_sigma"], n_vol))
    casual = np.minimum(casual, cap)
    hf = p["heavy_fraction"] if heavy_fraction is None else heavy_fraction
    heavy = rng.random(n_vol) < hf
    lo = float(min(max(p["heavy_min"], 1), cap))
    a = p["heavy_alpha"]
    u = rng.random(n_vol)
    if a > 0:
        # inverse CDF of p(n) ~ n^-(1+a) on [lo, cap]
        t = 1.0 - u * (1.0 - (lo / cap) ** a)
        hv = lo * t ** (-1.0 / a)
    else:
        hv = lo * (cap / lo) ** u
    n = np.where(heavy, np.floor(hv), casual)
    return np.clip(n, 1, cap).astype(np.int64), heavy


def _activity_mean(n_subjects, p) -> float:
    """Exact mean of :func:`_activity` (sums of survival functions, E[N] = sum P(N >= k))."""
    cap = max(1, int(p["heavy_max_fraction"] * n_subjects))
    k = np.arange(2, cap + 1, dtype=float)
    sigma = p["activity_sigma"]
    if sigma > 0:
        surv = norm.sf((np.log(k - 1) - np.log(p["activity_median"])) / sigma)
    else:
        surv = (p["activity_median"] > k - 1).astype(float)
    casual = 1.0 + surv.sum()
    lo = float(min(max(p["heavy_min"], 1), cap))
    a = p["heavy_alpha"]
    kk = np.arange(1, cap + 1, dtype=float)
    if cap <= lo:
        heavy = float(cap)
    elif a > 0:
        c = 1.0 - (lo / cap) ** a
        heavy = float(np.clip(1.0 - (1.0 - (lo / np.maximum(kk, lo)) ** a) / c, 0, 1).sum())
    else:
        heavy = float(np.clip(1.0 - np.log(np.maximum(kk, lo) / lo) / np.log(cap / lo), 0, 1).sum())
    f = p["heavy_fraction"]
    return (1.0 - f) * casual + f * heavy


def _match_total(n, heavy, n_slots, cap, rng):
    """Rescale the committed volunteers' counts so that they sum to ``n_slots``."""
    for _ in range(50):
        diff = n_slots - int(n.sum())
        if diff == 0:
            break
        hv = np.flatnonzero(heavy & ((n < cap) if diff > 0 else (n > 1)))
        if len(hv) == 0:
            # no committed volunteers to absorb it: adjust casual ones by one each
            cand = np.flatnonzero((n < cap) if diff > 0 else (n > 1))
            if len(cand) == 0:
                break
            n[rng.choice(cand, size=min(abs(diff), len(cand)), replace=False)] += int(np.sign(diff))
            continue
        tot = n[hv].sum()
        n[hv] = np.clip(np.floor(n[hv] * (tot + diff) / tot).astype(np.int64), 1, cap)
        rest = n_slots - int(n.sum())
        cand = np.flatnonzero(heavy & ((n < cap) if rest > 0 else (n > 1)))
        if rest and len(cand):
            k = min(abs(rest), len(cand))
            n[rng.choice(cand, size=k, replace=False)] += int(np.sign(rest))
    return n


def draw_skills(n_vol: int, p: dict, rng) -> pd.DataFrame:
    """Per-volunteer skills (distributions in the module docstring)."""
    c = p["skill_concentration"]
    shape = p["faint_boost_shape"]
    return pd.DataFrame(
        {
            "threshold": p["threshold_mean"] + p["threshold_sd"] * rng.standard_normal(n_vol),
            "faint_boost": (
                rng.gamma(shape, p["faint_boost_mean"] / shape, n_vol)
                if shape > 0
                else np.full(n_vol, p["faint_boost_mean"])
            ),
            "spurious_rate": np.minimum(
                rng.lognormal(np.log(max(p["spurious_median"], 1e-12)), p["spurious_sigma"], n_vol),
                5.0,
            ),
            "scatter_fwhm": rng.lognormal(
                np.log(max(p["scatter_median"], 1e-12)), p["scatter_sigma"], n_vol
            ),
            "p_bulge_t0": _beta(rng, p["p_bulge_t0_mean"], c, n_vol),
            "p_bulge_t1": _beta(rng, p["p_bulge_t1_mean"], c, n_vol),
            "p_double": _beta(rng, p["p_double_mean"], c, n_vol),
            "p_unusual_given_unusual": _beta(rng, p["p_unusual_hit_mean"], c, n_vol),
            "p_unusual_given_normal": _beta(rng, p["p_unusual_false_mean"], c, n_vol),
            "p_star": _beta(rng, p["p_star_mean"], c, n_vol),
            "p_skip": _beta(rng, p["p_skip_mean"], c, n_vol),
        }
    )


def make_cohort(n_slots: int, n_subjects: int, p: dict, rng) -> pd.DataFrame:
    """The volunteer cohort without skills: planned activity and login state.

    The cohort size is ``n_slots`` / (mean of the activity model); committed
    volunteers' counts are rescaled so that the plan sums to ``n_slots``. Not
    logged in: systematic sampling over the activity ranks (ties at random), so
    that their share of the classifications is ``not_logged_in_fraction``.
    """
    cap = max(1, int(p["heavy_max_fraction"] * n_subjects))
    mean = _activity_mean(n_subjects, p)
    n_vol = max(1, int(round(n_slots / mean)))
    n, heavy = _activity(n_vol, n_subjects, p, rng)
    n = _match_total(n, heavy, n_slots, cap, rng)
    order = np.lexsort((rng.random(n_vol), -n))
    f = p["not_logged_in_fraction"]
    start = rng.random()
    rank = np.arange(n_vol)
    anon = np.empty(n_vol, bool)
    anon[order] = np.floor((rank + 1) * f + start) > np.floor(rank * f + start)
    return pd.DataFrame({"n_planned": n, "committed": heavy, "late": False, "logged_in": ~anon})


def make_volunteers(n_slots: int, n_subjects: int, p: dict, rng, rng_spammers=None) -> pd.DataFrame:
    """The volunteer cohort (:func:`make_cohort`) with skills (:func:`draw_skills`)
    and, when ``spammer_fraction`` > 0, spammers (:func:`assign_spammers`, drawn
    from ``rng_spammers``)."""
    df = make_cohort(n_slots, n_subjects, p, rng)
    vols = pd.concat([df, draw_skills(len(df), p, rng)], axis=1)
    if p["spammer_fraction"] > 0:
        vols = assign_spammers(vols, p, rng_spammers or rng)
    return vols


def assign_spammers(vols: pd.DataFrame, p: dict, rng) -> pd.DataFrame:
    """Mark ``spammer_fraction`` of the cohort as spammers, at every activity level.

    Volunteers ranked by planned activity are cut into blocks of round(1 /
    spammer_fraction) ranks; block k holds floor((k + 1) B f + u) - floor(k B f + u)
    spammers (u uniform, so the share is f on average and in every block) at random
    positions in the block. So the committed volunteers, down to the most active
    one, are spammers in the same proportion as the casual ones. A spammer makes
    Poisson(``spammer_spurious_mean``) spurious clicks per classification and marks
    each real object with ``spammer_hit_scale`` x their usual probability; columns
    ``spammer`` and ``hit_scale`` record it.
    """
    f = p["spammer_fraction"]
    n_vol = len(vols)
    n = vols["n_planned"].to_numpy()
    width = max(1, int(round(1.0 / f)))
    rank = np.empty(n_vol, np.int64)
    rank[np.lexsort((rng.random(n_vol), -n))] = np.arange(n_vol)
    block = rank // width
    u = rng.random()
    k = np.arange(block.max() + 1 if n_vol else 0)
    per_block = np.floor((k + 1) * width * f + u) - np.floor(k * width * f + u)
    pos = np.empty(n_vol, np.int64)
    pos[np.lexsort((rng.random(n_vol), block))] = _local_index(np.bincount(block))
    spam = pos < per_block[block]
    out = vols.copy()
    out["spurious_rate"] = np.where(spam, p["spammer_spurious_mean"], out["spurious_rate"])
    out["spammer"] = spam
    out["hit_scale"] = np.where(spam, p["spammer_hit_scale"], 1.0)
    return out


def fill_spammer_columns(table: pd.DataFrame, cohort: pd.DataFrame) -> pd.DataFrame:
    """``table`` with the cohort's spammer columns: late volunteers and experts are
    never spammers. Unchanged when the cohort has no spammer columns."""
    if "spammer" not in cohort.columns:
        return table
    t = table.copy()
    t["spammer"] = t["spammer"].eq(True) if "spammer" in t.columns else False
    t["hit_scale"] = t["hit_scale"].fillna(1.0) if "hit_scale" in t.columns else 1.0
    return t


def make_late_volunteers(n_slots: int, n_subjects: int, p: dict, rng, skills=None) -> pd.DataFrame:
    """Newly arriving casual volunteers who finish the last subjects (the mop-up
    phase); ``skills(n, p, rng)`` draws their skills (default :func:`draw_skills`)."""
    n_list, total = [], 0
    while total < n_slots:
        n, _ = _activity(max(16, n_slots // 2), n_subjects, p, rng, heavy_fraction=0.0)
        n_list.append(n)
        total += int(n.sum())
    n = np.concatenate(n_list)
    n = n[: int(np.searchsorted(np.cumsum(n), n_slots)) + 1]
    n_vol = len(n)
    anon = rng.random(n_vol) < p["not_logged_in_fraction"]
    df = pd.DataFrame(
        {"n_planned": n, "committed": np.zeros(n_vol, bool), "late": True, "logged_in": ~anon}
    )
    return pd.concat([df, (skills or draw_skills)(n_vol, p, rng)], axis=1)


def make_experts(n_experts: int, p: dict, rng) -> pd.DataFrame:
    """The experts' fixed skills (see the module docstring), tiny per-expert jitter."""
    e = n_experts
    return pd.DataFrame(
        {
            "n_planned": np.zeros(e, np.int64),
            "committed": np.ones(e, bool),
            "late": np.zeros(e, bool),
            "logged_in": np.ones(e, bool),
            "threshold": p["expert_threshold"] + 0.1 * rng.standard_normal(e),
            "faint_boost": np.full(e, p["expert_faint_boost"]),
            "spurious_rate": np.zeros(e),
            "scatter_fwhm": np.full(e, p["expert_scatter"]),
            "p_bulge_t0": np.ones(e),
            "p_bulge_t1": np.zeros(e),
            "p_double": np.zeros(e),
            "p_unusual_given_unusual": np.full(e, 0.85),
            "p_unusual_given_normal": np.full(e, 0.05),
            "p_star": np.zeros(e),
            "p_skip": np.zeros(e),
        }
    )


# --------------------------------------------------------------------------- schedule


def plan_sessions(
    n_per_vol: np.ndarray,
    p: dict,
    rng,
    window: tuple[float, float] | None = None,
    max_rate: float | None = None,
) -> tuple[np.ndarray, ...]:
    """Planned classification times (seconds since start) of every volunteer.

    Arrival: uniform over the project (a fraction ``launch_fraction`` in the
    launch burst), or uniform in ``window`` (seconds) without a burst. Later
    sessions fall uniformly in a span of Beta(2, 1) x the rest of the project,
    but at least ``n / max_rate`` (a volunteer cannot see distinct subjects
    faster than they flow through the project; the arrival moves earlier if
    needed). Returns (volunteer index, time, session index) for every planned
    classification, sorted by time, then volunteer. See the module docstring.
    """
    n_vol = len(n_per_vol)
    dur = p["duration_days"] * 86400.0
    if window is None:
        burst = rng.random(n_vol) < p["launch_fraction"]
        arrive = np.where(
            burst,
            np.minimum(rng.exponential(LAUNCH_DAYS * 86400.0, n_vol), 0.98 * dur),
            rng.uniform(0.0, dur, n_vol),
        )
        end = dur
    else:
        arrive = rng.uniform(window[0], window[1], n_vol)
        end = window[1]
    span = np.maximum(end - arrive, 0.0) * rng.beta(2.0, 1.0, n_vol)
    if max_rate is not None and max_rate > 0:
        need_span = np.minimum(n_per_vol / max_rate, end)
        arrive = np.minimum(arrive, end - need_span)
        span = np.clip(span, need_span, end - arrive)
    sess_size = 1 + rng.poisson(max(p["session_mean"] - 1.0, 0.0), n_vol)
    n_sess = -(-n_per_vol // sess_size)  # ceil
    sess_vol = np.repeat(np.arange(n_vol), n_sess)
    m = len(sess_vol)
    first = _csr(n_sess)[:-1]
    frac = rng.random(m)
    frac[first[n_sess > 0]] = -1.0  # the first session starts on arrival
    order = np.lexsort((frac, sess_vol))
    frac = np.maximum(frac[order], 0.0)
    sess_start = arrive[sess_vol] + span[sess_vol] * frac

    total = int(n_per_vol.sum())
    ev_vol = np.repeat(np.arange(n_vol), n_per_vol)
    local = _local_index(n_per_vol)
    ev_sess = np.repeat(first, n_per_vol) + local // sess_size[ev_vol]
    gap = rng.lognormal(np.log(p["seconds_per_classification"]), 0.5, total)
    csum = np.cumsum(gap)
    sess_first_ev = np.flatnonzero(np.r_[True, ev_sess[1:] != ev_sess[:-1]])
    base = np.repeat(csum[sess_first_ev] - gap[sess_first_ev], np.diff(np.r_[sess_first_ev, total]))
    t = sess_start[ev_sess] + (csum - base)
    order = np.lexsort((ev_vol, t))
    return ev_vol[order], t[order], ev_sess[order]


@numba.njit(cache=True)
def _serve_subjects(
    ev_vol, ev_u, queue, need, seen, cnt, retire, pool, state, ev0
):  # pragma: no cover
    """Replay the Zooniverse subject queue in time order (see module docstring).

    For each planned classification (volunteer ``ev_vol[e]``, in time order)
    take the first subject the volunteer has not seen, scanning the active pool
    from a random start ``ev_u[e]``; a subject retires once it has ``need[s]``
    classifications and the next subject of ``queue`` joins the pool. The
    queue state (``seen`` volunteers per subject, ``cnt``, ``retire`` = global
    index of the retiring event, ``pool``, ``state`` = [pool size, next queue
    position]) is updated in place so that a later phase can continue it;
    ``ev0`` is the global index of ``ev_vol[0]``. Returns the subject of each
    event, -1 where the volunteer found no unseen subject (or none was left).
    """
    n_sub = need.shape[0]
    n_ev = ev_vol.shape[0]
    out = np.full(n_ev, -1, np.int64)
    size = state[0]
    nxt = state[1]
    for e in range(n_ev):
        if size == 0:
            break
        v = ev_vol[e]
        start = int(ev_u[e] * size)
        if start >= size:
            start = size - 1
        slot = -1
        for t in range(size):
            k = start + t
            if k >= size:
                k -= size
            s = pool[k]
            dup = False
            for r in range(cnt[s]):
                if seen[s, r] == v:
                    dup = True
                    break
            if not dup:
                slot = k
                break
        if slot < 0:
            continue
        s = pool[slot]
        seen[s, cnt[s]] = v
        cnt[s] += 1
        out[e] = s
        if cnt[s] >= need[s]:
            retire[s] = ev0 + e
            if nxt < n_sub:
                pool[slot] = queue[nxt]
                nxt += 1
            else:
                pool[slot] = pool[size - 1]
                size -= 1
    state[0] = size
    state[1] = nxt
    return out


def serve_subjects(vols: pd.DataFrame, need: np.ndarray, p: dict, rng, skills=None) -> dict:
    """Who classifies which subject, and when (module docstring, "Who sees what").

    Phase 1 replays the cohort's planned classifications; while subjects are
    still short of their target, newly arriving casual volunteers (``late``)
    classify them right after the last planned classification. Returns the
    (possibly extended) volunteer table and the realised classifications
    (volunteer, subject, time, session) in time order, plus counts. ``skills``
    draws the late volunteers' skills (default :func:`draw_skills`).
    """
    n_sub = len(need)
    queue = rng.permutation(n_sub).astype(np.int64)
    max_need = int(need.max()) if n_sub else 1
    seen = np.full((n_sub, max_need), -1, np.int64)
    cnt = np.zeros(n_sub, np.int64)
    retire = np.full(n_sub, -1, np.int64)
    size = min(max(int(p["active_subjects"]), 1), n_sub)
    pool = np.zeros(max(size, 1), np.int64)
    pool[:size] = queue[:size]
    state = np.array([size, size], np.int64)
    need = need.astype(np.int64)

    parts = []
    n_events = n_skipped = n_sess = 0
    window = None
    for phase in range(30):
        if phase > 0:
            left = int((need - cnt).sum())
            if state[0] == 0 or left <= 0:
                break
            late = make_late_volunteers(int(math.ceil(1.1 * left)) + 5, n_sub, p, rng, skills)
            late.index = late.index + len(vols)
            vols = pd.concat([vols, late])
            t_last = float(parts[-1]["t"].max()) if parts and len(parts[-1]["t"]) else 0.0
            window = (t_last, t_last + 3 * 86400.0)
            n_plan = np.zeros(len(vols), np.int64)
            n_plan[late.index.to_numpy()] = late["n_planned"].to_numpy()
        else:
            n_plan = vols["n_planned"].to_numpy()
        rate = None if phase else 0.5 * n_sub / (p["duration_days"] * 86400.0)
        ev_vol, ev_t, ev_sess = plan_sessions(n_plan, p, rng, window, max_rate=rate)
        ev_sub = _serve_subjects(
            ev_vol.astype(np.int64), rng.random(len(ev_vol)), queue, need, seen, cnt, retire,
            pool, state, n_events,
        )  # fmt: skip
        parts.append({"vol": ev_vol, "sub": ev_sub, "t": ev_t, "sess": ev_sess + n_sess})
        n_events += len(ev_vol)
        n_skipped += int((ev_sub < 0).sum())
        n_sess += int(ev_sess.max()) + 1 if len(ev_sess) else 0
    cat = {k: np.concatenate([q[k] for q in parts]) for k in parts[0]}
    done = cat["sub"] >= 0
    ev_index = np.full(n_events, -1, np.int64)
    ev_index[done] = np.arange(int(done.sum()))
    return {
        "volunteers": vols.reset_index(drop=True),
        "vol": cat["vol"][done],
        "sub": cat["sub"][done],
        "t": cat["t"][done],
        "session": cat["sess"][done],
        "n_sessions": n_sess,
        "n_classified": cnt,
        "retire_cls": np.where(retire >= 0, ev_index[np.maximum(retire, 0)], -1),
        "planned": n_events,
        "not_done": n_skipped,
        "late_phases": len(parts) - 1,
    }


# --------------------------------------------------------------------------- clicks


def _visibility(obj: pd.DataFrame, p: dict) -> np.ndarray:
    return (p["visibility_contrast_ref"] - obj["_delta"].to_numpy()) + p[
        "visibility_colour_weight"
    ] * (0.3 - obj["_g_r"].to_numpy())


def draw_clicks(
    cls_gal: np.ndarray,
    cls_vol: np.ndarray,
    skills: pd.DataFrame,
    gal: pd.DataFrame,
    clumps: pd.DataFrame,
    distractors: pd.DataFrame,
    p: dict,
    rng: np.random.Generator,
) -> pd.DataFrame:
    """Every click of every classification (rows: classification index ``cls``).

    Columns: cls, task (0 = T0 bulge, 1 = T1 clumps), x, y, tool, source
    (clump | faint_feature | star | bulge | spurious), double (bool), clump,
    distractor (truth indices, -1 if none). Sorted by cls, task, click order.
    """
    n_cls = len(cls_gal)
    n_gal = len(gal)
    fwhm = gal["_fwhm"].to_numpy()
    floor = p["scatter_floor_px"]
    sk = {c: skills[c].to_numpy() for c in skills.columns}
    soft = max(p["visibility_softness"], 1e-6)

    # ---- objects volunteers may mark in T1: clumps, then distractors
    kind_codes = {"clump": 0, "faint_feature": 1, "star": 2, "bulge": 3}
    obj_gal = np.r_[clumps["_gal"].to_numpy(), distractors["_gal"].to_numpy()]
    obj_kind = np.r_[
        np.zeros(len(clumps), np.int64),
        distractors["kind"].map(kind_codes).to_numpy(np.int64),
    ]
    obj_x = np.r_[clumps["x"].to_numpy(), distractors["x"].to_numpy()]
    obj_y = np.r_[clumps["y"].to_numpy(), distractors["y"].to_numpy()]
    obj_vis = np.r_[_visibility(clumps, p), _visibility(distractors, p)]
    obj_unusual = np.r_[clumps["unusual"].to_numpy(bool), np.zeros(len(distractors), bool)]
    obj_truth = np.r_[clumps["clump"].to_numpy(), distractors["distractor"].to_numpy()]
    order = np.argsort(obj_gal, kind="stable")
    obj_gal, obj_kind, obj_x, obj_y = obj_gal[order], obj_kind[order], obj_x[order], obj_y[order]
    obj_vis, obj_unusual, obj_truth = obj_vis[order], obj_unusual[order], obj_truth[order]
    obj_ptr = _csr(np.bincount(obj_gal, minlength=n_gal))

    # ---- (classification, object) pairs
    n_obj = np.diff(obj_ptr)[cls_gal]
    pc = np.repeat(np.arange(n_cls), n_obj)
    po = np.repeat(obj_ptr[cls_gal], n_obj) + _local_index(n_obj)
    pv = cls_vol[pc]
    kind = obj_kind[po]
    prob = np.zeros(len(pc))
    m = kind == 0
    prob[m] = expit((obj_vis[po[m]] - sk["threshold"][pv[m]]) / soft)
    m = kind == 1
    prob[m] = expit((obj_vis[po[m]] - sk["threshold"][pv[m]] + sk["faint_boost"][pv[m]]) / soft)
    m = kind == 2
    prob[m] = sk["p_star"][pv[m]]
    m = kind == 3
    prob[m] = sk["p_bulge_t1"][pv[m]]
    if "hit_scale" in sk:  # spammers mark real objects less often
        prob = prob * sk["hit_scale"][pv]
    hit = rng.random(len(pc)) < prob
    pc, po, pv, kind = pc[hit], po[hit], pv[hit], kind[hit]
    p_unu = np.where(
        obj_unusual[po],
        sk["p_unusual_given_unusual"][pv],
        np.where(kind == 2, 0.5, sk["p_unusual_given_normal"][pv]),
    )
    t1 = {
        "cls": pc,
        "x": obj_x[po],
        "y": obj_y[po],
        "unusual": rng.random(len(pc)) < p_unu,
        "source": kind,
        "truth": obj_truth[po],
    }

    # ---- spurious clicks: 70% on the galaxy, 30% anywhere
    n_sp = rng.poisson(sk["spurious_rate"][cls_vol])
    sc = np.repeat(np.arange(n_cls), n_sp)
    ms = len(sc)
    on_gal = rng.random(ms) < 0.7
    sx, sy = _disc_positions(cls_gal[sc], rng.gamma(2.0, 0.6, ms), gal, rng)
    sx = np.where(on_gal, sx, rng.uniform(0, IMAGE_SIZE, ms))
    sy = np.where(on_gal, sy, rng.uniform(0, IMAGE_SIZE, ms))
    spur = {
        "cls": sc,
        "x": sx,
        "y": sy,
        "unusual": rng.random(ms) < sk["p_unusual_given_normal"][cls_vol[sc]],
        "source": np.full(ms, 4, np.int64),
        "truth": np.full(ms, -1, np.int64),
    }
    t1 = {k: np.r_[t1[k], spur[k]] for k in t1}

    # ---- positional scatter (per axis), relative to the subject's FWHM
    cv = cls_vol[t1["cls"]]
    sig = np.hypot(sk["scatter_fwhm"][cv] * fwhm[cls_gal[t1["cls"]]], floor)
    scat = t1["source"] != 4
    t1["x"] = t1["x"] + np.where(scat, sig * rng.standard_normal(len(sig)), 0.0)
    t1["y"] = t1["y"] + np.where(scat, sig * rng.standard_normal(len(sig)), 0.0)
    t1["double"] = np.zeros(len(sig), bool)
    t1["key"] = rng.random(len(sig))  # click order within the classification

    # ---- double clicks: a second click 0.1-1.5 FWHM from the first, same tool
    dbl = rng.random(len(sig)) < sk["p_double"][cv]
    di = np.flatnonzero(dbl)
    r = rng.uniform(0.1, 1.5, len(di)) * fwhm[cls_gal[t1["cls"][di]]]
    ang = rng.uniform(0, 2 * np.pi, len(di))
    dup = {k: v[di] for k, v in t1.items()}
    dup["x"] = dup["x"] + r * np.cos(ang)
    dup["y"] = dup["y"] + r * np.sin(ang)
    dup["double"] = np.ones(len(di), bool)
    dup["key"] = dup["key"] + 1e-12  # right after the click it doubles
    t1 = {k: np.r_[t1[k], dup[k]] for k in t1}

    # ---- volunteers who mark nothing in T1
    skip = rng.random(n_cls) < sk["p_skip"][cls_vol]
    keep = ~skip[t1["cls"]]
    t1 = {k: v[keep] for k, v in t1.items()}
    # random click order within a classification; a double click follows its original
    order = np.lexsort((t1["double"], t1["key"], t1["cls"]))
    t1 = {k: v[order] for k, v in t1.items()}
    t1["task"] = np.ones(len(t1["cls"]), np.int64)
    del t1["key"]

    # ---- T0: the bulge click
    vis = gal["bulge_visible"].to_numpy()[cls_gal]
    pb = sk["p_bulge_t0"][cls_vol] * np.where(vis, 1.0, 0.3)
    b = rng.random(n_cls) < pb
    bc = np.flatnonzero(b)
    g = cls_gal[bc]
    bsig = np.hypot(sk["scatter_fwhm"][cls_vol[bc]] * fwhm[g], floor)
    jitter = np.where(vis[bc], 1.0, 3.0)  # a guessed centre is less precise
    t0 = {
        "cls": bc,
        "x": gal["x_centre"].to_numpy()[g] + jitter * bsig * rng.standard_normal(len(bc)),
        "y": gal["y_centre"].to_numpy()[g] + jitter * bsig * rng.standard_normal(len(bc)),
        "unusual": np.zeros(len(bc), bool),
        "source": np.full(len(bc), 3, np.int64),
        "truth": np.full(len(bc), -1, np.int64),
        "double": np.zeros(len(bc), bool),
        "task": np.zeros(len(bc), np.int64),
    }
    out = {k: np.r_[t0[k], t1[k]] for k in t0}
    order = np.lexsort((out["task"], out["cls"]))  # stable: keeps the T1 click order
    out = {k: v[order] for k, v in out.items()}
    src = out["source"]
    source_names = np.array(["clump", "faint_feature", "star", "bulge", "spurious"], dtype=object)
    is_clump = (src == 0) & (out["task"] == 1)
    is_dist = np.isin(src, (1, 2, 3)) & (out["task"] == 1)
    return pd.DataFrame(
        {
            "cls": out["cls"],
            "task": out["task"],
            "x": out["x"],
            "y": out["y"],
            "tool": np.where(out["task"] == 1, out["unusual"].astype(np.int64), 0),
            "source": source_names[src],
            "double": out["double"],
            "clump": np.where(is_clump, out["truth"], -1),
            "distractor": np.where(is_dist, out["truth"], -1),
        }
    )


# --------------------------------------------------------------------------- names


_NAME_A = (
    "star", "galaxy", "nova", "comet", "cosmic", "astro", "nebula", "quasar",
    "lunar", "solar", "orbit", "photon", "pulsar", "zenith", "aurora", "meteor",
)  # fmt: skip
_NAME_B = (
    "gazer", "hunter", "fan", "watcher", "seeker", "scout", "walker", "dreamer",
    "rider", "explorer", "spotter", "keeper",
)  # fmt: skip


def volunteer_identities(logged_in: np.ndarray, rng) -> tuple[list[str], list[str], list[str]]:
    """(user_name, user_id, user_ip) strings; not-logged-in names embed the IP hash."""
    from clumpscout.simulation.export import hex_strings

    n = len(logged_in)
    ips = hex_strings(n, 10, rng)
    ids = 100_000 + rng.choice(max(2_500_000, 4 * n), size=n, replace=False)
    a = rng.integers(0, len(_NAME_A), n)
    b = rng.integers(0, len(_NAME_B), n)
    cap = rng.random(n) < 0.5
    names, uids = [], []
    for i, li in enumerate(logged_in.tolist()):
        if li:
            w = _NAME_A[a[i]] + _NAME_B[b[i]]
            names.append((w.capitalize() if cap[i] else w) + str(ids[i]))
            uids.append(str(ids[i]))
        else:
            names.append(f"not-logged-in-{ips[i]}")
            uids.append("")
    return names, uids, ips


# --------------------------------------------------------------------------- the universe


def _expert_schedule(n_experts, subj, p, rng):
    """(expert, subject index, time, session, number of sessions) of every expert
    classification: each expert does all ``subj`` in random order, in sessions of
    50 (~40 s apart) at random times in the last 40% of the project."""
    dur = p["duration_days"] * 86400.0
    k = len(subj)
    ex, su, tt, se = [], [], [], []
    n_sess = 0
    for e in range(n_experts if k else 0):
        sess = np.arange(k) // 50
        m = int(sess[-1]) + 1
        starts = np.sort(rng.uniform(0.6 * dur, dur, m))
        gap = rng.lognormal(np.log(40.0), 0.4, k)
        csum = np.cumsum(gap)
        first = np.arange(m) * 50
        ex.append(np.full(k, e))
        su.append(rng.permutation(subj))
        tt.append(starts[sess] + csum - (csum[first] - gap[first])[sess])
        se.append(n_sess + sess)
        n_sess += m
    if not ex:
        z = np.zeros(0, np.int64)
        return z, z, np.zeros(0), z, 0
    ex, su, tt, se = (np.concatenate(a) for a in (ex, su, tt, se))
    order = np.lexsort((ex, tt))
    return ex[order], su[order].astype(np.int64), tt[order], se[order], n_sess


def _classification_ids(n, base, rng):
    return base + np.cumsum(1 + rng.poisson(6.0, n)).astype(np.int64)


def _summary_clicks(clicks: pd.DataFrame, n_cls: int) -> dict:
    t1 = clicks["task"].to_numpy() == 1
    per = np.bincount(clicks["cls"].to_numpy()[t1], minlength=n_cls)
    return {
        "clicks_total": int(len(clicks)),
        "clicks_t0_bulge": int((~t1).sum()),
        "clicks_t1": int(t1.sum()),
        "clicks_t1_unusual_tool": int((clicks["tool"].to_numpy()[t1] == 1).sum()),
        "clicks_t1_by_source": {
            str(k): int(v) for k, v in clicks.loc[t1, "source"].value_counts().sort_index().items()
        },
        "clicks_t1_double": int(clicks["double"].to_numpy()[t1].sum()),
        "classifications_marking_no_clump": int((per == 0).sum()),
    }


def simulate_universe(cfg: dict | None, seed: int, out_dir: str | Path) -> dict:
    """Simulate a universe and write it to ``out_dir`` (contract 1).

    ``cfg`` is the ``simulate:`` config section (missing keys take
    :data:`DEFAULTS`); ``seed`` seeds every random step (same cfg and seed ->
    byte-identical files). ``kind: counting`` simulates a point-marking project
    without galaxies instead (:mod:`clumpscout.simulation.counting`). Returns the
    report written to simulate_report.json.
    """
    p = resolve_config(cfg)
    if p["kind"] == "counting":
        from clumpscout.simulation.counting import simulate_counting

        return simulate_counting(p, seed, out_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = _streams(seed)
    start = pd.Timestamp(p["start_date"])

    with timed(f"simulate: {p['n_subjects']} galaxies, clumps and distractors", log):
        gal = make_galaxies(p, rng["galaxies"])
        n_gal = len(gal)
        gal.insert(0, "subject_id", subject_ids(n_gal, rng["galaxies"]))
        clumps, n_clump_dropped = make_clumps(gal, p, rng["clumps"])
        clumpy = np.bincount(clumps["_gal"].to_numpy(), minlength=n_gal) > 0
        distractors = make_distractors(gal, clumpy, p, rng["distractors"])

    with timed("simulate: volunteers and the subject queue", log):
        r = rng["schedule"]
        need = p["volunteers_per_subject"] + r.poisson(p["extra_classifications_mean"], n_gal)
        vols = make_volunteers(int(need.sum()), n_gal, p, rng["volunteers"], rng["spammers"])
        q = run_queue(vols, need, p, r)
        q["volunteers"] = fill_spammer_columns(q["volunteers"], vols)

    with timed(f"simulate: clicks of {len(q['vol'])} classifications", log):
        clicks = draw_clicks(
            q["sub"], q["vol"], q["volunteers"], gal, clumps, distractors, p, rng["clicks"]
        )

    ex = plan_experts(p, n_gal, rng["experts"], make_experts)
    ex["skills"] = fill_spammer_columns(ex["skills"], vols)
    with timed(f"simulate: {ex['n']} experts x {ex['n_subjects']} subjects", log):
        ex["clicks"] = draw_clicks(
            ex["sub"], ex["vol"], ex["skills"], gal, clumps, distractors, p, rng["expert_clicks"]
        )

    extra = {c: gal[c].to_numpy() for c in ("ra", "dec", "sample", "_sample")}
    subjects = subjects_frame(gal["subject_id"].to_numpy(), q, rng["export"], extra)
    with timed("simulate: writing the Zooniverse exports", log):
        ids = write_exports(out, rng["export"], start, subjects, q, clicks, ex)

    with timed("simulate: writing the truth", log):
        sid = gal["subject_id"].to_numpy()
        _write_galaxy_truth(out, gal, clumps, distractors)
        objects = write_common_truth(
            out, p, galaxy_objects(sid, clumps, distractors), q, clicks, ex, ids, sid, start
        )

    report: dict[str, Any] = {"seed": int(seed), "config": p}
    report.update(queue_report(q, sid, ex))
    report.update(_galaxy_report(gal, clumps, distractors, clumpy, n_clump_dropped))
    report.update(_summary_clicks(clicks, len(q["vol"])))
    report.update(objects_report(objects, q["volunteers"], q["vol"], clicks))
    _finish(report, out)
    return report


def subject_ids(n: int, rng) -> np.ndarray:
    """Made-up, increasing Zooniverse subject ids."""
    return 90_000_000 + np.cumsum(1 + rng.poisson(0.5, n))


def run_queue(vols: pd.DataFrame, need: np.ndarray, p: dict, rng, skills=None) -> dict:
    """:func:`serve_subjects` plus classification ids and start times.

    Keys: volunteers (cohort plus late volunteers), vol, sub, t (end), t_start,
    session, cls_id (per classification, time order), n_sessions, n_classified,
    retire_cls, retired, need (per subject), planned, not_done, late_phases.
    """
    served = serve_subjects(vols, need, p, rng, skills)
    n_cls = len(served["vol"])
    cls_id = _classification_ids(n_cls, 200_000_000, rng)
    dur_s = np.minimum(
        rng.lognormal(np.log(0.8 * p["seconds_per_classification"]), 0.5, n_cls), 3600
    )
    q = dict(served)
    q.update(
        cls_id=cls_id,
        t_start=served["t"] - dur_s,
        retired=served["n_classified"] >= need,
        need=need,
    )
    return q


def plan_experts(p: dict, n_sub: int, rng, make) -> dict:
    """Which subjects the experts classify, when, and their skills (``make(n, p, rng)``).

    Keys: n, n_subjects, skills, vol, sub, t, session, n_sessions, cls_id.
    """
    n_exp = p["n_experts"]
    n_es = min(p["n_expert_subjects"], n_sub) if n_exp > 0 else 0
    if n_exp > 0 and n_es < p["n_expert_subjects"]:
        log.warning(
            "simulate: n_expert_subjects %d > n_subjects %d: the experts see every subject",
            p["n_expert_subjects"], n_sub,
        )  # fmt: skip
    chosen = np.sort(rng.choice(n_sub, size=n_es, replace=False)) if n_es else np.zeros(0, int)
    skills = make(n_exp, p, rng)
    e_vol, e_sub, e_t, e_sess, e_nsess = _expert_schedule(n_exp, chosen, p, rng)
    return {
        "n": n_exp,
        "n_subjects": n_es,
        "requested": p["n_expert_subjects"] if n_exp > 0 else 0,
        "skills": skills,
        "vol": e_vol,
        "sub": e_sub,
        "t": e_t,
        "session": e_sess,
        "n_sessions": e_nsess,
        "cls_id": _classification_ids(len(e_vol), 900_000_000, rng),
    }


def subjects_frame(sid: np.ndarray, q: dict, rng, extra: dict | None = None) -> pd.DataFrame:
    """The subject table of the exports: retirement state and times (+ ``extra`` columns)."""
    n = len(sid)
    cls_gal, cls_t, retired, retire_cls = q["sub"], q["t"], q["retired"], q["retire_cls"]
    last_t = np.full(n, np.nan)
    if len(cls_t):
        np.fmax.at(last_t, cls_gal, cls_t)
    created_s = -86400.0 * rng.uniform(1.0, 14.0, n)
    cols = {"subject_id": sid, **(extra or {})}
    cols.update(
        {
            "retired": retired,
            "n_classified": q["n_classified"],
            "retirement_id": 30_000_000 + np.arange(n),
            "created_s": created_s,
            "updated_s": np.where(np.isnan(last_t), created_s, last_t),
            "retired_s": np.where(
                retired, cls_t[np.maximum(retire_cls, 0)] if len(cls_t) else 0.0, np.nan
            ),
        }
    )
    return pd.DataFrame(cols)


def write_exports(out, rng, start, subjects, q, clicks, ex, layout=None, meta=None) -> dict:
    """Write classifications.csv, subjects_export.csv and expert_classifications.csv.

    ``layout``: the project's :class:`~clumpscout.simulation.export.ExportLayout`
    (default Clump Scout); ``meta``: subject metadata JSON (default: galaxies').
    Returns the identities: names, uids (volunteers), e_names, e_uids (experts).
    """
    from clumpscout.simulation import export as sx

    layout = layout or sx.CLUMP_SCOUT
    w, h = layout.image_width, layout.image_height
    sub_meta, sub_data = sx.subject_json(subjects, start, meta, layout)
    sid = subjects["subject_id"].to_numpy()
    vols = q["volunteers"]
    logged_in = vols["logged_in"].to_numpy()
    names, uids, ips = volunteer_identities(logged_in, rng)
    vmeta = sx.volunteer_strings(len(vols), rng, w, h)
    sess_hex = sx.hex_strings(q["n_sessions"], 32, rng)
    table = pd.DataFrame(
        {"classification_id": q["cls_id"], "vol": q["vol"], "gal": q["sub"],
         "t_end": q["t"], "t_start": q["t_start"], "session": q["session"]}
    )  # fmt: skip
    sx.write_classifications(
        out / "classifications.csv", table, clicks, names, uids, ips, vmeta, logged_in,
        sess_hex, sub_data, sid, start, layout=layout,
    )  # fmt: skip
    sx.write_subjects_export(out / "subjects_export.csv", subjects, sub_meta, start, layout)
    n_exp = ex["n"]
    e_names = [f"expert_{i + 1}" for i in range(n_exp)]
    e_uids = [str(EXPERT_USER_ID0 + i) for i in range(n_exp)]
    e_ips = sx.hex_strings(n_exp, 10, rng)
    e_meta = sx.volunteer_strings(n_exp, rng, w, h)
    e_hex = sx.hex_strings(ex["n_sessions"], 32, rng)
    e_table = pd.DataFrame(
        {"classification_id": ex["cls_id"], "vol": ex["vol"], "gal": ex["sub"],
         "t_end": ex["t"], "t_start": ex["t"] - 30.0, "session": ex["session"]}
    )  # fmt: skip
    sx.write_classifications(
        out / "expert_classifications.csv", e_table, ex["clicks"], e_names, e_uids, e_ips,
        e_meta, np.ones(n_exp, bool), e_hex, sub_data, sid, start, expert=True, layout=layout,
    )  # fmt: skip
    return {"names": names, "uids": uids, "e_names": e_names, "e_uids": e_uids}


def _write_galaxy_truth(out: Path, gal, clumps, distractors) -> None:
    from clumpscout.simulation.export import write_table_csv

    sid = gal["subject_id"].to_numpy()
    pos = {"x": ".3f", "y": ".3f"}
    cat = [c for c in gal.columns if not c.startswith("_") and c != "mag_r"]
    write_table_csv(gal[cat], out / "galaxies.csv", GALAXY_FORMATS)
    tc = clumps.assign(subject_id=sid[clumps["_gal"].to_numpy()])
    write_table_csv(
        tc[["subject_id", "clump", "x", "y", "flux_g", "flux_r", "flux_i", "unusual"]],
        out / "truth_clumps.csv",
        pos,
    )
    td = distractors.assign(subject_id=sid[distractors["_gal"].to_numpy()])
    write_table_csv(
        td[["subject_id", "x", "y", "kind", "flux_g", "flux_r", "flux_i", "distractor"]],
        out / "truth_distractors.csv",
        pos,
    )


#: columns of truth_objects.csv
OBJECT_COLUMNS = (
    "subject_id", "object", "kind", "x", "y", "unusual", "clump", "distractor",
    "flux_g", "flux_r", "flux_i", "n_viewers", "n_marked",
)  # fmt: skip


def galaxy_objects(sid: np.ndarray, clumps: pd.DataFrame, distractors: pd.DataFrame):
    """Every real object a volunteer may mark in T1: the clumps, then the distractors
    (faint features, stars, bulges) of each subject. Columns as truth_objects.csv,
    without n_viewers / n_marked, plus ``_gal``."""
    c = pd.DataFrame(
        {"_gal": clumps["_gal"].to_numpy(), "kind": "clump", "x": clumps["x"].to_numpy(),
         "y": clumps["y"].to_numpy(), "unusual": clumps["unusual"].to_numpy(bool),
         "clump": clumps["clump"].to_numpy(), "distractor": -1}
    )  # fmt: skip
    d = pd.DataFrame(
        {"_gal": distractors["_gal"].to_numpy(), "kind": distractors["kind"].to_numpy(),
         "x": distractors["x"].to_numpy(), "y": distractors["y"].to_numpy(), "unusual": False,
         "clump": -1, "distractor": distractors["distractor"].to_numpy()}
    )  # fmt: skip
    for df, src in ((c, clumps), (d, distractors)):
        for band in ("flux_g", "flux_r", "flux_i"):
            df[band] = src[band].to_numpy()
    obj = pd.concat([c, d], ignore_index=True).sort_values("_gal", kind="stable")
    obj = obj.reset_index(drop=True)
    obj.insert(0, "subject_id", sid[obj["_gal"].to_numpy()])
    obj.insert(1, "object", _local_index(np.bincount(obj["_gal"].to_numpy(), minlength=len(sid))))
    return obj


def _marks_per_object(obj: pd.DataFrame, clicks: pd.DataFrame, cls_sub: np.ndarray):
    """Distinct classifications that clicked each object (real-object clicks only)."""
    n = np.zeros(len(obj), np.int64)
    key = pd.MultiIndex.from_arrays([obj["_gal"].to_numpy(), obj["clump"], obj["distractor"]])
    hit = (clicks["clump"].to_numpy() >= 0) | (clicks["distractor"].to_numpy() >= 0)
    cl = clicks.loc[hit, ["cls", "clump", "distractor"]].drop_duplicates()
    if len(cl):
        idx = key.get_indexer(
            pd.MultiIndex.from_arrays(
                [cls_sub[cl["cls"].to_numpy()], cl["clump"], cl["distractor"]]
            )
        )
        n += np.bincount(idx[idx >= 0], minlength=len(obj))
    return n


def write_common_truth(out: Path, p, objects, q, clicks, ex, ids, sid, start) -> pd.DataFrame:
    """Write truth_objects.csv, volunteers_truth.csv and truth_clicks.parquet; returns
    the objects with ``n_viewers`` (volunteer classifications of the subject) and
    ``n_marked`` (those that clicked the object)."""
    from clumpscout.io import write_parquet
    from clumpscout.simulation.export import write_table_csv

    obj = objects.copy()
    obj["n_viewers"] = q["n_classified"][obj["_gal"].to_numpy()]
    obj["n_marked"] = _marks_per_object(obj, clicks, q["sub"])
    write_table_csv(obj[list(OBJECT_COLUMNS)], out / "truth_objects.csv", {"x": ".3f", "y": ".3f"})
    vt = _volunteer_truth(
        q["volunteers"], ids["names"], ids["uids"], q["vol"], q["t"], ex["skills"],
        ids["e_names"], ids["e_uids"], ex["vol"], ex["t"], start,
    )  # fmt: skip
    write_table_csv(vt, out / "volunteers_truth.csv", {})
    if p["write_click_truth"]:
        ct = pd.concat(
            [
                _click_truth(clicks, q["cls_id"], q["sub"], sid, False),
                _click_truth(ex["clicks"], ex["cls_id"], ex["sub"], sid, True),
            ],
            ignore_index=True,
        )
        for c in ("task", "source"):
            ct[c] = ct[c].astype("category")
        write_parquet(ct, out / "truth_clicks.parquet")
    else:
        (out / "truth_clicks.parquet").unlink(missing_ok=True)  # no stale truth
    return obj


def queue_report(q: dict, sid: np.ndarray, ex: dict) -> dict:
    """Realised totals of the subject queue, the cohort and the experts."""
    vols, cls_vol, n_classified = q["volunteers"], q["vol"], q["n_classified"]
    n_cls, n_gal = len(cls_vol), len(sid)
    per_vol = np.bincount(cls_vol, minlength=len(vols))
    per_vol = per_vol[per_vol > 0]
    logged_in = vols["logged_in"].to_numpy()
    return {
        "subjects": n_gal,
        "subjects_retired": int(q["retired"].sum()),
        "subjects_unretired": int((~q["retired"]).sum()),
        "classification_slots": int(q["need"].sum()),
        "planned_classifications": q["planned"],
        "planned_classifications_not_done": q["not_done"],
        "late_volunteer_phases": q["late_phases"],
        "late_volunteers": int(vols["late"].sum()),
        "classifications": n_cls,
        "classifications_per_subject_mean": float(n_cls / n_gal),
        "classifications_per_subject_min": int(n_classified.min()),
        "classifications_per_subject_max": int(n_classified.max()),
        "subjects_below_20_classifications": int((n_classified < 20).sum()),
        "not_logged_in_classifications_fraction": float(
            (~logged_in[cls_vol]).mean() if n_cls else 0.0
        ),
        "volunteers_planned": int((~vols["late"]).sum()),
        "volunteers": int(np.unique(cls_vol).size),
        "volunteers_not_logged_in": int((~logged_in[np.unique(cls_vol)]).sum()),
        "subjects_per_volunteer_median": float(np.median(per_vol)) if len(per_vol) else 0.0,
        "volunteers_below_10_subjects_fraction": float((per_vol < 10).mean())
        if len(per_vol)
        else 0.0,
        "volunteers_above_200_subjects": int((per_vol > 200).sum()),
        "subjects_per_volunteer_max": int(per_vol.max()) if len(per_vol) else 0,
        "expert_subjects": ex["n_subjects"],
        "expert_subjects_requested": ex["requested"],
        "expert_classifications": int(len(ex["vol"])),
        "expert_clicks_t1": int((ex["clicks"]["task"] == ex.get("clump_task", 1)).sum()),
    }


def _galaxy_report(gal, clumps, distractors, clumpy, n_dropped) -> dict:
    fwhm = gal["_fwhm"].to_numpy()
    return {
        "subjects_by_sample": {s: int((gal["sample"] == s).sum()) for s in SAMPLES},
        "fwhm_subject_px_median": float(np.median(fwhm)),
        "fwhm_subject_px_range": [float(fwhm.min()), float(fwhm.max())],
        "galaxies_with_clumps": int(clumpy.sum()),
        "true_clumps": int(len(clumps)),
        "true_clumps_unusual_fraction": float(clumps["unusual"].mean()) if len(clumps) else 0.0,
        "true_clumps_dropped_no_room": n_dropped,
        "distractors_by_kind": {
            str(k): int(v) for k, v in distractors["kind"].value_counts().sort_index().items()
        },
    }


def objects_report(objects, vols, cls_vol, clicks, task: int = 1) -> dict:
    """Real objects by kind, the share of spurious clump-task clicks and the spammers."""
    t = clicks["task"].to_numpy() == task
    src = clicks["source"].to_numpy()[t]
    spurious = np.isin(src, ("spurious", "star", "bulge"))
    rep: dict[str, Any] = {
        "truth_objects_by_kind": {
            str(k): int(v) for k, v in objects["kind"].value_counts().sort_index().items()
        },
        "clump_task_clicks_spurious_share": float(spurious.mean()) if len(src) else 0.0,
    }
    if "spammer" in vols.columns:
        spam = vols["spammer"].to_numpy(bool)
        by_spam = spam[cls_vol[clicks["cls"].to_numpy()[t]]]
        rep["spammers"] = int(spam[np.unique(cls_vol)].sum())
        rep["spammer_classifications_fraction"] = float(spam[cls_vol].mean())
        rep["spammer_clicks_spurious_share"] = (
            float(spurious[by_spam].mean()) if by_spam.any() else 0.0
        )
    return rep


def _finish(report: dict, out: Path) -> None:
    from clumpscout.io import write_json

    write_json(report, out / "simulate_report.json")
    log.info(
        "simulate: %d subjects, %d classifications, %d clicks, %d volunteers -> %s",
        report["subjects"], report["classifications"], report["clicks_total"],
        report["volunteers"], out,
    )  # fmt: skip


def _volunteer_truth(
    vols, names, uids, cls_vol, cls_t, experts, e_names, e_uids, e_vol, e_t, start
):
    n = len(vols)
    cnt = np.bincount(cls_vol, minlength=n)
    first = np.full(n, np.nan)
    last = np.full(n, np.nan)
    np.fmin.at(first, cls_vol, cls_t)
    np.fmax.at(last, cls_vol, cls_t)
    v = vols.copy()
    v.insert(0, "volunteer", names)
    v.insert(1, "user_id", uids)
    v.insert(2, "expert", False)
    v.insert(4, "n_classifications", cnt)
    ecnt = np.bincount(e_vol, minlength=len(experts)) if len(experts) else np.zeros(0, np.int64)
    e = experts.copy()
    e.insert(0, "volunteer", e_names)
    e.insert(1, "user_id", e_uids)
    e.insert(2, "expert", True)
    e.insert(4, "n_classifications", ecnt)
    e["n_planned"] = ecnt
    efirst = np.full(len(experts), np.nan)
    elast = np.full(len(experts), np.nan)
    if len(e_vol):
        np.fmin.at(efirst, e_vol, e_t)
        np.fmax.at(elast, e_vol, e_t)
    out = pd.concat([v, e], ignore_index=True)
    from clumpscout.simulation.export import format_times

    for col, arr in (
        ("first_classification", np.r_[first, efirst]),
        ("last_classification", np.r_[last, elast]),
    ):
        created, _ = format_times(np.nan_to_num(arr), start)
        out[col] = np.where(np.isnan(arr), "", np.asarray(created, dtype=object))
    return out[out["n_classifications"] > 0].reset_index(drop=True)


def _click_truth(clicks, cls_id, cls_gal, sid, expert):
    c = clicks["cls"].to_numpy()
    task = clicks["task"].to_numpy()
    key = c * 2 + task
    first = np.r_[True, key[1:] != key[:-1]]
    grp_start = np.maximum.accumulate(np.where(first, np.arange(len(c)), 0))
    return pd.DataFrame(
        {
            "classification_id": cls_id[c],
            "subject_id": sid[cls_gal[c]],
            "expert": np.full(len(c), expert),
            "task": np.where(task == 0, "T0", "T1"),
            "click": np.arange(len(c)) - grp_start,
            "x": clicks["x"].to_numpy().round(2),
            "y": clicks["y"].to_numpy().round(2),
            "tool": clicks["tool"].to_numpy(),
            "source": clicks["source"].to_numpy(),
            "double": clicks["double"].to_numpy(),
            "clump": clicks["clump"].to_numpy(),
            "distractor": clicks["distractor"].to_numpy(),
        }
    )


# --------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        required=True,
        help="YAML with a `simulate:` section (and optional top-level `seed`), or just the section",
    )
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed (default: derived from the file's top-level `seed` exactly as the workflow does, "
        "else 0)",
    )


def load_config(path: str | Path) -> tuple[dict, int | None]:
    """(simulate section, stage seed or None) from a YAML file."""
    import yaml

    try:
        with open(path) as fh:
            doc = yaml.safe_load(fh)
    except FileNotFoundError:
        raise InputError("config file not found", path=path) from None
    except yaml.YAMLError as exc:
        raise InputError(f"not valid YAML: {exc}".splitlines()[0], path=path) from None
    doc = doc or {}
    if not isinstance(doc, dict):
        raise InputError("expected a mapping", path=path)
    seed = None
    if "simulate" in doc or "seed" in doc:
        section = doc.get("simulate") or {}
        if "seed" in doc:
            if not isinstance(doc["seed"], int) or doc["seed"] < 0:
                raise InputError(
                    f"seed must be a non-negative integer, got {doc['seed']!r}", path=path
                )
            seed = stage_seed(doc["seed"], "simulate")
    else:
        section = doc
    if not isinstance(section, dict):
        raise InputError("`simulate` must be a mapping", path=path)
    resolve_config(section, path=path)  # validate now, with the file name
    return section, seed


def run(args: argparse.Namespace) -> int:
    section, seed = load_config(args.config)
    if args.seed is not None:
        if args.seed < 0:
            raise InputError(f"--seed must be >= 0, got {args.seed}")
        seed = args.seed
    if seed is None:
        seed = 0
    log.info("simulate: seed %d", seed)
    simulate_universe(section, seed, args.out)
    return 0


__all__ = [
    "DEFAULTS",
    "SAMPLES",
    "cutout_geometry",
    "draw_clicks",
    "load_config",
    "make_clumps",
    "make_distractors",
    "resolution_factors",
    "make_galaxies",
    "make_volunteers",
    "resolve_config",
    "simulate_universe",
    "stage_seed",
]
