"""The sky of the simulated universe: galaxies (§2.1-2.2), their true clumps and the
distractors volunteers may mark (faint features, foreground stars, bulges).

The model and its knobs are documented in :mod:`clumpscout.simulation.universe`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from clumpscout.simulation.config import (
    IMAGE_SIZE,
    MIN_R90,
    NATIVE_SCALE,
    SAMPLES,
    csr_offsets,
    cutout_geometry,
    largest_remainder,
    local_index,
    mag_to_nmgy,
    trunc_lognormal,
)

# --------------------------------------------------------------------------- galaxies


def band_fluxes(flux_r, g_r, r_i) -> dict[str, np.ndarray]:
    """g, r, i fluxes (nanomaggies) from the r flux and the g - r, r - i colours (mag)."""
    return {
        "flux_g": flux_r * 10 ** (-0.4 * g_r),
        "flux_r": flux_r,
        "flux_i": flux_r * 10 ** (0.4 * r_i),
    }


def angular_diameter_distance_kpc(z, h0: float = 70.0, om0: float = 0.3) -> np.ndarray:
    """Angular diameter distance (kpc) in a flat LambdaCDM cosmology (no radiation).

    D_A = c / H0 / (1 + z) * int_0^z dz' / sqrt(Om0 (1 + z')^3 + 1 - Om0), by the
    trapezoidal rule on a fine grid (agrees with astropy's FlatLambdaCDM to 1e-6).
    """
    from scipy.integrate import cumulative_trapezoid

    z = np.asarray(z, dtype=float)
    grid = np.linspace(0.0, max(float(z.max(initial=0.0)), 1e-6), 4001)
    inv_e = 1.0 / np.sqrt(om0 * (1.0 + grid) ** 3 + 1.0 - om0)
    dc = cumulative_trapezoid(inv_e, grid, initial=0.0) * 299792.458 / h0 * 1000.0
    return np.interp(z, grid, dc) / (1.0 + z)


def make_galaxies(p: dict, rng: np.random.Generator) -> pd.DataFrame:
    """The galaxy catalogue (§2.1-2.2); see the module docstring for the model."""
    n = p["n_subjects"]
    counts = largest_remainder(n, p["sample_counts"])
    sample_idx = np.repeat(np.arange(3), counts)
    secondary = sample_idx == 1

    z = trunc_lognormal(rng, n, p["z_median"], p["z_sigma"], 0.02, 0.25)
    n2 = int(secondary.sum())
    a3, b3 = 0.02**3, 0.075**3
    z[secondary] = np.cbrt(a3 + rng.random(n2) * (b3 - a3))

    zg = np.linspace(0.0, 0.26, 1041)
    da_kpc = angular_diameter_distance_kpc(zg)
    kpc_per_arcsec = np.interp(z, zg, da_kpc) / 206264.806
    r90 = np.zeros(n)
    todo = np.arange(n)
    for _ in range(100):  # GZ2 selection: petroR90_r >= 3" (redraw the physical size)
        r_kpc = np.exp(
            np.log(p["r90_kpc_median"]) + p["r90_kpc_sigma"] * rng.standard_normal(len(todo))
        )
        r90[todo] = r_kpc / kpc_per_arcsec[todo]
        todo = todo[r90[todo] < MIN_R90]
        if len(todo) == 0:
            break
    r90 = np.round(np.maximum(r90, MIN_R90), 4)

    psf_px = trunc_lognormal(rng, n, p["psf_fwhm_px_median"], p["psf_fwhm_px_sigma"], 1.5, 7.5)
    tail = rng.random(n) < p["psf_tail_fraction"]
    hi = max(p["psf_tail_max_px"], 7.5)
    psf_px[tail] = np.exp(rng.uniform(np.log(7.5), np.log(hi), int(tail.sum())))
    psf = np.round(psf_px * NATIVE_SCALE, 4)

    ra = rng.uniform(110.0, 260.0, n)
    s0, s1 = np.sin(np.radians([-5.0, 70.0]))
    dec = np.degrees(np.arcsin(rng.uniform(s0, s1, n)))

    # r magnitude from Euclidean counts on [13, 17.7]
    e0, e1 = 10 ** (0.6 * 13.0), 10 ** (0.6 * 17.7)
    mag_r = np.log10(e0 + rng.random(n) * (e1 - e0)) / 0.6
    g_r = np.where(
        secondary, 0.75 + 0.08 * rng.standard_normal(n), 0.55 + 0.15 * rng.standard_normal(n)
    )
    r_i = np.where(
        secondary, 0.40 + 0.05 * rng.standard_normal(n), 0.30 + 0.08 * rng.standard_normal(n)
    )
    cos_i = rng.random(n)
    q = np.sqrt((1 - 0.2**2) * cos_i**2 + 0.2**2)
    q[secondary] = rng.uniform(0.5, 1.0, n2)
    pa = rng.uniform(0.0, 180.0, n)
    bt = rng.beta(1.5, 4.0, n)
    bt[secondary] = rng.beta(5.0, 2.5, n2)
    xc = IMAGE_SIZE / 2 + 0.5 * rng.standard_normal(n)
    yc = IMAGE_SIZE / 2 + 0.5 * rng.standard_normal(n)

    side, fwhm_sub, r90_sub = cutout_geometry(r90, psf)
    flux_r = mag_to_nmgy(mag_r)
    return pd.DataFrame(
        {
            "ra": np.round(ra, 6),
            "dec": np.round(dec, 6),
            "z": np.round(z, 5),
            "petroR90_r": r90,
            "psffwhm_r": psf,
            "sample": np.asarray(SAMPLES, dtype=object)[sample_idx],
            "mag_r": mag_r,
            **band_fluxes(flux_r, g_r, r_i),
            "axis_ratio": q,
            "position_angle": pa,
            "bulge_fraction": bt,
            "bulge_visible": bt >= p["bulge_visible_min"],
            "x_centre": xc,
            "y_centre": yc,
            # derived (not written): subject-frame geometry
            "_sample": sample_idx,
            "_side": side,
            "_fwhm": fwhm_sub,
            "_r90": r90_sub,
        }
    )


# --------------------------------------------------------------------------- clumps


def disc_positions(gal_idx, u, gal, rng):
    """Subject-pixel positions of points at disc radius ``u`` R90 (random azimuth)."""
    phi = rng.uniform(0.0, 2 * np.pi, len(u))
    q = gal["axis_ratio"].to_numpy()[gal_idx]
    pa = np.radians(gal["position_angle"].to_numpy()[gal_idx])
    r90 = gal["_r90"].to_numpy()[gal_idx]
    dx, dy = u * np.cos(phi) * r90, q * u * np.sin(phi) * r90
    c, s = np.cos(pa), np.sin(pa)
    x = gal["x_centre"].to_numpy()[gal_idx] + c * dx - s * dy
    y = gal["y_centre"].to_numpy()[gal_idx] + s * dx + c * dy
    return x, y


def _clump_radii(n, p, rng):
    u = rng.gamma(p["clump_radius_shape"], p["clump_radius_scale"], n)
    outer = rng.random(n) < p["clump_outer_fraction"]
    u[outer] = rng.uniform(1.3, 2.6, int(outer.sum()))
    return u


def pairs_within(ptr: np.ndarray):
    """All index pairs (a, b), a < b, inside each CSR group."""
    counts = np.diff(ptr)
    aa, bb = [], []
    for m in np.unique(counts[counts > 1]):
        starts = ptr[:-1][counts == m]
        ia, ib = np.triu_indices(int(m), 1)
        aa.append((starts[:, None] + ia[None, :]).ravel())
        bb.append((starts[:, None] + ib[None, :]).ravel())
    if not aa:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(aa), np.concatenate(bb)


def resolution_factors(fwhm, q, p: dict):
    """How a galaxy's resolution and inclination set what can be seen in it.

    Returns (window, incl, richness) per galaxy: ``window`` = exp(-(ln(F /
    ``clumpy_fwhm_peak``) / ``clumpy_fwhm_width``)^2 / 2), the resolution window in the
    subject-pixel FWHM F; ``incl`` = clip((q - 0.2) / 0.2, 0, 1), which hides the disc of a
    nearly edge-on galaxy; ``richness`` = (F / ``clumpy_fwhm_peak``)^-``clumps_resolution_slope``,
    how many separate knots a galaxy shows relative to one at the peak. Clumps and (with
    ``faint_follow_resolution``) faint features use the same three factors.
    """
    fwhm = np.asarray(fwhm, dtype=float)
    window = np.exp(-0.5 * (np.log(fwhm / p["clumpy_fwhm_peak"]) / p["clumpy_fwhm_width"]) ** 2)
    incl = np.clip((np.asarray(q, dtype=float) - 0.2) / 0.2, 0.0, 1.0)
    richness = (fwhm / p["clumpy_fwhm_peak"]) ** (-p["clumps_resolution_slope"])
    return window, incl, richness


def make_clumps(gal: pd.DataFrame, p: dict, rng: np.random.Generator):
    """True clumps: counts, positions, unusual flags, fluxes. Returns (df, n_dropped)."""
    n = len(gal)
    fwhm = gal["_fwhm"].to_numpy()
    q = gal["axis_ratio"].to_numpy()
    p_sample = np.array([p["clumpy_primary"], p["clumpy_secondary"], p["clumpy_simulated"]])
    window, incl, richness = resolution_factors(fwhm, q, p)
    clumpy = rng.random(n) < p_sample[gal["_sample"].to_numpy()] * window * incl
    mu = p["clumps_extra_mean"] * richness
    k = p["clumps_dispersion"]
    extra = rng.negative_binomial(k, k / (k + mu)) if k > 0 else rng.poisson(mu)
    n_cl = np.where(clumpy, np.minimum(1 + extra, max(p["clumps_max"], 1)), 0)

    gidx = np.repeat(np.arange(n), n_cl)
    m = len(gidx)
    u = _clump_radii(m, p, rng)
    x, y = disc_positions(gidx, u, gal, rng)
    ptr = csr_offsets(n_cl)
    pa_, pb_ = pairs_within(ptr)
    sep = p["clump_min_separation"] * fwhm[gidx]
    bulge = gal["bulge_visible"].to_numpy()[gidx]
    xc, yc = gal["x_centre"].to_numpy()[gidx], gal["y_centre"].to_numpy()[gidx]

    def misplaced():
        bad = (x < 1) | (x > IMAGE_SIZE - 1) | (y < 1) | (y > IMAGE_SIZE - 1)
        bad |= bulge & (np.hypot(x - xc, y - yc) < sep)
        if len(pa_):
            close = np.hypot(x[pa_] - x[pb_], y[pa_] - y[pb_]) < sep[pb_]
            bad[pb_[close]] = True
        return bad

    for _ in range(20):
        bad = misplaced()
        if not bad.any():
            break
        idx = np.flatnonzero(bad)
        u[idx] = _clump_radii(len(idx), p, rng)
        x[idx], y[idx] = disc_positions(gidx[idx], u[idx], gal, rng)
    # still misplaced after 20 redraws: drop (a later clump of a too-close pair goes)
    ok = ~misplaced()
    n_dropped = int((~ok).sum())
    gidx, u, x, y = gidx[ok], u[ok], x[ok], y[ok]
    m = len(gidx)

    p_unusual = np.clip(p["unusual_fraction"] + p["unusual_radial_slope"] * (u - 1.0), 0.0, 1.0)
    unusual = rng.random(m) < p_unusual
    delta = (
        p["clump_contrast_mean"] - 0.4 * unusual + p["clump_contrast_sd"] * rng.standard_normal(m)
    )
    g_r = np.where(
        unusual, 0.7 + 0.25 * rng.standard_normal(m), 0.25 + 0.2 * rng.standard_normal(m)
    )
    r_i = np.where(
        unusual, 0.3 + 0.15 * rng.standard_normal(m), 0.05 + 0.1 * rng.standard_normal(m)
    )
    df = _object_table(gal, gidx, x, y, delta, g_r, r_i)
    df["unusual"] = unusual
    df["clump"] = local_index(np.bincount(gidx, minlength=n))
    return df, n_dropped


def _object_table(gal, gidx, x, y, delta, g_r, r_i) -> pd.DataFrame:
    mag = gal["mag_r"].to_numpy()[gidx] + delta
    flux_r = mag_to_nmgy(mag)
    return pd.DataFrame(
        {
            "_gal": gidx,
            "x": x,
            "y": y,
            **band_fluxes(flux_r, g_r, r_i),
            "_delta": delta,
            "_g_r": g_r,
        }
    )


def make_distractors(gal: pd.DataFrame, clumpy: np.ndarray, p: dict, rng) -> pd.DataFrame:
    """Faint features, foreground stars and visible bulges (``truth_distractors.csv``)."""
    n = len(gal)
    sample = gal["_sample"].to_numpy()
    lam = np.where(sample == 1, p["faint_features_secondary"], p["faint_features_mean"])
    lam = lam * np.where(clumpy, 1.5, 1.0)
    if p["faint_follow_resolution"]:
        window, incl, richness = resolution_factors(
            gal["_fwhm"].to_numpy(), gal["axis_ratio"].to_numpy(), p
        )
        lam = lam * window * incl * richness
    n_ff = rng.poisson(lam)
    g_ff = np.repeat(np.arange(n), n_ff)
    m = len(g_ff)
    u = rng.gamma(p["faint_radius_shape"], p["faint_radius_scale"], m)
    x, y = disc_positions(g_ff, u, gal, rng)
    x, y = np.clip(x, 1.0, IMAGE_SIZE - 1.0), np.clip(y, 1.0, IMAGE_SIZE - 1.0)
    delta = p["faint_contrast_mean"] + p["faint_contrast_sd"] * rng.standard_normal(m)
    ff = _object_table(
        gal,
        g_ff,
        x,
        y,
        delta,
        0.0 + 0.15 * rng.standard_normal(m),
        -0.1 + 0.1 * rng.standard_normal(m),
    )
    ff["kind"] = "faint_feature"

    n_st = rng.poisson(p["stars_mean"], n)
    g_st = np.repeat(np.arange(n), n_st)
    m = len(g_st)
    mag = rng.uniform(14.0, 21.5, m)
    st = _object_table(
        gal,
        g_st,
        rng.uniform(8.0, IMAGE_SIZE - 8.0, m),
        rng.uniform(8.0, IMAGE_SIZE - 8.0, m),
        mag - gal["mag_r"].to_numpy()[g_st],
        0.9 + 0.35 * rng.standard_normal(m),
        0.35 + 0.15 * rng.standard_normal(m),
    )
    st["kind"] = "star"

    g_b = np.flatnonzero(gal["bulge_visible"].to_numpy())
    bt = gal["bulge_fraction"].to_numpy()[g_b]
    gr_gal = -2.5 * np.log10(gal["flux_g"].to_numpy()[g_b] / gal["flux_r"].to_numpy()[g_b])
    ri_gal = 2.5 * np.log10(gal["flux_i"].to_numpy()[g_b] / gal["flux_r"].to_numpy()[g_b])
    bu = _object_table(
        gal,
        g_b,
        gal["x_centre"].to_numpy()[g_b],
        gal["y_centre"].to_numpy()[g_b],
        -2.5 * np.log10(bt),
        gr_gal + 0.1,
        ri_gal + 0.05,
    )
    bu["kind"] = "bulge"
    df = pd.concat([ff, st, bu], ignore_index=True)
    df = df.sort_values(["_gal", "kind"], kind="stable", ignore_index=True)
    df["distractor"] = local_index(np.bincount(df["_gal"].to_numpy(), minlength=n))
    return df
