"""The volunteers of the simulated universe: activity, skills, spammers, experts, and the
Zooniverse subject queue that decides who classifies which subject, and when.

The model and its knobs are documented in :mod:`clumpscout.simulation.universe`.
"""

from __future__ import annotations

import logging
import math

import numba
import numpy as np
import pandas as pd
from scipy.stats import norm

from clumpscout.simulation.config import LAUNCH_DAYS, beta_draws, csr_offsets, local_index

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- volunteers


def _activity(n_vol, n_subjects, p, rng, heavy_fraction=None):
    """Subjects per volunteer: casual lognormal + committed power-law tail (see docstring)."""
    cap = max(1, int(p["heavy_max_fraction"] * n_subjects))
    casual = np.ceil(rng.lognormal(np.log(p["activity_median"]), p["activity_sigma"], n_vol))
    casual = np.minimum(casual, cap)
    hf = p["heavy_fraction"] if heavy_fraction is None else heavy_fraction
    heavy = rng.random(n_vol) < hf
    lo = float(min(max(p["heavy_min"], 1), cap))
    a = p["heavy_alpha"]
    u = rng.random(n_vol)
    if a > 0:
        # inverse CDF of p(n) ~ n^-(1+a) on [lo, cap]
        t = 1.0 - u * (1.0 - (lo / cap) ** a)
        hv = lo * t ** (-1.0 / a)
    else:
        hv = lo * (cap / lo) ** u
    n = np.where(heavy, np.floor(hv), casual)
    return np.clip(n, 1, cap).astype(np.int64), heavy


def _activity_mean(n_subjects, p) -> float:
    """Exact mean of :func:`_activity` (sums of survival functions, E[N] = sum P(N >= k))."""
    cap = max(1, int(p["heavy_max_fraction"] * n_subjects))
    k = np.arange(2, cap + 1, dtype=float)
    sigma = p["activity_sigma"]
    if sigma > 0:
        surv = norm.sf((np.log(k - 1) - np.log(p["activity_median"])) / sigma)
    else:
        surv = (p["activity_median"] > k - 1).astype(float)
    casual = 1.0 + surv.sum()
    lo = float(min(max(p["heavy_min"], 1), cap))
    a = p["heavy_alpha"]
    kk = np.arange(1, cap + 1, dtype=float)
    if cap <= lo:
        heavy = float(cap)
    elif a > 0:
        c = 1.0 - (lo / cap) ** a
        heavy = float(np.clip(1.0 - (1.0 - (lo / np.maximum(kk, lo)) ** a) / c, 0, 1).sum())
    else:
        heavy = float(np.clip(1.0 - np.log(np.maximum(kk, lo) / lo) / np.log(cap / lo), 0, 1).sum())
    f = p["heavy_fraction"]
    return (1.0 - f) * casual + f * heavy


def _match_total(n, heavy, n_slots, cap, rng):
    """Rescale the committed volunteers' counts so that they sum to ``n_slots``."""
    for _ in range(50):
        diff = n_slots - int(n.sum())
        if diff == 0:
            break
        hv = np.flatnonzero(heavy & ((n < cap) if diff > 0 else (n > 1)))
        if len(hv) == 0:
            # no committed volunteers to absorb it: adjust casual ones by one each
            cand = np.flatnonzero((n < cap) if diff > 0 else (n > 1))
            if len(cand) == 0:
                break
            n[rng.choice(cand, size=min(abs(diff), len(cand)), replace=False)] += int(np.sign(diff))
            continue
        tot = n[hv].sum()
        n[hv] = np.clip(np.floor(n[hv] * (tot + diff) / tot).astype(np.int64), 1, cap)
        rest = n_slots - int(n.sum())
        cand = np.flatnonzero(heavy & ((n < cap) if rest > 0 else (n > 1)))
        if rest and len(cand):
            k = min(abs(rest), len(cand))
            n[rng.choice(cand, size=k, replace=False)] += int(np.sign(rest))
    return n


def draw_skills(n_vol: int, p: dict, rng) -> pd.DataFrame:
    """Per-volunteer skills (distributions in the module docstring)."""
    c = p["skill_concentration"]
    shape = p["faint_boost_shape"]
    return pd.DataFrame(
        {
            "threshold": p["threshold_mean"] + p["threshold_sd"] * rng.standard_normal(n_vol),
            "faint_boost": (
                rng.gamma(shape, p["faint_boost_mean"] / shape, n_vol)
                if shape > 0
                else np.full(n_vol, p["faint_boost_mean"])
            ),
            "spurious_rate": np.minimum(
                rng.lognormal(np.log(max(p["spurious_median"], 1e-12)), p["spurious_sigma"], n_vol),
                5.0,
            ),
            "scatter_fwhm": rng.lognormal(
                np.log(max(p["scatter_median"], 1e-12)), p["scatter_sigma"], n_vol
            ),
            "p_bulge_t0": beta_draws(rng, p["p_bulge_t0_mean"], c, n_vol),
            "p_bulge_t1": beta_draws(rng, p["p_bulge_t1_mean"], c, n_vol),
            "p_double": beta_draws(rng, p["p_double_mean"], c, n_vol),
            "p_unusual_given_unusual": beta_draws(rng, p["p_unusual_hit_mean"], c, n_vol),
            "p_unusual_given_normal": beta_draws(rng, p["p_unusual_false_mean"], c, n_vol),
            "p_star": beta_draws(rng, p["p_star_mean"], c, n_vol),
            "p_skip": beta_draws(rng, p["p_skip_mean"], c, n_vol),
        }
    )


def make_cohort(n_slots: int, n_subjects: int, p: dict, rng) -> pd.DataFrame:
    """The volunteer cohort without skills: planned activity and login state.

    The cohort size is ``n_slots`` / (mean of the activity model); committed
    volunteers' counts are rescaled so that the plan sums to ``n_slots``. Not
    logged in: systematic sampling over the activity ranks (ties at random), so
    that their share of the classifications is ``not_logged_in_fraction``.
    """
    cap = max(1, int(p["heavy_max_fraction"] * n_subjects))
    mean = _activity_mean(n_subjects, p)
    n_vol = max(1, int(round(n_slots / mean)))
    n, heavy = _activity(n_vol, n_subjects, p, rng)
    n = _match_total(n, heavy, n_slots, cap, rng)
    order = np.lexsort((rng.random(n_vol), -n))
    f = p["not_logged_in_fraction"]
    start = rng.random()
    rank = np.arange(n_vol)
    anon = np.empty(n_vol, bool)
    anon[order] = np.floor((rank + 1) * f + start) > np.floor(rank * f + start)
    return pd.DataFrame({"n_planned": n, "committed": heavy, "late": False, "logged_in": ~anon})


def make_volunteers(n_slots: int, n_subjects: int, p: dict, rng, rng_spammers=None) -> pd.DataFrame:
    """The volunteer cohort (:func:`make_cohort`) with skills (:func:`draw_skills`)
    and, when ``spammer_fraction`` > 0, spammers (:func:`assign_spammers`, drawn
    from ``rng_spammers``)."""
    df = make_cohort(n_slots, n_subjects, p, rng)
    vols = pd.concat([df, draw_skills(len(df), p, rng)], axis=1)
    if p["spammer_fraction"] > 0:
        vols = assign_spammers(vols, p, rng_spammers or rng)
    return vols


def assign_spammers(vols: pd.DataFrame, p: dict, rng) -> pd.DataFrame:
    """Mark ``spammer_fraction`` of the cohort as spammers, at every activity level.

    Volunteers ranked by planned activity are cut into blocks of round(1 /
    spammer_fraction) ranks; block k holds floor((k + 1) B f + u) - floor(k B f + u)
    spammers (u uniform, so the share is f on average and in every block) at random
    positions in the block. So the committed volunteers, down to the most active
    one, are spammers in the same proportion as the casual ones. A spammer makes
    Poisson(``spammer_spurious_mean``) spurious clicks per classification and marks
    each real object with ``spammer_hit_scale`` x their usual probability; columns
    ``spammer`` and ``hit_scale`` record it.
    """
    f = p["spammer_fraction"]
    n_vol = len(vols)
    n = vols["n_planned"].to_numpy()
    width = max(1, int(round(1.0 / f)))
    rank = np.empty(n_vol, np.int64)
    rank[np.lexsort((rng.random(n_vol), -n))] = np.arange(n_vol)
    block = rank // width
    u = rng.random()
    k = np.arange(block.max() + 1 if n_vol else 0)
    per_block = np.floor((k + 1) * width * f + u) - np.floor(k * width * f + u)
    pos = np.empty(n_vol, np.int64)
    pos[np.lexsort((rng.random(n_vol), block))] = local_index(np.bincount(block))
    spam = pos < per_block[block]
    out = vols.copy()
    out["spurious_rate"] = np.where(spam, p["spammer_spurious_mean"], out["spurious_rate"])
    out["spammer"] = spam
    out["hit_scale"] = np.where(spam, p["spammer_hit_scale"], 1.0)
    return out


def fill_spammer_columns(table: pd.DataFrame, cohort: pd.DataFrame) -> pd.DataFrame:
    """``table`` with the cohort's spammer columns: late volunteers and experts are
    never spammers. Unchanged when the cohort has no spammer columns."""
    if "spammer" not in cohort.columns:
        return table
    t = table.copy()
    t["spammer"] = t["spammer"].eq(True) if "spammer" in t.columns else False
    t["hit_scale"] = t["hit_scale"].fillna(1.0) if "hit_scale" in t.columns else 1.0
    return t


def make_late_volunteers(n_slots: int, n_subjects: int, p: dict, rng, skills=None) -> pd.DataFrame:
    """Newly arriving casual volunteers who finish the last subjects (the mop-up
    phase); ``skills(n, p, rng)`` draws their skills (default :func:`draw_skills`)."""
    n_list, total = [], 0
    while total < n_slots:
        n, _ = _activity(max(16, n_slots // 2), n_subjects, p, rng, heavy_fraction=0.0)
        n_list.append(n)
        total += int(n.sum())
    n = np.concatenate(n_list)
    n = n[: int(np.searchsorted(np.cumsum(n), n_slots)) + 1]
    n_vol = len(n)
    anon = rng.random(n_vol) < p["not_logged_in_fraction"]
    df = pd.DataFrame(
        {"n_planned": n, "committed": np.zeros(n_vol, bool), "late": True, "logged_in": ~anon}
    )
    return pd.concat([df, (skills or draw_skills)(n_vol, p, rng)], axis=1)


def make_experts(n_experts: int, p: dict, rng) -> pd.DataFrame:
    """The experts' fixed skills (see the module docstring), tiny per-expert jitter."""
    e = n_experts
    return pd.DataFrame(
        {
            "n_planned": np.zeros(e, np.int64),
            "committed": np.ones(e, bool),
            "late": np.zeros(e, bool),
            "logged_in": np.ones(e, bool),
            "threshold": p["expert_threshold"] + 0.1 * rng.standard_normal(e),
            "faint_boost": np.full(e, p["expert_faint_boost"]),
            "spurious_rate": np.zeros(e),
            "scatter_fwhm": np.full(e, p["expert_scatter"]),
            "p_bulge_t0": np.ones(e),
            "p_bulge_t1": np.zeros(e),
            "p_double": np.zeros(e),
            "p_unusual_given_unusual": np.full(e, 0.85),
            "p_unusual_given_normal": np.full(e, 0.05),
            "p_star": np.zeros(e),
            "p_skip": np.zeros(e),
        }
    )


# --------------------------------------------------------------------------- schedule


def plan_sessions(
    n_per_vol: np.ndarray,
    p: dict,
    rng,
    window: tuple[float, float] | None = None,
    max_rate: float | None = None,
) -> tuple[np.ndarray, ...]:
    """Planned classification times (seconds since start) of every volunteer.

    Arrival: uniform over the project (a fraction ``launch_fraction`` in the
    launch burst), or uniform in ``window`` (seconds) without a burst. Later
    sessions fall uniformly in a span of Beta(2, 1) x the rest of the project,
    but at least ``n / max_rate`` (a volunteer cannot see distinct subjects
    faster than they flow through the project; the arrival moves earlier if
    needed). Returns (volunteer index, time, session index) for every planned
    classification, sorted by time, then volunteer. See the module docstring.
    """
    n_vol = len(n_per_vol)
    dur = p["duration_days"] * 86400.0
    if window is None:
        burst = rng.random(n_vol) < p["launch_fraction"]
        arrive = np.where(
            burst,
            np.minimum(rng.exponential(LAUNCH_DAYS * 86400.0, n_vol), 0.98 * dur),
            rng.uniform(0.0, dur, n_vol),
        )
        end = dur
    else:
        arrive = rng.uniform(window[0], window[1], n_vol)
        end = window[1]
    span = np.maximum(end - arrive, 0.0) * rng.beta(2.0, 1.0, n_vol)
    if max_rate is not None and max_rate > 0:
        need_span = np.minimum(n_per_vol / max_rate, end)
        arrive = np.minimum(arrive, end - need_span)
        span = np.clip(span, need_span, end - arrive)
    sess_size = 1 + rng.poisson(max(p["session_mean"] - 1.0, 0.0), n_vol)
    n_sess = -(-n_per_vol // sess_size)  # ceil
    sess_vol = np.repeat(np.arange(n_vol), n_sess)
    m = len(sess_vol)
    first = csr_offsets(n_sess)[:-1]
    frac = rng.random(m)
    frac[first[n_sess > 0]] = -1.0  # the first session starts on arrival
    order = np.lexsort((frac, sess_vol))
    frac = np.maximum(frac[order], 0.0)
    sess_start = arrive[sess_vol] + span[sess_vol] * frac

    total = int(n_per_vol.sum())
    ev_vol = np.repeat(np.arange(n_vol), n_per_vol)
    local = local_index(n_per_vol)
    ev_sess = np.repeat(first, n_per_vol) + local // sess_size[ev_vol]
    gap = rng.lognormal(np.log(p["seconds_per_classification"]), 0.5, total)
    csum = np.cumsum(gap)
    sess_first_ev = np.flatnonzero(np.r_[True, ev_sess[1:] != ev_sess[:-1]])
    base = np.repeat(csum[sess_first_ev] - gap[sess_first_ev], np.diff(np.r_[sess_first_ev, total]))
    t = sess_start[ev_sess] + (csum - base)
    order = np.lexsort((ev_vol, t))
    return ev_vol[order], t[order], ev_sess[order]


#: volunteers planning at least this many classifications keep a bitmap of the pool
#: slots whose subject they have seen (:func:`_serve_subjects`); the others are few-subject
#: volunteers whose seen subjects are found by scanning each subject's viewers
BITMAP_MIN_PLANNED = 32
_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)


@numba.njit(cache=True)
def _lowest_set(word):  # pragma: no cover
    """Index of the lowest set bit of a non-zero uint64."""
    i = 0
    while (word >> np.uint64(i)) & np.uint64(1) == np.uint64(0):
        i += 1
    return i


@numba.njit(cache=True)
def _first_clear(bits, lo, hi):  # pragma: no cover
    """First position in [lo, hi) whose bit is clear in the bitmap ``bits``, else -1."""
    if lo >= hi:
        return -1
    w = lo >> 6
    last = (hi - 1) >> 6
    free = ~bits[w] & (_ONES << np.uint64(lo & 63))
    while True:
        if w == last:
            rem = hi - (w << 6)
            if rem < 64:
                free &= (np.uint64(1) << np.uint64(rem)) - np.uint64(1)
            if free == np.uint64(0):
                return -1
            return (w << 6) + _lowest_set(free)
        if free != np.uint64(0):
            return (w << 6) + _lowest_set(free)
        w += 1
        free = ~bits[w]


@numba.njit(cache=True)
def _set_bit(bits, row, k, on):  # pragma: no cover
    w = k >> 6
    b = np.uint64(1) << np.uint64(k & 63)
    if on:
        bits[row, w] |= b
    else:
        bits[row, w] &= ~b


@numba.njit(cache=True)
def _serve_subjects(
    ev_vol, ev_u, queue, need, seen, cnt, retire, pool, state, ev0, bit_row, bits
):  # pragma: no cover
    """Replay the Zooniverse subject queue in time order (see module docstring).

    For each planned classification (volunteer ``ev_vol[e]``, in time order)
    take the first subject the volunteer has not seen, scanning the active pool
    from a random start ``ev_u[e]``; a subject retires once it has ``need[s]``
    classifications and the next subject of ``queue`` joins the pool. The
    queue state (``seen`` volunteers per subject, ``cnt``, ``retire`` = global
    index of the retiring event, ``pool``, ``state`` = [pool size, next queue
    position]) is updated in place so that a later phase can continue it;
    ``ev0`` is the global index of ``ev_vol[0]``. Returns the subject of each
    event, -1 where the volunteer found no unseen subject (or none was left).

    Volunteer v with ``bit_row[v]`` >= 0 keeps row ``bits[bit_row[v]]``: bit k is
    set iff v has seen the subject in pool slot k, so that the first unseen slot
    is found a word (64 slots) at a time, and a volunteer who has seen the whole
    pool is known at once (the many-subject volunteers of a large project would
    otherwise rescan the pool at every classification). The others scan the pool
    slot by slot, checking each subject's viewers; both give the same slot.
    """
    n_sub = need.shape[0]
    n_ev = ev_vol.shape[0]
    out = np.full(n_ev, -1, np.int64)
    size = state[0]
    nxt = state[1]
    for e in range(n_ev):
        if size == 0:
            break
        v = ev_vol[e]
        start = int(ev_u[e] * size)
        if start >= size:
            start = size - 1
        slot = -1
        row = bit_row[v]
        if row >= 0:
            slot = _first_clear(bits[row], start, size)
            if slot < 0:
                slot = _first_clear(bits[row], 0, start)
        else:
            for t in range(size):
                k = start + t
                if k >= size:
                    k -= size
                s = pool[k]
                dup = False
                for r in range(cnt[s]):
                    if seen[s, r] == v:
                        dup = True
                        break
                if not dup:
                    slot = k
                    break
        if slot < 0:
            continue
        s = pool[slot]
        seen[s, cnt[s]] = v
        cnt[s] += 1
        out[e] = s
        if row >= 0:
            _set_bit(bits, row, slot, True)
        if cnt[s] >= need[s]:
            retire[s] = ev0 + e
            for r in range(cnt[s]):  # slot is vacated: its viewers have not seen the next
                if bit_row[seen[s, r]] >= 0:
                    _set_bit(bits, bit_row[seen[s, r]], slot, False)
            if nxt < n_sub:
                pool[slot] = queue[nxt]
                nxt += 1
            else:
                size -= 1
                if slot != size:  # the last slot's subject moves into the vacated one
                    m = pool[size]
                    pool[slot] = m
                    for r in range(cnt[m]):
                        if bit_row[seen[m, r]] >= 0:
                            _set_bit(bits, bit_row[seen[m, r]], size, False)
                            _set_bit(bits, bit_row[seen[m, r]], slot, True)
    state[0] = size
    state[1] = nxt
    return out


def serve_subjects(vols: pd.DataFrame, need: np.ndarray, p: dict, rng, skills=None) -> dict:
    """Who classifies which subject, and when (module docstring, "Who sees what").

    Phase 1 replays the cohort's planned classifications; while subjects are
    still short of their target, newly arriving casual volunteers (``late``)
    classify them right after the last planned classification. Returns the
    (possibly extended) volunteer table and the realised classifications
    (volunteer, subject, time, session) in time order, plus counts. ``skills``
    draws the late volunteers' skills (default :func:`draw_skills`).
    """
    n_sub = len(need)
    queue = rng.permutation(n_sub).astype(np.int64)
    max_need = int(need.max()) if n_sub else 1
    seen = np.full((n_sub, max_need), -1, np.int64)
    cnt = np.zeros(n_sub, np.int64)
    retire = np.full(n_sub, -1, np.int64)
    size = min(max(int(p["active_subjects"]), 1), n_sub)
    pool = np.zeros(max(size, 1), np.int64)
    pool[:size] = queue[:size]
    state = np.array([size, size], np.int64)
    need = need.astype(np.int64)
    # bitmaps of the pool slots seen, for the cohort's many-subject volunteers only
    many = np.flatnonzero(vols["n_planned"].to_numpy() >= BITMAP_MIN_PLANNED)
    bit_row = np.full(len(vols), -1, np.int64)
    bit_row[many] = np.arange(len(many))
    bits = np.zeros((len(many), -(-len(pool) // 64)), np.uint64)

    parts = []
    n_events = n_skipped = n_sess = 0
    window = None
    for phase in range(30):
        if phase > 0:
            left = int((need - cnt).sum())
            if state[0] == 0 or left <= 0:
                break
            late = make_late_volunteers(int(math.ceil(1.1 * left)) + 5, n_sub, p, rng, skills)
            late.index = late.index + len(vols)
            vols = pd.concat([vols, late])
            t_last = float(parts[-1]["t"].max()) if parts and len(parts[-1]["t"]) else 0.0
            window = (t_last, t_last + 3 * 86400.0)
            n_plan = np.zeros(len(vols), np.int64)
            n_plan[late.index.to_numpy()] = late["n_planned"].to_numpy()
            bit_row = np.r_[bit_row, np.full(len(late), -1, np.int64)]
        else:
            n_plan = vols["n_planned"].to_numpy()
        rate = None if phase else 0.5 * n_sub / (p["duration_days"] * 86400.0)
        ev_vol, ev_t, ev_sess = plan_sessions(n_plan, p, rng, window, max_rate=rate)
        ev_sub = _serve_subjects(
            ev_vol.astype(np.int64), rng.random(len(ev_vol)), queue, need, seen, cnt, retire,
            pool, state, n_events, bit_row, bits,
        )  # fmt: skip
        parts.append({"vol": ev_vol, "sub": ev_sub, "t": ev_t, "sess": ev_sess + n_sess})
        n_events += len(ev_vol)
        n_skipped += int((ev_sub < 0).sum())
        n_sess += int(ev_sess.max()) + 1 if len(ev_sess) else 0
    cat = {k: np.concatenate([q[k] for q in parts]) for k in parts[0]}
    done = cat["sub"] >= 0
    ev_index = np.full(n_events, -1, np.int64)
    ev_index[done] = np.arange(int(done.sum()))
    return {
        "volunteers": vols.reset_index(drop=True),
        "vol": cat["vol"][done],
        "sub": cat["sub"][done],
        "t": cat["t"][done],
        "session": cat["sess"][done],
        "n_sessions": n_sess,
        "n_classified": cnt,
        "retire_cls": np.where(retire >= 0, ev_index[np.maximum(retire, 0)], -1),
        "planned": n_events,
        "not_done": n_skipped,
        "late_phases": len(parts) - 1,
    }


# --------------------------------------------------------------------------- the queue of either universe


def _expert_schedule(n_experts, subj, p, rng):
    """(expert, subject index, time, session, number of sessions) of every expert
    classification: each expert does all ``subj`` in random order, in sessions of
    50 (~40 s apart) at random times in the last 40% of the project."""
    dur = p["duration_days"] * 86400.0
    k = len(subj)
    ex, su, tt, se = [], [], [], []
    n_sess = 0
    for e in range(n_experts if k else 0):
        sess = np.arange(k) // 50
        m = int(sess[-1]) + 1
        starts = np.sort(rng.uniform(0.6 * dur, dur, m))
        gap = rng.lognormal(np.log(40.0), 0.4, k)
        csum = np.cumsum(gap)
        first = np.arange(m) * 50
        ex.append(np.full(k, e))
        su.append(rng.permutation(subj))
        tt.append(starts[sess] + csum - (csum[first] - gap[first])[sess])
        se.append(n_sess + sess)
        n_sess += m
    if not ex:
        z = np.zeros(0, np.int64)
        return z, z, np.zeros(0), z, 0
    ex, su, tt, se = (np.concatenate(a) for a in (ex, su, tt, se))
    order = np.lexsort((ex, tt))
    return ex[order], su[order].astype(np.int64), tt[order], se[order], n_sess


def _classification_ids(n, base, rng):
    return base + np.cumsum(1 + rng.poisson(6.0, n)).astype(np.int64)


def run_queue(vols: pd.DataFrame, need: np.ndarray, p: dict, rng, skills=None) -> dict:
    """:func:`serve_subjects` plus classification ids and start times.

    Keys: volunteers (cohort plus late volunteers), vol, sub, t (end), t_start,
    session, cls_id (per classification, time order), n_sessions, n_classified,
    retire_cls, retired, need (per subject), planned, not_done, late_phases.
    """
    served = serve_subjects(vols, need, p, rng, skills)
    n_cls = len(served["vol"])
    cls_id = _classification_ids(n_cls, 200_000_000, rng)
    dur_s = np.minimum(
        rng.lognormal(np.log(0.8 * p["seconds_per_classification"]), 0.5, n_cls), 3600
    )
    q = dict(served)
    q.update(
        cls_id=cls_id,
        t_start=served["t"] - dur_s,
        retired=served["n_classified"] >= need,
        need=need,
    )
    return q


def plan_experts(p: dict, n_sub: int, rng, make) -> dict:
    """Which subjects the experts classify, when, and their skills (``make(n, p, rng)``).

    Keys: n, n_subjects, skills, vol, sub, t, session, n_sessions, cls_id.
    """
    n_exp = p["n_experts"]
    n_es = min(p["n_expert_subjects"], n_sub) if n_exp > 0 else 0
    if n_exp > 0 and n_es < p["n_expert_subjects"]:
        log.warning(
            "simulate: n_expert_subjects %d > n_subjects %d: the experts see every subject",
            p["n_expert_subjects"], n_sub,
        )  # fmt: skip
    chosen = np.sort(rng.choice(n_sub, size=n_es, replace=False)) if n_es else np.zeros(0, int)
    skills = make(n_exp, p, rng)
    e_vol, e_sub, e_t, e_sess, e_nsess = _expert_schedule(n_exp, chosen, p, rng)
    return {
        "n": n_exp,
        "n_subjects": n_es,
        "requested": p["n_expert_subjects"] if n_exp > 0 else 0,
        "skills": skills,
        "vol": e_vol,
        "sub": e_sub,
        "t": e_t,
        "session": e_sess,
        "n_sessions": e_nsess,
        "cls_id": _classification_ids(len(e_vol), 900_000_000, rng),
    }


def queue_report(q: dict, sid: np.ndarray, ex: dict) -> dict:
    """Realised totals of the subject queue, the cohort and the experts."""
    vols, cls_vol, n_classified = q["volunteers"], q["vol"], q["n_classified"]
    n_cls, n_gal = len(cls_vol), len(sid)
    per_vol = np.bincount(cls_vol, minlength=len(vols))
    per_vol = per_vol[per_vol > 0]
    logged_in = vols["logged_in"].to_numpy()
    return {
        "subjects": n_gal,
        "subjects_retired": int(q["retired"].sum()),
        "subjects_unretired": int((~q["retired"]).sum()),
        "classification_slots": int(q["need"].sum()),
        "planned_classifications": q["planned"],
        "planned_classifications_not_done": q["not_done"],
        "late_volunteer_phases": q["late_phases"],
        "late_volunteers": int(vols["late"].sum()),
        "classifications": n_cls,
        "classifications_per_subject_mean": float(n_cls / n_gal),
        "classifications_per_subject_min": int(n_classified.min()),
        "classifications_per_subject_max": int(n_classified.max()),
        "subjects_below_20_classifications": int((n_classified < 20).sum()),
        "not_logged_in_classifications_fraction": float(
            (~logged_in[cls_vol]).mean() if n_cls else 0.0
        ),
        "volunteers_planned": int((~vols["late"]).sum()),
        "volunteers": int(np.unique(cls_vol).size),
        "volunteers_not_logged_in": int((~logged_in[np.unique(cls_vol)]).sum()),
        "subjects_per_volunteer_median": float(np.median(per_vol)) if len(per_vol) else 0.0,
        "volunteers_below_10_subjects_fraction": float((per_vol < 10).mean())
        if len(per_vol)
        else 0.0,
        "volunteers_above_200_subjects": int((per_vol > 200).sum()),
        "subjects_per_volunteer_max": int(per_vol.max()) if len(per_vol) else 0,
        "expert_subjects": ex["n_subjects"],
        "expert_subjects_requested": ex["requested"],
        "expert_classifications": int(len(ex["vol"])),
        "expert_clicks_t1": int((ex["clicks"]["task"] == ex.get("clump_task", 1)).sum()),
    }
