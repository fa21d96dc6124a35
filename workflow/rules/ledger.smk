# The click ledger (decisions.md#click-ledger): every input click accounted for, from the export to the
# assignments of every Z~_n, for each consensus model; the rule fails (one line naming the
# model, n and category) if anything is lost. One job for both models: the export, the
# largest input of the DAG, is read and counted once (decisions.md#outputs-someone-reads).


rule ledger:
    input:
        classifications=input_classifications(),
        subjects_export=input_subjects_export(),
        clicks_report=f"{RESULTS}/clicks/clicks_report.json",
        boxes=f"{RESULTS}/boxes/boxes.parquet",
        subsamples=expand(f"{RESULTS}/subsamples/n{{n}}/boxes.parquet", n=NS),
        subsample_reports=expand(f"{RESULTS}/subsamples/n{{n}}/report.json", n=NS),
        # model by model, n by n within (the script reads them in this order)
        assignments=[agg_path(m, n, "assignments.parquet") for m in MODELS for n in NS],
        aggregate_reports=[agg_path(m, n, "report.json") for m in MODELS for n in NS],
    output:
        **{
            f"{m}_{ext}": f"{RESULTS}/ledger/{m}.{ext}"
            for m in MODELS
            for ext in ("csv", "json")
        },
    log:
        f"{RESULTS}/logs/ledger.log",
    benchmark:
        f"{RESULTS}/benchmarks/ledger.tsv"
    conda:
        "../../envs/data.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        ns=NS,
        models=MODELS,
        code=code_digest("ledger"),
    script:
        "../../scripts/ledger.py"
