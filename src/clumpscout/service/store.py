"""The service's state in one SQLite file in WAL mode (docs/decisions.md#live-service).

Tables (schema version :data:`SCHEMA_VERSION`, SQLite's ``user_version``):

* ``meta``: the settings the decisions were made with (:meth:`Settings.fingerprint`) and
  when the file was made;
* ``extracts``: every extract received, once (primary key classification_id,
  extractor_key), as received, with the marks it had that the model does not read
  (``dropped``: other tasks and tools, counted by reason; schema 2);
* ``classifications``: one row per classification: subject, volunteer, boxes, ``g`` its
  0-based arrival rank among the classifications the model counts and ``n`` its rank
  within its subject (both null for one it does not count: ``skipped`` says why);
* ``skills``: every refit of the volunteers' skills (``version`` 1, 2, ...; ``after``: fitted
  on the classifications of rank g < after), volunteers as Parquet and the population;
* ``subjects``: each subject's classifications, retirement (``retired_at``: the n at which
  the policy retired it) and latest reply;
* ``gold_rows``: with a gold standard of expert marks, the labels of each gold subject's
  prefix with their verdicts (schema 3): the live label map is fitted on them, and fitted
  again from them after a restart;
* ``gold_checks``: each check of the gold against the volunteers before a label map learned
  from it is used (schema 4): the map, the rank g it was fitted at, the verdict, whether the
  map was used and the whole check as JSON (:mod:`clumpscout.service.gold`).

Opening checks the file before anything is served: a file that is not a database, a
database of another program, or one of a newer schema stops the service with a message
saying so (:class:`StoreError`); an older schema is migrated forward in one transaction
(:data:`MIGRATIONS`). Never a silent reset.

Writes commit with ``synchronous=FULL``: a reply is sent after the commit that holds its
classifications, so what a caller was told is on disk.
"""

from __future__ import annotations

import fcntl
import io
import json
import logging
import os
import sqlite3
import time
from pathlib import Path

import numpy as np
import pandas as pd

from clumpscout.errors import InputError
from clumpscout.model.live import LiveSkills

log = logging.getLogger(__name__)

#: the schema this code writes; older files are migrated forward (:data:`MIGRATIONS`)
SCHEMA_VERSION = 4

_SCHEMA_V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE extracts (
    classification_id INTEGER NOT NULL,
    extractor_key TEXT NOT NULL,
    subject_id INTEGER NOT NULL,
    received REAL NOT NULL,
    raw BLOB NOT NULL,
    PRIMARY KEY (classification_id, extractor_key)
) WITHOUT ROWID;
CREATE TABLE classifications (
    classification_id INTEGER PRIMARY KEY,
    subject_id INTEGER NOT NULL,
    volunteer TEXT NOT NULL,
    user_id INTEGER,
    t INTEGER NOT NULL,
    g INTEGER UNIQUE,
    n INTEGER,
    skipped TEXT,
    width REAL NOT NULL,
    height REAL NOT NULL,
    boxes BLOB NOT NULL
);
CREATE INDEX classifications_subject ON classifications (subject_id, n);
CREATE TABLE skills (
    version INTEGER PRIMARY KEY,
    after INTEGER NOT NULL UNIQUE,
    made REAL NOT NULL,
    seconds REAL NOT NULL,
    volunteers BLOB NOT NULL,
    population TEXT NOT NULL
);
CREATE TABLE subjects (
    subject_id INTEGER PRIMARY KEY,
    n INTEGER NOT NULL,
    retired_at INTEGER,
    reply BLOB,
    updated REAL NOT NULL
);
"""

#: version -> the SQL that brings a file of that version to the next one
MIGRATIONS: dict[int, str] = {
    # 2: the marks each extract had dropped (other task, other tool), counted
    1: "ALTER TABLE extracts ADD COLUMN dropped TEXT NOT NULL DEFAULT '{}'",
    # 3: the gold subjects' prefixes' labels with their verdicts (the live label map's rows)
    2: "CREATE TABLE gold_rows (g INTEGER PRIMARY KEY, rows BLOB NOT NULL)",
    # 4: each check of the gold before a label map learned from it is used
    3: "CREATE TABLE gold_checks (map INTEGER PRIMARY KEY, g INTEGER NOT NULL, "
    "verdict TEXT NOT NULL, used INTEGER NOT NULL, report TEXT NOT NULL)",
}
#: the tables a clumpscout service database holds
TABLES = ("classifications", "extracts", "meta", "skills", "subjects")


class StoreError(InputError):
    """The database cannot be used: the service stops at start with this message."""


def connect(path, timeout: float = 30.0) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, FULL sync."""
    con = sqlite3.connect(str(path), timeout=timeout, isolation_level=None, check_same_thread=False)
    con.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    con.execute("PRAGMA synchronous = FULL")
    return con


def _tables(con) -> list[str]:
    return sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))


def open_store(path, fingerprint: dict) -> sqlite3.Connection:
    """Open (or make) the service database at ``path`` for writing; see the module
    docstring for every check. Raises :class:`StoreError`."""
    path = Path(path)
    if not path.parent.is_dir():
        raise StoreError("cannot open the database: its folder does not exist", path=path)
    new = not path.exists() or path.stat().st_size == 0
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise StoreError("cannot open the database: not readable and writable", path=path)
    try:
        con = connect(path)
        mode = con.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        version = con.execute("PRAGMA user_version").fetchone()[0]
        tables = _tables(con)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot open the database ({exc})", path=path) from None
    if mode.lower() != "wal":
        raise StoreError(f"cannot put the database in WAL mode (journal mode {mode})", path=path)
    if version == 0 and not tables:
        _create(con, fingerprint)
        log.info("made a new service database (schema version %d)", SCHEMA_VERSION)
        return con
    if new:  # pragma: no cover - an empty file has no tables
        raise StoreError("cannot open the database", path=path)
    if version == 0 or (version == SCHEMA_VERSION and not set(TABLES) <= set(tables)):
        raise StoreError(
            f"not a clumpscout service database (tables: {', '.join(tables) or 'none'}); "
            "give --db a new file or the service's own",
            path=path,
        )
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"the database has schema version {version}, newer than this clumpscout reads "
            f"({SCHEMA_VERSION}): run the clumpscout that made it, or a newer one",
            path=path,
        )
    if version < SCHEMA_VERSION:
        migrate(con, version, path)
    _check_fingerprint(con, fingerprint, path)
    return con


def _create(con, fingerprint: dict) -> None:
    con.execute("BEGIN IMMEDIATE")
    for stmt in _SCHEMA_V1.split(";"):
        if stmt.strip():
            con.execute(stmt)
    for v in range(1, SCHEMA_VERSION):
        for stmt in MIGRATIONS[v].split(";"):
            if stmt.strip():
                con.execute(stmt)
    con.execute("INSERT INTO meta VALUES ('settings', ?)", (json.dumps(fingerprint),))
    con.execute(
        "INSERT INTO meta VALUES ('made', ?)", (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),)
    )
    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    con.execute("COMMIT")


def migrate(con, version: int, path=None) -> None:
    """Bring a database of schema ``version`` to :data:`SCHEMA_VERSION`, in one
    transaction (a failure leaves it as it was)."""
    con.execute("BEGIN IMMEDIATE")
    try:
        for v in range(version, SCHEMA_VERSION):
            for stmt in MIGRATIONS[v].split(";"):
                if stmt.strip():
                    con.execute(stmt)
        con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        con.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        con.execute("ROLLBACK")
        raise StoreError(
            f"migrating the database from schema {version} failed ({exc})", path=path
        ) from None
    log.info("migrated the database from schema version %d to %d", version, SCHEMA_VERSION)


def _check_fingerprint(con, fingerprint: dict, path) -> None:
    row = con.execute("SELECT value FROM meta WHERE key = 'settings'").fetchone()
    stored = json.loads(row[0]) if row else {}
    now = json.loads(json.dumps(fingerprint))
    differ = sorted(k for k in set(stored) | set(now) if stored.get(k) != now.get(k))
    if differ:
        shown = "; ".join(f"{k}: {stored.get(k)!r} there, {now.get(k)!r} now" for k in differ[:4])
        raise StoreError(
            f"the database's decisions were made with other settings ({shown}): run with "
            "the config it was made with, or give --db a new file",
            path=path,
        )


class Lock:
    """The service's hold on its database: one service per file (a second one stops)."""

    def __init__(self, path):
        self.path = Path(str(path) + ".lock")
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self.fd)
            raise StoreError("another clumpscout serve uses this database", path=path) from None

    def release(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


# ------------------------------------------------------------------ skills


def skills_blob(skills: LiveSkills) -> tuple[bytes, str]:
    """(volunteers as Parquet, population as JSON) of ``skills``."""
    df = pd.DataFrame(
        {
            "volunteer": pd.array(skills.volunteer.astype(str), dtype="str"),
            "p_fn": skills.vp.p_fn,
            "fp_rate": skills.vp.lam,
            "sigma2": skills.vp.sigma2,
        }
    )
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue(), json.dumps(skills.pop.to_dict())


def skills_from_blob(volunteers: bytes, population: str) -> LiveSkills:
    return LiveSkills.from_tables(pd.read_parquet(io.BytesIO(volunteers)), json.loads(population))


def latest_skills(con) -> tuple[int, int, LiveSkills | None]:
    """(version, after, skills) of the newest refit; (0, 0, None) before the first."""
    row = con.execute(
        "SELECT version, after, volunteers, population FROM skills ORDER BY version DESC LIMIT 1"
    ).fetchone()
    if row is None:
        return 0, 0, None
    return int(row[0]), int(row[1]), skills_from_blob(row[2], row[3])


def write_skills(con, after: int, skills: LiveSkills, seconds: float) -> int | None:
    """Store a refit fitted on the classifications of rank < ``after``; its version, or
    None when a refit at that point is already there (another process was first)."""
    vol, pop = skills_blob(skills)
    con.execute("BEGIN IMMEDIATE")
    try:
        if con.execute("SELECT 1 FROM skills WHERE after = ?", (after,)).fetchone():
            con.execute("ROLLBACK")
            return None
        last = con.execute(
            "SELECT COALESCE(MAX(after), 0), COALESCE(MAX(version), 0) FROM skills"
        ).fetchone()
        if after < last[0]:  # a newer refit is there already
            con.execute("ROLLBACK")
            return None
        version = int(last[1]) + 1
        con.execute(
            "INSERT INTO skills VALUES (?, ?, ?, ?, ?, ?)",
            (version, after, time.time(), float(seconds), vol, pop),
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return version


# ------------------------------------------------------------------ classifications


def boxes_blob(boxes: np.ndarray) -> bytes:
    return np.ascontiguousarray(boxes, dtype="<f8").tobytes()


def boxes_from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<f8").reshape(-1, 5)


def counted_before(con, after: int) -> pd.DataFrame:
    """Every counted classification of rank g < ``after``: subject_id, n, volunteer, image
    width and height, boxes."""
    cols = ["subject_id", "n", "volunteer", "width", "height", "boxes"]
    rows = con.execute(
        f"SELECT {', '.join(cols)} FROM classifications WHERE g < ? ORDER BY g", (after,)
    ).fetchall()
    return pd.DataFrame(rows, columns=cols)
