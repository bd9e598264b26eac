"""TraceRows: NVTX ranges around host code only are dropped, their host time kept."""

from emulator.capture.trace_rows import TraceRows


def _rows(spec):
    rows = TraceRows(0)
    for kind, op, gap in spec:
        rows.add(kind=kind, op=op, stream=0, iteration=0, host_gap_s=gap)
    return rows


def test_empty_ranges_go_and_their_gaps_move_to_the_next_row():
    rows = _rows([("marker", "nvtx::range_push", 1.0),  # outer range, holds only an empty inner one
                  ("marker", "nvtx::range_push", 2.0),
                  ("marker", "nvtx::range_pop", 3.0),
                  ("marker", "nvtx::range_pop", 4.0),
                  ("marker", "nvtx::range_push", 5.0),  # holds a kernel: stays
                  ("kernel", "aten::mm", 6.0),
                  ("marker", "nvtx::range_pop", 7.0),
                  ("marker", "nvtx::range_push", 8.0)])  # never closed: stays
    assert rows.drop_empty_ranges() == 4
    assert rows.cols["op"] == ["nvtx::range_push", "aten::mm", "nvtx::range_pop", "nvtx::range_push"]
    assert rows.cols["host_gap_s"] == [15.0, 6.0, 7.0, 8.0]
    assert rows.cols["seq"] == [0, 1, 2, 3]
    assert rows.to_table().num_rows == 4


def test_nothing_to_drop_changes_nothing():
    rows = _rows([("kernel", "aten::mm", 1.0), ("marker", "nvtx::mark", 2.0)])
    assert rows.drop_empty_ranges() == 0
    assert rows.cols["host_gap_s"] == [1.0, 2.0]
