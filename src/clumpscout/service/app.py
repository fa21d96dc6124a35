"""The ASGI app of ``clumpscout serve`` (Starlette; docs/service.md#endpoints).

* ``POST /reduce``: Caesar's external reducer (one subject's extracts, JSON); the reply is
  one flat JSON object, the subject's reduction (``retire``, ``classifications``,
  ``expected_count``, ``count_low``, ``count_high``, ``open_objects``, ``policy``,
  ``setting``, ``skills_version``, ``labels``: [x1, y1, x2, y2, p_fp, marks] ...).
* ``POST /classifications``: rows of a Zooniverse classification export (JSON array of
  objects, or CSV text); ``{"subjects": [reply, ...]}``, one reply per subject.
* ``GET /subjects/{subject_id}``: the subject's latest reply.
* ``GET /health``: no credential needed (``status``, the gold standard's state, the label
  map in use); ``GET /metrics``: Prometheus text.

Every endpoint but ``/health`` needs the credential of ``--auth-file`` (HTTP Basic, or the
whole ``user:password`` line as a bearer token), compared in constant time
(:class:`Credential`); 401 otherwise. A body longer than ``serve.max_body_bytes`` is refused
(413) before it is read whole; anything wrong with a request is a 4xx with one line
``{"error": "..."}`` and nothing of it stored.

Concurrency (docs/decisions.md#live-service): requests are parsed and checked in the
threadpool, then queued to one writer thread that takes every request waiting at once as
one batch (:meth:`clumpscout.service.engine.Engine.process`: one transaction, one
assessment of all their subjects), and answers each when the batch is committed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import logging
import os
import queue
import stat
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from clumpscout.errors import InputError
from clumpscout.model.live import apply_map, assess_model
from clumpscout.service import store
from clumpscout.service.engine import Engine
from clumpscout.service.extracts import BadRequest, caesar_extracts, export_rows
from clumpscout.service.frames import frame_of
from clumpscout.service.settings import Settings

log = logging.getLogger(__name__)

#: most requests the writer takes into one batch
MAX_BATCH = 64
#: latency histogram buckets (seconds)
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Credential:
    """The service's one credential, from the first line ``user:password`` of a file.

    :meth:`check` accepts ``Authorization: Basic base64(user:password)`` or ``Bearer
    user:password``; user and password are both compared, always, as SHA-256 digests with
    :func:`hmac.compare_digest`, so a wrong password takes as long as a wrong user and
    neither's length shows. The secret is never logged nor shown (repr hides it)."""

    def __init__(self, user: str, password: str):
        self._user = hashlib.sha256(user.encode()).digest()
        self._password = hashlib.sha256(password.encode()).digest()
        self._line = hashlib.sha256(f"{user}:{password}".encode()).digest()

    def __repr__(self) -> str:
        return "Credential(<hidden>)"

    @classmethod
    def from_file(cls, path) -> Credential:
        p = Path(path)
        try:
            line = p.read_text(encoding="utf-8").splitlines()[0].strip() if p.stat().st_size else ""
        except (OSError, UnicodeDecodeError, IndexError) as exc:
            raise InputError(
                f"cannot read the auth file ({type(exc).__name__})", path=path
            ) from None
        user, sep, password = line.partition(":")
        if not sep or not user or not password:
            raise InputError("the auth file's first line must be user:password", path=path)
        if p.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning(
                "the auth file %s can be read by others than its owner (chmod 600 it)", path
            )
        return cls(user, password)

    def check(self, header: str | None) -> bool:
        """Does an Authorization header carry the credential?"""
        user = password = line = b""
        if header:
            scheme, _, value = header.strip().partition(" ")
            value = value.strip()
            if scheme.lower() == "basic":
                try:
                    decoded = base64.b64decode(value, validate=True).decode("utf-8")
                except (binascii.Error, UnicodeDecodeError, ValueError):
                    decoded = ""
                u, _, pw = decoded.partition(":")
                user, password = u.encode(), pw.encode()
            elif scheme.lower() == "bearer":
                line = value.encode()
        if line:
            return hmac.compare_digest(hashlib.sha256(line).digest(), self._line)
        ok_user = hmac.compare_digest(hashlib.sha256(user).digest(), self._user)
        ok_password = hmac.compare_digest(hashlib.sha256(password).digest(), self._password)
        return ok_user & ok_password


class Metrics:
    """Counters for /metrics (Prometheus text format 0.0.4)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = {}
        self.latency: dict[str, list] = {}

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        with self.lock:
            key = (endpoint, status)
            self.requests[key] = self.requests.get(key, 0) + 1
            h = self.latency.setdefault(endpoint, [np.zeros(len(BUCKETS) + 1, np.int64), 0.0, 0])
            h[0][np.searchsorted(BUCKETS, seconds)] += 1
            h[1] += seconds
            h[2] += 1

    def text(self, engine: Engine) -> str:
        out = [
            "# HELP clumpscout_requests_total Requests by endpoint and status.",
            "# TYPE clumpscout_requests_total counter",
        ]
        with self.lock:
            for (ep, st), n in sorted(self.requests.items()):
                out.append(f'clumpscout_requests_total{{endpoint="{ep}",status="{st}"}} {n}')
            out += [
                "# HELP clumpscout_request_seconds Request latency by endpoint.",
                "# TYPE clumpscout_request_seconds histogram",
            ]
            for ep, (counts, total, n) in sorted(self.latency.items()):
                cum = np.cumsum(counts)
                for b, c in zip(BUCKETS, cum[:-1], strict=True):
                    out.append(f'clumpscout_request_seconds_bucket{{endpoint="{ep}",le="{b}"}} {c}')
                out.append(f'clumpscout_request_seconds_bucket{{endpoint="{ep}",le="+Inf"}} {n}')
                out.append(f'clumpscout_request_seconds_sum{{endpoint="{ep}"}} {total:.6f}')
                out.append(f'clumpscout_request_seconds_count{{endpoint="{ep}"}} {n}')
        e = engine
        gauges = [
            ("classifications_stored", "Classifications counted by the model.", "counter", e.count),
            ("subjects_retired", "Subjects the policy retired.", "gauge", e.retired),
            ("skills_version", "The skills version replies use.", "gauge", e.version),
            ("skills_fitted_on", "Classifications the current skills were fitted on.", "gauge", e.after),
            ("next_refit_at", "Classifications at which the next refit is due.", "gauge", e.next_point),
            ("refits_total", "Refits taken up since the start.", "counter", e.refits),
            ("refit_seconds_total", "Seconds those refits took.", "counter", round(e.refit_seconds, 6)),
            ("refit_running", "1 while a background refit runs.", "gauge", int(e.refit_running)),
            ("label_map", "The label map replies use (0: the default; k: the k-th learned from the gold).", "gauge", e.map_in_use),
            ("run_health_warnings", "Run health warnings every reply carries (the gold's check).", "gauge", len(e.warnings)),
        ]  # fmt: skip
        out += [
            "# HELP clumpscout_marks_dropped_total Marks of other tasks or tools, not read.",
            "# TYPE clumpscout_marks_dropped_total counter",
        ]
        out += [
            f'clumpscout_marks_dropped_total{{reason="{k}"}} {v}'
            for k, v in sorted(e.dropped.items())
        ]
        for name, help_, kind, value in gauges:
            out += [f"# HELP clumpscout_{name} {help_}", f"# TYPE clumpscout_{name} {kind}"]
            out.append(f"clumpscout_{name} {value}")
        if e.watch is not None:
            out += e.watch.metrics()
        return "\n".join(out) + "\n"


def _json(doc, status: int = 200) -> Response:
    return Response(orjson.dumps(doc), status_code=status, media_type="application/json")


def _error(message: str, status: int) -> Response:
    headers = {"WWW-Authenticate": 'Basic realm="clumpscout"'} if status == 401 else None
    return Response(
        orjson.dumps({"error": message}), status, headers=headers, media_type="application/json"
    )


class Service:
    """The service's state: the database, the engine and its writer thread."""

    def __init__(self, settings: Settings, db_path, credential: Credential):
        self.settings = settings
        self.db_path = Path(db_path)
        self.credential = credential
        self.metrics = Metrics()
        self.queue: queue.Queue = queue.Queue()
        self.local = threading.local()
        self.lock = store.Lock(self.db_path)
        try:
            self.con = store.open_store(self.db_path, settings.fingerprint())
            self.engine = Engine(self.con, settings, self.db_path)
        except BaseException:
            self.lock.release()
            raise
        self.writer = threading.Thread(target=self._write, name="clumpscout-writer", daemon=True)

    # ---------------------------------------------------------------- life

    def start(self) -> None:
        """Load the model's kernels (one tiny assessment), then start the writer."""
        t0 = time.perf_counter()
        g = self.settings
        w, h = g.geometry.image_size or (100.0, 100.0)
        dummy = frame_of([(0, [(1, "a", np.zeros((0, 5)))])], [(w, h)])
        apply_map(assess_model(dummy, self.engine.skills, g.params), None, g.policy.horizon)
        log.info("model loaded in %.1f s", time.perf_counter() - t0)
        self.writer.start()

    def stop(self) -> None:
        """Finish what is queued, then close (SIGTERM: uvicorn has let the requests in
        flight finish first)."""
        if self.writer.is_alive():
            self.queue.put(None)
            self.writer.join()
        self.engine.close()
        self.con.close()
        self.lock.release()
        log.info("stopped: %d classifications stored", self.engine.count)

    def _write(self) -> None:
        while True:
            try:
                item = self.queue.get(timeout=1.0)
            except queue.Empty:
                with _logged("refit poll"):
                    self.engine.poll_refit()
                continue
            if item is None:
                return
            batch = [item]
            while len(batch) < MAX_BATCH:
                try:
                    nxt = self.queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self.queue.put(None)  # stop after this batch
                    break
                batch.append(nxt)
            reqs = [r for requests, _ in batch for r in requests]
            try:
                results = self.engine.process(reqs)
            except Exception as exc:  # a bug: every request of the batch fails, logged
                log.exception("a batch of %d requests failed", len(reqs))
                for _, fut in batch:
                    fut.set_exception(exc)
                continue
            k = 0
            for requests, fut in batch:
                fut.set_result(results[k : k + len(requests)])
                k += len(requests)

    async def submit(self, requests: list) -> list:
        fut: Future = Future()
        self.queue.put((requests, fut))
        return await asyncio.wrap_future(fut)

    def reader(self):
        """A read-only connection of this thread (the GET endpoints)."""
        con = getattr(self.local, "con", None)
        if con is None:
            con = self.local.con = store.connect(self.db_path)
        return con

    # ---------------------------------------------------------------- endpoints

    async def body(self, request: Request) -> bytes:
        limit = self.settings.max_body_bytes
        length = request.headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                raise BadRequest("Content-Length is not a number")
            if int(length) > limit:
                raise BadRequest(
                    f"body of {int(length)} bytes, over the limit of {limit} (serve.max_body_bytes)",
                    413,
                )
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BadRequest(
                    f"body over the limit of {limit} bytes (serve.max_body_bytes)", 413
                )
            chunks.append(chunk)
        return b"".join(chunks)

    async def reduce(self, request: Request) -> Response:
        body = await self.body(request)
        subject, items = await run_in_threadpool(caesar_extracts, body, self.settings)
        (reply,) = await self.submit([(subject, items)])
        if isinstance(reply, BadRequest):
            raise reply
        return _json(reply)

    async def classifications(self, request: Request) -> Response:
        body = await self.body(request)
        ctype = request.headers.get("content-type", "application/json").lower()
        by_subject = await run_in_threadpool(export_rows, body, ctype, self.settings)
        replies = await self.submit(sorted(by_subject.items()))
        bad = [r for r in replies if isinstance(r, BadRequest)]
        if bad:
            raise bad[0]
        return _json({"subjects": replies})

    async def subject(self, request: Request) -> Response:
        sid = request.path_params["subject_id"]
        if not sid.isdigit() or len(sid) > 19:
            raise BadRequest(f"subject id {sid[:40]!r} is not an integer")

        def read():
            row = (
                self.reader()
                .execute("SELECT reply FROM subjects WHERE subject_id = ?", (int(sid),))
                .fetchone()
            )
            return None if row is None or row[0] is None else row[0]

        raw = await run_in_threadpool(read)
        if raw is None:
            return _error(f"subject {sid} has no classification here", 404)
        return Response(raw, media_type="application/json")

    async def health(self, request: Request) -> Response:
        """No credential: nothing secret (the gold's state names its file, never a
        credential)."""
        e = self.engine
        return _json(
            {
                "status": "ok",
                "gold": e.gold_status(),
                "label_map": "default" if not e.map_in_use else f"gold {e.map_in_use}",
            }
        )

    async def metrics_text(self, request: Request) -> Response:
        return Response(self.metrics.text(self.engine), media_type="text/plain; version=0.0.4")


@contextlib.contextmanager
def _logged(what: str):
    try:
        yield
    except Exception:
        log.exception("%s failed", what)


def build_app(service: Service) -> Starlette:
    """The Starlette app around ``service``, with the credential and error handling."""

    def route(path, fn, methods, name):
        async def endpoint(request: Request) -> Response:
            t0 = time.perf_counter()
            try:
                response = await fn(request)
            except BadRequest as exc:
                response = _error(exc.message, exc.status)
            except Exception:  # a bug; the caller gets one line, the log the traceback
                log.exception("%s %s failed", request.method, path)
                response = _error("internal error (logged by the service)", 500)
            service.metrics.observe(name, response.status_code, time.perf_counter() - t0)
            return response

        return Route(path, endpoint, methods=methods)

    routes = [
        route("/reduce", service.reduce, ["POST"], "reduce"),
        route("/classifications", service.classifications, ["POST"], "classifications"),
        route("/subjects/{subject_id}", service.subject, ["GET"], "subjects"),
        route("/health", service.health, ["GET"], "health"),
        route("/metrics", service.metrics_text, ["GET"], "metrics"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await run_in_threadpool(service.start)
        try:
            yield
        finally:
            await run_in_threadpool(service.stop)

    app = Starlette(routes=routes, lifespan=lifespan)
    return _Guard(app, service)


class _Guard:
    """ASGI middleware: the credential on every path but /health, before the body is read;
    unknown paths and methods answer 404 / 405 as JSON."""

    def __init__(self, app, service: Service):
        self.app = app
        self.service = service

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope.get("path") != "/health":
            header = None
            for k, v in scope.get("headers", ()):
                if k == b"authorization":
                    header = v.decode("latin-1")
                    break
            if not self.service.credential.check(header):
                self.service.metrics.observe("unauthorized", 401, 0.0)
                await _error("a credential is needed (HTTP Basic or Bearer)", 401)(
                    scope, receive, send
                )
                return
        await self.app(scope, receive, send)


def credential_from_env_or_file(path) -> Credential:
    """The credential of ``--auth-file`` (never of the command line)."""
    if path is None or not os.path.exists(path):
        raise InputError(
            "the auth file does not exist (--auth-file: first line user:password)", path=path
        )
    return Credential.from_file(path)
