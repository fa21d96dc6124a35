"""Subject images and photometry (paper §2.2, §6.3).

===============  ============================================================
``cutouts``      SDSS frames -> colour subject images (cutout, register, colour)
``geometry``     native pixels, the cutout grid and its WCS (astropy)
``frames``       SDSS frames read, grouped and resampled onto a cutout (WCS)
``real_demo``    the real SDSS frames of ../shared as a worked example
``render``       SDSS-like frames of a simulated universe
``photometry``   g, r, i flux inside label boxes
===============  ============================================================
"""
