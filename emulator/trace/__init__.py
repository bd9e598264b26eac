"""The trace: the contract between capture and prediction, and the files beside it.

    schema.py      the columns (version 3) and the upgrade of version-1 tables
    layout.py      every path of an output folder
    io.py          atomic reads and writes of traces and summaries
    summaries.py   RankSummary, EmulationSummary
    workhash.py    the one hash of a rank's work (rank deduplication compares it)
    partitions.py  partitions of the world read off the process groups
    expand.py      a representative's trace rewritten as another rank of its role
"""
