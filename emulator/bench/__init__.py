"""`make bench`: how fast maya is on this machine.

    emulation.py   emulation speed of the examples (GPT-2 small, Llama-3-8B FSDP2, a 64-rank 3-D job)
    simulation.py  simulation speed (an 8-rank folder, a 1,024-rank 3-D job)
    repeatability.py  the spread of one program's prediction over five emulations (host- and device-bound)
    synthetic.py   synthetic traces in the trace schema: fixtures for the simulation benchmark and the tests
"""
