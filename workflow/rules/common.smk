import hashlib
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

# the project folder (two levels above this file: a Snakefile elsewhere may include it)
ROOT = Path(workflow.current_basedir).parents[1]
SRC = ROOT / "src" / "clumpscout"
# the project's own package first (a copied project checks its config with its own schema)
if str(SRC.parent) not in sys.path:
    sys.path.insert(0, str(SRC.parent))
from clumpscout import config as config_schema
from clumpscout.codedeps import code_digest as _code_digest


def check_config(cfg):
    """Validate the config against src/clumpscout/config.schema.yaml, fill in every default
    (in place) and check that every input path exists; a problem is one line naming the
    key (snakemake's own message appends the whole schema). decisions.md#one-config-source
    """
    try:
        config_schema.check(cfg)
    except config_schema.ConfigError as exc:
        raise WorkflowError(exc.message) from None


check_config(config)

# every output goes below this folder (decisions.md#results-per-config)
RESULTS = config["results_dir"].rstrip("/")


def code_digest(script):
    """Digest of scripts/<script>.py and every package file it runs (found from its imports,
    lazy ones included, by clumpscout.codedeps). Passed as a param so that editing any of
    that code re-runs the rule, and nothing else does."""
    return _code_digest(ROOT / "scripts" / f"{script}.py", SRC.parent, ROOT)


def section(name):
    """A config section (validated, with every default filled in) as a plain dict."""
    return dict(config[name])


def seed_for(stage):
    """Derive a stage seed from the master seed, deterministically."""
    h = hashlib.sha256(f"{config['seed']}:{stage}".encode()).hexdigest()
    return int(h[:8], 16)


SIMULATED = config["source"] == "simulate"
# source clicks: a flattened clicks table (export.clicks) instead of a Zooniverse export
FLAT = config["source"] == "clicks"
# simulate.kind counting: a point-marking project without galaxies
# (clumpscout.simulation.counting). Its galaxies.csv is no catalogue (no R90, no PSF FWHM):
# every subject gets the box side export.box_side, and there are no galaxies to render.
COUNTING = SIMULATED and config["simulate"]["kind"] == "counting"
HAS_EXPERTS = SIMULATED or bool(config["export"]["expert_classifications"])
NS = list(config["subsample"]["n"])
IMAGES = SIMULATED and not COUNTING and config["images"]["enabled"]
if COUNTING and config["images"]["enabled"]:
    logger.warning(
        "simulate.kind: counting has no galaxy images: images.enabled ignored"
    )

# Both consensus models run for every n (aggregate.model only sets the CLI / API default):
# generative (the well-posed model) and paper (the paper's likelihood, the reproduction).
MODELS = ["generative", "paper"]
MODEL_RE = "|".join(MODELS)
# the model behind the paper's figures, the photometry and the count comparison (appendix)
PAPER_MODEL = "paper"
# the gold standard on which the default model's p_fp is calibrated (docs/decisions.md#gold-standard):
# the experts' marks (rule gold), the user's table, or none
GOLD = config["gold"]["table"]
if GOLD is None or GOLD == "none" or (GOLD == "experts" and not HAS_EXPERTS):
    GOLD_FILE = None
elif GOLD == "experts":
    GOLD_FILE = f"{RESULTS}/gold/gold.csv"
else:
    GOLD_FILE = GOLD


def gold_of(model):
    """The gold standard of an aggregation by ``model``: the default model's only (the
    paper's model keeps the paper's p_fp for the reproduction)."""
    if model != "generative" or GOLD_FILE is None:
        return {}
    return {"gold": GOLD_FILE}


def gold_inputs(models):
    """The gold-standard inputs of a job that aggregates every model of ``models`` (the
    union of their :func:`gold_of`; one file at most: the project's gold)."""
    return {k: v for m in models for k, v in gold_of(m).items()}


def gold_settings(model="generative"):
    """How the gold standard of an aggregation by ``model`` is read and checked (config
    gold.frame, gold.on_implausible; docs/decisions.md#gold-checks); {} without one."""
    if not gold_of(model):
        return {}
    return {k: config["gold"][k] for k in ("frame", "on_implausible")}


# what the aggregations are compared with: the experts' clicks, the simulated truth
REFERENCES = (["experts"] if HAS_EXPERTS else []) + (["truth"] if SIMULATED else [])
REFERENCE_RE = "|".join(REFERENCES) or "none"
BASELINE_N = config["baseline"]["n"]
# the tables of a comparison, experts and truth alike: curve, summary, p_fp calibration
COMPARE_TABLES = ["curve", "summary", "calibration"]
# the report of the run, built by the last rule (decisions.md#report-in-dag)
REPORT = f"{RESULTS}/report.html"


def model_params(model):
    """The model's hyper-parameters: the `aggregate:` section with `model` set (per_tool,
    a run option, is passed on its own)."""
    params = {k: v for k, v in config["aggregate"].items() if k != "per_tool"}
    return {**params, "model": model}


def aggregation_fit(model, outputs):
    """One model's fit in a job of scripts/aggregate.py (which fits its list of them in
    turn): the model, its hyper-parameters, its gold settings ({}: no gold) and the names of
    the rule's outputs it writes (all in one folder)."""
    return {
        "model": model,
        "aggregate": model_params(model),
        "gold": gold_settings(model),
        "outputs": list(outputs),
    }


def agg_path(model, n, name):
    """An aggregation output: results/aggregate/{model}/n{n}/{name}."""
    return f"{RESULTS}/aggregate/{model}/n{n}/{name}"


def universe(name):
    return f"{RESULTS}/universe/{name}"


# the simulated classification export: zstd-compressed with simulate.compress_classifications
# (the name clumpscout.simulation.export.classifications_name gives; extract reads either)
SIM_CLASSIFICATIONS = (
    "classifications.csv.zst"
    if config["simulate"]["compress_classifications"]
    else "classifications.csv"
)


# Inputs: the simulated universe's files or the user's export files (checked above; as
# rule inputs, a changed path re-runs what reads it).
def input_classifications():
    if SIMULATED:
        return universe(SIM_CLASSIFICATIONS)
    if FLAT:
        return config["export"]["clicks"]
    return config["export"]["classifications"]


def input_subjects_export():
    if SIMULATED:
        return universe("subjects_export.csv")
    if FLAT:
        return []
    return config["export"]["subjects"]


def input_catalogue():
    """The galaxy catalogue; none (box side = export.box_side) for a counting universe."""
    if COUNTING:
        return []
    if SIMULATED:
        return universe("galaxies.csv")
    return config["export"]["catalogue"] or []


def input_expert_classifications():
    if SIMULATED:
        return universe("expert_classifications.csv")
    return config["export"]["expert_classifications"] or []


def reference_inputs(n):
    """The reference files of a comparison at subsample n, or at every n of a list (a
    function of the wildcards): the experts' clicks, or the true clumps and the
    subsample's (or subsamples') subjects."""

    def subsample(k):
        return f"{RESULTS}/subsamples/n{k}/boxes.parquet"

    def inputs(wildcards):
        if wildcards.reference == "experts":
            return {"points": f"{RESULTS}/clicks/expert_clicks.parquet"}
        subjects = [subsample(k) for k in n] if isinstance(n, list) else subsample(n)
        return {"truth": universe("truth_clumps.csv"), "subjects": subjects}

    return inputs


def report_items():
    """(output, caption file, category) of every report-marked output of a rule without
    wildcards; caption paths are relative to workflow/rules/, as in report(...)."""
    rules_dir = ROOT / "workflow" / "rules"
    items = []
    for r in workflow.rules:
        if r.has_wildcards():
            continue
        for f in r.output:
            flag = getattr(f, "flags", {}).get("report")
            if flag is None:
                continue
            caption = (rules_dir / flag.caption).resolve() if flag.caption else None
            items.append(
                {
                    "path": str(f),
                    "caption": str(caption) if caption else None,
                    "category": flag.category,
                }
            )
    return sorted(items, key=lambda it: (str(it["category"]), it["path"]))


def final_targets():
    """Every final output of the workflow (the `all` rule), in one list.

    Called at the end of the Snakefile, after every include; the figure names come from
    figures.smk's `fig_targets`, the flux figures from the outputs of flux_figures.
    """
    targets = [
        f"{RESULTS}/boxes/boxes.parquet",
        *([f"{RESULTS}/clicks/expert_clicks.parquet"] if HAS_EXPERTS else []),
        *expand(
            f"{RESULTS}/aggregate/{{model}}/n{{n}}/{{f}}",
            model=MODELS,
            n=NS,
            f=["labels.parquet", "subjects.parquet", "volunteers.parquet"]
            + ["assignments.parquet"],
        ),
        *expand(
            f"{RESULTS}/compare/{{model}}/{{reference}}_{{t}}.csv",
            model=MODELS,
            reference=REFERENCES,
            t=COMPARE_TABLES,
        ),
        *[
            f"{RESULTS}/baseline/{name}"
            for name in (
                "count_difference.csv",
                "meanshift_labels.parquet",
                "single_linkage_labels.parquet",
                "dbscan_labels.parquet",
            )
        ],
        *expand(f"{RESULTS}/baseline/{{reference}}_summary.csv", reference=REFERENCES),
        # the ledger re-reads a Zooniverse export; a flattened clicks table has none
        *(
            []
            if FLAT
            else expand(
                f"{RESULTS}/ledger/{{model}}.{{ext}}", model=MODELS, ext=["csv", "json"]
            )
        ),
        *[f"{FIG}/{name}.{ext}" for name in fig_targets for ext in ("png", "pdf")],
        *[f"{PROJ}/{name}.{ext}" for name in PROJECT_NAMES for ext in ("png", "pdf")],
        *rules.catalogue.output,
        f"{RESULTS}/headline.csv",
        f"{RESULTS}/headline.html",
        REPORT,
    ]
    # the replay needs arrival times, which a flattened clicks table may lack
    # (docs/decisions.md#live-retirement): run `clumpscout replay` on it by hand
    if not FLAT:
        targets.append(f"{RESULTS}/replay/replay.csv")
    if IMAGES:
        targets += [f"{IMG}/sim/cutouts.parquet", f"{IMG}/photometry/truth.parquet"]
        targets += [
            f for k, f in rules.flux_figures.output.items() if k.endswith("_png")
        ]
    if config["images"]["real_demo"]:
        targets += [f"{IMG}/real/fwhm.csv", f"{IMG}/real/montage.png"]
    return list(dict.fromkeys(targets))
