"""A seeded, simulated Galaxy Zoo: Clump Scout universe, written as a Zooniverse export.

``clumpscout simulate --config FILE --out DIR [--seed N]`` and
:func:`simulate_universe` draw galaxies, their true clumps and distractors, a
volunteer cohort with heavy-tailed activity and individual skills, the order in
which the Zooniverse front end serves subjects to volunteers, every click, and
three experts; they write (docs/decisions.md#simulated-exports)

* ``classifications.csv``: a Zooniverse classification export (workflow 11803
  "Clump Scout", version 64.136; task T0 = bulge, T1 = clumps with tool 0
  "Normal clump" and tool 1 "Unusual clump"), same columns and JSON shapes as a
  real export (see :mod:`clumpscout.simulation.export`); zstd-compressed as
  ``classifications.csv.zst`` with ``compress_classifications`` [false];
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
* ``truth_clicks.parquet`` (``write_click_truth`` [true]): the origin of every click;
* ``simulate_report.json``: realised totals and every count of things dropped.

The same config and seed give byte-identical files. Time and memory grow linearly
with the project: the subject queue finds a volunteer's unseen subject a word of a bitmap
at a time, and the clicks, the click truth and the text of every file are made in blocks
(docs/decisions.md#simulated-exports says which files the workflow reads). ``kind: counting`` draws a
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
(F / ``clumpy_fwhm_peak``)^-``clumps_resolution_slope`` [0.3, 0.7] and shape
``clumps_dispersion`` [20], at most ``clumps_max`` [12]. The consensus boxes
(1-9 per labelled subject, median 2, mean 2.3, falling from 2.9 to 1.9 from the
best- to the worst-resolved fifth) count clumps and the faint features
volunteers marked together; the richness factor is theirs. Positions: disc radius u R90 with u ~
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
bulge): faint features, Poisson mean ``faint_features_mean`` [4.0] per primary /
simulated-clumps galaxy and ``faint_features_secondary`` [0.15] per secondary one,
x 1.5 in clumpy galaxies and, with ``faint_follow_resolution`` [true], x the
clumps' resolution window, inclination factor and richness (F /
``clumpy_fwhm_peak``)^-``clumps_resolution_slope`` (:func:`resolution_factors`):
a faint knot is told apart from its galaxy only where a clump would be
(docs/decisions.md#faint-features); so a galaxy at the window's peak has
``faint_features_mean`` x 1.5 of them when clumpy, a poorly resolved one almost
none. They are placed like clumps but with their own radial spread, u ~
Gamma(``faint_radius_shape``, ``faint_radius_scale``) [4, 0.21], with Delta ~
N(``faint_contrast_mean``, ``faint_contrast_sd``) [7.3, 0.5] (~10x fainter than
clumps: the paper's empirical false positives are 5-10x fainter, §6.3) and blue
(g-r ~ N(0.0, 0.15)); foreground stars, Poisson ``stars_mean`` [0.4] per
subject, uniform over the image, r = 14-21.5, red (g-r ~ N(0.9, 0.35)); the
visible bulge (at the centre, flux = B/T x galaxy).

**Visibility.** A clump or faint feature has v = (``visibility_contrast_ref`` -
Delta) + ``visibility_colour_weight`` (0.3 - (g - r)) [4.5, 0.8]: brighter
relative to its galaxy and bluer is easier to see (§6.3: empirically true
clumps are brighter and bluer). Volunteer j marks it with probability
expit((v - theta_j [+ phi_j for a faint feature]) / ``visibility_softness``)
[0.35]: theta_j is their detection threshold, phi_j their tendency to take
faint blue features for clumps. With the defaults (5,000 subjects) a
volunteer marks ~78% of real clumps and ~43% of faint features on average; 94%
of clumps and 92% of faint features get 5 or more marks from ~20 volunteers
(86% / 40%: 10 or more), so which faint features reach the aggregation's
threshold depends on how many, and which, volunteers looked.

*Calibration.* The defaults are fitted to evidence only: the paper's totals,
numbers and trends and the real consensus boxes, compared at the level of the
paper model's aggregated labels (``benchmarks/calibration.py``,
``benchmarks/fit_simulator.py``; docs/calibration.md has the table, what agrees
and what does not). The picture they encode is §6.3's: the volunteers' consensus
disagrees with the experts mainly on faint blue features that experts ignore,
marked unevenly (``faint_boost_shape`` < 1: many volunteers ignore them, a few
mark many), so that more of them reach the aggregation's threshold as more
volunteers look (§7); spurious clicks are ~0.1 per classification (the median
volunteer). At 5,000 subjects the clump task's clicks are 56% on faint features, 28%
on clumps, 11% spurious, 4% on the bulge and 1% on stars.

**Volunteers.** Subjects per volunteer: casual volunteers ceil(X), X lognormal
with median ``activity_median`` [2.6] and log-width ``activity_sigma`` [0.71];
a fraction ``heavy_fraction`` [1.56%] of committed volunteers with
p(n) ~ n^-(1 + ``heavy_alpha``) [0: log-uniform] between ``heavy_min`` [10] and
``heavy_max_fraction`` [0.5] x the number of subjects. The cohort size is the
number of classification slots / the model's mean (so it scales with the
project), and committed volunteers' counts are rescaled so that the plan fills
the slots exactly. At paper scale: ~20.9k volunteers, median 3, ~94.5% below
10, ~200 above 200 (the paper: 20,999, median 3, 19,859 below 10, 176 above 200).
Volunteers who are not logged in bring ``not_logged_in_fraction`` [20%] of the
classifications (systematic sampling over activity ranks, so the share holds
at any scale); each is a distinct "not-logged-in-<ip hash>" with no user_id.
Skills, independent per volunteer: theta_j ~ N(``threshold_mean``,
``threshold_sd``) [-1.0, 0.225]; phi_j ~ Gamma(``faint_boost_shape``,
``faint_boost_mean`` / shape) [0.82, 1.65 mag]; spurious clicks ~ Poisson(lambda_j)
per classification, lambda_j lognormal (median ``spurious_median`` [0.1],
log-width ``spurious_sigma`` [0.8], at most 5), 70% on the galaxy, 30%
anywhere; positional scatter per axis sqrt((s_j F)^2 +
``scatter_floor_px``^2), s_j lognormal (median ``scatter_median`` [0.031 FWHM],
log-width ``scatter_sigma`` [0.4]); and Beta-distributed probabilities (mean as
given, a + b = ``skill_concentration`` [15]): marking the bulge in T0
``p_bulge_t0_mean`` [0.96] (without a visible bulge 0.3 x that, 3x less
precise), also marking it as a clump in T1 ``p_bulge_t1_mean`` [0.07], doubling
a click ``p_double_mean`` [0.03] (a second click 0.1-1.5 F away, i.e. within
2 FWHM, same tool, right after the first), the unusual tool for an unusual
clump ``p_unusual_hit_mean`` [0.925] and for anything else
``p_unusual_false_mean`` [0.33] (stars 0.5), marking a foreground star
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
``expert_threshold`` [-0.425] (+-0.1 between experts),
faint boost ``expert_faint_boost`` [-1.0] (they ignore faint blue features,
§6.3), scatter ``expert_scatter`` [0.08 FWHM]; no spurious, double, star or T1
bulge clicks and no skipping; unusual tool 0.85 / 0.05; a visible bulge always.

**Totals.** The paper's 3,561,454 "click locations" for 1,739,259
classifications are taken to be all clicks of the export, the T0 bulge clicks
included: 2.05 per classification, i.e. ~0.9 bulge click plus ~1.15 clump
clicks. (Clump clicks alone would need 2.05 T1 clicks per classification, or
~40 per subject, more than the 128,100 clumps found in 85,286 subjects can
carry.) With the defaults a 20,000-subject universe has 2.02 clicks per
classification (docs/calibration.md; the committed volunteers' habits move it
by ~0.1 between seeds and sizes); simulate_report.json has the realised totals
by source.

Random streams: one ``numpy.random.SeedSequence(seed)`` child per stage
(galaxies, clumps, distractors, volunteers, schedule, clicks, experts, expert
clicks, export, spammers), so changing one stage's knobs does not reshuffle the
others.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from clumpscout.errors import InputError
from clumpscout.logs import timed
from clumpscout.simulation.clicks import draw_clicks
from clumpscout.simulation.config import (
    DEFAULTS,
    EXPERT_USER_ID0,
    GALAXY_FORMATS,
    SAMPLES,
    _local_index,
    _streams,
    cutout_geometry,
    resolve_config,
    stage_seed,
)
from clumpscout.simulation.sky import (
    make_clumps,
    make_distractors,
    make_galaxies,
    resolution_factors,
)
from clumpscout.simulation.volunteers import (
    fill_spammer_columns,
    make_experts,
    make_volunteers,
    serve_subjects,
)

log = logging.getLogger("clumpscout.simulation.universe")

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
    """Simulate a universe and write it to ``out_dir`` (docs/decisions.md#simulated-exports).

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
        ids = write_exports(
            out, rng["export"], start, subjects, q, clicks, ex, name=classifications_name(p)
        )

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


def classifications_name(p: dict) -> str:
    """The file name of the simulated classification export: classifications.csv, or
    classifications.csv.zst with ``compress_classifications``."""
    return "classifications.csv.zst" if p["compress_classifications"] else "classifications.csv"


def write_exports(
    out, rng, start, subjects, q, clicks, ex, layout=None, meta=None, name="classifications.csv"
) -> dict:
    """Write the classification export ``name`` (:func:`classifications_name`; the other
    spelling is removed, so no stale export remains), subjects_export.csv and
    expert_classifications.csv.

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
         "t_end": q["t"], "t_start": q["t_start"], "session": q["session"]},
        copy=False,
    )  # fmt: skip
    for other in ("classifications.csv", "classifications.csv.zst"):
        if other != name:
            (out / other).unlink(missing_ok=True)
    sx.write_classifications(
        out / name, table, clicks, names, uids, ips, vmeta, logged_in,
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


#: clicks handled at once when counting the marks of each object (memory: a block)
MARK_BLOCK = 1_000_000


def _marks_per_object(obj: pd.DataFrame, clicks: pd.DataFrame, cls_sub: np.ndarray):
    """Distinct classifications that clicked each object (real-object clicks only).

    ``clicks`` are sorted by classification, so blocks of whole classifications
    (about :data:`MARK_BLOCK` clicks each) are counted one at a time."""
    n = np.zeros(len(obj), np.int64)
    key = pd.MultiIndex.from_arrays([obj["_gal"].to_numpy(), obj["clump"], obj["distractor"]])
    cls = clicks["cls"].to_numpy()
    clump = clicks["clump"].to_numpy()
    dist = clicks["distractor"].to_numpy()
    cuts = np.searchsorted(cls, cls[np.arange(MARK_BLOCK, len(cls), MARK_BLOCK)], side="left")
    bounds = np.unique(np.r_[0, cuts, len(cls)])
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        hit = (clump[a:b] >= 0) | (dist[a:b] >= 0)
        cl = pd.DataFrame(
            {"cls": cls[a:b][hit], "clump": clump[a:b][hit], "distractor": dist[a:b][hit]}
        ).drop_duplicates()
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
        write_click_truth(
            out / "truth_clicks.parquet",
            [(clicks, q["cls_id"], q["sub"], False), (ex["clicks"], ex["cls_id"], ex["sub"], True)],
            sid,
        )
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
    spurious = clicks["source"].isin(("spurious", "star", "bulge")).to_numpy(bool)[t]
    rep: dict[str, Any] = {
        "truth_objects_by_kind": {
            str(k): int(v) for k, v in objects["kind"].value_counts().sort_index().items()
        },
        "clump_task_clicks_spurious_share": float(spurious.mean()) if len(spurious) else 0.0,
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


#: rows per row group of truth_clicks.parquet (pyarrow's default, so that the streamed file
#: is the one a whole-table write would give)
CLICK_TRUTH_ROW_GROUP = 1024 * 1024


def write_click_truth(path: Path, parts: list, sid: np.ndarray, row_group: int | None = None):
    """Write truth_clicks.parquet: the rows of :func:`_click_truth` of each part (clicks,
    classification ids, classification subjects, expert), one after the other, with
    ``task`` and ``source`` categorical, streamed one row group at a time (memory: a
    row group, not the project). With the default ``row_group``
    (:data:`CLICK_TRUTH_ROW_GROUP`) the bytes are those of writing the whole table with
    :func:`clumpscout.io.write_parquet`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from clumpscout.io import atomic_path

    groups = [_click_groups(c["cls"].to_numpy(), c["task"].to_numpy()) for c, *_ in parts]
    cats = _click_truth_categories([c for c, *_ in parts])
    ends = np.cumsum([0] + [len(c) for c, *_ in parts])
    total = int(ends[-1])
    row_group = row_group or CLICK_TRUTH_ROW_GROUP
    writer = None
    with atomic_path(path) as tmp:
        try:
            for a in range(0, max(total, 1), row_group):
                b = min(total, a + row_group)
                pieces = []
                for (clicks, cls_id, cls_gal, expert), grp, lo, hi in zip(
                    parts, groups, ends[:-1], ends[1:], strict=True
                ):
                    i0, i1 = max(a, lo) - lo, min(b, hi) - lo
                    if i1 > i0 or (total == 0 and not pieces):
                        sl = slice(int(i0), int(max(i1, i0)))
                        pieces.append(
                            _click_truth(clicks.iloc[sl], cls_id, cls_gal, sid, expert, grp[sl])
                        )
                ct = pd.concat(pieces, ignore_index=True) if len(pieces) > 1 else pieces[0]
                for c in ("task", "source"):
                    ct[c] = ct[c].astype(cats[c])
                table = pa.Table.from_pandas(ct, preserve_index=False)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema, compression="zstd")
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()


def _click_groups(cls: np.ndarray, task: np.ndarray) -> np.ndarray:
    """Index of each click within its classification and task (clicks sorted by both)."""
    key = cls * 2 + task
    first = np.r_[True, key[1:] != key[:-1]]
    grp_start = np.maximum.accumulate(np.where(first, np.arange(len(cls)), 0))
    return np.arange(len(cls)) - grp_start


def _click_truth_categories(frames: list) -> dict:
    """The categories of ``task`` and ``source`` over every click (as a whole-table
    ``astype("category")`` gives them)."""
    task = np.unique(np.concatenate([f["task"].to_numpy() for f in frames]))
    src = pd.concat([f["source"].drop_duplicates() for f in frames], ignore_index=True)
    return {
        "task": pd.Series(np.where(task == 0, "T0", "T1")).astype("category").dtype,
        "source": src.astype("category").dtype,
    }


def _click_truth(clicks, cls_id, cls_gal, sid, expert, click_index):
    c = clicks["cls"].to_numpy()
    task = clicks["task"].to_numpy()
    return pd.DataFrame(
        {
            "classification_id": cls_id[c],
            "subject_id": sid[cls_gal[c]],
            "expert": np.full(len(c), expert),
            "task": np.where(task == 0, "T0", "T1"),
            "click": click_index,
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
    "classifications_name",
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
