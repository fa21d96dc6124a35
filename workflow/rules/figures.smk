# Issue 4 items 4-6: every figure of §6 and the appendix (one rule and one plotting function
# per figure, clumpscout.figures.paper), the headline numbers (clumpscout.evaluation.headline) and the report
# wiring: `snakemake --report results/report.html` shows every figure with its caption.
#
# Each rule's params carry only the figure settings it uses (config section `figures`), so a
# figure-only change re-runs just the figures that use it; `code` tracks the package's code.


report: "../report/workflow.rst"


include: "figures_common.smk"


fig_targets = []


rule fig_clump_fpp_dist:
    input:
        labels=per_n("labels.parquet"),
    output:
        **fig_out("clump_fpp_dist", CAT_PROPS),
    log:
        f"{RESULTS}/logs/figures/clump_fpp_dist.log",
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        figure="clump_fpp_dist",
        ns=NS,
        lists=["labels"],
        figures=fig_cfg("n_ref", "inset_max"),
        code=code_digest("figures"),
    script:
        "../../scripts/figures.py"


rule fig_clump_variance_dist:
    input:
        labels=per_n("labels.parquet"),
    output:
        **fig_out("clump_variance_dist", CAT_PROPS),
    log:
        f"{RESULTS}/logs/figures/clump_variance_dist.log",
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        figure="clump_variance_dist",
        ns=NS,
        lists=["labels"],
        figures=fig_cfg("n_ref", "inset_max"),
        code=code_digest("figures"),
    script:
        "../../scripts/figures.py"


rule fig_clump_location_vs_pfp:
    input:
        labels=agg_ref("labels.parquet"),
        subjects=f"{RESULTS}/subjects/subjects.parquet",
    output:
        **fig_out("clump_location_vs_pfp", CAT_PROPS),
    log:
        f"{RESULTS}/logs/figures/clump_location_vs_pfp.log",
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        figure="clump_location_vs_pfp",
        ns=NS,
        figures=fig_cfg("n_ref", "position_bins", "position_radius"),
        code=code_digest("figures"),
    script:
        "../../scripts/figures.py"


rule fig_worker_skill_evolution:
    input:
        volunteers=agg_ref("volunteers.parquet"),
    output:
        **fig_out("worker_skill_evolution", CAT_VOLUNTEERS),
    log:
        f"{RESULTS}/logs/figures/worker_skill_evolution.log",
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        figure="worker_skill_evolution",
        ns=NS,
        figures=fig_cfg("n_ref"),
        code=code_digest("figures"),
    script:
        "../../scripts/figures.py"


rule fig_subject_risk_param_evolution:
    input:
        subjects=per_n("subjects.parquet"),
        labels=per_n("labels.parquet"),
    output:
        **fig_out("subject_risk_param_evolution", CAT_RISK),
    log:
        f"{RESULTS}/logs/figures/subject_risk_param_evolution.log",
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=10,
    params:
        figure="subject_risk_param_evolution",
        ns=NS,
        lists=["subjects", "labels"],
        figures=fig_cfg("p_fp_cut"),
        code=code_digest("figures"),
    script:
        "../../scripts/figures.py"


rule fig_clumps_per_galaxy_filtered:
    input:
        subjects=per_n("subjects.parquet"),
        labels=per_n("labels.parquet"),
    output:
        **fig_out("clumps_per_galaxy_filtered", CAT_RISK),
    log:
        f"{RESULTS}/logs/figures/clumps_per_galaxy_filtered.log",
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=10,
    params:
        figure="clumps_per_galaxy_filtered",
        ns=NS,
        lists=["subjects", "labels"],
        figures=fig_cfg("p_fp_cut"),
        code=code_digest("figures"),
    script:
        "../../scripts/figures.py"


rule fig_retirement_reason_fraction:
    input:
        subjects=per_n("subjects.parquet"),
    output:
        **fig_out("retirement_reason_fraction", CAT_RISK),
    log:
        f"{RESULTS}/logs/figures/retirement_reason_fraction.log",
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        figure="retirement_reason_fraction",
        ns=NS,
        lists=["subjects"],
        figures=fig_cfg(),
        code=code_digest("figures"),
    script:
        "../../scripts/figures.py"


rule fig_agg_examples:
    input:
        assignments=agg_ref("assignments.parquet"),
        labels=agg_ref("labels.parquet"),
        images=subject_images(),
    output:
        **fig_out("agg_examples", CAT_EXAMPLES),
    log:
        f"{RESULTS}/logs/figures/agg_examples.log",
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        figure="agg_examples",
        ns=NS,
        lists=["images"],
        figures=fig_cfg("n_ref", "n_examples", "p_fp_dashed"),
        seed=FIG_SEED,
        code=code_digest("figures"),
    script:
        "../../scripts/figures.py"


rule fig_agg_v_ms_dist:
    input:
        count_difference=f"{RESULTS}/baseline/count_difference.csv",
    output:
        **fig_out("agg_v_ms_dist", CAT_MEANSHIFT),
    log:
        f"{RESULTS}/logs/figures/agg_v_ms_dist.log",
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        figure="agg_v_ms_dist",
        ns=NS,
        figures=fig_cfg(),
        code=code_digest("figures"),
    script:
        "../../scripts/figures.py"


rule fig_agg_v_ms_more_examples:
    # subjects where our framework finds more clumps than MeanShift
    input:
        count_difference=f"{RESULTS}/baseline/count_difference.csv",
        boxes=f"{RESULTS}/subsamples/n{FIG_BASE_N}/boxes.parquet",
        labels=agg_ref("labels.parquet", FIG_BASE_N),
        meanshift=f"{RESULTS}/baseline/meanshift_labels.parquet",
        images=subject_images(),
    output:
        **fig_out("agg_v_ms_more_examples", CAT_MEANSHIFT),
    log:
        f"{RESULTS}/logs/figures/agg_v_ms_more_examples.log",
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        figure="agg_v_ms_more_examples",
        ns=NS,
        lists=["images"],
        figures=fig_cfg("n_examples", "p_fp_dashed"),
        seed=FIG_SEED,
        code=code_digest("figures"),
    script:
        "../../scripts/figures.py"


rule fig_agg_v_ms_less_examples:
    # subjects where MeanShift finds more clumps than our framework
    input:
        count_difference=f"{RESULTS}/baseline/count_difference.csv",
        boxes=f"{RESULTS}/subsamples/n{FIG_BASE_N}/boxes.parquet",
        labels=agg_ref("labels.parquet", FIG_BASE_N),
        meanshift=f"{RESULTS}/baseline/meanshift_labels.parquet",
        images=subject_images(),
    output:
        **fig_out("agg_v_ms_less_examples", CAT_MEANSHIFT),
    log:
        f"{RESULTS}/logs/figures/agg_v_ms_less_examples.log",
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        figure="agg_v_ms_less_examples",
        ns=NS,
        lists=["images"],
        figures=fig_cfg("n_examples", "p_fp_dashed"),
        seed=FIG_SEED,
        code=code_digest("figures"),
    script:
        "../../scripts/figures.py"


fig_targets += [
    "clump_fpp_dist",
    "clump_variance_dist",
    "clump_location_vs_pfp",
    "worker_skill_evolution",
    "subject_risk_param_evolution",
    "clumps_per_galaxy_filtered",
    "retirement_reason_fraction",
    "agg_examples",
    "agg_v_ms_dist",
    "agg_v_ms_more_examples",
    "agg_v_ms_less_examples",
]


if HAS_EXPERTS:

    rule fig_pseudo_roc_volunteer_counts:
        input:
            curves=compare_table("experts", "curve"),
            summary=compare_table("experts", "summary"),
        output:
            **fig_out("pseudo_roc_volunteer_counts", CAT_EXPERTS),
        log:
            f"{RESULTS}/logs/figures/pseudo_roc_volunteer_counts.log",
        conda:
            "../../envs/figures.yaml"
        threads: 1
        resources:
            mem_mb=1000,
            runtime=10,
        params:
            figure="pseudo_roc_volunteer_counts",
            ns=NS,
            reference="experts",
            figures=fig_cfg(),
            code=code_digest("figures"),
        script:
            "../../scripts/figures.py"

    rule fig_volunteer_normal_set_fpp_dist:
        input:
            labels=agg_ref("labels.parquet"),
            points=f"{RESULTS}/clicks/expert_clicks.parquet",
        output:
            **fig_out("volunteer_normal_set_fpp_dist", CAT_EXPERTS),
        log:
            f"{RESULTS}/logs/figures/volunteer_normal_set_fpp_dist.log",
        conda:
            "../../envs/figures.yaml"
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        params:
            figure="volunteer_normal_set_fpp_dist",
            ns=NS,
            figures=fig_cfg("n_ref", "inset_max", "tp_cut"),
            code=code_digest("figures"),
        script:
            "../../scripts/figures.py"

    fig_targets += ["pseudo_roc_volunteer_counts", "volunteer_normal_set_fpp_dist"]


if SIMULATED:

    rule fig_pseudo_roc_truth:
        input:
            curves=compare_table("truth", "curve"),
            summary=compare_table("truth", "summary"),
        output:
            **fig_out("pseudo_roc_truth", CAT_TRUTH),
        log:
            f"{RESULTS}/logs/figures/pseudo_roc_truth.log",
        conda:
            "../../envs/figures.yaml"
        threads: 1
        resources:
            mem_mb=1000,
            runtime=10,
        params:
            figure="pseudo_roc_truth",
            ns=NS,
            reference="truth",
            figures=fig_cfg(),
            code=code_digest("figures"),
        script:
            "../../scripts/figures.py"

    rule fig_pfp_calibration_truth:
        input:
            calibration=compare_table("truth", "calibration"),
        output:
            **fig_out("pfp_calibration_truth", CAT_TRUTH),
        log:
            f"{RESULTS}/logs/figures/pfp_calibration_truth.log",
        conda:
            "../../envs/figures.yaml"
        threads: 1
        resources:
            mem_mb=1000,
            runtime=10,
        params:
            figure="pfp_calibration_truth",
            ns=NS,
            figures=fig_cfg("n_ref"),
            code=code_digest("figures"),
        script:
            "../../scripts/figures.py"

    fig_targets += ["pseudo_roc_truth", "pfp_calibration_truth"]


# both models and the three baselines side by side at n = baseline.n (not in the paper)
METHOD_TABLES = {
    f"{ref}_{key}": f"{RESULTS}/baseline/{ref}_{name}.csv"
    for ref, present in (("truth", SIMULATED), ("experts", HAS_EXPERTS))
    if present
    for key, name in (("curves", "curve"), ("summary", "summary"))
}
if METHOD_TABLES:

    rule fig_method_comparison:
        input:
            **METHOD_TABLES,
        output:
            **fig_out("method_comparison", CAT_METHODS),
        log:
            f"{RESULTS}/logs/figures/method_comparison.log",
        conda:
            "../../envs/figures.yaml"
        threads: 1
        resources:
            mem_mb=1000,
            runtime=10,
        params:
            figure="method_comparison",
            ns=NS,
            figures=fig_cfg(),
            code=code_digest("figures"),
        script:
            "../../scripts/figures.py"

    fig_targets += ["method_comparison"]


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
        code=code_digest("headline"),
    script:
        "../../scripts/headline.py"


extra_targets += [
    f"{FIG}/{name}.{ext}" for name in fig_targets for ext in ("png", "pdf")
]
extra_targets += [f"{RESULTS}/headline.csv", f"{RESULTS}/headline.html"]
