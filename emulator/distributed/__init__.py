"""The recording process group of an emulated rank.

    fake_pg.py      any init_process_group -> torch's fake backend; DDP patches; group log; Work.wait
    collectives.py  group, ranks, nccl-tests size, peer and sequence number of a c10d call
    objects.py      Python-object collectives between emulated ranks (through files)
"""
