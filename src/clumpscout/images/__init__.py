"""Subject images and photometry (paper §2.2, §6.3).

===============  ============================================================
``cutouts``      SDSS frames -> colour subject images (FITS/WCS with astropy)
``render``       SDSS-like frames of a simulated universe
``photometry``   g, r, i flux inside label boxes
===============  ============================================================
"""
