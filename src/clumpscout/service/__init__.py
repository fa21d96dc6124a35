"""``clumpscout serve``: the live retirement service (docs/service.md).

A Zooniverse project's Caesar calls it as an external reducer: every POST carries one
subject's extracts so far; the service stores each classification once, assesses the
subject with the volunteers' skills known at that moment and answers with a flat reduction
(``retire``, the counts, the labels) that a Caesar subject rule can read. The volunteers'
skills are refitted from every stored classification at the replay's refit points, so the
service retires subjects where ``clumpscout replay`` does (docs/decisions.md#live-service).

Modules: :mod:`~clumpscout.service.settings` (the config read once),
:mod:`~clumpscout.service.extracts` (Caesar's extracts and export rows -> boxes, every check),
:mod:`~clumpscout.service.store` (the SQLite file, its schema and migrations),
:mod:`~clumpscout.service.engine` (the live assessment, retirement and refits),
:mod:`~clumpscout.service.refit` (a refit in its own process),
:mod:`~clumpscout.service.app` (the ASGI app: endpoints, credential, limits, metrics) and
:mod:`~clumpscout.service.main` (the command line, uvicorn).

Layering: above config / io / errors / data / model, below the command line; it never
imports clumpscout.evaluation or clumpscout.figures.
"""
