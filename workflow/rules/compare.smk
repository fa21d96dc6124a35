# Issue 4 items 1-3: subsamples Z~_n (decisions.md#subsamples), comparison of the labels of both models with
# the experts' clicks (§6.3, decisions.md#expert-comparison) and with the simulated truth, and the clustering
# baselines (MeanShift: appendix, decisions.md#meanshift-baseline; single linkage: issue 3; DBSCAN), scored side by
# side with both models at n = baseline.n.

BASELINE_N = int(section("baseline").get("n", 20))


rule subsample:
    input:
        f"{RESULTS}/boxes/boxes.parquet",
    output:
        boxes=f"{RESULTS}/subsamples/n{{n}}/boxes.parquet",
        report=f"{RESULTS}/subsamples/n{{n}}/report.json",
    log:
        f"{RESULTS}/logs/subsample/n{{n}}.log",
    wildcard_constraints:
        n=r"\d+",
    conda:
        "../../envs/aggregate.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        n=lambda wc: int(wc.n),
        nested=section("subsample").get("nested", True),
        seed=seed_for("subsample"),
        code=code_digest("subsample"),
    script:
        "../../scripts/subsample.py"


if HAS_EXPERTS:

    rule compare_experts:
        input:
            labels=f"{RESULTS}/aggregate/{{model}}/n{{n}}/labels.parquet",
            points=f"{RESULTS}/clicks/expert_clicks.parquet",
        output:
            curve=f"{RESULTS}/compare/{{model}}/experts/n{{n}}_curve.csv",
            summary=f"{RESULTS}/compare/{{model}}/experts/n{{n}}_summary.csv",
        log:
            f"{RESULTS}/logs/compare/{{model}}/experts_n{{n}}.log",
        wildcard_constraints:
            n=r"\d+",
            model=MODEL_RE,
        conda:
            "../../envs/aggregate.yaml"
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        params:
            n=lambda wc: int(wc.n),
            model=lambda wc: wc.model,
            thresholds=section("compare").get("thresholds", 101),
            code=code_digest("compare"),
        script:
            "../../scripts/compare.py"

    rule compare_experts_collect:
        input:
            curve=expand(
                f"{RESULTS}/compare/{{{{model}}}}/experts/n{{n}}_curve.csv", n=NS
            ),
            summary=expand(
                f"{RESULTS}/compare/{{{{model}}}}/experts/n{{n}}_summary.csv", n=NS
            ),
        output:
            curve=f"{RESULTS}/compare/{{model}}/experts_curve.csv",
            summary=f"{RESULTS}/compare/{{model}}/experts_summary.csv",
        log:
            f"{RESULTS}/logs/compare/{{model}}/experts_collect.log",
        wildcard_constraints:
            model=MODEL_RE,
        conda:
            "../../envs/aggregate.yaml"
        threads: 1
        resources:
            mem_mb=1000,
            runtime=5,
        params:
            code=code_digest("compare_collect"),
        script:
            "../../scripts/compare_collect.py"

    extra_targets += expand(
        f"{RESULTS}/compare/{{model}}/experts_{{t}}.csv",
        model=MODELS,
        t=["summary", "curve"],
    )


if SIMULATED:

    rule compare_truth:
        input:
            labels=f"{RESULTS}/aggregate/{{model}}/n{{n}}/labels.parquet",
            truth=universe("truth_clumps.csv"),
            subjects=f"{RESULTS}/subsamples/n{{n}}/boxes.parquet",
        output:
            curve=f"{RESULTS}/compare/{{model}}/truth/n{{n}}_curve.csv",
            summary=f"{RESULTS}/compare/{{model}}/truth/n{{n}}_summary.csv",
            calibration=f"{RESULTS}/compare/{{model}}/truth/n{{n}}_calibration.csv",
        log:
            f"{RESULTS}/logs/compare/{{model}}/truth_n{{n}}.log",
        wildcard_constraints:
            n=r"\d+",
            model=MODEL_RE,
        conda:
            "../../envs/aggregate.yaml"
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        params:
            n=lambda wc: int(wc.n),
            model=lambda wc: wc.model,
            thresholds=section("compare").get("thresholds", 101),
            bins=section("compare").get("calibration_bins", 10),
            code=code_digest("compare"),
        script:
            "../../scripts/compare.py"

    rule compare_truth_collect:
        input:
            curve=expand(
                f"{RESULTS}/compare/{{{{model}}}}/truth/n{{n}}_curve.csv", n=NS
            ),
            summary=expand(
                f"{RESULTS}/compare/{{{{model}}}}/truth/n{{n}}_summary.csv", n=NS
            ),
            calibration=expand(
                f"{RESULTS}/compare/{{{{model}}}}/truth/n{{n}}_calibration.csv", n=NS
            ),
        output:
            curve=f"{RESULTS}/compare/{{model}}/truth_curve.csv",
            summary=f"{RESULTS}/compare/{{model}}/truth_summary.csv",
            calibration=f"{RESULTS}/compare/{{model}}/truth_calibration.csv",
        log:
            f"{RESULTS}/logs/compare/{{model}}/truth_collect.log",
        wildcard_constraints:
            model=MODEL_RE,
        conda:
            "../../envs/aggregate.yaml"
        threads: 1
        resources:
            mem_mb=1000,
            runtime=5,
        params:
            code=code_digest("compare_collect"),
        script:
            "../../scripts/compare_collect.py"

    extra_targets += expand(
        f"{RESULTS}/compare/{{model}}/truth_{{t}}.csv",
        model=MODELS,
        t=["summary", "curve", "calibration"],
    )


BASECFG = section("baseline")


rule baseline:
    input:
        f"{RESULTS}/subsamples/n{BASELINE_N}/boxes.parquet",
    output:
        meanshift=f"{RESULTS}/baseline/meanshift_labels.parquet",
        single_linkage=f"{RESULTS}/baseline/single_linkage_labels.parquet",
        report=f"{RESULTS}/baseline/baseline_report.json",
    log:
        f"{RESULTS}/logs/baseline/baseline.log",
    benchmark:
        f"{RESULTS}/benchmarks/baseline.tsv"
    conda:
        "../../envs/aggregate.yaml"
    threads: 2
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        n=BASELINE_N,
        bandwidth=BASECFG.get("bandwidth", "fwhm"),
        impl=BASECFG.get("meanshift_impl", "numba"),
        cut=BASECFG.get("single_linkage_cut", 1.0),
        min_volunteers=BASECFG.get("min_volunteers", 5),
        code=code_digest("baseline"),
    script:
        "../../scripts/baseline.py"


rule baseline_dbscan:
    input:
        f"{RESULTS}/subsamples/n{BASELINE_N}/boxes.parquet",
    output:
        dbscan=f"{RESULTS}/baseline/dbscan_labels.parquet",
        report=f"{RESULTS}/baseline/dbscan_report.json",
    log:
        f"{RESULTS}/logs/baseline/baseline_dbscan.log",
    benchmark:
        f"{RESULTS}/benchmarks/baseline_dbscan.tsv"
    conda:
        "../../envs/aggregate.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        n=BASELINE_N,
        eps_factor=BASECFG.get("dbscan_eps_factor", 0.5),
        min_samples=BASECFG.get("dbscan_min_samples", 3),
        code=code_digest("baseline"),
    script:
        "../../scripts/baseline.py"


rule baseline_counts:
    input:
        ours=agg_path(PAPER_MODEL, BASELINE_N, "labels.parquet"),
        meanshift=f"{RESULTS}/baseline/meanshift_labels.parquet",
        single_linkage=f"{RESULTS}/baseline/single_linkage_labels.parquet",
        subjects=f"{RESULTS}/subsamples/n{BASELINE_N}/boxes.parquet",
    output:
        f"{RESULTS}/baseline/count_difference.csv",
    log:
        f"{RESULTS}/logs/baseline/baseline_counts.log",
    conda:
        "../../envs/aggregate.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        code=code_digest("baseline_compare"),
    script:
        "../../scripts/baseline_compare.py"


extra_targets += [
    f"{RESULTS}/baseline/count_difference.csv",
    f"{RESULTS}/baseline/meanshift_labels.parquet",
    f"{RESULTS}/baseline/single_linkage_labels.parquet",
    f"{RESULTS}/baseline/dbscan_labels.parquet",
]

# every method scored side by side at n = baseline.n: both models and the three baselines
# (input name = the `method` tag of the comparison tables)
METHOD_LABELS = {
    **{m: agg_path(m, BASELINE_N, "labels.parquet") for m in MODELS},
    "single_linkage": f"{RESULTS}/baseline/single_linkage_labels.parquet",
    "dbscan": f"{RESULTS}/baseline/dbscan_labels.parquet",
    "meanshift": f"{RESULTS}/baseline/meanshift_labels.parquet",
}


if HAS_EXPERTS:

    rule baseline_compare_experts:
        input:
            **METHOD_LABELS,
            points=f"{RESULTS}/clicks/expert_clicks.parquet",
        output:
            curve=f"{RESULTS}/baseline/experts_curve.csv",
            summary=f"{RESULTS}/baseline/experts_summary.csv",
        log:
            f"{RESULTS}/logs/baseline/baseline_compare_experts.log",
        conda:
            "../../envs/aggregate.yaml"
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        params:
            n=BASELINE_N,
            methods=list(METHOD_LABELS),
            thresholds=section("compare").get("thresholds", 101),
            code=code_digest("baseline_compare"),
        script:
            "../../scripts/baseline_compare.py"

    extra_targets += [f"{RESULTS}/baseline/experts_summary.csv"]


if SIMULATED:

    rule baseline_compare_truth:
        input:
            **METHOD_LABELS,
            truth=universe("truth_clumps.csv"),
            subjects=f"{RESULTS}/subsamples/n{BASELINE_N}/boxes.parquet",
        output:
            curve=f"{RESULTS}/baseline/truth_curve.csv",
            summary=f"{RESULTS}/baseline/truth_summary.csv",
            calibration=f"{RESULTS}/baseline/truth_calibration.csv",
        log:
            f"{RESULTS}/logs/baseline/baseline_compare_truth.log",
        conda:
            "../../envs/aggregate.yaml"
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        params:
            n=BASELINE_N,
            methods=list(METHOD_LABELS),
            thresholds=section("compare").get("thresholds", 101),
            bins=section("compare").get("calibration_bins", 10),
            code=code_digest("baseline_compare"),
        script:
            "../../scripts/baseline_compare.py"

    extra_targets += [f"{RESULTS}/baseline/truth_summary.csv"]
