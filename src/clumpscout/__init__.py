"""clumpscout: aggregate citizen-science clicks into a catalogue of objects with calibrated
false-positive probabilities (Galaxy Zoo: Clump Scout, Dickinson et al.).

Decisions where the paper is silent or ambiguous: ``docs/decisions.md``; where each equation
of the two consensus models lives: ``docs/model.md``.

Subpackages, in pipeline order (each lists its modules):

==============  ====================================================================
``simulation``  simulated universes written as Zooniverse exports (the ground truth)
``data``        export -> clicks -> subjects -> boxes -> subsamples; the click ledger
``model``       the two consensus models (§4-5), run health
``evaluation``  expert / truth comparison (§6.3), baselines, headline numbers
``images``      SDSS frames -> colour subject images, photometry (§2.2)
``figures``     the paper's figures
==============  ====================================================================

Top level: ``cli`` (the ``clumpscout`` command), ``io`` (atomic, umask-respecting
writes), ``errors`` (the input-error type), ``logs`` (logging and progress bars).
"""

__version__ = "0.1.0"
