# The click ledger (decisions.md#click-ledger): every input click accounted for, from the export to the
# assignments of every Z~_n, once per consensus model; the rule fails (one line naming n and
# category) if anything is lost.


rule ledger:
    input:
        classifications=input_classifications(),
        subjects_export=input_subjects_export(),
        clicks_report=f"{RESULTS}/clicks/clicks_report.json",
        boxes=f"{RESULTS}/boxes/boxes.parquet",
        subsamples=expand(f"{RESULTS}/subsamples/n{{n}}/boxes.parquet", n=NS),
        subsample_reports=expand(f"{RESULTS}/subsamples/n{{n}}/report.json", n=NS),
        assignments=expand(
            f"{RESULTS}/aggregate/{{{{model}}}}/n{{n}}/assignments.parquet", n=NS
        ),
        aggregate_reports=expand(
            f"{RESULTS}/aggregate/{{{{model}}}}/n{{n}}/report.json", n=NS
        ),
    output:
        csv=f"{RESULTS}/ledger/{{model}}.csv",
        json=f"{RESULTS}/ledger/{{model}}.json",
    log:
        f"{RESULTS}/logs/ledger/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/ledger_{{model}}.tsv"
    wildcard_constraints:
        model=MODEL_RE,
    conda:
        "../../envs/data.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        ns=NS,
        code=code_digest("ledger"),
    script:
        "../../scripts/ledger.py"
