# Issue 4 items 1-3: subsamples Z~_n (SPEC 22), comparison of the labels with the experts'
# clicks (§6.3, SPEC 23) and with the simulated truth, and the clustering baselines
# (appendix, SPEC 24; issue 3's single-linkage baseline).

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
            labels=f"{RESULTS}/aggregate/n{{n}}/labels.parquet",
            points=f"{RESULTS}/clicks/expert_clicks.parquet",
        output:
            curve=f"{RESULTS}/compare/experts/n{{n}}_curve.csv",
            summary=f"{RESULTS}/compare/experts/n{{n}}_summary.csv",
        log:
            f"{RESULTS}/logs/compare/experts_n{{n}}.log",
        wildcard_constraints:
            n=r"\d+",
        conda:
            "../../envs/aggregate.yaml"
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        params:
            n=lambda wc: int(wc.n),
            thresholds=section("compare").get("thresholds", 101),
            code=code_digest("compare"),
        script:
            "../../scripts/compare.py"

    rule compare_experts_collect:
        input:
            curve=expand(f"{RESULTS}/compare/experts/n{{n}}_curve.csv", n=NS),
            summary=expand(f"{RESULTS}/compare/experts/n{{n}}_summary.csv", n=NS),
        output:
            curve=f"{RESULTS}/compare/experts_curve.csv",
            summary=f"{RESULTS}/compare/experts_summary.csv",
        log:
            f"{RESULTS}/logs/compare/experts_collect.log",
        conda:
            "../../envs/aggregate.yaml"
        threads: 1
        resources:
            mem_mb=1000,
            runtime=5,
        params:
            code=code_digest("compare"),
        script:
            "../../scripts/compare_collect.py"

    extra_targets += [
        f"{RESULTS}/compare/experts_summary.csv",
        f"{RESULTS}/compare/experts_curve.csv",
    ]


if SIMULATED:

    rule compare_truth:
        input:
            labels=f"{RESULTS}/aggregate/n{{n}}/labels.parquet",
            truth=universe("truth_clumps.csv"),
            subjects=f"{RESULTS}/subsamples/n{{n}}/boxes.parquet",
        output:
            curve=f"{RESULTS}/compare/truth/n{{n}}_curve.csv",
            summary=f"{RESULTS}/compare/truth/n{{n}}_summary.csv",
            calibration=f"{RESULTS}/compare/truth/n{{n}}_calibration.csv",
        log:
            f"{RESULTS}/logs/compare/truth_n{{n}}.log",
        wildcard_constraints:
            n=r"\d+",
        conda:
            "../../envs/aggregate.yaml"
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        params:
            n=lambda wc: int(wc.n),
            thresholds=section("compare").get("thresholds", 101),
            bins=section("compare").get("calibration_bins", 10),
            code=code_digest("compare"),
        script:
            "../../scripts/compare.py"

    rule compare_truth_collect:
        input:
            curve=expand(f"{RESULTS}/compare/truth/n{{n}}_curve.csv", n=NS),
            summary=expand(f"{RESULTS}/compare/truth/n{{n}}_summary.csv", n=NS),
            calibration=expand(f"{RESULTS}/compare/truth/n{{n}}_calibration.csv", n=NS),
        output:
            curve=f"{RESULTS}/compare/truth_curve.csv",
            summary=f"{RESULTS}/compare/truth_summary.csv",
            calibration=f"{RESULTS}/compare/truth_calibration.csv",
        log:
            f"{RESULTS}/logs/compare/truth_collect.log",
        conda:
            "../../envs/aggregate.yaml"
        threads: 1
        resources:
            mem_mb=1000,
            runtime=5,
        params:
            code=code_digest("compare"),
        script:
            "../../scripts/compare_collect.py"

    extra_targets += [
        f"{RESULTS}/compare/truth_summary.csv",
        f"{RESULTS}/compare/truth_curve.csv",
        f"{RESULTS}/compare/truth_calibration.csv",
    ]


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
        bandwidth=section("baseline").get("bandwidth", "fwhm"),
        impl=section("baseline").get("meanshift_impl", "numba"),
        cut=section("baseline").get("single_linkage_cut", 1.0),
        min_volunteers=section("baseline").get("min_volunteers", 5),
        code=code_digest("baseline"),
    script:
        "../../scripts/baseline.py"


rule baseline_counts:
    input:
        ours=f"{RESULTS}/aggregate/n{BASELINE_N}/labels.parquet",
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
        code=code_digest("baseline", "compare"),
    script:
        "../../scripts/baseline_compare.py"


extra_targets += [
    f"{RESULTS}/baseline/count_difference.csv",
    f"{RESULTS}/baseline/meanshift_labels.parquet",
    f"{RESULTS}/baseline/single_linkage_labels.parquet",
]


if HAS_EXPERTS:

    rule baseline_compare_experts:
        input:
            ours=f"{RESULTS}/aggregate/n{BASELINE_N}/labels.parquet",
            meanshift=f"{RESULTS}/baseline/meanshift_labels.parquet",
            single_linkage=f"{RESULTS}/baseline/single_linkage_labels.parquet",
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
            thresholds=section("compare").get("thresholds", 101),
            code=code_digest("baseline", "compare"),
        script:
            "../../scripts/baseline_compare.py"

    extra_targets += [f"{RESULTS}/baseline/experts_summary.csv"]


if SIMULATED:

    rule baseline_compare_truth:
        input:
            ours=f"{RESULTS}/aggregate/n{BASELINE_N}/labels.parquet",
            meanshift=f"{RESULTS}/baseline/meanshift_labels.parquet",
            single_linkage=f"{RESULTS}/baseline/single_linkage_labels.parquet",
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
            thresholds=section("compare").get("thresholds", 101),
            bins=section("compare").get("calibration_bins", 10),
            code=code_digest("baseline", "compare"),
        script:
            "../../scripts/baseline_compare.py"

    extra_targets += [f"{RESULTS}/baseline/truth_summary.csv"]
