"""Test-only reference implementations (oracles): exact but slow, never used by the pipeline."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from clumpscout.model.distance import jaccard_distance, neg_log_distance_likelihood
from clumpscout.model.facility_location import DUMMY, UNASSIGNED


def brute_force(
    boxes,
    cls,
    open_cost,
    conn_const,
    sigma2,
    dummy_cost,
    *,
    init_phase: bool,
    d_max: float,
    likelihood: str = "d",
    can_be_facility=None,
    can_be_city=None,
    allow_dummy: bool = True,
    min_cluster_size: int = 2,
) -> tuple[np.ndarray, float]:
    """Exact optimum of one small subject (≤ 12 boxes; tests use ≤ 8) under the same objective
    and constraints as :func:`clumpscout.model.facility_location.solve_batch` (exclusivity, ``min_cluster_size`` with the dummy,
    masks, no dummy). Dynamic programming over subsets: the lowest box of the remaining set is
    either outside every cluster (dummy cost, or 0 if it cannot be a city) or in a cluster
    ``B``, whose best facility is chosen exhaustively.

    Returns ``(facility_of, cost)`` with local row indices (−1 dummy, −2 unassigned);
    ``cost`` is eq. total_cost (inf if no feasible assignment exists).
    """
    boxes = np.asarray(boxes, np.float64)
    n = boxes.shape[0]
    if n > 12:
        raise ValueError("brute_force is for at most 12 boxes")
    cls = np.asarray(cls, np.int64)
    oc, cc, s2, dc = (
        np.broadcast_to(np.asarray(x, np.float64), (n,))
        for x in (open_cost, conn_const, sigma2, dummy_cost)
    )
    fac, city = (
        np.ones(n, bool) if m is None else np.asarray(m, bool)
        for m in (can_be_facility, can_be_city)
    )
    min_eff = max(1, min_cluster_size) if allow_dummy else 1  # singletons without the dummy
    D = jaccard_distance(boxes[:, None, :], boxes[None, :, :])
    if init_phase:
        C = np.where(D <= d_max, 0.0, np.inf)
    else:
        C = cc[None, :] + neg_log_distance_likelihood(D, s2[None, :], likelihood)
    C = np.where(city[None, :], C, np.inf)  # C[f, b]: b as a city of f
    self_cost = np.where(init_phase, 0.0, cc + neg_log_distance_likelihood(0.0, s2, likelihood))
    outside = np.where(city, dc if allow_dummy else np.inf, 0.0)

    full = (1 << n) - 1
    block_cost = np.full(full + 1, np.inf)
    block_fac = np.full(full + 1, -1, np.int64)
    for mask in range(1, full + 1):
        members = [b for b in range(n) if mask >> b & 1]
        if len(members) < min_eff:
            continue
        if len(set(cls[members].tolist())) != len(members):
            continue
        for f in members:
            if not fac[f]:
                continue
            c = oc[f] + self_cost[f] + sum(C[f, b] for b in members if b != f)
            if c < block_cost[mask]:
                block_cost[mask] = c
                block_fac[mask] = f
    best = np.full(full + 1, np.inf)
    choice = np.zeros(full + 1, np.int64)
    best[0] = 0.0
    for mask in range(1, full + 1):
        low = (mask & -mask).bit_length() - 1
        rest = mask & ~(1 << low)
        v = outside[low] + best[rest]
        ch = 0  # 0 = outside
        sub = rest
        while True:
            blk = sub | (1 << low)
            c = block_cost[blk] + best[mask & ~blk]
            if c < v:
                v, ch = c, blk
            if sub == 0:
                break
            sub = (sub - 1) & rest
        best[mask] = v
        choice[mask] = ch
    facility_of = np.full(n, UNASSIGNED, np.int64)
    mask = full
    if not np.isfinite(best[full]):
        return facility_of, float("inf")
    while mask:
        low = (mask & -mask).bit_length() - 1
        blk = int(choice[mask])
        if blk == 0:
            facility_of[low] = DUMMY if (city[low] and allow_dummy) else UNASSIGNED
            mask &= ~(1 << low)
        else:
            f = int(block_fac[blk])
            for b in range(n):
                if blk >> b & 1:
                    facility_of[b] = f
            mask &= ~blk
    return facility_of, float(best[full])


# ---------------------------------------------------------------------------------------
# The consensus models, written from the paper's equations, docs/model.md and the
# generative module's docstring with plain loops (stumpy's naive.py style): never the fast
# code's vectorised form. Each takes a batch as lists (:func:`batch_lists`).
# ---------------------------------------------------------------------------------------


def batch_lists(box_subject, box_cls, box_vol, cls_subject, cls_vol):
    """The batch as Python lists: per subject its classifications (cls index, volunteer)
    and per classification its boxes."""
    subjects: dict[int, list[int]] = {}
    for c, (i, _) in enumerate(zip(cls_subject, cls_vol, strict=True)):
        subjects.setdefault(int(i), []).append(c)
    boxes_of: dict[int, list[int]] = {c: [] for c in range(len(cls_vol))}
    for b, c in enumerate(box_cls):
        boxes_of[int(c)].append(b)
    return subjects, boxes_of


def scaled_inv_chi2_posterior_mode(nu0, tau2_0, deltas_sq, weights=None):
    """The mode of σ² under a Scale-inv-χ²(ν0, τ0²) prior and zero-mean normal draws whose
    squares are ``deltas_sq`` (each with a weight, default 1), found numerically."""
    from scipy import optimize, stats

    w = [1.0] * len(deltas_sq) if weights is None else list(weights)
    prior = stats.invgamma(a=nu0 / 2.0, scale=nu0 * tau2_0 / 2.0)

    def neg_log_post(log_s2):
        s2 = math.exp(log_s2)
        ll = sum(
            wk * (-0.5 * math.log(2 * math.pi * s2) - dk / (2 * s2))
            for dk, wk in zip(deltas_sq, w, strict=True)
        )
        # the density of σ² itself (not of ln σ²): the mode of σ²
        return -(prior.logpdf(s2) + ll)

    res = optimize.minimize_scalar(
        neg_log_post,
        bounds=(math.log(1e-8), math.log(1e3)),
        method="bounded",
        options={"xatol": 1e-12},
    )
    return math.exp(res.x)


def paper_counts(box_subject, box_cls, box_vol, box_cluster, box_d, cls_subject, cls_vol, n_vol):
    """eq. num_fp, num_tp, num_fn per volunteer, and the Σ Δ² of the true positives, by
    walking every subject a volunteer classified and every established cluster there."""
    subjects, boxes_of = batch_lists(box_subject, box_cls, box_vol, cls_subject, cls_vol)
    out = {k: [0.0] * n_vol for k in ("n_boxes", "n_fp", "n_tp", "n_fn", "sum_d2")}
    for classifications in subjects.values():
        clusters = {int(box_cluster[b]) for c in classifications for b in boxes_of[c]}
        clusters.discard(-1)
        for c in classifications:
            j = int(cls_vol[c])
            mine = [b for b in boxes_of[c]]
            out["n_boxes"][j] += len(mine)
            out["n_fp"][j] += sum(1 for b in mine if box_cluster[b] < 0)
            for cl in clusters:
                hit = [b for b in mine if box_cluster[b] == cl]
                if hit:
                    out["n_tp"][j] += 1
                    out["sum_d2"][j] += float(box_d[hit[0]]) ** 2
                else:
                    out["n_fn"][j] += 1
    return out


def paper_skills(counts: dict, p):
    """eq. prob_fp, prob_fn (Beta posterior means: scipy's Beta mean) and volunteer_variance
    (the scaled-inverse-χ² posterior's mode, found numerically); a volunteer without true
    positives keeps σ²_0,V, without trials the prior means (§5.2)."""
    from scipy import stats

    def beta_mean(n_beta, p0, s, t):
        if n_beta + t == 0:
            return p0
        a, b = n_beta * p0 + s, n_beta * (1 - p0) + t - s
        if a == 0 or b == 0:  # a Beta with a zero parameter is a point mass at 0 or 1
            return float(b == 0)
        return stats.beta(a, b).mean()

    p_fp, p_fn, s2 = [], [], []
    for j in range(len(counts["n_boxes"])):
        n_fp, n_boxes = counts["n_fp"][j], counts["n_boxes"][j]
        n_tp, n_fn = counts["n_tp"][j], counts["n_fn"][j]
        p_fp.append(beta_mean(p.n_beta_fp, p.p0_fp, n_fp, n_boxes))
        p_fn.append(beta_mean(p.n_beta_fn, p.p0_fn, n_fn, n_tp + n_fn))
        if n_tp == 0:
            s2.append(p.sigma2_0_V)
        else:  # n_tp draws whose squares sum to sum_d2 (only the sum enters the posterior)
            w = [n_tp]
            s2.append(
                scaled_inv_chi2_posterior_mode(
                    p.n_chi_V, p.sigma2_0_V, [counts["sum_d2"][j] / n_tp], w
                )
            )
    return np.array(p_fp), np.array(p_fn), np.array(s2)


def generative_volunteer_params(counts, pop):
    """The generative model's volunteer M step: the posterior means of p_fn (Beta(k m,
    k(1 − m)) prior, misses out of detections and misses) and lam (Gamma(shape k m, rate k)
    prior, Poisson false boxes per classification) and the posterior mode of σ²
    (Scale-inv-χ²(ν, m_s2) prior, weighted draws), with scipy's distributions."""
    from scipy import stats

    p_fn, lam, s2 = [], [], []
    for j in range(len(counts.n_cls)):
        a = pop.k_fn * pop.m_fn + counts.n_fn[j]
        b = pop.k_fn * (1 - pop.m_fn) + counts.n_tp[j]
        p_fn.append(stats.beta(a, b).mean())
        shape = pop.k_lam * pop.m_lam + counts.n_fp[j]
        rate = pop.k_lam + counts.n_cls[j]
        lam.append(stats.gamma(shape, scale=1.0 / rate).mean())
        n = counts.n_d2[j]
        deltas = [counts.sum_d2[j] / n] if n > 0 else []
        s2.append(scaled_inv_chi2_posterior_mode(pop.nu_s2, pop.m_s2, deltas, [n] if n > 0 else []))
    return np.array(p_fn), np.array(lam), np.array(s2)


def normal_pdf(x, s2):
    return math.exp(-x * x / (2 * s2)) / math.sqrt(2 * math.pi * s2)


def paper_risk(state, b, skills, p, n_fn):
    """§5.7 for the paper's model, clump by clump: p_fp (eq. cluster_false_pos_prob,
    cluster_true_pos_prob), the clump difficulty σ²_il (eq. difficulty_estimate: mode of
    its scaled-inverse-χ² posterior with Δ² = σ²_0,S / K_i + d²), each box's combined
    variance (eq. eta_def, combined_variance), σ²_l = 1 / Σ 1/σ²_ijk and p_σ
    (docs/decisions.md#location-variance), N_fp, N_σ and R (eq. risk_expression, with
    the given N_fn). ``p.distance_likelihood`` must be ``d``."""
    assert p.distance_likelihood == "d"
    subjects, boxes_of = batch_lists(b.box_subject, b.box_cls, b.box_vol, b.cls_subject, b.cls_vol)
    n_cl = len(state.cluster_subject)
    members = {
        cl: [k for k in range(len(b.box_vol)) if state.box_cluster[k] == cl] for cl in range(n_cl)
    }
    p_fp, p_sigma, difficulty = [], [], []
    for cl in range(n_cl):
        i = int(state.cluster_subject[cl])
        marked = {int(b.box_cls[k]) for k in members[cl]}
        miss = [c for c in subjects[i] if c not in marked]
        pf = math.prod(1 - skills.p_fn[b.cls_vol[c]] for c in miss) * math.prod(
            skills.p_fp[b.cls_vol[c]] for c in marked
        )
        pt = math.prod(skills.p_fn[b.cls_vol[c]] for c in miss) * math.prod(
            1 - skills.p_fp[b.cls_vol[c]] for c in marked
        )
        p_fp.append(pf / (pf + pt))
        k_i = sum(1 for m in range(n_cl) if state.cluster_subject[m] == i)
        sq = [p.sigma2_0_S / k_i + float(state.box_d[k]) ** 2 for k in members[cl]]
        s2_il = scaled_inv_chi2_posterior_mode(p.n_chi_S, p.sigma2_0_S, sq)
        difficulty.append(s2_il)
        prec = 0.0
        for k in members[cl]:
            d, s2_j = float(state.box_d[k]), float(skills.sigma2[b.box_vol[k]])
            eta = normal_pdf(d, s2_j) / (normal_pdf(d, s2_j) + normal_pdf(d, s2_il))
            prec += 1.0 / ((1 - eta) * s2_il + eta * s2_j)
        p_sigma.append(1.0 - math.erf(p.delta / math.sqrt(2.0 / prec)))
    n_s = len(b.subjects)
    n_fp = [
        sum(p_fp[cl] for cl in range(n_cl) if state.cluster_subject[cl] == i) for i in range(n_s)
    ]
    n_sigma = [
        sum(p_sigma[cl] for cl in range(n_cl) if state.cluster_subject[cl] == i) for i in range(n_s)
    ]
    risk = [
        p.alpha_fp * n_fp[i] + p.alpha_fn * n_fn[i] + p.alpha_sigma * n_sigma[i] for i in range(n_s)
    ]
    return {
        "p_fp": np.array(p_fp),
        "p_sigma": np.array(p_sigma),
        "difficulty": np.array(difficulty),
        "n_fp": np.array(n_fp),
        "n_sigma": np.array(n_sigma),
        "risk": np.array(risk),
    }


@functools.cache
def location_norm(s2: float, d_max: float) -> float:
    """``Z(σ²) = ∫ exp(−d²/2σ²) 1[d ≤ d_max] dA`` over the offsets (in box sides) of two
    equal squares, by adaptive quadrature: an offset (a, b) leaves the overlap
    I = (1 − |a|)(1 − |b|) and d = 1 − I / (2 − I), so d ≤ d_max where I ≥ c."""
    from scipy import integrate

    c = 2 * (1 - d_max) / (2 - d_max)

    def f(bb, aa):
        inter = (1 - aa) * (1 - bb)
        d = 1 - inter / (2 - inter)
        return math.exp(-d * d / (2 * s2))

    val, _ = integrate.dblquad(f, 0, 1 - c, 0, lambda aa: 1 - c / (1 - aa), epsabs=0, epsrel=1e-10)
    return 4 * val


def _area(x):
    return max((x[2] - x[0]) * (x[3] - x[1]), 1e-12)


def _log_f(d, s2, area, d_max):
    """ln of a true box's position density around its object (the generative docstring)."""
    d = min(d, d_max)  # a label-to-box distance beyond the truncation counts at the boundary
    return -d * d / (2 * s2) - math.log(location_norm(s2, d_max)) - math.log(area)


def _at_most_one_mark(ts):
    """P(at most one of the viewers marks an object), each marking with probability t."""
    total = 0.0
    for pattern in itertools.product((0, 1), repeat=len(ts)):
        if sum(pattern) <= 1:
            total += math.prod(t if m else 1 - t for t, m in zip(ts, pattern, strict=True))
    return total


def _weight(cand, state, boxes, ts, ctx):
    """The weight of one candidate's state (:func:`generative_e_step`)."""
    b, box_cluster, box_d, labels, vp, pop, d_max = ctx
    kind, x = cand
    members = [k for k in boxes if box_cluster[k] == x] if kind == "cluster" else [x]
    if state == "false":
        return math.prod(vp.lam[b.box_vol[k]] for k in members)
    q, rho = (1.0, pop.rho) if state == "strong" else (pop.q_w, pop.rho_w)
    w = rho * math.prod(1 - q * t for t in ts)
    for k in members:
        t = 1 - vp.p_fn[b.box_vol[k]]
        s2 = vp.sigma2[b.box_vol[k]]
        if kind == "cluster":
            f = math.exp(_log_f(float(box_d[k]), s2, _area(b.xyxy[k]), d_max))
        else:  # one member: its density and the Laplace term cancel at d = 0
            f = 1.0 / (location_norm(s2, d_max) * _area(b.xyxy[k]))
        w *= q * t / (1 - q * t) * f
    if kind == "cluster":
        s2_l = 1.0 / sum(1.0 / vp.sigma2[b.box_vol[k]] for k in members)
        w *= location_norm(s2_l, d_max) * _area(labels[x])
    else:
        w *= location_norm(vp.sigma2[b.box_vol[x]], d_max) * _area(b.xyxy[x])
    return w


def generative_e_step(b, box_cluster, box_d, labels, vp, pop, d_max):
    """The generative model's posterior for a fixed partition, by enumerating every joint
    state of a subject's candidates (each cluster false, a strong or a weak object; each
    lone box false or a strong object) with the weights of the module docstring: false
    ``Π lam_b u_b`` (u = 1); a class-c object ``rho_c Π_c(1 − q t) Π_b [q t_b f_b] Z(σ²_l)
    A_l`` relative to the viewers who all missed; the undetected objects by Poisson
    thinning. Returns per cluster p_fp, p_weak; per box r_box; per subject undetected,
    undetected_weak, n_fp, n_fn; and the data log-likelihood."""
    subjects, boxes_of = batch_lists(b.box_subject, b.box_cls, b.box_vol, b.cls_subject, b.cls_vol)
    n_cl = len(labels)
    p_fp, p_weak = np.zeros(n_cl), np.zeros(n_cl)
    r_box = np.zeros(len(b.box_vol))
    n_s = len(b.subjects)
    und, und_w, n_fp, n_fn = (np.zeros(n_s) for _ in range(4))
    log_lik = 0.0
    ctx = (b, box_cluster, box_d, labels, vp, pop, d_max)
    for i, classifications in subjects.items():
        ts = [1 - vp.p_fn[b.cls_vol[c]] for c in classifications]
        boxes = [k for c in classifications for k in boxes_of[c]]
        clusters = sorted({int(box_cluster[k]) for k in boxes if box_cluster[k] >= 0})
        lone = [k for k in boxes if box_cluster[k] < 0]
        cands = [("cluster", cl) for cl in clusters] + [("lone", k) for k in lone]

        options = [
            ("false", "strong", "weak") if c[0] == "cluster" else ("false", "strong") for c in cands
        ]
        total, marg = 0.0, {}
        for states in itertools.product(*options):
            w = math.prod(_weight(c, s, boxes, ts, ctx) for c, s in zip(cands, states, strict=True))
            total += w
            for c, s in zip(cands, states, strict=True):
                marg[c, s] = marg.get((c, s), 0.0) + w
        for c in cands:
            if c[0] == "cluster":
                p_fp[c[1]] = marg[c, "false"] / total
                p_weak[c[1]] = marg[c, "weak"] / (marg[c, "strong"] + marg[c, "weak"])
            else:
                r_box[c[1]] = marg[c, "strong"] / total
        unrec_w = _at_most_one_mark([pop.q_w * t for t in ts])
        und_s = pop.rho * math.prod(1 - t for t in ts)
        und_w[i] = pop.rho_w * unrec_w
        und[i] = und_s + und_w[i]
        n_fp[i] = sum(p_fp[cl] for cl in clusters)
        n_fn[i] = und[i] + sum(r_box[k] for k in lone)
        # ln P(boxes | partition): the Poisson voids of undetected objects, the false boxes'
        # Poisson count, and the candidates' states summed out
        lam_total = sum(vp.lam[b.cls_vol[c]] for c in classifications)
        log_lik += -pop.rho * (1 - math.prod(1 - t for t in ts)) - pop.rho_w * (1 - unrec_w)
        log_lik += -lam_total + math.log(total)
    return {
        "p_fp": p_fp,
        "p_weak": p_weak,
        "r_box": r_box,
        "undetected": und,
        "undetected_weak": und_w,
        "n_fp": n_fp,
        "n_fn": n_fn,
        "log_lik": log_lik,
    }


def generative_prior(vp, pop, volunteers):
    """ln of the population priors of the volunteers' p_fn (Beta), lam (Gamma) and σ²
    (Scale-inv-χ² = Inv-Gamma(ν/2, ν τ²/2)), from scipy's distributions."""
    from scipy import stats

    out = 0.0
    for j in volunteers:
        out += stats.beta(pop.k_fn * pop.m_fn, pop.k_fn * (1 - pop.m_fn)).logpdf(vp.p_fn[j])
        out += stats.gamma(pop.k_lam * pop.m_lam, scale=1 / pop.k_lam).logpdf(vp.lam[j])
        out += stats.invgamma(pop.nu_s2 / 2, scale=pop.nu_s2 * pop.m_s2 / 2).logpdf(vp.sigma2[j])
    return out


def generative_counts(b, box_cluster, box_d, e, n_vol):
    """The M step's expected counts per volunteer (the generative module's soft counts),
    classification by classification: false boxes Σ P(false); detections Σ P(real and
    strong); misses ``R_i − detections`` (R_i the subject's expected strong objects: labels,
    lone boxes and undetected ones); Σ P(real) d² k/(k − 1) over boxes in clusters of
    k ≥ 2 and Σ P(real) of those."""
    subjects, boxes_of = batch_lists(b.box_subject, b.box_cls, b.box_vol, b.cls_subject, b.cls_vol)
    out = {
        k: np.zeros(n_vol) for k in ("n_cls", "n_boxes", "n_fp", "n_tp", "n_fn", "sum_d2", "n_d2")
    }
    for i, classifications in subjects.items():
        boxes = [k for c in classifications for k in boxes_of[c]]
        clusters = {int(box_cluster[k]) for k in boxes if box_cluster[k] >= 0}
        strong_i = sum((1 - e["p_fp"][cl]) * (1 - e["p_weak"][cl]) for cl in clusters)
        strong_i += sum(e["r_box"][k] for k in boxes if box_cluster[k] < 0)
        strong_i += e["undetected"][i] - e["undetected_weak"][i]
        for c in classifications:
            j = int(b.cls_vol[c])
            out["n_cls"][j] += 1
            tp_c = 0.0
            for k in boxes_of[c]:
                cl = int(box_cluster[k])
                real = 1 - e["p_fp"][cl] if cl >= 0 else e["r_box"][k]
                strong = real * (1 - e["p_weak"][cl]) if cl >= 0 else real
                out["n_boxes"][j] += 1
                out["n_fp"][j] += 1 - real
                tp_c += strong
                size = sum(1 for m in boxes if box_cluster[m] == cl) if cl >= 0 else 1
                if size >= 2:
                    out["sum_d2"][j] += real * float(box_d[k]) ** 2 * size / (size - 1)
                    out["n_d2"][j] += real
            out["n_tp"][j] += tp_c
            out["n_fn"][j] += max(strong_i - tp_c, 0.0)
    return out


def generative_partition_cost(b, facility_of: dict, vp, pop, d_max, q=1.0, rho=None):
    """The cost the generative model's partition step minimises (its facility costs,
    generative.facility_costs's docstring) for an assignment of some boxes (a dict row ->
    facility row, −1 the dummy): a facility opens at
    ``max(−G_i(q) − ln rho − ln Z(σ²_f) − ln A_f, 0)``, a member b (the facility included,
    at d = 0) pays ``−swap_b + ln Z(σ²_b) + ln A_b + d²/(2·2σ²_b)`` (∞ beyond d_max), a box
    on the dummy ``−ln lam_b``."""
    from clumpscout.model.distance import jaccard_distance as jd

    rho = pop.rho if rho is None else rho
    subjects, boxes_of = batch_lists(b.box_subject, b.box_cls, b.box_vol, b.cls_subject, b.cls_vol)
    g = {
        i: sum(math.log(1 - q * (1 - vp.p_fn[b.cls_vol[c]])) for c in cls)
        for i, cls in subjects.items()
    }
    total = 0.0
    for k, f in facility_of.items():
        j = int(b.box_vol[k])
        s2, t = vp.sigma2[j], q * (1 - vp.p_fn[j])
        if f < 0:
            total += -math.log(vp.lam[j])
            continue
        d = float(jd(b.xyxy[f][None], b.xyxy[k][None])[0])
        if d > d_max:
            return math.inf
        total += -math.log(t / (1 - t)) + math.log(location_norm(s2, d_max))
        total += math.log(_area(b.xyxy[k])) + d * d / (4 * s2)
        if f == k:
            i = int(b.box_subject[k])
            open_ = -g[i] - math.log(rho) - math.log(location_norm(s2, d_max))
            total += max(open_ - math.log(_area(b.xyxy[k])), 0.0)
    return total


def subject_assignments(b, i, min_cluster_size=2):
    """Every assignment of subject ``i``'s boxes (a dict row -> facility row, −1 the dummy):
    the dummy and clusters of at least ``min_cluster_size`` boxes, at most one per
    classification, each with one of its boxes as facility."""
    rows = [k for k in range(len(b.box_vol)) if b.box_subject[k] == i]
    for labels in itertools.product(range(len(rows) + 1), repeat=len(rows)):
        blocks: dict[int, list[int]] = {}
        for r, lab in zip(rows, labels, strict=True):
            if lab:
                blocks.setdefault(lab, []).append(r)
        if sorted(blocks) != list(range(1, len(blocks) + 1)):
            continue  # each set of blocks once: numbered in order of first appearance
        if any(min(blocks[a]) > min(blocks[a + 1]) for a in range(1, len(blocks))):
            continue
        ok = all(
            len(m) >= min_cluster_size and len({int(b.box_cls[r]) for r in m}) == len(m)
            for m in blocks.values()
        )
        if not ok:
            continue
        for facs in itertools.product(*blocks.values()):
            fac = dict.fromkeys(rows, -1)
            for m, f in zip(blocks.values(), facs, strict=True):
                for r in m:
                    fac[r] = f
            yield fac
