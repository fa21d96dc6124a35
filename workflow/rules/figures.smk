# Every figure of §6 and the appendix and the headline numbers
# (clumpscout.report.headline); the report rule (report.smk) gathers them with their
# captions into report.html.
#
# One rule per figure, generated from clumpscout.figures.registry (its inputs, settings,
# report category and the paper's numbers). Each rule's params carry only the figure settings
# it uses (config section `figures`), so a figure-only change re-runs just the figures that
# use it; `code` tracks the package's code.


report: "../report/workflow.rst"


include: "figures_common.smk"


fig_targets = []


for _fig in FIGURE_REGISTRY.FIGURES:
    if PROJECT or not FIGURE_REGISTRY.available(_fig, FIG_REFERENCES):
        continue

    rule:
        name:
            f"fig_{_fig.name}"
        input:
            **fig_inputs(_fig),
        output:
            **fig_out(_fig),
        log:
            f"{RESULTS}/logs/figures/{_fig.name}.log",
        benchmark:
            f"{RESULTS}/benchmarks/fig_{_fig.name}.tsv"
        conda:
            "../../envs/figures.yaml"
        threads: 1
        resources:
            mem_mb=_fig.mem_mb,
            runtime=10,
        params:
            figure=_fig.name,
            ns=NS,
            lists=list(_fig.lists),
            figures=fig_cfg(*_fig.settings),
            wording=FIG_WORDING,
            seed=FIG_SEED if _fig.seeded else 0,
            reference=_fig.reference,
            code=code_digest("figures"),
        script:
            "../../scripts/figures.py"

    fig_targets.append(_fig.name)


rule headline:
    input:
        clicks=f"{RESULTS}/clicks/clicks.parquet",
        clicks_report=f"{RESULTS}/clicks/clicks_report.json",
        labels=per_n("labels.parquet"),
        subjects=per_n("subjects.parquet"),
        volunteers=agg_ref("volunteers.parquet"),
        count_difference=f"{RESULTS}/baseline/count_difference.csv",
        experts_summary=(compare_table("experts", "summary") if HAS_EXPERTS else []),
        truth_summary=compare_table("truth", "summary") if SIMULATED else [],
        truth=universe("truth_clumps.csv") if SIMULATED else [],
        methods_experts=(
            f"{RESULTS}/baseline/experts_summary.csv" if HAS_EXPERTS else []
        ),
        methods_truth=f"{RESULTS}/baseline/truth_summary.csv" if SIMULATED else [],
    output:
        csv=f"{RESULTS}/headline.csv",
        html=report(
            f"{RESULTS}/headline.html",
            caption="../report/headline.rst",
            category=CAT_HEADLINE,
        ),
    log:
        f"{RESULTS}/logs/headline.log",
    benchmark:
        f"{RESULTS}/benchmarks/headline.tsv"
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        ns=NS,
        n_ref=FIG_N_REF,
        model=PAPER_MODEL,
        wording=FIG_WORDING,
        code=code_digest("headline"),
    script:
        "../../scripts/headline.py"


# The gold standard against the volunteers (docs/decisions.md#gold-checks): the default
# model's gold check at the baselines' n as a table in the report's gold section, and its
# warnings (at every n) at the top of the report.
if GOLD_FILE is not None and not PROJECT:

    rule gold_agreement:
        input:
            reports=per_n("report.json", model="generative"),
        output:
            html=report(
                f"{RESULTS}/gold/agreement.html",
                caption="../report/gold_agreement.rst",
                category=FIGURE_REGISTRY.CAT_GOLD,
            ),
            csv=f"{RESULTS}/gold/agreement.csv",
            json=f"{RESULTS}/gold/agreement.json",
        log:
            f"{RESULTS}/logs/gold_agreement.log",
        benchmark:
            f"{RESULTS}/benchmarks/gold_agreement.tsv"
        conda:
            "../../envs/figures.yaml"
        threads: 1
        resources:
            mem_mb=1000,
            runtime=10,
        params:
            ns=NS,
            n=FIG_BASE_N,
            wording=FIG_WORDING,
            code=code_digest("gold_agreement"),
        script:
            "../../scripts/gold_agreement.py"
