# Helpers of workflow/rules/figures.smk (figures, headline numbers, report wiring).


FIG = f"{RESULTS}/figures"
FIGCFG = section("figures")
FIG_N_REF = FIGCFG.get("n_ref") if FIGCFG.get("n_ref") in NS else max(NS)
FIG_BASE_N = globals().get("BASELINE_N", FIG_N_REF)
FIG_SEED = seed_for("figures")

CAT_PROPS = "1. Aggregated clump properties (§6.2)"
CAT_EXPERTS = "2. Comparison with experts (§6.3)"
CAT_VOLUNTEERS = "3. Volunteer skills (§6.4)"
CAT_RISK = "4. Subject risk and retirement (§6.5)"
CAT_EXAMPLES = "5. Examples (§6, fig. agg_examples)"
CAT_MEANSHIFT = "6. MeanShift comparison (appendix)"
CAT_TRUTH = "7. Against the simulated truth (not in the paper)"
CAT_METHODS = "8. Both models and the baselines side by side (not in the paper)"
CAT_HEADLINE = "0. Headline numbers"


def fig_cfg(*keys):
    """The figure settings a rule uses (defaults in clumpscout.figures.paper.DEFAULTS)."""
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
        from clumpscout.figures.paper import report_labels

        return report_labels(name, output.json)

    return labels


def fig_out(name, category):
    """PNG (in the report, with workflow/report/<name>.rst as caption), PDF and numbers."""
    return {
        "png": report(
            f"{FIG}/{name}.png",
            caption=f"../report/{name}.rst",
            category=category,
            labels=fig_labels(name),
        ),
        "pdf": f"{FIG}/{name}.pdf",
        "json": f"{FIG}/{name}.json",
    }


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
