# Helpers of workflow/rules/images.smk (subject images, photometry, flux figures).

IMG = f"{RESULTS}/images"
IMGCFG = config["images"]
IMG_CAT = "9. Subject images and clump fluxes (§2.2, §6.3, §6.5)"
PHOT_N = IMGCFG["photometry_n"]
CUTOUT_KEYS = (
    "channels",
    "asinh_Q",
    "asinh_alpha",
    "asinh_m",
    "beta",
    "resample_order",
    "resize_filter",
    "png_compress_level",
    "band_fits",
)
GEOMETRY_KEYS = ("native_scale", "image_size", "min_side", "r90_factor")


def cutout_cfg():
    """The image settings of the cutouts (images section) and the geometry (subjects section)."""
    cfg = {k: IMGCFG[k] for k in CUTOUT_KEYS}
    cfg.update({k: config["subjects"][k] for k in GEOMETRY_KEYS})
    return cfg


def flux_outputs(has_labels):
    """PNG (in the report, captioned by workflow/report/<name>.rst), PDF and numbers of the
    flux figures that can be made: the truth one always, the label ones with labels."""
    names = ["flux_truth"]
    if has_labels:
        names = ["flux_vs_pfp", "flux_truth"]
        if HAS_EXPERTS:
            names = ["flux_true_false"] + names
    out = {}
    for name in names:
        out[f"{name}_png"] = report(
            f"{RESULTS}/figures/{name}.png",
            caption=f"../report/{name}.rst",
            category=IMG_CAT,
        )
        out[f"{name}_pdf"] = f"{RESULTS}/figures/{name}.pdf"
        out[f"{name}_json"] = f"{RESULTS}/figures/{name}.json"
    return out
