"""Reading volunteers' work: Zooniverse exports to clicks, subjects, boxes and subsamples.

==========================  =============================================================
``zooniverse``              classification export -> tidy clicks table (§3.2): the reader, CLI
``zooniverse_csv``          the reader's limits and CSV helpers (header, streamed columns, ids)
``zooniverse_subjects``     the Zooniverse subject export (image sizes, metadata)
``zooniverse_selection``    the workflow and versions read, de-duplication
``zooniverse_annotations``  pass 2: annotations JSON -> clicks and drawn shapes, bot flags
``zooniverse_buckets``      pass 2's clicks held by subject range (extract's memory)
``click_definition``        what a click is (shared by the reader and the ledger)
``subjects``                cutout side and PSF FWHM per subject (§2.2, §3.3)
``clicks_table``            the clicks table boxes reads (extract's Parquet or a flattened CSV)
``boxes``                   clicks and drawn shapes -> boxes of side 2 FWHM (§3.3)
``box_side``                the box side measured on the click scatter (``box_side: auto``)
``gold``                    the project's gold standard: expert marks or counts, checked
``subsample``               the Z~_n subsamples of n classifications per subject (§6.1)
``ledger``                  every input click accounted for, counted independently
``ledger_recount``          the ledger's own count of the export (not the reader's)
==========================  =============================================================
"""
