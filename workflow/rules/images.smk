# Subject images (§2.2, decisions.md#cutout-side, #psf-fwhm, #box-geometry, #colour-composite), clump photometry and the flux figures (§6.3, §6.5).
#
# Simulated universe (images.enabled): render_frames draws SDSS-like g, r, i frames
# (clumpscout.images.render), cutouts turns them into 400 x 400 subject PNGs and scaled bands
# (clumpscout.images.cutouts), photometry_truth / photometry_labels measure the true clumps and the
# n = photometry_n labels on those bands (clumpscout.images.photometry), flux_figures plots them
# (clumpscout.figures.flux). images.real_demo adds cutouts of the real SDSS frames in
# ../shared (field 2583/2/136 and HCG 88).


include: "images_common.smk"


if IMAGES:

    rule render_frames:
        input:
            distractors=universe("truth_distractors.csv"),
            galaxies=universe("galaxies.csv"),
            truth=universe("truth_clumps.csv"),
            subjects=f"{RESULTS}/subjects/subjects.parquet",
        output:
            frames=temp(directory(f"{IMG}/sim/frames")),
            report=f"{IMG}/sim/render_report.json",
            index=f"{IMG}/sim/frames.csv",
        log:
            f"{RESULTS}/logs/images/render_frames.log",
        benchmark:
            f"{RESULTS}/benchmarks/render_frames.tsv"
        conda:
            "../../envs/images.yaml"
        threads: 2
        resources:
            mem_mb=2000,
            runtime=20,
        params:
            render=IMGCFG["render"],
            seed=seed_for("render"),
            code=code_digest("render_frames"),
        script:
            "../../scripts/render_frames.py"

    rule cutouts:
        input:
            distractors=universe("truth_distractors.csv"),
            frames=f"{IMG}/sim/frames",
            truth=universe("truth_clumps.csv"),
        output:
            table=f"{IMG}/sim/cutouts.parquet",
            csv=f"{IMG}/sim/cutouts.csv",
            bands=f"{IMG}/sim/bands.npy",
            report=f"{IMG}/sim/cutouts_report.json",
            png=directory(f"{IMG}/sim/png"),
            montage=report(
                f"{IMG}/sim/montage.png",
                caption="../report/images_sim.rst",
                category=IMG_CAT,
            ),
        log:
            f"{RESULTS}/logs/images/cutouts.log",
        benchmark:
            f"{RESULTS}/benchmarks/cutouts.tsv"
        conda:
            "../../envs/images.yaml"
        threads: 2
        resources:
            mem_mb=2000,
            runtime=30,
        params:
            cutouts=cutout_cfg(),
            montage=IMGCFG["montage_subjects"],
            dpi=config["figures"]["dpi"],
            code=code_digest("cutouts"),
        script:
            "../../scripts/cutouts.py"

    rule photometry_truth:
        input:
            distractors=universe("truth_distractors.csv"),
            table=f"{IMG}/sim/cutouts.parquet",
            bands=f"{IMG}/sim/bands.npy",
            truth=universe("truth_clumps.csv"),
            subjects=f"{RESULTS}/subjects/subjects.parquet",
        output:
            table=f"{IMG}/photometry/truth.parquet",
            report=f"{IMG}/photometry/truth.json",
        log:
            f"{RESULTS}/logs/images/photometry_truth.log",
        benchmark:
            f"{RESULTS}/benchmarks/photometry_truth.tsv"
        conda:
            "../../envs/images.yaml"
        threads: 1
        resources:
            mem_mb=2000,
            runtime=20,
        params:
            bg_factor=IMGCFG["bg_factor"],
            code=code_digest("photometry"),
        script:
            "../../scripts/photometry.py"

    FLUX_TABLES = {"truth": f"{IMG}/photometry/truth.parquet"}
    if PHOT_N in NS:

        rule photometry_labels:
            input:
                table=f"{IMG}/sim/cutouts.parquet",
                bands=f"{IMG}/sim/bands.npy",
                labels=agg_path(PAPER_MODEL, PHOT_N, "labels.parquet"),
                experts=(
                    f"{RESULTS}/clicks/expert_clicks.parquet" if HAS_EXPERTS else []
                ),
            output:
                table=f"{IMG}/photometry/n{PHOT_N}.parquet",
                report=f"{IMG}/photometry/n{PHOT_N}.json",
            log:
                f"{RESULTS}/logs/images/photometry_n{PHOT_N}.log",
            benchmark:
                f"{RESULTS}/benchmarks/photometry_labels.tsv"
            conda:
                "../../envs/images.yaml"
            threads: 1
            resources:
                mem_mb=2000,
                runtime=20,
            params:
                n=PHOT_N,
                bg_factor=IMGCFG["bg_factor"],
                code=code_digest("photometry"),
            script:
                "../../scripts/photometry.py"

        FLUX_TABLES["labels"] = f"{IMG}/photometry/n{PHOT_N}.parquet"

    rule flux_figures:
        input:
            **FLUX_TABLES,
        output:
            **flux_outputs("labels" in FLUX_TABLES),
        log:
            f"{RESULTS}/logs/images/flux_figures.log",
        benchmark:
            f"{RESULTS}/benchmarks/flux_figures.tsv"
        conda:
            "../../envs/figures.yaml"
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        params:
            dpi=config["figures"]["dpi"],
            code=code_digest("flux_figures"),
        script:
            "../../scripts/flux_figures.py"


if IMGCFG["real_demo"]:
    DEMO = IMGCFG["demo"]
    SDSS = DEMO["shared_dir"]
    FIELD = f"{SDSS}/frames_2583_2_136"
    HCG = f"{SDSS}/hcg88_reprojected"

    rule real_demo:
        input:
            frames=expand(f"{FIELD}/frame-{{b}}-002583-2-0136.fits.bz2", b=list("gri")),
            psfield=f"{FIELD}/psField-002583-2-0136.fits",
            photofield=f"{FIELD}/photoField-002583-2.fits",
            hcg=expand(f"{HCG}/reprojected_sdss_{{b}}.fits.bz2", b=list("gri")),
        output:
            field=directory(f"{IMG}/real/2583_2_136"),
            hcg88=directory(f"{IMG}/real/hcg88"),
            fwhm=f"{IMG}/real/fwhm.csv",
            montage=report(
                f"{IMG}/real/montage.png",
                caption="../report/images_real.rst",
                category=IMG_CAT,
            ),
        log:
            f"{RESULTS}/logs/images/real_demo.log",
        benchmark:
            f"{RESULTS}/benchmarks/real_demo.tsv"
        conda:
            "../../envs/images.yaml"
        threads: 1
        resources:
            mem_mb=3000,
            runtime=20,
        params:
            cutouts=cutout_cfg(),
            n_galaxies=DEMO["n_galaxies"],
            dpi=config["figures"]["dpi"],
            code=code_digest("real_demo"),
        script:
            "../../scripts/real_demo.py"
