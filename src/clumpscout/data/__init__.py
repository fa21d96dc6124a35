"""Reading volunteers' work: Zooniverse exports to clicks, subjects, boxes and subsamples.

====================  ===================================================================
``zooniverse``        classification export -> tidy clicks table (§3.2): the reader and CLI
``export_csv``        the reader's limits and CSV helpers (header, streamed columns, ids, dates)
``subjects_export``   the Zooniverse subject export (image sizes, metadata)
``export_selection``  the workflow and versions read, de-duplication
``annotations``       pass 2: annotations JSON -> clicks and drawn shapes, limits, bot flags
``clicks``            what a click is (shared by the reader and the ledger)
``subjects``          cutout side and PSF FWHM per subject (§2.2, §3.3)
``boxes``             clicks and drawn shapes -> boxes of side 2 FWHM (§3.3)
``clicks_table``      the clicks table boxes reads (extract's Parquet or a flattened CSV)
``box_side``          the box side measured on the click scatter (``box_side: auto``)
``subsample``         the Z~_n subsamples of n classifications per subject (§6.1)
``ledger``            every input click accounted for, counted independently
``gold``              the project's gold standard: expert marks or counts, read and checked
====================  ===================================================================
"""
