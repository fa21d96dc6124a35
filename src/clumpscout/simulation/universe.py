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

from clumpscout.config import add_setting, default
from clumpscout.errors import InputError
from clumpscout.logs import timed
from clumpscout.simulation.clicks import draw_clicks
from clumpscout.simulation.config import (
    DEFAULTS,
    GALAXY_FORMATS,
    SAMPLES,
    cutout_geometry,
    local_index,
    random_streams,
    resolve_config,
    stage_seed,
)
from clumpscout.simulation.counting import simulate_counting
from clumpscout.simulation.export import (
    classifications_name,
    subject_ids,
    subjects_frame,
    write_exports,
    write_report,
    write_table_csv,
)
from clumpscout.simulation.sky import (
    make_clumps,
    make_distractors,
    make_galaxies,
    resolution_factors,
)
from clumpscout.simulation.truth import objects_report, write_common_truth
from clumpscout.simulation.volunteers import (
    fill_spammer_columns,
    make_experts,
    make_volunteers,
    plan_experts,
    queue_report,
    run_queue,
)

log = logging.getLogger("clumpscout.simulation.universe")

# --------------------------------------------------------------------------- names


# --------------------------------------------------------------------------- the universe


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
        return simulate_counting(p, seed, out_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = random_streams(seed)
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
    write_report(report, out)
    return report


def _write_galaxy_truth(out: Path, gal, clumps, distractors) -> None:
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
    obj.insert(1, "object", local_index(np.bincount(obj["_gal"].to_numpy(), minlength=len(sid))))
    return obj


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


# --------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        required=True,
        help="YAML with a `simulate:` section (and optional top-level `seed`), or just the section",
    )
    parser.add_argument("--out", required=True, help="output folder")
    add_setting(
        parser,
        "seed",
        unset="derived from the file's top-level seed, else from the schema's, exactly as the "
        "workflow derives the seed of its simulate job",
        note="here the simulation's own seed",
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
        seed = args.seed
    elif seed is None:  # the file has no seed: the workflow's, from the schema's default
        seed = stage_seed(default("seed"), "simulate")
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
