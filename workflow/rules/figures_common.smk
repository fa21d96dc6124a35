# Helpers of workflow/rules/figures.smk (figures, headline numbers, report wiring).

FIG = f"{RESULTS}/figures"
FIGCFG = section("figures")
FIG_N_REF = FIGCFG.get("n_ref") if FIGCFG.get("n_ref") in NS else max(NS)
FIG_BASE_N = BASELINE_N
FIG_SEED = seed_for("figures")

# the figure registry (the project's own package: common.smk puts its src/ first on the path)
from clumpscout.figures import registry as FIGURE_REGISTRY

CAT_HEADLINE = FIGURE_REGISTRY.CAT_HEADLINE
# references the run has: expert classifications, a simulated truth
FIG_REFERENCES = [
    ref
    for ref, present in (
        ("experts", HAS_EXPERTS),
        ("truth", SIMULATED),
        ("gold", GOLD_FILE is not None),
    )
    if present
]
# how figures and headline speak of the data and whether they compare with the paper:
# clump_scout (a simulated galaxy universe, or figures.project: clump_scout) or generic
FIG_WORDING = FIGURE_REGISTRY.wording(
    config["source"], section("simulate").get("kind"), FIGCFG.get("project")
)
# a project that is not Clump Scout gets the project report (project.smk) instead of the
# paper's figures (decisions.md#project-report)
PROJECT = FIG_WORDING == "generic"


def fig_cfg(*keys):
    """The figure settings a rule uses (defaults in clumpscout.figures.common.DEFAULTS)."""
    return {k: FIGCFG[k] for k in ("dpi",) + keys if k in FIGCFG}


def fig_labels(name):
    """Report-time columns of a figure: its key numbers next to the paper's.

    Evaluated by `snakemake --report` only (from the figure's JSON), never while running.
    """

    def labels(wildcards, output):
        import sys

        src = str(SRC.parent)
        if src not in sys.path:
            sys.path.insert(0, src)
        from clumpscout.report.figure_labels import report_labels

        return report_labels(name, output.json)

    return labels


def fig_out(fig):
    """PNG (in the report, with workflow/report/<name>.rst as caption), PDF and numbers."""
    name = fig.name
    return {
        "png": report(
            f"{FIG}/{name}.png",
            caption=f"../report/{name}.rst",
            category=fig.category,
            labels=fig_labels(name),
        ),
        "pdf": f"{FIG}/{name}.pdf",
        "json": f"{FIG}/{name}.json",
    }


def fig_inputs(fig):
    """The input files of a registered figure (clumpscout.figures.registry.input_paths)."""
    return FIGURE_REGISTRY.input_paths(
        fig,
        results=RESULTS,
        ns=NS,
        n_ref=FIG_N_REF,
        n_base=FIG_BASE_N,
        model=PAPER_MODEL,
        images=subject_images(),
        have=FIG_REFERENCES,
    )


# The paper's figures show the paper model (the reproduction); the method comparison
# figure puts both models and the baselines side by side.
def per_n(path, model=PAPER_MODEL):
    return [agg_path(model, n, path) for n in NS]


def agg_ref(name, n=None, model=PAPER_MODEL):
    return agg_path(model, FIG_N_REF if n is None else n, name)


def compare_table(reference, name, model=PAPER_MODEL):
    """A collected comparison table: results/compare/{model}/{reference}_{name}.csv."""
    return f"{RESULTS}/compare/{model}/{reference}_{name}.csv"


def subject_images():
    """Subject image tables (`.../cutouts.parquet`) made by the images rules, if any.

    Optional input of the example figures: subjects without an image get a blank frame.
    """
    if not IMAGES:
        return []
    found = []
    for r in workflow.rules:
        if r.has_wildcards():
            continue
        for f in r.output:
            f = str(f)
            if f.startswith(f"{RESULTS}/images/") and f.endswith("cutouts.parquet"):
                found.append(f)
    return sorted(set(found))
