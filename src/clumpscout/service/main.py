"""``clumpscout serve``: the live retirement service on uvicorn (docs/service.md).

Command line::

    clumpscout serve --config FILE --db state.sqlite --auth-file secret.txt
        [--subjects subjects.parquet] [--host 127.0.0.1] [--port 8080]
        [--ssl-certfile cert.pem --ssl-keyfile key.pem] [--access-log]

The credential is read from ``--auth-file`` (first line ``user:password``), never from the
command line. A database that cannot be used, a config the service cannot run with or an
unreadable auth file stops it at start with one line (exit 2). SIGTERM (and Ctrl-C) stop
taking connections, finish the requests in flight, commit and exit 0.
"""

from __future__ import annotations

import argparse
import logging
import signal

from clumpscout.errors import InputError

log = logging.getLogger(__name__)


#: the options: (flag, keywords of ``add_argument``)
OPTIONS = (
    ("--config", {"help": "the workflow's config (extract:, export:, aggregate:, calibration:, replay:, serve:, gold:)"}),
    ("--db", {"required": True, "help": "the service's SQLite file (made when absent)"}),
    ("--auth-file", {"required": True, "help": "a file whose first line is user:password (chmod 600)"}),
    ("--subjects", {"help": "subjects table of clumpscout subjects (box side and image size per subject)"}),
    ("--host", {"default": "127.0.0.1", "help": "address to listen on"}),
    ("--port", {"type": int, "default": 8080, "help": "port to listen on"}),
    ("--ssl-certfile", {"help": "TLS certificate (PEM): serve https"}),
    ("--ssl-keyfile", {"help": "TLS private key (PEM, not encrypted)"}),
    ("--access-log", {"action": "store_true", "help": "log every request line (uvicorn)"}),
)  # fmt: skip


def add_arguments(p: argparse.ArgumentParser) -> None:
    for flag, kw in OPTIONS:
        p.add_argument(flag, **kw)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from clumpscout.service.app import Service, build_app, credential_from_env_or_file
    from clumpscout.service.settings import load

    if bool(args.ssl_certfile) != bool(args.ssl_keyfile):
        raise InputError("TLS needs both --ssl-certfile and --ssl-keyfile")
    credential = credential_from_env_or_file(args.auth_file)
    settings = load(args.config, args.subjects)
    service = Service(settings, args.db, credential)
    log.info(
        "serving %s on %s://%s:%d (policy %s, refits %s every %d)",
        args.db, "https" if args.ssl_certfile else "http", args.host, args.port,
        settings.policy.name, settings.refit, settings.refit_every,
    )  # fmt: skip
    # uvicorn logs through the package's handlers (stderr and --log): its own logging
    # config would close them (logging.config.dictConfig closes every existing handler)
    ours = logging.getLogger("clumpscout")
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers, lg.propagate = list(ours.handlers), False
        lg.setLevel(logging.INFO)
    config = uvicorn.Config(
        build_app(service), host=args.host, port=args.port, ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile, access_log=args.access_log, lifespan="on",
        timeout_graceful_shutdown=None, server_header=False, log_config=None,
    )  # fmt: skip
    server = uvicorn.Server(config)
    # uvicorn handles SIGTERM / SIGINT itself (stop accepting, finish the requests in
    # flight, shut the app down) and then raises the signal again for the handler it found:
    # a graceful stop is not an error, so that handler does nothing
    signal.signal(signal.SIGTERM, lambda *_: None)
    server.run()
    return 0 if server.started else 1
