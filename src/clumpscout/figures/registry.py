"""The one list of figures: what each reads, which settings it uses, where the report
shows it, and what the paper reports for it.

Everything else follows this table: the workflow generates one rule per figure from it
(workflow/rules/figures.smk), ``clumpscout figures`` finds a results folder's inputs with
:func:`input_paths`, :func:`clumpscout.figures.paper.build` dispatches to the figure's
builder, the report's *paper* column reads :attr:`Figure.paper`, and the headline table's
``paper`` column reads :data:`PAPER` (built from :attr:`Figure.numbers` and the dataset
numbers of §6). Pure data: importing it loads no plotting library (the workflow reads it
while parsing).

Inputs are ``name -> (kind, argument, needs)`` with kinds

=============  =================================================================
``per_n``      aggregation output ``argument`` of the paper model, one file per n
``ref``        aggregation output ``argument`` at the reference n (``n_ref``)
``base``       aggregation output ``argument`` at the baseline's n
``results``    ``results/<argument>``; ``{n_base}`` is the baseline's n
``compare``    ``results/compare/<model>/<argument>`` (collected comparison tables)
``images``     the subject image tables, when there are images (else none)
=============  =================================================================

and ``needs`` ``None`` (always), ``"experts"`` or ``"truth"`` (only when the run has
expert classifications / a simulated truth). A figure whose own :attr:`Figure.needs`
is not met is not made; ``"any"`` means at least one of its inputs is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

CAT_HEADLINE = "0. Headline numbers"
CAT_PROPS = "1. Aggregated clump properties (§6.2)"
CAT_EXPERTS = "2. Comparison with experts (§6.3)"
CAT_VOLUNTEERS = "3. Volunteer skills (§6.4)"
CAT_RISK = "4. Subject risk and retirement (§6.5)"
CAT_EXAMPLES = "5. Examples (§6, fig. agg_examples)"
CAT_MEANSHIFT = "6. MeanShift comparison (appendix)"
CAT_TRUTH = "7. Against the simulated truth (not in the paper)"
CAT_METHODS = "8. Both models and the baselines side by side (not in the paper)"
CAT_GOLD = "9. Against the project's gold standard (not in the paper)"

#: the paper's wording (Clump Scout: clumps in galaxies) and a generic project's
WORDS: dict[str, dict[str, str]] = {
    "clump_scout": {
        "object": "clump",
        "objects": "clumps",
        "subject": "galaxy",
        "subjects": "galaxies",
    },
    "generic": {"object": "object", "objects": "objects", "subject": "image", "subjects": "images"},
}
#: no comparison with the paper outside Clump Scout data (the report's *paper* column)
NOT_COMPARABLE = "– (not Clump Scout data)"


@dataclass(frozen=True)
class Figure:
    """One figure: output stem ``results/figures/<name>.{png,pdf,json}``."""

    name: str
    #: ``<module>.<function>`` in clumpscout.figures: ``builder(inputs, stem, params)``
    builder: str
    inputs: Mapping[str, tuple[str, str | None, str | None]]
    #: the keys of the config section ``figures`` it uses (``dpi`` always)
    settings: tuple[str, ...]
    category: str
    #: one line: what the figure shows (the long caption is workflow/report/<name>.rst)
    caption: str
    #: what the paper reports for it, as the report's *paper* column shows it
    paper: str
    #: the paper's values by (quantity, n, subset) for the headline table (None = any)
    numbers: Mapping[tuple[str, int | None, str | None], str] = field(default_factory=dict)
    needs: str | None = None
    #: inputs passed as lists even when the rule has one file
    lists: tuple[str, ...] = ()
    mem_mb: int = 2000
    #: picks example subjects with the figures seed
    seeded: bool = False
    #: reference of a purity-completeness figure (``experts`` / ``truth``)
    reference: str = "experts"


_MS_INPUTS = {
    "count_difference": ("results", "baseline/count_difference.csv", None),
    "boxes": ("results", "subsamples/n{n_base}/boxes.parquet", None),
    "labels": ("base", "labels.parquet", None),
    "meanshift": ("results", "baseline/meanshift_labels.parquet", None),
    "images": ("images", None, None),
}

FIGURES: tuple[Figure, ...] = (
    Figure(
        "clump_fpp_dist",
        "clumps.build_pfp",
        {"labels": ("per_n", "labels.parquet", None)},
        ("n_ref", "inset_max"),
        CAT_PROPS,
        "clump false-positive probability p_fp at n_ref and versus n",
        "median n=3: ≈0.04 → n=20: ≈5e-5; n=20: ≈90% outside [0.2, 0.8]",
        {("median_p_fp", 3, None): "≈0.04", ("median_p_fp", 20, None): "≈5e-5"},
        lists=("labels",),
    ),
    Figure(
        "clump_variance_dist",
        "clumps.build_psigma",
        {"labels": ("per_n", "labels.parquet", None)},
        ("n_ref", "inset_max"),
        CAT_PROPS,
        "clump location variance probability p_σ at n_ref and versus n",
        "median n=3: ≈0.05 → n=20: ≈4e-4; all ≲ 0.3 at n=20",
        {("median_p_sigma", 3, None): "≈0.05", ("median_p_sigma", 20, None): "≈4e-4"},
        lists=("labels",),
    ),
    Figure(
        "clump_location_vs_pfp",
        "clumps.build_positions",
        {
            "labels": ("ref", "labels.parquet", None),
            "subjects": ("results", "subjects/subjects.parquet", None),
        },
        ("n_ref", "position_bins", "position_radius"),
        CAT_PROPS,
        "clump positions in normalised image coordinates per p_fp bin",
        "p_fp ≲ 0.5: 0.1% outside R = 0.25; p_fp ≳ 0.5: ~1%",
    ),
    Figure(
        "worker_skill_evolution",
        "volunteers.build_skills",
        {"volunteers": ("ref", "volunteers.parquet", None)},
        ("n_ref",),
        CAT_VOLUNTEERS,
        "subjects per volunteer and volunteer skills versus subjects inspected",
        "20,999 volunteers; median 3 subjects; ≈95% < 10; 176 > 200",
        {
            ("median_subjects_per_volunteer", None, None): "3",
            ("fraction_volunteers_below_10_subjects", None, None): "≈0.95",
        },
    ),
    Figure(
        "subject_risk_param_evolution",
        "risk.build_risk",
        {
            "subjects": ("per_n", "subjects.parquet", None),
            "labels": ("per_n", "labels.parquet", None),
        },
        ("p_fp_cut",),
        CAT_RISK,
        "subject risk components N_fp, N_fp (filtered), N_fn, N_σ versus n",
        "N_fp > 1: peak ~10% (n=15), ~8% (n=20); filtered ≲ 0.1%; N_fn > 1 → ~2%; N_σ > 1 < 0.05%",
        lists=("subjects", "labels"),
        mem_mb=3000,
    ),
    Figure(
        "clumps_per_galaxy_filtered",
        "risk.build_clumps_per_galaxy",
        {
            "subjects": ("per_n", "subjects.parquet", None),
            "labels": ("per_n", "labels.parquet", None),
        },
        ("p_fp_cut",),
        CAT_RISK,
        "clumps per galaxy versus n, all and p_fp < p_fp_cut",
        "slow growth for n > 7: +0.5 clumps (p_fp < 0.85) per galaxy from n=7 to 20",
        lists=("subjects", "labels"),
        mem_mb=3000,
    ),
    Figure(
        "retirement_reason_fraction",
        "risk.build_retirement",
        {"subjects": ("per_n", "subjects.parquet", None)},
        (),
        CAT_RISK,
        "fraction of subjects per retirement status versus n",
        "> 90% retired, 7-9% stale, unretired 0.9% (n=3) → < 0.1% (n=20)",
        {
            ("fraction_retired_any", None, None): ">0.9",
            ("fraction_stale", None, None): "≈0.07–0.09",
            ("fraction_unretired", 3, None): "0.009",
            ("fraction_unretired", 20, None): "<0.001",
        },
        lists=("subjects",),
    ),
    Figure(
        "agg_examples",
        "examples.build_agg_examples",
        {
            "assignments": ("ref", "assignments.parquet", None),
            "labels": ("ref", "labels.parquet", None),
            "images": ("images", None, None),
        },
        ("n_ref", "n_examples", "p_fp_dashed"),
        CAT_EXAMPLES,
        "example subjects: volunteer boxes, their clusters and the final labels",
        "representative examples",
        lists=("images",),
        mem_mb=4000,
        seeded=True,
    ),
    Figure(
        "agg_v_ms_dist",
        "meanshift.build_difference",
        {"count_difference": ("results", "baseline/count_difference.csv", None)},
        (),
        CAT_MEANSHIFT,
        "per-subject clump count difference, ours − MeanShift",
        "our framework finds more clumps for the majority of subjects",
        {("fraction_ours_more", None, None): ">0.5 (majority)"},
        mem_mb=1000,
    ),
    Figure(
        "agg_v_ms_more_examples",
        "meanshift.build_more",
        _MS_INPUTS,
        ("n_examples", "p_fp_dashed"),
        CAT_MEANSHIFT,
        "subjects where our framework finds more clumps than MeanShift",
        "representative examples",
        lists=("images",),
        seeded=True,
    ),
    Figure(
        "agg_v_ms_less_examples",
        "meanshift.build_fewer",
        _MS_INPUTS,
        ("n_examples", "p_fp_dashed"),
        CAT_MEANSHIFT,
        "subjects where MeanShift finds more clumps than our framework",
        "representative examples",
        lists=("images",),
        seeded=True,
    ),
    Figure(
        "pseudo_roc_volunteer_counts",
        "experts.build_pseudo_roc",
        {
            "curves": ("compare", "experts_curve.csv", None),
            "summary": ("compare", "experts_summary.csv", None),
        },
        (),
        CAT_EXPERTS,
        "purity versus completeness against the experts for every n",
        "optimal C rises and P falls with n; best compromise n ≈ 7; "
        "normal, n=20, p*=1: C ≈ 0.97, P ≈ 0.35",
        {("completeness_p1", 20, "normal"): "≈0.97", ("purity_p1", 20, "normal"): "≈0.35"},
        needs="experts",
        mem_mb=1000,
    ),
    Figure(
        "volunteer_normal_set_fpp_dist",
        "experts.build_true_false",
        {
            "labels": ("ref", "labels.parquet", None),
            "points": ("results", "clicks/expert_clicks.parquet", None),
        },
        ("n_ref", "inset_max", "tp_cut"),
        CAT_EXPERTS,
        "p_fp of empirically true and false positives (normal clumps)",
        "95% of true vs 68% of false positives have p_fp < 0.3",
        needs="experts",
    ),
    Figure(
        "pseudo_roc_truth",
        "experts.build_pseudo_roc",
        {
            "curves": ("compare", "truth_curve.csv", None),
            "summary": ("compare", "truth_summary.csv", None),
        },
        (),
        CAT_TRUTH,
        "purity versus completeness against the simulated truth for every n",
        "not measurable (no truth)",
        needs="truth",
        mem_mb=1000,
        reference="truth",
    ),
    Figure(
        "pfp_calibration_truth",
        "truth.build_calibration",
        {"calibration": ("compare", "truth_calibration.csv", None)},
        ("n_ref", "calibration_min_labels"),
        CAT_TRUTH,
        "calibration of p_fp against the simulated truth",
        "not measurable (no truth)",
        needs="truth",
        mem_mb=1000,
    ),
    Figure(
        "gold_reliability",
        "gold.build_gold_reliability",
        {"labels": ("results", "aggregate/generative/n{n_base}/labels.parquet", "gold")},
        ("calibration_min_labels",),
        CAT_GOLD,
        "calibration of the default model's p_fp against the gold standard (cross-fitted)",
        "not in the paper",
        needs="gold",
        mem_mb=1000,
    ),
    Figure(
        "gold_counts",
        "gold.build_gold_counts",
        {"subjects": ("results", "aggregate/generative/n{n_base}/subjects.parquet", "gold")},
        (),
        CAT_GOLD,
        "expected counts against the experts' counts on the gold subjects (cross-fitted)",
        "not in the paper",
        needs="gold",
        mem_mb=1000,
    ),
    Figure(
        "method_comparison",
        "truth.build_method_comparison",
        {
            "truth_curves": ("results", "baseline/truth_curve.csv", "truth"),
            "truth_summary": ("results", "baseline/truth_summary.csv", "truth"),
            "experts_curves": ("results", "baseline/experts_curve.csv", "experts"),
            "experts_summary": ("results", "baseline/experts_summary.csv", "experts"),
        },
        (),
        CAT_METHODS,
        "both consensus models and the three baselines side by side",
        "not in the paper (MeanShift counts only)",
        needs="any",
        mem_mb=1000,
    ),
)
BY_NAME: dict[str, Figure] = {f.name: f for f in FIGURES}

#: the dataset and label counts of §6 (no figure of their own)
DATASET_NUMBERS: dict[tuple[str, int | None, str | None], str] = {
    ("subjects", None, None): "85286",
    ("annotations", None, None): "1739259",
    ("clicks_all_tasks", None, None): "3561454",
    ("volunteers", None, None): "20999",
    ("galaxies_with_clumps", None, None): "44126",
    ("clumps", None, None): "128100",
}
#: what the paper says (§6), by (quantity, n, subset); n / subset None = any
PAPER: dict[tuple[str, int | None, str | None], str] = {
    **DATASET_NUMBERS,
    **{k: v for f in FIGURES for k, v in f.numbers.items()},
}


def figure(name: str) -> Figure:
    """The registered figure ``name`` (KeyError naming the known ones)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown figure {name!r}; known: {', '.join(BY_NAME)}") from None


def wording(source: str, kind: str | None = None, project: str | None = None) -> str:
    """``clump_scout`` or ``generic``: how figures and the headline speak of the data, and
    whether they are compared with the paper (docs/decisions.md#wording-follows-the-data).

    ``project`` (config ``figures.project``) wins when it is ``clump_scout`` or
    ``generic``; else (``auto`` / absent) a simulated galaxy universe is Clump Scout and
    everything else (a counting universe, any export) is a generic project."""
    if project in WORDS:
        return str(project)
    return "clump_scout" if source == "simulate" and (kind or "galaxy") == "galaxy" else "generic"


def words(project: str | None) -> dict[str, str]:
    """The nouns of ``project`` (:data:`WORDS`; Clump Scout's when unknown)."""
    return WORDS.get(project or "clump_scout", WORDS["clump_scout"])


def available(fig: Figure, have: Iterable[str]) -> bool:
    """Whether a run with references ``have`` (``experts`` / ``truth`` / ``gold``) makes ``fig``."""
    have = set(have)
    if fig.needs is None:
        return True
    if fig.needs == "any":
        return any(n in have for _, _, n in fig.inputs.values() if n)
    return fig.needs in have


def input_paths(
    fig: Figure,
    *,
    results: str,
    ns: Sequence[int],
    n_ref: int,
    n_base: int,
    model: str,
    images: Sequence[str],
    have: Iterable[str],
) -> dict[str, str | list[str]]:
    """The input files of ``fig`` in a results folder laid out as the workflow does
    (strings ``<results>/...``, identical to the rules' own paths)."""
    have = set(have)

    def agg(n: int, name: str) -> str:
        return f"{results}/aggregate/{model}/n{n}/{name}"

    out: dict[str, str | list[str]] = {}
    for key, (kind, arg, needs) in fig.inputs.items():
        if needs and needs not in have:
            continue
        if kind == "per_n":
            out[key] = [agg(n, arg) for n in ns]
        elif kind == "ref":
            out[key] = agg(n_ref, arg)
        elif kind == "base":
            out[key] = agg(n_base, arg)
        elif kind == "results":
            out[key] = f"{results}/{arg.format(n_base=n_base)}"
        elif kind == "compare":
            out[key] = f"{results}/compare/{model}/{arg}"
        elif kind == "images":
            out[key] = list(images)
        else:
            raise ValueError(f"figure {fig.name}: unknown input kind {kind!r}")
    return out
