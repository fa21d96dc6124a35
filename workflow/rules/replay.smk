# Early retirement replayed on all classifications in arrival order (created_at), every
# policy of the `replay:` section side by side (clumpscout.evaluation.replay,
# docs/decisions.md#live-retirement); scored against the full-data labels (the generative
# model on every classification) and, for a simulated universe, its truth (what the project
# counts). With a gold standard the full-data labels are calibrated on it and the replay
# learns its label map from the gold subjects as they arrive.

# A flattened clicks table may have no arrival times: no replay rule then (run
# `clumpscout replay` by hand on one that has them).
if not FLAT:

    # The full-data labels the replay is scored against: the default model on every
    # classification (not a subsample), calibrated on the gold standard when there is one.
    # A job of its own, started as soon as the boxes are there (priority), so that the
    # replay after it starts early too and both run beside the aggregations. The replay
    # reads the labels only: no assignments, subjects, volunteers or ECSV are written.
    rule replay_labels:
        input:
            unpack(lambda wc: gold_of("generative")),
            boxes=f"{RESULTS}/boxes/boxes.parquet",
            numba_cache=rules.numba_cache.output[0],
        output:
            labels=f"{RESULTS}/replay/full/labels.parquet",
            report=f"{RESULTS}/replay/full/report.json",
        log:
            f"{RESULTS}/logs/replay_labels.log",
        benchmark:
            f"{RESULTS}/benchmarks/replay_labels.tsv"
        priority: 40
        conda:
            "../../envs/aggregate.yaml"
        threads: 1
        resources:
            mem_mb=4000,
            runtime=30,
        params:
            fits=[aggregation_fit("generative", ["labels", "report"])],
            per_tool=False,
            calibration=config["calibration"],
            seed=seed_for("aggregate"),
            code=code_digest("aggregate"),
        script:
            "../../scripts/aggregate.py"

    rule replay:
        input:
            unpack(
                lambda wc: (
                    {
                        "truth": universe("truth_clumps.csv"),
                        "distractors": universe("truth_distractors.csv"),
                    }
                    if SIMULATED
                    else {}
                )
            ),
            unpack(lambda wc: gold_of("generative")),
            boxes=f"{RESULTS}/boxes/boxes.parquet",
            full_labels=rules.replay_labels.output.labels,
            numba_cache=rules.numba_cache.output[0],
        output:
            table=f"{RESULTS}/replay/replay.csv",
            points=f"{RESULTS}/replay/retirement.parquet",
            report=f"{RESULTS}/replay/replay.json",
            figure=report(
                f"{RESULTS}/replay/replay.png",
                caption="../report/replay.rst",
                category=FIGURE_REGISTRY.CAT_RISK,
            ),
        log:
            f"{RESULTS}/logs/replay.log",
        benchmark:
            f"{RESULTS}/benchmarks/replay.tsv"
        priority: 40
        conda:
            "../../envs/replay.yaml"
        # one thread, started as soon as its inputs are there: the aggregations take the
        # other cores, so a laptop's few are never idle behind a replay that runs last and
        # cannot keep two busy (same result with --set-threads replay=4: refits beside
        # epochs' assessments, for a run where it is alone; docs/decisions.md#replay-threads)
        threads: 1
        resources:
            mem_mb=6000,  # 3.4 GB at the paper's size with two threads (docs/decisions.md#replay-memory)
            runtime=60,
        params:
            aggregate=model_params("generative"),
            replay=section("replay"),
            calibration=config["calibration"],
            gold=gold_settings(),
            seed=seed_for("aggregate"),
            code=code_digest("replay"),
        script:
            "../../scripts/replay.py"
