"""Collate: an emulation folder as every rank's program (views of the emulated ranks' traces), checked
for collectives that would hang.

    job.py    read, index (RepTrace), expand deduplicated ranks, the CollatedJob
    views.py  a rank as its representative's distinct groups and peers (RankView, RowSlots)
    hangs.py  every group member issued the same collectives, every send has its receive
"""
