# The aggregation engine (§4-5, appendix) on each subsample Z~_n, by every consensus model
# (MODELS: generative and paper) in ONE job per n: the models are fitted one after the
# other, each freed before the next, so that they share the job's start-up (interpreter,
# imports, numba's cache) and the boxes' cold read, which were 15-21 % of a paper-model
# job's wall time when each model had a job of its own (docs/decisions.md#aggregate-per-n).
# Nothing is lost in partial reruns: everything in the `aggregate:` section but `model` is
# shared by both models, so a changed setting re-ran both already.
# One thread per job: the EM's skill and risk steps are serial, so with many n two
# single-thread jobs finish the set sooner than one two-thread job at a time (the
# facility-location kernel is multi-threaded and thread-count independent: give one
# job more with --set-threads aggregate=2 when only one n is run).


# numba's kernels compiled once per run, beside the data stages, so that the aggregation jobs,
# which start together, load them from numba's cache instead of each compiling them
# (clumpscout.numba_cache, docs/decisions.md#numba-warm-up). A plain input, not ancient():
# the warm-up's code is part of every waiting job's code, and Snakemake does not check the
# own changes of a job behind an ancient() input of a job that re-runs.
rule numba_cache:
    output:
        f"{RESULTS}/numba_cache.json",
    log:
        f"{RESULTS}/logs/numba_cache.log",
    benchmark:
        f"{RESULTS}/benchmarks/numba_cache.tsv"
    priority: 50
    conda:
        "../../envs/aggregate.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        code=code_digest("numba_cache"),
    script:
        "../../scripts/numba_cache.py"


# The outputs are what a rule or a user reads (the script writes only these): the labels'
# ECSV with units is the catalogue's (rule catalogue), not one per aggregation; the
# assignments keep the ids, the volunteer, the box, the image size, the click and the drawn
# shape (when the boxes have one) of each row of Z~_n (what the click ledger and the example
# figures read), not all its columns again: its rows, in its order, so the rest is a join on
# the row number (docs/decisions.md#outputs-someone-reads).
ASSIGNMENT_COLUMNS = [
    "classification_id",
    "subject_id",
    "volunteer",
    "x1",
    "y1",
    "x2",
    "y2",
    "image_width",
    "image_height",
    "x",
    "y",
    "shape",
]
# every model's outputs of one n (output name: file), in its own folder (agg_path)
AGGREGATE_OUTPUTS = {
    "labels": "labels.parquet",
    "subjects": "subjects.parquet",
    "volunteers": "volunteers.parquet",
    "assignments": "assignments.parquet",
    "report": "report.json",
}


rule aggregate:
    input:
        **gold_inputs(MODELS),
        boxes=f"{RESULTS}/subsamples/n{{n}}/boxes.parquet",
        numba_cache=rules.numba_cache.output[0],
    output:
        **{
            f"{m}_{name}": agg_path(m, "{n}", file)
            for m in MODELS
            for name, file in AGGREGATE_OUTPUTS.items()
        },
    log:
        f"{RESULTS}/logs/aggregate/n{{n}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/aggregate_n{{n}}.tsv"
    wildcard_constraints:
        n=r"\d+",
    conda:
        "../../envs/aggregate.yaml"
    threads: 1
    resources:
        mem_mb=4000,  # one model's fit at a time (each freed before the next)
        runtime=30,
    params:
        fits=[
            aggregation_fit(m, [f"{m}_{name}" for name in AGGREGATE_OUTPUTS])
            for m in MODELS
        ],
        per_tool=config["aggregate"]["per_tool"],
        assignment_columns=ASSIGNMENT_COLUMNS,
        calibration=config["calibration"],
        seed=seed_for("aggregate"),
        code=code_digest("aggregate"),
    script:
        "../../scripts/aggregate.py"


# The gold standard from the experts' clicks (docs/decisions.md#gold-from-experts): per
# subject, the objects a majority of its experts marked.
rule gold:
    input:
        expert_clicks=f"{RESULTS}/clicks/expert_clicks.parquet",
        boxes=f"{RESULTS}/boxes/boxes.parquet",
    output:
        f"{RESULTS}/gold/gold.csv",
    log:
        f"{RESULTS}/logs/gold.log",
    benchmark:
        f"{RESULTS}/benchmarks/gold.tsv"
    conda:
        "../../envs/aggregate.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        majority=config["calibration"]["expert_majority"],
        code=code_digest("gold"),
    script:
        "../../scripts/gold.py"
