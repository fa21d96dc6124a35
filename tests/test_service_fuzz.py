"""clumpscout serve against 10,000+ bad requests (in process): never a 500, never a
traceback, one line per refusal, nothing stored, memory bounded."""

from __future__ import annotations

import asyncio
import copy
import json
import random
import sqlite3

import httpx2
import pytest
from caesar_feed import TOY_CONFIG, caesar_extract

from clumpscout.service import settings as ss
from clumpscout.service.app import Credential, Service, build_app

AUTH = ("caesar", "s3cret-pw")
BAD_VALUES = [
    None,
    True,
    -1,
    0,
    1.5,
    2**70,
    "",
    "x" * 300,
    "12",
    [],
    [1],
    {},
    {"a": 1},
    [[1]],
    "2020-13-45",
]


def good(rng: random.Random) -> list[dict]:
    n = rng.randint(0, 4)
    frame = {
        "T0_tool0_x": [rng.uniform(0, 100) for _ in range(n)],
        "T0_tool0_y": [rng.uniform(0, 100) for _ in range(n)],
    }
    return [
        caesar_extract(
            rng.randint(1, 10**6),
            7,
            rng.choice([None, 5]),
            "2020-01-01T00:00:00Z",
            {"frame0": frame} if n else {},
        )
    ]


def mutations(rng: random.Random):
    """One bad body per call, from one of many kinds of damage."""
    base = good(rng)
    e = base[0]
    kind = rng.randrange(16)
    if kind == 0:  # random bytes
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
    if kind == 1:  # valid JSON cut short
        text = json.dumps(base)
        return text[: rng.randint(0, len(text) - 1)].encode()
    if kind == 2:  # NaN / Infinity where a number goes
        return (
            json.dumps(base)
            .replace("2020", rng.choice(["NaN", "Infinity", "-Infinity"]), 1)
            .encode()
        )
    if kind == 3:  # a required field missing
        e.pop(
            rng.choice(
                ["classification_id", "subject_id", "extractor_key", "classification_at", "data"]
            )
        )
    elif kind == 4:  # a field of the wrong type
        field = rng.choice(
            [
                "classification_id",
                "subject_id",
                "extractor_key",
                "classification_at",
                "user_id",
                "workflow_id",
            ]
        )
        e[field] = rng.choice(
            [v for v in BAD_VALUES if v is not None or field not in ("user_id", "workflow_id")]
        )
        if field == "extractor_key" and isinstance(e[field], str) and 0 < len(e[field]) <= 200:
            e[field] = 12
        if field == "workflow_id" and type(e[field]) is int:
            e[field] = "w"
    elif kind == 5:  # data of the wrong shape
        e["data"] = rng.choice([[], "x", 1, [{"a": 1}], {"frame0": []}, {"frame0": "x"}])
    elif kind == 6:  # coordinates that are not numbers
        bad = [v for v in BAD_VALUES if type(v) not in (int, float)]
        e["data"] = {"frame0": {"T0_tool0_x": [1, rng.choice(bad)], "T0_tool0_y": [1, 2]}}
    elif kind == 7:  # an unknown key, frame or shape
        e["data"] = {
            rng.choice(["frameA", "frame-1", "T0_x", "whatever", "frame99999999"]): {
                "T0_tool0_x": [1],
                "T0_tool0_y": [1],
            }
        }
        if rng.random() < 0.5:
            e["data"] = {
                "frame0": {rng.choice(["T0_tool0_q", "T0_toolX_x", "x", "T0_tool0_points"]): [1]}
            }
    elif kind == 8:  # lists of different lengths
        e["data"] = {"frame0": {"T0_tool0_x": [1, 2], "T0_tool0_y": [1]}}
    elif kind == 9:  # deep nesting
        depth = rng.randint(65, 5000)
        return (
            ("[" * depth + "]" * depth).encode()
            if rng.random() < 0.5
            else ('{"a":' * depth + "1" + "}" * depth).encode()
        )
    elif kind == 10:  # two subjects
        other = good(rng)[0]
        other["subject_id"] = 8
        base.append(other)
    elif kind == 11:  # too many marks
        n = rng.choice([1001, 5000, 200_000])
        e["data"] = {"frame0": {"T0_tool0_x": "XS", "T0_tool0_y": "YS"}}
        xs, ys = ",".join(["1.5"] * n), ",".join(["2"] * n)  # json.dumps of 400,000 floats is slow
        return json.dumps(base).replace('"XS"', f"[{xs}]").replace('"YS"', f"[{ys}]").encode()
    elif kind == 12:  # a malformed shape
        e["data"] = {"frame0": rng.choice([
            {"T0_tool0_x": [1], "T0_tool0_y": [1], "T0_tool0_r": [rng.choice([0, -3])]},
            {"T0_tool0_x": [1], "T0_tool0_y": [1], "T0_tool0_width": [-1], "T0_tool0_height": [2]},
            {"T0_tool0_x": [1], "T0_tool0_y": [1], "T0_tool0_rx": [1], "T0_tool0_ry": [0], "T0_tool0_angle": [3]},
            {"T0_tool0_x": [1e308], "T0_tool0_y": [1], "T0_tool0_width": [1e308], "T0_tool0_height": [1]},
        ])}  # fmt: skip
    elif kind == 13:  # not an array of extracts
        return json.dumps(
            rng.choice([{}, 1, "x", None, [1, 2], [[]], {"extracts": 3}, {"extracts": []}])
        ).encode()
    elif kind == 14:  # a date that is not one
        e["classification_at"] = rng.choice(
            ["", "yesterday", "2020-02-30T00:00:00Z", "9" * 30, "2020-01-01T25:00"]
        )
    else:  # unicode in keys and strings, control characters
        e["data"] = {"frame0": {"T0_tööl0_x\u0000": [1], "T0_tool0_y": [1]}}
    return json.dumps(base).encode()


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.slow
def test_ten_thousand_bad_requests(tmp_path):
    """Through the ASGI app in process (httpx's ASGI transport, one event loop): damaged
    Caesar bodies of 16 kinds, damaged export rows, wrong methods and subject ids."""
    rng = random.Random(20231)
    s = ss.from_config(ss.check(copy.deepcopy(TOY_CONFIG)))
    db = tmp_path / "s.db"
    service = Service(s, db, Credential(*AUTH))
    app = build_app(service)
    statuses: dict = {}
    rss = []

    async def send(c, i):
        if i % 100 == 99:  # export rows, CSV or JSON, damaged
            body = rng.choice(
                [
                    b"classification_id\n1\n",
                    b"\x00\xff,,\n",
                    b'[{"annotations": "[{"}]',
                    b"a,b\n1",
                    b"[]",
                ]
            )
            ctype = rng.choice(["text/csv", "application/json"])
            return await c.post("/classifications", content=body, headers={"content-type": ctype})
        if i % 97 == 96:
            return await c.request(rng.choice(["GET", "PUT", "DELETE"]), "/reduce")
        if i % 89 == 88:
            return await c.get(f"/subjects/{rng.choice(['x', '-1', '1' * 40, '%00'])}")
        return await c.post("/reduce", content=mutations(rng))

    async def run():
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://serve", auth=AUTH) as c:
            for i in range(10_300):
                r = await send(c, i)
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
                assert "Traceback" not in r.text and 'File "' not in r.text
                if r.headers.get("content-type", "").startswith("application/json"):
                    msg = r.json()["error"]
                    assert "\n" not in msg and len(msg) <= 300
                if i in (1000, 10_299):
                    rss.append(_rss_mb())
            assert (await c.get("/health")).status_code == 200  # and it keeps serving

    service.start()
    try:
        asyncio.run(run())
    finally:
        service.stop()
    print(statuses, rss)
    assert sum(statuses.values()) >= 10_000
    assert rss[1] - rss[0] < 100, rss  # memory bounded
    con = sqlite3.connect(db)
    for table in ("extracts", "classifications", "subjects", "skills"):
        assert con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0, table
