# Subsamples Z~_n (decisions.md#subsamples), comparison of the labels of both models with a
# reference: the experts' clicks (§6.3, decisions.md#expert-comparison) and the simulated
# truth (decisions.md#reference-wildcard), and the clustering baselines (MeanShift: appendix,
# decisions.md#meanshift-baseline; single linkage; DBSCAN), scored side by side with both
# models at n = baseline.n.


rule subsample:
    input:
        f"{RESULTS}/boxes/boxes.parquet",
    output:
        boxes=f"{RESULTS}/subsamples/n{{n}}/boxes.parquet",
        report=f"{RESULTS}/subsamples/n{{n}}/report.json",
    log:
        f"{RESULTS}/logs/subsample/n{{n}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/subsample_n{{n}}.tsv"
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
        nested=config["subsample"]["nested"],
        seed=seed_for("subsample"),
        code=code_digest("subsample"),
    script:
        "../../scripts/subsample.py"


# One job per model and reference scores the labels of every n: the reference is read and
# prepared once, not once per n (decisions.md#reference-wildcard).
rule compare:
    input:
        unpack(reference_inputs(NS)),
        labels=lambda wc: [agg_path(wc.model, n, "labels.parquet") for n in NS],
    output:
        **{
            t: f"{RESULTS}/compare/{{model}}/{{reference}}_{t}.csv"
            for t in COMPARE_TABLES
        },
    log:
        f"{RESULTS}/logs/compare/{{model}}/{{reference}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/compare_{{model}}_{{reference}}.tsv"
    wildcard_constraints:
        model=MODEL_RE,
        reference=REFERENCE_RE,
    conda:
        "../../envs/aggregate.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        ns=NS,
        model=lambda wc: wc.model,
        thresholds=config["compare"]["thresholds"],
        bins=config["compare"]["calibration_bins"],
        code=code_digest("compare"),
    script:
        "../../scripts/compare.py"


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
        bandwidth=config["baseline"]["bandwidth"],
        impl=config["baseline"]["meanshift_impl"],
        cut=config["baseline"]["single_linkage_cut"],
        min_volunteers=config["baseline"]["min_volunteers"],
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
        eps_factor=config["baseline"]["dbscan_eps_factor"],
        min_samples=config["baseline"]["dbscan_min_samples"],
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
    benchmark:
        f"{RESULTS}/benchmarks/baseline_counts.tsv"
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


# every method scored side by side at n = baseline.n: both models and the three baselines
# (input name = the `method` tag of the comparison tables)
METHOD_LABELS = {
    **{m: agg_path(m, BASELINE_N, "labels.parquet") for m in MODELS},
    "single_linkage": f"{RESULTS}/baseline/single_linkage_labels.parquet",
    "dbscan": f"{RESULTS}/baseline/dbscan_labels.parquet",
    "meanshift": f"{RESULTS}/baseline/meanshift_labels.parquet",
}


rule baseline_compare:
    input:
        unpack(reference_inputs(BASELINE_N)),
        **METHOD_LABELS,
    output:
        **{t: f"{RESULTS}/baseline/{{reference}}_{t}.csv" for t in COMPARE_TABLES},
    log:
        f"{RESULTS}/logs/baseline/baseline_compare_{{reference}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/baseline_compare_{{reference}}.tsv"
    wildcard_constraints:
        reference=REFERENCE_RE,
    conda:
        "../../envs/aggregate.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        n=BASELINE_N,
        methods=list(METHOD_LABELS),
        thresholds=config["compare"]["thresholds"],
        bins=config["compare"]["calibration_bins"],
        code=code_digest("baseline_compare"),
    script:
        "../../scripts/baseline_compare.py"
